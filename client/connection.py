"""Synchronous gRPC connections to brokers and a metadata view (the client's lowest layer).

``Connection`` wraps one channel with the three service stubs. ``ClusterView``
bootstraps from any of the given brokers and answers "who leads this
partition, at which epoch, at which address" - what every client call needs
before it sends anything (SPEC S5.3: the producer sends only to the leader).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass

import grpc

from proto import errors
from proto import minikafka_pb2 as pb
from proto import minikafka_pb2_grpc as pb_grpc
from proto.grpc_options import CHANNEL_OPTIONS
from proto.transport import PLAINTEXT_SECURITY, ChannelSecurity


class Connection:
    def __init__(self, address: str, security: ChannelSecurity = PLAINTEXT_SECURITY) -> None:
        self.address = address
        self.channel = security.channel(address, options=CHANNEL_OPTIONS)
        self.api = pb_grpc.KafkaApiStub(self.channel)  # type: ignore[no-untyped-call]
        self.control = pb_grpc.BrokerControlStub(self.channel)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def parse_bootstrap(servers: str | Iterable[str]) -> list[str]:
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = [s.strip() for s in items if s.strip()]
    if not out:
        raise errors.InvalidRequestError("bootstrap servers are empty")
    for s in out:
        host, sep, port = s.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise errors.InvalidRequestError(f"bad bootstrap server {s!r}: expected host:port")
    return out


@dataclass(frozen=True)
class PartitionLeader:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class ClusterView:
    """Metadata from the cluster plus cached connections per broker."""

    def __init__(self, bootstrap_servers: str | Iterable[str], timeout_s: float = 10.0,
                 security: ChannelSecurity = PLAINTEXT_SECURITY) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.timeout_s = timeout_s
        self.security = security
        self.brokers: dict[int, str] = {}
        # broker id -> its Kafka listener for Produce requests (MetadataResponse.kafka_produce_*), if any.
        self.kafka_produce: dict[int, str] = {}
        self.controller_id = -1
        self.controller_epoch = 0
        self.partitions: dict[tuple[str, int], PartitionLeader] = {}
        self.topic_errors: dict[str, int] = {}
        self._conns: dict[str, Connection] = {}

    def connection(self, address: str) -> Connection:
        conn = self._conns.get(address)
        if conn is None:
            conn = self._conns[address] = Connection(address, self.security)
        return conn

    def leader_connection(self, topic: str, partition: int) -> tuple[Connection, PartitionLeader]:
        pl = self.partitions.get((topic, partition))
        if pl is None:
            self.refresh([topic])
            pl = self.partitions.get((topic, partition))
        if pl is None:
            raise errors.UnknownTopicOrPartitionError(f"{topic}-{partition} is not in the cluster metadata")
        if pl.leader < 0 or pl.leader not in self.brokers:
            raise errors.LeaderNotAvailableError(f"{topic}-{partition} has no live leader")
        return self.connection(self.brokers[pl.leader]), pl

    def refresh(self, topics: Iterable[str] | None = None, allow_auto_create: bool = False) -> pb.MetadataResponse:
        req = pb.MetadataRequest(all_topics=topics is None, topics=list(topics or []),
                                 allow_auto_topic_creation=allow_auto_create)
        failures: list[str] = []
        candidates = list(dict.fromkeys([*self.brokers.values(), *self.bootstrap]))
        for address in candidates:
            try:
                resp: pb.MetadataResponse = self.connection(address).api.Metadata(req, timeout=self.timeout_s)
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.UNAUTHENTICATED:
                    raise rpc_error(e, address) from None
                reason = unreachable_reason(e.code().name, e.details() or '')
                if reason.startswith("connection closed by the server") and speaks_kafka(address):
                    reason = KAFKA_LISTENER_REASON
                failures.append(f"{address}: {reason}")
                continue
            self._apply(resp, all_topics=topics is None)
            return resp
        raise errors.NetworkError(f"cannot reach {'; '.join(failures)}")

    def _apply(self, resp: pb.MetadataResponse, all_topics: bool = False) -> None:
        """The response replaces what the view knew of each topic it lists (a deleted or re-created
        topic leaves nothing stale behind, as Kafka's client metadata), and of every topic when it
        answered a request for all of them."""
        if resp.brokers:
            self.brokers = {b.broker_id: f"{b.host}:{b.port}" for b in resp.brokers}
            self.kafka_produce = {b.broker_id: f"{b.kafka_produce_host}:{b.kafka_produce_port}"
                                  for b in resp.brokers if 0 < b.kafka_produce_port <= 65535 and b.kafka_produce_host}
        self.controller_id = resp.controller_id
        self.controller_epoch = resp.controller_epoch
        listed = {t.name for t in resp.topics}
        if all_topics:
            self.topic_errors = {t: c for t, c in self.topic_errors.items() if t in listed}
            self.partitions = {}
        else:
            self.partitions = {tp: pl for tp, pl in self.partitions.items() if tp[0] not in listed}
        for t in resp.topics:
            self.topic_errors[t.name] = t.error_code
            for p in t.partitions:
                self.partitions[(t.name, p.partition)] = PartitionLeader(p.leader, p.leader_epoch,
                                                                         tuple(p.replicas), tuple(p.isr))

    def partitions_of(self, topic: str) -> list[int]:
        return sorted(p for (t, p) in self.partitions if t == topic)

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()


def rpc_error(e: grpc.RpcError, address: str) -> errors.KafkaError:
    """A failed call as the client's typed error: a refused login is not a network problem."""
    code = e.code() if hasattr(e, "code") else None
    details = e.details() if hasattr(e, "details") else str(e)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return errors.SaslAuthenticationFailedError(f"{address}: {details}")
    if code is None:
        return errors.NetworkError(f"{address}: {e}")
    return errors.NetworkError(f"cannot reach {address}: {unreachable_reason(code.name, details or '')}")


# gRPC's status details for a failed connect are a multi-line debug dump; what a user needs is the
# cause in a few words, as a socket error would say it. First match wins.
_REASONS = (
    ("connection refused", "connection refused"),
    ("socket closed", "connection closed by the server (a TLS listener? give --command-config / security_protocol)"),
    ("handshake", "TLS handshake failed (wrong CA or not a TLS listener?)"),
    ("dns resolution failed", "unknown host"),
    ("domain name not found", "unknown host"),
    ("lookup error", "unknown host"),
    ("name or service not known", "unknown host"),
    ("no route to host", "no route to host"),
    ("network is unreachable", "network is unreachable"),
    ("connection reset", "connection reset"),
    ("timeout", "timed out"),
    ("deadline exceeded", "timed out"),
)


def unreachable_reason(code_name: str, details: str) -> str:
    """One short line for a failed call: ``connection refused``, ``unknown host``, ``timed out``, ..."""
    text = details.lower()
    for needle, reason in _REASONS:
        if needle in text:
            return reason
    if code_name == "DEADLINE_EXCEEDED":
        return "timed out"
    first = details.strip().splitlines()[0] if details.strip() else ""
    return f"{code_name.lower()}: {first}" if first else code_name.lower()


KAFKA_LISTENER_REASON = ("that is a Kafka wire-protocol listener (kafka.listeners, for Kafka's own clients); "
                         "the minikafka tools and client library speak gRPC to a broker's client listener "
                         "(`minikafka cluster status` lists both; 9392 by default)")


def speaks_kafka(address: str, timeout_s: float = 2.0) -> bool:
    """Does ``address`` answer Kafka's ApiVersions v0 (a plain Kafka listener, where the tools were
    pointed at a gRPC one)? Asked only to explain a failed connection (issue 33)."""
    host, _, port = address.rpartition(":")
    client_id = b"minikafka-probe"
    body = struct.pack(">hhih", 18, 0, 0x4D4B, len(client_id)) + client_id
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            head = b""
            for _ in range(8):  # bounded: recv returns at least one byte or b"" (closed)
                chunk = s.recv(8 - len(head))
                if not chunk:
                    break
                head += chunk
                if len(head) == 8:
                    break
    except (OSError, ValueError):
        return False
    return len(head) == 8 and struct.unpack(">i", head[4:])[0] == 0x4D4B


def raise_for(code: int, message: str = "") -> None:
    """Turn a response error code into the typed error (no-op for NONE)."""
    if code != 0:
        raise errors.for_code(code)(message)
