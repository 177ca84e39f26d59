"""The flags Kafka's command-line tools share, and how minikafka reads them.

``add_connection_args`` gives a command the connection flags of the kafka-*.sh tools
(``--bootstrap-server``, ``--zookeeper``, ``--command-config``) plus ``--dir`` and ``--output``.
Without ``--bootstrap-server`` / ``--zookeeper`` the local cluster in ``--dir`` (default
``.minikafka``) is used. Tables by default, ``--output json`` for scripts (``print_result``); errors
are one line on stderr with exit code 1. Also here: the option values several tools read alike,
``KEY=VALUE`` lists (``--config``, ``--property``) and ``--acks``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from client.discovery import BOOTSTRAP_ENV, ZOOKEEPER_ENV, local_cluster_dir
from client.ops.local_cluster import ClusterError, ClusterState
from proto import errors
from proto.properties import parse_properties
from proto.transport import PLAINTEXT_SECURITY, ChannelSecurity

ZOOKEEPER_IGNORED = ("warning: --zookeeper is ignored: consumer groups are kept by the brokers' group "
                     "coordinator (as in Kafka since 2.0); --bootstrap-server is all this command needs")


def add_connection_args(p: argparse.ArgumentParser, zookeeper: bool = False, zookeeper_ignored: bool = False) -> None:
    """``zookeeper``: the command talks to ZooKeeper too. ``zookeeper_ignored``: it used to (consumer
    groups before the group coordinator); ``--zookeeper`` is still accepted, hidden from the help, and
    answered with a warning rather than silently dropped or breaking old scripts."""
    p.add_argument("--bootstrap-server", default=None, help="host:port[,host:port] (default: the local cluster)")
    if zookeeper:
        p.add_argument("--zookeeper", default=None, help="host:port[/chroot] (default: the local cluster's)")
    elif zookeeper_ignored:
        p.add_argument("--zookeeper", default=None, help=argparse.SUPPRESS)
    p.add_argument("--dir", type=Path, default=None,
                   help="local cluster directory (default: $MINIKAFKA_DIR or .minikafka); --bootstrap-server, "
                        "then --dir, then $MINIKAFKA_BOOTSTRAP, then ./.minikafka decide where the cluster is")
    p.add_argument("--output", choices=["table", "json"], default="table",
                   help="table (default) or json, for scripts")
    p.add_argument("--command-config", type=Path, default=None, metavar="FILE",
                   help="client properties (security.protocol, ssl.truststore.location, sasl.username, ...), "
                        "as Kafka's tools take them; default: the local cluster's own when it is --secure")


def security_from_args(args: argparse.Namespace) -> ChannelSecurity:
    """--command-config, else (only when talking to the local cluster) the cluster's admin settings."""
    if getattr(args, "command_config", None):
        try:
            return ChannelSecurity.from_properties(parse_properties(args.command_config.read_text()))
        except OSError as e:
            raise errors.InvalidConfigError(f"cannot read {args.command_config}: {e.strerror}") from None
    if not getattr(args, "bootstrap_server", None) and (args.dir is not None or not os.environ.get(BOOTSTRAP_ENV)):
        try:
            return ClusterState.load(_cluster_dir(args)).client_security()
        except ClusterError:
            pass
    return PLAINTEXT_SECURITY


def _cluster_dir(args: argparse.Namespace) -> Path:
    return Path(args.dir) if getattr(args, "dir", None) is not None else local_cluster_dir()


def bootstrap_from_args(args: argparse.Namespace) -> str:
    """--bootstrap-server, else an explicit --dir, else $MINIKAFKA_BOOTSTRAP, else the local cluster."""
    if args.bootstrap_server:
        return str(args.bootstrap_server)
    env = os.environ.get(BOOTSTRAP_ENV, "").strip()
    if env and getattr(args, "dir", None) is None:
        return env
    try:
        return ClusterState.load(_cluster_dir(args)).bootstrap_servers
    except ClusterError:
        raise errors.InvalidRequestError(f"no --bootstrap-server given, ${BOOTSTRAP_ENV} unset and no local "
                                         f"cluster in {_cluster_dir(args)} (start one: minikafka cluster up)") from None


def zookeeper_from_args(args: argparse.Namespace) -> str | None:
    if getattr(args, "zookeeper", None):
        return str(args.zookeeper)
    env = os.environ.get(ZOOKEEPER_ENV, "").strip()
    if env and getattr(args, "dir", None) is None:
        return env
    try:
        return ClusterState.load(_cluster_dir(args)).zookeeper_connect
    except ClusterError:
        return None


def warn_if_zookeeper_given(args: argparse.Namespace) -> None:
    if getattr(args, "zookeeper", None):
        print(ZOOKEEPER_IGNORED, file=sys.stderr)


def refuse_zookeeper(args: argparse.Namespace, command: str) -> None:
    """A command that talks only to the brokers, given --zookeeper: refused rather than silently
    ignored (issue 33) - a typo'd or stale ZooKeeper address must not look accepted."""
    if getattr(args, "zookeeper", None):
        raise errors.InvalidRequestError(f"{command} does not use --zookeeper (it talks to the brokers, as Kafka's "
                                         f"tool since 2.4); give --bootstrap-server or nothing for the local cluster")


def print_result(args: argparse.Namespace, obj: Any, table: str) -> None:
    print(json.dumps(obj, indent=2) if args.output == "json" else table)


def parse_key_values(items: list[str], flag: str = "--config") -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise errors.InvalidConfigError(f"{flag} expects key=value, got {item!r}")
        out[k.strip()] = v.strip()
    return out


def parse_acks(value: str) -> int | str:
    """--acks 0 | 1 | all | -1 as the producer takes it."""
    return "all" if value in ("all", "-1") else int(value)
