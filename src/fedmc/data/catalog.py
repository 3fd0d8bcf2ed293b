"""The named data sets' facts: names, descriptions, sizes, rating scales, where their files
live and where they come from (:data:`DATASETS`), and the data folder.

Light to import (the standard library only): ``fedmc data list``, the command line's help and
the run settings read it without NumPy or the loaders; :mod:`fedmc.data.registry` fetches and
reads the sets it describes.

Files are looked up in the official archive layout under a data folder (``<dir>/ml-1m/
ratings.dat``, ``<dir>/ml-10M100K/ratings.dat``, ``<dir>/ml-20m/ratings.csv``, ...). The data
folder is the ``data_dir`` argument, else ``$FEDMC_DATA``, else ``$XDG_CACHE_HOME/fedmc``
(``~/.cache/fedmc``). Parsed arrays are cached in :func:`parsed_cache_dir`
(``$FEDMC_CACHE``, else ``~/.cache/fedmc/parsed``), never in the data folder, and a data
folder given by the user is never created.

:data:`DATASETS` is a plain dict of :class:`DatasetSpec`, so tests can point a name at a local
server by replacing an entry.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fedmc.errors import DataError

GROUPLENS = "https://files.grouplens.org/datasets/movielens/"
SYNTHETIC_NAMES = ("synthetic", "synthetic-netflix", "synthetic-netflix-3x", "synthetic-ml20m")
SYNTHETIC_BOOLEAN = "synthetic-boolean"
"""The generated Boolean set (Felb's data, not ratings: :func:`fedmc.data.boolean.load_boolean`)."""

_NETFLIX_HELP = (
    "The Netflix Prize data has no official download any more. Get it from Kaggle "
    "(https://www.kaggle.com/datasets/netflix-inc/netflix-prize-data: combined_data_1.txt ... "
    "combined_data_4.txt) or from the original nf_prize_dataset.tar.gz (its training_set/ "
    "folder of mv_*.txt files), and put the files in {folder} (as {folder}/combined_data_1.txt "
    "... or {folder}/training_set/mv_0000001.txt ...)."
)
_JESTER_HELP = (
    "Jester has no download with a published checksum. Get the ratings from "
    "https://eigentaste.berkeley.edu/dataset/ or Kaggle (jester_ratings.csv with columns "
    "user, joke, rating in [-10, 10]) and save them as {folder}/jester_ratings.csv."
)


@dataclass(frozen=True)
class DatasetSpec:
    """How to find, fetch and read one named data set.

    Attributes
    ----------
    name
        The name users type (``ml-1m``).
    description
        One line for ``fedmc data list``.
    folder
        Folder inside the data folder, as the official archive unpacks it.
    files
        Glob patterns relative to ``folder``, tried in order; the first that matches names
        the rating files.
    parser
        ``"movielens"``, ``"netflix"`` or ``"jester"``.
    url
        Official zip archive, or ``None`` when there is none.
    checksum
        ``"md5:<hex>"`` or ``"sha256:<hex>"`` of the archive, or ``None`` when unverified.
    manual
        How to obtain the files by hand (``{folder}`` is filled in) when ``url`` is ``None``.
    scale
        The public rating scale ``(lo, hi)`` the data set is documented with (MovieLens 1M:
        1 to 5 stars): what ``--normalize public`` maps onto ``[-1, 1]``; a rating outside it
        is refused where the set is read (file and line).
    """

    name: str
    description: str
    folder: str
    files: tuple[str, ...]
    parser: str
    url: str | None = None
    checksum: str | None = None
    manual: str | None = None
    scale: tuple[float, float] | None = None


def _movielens(name: str, folder: str, file: str, checksum: str | None, what: str,
               scale: tuple[float, float] = (0.5, 5.0)) -> DatasetSpec:
    """A MovieLens set; half stars (0.5 to 5) unless ``scale`` says otherwise."""
    return DatasetSpec(
        name=name,
        description=f"MovieLens {what}",
        folder=folder,
        files=(file,),
        parser="movielens",
        url=f"{GROUPLENS}{name}.zip",
        checksum=checksum,
        scale=scale,
    )


# MD5 values are those GroupLens publishes beside each archive (<name>.zip.md5).
DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        _movielens(
            "ml-100k",
            "ml-100k",
            "u.data",
            "md5:0e33842e24a9c977be4e0107933c0723",
            "100K: 100,000 ratings, 943 users, 1,682 movies",
            scale=(1.0, 5.0),
        ),
        _movielens(
            "ml-1m",
            "ml-1m",
            "ratings.dat",
            "md5:c4d9eecfca2ab87c1945afe126590906",
            "1M: 1,000,209 ratings, 6,040 users, 3,706 movies",
            scale=(1.0, 5.0),
        ),
        _movielens(
            "ml-10m",
            "ml-10M100K",
            "ratings.dat",
            "md5:ce571fd55effeba0271552578f2648bd",
            "10M: 10,000,054 ratings",
        ),
        _movielens(
            "ml-20m",
            "ml-20m",
            "ratings.csv",
            "md5:cd245b17a1ae2cc31bb14903e1204af3",
            "20M: 20,000,263 ratings, 138,493 users",
        ),
        _movielens(
            "ml-25m",
            "ml-25m",
            "ratings.csv",
            "md5:6b51fb2759a8657d3bfcbfc42b592ada",
            "25M: 25,000,095 ratings, 162,541 users",
        ),
        _movielens(
            "ml-32m",
            "ml-32m",
            "ratings.csv",
            "md5:d472be332d4daa821edc399621853b57",
            "32M: 32,000,204 ratings, 200,948 users",
        ),
        _movielens(
            "ml-latest-small",
            "ml-latest-small",
            "ratings.csv",
            None,
            "latest-small: about 100,000 ratings, 610 users (changes upstream)",
        ),
        DatasetSpec(
            name="netflix",
            description="Netflix Prize: 100,480,507 ratings, 480,189 users, 17,770 movies",
            folder="netflix",
            files=("combined_data_*.txt", "training_set/mv_*.txt"),
            parser="netflix",
            manual=_NETFLIX_HELP,
            scale=(1.0, 5.0),
        ),
        DatasetSpec(
            name="jester",
            description="Jester jokes: ratings in [-10, 10]",
            folder="jester",
            files=("jester_ratings.csv",),
            parser="jester",
            manual=_JESTER_HELP,
            scale=(-10.0, 10.0),
        ),
    )
}

def dataset_names() -> list[str]:
    """Every name :func:`load_dataset` accepts."""
    return [*DATASETS, *SYNTHETIC_NAMES]


def rating_scale(name: str) -> tuple[float, float] | None:
    """The public rating scale of the named set ``name`` (the synthetic sets: 1 to 5, as
    their generator clips), None for an unknown name."""
    if name in SYNTHETIC_NAMES:
        return (1.0, 5.0)
    spec = DATASETS.get(name)
    return None if spec is None else spec.scale


def get_spec(name: str) -> DatasetSpec:
    """The :class:`DatasetSpec` of ``name``; an unknown name is a :class:`DataError`."""
    try:
        return DATASETS[name]
    except KeyError:
        raise DataError(f"unknown data set {name!r}; known: {', '.join(dataset_names())}") from None


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/fedmc``, or ``~/.cache/fedmc``."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "fedmc"


def parsed_cache_dir() -> Path:
    """Folder of the parsed-array cache: ``$FEDMC_CACHE``, else ``<user cache>/parsed``
    (never a data folder, which fedmc only reads)."""
    env = os.environ.get("FEDMC_CACHE")
    return Path(env).expanduser() if env else user_cache_dir() / "parsed"


def resolve_data_dir(data_dir: str | Path | None = None) -> Path:
    """The data folder: ``data_dir``, else ``$FEDMC_DATA``, else :func:`user_cache_dir`."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    env = os.environ.get("FEDMC_DATA")
    return Path(env).expanduser() if env else user_cache_dir()


def dataset_files(name: str, data_dir: str | Path | None = None) -> list[Path]:
    """The rating files of ``name`` present in the data folder (empty when absent)."""
    spec = get_spec(name)
    folder = resolve_data_dir(data_dir) / spec.folder
    for pattern in spec.files:
        found = sorted(p for p in folder.glob(pattern) if p.is_file())
        if found:
            return found
    return []


def present_files(name: str, data_dir: str | Path | None = None) -> list[Path]:
    """:func:`dataset_files` of a set that must be there: its rating files.

    Raises
    ------
    DataError
        When the data folder does not hold them (asked before anything is imported to read
        them: ``fedmc data info`` of an absent set answers at once).
    """
    files = dataset_files(name, data_dir)
    if not files:
        folder = resolve_data_dir(data_dir) / get_spec(name).folder
        raise DataError(f"{name} is not in {folder}; run `fedmc data download {name}` or add "
                        "--download (from Python: download=True)")
    return files
