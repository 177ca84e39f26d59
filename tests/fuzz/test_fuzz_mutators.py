"""The fuzz suite's own generators, without a cluster: what they call valid is valid, and a
mutation keeps the CRC right (so the broker's CRC check is not what refuses it)."""

from __future__ import annotations

import struct

from fuzz_batches import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    Payload,
    concatenations,
    crc32c,
    header_mutations,
    hostile_section_batch,
    single_batches,
    valid_batches,
)
from fuzz_names import clearly_invalid, literal_names, stays_in_module_dir
from hypothesis import given, settings
from hypothesis import strategies as st

from proto.record_batch import decode_batch


def crc_ok(data: bytes) -> bool:
    return len(data) >= HEADER_SIZE and struct.unpack_from(">I", data, CRC_OFFSET)[0] == crc32c(data[ATTRIBUTES_OFFSET:])


@settings(max_examples=60)
@given(p=st.one_of(valid_batches(), hostile_section_batch(), single_batches(), concatenations()))
def test_must_accept_payloads_decode(p: Payload) -> None:
    assert not (p.must_accept and p.must_refuse)
    if p.must_accept:
        header, records = decode_batch(p.data)
        assert header.record_count == len(records) == header.last_offset_delta + 1
        assert header.size == len(p.data)


@settings(max_examples=60)
@given(p=header_mutations())
def test_header_mutations_recompute_the_crc(p: Payload) -> None:
    assert crc_ok(p.data)
    if p.framed:
        assert HEADER.unpack_from(p.data, 0)[1] + 12 == len(p.data)


def test_names_never_leave_the_module_directory() -> None:
    assert stays_in_module_dir("../../x") and stays_in_module_dir("a/../b")
    assert not stays_in_module_dir("../../../../x") and not stays_in_module_dir("/etc")

    @settings(max_examples=200)
    @given(name=literal_names())
    def run(name: str) -> None:
        assert stays_in_module_dir(name)

    run()


def test_clearly_invalid_configs() -> None:
    assert clearly_invalid("segment.bytes", "-1") and clearly_invalid("retention.ms", "-7")
    assert clearly_invalid("max.message.bytes", "-1") and clearly_invalid("nope", "1")
    assert clearly_invalid("min.insync.replicas", "0") and clearly_invalid("segment.bytes", "1e9")
    assert not clearly_invalid("segment.bytes", "1048576") and not clearly_invalid("retention.ms", "-1")
    assert not clearly_invalid("message.timestamp.type", "LogAppendTime")
