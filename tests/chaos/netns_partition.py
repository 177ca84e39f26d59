"""Chaos scenario 8, the part that runs inside the test's hub network namespace.

Network layout (created and removed by ``test_scenarios.py``, nothing outside these namespaces
is touched): a hub namespace with a bridge at ``<prefix>.254`` holding ZooKeeper and this
driver (the workload's producers and the final reader), and one namespace per broker, each
with a veth on the bridge at ``<prefix>.<id>``. The partition cuts one follower off from the
other brokers - blackhole routes both ways in the brokers' namespaces - while ZooKeeper and the
clients still reach everyone. Then it heals.

It starts ZooKeeper and the 3 brokers, runs the standard chaos workload (RF=3,
min.insync.replicas=2, acks=all, idempotent, unique values) on a one-partition topic,
partitions the follower that is neither the leader nor the controller, waits for the ISR to
shrink without it, keeps writing, heals, waits for the ISR to grow back, then checks the
history and the replicas. The last line of output is one JSON object with what it saw.

    ip netns exec HUB python tests/chaos/netns_partition.py --prefix 10.231.0 --netns-prefix mkp1 --dir D
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/helpers.py

from helpers import wait_for

from client.connection import ClusterView
from client.ops.chaos import Workload
from client.ops.history import OK, check
from client.ops.local_cluster import LocalCluster, ZooKeeperServer
from client.ops.verify_replicas import verify
from proto import minikafka_pb2 as pb

TOPIC = "chaos"

BROKER_CONFIG = {
    "zookeeper.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "100",
    "request.timeout.ms": "5000",
    "controlled.shutdown.retry.backoff.ms": "200",
    "leader.imbalance.check.interval.seconds": "3600",
}


def route(netns: str, action: str, address: str) -> None:
    subprocess.run(["ip", "-n", netns, "route", action, "blackhole", f"{address}/32"], check=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", required=True, help="first three octets of the namespaces' subnet")
    ap.add_argument("--netns-prefix", required=True, help="broker namespaces are <this>-b1..b3")
    ap.add_argument("--dir", required=True, type=Path)
    ap.add_argument("--partition-seconds", type=float, default=2.0, help="writing on after the ISR shrank")
    args = ap.parse_args()

    hub_ip = f"{args.prefix}.254"
    ns = {i: (f"{args.netns_prefix}-b{i}", f"{args.prefix}.{i}") for i in (1, 2, 3)}
    zk = ZooKeeperServer(args.dir / "zookeeper", host=hub_ip)
    zk.start()
    cluster = LocalCluster(args.dir / "cluster", zookeeper=zk.connect, broker_overrides=BROKER_CONFIG,
                           broker_netns=ns)
    out: dict[str, Any] = {}
    cut: list[tuple[str, str]] = []
    try:
        state = cluster.up(3)
        view = ClusterView(state.bootstrap_servers, timeout_s=5)
        resp = view.connection(view.bootstrap[0]).api.CreateTopics(pb.CreateTopicsRequest(topics=[
            pb.CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=3,
                              configs={"min.insync.replicas": "2"})], timeout_ms=15000), timeout=20)
        assert resp.topics[0].error_code == pb.ErrorCode.NONE, resp.topics[0].error_message

        def partition_state() -> tuple[int, int, tuple[int, ...]]:
            view.refresh([TOPIC])
            pl = view.partitions[(TOPIC, 0)]
            return pl.leader, pl.leader_epoch, tuple(sorted(pl.isr))

        wait_for(lambda: len(partition_state()[2]) == 3, timeout_s=30, what="a full ISR")
        leader, epoch_before, isr_before = partition_state()
        controller = view.controller_id
        follower = next(b for b in (1, 2, 3) if b not in (leader, controller))
        out.update(leader=leader, controller=controller, follower=follower, isr_before=list(isr_before))

        workload = Workload(state.bootstrap_servers, TOPIC, 1, rate=150)
        workload.start()
        time.sleep(1.0)
        others = [b for b in (1, 2, 3) if b != follower]
        for b in others:  # the follower cannot reach the others, nor they it; ZooKeeper and clients can
            route(ns[follower][0], "add", ns[b][1])
            cut.append((ns[follower][0], ns[b][1]))
            route(ns[b][0], "add", ns[follower][1])
            cut.append((ns[b][0], ns[follower][1]))
        started = time.monotonic()
        isr_during = wait_for(lambda: (s := partition_state()[2]) and follower not in s and s,
                              timeout_s=30, what="the ISR to shrink without the partitioned follower")
        out["isr_during"] = list(isr_during)
        out["shrink_seconds"] = round(time.monotonic() - started, 1)
        out["follower_still_registered"] = follower in cluster.zk_view()["registered"]
        time.sleep(args.partition_seconds)
        for netns, address in cut:
            route(netns, "del", address)
        cut.clear()
        healed = time.monotonic()
        isr_after = wait_for(lambda: len(s := partition_state()[2]) == 3 and s, timeout_s=60,
                             what="the ISR to grow back")
        out["isr_after"] = list(isr_after)
        out["regrow_seconds"] = round(time.monotonic() - healed, 1)
        writes = workload.stop()
        report = check(writes, workload.read_all())
        replicas = verify(view, TOPIC)
        leader_after, epoch_after, _isr = partition_state()
        out.update(writes_ok=report.writes.get(OK, 0), valid=report.valid, summary=report.summary(),
                   replicas_identical=all(e["status"] == "OK" for e in replicas),
                   leader_after=leader_after, epoch_before=epoch_before, epoch_after=epoch_after)
        view.close()
    finally:
        for netns, address in cut:
            subprocess.run(["ip", "-n", netns, "route", "del", "blackhole", f"{address}/32"], check=False)
        cluster.down(timeout_s=15)
        zk.stop()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
