"""Kafka's wire protocol at the broker's Kafka listener: frames, versions, translation (pure).

Theory of operation
-------------------
A Kafka client sends size-prefixed frames: ``int32 size`` then a request header
(api key, api version, correlation id, client id; tagged fields from the
"flexible" versions on) and the request body. This module turns one frame into
a ``Decoded`` request, translates it into the protobuf request(s) that the
broker's one request-handling layer (``broker.server.kafka_apis``) answers, and turns
the protobuf answers back into the Kafka response of the version the client
asked for. Nothing here does I/O; ``broker.network.kafka_listener`` is the shell.

* Versions. ``SUPPORTED`` is what ApiVersions advertises and all a client may
  use: only APIs this module translates, and per API only versions whose every
  field it maps (no topic ids: Fetch stops at v12, Produce at v9, Metadata at
  v12). Clients pick the highest version both sides know. A request for any
  other API or version is a protocol violation and closes its connection,
  except ApiVersions itself, answered UNSUPPORTED_VERSION in v0 with the
  supported list (Kafka's rule, so that a newer client can retry lower).
  SaslHandshake and SaslAuthenticate are advertised everywhere, as Kafka
  does; the listener answers them (``broker.security.kafka_sasl``), not ``to_pb``.
* Translation. Kafka's messages change fields from version to version; the kio
  schema of each version is a frozen dataclass with exactly that version's
  fields. Requests are read with ``getattr(..., default)`` where a field is
  missing in old versions; responses are built by ``build``, which takes the
  values of the newest version and keeps only the fields the client's version
  has (missing ones get their schema default), converting milliseconds to
  kio's timedeltas/datetimes and integers to its ``ErrorCode``. Produce answers
  of v5-v8, on the path of every acknowledged produce, are written directly
  (``encode_produce_response``), byte for byte as kio writes them.
* Batches pass through untouched: Produce hands the RecordBatch bytes to the
  same validator and log append as the gRPC path; Fetch returns the stored bytes.

Protocol library: kio, chosen by measurement over kafka-python's kafka.protocol
(``kio`` 0.6.5 vs ``kafka-python`` 3.0.12 here, medians of 2000 runs):
both are generated from Kafka's own JSON message definitions and cover every
version that librdkafka 2.16 and kafka-python 3.0 negotiate (kio drops the
versions Kafka 4.0 removed: Produce < 3, Fetch < 4, which neither client needs
against a broker that advertises newer ones). kio decoded a 4 x 100 KB Produce
v9 in ~20 us against ~38 us and a 10-topic Metadata v9 in ~3 us against
~13 us (compiled reader), and encoded a 4 x 250 KB Fetch v11 response in
~76 us against ~147 us. Above all its schemas are typed frozen dataclasses, one
class per version (``py.typed``), which mypy checks and which match this
project's values, where kafka-python builds untyped classes from JSON at import.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
import types
import typing
import uuid
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.serial.readers import read_compact_string, read_legacy_string

from broker.log.config import TOPIC_CONFIG_NAMES
from broker.network.kafka_wire_bounds import (
    FrameBoundsError,
    array_count,
    check_entity,
    check_header,
    check_request,
    check_tagged,
    field_offset,
)
from broker.network.kafka_wire_produce import decode_produce, encode_produce_response_v9
from proto import minikafka_pb2 as pb
from proto.kafka_produce import PARTITION_RESPONSE

# Smallest legal request: api key, api version, correlation id, client id length.
MIN_FRAME_BYTES: Final = 10
API_VERSIONS: Final = 18
PRODUCE: Final = 0
# Answered by the listener itself (broker.security.kafka_sasl), never translated: advertised on every
# listener, as Kafka does, and refused with ILLEGAL_SASL_STATE where no SASL exchange is due.
SASL_APIS: Final = frozenset({17, 36})

# api key -> (name, lowest, highest version advertised); the name is the API's in broker.network.api_catalogue
# where it has one (tests/unit/test_api_catalogue.py checks that the keys agree).
SUPPORTED: Final[dict[int, tuple[str, int, int]]] = {
    0: ("Produce", 3, 9),
    1: ("Fetch", 4, 12),
    2: ("ListOffsets", 1, 6),
    3: ("Metadata", 0, 12),
    8: ("OffsetCommit", 2, 8),
    9: ("OffsetFetch", 1, 7),
    10: ("FindCoordinator", 0, 3),
    11: ("JoinGroup", 0, 7),
    12: ("Heartbeat", 0, 4),
    13: ("LeaveGroup", 0, 4),
    14: ("SyncGroup", 0, 5),
    15: ("DescribeGroups", 0, 5),
    16: ("ListGroups", 0, 3),
    17: ("SaslHandshake", 0, 1),
    18: ("ApiVersions", 0, 3),
    19: ("CreateTopics", 2, 6),
    20: ("DeleteTopics", 1, 5),
    21: ("DeleteRecords", 0, 2),
    37: ("CreatePartitions", 0, 3),
    22: ("InitProducerId", 0, 4),
    23: ("OffsetsForLeaderEpoch", 2, 4),
    32: ("DescribeConfigs", 1, 4),
    33: ("AlterConfigs", 0, 2),
    36: ("SaslAuthenticate", 0, 2),
    42: ("DeleteGroups", 0, 2),
    47: ("OffsetDelete", 0, 0),
    44: ("IncrementalAlterConfigs", 0, 1),
    # Issue 30 (broker.server.describe_apis). DescribeCluster: v0, Kafka 2.8's (v1's endpoint type
    # asks for KRaft controllers). DescribeLogDirs: kio has v1+; v3 says CLUSTER_AUTHORIZATION_FAILED,
    # v4 the file system's total and usable bytes (v5's cordoned directories do not exist here).
    60: ("DescribeCluster", 0, 0),
    35: ("DescribeLogDirs", 1, 4),
    61: ("DescribeProducers", 0, 0),
    # Transactions (KIP-98): Kafka 2.8 has v0-1; kio has v1 only (Kafka 4.0 dropped v0).
    27: ("WriteTxnMarkers", 1, 1),
    # The transactional producer's (Kafka 2.8's versions up to what librdkafka 2.x and kafka-python
    # use; AddPartitionsToTxn v4+ is KIP-890's broker-to-broker batching).
    24: ("AddPartitionsToTxn", 0, 3),
    25: ("AddOffsetsToTxn", 0, 3),
    26: ("EndTxn", 0, 3),
    28: ("TxnOffsetCommit", 0, 3),
    # Kafka 2.8's versions (kio has no ACL v0: Kafka 4.0 dropped it; ACL v3 adds USER resources).
    29: ("DescribeAcls", 1, 2),
    30: ("CreateAcls", 1, 2),
    31: ("DeleteAcls", 1, 2),
    43: ("ElectLeaders", 0, 2),
    45: ("AlterPartitionReassignments", 0, 0),
    46: ("ListPartitionReassignments", 0, 0),
    50: ("DescribeUserScramCredentials", 0, 0),
    51: ("AlterUserScramCredentials", 0, 0),
}


class ProtocolError(Exception):
    """The frame is not a request this listener can answer: its connection is closed."""


class Header(NamedTuple):
    """A request's header (a NamedTuple: one per request, and a frozen dataclass's ``__init__``
    costs three times a tuple's)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str


class Decoded(NamedTuple):
    """A decoded request frame (a NamedTuple, as ``Header``: one per request)."""

    header: Header
    request: Any  # the kio request dataclass of header.api_version (a FastProduce for most Produce)

    @property
    def api(self) -> str:
        return SUPPORTED[self.header.api_key][0]


class FastProduce(NamedTuple):
    """A Produce read by ``broker.network.kafka_wire_produce`` straight into its protobuf (no kio entity)."""

    request: pb.ProduceRequest

    @property
    def acks(self) -> int:
        return self.request.acks


class UnsupportedVersion(ProtocolError):
    def __init__(self, header: Header) -> None:
        super().__init__(f"ApiVersions v{header.api_version} is not supported")
        self.header = header


def peek_header(frame: bytes) -> Header:
    """The header fields every version shares (api key, version, correlation id, client id)."""
    if len(frame) < MIN_FRAME_BYTES:
        raise ProtocolError(f"a {len(frame)}-byte frame is shorter than a request header")
    api_key, version, correlation_id, n = struct.unpack_from(">hhih", frame, 0)
    client_id = "" if n < 0 else frame[10:10 + n].decode("utf-8", "replace")
    return Header(api_key, version, correlation_id, client_id)


def api_key_of(frame: bytes) -> int:
    """A request frame's api key (-1 if it is too short to hold one), before decoding it."""
    return int.from_bytes(frame[:2], "big", signed=True) if len(frame) >= 2 else -1


def decode_request(frame: bytes) -> Decoded:
    """One request frame (without its size prefix). Raises ``UnsupportedVersion`` for an
    ApiVersions the broker does not know (answered, not fatal), ProtocolError otherwise."""
    h = peek_header(frame)
    known = SUPPORTED.get(h.api_key)
    if known is None or not known[1] <= h.api_version <= known[2]:
        if h.api_key == API_VERSIONS:
            raise UnsupportedVersion(h)
        raise ProtocolError(f"api key {h.api_key} version {h.api_version} is not supported")
    if h.api_key == PRODUCE:
        fast = decode_produce(frame, h.api_version)
        if fast is not None:
            return Decoded(h, FastProduce(fast))
    cls = _request_class(h.api_key, h.api_version)
    try:
        # kio's compiled reader would reserve memory for whatever count the frame claims (and abort
        # the process when that fails): every length is checked against the frame first.
        check_request(cls.__header_schema__, cls, frame)
        _header, size = entity_reader(cls.__header_schema__)(frame, 0)
        request, _n = entity_reader(cls)(frame, size)
    except (SerialError, ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(f"malformed {known[0]} v{h.api_version}: {e}") from None
    return Decoded(h, request)


def encode_response(header: Header, response: Any) -> bytes:
    """The size-prefixed response frame for ``header``'s request."""
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    cls = type(response)
    entity_writer(cls.__header_schema__)(buf, cls.__header_schema__(correlation_id=header.correlation_id))
    entity_writer(cls)(buf, response)
    out = buf.getbuffer()
    struct.pack_into(">i", out, 0, len(out) - 4)
    return bytes(out)


# Produce v5-v8 responses (non-flexible, with log_start_offset) written directly: through kio (a
# dataclass per entity, datetimes, a writer per field) one took ~19 us for two partitions, on the
# path of every acks=1/all Produce answer; this takes ~3 us. Other versions go through kio.
_PRODUCE_FAST_VERSIONS: Final = range(5, 9)
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_SIZE_CORRELATION: Final = struct.Struct(">ii")
_KNOWN_ERROR_CODES: Final = frozenset(int(c) for c in ErrorCode)
_NULL_STRING: Final = _I16.pack(-1)
_NO_RECORD_ERRORS: Final = _I32.pack(0)


def encode_produce_response(header: Header, resp: pb.ProduceResponse) -> bytes | None:
    """The size-prefixed Produce response frame of ``resp``, byte for byte what
    ``encode_response(header, from_pb(...))`` writes, for versions 5-9 (9: broker.network.kafka_wire_produce); None for the others.
    ValueError when a string does not fit its int16 length (kio refuses those too)."""
    version = header.api_version
    if version == 9:
        return encode_produce_response_v9(header.correlation_id, resp, _KNOWN_ERROR_CODES,
                                          ErrorCode.unknown_server_error)
    if version not in _PRODUCE_FAST_VERSIONS:
        return None
    v8 = version >= 8
    parts: list[bytes] = [b"", _I32.pack(len(resp.topics))]
    for t in resp.topics:
        name = t.name.encode()
        if len(name) > 0x7FFF:
            raise ValueError(f"a topic name of {len(name)} bytes")
        parts.append(_I16.pack(len(name)) + name + _I32.pack(len(t.partitions)))
        for p in t.partitions:
            code = p.error_code if p.error_code in _KNOWN_ERROR_CODES else ErrorCode.unknown_server_error
            # kio writes a negative log append time as -1 (no LogAppendTime), as Kafka does.
            parts.append(PARTITION_RESPONSE.pack(p.partition, code, p.base_offset, max(p.log_append_time_ms, -1),
                                                 p.log_start_offset))
            if v8:
                parts.append(_NO_RECORD_ERRORS)
                if p.error_message:
                    message = p.error_message.encode()
                    if len(message) > 0x7FFF:
                        raise ValueError(f"an error message of {len(message)} bytes")
                    parts.append(_I16.pack(len(message)) + message)
                else:
                    parts.append(_NULL_STRING)
    parts.append(_I32.pack(resp.throttle_time_ms))
    parts[0] = _SIZE_CORRELATION.pack(4 + sum(map(len, parts)), header.correlation_id)
    return b"".join(parts)


def encode_answer(d: Decoded, answers: Sequence[Any]) -> bytes:
    """The response frame of ``d`` from its handlers' answers to ``to_pb(d)``."""
    if d.header.api_key == PRODUCE:
        fast = encode_produce_response(d.header, answers[0])
        if fast is not None:
            return fast
    return encode_response(d.header, from_pb(d, answers))


def expects_response(d: Decoded) -> bool:
    """acks=0 produce requests are never answered (Kafka's rule)."""
    return not (d.header.api_key == PRODUCE and d.request.acks == 0)


@functools.cache
def _request_class(api_key: int, version: int) -> Any:
    return load_request_schema(api_key, version)


@functools.cache
def _response_class(api_key: int, version: int) -> Any:
    return load_response_schema(api_key, version)


# ------------------------------------------------------------------ building kio responses


def error_code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.unknown_server_error


@functools.cache
def _field_plan(cls: type) -> tuple[tuple[str, str, Any, bool, bool], ...]:
    """Per field: name, kafka type, nested dataclass (or None), is a tuple, has a default."""
    hints = typing.get_type_hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        args = [a for a in typing.get_args(hint) if a is not type(None)] \
            if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union else [hint]
        inner = args[0] if args else hint
        is_tuple = typing.get_origin(inner) is tuple
        elem = typing.get_args(inner)[0] if is_tuple else inner
        nested = elem if dataclasses.is_dataclass(elem) else None
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        plan.append((f.name, str(f.metadata.get("kafka_type", "")), nested, is_tuple, has_default))
    return tuple(plan)


def _scalar(kafka_type: str, value: Any) -> Any:
    if value is None:
        return None
    if kafka_type.startswith("timedelta"):
        return datetime.timedelta(milliseconds=int(value))
    if kafka_type == "datetime_i64":
        return None if value < 0 else datetime.datetime.fromtimestamp(value / 1000, tz=datetime.UTC)
    if kafka_type == "error_code":
        return error_code(int(value))
    return value


_ZERO: Final[dict[str, Any]] = {"string": "", "bytes": b"", "records": b"", "bool": False,
                                "uuid": uuid.UUID(int=0)}


def build(cls: type, values: Mapping[str, Any]) -> Any:
    """An instance of the kio dataclass ``cls`` from ``values`` (field name -> value; nested
    entities as mappings, arrays as sequences). Values for fields ``cls`` lacks are dropped: the
    newest version's values serve every older one."""
    kw: dict[str, Any] = {}
    for name, kafka_type, nested, is_tuple, has_default in _field_plan(cls):
        if name in values:
            v = values[name]
            if v is None:
                kw[name] = None
            elif nested is not None:
                kw[name] = tuple(build(nested, x) for x in v) if is_tuple else build(nested, v)
            elif is_tuple:
                kw[name] = tuple(v)
            else:
                kw[name] = _scalar(kafka_type, v)
        elif not has_default:
            if is_tuple:
                kw[name] = ()
            elif nested is not None:
                kw[name] = build(nested, {})
            else:
                kw[name] = _scalar(kafka_type, 0) if kafka_type.startswith(("timedelta", "error")) \
                    else _ZERO.get(kafka_type, 0)
    return cls(**kw)


def response(d: Decoded, values: Mapping[str, Any]) -> Any:
    return build(_response_class(d.header.api_key, d.header.api_version), values)


def ms(value: Any) -> int:
    """kio's timedelta fields as Kafka's milliseconds."""
    return int(value // datetime.timedelta(milliseconds=1)) if isinstance(value, datetime.timedelta) else int(value)


# ------------------------------------------------------------------ ApiVersions (answered here)


def api_versions_values(code: int = 0) -> dict[str, Any]:
    return {"error_code": code, "throttle_time": 0,
            "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                         for k, (_n, lo, hi) in sorted(SUPPORTED.items())]}


def api_versions_response(d: Decoded) -> Any:
    return response(d, api_versions_values())


def unsupported_api_versions_frame(header: Header) -> bytes:
    """Kafka's answer to an ApiVersions of a version it does not know: v0, UNSUPPORTED_VERSION."""
    body = build(_response_class(API_VERSIONS, 0), api_versions_values(pb.ErrorCode.UNSUPPORTED_VERSION))
    return encode_response(header, body)


# ------------------------------------------------------------------ large Metadata requests, in slices
#
# One Metadata request may name a million topics within every limit (a 2.9 MB frame of one-character
# names): decoded, answered and encoded in one go it held the broker's event loop for seconds (the
# names read by kio and checked, a protobuf entry, a dict and a kio dataclass per name, then kio's
# writer), and every other client and the replication waited (SPEC S15.2). A request naming more
# than ``LARGE_METADATA_TOPICS`` topics goes instead through the two generators below, which do the
# same work a slice of names at a time and yield between slices, so that the listener can let the
# loop run other work (``await asyncio.sleep(0)``) after each. The answers are byte for byte what
# ``decode_request``, ``to_pb`` and ``encode_answer`` give (tests/unit/test_large_requests.py).

METADATA: Final = 3
LARGE_METADATA_TOPICS: Final = 1000  # more names than this: decoded and encoded in slices
METADATA_SLICE: Final = 500  # names per slice: ~1 ms of work (2,000 held the loop 2.3-3.2 ms a slice, and an
# acks=all produce to this broker waits for several slices: p99 43-65 ms at a million names)


@dataclass(frozen=True, slots=True)
class SlicedMetadata:
    decoded: Decoded  # the request as sent, but with no topics (its other fields, its header)
    request: pb.MetadataRequest  # to_pb's translation of the whole request: every name in it


def large_metadata(frame: bytes) -> bool:
    """Whether ``frame`` is a Metadata request of a supported version naming more than
    ``LARGE_METADATA_TOPICS`` topics, read from the count alone. False for anything else, however
    malformed: ``decode_request`` then says what is wrong with it, as for any frame."""
    if api_key_of(frame) != METADATA or len(frame) < MIN_FRAME_BYTES + LARGE_METADATA_TOPICS:  # a byte a name at least
        return False
    h = peek_header(frame)
    known = SUPPORTED[METADATA]
    if not known[1] <= h.api_version <= known[2]:
        return False
    cls = _request_class(METADATA, h.api_version)
    try:
        n, _pos, _one = array_count(cls, "topics", frame, check_header(cls.__header_schema__, frame))
    except FrameBoundsError:
        return False
    return n > LARGE_METADATA_TOPICS


def decode_metadata_sliced(frame: bytes, slice_size: int = METADATA_SLICE) -> Generator[None, None, SlicedMetadata]:
    """``decode_request`` and ``to_pb`` of a Metadata frame, yielding after every ``slice_size``
    names. Raises ProtocolError as ``decode_request`` does (every length checked before kio reads
    it: the count against the bytes left first, then each name)."""
    h = peek_header(frame)
    cls = _request_class(METADATA, h.api_version)
    topic_cls = _nested(cls, "topics")
    read = entity_reader(topic_cls)
    req = pb.MetadataRequest()
    names: list[str] = []
    try:
        start = check_header(cls.__header_schema__, frame)
        n, pos, _one = array_count(cls, "topics", frame, start)
        for _ in range(max(n, 0)):
            end = check_entity(topic_cls, frame, pos)
            t, _m = read(frame, pos)
            names.append(_s(t.name))
            pos = end
            if len(names) >= slice_size:
                req.topics.extend(names)
                names.clear()
                yield
        req.topics.extend(names)
        # The request's other fields: the frame without its names, read as decode_request reads it.
        rest = frame[:start] + (b"\x01" if cls.__flexible__ else b"\0\0\0\0") + frame[pos:]
        check_request(cls.__header_schema__, cls, rest)
        _header, size = entity_reader(cls.__header_schema__)(rest, 0)
        request, _n = entity_reader(cls)(rest, size)
    except (SerialError, ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(f"malformed Metadata v{h.api_version}: {e}") from None
    if n < 0 or (h.api_version == 0 and n == 0):  # every topic (never large; as _metadata)
        return SlicedMetadata(Decoded(h, request), _metadata(dataclasses.replace(request, topics=None), h)[0][1])
    req.all_topics = False
    req.allow_auto_topic_creation = getattr(request, "allow_auto_topic_creation", True)
    return SlicedMetadata(Decoded(h, request), req)


def encode_metadata_sliced(header: Header, resp: pb.MetadataResponse,
                           slice_size: int = METADATA_SLICE) -> Generator[None, None, bytes]:
    """``encode_answer`` of a Metadata answer, yielding after every ``slice_size`` topics: the
    response without topics written by kio, its (empty) topic array replaced by the topics, each
    written by kio - or, for a topic with an error and no partitions (every name of a refused
    request), from a template of what kio writes for one."""
    version = header.api_version
    cls = _response_class(METADATA, version)
    topic_cls = _nested(cls, "topics")
    flexible = bool(cls.__flexible__)
    head = encode_response(header, build(cls, {**_metadata_head(resp), "topics": []}))
    tail = _metadata_tail_bytes(version)
    cut = len(head) - tail - (1 if flexible else 4)
    n = len(resp.topics)
    parts: list[bytes] = [head[4:cut], _uvarint(n + 1) if flexible else _I32.pack(n)]
    suffix = _metadata_error_topic_suffix(version)
    write = entity_writer(topic_cls)
    chunk: list[bytes] = []
    for i, t in enumerate(resp.topics):
        name = t.name.encode()
        if not t.partitions and not t.is_internal and len(name) <= 0x7FFF:
            code = t.error_code if t.error_code in _KNOWN_ERROR_CODES else ErrorCode.unknown_server_error
            size = _uvarint(len(name) + 1) if flexible else _I16.pack(len(name))
            chunk.append(b"".join((_I16.pack(code), size, name, suffix)))
        else:
            buf = io.BytesIO()
            write(buf, build(topic_cls, _metadata_topic_out(t)))
            chunk.append(buf.getvalue())
        if (i + 1) % slice_size == 0:
            parts.append(b"".join(chunk))
            chunk.clear()
            yield
    parts.append(b"".join(chunk))
    parts.append(head[len(head) - tail:])
    return _framed(parts)


def _framed(parts: list[bytes]) -> bytes:
    """The response frame of a sliced encoder's ``parts``: its size, then the parts, joined in one
    copy (a megabytes-long answer - ~10 MB for a million names - was joined, then copied again
    behind its size, in one step of the loop)."""
    return b"".join([_I32.pack(sum(map(len, parts))), *parts])


def _nested(cls: type, field: str) -> Any:
    """The element (or entity) class of ``cls``'s field ``field``."""
    return next(nested for name, _t, nested, _a, _d in _field_plan(cls) if name == field)


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@functools.cache
def _metadata_tail_bytes(version: int) -> int:
    """The bytes a Metadata response of ``version`` writes after its topic array: its fixed-size
    fields after ``topics`` and, in flexible versions, its (empty) tagged fields."""
    cls = _response_class(METADATA, version)
    after = False
    size = 0
    for name, kafka_type, nested, is_tuple, _d in _field_plan(cls):
        if after:
            if nested is not None or is_tuple or kafka_type != "int32":
                raise ValueError(f"Metadata v{version}: {name} after the topics")
            size += 4
        after = after or name == "topics"
    return size + (1 if cls.__flexible__ else 0)


@functools.cache
def _metadata_error_topic_suffix(version: int) -> bytes:
    """What kio writes after the name of a Metadata topic with no partitions, not internal."""
    cls = _nested(_response_class(METADATA, version), "topics")
    buf = io.BytesIO()
    entity_writer(cls)(buf, build(cls, _metadata_topic_out(pb.TopicMetadata(name=""))))
    written = buf.getvalue()
    empty_name = b"\x01" if cls.__flexible__ else b"\0\0"
    if written[:2] != b"\0\0" or written[2:2 + len(empty_name)] != empty_name:
        raise ValueError(f"Metadata v{version}: a topic does not begin with its error code and name")
    return written[2 + len(empty_name):]



# ------------------------------------------------------------------ large OffsetCommit requests, in slices
#
# An OffsetCommit may list 100,000 partitions in a 1.4 MB frame (refused INVALID_REQUEST on every
# partition, over max.request.partitions, but still decoded, judged and answered): in one go it held
# the loop for 2.6 s (kio's reader and the bounds walk, a protobuf entry per partition, the answer
# built and written by kio). A frame longer than ``LARGE_OFFSET_COMMIT_BYTES`` goes instead through
# the generators below, which do the same work a slice of partitions at a time and yield between
# slices; their answers are byte for byte the one-go path's (tests/unit/test_large_requests.py).

OFFSET_COMMIT: Final = 8
LARGE_OFFSET_COMMIT_BYTES: Final = 16 << 10  # longer frames (~1,000 partitions or more): in slices
OFFSET_COMMIT_SLICE: Final = 400  # partitions decoded per slice: ~1 ms of work


@dataclass(frozen=True, slots=True)
class SlicedRequest:
    decoded: Decoded  # the request as sent, but with no topics (its other fields, its header)
    request: Any  # to_pb's translation of the whole request (its only call's protobuf request)


def large_offset_commit(frame: bytes) -> bool:
    """Whether ``frame`` is an OffsetCommit of a supported version longer than
    ``LARGE_OFFSET_COMMIT_BYTES`` (nothing is read but its header's api key and version)."""
    if api_key_of(frame) != OFFSET_COMMIT or len(frame) <= LARGE_OFFSET_COMMIT_BYTES:
        return False
    known = SUPPORTED[OFFSET_COMMIT]
    return known[1] <= peek_header(frame).api_version <= known[2]


def decode_offset_commit_sliced(frame: bytes, slice_size: int = OFFSET_COMMIT_SLICE
                                ) -> Generator[None, None, SlicedRequest]:
    """``decode_request`` and ``to_pb`` of an OffsetCommit frame, yielding after every
    ``slice_size`` partitions. Raises ProtocolError as ``decode_request`` does: every length is
    checked before kio reads it (each array's count against the bytes left first)."""
    h = peek_header(frame)
    cls = _request_class(OFFSET_COMMIT, h.api_version)
    topic_cls = _nested(cls, "topics")
    part_cls = _nested(topic_cls, "partitions")
    read_part = entity_reader(part_cls)
    read_name = read_compact_string if cls.__flexible__ else read_legacy_string
    req = pb.OffsetCommitRequest()
    todo = slice_size
    try:
        start = field_offset(cls, "topics", frame, check_header(cls.__header_schema__, frame))
        n_topics, pos, _one = array_count(cls, "topics", frame, start)
        if n_topics < 0:
            raise ValueError("a null topic array")
        for _ in range(n_topics):
            name_end = field_offset(topic_cls, "partitions", frame, pos)
            name, _end = read_name(frame, pos)
            n_parts, pos, _one = array_count(topic_cls, "partitions", frame, name_end)
            if n_parts < 0:
                raise ValueError("a null partition array")
            # Each partition added at once, nothing kept: no object lives on to be promoted to the
            # older GC generations (whose full collection would hold the loop for tens of ms).
            add = req.topics.add(name=name).partitions.add
            for _ in range(n_parts):
                end = check_entity(part_cls, frame, pos)
                p, _m = read_part(frame, pos)
                pos = end
                add(partition=p.partition_index, offset=p.committed_offset, metadata=_s(p.committed_metadata))
                todo -= 1
                if todo <= 0:
                    todo = slice_size
                    yield
            pos = check_tagged(topic_cls, frame, pos)
        # The request's other fields: the frame without its topics, read as decode_request reads it.
        rest = frame[:start] + (b"\x01" if cls.__flexible__ else b"\0\0\0\0") + frame[pos:]
        check_request(cls.__header_schema__, cls, rest)
        _header, size = entity_reader(cls.__header_schema__)(rest, 0)
        request, _n = entity_reader(cls)(rest, size)
    except (SerialError, ValueError, UnicodeDecodeError, KeyError) as e:  # KeyError: kio's unknown tagged field
        raise ProtocolError(f"malformed OffsetCommit v{h.api_version}: {e}") from None
    req.group_id = request.group_id
    req.generation_id = request.generation_id_or_member_epoch
    req.member_id = request.member_id
    req.group_instance_id = _instance_id(request)
    return SlicedRequest(Decoded(h, request), req)


def encode_offset_commit_sliced(header: Header, req: pb.OffsetCommitRequest, resp: pb.OffsetCommitResponse,
                                slice_size: int = OFFSET_COMMIT_SLICE * 5) -> Generator[None, None, bytes]:
    """``encode_answer`` of an OffsetCommit answer (``_offset_commit_out`` then kio), yielding
    after every ``slice_size`` partitions: the response without topics written by kio, its (empty)
    topic array replaced by the topics, written here as kio writes them."""
    version = header.api_version
    cls = _response_class(OFFSET_COMMIT, version)
    flexible = bool(cls.__flexible__)
    if _field_plan(cls)[-1][0] != "topics":
        raise ValueError(f"OffsetCommit v{version}: fields after the topics")
    head = encode_response(header, build(cls, {"topics": []}))
    tail = 1 if flexible else 0  # the response's (empty) tagged fields
    cut = len(head) - tail - (1 if flexible else 4)
    group_refusal = bool(resp.error_code and not resp.topics)
    topics: Any = req.topics if group_refusal else resp.topics
    parts: list[bytes] = [head[4:cut], _uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics))]
    pack = _PARTITION_TAGGED.pack if flexible else _PARTITION_CODE.pack
    known = _KNOWN_ERROR_CODES
    unknown = int(ErrorCode.unknown_server_error)
    chunk: list[bytes] = []  # joined into parts after each slice: the last join is short
    todo = slice_size
    for t in topics:
        name = t.name.encode()
        if flexible:
            chunk.append(_uvarint(len(name) + 1) + name + _uvarint(len(t.partitions) + 1))
        else:
            if len(name) > 0x7FFF:
                raise ValueError(f"a topic name of {len(name)} bytes")
            chunk.append(_I16.pack(len(name)) + name + _I32.pack(len(t.partitions)))
        for p in t.partitions:
            code = resp.error_code if group_refusal else p.error_code or resp.error_code
            chunk.append(pack(p.partition, code if code in known else unknown))
            todo -= 1
            if todo <= 0:
                todo = slice_size
                parts.append(b"".join(chunk))
                chunk.clear()
                yield
        if flexible:
            chunk.append(b"\0")
    parts.append(b"".join(chunk))
    parts.append(head[len(head) - tail:])
    return _framed(parts)


_PARTITION_CODE: Final = struct.Struct(">ih")  # partition_index, error_code
_PARTITION_TAGGED: Final = struct.Struct(">ihx")  # and the partition's (empty) tagged fields


# ------------------------------------------------------------------ large consumer Fetch requests, in slices
#
# A consumer's Fetch may list 20,000 partitions in a 550 KB frame (refused INVALID_REQUEST on every
# one, over max.request.partitions): decoded, translated and encoded in one go it held the loop for
# ~0.3 s. A consumer's (replica id < 0) Fetch frame longer than ``LARGE_FETCH_BYTES`` is decoded and
# its answer encoded a slice of partitions at a time, as OffsetCommit's above; a follower's is not
# (the replication's own fetches keep their one-go path). The same bytes either way.

FETCH: Final = 1
LARGE_FETCH_BYTES: Final = 16 << 10  # longer consumer fetches (~500 partitions or more): in slices
FETCH_SLICE: Final = 500  # partitions decoded per slice: ~1 ms of work
FETCH_ENCODE_SLICE: Final = 120  # partitions encoded per slice (by kio: ~8 us each)


def large_fetch(frame: bytes) -> bool:
    """Whether ``frame`` is a consumer's Fetch of a supported version longer than
    ``LARGE_FETCH_BYTES`` (its header and replica id read, nothing else)."""
    if api_key_of(frame) != FETCH or len(frame) <= LARGE_FETCH_BYTES:
        return False
    h = peek_header(frame)
    known = SUPPORTED[FETCH]
    if not known[1] <= h.api_version <= known[2]:
        return False
    cls = _request_class(FETCH, h.api_version)
    try:
        pos = field_offset(cls, "replica_id", frame, check_header(cls.__header_schema__, frame))
    except FrameBoundsError:
        return False
    return len(frame) >= pos + 4 and _I32.unpack_from(frame, pos)[0] < 0


def decode_fetch_sliced(frame: bytes, slice_size: int = FETCH_SLICE) -> Generator[None, None, SlicedRequest]:
    """``decode_request`` and ``to_pb`` of a Fetch frame, yielding after every ``slice_size``
    partitions; ProtocolError as ``decode_request`` raises it (every length checked first)."""
    h = peek_header(frame)
    cls = _request_class(FETCH, h.api_version)
    topic_cls = _nested(cls, "topics")
    part_cls = _nested(topic_cls, "partitions")
    read_part = entity_reader(part_cls)
    read_name = read_compact_string if cls.__flexible__ else read_legacy_string
    req = pb.FetchRequest()
    todo = slice_size
    try:
        start = field_offset(cls, "topics", frame, check_header(cls.__header_schema__, frame))
        n_topics, pos, _one = array_count(cls, "topics", frame, start)
        if n_topics < 0:
            raise ValueError("a null topic array")
        for _ in range(n_topics):
            name_end = field_offset(topic_cls, "partitions", frame, pos)
            name, _end = read_name(frame, pos)
            n_parts, pos, _one = array_count(topic_cls, "partitions", frame, name_end)
            if n_parts < 0:
                raise ValueError("a null partition array")
            add = req.topics.add(name=name).partitions.add  # nothing kept, as in the OffsetCommit's
            for _ in range(n_parts):
                end = check_entity(part_cls, frame, pos)
                p, _m = read_part(frame, pos)
                pos = end
                add(partition=p.partition, current_leader_epoch=getattr(p, "current_leader_epoch", -1),
                    fetch_offset=p.fetch_offset, log_start_offset=getattr(p, "log_start_offset", -1),
                    partition_max_bytes=p.partition_max_bytes)
                todo -= 1
                if todo <= 0:
                    todo = slice_size
                    yield
            pos = check_tagged(topic_cls, frame, pos)
        rest = frame[:start] + (b"\x01" if cls.__flexible__ else b"\0\0\0\0") + frame[pos:]
        check_request(cls.__header_schema__, cls, rest)
        _header, size = entity_reader(cls.__header_schema__)(rest, 0)
        request, _n = entity_reader(cls)(rest, size)
    except (SerialError, ValueError, UnicodeDecodeError, KeyError) as e:  # KeyError: kio's unknown tagged field
        raise ProtocolError(f"malformed Fetch v{h.api_version}: {e}") from None
    req.MergeFrom(_fetch(request, h)[0][1])  # every other field (the topics: none there)
    return SlicedRequest(Decoded(h, request), req)


def encode_fetch_sliced(header: Header, _req: pb.FetchRequest, resp: pb.FetchResponse,
                        slice_size: int = FETCH_ENCODE_SLICE) -> Generator[None, None, bytes]:
    """``encode_answer`` of a Fetch answer, yielding after every ``slice_size`` partitions: the
    response and each topic without partitions written by kio, the partitions spliced in, each
    written by kio."""
    version = header.api_version
    cls = _response_class(FETCH, version)
    topic_cls = _nested(cls, "responses")
    part_cls = _nested(topic_cls, "partitions")
    flexible = bool(cls.__flexible__)
    if _field_plan(cls)[-1][0] != "responses" or _field_plan(topic_cls)[-1][0] != "partitions":
        raise ValueError(f"Fetch v{version}: fields after an array")
    tail = 1 if flexible else 0  # an entity's (empty) tagged fields
    empty = 1 if flexible else 4  # an empty array's count
    values = _fetch_out(None, [pb.FetchResponse(throttle_time_ms=resp.throttle_time_ms, error_code=resp.error_code,
                                                session_id=resp.session_id)])
    head = encode_response(header, build(cls, values))
    cut = len(head) - tail - empty
    n = len(resp.topics)
    parts: list[bytes] = [head[4:cut], _uvarint(n + 1) if flexible else _I32.pack(n)]
    write_topic = entity_writer(topic_cls)
    write_part = entity_writer(part_cls)
    chunk: list[bytes] = []
    todo = slice_size
    for t in resp.topics:
        buf = io.BytesIO()
        write_topic(buf, build(topic_cls, {"topic": t.name, "partitions": []}))
        written = buf.getvalue()
        m = len(t.partitions)
        chunk.append(written[:len(written) - tail - empty])
        chunk.append(_uvarint(m + 1) if flexible else _I32.pack(m))
        for p in t.partitions:
            buf = io.BytesIO()
            write_part(buf, build(part_cls, _fetch_partition_out(p)))
            chunk.append(buf.getvalue())
            todo -= 1
            if todo <= 0:
                todo = slice_size
                parts.append(b"".join(chunk))
                chunk.clear()
                yield
        chunk.append(written[len(written) - tail:])
    parts.append(b"".join(chunk))
    parts.append(head[len(head) - tail:])
    return _framed(parts)


# ------------------------------------------------------------------ requests -> protobuf


Plan = list[tuple[str, Any]]


def to_pb(d: Decoded) -> Plan:
    """The (api, protobuf request) calls that answer ``d`` - one, except LeaveGroup v3+ (one per member)."""
    return _TO_PB[d.header.api_key](d.request, d.header)


def from_pb(d: Decoded, answers: Sequence[Any]) -> Any:
    """The kio response of ``d``'s version from the handlers' answers to ``to_pb(d)``."""
    return response(d, _FROM_PB[d.header.api_key](d.request, answers))


def _s(v: str | None) -> str:
    return v or ""


def _isolation(r: Any) -> Any:
    """READ_UNCOMMITTED (0) or READ_COMMITTED (1); absent in v0 requests."""
    return int(getattr(r, "isolation_level", 0))


def _produce(r: Any, _h: Header) -> Plan:
    if isinstance(r, FastProduce):
        return [("Produce", r.request)]
    return [("Produce", pb.ProduceRequest(
        transactional_id=_s(r.transactional_id), acks=r.acks, timeout_ms=ms(r.timeout),
        topics=[pb.ProduceTopicData(name=t.name, partitions=[
            pb.ProducePartitionData(partition=p.index, records=p.records or b"") for p in t.partition_data])
            for t in r.topic_data]))]


def _produce_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.ProduceResponse = a[0]
    return {"throttle_time": resp.throttle_time_ms, "responses": [
        {"name": t.name, "partition_responses": [
            {"index": p.partition, "error_code": p.error_code, "base_offset": p.base_offset,
             "log_append_time": p.log_append_time_ms, "log_start_offset": p.log_start_offset,
             "error_message": p.error_message or None, "record_errors": ()} for p in t.partitions]}
        for t in resp.topics]}


def _fetch(r: Any, _h: Header) -> Plan:
    req = pb.FetchRequest(
        replica_id=getattr(r, "replica_id", -1), max_wait_ms=ms(r.max_wait), min_bytes=r.min_bytes,
        max_bytes=getattr(r, "max_bytes", 0x7FFFFFFF), isolation_level=_isolation(r),
        topics=[pb.FetchTopic(name=t.topic, partitions=[
            pb.FetchPartition(partition=p.partition, current_leader_epoch=getattr(p, "current_leader_epoch", -1),
                              fetch_offset=p.fetch_offset, log_start_offset=getattr(p, "log_start_offset", -1),
                              partition_max_bytes=p.partition_max_bytes) for p in t.partitions])
            for t in r.topics])
    # Fetch sessions (KIP-227), v7+: session id 0 with epoch -1 (librdkafka, kafka-python) is a
    # sessionless fetch; epoch 0 asks for a session (the Java client), later epochs are incremental.
    if hasattr(r, "session_epoch"):
        req.session_id = r.session_id
        req.session_epoch = r.session_epoch
        for t in r.forgotten_topics_data:
            req.forgotten.add(name=t.topic).partitions.extend(pb.FetchPartition(partition=p) for p in t.partitions)
    return [("Fetch", req)]


def _fetch_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.FetchResponse = a[0]
    return {"throttle_time": resp.throttle_time_ms, "error_code": resp.error_code, "session_id": resp.session_id,
            "responses": [{"topic": t.name, "partitions": [_fetch_partition_out(p) for p in t.partitions]}
                          for t in resp.topics]}


def _fetch_partition_out(p: pb.FetchPartitionResponse) -> dict[str, Any]:
    return {"partition_index": p.partition, "error_code": p.error_code, "high_watermark": p.high_watermark,
            "last_stable_offset": p.last_stable_offset, "log_start_offset": p.log_start_offset,
            "aborted_transactions": tuple({"producer_id": a.producer_id, "first_offset": a.first_offset}
                                          for a in p.aborted_transactions),
            "preferred_read_replica": -1, "records": p.records}


def _list_offsets(r: Any, _h: Header) -> Plan:
    return [("ListOffsets", pb.ListOffsetsRequest(
        replica_id=r.replica_id, isolation_level=_isolation(r),
        topics=[pb.ListOffsetsTopic(name=t.name, partitions=[
            pb.ListOffsetsPartition(partition=p.partition_index,
                                    current_leader_epoch=getattr(p, "current_leader_epoch", -1),
                                    timestamp=p.timestamp) for p in t.partitions]) for t in r.topics]))]


def _list_offsets_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.ListOffsetsResponse = a[0]
    return {"topics": [{"name": t.name, "partitions": [
        {"partition_index": p.partition, "error_code": p.error_code, "timestamp": p.timestamp,
         "offset": p.offset, "leader_epoch": p.leader_epoch} for p in t.partitions]} for t in resp.topics]}


def _metadata(r: Any, h: Header) -> Plan:
    topics = r.topics
    # v0: an empty list means every topic; v1+: null does (an empty list: none, brokers only).
    everything = topics is None or (h.api_version == 0 and not topics)
    return [("Metadata", pb.MetadataRequest(
        topics=[] if everything else [_s(t.name) for t in topics], all_topics=everything,
        allow_auto_topic_creation=getattr(r, "allow_auto_topic_creation", True)))]


def _metadata_head(resp: pb.MetadataResponse) -> dict[str, Any]:
    """A Metadata response's values but its topics."""
    return {"throttle_time": 0, "cluster_id": resp.cluster_id or None, "controller_id": resp.controller_id,
            "brokers": [{"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack or None}
                        for b in resp.brokers]}


def _metadata_topic_out(t: pb.TopicMetadata) -> dict[str, Any]:
    return {"error_code": t.error_code, "name": t.name, "is_internal": t.is_internal,
            "partitions": [{"error_code": p.error_code, "partition_index": p.partition,
                            "leader_id": p.leader, "leader_epoch": p.leader_epoch,
                            "replica_nodes": list(p.replicas), "isr_nodes": list(p.isr),
                            "offline_replicas": list(p.offline_replicas)} for p in t.partitions]}


def _metadata_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.MetadataResponse = a[0]
    return {**_metadata_head(resp), "topics": [_metadata_topic_out(t) for t in resp.topics]}


def _offsets_for_leader_epoch(r: Any, _h: Header) -> Plan:
    return [("OffsetsForLeaderEpoch", pb.OffsetsForLeaderEpochRequest(
        replica_id=getattr(r, "replica_id", -1),
        topics=[pb.OffsetForLeaderTopic(topic=t.topic, partitions=[
            pb.OffsetForLeaderPartition(partition=p.partition, current_leader_epoch=p.current_leader_epoch,
                                        leader_epoch=p.leader_epoch) for p in t.partitions]) for t in r.topics]))]


def _offsets_for_leader_epoch_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.OffsetsForLeaderEpochResponse = a[0]
    return {"topics": [{"topic": t.topic, "partitions": [
        {"error_code": p.error_code, "partition": p.partition, "leader_epoch": p.leader_epoch,
         "end_offset": p.end_offset} for p in t.partitions]} for t in resp.topics]}


def _create_topics(r: Any, _h: Header) -> Plan:
    return [("CreateTopics", pb.CreateTopicsRequest(
        timeout_ms=ms(r.timeout), validate_only=getattr(r, "validate_only", False),
        topics=[pb.CreatableTopic(
            name=t.name, num_partitions=t.num_partitions, replication_factor=t.replication_factor,
            assignments=[pb.ReplicaAssignment(partition=x.partition_index, broker_ids=list(x.broker_ids))
                         for x in t.assignments],
            configs={c.name: c.value for c in t.configs if c.value is not None}) for t in r.topics]))]


def _create_topics_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.CreateTopicsResponse = a[0]
    return {"topics": [{"name": t.name, "error_code": t.error_code, "error_message": t.error_message or None,
                        "num_partitions": t.num_partitions, "replication_factor": t.replication_factor,
                        "configs": None} for t in resp.topics]}


def _delete_topics(r: Any, _h: Header) -> Plan:
    return [("DeleteTopics", pb.DeleteTopicsRequest(topic_names=list(r.topic_names), timeout_ms=ms(r.timeout)))]


def _delete_topics_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.DeleteTopicsResponse = a[0]
    return {"responses": [{"name": t.name, "error_code": t.error_code, "error_message": t.error_message or None}
                          for t in resp.responses]}


def _create_partitions(r: Any, _h: Header) -> Plan:
    # assignments: null (the broker places the new partitions) or one broker list per new partition.
    return [("CreatePartitions", pb.CreatePartitionsRequest(
        timeout_ms=ms(r.timeout), validate_only=r.validate_only, topics=[pb.CreatePartitionsTopic(
            name=t.name, count=t.count, assignments=[pb.CreatePartitionsAssignment(broker_ids=list(a.broker_ids))
                                                     for a in t.assignments or ()]) for t in r.topics]))]


def _create_partitions_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.CreatePartitionsResponse = a[0]
    return {"results": [{"name": t.name, "error_code": t.error_code, "error_message": t.error_message or None}
                        for t in resp.results]}


def _delete_records(r: Any, _h: Header) -> Plan:
    return [("DeleteRecords", pb.DeleteRecordsRequest(timeout_ms=ms(r.timeout), topics=[pb.DeleteRecordsTopic(
        name=t.name, partitions=[pb.DeleteRecordsPartition(partition=p.partition_index, offset=p.offset)
                                 for p in t.partitions]) for t in r.topics]))]


def _delete_records_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.DeleteRecordsResponse = a[0]
    return {"topics": [{"name": t.name, "partitions": [
        {"partition_index": p.partition, "low_watermark": p.low_watermark, "error_code": p.error_code}
        for p in t.partitions]} for t in resp.topics]}


def _describe_configs(r: Any, _h: Header) -> Plan:
    return [("DescribeConfigs", pb.DescribeConfigsRequest(resources=[
        pb.DescribeConfigsResource(resource_type=x.resource_type, resource_name=x.resource_name,
                                   configuration_keys=list(x.configuration_keys or ()))
        for x in r.resources]))]


def _describe_configs_out(r: Any, a: Sequence[Any]) -> dict[str, Any]:
    # Synonyms (v1+) and documentation (v3+) only when the request asks for them, as Kafka.
    resp: pb.DescribeConfigsResponse = a[0]
    synonyms = bool(getattr(r, "include_synonyms", False))
    docs = bool(getattr(r, "include_documentation", False))
    return {"results": [{"error_code": x.error_code, "error_message": x.error_message or None,
                         "resource_type": x.resource_type, "resource_name": x.resource_name,
                         "configs": [{"name": c.name,
                                      "value": None if c.is_sensitive or c.value_null else c.value,
                                      "read_only": c.read_only, "config_source": c.source,
                                      "is_sensitive": c.is_sensitive,
                                      "synonyms": tuple({"name": y.name, "value": None if c.is_sensitive else y.value,
                                                         "source": y.source} for y in c.synonyms) if synonyms else (),
                                      "config_type": c.config_type,
                                      "documentation": (c.documentation or None) if docs else None}
                                     for c in x.configs]}
                        for x in resp.results]}


def _alter_configs(r: Any, _h: Header) -> Plan:
    # Kafka's AlterConfigs replaces a resource's whole set of overrides: what is not listed goes
    # back to its default - a DELETE for every other topic config.
    resources = []
    for x in r.resources:
        given = {c.name: c.value for c in x.configs}
        ops = [pb.AlterableConfig(name=n, op=pb.AlterConfigOp.SET, value=v) for n, v in given.items()
               if v is not None]
        ops += [pb.AlterableConfig(name=n, op=pb.AlterConfigOp.DELETE) for n in sorted(TOPIC_CONFIG_NAMES)
                if given.get(n) is None]
        resources.append(pb.AlterConfigsResource(resource_type=x.resource_type, resource_name=x.resource_name,
                                                 configs=ops))
    return [("AlterConfigs", pb.AlterConfigsRequest(resources=resources, validate_only=r.validate_only))]


def _incremental_alter_configs(r: Any, _h: Header) -> Plan:
    # SET (0) and DELETE (1) are the handler's own operations; APPEND/SUBTRACT (2, 3) reach it as
    # unknown operations and are refused per resource (no list-valued topic configs here).
    return [("AlterConfigs", pb.AlterConfigsRequest(validate_only=r.validate_only, resources=[
        pb.AlterConfigsResource(resource_type=x.resource_type, resource_name=x.resource_name, configs=[
            pb.AlterableConfig(name=c.name, op=c.config_operation, value=_s(c.value)) for c in x.configs])
        for x in r.resources]))]


def _alter_configs_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.AlterConfigsResponse = a[0]
    return {"responses": [{"error_code": x.error_code, "error_message": x.error_message or None,
                           "resource_type": x.resource_type, "resource_name": x.resource_name}
                          for x in resp.responses]}


def _init_producer_id(r: Any, _h: Header) -> Plan:
    return [("InitProducerId", pb.InitProducerIdRequest(
        transactional_id=_s(r.transactional_id), transaction_timeout_ms=ms(r.transaction_timeout),
        producer_id=getattr(r, "producer_id", -1), producer_epoch=getattr(r, "producer_epoch", -1)))]


def _init_producer_id_out(r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.InitProducerIdResponse = a[0]
    return {"error_code": _fenced_as(r, 4, resp.error_code), "producer_id": resp.producer_id,
            "producer_epoch": resp.producer_epoch}


# ------------------------------------------------------------------ transactions (KIP-98)

_PRODUCER_FENCED: Final = 90
_INVALID_PRODUCER_EPOCH: Final = 47


def _fenced_as(r: Any, since: int, code: int) -> int:
    """Kafka 2.8 (KIP-588): PRODUCER_FENCED only from the version that introduced it; older
    clients get INVALID_PRODUCER_EPOCH, which they handle the same way."""
    return _INVALID_PRODUCER_EPOCH if code == _PRODUCER_FENCED and r.__version__ < since else code


def _add_partitions_to_txn(r: Any, _h: Header) -> Plan:
    return [("AddPartitionsToTxn", pb.AddPartitionsToTxnRequest(
        transactional_id=r.v3_and_below_transactional_id, producer_id=r.v3_and_below_producer_id,
        producer_epoch=r.v3_and_below_producer_epoch, topics=[
            pb.AddPartitionsToTxnTopic(name=t.name, partitions=list(t.partitions)) for t in r.v3_and_below_topics]))]


def _add_partitions_to_txn_out(r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.AddPartitionsToTxnResponse = a[0]
    return {"results_by_topic_v3_and_below": [{"name": t.name, "results_by_partition": [
        {"partition_index": p.partition, "partition_error_code": _fenced_as(r, 2, p.error_code)}
        for p in t.partitions]} for t in resp.topics]}


def _add_offsets_to_txn(r: Any, _h: Header) -> Plan:
    return [("AddOffsetsToTxn", pb.AddOffsetsToTxnRequest(
        transactional_id=r.transactional_id, producer_id=r.producer_id, producer_epoch=r.producer_epoch,
        group_id=r.group_id))]


def _end_txn(r: Any, _h: Header) -> Plan:
    return [("EndTxn", pb.EndTxnRequest(transactional_id=r.transactional_id, producer_id=r.producer_id,
                                        producer_epoch=r.producer_epoch, committed=r.committed))]


def _txn_error_out(r: Any, a: Sequence[Any]) -> dict[str, Any]:
    """AddOffsetsToTxn and EndTxn: one error code (PRODUCER_FENCED from v2)."""
    return {"error_code": _fenced_as(r, 2, a[0].error_code)}


def _txn_offset_commit(r: Any, _h: Header) -> Plan:
    return [("TxnOffsetCommit", pb.TxnOffsetCommitRequest(
        transactional_id=r.transactional_id, group_id=r.group_id, producer_id=r.producer_id,
        producer_epoch=r.producer_epoch, generation_id=getattr(r, "generation_id", -1),
        member_id=getattr(r, "member_id", ""), group_instance_id=_instance_id(r), topics=[
            pb.TxnOffsetCommitTopic(name=t.name, partitions=[
                pb.TxnOffsetCommitPartition(partition=p.partition_index, offset=p.committed_offset,
                                            metadata=_s(p.committed_metadata),
                                            leader_epoch=getattr(p, "committed_leader_epoch", -1))
                for p in t.partitions]) for t in r.topics]))]


def _txn_offset_commit_out(r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.TxnOffsetCommitResponse = a[0]
    return {"topics": [{"name": t.name, "partitions": [
        {"partition_index": p.partition, "error_code": _fenced_as(r, 3, p.error_code)} for p in t.partitions]}
        for t in resp.topics]}


# ------------------------------------------------------------------ group APIs


def _find_coordinator(r: Any, _h: Header) -> Plan:
    return [("FindCoordinator", pb.FindCoordinatorRequest(key=r.key, key_type=getattr(r, "key_type", 0)))]


def _find_coordinator_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.FindCoordinatorResponse = a[0]
    found = resp.error_code == 0
    return {"error_code": resp.error_code, "error_message": resp.error_message or None,
            "node_id": resp.node_id if found else -1, "host": resp.host if found else "",
            "port": resp.port if found else -1}


def _join_group(r: Any, h: Header) -> Plan:
    session_ms = ms(r.session_timeout)
    # v0 has no rebalance timeout: Kafka takes the session timeout for it.
    rebalance = getattr(r, "rebalance_timeout", None)
    return [("JoinGroup", pb.JoinGroupRequest(
        group_id=r.group_id, session_timeout_ms=session_ms,
        rebalance_timeout_ms=session_ms if rebalance is None else ms(rebalance), member_id=r.member_id,
        protocol_type=r.protocol_type, client_id=h.client_id, require_known_member_id=h.api_version >= 4,
        group_instance_id=_instance_id(r),
        protocols=[pb.JoinGroupProtocol(name=p.name, metadata=p.metadata) for p in r.protocols]))]


def _instance_id(r: Any) -> str:
    """group.instance.id of JoinGroup v5+, SyncGroup/Heartbeat v3+, OffsetCommit v7+ (KIP-345):
    null (a dynamic member) and absent (older versions) are both empty."""
    return getattr(r, "group_instance_id", None) or ""


def _join_group_out(r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.JoinGroupResponse = a[0]
    return {"error_code": resp.error_code, "generation_id": resp.generation_id,
            "protocol_type": r.protocol_type, "protocol_name": resp.protocol_name, "leader": resp.leader,
            "member_id": resp.member_id,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id or None,
                         "metadata": m.metadata} for m in resp.members]}


def _sync_group(r: Any, _h: Header) -> Plan:
    return [("SyncGroup", pb.SyncGroupRequest(
        group_id=r.group_id, generation_id=r.generation_id, member_id=r.member_id,
        group_instance_id=_instance_id(r),
        assignments=[pb.SyncGroupAssignment(member_id=x.member_id, assignment=x.assignment)
                     for x in r.assignments]))]


def _sync_group_out(r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.SyncGroupResponse = a[0]
    return {"error_code": resp.error_code, "assignment": resp.assignment,
            "protocol_type": getattr(r, "protocol_type", None), "protocol_name": getattr(r, "protocol_name", None)}


def _heartbeat(r: Any, _h: Header) -> Plan:
    return [("Heartbeat", pb.HeartbeatRequest(group_id=r.group_id, generation_id=r.generation_id,
                                              member_id=r.member_id, group_instance_id=_instance_id(r)))]


def _error_only_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    return {"error_code": a[0].error_code}


def _leave_group(r: Any, _h: Header) -> Plan:
    # v3+ names members by member id and/or group.instance.id (an admin removes static members by the latter).
    members = [(m.member_id, _instance_id(m)) for m in r.members] if hasattr(r, "members") else [(r.member_id, "")]
    return [("LeaveGroup", pb.LeaveGroupRequest(group_id=r.group_id, member_id=m, group_instance_id=i))
            for m, i in members]


def _leave_group_out(r: Any, a: Sequence[Any]) -> dict[str, Any]:
    if not hasattr(r, "members"):
        return {"error_code": a[0].error_code}
    return {"error_code": 0, "members": [
        {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "error_code": x.error_code}
        for m, x in zip(r.members, a, strict=True)]}


def _offset_commit(r: Any, _h: Header) -> Plan:
    return [("OffsetCommit", pb.OffsetCommitRequest(
        group_id=r.group_id, generation_id=r.generation_id_or_member_epoch, member_id=r.member_id,
        group_instance_id=_instance_id(r), topics=[pb.OffsetCommitTopic(name=t.name, partitions=[
            pb.OffsetCommitPartition(partition=p.partition_index, offset=p.committed_offset,
                                     metadata=_s(p.committed_metadata)) for p in t.partitions])
            for t in r.topics]))]


def _offset_commit_out(r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.OffsetCommitResponse = a[0]
    if resp.error_code and not resp.topics:
        # A group-level refusal: Kafka says it on every partition of the request.
        return {"topics": [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": resp.error_code} for p in t.partitions]}
            for t in r.topics]}
    return {"topics": [{"name": t.name, "partitions": [
        {"partition_index": p.partition, "error_code": p.error_code or resp.error_code} for p in t.partitions]}
        for t in resp.topics]}


def _offset_fetch(r: Any, _h: Header) -> Plan:
    topics = r.topics
    # null (v2+): every committed offset of the group, as the handler's empty list means.
    return [("OffsetFetch", pb.OffsetFetchRequest(group_id=r.group_id, require_stable=bool(getattr(
        r, "require_stable", False)), topics=[] if topics is None else [
        pb.OffsetFetchTopic(name=t.name, partitions=list(t.partition_indexes)) for t in topics]))]


def _offset_fetch_out(r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.OffsetFetchResponse = a[0]
    if r.topics is not None and not r.topics:
        return {"error_code": resp.error_code, "topics": ()}
    if resp.error_code and r.topics is not None:
        # v1 has no group-level error: Kafka says it on every requested partition (v2+ on both).
        return {"error_code": resp.error_code, "topics": [{"name": t.name, "partitions": [
            {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": resp.error_code}
            for p in t.partition_indexes]} for t in r.topics]}
    return {"error_code": resp.error_code, "topics": [{"name": t.name, "partitions": [
        {"partition_index": p.partition, "committed_offset": p.committed_offset, "committed_leader_epoch": -1,
         "metadata": p.metadata, "error_code": p.error_code} for p in t.partitions]} for t in resp.topics]}


def _list_groups(_r: Any, _h: Header) -> Plan:
    return [("ListGroups", pb.ListGroupsRequest())]


def _list_groups_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.ListGroupsResponse = a[0]
    return {"error_code": resp.error_code, "groups": [{"group_id": g.group_id, "protocol_type": g.protocol_type}
                                                      for g in resp.groups]}


def _delete_groups(r: Any, _h: Header) -> Plan:
    return [("DeleteGroups", pb.DeleteGroupsRequest(groups=list(r.groups_names)))]


def _delete_groups_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.DeleteGroupsResponse = a[0]
    return {"results": [{"group_id": x.group_id, "error_code": x.error_code} for x in resp.results]}


def _offset_delete(r: Any, _h: Header) -> Plan:
    return [("OffsetDelete", pb.OffsetDeleteRequest(group_id=r.group_id, topics=[
        pb.OffsetDeleteTopic(name=t.name, partitions=[p.partition_index for p in t.partitions]) for t in r.topics]))]


def _offset_delete_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.OffsetDeleteResponse = a[0]
    return {"error_code": resp.error_code, "topics": [{"name": t.name, "partitions": [
        {"partition_index": p.partition, "error_code": p.error_code} for p in t.partitions]} for t in resp.topics]}


def _describe_groups(r: Any, _h: Header) -> Plan:
    return [("DescribeGroups", pb.DescribeGroupsRequest(groups=list(r.groups)))]


def _describe_groups_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.DescribeGroupsResponse = a[0]
    return {"groups": [{"error_code": g.error_code, "group_id": g.group_id, "group_state": g.group_state,
                        "protocol_type": g.protocol_type, "protocol_data": g.protocol_data,
                        "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id or None,
                                     "client_id": m.client_id,
                                     "client_host": m.client_host, "member_metadata": m.member_metadata,
                                     "member_assignment": m.member_assignment} for m in g.members]}
                       for g in resp.groups]}


# ------------------------------------------------------------------ elections, reassignments, ACLs, SCRAM users

_MECHANISMS: Final = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}  # Kafka's ScramMechanism bytes
_MECHANISM_TYPES: Final = {v: k for k, v in _MECHANISMS.items()}
# Kafka's AclOperation / AclPermissionType bytes and the authorizer's names; ANY (1) is a filter's
# "anything" (the empty string); UNKNOWN (0) and unknown bytes match nothing and are refused in creations.
_ACL_OPERATIONS: Final = {1: "", 2: "All", 3: "Read", 4: "Write", 5: "Create", 6: "Delete", 7: "Alter",
                          8: "Describe", 9: "ClusterAction", 10: "DescribeConfigs", 11: "AlterConfigs",
                          12: "IdempotentWrite"}
_ACL_OPERATION_TYPES: Final = {v: k for k, v in _ACL_OPERATIONS.items() if v}
_ACL_PERMISSIONS: Final = {1: "", 2: "Deny", 3: "Allow"}
_ACL_PERMISSION_TYPES: Final = {v: k for k, v in _ACL_PERMISSIONS.items() if v}
_ANY: Final = 1  # Kafka's ResourceType.ANY / PatternType.ANY
_LITERAL: Final = 3  # Kafka's PatternType.LITERAL: every binding here
_UNKNOWN_ENUM: Final = -1  # Kafka's UNKNOWN (0) in a request: matches nothing, refused in a creation


def _acl_message(code: int, message: str) -> str | None:
    """Kafka's words where no authorizer is configured (the typed error answer carries none)."""
    return message or ("No Authorizer is configured on the broker" if code == pb.ErrorCode.SECURITY_DISABLED else None)


def _acl_resource_type(kafka: int) -> int:
    """Kafka's ResourceType (TOPIC 2, GROUP 3, CLUSTER 4 as minikafka's) -> AclResourceType."""
    return pb.AclResourceType.ANY_RESOURCE if kafka == _ANY else kafka if kafka > 0 else _UNKNOWN_ENUM


def _acl_pattern_type(kafka: int) -> int:
    return kafka if kafka > 0 else _UNKNOWN_ENUM  # the AclPatternType values are Kafka's


def _acl_filter(resource_type: int, name: str | None, pattern: int, principal: str | None, host: str | None,
                operation: int, permission: int) -> pb.AclFilter:
    return pb.AclFilter(resource_type=_acl_resource_type(resource_type), resource_name=_s(name),  # type: ignore[arg-type]
                        pattern_type=_acl_pattern_type(pattern), principal=_s(principal), host=_s(host),  # type: ignore[arg-type]
                        operation=_ACL_OPERATIONS.get(operation, "Unknown"),
                        permission_type=_ACL_PERMISSIONS.get(permission, "Unknown"))


def _acl_binding_out(b: pb.AclBinding) -> dict[str, Any]:
    return {"resource_type": int(b.resource_type), "resource_name": b.resource_name, "pattern_type": _LITERAL,
            "principal": b.principal, "host": b.host, "operation": _ACL_OPERATION_TYPES.get(b.operation, 0),
            "permission_type": _ACL_PERMISSION_TYPES.get(b.permission_type, 0)}


def _create_acls(r: Any, _h: Header) -> Plan:
    return [("CreateAcls", pb.CreateAclsRequest(creations=[pb.AclBinding(
        resource_type=_acl_resource_type(c.resource_type), resource_name=c.resource_name,  # type: ignore[arg-type]
        pattern_type=_acl_pattern_type(c.resource_pattern_type), principal=c.principal, host=c.host,  # type: ignore[arg-type]
        operation=_ACL_OPERATIONS.get(c.operation, "Unknown"),
        permission_type=_ACL_PERMISSIONS.get(c.permission_type, "Unknown")) for c in r.creations]))]


def _create_acls_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.CreateAclsResponse = a[0]
    return {"results": [{"error_code": x.error_code, "error_message": _acl_message(x.error_code, x.error_message)}
                        for x in resp.results]}


def _describe_acls(r: Any, _h: Header) -> Plan:
    return [("DescribeAcls", pb.DescribeAclsRequest(filter=_acl_filter(
        r.resource_type_filter, r.resource_name_filter, r.pattern_type_filter, r.principal_filter, r.host_filter,
        r.operation, r.permission_type)))]


def _describe_acls_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.DescribeAclsResponse = a[0]
    resources: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for b in resp.acls:  # Kafka's answer: the bindings grouped by resource
        resources.setdefault((int(b.resource_type), b.resource_name), []).append(_acl_binding_out(b))
    return {"error_code": resp.error_code, "error_message": _acl_message(resp.error_code, resp.error_message),
            "resources": [
        {"resource_type": t, "resource_name": n, "pattern_type": _LITERAL, "acls": acls}
        for (t, n), acls in resources.items()]}


def _delete_acls(r: Any, _h: Header) -> Plan:
    return [("DeleteAcls", pb.DeleteAclsRequest(filters=[_acl_filter(
        f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter, f.principal_filter, f.host_filter,
        f.operation, f.permission_type) for f in r.filters]))]


def _delete_acls_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.DeleteAclsResponse = a[0]
    return {"filter_results": [{"error_code": x.error_code, "error_message": _acl_message(x.error_code, x.error_message),
                                "matching_acls": [{"error_code": 0, "error_message": None, **_acl_binding_out(b)}
                                                  for b in x.matching_acls]} for x in resp.filter_results]}


def _describe_user_scram_credentials(r: Any, _h: Header) -> Plan:
    # null and empty both mean every user, as Kafka reads them.
    return [("DescribeUserScramCredentials", pb.DescribeUserScramCredentialsRequest(
        users=[u.name for u in r.users or ()]))]


def _describe_user_scram_credentials_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.DescribeUserScramCredentialsResponse = a[0]
    return {"error_code": resp.error_code, "error_message": resp.error_message or None, "results": [
        {"user": x.user, "error_code": x.error_code, "error_message": x.error_message or None,
         "credential_infos": [{"mechanism": _MECHANISM_TYPES.get(x.mechanism, 0), "iterations": x.iterations}]
         if x.mechanism else []} for x in resp.results]}


def _alter_user_scram_credentials(r: Any, _h: Header) -> Plan:
    return [("AlterUserScramCredentials", pb.AlterUserScramCredentialsRequest(
        deletions=[pb.ScramCredentialDeletion(name=d.name, mechanism=_MECHANISMS.get(d.mechanism, "UNKNOWN"))
                   for d in r.deletions],
        upsertions=[pb.ScramCredentialUpsertion(name=u.name, mechanism=_MECHANISMS.get(u.mechanism, "UNKNOWN"),
                                                iterations=u.iterations, salt=u.salt,
                                                salted_password=u.salted_password) for u in r.upsertions]))]


def _alter_user_scram_credentials_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.AlterUserScramCredentialsResponse = a[0]
    results: dict[str, pb.UserResult] = {}
    for x in resp.results:  # Kafka answers once per user: its first refusal, if any
        if x.user not in results or (x.error_code and not results[x.user].error_code):
            results[x.user] = x
    return {"results": [{"user": x.user, "error_code": x.error_code, "error_message": x.error_message or None}
                        for x in results.values()]}


def _by_topic(results: Sequence[pb.PartitionResult]) -> dict[str, list[pb.PartitionResult]]:
    out: dict[str, list[pb.PartitionResult]] = {}
    for p in results:
        out.setdefault(p.topic_name, []).append(p)
    return out


def _elect_leaders(r: Any, _h: Header) -> Plan:
    if r.topic_partitions is not None and not r.topic_partitions:
        return []  # Kafka's empty (not null) list elects nothing: answered with no results
    return [("ElectLeaders", pb.ElectLeadersRequest(
        timeout_ms=ms(r.timeout), election_type=int(getattr(r, "election_type", 0)),  # type: ignore[arg-type]
        partitions=[pb.TopicPartitionRef(topic_name=t.topic, partition_index=p)
                    for t in r.topic_partitions or () for p in t.partitions]))]


def _elect_leaders_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp = a[0] if a else pb.ElectLeadersResponse()
    return {"error_code": resp.error_code, "replica_election_results": [
        {"topic": t, "partition_result": [{"partition_id": p.partition_index, "error_code": p.error_code,
                                           "error_message": p.error_message or None} for p in ps]}
        for t, ps in _by_topic(resp.results).items()]}


def _alter_partition_reassignments(r: Any, _h: Header) -> Plan:
    return [("AlterPartitionReassignments", pb.AlterPartitionReassignmentsRequest(
        timeout_ms=ms(r.timeout), partitions=[pb.ReassignablePartition(
            topic_name=t.name, partition_index=p.partition_index, replicas=list(p.replicas or ()),
            cancel=p.replicas is None) for t in r.topics for p in t.partitions]))]


def _alter_partition_reassignments_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.AlterPartitionReassignmentsResponse = a[0]
    return {"error_code": resp.error_code, "error_message": resp.error_message or None, "responses": [
        {"name": t, "partitions": [{"partition_index": p.partition_index, "error_code": p.error_code,
                                    "error_message": p.error_message or None} for p in ps]}
        for t, ps in _by_topic(resp.results).items()]}


def _list_partition_reassignments(_r: Any, _h: Header) -> Plan:
    return [("ListPartitionReassignments", pb.ListPartitionReassignmentsRequest())]


def _list_partition_reassignments_out(r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.ListPartitionReassignmentsResponse = a[0]
    wanted = None if r.topics is None else {(t.name, p) for t in r.topics for p in t.partition_indexes}
    topics: dict[str, list[dict[str, Any]]] = {}
    for x in resp.reassignments:  # Kafka lists the requested partitions that are being reassigned
        if wanted is None or (x.topic_name, x.partition_index) in wanted:
            topics.setdefault(x.topic_name, []).append({
                "partition_index": x.partition_index, "replicas": list(x.current_replicas or x.replicas),
                "adding_replicas": list(x.adding_replicas), "removing_replicas": list(x.removing_replicas)})
    return {"error_code": resp.error_code, "error_message": resp.error_message or None,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}


# ------------------------------------------------------------------ DescribeCluster, DescribeLogDirs, DescribeProducers


def _describe_cluster(r: Any, _h: Header) -> Plan:
    return [("DescribeCluster", pb.DescribeClusterRequest(
        include_cluster_authorized_operations=r.include_cluster_authorized_operations))]


def _describe_cluster_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.DescribeClusterResponse = a[0]
    return {"error_code": resp.error_code, "error_message": resp.error_message or None,
            "cluster_id": resp.cluster_id, "controller_id": resp.controller_id,
            "cluster_authorized_operations": resp.cluster_authorized_operations,
            "brokers": [{"broker_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack or None}
                        for b in resp.brokers]}


def _describe_log_dirs(r: Any, _h: Header) -> Plan:
    # A null topic list (Kafka's isAllTopicPartitions) asks for every partition of the broker.
    if r.topics is None:
        return [("DescribeLogDirs", pb.DescribeLogDirsRequest(all_partitions=True))]
    return [("DescribeLogDirs", pb.DescribeLogDirsRequest(topics=[
        pb.DescribeLogDirsTopic(topic=t.topic, partitions=list(t.partitions)) for t in r.topics]))]


def _describe_log_dirs_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.DescribeLogDirsResponse = a[0]
    # v1-v2 have no top-level error: a refused request is an empty list there (Kafka 2.8's answer).
    return {"error_code": resp.error_code, "results": [
        {"error_code": d.error_code, "log_dir": d.log_dir, "total_bytes": d.total_bytes,
         "usable_bytes": d.usable_bytes, "topics": [{"name": t.name, "partitions": [
             {"partition_index": p.partition, "partition_size": p.size, "offset_lag": p.offset_lag,
              "is_future_key": p.is_future} for p in t.partitions]} for t in d.topics]}
        for d in resp.results]}


def _describe_producers(r: Any, _h: Header) -> Plan:
    return [("DescribeProducers", pb.DescribeProducersRequest(topics=[
        pb.DescribeProducersTopic(name=t.name, partitions=list(t.partition_indexes)) for t in r.topics]))]


def _describe_producers_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.DescribeProducersResponse = a[0]
    return {"topics": [{"name": t.name, "partitions": [
        {"partition_index": p.partition, "error_code": p.error_code, "error_message": p.error_message or None,
         "active_producers": [{"producer_id": x.producer_id, "producer_epoch": x.producer_epoch,
                               "last_sequence": x.last_sequence, "last_timestamp": x.last_timestamp,
                               "coordinator_epoch": x.coordinator_epoch,
                               "current_txn_start_offset": x.current_txn_start_offset}
                              for x in p.active_producers]} for p in t.partitions]} for t in resp.topics]}


def _write_txn_markers(r: Any, _h: Header) -> Plan:
    return [("WriteTxnMarkers", pb.WriteTxnMarkersRequest(markers=[pb.WritableTxnMarker(
        producer_id=m.producer_id, producer_epoch=m.producer_epoch, transaction_result=m.transaction_result,
        coordinator_epoch=m.coordinator_epoch, topics=[
            pb.WritableTxnMarkerTopic(name=t.name, partition_indexes=list(t.partition_indexes)) for t in m.topics])
        for m in r.markers]))]


def _write_txn_markers_out(_r: Any, a: Sequence[Any]) -> dict[str, Any]:
    resp: pb.WriteTxnMarkersResponse = a[0]
    return {"markers": [{"producer_id": m.producer_id, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": p.error_code}
                                        for p in t.partitions]} for t in m.topics]} for m in resp.markers]}


_TO_PB: Final[dict[int, Callable[[Any, Header], Plan]]] = {
    21: _delete_records, 37: _create_partitions,
    60: _describe_cluster, 35: _describe_log_dirs, 61: _describe_producers, 27: _write_txn_markers,
    24: _add_partitions_to_txn, 25: _add_offsets_to_txn, 26: _end_txn, 28: _txn_offset_commit,
    0: _produce, 1: _fetch, 2: _list_offsets, 3: _metadata, 8: _offset_commit, 9: _offset_fetch,
    10: _find_coordinator, 11: _join_group, 12: _heartbeat, 13: _leave_group, 14: _sync_group,
    15: _describe_groups, 16: _list_groups, 19: _create_topics, 20: _delete_topics, 22: _init_producer_id,
    23: _offsets_for_leader_epoch, 32: _describe_configs, 33: _alter_configs, 44: _incremental_alter_configs,
    42: _delete_groups, 47: _offset_delete,
    29: _describe_acls, 30: _create_acls, 31: _delete_acls, 43: _elect_leaders, 45: _alter_partition_reassignments,
    46: _list_partition_reassignments, 50: _describe_user_scram_credentials, 51: _alter_user_scram_credentials,
}
_FROM_PB: Final[dict[int, Callable[[Any, Sequence[Any]], dict[str, Any]]]] = {
    21: _delete_records_out, 37: _create_partitions_out,
    60: _describe_cluster_out, 35: _describe_log_dirs_out, 61: _describe_producers_out,
    27: _write_txn_markers_out,
    24: _add_partitions_to_txn_out, 25: _txn_error_out, 26: _txn_error_out, 28: _txn_offset_commit_out,
    0: _produce_out, 1: _fetch_out, 2: _list_offsets_out, 3: _metadata_out, 8: _offset_commit_out,
    9: _offset_fetch_out, 10: _find_coordinator_out, 11: _join_group_out, 12: _error_only_out,
    13: _leave_group_out, 14: _sync_group_out, 15: _describe_groups_out, 16: _list_groups_out,
    19: _create_topics_out, 20: _delete_topics_out, 22: _init_producer_id_out, 23: _offsets_for_leader_epoch_out,
    32: _describe_configs_out, 33: _alter_configs_out, 44: _alter_configs_out,
    42: _delete_groups_out, 47: _offset_delete_out,
    29: _describe_acls_out, 30: _create_acls_out, 31: _delete_acls_out, 43: _elect_leaders_out,
    45: _alter_partition_reassignments_out, 46: _list_partition_reassignments_out,
    50: _describe_user_scram_credentials_out, 51: _alter_user_scram_credentials_out,
}
