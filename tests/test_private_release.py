"""A private run (user-level DP, secret noise) publishes only what its guarantee covers
(docs/privacy.md, "What a run publishes"): fresh noise whatever the seed, no exact count,
metric or timing, the guarantee stated in every output; the research option repeats exactly and
says it is not private; a guarantee per user is refused for clients of several users."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from fedmc.federation.aggregator import PUBLIC_COLUMNS

DP = ("-a", "fedmc-admm", "--partition", "user", "--rounds", 3, "--rank", 2, "--dp-epsilon", 4,
      "--dp-clip", 0.5, "--rating-scale", "1,5", "-q")  # named: 40 users would fit the baseline


def run(invoke, monkeypatch, capsys, out, ratings, *extra):
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings, *DP, "--out", out,
                          *extra)
    assert code == 0, err
    return {"config": json.loads((out / "config.json").read_text()),
            "summary": json.loads((out / "summary.json").read_text()),
            "model": json.loads((out / "model.json").read_text()),
            "V": np.load(out / "model.npz")["V"],
            "history": list(csv.DictReader(open(out / "history.csv")))}


def test_two_private_runs_with_one_seed_publish_different_models(monkeypatch, capsys, tmp_path,
                                                                 ratings_csv, invoke):
    a = run(invoke, monkeypatch, capsys, tmp_path / "a", ratings_csv)
    b = run(invoke, monkeypatch, capsys, tmp_path / "b", ratings_csv)
    assert a["config"]["run"]["seed"] == b["config"]["run"]["seed"] == 0
    assert not np.allclose(a["V"], b["V"])
    for out in (a, b):
        assert out["config"]["private"] and out["model"]["private"]
        assert out["summary"]["privacy"]["private"]
        assert out["summary"]["privacy"]["noise_seed"] == "secret"


def test_the_research_option_repeats_exactly_and_says_it_is_not_private(
        monkeypatch, capsys, tmp_path, ratings_csv, invoke):
    a = run(invoke, monkeypatch, capsys, tmp_path / "a", ratings_csv, "--dp-reproducible")
    b = run(invoke, monkeypatch, capsys, tmp_path / "b", ratings_csv, "--dp-reproducible")
    np.testing.assert_array_equal(a["V"], b["V"])
    for out in (a, b):
        assert out["config"]["private"] is False and out["model"]["private"] is False
        assert out["summary"]["privacy"]["private"] is False
        assert "test_rmse" in out["summary"]  # not private: its exact metrics are kept


def test_a_private_run_publishes_no_exact_count_metric_or_timing(monkeypatch, capsys, tmp_path,
                                                                 ratings_csv, invoke):
    out = run(invoke, monkeypatch, capsys, tmp_path / "o", ratings_csv)
    assert {c for row in out["history"] for c in row} <= set(PUBLIC_COLUMNS)
    summary = out["summary"]
    assert not {"test_rmse", "objective", "bytes_up", "seconds", "train_seconds",
                "total_seconds", "peak_memory_mb"} & set(summary)
    data = out["config"]["data"]
    assert not {"n_ratings", "train_ratings", "test_ratings"} & set(data)
    assert data["normalizer"]["kind"] == "public"
    assert out["model"]["value_range"] == [1.0, 5.0]  # the declared scale, not the data's
    eps = summary["privacy"]["epsilon"]
    # promised against the server (the default), which the simulation hands noised sums only
    assert summary["privacy"]["calibrated_against"] == "server"
    assert eps["outsiders"] == eps["clients"] <= eps["server"] <= 4.0
    assert float(out["history"][-1]["epsilon_server"]) == eps["server"]


def test_a_budget_against_outsiders_only_says_so_and_the_server_gets_more(
        monkeypatch, capsys, tmp_path, ratings_csv, invoke):
    """``--dp-against outsiders`` calibrates to the secret sampling's amplification: the
    run's notes say so, and the server's epsilon, printed beside it, exceeds the budget."""
    out = run(invoke, monkeypatch, capsys, tmp_path / "o", ratings_csv, "--dp-against",
              "outsiders", "--sampling", "bernoulli", "--participation", 0.5)
    privacy = out["summary"]["privacy"]
    assert privacy["calibrated_against"] == "outsiders"
    assert privacy["epsilon"]["outsiders"] <= 4.0 < privacy["epsilon"]["server"]
    assert any("--dp-against outsiders" in note for note in out["config"]["run"]["notes"])
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "--rounds", 2,
                          "--dp-noise", 1, "--dp-clip", 1, "--dp-against", "outsiders",
                          "--rating-scale", "1,5", "--out", tmp_path / "n", "-q")
    assert code == 2 and "--dp-against outsiders" in err and "--dp-epsilon" in err


def test_dp_per_user_over_clients_of_several_users_exits_2(monkeypatch, capsys, tmp_path,
                                                           ratings_csv, invoke):
    base = ("run", "--ratings", ratings_csv, "--partition", "random", "--clients", 8,
            "--sampling", "bernoulli", "--participation", 0.5, "--rounds", 2, "--rank", 2,
            "--dp-epsilon", 4, "--dp-clip", 0.5, "--rating-scale", "1,5", "-q")
    code, _, err = invoke(monkeypatch, capsys, *base, "--out", tmp_path / "a")
    assert code == 2 and "--dp-unit client" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "a" / "model.npz").exists()
    code, _, err = invoke(monkeypatch, capsys, *base, "--dp-unit", "client", "--out",
                          tmp_path / "b")
    assert code == 0, err
    privacy = json.loads((tmp_path / "b" / "summary.json").read_text())["privacy"]
    assert privacy["unit"] == "client"


def test_exact_ranking_metrics_are_not_part_of_a_private_run(monkeypatch, capsys, tmp_path,
                                                            ratings_csv, invoke):
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, *DP,
                          "--ranking-k", 5, "--out", tmp_path / "o")
    assert code == 2 and "fedmc evaluate" in err


@pytest.mark.parametrize("level", ["user", "client"])
def test_the_summary_table_states_the_guarantee(monkeypatch, capsys, tmp_path, ratings_csv,
                                                level, invoke):
    extra = ("--partition", "random", "--clients", 8, "--sampling", "bernoulli",
             "--participation", 0.5) if level == "client" else ("--partition", "user")
    code, out, err = invoke(monkeypatch, capsys, "run", "-a", "fedmc-admm", "--ratings",
                            ratings_csv, *extra, "--rounds", 2, "--rank", 2, "--dp-epsilon", 4,
                            "--dp-clip", 0.5,
                            "--dp-unit", level, "--rating-scale", "1,5", "--out", tmp_path / "o")
    assert code == 0, err
    assert f"per {level}" in out and "against the server" in out
