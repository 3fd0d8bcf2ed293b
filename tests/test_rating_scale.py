"""Ratings on a stated scale: a stated or known scale refuses ratings outside it by file and
line; without one, the inferred scale is recorded and shown, ratings far outside the bulk are
warned of, and a private run releases neither."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedmc.data.bulk import outlying
from fedmc.data.loaders import load_movielens, load_ratings_file
from fedmc.data.registry import load_dataset
from fedmc.errors import DataError


def _ratings(path, values):
    """A ratings CSV of ``values`` (user k % 30, item k // 30 + 1, value), header first."""
    lines = ["user,item,rating"] + [f"{k % 30},{k // 30 + 1},{v:g}" for k, v in enumerate(values)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _on_scale(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, 6, n).astype(float)


@pytest.mark.parametrize("far", [17.0, -3.0, 100.0])
def test_a_rating_far_from_a_1_to_5_bulk_is_named(far):
    values = _on_scale(500)
    assert outlying(values) is None  # every rating on the scale lies in the bulk
    values[123] = far
    found = outlying(values)
    assert found is not None and found.count == 1 and found.examples == (far,)
    assert found.bulk[0] < 1 and found.bulk[1] > 5


def test_a_wide_continuous_scale_has_no_outliers():
    values = np.random.default_rng(1).uniform(-10, 10, 2000)  # Jester-like
    assert outlying(values) is None


def test_a_text_file_out_of_scale_is_refused_by_its_line(tmp_path):
    path = _ratings(tmp_path / "r.csv", [3, 4, 5, 17, 2])
    with pytest.raises(DataError, match=r"r\.csv:5: rating 17 lies outside the rating scale "
                                        r"\[1, 5\]"):
        load_ratings_file(path, value_range=(1, 5))
    assert load_ratings_file(path).values.max() == 17  # no scale: read as it is


def test_a_parquet_file_out_of_scale_is_refused_by_its_row(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "r.parquet"
    pq.write_table(pa.table({"user": [1, 2, 3], "item": [1, 1, 2], "rating": [1.0, -3.0, 2.0]}),
                   path)
    with pytest.raises(DataError, match=r"row 2: rating -3 lies outside"):
        load_ratings_file(path, value_range=(1, 5))


def test_a_movielens_file_is_read_on_its_scale(tmp_path):
    path = tmp_path / "u.data"
    path.write_text("1\t1\t5\t0\n1\t2\t4\t0\n2\t1\t0\t0\n")
    with pytest.raises(DataError, match=r"u\.data:3: rating 0 lies outside"):
        load_movielens(path, value_range=(1, 5))
    assert load_movielens(path).n_ratings == 3


def test_a_named_set_refuses_ratings_outside_its_scale(tmp_path):
    folder = tmp_path / "ml-100k"
    folder.mkdir()
    (folder / "u.data").write_text("1\t1\t5\t0\n1\t2\t100\t0\n")
    with pytest.raises(DataError, match=r"u\.data:2: rating 100 lies outside the rating scale "
                                        r"\[1, 5\]"):
        load_dataset("ml-100k", data_dir=tmp_path, download=False, cache_dir=tmp_path / "c")


@pytest.mark.parametrize("which", ["--ratings", "--test"])
def test_run_refuses_a_rating_outside_the_stated_scale(monkeypatch, capsys, tmp_path, invoke,
                                                       which):
    good = _ratings(tmp_path / "good.csv", _on_scale(300))
    bad_values = _on_scale(300, seed=1)
    bad_values[40] = 17
    bad = _ratings(tmp_path / "bad.csv", bad_values)
    files = (["--ratings", bad] if which == "--ratings" else
             ["--train", good, "--test", bad])
    code, _, err = invoke(monkeypatch, capsys, "run", *files, "--rating-scale", "1,5",
                          "--clients", 3, "--rounds", 1, "--out", tmp_path / "o", "-q")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "bad.csv:42: rating 17 lies outside the rating scale [1, 5]" in err
    assert not (tmp_path / "o").exists()


def test_a_scale_lo_above_hi_is_refused_by_its_flag(monkeypatch, capsys, tmp_path, invoke):
    path = _ratings(tmp_path / "r.csv", _on_scale(300))
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", path, "--rating-scale",
                          "5,1", "--out", tmp_path / "o", "-q")
    assert code == 2 and err.count("\n") == 1 and "--rating-scale" in err and "LO < HI" in err


def test_the_inferred_scale_is_recorded_shown_and_its_outliers_warned(monkeypatch, capsys,
                                                                      tmp_path, invoke):
    values = _on_scale(600)
    values[[7, 300]] = (17, 100)
    path = _ratings(tmp_path / "r.csv", values)
    out = tmp_path / "o"
    code, shown, err = invoke(monkeypatch, capsys, "run", "--ratings", path, "--clients", 3,
                              "--rounds", 1, "--test-fraction", 0.01, "--out", out)
    assert code == 0, err
    data = json.loads((out / "config.json").read_text())["data"]
    assert data["value_range_from"] == "training ratings"
    assert data["value_range"][1] >= 17  # at least one of them was drawn into training
    assert data["outlying_ratings"]["count"] >= 1
    warning = [line for line in err.splitlines() if "warning" in line]
    assert len(warning) == 1 and "far outside the bulk" in warning[0]
    assert "--rating-scale" in warning[0]
    assert "rating scale" in shown and "inferred from the training ratings" in shown


def test_a_stated_scale_is_recorded_as_such(monkeypatch, capsys, tmp_path, invoke):
    path = _ratings(tmp_path / "r.csv", _on_scale(300))
    out = tmp_path / "o"
    code, shown, err = invoke(monkeypatch, capsys, "run", "--ratings", path, "--clients", 3,
                              "--rounds", 1, "--rating-scale", "0,10", "--out", out)
    assert code == 0, err
    data = json.loads((out / "config.json").read_text())["data"]
    assert data["value_range"] == [0, 10] and data["value_range_from"] == "rating scale"
    assert "0 to 10 (stated)" in shown and "warning" not in err


@pytest.mark.slow  # the DP plan's accounting: about 2 s
def test_a_private_run_releases_no_inferred_scale(monkeypatch, capsys, tmp_path, invoke):
    values = _on_scale(600)
    values[[7, 300]] = (17, 100)
    path = _ratings(tmp_path / "r.csv", values)
    out = tmp_path / "o"
    code, shown, err = invoke(monkeypatch, capsys, "run", "--ratings", path, "--clients", 6,
                              "--rounds", 1, "--normalize", "none", "--sampling", "bernoulli",
                              "--participation", 0.5, "--dp-epsilon", 8, "--dp-clip", 1,
                              "--dp-unit", "client", "--out", out)
    assert code == 0, err
    data = json.loads((out / "config.json").read_text())["data"]
    assert "value_range" not in data and "outlying_ratings" not in data
    assert "warning" not in err and "rating scale" not in shown
