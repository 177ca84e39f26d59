"""Kafka-style command-line tools: ``minikafka topics | produce | consume | groups | leader-election |
reassign-partitions | perf``.

Flags follow kafka-topics.sh, kafka-console-producer.sh, kafka-console-consumer.sh,
kafka-consumer-groups.sh and the perf-test tools (``--bootstrap-server``,
``--topic``, ``--create/--list/--describe/--delete/--alter``, ...). Without
``--bootstrap-server`` / ``--zookeeper`` the local cluster in ``--dir``
(default ``.minikafka``) is used. Tables by default, ``--output json`` for
scripts; errors are one line on stderr with exit code 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from client.admin import AdminClient, NewTopic
from client.cli import reassignment
from client.cli.progress import Progress
from client.connection import ClusterView
from client.consumer import Consumer, CorruptRecordError
from client.discovery import BOOTSTRAP_ENV, ZOOKEEPER_ENV, local_cluster_dir
from client.ops.local_cluster import ClusterError, ClusterState
from client.producer import Producer
from client.structs import TopicPartition
from proto import errors
from proto.names import validate_group_id, validate_topic_name
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


def _zookeeper(args: argparse.Namespace) -> str | None:
    if getattr(args, "zookeeper", None):
        return str(args.zookeeper)
    env = os.environ.get(ZOOKEEPER_ENV, "").strip()
    if env and getattr(args, "dir", None) is None:
        return env
    try:
        return ClusterState.load(_cluster_dir(args)).zookeeper_connect
    except ClusterError:
        return None


def _configs(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise errors.InvalidConfigError(f"--config expects key=value, got {item!r}")
        out[k.strip()] = v.strip()
    return out


def _at_least_one(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def validate_names(args: argparse.Namespace) -> None:
    """Every topic and group name on the command line, before anything is sent (SPEC S13.3)."""
    topic = getattr(args, "topic", None)
    if isinstance(topic, str):
        validate_topic_name(topic)
    group = getattr(args, "group", None)
    if isinstance(group, str):
        validate_group_id(group)


def _acks(value: str) -> int | str:
    """--acks 0 | 1 | all | -1 as the producer takes it."""
    return "all" if value in ("all", "-1") else int(value)


def _topic_exists(args: argparse.Namespace, topic: str, allow_auto_create: bool = False) -> bool:
    """Asks the cluster (a metadata request); with ``allow_auto_create`` a broker with
    auto.create.topics.enable creates the topic, as the producer's own request would."""
    view = ClusterView(bootstrap_from_args(args), security=security_from_args(args))
    try:
        view.refresh([topic], allow_auto_create=allow_auto_create)
        return view.topic_errors.get(topic) != errors.UnknownTopicOrPartitionError.code
    finally:
        view.close()


def require_topic(args: argparse.Namespace, topic: str) -> None:
    """Reading a topic that does not exist is a mistake to report, not an empty result to wait on."""
    if not _topic_exists(args, topic):
        raise errors.UnknownTopicOrPartitionError(
            f"topic {topic!r} does not exist (list them: minikafka topics --list; create it: "
            f"minikafka topics --create --topic {topic})")


def ensure_topic_for_produce(args: argparse.Namespace, topic: str) -> None:
    """Producing to a missing topic creates it where the brokers have auto.create.topics.enable
    (Kafka's default, so a typo makes a topic): say so in one line; where they do not, refuse."""
    if _topic_exists(args, topic):
        return
    if not _topic_exists(args, topic, allow_auto_create=True):
        raise errors.UnknownTopicOrPartitionError(
            f"topic {topic!r} does not exist and the brokers do not create topics on use "
            f"(auto.create.topics.enable=false); create it: minikafka topics --create --topic {topic}")
    print(f"notice: topic {topic!r} did not exist; the broker created it (auto.create.topics.enable=true, "
          f"with num.partitions and default.replication.factor)", file=sys.stderr)


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


def add_parsers(sub: Any) -> None:
    t = sub.add_parser("topics", help="create, list, describe, alter, delete topics (kafka-topics)")
    add_connection_args(t)
    action = t.add_mutually_exclusive_group(required=True)
    for a, text in (("create", "create a topic"), ("list", "list topic names"),
                    ("describe", "partitions, leaders (marked when not live), replicas, ISR, high watermarks"),
                    ("delete", "delete a topic"), ("alter", "change a topic's configs (--config, --delete-config)")):
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
    t.add_argument("--if-not-exists", action="store_true", help="with --create: no error when the topic exists")
    t.set_defaults(func=cmd_topics)

    p = sub.add_parser("produce", help="records from stdin, one per line (kafka-console-producer)")
    add_connection_args(p)
    p.add_argument("--topic", required=True, help="the topic to write to")
    p.add_argument("--partition", type=int, default=None, help="this partition (default: by key, else sticky)")
    p.add_argument("--acks", default="all", choices=["0", "1", "all", "-1"],
                   help="replicas that must have a record before it counts (default all)")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="parse.key=true, key.separator=:")
    p.add_argument("--compression", default=None, choices=["none", "gzip", "zstd"], help="batch compression")
    p.set_defaults(func=cmd_produce)

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
                        "key.separator=TAB")
    c.set_defaults(func=cmd_consume)

    g = sub.add_parser("groups", help="list, describe, reset consumer groups (kafka-consumer-groups)")
    add_connection_args(g, zookeeper_ignored=True)
    gaction = g.add_mutually_exclusive_group(required=True)
    for a, text in (("list", "list group ids"), ("describe", "a group's offsets, lag and owners"),
                    ("reset-offsets", "move a group's committed offsets (dry run without --execute)")):
        gaction.add_argument(f"--{a}", action="store_true", help=text)
    g.add_argument("--group", help="the consumer group id")
    g.add_argument("--topic", help="with --reset-offsets: the topic whose offsets move")
    target = g.add_mutually_exclusive_group()
    target.add_argument("--to-earliest", action="store_true", help="to each partition's log start offset")
    target.add_argument("--to-latest", action="store_true", help="to each partition's high watermark")
    target.add_argument("--to-offset", type=int,
                        help="to this offset (clamped into each partition's range, with a warning)")
    target.add_argument("--to-datetime", type=int, metavar="EPOCH_MS",
                        help="to the first offset at or after this time (ms since the epoch)")
    g.add_argument("--execute", action="store_true", help="apply the reset (default: dry run)")
    g.set_defaults(func=cmd_groups)

    le = sub.add_parser("leader-election", help="preferred replica election (kafka-leader-election)")
    add_connection_args(le, zookeeper=True)
    le.add_argument("--topic", help="elect for this topic's partitions")
    le.add_argument("--partition", type=int, default=None, help="with --topic: only this partition")
    le.add_argument("--all-topic-partitions", action="store_true", help="elect for every partition")
    le.set_defaults(func=cmd_leader_election)

    ra = sub.add_parser("reassign-partitions", help="move replicas (kafka-reassign-partitions)")
    add_connection_args(ra, zookeeper=True)
    ra_action = ra.add_mutually_exclusive_group(required=True)
    ra_action.add_argument("--generate", action="store_true",
                           help="propose a reassignment of --topics-to-move-json-file onto --broker-list")
    ra_action.add_argument("--execute", action="store_true",
                           help="start the reassignment in --reassignment-json-file (refused for brokers not live)")
    ra_action.add_argument("--verify", action="store_true", help="whether a reassignment is still in progress")
    ra.add_argument("--reassignment-json-file", type=Path,
                    help='{"version":1,"partitions":[{"topic":T,"partition":P,"replicas":[ids]}]}; see '
                         "docs/reassignment.md")
    ra.add_argument("--topics-to-move-json-file", type=Path,
                    help='with --generate: {"version":1,"topics":[{"topic":T},...]}')
    ra.add_argument("--broker-list", default=None, metavar="ID,ID,...",
                    help="with --generate: the brokers to spread the replicas over")
    ra.set_defaults(func=cmd_reassign)

    perf = sub.add_parser("perf", help="producer and consumer performance tests")
    psub = perf.add_subparsers(dest="perf_command", metavar="SUBCOMMAND")
    psub.required = True
    pp = psub.add_parser("produce", help="kafka-producer-perf-test")
    add_connection_args(pp)
    pp.add_argument("--topic", required=True, help="the topic to write to")
    pp.add_argument("--num-records", type=int, required=True, help="how many records to send")
    pp.add_argument("--record-size", type=int, default=100, help="bytes per record value (default 100)")
    pp.add_argument("--throughput", type=int, default=-1, help="records/s cap; -1 for none")
    pp.add_argument("--acks", default="all", choices=["0", "1", "all", "-1"], help="as the producer's acks (default all)")
    pp.add_argument("--batch-size", type=int, default=65536, help="producer batch.size in bytes")
    pp.add_argument("--linger-ms", type=int, default=2, help="producer linger.ms")
    pp.set_defaults(func=cmd_perf_produce)
    pc = psub.add_parser("consume", help="kafka-consumer-perf-test")
    add_connection_args(pc)
    pc.add_argument("--topic", required=True, help="the topic to read (it must exist)")
    pc.add_argument("--messages", type=int, required=True, help="how many records to consume")
    pc.add_argument("--timeout-ms", type=int, default=30000,
                    help="give up after this long without new records (default 30000)")
    pc.set_defaults(func=cmd_perf_consume)


def _print(args: argparse.Namespace, obj: Any, table: str) -> None:
    print(json.dumps(obj, indent=2) if args.output == "json" else table)


# ------------------------------------------------------------------ topics


def cmd_topics(args: argparse.Namespace) -> int:
    with AdminClient(bootstrap_from_args(args), security=security_from_args(args)) as admin:
        if args.list:
            names = admin.list_topics()
            _print(args, names, "\n".join(names))
            return 0
        if not args.topic:
            raise errors.InvalidRequestError("--topic is required")
        if args.create:
            try:
                admin.create_topics([NewTopic(args.topic, args.partitions, args.replication_factor,
                                              _configs(args.config))])
            except errors.TopicAlreadyExistsError:
                if not args.if_not_exists:
                    raise
            _print(args, {"created": args.topic}, f"Created topic {args.topic}.")
        elif args.delete:
            admin.delete_topics([args.topic])
            _print(args, {"deleted": args.topic}, f"Topic {args.topic} is deleted.")
        elif args.alter:
            # Adding partitions (CreatePartitions) does not exist yet: refused, never a silent no-op.
            if args.partitions != -1:
                raise errors.InvalidRequestError("--alter --partitions is not supported yet (no CreatePartitions): "
                                                 "the topic keeps its partitions")
            if not args.config and not args.delete_config:
                raise errors.InvalidRequestError("--alter needs --config KEY=VALUE or --delete-config KEY")
            admin.alter_topic_configs(args.topic, _configs(args.config), args.delete_config)
            _print(args, {"altered": args.topic}, f"Updated config for topic {args.topic}.")
        else:
            descs = admin.describe_topics([args.topic])
            live = set(admin.view.brokers)
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
                print(f"Topic: {d.name}\tPartitionCount: {len(d.partitions)}\tReplicationFactor: {rf}\t"
                      f"Configs: {cfg}")
                for p in d.partitions:
                    print(f"\tTopic: {d.name}\tPartition: {p.partition}\tLeader: {leader_label(p.leader, live, p.high_watermark)}"
                          f"\tLeaderEpoch: {p.leader_epoch}\t"
                          f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}\t"
                          f"HighWatermark: {p.high_watermark if p.high_watermark >= 0 else 'unknown'}")
    return 0


# ------------------------------------------------------------------ produce / consume


def cmd_produce(args: argparse.Namespace) -> int:
    props = _configs(args.property)
    parse_key = props.get("parse.key", "false").lower() == "true"
    sep = props.get("key.separator", "\t")
    acks = _acks(args.acks)
    count = 0
    futures = []
    ensure_topic_for_produce(args, args.topic)
    with Producer(bootstrap_from_args(args), security=security_from_args(args), acks=acks, enable_idempotence=acks == "all",
                  compression_type=args.compression) as producer:
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


def warn_if_zookeeper_given(args: argparse.Namespace) -> None:
    if getattr(args, "zookeeper", None):
        print(ZOOKEEPER_IGNORED, file=sys.stderr)


def cmd_consume(args: argparse.Namespace) -> int:
    warn_if_zookeeper_given(args)
    props = _configs(args.property)
    show = {k: props.get(f"print.{k}", "false").lower() == "true" for k in ("key", "offset", "partition",
                                                                          "timestamp")}
    sep = props.get("key.separator", "\t")
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
                if show["key"]:
                    fields.append(r.key.decode("utf-8", "replace") if r.key is not None else "null")
                fields.append(r.value.decode("utf-8", "replace") if r.value is not None else "null")
                print(sep.join(fields), flush=True)
        if args.group:
            consumer.commit()
    except CorruptRecordError as e:
        raise errors.CorruptMessageError(
            f"{e.message}; to skip it: consume --topic {e.topic} --partition {e.partition} "
            f"--offset {e.next_offset}") from None
    finally:
        consumer.close()
    if args.output != "json":
        print(f"Processed a total of {n} messages", file=sys.stderr)
    return 0


# ------------------------------------------------------------------ groups


def cmd_groups(args: argparse.Namespace) -> int:
    warn_if_zookeeper_given(args)
    # Groups go through the brokers' group coordinator: bootstrap servers are enough.
    with AdminClient(bootstrap_from_args(args), security=security_from_args(args)) as admin:
        if args.list:
            groups = admin.list_groups()
            _print(args, groups, "\n".join(groups))
            return 0
        if not args.group:
            raise errors.InvalidRequestError("--group is required")
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


# ------------------------------------------------------------------ elections and reassignment


def cmd_leader_election(args: argparse.Namespace) -> int:
    with AdminClient(bootstrap_from_args(args), zookeeper_connect=_zookeeper(args),
                     security=security_from_args(args)) as admin:
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
            _print(args, {"elected": [], "not_elected": {}}, "No partitions: nothing to elect.")
            return 0
        results = admin.elect_preferred_leaders(tps)
        elected = sorted(tp for tp, code in results.items() if code == "NONE")
        rest = {f"{tp.topic}-{tp.partition}": code for tp, code in sorted(results.items()) if code != "NONE"}
        _print(args, {"elected": [list(tp) for tp in elected], "not_elected": rest},
               f"Successfully completed leader election for {len(elected)} partitions."
               + "".join(f"\n{name}: {code}" for name, code in rest.items()))
    # As kafka-leader-election: a partition whose election failed fails the command; one whose
    # preferred leader already leads (ELECTION_NOT_NEEDED) does not.
    return 1 if any(code != "ELECTION_NOT_NEEDED" for code in rest.values()) else 0


def _read(path: Path | None, flag: str) -> str:
    if path is None:
        raise errors.InvalidRequestError(f"{flag} is required here")
    try:
        return path.read_text()
    except OSError as e:
        raise errors.InvalidRequestError(f"cannot read {path}: {e.strerror}") from None


def cmd_reassign(args: argparse.Namespace) -> int:
    """kafka-reassign-partitions: --generate proposes, --execute submits, --verify reports."""
    with AdminClient(bootstrap_from_args(args), zookeeper_connect=_zookeeper(args),
                     security=security_from_args(args)) as admin:
        if args.verify:
            busy = admin.reassignment_in_progress()
            _print(args, {"in_progress": busy}, "Reassignment in progress." if busy else "Reassignment complete.")
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
        admin.reassign_partitions(mapping)
        _print(args, {"started": len(mapping)}, f"Started the reassignment of {len(mapping)} partitions.")
    return 0


# ------------------------------------------------------------------ perf tools


def cmd_perf_produce(args: argparse.Namespace) -> int:
    acks = _acks(args.acks)
    value = b"x" * args.record_size
    latencies: list[float] = []
    progress = Progress()
    with Producer(bootstrap_from_args(args), security=security_from_args(args), acks=acks, enable_idempotence=acks == "all", batch_size=args.batch_size,
                  linger_ms=args.linger_ms, buffer_memory=1_000_000) as producer:
        perf = time.perf_counter
        start = perf()
        window: list[float] = []  # latencies since the last report, as Kafka's periodic line

        def report(sent: int) -> str:
            now_lat = sorted(x * 1000 for x in latencies[len(window):]) or [0.0]
            window[:] = latencies[:]
            return (f"{sent} records sent, {sent / max(1e-9, perf() - start):,.1f} records/sec, "
                    f"{sum(now_lat) / len(now_lat):.1f} ms avg latency, {now_lat[-1]:.1f} ms max latency")

        def record_latency(t0: float) -> Any:
            return lambda _f: latencies.append(perf() - t0)

        # Kafka's perf tool counts a record when its acknowledgement arrives: a failed send (too
        # large, not authorized, timed out) is an error, never a record sent.
        failures: list[BaseException] = []

        def on_done(f: Any) -> None:
            e = f.exception()
            if e is not None:
                failures.append(e)

        for i in range(args.num_records):
            try:
                fut = producer.send(args.topic, value)
            except errors.KafkaError as e:
                failures.append(e)
                continue
            fut.add_done_callback(on_done)
            if i % 10 == 0:
                fut.add_done_callback(record_latency(perf()))
            if args.throughput > 0:
                ahead = (i + 1) / args.throughput - (perf() - start)
                if ahead > 0:
                    time.sleep(ahead)
            if progress.due():
                progress.update(report(i + 1))
        producer.flush()
        elapsed = perf() - start
    progress.done()
    acked = args.num_records - len(failures)
    if failures:
        print(f"{len(failures)} of {args.num_records} records failed: {failures[0]}", file=sys.stderr)
    lat = sorted(x * 1000 for x in latencies) or [0.0]

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(len(lat) * q))]

    summary = {"records": acked, "failed": len(failures), "records_per_sec": acked / elapsed,
               "mb_per_sec": acked * args.record_size / elapsed / (1024 * 1024),
               "avg_latency_ms": sum(lat) / len(lat), "max_latency_ms": lat[-1], "p50_ms": pct(0.5),
               "p95_ms": pct(0.95), "p99_ms": pct(0.99), "p999_ms": pct(0.999)}
    _print(args, summary,
           f"{acked} records sent, {summary['records_per_sec']:.1f} records/sec "
           f"({summary['mb_per_sec']:.2f} MB/sec), {summary['avg_latency_ms']:.2f} ms avg latency, "
           f"{summary['max_latency_ms']:.2f} ms max latency, {summary['p50_ms']:.0f} ms 50th, "
           f"{summary['p95_ms']:.0f} ms 95th, {summary['p99_ms']:.0f} ms 99th, {summary['p999_ms']:.0f} ms 99.9th.")
    return 1 if failures else 0


def cmd_perf_consume(args: argparse.Namespace) -> int:
    require_topic(args, args.topic)
    consumer = Consumer(args.topic, bootstrap_servers=bootstrap_from_args(args), security=security_from_args(args),
                        auto_offset_reset="earliest",
                        max_poll_records=10_000)
    n = nbytes = 0
    start = time.perf_counter()
    last = start
    progress = Progress()
    try:
        while n < args.messages:
            records = consumer.poll(timeout_ms=500)
            if progress.due():
                progress.update(f"{n} of {args.messages} messages consumed, "
                                f"{n / max(1e-9, time.perf_counter() - start):,.0f} msg/s, "
                                f"{nbytes / (1024 * 1024):.1f} MB")
            if not records:
                if time.perf_counter() - last > args.timeout_ms / 1000.0:
                    break
                continue
            last = time.perf_counter()
            n += len(records)
            nbytes += sum(len(r.value or b"") for r in records)
    finally:
        consumer.close()
        progress.done()
    elapsed = max(1e-9, time.perf_counter() - start)
    summary = {"messages": n, "mb": nbytes / (1024 * 1024), "mb_per_sec": nbytes / (1024 * 1024) / elapsed,
               "messages_per_sec": n / elapsed, "seconds": elapsed}
    _print(args, summary, "data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec\n"
                          f"{summary['mb']:.4f}, {summary['mb_per_sec']:.4f}, {n}, {summary['messages_per_sec']:.4f}")
    if n < args.messages:
        # kafka-consumer-perf-test's warning, with what the topic holds: asking for more than exists
        # is the usual cause.
        with AdminClient(bootstrap_from_args(args), security=security_from_args(args)) as admin:
            held = sum(max(0, p.high_watermark - p.log_start_offset)
                       for d in admin.describe_topics([args.topic]) for p in d.partitions)
        print(f"error: exiting before consuming the expected number of messages: {n} of {args.messages} "
              f"consumed, none new for {args.timeout_ms} ms (--timeout-ms); topic {args.topic!r} holds {held} "
              f"records below its high watermarks", file=sys.stderr)
        return 1
    return 0
