"""``minikafka configs``: mirrors kafka-configs.sh (with ``--bootstrap-server``, Kafka 2.8).

* ``--describe --entity-type topics|brokers|users [--entity-name X | --entity-default] [--all]``:
  topics and brokers through DescribeConfigs (a broker's configs asked of that broker), printed as
  Kafka prints them - ``Dynamic configs for topic T are:`` then ``  name=value sensitive=false
  synonyms={SOURCE:name=value}``; without ``--all`` only the dynamic ones (a topic's overrides; a
  broker's are all static here, so none), sensitive values as ``null``. Users: their SCRAM
  credentials (``SCRAM-SHA-256=iterations=N``).
* ``--alter --add-config k=v,k2=[a,b] --delete-config k3,k4``: topic configs (incremental
  AlterConfigs; deleting a config the topic does not override is refused, as Kafka's tool does) and
  users' SCRAM credentials (``SCRAM-SHA-256=[iterations=8192,password=...]``); broker configs are
  static here and are refused.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from client.admin import AdminClient
from client.cli.tool_args import add_connection_args, bootstrap_from_args, print_result, security_from_args
from proto import errors
from proto import minikafka_pb2 as pb
from proto.names import validate_topic_name
from proto.scram import MECHANISM, MIN_ITERATIONS

_SPLIT = re.compile(r",(?![^\[]*\])")  # commas outside [...]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("configs", help="describe and alter topic, broker and user configs (kafka-configs)")
    add_connection_args(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="list the entity's configs")
    action.add_argument("--alter", action="store_true", help="change the entity's configs")
    p.add_argument("--entity-type", required=True, choices=["topics", "brokers", "users"], help="what to configure")
    p.add_argument("--entity-name", default=None, help="the topic, broker id or user (default: all)")
    p.add_argument("--entity-default", action="store_true", help="the cluster-wide default (brokers)")
    p.add_argument("--all", action="store_true", help="with --describe: every config, not only dynamic ones")
    p.add_argument("--add-config", default="", help="k=v,k2=[v1,v2],... to set")
    p.add_argument("--delete-config", default="", help="k,k2,... to remove")
    p.set_defaults(func=cmd_configs)


def parse_add_config(value: str) -> dict[str, str]:
    """Kafka's --add-config: comma-separated k=v, a value in square brackets may hold commas."""
    out: dict[str, str] = {}
    for item in (x.strip() for x in _SPLIT.split(value) if x.strip()):
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise errors.InvalidConfigError(f"--add-config expects k=v, got {item!r}")
        v = v.strip()
        out[k.strip()] = v[1:-1] if v.startswith("[") and v.endswith("]") else v
    return out


def entry_line(e: pb.ConfigEntry) -> str:
    """One described config, as kafka-configs prints it (a sensitive value is null)."""
    value = "null" if e.is_sensitive or e.value_null else e.value
    # The entry's synonyms as the broker gives them (issue 34: topic and broker configs), {} when none,
    # as Kafka's tool prints them.
    synonyms = ", ".join(f"{pb.ConfigSource.Name(s.source)}:{s.name}={'null' if e.is_sensitive else s.value}"
                         for s in e.synonyms)
    return f"  {e.name}={value} sensitive={str(e.is_sensitive).lower()} synonyms={{{synonyms}}}"


def _shown(entries: list[pb.ConfigEntry], describe_all: bool) -> list[pb.ConfigEntry]:
    if describe_all:
        return entries
    return [e for e in entries if e.source in (pb.ConfigSource.DYNAMIC_TOPIC_CONFIG, pb.ConfigSource.DYNAMIC_BROKER_CONFIG)]


def cmd_configs(args: argparse.Namespace) -> int:
    if args.entity_default and args.entity_type != "brokers":
        raise errors.InvalidRequestError("--entity-default is for --entity-type brokers here")
    with AdminClient(bootstrap_from_args(args), security=security_from_args(args)) as admin:
        if args.alter:
            return _alter(admin, args)
        if args.add_config or args.delete_config:
            raise errors.InvalidRequestError("--add-config/--delete-config go with --alter")
        if args.entity_type == "users":
            return _describe_users(admin, args)
        return _describe(admin, args)


def _describe(admin: AdminClient, args: argparse.Namespace) -> int:
    kind = "topic" if args.entity_type == "topics" else "broker"
    if args.entity_default:
        names = [""]
    elif args.entity_name is not None:
        names = [args.entity_name]
    elif kind == "topic":
        names = admin.list_topics()
    else:
        names = [str(b.broker_id) for b in admin.describe_cluster_full().brokers] + [""]
    lines: list[str] = []
    result: dict[str, dict[str, Any]] = {}
    for name in names:
        if kind == "topic":
            validate_topic_name(name)
            entries = admin.describe_config_entries(pb.ConfigResourceType.TOPIC, name)
        else:
            if name and not name.isdigit():
                raise errors.InvalidRequestError(f"--entity-name: a broker id, got {name!r}")
            entries = admin.describe_config_entries(pb.ConfigResourceType.BROKER, name,
                                                    broker_id=int(name) if name else None)
        shown = _shown(entries, args.all)
        if kind == "broker" and not name:
            lines.append("Default configs for brokers in the cluster are:")
        else:
            lines.append(f"{'All' if args.all else 'Dynamic'} configs for {kind} {name} are:")
        lines.extend(entry_line(e) for e in shown)
        result[name or "<default>"] = {e.name: {"value": None if e.is_sensitive else e.value,
                                               "sensitive": e.is_sensitive,
                                               "source": pb.ConfigSource.Name(e.source)} for e in shown}
    print_result(args, result, "\n".join(lines))
    return 0


def _describe_users(admin: AdminClient, args: argparse.Namespace) -> int:
    names = [args.entity_name] if args.entity_name else []
    try:
        users = admin.describe_scram_users(names)
    except errors.ResourceNotFoundError as e:
        print_result(args, {"error": str(e)},
                     f"Error retrieving SCRAM credential configs for user-principal '{args.entity_name}': "
                     f"ResourceNotFoundException: {e.message}")
        return 1
    lines = [f"SCRAM credential configs for user-principal '{u}' are {MECHANISM}=iterations={n}"
             for u, n in sorted(users.items())]
    print_result(args, {u: {MECHANISM: {"iterations": n}} for u, n in sorted(users.items())}, "\n".join(lines))
    return 0


def _alter(admin: AdminClient, args: argparse.Namespace) -> int:
    if not args.entity_name:
        raise errors.InvalidRequestError("--alter needs --entity-name")
    add = parse_add_config(args.add_config)
    delete = [k.strip() for k in args.delete_config.split(",") if k.strip()]
    if not add and not delete:
        raise errors.InvalidRequestError("give --add-config and/or --delete-config")
    if args.entity_type == "brokers":
        raise errors.InvalidConfigError("broker configs are static here (read-only): set them in the broker's "
                                        "config file and restart it")
    if args.entity_type == "users":
        for k, v in add.items():
            if k != MECHANISM:
                raise errors.InvalidConfigError(f"unknown user config {k!r}: only {MECHANISM} credentials")
            fields = parse_add_config(v)
            if "password" not in fields:
                raise errors.InvalidConfigError(f"{MECHANISM}=[iterations=N,password=...] needs a password")
            admin.upsert_scram_user(args.entity_name, fields["password"],
                                    int(fields.get("iterations", MIN_ITERATIONS)))
        for k in delete:
            if k != MECHANISM:
                raise errors.InvalidConfigError(f"unknown user config {k!r}: only {MECHANISM} credentials")
            admin.delete_scram_user(args.entity_name)
        print_result(args, {"user": args.entity_name}, f"Completed updating config for user {args.entity_name}.")
        return 0
    topic = args.entity_name
    validate_topic_name(topic)
    current = admin.describe_topic_configs(topic, only_overrides=True)
    invalid = [k for k in delete if k not in current]
    if invalid:
        raise errors.InvalidConfigError(f"Invalid config(s): {','.join(invalid)}")
    admin.alter_topic_configs(topic, set_configs=add, delete_configs=delete)
    print_result(args, {"topic": topic}, f"Completed updating config for topic {topic}.")
    return 0
