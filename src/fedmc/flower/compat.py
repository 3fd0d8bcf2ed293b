"""The one door to Flower's internals: every import of a non-public ``flwr`` module is here.

Elsewhere fedmc imports only Flower's public API (``flwr.app``, ``flwr.serverapp``,
``flwr.clientapp``, the top levels of ``flwr.common``, ``flwr.server`` and ``flwr.client``, and
the documented ``flwr.server.workflow`` and ``flwr.client.mod``; ``tests/test_architecture.py``
holds the list). What it needs beyond that (the Fleet API's client and protobufs for
:mod:`fedmc.deploy.fleet`, the SuperLink's application for :mod:`fedmc.deploy.server`, the
object pulls of :mod:`~fedmc.flower.transport` and the node, the record serialization of
:mod:`~fedmc.flower.compact`, the state of the SecAgg+ workflow) is re-exported here, and the
differences between the releases ``pyproject.toml`` admits (flwr 1.41 to the 1.43 development
releases) are absorbed here:

* 1.43 renames ``PullAppMessagesRequest.message_ids`` (a repeated string) to
  ``reply_to_message_ids`` (an optional ``StringList``): :func:`pull_replies_request` reads
  the field's name from the message descriptor.
* Up to 1.42 every 403 of the Fleet API means that the request's run is not running (or not
  known); 1.43 drops a reply to a stopped run silently instead and answers 403 also to a reply
  whose source is not the authenticated node. :func:`refuses_run` tells them apart by the error
  code in the response body.

The SuperLink's pieces are imported inside the functions that use them, so that a ClientApp
or a node never loads the SuperLink.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import httpx
from flwr.app.message import remove_content_from_message
from flwr.clientapp.typing import ClientAppCallable
from flwr.common.config import get_fused_config_from_fab, parse_config_args
from flwr.common.constant import HEARTBEAT_DEFAULT_INTERVAL, ErrorCode
from flwr.common.serde import (
    fab_from_proto,
    message_from_proto,
    message_to_proto,
    recorddict_from_proto,
    recorddict_to_proto,
    run_from_proto,
)
from flwr.compat.common.recorddict_compat import fitres_to_recorddict, recorddict_to_fitins
from flwr.proto.fab_pb2 import GetFabRequest  # pylint: disable=E0611
from flwr.proto.fleet_pb2 import (  # pylint: disable=E0611
    ActivateNodeRequest,
    DeactivateNodeRequest,
    PullMessagesRequest,
    PushMessagesRequest,
    RegisterNodeFleetRequest,
    UnregisterNodeFleetRequest,
)
from flwr.proto.heartbeat_pb2 import SendNodeHeartbeatRequest  # pylint: disable=E0611
from flwr.proto.message_pb2 import (  # pylint: disable=E0611
    ConfirmMessageReceivedRequest,
    ObjectTree,
)
from flwr.proto.node_pb2 import Node as NodeProto  # pylint: disable=E0611
from flwr.proto.recorddict_pb2 import RecordDict as RecordDictProto  # pylint: disable=E0611
from flwr.proto.run_pb2 import GetRunRequest  # pylint: disable=E0611
from flwr.proto.runtime_pb2 import PullAppMessagesRequest  # pylint: disable=E0611
from flwr.server.strategy import Strategy  # what the SecAgg+ workflow's context types
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey
from flwr.server.workflow.secure_aggregation.secaggplus_workflow import WorkflowState
from flwr.supercore.error import ApiErrorCode, FlowerError
from flwr.supercore.fab import Fab
from flwr.supercore.heartbeat import HeartbeatSender
from flwr.supercore.inflatable.inflatable_object import (
    get_all_nested_objects,
    get_object_tree,
    iterate_object_tree,
    no_object_id_recompute,
)
from flwr.supercore.inflatable.inflatable_protobuf_utils import (
    make_confirm_message_received_fn_protobuf,
    make_pull_object_fn_protobuf,
    make_push_object_fn_protobuf,
)
from flwr.supercore.inflatable.inflatable_utils import (
    ObjectPullError,
    inflate_object_from_contents,
    pull_and_inflate_object_from_tree,
    pull_objects,
    push_object_contents_from_iterable,
)
from flwr.supercore.interceptors.http.runtime_version import RuntimeVersionHttpInterceptor
from flwr.supercore.primitives.asymmetric import generate_key_pairs, public_key_to_bytes
from flwr.supercore.run import Run, RunNotRunningException
from flwr.superlink.grid.http_grid import HttpGrid
from flwr.supernode.fleet_http_client import FleetHttpClient
from flwr.supernode.node_auth_http_interceptor import NodeAuthHttpInterceptor

__all__ = [
    "HEARTBEAT_DEFAULT_INTERVAL", "MAIN_CONFIGS_RECORD", "MAIN_PARAMS_RECORD",
    "ActivateNodeRequest", "ClientAppCallable", "ConfirmMessageReceivedRequest",
    "DeactivateNodeRequest", "ErrorCode", "Fab", "Strategy", "GetFabRequest", "GetRunRequest",
    "HeartbeatSender", "HttpGrid", "NodeProto", "ObjectPullError", "ObjectTree",
    "PullMessagesRequest", "PushMessagesRequest", "RecordDictProto", "RegisterNodeFleetRequest",
    "Run", "RunNotRunningException", "SendNodeHeartbeatRequest", "UnregisterNodeFleetRequest",
    "WorkflowKey",
    "WorkflowState", "error_message", "fab_from_proto", "fitres_to_recorddict",
    "fleet_client", "fleet_route_paths", "generate_key_pairs", "get_all_nested_objects",
    "get_fused_config_from_fab", "get_object_tree", "inflate_object_from_contents",
    "iterate_object_tree", "make_confirm_message_received_fn_protobuf",
    "make_pull_object_fn_protobuf", "make_push_object_fn_protobuf", "message_from_proto",
    "message_to_proto", "no_object_id_recompute", "node_registrations", "parse_config_args",
    "public_key_to_bytes", "pull_and_inflate_object_from_tree", "pull_objects",
    "pull_replies_request", "push_object_contents_from_iterable", "recorddict_from_proto",
    "recorddict_to_fitins", "recorddict_to_proto", "refuses_run", "register_node_key",
    "remove_content_from_message", "run_from_proto", "superlink_app", "superlink_state",
    "uvicorn_log_config",
]

RUN_REFUSALS = frozenset({ApiErrorCode.FLEET_RUN_STATUS_NOT_ALLOWED,
                          ApiErrorCode.FLEET_GET_RUN_FAILED, ApiErrorCode.FLEET_GET_FAB_FAILED})
"""The Fleet API's error codes that refuse a request for its run (not running, not known)."""

_REPLY_IDS_FIELD = ("reply_to_message_ids"
                    if "reply_to_message_ids" in PullAppMessagesRequest.DESCRIPTOR.fields_by_name
                    else "message_ids")


# -- the ServerApp's side of the Runtime API --------------------------------------------------

def pull_replies_request(message_ids: Iterable[str]) -> PullAppMessagesRequest:
    """A request for the replies to the messages ``message_ids`` (module docstring: 1.43)."""
    ids = sorted(message_ids)
    if _REPLY_IDS_FIELD == "message_ids":
        return PullAppMessagesRequest(message_ids=ids)
    request = PullAppMessagesRequest()
    getattr(request, _REPLY_IDS_FIELD).vals.extend(ids)  # present, even when empty
    return request


# -- a node's side of the Fleet API -----------------------------------------------------------

def fleet_client(address: str, root_certificates: str | None, private: Any,
                 public: Any) -> FleetHttpClient:
    """Flower's HTTP client of the Fleet API, signing every request with the node's key pair.

    Parameters
    ----------
    address
        The Fleet API's ``HOST:PORT``.
    root_certificates
        The path of the CA certificate to check the SuperLink's with (None: insecure).
    private, public
        The node's EC key pair.
    """
    return FleetHttpClient.from_server_address(
        address, root_certificates is None, root_certificates,
        interceptors=[RuntimeVersionHttpInterceptor(component_name="SuperNode"),
                      NodeAuthHttpInterceptor(private, public)])


def error_message(response: httpx.Response) -> str:
    """What the SuperLink said went wrong (its public message), else the reason phrase."""
    error = FlowerError.from_json(response.text)
    return error.message if error is not None else response.reason_phrase


def refuses_run(response: httpx.Response) -> bool:
    """Whether a Fleet API error refuses the request because of its run (module docstring):
    the body's error code says so; a 403 without a code means it before 1.43."""
    if response.status_code != httpx.codes.FORBIDDEN:
        return False
    error = FlowerError.from_json(response.text)
    if error is not None:
        return error.code in RUN_REFUSALS
    return _REPLY_IDS_FIELD == "message_ids"  # a release before 1.43


# -- the SuperLink (fedmc.deploy.server) ------------------------------------------------------

def fleet_route_paths() -> list[str]:
    """The paths of the Fleet API's routes."""
    from flwr.superlink.routers.fleet.router import router

    return [getattr(route, "path") for route in router.routes]  # noqa: B009 (every route has one)


def register_node_key(state: Any, key: bytes, name: str) -> int:
    """Register a node's public key in the SuperLink's state (as ``flwr supernode register``
    does, owner ``none``); the node id."""
    from flwr.common.constant import NOOP_ACCOUNT_NAME, NOOP_FLWR_AID

    return state.create_node(NOOP_FLWR_AID, NOOP_ACCOUNT_NAME, key, HEARTBEAT_DEFAULT_INTERVAL,
                             name=name)


def node_registrations(state: Any) -> list[tuple[int, bytes]]:
    """The node id and public key of every node registered in the SuperLink's state (and not
    unregistered since)."""
    from flwr.supercore.constant import NodeStatus

    return [(info.node_id, info.public_key) for info in state.get_node_info()
            if info.status != NodeStatus.UNREGISTERED]


def superlink_app(*, control_port: int, certificates: tuple[str, str, str],
                  database: str) -> Any:
    """Flower's SuperLink as one FastAPI application with Flower's own lifespan: TLS,
    SuperNode authentication, the SuperExec in subprocess isolation, runtime dependency
    installation off.

    Parameters
    ----------
    control_port
        The port of the operator's socket on ``127.0.0.1``, where the SuperExec is pointed.
    certificates
        The paths of the CA certificate, the SuperLink's certificate and its private key.
    database
        The SQLite file of the SuperLink's state.
    """
    from pathlib import Path

    from flwr.common.constant import TRANSPORT_TYPE_GRPC_RERE
    from flwr.superlink.cli.flower_superlink import SuperLinkLifespan
    from flwr.superlink.config_loader import SuperLinkLifespanConfig, load_control_authn_plugin
    from flwr.superlink.main import create_app

    ca, cert, key = certificates
    config = SuperLinkLifespanConfig(
        control_address=f"127.0.0.1:{control_port}", health_server_address=None,
        host="127.0.0.1", port=control_port, insecure=False,
        certificates=tuple(Path(f).read_bytes() for f in certificates),  # type: ignore[arg-type]
        superexec_auth_secret=None, authn_plugin=load_control_authn_plugin(),
        event_log_plugin=None, fleet_event_log_plugin=None, enable_event_log=False,
        artifact_provider=None, enable_supernode_auth=True,
        fleet_api_type=TRANSPORT_TYPE_GRPC_RERE, fleet_api_address=None, simulation=False,
        ssl_ca_certfile=ca, ssl_certfile=cert, ssl_keyfile=key, database=database,
        isolation="subprocess", runtime_dependency_install=False)
    return create_app(config, SuperLinkLifespan)


def superlink_state(app: Any) -> Any:
    """The link state of a :func:`superlink_app`."""
    return app.state.linkstate_factory.state()


def uvicorn_log_config() -> dict[str, Any]:
    """Flower's logging configuration for uvicorn, at the level of Flower's console log."""
    from flwr.supercore.http_logging import get_uvicorn_log_config
    from flwr.supercore.logger import console_handler

    return get_uvicorn_log_config(console_handler.level)
