"""``minikafka acls --transactional-id`` (issue 31, KIP-98): the TransactionalId resource as Kafka's
kafka-acls.sh ``--transactional-id`` names it (Write to use the id, Describe to find its coordinator)."""

from __future__ import annotations

import argparse

from client.cli import security
from proto import minikafka_pb2 as pb


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    security.add_parsers(parser.add_subparsers())
    return parser.parse_args(list(argv))


def test_transactional_id_is_an_acl_resource() -> None:
    args = parse("acls", "--add", "--allow-principal", "User:etl", "--operation", "Write",
                 "--transactional-id", "etl-1")
    assert security._resource(args) == (pb.AclResourceType.TRANSACTIONAL_ID_RESOURCE, "etl-1")
    assert security.RESOURCE_NAMES[pb.AclResourceType.TRANSACTIONAL_ID_RESOURCE] == "TransactionalId"
    assert security._resource(parse("acls", "--list", "--transactional-id", "*")) == \
        (pb.AclResourceType.TRANSACTIONAL_ID_RESOURCE, "*")
