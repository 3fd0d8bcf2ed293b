"""``fedmc audit`` on a tiny ratings file: the files, the table, the refusals."""

from __future__ import annotations

import csv
import json


def test_audit_writes_its_files_and_finds_the_plain_uploads_secrets(monkeypatch, capsys,
                                                                    tmp_path, ratings_csv, invoke):
    out = tmp_path / "audit"
    args = ["audit", "--ratings", ratings_csv, "-a", "fedmavg", "-P", "rank=2", "--rounds", 1,
            "--active", 4, "--view", "plain", "--view", "dp", "--out", out, "-q"]
    code, stdout, err = invoke(monkeypatch, capsys, *args)
    assert code == 0, err
    rows = json.loads((out / "audit.json").read_text())
    assert {(r["view"], r["attack"]) for r in rows} == {
        (v, a) for v in ("plain", "dp") for a in ("first", "intersect", "ratings")}
    plain = {r["attack"]: r for r in rows if r["view"] == "plain"}
    assert plain["first"]["precision"] == plain["first"]["recall"] == 1.0
    assert plain["ratings"]["rmse"] == 0.0 and plain["ratings"]["ratings"] > 0
    with open(out / "audit.csv") as fh:
        assert len(list(csv.DictReader(fh))) == len(rows)
    config = json.loads((out / "config.json").read_text())
    assert config["params"]["rank"] == 2 and config["views"] == ["plain", "dp"]
    assert json.loads((out / "status.json").read_text())["status"] == "finished"
    assert "P 1.000, R 1.000" in stdout
    code, _, err = invoke(monkeypatch, capsys, *args)
    assert code == 2 and "already holds a run" in err


def test_audit_repeats_seeds_and_pools_them(monkeypatch, capsys, tmp_path,
                                            ratings_csv, invoke):
    out = tmp_path / "audit"
    code, stdout, err = invoke(monkeypatch, capsys, "audit", "--ratings", ratings_csv, "-a",
                               "fedmavg", "-P", "rank=2", "--rounds", 2, "--active", 4,
                               "--view", "secagg", "--seed", 3, "--repeat", 2, "--out", out)
    assert code == 0, err
    rows = json.loads((out / "audit.json").read_text())
    assert [r["seeds"] for r in rows] == ["3"] * 5 + ["4"] * 5 + ["3-4"] * 5
    assert [r["attack"] for r in rows[:5]] == ["first", "intersect", "ratings", "split ratings",
                                               "linked"]
    pooled = {r["attack"]: r for r in rows if r["seeds"] == "3-4"}
    assert pooled["first"]["clients"] == sum(r["clients"] for r in rows
                                             if r["attack"] == "first" and r["seeds"] != "3-4")
    assert pooled["first"]["ratio_low"] <= pooled["first"]["ratio"] <= pooled["first"]["ratio_high"]
    assert "seeds 3-4 pooled" in stdout and "seed 4 (2 of 2)" in err
    assert json.loads((out / "config.json").read_text())["seeds"] == "3-4"


def test_audit_refuses_bad_settings(monkeypatch, capsys, tmp_path, ratings_csv, invoke):
    for extra, needle in ((["--view", "cohort"], "--view takes"), (["-a", "als"], "audit knows"),
                          (["--active", "some"], "--active takes"),
                          (["--repeat", "0"], "--repeat must be")):
        code, _, err = invoke(monkeypatch, capsys, "audit", "--ratings", ratings_csv,
                              "--out", tmp_path / "x", *extra)
        assert code == 2 and needle in err, err
        assert not (tmp_path / "x").exists()
