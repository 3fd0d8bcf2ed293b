"""What ``fedmc run`` and ``fedmc federate local`` show: a progress bar of the rounds, a
warning about the data as one line, and a table of the summary, with a sentence of the run's
DP guarantee."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from fedmc.errors import RunWarning

err = Console(stderr=True)
out = Console()

_SHOWN = (("validation_rmse", "validation RMSE"), ("test_rmse", "test RMSE"), ("f1", "F1"),
          ("rmsd", "RMSD"), ("objective", "objective"))


class progress:
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


@contextmanager
def warning_lines() -> Iterator[None]:
    """Show every :class:`~fedmc.errors.RunWarning` of the block as one line on stderr
    (``fedmc: warning: ...``, each text once: a refit's second pass repeats none), above a
    running progress bar; other warnings as Python does."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", RunWarning)
        shown, seen = warnings.showwarning, set()

        def show(message: Warning | str, category: type[Warning], *where: Any,
                 **more: Any) -> None:
            if not issubclass(category, RunWarning):
                shown(message, category, *where, **more)
            elif str(message) not in seen:
                seen.add(str(message))
                err.print(f"fedmc: warning: {message}", markup=False, soft_wrap=True)

        warnings.showwarning = show
        yield


BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def byte_size(count: float) -> str:
    """``count`` bytes in the largest binary unit that keeps the number at 1 or more
    (``320.2 GiB``)."""
    unit = 0
    while abs(count) >= 1024 and unit < len(BYTE_UNITS) - 1:
        count /= 1024
        unit += 1
    return f"{count:,.0f} B" if unit == 0 else f"{count:,.1f} {BYTE_UNITS[unit]}"


def stopping_text(report: Mapping[str, Any]) -> str:
    """The early stop's report (``summary.json``'s ``early_stopping``) in words."""
    if report["round"] is None:
        best = f"no round scored on {report['metric']}"
    else:
        best = f"best round {report['round']} ({report['metric']} {report['value']:.4f})"
    refit = report.get("refit_rounds")
    again = "" if refit is None else f"; refit on every training rating for {refit} rounds"
    return f"{best}, stopped at round {report['stopped_at']}: {report['reason']}{again}"


def scale_facts(data: Mapping[str, Any]) -> dict[str, str]:
    """The run's rating scale as its summary shows it, from ``config.json``'s ``data``
    (:func:`fedmc.run.scale_facts.scale_facts`); nothing where none is recorded (a private
    run without a stated scale, Boolean data)."""
    low, high = data.get("value_range") or (None, None)
    if low is None or high is None:
        return {}
    how = ("stated" if data["value_range_from"] == "rating scale" else
           "inferred from the training ratings")
    return {"rating scale": f"{low:g} to {high:g} ({how})"}


def uploads_text(uploads: dict) -> str:
    """A federation's plain uploads in a line: per phase, how many the server took, their
    largest norm and how many lay above the bound."""
    phases = "; ".join(f"{phase}: {p['taken']} taken" + (
        f", norm <= {p['norm_max']:.4g}" if "norm_max" in p else "") + (
        f", {p['over_bound']} over the bound" if p["over_bound"] else "")
        for phase, p in uploads["phases"].items())
    return f"{phases} (bound: {uploads['bound'].split(' (')[0]})"


def summary_table(summary: dict, label: str, facts: Mapping[str, str] | None = None) -> None:
    """The ``summary`` of the run ``label`` as a table (and the lines of ``facts``, the
    data's), with its DP guarantee in a sentence."""
    table = Table(title=label, show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    skip = {"round", "clients", "privacy"}
    for key, value in summary.items():
        if key in skip:
            continue
        if key.startswith("bytes"):
            text = byte_size(value)
        elif key == "early_stopping":
            text = stopping_text(value)
        elif key == "uploads":  # a federation's plain uploads (docs/federation.md)
            text = uploads_text(value)
        elif isinstance(value, float):
            text = f"{value:.4f}" if abs(value) < 1e4 else f"{value:.4g}"
        else:
            text = str(value)
        table.add_row(key, text)
    for key, text in (facts or {}).items():
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
              if eps["server"] is None else f"{eps['server']:.3g} (it knows who was sampled "
              "and is handed noised sums only)")
    clients = ("and clients" if eps["clients"] is not None else "(the output folder); against "
               "clients: none (each receives the rounds of every trial of the search)")
    text = (f"user-level DP per {privacy['unit']}: epsilon {eps['outsiders']:.3g} at delta "
            f"{delta:g} against outsiders {clients}; against the server: {server}")
    against = privacy.get("calibrated_against")
    if against is not None:
        text += ("; the budget was promised against the server" if against == "server" else
                 "; the budget was promised against outsiders only (--dp-against outsiders)")
    if privacy.get("mechanism") == "skellam":
        text += ("; Skellam noise inside the secure sum (integers; no credit for sampling: "
                 "the same epsilon for every party)")
    if not privacy["private"]:
        text = "NOT private (--dp-reproducible: the noise comes from the seed); " + text
    return text
