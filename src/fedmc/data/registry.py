"""Named data sets: fetching and reading them (:func:`download_dataset`, :func:`load_dataset`).

Their facts (names, files, rating scales) and the data folder are :mod:`fedmc.data.catalog`'s,
which this module re-exports; parsed arrays are cached in :func:`parsed_cache_dir`, never in the
data folder, and a data folder given by the user is never created.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from fedmc.data.cache import cache_key, load_cached, save_cached
from fedmc.data.catalog import (
    DATASETS,
    SYNTHETIC_NAMES,
    DatasetSpec,
    dataset_files,
    dataset_names,
    get_spec,
    parsed_cache_dir,
    present_files,
    rating_scale,
    resolve_data_dir,
    user_cache_dir,
)
from fedmc.data.download import download_and_extract
from fedmc.data.loaders import (
    Duplicates,
    check_duplicates,
    load_jester,
    load_movielens,
    load_netflix,
)
from fedmc.data.ratings import Ratings
from fedmc.errors import DataError

__all__ = ["DATASETS", "SYNTHETIC_NAMES", "DatasetSpec", "dataset_files", "dataset_names",
           "download_dataset", "get_spec", "load_dataset", "parsed_cache_dir", "rating_scale",
           "resolve_data_dir", "user_cache_dir"]

_PARSERS: dict[str, Callable[[list[Path], Duplicates, str], Ratings]] = {
    "movielens": lambda files, duplicates, name: load_movielens(
        files[0], duplicates, name, value_range=rating_scale(name)),
    "netflix": lambda files, duplicates, name: load_netflix(
        files, duplicates, name, value_range=rating_scale(name)),
    "jester": lambda files, duplicates, name: load_jester(files[0], duplicates, name),
}


def download_dataset(
    name: str,
    data_dir: str | Path | None = None,
    progress: bool | None = None,
    verify: bool = True,
) -> Path:
    """Make sure the files of ``name`` are in the data folder, downloading when needed.

    Parameters
    ----------
    name
        A name from :data:`DATASETS`.
    data_dir
        Data folder; see :func:`resolve_data_dir`.
    progress
        Show a Rich progress bar while downloading.
    verify
        Check the archive against the pinned checksum. A set without a pinned checksum is
        only downloaded with ``verify=False``.

    Returns
    -------
    Path
        The data set's folder.

    Raises
    ------
    DataError
        No official download (with instructions where to get the files and where to put
        them), no pinned checksum while ``verify`` is set, or a failed download.
    """
    spec = get_spec(name)
    root = resolve_data_dir(data_dir)
    folder = root / spec.folder
    if dataset_files(name, root):
        return folder
    if spec.url is None:
        raise DataError((spec.manual or "no download is known").format(folder=folder))
    if not root.parent.is_dir() and root != user_cache_dir():
        raise DataError(f"the data folder {root} does not exist, nor its parent; create it "
                        "or point --data-dir (or $FEDMC_DATA) elsewhere")
    if root.exists() and not root.is_dir():
        raise DataError(f"the data folder {root} is a file; point --data-dir (or "
                        "$FEDMC_DATA) at a folder")
    if spec.checksum is None and verify:
        raise DataError(
            f"no checksum is pinned for {name} (it changes upstream), so its download cannot "
            f"be verified; to download it anyway: fedmc data download {name} --no-verify "
            "(verify=False)"
        )
    download_and_extract(
        spec.url,
        spec.checksum if verify else None,
        root,
        spec.folder,
        required=spec.files,
        progress=bool(progress),
    )
    if not dataset_files(name, root):
        raise DataError(
            f"{folder} holds no {' or '.join(spec.files)}; remove the folder and try again"
        )
    return folder


def load_dataset(
    name: str,
    data_dir: str | Path | None = None,
    duplicates: Duplicates = "error",
    *,
    download: bool = True,
    progress: bool | None = None,
    seed: int = 0,
    verify: bool = True,
    cache_dir: str | Path | None = None,
) -> Ratings:
    """Load a named data set as :class:`Ratings`.

    Parameters
    ----------
    name
        One of :func:`dataset_names`: ``ml-100k``, ``ml-1m``, ``ml-10m``, ``ml-20m``,
        ``ml-25m``, ``ml-32m``, ``ml-latest-small``, ``netflix``, ``jester``, or the generated
        ``synthetic``, ``synthetic-netflix``, ``synthetic-netflix-3x`` and ``synthetic-ml20m``.
    data_dir
        Data folder; see :func:`resolve_data_dir`.
    duplicates
        ``"error"``, ``"last"`` or ``"mean"``; see :func:`~fedmc.data.loaders.load_ratings_file`.
    download
        Download a missing MovieLens set from GroupLens; otherwise a missing set is an error.
    progress
        Show a Rich progress bar while downloading.
    seed
        Seed of the synthetic sets (ignored by the others).
    verify
        Check downloads against the pinned checksum.
    cache_dir
        Folder of the parsed-array cache; by default :func:`parsed_cache_dir`.

    Returns
    -------
    Ratings
        Parsed once, then served from the cache while the source files keep their contents.
    """
    if name in SYNTHETIC_NAMES:
        from fedmc.data.synthetic import synthetic_dataset

        return synthetic_dataset(name, seed=seed)
    spec = get_spec(name)
    check_duplicates(duplicates)
    root = resolve_data_dir(data_dir)
    files = dataset_files(name, root)
    if not files and download:
        download_dataset(name, root, progress=progress, verify=verify)
    files = present_files(name, root)
    return _load_cached(spec, files, duplicates,
                        Path(cache_dir) if cache_dir is not None else parsed_cache_dir())


def _load_cached(
    spec: DatasetSpec, files: Sequence[Path], duplicates: Duplicates, cache_dir: Path
) -> Ratings:
    key = cache_key(files, duplicates, spec.parser)
    cached = load_cached(cache_dir, key, spec.name)
    if cached is not None:
        return cached
    ratings = _PARSERS[spec.parser](list(files), duplicates, spec.name)
    save_cached(cache_dir, key, ratings)  # a read-only cache folder only costs the next parse
    return ratings
