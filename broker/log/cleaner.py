"""Log compaction, the pure core: which log to clean, the offset map, and how a batch is rewritten
(Kafka 2.x's LogCleanerManager.cleanableOffsets / grabFilthiestCompactedLog, Cleaner, SkimpyOffsetMap).

Theory of operation
-------------------
A compacted log (``cleanup.policy`` includes ``compact``) has a *clean* head, everything below the
cleaner checkpoint (``cleaner-offset-checkpoint``, the first dirty offset), and a *dirty* tail above
it. The cleanable part of the dirty tail ends at the *first uncleanable offset*: the lowest of the
active segment's base (the active segment is never touched), the high watermark (uncommitted records
may still be truncated) and the base of the first segment holding a record newer than
``min.compaction.lag.ms``; it is rounded down to a segment base. A log is worth cleaning when its
*dirty ratio* (cleanable bytes / (clean + cleanable bytes)) exceeds ``min.cleanable.dirty.ratio``, or
at once when its oldest dirty record is older than ``max.compaction.lag.ms``; the dirtiest goes first
(``choose_filthiest``).

One clean:

1. **Offset map.** The dirty section is read batch by batch and every keyed record's key is put into
   an ``OffsetMap`` (key hash -> its latest offset; offsets only grow, so the last put wins). The map
   is bounded: ``log.cleaner.dedupe.buffer.size`` / threads bytes at Kafka's 24 bytes a slot (a 16-byte
   MD5 of the key plus an 8-byte offset), filled to ``log.cleaner.io.buffer.load.factor``. When the
   next batch would not fit, mapping stops there (a batch is mapped whole, so the map overshoots by at
   most one batch, and always makes progress); the clean then covers only the offsets mapped -
   ``end_offset = map.latest_offset + 1`` - and the next clean carries on from there, as Kafka does.
2. **Rewrite.** Every segment from the log's start up to ``end_offset`` is rewritten, in groups of
   consecutive segments whose sum stays within ``segment.bytes`` and the index size (Kafka's
   ``groupSegmentsBySize``), each group into one new segment named by the group's first base offset.
   A record is kept when its offset is beyond the map (``> map.latest_offset``), or when it is the
   latest for its key (``offset >= map.get(key)``) and either has a value or is a tombstone still
   within ``delete.retention.ms``: tombstones of a segment are kept while the segment was modified
   after the *delete horizon*, the last clean segment's modification time minus
   ``delete.retention.ms``. So a tombstone survives at least one clean after the clean that first
   reached it, and at least ``delete.retention.ms`` past the point where the log was clean up to it:
   a consumer reading from the start within that time sees the delete. Records without a key cannot
   be in a compacted log (the leader refuses them, ``check_keys_for_compaction``); an older one (the
   topic was ``delete`` before) is dropped, as Kafka does.
3. **Batches.** A batch whose records are all kept is copied byte for byte. Otherwise it is
   re-encoded with the kept records: the same base offset, *the same last offset delta* (offsets never
   move, and an idempotent producer's last sequence stays), the same codec (decompressed and
   compressed again), producer fields, leader epoch and attributes; the base timestamp becomes the
   first kept record's and the max timestamp the kept records' maximum (LogAppendTime batches keep
   theirs). A batch left without records is dropped, unless it is the last batch of an idempotent
   producer in the log: it stays as an empty batch (header only, record count 0), so the producer's
   sequence and epoch survive a restart's rebuild of the producer state (Kafka's ``RETAIN_EMPTY``).
   "Last" is judged within the segments being rewritten (the active segment is not read), which keeps
   a little more than Kafka, which asks its producer state: an empty batch per producer id that ever
   wrote to the log stays until the producer writes again (this broker does not expire producer ids).
   Control batches are kept as they are (transactions do not exist here yet).

Offsets only ever increase in the cleaned log, with gaps where records were removed; a consumer or
follower fetching inside a gap gets the next batch after it.

Everything here works on ``SegmentSource`` objects (a base offset, a size, a modification time and a
``read(position, size)``) and writes through a ``BatchSink``; the files, the thread, the throttle and
the swap are broker/log/log_cleaner.py's.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from proto.errors import InvalidRecordError
from proto.record_batch import (
    CODEC_MASK,
    COMPRESSION_NONE,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_MASK,
    BatchesInfo,
    BatchHeader,
    RecordFields,
    _compress,
    crc32c,
    decode_batch_fields,
    encode_record_body,
    read_header,
)

# Kafka's SkimpyOffsetMap: a slot is a 16-byte MD5 hash of the key and an 8-byte offset.
ENTRY_BYTES: Final = 24
INT_MAX: Final = 0x7FFFFFFF
NO_TIMESTAMP: Final = -1
OFFSET_INDEX_ENTRY_BYTES: Final = 8
TIME_INDEX_ENTRY_BYTES: Final = 12

_TAIL: Final = struct.Struct(">hiqqqhii")  # attributes .. record_count: what the CRC covers, before the records
_PREFIX: Final = struct.Struct(">qiibI")  # base_offset, batch_length, partition_leader_epoch, magic, crc


class CleanAbortedError(Exception):
    """The clean was stopped (shutdown, or the log went away): nothing it wrote may be used."""


# ----------------------------------------------------------------- the offset map


class OffsetMap:
    """Key -> latest offset of the dirty section, bounded like Kafka's SkimpyOffsetMap.

    Keys are held as their 16-byte MD5 digests (a collision could only make the cleaner keep a record
    it might have dropped, or drop one superseded under another key of equal hash - Kafka takes the
    same 2^-128 risk). ``max_entries`` is ``slots * load_factor``; Python's dict costs several times
    Kafka's 24 bytes a slot, so the memory actually used is a small multiple of the configured
    buffer, but bounded by it all the same."""

    def __init__(self, memory_bytes: int, load_factor: float = 0.9) -> None:
        self.slots = max(1, memory_bytes // ENTRY_BYTES)
        self.max_entries = max(1, int(self.slots * load_factor))
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1

    @staticmethod
    def _hash(key: bytes) -> bytes:
        return hashlib.md5(key, usedforsecurity=False).digest()

    def __len__(self) -> int:
        return len(self._map)

    def put(self, key: bytes, offset: int) -> None:
        self._map[self._hash(key)] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, -1 when it is not in the map."""
        return self._map.get(self._hash(key), -1)

    def update_latest_offset(self, offset: int) -> None:
        if offset > self.latest_offset:
            self.latest_offset = offset

    def has_room_for(self, records: int) -> bool:
        return not self._map or len(self._map) + records <= self.max_entries

    @property
    def utilization(self) -> float:
        return len(self._map) / self.slots

    def clear(self) -> None:
        self._map.clear()
        self.latest_offset = -1


# ----------------------------------------------------------------- which log, which offsets


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    """What choosing a log needs of one of its segments (taken on the event loop, no I/O)."""

    base_offset: int
    size: int
    largest_timestamp: int  # the largest record timestamp (-1: none)
    first_batch_timestamp: int  # when it started (-1: unknown)
    index_bytes: int = 0
    time_index_bytes: int = 0


@dataclass(frozen=True, slots=True)
class LogToClean:
    """A compacted log's cleanable range and why it may be cleaned (Kafka's LogToClean)."""

    key: tuple[str, int]
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    min_cleanable_ratio: float
    # ms by which the oldest dirty record is past max.compaction.lag.ms (0: not past it).
    max_compaction_delay_ms: int

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def needs_compaction_now(self) -> bool:
        return self.max_compaction_delay_ms > 0

    @property
    def should_clean(self) -> bool:
        if self.cleanable_bytes <= 0:
            return False
        return self.needs_compaction_now or self.cleanable_ratio > self.min_cleanable_ratio


def _overlapping(segments: Sequence[SegmentSummary], start: int, end: int) -> list[SegmentSummary]:
    """The segments holding offsets in [start, end) (Kafka's ``logSegments(from, to)``): from the one
    whose base is the greatest <= ``start`` to the last whose base is < ``end``."""
    out: list[SegmentSummary] = []
    for i, seg in enumerate(segments):
        nxt = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if seg.base_offset >= end:
            break
        if nxt is not None and nxt <= start:
            continue
        out.append(seg)
    return out


def cleanable_range(key: tuple[str, int], segments: Sequence[SegmentSummary], *, log_start_offset: int,
                    high_watermark: int, checkpoint: int | None, now_ms: int, min_compaction_lag_ms: int,
                    max_compaction_lag_ms: int, min_cleanable_ratio: float) -> LogToClean:
    """The cleanable range of a log whose segments are ``segments`` (the last one active).

    The first dirty offset is the checkpoint, or the log start when there is none or it is out of
    [log start, active segment base] (a truncation or deletion made it stale, Kafka resets it so). The
    first uncleanable offset is rounded down to the base of the segment holding it."""
    active_base = segments[-1].base_offset
    first_dirty = checkpoint if checkpoint is not None else log_start_offset
    if first_dirty < log_start_offset or first_dirty > active_base:
        first_dirty = log_start_offset
    non_active = segments[:-1]
    dirty_non_active = _overlapping(non_active, first_dirty, active_base)
    candidates = [active_base, high_watermark]
    if min_compaction_lag_ms > 0:
        for s in dirty_non_active:
            if s.largest_timestamp > now_ms - min_compaction_lag_ms:
                candidates.append(s.base_offset)
                break
    uncleanable = max(min(candidates), first_dirty)
    # Round down to a segment base (Kafka: the first non-active segment from the uncleanable offset).
    first_uncleanable = active_base
    for i, s in enumerate(segments):
        nxt = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if nxt is None or nxt > uncleanable:
            first_uncleanable = s.base_offset
            break
    clean_bytes = sum(s.size for s in _overlapping(segments, -1, first_dirty))
    cleanable_bytes = sum(s.size for s in _overlapping(segments, first_dirty, max(first_dirty, first_uncleanable)))
    delay = 0
    if max_compaction_lag_ms > 0 and dirty_non_active:
        first_ts = dirty_non_active[0].first_batch_timestamp
        if first_ts < 0:
            first_ts = dirty_non_active[0].largest_timestamp
        clean_until = now_ms - max_compaction_lag_ms
        if 0 <= first_ts < clean_until:
            delay = clean_until - first_ts
    return LogToClean(key, first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, min_cleanable_ratio, delay)


def choose_filthiest(candidates: Sequence[LogToClean]) -> LogToClean | None:
    """The log to clean next: the highest dirty ratio among those that should be cleaned."""
    ready = [c for c in candidates if c.should_clean]
    if not ready:
        return None
    return max(ready, key=lambda c: (c.cleanable_ratio, c.max_compaction_delay_ms))


def group_segments_by_size(segments: Sequence[SegmentSummary], next_bases: Sequence[int], max_size: int,
                           max_index_size: int) -> list[list[int]]:
    """Indexes into ``segments`` grouped for rewriting (Kafka's ``groupSegmentsBySize``): consecutive
    segments whose data, offset index and time index each stay within the bounds and whose offsets stay
    within an int32 of the group's base. ``next_bases[i]`` is where segment i's offsets end."""
    groups: list[list[int]] = []
    i = 0
    while i < len(segments):
        group = [i]
        size, index, time_index = segments[i].size, segments[i].index_bytes, segments[i].time_index_bytes
        base = segments[i].base_offset
        i += 1
        while (i < len(segments) and size + segments[i].size <= max_size
               and index + segments[i].index_bytes <= max_index_size
               and time_index + segments[i].time_index_bytes <= max_index_size
               and next_bases[i] - 1 - base <= INT_MAX):
            size += segments[i].size
            index += segments[i].index_bytes
            time_index += segments[i].time_index_bytes
            group.append(i)
            i += 1
        groups.append(group)
    return groups


def delete_horizon_ms(clean_segment_modified_ms: Sequence[int], delete_retention_ms: int) -> int:
    """Tombstones of segments modified at or before this time may go: the last clean segment's
    modification time minus delete.retention.ms (0 when nothing is clean yet: all are kept)."""
    if not clean_segment_modified_ms:
        return 0
    return clean_segment_modified_ms[-1] - delete_retention_ms


# ----------------------------------------------------------------- reading segments


class SegmentSource(Protocol):
    """A rolled, immutable segment as the cleaner reads it."""

    @property
    def base_offset(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def last_modified_ms(self) -> int: ...
    def read(self, position: int, size: int) -> bytes: ...


Progress = Callable[[int], None]


def _no_progress(_n: int) -> None:
    return None


def iter_batches(source: SegmentSource, io_buffer_size: int, progress: Progress = _no_progress,
                 start_position: int = 0) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Every whole batch of ``source`` from ``start_position``, read ``io_buffer_size`` bytes at a
    time (a batch larger than that is read on its own). ``progress`` is told of every read (the
    throttle, and the check for an abort)."""
    pos = start_position
    end = source.size
    while pos < end:
        chunk = source.read(pos, min(io_buffer_size, end - pos))
        progress(len(chunk))
        if len(chunk) < HEADER_SIZE:
            return  # a torn tail cannot be in a rolled segment; stop rather than guess
        mv = memoryview(chunk)
        p = 0
        while len(chunk) - p >= HEADER_SIZE:
            header = read_header(chunk, p)
            size = header.size
            if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or header.magic != MAGIC:
                return
            if p + size > len(chunk):
                if p == 0:  # larger than the buffer: read this one alone
                    big = source.read(pos, size)
                    progress(len(big))
                    if len(big) < size:
                        return
                    yield header, memoryview(big)
                    p = size
                break
            yield header, mv[p:p + size]
            p += size
        pos += p


def build_offset_map(sources: Sequence[SegmentSource], start: int, end: int, offset_map: OffsetMap,
                     io_buffer_size: int, progress: Progress = _no_progress) -> bool:
    """Map every keyed record with offset in [start, end) of ``sources`` (the dirty segments), in
    order; returns True when the map filled up before ``end`` (it then covers a prefix, up to
    ``offset_map.latest_offset``)."""
    offset_map.clear()
    for source in sources:
        for header, batch in iter_batches(source, io_buffer_size, progress):
            if header.next_offset <= start:
                continue
            if header.base_offset >= end:
                return False
            if not offset_map.has_room_for(header.record_count):
                return True
            if not header.is_control and header.record_count:
                _h, records = decode_batch_fields(batch, 0)
                for offset, _ts, key, _value, _headers in records:
                    if key is not None and start <= offset < end:
                        offset_map.put(key, offset)
            if header.last_offset >= start:
                offset_map.update_latest_offset(min(header.last_offset, end - 1))
    return False


def last_batches_of_producers(sources: Sequence[SegmentSource], io_buffer_size: int,
                              progress: Progress = _no_progress) -> dict[int, int]:
    """Producer id -> last offset of its last batch in ``sources`` (headers only)."""
    out: dict[int, int] = {}
    for source in sources:
        for header, _batch in iter_batches(source, io_buffer_size, progress):
            if header.producer_id >= 0:
                out[header.producer_id] = header.last_offset
    return out


# ----------------------------------------------------------------- rewriting batches


def should_retain(offset: int, key: bytes | None, value: bytes | None, offset_map: OffsetMap,
                  retain_deletes: bool) -> bool:
    """Kafka's ``Cleaner.shouldRetainRecord``."""
    if offset > offset_map.latest_offset:
        return True
    if key is None:
        return False
    return offset >= offset_map.get(key) and (value is not None or retain_deletes)


def encode_cleaned_batch(header: BatchHeader, records: Sequence[RecordFields]) -> bytes:
    """``header``'s batch holding only ``records``: same base offset and last offset delta, codec,
    producer fields, epoch and attributes. Empty ``records``: Kafka's empty batch (no codec, no base
    timestamp, record count 0)."""
    attributes = header.attributes & 0xFFFF
    log_append = bool(attributes & TIMESTAMP_TYPE_MASK)
    if not records:
        tail = _TAIL.pack(attributes & ~CODEC_MASK, header.last_offset_delta, NO_TIMESTAMP, header.max_timestamp,
                          header.producer_id, header.producer_epoch, header.base_sequence, 0)
    else:
        base_ts = header.base_timestamp if log_append else records[0][1]
        max_ts = header.max_timestamp if log_append else max(r[1] for r in records)
        section = b"".join(encode_record_body(offset - header.base_offset, 0 if log_append else ts - base_ts,
                                              key, value, headers)
                           for offset, ts, key, value, headers in records)
        codec = attributes & CODEC_MASK
        payload = _compress(codec, section) if codec != COMPRESSION_NONE else section
        tail = _TAIL.pack(attributes, header.last_offset_delta, base_ts, max_ts, header.producer_id,
                          header.producer_epoch, header.base_sequence, len(records)) + payload
    crc = crc32c(tail)
    return _PREFIX.pack(header.base_offset, len(tail) + 9, header.partition_leader_epoch, MAGIC, crc) + tail


@dataclass(slots=True)
class CleanStats:
    """What one clean did (Kafka's CleanerStats)."""

    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_written: int = 0
    batches_rewritten: int = 0
    map_records: int = 0
    buffer_utilization: float = 0.0


def clean_batch(header: BatchHeader, batch: memoryview | bytes, offset_map: OffsetMap, retain_deletes: bool,
                retain_empty: bool, stats: CleanStats) -> bytes | None:
    """The batch as it is to be written after cleaning; None when it goes."""
    if header.is_control:
        return bytes(batch)
    if header.record_count == 0:
        return bytes(batch) if retain_empty else None
    _h, records = decode_batch_fields(batch, 0)
    stats.records_read += len(records)
    kept = [r for r in records if should_retain(r[0], r[2], r[3], offset_map, retain_deletes)]
    stats.records_written += len(kept)
    if len(kept) == len(records):
        return bytes(batch)
    if not kept and not retain_empty:
        return None
    stats.batches_rewritten += 1
    return encode_cleaned_batch(header, kept)


class BatchSink(Protocol):
    def append(self, header: BatchHeader, batch: bytes) -> None: ...


def clean_into(sources: Sequence[SegmentSource], sink: BatchSink, offset_map: OffsetMap, *,
               delete_horizon: int, producer_last_offsets: dict[int, int], io_buffer_size: int,
               stats: CleanStats, progress: Progress = _no_progress) -> None:
    """Rewrite ``sources`` (one group) into ``sink``, keeping what ``should_retain`` keeps; tombstones
    of a source modified after ``delete_horizon`` are kept (Kafka's ``cleanInto``)."""
    for source in sources:
        retain_deletes = source.last_modified_ms > delete_horizon
        for header, batch in iter_batches(source, io_buffer_size, progress):
            stats.bytes_read += header.size
            retain_empty = header.producer_id >= 0 \
                and producer_last_offsets.get(header.producer_id) == header.last_offset
            out = clean_batch(header, batch, offset_map, retain_deletes, retain_empty, stats)
            if out is not None:
                sink.append(read_header(out), out)
                stats.bytes_written += len(out)
                progress(len(out))


# ----------------------------------------------------------------- appends to a compacted log


def check_keys_for_compaction(records: bytes | bytearray | memoryview, info: BatchesInfo, topic: str,
                              partition: int) -> None:
    """Refuse a batch holding a record without a key (Kafka's LogValidator on a compacted topic:
    "Compacted topic cannot accept message without key"). Decodes the records: compacted logs only."""
    for b in info.batches:
        _h, fields = decode_batch_fields(memoryview(records)[b.position:b.position + b.size], 0,
                                         verify_crc=False)
        for offset_delta, (_offset, _ts, key, _value, _headers) in enumerate(fields):
            if key is None:
                raise InvalidRecordError(
                    f"Compacted topic cannot accept message without key in topic partition {topic}-{partition} "
                    f"(batch at position {b.position}, record {offset_delta})")
