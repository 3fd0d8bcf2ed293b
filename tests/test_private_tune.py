"""A private search (``fedmc tune --dp-epsilon E``): its accounting against Papernot and
Steinke's Theorem 2 (by hand and by brute force on a small mechanism), the secret number of
trials, the settings' draws, the fold-in choice (the exponential mechanism: its draws and its
Renyi divergence by brute force), tiny searches end to end, and that nothing of a trial or a
candidate it did not choose reaches the output folder."""

from __future__ import annotations

import csv
import json
import math
import re

import numpy as np
import pytest
from scipy.special import logsumexp

from fedmc.algorithms.spec import Choice, Range
from fedmc.errors import ConfigError
from fedmc.privacy.accounting import ORDERS, Plan, Spent, dp_accounting, epsilon
from fedmc.privacy.selection import (
    calibrate_search,
    choice_event,
    choose_by_score,
    draw_trials,
    halting_probability,
    rdp_of,
    search_epsilon,
)
from fedmc.tune import private
from fedmc.tune.space import FOLD_IN_POINTS, private_space

TRAINING = ["--space", "lam=0.1:30:log", "--space", "beta=0.01:3:log",
            "--space", "consensus=all,rated", "--space", "dual_init=paper,zeros"]
"""Training settings named for a search (a private search searches none unless named)."""


@pytest.fixture(scope="module")
def small(ratings_file, tmp_path_factory):
    path = ratings_file(tmp_path_factory.mktemp("small"), users=120, items=30)
    return ["--ratings", str(path), "--columns", "user_id,item_id,stars", "--rating-scale",
            "1,5", "--partition", "user", "--rounds", "4", "--dp-clip", "0.05", "-P", "rank=3",
            "--space", "gamma=off", "--space", "inner=off", "--algorithm", "fedmc-admm"]


def repeated(event, mean, shape):
    return rdp_of(dp_accounting.dp_event.RepeatAndSelectDpEvent(event, mean, shape))


@pytest.mark.parametrize("shape", [0.0, 0.5, 1.0])
def test_the_search_costs_what_theorem_2_says(shape):
    """Equation (1) by hand for a Gaussian trial (RDP lambda / (2 sigma^2)), minimised over
    lambdahat, then the smallest bound of any order at least as large."""
    sigma, mean = 3.0, 10.0
    orders = np.asarray(ORDERS, dtype=float)
    one = orders / (2 * sigma**2)
    gamma = halting_probability(mean, shape)
    if shape == 0:
        assert (1 / gamma - 1) / math.log(1 / gamma) == pytest.approx(mean, rel=1e-6)
    else:
        assert shape * (1 - gamma) / (gamma * (1 - gamma**shape)) == pytest.approx(mean,
                                                                                 rel=1e-6)
    hat = min((1 + shape) * (1 - 1 / lh) * eh + (1 + shape) * math.log(1 / gamma) / lh
              for lh, eh in zip(orders, one, strict=True))
    by_hand = one + hat + math.log(mean) / (orders - 1)
    by_hand = np.minimum.accumulate(by_hand[::-1])[::-1]
    got = repeated(dp_accounting.GaussianDpEvent(sigma), mean, shape)
    np.testing.assert_allclose(got, by_hand, rtol=1e-6)


def _renyi(p, q, order):
    """D_order(p || q) of two distributions on the same finite support (at each of an array of
    orders, an array)."""
    o = np.asarray(order, dtype=float)[..., None]
    return logsumexp(o * np.log(p) + (1 - o) * np.log(q), axis=-1) / (o[..., 0] - 1)


@pytest.mark.parametrize("shape", [0.0, 1.0])
def test_the_bound_holds_for_a_small_mechanism_by_brute_force(shape):
    """A trial with three outputs (ordered scores), its distribution on two neighbours; the
    exact distribution of the best of K trials (P[best <= y] = E[F(y)^K], K's probability
    generating function at the trial's CDF) and its Renyi divergence, both ways, at every
    order: never above the accountant's bound, which is far below K's mean times a trial's."""
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.4, 0.3, 0.3])
    mean = 5.0
    gamma = halting_probability(mean, shape)
    if shape == 1:
        def pgf(x):
            return gamma * x / (1 - (1 - gamma) * x)
    else:
        def pgf(x):
            return np.log1p(-(1 - gamma) * x) / math.log(gamma)

    def best(dist):
        return np.diff(np.concatenate(([0.0], pgf(np.cumsum(dist)))))

    orders = [o for o in ORDERS if o <= 64]
    rdp_q = [max(_renyi(p, q, o), _renyi(q, p, o)) for o in orders]
    accountant = dp_accounting.rdp.rdp_privacy_accountant
    bound = accountant._compute_rdp_repeat_and_select(orders, rdp_q, mean, shape)
    for o, b, one in zip(orders, bound, rdp_q, strict=True):
        exact = max(_renyi(best(p), best(q), o), _renyi(best(q), best(p), o))
        assert exact <= b + 1e-12, (o, exact, b)
        assert exact >= one / 20  # the selection does leak: the check is not vacuous


def test_the_search_spends_more_with_more_trials_and_less_with_more_noise():
    plan = Plan(20, 0.1, True, 0.5)
    eps = [search_epsilon(plan, 2.0, 2.0, mean, 0.0, 1e-6) for mean in (1, 3, 10, 30)]
    assert eps == sorted(eps) and eps[0] > epsilon(plan, 2.0, 1e-6)  # the score costs too
    assert search_epsilon(plan, 3.0, 2.0, 10, 0.0, 1e-6) < eps[2]
    assert search_epsilon(plan, 2.0, 2.0, 10, 1.0, 1e-6) > eps[2]  # (1 + eta) costs
    noise = calibrate_search(plan, 4.0, 1e-6, 2.0, 10, 0.0)
    assert search_epsilon(plan, noise, 2.0, 10, 0.0, 1e-6) <= 4.0
    assert search_epsilon(plan, 0.99 * noise, 2.0, 10, 0.0, 1e-6) > 4.0


@pytest.mark.parametrize("shape", [0.0, 1.0, 2.5])
def test_the_number_of_trials_has_the_accounted_mean(shape):
    rng = np.random.default_rng(0)
    ks = np.array([draw_trials(4.0, shape, rng) for _ in range(20000)])
    assert ks.min() >= 1
    assert ks.mean() == pytest.approx(4.0, rel=0.05)


def test_settings_are_drawn_in_their_ranges():
    rng = np.random.default_rng(0)
    space = {"rank": Range(2, 32, log=True, integer=True), "lam": Range(0.1, 30.0, log=True),
             "beta": Range(0.0, 1.0), "consensus": Choice(("all", "rated"))}
    draws = [private.draw_settings(space, rng) for _ in range(2000)]
    ranks = [d["rank"] for d in draws]
    assert all(isinstance(r, int) and 2 <= r <= 32 for r in ranks) and {2, 32} <= set(ranks)
    lams = np.log([d["lam"] for d in draws])
    assert lams.min() >= math.log(0.1) and lams.max() <= math.log(30)
    assert np.median(lams) == pytest.approx(0.5 * (math.log(0.1) + math.log(30)), abs=0.3)
    assert all(0 <= d["beta"] <= 1 for d in draws)
    assert 900 < sum(d["consensus"] == "all" for d in draws) < 1100


def test_a_tiny_private_search(invoke, monkeypatch, capsys, tmp_path, small):
    out = tmp_path / "tune"
    # 120 users: the DP defaults would fit the baseline (they know the population), so the
    # algorithm is named, as a private run on so few users must name it
    unnamed = small[:-2]
    assert unnamed[-2:] == ["--space", "inner=off"]
    code, _, err = invoke(monkeypatch, capsys, "tune", *unnamed, "--trials", "2",
                          "--dp-epsilon", "8", "--out", out, "--quiet")
    assert code == 2 and "add --algorithm fedmc-admm" in err, err
    # without a setting of its own the baseline is chosen, and it has nothing to choose
    plain = unnamed[:unnamed.index("-P")]
    code, _, err = invoke(monkeypatch, capsys, "tune", *plain, "--dp-epsilon", "8", "--out", out)
    assert code == 2 and "nothing to search for item-bias" in err, err
    assert "(--algorithm fedmc-admm fits factors anyway)" in err and len(err.splitlines()) == 1
    code, _, err = invoke(monkeypatch, capsys, "tune", *small, *TRAINING, "--trials", "2",
                          "--dp-epsilon", "8", "--out", out, "--quiet")
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir() if p.name != ".lock") == [
        "best", "best.json", "status.json"]
    best = json.loads((out / "best.json").read_text())
    assert set(best["settings"]) == {"lam", "beta", "consensus", "dual_init", "fold_lam"}
    assert best["metric"] == "validation_mse (noised)" and math.isfinite(best["value"])
    assert not {"trial", "best_round", "trials"} & set(best)
    privacy = best["privacy"]
    assert 7.9 < privacy["epsilon"]["outsiders"] <= 8.0 and privacy["private"]
    assert privacy["epsilon"]["clients"] is None
    assert privacy["search"]["trial_epsilon"] < 8.0
    summary = json.loads((out / "best" / "summary.json").read_text())
    assert summary["privacy"] == privacy
    config = json.loads((out / "best" / "config.json").read_text())
    assert config["private"] and config["params"]["lam"] == pytest.approx(best["settings"]["lam"])
    assert config["params"]["fold_lam"] == best["settings"]["fold_lam"]
    assert config["run"]["dp"]["noise"] == pytest.approx(privacy["search"]["noise"])
    code, _, err = invoke(monkeypatch, capsys, "evaluate", out / "best")
    assert code == 0, err


def test_a_private_search_without_training_settings_trains_once(invoke, monkeypatch, capsys,
                                                                 tmp_path, small):
    """No training setting named: one private run at the run's settings, then the fold-in
    choice, both accounted: the noise is the one calibrated for them, below the random
    search's, and no score is released."""
    out = tmp_path / "tune"
    runs, trained = [], []
    execute = private.execute

    def spy_execute(run, **kwargs):
        runs.append(run)
        trained.append(kwargs["loaded"][0])
        return execute(run, **kwargs)

    monkeypatch.setattr(private, "execute", spy_execute)
    code, shown, err = invoke(monkeypatch, capsys, "tune", *small, "--dp-epsilon", "8",
                          "--out", out)
    assert code == 0, err
    assert "one run at the given settings, then a choice of fold_lam" in err
    assert len(runs) == 1
    # trained on every training rating, the cut's too: the choice needs no other run
    assert trained[0].validation is None and runs[0].data.validation_fraction == 0
    cut = private.federated_data(runs[0].data.model_copy(update={"validation_fraction": 0.2}))[0]
    assert trained[0].train.nnz == cut.train.nnz + cut.validation.nnz
    best = json.loads((out / "best.json").read_text())
    assert set(best["settings"]) == {"fold_lam"} and best["value"] is None
    assert best["settings"]["fold_lam"] in best["privacy"]["search"]["fold_in_choice"][
        "candidates"]["fold_lam"]
    assert f" -P fold_lam={best['settings']['fold_lam']} " in best["command"], best["command"]
    how = best["privacy"]["search"]
    assert how["mechanism"] == "one private run at the given settings"
    assert 7.9 < best["privacy"]["epsilon"]["outsiders"] <= 8.0
    config = json.loads((out / "best" / "config.json").read_text())
    assert (best["run"], best["data"]) == (config["run"], config["data"])  # clients too
    assert best["validation_fraction"] == 0.2  # the cut the fold-in choice scored on
    summary = json.loads((out / "best" / "summary.json").read_text())
    assert summary["epsilon"] == best["privacy"]["epsilon"]["outsiders"]  # the search's
    history = list(csv.DictReader((out / "best" / "history.csv").open()))
    assert float(history[-1]["epsilon"]) < summary["epsilon"]  # the training's alone
    assert f"{summary['epsilon']:.4f}" in shown  # the terminal's is the search's
    assert config["params"]["fold_lam"] == best["settings"]["fold_lam"]
    assert config["params"]["lam"] == runs[0].params["lam"]  # training's lam untouched
    model = json.loads((out / "best" / "model.json").read_text())
    assert model["params"]["fold_lam"] == best["settings"]["fold_lam"]
    plan = private.plan_of(runs[0], cut)
    assert how["noise"] == pytest.approx(calibrate_search(
        plan, 8.0, 1e-6, private.SCORE_SCALE, None, private.SHAPE, 8 * private.CHOICE_SHARE))
    assert how["noise"] < calibrate_search(plan, 8.0, 1e-6, private.SCORE_SCALE, 2.0,
                                           private.SHAPE, 8 * private.CHOICE_SHARE)
    code, _, err = invoke(monkeypatch, capsys, "evaluate", out / "best")
    assert code == 0, err


def test_one_run_without_a_choice_spends_what_a_run_spends():
    plan = Plan(20, 0.1, True, 0.5)
    assert search_epsilon(plan, 2.0, 2.0, None, 0.0, 1e-6) == pytest.approx(
        Spent(plan, 2.0, 1e-6)(), rel=1e-9)
    assert search_epsilon(plan, 2.0, 2.0, None, 0.0, 1e-6, 0.5) > Spent(plan, 2.0, 1e-6)()


def test_the_fold_in_choice_is_the_exponential_mechanism():
    """Draws at the frequencies exp(-epsilon s / B) normalised."""
    scores, bound, eps = np.array([10.0, 12.0, 16.0, 10.5]), 4.0, 1.5
    rng = np.random.default_rng(1)
    picks = np.bincount([choose_by_score(scores, bound, eps, rng) for _ in range(40000)],
                        minlength=4) / 40000
    want = np.exp(-eps * scores / bound)
    np.testing.assert_allclose(picks, want / want.sum(), atol=0.01)


def test_the_fold_in_choice_costs_no_more_than_its_zcdp_bound():
    """Brute force: random scores, a neighbour that moves every score the same way by at most
    B (one user's clipped error, present or absent); the Renyi divergence of the two choice
    distributions, both ways, at every order: within lambda epsilon^2 / 8, and close to it on
    the worst case (one candidate moved by B, the rest not)."""
    rng = np.random.default_rng(0)
    bound, eps = 4.0, 0.5
    orders = np.array([o for o in ORDERS if 1 < o <= 256])
    zcdp = rdp_of(choice_event(eps))
    cap = np.array([r for o, r in zip(ORDERS, zcdp, strict=True) if 1 < o <= 256])

    def dist(s):
        w = np.exp(-eps * (s - s.min()) / bound)
        return w / w.sum()

    worst = 0.0
    for _ in range(300):
        s = rng.uniform(0, 50, size=int(rng.integers(2, 8)))
        t = rng.uniform(0, bound, size=len(s)) if rng.random() < 0.5 else \
            bound * (rng.random(len(s)) < 0.5)
        p, q = dist(s + t), dist(s)
        d = np.maximum(_renyi(p, q, orders), _renyi(q, p, orders))
        assert np.all(d <= cap + 1e-12), orders[d > cap + 1e-12]
        worst = max(worst, float(np.max(d / cap)))
    assert worst > 0.2  # the bound is not vacuous on these draws


def test_a_private_search_chooses_training_settings_named_and_the_fold_in():
    training, fold_in = private_space("fedmc-admm", {}, {})
    assert training == {} and set(fold_in) == {"fold_lam"}
    training, fold_in = private_space("fedmc-admm", {"lam": "1:4:log",
                                                     "fold_lam": "0.1:10:log"}, {})
    assert training == {"lam": Range(1.0, 4.0, log=True)}
    assert fold_in["fold_lam"].values == pytest.approx(
        tuple(np.geomspace(0.1, 10, FOLD_IN_POINTS)))
    training, fold_in = private_space("fedmc-admm", {"lam": "1:4"}, {"fold_lam": 0.5})
    assert fold_in == {}
    with pytest.raises(ConfigError, match="nothing to search for fedmc-admm in a private"):
        private_space("fedmc-admm", {"fold_lam": "off"}, {})


def _shown(value: float, published: str) -> bool:
    """Whether ``value`` appears in ``published`` in full, or to 4 digits as a number of its
    own (not digits inside another number)."""
    short = re.escape(f"{value:.4g}")
    return repr(value) in published or re.search(rf"(?<![\d.]){short}(?![\d])",
                                                 published) is not None


def test_nothing_of_the_other_trials_is_published(invoke, monkeypatch, capsys, tmp_path,
                                                  small):
    """Four trials (K forced), every score and every setting drawn recorded: only the chosen
    trial's appear in any file of the output folder or in what the command printed."""
    scores, drawn, sums = [], [], []
    score, draw, choose = private.noised_score, private.draw_valid, private.choose_by_score

    def spy_score(*args):
        scores.append(score(*args))
        return scores[-1]

    def spy_draw(*args):
        drawn.append(draw(*args))
        return drawn[-1]

    def spy_choose(values, *args):
        sums.extend(values)
        return choose(values, *args)

    monkeypatch.setattr(private, "draw_trials", lambda *args: 4)
    monkeypatch.setattr(private, "noised_score", spy_score)
    monkeypatch.setattr(private, "draw_valid", spy_draw)
    monkeypatch.setattr(private, "choose_by_score", spy_choose)
    out = tmp_path / "tune"
    code, stdout, err = invoke(monkeypatch, capsys, "tune", *small, *TRAINING, "--trials", "2",
                               "--dp-epsilon", "8", "--out", out)
    assert code == 0, err
    assert len(scores) == 4
    chosen = int(np.argmin(scores))
    published = stdout + err + "".join(
        p.read_text(errors="replace") for p in out.rglob("*") if p.is_file()
        and p.suffix != ".npz")
    assert repr(scores[chosen]) in published
    for i, (s, settings) in enumerate(zip(scores, drawn, strict=True)):
        if i != chosen:
            assert not _shown(s, published)
            for value in settings.values():
                if isinstance(value, float):  # a choice's values are the space's, published
                    assert repr(value) not in published
    assert len(sums) == 5  # fold_lam's candidates: none of their sums, nor their means
    for total in sums:
        assert not _shown(float(total), published) and not _shown(float(total) / 120, published)


def test_refused_in_a_private_search(invoke, monkeypatch, capsys, tmp_path, small):
    for args, message in ((["--pruner", "median"], "--pruner: a private search"),
                          (["--storage", "sqlite:///x.db"], "--storage: a private search"),
                          (["--timeout", "60"], "--timeout: a private search"),
                          (["--study-name", "s"], "--study-name: a private search"),
                          (["--dp-noise", "2"], "--dp-noise: a private search"),
                          (["--early-stopping"], "--early-stopping: a private trial"),
                          (["--validation-fraction", "0"], "--validation-fraction: a private"),
                          (["--trials", "3"], "--trials: a private search without training")):
        code, _, err = invoke(monkeypatch, capsys, "tune", *small, "--dp-epsilon", "8", *args,
                              "--out", tmp_path / "x")
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x").exists()

