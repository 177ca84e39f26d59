"""``minikafka leader-election``: mirrors kafka-leader-election.sh (preferred replica election)."""

from __future__ import annotations

import argparse
from typing import Any

from client.admin import AdminClient
from client.cli.tool_args import (
    add_connection_args,
    bootstrap_from_args,
    print_result,
    refuse_zookeeper,
    security_from_args,
)
from client.structs import TopicPartition
from proto import errors


def add_parser(sub: Any) -> None:
    le = sub.add_parser("leader-election", help="preferred replica election (kafka-leader-election)")
    add_connection_args(le, zookeeper_ignored=True)
    le.add_argument("--topic", help="elect for this topic's partitions")
    le.add_argument("--partition", type=int, default=None, help="with --topic: only this partition")
    le.add_argument("--all-topic-partitions", action="store_true", help="elect for every partition")
    le.set_defaults(func=cmd_leader_election)


def cmd_leader_election(args: argparse.Namespace) -> int:
    refuse_zookeeper(args, "leader-election")
    with AdminClient(bootstrap_from_args(args), security=security_from_args(args)) as admin:
        if args.all_topic_partitions:
            tps = [TopicPartition(t, p) for t in admin.list_topics() for p in admin.view.partitions_of(t)]
        elif args.topic:
            admin.view.refresh([args.topic])
            known = admin.view.partitions_of(args.topic)
            # An empty list asks the controller for *every* partition (ElectLeaders' null): a typo
            # must be refused here, never widened into a cluster-wide election.
            if not known:
                raise errors.UnknownTopicOrPartitionError(f"topic {args.topic!r} does not exist")
            if args.partition is not None and args.partition not in known:
                raise errors.UnknownTopicOrPartitionError(f"topic {args.topic!r} has no partition {args.partition}")
            parts = [args.partition] if args.partition is not None else known
            tps = [TopicPartition(args.topic, p) for p in parts]
        else:
            raise errors.InvalidRequestError("give --topic [--partition] or --all-topic-partitions")
        if not tps:
            print_result(args, {"elected": [], "not_elected": {}}, "No partitions: nothing to elect.")
            return 0
        results = admin.elect_preferred_leaders(tps)
        elected = sorted(tp for tp, code in results.items() if code == "NONE")
        rest = {f"{tp.topic}-{tp.partition}": code for tp, code in sorted(results.items()) if code != "NONE"}
        print_result(args, {"elected": [list(tp) for tp in elected], "not_elected": rest},
                     f"Successfully completed leader election for {len(elected)} partitions."
                     + "".join(f"\n{name}: {code}" for name, code in rest.items()))
    # As kafka-leader-election: a partition whose election failed fails the command; one whose
    # preferred leader already leads (ELECTION_NOT_NEEDED) does not.
    return 1 if any(code != "ELECTION_NOT_NEEDED" for code in rest.values()) else 0
