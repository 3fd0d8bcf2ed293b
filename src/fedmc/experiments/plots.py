"""Figures of finished runs: one PNG per data set, one panel per plot specification.

Every line is the mean over seeds with a shaded min-max band. Colours are fixed per method for
a whole experiment (series of one method differ by line style); when the method does not
vary, per series. Figures are
drawn on a bare :class:`matplotlib.figure.Figure` (Agg), never through pyplot's global state,
and the same runs give the same PNG bytes.
"""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from fedmc.experiments.config import PlotSpec
from fedmc.experiments.results import FinishedRun, curve_band, final_band, metric_label
from fedmc.files import write_atomic

PANEL_SIZE = (4.6, 3.4)
DPI = 100
_PALETTE = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
]
_STYLES = ["-", "--", ":", "-."]


def series_styles(keys: list[tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """``(colour, line style)`` of every series, from ``(label, colour key)`` pairs in order.

    Series with the same colour key (their method) share a colour and differ by line style,
    so a method keeps one colour in every figure.
    """
    colours: dict[str, str] = {}
    used: dict[str, int] = {}
    styles: dict[str, tuple[str, str]] = {}
    for label, key in keys:
        if label in styles:
            continue
        colour = colours.setdefault(key, _PALETTE[len(colours) % len(_PALETTE)])
        styles[label] = (colour, _STYLES[used.get(key, 0) % len(_STYLES)])
        used[key] = used.get(key, 0) + 1
    return styles


Panel = tuple[PlotSpec, dict[str, list[FinishedRun]]]


def draw_panel(ax: Axes, spec: PlotSpec, groups: dict[str, list[FinishedRun]],
               styles: dict[str, tuple[str, str]]) -> bool:
    """Draw one panel; ``False`` when no run has the data it asks for."""
    drawn = False
    for label, runs in groups.items():
        band = (curve_band if spec.kind == "curve" else final_band)(runs, spec.x, spec.y)
        if band is None:
            continue
        colour, style = styles[label]
        marker = "o" if spec.kind == "final" or len(band.x) == 1 else None
        ax.plot(band.x, band.mean, color=colour, linestyle=style, marker=marker,
                markersize=4, linewidth=1.5, label=label)
        if len(runs) > 1:
            ax.fill_between(band.x, band.lo, band.hi, color=colour, alpha=0.18, linewidth=0)
        drawn = True
    ax.set_xlabel(spec.xlabel or metric_label(spec.x))
    ax.set_ylabel(spec.ylabel or metric_label(spec.y))
    if spec.title:
        ax.set_title(spec.title, fontsize=10)
    if spec.logx:
        ax.set_xscale("log")
    if spec.logy:
        ax.set_yscale("log")
    ax.grid(True, which="major", alpha=0.3)
    if not drawn:
        ax.text(0.5, 0.5, f"no {spec.y} in these runs", ha="center", va="center",
                transform=ax.transAxes, color="gray")
    return drawn


def save_figure(path: Path, panels: list[Panel], title: str,
                styles: dict[str, tuple[str, str]]) -> None:
    """Panels side by side under ``title``, written as a PNG to ``path``."""
    width, height = PANEL_SIZE
    # wrap a long title to the figure's width (about 10 characters per inch at this size)
    lines = textwrap.wrap(title, width=max(30, int(10 * width * len(panels)))) or [""]
    title = "\n".join(lines)
    fig = Figure(figsize=(width * len(panels), height + 0.3 + 0.2 * len(lines)), dpi=DPI)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (spec, groups) in zip(axes, panels, strict=True):
        draw_panel(ax, spec, groups, styles)
    legend: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    if legend:
        axes[0].legend(list(legend.values()), list(legend), fontsize=7, frameon=False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, buffer.getvalue())
