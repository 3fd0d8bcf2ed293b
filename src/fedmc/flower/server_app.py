"""The ServerApp: the round loop of ``fedmc run`` over real clients.

It runs :func:`fedmc.federation.loop.run_rounds`, the same loop as a simulation (sampling with
the server's stream, the algorithm's message, the server step on the cohort sum released by the
aggregator, evaluation by summed client sums), with
:class:`fedmc.flower.grid_clients.GridClients` as the client population. It writes the files of
``fedmc run``'s contract into the run configuration's ``out`` folder: ``config.json``,
``history.csv`` (with three more columns: ``participants``, the clients whose replies the
round's sum included, ``lost``, the clients asked in the round whose replies were not
included, evaluation included, and ``claims_refused``, the clients whose id a node claimed
without the key or the state folder that speaks for it, :mod:`fedmc.flower.grid_clients`) and
``summary.json``; also ``model.npz`` (the published model, e.g. the item factors ``V``; for a
factor model with ``model.json``, the artifact of :mod:`fedmc.model`) and, while it runs,
``progress.jsonl`` (one line per exchange and per evaluated round).
"""

from __future__ import annotations

import math
import os
import secrets
import time
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

import fedmc
from fedmc.algorithms.registry import spec
from fedmc.core.factors import RANK_BOOST
from fedmc.errors import ConfigError
from fedmc.federation.bounds import GROWTH, NormReference, ReplyBounds
from fedmc.federation.history import History
from fedmc.federation.loop import (
    Checkpoint,
    Rounds,
    TrainingClock,
    run_rounds,
    streams,
)
from fedmc.federation.sampling import cycle_of
from fedmc.federation.validation import EarlyStop
from fedmc.flower.checkpoints import CheckpointWriter, read_checkpoint
from fedmc.flower.grid_clients import (
    COLD_TIMEOUT,
    GridClients,
    Record,
    Refusal,
    UploadNorms,
)
from fedmc.flower.manifest import Manifest
from fedmc.flower.out_folder import CHECKPOINT, claim, recorded, refused, resolved
from fedmc.flower.progress_log import ProgressLog
from fedmc.flower.roster import ROSTER_ENV, read_roster
from fedmc.flower.secagg import MIN_UPLOADERS, SecureSum
from fedmc.flower.settings import FederatedRun
from fedmc.model import FactorModel
from fedmc.run.runner import RunResult, summarize, versions, write_outputs
from fedmc.run.spec import check_normalizer

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the federation described by the run configuration."""
    serve(grid, configured(dict(context.run_config)))


def configured(config: dict[str, Any]) -> FederatedRun:
    """The run a run configuration describes; one that does not parse leaves its refusal in
    the out folder it names (:func:`fedmc.flower.out_folder.refused`) before it is raised."""
    try:
        return FederatedRun.from_run_config(config)
    except ConfigError as exc:
        refused(config, exc)
        raise


def serve(grid: Grid, run: FederatedRun) -> History:
    """Train with the clients behind ``grid``; write the run files; the history. The out
    folder is checked first and ``status.json`` kept (:mod:`fedmc.flower.out_folder`); a
    new run gets a fresh key, a resumed one its checkpoint's."""
    run = resolved(run)
    claim(run)
    resume, stop = read_checkpoint(run) if run.resume else (None, EarlyStop.of(run.schedule))
    key = secrets.token_hex(16) if resume is None else resume.population["key"]
    with recorded(run, key):
        return _train(grid, run, resume, stop, key)


def _train(grid: Grid, run: FederatedRun, resume: Checkpoint | None, stop: EarlyStop | None,
           key: str) -> History:
    """The rounds over the grid's clients from the start, or from ``resume`` with the
    early-stopping watcher ``stop`` as it was then; the run's files."""
    started = time.perf_counter()
    manifest = Manifest.read(run.manifest)
    preflight(run, manifest)
    algorithm, cfg = run.algorithm, run.config()
    info = manifest.federation_info(algorithm.data_kind)
    settings = run.schedule
    rounds = Rounds.of(settings, manifest.n_clients)
    private = rounds.dp is not None and rounds.dp.private
    progress = ProgressLog(run.out / "progress.jsonl", private, append=resume is not None)
    clients = GridClients(grid, manifest.n_clients, run.timeout,
                          secure=SecureSum(run.upload_bound) if run.secagg else None,
                          on_exchange=progress.exchange, on_event=progress.write,
                          roster=_roster(manifest.n_clients), key=key,
                          max_lost=run.max_lost_rounds, bounds=reply_bounds(run, manifest),
                          private=private,
                          reference=NormReference() if run.auto_bound and not private
                          else None)  # a private run's bound is its clip: nothing data-made
    if resume is not None:  # who holds which client, before anyone is admitted
        clients.restore(resume.population)
    clients.connect(max(run.timeout, COLD_TIMEOUT))  # nodes may still be starting
    progress.write({"event": "connected", "seconds": time.perf_counter() - started})
    clock = TrainingClock()
    init_rng, server_rng = streams(settings.seed, secret=private)
    draws = algorithm.draws(cfg, info, init_rng)
    sim = run_rounds(algorithm, cfg, info, clients, rounds, server_draws=draws.server,
                     rng=server_rng, clock=clock, resume=resume, callbacks=[
                         *([] if stop is None else [stop]), progress,
                         CheckpointWriter(run.out, run.run_config(), algorithm, cfg, stop)])
    _mark_participants(sim.history, clients.log, clients.refusals, private)
    summary = summarize(sim.history, sim.guarantee,
                        {"total_seconds": time.perf_counter() - started},
                        None if stop is None else stop.report(rounds.count))
    if not private:  # the norms are the clients' data's: a private run publishes none
        _mark_norms(sim.history, clients.norms)
        summary["uploads"] = _norm_summary(clients.norms, run)
    write_outputs(run.out, RunResult(None, None, sim.history, summary,
                                     {"private": private, **_config(run, manifest)}))
    _save_model(run, run.algorithm_name, cfg, sim.model(algorithm, cfg, stop), manifest, private)
    (run.out / CHECKPOINT).unlink(missing_ok=True)  # the server's secrets: not published
    clients.finish()  # the clients drop their states; the run's key is never continued
    progress.write({"event": "done"})
    return sim.history


def reply_bounds(run: FederatedRun, manifest: Manifest) -> ReplyBounds:
    """What a client's plain reply may hold: the algorithm's declared sums and nonnegative
    uploads, each client's users and cells (its users times the items, from the manifest),
    the operator's ``max-upload-norm``."""
    entry = spec(run.algorithm_name)
    users = np.diff(manifest.client_rows)
    return ReplyBounds(entry.sums, entry.nonnegative_uploads,
                       (users * manifest.n_items).tolist(), users.tolist(),
                       run.upload_bound)


def preflight(run: FederatedRun, manifest: Manifest) -> None:
    """Every check of the run's settings that the round loop makes before its first exchange
    (the algorithm's parameters against the data's sizes, the sampling, the DP plan's budget:
    :func:`fedmc.federation.loop.privacy_plan`), made before any client is contacted, and the
    secure aggregation's: at least two clients, and two per round unless the sampling is
    Bernoulli (a secure sum of one upload is that upload; a round that draws fewer is
    skipped); under DP, a manifest whose normalizer was fitted on the training ratings (split
    without DP): the model would publish it (:func:`fedmc.run.spec.check_normalizer`).
    :class:`fedmc.errors.ConfigError` names the problem."""
    algorithm, cfg, settings = run.algorithm, run.config(), run.schedule
    check_normalizer(settings.dp is not None, manifest.normalizer.kind)
    info = manifest.federation_info(algorithm.data_kind)
    rounds = Rounds.of(settings, manifest.n_clients)
    if run.secagg:
        per_round = (manifest.n_clients // cycle_of(rounds.sampler)
                     if settings.sampling == "cyclic" else settings.active or manifest.n_clients)
        if manifest.n_clients < MIN_UPLOADERS or (settings.sampling != "bernoulli"
                                                  and per_round < MIN_UPLOADERS):
            raise ConfigError(f"secure aggregation sums the uploads of at least "
                              f"{MIN_UPLOADERS} clients: {manifest.n_clients} clients, "
                              f"{per_round} per round would reveal single uploads")
    if rounds.dp is None:  # the parameters against the data's sizes
        algorithm.draws(cfg, info, np.random.default_rng(settings.seed))
    else:  # those, and the plan's budget and mechanism, as every party's aggregator has them
        run.planned_aggregator(info)


def _save_model(run: FederatedRun, name: str, cfg: Any, published: dict[str, np.ndarray],
                manifest: Manifest, private: bool = False) -> None:
    """The published model: for a factor model the artifact ``fedmc run`` writes
    (``model.npz`` + ``model.json``, :class:`fedmc.model.FactorModel`, no user data), which
    ``fedmc recommend`` reads; for the others their arrays in ``model.npz``."""
    if getattr(cfg, "layout", None) is None or not set(published) <= {"V", RANK_BOOST}:
        arrays: dict[str, Any] = dict(published)
        np.savez(run.out / "model.npz", **arrays)
        return
    boost = published.get(RANK_BOOST)
    FactorModel(algorithm=name, params=cfg.model_dump(mode="json"),
                V=np.array(published["V"], dtype=np.float64), item_ids=manifest.item_ids,
                rank_boost=None if boost is None else np.array(boost, dtype=np.float64),
                normalizer=manifest.normalizer, value_range=manifest.value_range,
                dataset=manifest.name, fedmc_version=fedmc.__version__,
                private=private).save(run.out)


def _mark_participants(history: History, log: list[Record], refusals: list[Refusal],
                       private: bool = False) -> None:
    """Add ``participants``, ``lost`` (not in a private run: who took part in which round is
    the secret of the sampling) and ``claims_refused`` (client ids, space-separated) to every
    row; a claim refused in a round without a row goes to the next row."""
    after = -1
    for row in history.rows:
        records = [r for r in log if r.round == row["round"]]
        sums = [r for r in records if r.phase != "evaluate"]
        if not private:
            row["participants"] = " ".join(map(str, sums[-1].included)) if sums else ""
            row["lost"] = " ".join(map(str, sorted({c for r in records for c in r.lost})))
        last = row is history.rows[-1]
        row["claims_refused"] = " ".join(map(str, sorted({
            r.client for r in refusals if after < r.round and (r.round <= row["round"] or last)
        })))
        after = row["round"]


def _mark_norms(history: History, norms: list[UploadNorms]) -> None:
    """Add the median and largest norm of the plain uploads each round's exchanges took, and
    how many lay above the bound (refused), to every row (no column under secure
    aggregation, where the server sees no upload)."""
    if not norms:
        return
    for row in history.rows:
        mine = [n for n in norms if n.round == row["round"]]
        taken = [x for n in mine for x in n.taken]
        row["upload_norm_median"] = float(np.median(taken)) if taken else math.nan
        row["upload_norm_max"] = max(taken, default=math.nan)
        row["uploads_over_bound"] = sum(len(n.over) for n in mine)


def _norm_summary(norms: list[UploadNorms], run: FederatedRun) -> dict[str, Any]:
    """The plain uploads' norms over the run, per phase, and the rule that bounded them."""
    rule = (f"auto: {GROWTH:g} times the phase's reference norm (fedmc.federation.bounds."
            "NormReference)" if run.auto_bound else
            "none" if math.isinf(run.upload_bound) else f"max-upload-norm = {run.upload_bound:g}")
    phases: dict[str, Any] = {}
    for phase in dict.fromkeys(n.phase for n in norms):
        mine = [n for n in norms if n.phase == phase]
        taken = np.array([x for n in mine for x in n.taken])
        phases[phase] = {"taken": len(taken), "over_bound": sum(len(n.over) for n in mine),
                         **({} if not len(taken) else {
                             "norm_median": float(np.median(taken)),
                             "norm_p90": float(np.quantile(taken, 0.9)),
                             "norm_max": float(taken.max())})}
    return {"bound": rule, "phases": phases}


def _roster(n_clients: int) -> dict[int, bytes] | None:
    """The roster of the SuperLink this ServerApp runs beside (``fedmc federate server`` names
    it in :data:`fedmc.flower.roster.ROSTER_ENV`), None without one; it must name a key for
    every client."""
    path = os.environ.get(ROSTER_ENV)
    if not path:
        return None
    roster = read_roster(Path(path))
    missing = sorted(set(range(n_clients)) - set(roster))
    if missing:
        raise ConfigError(f"{path}: no key for clients {missing} of this federation")
    return roster


def _config(run: FederatedRun, manifest: Manifest) -> dict[str, Any]:
    import flwr

    return {
        "algorithm": run.algorithm_name,
        "params": run.config().model_dump(mode="json"),
        "run": {"algorithm": run.algorithm_name, **run.schedule.model_dump(mode="json")},
        "data": {**manifest.source, "users": manifest.n_users, "items": manifest.n_items,
                 "normalizer": vars(manifest.normalizer)},
        "federation": {"secagg": run.secagg, "timeout": run.timeout,
                       "manifest": str(run.manifest)},
        "versions": {**versions(), "flwr": flwr.__version__},
    }
