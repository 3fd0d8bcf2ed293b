"""The clients' validation cut, its evaluation and early stopping (fedmc.federation.validation).

Each evaluation on the cut is checked against numbers computed straight from the factors;
the batched simulation against the per-client loop; early stopping against the run without it
stopped at the best round.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedmc.algorithms.registry import spec
from fedmc.core.factors import predict
from fedmc.core.ranking import list_metrics, top_n
from fedmc.core.shard import CSR
from fedmc.errors import ConfigError
from fedmc.federation.loop import Rounds
from fedmc.federation.settings import EarlyStopping
from fedmc.federation.validation import EarlyStop, with_validation
from fedmc.run.data import federated_data
from fedmc.run.data_settings import DataSettings
from fedmc.run.options import RunOptions
from fedmc.run.runner import execute
from fedmc.run.settings import resolve
from fedmc.sim import simulate


@pytest.fixture(scope="module")
def small(ratings_file, tmp_path_factory):
    """The options that read a small ratings file (150 users, 40 items)."""
    path = ratings_file(tmp_path_factory.mktemp("small"), users=150, items=40)
    return {"ratings": path, "columns": ("user_id", "item_id", "stars")}


def _pairs(m: CSR) -> set[tuple[int, int]]:
    return set(zip(m.rows().tolist(), m.indices.tolist(), strict=True))


def test_the_cut_is_a_share_of_training_ratings_and_leaves_the_test_split_alone(small):
    plain, _ = federated_data(DataSettings(**small, seed=3))
    cut, _ = federated_data(DataSettings(**small, seed=3, validation_fraction=0.2))
    assert cut.validation is not None
    assert _pairs(cut.test) == _pairs(plain.test)  # the same test split
    kept, held = _pairs(cut.train), _pairs(cut.validation)
    assert not kept & held and kept | held == _pairs(plain.train)
    assert len(held) == round(0.2 * plain.train.nnz)
    again, _ = federated_data(DataSettings(**small, seed=3, validation_fraction=0.2))
    assert _pairs(again.validation) == held  # seeded
    other, _ = federated_data(DataSettings(**small, seed=4, validation_fraction=0.2))
    assert _pairs(other.validation) != held
    # the normalizer saw only the ratings trained on
    assert cut.normalizer.mean != plain.normalizer.mean
    shard = cut.client_shard(1)
    rows = cut.client_rows(1)
    assert shard.validation.nnz == cut.validation.indptr[rows.stop] - cut.validation.indptr[
        rows.start]


def test_every_training_rating_puts_the_cut_back(small):
    """The cut put back among the training ratings: the ratings of the data loaded without a
    cut (a public normalizer: the same values), every row in item order."""
    scale = {"normalize": "public", "rating_scale": (1.0, 5.0), "seed": 3}
    plain, _ = federated_data(DataSettings(**small, **scale))
    cut, _ = federated_data(DataSettings(**small, **scale, validation_fraction=0.2))
    merged = cut.every_training_rating()
    assert merged.validation is None and np.array_equal(merged.train.indptr, plain.train.indptr)
    m = merged.train
    assert all(np.all(np.diff(m.indices[m.indptr[r]:m.indptr[r + 1]]) > 0)
               for r in range(len(m.indptr) - 1))

    def triples(m):
        return set(zip(m.rows().tolist(), m.indices.tolist(), m.values.tolist(), strict=True))

    assert triples(merged.train) == triples(plain.train)
    assert plain.every_training_rating() is plain


def _fit(algorithm: str, data, rounds: int = 6, driver: str = "batched", eval_k=None,
         **params):
    entry = spec(algorithm)
    cfg = entry.Config(**params)
    algo = with_validation(entry.algorithm_for(cfg), eval_k)
    rounds_ = Rounds(entry_sampler(data), rounds)
    return cfg, algo, simulate(algo, cfg, data, rounds=rounds_, seed=0, driver=driver)


def entry_sampler(data):
    from fedmc.federation.sampling import make_sampler

    return make_sampler(data.n_clients, 3, "uniform")


def test_validation_errors_are_those_of_the_factors_on_the_cut(small):
    data, _ = federated_data(DataSettings(**small, clients=5, validation_fraction=0.25))
    cfg, algo, out = _fit("fedmc-admm", data, rank=3, init_scale=0.5)
    U = out.clients.user_factors()
    V = algo.model(cfg, out.server)["V"]
    cut = data.validation
    pred = predict(U, V, cut.rows(), cut.indices, data.normalizer,
                   cfg.clip_range(data.value_range))
    truth = data.normalizer.inverse(cut.values)
    last = out.history.rows[-1]
    assert last["validation_rmse"] == pytest.approx(np.sqrt(np.mean((pred - truth) ** 2)),
                                                    rel=1e-10)
    assert last["validation_mae"] == pytest.approx(np.mean(np.abs(pred - truth)), rel=1e-10)
    assert last["validation_rmse"] != pytest.approx(last["test_rmse"])


def test_ranking_on_the_cut_and_on_the_test_items(small):
    data, _ = federated_data(DataSettings(**small, clients=5, implicit=True,
                                          validation_fraction=0.2))
    cfg, algo, out = _fit("fedals", data, eval_k=5, rank=4, implicit=True)
    U, V = out.clients.user_factors(), algo.model(cfg, out.server)["V"]
    last = out.history.rows[-1]
    train, cut, test = data.train, data.validation, data.test

    def ndcg(seen: CSR, target: CSR) -> float:
        items, _ = top_n(U, V, seen.indptr, seen.indices, 5)
        rows = list_metrics(items, target.indptr, target.indices)
        return rows[rows[:, 5] > 0, 2].mean()

    # validation lists leave out the training items; test lists the validation items too
    assert last["validation_ndcg@5"] == pytest.approx(ndcg(train, cut), rel=1e-12)
    both = _union_by_hand(train, cut)
    assert last["ndcg@5"] == pytest.approx(ndcg(both, test), rel=1e-12)


def _union_by_hand(a: CSR, b: CSR) -> CSR:
    rows = [sorted(set(a.indices[a.indptr[t]:a.indptr[t + 1]])
                   | set(b.indices[b.indptr[t]:b.indptr[t + 1]]))
            for t in range(len(a.indptr) - 1)]
    indptr = np.concatenate(([0], np.cumsum([len(r) for r in rows]))).astype(np.int64)
    indices = np.array([j for r in rows for j in r], dtype=np.int32)
    return CSR(indptr, indices, np.zeros(len(indices)))


@pytest.mark.parametrize("algorithm, params, eval_k", [
    ("fedmc-admm", {"rank": 3}, None),
    ("fedals", {"rank": 3, "implicit": True}, 4),
])
def test_batched_equals_per_client_with_a_cut(algorithm, params, eval_k, small):
    data, _ = federated_data(DataSettings(**small, clients=6, implicit=eval_k is not None,
                                          validation_fraction=0.2))
    histories = [_fit(algorithm, data, driver=d, eval_k=eval_k, **params)[2].history
                 for d in ("batched", "per-client")]
    for a, b in zip(*(h.rows for h in histories), strict=True):
        assert a.keys() == b.keys()
        for key in a:
            if key != "seconds":
                assert a[key] == pytest.approx(b[key], rel=1e-10, abs=1e-12), key
    assert any(k.startswith("validation_") for k in histories[0].rows[-1])


def test_a_run_without_a_cut_evaluates_as_before(tiny_federated):
    data = tiny_federated()[0]
    entry = spec("fedmc-admm")
    cfg = entry.Config(rank=3)
    plain = simulate(entry.algorithm_for(cfg), cfg, data,
                     rounds=Rounds(entry_sampler(data), 4), seed=0).history.rows
    wrapped = _fit("fedmc-admm", data, rounds=4, rank=3)[2].history.rows
    for a, b in zip(plain, wrapped, strict=True):
        assert {k: v for k, v in a.items() if k != "seconds"} == \
            {k: v for k, v in b.items() if k != "seconds"}


def test_early_stop_keeps_the_best_round_and_counts_patience():
    stop = EarlyStop(EarlyStopping(patience=3, min_delta=0.01), None)
    model = {"V": np.zeros(2)}
    for k, value in enumerate([0.5, 1.0, 0.9, 0.895, 0.85, 0.86, 0.849, 0.9], start=0):
        model["V"][:] = k
        stop.observe(k, {"validation_rmse": value}, model)
        assert stop.stopped == (k == 7)
    # round 0, the initial model, is never the best (even where it scores best)
    assert stop.best.round == 4 and stop.best.value == 0.85
    assert stop.best.model["V"].tolist() == [4.0, 4.0]  # a copy of that round's model
    larger = EarlyStop(EarlyStopping(patience=1, metric="ndcg@10"), None)
    assert larger.column == "validation_ndcg@10" and larger.larger
    with pytest.raises(ConfigError, match="validation_rmse"):
        EarlyStop(EarlyStopping(), None).observe(1, {"test_rmse": 1.0}, model)
    lost = EarlyStop(EarlyStopping(patience=2), None)  # nobody answered: the round counts
    lost.observe(0, {"validation_rmse": 0.5}, model)
    lost.observe(1, {"validation_rmse": 1.0}, model)
    lost.observe(2, {"round": 2}, model, answered=False)
    lost.observe(3, {"round": 3}, model, answered=False)
    assert lost.stopped and lost.best.round == 1


@pytest.fixture(scope="module")
def learnable(low_rank_ratings, tmp_path_factory):
    """Options of a run that learns, then overfits, a low-rank ratings file."""
    path = low_rank_ratings(tmp_path_factory.mktemp("learnable"))
    return {"ratings": path, "columns": ("user_id", "item_id", "stars"), "clients": 5,
            "active": 3, "rounds": 40, "validation_fraction": 0.2, "seed": 0}


PARAMS = {"rank": 6, "lam": 0.1, "beta": 0.5}


def test_early_stopping_publishes_the_best_rounds_model(learnable):
    stopped = execute(resolve(RunOptions(**learnable, params=PARAMS, early_stopping=True,
                                         patience=10, refit=False)))
    report = stopped.summary["early_stopping"]
    best = report["round"]
    assert 0 < best and report["stopped_at"] == best + 10 < 40, "the test needs a run " \
        "that learns, then stops early"
    assert stopped.summary["round"] == best
    assert stopped.summary["test_rmse"] == next(
        r["test_rmse"] for r in stopped.history.rows if r["round"] == best)
    column = [r["validation_rmse"] for r in stopped.history.rows]
    assert min(column) == report["value"]
    # the history describes the published model: it ends at its round; the curve goes on
    assert stopped.history.rows[-1]["round"] == best
    assert stopped.validation_history.rows[-1]["round"] == report["stopped_at"]
    # the published V is the one the same run without early stopping has after `best` rounds
    short = execute(resolve(RunOptions(**{**learnable, "rounds": best}, params=PARAMS)))
    np.testing.assert_array_equal(stopped.trained.model["V"], short.trained.model["V"])


def test_refit_is_the_run_without_the_cut_stopped_at_the_best_round(learnable):
    refit = execute(resolve(RunOptions(**learnable, params=PARAMS, early_stopping=True,
                                       patience=10)))
    best = refit.summary["early_stopping"]["refit_rounds"]
    assert 0 < best == refit.summary["round"] == refit.summary["early_stopping"]["round"]
    assert refit.validation_history is not None
    assert "validation_rmse" in refit.validation_history.rows[-1]
    assert "validation_rmse" not in refit.history.rows[-1]
    without_cut = {**learnable, "rounds": best, "validation_fraction": None}
    plain = execute(resolve(RunOptions(**without_cut, params=PARAMS)))
    np.testing.assert_array_equal(refit.trained.model["V"], plain.trained.model["V"])
    assert refit.config["run"]["early_stopping"]["patience"] == 10
    assert refit.config["data"]["validation_fraction"] == 0.2


@pytest.mark.parametrize("options, message", [
    ({"patience": 5}, "patience=5 needs early_stopping=true"),
    ({"refit": False}, "refit=False needs early_stopping=true"),
    ({"validation_fraction": 0.1, "dp_epsilon": 4.0, "dp_clip": 1.0}, "private run"),
    ({"validation_fraction": 0.1, "dataset": "synthetic-boolean"}, "Boolean"),
])
def test_refused_settings(options, message):
    with pytest.raises(ConfigError, match=message):
        resolve(RunOptions(**options))


def test_defaults_of_early_stopping():
    run = resolve(RunOptions(early_stopping=True))
    assert run.data.validation_fraction == 0.05
    assert run.schedule.early_stopping == EarlyStopping()
    assert {"validation_fraction", "patience", "min_delta", "refit"} <= set(run.defaulted)
    implicit = resolve(RunOptions(implicit=True, early_stopping=True, validation_fraction=0.1))
    assert implicit.schedule.eval_k == 10 and "validation_fraction" not in implicit.defaulted
    assert resolve(RunOptions(implicit=True)).schedule.eval_k is None


def test_fedmc_run_with_early_stopping_writes_both_histories(invoke, monkeypatch, capsys,
                                                             tmp_path, small):
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", small["ratings"],
                          "--columns", ",".join(small["columns"]), "--rounds", "30",
                          "--early-stopping", "--patience", "2", "--out", tmp_path / "run",
                          "--quiet")
    assert code == 0, err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["early_stopping"]["metric"] == "validation_rmse"
    assert (tmp_path / "run" / "validation_history.csv").exists()
    code, _, err = invoke(monkeypatch, capsys, "run", "--patience", "2",
                          "--out", tmp_path / "other")
    assert code == 2 and "--patience 2 needs --early-stopping" in err


def test_an_early_stopped_run_resumes_from_any_checkpoint(learnable, checkpoint_keeper):
    """The watcher travels in the checkpoint: a run resumed after any round stops at the same
    round and publishes the same model (fedmc federate resume's path)."""
    import pickle

    from fedmc.federation.loop import run_rounds, streams
    from fedmc.sim.clients import BatchedClients

    data, _ = federated_data(DataSettings(**{k: v for k, v in learnable.items()
                                             if k in DataSettings.model_fields}))
    entry = spec("fedmc-admm")
    cfg = entry.Config(**PARAMS)
    algo = with_validation(entry.algorithm_for(cfg))
    rounds = Rounds(entry_sampler(data), 40)

    def run(stop, resume=None, callbacks=()):
        init_rng, rng = streams(0 if resume is None else 99)
        info = data.federation_info()
        draws = algo.draws(cfg, info, init_rng)
        return run_rounds(algo, cfg, info, BatchedClients(algo, cfg, data, draws, info),
                          rounds, server_draws=draws.server, rng=rng,
                          callbacks=[stop, *callbacks], resume=resume)

    stop = EarlyStop(EarlyStopping(patience=10), None)
    keeper = checkpoint_keeper(stop)
    saved = keeper.saved
    whole = run(stop, callbacks=[keeper])
    assert stop.stopped
    for k in (3, stop.best.round, max(saved)):
        checkpoint, kept = pickle.loads(saved[k])
        resumed = run(kept, resume=checkpoint)
        assert kept.report(40) == stop.report(40)
        np.testing.assert_array_equal(resumed.model(algo, cfg, kept)["V"],
                                      whole.model(algo, cfg, stop)["V"])


def test_a_per_user_split_cuts_each_users_share(small):
    data, _ = federated_data(DataSettings(**small, split="user", validation_fraction=0.25))
    kept = np.diff(data.train.indptr)
    held = np.diff(data.validation.indptr)
    assert np.array_equal(held, np.minimum(np.floor(0.25 * (kept + held)),
                                           np.maximum(kept + held - 1, 0)))
    assert held.sum() > 0


def test_the_cuts_sums_obey_the_bounds_of_the_test_sums():
    """A federation's server checks the cut's sums (and the ranking sums) as it checks the
    test sums: a negative squared error or a fractional count is refused."""
    from fedmc.algorithms.spec import FACTOR_SUMS
    from fedmc.federation.bounds import OutOfBounds, ReplyBounds

    bounds = ReplyBounds(sums=FACTOR_SUMS, cells=[10], users=[2])
    bounds.check_sums(0, {"validation.sse_test": 2.0, "validation.n_test": 3.0,
                          "validation.rank_users": 2.0, "rank_ndcg": 0.5,
                          "validation.rank_ndcg": 2.0, "rank_hit_rate": 2.0})
    # each user's ranking metric is in [0, 1]: a client's sums add up to at most its users
    for sums in ({"validation.sse_test": -1.0}, {"validation.n_test": 11.0},
                 {"validation.rank_users": 1.5}, {"rank_ndcg": -0.1},
                 {"validation.rank_ndcg": 1e300}, {"rank_precision": 2.01},
                 {"validation.rank_users": 3.0}):
        with pytest.raises(OutOfBounds):
            bounds.check_sums(0, sums)


def test_the_default_upload_bound_follows_the_phases_lower_median_and_cannot_be_raised():
    """``max-upload-norm = "auto"`` (:class:`fedmc.federation.bounds.NormReference`): in a
    phase's first exchange, 100 times the lower median of its norms (of two, the smaller, so
    one x1000 upload beside an honest one is over it); then the lower median of each
    client's largest norm taken, which one client of three cannot raise by uploading just
    under its bound round after round; each phase has its own scale."""
    from fedmc.federation.bounds import GROWTH, NormReference, lower_median

    assert lower_median([3.0, 1.0]) == 1.0 and lower_median([5.0, 1.0, 2.0]) == 2.0
    ref = NormReference()
    assert ref.bound("round", {0: 1.0, 1: 1000.0}) == GROWTH * 1.0
    assert ref.bound("round", {0: 2.0}) == GROWTH * 2.0 and ref.bound("x", {}) == float("inf")
    ref.take("round", {0: 1.0, 2: 1.5})
    for _ in range(10):  # client 1 uploads just under the bound every round
        bound = ref.bound("round", {0: 1.0, 1: 1.0, 2: 1.0})
        ref.take("round", {0: 1.0, 1: bound * 0.99, 2: 1.5})
    assert ref.bound("round", {}) == GROWTH * 1.5
    assert ref.bound("setup", {0: 0.01, 1: 0.02}) == GROWTH * 0.01  # a phase of its own
    assert ref.bound("round", {0: 0.0}) == GROWTH * 1.5
    assert NormReference().bound("cg", {0: 0.0, 1: float("nan")}) == float("inf")
