"""How anything opens a channel to a broker listener: plaintext, TLS, mutual TLS, TLS + SCRAM.

Theory of operation: brokers (follower fetchers, the controller's channels, controlled shutdown)
and clients (producer, consumer, admin, CLI, Spark) all connect through ``ChannelSecurity``, named
after kafka-python's options: ``security_protocol`` PLAINTEXT | SSL | SASL_SSL, ``ssl_cafile``
(the cluster CA), ``ssl_certfile``/``ssl_keyfile`` (a client certificate for mutual TLS: brokers
always present theirs), ``sasl_mechanism`` SCRAM-SHA-256 with ``sasl_plain_username`` /
``sasl_plain_password``. SASL credentials ride in call metadata (``authorization: SCRAM-SHA-256
<base64 user:password>``), which gRPC only sends over TLS; the broker checks them against the salted
SCRAM credential it stores (proto.scram).
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import grpc

PLAINTEXT: Final = "PLAINTEXT"
SSL: Final = "SSL"
SASL_SSL: Final = "SASL_SSL"
SCRAM_SHA_256: Final = "SCRAM-SHA-256"
AUTH_HEADER: Final = "authorization"


class SecurityConfigError(ValueError):
    """A client's security options do not fit together."""


def _split_pem(data: bytes) -> tuple[bytes, bytes]:
    certs: list[bytes] = []
    keys: list[bytes] = []
    block: list[bytes] = []
    for line in data.splitlines(keepends=True):
        if line.startswith(b"-----BEGIN"):
            block = [line]
        elif block:
            block.append(line)
            if line.startswith(b"-----END"):
                (keys if b"PRIVATE KEY" in block[0] else certs).append(b"".join(block))
                block = []
    return b"".join(certs), (keys[0] if keys else b"")


def read_key_pair(certfile: str, keyfile: str | None = None) -> tuple[bytes, bytes]:
    """(certificate chain, private key) from one PEM holding both, or from two files."""
    chain, key = _split_pem(Path(certfile).read_bytes())
    if keyfile:
        _c, key = _split_pem(Path(keyfile).read_bytes())
    if not chain or not key:
        raise SecurityConfigError(f"{certfile}{' / ' + keyfile if keyfile else ''}: need a certificate and "
                                  "its private key (PEM)")
    return chain, key


class _SaslCredentials(grpc.AuthMetadataPlugin):
    def __init__(self, mechanism: str, username: str, password: str) -> None:
        token = base64.b64encode(f"{username}:{password}".encode()).decode()
        self._metadata = ((AUTH_HEADER, f"{mechanism} {token}"),)

    def __call__(self, context: Any, callback: Any) -> None:
        callback(self._metadata, None)


@dataclass(frozen=True)
class ChannelSecurity:
    security_protocol: str = PLAINTEXT
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    sasl_mechanism: str = SCRAM_SHA_256
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = None

    def __post_init__(self) -> None:
        proto = self.security_protocol.upper()
        if proto not in (PLAINTEXT, SSL, SASL_SSL):
            raise SecurityConfigError(f"security_protocol must be PLAINTEXT, SSL or SASL_SSL, got "
                                      f"{self.security_protocol!r}")
        if proto == SASL_SSL:
            if self.sasl_mechanism != SCRAM_SHA_256:
                raise SecurityConfigError(f"sasl_mechanism must be {SCRAM_SHA_256}, got {self.sasl_mechanism!r}")
            if not self.sasl_plain_username or self.sasl_plain_password is None:
                raise SecurityConfigError("SASL_SSL needs sasl_plain_username and sasl_plain_password")
        if proto in (SSL, SASL_SSL) and not self.ssl_cafile:
            raise SecurityConfigError(f"{proto} needs ssl_cafile (the cluster CA certificate)")

    @property
    def is_tls(self) -> bool:
        return self.security_protocol.upper() != PLAINTEXT

    def credentials(self) -> grpc.ChannelCredentials | None:
        if not self.is_tls:
            return None
        assert self.ssl_cafile is not None
        root = Path(self.ssl_cafile).read_bytes()
        chain = key = None
        if self.ssl_certfile:
            chain, key = read_key_pair(self.ssl_certfile, self.ssl_keyfile)
        creds = grpc.ssl_channel_credentials(root_certificates=root, private_key=key, certificate_chain=chain)
        if self.security_protocol.upper() == SASL_SSL:
            assert self.sasl_plain_username is not None and self.sasl_plain_password is not None
            call = grpc.metadata_call_credentials(_SaslCredentials(self.sasl_mechanism, self.sasl_plain_username,
                                                                   self.sasl_plain_password))
            creds = grpc.composite_channel_credentials(creds, call)
        return creds

    def ssl_context(self) -> ssl.SSLContext:
        """The same client side as a Python ``ssl`` context (plain sockets, e.g. the replica fetch
        listener): the cluster CA, the host name checked, this side's certificate if any."""
        if not self.is_tls:
            raise SecurityConfigError(f"{self.security_protocol} has no TLS context")
        ctx = ssl.create_default_context(cafile=self.ssl_cafile)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.ssl_certfile:
            ctx.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        return ctx

    def channel(self, address: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
        creds = self.credentials()
        if creds is None:
            return grpc.insecure_channel(address, options=list(options))
        return grpc.secure_channel(address, creds, options=list(options))

    def aio_channel(self, address: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.aio.Channel:
        creds = self.credentials()
        if creds is None:
            return grpc.aio.insecure_channel(address, options=list(options))
        return grpc.aio.secure_channel(address, creds, options=list(options))

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> ChannelSecurity:
        """From Kafka client properties (``security.protocol``, ``ssl.truststore.location``,
        ``ssl.keystore.location``, ``sasl.mechanism``, ``sasl.username``/``sasl.password``) or
        kafka-python's names."""
        def get(*names: str) -> str | None:
            for n in names:
                if n in props:
                    return props[n]
            return None
        return cls(security_protocol=(get("security.protocol", "security_protocol") or PLAINTEXT).upper(),
                   ssl_cafile=get("ssl.truststore.location", "ssl.ca.location", "ssl_cafile"),
                   ssl_certfile=get("ssl.keystore.location", "ssl.certificate.location", "ssl_certfile"),
                   ssl_keyfile=get("ssl.key.location", "ssl_keyfile"),
                   sasl_mechanism=get("sasl.mechanism", "sasl_mechanism") or SCRAM_SHA_256,
                   sasl_plain_username=get("sasl.username", "sasl_plain_username"),
                   sasl_plain_password=get("sasl.password", "sasl_plain_password"))


PLAINTEXT_SECURITY: Final = ChannelSecurity()


def client_security(security: ChannelSecurity | None = None, **options: Any) -> ChannelSecurity:
    """``security`` if given, else one made of kafka-python's option names (``security_protocol``,
    ``ssl_cafile``, ``ssl_certfile``, ``ssl_keyfile``, ``sasl_mechanism``, ``sasl_plain_username``,
    ``sasl_plain_password``) - what the project's clients take as keyword arguments."""
    return security if security is not None else ChannelSecurity(**options)


def parse_sasl_header(value: str) -> tuple[str, str, str] | None:
    """(mechanism, user, password) from the authorization metadata, None if malformed."""
    mechanism, _, token = value.partition(" ")
    try:
        user, sep, password = base64.b64decode(token, validate=True).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return None
    if not sep or not user:
        return None
    return mechanism, user, password
