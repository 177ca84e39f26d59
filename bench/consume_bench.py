"""Records/s of the consumer, Consumer.poll() and the columnar Consumer.poll_batch(), with same-run baselines.

Starts its own local cluster (ZooKeeper + 3 broker processes on loopback, in a temporary
directory), produces ``--records`` 100-byte records once to a ``--partitions``-partition topic
(RF=3, min.insync.replicas=2), then reads all of them, in this one process, several ways:

- **fetch only**: plain Fetch RPCs per partition (1 MiB each, one after the other), bytes not
  decoded: what the brokers and gRPC deliver, the ceiling of any consumer here;
- **decode (record_batch)** / **decode (columnar)**: the fetched bytes, already in memory, decoded
  by the old per-record Python path (``decode_batch``) and by the columnar codec
  (``proto.columnar``, compiled when built): the decoder alone, no network;
- **Consumer.poll()**: the consumer end to end (pipelined fetches, ``ConsumerRecord`` tuples),
  every value touched;
- **Consumer.poll_batch()**: the same, handing out ``pyarrow.RecordBatch`` columns.

Each consumer figure is the best of ``--repeat`` runs over the whole topic.

    python bench/consume_bench.py [--records 1000000] [--partitions 6] [--max-poll-records 500] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from client.admin import AdminClient, NewTopic
from client.connection import ClusterView
from client.consumer import Consumer
from client.ops.local_cluster import LocalCluster
from client.producer import Producer
from proto import columnar
from proto import minikafka_pb2 as pb
from proto.record_batch import decode_batch, iter_headers

TOPIC = "consume-bench"
VALUE = b"v" * 100
FETCH_BYTES = 1_048_576


def produce(bootstrap: str, records: int) -> float:
    started = time.perf_counter()
    with Producer(bootstrap, acks="all", batch_size=65536, linger_ms=5) as p:
        for _ in range(records):
            p.send(TOPIC, VALUE)
        p.flush()
    return time.perf_counter() - started


def fetch_all(bootstrap: str, partitions: int) -> tuple[float, list[bytes]]:
    """Every partition's batches with plain Fetch RPCs: (seconds, the fetched record bytes)."""
    view = ClusterView(bootstrap)
    chunks: list[bytes] = []
    try:
        view.refresh([TOPIC])
        started = time.perf_counter()
        for p in range(partitions):
            conn, pl = view.leader_connection(TOPIC, p)
            position = 0
            while True:
                req = pb.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=FETCH_BYTES)
                req.topics.add(name=TOPIC).partitions.add(partition=p, fetch_offset=position,
                                                          current_leader_epoch=pl.leader_epoch,
                                                          partition_max_bytes=FETCH_BYTES)
                pr = conn.api.Fetch(req, timeout=30).topics[0].partitions[0]
                last = None
                for _pos, h in iter_headers(pr.records):
                    last = h
                if last is None:
                    break
                chunks.append(pr.records)
                position = last.next_offset
        return time.perf_counter() - started, chunks
    finally:
        view.close()


def timed(fn: Callable[[], int], repeat: int) -> tuple[float, int]:
    """Best seconds of ``repeat`` runs, and what the run counted."""
    best = float("inf")
    n = 0
    for _ in range(repeat):
        started = time.perf_counter()
        n = fn()
        best = min(best, time.perf_counter() - started)
    return best, n


def decode_old(chunks: list[bytes]) -> int:
    n = 0
    for buf in chunks:
        for pos, _h in iter_headers(buf):
            n += len(decode_batch(buf, pos)[1])
    return n


def decode_new(chunks: list[bytes]) -> int:
    return sum(columnar.decode_columns(buf).num_rows for buf in chunks)


def consumer_run(bootstrap: str, records: int, max_poll_records: int, columns: bool) -> int:
    n = nbytes = 0
    with Consumer(TOPIC, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                  max_poll_records=max_poll_records, max_partition_fetch_bytes=FETCH_BYTES) as c:
        deadline = time.monotonic() + 600
        if columns:
            import pyarrow.compute as pc

            while n < records and time.monotonic() < deadline:
                for batch in c.poll_batch(timeout_ms=1000).values():
                    n += batch.num_rows
                    nbytes += pc.sum(pc.binary_length(batch.column("value"))).as_py() or 0
        else:
            while n < records and time.monotonic() < deadline:
                for r in c.poll(timeout_ms=1000):
                    n += 1
                    nbytes += len(r.value or b"")
    if n != records or nbytes != records * len(VALUE):
        raise SystemExit(f"consumer read {n} records / {nbytes} value bytes, expected {records}")
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--max-poll-records", type=int, default=500, help="Kafka's default is 500")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="consume-bench-"))
    cluster = LocalCluster(root / "cluster", broker_overrides={"zookeeper.session.timeout.ms": "10000"})
    figures: dict[str, dict[str, Any]] = {}

    def add(name: str, seconds: float, n: int) -> None:
        figures[name] = {"records_per_sec": round(n / seconds), "seconds": round(seconds, 3)}

    try:
        state = cluster.up(3)
        bootstrap = state.bootstrap_servers
        with AdminClient(bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, args.partitions, 3, {"min.insync.replicas": "2"})])
        produce_s = produce(bootstrap, args.records)
        fetch_s, chunks = fetch_all(bootstrap, args.partitions)
        fetched = sum(columnar.decode_columns(buf).num_rows for buf in chunks)
        if fetched != args.records:
            raise SystemExit(f"fetched {fetched} records, expected {args.records}")
        add("fetch_only", fetch_s, fetched)
        add("decode_record_batch", *timed(lambda: decode_old(chunks), 1))
        add("decode_columnar", *timed(lambda: decode_new(chunks), args.repeat))
        add("consumer_poll", *timed(lambda: consumer_run(bootstrap, args.records, args.max_poll_records, False),
                                    args.repeat))
        add("consumer_poll_batch", *timed(
            lambda: consumer_run(bootstrap, args.records, args.max_poll_records, True), args.repeat))
    finally:
        cluster.down()
        shutil.rmtree(root, ignore_errors=True)
    result = {**figures, "records": args.records, "partitions": args.partitions, "value_size": len(VALUE),
              "max_poll_records": args.max_poll_records, "columnar_compiled": columnar.COMPILED,
              "produce_seconds": round(produce_s, 1)}
    print(f"{args.records:,} records of {len(VALUE)} B in {args.partitions} partitions (RF=3), 3 brokers on loopback; "
          f"produced in {produce_s:.1f}s; columnar codec {'compiled' if columnar.COMPILED else 'pure Python'}")
    print(f"{'':46} {'records/s':>11} {'seconds':>8}")
    labels = {
        "fetch_only": "baseline: Fetch RPCs only, no decoding",
        "decode_record_batch": "baseline: decode_batch (per record, no network)",
        "decode_columnar": "decode_columns (columnar, no network)",
        "consumer_poll": f"Consumer.poll() (max_poll_records={args.max_poll_records})",
        "consumer_poll_batch": "Consumer.poll_batch() (Arrow)",
    }
    for key, label in labels.items():
        print(f"{label:46} {figures[key]['records_per_sec']:>11,} {figures[key]['seconds']:>8}")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
