"""The ``fedmc recommend`` and ``fedmc predict`` commands: use the model a run saved.

``register(app)`` adds both to the ``fedmc`` Typer app. Bad input (a folder without a model,
an unknown or malformed id, a bad ratings file) raises :class:`fedmc.errors.FedMCError`, which
``fedmc.cli.main`` turns into exit status 2 with a one-line reason.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from fedmc.errors import ConfigError

FORMATS = ("table", "csv", "json")
out = Console()

Format = Annotated[str, typer.Option("--format", help="table | csv | json.")]


def recommend(
    run_dir: Annotated[Path, typer.Argument(help="A run folder (fedmc run --out DIR).")],
    user: Annotated[str | None, typer.Option(help="Raw id of a training user (needs a run "
                                             "with --save-user-factors).")] = None,
    ratings: Annotated[Path | None, typer.Option(help="Your own ratings, item,rating per line: "
                                                 "folded in here, on this machine.")] = None,
    items: Annotated[Path | None, typer.Option(help="The items you interacted with, one per "
                                               "line (a model of implicit feedback, fedmc run "
                                               "--implicit): folded in here.")] = None,
    n: Annotated[int, typer.Option("-n", "--n", help="Number of items.")] = 10,
    include_rated: Annotated[bool, typer.Option("--include-rated", help="Keep the items the "
                                                "user rated in the list.")] = False,
    fmt: Format = "table",
    data_dir: Annotated[Path | None, typer.Option(help="Data folder to look titles up in "
                                                  "(else $FEDMC_DATA, else ~/.cache/fedmc).")]
    = None,
) -> None:
    """Top-N items for a user of the training data (--user) or for you (--ratings FILE).

    With --ratings (or --items, for a model of implicit feedback) the user's factor is computed
    from the published item model by the algorithm's own user step (fold-in); the ratings
    never leave this process. Titles are shown for MovieLens runs when the data set's files
    are in the data folder. The last column is the predicted rating, or for a model of
    implicit feedback the predicted preference (column "preference": nearer 1 for a likely
    item, 0 for an unlikely one).
    """
    from fedmc.data.user_files import load_item_ratings, load_items
    from fedmc.model import load_model
    from fedmc.model.titles import item_titles

    _check_format(fmt)
    if sum(x is not None for x in (user, ratings, items)) != 1:
        raise ConfigError("give --user RAW_ID, --ratings FILE or --items FILE (one of them)")
    model = load_model(run_dir)
    who: Any = user
    if ratings is not None:
        who = model.fold_in(*load_item_ratings(ratings))
    elif items is not None:
        who = model.fold_in(load_items(items))
    top = model.recommend(who, n=n, exclude_rated=not include_rated)
    titles = item_titles(model.dataset, data_dir)
    score = "preference" if model.implicit else "rating"
    rows = []
    for rank, (item, rating) in enumerate(zip(top.items, top.ratings, strict=True), start=1):
        row: dict[str, Any] = {"rank": rank, "item": _plain(item)}
        if titles:
            row["title"] = titles.get(str(item), "")
        row[score] = round(float(rating), 4)
        rows.append(row)
    _emit(rows, fmt, ["rank", "item", *(["title"] if titles else []), score])


def predict(
    run_dir: Annotated[Path, typer.Argument(help="A run folder (fedmc run --out DIR).")],
    pairs: Annotated[Path, typer.Option(help="A file of user,item pairs (raw ids; needs a run "
                                        "with --save-user-factors).")],
    fmt: Format = "table",
) -> None:
    """Predicted ratings of (user, item) pairs of the training data's users."""
    from fedmc.data.user_files import load_pairs
    from fedmc.model import load_model

    _check_format(fmt)
    model = load_model(run_dir)
    users, items = load_pairs(pairs)
    predicted = model.predict(users, items)
    rows = [{"user": u, "item": i, "rating": round(float(r), 4)}
            for u, i, r in zip(users.tolist(), items.tolist(), predicted.tolist(), strict=True)]
    _emit(rows, fmt, ["user", "item", "rating"])


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {'|'.join(FORMATS)}, got {fmt!r}")


def _plain(value: Any) -> Any:
    """A raw id as a plain Python value (for JSON)."""
    import numpy as np  # loaded with the model already: here, the help does without it

    return value.item() if isinstance(value, np.generic) else value


def _emit(rows: list[dict[str, Any]], fmt: str, columns: list[str]) -> None:
    """Print ``rows`` as a table, CSV or JSON on standard output."""
    if fmt == "json":
        typer.echo(json.dumps(rows, indent=2, ensure_ascii=False))
    elif fmt == "csv":
        writer = csv.DictWriter(sys.stdout, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    else:
        table = Table(show_header=True, header_style="bold")
        for column in columns:
            table.add_column(column, justify="right" if column != "title" else "left")
        for row in rows:
            table.add_row(*(str(row[c]) for c in columns))
        out.print(table)


def register(app: typer.Typer) -> None:
    """Add ``recommend`` and ``predict`` to the ``fedmc`` app."""
    app.command("recommend")(recommend)
    app.command("predict")(predict)
