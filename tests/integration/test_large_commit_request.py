"""An OffsetCommit of 100,000 partitions does not hold up another client (SPEC S15.2).

Such a request (a 2 MB frame, within every limit: each partition is refused INVALID_REQUEST,
beyond max.request.partitions) was decoded, handled and encoded in one go: the broker's event loop
was held for ~2.6 s, and another connection's ApiVersions was answered only after the big answer
had been written. Now the big one goes in slices and the other connection is answered while it is
still being worked on; the big answer is the same."""

from __future__ import annotations

import select
import socket
import struct
import time
from typing import Any

import pytest
from helpers import ClusterFixture
from kafka_frames import frame, read_frame, read_response

pytestmark = pytest.mark.integration

PARTITIONS = 100_000
VERSION = 8  # the flexible version: the slowest to decode and encode
ANSWERED_WITHIN_S = 5.0  # ApiVersions: generous (answered in milliseconds now, ~2.6 s before)
BIG_ANSWERED_WITHIN_S = 60.0
STALL_LIMIT_S = 0.3  # the longest ApiVersions wait while the big request is worked on (a few ms now)
INVALID_REQUEST = 42
UNKNOWN_TOPIC_OR_PARTITION = 3


def _readable(s: socket.socket) -> bool:
    return bool(select.select([s], [], [], 0)[0])


def _commit(partitions: int, correlation_id: int) -> bytes:
    return frame(8, VERSION, {
        "group_id": "big-commit", "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": "nosuch", "partitions": [
            {"partition_index": p, "committed_offset": p, "committed_leader_epoch": -1, "committed_metadata": ""}
            for p in range(partitions)]}]}, correlation_id=correlation_id, client_id="big")


def _codes(resp: Any) -> list[tuple[str, int, int]]:
    return [(t.name, p.partition_index, int(p.error_code)) for t in resp.topics for p in t.partitions]


def test_an_offset_commit_of_100k_partitions_does_not_hold_up_another_client(cluster: ClusterFixture) -> None:
    c = cluster.start(1)
    assert c.state is not None
    b = next(iter(c.state.brokers.values()))
    big_frame = _commit(PARTITIONS, 77)
    with socket.create_connection((b.host, b.kafka_port), timeout=10) as other, \
            socket.create_connection((b.host, b.kafka_port), timeout=10) as big:
        other.settimeout(ANSWERED_WITHIN_S)
        big.settimeout(BIG_ANSWERED_WITHIN_S)
        versions_v3 = frame(18, 3, correlation_id=1)
        other.sendall(struct.pack(">i", len(versions_v3)) + versions_v3)
        assert read_response(read_frame(other), 18, 3)[0] == 1

        big.sendall(struct.pack(">i", len(big_frame)) + big_frame)
        time.sleep(0.1)  # the broker has read the whole frame and is working on it
        answered_while_big_pending = 0
        slowest = 0.0
        for cid in range(2, 42):  # until the big answer comes: ApiVersions every 10 ms
            request = frame(18, 3, correlation_id=cid)
            start = time.monotonic()
            other.sendall(struct.pack(">i", len(request)) + request)
            got, versions = read_response(read_frame(other), 18, 3)
            assert (got, versions.error_code) == (cid, 0) and versions.api_keys
            slowest = max(slowest, time.monotonic() - start)
            if _readable(big):
                break
            answered_while_big_pending += 1  # no byte of the big answer yet: answered while it was worked on
            time.sleep(0.01)
        assert answered_while_big_pending > 0, "ApiVersions was answered only after the big OffsetCommit"
        # Milliseconds now; 0.7 s here (2.6 s in bench/large_request_bench.py) when it went in one go.
        assert slowest < STALL_LIMIT_S, f"an ApiVersions waited {slowest:.3f} s"

        got, resp = read_response(read_frame(big), 8, VERSION)
        assert got == 77
        assert _codes(resp) == [("nosuch", p, INVALID_REQUEST) for p in range(PARTITIONS)]

        # Within the limit, through the same sliced path (a 40 KB frame): judged partition by partition.
        within = _commit(2000, 78)
        big.sendall(struct.pack(">i", len(within)) + within)
        got, resp = read_response(read_frame(big), 8, VERSION)
        assert got == 78
        assert _codes(resp) == [("nosuch", p, UNKNOWN_TOPIC_OR_PARTITION) for p in range(2000)]

        again = frame(18, 3, correlation_id=8)
        big.sendall(struct.pack(">i", len(again)) + again)
        assert read_response(read_frame(big), 18, 3)[0] == 8


def _fetch(partitions: int, correlation_id: int) -> bytes:
    return frame(1, 11, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "rack_id": "",
        "topics": [{"topic": "nosuch", "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
             "partition_max_bytes": 1024} for p in range(partitions)]}]}, correlation_id=correlation_id)


def test_a_consumer_fetch_of_20k_partitions_is_answered_in_slices(cluster: ClusterFixture) -> None:
    """Likewise a consumer's Fetch of 20,000 partitions (each refused INVALID_REQUEST: more than
    max.request.partitions): the same answer, and another connection served meanwhile."""
    c = cluster.start(1)
    assert c.state is not None
    b = next(iter(c.state.brokers.values()))
    big_frame = _fetch(20_000, 91)
    with socket.create_connection((b.host, b.kafka_port), timeout=10) as other, \
            socket.create_connection((b.host, b.kafka_port), timeout=10) as big:
        other.settimeout(ANSWERED_WITHIN_S)
        big.settimeout(BIG_ANSWERED_WITHIN_S)
        versions_v3 = frame(18, 3, correlation_id=1)
        other.sendall(struct.pack(">i", len(versions_v3)) + versions_v3)
        assert read_response(read_frame(other), 18, 3)[0] == 1
        big.sendall(struct.pack(">i", len(big_frame)) + big_frame)
        slowest = 0.0
        for cid in range(2, 42):
            request = frame(18, 3, correlation_id=cid)
            start = time.monotonic()
            other.sendall(struct.pack(">i", len(request)) + request)
            assert read_response(read_frame(other), 18, 3)[0] == cid
            slowest = max(slowest, time.monotonic() - start)
            if _readable(big):
                break
            time.sleep(0.01)
        assert slowest < STALL_LIMIT_S, f"an ApiVersions waited {slowest:.3f} s"
        got, resp = read_response(read_frame(big), 1, 11)
        assert got == 91 and resp.error_code == 0
        assert [(t.topic, p.partition_index, int(p.error_code), p.high_watermark, p.records)
                for t in resp.responses for p in t.partitions] == \
            [("nosuch", p, INVALID_REQUEST, -1, b"") for p in range(20_000)]
