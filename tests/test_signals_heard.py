"""Signals always heard: the training runs in a worker thread and the kernels release the GIL,
so SIGTERM and SIGINT end a run within moments whatever kernel runs."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
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


@pytest.mark.slow
def test_sigterm_inside_the_longest_kernel_exits_143_within_3_s(tmp_path):
    """Rank 1000 over 10 clients a round: a round is minutes of FedMC-ADMM's factor kernels
    (the announced cost: at least 5e11 operations); the signal comes once training runs."""
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedmc", "run", "--rank", "1000", "--clients", "10",
         "--rounds", "3", "--out", str(out), "-q"],
        env={**os.environ, "PYTHONPATH": SRC}, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 300
    while not any("warning: rank 1000" in line for line in lines):  # said before training
        assert proc.poll() is None and time.monotonic() < deadline, lines
        time.sleep(0.1)
    time.sleep(8.0)  # inside the rounds' kernels (compiled on a fresh clone: compiling)
    assert proc.poll() is None
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=60)
    took = time.monotonic() - sent
    reader.join(5)
    assert code == 143, lines
    assert took < 3.0, f"{took:.1f} s"
    assert lines[-1].strip() == f"fedmc: interrupted by SIGTERM; its partial output is in {out}"
    assert json.loads((out / "status.json").read_text())["status"] == "interrupted"
    assert not (out / "summary.json").exists()


@pytest.mark.slow
def test_sigterm_during_a_search_exits_143_within_3_s_with_its_trials(tmp_path):
    """A search's trials run in this process's main thread, their parallel kernels on the
    pool: a SIGTERM while trials run ends it within moments, ``trials.csv`` written."""
    out = tmp_path / "search"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedmc", "tune", "--trials", "50", "--out", str(out), "-q"],
        env={**os.environ, "PYTHONPATH": SRC}, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (out / "study.db").exists():  # the study opened: its data and trials follow
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    time.sleep(8.0)  # inside the trials (the data loaded, the kernels compiled)
    assert proc.poll() is None
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=60)
    took = time.monotonic() - sent
    assert code == 143, proc.stderr.read() if proc.stderr else ""
    assert took < 3.0, f"{took:.1f} s"
    assert (out / "trials.csv").exists()
    assert json.loads((out / "status.json").read_text())["status"] == "interrupted"
