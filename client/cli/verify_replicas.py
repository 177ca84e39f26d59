"""``minikafka verify-replicas``: replicas byte-identical below the HW; compacted topics by the latest
record of every key (:mod:`client.ops.verify_replicas`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from client.connection import ClusterView
from client.discovery import local_cluster_dir
from client.ops.local_cluster import ClusterError, ClusterState, local_client_security
from client.ops.verify_replicas import verify
from proto import errors
from proto.transport import PLAINTEXT_SECURITY


def add_parser(sub: Any) -> None:
    p = sub.add_parser("verify-replicas", help="check that every replica holds the same batches below the HW")
    p.add_argument("--bootstrap-server", default=None, help="host:port[,host:port] (default: the local cluster)")
    p.add_argument("--dir", type=Path, default=local_cluster_dir(), help="local cluster directory (default .minikafka)")
    p.add_argument("--topic", default=None, help="only this topic (default: every topic)")
    p.add_argument("--output", choices=["table", "json"], default="table", help="table (default) or json")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    bootstrap = args.bootstrap_server
    if not bootstrap:
        try:
            bootstrap = ClusterState.load(args.dir).bootstrap_servers
        except ClusterError:
            raise errors.InvalidRequestError(f"no --bootstrap-server and no local cluster in {args.dir}") from None
    security = local_client_security(args.dir) if not args.bootstrap_server else PLAINTEXT_SECURITY
    view = ClusterView(bootstrap, security=security)
    try:
        report = verify(view, args.topic)
    finally:
        view.close()
    if args.output == "json":
        print(json.dumps(report, indent=2))
    else:
        for e in report:
            print(f"{e['topic']}-{e['partition']}\t{e['status']}\t{e['detail']}")
    bad = [e for e in report if e["status"] != "OK"]
    if bad and args.output != "json":
        print(f"{len(bad)} of {len(report)} partitions not verified identical", file=sys.stderr)
    return 1 if any(e["status"] == "DIVERGED" for e in report) else (2 if bad else 0)
