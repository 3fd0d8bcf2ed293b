"""The curious server: what it can infer from what it receives (issue 13's audit).

:func:`observations` turns a run recorded at the client/server boundary
(:func:`fedmc.testing.record_boundary`) into what the server holds in each mode:

* ``plain``: every client's own upload (a server process that forms the sum itself);
* ``secagg``: the cohort's sum only (secure aggregation);
* ``dp``: the cohort's sum with the user-level DP noise (a run recorded with ``dp``).

:func:`rated_sets` is the rated-item-set attack: an item is guessed rated when its row of the
observation stands out from what an upload carries on items nobody in the cohort rated. That
is zero for the uploads this audit reads (FedMC-ADMM with ``consensus="rated"`` uploads rows
on rated items only; its set-up ``Y_i^0`` is zero off the rated items), so a row is guessed
rated when it is nonzero (plain, SecAgg) or when its norm exceeds what the noise alone reaches
with probability ``1 - level`` (DP). A client's guesses from every exchange it took part in
may be intersected (the cross-round attack). :func:`set_scores` compares guesses with the
truth: precision, recall, and the base rate (the precision of guessing at random).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from fedmc.testing import BoundaryRecord


@dataclass(frozen=True)
class Observation:
    """One thing the server holds: the ``array`` of exchange ``round`` and the uploading
    ``clients`` it covers (one in plain mode, the cohort otherwise)."""

    round: int
    clients: np.ndarray
    array: np.ndarray


def observations(records: Sequence[BoundaryRecord], mode: str,
                 name: str) -> Iterator[Observation]:
    """What the server holds of upload ``name`` in each exchange, in ``mode``."""
    for rec in records:
        cohort = np.unique(rec.message.upload)
        if not len(cohort):
            continue
        if mode != "plain":
            yield Observation(rec.message.round, cohort, np.asarray(rec.summed[name]))
            continue
        ids = iter(cohort.tolist())
        for uploads, _ in rec.uploads:
            stacked = uploads[name]
            for k in range(stacked.n_clients):
                one = np.zeros(stacked.n_clients)
                one[k] = 1.0
                yield Observation(rec.message.round, np.array([next(ids)]),
                                  stacked.weighted_sum(one))


def guessed_rated(array: np.ndarray, noise_std: float = 0.0,
                  level: float = 1e-3) -> np.ndarray:
    """Rows guessed rated: nonzero rows, or with noise of standard deviation ``noise_std``
    rows whose squared norm exceeds the noise's ``1 - level`` quantile."""
    sq = np.einsum("ij,ij->i", array, array)
    if noise_std == 0.0:
        return np.flatnonzero(sq > 0.0)
    threshold = noise_std**2 * stats.chi2.ppf(1.0 - level, array.shape[1])
    return np.flatnonzero(sq > threshold)


def rated_sets(obs: Sequence[Observation], noise_std: float = 0.0,
               intersect: bool = False) -> dict[int, np.ndarray]:
    """Each client's guessed rated items: from its first observation, or (``intersect``) the
    intersection over all observations covering it. A set-up sum over every client (the
    union of all rated sets) is no cohort and is skipped."""
    guesses: dict[int, np.ndarray] = {}
    for o in obs:
        if o.round == 0 and len(o.clients) > 1:
            continue
        rows = guessed_rated(o.array, noise_std)
        for c in o.clients.tolist():
            _guess(guesses, c, rows, intersect)
    return guesses


def broadcast_outliers(obs: Sequence[Observation], broadcast: dict[int, np.ndarray],
                       intersect: bool = False) -> dict[int, np.ndarray]:
    """Each client's guessed rated items from plain uploads of algorithms that start every
    round from the broadcast model and move an unrated row by the regularizer alone, so that
    the unrated rows of one upload are the broadcast rows times one factor of that client
    (FedMAvg: ``W_j = (1 - gamma / L_i)^Q2 V_j``, ``L_i`` from the client's own ``U_i``): a row
    is guessed rated when it is not that multiple of the round's broadcast row (the factor is
    the median over rows of ``w . v / v . v``). ``broadcast`` maps a round to the model sent.
    First observation, or (``intersect``) the intersection over a client's rounds."""
    guesses: dict[int, np.ndarray] = {}
    for o in obs:
        V = broadcast[o.round]
        vv = np.einsum("ij,ij->i", V, V)
        live = vv > 0
        factor = float(np.median(np.einsum("ij,ij->i", o.array, V)[live] / vv[live]))
        off = np.linalg.norm(o.array - factor * V, axis=1)
        found = np.flatnonzero(off > 1e-9 * max(float(np.sqrt(vv.max())), 1e-300))
        _guess(guesses, int(o.clients[0]), found, intersect)
    return guesses


def cohort_outliers(obs: Sequence[Observation], intersect: bool = False,
                    ) -> dict[int, np.ndarray]:
    """Each client's guessed rated items from plain uploads whose rows on unrated items are
    the same for every client of a round: a row is guessed rated when it differs from the
    cohort's elementwise median row, which is the unrated row wherever fewer than half the
    cohort rated the item (the other clients' uploads show what an unrated row looks like).
    First observation, or (``intersect``) the intersection over a client's rounds."""
    by_round: dict[int, list[Observation]] = {}
    for o in obs:
        by_round.setdefault(o.round, []).append(o)
    guesses: dict[int, np.ndarray] = {}
    for round_obs in by_round.values():
        if len(round_obs) < 3:
            continue
        stack = np.stack([o.array for o in round_obs])
        median = np.median(stack, axis=0)
        scale = max(float(np.abs(median).max()), 1e-300)
        differs = np.abs(stack - median).max(axis=2) > 1e-12 * scale
        for o, rows in zip(round_obs, differs, strict=True):
            _guess(guesses, int(o.clients[0]), np.flatnonzero(rows), intersect)
    return guesses


def _guess(guesses: dict[int, np.ndarray], client: int, rows: np.ndarray,
           intersect: bool) -> None:
    """Record ``rows`` as ``client``'s guess: its first, or intersected with the earlier."""
    if client not in guesses:
        guesses[client] = rows
    elif intersect:
        guesses[client] = np.intersect1d(guesses[client], rows)


def set_scores(guesses: dict[int, np.ndarray], truth: dict[int, np.ndarray],
               n_items: int) -> dict[str, float]:
    """Mean recall of ``guesses`` against ``truth`` over the clients with a guess, mean
    precision over those whose guess is not empty (``guessed`` of them), and the base rate:
    the mean share of items a client rated."""
    clients = sorted(guesses)
    if not clients:
        return {"precision": np.nan, "recall": np.nan, "base_rate": np.nan, "clients": 0,
                "guessed": 0}
    hits = [len(np.intersect1d(guesses[c], truth[c])) for c in clients]
    precision = [h / len(guesses[c]) for h, c in zip(hits, clients, strict=True)
                 if len(guesses[c])]
    recall = [h / len(truth[c]) for h, c in zip(hits, clients, strict=True)]
    base = [len(truth[c]) / n_items for c in clients]
    return {"precision": float(np.mean(precision)) if precision else np.nan,
            "recall": float(np.mean(recall)), "base_rate": float(np.mean(base)),
            "clients": len(clients), "guessed": len(precision)}


def decode_setup(rows: np.ndarray, V: np.ndarray, scale: float, grid: np.ndarray,
                 n_scales: int = 2000) -> np.ndarray:
    """Ratings (normalized, on the sorted ``grid``) from the set-up rows ``y_j = e_j u`` of a user.

    FedMC-ADMM's set-up dual of a one-user client on a rated item ``j`` is
    ``Y_j^0 = scale (m_j - u . v_j) u`` (``scale = 1 / n``): every row is parallel to ``u``.
    With ``u = t w`` (``w`` the rows' unit direction, its top singular vector) and
    ``c_j = y_j . w``, ``m_j = c_j / (scale t) + t (w . v_j)``: one unknown ``t``, found as
    the value that puts the ``m_j`` nearest the rating grid (a search over ``n_scales``
    log-spaced magnitudes of both signs, then a local refinement).
    """
    w = np.linalg.svd(rows, full_matrices=False)[2][0]
    c, b = rows @ w, V @ w

    def cost(t: np.ndarray) -> np.ndarray:
        m = c[None, :] / (scale * t[:, None]) + b[None, :] * t[:, None]
        return ((m - _nearest(m, grid)) ** 2).sum(axis=1)

    mags = np.logspace(-4, 2, n_scales)
    t = np.concatenate([mags, -mags])
    best = t[np.argmin(cost(t))]
    fine = best * np.linspace(0.995, 1.005, 1001)
    best = fine[np.argmin(cost(fine))]
    return _nearest(c / (scale * best) + b * best, grid)


def _nearest(m: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """The value of the sorted ``grid`` nearest each entry of ``m``."""
    hi = np.clip(np.searchsorted(grid, m), 1, len(grid) - 1)
    lo = hi - 1
    return np.where(m - grid[lo] <= grid[hi] - m, grid[lo], grid[hi])


def rating_scores(predicted: np.ndarray, true: np.ndarray, mean: float,
                  like: float) -> dict[str, float]:
    """RMSE and like/dislike accuracy (a rating ``>= like`` is a like) of ``predicted``
    against ``true`` ratings (original scale), and of predicting ``mean`` for every rating."""
    likes = true >= like
    return {"rmse": float(np.sqrt(np.mean((predicted - true) ** 2))),
            "accuracy": float(np.mean((predicted >= like) == likes)),
            "rmse_mean": float(np.sqrt(np.mean((mean - true) ** 2))),
            "accuracy_mean": float(np.mean((mean >= like) == likes))}
