"""What no fault, repeated submission or malformed reply may do to a federation (issue 29),
checked in one process (the loopback_federation fixture of conftest.py): a second run with
the same settings starts afresh, a finished run is never continued, an error reply is a lost
client and never a crash, and an upload outside its algorithm's bounds is refused."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from fedmc.errors import ConfigError  # noqa: E402
from fedmc.federation.history import History  # noqa: E402
from fedmc.federation.settings import Schedule  # noqa: E402
from fedmc.flower.settings import FederatedRun  # noqa: E402
from fedmc.run.settings import RunSpec  # noqa: E402
from fedmc.testing import assert_same_history  # noqa: E402

LOCAL = ("seconds", "participants", "lost", "claims_refused")


@pytest.fixture
def small(tmp_path, data_settings, ratings_file):
    """The data settings and the run of a small federation (4 clients, 3 per round)."""
    settings = data_settings(ratings_file(tmp_path, users=30), clients=4)
    run = FederatedRun(spec=RunSpec(params={"rank": 3},
                                    schedule=Schedule(rounds=4, active=3, seed=0)),
                       out=Path("out"))
    return settings, run


def test_a_second_run_of_the_splits_run_config_starts_afresh(tmp_path, monkeypatch, capsys,
                                                             invoke, ratings_file,
                                                             loopback_federation):
    """The ``run.toml`` of ``fedmc federate split`` submitted twice (another ``out``) to the
    same nodes, as docs/federation.md's steps do: the second run's clients start from their
    initial states, not from the first run's final ones, so both histories are the same."""
    ratings = ratings_file(tmp_path, users=30)
    split = tmp_path / "split"
    code, _, err = invoke(monkeypatch, capsys, "federate", "split", "--ratings", ratings,
                          "--columns", "user_id,item_id,stars", "--clients", 4, "--active", 3,
                          "--rounds", 4, "--rank", 3, "--out", split)
    assert code == 0, err
    with open(split / "run.toml", "rb") as fh:
        run = FederatedRun.from_run_config(tomllib.load(fh))
    settings = run.spec.data  # unused: the split is given
    histories = [loopback_federation(tmp_path, settings,
                                     run.model_copy(update={"out": tmp_path / out}),
                                     split=split, run_id=run_id)
                 for run_id, out in enumerate(("first", "second"), start=1)]
    assert_same_history(*histories, rtol=0, atol=0, ignore=LOCAL)


def test_a_finished_run_is_never_continued(tmp_path, small, monkeypatch, loopback_federation):
    """A copy of a checkpoint taken during a run that has since finished, resumed: every
    node refuses the run's key, and the server stops with that line before any exchange."""
    import fedmc.flower.server_app as server_app

    settings, run = small
    write, kept = server_app._write_checkpoint, tmp_path / "kept.pkl"

    def write_and_keep(run_, checkpoint):
        write(run_, checkpoint)
        if checkpoint.round == 2:
            shutil.copy(run_.out / server_app.CHECKPOINT, kept)

    monkeypatch.setattr(server_app, "_write_checkpoint", write_and_keep)
    loopback_federation(tmp_path, settings, run)
    assert not list((tmp_path / "state").glob("*/committed.pkl"))  # the nodes dropped them
    shutil.copy(kept, tmp_path / "out" / server_app.CHECKPOINT)
    with pytest.raises(ConfigError, match="has already finished here"):
        loopback_federation(tmp_path, settings, run.model_copy(update={"resume": True}),
                            split=tmp_path / "split", run_id=2)
    rows = History.read_csv(tmp_path / "out" / "history.csv").rows
    assert len(rows) == 5 and np.isfinite([r["test_rmse"] for r in rows]).all()
