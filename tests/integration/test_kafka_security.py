"""Kafka's own clients on a secure cluster (issue 16, security): librdkafka (confluent-kafka) and
kafka-python over SASL_SSL with SCRAM-SHA-256 against the Kafka listener of real brokers, with the
same credentials and ACLs as the gRPC listeners; wrong passwords, ACL denials and plaintext
connections refused while the brokers stay healthy."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_for

from client.admin import AdminClient as GrpcAdmin
from client.admin import NewTopic as GrpcNewTopic
from proto import minikafka_pb2 as pb
from proto.properties import parse_properties

pytestmark = pytest.mark.integration
confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402


def _acl(resource_type: int, name: str, principal: str, operation: str) -> pb.AclBinding:
    return pb.AclBinding(resource_type=resource_type, resource_name=name, principal=principal, host="*",
                         operation=operation, permission_type="Allow")


def _sasl(bootstrap: str, ca: str, user: str, password: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-256",
            "sasl.username": user, "sasl.password": password, "ssl.ca.location": ca, **extra}


def _produce(conf: dict[str, Any], topic: str, values: list[bytes], timeout_s: float = 30) -> list[Any]:
    """Delivery errors (empty: every value acknowledged)."""
    p = confluent_kafka.Producer({**conf, "acks": "all", "enable.idempotence": True,
                                  "message.timeout.ms": int(timeout_s * 1000)})
    errors: list[Any] = []
    for v in values:
        p.produce(topic, value=v, on_delivery=lambda e, _m: e and errors.append(e))
    assert p.flush(timeout_s + 10) == 0
    return errors


def _consume(conf: dict[str, Any], topic: str, group: str, count: int, timeout_s: float = 60) -> list[bytes]:
    c = confluent_kafka.Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append(m.value())
        c.commit(asynchronous=False)
    finally:
        c.close()
    return out


def test_kafka_clients_over_sasl_ssl_scram_with_acls(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3, secure=True)
    state = c.state
    bootstrap = state.kafka_bootstrap_servers
    assert bootstrap.count(",") == 2, "every broker of a secure cluster has a (SASL_SSL) Kafka listener"
    ca = str(Path(state.secrets) / "ca.pem")
    props = parse_properties(Path(state.client_properties).read_text())
    admin_conf = _sasl(bootstrap, ca, props["sasl.username"], props["sasl.password"])

    # Metadata names the listener the client connected on: the brokers' Kafka ports, not the gRPC ones.
    md = AdminClient(admin_conf).list_topics(timeout=20)
    assert sorted(f"{b.host}:{b.port}" for b in md.brokers.values()) == sorted(bootstrap.split(","))

    with GrpcAdmin(state.bootstrap_servers, security=state.client_security()) as admin:
        admin.create_topics([GrpcNewTopic("kafka-secure", 2, 3), GrpcNewTopic("kafka-secret", 1, 3)])
        admin.upsert_scram_user("alice", "alice-secret")
        admin.create_acls([_acl(pb.AclResourceType.TOPIC_RESOURCE, "kafka-secure", "User:alice", op)
                           for op in ("Read", "Write", "Describe")]
                          + [_acl(pb.AclResourceType.GROUP_RESOURCE, "alice-group", "User:alice", "Read")])

    # The super user (SCRAM credential straight from ZooKeeper) produces idempotently and consumes.
    sent = [f"admin-{i}".encode() for i in range(200)]
    assert _produce(admin_conf, "kafka-secure", sent) == []
    assert sorted(_consume(admin_conf, "kafka-secure", "admin-group", 200)) == sorted(sent)

    # alice: her ACLs, applied exactly as on gRPC, once her credential and ACLs reach every broker.
    alice = _sasl(bootstrap, ca, "alice", "alice-secret")
    wait_for(lambda: _produce(alice, "kafka-secure", [b"alice"], timeout_s=5) == [],
             what="alice's credential and ACLs on every broker", timeout_s=60)
    denied = _produce(alice, "kafka-secret", [b"nope"], timeout_s=10)
    assert [e.code() for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    got = _consume(alice, "kafka-secure", "alice-group", 201)
    assert sorted(got) == sorted([*sent, b"alice"])

    # Issue 30: the ACL APIs on the Kafka wire with the authorizer on, through confluent-kafka's
    # AdminClient: the super user creates, describes and deletes; alice may not.
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    binding = AclBinding(ResourceType.TOPIC, "kafka-acl-wire", ResourcePatternType.LITERAL, "User:bob", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    match = AclBindingFilter(ResourceType.TOPIC, "kafka-acl-wire", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    super_admin = AdminClient(admin_conf)
    for f in super_admin.create_acls([binding], request_timeout=20).values():
        assert f.result(timeout=30) is None
    described = super_admin.describe_acls(match, request_timeout=20).result(timeout=30)
    assert [(b.name, b.principal, b.operation) for b in described] == [("kafka-acl-wire", "User:bob", AclOperation.READ)]
    alice_admin = AdminClient(alice)  # kept: a collected client fails its futures with _DESTROY
    refused = alice_admin.create_acls([binding], request_timeout=20)
    with pytest.raises(confluent_kafka.KafkaException) as denied_acl:
        next(iter(refused.values())).result(timeout=30)
    assert denied_acl.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    deleted = next(iter(super_admin.delete_acls([match], request_timeout=20).values())).result(timeout=30)
    assert [(b.name, b.principal) for b in deleted] == [("kafka-acl-wire", "User:bob")]
    assert super_admin.describe_acls(match, request_timeout=20).result(timeout=30) == []

    # A wrong password: the SASL exchange fails (SASL_AUTHENTICATION_FAILED), nothing is served.
    seen: list[Any] = []
    wrong = AdminClient(_sasl(bootstrap, ca, "alice", "not-her-password", error_cb=seen.append))
    with pytest.raises(confluent_kafka.KafkaException):
        wrong.list_topics(timeout=8)
    wrong.poll(2)  # error_cb is served from poll()
    assert any(e.code() == KafkaError._AUTHENTICATION for e in seen), seen

    # PLAINTEXT to the SASL_SSL port gets nowhere: librdkafka times out, a raw Kafka frame gets no
    # Kafka answer (at most a TLS alert), and the brokers stay healthy.
    plain = AdminClient({"bootstrap.servers": bootstrap})
    with pytest.raises(confluent_kafka.KafkaException):
        plain.list_topics(timeout=5)
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        api_versions_v0 = struct.pack(">hhih", 18, 0, 1, -1)
        s.sendall(struct.pack(">i", len(api_versions_v0)) + api_versions_v0)
        back = b""
        while chunk := s.recv(4096):
            back += chunk
            assert len(back) < 1 << 16
    assert back == b"" or back[0] == 0x15, back  # 0x15: a TLS alert record
    assert _produce(admin_conf, "kafka-secure", [b"after"], timeout_s=20) == []
    assert len(AdminClient(admin_conf).list_topics(timeout=20).brokers) == 3


def test_kafka_python_sasl_ssl_scram(cluster) -> None:  # type: ignore[no-untyped-def]
    kafka = pytest.importorskip("kafka")
    c = cluster.start(1, secure=True)
    state = c.state
    props = parse_properties(Path(state.client_properties).read_text())
    conf = {"bootstrap_servers": state.kafka_bootstrap_servers, "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": props["sasl.username"],
            "sasl_plain_password": props["sasl.password"], "ssl_cafile": str(Path(state.secrets) / "ca.pem")}
    producer = kafka.KafkaProducer(acks="all", **conf)
    for i in range(50):
        producer.send("kp-secure", value=f"v{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = kafka.KafkaConsumer("kp-secure", group_id="kp-secure-group", auto_offset_reset="earliest",
                                   consumer_timeout_ms=3000, **conf)
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(values) < 50 and time.monotonic() < deadline:
        values += [m.value for m in consumer]
    consumer.close()
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(50))
    with pytest.raises(kafka.errors.KafkaError):
        kafka.KafkaProducer(**{**conf, "sasl_plain_password": "wrong"}, max_block_ms=5000,
                            request_timeout_ms=5000).send("kp-secure", b"x").get(timeout=10)
