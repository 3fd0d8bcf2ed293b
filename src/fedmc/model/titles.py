"""Item titles of the MovieLens data sets, read from the data folder when they are asked for.

MovieLens may not be redistributed, so a saved model keeps no titles: ``fedmc recommend``
looks them up here, in the data set's own files (``u.item`` of 100K, ``movies.dat`` of 1M and
10M, ``movies.csv`` of the others) under the data folder (:func:`fedmc.data.catalog.
resolve_data_dir`). A data set without titles, or whose files are absent, gives none.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

from fedmc.data.catalog import DATASETS, resolve_data_dir

# file with the titles, field separator, id field, title field
_TITLE_FILES: dict[str, tuple[str, str, int, int]] = {
    "ml-100k": ("u.item", "|", 0, 1),
    "ml-1m": ("movies.dat", "::", 0, 1),
    "ml-10m": ("movies.dat", "::", 0, 1),
}
_CSV_TITLES = ("movies.csv", ",", 0, 1)  # ml-20m, ml-25m, ml-32m, ml-latest-small


def item_titles(dataset: str, data_dir: str | Path | None = None) -> dict[str, str]:
    """Title of every item of ``dataset`` by its raw id (as text); empty when the data set
    has no titles or its title file is not in the data folder."""
    spec = DATASETS.get(dataset)
    if spec is None or spec.parser != "movielens":
        return {}
    name, sep, id_field, title_field = _TITLE_FILES.get(dataset, _CSV_TITLES)
    path = resolve_data_dir(data_dir) / spec.folder / name
    try:
        raw = path.read_bytes()
    except OSError:
        return {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:  # 100K and 1M are Latin-1
        text = raw.decode("latin-1")
    rows: Iterator[list[str]]
    if sep == ",":
        rows = csv.reader(io.StringIO(text))
        next(rows, None)  # header
    else:
        rows = (line.split(sep) for line in text.splitlines() if line)
    return {row[id_field]: row[title_field] for row in rows if len(row) > title_field}
