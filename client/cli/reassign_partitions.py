"""``minikafka reassign-partitions``: mirrors kafka-reassign-partitions.sh (``--generate/--execute/--verify/--cancel``).

The JSON files it reads and prints are parsed in ``client.cli.reassignment``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from client.admin import AdminClient
from client.cli import reassignment
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
    ra = sub.add_parser("reassign-partitions", help="move replicas (kafka-reassign-partitions)")
    add_connection_args(ra, zookeeper_ignored=True)
    ra_action = ra.add_mutually_exclusive_group(required=True)
    ra_action.add_argument("--generate", action="store_true",
                           help="propose a reassignment of --topics-to-move-json-file onto --broker-list")
    ra_action.add_argument("--execute", action="store_true",
                           help="start the reassignment in --reassignment-json-file (refused for brokers not live)")
    ra_action.add_argument("--verify", action="store_true", help="whether a reassignment is still in progress")
    ra_action.add_argument("--cancel", action="store_true",
                           help="cancel the running reassignments of the partitions in --reassignment-json-file: "
                                "each goes back to its original replicas")
    ra.add_argument("--reassignment-json-file", type=Path,
                    help='{"version":1,"partitions":[{"topic":T,"partition":P,"replicas":[ids]}]}; see '
                         "docs/reassignment.md")
    ra.add_argument("--additional", action="store_true",
                    help="with --execute: start these reassignments beside those already running")
    ra.add_argument("--topics-to-move-json-file", type=Path,
                    help='with --generate: {"version":1,"topics":[{"topic":T},...]}')
    ra.add_argument("--broker-list", default=None, metavar="ID,ID,...",
                    help="with --generate: the brokers to spread the replicas over")
    ra.set_defaults(func=cmd_reassign)


def _read(path: Path | None, flag: str) -> str:
    if path is None:
        raise errors.InvalidRequestError(f"{flag} is required here")
    try:
        return path.read_text()
    except OSError as e:
        raise errors.InvalidRequestError(f"cannot read {path}: {e.strerror}") from None


def cmd_reassign(args: argparse.Namespace) -> int:
    """kafka-reassign-partitions: --generate proposes, --execute submits, --verify reports."""
    refuse_zookeeper(args, "reassign-partitions")
    with AdminClient(bootstrap_from_args(args),
                     security=security_from_args(args)) as admin:
        if args.verify:
            if args.reassignment_json_file:
                return verify_partitions(admin, args)
            busy = admin.reassignment_in_progress()
            print_result(args, {"in_progress": busy}, "Reassignment in progress." if busy else "Reassignment complete.")
            return 0
        if args.generate:
            topics = reassignment.parse_topics_to_move(_read(args.topics_to_move_json_file,
                                                             "--topics-to-move-json-file"))
            brokers = reassignment.parse_broker_list(args.broker_list)
            admin.view.refresh()
            unknown = sorted(set(brokers) - set(admin.view.brokers))
            if unknown:
                raise errors.InvalidRequestError(f"--broker-list: brokers {unknown} are not live "
                                                 f"(live: {sorted(admin.view.brokers)})")
            current = {}
            for d in admin.describe_topics(topics):
                current.update({TopicPartition(d.name, p.partition): list(p.replicas) for p in d.partitions})
            proposed = reassignment.propose(current, brokers)
            if args.output == "json":
                print(json.dumps({"current": json.loads(reassignment.format_reassignment(current)),
                                  "proposed": json.loads(reassignment.format_reassignment(proposed))}))
            else:
                print("Current partition replica assignment\n" + reassignment.format_reassignment(current)
                      + "\n\nProposed partition reassignment configuration\n"
                      + reassignment.format_reassignment(proposed))
            return 0
        mapping = reassignment.parse_reassignment(_read(args.reassignment_json_file, "--reassignment-json-file"))
        if args.cancel:
            return _cancel(args, admin, sorted(mapping))
        if not args.additional and admin.reassignment_in_progress():
            raise errors.ReassignmentInProgressError(
                "Cannot execute because there is an existing partition assignment. Use --additional to "
                "override this and create a new partition assignment in addition to the existing one.")
        admin.reassign_partitions(mapping)
        print_result(args, {"started": len(mapping)}, f"Started the reassignment of {len(mapping)} partitions.")
    return 0


def _cancel(args: argparse.Namespace, admin: AdminClient, partitions: list[TopicPartition]) -> int:
    """kafka-reassign-partitions --cancel: each listed partition's reassignment reverted (Kafka's
    answer for one not moving: NO_REASSIGNMENT_IN_PROGRESS, reported and exit code 1)."""
    results = admin.cancel_partition_reassignments(partitions)
    failed = {f"{tp.topic}-{tp.partition}": code for tp, code in sorted(results.items()) if code != "NONE"}
    cancelled = [f"{tp.topic}-{tp.partition}" for tp, code in sorted(results.items()) if code == "NONE"]
    lines = []
    if cancelled:
        lines.append("Successfully cancelled reassignment of partitions: " + ",".join(cancelled))
    lines += [f"Error cancelling partition reassignment for {name}: {code}" for name, code in failed.items()]
    print_result(args, {"cancelled": cancelled, "errors": failed}, "\n".join(lines))
    return 1 if failed else 0


def verify_partitions(admin: AdminClient, args: argparse.Namespace) -> int:
    """kafka-reassign-partitions --verify --reassignment-json-file F: each partition of the plan is
    complete, still in progress, or not moving with other replicas than planned (exit 1 unless every
    one is complete)."""
    mapping = reassignment.parse_reassignment(_read(args.reassignment_json_file, "--reassignment-json-file"))
    moving = admin.list_partition_reassignments()
    current: dict[TopicPartition, list[int]] = {}
    for d in admin.describe_topics(sorted({tp.topic for tp in mapping})):
        current.update({TopicPartition(d.name, p.partition): list(p.replicas) for p in d.partitions})
    rows = []
    for tp, target in sorted(mapping.items()):
        if tp in moving:
            state, line = "in_progress", f"Reassignment of partition {tp.topic}-{tp.partition} is still in progress."
        elif current.get(tp) == list(target):
            state, line = "complete", f"Reassignment of partition {tp.topic}-{tp.partition} is complete."
        else:
            state = "differs"
            line = (f"There is no active reassignment of partition {tp.topic}-{tp.partition}, but replica set is "
                    f"{current.get(tp, [])} rather than {list(target)}.")
        rows.append(({"topic": tp.topic, "partition": tp.partition, "status": state}, line))
    print_result(args, [r for r, _ in rows], "Status of partition reassignment:\n" + "\n".join(ln for _, ln in rows))
    return 0 if all(r["status"] == "complete" for r, _ in rows) else 1
