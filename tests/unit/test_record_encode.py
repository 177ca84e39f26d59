"""The compiled record encoder (proto/_codec.c encode_record / encode_records) against its
pure-Python twin: identical bytes for arbitrary keys, values, None, headers and timestamp deltas,
and every encoding decodes and validates back to the records it was given."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proto import record_batch as rb
from proto.record_batch import Header, Record, build_batch, decode_batch, validate_batches

compiled = pytest.mark.skipif(rb._codec is None, reason="proto/_codec.c is not built")

INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
# Values around 8 KB cross the varint length's 2-byte boundary (8192). Drawn as one repeated byte:
# 8 KB of random bytes each used up Hypothesis' per-example entropy (its data_too_large health
# check failed, seed-dependent, with 20 rows of two such fields).
FIELD = st.none() | st.binary(max_size=300) | st.builds(lambda n, b: bytes([b]) * n, st.integers(8190, 8200),
                                                        st.integers(0, 255))
HEADERS = st.lists(st.builds(Header, st.text(max_size=20), st.none() | st.binary(max_size=40)), max_size=4)


@compiled
@settings(max_examples=300)
@given(INT64, INT64, FIELD, FIELD, HEADERS)
def test_compiled_encode_record_equals_python(offset_delta: int, ts_delta: int, key: bytes | None,
                                             value: bytes | None, headers: list[Header]) -> None:
    assert rb._codec.encode_record(offset_delta, ts_delta, key, value, headers) == \
        rb._encode_record_body_py(offset_delta, ts_delta, key, value, headers)


def test_python_twin_negative_offset_delta_is_not_a_table_lookup() -> None:
    # The table fast path once indexed _UVARINT with a negative zig-zag value.
    assert rb._encode_record_body_py(-1, 0, None, None) == rb._encode_record_body_py(-1, 0, None, None, ())
    assert rb._encode_record_body_py(-1, 0, None, None)[3:4] == rb.encode_varint(-1)


@compiled
@settings(max_examples=200)
@given(st.lists(FIELD, max_size=30), st.booleans(), st.data(), st.integers(0, 1 << 20))
def test_compiled_encode_records_equals_python(values: list[bytes | None], with_keys: bool, data: st.DataObject,
                                              first: int) -> None:
    keys = data.draw(st.lists(FIELD, min_size=len(values), max_size=len(values))) if with_keys else None
    ts: int | list[int] = data.draw(st.integers(0, 1 << 40) | st.lists(
        st.integers(0, 1 << 40), min_size=len(values), max_size=len(values)))
    assert rb._codec.encode_records(values, keys, ts, first) == rb._encode_records_py(values, keys, ts, first)


@pytest.mark.parametrize("encode", [rb._encode_records_py, rb.encode_records])
def test_encode_records_length_mismatch_is_refused(encode: object) -> None:
    with pytest.raises(ValueError):
        encode([b"a", b"b"], [b"k"], 0, 0)  # type: ignore[operator]
    with pytest.raises(ValueError):
        encode([b"a", b"b"], None, [1], 0)  # type: ignore[operator]


@settings(max_examples=150)
@given(st.lists(st.tuples(FIELD, FIELD, HEADERS, st.integers(0, 1 << 30)), min_size=1, max_size=20))
def test_encoded_records_round_trip_through_decoder_and_validator(rows: list[tuple[bytes | None, bytes | None,
                                                                                    list[Header], int]]) -> None:
    base = 1_700_000_000_000
    section = b"".join(rb.encode_record_body(i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(rows))
    batch = build_batch(section, record_count=len(rows), base_timestamp=base,
                        max_timestamp=base + max(r[3] for r in rows))
    validate_batches(batch, deep=True)
    _, records = decode_batch(batch)
    assert records == [Record(value=v, key=k, headers=tuple(h), timestamp=base + ts, offset=i)
                       for i, (k, v, h, ts) in enumerate(rows)]


@given(st.lists(FIELD, min_size=1, max_size=40), st.booleans(), st.integers(0, 1000))
def test_bulk_section_round_trips(values: list[bytes | None], with_keys: bool, ts: int) -> None:
    keys = [None if v is None else v[::-1] for v in values] if with_keys else None
    section = rb.encode_records(values, keys, ts, 0)
    batch = build_batch(section, record_count=len(values), base_timestamp=5, max_timestamp=5 + ts)
    validate_batches(batch, deep=True)
    _, records = decode_batch(batch)
    assert [r.value for r in records] == values
    assert [r.key for r in records] == (keys or [None] * len(values))
    assert {r.timestamp for r in records} == {5 + ts}


# ------------------------------------------------------------------ RecordsBuilder (the producer's open batch)

# One step on a builder: a record (key, value, headers, timestamp, estimate) or an encoded section.
STEP = st.one_of(
    st.tuples(st.just("record"), FIELD, FIELD, HEADERS,
              st.integers(0, 1 << 41) | st.floats(0, 1 << 41, allow_nan=False), st.integers(0, 20_000)),
    st.tuples(st.just("section"), st.lists(FIELD, min_size=1, max_size=5), st.integers(0, 1 << 41)),
)


def _run_builder(cls: type, steps: list[tuple[object, ...]], limit: int) -> tuple[object, ...]:
    made: list[tuple[object, int, int]] = []
    builder = cls(61, lambda r, rel, ts: made.append((r, rel, ts)) or ("fut", rel, ts), "R")
    answers: list[object] = []
    for step in steps:
        if step[0] == "record":
            _, key, value, headers, ts, estimate = step
            answers.append(builder.try_append(key, value, headers, ts, estimate, limit))
        else:
            _, values, ts = step
            first = builder.count
            section = rb.encode_records(values, None, ts - builder.base_ts if first else 0, first)
            answers.append(builder.append_section(section, len(values), ts))
        answers.append((builder.count, builder.size, builder.base_ts, builder.max_ts))
    return builder.getvalue(), answers, made


@compiled
@settings(max_examples=200)
@given(st.lists(STEP, max_size=25), st.integers(61, 40_000))
def test_compiled_records_builder_equals_python(steps: list[tuple[object, ...]], limit: int) -> None:
    """Same bytes, counters, refusals (None when full) and futures made (float timestamps floored to
    whole ms, as the producer passes its CreateTime), compiled or not."""
    assert _run_builder(rb._codec.RecordsBuilder, steps, limit) == _run_builder(rb._RecordsBuilderPy, steps, limit)


@pytest.mark.parametrize("cls", [rb._RecordsBuilderPy, rb.RecordsBuilder])
def test_records_builder_refuses_only_when_it_already_holds_a_record(cls: type) -> None:
    builder = cls(61, lambda r, rel, ts: (r, rel, ts), "R")
    assert builder.try_append(None, b"x" * 100, (), 5, 10_000, 100) == ("R", 0, 5)  # empty: always taken
    assert builder.try_append(None, b"y", None, 4, 1, 100) is None
    assert (builder.count, builder.base_ts, builder.max_ts) == (1, 5, 5)
    assert builder.try_append(b"k", b"y", None, 4, 1, 10_000) == ("R", 1, 4)
    _, records = decode_batch(build_batch(builder.getvalue(), record_count=2, base_timestamp=5, max_timestamp=5))
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == [(0, 5, None, b"x" * 100), (1, 4, b"k", b"y")]
    with pytest.raises(TypeError):
        builder.try_append(None, "not bytes", None, 4, 1, 10_000)
    assert builder.count == 2


@pytest.mark.parametrize("base", [rb._RecordFuturePy, rb.RecordFuture])
def test_record_future_base_carries_result_offset_delta_and_timestamp(base: type) -> None:
    import concurrent.futures

    class Fut(base, concurrent.futures.Future):  # type: ignore[misc, valid-type, type-arg]
        pass

    made = rb.RecordsBuilder(61, Fut, "R").try_append(None, b"v", None, 7, 1, 100)
    assert (made._mk_result, made._mk_rel, made._mk_ts) == ("R", 0, 7)
    direct = Fut("S", 3, 9)
    assert (direct._mk_result, direct._mk_rel, direct._mk_ts) == ("S", 3, 9)
    direct.__dict__["extra"] = 1  # a Future subclass keeps its __dict__ (concurrent.futures.wait uses it)
