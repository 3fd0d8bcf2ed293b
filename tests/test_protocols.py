"""Each algorithm's paper protocol is ``fedmc run``'s default; the user's options win."""

from __future__ import annotations

import pytest

from fedmc.algorithms import algorithm_names, get_algorithm
from fedmc.algorithms.protocols import PROTOCOL_OPTIONS, PROTOCOLS, VARIANTS, apply_protocol
from fedmc.errors import ConfigError

UNSET = dict.fromkeys(PROTOCOL_OPTIONS)


def test_rfrec_defaults_to_one_user_per_client_all_clients_400_rounds():
    options, params, defaulted = apply_protocol("rfrec", UNSET, {})
    assert (options["partition"], options["active"], options["rounds"]) == ("user", "all", 400)
    assert params == {} and {"partition", "active", "rounds"} <= set(defaulted)


def test_the_users_options_win_and_are_not_listed_as_defaulted():
    options, _, defaulted = apply_protocol("rfrec", {**UNSET, "rounds": 7, "partition": "random"},
                                           {})
    assert options["rounds"] == 7 and options["partition"] == "random"
    assert "rounds" not in defaulted and "partition" not in defaulted


def test_given_clients_win_over_a_one_user_per_client_protocol():
    options, _, defaulted = apply_protocol("rfrec", {**UNSET, "clients": 5}, {})
    assert (options["clients"], options["partition"]) == (5, PROTOCOLS["default"]["partition"])
    assert "clients" not in defaulted and options["active"] == "all"
    with pytest.raises(ConfigError, match="--clients 5 conflicts with --partition user"):
        apply_protocol("fedmc-admm", {**UNSET, "clients": 5, "partition": "user"}, {})


def test_a_variant_applies_only_under_its_partition_and_only_to_unset_settings():
    options, params, defaulted = apply_protocol(
        "fedmc-admm", {**UNSET, "partition": "user"}, {"beta": 2.0})
    assert params["consensus"] == "rated" and params["beta"] == 2.0
    assert options["sampling"] == "bernoulli" and options["participation"] == 0.1
    assert "consensus" in defaulted and "beta" not in defaulted
    _, params, _ = apply_protocol("fedmc-admm", UNSET, {})
    assert "consensus" not in params


def test_a_given_active_sets_the_bernoulli_rate_of_the_cross_device_variant():
    options, _, defaulted = apply_protocol("fedmc-admm", {**UNSET, "partition": "user",
                                                          "active": "4802"}, {})
    assert options["sampling"] == "bernoulli" and options["participation"] is None
    assert options["active"] == "4802" and "participation" not in defaulted


def test_protocols_and_variants_name_real_algorithms_and_parameters():
    names = set(algorithm_names())
    assert set(PROTOCOLS) - {"default"} <= names
    for (algorithm, _), settings in VARIANTS.items():
        fields = get_algorithm(algorithm).Config.model_fields
        assert all(k in fields or k in PROTOCOL_OPTIONS for k in settings), settings
