"""Felb's Boolean data in a real federation: the split files and the one-client shards."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")

from fedmc.algorithms.registry import spec  # noqa: E402
from fedmc.data.boolean import SYNTHETIC  # noqa: E402
from fedmc.deploy.split import client_files, write_split  # noqa: E402
from fedmc.errors import ConfigError, DataError  # noqa: E402
from fedmc.federation.loop import Rounds  # noqa: E402
from fedmc.federation.sampling import make_sampler  # noqa: E402
from fedmc.federation.settings import Schedule
from fedmc.flower.manifest import Manifest  # noqa: E402
from fedmc.flower.shard import load_boolean_shard  # noqa: E402
from fedmc.run.data import DataSettings, load_boolean_data  # noqa: E402
from fedmc.run.spec import RunSpec  # noqa: E402
from fedmc.sim import simulate  # noqa: E402
from fedmc.testing import assert_same_history  # noqa: E402

PARAMS = {"rank": 3}


def boolean_settings(clients: int = 3) -> DataSettings:
    return DataSettings(dataset=SYNTHETIC, rows=60, clients=clients, seed=1)


def test_boolean_split_files_rebuild_the_simulation_shards_bit_for_bit(tmp_path):
    settings = boolean_settings()
    write_split(settings, tmp_path / "split")
    manifest = Manifest.read(tmp_path / "split" / "manifest.json")
    data = load_boolean_data(settings)
    assert manifest.kind == "boolean" and manifest.n_clients == 3
    assert (manifest.n_users, manifest.n_items) == data.shape
    assert manifest.federation_info("boolean") == data.federation_info()
    for c in range(3):
        ones, signal = client_files(tmp_path / "split", c)
        shard, ref = load_boolean_shard(manifest, c, ones, signal), data.client_shard(c)
        np.testing.assert_array_equal(shard.client_ptr, ref.client_ptr)
        np.testing.assert_array_equal(shard.row_index, ref.row_index)
        for a, b in ((shard.A, ref.A), (shard.signal, ref.signal)):
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_array_equal(a.indptr, b.indptr)
            np.testing.assert_array_equal(a.indices, b.indices)
            np.testing.assert_array_equal(a.data, b.data)


def test_a_boolean_shard_with_a_column_outside_the_manifest_is_refused(tmp_path):
    write_split(boolean_settings(), tmp_path / "split")
    manifest = Manifest.read(tmp_path / "split" / "manifest.json")
    ones, _ = client_files(tmp_path / "split", 0)
    lines = ones.read_text().splitlines()
    lines[1] = f"{lines[1].split(',')[0]},{manifest.n_items}"
    ones.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match="outside"):
        load_boolean_shard(manifest, 0, ones, None)


def test_an_algorithm_for_the_other_kind_of_data_is_refused(tmp_path):
    write_split(boolean_settings(), tmp_path / "split")
    manifest = Manifest.read(tmp_path / "split" / "manifest.json")
    info = manifest.federation_info("boolean")
    assert (info.n_users, info.n_items) == (manifest.n_users, manifest.n_items)
    with pytest.raises(ConfigError, match="needs ratings data, the manifest holds boolean"):
        manifest.federation_info("ratings")


@pytest.mark.federation
@pytest.mark.parametrize("name", ["felb", "felb-mu"])
def test_three_felb_nodes_two_rounds_give_the_simulations_history(tmp_path, name, federated):
    schedule = Schedule(rounds=2, active=2, seed=0)
    settings, run = boolean_settings(), RunSpec(algorithm=name, schedule=schedule)
    data = load_boolean_data(settings)
    cfg = spec(name).Config(**PARAMS)
    sampler = make_sampler(data.n_clients, schedule.active, schedule.sampling,
                           participation=schedule.participation)
    expected = simulate(spec(name).algorithm_for(cfg), cfg, data,
                        rounds=Rounds(sampler, schedule.rounds), seed=schedule.seed).history
    history, out = federated(tmp_path, settings, run, PARAMS, timeout=60.0)
    assert_same_history(history, expected, rtol=1e-9, atol=1e-9)
    assert [row["lost"] for row in history.rows if "lost" in row] == []
    assert (out / "model.npz").exists()
