"""Each algorithm's paper settings are ``fedmc run``'s defaults; the user's options win."""

from __future__ import annotations

import pytest

from fedmc.algorithms.registry import CROSS_SILO, PAPER_OPTIONS, specs
from fedmc.errors import ConfigError
from fedmc.run.settings import apply_paper_settings

UNSET = dict.fromkeys(PAPER_OPTIONS)


def test_rfrec_defaults_to_one_user_per_client_all_clients_400_rounds():
    options, params, defaulted = apply_paper_settings("rfrec", UNSET, {})
    assert (options["partition"], options["active"], options["rounds"]) == ("user", "all", 400)
    assert params == {} and {"partition", "active", "rounds"} <= set(defaulted)


def test_the_users_options_win_and_are_not_listed_as_defaulted():
    options, _, defaulted = apply_paper_settings(
        "rfrec", {**UNSET, "rounds": 7, "partition": "random"}, {})
    assert options["rounds"] == 7 and options["partition"] == "random"
    assert "rounds" not in defaulted and "partition" not in defaulted


def test_given_clients_win_over_one_user_per_client_paper_settings():
    options, _, defaulted = apply_paper_settings("rfrec", {**UNSET, "clients": 5}, {})
    assert (options["clients"], options["partition"]) == (5, CROSS_SILO["partition"])
    assert "clients" not in defaulted and options["active"] == "all"
    with pytest.raises(ConfigError, match="clients=5 conflicts with partition='user'"):
        apply_paper_settings("fedmc-admm", {**UNSET, "clients": 5, "partition": "user"}, {})


def test_a_variant_applies_only_under_its_partition_and_only_to_unset_settings():
    options, params, defaulted = apply_paper_settings(
        "fedmc-admm", {**UNSET, "partition": "user"}, {"beta": 2.0})
    assert params["consensus"] == "rated" and params["beta"] == 2.0
    assert options["sampling"] == "bernoulli" and options["participation"] == 0.1
    assert "consensus" in defaulted and "beta" not in defaulted
    _, params, _ = apply_paper_settings("fedmc-admm", UNSET, {})
    assert "consensus" not in params


def test_a_given_active_sets_the_bernoulli_rate_of_the_cross_device_variant():
    options, _, defaulted = apply_paper_settings("fedmc-admm", {**UNSET, "partition": "user",
                                                          "active": "4802"}, {})
    assert options["sampling"] == "bernoulli" and options["participation"] is None
    assert options["active"] == "4802" and "participation" not in defaulted


def test_paper_settings_and_variants_name_real_options_and_parameters():
    for entry in specs().values():
        assert set(entry.paper_settings) <= set(PAPER_OPTIONS), entry.name
        fields = entry.Config.model_fields
        for settings in entry.variants.values():
            assert all(k in fields or k in PAPER_OPTIONS for k in settings), settings


def test_a_dp_budget_alone_takes_one_user_per_client_and_its_tuned_settings():
    options, params, defaulted = apply_paper_settings("fedmc-admm", {**UNSET, "dp_epsilon": 8},
                                                      {})
    assert options["partition"] == "user" and params["consensus"] == "rated"
    assert {"partition", "dp_clip", "consensus"} <= set(defaulted)
    for given in ({"clients": 8}, {"partition": "random"}, {"dp_unit": "client"}):
        options, _, _ = apply_paper_settings("fedmc-admm",
                                             {**UNSET, "dp_epsilon": 8, **given}, {})
        assert options["partition"] == "random", given  # what the user gave stands


@pytest.mark.parametrize(("given", "params", "exchanges"), [
    ({}, {}, True),
    ({"rounds": 20}, {}, True),  # a setting of the protocol given: the rest still applies
    ({"active": "all"}, {}, True),  # every client: no sample
    ({}, {"item_step": "exchanges", "rank": 8}, True),
    ({"participation": 0.2}, {}, False),  # a sample of the clients: the running sums' rounds
    ({"active": "50"}, {}, False),
    ({"sampling": "uniform"}, {}, False),
    ({"dropout": 0.1}, {}, False),
    ({}, {"item_step": "sums"}, False),  # one of its settings, another value
    ({"dp_epsilon": 8}, {}, False),  # a private run: the DP settings are its protocol
])
def test_interactions_take_fedals_exchanges_whole_or_not_at_all(given, params, exchanges):
    """On interactions, one user per client: federated ALS's item step as exchanges with
    every client, 60 of them, unless the user chose a sample of the clients, the sums, or DP;
    then none of that protocol, and the one-user variant's 10% rounds."""
    options, out, defaulted = apply_paper_settings(
        "fedals", {**UNSET, "implicit": True, "dropout": 0.0, **given}, params)
    if exchanges:
        assert out["item_step"] == "exchanges" and options["participation"] is None
        assert options["sampling"] == "uniform"
        assert options["rounds"] == given.get("rounds", 60)
        assert ("item_step" in defaulted) == ("item_step" not in params)
    else:
        assert out.get("item_step", "sums") == "sums"
        assert options["rounds"] != 60
    _, out, _ = apply_paper_settings("fedals", {**UNSET, "dropout": 0.0}, {})  # ratings
    assert "item_step" not in out
