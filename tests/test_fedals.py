"""Federated ALS: each closed form against a brute-force solve, the batched simulation against a
plain loop written from the math, centralized ALS with every client in every round, the upload
form and its norms, the fold-in."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from fedmc.algorithms.fedals import ALGORITHM, FedALSConfig
from fedmc.algorithms.fedals.client import PRODUCTS, STATS, contributed, user_step
from fedmc.algorithms.fedals.fold_in import fold_in
from fedmc.algorithms.fedals.kernels import item_solves
from fedmc.core.shard import CSR
from fedmc.core.uploads import OuterRows, ScaledRows, Stacked, svec_pairs, upload_nbytes
from fedmc.errors import ConfigError
from fedmc.estimators import ALS, FedALS
from fedmc.federation.loop import Rounds
from fedmc.federation.sampling import make_sampler
from fedmc.model import load_model
from fedmc.privacy.accounting import UserDP
from fedmc.privacy.gaussian import clip_uploads, squared_norms
from fedmc.sim import simulate
from fedmc.testing import ScheduledSampler, assert_same_history, record_boundary

NOTHING = np.zeros((0, 0))  # item_solves: no round's sums to add first


def dense(data):
    """Training values and mask as dense arrays (rows in federated order)."""
    tr = data.train
    M = np.zeros((data.n_users, data.n_items))
    M[tr.rows(), tr.indices] = tr.values
    mask = np.zeros(M.shape, dtype=bool)
    mask[tr.rows(), tr.indices] = True
    return M, mask


def brute_row(F, fixed_share, m, observed, cfg):
    """Minimize one row's objective by least squares on the stacked system (no normal
    equations): explicit ``sum_obs (m - fixed - f.x)^2 + lam ||x||^2``; implicit
    ``sum_all c (p - f.x)^2 + lam ||x||^2`` over every column."""
    if cfg.implicit:
        c = np.where(observed, 1.0 + cfg.alpha * m, 1.0)
        p = (observed & (m > 0)).astype(float)
        rows, target = np.sqrt(c)[:, None] * F, np.sqrt(c) * p
    else:
        rows, target = F[observed], (m - fixed_share)[observed]
    k = F.shape[1]
    A = np.vstack([rows, np.sqrt(cfg.lam) * np.eye(k)])
    return np.linalg.lstsq(A, np.concatenate([target, np.zeros(k)]), rcond=None)[0]


def reference_round(U, V, M, mask, rows, cfg, weights=None, contributed=None):
    """One round written from the math: the rows ``rows`` solve their problem against ``V``,
    then every item solves its problem against every user's current row (running sums) or
    the rows ``rows`` alone (fresh sums), each user's terms times its ``weights`` (1 if
    None) and on its ``contributed`` ratings (all if None)."""
    lay = cfg.layout
    fu, fv = lay.free_mask_u(), lay.free_mask_v()
    for t in rows:
        U[t, fu] = brute_row(V[:, fu], V[:, ~fu] @ U[t, ~fu], M[t], mask[t], cfg)
    users = np.asarray(rows) if cfg.sums == "fresh" else np.arange(len(U))
    seen = mask if contributed is None else contributed
    root = np.ones(len(users)) if weights is None else np.sqrt(weights[users])
    for j in range(V.shape[0]):  # a weight w on a user's terms: its rows times sqrt(w)
        X = root[:, None] * U[users][:, fv]
        fixed = root * (U[users][:, ~fv] @ V[j, ~fv])
        V[j, fv] = brute_row(X, fixed, root * M[users, j], seen[users, j], cfg) \
            if not cfg.implicit else brute_weighted_implicit(X, M[users, j], seen[users, j],
                                                            root**2, cfg)


def brute_weighted_implicit(X, m, observed, w, cfg):
    """The implicit item problem with user ``t``'s terms (observed or not) times ``w[t]``
    (``X`` already scaled by ``sqrt(w)``): rows ``sqrt(c) X``, targets ``sqrt(c w) p``."""
    c = np.where(observed, 1.0 + cfg.alpha * m, 1.0)
    p = (observed & (m > 0)).astype(float)
    k = X.shape[1]
    A = np.vstack([np.sqrt(c)[:, None] * X, np.sqrt(cfg.lam) * np.eye(k)])
    target = np.concatenate([np.sqrt(c * w) * p, np.zeros(k)])
    return np.linalg.lstsq(A, target, rcond=None)[0]


def reference_run(data, cfg, schedule, V0, contributed=None):
    """:func:`reference_round` over the client sets of ``schedule``, from zero user rows."""
    M, mask = dense(data)
    U = np.zeros((data.n_users, cfg.layout.width))
    cfg.layout.project_u(U)
    V = V0.copy()
    for clients in schedule:
        rows = np.concatenate([np.arange(data.client_ptr[c], data.client_ptr[c + 1])
                               for c in clients])
        reference_round(U, V, M, mask, rows, cfg, contributed=contributed)
    return U, V


def initial_V(cfg, data, seed):
    """``V^0`` of a run with ``seed`` (the first of its two streams)."""
    return ALGORITHM.draws(cfg, data.federation_info(), np.random.default_rng(
        np.random.SeedSequence(seed).spawn(2)[0])).server["V"]


MODES = {
    "explicit-biases": {"rank": 3, "lam": 0.7},
    "explicit-plain": {"rank": 3, "lam": 0.7, "biases": False},
    "implicit": {"rank": 3, "lam": 0.7, "implicit": True, "alpha": 2.5, "solver": "exact"},
}


@pytest.fixture(scope="session")
def data_of(tiny_federated, tiny_interactions):
    """``data_of(mode, p=4, seed=2)``: a small data set for ``mode`` (one of :data:`MODES`)."""

    def build(mode, p=4, seed=2):
        if mode == "implicit":
            return tiny_interactions(m=14, n=9, p=p, density=0.4, seed=seed)
        return tiny_federated(m=14, n=9, p=p, density=0.4, seed=seed)[0]

    return build


@pytest.mark.parametrize("mode", MODES)
def test_user_step_is_the_brute_force_minimizer(mode, data_of):
    cfg = FedALSConfig(**MODES[mode])
    data = data_of(mode)
    M, mask = dense(data)
    rng = np.random.default_rng(0)
    V = rng.normal(size=(data.n_items, cfg.layout.width))
    cfg.layout.project_v(V)
    U = rng.normal(size=(data.n_users, cfg.layout.width))
    cfg.layout.project_u(U)
    expect = U.copy()
    reference_round(expect, V.copy(), M, mask, np.arange(data.n_users), cfg)
    user_step(cfg, data.train, np.arange(data.n_users), U, V)
    np.testing.assert_allclose(U, expect, atol=1e-10)


def test_implicit_user_step_equals_the_dense_all_items_formulation(tiny_interactions):
    """The Gramian trick against Hu et al.'s Eq. (4) with the full n x n confidence matrix."""
    cfg = FedALSConfig(rank=4, lam=0.3, implicit=True, alpha=7.0)
    data = tiny_interactions(m=6, n=11, p=2, seed=5)
    M, mask = dense(data)
    V = np.random.default_rng(1).normal(size=(data.n_items, 4))
    U = np.zeros((data.n_users, 4))
    user_step(cfg, data.train, np.arange(data.n_users), U, V)
    for t in range(data.n_users):
        C = np.diag(np.where(mask[t], 1.0 + 7.0 * M[t], 1.0))
        p = mask[t].astype(float)
        x = np.linalg.solve(V.T @ C @ V + 0.3 * np.eye(4), V.T @ C @ p)
        np.testing.assert_allclose(U[t], x, atol=1e-10)


def packed_item_sums(rng, d, n, raters, users):
    """Random item statistics ``S_j`` (of ``raters`` rows each), a Gramian ``G`` (of
    ``users``) and ``b_j``, and the server's sums of them: ``[svec(S_j) | b_j]`` per item,
    then ``svec(G)``."""
    S = [(lambda B: B @ B.T)(rng.normal(size=(d, raters))) for _ in range(n)]
    G = (lambda B: B @ B.T)(rng.normal(size=(d, users)))
    b = rng.normal(size=(n, d))
    rows, cols, coef = svec_pairs(d)
    total = np.zeros((n + 1, len(rows) + d))
    for j in range(n):
        total[j, : len(rows)] = coef * S[j][rows, cols]
        total[j, len(rows):] = b[j]
    total[n, : len(rows)] = coef * G[rows, cols]
    return S, G, b, total


@pytest.mark.parametrize("steps", [0, 40])
@pytest.mark.parametrize("keep", [1.0, 0.85])
def test_item_step_from_packed_sums_with_the_gramian(steps, keep):
    """The sums the step solves from are ``keep`` times the kept ones plus the round's,
    updated in place (the running sums, or fresh sums' memory); exact or converged CG."""
    d, n, lam = 3, 4, 0.5
    rng = np.random.default_rng(3)
    S, G, b, total = packed_item_sums(rng, d, n, 5, 7)
    rows, cols, coef = svec_pairs(d)
    X = np.zeros((n, d))
    ridge = np.array([lam, 2 * lam, 0.1])  # a ridge weight per column
    scale = 2.5  # sums kept at a scale (gram_scale, fresh sums' weight): divided out
    kept = rng.normal(size=total.shape)
    added = scale * total - keep * kept
    item_solves(kept, added, keep, n, n, ridge, rows, cols,
                scale * np.concatenate([coef, np.ones(d)]), steps, X)
    np.testing.assert_allclose(kept, scale * total, atol=1e-12)
    for j in range(n):
        np.testing.assert_allclose(X[j], np.linalg.solve(S[j] + G + np.diag(ridge), b[j]),
                                   atol=1e-10)


def test_item_step_floors_the_eigenvalues_of_a_noisy_indefinite_system():
    d, lam = 2, 0.5
    A = np.array([[1.0, 3.0], [3.0, 1.0]])  # eigenvalues 4 and -2: no Cholesky factor
    rows, cols, coef = svec_pairs(d)
    total = np.concatenate([coef * A[rows, cols], [1.0, 2.0]])[None, :]
    X = np.empty((1, d))
    item_solves(total, NOTHING, 1.0, 1, -1, np.full(d, lam), rows, cols,
                np.concatenate([coef, np.ones(d)]), 0, X)
    w, Q = np.linalg.eigh(A + lam * np.eye(d))
    np.testing.assert_allclose(X[0], Q @ ((Q.T @ [1.0, 2.0]) / np.maximum(w, lam)), atol=1e-12)


def quadratic(A, b, x):
    """The objective ``1/2 x^T A x - b^T x`` a ridge row's solve minimizes."""
    return 0.5 * x @ A @ x - b @ x


@pytest.mark.parametrize("mode", MODES)
def test_cg_user_steps_reach_the_exact_solve_and_lower_each_rows_objective(mode, data_of):
    """From the rows' previous values: enough steps give the exact step; three steps never
    raise any row's quadratic (Takacs et al. 2011)."""
    cfg = FedALSConfig(**MODES[mode])
    data = data_of(mode)
    rng = np.random.default_rng(0)
    V = rng.normal(size=(data.n_items, cfg.layout.width))
    cfg.layout.project_v(V)
    start = rng.normal(size=(data.n_users, cfg.layout.width))
    cfg.layout.project_u(start)
    rows = np.arange(data.n_users)
    exact, many, three = start.copy(), start.copy(), start.copy()
    user_step(cfg, data.train, rows, exact, V)
    user_step(cfg, data.train, rows, many, V, steps=40)
    user_step(cfg, data.train, rows, three, V, steps=3)
    np.testing.assert_allclose(many, exact, atol=1e-8)
    free = cfg.free_u
    for t in rows:  # the exact row minimizes its quadratic: A x* = b, so b = A x*
        A = brute_system(cfg, data, V, t)
        b = A @ exact[t, free]
        assert quadratic(A, b, three[t, free]) < quadratic(A, b, start[t, free])


def brute_system(cfg, data, V, t):
    """Row ``t``'s ridge system matrix from the dense data: ``F^T C F + lam I`` over every
    item (implicit) or ``F_obs^T F_obs + lam I`` over its rated ones."""
    M, mask = dense(data)
    F = V[:, cfg.free_u]
    c = np.where(mask[t], 1.0 + cfg.alpha * M[t], 1.0) if cfg.implicit else mask[t] * 1.0
    return F.T @ (c[:, None] * F) + cfg.lam * np.eye(F.shape[1])


def test_cg_item_steps_reach_the_exact_solve_and_lower_each_items_objective():
    """The item step's conjugate-gradient steps on the packed sums (read in place) from the
    items' previous rows: enough steps give the exact solve, three lower every item's
    quadratic."""
    rng = np.random.default_rng(4)
    d, n = 6, 5
    S, G, b, total = packed_item_sums(rng, d, n, 9, 12)
    rows, cols, coef = svec_pairs(d)
    ridge = np.linspace(0.2, 1.0, d)
    divisor = np.concatenate([coef, np.ones(d)])
    start = rng.normal(size=(n, d))
    solved = {}
    for steps in (0, 40, 3):
        X = start.copy()
        item_solves(total, NOTHING, 1.0, n, n, ridge, rows, cols, divisor, steps, X)
        solved[steps] = X
    np.testing.assert_allclose(solved[40], solved[0], atol=1e-8)
    for j in range(n):
        A = S[j] + G + np.diag(ridge)
        np.testing.assert_allclose(solved[0][j], np.linalg.solve(A, b[j]), atol=1e-12)
        assert quadratic(A, b[j], solved[3][j]) < quadratic(A, b[j], start[j])


@pytest.mark.parametrize("mode", MODES)
def test_cg_rounds_equal_the_plain_loop_with_enough_steps(mode, data_of):
    """With as many steps as it takes to converge, CG's rounds are the exact rounds."""
    data = data_of(mode, p=14)
    rng = np.random.default_rng(7)
    schedule = [np.sort(rng.choice(data.n_clients, size, replace=False)) for size in (3, 5, 2)]
    cfg = FedALSConfig(**{**MODES[mode], "solver": "cg", "cg_steps": 40})
    sim = simulate(ALGORITHM, cfg, data, seed=4,
                   rounds=Rounds(ScheduledSampler(data.n_clients, schedule), len(schedule)))
    U, V = reference_run(data, cfg, schedule, initial_V(cfg, data, 4))
    np.testing.assert_allclose(sim.server.V, V, atol=1e-8)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("one_user", [False, True])
def test_batched_rounds_equal_the_plain_loop_from_the_math(mode, one_user, data_of):
    cfg = FedALSConfig(**MODES[mode])
    data = data_of(mode, p=14 if one_user else 4)
    rng = np.random.default_rng(7)
    schedule = [np.sort(rng.choice(data.n_clients, size, replace=False))
                for size in (2, 3, 1, data.n_clients, 2)]
    sim = simulate(ALGORITHM, cfg, data, seed=4,
                   rounds=Rounds(ScheduledSampler(data.n_clients, schedule), len(schedule)))
    U, V = reference_run(data, cfg, schedule, initial_V(cfg, data, 4))
    np.testing.assert_allclose(sim.server.V, V, atol=1e-9)
    np.testing.assert_allclose(sim.clients.user_factors(), U, atol=1e-9)


def contributed_mask(data, cfg, seed):
    """Which training ratings each user contributes with ``cfg.max_items``, from the keys a
    run with ``seed`` draws."""
    keys = ALGORITHM.draws(cfg, data.federation_info(), np.random.default_rng(
        np.random.SeedSequence(seed).spawn(2)[0])).rows["key"]
    kept = contributed(data, keys, cfg.max_items)
    return dense(kept)[1]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("max_items", [None, 2])
def test_fresh_sums_solve_the_items_from_the_cohort_alone(mode, max_items, data_of):
    """sums="fresh": the item step of a round sees only the round's cohort's rows (their
    contributed ratings), its user step all of a user's ratings."""
    cfg = FedALSConfig(**MODES[mode], sums="fresh", max_items=max_items)
    data = data_of(mode, p=5)
    rng = np.random.default_rng(3)
    schedule = [np.sort(rng.choice(data.n_clients, size, replace=False))
                for size in (2, 3, 1, data.n_clients, 2)]
    sim = simulate(ALGORITHM, cfg, data, seed=6,
                   rounds=Rounds(ScheduledSampler(data.n_clients, schedule), len(schedule)))
    kept = None if max_items is None else contributed_mask(data, cfg, 6)
    U, V = reference_run(data, cfg, schedule, initial_V(cfg, data, 6), kept)
    np.testing.assert_allclose(sim.server.V, V, atol=1e-9)
    np.testing.assert_allclose(sim.clients.user_factors(), U, atol=1e-9)
    if max_items is None:  # every client every round: fresh sums are the running ones (ALS)
        everyone = [np.arange(data.n_clients)] * 3
        runs = [simulate(ALGORITHM, FedALSConfig(**MODES[mode], sums=sums), data, seed=6,
                         rounds=Rounds(ScheduledSampler(data.n_clients, everyone), 3))
                for sums in ("fresh", "running")]
        np.testing.assert_allclose(runs[0].server.V, runs[1].server.V, atol=1e-10)


def normal_equations(U, M, mask, rows, cfg):
    """Each item's ``(S_j + G, b_j)`` from the users ``rows`` (their current ``U``), written
    from the math: explicit ``S_j = sum x x^T``, ``b_j = sum (m - fixed) x`` over its raters;
    implicit ``G + sum alpha m x x^T``, ``b_j = sum (1 + alpha m) x``."""
    fv = cfg.layout.free_mask_v()
    X = U[rows][:, fv]
    G = X.T @ X if cfg.implicit else 0.0
    out = []
    for j in range(M.shape[1]):
        seen = mask[rows, j]
        m = M[rows, j][seen]
        if cfg.implicit:
            w, y = cfg.alpha * m, 1.0 + cfg.alpha * m
        else:
            w, y = np.ones(len(m)), m - U[rows][seen][:, ~fv].sum(axis=1)  # V's ones column
        out.append((G + (X[seen] * w[:, None]).T @ X[seen], X[seen].T @ y))
    return out


@pytest.mark.parametrize("mode", MODES)
def test_memory_solves_from_the_weighted_mean_of_the_rounds_sums(mode, data_of):
    """sums="fresh", memory=0.6: the item step of round k solves from sum_l 0.6^(k-l) (S, b)
    of round l's cohort over sum_l 0.6^(k-l), the item ridge lam_item; gram_scale (sent
    times 0.3, divided out) changes nothing without noise."""
    cfg = FedALSConfig(**MODES[mode], sums="fresh", memory=0.6, lam_item=1.3, gram_scale=0.3)
    data = data_of(mode, p=5)
    M, mask = dense(data)
    rng = np.random.default_rng(5)
    schedule = [np.sort(rng.choice(data.n_clients, size, replace=False)) for size in (2, 4, 3)]
    sim = simulate(ALGORITHM, cfg, data, seed=1,
                   rounds=Rounds(ScheduledSampler(data.n_clients, schedule), len(schedule)))
    U = np.zeros((data.n_users, cfg.layout.width))
    cfg.layout.project_u(U)
    V = initial_V(cfg, data, 1)
    fu, fv = cfg.layout.free_mask_u(), cfg.layout.free_mask_v()
    totals, weight = None, 0.0
    for clients in schedule:
        rows = np.concatenate([np.arange(data.client_ptr[c], data.client_ptr[c + 1])
                               for c in clients])
        for t in rows:
            U[t, fu] = brute_row(V[:, fu], V[:, ~fu] @ U[t, ~fu], M[t], mask[t], cfg)
        now = normal_equations(U, M, mask, rows, cfg)
        totals = now if totals is None else [(0.6 * S + S1, 0.6 * b + b1) for (S, b), (S1, b1)
                                             in zip(totals, now, strict=True)]
        weight = 0.6 * weight + 1.0
        for j, (S, b) in enumerate(totals):
            V[j, fv] = np.linalg.solve(S / weight + 1.3 * np.eye(fv.sum()), b / weight)
    np.testing.assert_allclose(sim.server.V, V, atol=1e-9)
    with pytest.raises(ValueError, match="needs sums=fresh"):
        FedALSConfig(memory=0.5)


def test_max_items_keeps_a_uniform_draw_of_each_users_own_items(tiny_interactions):
    data = tiny_interactions(m=40, n=12, p=40, density=0.6, seed=3)
    counts = np.diff(data.train.indptr)
    keys = np.random.default_rng(0).integers(0, 2**63 - 1, size=data.n_users)
    kept = contributed(data, keys, 4)
    np.testing.assert_array_equal(np.diff(kept.train.indptr), np.minimum(counts, 4))
    M, mask = dense(data)
    Mk, maskk = dense(kept)
    assert np.all(mask[maskk]) and np.all(M[maskk] == Mk[maskk])
    # a user's draw depends on its key and its own items only
    alone = contributed(data.client_shard(7), keys[7:8], 4)
    np.testing.assert_array_equal(alone.train.indices, kept.train.row_block(
        slice(7, 8)).indices)
    # uniform: over many keys, each of a user's n items is kept with probability 4 / n
    t = int(np.argmax(counts))
    one = data.client_shard(t)
    many = np.random.default_rng(1).integers(0, 2**63 - 1, size=4000)
    freq = np.zeros(data.n_items)
    for key in many:
        freq[contributed(one, key[None], 4).train.indices] += 1 / len(many)
    rated = one.train.indices
    p = 4 / counts[t]
    np.testing.assert_allclose(freq[rated], p, atol=5 * np.sqrt(p * (1 - p) / len(many)))


@pytest.mark.parametrize("mode", MODES)
def test_a_clipped_fresh_upload_down_weights_its_user(mode, data_of):
    """User-level DP's clipping (noise 0 here) scales a client's whole fresh upload, its
    S_j and b_j alike (its S_j sent times gram_scale, which the server divides out): the item
    step is the ridge problem with that user's terms weighted by its scale (a weighted least
    squares, not a distorted one)."""
    cfg = FedALSConfig(**MODES[mode], sums="fresh", gram_scale=0.5)
    data = data_of(mode, p=14)
    clip = {"implicit": 40.0}.get(mode, 5.0)
    dp = UserDP(clip=clip, noise=0.0)
    records, sim = record_boundary(ALGORITHM, cfg, data, driver="per-client",
                                   rounds=Rounds(make_sampler(data.n_clients, None), 2, dp=dp))
    norms = np.array([np.sqrt(squared_norms(u[STATS]))[0] for u, _ in records[-1].uploads])
    assert (norms > clip).any() and (norms < clip).any()
    weights = np.minimum(1.0, clip / norms)  # one user per client, in client order
    first = simulate(ALGORITHM, cfg, data,
                     rounds=Rounds(make_sampler(data.n_clients, None), 1, dp=dp))
    U, V = first.clients.user_factors().copy(), first.server.V.copy()
    M, mask = dense(data)
    reference_round(U, V, M, mask, np.arange(data.n_users), cfg, weights=weights)
    np.testing.assert_allclose(sim.server.V, V, atol=1e-9)


@pytest.mark.parametrize("biases", [True, False])
def test_every_client_every_round_is_centralized_als(biases, tiny_federated):
    """Same V^0 (same seed), same sweeps: the factors and the history agree from round 1 on
    (round 0 differs: ALS evaluates its random U^0, federated ALS its zero rows)."""
    data = tiny_federated(m=30, n=12, p=5, density=0.5, seed=3)[0]
    params = dict(rank=3, lam=0.6, biases=biases, init_scale=0.5)
    fed = FedALS(**params, rounds=6, random_state=2).fit(data)
    als = ALS(**params, sweeps=6, random_state=2).fit(data)
    np.testing.assert_allclose(fed.V_, als.V_, atol=1e-10)
    np.testing.assert_allclose(fed.U_, als.U_, atol=1e-10)
    for column in ("objective", "train_rmse", "test_rmse", "test_mae"):
        np.testing.assert_allclose(fed.history_.column(column)[1:],
                                   als.history_.column(column)[1:], rtol=1e-10)


@pytest.mark.parametrize("solver", ["exact", "cg"])
@pytest.mark.parametrize("mode", [*MODES, "explicit-item-ridges"])
def test_the_objective_never_increases_whoever_is_sampled(mode, solver, data_of):
    """Each round minimizes the objective exactly over the sampled rows, then over V (with
    the item step's own ridge weights too: lam_item, lam_bias), or lowers it by a few
    conjugate-gradient steps from the rows' last values (running sums: the item step's
    quadratic is the objective's in V)."""
    params = {**MODES.get(mode, {**MODES["explicit-biases"], "lam_item": 2.0, "lam_bias": 0.1}),
              "solver": solver, "cg_steps": 2}
    data = data_of(mode, p=14, seed=4)
    model = FedALS(**params, rounds=12, sampling="bernoulli", participation=0.3,
                   random_state=1).fit(data)
    obj = model.history_.column("objective")
    assert np.all(np.diff(obj[1:]) <= 1e-12 * obj[1:-1])
    assert obj[-1] < obj[1]


@pytest.mark.parametrize("mode", MODES)
def test_uploads_are_the_changes_of_the_statistics(mode, data_of):
    """What a client sends in round 2 (the rows of its OuterRows) is the change of the packed
    statistics of its rated items (and of its Gramian share), computed here from its rows
    before and after the round."""
    cfg = FedALSConfig(**MODES[mode])
    data = data_of(mode, p=4)
    M, mask = dense(data)

    def sampler():
        return make_sampler(data.n_clients, active=2)

    records, sim = record_boundary(ALGORITHM, cfg, data, rounds=Rounds(sampler(), 2),
                                   driver="per-client")
    before = simulate(ALGORITHM, cfg, data, rounds=Rounds(sampler(), 1)).clients.user_factors()
    after = sim.clients.user_factors()
    record = records[-1]
    r, c, coef = svec_pairs(len(cfg.free_v))
    fv = cfg.layout.free_mask_v()

    def statistics(U, rows, shape):
        out = np.zeros(shape)
        for t in rows:
            x = U[t, fv]
            for j in np.flatnonzero(mask[t]):
                if cfg.implicit:
                    w, y = cfg.alpha * M[t, j], 1.0 + cfg.alpha * M[t, j]
                else:
                    w, y = 1.0, M[t, j] - U[t, ~fv].sum()  # V's fixed column is all ones
                out[j, : len(r)] += w * coef * np.outer(x, x)[r, c]
                out[j, len(r):] += y * x
            if cfg.implicit:
                out[-1, : len(r)] += coef * np.outer(x, x)[r, c]
        return out

    for client, (uploads, _) in zip(record.message.upload, record.uploads, strict=True):
        stacked = uploads[STATS]
        assert isinstance(stacked.rows, OuterRows)
        rows = np.arange(data.client_ptr[client], data.client_ptr[client + 1])
        change = statistics(after, rows, stacked.shape) - statistics(before, rows, stacked.shape)
        np.testing.assert_allclose(stacked.weighted_sum(np.ones(1)), change, atol=1e-10)
        assert upload_nbytes(uploads) == len(stacked.rows.index) * (stacked.rows.width + 1) * 8


@pytest.mark.parametrize("gram", [True, False])
def test_outer_rows_norms_sum_and_clipping_see_the_rows_a_client_sends(gram):
    """The rows a client sends, written out term by term: ``[svec(sum a x x^T) | sum b x]``,
    or ``sum b x`` alone without the Gram part; their sum, norms and clipping."""
    rng = np.random.default_rng(2)
    d = 3
    vectors = rng.normal(size=(4, d))
    # client 0: groups on rows 2 and 0; client 1: one group on row 2 with two terms
    rows = OuterRows(ptr=np.array([0, 2, 3]), index=np.array([2, 0, 2]),
                     term_ptr=np.array([0, 1, 3, 5]), vec=np.array([0, 1, 2, 3, 0]),
                     a=rng.normal(size=5), b=rng.normal(size=5), vectors=vectors, gram=gram)
    r, c, coef = svec_pairs(d)
    packed = len(r) if gram else 0
    expected = np.zeros((3, packed + d))
    for g in range(3):
        for q in range(rows.term_ptr[g], rows.term_ptr[g + 1]):
            x = vectors[rows.vec[q]]
            if gram:
                expected[g, :packed] += rows.a[q] * coef * np.outer(x, x)[r, c]
            expected[g, packed:] += rows.b[q] * x
    np.testing.assert_allclose(rows.values, expected, atol=1e-14)
    # svec is an isometry: the packed norm is the Frobenius norm of the matrix
    A = np.outer(vectors[0], vectors[0]) - 2 * np.outer(vectors[1], vectors[1])
    assert np.isclose(np.linalg.norm(coef * A[r, c]), np.linalg.norm(A))
    stacked = Stacked((4, packed + d), rows=rows)
    per_client = [np.zeros((4, packed + d)) for _ in range(2)]
    per_client[0][[2, 0]] = expected[:2]
    per_client[1][2] = expected[2]
    np.testing.assert_allclose(stacked.weighted_sum(np.array([2.0, -1.0])),
                               2 * per_client[0] - per_client[1], atol=1e-13)
    norms = np.array([np.linalg.norm(u) for u in per_client])
    np.testing.assert_allclose(np.sqrt(squared_norms(stacked)), norms, rtol=1e-12)
    clipped = clip_uploads({STATS: stacked}, 0.5 * norms.min())[STATS]
    np.testing.assert_allclose(np.sqrt(squared_norms(clipped)), 0.5 * norms.min(), rtol=1e-12)


def test_a_round_costs_terms_by_the_cohorts_ratings(tiny_interactions):
    """Two terms (new and old row) per rating of the cohort and per user for the Gramian,
    nothing per item of the catalogue or per client outside the cohort."""
    data = tiny_interactions(m=20, n=30, p=20, density=0.2, seed=1)
    cfg = FedALSConfig(rank=2, implicit=True)
    records, _ = record_boundary(ALGORITHM, cfg, data,
                                 rounds=Rounds(make_sampler(data.n_clients, active=5), 1))
    rec = records[-1]
    counts = np.diff(data.train.indptr)[rec.message.upload]
    terms = sum(len(u[STATS].rows.vec) for u, _ in rec.uploads)
    assert terms == 2 * (counts.sum() + len(rec.message.upload))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sums", ["running", "fresh"])
def test_factors_are_the_same_sums_in_fewer_bytes(mode, sums, tiny_federated,
                                                  tiny_interactions):
    """``upload=factors``: each client sends its two vectors and three numbers per term
    instead of a row per rated item, and the server is handed the same sums (the same
    history, bit for bit)."""
    size = dict(m=14, n=30, p=14, density=0.4, seed=2)  # one user per client
    data = tiny_interactions(**size) if mode == "implicit" else tiny_federated(**size)[0]
    rank = 12  # rows of 90 numbers or more; the factors: 2 x 12 per client and 3 per term
    runs = {}
    for upload in ("rows", "factors"):
        cfg = FedALSConfig(**{**MODES[mode], "rank": rank}, sums=sums, upload=upload)
        runs[upload] = record_boundary(ALGORITHM, cfg, data, rounds=Rounds(
            make_sampler(data.n_clients, active=6), 3))
    pairs, by_rows, by_factors = same_sums_by_rows_and_factors(runs, STATS)
    for r, f in pairs:
        assert f.numbers() == f.vectors.size + 2 * len(f.index) + 3 * len(f.vec)
        assert r.numbers() == len(r.index) * (r.width + 1) > 4 * f.numbers()
    assert by_factors * 4 < by_rows


def same_sums_by_rows_and_factors(runs, name):
    """``runs["rows"]`` and ``runs["factors"]`` (:func:`record_boundary`'s) have the same
    history bit for bit and the same sum of upload ``name`` every round; each client's
    ``(rows, factors)`` uploads of it, and the two runs' bytes up."""
    (rows, by_rows), (factors, by_factors) = runs["rows"], runs["factors"]
    assert_same_history(by_rows.history, by_factors.history, rtol=0, atol=0,
                        ignore=("seconds", "bytes_up"))
    pairs = []
    for a, b in zip(rows, factors, strict=True):
        np.testing.assert_array_equal(a.summed[name], b.summed[name])
        pairs += [(up[name].rows, fac[name].rows)
                  for (up, _), (fac, _) in zip(a.uploads, b.uploads, strict=True)]
    return pairs, by_rows.history.last("bytes_up"), by_factors.history.last("bytes_up")


def test_factors_need_one_user_per_client(data_of):
    with pytest.raises(ConfigError, match="partition='user'"):
        FedALS(rank=2, upload="factors", rounds=1).fit(data_of("explicit-plain", p=4))


def test_mode_defaults_and_refusals(tiny_federated):
    assert FedALSConfig().model_dump()["biases"] is True
    cfg = FedALSConfig(implicit=True)
    assert cfg.biases is False and cfg.rank == 32 and cfg.lam == 50.0
    assert cfg.solver == "cg" and FedALSConfig().solver == "exact"
    assert FedALSConfig(implicit=True, sums="fresh").solver == "exact"  # user-level DP's
    assert FedALSConfig(implicit=True, solver="exact").solver == "exact"
    assert FedALSConfig(implicit=True, rank=7, lam=0.1).rank == 7
    with pytest.raises(ValueError, match="no biases"):
        FedALSConfig(implicit=True, biases=True)
    data = tiny_federated(m=8, n=5, p=2, seed=1)[0]  # ratings of both signs
    with pytest.raises(ConfigError, match="strengths >= 0"):
        FedALS(implicit=True, rank=2, rounds=1).fit(data)


@pytest.mark.parametrize("mode", MODES)
def test_fold_in_is_the_user_step(mode):
    """A new user's row solves the clients' own problem: the brute-force minimizer."""
    cfg = FedALSConfig(**MODES[mode])
    rng = np.random.default_rng(4)
    V = rng.normal(size=(9, cfg.layout.width))
    cfg.layout.project_v(V)
    items = np.array([1, 4, 5, 8])
    values = rng.integers(1, 4, 4).astype(float) if cfg.implicit else rng.normal(size=4)
    u = fold_in(cfg, V, items, values)
    M, mask = np.zeros(9), np.zeros(9, dtype=bool)
    M[items], mask[items] = values, True
    fu = cfg.layout.free_mask_u()
    start = np.zeros(cfg.layout.width)
    cfg.layout.project_u(start[None])
    expect = start.copy()
    expect[fu] = brute_row(V[:, fu], V[:, ~fu] @ start[~fu], M, mask, cfg)
    np.testing.assert_allclose(u, expect, atol=1e-10)
    R = CSR(np.array([0, 4]), items.astype(np.int32), values)
    U = start[None].copy()
    user_step(cfg, R, np.zeros(1, dtype=np.int64), U, V)
    np.testing.assert_allclose(U[0], u, atol=1e-14)


def test_implicit_run_then_recommend_from_clicked_items(monkeypatch, capsys, tmp_path,
                                                        ratings_csv, invoke):
    out = tmp_path / "run"
    code, _, err = invoke(monkeypatch, capsys, "run", "--algorithm", "fedals", "--implicit",
                          "--ratings", ratings_csv, "--rank", 3, "--rounds", 4,
                          "--save-user-factors", "--out", out, "-q")
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["params"]["implicit"] is True and config["data"]["normalize"] == "none"
    assert config["run"]["ranking_k"] == 10 and "ranking_k" in config["run"]["defaulted"]
    with open(out / "history.csv") as fh:
        rows = list(csv.DictReader(fh))
    objective = [float(r["objective"]) for r in rows]
    # never rises, to rounding (converged by round 3: the last digits may go either way)
    assert all(b <= a * (1 + 1e-12) for a, b in zip(objective[1:], objective[2:], strict=False))
    assert "test_rmse" not in rows[0] and 0 <= float(rows[-1]["ndcg@10"]) <= 1
    model = load_model(out)
    assert model.implicit and model.algorithm == "fedals"
    clicked = tmp_path / "clicked.csv"
    clicked.write_text("item\n3\n7\n")
    code, stdout, err = invoke(monkeypatch, capsys, "recommend", out, "--items", clicked, "-n",
                               4, "--format", "json")
    assert code == 0, err
    listed = [r["item"] for r in json.loads(stdout)]
    assert len(listed) == 4 and not {3, 7} & set(listed)
    assert all("preference" in r and "rating" not in r for r in json.loads(stdout))
    new = model.fold_in(np.array([3, 7]))
    expect = fold_in(model.config, model.V, model.items.index(np.array([3, 7])), np.ones(2))
    np.testing.assert_allclose(new.factor, expect)
    assert [int(i) for i in model.recommend(new, n=4).items] == listed
    mine = tmp_path / "mine.csv"
    mine.write_text("item,rating\n3,5\n")
    code, _, err = invoke(monkeypatch, capsys, "recommend", out, "--ratings", mine)
    assert code == 2 and "give the items alone" in err


@pytest.mark.parametrize("args, needle", [
    (["--algorithm", "als", "--implicit"], "algorithm for implicit feedback"),
    (["--algorithm", "fedals", "--implicit", "-P", "implicit=false"], "contradicts"),
    (["--algorithm", "fedals", "-P", "implicit=true"], "add --implicit"),
    (["--algorithm", "fedals", "--implicit", "--normalize", "zscore"], "drop --normalize"),
    (["--algorithm", "fedals", "--implicit-threshold", "4"], "needs --implicit"),
    (["--algorithm", "fedals", "--implicit", "--implicit-threshold", "9"], "reaches"),
    (["--algorithm", "fedals", "--implicit", "--biases"], "no biases"),
])
def test_implicit_conflicts_exit_2_with_one_line(monkeypatch, capsys, tmp_path,
                                                 ratings_csv, args, needle, invoke):
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "--rounds", 1,
                          *args, "--out", tmp_path / "run", "-q")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run" / "config.json").exists()


def test_implicit_threshold_keeps_the_ratings_that_reach_it(ratings_csv):
    from fedmc.run.data import DataSettings, federated_data

    every, _ = federated_data(DataSettings(ratings=ratings_csv, clients=4, implicit=True))
    high, _ = federated_data(DataSettings(ratings=ratings_csv, clients=4, implicit=True,
                                          implicit_threshold=4))
    plain, _ = federated_data(DataSettings(ratings=ratings_csv, clients=4))
    n_high = np.sum(plain.normalizer.inverse(np.concatenate([plain.train.values,
                                                             plain.test.values])) >= 4)
    assert every.train.nnz + every.test.nnz == plain.train.nnz + plain.test.nnz
    assert high.train.nnz + high.test.nnz == n_high < every.train.nnz
    assert np.all(high.train.values == 1.0) and high.normalizer.is_identity


def exchanges_config(mode, **given):
    """``item_step="exchanges"`` in ``mode`` (of :data:`MODES`; conjugate-gradient steps)."""
    return FedALSConfig(**{**MODES[mode], "solver": "cg", "item_step": "exchanges", **given})


def every_round(data, rounds):
    """Every client in each of ``rounds`` rounds (the exchanges' protocol)."""
    return Rounds(make_sampler(data.n_clients), rounds)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("one_user", [False, True])
def test_exchanges_with_enough_steps_are_alss_sweeps(mode, one_user, data_of):
    """``item_step="exchanges"`` with as many conjugate-gradient steps as it takes to converge:
    each round of ``cg_steps + 1`` exchanges is centralized ALS's sweep (the brute-force
    reference with every user in every round), rows and items."""
    data = data_of(mode, p=14 if one_user else 4)
    steps = 40
    cfg = exchanges_config(mode, cg_steps=steps)
    sim = simulate(ALGORITHM, cfg, data, seed=4, rounds=every_round(data, 2 * (steps + 1)))
    everyone = np.arange(data.n_clients)
    U, V = reference_run(data, cfg, [everyone, everyone], initial_V(cfg, data, 4))
    np.testing.assert_allclose(sim.server.V, V, atol=1e-8)
    np.testing.assert_allclose(sim.clients.user_factors(), U, atol=1e-8)


@pytest.mark.parametrize("mode", MODES)
def test_an_exchange_round_takes_the_cg_steps_each_item_row_takes(mode, data_of):
    """One round of ``cg_steps + 1`` exchanges from ``V^0`` is the user step (conjugate
    gradient from zero rows) and then, for every item, :func:`fedmc.core.ridge.cg_steps` on
    its system formed densely from every user's rows (``G + S_j + diag(lam)``, ``b_j``):
    the products the exchanges sum are that system's."""
    from fedmc.core.ridge import cg_steps

    data = data_of(mode, p=4)
    cfg = exchanges_config(mode, cg_steps=2, lam_item=1.3)
    sim = simulate(ALGORITHM, cfg, data, seed=4, rounds=every_round(data, 3))
    V = initial_V(cfg, data, 4)
    U = np.zeros((data.n_users, cfg.layout.width))
    cfg.layout.project_u(U)
    user_step(cfg, data.train, np.arange(data.n_users), U, V, steps=2)
    M, mask = dense(data)
    fv = cfg.free_v
    X = U[:, fv]
    G = X.T @ X if cfg.implicit else np.zeros((len(fv), len(fv)))
    for j in range(data.n_items):
        raters = mask[:, j]
        if cfg.implicit:
            w, y = cfg.alpha * M[raters, j], 1.0 + cfg.alpha * M[raters, j]
        else:
            fixed = np.flatnonzero(~cfg.layout.free_mask_v())
            w, y = np.ones(raters.sum()), M[raters, j] - U[raters][:, fixed] @ V[j, fixed]
        A = G + X[raters].T @ (w[:, None] * X[raters]) + np.diag(cfg.item_ridge)
        x = V[j, fv].copy()
        cg_steps(A, np.zeros((0, len(fv))), np.zeros(0, dtype=np.int64), np.zeros(0),
                 X[raters].T @ y, 2, x)
        np.testing.assert_allclose(sim.server.V[j, fv], x, atol=1e-10)
    np.testing.assert_allclose(sim.clients.user_factors(), U, atol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_exchanges_never_raise_the_objective(mode, data_of):
    """Each exchange lowers the objective or keeps it: the user step's conjugate-gradient
    steps lower each row's quadratic, each item step's each item's (Takacs et al. 2011)."""
    model = FedALS(**{**MODES[mode], "solver": "cg"}, item_step="exchanges", cg_steps=2,
                   rounds=12, random_state=1).fit(data_of(mode, p=14, seed=4))
    obj = model.history_.column("objective")
    assert np.all(np.diff(obj[1:]) <= 1e-12 * obj[1:-1])
    assert obj[-1] < obj[1]


@pytest.mark.parametrize("mode", ["explicit-biases", "implicit"])
def test_exchange_factors_are_the_same_sums_in_fewer_bytes(mode, tiny_federated,
                                                           tiny_interactions):
    """``upload=factors`` with exchanges: a one-user client sends its vector and per rated item
    its index and one number, not ``d`` numbers and an index, and the server is handed the
    same sums (the same history, bit for bit)."""
    size = dict(m=14, n=30, p=14, density=0.4, seed=2)  # one user per client
    data = tiny_interactions(**size) if mode == "implicit" else tiny_federated(**size)[0]
    runs = {upload: record_boundary(ALGORITHM, exchanges_config(mode, rank=6, upload=upload),
                                    data, rounds=every_round(data, 5))
            for upload in ("rows", "factors")}
    pairs, by_rows, by_factors = same_sums_by_rows_and_factors(runs, PRODUCTS)
    for r, f in pairs:
        assert f.numbers() == f.vectors.size + 2 * len(f.index)
        assert r.numbers() == len(r.index) * (r.width + 1)
    assert by_factors * 2 < by_rows
    phases = [rec.message.phase for rec in runs["factors"][0]]
    assert phases == ["round", "cg", "cg", "cg", "round"]
    for rec in runs["factors"][0]:  # a cg exchange sends the products alone, nothing else
        gram_share = mode == "implicit" and rec.message.phase == "round"
        for up, _ in rec.uploads:
            assert (upload_nbytes(up) > up[PRODUCTS].nbytes()) == gram_share


def test_exchanges_take_every_client_and_no_sums_settings(data_of):
    data = data_of("implicit", p=4)
    with pytest.raises(ConfigError, match="--active all"):
        FedALS(rank=2, implicit=True, item_step="exchanges", rounds=2, active=2).fit(data)
    assert FedALSConfig(implicit=True, item_step="exchanges").solver == "cg"
    for given, match in (({"solver": "exact"}, "solver=exact"), ({"sums": "fresh"}, "sums="),
                         ({"max_items": 3}, "max_items="), ({"gram_scale": 0.5}, "gram_scale=")):
        with pytest.raises(ValueError, match=match):
            FedALSConfig(implicit=True, item_step="exchanges", **given)


def test_scaled_rows_are_multiples_of_each_clients_vector():
    """:class:`ScaledRows`, written out row by row: the rows, their norms, their weighted sum,
    clipping, and the numbers sent as rows or as the vector and one number a row."""
    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(2, 3))
    # client 0: rows 4 and 1; client 1: rows 1, 0 and 3
    ptr, index, b = np.array([0, 2, 5]), np.array([4, 1, 1, 0, 3]), rng.normal(size=5)
    owner = np.array([0, 0, 1, 1, 1])
    for factored in (False, True):
        rows = ScaledRows(ptr, index, b, vectors, factored)
        expected = b[:, None] * vectors[owner]
        np.testing.assert_allclose(rows.values, expected, atol=1e-15)
        np.testing.assert_allclose(rows.squared_norms(), (expected**2).sum(axis=1), rtol=1e-13)
        stacked = Stacked((5, 3), rows=rows)
        total = np.zeros((5, 3))
        np.add.at(total, index, np.array([2.0, 2.0, -1.0, -1.0, -1.0])[:, None] * expected)
        np.testing.assert_allclose(stacked.weighted_sum(np.array([2.0, -1.0])), total,
                                   atol=1e-14)
        norms = np.sqrt(squared_norms(stacked))
        np.testing.assert_allclose(norms, [np.linalg.norm(expected[owner == k]) for k in (0, 1)],
                                   rtol=1e-13)
        clipped = clip_uploads({"s": stacked}, 0.5 * norms.min())["s"]
        np.testing.assert_allclose(np.sqrt(squared_norms(clipped)), 0.5 * norms.min(),
                                   rtol=1e-12)
        assert rows.numbers() == (6 + 2 * 5 if factored else 5 * 4)
