"""The leader's record validator against CRC-32C over the same batches, in the same run.

The broker already pays one CRC-32C pass over every batch it appends; issue 12's goal is that full
record validation (``validate_batches(deep=True)``: framing, CRC, every record's varints, offset
deltas, lengths, timestamps - proto/_codec.c) costs at most twice that, i.e. runs at >= 0.5 of the
CRC's GB/s. For several batch shapes this prints, per shape:

* ``crc32c_gbps``: the ``crc32c`` package (hardware CRC) over each batch's checksummed bytes;
* ``validate_gbps``: the whole ``validate_batches(deep=True)`` call (CRC included), compiled;
* ``records_walk_gbps``: the compiled record walk alone (what validation adds to the CRC);
* ``pure_python_gbps``: the same validation through the pure-Python fallback (a few batches);
* ``ratio``: validate / crc32c.

For the compressed shape the bytes counted are the compressed bytes on the wire; validation there
includes the (bounded) decompression, which the CRC does not.

Each figure is the best of ``--repeat`` runs over ~``--mb`` MB of batches.

    python bench/validate_bench.py [--mb 64] [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proto import record_batch as rb
from proto.record_batch import COMPRESSION_NONE, COMPRESSION_ZSTD, HEADER_SIZE, Header, Record, encode_batch

NOW = 1_700_000_000_000
SHAPES: dict[str, tuple[int, int, bool, int]] = {
    # name: (value bytes, records per batch, with key and header, codec)
    "100B x 150 (16 KB batches, the replication bench's records)": (100, 150, False, COMPRESSION_NONE),
    "100B x 1000 (100 KB batches, the log bench's)": (100, 1000, False, COMPRESSION_NONE),
    "1 KB x 16 (16 KB batches)": (1000, 16, False, COMPRESSION_NONE),
    "100B + key + header x 150": (100, 150, True, COMPRESSION_NONE),
    "100B x 150, zstd": (100, 150, False, COMPRESSION_ZSTD),
}


def make_buffer(value_size: int, per_batch: int, keyed: bool, codec: int, mb: int) -> bytes:
    batches = []
    for _b in range(16):
        # Compressed shapes get text-like values (random lowercase letters, ~1.6x with zstd).
        recs = [Record(value=os.urandom(value_size) if codec == COMPRESSION_NONE
                       else bytes(97 + x % 26 for x in os.urandom(value_size)),
                       key=f"key-{i}".encode() if keyed else None,
                       headers=(Header("trace", b"abc"),) if keyed else (), timestamp=NOW + i)
                for i in range(per_batch)]
        batches.append(encode_batch(recs, compression=codec))
    one = b"".join(batches)
    return one * max(1, (mb << 20) // len(one))


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(buf: bytes, repeat: int) -> dict[str, float]:
    info = rb.validate_batches(buf)
    spans = [(b.position, b.size) for b in info.batches]
    mv = memoryview(buf)
    crc = rb.crc32c

    def crcs() -> None:
        for pos, size in spans:
            crc(mv[pos + rb.ATTRIBUTES_OFFSET:pos + size])

    def validate() -> None:
        rb.validate_batches(buf, deep=True, max_batch_bytes=1 << 24)

    out = {"mb": len(buf) / 1e6, "batches": len(spans), "records": info.record_count}
    out["crc32c_gbps"] = len(buf) / best(crcs, repeat) / 1e9
    if rb._codec is not None:
        out["validate_gbps"] = len(buf) / best(validate, repeat) / 1e9
        sections = [(mv[p + HEADER_SIZE:p + s], b) for (p, s), b in zip(spans, info.batches, strict=True)]
        if all(b.attributes & rb.CODEC_MASK == COMPRESSION_NONE for b in info.batches):

            def walk() -> None:
                for section, b in sections:
                    rb._codec.check_records(section, b.record_count, b.base_timestamp, b.max_timestamp, 0,
                                            rb.MAX_TIMESTAMP, b.position)

            out["records_walk_gbps"] = sum(len(s) for s, _b in sections) / best(walk, repeat) / 1e9
        out["ratio"] = out["validate_gbps"] / out["crc32c_gbps"]
    few = buf[:spans[min(3, len(spans) - 1)][0] + spans[min(3, len(spans) - 1)][1]]
    t = best(lambda: rb._validate_py(few, True, 1 << 24, 0, rb.MAX_TIMESTAMP), 1)
    compressed = any(b.attributes & rb.CODEC_MASK for b in info.batches)
    out["pure_python_gbps"] = len(few) / t / 1e9 if not compressed else float("nan")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    results = {}
    for name, shape in SHAPES.items():
        results[name] = measure(make_buffer(*shape, mb=args.mb), args.repeat)
    report = {"compiled": rb.COMPILED, "cpus": os.cpu_count(), "shapes": results}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"compiled validator: {rb.COMPILED}; {os.cpu_count()} CPUs")
    print(f"{'batch shape':62} {'crc32c':>8} {'validate':>9} {'ratio':>6} {'walk':>7} {'python':>7}  (GB/s)")
    for name, r in results.items():
        print(f"{name:62} {r['crc32c_gbps']:8.2f} {r.get('validate_gbps', float('nan')):9.2f} "
              f"{r.get('ratio', float('nan')):6.2f} {r.get('records_walk_gbps', float('nan')):7.2f} "
              f"{r['pure_python_gbps']:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
