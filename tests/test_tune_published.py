"""A search scores each trial on its published model, every user folded in
(:mod:`fedmc.tune.published`): against a per-user loop written from the definition, and the
trial's model is that of the round the final run trains for."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fedmc.algorithms.spec import Choice
from fedmc.federation.settings import EarlyStopping
from fedmc.run.data import federated_data
from fedmc.run.options import RunOptions
from fedmc.run.runner import execute
from fedmc.run.settings import resolve
from fedmc.testing import fold_in_errors
from fedmc.tune.published import cut_held_out, evaluated_as, published_score, scores_published
from fedmc.tune.search import Search
from fedmc.tune.space import fold_in_space, search_space


@pytest.fixture(scope="module")
def trained(ratings_file, tmp_path_factory):
    path = ratings_file(tmp_path_factory.mktemp("pub"), users=60, items=20)
    options = RunOptions(ratings=path, columns=("user_id", "item_id", "stars"), clients=4,
                         rounds=4, validation_fraction=0.2, params={"rank": 3})
    run = resolve(options)
    loaded = federated_data(run.data)
    return options, loaded[0], execute(run, loaded=loaded).artifact


def _loop_rmse(model, data, fold_lam):
    """The cut's RMSE with every user folded in one at a time from its fitting ratings, at
    ``fold_lam`` (None: as trained)."""
    model = replace(model, params={**model.params, "fold_lam": fold_lam})
    inverse = data.normalizer.inverse  # the stars as typed (whole numbers, as read)
    fit, cut = (m._replace(values=np.round(inverse(m.values), 9))
                for m in (data.train, data.validation))
    return float(np.sqrt(np.mean(fold_in_errors(model, fit, cut) ** 2)))


def test_the_published_score_is_the_best_fold_in_of_a_per_user_loop(trained):
    _, data, model = trained
    held = cut_held_out(data, implicit=False)
    lams = (0.25, 1.0, 16.0)
    expected = {None: _loop_rmse(model, data, None)}  # as trained: the training's lam, first
    expected.update({lam: _loop_rmse(model, data, lam) for lam in lams})
    value, chosen = published_score(model, held, "validation_rmse", False,
                                    {"fold_lam": Choice(lams)})
    best = min(expected, key=expected.__getitem__)
    assert chosen == ({} if best is None else {"fold_lam": best})
    assert value == pytest.approx(expected[best], rel=1e-10)
    assert len(set(np.round(list(expected.values()), 8))) > 1  # the choice matters
    worse = max((lam for lam in lams), key=expected.__getitem__)
    value, chosen = published_score(model, held, "validation_rmse", False,
                                    {"fold_lam": Choice((worse,))})  # never below as trained
    assert value == pytest.approx(min(expected[worse], expected[None]), rel=1e-10)
    # no fold-in settings: the model's own
    value, chosen = published_score(model, held, "validation_rmse", False, {})
    assert chosen == {} and value == pytest.approx(expected[None], rel=1e-10)


def test_which_columns_and_algorithms_score_the_published_model():
    assert evaluated_as("validation_rmse") == "test_rmse"
    assert evaluated_as("validation_ndcg@10") == "ndcg@10"
    assert evaluated_as("validation_loss") is None
    assert scores_published("fedmc-admm", "validation_rmse")
    assert scores_published("fedals", "validation_ndcg@10")
    assert not scores_published("felb", "validation_rmse")  # no fold-in of a Boolean model


def test_a_trial_publishes_its_best_rounds_model_and_fold_in_settings_are_chosen(trained):
    options, _, _ = trained
    space = search_space("fedmc-admm", False, {}, {})
    fold_in = fold_in_space("fedmc-admm", {}, {})
    assert "fold_lam" in fold_in and "fold_lam" not in space  # chosen after training
    search = Search(options, space, 2, None, fold_in=fold_in)
    run = search.trial_spec({"lam": 1.0})
    stop = run.schedule.early_stopping
    assert stop is not None and not stop.refit and stop.patience >= run.schedule.rounds
    # the user's own early stopping is kept as typed (without its refit)
    mine = Search(options.model_copy(update={"early_stopping": True, "patience": 2}), space, 2,
                  None, fold_in=fold_in).trial_spec({"lam": 1.0}).schedule.early_stopping
    assert mine == EarlyStopping(patience=2, refit=False)
    # a fold-in range given becomes points, a fixed value leaves the choice
    assert len(fold_in_space("fedmc-admm", {"fold_lam": "0.1:10:log"}, {})["fold_lam"].values) > 2
    assert fold_in_space("fedmc-admm", {}, {"fold_lam": 2.0}) == {}
