"""The item-bias baseline: its closed forms against brute-force solves, its fold-in, its
popularity list, and its DP run from the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.optimize import minimize

from fedmc.algorithms.item_bias import ALGORITHM, ItemBiasConfig
from fedmc.core.biases import user_biases
from fedmc.estimators import ItemBias
from fedmc.federation.loop import Rounds
from fedmc.federation.sampling import make_sampler
from fedmc.model import FactorModel, load_model
from fedmc.sim import simulate


def _dense(data):
    """Every training rating as (row, item, value, client)."""
    tr = data.train
    rows = tr.rows()
    return rows, tr.indices.astype(np.int64), tr.values, data.client_of_row()[rows]


def _brute_force_b(data, c, weights, lam):
    """argmin_b sum_i a_i sum_(t,j) (z_tj - c_t - b_j)^2 / 2 + lam/2 sum_j (b_j - mu)^2 with mu
    the weighted mean residual over all items, by a generic minimizer."""
    rows, items, z, client = _dense(data)
    a = weights[client]
    x = z - c[rows]
    counts = np.bincount(items, weights=a, minlength=data.n_items)
    mu = np.sum(a * x) / counts.sum()

    def f(b):
        return 0.5 * np.sum(a * (x - b[items]) ** 2) + 0.5 * lam * np.sum((b - mu) ** 2)

    return minimize(f, np.zeros(data.n_items), method="BFGS", options={"gtol": 1e-10}).x


@pytest.fixture(scope="module")
def data(tiny_federated):
    return tiny_federated(m=15, n=8, p=5, density=0.5, seed=3)[0]


def _client_weights(data, cfg):
    if cfg.weights == "equal":
        return np.ones(data.n_clients)
    _, items, _, client = _dense(data)
    distinct = [len(np.unique(items[client == c])) for c in range(data.n_clients)]
    return 1.0 / np.sqrt(np.array(distinct, dtype=float))


def test_a_users_bias_is_its_ridge_solution(data):
    tr = data.train
    b = np.random.default_rng(0).normal(size=data.n_items)
    c = user_biases(tr.indptr, tr.indices, tr.values, b, 2.5)
    for t in range(data.n_users):
        q = slice(tr.indptr[t], tr.indptr[t + 1])
        r = tr.values[q] - b[tr.indices[q]]
        best = minimize(lambda v, r=r: 0.5 * np.sum((r - v[0]) ** 2) + 1.25 * v[0] ** 2,
                        [0.0]).x[0]
        assert c[t] == pytest.approx(best, abs=1e-6)


@pytest.mark.parametrize("weights", ["equal", "sqrt-items"])
@pytest.mark.parametrize("count_scale", [1.0, 0.3])
def test_the_setup_gives_the_ridge_item_biases(data, weights, count_scale):
    """One set-up exchange (multi-user clients): b solves (2) given every user's bias (1)
    against b = 0, whatever the count scale."""
    cfg = ItemBiasConfig(weights=weights, lam_item=1.5, lam_user=2.0, count_scale=count_scale)
    sim = simulate(ALGORITHM, cfg, data, rounds=Rounds(make_sampler(data.n_clients), 0))
    tr = data.train
    c = user_biases(tr.indptr, tr.indices, tr.values, np.zeros(data.n_items), cfg.lam_user)
    expected = _brute_force_b(data, c, _client_weights(data, cfg), cfg.lam_item)
    np.testing.assert_allclose(sim.server.b, expected, atol=1e-6)


def test_rounds_alternate_user_and_item_biases(data):
    """With every client in every round, round k recomputes each user's bias against b^k and
    the item biases solve (2) given those: block coordinate descent of the ridge problem."""
    cfg = ItemBiasConfig(weights="equal", lam_item=1.0, lam_user=1.0)
    tr = data.train
    b = np.zeros(data.n_items)
    for rounds in range(4):  # the set-up, then rounds 1, 2, 3
        c = user_biases(tr.indptr, tr.indices, tr.values, b, cfg.lam_user)
        b = _brute_force_b(data, c, np.ones(data.n_clients), cfg.lam_item)
        sim = simulate(ALGORITHM, cfg, data,
                       rounds=Rounds(make_sampler(data.n_clients, active=None), rounds))
        np.testing.assert_allclose(sim.server.b, b, atol=1e-6)


def test_counts_only_is_the_popularity_list(data):
    cfg = ItemBiasConfig(signal="counts", weights="equal", count_scale=0.5)
    sim = simulate(ALGORITHM, cfg, data, rounds=Rounds(make_sampler(data.n_clients), 0))
    raters = np.bincount(data.train.indices, minlength=data.n_items)
    np.testing.assert_allclose(sim.server.b, raters)


def test_fold_in_is_the_users_bias_against_the_published_model(data):
    model = FactorModel.from_estimator(ItemBias(rounds=0, lam_user=3.0).fit(data))
    me = model.fold_in(items=[0, 2, 5], ratings=[1.0, -0.5, 0.2])
    b = model.item_biases
    assert me.factor[1] == 1.0
    assert me.factor[0] == pytest.approx((1.0 - b[0] - 0.5 - b[2] + 0.2 - b[5]) / (3 + 3.0))
    assert model.predict(me, [1])[0] == pytest.approx(me.factor[0] + b[1])


def test_a_dp_run_publishes_a_model_that_recommends(monkeypatch, capsys, tmp_path,
                                                    ratings_csv, invoke):
    out = tmp_path / "ib"
    code, _, err = invoke(monkeypatch, capsys, "run", "-a", "item-bias", "--ratings",
                          ratings_csv, "--rating-scale", "1,5", "--partition", "user",
                          "--rounds", 0, "--dp-epsilon", 1, "--dp-clip", 0.5, "--out", out,
                          "-q")
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["data"]["normalize"] == "public" and "normalize" in config["run"]["defaulted"]
    assert config["data"]["normalizer"] == {"kind": "public", "mean": 3.0, "scale": 2.0}
    history = (out / "history.csv").read_text().splitlines()
    assert len(history) == 2 and 0 < float(history[1].split(",")[
        history[0].split(",").index("epsilon")]) <= 1.0
    assert load_model(out).algorithm == "item-bias"
    code, text, err = invoke(monkeypatch, capsys, "recommend", out, "--user", 1, "-n", 3,
                             "--format", "json")
    assert code == 2 and "user factors" in err  # they stay on the clients
    ratings = tmp_path / "mine.csv"
    ratings.write_text("item,rating\n1,5\n2,1\n")
    code, text, err = invoke(monkeypatch, capsys, "recommend", out, "--ratings", ratings,
                             "-n", 3, "--format", "json")
    assert code == 0, err
    assert len(json.loads(text)) == 3
