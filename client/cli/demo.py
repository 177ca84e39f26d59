"""``minikafka demo log | cluster``: show the system working (:mod:`client.ops.storage_demo`, :mod:`client.ops.cluster_demo`)."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="show the system working: `log` (storage alone) or `cluster`")
    p.add_argument("what", choices=["log", "cluster"], help="which demo")
    p.add_argument("--dir", default=None, help="log directory (log) or cluster directory (cluster, .minikafka)")
    p.add_argument("--records", type=int, default=None, help="records to write (log: 10000, cluster: 5)")
    p.add_argument("--bootstrap-server", default=None, help="cluster demo: brokers to bootstrap from")
    p.add_argument("--topic", default="quickstart", help="cluster demo: topic to create and use")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.what == "cluster":
        from client.ops.cluster_demo import run_cluster_demo

        args.dir = args.dir or ".minikafka"
        args.records = args.records or 5
        return run_cluster_demo(args)
    args.records = args.records or 10_000
    from client.ops.storage_demo import run_log_demo

    return run_log_demo(args)
