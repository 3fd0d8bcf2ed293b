"""Run folders: checked before work, never silently replaced, locked, strict JSON; signals."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fedmc.errors import ConfigError
from fedmc.federation.history import History
from fedmc.files import strict_json, write_atomic
from fedmc.run.folder import RunFolder


def test_strict_json_writes_null_for_undefined_numbers():
    text = strict_json({"a": math.nan, "b": [np.float64(np.inf), 1.5], "c": Path("x")})
    assert json.loads(text) == {"a": None, "b": [None, 1.5], "c": "x"}
    assert "NaN" not in text and "Infinity" not in text


def test_out_that_is_a_file_or_unwritable_is_refused(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError, match="is a file"):
        RunFolder(tmp_path / "f", "x").claim()
    with pytest.raises(ConfigError, match="cannot write"):  # a folder under a file
        RunFolder(tmp_path / "f" / "out", "x").claim()


def test_an_earlier_run_is_replaced_only_with_overwrite(tmp_path):
    out = tmp_path / "out"
    first = RunFolder(out, "x")
    first.claim()
    write_atomic(out / "summary.json", "{}")
    first.release("finished")
    with pytest.raises(ConfigError, match="--overwrite"):
        RunFolder(out, "x").claim()
    again = RunFolder(out, "x", overwrite=True)
    again.claim()
    assert not (out / "summary.json").exists()  # nothing of the old run passes for the new
    assert json.loads((out / "status.json").read_text())["status"] == "running"
    again.release("interrupted")
    assert json.loads((out / "status.json").read_text())["status"] == "interrupted"


def test_an_interrupted_run_of_the_same_command_is_continued_with_its_files(tmp_path):
    out = tmp_path / "out"
    first = RunFolder(out, "x", command="fedmc tune --rank 3")
    first.claim()
    write_atomic(out / "history.csv", "round\n")
    first.release("interrupted")
    assert json.loads((out / "status.json").read_text())["command"] == "fedmc tune --rank 3"
    for other in (None, "fedmc tune --rank 4"):  # another command: refused, files kept
        with pytest.raises(ConfigError, match="--overwrite") as refused:
            RunFolder(out, "x", command=other).claim()
        assert ("interrupted run of another command" in str(refused.value)) == bool(other)
    again = RunFolder(out, "x", command="fedmc tune --rank 3")
    assert again.claim() == out and again.resumed
    assert (out / "history.csv").exists()
    again.abandon()  # an error in the continued run: interrupted again, its files kept
    assert (out / "history.csv").exists()
    assert json.loads((out / "status.json").read_text())["status"] == "interrupted"
    last = RunFolder(out, "x", command="fedmc tune --rank 3")
    last.claim()
    last.release("finished")  # a finished run is not continued
    with pytest.raises(ConfigError, match="already holds a run"):
        RunFolder(out, "x", command="fedmc tune --rank 3").claim()
    fresh = RunFolder(out, "x", overwrite=True, command="fedmc tune --rank 3")
    fresh.claim()
    assert not fresh.resumed and not (out / "history.csv").exists()
    fresh.release("finished")


def test_two_runs_cannot_share_a_folder_and_default_names_are_unique(tmp_path, monkeypatch):
    held = RunFolder(tmp_path / "out", "x")
    held.claim()
    with pytest.raises(ConfigError, match="in use"):
        RunFolder(tmp_path / "out", "x", overwrite=True).claim()
    held.release("finished")
    monkeypatch.chdir(tmp_path)
    a, b = RunFolder(None, "algo-data"), RunFolder(None, "algo-data")
    assert a.claim() != b.claim()


def test_a_failed_run_leaves_the_folder_as_it_was(tmp_path):
    folder = RunFolder(tmp_path / "new" / "out", "x")
    folder.claim()
    folder.abandon()
    assert not (tmp_path / "new" / "out").exists()
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "notes.txt").write_text("mine")
    folder = RunFolder(tmp_path / "old", "x")
    folder.claim()
    write_atomic(tmp_path / "old" / "history.csv", "round\n")  # a file written, then a failure
    folder.abandon()
    assert sorted(p.name for p in (tmp_path / "old").iterdir()) == ["notes.txt"]


@pytest.fixture(scope="module")
def long_run_args(tmp_path_factory) -> list[str]:
    path = tmp_path_factory.mktemp("data") / "r.csv"
    rng = np.random.default_rng(0)
    pairs = sorted({(int(u), int(i)) for u, i in zip(rng.integers(1, 60, 2000),
                                                    rng.integers(1, 50, 2000), strict=True)})
    lines = "".join(f"{u},{i},{1 + (u + i) % 5}\n" for u, i in pairs)
    path.write_text("user,item,rating\n" + lines)
    return [sys.executable, "-m", "fedmc", "run", "--ratings", str(path), "--clients", "4",
            "--rounds", "100000", "--rank", "3", "-q"]


@pytest.mark.slow
def test_sigint_and_sigterm_exit_130_and_143_and_mark_the_folder(tmp_path, long_run_args):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    procs = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        out = tmp_path / sig.name
        procs[sig] = (out, subprocess.Popen([*long_run_args, "--out", str(out)], env=env,
                                            stderr=subprocess.PIPE, text=True))
    for sig, (out, proc) in procs.items():
        deadline = time.monotonic() + 60
        while not (out / "status.json").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(3.0)
        proc.send_signal(sig)
    for sig, (out, proc) in procs.items():
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + sig, err
        assert err.strip().splitlines()[-1] == (
            f"fedmc: interrupted by {sig.name}; its partial output is in {out}"), err
        assert json.loads((out / "status.json").read_text())["status"] == "interrupted"
        assert not (out / "summary.json").exists()
        rounds = [row["round"] for row in History.read_csv(out / "history.csv").rows]
        assert rounds and rounds == sorted(rounds)  # the rounds done so far are kept


def test_a_signal_raised_inside_compiled_code_still_marks_the_folder(tmp_path, monkeypatch,
                                                                     capsys, invoke):
    """A signal handled while a Numba kernel called back into Python surfaces as a
    SystemError caused by the handler's exception: the run still exits 143 with its history
    so far, not 1 with a traceback."""
    import fedmc.run.runner as runner
    from fedmc.cli.interrupts import Interrupted, signal_of

    real = runner.execute

    def interrupted_after_a_round(spec, callback=None, **kw):
        def record(k, row):
            callback(k, row)
            if k >= 1:
                raise SystemError("CPUDispatcher(top_n) returned a result with an exception "
                                  "set") from Interrupted(signal.SIGTERM)
        return real(spec, callback=record, **kw)

    monkeypatch.setattr(runner, "execute", interrupted_after_a_round)
    out = tmp_path / "run"
    code, _, err = invoke(monkeypatch, capsys, "run", "--rounds", "5", "--out", out, "-q")
    assert code == 143, err
    assert err.strip().splitlines()[-1] == (
        f"fedmc: interrupted by SIGTERM; its partial output is in {out}")
    assert json.loads((out / "status.json").read_text())["status"] == "interrupted"
    assert [r["round"] for r in History.read_csv(out / "history.csv").rows][-1] == 1
    assert signal_of(ValueError("x")) is None
    with pytest.raises(ValueError):  # any other error is still an error
        monkeypatch.setattr(runner, "execute", lambda *a, **k: (_ for _ in ()).throw(
            ValueError("not a signal")))
        invoke(monkeypatch, capsys, "run", "--out", tmp_path / "other", "-q")
    assert not (tmp_path / "other").exists()
