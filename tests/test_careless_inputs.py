"""Careless and hostile inputs to every command but ``run`` (whose table is in
``tests/test_cli_run.py``): each is refused with exit 2 and one line that names what is wrong
in the user's words (the flag typed, the file and line), no traceback, nothing written where
the command would have written (issue 39, "Every mistake caught before work")."""

from __future__ import annotations

import pytest

# Placeholders in the arguments: RUN (a finished run's folder), NOTRUN (a folder with a
# file but no run), CSV (a good ratings file of the run's users and items), BAD (a ratings
# file whose third line has text for a rating), SHORT (a file of pairs whose third line has
# one column), OUT and PNG (a folder and a figure's path
# that must stay unwritten), FILE (an existing plain file), DIR (an existing empty folder),
# MISSING (a path that does not exist).
CASES: dict[str, tuple[list[str], str]] = {
    # evaluate
    "evaluate, no run there": (["evaluate", "MISSING"], "MISSING"),
    "evaluate, a folder without a run": (["evaluate", "NOTRUN"], "NOTRUN"),
    "evaluate, a file for the run": (["evaluate", "FILE"], "FILE"),
    "evaluate, missing test file": (["evaluate", "RUN", "--train", "CSV", "--test",
                                     "MISSING"], "MISSING"),
    "evaluate, bad test line": (["evaluate", "RUN", "--train", "CSV", "--test", "BAD"],
                                "BAD:3"),
    "evaluate, test without train": (["evaluate", "RUN", "--test", "CSV"], "--train"),
    "evaluate, ranking-k 0": (["evaluate", "RUN", "--ranking-k", "0"], "--ranking-k"),
    "evaluate, ranking-k text": (["evaluate", "RUN", "--ranking-k", "ten"], "--ranking-k"),
    "evaluate, bad columns": (["evaluate", "RUN", "--train", "CSV", "--test", "CSV",
                               "--columns", "a,b"], "--columns"),
    # recommend
    "recommend, no run there": (["recommend", "MISSING", "--user", "1"], "MISSING"),
    "recommend, n 0": (["recommend", "RUN", "--user", "1", "-n", "0"], "-n"),
    "recommend, n negative": (["recommend", "RUN", "--user", "1", "-n", "-3"], "-n"),
    "recommend, unknown format": (["recommend", "RUN", "--user", "1", "--format", "xml"],
                                  "--format"),
    "recommend, missing ratings": (["recommend", "RUN", "--ratings", "MISSING"], "MISSING"),
    "recommend, bad ratings line": (["recommend", "RUN", "--ratings", "BAD"], "BAD:3"),
    "recommend, missing items file": (["recommend", "RUN", "--items", "MISSING"], "MISSING"),
    "recommend, two questions at once": (["recommend", "RUN", "--user", "1", "--items",
                                          "CSV"], "one of them"),
    "recommend, out is a folder": (["recommend", "RUN", "--train", "CSV", "--test", "CSV",
                                    "--out", "DIR"], "DIR"),
    # predict
    "predict, missing pairs": (["predict", "RUN", "--pairs", "MISSING"], "MISSING"),
    "predict, short pairs line": (["predict", "RUN", "--pairs", "SHORT"], "SHORT:3"),
    "predict, unknown format": (["predict", "RUN", "--pairs", "CSV", "--format", "xml"],
                                "--format"),
    # data
    "data download, unknown set": (["data", "download", "ml-7z"], "ml-7z"),
    "data info, both a name and a file": (["data", "info", "ml-100k", "--ratings", "CSV"],
                                          "--ratings"),
    "data info, neither": (["data", "info"], "--ratings"),
    "data info, missing file": (["data", "info", "--ratings", "MISSING"], "MISSING"),
    "data info, bad line": (["data", "info", "--ratings", "BAD"], "BAD:3"),
    "data info, unknown duplicates": (["data", "info", "--ratings", "CSV", "--duplicates",
                                       "some"], "--duplicates"),
    # tune
    "tune, trials 0": (["tune", "--trials", "0", "--out", "OUT"], "--trials"),
    "tune, unknown pruner": (["tune", "--pruner", "best", "--out", "OUT"], "--pruner"),
    "tune, space without =": (["tune", "--space", "rank", "--out", "OUT"], "--space"),
    "tune, space outside the setting": (["tune", "--space", "rank=0:5:int", "--out", "OUT"],
                                        "rank"),
    "tune, space of a setting it lacks": (["tune", "--space", "colour=1:2", "--out", "OUT"],
                                          "colour"),
    "tune, timeout 0": (["tune", "--timeout", "0", "--out", "OUT"], "--timeout"),
    "tune, no cut": (["tune", "--validation-fraction", "0", "--out", "OUT"],
                     "--validation-fraction"),
    "tune, rounds 0": (["tune", "--rounds", "0", "--out", "OUT"], "--rounds"),
    "tune, storage not a URL": (["tune", "--storage", "notaurl", "--out", "OUT"],
                                "--storage"),
    "tune, storage in a missing folder": (["tune", "--storage", "sqlite:////no/dir/x.db",
                                           "--out", "OUT"], "--storage"),
    "tune, unknown algorithm": (["tune", "--algorithm", "nope", "--out", "OUT"], "nope"),
    # federate
    "federate local, no clients": (["federate", "local", "--clients", "0", "--out", "OUT"],
                                   "--clients"),
    "federate local, negative rounds": (["federate", "local", "--rounds", "-2", "--out",
                                         "OUT"], "--rounds"),
    "federate split, unknown partition": (["federate", "split", "--partition", "zigzag",
                                           "--out", "OUT"], "--partition"),
    "federate resume, no checkpoint": (["federate", "resume", "DIR", "--app", "DIR",
                                        "--connection", "x"], "checkpoint"),
    # audit
    "audit, repeat 0": (["audit", "--repeat", "0", "--out", "OUT"], "--repeat"),
    "audit, unknown view": (["audit", "--view", "everything", "--out", "OUT"], "--view"),
    "audit, unknown algorithm": (["audit", "-a", "nope", "--out", "OUT"], "nope"),
    "tune, space choice outside the setting": (["tune", "--space", "rank=0,1", "--out", "OUT"],
                                               "rank"),
    "tune, storage without its driver": (["tune", "--storage", "postgresql://u@h/db", "--out",
                                          "OUT"], "--storage"),
    "tune, out is a file": (["tune", "--out", "FILE"], "FILE"),
    # a file where a folder is expected, a folder where a file is
    "run, out is a file": (["run", "--out", "FILE"], "FILE"),
    "predict, pairs is a folder": (["predict", "RUN", "--pairs", "DIR"], "DIR"),
    "data info, ratings is a folder": (["data", "info", "--ratings", "DIR"], "DIR"),
    "data download, data dir is a file": (["data", "download", "ml-100k", "--data-dir",
                                           "FILE"], "FILE"),
    "experiment, config is a folder": (["experiment", "--config", "DIR", "--out", "OUT"],
                                       "DIR"),
    "federate split, out is a file": (["federate", "split", "--out", "FILE"], "FILE"),
    "federate local, out is a file": (["federate", "local", "--out", "FILE"], "FILE"),
    "audit, out is a file": (["audit", "--out", "FILE"], "FILE"),
    "experiment, out is a file": (["experiment", "fedmc-fig2", "--dataset", "synthetic",
                                   "--out", "FILE"], "FILE"),
    "recommend, out exists": (["recommend", "RUN", "--train", "CSV", "--test", "CSV", "--out",
                               "FILE"], "--overwrite"),
    # names the model does not know
    "recommend, unknown user": (["recommend", "RUN", "--user", "nobody"], "nobody"),
    "recommend, unknown similar item": (["recommend", "RUN", "--similar", "no-such-item"],
                                        "no-such-item"),
    # experiment and plot
    "experiment, missing config": (["experiment", "--config", "MISSING", "--out", "OUT"],
                                   "MISSING"),
    "experiment, config not TOML": (["experiment", "--config", "BAD", "--out", "OUT"], "BAD"),
    "experiment, unknown experiment": (["experiment", "nope", "--out", "OUT"], "nope"),
    "plot, no run there": (["plot", "MISSING", "--out", "PNG"], "MISSING"),
    "plot, unknown column": (["plot", "RUN", "--y", "colour", "--out", "PNG"], "colour"),
}
"""Each case: the arguments (with placeholders) and a text the one line must hold (a
placeholder there stands for its path)."""


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    """The placeholders' paths: a finished run (one for the module, 2 rounds), the files and
    folders the cases read."""
    root = tmp_path_factory.mktemp("careless")
    ratings = root / "ratings.csv"
    ratings.write_text("user,item,rating\n" + "".join(
        f"{u},{i},{1 + (u * i) % 5}\n" for u in range(1, 21) for i in range(1, 16)
        if (u + i) % 3))
    run = root / "run"
    assert _run(["run", "--ratings", str(ratings), "--clients", "4", "--rounds", "2",
                 "--rank", "2", "--save-user-factors", "--out", str(run), "-q"])[0] == 0
    notrun = root / "notrun"
    notrun.mkdir()
    (notrun / "notes.txt").write_text("not a run\n")
    bad = root / "bad.csv"
    bad.write_text("user,item,rating\n1,2,3\n2,3,good\n")
    short = root / "short.csv"
    short.write_text("user,item\n1,2\n3\n")
    plain = root / "plain.txt"
    plain.write_text("hello\n")
    empty = root / "empty"
    empty.mkdir()
    return {"RUN": run, "NOTRUN": notrun, "CSV": ratings, "BAD": bad, "SHORT": short,
            "FILE": plain, "DIR": empty, "MISSING": root / "missing.csv"}


def _run(argv: list[str]) -> tuple[int, str]:
    """``fedmc *argv`` in this process: its exit status and its output (both streams)."""
    import contextlib
    import io
    import sys

    from fedmc.cli import main

    out = io.StringIO()
    old = sys.argv
    sys.argv = ["fedmc", *argv]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        sys.argv = old
    return code, out.getvalue()


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_careless_input_is_one_line_exit_2(case, places, tmp_path):
    argv, needle = CASES[case]
    unwritten = {"OUT": tmp_path / "out", "PNG": tmp_path / "plot.png"}
    paths = {**places, **unwritten}
    for name in sorted(paths, key=len, reverse=True):  # NOTRUN before RUN
        path = paths[name]
        argv = [str(path) if a == name else a for a in argv]
        needle = needle.replace(name, str(path) if name in ("BAD", "SHORT") else path.name)
    code, output = _run(argv)
    lines = output.strip().splitlines()
    assert code == 2, output
    assert "Traceback" not in output, output
    assert len(lines) == 1, output
    assert needle.lower() in lines[0].lower(), output
    assert not [p for p in unwritten.values() if p.exists()], f"{case} wrote its output"
