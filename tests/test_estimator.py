"""The scikit-learn conventions of the estimators: parameters in ``__init__`` only, explicit
signatures, ``get_params``/``set_params``, cloning, learned attributes ending in ``_``, and a
fitted model that keeps no ratings."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest
from sklearn.base import clone

from fedmc.algorithms.registry import algorithm_names
from fedmc.core.scale import Normalizer
from fedmc.estimators import FedMCADMM, estimator_class
from fedmc.privacy.accounting import UserDP


@pytest.mark.parametrize("name", algorithm_names())
def test_signature_lists_every_parameter_explicitly(name):
    cls = estimator_class(name)
    params = inspect.signature(cls).parameters
    assert set(params) == set(cls().get_params())
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())
    assert "random_state" in params and "eval_every" in params
    for field, info in cls.Config.model_fields.items():
        assert params[field].default == info.default


@pytest.mark.parametrize("name", algorithm_names())
def test_clone_gives_equal_parameters_and_init_stores_only(name):
    cls = estimator_class(name)
    est = cls(random_state=7)
    copy = clone(est)
    assert copy is not est and copy.get_params() == est.get_params()
    assert not [k for k in vars(est) if k.endswith("_")]  # nothing learned before fit


def test_set_params_and_unknown_names():
    est = FedMCADMM().set_params(rank=3, rounds=2)
    assert est.rank == 3 and est.rounds == 2
    assert repr(est) == "FedMCADMM(rank=3, rounds=2)"
    with pytest.raises(TypeError, match="unknown parameter"):
        FedMCADMM(rnk=3)
    with pytest.raises(ValueError, match="no parameter"):
        est.set_params(rnk=3)


def test_bad_values_fail_at_fit_not_init(tiny_federated):
    data = tiny_federated()[0]
    est = FedMCADMM(beta=-1.0)
    with pytest.raises(ValueError, match="beta"):
        est.fit(data)


def test_fitted_model_keeps_factors_not_ratings(tiny_federated):
    data = tiny_federated()[0]
    est = FedMCADMM(rank=2, rounds=3).fit(data)
    for value in vars(est).values():
        assert value is not data and value is not data.train
    arrays = [v for v in vars(est).values() if isinstance(v, np.ndarray)]
    assert not any(np.shares_memory(a, data.train.values) for a in arrays)
    pred = est.predict_indices([0, 1], [3, 4])
    assert pred.shape == (2,) and np.all(np.isfinite(pred))


def test_a_private_estimator_runs_on_the_datas_normalizer(tiny_federated):
    """The estimator's run is described with the data's normalizer: a private fit on data
    with a public one (here none) trains, on data with a fitted one it is refused (that
    normalizer would be published unaccounted)."""
    data = tiny_federated(m=12, n=9, p=12)[0]
    dp = UserDP(clip=1.0, noise=1.0)
    est = FedMCADMM(rank=2, rounds=2, dp=dp).fit(data)
    assert est.privacy_["private"]
    fitted = dataclasses.replace(data, normalizer=Normalizer("zscore", 0.5, 2.0))
    with pytest.raises(ValueError, match="normalize=zscore"):
        FedMCADMM(rank=2, rounds=2, dp=dp).fit(fitted)
