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
