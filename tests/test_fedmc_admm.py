"""FedMC-ADMM: each closed-form step against a brute-force solve of its subproblem, and the
batched engine against a plain per-client transcription of Algorithm 1."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize, minimize_scalar

from fedmc.algorithms.fedmc_admm import BY_CONSENSUS, FedMCADMMConfig
from fedmc.algorithms.fedmc_admm.kernels import rated_once, u_steps, w_steps
from fedmc.core.kernels import rank_token
from fedmc.core.prox import Regularizer
from fedmc.estimators import FedMCADMM
from fedmc.federation.loop import Rounds
from fedmc.sim import simulate
from fedmc.testing import ScheduledSampler

PAPER = {"steps": "paper", "biases": False}  # Algorithm 1 as published (defaults are ours)

# ---------------------------------------------------------------- brute-force subproblems


def search_bounds(reg: Regularizer) -> tuple[float, float]:
    """Where to search: the constraint set for indicator kinds, a wide interval otherwise."""
    return {"nonneg": (0.0, 50.0), "box": (reg.lo, reg.hi)}.get(reg.kind, (-50.0, 50.0))


def brute_separable(obj_entry, shape, bounds=(-50.0, 50.0)):
    """Minimize a sum of independent scalar problems entry by entry."""
    out = np.empty(int(np.prod(shape)))
    for k in range(out.size):
        out[k] = minimize_scalar(
            lambda z, k=k: obj_entry(k, z), bounds=bounds, method="bounded",
            options={"xatol": 1e-12},
        ).x
    return out.reshape(shape)


def brute_smooth(obj, x0):
    res = minimize(lambda x: obj(x.reshape(x0.shape)), x0.ravel(), method="BFGS",
                   options={"gtol": 1e-12})
    return res.x.reshape(x0.shape)


@pytest.mark.parametrize("kind", ["l2", "l1", "nonneg", "elastic"])
def test_u_step_solves_subproblem_14(kind, tiny_federated):
    data, M, mask = tiny_federated(m=6, n=5, p=1, density=0.7)
    rng = np.random.default_rng(1)
    r = 3
    U0 = rng.normal(size=(6, r))
    Wc = rng.normal(size=(5, r))  # W_i^T
    reg = Regularizer(kind, 0.3)
    U = U0.copy()
    tr = data.train
    u_steps(tr.indptr, tr.indices, tr.values, 0, 6, U, Wc, 1, reg.params, -1, False,
             rank_token(r))
    # (14) with W = Wc^T: <grad, U> + L/2 ||U - U0||^2 + R(U), L = ||W W^T||_F
    G = (mask * (U0 @ Wc.T - M)) @ Wc
    L = np.linalg.norm(Wc.T @ Wc)
    expected = brute_separable(
        lambda k, z: G.flat[k] * z + L / 2 * (z - U0.flat[k]) ** 2 + reg.value(np.array([z])),
        U0.shape,
        search_bounds(reg),
    )
    assert np.allclose(U, expected, atol=1e-6)


@pytest.mark.parametrize("per_row", [False, True])
def test_w_step_solves_subproblem_15(per_row, tiny_federated):
    data, M, mask = tiny_federated(m=6, n=5, p=1, density=0.6)
    rng = np.random.default_rng(2)
    r, p, beta = 3, 4, 0.7
    U = rng.normal(size=(6, r))
    W0 = rng.normal(size=(5, r))
    Y = rng.normal(size=(5, r))
    V = rng.normal(size=(5, r))
    W = W0.copy()
    im = data.item_major
    w_steps(im.client_ptr[0], im.client_ptr[1], im.item, im.ptr, im.row, im.values, 0, 6, U, W,
             Y, V, 1, beta, p, per_row, rank_token(r))
    grad = (U.T @ (mask * (U @ W0.T - M))).T  # (n, r)
    if per_row:  # one Lipschitz constant per item column
        Lcol = np.array([np.linalg.norm(U[mask[:, j]].T @ U[mask[:, j]]) for j in range(5)])
    else:
        Lcol = np.full(5, np.linalg.norm(U.T @ U))

    def obj(Wx):
        return (np.sum((grad / p + Y) * Wx) + np.sum(Lcol[:, None] / p / 2 * (Wx - W0) ** 2)
                + beta / 2 * np.sum((Wx - V) ** 2))

    assert np.allclose(W, brute_smooth(obj, W0), atol=1e-6)


def run(data, schedule, seed=0, **params):
    """FedMC-ADMM on ``data`` with the rounds' client sets given by ``schedule``."""
    cfg = FedMCADMMConfig(**params)
    return cfg, simulate(
        BY_CONSENSUS[cfg.consensus], cfg, data, seed=seed,
        rounds=Rounds(ScheduledSampler(data.n_clients, schedule), len(schedule)))


@pytest.mark.parametrize("kind", ["l2", "l1", "none", "box"])
def test_server_step_solves_subproblem_16(kind, tiny_federated):
    """(16) from the summed changes of ``beta W_i + Y_i``: the total the server keeps is
    ``sum_i (beta W_i + Y_i)`` (kept by the clients), and ``V`` minimizes (16) given it."""
    data, _, _ = tiny_federated(m=9, n=4, p=3)
    beta = 1.3
    cfg, sim = run(data, [[0, 2], [1]], rank=2, reg_v=kind, gamma=0.4, beta=beta, box_lo=-0.2,
                   box_hi=0.3, **PAPER)
    state = sim.clients.state
    Ws, Ys = state.W, state.Y
    np.testing.assert_allclose(sim.server.total, (beta * Ws + Ys).sum(axis=0), atol=1e-12)
    reg = Regularizer(kind, 0.4, lo=-0.2, hi=0.3)
    # (16) is separable by entry: sum_i [-Y_i v + beta/2 (W_i - v)^2] + R(v)
    expected = brute_separable(
        lambda k, z: sum(-Ys[i].flat[k] * z + beta / 2 * (Ws[i].flat[k] - z) ** 2
                         for i in range(3)) + reg.value(np.array([z])),
        sim.server.V.shape,
        search_bounds(reg),
    )
    assert np.allclose(sim.server.V, expected, atol=1e-6)


def test_closed_forms_66_to_68_literally(tiny_federated):
    """The l2 case equals the paper's formulas (66)-(68) written out."""
    data, M, mask = tiny_federated(m=8, n=6, p=2)
    params = dict(rank=3, lam=0.2, gamma=0.1, beta=2.0, inner=1, init_scale=1.0, **PAPER)
    cfg, before = run(data, [], seed=5, **params)
    U0 = before.clients.state.U.copy()
    W0 = before.clients.state.W[0].T.copy()  # r x n
    Y0 = before.clients.state.Y[0].T.copy()
    V0 = before.server.V.T.copy()
    Y_other = before.clients.state.Y[1].T
    W_other = before.clients.state.W[1].T
    _, sim = run(data, [[0]], seed=5, **params)
    rows = slice(0, 4)
    Ui, Mi, Pi = U0[rows], M[rows], mask[rows]
    L_W = np.linalg.norm(W0 @ W0.T)
    U1 = (Ui * L_W - (Pi * (Ui @ W0 - Mi)) @ W0.T) / (L_W + 0.2)  # (66)
    assert np.allclose(sim.clients.state.U[rows], U1)
    L_U, p, beta = np.linalg.norm(U1.T @ U1), 2, 2.0
    W1 = (L_U / p * W0 + beta * V0 - U1.T @ (Pi * (U1 @ W0 - Mi)) / p - Y0) / (L_U / p + beta)
    assert np.allclose(sim.clients.state.W[0].T, W1)  # (67)
    Y1 = Y0 + beta * (W1 - V0)
    V1 = (beta * W1 + Y1 + beta * W_other + Y_other) / (p * beta + 0.1)  # (68)
    assert np.allclose(sim.server.V.T, V1)


# ------------------------------------------------------ plain per-client loop (Algorithm 1)


def reference_algorithm_1(M, mask, blocks, U0, V0, schedule, *, N, beta, reg_u, reg_v,
                          per_row=False, dual_init="paper", ones_u=-1, ones_v=-1):
    """Algorithm 1 transcribed with dense r x n matrices and a Python loop over clients."""
    p = len(blocks)
    n = V0.shape[1]
    U = [U0[b].copy() for b in blocks]
    Ms = [M[b] for b in blocks]
    Ps = [mask[b].astype(float) for b in blocks]
    V = V0.copy()
    W = [V0.copy() for _ in range(p)]

    def grad_V(i, Ui, Wi):
        return Ui.T @ (Ps[i] * (Ui @ Wi - Ms[i]))

    Y = [(-grad_V(i, U[i], W[i]) / n) if dual_init == "paper" else np.zeros_like(V0)
         for i in range(p)]
    for S in schedule:
        for i in S:
            Ui, Wi, Yi = U[i], W[i], Y[i]
            # (14)
            for _ in range(N):
                G = (Ps[i] * (Ui @ Wi - Ms[i])) @ Wi.T
                if per_row:
                    L = np.array([np.linalg.norm((Wi[:, Ps[i][t] > 0]) @ Wi[:, Ps[i][t] > 0].T)
                                  for t in range(Ui.shape[0])])[:, None]
                else:
                    L = np.linalg.norm(Wi @ Wi.T)
                L = np.where(L == 0, 1e-300, L)
                Ui = np.vectorize(lambda x, s: reg_u.prox(np.array([x]), s)[0])(Ui - G / L, 1 / L)
                if ones_u >= 0:
                    Ui[:, ones_u] = 1.0
            # (15)
            if per_row:
                a = np.array([np.linalg.norm(Ui[Ps[i][:, j] > 0].T @ Ui[Ps[i][:, j] > 0])
                              for j in range(n)])[None, :] / p
            else:
                a = np.linalg.norm(Ui.T @ Ui) / p
            for _ in range(N):
                Wi = (a * Wi + beta * V - grad_V(i, Ui, Wi) / p - Yi) / (a + beta)
            Yi = Yi + beta * (Wi - V)  # (13)
            U[i], W[i], Y[i] = Ui, Wi, Yi
        # (16)
        z = sum(beta * W[i] + Y[i] for i in range(p)) / (p * beta)
        V = reg_v.prox(z, 1 / (p * beta))
        if ones_v >= 0:
            V[ones_v, :] = 1.0
    return np.vstack(U), V



@pytest.mark.parametrize("per_row", [False, True])
@pytest.mark.parametrize("n_inner", [1, 3, 10])
@pytest.mark.parametrize("zero_row", [False, True])
def test_rated_once_closed_form_equals_the_iterated_steps(per_row, n_inner, zero_row):
    """A column rated by one user: the closed form against ``N`` plain steps of (15)."""
    rng = np.random.default_rng(n_inner)
    r, p, beta, a_client, m = 4, 7, 0.6, 0.9, 1.3
    x = np.zeros(r) if zero_row else rng.normal(size=r)
    v, y, w0 = rng.normal(size=(3, r))
    a = (x @ x) / p if per_row else a_client
    M = (a * np.eye(r) - np.outer(x, x) / p) / (a + beta)
    k = (beta * v + m * x / p - y) / (a + beta)
    w_ref = w0.copy()
    for _ in range(n_inner):
        w_ref = M @ w_ref + k
    w = w0.copy()
    rated_once(x, m, v, y, w, a_client, beta, p, n_inner, per_row, rank_token(r))
    np.testing.assert_allclose(w, w_ref, rtol=1e-12, atol=1e-12)

@pytest.mark.parametrize(
    ("opts", "rank", "shape"),
    [
        ({"reg_u": "l2", "reg_v": "l2", **PAPER}, 2, (15, 8)),
        ({"reg_u": "l1", "reg_v": "l1", **PAPER}, 2, (15, 8)),
        ({"reg_u": "elastic", "reg_v": "nonneg", "dual_init": "zeros", **PAPER}, 2, (15, 8)),
        ({"reg_u": "l2", "reg_v": "l2", "steps": "per-row", "biases": True}, 2, (15, 8)),
        # above MAX_UNROLLED_RANK: the kernels' array-token versions
        ({"reg_u": "l2", "reg_v": "l2", "steps": "per-row", "biases": True}, 66, (80, 72)),
    ],
)
def test_batched_engine_equals_per_client_loop(opts, rank, shape, tiny_federated):
    data, M, mask = tiny_federated(*shape, p=5, density=0.45, seed=4)
    params = dict(rank=rank, inner=3, beta=0.8, lam=0.05, gamma=0.02, init_scale=1.0, **opts)
    schedule = [[0, 3], [1, 2, 4], [3], [0, 1, 2, 3, 4], [2, 4]]
    cfg, start = run(data, [], seed=11, **params)
    U0, V0 = start.clients.state.U.copy(), start.server.V.T.copy()
    _, sim = run(data, schedule, seed=11, **params)
    reg_u, reg_v = cfg.regularizers()
    layout = cfg.layout
    blocks = [slice(data.client_ptr[c], data.client_ptr[c + 1]) for c in range(5)]
    U_ref, V_ref = reference_algorithm_1(
        M, mask, blocks, U0, V0, [np.array(s) for s in schedule], N=3, beta=0.8, reg_u=reg_u,
        reg_v=reg_v, per_row=cfg.steps == "per-row", dual_init=cfg.dual_init,
        ones_u=layout.ones_col_u, ones_v=layout.ones_col_v,
    )
    assert np.allclose(sim.clients.state.U, U_ref, atol=1e-10, rtol=0)
    assert np.allclose(sim.server.V.T, V_ref, atol=1e-10, rtol=0)


def test_same_seed_same_history(tiny):
    def fit(seed):
        return FedMCADMM(rank=2, init_scale=1.0, beta=1.0, rounds=5, active=2,
                         random_state=seed).fit(tiny)

    a, b, c = fit(3), fit(3), fit(4)
    for col in ("objective", "test_rmse", "bytes_up"):
        assert np.array_equal(a.history_.column(col), b.history_.column(col))
    assert not np.array_equal(a.history_.column("objective"), c.history_.column("objective"))


def test_objective_decreases_with_full_participation(tiny):
    model = FedMCADMM(rank=2, init_scale=0.5, beta=1.0, lam=0.1, gamma=0.1, rounds=30)
    model.fit(tiny)
    obj = model.history_.column("objective")
    assert obj[-1] < 0.5 * obj[0]


def test_bytes_count_the_deltas_and_v(tiny_federated):
    """Set-up: ``V^0`` down and ``Y_i^0`` up for every client; a round: ``V^k`` down and one
    change of ``beta W_i + Y_i`` up per sampled client."""
    data, _, _ = tiny_federated(m=12, n=9, p=3)
    model = FedMCADMM(rank=2, biases=False, rounds=2, active=2).fit(data)
    size = 9 * 2 * 8
    assert model.history_.column("bytes_up").tolist() == [3 * size, 5 * size, 7 * size]
    assert model.history_.column("bytes_down").tolist() == [3 * size, 5 * size, 7 * size]


# ------------------------------------------- consensus on rated items (the cross-device mode)


def reference_rated_consensus(M, mask, blocks, U0, V0, schedule, *, N, beta, reg_u, reg_v,
                              per_row, dual_init, ones_u=-1, ones_v=-1, weights="equal"):
    """The cross-device mode written from its derivation (docs/algorithms.md) with dense
    ``r x n`` matrices and a Python loop over clients: constraints ``W_ij = V_j`` on rated
    items only, (14) against ``V^k``, the exact W-step (11), (13), and
    ``v_j = prox_{R/(beta n_j)}(sum_{i rated j} a_i (beta W_ij + Y_ij) / (beta n_j))`` with
    ``n_j = sum_{i rated j} a_i``, ``a_i = 1`` or ``|J_i|^(-1/2)`` (client weights)."""
    p = len(blocks)
    n = V0.shape[1]
    U = [U0[b].copy() for b in blocks]
    Ms = [M[b] for b in blocks]
    Ps = [mask[b].astype(float) for b in blocks]
    rated = [P.any(axis=0) for P in Ps]
    a = [1.0 if weights == "equal" else 1.0 / np.sqrt(max(r.sum(), 1)) for r in rated]
    counts = sum(a[i] * rated[i] for i in range(p))
    V = V0.copy()
    W = [V0.copy() for _ in range(p)]
    Y = [np.zeros_like(V0) for _ in range(p)]
    if dual_init == "paper":
        Y = [-(U[i].T @ (Ps[i] * (U[i] @ W[i] - Ms[i]))) / n * rated[i] for i in range(p)]
    for S in schedule:
        for i in S:
            Ui = U[i]
            for _ in range(N):  # (14) with V^k
                G = (Ps[i] * (Ui @ V - Ms[i])) @ V.T
                if per_row:
                    L = np.array([np.linalg.norm(V[:, Ps[i][t] > 0] @ V[:, Ps[i][t] > 0].T)
                                  for t in range(Ui.shape[0])])[:, None]
                else:
                    L = np.linalg.norm(V @ V.T)
                L = np.where(L == 0, 1e-300, L)
                Ui = np.vectorize(lambda x, s: reg_u.prox(np.array([x]), s)[0])(Ui - G / L, 1 / L)
                if ones_u >= 0:
                    Ui[:, ones_u] = 1.0
            U[i] = Ui
            for j in np.flatnonzero(rated[i]):  # (11) and (13)
                raters = Ps[i][:, j] > 0
                A = Ui[raters].T @ Ui[raters] + beta * np.eye(len(V))
                w = np.linalg.solve(A, Ui[raters].T @ Ms[i][raters, j] + beta * V[:, j]
                                    - Y[i][:, j])
                Y[i][:, j] += beta * (w - V[:, j])
                W[i][:, j] = w
        total = sum(a[i] * (beta * W[i] + Y[i]) * rated[i] for i in range(p))
        z = np.where(counts > 0, total / np.maximum(beta * counts, 1e-300), 0.0)
        V = np.vstack([[reg_v.prox(np.array([z[a, j]]), 1 / (beta * counts[j]))[0]
                        if counts[j] else reg_v.prox(np.array([0.0]), 1.0)[0]
                        for j in range(n)] for a in range(len(V))])
        if ones_v >= 0:
            V[ones_v, :] = 1.0
    return np.vstack(U), V


@pytest.mark.parametrize(
    ("opts", "p"),
    [
        ({}, 12),  # one user per client: the cross-device case
        ({"dual_init": "zeros"}, 12),  # zero duals, as in the cross-device defaults
        ({}, 4),  # several users per client: r x r W-steps per rated item
        ({"dual_init": "paper", "biases": False, "reg_u": "l1", "reg_v": "l1"}, 12),
        ({"dual_init": "paper", "steps": "paper"}, 4),
        ({"weights": "sqrt-items"}, 12),  # client weights a_i = |J_i|^(-1/2)
        ({"weights": "sqrt-items", "dual_init": "zeros"}, 4),
    ],
)
def test_rated_consensus_equals_its_dense_transcription(opts, p, tiny_federated):
    data, M, mask = tiny_federated(m=12, n=9, p=p, density=0.45, seed=5)
    params = dict(rank=2, inner=3, beta=0.7, lam=0.3, gamma=0.4, init_scale=1.0,
                  consensus="rated", **opts)
    schedule = [[0, 3], [1, 2], [3], list(range(p)), [2, 3]]
    cfg, start = run(data, [], seed=2, **params)
    U0, V0 = start.clients.state.U.copy(), start.server.V.T.copy()
    _, sim = run(data, schedule, seed=2, **params)
    reg_u, reg_v = cfg.regularizers()
    blocks = [slice(data.client_ptr[c], data.client_ptr[c + 1]) for c in range(p)]
    U_ref, V_ref = reference_rated_consensus(
        M, mask, blocks, U0, V0, [np.array(s) for s in schedule], N=3, beta=0.7, reg_u=reg_u,
        reg_v=reg_v, per_row=cfg.steps == "per-row", dual_init=cfg.dual_init,
        ones_u=cfg.layout.ones_col_u, ones_v=cfg.layout.ones_col_v, weights=cfg.weights,
    )
    assert np.allclose(sim.clients.state.U, U_ref, atol=1e-10, rtol=0)
    assert np.allclose(sim.server.V.T, V_ref, atol=1e-10, rtol=0)


def test_rated_consensus_state_follows_the_ratings(tiny_federated):
    """Per rating two scalars, per user two rows, and snapshots of V only while some client
    last saw them; uploads are the rated items' rows."""
    data, _, _ = tiny_federated(m=12, n=9, p=12, density=0.45, seed=5)
    _, sim = run(data, [[0, 1], [2], [0, 3]], rank=2, consensus="rated")
    state = sim.clients.state
    assert state.one_user and state.e.shape == (data.train.nnz,)
    assert state.U_prev.shape == state.U.shape
    live = set(state.snapshots.rounds[state.snapshots.refs > 0].tolist())
    assert live == {0, 1, 2, 3}  # set-up (never sampled), client 1, client 2, clients 0 and 3
    _, later = run(data, [[0, 1], [2], [0, 3], list(range(12))], rank=2, consensus="rated")
    snapshots = later.clients.state.snapshots
    assert set(snapshots.rounds[snapshots.refs > 0].tolist()) == {4}  # the others were freed
    rated_items = np.diff(data.train.indptr)
    width = 4  # rank 2 and the two bias columns
    up = sim.history.column("bytes_up")
    setup = rated_items.sum() * ((width + 1) + (1 + 1)) * 8  # contributions and counts
    assert up[0] == setup
    assert up[1] - up[0] == rated_items[[0, 1]].sum() * (width + 1) * 8


def test_zero_duals_send_the_counts_alone_and_weights_need_rated_consensus(tiny_federated):
    """With zero duals every set-up contribution is ``beta V_j^0``, which the server adds from
    the counts: the set-up upload is one count per rated item."""
    data, _, _ = tiny_federated(m=12, n=9, p=12, density=0.45, seed=5)
    _, sim = run(data, [[0, 1]], rank=2, consensus="rated", dual_init="zeros")
    rated_items = np.diff(data.train.indptr)
    assert sim.history.column("bytes_up")[0] == rated_items.sum() * (1 + 1) * 8
    with pytest.raises(ValueError, match="consensus=rated"):
        FedMCADMMConfig(weights="sqrt-items")
