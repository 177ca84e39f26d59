"""Record batch codec: docs/record-batch.md, Kafka's v2 RecordBatch layout."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proto import errors
from proto import minikafka_pb2 as pb
from proto.record_batch import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    CRC_OFFSET,
    HEADER_SIZE,
    Header,
    Record,
    crc32c,
    decode_batch,
    decode_batches,
    decode_varint,
    encode_batch,
    encode_varint,
    iter_headers,
    read_header,
    stamp_in_place,
    stamp_prefix,
    validate_batches,
)


def sample_records(n: int = 5) -> list[Record]:
    return [
        Record(value=f"value-{i}".encode(), key=None if i % 2 else f"key-{i}".encode(),
               headers=(Header("h", b"x"), Header("null", None)) if i == 3 else (),
               timestamp=1_000 + i * 7)
        for i in range(n)
    ] + [Record(value=None, key=b"tombstone", timestamp=999)]


@pytest.mark.parametrize("codec", [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD])
def test_round_trip_every_codec(codec: int) -> None:
    recs = sample_records()
    batch = encode_batch(recs, compression=codec, producer_id=7, producer_epoch=1, base_sequence=42)
    header, out = decode_batch(batch)
    assert header.compression == codec
    assert header.record_count == len(recs)
    assert header.producer_id == 7 and header.producer_epoch == 1 and header.base_sequence == 42
    assert header.last_sequence == 42 + len(recs) - 1
    assert header.base_timestamp == 1_000 and header.max_timestamp == max(r.timestamp for r in recs)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in out] == \
           [(r.key, r.value, r.headers, r.timestamp) for r in recs]
    assert [r.offset for r in out] == list(range(len(recs)))


def test_header_layout_matches_kafka_v2() -> None:
    batch = encode_batch([Record(value=b"v", timestamp=5)], base_offset=0, partition_leader_epoch=-1)
    base_offset, length, epoch, magic, crc, attrs, last_delta = struct.unpack_from(">qiibIhi", batch)
    assert (base_offset, epoch, magic, attrs, last_delta) == (0, -1, 2, 0, 0)
    assert length == len(batch) - 12
    # CRC-32C from attributes (byte 21) to the end.
    assert crc == crc32c(batch[21:])
    assert struct.unpack_from(">i", batch, 57)[0] == 1  # record_count
    assert HEADER_SIZE == 61


def test_stamping_offsets_and_epoch_needs_no_new_crc() -> None:
    batch = bytearray(encode_batch(sample_records()))
    stamp_in_place(batch, 0, base_offset=1_000_000, partition_leader_epoch=17)
    info = validate_batches(bytes(batch))  # still passes its CRC
    assert info.record_count == 6
    header, recs = decode_batch(bytes(batch))
    assert header.base_offset == 1_000_000 and header.partition_leader_epoch == 17
    assert recs[0].offset == 1_000_000 and recs[-1].offset == 1_000_005
    prefix = stamp_prefix(5, header.batch_length, 3)
    assert prefix == struct.pack(">qii", 5, header.batch_length, 3)


def test_flipped_record_byte_fails_crc() -> None:
    batch = bytearray(encode_batch(sample_records()))
    batch[-3] ^= 0xFF
    with pytest.raises(errors.CorruptMessageError, match="CRC"):
        validate_batches(bytes(batch))
    with pytest.raises(errors.CorruptMessageError):
        decode_batch(bytes(batch))


@pytest.mark.parametrize("mutate, error", [
    (lambda b: b[:40], errors.CorruptMessageError),                     # truncated header
    (lambda b: b[:-1], errors.CorruptMessageError),                     # truncated body
    (lambda b: b[:16] + b"\x01" + b[17:], errors.CorruptMessageError),  # magic 1
    (lambda b: b[:8] + struct.pack(">i", 3) + b[12:], errors.CorruptMessageError),  # impossible length
    (lambda b: b"", errors.CorruptMessageError),
])
def test_malformed_input_is_typed_error(mutate, error) -> None:  # type: ignore[no-untyped-def]
    batch = encode_batch(sample_records())
    with pytest.raises(error):
        validate_batches(mutate(batch))


def _recrc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c(bytes(buf[21:])))
    return bytes(buf)


def test_unsupported_codec_and_bad_counts() -> None:
    batch = bytearray(encode_batch(sample_records()))
    struct.pack_into(">h", batch, 21, 5)  # codec 5: none in Kafka
    with pytest.raises(errors.UnsupportedCompressionTypeError):
        validate_batches(_recrc(batch))
    batch = bytearray(encode_batch(sample_records()))
    struct.pack_into(">i", batch, 57, 99)  # record_count beyond last_offset_delta + 1
    with pytest.raises(errors.InvalidRecordError):
        validate_batches(_recrc(batch))


def test_batch_larger_than_max_message_bytes() -> None:
    batch = encode_batch([Record(value=b"x" * 2000)])
    with pytest.raises(errors.MessageTooLargeError):
        validate_batches(batch, max_batch_bytes=1000)


def test_several_batches_in_one_buffer() -> None:
    a = encode_batch(sample_records(3))
    b = encode_batch(sample_records(2), compression=COMPRESSION_ZSTD)
    info = validate_batches(a + b)
    assert info.batch_count == 2
    assert info.spans == ((0, len(a), 4), (len(a), len(b), 3))
    assert [p for p, _ in iter_headers(a + b + b[:30])] == [0, len(a)]  # partial tail ignored
    assert len(decode_batches(a + b + b[:70])) == 7
    assert read_header(b).record_count == 3


@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_varint_round_trip(n: int) -> None:
    enc = encode_varint(n)
    assert decode_varint(enc, 0) == (n, len(enc))


def test_varint_matches_kafka_zigzag() -> None:
    assert encode_varint(0) == b"\x00"
    assert encode_varint(-1) == b"\x01"
    assert encode_varint(1) == b"\x02"
    assert encode_varint(63) == b"\x7e"
    assert encode_varint(64) == b"\x80\x01"
    with pytest.raises(errors.CorruptMessageError):
        decode_varint(b"\x80", 0)


@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=300)),
                          st.one_of(st.none(), st.binary(max_size=40)),
                          st.integers(min_value=0, max_value=1 << 40)), min_size=1, max_size=30),
       st.sampled_from([COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]))
def test_any_records_round_trip(items: list[tuple[bytes | None, bytes | None, int]], codec: int) -> None:
    recs = [Record(value=v, key=k, timestamp=t) for v, k, t in items]
    _h, out = decode_batch(encode_batch(recs, compression=codec))
    assert [(r.value, r.key, r.timestamp) for r in out] == items


def test_every_wire_error_code_has_one_error_class() -> None:
    wire = {v.name: v.number for v in pb.ErrorCode.DESCRIPTOR.values if v.number != 0}
    classes = {c.name: c.code for c in errors.all_error_classes()}
    assert classes == wire
    assert errors.for_code(6) is errors.NotLeaderOrFollowerError
    assert errors.NotLeaderOrFollowerError.retriable and errors.NotLeaderOrFollowerError.invalid_metadata
    assert not errors.OffsetOutOfRangeError.retriable
    assert errors.for_code(12345) is errors.UnknownServerError
    assert str(errors.NotEnoughReplicasError("isr=1")) == "NOT_ENOUGH_REPLICAS: isr=1"
    with pytest.raises(ValueError):
        errors.for_code(0)


@pytest.mark.parametrize("size", [0, 1, 8191, 8192, 20_000])
@pytest.mark.parametrize("delta", [0, 8191, 8192])
def test_record_encoding_round_trips_on_both_sides_of_the_fast_path(size: int, delta: int) -> None:
    # encode_record_body has a table-lookup fast path for small fields; the boundaries must agree.
    recs = [Record(value=b"v" * size, key=None if size % 2 else b"k" * size, timestamp=1000 + delta * i)
            for i in range(2)] + [Record(value=None, key=b"x", timestamp=1000)]
    _h, back = decode_batch(encode_batch(recs))
    assert [(r.value, r.key, r.timestamp) for r in back] == [(r.value, r.key, r.timestamp) for r in recs]


def test_the_logs_header_accessors_agree_with_the_parsed_header() -> None:
    """The log and its segments read header fields only through the codec (issue 28): the scan
    accessors give what read_header gives, and LogAppendTime rewrites a batch that still verifies."""
    from proto.record_batch import (
        TIMESTAMP_TYPE_MASK,
        batch_size_at,
        batch_span,
        decode_batches,
        read_header,
        set_log_append_time,
    )

    one = encode_batch([Record(value=b"a", timestamp=5), Record(value=b"b", timestamp=9)], base_offset=40)
    two = encode_batch([Record(value=b"c", timestamp=7)], base_offset=42)
    buf = bytearray(one + two)
    for pos in (0, len(one)):
        h = read_header(buf, pos)
        assert batch_span(buf, pos) == (h.base_offset, h.size, h.last_offset_delta)
        assert batch_size_at(buf, pos) == h.size
    set_log_append_time(buf, len(one), len(two), 123_456)
    h = read_header(buf, len(one))
    assert h.max_timestamp == 123_456 and h.attributes & TIMESTAMP_TYPE_MASK
    assert [r.offset for r in decode_batches(bytes(buf))] == [40, 41, 42]  # CRCs still verify
