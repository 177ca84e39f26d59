"""The columnar decoder (proto/columnar.py and its compiled twin proto/_columnar.c): rows equal to
``decode_batch``'s records, both implementations equal byte for byte (also on mangled input), the
bad-batch and offset-window rules, and the Arrow form matching Spark's Kafka schema."""

from __future__ import annotations

import struct
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from client.consumer import ConsumerRecord
from proto import columnar
from proto import record_batch as rb
from proto.columnar import INT64_MAX, RecordColumns, decode_columns_py, records_py, to_arrow
from proto.record_batch import Header, Record, build_batch, crc32c, encode_batch, encode_record_body

compiled = pytest.mark.skipif(not columnar.COMPILED, reason="proto._columnar is not built")
NOW = 1_700_000_000_000


def py_decode(buf: bytes, lo: int = 0, hi: int = INT64_MAX, headers: bool = True,
              verify: bool = True) -> RecordColumns:
    return decode_columns_py(buf, lo, hi, headers, crc32c if verify else None, columnar._decompress)


def c_decode(buf: bytes, lo: int = 0, hi: int = INT64_MAX, headers: bool = True,
             verify: bool = True) -> RecordColumns:
    out: RecordColumns = columnar._columnar.decode(buf, lo, hi, headers, crc32c if verify else None,
                                                   columnar._decompress)
    return out


def rows(cols: RecordColumns) -> list[tuple[Any, ...]]:
    """(offset, timestamp, key, value, headers) per row, via the pure-Python record builder."""
    return [(r.offset, r.timestamp, r.key, r.value, r.headers)
            for r in records_py(cols, 0, cols.num_rows, "t", 0, ConsumerRecord)]


def expected(buf: bytes, lo: int = 0, hi: int = INT64_MAX) -> list[tuple[Any, ...]]:
    out = []
    for pos, h in rb.iter_headers(buf):
        if h.is_control:
            continue
        _h, recs = rb.decode_batch(buf, pos)
        out += [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs if lo <= r.offset < hi]
    return out


small_bytes = st.one_of(st.none(), st.binary(max_size=40))
headers_st = st.lists(st.builds(Header, st.text(max_size=8), small_bytes), max_size=3).map(tuple)
record_st = st.builds(Record, value=small_bytes, key=small_bytes, headers=headers_st,
                      timestamp=st.integers(NOW - 10_000, NOW + 10_000))
batches_st = st.lists(st.tuples(st.lists(record_st, min_size=1, max_size=8),
                                st.sampled_from([rb.COMPRESSION_NONE, rb.COMPRESSION_GZIP, rb.COMPRESSION_SNAPPY, rb.COMPRESSION_LZ4,
                                                 rb.COMPRESSION_ZSTD]),
                                st.integers(0, 3)),
                      min_size=1, max_size=5)


def build(spec: list[tuple[list[Record], int, int]]) -> bytes:
    """Batches one after another (``gap`` offsets between them, as compaction leaves)."""
    out = b""
    base = 5
    for recs, codec, gap in spec:
        out += encode_batch(recs, compression=codec, base_offset=base)
        base += len(recs) + gap
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches_st, st.integers(0, 40), st.integers(0, 60), st.booleans())
def test_rows_equal_decode_batch_and_both_implementations_agree(spec: list[Any], lo: int, span: int,
                                                                headers: bool) -> None:
    buf = build(spec)
    hi = lo + span
    cols = py_decode(buf, lo, hi, headers)
    assert cols.error is None
    got = rows(cols)
    want = expected(buf, lo, hi)
    if not headers:
        want = [(o, t, k, v, ()) for o, t, k, v, _h in want]
    assert got == want
    if columnar.COMPILED:
        assert c_decode(buf, lo, hi, headers) == cols
        recs = columnar._columnar.records(tuple(cols), 0, cols.num_rows, "t", 0, ConsumerRecord, Header)
        assert recs == records_py(cols, 0, cols.num_rows, "t", 0, ConsumerRecord)
        assert all(type(r) is ConsumerRecord for r in recs)


@compiled
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches_st, st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
       st.integers(0, 10_000), st.booleans(), st.integers(0, 30))
def test_compiled_and_pure_agree_on_mangled_bytes(spec: list[Any], flips: list[tuple[int, int]], cut: int,
                                                  verify: bool, lo: int) -> None:
    buf = bytearray(build(spec))
    for where, value in flips:
        buf[where % len(buf)] = value
    data = bytes(buf[:len(buf) - cut % len(buf)])
    try:
        want: Any = py_decode(data, lo, INT64_MAX, True, verify)
    except Exception as e:  # a non-Kafka error (e.g. zstd's own) must be the same type from both
        with pytest.raises(type(e)):
            c_decode(data, lo, INT64_MAX, True, verify)
        return
    assert c_decode(data, lo, INT64_MAX, True, verify) == want
    assert columnar._columnar.records(tuple(want), 0, want.num_rows, "t", 1, ConsumerRecord, Header) == \
        records_py(want, 0, want.num_rows, "t", 1, ConsumerRecord)


def implementations() -> list[Any]:
    return [py_decode] + ([c_decode] if columnar.COMPILED else [])


@pytest.mark.parametrize("decode", implementations())
def test_a_bad_batch_ends_the_walk_and_keeps_the_rows_before_it(decode: Any) -> None:
    first = encode_batch([Record(b"a", timestamp=NOW), Record(b"b", timestamp=NOW)], base_offset=0)
    second = bytearray(encode_batch([Record(b"c", timestamp=NOW), Record(b"d", timestamp=NOW)], base_offset=2))
    second[70] ^= 0xFF  # bit rot in the records: the CRC fails
    third = encode_batch([Record(b"e", timestamp=NOW)], base_offset=4)
    cols = decode(first + bytes(second) + third)
    assert [r[3] for r in rows(cols)] == [b"a", b"b"]
    assert cols.error == (2, 4, f"batch at position {len(first)} failed its CRC-32C check")
    assert cols.next_offset == 2
    # Asked from the bad batch on: no rows, the error, and the offset that skips it.
    cols = decode(first + bytes(second) + third, 2)
    assert cols.num_rows == 0 and cols.error is not None and cols.error[:2] == (2, 4)
    # A batch before the wanted offsets is not even read.
    assert [r[3] for r in rows(decode(first + bytes(second) + third, 4))] == [b"e"]


@pytest.mark.parametrize("decode", implementations())
def test_malformed_records_roll_the_batch_back(decode: Any) -> None:
    good = encode_batch([Record(b"a", key=None, timestamp=NOW)], base_offset=0)
    inner = encode_record_body(1, 0, b"k", b"v")[1:] + b"\x07"  # one byte more than its fields
    body = encode_record_body(0, 0, b"k", b"v") + rb.encode_varint(len(inner)) + inner
    bad = build_batch(body, record_count=2, base_timestamp=NOW, max_timestamp=NOW, base_offset=1)
    cols = decode(good + bad)
    assert cols.num_rows == 1 and cols.key_validity == b"\x00" and cols.value_validity is None
    assert cols.error == (1, 3, f"batch at position {len(good)}: record 1 has bytes beyond its fields: 1")
    assert len(cols.offsets) == 8 and len(cols.key_offsets) == 8 and cols.value_data == b"a"


@pytest.mark.parametrize("decode", implementations())
def test_control_batches_partial_tails_and_log_append_time(decode: Any) -> None:
    section = encode_record_body(0, 0, None, b"x") + encode_record_body(1, 5, None, b"y")
    lat = build_batch(section, record_count=2, base_timestamp=NOW, max_timestamp=NOW + 99, base_offset=0,
                      log_append_time=True)
    control = bytearray(encode_batch([Record(b"\x00\x00\x00\x00", timestamp=NOW)], base_offset=2))
    struct.pack_into(">h", control, 21, 0x20)
    struct.pack_into(">I", control, 17, crc32c(bytes(control[21:])))
    tail = encode_batch([Record(b"z", timestamp=NOW)], base_offset=3)
    cols = decode(lat + bytes(control) + tail[:-3])
    assert rows(cols) == [(0, NOW + 99, None, b"x", ()), (1, NOW + 99, None, b"y", ())]
    assert memoryview(cols.timestamp_types).cast("i").tolist() == [1, 1]
    assert cols.next_offset == 3 and cols.error is None  # past the control batch, not into the partial one


@pytest.mark.parametrize("decode", implementations())
def test_non_utf8_header_keys_become_replacement_characters_as_in_decode_batch(decode: Any) -> None:
    body = (encode_record_body(0, 0, None, b"v")[:-1]  # drop the header count, then one header by hand
            + b"\x02" + rb.encode_varint(2) + b"\xff\xfe" + rb.encode_varint(-1))
    body = rb.encode_varint(len(body) - 1) + body[1:]
    batch = build_batch(body, record_count=1, base_timestamp=NOW, max_timestamp=NOW)
    assert rows(decode(batch))[0][4] == rb.decode_batch(batch)[1][0].headers == (Header("\ufffd\ufffd", None),)


def test_to_arrow_is_sparks_kafka_schema_and_wraps_the_rows() -> None:
    pa = pytest.importorskip("pyarrow")
    types = pytest.importorskip("pyspark.sql.types")
    from pyspark.sql.pandas.types import to_arrow_schema

    fields = [types.StructField("key", types.BinaryType()), types.StructField("value", types.BinaryType()),
              types.StructField("topic", types.StringType()), types.StructField("partition", types.IntegerType()),
              types.StructField("offset", types.LongType()), types.StructField("timestamp", types.TimestampType()),
              types.StructField("timestampType", types.IntegerType())]
    header = types.StructType([types.StructField("key", types.StringType()),
                               types.StructField("value", types.BinaryType())])
    with_headers = [*fields, types.StructField("headers", types.ArrayType(header))]
    assert to_arrow_schema(types.StructType(fields), timezone="UTC") == columnar.kafka_arrow_schema(False)
    assert to_arrow_schema(types.StructType(with_headers), timezone="UTC") == columnar.kafka_arrow_schema(True)

    recs = [Record(b"v0", key=b"k", headers=(Header("a", b"1"), Header("b", None)), timestamp=NOW),
            Record(None, key=None, timestamp=NOW + 1), Record(b"v2", timestamp=NOW + 2)]
    cols = columnar.decode_columns(encode_batch(recs, base_offset=7))
    batch = to_arrow(cols, "events", 3, columnar.kafka_arrow_schema(True))
    batch.validate(full=True)
    assert batch.to_pydict()["headers"] == [[{"key": "a", "value": b"1"}, {"key": "b", "value": None}], [], []]
    assert batch.column("offset").to_pylist() == [7, 8, 9]
    assert batch.column("topic").to_pylist() == ["events"] * 3 and batch.column("partition").to_pylist() == [3] * 3
    assert batch.column("key").to_pylist() == [b"k", None, None]
    assert batch.column("value").to_pylist() == [b"v0", None, b"v2"]
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [(NOW + i) * 1000 for i in range(3)]
    # A slice shares the buffers; without a headers field there is no headers column.
    sliced = to_arrow(cols, "events", 3, None, 1, 3)
    assert sliced.schema.names[-1] == "headers"  # decoded with headers: the default schema has them
    plain = to_arrow(cols, "events", 3, columnar.kafka_arrow_schema(False), 1, 3)
    assert plain.num_rows == 2 and plain.column("offset").to_pylist() == [8, 9] and "headers" not in plain.schema.names
    assert plain.column("value").buffers()[2].address == batch.column("value").buffers()[2].address


def test_offset_at_reads_native_int64() -> None:
    cols = columnar.decode_columns(encode_batch([Record(b"a"), Record(b"b")], base_offset=1 << 40))
    assert cols.offset_at(1) == (1 << 40) + 1
    assert sys.byteorder in ("little", "big")


@compiled
def test_compiled_records_without_headers_are_left_out_of_the_cyclic_gc() -> None:
    import gc

    cols = columnar.decode_columns(encode_batch([Record(b"a", headers=(Header("h", b"x"),)), Record(b"b")]))
    with_headers, plain = columnar.to_records(cols, 0, 2, "t", 0, ConsumerRecord)
    assert gc.is_tracked(with_headers) and not gc.is_tracked(plain)
