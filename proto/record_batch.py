"""Record batch codec: Kafka's v2 RecordBatch, byte for byte (docs/record-batch.md).

Theory of operation
-------------------
A batch is a fixed 61-byte big-endian header followed by the records section::

    0  base_offset            int64   stamped by the leader
    8  batch_length           int32   bytes after this field
    12 partition_leader_epoch int32   stamped by the leader
    16 magic                  int8    = 2
    17 crc                    uint32  CRC-32C of bytes 21..end
    21 attributes             int16   bits 0-2 codec, 3 timestamp type, 4 transactional, 5 control
    23 last_offset_delta      int32
    27 base_timestamp         int64   (Kafka's firstTimestamp)
    35 max_timestamp          int64
    43 producer_id            int64
    51 producer_epoch         int16
    53 base_sequence          int32
    57 record_count           int32
    61 records (compressed as a whole when the codec is not NONE)

Because the CRC starts at ``attributes``, the broker can stamp ``base_offset``
and ``partition_leader_epoch`` into a batch without re-checksumming it and
without decoding a single record: that is the whole hot path of the broker
(``validate_batches`` + ``stamp_prefix``). Records are only decoded by clients
(``decode_batch``) and by the broker's cold paths (offset-by-timestamp, producer
state rebuild).

Each record is a zig-zag varint length followed by: attributes int8,
timestamp_delta varlong, offset_delta varint, key length varint (-1 = null),
key, value length varint (-1 = null), value, header count varint, then per
header: key length varint, key (UTF-8), value length varint (-1 = null), value.
"""

from __future__ import annotations

import gzip
import math
import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import cramjam
import crc32c as _crc32c_mod
import zstandard

from proto.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    UnsupportedCompressionTypeError,
)

# The compiled half of the codec (proto/_codec.c, built by `make setup`); pure Python when it is
# absent or MINIKAFKA_PURE_PYTHON is set. Both are tested to agree (tests/unit/test_record_validation.py).
_codec: Any
try:
    if os.environ.get("MINIKAFKA_PURE_PYTHON"):
        raise ImportError("MINIKAFKA_PURE_PYTHON is set")
    from proto import _codec  # type: ignore[attr-defined, no-redef]
except ImportError:
    _codec = None
else:
    _codec.set_error_classes(CorruptMessageError, InvalidRecordError, MessageTooLargeError, InvalidTimestampError,
                             UnsupportedCompressionTypeError)
COMPILED: Final = _codec is not None

HEADER_SIZE: Final = 61
LOG_OVERHEAD: Final = 12  # base_offset + batch_length: the part not counted in batch_length
MAGIC: Final = 2
CRC_OFFSET: Final = 17
ATTRIBUTES_OFFSET: Final = 21

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1

COMPRESSION_NONE: Final = 0
COMPRESSION_GZIP: Final = 1
COMPRESSION_SNAPPY: Final = 2
COMPRESSION_LZ4: Final = 3
COMPRESSION_ZSTD: Final = 4
SUPPORTED_CODECS: Final = frozenset({COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4,
                                     COMPRESSION_ZSTD})
CODEC_BY_NAME: Final = {"none": COMPRESSION_NONE, "gzip": COMPRESSION_GZIP, "snappy": COMPRESSION_SNAPPY,
                        "lz4": COMPRESSION_LZ4, "zstd": COMPRESSION_ZSTD}

TIMESTAMP_TYPE_MASK: Final = 0x08  # 0 = CreateTime, 1 = LogAppendTime
TRANSACTIONAL_MASK: Final = 0x10
CONTROL_MASK: Final = 0x20
CODEC_MASK: Final = 0x07

# The whole header; and the prefix the broker rewrites (base_offset, batch_length, epoch).
_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qii")
_HEAD27 = struct.Struct(">qiibIhi")  # up to and including last_offset_delta
_ATTRIBUTES = struct.Struct(">h")
_TIMESTAMP = struct.Struct(">q")
_CRC = struct.Struct(">I")
_LENGTH = struct.Struct(">i")
MAX_TIMESTAMP_OFFSET: Final = 35
# Bytes batch_span needs: the header up to and including last_offset_delta.
SPAN_BYTES: Final = _HEAD27.size

crc32c = _crc32c_mod.crc32c


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class Header:
    key: str
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Record:
    """A record as a client writes it (offset and timestamp are absolute when decoded)."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[Header, ...] = ()
    timestamp: int = 0
    offset: int = 0


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at ``pos`` (no CRC check)."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptMessageError(f"batch header truncated: {len(buf) - pos} bytes at position {pos}")
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def batch_span(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int, int]:
    """(base_offset, size with LOG_OVERHEAD, last_offset_delta) of the batch at ``pos``: what the
    log's offset scans need, from the first SPAN_BYTES bytes (a tuple: read per batch on reads)."""
    base, length, _e, _m, _c, _a, last_delta = _HEAD27.unpack_from(buf, pos)
    return base, length + LOG_OVERHEAD, last_delta


def batch_size_at(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The size (with LOG_OVERHEAD) of the batch at ``pos``, from its first LOG_OVERHEAD bytes."""
    return int(_LENGTH.unpack_from(buf, pos + 8)[0]) + LOG_OVERHEAD


def set_log_append_time(buf: bytearray, pos: int, size: int, now_ms: int) -> None:
    """message.timestamp.type=LogAppendTime: the batch at ``pos`` gets ``now_ms`` as its max
    timestamp and the timestamp-type bit; both are under the CRC, so it is re-checksummed."""
    (attrs,) = _ATTRIBUTES.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    _ATTRIBUTES.pack_into(buf, pos + ATTRIBUTES_OFFSET, attrs | TIMESTAMP_TYPE_MASK)
    _TIMESTAMP.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, now_ms)
    _CRC.pack_into(buf, pos + CRC_OFFSET, crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:pos + size]))


# ----------------------------------------------------------------- validation (broker hot path)

# Record timestamps the broker accepts at all: 0 (1970) to the last millisecond of 9999, whatever
# message.timestamp.difference.max.ms says (Kafka's default allows any; a timestamp outside this
# range is a bug or an attack, and breaks time-based retention and lookups).
MIN_TIMESTAMP: Final = 0
MAX_TIMESTAMP: Final = 253402300799999
# The smallest record: length, attributes, timestamp delta, offset delta, key and value lengths,
# header count - one byte each.
MIN_RECORD_BODY: Final = 6
KNOWN_ATTRIBUTES: Final = 0x3F
# A bound on decompression when no max.message.bytes is given (client-side decoding).
DEFAULT_MAX_DECOMPRESSED_BYTES: Final = 256 * 1024 * 1024


class BatchInfo(NamedTuple):
    """What validation learned about one batch: everything the log needs, no second header read.

    A NamedTuple rather than a frozen dataclass: the compiled validator makes one per batch on the
    hot path, and a tuple costs a fraction of a dataclass instance to build.
    """

    position: int
    size: int
    base_offset: int
    last_offset_delta: int
    record_count: int
    partition_leader_epoch: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    attributes: int

    @property
    def offset_span(self) -> int:
        return self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


class BatchesInfo(NamedTuple):
    """The result of one ``validate_batches`` call over a buffer of batches (a NamedTuple, as
    ``BatchInfo``: one per append on the leader and on each follower)."""

    batches: tuple[BatchInfo, ...]
    record_count: int
    # Sum of (last_offset_delta + 1): how many offsets the buffer will occupy.
    offset_count: int
    max_timestamp: int
    # Offset delta (within the buffer) of the last offset of the batch holding max_timestamp.
    shallow_offset_of_max_timestamp: int

    @property
    def batch_count(self) -> int:
        return len(self.batches)

    @property
    def spans(self) -> tuple[tuple[int, int, int], ...]:
        """(position, size, offset_span) of every batch, in order."""
        return tuple((b.position, b.size, b.offset_span) for b in self.batches)

    @property
    def producer_batches(self) -> tuple[BatchInfo, ...]:
        """The batches written by idempotent producers (producer_id >= 0)."""
        return tuple(b for b in self.batches if b.producer_id >= 0)


def validate_batches(buf: bytes | bytearray | memoryview, *, deep: bool = False,
                     max_batch_bytes: int | None = None, min_timestamp: int = MIN_TIMESTAMP,
                     max_timestamp: int = MAX_TIMESTAMP) -> BatchesInfo:
    """Check every batch in ``buf`` and return what the log needs to append it.

    Always (the follower's and recovery's *shallow* check): framing, magic, CRC-32C, a codec
    this build serves, counts consistent with ``last_offset_delta``, ``max_batch_bytes``
    (max.message.bytes). With ``deep`` (the leader, Kafka's LogValidator, SPEC S13.1) also every
    record: varint framing, record count = records found = last_offset_delta + 1, offset deltas
    0..n-1, key/value/header lengths, no trailing bytes, timestamps within
    [``min_timestamp``, ``max_timestamp``], max_timestamp equal to the records' maximum, no
    control/LogAppendTime/unknown attribute bits (a transactional batch needs a producer id),
    consistent producer fields;
    compressed batches are decompressed with a hard bound (the decompressed batch counts against
    ``max_batch_bytes``) and walked the same way.

    Raises CorruptMessageError (framing), InvalidRecordError (semantics), MessageTooLargeError,
    InvalidTimestampError, UnsupportedCompressionTypeError. Compiled (proto._codec) when built,
    pure Python otherwise: the two are tested to agree.
    """
    limit = -1 if max_batch_bytes is None else max_batch_bytes
    walk = _codec.validate if _codec is not None else _validate_py
    batches, record_count, offset_count, max_ts, max_ts_delta, compressed = walk(
        buf, deep, limit, min_timestamp, max_timestamp)
    if compressed:
        by_position = {b.position: b for b in batches}
        for pos in compressed:
            b = by_position[pos]
            _check_compressed_records(buf, pos, b.size, b.attributes & CODEC_MASK, b.record_count, b.base_timestamp,
                                      b.max_timestamp, limit, min_timestamp, max_timestamp)
    return BatchesInfo(batches, record_count, offset_count, max_ts, max_ts_delta)


def _check_compressed_records(buf: bytes | bytearray | memoryview, pos: int, size: int, codec: int, count: int,
                              base_ts: int, batch_max_ts: int, max_batch_bytes: int, min_ts: int,
                              max_ts: int) -> None:
    bound = (max_batch_bytes if max_batch_bytes >= 0 else DEFAULT_MAX_DECOMPRESSED_BYTES) - HEADER_SIZE
    data = decompress_bounded(codec, memoryview(buf)[pos + HEADER_SIZE:pos + size], max(0, bound),
                              f"batch at position {pos}")
    if count * (MIN_RECORD_BODY + 1) > len(data):
        raise CorruptMessageError(f"batch at position {pos}: {count} records cannot fit in {len(data)} bytes")
    if _codec is not None:
        _codec.check_records(data, count, base_ts, batch_max_ts, min_ts, max_ts, pos)
    else:
        _check_records_py(data, count, base_ts, batch_max_ts, min_ts, max_ts, pos)


_Validated = tuple[tuple[BatchInfo, ...], int, int, int, int, list[int]]


def _validate_py(buf: bytes | bytearray | memoryview, deep: bool, max_batch_bytes: int, min_ts: int,
                 max_ts: int) -> _Validated:
    """The pure-Python twin of proto/_codec.c's ``validate``: same rules, same order, same errors."""
    total = len(buf)
    if total == 0:
        raise CorruptMessageError("empty record set")
    mv = memoryview(buf)
    unpack = _HEADER.unpack_from
    batches: list[BatchInfo] = []
    compressed: list[int] = []
    record_count = offset_count = 0
    max_timestamp = -1
    max_timestamp_delta = 0
    pos = 0
    while pos < total:
        if total - pos < HEADER_SIZE:
            raise CorruptMessageError(f"truncated batch header at position {pos}")
        (base, length, epoch, magic, crc, attributes, last_delta, base_ts, batch_max_ts, pid, pepoch, seq,
         count) = unpack(buf, pos)
        attributes &= 0xFFFF
        if length < HEADER_SIZE - LOG_OVERHEAD or length + LOG_OVERHEAD > total - pos:
            raise CorruptMessageError(f"batch at position {pos} has bad length {length}")
        size = length + LOG_OVERHEAD
        if magic != MAGIC:
            raise CorruptMessageError(f"batch at position {pos} has magic {magic}, expected {MAGIC}")
        if crc32c(mv[pos + ATTRIBUTES_OFFSET:pos + size]) != crc:
            raise CorruptMessageError(f"batch at position {pos} failed its CRC-32C check")
        if max_batch_bytes >= 0 and size > max_batch_bytes:
            raise MessageTooLargeError(f"batch of {size} bytes exceeds max.message.bytes={max_batch_bytes}")
        codec = attributes & CODEC_MASK
        if codec not in SUPPORTED_CODECS:
            raise UnsupportedCompressionTypeError(f"compression codec {codec} is not supported")
        if deep:
            if attributes & ~KNOWN_ATTRIBUTES:
                raise InvalidRecordError(f"batch at position {pos} has unknown attribute bits {attributes:#x}")
            if attributes & CONTROL_MASK:
                # Kafka's LogValidator: control batches enter a log only through WriteTxnMarkers.
                raise InvalidRecordError(
                    f"batch at position {pos} is a control batch: clients may not write control records")
            if attributes & TRANSACTIONAL_MASK and pid < 0:
                raise InvalidRecordError(
                    f"batch at position {pos} is transactional without a producer id")
            if attributes & TIMESTAMP_TYPE_MASK:
                raise InvalidRecordError(f"batch at position {pos} claims LogAppendTime: producers send CreateTime")
            if last_delta < 0 or count <= 0 or count != last_delta + 1:
                raise InvalidRecordError(
                    f"batch at position {pos}: record_count {count} inconsistent with last_offset_delta {last_delta}")
            if (pepoch < 0 or seq < 0) if pid >= 0 else (pid != -1 or pepoch != -1 or seq != -1):
                raise InvalidRecordError(f"batch at position {pos} has inconsistent producer fields "
                                         f"(id {pid}, epoch {pepoch}, sequence {seq})")
            if codec == COMPRESSION_NONE:
                if count * (MIN_RECORD_BODY + 1) > size - HEADER_SIZE:
                    raise CorruptMessageError(
                        f"batch at position {pos}: {count} records cannot fit in {size - HEADER_SIZE} bytes")
                _check_records_py(mv[pos + HEADER_SIZE:pos + size], count, base_ts, batch_max_ts, min_ts, max_ts,
                                  pos)
        elif last_delta < 0 or count < 0 or (count and last_delta + 1 < count):
            raise InvalidRecordError(
                f"batch at position {pos}: record_count {count} inconsistent with last_offset_delta {last_delta}")
        if batch_max_ts > max_timestamp:
            max_timestamp = batch_max_ts
            max_timestamp_delta = offset_count + last_delta
        record_count += count
        offset_count += last_delta + 1
        if deep and codec != COMPRESSION_NONE:
            compressed.append(pos)
        batches.append(BatchInfo(pos, size, base, last_delta, count, epoch, base_ts, batch_max_ts, pid, pepoch,
                                 seq, attributes))
        pos += size
    return tuple(batches), record_count, offset_count, max_timestamp, max_timestamp_delta, compressed


def _read_varint_py(data: bytes | bytearray | memoryview, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    """Zig-zag varint at ``pos`` within ``end``; -1/-2 as the first item on truncated/overlong input."""
    z = 0
    shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            return -1, -1
        b = data[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            if (max_bytes == 5 and z > 0xFFFFFFFF) or z >> 64:
                return -2, -2
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
    return -2, -2


def _check_records_py(data: bytes | bytearray | memoryview, count: int, base_ts: int, batch_max_ts: int,
                      min_ts: int, max_ts: int, position: int) -> None:
    """The pure-Python twin of proto/_codec.c's record walk."""
    end = len(data)
    p = 0
    seen_max: int | None = None
    where = f"batch at position {position}"

    def varint(what: str, limit: int, max_bytes: int = 5) -> int:
        nonlocal p
        value, new_p = _read_varint_py(data, p, limit, max_bytes)
        if new_p < 0:
            state = "truncated" if new_p == -1 else "too long"
            raise CorruptMessageError(f"{where}: record {i}: {what} varint is {state}")
        p = new_p
        return value

    for i in range(count):
        length = varint("length", end)
        if length < MIN_RECORD_BODY or length > end - p:
            raise CorruptMessageError(f"{where}: record {i} has length {length}, {end - p} bytes left")
        rec_end = p + length
        p += 1  # record attributes: unused by Kafka 2.x
        ts_delta = varint("timestamp delta", rec_end, 10)
        offset_delta = varint("offset delta", rec_end)
        if offset_delta != i:
            raise InvalidRecordError(f"{where}: record {i} has offset delta {offset_delta}, expected {i}")
        n = varint("key length", rec_end)
        if n < -1 or n > rec_end - p:
            raise CorruptMessageError(f"{where}: record {i} has key length {n}")
        p += max(n, 0)
        n = varint("value length", rec_end)
        if n < -1 or n > rec_end - p:
            raise CorruptMessageError(f"{where}: record {i} has value length {n}")
        p += max(n, 0)
        headers = varint("header count", rec_end)
        if headers < 0 or headers > (rec_end - p) // 2:
            raise CorruptMessageError(f"{where}: record {i} has header count {headers}")
        for _h in range(headers):
            n = varint("header key length", rec_end)
            if n < 0 or n > rec_end - p:
                raise CorruptMessageError(f"{where}: record {i} has header key length {n}")
            p += n
            n = varint("header value length", rec_end)
            if n < -1 or n > rec_end - p:
                raise CorruptMessageError(f"{where}: record {i} has header value length {n}")
            p += max(n, 0)
        if p != rec_end:
            raise CorruptMessageError(f"{where}: record {i} has {rec_end - p} bytes beyond its fields")
        ts = base_ts + ts_delta
        if not (min_ts <= ts <= max_ts) or not (-(1 << 63) <= ts < (1 << 63)):
            raise InvalidTimestampError(
                f"{where}: record {i} has timestamp {base_ts} + delta {ts_delta}, outside [{min_ts}, {max_ts}]")
        if seen_max is None or ts > seen_max:
            seen_max = ts
    if p != end:
        raise CorruptMessageError(f"{where}: {end - p} bytes after the last record")
    if seen_max != batch_max_ts:
        raise InvalidRecordError(f"{where}: max_timestamp {batch_max_ts} is not the records' maximum {seen_max}")


def stamp_prefix(base_offset: int, batch_length: int, partition_leader_epoch: int) -> bytes:
    """The 16 bytes the broker writes in place of a batch's first 16 bytes."""
    return _PREFIX.pack(base_offset, batch_length, partition_leader_epoch)


def stamp_in_place(buf: bytearray, pos: int, base_offset: int, partition_leader_epoch: int) -> None:
    (length,) = struct.unpack_from(">i", buf, pos + 8)
    _PREFIX.pack_into(buf, pos, base_offset, length, partition_leader_epoch)


def iter_headers(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of every whole batch in ``buf``; stops at a partial tail."""
    pos = 0
    total = len(buf)
    while total - pos >= HEADER_SIZE:
        header = BatchHeader(*_HEADER.unpack_from(buf, pos))
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > total:
            return
        yield pos, header
        pos += header.size


# ----------------------------------------------------------------- varints

def _zigzag_table(limit: int) -> list[bytes]:
    table = []
    for n in range(limit):
        out = bytearray()
        v = n
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
        table.append(bytes(out))
    return table


_UVARINT = _zigzag_table(1 << 14)  # unsigned encodings of 0..16383 (zig-zag values)


def encode_varint(value: int) -> bytes:
    """Zig-zag varint (Kafka's ByteUtils.writeVarlong)."""
    z = (value << 1) ^ (value >> 63)
    if z < 16384:
        return _UVARINT[z]
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def decode_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """(value, new position) of the zig-zag varint at ``pos``."""
    shift = 0
    z = 0
    try:
        while True:
            b = buf[pos]
            pos += 1
            z |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 63:
                raise CorruptMessageError("varint too long")
    except IndexError:
        raise CorruptMessageError("truncated varint") from None
    return (z >> 1) ^ -(z & 1), pos


# ----------------------------------------------------------------- encoding (client side)

_NULL = encode_varint(-1)


def _compress(codec: int, data: bytes) -> bytes:
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_GZIP:
        return gzip.compress(data, compresslevel=6, mtime=0)
    if codec == COMPRESSION_ZSTD:
        return zstandard.ZstdCompressor(level=3).compress(data)
    if codec == COMPRESSION_SNAPPY:
        return _snappy_compress(data)
    if codec == COMPRESSION_LZ4:
        # Independent blocks, as Kafka's KafkaLZ4BlockOutputStream writes them (Java readers refuse
        # linked blocks); cramjam's one-shot compress() would link them.
        c = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
        c.compress(data)
        return bytes(c.finish())
    raise UnsupportedCompressionTypeError(f"compression codec {codec} is not supported")


# Snappy as Kafka's Java client writes it: snappy-java's xerial framing (magic, version 1,
# compatible version 1, then blocks of [4-byte big-endian length][raw snappy]). librdkafka and
# some others write one raw snappy block; both are read.
_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK: Final = 32 * 1024


def _snappy_compress(data: bytes) -> bytes:
    parts = [_XERIAL_HEADER]
    for i in range(0, len(data), _XERIAL_BLOCK):
        raw = bytes(cramjam.snappy.compress_raw(data[i:i + _XERIAL_BLOCK]))
        parts.append(struct.pack(">i", len(raw)))
        parts.append(raw)
    return b"".join(parts)


def _snappy_block(block: bytes, room: int, what: str) -> bytes:
    """One raw snappy block, its claimed length checked against what is left of the bound first."""
    try:
        claimed = cramjam.snappy.decompress_raw_len(block)
        if claimed > room:
            raise MessageTooLargeError(f"{what} decompresses to more than the bound")
        return bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as e:
        raise CorruptMessageError(f"{what}: cannot decompress snappy payload: {e}") from None


def _snappy_decompress_bounded(data: bytes, limit: int, what: str) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return _snappy_block(data, limit, what)
    if len(data) < len(_XERIAL_HEADER):
        raise CorruptMessageError(f"{what}: truncated snappy framing header")
    parts: list[bytes] = []
    got = 0
    pos = len(_XERIAL_HEADER)
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptMessageError(f"{what}: truncated snappy block length")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise CorruptMessageError(f"{what}: snappy block of {n} bytes does not fit the payload")
        chunk = _snappy_block(data[pos:pos + n], limit - got, what)
        pos += n
        got += len(chunk)
        parts.append(chunk)
    return b"".join(parts)


_LZ4_MAGIC: Final = b"\x04\x22\x4d\x18"
_LZ4_MAX_BLOCK: Final = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}


def _lz4_decompress_bounded(data: bytes, limit: int, what: str) -> bytes:
    """An LZ4 frame (Kafka's framing for magic 2), block by block: each block holds at most the
    frame's maximum block size, so the output is checked against ``limit`` as it grows."""
    if len(data) < 7 or not data.startswith(_LZ4_MAGIC):
        raise CorruptMessageError(f"{what}: not an LZ4 frame")
    flg, bd = data[4], data[5]
    max_block = _LZ4_MAX_BLOCK.get((bd >> 4) & 7)
    if flg >> 6 != 1 or max_block is None:
        raise CorruptMessageError(f"{what}: unsupported LZ4 frame header")
    pos = 6
    if flg & 0x08:  # content size
        if int.from_bytes(data[6:14], "little") > limit:
            raise MessageTooLargeError(f"{what} decompresses to more than {limit} bytes")
        pos += 8
    pos += (4 if flg & 0x01 else 0) + 1  # dictionary id, header checksum
    block_checksum, independent = flg & 0x10, flg & 0x20
    blocks: list[tuple[bool, bytes]] = []
    while True:
        if pos + 4 > len(data):
            raise CorruptMessageError(f"{what}: truncated LZ4 frame")
        size = int.from_bytes(data[pos:pos + 4], "little")
        pos += 4
        if size == 0:
            break
        stored, size = bool(size & 0x80000000), size & 0x7FFFFFFF
        if size > max_block or pos + size > len(data):
            raise CorruptMessageError(f"{what}: LZ4 block of {size} bytes does not fit")
        blocks.append((stored, data[pos:pos + size]))
        pos += size + (4 if block_checksum else 0)
    pos += 4 if flg & 0x04 else 0  # content checksum
    if pos != len(data):
        raise CorruptMessageError(f"{what}: LZ4 frame is truncated or has trailing bytes")
    try:
        if not independent:
            # Linked blocks decode only as a whole; every block yields at most max_block bytes.
            if len(blocks) * max_block > limit:
                raise MessageTooLargeError(f"{what}: linked LZ4 blocks may exceed {limit} bytes")
            return bytes(cramjam.lz4.decompress(data))
        parts: list[bytes] = []
        got = 0
        buf = bytearray(max_block)
        for stored, block in blocks:
            if stored:
                chunk = block
            else:
                n = cramjam.lz4.decompress_block_into(block, buf)  # at most max_block: the buffer's size
                chunk = bytes(buf[:n])
            got += len(chunk)
            if got > limit:
                raise MessageTooLargeError(f"{what} decompresses to more than {limit} bytes")
            parts.append(chunk)
        return b"".join(parts)
    except cramjam.DecompressionError as e:
        raise CorruptMessageError(f"{what}: cannot decompress lz4 payload: {e}") from None


def decompress_bounded(codec: int, data: bytes | memoryview, limit: int, what: str = "batch") -> bytes:
    """Decompress a records section, never producing more than ``limit`` bytes (a compression bomb
    stops at the bound, it is not inflated first and measured after)."""
    if codec == COMPRESSION_NONE:
        out = bytes(data)
    elif codec == COMPRESSION_GZIP:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out = d.decompress(data, limit + 1)
        except zlib.error as e:
            raise CorruptMessageError(f"{what}: cannot decompress gzip payload: {e}") from None
        if len(out) <= limit and (not d.eof or d.unused_data):
            raise CorruptMessageError(f"{what}: gzip payload is truncated or has trailing bytes")
    elif codec == COMPRESSION_ZSTD:
        out = _zstd_decompress_bounded(bytes(data), limit, what)
    elif codec == COMPRESSION_SNAPPY:
        out = _snappy_decompress_bounded(bytes(data), limit, what)
    elif codec == COMPRESSION_LZ4:
        out = _lz4_decompress_bounded(bytes(data), limit, what)
    else:
        raise UnsupportedCompressionTypeError(f"compression codec {codec} is not supported")
    if len(out) > limit:
        raise MessageTooLargeError(f"{what} decompresses to more than {limit} bytes")
    return out


_local = threading.local()


def _zstd_decompress_bounded(data: bytes, limit: int, what: str) -> bytes:
    # A decompression context costs ~20 us to make: one per thread, reused.
    dctx = getattr(_local, "zstd", None)
    if dctx is None:
        dctx = _local.zstd = zstandard.ZstdDecompressor()
    try:
        claimed = zstandard.frame_content_size(data)
        if claimed > limit:
            raise MessageTooLargeError(f"{what} decompresses to {claimed} bytes, more than {limit}")
        if claimed >= 0:
            # The frame says its size (<= limit): one allocation of that size; zstd checks the claim.
            return bytes(dctx.decompress(data))
        # No size in the frame header: stream, and stop one byte past the bound.
        parts: list[bytes] = []
        got = 0
        with dctx.stream_reader(data, read_across_frames=False) as reader:
            while got <= limit:  # read() may return less than asked: loop to the bound or the end
                chunk = reader.read(limit + 1 - got)
                if not chunk:
                    break
                parts.append(chunk)
                got += len(chunk)
        return b"".join(parts)
    except zstandard.ZstdError as e:
        raise CorruptMessageError(f"{what}: cannot decompress zstd payload: {e}") from None


def _decompress(codec: int, data: bytes | memoryview) -> bytes:
    return decompress_bounded(codec, data, DEFAULT_MAX_DECOMPRESSED_BYTES)


_SMALL = 8192  # non-negative values below this are one table lookup (zig-zag value < 16384)


def _encode_record_body_py(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
                           headers: Sequence[Header] = ()) -> bytes:
    """The pure-Python twin of proto/_codec.c's ``encode_record``: one record, length prefix included."""
    if (not headers and 0 <= timestamp_delta < _SMALL and 0 <= offset_delta < _SMALL
            and (key is None or len(key) < _SMALL) and (value is None or len(value) < _SMALL)):
        # The producer's hot path (one call per record): table lookups and one join, no helpers.
        t = _UVARINT
        body = b"".join((b"\x00", t[timestamp_delta << 1], t[offset_delta << 1],
                         _NULL if key is None else t[len(key) << 1], key or b"",
                         _NULL if value is None else t[len(value) << 1], value or b"", b"\x00"))
        n = len(body)
        return (t[n << 1] if n < _SMALL else encode_varint(n)) + body
    parts = [b"\x00", encode_varint(timestamp_delta), encode_varint(offset_delta)]
    if key is None:
        parts.append(_NULL)
    else:
        parts.append(encode_varint(len(key)))
        parts.append(key)
    if value is None:
        parts.append(_NULL)
    else:
        parts.append(encode_varint(len(value)))
        parts.append(value)
    parts.append(encode_varint(len(headers)))
    for h in headers:
        hk = h.key.encode()
        parts.append(encode_varint(len(hk)))
        parts.append(hk)
        if h.value is None:
            parts.append(_NULL)
        else:
            parts.append(encode_varint(len(h.value)))
            parts.append(h.value)
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def _encode_records_py(values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
                       timestamp_delta: int | Sequence[int], first_offset_delta: int) -> bytes:
    """The pure-Python twin of proto/_codec.c's ``encode_records``."""
    if keys is not None and len(keys) != len(values):
        raise ValueError("keys and values differ in length")
    if isinstance(timestamp_delta, int):
        deltas: Sequence[int] = [timestamp_delta] * len(values)
    else:
        deltas = timestamp_delta
        if len(deltas) != len(values):
            raise ValueError("timestamp deltas and values differ in length")
    return b"".join(_encode_record_body_py(first_offset_delta + i, deltas[i], None if keys is None else keys[i], v)
                    for i, v in enumerate(values))


# Compiled when proto/_codec.c is built (one C call per record, or per batch for encode_records),
# else the pure-Python twins; both produce identical bytes (tests/unit/test_record_encode.py).
encode_record_body = _codec.encode_record if _codec is not None else _encode_record_body_py


class _RecordFuturePy:
    """The pure-Python twin of proto/_codec.c's ``RecordFuture``: the base of the producer's record
    future (``client.futures.FutureRecordMetadata``): the batch's shared result, the record's offset
    delta in the batch and its timestamp."""

    __slots__ = ("_mk_rel", "_mk_result", "_mk_ts")

    def __init__(self, result: Any, relative_offset: int, timestamp: int) -> None:
        self._mk_result = result
        self._mk_rel = relative_offset
        self._mk_ts = timestamp


RecordFuture: Any = _codec.RecordFuture if _codec is not None else _RecordFuturePy


class _RecordsBuilderPy:
    """The pure-Python twin of proto/_codec.c's ``RecordsBuilder``: one open batch's records section.

    ``try_append`` encodes a record onto the section and returns ``factory(result, offset_delta,
    timestamp)`` (the record's future; a float timestamp is floored to whole ms), or None - adding nothing - when the builder already holds a
    record and ``size + estimate > limit``. ``size`` is ``overhead`` plus the section's length.
    """

    __slots__ = ("_factory", "_overhead", "_parts", "_result", "base_ts", "count", "max_ts", "size")

    def __init__(self, overhead: int, factory: Callable[[Any, int, int], Any], result: Any) -> None:
        self._overhead = overhead
        self._factory = factory
        self._result = result
        self._parts: list[bytes] = []
        self.size = overhead
        self.count = 0
        self.base_ts = -1
        self.max_ts = -1

    def try_append(self, key: bytes | None, value: bytes | None, headers: Sequence[Header] | None,
                   timestamp: int | float, estimate: int, limit: int) -> Any:
        timestamp = math.floor(timestamp)  # ms; a float (the producer's CreateTime) is truncated
        count = self.count
        if count and self.size + estimate > limit:
            return None
        base = timestamp if count == 0 else self.base_ts
        body = _encode_record_body_py(count, timestamp - base, key, value, headers or ())
        self._parts.append(body)
        self.size += len(body)
        self.base_ts = base
        if timestamp > self.max_ts:
            self.max_ts = timestamp
        self.count = count + 1
        return self._factory(self._result, count, timestamp)

    def append_section(self, section: bytes, count: int, timestamp: int) -> int:
        first = self.count
        if first == 0:
            self.base_ts = timestamp
        if timestamp > self.max_ts:
            self.max_ts = timestamp
        self._parts.append(bytes(section))
        self.size += len(section)
        self.count = first + count
        return first

    def getvalue(self) -> bytes:
        return b"".join(self._parts)


# An open batch's records, appended in place (compiled: one C call per record, future included).
RecordsBuilder: Any = _codec.RecordsBuilder if _codec is not None else _RecordsBuilderPy


def encode_records(values: Sequence[bytes | None], keys: Sequence[bytes | None] | None = None,
                   timestamp_delta: int | Sequence[int] = 0, first_offset_delta: int = 0) -> bytes:
    """The uncompressed records section of ``values`` (with ``keys`` if given) in one call.

    Record ``i`` gets offset delta ``first_offset_delta + i`` and timestamp delta ``timestamp_delta``
    (one int for all, or one per record); no headers. The bulk producer path (``send_batch``) frames
    the result with :func:`build_batch`.
    """
    if _codec is not None:
        result: bytes = _codec.encode_records(values, keys, timestamp_delta, first_offset_delta)
        return result
    return _encode_records_py(values, keys, timestamp_delta, first_offset_delta)


def build_batch(records_section: bytes, *, record_count: int, base_timestamp: int, max_timestamp: int,
                compression: int = COMPRESSION_NONE, base_offset: int = 0,
                partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                base_sequence: int = NO_SEQUENCE, is_transactional: bool = False,
                log_append_time: bool = False) -> bytes:
    """Frame an (uncompressed) records section as a batch; compress and checksum it."""
    if record_count <= 0:
        raise ValueError("a batch holds at least one record")
    attributes = compression & CODEC_MASK
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    payload = _compress(compression, records_section)
    tail = struct.pack(">hiqqqhii", attributes, record_count - 1, base_timestamp, max_timestamp,
                       producer_id, producer_epoch, base_sequence, record_count) + payload
    crc = crc32c(tail)
    length = len(tail) + 9  # partition_leader_epoch(4) + magic(1) + crc(4)
    return struct.pack(">qiibI", base_offset, length, partition_leader_epoch, MAGIC, crc) + tail


def encode_batch(records: Sequence[Record], *, compression: int = COMPRESSION_NONE, base_offset: int = 0,
                 partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                 producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                 base_sequence: int = NO_SEQUENCE, is_transactional: bool = False) -> bytes:
    """Encode ``records`` as one batch; their ``offset`` fields are ignored (deltas 0..n-1)."""
    if not records:
        raise ValueError("a batch holds at least one record")
    base_ts = records[0].timestamp
    max_ts = base_ts
    parts = []
    for i, r in enumerate(records):
        ts = r.timestamp
        if ts > max_ts:
            max_ts = ts
        parts.append(encode_record_body(i, ts - base_ts, r.key, r.value, r.headers))
    return build_batch(b"".join(parts), record_count=len(records), base_timestamp=base_ts,
                       max_timestamp=max_ts, compression=compression, base_offset=base_offset,
                       partition_leader_epoch=partition_leader_epoch, producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=base_sequence,
                       is_transactional=is_transactional)


def recompress_batches(buf: bytes | bytearray | memoryview, info: BatchesInfo, codec: int,
                       max_batch_bytes: int) -> bytes | None:
    """A topic's compression.type on the leader (Kafka's LogValidator): every batch of ``buf`` (already
    validated deep, ``info``) whose codec is not ``codec`` rebuilt with it - same records, offset
    deltas, timestamps, producer fields and attribute bits, decompressed through the same bounded
    path as validation - the others kept byte for byte. None when every batch already has ``codec``.
    MessageTooLargeError when a rebuilt batch exceeds ``max_batch_bytes``."""
    if all(b.attributes & CODEC_MASK == codec for b in info.batches):
        return None
    if codec not in SUPPORTED_CODECS:
        raise UnsupportedCompressionTypeError(f"compression codec {codec} is not supported")
    mv = memoryview(buf)
    bound = max(0, (max_batch_bytes if max_batch_bytes >= 0 else DEFAULT_MAX_DECOMPRESSED_BYTES) - HEADER_SIZE)
    parts: list[bytes | memoryview] = []
    for b in info.batches:
        old = b.attributes & CODEC_MASK
        if old == codec:
            parts.append(mv[b.position:b.position + b.size])
            continue
        records = decompress_bounded(old, mv[b.position + HEADER_SIZE:b.position + b.size], bound,
                                     f"batch at position {b.position}")
        attributes = (b.attributes & ~CODEC_MASK) | codec
        tail = struct.pack(">hiqqqhii", attributes, b.last_offset_delta, b.base_timestamp, b.max_timestamp,
                           b.producer_id, b.producer_epoch, b.base_sequence, b.record_count) + _compress(codec, records)
        rebuilt = struct.pack(">qiibI", b.base_offset, len(tail) + 9, b.partition_leader_epoch, MAGIC,
                              crc32c(tail)) + tail
        if 0 <= max_batch_bytes < len(rebuilt):
            raise MessageTooLargeError(f"the batch at position {b.position} is {len(rebuilt)} bytes once "
                                       f"recompressed, over max.message.bytes ({max_batch_bytes})")
        parts.append(rebuilt)
    return b"".join(parts)


# ----------------------------------------------------------------- transaction markers (KIP-98)

# A control record's key: version int16 (0) + type int16; an end-transaction marker's value:
# version int16 (0) + coordinator_epoch int32 (Kafka's ControlRecordType / EndTransactionMarker).
CONTROL_TYPE_ABORT: Final = 0
CONTROL_TYPE_COMMIT: Final = 1
_CONTROL_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """An end-transaction marker: what a COMMIT/ABORT control batch says."""

    commit: bool
    coordinator_epoch: int


def encode_control_batch(*, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                         timestamp: int, base_offset: int = 0,
                         partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    """A COMMIT or ABORT marker as Kafka writes it (MemoryRecords.withEndTransactionMarker): one
    record, control and transactional bits set, no sequence. Only WriteTxnMarkers writes these."""
    key = _CONTROL_KEY.pack(0, CONTROL_TYPE_COMMIT if commit else CONTROL_TYPE_ABORT)
    value = _MARKER_VALUE.pack(0, coordinator_epoch)
    batch = bytearray(build_batch(encode_record_body(0, 0, key, value, ()), record_count=1, base_timestamp=timestamp,
                                  max_timestamp=timestamp, base_offset=base_offset,
                                  partition_leader_epoch=partition_leader_epoch, producer_id=producer_id,
                                  producer_epoch=producer_epoch, base_sequence=NO_SEQUENCE, is_transactional=True))
    (attrs,) = _ATTRIBUTES.unpack_from(batch, ATTRIBUTES_OFFSET)
    _ATTRIBUTES.pack_into(batch, ATTRIBUTES_OFFSET, attrs | CONTROL_MASK)
    _CRC.pack_into(batch, CRC_OFFSET, crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch)


def decode_txn_marker(buf: bytes | bytearray | memoryview, pos: int = 0) -> TxnMarker | None:
    """The end-transaction marker of the control batch at ``pos``; None for a control batch of
    another type (Kafka ignores unknown control types). CorruptMessageError when it is malformed."""
    _header, records = decode_batch_fields(buf, pos)
    if not records:
        raise CorruptMessageError(f"control batch at position {pos} holds no record")
    key, value = records[0][2], records[0][3]
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptMessageError(f"control batch at position {pos} has a bad control record key")
    _version, kind = _CONTROL_KEY.unpack_from(key)
    if kind not in (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT):
        return None
    if value is None or len(value) < _MARKER_VALUE.size:
        raise CorruptMessageError(f"control batch at position {pos} has a bad end-transaction marker")
    _vversion, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
    return TxnMarker(kind == CONTROL_TYPE_COMMIT, coordinator_epoch)


# ----------------------------------------------------------------- decoding (client / cold paths)


def _read_bytes(data: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = decode_varint(data, pos)
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(data):
        raise CorruptMessageError("record field runs past the end of the batch")
    return data[pos:end], end


RecordFields = tuple[int, int, bytes | None, bytes | None, tuple[Header, ...]]
"""(offset, timestamp, key, value, headers) of one decoded record: plain tuples for column builders."""


def decode_batch_fields(buf: bytes | bytearray | memoryview, pos: int = 0, *,
                        verify_crc: bool = True) -> tuple[BatchHeader, list[RecordFields]]:
    """Decode the batch at ``pos`` into (offset, timestamp, key, value, headers) tuples.

    Absolute offsets and timestamps (LogAppendTime batches carry the batch's max timestamp). Tuples,
    not ``Record`` objects, so readers that build columns (the Spark source) pay for no object per
    record they do not need.
    """
    header = read_header(buf, pos)
    end = pos + header.size
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or end > len(buf):
        raise CorruptMessageError(f"batch at position {pos} runs past the buffer")
    if header.magic != MAGIC:
        raise CorruptMessageError(f"batch at position {pos} has magic {header.magic}")
    mv = memoryview(buf)
    if verify_crc and crc32c(mv[pos + ATTRIBUTES_OFFSET:end]) != header.crc:
        raise CorruptMessageError(f"batch at position {pos} failed its CRC-32C check")
    data = _decompress(header.compression, mv[pos + HEADER_SIZE:end])
    records: list[RecordFields] = []
    p = 0
    base_offset = header.base_offset
    base_ts = header.base_timestamp
    log_append = bool(header.attributes & TIMESTAMP_TYPE_MASK)
    for _ in range(header.record_count):
        length, p = decode_varint(data, p)
        rec_end = p + length
        if length < 0 or rec_end > len(data):
            raise CorruptMessageError("record length runs past the end of the batch")
        p += 1  # record attributes (unused)
        ts_delta, p = decode_varint(data, p)
        off_delta, p = decode_varint(data, p)
        key, p = _read_bytes(data, p)
        value, p = _read_bytes(data, p)
        n_headers, p = decode_varint(data, p)
        headers: tuple[Header, ...] = ()
        if n_headers > 0:
            hl: list[Header] = []
            for _h in range(n_headers):
                hk, p = _read_bytes(data, p)
                hv, p = _read_bytes(data, p)
                hl.append(Header((hk or b"").decode("utf-8", "replace"), hv))
            headers = tuple(hl)
        if p != rec_end:
            raise CorruptMessageError("record length does not match its fields")
        ts = header.max_timestamp if log_append else base_ts + ts_delta
        records.append((base_offset + off_delta, ts, key, value, headers))
    return header, records


def decode_batch(buf: bytes | bytearray | memoryview, pos: int = 0, *,
                 verify_crc: bool = True) -> tuple[BatchHeader, list[Record]]:
    """Decode the batch at ``pos`` into absolute-offset, absolute-timestamp records."""
    header, fields = decode_batch_fields(buf, pos, verify_crc=verify_crc)
    return header, [Record(value=v, key=k, headers=h, timestamp=ts, offset=o) for o, ts, k, v, h in fields]


def decode_batches(buf: bytes | bytearray | memoryview, *, verify_crc: bool = True) -> list[Record]:
    """All records of every whole batch in ``buf`` (a partial trailing batch is ignored)."""
    out: list[Record] = []
    for pos, _header in iter_headers(buf):
        out.extend(decode_batch(buf, pos, verify_crc=verify_crc)[1])
    return out


if _codec is not None:
    _codec.set_batch_info_class(BatchInfo)
