"""What ``fedmc tune`` leaves beside its study: the trials table (``trials.csv``), the best
settings as a run configuration (``best.json``) and the plots of the search (``search.png``:
every trial's score and the best so far; ``settings.png``: each searched setting against the
score, of the completed trials alone: a pruned trial's value is that of an early round).
Figures are drawn on a bare :class:`matplotlib.figure.Figure` (Agg), as the experiments'
are."""

from __future__ import annotations

import csv
import io
import shlex
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from fedmc.algorithms.spec import Choice, Range
from fedmc.files import strict_json, write_atomic
from fedmc.run.spec import RunSpec
from fedmc.tune.private import SCORE, Chosen, PrivateSearch
from fedmc.tune.search import SURPLUS, Search

DPI = 100


def trial_rows(study: Any) -> list[dict[str, Any]]:
    """One row per trial started (not those queued, waiting, nor a process's surplus past a
    grid: :data:`fedmc.tune.search.SURPLUS`): number, state (Optuna's,
    ``interrupted`` for a trial a signal or a killed process stopped:
    :func:`fedmc.tune.search.close_interrupted`), score (of the published model, users
    folded in, where the search scores it: :mod:`fedmc.tune.published`), the clients' own
    score of the same round (``clients_value``; empty where that is the score), best round,
    seconds (training alone), seconds spent compiling kernels, then its settings (the fold-in
    values it was scored at among them)."""
    settings = {t.number: {**t.params, **t.user_attrs.get("fold_in", {})} for t in study.trials}
    names = sorted({name for found in settings.values() for name in found})
    return [{"trial": t.number,
             "state": "interrupted" if t.user_attrs.get("interrupted") else t.state.name.lower(),
             "value": t.value,
             "clients_value": t.user_attrs.get("clients_value"),
             "best_round": t.user_attrs.get("best_round"),
             "seconds": t.user_attrs.get("seconds"),
             "compile_seconds": t.user_attrs.get("compile_seconds"),
             **{name: settings[t.number].get(name) for name in names}} for t in study.trials
            if t.state.name != "WAITING" and not t.user_attrs.get(SURPLUS)]


def trials_text(rows: list[dict[str, Any]]) -> str:
    """``trials.csv`` of :func:`trial_rows` (an empty cell where a trial has no value)."""
    text = io.StringIO()
    if rows:  # every row's columns (the candidates of a search have settings of their own)
        names = list(dict.fromkeys(name for row in rows for name in row))
        writer = csv.DictWriter(text, fieldnames=names, restval="", lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)
    return text.getvalue()


def command_line(run: RunSpec, settings: dict[str, Any], typed: list[str]) -> str:
    """A ``fedmc run`` command of the final run: the options the user typed (``--space``,
    ``--trials`` and ranges left out), the searched ``settings`` and the rounds (the rest of
    ``run.params`` is what ``fedmc run`` resolves from those)."""
    params = [f"-P {k}={v}" for k, v in sorted(settings.items())]
    return shlex.join(["fedmc", "run", *typed]) + " " + " ".join(
        [*params, f"--rounds {run.schedule.rounds}"])


def write_best(path: Path, search: Search, study: Any, final: RunSpec, config: dict[str, Any],
               typed: list[str], column: str, published: dict[str, Any] | None = None,
               candidates: dict[str, float | None] | None = None) -> None:
    """``best.json``: the best trial, its score (``scored``: on the published model, users
    folded in, or on the clients' own rows), its settings (fold-in values included), the
    final run's configuration (``config``: its ``config.json``, whose ``run`` and ``data`` it
    repeats), its command line and, where given, the final run's ``published`` evaluation
    (``fedmc evaluate``'s metrics on the test split) and the best score of each of a search's
    ``candidates`` (algorithms; null where no trial completed)."""
    best = study.best_trial
    settings = {**best.params, **best.user_attrs.get("fold_in", {})}
    write_atomic(path, strict_json({
        "trial": best.number, "metric": column, "value": best.value,
        "scored": "published model, users folded in" if "clients_value" in best.user_attrs
        else "clients' own rows",
        "best_round": best.user_attrs["best_round"], "settings": settings,
        **_final_fields({**search.space, **search.fold_in}, search.options.validation_fraction,
                        final, config, settings, typed),
        **({"evaluation": published["metrics"]} if published is not None else {}),
        **({"candidates": candidates} if candidates is not None else {})}))


def write_private_best(path: Path, search: PrivateSearch, chosen: Chosen,
                       typed: list[str]) -> None:
    """``best.json`` of a private search: what it publishes (:class:`fedmc.tune.private.
    Chosen`): the chosen settings and the noised score (null when one run released none), the
    ranges and fold-in candidates, the chosen run's configuration and command line, and the
    search's guarantee (``privacy``). No trial number, count, time or other trial's value, no
    fold-in candidate's score: they are not released."""
    write_atomic(path, strict_json({
        "metric": f"{SCORE} (noised)", "value": chosen.score, "settings": chosen.settings,
        **_final_fields({**search.space, **search.fold_in}, search.options.validation_fraction,
                        chosen.spec, chosen.result.config, chosen.settings, typed),
        "privacy": chosen.guarantee}))


def _final_fields(space: dict[str, Any], cut: float | None, final: RunSpec,
                  config: dict[str, Any], settings: dict[str, Any],
                  typed: list[str]) -> dict[str, Any]:
    """What both ``best.json`` say of the search (its space and ``validation_fraction``, the
    cut its choices were scored on: the final run's ``data`` say 0, it trains on every
    training rating) and of the final run (its ``config.json``'s ``run`` and ``data``: the
    data's sizes as the run found them)."""
    return {"space": {name: vars(r) for name, r in space.items()}, "validation_fraction": cut,
            "algorithm": final.algorithm, "params": final.params,
            "run": config["run"], "data": config["data"],
            "command": command_line(final, settings, typed)}


def plot_search(folder: Path, rows: list[dict[str, Any]], column: str, larger: bool,
                space: dict[str, Any]) -> None:
    """``search.png`` and ``settings.png`` (module docstring)."""
    done = [r for r in rows if r["value"] is not None]
    if not done:
        return
    fig = Figure(figsize=(6.0, 3.6))
    ax = fig.add_subplot()
    for state, marker in (("complete", "o"), ("pruned", "x")):
        mine = [r for r in done if r["state"] == state]
        ax.scatter([r["trial"] for r in mine], [r["value"] for r in mine], marker=marker,
                   label=state)
    complete = [r for r in done if r["state"] == "complete"]
    running, best = [], None
    for r in complete:
        best = r["value"] if best is None else (max if larger else min)(best, r["value"])
        running.append(best)
    ax.step([r["trial"] for r in complete], running, where="post", label="best so far")
    ax.set_xlabel("trial")
    ax.set_ylabel(column)
    ax.legend()
    fig.tight_layout()
    write_atomic(folder / "search.png", lambda fh: fig.savefig(fh, format="png", dpi=DPI))
    names = list(space)
    fig = Figure(figsize=(3.4 * len(names), 3.2))
    for i, name in enumerate(names):  # a pruned trial's value is an early round's: no score
        ax = fig.add_subplot(1, len(names), i + 1)
        searched = space[name]
        ax.scatter([str(r[name]) if isinstance(searched, Choice) else r[name]
                    for r in complete], [r["value"] for r in complete], s=14)
        if isinstance(searched, Range) and searched.log:
            ax.set_xscale("log")
        ax.set_xlabel(name)
        ax.set_ylabel(column if i == 0 else "")
    fig.tight_layout()
    write_atomic(folder / "settings.png", lambda fh: fig.savefig(fh, format="png", dpi=DPI))
