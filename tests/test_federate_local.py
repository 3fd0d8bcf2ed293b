"""``fedmc federate local`` keeps ``fedmc run``'s promises: settings checked and the output
folder claimed before anything starts, every process of the deployment stopped on Ctrl-C and
SIGTERM, and under ``--secagg`` the results of ``fedmc run`` (the slow tests run the real
command against the real one)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from fedmc.flower.local import marked_processes  # noqa: E402
from fedmc.run_folder import RunFolder  # noqa: E402
from fedmc.sim.history import History  # noqa: E402
from fedmc.testing import client_ids  # noqa: E402
from tests.conftest import require_shared_data  # noqa: E402
from tests.test_cli_run import invoke  # noqa: E402
from tests.test_flower import ratings_file  # noqa: E402

SRC = str(Path(__file__).parents[1] / "src")
QUANTUM = 2.0**-26  # a secure sum's error per entry and client, relative (flower/secagg.py)


@pytest.mark.parametrize(("args", "needle"), [
    (["--rank", "0"], "rank must be at least 1"),
    (["--rank", "5000"], "rank 5000 exceeds"),
    (["--dp-noise", "1"], "needs --dp-clip"),
    (["--seed", "-1"], "seed"),
    (["--clients", "2", "--active", "1", "--secagg"], "at least 2 clients"),
    (["--algorithm", "rfrec", "--partition", "user"], "conflicts with --partition user"),
])
def test_settings_fedmc_run_refuses_exit_2_at_once_and_write_nothing(
        monkeypatch, capsys, tmp_path, args, needle):
    out, started = tmp_path / "out", time.monotonic()
    code, _, err = invoke(monkeypatch, capsys, "federate", "local", "--ratings",
                          ratings_file(tmp_path), "--columns", "user_id,item_id,stars",
                          "--clients", 3, "--rounds", 2, *args, "--out", out, "-q",
                          "--work", tmp_path / "work")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists() and time.monotonic() - started < 60
    assert not (tmp_path / "work" / "logs").exists(), "a deployment was started"


def test_an_out_folder_in_use_or_holding_a_run_is_refused_before_anything_starts(
        monkeypatch, capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text("{}")  # a finished run (fedmc run's or a federation's)
    code, _, err = invoke(monkeypatch, capsys, "federate", "local", "--out", out, "-q",
                          "--work", tmp_path / "work")
    assert code == 2 and "already holds a run" in err and "--overwrite" in err, err
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]
    held = RunFolder(tmp_path / "busy", "x")
    held.claim()
    code, _, err = invoke(monkeypatch, capsys, "federate", "local", "--out",
                          tmp_path / "busy", "--overwrite", "-q", "--work", tmp_path / "work")
    held.release("finished")
    assert code == 2 and "in use by another run" in err, err
    assert not (tmp_path / "work" / "logs").exists()


def fedmc(*args: object, **popen) -> subprocess.Popen:
    """``python -m fedmc ARGS`` with this checkout's sources, in a session of its own."""
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.Popen([sys.executable, "-m", "fedmc", *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, **popen)


def finished(proc: subprocess.Popen, timeout: float = 900) -> str:
    """Wait for ``proc``; its stderr, after checking it succeeded."""
    _, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err.decode()
    return err.decode()


def deployment(work: Path) -> list[int]:
    """The processes still alive of the deployment whose files are under ``work``."""
    return marked_processes(f"FLWR_HOME={work.resolve() / 'flwr-home'}")


@pytest.mark.slow
@pytest.mark.federation
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_every_process_of_the_deployment(tmp_path, sig):
    """Ctrl-C 15 s in (the run going; the ServerApp started by the SuperLink's SuperExec in a
    session of its own); SIGTERM as soon as the first node is starting."""
    work = tmp_path / "work"
    proc = fedmc("federate", "local", "--ratings", ratings_file(tmp_path, users=60),
                 "--columns", "user_id,item_id,stars", "--clients", 5, "--rounds", 1000,
                 "--out", tmp_path / "out", "--work", work, "-q")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not (
            sig == signal.SIGTERM and (work / "logs" / "node-0.log").exists()):
        time.sleep(0.05)
    assert proc.poll() is None and deployment(work), "the deployment is running"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err.decode()
    assert deployment(work) == [], "the command returned before every process was gone"
    time.sleep(10)
    assert deployment(work) == []
    status = json.loads((tmp_path / "out" / "status.json").read_text())
    assert status["status"] == "interrupted" and not (tmp_path / "out" / "summary.json").exists()


def run_both(tmp_path: Path, data: list[object], algorithm: str,
             params: list[object]) -> tuple[History, History, dict, dict, Path]:
    """``fedmc federate local --secagg`` and ``fedmc run`` with the same options, at the same
    time: their histories and published models, and the federation's folder."""
    common = [*data, "--algorithm", algorithm, "--clients", 5, "--rounds", 10, "--seed", 0,
              *params, "-q"]
    fed, ref = tmp_path / "federated", tmp_path / "simulated"
    federation = fedmc("federate", "local", *common, "--secagg", "--out", fed, "--timeout", 60)
    finished(fedmc("run", *common, "--out", ref))
    finished(federation)
    models = []
    for folder in (fed, ref):
        with np.load(folder / "model.npz") as npz:
            models.append({name: npz[name] for name in npz.files})
    return (History.read_csv(fed / "history.csv"), History.read_csv(ref / "history.csv"),
            *models, fed)


def ml100k() -> list[object]:
    folder = require_shared_data("ml-100k")
    return ["--dataset", "ml-100k", "--data-dir", folder.parent]


SECURE_CASES = {
    "fedmc-admm": (ml100k, "fedmc-admm", ["--active", 3], True),
    "fedmavg": (ml100k, "fedmavg", ["--active", 3], True),
    # one user per client is RFRec's protocol; --clients 5 federates 5 clients, all active;
    # its default optimizer, Adam, turns differences of 1e-10 into steps where a gradient
    # vanishes, so its model is held to the bound with plain gradient steps
    "rfrec-gd": (ml100k, "rfrec", ["-P", "optimizer=gd"], True),
    "rfrec-adam": (ml100k, "rfrec", [], False),
    "felb": (lambda: ["--dataset", "synthetic-boolean"], "felb", ["--active", 3], True),
}


@pytest.mark.slow
@pytest.mark.federation
@pytest.mark.parametrize(("data", "algorithm", "params", "model_bound"), SECURE_CASES.values(),
                         ids=SECURE_CASES.keys())
def test_federate_local_with_secagg_equals_fedmc_run(tmp_path, data, algorithm, params,
                                                     model_bound):
    """Every round's metrics within 1e-6, the published model within the quantization's bound
    (10 rounds of sums over 5 clients, each within a quantum of 2^-26 of the largest value per
    client), no client lost; a second run into the same folder exits 2 at once."""
    history, reference, model, expected, out = run_both(tmp_path, data(), algorithm, params)
    assert all(row["lost"] == "" for row in history.rows), history.column("lost")
    assert history.column("clients").tolist() == reference.column("clients").tolist()
    assert max(len(v) for v in client_ids(history).values()) == 5
    metrics = [c for c in reference.columns if c not in ("round", "seconds", "bytes_up")]
    for column in metrics:
        np.testing.assert_allclose(history.column(column), reference.column(column),
                                   rtol=1e-6, atol=1e-6, err_msg=column)
    for name, value in expected.items():
        bound = 10 * 5 * QUANTUM * np.abs(value).max() if model_bound else np.inf
        np.testing.assert_allclose(model[name], value, rtol=0, atol=bound, err_msg=name)
    started = time.monotonic()
    again = fedmc("federate", "local", *data(), "--algorithm", algorithm, "--out", out, "-q")
    _, err = again.communicate(timeout=120)
    assert again.returncode == 2 and b"already holds a run" in err
    assert time.monotonic() - started < 30
