"""``minikafka groups``: mirrors kafka-consumer-groups.sh (``--list/--describe/--reset-offsets/--delete/
--delete-offsets``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from client.admin import AdminClient
from client.cli.tool_args import (
    add_connection_args,
    bootstrap_from_args,
    print_result,
    security_from_args,
    warn_if_zookeeper_given,
)
from client.structs import TopicPartition
from proto import errors


def clamp_notices(requested: int, plan: dict[TopicPartition, int]) -> list[str]:
    """kafka-consumer-groups' warnings when --to-offset lies outside a partition's range (it clamps)."""
    out = []
    for tp, new in sorted(plan.items()):
        if new < requested:
            out.append(f"New offset ({requested}) is higher than latest offset for topic partition "
                       f"{tp.topic}-{tp.partition}. Value will be set to {new}")
        elif new > requested:
            out.append(f"New offset ({requested}) is lower than earliest offset for topic partition "
                       f"{tp.topic}-{tp.partition}. Value will be set to {new}")
    return out


def add_parser(sub: Any) -> None:
    g = sub.add_parser("groups", help="list, describe, reset consumer groups (kafka-consumer-groups)")
    add_connection_args(g, zookeeper_ignored=True)
    gaction = g.add_mutually_exclusive_group(required=True)
    for a, text in (("list", "list group ids"), ("describe", "a group's offsets, lag and owners"),
                    ("reset-offsets", "move a group's committed offsets (dry run without --execute)"),
                    ("delete", "delete groups without members, and their committed offsets"),
                    ("delete-offsets", "delete a group's committed offsets of --topic (KIP-496)")):
        gaction.add_argument(f"--{a}", action="store_true", help=text)
    g.add_argument("--group", action="append", help="the consumer group id (repeatable with --delete)")
    g.add_argument("--topic", help="with --reset-offsets: the topic whose offsets move; with --delete-offsets: "
                                    "TOPIC or TOPIC:P,Q,... (every partition when none given)")
    target = g.add_mutually_exclusive_group()
    target.add_argument("--to-earliest", action="store_true", help="to each partition's log start offset")
    target.add_argument("--to-latest", action="store_true", help="to each partition's high watermark")
    target.add_argument("--to-offset", type=int,
                        help="to this offset (clamped into each partition's range, with a warning)")
    target.add_argument("--to-datetime", type=int, metavar="EPOCH_MS",
                        help="to the first offset at or after this time (ms since the epoch)")
    g.add_argument("--execute", action="store_true", help="apply the reset (default: dry run)")
    g.set_defaults(func=cmd_groups)


def cmd_groups(args: argparse.Namespace) -> int:
    warn_if_zookeeper_given(args)
    # Groups go through the brokers' group coordinator: bootstrap servers are enough.
    with AdminClient(bootstrap_from_args(args), security=security_from_args(args)) as admin:
        if args.list:
            groups = admin.list_groups()
            print_result(args, groups, "\n".join(groups))
            return 0
        if not args.group:
            raise errors.InvalidRequestError("--group is required")
        if args.delete:
            return delete_groups(admin, args)
        if len(args.group) > 1:
            raise errors.InvalidRequestError("one --group only (several are for --delete)")
        args.group = args.group[0]
        if args.delete_offsets:
            return delete_offsets(admin, args)
        if args.describe:
            rows = admin.describe_group(args.group)
            if args.output == "json":
                print(json.dumps([{"group": args.group, "topic": r.topic, "partition": r.partition,
                                   "current_offset": r.current_offset, "log_end_offset": r.log_end_offset,
                                   "lag": r.lag, "consumer_id": r.owner} for r in rows], indent=2))
                return 0
            print(f"{'GROUP':<20} {'TOPIC':<20} {'PARTITION':>9} {'CURRENT-OFFSET':>14} {'LOG-END-OFFSET':>14} "
                  f"{'LAG':>6}  CONSUMER-ID")
            for r in rows:
                cur = "-" if r.current_offset is None else r.current_offset
                lag = "-" if r.lag is None else r.lag
                print(f"{args.group:<20} {r.topic:<20} {r.partition:>9} {cur!s:>14} {r.log_end_offset:>14} "
                      f"{lag!s:>6}  {r.owner or '-'}")
            return 0
        if not args.topic:
            raise errors.InvalidRequestError("--topic is required with --reset-offsets")
        if args.to_earliest:
            to, value = "earliest", None
        elif args.to_latest:
            to, value = "latest", None
        elif args.to_offset is not None:
            to, value = "offset", args.to_offset
        elif args.to_datetime is not None:
            to, value = "timestamp", args.to_datetime
        else:
            raise errors.InvalidRequestError("give --to-earliest, --to-latest, --to-offset or --to-datetime")
        plan = admin.reset_group_offsets(args.group, args.topic, to, value, execute=args.execute)
        for warning in clamp_notices(value, plan) if to == "offset" and value is not None else []:
            print(f"warning: {warning}", file=sys.stderr)
        if args.output == "json":
            print(json.dumps([{"topic": tp.topic, "partition": tp.partition, "new_offset": o}
                              for tp, o in sorted(plan.items())], indent=2))
        else:
            print(f"{'GROUP':<20} {'TOPIC':<20} {'PARTITION':>9} {'NEW-OFFSET':>10}")
            for tp, o in sorted(plan.items()):
                print(f"{args.group:<20} {tp.topic:<20} {tp.partition:>9} {o:>10}")
            if not args.execute:
                print("(dry run: add --execute to apply)")
    return 0


def delete_groups(admin: AdminClient, args: argparse.Namespace) -> int:
    """kafka-consumer-groups --delete: one line per group; exit 1 if any was not deleted."""
    results = admin.delete_groups(args.group)
    if args.output == "json":
        print(json.dumps([{"group": g, "error": None if c == 0 else errors.for_code(c).name}
                          for g, c in results.items()], indent=2))
    else:
        deleted = [g for g, c in results.items() if c == 0]
        if deleted:
            print("Deletion of requested consumer groups (" + ", ".join(f"'{g}'" for g in deleted)
                  + ") was successful.")
        for g, c in results.items():
            if c != 0:
                print(f"Deletion of group '{g}' failed: {errors.for_code(c).name} ({errors.for_code(c).description})",
                      file=sys.stderr)
    return 0 if all(c == 0 for c in results.values()) else 1


def delete_offsets(admin: AdminClient, args: argparse.Namespace) -> int:
    """kafka-consumer-groups --delete-offsets --group G --topic T[:P,...]: exit 1 on any error."""
    if not args.topic:
        raise errors.InvalidRequestError("--topic is required with --delete-offsets")
    topic, _, parts = args.topic.partition(":")
    if parts:
        try:
            partitions = [int(p) for p in parts.split(",")]
        except ValueError:
            raise errors.InvalidRequestError(f"--topic {args.topic!r}: expected TOPIC or TOPIC:P,Q,...") from None
    else:
        admin.view.refresh([topic])
        partitions = admin.view.partitions_of(topic)
        if not partitions:
            raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
    code, results = admin.delete_group_offsets(args.group, [(topic, p) for p in partitions])
    if code != 0:
        raise errors.for_code(code)(f"deleting offsets of group {args.group!r}")
    if args.output == "json":
        print(json.dumps([{"topic": t, "partition": p, "error": None if c == 0 else errors.for_code(c).name}
                          for (t, p), c in sorted(results.items())], indent=2))
    else:
        print(f"{'TOPIC':<20} {'PARTITION':>9}  STATUS")
        for (t, p), c in sorted(results.items()):
            print(f"{t:<20} {p:>9}  {'Successful' if c == 0 else 'Error: ' + errors.for_code(c).name}")
    return 0 if all(c == 0 for c in results.values()) else 1
