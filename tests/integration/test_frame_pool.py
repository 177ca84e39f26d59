"""The Kafka listeners' memory pool (queued.max.request.bytes) against real brokers (SPEC S13.4,
S15.2): connections that announce big frames and send 10 bytes hold those 10 bytes, not the pool -
other clients' produce (acks=all) and ApiVersions are answered at once, on a PLAINTEXT listener and
before authentication on a SASL_SSL one - and client traffic that does fill the pool with real bytes
does not hold up replication (the replica fetch listener has a pool of its own).

Before, a frame's announced size was reserved once its size prefix was read: eight connections
announcing 256 KiB frames filled a 1 MiB pool, and every other request to that broker - follower
fetches included - waited until the stalled frames' request.timeout.ms (30 s here)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import ClusterFixture, batch_of, produce, ready_topic
from kafka_frames import frame, read_response

from broker.security.kafka_sasl import MAX_PREAUTH_FRAME_BYTES
from client.connection import ClusterView
from client.ops.local_cluster import BrokerProc
from proto import minikafka_pb2 as pb

pytestmark = pytest.mark.integration

POOL = 1 << 20  # queued.max.request.bytes
MAX_FRAME = 256 << 10  # socket.request.max.bytes
STALLED = 8  # connections announcing MAX_FRAME each: twice the pool
REQUEST_TIMEOUT_MS = 30_000  # how long a stalled frame may hold on before its connection is closed
# Generous, and well short of request.timeout.ms: the requests below waited that long before.
ANSWERED_WITHIN_S = 10.0
TOPIC = "frame-pool"


def _leader(fx: ClusterFixture, **overrides: str) -> tuple[BrokerProc, ClusterView]:
    """Start 3 brokers with the small pool, and create TOPIC (RF 3, min.insync.replicas 2): the
    broker leading it (where the stalled connections go) and a view of the cluster."""
    c = fx.start(3, queued_max_request_bytes=str(POOL), socket_request_max_bytes=str(MAX_FRAME),
                 request_timeout_ms=str(REQUEST_TIMEOUT_MS), **overrides)
    assert c.state is not None
    broker_id, _epoch = ready_topic(fx, TOPIC, rf=3, **{"min.insync.replicas": "2"})
    return c.state.brokers[broker_id], fx.view()


@contextlib.contextmanager
def _stalled(connect: Callable[[], socket.socket], announced: int, sends: list[int]) -> Iterator[None]:
    """A connection per entry of ``sends``, each announcing an ``announced``-byte frame and sending
    that many bytes of it, then nothing; closed on exit."""
    socks: list[socket.socket] = []
    try:
        for sent in sends:
            s = connect()
            socks.append(s)
            s.settimeout(5)
            s.sendall(struct.pack(">i", announced) + b"\0" * sent)
        time.sleep(1.0)  # the broker has read what they sent (and reserved the rest too, before the fix)
        yield
    finally:
        for s in socks:
            s.close()


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def _exchange(s: socket.socket, request: bytes) -> bytes:
    """Send one request frame and read its response frame (size prefix included), within
    ANSWERED_WITHIN_S in all."""
    deadline = time.monotonic() + ANSWERED_WITHIN_S
    s.settimeout(ANSWERED_WITHIN_S)
    s.sendall(struct.pack(">i", len(request)) + request)
    size = _recv_exactly(s, 4)
    body = _recv_exactly(s, int.from_bytes(size, "big"))
    assert time.monotonic() < deadline, "answered, but not within the bound"
    return size + body


def _plain(b: BrokerProc) -> Callable[[], socket.socket]:
    return lambda: socket.create_connection((b.host, b.kafka_port), timeout=10)


def test_frames_announced_but_not_sent_hold_nothing_and_delay_no_one(cluster: ClusterFixture) -> None:
    # Followers fetch over gRPC here, so that nothing but the stalled frames takes the Kafka
    # listener's pool: before the fix they filled it exactly (four of 256 KiB), deterministically.
    # (With the replica fetch listener on, follower fetch frames took part of it and left room.)
    b, _view = _leader(cluster, replica_fetch_listener_port="-1")
    with _stalled(_plain(b), MAX_FRAME, [10] * STALLED), _plain(b)() as s:
        cid, versions = read_response(_exchange(s, frame(18, 3, correlation_id=1)), 18, 3)
        assert cid == 1 and versions.error_code == 0 and versions.api_keys
        produce_v9 = frame(0, 9, {"acks": -1, "timeout": 10_000, "topic_data": [{"name": TOPIC, "partition_data": [
            {"index": 0, "records": batch_of(["while-stalled"])}]}]}, correlation_id=2)
        cid, answer = read_response(_exchange(s, produce_v9), 0, 9)
        assert cid == 2
        (partition,) = answer.responses[0].partition_responses
        assert (partition.error_code, partition.base_offset >= 0) == (0, True), partition


def test_clients_filling_the_pool_with_real_bytes_do_not_hold_up_replication(cluster: ClusterFixture) -> None:
    """The Kafka listener's pool full of frames whose bytes did arrive (the pool's purpose: it holds
    them): an acks=all produce over gRPC still gets its followers' fetches, which go to the replica
    fetch listener's own pool (it shared this one, and waited for room with everyone else)."""
    b, view = _leader(cluster)
    # Four frames one byte short of MAX_FRAME, and 4 bytes of a fifth: the pool to the last byte
    # (whatever order the broker reads them in, every byte fits).
    fill = [MAX_FRAME - 1] * (POOL // MAX_FRAME) + [POOL // MAX_FRAME]
    assert sum(fill) == POOL
    with _stalled(_plain(b), MAX_FRAME, fill), _plain(b)() as probe:
        # The premise: the Kafka listener's pool is full (by design: those bytes are in memory), so
        # the smallest frame waits - as a follower's fetch frame would in a pool shared with it.
        # (Shared, either the follower fetches took room first and this probe got its answer, or
        # they waited with it and the produce below lost its ISR: the test failed both ways.)
        probe.sendall(struct.pack(">i", len(api_versions := frame(18, 3))) + api_versions)
        probe.settimeout(1.0)
        with pytest.raises(TimeoutError):
            probe.recv(1)
        started = time.monotonic()
        r = produce(view.connection(b.address), TOPIC, 0, batch_of(["replicated"]), acks=-1, timeout_ms=10_000)
        assert r.error_code == pb.ErrorCode.NONE, pb.ErrorCode.Name(r.error_code)
        assert time.monotonic() - started < ANSWERED_WITHIN_S


def test_before_authentication_a_connection_holds_at_most_its_small_frame(cluster: ClusterFixture) -> None:
    """SASL_SSL: a frame larger than the pre-authentication limit closes its connection at once, and
    connections announcing frames of that limit and sending 10 bytes hold 10 bytes each: another
    connection's ApiVersions (served before authentication) is answered at once."""
    pool = 8 * MAX_PREAUTH_FRAME_BYTES
    c = cluster.start(1, secure=True, queued_max_request_bytes=str(pool), request_timeout_ms=str(REQUEST_TIMEOUT_MS))
    assert c.state is not None
    b = c.state.brokers[1]
    tls = ssl.create_default_context(cafile=str(Path(c.state.secrets) / "ca.pem"))

    def connect() -> socket.socket:
        raw = socket.create_connection((b.host, b.kafka_port), timeout=10)
        return tls.wrap_socket(raw, server_hostname=b.host)

    with connect() as s:
        s.sendall(struct.pack(">i", MAX_PREAUTH_FRAME_BYTES + 1) + b"\0" * 10)
        s.settimeout(ANSWERED_WITHIN_S)
        assert s.recv(1) == b"", "closed at once"
    with _stalled(connect, MAX_PREAUTH_FRAME_BYTES, [10] * (2 * pool // MAX_PREAUTH_FRAME_BYTES)), connect() as s:
        cid, versions = read_response(_exchange(s, frame(18, 3, correlation_id=5)), 18, 3)
        assert cid == 5 and versions.error_code == 0
