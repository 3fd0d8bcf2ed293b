"""``fedmc federate server``: a SuperLink that only its nodes can reach from the network.

flwr 1.41's ``flower-superlink`` serves three APIs from one FastAPI application on one
``--host/--port``: the Fleet API (``/v1/fleet/...``, what SuperNodes speak, each request
signed with the node's key), the Control API (``/v1/control/...``: ``flwr run``, ``ls``,
``stop``, ``supernode register``; no authentication without Flower's enterprise plugins)
and the Runtime API (``/v1/runtime/...``: the SuperExec and the ServerApp; ``acquire-task``
asks for no credential in the default subprocess isolation). Bound to a public address,
anyone holding the CA certificate (every node has it) can register a key of their own, run
an app, which is code executed on the server host, and list or stop runs.

This command builds the same application (``flwr.superlink.main.create_app`` with Flower's
own ``SuperLinkLifespan``) and serves it with one uvicorn server on two sockets:

* the **node socket** (``--host``/``--port``, e.g. ``0.0.0.0:9092``): requests arriving
  here reach only the Fleet API's routes and ``/health`` (:class:`FleetOnly`, an exact
  allowlist of paths checked before anything reads the request); everything else is 404;
* the **operator socket** (``127.0.0.1:--control-port``): every API, for ``flwr`` on this
  host (or through an SSH tunnel) and for the SuperExec, which Flower points at this
  address (hence ``IP:127.0.0.1`` in the certificate).

and the safe settings: TLS on both sockets, SuperNode authentication on (a node must hold a
registered key; self-registration is refused), the roster's keys registered at start
(:func:`register_roster`), the state in an SQLite file (``--database``: registrations and
runs survive a restart), runtime dependency installation off, Flower's legacy gRPC servers
off. The roster's path goes to every ServerApp through ``FEDMC_ROSTER``
(:data:`fedmc.flower.roster.ROSTER_ENV`), so every run on this SuperLink admits a client only
from the node holding its key (:mod:`fedmc.flower.grid_clients`).
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedmc.errors import ConfigError
from fedmc.flower.compat import (
    fleet_route_paths,
    node_registrations,
    register_node_key,
    superlink_app,
    superlink_state,
    uvicorn_log_config,
)
from fedmc.flower.out_folder import RUNS_ENV
from fedmc.flower.roster import ROSTER_ENV, read_roster

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def fleet_paths() -> frozenset[str]:
    """The paths of flwr's Fleet API routes, and ``/health``."""
    return frozenset([*fleet_route_paths(), "/health"])


class FleetOnly:
    """An ASGI application that lets requests arriving on the operator's socket reach ``app``
    and, from any other socket, only the paths in ``allowed`` (exact matches).

    A connection's socket is the local address uvicorn records in ``scope["server"]``;
    the operator's socket is bound to ``operator`` only, so a connection from the network
    never has that address.
    """

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]],
                 operator: tuple[str, int], allowed: Iterable[str]) -> None:
        self.app = app
        self.operator = operator
        self.allowed = frozenset(allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request, or refuse it (404; a websocket is closed)."""
        server = scope.get("server")
        if (scope["type"] == "lifespan" or
                (server is not None and tuple(server) == self.operator) or
                (scope["type"] == "http" and scope.get("path") in self.allowed)):
            await self.app(scope, receive, send)
        elif scope["type"] == "http":
            await send({"type": "http.response.start", "status": 404,
                        "headers": [(b"content-type", b"text/plain"),
                                    (b"connection", b"close")]})
            await send({"type": "http.response.body",
                        "body": b"not served on this address\n"})
        else:
            await send({"type": "websocket.close", "code": 1008})


@dataclass(frozen=True)
class Certificates:
    """The files of ``fedmc federate certs`` that the SuperLink needs."""

    ca: Path
    cert: Path
    key: Path
    roster: Path

    @classmethod
    def in_folder(cls, folder: Path) -> Certificates:
        """The files in ``folder``; each must be readable."""
        found = cls(folder / "ca.crt", folder / "server.pem", folder / "server.key",
                    folder / "roster.json")
        for path in (found.ca, found.cert, found.key, found.roster):
            try:
                path.read_bytes()
            except OSError as exc:
                raise ConfigError(f"{path}: not readable ({exc.strerror}); "
                                  f"fedmc federate certs writes it") from None
        return found


def register_roster(state: Any, roster: dict[int, bytes]) -> list[str]:
    """Register every roster key that the SuperLink's state does not know yet (as
    ``flwr supernode register`` does, owner ``none``); a line per key registered, and one
    per registered key that is not in the roster (it can connect; the ServerApp refuses it)."""
    lines = []
    for client, key in sorted(roster.items()):
        if state.get_node_id_by_public_key(key) is None:
            node = register_node_key(state, key, f"client-{client}")
            lines.append(f"registered client {client}'s key as node {node}")
    known = set(roster.values())
    for node_id, key in node_registrations(state):
        if key not in known:
            lines.append(f"node {node_id} is registered but its key is not in the roster "
                         f"(its claims are refused; flwr supernode unregister {node_id})")
    return lines


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (IPv4 or IPv6), ready for uvicorn."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port} ({exc.strerror or exc})") from None
    return sock


def serve(certs: Certificates, host: str, port: int, control_port: int, database: Path,
          announce: Callable[[str], None] = print, runs: Path = Path()) -> None:
    """Run the SuperLink (module docstring) until SIGINT or SIGTERM; its runs take relative
    ``out`` and ``manifest`` paths in ``runs`` (:data:`fedmc.flower.out_folder.RUNS_ENV`)."""
    import uvicorn

    if port == control_port:
        raise ConfigError(f"--port and --control-port must differ (both {port})")
    roster = read_roster(certs.roster)
    public = listening_socket(host, port)
    operator = listening_socket("127.0.0.1", control_port)
    for name in ("FLWR_INTERNAL_GRPC_CONTROL_API", "FLWR_INTERNAL_GRPC_FLEET_API"):
        os.environ.pop(name, None)  # Flower's legacy gRPC APIs would bind 0.0.0.0
    os.environ[ROSTER_ENV] = str(certs.roster.resolve())
    os.environ[RUNS_ENV] = str(runs.resolve())
    # Flower starts flower-superexec (and it flwr-serverapp) from PATH: this Python's first
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent),
                                          os.environ.get("PATH", "")])
    database.parent.mkdir(parents=True, exist_ok=True)
    files = (str(certs.ca.resolve()), str(certs.cert.resolve()), str(certs.key.resolve()))
    app = superlink_app(control_port=control_port, certificates=files,
                        database=str(database.resolve()))
    for line in register_roster(superlink_state(app), roster):
        announce(line)
    bound = public.getsockname()
    announce(f"Fleet API for the nodes: https://{_host(host)}:{bound[1]} (from the network)")
    announce(f"Control API for flwr run/ls/stop/log and supernode register: "
             f"https://127.0.0.1:{control_port} (this host only; from elsewhere: "
             f"ssh -N -L {control_port}:127.0.0.1:{control_port} USER@THIS-HOST, then "
             f'address = "127.0.0.1:{control_port}", root-certificates = {files[0]})')
    announce(f"state: {database}; roster: {certs.roster} ({len(roster)} clients); relative "
             f"out and manifest paths of a run are taken in {runs.resolve()}")
    server = uvicorn.Server(uvicorn.Config(
        FleetOnly(app, ("127.0.0.1", control_port), fleet_paths()),
        ssl_certfile=files[1], ssl_keyfile=files[2], lifespan="on", workers=1,
        proxy_headers=False, server_header=False, access_log=False,
        log_config=uvicorn_log_config()))
    server.run(sockets=[public, operator])


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
