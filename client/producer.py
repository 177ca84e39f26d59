"""The producer: batching, pipelined, idempotent (Kafka's KafkaProducer and Sender).

Theory of operation
-------------------
Kafka's split: a pure core and a thin shell around it.

* :mod:`client.accumulator` (``RecordAccumulator``) holds every batching decision: which batch
  a record goes into, which batches are ready (``linger_ms``, ``batch_size``, flush), retry
  back-off, the in-flight limits and idempotent sequence numbering. No I/O, no threads.
* ``send()`` runs on the caller's thread: it picks the partition (S5.3) and, under the
  producer's one lock, appends the record to the accumulator, which encodes it straight into the
  open batch of that partition and returns a future sharing the batch's result. It wakes the
  sender only when the accumulator says a batch became ready before the sender's next drain.
* The sender thread runs an asyncio loop: ``drain`` (under the lock), send what it returned -
  one Produce request per leader holding one batch per partition, several in flight per broker
  - and feed each outcome back (``complete`` / ``reenqueue``), then sleep until the next ready
  time the drain reported or until woken (a ready append, a completion, a flush).

Transport: Produce requests go to each leader over its Kafka listener when the metadata offers
one of the client's security protocol, PLAINTEXT or SSL (``client.kafka_produce``: a plain
socket costs a hop ~30 us where a grpc.aio stream costs ~0.2 ms), else over one gRPC
ProduceStream per broker (``client.produce_stream``), else unary Produce calls (an older
broker). Both keep several requests in flight and answer them in order. The connection is
opened in the background, so the first requests go over gRPC; a request moves onto it only
when none of its partitions has a request in flight over gRPC, so a partition's requests never
race each other on two connections. A connection that fails, or cannot be opened, sends that
broker's traffic back to gRPC for ``KAFKA_PRODUCE_RETRY_AFTER_S`` (its unanswered batches are
retried as after any failed request).

Transactions (KIP-98): with ``transactional_id`` the producer is idempotent and transactional
(``client.transaction_manager``): ``init_transactions`` gets the producer id and epoch from the
id's transaction coordinator; within ``begin_transaction`` ... ``commit_transaction`` /
``abort_transaction`` the partitions records go to (the sticky partitioner moves on from full
batches as outside transactions) are added to the transaction by the sender, one AddPartitionsToTxn
per batch of new partitions, before their first batch is sent; every batch carries the
transactional bit; an abortable error fails the transaction's unsent batches and leaves
``abort_transaction`` (with KIP-360's epoch bump when needed) as the way on;
``send_offsets_to_transaction`` commits a group's offsets with the transaction.

Ordering and idempotence (KIP-98): with ``enable_idempotence`` the producer gets a producer id
and epoch (InitProducerId) and the accumulator numbers each partition's batches with sequences
when they are first drained. A retried batch keeps its sequence, so the leader answers a
duplicate with the original offset and refuses a gap; batches are always resent in sequence
order, one at a time per partition until the retries are through. Without idempotence only one
batch per partition is in flight, so retries never reorder records either.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Awaitable, Sequence
from typing import Any

import grpc
import uvloop

from client.accumulator import (
    RECORD_OVERHEAD_ESTIMATE,
    AccumulatorConfig,
    ProducerBatch,
    RecordAccumulator,
)
from client.connection import ClusterView, parse_bootstrap, rpc_error
from client.discovery import default_bootstrap
from client.futures import BatchResult, BatchSendResult, FutureRecordMetadata, RecordMetadata
from client.kafka_produce import KafkaProduceConnection, KafkaProduceUnreachable
from client.partitioner import StickyPartitioner, partition_for_key
from client.produce_stream import ProduceStream, is_unimplemented
from client.transaction_manager import (
    FATAL,
    IN_TRANSACTION,
    TXN_FATAL_ERRORS,
    TransactionAbortedError,
    TransactionManager,
)
from proto import errors
from proto import minikafka_pb2 as pb
from proto import minikafka_pb2_grpc as pb_grpc
from proto.grpc_options import CHANNEL_OPTIONS
from proto.record_batch import CODEC_BY_NAME, Header
from proto.transport import PLAINTEXT, SSL, ChannelSecurity, client_security

log = logging.getLogger(__name__)

# Re-exported: the producer's public value types and the pieces tests build batches with.
__all__ = ["RECORD_OVERHEAD_ESTIMATE", "BatchResult", "BatchSendResult", "FutureRecordMetadata", "Producer",
           "ProducerBatch", "RecordMetadata"]
_BatchResult = BatchResult


# How long a closing producer's loop keeps running for gRPC's last events (see _run_loop).
GRPC_LATE_EVENTS_S = 0.02
# How long a broker that refused a ProduceStream (no room) gets unary Produce calls before another try.
STREAM_RETRY_AFTER_S = 60
# How long a broker whose Kafka listener could not be reached, or whose connection failed, gets its
# Produce requests over gRPC before the producer connects to the Kafka listener again.
KAFKA_PRODUCE_RETRY_AFTER_S = 5.0
# At most one warning per partition and error in this long while retrying (see _retry_or_fail).
RETRY_WARNING_INTERVAL_MS = 10_000
# A broker's pipe for Produce requests: both send in order and answer in order (None: unary calls).
ProduceTransport = ProduceStream | KafkaProduceConnection


def _now_ms() -> float:
    return time.monotonic() * 1000.0


def wall_clock_offset_ms() -> float:
    """Wall-clock ms minus monotonic ms now: monotonic ms + this = the wall clock's ms."""
    return time.time() * 1000.0 - time.monotonic() * 1000.0


# ------------------------------------------------------------------ the producer


class Producer:
    # A transactional producer's state (set by __init__ when a transactional_id is given).
    _txn: TransactionManager | None = None

    def __init__(self, bootstrap_servers: str | Sequence[str] | None = None, *, acks: int | str = "all",
                 enable_idempotence: bool = True, linger_ms: int = 5, batch_size: int = 16384,
                 compression_type: str | None = None, max_in_flight: int = 5, retries: int = 2_147_483_647,
                 delivery_timeout_ms: int = 120_000, request_timeout_ms: int = 30_000,
                 retry_backoff_ms: int = 100, max_block_ms: int = 60_000, max_request_size: int = 1_048_576,
                 buffer_memory: int = 33_554_432, client_id: str = "minikafka-producer",
                 security_protocol: str = "PLAINTEXT", ssl_cafile: str | None = None,
                 ssl_certfile: str | None = None, ssl_keyfile: str | None = None,
                 sasl_mechanism: str = "SCRAM-SHA-256", sasl_plain_username: str | None = None,
                 sasl_plain_password: str | None = None, security: ChannelSecurity | None = None,
                 kafka_listener: bool = True, transactional_id: str | None = None,
                 transaction_timeout_ms: int = 60_000) -> None:
        """``kafka_listener=False`` keeps every Produce request on gRPC (see Transport above).
        ``transactional_id``: a transactional producer (Transactions above; idempotence implied)."""
        self.bootstrap = parse_bootstrap(default_bootstrap() if bootstrap_servers is None else bootstrap_servers)
        self.security = client_security(security, security_protocol=security_protocol, ssl_cafile=ssl_cafile,
                                        ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile,
                                        sasl_mechanism=sasl_mechanism, sasl_plain_username=sasl_plain_username,
                                        sasl_plain_password=sasl_plain_password)
        acks_map: dict[Any, int] = {"all": -1, "-1": -1, -1: -1, 1: 1, "1": 1, 0: 0, "0": 0}
        if acks not in acks_map:
            raise errors.InvalidRequiredAcksError(f"acks must be 0, 1 or 'all', got {acks!r}")
        self.acks = acks_map[acks]
        if transactional_id is not None and not enable_idempotence:
            raise errors.InvalidRequestError("a transactional producer is idempotent (as in Kafka)")
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
        self._retry_warned: dict[tuple[str, int, str], float] = {}  # (topic, partition, error) -> when warned
        self.delivery_timeout_s = delivery_timeout_ms / 1000.0
        self.request_timeout_s = request_timeout_ms / 1000.0
        self.retry_backoff_s = retry_backoff_ms / 1000.0
        self.max_block_s = max_block_ms / 1000.0
        self.max_request_size = max_request_size
        self.buffer_memory = buffer_memory
        self.client_id = client_id
        # Produce over the brokers' Kafka listeners: only where the client speaks the protocol's
        # security itself (no SASL on a plain socket).
        self.kafka_listener = kafka_listener and self.security.security_protocol.upper() in (PLAINTEXT, SSL)

        self._lock = threading.Lock()
        self._accumulator = RecordAccumulator(AccumulatorConfig(
            batch_size=batch_size, linger_ms=float(linger_ms), retry_backoff_ms=float(retry_backoff_ms),
            delivery_timeout_ms=float(delivery_timeout_ms), max_in_flight=self.max_in_flight,
            idempotent=enable_idempotence, retries=retries))
        self._sticky = StickyPartitioner()
        self._wall_offset_ms = wall_clock_offset_ms()  # see send(); refreshed by the sender
        self._view = ClusterView(self.bootstrap, timeout_s=self.request_timeout_s, security=self.security)
        self._view_lock = threading.Lock()
        self._partition_counts: dict[str, int] = {}
        self._closed = False
        # A non-retriable failure of InitProducerId (e.g. not authorized): every send fails with it.
        self._fatal: errors.KafkaError | None = None
        self._idle = threading.Condition(self._lock)
        self._resetting_pid = False
        self._adding: asyncio.Task[None] | None = None  # the AddPartitionsToTxn in flight (transactions)
        # A transactional producer (KIP-98): its transaction's state and coordinator requests.
        self._txn: TransactionManager | None = None if transactional_id is None else TransactionManager(
            transactional_id, transaction_timeout_ms, self._view, self._view_lock, self.retry_backoff_s,
            self.request_timeout_s)

        # uvloop, as the brokers: measured here, 16% less producer CPU at 20k records/s and p99
        # 2.6-2.7 ms instead of 3.0 at that rate (bench/replication_bench.py --rate 20000).
        self._loop = uvloop.new_event_loop()
        self._wake: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run_loop, name="minikafka-producer-sender", daemon=True)
        self._thread.start()
        self._started.wait()

    @property
    def producer_id(self) -> int:
        return self._accumulator.producer_id

    @property
    def producer_epoch(self) -> int:
        return self._accumulator.producer_epoch

    # ------------------------------------------------------------ caller's thread

    def _wait_for_buffer(self, estimate: int) -> None:
        """Back-pressure, as Kafka's buffer.memory: block (up to max_block_ms, the lock held by the
        caller and released while waiting) until acknowledgements free space."""
        acc = self._accumulator
        self._wakeup()
        if not self._idle.wait_for(lambda: acc.buffered + estimate <= self.buffer_memory or not acc.buffered,
                                   self.max_block_s):
            raise errors.RequestTimedOutError(f"buffer_memory={self.buffer_memory} stayed full for max_block_ms")

    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int | None = None,
             headers: Sequence[tuple[str, bytes | None]] | Sequence[Header] | None = None,
             timestamp_ms: int | None = None) -> FutureRecordMetadata:
        if self._closed:
            raise errors.KafkaError("the producer is closed")
        if self._fatal is not None:
            raise self._fatal
        txn = self._txn
        if txn is not None:
            txn.check_can_send()
        # type() first, then isinstance with a tuple (not a union): each measurably cheaper per record.
        if value is not None and type(value) is not bytes and not isinstance(value, (bytes, bytearray)):
            raise TypeError("value must be bytes (serialize it first)")
        if key is not None and not isinstance(key, (bytes, bytearray)):
            raise TypeError("key must be bytes (serialize it first)")
        hdrs: Sequence[Header] = () if not headers else [h if isinstance(h, Header) else Header(h[0], h[1])
                                                         for h in headers]
        num = self._partition_counts.get(topic) or self._wait_for_partitions(topic)
        sticky = False
        if partition is None:
            if key is not None:
                partition = partition_for_key(bytes(key), num)
            else:
                partition = self._sticky.current.get(topic, num)  # num: none yet
                if partition >= num:
                    partition = self._sticky.partition(topic, num)
                sticky = True
        elif not 0 <= partition < num:
            raise errors.UnknownTopicOrPartitionError(f"{topic} has partitions 0..{num - 1}, not {partition}")
        estimate = (len(value) if value else 0) + (len(key) if key else 0) + RECORD_OVERHEAD_ESTIMATE
        acc = self._accumulator
        lock = self._lock
        lock.acquire()  # the one lock round trip per record (acquire/release: half a with's cost)
        try:
            if acc.buffered + estimate > self.buffer_memory and acc.buffered:
                self._wait_for_buffer(estimate)
            now_ms = time.monotonic() * 1000.0
            # The record's CreateTime from the monotonic clock and the wall clock's offset, which the
            # sender re-reads on every drain (at least once a second): one clock read per record
            # instead of two (time.time() costs 2.5x time.monotonic() on this VM); a step of the
            # wall clock shows in timestamps within a second, as it would in a linger. A float:
            # the RecordsBuilder truncates it to whole ms (no int() call per record).
            ts = timestamp_ms if timestamp_ms is not None else now_ms + self._wall_offset_ms
            if txn is not None:  # noted for AddPartitionsToTxn (sent by the sender, batched)
                txn.maybe_add_partition(topic, partition)
            fut, wake = acc.append(topic, partition, key, value, hdrs, ts, estimate, now_ms, sticky)
            if fut is None:  # the sticky partition's batch is full (and now sealed): start one elsewhere
                partition = self._sticky.on_new_batch(topic, num, partition)
                if txn is not None:
                    txn.maybe_add_partition(topic, partition)
                fut, wake_new = acc.append(topic, partition, key, value, hdrs, ts, estimate, now_ms)
                wake = wake or wake_new
        finally:
            lock.release()
        if wake:
            self._wakeup()
        assert fut is not None
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
        if self._txn is not None:
            self._txn.check_can_send()
        i, n = 0, len(values)
        while i < n:  # each slice takes at least one value
            i = self._send_slice(topic, values, keys, partition, num, ts, i, handle)
        return handle

    def _send_slice(self, topic: str, values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
                    partition: int | None, num: int, ts: int, start: int, handle: BatchSendResult) -> int:
        """Append the longest run of ``values[start:]`` that fits one batch (at least one record);
        returns where the next slice starts."""
        acc = self._accumulator
        wake = False
        with self._lock:
            p = self._sticky.partition(topic, num) if partition is None else partition
            now_ms = _now_ms()
            fit = acc.fit(topic, p, values, keys, start)
            if fit.open_batch_full and partition is None:
                wake = acc.seal(topic, p, now_ms)  # the sticky partitioner moves on from a full batch
                p = self._sticky.on_new_batch(topic, num, p)
                fit = acc.fit(topic, p, values, keys, start)
            if acc.buffered + fit.estimate > self.buffer_memory and acc.buffered:
                self._wait_for_buffer(fit.estimate)  # append_values re-checks the open batch after it
                now_ms = _now_ms()
            if self._txn is not None:
                self._txn.maybe_add_partition(topic, p)
            result, first, ready = acc.append_values(topic, p, values, keys, start, fit, ts, now_ms)
        handle._slices.append((result, first, fit.end - start, ts))
        if wake or ready:
            self._wakeup()
        return fit.end

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
        acc = self._accumulator
        with self._lock:
            acc.begin_flush()
        try:
            self._wakeup()
            with self._idle:
                if not self._idle.wait_for(lambda: acc.unfinished == 0, timeout):
                    raise errors.RequestTimedOutError("flush did not finish in time")
        finally:
            with self._lock:
                acc.end_flush()

    # ------------------------------------------------------------ transactions (KIP-98; kafka-python's names)

    def _transaction(self) -> TransactionManager:
        if self._txn is None:
            raise errors.InvalidTxnStateError("not a transactional producer: give it a transactional_id")
        return self._txn

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register the transactional id with its coordinator: a producer id and a new epoch, which
        fences every earlier producer of the id (their open transaction is aborted)."""
        pid, epoch = self._transaction().init_transactions(self.max_block_s if timeout is None else timeout)
        with self._lock:
            self._accumulator.set_producer_id(pid, epoch)
        self._wakeup()

    def begin_transaction(self) -> None:
        self._transaction().begin_transaction()

    def send_offsets_to_transaction(self, offsets: Any, group: Any, timeout: float | None = None) -> None:
        """Commit a consumer group's offsets with the transaction (consume-transform-produce):
        ``offsets`` {(topic, partition): next offset to consume} (or confluent-kafka's
        TopicPartition list); ``group`` the group id or the consumer's group metadata."""
        self._transaction().send_offsets_to_transaction(offsets, group,
                                                        self.max_block_s if timeout is None else timeout)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Deliver every record of the transaction, then commit it (EndTxn). A failed record makes
        it abortable only (``client.transaction_manager.AbortableError``)."""
        txn = self._transaction()
        limit = self.max_block_s if timeout is None else timeout
        self.flush(limit)
        txn.end_transaction(True, limit)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Fail the transaction's records not yet sent (as Kafka's producer: TransactionAbortedError),
        wait for those in flight (their outcome no longer matters), then abort (EndTxn). Works after
        an abortable error; if a failed batch had a sequence number, the epoch is bumped (KIP-360)
        and the next transaction starts its sequences at 0."""
        txn = self._transaction()
        limit = self.max_block_s if timeout is None else timeout
        if txn.state == IN_TRANSACTION and txn.fatal is None:
            txn.aborting = True
            self._wakeup()
        self.flush(limit)
        txn.end_transaction(False, limit)
        if txn.epoch_bump_required:
            pid, epoch = txn.bump_epoch(limit)
            with self._lock:
                self._accumulator.set_producer_id(pid, epoch)
            log.info("transactional id %s: epoch bumped to %d after a failed batch (KIP-360)",
                     txn.transactional_id, epoch)

    def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._closed = True
            with self._lock:
                self._accumulator.closing = True
            asyncio.run_coroutine_threadsafe(self._stop_loop(), self._loop)
            self._thread.join(timeout or 30)
            self._view.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def partitions_for(self, topic: str) -> list[int]:
        return list(range(self._partition_counts.get(topic) or self._wait_for_partitions(topic)))

    # ------------------------------------------------------------ sender thread (Kafka's Sender)

    def _wakeup(self) -> None:
        """From any thread: make the sender drain now (a no-op if it is already woken)."""
        wake = self._wake
        if wake is not None and not wake.is_set():
            self._loop.call_soon_threadsafe(wake.set)

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._wake = asyncio.Event()
        self._channels: dict[str, tuple[grpc.aio.Channel, Any]] = {}
        # Produce requests go on one ProduceStream per broker (half a unary call's cost);
        # brokers of an older version, found out by UNIMPLEMENTED, get unary calls.
        self._produce_streams: dict[str, ProduceStream] = {}
        # address -> until when (monotonic s) it gets unary calls: for ever for a broker without
        # ProduceStream, STREAM_RETRY_AFTER_S for one with no room for another stream.
        self._unary_produce: dict[str, float] = {}
        # address -> its Kafka listener connection (client.kafka_produce), once open; the addresses
        # being connected; address -> until when (monotonic s) it is not tried again.
        self._kafka_conns: dict[str, KafkaProduceConnection] = {}
        self._kafka_connecting: set[str] = set()
        self._kafka_retry_at: dict[str, float] = {}
        # (topic, partition) -> its requests in flight over gRPC (ProduceStream or unary).
        self._grpc_in_flight: dict[tuple[str, int], int] = {}
        # Every request's answer task (acks=0 requests included: done when handed over and answered).
        self._requests: set[asyncio.Task[None]] = set()
        self._loop.create_task(self._sender())
        self._started.set()
        try:
            self._loop.run_forever()
        finally:
            for ch, _stub in self._channels.values():
                self._loop.run_until_complete(ch.close())
            # gRPC hands a cancelled call's last events to this loop a moment after the cancel; a
            # loop closed before they arrive makes gRPC's shared poller fail on it (and on the
            # events of other producers' loops it was handling at the time).
            self._loop.run_until_complete(asyncio.sleep(GRPC_LATE_EVENTS_S))
            self._loop.close()

    async def _stop_loop(self) -> None:
        if self.acks == 0 and self._requests:
            # acks=0 batches were done once sent, so flush() did not wait for them: a request still
            # queued for its stream would be dropped by the stream's close. Kafka's close() waits
            # for the requests sent too (bounded: each ends with its answer or its call's failure).
            await asyncio.wait(list(self._requests), timeout=self.request_timeout_s)
        # The streams first, while their tasks still run: each has a read pending in gRPC, which
        # must finish through this loop - left to the channel's close, it would finish after the
        # loop closed (gRPC's poller then fails on the closed loop, and may hold other events).
        for stream in list(self._produce_streams.values()):
            await stream.close()
        for conn in list(self._kafka_conns.values()):
            await conn.close()
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
        if self.idempotent and self._txn is None:  # a transactional producer's comes from init_transactions
            await self._init_producer_id()
        loop = asyncio.get_running_loop()
        while True:
            # Cleared before the drain, so a wake-up that arrives while it runs is not lost.
            self._wake.clear()
            try:
                timeout = self._drain_and_send()
            except Exception:
                log.exception("producer sender loop error")
                timeout = max(0.001, self.retry_backoff_s)
            if self._wake.is_set():  # woken while draining: let the sends just scheduled start first
                await asyncio.sleep(0)
                continue
            # A timer sets the same event rather than asyncio.wait_for: on Python 3.11, cancelling
            # wait_for just as it creates its inner task can leave the cancel hanging, and close()
            # then waited out its 30 s join timeout.
            timer = loop.call_later(timeout, self._wake.set)
            try:
                await self._wake.wait()
            finally:
                timer.cancel()

    async def _reset_producer_id(self) -> None:
        with self._lock:
            self._accumulator.set_producer_id(-1, -1)  # the drain numbers no batch until the new id is there
        try:
            await self._init_producer_id()
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
                        self._accumulator.set_producer_id(resp.producer_id, resp.producer_epoch)
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
            doomed = self._accumulator.abort_undrained()
        for b in doomed:
            self._finish(b, -1, error)

    def _leader_of(self, topic: str, partition: int) -> int:
        pl = self._view.partitions.get((topic, partition))
        if pl is None or pl.leader < 0 or pl.leader not in self._view.brokers:
            return -1
        return int(pl.leader)

    def _drain_and_send(self) -> float:
        """Take what is ready, send it; returns how long (s) to sleep before draining again."""
        now_ms = _now_ms()
        self._wall_offset_ms = wall_clock_offset_ms()  # send()'s timestamps follow the wall clock
        txn = self._txn
        if txn is not None:
            self._maybe_fail_txn_batches(txn)
        with self._lock:
            drained = self._accumulator.drain(now_ms, self._leader_of, None if txn is None else txn.may_send)
        if txn is not None and drained.held and txn.new_partitions and (self._adding is None or self._adding.done()):
            # One AddPartitionsToTxn for every partition noted so far, once one of them has a batch
            # ready (after linger_ms, full, or a flush): partitions written together are added together.
            self._adding = self._loop.create_task(self._add_partitions(txn))
        for batch in drained.expired:
            self._finish(batch, -1, errors.RequestTimedOutError(
                f"{batch.topic}-{batch.partition}: not delivered within delivery_timeout_ms"))
        if drained.unknown_leader_topics:
            self._loop.create_task(self._refresh_metadata(sorted(drained.unknown_leader_topics)))
        for leader, batches in drained.ready.items():
            self._send_to_leader(leader, batches)
        # 0 when more is ready: the loop first runs the sends just scheduled, then drains again.
        return max(0.0, (drained.next_ready_ms - now_ms) / 1000.0)

    def _maybe_fail_txn_batches(self, txn: TransactionManager) -> None:
        """Kafka's Sender with an abortable error or an abort under way: the batches not yet sent
        fail (the transaction will not commit); a fatal error fails everything, for good."""
        if txn.fatal is not None:
            if self._fatal is None:
                self._fail_all(txn.fatal)
            return
        error: BaseException | None = txn.error
        if error is None and txn.aborting:
            error = TransactionAbortedError("the transaction was aborted")
        if error is None:
            return
        with self._lock:
            doomed = self._accumulator.abort_undrained()
        for b in doomed:
            self._finish(b, -1, error)

    async def _add_partitions(self, txn: TransactionManager) -> None:
        try:
            await asyncio.to_thread(txn.add_new_partitions, self.max_block_s)
        except Exception:
            log.exception("AddPartitionsToTxn failed")
        if self._wake is not None:
            self._wake.set()

    async def _refresh_metadata(self, topics: list[str]) -> None:
        if self._closed:
            # A send failing because close() is tearing the streams down asks for a refresh: nothing
            # will use it, and the loop's executor may already be shut down ("cannot schedule new
            # futures after shutdown", printed as a task exception nobody retrieved).
            return
        try:
            await asyncio.to_thread(self._refresh_metadata_sync, topics)
        except errors.KafkaError as e:
            log.debug("metadata refresh failed: %s", e)
        if self._wake is not None:
            self._wake.set()

    def _send_to_leader(self, leader: int, batches: list[ProducerBatch]) -> None:
        """Close ``batches`` and hand them to ``leader``'s stream now, in this loop iteration: a task
        per leader (and gather's per request) cost the write a loop iteration each, on every request."""
        # Several requests if the batches exceed max_request_size; each holds one batch per partition.
        address = self._view.brokers.get(leader)
        chunks: list[list[ProducerBatch]] = [[]]
        size = 0
        pid, epoch = self.producer_id, self.producer_epoch
        transactional = self._txn is not None
        for b in batches:
            payload = b.close(self.codec, pid, epoch, transactional)
            if chunks[-1] and size + len(payload) > self.max_request_size:
                chunks.append([])
                size = 0
            chunks[-1].append(b)
            size += len(payload)
        for chunk in chunks:
            if chunk:
                self._send_request(leader, address, chunk)

    def _send_request(self, leader: int, address: str | None, batches: list[ProducerBatch]) -> None:
        """Send one request (in order on the broker's stream); a task waits for its answer."""
        req = pb.ProduceRequest(acks=self.acks, timeout_ms=int(self.request_timeout_s * 1000),
                                # the leader verifies a transaction's first batch with its coordinator (KIP-890)
                                transactional_id=self._txn.transactional_id if self._txn is not None else "")
        by_topic: dict[str, pb.ProduceTopicData] = {}
        for b in batches:
            td = by_topic.get(b.topic)
            if td is None:
                td = by_topic[b.topic] = req.topics.add(name=b.topic)
            td.partitions.add(partition=b.partition, records=b.payload)
        try:
            if address is None:
                raise errors.LeaderNotAvailableError("leader address unknown")
            stream: ProduceTransport | None = self._kafka_connection(leader, address, batches)
            over_grpc = stream is None
            if over_grpc:
                stream = self._produce_stream(address) if self._streams_to(address) else None
            if stream is not None:
                call: Awaitable[pb.ProduceResponse] = stream.send(req)
            else:
                call = self._stub(address).Produce(req, timeout=self.request_timeout_s + 5)
        except (grpc.aio.AioRpcError, errors.KafkaError, ConnectionError) as e:
            self._request_failed(address, batches, e)
            return
        except Exception as e:  # a bug: these batches are drained, so they must be retried or failed here
            log.exception("%s: sending a Produce request failed unexpectedly", address)
            self._request_failed(address, batches, errors.NetworkError(f"{address}: {e!r}"))
            return
        if over_grpc:
            for b in batches:
                tp = (b.topic, b.partition)
                self._grpc_in_flight[tp] = self._grpc_in_flight.get(tp, 0) + 1
        if self.acks == 0:
            # acks=0: done once handed to the network; the answer (if any) is ignored.
            for b in batches:
                self._finish(b, -1, None)
        task = self._loop.create_task(self._complete_request(address, batches, req, call, stream, over_grpc))
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    async def _complete_request(self, address: str, batches: list[ProducerBatch], req: pb.ProduceRequest,
                                call: Awaitable[pb.ProduceResponse],
                                stream: ProduceTransport | None, over_grpc: bool) -> None:
        try:
            try:
                if self.acks == 0:
                    try:
                        await call
                    except (grpc.aio.AioRpcError, ConnectionError):
                        pass
                    return
                resp = await self._answer(address, req, call, stream)
            finally:
                if over_grpc:  # before the outcome is handled: a retry it schedules may take the socket
                    for b in batches:
                        tp = (b.topic, b.partition)
                        n = self._grpc_in_flight.pop(tp) - 1
                        if n:
                            self._grpc_in_flight[tp] = n
        except (grpc.aio.AioRpcError, errors.KafkaError, ConnectionError) as e:
            self._request_failed(address, batches, e)
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

    def _request_failed(self, address: str | None, batches: list[ProducerBatch],
                        e: grpc.aio.AioRpcError | errors.KafkaError | ConnectionError) -> None:
        if isinstance(e, errors.KafkaError):
            err = e
        elif isinstance(e, grpc.aio.AioRpcError):
            err = rpc_error(e, address or "?")
        else:
            err = errors.NetworkError(f"{address}: {e}")
        for b in batches:
            self._retry_or_fail(b, err)

    def _kafka_connection(self, leader: int, address: str,
                          batches: list[ProducerBatch]) -> KafkaProduceConnection | None:
        """``address``'s open Kafka listener connection, if ``batches`` may go on it now. Otherwise
        None (gRPC), and a connection is opened in the background if the broker offers a listener."""
        conn = self._kafka_conns.get(address)
        if conn is not None:
            if conn.failed is None:
                # Not while a batch of the same partition is in flight on gRPC: it could be overtaken.
                in_flight = self._grpc_in_flight
                if in_flight and any((b.topic, b.partition) in in_flight for b in batches):
                    return None
                return conn
            del self._kafka_conns[address]
            self._kafka_retry_at[address] = time.monotonic() + KAFKA_PRODUCE_RETRY_AFTER_S
            log.info("%s: Produce goes over gRPC for %.0f s: the Kafka listener connection failed (%s)",
                     address, KAFKA_PRODUCE_RETRY_AFTER_S, conn.failed)
        target = self._view.kafka_produce.get(leader) if self.kafka_listener else None
        if target is None or address in self._kafka_connecting \
                or time.monotonic() < self._kafka_retry_at.get(address, 0.0):
            return None
        self._kafka_connecting.add(address)
        self._loop.create_task(self._connect_kafka(address, target))
        return None

    async def _connect_kafka(self, address: str, target: str) -> None:
        host, _, port = target.rpartition(":")
        try:
            tls = self.security.ssl_context() if self.security.is_tls else None
            conn = await KafkaProduceConnection.open(host, int(port), tls, min(self.request_timeout_s, 10.0),
                                                     client_id=self.client_id)
        except Exception as e:  # unreachable, or a surprise: gRPC for a while either way
            log.log(logging.INFO if isinstance(e, KafkaProduceUnreachable) else logging.WARNING,
                    "%s: Produce goes over gRPC for %.0f s: its Kafka listener %s cannot be reached (%r)",
                    address, KAFKA_PRODUCE_RETRY_AFTER_S, target, e)
            self._kafka_retry_at[address] = time.monotonic() + KAFKA_PRODUCE_RETRY_AFTER_S
            return
        finally:
            self._kafka_connecting.discard(address)
        if self._closed:
            await conn.close()
            return
        self._kafka_conns[address] = conn

    def _produce_stream(self, address: str) -> ProduceStream:
        stream = self._produce_streams.get(address)
        if stream is None or stream.failed is not None:
            stream = self._produce_streams[address] = ProduceStream(self._stub(address))
        return stream

    async def _answer(self, address: str, req: pb.ProduceRequest, call: Awaitable[pb.ProduceResponse],
                      stream: ProduceTransport | None) -> pb.ProduceResponse:
        """The answer to ``req``, sent on ``stream`` (None: a unary call). Answers on a stream come in
        order, so one that is late holds up all behind it: the stream is failed (they are retried
        on a new one). A broker without ProduceStream gets this request again, unary, and every
        later one."""
        if stream is None:
            return await call
        try:
            # asyncio.timeout, not wait_for: wait_for resumes this task one loop iteration after
            # the answer arrives (it waits on a second future that the answer's callback completes).
            async with asyncio.timeout(self.request_timeout_s + 5):
                return await call
        except TimeoutError:
            error = errors.RequestTimedOutError(f"{address}: no answer within request_timeout_ms")
            stream.fail(error)
            raise error from None
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and address not in self._unary_produce:
                # No room for another stream there (or a message too large): unary calls for a
                # while; this request is retried as after any failed call.
                log.info("broker %s: %s; producing with unary calls for %d s", address, e.details(),
                         STREAM_RETRY_AFTER_S)
                self._unary_produce[address] = time.monotonic() + STREAM_RETRY_AFTER_S
            if not is_unimplemented(e):
                raise
            if self._unary_produce.get(address) != math.inf:
                log.info("broker %s has no ProduceStream (an older version): producing with unary calls", address)
                self._unary_produce[address] = math.inf
            return await self._stub(address).Produce(req, timeout=self.request_timeout_s + 5)  # type: ignore[no-any-return]

    def _streams_to(self, address: str) -> bool:
        until = self._unary_produce.get(address)
        if until is None:
            return True
        if time.monotonic() < until:
            return False
        del self._unary_produce[address]
        return True

    def _retry_or_fail(self, batch: ProducerBatch, error: errors.KafkaError) -> None:
        now_ms = _now_ms()
        retriable = error.retriable or (isinstance(error, errors.OutOfOrderSequenceNumberError) and self.idempotent)
        if error.invalid_metadata or isinstance(error, errors.NetworkError):
            self._loop.create_task(self._refresh_metadata([batch.topic]))
        with self._lock:
            retry = retriable and self._accumulator.can_retry(batch, now_ms)
            if retry:
                self._accumulator.reenqueue(batch, now_ms)
        if not retry:
            self._finish(batch, -1, error)
            return
        # Kafka's Sender says why it retries ("Got error produce response ..., retrying"): at WARNING for
        # what is not a routine leader move, at most every RETRY_WARNING_INTERVAL_S per partition and
        # error - a produce to a topic whose min.insync.replicas exceeds its replicas must not be
        # silent until delivery.timeout.ms (issue 33).
        key = (batch.topic, batch.partition, error.name)
        quiet = error.invalid_metadata or isinstance(error, errors.NetworkError)
        if not quiet and now_ms - self._retry_warned.get(key, -RETRY_WARNING_INTERVAL_MS) >= RETRY_WARNING_INTERVAL_MS:
            self._retry_warned[key] = now_ms
            log.warning("produce to %s-%d failed with %s (%s); retrying until delivery.timeout.ms", batch.topic,
                        batch.partition, error.name, error)
        else:
            log.debug("retrying %s-%d (sequence %d) after %s", batch.topic, batch.partition, batch.sequence, error)
        if self._wake is not None:
            self._wake.set()

    def _finish(self, batch: ProducerBatch, base_offset: int, error: BaseException | None) -> None:
        if error is not None and self._txn is not None:
            txn = self._txn
            if isinstance(error, TXN_FATAL_ERRORS):
                txn.fatal, txn.state = error, FATAL  # fenced or not authorized: only close() is left
            elif txn.error is None:
                # The transaction cannot commit any more (Kafka's abortable error); its producer id stays.
                txn.error = error
            if batch.sequence >= 0:
                txn.epoch_bump_required = True  # the leader's next expected sequence is unknown now
        elif error is not None and self.idempotent and batch.sequence >= 0 and not self._resetting_pid:
            # The sequence of a batch that was given up is a gap the leader would refuse forever:
            # start again with a new producer id and fresh sequences (Kafka's idempotent producer
            # resets its producer id after an unresolved sequence the same way).
            self._resetting_pid = True
            self._loop.create_task(self._reset_producer_id())
        with self._lock:
            self._accumulator.complete(batch)
            self._idle.notify_all()
        batch.result.complete(base_offset, error)
        if self._wake is not None:
            self._wake.set()
