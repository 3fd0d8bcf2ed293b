"""What ``fedmc run`` and ``fedmc federate local`` show: a progress bar of the rounds and a
table of the summary, with a sentence of the run's DP guarantee."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

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


def summary_table(summary: dict, label: str) -> None:
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
    clients = ("and clients" if eps["clients"] is not None else "(the output folder); against "
               "clients: none (each receives the rounds of every trial of the search)")
    text = (f"user-level DP per {privacy['unit']}: epsilon {eps['outsiders']:.3g} at delta "
            f"{delta:g} against outsiders {clients}; against the server: {server}")
    if not privacy["private"]:
        text = "NOT private (--dp-reproducible: the noise comes from the seed); " + text
    return text
