"""``minikafka topics``: mirrors kafka-topics.sh (``--create/--list/--describe/--delete/--alter``)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import Any

from client.admin import AdminClient, NewTopic
from client.cli.tool_args import (
    add_connection_args,
    bootstrap_from_args,
    parse_key_values,
    print_result,
    security_from_args,
)
from proto import errors


def _at_least_one(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def leader_label(leader: int, live: set[int], high_watermark: int) -> str:
    """``Leader:`` in --describe: a leader whose broker is gone (or, until its ZooKeeper session
    expires, does not answer) is marked, rather than shown as if it served the partition."""
    if leader < 0:
        return "none"
    if leader not in live:
        return f"{leader} (not live)"
    if high_watermark < 0:
        return f"{leader} (not answering)"
    return str(leader)


def parse_replica_assignment(text: str) -> list[list[int]]:
    """kafka-topics' --replica-assignment: partitions separated by ``,``, replicas by ``:``."""
    try:
        return [[int(b) for b in part.split(":")] for part in text.split(",")]
    except ValueError:
        raise errors.InvalidRequestError(f"--replica-assignment {text!r}: expected broker ids as 1:2,2:3") from None


def _add_partitions(admin: AdminClient, args: argparse.Namespace) -> None:
    """kafka-topics --alter --partitions N (CreatePartitions): the brokers place the new partitions,
    or --replica-assignment does (its entries beyond the existing partitions)."""
    assignments = None
    if args.replica_assignment:
        existing = len(admin.describe_topics([args.topic])[0].partitions)
        assignments = {args.topic: parse_replica_assignment(args.replica_assignment)[existing:]}
    admin.create_partitions({args.topic: args.partitions}, assignments)
    print_result(args, {"altered": args.topic, "partitions": args.partitions},
                 "WARNING: If partitions are increased for a topic that has a key, the partition logic or "
                 "ordering of the messages will be affected\nAdding partitions succeeded!")


def add_parser(sub: Any) -> None:
    t = sub.add_parser("topics", help="create, list, describe, alter, delete topics (kafka-topics)")
    add_connection_args(t)
    action = t.add_mutually_exclusive_group(required=True)
    for a, text in (("create", "create a topic"), ("list", "list topic names"),
                    ("describe", "partitions, leaders (marked when not live), replicas, ISR, high watermarks"),
                    ("delete", "delete a topic"), ("alter", "add partitions (--partitions N) or change a topic's configs (--config, --delete-config)")):
        action.add_argument(f"--{a}", action="store_true", help=text)
    t.add_argument("--topic", help="the topic")
    t.add_argument("--partitions", type=_at_least_one, default=-1,
                   help="number of partitions (default: the broker's num.partitions)")
    t.add_argument("--replication-factor", type=_at_least_one, default=-1,
                   help="replicas per partition (default: the broker's default.replication.factor)")
    t.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config (repeatable), e.g. retention.ms=60000")
    t.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                   help="with --alter: remove a topic config override (repeatable)")
    t.add_argument("--replica-assignment", metavar="B1:B2,B1:B2,...",
                   help="with --alter --partitions: the replicas of every partition, existing ones first "
                        "(kafka-topics' format; only the new partitions' are used)")
    t.add_argument("--if-not-exists", action="store_true", help="with --create: no error when the topic exists")
    t.add_argument("--under-replicated-partitions", action="store_true",
                   help="with --describe: only partitions whose ISR is smaller than their replicas")
    t.add_argument("--unavailable-partitions", action="store_true",
                   help="with --describe: only partitions without a live leader")
    t.set_defaults(func=cmd_topics)


def cmd_topics(args: argparse.Namespace) -> int:
    with AdminClient(bootstrap_from_args(args), security=security_from_args(args)) as admin:
        if args.list:
            names = admin.list_topics()
            print_result(args, names, "\n".join(names))
            return 0
        if not args.topic and not args.describe:
            raise errors.InvalidRequestError("--topic is required")
        if args.create:
            try:
                admin.create_topics([NewTopic(args.topic, args.partitions, args.replication_factor,
                                              parse_key_values(args.config))])
            except errors.TopicAlreadyExistsError:
                if not args.if_not_exists:
                    raise
            print_result(args, {"created": args.topic}, f"Created topic {args.topic}.")
            warn_if_min_isr_exceeds_replicas(parse_key_values(args.config), args.replication_factor)
        elif args.delete:
            admin.delete_topics([args.topic])
            print_result(args, {"deleted": args.topic}, f"Topic {args.topic} is deleted.")
        elif args.alter:
            # Nothing to alter is refused, never a silent no-op.
            if args.partitions == -1 and not args.config and not args.delete_config:
                raise errors.InvalidRequestError(
                    "--alter needs --partitions N, --config KEY=VALUE or --delete-config KEY")
            if args.replica_assignment and args.partitions == -1:
                raise errors.InvalidRequestError("--replica-assignment with --alter needs --partitions N")
            if args.partitions != -1:
                _add_partitions(admin, args)
            if args.config or args.delete_config:
                admin.alter_topic_configs(args.topic, parse_key_values(args.config), args.delete_config)
                print_result(args, {"altered": args.topic}, f"Updated config for topic {args.topic}.")
        else:
            # kafka-topics --describe: every topic without --topic; the filters keep only the
            # partitions in trouble (and print no topic lines, as Kafka's tool).
            descs = admin.describe_topics([args.topic] if args.topic else admin.list_topics())
            live = set(admin.view.brokers)
            filtered = args.under_replicated_partitions or args.unavailable_partitions
            if filtered:
                descs = [replace(d, partitions=[p for p in d.partitions if partition_in_trouble(
                    p, live, args.under_replicated_partitions, args.unavailable_partitions)]) for d in descs]
            if args.output == "json":
                print(json.dumps([{"topic": d.name, "configs": d.configs, "partitions": [
                    {"partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
                     "leader_live": p.leader in live and p.high_watermark >= 0,
                     "replicas": list(p.replicas), "isr": list(p.isr), "offline": list(p.offline_replicas),
                     "high_watermark": p.high_watermark, "log_start_offset": p.log_start_offset}
                    for p in d.partitions]} for d in descs], indent=2))
                return 0
            for d in descs:
                rf = len(d.partitions[0].replicas) if d.partitions else 0
                cfg = ",".join(f"{k}={v}" for k, v in sorted(d.configs.items()))
                if not filtered:
                    print(f"Topic: {d.name}\tPartitionCount: {len(d.partitions)}\tReplicationFactor: {rf}\t"
                          f"Configs: {cfg}")
                for p in d.partitions:
                    print(f"\tTopic: {d.name}\tPartition: {p.partition}\tLeader: {leader_label(p.leader, live, p.high_watermark)}"
                          f"\tLeaderEpoch: {p.leader_epoch}\t"
                          f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}\t"
                          f"HighWatermark: {p.high_watermark if p.high_watermark >= 0 else 'unknown'}")
    return 0


def warn_if_min_isr_exceeds_replicas(configs: dict[str, str], replication_factor: int | None) -> None:
    """Kafka creates such a topic, and every acks=all produce to it then retries NOT_ENOUGH_REPLICAS
    until it times out: say so when the topic is made (issue 33)."""
    min_isr = configs.get("min.insync.replicas", "")
    if min_isr.isdigit() and replication_factor is not None and 0 < replication_factor < int(min_isr):
        print(f"warning: min.insync.replicas={min_isr} exceeds the replication factor {replication_factor}: "
              "every acks=all produce to this topic will fail with NOT_ENOUGH_REPLICAS", file=sys.stderr)


def partition_in_trouble(p: Any, live: set[int], under_replicated: bool, unavailable: bool) -> bool:
    """kafka-topics' --under-replicated-partitions (ISR smaller than the replicas) and
    --unavailable-partitions (no live leader); either, when both are given."""
    no_leader = p.leader < 0 or p.leader not in live
    return (under_replicated and len(p.isr) < len(p.replicas)) or (unavailable and no_leader)
