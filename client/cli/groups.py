"""``minikafka groups``: mirrors kafka-consumer-groups.sh (``--list/--describe [--members|--state]/--reset-offsets/--delete/
--delete-offsets``)."""

from __future__ import annotations

import argparse
import datetime
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


def parse_datetime(value: str) -> int:
    """kafka-consumer-groups --to-datetime: ISO-8601 'YYYY-MM-DDTHH:mm:SS[.sss][zone]' (no zone: local
    time, as Kafka reads it), or ms since the epoch; returns ms since the epoch."""
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise errors.InvalidRequestError(f"--to-datetime {value!r}: expected YYYY-MM-DDTHH:mm:SS.sss "
                                         f"(optionally with a zone such as Z or +02:00) or ms since the epoch") from None
    if when.tzinfo is None:
        when = when.astimezone()  # local time
    return int(when.timestamp() * 1000)


def add_parser(sub: Any) -> None:
    g = sub.add_parser("groups", help="list, describe, reset, delete consumer groups (kafka-consumer-groups)")
    add_connection_args(g, zookeeper_ignored=True)
    gaction = g.add_mutually_exclusive_group(required=True)
    for a, text in (("list", "list group ids"), ("describe", "a group's offsets, lag and owners"),
                    ("reset-offsets", "move a group's committed offsets (dry run without --execute)"),
                    ("delete", "delete groups without members, and their committed offsets"),
                    ("delete-offsets", "delete a group's committed offsets of --topic (KIP-496)")):
        gaction.add_argument(f"--{a}", action="store_true", help=text)
    g.add_argument("--group", action="append", help="the consumer group id (repeatable with --describe/--delete)")
    g.add_argument("--all-groups", action="store_true", help="with --describe, --delete, --reset-offsets: every group")
    g.add_argument("--topic", help="with --reset-offsets: the topic whose offsets move; with --delete-offsets: "
                                    "TOPIC or TOPIC:P,Q,... (every partition when none given)")
    g.add_argument("--all-topics", action="store_true",
                   help="with --reset-offsets: every topic the group has committed offsets for")
    view = g.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true", help="with --describe: the members and their partitions")
    view.add_argument("--state", action="store_true",
                      help="with --describe: coordinator, assignment strategy, state, member count")
    g.add_argument("--verbose", action="store_true", help="with --describe --members: each member's partitions")
    target = g.add_mutually_exclusive_group()
    target.add_argument("--to-earliest", action="store_true", help="to each partition's log start offset")
    target.add_argument("--to-latest", action="store_true", help="to each partition's high watermark")
    target.add_argument("--to-offset", type=int,
                        help="to this offset (clamped into each partition's range, with a warning)")
    target.add_argument("--to-datetime", metavar="DATETIME",
                        help="to the first offset at or after this time: YYYY-MM-DDTHH:mm:SS.sss[zone] as Kafka, "
                             "or ms since the epoch")
    target.add_argument("--shift-by", type=int, metavar="N",
                        help="move each committed offset by N (negative: back), clamped into the partition's range")
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
        if args.all_groups and args.group:
            raise errors.InvalidRequestError("give --group or --all-groups, not both")
        if args.all_groups and args.delete_offsets:
            raise errors.InvalidRequestError("--delete-offsets takes one --group")
        names = admin.list_groups() if args.all_groups else (args.group or [])
        if not names:
            if args.all_groups:
                print("No consumer groups.", file=sys.stderr)
                return 0
            raise errors.InvalidRequestError("--group is required (or --all-groups)")
        if args.delete:
            args.group = names
            return delete_groups(admin, args)
        if args.describe:
            return describe(admin, args, names)
        if args.delete_offsets:
            if len(names) > 1:
                raise errors.InvalidRequestError("one --group only with --delete-offsets")
            args.group = names[0]
            return delete_offsets(admin, args)
        return reset_offsets(admin, args, names)


def describe(admin: AdminClient, args: argparse.Namespace, names: list[str]) -> int:
    """kafka-consumer-groups --describe [--members [--verbose] | --state], for each group."""
    out: list[dict[str, Any]] = []
    lines: list[str] = []
    if args.state:
        lines.append(f"{'GROUP':<20} {'COORDINATOR (ID)':<26} {'ASSIGNMENT-STRATEGY':<20} {'STATE':<20} #MEMBERS")
        for name in names:
            s = admin.describe_group_state(name)
            out.append({"group": s.group, "coordinator": s.coordinator, "coordinator_id": s.coordinator_id,
                        "assignment_strategy": s.assignment_strategy, "state": s.state, "members": s.members})
            lines.append(f"{s.group:<20} {f'{s.coordinator} ({s.coordinator_id})':<26} "
                         f"{s.assignment_strategy or '-':<20} {s.state:<20} {s.members}")
    elif args.members:
        lines.append(f"{'GROUP':<20} {'CONSUMER-ID':<48} {'HOST':<16} {'CLIENT-ID':<24} #PARTITIONS"
                     + ("  ASSIGNMENT" if args.verbose else ""))
        for name in names:
            members = admin.describe_group_members(name)
            if not members:
                print(f"Consumer group '{name}' has no active members.", file=sys.stderr)
            for m in members:
                parts = ", ".join(f"{tp.topic}({tp.partition})" for tp in m.partitions)
                out.append({"group": name, "consumer_id": m.consumer_id, "host": m.host, "client_id": m.client_id,
                            "group_instance_id": m.group_instance_id, "partitions": len(m.partitions),
                            "assignment": [[tp.topic, tp.partition] for tp in m.partitions]})
                lines.append(f"{name:<20} {m.consumer_id:<48} {m.host:<16} {m.client_id:<24} {len(m.partitions)}"
                             + (f"  {parts or '-'}" if args.verbose else ""))
    else:
        lines.append(f"{'GROUP':<20} {'TOPIC':<20} {'PARTITION':>9} {'CURRENT-OFFSET':>14} {'LOG-END-OFFSET':>14} "
                     f"{'LAG':>6}  {'CONSUMER-ID':<48} {'HOST':<16} CLIENT-ID")
        for name in names:
            for r in admin.describe_group(name):
                out.append({"group": name, "topic": r.topic, "partition": r.partition,
                            "current_offset": r.current_offset, "log_end_offset": r.log_end_offset, "lag": r.lag,
                            "consumer_id": r.owner, "member_id": r.consumer_id, "host": r.host,
                            "client_id": r.client_id})
                cur = "-" if r.current_offset is None else r.current_offset
                lag = "-" if r.lag is None else r.lag
                lines.append(f"{name:<20} {r.topic:<20} {r.partition:>9} {cur!s:>14} {r.log_end_offset:>14} "
                             f"{lag!s:>6}  {r.consumer_id or '-':<48} {r.host or '-':<16} {r.client_id or '-'}")
    if args.output == "json":
        print(json.dumps(out, indent=2))
    else:
        print("\n".join(lines))
    return 0


def reset_offsets(admin: AdminClient, args: argparse.Namespace, names: list[str]) -> int:
    """kafka-consumer-groups --reset-offsets (--topic T | --all-topics) with one target; a dry run
    unless --execute."""
    if bool(args.topic) == bool(args.all_topics):
        raise errors.InvalidRequestError("give --topic or --all-topics with --reset-offsets")
    value: int | None
    if args.to_earliest:
        to, value = "earliest", None
    elif args.to_latest:
        to, value = "latest", None
    elif args.to_offset is not None:
        to, value = "offset", args.to_offset
    elif args.to_datetime is not None:
        to, value = "timestamp", parse_datetime(args.to_datetime)
    elif args.shift_by is not None:
        to, value = "shift", args.shift_by
    else:
        raise errors.InvalidRequestError("give --to-earliest, --to-latest, --to-offset, --to-datetime or --shift-by")
    rows: list[tuple[str, TopicPartition, int]] = []
    for name in names:
        topics = [args.topic] if args.topic else sorted({r.topic for r in admin.describe_group(name)})
        for topic in topics:
            plan = admin.reset_group_offsets(name, topic, to, value, execute=args.execute)
            for warning in clamp_notices(value, plan) if to == "offset" and value is not None else []:
                print(f"warning: {warning}", file=sys.stderr)
            rows += [(name, tp, o) for tp, o in sorted(plan.items())]
    if args.output == "json":
        print(json.dumps([{"group": g, "topic": tp.topic, "partition": tp.partition, "new_offset": o}
                          for g, tp, o in rows], indent=2))
    else:
        print(f"{'GROUP':<20} {'TOPIC':<20} {'PARTITION':>9} {'NEW-OFFSET':>10}")
        for g, tp, o in rows:
            print(f"{g:<20} {tp.topic:<20} {tp.partition:>9} {o:>10}")
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
