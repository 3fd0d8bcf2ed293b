"""Finished runs read back from disk, grouped into series and summarised over seeds.

Reports and plots are made from the files of the run contract only (``history.csv`` and
``summary.json``), never from a process's memory, so a resumed experiment and an uninterrupted
one give the same report.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedmc.experiments.config import facet_text

METRIC_LABELS = {
    "objective": "training objective",
    "train_rmse": "train RMSE",
    "test_rmse": "test RMSE",
    "test_mae": "test MAE",
    "density_u": "share of nonzero entries in U",
    "density_v": "share of nonzero entries in V",
    "bytes_up": "bytes uploaded",
    "bytes_down": "bytes downloaded",
    "seconds": "training time (s)",
    "round": "communication round",
    "loss": "loss",
    "rmsd": "RMSD",
    "f1": "F1 (data)",
    "f1_signal": "F1 (signal)",
    "epsilon": "privacy budget epsilon",
    "epsilon_server": "privacy budget epsilon against the server",
    "dp_epsilon": "composed epsilon",
    "train_seconds": "training seconds",
}


def metric_label(name: str) -> str:
    """A readable name of a metric or history column (``a/b``: both names, divided)."""
    if "/" in name:
        num, den = name.split("/", 1)
        return f"{metric_label(num)} / {metric_label(den)}"
    return METRIC_LABELS.get(name, name)


@dataclass(frozen=True)
class FinishedRun:
    """One finished run: its facets, history columns and summary."""

    facets: dict[str, Any]
    history: dict[str, np.ndarray]
    summary: dict[str, Any]

    def final(self, name: str) -> float:
        """A final metric (from the summary, else a facet); ``a/b`` divides two of them.

        NaN when absent or not a number.
        """
        if "/" in name:
            num, den = name.split("/", 1)
            return self.final(num) / self.final(den)
        return _float(self.summary.get(name, self.facets.get(name)))

    def coordinate(self, name: str) -> float:
        """A facet's numeric value (a grid key), else a final metric: an x-axis value."""
        return _float(self.facets[name]) if name in self.facets else self.final(name)


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def read_history(path: Path) -> dict[str, np.ndarray]:
    """The columns of a ``history.csv`` as float arrays (NaN where a row has no value)."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        return {}
    return {
        name: np.array([_number(row.get(name)) for row in rows], dtype=float)
        for name in rows[0]
    }


def _number(text: str | None) -> float:
    try:
        return float(text) if text not in (None, "") else math.nan
    except ValueError:
        return math.nan


def read_run(folder: Path, facets: dict[str, Any]) -> FinishedRun:
    """Read the run in ``folder``."""
    return FinishedRun(
        facets=facets,
        history=read_history(folder / "history.csv"),
        summary=json.loads((folder / "summary.json").read_text()),
    )


def series_key(run: FinishedRun, facets: list[str]) -> str:
    """The label of the line a run belongs to: its values of ``facets``, joined."""
    parts = []
    for name in facets:
        value = facet_text(run.facets.get(name, ""))
        if not value:
            continue
        parts.append(value if name in ("dataset", "method", "setting") else f"{name}={value}")
    return ", ".join(parts) or "all runs"


def group(runs: list[FinishedRun], facets: list[str]) -> dict[str, list[FinishedRun]]:
    """Runs grouped by :func:`series_key`, in order of first appearance."""
    groups: dict[str, list[FinishedRun]] = {}
    for run in runs:
        groups.setdefault(series_key(run, facets), []).append(run)
    return groups


@dataclass(frozen=True)
class Band:
    """A line over seeds: ``x``, the mean, the minimum and the maximum of ``y``."""

    x: np.ndarray
    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


def curve_band(runs: list[FinishedRun], x: str, y: str) -> Band | None:
    """History column ``y`` against ``x`` over the seeds of ``runs`` (aligned by row).

    ``x`` is averaged over seeds too (it differs when it is ``seconds``). Rows where ``y`` is
    NaN are dropped. ``None`` when no run has both columns.
    """
    usable = [r for r in runs if x in r.history and y in r.history]
    if not usable:
        return None
    n = min(len(r.history[y]) for r in usable)
    xs = np.array([r.history[x][:n] for r in usable])
    ys = np.array([r.history[y][:n] for r in usable])
    keep = ~np.isnan(ys).any(axis=0)
    if not keep.any():
        return None
    xs, ys = xs[:, keep], ys[:, keep]
    return Band(xs.mean(axis=0), ys.mean(axis=0), ys.min(axis=0), ys.max(axis=0))


def final_band(runs: list[FinishedRun], x: str, y: str) -> Band | None:
    """Final ``y`` against ``x`` (a facet or a summary value), seeds pooled per ``x`` value."""
    points: dict[float, list[float]] = {}
    for run in runs:
        xv, yv = run.coordinate(x), run.final(y)
        if not (math.isnan(xv) or math.isnan(yv)):
            points.setdefault(xv, []).append(yv)
    if not points:
        return None
    xs = np.array(sorted(points))
    ys = [np.array(points[v]) for v in xs]
    return Band(xs, np.array([v.mean() for v in ys]), np.array([v.min() for v in ys]),
                np.array([v.max() for v in ys]))


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value), ignoring NaN; NaN when empty."""
    arr = np.array([v for v in values if not math.isnan(v)])
    if arr.size == 0:
        return math.nan, math.nan
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0
