"""The cost of a transaction (issue 31, KIP-98): transactions/s, broker CPU and ZooKeeper writes per
transaction, beside the same records produced idempotently without transactions, in the same run.

Starts its own local cluster (ZooKeeper + 3 broker processes on loopback, in a temporary
directory), creates topic ``txn-bench`` (``--partitions``, replication factor 3,
min.insync.replicas=2) and, for each transaction size N (``--sizes``, default 1, 10, 100 records
of 100 bytes), runs two cases from this one process with ``client.producer.Producer``:

- *transactions*: ``--txns`` transactions of N keyless records each (begin, N sends, commit);
- *baseline*: the same number of records through an idempotent producer (acks=all) without
  transactions, flushed after every N records - the same points of synchronisation, so the
  difference is what the transaction adds: AddPartitionsToTxn, EndTxn, the coordinator's
  PrepareCommit/CompleteCommit writes to ZooKeeper, and the COMMIT markers (WriteTxnMarkers to
  each partition's leader, replicated like any batch).

Per case: transactions (or flushes) per second, records/s, CPU seconds of the brokers together
(``/proc/<pid>/stat``) per transaction, and ZooKeeper writes per transaction - counted exactly as
the growth of ZooKeeper's last zxid (``srvr``: every create/set/delete/multi is one transaction
of ZooKeeper's; reads, watches and session pings are not), so the baseline's figure shows what the
rest of the cluster writes meanwhile (normally 0). Finally the committed records are read back by
our Consumer with isolation_level=read_committed and read_uncommitted (records/s of each): what
read_committed costs a reader.

    python bench/txn_bench.py [--txns 200] [--sizes 1,10,100] [--partitions 3] [--json] [--set KEY=VALUE]

(``--set transaction.partition.verification.enable=false``: without the leaders' verification of
each transaction's first batch per partition, KIP-890 part 1 - what it costs.)
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from client.connection import ClusterView
from client.consumer import Consumer
from client.ops.local_cluster import LocalCluster, four_letter_word
from client.producer import Producer
from proto import minikafka_pb2 as pb

TOPIC = "txn-bench"
VALUE = b"v" * 100


def create_topic(bootstrap: str, partitions: int) -> None:
    view = ClusterView(bootstrap)
    conn = view.connection(view.bootstrap[0])
    resp = conn.api.CreateTopics(pb.CreateTopicsRequest(topics=[pb.CreatableTopic(
        name=TOPIC, num_partitions=partitions, replication_factor=3, configs={"min.insync.replicas": "2"})],
        timeout_ms=30000), timeout=40)
    for t in resp.topics:
        if t.error_code != pb.ErrorCode.NONE:
            raise SystemExit(f"cannot create {t.name}: {t.error_message}")
    view.close()


def broker_cpu_s(pids: dict[int, int]) -> float:
    """User + system CPU seconds so far of the broker processes together (/proc/<pid>/stat 14, 15)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids.values():
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return total


def zxid(zk_connect: str) -> int:
    """ZooKeeper's last committed zxid (``srvr``): it grows by one per write (create, set, delete, multi)."""
    host, _, port = zk_connect.split(",")[0].rpartition(":")
    for line in four_letter_word(host, int(port), "srvr").splitlines():
        if line.startswith("Zxid:"):
            return int(line.split(":", 1)[1].strip(), 16) & 0xFFFFFFFF  # the counter (low 32 bits)
    raise SystemExit("ZooKeeper's srvr answer has no Zxid line")


def measured(case: Callable[[], tuple[int, int, float]], pids: dict[int, int], zk: str) -> dict[str, Any]:
    """Run ``case`` (-> units, records, seconds) and add the brokers' CPU and ZooKeeper's writes."""
    z0, c0, t0 = zxid(zk), broker_cpu_s(pids), os.times()
    units, records, seconds = case()
    z1, c1, t1 = zxid(zk), broker_cpu_s(pids), os.times()
    return {"units": units, "records": records, "seconds": round(seconds, 3),
            "per_sec": round(units / seconds, 1), "records_per_sec": round(records / seconds, 1),
            "broker_cpu_ms_per_unit": round((c1 - c0) * 1000 / units, 2),
            "client_cpu_ms_per_unit": round(((t1.user - t0.user) + (t1.system - t0.system)) * 1000 / units, 2),
            "zk_writes_per_unit": round((z1 - z0) / units, 2)}


def run_transactions(bootstrap: str, txns: int, size: int) -> tuple[int, int, float]:
    with Producer(bootstrap, transactional_id=f"txn-bench-{size}", linger_ms=5) as p:
        p.init_transactions()
        start = time.perf_counter()
        for _ in range(txns):
            p.begin_transaction()
            for _ in range(size):
                p.send(TOPIC, VALUE)
            p.commit_transaction()
        return txns, txns * size, time.perf_counter() - start


def run_idempotent(bootstrap: str, txns: int, size: int) -> tuple[int, int, float]:
    with Producer(bootstrap, acks="all", enable_idempotence=True, linger_ms=5) as p:
        p.send(TOPIC, VALUE).result(30)  # the producer id and metadata before the clock starts
        start = time.perf_counter()
        for _ in range(txns):
            for _ in range(size):
                p.send(TOPIC, VALUE)
            p.flush()
        return txns, txns * size, time.perf_counter() - start


def read_all(bootstrap: str, partitions: int, isolation: str, expected: int) -> dict[str, Any]:
    c = Consumer(bootstrap_servers=bootstrap, isolation_level=isolation, auto_offset_reset="earliest")
    try:
        c.assign([(TOPIC, p) for p in range(partitions)])
        c.seek_to_beginning()
        got = 0
        start = time.perf_counter()
        deadline = time.monotonic() + 120
        while got < expected and time.monotonic() < deadline:
            got += len(c.poll(500))
        seconds = time.perf_counter() - start
    finally:
        c.close(autocommit=False)
    return {"records": got, "seconds": round(seconds, 3), "records_per_sec": round(got / seconds, 1)}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--txns", type=int, default=200, help="transactions per case (default 200)")
    ap.add_argument("--sizes", default="1,10,100", help="records per transaction, comma-separated")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker config of the bench's cluster (repeatable), e.g. "
                         "transaction.partition.verification.enable=false")
    return ap


def main() -> None:
    args = build_parser().parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    root = Path(tempfile.mkdtemp(prefix="txn-bench-"))
    overrides = {"zookeeper.session.timeout.ms": "10000"}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item}: KEY=VALUE")
        overrides[key.strip()] = value.strip()
    cluster = LocalCluster(root / "cluster", broker_overrides=overrides)
    cases: dict[str, Any] = {}
    try:
        state = cluster.up(3)
        bs, zk = state.bootstrap_servers, state.zookeeper_connect
        pids = {bid: b.pid for bid, b in state.brokers.items()}
        create_topic(bs, args.partitions)
        for n in sizes:
            cases[str(n)] = {
                "idempotent": measured(functools.partial(run_idempotent, bs, args.txns, n), pids, zk),
                "transactional": measured(functools.partial(run_transactions, bs, args.txns, n), pids, zk),
            }
        total = sum(2 * args.txns * n for n in sizes) + len(sizes)  # + each baseline's first record
        reads = {"read_uncommitted": read_all(bs, args.partitions, "read_uncommitted", total),
                 "read_committed": read_all(bs, args.partitions, "read_committed", total)}
    finally:
        cluster.down()
        shutil.rmtree(root, ignore_errors=True)
    result = {"txns_per_case": args.txns, "partitions": args.partitions, "value_size": len(VALUE),
              "cases": cases, "reads": reads}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.txns} transactions (or flushes) per case, {len(VALUE)}-byte keyless records, "
          f"{args.partitions} partitions, RF 3, acks=all; 3 brokers and ZooKeeper on this machine")
    print(f"{'records/txn':>11} {'case':<13} {'txn/s':>8} {'records/s':>10} {'broker CPU ms/txn':>18} "
          f"{'client CPU ms/txn':>18} {'ZK writes/txn':>14}")
    for n_records, pair in cases.items():
        for name, r in pair.items():
            print(f"{n_records:>11} {name:<13} {r['per_sec']:>8} {r['records_per_sec']:>10} "
                  f"{r['broker_cpu_ms_per_unit']:>18} {r['client_cpu_ms_per_unit']:>18} {r['zk_writes_per_unit']:>14}")
    for name, r in reads.items():
        print(f"read back, {name}: {r['records']} records in {r['seconds']} s ({r['records_per_sec']} records/s)")


if __name__ == "__main__":
    main()
