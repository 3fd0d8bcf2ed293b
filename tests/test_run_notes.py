"""What a run says before and after it trains: the algorithm chosen for interactions, a long
run announced from its cost bound, one exchange (rounds 0) where the protocol is one, and a
summary in words and units."""

from __future__ import annotations

import json
import warnings

import pytest

from fedmc.cli.display import byte_size, stopping_text
from fedmc.errors import RunWarning
from fedmc.federation.settings import Schedule
from fedmc.run.cost_note import announce_cost
from fedmc.run.options import RunOptions
from fedmc.run.settings import resolve


class _Rank:
    def __init__(self, rank):
        self.rank = rank


def _notes(**options) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        announce_cost(**options)
    return [str(w.message) for w in caught if issubclass(w.category, RunWarning)]


def test_a_long_rank_is_announced_and_a_default_one_is_not():
    # the synthetic set's 160,000 training ratings, 10 of 100 clients a round, 100 rounds
    long = _notes(config=_Rank(1400), schedule=Schedule(rounds=100, active=10),
                  ratings=160_000, clients=100)
    assert len(long) == 1 and "rank 1400 over 100 rounds" in long[0] and "52 minutes" in long[0]
    assert _notes(config=_Rank(8), schedule=Schedule(rounds=100, active=10), ratings=160_000,
                  clients=100) == []
    # every client a round costs ten times as much: rank 150 crosses the minute there
    assert _notes(config=_Rank(150), schedule=Schedule(rounds=100, active=10),
                  ratings=160_000, clients=100) == []
    assert len(_notes(config=_Rank(150), schedule=Schedule(rounds=100, active=None),
                      ratings=160_000, clients=100)) == 1
    assert _notes(config=_Rank(None), schedule=Schedule(rounds=100), ratings=10**9,
                  clients=1) == []  # an algorithm's own default rank


def test_implicit_runs_say_which_algorithm_they_fit():
    run = resolve(RunOptions(implicit=True))
    assert run.algorithm == "fedals"
    assert any("fitting fedals" in note and "--implicit" in note for note in run.notes)
    assert resolve(RunOptions(implicit=True, algorithm="fedals")).notes == ()


def test_rounds_zero_is_the_one_exchange_protocols_alone():
    assert resolve(RunOptions(algorithm="item-bias", rounds=0)).schedule.rounds == 0
    assert resolve(RunOptions(algorithm="item-bias")).schedule.rounds == 0  # its paper's
    from fedmc.errors import ConfigError

    with pytest.raises(ConfigError, match="rounds=0 trains nothing: rfrec"):
        resolve(RunOptions(algorithm="rfrec", rounds=0))


def test_item_bias_still_publishes_its_one_exchange(monkeypatch, capsys, tmp_path, ratings_csv,
                                                    invoke):
    out = tmp_path / "o"
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "--algorithm",
                          "item-bias", "--rounds", 0, "--out", out, "-q")
    assert code == 0, err
    assert json.loads((out / "config.json").read_text())["run"]["rounds"] == 0


@pytest.mark.parametrize(("count", "text"), [
    (512, "512 B"), (50 * 1024, "50.0 KiB"), (327_894.1 * 2**20, "320.2 GiB"),
    (3 * 2**40, "3.0 TiB")])
def test_bytes_are_shown_in_the_unit_that_fits(count, text):
    assert byte_size(count) == text


def test_the_early_stop_is_shown_in_words():
    report = {"round": 12, "metric": "validation_rmse", "value": 0.91234, "stopped_at": 32,
              "reason": "no improvement of validation_rmse by more than 0 in 20 rounds",
              "refit_rounds": 12}
    text = stopping_text(report)
    assert text == ("best round 12 (validation_rmse 0.9123), stopped at round 32: no "
                    "improvement of validation_rmse by more than 0 in 20 rounds; refit on "
                    "every training rating for 12 rounds")
    assert "{" not in stopping_text({**report, "round": None, "value": None})
