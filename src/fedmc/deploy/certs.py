"""``fedmc federate certs``: the keys and certificates of a deployment, and its roster.

One folder holds everything an operator hands out (:func:`write_certs`)::

    ca.crt            the CA certificate: every node and operator checks the SuperLink with it
    ca.key            the CA's private key (only to issue certificates: keep it offline)
    server.pem        the SuperLink's certificate, signed by the CA; its subjectAltName holds
                      the names and addresses given and the loopback (IP:127.0.0.1,
                      DNS:localhost): the SuperLink's own executor and the operator's
                      ``flwr`` commands reach it there, and a certificate without it leaves
                      every run ``pending``
    server.key        its private key
    client-C          node C's authentication key (OpenSSH, EC P-384: what Flower's SuperNode
                      authentication takes); only node C's host gets it
    client-C.pub      its public key
    roster.json       which public key speaks for which client: ``{"0": "ecdsa-sha2-nistp384
                      AAAA...", ...}``; ``fedmc federate server`` admits exactly these keys and
                      its ServerApp accepts client C only from the node holding C's key

A client may make its own key pair (``ssh-keygen -t ecdsa -b 384``) and hand over only the
public key: ``--node-key C=FILE.pub`` puts it in the roster and writes no private key for C.
The CA and the server use EC P-384 keys with SHA-384 signatures.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fedmc.errors import ConfigError
from fedmc.files import write_atomic

LOOPBACK = ("127.0.0.1", "localhost")
CURVE = ec.SECP384R1
def write_certs(out: Path, n_clients: int, names: Sequence[str], days: int = 365,
                node_keys: Mapping[int, Path] | None = None, overwrite: bool = False) -> None:
    """Write a CA, the SuperLink's certificate for ``names`` (and the loopback), a key pair
    per client (or the public key given in ``node_keys``) and the roster into ``out``
    (module docstring). Everything is written to a temporary folder first: on any error
    ``out`` is left as it was."""
    if n_clients < 1:
        raise ConfigError(f"--clients must be at least 1, got {n_clients}")
    if days < 1:
        raise ConfigError(f"--days must be at least 1, got {days}")
    given = {c: _read_public_key(path) for c, path in (node_keys or {}).items()
             if _in_range(c, n_clients, path)}
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise ConfigError(f"{out} is not empty (it may hold a deployment's keys); "
                          f"--overwrite replaces them")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".certs-", dir=out.parent))
    try:
        ca_key, ca_cert = _authority(days)
        _write_key(staging / "ca.key", ca_key)
        _write_cert(staging / "ca.crt", ca_cert)
        server_key = ec.generate_private_key(CURVE())
        _write_key(staging / "server.key", server_key)
        _write_cert(staging / "server.pem",
                    _server_cert(server_key, ca_key, ca_cert, _alt_names(names), days))
        roster = {}
        for c in range(n_clients):
            if c in given:
                roster[str(c)] = given[c]
                continue
            key = ec.generate_private_key(CURVE())
            private = key.private_bytes(serialization.Encoding.PEM,
                                        serialization.PrivateFormat.OpenSSH,
                                        serialization.NoEncryption())
            write_atomic(staging / f"client-{c}", private, private=True)
            roster[str(c)] = _ssh_public(key.public_key())
            (staging / f"client-{c}.pub").write_text(roster[str(c)] + "\n")
        (staging / "roster.json").write_text(json.dumps(roster, indent=1) + "\n")
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _in_range(client: int, n_clients: int, path: Path) -> bool:
    if not 0 <= client < n_clients:
        raise ConfigError(f"--node-key {client}={path}: client {client} is not in "
                          f"0..{n_clients - 1}")
    return True


def _read_public_key(path: Path) -> str:
    """An OpenSSH public key line from ``path`` (checked: a NIST EC key)."""
    try:
        line = path.read_text().strip()
        key = serialization.load_ssh_public_key(line.encode())
    except (OSError, ValueError, UnicodeError) as exc:
        raise ConfigError(f"{path}: not an OpenSSH public key ({exc})") from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise ConfigError(f"{path}: not an elliptic-curve key (ssh-keygen -t ecdsa -b 384)")
    return _ssh_public(key)


def _ssh_public(key: ec.EllipticCurvePublicKey) -> str:
    return key.public_bytes(serialization.Encoding.OpenSSH,
                            serialization.PublicFormat.OpenSSH).decode()


def _alt_names(names: Sequence[str]) -> list[x509.GeneralName]:
    """DNS names and IP addresses for the subjectAltName, the loopback included once."""
    alt: list[x509.GeneralName] = []
    for name in dict.fromkeys([*names, *LOOPBACK]):
        if not name or any(ch.isspace() for ch in name):
            raise ConfigError(f"--name {name!r}: not a host name or address")
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    return alt


def _validity(days: int) -> tuple[datetime.datetime, datetime.datetime]:
    start = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    return start, start + datetime.timedelta(days=days)


def _authority(days: int) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(CURVE())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedmc federation CA")])
    start, end = _validity(days)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA384()))
    return key, cert


def _server_cert(key: ec.EllipticCurvePrivateKey, ca_key: ec.EllipticCurvePrivateKey,
                 ca_cert: x509.Certificate, alt: list[x509.GeneralName],
                 days: int) -> x509.Certificate:
    first = alt[0]
    common = first.value if isinstance(first, x509.DNSName) else str(first.value)
    start, end = _validity(days)
    return (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False,
                crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA384()))


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    write_atomic(path, key.private_bytes(serialization.Encoding.PEM,
                                         serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()), private=True)
