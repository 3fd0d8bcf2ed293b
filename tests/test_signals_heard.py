"""Signals always heard: the training runs in a worker thread and the kernels release the GIL,
so SIGTERM and SIGINT end a run within moments whatever kernel runs."""

from __future__ import annotations

import contextlib
import csv
import importlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numba
import pytest
from numba.core.registry import CPUDispatcher

import fedmc
from fedmc.cli.interrupts import Interrupted, catch_signals, in_worker, worker_running

SRC = str(Path(__file__).parents[1] / "src")


@numba.njit(nogil=True)
def _spin(steps: int) -> int:
    """Compiled busy work of ``steps`` dependent steps of a linear congruential generator (no
    Python reaches it until it returns)."""
    x = 1
    for _ in range(steps):
        x = (x * 6364136223846793005 + 1442695040888963407) % 9223372036854775783
    return x


def _steps_for(seconds: float) -> int:
    """The ``_spin`` steps of about ``seconds`` on this machine (compiles it first)."""
    _spin(1)
    started = time.perf_counter()
    _spin(10**6)
    return int(10**6 * seconds / max(time.perf_counter() - started, 1e-6))


def test_every_kernel_releases_the_gil():
    """A kernel that holds the GIL would keep the main thread from the signal handler."""
    holding, modules = [], 0
    root = Path(fedmc.__file__).parent
    for path in sorted(root.rglob("*.py")):
        if "njit" not in path.read_text():
            continue  # no kernel here (and its imports are spared)
        name = ".".join(("fedmc", *path.relative_to(root).with_suffix("").parts))
        module = importlib.import_module(name)
        modules += 1
        for attr, value in vars(module).items():
            if isinstance(value, CPUDispatcher) and value.__module__ == name \
                    and not value.targetoptions.get("nogil"):
                holding.append(f"{name}.{attr}")
    assert modules >= 10 and holding == []


def test_a_signal_is_heard_while_the_worker_is_inside_a_kernel():
    steps = _steps_for(5.0)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))
    started = time.monotonic()
    with pytest.raises(Interrupted) as stopped, catch_signals():
        timer.start()
        in_worker(lambda: _spin(steps))
    assert time.monotonic() - started < 2.0
    assert stopped.value.exit_code == 143
    assert worker_running()  # the signal was heard while the kernel still ran


def test_the_workers_result_and_error_come_back():
    assert in_worker(lambda: 41 + 1) == 42
    with pytest.raises(ZeroDivisionError):
        in_worker(lambda: 1 / 0)


def _terminated(args: list[object], out: Path, ready: Callable[[list[str]], bool],
                after: float, code: str | None = None) -> tuple[int, float, list[str]]:
    """Start ``fedmc ARGS --out OUT -q`` (or ``python -c CODE ARGS --out OUT -q``), send it
    SIGTERM ``after`` seconds once ``ready(stderr lines so far)``: its exit status, the
    seconds it took to end after the signal and its stderr lines."""
    start = ["-m", "fedmc"] if code is None else ["-c", code]
    proc = subprocess.Popen([sys.executable, *start, *map(str, args), "--out", str(out), "-q"],
                            env={**os.environ, "PYTHONPATH": SRC}, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stderr is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 300
    try:
        while not ready(lines):
            assert proc.poll() is None and time.monotonic() < deadline, lines
            time.sleep(0.1)
        time.sleep(after)
        assert proc.poll() is None, lines
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        exit_code = proc.wait(timeout=30)
    finally:
        proc.kill()  # one that failed or did not hear the signal is not left running
    took = time.monotonic() - sent
    reader.join(5)
    return exit_code, took, lines


def _interrupted(out: Path, code: int, took: float, lines: list[str]) -> None:
    """What a command stopped by SIGTERM leaves: exit 143 within 3 s, one line on stderr
    that says so (its last), its folder marked interrupted."""
    assert code == 143, lines
    assert took < 3.0, f"{took:.1f} s"
    assert lines[-1] == f"fedmc: interrupted by SIGTERM; its partial output is in {out}\n"
    assert sum("interrupt" in line or "Traceback" in line for line in lines) == 1, lines
    assert json.loads((out / "status.json").read_text())["status"] == "interrupted"


STALLED = """
import importlib, sys, time
import numba

@numba.njit(nogil=True)
def spin(steps):
    x = 1
    for _ in range(steps):
        x = (x * 6364136223846793005 + 1442695040888963407) % 9223372036854775783
    return x

spin(1)
started = time.perf_counter()
spin(10**6)
STEPS = int(10**6 * 120 / max(time.perf_counter() - started, 1e-6))  # two minutes

def stalled(*args, **kwargs):
    sys.stderr.write("in the kernel\\n")
    sys.stderr.flush()
    return spin(STEPS)

for name, value in {patches}.items():
    module, _, attr = name.rpartition(".")
    setattr(importlib.import_module(module), attr, stalled if value else lambda *a, **k: None)
from fedmc.cli import main
sys.argv[0] = "fedmc"
main()
"""
"""``python -c`` code of ``fedmc`` whose ``{patches}`` (dotted names: True for a function
made a two-minute serial compiled call that says ``in the kernel`` on stderr, whose stderr
line the caller removes; False for one that does nothing) hold the main thread in one kernel
if the command calls them there."""


def _stalled(patches: dict[str, bool]) -> str:
    return STALLED.format(patches=repr(patches))


@pytest.mark.slow
@pytest.mark.parametrize("command, patches", [
    (["run"], {"fedmc.run.runner.execute": True}),
    (["tune", "--trials", "2"], {"fedmc.tune.search.execute": True,
                                 "fedmc.tune.search.warm_up": False}),
    (["tune", "--dp-epsilon", "8"], {"fedmc.tune.private.run_private_search": True}),
    (["audit", "--view", "plain"], {"fedmc.audit.run.run_audit": True}),
], ids=["run", "tune", "private-tune", "audit"])
def test_sigterm_inside_a_commands_long_serial_kernel_exits_143_within_3_s(
        tmp_path, command, patches):
    """The work a command does stands still in one compiled call of two minutes (its own
    work replaced by it): SIGTERM inside that call ends the command within moments."""
    out = tmp_path / "out"
    code, took, lines = _terminated(command, out, lambda lines: "in the kernel\n" in lines,
                                    0.5, _stalled(patches))
    lines.remove("in the kernel\n")
    _interrupted(out, code, took, lines)
    assert len(lines) == 1, lines
    if "fedmc.tune.search.execute" in patches:  # the trial running is closed, not lost
        rows = list(csv.DictReader((out / "trials.csv").open()))
        assert [r["state"] for r in rows] == ["interrupted"]


@pytest.mark.slow
def test_sigterm_inside_the_longest_kernel_exits_143_within_3_s(tmp_path):
    """Rank 1000 over 10 clients a round: a round is minutes of FedMC-ADMM's factor kernels
    (the announced cost: at least 5e11 operations); the signal comes once training runs
    (compiled on a fresh clone: compiling)."""
    out = tmp_path / "run"
    code, took, lines = _terminated(
        ["run", "--rank", "1000", "--clients", "10", "--rounds", "3"], out,
        lambda lines: any("warning: rank 1000" in line for line in lines), 8.0)
    _interrupted(out, code, took, lines)
    assert not (out / "summary.json").exists()


def _trials_started(db: Path) -> int:
    """The trials a search's study holds so far (0 before its tables exist)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as con:
            return con.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
    except sqlite3.Error:
        return 0


@pytest.mark.slow
def test_sigterm_during_a_search_exits_143_within_3_s_and_the_search_continues(tmp_path):
    """A search's trials with their real kernels: a SIGTERM while trials run ends it within
    moments, ``trials.csv`` written with the trial that ran marked interrupted; the same
    command continues it (asked for one more trial than had finished: the interrupted one
    again) and runs the final run."""
    out = tmp_path / "search"
    args: list[object] = ["tune", "--clients", "4", "--rounds", "4"]
    code, took, lines = _terminated([*args, "--trials", "50"], out,
                                    lambda _: _trials_started(out / "study.db") >= 2, 0.5)
    _interrupted(out, code, took, lines)
    before = list(csv.DictReader((out / "trials.csv").open()))
    assert before[-1]["state"] == "interrupted", before
    finished = sum(r["state"] in ("complete", "pruned") for r in before)
    again = subprocess.run([sys.executable, "-m", "fedmc", *map(str, args), "--trials",
                            str(finished + 1), "--out", str(out), "-q"],
                           env={**os.environ, "PYTHONPATH": SRC}, capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    after = list(csv.DictReader((out / "trials.csv").open()))
    # the finished trials come back as they were; a column the new trial adds (a fold-in
    # value its score chose, say) is empty for them
    assert [{k: row[k] for k in before[0]} for row in after[:len(before)]] == before
    assert all(row[k] == "" for row in after[:len(before)] for k in set(after[0]) - set(before[0]))
    assert len(after) == len(before) + 1
    assert json.loads((out / "status.json").read_text())["status"] == "finished"
    assert (out / "best" / "summary.json").exists()
