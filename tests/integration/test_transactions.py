"""Transactions end to end (issue 31, KIP-98) with real brokers and ZooKeeper: the transaction
coordinator (FindCoordinator key_type 1, InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, TxnOffsetCommit, WriteTxnMarkers to the leaders and to the group
coordinator) driven by librdkafka's transactional producer (confluent-kafka) and by our Producer,
checked by read_committed consumers (librdkafka's and ours): commits seen, aborts never; offsets
sent to a transaction committed only with it; a zombie fenced by a second init_transactions; a
coordinator killed (-9) during commit_transaction whose transaction the next coordinator completes."""

from __future__ import annotations

import time
from typing import Any

import pytest
from helpers import wait_for

pytestmark = pytest.mark.integration
confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaException, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from proto import minikafka_pb2 as pb  # noqa: E402

E = pb.ErrorCode


def kafka_bootstrap(fx: Any) -> str:
    c = fx.cluster
    assert c is not None and c.state is not None
    servers: str = c.state.kafka_bootstrap_servers
    return servers


def create(bootstrap: str, topic: str, partitions: int, rf: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=rf)],
                                 operation_timeout=20).values():
        f.result(timeout=60)
    for b in admin.list_topics(timeout=10).brokers.values():
        one = AdminClient({"bootstrap.servers": f"{b.host}:{b.port}"})

        def propagated(one: AdminClient = one) -> bool | None:
            t = one.list_topics(topic, timeout=10).topics.get(topic)
            return (t is not None and t.error is None and len(t.partitions) == partitions
                    and all(p.leader >= 0 for p in t.partitions.values())) or None

        wait_for(propagated, timeout_s=30, what=f"{topic}'s metadata on broker {b.id}")


def txn_producer(bootstrap: str, transactional_id: str, **extra: Any) -> Any:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                                  "transaction.timeout.ms": 60000, **extra})
    p.init_transactions(30)
    return p


def read_values(bootstrap: str, topic: str, isolation: str, count: int, group: str,
                timeout_s: float = 60) -> list[str]:
    """Every value of ``topic`` from the start (``count`` expected, then a short extra poll)."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                  "isolation.level": isolation})
    c.subscribe([topic])
    out: list[str] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error() is not None:
                continue
            out.append(m.value().decode())
        extra = c.poll(2.0)
        if extra is not None and extra.error() is None:
            out.append(extra.value().decode())
    finally:
        c.close()
    return sorted(out)


def test_commit_and_abort_seen_by_read_committed(cluster: Any) -> None:
    """One transaction commits, the next aborts: read_committed sees exactly the committed records,
    read_uncommitted sees both (the markers take an offset each)."""
    cluster.start(3)
    bootstrap = kafka_bootstrap(cluster)
    create(bootstrap, "txn-basic", 3)
    p = txn_producer(bootstrap, "txn-basic-producer")
    p.begin_transaction()
    for i in range(6):
        p.produce("txn-basic", f"committed-{i}".encode(), partition=i % 3)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(6):
        p.produce("txn-basic", f"aborted-{i}".encode(), partition=i % 3)
    p.flush(30)
    p.abort_transaction(30)

    committed = read_values(bootstrap, "txn-basic", "read_committed", 6, "rc")
    assert committed == sorted(f"committed-{i}" for i in range(6))
    everything = read_values(bootstrap, "txn-basic", "read_uncommitted", 12, "ru")
    assert everything == sorted([*(f"committed-{i}" for i in range(6)), *(f"aborted-{i}" for i in range(6))])
    # Both markers of every partition are in the log: 2 data + 2 control batches' offsets each.
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    ends = [c.get_watermark_offsets(TopicPartition("txn-basic", i), timeout=10) for i in range(3)]
    c.close()
    assert [hw for _lo, hw in ends] == [6, 6, 6]


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int,
                      isolation: str = "read_committed") -> list[int]:
    """The group's committed offsets as librdkafka reads them; read_committed asks OffsetFetch v7
    with require_stable (retried while a transaction holds offsets pending)."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "isolation.level": isolation})
    try:
        got = c.committed([TopicPartition(topic, i) for i in range(partitions)], timeout=20)
    finally:
        c.close()
    return [tp.offset for tp in got]


def offset_fetch_stable(view: Any, group: str, topic: str, partitions: int) -> list[tuple[int, int]]:
    """(error code, offset) per partition of an OffsetFetch with require_stable, at the group's coordinator."""
    any_conn = view.connection(view.bootstrap[0])
    found = any_conn.api.FindCoordinator(pb.FindCoordinatorRequest(key=group, key_type=0), timeout=10)
    assert found.error_code == E.NONE, E.Name(found.error_code)
    conn = view.connection(f"{found.host}:{found.port}")
    resp = conn.api.OffsetFetch(pb.OffsetFetchRequest(group_id=group, require_stable=True, topics=[
        pb.OffsetFetchTopic(name=topic, partitions=list(range(partitions)))]), timeout=10)
    assert resp.error_code == E.NONE, E.Name(resp.error_code)
    return [(p.error_code, p.committed_offset) for t in resp.topics for p in t.partitions]


def test_consume_transform_produce_commits_offsets_with_the_transaction(cluster: Any) -> None:
    """send_offsets_to_transaction (AddOffsetsToTxn + TxnOffsetCommit): the group's offsets stay
    as they were until commit_transaction, then are exactly the consumed positions; an aborted
    transaction's offsets never become the group's."""
    cluster.start(3)
    bootstrap = kafka_bootstrap(cluster)
    create(bootstrap, "ctp-in", 2)
    create(bootstrap, "ctp-out", 2)
    seed = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        seed.produce("ctp-in", f"in-{i}".encode(), partition=i % 2)
    seed.flush(30)

    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "ctp-group",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                         "isolation.level": "read_committed"})
    consumer.subscribe(["ctp-in"])
    producer = txn_producer(bootstrap, "ctp-producer")
    try:
        seen: list[Any] = []
        deadline = time.monotonic() + 60
        while len(seen) < 10 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                seen.append(m)
        assert len(seen) == 10
        # An aborted transaction: its offsets are dropped.
        producer.begin_transaction()
        producer.produce("ctp-out", b"never", partition=0)
        producer.send_offsets_to_transaction([TopicPartition("ctp-in", 0, 3)],
                                             consumer.consumer_group_metadata(), 30)
        producer.abort_transaction(30)
        assert committed_offsets(bootstrap, "ctp-group", "ctp-in", 2) == [-1001, -1001]

        producer.begin_transaction()
        for m in seen:
            producer.produce("ctp-out", m.value().upper(), partition=m.partition())
        positions = consumer.position([TopicPartition("ctp-in", i) for i in range(2)])
        assert [tp.offset for tp in positions] == [5, 5]
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        # Pending: not the group's committed offsets yet; a stable read is told so (KIP-447).
        assert committed_offsets(bootstrap, "ctp-group", "ctp-in", 2, "read_uncommitted") == [-1001, -1001]
        assert offset_fetch_stable(cluster.view(), "ctp-group", "ctp-in", 2) == \
            [(E.UNSTABLE_OFFSET_COMMIT, -1)] * 2
        producer.commit_transaction(30)
        assert committed_offsets(bootstrap, "ctp-group", "ctp-in", 2) == [5, 5]  # retried while unstable
        assert offset_fetch_stable(cluster.view(), "ctp-group", "ctp-in", 2) == [(E.NONE, 5)] * 2
    finally:
        consumer.close()
    out = read_values(bootstrap, "ctp-out", "read_committed", 10, "ctp-reader")
    assert out == sorted(f"IN-{i}" for i in range(10))


def test_zombie_producer_is_fenced(cluster: Any) -> None:
    """A second init_transactions with the same transactional.id bumps the epoch: the first
    producer's next transactional request is refused (fatal PRODUCER_FENCED) and its open
    transaction is aborted; the new producer's commit is what read_committed sees."""
    cluster.start(3)
    bootstrap = kafka_bootstrap(cluster)
    create(bootstrap, "zombie", 1)
    zombie = txn_producer(bootstrap, "zombie-id")
    zombie.begin_transaction()
    zombie.produce("zombie", b"from-zombie", partition=0)
    zombie.flush(30)
    fresh = txn_producer(bootstrap, "zombie-id")  # fences the zombie, aborting its transaction
    fresh.begin_transaction()
    fresh.produce("zombie", b"from-fresh", partition=0)
    fresh.commit_transaction(30)
    with pytest.raises(KafkaException) as refused:
        zombie.produce("zombie", b"zombie-again", partition=0)
        zombie.commit_transaction(30)
    err = refused.value.args[0]
    assert err.fatal() or err.txn_requires_abort(), err
    assert err.code() in (confluent_kafka.KafkaError._FENCED, confluent_kafka.KafkaError.PRODUCER_FENCED,
                          confluent_kafka.KafkaError.INVALID_PRODUCER_EPOCH), err
    assert read_values(bootstrap, "zombie", "read_committed", 1, "zombie-reader") == ["from-fresh"]


def txn_coordinator_of(view: Any, transactional_id: str) -> int:
    conn = view.connection(view.bootstrap[0])
    found = conn.api.FindCoordinator(pb.FindCoordinatorRequest(key=transactional_id, key_type=1), timeout=10)
    assert found.error_code == E.NONE, E.Name(found.error_code)
    return int(found.node_id)


def test_coordinator_killed_during_commit_the_next_one_completes_it(cluster: Any, zk_client: Any) -> None:
    """The transaction coordinator is killed (-9) after commit_transaction durably prepared the
    commit (PrepareCommit in /transactions/[id]) and before its markers were all written (one
    leader is stopped meanwhile): the broker that coordinates the id next loads PrepareCommit,
    writes the markers again and completes the commit; read_committed sees every record, and the
    producer's next transaction goes to the new coordinator."""
    import json
    import threading

    from helpers import leader_of

    c = cluster.start(3, **{"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"})
    bootstrap = kafka_bootstrap(cluster)
    view = cluster.view()
    create(bootstrap, "txn-failover", 3)
    tid = "failover-producer"
    p = txn_producer(bootstrap, tid)
    coordinator = txn_coordinator_of(view, tid)
    leaders = {leader_of(view, "txn-failover", i)[0] for i in range(3)}
    stalled = next((b for b in sorted(leaders) if b != coordinator), None)
    assert stalled is not None, f"every partition led by the coordinator {coordinator}"
    p.begin_transaction()
    for i in range(9):
        p.produce("txn-failover", f"v-{i}".encode(), partition=i % 3)
    p.flush(30)

    def state() -> str | None:
        data, _ = zk_client.get(f"/transactions/{tid}")
        return str(json.loads(data)["state"])

    outcome: list[BaseException | None] = []

    def commit() -> None:
        try:
            p.commit_transaction(120)
            outcome.append(None)
        except BaseException as e:  # reported by the assertion below
            outcome.append(e)

    c.signal(stalled, "STOP")  # its marker waits: the transaction stays PrepareCommit
    try:
        committer = threading.Thread(target=commit)
        committer.start()
        wait_for(lambda: state() == "PrepareCommit" or None, timeout_s=30, what="PrepareCommit stored")
        c.signal(coordinator, "KILL")
    finally:
        c.signal(stalled, "CONT")
    committer.join(150)
    assert outcome == [None], outcome
    # EndTxn is answered once PrepareCommit is durable (as Kafka); the markers and CompleteCommit
    # are the next coordinator's work.
    wait_for(lambda: state() == "CompleteCommit" or None, timeout_s=60, what="CompleteCommit stored")
    assert wait_for(lambda: (lambda b: b if b != coordinator else None)(txn_coordinator_of(view, tid)),
                    timeout_s=30) != coordinator
    assert read_values(bootstrap, "txn-failover", "read_committed", 9, "failover-reader") == \
        sorted(f"v-{i}" for i in range(9))
    # The producer goes on at the new coordinator.
    p.begin_transaction()
    p.produce("txn-failover", b"after", partition=0)
    p.commit_transaction(60)
    assert read_values(bootstrap, "txn-failover", "read_committed", 10, "failover-reader-2") == \
        sorted([*(f"v-{i}" for i in range(9)), "after"])


def test_our_producer_transactions_read_by_our_consumer_and_librdkafka(cluster: Any) -> None:
    """Our Producer's transactions (kafka-python's method names): a commit, an abort, a commit
    with send_offsets_to_transaction; our read_committed Consumer and librdkafka's see the committed
    records only, and the group's offsets move with the committed transaction alone."""
    from client.consumer import Consumer
    from client.producer import Producer

    cluster.start(3)
    bootstrap = kafka_bootstrap(cluster)
    grpc_bootstrap = cluster.cluster.state.bootstrap_servers
    create(bootstrap, "ours-txn", 2)
    with Producer(grpc_bootstrap, transactional_id="ours-producer", linger_ms=1) as p:
        with pytest.raises(Exception, match="UNINITIALIZED"):
            p.begin_transaction()
        p.init_transactions()
        p.begin_transaction()
        for i in range(4):
            p.send("ours-txn", f"c1-{i}".encode(), partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(4):
            p.send("ours-txn", f"a-{i}".encode(), key=f"k{i}".encode())
        # In the log before the abort (abort_transaction fails records not yet sent, as Kafka's
        # producer does), so that read_uncommitted below sees them and read_committed must not.
        p.flush()
        p.abort_transaction()
        p.begin_transaction()
        p.send("ours-txn", b"c2", partition=1)
        p.send_offsets_to_transaction({("ours-txn", 0): 2, ("ours-txn", 1): 3}, "ours-group")
        assert offset_fetch_stable(cluster.view(), "ours-group", "ours-txn", 2) == \
            [(E.UNSTABLE_OFFSET_COMMIT, -1)] * 2
        p.commit_transaction()
        # EndTxn answers once the commit is decided; the group's marker follows (as in Kafka, where a
        # stable read meanwhile is told UNSTABLE_OFFSET_COMMIT and retries).
        view = cluster.view()
        stable = [(E.NONE, 2), (E.NONE, 3)]
        wait_for(lambda: offset_fetch_stable(view, "ours-group", "ours-txn", 2) == stable or None,
                 timeout_s=30, what="the committed transaction's offsets")
        # An aborted transaction's offsets are dropped.
        p.begin_transaction()
        p.send_offsets_to_transaction({("ours-txn", 0): 4}, "ours-group")
        p.abort_transaction()
        wait_for(lambda: offset_fetch_stable(view, "ours-group", "ours-txn", 2) == stable or None,
                 timeout_s=30, what="the aborted transaction's offsets dropped")

    expected = sorted([*(f"c1-{i}" for i in range(4)), "c2"])
    consumer = Consumer(bootstrap_servers=grpc_bootstrap, isolation_level="read_committed",
                        auto_offset_reset="earliest")
    consumer.assign([("ours-txn", 0), ("ours-txn", 1)])
    consumer.seek_to_beginning()
    got: list[str] = []
    deadline = time.monotonic() + 30
    while len(got) < len(expected) and time.monotonic() < deadline:
        got += [r.value.decode() for r in consumer.poll(500)]
    got += [r.value.decode() for r in consumer.poll(500)]
    consumer.close(autocommit=False)
    assert sorted(got) == expected
    assert read_values(bootstrap, "ours-txn", "read_committed", len(expected), "ours-rd") == expected
    assert len(read_values(bootstrap, "ours-txn", "read_uncommitted", 9, "ours-ru")) == 9
