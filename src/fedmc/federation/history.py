"""The history of a run: one row per evaluated round, written as ``history.csv``."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

Row = dict[str, Any]
"""A history row: numbers, and text in the columns that list clients (a federation's
``participants``) or in those a read ``history.csv`` could not parse as numbers."""


@dataclass
class History:
    """One row per evaluated round (round 0 is the initial model)."""

    rows: list[Row] = field(default_factory=list)

    def append(self, row: Row) -> None:
        """Add a row."""
        self.rows.append(row)

    @property
    def columns(self) -> list[str]:
        """Column names in first-seen order."""
        seen: dict[str, None] = {}
        for row in self.rows:
            seen.update(dict.fromkeys(row))
        return list(seen)

    def column(self, name: str) -> np.ndarray:
        """One column as an array (NaN where a row lacks it)."""
        return np.array([row.get(name, math.nan) for row in self.rows], dtype=float)

    def last(self, name: str) -> float:
        """The latest value of a column."""
        return float(self.rows[-1][name])

    def csv_text(self) -> str:
        """The rows as CSV text (the ``history.csv`` of the run contract)."""
        buffer = io.StringIO(newline="")
        writer = csv.DictWriter(buffer, fieldnames=self.columns, restval="")
        writer.writeheader()
        for row in self.rows:
            writer.writerow({k: _fmt(v) for k, v in row.items()})
        return buffer.getvalue()

    @classmethod
    def read_csv(cls, path: str | Path) -> History:
        """Read a ``history.csv`` (numbers as floats, other values as text)."""
        with open(path, newline="") as fh:
            return cls([{k: _parse(v) for k, v in row.items() if v != ""}
                        for row in csv.DictReader(fh)])

    def __len__(self) -> int:
        return len(self.rows)


def _parse(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def _fmt(v: float) -> str | float:
    return repr(float(v)) if isinstance(v, float | np.floating) else v
