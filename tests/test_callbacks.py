"""The round loop's one callback protocol (fedmc.federation.callbacks) and its callbacks: a
progress function, a callback that stops the loop, a search's pruning (fedmc.tune.pruning) and
a federation's progress log (fedmc.flower.progress_log). Early stopping is tested in
test_validation.py, the checkpoint writer in test_resume.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedmc.algorithms.fedmc_admm import RATED as ALGORITHM
from fedmc.federation.callbacks import Callback, Progress, RoundEnd, callbacks_of
from fedmc.federation.loop import Rounds, run_rounds, streams
from fedmc.federation.sampling import make_sampler
from fedmc.sim.clients import BatchedClients


def _run(tiny_federated, callbacks, rounds=6, eval_every=2):
    data = tiny_federated(m=15, n=8, p=5, density=0.45, seed=4)[0]
    cfg = ALGORITHM.Config(rank=2, consensus="rated")
    init_rng, rng = streams(0)
    info = data.federation_info()
    draws = ALGORITHM.draws(cfg, info, init_rng)
    clients = BatchedClients(ALGORITHM, cfg, data, draws, info)
    return run_rounds(ALGORITHM, cfg, info, clients,
                      Rounds(make_sampler(data.n_clients, 2), rounds, eval_every),
                      server_draws=draws.server, rng=rng, callbacks=callbacks)


def test_a_progress_function_hears_every_round_from_one(tiny_federated):
    heard = []
    outcome = _run(tiny_federated, lambda k, row: heard.append((k, row)))
    assert [k for k, _ in heard] == [1, 2, 3, 4, 5, 6]
    assert [row is None for _, row in heard] == [True, False, True, False, True, False]
    rows = {int(r["round"]): r for r in outcome.history.rows}
    assert all(row is rows[k] for k, row in heard if row is not None)


class _StopAt(Callback):
    """Stops the loop once round ``at``'s row is final; remembers what it was told."""

    def __init__(self, at: int) -> None:
        self.at, self.ends, self.exchanges = at, [], []

    def after_round(self, end: RoundEnd) -> bool:
        self.ends.append(end)
        return end.round >= self.at

    def after_exchange(self, round, checkpoint):
        self.exchanges.append((round, checkpoint().round))


def test_a_callback_that_says_stop_ends_the_run_after_that_round(tiny_federated):
    whole = _run(tiny_federated, None)
    watcher = _StopAt(4)
    stopped = _run(tiny_federated, [watcher, Progress(lambda k, row: None)])
    assert [int(r["round"]) for r in stopped.history.rows] == [0, 2, 4]
    for a, b in zip(stopped.history.rows, whole.history.rows, strict=False):
        assert {k: v for k, v in a.items() if k != "seconds"} == \
            {k: v for k, v in b.items() if k != "seconds"}
    # every round's end was told (round 0 too, with the model it evaluated), and every
    # exchange, with the loop's checkpoint of that round
    assert [e.round for e in watcher.ends] == [0, 1, 2, 3, 4]
    assert [e.row is None for e in watcher.ends] == [False, True, False, True, False]
    assert set(watcher.ends[0].model) == {"V"} and watcher.ends[0].answered
    assert watcher.exchanges == [(k, k) for k in range(1, 5)]


def test_callbacks_of_takes_a_function_a_callback_a_list_or_nothing():
    stop = _StopAt(1)
    assert callbacks_of(None) == [] and callbacks_of(stop) == [stop]
    assert callbacks_of([stop, stop]) == [stop, stop]
    wrapped = callbacks_of(print)
    assert len(wrapped) == 1 and isinstance(wrapped[0], Progress)


class _Trial:
    """An Optuna trial's two methods the pruning calls, pruning from round ``at`` on."""

    def __init__(self, at: int) -> None:
        self.at, self.reported = at, []

    def report(self, value, step):
        self.reported.append((step, value))

    def should_prune(self):
        return bool(self.reported) and self.reported[-1][0] >= self.at


def test_pruning_reports_the_column_and_stops_where_the_trial_should_be_pruned(tiny_federated):
    from fedmc.tune.pruning import Pruning

    trial = _Trial(at=4)
    pruning = Pruning(trial, "test_rmse")
    outcome = _run(tiny_federated, pruning)
    rows = {int(r["round"]): r for r in outcome.history.rows}
    assert trial.reported == [(k, rows[k]["test_rmse"]) for k in (2, 4)]  # evaluated rounds
    assert pruning.pruned_at == 4 and pruning.value == rows[4]["test_rmse"]
    assert max(rows) == 4  # the run stopped there
    kept = Pruning(_Trial(at=99), "test_rmse")
    assert _run(tiny_federated, kept).history.last("round") == 6 and kept.pruned_at is None


def test_pruning_skips_a_value_that_is_not_finite():
    from fedmc.tune.pruning import Pruning

    trial = _Trial(at=0)
    pruning = Pruning(trial, "x")
    for row in ({"x": float("nan")}, {"y": 1.0}, None):
        assert not pruning.after_round(RoundEnd(3, row, {}, True))
    assert trial.reported == [] and pruning.pruned_at is None


@pytest.mark.parametrize("private", [False, True])
def test_the_progress_log_writes_each_round_and_a_private_run_names_no_client(tmp_path,
                                                                             private):
    pytest.importorskip("flwr")
    from fedmc.flower.progress_log import PRIVATE_EVENT_KEYS, ProgressLog

    log = ProgressLog(tmp_path / "progress.jsonl", private)
    log.exchange(1, 1, "round", [3, 5])
    assert not log.after_round(RoundEnd(0, {"round": 0.0}, {}, True))  # before training
    log.after_round(RoundEnd(1, {"round": 1.0, "test_rmse": 0.9}, {"V": np.zeros(1)}, True))
    log.after_round(RoundEnd(2, None, {}, False))
    lines = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    assert [(e["event"], e["round"]) for e in lines] == [("exchange", 1), ("round", 1),
                                                        ("round", 2)]
    assert lines[1]["row"] == {"round": 1.0, "test_rmse": 0.9} and lines[2]["row"] is None
    if private:
        assert all(set(e) <= set(PRIVATE_EVENT_KEYS) for e in lines)
    else:
        assert lines[0]["clients"] == [3, 5] and all("time" in e for e in lines)
