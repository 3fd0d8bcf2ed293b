"""Top-N lists that blend the released rater counts in (issue 38, item 5; docs/privacy.md,
"Private top-N lists"): FedMC-ADMM with ``rank_popularity`` ``w`` publishes ``w sqrt(max(n_j,
0))`` of its set-up release's rater counts ``n_j``, and every list of the model (one user,
every held-out user, ``fedmc evaluate``'s ranking metrics) ranks by the predicted rating plus
that boost."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedmc.algorithms.fedmc_admm.config import FedMCADMMConfig
from fedmc.core.ranking import top_k_metrics
from fedmc.errors import DataError
from fedmc.model import load_model
from fedmc.run.data import DataSettings, federated_data
from fedmc.run.evaluation import evaluate_model, held_out_split
from fedmc.run.top_lists import top_lists

WEIGHT = 0.7


@pytest.fixture
def blended(monkeypatch, capsys, tmp_path, ratings_csv, invoke):
    """A run that ranks with the rater counts (consensus on rated items, equal weights: each
    count is the item's number of raters)."""
    out = tmp_path / "run"
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "--partition",
                          "user", "--rounds", 3, "--rank", 2, "--biases", "-P",
                          "consensus=rated", "-P", "dual_init=zeros", "-P",
                          f"rank_popularity={WEIGHT}", "--out", out, "-q")
    assert code == 0, err
    return out


def _brute_force_lists(model, held, n):
    """Every held-out user's list straight from the definition: fold in, score every item
    by ``V_j u + w sqrt(max(n_j, 0))``, drop the rated ones, sort (ties: smaller index)."""
    lists = {}
    tr = held.train
    for t, user in enumerate(held.user_ids.tolist()):
        if held.test.indptr[t + 1] == held.test.indptr[t]:
            continue
        rows = slice(tr.indptr[t], tr.indptr[t + 1])
        me = model.fold_in(model.item_ids[tr.indices[rows]], tr.values[rows])
        score = model.V @ me.factor + model.rank_boost
        score[tr.indices[rows]] = -np.inf
        order = np.argsort(-score, kind="stable")[:n]
        lists[user] = (model.item_ids[order].tolist(),
                       np.clip(model.normalizer.inverse(model.V[order] @ me.factor),
                               *model.clip))
    return lists


def test_the_boost_is_the_weight_times_the_root_of_each_items_raters(blended, ratings_csv):
    """Equal weights and no DP: the released counts are the items' raters in training."""
    model = load_model(blended)
    data = federated_data(DataSettings(ratings=ratings_csv, partition="user"))[0]
    raters = np.bincount(data.train.indices, minlength=data.n_items)
    np.testing.assert_allclose(model.rank_boost, WEIGHT * np.sqrt(raters), rtol=1e-12)
    assert model.config.rank_popularity == WEIGHT


def test_every_list_ranks_by_the_rating_plus_the_popularity_blend(blended):
    model = load_model(blended)
    held = held_out_split(model, json.loads((blended / "config.json").read_text())["data"])
    expected = _brute_force_lists(model, held, 5)
    lists = top_lists(model, held, 5)
    assert sorted(set(lists.users.tolist())) == sorted(expected) and len(expected) > 10
    for user, (items, ratings) in expected.items():
        mine = lists.users == user
        assert lists.items[mine].tolist() == items, user
        np.testing.assert_allclose(lists.scores[mine], ratings, rtol=1e-9)  # ratings shown
        me = held.user_ids.tolist().index(user)
        rows = slice(held.train.indptr[me], held.train.indptr[me + 1])
        one = model.recommend(model.fold_in(model.item_ids[held.train.indices[rows]],
                                            held.train.values[rows]), n=5)
        assert one.items.tolist() == items
    # the ranking metrics of fedmc evaluate rank the same way
    R = held.train
    factors = np.array([model.fold_in(model.item_ids[R.indices[R.indptr[t]:R.indptr[t + 1]]],
                                      R.values[R.indptr[t]:R.indptr[t + 1]]).factor
                        for t in range(len(held.user_ids))])
    by_hand = top_k_metrics(held, np.hstack([factors, np.ones((len(factors), 1))]),
                            np.hstack([model.V, model.rank_boost[:, None]]), 5)
    got = evaluate_model(model, held, 5)
    for name, value in by_hand.items():
        assert got[name] == pytest.approx(value, rel=1e-9), name
    plain = top_k_metrics(held, factors, model.V, 5)
    assert plain["ndcg@5"] != got["ndcg@5"]  # the blend moved the lists


def test_the_counts_are_checked_when_read(blended):
    arrays = dict(np.load(blended / "model.npz"))
    np.savez(blended / "model.npz", **{**arrays, "rank_boost": arrays["rank_boost"][:-1]})
    meta = json.loads((blended / "model.json").read_text())
    meta["arrays"]["rank_boost"]["shape"] = [len(arrays["rank_boost"]) - 1]
    (blended / "model.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match="rank_boost must be"):
        load_model(blended)


def test_only_a_consensus_on_rated_items_releases_counts_to_rank_with():
    with pytest.raises(ValueError, match="rank_popularity"):
        FedMCADMMConfig(consensus="all", rank_popularity=1.0)
    assert FedMCADMMConfig(consensus="rated", rank_popularity=1.0).rank_popularity == 1.0


def test_a_private_model_ranking_by_rating_alone_says_its_lists_are_weak(
        monkeypatch, capsys, tmp_path, ratings_csv, invoke):
    """A private ratings model without the popularity blend (here the item-bias baseline)
    warns where its lists are used; one with it (FedMC-ADMM's DP defaults) does not."""
    lists = tmp_path / "lists.csv"
    for extra, warned in ((("-a", "item-bias"), True),
                          (("-a", "fedmc-admm", "--rounds", 2, "--rank", 2), False)):
        out = tmp_path / extra[1]
        code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv,
                              "--partition", "user", "--dp-epsilon", 8, "--rating-scale", "1,5",
                              *extra, "--out", out, "-q")
        assert code == 0, err
        assert (load_model(out).rank_boost is None) == warned
        for command in (("recommend", out, "--out", lists, "--overwrite"),
                        ("evaluate", out, "--ranking-k", 5, "-q")):
            code, _, err = invoke(monkeypatch, capsys, *command)
            assert code == 0, err
            assert ("lists are weak" in err) == warned, (command, err)
        assert ("lists_note" in json.loads((out / "evaluation.json").read_text())) == warned


def test_a_model_with_user_factors_keeps_its_rank_boost(blended, ratings_csv):
    """Saving the user factors (simulation studies) keeps the published boost too."""
    from fedmc.model import FactorModel

    model = load_model(blended)
    data = federated_data(DataSettings(ratings=ratings_csv, partition="user"))[0]
    U = np.zeros((data.n_users, model.V.shape[1]))
    info = type("Info", (), {"normalizer": model.normalizer, "value_range": model.value_range})
    kept = FactorModel.of(model.algorithm, model.config, {"V": model.V,
                                                          "rank_boost": model.rank_boost},
                          info, model.item_ids, model.dataset, users=(U, data))
    np.testing.assert_array_equal(kept.rank_boost, model.rank_boost)
    assert kept.U is not None
