"""The producer: batching, pipelined, idempotent (Kafka's KafkaProducer, RecordAccumulator, Sender).

Theory of operation
-------------------
``send()`` runs on the caller's thread: it picks the partition (S5.3),
encodes the record straight into the open batch of that partition and
returns a future. The batch is the unit of everything after that: one CRC,
one compression, one future result shared by its records.

A sender thread runs an asyncio loop. It drains batches that are full, whose
``linger_ms`` has passed, or that a ``flush()`` wants, groups them by
partition leader, and sends one Produce request per leader holding one batch
per partition - several requests in flight per broker (``max_in_flight``).

Ordering and idempotence (KIP-98): with ``enable_idempotence`` the producer
gets a producer id and epoch (InitProducerId) and numbers each partition's
batches with sequences. A retried batch keeps its sequence, so the leader
answers a duplicate with the original offset and refuses a gap; batches are
always resent in sequence order, one at a time per partition until the
retries are through. Without idempotence only one batch per partition is in
flight, so retries never reorder records either.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import grpc

from client.connection import ClusterView, parse_bootstrap, rpc_error
from client.discovery import default_bootstrap
from client.partitioner import StickyPartitioner, partition_for_key
from proto import errors
from proto import minikafka_pb2 as pb
from proto import minikafka_pb2_grpc as pb_grpc
from proto.grpc_options import CHANNEL_OPTIONS
from proto.record_batch import CODEC_BY_NAME, Header, build_batch, encode_record_body, encode_records
from proto.transport import ChannelSecurity, client_security

log = logging.getLogger(__name__)

RECORD_OVERHEAD_ESTIMATE = 16


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int


# ------------------------------------------------------------------ futures


class _BatchResult:
    """The outcome of one batch, shared by the futures of its records."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self._condition = threading.Condition()
        self.done = False
        self.base_offset = -1
        self.error: BaseException | None = None
        self.callbacks: list[Callable[[], None]] = []
        self.waited: list[FutureRecordMetadata] = []

    def complete(self, base_offset: int, error: BaseException | None) -> None:
        with self._condition:
            if self.done:
                return
            self.base_offset = base_offset
            self.error = error
            self.done = True
            for f in self.waited:  # futures someone passed to concurrent.futures.wait()
                for waiter in f.__dict__.get("_mk_waiters", []):
                    if error is None:
                        waiter.add_result(f)
                    else:
                        waiter.add_exception(f)
            self._condition.notify_all()
            callbacks, self.callbacks = self.callbacks, []
        for cb in callbacks:
            try:
                cb()
            except Exception:
                log.exception("exception in a producer callback")


def _call(fn: Callable[[Any], object], arg: Any) -> None:
    fn(arg)


class FutureRecordMetadata(concurrent.futures.Future):  # type: ignore[type-arg]
    """A ``concurrent.futures.Future`` for one record, resolved with its batch.

    ``Future.__init__`` builds a Condition and a Lock per future; at hundreds of
    thousands of records per second that dominates the producer, so the records
    of a batch share the batch's condition instead. The methods (and the private
    attributes ``concurrent.futures.wait`` / ``as_completed`` use) map onto it.
    """

    def __init__(self, result: _BatchResult, relative_offset: int, timestamp: int) -> None:
        # Deliberately no super().__init__(): see the class docstring.
        self._mk_result = result
        self._mk_rel = relative_offset
        self._mk_ts = timestamp

    # The attributes concurrent.futures.wait() and as_completed() read.
    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        return self._mk_result._condition

    @property
    def _state(self) -> str:  # type: ignore[override]
        return "FINISHED" if self._mk_result.done else "PENDING"

    @property
    def _waiters(self) -> list[Any]:  # type: ignore[override]
        ws: list[Any] | None = self.__dict__.get("_mk_waiters")
        if ws is None:
            ws = self.__dict__["_mk_waiters"] = []
            self._mk_result.waited.append(self)
        return ws

    def cancel(self) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return not self._mk_result.done

    def done(self) -> bool:
        return self._mk_result.done

    def _wait(self, timeout: float | None) -> None:
        r = self._mk_result
        if r.done:
            return
        with r._condition:
            if not r.done and not r._condition.wait_for(lambda: r.done, timeout):
                raise TimeoutError("the record was not acknowledged in time")

    def result(self, timeout: float | None = None) -> RecordMetadata:
        self._wait(timeout)
        r = self._mk_result
        if r.error is not None:
            raise r.error
        offset = r.base_offset + self._mk_rel if r.base_offset >= 0 else -1
        return RecordMetadata(r.topic, r.partition, offset, self._mk_ts)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return self._mk_result.error

    def add_done_callback(self, fn: Callable[[concurrent.futures.Future[Any]], object]) -> None:
        r = self._mk_result
        with r._condition:
            if not r.done:
                r.callbacks.append(partial(_call, fn, self))
                return
        fn(self)

    def set_running_or_notify_cancel(self) -> bool:
        return True

    def set_result(self, result: Any) -> None:
        raise RuntimeError("a producer future is completed by its batch")

    def set_exception(self, exception: BaseException | None) -> None:
        raise RuntimeError("a producer future is completed by its batch")


class BatchSendResult:
    """What ``Producer.send_batch`` returns: one handle for the whole call.

    ``result(timeout)`` waits for every record and returns their ``RecordMetadata`` in the order of
    the values given (raising the first failure, as ``Future.result`` does); ``exception()``,
    ``done()`` and ``futures()`` (one ``FutureRecordMetadata`` per record, built on demand) cover
    the rest. The records share their batches' outcomes, so nothing is allocated per record
    until asked for.
    """

    def __init__(self) -> None:
        # (batch outcome, first offset delta in that batch, record count, timestamp) per slice
        self._slices: list[tuple[_BatchResult, int, int, int]] = []
        self._futures: list[FutureRecordMetadata] = []  # records sent one by one (keyed, no partition)

    def done(self) -> bool:
        return all(r.done for r, _, _, _ in self._slices) and all(f.done() for f in self._futures)

    def _wait(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        for r, _, _, _ in self._slices:
            if not r.done:
                with r._condition:
                    left = None if deadline is None else max(0.0, deadline - time.monotonic())
                    if not r._condition.wait_for(lambda r=r: r.done, left):  # type: ignore[misc]
                        raise TimeoutError("the records were not acknowledged in time")
        for f in self._futures:
            f._wait(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        for r, _, _, _ in self._slices:
            if r.error is not None:
                return r.error
        for f in self._futures:
            if f._mk_result.error is not None:
                return f._mk_result.error
        return None

    def futures(self) -> list[FutureRecordMetadata]:
        out = list(self._futures)
        for r, first, count, ts in self._slices:
            out.extend(FutureRecordMetadata(r, first + i, ts) for i in range(count))
        return out

    def result(self, timeout: float | None = None) -> list[RecordMetadata]:
        error = self.exception(timeout)
        if error is not None:
            raise error
        out = [f.result() for f in self._futures]
        for r, first, count, ts in self._slices:
            base = r.base_offset + first if r.base_offset >= 0 else -1
            out.extend(RecordMetadata(r.topic, r.partition, base + i if base >= 0 else -1, ts)
                       for i in range(count))
        return out


# ------------------------------------------------------------------ batches


class ProducerBatch:
    __slots__ = (
        "attempts",
        "base_ts",
        "buffered",
        "count",
        "created",
        "deadline",
        "max_ts",
        "partition",
        "parts",
        "payload",
        "producer_epoch",
        "producer_id",
        "result",
        "retry_at",
        "sequence",
        "size",
        "topic",
    )

    def __init__(self, topic: str, partition: int, now: float, deadline: float) -> None:
        self.topic = topic
        self.partition = partition
        self.parts: list[bytes] = []
        self.count = 0
        self.size = 61
        self.base_ts = -1
        self.max_ts = -1
        self.created = now
        self.result = _BatchResult(topic, partition)
        self.attempts = 0
        self.sequence = -1
        # The producer id/epoch the sequence belongs to, fixed when the sequence is assigned: a
        # producer-id reset meanwhile must not pair an old sequence with a new id (issue 14 item 8).
        self.producer_id = -1
        self.producer_epoch = -1
        self.payload: bytes | None = None
        self.retry_at = 0.0
        self.deadline = deadline
        self.buffered = 0

    def append(self, key: bytes | None, value: bytes | None, headers: Sequence[Header], ts: int) -> FutureRecordMetadata:
        if self.count == 0:
            self.base_ts = ts
        if ts > self.max_ts:
            self.max_ts = ts
        body = encode_record_body(self.count, ts - self.base_ts, key, value, headers)
        self.parts.append(body)
        self.size += len(body)
        fut = FutureRecordMetadata(self.result, self.count, ts)
        self.count += 1
        return fut

    def append_section(self, section: bytes, count: int, ts: int) -> int:
        """Add ``count`` records already encoded (by ``encode_records``, offset deltas starting at the
        value returned, timestamp delta ``ts - base_ts``); returns that first offset delta."""
        first = self.count
        if first == 0:
            self.base_ts = ts
        if ts > self.max_ts:
            self.max_ts = ts
        self.parts.append(section)
        self.size += len(section)
        self.count += count
        return first

    def close(self, codec: int, producer_id: int, producer_epoch: int) -> bytes:
        """Encode once; a retry resends the same bytes (same sequence, same CRC)."""
        if self.sequence >= 0:
            producer_id, producer_epoch = self.producer_id, self.producer_epoch
        if self.payload is None:
            self.payload = build_batch(b"".join(self.parts), record_count=self.count, base_timestamp=self.base_ts,
                                       max_timestamp=self.max_ts, compression=codec, producer_id=producer_id,
                                       producer_epoch=producer_epoch, base_sequence=self.sequence)
            self.parts = []
        return self.payload


@dataclass
class _PartitionQueue:
    batches: deque[ProducerBatch]
    in_flight: int = 0
    next_sequence: int = 0
    retrying: bool = False


# ------------------------------------------------------------------ the producer


class Producer:
    def __init__(self, bootstrap_servers: str | Sequence[str] | None = None, *, acks: int | str = "all",
                 enable_idempotence: bool = True, linger_ms: int = 5, batch_size: int = 16384,
                 compression_type: str | None = None, max_in_flight: int = 5, retries: int = 2_147_483_647,
                 delivery_timeout_ms: int = 120_000, request_timeout_ms: int = 30_000,
                 retry_backoff_ms: int = 100, max_block_ms: int = 60_000, max_request_size: int = 1_048_576,
                 buffer_memory: int = 33_554_432, client_id: str = "minikafka-producer",
                 security_protocol: str = "PLAINTEXT", ssl_cafile: str | None = None,
                 ssl_certfile: str | None = None, ssl_keyfile: str | None = None,
                 sasl_mechanism: str = "SCRAM-SHA-256", sasl_plain_username: str | None = None,
                 sasl_plain_password: str | None = None, security: ChannelSecurity | None = None) -> None:
        self.bootstrap = parse_bootstrap(default_bootstrap() if bootstrap_servers is None else bootstrap_servers)
        self.security = client_security(security, security_protocol=security_protocol, ssl_cafile=ssl_cafile,
                                        ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile,
                                        sasl_mechanism=sasl_mechanism, sasl_plain_username=sasl_plain_username,
                                        sasl_plain_password=sasl_plain_password)
        acks_map: dict[Any, int] = {"all": -1, "-1": -1, -1: -1, 1: 1, "1": 1, 0: 0, "0": 0}
        if acks not in acks_map:
            raise errors.InvalidRequiredAcksError(f"acks must be 0, 1 or 'all', got {acks!r}")
        self.acks = acks_map[acks]
        if enable_idempotence and self.acks != -1:
            raise errors.InvalidRequestError("enable_idempotence requires acks='all' (as in Kafka)")
        if compression_type not in (None, "none", *CODEC_BY_NAME):
            raise errors.UnsupportedCompressionTypeError(f"compression_type {compression_type!r} is not supported")
        self.codec = CODEC_BY_NAME.get(compression_type or "none", 0)
        self.idempotent = enable_idempotence
        self.linger_s = linger_ms / 1000.0
        self.batch_size = batch_size
        self.max_in_flight = max(1, max_in_flight)
        self.retries = retries
        self.delivery_timeout_s = delivery_timeout_ms / 1000.0
        self.request_timeout_s = request_timeout_ms / 1000.0
        self.retry_backoff_s = retry_backoff_ms / 1000.0
        self.max_block_s = max_block_ms / 1000.0
        self.max_request_size = max_request_size
        self.buffer_memory = buffer_memory
        self.client_id = client_id
        self._buffered = 0  # bytes of records not yet acknowledged (bounded by buffer_memory)

        self._lock = threading.Lock()
        self._queues: dict[tuple[str, int], _PartitionQueue] = {}
        self._sticky = StickyPartitioner()
        self._view = ClusterView(self.bootstrap, timeout_s=self.request_timeout_s, security=self.security)
        self._view_lock = threading.Lock()
        self._partition_counts: dict[str, int] = {}
        self._closed = False
        # A non-retriable failure of InitProducerId (e.g. not authorized): every send fails with it.
        self._fatal: errors.KafkaError | None = None
        self._flushing = 0
        self._unfinished = 0  # batches created and not yet completed
        self._idle = threading.Condition(self._lock)
        self.producer_id = -1
        self.producer_epoch = -1
        self._resetting_pid = False

        self._loop = asyncio.new_event_loop()
        self._wake: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run_loop, name="minikafka-producer-sender", daemon=True)
        self._thread.start()
        self._started.wait()

    # ------------------------------------------------------------ caller's thread

    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int | None = None,
             headers: Sequence[tuple[str, bytes | None]] | Sequence[Header] | None = None,
             timestamp_ms: int | None = None) -> FutureRecordMetadata:
        if self._closed:
            raise errors.KafkaError("the producer is closed")
        if self._fatal is not None:
            raise self._fatal
        if value is not None and not isinstance(value, bytes | bytearray):
            raise TypeError("value must be bytes (serialize it first)")
        if key is not None and not isinstance(key, bytes | bytearray):
            raise TypeError("key must be bytes (serialize it first)")
        ts = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
        hdrs: Sequence[Header] = () if not headers else [h if isinstance(h, Header) else Header(h[0], h[1])
                                                         for h in headers]
        num = self._partition_counts.get(topic) or self._wait_for_partitions(topic)
        sticky = False
        if partition is None:
            if key is not None:
                partition = partition_for_key(bytes(key), num)
            else:
                partition = self._sticky.partition(topic, num)
                sticky = True
        elif not 0 <= partition < num:
            raise errors.UnknownTopicOrPartitionError(f"{topic} has partitions 0..{num - 1}, not {partition}")
        estimate = len(value or b"") + len(key or b"") + RECORD_OVERHEAD_ESTIMATE
        wake = False
        with self._lock:
            if self._buffered + estimate > self.buffer_memory and self._buffered:
                # Back-pressure, as Kafka's buffer.memory: block (up to max_block_ms) until acks free space.
                self._wakeup()
                if not self._idle.wait_for(lambda: self._buffered + estimate <= self.buffer_memory
                                           or not self._buffered, self.max_block_s):
                    raise errors.RequestTimedOutError(
                        f"buffer_memory={self.buffer_memory} stayed full for max_block_ms")
            self._buffered += estimate
            tp = (topic, partition)
            pq = self._queues.get(tp)
            if pq is None:
                pq = self._queues[tp] = _PartitionQueue(deque())
            batch = pq.batches[-1] if pq.batches and pq.batches[-1].payload is None else None
            if batch is not None and batch.count and batch.size + estimate > self.batch_size:
                wake = True  # that batch is full: the sender can take it now
                if sticky:
                    partition = self._sticky.on_new_batch(topic, num, partition)
                    tp = (topic, partition)
                    pq = self._queues.get(tp) or self._queues.setdefault(tp, _PartitionQueue(deque()))
                    batch = pq.batches[-1] if pq.batches and pq.batches[-1].payload is None else None
                    if batch is not None and batch.count and batch.size + estimate > self.batch_size:
                        batch = None
                else:
                    batch = None
            if batch is None:
                now = time.monotonic()
                batch = ProducerBatch(topic, partition, now, now + self.delivery_timeout_s)
                pq.batches.append(batch)
                self._unfinished += 1
                wake = True
            fut = batch.append(key, value, hdrs, ts)
            batch.buffered += estimate
        if wake:
            self._wakeup()
        return fut

    def send_batch(self, topic: str, values: Sequence[bytes | None], keys: Sequence[bytes | None] | None = None,
                   partition: int | None = None, timestamp_ms: int | None = None) -> BatchSendResult:
        """Send many values (with ``keys`` if given) in one call; one handle for them all.

        Theory of operation: the values are cut into slices that fit ``batch_size`` and each slice
        is encoded by one ``encode_records`` call (compiled) into the partition's open batch or a
        new one. From there the batches go through exactly the queue ``send()`` uses, so
        idempotent sequence numbers, retries, ordering, ``buffer_memory`` back-pressure (per slice)
        and ``delivery_timeout_ms`` are the same. Without ``partition`` and without keys the
        sticky partitioner picks the partition per slice; with keys and no partition each
        record goes through ``send()`` (its key picks its partition). All records share one
        timestamp (``timestamp_ms`` or now).

        Returns a :class:`BatchSendResult`: ``.result(timeout)`` is the list of ``RecordMetadata``
        in the order of ``values``.
        """
        handle = BatchSendResult()
        if keys is not None and len(keys) != len(values):
            raise ValueError("keys and values differ in length")
        ts = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
        if keys is not None and partition is None:
            handle._futures = [self.send(topic, v, k, timestamp_ms=ts) for k, v in zip(keys, values, strict=True)]
            return handle
        if self._closed:
            raise errors.KafkaError("the producer is closed")
        if self._fatal is not None:
            raise self._fatal
        for v in values:
            if v is not None and not isinstance(v, bytes | bytearray):
                raise TypeError("value must be bytes (serialize it first)")
        for k in keys or ():
            if k is not None and not isinstance(k, bytes | bytearray):
                raise TypeError("key must be bytes (serialize it first)")
        num = self._partition_counts.get(topic) or self._wait_for_partitions(topic)
        if partition is not None and not 0 <= partition < num:
            raise errors.UnknownTopicOrPartitionError(f"{topic} has partitions 0..{num - 1}, not {partition}")
        i, n = 0, len(values)
        while i < n:
            self._send_slice(topic, values, keys, partition, num, ts, i, handle)
            i += handle._slices[-1][2]
        return handle

    def _send_slice(self, topic: str, values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
                    partition: int | None, num: int, ts: int, start: int, handle: BatchSendResult) -> None:
        """Append the longest run of ``values[start:]`` that fits one batch (at least one record)."""
        sticky = partition is None
        with self._lock:
            tp_partition = self._sticky.partition(topic, num) if partition is None else partition
            tp = (topic, tp_partition)
            pq = self._queues.get(tp)
            if pq is None:
                pq = self._queues[tp] = _PartitionQueue(deque())
            batch = pq.batches[-1] if pq.batches and pq.batches[-1].payload is None else None
            room = self.batch_size - (batch.size if batch is not None else 61)
            if batch is not None and batch.count and room < RECORD_OVERHEAD_ESTIMATE + len(values[start] or b""):
                batch = None  # full: a new one (and, sticky, a new partition)
                room = self.batch_size - 61
                if sticky:
                    tp_partition = self._sticky.on_new_batch(topic, num, tp_partition)
                    tp = (topic, tp_partition)
                    pq = self._queues.get(tp) or self._queues.setdefault(tp, _PartitionQueue(deque()))
                    batch = pq.batches[-1] if pq.batches and pq.batches[-1].payload is None else None
                    if batch is not None and batch.count:
                        batch = None
            end, estimate, n = start, 0, len(values)
            while end < n:
                e = len(values[end] or b"") + (len(keys[end] or b"") if keys is not None else 0) \
                    + RECORD_OVERHEAD_ESTIMATE
                if end > start and estimate + e > room:
                    break
                estimate += e
                end += 1
            if self._buffered + estimate > self.buffer_memory and self._buffered:
                self._wakeup()
                if not self._idle.wait_for(lambda: self._buffered + estimate <= self.buffer_memory
                                           or not self._buffered, self.max_block_s):
                    raise errors.RequestTimedOutError(
                        f"buffer_memory={self.buffer_memory} stayed full for max_block_ms")
                # The queue may have moved on while we waited: re-check the open batch.
                batch = pq.batches[-1] if pq.batches and pq.batches[-1].payload is None else None
                if batch is not None and batch.count and batch.size + estimate > self.batch_size:
                    batch = None
            self._buffered += estimate
            if batch is None:
                now = time.monotonic()
                batch = ProducerBatch(topic, tp_partition, now, now + self.delivery_timeout_s)
                pq.batches.append(batch)
                self._unfinished += 1
            first = batch.count
            section = encode_records(values[start:end], None if keys is None else keys[start:end],
                                     ts - batch.base_ts if first else 0, first)
            batch.append_section(section, end - start, ts)
            batch.buffered += estimate
            handle._slices.append((batch.result, first, end - start, ts))
        self._wakeup()

    def _wait_for_partitions(self, topic: str) -> int:
        deadline = time.monotonic() + self.max_block_s
        while True:
            self._refresh_metadata_sync([topic])
            n = self._partition_counts.get(topic)
            if n:
                return n
            code = self._view.topic_errors.get(topic, 0)
            if code not in (0, pb.ErrorCode.LEADER_NOT_AVAILABLE, pb.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) \
                    or time.monotonic() >= deadline:
                raise errors.for_code(code or errors.UnknownTopicOrPartitionError.code)(
                    f"topic {topic!r} is not available (after {self.max_block_s:.0f}s)")
            time.sleep(min(self.retry_backoff_s, max(0.0, deadline - time.monotonic())))

    def _refresh_metadata_sync(self, topics: list[str] | None) -> None:
        with self._view_lock:
            self._view.refresh(topics, allow_auto_create=True)
            counts: dict[str, int] = {}
            for (t, _p) in self._view.partitions:
                counts[t] = counts.get(t, 0) + 1
            self._partition_counts.update(counts)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now and wait until every record is acknowledged or failed."""
        with self._lock:
            self._flushing += 1
        try:
            self._wakeup()
            with self._idle:
                if not self._idle.wait_for(lambda: self._unfinished == 0, timeout):
                    raise errors.RequestTimedOutError("flush did not finish in time")
        finally:
            with self._lock:
                self._flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._closed = True
            asyncio.run_coroutine_threadsafe(self._stop_loop(), self._loop)
            self._thread.join(timeout or 30)
            self._view.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def partitions_for(self, topic: str) -> list[int]:
        return list(range(self._partition_counts.get(topic) or self._wait_for_partitions(topic)))

    # ------------------------------------------------------------ sender thread

    def _wakeup(self) -> None:
        wake = self._wake
        if wake is not None and not wake.is_set():
            self._loop.call_soon_threadsafe(wake.set)

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._wake = asyncio.Event()
        self._channels: dict[str, tuple[grpc.aio.Channel, Any]] = {}
        self._node_in_flight: dict[int, int] = {}
        self._loop.create_task(self._sender())
        self._started.set()
        try:
            self._loop.run_forever()
        finally:
            for ch, _stub in self._channels.values():
                self._loop.run_until_complete(ch.close())
            self._loop.close()

    async def _stop_loop(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        asyncio.get_running_loop().stop()

    def _stub(self, address: str) -> Any:
        entry = self._channels.get(address)
        if entry is None:
            ch = self.security.aio_channel(address, options=CHANNEL_OPTIONS)
            entry = self._channels[address] = (ch, pb_grpc.KafkaApiStub(ch))  # type: ignore[no-untyped-call]
        return entry[1]

    async def _sender(self) -> None:
        assert self._wake is not None
        if self.idempotent:
            await self._init_producer_id()
        while True:
            try:
                timeout = self._drain_and_send()
            except Exception:
                log.exception("producer sender loop error")
                timeout = self.retry_backoff_s
            # A timer sets the same event rather than asyncio.wait_for: on Python 3.11, cancelling
            # wait_for just as it creates its inner task can leave the cancel hanging, and close()
            # then waited out its 30 s join timeout.
            timer = asyncio.get_running_loop().call_later(max(0.0, timeout), self._wake.set)
            try:
                await self._wake.wait()
            finally:
                timer.cancel()
            self._wake.clear()

    async def _reset_producer_id(self) -> None:
        with self._lock:
            self.producer_id = -1  # the drain assigns no new sequence until the new id is there
        try:
            await self._init_producer_id()
            with self._lock:
                for pq in self._queues.values():
                    pq.next_sequence = 0
        finally:
            self._resetting_pid = False
        if self._wake is not None:
            self._wake.set()

    async def _init_producer_id(self) -> None:
        while not self._closed:
            for address in list(self._view.brokers.values()) or self.bootstrap:
                try:
                    resp = await self._stub(address).InitProducerId(
                        pb.InitProducerIdRequest(producer_id=-1, producer_epoch=-1), timeout=self.request_timeout_s)
                except grpc.aio.AioRpcError:
                    continue
                if resp.error_code == pb.ErrorCode.NONE:
                    with self._lock:  # the drain reads them under the lock when it numbers a batch
                        self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
                    return
                err = errors.for_code(resp.error_code)(f"InitProducerId: {pb.ErrorCode.Name(resp.error_code)}")
                if not err.retriable:
                    # Kafka's producer: an authorization failure here is fatal - every send fails with it.
                    self._fail_all(err)
                    return
            await asyncio.sleep(self.retry_backoff_s)

    def _fail_all(self, error: errors.KafkaError) -> None:
        self._fatal = error
        with self._lock:
            doomed = [b for pq in self._queues.values() for b in pq.batches]
            for pq in self._queues.values():
                pq.batches.clear()
        for b in doomed:
            self._finish(b, -1, error)

    def _drain_and_send(self) -> float:
        """Take what is ready, send it; returns how long to sleep before looking again."""
        now = time.monotonic()
        next_check = 1.0
        by_leader: dict[int, list[ProducerBatch]] = {}
        need_metadata: set[str] = set()
        expired: list[ProducerBatch] = []
        with self._lock:
            flushing = self._flushing > 0 or self._closed
            for tp, pq in self._queues.items():
                if not pq.batches:
                    continue
                batch = pq.batches[0]
                if batch.deadline < now and batch.payload is None and pq.in_flight == 0:
                    expired.append(pq.batches.popleft())
                    continue
                limit = 1 if (pq.retrying or not self.idempotent) else self.max_in_flight
                if pq.in_flight >= limit or batch.retry_at > now:
                    if batch.retry_at > now:
                        next_check = min(next_check, batch.retry_at - now)
                    continue
                full = len(pq.batches) > 1 or batch.size >= self.batch_size
                ready_at = batch.created + self.linger_s
                if not (full or flushing or ready_at <= now):
                    next_check = min(next_check, ready_at - now)
                    continue
                pl = self._view.partitions.get(tp)
                if pl is None or pl.leader < 0 or pl.leader not in self._view.brokers:
                    need_metadata.add(tp[0])
                    next_check = min(next_check, self.retry_backoff_s)
                    continue
                if self.idempotent and self.producer_id < 0:
                    next_check = min(next_check, self.retry_backoff_s)
                    continue
                pq.batches.popleft()
                if batch.sequence < 0 and self.idempotent:
                    batch.producer_id, batch.producer_epoch = self.producer_id, self.producer_epoch
                    batch.sequence = pq.next_sequence
                    pq.next_sequence = (pq.next_sequence + batch.count) & 0x7FFFFFFF
                pq.in_flight += 1
                by_leader.setdefault(pl.leader, []).append(batch)
        for batch in expired:
            self._finish(batch, -1, errors.RequestTimedOutError(
                f"{batch.topic}-{batch.partition}: not delivered within delivery_timeout_ms"))
        if need_metadata:
            self._loop.create_task(self._refresh_metadata(sorted(need_metadata)))
        for leader, batches in by_leader.items():
            self._loop.create_task(self._send_to_leader(leader, batches))
        return max(0.0005, next_check)

    async def _refresh_metadata(self, topics: list[str]) -> None:
        try:
            await asyncio.to_thread(self._refresh_metadata_sync, topics)
        except errors.KafkaError as e:
            log.debug("metadata refresh failed: %s", e)
        if self._wake is not None:
            self._wake.set()

    async def _send_to_leader(self, leader: int, batches: list[ProducerBatch]) -> None:
        # Several requests if the batches exceed max_request_size; each holds one batch per partition.
        address = self._view.brokers.get(leader)
        chunks: list[list[ProducerBatch]] = [[]]
        size = 0
        for b in batches:
            payload = b.close(self.codec, self.producer_id, self.producer_epoch)
            if chunks[-1] and size + len(payload) > self.max_request_size:
                chunks.append([])
                size = 0
            chunks[-1].append(b)
            size += len(payload)
        await asyncio.gather(*(self._send_request(address, chunk) for chunk in chunks if chunk))

    async def _send_request(self, address: str | None, batches: list[ProducerBatch]) -> None:
        req = pb.ProduceRequest(acks=self.acks, timeout_ms=int(self.request_timeout_s * 1000))
        by_topic: dict[str, pb.ProduceTopicData] = {}
        for b in batches:
            b.attempts += 1
            td = by_topic.get(b.topic)
            if td is None:
                td = by_topic[b.topic] = req.topics.add(name=b.topic)
            td.partitions.add(partition=b.partition, records=b.payload)
        try:
            if address is None:
                raise errors.LeaderNotAvailableError("leader address unknown")
            call = self._stub(address).Produce(req, timeout=self.request_timeout_s + 5)
            if self.acks == 0:
                # acks=0: done once handed to the network; the answer (if any) is ignored.
                for b in batches:
                    self._finish(b, -1, None)
                try:
                    await call
                except grpc.aio.AioRpcError:
                    pass
                return
            resp = await call
        except (grpc.aio.AioRpcError, errors.KafkaError) as e:
            err = e if isinstance(e, errors.KafkaError) else rpc_error(e, address or "?")
            for b in batches:
                self._retry_or_fail(b, err)
            return
        results = {(t.name, p.partition): p for t in resp.topics for p in t.partitions}
        for b in batches:
            pr = results.get((b.topic, b.partition))
            if pr is None:
                self._retry_or_fail(b, errors.UnknownServerError("no answer for this partition"))
            elif pr.error_code == pb.ErrorCode.NONE:
                self._finish(b, pr.base_offset if self.acks != 0 else -1, None)
            else:
                self._retry_or_fail(b, errors.for_code(pr.error_code)(pr.error_message))

    def _retry_or_fail(self, batch: ProducerBatch, error: errors.KafkaError) -> None:
        now = time.monotonic()
        retriable = error.retriable or (isinstance(error, errors.OutOfOrderSequenceNumberError) and self.idempotent)
        if error.invalid_metadata or isinstance(error, errors.NetworkError):
            self._loop.create_task(self._refresh_metadata([batch.topic]))
        if not retriable or batch.attempts > self.retries or now > batch.deadline:
            self._finish(batch, -1, error)
            return
        log.debug("retrying %s-%d (sequence %d) after %s", batch.topic, batch.partition, batch.sequence, error)
        with self._lock:
            pq = self._queues[(batch.topic, batch.partition)]
            pq.in_flight -= 1
            pq.retrying = True
            batch.retry_at = now + self.retry_backoff_s
            # Back to the front, in sequence order (later in-flight batches will follow it there).
            items = list(pq.batches)
            items.append(batch)
            retried = sorted((b for b in items if b.attempts > 0), key=lambda b: (b.sequence, b.created))
            fresh = [b for b in items if b.attempts == 0]
            pq.batches = deque(retried + fresh)
        if self._wake is not None:
            self._wake.set()

    def _finish(self, batch: ProducerBatch, base_offset: int, error: BaseException | None) -> None:
        if error is not None and self.idempotent and batch.sequence >= 0 and not self._resetting_pid:
            # The sequence of a batch that was given up is a gap the leader would refuse forever:
            # start again with a new producer id and fresh sequences (Kafka's idempotent producer
            # resets its producer id after an unresolved sequence the same way).
            self._resetting_pid = True
            self._loop.create_task(self._reset_producer_id())
        with self._lock:
            pq = self._queues.get((batch.topic, batch.partition))
            if pq is not None and batch.attempts > 0:
                pq.in_flight -= 1
                if pq.retrying and pq.in_flight == 0 and not any(b.attempts for b in pq.batches):
                    pq.retrying = False
            self._unfinished -= 1
            self._buffered -= batch.buffered
            self._idle.notify_all()
        batch.result.complete(base_offset, error)
        if self._wake is not None:
            self._wake.set()
