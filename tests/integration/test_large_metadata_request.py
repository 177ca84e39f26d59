"""A Metadata request naming 300,000 topics does not hold up another client (SPEC S15.2).

Such a request (879 KB, within every limit: each name is refused INVALID_REQUEST, beyond
max.request.partitions) was decoded, handled and encoded in one go: the broker's event loop was
held for ~4 s (12 s for a million names), and another connection's ApiVersions was answered only
after the big answer had been written. Now the big one goes in slices and the other connection is
answered while it is still being worked on; the big answer is the same."""

from __future__ import annotations

import select
import socket
import struct
import time

import pytest
from helpers import ClusterFixture
from kafka_frames import frame, read_frame, read_response

pytestmark = pytest.mark.integration

NAMES = 300_000
ANSWERED_WITHIN_S = 5.0  # ApiVersions: generous (answered in milliseconds now, ~4 s before)
BIG_ANSWERED_WITHIN_S = 60.0


def _readable(s: socket.socket) -> bool:
    return bool(select.select([s], [], [], 0)[0])


def test_a_metadata_request_of_300k_names_does_not_hold_up_another_client(cluster: ClusterFixture) -> None:
    c = cluster.start(1)
    assert c.state is not None
    b = next(iter(c.state.brokers.values()))
    big_frame = struct.pack(">hhih", 3, 1, 77, 3) + b"big" + struct.pack(">i", NAMES) + b"\x00\x01a" * NAMES
    with socket.create_connection((b.host, b.kafka_port), timeout=10) as other, \
            socket.create_connection((b.host, b.kafka_port), timeout=10) as big:
        other.settimeout(ANSWERED_WITHIN_S)
        big.settimeout(BIG_ANSWERED_WITHIN_S)
        # The connection is served before the big request comes (a first ApiVersions answered).
        versions_v3 = frame(18, 3, correlation_id=1)
        other.sendall(struct.pack(">i", len(versions_v3)) + versions_v3)
        assert read_response(read_frame(other), 18, 3)[0] == 1

        big.sendall(struct.pack(">i", len(big_frame)) + big_frame)
        time.sleep(0.3)  # the broker has read the whole frame and is working on it
        answered_while_big_pending = 0
        for cid in range(2, 7):
            request = frame(18, 3, correlation_id=cid)
            start = time.monotonic()
            other.sendall(struct.pack(">i", len(request)) + request)
            got, versions = read_response(read_frame(other), 18, 3)
            assert (got, versions.error_code) == (cid, 0) and versions.api_keys
            assert time.monotonic() - start < ANSWERED_WITHIN_S
            if not _readable(big):  # no byte of the big answer yet: answered while it was worked on
                answered_while_big_pending += 1
        assert answered_while_big_pending > 0, "ApiVersions was answered only after the big Metadata"

        got, md = read_response(read_frame(big), 3, 1)
        assert got == 77
        assert len(md.topics) == NAMES
        assert {(t.name, int(t.error_code), t.is_internal, t.partitions) for t in md.topics} == \
            {("a", 42, False, ())}  # INVALID_REQUEST: more names than max.request.partitions
        assert [x.node_id for x in md.brokers] == [b.broker_id]

        # And the broker goes on answering both connections as before.
        again = frame(18, 3, correlation_id=8)
        big.sendall(struct.pack(">i", len(again)) + again)
        assert read_response(read_frame(big), 18, 3)[0] == 8
