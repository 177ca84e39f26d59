"""The consumer's buffering of decoded fetches, without a cluster: poll() and poll_batch() hand out
the same records with the same position rules, a corrupt batch is reported after the rows before it,
and seek() drops what is buffered. Fetch responses are fed in as the network would hand them over."""

from __future__ import annotations

from typing import Any

import pytest

from client.consumer import ColumnBatch, Consumer, ConsumerRecord, CorruptRecordError
from client.structs import TopicPartition
from proto import minikafka_pb2 as pb
from proto.record_batch import Header, Record, encode_batch

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
NOW = 1_700_000_000_000


@pytest.fixture
def consumer(monkeypatch: pytest.MonkeyPatch) -> Any:
    c = Consumer(bootstrap_servers="127.0.0.1:1", auto_offset_reset="earliest")
    monkeypatch.setattr(c, "_send_fetches", lambda: None)  # no network: responses are fed by the test
    c.assign([TP0, TP1])
    c._positions = {TP0: 0, TP1: 0}
    yield c
    c.close()


def feed(c: Consumer, tp: TopicPartition, records: bytes) -> None:
    resp = pb.FetchResponse()
    resp.topics.add(name=tp.topic).partitions.add(partition=tp.partition, high_watermark=100, records=records)
    c._handle_fetch_response(resp, {tp: c._fetch_position(tp)})  # as _send_fetches sends it


def batch(base: int, n: int, prefix: str = "v") -> bytes:
    return encode_batch([Record(f"{prefix}{base + i}".encode(), key=None if i % 2 else b"k",
                                headers=(Header("h", b"x"),) if i == 0 else (), timestamp=NOW + i)
                         for i in range(n)], base_offset=base)


def test_poll_returns_consumer_records_in_offset_order_and_moves_positions(consumer: Consumer) -> None:
    feed(consumer, TP0, batch(0, 3) + batch(3, 2))
    feed(consumer, TP1, batch(0, 2, "w"))
    got = consumer.poll(max_records=4)
    assert got[0] == ConsumerRecord("t", 0, 0, NOW, b"k", b"v0", (Header("h", b"x"),))
    assert [(r.partition, r.offset) for r in got] == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert consumer.position(TP0) == 4 and consumer.position(TP1) == 0
    got = consumer.poll(max_records=10)
    assert [(r.partition, r.offset, r.value) for r in got] == [(0, 4, b"v4"), (1, 0, b"w0"), (1, 1, b"w1")]
    assert consumer.position(TP0) == 5 and consumer.position(TP1) == 2
    assert consumer.poll() == [] and not consumer._buffer


def test_a_fetch_from_the_middle_of_a_batch_skips_the_records_before_the_position(consumer: Consumer) -> None:
    consumer._positions[TP0] = 2
    feed(consumer, TP0, batch(0, 4))
    assert [r.offset for r in consumer.poll()] == [2, 3]


def test_poll_batch_is_arrow_with_the_same_records_and_positions(consumer: Consumer) -> None:
    pytest.importorskip("pyarrow")
    feed(consumer, TP0, batch(0, 3))
    feed(consumer, TP1, batch(0, 3, "w"))
    out = consumer.poll_batch(max_records=4)
    assert list(out) == [TP0, TP1]
    assert out[TP0].column("value").to_pylist() == [b"v0", b"v1", b"v2"]
    assert out[TP1].column("offset").to_pylist() == [0] and out[TP1].column("topic").to_pylist() == ["t"]
    assert out[TP0].column("key").to_pylist() == [b"k", None, b"k"]
    assert out[TP0].schema.names == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert consumer.position(TP0) == 3 and consumer.position(TP1) == 1
    # Mixed with poll(): the rest of partition 1 comes out as records.
    assert [(r.offset, r.value) for r in consumer.poll()] == [(1, b"w1"), (2, b"w2")]
    feed(consumer, TP0, batch(3, 2))
    with_headers = consumer.poll_batch(include_headers=True)[TP0]
    assert with_headers.column("headers").to_pylist() == [[{"key": "h", "value": b"x"}], []]


def test_poll_batch_without_arrow_gives_lists(consumer: Consumer) -> None:
    feed(consumer, TP0, batch(0, 2))
    out = consumer.poll_batch(arrow=False, include_headers=True)
    assert out == {TP0: ColumnBatch("t", 0, [b"k", None], [b"v0", b"v1"], [0, 1], [NOW, NOW + 1], [0, 0],
                                    [(Header("h", b"x"),), ()])}
    assert out[TP0].num_rows == 2 and consumer.position(TP0) == 2
    assert consumer.poll_batch(arrow=False) == {}


def test_a_corrupt_batch_comes_after_the_records_before_it_with_the_offset_past_it(consumer: Consumer) -> None:
    bad = bytearray(batch(2, 2))
    bad[70] ^= 0xFF
    feed(consumer, TP0, batch(0, 2) + bytes(bad) + batch(4, 1))
    assert [r.offset for r in consumer.poll()] == [0, 1]
    assert consumer._fetch_position(TP0) == 2  # nothing buffered past the bad batch: fetched again from it
    feed(consumer, TP0, bytes(bad) + batch(4, 1))
    with pytest.raises(CorruptRecordError) as exc:
        consumer.poll()
    assert (exc.value.offset, exc.value.next_offset) == (2, 4) and "CRC-32C" in str(exc.value)
    assert consumer.position(TP0) == 2
    consumer.seek(TP0, exc.value.next_offset)
    feed(consumer, TP0, batch(4, 1))
    assert [r.value for r in consumer.poll()] == [b"v4"]


def test_seek_drops_buffered_rows_and_stale_responses_are_ignored(consumer: Consumer) -> None:
    feed(consumer, TP0, batch(0, 5))
    assert [r.offset for r in consumer.poll(max_records=2)] == [0, 1]
    consumer.seek(TP0, 10)
    assert consumer.poll() == []
    resp = pb.FetchResponse()
    resp.topics.add(name="t").partitions.add(partition=0, high_watermark=100, records=batch(0, 5))
    consumer._handle_fetch_response(resp, {TP0: 2})  # sent before the seek: not for this position
    assert consumer.poll() == [] and consumer.position(TP0) == 10


def test_the_next_fetch_starts_where_the_buffered_one_ends_and_both_are_handed_out_in_order(
        consumer: Consumer) -> None:
    feed(consumer, TP0, batch(0, 3) + batch(3, 3)[:-5])  # a partial batch at the end of the fetch
    assert consumer._fetch_position(TP0) == 3 and consumer.position(TP0) == 0
    feed(consumer, TP0, batch(3, 3))  # the prefetch, answered while offsets 0..2 are still buffered
    assert consumer._fetch_position(TP0) == 6
    stale = pb.FetchResponse()
    stale.topics.add(name="t").partitions.add(partition=0, high_watermark=100, records=batch(3, 3))
    consumer._handle_fetch_response(stale, {TP0: 3})  # sent for 3, but the buffered fetches end at 6 now
    assert [r.offset for r in consumer.poll(max_records=2)] == [0, 1]
    assert [r.offset for r in consumer.poll()] == [2, 3, 4, 5]
    assert consumer.position(TP0) == 6 and not consumer._buffer


def test_an_error_on_a_prefetch_is_left_to_the_fetch_after_the_buffered_records(consumer: Consumer) -> None:
    feed(consumer, TP0, batch(0, 2))
    resp = pb.FetchResponse()
    resp.topics.add(name="t").partitions.add(partition=0, error_code=pb.ErrorCode.OFFSET_OUT_OF_RANGE)
    consumer._handle_fetch_response(resp, {TP0: 2})
    assert consumer.position(TP0) == 0 and [r.offset for r in consumer.poll()] == [0, 1]


def test_poll_batch_joins_a_partitions_buffered_fetches(consumer: Consumer) -> None:
    pytest.importorskip("pyarrow")
    feed(consumer, TP0, batch(0, 2))
    feed(consumer, TP0, batch(2, 2))
    out = consumer.poll_batch(max_records=3)
    assert out[TP0].column("offset").to_pylist() == [0, 1, 2] and consumer.position(TP0) == 3
    lists = consumer.poll_batch(arrow=False)
    assert lists[TP0].offset == [3]


def test_no_prefetching_at_the_end_of_the_log_until_the_buffered_records_are_taken(consumer: Consumer) -> None:
    feed(consumer, TP0, batch(0, 2))
    assert consumer._wants_fetch(TP0)
    feed(consumer, TP0, b"")  # the prefetch from offset 2 found nothing
    assert not consumer._wants_fetch(TP0) and consumer._fetch_position(TP0) == 2
    assert [r.offset for r in consumer.poll()] == [0, 1]
    assert consumer._wants_fetch(TP0)


class _FakeFuture:
    def __init__(self) -> None:
        self.cancelled = False

    def add_done_callback(self, _fn: Any) -> None:
        pass

    def done(self) -> bool:
        return False

    def cancel(self) -> bool:
        self.cancelled = True
        return True


def test_prefetches_ask_from_the_fetch_position_and_are_never_parked_at_the_broker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    sent: list[pb.FetchRequest] = []

    def future(req: pb.FetchRequest, timeout: float) -> _FakeFuture:
        sent.append(req)
        return _FakeFuture()

    conn = SimpleNamespace(api=SimpleNamespace(Fetch=SimpleNamespace(future=future)))
    c = Consumer(bootstrap_servers="127.0.0.1:1", auto_offset_reset="earliest", fetch_max_wait_ms=500)
    try:
        monkeypatch.setattr(c.view, "partitions", {("t", 0): SimpleNamespace(leader=1, leader_epoch=3),
                                                   ("t", 1): SimpleNamespace(leader=2, leader_epoch=3)})
        monkeypatch.setattr(c.view, "brokers", {1: "b1", 2: "b2"})
        monkeypatch.setattr(c.view, "connection", lambda _address: conn)
        c.assign([TP0, TP1])
        c._positions = {TP0: 0, TP1: 0}
        feed(c, TP0, batch(0, 3))
        c._send_fetches()
        asked = {(r.topics[0].partitions[0].partition, r.topics[0].partitions[0].fetch_offset, r.max_wait_ms)
                 for r in sent}
        # Partition 0 has records buffered: its fetch is a prefetch from 3, answered at once; partition
        # 1 has none: a long poll from its position.
        assert asked == {(0, 3, 0), (1, 0, 500)}
        c._send_fetches()
        assert len(sent) == 2  # one request per leader in flight
    finally:
        c.close()
