"""The producer's Produce requests over the brokers' Kafka listeners (client.kafka_produce), against
real brokers: every record acknowledged is there, in order, at the offset it was given, whether a
request went over the Kafka listener or over gRPC before the connection was open; a broker that
offers no listener of the client's protocol, or a producer told not to, stays on gRPC."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import create_topic, wait_for

from client.consumer import Consumer
from client.producer import Producer
from client.structs import TopicPartition
from proto import minikafka_pb2 as pb

pytestmark = pytest.mark.integration


def _ready(fx: Any, topic: str, partitions: int) -> None:
    view = fx.view()
    assert create_topic(view, topic, partitions=partitions, replication_factor=3,
                        configs={"min.insync.replicas": "2"}).error_code == pb.ErrorCode.NONE

    def led() -> bool:
        view.refresh([topic])
        return all(view.partitions.get((topic, p)) is not None and view.partitions[(topic, p)].leader >= 0
                   for p in range(partitions))
    wait_for(led, what=f"{topic} led")


def _read_back(bootstrap: str, topic: str, partitions: int, count: int) -> dict[int, list[tuple[int, bytes]]]:
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])

        def all_read() -> bool:
            for r in consumer.poll(timeout_ms=200):
                got[r.partition].append((r.offset, r.value))
            return sum(map(len, got.values())) >= count
        wait_for(all_read, timeout_s=30, what=f"{count} records read back")
    return got


def test_acks_all_records_go_over_the_kafka_listener_and_read_back_in_order(module_cluster) -> None:  # type: ignore[no-untyped-def]
    c = module_cluster.cluster
    bootstrap = c.state.bootstrap_servers
    _ready(module_cluster, "kp-all", 3)
    sent: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(3)}
    with Producer(bootstrap, acks="all", linger_ms=0) as producer:
        for i in range(600):
            md = producer.send("kp-all", f"v{i}".encode(), partition=i % 3).result(timeout=30)
            sent[md.partition].append((md.offset, f"v{i}".encode()))
        conns = dict(producer._kafka_conns)
        assert conns, "the producer never connected to a Kafka listener"
        assert all(conn.failed is None and conn._correlation_id > 0 for conn in conns.values())
        metadata = producer._view.kafka_produce
        assert sorted(metadata) == [1, 2, 3], metadata
    got = _read_back(bootstrap, "kp-all", 3, 600)
    for p in range(3):
        assert got[p] == sent[p] == [(o, v) for o, (_o, v) in enumerate(sent[p])], f"partition {p}"


def test_pipelined_batches_from_many_partitions_and_acks_one_and_zero(module_cluster) -> None:  # type: ignore[no-untyped-def]
    c = module_cluster.cluster
    bootstrap = c.state.bootstrap_servers
    _ready(module_cluster, "kp-many", 6)
    for acks in (1, 0):
        with Producer(bootstrap, acks=acks, enable_idempotence=False, linger_ms=1, batch_size=2000) as producer:
            # The Kafka listener connection opens in the background on the first send, which goes
            # over gRPC meanwhile: on a loaded machine all 3,000 records can be sent before it is
            # open. So one record per partition first, then wait for a connection.
            for p in range(6):
                producer.send("kp-many", f"w{acks}-{p}".encode(), partition=p).result(timeout=30)
            wait_for(lambda: bool(producer._kafka_conns), timeout_s=30, what="a Kafka listener connection")
            futures = [producer.send("kp-many", f"a{acks}-{i}".encode(), partition=i % 6) for i in range(3000)]
            producer.flush(timeout=60)
            assert all(f.exception() is None for f in futures)
            conns = dict(producer._kafka_conns)
            assert any(conn._correlation_id > 0 for conn in conns.values()), "no batch went over a Kafka listener"
    got = _read_back(bootstrap, "kp-many", 6, 6000 + 2 * 6)
    for p in range(6):
        values = [v for _o, v in got[p]]
        assert [o for o, _v in got[p]] == list(range(len(got[p])))
        for acks in (1, 0):
            mine = [v for v in values if v.startswith(f"a{acks}-".encode())]
            assert mine == [f"a{acks}-{i}".encode() for i in range(p, 3000, 6)], (p, acks)


def test_kafka_listener_false_keeps_produce_on_grpc(module_cluster) -> None:  # type: ignore[no-untyped-def]
    c = module_cluster.cluster
    _ready(module_cluster, "kp-grpc", 1)
    with Producer(c.state.bootstrap_servers, kafka_listener=False, linger_ms=0) as producer:
        for _ in range(20):
            producer.send("kp-grpc", b"g").result(timeout=30)
        assert producer._kafka_conns == {} and producer._produce_streams


def test_an_ssl_client_produces_over_the_ssl_kafka_listener_as_its_certificate(cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """On SSL listeners with ssl.client.auth=required the Kafka listener takes the same certificate as
    the gRPC one and maps it to the same principal: the producer's requests go there, authenticated."""
    from pathlib import Path

    from client.connection import ClusterView
    from client.ops import certs
    from proto.transport import ChannelSecurity

    c = cluster.start(3, listener_security_protocol_map="CLIENT:SSL,INTERNAL:SSL,KAFKA:SSL",
                      ssl_client_auth="required")
    secrets = Path(c.state.secrets)
    client = certs.issue(secrets, "app", out=tmp_path / "app.pem").pem
    security = ChannelSecurity("SSL", ssl_cafile=str(secrets / "ca.pem"), ssl_certfile=str(client))
    view = ClusterView(c.state.bootstrap_servers, timeout_s=5, security=security)
    try:
        assert create_topic(view, "kp-ssl", partitions=1, replication_factor=3).error_code == pb.ErrorCode.NONE
        wait_for(lambda: view.refresh(["kp-ssl"]) and view.partitions.get(("kp-ssl", 0)) is not None
                 and view.partitions[("kp-ssl", 0)].leader >= 0, what="kp-ssl led")
        assert sorted(view.kafka_produce) == [1, 2, 3]
    finally:
        view.close()
    with Producer(c.state.bootstrap_servers, security=security, linger_ms=0) as producer:
        offsets = [producer.send("kp-ssl", f"s{i}".encode()).result(timeout=30).offset for i in range(200)]
        assert offsets == list(range(200))
        assert [conn._correlation_id > 0 for conn in producer._kafka_conns.values()] == [True]
