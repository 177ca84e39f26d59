"""Fetched record batches decoded straight into columns: the consumer's and the Spark reader's codec.

Theory of operation
-------------------
A Fetch response carries each partition's batches as one bytes field. ``decode_columns`` walks it
once and appends every record to column buffers laid out as Apache Arrow lays out arrays, so
pyarrow wraps them without copying (``to_arrow``) and the consumer builds its ``ConsumerRecord``
tuples from them (``to_records``) - in both cases without a Python object per record that the
caller does not get. The result is a ``RecordColumns`` NamedTuple of plain bytes buffers:

- ``offsets`` and ``timestamps`` (milliseconds): int64, native byte order;
  ``timestamp_types``: int32 (0 CreateTime, 1 LogAppendTime, Spark's ``timestampType``);
- ``key_*`` and ``value_*``: a validity bitmap (least significant bit first; None when there is
  no null), int32 offsets (rows + 1 of them) and the concatenated bytes;
- headers as Arrow's ``list<struct<key: string, value: binary>>``: per-row list offsets (None when
  headers were not asked for), then the keys (UTF-8; invalid bytes become U+FFFD, as
  ``Header.key`` does) and values of all headers, flattened.

The walk: batches wholly below ``min_offset`` are skipped without being read; it stops at the
first batch at or above ``max_offset`` and at a partial trailing batch (a fetch may end in the
middle of one). Each batch is checked (magic, CRC-32C, bounded decompression, record framing);
only records with ``min_offset <= offset < max_offset`` become rows and control batches none. A
batch that fails ends the walk: its rows are dropped, ``error`` says (base_offset, next_offset,
reason), and the rows of the batches before it stay - the consumer hands those out first, then
reports the bad batch with the offset that skips it. ``next_offset`` is where the next fetch
starts (past the last batch walked, clamped to [min_offset, max_offset]).

Compiled in proto/_columnar.c when built (``make codec``); this module is the pure-Python twin
(``MINIKAFKA_PURE_PYTHON=1`` selects it) and the reference for what the C code does: same rules,
same order, same messages. tests/unit/test_columnar.py checks both agree, and agree with
``proto.record_batch.decode_batch``.
"""

from __future__ import annotations

import functools
import os
import sys
from array import array
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from proto.errors import KafkaError
from proto.record_batch import (
    CONTROL_MASK,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_MASK,
    Header,
    crc32c,
    decompress_bounded,
)

INT64_MAX: Final = (1 << 63) - 1
_INT32_MAX: Final = (1 << 31) - 1
_MASK64: Final = (1 << 64) - 1


class RecordColumns(NamedTuple):
    """Decoded rows as Arrow-layout buffers (see the module docs); field order is the C module's."""

    num_rows: int
    offsets: bytes
    timestamps: bytes
    timestamp_types: bytes
    key_validity: bytes | None
    key_offsets: bytes
    key_data: bytes
    key_nulls: int
    value_validity: bytes | None
    value_offsets: bytes
    value_data: bytes
    value_nulls: int
    header_offsets: bytes | None
    header_key_offsets: bytes
    header_key_data: bytes
    header_value_validity: bytes | None
    header_value_offsets: bytes
    header_value_data: bytes
    header_value_nulls: int
    next_offset: int
    error: tuple[int, int, str] | None

    def offset_at(self, row: int) -> int:
        return int.from_bytes(self.offsets[8 * row:8 * row + 8], sys.byteorder, signed=True)


_columnar: Any
try:
    if os.environ.get("MINIKAFKA_PURE_PYTHON"):
        raise ImportError("MINIKAFKA_PURE_PYTHON is set")
    from proto import _columnar  # type: ignore[attr-defined, no-redef]
except ImportError:
    _columnar = None
else:
    _columnar.set_classes(KafkaError, RecordColumns)
COMPILED: Final = _columnar is not None

Decompress = Callable[[int, memoryview], bytes]


def _decompress(codec: int, section: memoryview) -> bytes:
    return decompress_bounded(codec, section, DEFAULT_MAX_DECOMPRESSED_BYTES, "fetched batch")


def decode_columns(buf: bytes | bytearray | memoryview, min_offset: int = 0, max_offset: int = INT64_MAX, *,
                   include_headers: bool = True, verify_crc: bool = True) -> RecordColumns:
    """The rows of the batches in ``buf`` with ``min_offset <= offset < max_offset`` (module docs)."""
    crc = crc32c if verify_crc else None
    if _columnar is not None:
        cols: RecordColumns = _columnar.decode(buf, min_offset, max_offset, include_headers, crc, _decompress)
        return cols
    return decode_columns_py(buf, min_offset, max_offset, include_headers, crc, _decompress)


def to_records(cols: RecordColumns, start: int, stop: int, topic: str, partition: int, record_type: type,
               header_type: type = Header) -> list[Any]:
    """Rows [start, stop) as ``record_type(topic, partition, offset, timestamp, key, value, headers)``
    (a 7-field NamedTuple; the consumer's ConsumerRecord)."""
    if _columnar is not None:
        out: list[Any] = _columnar.records(cols, start, stop, topic, partition, record_type, header_type)
        return out
    return records_py(cols, start, stop, topic, partition, record_type, header_type)


# ----------------------------------------------------------------- the pure-Python twin


def _wrap64(v: int) -> int:
    v &= _MASK64
    return v - (1 << 64) if v >> 63 else v


class _Truncated(Exception):
    pass


class _TooLong(Exception):
    pass


def _varint(data: bytes | memoryview, p: int, end: int) -> tuple[int, int]:
    z = 0
    shift = 0
    while True:
        if shift > 63:
            raise _TooLong
        if p >= end:
            raise _Truncated
        b = data[p]
        p += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    z &= _MASK64
    return (z >> 1) ^ -(z & 1), p


class _Binary:
    """One binary column being built (validity bitmap, int32 offsets, data)."""

    __slots__ = ("data", "nulls", "offsets", "rows", "validity")

    def __init__(self) -> None:
        self.validity = bytearray()
        self.offsets = array("i", [0])
        self.data = bytearray()
        self.rows = 0
        self.nulls = 0

    def add(self, value: bytes | memoryview | None) -> None:
        if self.rows & 7 == 0:
            self.validity.append(0)
        if value is not None:
            self.validity[self.rows >> 3] |= 1 << (self.rows & 7)
            if len(self.data) + len(value) > _INT32_MAX:
                raise OverflowError("a column's data exceeds 2 GiB (Arrow's int32 offsets)")
            self.data += value
        else:
            self.nulls += 1
        self.rows += 1
        self.offsets.append(len(self.data))

    def mark(self) -> tuple[int, int, int, int, int]:
        return len(self.validity), len(self.offsets), len(self.data), self.rows, self.nulls

    def reset(self, mark: tuple[int, int, int, int, int]) -> None:
        v, o, d, self.rows, self.nulls = mark
        del self.validity[v:]
        del self.offsets[o:]
        del self.data[d:]
        if self.rows & 7:
            self.validity[self.rows >> 3] &= (1 << (self.rows & 7)) - 1

    def validity_bytes(self) -> bytes | None:
        return bytes(self.validity) if self.nulls else None


class _Builder:
    __slots__ = ("header_key_data", "header_key_offsets", "header_offsets", "header_values", "headers", "keys",
                 "offsets", "rows", "timestamps", "types", "values")

    def __init__(self, include_headers: bool) -> None:
        self.offsets = array("q")
        self.timestamps = array("q")
        self.types = array("i")
        self.keys = _Binary()
        self.values = _Binary()
        self.header_offsets: array[int] | None = array("i", [0]) if include_headers else None
        self.header_key_offsets = array("i", [0])
        self.header_key_data = bytearray()
        self.header_values = _Binary()
        self.rows = 0
        self.headers = 0

    def mark(self) -> tuple[Any, ...]:
        return (len(self.offsets), len(self.header_offsets or ()), len(self.header_key_offsets),
                len(self.header_key_data), self.rows, self.headers, self.keys.mark(), self.values.mark(),
                self.header_values.mark())

    def reset(self, mark: tuple[Any, ...]) -> None:
        n, nh, nko, nkd, self.rows, self.headers, k, v, hv = mark
        del self.offsets[n:]
        del self.timestamps[n:]
        del self.types[n:]
        if self.header_offsets is not None:
            del self.header_offsets[nh:]
        del self.header_key_offsets[nko:]
        del self.header_key_data[nkd:]
        self.keys.reset(k)
        self.values.reset(v)
        self.header_values.reset(hv)

    def result(self, next_offset: int, error: tuple[int, int, str] | None) -> RecordColumns:
        k, v, hv = self.keys, self.values, self.header_values
        return RecordColumns(
            self.rows, self.offsets.tobytes(), self.timestamps.tobytes(), self.types.tobytes(),
            k.validity_bytes(), k.offsets.tobytes(), bytes(k.data), k.nulls,
            v.validity_bytes(), v.offsets.tobytes(), bytes(v.data), v.nulls,
            None if self.header_offsets is None else self.header_offsets.tobytes(),
            self.header_key_offsets.tobytes(), bytes(self.header_key_data),
            hv.validity_bytes(), hv.offsets.tobytes(), bytes(hv.data), hv.nulls, next_offset, error)


class _Malformed(Exception):
    pass


def _decode_records(b: _Builder, data: bytes | memoryview, p: int, end: int, count: int, base_offset: int,
                    base_ts: int, max_ts: int, ts_type: int, min_offset: int, max_offset: int,
                    pos: int) -> None:
    """The record walk of one batch (raises _Malformed with the reason)."""
    for i in range(count):
        where = f"batch at position {pos}: record {i}"

        def bad(what: str, value: int, where: str = where) -> _Malformed:
            return _Malformed(f"{where} has {what} {value}")

        try:
            length, p = _varint(data, p, end)
            if length < 0 or length > end - p:
                raise bad("length", length)
            rec_end = p + length
            if p >= rec_end:
                raise _Truncated
            p += 1  # record attributes: unused in v2
            ts_delta, p = _varint(data, p, rec_end)
            off_delta, p = _varint(data, p, rec_end)
            offset = _wrap64(base_offset + off_delta)
            keep = min_offset <= offset < max_offset
            klen, p = _varint(data, p, rec_end)
            if klen < -1 or klen > rec_end - p:
                raise bad("key length", klen)
            key = None if klen < 0 else data[p:p + klen]
            p += max(klen, 0)
            vlen, p = _varint(data, p, rec_end)
            if vlen < -1 or vlen > rec_end - p:
                raise bad("value length", vlen)
            value = None if vlen < 0 else data[p:p + vlen]
            p += max(vlen, 0)
            hcount, p = _varint(data, p, rec_end)
            if hcount < 0 or hcount > rec_end - p:
                raise bad("header count", hcount)
            if keep:
                b.offsets.append(offset)
                b.timestamps.append(max_ts if ts_type else _wrap64(base_ts + ts_delta))
                b.types.append(ts_type)
                b.keys.add(key)
                b.values.add(value)
                b.rows += 1
            for _h in range(hcount):
                hk, p = _varint(data, p, rec_end)
                if hk < -1 or hk > rec_end - p:
                    raise bad("header key length", hk)
                hkey = bytes(data[p:p + max(hk, 0)])
                p += max(hk, 0)
                hv, p = _varint(data, p, rec_end)
                if hv < -1 or hv > rec_end - p:
                    raise bad("header value length", hv)
                hval = None if hv < 0 else data[p:p + hv]
                p += max(hv, 0)
                if keep and b.header_offsets is not None:
                    b.header_key_data += hkey.decode("utf-8", "replace").encode()
                    if len(b.header_key_data) > _INT32_MAX:
                        raise OverflowError("header keys exceed 2 GiB (Arrow's int32 offsets)")
                    b.header_key_offsets.append(len(b.header_key_data))
                    b.header_values.add(hval)
                    b.headers += 1
            if p != rec_end:
                raise bad("bytes beyond its fields:", rec_end - p)
            if keep and b.header_offsets is not None:
                b.header_offsets.append(b.headers)
        except _Truncated:
            raise _Malformed(f"{where} is truncated") from None
        except _TooLong:
            raise _Malformed(f"{where} has a varint longer than 10 bytes") from None


def decode_columns_py(buf: bytes | bytearray | memoryview, min_offset: int, max_offset: int, include_headers: bool,
                      crc: Callable[[memoryview], int] | None, decompress: Decompress) -> RecordColumns:
    """The pure-Python twin of ``_columnar.decode``."""
    mv = memoryview(buf)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    total = len(mv)
    b = _Builder(include_headers)
    next_offset = min_offset
    error: tuple[int, int, str] | None = None
    pos = 0
    while total - pos >= HEADER_SIZE:
        base_offset = int.from_bytes(mv[pos:pos + 8], "big", signed=True)
        length = int.from_bytes(mv[pos + 8:pos + 12], "big", signed=True)
        if length < HEADER_SIZE - LOG_OVERHEAD or length > total - pos - LOG_OVERHEAD:
            break  # a partial trailing batch
        size = length + LOG_OVERHEAD
        magic = int.from_bytes(mv[pos + 16:pos + 17], "big", signed=True)
        batch_crc = int.from_bytes(mv[pos + 17:pos + 21], "big")
        attributes = int.from_bytes(mv[pos + 21:pos + 23], "big", signed=True)
        last_delta = int.from_bytes(mv[pos + 23:pos + 27], "big", signed=True)
        base_ts = int.from_bytes(mv[pos + 27:pos + 35], "big", signed=True)
        max_ts = int.from_bytes(mv[pos + 35:pos + 43], "big", signed=True)
        count = int.from_bytes(mv[pos + 57:pos + 61], "big", signed=True)
        batch_next = _wrap64(base_offset + last_delta + 1)
        if batch_next <= min_offset:
            pos += size
            continue
        if base_offset >= max_offset:
            break
        reason: str | None = None
        if magic != MAGIC:
            reason = f"batch at position {pos} has magic {magic}"
        elif crc is not None and crc(mv[pos + 21:pos + size]) & 0xFFFFFFFF != batch_crc:
            reason = f"batch at position {pos} failed its CRC-32C check"
        if reason is None and not attributes & CONTROL_MASK:
            mark = b.mark()
            codec = attributes & 0x07
            data: bytes | memoryview = mv
            p, end = pos + HEADER_SIZE, pos + size
            if codec:
                try:
                    data = decompress(codec, mv[p:end])
                    p, end = 0, len(data)
                except KafkaError as e:
                    reason = str(e)
            if reason is None:
                try:
                    _decode_records(b, data, p, end, count, base_offset, base_ts, max_ts,
                                    1 if attributes & TIMESTAMP_TYPE_MASK else 0, min_offset, max_offset, pos)
                except _Malformed as e:
                    reason = str(e)
                    b.reset(mark)
        if reason is not None:
            error = (base_offset, batch_next, reason)
            break
        if batch_next > next_offset:
            next_offset = min(batch_next, max_offset)
        pos += size
    return b.result(next_offset, error)


def _binary_value(validity: bytes | None, offsets: memoryview, data: bytes, i: int) -> bytes | None:
    if validity is not None and not validity[i >> 3] & (1 << (i & 7)):
        return None
    return data[offsets[i]:offsets[i + 1]]


def records_py(cols: RecordColumns, start: int, stop: int, topic: str, partition: int, record_type: type,
               header_type: type = Header) -> list[Any]:
    """The pure-Python twin of ``_columnar.records``."""
    if not 0 <= start <= stop <= cols.num_rows:
        raise IndexError(f"rows [{start}, {stop}) outside [0, {cols.num_rows})")
    offsets = memoryview(cols.offsets).cast("q")
    stamps = memoryview(cols.timestamps).cast("q")
    koff = memoryview(cols.key_offsets).cast("i")
    voff = memoryview(cols.value_offsets).cast("i")
    hoff = memoryview(cols.header_offsets).cast("i") if cols.header_offsets is not None else None
    hkoff = memoryview(cols.header_key_offsets).cast("i")
    hvoff = memoryview(cols.header_value_offsets).cast("i")
    out: list[Any] = []
    for i in range(start, stop):
        headers: tuple[Any, ...] = ()
        if hoff is not None and hoff[i + 1] > hoff[i]:
            headers = tuple(
                header_type(cols.header_key_data[hkoff[j]:hkoff[j + 1]].decode("utf-8", "replace"),
                            _binary_value(cols.header_value_validity, hvoff, cols.header_value_data, j))
                for j in range(hoff[i], hoff[i + 1]))
        out.append(record_type(topic, partition, offsets[i], stamps[i],
                               _binary_value(cols.key_validity, koff, cols.key_data, i),
                               _binary_value(cols.value_validity, voff, cols.value_data, i), headers))
    return out


# ----------------------------------------------------------------- Arrow


@functools.cache
def kafka_arrow_schema(include_headers: bool = False) -> Any:
    """Spark's Kafka-source schema as Arrow types (what ``to_arrow_schema`` makes of it, UTC)."""
    import pyarrow as pa

    fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
              pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
              pa.field("timestamp", pa.timestamp("us", tz="UTC")), pa.field("timestampType", pa.int32())]
    if include_headers:
        header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        fields.append(pa.field("headers", pa.list_(pa.field("element", header))))
    return pa.schema(fields)


def to_arrow(cols: RecordColumns, topic: str, partition: int, schema: Any = None, start: int = 0,
             stop: int | None = None) -> Any:
    """Rows [start, stop) as a ``pyarrow.RecordBatch`` of ``schema`` (Spark's Kafka schema by default;
    a ``headers`` field in it adds the headers column). The buffers are wrapped, not copied; only
    the timestamps are converted (milliseconds to Spark's microseconds)."""
    import pyarrow as pa

    if schema is None:
        schema = kafka_arrow_schema(cols.header_offsets is not None)
    n = cols.num_rows
    buf = pa.py_buffer

    def binary(validity: bytes | None, offsets: bytes, data: bytes, nulls: int, length: int, typ: Any) -> Any:
        return pa.Array.from_buffers(typ, length, [None if validity is None else buf(validity), buf(offsets),
                                                   buf(data)], null_count=nulls)

    millis = pa.Array.from_buffers(pa.int64(), n, [None, buf(cols.timestamps)])
    ts_type = schema.field("timestamp").type
    arrays = [
        binary(cols.key_validity, cols.key_offsets, cols.key_data, cols.key_nulls, n, schema.field("key").type),
        binary(cols.value_validity, cols.value_offsets, cols.value_data, cols.value_nulls, n,
               schema.field("value").type),
        pa.repeat(pa.scalar(topic, schema.field("topic").type), n),
        pa.repeat(pa.scalar(partition, schema.field("partition").type), n),
        pa.Array.from_buffers(pa.int64(), n, [None, buf(cols.offsets)]),
        millis.cast(pa.timestamp("ms", tz=ts_type.tz)).cast(ts_type),
        pa.Array.from_buffers(pa.int32(), n, [None, buf(cols.timestamp_types)]),
    ]
    if schema.get_field_index("headers") >= 0:
        list_type = schema.field("headers").type
        struct_type = list_type.value_type
        if cols.header_offsets is None:
            raise ValueError("the schema has headers but the columns were decoded without them")
        h = len(cols.header_key_offsets) // 4 - 1
        keys = pa.Array.from_buffers(struct_type.field("key").type, h,
                                     [None, buf(cols.header_key_offsets), buf(cols.header_key_data)])
        values = binary(cols.header_value_validity, cols.header_value_offsets, cols.header_value_data,
                        cols.header_value_nulls, h, struct_type.field("value").type)
        entries = pa.StructArray.from_arrays([keys, values], fields=list(struct_type))
        arrays.append(pa.Array.from_buffers(list_type, n, [None, buf(cols.header_offsets)], children=[entries]))
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    if start or (stop is not None and stop != n):
        batch = batch.slice(start, (n if stop is None else stop) - start)
    return batch
