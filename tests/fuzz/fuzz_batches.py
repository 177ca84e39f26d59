"""Hostile record batches for the fuzz suite: valid batches from the project's own encoder, then
mutated with the CRC recomputed (so that a mutation tests the broker's validation, not its CRC
check), plus hand-built record sections with broken framing, malformed compressed payloads and
compression bombs.

Every strategy yields a ``Payload``: the bytes sent in ``ProducePartitionData.records`` and a
label saying how they were made (hypothesis prints the label, so a failing example can be rebuilt
by hand from it).
"""

from __future__ import annotations

import functools
import gzip
import struct
import time
from collections.abc import Callable, Sequence

import crc32c as _crc32c
import zstandard
from hypothesis import strategies as st

from proto.record_batch import Header, Record, encode_batch, encode_record_body, encode_varint

# Kafka's v2 RecordBatch header (docs/record-batch.md): what each offset holds.
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = 61
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LOG_OVERHEAD = 12
FIELDS = ("base_offset", "batch_length", "partition_leader_epoch", "magic", "crc", "attributes",
          "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
          "base_sequence", "record_count")
FIELD_INDEX = {name: i for i, name in enumerate(FIELDS)}

CODEC_NONE, CODEC_GZIP, CODEC_ZSTD = 0, 1, 4
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

INT16 = (-(1 << 15), (1 << 15) - 1)
INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)

BOMB_BYTES = 64 * 1024 * 1024  # what a bomb decompresses to


class Payload:
    """Bytes for one partition of a Produce request, and how they were made.

    ``must_accept``: a correct broker appends it (one well-formed batch, no producer id);
    ``must_refuse``: a correct broker refuses it (Kafka's LogValidator rules, issue 12);
    neither: either answer is fine as long as it is typed and the cluster stays healthy.
    ``framed``: the bytes are whole batches whose lengths agree with the buffer (Kafka trims a
    partial batch at the end of a produce instead of refusing it, so those are never must_refuse).
    (A plain class, not a dataclass, so that hypothesis prints the short ``repr`` below.)"""

    __slots__ = ("data", "framed", "label", "must_accept", "must_refuse")

    def __init__(self, label: str, data: bytes, must_accept: bool = False, must_refuse: bool = False,
                 framed: bool = True) -> None:
        self.label = label
        self.data = data
        self.must_accept = must_accept
        self.must_refuse = must_refuse
        self.framed = framed

    def __repr__(self) -> str:
        head = self.data[:48].hex()
        more = "..." if len(self.data) > 48 else ""
        return f"Payload({self.label!r}, {len(self.data)} bytes: {head}{more})"


def now_ms() -> int:
    return int(time.time() * 1000)


# ------------------------------------------------------------------ byte-level helpers


def crc32c(data: bytes | bytearray | memoryview) -> int:
    return int(_crc32c.crc32c(data))


def fix_crc(batch: bytes | bytearray) -> bytes:
    """Recompute the CRC-32C of a batch that starts at position 0 (bytes 21..end, stored at 17)."""
    b = bytearray(batch)
    if len(b) >= ATTRIBUTES_OFFSET:
        struct.pack_into(">I", b, CRC_OFFSET, crc32c(b[ATTRIBUTES_OFFSET:]))
    return bytes(b)


def fix_length(batch: bytes | bytearray) -> bytes:
    """Make batch_length agree with the buffer (every byte after the length field)."""
    b = bytearray(batch)
    struct.pack_into(">i", b, 8, len(b) - LOG_OVERHEAD)
    return bytes(b)


def set_fields(batch: bytes, **values: int) -> bytes:
    """Rewrite header fields of a (whole) batch, then recompute its CRC."""
    fields = list(HEADER.unpack_from(batch, 0))
    for name, value in values.items():
        fields[FIELD_INDEX[name]] = value
    return fix_crc(HEADER.pack(*fields) + batch[HEADER_SIZE:])


def frame(payload: bytes, *, record_count: int, last_offset_delta: int | None = None, attributes: int = 0,
          base_timestamp: int | None = None, max_timestamp: int | None = None, producer_id: int = -1,
          producer_epoch: int = -1, base_sequence: int = -1, magic: int = 2) -> bytes:
    """A batch around an arbitrary records section (already compressed if the codec says so)."""
    ts = now_ms() if base_timestamp is None else base_timestamp
    head = HEADER.pack(0, 0, -1, magic, 0, attributes,
                       record_count - 1 if last_offset_delta is None else last_offset_delta,
                       ts, ts if max_timestamp is None else max_timestamp, producer_id, producer_epoch,
                       base_sequence, record_count)
    return fix_crc(fix_length(head + payload))


def compress(codec: int, data: bytes) -> bytes:
    if codec == CODEC_GZIP:
        return gzip.compress(data, compresslevel=1, mtime=0)
    if codec == CODEC_ZSTD:
        return bytes(zstandard.ZstdCompressor(level=1).compress(data))
    return data


def valid_batch_bytes(values: Sequence[bytes | None], *, keys: Sequence[bytes | None] | None = None,
                      headers: Sequence[tuple[Header, ...]] | None = None, compression: int = CODEC_NONE,
                      producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                      timestamp: int | None = None) -> bytes:
    """A well-formed batch from the project's encoder (what a correct producer sends)."""
    ts = now_ms() if timestamp is None else timestamp
    records = [Record(value=v, key=None if keys is None else keys[i], headers=() if headers is None else headers[i],
                      timestamp=ts + i) for i, v in enumerate(values)]
    return encode_batch(records, compression=compression, producer_id=producer_id, producer_epoch=producer_epoch,
                        base_sequence=base_sequence)


def records_section(batch: bytes) -> bytes:
    return batch[HEADER_SIZE:]


# ------------------------------------------------------------------ compression bombs


@functools.cache
def zstd_bomb() -> bytes:
    """One well-framed record whose value is 64 MiB of zeros, zstd-compressed (a few KB)."""
    return bytes(zstandard.ZstdCompressor(level=3).compress(encode_record_body(0, 0, None, bytes(BOMB_BYTES))))


@functools.cache
def gzip_bomb() -> bytes:
    """The same record gzip-compressed (~64 KB)."""
    return gzip.compress(encode_record_body(0, 0, None, bytes(BOMB_BYTES)), compresslevel=9, mtime=0)


@functools.cache
def zstd_zero_bomb() -> bytes:
    """64 MiB of zeros (not even records) zstd-compressed."""
    return bytes(zstandard.ZstdCompressor(level=3).compress(bytes(BOMB_BYTES)))


def bomb_batch(kind: str) -> bytes:
    if kind == "zstd-record":
        return frame(zstd_bomb(), record_count=1, attributes=CODEC_ZSTD)
    if kind == "gzip-record":
        return frame(gzip_bomb(), record_count=1, attributes=CODEC_GZIP)
    if kind == "zstd-zeros":
        return frame(zstd_zero_bomb(), record_count=1, attributes=CODEC_ZSTD)
    raise ValueError(kind)


BOMB_KINDS = ("zstd-record", "gzip-record", "zstd-zeros")

# ------------------------------------------------------------------ hand-built record sections

# How one record of a hand-built section is broken (None: not at all).
RECORD_FAULTS = (
    "varint-too-long",        # the record length is an 11-byte varint
    "length-negative",        # record length -5
    "length-past-end",        # record length 1000 bytes more than there is
    "length-short",           # record length 3 bytes less than its fields
    "key-length-negative",    # key length -7 (only -1 means null)
    "key-length-past-end",
    "value-length-past-end",
    "value-length-negative",
    "headers-count-huge",     # 2**31-1 headers
    "headers-count-negative",
    "header-key-null",        # header key length -1
    "offset-delta-wrong",     # the record says offset delta 7
    "offset-delta-negative",
    "timestamp-delta-huge",   # 2**62 ms after the base timestamp
    "timestamp-delta-negative",
    "attributes-nonzero",     # record attributes byte 0xFF
    "truncated-fields",       # the record stops after its attributes byte
)


# Faults a correct broker must refuse (record attributes are unused, so a non-zero byte may pass).
REFUSED_FAULTS = frozenset(RECORD_FAULTS) - {"attributes-nonzero"}


def hostile_record(i: int, fault: str | None, value: bytes, ts_delta: int = 0) -> bytes:
    """Record ``i`` of a section, with ``fault`` applied."""
    key = b"k%d" % i
    attrs = b"\xff" if fault == "attributes-nonzero" else b"\x00"
    if fault == "timestamp-delta-huge":
        ts_delta = 1 << 62
    elif fault == "timestamp-delta-negative":
        ts_delta = -(1 << 42)  # before 1970: a negative timestamp
    off = 7 if fault == "offset-delta-wrong" else (-1 if fault == "offset-delta-negative" else i)
    key_len = {"key-length-negative": -7, "key-length-past-end": 1000}.get(fault or "", len(key))
    value_len = {"value-length-past-end": 5000, "value-length-negative": -9}.get(fault or "", len(value))
    n_headers = {"headers-count-huge": (1 << 31) - 1, "headers-count-negative": -3,
                 "header-key-null": 1}.get(fault or "", 0)
    body = attrs + encode_varint(ts_delta) + encode_varint(off)
    if fault != "truncated-fields":
        body += encode_varint(key_len) + key + encode_varint(value_len) + value + encode_varint(n_headers)
        if fault == "header-key-null":
            body += encode_varint(-1) + encode_varint(-1)
    length = len(body)
    if fault == "varint-too-long":
        return b"\xff" * 10 + b"\x01" + body
    if fault == "length-negative":
        length = -5
    elif fault == "length-past-end":
        length += 1000
    elif fault == "length-short":
        length -= 3
    return encode_varint(length) + body


@st.composite
def hostile_section_batch(draw: st.DrawFn) -> Payload:
    """A batch whose records section was written by hand, with one fault in one record, or a
    record count that disagrees with the records, or bytes after the last record."""
    n = draw(st.integers(1, 4))
    faulty = draw(st.integers(0, n - 1))
    fault = draw(st.sampled_from((*RECORD_FAULTS, None)))
    values = [draw(st.binary(max_size=24)) for _ in range(n)]
    section = b"".join(hostile_record(i, fault if i == faulty else None, values[i], ts_delta=i) for i in range(n))
    trailing = draw(st.sampled_from([b"", b"", b"\x00", b"\x02\x00", b"garbage-after-the-records"]))
    section += trailing
    count = draw(st.sampled_from([n, n, n + 1, n - 1, 0, -1, (1 << 31) - 1]))
    delta = draw(st.sampled_from(["count-1", "count-1", "n-1", "n+5", "zero"]))
    last_delta = {"count-1": count - 1, "n-1": n - 1, "n+5": n + 5, "zero": 0}[delta]
    codec = draw(st.sampled_from([CODEC_NONE, CODEC_NONE, CODEC_GZIP, CODEC_ZSTD]))
    ts = now_ms()
    data = frame(compress(codec, section), record_count=count, last_offset_delta=last_delta, attributes=codec,
                 base_timestamp=ts, max_timestamp=ts + n - 1)
    label = (f"hand-built section: {n} records, fault {fault} in record {faulty}, trailing {trailing!r}, "
             f"record_count {count}, last_offset_delta {last_delta}, codec {codec}")
    consistent = count == n and last_delta == n - 1 and not trailing
    return Payload(label, data, must_accept=consistent and fault is None,
                   must_refuse=not consistent or fault in REFUSED_FAULTS)


# ------------------------------------------------------------------ strategies


@st.composite
def valid_batches(draw: st.DrawFn) -> Payload:
    """A batch the project's Producer could have written: keys, headers, gzip/zstd, idempotent fields."""
    n = draw(st.integers(1, 6))
    values = [draw(st.none() | st.binary(max_size=40)) for _ in range(n)]
    keys = [draw(st.none() | st.binary(max_size=12)) for _ in range(n)]
    headers = [tuple(Header(draw(st.text(max_size=6)), draw(st.none() | st.binary(max_size=6)))
                     for _ in range(draw(st.integers(0, 2)))) for _ in range(n)]
    codec = draw(st.sampled_from([CODEC_NONE, CODEC_GZIP, CODEC_ZSTD]))
    idempotent = draw(st.booleans())
    pid, epoch, seq = -1, -1, -1
    if idempotent:
        # Producer ids are allocated from 0 upwards: small ids are likely real, huge ones never are.
        pid = draw(st.sampled_from([0, 1, 2, 3, 1 << 40, INT64[1]]))
        epoch = draw(st.sampled_from([0, 0, 1, INT16[1]]))
        seq = draw(st.sampled_from([0, 0, 5, INT32[1] - 2]))
    data = valid_batch_bytes(values, keys=keys, headers=headers, compression=codec, producer_id=pid,
                             producer_epoch=epoch, base_sequence=seq)
    return Payload(f"valid batch: {n} records, codec {codec}, producer ({pid}, {epoch}, {seq})", data,
                   must_accept=not idempotent)


def _edge_ints(lo: int, hi: int, *extra: int) -> st.SearchStrategy[int]:
    edges = sorted({lo, lo + 1, -2, -1, 0, 1, 2, hi - 1, hi, *[e for e in extra if lo <= e <= hi]})
    return st.sampled_from(edges) | st.integers(lo, hi)


HEADER_FIELD_VALUES: dict[str, Callable[[int], st.SearchStrategy[int]]] = {
    # Each takes the batch's record count (for "near the truth" values).
    "base_offset": lambda n: _edge_ints(*INT64, 1 << 62, 100),
    "batch_length": lambda n: _edge_ints(*INT32, 48, 49, 60, 61),
    "partition_leader_epoch": lambda n: _edge_ints(*INT32, 1000),
    "magic": lambda n: st.sampled_from([0, 1, 3, 127, -1, -128]),
    "attributes": lambda n: st.sampled_from([TRANSACTIONAL_BIT, CONTROL_BIT, CONTROL_BIT | TRANSACTIONAL_BIT,
                                             TIMESTAMP_TYPE_BIT, 0x40, 0x80, -1, INT16[1]])
    | st.integers(0, 7) | st.integers(*INT16),
    "last_offset_delta": lambda n: _edge_ints(*INT32, n, n - 2, n + 5, INT32[1] - 1),
    "base_timestamp": lambda n: _edge_ints(*INT64, -2, 1 << 62, now_ms() + 10 ** 12),
    "max_timestamp": lambda n: _edge_ints(*INT64, -2, 1 << 62, now_ms() - 10 ** 12),
    "producer_id": lambda n: _edge_ints(*INT64, 1 << 40),
    "producer_epoch": lambda n: _edge_ints(*INT16),
    "base_sequence": lambda n: _edge_ints(*INT32, INT32[1] - n + 2),
    "record_count": lambda n: _edge_ints(*INT32, n + 1, n - 1, 10 ** 6),
}
MUTABLE_FIELDS = tuple(HEADER_FIELD_VALUES)


@st.composite
def header_mutations(draw: st.DrawFn) -> Payload:
    """A valid batch with one to three header fields rewritten, CRC recomputed."""
    base = draw(valid_batches())
    n = HEADER.unpack_from(base.data, 0)[FIELD_INDEX["record_count"]]
    names = draw(st.lists(st.sampled_from(MUTABLE_FIELDS), min_size=1, max_size=3, unique=True))
    changes = {name: draw(HEADER_FIELD_VALUES[name](n)) for name in names}
    if "attributes" in changes and draw(st.booleans()):
        # Keep the real codec bits under the flags most of the time, so the flags are what is tested.
        changes["attributes"] = (changes["attributes"] & ~0x07) | (base.data[ATTRIBUTES_OFFSET + 1] & 0x07)
    data = set_fields(base.data, **changes)
    old = dict(zip(FIELDS, HEADER.unpack_from(base.data, 0), strict=True))
    new = dict(zip(FIELDS, HEADER.unpack_from(data, 0), strict=True))
    refuse = (new["magic"] != 2 or new["batch_length"] != old["batch_length"]
              or new["attributes"] & CONTROL_BIT  # control batches come only from WriteTxnMarkers
              or (new["attributes"] & TRANSACTIONAL_BIT and new["producer_id"] < 0)
              or (new["attributes"] & 0x07) != (old["attributes"] & 0x07)
              or new["last_offset_delta"] != old["last_offset_delta"] or new["record_count"] != old["record_count"])
    return Payload(f"{base.label}; header {changes}", data, must_refuse=bool(refuse),
                   framed=new["batch_length"] == old["batch_length"])


@st.composite
def byte_flips(draw: st.DrawFn) -> Payload:
    """Random bytes of the records section (compressed or not) changed, CRC recomputed."""
    base = draw(valid_batches())
    b = bytearray(base.data)
    body = len(b) - HEADER_SIZE
    flips = draw(st.lists(st.tuples(st.integers(0, max(body - 1, 0)), st.integers(1, 255)), min_size=1, max_size=4))
    for pos, x in flips:
        if body:
            b[HEADER_SIZE + pos] ^= x
    return Payload(f"{base.label}; records section xor {flips}", fix_crc(b))


@st.composite
def truncations(draw: st.DrawFn) -> Payload:
    """A batch cut short: with batch_length fixed up (records missing) or not (framing broken)."""
    base = draw(valid_batches())
    cut = draw(st.integers(1, len(base.data) - 1))
    mode = draw(st.sampled_from(["length-fixed", "length-kept", "crc-not-fixed"]))
    data = base.data[:cut]
    if mode == "length-fixed" and cut >= HEADER_SIZE:
        data = fix_crc(fix_length(data))
    elif mode == "length-kept":
        data = fix_crc(data)
    framed = mode == "length-fixed" and cut >= HEADER_SIZE
    return Payload(f"{base.label}; truncated to {cut} bytes ({mode})", data, must_refuse=framed, framed=framed)


@st.composite
def trailing_bytes(draw: st.DrawFn) -> Payload:
    """Bytes after the last record, inside the batch (length and CRC agree) - or after the batch."""
    base = draw(valid_batches())
    extra = draw(st.binary(min_size=1, max_size=64))
    inside = draw(st.booleans())
    data = fix_crc(fix_length(base.data + extra)) if inside else base.data + extra
    where = "inside the batch" if inside else "after the batch"
    # Inside an uncompressed batch: bytes after the last record (refused). After the batch: a partial
    # batch, which Kafka trims; after a compressed stream: the codec may ignore them.
    uncompressed = base.data[ATTRIBUTES_OFFSET + 1] & 0x07 == CODEC_NONE
    return Payload(f"{base.label}; {len(extra)} trailing bytes {where}", data, must_refuse=inside and uncompressed,
                   framed=inside)


@st.composite
def malformed_compressed(draw: st.DrawFn) -> Payload:
    """A batch that says gzip/zstd (or an unknown codec) over a payload that is not that."""
    codec = draw(st.sampled_from([CODEC_GZIP, CODEC_ZSTD, 2, 3, 5, 6, 7]))
    inner = encode_record_body(0, 0, None, b"hello")
    kind = draw(st.sampled_from(["raw", "truncated", "other-codec", "garbage", "empty", "magic-then-garbage",
                                 "two-frames"]))
    if kind == "raw":
        payload = inner
    elif kind == "truncated":
        full = compress(codec if codec in (CODEC_GZIP, CODEC_ZSTD) else CODEC_ZSTD, inner * 50)
        payload = full[:draw(st.integers(1, max(1, len(full) - 1)))]
    elif kind == "other-codec":
        payload = compress(CODEC_ZSTD if codec == CODEC_GZIP else CODEC_GZIP, inner)
    elif kind == "garbage":
        payload = draw(st.binary(min_size=1, max_size=200))
    elif kind == "empty":
        payload = b""
    elif kind == "magic-then-garbage":
        payload = (b"\x1f\x8b\x08\x00" if codec == CODEC_GZIP else b"\x28\xb5\x2f\xfd") + draw(st.binary(max_size=64))
    else:
        payload = compress(codec if codec in (CODEC_GZIP, CODEC_ZSTD) else CODEC_GZIP, inner) * 2
    return Payload(f"codec {codec} over a {kind} payload", frame(payload, record_count=1, attributes=codec),
                   must_refuse=kind != "two-frames" or codec not in (CODEC_GZIP, CODEC_ZSTD))


@st.composite
def bombs(draw: st.DrawFn) -> Payload:
    kind = draw(st.sampled_from(BOMB_KINDS))
    return Payload(f"compression bomb {kind} ({BOMB_BYTES} bytes decompressed)", bomb_batch(kind), must_refuse=True)


def garbage() -> st.SearchStrategy[Payload]:
    def fixed(b: bytes) -> Payload:
        data = fix_crc(fix_length(b))
        return Payload("random bytes, length and CRC fixed", data, must_refuse=data[16] != 2)

    # Alone in a partition, bytes that hold no batch are refused (there is nothing to append).
    return st.one_of(
        st.just(Payload("empty bytes", b"", must_refuse=True, framed=False)),
        st.binary(min_size=1, max_size=HEADER_SIZE - 1).map(
            lambda b: Payload("random bytes", b, must_refuse=True, framed=False)),
        st.binary(min_size=HEADER_SIZE, max_size=300).map(lambda b: Payload("random bytes", b, framed=False)),
        st.binary(min_size=HEADER_SIZE, max_size=300).map(fixed),
        st.integers(0, 60).map(lambda k: Payload(f"{k} zero bytes", bytes(k), must_refuse=True, framed=False)),
    )


def single_batches() -> st.SearchStrategy[Payload]:
    return st.one_of(header_mutations(), byte_flips(), truncations(), trailing_bytes(), hostile_section_batch(),
                     malformed_compressed(), garbage(), valid_batches())


@st.composite
def concatenations(draw: st.DrawFn) -> Payload:
    """Several batches in one records field: valid ones around a hostile one, or many copies."""
    parts = draw(st.lists(st.one_of(valid_batches(), header_mutations(), hostile_section_batch(), garbage()),
                          min_size=2, max_size=5))
    # Kafka takes one batch per partition and refuses more; this project appends several. Either way a
    # whole batch that must be refused refuses the partition's data (one error code per partition).
    # (Only the batches before the first unframed part are certainly batches.)
    refuse = False
    for p in parts:
        if not p.framed:
            break
        refuse = refuse or p.must_refuse
    return Payload(" + ".join(f"[{p.label}]" for p in parts), b"".join(p.data for p in parts),
                   must_refuse=refuse, framed=all(p.framed for p in parts))


@st.composite
def many_batches(draw: st.DrawFn) -> Payload:
    """Hundreds of small valid batches in one partition (the writev IOV_MAX case): appended, or
    refused as Kafka refuses more than one batch per partition - but typed."""
    count = draw(st.sampled_from([513, 600, 1100]))
    one = valid_batch_bytes([b"many"])
    return Payload(f"{count} copies of a valid one-record batch", one * count)


def payloads(with_heavy: bool = True) -> st.SearchStrategy[Payload]:
    """Everything a Produce fuzz draws from; ``with_heavy`` adds bombs and 600-batch requests."""
    light = st.one_of(single_batches(), concatenations())
    if not with_heavy:
        return light
    return st.one_of(light, light, light, bombs(), many_batches())
