"""Federated EASE: its upload form against dense Gram matrices, the federation against a
centralized EASE written from the paper (Steck 2019), its model's fold-in and recommendations,
and what the command line refuses."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

import fedmc.algorithms.ease.server
from fedmc.algorithms.ease import ALGORITHM, EaseConfig
from fedmc.core.gram_rows import GramRows
from fedmc.core.uploads import Stacked
from fedmc.errors import ConfigError, DataError
from fedmc.estimators import Ease
from fedmc.federation.loop import Rounds
from fedmc.federation.sampling import make_sampler
from fedmc.model import FactorModel, load_model
from fedmc.privacy.gaussian import squared_norms
from fedmc.sim import simulate


def centralized_ease(X: np.ndarray, lam: float) -> np.ndarray:
    """Steck (2019), Algorithm 1, straight from the paper: ``G = X^T X``, ``P = (G + lambda
    I)^-1``, ``B = P / (-diag(P))`` with a zero diagonal."""
    return centralized_ease_of_gram(X.T @ X, lam)


def centralized_ease_of_gram(G: np.ndarray, lam: float) -> np.ndarray:
    """Algorithm 1 from its Gram matrix ``G`` on."""
    P = np.linalg.inv(G + lam * np.eye(G.shape[0]))
    B = P / (-np.diag(P))
    np.fill_diagonal(B, 0.0)
    return B


def _dense(R, n_items: int) -> np.ndarray:
    X = np.zeros((len(R.indptr) - 1, n_items))
    X[R.rows(), R.indices] = R.values
    return X


@pytest.fixture(scope="module")
def batch():
    """20 users of 9 items (strengths in (0, 1)) in 4 clients, one of them without users."""
    X = sp.random(20, 9, density=0.4, random_state=1, format="csr")
    X.sort_indices()
    users = np.array([0, 3, 3, 10, 20])
    return GramRows.of(users, X.indptr, X.indices, X.data, 9), X.toarray(), users


def _grams(D, users):
    return [D[a:b].T @ D[a:b] for a, b in zip(users[:-1], users[1:], strict=True)]


def test_gram_rows_add_the_weighted_gram_matrices(batch):
    rows, D, users = batch
    weights = np.array([1.0, 2.0, 3.0, 0.5])
    total = Stacked((9, 9), rows=rows).weighted_sum(weights)
    expected = sum(w * G for w, G in zip(weights, _grams(D, users), strict=True))
    np.testing.assert_allclose(total, expected, rtol=1e-14, atol=1e-14)


def test_gram_rows_are_the_nonzero_rows_of_each_clients_gram(batch):
    rows, D, users = batch
    owner = np.repeat(np.arange(rows.n_clients), np.diff(rows.ptr))
    grams = _grams(D, users)
    for k, G in enumerate(grams):
        assert rows.index[owner == k].tolist() == np.flatnonzero(G.any(axis=1)).tolist()
    expected = np.array([grams[k][j] for k, j in zip(owner, rows.index, strict=True)])
    np.testing.assert_allclose(rows.values, expected, atol=1e-15)
    np.testing.assert_allclose(rows.squared_norms(), np.sum(expected**2, axis=1), rtol=1e-12)
    upper = sum(np.count_nonzero(np.triu(G)) for G in grams)
    assert rows.numbers() == 2 * len(rows.index) + 2 * upper


def test_a_clients_norm_is_its_grams_frobenius_norm(batch):
    """What the aggregator clips to (user-level DP): ||G_k||_F of every client, scaled."""
    rows, D, users = batch
    scale = np.array([0.5, 1.0, 2.0, 1.0])
    got = squared_norms(Stacked((9, 9), rows=rows, scale=scale))
    expected = [np.sum(G**2) for G in _grams(D, users)] * scale**2
    np.testing.assert_allclose(got, expected, rtol=1e-12)


@pytest.fixture(scope="module")
def clicks(tiny_interactions):
    return tiny_interactions(m=30, n=10, p=4, density=0.4, seed=2)


@pytest.mark.parametrize("lam", [0.5, 20.0])
def test_federated_ease_is_centralized_ease(clicks, lam):
    """One set-up exchange, users split over clients: B of the paper's closed form, to 1e-10,
    and every user's scores x_u B."""
    cfg = EaseConfig(lam=lam, implicit=True)
    sim = simulate(ALGORITHM, cfg, clicks, rounds=Rounds(make_sampler(clicks.n_clients), 0))
    X = _dense(clicks.train, clicks.n_items)
    B = centralized_ease(X, lam)
    np.testing.assert_allclose(sim.server.B, B, rtol=0, atol=1e-10)
    V = sim.model(ALGORITHM, cfg)["V"]
    np.testing.assert_allclose(sim.clients.user_factors() @ V.T, X @ B, atol=1e-10)


def test_rounds_change_nothing(clicks):
    cfg = EaseConfig(lam=3.0, implicit=True)
    one = simulate(ALGORITHM, cfg, clicks, rounds=Rounds(make_sampler(clicks.n_clients), 0))
    more = simulate(ALGORITHM, cfg, clicks, rounds=Rounds(make_sampler(clicks.n_clients), 3))
    assert np.array_equal(one.server.B, more.server.B)


def test_max_items_keeps_that_many_of_each_users_items(clicks):
    """Each user contributes a draw of at most max_items of its own items, and B is EASE's of
    what was contributed."""
    cfg = EaseConfig(lam=1.0, implicit=True, max_items=2)
    sim = simulate(ALGORITHM, cfg, clicks, rounds=Rounds(make_sampler(clicks.n_clients), 0))
    kept = sim.clients.state.contributed.train
    X, K = _dense(clicks.train, clicks.n_items), _dense(kept, clicks.n_items)
    assert np.all(np.diff(kept.indptr) == np.minimum(np.diff(clicks.train.indptr), 2))
    assert np.all(K[K != 0] == X[K != 0])
    np.testing.assert_allclose(sim.server.B, centralized_ease(K, cfg.lam), atol=1e-10)


def test_a_catalogue_above_the_dense_limit_is_refused(clicks, monkeypatch):
    monkeypatch.setattr(fedmc.algorithms.ease.server, "MAX_CATALOGUE", 9)
    with pytest.raises(ConfigError, match="10 items exceed the 9"):
        simulate(ALGORITHM, EaseConfig(implicit=True), clicks,
                 rounds=Rounds(make_sampler(clicks.n_clients), 0))


def test_the_command_line_refuses_a_large_catalogue_in_one_line(monkeypatch, capsys, tmp_path,
                                                                 ratings_csv, invoke):
    monkeypatch.setattr(fedmc.algorithms.ease.server, "MAX_CATALOGUE", 10)
    code, _, err = invoke(monkeypatch, capsys, "run", "-a", "ease", "--implicit", "--ratings",
                          ratings_csv, "--out", tmp_path / "big", "-q")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "exceed the 10" in err and "--algorithm" in err and "Traceback" not in err
    assert not (tmp_path / "big").exists()


def test_the_published_model_folds_in_and_recommends(clicks, tmp_path):
    """Saved and loaded, the model is B^T; a new user's factor is its history and its scores
    x B; recommendations leave its items out."""
    est = Ease(implicit=True, lam=2.0, rounds=0).fit(clicks)
    model = FactorModel.from_estimator(est)
    model.save(tmp_path)
    loaded = load_model(tmp_path)
    B = centralized_ease(_dense(clicks.train, clicks.n_items), 2.0)
    np.testing.assert_allclose(loaded.V, B.T, atol=1e-10)
    assert loaded.implicit
    items = clicks.item_ids[[1, 4, 7]]
    me = loaded.fold_in(items)
    x = np.zeros(clicks.n_items)
    x[[1, 4, 7]] = 1.0
    assert np.array_equal(me.factor, x)
    top = loaded.recommend(me, n=3)
    scores = x @ B
    scores[[1, 4, 7]] = -np.inf
    assert top.items.tolist() == clicks.item_ids[np.argsort(-scores, kind="stable")[:3]].tolist()
    with pytest.raises(DataError, match="give the items alone"):
        loaded.fold_in(items, [5.0, 4.0, 3.0])


def test_a_saved_model_of_the_wrong_width_is_refused(clicks, tmp_path):
    est = Ease(implicit=True, rounds=0).fit(clicks)
    model = FactorModel.from_estimator(est)
    model.save(tmp_path)
    with np.load(tmp_path / "model.npz") as npz:
        arrays = dict(npz)
    arrays["V"] = arrays["V"][:, :-1]
    np.savez(tmp_path / "model.npz", **arrays)
    meta = json.loads((tmp_path / "model.json").read_text())
    meta["arrays"]["V"]["shape"] = list(arrays["V"].shape)
    (tmp_path / "model.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match="an item-item model needs 10"):
        load_model(tmp_path)


def test_ratings_without_implicit_are_refused_naming_the_flag(monkeypatch, capsys, tmp_path,
                                                              ratings_csv, invoke):
    code, out, err = invoke(monkeypatch, capsys, "run", "-a", "ease", "--ratings", ratings_csv,
                            "--out", tmp_path / "r", "-q")
    assert code == 2 and "--implicit" in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err and not (tmp_path / "r").exists()


def test_a_run_on_clicks_prints_ndcg_and_evaluates(monkeypatch, capsys, tmp_path, ratings_csv,
                                                   invoke):
    out = tmp_path / "e"
    code, printed, err = invoke(monkeypatch, capsys, "run", "-a", "ease", "--implicit",
                                "--ratings", ratings_csv, "-P", "lam=5", "--out", out)
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert 0 < summary["ndcg@10"] <= 1 and "ndcg@10" in printed
    code, printed, err = invoke(monkeypatch, capsys, "evaluate", out, "-q")
    assert code == 0, err
    evaluation = json.loads((out / "evaluation.json").read_text())
    assert evaluation["ndcg@10"] == pytest.approx(summary["ndcg@10"], abs=1e-12)


@pytest.mark.realdata
@pytest.mark.slow
def test_federated_ease_is_centralized_ease_on_ml100k(require_shared_data):
    """ML-100K's clicks (seed-0 80/20 split), one user per client: B to 1e-10 of the paper's
    closed form on the training interactions."""
    from fedmc import load_federated

    root = require_shared_data("ml-100k", "u.data").parents[1]
    data = load_federated("ml-100k", data_dir=root, implicit=True, partition="user")
    cfg = EaseConfig(lam=300.0, implicit=True)
    sim = simulate(ALGORITHM, cfg, data, rounds=Rounds(make_sampler(data.n_clients), 0))
    B = centralized_ease(_dense(data.train, data.n_items), cfg.lam)
    np.testing.assert_allclose(sim.server.B, B, rtol=0, atol=1e-10)


@pytest.mark.slow
def test_a_dp_run_takes_the_budgets_settings_and_publishes_a_private_model(
        monkeypatch, capsys, tmp_path, ratings_csv, invoke):
    """--dp-epsilon alone: the clip and lambda tuned for the budget, one set-up exchange
    accounted, a private model that fedmc evaluate ranks with."""
    out = tmp_path / "dp"
    code, _, err = invoke(monkeypatch, capsys, "run", "-a", "ease", "--implicit", "--ratings",
                          ratings_csv, "--dp-epsilon", 8, "--out", out, "-q")
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["private"] and config["params"]["lam"] == 5000.0
    assert {"dp_clip", "lam", "rounds"} <= set(config["run"]["defaulted"])
    history = (out / "history.csv").read_text().splitlines()
    assert len(history) == 2 and 7.9 < float(history[1].split(",")[3]) <= 8.0
    code, _, err = invoke(monkeypatch, capsys, "evaluate", out, "-q")
    assert code == 0, err
    assert 0 <= json.loads((out / "evaluation.json").read_text())["ndcg@10"] <= 1


def test_the_server_symmetrizes_a_noised_gram():
    """Post-processing of a noised (asymmetric) release: B of its symmetric part."""
    rng = np.random.default_rng(0)
    G = rng.normal(size=(6, 6)) + 10 * np.eye(6)
    np.testing.assert_allclose(fedmc.algorithms.ease.server.ease_weights(G, 2.0),
                               centralized_ease_of_gram((G + G.T) / 2, 2.0), atol=1e-12)


@pytest.mark.slow
def test_fedmc_tune_searches_lambda_on_the_cut(monkeypatch, capsys, tmp_path, ratings_csv,
                                               invoke):
    """``fedmc tune --algorithm ease --implicit``: the declared space (lambda), each trial
    scored by the validation NDCG@10 of its one exchange, the winner trained on every
    training interaction."""
    import csv

    out = tmp_path / "tune"
    code, _, err = invoke(monkeypatch, capsys, "tune", "-a", "ease", "--implicit", "--ratings",
                          ratings_csv, "--trials", 3, "--out", out, "-q")
    assert code == 0, err
    rows = list(csv.DictReader((out / "trials.csv").open()))
    assert len(rows) == 3 and all(10.0 <= float(r["lam"]) <= 5000.0 for r in rows)
    best = json.loads((out / "best.json").read_text())
    assert best["metric"] == "validation_ndcg@10" and set(best["settings"]) == {"lam"}
    assert best["value"] == pytest.approx(max(float(r["value"]) for r in rows))
    config = json.loads((out / "best" / "config.json").read_text())
    assert config["params"]["lam"] == pytest.approx(best["settings"]["lam"])
