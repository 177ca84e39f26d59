"""``minikafka get-offsets``: mirrors kafka-get-offsets.sh (GetOffsetShell) over ListOffsets.

``--topic T [--partitions 0,1] [--time -1|-2|<epoch ms>]`` prints ``T:P:OFFSET`` per partition:
-1 the latest offset (the high watermark), -2 the earliest (the log start), a timestamp the first
offset whose record is at or after it (empty when none is). A partition without a leader is
skipped with a line on stderr, as Kafka's tool does.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from client.admin import AdminClient
from client.cli.tool_args import add_connection_args, bootstrap_from_args, print_result, security_from_args
from proto import errors

LATEST, EARLIEST = -1, -2


def add_parser(sub: Any) -> None:
    p = sub.add_parser("get-offsets", help="offsets of a topic's partitions, by time too (kafka-get-offsets)")
    add_connection_args(p)
    p.add_argument("--topic", required=True, help="the topic")
    p.add_argument("--partitions", default="", help="comma-separated partitions (default: all)")
    p.add_argument("--time", type=int, default=LATEST,
                   help="-1 latest (default), -2 earliest, or a timestamp in ms since the epoch")
    p.set_defaults(func=cmd_get_offsets)


def offset_lines(topic: str, offsets: dict[int, int]) -> list[str]:
    """Kafka's ``topic:partition:offset`` lines, by partition; no offset (-1) prints empty."""
    return [f"{topic}:{p}:{'' if o < 0 else o}" for p, o in sorted(offsets.items())]


def cmd_get_offsets(args: argparse.Namespace) -> int:
    if args.time < EARLIEST:
        raise errors.InvalidRequestError(f"--time: -1, -2 or a timestamp, got {args.time}")
    try:
        asked = [int(x) for x in args.partitions.split(",") if x.strip()]
    except ValueError:
        raise errors.InvalidRequestError(f"--partitions: comma-separated integers, got {args.partitions!r}") from None
    with AdminClient(bootstrap_from_args(args), security=security_from_args(args)) as admin:
        admin.view.refresh([args.topic])
        known = admin.view.partitions_of(args.topic)
        if not known:
            raise errors.UnknownTopicOrPartitionError(f"topic {args.topic!r} does not exist")
        missing = sorted(set(asked) - set(known))
        if missing:
            raise errors.UnknownTopicOrPartitionError(
                f"no partition(s) {','.join(map(str, missing))} in topic {args.topic!r}")
        offsets: dict[int, int] = {}
        for p in asked or known:
            try:
                offsets.update(admin.list_offsets(args.topic, [p], args.time))
            except (errors.LeaderNotAvailableError, errors.NotLeaderOrFollowerError):
                print(f"Error: topic-partition {args.topic}:{p} does not have a leader. Skip getting offsets",
                      file=sys.stderr)
        lines = offset_lines(args.topic, offsets)
        print_result(args, {f"{args.topic}:{p}": o for p, o in sorted(offsets.items())}, "\n".join(lines))
    return 0
