"""The sharded simulation (:mod:`fedmc.sim.sharded`): shards of consecutive clients that sum
their own uploads, in this process or as Ray actors (``--backend ray``). Every algorithm's
conformance under two in-process shards is in ``tests/test_conformance.py`` (the default
drivers of :func:`fedmc.testing.assert_drivers_agree`); its Ray actors there too (slow)."""

from __future__ import annotations

import csv
import json
import sys
import types
from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedmc.algorithms.fedmc_admm import PAPER as FEDMC_ADMM
from fedmc.data.boolean import BooleanFederatedData
from fedmc.errors import ConfigError
from fedmc.federation.loop import Rounds
from fedmc.federation.sampling import make_sampler
from fedmc.sim.ray_shards import RayActors
from fedmc.sim.sharded import ShardedClients, shard_bounds
from fedmc.testing import assert_drivers_agree, tiny_federated


@settings(max_examples=40, deadline=None)
@given(clients=st.integers(1, 30), shards=st.integers(1, 8), seed=st.integers(0, 10))
def test_shards_cover_every_client_once_none_empty(clients, shards, seed):
    data = tiny_federated(m=max(clients, 2) * 2, n=6, p=clients, density=0.4, seed=seed)[0]
    bounds = shard_bounds(data, shards)
    assert bounds[0] == 0 and bounds[-1] == data.n_clients
    assert np.all(np.diff(bounds) > 0) and len(bounds) - 1 == min(shards, data.n_clients)


def test_shards_hold_about_equal_ratings():
    data = tiny_federated(m=400, n=30, p=100, density=0.3, seed=2)[0]
    bounds = shard_bounds(data, 4)
    held = np.diff(data.train.indptr[data.client_ptr[bounds]])
    most = np.diff(data.train.indptr[data.client_ptr]).max()  # one client cannot be split
    assert held.max() - held.min() <= 2 * most


def test_a_range_of_clients_is_their_shards_together():
    data = tiny_federated(m=30, n=8, p=6, density=0.5, seed=1)[0]
    part = data.clients_shard(2, 5)
    ones = [data.client_shard(c) for c in (2, 3, 4)]
    assert part.n_clients == 3
    np.testing.assert_array_equal(part.train.values,
                                  np.concatenate([s.train.values for s in ones]))
    np.testing.assert_array_equal(part.test.indices,
                                  np.concatenate([s.test.indices for s in ones]))
    np.testing.assert_array_equal(np.diff(part.client_ptr), [s.n_users for s in ones])
    A = (np.random.default_rng(0).random((23, 12)) < 0.3).astype(np.uint8)
    boolean = BooleanFederatedData.build(A, 5, seed=1)
    rows = boolean.clients_shard(1, 4)
    assert (rows.A != boolean.A[boolean.client_ptr[1]:boolean.client_ptr[4]]).nnz == 0


def test_three_shards_equal_the_batched_run():
    """More shards than the conformance suite's two, one user per client, DP-free."""
    data = tiny_federated(m=24, n=9, p=24, density=0.4, seed=3)[0]
    cfg = FEDMC_ADMM.Config(rank=2, inner=3)
    assert_drivers_agree(FEDMC_ADMM, cfg, data,
                         rounds=Rounds(make_sampler(data.n_clients, 6), 5),
                         drivers=("batched", partial(ShardedClients, shards=3)))


def test_the_ray_backend_options(invoke, monkeypatch, capsys, tmp_path, ratings_csv):
    """``--workers`` and ``--ray-address`` without ``--backend ray``, an algorithm that trains
    in one process and a missing Ray are each one line, exit 2, nothing written."""
    cases = [
        (["--workers", "2"], "--workers 2 places the clients in Ray's workers: give "
                             "--backend ray"),
        (["--ray-address", "auto"], "--ray-address auto places the clients"),
        (["--backend", "ray", "--workers", "0"], "--workers 0: the clients need at least one "
                                                 "shard"),
        (["--backend", "ray", "-a", "als"], "--backend ray shards a federation's clients; "
                                           "als trains in one process"),
    ]
    for command in ("local", "split"):  # a federation's clients live on their nodes
        code, _, err = invoke(monkeypatch, capsys, "federate", command, "--backend", "ray")
        assert code == 2 and "No such option" in err, err
    monkeypatch.setitem(sys.modules, "ray", None)  # as where Ray is not installed
    cases.append((["--backend", "ray"], "--backend ray needs Ray: pip install 'fedmc[ray]'"))
    for args, message in cases:
        code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "--clients",
                              "4", "--rounds", "1", *args, "--out", tmp_path / "x", "-q")
        assert code == 2 and message in err, (args, err)
        assert len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_a_run_on_ray_equals_the_batched_run(invoke, monkeypatch, capsys, tmp_path,
                                             ratings_csv):
    """``fedmc run --backend ray --workers 2``: Ray started on this machine, the history of
    the batched run to 1e-10, the backend in config.json."""
    pytest.importorskip("ray")
    runs = {}
    for name, extra in (("batched", []), ("ray", ["--backend", "ray", "--workers", "2"])):
        code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv,
                              "--clients", "4", "--rounds", "4", *extra, "--out",
                              tmp_path / name, "-q")
        assert code == 0, err
        runs[name] = list(csv.DictReader((tmp_path / name / "history.csv").open()))
    assert len(runs["ray"]) == len(runs["batched"]) == 5
    for one, two in zip(runs["batched"], runs["ray"], strict=True):
        for key in one.keys() - {"seconds"}:
            assert float(two[key]) == pytest.approx(float(one[key]), rel=1e-10, abs=1e-12), key
    config = json.loads((tmp_path / "ray" / "config.json").read_text())
    assert config["run"]["backend"] == {"kind": "ray", "workers": 2, "address": None}
    assert "backend" not in json.loads((tmp_path / "batched" / "config.json").read_text())["run"]


def test_a_ray_with_fewer_cpus_than_workers_is_refused(monkeypatch):
    """Each actor takes one CPU: on a Ray offering fewer than ``--workers`` the actors would
    wait forever, so it is one line instead."""
    fake = types.SimpleNamespace(is_initialized=lambda: True,
                                 cluster_resources=lambda: {"CPU": 2.0})
    monkeypatch.setitem(sys.modules, "ray", fake)
    with pytest.raises(ConfigError, match=r"^--workers 3: the cluster at --ray-address auto "
                                          r"offers 2 CPUs, and each shard takes one$"):
        RayActors("auto", 3)
    with pytest.raises(ConfigError, match="^--workers 3: this Ray offers 2 CPUs"):
        RayActors(None, 3)
