"""The options of ``fedmc run``, declared once: ``run``, ``federate split``/``local`` and
``audit`` take theirs from here (:func:`with_options`), turn what the user typed into
:class:`fedmc.run.settings.RunOptions` (:func:`run_options`; resolved, with the notes on
the defaults printed: :func:`resolved_run`), and report an error of a lower
layer by the flags the user typed (:func:`in_flags`: the settings its message marks, by one
table from settings' fields to flags).

An option whose default does not depend on other settings shows the default of its
:class:`~fedmc.run.settings.RunOptions` field; the others default to nothing, and
:func:`fedmc.run.settings.resolve` chooses them.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import typer

from fedmc.algorithms.registry import algorithm_names, interactions_algorithms, specs
from fedmc.data.catalog import dataset_names
from fedmc.errors import ConfigError, printable, worded
from fedmc.federation.settings import Backend, EarlyStopping
from fedmc.privacy.accounting import UserDP
from fedmc.run.data_settings import DataSettings
from fedmc.run.options import IMPLICIT_RANKING_K, RunOptions, default_of
from fedmc.run.settings import DEFAULT_VALIDATION, TUNE_VALIDATION
from fedmc.run.spec import RunSpec

ALGO = "Algorithm parameters"
DATA = "Data"
PROTO = "Run"


def _default(name: str) -> Any:
    return RunOptions.model_fields[name].default


def _paper_rounds() -> str:
    """The rounds of the algorithms' paper settings, ``"100 for a, b; 400 for c"``."""
    by_rounds: dict[int, list[str]] = {}
    for name, entry in specs().items():
        if "rounds" in entry.paper_settings:
            by_rounds.setdefault(entry.paper_settings["rounds"], []).append(name)
    return "; ".join(f"{rounds} for {', '.join(names)}"
                     for rounds, names in sorted(by_rounds.items()))


class Declared(NamedTuple):
    """One option: its Python type, default, help panel, flags (empty: from its name) and
    help text."""

    type: Any
    default: Any
    panel: str | None
    flags: tuple[str, ...]
    help: str

    def parameter(self, name: str, default: Any = inspect.Parameter.empty,
                  help: str | None = None) -> inspect.Parameter:
        """The keyword-only parameter ``name`` of a command (``default`` and ``help``
        replace the declared ones)."""
        option = typer.Option(*self.flags, help=help or self.help, rich_help_panel=self.panel)
        return inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[self.type, option],
            default=self.default if default is inspect.Parameter.empty else default)


OPTIONS: dict[str, Declared] = {
    "algorithm": Declared(
        str | None, None, PROTO, ("--algorithm", "-a"),
        f"Algorithm: {', '.join(algorithm_names())}."),
    "dataset": Declared(
        str | None, None, DATA, (),
        f"Named data set: {', '.join(dataset_names())}; default: the embedded synthetic set."),
    "ratings": Declared(
        Path | None, None, DATA, (),
        "A CSV/TSV/Parquet file of ratings."),
    "train": Declared(
        Path | None, None, DATA, (),
        "A file of training ratings (with --test: a fixed split)."),
    "test": Declared(
        Path | None, None, DATA, (),
        "A file of test ratings (with --train)."),
    "columns": Declared(
        str | None, None, DATA, (),
        "user,item,rating column names or 0-based positions."),
    "data_dir": Declared(
        Path | None, None, DATA, (),
        "Data folder (else $FEDMC_DATA, else ~/.cache/fedmc)."),
    "duplicates": Declared(
        str, _default("duplicates"), DATA, (),
        "Duplicate (user, item) pairs: error|last|mean."),
    "binary": Declared(
        Path | None, None, DATA, (),
        "A 0/1 matrix or transaction file (Boolean algorithms)."),
    "binarize": Declared(
        float | None, None, DATA, (),
        "Ratings >= T count as 1 (Boolean algorithms)."),
    "noise": Declared(
        float, _default("noise"), DATA, (),
        "XOR noise of --dataset synthetic-boolean."),
    "rows": Declared(
        int | None, None, DATA, (),
        "Rows of --dataset synthetic-boolean (default: in proportion to --clients)."),
    "normalize": Declared(
        str | None, None, DATA, (),
        "none|center|zscore (fitted on training ratings) | public (from the rating "
        "scale alone); default zscore, public with DP, none with --implicit."),
    "rating_scale": Declared(
        str | None, None, DATA, (),
        "The public rating scale LO,HI (e.g. 1,5): a rating outside it is refused (file and"
        " line); --normalize public maps it onto [-1, 1]; default: the named data set's, "
        "else inferred from the training ratings (shown in the summary)."),
    "implicit": Declared(
        bool, _default("implicit"), DATA, ("--implicit",),
        "Read every rating as an interaction (a click): implicit feedback, for "
        f"{', '.join(interactions_algorithms())}; ranking metrics at 10 by default."),
    "implicit_threshold": Declared(
        float | None, None, DATA, (),
        "With --implicit: only ratings >= T are interactions (default: every rating)."),
    "split": Declared(
        str, _default("split"), DATA, (),
        "random (per rating) | user (per-user holdout)."),
    "test_fraction": Declared(
        float, _default("test_fraction"), DATA, (),
        "Share of ratings held out."),
    "validation_fraction": Declared(
        float | None, None, DATA, (),
        "Share of every client's training ratings it keeps back as its validation cut "
        "(what --early-stopping and fedmc tune choose on; the test split never is); "
        f"default {DEFAULT_VALIDATION:g} with --early-stopping ({TUNE_VALIDATION:g} in fedmc "
        "tune), else none."),
    "clients": Declared(
        int | None, None, PROTO, (),
        "Number of clients p (default: the algorithm's paper settings, 100 for most)."),
    "partition": Declared(
        str | None, None, PROTO, (),
        "random|contiguous|powerlaw|user (one user per client); default: the "
        "algorithm's paper settings."),
    "active": Declared(
        str | None, None, PROTO, (),
        "Clients per round (uniform sampling): a number or 'all'; default min(10, "
        "clients), all with --partition user."),
    "sampling": Declared(
        str | None, None, PROTO, (),
        "uniform (fixed size) | bernoulli | replacement | cyclic (every client once in every "
        "1/--participation rounds, in a secret order: under DP the server's epsilon counts "
        "only the rounds a user takes part in) (default uniform)."),
    "participation": Declared(
        float | None, None, PROTO, (),
        "p_i for Bernoulli sampling, 1 / the cycle's rounds for cyclic participation "
        "(default active/clients)."),
    "dropout": Declared(
        float, _default("dropout"), PROTO, (),
        "Share of drawn clients that drop out of a round."),
    "rounds": Declared(
        int | None, None, PROTO, (),
        f"Communication rounds (default: the algorithm's paper settings: {_paper_rounds()})."),
    "eval_every": Declared(
        int, _default("eval_every"), PROTO, (),
        "Evaluate every this many rounds."),
    "seed": Declared(
        int, _default("seed"), PROTO, (),
        "Seed of split, partition, init and sampling."),
    "backend": Declared(
        str, _default("backend"), PROTO, (),
        "Where a simulation's clients live: batched (this process) | ray (--workers shards, "
        "each a Ray actor; pip install 'fedmc\\[ray]'; docs/ray.md)."),
    "workers": Declared(
        int | None, None, PROTO, (),
        f"Shards of the clients with --backend ray, one Ray actor each (default "
        f"{Backend.model_fields['workers'].default})."),
    "ray_address": Declared(
        str | None, None, PROTO, (),
        "The Ray cluster to join with --backend ray (auto, or the head's HOST:PORT; default: "
        "start Ray on this machine)."),
    "rank": Declared(
        int | None, None, ALGO, (),
        "Rank r."),
    "inner": Declared(
        int | None, None, ALGO, (),
        "Inner steps N."),
    "reg_u": Declared(
        str | None, None, ALGO, (),
        "R_i: l2|l1|elastic|nonneg|box|none."),
    "lam": Declared(
        float | None, None, ALGO, (),
        "lambda, weight of R_i."),
    "reg_v": Declared(
        str | None, None, ALGO, (),
        "R: l2|l1|elastic|nonneg|box|none."),
    "gamma": Declared(
        float | None, None, ALGO, (),
        "gamma, weight of R."),
    "beta": Declared(
        float | None, None, ALGO, (),
        "ADMM penalty beta."),
    "init_scale": Declared(
        float | None, None, ALGO, (),
        "Initial factors uniform on [0, X]."),
    "steps": Declared(
        str | None, None, ALGO, (),
        "paper (scalar L_W, L_U) | per-row (per user/item bounds)."),
    "biases": Declared(
        bool | None, None, ALGO, ("--biases/--no-biases",),
        "User and item biases."),
    "clip": Declared(
        bool | None, None, ALGO, ("--clip/--no-clip",),
        "Clip predictions to the rating range."),
    "param": Declared(
        list[str] | None, None, ALGO, ("--param", "-P"),
        "Any other algorithm parameter, KEY=VALUE (repeatable)."),
    "dp_epsilon": Declared(
        float | None, None, PROTO, (),
        "User-level DP: the run's budget epsilon (noise calibrated to the planned "
        "rounds; needs --dp-clip and --sampling bernoulli)."),
    "dp_delta": Declared(
        float, _default("dp_delta"), PROTO, (),
        "User-level DP: delta of the budget."),
    "dp_noise": Declared(
        float | None, None, PROTO, (),
        "User-level DP: noise multiplier (std / clip); epsilon is reported, and with "
        "--dp-epsilon a plan over budget is refused."),
    "dp_clip": Declared(
        float | None, None, PROTO, (),
        "User-level DP: L2 bound of one client's whole upload."),
    "dp_setup_scale": Declared(
        float | None, None, PROTO, (),
        "User-level DP: noise multiplier of a set-up upload (which every client sends) "
        f"over that of the rounds (default {default_of(UserDP, 'setup_scale'):g})."),
    "dp_setup_clip": Declared(
        float | None, None, PROTO, (),
        "User-level DP: L2 bound of one client's set-up upload (default --dp-clip); "
        "that exchange's noise scales with it."),
    "dp_unit": Declared(
        str, _default("dp_unit"), PROTO, (),
        "User-level DP: what one protected contribution is: user (one user per client, "
        "--partition user) or client (clients of several users: the guarantee is per "
        "client)."),
    "dp_against": Declared(
        str, _default("dp_against"), PROTO, (),
        "User-level DP: whom --dp-epsilon is promised against: server (it samples the "
        "cohorts, so no amplification by sampling is counted) or outsiders (who see the "
        "published model: less noise, and the server gets a larger epsilon, which the "
        "summary prints)."),
    "dp_mechanism": Declared(
        str | None, None, PROTO, (),
        "User-level DP: the noise: gaussian (on the sum) or skellam (integers each member adds "
        "inside the secure sum, exactly as a --secagg federation does; a simulation draws the "
        "same). Default: skellam with --secagg, gaussian otherwise."),
    "dp_reproducible": Declared(
        bool, _default("dp_reproducible"), PROTO, ("--dp-reproducible",),
        "User-level DP, research only: draw the noise and the sampling from --seed (the"
        " run repeats exactly but is NOT private; its outputs say so and keep their "
        "exact metrics)."),
    "early_stopping": Declared(
        bool, _default("early_stopping"), PROTO, ("--early-stopping",),
        "Stop when the validation metric (RMSE; NDCG@K with --implicit) has not improved "
        "for --patience rounds, and publish the model of its best round."),
    "patience": Declared(
        int | None, None, PROTO, (),
        "With --early-stopping: rounds without improvement before stopping (default "
        f"{EarlyStopping().patience})."),
    "min_delta": Declared(
        float | None, None, PROTO, (),
        "With --early-stopping: the smallest change that counts as an improvement "
        f"(default {EarlyStopping().min_delta:g})."),
    "refit": Declared(
        bool | None, None, PROTO, ("--refit/--no-refit",),
        "With --early-stopping: train again on every training rating (the validation cut "
        "too) for the best round's number of rounds and publish that model (default), or "
        "publish the best round's model itself."),
    "ranking_k": Declared(
        int | None, None, PROTO, (),
        "Add precision, recall, NDCG, MAP, hit rate and coverage at K (after training);"
        f" default {IMPLICIT_RANKING_K} with --implicit."),
    "save_user_factors": Declared(
        bool, _default("save_user_factors"), None, ("--save-user-factors",),
        "Save the user factors and rated items with the model (simulation studies: in a"
        " federation they stay on the clients)."),
    "out_dir": Declared(
        Path | None, None, None, ("--out",),
        "Output folder (default runs/<time>-<algorithm>-<data>)."),
    "overwrite": Declared(
        bool, False, None, ("--overwrite",),
        "Replace an earlier run in --out."),
    "quiet": Declared(
        bool, False, None, ("--quiet", "-q"),
        "No progress bar."),
}
"""Every option of ``fedmc run`` by its parameter name."""

NAMED_PARAMS = ("rank", "inner", "reg_u", "lam", "reg_v", "gamma", "beta", "init_scale",
                "steps", "biases", "clip")
"""The algorithm parameters with options of their own (``--param KEY=VALUE`` sets any)."""
def with_options(*names: str, extra: tuple[inspect.Parameter, ...] = (),
                 defaults: Mapping[str, Any] | None = None, helps: Mapping[str, str] | None = None,
                 ) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command ``command(**options)`` the declared options ``names`` (``defaults`` and
    ``helps`` replacing declared defaults and help texts) and the ``extra`` parameters, as its
    signature."""
    defaults, helps = defaults or {}, helps or {}

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        parameters = [OPTIONS[name].parameter(name, defaults.get(name, inspect.Parameter.empty),
                                              helps.get(name)) for name in names]
        command.__signature__ = inspect.Signature([*parameters, *extra])  # type: ignore[attr-defined]
        return command

    return decorate


def run_options(typed: Mapping[str, Any]) -> RunOptions:
    """What the user typed (a command's keyword arguments) as :class:`RunOptions`: the
    named algorithm parameters and ``--param`` items as ``params``, ``--columns``,
    ``--rating-scale`` and ``--active`` parsed; options the command does not take are unset."""
    params = {k: typed[k] for k in NAMED_PARAMS if typed.get(k) is not None}
    params.update(parse_params(typed.get("param") or []))
    values = {k: v for k, v in typed.items() if k in RunOptions.model_fields and v is not None}
    for name, parse in (("columns", parse_columns), ("rating_scale", _rating_scale),
                        ("active", _active)):
        if typed.get(name) is not None:
            values[name] = parse(typed[name])
    return RunOptions(**values, params=params)


def typed_of(options: RunOptions) -> dict[str, Any]:
    """The keyword arguments of ``fedmc run`` that ask for ``options``: the inverse of
    :func:`run_options` (an algorithm parameter with an option of its own by it, the others
    as ``--param`` items; :func:`command_words` writes them as a command)."""
    typed = {name: value for name, value in options if name != "params" and value is not None}
    for name in ("columns", "rating_scale"):
        if name in typed:
            typed[name] = ",".join(str(part) for part in typed[name])
    if "active" in typed:
        typed["active"] = str(typed["active"])
    typed.update({k: v for k, v in options.params.items() if k in NAMED_PARAMS})
    typed["param"] = [f"{k}={_param_text(v)}" for k, v in options.params.items()
                      if k not in NAMED_PARAMS]
    return typed


def _param_text(value: Any) -> str:
    """A parameter's value as ``--param`` reads it back (the algorithm's ``Config`` parses
    text)."""
    return value if isinstance(value, str) else json.dumps(value)


def resolved_run(typed: Mapping[str, Any]) -> RunSpec:
    """The run the user typed (:func:`run_options`), every default chosen
    (:func:`fedmc.run.settings.resolve`; the DP defaults from the number of users of the
    data), each note on a default printed on stderr."""
    from fedmc.run.settings import resolve

    spec = resolve(run_options(typed), _enrolled_users)
    for note in spec.notes:
        typer.echo(note, err=True)
    return spec


def _enrolled_users(data: DataSettings) -> int:
    """:func:`fedmc.run.data.enrolled_users`, whose data pipeline is imported only when a
    private run asks (every other refusal of :func:`fedmc.run.settings.resolve` comes without
    NumPy)."""
    from fedmc.run.data import enrolled_users

    return enrolled_users(data)


def parse_params(items: list[str]) -> dict[str, Any]:
    """``--param KEY=VALUE`` items (dashes in a key read as underscores)."""
    params: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--param expects KEY=VALUE, got {item!r}")
        params[key.strip().replace("-", "_")] = value.strip()
    return params


def _rating_scale(text: str) -> tuple[float, float]:
    """``--rating-scale LO,HI``: two numbers (checked further where the data are read)."""
    try:
        lo, hi = (float(part.strip()) for part in text.split(","))
    except ValueError:
        raise ConfigError(f"--rating-scale takes two comma-separated numbers LO,HI, got "
                          f"'{printable(text)}'") from None
    return lo, hi


def parse_columns(text: str) -> tuple[str, ...]:
    """``--columns``: three comma-separated names or positions, spaces around them trimmed."""
    names = tuple(name.strip() for name in text.split(","))
    if len(names) != 3 or not all(names):
        raise ConfigError(f"--columns takes three comma-separated names or 0-based positions "
                          f"(user,item,rating), got '{printable(text)}'")
    return names


def _active(text: str) -> int | str:
    """``--active``: a count or ``all``."""
    if text == "all":
        return text
    if not text.isdigit():
        raise ConfigError(f"--active takes a number of clients or 'all', got {text!r}")
    return int(text)


def parameter_flag(name: str) -> str:
    """The flag of an algorithm parameter: its own option's (``--rank``), else ``--param
    name=...`` (Felb's ``dp_clip`` is its own parameter, not user-level DP's ``--dp-clip``)."""
    declared = OPTIONS.get(name)
    if declared is not None and declared.panel == ALGO:
        return flag(name)
    return f"--param {name}=..."


def flag(name: str) -> str:
    """The flag of a setting: a declared option's (``dp_clip`` -> ``--dp-clip``), a DP
    field's (``dp.clip`` -> ``--dp-clip``), an algorithm parameter's (``--rank``, or
    ``--param name=...``)."""
    name = name.replace("dp.", "dp_")
    if name == "out_dir":
        return "--out"
    if name == "params":  # RunOptions' name of what -P/--param sets
        return "--param"
    declared = OPTIONS.get(name)
    if declared is not None:
        long = [f for f in declared.flags if f.startswith("--")]
        return long[0].split("/")[0] if long else "--" + name.replace("_", "-")
    return f"--param {name}=..."


def command_words(typed: Mapping[str, Any], leave_out: Collection[str] = (),
                  keep_param: Callable[[str], bool] = lambda item: True) -> list[str]:
    """The declared options of ``typed`` (a command's keyword arguments) that differ from
    their defaults, as command-line words (``--rank 8``, ``--no-refit``, ``-P k=v``): the
    options named in ``leave_out`` left out, and of ``--param`` only the items
    ``keep_param`` keeps."""
    words: list[str] = []
    for name, declared in OPTIONS.items():
        value = typed.get(name)
        if name in leave_out or value is None or value == declared.default:
            continue
        if name == "param":
            words += [w for item in value if keep_param(item) for w in ("-P", item)]
        elif isinstance(value, bool):
            on, _, off = next(f for f in declared.flags if f.startswith("--")).partition("/")
            words.append(on if value else off)
        else:
            words += [flag(name), str(value)]
    return words


def in_flags(marked: str, algorithm: bool = False) -> str:
    """A lower layer's message (its settings ``marked``: :mod:`fedmc.errors`) in the command
    line's words: each setting by the flag that sets it (:func:`flag_words`); ``algorithm``:
    the message of an algorithm's ``Config``, whose names are its parameters (Felb's
    ``dp_clip`` is not user-level DP's ``--dp-clip``)."""
    return worded(marked, lambda name, value: flag_words(name, value, algorithm))


def flag_words(name: str, value: str | None = None, algorithm: bool = False) -> str:
    """A setting (``rounds``, ``dp.clip``; an algorithm parameter with ``algorithm``) and its
    value as the command line gives them: ``--rounds 0``, ``--dp-clip``, ``--implicit`` (a
    switch's true), ``--no-refit`` (its false), ``--param dp_clip=...``; a name that is no
    option's as written (``name=value``)."""
    if name.startswith("params."):
        return flag_words(name.removeprefix("params."), value, algorithm=True)
    option = name.replace("dp.", "dp_")
    declared = OPTIONS.get(option)
    if algorithm and (declared is None or declared.panel != ALGO):
        return f"--param {name}={value or '...'}"
    if declared is None:
        return name if value is None else f"{name}={value}"
    value = None if value is None else value.strip("'\"")
    switch = [f for f in declared.flags if "/" in f]
    if value is not None and value.lower() in ("true", "false") and (
            switch or declared.type is bool):
        on, _, off = (switch[0] if switch else flag(option)).partition("/")
        return on if value.lower() == "true" else off or f"no {on}"
    return flag(option) if value is None else f"{flag(option)} {value}"
