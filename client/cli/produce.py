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
    p.add_argument("--compression", "--compression-codec", default=None,
                   choices=["none", "gzip", "snappy", "lz4", "zstd"], help="batch compression")
    p.add_argument("--producer-property", action="append", default=[], metavar="KEY=VALUE",
                   help="producer settings as Kafka names them: " + ", ".join(sorted(PRODUCER_PROPERTIES)))
    p.set_defaults(func=cmd_produce)


# kafka-console-producer's --producer-property names -> the Producer's arguments (ints).
PRODUCER_PROPERTIES = {"delivery.timeout.ms": "delivery_timeout_ms", "request.timeout.ms": "request_timeout_ms",
                       "linger.ms": "linger_ms", "batch.size": "batch_size", "retry.backoff.ms": "retry_backoff_ms",
                       "max.block.ms": "max_block_ms", "max.request.size": "max_request_size",
                       "buffer.memory": "buffer_memory", "max.in.flight.requests.per.connection": "max_in_flight"}


def producer_settings(items: list[str]) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for key, value in parse_key_values(items, "--producer-property").items():
        if key not in PRODUCER_PROPERTIES:
            raise errors.InvalidConfigError(f"--producer-property {key!r} is not known here "
                                            f"(known: {', '.join(sorted(PRODUCER_PROPERTIES))})")
        try:
            settings[PRODUCER_PROPERTIES[key]] = int(value)
        except ValueError:
            raise errors.InvalidConfigError(f"--producer-property {key}: expected a number, got {value!r}") from None
    return settings


def cmd_produce(args: argparse.Namespace) -> int:
    props = parse_key_values(args.property, "--property")
    settings = producer_settings(args.producer_property)
    parse_key = props.get("parse.key", "false").lower() == "true"
    sep = props.get("key.separator", "\t")
    acks = parse_acks(args.acks)
    count = 0
    futures = []
    ensure_topic_for_produce(args, args.topic)
    with Producer(bootstrap_from_args(args), security=security_from_args(args), acks=acks, enable_idempotence=acks == "all",
                  compression_type=args.compression, **settings) as producer:
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
