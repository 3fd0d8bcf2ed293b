"""Ranking metrics: the batched kernels against a plain per-user Python computation of
LensKit's definitions, and the sums adding up over clients."""

from __future__ import annotations

import numpy as np
import pytest

from fedmc.core.ranking import ranking_metrics, ranking_sums, top_n
from fedmc.data import FederatedData, Normalizer, Ratings
from fedmc.errors import ConfigError


def random_federation(m=30, n=25, density=0.3, test_share=0.3, seed=0, p=4):
    """Random ratings with some users without test items and one who rated every item."""
    rng = np.random.default_rng(seed)
    mask = rng.random((m, n)) < density
    mask[0] = True  # rated everything: no candidates left
    mask[1] = False
    mask[1, :2] = True  # two ratings only
    users, items = np.nonzero(mask)
    ratings = Ratings(users.astype(np.int32), items.astype(np.int32),
                      rng.integers(1, 6, len(users)).astype(float), m, n)
    is_test = rng.random(len(users)) < test_share
    is_test[users == 0] = False
    client = rng.integers(0, p, m)
    client[:p] = np.arange(p)
    return FederatedData.from_split(ratings, is_test, client, "zscore"), rng


def reference(U, V, train, test, k):
    """Per user in plain Python: LensKit's precision, recall, NDCG, AP, hit; coverage."""
    per_user, listed = [], set()
    for t in range(len(U)):
        seen = set(train.indices[train.indptr[t]:train.indptr[t + 1]].tolist())
        relevant = set(test.indices[test.indptr[t]:test.indptr[t + 1]].tolist())
        scores = [(-float(U[t] @ V[j]), j) for j in range(len(V)) if j not in seen]
        recs = [j for _, j in sorted(scores)][:k]  # best first, ties to the smaller index
        listed.update(recs)
        if not relevant or not recs:
            continue
        good = [j in relevant for j in recs]
        hits = sum(good)
        weight = [1 / max(1.0, np.log2(i)) for i in range(1, k + 1)]
        dcg = sum(w for w, g in zip(weight, good, strict=False) if g)
        ideal = sum(weight[: min(len(relevant), k)])
        ap = sum(sum(good[: i + 1]) / (i + 1) for i in range(len(recs)) if good[i])
        per_user.append([hits / len(recs), hits / min(len(relevant), k), dcg / ideal,
                         ap / min(len(relevant), len(recs)), float(hits > 0)])
    means = np.mean(per_user, axis=0)
    names = ("precision", "recall", "ndcg", "map", "hit_rate")
    out = {f"{name}@{k}": float(v) for name, v in zip(names, means, strict=True)}
    out[f"coverage@{k}"] = len(listed) / len(V)
    return out


@pytest.mark.parametrize("k", [1, 3, 10, 40])
@pytest.mark.parametrize("seed", [0, 1])
def test_metrics_match_a_per_user_python_computation(k, seed):
    data, rng = random_federation(seed=seed)
    U = rng.normal(size=(data.n_users, 4))
    V = rng.normal(size=(data.n_items, 4))
    got = ranking_metrics(ranking_sums(data, U, V, k), k)
    want = reference(U, V, data.train, data.test, k)
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == pytest.approx(want[key], rel=1e-12), key


def test_top_n_ranks_unseen_items_best_first_with_padding():
    rng = np.random.default_rng(3)
    U, V = rng.normal(size=(3, 5)), rng.normal(size=(8, 5))
    seen_ptr = np.array([0, 2, 2, 8])
    seen_idx = np.array([5, 1, 0, 1, 2, 3, 4, 5])  # row 2 leaves items 6 and 7
    items, scores = top_n(U, V, seen_ptr, seen_idx, 4)
    for t in range(3):
        allowed = np.setdiff1d(np.arange(8), seen_idx[seen_ptr[t]:seen_ptr[t + 1]])
        s = V[allowed] @ U[t]
        want = allowed[np.argsort(-s, kind="stable")][:4]
        assert items[t][: len(want)].tolist() == want.tolist()
        assert np.allclose(scores[t][: len(want)], V[want] @ U[t])
    assert items[2].tolist()[2:] == [-1, -1] and np.all(np.isneginf(scores[2][2:]))


def test_ties_go_to_the_smaller_item():
    V = np.ones((6, 2))
    items, _ = top_n(np.ones((1, 2)), V, np.array([0, 1]), np.array([2]), 3)
    assert items[0].tolist() == [0, 1, 3]


def test_sums_add_up_over_clients():
    """What each client computes on its own rows adds up to the whole federation's sums."""
    data, rng = random_federation(seed=2)
    U = rng.normal(size=(data.n_users, 3))
    V = rng.normal(size=(data.n_items, 3))
    whole = ranking_sums(data, U, V, 5)
    parts = [ranking_sums(data.client_shard(c), U[data.client_rows(c)], V, 5)
             for c in range(data.n_clients)]
    for key, value in whole.items():
        total = sum(part[key] for part in parts)
        assert np.allclose(total, value), key


def test_cut_off_must_be_positive():
    data, _ = random_federation()
    with pytest.raises(ConfigError, match="at least 1"):
        ranking_sums(data, np.zeros((data.n_users, 2)), np.zeros((data.n_items, 2)), 0)


def test_no_test_items_gives_nan_not_an_error():
    ratings = Ratings(np.array([0, 1], dtype=np.int32), np.array([0, 1], dtype=np.int32),
                      np.array([3.0, 4.0]), 2, 3)
    data = FederatedData.build(ratings, ratings.subset(np.zeros(2, dtype=bool)),
                               np.array([0, 1]), Normalizer())
    out = ranking_metrics(ranking_sums(data, np.ones((2, 1)), np.ones((3, 1)), 2), 2)
    assert np.isnan(out["ndcg@2"]) and out["coverage@2"] == 1.0
