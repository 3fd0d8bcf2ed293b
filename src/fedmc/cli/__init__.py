"""The ``fedmc`` command: ``run`` one training, ``recommend`` and ``predict`` with its model,
``audit`` what a curious server learns, and ``data`` sets.

Errors in the user's input exit with status 2 and a one-line reason on stderr.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from fedmc.algorithms.registry import algorithm_names
from fedmc.cli.audit import register as register_audit_command
from fedmc.cli.data import data_app
from fedmc.cli.evaluate import register as register_evaluate_command
from fedmc.cli.experiment import register as register_experiment_commands
from fedmc.cli.interrupts import Interrupted, catch_signals, interrupt_marks
from fedmc.cli.recommend import register as register_model_commands
from fedmc.data.registry import dataset_names
from fedmc.errors import ConfigError, FedMCError, printable

app = typer.Typer(
    name="fedmc",
    help="Federated matrix completion: FedMC-ADMM and friends, on real or synthetic data.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(data_app, name="data", help="List, describe and download data sets.")
register_experiment_commands(app)
register_model_commands(app)
register_evaluate_command(app)
err = Console(stderr=True)
out = Console()


def _print_version(value: bool) -> None:
    if value:
        from fedmc import __version__

        typer.echo(f"fedmc {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Federated matrix completion: FedMC-ADMM and friends, on real or synthetic data."""

ALGO = "Algorithm parameters"
DATA = "Data"
PROTO = "Run"


@app.command()
def run(
    algorithm: Annotated[str, typer.Option("--algorithm", "-a", help="Algorithm: "
                                           f"{', '.join(algorithm_names())}.",
                                           rich_help_panel=PROTO)] = "fedmc-admm",
    dataset: Annotated[str | None, typer.Option(help="Named data set: "
                                                f"{', '.join(dataset_names())}; default: the "
                                                "embedded synthetic set.",
                                                rich_help_panel=DATA)] = None,
    ratings: Annotated[Path | None, typer.Option(help="A CSV/TSV/Parquet file of ratings.",
                                                 rich_help_panel=DATA)] = None,
    train: Annotated[Path | None, typer.Option(help="A file of training ratings (with --test: "
                                               "a fixed split).", rich_help_panel=DATA)] = None,
    test: Annotated[Path | None, typer.Option(help="A file of test ratings (with --train).",
                                              rich_help_panel=DATA)] = None,
    columns: Annotated[str | None, typer.Option(help="user,item,rating column names or "
                                                "0-based positions.", rich_help_panel=DATA)] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Data folder (else $FEDMC_DATA, else "
                                                  "~/.cache/fedmc).", rich_help_panel=DATA)] = None,
    duplicates: Annotated[str, typer.Option(help="Duplicate (user, item) pairs: error|last|mean.",
                                            rich_help_panel=DATA)] = "error",
    binary: Annotated[Path | None, typer.Option(help="A 0/1 matrix or transaction file "
                                                "(Boolean algorithms).",
                                                rich_help_panel=DATA)] = None,
    binarize: Annotated[float | None, typer.Option(help="Ratings >= T count as 1 (Boolean "
                                                   "algorithms).", rich_help_panel=DATA)] = None,
    noise: Annotated[float, typer.Option(help="XOR noise of --dataset synthetic-boolean.",
                                         rich_help_panel=DATA)] = 0.1,
    normalize: Annotated[str | None, typer.Option(
        help="none|center|zscore (fitted on training ratings) | public (from the rating "
        "scale alone); default zscore, public with DP, none with --implicit.",
        rich_help_panel=DATA)] = None,
    rating_scale: Annotated[str | None, typer.Option(
        help="The public rating scale LO,HI (e.g. 1,5): --normalize public maps it onto "
        "[-1, 1]; default: the named data set's.", rich_help_panel=DATA)] = None,
    implicit: Annotated[bool, typer.Option("--implicit", help="Read every rating as an "
                                           "interaction (a click): implicit feedback, for "
                                           "fedals; ranking metrics at 10 by default.",
                                           rich_help_panel=DATA)] = False,
    implicit_threshold: Annotated[float | None, typer.Option(
        help="With --implicit: only ratings >= T are interactions (default: every rating).",
        rich_help_panel=DATA)] = None,
    split: Annotated[str, typer.Option(help="random (per rating) | user (per-user holdout).",
                                       rich_help_panel=DATA)] = "random",
    test_fraction: Annotated[float, typer.Option(help="Share of ratings held out.",
                                                 rich_help_panel=DATA)] = 0.2,
    clients: Annotated[int | None, typer.Option(help="Number of clients p (default: the "
                                                "algorithm's paper settings, 100 for most).",
                                                rich_help_panel=PROTO)] = None,
    partition: Annotated[str | None, typer.Option(help="random|contiguous|powerlaw|user (one "
                                                  "user per client); default: the algorithm's "
                                                  "paper settings.", rich_help_panel=PROTO)] = None,
    active: Annotated[str | None, typer.Option(help="Clients per round (uniform sampling): a "
                                               "number or 'all'; default min(10, clients), all "
                                               "with --partition user.",
                                               rich_help_panel=PROTO)] = None,
    sampling: Annotated[str | None, typer.Option(help="uniform (fixed size) | bernoulli "
                                                 "(default uniform).",
                                                 rich_help_panel=PROTO)] = None,
    participation: Annotated[float | None, typer.Option(
        help="p_i for Bernoulli sampling (default active/clients).",
        rich_help_panel=PROTO)] = None,
    dropout: Annotated[float, typer.Option(help="Share of drawn clients that drop out of a "
                                           "round.", rich_help_panel=PROTO)] = 0.0,
    rounds: Annotated[int | None, typer.Option(help="Communication rounds (default: the "
                                               "algorithm's paper settings: 400 for rfrec, 100 "
                                               "for most).", rich_help_panel=PROTO)] = None,
    eval_every: Annotated[int, typer.Option(help="Evaluate every this many rounds.",
                                            rich_help_panel=PROTO)] = 1,
    seed: Annotated[int, typer.Option(help="Seed of split, partition, init and sampling.",
                                      rich_help_panel=PROTO)] = 0,
    rank: Annotated[int | None, typer.Option(help="Rank r.", rich_help_panel=ALGO)] = None,
    inner: Annotated[int | None, typer.Option(help="Inner steps N.",
                                              rich_help_panel=ALGO)] = None,
    reg_u: Annotated[str | None, typer.Option(help="R_i: l2|l1|elastic|nonneg|box|none.",
                                              rich_help_panel=ALGO)] = None,
    lam: Annotated[float | None, typer.Option(help="lambda, weight of R_i.",
                                              rich_help_panel=ALGO)] = None,
    reg_v: Annotated[str | None, typer.Option(help="R: l2|l1|elastic|nonneg|box|none.",
                                              rich_help_panel=ALGO)] = None,
    gamma: Annotated[float | None, typer.Option(help="gamma, weight of R.",
                                                rich_help_panel=ALGO)] = None,
    beta: Annotated[float | None, typer.Option(help="ADMM penalty beta.",
                                               rich_help_panel=ALGO)] = None,
    init_scale: Annotated[float | None, typer.Option(help="Initial factors uniform on "
                                                     "[0, X].", rich_help_panel=ALGO)] = None,
    steps: Annotated[str | None, typer.Option(help="paper (scalar L_W, L_U) | per-row "
                                              "(per user/item bounds).",
                                              rich_help_panel=ALGO)] = None,
    biases: Annotated[bool | None, typer.Option("--biases/--no-biases",
                                                help="User and item biases.",
                                                rich_help_panel=ALGO)] = None,
    clip: Annotated[bool | None, typer.Option("--clip/--no-clip",
                                              help="Clip predictions to the rating range.",
                                              rich_help_panel=ALGO)] = None,
    param: Annotated[list[str] | None, typer.Option("--param", "-P",
                                                    help="Any other algorithm parameter, "
                                                    "KEY=VALUE (repeatable).",
                                                    rich_help_panel=ALGO)] = None,
    dp_epsilon: Annotated[float | None, typer.Option(
        help="User-level DP: the run's budget epsilon (noise calibrated to the planned rounds; "
        "needs --dp-clip and --sampling bernoulli).", rich_help_panel=PROTO)] = None,
    dp_delta: Annotated[float, typer.Option(help="User-level DP: delta of the budget.",
                                            rich_help_panel=PROTO)] = 1e-6,
    dp_noise: Annotated[float | None, typer.Option(
        help="User-level DP: noise multiplier (std / clip); epsilon is reported, and with "
        "--dp-epsilon a plan over budget is refused.", rich_help_panel=PROTO)] = None,
    dp_clip: Annotated[float | None, typer.Option(
        help="User-level DP: L2 bound of one client's whole upload.",
        rich_help_panel=PROTO)] = None,
    dp_setup_scale: Annotated[float | None, typer.Option(
        help="User-level DP: noise multiplier of a set-up upload (which every client sends) "
        "over that of the rounds (default 1).", rich_help_panel=PROTO)] = None,
    dp_setup_clip: Annotated[float | None, typer.Option(
        help="User-level DP: L2 bound of one client's set-up upload (default --dp-clip); "
        "that exchange's noise scales with it.", rich_help_panel=PROTO)] = None,
    dp_unit: Annotated[str, typer.Option(
        help="User-level DP: what one protected contribution is: user (one user per client, "
        "--partition user) or client (clients of several users: the guarantee is per client).",
        rich_help_panel=PROTO)] = "user",
    dp_reproducible: Annotated[bool, typer.Option(
        "--dp-reproducible", help="User-level DP, research only: draw the noise and the "
        "sampling from --seed (the run repeats exactly but is NOT private; its outputs say "
        "so and keep their exact metrics).", rich_help_panel=PROTO)] = False,
    ranking_k: Annotated[int | None, typer.Option(help="Add precision, recall, NDCG, MAP, hit "
                                                  "rate and coverage at K (after training); "
                                                  "default 10 with --implicit.",
                                                  rich_help_panel=PROTO)] = None,
    save_user_factors: Annotated[bool, typer.Option(
        "--save-user-factors", help="Save the user factors and rated items with the model "
        "(simulation studies: in a federation they stay on the clients).")] = False,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Output folder (default "
                                                 "runs/<time>-<algorithm>-<data>).")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an earlier run in "
                                            "--out.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Train one algorithm on one data set and write config.json, history.csv, summary.json.

    With no options: FedMC-ADMM on the embedded synthetic data, offline, in seconds.
    """
    from fedmc.run.folder import RunFolder
    from fedmc.run.precompile import compile_in_background
    from fedmc.run.runner import execute, write_outputs

    run_settings, data_settings, params = resolve_options(locals())
    label = f"{algorithm} on {data_settings.source}"
    folder = RunFolder(out_dir, f"{algorithm}-{data_settings.source}", overwrite)
    target = folder.claim()
    with interrupt_marks(folder):
        with _progress(quiet, run_settings.rounds, label) as callback:
            result = execute(run_settings, data_settings, params, callback,
                             progress_download=not quiet,
                             kernels=os.environ.get("FEDMC_KERNELS", "auto"))
        write_outputs(target, result)
    if result.config["kernels"] == "generic":
        compile_in_background(algorithm, result.config["params"])
    if not quiet:
        _summary_table(result.summary, label)
    model_files = ", model.npz, model.json" if result.artifact is not None else ""
    err.print(f"wrote {target}/config.json, history.csv, summary.json{model_files}",
              soft_wrap=True)


def resolve_options(options: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
    """``fedmc run``'s options (by name) as run settings, data settings and the algorithm's
    parameters; commands that take the same options (``fedmc federate``) share it."""
    from fedmc.run.data import DataSettings
    from fedmc.run.settings import RunSettings, apply_paper_settings

    named = {k: options[k] for k in ("rank", "inner", "reg_u", "lam", "reg_v", "gamma", "beta",
                                     "init_scale", "steps", "biases", "clip")}
    params = {k: v for k, v in named.items() if v is not None}
    params.update(_parse_params(options["param"] or []))
    o, params, defaulted = apply_paper_settings(options["algorithm"], options, params)
    normalize = _normalize(o)
    if o["normalize"] is None:
        defaulted = sorted({*defaulted, "normalize"})
    columns = _columns(o["columns"])
    data_settings = DataSettings(
        dataset=o["dataset"], ratings=o["ratings"], train=o.get("train"), test=o.get("test"),
        columns=columns,
        data_dir=o["data_dir"], duplicates=o["duplicates"], clients=o["clients"],
        partition=o["partition"], split=o["split"], test_fraction=o["test_fraction"],
        normalize=normalize, rating_scale=_rating_scale(o.get("rating_scale")),
        binary=o["binary"], binarize=o["binarize"], noise=o["noise"], seed=o["seed"],
        implicit=o.get("implicit", False), implicit_threshold=o.get("implicit_threshold"),
    )
    ranking_k = o.get("ranking_k")
    private = _private(o) and not o.get("dp_reproducible", False)
    if ranking_k is None and data_settings.implicit and not private:
        ranking_k = 10  # interactions are judged by ranking (a private run: fedmc evaluate)
        defaulted = sorted([*defaulted, "ranking_k"])
    run_settings = RunSettings(
        algorithm=o["algorithm"], rounds=o["rounds"],
        active=_active(o["active"], o["clients"], o["partition"]),
        sampling=o["sampling"] or "uniform",
        participation=o["participation"], dropout=o["dropout"], eval_every=o["eval_every"],
        seed=o["seed"], ranking_k=ranking_k,
        **{f"user_{k}": o[k] for k in ("dp_epsilon", "dp_delta", "dp_noise", "dp_clip",
                                       "dp_setup_clip", "dp_unit", "dp_reproducible")
           if k in o},
        user_dp_setup_scale=1.0 if o.get("dp_setup_scale") is None else o["dp_setup_scale"],
        save_user_factors=o.get("save_user_factors", False), defaulted=defaulted,
    )
    return run_settings, data_settings, params


def _private(o: dict[str, Any]) -> bool:
    """Whether the options ask for user-level DP (a budget or a noise multiplier)."""
    return o.get("dp_epsilon") is not None or o.get("dp_noise") is not None


def _normalize(o: dict[str, Any]) -> str:
    """``--normalize``, or its default: ``none`` for interactions (``--implicit``), ``public``
    in a DP run (a normalizer fitted on the training ratings is an exact release the budget
    does not cover, so a DP run refuses one), ``zscore`` otherwise."""
    private = _private(o)
    if o["normalize"] is None:
        return "none" if o.get("implicit") else "public" if private else "zscore"
    if private and o["normalize"] in ("center", "zscore"):
        raise ConfigError(f"--normalize {o['normalize']} fits on the training ratings, which a "
                          "DP run may not publish: use --normalize public (the default with "
                          "DP) or none")
    return o["normalize"]


def _rating_scale(text: str | None) -> tuple[float, float] | None:
    """``--rating-scale LO,HI``: two numbers (checked further where the data are read)."""
    if text is None:
        return None
    parts = [part.strip() for part in text.split(",")]
    try:
        lo, hi = (float(part) for part in parts)
    except ValueError:
        raise ConfigError(f"--rating-scale takes two comma-separated numbers LO,HI, got "
                          f"'{printable(text)}'") from None
    return lo, hi


def _columns(text: str | None) -> tuple[str, ...] | None:
    """``--columns``: three comma-separated names or positions, spaces around them trimmed."""
    if text is None:
        return None
    names = tuple(name.strip() for name in text.split(","))
    if len(names) != 3 or not all(names):
        raise ConfigError(f"--columns takes three comma-separated names or 0-based positions "
                          f"(user,item,rating), got '{printable(text)}'")
    return names


def _active(text: str | None, clients: int, partition: str) -> int | None:
    """``--active``: a count, ``all`` (None: every client), or the default min(10, clients)."""
    if text is None:
        return None if partition == "user" else min(10, clients)
    if text == "all":
        return None
    if not text.isdigit():
        raise ConfigError(f"--active takes a number of clients or 'all', got {text!r}")
    return int(text)


def _parse_params(items: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--param expects KEY=VALUE, got {item!r}")
        params[key.strip().replace("-", "_")] = value.strip()
    return params


_SHOWN = (("test_rmse", "test RMSE"), ("f1", "F1"), ("rmsd", "RMSD"), ("objective",
                                                                       "objective"))


class _progress:
    """A Rich progress bar with the latest test RMSE, or nothing when quiet."""

    def __init__(self, quiet: bool, rounds: int, label: str):
        self.quiet = quiet
        self.rounds = rounds
        self.label = label

    def __enter__(self):
        if self.quiet:
            return None
        self.bar = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[metric]}"), TimeRemainingColumn(), console=err,
            transient=False,
        )
        self.bar.start()
        self.task = self.bar.add_task(self.label, total=self.rounds, metric="")

        def callback(k: int, row: dict | None) -> None:
            metric = None
            if row is not None:
                metric = next((f"{label} {row[key]:.4f}" for key, label in _SHOWN if key in row),
                              "")
            fields = {"metric": metric} if metric is not None else {}
            self.bar.update(self.task, completed=k, **fields)

        return callback

    def __exit__(self, *exc):
        if not self.quiet:
            self.bar.stop()
        return False


def _summary_table(summary: dict, label: str) -> None:
    table = Table(title=label, show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    skip = {"round", "clients", "privacy"}
    for key, value in summary.items():
        if key in skip:
            continue
        if key.startswith("bytes"):
            text = f"{value / 2**20:,.1f} MiB"
        elif isinstance(value, float):
            text = f"{value:.4f}" if abs(value) < 1e4 else f"{value:.4g}"
        else:
            text = str(value)
        table.add_row(key, text)
    if "privacy" in summary:
        table.add_section()
        table.add_row("privacy", privacy_statement(summary["privacy"]))
    out.print(table)


def privacy_statement(privacy: dict[str, Any]) -> str:
    """One paragraph of what a run's DP guarantees, against whom (its summary's ``privacy``,
    :meth:`fedmc.federation.aggregator.Aggregator.guarantee`; ``docs/privacy.md``)."""
    if privacy.get("dp") is None and "epsilon" not in privacy:
        return "no DP: the model and every metric are exact functions of the data"
    eps, delta = privacy["epsilon"], privacy["delta"]
    server = ("none (central noise: the server sees each clipped upload)"
              if eps["server"] is None else f"{eps['server']:.3g} (secure aggregation; the "
              "server knows who was sampled)")
    text = (f"user-level DP per {privacy['unit']}: epsilon {eps['outsiders']:.3g} at delta "
            f"{delta:g} against outsiders and clients; against the server: {server}")
    if not privacy["private"]:
        text = "NOT private (--dp-reproducible: the noise comes from the seed); " + text
    return text


def _register_federate() -> None:
    from fedmc.cli.federate import register

    register(app, run, resolve_options, _progress, _summary_table)


_register_federate()
register_audit_command(app, _parse_params)


def _fail(reason: str, code: int = 2) -> None:
    """One line on stderr, exit status ``code``."""
    sys.stderr.write("fedmc: error: " + printable(" ".join(reason.split()), 2000) + "\n")
    sys.exit(code)


def main() -> None:
    """Entry point: run the app; input errors exit 2, SIGINT 130 and SIGTERM 143."""
    if len(sys.argv) <= 1:  # bare ``fedmc``: its help, and success
        sys.argv.append("--help")
    try:
        with catch_signals():
            code = app(standalone_mode=False)
    except Interrupted as exc:
        where = f"; its partial output is in {exc.folder}" if exc.folder is not None else ""
        sys.stderr.write(f"fedmc: interrupted by {exc.name}{where}\n")
        sys.exit(exc.exit_code)
    except FedMCError as exc:
        _fail(str(exc))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "settings"
        _fail(f"{where}: {first['msg']}")
    except typer.Abort:
        err.print("fedmc: aborted", markup=False)
        sys.exit(130)
    except Exception as exc:
        # Usage errors (unknown option, a value of the wrong type) are click's exceptions, which
        # newer typer releases vendor: recognised by their interface, not their class.
        message, code = getattr(exc, "format_message", None), getattr(exc, "exit_code", None)
        if not (callable(message) and isinstance(code, int)):
            raise
        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        _fail(message() + hint, code)
    sys.exit(code if isinstance(code, int) else 0)
