"""Thousands of partitions (issue 29, SPEC S15.3): what must simply work at scale, checked for real.
Figures (times, CPU per record) belong to bench/partition_scale_bench.py, not here."""

from __future__ import annotations

import pytest
from helpers import ClusterFixture, E, create_topic, wait_for

from proto import minikafka_pb2 as pb

pytestmark = pytest.mark.integration


def test_one_create_of_3000_partitions_is_carried_out(cluster: ClusterFixture) -> None:
    """The controller writes the new partitions' state in guarded multis: in one multi (over 1 MB
    for ~2,800 RF 3 partitions) ZooKeeper dropped the connection, and the controller resigned and
    failed the same way on every re-election, forever (found by the partition-scale bench)."""
    cluster.start(3, zookeeper_session_timeout_ms="6000")
    view = cluster.view()
    # Kafka's answer when the leaders take longer than the request's timeout: created, still electing.
    assert create_topic(view, "wide", partitions=3000, replication_factor=3).error_code in (E.NONE,
                                                                                          E.REQUEST_TIMED_OUT)
    conn = view.connection(view.bootstrap[0])

    def all_led() -> bool:
        resp = conn.api.Metadata(pb.MetadataRequest(topics=["wide"]), timeout=30)
        parts = resp.topics[0].partitions
        return len(parts) == 3000 and all(p.leader >= 0 for p in parts)
    wait_for(all_led, timeout_s=180, interval_s=1.0, what="every one of 3,000 partitions led")
