"""Tests of named data sets: data folder, downloads (against a local server), cache, CLI."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import sys
import time
import types
import zipfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedmc.cli.data import data_app, describe_ratings
from fedmc.data import registry
from fedmc.data.cache import cache_key, load_cached
from fedmc.data.registry import (
    dataset_files,
    dataset_names,
    download_dataset,
    load_dataset,
    resolve_data_dir,
)
from fedmc.errors import ConfigError, DataError
from fedmc.testing import Route, serve_routes

ML1M_LINES = "1::1193::5::978300760\n1::661::3::978302109\n2::1193::4::978298413\n"
PARSED = Path("xdg", "fedmc", "parsed")  # the parsed-array cache under the test's XDG folder


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Keep the user cache folder and $FEDMC_DATA away from the real home folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("FEDMC_DATA", raising=False)
    monkeypatch.delenv("FEDMC_CACHE", raising=False)


def make_zip(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return buffer.getvalue()


def md5(data: bytes) -> str:
    return "md5:" + hashlib.md5(data).hexdigest()


def point_at(monkeypatch, name: str, url: str, checksum: str | None) -> None:
    spec = dataclasses.replace(registry.DATASETS[name], url=url, checksum=checksum)
    monkeypatch.setitem(registry.DATASETS, name, spec)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


# --------------------------------------------------------------------------- data folder


def test_data_dir_resolution(tmp_path, monkeypatch):
    assert resolve_data_dir(tmp_path / "x") == tmp_path / "x"
    assert resolve_data_dir() == tmp_path / "xdg" / "fedmc"
    monkeypatch.setenv("FEDMC_DATA", str(tmp_path / "env"))
    assert resolve_data_dir() == tmp_path / "env"
    assert resolve_data_dir(tmp_path / "x") == tmp_path / "x"
    monkeypatch.delenv("FEDMC_DATA")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert resolve_data_dir() == Path.home() / ".cache" / "fedmc"


def test_official_layouts_found(tmp_path):
    layout = {
        "ml-100k": "ml-100k/u.data",
        "ml-1m": "ml-1m/ratings.dat",
        "ml-10m": "ml-10M100K/ratings.dat",
        "ml-20m": "ml-20m/ratings.csv",
        "ml-25m": "ml-25m/ratings.csv",
        "ml-32m": "ml-32m/ratings.csv",
        "ml-latest-small": "ml-latest-small/ratings.csv",
        "netflix": "netflix/training_set/mv_0000001.txt",
        "jester": "jester/jester_ratings.csv",
    }
    assert set(layout) | set(registry.SYNTHETIC_NAMES) == set(dataset_names())
    for name, relative in layout.items():
        assert dataset_files(name, tmp_path) == []
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("x")
        assert dataset_files(name, tmp_path) == [tmp_path / relative]


def test_loads_each_official_layout(tmp_path):
    files = {
        "ml-100k/u.data": "1\t2\t3\t0\n",
        "ml-10M100K/ratings.dat": "1::2::3.5::0\n",
        "ml-25m/ratings.csv": "userId,movieId,rating,timestamp\n1,2,4.5,0\n",
        "netflix/combined_data_1.txt": "2:\n1,3,2005-01-01\n",
        "jester/jester_ratings.csv": "userId,jokeId,rating\n1,2,-3.5\n",
    }
    for relative, text in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    for name, value in (
        ("ml-100k", 3.0),
        ("ml-10m", 3.5),
        ("ml-25m", 4.5),
        ("netflix", 3.0),
        ("jester", -3.5),
    ):
        r = load_dataset(name, tmp_path, download=False)
        assert (r.name, r.n_ratings, float(r.values[0])) == (name, 1, value)
        assert (r.user_ids[0], r.item_ids[0]) == (1, 2)


def test_unknown_name_lists_known_names():
    with pytest.raises(DataError, match="unknown data set 'ml-2m'; known: ml-100k, ml-1m"):
        load_dataset("ml-2m")


def test_absent_without_download(tmp_path):
    with pytest.raises(DataError, match="fedmc data download ml-1m"):
        load_dataset("ml-1m", tmp_path, download=False)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("name", "where"), [("netflix", "combined_data_1.txt"), ("jester", "jester_ratings.csv")]
)
def test_manual_sets_explain_where_to_get_files(tmp_path, name, where):
    with pytest.raises(DataError) as exc:
        load_dataset(name, tmp_path)
    assert str(tmp_path / name / where) in str(exc.value)
    assert "https://" in str(exc.value)


def test_synthetic_dispatch_is_lazy_and_passes_seed(monkeypatch):
    calls = []
    fake = types.ModuleType("fedmc.data.synthetic")
    fake.synthetic_dataset = lambda name, seed=0: calls.append((name, seed)) or "generated"
    monkeypatch.setitem(sys.modules, "fedmc.data.synthetic", fake)
    assert load_dataset("synthetic-netflix", seed=7) == "generated"
    assert load_dataset("synthetic") == "generated"
    assert calls == [("synthetic-netflix", 7), ("synthetic", 0)]


def test_bad_duplicates_policy(tmp_path):
    with pytest.raises(ConfigError):
        load_dataset("ml-1m", tmp_path, duplicates="max")


# --------------------------------------------------------------------------- downloads


def test_download_good_archive(tmp_path, monkeypatch):
    archive = make_zip({"ml-1m/ratings.dat": ML1M_LINES, "ml-1m/README": "readme"})
    with serve_routes({"/ml-1m.zip": Route(archive)}) as base:
        point_at(monkeypatch, "ml-1m", f"{base}/ml-1m.zip", md5(archive))
        r = load_dataset("ml-1m", tmp_path / "data", progress=True)
    assert (r.n_ratings, r.n_users, r.n_items) == (3, 2, 2)
    assert (tmp_path / "data" / "ml-1m" / "README").read_text() == "readme"
    assert leftovers(tmp_path / "data") == ["ml-1m"]  # no cache in a data folder


def test_download_ml10m_folder_name(tmp_path, monkeypatch):
    archive = make_zip({"ml-10M100K/ratings.dat": ML1M_LINES})
    with serve_routes({"/ml-10m.zip": Route(archive)}) as base:
        point_at(monkeypatch, "ml-10m", f"{base}/ml-10m.zip", md5(archive))
        folder = download_dataset("ml-10m", tmp_path)
        assert folder == tmp_path / "ml-10M100K"
        assert download_dataset("ml-10m", tmp_path) == folder  # present: no second fetch
    assert load_dataset("ml-10m", tmp_path, download=False).n_ratings == 3


def test_sha256_checksum_accepted(tmp_path, monkeypatch):
    archive = make_zip({"ml-1m/ratings.dat": ML1M_LINES})
    with serve_routes({"/a.zip": Route(archive)}) as base:
        point_at(
            monkeypatch, "ml-1m", f"{base}/a.zip", "sha256:" + hashlib.sha256(archive).hexdigest()
        )
        download_dataset("ml-1m", tmp_path)
    assert dataset_files("ml-1m", tmp_path)


@pytest.mark.parametrize(
    ("route", "checksum", "message"),
    [
        (Route(b"x"), "md5:" + "0" * 32, "checksum mismatch"),
        (Route(truncate=True), None, "cut short"),
        (Route(status=404), None, "HTTP 404"),
    ],
    ids=["wrong-checksum", "truncated", "not-found"],
)
def test_failed_download_leaves_nothing(tmp_path, monkeypatch, route, checksum, message):
    archive = make_zip({"ml-1m/ratings.dat": ML1M_LINES * 2000})
    route = dataclasses.replace(route, body=archive)
    with serve_routes({"/ml-1m.zip": route}) as base:
        point_at(monkeypatch, "ml-1m", f"{base}/ml-1m.zip", checksum or md5(archive))
        with pytest.raises(DataError, match=message):
            load_dataset("ml-1m", tmp_path)
    assert leftovers(tmp_path) == []


def test_connection_refused(tmp_path, monkeypatch):
    with serve_routes({}) as base:
        pass  # the port is closed again
    point_at(monkeypatch, "ml-1m", f"{base}/ml-1m.zip", "md5:" + "0" * 32)
    with pytest.raises(DataError, match="download of .* failed"):
        download_dataset("ml-1m", tmp_path)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ({"other/ratings.dat": ML1M_LINES}, "no top-level folder 'ml-1m'"),
        ({"ml-1m/../../evil.txt": "x", "ml-1m/ratings.dat": ML1M_LINES}, "unsafe path"),
        ({"ml-1m/README": "no ratings"}, "holds no ml-1m/ratings.dat"),
    ],
)
def test_bad_archive_leaves_nothing_new(tmp_path, monkeypatch, members, message):
    archive = make_zip(members)
    with serve_routes({"/ml-1m.zip": Route(archive)}) as base:
        point_at(monkeypatch, "ml-1m", f"{base}/ml-1m.zip", md5(archive))
        with pytest.raises(DataError, match=message):
            download_dataset("ml-1m", tmp_path)
    assert leftovers(tmp_path) == []
    assert not (tmp_path.parent / "evil.txt").exists()


def test_not_a_zip(tmp_path, monkeypatch):
    with serve_routes({"/ml-1m.zip": Route(b"<html>moved</html>")}) as base:
        point_at(monkeypatch, "ml-1m", f"{base}/ml-1m.zip", None)
        with pytest.raises(DataError, match="cannot be unpacked"):
            download_dataset("ml-1m", tmp_path, verify=False)
    assert leftovers(tmp_path) == []


def test_unpinned_checksum_needs_no_verify(tmp_path, monkeypatch):
    archive = make_zip(
        {"ml-latest-small/ratings.csv": "userId,movieId,rating,timestamp\n1,2,3,0\n"}
    )
    with serve_routes({"/s.zip": Route(archive)}) as base:
        point_at(monkeypatch, "ml-latest-small", f"{base}/s.zip", None)
        with pytest.raises(DataError, match="no checksum is pinned.*--no-verify"):
            download_dataset("ml-latest-small", tmp_path)
        assert leftovers(tmp_path) == []
        assert load_dataset("ml-latest-small", tmp_path, verify=False).n_ratings == 1


def test_pinned_checksums_are_official_grouplens_md5s():
    for name in ("ml-100k", "ml-1m", "ml-10m", "ml-20m", "ml-25m", "ml-32m"):
        spec = registry.DATASETS[name]
        assert spec.url == f"https://files.grouplens.org/datasets/movielens/{name}.zip"
        algorithm, digest = spec.checksum.split(":")
        assert algorithm == "md5" and len(digest) == 32 and int(digest, 16) >= 0


# --------------------------------------------------------------------------- cache


def write_ml1m(root: Path, text: str = ML1M_LINES) -> Path:
    path = root / "ml-1m" / "ratings.dat"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_second_load_comes_from_cache(tmp_path, monkeypatch):
    write_ml1m(tmp_path)
    first = load_dataset("ml-1m", tmp_path)
    assert len(list((tmp_path / PARSED).glob("*.npz"))) == 1

    def fail(*args, **kwargs):
        raise AssertionError("parsed again")

    monkeypatch.setitem(registry._PARSERS, "movielens", fail)
    second = load_dataset("ml-1m", tmp_path)
    for field in ("users", "items", "values", "user_ids", "item_ids"):
        np.testing.assert_array_equal(getattr(first, field), getattr(second, field))
    assert second.shape == first.shape and second.name == "ml-1m"
    assert second.meta == first.meta


def test_cache_keyed_by_policy_and_file_state(tmp_path):
    path = write_ml1m(tmp_path, ML1M_LINES + "1::1193::1::0\n")
    with pytest.raises(DataError, match="rated more than once"):
        load_dataset("ml-1m", tmp_path)
    assert load_dataset("ml-1m", tmp_path, duplicates="last").n_ratings == 3
    assert load_dataset("ml-1m", tmp_path, duplicates="mean").values.max() == 4.0
    stat = path.stat()
    path.write_text(ML1M_LINES + "3::1::2::0\n")
    assert load_dataset("ml-1m", tmp_path, duplicates="last").n_ratings == 4
    planted = ML1M_LINES.replace("5", "1") + "1::1::1::1\n"  # same size and time, new content
    path.write_text(planted)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == len(ML1M_LINES + "3::1::2::0\n")
    assert load_dataset("ml-1m", tmp_path, duplicates="last").values.max() < 5


def test_corrupt_cache_is_rebuilt(tmp_path):
    path = write_ml1m(tmp_path)
    expected = load_dataset("ml-1m", tmp_path)
    (entry,) = (tmp_path / PARSED).glob("*.npz")
    entry.write_bytes(entry.read_bytes()[:100])
    key = cache_key([path], "error", "movielens")
    assert load_cached(tmp_path / PARSED, key, "ml-1m") is None
    again = load_dataset("ml-1m", tmp_path)
    np.testing.assert_array_equal(again.values, expected.values)
    assert load_cached(tmp_path / PARSED, key, "ml-1m") is not None


def test_inconsistent_cache_is_ignored(tmp_path):
    path = write_ml1m(tmp_path)
    load_dataset("ml-1m", tmp_path)
    (entry,) = (tmp_path / PARSED).glob("*.npz")
    np.savez(
        entry,
        users=np.array([5]),
        items=np.array([0]),
        values=np.array([1.0]),
        user_ids=np.array([1]),
        item_ids=np.array([1]),
        source=np.str_(""),
    )
    assert (
        load_cached(tmp_path / PARSED, cache_key([path], "error", "movielens"), "x") is None
    )
    assert load_dataset("ml-1m", tmp_path).n_ratings == 3


def test_the_cache_lives_in_our_cache_folder_never_in_the_data_folder(tmp_path,
                                                                      monkeypatch):
    data = tmp_path / "data"  # writable: still only read
    write_ml1m(data)
    load_dataset("ml-1m", data)
    assert leftovers(data) == ["ml-1m"]
    assert len(list((tmp_path / PARSED).glob("*.npz"))) == 1
    monkeypatch.setenv("FEDMC_CACHE", str(tmp_path / "mine"))
    load_dataset("ml-1m", data)
    assert len(list((tmp_path / "mine").glob("*.npz"))) == 1


def test_explicit_cache_dir(tmp_path):
    write_ml1m(tmp_path / "d")
    load_dataset("ml-1m", tmp_path / "d", cache_dir=tmp_path / "c")
    assert leftovers(tmp_path / "d") == ["ml-1m"]
    assert len(list((tmp_path / "c").glob("*.npz"))) == 1


# --------------------------------------------------------------------------- CLI


def test_cli_list(tmp_path):
    write_ml1m(tmp_path)
    result = CliRunner().invoke(data_app, ["list", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = {line.split("│")[1].strip(): line for line in result.output.splitlines() if "│" in line}
    assert "yes" in lines["ml-1m"] and "B" in lines["ml-1m"]
    assert "no" in lines["ml-10m"]
    assert "manual" in lines["netflix"]


def test_cli_info_ratings_file(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("user,item,rating\n1,1,1\n1,2,5\n2,1,3\n2,1,4\n")
    result = CliRunner().invoke(data_app, ["info", "--ratings", str(path), "--duplicates", "mean"])
    assert result.exit_code == 0, result.output
    for text in ("users", "density", "0.75", "rating mean", "user degree max"):
        assert text in result.output


def test_cli_info_named_set(tmp_path):
    write_ml1m(tmp_path)
    result = CliRunner().invoke(data_app, ["info", "ml-1m", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "ml-1m" in result.output and "ratings" in result.output


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["info"], ConfigError),
        (["info", "ml-1m", "--ratings", "x.csv"], ConfigError),
        (["info", "--ratings", "missing.csv"], DataError),
        (["info", "nope"], DataError),
        (["download", "jester"], DataError),
    ],
)
def test_cli_errors_are_fedmc_errors(tmp_path, args, error):
    result = CliRunner().invoke(
        data_app, [*args, "--data-dir", str(tmp_path)] if args[0] == "download" else args
    )
    assert isinstance(result.exception, error)


def test_cli_download(tmp_path, monkeypatch):
    archive = make_zip({"ml-1m/ratings.dat": ML1M_LINES})
    with serve_routes({"/ml-1m.zip": Route(archive)}) as base:
        point_at(monkeypatch, "ml-1m", f"{base}/ml-1m.zip", md5(archive))
        result = CliRunner().invoke(
            data_app, ["download", "ml-1m", "--data-dir", str(tmp_path), "--quiet"]
        )
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(tmp_path / "ml-1m")
    assert dataset_files("ml-1m", tmp_path)


def test_describe_ratings(tmp_path):
    write_ml1m(tmp_path)
    stats = describe_ratings(load_dataset("ml-1m", tmp_path))
    assert stats["ratings"] == 3 and stats["density"] == 0.75
    assert (stats["rating_min"], stats["rating_max"], stats["rating_mean"]) == (3.0, 5.0, 4.0)
    assert (stats["user_degree_min"], stats["user_degree_max"]) == (1, 2)


# --------------------------------------------------------------------------- real data


@pytest.mark.realdata
def test_real_ml100k(tmp_path, require_shared_data):
    root = require_shared_data("ml-100k").parent
    r = load_dataset("ml-100k", root, download=False, cache_dir=tmp_path)
    assert (r.n_ratings, r.n_users, r.n_items) == (100_000, 943, 1_682)
    assert set(np.unique(r.values)) == {1.0, 2.0, 3.0, 4.0, 5.0}


@pytest.mark.realdata
def test_real_ml1m_and_cached_reload(tmp_path, require_shared_data):
    root = require_shared_data("ml-1m", "ratings.dat").parents[1]
    start = time.perf_counter()
    first = load_dataset("ml-1m", root, download=False, cache_dir=tmp_path)
    parse_s = time.perf_counter() - start
    start = time.perf_counter()
    second = load_dataset("ml-1m", root, download=False, cache_dir=tmp_path)
    cached_s = time.perf_counter() - start
    assert (first.n_ratings, first.n_users, first.n_items) == (1_000_209, 6_040, 3_706)
    assert first.values.mean() == pytest.approx(3.5816, abs=1e-4)
    np.testing.assert_array_equal(first.values, second.values)
    np.testing.assert_array_equal(first.item_ids, second.item_ids)
    assert cached_s < parse_s
    assert parse_s < 2.0  # about 0.3 s on an idle 2-core machine


def test_a_data_folder_that_does_not_exist_is_not_created(tmp_path, monkeypatch):
    missing = tmp_path / "nonexistent" / "dir"
    monkeypatch.setenv("FEDMC_DATA", str(missing))
    with pytest.raises(DataError, match="does not exist, nor its parent"):
        load_dataset("ml-100k")
    assert not missing.exists() and not missing.parent.exists()
