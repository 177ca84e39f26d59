"""Transactions' data plane with real brokers (issue 31, KIP-98): the test plays the transaction
coordinator - producer ids from InitProducerId (no transactional id), transactional batches, then
WriteTxnMarkers COMMIT for one producer and ABORT for another - and checks read_committed: the
last stable offset, the aborted transactions of Fetch, ListOffsets, our Consumer, librdkafka's and
kafka-python's consumers; markers fenced by producer and coordinator epochs; and the same LSO and
aborted set after the leader is killed (-9) mid-transaction, on the new leader and after a restart."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import ClusterFixture, create_topic, fresh_chroot, isr_of, leader_of, wait_for

from client.connection import ClusterView, Connection
from client.consumer import Consumer
from client.txn_filter import drop_aborted
from proto import minikafka_pb2 as pb
from proto.record_batch import Record, decode_batch, decode_batches, encode_batch, iter_headers

E = pb.ErrorCode
# The test plays the transaction coordinator, which the leaders' verification of transactional
# batches (KIP-890, transaction.partition.verification.enable; tests/integration/test_txn_verification.py)
# would ask: these clusters run without it, and the batches name a transactional id nobody registered.
NO_VERIFICATION = {"transaction_partition_verification_enable": "false"}
TXN_ID = "played-by-the-test"


@pytest.fixture(scope="module")
def module_cluster(zookeeper: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterFixture]:
    fx = ClusterFixture(tmp_path_factory.mktemp("txn-markers") / "cluster", fresh_chroot(zookeeper))
    fx.start(**NO_VERIFICATION)
    yield fx
    fx.stop()


def produce(conn: Connection, topic: str, partition: int, records: bytes) -> pb.ProducePartitionResponse:
    resp = conn.api.Produce(pb.ProduceRequest(transactional_id=TXN_ID, acks=-1, timeout_ms=10000, topics=[
        pb.ProduceTopicData(name=topic, partitions=[pb.ProducePartitionData(partition=partition, records=records)])]),
        timeout=15)
    result: pb.ProducePartitionResponse = resp.topics[0].partitions[0]
    return result


def init_producer_id(view: ClusterView) -> tuple[int, int]:
    conn = view.connection(view.bootstrap[0])
    r = conn.api.InitProducerId(pb.InitProducerIdRequest(), timeout=10)
    assert r.error_code == E.NONE, E.Name(r.error_code)
    return r.producer_id, r.producer_epoch


def txn_batch(values: list[str], pid: int, epoch: int, seq: int, transactional: bool = True) -> bytes:
    now = int(time.time() * 1000)
    return encode_batch([Record(value=v.encode(), timestamp=now) for v in values], producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq, is_transactional=transactional)


def write_markers(view: ClusterView, topic: str, partitions: list[int],
                  markers: list[tuple[int, int, bool, int]]) -> dict[tuple[int, int], int]:
    """WriteTxnMarkers to each partition's leader, as the coordinator: ``markers`` of (producer id,
    producer epoch, commit, coordinator epoch). {(producer id, partition): error code}."""
    by_leader: dict[int, list[int]] = {}
    for p in partitions:
        by_leader.setdefault(leader_of(view, topic, p)[0], []).append(p)
    out: dict[tuple[int, int], int] = {}
    for leader, parts in by_leader.items():
        conn = view.connection(view.brokers[leader])
        req = pb.WriteTxnMarkersRequest(markers=[pb.WritableTxnMarker(
            producer_id=pid, producer_epoch=epoch, transaction_result=commit, coordinator_epoch=cepoch,
            topics=[pb.WritableTxnMarkerTopic(name=topic, partition_indexes=parts)])
            for pid, epoch, commit, cepoch in markers])
        resp = conn.api.WriteTxnMarkers(req, timeout=20)
        for m in resp.markers:
            for t in m.topics:
                for pr in t.partitions:
                    out[(m.producer_id, pr.partition_index)] = pr.error_code
    return out


def fetch_committed(conn: Connection, topic: str, partition: int, offset: int,
                    isolation: int = pb.READ_COMMITTED) -> pb.FetchPartitionResponse:
    resp = conn.api.Fetch(pb.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                                          isolation_level=isolation, topics=[pb.FetchTopic(name=topic, partitions=[
                                              pb.FetchPartition(partition=partition, fetch_offset=offset,
                                                                partition_max_bytes=1 << 20)])]), timeout=10)
    result: pb.FetchPartitionResponse = resp.topics[0].partitions[0]
    assert result.error_code == E.NONE, E.Name(result.error_code)
    return result


def list_latest(conn: Connection, topic: str, partition: int, isolation: int) -> int:
    r = conn.api.ListOffsets(pb.ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=[
        pb.ListOffsetsTopic(name=topic, partitions=[pb.ListOffsetsPartition(partition=partition, timestamp=-1)])]),
        timeout=10)
    pr = r.topics[0].partitions[0]
    assert pr.error_code == E.NONE, E.Name(pr.error_code)
    return int(pr.offset)


def txn_view(view: ClusterView, topic: str, partition: int) -> tuple[int, list[tuple[int, int]], list[str]]:
    """What a read_committed reader sees of a partition: (LSO, aborted transactions, values it keeps)."""
    conn, _pl = view.leader_connection(topic, partition)
    r = fetch_committed(conn, topic, partition, 0)
    aborted = sorted((a.producer_id, a.first_offset) for a in r.aborted_transactions)
    kept, _next = drop_aborted(r.records, aborted)
    return r.last_stable_offset, aborted, [rec.value.decode() for pos, h in iter_headers(kept) if not h.is_control
                                           for rec in decode_batch(kept, pos)[1] if rec.value]


def consume(bootstrap: str, topic: str, partitions: int, isolation: str, count: int,
            timeout_s: float = 30) -> list[str]:
    c = Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", isolation_level=isolation,
                 fetch_max_wait_ms=100)
    try:
        c.assign([(topic, p) for p in range(partitions)])
        out: list[str] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < count and time.monotonic() < deadline:
            out += [r.value.decode() for r in c.poll(200)]
        out += [r.value.decode() for r in c.poll(500)]  # and nothing more
        return out
    finally:
        c.close(autocommit=False)


def ready(view: ClusterView, topic: str, partitions: int, rf: int) -> None:
    res = create_topic(view, topic, partitions=partitions, replication_factor=rf,
                       configs={"min.insync.replicas": str(min(rf, 2))})
    assert res.error_code == E.NONE, res.error_message
    for p in range(partitions):
        wait_for(lambda p=p: leader_of(view, topic, p)[0] >= 0 and len(isr_of(view, topic, p)) == rf,
                 what=f"{topic}-{p} led with a full ISR")


def test_commit_and_abort_markers_and_read_committed_readers(module_cluster: Any) -> None:
    view = module_cluster.view()
    topic = "txn-markers"
    ready(view, topic, 2, 3)
    (a, ea), (b, eb) = init_producer_id(view), init_producer_id(view)
    for p in range(2):
        conn, _pl = view.leader_connection(topic, p)
        for records in (txn_batch([f"A{p}-0", f"A{p}-1"], a, ea, 0), txn_batch([f"plain{p}"], -1, -1, -1, False),
                        txn_batch([f"B{p}-0", f"B{p}-1"], b, eb, 0)):
            assert produce(conn, topic, p, records).error_code == E.NONE
        # Open transactions hold read_committed readers at the first one's first offset.
        r = fetch_committed(conn, topic, p, 0)
        assert (r.last_stable_offset, r.high_watermark, r.records) == (0, 5, b"")
        assert list_latest(conn, topic, p, pb.READ_COMMITTED) == 0
        assert list_latest(conn, topic, p, pb.READ_UNCOMMITTED) == 5
        assert len(decode_batches(fetch_committed(conn, topic, p, 0, pb.READ_UNCOMMITTED).records)) == 5

    result = write_markers(view, topic, [0, 1], [(a, ea, True, 1), (b, eb, False, 1)])
    assert result == {(pid, p): E.NONE for pid in (a, b) for p in (0, 1)}
    for p in range(2):
        conn, _pl = view.leader_connection(topic, p)
        r = fetch_committed(conn, topic, p, 0)
        assert r.last_stable_offset == r.high_watermark == 7  # 5 records and 2 markers, all replicated
        assert [(t.producer_id, t.first_offset) for t in r.aborted_transactions] == [(b, 3)]
        assert list_latest(conn, topic, p, pb.READ_COMMITTED) == 7
        assert txn_view(view, topic, p)[2] == [f"A{p}-0", f"A{p}-1", f"plain{p}"]

    bootstrap = module_cluster.cluster.state.bootstrap_servers
    committed = consume(bootstrap, topic, 2, "read_committed", 6)
    assert sorted(committed) == sorted(f"{x}{p}{s}" for p in (0, 1) for x, s in
                                       (("A", "-0"), ("A", "-1"), ("plain", "")))
    assert len(consume(bootstrap, topic, 2, "read_uncommitted", 10)) == 10

    # Fencing, as Kafka 2.8's ProducerStateManager: an older coordinator epoch, an older producer epoch.
    assert write_markers(view, topic, [0], [(a, ea, True, 0)]) == {(a, 0): E.TRANSACTION_COORDINATOR_FENCED}
    assert write_markers(view, topic, [0], [(b, eb + 1, False, 1)]) == {(b, 0): E.NONE}  # a bump fences eb
    assert write_markers(view, topic, [0], [(b, eb, False, 1)]) == {(b, 0): E.INVALID_PRODUCER_EPOCH}
    conn, _pl = view.leader_connection(topic, 0)
    assert produce(conn, topic, 0, txn_batch(["zombie"], b, eb, 2)).error_code == E.INVALID_PRODUCER_EPOCH
    # Only the leader writes markers; a client may not write a control batch itself.
    leader = leader_of(view, topic, 0)[0]
    other = next(bid for bid in view.brokers if bid != leader)
    resp = view.connection(view.brokers[other]).api.WriteTxnMarkers(pb.WriteTxnMarkersRequest(markers=[
        pb.WritableTxnMarker(producer_id=a, producer_epoch=ea, transaction_result=True, coordinator_epoch=1,
                             topics=[pb.WritableTxnMarkerTopic(name=topic, partition_indexes=[0]),
                                     pb.WritableTxnMarkerTopic(name="no-such-topic", partition_indexes=[0])])]),
        timeout=10)
    assert [p.error_code for t in resp.markers[0].topics for p in t.partitions] == \
        [E.NOT_LEADER_OR_FOLLOWER, E.UNKNOWN_TOPIC_OR_PARTITION]

    # A transaction left open blocks read_committed readers at its first offset, records after it too.
    (c, ec) = init_producer_id(view)
    start = r.high_watermark
    conn, _pl = view.leader_connection(topic, 1)
    assert produce(conn, topic, 1, txn_batch(["C1-0"], c, ec, 0)).error_code == E.NONE
    assert produce(conn, topic, 1, txn_batch(["after-C"], -1, -1, -1, False)).error_code == E.NONE
    lso, _aborted, values = txn_view(view, topic, 1)
    assert lso == start and "after-C" not in values
    assert write_markers(view, topic, [1], [(c, ec, True, 1)]) == {(c, 1): E.NONE}
    assert txn_view(view, topic, 1)[2][-2:] == ["C1-0", "after-C"]

    # Kafka's clients over the Kafka protocol (Fetch v4+: last_stable_offset, aborted_transactions).
    expected = sorted([*committed, "C1-0", "after-C"])
    kafka_bootstrap = module_cluster.cluster.state.kafka_bootstrap_servers
    confluent_kafka = pytest.importorskip("confluent_kafka")
    cc = confluent_kafka.Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "txn-rc",
                                   "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                   "enable.auto.commit": False})
    try:
        cc.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(2)])
        got: list[str] = []
        deadline = time.monotonic() + 30
        while len(got) < len(expected) and time.monotonic() < deadline:
            m = cc.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value().decode())
        assert sorted(got) == expected
        assert cc.poll(1.0) is None
    finally:
        cc.close()
    kafka = pytest.importorskip("kafka")
    kc = kafka.KafkaConsumer(bootstrap_servers=kafka_bootstrap, isolation_level="read_committed",
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        kc.assign([kafka.TopicPartition(topic, p) for p in range(2)])
        kc.seek_to_beginning()
        assert sorted(m.value.decode() for m in kc) == expected
    finally:
        kc.close()


def test_lso_and_aborted_set_survive_a_leader_kill_mid_transaction(cluster: Any) -> None:
    c = cluster.start(3, **NO_VERIFICATION)
    view = cluster.view()
    replicated, solo = "txn-kill", "txn-solo"
    ready(view, replicated, 1, 3)
    ready(view, solo, 1, 1)
    (a, ea), (b, eb), (o, eo) = (init_producer_id(view) for _ in range(3))
    for topic in (replicated, solo):
        conn, _pl = view.leader_connection(topic, 0)
        for records in (txn_batch(["A-0", "A-1"], a, ea, 0), txn_batch(["B-0"], b, eb, 0)):
            assert produce(conn, topic, 0, records).error_code == E.NONE
        assert write_markers(view, topic, [0], [(a, ea, True, 3), (b, eb, False, 3)]) == \
            {(a, 0): E.NONE, (b, 0): E.NONE}
        # Mid-transaction: producer o's transaction is open, a plain record waits behind it.
        assert produce(conn, topic, 0, txn_batch(["O-0"], o, eo, 0)).error_code == E.NONE
        assert produce(conn, topic, 0, txn_batch(["plain"], -1, -1, -1, False)).error_code == E.NONE
    before = {t: txn_view(view, t, 0) for t in (replicated, solo)}
    assert before[solo] == (5, [(b, 2)], ["A-0", "A-1"])
    assert before[replicated] == before[solo]

    # kill -9 the replicated partition's leader: the new leader derived the same from what it copied.
    old, epoch = leader_of(view, replicated, 0)
    host = leader_of(view, solo, 0)[0]
    c.signal(old, "KILL")
    c.wait_for_exit(old)
    wait_for(lambda: leader_of(view, replicated, 0)[0] not in (-1, old), timeout_s=30, what="a new leader")
    wait_for(lambda: txn_view(view, replicated, 0) == before[replicated], timeout_s=20,
             what="the new leader's LSO and aborted transactions")
    c.start(old)
    # kill -9 the broker of the unreplicated one (unless it was that leader) and restart it: recovered
    # from its own log, without a clean shutdown.
    if host != old:
        c.signal(host, "KILL")
        c.wait_for_exit(host)
        c.start(host)
    wait_for(lambda: leader_of(view, solo, 0)[0] == host, timeout_s=60, what=f"{solo} led again")
    assert wait_for(lambda: txn_view(view, solo, 0), timeout_s=30) == before[solo]

    # The open transaction commits on the leaders of now: its records and the one behind it show.
    for topic in (replicated, solo):
        assert write_markers(view, topic, [0], [(o, eo, True, 3)]) == {(o, 0): E.NONE}
        lso, aborted, values = txn_view(view, topic, 0)
        assert (lso, aborted, values) == (8, [(b, 2)], ["A-0", "A-1", "O-0", "plain"])
    assert leader_of(view, replicated, 0)[1] > epoch
