"""The ServerApp's loop and fedmc's ClientApp in one process (the loopback_federation fixture of
conftest.py): secure aggregation equals the simulation for every algorithm, the server refuses
replies it cannot trust, and a secure sum never holds a single client's upload."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Context, Message  # noqa: E402

from fedmc.core.uploads import RowPatch, Stacked  # noqa: E402
from fedmc.data.boolean import SYNTHETIC  # noqa: E402
from fedmc.deploy.split import write_split  # noqa: E402
from fedmc.errors import ConfigError  # noqa: E402
from fedmc.federation.settings import EarlyStopping, Schedule
from fedmc.flower.compact import pack, unpack  # noqa: E402
from fedmc.flower.manifest import Manifest  # noqa: E402
from fedmc.flower.server_app import preflight  # noqa: E402
from fedmc.flower.settings import FederatedRun  # noqa: E402
from fedmc.flower.wire import (  # noqa: E402
    RefusedReply,
    pack_arrays,
    pack_reply,
    unpack_sums,
    unpack_uploads,
)
from fedmc.model import load_model  # noqa: E402
from fedmc.privacy.accounting import UserDP
from fedmc.run.data import DataSettings  # noqa: E402
from fedmc.run.evaluation import evaluate_model, held_out_split  # noqa: E402
from fedmc.run.runner import RunResult, execute  # noqa: E402
from fedmc.run.spec import RunSpec  # noqa: E402
from fedmc.testing import FEDERATION_COLUMNS, assert_same_history, client_ids  # noqa: E402

PARAMS = {"rank": 3}
PUBLIC = DataSettings(normalize="public", rating_scale=(1.0, 5.0))  # a DP run's (not fitted)
QUANTUM = 2.0**-26  # a secure sum's error per entry and client, relative (flower/secagg.py)


@pytest.fixture(scope="session")
def settings_for(data_settings, ratings_file):
    """``settings_for(algorithm, folder, clients=5, implicit=False)``: the data settings a
    loopback federation of ``algorithm`` runs on."""

    def build(algorithm: str, folder: Path, clients: int = 5,
              implicit: bool = False) -> DataSettings:
        if algorithm.startswith("felb"):
            return DataSettings(dataset=SYNTHETIC, rows=60, clients=clients, seed=1)
        settings = data_settings(ratings_file(folder, users=60), clients=clients)
        return DataSettings(**{**settings.model_dump(), "normalize": None, "implicit": True}) \
            if implicit else settings

    return build


def assert_within_quantization(model: dict[str, np.ndarray], reference: RunResult,
                               rounds: int, clients: int) -> None:
    """Every published array within ``rounds * clients`` quanta of its largest entry of
    ``fedmc run``'s: each secure sum errs by less than one quantum per client."""
    for name, expected in reference.trained.model.items():
        bound = rounds * clients * QUANTUM * np.abs(expected).max()
        np.testing.assert_allclose(model[name], expected, rtol=0, atol=bound,
                                   err_msg=f"published {name!r}")


# RFRec's default optimizer, Adam, divides each step by the gradient's running size, so where a
# gradient vanishes it turns differences of 1e-10 (quantization, even the order of a sum) into
# steps of size alpha: its model is held to the bound with plain gradient steps ("gd"), its
# metrics with both (docs/federation.md, "Secure aggregation: scaling and precision").
SECURE_CASES = {"fedmc-admm": ("fedmc-admm", {}, True), "fedmavg": ("fedmavg", {}, True),
                "rfrec-gd": ("rfrec", {"optimizer": "gd"}, True),
                "rfrec-adam": ("rfrec", {}, False), "felb": ("felb", {}, True),
                "fedals": ("fedals", {}, True),
                "fedals-implicit": ("fedals", {"implicit": True}, True),
                "fedals-fresh": ("fedals", {"sums": "fresh", "memory": 0.5, "max_items": 4},
                                 True)}


@pytest.mark.parametrize(("algorithm", "params", "model_bound"), SECURE_CASES.values(),
                         ids=SECURE_CASES.keys())
def test_a_secure_federation_equals_fedmc_run(tmp_path, algorithm, params, model_bound,
                                              loopback_federation, out_files, settings_for):
    """No client is lost (FedMAvg's and RFRec's clients that compute without uploading
    included) and every metric and the model agree with the simulation to the quantization's
    precision."""
    settings = settings_for(algorithm, tmp_path, implicit=params.get("implicit", False))
    params = {**PARAMS, **params}
    run = RunSpec(algorithm=algorithm, schedule=Schedule(rounds=4, active=3, seed=0))
    history = loopback_federation(tmp_path, settings,
                                  FederatedRun(spec=run.model_copy(update={"params": params}),
                                               secagg=True, out=Path("out")))
    reference = execute(run.model_copy(update={"data": settings, "params": params}))
    assert all(row["lost"] == "" for row in history.rows), history.column("lost")
    assert_same_history(history, reference.history, rtol=1e-6, atol=1e-9,
                        ignore=("seconds", "bytes_up", *FEDERATION_COLUMNS))
    model, events = out_files(tmp_path / "out")
    if model_bound:
        assert_within_quantization(model, reference, run.schedule.rounds, 5)
    assert not [e for e in events if e["event"] in ("refused", "failed", "skipped")]
    if params.get("implicit"):  # fedmc evaluate ranks the federation's model as the run's
        published = load_model(tmp_path / "out")
        data = json.loads((tmp_path / "out" / "config.json").read_text())["data"]
        held = held_out_split(published, data)
        assert held.implicit
        got, expected = (evaluate_model(m, held, 10) for m in (published, reference.artifact))
        assert got["ndcg@10"] == pytest.approx(expected["ndcg@10"], abs=1e-9)


@pytest.mark.parametrize("item_step", ["sums", "exchanges"])
@pytest.mark.parametrize("secagg", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["plain", "secure"])
def test_fedals_factors_federation_equals_fedmc_run(tmp_path, secagg, item_step,
                                                    loopback_federation, data_settings,
                                                    ratings_file):
    """Federated ALS's ``upload=factors`` (one user per client): plain, each client's factors
    travel and the server forms their rows; secure, each client forms its dense rows itself.
    Either way the history of ``fedmc run``, plain to rounding, secure to quantization; with
    the item step's exchanges too (every client in each, their phases in turn)."""
    settings = data_settings(ratings_file(tmp_path, users=12))
    settings = DataSettings(**{**settings.model_dump(), "partition": "user", "clients": 12,
                               "normalize": None, "implicit": True})
    params = {"rank": 3, "implicit": True, "upload": "factors", "item_step": item_step}
    schedule = (Schedule(rounds=3, active=5, seed=0) if item_step == "sums"
                else Schedule(rounds=6, seed=0))  # a round and a half of exchanges
    run = RunSpec(algorithm="fedals", schedule=schedule, params=params)
    history = loopback_federation(tmp_path, settings, FederatedRun(spec=run, secagg=secagg,
                                                                   out=Path("out")))
    reference = execute(run.model_copy(update={"data": settings}))
    assert all(row["lost"] == "" for row in history.rows), history.column("lost")
    tol = 1e-6 if secagg else 1e-10
    assert_same_history(history, reference.history, rtol=tol, atol=tol,
                        ignore=("seconds", "bytes_up", *FEDERATION_COLUMNS))
    if not secagg:  # what travelled: the factors, counted as the simulation counts them
        np.testing.assert_array_equal(history.column("bytes_up"),
                                      reference.history.column("bytes_up"))


@pytest.mark.parametrize("secagg", [False, True], ids=["plain", "secure"])
def test_an_ease_federation_equals_fedmc_run(tmp_path, secagg, loopback_federation,
                                             settings_for, out_files):
    """Federated EASE's one exchange: plain, each client's Gram travels as its packed upper
    triangle (counted as the simulation counts it) and the server publishes the run's B to
    rounding; secure, each client sends its dense Gram, B to the quantization's precision."""
    settings = settings_for("ease", tmp_path, implicit=True)
    run = RunSpec(algorithm="ease", schedule=Schedule(rounds=0, seed=0),
                  params={"implicit": True, "lam": 3.0})
    history = loopback_federation(tmp_path, settings, FederatedRun(spec=run, secagg=secagg,
                                                                   out=Path("out")))
    reference = execute(run.model_copy(update={"data": settings}))
    assert all(row["lost"] == "" for row in history.rows), history.column("lost")
    model, _ = out_files(tmp_path / "out")
    if secagg:
        assert_within_quantization(model, reference, 1, 5)
        return
    np.testing.assert_allclose(model["V"], reference.trained.model["V"], rtol=0, atol=1e-10)
    np.testing.assert_array_equal(history.column("bytes_up"),
                                  reference.history.column("bytes_up"))


def poison(client: int, value: float = np.nan):
    """A mod that turns ``client``'s uploads into ``value`` (a buggy client)."""

    def mod(msg: Message, context: Context,
            call_next: Callable[[Message, Context], Message]) -> Message:
        reply = call_next(msg, context)
        content = unpack(reply.content)
        if int(context.node_config["client"]) == client and "uploads" in content.array_records:
            parts = {k: a.numpy() for k, a in content.array_records["uploads"].items()}
            content["uploads"] = pack_arrays({k: np.full_like(a, value) if k.endswith(
                (".dense", ".values")) else a for k, a in parts.items()})
        reply.content = pack(content)
        return reply

    return mod


def test_a_client_that_uploads_nan_is_left_out_and_the_model_stays_finite(tmp_path,
                                                                          loopback_federation,
                                                                          out_files, settings_for):
    """Plain: the server refuses the upload, counts client 1 lost, logs why, and the run is
    the replay of the federation without client 1's steps in those rounds."""
    settings = settings_for("fedmc-admm", tmp_path)
    run = RunSpec(schedule=Schedule(rounds=4, active=3, seed=0))
    history = loopback_federation(tmp_path, settings,
                                  FederatedRun(spec=run.model_copy(update={"params": PARAMS}),
                                               out=Path("out")),
                                  mods={1: poison(1)})
    lost, included = client_ids(history, "lost"), client_ids(history)
    asked = [k for k in range(1, 5) if 1 in lost[k]]
    assert asked and all(1 not in included[k] for k in asked)
    model, events = out_files(tmp_path / "out")
    assert np.isfinite(model["V"]).all() and np.isfinite(history.column("test_rmse")).all()
    refused = [e for e in events if e["event"] == "refused"]
    assert {e["round"] for e in refused} >= set(asked) and all(
        e["clients"] == [1] and "not finite" in e["reason"] for e in refused)


def test_a_reply_lost_to_the_timeout_is_a_progress_line(tmp_path, loopback_federation,
                                                        out_files, settings_for):
    """Client 1 stops replying to its steps after round 1: each round it was asked in writes a
    ``timed out`` line naming it, and the history counts it lost there."""

    def silent(msg: Message, context: Context,
               call_next: Callable[[Message, Context], Message]) -> Message | None:
        if msg.metadata.message_type == "train.step" and int(msg.metadata.group_id) >= 2:
            return None
        return call_next(msg, context)

    settings = settings_for("fedmc-admm", tmp_path)
    run = RunSpec(schedule=Schedule(rounds=4, active=3, seed=0))
    history = loopback_federation(tmp_path, settings,
                                  FederatedRun(spec=run.model_copy(update={"params": PARAMS}),
                                               out=Path("out"), timeout=0.3),
                                  mods={1: silent})
    lost = client_ids(history, "lost")
    asked = [k for k in range(2, 5) if 1 in lost[k]]
    assert asked
    _, events = out_files(tmp_path / "out")
    timed_out = [e for e in events if e["event"] == "timed out"]
    assert {e["round"] for e in timed_out} == set(asked)
    assert all(e["clients"] == [1] and "no reply within 0.3 s" in e["reason"]
               for e in timed_out)


def test_a_private_run_logs_a_refusal_without_naming_the_client(tmp_path, loopback_federation,
                                                                out_files, settings_for):
    """Central user-level DP in plain mode: client 1's NaN upload is refused as above, but
    ``progress.jsonl`` says only that an upload of the round was refused: no client, no
    reason (it names the client), no time."""
    settings = settings_for("fedmc-admm", tmp_path).model_copy(update={
        "partition": "user", "normalize": "public", "rating_scale": (1.0, 5.0)})
    # every client every round: the sample is secret
    run = RunSpec(data=PUBLIC, schedule=Schedule(rounds=3, active=None, seed=0,
                                                 dp=UserDP(epsilon=8.0, clip=0.5)))
    loopback_federation(tmp_path, settings,
                        FederatedRun(spec=run.model_copy(update={"params": PARAMS}),
                                     out=Path("out")),
                        mods={1: poison(1)})
    _, events = out_files(tmp_path / "out")
    refused = [e for e in events if e["event"] == "refused"]
    assert refused and all(set(e) == {"event", "exchange", "round"} for e in refused)


def test_uploads_of_the_wrong_shape_or_kind_are_refused():
    shapes = {"a": (4, 2)}
    good = Stacked((4, 2), rows=RowPatch(np.array([0, 2]), np.array([1, 3]), np.ones((2, 2))))
    assert set(unpack_uploads(pack_reply({"a": good}), shapes)) == {"a"}
    bad = {
        "is float64 .4, 3., expected float .4, 2.": {"a.dense": np.ones((4, 3))},
        "not finite": {"a.dense": np.full((4, 2), np.inf)},
        "outside": {"a.index": np.array([4]), "a.values": np.ones((1, 2))},
        "repeated": {"a.index": np.array([1, 1]), "a.values": np.ones((2, 2))},
        "without values": {"a.index": np.array([1])},
        "integers": {"a.index": np.array([1.0]), "a.values": np.ones((1, 2))},
        "unknown": {"b.dense": np.ones((4, 2))},
        "expected float": {"a.dense": np.full((4, 2), "x")},
    }
    for reason, parts in bad.items():
        content = pack_reply()
        content["uploads"] = pack_arrays(parts)
        with pytest.raises(RefusedReply, match=reason):
            unpack_uploads(content, shapes)
    with pytest.raises(RefusedReply, match="no uploads"):
        unpack_uploads(pack_reply(sums={"sse": 1.0}), shapes)
    with pytest.raises(RefusedReply, match="not a finite"):
        unpack_sums(pack_reply(sums={"sse": float("nan")}))


def test_a_secure_round_with_one_uploader_is_skipped_and_said_so(tmp_path, loopback_federation,
                                                                 out_files, settings_for):
    """Two clients per round and half of them dropping out: a round left with one upload
    is not summed (the sum would be that upload); nobody steps in it and the run equals its
    replay."""
    settings = settings_for("fedmc-admm", tmp_path)
    run = RunSpec(schedule=Schedule(rounds=6, active=2, dropout=0.5, seed=3))
    history = loopback_federation(tmp_path, settings,
                                  FederatedRun(spec=run.model_copy(update={"params": PARAMS}),
                                               secagg=True, out=Path("out")))
    _, events = out_files(tmp_path / "out")
    skipped = {e["round"] for e in events if e["event"] == "skipped"}
    sampled = dict(zip(history.column("round"), history.column("clients"), strict=True))
    assert skipped and skipped == {k for k in range(1, 7) if sampled[k] == 1}
    included = client_ids(history)
    assert all(included[k] == [] for k in skipped)
    assert all(row["lost"] == "" for row in history.rows)


def test_settings_the_server_refuses_are_refused_before_any_client_is_contacted(tmp_path,
                                                                                settings_for):
    settings = settings_for("fedmc-admm", tmp_path, clients=2)
    write_split(settings, tmp_path / "split")
    write_split(settings.model_copy(update={"normalize": "public", "rating_scale": (1.0, 5.0)}),
                tmp_path / "public")
    fitted = Manifest.read(tmp_path / "split" / "manifest.json")
    manifest = Manifest.read(tmp_path / "public" / "manifest.json")
    # a split without DP fits its normalizer on the training ratings: a DP run configuration
    # served on it would publish that normalizer with the model
    with pytest.raises(ConfigError, match="normalize=zscore.*fits on the training ratings"):
        preflight(FederatedRun(spec=RunSpec(data=PUBLIC, schedule=Schedule(
            active=None, dp=UserDP(noise=1.0, clip=1.0, unit="client")))), fitted)
    cases = [
        (RunSpec(schedule=Schedule(active=1)), {}, True,
         "at least 2 clients: 2 clients, 1 per round"),
        (RunSpec(schedule=Schedule(active=2)), {"rank": 0}, False, "rank must be at least 1"),
        (RunSpec(schedule=Schedule(active=2)), {"rank": 5000}, False, "rank 5000 exceeds"),
        (RunSpec(data=PUBLIC, schedule=Schedule(active=None, dp=UserDP(noise=1.0, clip=1.0))), {},
         False,
         "guarantee is per client"),
        (RunSpec(data=PUBLIC, schedule=Schedule(active=1, dp=UserDP(noise=1.0, clip=1.0,
                                                                  unit="client"))), {}, False,
         "Poisson sampling"),
        (RunSpec(data=PUBLIC, schedule=Schedule(active=None, dp=UserDP(
            epsilon=0.01, noise=0.5, clip=1.0, unit="client"))),
         {}, False, "over the budget"),
    ]
    for run, params, secagg, message in cases:
        with pytest.raises(ConfigError, match=message):
            preflight(FederatedRun(spec=run.model_copy(update={"params": params}), secagg=secagg),
                      manifest)
    for split in (fitted, manifest):
        preflight(FederatedRun(spec=RunSpec(schedule=Schedule(active=2)), secagg=True),
                  split)  # fine


def test_a_private_secure_sum_hands_the_server_the_noised_sum_alone(
        tmp_path, data_settings, loopback_federation, ratings_file, monkeypatch):
    """Under user-level DP every secure sum is the Skellam mechanism's integer sum: every
    value the server process gets back from SecAgg+ is an integer sum of the members' field
    elements (their uploads' integers plus their noise shares, modulo 2^30), one part per
    upload name: no overflow flag, no exponent histogram, no repeat; the members' replies
    carry only the names of the parts."""
    from fedmc.flower import secagg
    from fedmc.privacy.skellam import MODULUS

    seen: list[tuple[list[np.ndarray], list]] = []
    real_mean = secagg.secure_mean

    def spy_mean(grid, instructions, timeout, **kwargs):
        mean, results = real_mean(grid, instructions, timeout, **kwargs)
        seen.append((mean, results))
        return mean, results

    monkeypatch.setattr(secagg, "secure_mean", spy_mean)
    settings = data_settings(ratings_file(tmp_path, users=12), clients=1).model_copy(
        update={"partition": "user", "normalize": "public", "rating_scale": (1.0, 5.0)})
    run = RunSpec(data=PUBLIC, schedule=Schedule(rounds=2, active=None, seed=0,
                                                 dp=UserDP(epsilon=4.0, clip=0.5)))
    loopback_federation(tmp_path, settings,
                        FederatedRun(spec=run.model_copy(update={"params": PARAMS}),
                                     secagg=True, out=Path("out")))
    assert len(seen) == 3  # the set-up and two rounds, none repeated
    for mean, results in seen:
        names = json.loads(str(results[0][1].metrics["names"]))
        assert names == ["delta"] and len(mean) == len(names)  # the upload alone
        assert all(set(res.metrics) == {"names"} for _, res in results)
        total = secagg.decode_integers(mean[0] * len(results), len(results))
        assert np.all(total >= 0) and np.all(total < len(results) * MODULUS)
        assert np.abs(mean[0] * len(results) - (total / secagg.HALF_FIELD - len(results))
                      ).max() < 1e-6  # integers, read back exactly


@pytest.mark.slow  # 16 s: the fast suite checks the same integers per member
# (tests/test_skellam.py::test_the_simulated_release_is_the_members_integer_sum)
def test_a_reproducible_secure_federation_releases_the_simulations_integers(
        tmp_path, data_settings, loopback_federation, ratings_file, simulation, monkeypatch):
    """The Skellam mechanism under SecAgg+ (every member rounds its clipped upload and adds its
    noise share from its stream, the secure sum adds them modulo the field) releases, exchange
    by exchange and to the last integer, what the simulation of the same mechanism releases
    with the same seed (a reproducible run: the members' streams from the run's secret); the
    published models agree."""
    from fedmc.privacy import skellam

    released: list[np.ndarray] = []
    real_decode = skellam.SkellamSum.decode

    def spy_decode(self, total):
        released.append(np.mod(total, skellam.MODULUS))
        return real_decode(self, total)

    monkeypatch.setattr(skellam.SkellamSum, "decode", spy_decode)
    settings = data_settings(ratings_file(tmp_path, users=12), clients=1).model_copy(
        update={"partition": "user", "normalize": "public", "rating_scale": (1.0, 5.0)})
    dp = UserDP(noise=1.5, clip=0.5, mechanism="skellam", reproducible=True)
    run = RunSpec(data=PUBLIC, schedule=Schedule(rounds=3, active=None, sampling="bernoulli",
                                                 participation=0.5, seed=4, dp=dp))
    loopback_federation(tmp_path, settings,
                        FederatedRun(spec=run.model_copy(update={"params": PARAMS}),
                                     secagg=True, out=Path("out")))
    federation, released = released, []
    simulated = simulation(settings, run, PARAMS)
    assert len(federation) == len(released) == 4  # the set-up and three rounds
    for fed, sim in zip(federation, released, strict=True):
        assert np.array_equal(fed, sim)
    with np.load(tmp_path / "out" / "model.npz") as npz:
        np.testing.assert_allclose(npz["V"], simulated.server.V, rtol=0, atol=1e-10)


def test_a_private_secure_federation_publishes_only_what_its_guarantee_covers(
        tmp_path, data_settings, loopback_federation, ratings_file,
        assert_publishes_only_what_is_private):
    """User-level DP with secret noise under SecAgg+ (distributed DP), one user per client:
    the out folder names no client and holds no metric, count or timing; the guarantee is
    stated per party, the server's without the sampling's amplification."""
    settings = data_settings(ratings_file(tmp_path, users=12), clients=1)
    settings = settings.model_copy(update={"partition": "user", "normalize": "public",
                                           "rating_scale": (1.0, 5.0)})
    run = RunSpec(data=PUBLIC, schedule=Schedule(
        rounds=3, active=None, sampling="bernoulli", participation=0.5, seed=0,
        dp=UserDP(epsilon=4.0, clip=0.5)))
    loopback_federation(tmp_path, settings,
                        FederatedRun(spec=run.model_copy(update={"params": PARAMS}),
                                     secagg=True, out=Path("out")))
    assert_publishes_only_what_is_private(tmp_path / "out", 4.0)




def test_a_federation_stops_early_as_fedmc_run_does(tmp_path, loopback_federation, out_files,
                                                    data_settings, low_rank_ratings):
    """The clients' validation cut travels in the split, its sums in the evaluations; the
    server stops where fedmc run stops and publishes the same best round's model."""
    settings = data_settings(low_rank_ratings(tmp_path), clients=5).model_copy(
        update={"validation_fraction": 0.2})
    stopping = EarlyStopping(patience=10, refit=False)
    run = RunSpec(algorithm="fedmc-admm", params={"rank": 6, "lam": 0.1, "beta": 0.5},
                  schedule=Schedule(rounds=40, active=3, seed=0, early_stopping=stopping))
    history = loopback_federation(tmp_path, settings, FederatedRun(spec=run, out=Path("out")))
    reference = execute(run.model_copy(update={"data": settings}))
    assert "validation_rmse" in history.rows[-1]
    # the federation's history goes on to the stop: the simulation's whole curve
    assert_same_history(history, reference.validation_history, rtol=1e-10, atol=1e-12,
                        ignore=("seconds", "bytes_up", *FEDERATION_COLUMNS))
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    report, expected = summary["early_stopping"], reference.summary["early_stopping"]
    assert report == {**expected, "value": pytest.approx(expected["value"], rel=1e-10)}
    assert 0 < report["round"] < report["stopped_at"] < 40, "the test needs a run that stops"
    model, _ = out_files(tmp_path / "out")
    np.testing.assert_allclose(model["V"], reference.trained.model["V"], rtol=1e-10)
    with pytest.raises(ValueError, match="refit=false"):
        FederatedRun(spec=run.model_copy(update={"schedule": run.schedule.model_copy(
            update={"early_stopping": EarlyStopping()})}))
