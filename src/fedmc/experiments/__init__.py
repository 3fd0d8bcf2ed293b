"""Reproducible experiments: presets, grids of runs, resumable execution, plots and reports.

An experiment file (TOML; the packaged presets are in ``presets/``) expands into runs of
algorithms x data sets x settings x seeds (:mod:`~fedmc.experiments.expand`); the runs go to
``runs/<name>/<timestamp>/`` (:mod:`~fedmc.experiments.store`), in parallel processes if asked
(:mod:`~fedmc.experiments.launch`), and a ``report.md`` with figures and tables follows
(:mod:`~fedmc.experiments.report`). See ``docs/experiments.md``.
"""

from __future__ import annotations

from fedmc.experiments.config import (
    ExperimentConfig,
    load_experiment,
    load_preset,
    preset_names,
)
from fedmc.experiments.expand import PlannedRun, expand
from fedmc.experiments.session import ExperimentRun, run_experiment

__all__ = [
    "ExperimentConfig",
    "ExperimentRun",
    "PlannedRun",
    "expand",
    "load_experiment",
    "load_preset",
    "preset_names",
    "run_experiment",
]
