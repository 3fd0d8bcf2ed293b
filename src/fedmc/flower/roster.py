"""The roster: which public key speaks for which client (``roster.json`` of ``fedmc federate
certs``); a ServerApp beside a SuperLink that names one in :data:`ROSTER_ENV` accepts client C
only from the node holding C's key."""

from __future__ import annotations

import json
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from fedmc.errors import ConfigError

ROSTER_ENV = "FEDMC_ROSTER"
"""The environment variable that names the roster for the ServerApps of a SuperLink."""


def read_roster(path: Path) -> dict[int, bytes]:
    """The roster's public keys by client id, each as the PEM bytes Flower records for a node
    (``NodeInfo.public_key``)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a readable roster ({exc})") from None
    if not isinstance(doc, dict) or not doc:
        raise ConfigError(f"{path}: a roster maps client ids to public keys")
    roster: dict[int, bytes] = {}
    for client, line in doc.items():
        try:
            key = serialization.load_ssh_public_key(str(line).encode())
            if not isinstance(key, ec.EllipticCurvePublicKey):
                raise ValueError("not an elliptic-curve key")
            roster[int(client)] = pem_public(key)
        except ValueError as exc:
            raise ConfigError(f"{path}: client {client!r}: not an EC public key ({exc})") from None
    if len(set(roster.values())) != len(roster):
        raise ConfigError(f"{path}: two clients share one public key")
    return roster


def pem_public(key: ec.EllipticCurvePublicKey) -> bytes:
    """A public key as Flower stores it (PEM, SubjectPublicKeyInfo)."""
    return key.public_bytes(serialization.Encoding.PEM,
                            serialization.PublicFormat.SubjectPublicKeyInfo)
