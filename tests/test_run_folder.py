"""No lost results and no lies in the exit code: interrupts, output folders, strict JSON."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from fedmc.errors import ConfigError
from fedmc.files import plain, strict_json
from fedmc.run_folder import LOCK, RunFolder
from tests.test_cli_run import invoke


def strict_load(path):
    """JSON as a strict parser reads it: NaN and Infinity are errors."""
    def refuse(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(path.read_text(), parse_constant=refuse)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a shell's background job ignores SIGINT


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_run_says_so_and_is_not_taken_for_a_finished_one(tmp_path, signum, code):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "fedmc", "run", "--rounds", "1000000", "-q",
                             "--out", str(out)], stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_sigint)
    deadline = time.monotonic() + 120
    while not (out / "status.json").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # into training
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    assert "interrupted" in stderr and str(out) in stderr and len(stderr.splitlines()) == 1
    assert strict_load(out / "status.json")["status"] == "interrupted"
    assert not (out / "summary.json").exists() and not (out / LOCK).exists()


def test_an_earlier_run_is_kept_unless_overwrite(monkeypatch, capsys, tmp_path):
    out = tmp_path / "run"
    assert invoke(monkeypatch, capsys, "run", "--rounds", 1, "-q", "--out", out)[0] == 0
    before = (out / "history.csv").read_text()
    code, _, err = invoke(monkeypatch, capsys, "run", "--rounds", 2, "-q", "--out", out)
    assert code == 2 and "--overwrite" in err and (out / "history.csv").read_text() == before
    code, _, err = invoke(monkeypatch, capsys, "run", "--rounds", 2, "-q", "--out", out,
                          "--overwrite")
    assert code == 0, err
    assert len((out / "history.csv").read_text().splitlines()) == 4  # header and rounds 0-2


def test_out_is_checked_before_any_work(monkeypatch, capsys, tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    code, _, err = invoke(monkeypatch, capsys, "run", "--out", a_file, "-q")
    assert code == 2 and "is a file" in err
    started = time.perf_counter()  # a folder that cannot be made: under a file
    code, _, err = invoke(monkeypatch, capsys, "run", "--out", a_file / "x", "-q")
    assert code == 2 and "cannot create" in err and time.perf_counter() - started < 5


def test_a_folder_held_by_a_live_run_is_refused_and_a_dead_runs_lock_taken_over(tmp_path):
    held = RunFolder.claim(tmp_path / "a", "x")
    with pytest.raises(ConfigError, match="in use by another run"):
        RunFolder.claim(tmp_path / "a", "x", overwrite=True)
    held.release("finished")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / LOCK).write_text(dead + "\n")
    RunFolder.claim(tmp_path / "b", "x").release("finished")


def test_runs_started_in_the_same_second_get_a_folder_each(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first, second = RunFolder.claim(None, "x"), RunFolder.claim(None, "x")
    assert first.path != second.path and first.path.parent == second.path.parent


def test_a_failed_run_leaves_no_folder_it_created(monkeypatch, capsys, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("user,item,rating\n1,1,5\n2,1,nan\n")
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", bad, "--out",
                          tmp_path / "out", "-q")
    assert code == 2 and "bad.csv:3" in err and not (tmp_path / "out").exists()


def test_undefined_metrics_are_null_in_strict_json(monkeypatch, capsys, tmp_path):
    out = tmp_path / "run"
    code, _, err = invoke(monkeypatch, capsys, "run", "--test-fraction", "0", "--rounds", 1,
                          "-q", "--out", out)
    assert code == 0, err
    summary = strict_load(out / "summary.json")
    assert summary["test_rmse"] is None and summary["train_rmse"] > 0
    strict_load(out / "config.json")


def test_plain_turns_numpy_and_non_finite_values_into_json():
    value = {"a": np.float64("nan"), "b": [np.inf, 1.5], "c": np.arange(2), 3: np.int32(4)}
    assert plain(value) == {"a": None, "b": [None, 1.5], "c": [0, 1], "3": 4}
    assert "NaN" not in strict_json(value)
