"""The Skellam mechanism of the secure sum (:mod:`fedmc.privacy.skellam`): its accounting
against the exact divergence and ``dp_accounting``'s privacy loss distribution, its field, its
integers through Flower's quantizer, and the simulation's integer sum against a per-client
loop."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from fedmc.core.protocol import Message
from fedmc.core.uploads import RowPatch, Stacked
from fedmc.errors import ConfigError
from fedmc.federation.aggregator import Aggregator
from fedmc.federation.population import Placement
from fedmc.privacy.accounting import ORDERS, Plan, Spent, UserDP
from fedmc.privacy.skellam import MODULUS, TAIL_SIGMAS, SkellamSum, member_stream


def _log_pmf(mu: float, ks: np.ndarray) -> np.ndarray:
    """log P(k) of the Skellam distribution of variance ``mu`` (two Poisson of mean mu/2):
    ``e^-mu I_k(mu)``, with the exponentially scaled Bessel function for stability."""
    return np.log(special.ive(np.abs(ks), mu))


def _exact_rdp(mu: float, delta: int, alpha: int) -> float:
    """The Renyi divergence of order ``alpha`` between Sk(mu) shifted by ``delta`` and Sk(mu),
    summed over thirty standard deviations and more (the rest adds below 1e-50)."""
    width = int(30 * math.sqrt(mu) + 10 * delta + 60)
    ks = np.arange(-width, width + 1)
    p, q = _log_pmf(mu, ks - delta), _log_pmf(mu, ks)
    assert np.isfinite(p).all() and np.isfinite(q).all()
    return float(special.logsumexp(alpha * p + (1 - alpha) * q) / (alpha - 1))


@pytest.mark.parametrize(("mu", "delta"), [(4.0, 1), (16.0, 2), (100.0, 3), (900.0, 5)])
def test_the_rdp_bound_holds_against_the_exact_divergence(mu, delta):
    """Theorem 3.5 of the Skellam paper, one dimension (``Delta_1 = Delta_2``): the bound
    is above the exact Renyi divergence at every order, and within 20% of it where the
    noise is large against the sensitivity (the Gaussian term dominates)."""
    code = SkellamSum(scale=1.0, dim=1, sensitivity=float(delta), variance=mu)
    orders = [2, 3, 5, 8, 13, 21, 32]
    bound = code.rdp(orders)
    exact = np.array([_exact_rdp(mu, delta, a) for a in orders])
    assert np.all(bound >= exact * (1 - 1e-9)), (bound, exact)
    if mu / delta**2 >= 25:
        assert np.all(bound <= 1.2 * exact), (bound, exact)


def test_the_accounted_epsilon_bounds_the_privacy_loss_distribution():
    """(epsilon, delta) of six compositions of the one-dimensional mechanism: ours (RDP,
    converted as the accountant converts it) is at least the exact value of ``dp_accounting``'s
    privacy loss distribution of the two probability mass functions, composed, and not much
    more (RDP's conversion costs some)."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    mu, delta_1, rounds, delta = 400.0, 4, 6, 1e-6
    code = SkellamSum(scale=1.0, dim=1, sensitivity=float(delta_1), variance=mu)
    width = int(30 * math.sqrt(mu) + 10 * delta_1 + 60)
    ks = np.arange(-width, width + 1)
    lower = dict(zip(ks.tolist(), _log_pmf(mu, ks).tolist(), strict=True))
    upper = dict(zip(ks.tolist(), _log_pmf(mu, ks - delta_1).tolist(), strict=True))
    exact = pld.from_two_probability_mass_functions(lower, upper).self_compose(
        rounds).get_epsilon_for_delta(delta)
    plan = Plan(rounds, 1.0, setup=False)
    ours = Spent(plan, 1.0, delta, lambda phase, z: code.rdp(ORDERS))()
    assert exact <= ours <= 1.5 * exact, (exact, ours)


@pytest.mark.parametrize(("members", "dim", "noise"), [(2, 10, 0.5), (6040, 40_000, 1.1),
                                                         (100_000, 200_000, 3.0)])
def test_the_scale_keeps_the_sum_inside_the_field(members, dim, noise):
    """Every entry of a sum of ``members`` rounded uploads of norm at most the clip, plus
    :data:`TAIL_SIGMAS` standard deviations of the noise, lies in ``[-M/2, M/2)``; the
    rounding's share of the sensitivity is small."""
    clip = 0.37
    code = SkellamSum.of(clip, noise, dim, members)
    largest = members * (code.scale * clip + 0.5) + TAIL_SIGMAS * math.sqrt(code.variance)
    assert largest <= MODULUS / 2 * (1 + 1e-12)
    assert math.isclose(code.sensitivity, code.scale * clip + math.sqrt(dim) / 2)
    assert math.sqrt(dim) / 2 <= code.sensitivity / 6


def test_a_field_too_small_for_the_federation_is_refused():
    with pytest.raises(ConfigError, match="field"):
        SkellamSum.of(1.0, 1.0, 1_000_000, 5_000_000)


def test_wrapped_integers_sum_and_decode_exactly():
    """Members' integers reduced modulo the field, summed without reduction (as the secure
    sum's larger modulus does), decode to the exact sum over the scale, negative entries
    included."""
    rng = np.random.default_rng(3)
    code = SkellamSum.of(1.0, 1.0, 50, 20)
    uploads = rng.normal(0, 0.1, (20, 50))
    integers = [code.integers(x) + code.noise((50,), 1 / 20, rng) for x in uploads]
    wrapped = sum(code.wrap(z) for z in integers)
    assert np.array_equal(code.decode(wrapped) * code.scale, sum(integers))
    assert np.abs(code.decode(wrapped) - uploads.sum(0)).max() < 20 * math.sqrt(
        code.variance) / code.scale


def test_members_integers_pass_flowers_quantizer_exactly():
    """A member's integers ``w`` travel as ``w / 2^29 - 1`` and come out of SecAgg+'s stock
    quantizer as ``w`` itself, at the ends of the field too; the server reads the sum back
    from the workflow's dequantized mean."""
    from flwr.common.secure_aggregation.quantization import dequantize, quantize

    from fedmc.flower.secagg import HALF_FIELD, decode_integers, encode_integers

    w = np.array([0, 1, 2, HALF_FIELD - 1, HALF_FIELD, MODULUS - 2, MODULUS - 1], float)
    vector, names = encode_integers({"a": w})
    assert names == ["a"]
    assert np.array_equal(quantize(vector, 1.0, MODULUS)[0], w)
    members = 3
    total = np.array([w, w[::-1], w], dtype=np.int64).sum(0)
    mean = (dequantize([total], 1.0, MODULUS)[0] - (members - 1)) / members  # the workflow's
    assert np.array_equal(decode_integers(mean * members, members), total)


def test_the_members_shares_add_up_to_the_noise_of_the_sum():
    """Seven members' Skellam shares of a sum: integers distributed as Sk(mu) (a chi-square
    test of their counts against the Skellam distribution of variance ``mu``)."""
    code = SkellamSum(scale=1.0, dim=1, sensitivity=1.0, variance=70.0)
    streams = [member_stream(5, c, 1, "round") for c in range(7)]
    total = sum(code.shares({"a": (40_000,)}, 7, rng)["a"] for rng in streams)
    assert np.array_equal(total, np.rint(total))
    edges = np.arange(-25, 27) - 0.5  # +-3 standard deviations, the tails in the end bins
    observed = np.histogram(np.clip(total, -25, 25), edges)[0]
    cdf = stats.skellam(35.0, 35.0).cdf(np.floor(edges[1:-1]))
    expected = np.diff(np.concatenate([[0.0], cdf, [1.0]])) * len(total)
    assert stats.chisquare(observed, expected).pvalue > 1e-4


def test_each_client_is_the_upload_the_client_would_form():
    """The simulation's per-client uploads of a batch (dense part, rows and clipping scale)
    equal, bit for bit, each client's own sum of its upload (a plain loop, one client at a
    time)."""
    rng = np.random.default_rng(0)
    s, n, r = 5, 7, 3
    ptr = np.array([0, 2, 2, 5, 6, 8])
    index = np.array([0, 3, 1, 2, 6, 4, 0, 5])
    stacked = Stacked((n, r), rng.normal(size=(s, n, r)),
                      RowPatch(ptr, index, rng.normal(size=(8, r))), rng.random(s))
    blocks = np.concatenate(list(stacked.each_client(block=2)))
    for k in range(s):
        one = Stacked((n, r), stacked.dense[k:k + 1],
                      RowPatch(ptr[k:k + 2] - ptr[k], index[ptr[k]:ptr[k + 1]],
                               stacked.rows.values[ptr[k]:ptr[k + 1]]), stacked.scale[k:k + 1])
        assert np.array_equal(blocks[k], one.weighted_sum(np.ones(1)))


class _Algorithm:
    """What an aggregator reads of an algorithm: its uploads' shapes and local noise."""

    @staticmethod
    def upload_shapes(cfg, info):
        return {"a": (30, 4), "b": (10,)}

    @staticmethod
    def local_noise(cfg, info):
        return {}


class _Info:
    n_clients = 50


def test_a_skellam_run_is_accounted_by_its_own_bound_for_every_party():
    """Under the Skellam mechanism the budget is the same against outsiders and the server
    (no credit for sampling), at most the promised epsilon, with a noise multiplier a little
    above the Gaussian's for the same known cohorts."""
    plan = Plan(5, 0.3, setup=True, setup_scale=2.0)
    dp = UserDP(clip=0.5, epsilon=4.0, mechanism="skellam")
    aggregator = Aggregator(_Algorithm(), None, _Info(), dp=dp, plan=plan)
    guarantee = aggregator.guarantee()["epsilon"]
    assert guarantee["server"] == guarantee["outsiders"] <= 4.0
    gaussian = UserDP(clip=0.5, epsilon=4.0).multiplier(plan)
    assert gaussian <= aggregator.noise <= 1.01 * gaussian


def test_a_secure_sum_refuses_gaussian_shares():
    dp = UserDP(clip=0.5, noise=1.0, mechanism="gaussian")
    with pytest.raises(ConfigError, match="skellam"):
        Aggregator(_Algorithm(), None, _Info(), dp=dp, plan=Plan(2, 1.0, setup=False),
                   placement=Placement("clients", "clients"))


def test_the_simulated_release_is_the_members_integer_sum():
    """In a reproducible run the simulation's release is, to the last integer, what the
    members of the exchange add to a secure sum (each its upload's integers and its noise
    share from its own stream, modulo the field; :meth:`Aggregator.member_integers`, one
    client at a time), decoded."""
    from fedmc.federation.population import Exchange

    dp = UserDP(clip=0.5, noise=1.2, mechanism="skellam", reproducible=True)
    aggregator = Aggregator(_Algorithm(), None, _Info(), dp=dp,
                            plan=Plan(2, 1.0, setup=False), rng=np.random.default_rng(7))
    rng = np.random.default_rng(1)
    compute = np.array([2, 5, 9, 11], dtype=np.int64)
    uploads = {"a": Stacked((30, 4), rng.normal(0, 0.05, (4, 30, 4))),
               "b": Stacked((10,), rng.normal(0, 0.05, (4, 10)))}
    msg = Message(1, "round", compute, compute, {})
    uploads = aggregator.prepare(msg, uploads)
    summed = aggregator.sum([(uploads, np.ones(4))], msg)
    released = aggregator.release(Exchange(summed, 0, msg), msg, np.random.default_rng(2))
    settings = aggregator.secure_settings(msg)
    total = {"a": 0.0, "b": 0.0}
    for k, client in enumerate(compute.tolist()):
        own = {name: stacked.weighted_sum(np.eye(4)[k]) for name, stacked in uploads.items()}
        sent = aggregator.member_integers(own, client, msg, settings, aggregator.secret)
        assert all(np.all((v >= 0) & (v < MODULUS)) for v in sent.values())
        total = {name: total[name] + sent[name] for name in total}
    code = aggregator.integer_form("round", 1.2)
    for name in total:
        assert np.array_equal(released[name], code.decode(total[name]))


def test_fedmc_run_simulates_the_secure_sums_mechanism(monkeypatch, capsys, tmp_path,
                                                       ratings_csv, invoke):
    """``--dp-mechanism skellam`` in a simulation: the summary names the mechanism and gives
    every party the same epsilon, within the budget."""
    import json

    code, _, _ = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "--clients", 8,
                        "--rounds", 3, "--dp-epsilon", 4, "--dp-clip", 1, "--dp-unit",
                        "client", "--dp-mechanism", "skellam", "--rating-scale", "1,5",
                        "--out", tmp_path / "o", "-q")
    assert code == 0
    privacy = json.loads((tmp_path / "o" / "summary.json").read_text())["privacy"]
    eps = privacy["epsilon"]
    assert privacy["mechanism"] == "skellam"
    assert eps["server"] == eps["outsiders"] <= 4.0


def test_a_secure_federation_refuses_the_gaussian_mechanism_in_the_flags_words(
        monkeypatch, capsys, tmp_path, ratings_csv, invoke):
    code, _, err = invoke(monkeypatch, capsys, "federate", "local", "--ratings", ratings_csv,
                          "--rating-scale", "1,5", "--clients", 8, "--dp-epsilon", 8,
                          "--dp-clip", 1, "--dp-unit", "client", "--dp-mechanism", "gaussian",
                          "--secagg", "--out", tmp_path / "o", "--work", tmp_path / "w")
    lines = err.strip().splitlines()
    assert code == 2 and "--dp-mechanism gaussian" in lines[-1] and "skellam" in lines[-1]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("dense", [True, False])
def test_the_rounded_sum_is_the_sum_of_each_clients_rounded_upload(dense):
    """The simulation's integer sum of a batch (rows alone: rounded where stored) equals a
    plain loop over the clients: each client's own upload, scaled, rounded, added."""
    rng = np.random.default_rng(4)
    s, n, r, gamma = 6, 9, 2, 1e4
    ptr = np.array([0, 3, 3, 5, 6, 9, 11])
    index = np.array([0, 3, 8, 1, 3, 6, 0, 3, 5, 8, 2])
    stacked = Stacked((n, r), rng.normal(size=(s, n, r)) if dense else None,
                      RowPatch(ptr, index, rng.normal(size=(11, r))), rng.random(s))
    plain = sum(np.rint(gamma * stacked.weighted_sum(np.eye(s)[k])) for k in range(s))
    assert np.array_equal(stacked.rounded_sum(gamma), plain)


def test_a_federations_lost_members_shares_are_made_up_by_the_server():
    """In a federation the members add the noise; the server adds only the lost members'
    part, ``Sk(mu (m - m') / m)``: none when every member's share arrived."""
    from fedmc.core.uploads import secure_sum
    from fedmc.federation.population import Exchange

    dp = UserDP(clip=0.5, noise=1.2)
    aggregator = Aggregator(_Algorithm(), None, _Info(), dp=dp, plan=Plan(2, 1.0, setup=False),
                            placement=Placement("clients", "clients"))
    members = np.arange(50, dtype=np.int64)
    msg = Message(1, "round", members, members, {})
    code = aggregator.integer_form("round", aggregator.multiplier(msg))
    arrived = secure_sum({"a": np.full((30, 4), 7.0), "b": np.full(10, -3.0)}, 50)
    rng = np.random.default_rng(5)
    whole = aggregator.release(Exchange(arrived, 0, msg, dp_share=1.0), msg, rng)
    assert all(np.array_equal(whole[k], code.decode(arrived[k])) for k in ("a", "b"))
    made_up = np.concatenate([
        np.concatenate([(released[k] - whole[k]).ravel() for k in ("a", "b")])
        for released in (aggregator.release(Exchange(arrived, 0, msg, dp_share=0.75), msg, rng)
                         for _ in range(20))]) * code.scale
    assert np.abs(made_up - np.rint(made_up)).max() < 1e-3  # integers, over the scale
    assert abs(made_up.var() / (0.25 * code.variance) - 1.0) < 0.1


def test_a_private_search_refuses_the_skellam_mechanism(monkeypatch, capsys, tmp_path,
                                                        ratings_csv, invoke):
    """A private search accounts its trials as Gaussian mechanisms: under the Skellam
    mechanism it would understate its epsilon, so it is refused (exit 2, the flag's words),
    before anything is written."""
    code, _, err = invoke(monkeypatch, capsys, "tune", "--ratings", ratings_csv,
                          "--rating-scale", "1,5", "--clients", 8, "--dp-unit", "client",
                          "--dp-epsilon", 8, "--dp-clip", 0.5, "--dp-mechanism", "skellam",
                          "--out", tmp_path / "t", "-q")
    assert code == 2 and "--dp-mechanism skellam" in err.strip().splitlines()[-1]
    assert not (tmp_path / "t").exists()
