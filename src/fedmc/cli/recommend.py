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
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from fedmc.errors import ConfigError

if TYPE_CHECKING:
    from fedmc.model import FactorModel

FORMATS = ("table", "csv", "json")
out = Console()

Format = Annotated[str, typer.Option("--format", help="table | csv | json.")]


RUN_DIR_HELP = ("A run folder (fedmc run --out DIR), or a search folder (fedmc tune --out DIR): "
                "its best run, DIR/best.")


def recommend(
    run_dir: Annotated[Path, typer.Argument(help=RUN_DIR_HELP)],
    user: Annotated[str | None, typer.Option(help="Raw id of a training user (needs a run "
                                             "with --save-user-factors).")] = None,
    ratings: Annotated[Path | None, typer.Option(help="Your own ratings, item,rating per line: "
                                                 "folded in here, on this machine.")] = None,
    items: Annotated[Path | None, typer.Option(help="The items you interacted with, one per "
                                               "line (a model of implicit feedback, fedmc run "
                                               "--implicit): folded in here.")] = None,
    similar: Annotated[str | None, typer.Option(help="Raw id of an item: the items most like "
                                                "it (cosine of the item factors).")] = None,
    out_file: Annotated[Path | None, typer.Option("--out", help="Write every held-out user's "
                                                  "top-N list to this CSV file "
                                                  "(user,item,rank,score): the run's own split, "
                                                  "or --train and --test.")] = None,
    train: Annotated[Path | None, typer.Option(help="With --out: the listed users' training "
                                               "ratings, each user folded in from them.")]
    = None,
    test: Annotated[Path | None, typer.Option(help="With --out: held-out ratings (raw ids); "
                                              "their users are listed.")] = None,
    columns: Annotated[str | None, typer.Option(help="user,item,rating column names or "
                                                "0-based positions of --train and --test.")]
    = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace the --out file if "
                                            "it exists.")] = False,
    n: Annotated[int, typer.Option("-n", "--n", help="Number of items.")] = 10,
    include_rated: Annotated[bool, typer.Option("--include-rated", help="Keep the items the "
                                                "user rated in the list.")] = False,
    fmt: Format = "table",
    data_dir: Annotated[Path | None, typer.Option(help="Data folder to look titles up in "
                                                  "(else $FEDMC_DATA, else ~/.cache/fedmc).")]
    = None,
) -> None:
    """Top-N items for a user of the training data (--user) or for you (--ratings FILE); the
    items most like an item (--similar ITEM); or every held-out user's list, to a file (--out).

    With --ratings (or --items, for a model of implicit feedback) the user's factor is computed
    from the published item model by the algorithm's own user step (fold-in); the ratings
    never leave this process. Titles are shown for MovieLens runs when the data set's files
    are in the data folder. The last column is the predicted rating, or for a model of
    implicit feedback the predicted preference (column "preference": nearer 1 for a likely
    item, 0 for an unlikely one); with --similar, the cosine similarity.

    With --out FILE every user with held-out ratings (the run's own split, as fedmc evaluate
    re-creates it, or the users of --test folded in from their ratings in --train) gets its
    top-N list, training items left out, written as user,item,rank,score rows with the raw
    ids (the long format LensKit and implicit compare).
    """
    from fedmc.cli.run_inputs import check_files, run_folder
    from fedmc.model import load_model

    _check_format(fmt)
    given = {"--user": user, "--ratings": ratings, "--items": items, "--similar": similar,
             "--out": out_file}
    if sum(value is not None for value in given.values()) != 1:
        raise ConfigError("give --user RAW_ID, --ratings FILE, --items FILE, --similar ITEM "
                          "or --out FILE (one of them)")
    listing = {"--train": train, "--test": test, "--columns": columns}
    if out_file is None:
        stray = [flag for flag, value in listing.items() if value is not None]
        if overwrite:
            stray.append("--overwrite")
        if stray:
            raise ConfigError(f"{stray[0]} goes with --out FILE (every held-out user's list)")
    else:
        check_files(train, test)
        _check_target(out_file, overwrite, fmt)
    if similar is not None and include_rated:
        raise ConfigError("--include-rated is for a user's list, not --similar")
    if isinstance(n, bool) or n < 1:
        raise ConfigError(f"-n must be a positive integer, got {n}")
    run_dir = run_folder(run_dir)
    model = load_model(run_dir)
    if similar is None and model.lists_note is not None:
        typer.echo(f"note: {model.lists_note}", err=True)
    if out_file is not None:
        _write_lists(model, run_dir, out_file, n, not include_rated, (train, test, columns))
        return
    if similar is not None:
        alike = model.similar_items(similar, n=n)
        _emit_items(model, alike.items, alike.similarity, "similarity", fmt, data_dir)
        return
    _recommend_one(model, user, ratings, items, n, include_rated, fmt, data_dir)


def _recommend_one(model: FactorModel, user: str | None, ratings: Path | None, items: Path | None,
                   n: int, include_rated: bool, fmt: str, data_dir: Path | None) -> None:
    """Print the top-N list of a training user or of a user folded in from a file."""
    from fedmc.data.user_files import load_item_ratings, load_items

    who: Any = user
    if ratings is not None:
        who = model.fold_in(*load_item_ratings(ratings))
    elif items is not None:
        who = model.fold_in(load_items(items))
    top = model.recommend(who, n=n, exclude_rated=not include_rated)
    score = "preference" if model.implicit else "rating"
    _emit_items(model, top.items, top.ratings, score, fmt, data_dir)


def _emit_items(model: FactorModel, ids: Any, values: Any, score: str, fmt: str,
                data_dir: Path | None) -> None:
    """Print a ranked list of items with their titles (where the data set has them) and a
    score column named ``score``."""
    from fedmc.model.titles import item_titles

    titles = item_titles(model.dataset, data_dir)
    rows = []
    for rank, (item, value) in enumerate(zip(ids, values, strict=True), start=1):
        row: dict[str, Any] = {"rank": rank, "item": _plain(item)}
        if titles:
            row["title"] = titles.get(str(item), "")
        row[score] = round(float(value), 4)
        rows.append(row)
    _emit(rows, fmt, ["rank", "item", *(["title"] if titles else []), score])


def _check_target(path: Path, overwrite: bool, fmt: str) -> None:
    """Refuse an --out file that exists (without --overwrite), whose folder does not, or a
    --format beside it (the file is CSV), before any work."""
    if fmt != "table":
        raise ConfigError("--format is for a printed list; --out writes CSV")
    if path.is_dir():
        raise ConfigError(f"--out {path} is a folder; give a file name")
    if not path.parent.is_dir():
        raise ConfigError(f"--out {path}: there is no folder {path.parent}")
    if path.exists() and not overwrite:
        raise ConfigError(f"--out {path} exists: pass --overwrite to replace it")


def _write_lists(model: FactorModel, run_dir: Path, path: Path, n: int, exclude_rated: bool,
                 files: tuple[Path | None, Path | None, str | None]) -> None:
    """Write every held-out user's top-N list to ``path`` (atomically)."""
    from fedmc.cli.run_inputs import held_out_users
    from fedmc.files import write_atomic
    from fedmc.run.top_lists import top_lists

    held, _ = held_out_users(model, run_dir, *files)
    lists = top_lists(model, held, n, exclude_rated)
    write_atomic(path, lists.write_csv)
    typer.echo(f"wrote {path}: the top-{n} lists of {lists.n_users:,} users ({len(lists):,} "
               "rows)", err=True)


def predict(
    run_dir: Annotated[Path, typer.Argument(help=RUN_DIR_HELP)],
    pairs: Annotated[Path, typer.Option(help="A file of user,item pairs (raw ids; needs a run "
                                        "with --save-user-factors).")],
    fmt: Format = "table",
) -> None:
    """Predicted ratings of (user, item) pairs of the training data's users."""
    from fedmc.cli.run_inputs import run_folder
    from fedmc.data.user_files import load_pairs
    from fedmc.model import load_model

    _check_format(fmt)
    model = load_model(run_folder(run_dir))
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
