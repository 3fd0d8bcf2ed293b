"""The curious server: what it can infer from what it receives (issue 13's audit).

:func:`observations` turns a run recorded at the client/server boundary
(:func:`fedmc.audit.boundary.record_boundary`) into what the server holds in each mode:

* ``plain``: every client's own upload (a server process that forms the sum itself);
* ``secagg``: the cohort's sum only (secure aggregation);
* ``dp``: the cohort's sum with the user-level DP noise (a run recorded with ``dp``).

:func:`rated_sets` is the rated-item-set attack: an item is guessed rated when its row of the
observation stands out from what the observation holds on items nobody in it rated, a multiple
of a *reference* the server can compute: zero for FedMC-ADMM (with ``consensus="rated"`` it
uploads rows on rated items only; its set-up ``Y_i^0`` is zero off the rated items), the
broadcast ``V`` for FedMAvg (its unrated rows shrink by one factor per client), RFRec's shared
columns (:func:`fedmc.algorithms.rfrec.client.shared_uploads`). A row is guessed rated when it
is off that multiple (plain, SecAgg) or when its distance exceeds what the noise alone reaches
with probability ``1 - level`` (DP). A client's guesses from every exchange it took part in
may be intersected (the cross-round attack). :func:`set_scores` compares guesses with the
truth: precision, recall, and the base rate (the precision of guessing at random).

The decoders recover a one-user client's ratings from the closed form of its client step:
:func:`decode_rank_one` (FedMC-ADMM's set-up dual, RFRec's first step through
:func:`first_gradients`) and :func:`decode_fedmavg` (FedMAvg's ``W_i``). Under secure
aggregation, :func:`parallel_groups` splits a cohort's sum of such rank-one uploads into its
members' exclusive items, each group decodable as one user's (a :class:`Group`), and
:func:`link_groups` names the clients whose groups recur in several cohorts.
:mod:`fedmc.audit.run` runs them all on one algorithm and data set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import linalg, sparse, stats
from scipy.sparse import csgraph

from fedmc.algorithms.fedmavg.config import ModelAveragingConfig
from fedmc.algorithms.rfrec.client import ADAM_EPS
from fedmc.audit.boundary import BoundaryRecord
from fedmc.core.uploads import svec_pairs


@dataclass(frozen=True)
class Observation:
    """One thing the server holds: the ``array`` of exchange ``round`` and the uploading
    ``clients`` it covers (one in plain mode, the cohort otherwise)."""

    round: int
    clients: np.ndarray
    array: np.ndarray


def observations(records: Sequence[BoundaryRecord], mode: str,
                 name: str | tuple[str, ...]) -> Iterator[Observation]:
    """What the server holds of upload ``name`` in each exchange, in ``mode`` (of several
    uploads with one row per item, side by side)."""
    names = (name,) if isinstance(name, str) else name
    for rec in records:
        cohort = np.unique(rec.message.upload)
        if not len(cohort):
            continue
        if mode != "plain":
            assert rec.summed is not None  # recorded by every server step
            yield Observation(rec.message.round, cohort,
                              np.hstack([np.asarray(rec.summed[n]) for n in names]))
            continue
        ids = iter(cohort.tolist())
        for uploads, _ in rec.uploads:
            size = uploads[names[0]].n_clients
            for k in range(size):
                one = np.zeros(size)
                one[k] = 1.0
                yield Observation(rec.message.round, np.array([next(ids)]),
                                  np.hstack([uploads[n].weighted_sum(one) for n in names]))


def reference_factor(array: np.ndarray, reference: np.ndarray) -> float:
    """The factor ``f`` that makes ``f * reference`` fit ``array`` on most rows: the ratio
    ``a . v / v . v`` that the most rows share (to a relative ``1e-9``: the unrated rows of an
    exact upload share it however many items the client rated), or, when no two rows share
    one (noise), its median over rows."""
    vv = np.einsum("ij,ij->i", reference, reference)
    live = vv > 0
    if not live.any():
        return 0.0
    ratios = np.sort(np.einsum("ij,ij->i", array, reference)[live] / vv[live])
    tol = 1e-9 * max(float(np.abs(ratios).max()), np.finfo(float).tiny)
    shared = np.searchsorted(ratios, ratios + tol, side="right") - np.arange(len(ratios))
    best = int(np.argmax(shared))
    if shared[best] < 2:
        return float(np.median(ratios))
    return float(np.median(ratios[best:best + shared[best]]))


def off_reference(array: np.ndarray, reference: np.ndarray | None) -> np.ndarray:
    """``array`` less the multiple of ``reference`` that fits it (:func:`reference_factor`):
    what the rows carry beyond what an upload holds on items nobody in it rated."""
    if reference is None:
        return array
    return array - reference_factor(array, reference) * reference


def guessed_rated(array: np.ndarray, reference: np.ndarray | None = None,
                  noise_std: float = 0.0, level: float = 1e-3) -> np.ndarray:
    """Rows guessed rated: rows of ``array`` off the multiple of ``reference`` (zero if None)
    that fits it (:func:`off_reference`), beyond rounding (a norm above ``1e-9`` times the
    largest row's); with noise of standard deviation ``noise_std``, rows whose squared
    distance exceeds the noise's ``1 - level`` quantile."""
    sq = np.einsum("ij,ij->i", res := off_reference(array, reference), res)
    if noise_std == 0.0:
        largest = float(np.einsum("ij,ij->i", array, array).max(initial=0.0))
        return np.flatnonzero(sq > 1e-18 * largest) if largest > 0 else np.flatnonzero(sq > 0)
    threshold = noise_std**2 * stats.chi2.ppf(1.0 - level, array.shape[1])
    return np.flatnonzero(sq > threshold)


def rated_sets(obs: Sequence[Observation],
               reference: Callable[[Observation], np.ndarray | None] = lambda o: None,
               noise_std: float = 0.0, intersect: bool = False) -> dict[int, np.ndarray]:
    """Each client's guessed rated items (:func:`guessed_rated` against ``reference(o)``, what
    observation ``o`` would hold on items nobody in it rated): from its first observation, or
    (``intersect``) the intersection over all observations covering it. A set-up sum over
    every client (the union of all rated sets) is no cohort and is skipped."""
    guesses: dict[int, np.ndarray] = {}
    for o in obs:
        if o.round == 0 and len(o.clients) > 1:
            continue
        rows = guessed_rated(o.array, reference(o), noise_std)
        for c in o.clients.tolist():
            if c not in guesses:
                guesses[c] = rows
            elif intersect:
                guesses[c] = np.intersect1d(guesses[c], rows)
    return guesses


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


def decode_rank_one(rows: np.ndarray, V: np.ndarray, scale: float, grid: np.ndarray,
                    damping: float = 0.0, n_scales: int = 2000, n_minima: int = 20,
                    hidden: int | None = None) -> np.ndarray:
    """Ratings (normalized, on the sorted ``grid``) from rows
    ``y_j = scale (m_j - u . v_j) u / (1 + damping |u|^2)`` of one user (``u`` unknown,
    ``v_j`` the rows of ``V``).

    FedMC-ADMM's set-up dual of a one-user client on a rated item ``j`` is of this form
    (``scale = 1 / n``), so is its first visit with zero duals and consensus on rated items
    (``scale = 2``, ``damping = 1 / beta``: the exact W-step) and RFRec's first gradient
    (``scale = 2``, :func:`first_gradients`): every row is parallel to ``u``. With ``u = t w``
    (``w`` the rows' unit direction, their top singular vector) and ``c_j = y_j . w``,
    ``m_j = c_j (1 + damping t^2) / (scale t) + t (w . v_j)``: one unknown ``t``, found as the
    value that puts the ``m_j`` nearest the rating grid (a search over ``n_scales`` log-spaced
    magnitudes of both signs, then a local refinement around each of its ``n_minima`` best
    local minima: when the ``t (w . v_j)`` term is small, as with RFRec's small ``V̄^0``,
    ``t`` and ``t m / g`` fit a user who gave every item the same rating ``m`` almost equally
    well, and only the refined fit tells them apart).

    ``hidden``: a column the rows leave out (FedMC-ADMM's round uploads zero the column of
    ``V`` fixed to 1, whose partner in ``u`` is the user's bias ``h``): then
    ``u = t w + h e`` and :func:`_decode_with_hidden` finds ``t`` and ``h`` together.
    """
    w = np.linalg.svd(rows, full_matrices=False)[2][0]
    c, b = rows @ w, V @ w
    if hidden is not None:
        return _decode_with_hidden(c, b, V[:, hidden], scale, grid, damping)

    def ratings(t: np.ndarray) -> np.ndarray:
        t = t[:, None]
        return c[None, :] * (1.0 + damping * t**2) / (scale * t) + b[None, :] * t

    best = _search_scale(ratings, grid, np.logspace(-4, 2, n_scales), n_minima)
    return _nearest(ratings(np.array([best]))[0], grid)


def _search_scale(ratings: Callable[[np.ndarray], np.ndarray], grid: np.ndarray,
                  mags: np.ndarray, n_minima: int) -> float:
    """The scale ``t`` (of either sign) whose ``ratings(t)`` lie nearest the rating grid: the
    magnitudes ``mags`` of both signs, then a refinement within 0.5% around each of the
    ``n_minima`` best local minima (:func:`decode_rank_one`)."""
    coarse = np.concatenate([mags[::-1], -mags])  # one path through the scales of each sign
    cost = _grid_costs(ratings(coarse), grid)
    minima = np.flatnonzero((cost <= np.roll(cost, 1)) & (cost <= np.roll(cost, -1)))
    fine = np.linspace(0.995, 1.005, 1001)
    return min((_best_scale(ratings, coarse[i] * fine, grid)
                for i in minima[np.argsort(cost[minima])[:n_minima]]),
               key=lambda st: st[1])[0]


def _decode_with_hidden(c: np.ndarray, b: np.ndarray, e: np.ndarray, scale: float,
                        grid: np.ndarray, damping: float, chunk: int = 50_000) -> np.ndarray:
    """:func:`decode_rank_one` when ``u`` also has a component ``h`` the rows do not show (on
    the unit vector of a column ``e_j = V[j, column]``): ``m_j = c_j (1 + damping (t^2 + h^2))
    / (scale t) + t b_j + h e_j``, that is ``m_j = a c_j + t b_j + h e_j`` with
    ``a scale t = 1 + damping (t^2 + h^2)``: linear in ``(a, t, h)``. Three ratings (the
    best-conditioned rows of ``[c b e]``, pivoted QR) fix ``(a, t, h)`` for each of the
    ``len(grid)^3`` values they may take; the values whose ``(a, t, h)`` put every other rating
    on the grid and meet the constraint are the user's. Exhaustive: no basin to miss (a user
    who gives nearly every item the same rating, a fit with ``h`` one rating step away is as
    good on the grid, and only the constraint tells them apart). Fewer than three rows: the
    least-norm ``(a, t, h)`` of each assignment. ``chunk``: assignments scored at once."""
    X = np.column_stack([c, b, e])
    pick = linalg.qr(X.T, pivoting=True, mode="r")[1][:min(3, len(c))]
    solve = np.linalg.pinv(X[pick])
    n_grid, k = len(grid), len(pick)
    best: np.ndarray | None = None
    best_cost = np.inf
    for lo in range(0, n_grid**k, chunk):
        index = np.arange(lo, min(lo + chunk, n_grid**k))
        values = grid[np.stack(np.unravel_index(index, (n_grid,) * k), axis=1)]
        a, t, h = solve @ values.T
        m = (X @ np.stack([a, t, h])).T
        cost = _grid_costs(m, grid) + (a * scale * t - 1.0 - damping * (t**2 + h**2)) ** 2
        i = int(np.argmin(cost))
        if cost[i] < best_cost:
            best, best_cost = m[i], float(cost[i])
    if best is None:
        raise ValueError("no assignment has a finite cost (non-finite rows)")
    return _nearest(best, grid)


def parallel_groups(rows: np.ndarray, tol: float = 1e-8, least: int = 3) -> list[np.ndarray]:
    """The groups of at least ``least`` rows parallel to one another (``|cos| > 1 - tol``,
    joined transitively), largest first. In a cohort's sum of uploads whose rows are each
    parallel to the uploader's ``u`` (:func:`decode_rank_one`), the rows of the items only
    one member rated are that member's: one group per member, which splits the sum; a row
    that several members' rows add up to is parallel to none of them."""
    norms = np.linalg.norm(rows, axis=1)
    live = np.flatnonzero(norms > 0)
    unit = rows[live] / norms[live, None]
    close = sparse.csr_matrix(np.abs(unit @ unit.T) > 1.0 - tol)
    _, label = csgraph.connected_components(close, directed=False)
    groups = [live[label == k] for k in np.unique(label)]
    return sorted((g for g in groups if len(g) >= least), key=len, reverse=True)


def equal_groups(rows: np.ndarray, tol: float = 1e-9, least: int = 3) -> list[np.ndarray]:
    """The groups of at least ``least`` equal rows (to ``tol`` times the largest entry),
    largest first. In a cohort's sum of federated ALS's statistics, a member's exclusive items
    carry the same packed part ``svec(x x^T)``, and a row several members' rows add up to
    equals none of them (:class:`fedmc.audit.targets.fedals.FedALSTarget`;
    :func:`parallel_groups` is too loose here: the members' first ``x`` may all lie near one
    direction)."""
    scale = float(np.abs(rows).max(initial=0.0))
    if scale == 0.0:
        return []
    _, label, count = np.unique(np.round(rows / (tol * scale)), axis=0, return_inverse=True,
                                return_counts=True)
    groups = [np.flatnonzero(label.ravel() == k) for k in np.flatnonzero(count >= least)]
    return sorted(groups, key=len, reverse=True)


@dataclass(frozen=True)
class Group:
    """One member's rows split from a cohort's sum (:func:`parallel_groups`): the cohort's
    ``clients`` (which of them it is, the sum does not say), the ``items`` only that member
    rated, and its decoded ``ratings`` of them."""

    clients: np.ndarray
    items: np.ndarray
    ratings: np.ndarray


def link_groups(groups: Sequence[Group], least: int = 3, overlap: float = 0.5,
                ) -> dict[int, np.ndarray]:
    """The clients that groups split from different cohorts name, with their items.

    Two groups are linked when they share at least ``least`` items, and at least ``overlap``
    of the smaller group's, and agree on the rating of every item they share: most likely one
    user's, seen in two cohorts (each group is the user's items less those of the cohort's
    other members, so two of them share most), and then that user is in both. Where two
    linked groups' cohorts have exactly one client in common, that client gets a vote for
    each; a group belongs to the client with most votes, and a named client's guessed rated
    items are those of its groups (the cross-round attack on split sums)."""
    if not groups:
        return {}
    n_items = 1 + max(int(g.items.max()) for g in groups)
    n_clients = 1 + max(int(g.clients.max()) for g in groups)
    values = np.unique(np.concatenate([g.ratings for g in groups]))
    by_item = _incidence([g.items for g in groups], n_items)
    by_rating = _incidence([g.items * len(values) + np.searchsorted(values, g.ratings)
                            for g in groups], n_items * len(values))  # (item, rating) pairs
    cohorts = _incidence([g.clients for g in groups], n_clients)
    shared, agreed = (by_item @ by_item.T).tocoo(), (by_rating @ by_rating.T).tocsr()
    same = np.asarray(agreed[shared.row, shared.col]).ravel() == shared.data
    size = np.diff(by_item.indptr)
    smaller = np.minimum(size[shared.row], size[shared.col])
    keep = (same & (shared.data >= np.maximum(least, overlap * smaller))
            & (shared.row < shared.col))
    a, b = shared.row[keep], shared.col[keep]
    common = np.asarray((cohorts[a].multiply(cohorts[b])).sum(axis=1)).ravel()
    one = common == 1
    client = (cohorts[a[one]].multiply(cohorts[b[one]])).tocsr()
    client = client.indices[client.indptr[:-1]]  # the one client of each such pair
    votes = sparse.coo_matrix((np.ones(2 * len(client)), (np.concatenate([a[one], b[one]]),
                                                          np.concatenate([client, client]))),
                              shape=(len(groups), n_clients)).tocsr()
    owner = np.asarray(votes.argmax(axis=1)).ravel()  # of each group, its most voted client
    named: dict[int, list[np.ndarray]] = {}
    for g in np.flatnonzero(np.diff(votes.indptr)).tolist():
        named.setdefault(int(owner[g]), []).append(groups[g].items)
    return {c: np.unique(np.concatenate(parts)) for c, parts in named.items()}


def _incidence(columns: Sequence[np.ndarray], width: int) -> sparse.csr_matrix:
    """A 0/1 matrix of ``width`` columns with one row per array of ``columns``, its ones at
    that array's (distinct) entries."""
    rows = np.repeat(np.arange(len(columns)), [len(c) for c in columns])
    return sparse.csr_matrix((np.ones(len(rows)), (rows, np.concatenate(columns))),
                             shape=(len(columns), width))


def decode_fedmavg(rows: np.ndarray, V: np.ndarray, factor: float | None, steps: int,
                   cfg: ModelAveragingConfig, n_clients: int, grid: np.ndarray,
                   ) -> tuple[np.ndarray, np.ndarray] | None:
    """Ratings (normalized, on the sorted ``grid``) and the user factor ``u`` of a one-user
    client from its FedMAvg upload, or None when the upload is not of that form.

    The client starts from the broadcast ``V`` and takes ``steps`` (``Q2``) gradient steps
    ``w_j <- w_j - [a u (u . w_j - m_j) + g w_j]`` with ``a = f_scale / d``, ``g = gamma / d``,
    ``d = gamma2 (|u|^2 + shift)`` (``f_scale``, ``shift``: :meth:`~fedmc.algorithms.fedmavg.
    config.ModelAveragingConfig.w_objective`). An unrated row ends at ``(1 - g)^Q2 v_j``, so
    the observed ``factor`` (:func:`reference_factor` against ``V``) gives ``g``, ``d`` and
    ``rho = |u|`` (this needs ``gamma > 0``). On a rated row the part orthogonal to ``u``
    shrinks the same way and the part along ``u``, ``s = w . u / rho``, follows
    ``s <- A s + a rho m_j`` with ``A = 1 - g - a rho^2``, so with ``K = (1 - A^Q2) / (1 - A)``

        y_j = w_j - factor v_j = [(A^Q2 - factor) (v_j . u / rho) + a rho K m_j] u / rho:

    every ``y_j`` (``rows``, the upload less ``factor V`` on the rated items) is parallel to
    ``u``; with ``w`` their unit direction and ``u = t w``, ``m_j = sign(t) (y_j . w -
    (A^Q2 - factor) v_j . w) / (a rho K)``. ``|t| = rho``; the sign, refined within 1% of
    ``rho``, is the one that puts the ``m_j`` nearest the grid.

    ``factor`` None (a member's rows split from a cohort's sum, :func:`parallel_groups`, the
    sum less the cohort's total factor times ``V``): the client's own factor is unknown, but
    it is ``(1 - g)^Q2``, a function of ``rho``; then ``rho`` and the sign are searched
    together (:func:`_search_scale`).
    """
    f_scale, shift = cfg.w_objective(n_clients)
    w = np.linalg.svd(rows, full_matrices=False)[2][0]
    c, b = rows @ w, V @ w

    def ratings(t: np.ndarray) -> np.ndarray:
        rho = np.abs(t)[:, None]
        d = cfg.gamma2 * (rho**2 + shift)
        a = f_scale / d
        A = 1.0 - cfg.gamma / d - a * rho**2
        K = (1.0 - A**steps) / (1.0 - A)
        own = (1.0 - cfg.gamma / d) ** steps if factor is None else factor
        return np.sign(t)[:, None] * (c[None, :] - (A**steps - own) * b[None, :]) / (a * rho * K)

    if factor is None:
        best = _search_scale(ratings, grid, np.logspace(-4, 5, 6000), 20)
    else:
        g = 1.0 - factor ** (1.0 / steps) if 0.0 < factor < 1.0 else 0.0
        rho2 = cfg.gamma / (g * cfg.gamma2) - shift if g > 0.0 else 0.0
        if not rho2 > 0.0:
            return None
        rho = np.sqrt(rho2) * np.linspace(0.99, 1.01, 2001)
        best = _best_scale(ratings, np.concatenate([rho, -rho]), grid)[0]
    return _nearest(ratings(np.array([best]))[0], grid), best * w


def outer_factor(rows: np.ndarray, removed: np.ndarray | None = None, scale: float = 1.0,
                 ) -> tuple[np.ndarray, float]:
    """``x`` (up to sign) with ``x x^T`` the mean packed part of federated ALS's ``rows``
    (divided by ``scale``) plus ``removed`` (:func:`decode_statistics`), and that matrix's
    second largest eigenvalue magnitude over its largest: 0 when it is one user's ``x x^T``,
    not when it sums several users' (a row on an item several members of a cohort rated)."""
    d = int(round((np.sqrt(8 * rows.shape[1] + 9) - 3) / 2))  # width = d (d + 1) / 2 + d
    r, c, coef = svec_pairs(d)
    A = np.zeros((d, d))
    A[r, c] = rows[:, : len(r)].mean(axis=0) / (coef * scale)
    A = A + np.triu(A, 1).T + (0.0 if removed is None else removed)
    w, Q = np.linalg.eigh(A)
    magnitudes = np.sort(np.abs(w))
    ratio = magnitudes[-2] / magnitudes[-1] if d > 1 and magnitudes[-1] > 0 else 0.0
    return np.sqrt(max(w[-1], 0.0)) * Q[:, -1], float(ratio)


def decode_statistics(rows: np.ndarray, grid: np.ndarray, carrier: int | None = None,
                      removed: np.ndarray | None = None, scale: float = 1.0,
                      shift: Callable[[np.ndarray, np.ndarray], float] | None = None,
                      ) -> np.ndarray:
    """Ratings (normalized, on the sorted ``grid``) of one user from its rows of federated
    ALS's item-step statistics, ``[svec(x x^T - E) | (m_j - h) x - c_j]`` on each rated item
    ``j`` (:class:`fedmc.core.uploads.OuterRows`; ``x``: the user's item-step vector, ``h``
    its bias, ``E`` and ``c_j`` what the rows of an earlier upload took away).

    Every row's packed part (divided by ``scale``, the ``gram_scale`` it was sent with) is the
    same: their mean plus ``removed`` (``E``) is ``x x^T``, so ``x`` is its top eigenvector
    times the root of its eigenvalue, up to sign. Then:

    * ``carrier`` (the position in ``x`` of the all-ones column that carries the item bias;
      with biases) fixes the sign (``x[carrier] = 1``);
    * with ``removed`` (a client's first change after a set-up exchange: the set-up rows
      were those of ``x_0 = e``, the carrier's unit vector, ``E = e e^T``, ``c_j = m_j e``),
      each row's right-hand side is ``a x + b e`` with ``b = -m_j``: the ratings exactly;
    * else the right-hand sides are ``(m_j - h) x``: ``d_j = m_j - h`` exactly, and ``h`` is
      ``shift(x, d)`` (the user step's closed form, where the caller has one), or the shift
      that puts every ``d_j + h`` nearest the grid (each candidate puts one ``d_j`` on a grid
      value; a user whose ratings all fit the grid one step higher is ambiguous), or without
      a carrier (``h = 0``) the sign that does.
    """
    x, _ = outer_factor(rows, removed, scale)
    d = len(x)
    if carrier is not None and x[carrier] < 0:
        x = -x
    rhs = rows[:, d * (d + 1) // 2:]
    if removed is not None:
        e = np.zeros(d)
        e[carrier] = 1.0
        coefs = np.linalg.lstsq(np.column_stack([x, e]), rhs.T, rcond=None)[0]
        return _nearest(-coefs[1], grid)
    y = rhs @ x / max(x @ x, np.finfo(float).tiny)
    if shift is not None:
        return _nearest(y + shift(x, y), grid)
    if carrier is None:
        m = np.stack([y, -y])
    else:
        shifts = np.unique((grid[:, None] - y[None, :]).ravel())
        m = y[None, :] + shifts[:, None]
    return _nearest(m[int(np.argmin(_grid_costs(m, grid)))], grid)


def first_gradients(rows: np.ndarray, alpha: float, adam: bool) -> np.ndarray:
    """The gradients ``G`` of a client's first local step from the change ``rows`` it made.

    RFRec's first step moves a rated row of ``V_(i)`` from ``V̄^0`` by ``-alpha G`` (gradient
    descent) or, under Adam, whose first step is ``alpha G / (|G| + eps)`` entry by entry, by
    ``-alpha G / (|G| + eps)``: the sign of each entry, and through Adam's ``eps`` its
    magnitude, ``|G| = eps |y| / (alpha - |y|)``. Entries at or beyond ``alpha`` (no single
    step reaches them: a sum, or noise) are taken at the edge. With one user and
    ``V_(i) = V̄^0``, ``-G_j = 2 (m_j - u . v_j) u`` (:func:`decode_rank_one`, ``scale = 2``);
    the returned rows are ``-G``.
    """
    if not adam:
        return rows / alpha
    y = np.minimum(np.abs(rows), alpha * (1.0 - 1e-12))
    return np.sign(rows) * ADAM_EPS * y / (alpha - y)


def _grid_costs(m: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Each row's sum of squared distances of ``m`` to the nearest values of ``grid``."""
    return ((m - _nearest(m, grid)) ** 2).sum(axis=1)


def _best_scale(ratings: Callable[[np.ndarray], np.ndarray], scales: np.ndarray,
                grid: np.ndarray) -> tuple[float, float]:
    """The scale whose ``ratings(scales)`` row lies nearest the rating ``grid``, and its cost
    (:func:`_grid_costs`)."""
    cost = _grid_costs(ratings(scales), grid)
    best = int(np.argmin(cost))
    return float(scales[best]), float(cost[best])


def _nearest(m: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """The value of the sorted ``grid`` nearest each entry of ``m``."""
    hi = np.clip(np.searchsorted(grid, m), 1, len(grid) - 1)
    lo = hi - 1
    return np.where(m - grid[lo] <= grid[hi] - m, grid[lo], grid[hi])


def rating_scores(predicted: np.ndarray, true: np.ndarray, mean: float,
                  like: float) -> dict[str, float]:
    """RMSE and like/dislike accuracy (a rating ``>= like`` is a like) of ``predicted``
    against ``true`` ratings (original scale), of predicting ``mean`` for every rating, and the
    accuracy of the better constant guess (all likes or all dislikes, ``accuracy_constant``):
    the mean's accuracy is one of the two, not necessarily the better one."""
    likes = true >= like
    return {"rmse": float(np.sqrt(np.mean((predicted - true) ** 2))),
            "accuracy": float(np.mean((predicted >= like) == likes)),
            "rmse_mean": float(np.sqrt(np.mean((mean - true) ** 2))),
            "accuracy_mean": float(np.mean((mean >= like) == likes)),
            "accuracy_constant": float(max(likes.mean(), 1.0 - likes.mean()))}
