"""A table in memory (a pandas DataFrame, any object of named columns, a dict of arrays) as
``load_federated``'s ratings: the same federated data as the file it was read from."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from fedmc import load_federated
from fedmc.errors import ConfigError, DataError


def _columns(path):
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return {name: [int(r[name]) for r in rows] for name in rows[0]}


class Table:
    """The least a table needs: ``columns`` and ``table[name]``."""

    def __init__(self, columns):
        self._data = columns
        self.columns = list(columns)

    def __getitem__(self, name):
        return self._data[name]


def _same(a, b):
    for name in ("indptr", "indices", "values"):
        for part in ("train", "test"):
            np.testing.assert_array_equal(getattr(getattr(a, part), name),
                                          getattr(getattr(b, part), name))
    np.testing.assert_array_equal(a.user_ids, b.user_ids)
    np.testing.assert_array_equal(a.item_ids, b.item_ids)
    np.testing.assert_array_equal(a.client_ptr, b.client_ptr)


@pytest.mark.parametrize("wrap", [dict, Table])
def test_a_table_gives_the_file_s_data(ratings_csv, wrap):
    from_file = load_federated(ratings=ratings_csv, clients=4, seed=3)
    table = wrap(_columns(ratings_csv))
    _same(load_federated(table, clients=4, seed=3, user="userId", item="movieId"), from_file)
    _same(load_federated(ratings=table, clients=4, seed=3, user="userId", item="movieId"),
          from_file)


def test_a_pandas_data_frame(ratings_csv):
    pd = pytest.importorskip("pandas")
    frame = pd.read_csv(ratings_csv).rename(columns={"userId": "user", "movieId": "item"})
    _same(load_federated(frame, clients=4), load_federated(ratings=ratings_csv, clients=4))


def test_interactions_without_a_rating_column(ratings_csv):
    columns = _columns(ratings_csv)
    del columns["rating"]
    data = load_federated(columns, clients=4, user="userId", item="movieId", rating="",
                          implicit=True)
    _same(data, load_federated(ratings=ratings_csv, clients=4, implicit=True))
    assert np.all(data.train.values == 1)


@pytest.mark.parametrize(("table", "settings", "words"), [
    ({"user": [1], "item": [2]}, {}, "no rating column 'rating'"),
    ({"u": [1], "item": [2], "rating": [3]}, {}, "no user column 'user' (its columns: u, item"),
    ({"user": [1, 1], "item": [2, 2], "rating": [3, 4]}, {}, "(row 1, row 2)"),
    ({"user": [1, None], "item": [2, 3], "rating": [3, 4]}, {}, "missing id (row 2)"),
    ({"user": [1.0, float("nan")], "item": [2, 3], "rating": [3, 4]}, {}, "missing id (row 2)"),
    ({"user": np.array([1, "a"], dtype=object), "item": [2, 3], "rating": [3, 4]}, {},
     "mixes types"),
    ({"user": [1, 2], "item": [2, 3], "rating": [3, float("nan")]}, {}, "row 2"),
    ({"user": [1, 2], "item": [2, 3], "rating": [3, "x"]}, {}, "not a number"),
    ({"user": [1, 2], "item": [2, 3], "rating": [3]}, {}, "differ in length"),
])
def test_bad_tables_are_refused_with_one_line(table, settings, words):
    with pytest.raises(DataError) as err:
        load_federated(table, clients=1, **settings)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_contradictions_are_refused(ratings_csv):
    table = {"user": [1, 2], "item": [1, 2], "rating": [3.0, 4.0]}
    for kwargs, words in (({"ratings": ratings_csv}, "two sources"),
                          ({"rating": ""}, "implicit=True"),
                          ({"normalize": "public"}, "rating_scale")):
        with pytest.raises(ConfigError, match=words):
            load_federated(table, clients=1, **kwargs)
    with pytest.raises(ConfigError, match="item= names a DataFrame's column"):
        load_federated(ratings=ratings_csv, clients=4, item="movieId")
