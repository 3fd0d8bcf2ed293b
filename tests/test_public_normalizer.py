"""The public normalizer (a function of the rating scale alone) and the settings a DP budget
picks by default."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fedmc.algorithms.registry import (
    DP_OPTIONS,
    IMPLICIT,
    PAPER_OPTIONS,
    default_algorithm,
    dp_baseline,
    specs,
)
from fedmc.algorithms.spec import OUTSIDERS
from fedmc.cli.options import parse_params
from fedmc.core.scale import Normalizer
from fedmc.data.registry import rating_scale
from fedmc.errors import ConfigError, DataError
from fedmc.run.data import DataSettings, federated_data
from fedmc.run.options import RunOptions
from fedmc.run.settings import resolve


def test_the_public_normalizer_maps_the_scale_onto_minus_one_one():
    norm = Normalizer.public((1, 5))
    assert (norm.kind, norm.mean, norm.scale) == ("public", 3.0, 2.0)
    np.testing.assert_allclose(norm.transform([1, 3, 5]), [-1, 0, 1])
    np.testing.assert_allclose(norm.inverse(norm.transform([1.5, 4.0])), [1.5, 4.0])
    for bad in ((5, 1), (1, np.inf), ("a", 2)):
        with pytest.raises(ConfigError):
            Normalizer.public(bad)


def test_named_sets_declare_their_scale():
    assert rating_scale("ml-1m") == (1.0, 5.0) and rating_scale("ml-100k") == (1.0, 5.0)
    assert rating_scale("ml-20m") == (0.5, 5.0) and rating_scale("synthetic") == (1.0, 5.0)
    assert rating_scale("no-such-set") is None


def test_a_public_normalizer_reads_no_rating(ratings_csv):
    """Changing the ratings (one user more) changes neither the normalizer nor the rating
    range of a public run, and a file without a declared scale is refused."""
    with pytest.raises(ConfigError, match="rating_scale"):
        federated_data(DataSettings(ratings=ratings_csv, normalize="public", clients=4))
    settings = DataSettings(ratings=ratings_csv, normalize="public", rating_scale=(1, 5),
                            clients=4)
    data = federated_data(settings)[0]
    assert data.normalizer == Normalizer.public((1, 5)) and data.value_range == (1.0, 5.0)
    text = ratings_csv.read_text() + "999,1,5\n999,2,5\n"
    ratings_csv.write_text(text)
    other = federated_data(settings)[0]
    assert other.normalizer == data.normalizer and other.value_range == data.value_range
    zscore = federated_data(DataSettings(ratings=ratings_csv, clients=4))[0].normalizer
    assert zscore.mean != data.normalizer.mean


def test_ratings_outside_the_declared_scale_are_refused(ratings_csv):
    with pytest.raises(DataError, match=r"r\.csv:\d+: rating 5 lies outside the rating scale "
                                        r"\[1, 4\]"):
        federated_data(DataSettings(ratings=ratings_csv, normalize="public",
                                    rating_scale=(1, 4), clients=4))


def _options(**given):
    params = {k: given.pop(k) for k in ("beta",) if k in given}
    params.update(parse_params(given.pop("param", [])))
    return RunOptions(**given, params=params)


def test_dp_runs_default_to_the_public_normalizer_and_refuse_a_fitted_one(
        monkeypatch, capsys, tmp_path, ratings_csv, invoke):
    assert resolve(_options(dataset="ml-1m")).data.normalize == "zscore"  # unchanged without DP
    assert resolve(_options(dataset="ml-1m", dp_epsilon=2.0, dp_clip=1.0)
                   ).data.normalize == "public"
    assert resolve(_options(dataset="ml-1m", dp_epsilon=2.0, dp_clip=1.0, dp_reproducible=True)
                   ).data.normalize == "public"  # the same run but for where its noise comes from
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "--partition",
                          "user", "--dp-epsilon", 4, "--normalize", "zscore", "--out",
                          tmp_path / "o", "-q")
    assert code == 2 and "--normalize public" in err and len(err.strip().splitlines()) == 1
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "--partition",
                          "user", "--dp-epsilon", 4, "--out", tmp_path / "o", "-q")
    assert code == 2 and "--rating-scale" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("epsilon", [1.0, 3.0, 8.0, 100.0])  # below 1: the baseline (below)
@pytest.mark.parametrize("against", ["server", "outsiders"])
def test_a_dp_budget_alone_picks_its_tuned_settings(epsilon, against):
    """The settings tuned for the budget and the party it is promised to: against the server
    every client in every round (sampling buys nothing against who samples), against
    outsiders Poisson sampling, which the accountant amplifies."""
    tuned = specs()["fedmc-admm"].dp_variants["user" + ("" if against == "server" else
                                                         OUTSIDERS)]
    expected = tuned[max([b for b in tuned if b <= epsilon], default=min(tuned))]
    assert specs()["fedmc-admm"].dp_variant("user", epsilon, against=against) is expected
    settings = resolve(_options(dataset="ml-1m", partition="user", dp_epsilon=epsilon,
                                dp_against=against))
    params, schedule = settings.params, settings.schedule
    assert schedule.dp.clip == expected["dp_clip"] and schedule.dp.against == against
    assert schedule.dp.setup_scale == expected["dp_setup_scale"]
    assert schedule.rounds == expected["rounds"]
    if against == "server":  # and its lists blend the released rater counts in
        assert schedule.active is None and schedule.sampling == "uniform"
        assert params["rank_popularity"] == expected["rank_popularity"] > 0
    else:
        assert schedule.sampling == "bernoulli" and schedule.participation == 0.1
    assert params["offset"] == "item-bias" and params["offset_lam"] == expected["offset_lam"]
    assert {"dp_clip", "rounds", "offset_lam", "normalize"} <= set(settings.defaulted)


@pytest.mark.parametrize("epsilon", [0.5, 3.0, 8.0])
@pytest.mark.parametrize("algorithm", ["fedals", "item-bias"])
@pytest.mark.parametrize("implicit", [False, True])
def test_a_run_on_interactions_takes_the_settings_tuned_for_them(algorithm, implicit, epsilon):
    """``--implicit`` picks the partition's ``+implicit`` variants, ratings the plain ones."""
    tuned = specs()[algorithm].dp_variants["user" + IMPLICIT if implicit else "user"]
    expected = tuned[max([b for b in tuned if b <= epsilon], default=min(tuned))]
    assert specs()[algorithm].dp_variant("user", epsilon, implicit) is expected
    settings = resolve(_options(dataset="ml-1m", algorithm=algorithm, implicit=implicit,
                                dp_epsilon=epsilon))
    params, schedule = settings.params, settings.schedule
    assert schedule.dp.clip == expected["dp_clip"]
    assert schedule.rounds == expected.get("rounds", schedule.rounds)
    for name in expected.keys() & params.keys():
        assert params[name] == expected[name], name
    assert {"dp_clip", *(expected.keys() & params.keys())} <= set(settings.defaulted)


def test_dp_variants_name_real_settings_that_validate():
    tuned = [(entry, settings) for entry in specs().values()
             for by_budget in entry.dp_variants.values() for settings in by_budget.values()]
    few = [(entry, {**entry.dp_variants[key][budget], **f.settings})
           for entry in specs().values() for key, by_budget in entry.dp_few_users.items()
           for budget, f in by_budget.items()]  # a budget's settings for fewer users: its own
    assert tuned and few
    tuned += few
    for entry, settings in tuned:
        fields = entry.Config.model_fields
        assert all(k in fields or k in PAPER_OPTIONS or k in DP_OPTIONS
                   for k in settings), settings
        entry.Config(**{k: v for k, v in settings.items() if k in fields})


def test_a_population_smaller_than_a_budgets_takes_its_settings_for_fewer_users():
    entry = specs()["fedmc-admm"]
    assert entry.dp_few_users["user"]
    for epsilon, few in entry.dp_few_users["user"].items():
        expected = {**entry.dp_variants["user"][epsilon], **few.settings}
        counted: list[str] = []
        settings = resolve(_options(dataset="ml-1m", algorithm="fedmc-admm",
                                    dp_epsilon=epsilon),
                           lambda data, n=few.users - 1, c=counted: c.append(data.source) or n)
        assert counted == ["ml-1m"]  # counted once, though two choices read it
        assert settings.schedule.rounds == expected["rounds"]
        assert settings.schedule.dp.clip == expected["dp_clip"]
        assert settings.params["offset_lam"] == expected["offset_lam"]
        [note] = settings.notes
        assert f"fewer than {few.users:,} users" in note and f"have {few.users - 1:,}" in note
        assert all(f"{k}={v}" in note for k, v in few.settings.items())
        # as many users as the settings for fewer, or a population unknown: the budget's own
        for enrolment in (lambda data, n=few.users: n, None):
            settings = resolve(_options(dataset="ml-1m", algorithm="fedmc-admm",
                                        dp_epsilon=epsilon), enrolment)
            assert settings.notes == ()
            assert settings.schedule.rounds == entry.dp_variants["user"][epsilon]["rounds"]
        # the user's own settings win, and the note does not claim them
        settings = resolve(_options(dataset="ml-1m", algorithm="fedmc-admm", rounds=7,
                                    dp_epsilon=epsilon, param=["offset_lam=5"]),
                           lambda data, n=few.users - 1: n)
        assert settings.schedule.rounds == 7 and float(settings.params["offset_lam"]) == 5
        assert all("rounds=" not in n and "offset_lam=" not in n for n in settings.notes)
    # no budget: the population is not even counted
    resolve(_options(dataset="ml-1m", algorithm="fedmc-admm"), lambda data: pytest.fail("counted"))


def test_explicit_options_win_over_the_dp_defaults():
    settings = resolve(_options(
        dataset="ml-1m", partition="user", dp_epsilon=8.0, dp_clip=0.3, rounds=7, beta=0.9,
        param=["offset=none"]))
    params = settings.params
    assert settings.schedule.dp.clip == 0.3 and settings.schedule.rounds == 7
    assert params["beta"] == 0.9 and params["offset"] == "none"
    assert not {"dp_clip", "rounds", "beta", "offset"} & set(settings.defaulted)


def test_the_dp_defaults_are_listed_in_config_json(monkeypatch, capsys, tmp_path,
                                                   ratings_csv, invoke):
    code, _, err = invoke(monkeypatch, capsys, "run", "-a", "item-bias", "--ratings",
                          ratings_csv, "--rating-scale", "1,5", "--dp-epsilon", 2, "--out",
                          tmp_path / "o", "-q")
    assert code == 0, err
    config = json.loads((tmp_path / "o" / "config.json").read_text())
    tuned = specs()["item-bias"].dp_variant("user", 2.0)
    assert config["run"]["dp"]["clip"] == tuned["dp_clip"]
    assert config["params"]["lam_item"] == tuned["lam_item"]
    assert {"dp_clip", "lam_item", "partition", "rounds"} <= set(config["run"]["defaulted"])


def _least(algorithm, epsilon, implicit=False):
    return specs()[algorithm].dp_least_users_at("user", epsilon, implicit)


def test_too_few_users_for_the_budget_fit_the_dp_baseline_and_say_so():
    cases = [(implicit, e) for implicit in (False, True) for e in (0.5, 1.0, 2.0, 4.0, 8.0)
             if 0 < _least(default_algorithm("ratings", implicit), e, implicit) < math.inf]
    assert cases  # a default lists a finite least number of users at some budget
    for implicit, epsilon in cases:
        default = default_algorithm("ratings", implicit)
        baseline = dp_baseline("ratings", implicit)
        assert default != baseline
        few = int(_least(default, epsilon, implicit)) - 1
        counted: list[str] = []

        def enrolment(data, n=few, counted=counted):
            counted.append(data.source)
            return n

        settings = resolve(_options(dataset="ml-1m", dp_epsilon=epsilon, implicit=implicit),
                           enrolment)
        assert counted == ["ml-1m"]  # the number of users of the data named
        assert settings.algorithm == baseline and "algorithm" in settings.defaulted
        tuned = specs()[baseline].dp_variant("user", epsilon, implicit)
        assert settings.schedule.dp.clip == tuned["dp_clip"]
        [note] = settings.notes
        assert f"--algorithm {baseline}" in note and f"have {few:,}" in note
        assert f"--algorithm {default}" in note and f"--dp-epsilon {epsilon:g}" in note
        settings = resolve(_options(dataset="ml-1m", dp_epsilon=epsilon, implicit=implicit),
                           lambda data, n=few + 1: n)
        assert settings.algorithm == default and "DP baseline" not in " ".join(settings.notes)
        # only interactions' default is said (fedmc run --implicit names what it fits)
        assert [f"fitting {default}" in n for n in settings.notes
                if "settings for fewer" not in n] == ([True] if implicit else [])
        assert settings.schedule.dp.clip == specs()[default].dp_variant(
            "user", epsilon, implicit, lambda n=few + 1: n)["dp_clip"]


def test_where_no_population_measured_was_enough_the_baseline_is_fitted_for_any():
    default, baseline = default_algorithm("ratings", True), dp_baseline("ratings", True)
    never = [e for e in (0.5, 1.0, 2.0, 4.0, 8.0) if math.isinf(_least(default, e, True))]
    for epsilon in never:
        settings = resolve(_options(dataset="ml-1m", dp_epsilon=epsilon, implicit=True),
                           lambda data: 10**9)
        assert settings.algorithm == baseline
        assert "any number of users measured" in settings.notes[0]


def test_explicit_options_win_over_the_dp_baseline():
    default, baseline = default_algorithm("ratings"), dp_baseline("ratings")
    epsilon = min(e for e in (0.5, 1.0, 2.0, 4.0, 8.0) if _least(default, e) > 0)
    few = 10
    # a named algorithm is fitted whatever the population
    settings = resolve(_options(dataset="ml-1m", algorithm=default, dp_epsilon=epsilon),
                       lambda data: few)
    assert settings.algorithm == default and "DP baseline" not in " ".join(settings.notes)
    # no budget, no population: the population is not even counted
    settings = resolve(_options(dataset="ml-1m"), lambda data: pytest.fail("counted"))
    assert settings.algorithm == default
    # a setting of the default the baseline does not take: refused, naming it
    only_default = sorted(specs()[default].Config.model_fields.keys()
                          - specs()[baseline].Config.model_fields.keys())[0]
    with pytest.raises(ConfigError, match=f"^{only_default}=.*--algorithm {default}"):
        resolve(_options(dataset="ml-1m", dp_epsilon=epsilon, param=[f"{only_default}=1"]),
                lambda data: few)
    # a setting the baseline takes too: kept
    shared = sorted(specs()[default].Config.model_fields.keys()
                    & specs()[baseline].Config.model_fields.keys())[0]
    value = specs()[baseline].Config().model_dump()[shared]
    settings = resolve(_options(dataset="ml-1m", dp_epsilon=epsilon,
                                param=[f"{shared}={value}"]), lambda data: few)
    assert settings.algorithm == baseline and shared not in settings.defaulted


def test_fedmc_run_with_a_budget_alone_on_few_users_fits_the_baseline_and_says_so(
        monkeypatch, capsys, tmp_path, ratings_csv, invoke):
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv,
                          "--rating-scale", "1,5", "--dp-epsilon", 1, "--out", tmp_path / "o",
                          "-q")
    assert code == 0, err
    config = json.loads((tmp_path / "o" / "config.json").read_text())
    baseline = dp_baseline("ratings")
    assert config["algorithm"] == baseline and "algorithm" in config["run"]["defaulted"]
    [note] = config["run"]["notes"]
    assert note in err and f"have {config['data']['users']:,}" in note
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv,
                          "--rating-scale", "1,5", "--dp-epsilon", 1, "--gamma", 3, "--out",
                          tmp_path / "p", "-q")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--gamma 3" in err, err
    assert not (tmp_path / "p").exists()


def test_an_experiment_with_dp_publishes_no_fitted_normalizer(tmp_path):
    """Experiments resolve their options as ``fedmc run`` does: under user-level DP the
    normalizer is the public one unless named, and a fitted one is refused, there and
    wherever a spec is made (:class:`RunSpec` itself)."""
    from pydantic import ValidationError

    from fedmc.experiments.expand import PlannedRun, validate
    from fedmc.experiments.launch import run_one
    from fedmc.run.settings import resolve
    from fedmc.run.spec import RunSpec

    data = {"dataset": "synthetic", "partition": "user", "rounds": 2}
    dp = {**data, "dp_noise": 1.0, "dp_clip": 0.1}

    def planned(options, algorithm="fedmc-admm"):
        return PlannedRun("dp", algorithm, {}, options, {"method": "m", "dataset": "d"})

    assert resolve(planned(dp).run_options()).data.normalize == "public"
    assert resolve(planned(data).run_options()).data.normalize == "zscore"
    assert resolve(planned({**dp, "implicit": True}, "fedals").run_options()) \
        .data.normalize == "none"
    spec = resolve(planned(dp).run_options())
    for fitted in ("zscore", "center"):
        with pytest.raises(ConfigError, match=f"normalize={fitted} fits on the training"):
            validate([planned({**dp, "normalize": fitted})], "e")
        with pytest.raises(ValidationError, match=f"normalize={fitted} fits on the training"):
            RunSpec(**{**dict(spec), "data": spec.data.model_copy(update={"normalize": fitted})})
    assert run_one(planned(dp), tmp_path / "dp") is None
    config = json.loads((tmp_path / "dp" / "config.json").read_text())
    assert config["data"]["normalize"] == "public"
    assert config["data"]["normalizer"]["kind"] == "public"  # the scale's, no fitted mean
    assert "fits on the training ratings" in run_one(planned({**dp, "normalize": "zscore"}),
                                                     tmp_path / "z")


@pytest.mark.parametrize(("algorithm", "more", "same"), [
    ("fedals", {}, True), ("fedmc-admm", {}, False),
    ("fedmc-admm", {"sampling": "cyclic", "participation": 0.5}, True),
    ("fedmc-admm", {"dp_mechanism": "skellam"}, True)])
def test_a_budget_against_outsiders_says_what_the_server_gets(algorithm, more, same):
    """``--dp-against outsiders`` is said in the run's notes, with what it changes: nothing
    where every client takes part in every round (federated ALS's DP defaults) or no
    amplification is claimed (cyclic participation, the Skellam mechanism), a larger epsilon
    for the server where the rounds sample (FedMC-ADMM's settings against outsiders)."""
    notes = resolve(_options(dataset="ml-1m", algorithm=algorithm, partition="user",
                             dp_epsilon=8.0, dp_against="outsiders", **more)).notes
    said = [n for n in notes if "--dp-against outsiders" in n]
    assert len(said) == 1 and ("gets the same epsilon" in said[0]) == same
    assert ("gets a larger epsilon" in said[0]) != same
