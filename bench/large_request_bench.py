"""The largest legal requests against one broker, and what another client sees meanwhile (SPEC S15.2).

Starts its own 3-broker cluster (``LocalCluster`` in a temporary directory, torn down at the end),
creates a small RF=3 topic, and for each hostile request kind sends ONE frame on a raw socket to
the Kafka listener of the broker that leads the topic's partition 0:

* Metadata v1 naming 300,000 and 1,000,000 one-character topics,
* Fetch v11 naming 20,000 partitions,
* OffsetCommit v2 naming 100,000 partitions.

While that request is in flight (from its first byte sent until its answer is read, plus a short
tail) another client measures, on the same broker:

* ApiVersions v0 round trips on a raw socket (one outstanding at a time, back to back with a 2 ms
  pause): p50 / p99 / max;
* acks=all produce round trips (librdkafka, one record at a time, to partition 0, led by that
  broker): p50 / p99 / max;
* the ISR of the topic's partitions (polled from another broker, gRPC Metadata): any shrink;
* the broker's RSS before the request, at its peak, and 3 s after the answer.

Usage: ``.venv/bin/python bench/large_request_bench.py [--kinds metadata300k,metadata1m,fetch20k,commit100k]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from client.connection import Connection
from client.ops.local_cluster import LocalCluster
from proto import minikafka_pb2 as pb
from tests.kafka_frames import frame

TOPIC = "lat"
PARTITIONS = 10
RF = 3


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


# ------------------------------------------------------------------ frames


def _header(api_key: int, version: int, correlation_id: int, client_id: bytes = b"bench") -> bytes:
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def metadata_v1(names: int) -> bytes:
    """Metadata v1 naming ``names`` one-character topics (written directly: kio would take long)."""
    return _header(3, 1, 11) + struct.pack(">i", names) + b"\x00\x01a" * names


def fetch_v11(partitions: int) -> bytes:
    return frame(1, 11, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "rack_id": "",
        "topics": [{"topic": TOPIC, "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
             "partition_max_bytes": 1024} for p in range(partitions)]}]}, correlation_id=12)


def offset_commit_v2(partitions: int) -> bytes:
    return frame(8, 2, {
        "group_id": "bench-group", "generation_id_or_member_epoch": -1, "member_id": "", "retention_time": -1,
        "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": p, "committed_offset": 0, "committed_metadata": ""} for p in range(partitions)]}]},
        correlation_id=13)


KINDS: dict[str, tuple[str, Callable[[], bytes]]] = {
    "metadata300k": ("Metadata v1, 300k names", lambda: metadata_v1(300_000)),
    "metadata1m": ("Metadata v1, 1M names", lambda: metadata_v1(1_000_000)),
    "fetch20k": ("Fetch v11, 20k partitions", lambda: fetch_v11(20_000)),
    "commit100k": ("OffsetCommit v2, 100k partitions", lambda: offset_commit_v2(100_000)),
}

API_VERSIONS_V0 = _header(18, 0, 99)


def _connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=120)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def exchange(s: socket.socket, body: bytes) -> bytes:
    s.sendall(struct.pack(">i", len(body)) + body)
    (size,) = struct.unpack(">i", _recv_exactly(s, 4))
    return _recv_exactly(s, size)


# ------------------------------------------------------------------ the other client


class Observer:
    """ApiVersions and acks=all produce round trips, the ISR and the RSS, in background threads."""

    def __init__(self, kafka_address: str, kafka_bootstrap: str, md_conn: Connection, pid: int) -> None:
        import confluent_kafka

        self.kafka_address = kafka_address
        self.md_conn = md_conn
        self.pid = pid
        self.stop = threading.Event()
        self.api_versions: list[float] = []
        self.produce: list[float] = []
        self.produce_errors = 0
        self.min_isr = RF
        self.peak_rss = 0.0
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": kafka_bootstrap, "acks": "all", "linger.ms": 0, "socket.nagle.disable": True,
            "message.timeout.ms": 60_000})
        self.producer.produce(TOPIC, b"warm", partition=0)
        self.producer.flush(30)
        self.threads = [threading.Thread(target=f, daemon=True)
                        for f in (self._api_versions, self._produce, self._isr, self._rss)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=90)

    def _api_versions(self) -> None:
        s = _connect(self.kafka_address)
        try:
            while not self.stop.is_set():
                t0 = time.perf_counter()
                exchange(s, API_VERSIONS_V0)
                self.api_versions.append(time.perf_counter() - t0)
                time.sleep(0.002)
        finally:
            s.close()

    def _produce(self) -> None:
        while not self.stop.is_set():
            done = threading.Event()
            failed: list[Any] = []

            def on_delivery(err: Any, _msg: Any, done: threading.Event = done, failed: list[Any] = failed) -> None:
                if err is not None:
                    failed.append(err)
                done.set()

            t0 = time.perf_counter()
            self.producer.produce(TOPIC, b"x" * 100, partition=0, on_delivery=on_delivery)
            while not done.is_set():
                self.producer.poll(0.001)
            if failed:
                self.produce_errors += 1
            else:
                self.produce.append(time.perf_counter() - t0)
            time.sleep(0.002)

    def _isr(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(Exception):
                resp = self.md_conn.api.Metadata(pb.MetadataRequest(topics=[TOPIC]), timeout=5)
                for t in resp.topics:
                    for p in t.partitions:
                        self.min_isr = min(self.min_isr, len(p.isr))
            time.sleep(0.2)

    def _rss(self) -> None:
        while not self.stop.is_set():
            self.peak_rss = max(self.peak_rss, rss_mb(self.pid))
            time.sleep(0.05)


def quantiles(xs: list[float]) -> dict[str, float | None]:
    if not xs:
        return {"n": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    ys = sorted(xs)
    return {"n": len(ys), "p50_ms": round(statistics.median(ys) * 1000, 1),
            "p99_ms": round(ys[min(len(ys) - 1, int(len(ys) * 0.99))] * 1000, 1), "max_ms": round(ys[-1] * 1000, 1)}


def run_kind(kind: str, leader_kafka: str, kbs: str, md_conn: Connection, pid: int) -> dict[str, Any]:
    title, build = KINDS[kind]
    body = build()
    rss_before = rss_mb(pid)
    obs = Observer(leader_kafka, kbs, md_conn, pid)
    obs.start()
    time.sleep(0.5)  # a baseline inside the window
    s = _connect(leader_kafka)
    out: dict[str, Any] = {"kind": title, "frame_kb": round(len(body) / 1024)}
    t0 = time.perf_counter()
    try:
        answer = exchange(s, body)
        out["answer_s"] = round(time.perf_counter() - t0, 2)
        out["answer_kb"] = round(len(answer) / 1024)
    except (OSError, ConnectionError) as e:
        out["answer_s"] = round(time.perf_counter() - t0, 2)
        out["answer_kb"] = f"closed ({e})"
    finally:
        s.close()
    time.sleep(0.5)
    obs.finish()
    time.sleep(3.0)
    out.update(api_versions=quantiles(obs.api_versions), produce=quantiles(obs.produce),
               produce_errors=obs.produce_errors, min_isr=obs.min_isr,
               rss_before_mb=round(rss_before), rss_peak_mb=round(obs.peak_rss), rss_after_mb=round(rss_mb(pid)))
    obs.producer.flush(10)
    return out


def report(rows: list[dict[str, Any]]) -> None:
    head = (f"{'request':34} {'frame':>8} {'answer':>10} {'took s':>7} | {'ApiVersions p50/p99/max ms':>28} | "
            f"{'acks=all p50/p99/max ms':>26} | {'min ISR':>7} | {'RSS MB before/peak/after':>24}")
    print(head)
    print("-" * len(head))

    def q(x: dict[str, Any]) -> str:
        return f"{x['p50_ms']}/{x['p99_ms']}/{x['max_ms']} (n={x['n']})"

    for r in rows:
        print(f"{r['kind']:34} {str(r['frame_kb']) + ' KB':>8} {str(r['answer_kb']) + ' KB':>10} "
              f"{r['answer_s']:>7} | {q(r['api_versions']):>28} | {q(r['produce']):>26} | {r['min_isr']:>7} | "
              f"{r['rss_before_mb']}/{r['rss_peak_mb']}/{r['rss_after_mb']:>20}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated, of: " + ", ".join(KINDS))
    ap.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = ap.parse_args()
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    for k in kinds:
        if k not in KINDS:
            raise SystemExit(f"unknown kind {k!r}")
    root = Path(tempfile.mkdtemp(prefix="large-request-bench-"))
    cluster = LocalCluster(root / "cluster")
    conns: list[Connection] = []
    rows: list[dict[str, Any]] = []
    try:
        state = cluster.up(3)
        controller = int(cluster.zk_view()["controller"])
        conns = [Connection(state.brokers[b].address) for b in sorted(state.brokers)]
        by_id = dict(zip(sorted(state.brokers), conns, strict=True))
        by_id[controller].api.CreateTopics(pb.CreateTopicsRequest(timeout_ms=30_000, topics=[
            pb.CreatableTopic(name=TOPIC, num_partitions=PARTITIONS, replication_factor=RF)]), timeout=40)
        deadline = time.monotonic() + 60
        leader = -1
        while time.monotonic() < deadline:
            resp = by_id[controller].api.Metadata(pb.MetadataRequest(topics=[TOPIC]), timeout=5)
            parts = [p for t in resp.topics for p in t.partitions]
            if len(parts) == PARTITIONS and all(p.leader >= 0 and len(p.isr) == RF for p in parts):
                leader = next(p.leader for p in parts if p.partition == 0)
                break
            time.sleep(0.2)
        if leader < 0:
            raise SystemExit("the topic's ISRs did not fill within 60 s")
        other = next(b for b in sorted(state.brokers) if b != leader)
        target = state.brokers[leader]
        print(f"target: broker {leader} (pid {target.pid}, {target.kafka_address}); ISR polled from broker {other}",
              flush=True)
        for kind in kinds:
            row = run_kind(kind, target.kafka_address, state.kafka_bootstrap_servers, by_id[other], target.pid)
            rows.append(row)
            print(json.dumps(row), flush=True)
            time.sleep(2.0)
    finally:
        for c in conns:
            with contextlib.suppress(Exception):
                c.close()
        with contextlib.suppress(Exception):
            cluster.down()
        shutil.rmtree(root, ignore_errors=True)
    print()
    report(rows)
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
