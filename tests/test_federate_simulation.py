"""fedmc's ServerApp and ClientApp on Flower's simulation engine (``fedmc federate local
--simulation``, :mod:`fedmc.deploy.simulation`): one virtual SuperNode per client, their
ClientApps in Ray actors. Marked slow (Ray starts in about 3 s); skipped without Ray."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("flwr")
pytest.importorskip("ray")

from fedmc.federation.history import History  # noqa: E402
from fedmc.federation.settings import Schedule  # noqa: E402
from fedmc.flower.settings import FederatedRun  # noqa: E402
from fedmc.run.spec import RunSpec  # noqa: E402
from fedmc.testing import FEDERATION_COLUMNS, assert_same_history, client_ids  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.federation]
PARAMS = {"rank": 3}


@pytest.mark.parametrize("secagg", [False, True], ids=["plain", "secure"])
def test_virtual_supernodes_give_fedmc_runs_history(tmp_path, secagg, data_settings,
                                                    ratings_file, simulated, out_files):
    """Four virtual SuperNodes, three a round, four rounds: the history is ``fedmc run``'s
    (plain exactly as the loopback's, SecAgg+ to the quantization's precision), nobody lost,
    and the ClientApps kept their states in the work folder, one per client."""
    from fedmc.deploy.simulation import run_simulated

    settings = data_settings(ratings_file(tmp_path, users=30), clients=4)
    run = RunSpec(params=PARAMS, schedule=Schedule(rounds=4, active=3, seed=0))
    events: list[dict] = []
    run_simulated(FederatedRun(spec=run, secagg=secagg, out=tmp_path / "out"), settings,
                  tmp_path / "work", on_event=events.append)
    history = History.read_csv(tmp_path / "out" / "history.csv")
    tolerance = 1e-6 if secagg else 1e-10
    assert_same_history(history, simulated(settings, run, PARAMS), rtol=tolerance, atol=1e-9,
                        ignore=("seconds", "bytes_up", *FEDERATION_COLUMNS))
    assert not any(client_ids(history, "lost").values())
    _, written = out_files(tmp_path / "out")
    assert events == written and events[-1]["event"] == "done"
    assert sorted(p.name for p in (tmp_path / "work" / "state").iterdir()) == [
        f"client-{c}" for c in range(4)]
    assert json.loads((tmp_path / "out" / "status.json").read_text())["status"] == "finished"


def test_a_signal_stops_the_simulation_and_its_ray_at_once(tmp_path):
    """SIGTERM while the virtual nodes train: exit 143 within seconds, ``status.json`` says
    the run did not finish, and no Ray process of the run is left."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "fedmc", "federate", "local", "--simulation",
                             "--clients", "3", "--rounds", "500", "--out", str(out), "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 240
    while '"round": 2' not in _read(out / "progress.jsonl"):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.2)
    children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                              text=True).stdout.split()
    assert children, "Ray's processes and the status watch are the command's children"
    proc.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    assert proc.wait(60) == 143
    assert time.monotonic() - stopped < 20
    assert json.loads((out / "status.json").read_text())["status"] != "finished"
    deadline = time.monotonic() + 30
    while [c for c in children if _alive(int(c))] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert [c for c in children if _alive(int(c))] == []
    assert "Traceback" not in proc.stderr.read()


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def _read(path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
