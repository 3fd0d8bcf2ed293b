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

from fedmc.errors import ConfigError

pytest.importorskip("flwr")

from fedmc.deploy.local import complete_lines, marked_processes, signals_deferred  # noqa: E402
from fedmc.federation.history import History  # noqa: E402
from fedmc.run.folder import RunFolder  # noqa: E402
from fedmc.run.runner import execute  # noqa: E402
from fedmc.testing import client_ids  # noqa: E402

SRC = str(Path(__file__).parents[1] / "src")
QUANTUM = 2.0**-26  # a secure sum's error per entry and client, relative (flower/secagg.py)


def test_the_progress_is_read_by_whole_lines(tmp_path):
    """A line the server is still writing is not read (a follower that parsed it failed)."""
    path = tmp_path / "progress.jsonl"
    assert complete_lines(path) == []
    path.write_text('{"event": "connected"}\n{"event": "ro')
    assert complete_lines(path) == ['{"event": "connected"}']
    with open(path, "a") as fh:
        fh.write('und"}\n')
    assert [json.loads(line)["event"] for line in complete_lines(path)] == ["connected", "round"]


@pytest.mark.parametrize(("args", "needle"), [
    (["--rank", "0"], "rank must be at least 1"),
    (["--rank", "5000"], "rank 5000 exceeds"),
    (["--dp-noise", "1"], "needs --dp-clip"),
    (["--seed", "-1"], "seed"),
    (["--clients", "2", "--active", "1", "--secagg"], "at least 2 clients"),
    (["--algorithm", "rfrec", "--partition", "user"], "conflicts with --partition user"),
    (["--simulation", "--stock-nodes"], "give one of them"),
    (["--node-cpus", "0.5"], "--node-cpus sets Ray's CPUs of a virtual SuperNode: it needs "
                             "--simulation"),
])
def test_settings_fedmc_run_refuses_exit_2_at_once_and_write_nothing(
        monkeypatch, capsys, tmp_path, args, needle, invoke, ratings_file):
    out, started = tmp_path / "out", time.monotonic()
    code, _, err = invoke(monkeypatch, capsys, "federate", "local", "--ratings",
                          ratings_file(tmp_path), "--columns", "user_id,item_id,stars",
                          "--clients", 3, "--rounds", 2, *args, "--out", out, "-q",
                          "--work", tmp_path / "work")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists() and time.monotonic() - started < 60
    assert not (tmp_path / "work" / "logs").exists(), "a deployment was started"


def test_an_out_folder_in_use_or_holding_a_run_is_refused_before_anything_starts(
        monkeypatch, capsys, tmp_path, invoke):
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


@pytest.mark.parametrize(("args", "said"), [
    ([], "receives every client's upload; it must be trusted with them"),
    (["--partition", "user", "--dp-epsilon", "8"], "upload (clipped, before any noise); the "
     "DP guarantee holds against those who read the published run, not against the server, "
     "which must be trusted (--dp-epsilon is promised against the server only with --secagg)"),
    (["--secagg"], None),
])
def test_a_plain_federation_says_the_server_sees_the_uploads(monkeypatch, capsys, tmp_path,
                                                              invoke, args, said):
    """Without SecAgg+ the command says, as the federation starts, that the server process
    receives each upload (under DP: clipped, unnoised); with it nothing is said. (Here the
    deployment is a stand-in that refuses at once.)"""
    def no_deployment(*args, **kwargs):
        raise ConfigError("no deployment here")

    monkeypatch.setattr("fedmc.deploy.local.run_local", no_deployment)
    code, _, err = invoke(monkeypatch, capsys, "federate", "local", "--out", tmp_path / "out",
                          *args, "--work", tmp_path / "work")
    assert code == 2 and "no deployment here" in err, err
    assert (said in err) if said else "plain mode" not in err, err


def test_a_signal_waits_for_the_end_of_a_deferred_block_then_is_handled_as_usual():
    """How no node escapes: a signal while a process starts (or the deployment stops) is
    handled once it is recorded (or all are gone)."""
    got: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    try:
        with signals_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            assert got == []
        assert got == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


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
def test_a_signal_stops_every_process_of_the_deployment(tmp_path, sig, ratings_file):
    """Ctrl-C 15 s in (the run going; the ServerApp started by the SuperLink's SuperExec in a
    session of its own); SIGTERM as soon as the first node is starting. Either ends the
    command within 3 s with one line: its main thread trains nothing (the kernels run in the
    deployment's processes), it starts, polls and stops them, so it needs no worker thread
    (:mod:`fedmc.cli.interrupts`)."""
    work = tmp_path / "work"
    proc = fedmc("federate", "local", "--ratings", ratings_file(tmp_path, users=60),
                 "--columns", "user_id,item_id,stars", "--clients", 5, "--rounds", 1000,
                 "--out", tmp_path / "out", "--work", work, "-q")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not (
            sig == signal.SIGTERM and (work / "logs" / "node-0.log").exists()):
        time.sleep(0.05)
    assert proc.poll() is None and deployment(work), "the deployment is running"
    sent = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    assert proc.returncode == 128 + sig, err.decode()
    assert took < 3.0, f"{took:.1f} s"  # the main thread only waits on the processes
    assert err.decode().splitlines() == [
        f"fedmc: interrupted by {sig.name}; its partial output is in {tmp_path / 'out'}"]
    assert deployment(work) == [], "the command returned before every process was gone"
    time.sleep(10)
    assert deployment(work) == []
    status = json.loads((tmp_path / "out" / "status.json").read_text())
    assert status["status"] == "interrupted" and not (tmp_path / "out" / "summary.json").exists()
    assert not (tmp_path / "out" / "checkpoint.pkl").exists()  # nothing could resume from it


def cli_args(options: dict[str, object]) -> list[object]:
    """``fedmc run``'s options by name as command-line arguments."""
    args: list[object] = []
    for name, value in options.items():
        if value is True:  # a flag
            args.append(f"--{name.replace('_', '-')}")
            continue
        for one in value if isinstance(value, list) else [value]:
            args += [f"--{name.replace('_', '-')}", one]
    return args


def published_by_fedmc_run(options: dict[str, object]) -> dict[str, np.ndarray]:
    """The model ``fedmc run`` trains with ``options``, for an algorithm whose run folder has
    no ``model.npz`` (the same settings and code, in this process)."""
    from fedmc.cli.options import run_options
    from fedmc.run.settings import resolve

    return execute(resolve(run_options(options))).trained.model


def run_both(tmp_path: Path, options: dict[str, object],
             ) -> tuple[History, History, dict, dict, Path]:
    """``fedmc federate local --secagg`` and ``fedmc run`` with the same options, at the same
    time: their histories and published models, and the federation's folder."""
    fed, ref = tmp_path / "federated", tmp_path / "simulated"
    federation = fedmc("federate", "local", *cli_args(options), "-q", "--secagg", "--out", fed,
                       "--timeout", 60)
    finished(fedmc("run", *cli_args(options), "-q", "--out", ref))
    finished(federation)
    models = []
    for folder in (fed, ref):
        if not (folder / "model.npz").exists():
            models.append(published_by_fedmc_run(options))
            continue
        with np.load(folder / "model.npz") as npz:
            models.append({name: npz[name] for name in npz.files})
    return (History.read_csv(fed / "history.csv"), History.read_csv(ref / "history.csv"),
            *models, fed)


# (options, share of the model's entries allowed beyond the quantization bound). Where the
# algorithm is discontinuous in its inputs, the secure sums' differences of 1e-10 can change a
# branch: RFRec's default optimizer, Adam, divides each step by the gradient's running size
# (a vanishing gradient's sign decides a step of size alpha), and Felb's Boolean prox (Eq. 6)
# jumps at 0, 1/2 and 1; RFRec is held to the bound with plain gradient steps.
SECURE_CASES = {
    "fedmc-admm": ({"algorithm": "fedmc-admm", "active": "3"}, 0.0),
    "fedmavg": ({"algorithm": "fedmavg", "active": "3"}, 0.0),
    # one user per client is RFRec's protocol; --clients 5 federates 5 clients, all active
    "rfrec-gd": ({"algorithm": "rfrec", "param": ["optimizer=gd"]}, 0.0),
    "rfrec-adam": ({"algorithm": "rfrec"}, 1.0),
    "felb": ({"algorithm": "felb", "active": "3", "dataset": "synthetic-boolean"}, 0.01),
    "fedals": ({"algorithm": "fedals", "active": "3"}, 0.0),
    "fedals-implicit": ({"algorithm": "fedals", "implicit": True, "rank": "4", "active": "3"},
                        0.0),
}


@pytest.mark.slow
@pytest.mark.federation
@pytest.mark.parametrize(("options", "beyond"), SECURE_CASES.values(), ids=SECURE_CASES.keys())
def test_federate_local_with_secagg_equals_fedmc_run(tmp_path, options, beyond,
                                                     require_shared_data):
    """Every round's metrics within 1e-6, the published model within the quantization's bound
    (10 rounds of sums over 5 clients, each within a quantum of 2^-26 of the largest value per
    client; but a share ``beyond`` of its entries), no client lost; a second run into the same
    folder exits 2 at once."""
    if "dataset" not in options:
        options = {**options, "dataset": "ml-100k",
                   "data_dir": require_shared_data("ml-100k").parent}
    options = {**options, "clients": 5, "rounds": 10, "seed": 0}
    history, reference, model, expected, out = run_both(tmp_path, options)
    assert not any(client_ids(history, "lost").values()), client_ids(history, "lost")
    assert history.column("clients").tolist() == reference.column("clients").tolist()
    assert json.loads((out / "config.json").read_text())["data"]["clients"] == 5
    metrics = [c for c in reference.columns  # ranking columns: fedmc run's, after training
               if c not in ("round", "seconds", "bytes_up") and "@" not in c]
    for column in metrics:
        np.testing.assert_allclose(history.column(column), reference.column(column),
                                   rtol=1e-6, atol=1e-6, err_msg=column)
    for name, value in expected.items():
        error = np.abs(model[name] - value)
        outside = error > 10 * 5 * QUANTUM * np.abs(value).max()
        print(f"{name}: {outside.sum()} of {outside.size} entries beyond the bound, "
              f"largest difference {error.max():.3g}")
        assert outside.mean() <= beyond, name
    started = time.monotonic()
    again = fedmc("federate", "local", *cli_args(options), "--out", out, "-q")
    _, err = again.communicate(timeout=120)
    assert again.returncode == 2 and b"already holds a run" in err
    assert time.monotonic() - started < 30


@pytest.mark.slow
@pytest.mark.federation
def test_a_private_secure_federation_publishes_only_what_its_guarantee_covers(
        tmp_path, assert_publishes_only_what_is_private,
        ratings_file):
    """The real ``fedmc federate local --secagg --dp-epsilon 8`` (one user per client, the
    public normalizer from the rating scale, distributed DP): its out folder holds only what
    docs/privacy.md's threat model lists (the in-process canary audit of the same ServerApp
    and ClientApps: tests/test_canary_audit.py)."""

    out = tmp_path / "out"
    finished(fedmc("federate", "local", "-a", "fedmc-admm",
                   "--ratings", ratings_file(tmp_path, users=12),
                   "--columns", "user_id,item_id,stars", "--rating-scale", "1,5",
                   "--dp-epsilon", 8, "--secagg", "--rounds", 3, "--out", out,
                   "--work", tmp_path / "work", "-q"))
    assert_publishes_only_what_is_private(out, 8.0)
    assert json.loads((out / "config.json").read_text())["data"]["partition"] == "user"
