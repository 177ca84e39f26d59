"""``minikafka dump-log``: mirrors kafka-dump-log.sh (Kafka's DumpLogSegments), offline.

Reads a partition directory's files without a broker: segments (``.log``: one line per batch, its
CRC-32C verified, ``isvalid`` says the verdict; ``--deep-iteration`` adds one ``|`` line per record,
``--print-data-log`` its key and payload too), offset indexes (``.index``: ``offset: .. position: ..``,
each entry checked against the batch at its position), time indexes (``.timeindex``:
``timestamp: .. offset: ..``) and the checkpoint files of ``broker.log.checkpoint`` (offsets per
partition, leader epochs). The lines are Kafka's (2.8); the formatting functions are pure, for tests.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from broker.log.checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    HIGH_WATERMARK_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    read_epoch_entries,
    read_offsets,
)
from broker.log.index import OFFSET_ENTRY, TIME_ENTRY
from proto.errors import KafkaError
from proto.record_batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    crc32c,
    decode_batch_fields,
    read_header,
)

RECORD_INDENT: Final = "|"
COMPRESSION_NAMES: Final = ("NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD")
OFFSET_CHECKPOINTS: Final = frozenset({RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT,
                                       HIGH_WATERMARK_CHECKPOINT, CLEANER_OFFSET_CHECKPOINT})
INT32_MAX: Final = 0x7FFFFFFF


def add_parser(sub: Any) -> None:
    p = sub.add_parser("dump-log", help="print segment, index and checkpoint files offline (kafka-dump-log)")
    p.add_argument("--files", required=True,
                   help="comma-separated files: NNN.log, NNN.index, NNN.timeindex, checkpoint files")
    p.add_argument("--deep-iteration", action="store_true", help="print every record, not only batches")
    p.add_argument("--print-data-log", action="store_true",
                   help="print records' keys and payloads (implies --deep-iteration)")
    p.add_argument("--verify-index-only", action="store_true",
                   help="check index entries against the segment without printing them")
    p.add_argument("--max-message-size", type=int, default=5 * 1024 * 1024,
                   help="the largest batch to read (default 5242880)")
    p.set_defaults(func=cmd_dump_log)


def cmd_dump_log(args: argparse.Namespace) -> int:
    deep = args.deep_iteration or args.print_data_log
    rc = 0
    for name in (f.strip() for f in args.files.split(",") if f.strip()):
        path = Path(name)
        print(f"Dumping {path}")
        try:
            lines, problems = dump_file(path, deep=deep, print_data=args.print_data_log,
                                        verify_only=args.verify_index_only)
        except FileNotFoundError:
            print(f"error: {path}: no such file", file=sys.stderr)
            rc = 1
            continue
        except (KafkaError, OSError) as e:
            print(f"error: {path}: {e}", file=sys.stderr)
            rc = 1
            continue
        for line in lines:
            print(line)
        for line in problems:
            print(line, file=sys.stderr)
    return rc


def dump_file(path: Path, *, deep: bool = False, print_data: bool = False,
              verify_only: bool = False) -> tuple[list[str], list[str]]:
    """(lines for stdout, problems for stderr) of one file, by its suffix or checkpoint name."""
    if path.suffix == ".log":
        return list(dump_segment(path.read_bytes(), _base_offset(path), deep=deep, print_data=print_data)), []
    if path.suffix == ".index":
        return dump_offset_index(path, verify_only)
    if path.suffix == ".timeindex":
        return dump_time_index(path, verify_only)
    if path.name in OFFSET_CHECKPOINTS:
        return [f"topic: {t} partition: {p} offset: {o}" for (t, p), o in sorted(read_offsets(path).items())], []
    if path.name == LEADER_EPOCH_CHECKPOINT:
        return [f"epoch: {e} offset: {o}" for e, o in read_epoch_entries(path)], []
    return [], [f"Ignoring unknown file {path}"]


def _base_offset(path: Path) -> int:
    try:
        return int(path.name.split(".")[0])
    except ValueError:
        raise KafkaError(f"{path.name}: a segment file is named by its base offset (NNN.log)") from None


def _next_sequence(seq: int, delta: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence (wraps at Integer.MAX_VALUE)."""
    return seq + delta - INT32_MAX - 1 if seq > INT32_MAX - delta else seq + delta


def batch_line(h: BatchHeader, position: int, valid: bool) -> str:
    """DumpLogSegments' printBatchLevel of a v2 batch."""
    last_seq = -1 if h.base_sequence < 0 else _next_sequence(h.base_sequence, h.last_offset_delta)
    ts_type = "LogAppendTime" if h.attributes & TIMESTAMP_TYPE_MASK else "CreateTime"
    codec = h.compression
    codec_name = COMPRESSION_NAMES[codec] if codec < len(COMPRESSION_NAMES) else str(codec)
    return (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {last_seq} producerId: {h.producer_id} "
            f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
            f"isTransactional: {str(bool(h.attributes & TRANSACTIONAL_MASK)).lower()} "
            f"isControl: {str(bool(h.attributes & CONTROL_MASK)).lower()} position: {position} "
            f"{ts_type}: {h.max_timestamp} size: {h.size} magic: {h.magic} compresscodec: {codec_name} "
            f"crc: {h.crc} isvalid: {str(valid).lower()}")


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", "replace")


def dump_segment(data: bytes, base_offset: int, *, deep: bool = False, print_data: bool = False) -> Iterator[str]:
    """The lines DumpLogSegments prints for a segment's bytes: ``Starting offset``, a line per batch
    (CRC checked), with ``deep`` a line per record, and the invalid bytes at the end if any."""
    yield f"Starting offset: {base_offset}"
    pos = 0
    while len(data) - pos >= HEADER_SIZE:
        h = read_header(data, pos)
        end = pos + h.size
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or end > len(data):
            break  # a partial batch: the trailing bytes below
        valid = crc32c(memoryview(data)[pos + ATTRIBUTES_OFFSET:end]) == h.crc
        yield batch_line(h, pos, valid)
        if deep:
            ts_type = "LogAppendTime" if h.attributes & TIMESTAMP_TYPE_MASK else "CreateTime"
            try:
                _h, records = decode_batch_fields(data, pos, verify_crc=False)
            except KafkaError as e:
                yield f"{RECORD_INDENT} cannot decode the records: {e}"
                records = []
            for offset, ts, key, value, headers in records:
                seq = -1 if h.base_sequence < 0 else _next_sequence(h.base_sequence, offset - h.base_offset)
                line = (f"{RECORD_INDENT} offset: {offset} {ts_type}: {ts} "
                        f"keysize: {-1 if key is None else len(key)} valuesize: {-1 if value is None else len(value)} "
                        f"sequence: {seq} headerKeys: [{','.join(x.key for x in headers)}]")
                if print_data and not h.attributes & CONTROL_MASK:
                    if key is not None:
                        line += f" key: {_text(key)}"
                    if value is not None:
                        line += f" payload: {_text(value)}"
                yield line
        pos = end
    if len(data) > pos:
        yield f"Found {len(data) - pos} invalid bytes at the end of the segment"


def _segment_bytes(index_path: Path) -> bytes | None:
    log = index_path.with_suffix(".log")
    try:
        return log.read_bytes()
    except FileNotFoundError:
        return None


def dump_offset_index(path: Path, verify_only: bool = False) -> tuple[list[str], list[str]]:
    """``offset: .. position: ..`` per entry; each entry's offset must be the base offset of the
    batch at its position in the segment beside it (this log indexes batches by their first offset)."""
    base = _base_offset(path)
    raw = path.read_bytes()
    segment = _segment_bytes(path)
    lines: list[str] = []
    mismatches: list[str] = []
    for i, (rel, position) in enumerate(OFFSET_ENTRY.iter_unpack(raw[:len(raw) - len(raw) % OFFSET_ENTRY.size])):
        if i > 0 and rel == 0:
            break  # a preallocated (sparse) tail, as Kafka stops
        offset = base + rel
        if segment is not None:
            found = read_header(segment, position).base_offset if len(segment) - position >= HEADER_SIZE else -1
            if found != offset:
                mismatches.append(f"  Index offset: {offset}, log offset: {found}")
        if not verify_only:
            lines.append(f"offset: {offset} position: {position}")
    problems = [f"Mismatches in :{path.resolve()}", *mismatches] if mismatches else []
    if segment is None:
        problems.append(f"{path.with_suffix('.log')} not found: entries not checked")
    return lines, problems


def dump_time_index(path: Path, verify_only: bool = False) -> tuple[list[str], list[str]]:
    """``timestamp: .. offset: ..`` per entry; timestamps must increase."""
    base = _base_offset(path)
    raw = path.read_bytes()
    lines: list[str] = []
    problems: list[str] = []
    previous = -1
    for i, (ts, rel) in enumerate(TIME_ENTRY.iter_unpack(raw[:len(raw) - len(raw) % TIME_ENTRY.size])):
        if i > 0 and rel == 0 and ts == 0:
            break
        if previous >= ts:
            problems.append(f"Found out of order timestamp in :{path.resolve()}\n"
                            f"  Index timestamp: {ts}, Previously indexed timestamp: {previous}")
        previous = ts
        if not verify_only:
            lines.append(f"timestamp: {ts} offset: {base + rel}")
    return lines, problems
