"""The log of one partition replica: an ordered list of segments (Kafka's Log).

Theory of operation
-------------------
Offsets: ``log_start_offset`` is the first offset still readable,
``log_end_offset`` (LEO, SPEC S2.2) the offset the next record will get,
``high_watermark`` (SPEC S3) the end of what is committed; always
``log_start_offset <= high_watermark <= log_end_offset``. The replication
layer decides the high watermark and hands it in; the log only stores it and
keeps it within bounds.

Appends: the leader path validates each batch (framing, CRC, counts) without
decoding records and writes it with a new 16-byte prefix carrying the
assigned ``base_offset`` and the leader epoch - one ``writev`` per request.
The follower path writes the leader's bytes unchanged after checking that
they continue the log. Both feed the leader-epoch cache (SPEC S8.1).

Reads return raw whole batches, bounded by ``max_offset`` (the high
watermark for consumers, SPEC S3.2) and by ``max_bytes`` (but at least one
batch, so a consumer always makes progress).

Recovery (SPEC S2.4): segments below the recovery point were flushed and are
trusted; the rest are re-validated and a torn tail is cut off. Retention
(SPEC S2.3) deletes whole inactive segments below the high watermark.

Rolling a segment makes the old one durable before the recovery point may pass
it. By default (tools, tests) that fsync happens at once. A broker sets
``defer_roll_flush``, as Kafka schedules its flush-log task: the roll queues a
``RolledSegment`` (a duplicate of the segment's file descriptor, so the fsync
stays valid whatever happens to the segment meanwhile) in ``rolled_unflushed``,
the log manager fsyncs it on its flusher thread - a 1 GiB segment's dirty pages
no longer stall the event loop - and hands it back to ``on_rolled_flushed``,
which moves the recovery point only if no truncation came in between (the
offsets the fsync covered may since have been cut off and written again).

Leader-epoch checkpoint (SPEC S8.1, S2.4; Kafka's KAFKA-15046): an append that
starts a new leader epoch (``append_as_leader``, ``append_as_follower``, and
``assign_epoch_start_offset`` when a replica becomes leader, S8.2) only changes
the in-memory cache and marks it dirty - no file write, no fsync. After an
election every partition's first batch starts an epoch, and rewriting and
fsyncing thousands of checkpoint files on the event loop stalled the broker.
The file is written when the recovery point moves instead (``flush``, a roll,
``on_rolled_flushed``) and by ``close``, always before the recovery point passes
the new entries. The invariant: every epoch entry starting below any recovery
point this log has had (one a recovery-point checkpoint may hold) is in the
durable file. Entries at or above it are rebuilt after a crash: ``_load``
replaces the cache's entries from the first recovered segment on with the
epochs of its batch headers (Kafka's ``LogSegment.recover`` assigning each
batch's ``partitionLeaderEpoch``). A change below that point - an append after
a truncation below an earlier recovery point - is still written at once.
Truncations of the cache (``truncate_to``, ``truncate_fully_and_start_at``,
``truncate_epochs_from_end``, retention) are written and fsynced at once, as
before: a restart must not resurrect an epoch that was cut (KIP-279); that
write also carries, and clears, any dirty entries.

Transactions (KIP-98): transactional batches are validated and deduplicated
like idempotent ones; COMMIT/ABORT markers are written only by
``append_txn_marker`` (WriteTxnMarkers on the leader), fenced by the producer
state (producer and coordinator epochs), and copied as they are by followers.
The producer state (``producer_state.py``) knows the open transactions, so the
log answers the last stable offset (``last_stable_offset``: min(first unstable
offset, HW), never below the log start). An aborted transaction's entry goes to
the ``.txnindex`` of the segment its marker is written to (``txn_index.py``);
read_committed fetches collect them with ``collect_aborted_transactions``.
The producer state is derived from the log and rebuilt lazily (restart,
truncation); a rebuild also rebuilds the aborted-transaction index of any
segment whose entries may be missing (recovered after a crash) or disagree
with the markers it replayed. Truncation cuts the entries whose marker it
removes, retention deletes them with their segment, and a cleaned segment
takes over the entries of the segments it replaces.
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from broker.log.checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    CorruptCheckpointError,
    fsync_dir,
    read_epoch_entries,
    write_epoch_entries,
)
from broker.log.cleaner import check_keys_for_compaction
from broker.log.config import LogConfig
from broker.log.epoch_cache import LeaderEpochCache
from broker.log.producer_state import CompletedTxn, ProducerStateManager, VerificationGuard
from broker.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment, segment_file_name
from broker.log.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, collect_from_segments
from proto.errors import (
    CorruptMessageError,
    InvalidRequestError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceNumberError,
    RecordListTooLargeError,
    UnknownProducerIdError,
)
from proto.record_batch import (
    CODEC_BY_NAME,
    COMPRESSION_NONE,
    CONTROL_MASK,
    LOG_OVERHEAD,
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    BatchesInfo,
    BatchHeader,
    BatchInfo,
    Record,
    TxnMarker,
    decode_txn_marker,
    encode_control_batch,
    iter_headers,
    recompress_batches,
    set_log_append_time,
    stamp_prefix,
    validate_batches,
)

logger = logging.getLogger(__name__)

# The largest offset a log may reach (Kafka's Long.MaxValue, less one so LEO stays an int64).
MAX_OFFSET = (1 << 63) - 2


MAX_ROLLS_IN_FLIGHT = 8

# A cleaned segment being written, and one committed to replace the segments it was cleaned from.
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"


@dataclass(frozen=True, slots=True)
class RolledSegment:
    """A rolled segment waiting for its fsync: everything below ``up_to`` is in it or before it."""

    fd: int  # a duplicate of the segment's descriptor, closed by whoever fsyncs it
    up_to: int
    truncations: int  # the log's truncation count when it rolled


class LogAppendInfo(NamedTuple):
    """What one append did. A NamedTuple, not a frozen dataclass: one is built per append on the
    leader and on every follower, and a frozen dataclass's ``__init__`` (a ``object.__setattr__``
    per field) cost 1.9 us against 0.5 us, ~8% of the cluster's CPU per record at thousands of
    partitions, where every batch holds one record (issue 29)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time_ms: int
    record_count: int
    batch_count: int
    valid_bytes: int
    log_start_offset: int
    # A retried idempotent batch that was already appended: nothing was written now.
    duplicate: bool = False


def parse_topic_partition(dir_name: str) -> tuple[str, int]:
    """``topic-3`` -> ("topic", 3); topic names may themselves contain dashes."""
    topic, sep, part = dir_name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        raise KafkaStorageError(f"{dir_name!r} is not a topic-partition directory name")
    return topic, int(part)


class OffsetsClock:
    """Ticks whenever a log's high watermark, log start offset or recovery point may have changed:
    the offsets the log manager checkpoints. The manager gives one clock to all its logs, and
    looks at no log for a checkpoint when it has not ticked since the last one (an idle broker
    walked every partition every 5 s for its high-watermark checkpoint, issue 29)."""

    __slots__ = ("ticks",)

    def __init__(self) -> None:
        self.ticks = 0


class Log:
    """A partition replica's log. Not thread-safe: one event loop owns it."""

    def __init__(self, directory: Path, topic: str, partition: int, config: LogConfig) -> None:
        self.dir = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.high_watermark = 0
        self.recovery_point = 0
        # Ticked below wherever those three offsets are set after the log is open (its own
        # clock until a log manager gives it the manager's).
        self.offsets_clock = OffsetsClock()
        self.epoch_cache = LeaderEpochCache()
        self._unflushed_records = 0
        self._last_flush_ms = 0
        self.recovered_bytes_truncated = 0
        # Corrupt tails cut off while loading (minikafka_log_corrupt_tails_total).
        self.corrupt_tails = 0
        # Idempotent producers' state, derived from batch headers; rebuilt lazily after
        # a restart or a truncation.
        self._producer_state: ProducerStateManager | None = None
        # Rolled segments' fsyncs off the event loop (see the module docstring): ``on_roll`` is
        # told of each (the log manager queues its fsync); past MAX_ROLLS_IN_FLIGHT unfinished
        # ones the roll flushes at once, so descriptors and unflushed data stay bounded.
        self.defer_roll_flush = False
        self.on_roll: Callable[[Log], None] | None = None
        self.rolled_unflushed: list[RolledSegment] = []
        self.rolls_in_flight = 0
        self._truncations = 0
        # The leader-epoch checkpoint file (see the module docstring): the lowest start offset of
        # an epoch entry changed since it was last written (None: it matches the cache), and the
        # highest recovery point this log has had (a recovery-point checkpoint may hold it; an
        # entry below it must be in the file before it may be relied on, so it is written at once).
        self._epochs_dirty_from: int | None = None
        # A new log's directory entry is made durable (its parent fsynced) with the log's first
        # flush, not at creation (Kafka's flushParentDir on first flush): creating 10,000 logs
        # fsynced the log directory 10,000 times on the event loop. Until the first flush nothing
        # of the log is durable anyway; the LogManager sets this for the logs it creates.
        self.parent_dir_unsynced = False
        self._max_recovery_point = 0

    # ------------------------------------------------------------ opening

    @classmethod
    def open(cls, directory: Path, topic: str, partition: int, config: LogConfig, *, now_ms: int,
             recovery_point: int = 0, log_start_offset: int = 0, high_watermark: int = 0,
             clean_shutdown: bool = False) -> Log:
        directory.mkdir(parents=True, exist_ok=True)
        log = cls(directory, topic, partition, config)
        log._last_flush_ms = now_ms
        log._load(now_ms, recovery_point, log_start_offset, clean_shutdown)
        log.high_watermark = min(max(high_watermark, log.log_start_offset), log.log_end_offset)
        return log

    def _load(self, now_ms: int, recovery_point: int, log_start_offset: int, clean: bool) -> None:
        # One listing, not a glob per kind of file: creating 10,000 logs spent a third of their
        # time in four globs of each (empty) new directory.
        names = os.listdir(self.dir)
        for name in names:
            if name.endswith(".tmp"):
                (self.dir / name).unlink()
        if any(name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX)) for name in names):
            self._complete_swaps(names)
            names = os.listdir(self.dir)
        bases = sorted(int(n[: -len(LOG_SUFFIX)]) for n in names
                       if n.endswith(LOG_SUFFIX) and n[: -len(LOG_SUFFIX)].isdigit())
        # Index files without a data file are leftovers of a deleted segment.
        for name in names:
            if name.endswith((".index", ".timeindex", TXN_INDEX_SUFFIX)):
                stem = name.split(".")[0]
                if stem.isdigit() and int(stem) not in bases:
                    (self.dir / name).unlink()
        # Segments below the recovery point were flushed; from the segment
        # holding it onwards everything must be re-validated after a crash.
        first_unflushed = len(bases)
        if not clean:
            first_unflushed = max(0, bisect.bisect_right(bases, recovery_point) - 1)
        expected = bases[0] if bases else 0
        for i, base in enumerate(bases):
            seg = LogSegment(self.dir, base, self.config, now_ms)
            if base < expected:
                # Segments overlap: this one cannot follow the last; it and all after it are a corrupt tail.
                seg.delete()
                self._drop_corrupt_tail(bases[i + 1:], now_ms, base, f"segment {base} overlaps offsets below "
                                                                     f"{expected}")
                break
            self._segments.append(seg)
            self._bases.append(base)
            before = seg.size
            if i < first_unflushed:
                seg.load()
                if seg.recovery_defect is None and seg.size == before:
                    expected = seg.next_offset
                    continue
            else:
                seg.recover()
            self.recovered_bytes_truncated += before - seg.size
            seg.flush()  # what survived recovery is now durable: the recovery point may pass it
            expected = seg.next_offset
            if seg.recovery_defect is not None:
                # A torn or corrupt segment ends the log: anything after it cannot be trusted (S2.4, S13.5).
                self._drop_corrupt_tail(bases[i + 1:], now_ms, seg.recovered_next_offset, seg.recovery_defect)
                break
        # The segments recovered above (none after a clean shutdown): the epochs that start in
        # them may not have reached the checkpoint file (KAFKA-15046).
        recovered = self._segments[first_unflushed:]
        if not self._segments:
            self._add_segment(max(0, log_start_offset), now_ms)
        self.log_end_offset = self._segments[-1].next_offset
        self.log_start_offset = min(max(log_start_offset, self._bases[0]), self.log_end_offset)
        self.recovery_point = self.log_end_offset
        self._max_recovery_point = max(recovery_point, self.recovery_point)
        try:
            self.epoch_cache = LeaderEpochCache(read_epoch_entries(self.dir / LEADER_EPOCH_CHECKPOINT))
            changed = self._rebuild_epochs_from(recovered)
        except CorruptCheckpointError as e:
            # The batches carry their leader epochs: rebuild the cache from them (headers only).
            logger.warning("%s-%d: %s; rebuilding the leader epoch cache from the log", self.topic, self.partition, e)
            self.epoch_cache = LeaderEpochCache()
            self._assign_epochs_of(self.iter_batch_headers())
            changed = True
        changed |= self.epoch_cache.truncate_from_end(self.log_end_offset)
        changed |= self.epoch_cache.truncate_from_start(self.log_start_offset)
        if changed:
            self._checkpoint_epochs()  # start-up: synchronous

    def _complete_swaps(self, names: list[str]) -> None:
        """A clean interrupted by a crash (Kafka's rules): ``.cleaned`` files were not yet committed
        and go; a ``<base>.log.swap`` was (broker/log/log_cleaner.py renames a cleaned segment so only
        once it is complete and fsynced), so the swap is finished - every segment whose base lies in
        the offsets it covers goes, and the swap files take their final names."""
        for name in names:
            if name.endswith(CLEANED_SUFFIX):
                (self.dir / name).unlink(missing_ok=True)
        swap_logs = sorted(n for n in names if n.endswith(LOG_SUFFIX + SWAP_SUFFIX)
                           and n[: -len(LOG_SUFFIX + SWAP_SUFFIX)].isdigit())
        bases = sorted(int(n[: -len(LOG_SUFFIX)]) for n in names
                       if n.endswith(LOG_SUFFIX) and n[: -len(LOG_SUFFIX)].isdigit())
        for swap in swap_logs:
            base = int(swap[: -len(LOG_SUFFIX + SWAP_SUFFIX)])
            data = (self.dir / swap).read_bytes()
            end = base
            for _pos, header in iter_headers(data):
                end = max(end, header.next_offset)
            for old in bases:
                if base <= old < max(end, base + 1):
                    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                        (self.dir / segment_file_name(old, suffix)).unlink(missing_ok=True)
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                swapped = self.dir / (segment_file_name(base, suffix) + SWAP_SUFFIX)
                if swapped.exists():
                    os.replace(swapped, self.dir / segment_file_name(base, suffix))
                else:  # an index that was never written (an empty segment): rebuilt from the data
                    (self.dir / segment_file_name(base, suffix)).unlink(missing_ok=True)
            logger.warning("%s-%d: completed the swap of a cleaned segment at %d interrupted by a crash",
                           self.topic, self.partition, base)
        for name in os.listdir(self.dir):  # index swaps without their data file
            if name.endswith(SWAP_SUFFIX):
                (self.dir / name).unlink(missing_ok=True)
        fsync_dir(self.dir)

    def replace_segments(self, old: list[LogSegment], base_offset: int, now_ms: int) -> LogSegment:
        """Put the cleaned segment ``<base_offset>.*.cleaned`` (complete and fsynced) in place of
        ``old``, consecutive inactive segments of this log (Kafka's ``replaceSegments``): renamed to
        ``.swap`` (the commit point: from here a crash completes the swap, ``_complete_swaps``), the
        old segments deleted, the swap files renamed to their final names, the new segment loaded."""
        i = self._segments.index(old[0])
        if self._segments[i:i + len(old)] != old or i + len(old) >= len(self._segments):
            raise KafkaStorageError(f"{self.topic}-{self.partition}: the segments to replace are not the log's")
        # The cleaned segment keeps the aborted transactions of those it replaces (markers are kept).
        aborted = [e for seg in old for e in seg.txn_index.entries]
        txn_cleaned = self.dir / (segment_file_name(base_offset, TXN_INDEX_SUFFIX) + CLEANED_SUFFIX)
        if aborted:
            txn_cleaned.write_bytes(b"".join(e.encode() for e in aborted))
            with open(txn_cleaned, "rb") as f:
                os.fsync(f.fileno())
        names = [segment_file_name(base_offset, suffix)
                 for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)]
        for name in names:
            cleaned = self.dir / (name + CLEANED_SUFFIX)
            if cleaned.exists():
                os.replace(cleaned, self.dir / (name + SWAP_SUFFIX))
        fsync_dir(self.dir)
        for seg in old:
            seg.delete()
        for name in names:
            swapped = self.dir / (name + SWAP_SUFFIX)
            if swapped.exists():
                os.replace(swapped, self.dir / name)
        fsync_dir(self.dir)
        seg = LogSegment(self.dir, base_offset, self.config, now_ms)
        seg.load()
        if seg.txn_index_stale:  # load fell back to recovering the data: the entries are known here
            seg.txn_index.replace(aborted)
            seg.txn_index_stale = False
        self._segments[i:i + len(old)] = [seg]
        self._bases[i:i + len(old)] = [base_offset]
        return seg

    def _rebuild_epochs_from(self, recovered: list[LogSegment]) -> bool:
        """After a crash: the entries starting in the recovered segments are taken from their batch
        headers, in offset order (Kafka's ``LogSegment.recover``), replacing what the checkpoint file
        says there - appends only mark the cache dirty, so the file may lack them, or hold an entry a
        later append replaced. A batch's epoch is assigned only when above the latest one: a lower
        epoch (impossible in a well-formed log) must not erase the entries before it."""
        if not recovered:
            return False
        before = self.epoch_cache.pairs()
        self.epoch_cache.truncate_from_end(recovered[0].base_offset)
        self._assign_epochs_of(header for seg in recovered for header in seg.iter_headers())
        return self.epoch_cache.pairs() != before

    def _assign_epochs_of(self, headers: Iterable[BatchHeader]) -> None:
        cache = self.epoch_cache
        for header in headers:
            if header.partition_leader_epoch > cache.latest_epoch:
                cache.assign(header.partition_leader_epoch, header.base_offset)

    def _drop_corrupt_tail(self, later_bases: list[int], now_ms: int, offset: int, defect: str) -> None:
        self.corrupt_tails += 1
        for later in later_bases:
            seg = LogSegment(self.dir, later, self.config, now_ms)
            self.recovered_bytes_truncated += seg.size
            seg.delete()
        logger.warning("%s-%d: corrupt log tail from offset %d (%s): truncated there, %d later segment(s) removed",
                    self.topic, self.partition, offset, defect, len(later_bases))

    def _add_segment(self, base_offset: int, now_ms: int) -> LogSegment:
        seg = LogSegment(self.dir, base_offset, self.config, now_ms)
        self._segments.append(seg)
        self._bases.append(base_offset)
        return seg

    # ------------------------------------------------------------ properties

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def size(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def latest_epoch(self) -> int:
        return self.epoch_cache.latest_epoch

    # ------------------------------------------------------------ appends

    def append_as_leader(self, records: bytes, leader_epoch: int, now_ms: int,
                         max_producer_id: int | None = None, verify_txn: bool = False,
                         verification_guard: VerificationGuard | None = None) -> LogAppendInfo:
        """Validate every record (SPEC S13.1, Kafka's LogValidator), assign offsets and the leader
        epoch, write. Raises typed errors for bad input; nothing is written unless every batch
        checks out. ``verify_txn`` (transaction.partition.verification.enable, KIP-890): a
        transactional batch of a producer with no transaction open here needs the producer's
        current ``verification_guard`` (InvalidTxnStateError otherwise)."""
        cfg = self.config
        min_ts, max_ts = MIN_TIMESTAMP, MAX_TIMESTAMP
        if cfg.message_timestamp_type == "CreateTime":
            # message.timestamp.difference.max.ms (Kafka's; LogAppendTime topics overwrite timestamps).
            min_ts = max(min_ts, now_ms - cfg.message_timestamp_difference_max_ms)
            max_ts = min(max_ts, now_ms + cfg.message_timestamp_difference_max_ms)
        info = validate_batches(records, deep=True, max_batch_bytes=cfg.max_message_bytes, min_timestamp=min_ts,
                                max_timestamp=max_ts)
        if cfg.compact:  # only compacted logs pay for decoding the records (Kafka's LogValidator)
            check_keys_for_compaction(records, info, self.topic, self.partition)
        if cfg.compression_type != "producer":  # only these topics pay for it (Kafka's LogValidator)
            codec = COMPRESSION_NONE if cfg.compression_type == "uncompressed" else CODEC_BY_NAME[cfg.compression_type]
            rebuilt = recompress_batches(records, info, codec, cfg.max_message_bytes)
            if rebuilt is not None:
                records = rebuilt
                info = validate_batches(records, max_batch_bytes=cfg.max_message_bytes)
        self._check_fits(len(records))
        idempotent = info.producer_batches
        if idempotent and max_producer_id is not None:
            unknown = max(b.producer_id for b in idempotent)
            if unknown > max_producer_id:
                raise UnknownProducerIdError(f"producer id {unknown} was never allocated by this cluster")
        if idempotent:
            dup = self._check_producer_state(idempotent, info, verify_txn, verification_guard)
            if dup is not None:
                return dup
        if leader_epoch >= 0:
            self._epochs_changed(self.epoch_cache.assign_changed_from(leader_epoch, self.log_end_offset))
        append_time = -1
        src: bytes | bytearray = records
        if cfg.message_timestamp_type == "LogAppendTime":
            src = _with_log_append_time(records, info, now_ms)
            append_time = now_ms
        mv = memoryview(src)
        first = offset = self.log_end_offset
        pieces: list[bytes | memoryview] = []
        offsets: dict[int, int] = {}
        for b in info.batches:
            offsets[b.position] = offset
            pieces.append(stamp_prefix(offset, b.size - LOG_OVERHEAD, leader_epoch))
            pieces.append(mv[b.position + 16:b.position + b.size])
            offset += b.offset_span
        max_ts = append_time if append_time >= 0 else info.max_timestamp
        result = self._write(first, offset, pieces, len(records), info, max_ts,
                             first + info.shallow_offset_of_max_timestamp, append_time, now_ms)
        if idempotent and self._producer_state is not None:
            for b in idempotent:
                self._producer_state.update(b, offsets[b.position], max_ts if append_time >= 0 else None)
        return result

    def _check_producer_state(self, idempotent: tuple[BatchInfo, ...], info: BatchesInfo, verify_txn: bool,
                              guard: VerificationGuard | None) -> LogAppendInfo | None:
        """KIP-98 on the leader: a retried batch gets its original offsets back (nothing written);
        a gap or an old epoch is refused before anything is written; so is, with ``verify_txn``, a
        transactional batch the coordinator did not verify (KIP-890; after the duplicate check, as
        Kafka's ``analyzeAndValidateProducerState``)."""
        state = self.producer_state
        for b in idempotent:
            dup = state.check(b, log_was_trimmed=self.log_start_offset > 0)
            if dup is None:
                if verify_txn:
                    state.check_verified(b, guard)
                continue
            if info.batch_count != 1:
                raise OutOfOrderSequenceNumberError(
                    "a retried idempotent batch must be sent on its own, not with other batches")
            return LogAppendInfo(dup.first_offset, dup.last_offset, b.max_timestamp, dup.last_offset, -1,
                                 info.record_count, 1, 0, self.log_start_offset, duplicate=True)
        return None

    @property
    def producer_state(self) -> ProducerStateManager:
        if self._producer_state is None:
            state = ProducerStateManager()
            completed = state.rebuild(self._iter_batches_with_markers())
            state.prune_replicated(self.high_watermark)
            self._producer_state = state
            self._rebuild_txn_indexes(completed)
        return self._producer_state

    def _iter_batches_with_markers(self) -> Iterator[tuple[BatchHeader, TxnMarker | None]]:
        for seg in list(self._segments):
            batches = seg.iter_batches_with_markers()
            while True:
                try:
                    header, marker = next(batches)
                except StopIteration:
                    break
                except CorruptMessageError as e:  # a control record the leader should never have written
                    logger.warning("%s-%d: unreadable transaction marker: %s", self.topic, self.partition, e)
                    continue
                if header.next_offset > self.log_start_offset:
                    yield header, marker

    def _rebuild_txn_indexes(self, completed: list[CompletedTxn]) -> None:
        """Make every segment's aborted-transaction index hold the aborted transactions whose
        markers it holds, as the producer state replayed them (a crash or a bad file left a
        segment without them; a trimmed log start may shorten a transaction's first offset)."""
        by_segment: dict[int, list[AbortedTxn]] = {}
        for txn in completed:
            if txn.is_aborted:
                i = max(0, bisect.bisect_right(self._bases, txn.last_offset) - 1)
                by_segment.setdefault(i, []).append(
                    AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset))
        for i, seg in enumerate(self._segments):
            if seg.base_offset < self.log_start_offset and not seg.txn_index_stale and i not in by_segment:
                continue  # below the log start the replay saw nothing: keep what the file says
            expected = by_segment.get(i, [])
            if seg.txn_index.replace(expected) and not seg.txn_index_stale:
                logger.info("%s-%d: rebuilt the aborted-transaction index of segment %d", self.topic,
                            self.partition, seg.base_offset)
            seg.txn_index_stale = False

    def _on_txn_completed(self, txn: CompletedTxn | None) -> None:
        if txn is not None and txn.is_aborted:
            self._segments[-1].txn_index.append(
                AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset))

    def append_txn_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                          leader_epoch: int, now_ms: int) -> LogAppendInfo:
        """Write a COMMIT/ABORT marker for ``producer_id`` (WriteTxnMarkers on the leader; the only
        way a control batch enters a log). INVALID_PRODUCER_EPOCH for an older producer epoch,
        TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch than its last marker's."""
        state = self.producer_state
        state.check_marker(producer_id, producer_epoch, coordinator_epoch)
        batch = encode_control_batch(producer_id=producer_id, producer_epoch=producer_epoch, commit=commit,
                                     coordinator_epoch=coordinator_epoch, timestamp=now_ms)
        info = validate_batches(batch)
        if leader_epoch >= 0:
            self._epochs_changed(self.epoch_cache.assign_changed_from(leader_epoch, self.log_end_offset))
        first = self.log_end_offset
        pieces: list[bytes | memoryview] = [stamp_prefix(first, len(batch) - LOG_OVERHEAD, leader_epoch),
                                            memoryview(batch)[16:]]
        result = self._write(first, first + 1, pieces, len(batch), info, now_ms, first, -1, now_ms)
        self._on_txn_completed(state.update_marker(producer_id, producer_epoch, TxnMarker(commit, coordinator_epoch),
                                                   first, now_ms))
        return result

    def last_stable_offset(self) -> int:
        """KIP-98's LSO: min(first offset of an undecided transaction, HW), not below the log start
        (Kafka's ``Log.lastStableOffset``). Builds the producer state if needed."""
        return max(self.producer_state.last_stable_offset(self.high_watermark), self.log_start_offset)

    def last_stable_offset_if_known(self) -> int:
        """The LSO when the producer state is at hand, else the HW (what read_uncommitted answers
        carry: they do not pay for a rebuild)."""
        if self._producer_state is None:
            return self.high_watermark
        return self.last_stable_offset()

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound) (a read_committed fetch)."""
        if upper_bound <= fetch_offset:
            return []
        i = max(0, bisect.bisect_right(self._bases, fetch_offset) - 1)
        if self._producer_state is not None and any(seg.txn_index_stale for seg in self._segments[i:]):
            self._producer_state = None  # an index lost its entries since the state was built: replay
        self.producer_state  # noqa: B018 - a rebuild first rebuilds the indexes of recovered segments
        return collect_from_segments((seg.txn_index.entries for seg in self._segments[i:]), fetch_offset,
                                     upper_bound)

    def iter_batch_headers(self) -> Iterator[BatchHeader]:
        """Every batch header from the log start on, in offset order (record bodies are not read)."""
        for seg in list(self._segments):
            for header in seg.iter_headers():
                if header.next_offset > self.log_start_offset:
                    yield header

    def append_as_follower(self, records: bytes, now_ms: int) -> LogAppendInfo:
        """Append the leader's batches as they are: framing and CRC are checked (the leader validated
        the records), and they must continue this log with contiguous offsets."""
        info = validate_batches(records)
        self._check_fits(len(records))
        first = info.batches[0].base_offset
        if first < self.log_end_offset:
            raise InvalidRequestError(
                f"{self.topic}-{self.partition}: follower append at {first} below log end {self.log_end_offset}")
        expected = first
        for b in info.batches:
            # Offsets only grow; gaps are where the leader's cleaner removed records (compaction).
            if b.base_offset < expected:
                raise InvalidRequestError(
                    f"{self.topic}-{self.partition}: batch at offset {b.base_offset} goes back below {expected}")
            if b.partition_leader_epoch < 0:
                raise InvalidRequestError(
                    f"{self.topic}-{self.partition}: batch at offset {b.base_offset} has no leader epoch")
            expected = b.base_offset + b.offset_span
        if expected > MAX_OFFSET:
            raise InvalidRequestError(f"{self.topic}-{self.partition}: offsets beyond {MAX_OFFSET}")
        changed_from: int | None = None
        for b in info.batches:
            c = self.epoch_cache.assign_changed_from(b.partition_leader_epoch, b.base_offset)
            if c is not None and (changed_from is None or c < changed_from):
                changed_from = c
        self._epochs_changed(changed_from)
        result = self._write(first, expected, [records], len(records), info, info.max_timestamp,
                             first + info.shallow_offset_of_max_timestamp, -1, now_ms)
        has_markers = any(b.attributes & CONTROL_MASK for b in info.batches)
        state = self._producer_state
        if state is None and has_markers:
            # A marker's index entry needs the transaction's first offset: replay the log (this
            # chunk included; the rebuild writes the aborted entries).
            self.producer_state  # noqa: B018
        elif state is not None:
            for b in info.producer_batches:
                if not b.attributes & CONTROL_MASK:
                    state.update(b, b.base_offset)
                    continue
                try:
                    marker = decode_txn_marker(records, b.position)
                except CorruptMessageError as e:
                    logger.warning("%s-%d: unreadable transaction marker at %d: %s", self.topic, self.partition,
                                   b.base_offset, e)
                    continue
                if marker is not None:
                    self._on_txn_completed(state.update_marker(b.producer_id, b.producer_epoch, marker,
                                                               b.base_offset, b.max_timestamp))
        return result

    def _check_fits(self, nbytes: int) -> None:
        if nbytes > self.config.segment_bytes:
            raise RecordListTooLargeError(
                f"{nbytes} bytes of records exceed segment.bytes={self.config.segment_bytes}")

    def _write(self, first: int, next_offset: int, pieces: list[bytes | memoryview], nbytes: int,
               info: BatchesInfo, max_ts: int, offset_of_max_ts: int, append_time: int,
               now_ms: int) -> LogAppendInfo:
        seg = self._segments[-1]
        if seg.should_roll(nbytes, first, next_offset, now_ms):
            seg = self._roll(first, now_ms)
        elif seg.size == 0 and seg.base_offset != first:
            # An empty active segment (after truncation) must be named by its first offset.
            seg.delete()
            self._segments.pop()
            self._bases.pop()
            seg = self._add_segment(first, now_ms)
        seg.append(first, next_offset, pieces, nbytes, max_ts, offset_of_max_ts, now_ms, info.batches[0].size)
        self.log_end_offset = next_offset
        self._unflushed_records += info.record_count
        if self._unflushed_records >= self.config.flush_messages:
            self.flush()
        return LogAppendInfo(first, next_offset - 1, max_ts, offset_of_max_ts, append_time,
                             info.record_count, info.batch_count, nbytes, self.log_start_offset)

    def roll(self, now_ms: int) -> LogSegment:
        """Start a new active segment at the LEO (no-op if the active one is empty)."""
        if self._segments[-1].size == 0:
            return self._segments[-1]
        return self._roll(self.log_end_offset, now_ms)

    def _roll(self, base_offset: int, now_ms: int) -> LogSegment:
        old = self._segments[-1]
        if self.defer_roll_flush and self.rolls_in_flight < MAX_ROLLS_IN_FLIGHT:
            old.on_become_inactive(flush_data=False)
            self.rolled_unflushed.append(RolledSegment(old.dup_fd(), old.next_offset, self._truncations))
            self.rolls_in_flight += 1
            if self.on_roll is not None:
                self.on_roll(self)
        elif self.defer_roll_flush:
            old.on_become_inactive(flush_data=False)
            self.flush()  # also covers the rolled segments still in flight
        else:
            old.on_become_inactive()  # flushes: everything below the new segment is durable
            self._advance_recovery_point(old.next_offset)
        return self._add_segment(base_offset, now_ms)

    def take_rolled_unflushed(self) -> list[RolledSegment]:
        out, self.rolled_unflushed = self.rolled_unflushed, []
        return out

    def on_rolled_flushed(self, rolled: RolledSegment, ok: bool = True) -> None:
        """``rolled`` is on disk (fsynced in the order it rolled): the recovery point may pass it,
        unless the log was truncated since - then what it covered may have been written again.
        ``ok=False``: the fsync failed; the recovery point stays (a crash recovers from there)."""
        self.rolls_in_flight = max(0, self.rolls_in_flight - 1)
        if ok and rolled.truncations == self._truncations:
            self._advance_recovery_point(min(rolled.up_to, self.log_end_offset))

    # ------------------------------------------------------------ reads

    def read(self, start_offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True) -> bytes:
        """Raw whole batches from the batch holding ``start_offset``; ``max_offset`` excluded."""
        if max_bytes < 0:
            raise InvalidRequestError(f"max_bytes must be >= 0, got {max_bytes}")
        if start_offset < self.log_start_offset or start_offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is outside [{self.log_start_offset}, {self.log_end_offset}] "
                f"of {self.topic}-{self.partition}")
        limit = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        if start_offset >= limit:
            return b""
        i = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
        while i < len(self._segments):
            seg = self._segments[i]
            if limit >= seg.next_offset:
                max_position = seg.size
            else:
                found = seg.translate_offset(limit)
                max_position = found[0] if found else seg.size
            data = seg.read(start_offset, max_bytes, max_position, min_one_batch)
            if data is not None:
                return data
            i += 1
        return b""

    def offset_for_timestamp(self, timestamp: int) -> Record | None:
        """The first record with timestamp >= ``timestamp`` (ListOffsets by time)."""
        for seg in self._segments:
            if seg.max_timestamp >= timestamp:
                rec = seg.find_offset_by_timestamp(timestamp, self.log_start_offset)
                if rec is not None:
                    return rec
        return None

    # ------------------------------------------------------------ high watermark and epochs

    def update_high_watermark(self, offset: int) -> int:
        """Store the high watermark, clamped to [log_start_offset, LEO]; returns it."""
        self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        self.offsets_clock.ticks += 1
        if self._producer_state is not None:
            self._producer_state.prune_replicated(self.high_watermark)
        return self.high_watermark

    def maybe_increment_log_start_offset(self, new_offset: int) -> bool:
        """Move the log start offset up to ``new_offset`` (Kafka's maybeIncrementLogStartOffset:
        DeleteRecords on the leader, the leader's log start on a follower); never beyond the high
        watermark (OFFSET_OUT_OF_RANGE). Offsets below it are unreadable at once; retention deletes
        the segments wholly below it. Returns True when it moved (the caller checkpoints it)."""
        if new_offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot move the log start offset of {self.topic}-{self.partition} to {new_offset}: "
                f"beyond the high watermark {self.high_watermark}")
        if new_offset <= self.log_start_offset:
            return False
        self.log_start_offset = new_offset
        self.offsets_clock.ticks += 1
        if self.epoch_cache.truncate_from_start(new_offset):
            self._checkpoint_epochs()
        return True

    def assign_epoch_start_offset(self, epoch: int, start_offset: int) -> None:
        """S8.2, on becoming leader: like an append, this only marks the checkpoint dirty."""
        self._epochs_changed(self.epoch_cache.assign_changed_from(epoch, start_offset))

    def truncate_epochs_from_end(self, end_offset: int) -> None:
        """Forget epochs starting at or after ``end_offset`` (a follower asking again, KIP-279), and
        checkpoint it, so a restart does not resurrect them."""
        if self.epoch_cache.truncate_from_end(end_offset):
            self._checkpoint_epochs()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.epoch_cache.end_offset_for(epoch, self.log_end_offset)

    def _epochs_changed(self, changed_from: int | None) -> None:
        """An append changed the epoch cache from ``changed_from`` on (None: it did not). Not
        written now (KAFKA-15046): the next move of the recovery point past it writes it, and a
        crash before that rebuilds it from the batches. Unless a recovery point this log has had
        lies above it (an append after a truncation): a restart may trust the segments up to there
        without reading their batches, so the file must have it now."""
        if changed_from is None:
            return
        if changed_from < self._max_recovery_point:
            self._checkpoint_epochs()
        elif self._epochs_dirty_from is None or changed_from < self._epochs_dirty_from:
            self._epochs_dirty_from = changed_from

    def _maybe_sync_parent_dir(self) -> None:
        if self.parent_dir_unsynced:
            fsync_dir(self.dir.parent)
            self.parent_dir_unsynced = False

    def _checkpoint_epochs(self, durable: bool = True) -> None:
        """Write the whole cache durably (atomic rename, fsynced; ``durable=False``: the caller
        syncs the file system); the file then matches it."""
        write_epoch_entries(self.dir / LEADER_EPOCH_CHECKPOINT, self.epoch_cache.pairs(), durable)
        self._epochs_dirty_from = None

    def _advance_recovery_point(self, offset: int) -> None:
        """Move the recovery point up to ``offset`` (data below it is durable), writing the epoch
        checkpoint first if it lacks entries that start below there."""
        if offset <= self.recovery_point:
            return
        self._maybe_sync_parent_dir()
        if self._epochs_dirty_from is not None and self._epochs_dirty_from < offset:
            self._checkpoint_epochs()
        self.recovery_point = offset
        self.offsets_clock.ticks += 1
        self._max_recovery_point = max(self._max_recovery_point, offset)

    # ------------------------------------------------------------ truncation

    def truncate_to(self, target_offset: int) -> bool:
        """Remove every batch holding offsets >= ``target_offset`` (a whole batch, as Kafka).
        Returns True when anything was removed."""
        if target_offset < 0:
            raise InvalidRequestError(f"cannot truncate to a negative offset {target_offset}")
        if target_offset >= self.log_end_offset:
            return False
        if target_offset < self._bases[0]:
            self.truncate_fully_and_start_at(target_offset)
            return True
        while len(self._segments) > 1 and self._bases[-1] > target_offset:
            self._segments.pop().delete()
            self._bases.pop()
        self._segments[-1].truncate_to(target_offset)
        self.log_end_offset = self._segments[-1].next_offset
        self._after_truncation()
        return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Drop everything; the log restarts, empty, at ``new_offset``."""
        if new_offset < 0:
            raise InvalidRequestError(f"cannot start a log at negative offset {new_offset}")
        now_ms = self._segments[-1].rolling_base_ms or 0
        for seg in self._segments:
            seg.delete()
        self._segments.clear()
        self._bases.clear()
        self._add_segment(new_offset, now_ms)
        self.log_start_offset = self.log_end_offset = new_offset
        self.offsets_clock.ticks += 1
        if self.epoch_cache.clear():
            self._checkpoint_epochs()
        self._after_truncation()

    def _after_truncation(self) -> None:
        self._truncations += 1  # a rolled segment's pending fsync may no longer cover what is there
        self._producer_state = None  # derived from the log: rebuilt from what remains when needed
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self.high_watermark = min(max(self.high_watermark, self.log_start_offset), self.log_end_offset)
        self.recovery_point = min(max(self.recovery_point, self.log_start_offset), self.log_end_offset)
        self.offsets_clock.ticks += 1
        self._max_recovery_point = max(self._max_recovery_point, self.recovery_point)
        if self.epoch_cache.truncate_from_end(self.log_end_offset):
            self._checkpoint_epochs()

    # ------------------------------------------------------------ retention

    def delete_old_segments(self, now_ms: int) -> int:
        """Retention (SPEC S2.3): delete whole inactive segments, oldest first, that are
        past retention.ms, beyond retention.bytes, or wholly below the log start offset.
        Never the active segment, never anything at or above the high watermark."""
        cfg = self.config
        # Retention by time and size only where cleanup.policy includes delete; a compact-only log
        # loses segments only below its log start offset (DeleteRecords).
        by_retention = cfg.delete
        excess = self.size - cfg.retention_bytes if cfg.retention_bytes >= 0 else 0
        n = 0
        while n < len(self._segments) - 1:
            seg = self._segments[n]
            upper = self._bases[n + 1]
            if upper > self.high_watermark:
                break
            by_start = upper <= self.log_start_offset
            by_time = by_retention and cfg.retention_ms >= 0 and now_ms - seg.largest_timestamp > cfg.retention_ms
            by_size = by_retention and cfg.retention_bytes >= 0 and excess - seg.size >= 0
            if not (by_start or by_time or by_size):
                break
            excess -= seg.size
            n += 1
        if n == 0:
            return 0
        for seg in self._segments[:n]:
            seg.delete()
        del self._segments[:n]
        del self._bases[:n]
        self.log_start_offset = max(self.log_start_offset, self._bases[0])
        self.offsets_clock.ticks += 1
        if self.epoch_cache.truncate_from_start(self.log_start_offset):
            self._checkpoint_epochs()
        return n

    # ------------------------------------------------------------ durability and lifecycle

    def flush(self) -> None:
        """fsync every segment at or after the recovery point and the epoch checkpoint if dirty (even
        an entry at the LEO: a clean shutdown flushes, and a clean start trusts the file); advance
        the recovery point."""
        self._maybe_sync_parent_dir()
        self._write_unflushed(durable=True)
        self._advance_recovery_point(self.log_end_offset)
        self._unflushed_records = 0

    def write_out(self) -> None:
        """``flush`` without its fsyncs, for a clean shutdown that then syncs each log directory's
        file system at once (``LogManager.shutdown``): the pending index entries and the epoch
        checkpoint written, the recovery point left where it is until ``on_filesystem_synced``
        (nothing may claim durability before the sync)."""
        self._write_unflushed(durable=False)

    def _write_unflushed(self, durable: bool) -> None:
        """Every segment at or after the recovery point (indexes written, fsynced if ``durable``)
        and the epoch checkpoint if dirty."""
        if self.recovery_point < self.log_end_offset:  # else everything written was fsynced already
            i = max(0, bisect.bisect_right(self._bases, self.recovery_point) - 1)
            for seg in self._segments[i:]:
                seg.flush(durable)
        if self._epochs_dirty_from is not None:
            self._checkpoint_epochs(durable)

    def on_filesystem_synced(self) -> None:
        """Everything written to this log's files is durable (its file system was synced after
        ``write_out``): the recovery point moves to the LEO, the directory entry needs no fsync."""
        self.parent_dir_unsynced = False
        self._advance_recovery_point(self.log_end_offset)
        self._unflushed_records = 0

    def maybe_flush(self, now_ms: int) -> bool:
        """flush.ms policy, called periodically by the broker."""
        if self.recovery_point < self.log_end_offset and now_ms - self._last_flush_ms >= self.config.flush_ms:
            self.flush()
            self._last_flush_ms = now_ms
            return True
        return False

    def close(self) -> None:
        """Close the files, leaving a complete epoch checkpoint (a clean start trusts it)."""
        if self._epochs_dirty_from is not None:
            self._checkpoint_epochs()
        for seg in self._segments:
            seg.close()

    def delete(self) -> None:
        for seg in self._segments:
            seg.delete()
        shutil.rmtree(self.dir, ignore_errors=True)


def _with_log_append_time(records: bytes, info: BatchesInfo, now_ms: int) -> bytearray:
    """message.timestamp.type=LogAppendTime: rewrite max_timestamp and the timestamp-type bit;
    both are under the CRC, so (only on this opt-in path) the batch is re-checksummed."""
    buf = bytearray(records)
    for b in info.batches:
        set_log_append_time(buf, b.position, b.size, now_ms)
    return buf
