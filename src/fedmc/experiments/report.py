"""``report.md`` of a finished experiment: what ran, the figures, the tables of final metrics.

The report holds nothing that changes between two executions of the same runs (no dates,
no timings, no host names): an experiment that was interrupted and resumed gives the same
bytes as one that ran straight through. Timings live in ``timing.json`` and in each run's
``summary.json``. (A figure or table that plots or tabulates seconds is measured, so it
differs from one execution to the next.)
"""

from __future__ import annotations

from pathlib import Path

from fedmc.experiments.config import ExperimentConfig, PlotSpec
from fedmc.experiments.expand import Expansion, slug
from fedmc.experiments.plots import Panel, save_figure, series_styles
from fedmc.experiments.results import FinishedRun, group, read_run
from fedmc.experiments.store import REPORT_FILE, RUNS_FOLDER, run_dir
from fedmc.experiments.tables import build_table, markdown
from fedmc.files import write_atomic

PLOTS_FOLDER = "plots"


def load_runs(folder: Path, expansion: Expansion) -> list[FinishedRun]:
    """Every run of ``expansion`` read back from ``folder`` (all must be finished)."""
    return [read_run(run_dir(folder, r.run_id), r.facets) for r in expansion.runs]


def series_facets(spec: PlotSpec, expansion: Expansion) -> list[str]:
    """The facets whose values make one line of a panel.

    Curves: method and setting, or method and the grid keys when the setting only names the
    grid point. Final values: method and the grid keys other than ``x`` (or the setting when
    there is no grid). Only facets that vary count; ``spec.series`` overrides all this.
    """
    if spec.series is not None:
        return spec.series
    varied = expansion.varied()
    grid = expansion.grid_keys()
    if spec.kind == "curve":
        wanted = ["method", "setting", *grid]
    else:
        wanted = ["method", *([k for k in grid if k != spec.x] if grid else ["setting"])]
    return [f for f in wanted if f in varied] or ["method"]


def write_report(folder: Path, config: ExperimentConfig, expansion: Expansion) -> Path:
    """Draw the figures into ``folder/plots`` and write ``folder/report.md``; its path."""
    runs = load_runs(folder, expansion)
    figures = _figures(folder, config, expansion, runs)
    parts = [_head(config, expansion)]
    if figures:
        parts.append("## Figures\n")
        parts += [f"### {name}\n\n![{name}]({PLOTS_FOLDER}/{file})\n" for name, file in figures]
    for spec in config.tables:
        table = build_table(spec, runs, expansion.varied(), config.paper)
        parts.append(f"## {spec.title}\n\n{_seeds_line(config)}\n\n{markdown(table)}")
    parts.append(
        "## Files\n\n"
        f"Each run's `config.json`, `history.csv` and `summary.json` are in "
        f"`{RUNS_FOLDER}/<run id>/`; wall-clock times are in `timing.json` and in each "
        "`summary.json`, not here, so that this report does not change when an experiment is "
        "resumed.\n"
    )
    path = folder / REPORT_FILE
    write_atomic(path, "\n".join(parts))
    return path


def _head(config: ExperimentConfig, expansion: Expansion) -> str:
    runs = expansion.runs
    counts = {f: len({str(r.facets[f]) for r in runs}) for f in ("dataset", "method", "setting")}
    seeds = config.seed_list
    lines = [f"# {config.title}\n"]
    if config.description:
        lines.append(config.description.strip() + "\n")
    if config.reference:
        lines.append(f"Reproduces: {config.reference}\n")
    lines.append(
        f"Experiment `{config.name}`: {len(runs)} runs = {counts['dataset']} data set(s) x "
        f"{counts['method']} method(s) x {counts['setting']} setting(s) x {len(seeds)} seed(s) "
        f"({', '.join(map(str, seeds))}). Expanded configuration hash "
        f"`{expansion.digest[:12]}`.\n"
    )
    lines.append("| run id | algorithm | data set | setting |\n|---|---|---|---|")
    seen = set()
    for r in runs:
        key = r.run_id.rsplit("__s", 1)[0]
        if key not in seen:
            seen.add(key)
            lines.append(f"| `{key}__s*` | {r.algorithm} | {r.facets['dataset']} | "
                         f"{r.facets['setting'] or '–'} |")
    lines.append("")
    if expansion.notes:
        lines.append("**Notes.**\n")
        lines += [f"- {note}" for note in expansion.notes]
        lines.append("")
    return "\n".join(lines)


def _seeds_line(config: ExperimentConfig) -> str:
    n = len(config.seed_list)
    return (f"Final values, mean ± standard deviation over {n} seeds." if n > 1
            else "Final values of one seed.")


def _figures(folder: Path, config: ExperimentConfig, expansion: Expansion,
             runs: list[FinishedRun]) -> list[tuple[str, str]]:
    """One figure per data set with a panel per plot spec; ``(data set, file name)`` pairs."""
    if not config.plots:
        return []
    datasets = list(dict.fromkeys(str(r.facets["dataset"]) for r in runs))
    per_dataset: list[tuple[str, list[Panel]]] = []
    keys: list[tuple[str, str]] = []
    for name in datasets:
        mine = [r for r in runs if str(r.facets["dataset"]) == name]
        panels = []
        for spec in config.plots:
            facets = series_facets(spec, expansion)
            groups = group(mine, facets)
            panels.append((spec, groups))
            keys += [(label, str(members[0].facets["method"]) if "method" in facets else label)
                     for label, members in groups.items()]
        per_dataset.append((name, panels))
    styles = series_styles(keys)
    out = []
    for name, panels in per_dataset:
        file = f"{slug(name)}.png"
        save_figure(folder / PLOTS_FOLDER / file, panels, f"{config.title}: {name}", styles)
        out.append((name, file))
    return out
