"""The connector's I/O: metadata and offsets on the driver, range reads and writes on executors.

Theory of operation
-------------------
Driver side, ``list_partitions`` and ``list_offsets`` ask the cluster (one
ListOffsets request per leader for all its partitions) for what the pure planner
in ``options`` needs. Executor side, ``read_range`` reads one planned
``OffsetRange`` straight from the partition's leader with consumer Fetch
requests (replica_id -1, so the leader serves committed records only, SPEC
S3.2), over connections borrowed from the worker's ``connection_cache`` (as
Spark's Kafka source reuses its consumers between tasks), and turns every Fetch
response into one Arrow ``RecordBatch``: the columnar codec (``proto.columnar``,
compiled) decodes the fetched bytes straight into Arrow buffers that pyarrow
wraps without a copy, so no Python object is made per record. The read is
pipelined: as soon as a response is decoded the Fetch for the next offsets is
sent, and the broker serves it while Spark consumes the batch just yielded. When
the leader dies or changes in the middle of a read (a gRPC error,
NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, ...), it refreshes metadata and
goes on from the first offset it has not yet returned, so every record of the
range comes out exactly once. A new leader's high watermark can briefly trail
the one the driver planned with; the long-poll fetch simply waits for it
(bounded by ``readRetryTimeoutMs``). A compacted topic has gaps in its offsets:
the read skips them, and a range whose tail was compacted away ends at its
``until`` (``options.after_fetch``: only a log start beyond the offset expected
is data loss, as in Spark's Kafka source).

With ``read_committed`` (``kafka.isolation.level``) offsets are listed and
records fetched read_committed: the leader answers up to the last stable offset
with the aborted transactions overlapping the answer, whose batches
``client.txn_filter.drop_aborted`` removes before decoding (control batches
never become rows, in either isolation level). A range may then hold fewer rows
than offsets; the read still moves past the dropped batches.

``write_arrow_batches`` is the sink: rows with ``value`` (and optional
``key``, ``topic``, ``partition``, ``headers``) go through the idempotent
producer with acks=all; any failed record fails the task, like Spark's Kafka
sink. With a transactional id (the sink's ``transactionalIdPrefix`` option)
a task's rows go in one transaction, aborted when the task fails.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import grpc

from client.connection import ClusterView
from client.producer import FutureRecordMetadata, Producer
from client.spark.connection_cache import CONNECTIONS, ConnectionCache, ViewKey
from client.spark.options import TP, DataLossError, OffsetRange, SparkOptionError, Subscription, after_fetch
from client.txn_filter import drop_aborted
from proto import errors
from proto import minikafka_pb2 as pb
from proto.columnar import RecordColumns, decode_columns, to_arrow
from proto.record_batch import iter_headers
from proto.transport import PLAINTEXT_SECURITY, ChannelSecurity

log = logging.getLogger("minikafka.spark")
E = pb.ErrorCode

RETRY_BACKOFF_S = 0.1
LONG_POLL_MS = 500


# ------------------------------------------------------------------ driver side


def list_partitions(view: ClusterView, subscription: Subscription) -> list[TP]:
    """The topic-partitions the subscription selects now (unknown subscribed topics are skipped)."""
    wanted = subscription.topic_filter()
    view.refresh(list(wanted) if wanted is not None else None)
    available: dict[str, list[int]] = {}
    for (t, p) in view.partitions:
        if (wanted is None or t in wanted) and view.topic_errors.get(t, 0) == 0:
            available.setdefault(t, []).append(p)
    return subscription.select(available)


def list_offsets(view: ClusterView, timestamps: dict[TP, int], timeout_s: float = 30.0, *,
                 read_committed: bool = False) -> dict[TP, int]:
    """ListOffsets per leader: -2 = log start, -1 = high watermark (the last stable offset when
    ``read_committed``), else the first offset at or after the time (-1 when there is none). Retries
    retriable errors and leader moves until ``timeout_s``."""
    out: dict[TP, int] = {}
    deadline = time.monotonic() + timeout_s
    while True:
        pending = {tp: ts for tp, ts in timestamps.items() if tp not in out}
        if not pending:
            return out
        failed: list[str] = []
        by_leader: dict[int, list[TP]] = {}
        for tp in pending:
            pl = view.partitions.get(tp)
            if pl is None or pl.leader < 0 or pl.leader not in view.brokers:
                failed.append(f"{tp[0]}-{tp[1]}: no leader")
                continue
            by_leader.setdefault(pl.leader, []).append(tp)
        for leader, tps in by_leader.items():
            req = pb.ListOffsetsRequest(replica_id=-1, isolation_level=_isolation(read_committed))
            for topic in dict.fromkeys(t for t, _p in tps):
                req.topics.add(name=topic, partitions=[
                    pb.ListOffsetsPartition(partition=p, timestamp=pending[(t, p)],
                                            current_leader_epoch=view.partitions[(t, p)].leader_epoch)
                    for t, p in tps if t == topic])
            try:
                resp = view.connection(view.brokers[leader]).api.ListOffsets(req, timeout=view.timeout_s)
            except grpc.RpcError as e:
                failed.append(f"broker {leader}: {e.code().name}")
                continue
            for tr in resp.topics:
                for pr in tr.partitions:
                    tp = (tr.name, pr.partition)
                    if pr.error_code == E.NONE:
                        out[tp] = pr.offset
                        continue
                    err = errors.for_code(pr.error_code)
                    if not (err.retriable or err.invalid_metadata):
                        raise err(f"ListOffsets {tp[0]}-{tp[1]}")
                    failed.append(f"{tp[0]}-{tp[1]}: {err.__name__}")
        if len(out) == len(timestamps):
            return out
        if time.monotonic() >= deadline:
            raise errors.RequestTimedOutError(f"could not list offsets in {timeout_s:.0f}s: {'; '.join(failed)}")
        time.sleep(RETRY_BACKOFF_S)
        try:
            view.refresh(sorted({t for t, _p in pending}))
        except errors.KafkaError as e:
            log.debug("metadata refresh failed: %s", e)


# ------------------------------------------------------------------ executor side: reads


class RangeReadError(RuntimeError):
    """A range could not be read within readRetryTimeoutMs (the partition stayed unavailable)."""


def read_range(bootstrap_servers: str, rng: OffsetRange, *, include_headers: bool, max_bytes: int,
               fail_on_data_loss: bool, request_timeout_ms: int, retry_timeout_ms: int,
               arrow_schema: Any, security: ChannelSecurity = PLAINTEXT_SECURITY,
               cache: ConnectionCache | None = None, read_committed: bool = False) -> Iterator[Any]:
    """Every record of ``rng`` exactly once, in offset order, as Arrow RecordBatches (one per fetch),
    read through a view borrowed from the worker's connection cache (``connection_cache``)."""
    cache = CONNECTIONS if cache is None else cache
    view = cache.borrow(ViewKey(bootstrap_servers, request_timeout_ms / 1000.0, security))
    try:
        for cols in read_columns(view, rng, include_headers=include_headers, max_bytes=max_bytes,
                                 fail_on_data_loss=fail_on_data_loss, retry_timeout_s=retry_timeout_ms / 1000.0,
                                 read_committed=read_committed):
            yield to_arrow(cols, rng.topic, rng.partition, arrow_schema)
    except BaseException:  # an error, or Spark stopped reading early: never lend this view again
        cache.discard(view)
        raise
    cache.give_back(view)  # the next task of this worker reads without connecting again


def _isolation(read_committed: bool) -> pb.IsolationLevel:
    return pb.READ_COMMITTED if read_committed else pb.READ_UNCOMMITTED


def _send_fetch(view: ClusterView, topic: str, partition: int, position: int, max_bytes: int,
                read_committed: bool = False) -> Any:
    """A Fetch of ``topic-partition`` from ``position``, in flight (a gRPC future)."""
    conn, pl = view.leader_connection(topic, partition)
    req = pb.FetchRequest(replica_id=-1, max_wait_ms=LONG_POLL_MS, min_bytes=1, max_bytes=max_bytes,
                          isolation_level=_isolation(read_committed))
    req.topics.add(name=topic).partitions.add(partition=partition, fetch_offset=position,
                                              current_leader_epoch=pl.leader_epoch, partition_max_bytes=max_bytes)
    return conn.api.Fetch.future(req, timeout=LONG_POLL_MS / 1000.0 + view.timeout_s)


def read_columns(view: ClusterView, rng: OffsetRange, *, include_headers: bool, max_bytes: int,
                 fail_on_data_loss: bool, retry_timeout_s: float,
                 read_committed: bool = False) -> Iterator[RecordColumns]:
    """The records of ``rng`` as decoded columns, one ``RecordColumns`` per Fetch that returned any."""
    topic, partition, until = rng.topic, rng.partition, rng.until_offset
    position = rng.from_offset
    deadline = time.monotonic() + retry_timeout_s
    last_problem = "no response yet"
    # The next Fetch and the offset it asks for, sent before the previous rows were yielded.
    ahead: tuple[Any, int] | None = None
    try:
        while position < until:
            if time.monotonic() >= deadline:
                raise RangeReadError(f"{topic}-{partition}: no progress at offset {position} (reading up to {until}) "
                                     f"for {retry_timeout_s:.0f}s; last problem: {last_problem}")
            try:
                if ahead is None or ahead[1] != position:
                    if ahead is not None:
                        ahead[0].cancel()
                    ahead = (_send_fetch(view, topic, partition, position, max_bytes, read_committed), position)
                fut, ahead = ahead[0], None
                pr = fut.result().topics[0].partitions[0]
            except (grpc.RpcError, errors.KafkaError) as e:
                last_problem = f"{type(e).__name__}: {e}"
                _refresh_after_error(view, topic)
                continue
            if pr.error_code == E.OFFSET_OUT_OF_RANGE:
                start = list_offsets(view, {(topic, partition): -2}, timeout_s=view.timeout_s)[(topic, partition)]
                if position >= start:  # above the HW for now (a new leader catching up): wait for it
                    last_problem = "offset out of range above the high watermark"
                    time.sleep(RETRY_BACKOFF_S)
                    continue
                msg = f"{topic}-{partition}: offsets {position}..{start - 1} were deleted before they were read"
                if fail_on_data_loss:
                    raise DataLossError(msg + " (set failOnDataLoss=false to skip them)")
                log.warning("%s; skipping them", msg)
                position = start
                deadline = time.monotonic() + retry_timeout_s
                continue
            if pr.error_code != E.NONE:
                err = errors.for_code(pr.error_code)
                if not (err.retriable or err.invalid_metadata):
                    raise err(f"Fetch {topic}-{partition} at {position}")
                last_problem = err.__name__
                _refresh_after_error(view, topic)
                continue
            records, dropped_to = pr.records, -1
            if read_committed and pr.aborted_transactions:
                records, dropped_to = drop_aborted(pr.records, [(a.producer_id, a.first_offset)
                                                                for a in pr.aborted_transactions])
            cols = decode_columns(records, position, until, include_headers=include_headers)
            if cols.error is not None:
                base_offset, next_offset, reason = cols.error
                raise errors.CorruptMessageError(f"{topic}-{partition}: the batch at offset {base_offset} is corrupt "
                                                 f"({reason}); the next batch starts at offset {next_offset}")
            if dropped_to >= 0:
                # Aborted batches were dropped: the answer's own first batch tells data loss (not the
                # first kept row), and the read moves past dropped batches at the answer's end too.
                first = _first_batch_past(pr.records, position)
                decoded_to = max(cols.next_offset, min(dropped_to, until))
            else:
                first = cols.offset_at(0) if cols.num_rows else _first_batch_past(pr.records, position)
                decoded_to = cols.next_offset
            # read_committed: everything below the LSO was answered (the HW bounds read_uncommitted).
            bound = pr.last_stable_offset if read_committed else pr.high_watermark
            next_position, loss = after_fetch(position, until, next_offset=decoded_to, first_offset=first,
                                              high_watermark=bound, log_start_offset=pr.log_start_offset)
            if loss is not None:
                msg = f"{topic}-{partition}: {loss}"
                if fail_on_data_loss:
                    raise DataLossError(msg + " (set failOnDataLoss=false to skip them)")
                log.warning("%s; skipping them", msg)
            if next_position > position:  # past the records read, and past gaps compaction left
                position = next_position
                deadline = time.monotonic() + retry_timeout_s
                if position < until:
                    try:  # pipelining: the broker serves the next range while Spark takes these rows
                        ahead = (_send_fetch(view, topic, partition, position, max_bytes, read_committed),
                                 position)
                    except (grpc.RpcError, errors.KafkaError) as e:
                        log.debug("cannot send the next fetch yet: %s", e)  # the loop sends it again
            else:
                last_problem = f"the leader returned nothing at {position} (high watermark {pr.high_watermark})"
            if cols.num_rows:
                yield cols
    finally:
        if ahead is not None:
            ahead[0].cancel()


def _first_batch_past(records: bytes, position: int) -> int | None:
    """The base offset of the first batch in ``records`` holding offsets past ``position``."""
    for _pos, h in iter_headers(records):
        if h.last_offset >= position:
            return h.base_offset
    return None


def _refresh_after_error(view: ClusterView, topic: str) -> None:
    time.sleep(RETRY_BACKOFF_S)
    try:
        view.refresh([topic])
    except errors.KafkaError as e:  # every broker unreachable for now: the read loop retries
        log.debug("metadata refresh failed: %s", e)


# ------------------------------------------------------------------ executor side: writes


def check_topics_exist(view: ClusterView, topics: Iterable[str]) -> dict[str, int]:
    """{topic: partition count}; an unknown topic is a clear error (the sink never auto-creates)."""
    names = sorted(set(topics))
    view.refresh(names, allow_auto_create=False)
    counts: dict[str, int] = {}
    for t in names:
        n = len(view.partitions_of(t))
        code = view.topic_errors.get(t, E.UNKNOWN_TOPIC_OR_PARTITION)
        if n == 0 or code == E.UNKNOWN_TOPIC_OR_PARTITION:
            raise errors.UnknownTopicOrPartitionError(
                f"topic {t!r} does not exist (create it first: minikafka topics --create --topic {t} ...)")
        counts[t] = n
    return counts


def _as_bytes(v: Any, column: str) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    raise SparkOptionError(f"column {column!r} must be binary or string, got {type(v).__name__}")


def write_arrow_batches(bootstrap_servers: str, batches: Iterable[Any], default_topic: str | None,
                        producer_options: dict[str, Any] | None = None,
                        security: ChannelSecurity = PLAINTEXT_SECURITY, transactional_id: str | None = None) -> int:
    """Produce every row of the Arrow batches (acks=all, idempotent); returns the number written.

    With ``transactional_id`` every row goes in one transaction (KIP-98): ``init_transactions``
    (which fences an earlier producer of the id - a failed or speculative attempt of the same task -
    and aborts its open transaction), then all rows, then ``commit_transaction``; any failure on the
    way aborts the transaction before the error is raised, so a read_committed reader sees all of
    this call's rows or none."""
    producer = Producer(bootstrap_servers, acks="all", enable_idempotence=True, security=security,
                        transactional_id=transactional_id, **(producer_options or {}))
    view = ClusterView(bootstrap_servers, security=security)
    known: dict[str, int] = {}
    futures: list[FutureRecordMetadata] = []
    written = 0
    in_txn = False
    try:
        if transactional_id is not None:
            producer.init_transactions()
            producer.begin_transaction()
            in_txn = True
        for batch in batches:
            data = {name.lower(): col for name, col in batch.to_pydict().items()}  # Spark resolves names case-insensitively
            n = batch.num_rows
            values: Sequence[Any] = data["value"]
            keys: Sequence[Any] = data.get("key") or [None] * n
            topics: Sequence[Any] = data.get("topic") or [default_topic] * n
            partitions: Sequence[Any] = data.get("partition") or [None] * n
            headers: Sequence[Any] = data.get("headers") or [None] * n
            if default_topic is not None and "topic" in data:
                topics = [t if t is not None else default_topic for t in topics]
            new = {t for t in topics if t is not None and t not in known}
            if None in topics:
                raise SparkOptionError("a row has no topic: give a 'topic' column or the 'topic' option")
            if new:
                known.update(check_topics_exist(view, new))
            for i in range(n):
                hdrs = [(h["key"], _as_bytes(h["value"], "headers.value")) for h in headers[i]] if headers[i] else None
                futures.append(producer.send(topics[i], value=_as_bytes(values[i], "value"),
                                             key=_as_bytes(keys[i], "key"), partition=partitions[i], headers=hdrs))
            written += n
            if len(futures) >= 50_000:
                _settle(futures)
        if in_txn:
            producer.commit_transaction()  # flushes first; a failed record makes it raise (then aborted below)
            in_txn = False
        producer.flush()
        _settle(futures)
    except BaseException:
        if in_txn:
            try:
                producer.abort_transaction()
            except Exception as e:  # fenced, or the coordinator unreachable: it aborts on its own timeout
                log.warning("transaction %s not aborted: %s", transactional_id, e)
        raise
    finally:
        producer.close()
        view.close()
    return written


def _settle(futures: list[FutureRecordMetadata]) -> None:
    for f in futures:
        f.result()  # raises the record's error: the Spark task fails (and Spark retries it)
    futures.clear()
