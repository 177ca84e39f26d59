"""The leader's record validator (SPEC S13.1, Kafka's LogValidator): every rule, and the compiled
validator (proto/_codec.c) agreeing with its pure-Python twin on generated batches."""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Callable

import cramjam
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proto import errors
from proto import record_batch as rb
from proto.record_batch import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    HEADER_SIZE,
    MAX_TIMESTAMP,
    Header,
    Record,
    build_batch,
    crc32c,
    encode_batch,
    encode_record_body,
    encode_varint,
    validate_batches,
)

NOW = 1_700_000_000_000
compiled = pytest.mark.skipif(not rb.COMPILED, reason="proto._codec is not built")


def records(n: int = 4, ts: int = NOW) -> list[Record]:
    return [Record(value=f"v{i}".encode(), key=b"k" if i % 2 else None,
                   headers=(Header("h", b"x"), Header("n", None)) if i == 1 else (), timestamp=ts + i)
            for i in range(n)]


def recrc(buf: bytes | bytearray) -> bytes:
    b = bytearray(buf)
    struct.pack_into(">I", b, rb.CRC_OFFSET, crc32c(bytes(b[rb.ATTRIBUTES_OFFSET:])))
    return bytes(b)


def with_field(batch: bytes, offset: int, fmt: str, value: int) -> bytes:
    b = bytearray(batch)
    struct.pack_into(fmt, b, offset, value)
    return recrc(b)


def raw_batch(section: bytes, count: int, *, base_ts: int = NOW, max_ts: int | None = None,
              last_delta: int | None = None, attributes: int = 0, compression: int = COMPRESSION_NONE) -> bytes:
    """A batch around a hand-made (already compressed, if ``compression``) records section, with a correct CRC."""
    batch = build_batch(section, record_count=max(count, 1), base_timestamp=base_ts,
                        max_timestamp=NOW if max_ts is None else max_ts)
    b = bytearray(batch)
    struct.pack_into(">i", b, 57, count)
    struct.pack_into(">i", b, 23, count - 1 if last_delta is None else last_delta)
    struct.pack_into(">h", b, 21, attributes | compression)
    return recrc(b)


def record_bytes(*fields: bytes) -> bytes:
    body = b"".join(fields)
    return encode_varint(len(body)) + body


def deep(buf: bytes, **kw: int) -> rb.BatchesInfo:
    return validate_batches(buf, deep=True, max_batch_bytes=kw.pop("max_batch_bytes", 1 << 20), **kw)


# ------------------------------------------------------------------ what a valid buffer yields


def test_one_call_returns_what_the_log_needs() -> None:
    a = encode_batch(records(3), producer_id=7, producer_epoch=2, base_sequence=10)
    b = encode_batch(records(2, ts=NOW + 50), compression=COMPRESSION_ZSTD)
    info = deep(a + b)
    assert info.batch_count == 2 and info.record_count == 5 and info.offset_count == 5
    assert info.max_timestamp == NOW + 51 and info.shallow_offset_of_max_timestamp == 4
    first, second = info.batches
    assert (first.position, first.size, first.offset_span) == (0, len(a), 3)
    assert (first.producer_id, first.producer_epoch, first.base_sequence, first.last_sequence) == (7, 2, 10, 12)
    assert second.position == len(a) and second.producer_id == -1
    assert info.producer_batches == (first,)
    assert info.spans == ((0, len(a), 3), (len(a), len(b), 2))


@pytest.mark.parametrize("codec", [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD])
def test_every_codec_validates(codec: int) -> None:
    assert deep(encode_batch(records(20), compression=codec)).record_count == 20


# ------------------------------------------------------------------ batch-level rules


@pytest.mark.parametrize("offset, fmt, value, error", [
    (23, ">i", 2**31 - 1, errors.InvalidRecordError),        # last_offset_delta says 2^31 records
    (23, ">i", -1, errors.InvalidRecordError),               # negative delta
    (57, ">i", 3, errors.InvalidRecordError),                # record_count below the records
    (57, ">i", 5, errors.InvalidRecordError),                # record_count above
    (21, ">h", 0x10, errors.InvalidRecordError),             # transactional
    (21, ">h", 0x20, errors.InvalidRecordError),             # control
    (21, ">h", 0x08, errors.InvalidRecordError),             # LogAppendTime claimed by a client
    (21, ">h", 0x40, errors.InvalidRecordError),             # unknown attribute bit
    (21, ">h", 0x05, errors.UnsupportedCompressionTypeError),  # codec 5: none in Kafka
    (21, ">h", 0x07, errors.UnsupportedCompressionTypeError),  # no such codec
    (43, ">q", 5, errors.InvalidRecordError),                # producer id without epoch/sequence
    (43, ">q", -7, errors.InvalidRecordError),               # producer id below -1
    (35, ">q", NOW + 99, errors.InvalidRecordError),         # max_timestamp not the records' maximum
    (16, ">b", 1, errors.CorruptMessageError),               # magic 1
])
def test_batch_fields(offset: int, fmt: str, value: int, error: type[errors.KafkaError]) -> None:
    batch = with_field(encode_batch(records(4)), offset, fmt, value)
    with pytest.raises(error):
        deep(batch)


def test_idempotent_fields_must_be_whole() -> None:
    batch = encode_batch(records(2), producer_id=3, producer_epoch=0, base_sequence=0)
    deep(batch)
    with pytest.raises(errors.InvalidRecordError):
        deep(with_field(batch, 53, ">i", -1))  # id and epoch, no sequence
    with pytest.raises(errors.InvalidRecordError):
        deep(with_field(batch, 51, ">h", -1))


def test_shallow_check_is_what_a_follower_and_recovery_need() -> None:
    # A follower copies the leader's bytes: framing and CRC, not records (the leader checked them).
    batch = raw_batch(b"\x00" * 40, 3)
    info = validate_batches(batch)
    assert info.record_count == 3
    with pytest.raises(errors.CorruptMessageError):
        deep(batch)


def test_size_limits() -> None:
    batch = encode_batch([Record(value=b"x" * 2000, timestamp=NOW)])
    with pytest.raises(errors.MessageTooLargeError):
        deep(batch, max_batch_bytes=1000)


# ------------------------------------------------------------------ record-level rules


def good_record(i: int, ts_delta: int = 0) -> bytes:
    return encode_record_body(i, ts_delta, None, b"value")


@pytest.mark.parametrize("section, count, error", [
    (good_record(0) + good_record(1), 2, None),
    (good_record(0) + good_record(1), 3, errors.CorruptMessageError),             # fewer records than counted
    (good_record(0) + good_record(1) + b"\x00", 2, errors.CorruptMessageError),   # trailing bytes
    (good_record(0) + good_record(2), 2, errors.InvalidRecordError),              # offset delta gap
    (good_record(1) + good_record(0), 2, errors.InvalidRecordError),              # out of order
    (encode_varint(-5) + b"\x00" * 10, 1, errors.CorruptMessageError),            # negative record length
    (encode_varint(200) + b"\x00" * 10, 1, errors.CorruptMessageError),           # length past the end
    (b"\xff" * 12, 1, errors.CorruptMessageError),                                # a varint that never ends
    (record_bytes(b"\x00", b"\x00", b"\x00", encode_varint(-3), b"\x00", b"\x00"), 1,
     errors.CorruptMessageError),                                                 # key length -3
    (record_bytes(b"\x00", b"\x00", b"\x00", encode_varint(50), b"\x00", b"\x00"), 1,
     errors.CorruptMessageError),                                                 # key longer than the record
    (record_bytes(b"\x00", b"\x00", b"\x00", b"\x01", encode_varint(9), b"ab", b"\x00"), 1,
     errors.CorruptMessageError),                                                 # value longer than the record
    (record_bytes(b"\x00", b"\x00", b"\x00", b"\x01", b"\x01", encode_varint(-1)), 1,
     errors.CorruptMessageError),                                                 # negative header count
    (record_bytes(b"\x00", b"\x00", b"\x00", b"\x01", b"\x01", encode_varint(1), encode_varint(-1), b"\x01"), 1,
     errors.CorruptMessageError),                                                 # null header key
    (record_bytes(b"\x00", b"\x00", b"\x00", b"\x01", b"\x01", encode_varint(1000)), 1,
     errors.CorruptMessageError),                                                 # absurd header count
    (record_bytes(b"\x00", b"\x00", b"\x00", b"\x01", b"\x01", b"\x00", b"junk"), 1,
     errors.CorruptMessageError),                                                 # bytes beyond the fields
    (record_bytes(b"\x00", b"\xff" * 11, b"\x00", b"\x01", b"\x01", b"\x00"), 1,
     errors.CorruptMessageError),                                                 # overlong timestamp varint
    (record_bytes(b"\x00", b"\x00", b"\xff\xff\xff\xff\x7f", b"\x01", b"\x01", b"\x00"), 1,
     errors.CorruptMessageError),                                                 # offset delta beyond int32
])
def test_record_framing(section: bytes, count: int, error: type[errors.KafkaError] | None) -> None:
    batch = raw_batch(section, count)
    if error is None:
        assert deep(batch).record_count == count
    else:
        with pytest.raises(error):
            deep(batch)


@pytest.mark.parametrize("base_ts, delta, ok", [
    (NOW, 0, True),
    (-5, 0, False),                       # before 1970
    (MAX_TIMESTAMP, 1, False),            # after 9999
    (2**63 - 1, 1, False),                # overflows int64
    (NOW, -(NOW + 1), False),             # a delta that reaches below zero
])
def test_timestamp_range(base_ts: int, delta: int, ok: bool) -> None:
    section = encode_record_body(0, delta, None, b"v")
    batch = raw_batch(section, 1, base_ts=base_ts, max_ts=max(min(base_ts + delta, 2**63 - 1), -(2**63)))
    if ok:
        deep(batch)
    else:
        with pytest.raises(errors.InvalidTimestampError):
            deep(batch)


def test_timestamp_difference_bound() -> None:
    batch = encode_batch(records(2, ts=NOW - 10_000))
    deep(batch, min_timestamp=NOW - 60_000, max_timestamp=NOW + 60_000)
    with pytest.raises(errors.InvalidTimestampError):
        deep(batch, min_timestamp=NOW - 5_000, max_timestamp=NOW + 5_000)


# ------------------------------------------------------------------ compressed batches


def test_compression_bomb_stops_at_the_bound() -> None:
    # 64 MiB of zeros compress to a few KB; the decompressed batch counts against max.message.bytes,
    # and decompression stops at that bound instead of inflating everything first.
    section = encode_record_body(0, 0, None, b"\x00" * (1 << 20)) * 1
    bomb = zstandard.ZstdCompressor().compress(section * 64)
    batch = raw_batch(bomb, 64, compression=COMPRESSION_ZSTD)
    assert len(batch) < 100_000
    with pytest.raises(errors.MessageTooLargeError):
        deep(batch, max_batch_bytes=1 << 20)


@pytest.mark.parametrize("codec, payload", [
    (COMPRESSION_GZIP, b"not gzip at all"),
    (COMPRESSION_GZIP, gzip.compress(good_record(0))[:-6]),                 # truncated stream
    (COMPRESSION_GZIP, gzip.compress(good_record(0)) + b"trailing"),
    (COMPRESSION_ZSTD, b"\x28\xb5\x2f\xfd garbage"),
    (COMPRESSION_ZSTD, zstandard.ZstdCompressor().compress(good_record(0) * 50)[:-5]),
    (COMPRESSION_GZIP, zlib.compress(good_record(0))),                      # zlib, not gzip framing
])
def test_corrupt_compressed_payloads(codec: int, payload: bytes) -> None:
    with pytest.raises(errors.CorruptMessageError):
        deep(raw_batch(payload, 1, compression=codec))


def test_compressed_records_are_walked_too() -> None:
    section = good_record(0) + good_record(5)  # offset delta gap, hidden inside the compression
    batch = raw_batch(zstandard.ZstdCompressor().compress(section), 2, compression=COMPRESSION_ZSTD)
    with pytest.raises(errors.InvalidRecordError):
        deep(batch)
    validate_batches(batch)  # the shallow check does not look inside


# ------------------------------------------------------------------ compiled == pure Python


def _outcome(fn: Callable[[], object]) -> object:
    try:
        return ("ok", fn())
    except errors.KafkaError as e:
        return ("error", type(e))


mutation = st.tuples(st.integers(min_value=0, max_value=400), st.integers(min_value=0, max_value=255))
record_st = st.builds(Record, value=st.one_of(st.none(), st.binary(max_size=200)),
                      key=st.one_of(st.none(), st.binary(max_size=20)),
                      headers=st.lists(st.builds(Header, st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))),
                                       max_size=2).map(tuple),
                      timestamp=st.integers(min_value=-10, max_value=MAX_TIMESTAMP + 10))


@compiled
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(record_st, min_size=1, max_size=8), min_size=1, max_size=3),
       st.lists(mutation, max_size=4), st.booleans(), st.booleans(), st.sampled_from([COMPRESSION_NONE,
                                                                                      COMPRESSION_GZIP,
                                                                                      COMPRESSION_ZSTD]))
def test_compiled_and_pure_python_agree(batches: list[list[Record]], flips: list[tuple[int, int]], fix_crc: bool,
                                        deep_mode: bool, codec: int) -> None:
    buf = bytearray()
    for recs in batches:
        buf += encode_batch(recs, compression=codec if len(buf) else COMPRESSION_NONE)
    for pos, value in flips:
        if pos < len(buf):
            buf[pos] = value
    if fix_crc and len(buf) >= HEADER_SIZE:
        # Re-checksum the first batch so the mutation reaches the checks behind the CRC.
        end = 12 + struct.unpack_from(">i", buf, 8)[0]
        if HEADER_SIZE <= end <= len(buf):
            struct.pack_into(">I", buf, rb.CRC_OFFSET, crc32c(bytes(buf[rb.ATTRIBUTES_OFFSET:end])))
    data = bytes(buf)
    args = (data, deep_mode, 1 << 16, 0, MAX_TIMESTAMP)
    c = _outcome(lambda: rb._codec.validate(*args))
    py = _outcome(lambda: rb._validate_py(*args))
    assert c == py


@compiled
@settings(max_examples=300)
@given(st.binary(max_size=300), st.integers(min_value=0, max_value=20), st.integers(min_value=-5, max_value=5))
def test_record_walks_agree_on_arbitrary_bytes(section: bytes, count: int, base: int) -> None:
    args = (section, count, base, base, -10, 10, 0)
    c = _outcome(lambda: rb._codec.check_records(*args))
    py = _outcome(lambda: rb._check_records_py(*args))
    assert c == py


@compiled
@given(st.binary(max_size=5000))
def test_compiled_crc32c_is_crc32c(data: bytes) -> None:
    assert rb._codec.crc32c(data) == crc32c(data)


# ------------------------------------------------------------------ snappy and lz4 (issue 16)


def test_snappy_is_xerial_framed_as_the_java_client_writes_and_raw_snappy_reads_too() -> None:
    section = b"".join(good_record(i) for i in range(40))
    framed = rb._compress(COMPRESSION_SNAPPY, section)
    assert framed.startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")
    assert rb.decompress_bounded(COMPRESSION_SNAPPY, framed, 1 << 20) == section
    raw = bytes(cramjam.snappy.compress_raw(section))  # librdkafka's form: one raw block
    assert rb.decompress_bounded(COMPRESSION_SNAPPY, raw, 1 << 20) == section
    assert deep(raw_batch(raw, 40, compression=COMPRESSION_SNAPPY)).record_count == 40


def test_lz4_frames_have_independent_blocks_and_linked_ones_read_too() -> None:
    section = b"".join(good_record(i) for i in range(40)) * 50
    frame = rb._compress(COMPRESSION_LZ4, section)
    assert frame[:4] == b"\x04\x22\x4d\x18" and frame[4] & 0x20, "Kafka's Java reader wants independent blocks"
    assert rb.decompress_bounded(COMPRESSION_LZ4, frame, 1 << 22) == section
    linked = bytes(cramjam.lz4.compress(section))
    assert not linked[4] & 0x20
    assert rb.decompress_bounded(COMPRESSION_LZ4, linked, 1 << 22) == section


@pytest.mark.parametrize("codec", [COMPRESSION_SNAPPY, COMPRESSION_LZ4])
def test_snappy_and_lz4_bombs_stop_at_the_bound(codec: int) -> None:
    section = encode_record_body(0, 0, None, b"\x00" * (1 << 20)) * 16
    bomb = rb._compress(codec, section)
    assert len(bomb) < 2_000_000
    with pytest.raises(errors.MessageTooLargeError):
        deep(raw_batch(bomb, 16, compression=codec), max_batch_bytes=1 << 20)
    with pytest.raises(errors.MessageTooLargeError):  # a raw snappy block claiming more than the bound
        rb.decompress_bounded(COMPRESSION_SNAPPY, bytes(cramjam.snappy.compress_raw(section)), 1 << 20)


@pytest.mark.parametrize("codec, payload", [
    (COMPRESSION_SNAPPY, b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x10\x00short"),
    (COMPRESSION_SNAPPY, b"\x0a\xff\xff\xff\xff"),  # claims 10 bytes, a copy reaching past the input
    (COMPRESSION_LZ4, b"not an lz4 frame"),
    (COMPRESSION_LZ4, rb._compress(COMPRESSION_LZ4, b"".join(good_record(i) for i in range(9)))[:-6]),
    (COMPRESSION_LZ4, rb._compress(COMPRESSION_LZ4, good_record(0)) + b"trailing"),
])
def test_corrupt_snappy_and_lz4_payloads(codec: int, payload: bytes) -> None:
    with pytest.raises(errors.CorruptMessageError):
        deep(raw_batch(payload, 1, compression=codec))
