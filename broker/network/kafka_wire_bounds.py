"""Every length in a Kafka request frame checked against the bytes that follow it (pure).

Theory of operation
-------------------
``kio``'s compiled reader (Rust) reserves room for an array or for the tagged
fields of an entity from the count written on the wire, before it reads a
single element. A forged count (a compact array or tagged-field count of 2**34
in a 60-byte Fetch) makes it ask for hundreds of gigabytes, and Rust answers a
failed allocation by aborting the process: one frame would kill the broker,
with no exception to catch (SPEC S13: no request may stop a broker).

So before kio sees a frame, ``check_request`` walks it with the same schema
kio will use (the request's kio dataclass of that version, and its header's)
without building anything: it reads each length (legacy int16/int32 or
compact unsigned varint, -1/0 for null), and refuses the frame when a string
or bytes field is longer than what is left, or when an array claims more
elements than the bytes left could hold at the smallest encoded size of one
element. Tagged fields are walked too: each one's size must fit, and a tag the
schema knows is walked inside its own window. What passes can make kio
allocate at most a small multiple of the frame, which the listener has already
bounded (``socket.request.max.bytes``, ``queued.max.request.bytes``).

This mirrors kio's writer (``kio.serial._serialize``): the request header's
client id is always a legacy nullable string (Kafka's special case), flexible
versions use compact strings, bytes and arrays and end every entity with its
tagged fields, and nullable entities carry an int8 marker.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from typing import Any, Final

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

# Fixed encoded sizes of kio's primitive kafka types.
_FIXED: Final[dict[str, int]] = {
    "bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
    "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16,
}
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_MAX_VARINT_BYTES: Final = 5  # every length or count in the protocol is an unsigned 32-bit varint


class FrameBoundsError(ValueError):
    """A length or count in the frame promises more bytes than the frame holds."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kafka_type: str  # "" for entities
    entity: Any  # the nested kio dataclass, or None for primitives
    is_array: bool
    nullable_entity: bool
    header_client_id: bool  # RequestHeader.client_id: always a legacy nullable string


@dataclasses.dataclass(frozen=True, slots=True)
class _Schema:
    flexible: bool
    fields: tuple[_Field, ...]  # in wire order, tagged ones left out
    tagged: dict[int, _Field]
    min_size: int  # the fewest bytes one encoded instance takes


def check_request(header_cls: Any, request_cls: Any, frame: bytes | memoryview) -> None:
    """Raise ``FrameBoundsError`` unless every length in ``frame`` (header then body) fits."""
    end = len(frame)
    pos = _walk(_schema(header_cls), frame, 0, end)
    _walk(_schema(request_cls), frame, pos, end)


@functools.cache
def _schema(cls: Any) -> _Schema:
    flexible = bool(cls.__flexible__)
    is_header = cls.__name__ == "RequestHeader"
    plain: list[_Field] = []
    tagged: dict[int, _Field] = {}
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        entity = kind.type_ if isinstance(kind, EntityField | EntityTupleField) else None
        spec = _Field(name=f.name, kafka_type=str(f.metadata.get("kafka_type") or ""), entity=entity,
                      is_array=isinstance(kind, PrimitiveTupleField | EntityTupleField),
                      nullable_entity=isinstance(kind, EntityField) and is_optional(f),
                      header_client_id=is_header and f.name == "client_id")
        tag = get_field_tag(f)
        if tag is None:
            plain.append(spec)
        else:
            tagged[tag] = spec
    min_size = sum(_min_field_size(x, flexible) for x in plain) + (1 if flexible else 0)
    return _Schema(flexible, tuple(plain), tagged, min_size)


def _min_field_size(f: _Field, flexible: bool) -> int:
    if f.is_array:
        return 1 if flexible else 4
    if f.entity is not None:
        return 1 if f.nullable_entity else _schema(f.entity).min_size
    return _min_primitive_size(f, flexible)


def _min_primitive_size(f: _Field, flexible: bool) -> int:
    if f.header_client_id:
        return 2
    if f.kafka_type in ("string",):
        return 1 if flexible else 2
    if f.kafka_type in ("bytes", "records"):
        return 1 if flexible else 4
    try:
        return _FIXED[f.kafka_type]
    except KeyError:
        raise FrameBoundsError(f"unknown kafka type {f.kafka_type!r} in {f.name}") from None


def _walk(s: _Schema, buf: bytes | memoryview, pos: int, end: int) -> int:
    for f in s.fields:
        pos = _walk_field(f, s.flexible, buf, pos, end)
    return _walk_tagged(s, buf, pos, end) if s.flexible else pos


def _walk_tagged(s: _Schema, buf: bytes | memoryview, pos: int, end: int) -> int:
    """Past the tagged fields of an entity of schema ``s`` (flexible) at ``pos``, each checked."""
    count, pos = _uvarint(buf, pos, end)
    if count * 2 > end - pos:  # each tagged field: a tag and a size, one byte at least each
        raise FrameBoundsError(f"{count} tagged fields in {end - pos} bytes")
    for _ in range(count):
        tag, pos = _uvarint(buf, pos, end)
        size, pos = _uvarint(buf, pos, end)
        if size > end - pos:
            raise FrameBoundsError(f"tagged field {tag} of {size} bytes in {end - pos}")
        known = s.tagged.get(tag)
        if known is not None:
            _walk_field(known, True, buf, pos, pos + size)
        pos += size
    return pos


def _walk_field(f: _Field, flexible: bool, buf: bytes | memoryview, pos: int, end: int) -> int:
    if f.is_array:
        if flexible:
            n, pos = _uvarint(buf, pos, end)
            n -= 1  # 0 is null
        else:
            n, pos = _int(_INT32, buf, pos, end)
        if n < 0:
            if n < -1:
                raise FrameBoundsError(f"{f.name}: array length {n}")
            return pos
        one = _schema(f.entity).min_size if f.entity is not None else _min_primitive_size(f, flexible)
        if n * max(1, one) > end - pos:
            raise FrameBoundsError(f"{f.name}: {n} elements cannot fit in {end - pos} bytes")
        for _ in range(n):
            pos = _walk_value(f, flexible, buf, pos, end)
        return pos
    if f.entity is not None and f.nullable_entity:
        marker, pos = _int_fixed(buf, pos, end, 1)
        if marker < 0 or marker == 0xFF:  # kio's NullableEntityMarker.null is -1
            return pos
    return _walk_value(f, flexible, buf, pos, end)


def _walk_value(f: _Field, flexible: bool, buf: bytes | memoryview, pos: int, end: int) -> int:
    if f.entity is not None:
        return _walk(_schema(f.entity), buf, pos, end)
    if f.header_client_id:
        return _skip_sized(f, buf, *_int(_INT16, buf, pos, end), end)
    if f.kafka_type in ("string", "bytes", "records"):
        if flexible:
            n, pos = _uvarint(buf, pos, end)
            return _skip_sized(f, buf, n - 1, pos, end)
        n, pos = _int(_INT16 if f.kafka_type == "string" else _INT32, buf, pos, end)
        return _skip_sized(f, buf, n, pos, end)
    size = _FIXED.get(f.kafka_type)
    if size is None:
        raise FrameBoundsError(f"unknown kafka type {f.kafka_type!r} in {f.name}")
    if size > end - pos:
        raise FrameBoundsError(f"{f.name}: {size} bytes needed, {end - pos} left")
    return pos + size


def _skip_sized(f: _Field, _buf: bytes | memoryview, n: int, pos: int, end: int) -> int:
    if n < -1:
        raise FrameBoundsError(f"{f.name}: length {n}")
    if n > end - pos:
        raise FrameBoundsError(f"{f.name}: {n} bytes announced, {end - pos} left")
    return pos + max(n, 0)


def _int(st: struct.Struct, buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    if st.size > end - pos:
        raise FrameBoundsError(f"{st.size} bytes needed, {end - pos} left")
    return int(st.unpack_from(buf, pos)[0]), pos + st.size


def _int_fixed(buf: bytes | memoryview, pos: int, end: int, size: int) -> tuple[int, int]:
    if size > end - pos:
        raise FrameBoundsError(f"{size} bytes needed, {end - pos} left")
    return int.from_bytes(bytes(buf[pos:pos + size]), "big", signed=True), pos + size


def _uvarint(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    value = 0
    for i in range(_MAX_VARINT_BYTES):
        if pos >= end:
            raise FrameBoundsError("a varint runs past the end of the frame")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return value, pos
    raise FrameBoundsError("a varint longer than 5 bytes")


def check_header(header_cls: Any, frame: bytes | memoryview) -> int:
    """Where ``frame``'s request header ends; ``FrameBoundsError`` unless its every length fits."""
    return _walk(_schema(header_cls), frame, 0, len(frame))


def array_count(cls: Any, name: str, frame: bytes | memoryview, pos: int) -> tuple[int, int, int]:
    """(element count, where the elements start, the fewest bytes one element takes) of the array
    field ``name`` of ``cls`` at ``pos`` (-1 for a null array), refused with ``FrameBoundsError``
    from the count alone when the elements cannot fit in what is left of ``frame`` - nothing is
    read beyond the count, nothing is allocated for it."""
    s = _schema(cls)
    f = next((x for x in s.fields if x.name == name and x.is_array), None)
    if f is None:
        raise ValueError(f"{cls.__name__} has no array field {name!r}")
    end = len(frame)
    if s.flexible:
        n, pos = _uvarint(frame, pos, end)
        n -= 1
    else:
        n, pos = _int(_INT32, frame, pos, end)
    if n < -1:
        raise FrameBoundsError(f"{f.name}: array length {n}")
    one = max(1, _schema(f.entity).min_size if f.entity is not None else _min_primitive_size(f, s.flexible))
    if n * one > end - pos:
        raise FrameBoundsError(f"{f.name}: {n} elements cannot fit in {end - pos} bytes")
    return n, pos, one


def check_entity(cls: Any, frame: bytes | memoryview, pos: int) -> int:
    """Where one encoded ``cls`` entity starting at ``pos`` ends, its every length checked (as
    ``check_request`` checks it inside a request)."""
    return _walk(_schema(cls), frame, pos, len(frame))


def field_offset(cls: Any, name: str, frame: bytes | memoryview, pos: int) -> int:
    """Where the field ``name`` of a ``cls`` entity starting at ``pos`` begins, every field before
    it checked (as ``check_request`` checks them)."""
    s = _schema(cls)
    end = len(frame)
    for f in s.fields:
        if f.name == name:
            return pos
        pos = _walk_field(f, s.flexible, frame, pos, end)
    raise ValueError(f"{cls.__name__} has no field {name!r}")


def check_tagged(cls: Any, frame: bytes | memoryview, pos: int) -> int:
    """Where the tagged fields of a ``cls`` entity (of a flexible version) starting at ``pos``
    end, each checked; ``pos`` itself when ``cls`` is not flexible."""
    s = _schema(cls)
    return _walk_tagged(s, frame, pos, len(frame)) if s.flexible else pos
