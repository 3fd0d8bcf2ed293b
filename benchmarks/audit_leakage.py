"""The curious server's rated-item-set attack on FedMC-ADMM (issue 13, ``fedmc.privacy.audit``).

ML-100K, one user per client, 20 rounds. Plain and SecAgg: 10 clients per round (uniform);
DP: Poisson sampling at the same rate, epsilon 8 at delta 1e-6 over the whole run. Modes:
``rated`` (consensus on rated items: every exchange read) and ``all`` (the paper's consensus:
only the set-up upload ``Y_i^0`` is read). Prints one JSON line per (mode, server view,
attack) with precision, recall and the base rate; and, in rated mode, the rating
reconstruction from the set-up exchange (``decode_setup``: each client's own upload in plain
view, the set-up sum over every client otherwise) with RMSE and like/dislike accuracy (like:
4 stars or more) against predicting the mean training rating.

Example::

    FEDMC_DATA=../shared/data python benchmarks/audit_leakage.py
"""

from __future__ import annotations

import itertools
import json

import numpy as np

from fedmc.algorithms import get_algorithm
from fedmc.algorithms.fedmc_admm import ALGORITHM
from fedmc.algorithms.fedmc_admm.rated import COUNT, UPLOAD
from fedmc.pipeline import DataSettings, federate, load_ratings
from fedmc.privacy.accounting import UserDP
from fedmc.privacy.audit import (
    broadcast_outliers,
    cohort_outliers,
    decode_setup,
    guessed_rated,
    observations,
    rated_sets,
    rating_scores,
    set_scores,
)
from fedmc.sim.sampling import make_sampler
from fedmc.testing import record_boundary

ROUNDS = 20
ACTIVE = 10
SETTINGS = {"rated": {"consensus": "rated", "beta": 0.6, "gamma": 12, "lam": 5, "inner": 20},
            "all": {"dual_init": "paper"}}
DP = UserDP(clip=0.3, epsilon=8.0, delta=1e-6)


def truth(data) -> dict[int, np.ndarray]:
    """Every client's training items (one user per client)."""
    tr = data.train
    return {c: tr.indices[tr.indptr[c]:tr.indptr[c + 1]] for c in range(data.n_clients)}


def reconstruction(data, cfg, records, view: str, std: float) -> dict[str, float]:
    """Decode the set-up exchange as the server holds it; scores over every client's ratings
    on the items decoded for it."""
    setup = next(r for r in records if r.message.phase == "setup")
    V0 = setup.message.arrays["V"]
    norm, tr = data.normalizer, data.train
    grid = norm.transform(np.unique(tr.values if norm is None else norm.inverse(tr.values)))
    predicted, true = [], []
    for o in observations([setup], "plain" if view == "plain" else "sum", UPLOAD):
        rows = guessed_rated(o.array, std)
        count = 1.0 if view == "plain" else np.asarray(setup.summed[COUNT])[rows]
        y = o.array[rows] - cfg.beta * count * V0[rows]
        decoded = dict(zip(rows.tolist(), decode_setup(y, V0[rows], 1.0 / data.n_items, grid),
                           strict=True))
        for c in o.clients.tolist():
            for q in range(tr.indptr[c], tr.indptr[c + 1]):
                if tr.indices[q] in decoded:
                    predicted.append(decoded[tr.indices[q]])
                    true.append(tr.values[q])
    to_stars = norm.inverse if norm is not None else np.asarray
    stars = to_stars(np.array(true))
    return {**rating_scores(to_stars(np.array(predicted)), stars,
                            float(to_stars(tr.values).mean()), 4.0), "ratings": len(true)}


def main() -> None:
    settings = DataSettings(dataset="ml-100k", partition="user", seed=0)
    data = federate(load_ratings(settings), settings)
    items = truth(data)
    for mode, params in SETTINGS.items():
        cfg = ALGORITHM.Config(**params)
        views = {
            "plain": (lambda: make_sampler(data.n_clients, ACTIVE), None),
            "secagg": (lambda: make_sampler(data.n_clients, ACTIVE), None),
            "secagg+dp": (lambda: make_sampler(data.n_clients, ACTIVE, "bernoulli"), DP),
        }
        for view, (sampler, dp) in views.items():
            records, sim = record_boundary(ALGORITHM, cfg, data, sampler, ROUNDS, 0, dp=dp)
            if mode == "all":
                records = [r for r in records if r.message.phase == "setup"]
            std = 0.0
            if dp is not None:
                std = float(sim.history.column("dp_noise")[-1]) * dp.clip
            obs = list(observations(records, "plain" if view == "plain" else "sum", UPLOAD))
            for attack, intersect in (("first", False), ("intersect", True)):
                scores = set_scores(rated_sets(obs, std, intersect), items, data.n_items)
                print(json.dumps({"mode": mode, "view": view, "attack": attack,
                                  **{k: round(v, 4) for k, v in scores.items()}}), flush=True)
            if mode == "rated":
                scores = reconstruction(data, cfg, records, view, std)
                print(json.dumps({"mode": mode, "view": view, "attack": "ratings",
                                  **{k: round(v, 4) for k, v in scores.items()}}), flush=True)


def others(data, items) -> None:
    """FedMAvg's ``W_i`` and RFRec's ``V_(i)``, plain uploads, 10 clients per round (uniform),
    5 rounds: rows that are not the broadcast rows times the client's common factor
    (:func:`fedmc.privacy.audit.broadcast_outliers`), and rows that differ from the cohort's
    median row (:func:`fedmc.privacy.audit.cohort_outliers`)."""
    for name in ("fedmavg", "rfrec"):
        algorithm = get_algorithm(name).algorithm
        records, _ = record_boundary(algorithm, algorithm.Config(), data,
                                     lambda: make_sampler(data.n_clients, ACTIVE), 5, 0)
        upload = next(iter(records[-1].summed.arrays))
        obs = list(observations(records, "plain", upload))
        sent = {r.message.round: next(iter(r.message.arrays.values())) for r in records}
        for attack, intersect in itertools.product(("broadcast", "cohort"), (False, True)):
            guesses = (broadcast_outliers(obs, sent, intersect) if attack == "broadcast"
                       else cohort_outliers(obs, intersect))
            scores = set_scores(guesses, items, data.n_items)
            print(json.dumps({"mode": name, "view": "plain", "attack": attack,
                              "intersect": intersect,
                              **{k: round(v, 4) for k, v in scores.items()}}), flush=True)


if __name__ == "__main__":
    main()
    settings = DataSettings(dataset="ml-100k", partition="user", seed=0)
    data = federate(load_ratings(settings), settings)
    others(data, truth(data))
