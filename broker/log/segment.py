"""One log segment: a data file of record batches plus its two indexes (Kafka's LogSegment).

Theory of operation: a segment is named by its base offset (``%020d.log``,
``.index``, ``.timeindex``) and only ever grows at its end. Batches are
written with one ``writev`` of already-stamped pieces and read back as raw
bytes with ``pread``; the segment never decodes records except to answer
offset-by-timestamp. Positions are found through the sparse offset index
plus a scan of batch headers (never record bodies), or, for the base offset of
one of the last appends (where followers and consumers fetch), from memory.
The active segment also keeps the bytes of its last append when they are small
(``TAIL_BYTES``): at thousands of partitions every follower fetch reads exactly
that one-record batch, and gets it without a ``pread``. Both go on truncation.

``recover()`` is the crash path (SPEC S2.4): it re-reads the data file batch
by batch, checks framing, offsets and CRC, rebuilds both indexes, and cuts
the file at the first batch that does not check out.

The aborted-transaction index (``.txnindex``, broker/log/txn_index.py) lives
with the segment holding the markers; it is loaded with the segment, emptied
by ``recover()`` (the log rebuilds it from the producer state, which replays
the markers), cut by ``truncate_to`` and fsynced with the data.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

from broker.log.config import LogConfig
from broker.log.index import CorruptIndexError, OffsetIndex, TimeIndex
from broker.log.txn_index import TXN_INDEX_SUFFIX, CorruptTxnIndexError, TransactionIndex
from proto.errors import KafkaStorageError
from proto.record_batch import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    SPAN_BYTES,
    BatchHeader,
    Record,
    TxnMarker,
    batch_size_at,
    batch_span,
    crc32c,
    decode_batch,
    decode_txn_marker,
    read_header,
)

_SCAN_CHUNK: Final = 16 * 1024
# Positions and first batch sizes of the last appends, by base offset: a follower or consumer
# fetches at its log end, which is the base offset of a recent append. Found here it costs no read
# at all, where a scan reads every batch since the last index entry (dozens when batches are small:
# thousands of partitions each getting a record at a time).
RECENT_BATCHES: Final = 64
# The bytes of the last append, kept when it is at most this long: the followers' next fetches read
# exactly them (at thousands of partitions, one small batch each), and get them without a pread
# each. Bounded per segment, and only the active segment of a log keeps them (issue 29).
TAIL_BYTES: Final = 2048
_RECOVER_CHUNK: Final = 4 * 1024 * 1024

# Offsets in a segment's indexes are relative to its base offset and stored as int32.
MAX_RELATIVE_OFFSET: Final = 0x7FFFFFFF
# writev takes at most IOV_MAX (1024 on Linux) pieces per call.
IOV_MAX: Final = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024

LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
TIME_INDEX_SUFFIX: Final = ".timeindex"


def batch_defect(base: int, length: int, magic: int, last_delta: int, record_count: int, segment_base: int,
                 expected_offset: int) -> str | None:
    """Why a batch header read from disk cannot be part of this segment (None: it can).

    Recovery and loading use it so that no byte on disk - a torn write, a bit flip, a batch an
    older version accepted - can make an offset or index entry overflow later (SPEC S13.5).
    """
    if magic != MAGIC:
        return f"magic {magic}"
    if length < HEADER_SIZE - LOG_OVERHEAD:
        return f"batch length {length}"
    if last_delta < 0 or record_count < 0 or (record_count and record_count > last_delta + 1):
        return f"record count {record_count} with last offset delta {last_delta}"
    if base < expected_offset:
        return f"base offset {base} below the expected {expected_offset}"
    if base + last_delta - segment_base > MAX_RELATIVE_OFFSET:
        return f"offsets up to {base + last_delta} beyond the reach of a segment based at {segment_base}"
    return None


def _write_all(fd: int, pieces: Sequence[bytes | memoryview], nbytes: int) -> None:
    """writev in chunks of at most IOV_MAX pieces; short writes (legal, rare) are finished from a copy."""
    if sum(map(len, pieces)) != nbytes:
        raise KafkaStorageError(f"pieces do not add up to the {nbytes} bytes to write")
    # Every append but the largest is one chunk: no slice and no second sum (once per batch, on the
    # leader and on each follower; at thousands of partitions every batch holds one record).
    chunks = [pieces] if len(pieces) <= IOV_MAX else [pieces[i:i + IOV_MAX] for i in range(0, len(pieces), IOV_MAX)]
    for chunk in chunks:
        done = os.writev(fd, chunk)
        want = nbytes if len(chunks) == 1 else sum(map(len, chunk))
        if done < want:
            rest = memoryview(b"".join(bytes(p) for p in chunk))[done:]
            while rest:
                rest = rest[os.write(fd, rest):]


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class LogSegment:
    def __init__(self, directory: Path, base_offset: int, config: LogConfig, now_ms: int) -> None:
        self.base_offset = base_offset
        self.config = config
        self.log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        self.index = OffsetIndex(directory / segment_file_name(base_offset, INDEX_SUFFIX), base_offset,
                                 config.max_index_entries)
        self.time_index = TimeIndex(directory / segment_file_name(base_offset, TIME_INDEX_SUFFIX), base_offset,
                                    config.max_index_entries)
        self._file = open(self.log_path, "a+b", buffering=0)  # noqa: SIM115 - lives as long as the segment
        self._fd = self._file.fileno()
        self.size = os.fstat(self._fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self._bytes_since_index_entry = 0
        # segment.ms counts from the first append (or the first batch's timestamp on reload).
        self.rolling_base_ms: int | None = None
        # What the last recover() found wrong (None: nothing), for the log line and the metric.
        self.recovery_defect: str | None = None
        self.recovered_next_offset = base_offset
        self._created_ms = now_ms
        # base offset -> position << 32 | size of the first batch, of the last appends (RECENT_BATCHES).
        # One int, not a tuple: at 10,000 partitions these are 640,000 values, and a tuple is 56
        # bytes more and tracked by the garbage collector until a collection untracks it.
        self._recent: dict[int, int] = {}
        # The last append's position and bytes, if it was at most TAIL_BYTES (what the file holds
        # there until a truncation, which drops them); one attribute, replaced whole.
        self._tail: tuple[int, bytes] | None = None
        self.txn_index = TransactionIndex(directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX))
        # The txn index may lack entries (recovered, or unreadable): the log rebuilds it.
        self.txn_index_stale = False

    # ------------------------------------------------------------ loading

    def load(self) -> None:
        """Trust the files after a clean shutdown, but check the indexes agree with the data.

        Falls back to a full ``recover()`` when they do not.
        """
        try:
            self.index.load()
            self.index.sanity_check(self.size)
            self.time_index.load()
            self._rescan_tail()
            self.time_index.sanity_check(self.next_offset)
        except (CorruptIndexError, KafkaStorageError, ValueError, OverflowError, struct.error):
            # Anything the files say that does not add up is rebuilt from the data (which recover()
            # itself distrusts batch by batch).
            self.recover()
            return
        try:
            self.txn_index.load()
            if self.txn_index.entries and self.txn_index.entries[-1].last_offset >= self.next_offset:
                raise CorruptTxnIndexError("entries beyond the segment's data")
        except CorruptTxnIndexError:
            self.txn_index.reset()
            self.txn_index_stale = True

    def _rescan_tail(self) -> None:
        """Recompute next_offset / max timestamp from the last index entry to the end."""
        last_indexed, pos = self.index.lookup(self.base_offset + (1 << 31))
        next_offset = self.base_offset if pos == 0 else last_indexed
        if self.time_index.last_timestamp >= 0:
            ts, off = self.time_index.lookup(self.time_index.last_timestamp)
            self.max_timestamp, self.offset_of_max_timestamp = ts, off
        first = True
        while pos < self.size:
            head = os.pread(self._fd, HEADER_SIZE, pos)
            if len(head) < HEADER_SIZE:
                raise KafkaStorageError(f"{self.log_path}: partial batch header at {pos}")
            h = read_header(head)
            defect = batch_defect(h.base_offset, h.batch_length, h.magic, h.last_offset_delta, h.record_count,
                                  self.base_offset, self.base_offset if pos == 0 else next_offset)
            if defect is not None or pos + h.size > self.size:
                raise KafkaStorageError(f"{self.log_path}: bad batch at {pos}: {defect or 'runs past the end'}")
            if first and pos == 0:
                self.rolling_base_ms = h.max_timestamp
            first = False
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = h.max_timestamp, h.last_offset
            next_offset = h.next_offset
            pos += h.size
        self.next_offset = next_offset
        if self.size and self.rolling_base_ms is None:
            self.rolling_base_ms = read_header(os.pread(self._fd, HEADER_SIZE, 0)).max_timestamp

    def recover(self, expected_first_offset: int | None = None) -> int:
        """Rebuild the indexes from the data, truncating at the first bad batch.

        Returns the number of bytes cut off the end of the data file.
        """
        self.index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        self.txn_index_stale = True
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.rolling_base_ms = None
        self._bytes_since_index_entry = 0
        next_offset = self.base_offset if expected_first_offset is None else expected_first_offset
        pos = 0
        buf = b""
        buf_start = 0
        size = self.size

        def window(n: int) -> memoryview | None:
            nonlocal buf, buf_start
            have = buf_start + len(buf) - pos
            if have < n:
                want = max(_RECOVER_CHUNK, n - have)
                more = os.pread(self._fd, want, buf_start + len(buf))
                buf = buf[pos - buf_start:] + more
                buf_start = pos
                if len(buf) < n:
                    return None
            return memoryview(buf)[pos - buf_start:pos - buf_start + n]

        while pos < size:
            head = window(HEADER_SIZE)
            if head is None:
                break
            h = read_header(head)
            base, last_delta, batch_size = h.base_offset, h.last_offset_delta, h.size
            self.recovery_defect = batch_defect(base, h.batch_length, h.magic, last_delta, h.record_count,
                                                self.base_offset, next_offset)
            if self.recovery_defect is not None:
                break
            batch = window(batch_size)
            if batch is None:
                self.recovery_defect = "a partial batch at the end"
                break
            if crc32c(batch[ATTRIBUTES_OFFSET:]) != h.crc:
                self.recovery_defect = "a batch that fails its CRC"
                break
            max_ts = h.max_timestamp
            if self.rolling_base_ms is None:
                self.rolling_base_ms = max_ts
            if max_ts > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = max_ts, base + last_delta
            if self._bytes_since_index_entry > self.config.index_interval_bytes or pos == 0:
                self.index.append(base, pos)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                self._bytes_since_index_entry = 0
            self._bytes_since_index_entry += batch_size
            next_offset = base + last_delta + 1
            pos += batch_size
        truncated = size - pos
        self.recovered_next_offset = next_offset
        if truncated:
            self.recovery_defect = self.recovery_defect or "a partial batch at the end"
            os.ftruncate(self._fd, pos)
            self.size = pos
        self.next_offset = max(next_offset, self.base_offset)
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        return truncated

    # ------------------------------------------------------------ appends

    def should_roll(self, write_bytes: int, first_offset: int, next_offset: int, now_ms: int) -> bool:
        if self.size == 0:
            return False
        base_ms = self.rolling_base_ms if self.rolling_base_ms is not None else self._created_ms
        return (self.size + write_bytes > self.config.segment_bytes
                or now_ms - base_ms > self.config.segment_ms
                or self.index.is_full or self.time_index.is_full
                # Index entries hold offsets relative to the base as int32 (Kafka's rule).
                or next_offset - 1 - self.base_offset > MAX_RELATIVE_OFFSET)

    def append(self, first_offset: int, next_offset: int, pieces: Sequence[bytes | memoryview], nbytes: int,
               max_timestamp: int, offset_of_max_timestamp: int, now_ms: int, first_batch_size: int) -> None:
        """Write already-validated, already-stamped batches at the end of the segment (the first
        of them ``first_batch_size`` bytes long)."""
        if self.size == 0 and self.rolling_base_ms is None:
            self.rolling_base_ms = now_ms
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, offset_of_max_timestamp
        if self._bytes_since_index_entry > self.config.index_interval_bytes or self.size == 0:
            self.index.append(first_offset, self.size)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index_entry = 0
        if nbytes <= TAIL_BYTES:
            tail = pieces[0] if len(pieces) == 1 and type(pieces[0]) is bytes else b"".join(pieces)
            _write_all(self._fd, (tail,), nbytes)  # checks that the pieces add up to nbytes
            self._tail = (self.size, tail)
        else:
            _write_all(self._fd, pieces, nbytes)
            self._tail = None
        recent = self._recent
        recent[first_offset] = self.size << 32 | first_batch_size  # both < 2**31 (segment.bytes, max.message.bytes)
        if len(recent) > RECENT_BATCHES:
            del recent[next(iter(recent))]
        self._bytes_since_index_entry += nbytes
        self.size += nbytes
        self.next_offset = next_offset

    # ------------------------------------------------------------ reads

    def translate_offset(self, offset: int, start_position: int = 0) -> tuple[int, int, int] | None:
        """(position, base_offset, size) of the first batch whose last offset >= ``offset``."""
        recent = self._recent.get(offset, -1)
        if recent >= 0 and recent >> 32 >= start_position:
            return recent >> 32, offset, recent & 0xFFFFFFFF
        _, pos = self.index.lookup(offset)
        pos = max(pos, start_position)
        size = self.size
        while pos < size:
            chunk = os.pread(self._fd, min(_SCAN_CHUNK, size - pos), pos)
            p = 0
            n = len(chunk)
            if n < SPAN_BYTES:
                return None
            while p + SPAN_BYTES <= n:
                base, batch_size, last_delta = batch_span(chunk, p)
                if batch_size < HEADER_SIZE:
                    raise KafkaStorageError(f"{self.log_path}: bad batch length at {pos + p}")
                if base + last_delta >= offset:
                    return pos + p, base, batch_size
                p += batch_size
            pos += p
        return None

    def read(self, start_offset: int, max_bytes: int, max_position: int, min_one_batch: bool) -> bytes | None:
        """Whole batches from the one holding ``start_offset``, up to ``max_bytes`` and
        ``max_position``; None when ``start_offset`` is past this segment."""
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        start_pos, _base, first_size = found
        if start_pos >= max_position:
            return b""
        if max_position - start_pos < first_size or (max_bytes < first_size and not min_one_batch):
            return b""
        end = self._end_of_whole_batches(start_pos, min(start_pos + max(max_bytes, first_size), max_position))
        tail = self._tail
        if tail is not None and tail[0] == start_pos and end == start_pos + len(tail[1]):
            return tail[1]  # the last append, as written
        # Exactly whole batches in one pread: the bytes go to the wire without another copy.
        return os.pread(self._fd, end - start_pos, start_pos)

    def _end_of_whole_batches(self, start_pos: int, limit_pos: int) -> int:
        """The largest batch boundary <= ``limit_pos`` (``start_pos`` is one).

        The offset index already knows boundaries every index.interval.bytes, so
        only the headers between the last indexed boundary and the limit are read.
        """
        if limit_pos >= self.size:
            return self.size
        p = max(self.index.floor_position(limit_pos), start_pos)
        while True:
            chunk = os.pread(self._fd, min(_SCAN_CHUNK, limit_pos - p), p)
            q = 0
            while q + LOG_OVERHEAD <= len(chunk):
                batch_size = batch_size_at(chunk, q)
                if batch_size < HEADER_SIZE:
                    raise KafkaStorageError(f"{self.log_path}: bad batch length at {p + q}")
                if p + q + batch_size > limit_pos:
                    return p + q
                q += batch_size
            if q == 0:
                return p
            p += q

    def iter_headers(self) -> Iterator[BatchHeader]:
        """Every batch header in the segment, read with one pread per header."""
        pos = 0
        while pos + HEADER_SIZE <= self.size:
            header = read_header(os.pread(self._fd, HEADER_SIZE, pos))
            yield header
            pos += header.size

    def iter_batches_with_markers(self) -> Iterator[tuple[BatchHeader, TxnMarker | None]]:
        """Every batch header, with the end-transaction marker of each control batch (its one record
        is read; data batches' records never are): what the producer state replays."""
        pos = 0
        while pos + HEADER_SIZE <= self.size:
            header = read_header(os.pread(self._fd, HEADER_SIZE, pos))
            marker = None
            if header.is_control:
                marker = decode_txn_marker(os.pread(self._fd, header.size, pos))
            yield header, marker
            pos += header.size

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> Record | None:
        """The first record at or after ``start_offset`` with timestamp >= ``timestamp``."""
        # Entries are (max timestamp so far, its offset); all records before an
        # entry's offset have timestamps <= the entry's, so look up ts - 1.
        _ts, offset = self.time_index.lookup(timestamp - 1)
        found = self.translate_offset(max(offset, start_offset))
        pos = found[0] if found else self.size
        while pos < self.size:
            h = read_header(os.pread(self._fd, HEADER_SIZE, pos))
            size = h.size
            if h.max_timestamp >= timestamp:
                _h, records = decode_batch(os.pread(self._fd, size, pos), 0)
                for r in records:
                    if r.timestamp >= timestamp and r.offset >= start_offset:
                        return r
            pos += size
        return None

    # ------------------------------------------------------------ truncation and lifecycle

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset >= ``offset``; returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        pos, base, _size = found
        removed = self.size - pos
        self.index.truncate_to_position(pos)
        self.time_index.truncate_to(base)
        self.txn_index.truncate_to(base)
        os.ftruncate(self._fd, pos)
        self.size = pos
        self._recent.clear()
        self._tail = None
        self.max_timestamp = -1
        self.rolling_base_ms = None if pos == 0 else self.rolling_base_ms
        self._rescan_tail()
        self._bytes_since_index_entry = 0
        return removed

    def on_become_inactive(self, flush_data: bool = True) -> None:
        """The last time index entry, and the flush (``flush_data=False``: the indexes only; the
        caller fsyncs the data through ``dup_fd``)."""
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self._tail = None  # only the active segment's last append is read again and again
        if flush_data:
            self.flush()
        else:
            self.index.flush()
            self.time_index.flush()
            self.txn_index.flush()

    def dup_fd(self) -> int:
        """A duplicate of the data file's descriptor: valid after this segment is closed or deleted."""
        return os.dup(self._fd)

    @property
    def largest_timestamp(self) -> int:
        """Max record timestamp, or the file's mtime for a segment without timestamps."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.fstat(self._fd).st_mtime * 1000)

    def flush(self, durable: bool = True) -> None:
        """``durable=False``: the pending index entries written, nothing fsynced (the caller
        syncs the file system: a clean shutdown)."""
        if durable:
            os.fsync(self._fd)
        self.index.flush(durable)
        self.time_index.flush(durable)
        self.txn_index.flush(durable)

    def close(self) -> None:
        if not self._file.closed:
            self.index.flush()
            self.time_index.flush()
            self.txn_index.flush()
            self._file.close()

    def abandon(self) -> None:
        """Close the data file without writing pending index entries (what a crash leaves)."""
        if not self._file.closed:
            self._file.close()

    def delete(self) -> None:
        if not self._file.closed:
            self._file.close()
        for path in (self.log_path, self.index.path, self.time_index.path, self.txn_index.path):
            path.unlink(missing_ok=True)

