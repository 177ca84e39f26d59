"""``minikafka log-dirs``: mirrors kafka-log-dirs.sh (DescribeLogDirs, asked of each broker).

``--describe [--topic-list a,b] [--broker-list 1,2]`` prints Kafka's two lines and its JSON: per
broker, per log directory, the partitions in it with their size, offset lag and isFuture
(``--output json``: the JSON alone).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from client.admin import AdminClient
from client.cli.tool_args import add_connection_args, bootstrap_from_args, security_from_args
from proto import errors
from proto import minikafka_pb2 as pb
from proto.names import validate_topic_name


def add_parser(sub: Any) -> None:
    p = sub.add_parser("log-dirs", help="describe the brokers' log directories (kafka-log-dirs)")
    add_connection_args(p)
    p.add_argument("--describe", action="store_true", help="describe the log directories (required)")
    p.add_argument("--topic-list", default="", help="comma-separated topics (default: all)")
    p.add_argument("--broker-list", default="", help="comma-separated broker ids (default: all)")
    p.set_defaults(func=cmd_log_dirs)


def _ints(value: str, what: str) -> list[int]:
    try:
        return [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise errors.InvalidRequestError(f"{what}: expected comma-separated integers, got {value!r}") from None


def log_dirs_json(answers: dict[int, pb.DescribeLogDirsResponse], topics: set[str]) -> dict[str, Any]:
    """Kafka's LogDirsCommand JSON of the brokers' answers, keeping the partitions of ``topics``
    (all when empty)."""
    brokers = []
    for broker, resp in sorted(answers.items()):
        dirs = []
        for d in resp.results:
            parts = [{"partition": f"{t.name}-{p.partition}", "size": p.size, "offsetLag": p.offset_lag,
                      "isFuture": p.is_future}
                     for t in d.topics if not topics or t.name in topics for p in t.partitions]
            dirs.append({"logDir": d.log_dir, "error": None if d.error_code == 0 else pb.ErrorCode.Name(d.error_code),
                         "partitions": parts})
        brokers.append({"broker": broker, "logDirs": dirs})
    return {"version": 1, "brokers": brokers}


def cmd_log_dirs(args: argparse.Namespace) -> int:
    if not args.describe:
        raise errors.InvalidRequestError("give --describe (the only action of log-dirs)")
    topics = {t.strip() for t in args.topic_list.split(",") if t.strip()}
    for t in topics:
        validate_topic_name(t)
    wanted = _ints(args.broker_list, "--broker-list")
    with AdminClient(bootstrap_from_args(args), security=security_from_args(args)) as admin:
        live = [b.broker_id for b in admin.describe_cluster_full().brokers]
        unknown = sorted(set(wanted) - set(live))
        if unknown:
            raise errors.BrokerNotAvailableError(f"broker(s) {','.join(map(str, unknown))} not found in the cluster")
        brokers = wanted or live
        if args.output != "json":
            print("Querying brokers for log directories information")
        answers = admin.describe_log_dirs(brokers)
        out = log_dirs_json(answers, topics)
        if args.output != "json":
            print(f"Received log directory information from brokers {','.join(map(str, sorted(answers)))}")
            print(json.dumps(out, separators=(",", ":")))
        else:
            print(json.dumps(out, indent=2))
    return 0
