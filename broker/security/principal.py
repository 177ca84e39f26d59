"""Principals and the per-request security context (Kafka's KafkaPrincipal, RequestContext).

Theory of operation: every request arrives on a listener with a security protocol. Its principal
comes from the transport or from credentials, never from a field of the request:

* PLAINTEXT: ``User:ANONYMOUS``;
* SSL: the client certificate's common name, ``User:<CN>`` (no certificate: ANONYMOUS; the
  listener decides whether one is required);
* SASL_SSL: the SCRAM user that authenticated, ``User:<name>``.

A broker is a principal whose certificate (on an SSL listener, checked against the cluster CA by
TLS itself) names ``<broker.principal.prefix><id>`` - ``User:broker-2`` is broker 2. Only broker
principals may use the inter-broker and control-plane listeners (S12.1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

PLAINTEXT: Final = "PLAINTEXT"
SSL: Final = "SSL"
SASL_SSL: Final = "SASL_SSL"
SECURITY_PROTOCOLS: Final = (PLAINTEXT, SSL, SASL_SSL)
DEFAULT_BROKER_PREFIX: Final = "broker-"


@dataclass(frozen=True, slots=True)
class Principal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> Principal:
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"a principal is Type:name (e.g. User:alice), got {text!r}")
        return cls(kind, name)


ANONYMOUS: Final = Principal("User", "ANONYMOUS")


def user(name: str) -> Principal:
    return Principal("User", name)


def broker_id_of(principal: Principal, prefix: str = DEFAULT_BROKER_PREFIX) -> int | None:
    """The broker id a principal stands for (None: not a broker)."""
    if principal.principal_type != "User" or not principal.name.startswith(prefix):
        return None
    rest = principal.name[len(prefix):]
    return int(rest) if re.fullmatch(r"[0-9]{1,9}", rest) else None


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a handler knows about who sent a request and how."""

    principal: Principal
    listener: str
    security_protocol: str
    host: str
    # The request came in on the inter-broker or control-plane listener.
    inter_broker: bool = False
    # The principal's broker id when it is a broker.
    broker_id: int | None = None
    # The request's bytes are held in its listener's memory pool until it is answered (a socket
    # server listener: broker.network.socket_server): the request layer does not reserve them again.
    bytes_reserved: bool = False


# Requests built inside the broker, and handlers called by tests without a transport.
INTERNAL: Final = RequestContext(Principal("User", "internal"), "", PLAINTEXT, "127.0.0.1", inter_broker=True)
LOCAL_CLIENT: Final = RequestContext(ANONYMOUS, "", PLAINTEXT, "127.0.0.1")


def common_name(peercert: object) -> str | None:
    """The subject CN of a certificate as Python's ``ssl`` describes it (``getpeercert()``)."""
    if not isinstance(peercert, dict):
        return None
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and value:
                return str(value)
    return None


def peer_host(peer: str) -> str:
    """The address part of gRPC's peer string (``ipv4:127.0.0.1:5555``, ``ipv6:[::1]:5555``)."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6" and rest.startswith("["):
        return rest[1:rest.index("]")] if "]" in rest else rest
    if kind in ("ipv4", "ipv6"):
        return rest.rpartition(":")[0]
    return peer
