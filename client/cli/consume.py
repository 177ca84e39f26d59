"""``minikafka consume``: mirrors kafka-console-consumer.sh (print a topic's records)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from client.cli.tool_args import (
    add_connection_args,
    bootstrap_from_args,
    parse_key_values,
    security_from_args,
    warn_if_zookeeper_given,
)
from client.cli.topic_checks import require_topic
from client.consumer import Consumer, CorruptRecordError
from client.structs import TopicPartition
from proto import errors


def add_parser(sub: Any) -> None:
    c = sub.add_parser("consume", help="print records (kafka-console-consumer)")
    add_connection_args(c, zookeeper_ignored=True)
    c.add_argument("--topic", required=True, help="the topic to read (it must exist)")
    c.add_argument("--group", default=None, help="consumer group: share partitions, commit offsets")
    c.add_argument("--from-beginning", action="store_true",
                   help="start at the earliest offset when there is no committed one (default: latest)")
    c.add_argument("--partition", type=int, default=None, help="read only this partition (no group)")
    c.add_argument("--offset", default=None, help="earliest, latest or a number (with --partition)")
    c.add_argument("--max-messages", type=int, default=None, help="exit after this many records")
    c.add_argument("--timeout-ms", type=int, default=None, help="exit after this long without records")
    c.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="print.key=true, print.offset=true, print.partition=true, print.timestamp=true, "
                        "print.headers=true, key.separator=TAB, headers.separator=',', headers.key.separator=':'")
    c.set_defaults(func=cmd_consume)


def cmd_consume(args: argparse.Namespace) -> int:
    warn_if_zookeeper_given(args)
    props = parse_key_values(args.property, "--property")
    show = {k: props.get(f"print.{k}", "false").lower() == "true" for k in ("key", "offset", "partition",
                                                                          "timestamp", "headers")}
    sep = props.get("key.separator", "\t")
    headers_sep, header_kv_sep = props.get("headers.separator", ","), props.get("headers.key.separator", ":")
    reset = "earliest" if args.from_beginning else "latest"
    if args.offset not in (None, "earliest", "latest"):
        int(args.offset)  # a bad --offset is reported before anything is asked of the cluster
    require_topic(args, args.topic)
    consumer = Consumer(bootstrap_servers=bootstrap_from_args(args), security=security_from_args(args), group_id=args.group, auto_offset_reset=reset,
                        enable_auto_commit=True,
                        auto_commit_interval_ms=1000)
    n = 0
    try:
        if args.partition is not None:
            tp = TopicPartition(args.topic, args.partition)
            consumer.assign([tp])
            if args.offset in (None, "latest") and not args.from_beginning:
                consumer.seek_to_end(tp)
            elif args.offset == "earliest" or (args.from_beginning and args.offset is None):
                consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, int(args.offset))
        else:
            consumer.subscribe([args.topic])
        idle_limit = (args.timeout_ms / 1000.0) if args.timeout_ms is not None else float("inf")
        last = time.monotonic()
        while args.max_messages is None or n < args.max_messages:
            records = consumer.poll(timeout_ms=200, max_records=(args.max_messages - n) if args.max_messages
                                    else None)
            if not records:
                if time.monotonic() - last >= idle_limit:
                    break
                continue
            last = time.monotonic()
            for r in records:
                n += 1
                if args.output == "json":
                    print(json.dumps({"topic": r.topic, "partition": r.partition, "offset": r.offset,
                                      "timestamp": r.timestamp, "key": r.key.decode("utf-8", "replace")
                                      if r.key is not None else None,
                                      "value": r.value.decode("utf-8", "replace") if r.value is not None else None}))
                    continue
                fields = []
                if show["timestamp"]:
                    fields.append(f"CreateTime:{r.timestamp}")
                if show["partition"]:
                    fields.append(f"Partition:{r.partition}")
                if show["offset"]:
                    fields.append(f"Offset:{r.offset}")
                if show["headers"]:  # Kafka's DefaultMessageFormatter: k:v,k:v or NO_HEADERS
                    fields.append(headers_sep.join(
                        f"{h.key}{header_kv_sep}{h.value.decode('utf-8', 'replace') if h.value is not None else 'null'}"
                        for h in r.headers) if r.headers else "NO_HEADERS")
                if show["key"]:
                    fields.append(r.key.decode("utf-8", "replace") if r.key is not None else "null")
                fields.append(r.value.decode("utf-8", "replace") if r.value is not None else "null")
                print(sep.join(fields), flush=True)
        if args.group:
            consumer.commit()
    except KeyboardInterrupt:
        # Ctrl-C is how a console consumer usually ends: the count is printed all the same (Kafka's
        # does), and the exit status is 130 as for any interrupted command.
        if args.output != "json":
            print(f"Processed a total of {n} messages", file=sys.stderr)
        raise
    except CorruptRecordError as e:
        raise errors.CorruptMessageError(
            f"{e.message}; to skip it: consume --topic {e.topic} --partition {e.partition} "
            f"--offset {e.next_offset}") from None
    finally:
        consumer.close()
    if args.output != "json":
        print(f"Processed a total of {n} messages", file=sys.stderr)
    return 0
