"""Tables of final metrics (mean +- std over seeds), pivoted like a paper's table.

Rows and columns are facets of the runs (``dataset``, ``method``, ``setting``, a grid key) or
``metric``. A column of ours that the paper also reports is followed by a column of the
paper's numbers; values that only the paper reports (its other baselines) become columns of
the paper's numbers alone, so the table keeps the paper's layout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fedmc.experiments.config import PaperValue, TableSpec, facet_text
from fedmc.experiments.results import FinishedRun, mean_std, metric_label

METRIC = "metric"
ALWAYS_SHOWN = ("dataset", "method")
MISSING = "–"


@dataclass(frozen=True)
class Column:
    """A table column: its key (one value per column facet) and whose numbers it shows."""

    key: tuple[str, ...]
    paper: bool


def layout(spec: TableSpec, varied: list[str]) -> tuple[list[str], list[str]]:
    """Row and column facets actually used.

    Constant facets are dropped (except ``dataset`` and ``method``); varied facets the spec
    does not name join the rows, where ``setting`` stands in the spec's rows, else last.
    """
    def keep(f: str) -> bool:
        return f == METRIC or f in varied or f in ALWAYS_SHOWN

    cols = [f for f in spec.columns if keep(f)]
    missing = [f for f in varied if f not in spec.rows and f not in cols]
    rows: list[str] = []
    for f in spec.rows:
        if f == "setting":
            rows += missing
            missing = []
        if keep(f):
            rows.append(f)
    return rows + missing, cols


def build_table(
    spec: TableSpec, runs: list[FinishedRun], varied: list[str], paper: list[PaperValue]
) -> list[list[str]]:
    """The table as a header row followed by body rows of cell text."""
    rows, cols = layout(spec, varied)
    cells: dict[tuple[tuple[str, ...], tuple[str, ...]], list[float]] = {}
    row_keys: dict[tuple[str, ...], None] = {}
    col_keys: dict[tuple[str, ...], None] = {}
    for run in runs:
        for metric in spec.metrics:
            values = {**{k: facet_text(v) for k, v in run.facets.items()}, METRIC: metric}
            rk = tuple(values[f] for f in rows)
            ck = tuple(values[f] for f in cols)
            row_keys.setdefault(rk)
            col_keys.setdefault(ck)
            cells.setdefault((rk, ck), []).append(run.final(metric))
    published = _paper_cells(paper, rows, cols, spec.metrics)
    for _, ck in published:
        col_keys.setdefault(ck)
    ours = {ck for _, ck in cells}
    columns: list[Column] = []
    for ck in _ordered(list(col_keys), cols, spec):
        if ck in ours:
            columns.append(Column(ck, paper=False))
        if any(k == ck for _, k in published):
            columns.append(Column(ck, paper=True))
    header = [f.capitalize() for f in rows] + [_header(c, cols) for c in columns]
    body = []
    for rk in _ordered(list(row_keys), rows, spec):
        line = [metric_label(v) if f == METRIC else v for f, v in zip(rows, rk, strict=True)]
        for c in columns:
            if c.paper:
                line.append(published.get((rk, c.key), MISSING))
            else:
                line.append(_mean_std_text(cells.get((rk, c.key), []), spec.digits))
        body.append(line)
    return [header, *body]


def _paper_cells(paper: list[PaperValue], rows: list[str], cols: list[str],
                 metrics: list[str]) -> dict[tuple[tuple[str, ...], tuple[str, ...]], str]:
    """Published values that name every row and column facet, keyed like our cells."""
    out = {}
    for entry in paper:
        if entry.metric not in metrics:
            continue
        values = {**entry.facets(), METRIC: entry.metric}
        if all(f in values for f in rows + cols):
            rk = tuple(values[f] for f in rows)
            ck = tuple(values[f] for f in cols)
            out[(rk, ck)] = entry.value
    return out


def _ordered(keys: list[tuple[str, ...]], facets: list[str],
             spec: TableSpec) -> list[tuple[str, ...]]:
    """Keys sorted facet by facet: by ``spec.order`` where given (metrics by ``spec.metrics``),
    then by the first appearance of each value."""
    orders = []
    for i, f in enumerate(facets):
        given = spec.metrics if f == METRIC else [facet_text(v) for v in spec.order.get(f, [])]
        seen = list(dict.fromkeys(k[i] for k in keys))
        orders.append([*given, *(v for v in seen if v not in given)])
    return sorted(keys, key=lambda k: tuple(orders[i].index(v) for i, v in enumerate(k)))


def _header(column: Column, cols: list[str]) -> str:
    names = [metric_label(v) if f == METRIC else v for f, v in zip(cols, column.key, strict=True)]
    text = ", ".join(names) or "value"
    return f"{text} (paper)" if column.paper else text


def _mean_std_text(values: list[float], digits: int) -> str:
    mean, std = mean_std(values)
    if math.isnan(mean):
        return MISSING
    if len([v for v in values if not math.isnan(v)]) == 1:
        return _number(mean, digits)
    return f"{_number(mean, digits)} ± {_number(std, digits)}"


def _number(x: float, digits: int) -> str:
    if x == 0 or 1e-3 <= abs(x) < 1e5:
        return f"{x:.{digits}f}"
    return f"{x:.{digits}g}"


def markdown(table: list[list[str]]) -> str:
    """A GitHub-flavoured Markdown table; columns of numbers are right-aligned."""
    header, *body = table
    align = []
    for j in range(len(header)):
        numeric = body and all(_looks_numeric(row[j]) for row in body)
        align.append("---:" if numeric else "---")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines) + "\n"


def _looks_numeric(text: str) -> bool:
    head = text.split(" ")[0]
    try:
        float(head)
    except ValueError:
        return head == MISSING
    return True
