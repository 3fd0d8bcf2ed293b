"""Each algorithm's run protocol and the cross-device variant: what a run uses when the user
leaves the protocol options out, and that the user's own values always win."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fedmc.algorithms import algorithm_names
from fedmc.algorithms.protocols import PROTOCOLS, VARIANTS, apply_protocol
from fedmc.errors import ConfigError
from fedmc.sim.sampling import clients_per_round, make_sampler
from tests.test_cli_run import invoke

NOTHING = {"partition": None, "clients": None, "active": None, "rounds": None}


def test_every_federated_algorithm_declares_a_protocol():
    assert set(algorithm_names()) - set(PROTOCOLS) == {"als"}


def test_rfrec_gets_its_papers_protocol():
    options, params, defaulted = apply_protocol("rfrec", NOTHING, {})
    assert options == {"partition": "user", "clients": 100, "active": None, "rounds": 400}
    assert params == {} and set(defaulted) == set(NOTHING)


def test_the_users_values_win_over_protocol_and_variant():
    given = {**NOTHING, "partition": "user", "active": 50, "rounds": 7}
    options, params, defaulted = apply_protocol("fedmc-admm", given, {"beta": 2.0})
    assert options["active"] == 50 and options["rounds"] == 7
    assert params["beta"] == 2.0 and params["consensus"] == "rated"
    assert "beta" not in defaulted and "active" not in defaulted and "consensus" in defaulted


def test_one_user_per_client_runs_fedmc_admm_cross_device_on_a_tenth_of_the_clients():
    options, params, _ = apply_protocol("fedmc-admm", {**NOTHING, "partition": "user"}, {})
    variant = VARIANTS[("fedmc-admm", "user")]
    assert options["active"] == 0.1 and params == dict(variant.params)
    # an algorithm without a variant takes every client when each holds one user
    options, params, _ = apply_protocol("fedmavg", {**NOTHING, "partition": "user"}, {})
    assert options["active"] is None and params == {}
    options, _, _ = apply_protocol("fedmc-admm", {**NOTHING, "partition": "random"}, {})
    assert options["active"] == 10


@pytest.mark.parametrize(("active", "count"), [(None, 40), (7, 7), (0.1, 4), (0.001, 1)])
def test_a_share_of_clients_per_round(active, count):
    assert clients_per_round(40, active) == count
    assert len(make_sampler(40, active).sample(np.random.default_rng(0))) == count


def test_a_share_outside_zero_one_is_refused():
    with pytest.raises(ConfigError, match=r"\(0, 1\)"):
        clients_per_round(40, 1.5)


@pytest.mark.parametrize(("text", "ok"), [("10%", True), ("all", True), ("12", True),
                                          ("0%", False), ("ten", False), ("150%", False)])
def test_active_on_the_command_line(monkeypatch, capsys, tmp_path, text, ok):
    out = tmp_path / "run"
    code, _, stderr = invoke(monkeypatch, capsys, "run", "--rounds", "1", "--active", text,
                             "-q", "--out", str(out))
    if ok:
        assert code == 0, stderr
        run = json.loads((out / "config.json").read_text())["run"]
        assert set(run["defaulted"]) == {"partition", "clients"}
    else:
        assert code == 2 and "--active" in stderr
