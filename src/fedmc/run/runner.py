"""One complete run: data, algorithm, engine, and the files of the run contract.

``--out DIR`` receives ``config.json`` (every resolved setting, seed, versions),
``history.csv`` (one row per evaluated round) and ``summary.json`` (final metrics, seconds,
peak memory); a factor-model run adds ``model.npz`` and ``model.json`` (:mod:`fedmc.model`).
Files are written only after the run succeeded, each atomically, so a failed or
interrupted run leaves no partial file behind.
"""

from __future__ import annotations

import platform
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numba
import numpy as np
import scipy

import fedmc
from fedmc.algorithms.registry import AlgorithmSpec, spec
from fedmc.core.compile_time import compile_seconds
from fedmc.core.kernels import use_generic_kernels
from fedmc.core.ranking import top_k_metrics
from fedmc.data import FederatedData
from fedmc.errors import ConfigError
from fedmc.federation.history import History
from fedmc.federation.loop import RoundCallback
from fedmc.files import strict_json, write_atomic
from fedmc.model import FactorModel
from fedmc.privacy.accounting import UserDP
from fedmc.run import precompile
from fedmc.run.cost_note import announce_cost
from fedmc.run.data import federated_data, load_boolean_data
from fedmc.run.scale_facts import scale_facts
from fedmc.run.shard_load import load_on_shards, loads_on_shards
from fedmc.run.spec import RunSpec
from fedmc.run.train import Trained, train
from fedmc.sim.sharded import population


@dataclass
class RunResult:
    """What a run produced: what its training left (``trained``), the data, the history,
    summary and ``config.json`` it writes; ``artifact`` is the saved model of a factor-model
    run (a federation's result has no training here and no data: the clients hold them)."""

    trained: Trained | None
    data: FederatedData | Any
    history: History
    summary: dict[str, Any]
    config: dict[str, Any]
    artifact: FactorModel | None = None
    validation_history: History | None = None


def execute(
    run: RunSpec,
    *,
    callback: RoundCallback | None = None,
    progress_download: bool = False,
    kernels: Literal["specialized", "auto"] = "specialized",
    loaded: tuple[Any, dict[str, Any]] | None = None,
) -> RunResult:
    """Load data, build the algorithm, run it; nothing is written here.

    An early-stopped run that refits (``schedule.early_stopping.refit``) runs twice: on the
    training ratings without the validation cut until it stops, then on every training rating
    for the best round's number of rounds (the same run as one without the cut, stopped
    there: the same seed gives the same draws). The refit's model, history and summary are
    the result; the first pass's history is ``validation_history`` and its report is the
    summary's ``early_stopping``.
    """
    first = _fit(run, callback, progress_download, kernels, loaded)
    stopping = run.schedule.early_stopping
    report = first.summary.get("early_stopping")
    if stopping is None or not stopping.refit or report is None:
        return first
    if loaded is not None:
        raise ConfigError("refit needs the data without the validation cut: give "
                          "`refit=false` with data loaded beforehand")
    best = report["round"] or 0
    final = _fit(run.refit(best), callback, False, kernels, None)
    final.summary = {**{k: v for k, v in final.summary.items() if k != "privacy"},
                     "early_stopping": {**report, "refit_rounds": best},
                     "privacy": final.summary["privacy"]}
    final.config = {**final.config, "run": run.settings(),
                    "data": {**final.config["data"],
                             "validation_fraction": run.data.validation_fraction}}
    final.validation_history = first.validation_history
    return final


def _fit(run: RunSpec, callback: RoundCallback | None, progress_download: bool,
         kernels: Literal["specialized", "auto"], loaded: tuple[Any, dict[str, Any]] | None,
         ) -> RunResult:
    """Load data, build the algorithm, run it once (:func:`execute`'s parameters).

    ``loaded``: the data the settings describe and their notes for ``config.json``, already
    built (the canary audit's neighbouring data sets, :mod:`fedmc.audit.canary`); else they
    are loaded here.

    A factor model's run also evaluates its top-``ranking_k`` lists once training is over (the
    columns are added to the last history row, :mod:`fedmc.core.ranking`) and builds the model
    artifact (``RunResult.artifact``; user factors only with ``save_user_factors``). An early
    stop publishes its best round's model: the history ends at that round (``history.csv``
    describes the published model) and ``validation_history`` is the whole curve that chose.

    ``kernels="auto"`` runs a rank whose specialized kernels are not compiled yet on the
    generic kernels instead of compiling them first (:mod:`fedmc.run.precompile`; the caller may
    then compile them in the background: ``RunResult.config["kernels"]`` says which ran); where
    the generic kernels are not compiled either and the data are still to be loaded, child
    processes compile them while the data load, and the run waits for them before training (its
    wait counted in ``compile_seconds``; with ``loaded`` data there is nothing to overlap).
    """
    started = time.perf_counter()
    compiled_before = compile_seconds()
    entry = spec(run.algorithm)
    cfg = run.config()  # validate parameters before any loading
    if run.backend.kind == "ray" and not entry.federated:
        raise ConfigError(f"`backend=ray` shards a federation's clients; {run.algorithm} trains "
                          "in one process")
    placed = population(run.backend)  # Ray started (or joined) before any loading
    factor_model = entry.data_kind == "ratings"  # every ratings algorithm learns U V^T
    if not factor_model and (run.ranking_k is not None or run.save_user_factors):
        raise ConfigError(f"`ranking_k` and `save_user_factors` need a factor model; "
                          f"{run.algorithm} is not one")
    specialized = precompile.kernels_of(entry, cfg)
    generic = (kernels == "auto" and specialized is not None
               and not precompile.is_compiled(*specialized))
    if specialized is not None:
        use_generic_kernels(specialized[1], generic)
    # the kernels compiled once for every rank (of an algorithm without a rank token: all)
    key = precompile.generic_key(entry, cfg)
    warming = None
    if kernels == "auto" and (generic or specialized is None) and loaded is None \
            and key is not None and not precompile.is_compiled(key, precompile.GENERIC):
        warming = precompile.compile_generic_alongside(
            run.algorithm, cfg.model_dump(mode="json"), run.data.one_user)
    dp = run.schedule.dp
    if dp is not None:
        check_private_run(entry, dp, run)
    data_settings = run.data
    if entry.data_kind == "boolean":
        data = load_boolean_data(data_settings)
        stats = {"rows": data.shape[0], "columns": data.shape[1], "density": data.density}
    else:
        if loaded is None and placed is not None and loads_on_shards(run):
            loaded = load_on_shards(run, placed), {}  # each shard generates its own
        data, notes = loaded or federated_data(data_settings, progress=progress_download)
        stats = {**notes,
            "users": data.n_users,
            "items": data.n_items,
            # "ratings" is the file's path
            "n_ratings": data.n_train_ratings + data.n_test_ratings,
            "train_ratings": data.n_train_ratings,
            "test_ratings": data.n_test_ratings,
        }
    stats["clients"] = data.n_clients  # as federated (one per user with partition user)
    private = dp is not None and dp.private
    if private:  # counts of the data are exact releases: only the public sizes stay
        stats = {k: v for k, v in stats.items() if k in PUBLIC_SIZES}
    if entry.data_kind != "boolean":
        stats.update(scale_facts(data_settings, data, private))
        if not private:  # the bound reads the count of ratings
            announce_cost(cfg, run.schedule, data.n_train_ratings, data.n_clients)
    load_seconds = time.perf_counter() - started
    waited = 0.0
    if warming is not None:  # the run's part, then the child's, loaded from the cache
        compiled_loading = compile_seconds()
        ranked = run.ranking_k or run.schedule.eval_k  # no child compiles the top-N lists
        if ranked is not None:
            precompile.compile_ranking(data_settings.implicit, warming.one_user, ranked)
        precompile.finish_warming(warming)
        # its own part's compiling is in compile_seconds() already
        waited = (time.perf_counter() - started - load_seconds
                  - (compile_seconds() - compiled_loading))
    # the refit is execute's (on the data loaded without the cut), not train's
    trained = train(run.without_refit(), data, population=placed, callbacks=callback)
    if specialized is not None:
        precompile.mark_compiled(specialized[0], precompile.GENERIC if generic
                                 else specialized[1])
    elif key is not None:
        precompile.mark_compiled(key, precompile.GENERIC)
    history, stopped = trained.history, trained.stopped
    best = None if stopped is None else stopped["round"]
    artifact = None
    if factor_model:
        artifact = FactorModel.of(run.algorithm, cfg, trained.model, trained.info,
                                  data.item_ids, data.name,
                                  trained.privacy["private"],
                                  (trained.user_factors, data) if run.save_user_factors
                                  else None)
        if run.ranking_k is not None and run.schedule.eval_k is None:  # of the published model
            published = history.rows[-1] if best is None else next(
                row for row in history.rows if row["round"] == best)
            published.update(top_k_metrics(
                data, *artifact.ranking_factors(trained.user_factors), run.ranking_k))
    summary = summarize(history, trained.privacy, {
        "data_seconds": load_seconds,
        "compile_seconds": compile_seconds() - compiled_before + waited,
        "total_seconds": time.perf_counter() - started}, stopped)
    config = {
        "private": summary["privacy"]["private"],
        "algorithm": run.algorithm,
        "params": cfg.model_dump(mode="json"),
        "run": run.settings(),
        "data": {**data_settings.model_dump(mode="json"), **stats,
                 "normalizer": vars(data.normalizer) if hasattr(data, "normalizer") else None},
        "versions": versions(),
        "kernels": "generic" if generic else "specialized",
    }
    if best is None:
        return RunResult(trained, data, history, summary, config, artifact)
    # an early stop publishes its best round's model: the history ends there, the whole
    # curve that chose is the validation history
    return RunResult(trained, data,
                     History([row for row in history.rows if row["round"] <= best]),
                     summary, config, artifact, validation_history=history)


PUBLIC_SIZES = ("users", "items", "rows", "columns", "clients")
"""The data's sizes a private run publishes: the enrolled users and clients and the item
catalogue (the model's rows), public facts of a deployment (``docs/privacy.md``)."""


def check_private_run(entry: AlgorithmSpec, dp: UserDP, run: RunSpec) -> None:
    """Refuse, before any data are read, what a run with user-level DP cannot do: DP for a
    centralized method; exact ranking metrics in a private run (``fedmc evaluate`` gives
    them). (A guarantee per user over clients of several users is refused where the run's
    plan is made, :func:`fedmc.federation.loop.privacy_plan`.)"""
    if not entry.federated:
        raise ConfigError(f"user-level DP applies to federated algorithms; "
                          f"{run.algorithm} is not one")
    if dp.private and run.ranking_k is not None:
        raise ConfigError("`ranking_k` evaluates on the held-out ratings, an exact release a "
                          "private run does not make: run fedmc evaluate RUN --ranking-k K")




def summarize(history: History, privacy: dict[str, Any], timings: dict[str, float],
              stopped: dict[str, Any] | None = None) -> dict[str, Any]:
    """``summary.json``: the row of the published model (the last history row; with early
    stopping, ``stopped``, the best round's, and the stop's report as ``early_stopping``), the
    run's ``timings`` (with the training seconds of the whole run and the peak memory; not in
    a private run: how long the data took is a function of the data) and its DP guarantee
    (``privacy``, :meth:`fedmc.federation.aggregator.Aggregator.guarantee`)."""
    final = history.rows[-1]
    published = final
    if stopped is not None and stopped["round"] is not None:
        published = next(row for row in history.rows if row["round"] == stopped["round"])
    summary: dict[str, Any] = {**published}
    if stopped is not None:
        summary["early_stopping"] = stopped
    if not privacy["private"]:
        summary.update(timings, train_seconds=final["seconds"], peak_memory_mb=peak_memory_mb())
    summary["privacy"] = privacy
    return summary


def peak_memory_mb() -> float:
    """Peak resident memory of this process in MiB."""
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024 if sys.platform != "darwin" else kb / 2**20


def versions() -> dict[str, str]:
    """Versions of what produced a result."""
    return {
        "fedmc": fedmc.__version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "numba": numba.__version__,
        "machine": platform.machine(),
    }


def write_outputs(out: Path, result: RunResult) -> None:
    """Write the files of the run contract into ``out``, each atomically (JSON strictly: an
    undefined metric is ``null``)."""
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "config.json", strict_json(result.config))
    write_atomic(out / "history.csv", result.history.csv_text())
    write_atomic(out / "summary.json", strict_json(result.summary))
    if result.validation_history is not None:
        write_atomic(out / "validation_history.csv", result.validation_history.csv_text())
    if result.artifact is not None:  # model.npz + model.json (fedmc.model.store)
        result.artifact.save(out)
