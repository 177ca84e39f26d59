"""The broker's ProduceStream (the producer's pipe to each broker): requests appended in arrival
order and answered in that order, a request's acks=all wait not holding up the next one's append,
every request checked as a unary Produce (S5.1, S13.2)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import grpc
import pytest
from helpers import E, batch_of, create_topic, isr_of, leader_of, wait_for

from client.producer import Producer
from proto import minikafka_pb2 as pb
from proto.record_batch import decode_batch, iter_headers

pytestmark = pytest.mark.integration


def _request(topic: str, values: list[str], acks: int, timeout_ms: int = 10000) -> pb.ProduceRequest:
    return pb.ProduceRequest(acks=acks, timeout_ms=timeout_ms, topics=[pb.ProduceTopicData(
        name=topic, partitions=[pb.ProducePartitionData(partition=0, records=batch_of(values))])])


def _leader_log(conn, topic: str) -> list[str]:  # type: ignore[no-untyped-def]
    """Every value in the leader's log up to its end offset (replica_id -2: not capped at the HW)."""
    resp = conn.api.Fetch(pb.FetchRequest(replica_id=-2, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[
        pb.FetchTopic(name=topic, partitions=[pb.FetchPartition(partition=0, fetch_offset=0,
                                                                partition_max_bytes=1 << 20)])]), timeout=10)
    data = resp.topics[0].partitions[0].records
    out = []
    for pos, _h in iter_headers(data):
        out += [r.value.decode() for r in decode_batch(data, pos)[1] if r.value is not None]
    return out


def test_produce_stream_appends_in_order_without_waiting_for_earlier_acks(cluster) -> None:  # type: ignore[no-untyped-def]
    # Followers paused but still in the ISR (long lag limit and session): acks=all cannot complete.
    c = cluster.start(3, replica_lag_time_max_ms="60000", zookeeper_session_timeout_ms="30000")
    view = cluster.view()
    assert create_topic(view, "streamed", partitions=1, replication_factor=3,
                        configs={"min.insync.replicas": "2"}).error_code == E.NONE
    leader, _ = wait_for(lambda: (lambda le: le if le[0] >= 0 and len(isr_of(view, "streamed", 0)) == 3 else None)(
        leader_of(view, "streamed", 0)), what="streamed led with a full ISR")
    conn, _ = view.leader_connection("streamed", 0)
    followers = [b for b in (1, 2, 3) if b != leader]
    outbox: queue.Queue[pb.ProduceRequest | None] = queue.Queue()
    answers: list[pb.ProduceResponse] = []

    def requests() -> Iterator[pb.ProduceRequest]:
        return iter(outbox.get, None)

    for f in followers:
        c.signal(f, "STOP")
    try:
        reader = threading.Thread(target=lambda: answers.extend(conn.api.ProduceStream(requests(), timeout=60)))
        reader.start()
        outbox.put(_request("streamed", ["a1", "a2"], acks=-1, timeout_ms=4000))
        outbox.put(_request("streamed", ["b"], acks=1))
        outbox.put(_request("no-such-topic", ["c"], acks=1))
        # The second request is in the log while the first still waits for its followers.
        wait_for(lambda: _leader_log(conn, "streamed") == ["a1", "a2", "b"], timeout_s=3.5,
                 what="the second request appended before the first one's acks=all answer")
        assert answers == [], "an answer overtook the acks=all request before it"
        outbox.put(None)
        reader.join(30)
        assert not reader.is_alive()
    finally:
        for f in followers:
            c.signal(f, "CONT")
    first, second, third = (a.topics[0].partitions[0] for a in answers)
    assert first.error_code == E.REQUEST_TIMED_OUT and first.base_offset == 0
    assert second.error_code == E.NONE and second.base_offset == 2
    assert third.error_code == E.UNKNOWN_TOPIC_OR_PARTITION  # checked as a unary Produce


def test_produce_streams_take_at_most_half_the_listeners_calls_and_producers_fall_back(cluster) -> None:  # type: ignore[no-untyped-def]
    # queued.max.requests=4: at most 2 ProduceStreams, so unary calls always find room (S13: bounded).
    c = cluster.start(1, queued_max_requests="4")
    view = cluster.view()
    assert create_topic(view, "crowded", partitions=1, replication_factor=1).error_code == E.NONE
    wait_for(lambda: leader_of(view, "crowded", 0)[0] >= 0, what="crowded led")
    conn, _ = view.leader_connection("crowded", 0)
    held: list[queue.Queue[pb.ProduceRequest | None]] = []
    threads = []
    for _ in range(2):  # two producers' streams, held open
        q: queue.Queue[pb.ProduceRequest | None] = queue.Queue()
        q.put(_request("crowded", ["held"], acks=1))
        held.append(q)
        answers = conn.api.ProduceStream(iter(q.get, None), timeout=60)
        threads.append(threading.Thread(target=lambda a=answers: list(a)))
        threads[-1].start()
    try:
        wait_for(lambda: len(_leader_log(conn, "crowded")) == 2, what="both held streams answered once")
        with pytest.raises(grpc.RpcError) as refused:
            list(conn.api.ProduceStream(iter([_request("crowded", ["third"], acks=1)]), timeout=10))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "ProduceStreams open" in refused.value.details()
        # A unary Produce finds room, and the project's producer falls back to it.
        assert conn.api.Produce(_request("crowded", ["unary"], acks=1), timeout=10).topics[0].partitions[0] \
            .error_code == E.NONE
        with Producer(c.state.bootstrap_servers, acks=1, enable_idempotence=False, request_timeout_ms=5000,
                      retry_backoff_ms=50) as p:
            assert p.send("crowded", b"fell-back").result(timeout=30).offset == 3
    finally:
        for q in held:
            q.put(None)
        for t in threads:
            t.join(30)
    assert _leader_log(conn, "crowded") == ["held", "held", "unary", "fell-back"]
