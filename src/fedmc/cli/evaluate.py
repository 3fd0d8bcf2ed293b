"""``fedmc evaluate RUN``: the exact evaluation of a run's published model on held-out ratings.

A separate, explicit step by whoever holds the held-out ratings, never part of a private run's
own outputs (``docs/privacy.md``). Every held-out user is folded in from its own training
ratings with the algorithm's fold-in (what its device computes from the published model), its
held-out ratings are predicted, and the exact metrics are printed and written to
``RUN/evaluation.json`` (atomically, marked ``"private": false``):

* ``fedmc evaluate RUN``: the run's own split, re-created in simulation from the data settings
  of ``RUN/config.json`` (same source, seed, split and partition);
* ``fedmc evaluate RUN --train A --test B``: users' training ratings ``A`` and held-out ratings
  ``B``, two ratings files by raw ids (any format ``fedmc run --ratings`` reads; ``--columns``
  as there). The users of ``B`` are evaluated, each folded in from its ratings in ``A``.

A search folder (``fedmc tune --out DIR``) stands for its best run, ``DIR/best``, which is
evaluated (said in one line). Bad input (a folder without a model, a missing or unreadable
file) exits 2 with one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from fedmc.errors import ConfigError
from fedmc.run.options import IMPLICIT_RANKING_K

EVALUATION_FILE = "evaluation.json"
COUNTS = ("test_ratings", "test_interactions", "users")
out = Console()


def evaluate(
    run_dir: Annotated[Path, typer.Argument(help="A run folder (fedmc run --out DIR), or a "
                                            "search folder (fedmc tune --out DIR): its best "
                                            "run, DIR/best.")],
    train: Annotated[Path | None, typer.Option(help="The evaluated users' own training "
                                               "ratings, each user folded in from them (with "
                                               "--test).")] = None,
    test: Annotated[Path | None, typer.Option(help="Held-out ratings (raw ids; with --train); "
                                              "default: the run's own split.")] = None,
    columns: Annotated[str | None, typer.Option(help="user,item,rating column names or "
                                                "0-based positions of --train and --test.")]
    = None,
    ranking_k: Annotated[int | None, typer.Option(help="Add precision, recall, NDCG, MAP, hit "
                                                  "rate and coverage at K (default "
                                                  f"{IMPLICIT_RANKING_K} for a run on "
                                                  "interactions, --implicit).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No table.")] = False,
) -> None:
    """Exact test metrics of a run's model: each held-out user folded in from its own
    training ratings; writes RUN/evaluation.json ("private": false)."""
    from fedmc.cli.run_inputs import check_files, run_folder

    check_files(train, test)
    if ranking_k is not None and ranking_k < 1:
        raise ConfigError(f"--ranking-k must be at least 1, got {ranking_k}")
    run_dir = run_folder(run_dir)
    report = evaluated(run_dir, train, test, columns, ranking_k)
    if not quiet:
        table = Table(title=f"{report['algorithm']}: exact evaluation (not private)",
                      header_style="bold")
        table.add_column("metric")
        table.add_column("value", justify="right")
        for key, value in report["metrics"].items():
            table.add_row(key, f"{value:,.0f}" if key in COUNTS else f"{value:.4f}")
        out.print(table)
    if "lists_note" in report:
        typer.echo(f"note: {report['lists_note']}", err=True)
    typer.echo(f"wrote {run_dir / EVALUATION_FILE}", err=True)


def evaluated(run_dir: Path, train: Path | None = None, test: Path | None = None,
              columns: str | None = None, ranking_k: int | None = None) -> dict[str, Any]:
    """Evaluate the model of run folder ``run_dir`` as ``fedmc evaluate`` does (its own
    split, or ``train`` and ``test`` files) and write ``run_dir/evaluation.json``; what it
    wrote, and the metrics apart under ``metrics``."""
    from fedmc.cli.run_inputs import held_out_users
    from fedmc.files import strict_json, write_atomic
    from fedmc.model import load_model
    from fedmc.run.evaluation import evaluate_model

    model = load_model(run_dir)
    held, source = held_out_users(model, run_dir, train, test, columns)
    if ranking_k is None and held.implicit:  # interactions are judged by ranking
        ranking_k = IMPLICIT_RANKING_K
    metrics = evaluate_model(model, held, ranking_k)
    note = {"lists_note": model.lists_note} if ranking_k and model.lists_note else {}
    report = {**metrics, "ranking_k": ranking_k, **held.notes, **source,
              "algorithm": model.algorithm, "private": False, **note}
    write_atomic(run_dir / EVALUATION_FILE, strict_json(report))
    return {**report, "metrics": metrics}


def register(app: typer.Typer) -> None:
    """Add ``evaluate`` to the ``fedmc`` app."""
    app.command("evaluate")(evaluate)
