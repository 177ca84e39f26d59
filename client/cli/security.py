"""``minikafka acls`` and ``minikafka users``: Kafka's kafka-acls and kafka-configs --entity-type users.

    minikafka acls --add --allow-principal User:alice --operation Read --topic orders
    minikafka acls --add --deny-principal User:bob --operation Write --topic '*'
    minikafka acls --list [--topic T | --group G | --transactional-id ID | --cluster]
    minikafka acls --add --allow-principal User:etl --operation Write --transactional-id etl-1
    minikafka acls --remove --allow-principal User:alice --operation Read --topic orders
    minikafka users --add alice [--password-file F]   (the password is read from stdin otherwise)
    minikafka users --delete alice
    minikafka users --list

Both go through the brokers (CreateAcls/DescribeAcls/DeleteAcls, AlterUserScramCredentials), so the
caller needs Alter/Describe on the cluster when the authorizer is on; a password never leaves this
process unsalted.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from pathlib import Path
from typing import Any

from client.admin import AdminClient
from client.cli.tool_args import add_connection_args, bootstrap_from_args, security_from_args
from proto import errors
from proto import minikafka_pb2 as pb

OPERATIONS = ("All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction", "DescribeConfigs",
              "AlterConfigs", "IdempotentWrite")
RESOURCE_NAMES: dict[int, str] = {pb.AclResourceType.TOPIC_RESOURCE: "Topic", pb.AclResourceType.GROUP_RESOURCE: "Group",
                  pb.AclResourceType.CLUSTER_RESOURCE: "Cluster",
                  pb.AclResourceType.TRANSACTIONAL_ID_RESOURCE: "TransactionalId"}


def add_parsers(sub: Any) -> None:
    a = sub.add_parser("acls", help="add, list, remove ACLs (kafka-acls)")
    add_connection_args(a)
    action = a.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add the ACLs described by the other flags")
    action.add_argument("--remove", action="store_true", help="remove the ACLs matching the other flags")
    action.add_argument("--list", action="store_true", help="list ACLs (of one resource when given)")
    a.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME",
                   help="principal allowed (repeatable; User:* is everyone)")
    a.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME",
                   help="principal denied (repeatable); a Deny wins over any Allow")
    a.add_argument("--operation", action="append", default=[], choices=OPERATIONS,
                   help="operation (repeatable): Read, Write, Create, Delete, Alter, Describe, ClusterAction, ...")
    a.add_argument("--host", default="*", help="the client address the ACL applies to (default: any)")
    res = a.add_mutually_exclusive_group()
    res.add_argument("--topic", help="a topic name, or * for every topic")
    res.add_argument("--group", help="a consumer group id, or * for every group")
    res.add_argument("--transactional-id", dest="transactional_id",
                     help="a transactional id (KIP-98: Write to use it, Describe to find its coordinator), or *")
    res.add_argument("--cluster", action="store_true", help="the cluster (create topics, reassignments, elections)")
    a.set_defaults(func=cmd_acls)

    u = sub.add_parser("users", help="SCRAM-SHA-256 users (kafka-configs --entity-type users)")
    add_connection_args(u)
    uaction = u.add_mutually_exclusive_group(required=True)
    uaction.add_argument("--add", metavar="USER", help="create the user or change its password")
    uaction.add_argument("--delete", metavar="USER", help="delete the user's credential")
    uaction.add_argument("--list", action="store_true", help="list users")
    u.add_argument("--password-file", type=Path, default=None,
                   help="read the password from this file (default: stdin, or a prompt on a terminal)")
    u.add_argument("--iterations", type=int, default=4096, help="SCRAM iterations (4096..16384)")
    u.add_argument("--zookeeper-bootstrap", default=None, metavar="HOST:PORT[/chroot]",
                   help="write the credential straight into ZooKeeper (to create the first super user before "
                        "any broker runs, as Kafka's kafka-configs --zookeeper); needs --zookeeper-digest-file")
    u.add_argument("--zookeeper-digest-file", type=Path, default=None,
                   help="the brokers' ZooKeeper credential (user:password), with --zookeeper-bootstrap")
    u.set_defaults(func=cmd_users)


def _resource(args: argparse.Namespace) -> tuple[pb.AclResourceType, str] | None:
    if args.topic:
        return pb.AclResourceType.TOPIC_RESOURCE, args.topic
    if args.group:
        return pb.AclResourceType.GROUP_RESOURCE, args.group
    if args.transactional_id:
        return pb.AclResourceType.TRANSACTIONAL_ID_RESOURCE, args.transactional_id
    if args.cluster:
        return pb.AclResourceType.CLUSTER_RESOURCE, "kafka-cluster"
    return None


def _print_acls(args: argparse.Namespace, acls: list[pb.AclBinding], header: str) -> None:
    rows = [{"resource_type": RESOURCE_NAMES.get(b.resource_type, "?"), "resource": b.resource_name,
             "principal": b.principal, "host": b.host, "operation": b.operation, "permission": b.permission_type}
            for b in acls]
    if args.output == "json":
        print(json.dumps(rows, indent=2))
        return
    print(header)
    for r in rows:
        print(f"  {r['resource_type']}:{r['resource']}\t(principal={r['principal']}, host={r['host']}, "
              f"operation={r['operation']}, permissionType={r['permission']})")


def cmd_acls(args: argparse.Namespace) -> int:
    resource = _resource(args)
    grants = [(p, "Allow") for p in args.allow_principal] + [(p, "Deny") for p in args.deny_principal]
    with AdminClient(bootstrap_from_args(args), security=security_from_args(args)) as admin:
        if args.list:
            f = pb.AclFilter(resource_type=resource[0], resource_name=resource[1]) if resource else pb.AclFilter()
            _print_acls(args, admin.describe_acls(f), "Current ACLs:")
            return 0
        if resource is None:
            raise errors.InvalidRequestError("give --topic, --group, --transactional-id or --cluster")
        if not grants or not args.operation:
            raise errors.InvalidRequestError("give --allow-principal/--deny-principal and --operation")
        bindings = [pb.AclBinding(resource_type=resource[0], resource_name=resource[1], principal=p, host=args.host,
                                  operation=op, permission_type=perm)
                    for p, perm in grants for op in args.operation]
        if args.add:
            admin.create_acls(bindings)
            _print_acls(args, bindings, f"Added ACLs for resource {RESOURCE_NAMES[resource[0]]}:{resource[1]}:")
        else:
            removed = admin.delete_acls([pb.AclFilter(resource_type=b.resource_type, resource_name=b.resource_name,
                                                      principal=b.principal, host=b.host, operation=b.operation,
                                                      permission_type=b.permission_type) for b in bindings])
            _print_acls(args, removed, f"Removed {len(removed)} ACLs:")
    return 0


def _password(args: argparse.Namespace) -> str:
    if args.password_file is not None:
        try:
            text: str = args.password_file.read_text()
            return text.strip()
        except OSError as e:
            raise errors.InvalidConfigError(f"cannot read {args.password_file}: {e.strerror}") from None
    if sys.stdin.isatty():
        return getpass.getpass("password: ")
    return sys.stdin.readline().strip()


def _bootstrap_user(args: argparse.Namespace, password: str) -> None:
    """A SCRAM credential straight into ZooKeeper before any broker runs (Kafka's
    ``kafka-configs --zookeeper``), with the brokers' ZooKeeper ACLs."""
    from proto.scram import MECHANISM, new_credential
    from zk.client import KafkaZkClient, read_digest

    if args.zookeeper_digest_file is None:
        raise errors.InvalidRequestError("--zookeeper-bootstrap needs --zookeeper-digest-file")
    zk = KafkaZkClient(args.zookeeper_bootstrap, session_timeout_ms=10000, connection_timeout_ms=30000,
                       digest=read_digest(str(args.zookeeper_digest_file)))
    zk.start()
    try:
        zk.ensure_persistent_paths()
        zk.set_user_config(args.add, {MECHANISM: new_credential(password, args.iterations).encode()})
    finally:
        zk.stop()


def cmd_users(args: argparse.Namespace) -> int:
    if args.zookeeper_bootstrap:
        if not args.add:
            raise errors.InvalidRequestError("--zookeeper-bootstrap only adds users")
        _bootstrap_user(args, _password(args))
        print(f"Set the SCRAM-SHA-256 credential of user {args.add} in ZooKeeper.")
        return 0
    with AdminClient(bootstrap_from_args(args), security=security_from_args(args)) as admin:
        if args.list:
            users = admin.describe_scram_users()
            if args.output == "json":
                print(json.dumps([{"user": u, "mechanism": "SCRAM-SHA-256", "iterations": i}
                                  for u, i in sorted(users.items())], indent=2))
            else:
                for u, i in sorted(users.items()):
                    print(f"{u}\tSCRAM-SHA-256\titerations={i}")
            return 0
        if args.delete:
            admin.delete_scram_user(args.delete)
            print(f"Deleted the SCRAM-SHA-256 credential of user {args.delete}.")
            return 0
        password = _password(args)
        if not password:
            raise errors.InvalidRequestError("the password is empty")
        admin.upsert_scram_user(args.add, password, args.iterations)
        print(f"Set the SCRAM-SHA-256 credential of user {args.add}.")
    return 0
