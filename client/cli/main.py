"""The ``minikafka`` command line.

Subcommands are added by the issues that build them (broker, cluster, topics,
produce, consume, ...). Errors print one line and exit non-zero; no tracebacks
for bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import grpc

from client.connection import unreachable_reason
from client.ops.certs import CertError
from client.ops.local_cluster import ClusterError
from proto.errors import KafkaError, NetworkError
from proto.names import validate_group_id, validate_topic_name
from proto.transport import SecurityConfigError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minikafka", description="A Kafka-style broker cluster on ZooKeeper.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    from broker import main as broker_main
    from client.cli import (
        certs,
        chaos,
        cluster,
        configs,
        consume,
        delete_records,
        demo,
        dump_log,
        get_offsets,
        groups,
        leader_election,
        log_dirs,
        perf,
        produce,
        reassign_partitions,
        security,
        top,
        topics,
        verify_replicas,
    )

    broker_main.add_parser(sub)
    cluster.add_parser(sub)
    topics.add_parser(sub)
    delete_records.add_parser(sub)
    produce.add_parser(sub)
    consume.add_parser(sub)
    groups.add_parser(sub)
    leader_election.add_parser(sub)
    reassign_partitions.add_parser(sub)
    perf.add_parser(sub)
    security.add_parsers(sub)
    certs.add_parser(sub)
    top.add_parser(sub)
    verify_replicas.add_parser(sub)
    chaos.add_parser(sub)
    demo.add_parser(sub)
    log_dirs.add_parser(sub)
    get_offsets.add_parser(sub)
    configs.add_parser(sub)
    dump_log.add_parser(sub)
    return parser


def validate_names(args: argparse.Namespace) -> None:
    """Every topic and group name on the command line, before anything is sent (SPEC S13.3)."""
    topic = getattr(args, "topic", None)
    if isinstance(topic, str):
        # kafka-consumer-groups' TOPIC:P,Q,... (no topic name holds a ':').
        validate_topic_name(topic.split(":", 1)[0])
    group = getattr(args, "group", None)
    for g in [group] if isinstance(group, str) else group if isinstance(group, list) else []:
        validate_group_id(g)


def subcommand_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``args`` names, the deepest: its usage is the one a mistake
    should show (issue 33), not the top-level list of commands."""
    current = parser
    for _ in range(4):  # minikafka COMMAND [SUBCOMMAND]: bounded depth
        action = next((a for a in current._actions if isinstance(a, argparse._SubParsersAction)), None)
        chosen = getattr(args, action.dest, None) if action is not None and action.dest else None
        if action is None or chosen not in action.choices:
            break
        current = action.choices[chosen]
    return current


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        subcommand_parser(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        validate_names(args)
        rc: int = args.func(args)
        sys.stdout.flush()  # here, not at exit, so that a reader gone away is seen below
    except NetworkError as e:
        print(f"error: {e.message}", file=sys.stderr)  # "cannot reach HOST:PORT: connection refused"
        return 1
    except (KafkaError, ClusterError, CertError, SecurityConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except grpc.RpcError as e:
        reason = unreachable_reason(e.code().name, e.details() or "") if hasattr(e, "details") else str(e)
        print(f"error: cannot reach the broker: {reason}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `consume ... | head -2`: the reader went away, as Unix tools and Kafka's exit - quietly.
        # stdout is pointed at /dev/null so that the interpreter's own flush at exit cannot fail too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return rc


if __name__ == "__main__":
    sys.exit(main())
