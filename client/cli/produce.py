"""``minikafka produce``: mirrors kafka-console-producer.sh (records from stdin, one per line)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from client.cli.tool_args import (
    add_connection_args,
    bootstrap_from_args,
    parse_acks,
    parse_key_values,
    security_from_args,
)
from client.cli.topic_checks import ensure_topic_for_produce
from client.producer import Producer
from proto import errors


def add_parser(sub: Any) -> None:
    p = sub.add_parser("produce", help="records from stdin, one per line (kafka-console-producer)")
    add_connection_args(p)
    p.add_argument("--topic", required=True, help="the topic to write to")
    p.add_argument("--partition", type=int, default=None, help="this partition (default: by key, else sticky)")
    p.add_argument("--acks", default="all", choices=["0", "1", "all", "-1"],
                   help="replicas that must have a record before it counts (default all)")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="parse.key=true, key.separator=:")
    p.add_argument("--compression", default=None, choices=["none", "gzip", "zstd"], help="batch compression")
    p.set_defaults(func=cmd_produce)


def cmd_produce(args: argparse.Namespace) -> int:
    props = parse_key_values(args.property)
    parse_key = props.get("parse.key", "false").lower() == "true"
    sep = props.get("key.separator", "\t")
    acks = parse_acks(args.acks)
    count = 0
    futures = []
    ensure_topic_for_produce(args, args.topic)
    with Producer(bootstrap_from_args(args), security=security_from_args(args), acks=acks, enable_idempotence=acks == "all",
                  compression_type=args.compression) as producer:
        for line in sys.stdin:
            line = line.rstrip("\n")
            key: bytes | None = None
            if parse_key:
                k, found, v = line.partition(sep)
                if not found:
                    raise errors.InvalidRecordError(f"no key separator {sep!r} in line {count + 1}: {line!r}")
                key, line = k.encode(), v
            futures.append(producer.send(args.topic, line.encode(), key=key, partition=args.partition))
            count += 1
        producer.flush()
    for f in futures:
        f.result()
    if args.output == "json":
        print(json.dumps({"records": count}))
    return 0
