"""Raw ids and dense indices, checked on the way in.

A fitted model indexes its arrays by dense indices; people and files name users and items by
their raw ids (MovieLens ``movieId``, a product code). :class:`IdVocabulary` maps one to the
other and :func:`checked_indices` validates dense indices, so that no unknown, negative,
out-of-range or non-integer id ever reaches an array index or a Numba kernel: each raises a
:class:`~fedmc.errors.DataError` with a one-line reason instead.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from fedmc.errors import DataError

_INTEGER = re.compile(r"[+-]?\d+")
_INT64 = np.iinfo(np.int64)


def _show(value: Any) -> str:
    """A short, one-line rendering of a bad id for an error message."""
    text = repr(value.item() if isinstance(value, np.generic) else value)
    return text if len(text) <= 40 else text[:37] + "..."


def _as_1d(values: Any) -> np.ndarray:
    """``values`` (a scalar or a sequence) as a 1-D array; anything else is a DataError."""
    array = np.asarray(values) if not isinstance(values, np.ndarray) else values
    if array.ndim > 1:
        raise DataError(f"ids must be a scalar or a flat sequence, got shape {array.shape}")
    return array.reshape(-1)


def checked_indices(values: Any, size: int, what: str) -> np.ndarray:
    """Dense indices ``values`` as ``int64``, each an integer in ``[0, size)``.

    Parameters
    ----------
    values
        A scalar or a flat sequence of integers.
    size
        Number of valid indices.
    what
        ``"user"`` or ``"item"``, for the message.

    Raises
    ------
    DataError
        A non-integer value (a float, a bool, text) or one outside ``[0, size)``.
    """
    array = _as_1d(values)
    if array.dtype.kind not in "iu":  # floats, bools, text, mixed: look at each value
        for v in array.tolist():
            if not _is_int(v):
                raise DataError(f"{what} index {_show(v)} is not an integer")
        array = np.array(array.tolist(), dtype=object)
    bad = (array < 0) | (array >= size)
    if bad.any():
        raise DataError(f"{what} index {_show(array[bad][0])} is out of range [0, {size})")
    return array.astype(np.int64)


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


class IdVocabulary:
    """The raw ids of one kind (users or items), in dense-index order.

    Parameters
    ----------
    ids
        ``ids[k]`` is the raw id of dense index ``k``: integers or strings, all distinct.
    what
        ``"user"`` or ``"item"``, for messages.
    """

    def __init__(self, ids: np.ndarray, what: str) -> None:
        self.ids = np.asarray(ids)
        self.what = what
        if self.ids.ndim != 1 or self.ids.dtype.kind not in "iuU":
            raise DataError(f"{what} ids must be a flat array of integers or strings")
        self._order = np.argsort(self.ids, kind="stable")
        self._sorted = self.ids[self._order]
        if len(self.ids) > 1 and np.any(self._sorted[1:] == self._sorted[:-1]):
            raise DataError(f"{what} ids are not distinct")

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def integer(self) -> bool:
        """Whether the raw ids are integers (else strings)."""
        return self.ids.dtype.kind in "iu"

    def index(self, raw: Any) -> np.ndarray:
        """Dense indices (``int64``) of the raw ids ``raw`` (a scalar or a flat sequence).

        Integer vocabularies take integers or integer text (``"42"``); string vocabularies
        take text (integers are read as their decimal text).

        Raises
        ------
        DataError
            An id of the wrong type (a float, a bool, non-integer text for integer ids) or an
            id the vocabulary does not hold.
        """
        index, found = self.lookup(raw)
        if not found.all():
            bad = _as_1d(raw)[int(np.flatnonzero(~found)[0])]
            raise self._unknown(bad)
        return index

    def lookup(self, raw: Any) -> tuple[np.ndarray, np.ndarray]:
        """Dense indices of the raw ids ``raw`` and whether each is known (unknown ones get
        index -1); ids of the wrong type raise as in :meth:`index`."""
        keys = self._keys(_as_1d(raw))
        pos = np.searchsorted(self._sorted, keys)
        found = pos < len(self._sorted)
        found[found] = self._sorted[pos[found]] == keys[found]
        index = np.full(len(keys), -1, dtype=np.int64)
        index[found] = self._order[pos[found]]
        return index, found

    def _unknown(self, raw: Any) -> DataError:
        return DataError(f"unknown {self.what} id {_show(raw)}: this model knows {len(self)} "
                         f"{self.what}s")

    def _keys(self, raw: np.ndarray) -> np.ndarray:
        """``raw`` as an array comparable with the vocabulary (same kind of values)."""
        if not self.integer:
            if raw.dtype.kind == "U":
                return raw
            return np.array([self._text(v) for v in raw.tolist()], dtype=str)
        if raw.dtype.kind == "i":
            return raw.astype(np.int64)
        values = raw.tolist() if raw.dtype.kind == "u" else [self._integer(v)
                                                            for v in raw.tolist()]
        for v in values:  # an integer beyond int64 cannot be an id of this vocabulary
            if not _INT64.min <= v <= _INT64.max:
                raise self._unknown(v)
        return np.array(values, dtype=np.int64)

    def _integer(self, value: Any) -> int:
        """One raw id of an integer vocabulary: an integer or integer text."""
        if _is_int(value):
            return int(value)
        if isinstance(value, str | np.str_) and _INTEGER.fullmatch(value.strip()):
            return int(value)
        raise DataError(f"{self.what} id {_show(value)} is not an integer (this model's "
                        f"{self.what} ids are integers)")

    def _text(self, value: Any) -> str:
        """One raw id of a string vocabulary: text, or an integer read as its text."""
        if isinstance(value, str | np.str_):
            return str(value)
        if _is_int(value):
            return str(int(value))
        raise DataError(f"{self.what} id {_show(value)} is neither text nor an integer")
