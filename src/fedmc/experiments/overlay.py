"""``fedmc plot``: re-plot and overlay finished runs from their folders.

A folder may be one run (``fedmc run --out DIR``: it holds ``history.csv``) or an experiment
folder (it holds ``experiment.json``; its finished runs are grouped over seeds as in its
report). Each line is one run folder, or one series of an experiment folder.
"""

from __future__ import annotations

import json
from pathlib import Path

from fedmc.errors import ConfigError
from fedmc.experiments.config import PlotSpec, facet_text
from fedmc.experiments.plots import save_figure, series_styles
from fedmc.experiments.results import FinishedRun, read_run, series_key
from fedmc.experiments.store import EXPERIMENT_FILE, is_done, read_meta, run_dir

DEFAULT_Y = ("objective", "test_rmse", "loss", "f1")
LOG_BY_DEFAULT = ("objective", "loss")
LABEL_FACETS = ("dataset", "method", "setting")


def collect(folders: list[Path]) -> dict[str, list[FinishedRun]]:
    """Finished runs of ``folders`` grouped into labelled series."""
    series: dict[str, list[FinishedRun]] = {}
    many = len(folders) > 1
    for folder in folders:
        if (folder / EXPERIMENT_FILE).is_file():
            groups = {(f"{folder.name}: {k}" if many else k): v
                      for k, v in _experiment_series(folder).items()}
        elif (folder / "history.csv").is_file():
            groups = {folder.name: [_plain_run(folder)]}
        else:
            raise ConfigError(f"{folder} holds neither history.csv nor {EXPERIMENT_FILE}")
        for label, runs in groups.items():
            series.setdefault(label, []).extend(runs)
    return series


def _experiment_series(folder: Path) -> dict[str, list[FinishedRun]]:
    meta = read_meta(folder)
    if meta is None:
        raise ConfigError(f"{folder / EXPERIMENT_FILE} cannot be read")
    specs = [r for r in meta["runs"] if is_done(folder, r["run_id"])]
    if not specs:
        raise ConfigError(f"{folder} has no finished run yet")
    facets = [f for f in LABEL_FACETS
              if len({facet_text(r["facets"][f]) for r in meta["runs"]}) > 1] or ["method"]
    groups: dict[str, list[FinishedRun]] = {}
    for spec in specs:
        run = read_run(run_dir(folder, spec["run_id"]), spec["facets"])
        groups.setdefault(series_key(run, facets), []).append(run)
    return groups


def _plain_run(folder: Path) -> FinishedRun:
    config = json.loads((folder / "config.json").read_text())
    return read_run(folder, {"method": config.get("algorithm", folder.name)})


def plot_runs(folders: list[Path], out: Path, ys: list[str] | None = None, x: str = "round",
              log: list[str] | None = None, title: str | None = None) -> Path:
    """Draw the finished runs of ``folders``: one panel per column of ``ys``, written to ``out``.

    Parameters
    ----------
    folders
        Run folders or experiment folders.
    out
        The PNG to write.
    ys
        History columns, one panel each (default: those of ``objective``, ``test_rmse``,
        ``loss``, ``f1`` the runs have).
    x
        The history column on the horizontal axis (``round`` or ``seconds``).
    log
        Columns drawn on a log scale (default: ``objective`` and ``loss``).
    title
        The figure's title (default: the folder names).
    """
    series = collect(folders)
    columns = set().union(*(r.history for runs in series.values() for r in runs))
    ys = ys or [c for c in DEFAULT_Y if c in columns]
    if not ys:
        raise ConfigError("no column to plot: give --y COLUMN")
    unknown = [c for c in [*ys, x] if c not in columns]
    if unknown:
        raise ConfigError(f"no column {', '.join(unknown)} in these runs; "
                          f"they have {', '.join(sorted(columns))}")
    log = list(LOG_BY_DEFAULT) if log is None else log
    panels = [(PlotSpec(y=y, x=x, logy=y in log), series) for y in ys]
    save_figure(out, panels, title or ", ".join(f.name for f in folders),
                series_styles([(label, label) for label in series]))
    return out
