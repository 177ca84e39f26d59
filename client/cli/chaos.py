"""``minikafka chaos``: faults under load against the local cluster (:mod:`client.ops.chaos`)."""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

from client.connection import ClusterView
from client.discovery import local_cluster_dir
from client.ops.chaos import SCENARIOS, Workload, inject
from client.ops.history import check
from client.ops.local_cluster import ClusterState, LocalCluster, pid_alive
from client.ops.verify_replicas import verify
from proto import errors
from proto import minikafka_pb2 as pb


def add_parser(sub: Any) -> None:
    p = sub.add_parser("chaos", help="inject faults into the local cluster under load and check the history")
    p.add_argument("--dir", type=Path, default=local_cluster_dir())
    p.add_argument("--scenario", choices=SCENARIOS, default="soak")
    p.add_argument("--duration", type=float, default=30.0, help="seconds of faults")
    p.add_argument("--interval", type=float, default=3.0, help="seconds between faults")
    p.add_argument("--rate", type=float, default=300.0, help="writes per second per producer")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--output", choices=["table", "json"], default="table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    cluster = LocalCluster(args.dir)
    state = ClusterState.load(args.dir)
    cluster.state = state
    view = ClusterView(state.bootstrap_servers, security=state.client_security())
    topic = f"chaos-{int(time.time())}"
    conn = view.connection(view.bootstrap[0])
    resp = conn.api.CreateTopics(pb.CreateTopicsRequest(topics=[pb.CreatableTopic(
        name=topic, num_partitions=2, replication_factor=min(3, len(state.brokers)),
        configs={"min.insync.replicas": "2" if len(state.brokers) >= 3 else "1"})], timeout_ms=30000), timeout=40)
    if resp.topics[0].error_code != pb.ErrorCode.NONE:
        raise errors.for_code(resp.topics[0].error_code)(resp.topics[0].error_message)
    workload = Workload(state.bootstrap_servers, topic, 2, rate=args.rate, security=state.client_security())
    workload.start()
    faults: list[str] = []
    deadline = time.monotonic() + args.duration
    while time.monotonic() < deadline:
        time.sleep(min(args.interval, max(0.0, deadline - time.monotonic())))
        if time.monotonic() >= deadline:
            break
        inject(cluster, view, topic, args.scenario, rng, faults)
    writes = workload.stop()
    for b in state.brokers:
        if not pid_alive(cluster.broker(b).pid):
            cluster.start(b)
            cluster.wait_registered({b}, 60)
    report = check(writes, workload.read_all())
    replicas = verify(view, topic)
    view.close()
    result = {"scenario": args.scenario, "duration_s": args.duration, "faults": faults, "writes": report.writes,
              "anomalies": report.anomalies, "replicas_identical": all(e["status"] == "OK" for e in replicas)}
    if args.output == "json":
        print(json.dumps(result, indent=2))
    else:
        print(f"scenario {args.scenario}: {len(faults)} faults injected ({', '.join(faults) or 'none'})")
        print(report.summary())
        print("replicas identical below the HW: " + ("yes" if result["replicas_identical"] else "NO"))
    return 0 if report.valid and result["replicas_identical"] else 1
