"""Boolean data, the Elb prox (Eqs. 6-7), metrics, DP mechanisms and aggregated-BMF baselines."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from fedmc.algorithms.felb.baselines import aggregate, aggregated_bmf, grecond
from fedmc.algorithms.felb.blocks import ClientBlocks
from fedmc.algorithms.felb.metrics import boolean_counts, squared_loss
from fedmc.algorithms.felb.prox import binarize, elb_regularizer, prox_elb, prox_proximity
from fedmc.data import Ratings
from fedmc.data.boolean import BooleanFederatedData, load_boolean
from fedmc.data.boolean.io import (
    binarize_ratings,
    read_binary,
    read_dense_binary,
    read_transactions,
)
from fedmc.data.boolean.synthetic import synthetic_tiles
from fedmc.errors import ConfigError, DataError
from fedmc.privacy.local import UploadPrivacy, bound_uploads, gaussian_sigma, laplace_scale


# ---------------------------------------------------------------- prox (Eqs. 6 and 7)
def _brute_prox(x: float, kappa: float, lam: float) -> float:
    """argmin_y 1/2 (y-x)^2 + min(k|y| + l/2 y^2, k|y-1| + l/2 (y-1)^2) on a fine grid."""
    y = np.linspace(-3.0, 4.0, 700_001)
    reg = np.minimum(kappa * abs(y) + lam / 2 * y**2, kappa * abs(y - 1) + lam / 2 * (y - 1) ** 2)
    return float(y[np.argmin(0.5 * (y - x) ** 2 + reg)])


@pytest.mark.parametrize(("kappa", "lam"), [(0.05, 0.7), (0.001, 0.1), (0.2, 3.0)])
def test_eq6_matches_brute_force_prox_outside_dead_zones(kappa, lam):
    xs = np.linspace(-1.5, 2.5, 81)
    xs = xs[(abs(xs) > kappa + 1e-3) & (abs(xs - 1) > kappa + 1e-3) & (abs(xs - 0.5) > 1e-3)]
    got = prox_elb(xs, kappa, lam, clamp="none")
    want = [_brute_prox(x, kappa, lam) for x in xs]
    np.testing.assert_allclose(got, want, atol=2e-5)


def test_eq6_dead_zone_overshoot_and_clamps():
    # the formula overshoots within kappa of 0 and 1 (spec 1.5); the clamps repair it
    x = np.array([0.02, 0.97])
    raw = prox_elb(x, 0.05, 0.7, clamp="none")
    np.testing.assert_allclose(raw, [0.02 - 0.05, 0.97 + 0.05 + 0.7] / np.float64(1.7))
    assert raw[0] < 0 and raw[1] > 1
    np.testing.assert_array_equal(prox_elb(x, 0.05, 0.7, clamp="box"), [0.0, 1.0])
    assert prox_elb(x, 0.05, 0.7, clamp="nonneg")[0] == 0.0


def test_eq6_per_entry_parameters_broadcast():
    X = np.array([[0.2, 0.8], [0.4, 0.6]])
    K, L = np.array([[0.1, 0.2], [0.3, 0.4]]), np.array([[1.0, 2.0], [3.0, 4.0]])
    want = np.vectorize(lambda x, k, lam: prox_elb(np.array(x), k, lam, "none"))(X, K, L)
    np.testing.assert_array_equal(prox_elb(X, K, L, clamp="none"), want)


def test_eq7_is_the_exact_prox_of_the_proximity_penalty():
    rng = np.random.default_rng(0)
    X, V_hat, gamma = rng.random((3, 5)), rng.random((3, 5)), 0.37
    Y = prox_proximity(X, V_hat, gamma)
    np.testing.assert_array_equal(Y, (X + gamma * V_hat) / (1 + gamma))
    # stationarity of 1/2 ||Y - X||^2 + gamma/2 ||Y - V_hat||^2
    np.testing.assert_allclose((Y - X) + gamma * (Y - V_hat), 0.0, atol=1e-15)


def test_regularizer_zero_on_binary_and_binarize_is_the_limit_of_eq6():
    B = np.array([[0.0, 1.0], [1.0, 0.0]])
    assert elb_regularizer(B, 0.1, 1.0) == 0.0
    assert elb_regularizer(B + 0.25, 0.1, 1.0) > 0
    X = np.array([-0.3, 0.2, 0.5, 0.51, 0.9, 1.4])
    limit = np.clip(prox_elb(X, 0.5, 1e20, "none"), 0, 1).round()
    np.testing.assert_array_equal(binarize(X), limit)


# ---------------------------------------------------------------- data
def test_synthetic_tiles_noise_and_signal():
    A, G = synthetic_tiles(400, 300, k=5, noise=0.0, seed=1)
    np.testing.assert_array_equal(A, G)
    A, G = synthetic_tiles(400, 300, k=5, noise=0.2, seed=1)
    assert abs((A ^ G).mean() - 0.2) < 0.01
    assert 0.02 < G.mean() < 0.5
    with pytest.raises(ConfigError):
        synthetic_tiles(10, 10, noise=0.6)


def test_federated_build_partitions_rows_and_keeps_signal():
    A, G = synthetic_tiles(103, 40, k=3, noise=0.1, seed=0)
    d = BooleanFederatedData.build(A, 10, seed=3, signal=G)
    assert d.n_clients == 10 and d.shape == (103, 40)
    assert set(d.client_sizes) == {10, 11}
    np.testing.assert_array_equal(d.A.toarray(), A[d.row_index])
    np.testing.assert_array_equal(d.signal.toarray(), G[d.row_index])
    np.testing.assert_array_equal(
        d.block(2).toarray(), A[d.row_index[d.client_ptr[2] : d.client_ptr[3]]]
    )
    with pytest.raises(DataError, match="not binary"):
        BooleanFederatedData.build(np.array([[0, 2]]), 1)
    with pytest.raises(ConfigError):
        BooleanFederatedData.build(A, 200)


def test_read_dense_and_missing(tmp_path):
    f = tmp_path / "m.txt"
    f.write_text("1 0 1 \n0 0 1\n")
    np.testing.assert_array_equal(read_dense_binary(f).toarray(), [[1, 0, 1], [0, 0, 1]])
    f.write_text("1.0 nan\n0.0 1.0\n")
    with pytest.raises(DataError, match="missing"):
        read_dense_binary(f)
    np.testing.assert_array_equal(read_dense_binary(f, missing="zero").toarray(), [[1, 0], [0, 1]])
    f.write_text("1 0\n0\n")
    with pytest.raises(DataError, match=":2:"):
        read_dense_binary(f)
    f.write_text("1 2\n")
    with pytest.raises(DataError, match="not binary"):
        read_dense_binary(f)


def test_read_transactions_compacts_item_ids(tmp_path):
    f = tmp_path / "t.dat"
    f.write_text("10 30\n\n30 30 20\n")
    A, ids = read_transactions(f)
    np.testing.assert_array_equal(ids, [10, 20, 30])
    np.testing.assert_array_equal(A.toarray(), [[1, 0, 1], [0, 0, 0], [0, 1, 1]])
    g = tmp_path / "t.txt"
    g.write_text("3 5 7\n1 2\n")  # not dense (ragged): auto reads transactions
    assert read_binary(g).shape == (2, 5)
    g.write_text("1 x\n")
    with pytest.raises(DataError, match="integer"):
        read_transactions(g)
    with pytest.raises(DataError, match="no such file"):
        read_binary(tmp_path / "absent.txt")


def test_binarize_ratings_at_threshold():
    r = Ratings(
        users=np.array([0, 0, 1, 2], dtype=np.int32),
        items=np.array([0, 1, 1, 2], dtype=np.int32),
        values=np.array([4.0, 3.0, 3.5, 5.0]),
        n_users=3,
        n_items=3,
    )
    np.testing.assert_array_equal(
        binarize_ratings(r, 3.5).toarray(), [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    )
    d = load_boolean(ratings=r, binarize=3.5, n_clients=3)
    assert d.A.nnz == 3 and d.n_clients == 3
    with pytest.raises(ConfigError, match="threshold"):
        load_boolean(ratings=r, n_clients=3)
    with pytest.raises(ConfigError, match="exactly one"):
        load_boolean(n_clients=3)


def test_load_synthetic():
    d = load_boolean("synthetic-boolean", noise=0.1, n_clients=4, seed=1, cols=50)
    assert d.shape == (2000, 50) and d.signal is not None and d.n_clients == 4
    with pytest.raises(ConfigError):
        load_boolean("nope")


@pytest.mark.realdata
def test_real_sets_load_with_documented_shapes(require_shared_data):
    zoo_file = require_shared_data("bmf-uci-binary", "zoo.txt")
    chess_file = require_shared_data("fimi-binary", "chess.dat")
    tumor_file = require_shared_data("bmf-uci-binary", "tumor_w_missing.txt")
    zoo = load_boolean(binary_file=zoo_file, n_clients=5)
    assert zoo.shape == (101, 17) and zoo.A.nnz == 761
    chess = read_binary(chess_file)
    assert chess.shape == (3196, 75) and chess.nnz == 118_252
    with pytest.raises(DataError, match="missing"):
        read_binary(tumor_file)


# ---------------------------------------------------------------- batched blocks
@pytest.mark.parametrize("dense", [True, False])
def test_client_blocks_products_match_per_client(dense):
    rng = np.random.default_rng(0)
    A = (rng.random((23, 9)) < 0.3).astype(int)
    d = BooleanFederatedData.build(A, 4, seed=0)
    clients = np.array([0, 2, 3])
    b = ClientBlocks(d, clients, n_max=7, dense=dense)
    U = rng.random((3, 7, 2)) * b.mask
    V = rng.random((3, 2, 9))
    AVt, UtA = b.AVt(V), b.UtA(U)
    for pos, c in enumerate(clients):
        Ac = d.block(c).toarray()
        n_c = len(Ac)
        np.testing.assert_allclose(AVt[pos, :n_c], Ac @ V[pos].T, atol=1e-12)
        np.testing.assert_allclose(AVt[pos, n_c:], 0.0)
        np.testing.assert_allclose(UtA[pos], U[pos, :n_c].T @ Ac, atol=1e-12)


# ---------------------------------------------------------------- metrics
def test_boolean_counts_and_loss_match_dense_computation():
    rng = np.random.default_rng(1)
    A = (rng.random((30, 12)) < 0.4).astype(np.uint8)
    ptr = np.array([0, 10, 18, 30])
    U = (rng.random((30, 3)) < 0.4).astype(np.uint8)
    V = (rng.random((3, 12)) < 0.4).astype(np.uint8)
    B = (U.astype(int) @ V >= 1).astype(int)
    c = boolean_counts(sp.csr_matrix(A), U, V, ptr)
    for i in range(3):
        a, b = A[ptr[i] : ptr[i + 1]], B[ptr[i] : ptr[i + 1]]
        assert c.overlap[i] == (a & b).sum() and c.ones_model[i] == b.sum()
        assert math.isclose(c.rmsd_per_client()[i], np.sqrt(np.mean((a - b) ** 2)))
    assert math.isclose(c.f1(), 2 * (A & B).sum() / (A.sum() + B.sum()))
    Ur, Vr = rng.random((30, 3)), rng.random((3, 12))
    assert math.isclose(squared_loss(sp.csr_matrix(A), Ur, Vr), np.sum((A - Ur @ Vr) ** 2))


# ---------------------------------------------------------------- DP
def test_gaussian_and_laplace_scales_as_stated():
    assert math.isclose(gaussian_sigma(0.5, 0.05, 2.0), 2.0 / 0.5 * math.sqrt(2 * math.log(25.0)))
    assert laplace_scale(0.5, 3.0) == 6.0
    with pytest.raises(ConfigError):
        gaussian_sigma(0.0, 0.05, 1.0)


def test_clipping_bounds_the_uploads():
    rng = np.random.default_rng(0)
    V = rng.random((4, 3, 5)) * 3
    V[0] *= 0.01
    clipped = bound_uploads(V, "frobenius", 1.5)
    norms = np.linalg.norm(clipped, axis=(1, 2))
    assert np.all(norms <= 1.5 + 1e-12)
    np.testing.assert_array_equal(clipped[0], V[0])  # already inside the ball
    assert bound_uploads(V - 2, "elementwise", 0.5).min() == -0.5
    assert bound_uploads(V, "none", 1.0).max() == 1.0


def test_noise_scale_and_sensitivity():
    p = UploadPrivacy("gaussian", 1.0, 0.05, "frobenius", 2.0, (4, 25))
    assert p.sensitivity == 4.0
    assert math.isclose(p.scale, gaussian_sigma(1.0, 0.05, 4.0))
    noisy = p.privatize(np.zeros((200, 4, 25)), np.random.default_rng(0))
    assert abs(noisy.std() / p.scale - 1) < 0.02
    lap = UploadPrivacy("laplace", 2.0, 0.05, "elementwise", 1.0, (2, 3))
    assert lap.sensitivity == 2.0 * 6 and lap.scale == 6.0
    box = UploadPrivacy("gaussian", 1.0, 0.05, "none", 1.0, (4, 25))
    assert box.sensitivity == 10.0


def test_composed_epsilon_grows_with_syncs():
    p = UploadPrivacy("gaussian", 1.0, 0.05, "frobenius", 1.0, (2, 2))
    eps = [p.composed_epsilon(n) for n in (1, 10, 100)]
    assert p.composed_epsilon(0) == 0.0
    assert eps[0] < eps[1] < eps[2]
    lap = UploadPrivacy("laplace", 0.5, 0.05, "frobenius", 1.0, (2, 2))
    assert lap.composed_epsilon(1) < lap.composed_epsilon(50, accountant="pld") < 25.0 + 1e-9


# ---------------------------------------------------------------- baselines
def test_aggregations_eqs_11_to_13():
    V = np.array([[[1, 0, 1, 0]], [[1, 0, 0, 0]], [[1, 1, 0, 0]], [[0, 1, 1, 0]]], dtype=np.uint8)
    np.testing.assert_array_equal(aggregate(V, "majority"), [[1, 1, 1, 0]])  # ties give 1
    np.testing.assert_array_equal(aggregate(V, "average"), [[1, 0, 0, 0]])  # half to even
    np.testing.assert_array_equal(aggregate(V, "or"), [[1, 1, 1, 0]])


def test_grecond_recovers_a_boolean_product():
    U = np.array([[1, 0], [1, 1], [0, 1], [0, 0], [1, 0]])
    V = np.array([[1, 1, 0, 0, 1], [0, 1, 1, 1, 0]])
    A = (U @ V >= 1).astype(np.uint8)
    Uf, Vf = grecond(A, 3)
    np.testing.assert_array_equal((Uf.astype(int) @ Vf >= 1), A.astype(bool))
    assert not Vf[2].any()  # all covered after two factors


def test_aggregated_bmf_reports_metrics():
    d = load_boolean("synthetic-boolean", noise=0.0, n_clients=3, rows=90, cols=30, tiles=2)
    out = aggregated_bmf(d, 2, "grecond", ("majority", "or"))
    assert set(out) == {"majority", "or"}
    assert set(out["or"]) == {"rmsd", "rmsd_sum", "f1", "f1_signal"}
    elb = aggregated_bmf(d, 2, "elbmf", ("majority",), elbmf_steps=50)
    assert 0.0 <= elb["majority"]["f1"] <= 1.0


def test_top_items_keeps_the_most_frequent_columns_in_order():
    A = np.array([[1, 0, 1, 1], [0, 0, 1, 1], [1, 1, 0, 1], [0, 0, 0, 1]], dtype=np.uint8)
    data = BooleanFederatedData.build(A, 2, seed=0)
    top = data.top_items(2)  # column counts 2, 1, 2, 4: keep columns 0 and 3 (tie by id)
    assert top.shape == (4, 2)
    np.testing.assert_array_equal(top.A.toarray(), data.A.toarray()[:, [0, 3]])
    np.testing.assert_array_equal(top.client_ptr, data.client_ptr)
    assert data.top_items(4) is data
