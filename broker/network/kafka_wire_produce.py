"""Produce requests (v3-v9) read and their answers (v9) written without kio: the hot path. Pure.

Theory of operation (SPEC S13.2, S15)
-------------------------------------
A Produce carries one entry per partition. When thousands of partitions each
get a record at a time, a request is mostly entries, and going through kio
(``check_request``'s schema walk, then a dataclass per entity, then a
protobuf per partition) cost ~40% of the broker's produce handling in the
3,000-partition profile. ``decode_produce`` reads the few fields a Produce has
straight into the ``pb.ProduceRequest`` the handlers take, and
``encode_produce_response_v9`` writes the flexible answer (v5-v8 have their own
in ``broker.network.kafka_wire``).

It distrusts the frame as ``check_request`` does: every length and count is
checked against the bytes left before anything is read or sliced, nothing is
reserved from a count, and a name must be UTF-8. It accepts only what it knows
to be a well-formed request of these versions with no tagged fields; anything
else (a tagged field, a negative length, a short frame) returns None, and the
caller decodes the frame through kio, which answers or refuses it as before -
so this path can only be faster, never more permissive. Tests check that both
paths give equal protobufs on valid frames and that the fast one never accepts a
frame kio refuses.
"""

from __future__ import annotations

import struct
from typing import Final

from proto import minikafka_pb2 as pb

_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_ACKS_TIMEOUT: Final = struct.Struct(">hi")
FIRST_VERSION: Final = 3
LAST_VERSION: Final = 9
FLEXIBLE_FROM: Final = 9


class _Malformed(Exception):
    """Not a request this reader takes: the caller falls back to kio."""


def _uvarint(frame: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    for _ in range(5):
        if pos >= end:
            raise _Malformed
        b = frame[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
    raise _Malformed


def _no_tags(frame: bytes, pos: int, end: int) -> int:
    """A flexible entity's tagged fields: only "none" is taken here."""
    count, pos = _uvarint(frame, pos, end)
    if count:
        raise _Malformed
    return pos


def decode_produce(frame: bytes, version: int) -> pb.ProduceRequest | None:
    """The ``pb.ProduceRequest`` of a Produce frame (without size prefix) of ``version``, or None
    when the frame is not one this reader takes (decode it with kio then)."""
    if not FIRST_VERSION <= version <= LAST_VERSION:
        return None
    try:
        return _decode(frame, version >= FLEXIBLE_FROM)
    except (_Malformed, struct.error, UnicodeDecodeError):
        return None


def _decode(frame: bytes, flexible: bool) -> pb.ProduceRequest:
    end = len(frame)
    # Request header v1/v2: api key, version, correlation id, client id (always a legacy string).
    if end < 10:
        raise _Malformed
    (n,) = _I16.unpack_from(frame, 8)
    pos = 10
    if n > 0:
        pos += n
        if pos > end:
            raise _Malformed
        frame[10:pos].decode()  # kio refuses a client id that is not UTF-8
    elif n < -1:
        raise _Malformed
    if flexible:
        pos = _no_tags(frame, pos, end)
    # transactional_id: nullable string.
    n, pos = _length(frame, pos, end, flexible, _I16)
    transactional_id = ""
    if n >= 0:
        if pos + n > end:
            raise _Malformed
        transactional_id = frame[pos:pos + n].decode()
        pos += n
    elif n != -1:
        raise _Malformed
    if pos + 6 > end:
        raise _Malformed
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, pos)
    pos += 6
    req = pb.ProduceRequest(transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms)
    topics, pos = _count(frame, pos, end, flexible)
    for _ in range(topics):
        n, pos = _length(frame, pos, end, flexible, _I16)
        if n < 0 or pos + n > end:
            raise _Malformed
        t = req.topics.add(name=frame[pos:pos + n].decode())
        pos += n
        partitions, pos = _count(frame, pos, end, flexible)
        add = t.partitions.add
        for _ in range(partitions):
            if pos + 4 > end:
                raise _Malformed
            (index,) = _I32.unpack_from(frame, pos)
            pos += 4
            n, pos = _length(frame, pos, end, flexible, _I32)
            if n >= 0:
                if pos + n > end:
                    raise _Malformed
                add(partition=index, records=frame[pos:pos + n])
                pos += n
            elif n == -1:
                add(partition=index)
            else:
                raise _Malformed
            if flexible:
                pos = _no_tags(frame, pos, end)
        if flexible:
            pos = _no_tags(frame, pos, end)
    if flexible:
        pos = _no_tags(frame, pos, end)
    return req


def _length(frame: bytes, pos: int, end: int, flexible: bool, legacy: struct.Struct) -> tuple[int, int]:
    """A length or count (-1: null): a compact varint (value + 1) in flexible versions, else the
    legacy int16 (strings) or int32 (bytes, arrays) ``legacy``."""
    if flexible:
        n, pos = _uvarint(frame, pos, end)
        return n - 1, pos
    if pos + legacy.size > end:
        raise _Malformed
    (n,) = legacy.unpack_from(frame, pos)
    return n, pos + legacy.size


def _count(frame: bytes, pos: int, end: int, flexible: bool) -> tuple[int, int]:
    """An array's element count; never more than the bytes left could hold (no null arrays here)."""
    n, pos = _length(frame, pos, end, flexible, _I32)
    if n < 0 or n > end - pos:
        raise _Malformed
    return n, pos


# ------------------------------------------------------------------ the v9 answer

_SIZE_CORRELATION: Final = struct.Struct(">ii")
_PARTITION_V9: Final = struct.Struct(">ihqqq")


def _uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _compact_string(s: str) -> bytes:
    data = s.encode()  # a varint length: no int16 bound to check (kio writes longer ones too)
    return _uvarint_bytes(len(data) + 1) + data


def encode_produce_response_v9(correlation_id: int, resp: pb.ProduceResponse,
                               known_error_codes: frozenset[int], unknown_error: int) -> bytes:
    """The size-prefixed flexible Produce v9 response frame (response header v1: tagged fields)."""
    parts: list[bytes] = [b"", b"\x00", _uvarint_bytes(len(resp.topics) + 1)]
    for t in resp.topics:
        parts.append(_compact_string(t.name))
        parts.append(_uvarint_bytes(len(t.partitions) + 1))
        for p in t.partitions:
            code = p.error_code if p.error_code in known_error_codes else unknown_error
            parts.append(_PARTITION_V9.pack(p.partition, code, p.base_offset, max(p.log_append_time_ms, -1),
                                            p.log_start_offset))
            parts.append(b"\x01")  # record_errors: an empty compact array
            parts.append(_compact_string(p.error_message) if p.error_message else b"\x00")
            parts.append(b"\x00")  # the partition's tagged fields
        parts.append(b"\x00")  # the topic's
    parts.append(_I32.pack(resp.throttle_time_ms))
    parts.append(b"\x00")  # the response's
    parts[0] = _SIZE_CORRELATION.pack(4 + sum(map(len, parts)), correlation_id)
    return b"".join(parts)
