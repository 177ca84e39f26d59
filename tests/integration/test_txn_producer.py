"""Our Producer in a transaction (issue 31, KIP-98) with real brokers and ZooKeeper: keyless records
move across partitions as the sticky partitioner does outside transactions; partitions written
together are added with one AddPartitionsToTxn (Kafka's producer: one per batch of new partitions,
sent by the sender before the first produce to them, not one blocking call per partition); after an
abortable error (a record the topic refuses, MESSAGE_TOO_LARGE) commit refuses, abort works, and the
next transaction to the same partition commits - its sequences start again under a bumped epoch
(KIP-360). Read back by our read_committed Consumer."""

from __future__ import annotations

import time
from typing import Any

import pytest
from helpers import wait_for

from client.admin import AdminClient, NewTopic
from client.consumer import Consumer
from client.producer import Producer
from client.transaction_manager import AbortableError

pytestmark = pytest.mark.integration


def create(bootstrap: str, topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
    admin = AdminClient(bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 3, configs=config or {})])
    finally:
        admin.close()
    with Producer(bootstrap) as p:
        wait_for(lambda: len(p.partitions_for(topic)) == partitions or None, timeout_s=30,
                 what=f"{topic}'s partitions")


def read_committed(bootstrap: str, topic: str, partitions: int, count: int) -> list[tuple[int, bytes]]:
    """(partition, value) of every committed record of ``topic`` (``count`` expected, then one more poll)."""
    c = Consumer(bootstrap_servers=bootstrap, isolation_level="read_committed", auto_offset_reset="earliest")
    c.assign([(topic, p) for p in range(partitions)])
    c.seek_to_beginning()
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            got += [(r.partition, r.value) for r in c.poll(500)]
        got += [(r.partition, r.value) for r in c.poll(500)]
    finally:
        c.close(autocommit=False)
    return got


def test_keyless_records_move_across_partitions_and_new_partitions_are_added_together(cluster: Any) -> None:
    cluster.start(3)
    bootstrap = cluster.cluster.state.bootstrap_servers
    create(bootstrap, "txn-sticky", 3)
    create(bootstrap, "txn-six", 6)
    with Producer(bootstrap, transactional_id="txn-sticky-producer", batch_size=1024, linger_ms=20) as p:
        p.init_transactions()
        p.begin_transaction()
        for i in range(60):
            p.send("txn-sticky", f"{i:03d}".encode() * 60)  # ~180 bytes: a batch holds ~5
        p.commit_transaction()
        # Six partitions written within linger_ms: one AddPartitionsToTxn for all six, not six.
        with Producer(bootstrap, transactional_id="txn-six-producer", linger_ms=5_000) as q:
            q.init_transactions()
            q.begin_transaction()
            for part in range(6):
                q.send("txn-six", f"p{part}".encode(), partition=part)
            q.commit_transaction()
            assert q._txn is not None and q._txn.add_requests == 1
    got = read_committed(bootstrap, "txn-sticky", 3, 60)
    assert sorted(v for _p, v in got) == sorted(f"{i:03d}".encode() * 60 for i in range(60))
    # Without the fix every record of the transaction stayed on its first sticky partition.
    assert len({part for part, _v in got}) >= 2
    assert sorted(read_committed(bootstrap, "txn-six", 6, 6)) == [(i, f"p{i}".encode()) for i in range(6)]


def test_after_an_abortable_error_abort_works_and_the_next_transaction_commits(cluster: Any) -> None:
    cluster.start(3)
    bootstrap = cluster.cluster.state.bootstrap_servers
    create(bootstrap, "txn-small", 1, {"max.message.bytes": "2000"})
    with Producer(bootstrap, transactional_id="txn-abortable", linger_ms=1) as p:
        p.init_transactions()
        epoch = p.producer_epoch
        p.begin_transaction()
        first = p.send("txn-small", b"a", partition=0)
        p.flush()
        assert first.result(timeout=10).offset == 0  # sequence 0 taken by the leader
        big = p.send("txn-small", b"x" * 5_000, partition=0)  # sequence 1: refused (MESSAGE_TOO_LARGE)
        with pytest.raises(AbortableError):
            p.commit_transaction()
        with pytest.raises(Exception, match=r"MESSAGE_TOO_LARGE|too large"):
            big.result(timeout=10)
        with pytest.raises(AbortableError):
            p.send("txn-small", b"not now", partition=0)  # Kafka: abort first
        p.abort_transaction()
        # The failed batch had a sequence: the epoch is bumped (KIP-360) and sequences start again.
        assert p.producer_epoch == epoch + 1
        p.begin_transaction()
        p.send("txn-small", b"b", partition=0)
        p.commit_transaction()
    assert [v for _p, v in read_committed(bootstrap, "txn-small", 1, 1)] == [b"b"]
