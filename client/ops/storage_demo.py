"""``minikafka demo log``: the storage engine on its own, end to end.

Appends record batches to a segmented log on disk, reads them back, simulates
a crash that tears the last batch, and shows recovery cutting exactly the
torn tail. A stand-in for the cluster round trip until the broker lands.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from broker.log.config import LogConfig
from broker.log.manager import LogManager
from proto.record_batch import Record, decode_batches, encode_batch


def run_log_demo(args: argparse.Namespace) -> int:
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="minikafka-demo-"))
    now = int(time.time() * 1000)
    cfg = LogConfig(segment_bytes=64 * 1024)
    manager = LogManager([root], cfg)
    manager.startup(now)
    log = manager.get_or_create_log("demo", 0, now)
    per_batch = 100
    for start in range(0, args.records, per_batch):
        batch = encode_batch([Record(value=f"message {i}".encode(), key=f"k{i % 7}".encode(), timestamp=now + i)
                              for i in range(start, min(start + per_batch, args.records))])
        log.append_as_leader(batch, leader_epoch=0, now_ms=now)
    log.update_high_watermark(log.log_end_offset)
    print(f"appended {log.log_end_offset} records in {len(log.segments)} segments under {log.dir}")
    # One read returns at most a segment's worth (as a fetch does): read on until the log end.
    records: list[Record] = []
    while (records[-1].offset + 1 if records else 0) < log.log_end_offset:
        more = decode_batches(log.read(records[-1].offset + 1 if records else 0, 1 << 30))
        if not more:
            break
        records.extend(more)
    print(f"read back all {len(records)} records from {len(log.segments)} segments: first={records[0].value!r} "
          f"last={records[-1].value!r}")
    manager.shutdown()

    # Crash: tear the last batch in half, then start again without a clean-shutdown marker.
    (root / ".kafka_cleanshutdown").unlink()
    active = sorted(log.dir.glob("*.log"))[-1]
    os.truncate(active, active.stat().st_size - 50)
    manager = LogManager([root], cfg)
    manager.startup(now)
    log2 = manager.get_log("demo", 0)
    assert log2 is not None
    print(f"after a torn write: recovery cut {log2.recovered_bytes_truncated} bytes; "
          f"log end offset {log2.log_end_offset} (the last batch of {per_batch} records is gone, nothing else)")
    manager.shutdown()
    if not args.dir:
        shutil.rmtree(root)
    return 0
