"""Small files a person writes by hand for a trained model: one user's own ratings (item,
rating) to fold in, and (user, item) pairs to predict.

They follow the conventions of :func:`fedmc.data.loaders.load_ratings_file`: CSV, TSV, ``::``
or blank-separated; a header with the usual column names (``item``, ``movieId``, ...;
``rating``, ``score``, ...; ``user``, ``userId``, ...), or none, when the first line names no
column, and then the columns come in the order given. Raw ids are kept as text (a model's
vocabulary reads integer text as integers). Files are read line by line, so every problem is
a :class:`~fedmc.errors.DataError` naming the file and line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedmc.data.loaders import (
    ITEM_COLUMNS,
    RATING_COLUMNS,
    USER_COLUMNS,
    _check_rating,
    _first_line,
    _normalize_name,
    _sniff_delimiter,
    _split,
)
from fedmc.data.text_files import read_text_bytes
from fedmc.errors import DataError

Role = tuple[str, tuple[str, ...]]


def load_item_ratings(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """One user's ratings: raw item ids (text) and ratings, in file order.

    Raises
    ------
    DataError
        Missing or empty file, missing column, short line, empty id, a rating that is not a
        finite number, or an item rated twice.
    """
    path = Path(path)
    items: list[str] = []
    values: list[float] = []
    first_line: dict[str, int] = {}
    for number, (item, rating) in _rows(path, (("item", ITEM_COLUMNS),
                                               ("rating", RATING_COLUMNS))):
        problem = _check_rating(rating)
        if problem:
            raise DataError(problem, path, number)
        if item in first_line:
            raise DataError(f"item {item} is rated twice (lines {first_line[item]} and "
                            f"{number})", path, number)
        first_line[item] = number
        items.append(item)
        values.append(float(rating))
    return np.array(items, dtype=str), np.array(values, dtype=np.float64)


def load_items(path: str | Path) -> np.ndarray:
    """One user's items (interactions, no rating): raw item ids (text), in file order.

    Raises
    ------
    DataError
        Missing or empty file, missing column, empty id, or an item listed twice.
    """
    path = Path(path)
    first_line: dict[str, int] = {}
    for number, (item,) in _rows(path, (("item", ITEM_COLUMNS),)):
        if item in first_line:
            raise DataError(f"item {item} is listed twice (lines {first_line[item]} and "
                            f"{number})", path, number)
        first_line[item] = number
    return np.array(list(first_line), dtype=str)


def load_pairs(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(user, item) pairs: raw user ids and raw item ids (text), in file order.

    Raises
    ------
    DataError
        Missing or empty file, missing column, short line or empty id.
    """
    rows = [fields for _, fields in _rows(Path(path), (("user", USER_COLUMNS),
                                                        ("item", ITEM_COLUMNS)))]
    users = np.array([u for u, _ in rows], dtype=str)
    return users, np.array([i for _, i in rows], dtype=str)


def _rows(path: Path, roles: tuple[Role, ...]) -> list[tuple[int, list[str]]]:
    """``(line number, fields in role order)`` of every data line."""
    data = read_text_bytes(path)
    number, first = _first_line(data)
    delimiter = _sniff_delimiter(first)
    names = [_normalize_name(t) for t in _split(first, delimiter)]
    known = {name for _, candidates in roles for name in candidates}
    if any(name in known for name in names):  # a header
        positions = []
        for role, candidates in roles:
            hits = [k for k, name in enumerate(names) if name in candidates]
            if not hits:
                raise DataError(f"no {role} column: expected one of {', '.join(candidates)} in "
                                f"the header ({', '.join(names)})", path, number)
            positions.append(hits[0])
        skip = number
    else:
        positions, skip = list(range(len(roles))), number - 1
    rows = []
    lines = data.decode("utf-8", errors="replace").split("\n")
    for k, line in enumerate(lines[skip:], start=skip + 1):
        if not line.strip():
            continue
        tokens = _split(line.rstrip("\r"), delimiter)
        if len(tokens) <= max(positions):
            raise DataError(f"expected at least {max(positions) + 1} fields, found "
                            f"{len(tokens)}", path, k)
        fields = [tokens[p] for p in positions]
        for (role, _), value in zip(roles, fields, strict=True):
            if not value:
                raise DataError(f"{role} id is empty" if role != "rating" else
                                "rating is empty", path, k)
        rows.append((k, fields))
    if not rows:
        raise DataError("the file holds a header but no rows", path)
    return rows
