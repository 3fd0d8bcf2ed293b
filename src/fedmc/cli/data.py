"""``fedmc data``: list, inspect and download rating data sets.

Errors are raised as :class:`~fedmc.errors.FedMCError` subclasses; the main command line turns
them into exit status 2 and a one-line message.
"""

from __future__ import annotations

import math
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, cast

import typer
from rich.console import Console
from rich.table import Table

from fedmc.data.catalog import (
    DATASETS,
    SYNTHETIC_NAMES,
    dataset_files,
    get_spec,
    present_files,
    resolve_data_dir,
)
from fedmc.errors import ConfigError

if TYPE_CHECKING:  # the loaders are imported where a command reads data: --help needs none
    from fedmc.data.ratings import Ratings

data_app = typer.Typer(help="List, inspect and download rating data sets.", no_args_is_help=True)

DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Data folder (default: $FEDMC_DATA, else ~/.cache/fedmc)."),
]


class DuplicatesPolicy(StrEnum):
    """Choices of ``--duplicates``."""

    error = "error"
    last = "last"
    mean = "mean"


def _human_size(n_bytes: int) -> str:
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    power = min(int(math.log(max(n_bytes, 1), 1024)), len(units) - 1)
    return f"{n_bytes / 1024**power:.1f} {units[power]}"


@data_app.command("list")
def list_command(data_dir: DataDir = None) -> None:
    """List the known data sets, whether each is in the data folder, and its size."""
    root = resolve_data_dir(data_dir)
    table = Table(title=f"Data sets in {root}")
    for column in ("name", "present", "size", "source", "description"):
        table.add_column(column)
    for name, spec in DATASETS.items():
        files = dataset_files(name, root)
        size = _human_size(sum(f.stat().st_size for f in files)) if files else ""
        source = "manual" if spec.url is None else "GroupLens"
        table.add_row(name, "yes" if files else "no", size, source, spec.description)
    for name in SYNTHETIC_NAMES:
        table.add_row(name, "always", "", "generated", "synthetic low-rank ratings (--seed)")
    Console().print(table)


def describe_ratings(ratings: Ratings) -> dict[str, int | float]:
    """Summary statistics of ``ratings``: sizes, density, value range and mean, degrees.

    Returns
    -------
    dict
        Keys ``users``, ``items``, ``ratings``, ``density``, ``rating_min``, ``rating_max``,
        ``rating_mean`` and ``user_degree_min/median/mean/max`` and the same for items.
    """
    import numpy as np

    n = ratings.n_ratings
    stats: dict[str, int | float] = {
        "users": ratings.n_users,
        "items": ratings.n_items,
        "ratings": n,
        "density": n / (ratings.n_users * ratings.n_items) if n else 0.0,
        "rating_min": float(ratings.values.min()) if n else float("nan"),
        "rating_max": float(ratings.values.max()) if n else float("nan"),
        "rating_mean": float(ratings.values.mean()) if n else float("nan"),
    }
    for role, index, size in (
        ("user", ratings.users, ratings.n_users),
        ("item", ratings.items, ratings.n_items),
    ):
        degree = np.bincount(index, minlength=size)
        stats[f"{role}_degree_min"] = int(degree.min()) if size else 0
        stats[f"{role}_degree_median"] = float(np.median(degree)) if size else 0.0
        stats[f"{role}_degree_mean"] = float(degree.mean()) if size else 0.0
        stats[f"{role}_degree_max"] = int(degree.max()) if size else 0
    return stats


def _format(value: int | float) -> str:
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.6g}"


@data_app.command("info")
def info_command(
    name: Annotated[str | None, typer.Argument(help="A data-set name.")] = None,
    ratings: Annotated[
        Path | None, typer.Option("--ratings", help="A CSV/TSV/Parquet file of ratings.")
    ] = None,
    data_dir: DataDir = None,
    duplicates: Annotated[
        DuplicatesPolicy, typer.Option(help="What to do with repeated (user, item) pairs.")
    ] = DuplicatesPolicy.error,
    download: Annotated[
        bool, typer.Option("--download/--no-download", help="Download a missing set.")
    ] = False,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic sets.")] = 0,
) -> None:
    """Show users, items, ratings, density, rating range and degree statistics."""
    if (name is None) == (ratings is None):
        raise ConfigError("give either a data-set NAME or --ratings FILE")
    if name is not None and name not in SYNTHETIC_NAMES:  # refused before the loaders load:
        get_spec(name)  # an unknown name
        if not download:
            present_files(name, data_dir)  # a set not in the data folder
    from fedmc.data.loaders import load_ratings_file
    from fedmc.data.registry import load_dataset

    policy = cast(Literal["error", "last", "mean"], duplicates.value)
    if ratings is not None:
        data = load_ratings_file(ratings, duplicates=policy)
    else:
        data = load_dataset(  # a name is given where --ratings is not
            cast(str, name), data_dir, duplicates=policy, download=download, progress=True,
            seed=seed)
    table = Table(title=f"{data.name}")
    table.add_column("statistic")
    table.add_column("value", justify="right")
    for key, value in describe_ratings(data).items():
        table.add_row(key.replace("_", " "), _format(value))
    Console().print(table)


@data_app.command("download")
def download_command(
    name: Annotated[str, typer.Argument(help="A data-set name (see `fedmc data list`).")],
    data_dir: DataDir = None,
    verify: Annotated[
        bool, typer.Option("--verify/--no-verify", help="Check the pinned checksum.")
    ] = True,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Download a data set into the data folder (nothing happens when it is there)."""
    from fedmc.data.registry import download_dataset

    folder = download_dataset(name, data_dir, progress=not quiet, verify=verify)
    typer.echo(str(folder))
