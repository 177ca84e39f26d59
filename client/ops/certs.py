"""``minikafka certs``: a cluster CA and the certificates brokers and clients present (SPEC S12).

Theory of operation: one directory holds the cluster's CA (``ca.pem``, certificate; ``ca.key``,
its key, mode 0600) and one PEM file per identity (``<name>.pem``: certificate chain then private
key, mode 0600) - what ``ssl.keystore.location`` and the clients' ``ssl_certfile``/``ssl_keyfile``
take; ``ca.pem`` is every party's ``ssl.truststore.location`` / ``ssl_cafile``. A certificate's
common name is its principal: ``broker-<id>`` for brokers (the inter-broker listener admits only
those), any other name for a client using mutual TLS. Keys are ECDSA P-256 (fast to make, fast
handshakes). Subject alternative names carry the hosts a broker is reached by (127.0.0.1 and
localhost by default; the service names in docker-compose).

    minikafka certs init [--dir certs]
    minikafka certs issue --name broker-1 [--host 127.0.0.1 --host broker-1] [--dir certs]
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_CERT = "ca.pem"
CA_KEY = "ca.key"
DEFAULT_HOSTS = ("127.0.0.1", "localhost")


class CertError(Exception):
    """A certificate cannot be made; the message says why."""


@dataclass(frozen=True)
class Identity:
    """Paths of one issued identity."""

    pem: Path  # certificate chain + private key
    ca: Path


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def init_ca(directory: Path, name: str = "minikafka-ca", days: int = 3650, force: bool = False) -> Path:
    """Make the CA in ``directory`` (kept if it exists, unless ``force``); returns ca.pem's path."""
    cert_path, key_path = directory / CA_CERT, directory / CA_KEY
    if cert_path.exists() and key_path.exists() and not force:
        return cert_path
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = _now()
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .sign(key, hashes.SHA256()))
    _write_private(key_path, _key_pem(key))
    directory.mkdir(parents=True, exist_ok=True)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path


def _load_ca(directory: Path) -> tuple[x509.Certificate, Any]:
    try:
        cert = x509.load_pem_x509_certificate((directory / CA_CERT).read_bytes())
        key = serialization.load_pem_private_key((directory / CA_KEY).read_bytes(), password=None)
    except FileNotFoundError:
        raise CertError(f"no CA in {directory}: run `minikafka certs init --dir {directory}` first") from None
    return cert, key


def issue(directory: Path, name: str, hosts: Sequence[str] = DEFAULT_HOSTS, days: int = 825,
          valid_from: datetime.datetime | None = None, self_signed: bool = False, out: Path | None = None) -> Identity:
    """A certificate for ``name`` (its common name and principal) signed by the CA in ``directory``.

    ``valid_from``/``days`` and ``self_signed`` exist to make the bad certificates tests need."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    if self_signed:
        issuer_name, signing_key, chain = subject, key, b""
    else:
        ca_cert, ca_key = _load_ca(directory)
        issuer_name, signing_key = ca_cert.subject, ca_key
        chain = ca_cert.public_bytes(serialization.Encoding.PEM)
    sans: list[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    start = valid_from or (_now() - datetime.timedelta(minutes=5))
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(start + datetime.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                     ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(signing_key, hashes.SHA256())
    pem = out or directory / f"{name}.pem"
    _write_private(pem, cert.public_bytes(serialization.Encoding.PEM) + chain + _key_pem(key))
    return Identity(pem, directory / CA_CERT)


def write_secret(path: Path, text: str) -> bool:
    """Write a 0600 secret file unless it exists; True when written."""
    if path.exists():
        return False
    _write_private(path, text.encode())
    return True
