"""``fedmc run`` saving the model, ``fedmc recommend`` and ``fedmc predict`` (issue 14,
acceptance 1 and 3), ranking columns, and a split given as two files."""

from __future__ import annotations

import csv
import io
import json
import resource
import subprocess
import sys
import time

import numpy as np
import pytest

from fedmc.model import load_model
from fedmc.run.data import DataSettings, federated_data


@pytest.fixture
def run_dir(monkeypatch, capsys, tmp_path, ratings_csv, invoke):
    out = tmp_path / "run"
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "--clients", 4,
                          "--rounds", 3, "--rank", 3, "--save-user-factors", "--ranking-k", 5,
                          "--out", out, "-q")
    assert code == 0, err
    assert "model.npz" in err
    return out


def test_run_saves_the_item_model_and_no_user_data_by_default(monkeypatch, capsys, tmp_path,
                                                              ratings_csv, invoke):
    out = tmp_path / "run"
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "--clients", 4,
                          "--rounds", 2, "--out", out, "-q")
    assert code == 0, err
    model = load_model(out)
    assert not model.has_user_factors and model.algorithm == "fedmc-admm"
    code, _, err = invoke(monkeypatch, capsys, "recommend", out, "--user", 1)
    assert code == 2 and "no user factors" in err and len(err.strip().splitlines()) == 1


def test_ranking_columns_in_the_last_history_row(run_dir):
    with open(run_dir / "history.csv") as fh:
        rows = list(csv.DictReader(fh))
    for column in ("precision@5", "recall@5", "ndcg@5", "map@5", "hit_rate@5", "coverage@5"):
        assert rows[0][column] == "" and 0 <= float(rows[-1][column]) <= 1, column
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["ndcg@5"] == pytest.approx(float(rows[-1]["ndcg@5"]))


def test_recommend_formats_agree(monkeypatch, capsys, run_dir, invoke):
    outputs = {}
    for fmt in ("table", "csv", "json"):
        code, out, err = invoke(monkeypatch, capsys, "recommend", run_dir, "--user", 3, "-n", 4,
                                "--format", fmt)
        assert code == 0, err
        outputs[fmt] = out
    listed = json.loads(outputs["json"])
    assert [r["rank"] for r in listed] == [1, 2, 3, 4]
    rows = list(csv.DictReader(io.StringIO(outputs["csv"])))
    assert [int(r["item"]) for r in rows] == [r["item"] for r in listed]
    assert all(str(r["item"]) in outputs["table"] for r in listed)


def test_predict_pairs(monkeypatch, capsys, tmp_path, run_dir, invoke):
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("userId,movieId\n3,1\n3,2\n7,30\n")
    code, out, err = invoke(monkeypatch, capsys, "predict", run_dir, "--pairs", pairs,
                            "--format", "json")
    assert code == 0, err
    got = [r["rating"] for r in json.loads(out)]
    want = load_model(run_dir).predict([3, 3, 7], [1, 2, 30])
    assert np.allclose(got, want, atol=1e-4)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--user", "100000"], "unknown user id"),
        (["--user", "-1"], "unknown user id"),
        (["--user", "abc"], "not an integer"),
        (["--user", "1.5"], "not an integer"),
        (["--user", "1", "-n", "0"], "positive integer"),
        (["--user", "1", "--ratings", "x.csv"], "one of them"),
        ([], "one of them"),
        (["--user", "1", "--format", "xml"], "--format"),
        (["--ratings", "absent.csv"], "file not found"),
    ],
)
def test_bad_input_exits_2_with_one_line(monkeypatch, capsys, run_dir, args, needle, invoke):
    code, _, err = invoke(monkeypatch, capsys, "recommend", run_dir, *args)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("text", "needle"),
    [("item,rating\n1,5\n999,4\n", "unknown item id '999'"),
     ("item,rating\n1,5\n1,4\n", "rated twice"),
     ("item,rating\n1,great\n", "not a number"),
     ("movieId\n1\n", "no rating column"),
     ("1,5\n2\n", "expected at least 2 fields")],
)
def test_bad_ratings_files_exit_2(monkeypatch, capsys, tmp_path, run_dir, text, needle, invoke):
    path = tmp_path / "mine.csv"
    path.write_text(text)
    code, _, err = invoke(monkeypatch, capsys, "recommend", run_dir, "--ratings", path)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


def test_predict_bad_pairs_and_missing_models(monkeypatch, capsys, tmp_path, run_dir, invoke):
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("user,item\n3,1\n3,77777\n")
    code, _, err = invoke(monkeypatch, capsys, "predict", run_dir, "--pairs", pairs)
    assert code == 2 and "unknown item id '77777'" in err
    code, _, err = invoke(monkeypatch, capsys, "predict", tmp_path, "--pairs", pairs)
    assert code == 2 and "no model.npz" in err


@pytest.mark.parametrize("flag", [["--ranking-k", "5"], ["--save-user-factors"]])
def test_boolean_runs_refuse_ranking_and_user_factors(monkeypatch, capsys, tmp_path, flag, invoke):
    code, _, err = invoke(monkeypatch, capsys, "run", "--algorithm", "felb", "--dataset",
                          "synthetic-boolean", "--clients", 4, "--rounds", 1, *flag,
                          "--out", tmp_path / "f", "-q")
    assert code == 2 and "need a factor model" in err
    assert not (tmp_path / "f").exists()


def test_boolean_runs_save_no_model(monkeypatch, capsys, tmp_path, invoke):
    out = tmp_path / "felb"
    code, _, err = invoke(monkeypatch, capsys, "run", "--algorithm", "felb", "--dataset",
                          "synthetic-boolean", "--clients", 4, "--rank", 2, "--rounds", 1,
                          "--out", out, "-q")
    assert code == 0, err
    assert (out / "history.csv").exists() and not (out / "model.npz").exists()


def test_run_on_train_and_test_files_with_user_split_ranking(monkeypatch, capsys, tmp_path,
                                                            ratings_csv, invoke):
    lines = ratings_csv.read_text().splitlines()
    train, test = tmp_path / "train.csv", tmp_path / "test.csv"
    train.write_text("\n".join(lines[:1] + lines[1::4] + lines[2::4] + lines[3::4]) + "\n")
    test.write_text("\n".join(lines[:1] + lines[4::4]) + "\n")
    out = tmp_path / "fixed"
    code, _, err = invoke(monkeypatch, capsys, "run", "--algorithm", "als", "--train", train,
                          "--test", test, "--clients", 3, "--ranking-k", 10, "--out", out, "-q")
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["data"]["test_ratings"] + config["data"]["test_dropped_unseen_user"] + (
        config["data"]["test_dropped_unseen_item"]) == len(lines[4::4])
    assert "ndcg@10" in json.loads((out / "summary.json").read_text())
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "--split",
                          "user", "--clients", 3, "--rounds", 2, "--ranking-k", 3,
                          "--out", tmp_path / "user", "-q")
    assert code == 0, err


# --------------------------------------------------------------------------- acceptance 1


def fedmc(*args: str) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run ``fedmc ARGS``; the result, its wall seconds and its CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "fedmc", *args], capture_output=True,
                          text=True, timeout=600)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done, wall, cpu


@pytest.mark.realdata
def test_acceptance_run_then_recommend_on_ml_100k(tmp_path, require_shared_data):
    data_dir = require_shared_data("ml-100k").parent
    out = tmp_path / "D"
    done, _, _ = fedmc("run", "--dataset", "ml-100k", "--data-dir", str(data_dir), "--rounds",
                       "50", "--save-user-factors", "--out", str(out), "-q")
    assert done.returncode == 0, done.stderr
    mine = tmp_path / "F.csv"  # a user who is not in the data: Star Wars fan, no Toy Story
    mine.write_text("item,rating\n50,5\n172,5\n181,5\n1,1\n121,2\n")
    args = ("recommend", str(out), "--ratings", str(mine), "-n", "10", "--format", "json",
            "--data-dir", str(data_dir))
    fedmc(*args)  # warm the caches
    done, wall, cpu = fedmc(*args)
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert len(listed) == 10 and not {r["item"] for r in listed} & {50, 172, 181, 1, 121}
    assert all(r["title"] for r in listed)
    assert cpu < 2.0, (cpu, wall)  # CPU time: the wall time depends on the machine's load
    done, _, _ = fedmc("recommend", str(out), "--user", "1", "-n", "10", "--format", "csv")
    assert done.returncode == 0, done.stderr
    items = [int(r["item"]) for r in csv.DictReader(io.StringIO(done.stdout))]
    data, _ = federated_data(DataSettings(dataset="ml-100k", data_dir=data_dir))
    row = int(np.flatnonzero(data.user_ids == 1)[0])
    trained = data.item_ids[data.train.indices[data.train.indptr[row]:
                                               data.train.indptr[row + 1]]]
    assert len(items) == 10 and not set(items) & set(trained.tolist())


@pytest.mark.parametrize("algorithm", ["fedmavg", "rfrec"])
def test_other_factor_models_save_rank_and_fold_in(monkeypatch, capsys, tmp_path,
                                                   ratings_csv, algorithm, invoke):
    out = tmp_path / algorithm
    code, _, err = invoke(monkeypatch, capsys, "run", "--algorithm", algorithm, "--ratings",
                          ratings_csv, "--clients", 4, "--rounds", 2, "--rank", 3,
                          "--save-user-factors", "--ranking-k", 3, "--out", out, "-q")
    assert code == 0, err
    assert "ndcg@3" in json.loads((out / "summary.json").read_text())
    code, stdout, err = invoke(monkeypatch, capsys, "recommend", out, "--user", 1, "-n", 3,
                               "--format", "json")
    assert code == 0 and len(json.loads(stdout)) == 3, err
    mine = tmp_path / "mine.csv"
    mine.write_text("item,rating\n1,5\n")
    code, stdout, err = invoke(monkeypatch, capsys, "recommend", out, "--ratings", mine, "-n", 3,
                               "--format", "json")
    assert code == 0, err
    assert len(json.loads(stdout)) == 3 and 1 not in [r["item"] for r in json.loads(stdout)]
