"""Log cleaner throughput (MB of log cleaned per second) beside raw read speed, in the same run.

Writes a keyed log with many duplicates into a temp dir through ``Log.append_as_leader``
(``--keys`` distinct keys drawn at random, 100-byte values, 500 records a batch, 8 MiB segments,
``cleanup.policy=compact``), rolls it so that everything is cleanable, and then measures, best of
``--repeat`` on a fresh copy each time:

- *raw read*: the same segment files read with plain ``os.read`` in 1 MiB pieces (the page cache
  warm, as it is for the cleaner: the log was just written);
- *cleaner core*: ``build_offset_map`` then ``clean_into`` over every segment into a sink that
  drops the bytes (what broker/log/cleaner.py costs: decoding, the offset map, re-encoding);
- *clean*: one ``LogCleaner.clean_one`` as a cleaner thread runs it (broker/log/log_cleaner.py):
  the offset map, the producers' last batches, each group rewritten into ``.cleaned`` files,
  fsynced, swapped in, the checkpoint written.

MB/s is the size of the log cleaned (the segments below the active one) over the elapsed time; the
cleaner reads the dirty section twice (map, rewrite), so the bytes it actually reads are about twice
that.

    python bench/cleaner_bench.py [--mb 64] [--keys 20000] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.log.cleaner import CleanStats, OffsetMap, build_offset_map, clean_into
from broker.log.config import CleanerConfig, LogConfig
from broker.log.log import Log
from broker.log.log_cleaner import FileSegmentSource, LogCleaner
from proto.record_batch import BatchHeader, Record, encode_batch

RECORDS_PER_BATCH = 500
VALUE_SIZE = 100
READ_BYTES = 1 << 20
SEGMENT_BYTES = 8 << 20
NOW = 1_700_000_000_000
TP = ("bench", 0)


def make_batches(distinct: int, keys: int, rng: random.Random) -> list[bytes]:
    return [encode_batch([Record(value=bytes([65 + (b + i) % 26]) * VALUE_SIZE,
                                 key=b"key-%08d" % rng.randrange(keys), timestamp=NOW + i)
                          for i in range(RECORDS_PER_BATCH)]) for b in range(distinct)]


def config() -> LogConfig:
    return LogConfig(cleanup_policy="compact", segment_bytes=SEGMENT_BYTES, min_cleanable_dirty_ratio=0.0)


def write_log(root: Path, batches: list[bytes], count: int) -> Path:
    d = root / "bench-0"
    log = Log.open(d, "bench", 0, config(), now_ms=NOW)
    for i in range(count):
        log.append_as_leader(batches[i % len(batches)], leader_epoch=0, now_ms=NOW)
    log.roll(NOW)  # everything written is in rolled segments: all of it cleanable
    log.append_as_leader(batches[0], leader_epoch=0, now_ms=NOW)
    log.close()
    return d


def segment_files(d: Path) -> list[Path]:
    """The rolled segments' data files (the active, last one left out)."""
    return sorted(d.glob("*.log"))[:-1]


def bench_raw_read(d: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    total = 0
    for path in segment_files(d):
        fd = os.open(path, os.O_RDONLY)
        try:
            while chunk := os.read(fd, READ_BYTES):
                total += len(chunk)
        finally:
            os.close(fd)
    return time.perf_counter() - t0, total


class NullSink:
    def __init__(self) -> None:
        self.bytes = 0

    def append(self, header: BatchHeader, batch: bytes) -> None:
        self.bytes += len(batch)


def bench_core(d: Path, cleaner: CleanerConfig) -> tuple[float, CleanStats]:
    log = Log.open(d, "bench", 0, config(), now_ms=NOW)
    segments = log.segments
    sources = [FileSegmentSource(s.base_offset, s.size, NOW, segments[i + 1].base_offset, s.dup_fd(), s, 0, 0)
               for i, s in enumerate(segments[:-1])]
    try:
        t0 = time.perf_counter()
        offset_map = OffsetMap(cleaner.dedupe_buffer_size, cleaner.io_buffer_load_factor)
        build_offset_map(sources, 0, segments[-1].base_offset, offset_map, cleaner.io_buffer_size)
        stats = CleanStats()
        clean_into(sources, NullSink(), offset_map, delete_horizon=0, producer_last_offsets={},
                   io_buffer_size=cleaner.io_buffer_size, stats=stats)
        return time.perf_counter() - t0, stats
    finally:
        for s in sources:
            s.close()
        log.close()


def bench_clean(d: Path, cleaner: CleanerConfig) -> tuple[float, CleanStats]:
    log = Log.open(d, "bench", 0, config(), now_ms=NOW)
    log.update_high_watermark(log.log_end_offset)
    lc = LogCleaner(cleaner, [d.parent], lambda: [(TP, log, d.parent)], lambda tp: log if tp == TP else None,
                    clock=lambda: NOW)
    try:
        t0 = time.perf_counter()
        if not lc.clean_one():
            raise AssertionError("the cleaner found nothing to clean")
        elapsed = time.perf_counter() - t0
        assert lc.last_stats is not None
        return elapsed, lc.last_stats
    finally:
        log.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=64, help="MB of keyed record batches to write (default 64)")
    ap.add_argument("--keys", type=int, default=20_000, help="distinct keys (default 20000)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir under the cwd)")
    ap.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    args = ap.parse_args()

    batches = make_batches(64, args.keys, random.Random(42))
    count = max(1, args.mb * 1_000_000 // len(batches[0]))
    cleaner = CleanerConfig()
    root = Path(tempfile.mkdtemp(prefix="cleaner-bench-", dir=args.dir or "."))
    best = {"raw": float("inf"), "core": float("inf"), "clean": float("inf")}
    try:
        pristine = write_log(root / "pristine", batches, count)
        log_bytes = sum(p.stat().st_size for p in segment_files(pristine))
        stats: CleanStats | None = None
        for i in range(args.repeat):
            work = root / f"run-{i}" / "bench-0"
            shutil.copytree(pristine, work)
            raw_s, raw_bytes = bench_raw_read(work)
            assert raw_bytes == log_bytes
            core_s, _core_stats = bench_core(work, cleaner)
            clean_s, stats = bench_clean(work, cleaner)
            best = {"raw": min(best["raw"], raw_s), "core": min(best["core"], core_s),
                    "clean": min(best["clean"], clean_s)}
            shutil.rmtree(work.parent, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert stats is not None
    mb = log_bytes / 1e6
    records = count * RECORDS_PER_BATCH
    result = {
        "log_bytes": log_bytes, "records": records, "keys": args.keys,
        "raw_read_mb_per_sec": round(mb / best["raw"], 1),
        "cleaner_core_mb_per_sec": round(mb / best["core"], 1),
        "clean_mb_per_sec": round(mb / best["clean"], 1),
        "clean_records_per_sec": round(records / best["clean"]),
        "kept_bytes_ratio": round(stats.bytes_written / max(1, stats.bytes_read), 4),
        "records_kept": stats.records_written,
    }
    print(f"{records:,} records ({args.keys:,} keys, {VALUE_SIZE} B values, {RECORDS_PER_BATCH} a batch) = "
          f"{mb:.0f} MB of log in {SEGMENT_BYTES >> 20} MiB segments, best of {args.repeat}")
    print(f"{'':14} {'MB/s':>10} {'records/s':>14}")
    for name, key in (("raw read", "raw"), ("cleaner core", "core"), ("clean", "clean")):
        print(f"{name:14} {mb / best[key]:10,.1f} {records / best[key]:14,.0f}")
    print(f"kept {stats.records_written:,} records, {stats.bytes_written / 1e6:.2f} MB of {stats.bytes_read / 1e6:.0f} "
          f"MB rewritten; clean/raw read ratio {best['raw'] / best['clean']:.3f}")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
