"""The record accumulator (Kafka's RecordAccumulator): the producer's batching state, pure.

Theory of operation
-------------------
No I/O, no threads, no clock: every method is given the time (``now_ms``, monotonic
milliseconds) and the producer shell (``client.producer``) holds one lock around each call. The
shell's ``send()`` appends; its sender thread drains, sends and feeds the outcomes back. That
split keeps every decision about *what* to send *when* in this module, testable without a
cluster (tests/unit/test_accumulator.py).

Appending. Each partition has a FIFO queue of :class:`ProducerBatch`. A record goes into the
last batch of its partition's queue if that batch is still open (not yet framed) and the record
fits ``batch_size``; else a new batch is started behind it. Records are encoded at append, so a
batch is already its records section when it leaves.

Draining. :meth:`RecordAccumulator.drain` looks at the *head* batch of each queue only - a
partition's batches leave in queue order, which is what keeps records (and idempotent
sequences) in order. A head batch is

1. expired if it was never sent and its ``delivery_timeout_ms`` passed (sent batches are
   expired by the sender: their outcome is decided by the broker's answer);
2. blocked while its partition has its in-flight limit of batches out: ``max_in_flight``
   with idempotence, else 1, and 1 while a retry is being worked through (a retried batch is
   resent alone so nothing overtakes it). A completion unblocks it, and the sender drains
   after every completion, so a blocked partition needs no timer;
3. backing off until its ``retry_at``;
4. ready when full (another batch queued behind it, or ``batch_size`` reached), when its
   ``linger_ms`` has passed, or while a flush (or close) is in progress;
5. held back, although ready, while its leader is unknown (the topic is reported for a metadata
   refresh) or, idempotent, while there is no producer id yet.

A ready batch is taken off its queue, numbered (idempotent: the producer id, epoch and base
sequence are fixed here, once, so a retry resends the very same batch) and grouped by leader.
``drain`` also says when something will next become ready (``next_ready_ms``): the earliest
linger end, retry back-off end or delivery deadline of a waiting head batch - or now, when a
partition that just gave a batch has another ready one and room in flight (one request holds
one batch per partition, so the next one goes in the next request: pipelining).

Sender wake-ups. ``drain`` remembers when the sender will drain again on its own
(``next_drain_ms``). ``append`` reports ``wake=True`` only when the batch it touched becomes
ready *before* that: a new batch with ``linger_ms=0``, a batch that filled up, and only if its
partition is not blocked (a completion will drain it anyway). So at low load with
``linger_ms=0`` a record is sent as soon as it is appended, with no polling interval, while at
high load most records neither wake nor signal anything.

Outcomes. The sender calls :meth:`RecordAccumulator.complete` for a batch acknowledged or given
up (its in-flight slot and buffer space are freed) and :meth:`RecordAccumulator.reenqueue` for
a batch to retry: it goes back to the front of its queue in sequence order, after
``retry_backoff_ms``.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from client.futures import BatchResult, FutureRecordMetadata
from proto.record_batch import Header, RecordsBuilder, build_batch, encode_records

# Bytes a record costs beyond its key and value, for batch_size / buffer_memory estimates.
RECORD_OVERHEAD_ESTIMATE = 16
# The v2 batch header: an empty batch is already this big.
BATCH_OVERHEAD = 61
# How long drain() lets the sender sleep when nothing at all is waiting (a bound, not a poll:
# appends and completions wake the sender earlier).
IDLE_DRAIN_MS = 1000.0


class ProducerBatch:
    """One partition's batch: records encoded at append (into ``records``, a RecordsBuilder), framed
    once when first sent."""

    __slots__ = (
        "attempts",
        "buffered",
        "created",
        "deadline",
        "in_flight",
        "partition",
        "payload",
        "producer_epoch",
        "producer_id",
        "records",
        "result",
        "retry_at",
        "sealed",
        "sequence",
        "topic",
    )

    def __init__(self, topic: str, partition: int, now: float, deadline: float) -> None:
        self.topic = topic
        self.partition = partition
        self.result = BatchResult(topic, partition)
        # The records section, grown in place; count, size (header included), base_ts, max_ts.
        self.records = RecordsBuilder(BATCH_OVERHEAD, FutureRecordMetadata, self.result)
        self.created = now
        self.attempts = 0
        self.in_flight = False
        # Full as far as appends go (the sticky partitioner left it for another partition): ready now.
        self.sealed = False
        self.sequence = -1
        # The producer id/epoch the sequence belongs to, fixed when the sequence is assigned: a
        # producer-id reset meanwhile must not pair an old sequence with a new id (issue 14 item 8).
        self.producer_id = -1
        self.producer_epoch = -1
        self.payload: bytes | None = None
        self.retry_at = 0.0
        self.deadline = deadline
        self.buffered = 0

    @property
    def count(self) -> int:
        count: int = self.records.count
        return count

    @property
    def size(self) -> int:
        """Estimated bytes of the framed batch (header + records section, before compression)."""
        size: int = self.records.size
        return size

    @property
    def base_ts(self) -> int:
        base_ts: int = self.records.base_ts
        return base_ts

    @property
    def max_ts(self) -> int:
        max_ts: int = self.records.max_ts
        return max_ts

    def append(self, key: bytes | None, value: bytes | None, headers: Sequence[Header],
               ts: int) -> FutureRecordMetadata:
        """Add one record whatever the batch's size (RecordAccumulator.append checks the size)."""
        fut: FutureRecordMetadata = self.records.try_append(key, value, headers, ts, 0, sys.maxsize)
        return fut

    def append_section(self, section: bytes, count: int, ts: int) -> int:
        """Add ``count`` records already encoded (by ``encode_records``, offset deltas starting at the
        value returned, timestamp delta ``ts - base_ts``); returns that first offset delta."""
        first: int = self.records.append_section(section, count, ts)
        return first

    def close(self, codec: int, producer_id: int, producer_epoch: int, transactional: bool = False) -> bytes:
        """Encode once; a retry resends the same bytes (same sequence, same CRC). ``transactional``:
        the batch carries the transactional bit (a transactional producer's, KIP-98)."""
        if self.sequence >= 0:
            producer_id, producer_epoch = self.producer_id, self.producer_epoch
        if self.payload is None:
            records = self.records
            self.payload = build_batch(records.getvalue(), record_count=records.count, base_timestamp=records.base_ts,
                                       max_timestamp=records.max_ts, compression=codec, producer_id=producer_id,
                                       producer_epoch=producer_epoch, base_sequence=self.sequence,
                                       is_transactional=transactional)
            # The section is in the payload now: keep the counters, drop the bytes.
            self.records = _Framed(records.count, records.size, records.base_ts, records.max_ts)
        return self.payload


class _Framed:
    """What stays of a framed batch's RecordsBuilder: its counters (read by drain and completion)."""

    __slots__ = ("base_ts", "count", "max_ts", "size")

    def __init__(self, count: int, size: int, base_ts: int, max_ts: int) -> None:
        self.count, self.size, self.base_ts, self.max_ts = count, size, base_ts, max_ts


class PartitionQueue:
    """A partition's batches, oldest first, and what is out for it."""

    __slots__ = ("batches", "in_flight", "next_sequence", "retrying")

    def __init__(self) -> None:
        self.batches: deque[ProducerBatch] = deque()
        self.in_flight = 0
        self.next_sequence = 0
        self.retrying = False

    def open_batch(self) -> ProducerBatch | None:
        """The last batch, if records may still go into it."""
        batches = self.batches
        if batches:
            last = batches[-1]
            if last.payload is None and not last.sealed and not last.attempts:
                return last
        return None


@dataclass(frozen=True)
class AccumulatorConfig:
    batch_size: int = 16384
    linger_ms: float = 5.0
    retry_backoff_ms: float = 100.0
    delivery_timeout_ms: float = 120_000.0
    max_in_flight: int = 5
    idempotent: bool = True
    retries: int = 2_147_483_647


@dataclass(frozen=True)
class Drained:
    """What one drain found: batches to send per leader broker id, batches that expired unsent, the
    topics whose leader is unknown, and when to drain again at the latest (monotonic ms)."""

    ready: dict[int, list[ProducerBatch]]
    expired: list[ProducerBatch]
    unknown_leader_topics: frozenset[str]
    next_ready_ms: float
    # Partitions with a batch ready that ``may_send`` held back (a transaction has not added them yet).
    held: frozenset[tuple[str, int]] = frozenset()


@dataclass(frozen=True)
class SliceFit:
    """How many of a bulk call's values go into one batch: ``values[start:end]``, their estimated
    size, and whether the partition's open batch is full (so a new batch, or partition, is due)."""

    end: int
    estimate: int
    open_batch_full: bool


def _estimate(value: bytes | None, key: bytes | None) -> int:
    return len(value or b"") + len(key or b"") + RECORD_OVERHEAD_ESTIMATE


class RecordAccumulator:
    """Per-partition batch queues; see the module docstring. Not thread-safe: the caller locks."""

    def __init__(self, config: AccumulatorConfig) -> None:
        self.config = config
        self._batch_size = config.batch_size  # read per record
        self._queues: dict[tuple[str, int], PartitionQueue] = {}
        # The queues holding at least one batch: what a drain walks. Every partition ever written
        # keeps its queue (its sequence numbers), and at thousands of partitions a walk over them
        # all on every drain (one per linger) cost more than the batches it found, under the lock
        # the caller's send() waits for (issue 29).
        self._pending: dict[tuple[str, int], PartitionQueue] = {}
        self.buffered = 0  # estimated bytes of records not yet completed (for buffer_memory)
        self.unfinished = 0  # batches appended to and not yet completed
        self.producer_id = -1
        self.producer_epoch = -1
        self.flushes_in_progress = 0
        self.closing = False
        # When the sender will drain again without being woken: appends that make a batch ready
        # sooner than this ask for a wake-up; anything later it will find on its own.
        self.next_drain_ms = 0.0

    # ------------------------------------------------------------ appending

    def _queue(self, tp: tuple[str, int]) -> PartitionQueue:
        pq = self._queues.get(tp)
        if pq is None:
            pq = self._queues[tp] = PartitionQueue()
        return pq

    def _new_batch(self, pq: PartitionQueue, topic: str, partition: int, now_ms: float) -> ProducerBatch:
        batch = ProducerBatch(topic, partition, now_ms, now_ms + self.config.delivery_timeout_ms)
        pq.batches.append(batch)
        self._pending[(topic, partition)] = pq
        self.unfinished += 1
        return batch

    def _wakes(self, pq: PartitionQueue, now_ms: float) -> bool:
        """Whether the sender must be woken for this queue (a batch was added or filled up): its head
        is ready before the sender's next drain and the partition may send."""
        cfg = self.config
        limit = 1 if (pq.retrying or not cfg.idempotent) else cfg.max_in_flight
        if pq.in_flight >= limit:
            return False  # a completion wakes the sender, and then it drains this queue
        head = pq.batches[0]
        if len(pq.batches) > 1 or head.sealed or head.size >= cfg.batch_size:
            ready_ms = max(now_ms, head.retry_at)
        else:
            ready_ms = head.created + cfg.linger_ms
        if ready_ms >= self.next_drain_ms:
            return False
        self.next_drain_ms = ready_ms  # one wake-up is enough until the sender drains
        return True

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
               headers: Sequence[Header], ts: float, estimate: int, now_ms: float,
               abort_if_full: bool = False) -> tuple[FutureRecordMetadata | None, bool]:
        """Add one record (``ts``: its timestamp in ms; a float is floored); returns its future and
        whether to wake the sender.

        With ``abort_if_full`` nothing is added when the partition's open batch has no room: that
        batch is sealed (ready to go) and ``(None, wake)`` returned, so the sticky partitioner moves
        on to another partition before a new batch is started (KIP-480).
        """
        # The per-record path: ProducerBatch.open_batch/append inlined (one Python frame per record).
        tp = (topic, partition)
        pq = self._queues.get(tp)
        if pq is None:
            pq = self._queues[tp] = PartitionQueue()
        batches = pq.batches
        batch = batches[-1] if batches else None
        batch_size = self._batch_size
        new = False
        if batch is None or batch.payload is not None or batch.sealed or batch.attempts:
            batch, new = self._new_batch(pq, topic, partition, now_ms), True
        fut = batch.records.try_append(key, value, headers, ts, estimate, batch_size)
        if fut is None:  # the open batch has no room for this record (it holds at least one)
            if abort_if_full:
                batch.sealed = True
                return None, self._wakes(pq, now_ms)
            batch, new = self._new_batch(pq, topic, partition, now_ms), True
            fut = batch.records.try_append(key, value, headers, ts, estimate, batch_size)  # empty: always fits
        batch.buffered += estimate
        self.buffered += estimate
        if new or batch.records.size >= batch_size:
            return fut, self._wakes(pq, now_ms)
        return fut, False

    def seal(self, topic: str, partition: int, now_ms: float) -> bool:
        """No more appends to the partition's open batch (the sticky partitioner moves on): it is ready
        now. Returns whether to wake the sender."""
        pq = self._queues.get((topic, partition))
        batch = pq.open_batch() if pq is not None else None
        if pq is None or batch is None:
            return False
        batch.sealed = True
        return self._wakes(pq, now_ms)

    def fit(self, topic: str, partition: int, values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
            start: int) -> SliceFit:
        """The longest run of ``values[start:]`` (at least one) that fits the partition's open batch,
        or a new batch if the open one is full."""
        pq = self._queues.get((topic, partition))
        batch = pq.open_batch() if pq is not None else None
        size = batch.size if batch is not None else BATCH_OVERHEAD
        full = batch is not None and batch.count > 0 and \
            size + _estimate(values[start], None if keys is None else keys[start]) > self.config.batch_size
        room = self.config.batch_size - (BATCH_OVERHEAD if full else size)
        end, estimate, n = start, 0, len(values)
        while end < n:  # bounded by len(values)
            e = _estimate(values[end], None if keys is None else keys[end])
            if end > start and estimate + e > room:
                break
            estimate += e
            end += 1
        return SliceFit(end, estimate, full)

    def append_values(self, topic: str, partition: int, values: Sequence[bytes | None],
                      keys: Sequence[bytes | None] | None, start: int, fit: SliceFit, ts: int,
                      now_ms: float) -> tuple[BatchResult, int, bool]:
        """Add ``values[start:fit.end]`` (one ``encode_records`` call) to the partition's open batch, or
        a new one if they do not fit it; returns the batch's result, the first offset delta, and
        whether to wake the sender."""
        pq = self._queue((topic, partition))
        batch = pq.open_batch()
        new = False
        if batch is None or (batch.count and batch.size + fit.estimate > self.config.batch_size):
            batch, new = self._new_batch(pq, topic, partition, now_ms), True
        first = batch.count
        section = encode_records(values[start:fit.end], None if keys is None else keys[start:fit.end],
                                 ts - batch.base_ts if first else 0, first)
        batch.append_section(section, fit.end - start, ts)
        batch.buffered += fit.estimate
        self.buffered += fit.estimate
        wake = self._wakes(pq, now_ms) if (new or batch.size >= self.config.batch_size) else False
        return batch.result, first, wake

    # ------------------------------------------------------------ draining

    def drain(self, now_ms: float, leader_of: Callable[[str, int], int],
              may_send: Callable[[str, int], bool] | None = None) -> Drained:
        """Take every ready batch (see the module docstring); ``leader_of(topic, partition)`` is the
        leader's broker id, or -1 if it is unknown or not reachable. ``may_send(topic, partition)``
        false: the partition's ready batch stays (a transactional producer adds the partition to its
        transaction first, then wakes the sender) and the partition is reported in ``held``."""
        cfg = self.config
        flushing = self.flushes_in_progress > 0 or self.closing
        next_ms = now_ms + IDLE_DRAIN_MS
        backoff = max(1.0, cfg.retry_backoff_ms)  # at least 1 ms: no spinning while a leader is unknown
        ready: dict[int, list[ProducerBatch]] = {}
        expired: list[ProducerBatch] = []
        unknown: set[str] = set()
        held: set[tuple[str, int]] = set()
        pending = self._pending
        for tp, pq in list(pending.items()):  # bounded: the queues with a batch, not every partition
            if not pq.batches:
                del pending[tp]
                continue
            topic, partition = tp
            batch = pq.batches[0]
            if batch.payload is None and pq.in_flight == 0:
                if batch.deadline < now_ms:
                    expired.append(pq.batches.popleft())
                    if not pq.batches:
                        del pending[tp]
                    continue
                next_ms = min(next_ms, batch.deadline)
            limit = 1 if (pq.retrying or not cfg.idempotent) else cfg.max_in_flight
            if pq.in_flight >= limit:
                continue  # a completion will wake the sender
            if batch.retry_at > now_ms:
                next_ms = min(next_ms, batch.retry_at)
                continue
            full = len(pq.batches) > 1 or batch.sealed or batch.size >= cfg.batch_size
            ready_at = batch.created + cfg.linger_ms
            if not (full or flushing or ready_at <= now_ms):
                next_ms = min(next_ms, ready_at)
                continue
            if may_send is not None and batch.sequence < 0 and not may_send(topic, partition):
                held.add((topic, partition))
                continue
            leader = leader_of(topic, partition)
            if leader < 0:
                unknown.add(topic)
                next_ms = min(next_ms, now_ms + backoff)
                continue
            if cfg.idempotent and self.producer_id < 0:
                next_ms = min(next_ms, now_ms + backoff)
                continue
            pq.batches.popleft()
            if not pq.batches:
                del pending[tp]
            if batch.sequence < 0 and cfg.idempotent:
                batch.producer_id, batch.producer_epoch = self.producer_id, self.producer_epoch
                batch.sequence = pq.next_sequence
                pq.next_sequence = (pq.next_sequence + batch.count) & 0x7FFFFFFF
            pq.in_flight += 1
            batch.in_flight = True
            batch.attempts += 1
            ready.setdefault(leader, []).append(batch)
            # One batch per partition per drain (a request holds one batch per partition), but with
            # room in flight the next one may go in the next request right away: pipelining.
            if pq.batches and pq.in_flight < limit:
                nxt = pq.batches[0]
                if len(pq.batches) > 1 or nxt.sealed or nxt.size >= cfg.batch_size or flushing:
                    next_ms = now_ms
                else:
                    next_ms = min(next_ms, max(now_ms, nxt.created + cfg.linger_ms))
        self.next_drain_ms = next_ms
        return Drained(ready, expired, frozenset(unknown), next_ms, frozenset(held))

    # ------------------------------------------------------------ outcomes

    def _release(self, batch: ProducerBatch) -> PartitionQueue | None:
        pq = self._queues.get((batch.topic, batch.partition))
        if pq is not None and batch.in_flight:
            pq.in_flight -= 1
        batch.in_flight = False
        return pq

    def complete(self, batch: ProducerBatch) -> None:
        """``batch`` is done - acknowledged, failed or expired: free its in-flight slot and buffer."""
        pq = self._release(batch)
        if pq is not None and pq.retrying and pq.in_flight == 0 and not any(b.attempts for b in pq.batches):
            pq.retrying = False
        self.unfinished -= 1
        self.buffered -= batch.buffered

    def can_retry(self, batch: ProducerBatch, now_ms: float) -> bool:
        """Whether ``retries`` and ``delivery_timeout_ms`` still allow another attempt."""
        return batch.attempts <= self.config.retries and now_ms <= batch.deadline

    def reenqueue(self, batch: ProducerBatch, now_ms: float) -> None:
        """Send ``batch`` again after ``retry_backoff_ms``, ahead of the batches not yet sent and in
        sequence order with the other retries (in-flight batches of its partition that fail too
        will join it there); until they are through the partition sends one batch at a time."""
        pq = self._release(batch) or self._queue((batch.topic, batch.partition))
        pq.retrying = True
        batch.retry_at = now_ms + self.config.retry_backoff_ms
        items = list(pq.batches)
        items.append(batch)
        retried = sorted((b for b in items if b.attempts > 0), key=lambda b: (b.sequence, b.created))
        fresh = [b for b in items if b.attempts == 0]
        pq.batches = deque(retried + fresh)
        self._pending[(batch.topic, batch.partition)] = pq

    def abort_undrained(self) -> list[ProducerBatch]:
        """Take every batch not out for sending (a fatal error fails them); complete() each."""
        doomed = [b for pq in self._pending.values() for b in pq.batches]
        for pq in self._pending.values():
            pq.batches.clear()
        self._pending.clear()
        return doomed

    # ------------------------------------------------------------ producer id, flush

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """A new producer id (-1: none until InitProducerId answers; drain then numbers nothing).
        Sequences start again at 0 for a new id; batches already numbered keep their id and sequence."""
        if producer_id >= 0:
            for pq in self._queues.values():
                pq.next_sequence = 0
        self.producer_id, self.producer_epoch = producer_id, producer_epoch

    def begin_flush(self) -> None:
        self.flushes_in_progress += 1
        self.next_drain_ms = 0.0  # everything is ready now: the next append may wake the sender again

    def end_flush(self) -> None:
        self.flushes_in_progress -= 1

    def queued_batches(self, topic: str, partition: int) -> int:
        pq = self._queues.get((topic, partition))
        return len(pq.batches) if pq is not None else 0
