"""``fedmc evaluate``: the exact evaluation of a run's model, every held-out user folded in
from its own training ratings (batched, against a per-user loop through the public model)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedmc.algorithms.registry import spec
from fedmc.data import FederatedData
from fedmc.estimators import estimator_class
from fedmc.model import load_model
from fedmc.run.data import DataSettings, federated_data
from fedmc.testing import fold_in_errors


@pytest.mark.parametrize(("name", "params"), [
    ("fedmc-admm", {"rank": 2}),
    ("fedmc-admm", {"rank": 2, "reg_u": "l1", "steps": "paper"}),
    ("item-bias", {}),
    ("fedmavg", {"rank": 2, "biases": True}),  # no batched form: one user at a time
])
def test_batched_fold_in_equals_one_user_at_a_time(name, params, tiny_federated):
    data = tiny_federated(m=10, n=7, p=10, density=0.5, seed=2)[0]
    est = estimator_class(name)(**params, rounds=2, active=None).fit(data)
    cfg, V, tr = est.config_, est.V_, data.train
    U = spec(name).fold_in_users(cfg, V, tr)
    one = spec(name).load_fold_in()
    for t in range(data.n_users):
        q = slice(tr.indptr[t], tr.indptr[t + 1])
        u = one(cfg, V, tr.indices[q].astype(np.int64), tr.values[q])
        np.testing.assert_allclose(U[t], u, rtol=1e-8, atol=1e-8)


def _run(invoke, monkeypatch, capsys, out, ratings, *extra):
    code, _, err = invoke(monkeypatch, capsys, "run", "-a", "fedmc-admm", "--ratings", ratings,
                          "--partition", "user", "--rounds", 3, "--rank", 2, "--out", out, "-q",
                          *extra)
    assert code == 0, err


def _split(ratings) -> FederatedData:
    return federated_data(DataSettings(ratings=ratings, partition="user", normalize="none"))[0]


def test_evaluate_folds_in_every_test_user_as_its_device_would(monkeypatch, capsys, tmp_path,
                                                               ratings_csv, invoke):
    out = tmp_path / "run"
    _run(invoke, monkeypatch, capsys, out, ratings_csv)
    code, text, err = invoke(monkeypatch, capsys, "evaluate", out, "--ranking-k", 5)
    assert code == 0, err
    report = json.loads((out / "evaluation.json").read_text())
    assert report["private"] is False and report["source"] == "split"
    assert "test RMSE" in text or "test_rmse" in text
    # the reference: the public model, one raw user at a time (FactorModel.fold_in/predict)
    model, data = load_model(out), _split(ratings_csv)
    errors = fold_in_errors(model, data.train, data.test)
    assert report["test_rmse"] == pytest.approx(np.sqrt(np.mean(errors**2)), rel=1e-9)
    assert report["test_mae"] == pytest.approx(np.mean(np.abs(errors)), rel=1e-9)
    assert report["test_ratings"] == len(errors)
    assert 0 <= report["precision@5"] <= 1 and report["ranking_k"] == 5
    # a new model: no stale report
    _run(invoke, monkeypatch, capsys, out, ratings_csv, "--overwrite")
    assert not (out / "evaluation.json").exists()


def test_train_and_test_files_give_the_split_s_numbers(monkeypatch, capsys, tmp_path,
                                                      ratings_csv, invoke):
    out = tmp_path / "run"
    _run(invoke, monkeypatch, capsys, out, ratings_csv, "--dp-epsilon", 8, "--dp-clip", 0.5,
         "--rating-scale", "1,5", "--sampling", "bernoulli", "--participation", 0.5)
    invoke(monkeypatch, capsys, "evaluate", out, "-q")
    split = json.loads((out / "evaluation.json").read_text())
    data = _split(ratings_csv)
    for name, csr in (("train", data.train), ("test", data.test)):
        rows = csr.rows()
        with open(tmp_path / f"{name}.csv", "w") as fh:
            fh.write("user,item,rating\n")
            for t, j, v in zip(data.user_ids[rows], data.item_ids[csr.indices], csr.values,
                               strict=True):
                fh.write(f"{t},{j},{v:g}\n")
    code, _, err = invoke(monkeypatch, capsys, "evaluate", out, "--train",
                          tmp_path / "train.csv", "--test", tmp_path / "test.csv", "-q")
    assert code == 0, err
    files = json.loads((out / "evaluation.json").read_text())
    assert files["source"] == "files" and files["private"] is False
    for key in ("test_rmse", "test_mae", "test_ratings"):
        assert files[key] == pytest.approx(split[key], rel=1e-9), key


def test_bad_input_exits_2_with_one_line(monkeypatch, capsys, tmp_path, ratings_csv, invoke):
    empty = tmp_path / "empty"
    empty.mkdir()
    for args, words in (((empty,), "model.npz"),
                        ((tmp_path / "nowhere",), "no such run folder"),
                        ((empty, "--test", ratings_csv), "--train and --test together")):
        code, _, err = invoke(monkeypatch, capsys, "evaluate", *args)
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err
    assert not (empty / "evaluation.json").exists()


def test_an_implicit_run_is_evaluated_by_ranking_alone(monkeypatch, capsys, tmp_path,
                                                      ratings_csv, invoke):
    """Interactions: the top-10 lists by default, no RMSE (predictions are preferences);
    the popularity list (item-bias on interactions, counts only) through the same command,
    its lists the most interacted-with items each user has not seen."""
    from fedmc.core.ranking import ranking_metrics, ranking_sums

    for name, extra in (("fedals", ("--rank", 2, "--rounds", 3)), ("item-bias", ())):
        out = tmp_path / name
        code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "-a", name,
                              "--implicit", *extra, "--out", out, "-q")
        assert code == 0, err
        code, _, err = invoke(monkeypatch, capsys, "evaluate", out, "-q")
        assert code == 0, err
        report = json.loads((out / "evaluation.json").read_text())
        assert report["ranking_k"] == 10 and 0 <= report["ndcg@10"] <= 1
        assert "test_rmse" not in report and report["test_interactions"] > 0
    config = json.loads((tmp_path / "item-bias" / "config.json").read_text())
    assert config["params"]["signal"] == "counts"
    data = federated_data(DataSettings(ratings=ratings_csv, partition="user", implicit=True))[0]
    per_user = np.diff(data.train.indptr)  # each client's counts weigh 1 / sqrt(its items)
    counts = np.bincount(data.train.indices, minlength=data.n_items,
                         weights=np.repeat(1 / np.sqrt(per_user), per_user))
    popular = ranking_metrics(ranking_sums(data, np.ones((data.n_users, 1)), counts[:, None],
                                           10), 10)
    assert report["ndcg@10"] == pytest.approx(popular["ndcg@10"], rel=1e-12)
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "-a",
                          "item-bias", "--implicit", "-P", "signal=ratings", "--out",
                          tmp_path / "no", "-q")
    assert code == 2 and "contradicts signal=ratings" in err
