"""The record accumulator without a cluster or threads: drain by linger, by size, retry back-off
keeps sequence order, the in-flight caps, delivery deadline expiry, and when appends wake the sender."""

from __future__ import annotations

from client.accumulator import AccumulatorConfig, Drained, ProducerBatch, RecordAccumulator

V = b"v" * 100


def leader_one(_topic: str, _partition: int) -> int:
    return 1


def no_leader(_topic: str, _partition: int) -> int:
    return -1


def acc_with(**kw: object) -> RecordAccumulator:
    cfg: dict[str, object] = {"batch_size": 1000, "linger_ms": 5.0, "retry_backoff_ms": 100.0,
                              "delivery_timeout_ms": 10_000.0, "max_in_flight": 5, "idempotent": True}
    cfg.update(kw)
    acc = RecordAccumulator(AccumulatorConfig(**cfg))  # type: ignore[arg-type]
    acc.set_producer_id(7, 0)
    return acc


def add(acc: RecordAccumulator, now: float, partition: int = 0, n: int = 1, topic: str = "t") -> bool:
    wake = False
    for _ in range(n):
        fut, w = acc.append(topic, partition, None, V, (), 1000, 116, now)
        assert fut is not None
        wake = wake or w
    return wake


def sent(d: Drained) -> list[ProducerBatch]:
    return [b for bs in d.ready.values() for b in bs]


def test_drain_waits_for_linger_then_sends() -> None:
    acc = acc_with(linger_ms=5.0)
    add(acc, now=0.0, n=3)
    d = acc.drain(1.0, leader_one)
    assert not d.ready and d.next_ready_ms == 5.0
    d = acc.drain(5.0, leader_one)
    [batch] = d.ready[1]
    assert batch.count == 3 and batch.sequence == 0 and batch.producer_id == 7 and batch.attempts == 1


def test_full_batch_goes_before_linger() -> None:
    acc = acc_with(linger_ms=1000.0, batch_size=1000)
    add(acc, now=0.0, n=9)  # 9 x ~110 B: the 9th record starts a second batch
    assert acc.queued_batches("t", 0) == 2
    d = acc.drain(1.0, leader_one)
    [batch] = sent(d)
    assert batch.size <= 1000 and batch.count == 8
    assert acc.queued_batches("t", 0) == 1
    assert d.next_ready_ms == 1000.0  # the second batch lingers


def test_flush_makes_everything_ready() -> None:
    acc = acc_with(linger_ms=1000.0)
    add(acc, now=0.0, partition=0)
    add(acc, now=0.0, partition=1)
    acc.begin_flush()
    assert len(sent(acc.drain(0.0, leader_one))) == 2
    acc.end_flush()


def test_in_flight_cap_and_sequences() -> None:
    acc = acc_with(linger_ms=0.0, max_in_flight=2)
    batches = []
    for i in range(4):
        add(acc, now=float(i))
        batches += sent(acc.drain(float(i), leader_one))
    assert [b.sequence for b in batches] == [0, 1]  # two in flight, the rest wait
    acc.complete(batches[0])
    [third] = sent(acc.drain(10.0, leader_one))  # the record of i=3 joined the batch of i=2
    assert third.sequence == 2 and third.count == 2 and acc.queued_batches("t", 0) == 0
    # Without idempotence one batch per partition is in flight and nothing is numbered.
    plain = acc_with(linger_ms=0.0, idempotent=False)
    add(plain, now=0.0)
    [b] = sent(plain.drain(0.0, leader_one))
    add(plain, now=1.0)
    assert not plain.drain(1.0, leader_one).ready and b.sequence == -1
    plain.complete(b)
    assert len(sent(plain.drain(2.0, leader_one))) == 1


def test_retry_backoff_keeps_sequence_order() -> None:
    acc = acc_with(linger_ms=0.0, retry_backoff_ms=100.0, max_in_flight=5)
    out = []
    for _ in range(3):
        add(acc, now=0.0)
        out += sent(acc.drain(0.0, leader_one))
    add(acc, now=0.0)  # a fresh batch that must not overtake the retries
    first, second, third = out
    # The second fails first, then the first: both go back in sequence order, ahead of the fresh one.
    acc.reenqueue(second, now_ms=10.0)
    acc.reenqueue(first, now_ms=20.0)
    d = acc.drain(50.0, leader_one)  # retrying: one at a time, and the third is still in flight
    assert not d.ready
    assert d.next_ready_ms == 1050.0  # no timer: the third's completion wakes the sender
    acc.complete(third)
    d = acc.drain(60.0, leader_one)
    assert not d.ready and d.next_ready_ms == 120.0  # the head (sequence 0) backs off until 20 + 100
    d = acc.drain(120.0, leader_one)
    assert sent(d) == [first] and first.attempts == 2
    assert not acc.drain(111.0, leader_one).ready  # one at a time while retrying
    acc.complete(first)
    assert sent(acc.drain(112.0, leader_one)) == [second]
    acc.complete(second)
    [fresh] = sent(acc.drain(113.0, leader_one))
    assert fresh.sequence == 3 and fresh.attempts == 1


def test_retry_gives_up_after_retries_or_deadline() -> None:
    acc = acc_with(linger_ms=0.0, retries=1, delivery_timeout_ms=1000.0)
    add(acc, now=0.0)
    [b] = sent(acc.drain(0.0, leader_one))
    assert acc.can_retry(b, 10.0)
    acc.reenqueue(b, 10.0)
    assert sent(acc.drain(110.0, leader_one)) == [b]
    assert not acc.can_retry(b, 210.0)  # attempts 2 > retries 1
    acc2 = acc_with(linger_ms=0.0, delivery_timeout_ms=1000.0)
    add(acc2, now=0.0)
    [b2] = sent(acc2.drain(0.0, leader_one))
    assert not acc2.can_retry(b2, 1001.0)


def test_unsent_batch_expires_at_its_delivery_deadline() -> None:
    acc = acc_with(linger_ms=0.0, delivery_timeout_ms=1000.0)
    add(acc, now=0.0)
    d = acc.drain(10.0, no_leader)
    assert not d.ready and d.unknown_leader_topics == {"t"} and d.next_ready_ms == 110.0
    d = acc.drain(1001.0, no_leader)
    [expired] = d.expired
    assert expired.attempts == 0 and acc.unfinished == 1
    acc.complete(expired)
    assert acc.unfinished == 0 and acc.buffered == 0


def test_no_producer_id_no_numbering() -> None:
    acc = acc_with(linger_ms=0.0)
    acc.set_producer_id(-1, -1)
    add(acc, now=0.0)
    assert not acc.drain(0.0, leader_one).ready
    acc.set_producer_id(8, 0)
    [b] = sent(acc.drain(1.0, leader_one))
    assert (b.producer_id, b.sequence) == (8, 0)


def test_appends_wake_the_sender_only_when_a_batch_becomes_ready_early() -> None:
    acc = acc_with(linger_ms=0.0, batch_size=1000)
    acc.drain(0.0, leader_one)  # the sender sleeps until 1000 ms (nothing waiting)
    assert add(acc, now=1.0)  # linger 0: ready now, wake
    assert not add(acc, now=1.0)  # same batch, already woken for
    [b] = sent(acc.drain(2.0, leader_one))
    assert add(acc, now=3.0)  # a new batch, and room in flight (idempotent: 5): wake
    lingering = acc_with(linger_ms=5.0, batch_size=1000)
    lingering.drain(0.0, leader_one)
    assert add(lingering, now=1.0)  # ready at 6 ms, before the sender's 1000 ms: wake (to re-arm)
    assert not add(lingering, now=2.0, n=7)  # fills the batch; the sender already drains at 6 ms
    lingering.drain(6.0, leader_one)
    plain = acc_with(linger_ms=0.0, idempotent=False)
    plain.drain(0.0, leader_one)
    assert add(plain, now=1.0)
    plain.drain(1.0, leader_one)  # one batch in flight: the partition is blocked
    assert not add(plain, now=2.0, n=20)  # a completion wakes the sender, appends need not
    assert b.in_flight


def test_sticky_abort_seals_the_full_batch() -> None:
    acc = acc_with(linger_ms=1000.0, batch_size=500)
    add(acc, now=0.0, n=3)  # 61 + 3 x 109 B: no room for a fourth
    assert not acc.drain(0.5, leader_one).ready  # lingering; the sender would sleep until 1000.5 ms
    fut, wake = acc.append("t", 0, None, V, (), 1000, 116, 1.0, abort_if_full=True)
    assert fut is None and wake and acc.queued_batches("t", 0) == 1
    [b] = sent(acc.drain(1.0, leader_one))  # sealed: ready without waiting for linger
    assert b.count == 3


def test_pipelining_drains_again_at_once_when_more_is_ready() -> None:
    acc = acc_with(linger_ms=1000.0, batch_size=500)
    add(acc, now=0.0, n=10)  # 4 batches: 3 full ones and an open one
    d = acc.drain(1.0, leader_one)
    assert len(sent(d)) == 1 and d.next_ready_ms == 1.0  # the next full one goes in the next request
    d = acc.drain(1.0, leader_one)
    d = acc.drain(1.0, leader_one)
    assert len(sent(d)) == 1 and d.next_ready_ms == 1000.0  # the last one lingers
    assert [b.sequence for b in sent(d)] == [6]


class _NoWalk(dict):  # type: ignore[type-arg]
    """A queue map whose walk fails: lookups by partition only."""

    def _walk(self, *_a: object) -> object:
        raise AssertionError("a drain walked every partition's queue")

    items = values = keys = __iter__ = _walk  # type: ignore[assignment]


def test_a_drain_walks_only_the_partitions_with_batches() -> None:
    """Every partition ever written keeps its queue (its sequence numbers). At thousands of
    partitions a drain (one per linger, under the lock send() takes) walked them all, though only
    the few with a batch could send (issue 29): drains, expiry, retries and abort use the queues
    holding batches."""
    acc = acc_with(linger_ms=0.0, delivery_timeout_ms=1000.0)
    for p in range(10_000):
        add(acc, now=0.0, partition=p)
    first = sent(acc.drain(0.0, leader_one))
    assert len(first) == 10_000
    for b in first:
        acc.complete(b)
    acc._queues = _NoWalk(acc._queues)
    assert not acc.drain(1.0, leader_one).ready
    add(acc, now=2.0, partition=17)
    [b] = sent(acc.drain(2.0, leader_one))
    assert (b.partition, b.sequence) == (17, 1)
    acc.reenqueue(b, now_ms=3.0)
    assert not acc.drain(4.0, leader_one).ready  # backing off
    assert sent(acc.drain(103.0, leader_one)) == [b] and b.attempts == 2
    add(acc, now=200.0, partition=18)
    assert acc.drain(1201.0, no_leader).expired[0].partition == 18
    add(acc, now=300.0, partition=19)
    assert [x.partition for x in acc.abort_undrained()] == [19]
    assert not acc.drain(1300.0, leader_one).ready
