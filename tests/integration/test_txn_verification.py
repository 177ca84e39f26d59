"""Transactional batches accepted only for partitions the coordinator registered (issue 31; KIP-890
part 1, Kafka 3.6's transaction.partition.verification.enable), with real brokers and ZooKeeper.

The test is a buggy transactional client speaking the protocol itself (gRPC): a transaction
registered by the coordinator (InitProducerId, AddPartitionsToTxn for partition 0 only), then
batches for a partition never added (INVALID_TXN_STATE, and that partition's last stable offset
does not stick - without verification the batch opened a transaction no marker would ever close),
for the added partition (appended; the next batch is not verified again), after the commit
without adding the partition again, without the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
with a fenced epoch (INVALID_PRODUCER_EPOCH), and the next batch of a transaction that was aborted.
The normal flows still work: kafka-python's transactional producer (Kafka wire) read by
librdkafka's read_committed consumer, and our Producer (its Produce names its transactional id)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from helpers import create_topic, isr_of, leader_of, wait_for

from client.connection import ClusterView, Connection
from proto import minikafka_pb2 as pb
from proto.record_batch import Record, encode_batch

pytestmark = pytest.mark.integration
E = pb.ErrorCode
TOPIC = "verified"


def coordinator(view: ClusterView, transactional_id: str) -> Connection:
    def found() -> pb.FindCoordinatorResponse | None:
        r = view.connection(view.bootstrap[0]).api.FindCoordinator(
            pb.FindCoordinatorRequest(key=transactional_id, key_type=1), timeout=10)
        return r if r.error_code == E.NONE else None

    r = wait_for(found, what=f"the coordinator of {transactional_id}")
    return view.connection(view.brokers[r.node_id])


def init(view: ClusterView, transactional_id: str) -> tuple[Connection, int, int]:
    """The transactional id registered: (its coordinator, producer id, epoch)."""
    conn = coordinator(view, transactional_id)
    r = conn.api.InitProducerId(pb.InitProducerIdRequest(transactional_id=transactional_id,
                                                         transaction_timeout_ms=60000), timeout=20)
    assert r.error_code == E.NONE, E.Name(r.error_code)
    return conn, r.producer_id, r.producer_epoch


def add_partitions(conn: Connection, tid: str, pid: int, epoch: int, partitions: list[int]) -> None:
    r = conn.api.AddPartitionsToTxn(pb.AddPartitionsToTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch,
        topics=[pb.AddPartitionsToTxnTopic(name=TOPIC, partitions=partitions)]), timeout=20)
    assert [p.error_code for t in r.topics for p in t.partitions] == [E.NONE] * len(partitions)


def end_txn(conn: Connection, tid: str, pid: int, epoch: int, commit: bool) -> None:
    r = conn.api.EndTxn(pb.EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                         committed=commit), timeout=20)
    assert r.error_code == E.NONE, E.Name(r.error_code)


def produce(view: ClusterView, partition: int, pid: int, epoch: int, seq: int, tid: str,
            values: tuple[str, ...] = ("v",)) -> pb.ProducePartitionResponse:
    """One transactional batch to the partition's leader (gRPC Produce, acks=all)."""
    batch = encode_batch([Record(value=v.encode(), timestamp=int(time.time() * 1000)) for v in values],
                         producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
    conn, _pl = view.leader_connection(TOPIC, partition)
    resp = conn.api.Produce(pb.ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=10000, topics=[
        pb.ProduceTopicData(name=TOPIC, partitions=[pb.ProducePartitionData(partition=partition, records=batch)])]),
        timeout=20)
    result: pb.ProducePartitionResponse = resp.topics[0].partitions[0]
    return result


def produce_decided(view: ClusterView, *args: Any) -> pb.ProducePartitionResponse:
    """``produce`` retried while the answer is NOT_ENOUGH_REPLICAS: the coordinator could not verify
    yet (a transaction still being prepared: CONCURRENT_TRANSACTIONS at the coordinator) - nothing
    was written, as Kafka's producers retry."""
    return wait_for(lambda: (lambda r: None if r.error_code == E.NOT_ENOUGH_REPLICAS else r)(produce(view, *args)),
                    what="a verification that is not retriable")


def offsets(view: ClusterView, partition: int) -> tuple[int, int]:
    """(last stable offset, high watermark) of the partition, as a read_committed fetch says."""
    conn, _pl = view.leader_connection(TOPIC, partition)
    r = conn.api.Fetch(pb.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                                       isolation_level=pb.READ_COMMITTED, topics=[pb.FetchTopic(name=TOPIC, partitions=[
                                           pb.FetchPartition(partition=partition, fetch_offset=0,
                                                             partition_max_bytes=1 << 20)])]), timeout=10)
    p = r.topics[0].partitions[0]
    assert p.error_code == E.NONE, E.Name(p.error_code)
    return p.last_stable_offset, p.high_watermark


@pytest.fixture(scope="module")
def view(module_cluster: Any) -> ClusterView:
    v: ClusterView = module_cluster.view()
    res = create_topic(v, TOPIC, partitions=2, replication_factor=3, configs={"min.insync.replicas": "2"})
    assert res.error_code == E.NONE, res.error_message
    for p in range(2):
        wait_for(lambda p=p: leader_of(v, TOPIC, p)[0] >= 0 and len(isr_of(v, TOPIC, p)) == 3,
                 what=f"{TOPIC}-{p} led with a full ISR")
    return v


def test_only_partitions_in_the_transaction_take_its_batches(view: ClusterView) -> None:
    tid = "verify-raw"
    conn, pid, epoch = init(view, tid)
    add_partitions(conn, tid, pid, epoch, [0])
    # Partition 1 was never added: refused, nothing written, no transaction left open there.
    r = produce(view, 1, pid, epoch, 0, tid)
    assert r.error_code == E.INVALID_TXN_STATE, E.Name(r.error_code)
    assert "not added to the transaction" in r.error_message
    assert offsets(view, 1) == (0, 0)
    # Partition 0 was: its batches open the transaction there (the LSO holds at its first offset);
    # the second batch is in the open transaction, which is the cached verification.
    assert produce(view, 0, pid, epoch, 0, tid, ("a", "b")).error_code == E.NONE
    assert produce(view, 0, pid, epoch, 2, tid).error_code == E.NONE
    assert offsets(view, 0) == (0, 3)
    end_txn(conn, tid, pid, epoch, commit=True)
    wait_for(lambda: offsets(view, 0) == (4, 4), what="the commit marker on partition 0")
    # The transaction is over: the same partition without AddPartitionsToTxn again is refused.
    r = produce_decided(view, 0, pid, epoch, 3, tid)
    assert r.error_code == E.INVALID_TXN_STATE, E.Name(r.error_code)
    assert offsets(view, 0) == (4, 4)
    # A transactional batch needs the transactional id it belongs to (Kafka's KafkaApis).
    assert produce(view, 1, pid, epoch, 0, "").error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # Another epoch than the coordinator's: fenced, as Kafka's producers expect on a produce.
    add_partitions(conn, tid, pid, epoch, [1])
    assert produce(view, 1, pid, epoch + 1, 0, tid).error_code == E.INVALID_PRODUCER_EPOCH
    assert offsets(view, 1) == (0, 0)
    # The right epoch, now that partition 1 is in the transaction: appended.
    assert produce(view, 1, pid, epoch, 0, tid).error_code == E.NONE
    end_txn(conn, tid, pid, epoch, commit=False)
    wait_for(lambda: offsets(view, 1) == (2, 2), what="the abort marker on partition 1")


def test_the_next_batch_of_an_aborted_transaction_is_refused(view: ClusterView) -> None:
    tid = "verify-aborted"
    conn, pid, epoch = init(view, tid)
    add_partitions(conn, tid, pid, epoch, [0])
    lso0, hw0 = offsets(view, 0)
    assert lso0 == hw0
    assert produce(view, 0, pid, epoch, 0, tid).error_code == E.NONE
    end_txn(conn, tid, pid, epoch, commit=False)
    wait_for(lambda: offsets(view, 0) == (hw0 + 2, hw0 + 2), what="the abort marker")
    # A batch the producer still had in flight for the aborted transaction: without verification it
    # would open a transaction the coordinator never heard of, and the LSO would stay there for good.
    r = produce_decided(view, 0, pid, epoch, 1, tid)
    assert r.error_code == E.INVALID_TXN_STATE, E.Name(r.error_code)
    assert offsets(view, 0) == (hw0 + 2, hw0 + 2)


def test_kafka_python_and_our_producer_transactions_still_commit_and_abort(view: ClusterView,
                                                                           module_cluster: Any) -> None:
    kafka = pytest.importorskip("kafka")
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from client.consumer import Consumer
    from client.producer import Producer

    topic = "verified-clients"
    assert create_topic(view, topic, partitions=2, replication_factor=3).error_code == E.NONE
    state = module_cluster.cluster.state
    p = kafka.KafkaProducer(bootstrap_servers=state.kafka_bootstrap_servers, transactional_id="verify-kafka-python")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(4):
            p.send(topic, f"kp-commit-{i}".encode(), partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(2):
            p.send(topic, f"kp-abort-{i}".encode(), partition=i % 2)
        p.flush()
        p.abort_transaction()
    finally:
        p.close()
    with Producer(state.bootstrap_servers, transactional_id="verify-ours", linger_ms=1) as ours:
        ours.init_transactions()
        ours.begin_transaction()
        for i in range(4):
            ours.send(topic, f"ours-commit-{i}".encode(), partition=i % 2)
        ours.commit_transaction()
        ours.begin_transaction()
        ours.send(topic, b"ours-abort", partition=1)
        ours.flush()
        ours.abort_transaction()
    want = sorted([f"kp-commit-{i}" for i in range(4)] + [f"ours-commit-{i}" for i in range(4)])
    c = confluent_kafka.Consumer({"bootstrap.servers": state.kafka_bootstrap_servers, "group.id": "verify-read",
                                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    got: list[str] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < len(want) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value().decode())
    finally:
        c.close()
    assert sorted(got) == want
    ours_reader = Consumer(bootstrap_servers=state.bootstrap_servers, auto_offset_reset="earliest",
                           isolation_level="read_committed", fetch_max_wait_ms=100)
    try:
        ours_reader.assign([(topic, 0), (topic, 1)])
        mine: list[str] = []
        deadline = time.monotonic() + 30
        while len(mine) < len(want) and time.monotonic() < deadline:
            mine += [bytes(r.value or b"").decode() for r in ours_reader.poll(200)]
        assert sorted(mine) == want
    finally:
        ours_reader.close(autocommit=False)
