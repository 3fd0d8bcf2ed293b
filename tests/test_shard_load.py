"""Data loaded by the shards of a population (:mod:`fedmc.run.shard_load`): each shard generates
its own users' ratings, and what it holds equals the whole set's cut for its clients."""

from __future__ import annotations

import csv
import json
from itertools import pairwise

import numpy as np
import pytest

from fedmc.data import shard_source
from fedmc.data.federated import FederatedData
from fedmc.data.synthetic import checked_plan, synthetic_ratings
from fedmc.run.data import federated_data
from fedmc.run.data_settings import DataSettings
from fedmc.run.shard_load import load_on_shards, loads_on_shards
from fedmc.run.spec import RunSpec
from fedmc.run.train import train
from fedmc.sim.sharded import InProcess, ShardedPopulation, shard_bounds


def test_some_users_ratings_are_their_rows_of_the_whole_set():
    kwargs = {"n_users": 600, "n_items": 300, "n_ratings": 30_000, "seed": 11}
    whole = synthetic_ratings(**kwargs)
    users = np.sort(np.random.default_rng(0).choice(600, 97, replace=False))
    some = checked_plan(**kwargs).ratings(users)
    rows = np.isin(whole.users, users)
    np.testing.assert_array_equal(some.items, whole.items[rows])
    np.testing.assert_array_equal(some.values, whole.values[rows])
    np.testing.assert_array_equal(users[some.users], whole.users[rows])
    np.testing.assert_array_equal(some.user_ids, whole.user_ids[users])
    assert some.n_users == 97 and some.n_items == 300


def _same_layout(part: FederatedData, cut: FederatedData) -> None:
    for name in ("client_ptr", "user_index", "user_ids", "item_ids"):
        np.testing.assert_array_equal(getattr(part, name), getattr(cut, name), err_msg=name)
    for name in ("train", "test", "validation"):
        a, b = getattr(part, name), getattr(cut, name)
        assert (a is None) == (b is None), name
        if a is None:
            continue
        np.testing.assert_array_equal(a.indptr, b.indptr, err_msg=name)
        np.testing.assert_array_equal(a.indices, b.indices, err_msg=name)
        np.testing.assert_allclose(a.values, b.values, rtol=1e-13, atol=1e-13, err_msg=name)
    assert part.value_range == cut.value_range and part.name == cut.name


@pytest.mark.parametrize("settings", [
    DataSettings(),                                   # 100 clients of random users, zscore
    DataSettings(partition="user", split="user", normalize="center"),
    DataSettings(clients=7, partition="powerlaw", validation_fraction=0.1, seed=3),
    DataSettings(partition="contiguous", clients=40, rating_scale=(1.0, 5.0)),
])
def test_each_shard_holds_the_whole_sets_cut_for_its_clients(settings, monkeypatch):
    """Every shard's data, generated and split in the shard in blocks of clients (small
    ones here: many blocks), equal the driver's cut of the whole set
    (:meth:`FederatedData.clients_shard`); the outline equals the whole set's facts."""
    monkeypatch.setattr(shard_source, "CHUNK", 5_000)
    whole, _ = federated_data(settings)
    population = ShardedPopulation(InProcess(), 3)
    data = load_on_shards(RunSpec(data=settings), population)
    assert len(data.hosts) == 3
    for host, (a, b) in zip(data.hosts, pairwise(data.bounds), strict=True):
        _same_layout(host.data, whole.clients_shard(int(a), int(b)))
    for name in ("client_ptr", "user_index", "user_ids", "item_ids"):
        np.testing.assert_array_equal(getattr(data, name), getattr(whole, name))
    assert (data.n_train_ratings, data.n_test_ratings) == (whole.train.nnz, whole.test.nnz)
    assert data.normalizer.kind == whole.normalizer.kind
    assert data.normalizer.mean == pytest.approx(whole.normalizer.mean, rel=1e-14)
    assert data.normalizer.scale == pytest.approx(whole.normalizer.scale, rel=1e-14)
    assert data.federation_info().n_clients == whole.n_clients
    # the shards the driver would cut from the whole set: about equal training ratings
    np.testing.assert_array_equal(data.bounds, shard_bounds(whole, 3))


def test_a_run_on_self_loaded_shards_equals_the_batched_run():
    run = RunSpec(params={"rank": 4}, data=DataSettings(partition="user"),
                  schedule={"rounds": 4, "active": 300})
    assert loads_on_shards(run)
    population = ShardedPopulation(InProcess(), 2)
    sharded = train(run, load_on_shards(run, population), population=population)
    batched = train(run, federated_data(run.data)[0])
    assert len(sharded.history.rows) == len(batched.history.rows) == 5
    for one, two in zip(batched.history.rows, sharded.history.rows, strict=True):
        for key in one.keys() - {"seconds"}:
            assert two[key] == pytest.approx(one[key], rel=1e-10, abs=1e-12), key
    np.testing.assert_allclose(sharded.model["V"], batched.model["V"], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(sharded.user_factors, batched.user_factors, rtol=1e-9,
                               atol=1e-12)


@pytest.mark.parametrize("change", [
    {"data": DataSettings(dataset="ml-100k")}, {"data": DataSettings(implicit=True)},
    {"data": DataSettings(validation_fraction=0.1)}, {"ranking_k": 10},
    {"save_user_factors": True}])
def test_what_the_driver_loads_itself(change):
    """Files, interactions, a validation cut, ranking metrics and saved user factors read
    the ratings in the driver."""
    assert not loads_on_shards(RunSpec(**change))


@pytest.mark.slow
def test_a_ray_run_whose_actors_generate_their_users_equals_the_batched_run(
        invoke, monkeypatch, capsys, tmp_path):
    """``fedmc run --backend ray`` on a synthetic set: the actors generate their own users'
    ratings; the history is the batched run's to 1e-10 and config.json's facts of the data
    are the same."""
    pytest.importorskip("ray")
    runs, configs = {}, {}
    for name, extra in (("batched", []), ("ray", ["--backend", "ray", "--workers", "2"])):
        code, _, err = invoke(monkeypatch, capsys, "run", "--partition", "user", "--rounds",
                              "3", *extra, "--out", tmp_path / name, "-q")
        assert code == 0, err
        runs[name] = list(csv.DictReader((tmp_path / name / "history.csv").open()))
        configs[name] = json.loads((tmp_path / name / "config.json").read_text())["data"]
    for one, two in zip(runs["batched"], runs["ray"], strict=True):
        for key in one.keys() - {"seconds"}:
            assert float(two[key]) == pytest.approx(float(one[key]), rel=1e-10, abs=1e-12), key
    one, two = configs["batched"].pop("normalizer"), configs["ray"].pop("normalizer")
    assert one["kind"] == two["kind"]
    assert (two["mean"], two["scale"]) == pytest.approx((one["mean"], one["scale"]), rel=1e-13)
    assert configs["ray"] == configs["batched"]
