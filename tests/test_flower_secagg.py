"""Secure aggregation (fedmc.flower.secagg): SecAgg+ rounds in-process over a grid that loses
a node at a chosen stage, and the scaling that never clips silently."""

from __future__ import annotations

import copy

import numpy as np
import pytest

pytest.importorskip("flwr")

import flwr.compat.common.recorddict_compat as compat  # noqa: E402
from flwr.app import Context, Error, Message, RecordDict  # noqa: E402
from flwr.client.mod import secaggplus_mod  # noqa: E402
from flwr.common import Code, FitIns, FitRes, Status, ndarrays_to_parameters  # noqa: E402
from flwr.common.secure_aggregation.secaggplus_constants import (  # noqa: E402
    RECORD_KEY_CONFIGS,
    Key,
    Stage,
)
from flwr.server.workflow import SecAggPlusWorkflow  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from fedmc.flower.secagg import (  # noqa: E402
    LOWEST_EXPONENT,
    QUANTIZATION,
    RobustSecAggPlusWorkflow,
    _exponents,
    encode,
    secure_mean,
)

NODES = [11, 22, 33, 44]


@pytest.fixture(autouse=True)
def server_identity():
    """Messages take their sender from the process's task identity (a ServerApp's)."""
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    yield
    TaskIdentity.run_id = TaskIdentity.node_id = TaskIdentity.task_id = None


class LossyGrid:
    """Delivers each message to an in-process client (``secaggplus_mod`` around a handler
    that answers with the node's vector); node ``lost`` stops answering from stage ``stage``
    on, as a SIGKILLed node would."""

    def __init__(self, vectors: dict[int, list[np.ndarray]], lost: int, stage: str) -> None:
        self.vectors = vectors
        self.lost, self.stage = lost, stage
        self.contexts = {n: Context(0, n, {}, RecordDict(), {}) for n in vectors}

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            stage = msg.content.config_records[RECORD_KEY_CONFIGS][Key.STAGE]
            if node == self.lost and Stage.all().index(stage) >= Stage.all().index(self.stage):
                continue
            # a copy, as the wire gives: the mod pops keys from records messages may share
            try:
                replies.append(secaggplus_mod(copy.deepcopy(msg), self.contexts[node],
                                              self._answer))
            except Exception as exc:  # a ClientApp's exception reaches the server as an error
                replies.append(Message(Error(0, repr(exc)), reply_to=msg))
        return replies

    def _answer(self, msg: Message, context: Context) -> Message:
        fitres = FitRes(Status(Code.OK, ""),
                        ndarrays_to_parameters(self.vectors[context.node_id]), 1, {})
        return Message(compat.fitres_to_recorddict(fitres, keep_input=True), reply_to=msg)


def vectors(seed: int = 0) -> dict[int, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return {n: [rng.uniform(-0.9, 0.9, size=(5, 3)), rng.uniform(-0.9, 0.9, size=4)]
            for n in NODES}


def instructions() -> dict[int, FitIns]:
    return {n: FitIns(ndarrays_to_parameters([]), {}) for n in NODES}


@pytest.mark.parametrize("stage", Stage.all())
def test_a_node_lost_at_any_stage_leaves_the_sum_of_the_others(stage):
    v = vectors()
    lost = NODES[1]
    mean, results = secure_mean(LossyGrid(v, lost, stage), instructions(), timeout=1.0)
    included = sorted(node for node, _ in results)
    # lost in the unmask stage, its masked vector had arrived and the others hold its shares
    assert included == (NODES if stage == Stage.UNMASK else
                        [n for n in NODES if n != lost])
    quantum = 2 * 1.0 / QUANTIZATION
    for k, total in enumerate(a * len(results) for a in mean):
        exact = sum(v[n][k] for n in included)
        np.testing.assert_allclose(total, exact, rtol=0, atol=len(included) * quantum)


@pytest.mark.parametrize("stage", [Stage.SETUP, Stage.SHARE_KEYS])
def test_the_stock_workflow_aborts_when_a_node_is_lost_in_the_first_two_stages(stage):
    mean, _ = secure_mean(LossyGrid(vectors(), NODES[1], stage), instructions(), timeout=1.0,
                          workflow=SecAggPlusWorkflow)
    assert mean is None


def test_the_robust_workflow_is_the_stock_one_when_nothing_is_lost():
    v = vectors(1)
    for workflow in (SecAggPlusWorkflow, RobustSecAggPlusWorkflow):
        mean, results = secure_mean(LossyGrid(v, -1, Stage.SETUP), instructions(), 1.0,
                                    workflow)
        assert len(results) == len(NODES)
        np.testing.assert_allclose(mean[0] * len(NODES), sum(v[n][0] for n in NODES),
                                   atol=len(NODES) * 2 / QUANTIZATION)


def test_a_sum_left_with_one_upload_is_never_unmasked():
    """Two of four members upload (the others add zeros); one uploader lost before its
    masked vector arrives would leave the other's upload alone in the sum: the workflow halts
    before the unmask stage. A non-uploader lost leaves a sum of two uploads."""
    uploaders = frozenset(NODES[:2])
    mean, _ = secure_mean(LossyGrid(vectors(), NODES[1], Stage.COLLECT_MASKED_VECTORS),
                          instructions(), 1.0, uploaders=uploaders)
    assert mean is None
    mean, results = secure_mean(LossyGrid(vectors(), NODES[2], Stage.COLLECT_MASKED_VECTORS),
                                instructions(), 1.0, uploaders=uploaders)
    assert mean is not None and len(results) == 3


def test_values_beyond_the_range_raise_a_flag_and_show_their_exponent():
    vector, names = encode({"big": np.array([3.0, -5.0]), "small": 0.25, "zero": 0.0},
                           {"big": 1, "small": 0})
    big, small, zero, flags, histogram = vector
    assert names == ["big", "small", "zero"]
    np.testing.assert_array_equal(big, [1.5, -2.5])  # scaled by 2^-1: beyond [-1, 1]
    np.testing.assert_array_equal(flags, [1.0, 0.0, 0.0])
    exponents = _exponents(histogram, names)
    assert exponents == {"big": 5, "small": 1}  # 5 < 2^3; 0.25 < 2^-1; plus HEADROOM (2)
    assert histogram[2, 0] == 1 and LOWEST_EXPONENT < 0
