"""A split given as two files: one id vocabulary, test ratings of unseen users and items
dropped and counted, the same layout as a split made here."""

from __future__ import annotations

import numpy as np
import pytest

from fedmc.api import load_federated
from fedmc.data.loaders import load_ratings_file
from fedmc.data.split import fixed_split
from fedmc.errors import ConfigError
from fedmc.run.data import DataSettings, federated_data

TRAIN = "user,item,rating\n10,a,4\n10,b,3\n20,a,5\n20,c,1\n30,b,2\n30,c,4\n"
# user 40 and item d are unseen in training; (10, c) and (30, a) are predictable
TEST = "user,item,rating\n10,c,2\n30,a,5\n40,a,3\n20,d,4\n40,d,1\n"


@pytest.fixture
def files(tmp_path):
    train, test = tmp_path / "train.csv", tmp_path / "test.csv"
    train.write_text(TRAIN)
    test.write_text(TEST)
    return train, test


def test_ids_share_the_training_vocabulary_and_unseen_test_ratings_are_dropped(files):
    train, test = (load_ratings_file(f) for f in files)
    ratings, is_test, dropped = fixed_split(train, test)
    assert dropped == {"test_dropped_unseen_user": 2, "test_dropped_unseen_item": 1}
    assert ratings.user_ids.tolist() == [10, 20, 30]
    assert ratings.item_ids.tolist() == ["a", "b", "c"]
    pairs = {(int(ratings.user_ids[u]), str(ratings.item_ids[i]), v)
             for u, i, v in zip(ratings.users[is_test], ratings.items[is_test],
                                ratings.values[is_test], strict=True)}
    assert pairs == {(10, "c", 2.0), (30, "a", 5.0)}
    assert np.count_nonzero(~is_test) == 6


def test_federated_data_from_two_files(files):
    train, test = files
    data, notes = federated_data(DataSettings(train=train, test=test, clients=2))
    assert data.train.nnz == 6 and data.test.nnz == 2 and notes["test_dropped_unseen_user"] == 2
    assert sorted(data.user_ids.tolist()) == [10, 20, 30]
    row = int(np.flatnonzero(data.user_ids == 10)[0])
    test_items = data.test.indices[data.test.indptr[row]:data.test.indptr[row + 1]]
    assert data.item_ids[test_items].tolist() == ["c"]
    with pytest.warns(UserWarning, match="dropped test ratings"):
        api = load_federated(train=train, test=test, clients=2)
    assert api.train.nnz == 6


@pytest.mark.parametrize(
    ("settings", "needle"),
    [({"train": "x"}, "together"), ({"test": "x"}, "together"),
     ({"train": "x", "test": "y", "dataset": "ml-1m"}, "not both")],
)
def test_train_and_test_go_together(settings, needle):
    with pytest.raises(ConfigError, match=needle):
        federated_data(DataSettings(**settings))
