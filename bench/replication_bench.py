"""Produce throughput and latency through the project's own producer, RF=1 acks=1 vs RF=3 acks=all.

Starts its own local cluster (ZooKeeper + 3 broker processes on loopback, in a
temporary directory; the inter-broker plane is mutual TLS, as always), creates two topics - ``rf1`` (replication factor 1) and
``rf3`` (replication factor 3, min.insync.replicas=2) - and, in the same run,
produces 100-byte records to each from this one process with
``client.producer.Producer`` (records encoded by the client, batched,
pipelined; idempotent for acks=all). Latency is from the send() call (time
blocked on a full buffer included, as in Kafka's producer perf tool) to the
acknowledgement, sampled on every 50th record.

With ``--tls`` a second cluster started with ``cluster up --secure`` (clients on
TLS + SCRAM-SHA-256, ACLs on, the producer as its admin user) runs the RF=3
acks=all case too, and the ratio TLS / plaintext is printed (issue 13's goal: >= 0.8).

    python bench/replication_bench.py [--records 400000] [--partitions 6] [--tls] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from client.connection import ClusterView
from client.local_cluster import LocalCluster
from client.producer import Producer
from proto import minikafka_pb2 as pb
from proto.transport import PLAINTEXT_SECURITY, ChannelSecurity

VALUE = b"v" * 100
SAMPLE_EVERY = 50


def create_topics(bootstrap: str, partitions: int, security: ChannelSecurity = PLAINTEXT_SECURITY) -> None:
    view = ClusterView(bootstrap, security=security)
    conn = view.connection(view.bootstrap[0])
    resp = conn.api.CreateTopics(pb.CreateTopicsRequest(topics=[
        pb.CreatableTopic(name="rf1", num_partitions=partitions, replication_factor=1),
        pb.CreatableTopic(name="rf3", num_partitions=partitions, replication_factor=3,
                          configs={"min.insync.replicas": "2"}),
    ], timeout_ms=30000), timeout=40)
    for t in resp.topics:
        if t.error_code != pb.ErrorCode.NONE:
            raise SystemExit(f"cannot create {t.name}: {t.error_message}")
    view.close()


def run(bootstrap: str, topic: str, acks: str | int, records: int, args: argparse.Namespace,
        security: ChannelSecurity = PLAINTEXT_SECURITY) -> dict[str, Any]:
    latencies: list[float] = []
    producer = Producer(bootstrap, acks=acks, enable_idempotence=acks == "all", linger_ms=args.linger_ms,
                        batch_size=args.batch_size, buffer_memory=args.buffer_memory, security=security)
    try:
        for _ in range(args.warmup):
            producer.send(topic, VALUE)
        producer.flush()
        perf = time.perf_counter
        start = perf()
        def done_since(t0: float) -> Callable[[Any], None]:
            return lambda _f: latencies.append(perf() - t0)

        for i in range(records):
            sampled = i % SAMPLE_EVERY == 0
            t0 = perf() if sampled else 0.0  # before send(), as Kafka's perf tool: blocking time counts
            fut = producer.send(topic, VALUE)
            if sampled:
                fut.add_done_callback(done_since(t0))
                if args.throughput > 0:  # kafka-producer-perf-test's --throughput: pace the sends
                    ahead = (i + 1) / args.throughput - (perf() - start)
                    if ahead > 0:
                        time.sleep(ahead)
        producer.flush()
        elapsed = perf() - start
    finally:
        producer.close()
    lat_ms = sorted(x * 1000 for x in latencies)
    return {
        "records": records,
        "records_per_sec": round(records / elapsed),
        "mb_per_sec": round(records * len(VALUE) / elapsed / 1e6, 2),
        "p50_ms": round(statistics.median(lat_ms), 2),
        "p99_ms": round(lat_ms[int(len(lat_ms) * 0.99) - 1], 2),
        "max_ms": round(lat_ms[-1], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--warmup", type=int, default=20_000)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=65536)
    ap.add_argument("--linger-ms", type=int, default=2)
    ap.add_argument("--buffer-memory", type=int, default=262_144,
                    help="bytes the producer may hold unacknowledged (back-pressure, bounds latency)")
    ap.add_argument("--throughput", type=int, default=-1, help="records/s to offer (-1: as fast as possible)")
    ap.add_argument("--tls", action="store_true", help="also RF=3 acks=all with clients on TLS + SCRAM (--secure)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="replication-bench-"))
    cluster = LocalCluster(root / "cluster", broker_overrides={"zookeeper.session.timeout.ms": "10000"})
    try:
        state = cluster.up(3)
        create_topics(state.bootstrap_servers, args.partitions)
        a = run(state.bootstrap_servers, "rf1", 1, args.records, args)
        b = run(state.bootstrap_servers, "rf3", "all", args.records, args)
    finally:
        cluster.down()
        shutil.rmtree(root, ignore_errors=True)
    tls: dict[str, Any] | None = None
    if args.tls:
        root = Path(tempfile.mkdtemp(prefix="replication-bench-tls-"))
        cluster = LocalCluster(root / "cluster", broker_overrides={"zookeeper.session.timeout.ms": "10000"})
        try:
            state = cluster.up(3, secure=True)
            security = state.client_security()
            create_topics(state.bootstrap_servers, args.partitions, security)
            tls = run(state.bootstrap_servers, "rf3", "all", args.records, args, security)
        finally:
            cluster.down()
            shutil.rmtree(root, ignore_errors=True)
    result = {"rf1_acks_1": a, "rf3_acks_all": b, "ratio": round(b["records_per_sec"] / a["records_per_sec"], 3),
              "partitions": args.partitions, "batch_size": args.batch_size, "value_size": len(VALUE)}
    if tls is not None:
        result["rf3_acks_all_tls_scram"] = tls
        result["tls_ratio"] = round(tls["records_per_sec"] / b["records_per_sec"], 3)
    print(f"{args.records} records of {len(VALUE)} B, {args.partitions} partitions, 3 brokers on loopback")
    print(f"{'':22} {'records/s':>11} {'MB/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    rows = [("RF=1 acks=1", a), ("RF=3 acks=all (min.isr=2)", b)]
    if tls is not None:
        rows.append(("RF=3 acks=all, TLS+SCRAM", tls))
    for name, r in rows:
        print(f"{name:26} {r['records_per_sec']:>11,} {r['mb_per_sec']:>8} {r['p50_ms']:>8} {r['p99_ms']:>8} "
              f"{r['max_ms']:>8}")
    print(f"ratio (RF=3 acks=all) / (RF=1 acks=1): {result['ratio']}")
    if tls is not None:
        print(f"ratio TLS+SCRAM / plaintext clients (RF=3 acks=all): {result['tls_ratio']}")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
