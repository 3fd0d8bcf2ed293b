"""The model conformance suite: every factor algorithm of the registry (each whose models fold
in a new user) runs fit -> publish -> save -> load -> predict -> fold-in -> recommend, with the
same checks (as implicit's shared test mixin runs against every model)."""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pytest

from fedmc.algorithms.registry import fold_in_algorithms
from fedmc.errors import DataError
from fedmc.estimators import estimator_class
from fedmc.model import FactorModel, load_model
from fedmc.testing import RAW_ITEMS

SMALL = {"als": {"sweeps": 3}, "rfrec": {"rounds": 4}, "rfrecf": {"rounds": 4},
         "item-bias": {"rounds": 1}}
INTERACTIONS_ONLY = {"ease"}  # fits no ratings: its model's round trip is in test_ease.py
CASES = [(name, {}) for name in fold_in_algorithms() if name not in INTERACTIONS_ONLY] + [
    ("fedmc-admm", {"consensus": "rated"})]


def _id(case) -> str:
    name, params = case
    return "-".join([name, *(f"{k}={v}" for k, v in params.items())])


@pytest.fixture(scope="module", params=CASES, ids=_id)
def fitted(request, raw_data):
    name, params = request.param
    data = raw_data()
    cls = estimator_class(name)
    run = {"rounds": 4, "active": 2} if "active" in cls.run_params else {}
    rank = {"rank": 3} if "rank" in cls.Config.model_fields else {}
    est = cls(**rank, **{**run, **SMALL.get(name, {}), **params}).fit(data)
    return est, data


def test_every_factor_algorithm_is_in_the_suite():
    assert {"fedmc-admm", "fedmavg", "fedmavg-poster", "rfrec", "rfrecf", "als",
            "item-bias"} <= {name for name, _ in CASES}


@pytest.mark.parametrize("users", [False, True], ids=["published", "with-user-factors"])
def test_save_load_predict_equals_the_in_memory_model(tmp_path, fitted, users):
    est, data = fitted
    model = FactorModel.from_estimator(est, data if users else None)
    model.save(tmp_path)
    loaded = load_model(tmp_path)
    assert loaded.algorithm == est.name and loaded.config == est.config_
    assert np.array_equal(loaded.V, est.V_) and np.array_equal(loaded.item_ids, RAW_ITEMS)
    assert loaded.has_user_factors == users
    if users:
        raw_u = data.user_ids[:3]
        for raw_i in (RAW_ITEMS[[0, 5, 29]], RAW_ITEMS[[29, 0, 1]]):
            dense_i = np.searchsorted(RAW_ITEMS, raw_i)
            got = loaded.predict(raw_u, raw_i)
            assert np.array_equal(got, model.predict(raw_u, raw_i))
            assert np.array_equal(got, est.predict_indices(data.user_index[:3], dense_i))
        a, b = loaded.recommend(raw_u[0]), model.recommend(raw_u[0])
        assert np.array_equal(a.items, b.items) and np.array_equal(a.ratings, b.ratings)
    me = loaded.fold_in(RAW_ITEMS[:4], [5, 4, 1, 2])
    assert np.array_equal(me.factor, model.fold_in(RAW_ITEMS[:4], [5, 4, 1, 2]).factor)
    with pytest.raises(DataError, match="no user factors") if not users else nullcontext():
        loaded.predict(data.user_ids[0], RAW_ITEMS[0])


def test_a_folded_in_user_fits_its_own_ratings(fitted):
    """The fold-in solves the user's own problem with V fixed: its loss on the user's ratings
    is no larger than that of the factor with nothing learned (zero, the fixed columns set)."""
    est, _ = fitted
    model = FactorModel.from_estimator(est)
    rng = np.random.default_rng(0)
    items = RAW_ITEMS[rng.choice(len(RAW_ITEMS), 12, replace=False)]
    ratings = rng.integers(1, 6, 12).astype(float)
    me = model.fold_in(items, ratings)
    assert me.factor.shape == (model.layout.width,) and np.all(np.isfinite(me.factor))
    zero = np.zeros((1, model.layout.width))
    model.layout.project_u(zero)
    fixed = ~model.layout.free_mask_u()
    assert np.array_equal(me.factor[fixed], zero[0, fixed]), "constraint sets applied"
    V = model.V[np.searchsorted(RAW_ITEMS, items)]
    z = model.normalizer.transform(ratings)
    assert np.sum((V @ me.factor - z) ** 2) <= np.sum((V @ zero[0] - z) ** 2) + 1e-9


def test_recommend_excludes_training_items_and_fold_in_ratings(fitted):
    est, data = fitted
    model = FactorModel.from_estimator(est, data)
    for t in range(data.n_users):
        rated = set(data.item_ids[data.train.indices[data.train.indptr[t]:
                                                     data.train.indptr[t + 1]]].tolist())
        top = model.recommend(data.user_ids[t], n=10)
        assert len(top) == min(10, 30 - len(rated)) and not rated & set(top.items.tolist())
        assert np.all(np.diff(top.ratings) <= 1e-12)
        everything = model.recommend(data.user_ids[t], n=30, exclude_rated=False)
        assert sorted(everything.items.tolist()) == RAW_ITEMS.tolist()
    me = model.fold_in(RAW_ITEMS[:25], np.full(25, 4.0))
    top = model.recommend(me, n=10)
    assert len(top) == 5 and set(top.items.tolist()) == set(RAW_ITEMS[25:].tolist())
    assert np.allclose(top.ratings, model.predict(me, top.items))
