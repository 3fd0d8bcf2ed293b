"""The saved model: save -> load -> predict equals the in-memory model, raw ids in and out,
recommendations without rated items, fold-in, and every bad id or file giving a one-line
DataError (never a crash)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedmc.errors import ConfigError, DataError
from fedmc.estimators import ALS, FedMCADMM
from fedmc.model import FactorModel, NewUser, load_model
from fedmc.testing import RAW_ITEMS, RAW_USERS


@pytest.fixture(scope="module")
def fitted(raw_data):
    data = raw_data()
    return {"fedmc-admm": FedMCADMM(rank=3, rounds=4, active=2).fit(data),
            "als": ALS(rank=3, sweeps=3).fit(data)}, data


def test_the_default_artifact_holds_no_user_data(tmp_path, fitted):
    models, _ = fitted
    FactorModel.from_estimator(models["fedmc-admm"]).save(tmp_path)
    with np.load(tmp_path / "model.npz", allow_pickle=False) as archive:
        assert sorted(archive.files) == ["V", "item_ids"]
    meta = json.loads((tmp_path / "model.json").read_text())
    assert meta["user_factors"] is False and meta["fedmc_version"]
    assert meta["layout"] == {"rank": 3, "biases": True, "width": 5, "item_item": False,
                              "item_bias_column": 4}


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda m: m.predict([100], [5]), "unknown item id 5"),
        (lambda m: m.predict([-1], [1000]), "unknown user id -1"),
        (lambda m: m.predict([10**30], [1000]), "unknown user id"),
        (lambda m: m.predict([100.5], [1000]), "not an integer"),
        (lambda m: m.predict(["abc"], [1000]), "not an integer"),
        (lambda m: m.predict([100, 107], [1000, 1003, 1006]), "2 users but 3 items"),
        (lambda m: m.recommend(1), "unknown user id 1"),
        (lambda m: m.recommend(True), "not an integer"),
        (lambda m: m.recommend([100, 107]), "one user"),
        (lambda m: m.fold_in([1000, 1000], [3, 4]), "more than once"),
        (lambda m: m.fold_in([1000], [3, 4]), "1 items but 2 ratings"),
        (lambda m: m.fold_in([1000], [np.nan]), "finite"),
        (lambda m: m.fold_in([1000], ["good"]), "numbers"),
        (lambda m: m.fold_in([[1000]], [3]), "flat sequence"),
    ],
)
def test_bad_ids_give_a_one_line_data_error(fitted, call, needle):
    models, data = fitted
    model = FactorModel.from_estimator(models["als"], data)
    with pytest.raises(DataError) as info:
        call(model)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_recommend_needs_a_positive_integer_n(fitted):
    model = FactorModel.from_estimator(fitted[0]["als"], fitted[1])
    for n in (0, -3, 2.5, True):
        with pytest.raises(ConfigError, match="positive integer"):
            model.recommend(100, n=n)


ids = st.one_of(
    st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.booleans(), st.none(), st.sampled_from(RAW_USERS.tolist()),
    st.sampled_from(RAW_ITEMS.tolist()),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(user=ids, items=st.lists(ids, min_size=1, max_size=4), n=st.integers(-2, 40))
def test_random_ids_never_crash(fitted, user, items, n):
    models, data = fitted
    model = FactorModel.from_estimator(models["fedmc-admm"], data)
    try:
        pred = model.predict(user, items)
        assert pred.shape == (len(items),) and np.all(np.isfinite(pred))
    except DataError as exc:
        assert "\n" not in str(exc)
    try:
        top = model.recommend(user, n=n)
        assert 0 < len(top) <= n and set(top.items.tolist()) <= set(RAW_ITEMS.tolist())
    except (DataError, ConfigError) as exc:
        assert "\n" not in str(exc)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(users=st.lists(st.one_of(st.integers(-(2**65), 2**65), st.floats(), st.booleans()),
                      min_size=1, max_size=3))
def test_estimator_predict_checks_dense_indices(fitted, users):
    est = fitted[0]["fedmc-admm"]
    try:
        pred = est.predict_indices(users, [0] * len(users))
        assert np.all(np.isfinite(pred))
    except DataError as exc:
        assert "\n" not in str(exc)


def test_estimator_predict_refuses_what_used_to_crash(fitted):
    est = fitted[0]["fedmc-admm"]
    with pytest.raises(DataError, match="item index 1000000 is out of range"):
        est.predict_indices([0], [10**6])
    with pytest.raises(DataError, match="user index -1 is out of range"):
        est.predict_indices([-1], [0])


def test_a_new_user_is_a_new_user(fitted):
    model = FactorModel.from_estimator(fitted[0]["fedmc-admm"])
    me = model.fold_in(["1000", 1003], [5, 1])  # integer text reads as the integer id
    assert isinstance(me, NewUser) and me.rated.tolist() == [0, 1]
    assert model.predict(me, 1006).shape == (1,)


# --------------------------------------------------------------------------- damaged files


def damage(folder, what):
    npz, meta_path = folder / "model.npz", folder / "model.json"
    meta = json.loads(meta_path.read_text())
    with np.load(npz, allow_pickle=False) as archive:
        arrays = dict(archive)
    if what == "no json":
        meta_path.unlink()
    elif what == "bad json":
        meta_path.write_text("{")
    elif what == "newer format":
        meta["format_version"] = 99
    elif what == "bad params":
        meta["params"]["beta"] = -1
    elif what == "unknown algorithm":
        meta["algorithm"] = "nope"
    elif what == "shape":
        arrays["V"] = arrays["V"][:, :-1]
    elif what == "pickled":
        np.savez(npz, V=arrays["V"], item_ids=np.array([object()] * len(arrays["V"])))
        return
    elif what == "nan":
        arrays["V"][0, 0] = np.nan
    elif what == "ones column":
        arrays["V"][:, 3] = 2.0
    elif what == "rated outside":
        arrays["rated_items"][0] = 10**6
    elif what == "normalizer":
        meta["normalizer"]["scale"] = 0
    if what in ("shape", "nan", "ones column", "rated outside"):
        np.savez(npz, **arrays)
        meta["arrays"]["V"]["shape"] = list(arrays["V"].shape)
    if meta_path.exists() and what != "bad json":
        meta_path.write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("what", "needle"),
    [("no json", "no model.json"), ("bad json", "cannot read"), ("newer format", "version 99"),
     ("bad params", "do not validate: beta"), ("unknown algorithm", "unknown algorithm"),
     ("shape", "columns"), ("pickled", "array"), ("nan", "finite"),
     ("ones column", "all ones"), ("rated outside", "outside"), ("normalizer", "scale")],
)
def test_damaged_files_fail_with_one_line(tmp_path, fitted, what, needle):
    FactorModel.from_estimator(fitted[0]["fedmc-admm"], fitted[1]).save(tmp_path)
    damage(tmp_path, what)
    with pytest.raises(DataError) as info:
        load_model(tmp_path)
    assert needle in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_missing_model(tmp_path):
    with pytest.raises(DataError, match="no model.npz"):
        load_model(tmp_path)
    with pytest.raises(DataError, match="no such"):
        load_model(tmp_path / "absent")


def test_hand_made_users_and_huge_lists_are_checked(fitted):
    model = FactorModel.from_estimator(fitted[0]["fedmc-admm"])
    with pytest.raises(DataError, match="must be 5 finite numbers"):
        model.recommend(NewUser(factor=np.ones(2), rated=np.zeros(0, dtype=np.int64),
                                model=model.fingerprint))
    with pytest.raises(DataError, match="must be 5 finite numbers"):
        model.predict(NewUser(factor=np.full(5, np.nan), rated=np.zeros(0),
                              model=model.fingerprint), [1000])
    me = model.fold_in([1000], [4])
    assert len(model.recommend(me, n=10**15)) == 29


def test_a_real_federation_publishes_the_same_artifact(tmp_path, fitted):
    """Flower's ServerApp saves the item model the way ``fedmc run`` does (no user data)."""
    pytest.importorskip("flwr")
    from types import SimpleNamespace

    from fedmc.flower.server_app import _save_model

    est, data = fitted[0]["fedmc-admm"], fitted[1]
    manifest = SimpleNamespace(item_ids=data.item_ids, normalizer=data.normalizer,
                               value_range=data.value_range, name=data.name)
    _save_model(SimpleNamespace(out=tmp_path), "fedmc-admm", est.config_, {"V": est.V_},
                manifest)
    loaded = load_model(tmp_path)
    me = loaded.fold_in(RAW_ITEMS[:3], [5, 3, 1])
    want = FactorModel.from_estimator(est)
    assert np.array_equal(loaded.recommend(me).items, want.recommend(me).items)
    assert not loaded.has_user_factors


def test_a_user_belongs_to_the_model_it_was_folded_in_on_and_ratings_to_its_range(fitted):
    """A newcomer's careless input: a rating of 17 for a 1-5 model, and a user folded in on
    one model asked of another, are refused (not predicted at the clip)."""
    model = FactorModel.from_estimator(fitted[0]["fedmc-admm"])
    other = FactorModel.from_estimator(fitted[0]["als"])
    lo, hi = model.value_range
    with pytest.raises(DataError, match="outside the model's rating range"):
        model.fold_in([1000], [hi + 12])
    me = model.fold_in([1000], [hi])
    with pytest.raises(DataError, match="folded in on another model"):
        other.recommend(me)
    with pytest.raises(DataError, match="folded in on another model"):
        other.predict(me, [1000])
    assert len(model.recommend(me, n=3)) == 3
