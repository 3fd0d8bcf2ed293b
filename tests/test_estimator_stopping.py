"""Early stopping from Python: an estimator's ``early_stopping`` does what ``fedmc run
--early-stopping`` does (the same best round, the same published model, with and without the
refit), and the cut put back is the data loaded without a cut."""

from __future__ import annotations

import numpy as np
import pytest

from fedmc import EarlyStopping, FedMCADMM, load_federated
from fedmc.errors import ConfigError
from fedmc.run.data import federated_data
from fedmc.run.data_settings import DataSettings
from fedmc.run.options import RunOptions
from fedmc.run.runner import execute
from fedmc.run.settings import resolve

PARAMS = {"rank": 6, "lam": 0.1, "beta": 0.5}


@pytest.fixture(scope="module")
def learnable(low_rank_ratings, tmp_path_factory):
    """A low-rank ratings file a model learns, then overfits, and how it is loaded."""
    path = low_rank_ratings(tmp_path_factory.mktemp("learnable"))
    return {"ratings": path, "columns": ("user_id", "item_id", "stars"), "clients": 5,
            "validation_fraction": 0.2, "seed": 0}


@pytest.mark.parametrize("refit", [False, True])
def test_the_estimator_stops_as_fedmc_run_does(learnable, refit):
    run = execute(resolve(RunOptions(**learnable, params=PARAMS, rounds=40, active=3,
                                     early_stopping=True, patience=10, refit=refit)))
    est = FedMCADMM(**PARAMS, rounds=40, active=3, random_state=0,
                    early_stopping=EarlyStopping(patience=10, refit=refit))
    est.fit(load_federated(**learnable))
    report = run.summary["early_stopping"]
    assert est.stopped_ == report and 0 < report["round"] < report["stopped_at"] < 40
    np.testing.assert_allclose(est.V_, run.trained.model["V"], rtol=0, atol=1e-12)
    if refit:
        assert report["refit_rounds"] == report["round"] == est.history_.rows[-1]["round"]
        assert est.validation_history_.rows[-1]["round"] == report["stopped_at"]
        assert "validation_rmse" not in est.history_.rows[-1]
    else:
        assert not hasattr(est, "validation_history_")


def test_early_stopping_needs_a_validation_cut(learnable):
    data = load_federated(**{**learnable, "validation_fraction": 0.0})
    with pytest.raises(ConfigError, match="validation_fraction"):
        FedMCADMM(**PARAMS, rounds=5, early_stopping={"patience": 2}).fit(data)


@pytest.mark.parametrize("normalize", ["zscore", "center", "none"])
def test_the_cut_put_back_is_the_data_loaded_without_it(learnable, normalize):
    settings = {**learnable, "normalize": normalize}
    plain, _ = federated_data(DataSettings(**{**settings, "validation_fraction": 0.0}))
    merged = federated_data(DataSettings(**settings))[0].every_training_rating()
    assert merged.normalizer.kind == plain.normalizer.kind == normalize
    assert merged.normalizer.mean == pytest.approx(plain.normalizer.mean, rel=1e-12)
    assert merged.normalizer.scale == pytest.approx(plain.normalizer.scale, rel=1e-12)
    assert merged.value_range == plain.value_range
    for part in ("train", "test"):
        a, b = getattr(merged, part), getattr(plain, part)
        np.testing.assert_array_equal(a.indptr, b.indptr)
        in_a, in_b = (np.lexsort((m.indices, m.rows())) for m in (a, b))  # each row's order
        np.testing.assert_array_equal(a.indices[in_a], b.indices[in_b])
        np.testing.assert_allclose(a.values[in_a], b.values[in_b], rtol=0, atol=1e-12)
