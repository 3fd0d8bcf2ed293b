"""``fedmc audit``: play the curious server against one algorithm (``docs/privacy.md``).

``register(app)`` adds the command to the ``fedmc`` Typer app. The audit runs the
algorithm with one user per client once per server view (:mod:`fedmc.audit.run`),
for ``--repeat`` seeds, and writes ``config.json``, ``audit.json`` and ``audit.csv`` to ``--out
DIR`` (checked, locked and written as a run's folder, :mod:`fedmc.run.folder`): the rows of
each seed and, with several, the pooled rows (:func:`fedmc.audit.run.pool_runs`; the
``seeds`` column tells them apart). The table on stdout shows the pooled rows (or the one
seed's). Bad input exits 2 with a one-line reason (``fedmc.cli.main``).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import inspect
import io
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from fedmc.algorithms.registry import audited_algorithms
from fedmc.audit import defaults
from fedmc.cli.options import parse_params, with_options
from fedmc.errors import ConfigError

if TYPE_CHECKING:
    from fedmc.federation.loop import RoundCallback

AUDIT_FILES = ("config.json", "audit.json", "audit.csv", "status.json")
COLUMNS = ("seeds", "algorithm", "view", "attack", "precision", "recall", "base_rate", "ratio",
           "ratio_low", "ratio_high", "guessed", "rmse", "accuracy", "rmse_mean", "accuracy_mean",
           "accuracy_constant", "ratings", "clients", "dp_noise", "epsilon")
err = Console(stderr=True)
out = Console()


_DEFAULTS = {"rounds": defaults.ROUNDS, "active": str(defaults.ACTIVE),
             "dp_epsilon": defaults.DP_EPSILON, "dp_clip": defaults.DP_CLIP}
_HELPS = {
    "algorithm": "An audited algorithm: " + ", ".join(audited_algorithms()) + ".",
    "param": "An algorithm parameter, KEY=VALUE (repeatable; default: the algorithm's "
             "one-user-per-client settings, as fedmc run --partition user).",
    "rounds": "Rounds of each run.",
    "active": "Clients per round (uniform; the rate of Poisson sampling in the dp view): a "
              "number or 'all'.",
    "dp_epsilon": "dp view: the run's budget.",
    "dp_delta": "dp view: delta of the budget.",
    "dp_clip": "dp view: L2 bound of one client's upload.",
    "out_dir": "Output folder (default runs/<time>-audit-<algorithm>-<data>).",
    "overwrite": "Replace an earlier audit in --out.",
    "quiet": "No progress bars.",
}
_EXTRAS = (
    inspect.Parameter("view", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
        list[str] | None, typer.Option(
            help="What the server holds: plain (each upload), secagg (cohort sums), dp (noised "
            "sums of clipped uploads) or all (repeatable; default all).")]),
    inspect.Parameter("repeat", inspect.Parameter.KEYWORD_ONLY, default=1, annotation=Annotated[
        int, typer.Option(help="Audit seeds seed .. seed+N-1 and pool them (one run's DP "
                          "figures vary from seed to seed; the pooled rows carry a 95% "
                          "interval of the precision over the base rate).")]),
)


def register(app: typer.Typer) -> None:
    """Add ``audit`` to ``app``."""

    @app.command()
    @with_options("algorithm", "dataset", "ratings", "data_dir", "param", "rounds", "active",
                  "dp_epsilon", "dp_delta", "dp_clip", "seed", "out_dir", "overwrite", "quiet",
                  extra=_EXTRAS, defaults=_DEFAULTS, helps=_HELPS)
    def audit(**typed: Any) -> None:
        """Attack the uploads as a curious server would: rated-item sets and ratings of
        one-user clients, by what the server holds (plain, SecAgg, SecAgg + DP)."""
        from fedmc.run.options import RunOptions
        from fedmc.run.settings import resolve

        view, active, repeat, seed, rounds = (typed[k] for k in ("view", "active", "repeat",
                                                                 "seed", "rounds"))
        dp_epsilon, dp_delta, dp_clip = typed["dp_epsilon"], typed["dp_delta"], typed["dp_clip"]
        quiet = typed["quiet"]
        if active != "all" and not active.isdigit():
            raise ConfigError(f"--active takes a number of clients or 'all', got {active!r}")
        if repeat < 1:
            raise ConfigError(f"--repeat must be >= 1, got {repeat}")
        spec = resolve(RunOptions(algorithm=typed["algorithm"], partition="user",
                                  params=parse_params(typed["param"] or [])))
        # the audit's machinery imported once the options are accepted
        from fedmc.audit.run import VIEWS, AuditSettings, pool_runs, run_audit
        from fedmc.cli.interrupts import in_worker, interrupt_marks
        from fedmc.files import strict_json, write_atomic
        from fedmc.privacy.accounting import UserDP
        from fedmc.run.data import DataSettings, federate, load_ratings
        from fedmc.run.folder import RunFolder
        from fedmc.run.runner import versions

        views = VIEWS if not view or "all" in view else tuple(dict.fromkeys(view))
        algorithm, params, defaulted = spec.algorithm, spec.params, spec.defaulted
        settings = AuditSettings(algorithm, params, rounds,
                                 None if active == "all" else int(active), views,
                                 # the noise of the amplified calibration, the smaller:
                                 # the harder test of the attacks (docs/privacy.md)
                                 UserDP(clip=dp_clip, epsilon=dp_epsilon, delta=dp_delta,
                                        against="outsiders", reproducible=True), seed)
        resolved = settings.config().model_dump(mode="json")
        data_settings = DataSettings(dataset=typed["dataset"], ratings=typed["ratings"],
                                     data_dir=typed["data_dir"], partition="user", seed=seed)
        folder = RunFolder(typed["out_dir"], f"audit-{algorithm}-{data_settings.source}",
                           typed["overwrite"], AUDIT_FILES)
        target = folder.claim()
        seeds = range(seed, seed + repeat)
        label = str(seed) if repeat == 1 else f"{seed}-{seeds[-1]}"
        def audited(s: int, bars: Callable[[str, int], RoundCallback] | None,
                    ) -> list[dict[str, Any]]:
            """The rows of the audit with seed ``s``."""
            run_data = data_settings.model_copy(update={"seed": s})
            data = federate(load_ratings(run_data, progress=not quiet and s == seed), run_data)
            step = f", seed {s} ({s - seed + 1} of {repeat})" if repeat > 1 else ""
            return [{"seeds": str(s), **r} for r in run_audit(
                data, dataclasses.replace(settings, seed=s), None if bars is None else
                lambda v: bars(f"{algorithm}, {v} view{step}", rounds))]

        with interrupt_marks(folder), _bars(quiet) as bars:
            # the runs in a worker thread: this one hears the signals meanwhile
            runs = in_worker(lambda: [audited(s, bars) for s in seeds])
            shown = runs[0] if repeat == 1 else [{**r, "seeds": label} for r in pool_runs(runs)]
            rows = [r for run in runs for r in run] + (shown if repeat > 1 else [])
            config = {"algorithm": algorithm, "params": resolved,
                      "defaulted": [name for name in defaulted if name in params],
                      "rounds": rounds, "active": settings.active, "views": list(views),
                      "dp": {"epsilon": dp_epsilon, "delta": dp_delta, "clip": dp_clip},
                      "data": data_settings.model_dump(mode="json"), "seed": seed,
                      "repeat": repeat, "seeds": label, "versions": versions()}
            write_atomic(target / "config.json", strict_json(config))
            write_atomic(target / "audit.json", strict_json(rows))
            write_atomic(target / "audit.csv", _csv(rows))
        _table(shown, f"audit of {algorithm} on {data_settings.source}"
               + (f", seeds {label} pooled" if repeat > 1 else ""))
        err.print(f"wrote {target}/config.json, audit.json, audit.csv", soft_wrap=True)


@contextlib.contextmanager
def _bars(quiet: bool) -> Iterator[Callable[[str, int], RoundCallback] | None]:
    """A Rich progress display on stderr (None when quiet) and, for each run of an audit, a
    bar of its rounds: ``bars(label, rounds)`` adds one and gives its round callback."""
    if quiet:
        yield None
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=err) as progress:

        def bar(label: str, rounds: int) -> RoundCallback:
            task = progress.add_task(label, total=rounds)
            return lambda k, _: progress.update(task, completed=k)

        yield bar


def _csv(rows: list[dict[str, Any]]) -> str:
    """The rows as CSV with :data:`COLUMNS` (empty where a row has no value)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if isinstance(v, float) and math.isnan(v) else v
                         for k, v in row.items()})
    return buffer.getvalue()


def _table(rows: list[dict[str, Any]], title: str) -> None:
    """One line per (view, attack): the rated-set attacks' precision and recall against the
    base rate (lift: precision over base rate, with its interval when runs are pooled), the
    reconstruction's RMSE and like/dislike accuracy against the mean's."""
    from fedmc.audit.run import RECONSTRUCTIONS

    table = Table(title=title, show_header=True, header_style="bold")
    for name in ("view", "attack", "found", "guessing", "lift", "scored"):
        table.add_column(name)
    for r in rows:
        if r["attack"] in RECONSTRUCTIONS:
            table.add_row(r["view"], r["attack"],
                          f"RMSE {r['rmse']:.4f}, acc. {r['accuracy']:.3f}",
                          f"mean: {r['rmse_mean']:.4f}, {r['accuracy_mean']:.3f} "
                          f"(constant {r['accuracy_constant']:.3f})", "",
                          f"{r['ratings']} ratings")
        else:
            interval = (f" [{r['ratio_low']:.2f}, {r['ratio_high']:.2f}]" if "ratio_low" in r
                        else "")
            table.add_row(r["view"], r["attack"],
                          f"P {r['precision']:.3f}, R {r['recall']:.3f}",
                          f"P {r['base_rate']:.3f}", f"{r['ratio']:.2f}x{interval}",
                          f"{r['guessed']}/{r['clients']}")
    out.print(table)
