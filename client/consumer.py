"""The consumer: pipelined fetches, offsets, and ZooKeeper consumer groups (SPEC S6, S10, S11).

Theory of operation
-------------------
Fetch: for every leader of an assigned partition one Fetch request carries all
of that leader's partitions. Requests are sent with gRPC's non-blocking
``.future()``; as soon as ``poll()`` has taken a response, the next request is
already in flight while the caller works on the records (pipelining). A
partition is fetched again as soon as it has one decoded fetch buffered, from
where that fetch ends (its *fetch position*, ahead of the consumer's
position), so the broker serves the next records while the caller works through
these; two buffered fetches per partition are the bound. ``seek()``, a new
assignment and a rebalance drop both buffered and in-flight fetches, and a
response is used only if it was asked for the current fetch position. Only
committed records (below the high watermark) are ever returned (S3.2); a
leader change refreshes metadata and resumes from the same position.

Fetch sessions (KIP-227, SPEC S15): each leader's fetches go through one
session (``client.fetch_session_handler``, the bookkeeping): the first is full,
later ones name only the partitions whose fetch position or leader epoch
changed, or that were added, and forget those no longer wanted; their answers
list only partitions that moved, and a partition left out had nothing new. A
session error, a failed or cancelled fetch, or an error that refreshes a
leader's metadata starts that leader's session over with a full fetch.

Decoding: a partition's fetched bytes are decoded once, by the compiled
columnar codec (``proto.columnar``, pure Python without a compiler), into
Arrow-layout columns that stay buffered until taken. ``poll()`` builds its
``ConsumerRecord`` tuples from a slice of them (in C, one allocation per
field); ``poll_batch()`` hands out the same slice as a ``pyarrow.RecordBatch``
with Spark's Kafka-source columns, without a Python object per record. Both
advance the position past the last record handed out, so they can be mixed and
``commit()``, ``seek()`` and rebalances behave the same whichever is used.

Groups use the broker-side group coordinator (``client/group_client.py``,
Kafka's protocol): the member finds the coordinator with FindCoordinator,
joins (JoinGroup/SyncGroup), and the leader member computes the range
assignment client-side over every member's subscription; a heartbeat thread
learns of rebalances, which ``poll()`` then runs (committing the positions of
the partitions it gives up first, while its generation may still commit).
Committed offsets go through OffsetCommit/OffsetFetch to the coordinator, which
keeps them in ``/consumers/[group]/offsets/[topic]/[partition]``; a new owner
resumes there (S11.3). Only bootstrap servers are needed.

Range assignment: Kafka's (RangeAssignor / the 0.8 consumer): P/C partitions
each, the first P%C members one more - 7 partitions over 3 members is 3/2/2.
(SPEC S11.2's ceil formula would give 3/3/1; Kafka's behaviour, which the
consumer-group issue asks for, is implemented.)
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import grpc

from client.connection import ClusterView, Connection, parse_bootstrap
from client.discovery import default_bootstrap
from client.fetch_session_handler import (
    FETCH_SESSION_ID_NOT_FOUND,
    FINAL_EPOCH,
    INVALID_FETCH_SESSION_EPOCH,
    FetchRequestData,
    FetchSessionHandler,
    PartitionFetchState,
)
from client.group_client import GroupMember
from client.structs import TopicPartition
from client.txn_filter import drop_aborted
from proto import errors
from proto import minikafka_pb2 as pb
from proto.columnar import RecordColumns, decode_columns, kafka_arrow_schema, to_arrow, to_records
from proto.record_batch import Header
from proto.transport import ChannelSecurity, client_security

log = logging.getLogger(__name__)
E = pb.ErrorCode


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


@dataclass(frozen=True, slots=True)
class ColumnBatch:
    """One partition's records from ``poll_batch(arrow=False)`` (or without pyarrow): parallel lists,
    named after Spark's Kafka-source columns."""

    topic: str
    partition: int
    key: list[bytes | None]
    value: list[bytes | None]
    offset: list[int]
    timestamp: list[int]  # milliseconds (the Arrow form has Spark's microsecond timestamps)
    timestampType: list[int]  # Spark's column name
    headers: list[tuple[Header, ...]]

    @property
    def num_rows(self) -> int:
        return len(self.offset)


class _Fetched:
    """A partition's decoded fetch, the first row not yet handed out, and its Arrow form once made."""

    __slots__ = ("arrow", "caught_up", "cols", "next_row")

    def __init__(self, cols: RecordColumns) -> None:
        self.cols = cols
        self.next_row = 0
        self.arrow: dict[bool, Any] = {}  # include_headers -> the whole fetch as one RecordBatch
        self.caught_up = False  # a fetch from where this one ends found nothing (yet)


@functools.cache
def _arrow_installed() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


_T = TypeVar("_T", list[ConsumerRecord], dict[TopicPartition, Any])


def _concat_batches(a: Any, b: Any) -> Any:
    import pyarrow as pa

    return pa.Table.from_batches([a, b]).combine_chunks().to_batches()[0]


def range_assignment(members: Sequence[str], partitions: Sequence[int]) -> dict[str, list[int]]:
    """Kafka's range assignment for one topic: members and partitions sorted; the first
    P % C members get one partition more; surplus members get none."""
    members = sorted(members)
    parts = sorted(partitions)
    out: dict[str, list[int]] = {m: [] for m in members}
    if not members:
        return out
    per, extra = divmod(len(parts), len(members))
    start = 0
    for i, m in enumerate(members):
        n = per + (1 if i < extra else 0)
        out[m] = parts[start:start + n]
        start += n
    return out


class CorruptRecordError(errors.CorruptMessageError):
    """A fetched batch cannot be decoded. Not retriable: the same bytes come back every time; skip
    the batch by seeking past it (``seek(TopicPartition(topic, partition), next_offset)``)."""

    retriable = False

    def __init__(self, topic: str, partition: int, offset: int, next_offset: int, reason: str) -> None:
        super().__init__(f"{topic}-{partition}: the batch at offset {offset} is corrupt ({reason}); "
                         f"the next batch starts at offset {next_offset}")
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.next_offset = next_offset


class Consumer:
    def __init__(self, *topics: str, bootstrap_servers: str | Sequence[str] | None = None,
                 group_id: str | None = None, auto_offset_reset: str = "latest", enable_auto_commit: bool = True,
                 auto_commit_interval_ms: int = 5000, max_poll_records: int = 500, fetch_min_bytes: int = 1,
                 fetch_max_wait_ms: int = 500, fetch_max_bytes: int = 52_428_800,
                 max_partition_fetch_bytes: int = 1_048_576, request_timeout_ms: int = 30_000,
                 retry_backoff_ms: int = 100, zookeeper_connect: str | None = None,
                 zookeeper_session_timeout_ms: int = 6000, consumer_id: str | None = None,
                 consumer_timeout_ms: float = float("inf"),
                 security_protocol: str = "PLAINTEXT", ssl_cafile: str | None = None,
                 ssl_certfile: str | None = None, ssl_keyfile: str | None = None,
                 sasl_mechanism: str = "SCRAM-SHA-256", sasl_plain_username: str | None = None,
                 sasl_plain_password: str | None = None, security: ChannelSecurity | None = None,
                 session_timeout_ms: int = 10_000, heartbeat_interval_ms: int = 3000,
                 max_poll_interval_ms: int = 300_000, group_instance_id: str | None = None,
                 isolation_level: str = "read_uncommitted") -> None:
        """``zookeeper_connect`` and ``zookeeper_session_timeout_ms`` are accepted and ignored: groups
        go through the broker's coordinator. ``max_poll_interval_ms`` is the rebalance timeout.
        ``group_instance_id`` makes the consumer a static member (KIP-345, Kafka's group.instance.id).
        ``isolation_level="read_committed"`` (KIP-98): records up to the last stable offset only, never
        those of aborted transactions (``client.txn_filter``); the latest offset is the LSO."""
        del zookeeper_connect, zookeeper_session_timeout_ms
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise errors.InvalidRequestError("isolation_level must be read_uncommitted or read_committed")
        self.isolation_level = isolation_level
        self._isolation = pb.READ_COMMITTED if isolation_level == "read_committed" else pb.READ_UNCOMMITTED
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise errors.InvalidRequestError("auto_offset_reset must be earliest, latest or none")
        self.bootstrap = parse_bootstrap(default_bootstrap() if bootstrap_servers is None else bootstrap_servers)
        self.group_id = group_id
        self.auto_offset_reset = auto_offset_reset
        self.enable_auto_commit = enable_auto_commit and group_id is not None
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000.0
        self.max_poll_records = max_poll_records
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.request_timeout_s = request_timeout_ms / 1000.0
        self.retry_backoff_s = retry_backoff_ms / 1000.0
        self.consumer_timeout_s = consumer_timeout_ms / 1000.0
        self.security = client_security(security, security_protocol=security_protocol, ssl_cafile=ssl_cafile,
                                        ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile,
                                        sasl_mechanism=sasl_mechanism, sasl_plain_username=sasl_plain_username,
                                        sasl_plain_password=sasl_plain_password)
        self.view = ClusterView(self.bootstrap, timeout_s=self.request_timeout_s, security=self.security)
        self._assignment: list[TopicPartition] = []
        self._positions: dict[TopicPartition, int] = {}
        # Decoded fetches per partition, oldest first: at most two (one prefetched), see _send_fetches.
        self._buffer: dict[TopicPartition, deque[_Fetched]] = {}
        # Per leader: the Fetch in flight, the fetch position of every partition it covers, its session data.
        self._inflight: dict[int, tuple[Any, dict[TopicPartition, int], FetchRequestData[TopicPartition]]] = {}
        # One fetch session per leader fetched from (KIP-227).
        self._sessions: dict[int, FetchSessionHandler[TopicPartition]] = {}
        self._fetch_counts = {"full": 0, "incremental": 0, "partitions_named": 0, "partitions_forgotten": 0}
        self._throttled_until: dict[int, float] = {}
        self._subscription: list[str] = []
        self._closed = False
        self._last_commit = time.monotonic()
        self._rebalance_needed = threading.Event()
        self._fetch_done = threading.Event()
        self._owned: list[TopicPartition] = []
        self.consumer_id = consumer_id or f"{group_id or 'consumer'}_{uuid.uuid4().hex[:12]}"
        self._group: GroupMember | None = None
        if group_id is not None:
            self._group = GroupMember(self.view, group_id, self.consumer_id, session_timeout_ms,
                                      max_poll_interval_ms, heartbeat_interval_ms, self.retry_backoff_s,
                                      self.request_timeout_s, group_instance_id)
        if topics:
            self.subscribe(list(topics))

    # ------------------------------------------------------------ assignment

    def assign(self, partitions: Sequence[TopicPartition | tuple[str, int]]) -> None:
        if self._subscription:
            raise errors.InvalidRequestError("assign() and subscribe() cannot be mixed")
        self._set_assignment([TopicPartition(*tp) for tp in partitions])

    def assignment(self) -> list[TopicPartition]:
        return list(self._assignment)

    def subscribe(self, topics: Sequence[str]) -> None:
        if self._assignment and not self._subscription:
            raise errors.InvalidRequestError("assign() and subscribe() cannot be mixed")
        self._subscription = sorted(set(topics))
        if self.group_id is None:
            self.view.refresh(self._subscription)
            self._set_assignment([TopicPartition(t, p) for t in self._subscription
                                  for p in self.view.partitions_of(t)])
        else:
            self._join_group()

    def _set_assignment(self, tps: list[TopicPartition]) -> None:
        keep = set(tps)
        self._drop_fetched([tp for tp in self._assignment if tp not in keep])
        self._assignment = sorted(tps)
        self._positions = {tp: o for tp, o in self._positions.items() if tp in keep}
        self._buffer = {tp: q for tp, q in self._buffer.items() if tp in keep}
        self._cancel_inflight()

    def _drop_fetched(self, tps: Iterable[TopicPartition]) -> None:
        """What brokers answered for ``tps`` is dropped unread (reassigned, sought): each fetch session
        holding one of them names it in its next fetch even at an unchanged offset. A broker reads an
        incremental fetch's partitions only when named or moved since its last answer, trusting the
        consumer took that answer: a rebalance that dropped buffered records and resumed from the
        committed offset - the offset the session had cached - got nothing more, ever (a CI run's
        group consumer stalled after a coordinator failover)."""
        dropped = set(tps)
        if not dropped:
            return
        for session in self._sessions.values():
            for tp in dropped.intersection(session.partitions):
                session.resend(tp)

    # ------------------------------------------------------------ positions

    def position(self, tp: TopicPartition | tuple[str, int]) -> int:
        tp = TopicPartition(*tp)
        if tp not in self._positions:
            self._reset_positions([tp])
        return self._positions[tp]

    def seek(self, tp: TopicPartition | tuple[str, int], offset: int) -> None:
        tp = TopicPartition(*tp)
        if tp not in self._assignment:
            raise errors.InvalidRequestError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
        if offset < 0:
            raise errors.OffsetOutOfRangeError(f"cannot seek to a negative offset {offset}")
        self._positions[tp] = offset
        self._buffer.pop(tp, None)
        self._drop_fetched([tp])
        self._cancel_inflight()

    def seek_to_beginning(self, *tps: TopicPartition) -> None:
        self._seek_to(list(tps) or self._assignment, -2)

    def seek_to_end(self, *tps: TopicPartition) -> None:
        self._seek_to(list(tps) or self._assignment, -1)

    def _seek_to(self, tps: list[TopicPartition], which: int) -> None:
        for tp, offset in self._list_offsets(tps, which).items():
            self.seek(tp, offset)

    def beginning_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list_offsets(list(tps), -2)

    def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark of each partition: the offset the next committed record gets."""
        return self._list_offsets(list(tps), -1)

    def offsets_for_times(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        out: dict[TopicPartition, int | None] = {}
        for tp, ts in timestamps.items():
            off = self._list_offsets([tp], ts)[tp]
            out[tp] = off if off >= 0 else None
        return out

    def _list_offsets(self, tps: list[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        for attempt in range(20):
            pending = [tp for tp in tps if tp not in out]
            if not pending:
                return out
            for tp in pending:
                try:
                    conn, _pl = self.view.leader_connection(tp.topic, tp.partition)
                    resp = conn.api.ListOffsets(pb.ListOffsetsRequest(
                        replica_id=-1, isolation_level=self._isolation, topics=[pb.ListOffsetsTopic(
                            name=tp.topic, partitions=[pb.ListOffsetsPartition(partition=tp.partition,
                                                                               timestamp=timestamp)])]),
                        timeout=self.request_timeout_s)
                    pr = resp.topics[0].partitions[0]
                    if pr.error_code != E.NONE:
                        raise errors.for_code(pr.error_code)(f"ListOffsets {tp.topic}-{tp.partition}")
                    out[tp] = pr.offset
                except (errors.KafkaError, grpc.RpcError) as e:
                    if (isinstance(e, errors.KafkaError) and not e.retriable) or attempt == 19:
                        raise
                    self.view.refresh([tp.topic])
                    time.sleep(self.retry_backoff_s)
        return out

    def _reset_positions(self, tps: list[TopicPartition]) -> None:
        committed = self._committed_offsets(tps) if self.group_id else {}
        rest = [tp for tp in tps if committed.get(tp) is None]
        for tp, off in committed.items():
            if off is not None:
                self._positions[tp] = off
        if rest:
            if self.auto_offset_reset == "none":
                raise errors.OffsetOutOfRangeError(f"no committed offset for {rest} and auto_offset_reset=none")
            which = -2 if self.auto_offset_reset == "earliest" else -1
            self._positions.update(self._list_offsets(rest, which))

    # ------------------------------------------------------------ polling

    def poll(self, timeout_ms: float = 0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records from assigned partitions, in offset order per partition; [] after the timeout."""
        return self._poll(timeout_ms, max_records, self._take, list)

    def poll_batch(self, timeout_ms: float = 0, max_records: int | None = None, *, include_headers: bool = False,
                   arrow: bool | None = None) -> dict[TopicPartition, Any]:
        """Up to ``max_records`` records in columns, one entry per partition that has any ({} after the
        timeout): the same records, positions and commit semantics as ``poll()``.

        Each value is a ``pyarrow.RecordBatch`` with Spark's Kafka-source schema (key, value, topic,
        partition, offset, timestamp as UTC microseconds, timestampType; ``headers`` with
        ``include_headers``) whose buffers are the decoder's own, not copies. With ``arrow=False``,
        or when pyarrow is not installed, it is a ``ColumnBatch`` of lists instead.
        """
        use_arrow = _arrow_installed() if arrow is None else arrow
        return self._poll(timeout_ms, max_records,
                          lambda limit: self._take_columns(limit, include_headers, use_arrow), dict)

    def _poll(self, timeout_ms: float, max_records: int | None, take: Callable[[int], _T],
              empty: Callable[[], _T]) -> _T:
        if self._closed:
            raise errors.KafkaError("the consumer is closed")
        limit = max_records or self.max_poll_records
        deadline = time.monotonic() + timeout_ms / 1000.0
        while True:
            if self._group is not None and self._subscription and self._group.rejoin_needed.is_set():
                self._rebalance_needed.set()
            if self._rebalance_needed.is_set():
                self._rebalance()
            self._maybe_auto_commit()
            out = take(limit)
            if out:
                self._send_fetches()  # the next fetch is in flight while the caller works
                return out
            remaining = deadline - time.monotonic()
            self._send_fetches()
            if not self._inflight:
                if remaining <= 0:
                    return empty()
                time.sleep(min(self.retry_backoff_s, remaining))
                continue
            self._collect(max(0.0, remaining))
            if not self._buffer and time.monotonic() >= deadline:
                return empty()

    def __iter__(self) -> Iterator[ConsumerRecord]:
        idle_since = time.monotonic()
        while not self._closed:
            records = self.poll(timeout_ms=200)
            if records:
                idle_since = time.monotonic()
                yield from records
            elif time.monotonic() - idle_since >= self.consumer_timeout_s:
                return

    def _slices(self, limit: int) -> Iterator[tuple[TopicPartition, _Fetched, int, int]]:
        """(partition, fetch, first row, end row) of the next ``limit`` buffered records, in
        assignment order; each partition's position moves past its slice. A corrupt batch is
        raised when it is the next thing to hand out and nothing was taken yet in this call."""
        taken = 0
        for tp in self._assignment:
            queue = self._buffer.get(tp)
            while queue and taken < limit:
                f = queue[0]
                if f.cols.num_rows == 0:  # only a corrupt batch (see _handle_fetch_response)
                    if taken:
                        return  # hand out what came before it first
                    queue.popleft()
                    if not queue:
                        del self._buffer[tp]
                    assert f.cols.error is not None
                    base_offset, next_offset, reason = f.cols.error
                    raise CorruptRecordError(tp.topic, tp.partition, base_offset, next_offset, reason)
                start = f.next_row
                stop = min(f.cols.num_rows, start + limit - taken)
                yield tp, f, start, stop
                taken += stop - start
                self._positions[tp] = f.cols.offset_at(stop - 1) + 1
                if stop < f.cols.num_rows:
                    f.next_row = stop
                    break
                queue.popleft()
                if not queue:
                    del self._buffer[tp]
            if taken >= limit:
                return

    def _wants_fetch(self, tp: TopicPartition) -> bool:
        """Nothing buffered; or one fetch buffered, not ending in a corrupt batch, and the last fetch
        past it did not come back empty (no prefetching at the end of the log)."""
        queue = self._buffer.get(tp)
        if not queue:
            return True
        return len(queue) < 2 and queue[-1].cols.error is None and not queue[-1].caught_up

    def _fetch_position(self, tp: TopicPartition) -> int | None:
        """Where the next Fetch of ``tp`` starts: after what is buffered (None: not past a corrupt batch)."""
        queue = self._buffer.get(tp)
        if not queue:
            return self._positions.get(tp)
        last = queue[-1].cols
        return None if last.error is not None else last.next_offset

    def _take(self, limit: int) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        for tp, f, start, stop in self._slices(limit):
            out.extend(to_records(f.cols, start, stop, tp.topic, tp.partition, ConsumerRecord, Header))
        return out

    def _take_columns(self, limit: int, include_headers: bool, arrow: bool) -> dict[TopicPartition, Any]:
        out: dict[TopicPartition, Any] = {}
        for tp, f, start, stop in self._slices(limit):
            if arrow:
                whole = f.arrow.get(include_headers)
                if whole is None:  # made once per fetch: many polls may slice it
                    whole = f.arrow[include_headers] = to_arrow(f.cols, tp.topic, tp.partition,
                                                                kafka_arrow_schema(include_headers))
                piece = whole.slice(start, stop - start)
                prev = out.get(tp)
                out[tp] = piece if prev is None else _concat_batches(prev, piece)
                continue
            recs = to_records(f.cols, start, stop, tp.topic, tp.partition, ConsumerRecord, Header)
            types = memoryview(f.cols.timestamp_types).cast("i")[start:stop].tolist()
            part = ColumnBatch(tp.topic, tp.partition, [r.key for r in recs], [r.value for r in recs],
                               [r.offset for r in recs], [r.timestamp for r in recs], types,
                               [r.headers for r in recs] if include_headers else [() for _r in recs])
            prev = out.get(tp)
            out[tp] = part if prev is None else ColumnBatch(
                tp.topic, tp.partition, prev.key + part.key, prev.value + part.value, prev.offset + part.offset,
                prev.timestamp + part.timestamp, prev.timestampType + part.timestampType,
                prev.headers + part.headers)
        return out

    def _send_fetches(self) -> None:
        # A partition with one decoded fetch buffered is fetched again already (from where that fetch
        # ends): the broker serves the next records while the caller works through these. Two
        # buffered fetches are the bound (memory: 2 x max_partition_fetch_bytes per partition).
        need = [tp for tp in self._assignment if self._wants_fetch(tp)]
        by_leader: dict[int, list[TopicPartition]] = {}
        busy = {tp for _f, sent, _d in self._inflight.values() for tp in sent}
        missing = [tp for tp in need if tp not in self._positions and tp not in self._buffer]
        if missing:
            try:
                self._reset_positions(missing)
            except (errors.KafkaError, grpc.RpcError) as e:
                log.debug("cannot reset positions yet: %s", e)
                return
        self._drop_idle_sessions()
        for tp in need:
            if tp in busy:
                continue
            pl = self.view.partitions.get((tp.topic, tp.partition))
            if pl is None or pl.leader < 0 or pl.leader not in self.view.brokers:
                self._refresh_quietly([tp.topic])
                continue
            by_leader.setdefault(pl.leader, []).append(tp)
        now = time.monotonic()
        for leader, tps in by_leader.items():
            if leader in self._inflight or self._throttled_until.get(leader, 0.0) > now:
                continue
            # Only prefetches (every partition has records buffered): answered at once, never parked
            # at the broker, so they cannot hold this leader's one request slot for fetch_max_wait_ms.
            prefetch = all(tp in self._buffer for tp in tps)
            wanted: dict[TopicPartition, PartitionFetchState] = {}
            for tp in tps:
                offset = self._fetch_position(tp)
                assert offset is not None
                wanted[tp] = PartitionFetchState(offset, self.view.partitions[(tp.topic, tp.partition)].leader_epoch,
                                                 self.max_partition_fetch_bytes)
            data = self._sessions.setdefault(leader, FetchSessionHandler()).build(wanted)
            req = pb.FetchRequest(replica_id=-1, max_wait_ms=0 if prefetch else self.fetch_max_wait_ms,
                                  min_bytes=self.fetch_min_bytes, max_bytes=self.fetch_max_bytes,
                                  session_id=data.session_id, session_epoch=data.epoch,
                                  isolation_level=self._isolation)
            by_topic: dict[str, Any] = {}
            for tp, st in data.to_send.items():
                ft = by_topic.get(tp.topic)
                if ft is None:
                    ft = by_topic[tp.topic] = req.topics.add(name=tp.topic)
                ft.partitions.add(partition=tp.partition, fetch_offset=st.fetch_offset,
                                  current_leader_epoch=st.current_leader_epoch, partition_max_bytes=st.max_bytes)
            gone: dict[str, Any] = {}
            for tp in data.forgotten:
                ft = gone.get(tp.topic)
                if ft is None:
                    ft = gone[tp.topic] = req.forgotten.add(name=tp.topic)
                ft.partitions.add(partition=tp.partition)
            counts = self._fetch_counts
            counts["full" if data.full else "incremental"] += 1
            counts["partitions_named"] += len(data.to_send)
            counts["partitions_forgotten"] += len(data.forgotten)
            sent = {tp: st.fetch_offset for tp, st in data.covered.items()}
            conn: Connection = self.view.connection(self.view.brokers[leader])
            fut = conn.api.Fetch.future(req, timeout=self.fetch_max_wait_ms / 1000.0 + self.request_timeout_s)
            fut.add_done_callback(lambda _f: self._fetch_done.set())
            self._inflight[leader] = (fut, sent, data)

    def _drop_idle_sessions(self) -> None:
        """Forget the session with a broker that leads none of the assigned partitions any more (it
        died, or its partitions moved) and has no fetch of ours in flight: were it to lead one again,
        a full fetch opens a new session (the broker evicts the old one). Kept, a dead broker's
        session counted as held and its handler lived as long as the consumer."""
        if not self._sessions:
            return
        leaders = set()
        for tp in self._assignment:
            pl = self.view.partitions.get((tp.topic, tp.partition))
            if pl is not None:
                leaders.add(pl.leader)
        for leader in [b for b in self._sessions if b not in leaders and b not in self._inflight]:
            del self._sessions[leader]

    def _collect(self, timeout_s: float) -> None:
        """Wait (up to ``timeout_s``) for any in-flight fetch and take every finished one."""
        done = [(k, v) for k, v in self._inflight.items() if v[0].done()]
        if not done:
            self._fetch_done.wait(timeout_s)
            self._fetch_done.clear()
            done = [(k, v) for k, v in self._inflight.items() if v[0].done()]
        for leader, (fut, sent, data) in done:
            del self._inflight[leader]
            session = self._sessions.get(leader)
            try:
                resp = fut.result()
            except grpc.RpcError as e:
                log.debug("fetch from %d failed: %s", leader, e)
                if session is not None:
                    session.handle_error()
                self._refresh_quietly(sorted({tp.topic for tp in sent}))
                continue
            if resp.throttle_time_ms > 0:
                # The broker answered at once instead of parking the fetch (its purgatory is full).
                self._throttled_until[leader] = time.monotonic() + resp.throttle_time_ms / 1000.0
            listed = [TopicPartition(t.name, p.partition) for t in resp.topics for p in t.partitions]
            if session is None or not session.handle_response(data, resp.error_code, resp.session_id, listed,
                                                              resp.throttle_time_ms > 0):
                # Not usable (a session error: the next fetch is full). Any other refusal of the whole
                # fetch may be a leader's that moved on: look again, as for a partition's error.
                log.debug("fetch from %d not used: %s", leader, pb.ErrorCode.Name(resp.error_code))
                if resp.error_code not in (E.NONE, FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH):
                    self._refresh_quietly(sorted({tp.topic for tp in sent}))
                continue
            self._handle_fetch_response(resp, sent, session, listed)

    def _handle_fetch_response(self, resp: pb.FetchResponse, sent: dict[TopicPartition, int],
                               session: FetchSessionHandler[TopicPartition] | None = None,
                               listed: list[TopicPartition] | None = None) -> None:
        """Take an answer the session accepted (``listed``: its partitions, in order)."""
        if session is None:
            session = FetchSessionHandler()  # sessionless: nothing to name again
        if listed is None:
            listed = [TopicPartition(t.name, p.partition) for t in resp.topics for p in t.partitions]
        refresh: set[str] = set()
        parts = iter(listed)
        for t in resp.topics:
            for p in t.partitions:
                tp = next(parts)
                if tp not in sent or self._fetch_position(tp) != sent[tp]:
                    session.resend(tp)
                    continue  # seeked or reassigned meanwhile
                if tp in self._buffer and p.error_code != E.NONE:
                    session.resend(tp)  # the session must answer it again
                    continue  # a prefetch: once the buffered records are taken the fetch repeats from there
                if p.error_code == E.OFFSET_OUT_OF_RANGE:
                    if self.auto_offset_reset == "none":
                        raise errors.OffsetOutOfRangeError(f"{tp.topic}-{tp.partition} at {sent[tp]}")
                    self._positions.pop(tp, None)
                    session.resend(tp)
                    continue
                if p.error_code != E.NONE:
                    refresh.add(tp.topic)
                    continue
                if self._isolation == pb.READ_COMMITTED and p.aborted_transactions:
                    records, skipped_to = drop_aborted(p.records, [(a.producer_id, a.first_offset)
                                                                   for a in p.aborted_transactions])
                    self._take_fetched(tp, sent[tp], records)
                    if skipped_to > sent[tp] and tp not in self._buffer and self._fetch_position(tp) == sent[tp]:
                        self._positions[tp] = skipped_to  # nothing but aborted records: past them
                    continue
                self._take_fetched(tp, sent[tp], p.records)
        if len(listed) < len(sent):
            # An incremental answer lists only partitions that moved: the others had nothing new.
            for tp in sent.keys() - set(listed):
                if tp in self._buffer and self._fetch_position(tp) == sent[tp]:
                    self._buffer[tp][-1].caught_up = True
        if refresh:
            # Leadership moved (or metadata is stale): this leader's session starts over.
            session.reset()
            self._refresh_quietly(sorted(refresh))

    def _take_fetched(self, tp: TopicPartition, offset: int, records: bytes) -> None:
        """Buffer what a fetch of ``tp`` from ``offset`` returned."""
        cols = decode_columns(records, offset)
        if not cols.num_rows and cols.error is None and tp in self._buffer:
            self._buffer[tp][-1].caught_up = True  # no more prefetching until these are taken
        elif not cols.num_rows and cols.error is None and cols.next_offset > offset:
            self._positions[tp] = cols.next_offset  # batches whose records compaction removed
        elif cols.num_rows or cols.error is not None:
            # Rows that precede a bad batch are handed out first; the bad batch itself is raised
            # by _slices when it is next (a fetch of nothing but it is buffered for that).
            self._buffer.setdefault(tp, deque()).append(_Fetched(cols))

    def _refresh_quietly(self, topics: list[str]) -> None:
        try:
            self.view.refresh(topics)
        except errors.KafkaError as e:
            log.debug("metadata refresh failed: %s", e)

    def _cancel_inflight(self) -> None:
        for leader, (fut, _sent, _data) in self._inflight.items():
            fut.cancel()
            session = self._sessions.get(leader)
            if session is not None:
                session.handle_error()  # whether the broker applied it is unknown: the next fetch is full
        self._inflight.clear()

    def fetch_session_metrics(self) -> dict[str, int]:
        """Fetches sent (full / incremental, KIP-227), the partitions they named and forgot, and the
        sessions held (one per leader fetched from)."""
        return {**self._fetch_counts,
                "sessions": sum(1 for s in self._sessions.values() if s.session_id and s.epoch)}

    # ------------------------------------------------------------ committed offsets (S11.3)

    def committed(self, tp: TopicPartition | tuple[str, int]) -> int | None:
        tp = TopicPartition(*tp)
        return self._committed_offsets([tp]).get(tp)

    def _committed_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        if self._group is None:
            return {tp: None for tp in tps}
        found = self._group.fetch_offsets([(tp.topic, tp.partition) for tp in tps],
                                          require_stable=self._isolation == pb.READ_COMMITTED)
        return {tp: found.get((tp.topic, tp.partition)) for tp in tps}

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> dict[TopicPartition, int]:
        """Store the positions (or ``offsets``): the next offset to consume, per partition. A group
        member commits as its generation: after a rebalance moved a partition away the coordinator
        refuses (Kafka's CommitFailedException, here logged; the member rejoins). Returns the
        offsets the coordinator acknowledged (a refused or skipped partition is absent)."""
        if self._group is None:
            raise errors.InvalidGroupIdError("commit() needs a group_id")
        wanted = offsets if offsets is not None else dict(self._positions)
        if self._subscription:
            owned = set(self._owned)
            skipped = sorted(tp for tp in wanted if tp not in owned)
            if skipped:
                log.info("consumer %s: not committing %s: no longer owned", self.consumer_id, skipped)
            wanted = {tp: o for tp, o in wanted.items() if tp in owned}
        acknowledged: dict[TopicPartition, int] = {}
        if wanted:
            result = self._group.commit({(tp.topic, tp.partition): o for tp, o in wanted.items()},
                                        as_member=bool(self._subscription))
            refused = {tp: errors.for_code(c).name for tp, c in result.items() if c != 0}
            if refused:
                log.info("consumer %s: commit refused for %s", self.consumer_id, refused)
            acknowledged = {tp: o for tp, o in wanted.items() if result.get((tp.topic, tp.partition)) == 0}
        self._last_commit = time.monotonic()
        return acknowledged

    def commit_async(self, offsets: dict[TopicPartition, int] | None = None) -> threading.Thread:
        t = threading.Thread(target=self.commit, args=(offsets,), daemon=True)
        t.start()
        return t

    def _maybe_auto_commit(self) -> None:
        if self.enable_auto_commit and time.monotonic() - self._last_commit >= self.auto_commit_interval_s \
                and self._positions:
            try:
                self.commit()
            except errors.KafkaError as e:
                # As Kafka's auto-commit: logged, tried again next interval (e.g. while the group
                # moves to a new coordinator); poll() goes on.
                log.info("consumer %s: auto-commit failed: %s", self.consumer_id, e)
                self._last_commit = time.monotonic()

    # ------------------------------------------------------------ group membership (S11.1)

    def _join_group(self) -> None:
        self._rebalance_needed.set()

    def _rebalance(self) -> None:
        """Give up the partitions (committing their positions while this generation still may),
        join and sync (the leader computes the range assignment, S11.1/S11.2), take the new ones."""
        assert self._group is not None
        self._rebalance_needed.clear()
        if self._owned and self.enable_auto_commit:
            try:
                self.commit({tp: o for tp, o in self._positions.items() if tp in self._owned})
            except errors.KafkaError as e:
                log.info("consumer %s: commit before rebalance failed: %s", self.consumer_id, e)
        self._owned = []
        self._set_assignment([])
        self._positions = {}

        def partitions_of(topic: str) -> list[int]:
            try:
                self.view.refresh([topic])
            except errors.KafkaError:
                pass
            return self.view.partitions_of(topic)

        got = self._group.join(self._subscription, partitions_of, range_assignment)
        mine = sorted(TopicPartition(t, p) for t, ps in got.items() for p in ps)
        self._owned = mine
        self._set_assignment(mine)
        log.info("consumer %s (member %s, generation %d) owns %s", self.consumer_id, self._group.member_id,
                 self._group.generation_id, mine)

    # ------------------------------------------------------------ shutdown

    def close(self, autocommit: bool = True) -> None:
        if self._closed:
            return
        try:
            if autocommit and self.enable_auto_commit and self._positions:
                self.commit()
        finally:
            self._closed = True
            self._cancel_inflight()
            self._close_fetch_sessions()
            if self._group is not None:
                self._group.leave()
            self.view.close()

    def _close_fetch_sessions(self) -> None:
        """Tell each broker its session with this consumer is over (epoch -1, as Kafka 3's consumer does
        on close): freed now rather than held until evicted. Best effort, one short call per broker."""
        calls = []
        for leader, session in self._sessions.items():
            broker = self.view.brokers.get(leader)
            if not session.session_id or broker is None:
                continue
            req = pb.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=self.fetch_max_bytes,
                                  session_id=session.session_id, session_epoch=FINAL_EPOCH)
            try:
                calls.append(self.view.connection(broker).api.Fetch.future(req, timeout=1.0))
            except (errors.KafkaError, grpc.RpcError, OSError) as e:
                log.debug("cannot close the fetch session with %d: %s", leader, e)
        for call in calls:
            try:
                call.result()
            except grpc.RpcError as e:
                log.debug("closing a fetch session failed: %s", e)
        self._sessions.clear()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
