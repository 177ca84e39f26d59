"""Segmented-log throughput against raw file I/O on the same bytes, in the same run.

Appends pre-encoded 1000-record batches (100-byte values) through
``Log.append_as_leader`` - validation, CRC check, offset/epoch stamping, index
upkeep, segment rolls - then reads everything back from offset 0 with
``Log.read`` as a fetch loop does (1 MiB per read, the next offset taken from
the last batch header). The baseline writes and reads the same bytes with plain
``os.write`` / ``os.read`` on one file. Each measurement is the best of
``--repeat`` runs, alternating log and raw so that both see the same machine.

    python bench/log_bench.py [--mb 512] [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.log.config import LogConfig
from broker.log.log import Log
from proto.record_batch import LOG_OVERHEAD, Record, encode_batch

RECORDS_PER_BATCH = 1000
VALUE_SIZE = 100
READ_BYTES = 1 << 20


def make_batches(distinct: int) -> list[bytes]:
    out = []
    for b in range(distinct):
        recs = [Record(value=bytes([65 + (b + i) % 26]) * VALUE_SIZE, timestamp=1_700_000_000_000 + i)
                for i in range(RECORDS_PER_BATCH)]
        out.append(encode_batch(recs))
    return out


def bench_log(root: Path, batches: list[bytes], count: int) -> tuple[float, float, int]:
    d = root / "bench-0"
    shutil.rmtree(d, ignore_errors=True)
    log = Log.open(d, "bench", 0, LogConfig(), now_ms=0)
    t0 = time.perf_counter()
    n = len(batches)
    for i in range(count):
        log.append_as_leader(batches[i % n], 0, 1)
    append_s = time.perf_counter() - t0
    log.update_high_watermark(log.log_end_offset)
    t0 = time.perf_counter()
    offset, total = 0, 0
    end = log.log_end_offset
    unpack = struct.Struct(">qii").unpack_from
    while offset < end:
        data = log.read(offset, READ_BYTES, log.high_watermark)
        total += len(data)
        # Walk the batch headers to the last one: what a fetcher does to find its next offset.
        pos = 0
        last = 0
        while pos < len(data):
            base, length, _ = unpack(data, pos)
            last = pos
            pos += length + LOG_OVERHEAD
        base, _l, _e = unpack(data, last)
        (delta,) = struct.unpack_from(">i", data, last + 23)
        offset = base + delta + 1
    read_s = time.perf_counter() - t0
    records = log.log_end_offset
    log.close()
    shutil.rmtree(d, ignore_errors=True)
    assert total == sum(len(batches[i % n]) for i in range(count)), "read back a different number of bytes"
    return append_s, read_s, records


def bench_raw(root: Path, batches: list[bytes], count: int) -> tuple[float, float]:
    path = root / "raw.bin"
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
    n = len(batches)
    t0 = time.perf_counter()
    for i in range(count):
        os.write(fd, batches[i % n])
    write_s = time.perf_counter() - t0
    os.close(fd)
    fd = os.open(path, os.O_RDONLY)
    t0 = time.perf_counter()
    while os.read(fd, READ_BYTES):
        pass
    read_s = time.perf_counter() - t0
    os.close(fd)
    path.unlink()
    return write_s, read_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=512, help="MB of record batches to append (default 512)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir under the cwd)")
    ap.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    args = ap.parse_args()

    batches = make_batches(16)
    batch_bytes = len(batches[0])
    count = max(1, args.mb * 1_000_000 // batch_bytes)
    total_bytes = sum(len(batches[i % len(batches)]) for i in range(count))
    root = Path(tempfile.mkdtemp(prefix="log-bench-", dir=args.dir or "."))
    try:
        best_log = [float("inf"), float("inf")]
        best_raw = [float("inf"), float("inf")]
        records = 0
        for _ in range(args.repeat):
            w, r = bench_raw(root, batches, count)
            best_raw = [min(best_raw[0], w), min(best_raw[1], r)]
            a, rd, records = bench_log(root, batches, count)
            best_log = [min(best_log[0], a), min(best_log[1], rd)]
    finally:
        shutil.rmtree(root, ignore_errors=True)

    mb = total_bytes / 1e6
    rows = [
        ("raw write", records / best_raw[0], mb / best_raw[0]),
        ("log append", records / best_log[0], mb / best_log[0]),
        ("raw read", records / best_raw[1], mb / best_raw[1]),
        ("log read", records / best_log[1], mb / best_log[1]),
    ]
    result = {
        "batches": count,
        "records": records,
        "bytes": total_bytes,
        "records_per_batch": RECORDS_PER_BATCH,
        "value_size": VALUE_SIZE,
        "raw_write_mb_per_sec": round(rows[0][2], 1),
        "append_mb_per_sec": round(rows[1][2], 1),
        "append_records_per_sec": round(rows[1][1]),
        "raw_read_mb_per_sec": round(rows[2][2], 1),
        "read_mb_per_sec": round(rows[3][2], 1),
        "read_records_per_sec": round(rows[3][1]),
        "append_ratio": round(best_raw[0] / best_log[0], 3),
        "read_ratio": round(best_raw[1] / best_log[1], 3),
    }
    print(f"{count} batches x {RECORDS_PER_BATCH} records x {VALUE_SIZE} B values = {mb:.0f} MB, "
          f"best of {args.repeat}")
    print(f"{'':12} {'records/s':>14} {'MB/s':>10}")
    for name, rps, mbps in rows:
        print(f"{name:12} {rps:14,.0f} {mbps:10,.1f}")
    print(f"append ratio {result['append_ratio']:.3f}   read ratio {result['read_ratio']:.3f}   (goal >= 0.7)")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
