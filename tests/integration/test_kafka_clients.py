"""Real Kafka clients against the Kafka protocol listener (issue 16): librdkafka (confluent-kafka),
kafka-python, aiokafka and kcat, with no code of ours on their side, against real brokers and ZooKeeper."""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest
from helpers import wait_for

pytestmark = pytest.mark.integration
confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def kafka_bootstrap(cluster: Any) -> str:
    c = cluster.cluster
    assert c is not None and c.state is not None
    servers: str = c.state.kafka_bootstrap_servers
    assert servers.count(",") == len(c.state.brokers) - 1, "every broker has a Kafka listener"
    return servers


def create(admin: AdminClient, topic: str, partitions: int, rf: int = 3) -> None:
    for f in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=rf)],
                                 operation_timeout=20).values():
        f.result(timeout=30)


def consume_all(bootstrap: str, topic: str, count: int, group: str, timeout_s: float = 60) -> list[Any]:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append(m)
        # Nothing beyond what was produced (no duplicates) within a short extra poll.
        extra = c.poll(1.0)
        assert extra is None or extra.error() is not None, f"unexpected extra record {extra.value()!r}"
    finally:
        c.close()
    return out


def test_librdkafka_idempotent_produce_with_every_codec_and_consume_back(module_cluster) -> None:  # type: ignore[no-untyped-def]
    bootstrap = kafka_bootstrap(module_cluster)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = "rdkafka-codecs"
    create(admin, topic, 3)
    sent: dict[str, list[bytes]] = {}
    for codec in CODECS:
        p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                      "compression.type": codec, "linger.ms": 5})
        errors: list[Any] = []
        for i in range(400):
            key = f"k{i % 17}".encode()
            value = f"{codec}-{i}".encode() * (1 + i % 5)
            sent.setdefault(key.decode(), []).append(value)
            p.produce(topic, key=key, value=value, on_delivery=lambda e, _m, errs=errors: e and errs.append(e))
        assert p.flush(60) == 0 and errors == []
    got = consume_all(bootstrap, topic, 5 * 400, "rdkafka-codecs-check")
    by_key: dict[str, list[bytes]] = {}
    for m in sorted(got, key=lambda m: (m.partition(), m.offset())):
        by_key.setdefault(m.key().decode(), []).append(m.value())
    # Exactly what was sent, and per key (one partition each) in the order it was sent.
    assert by_key == sent


def test_kafka_python_producer_and_group_consumer_round_trip(module_cluster) -> None:  # type: ignore[no-untyped-def]
    kafka = pytest.importorskip("kafka")
    bootstrap = kafka_bootstrap(module_cluster)
    create(AdminClient({"bootstrap.servers": bootstrap}), "kafka-python", 2)
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type="gzip")
    for i in range(300):
        producer.send("kafka-python", key=str(i).encode(), value=f"v{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = kafka.KafkaConsumer("kafka-python", bootstrap_servers=bootstrap, group_id="kp-group",
                                   auto_offset_reset="earliest", consumer_timeout_ms=3000,
                                   enable_auto_commit=False)
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(values) < 300 and time.monotonic() < deadline:
        values += [m.value for m in consumer]
    consumer.commit()
    consumer.close()
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(300))
    # The commit went to the broker-side coordinator: the group resumes there, with nothing left.
    again = kafka.KafkaConsumer("kafka-python", bootstrap_servers=bootstrap, group_id="kp-group",
                                auto_offset_reset="earliest", consumer_timeout_ms=3000)
    assert [m.value for m in again] == []
    again.close()


def test_aiokafka_produce_and_group_consume(module_cluster) -> None:  # type: ignore[no-untyped-def]
    aiokafka = pytest.importorskip("aiokafka")
    import asyncio

    bootstrap = kafka_bootstrap(module_cluster)
    create(AdminClient({"bootstrap.servers": bootstrap}), "aiokafka", 2)

    async def go() -> list[bytes]:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
        await producer.start()
        try:
            for i in range(200):
                await producer.send("aiokafka", f"a{i}".encode(), key=str(i % 7).encode())
            await producer.flush()
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer("aiokafka", bootstrap_servers=bootstrap, group_id="aio-group",
                                             auto_offset_reset="earliest")
        await consumer.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + 60
            while len(got) < 200 and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                got += [m.value for msgs in batches.values() for m in msgs]
        finally:
            await consumer.stop()
        return got

    assert sorted(asyncio.run(go())) == sorted(f"a{i}".encode() for i in range(200))


def test_confluent_admin_creates_describes_and_deletes_topics(module_cluster) -> None:  # type: ignore[no-untyped-def]
    bootstrap = kafka_bootstrap(module_cluster)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    create(admin, "admin-topic", 4, rf=2)
    md = admin.list_topics(timeout=10)
    assert len(md.topics["admin-topic"].partitions) == 4
    assert all(len(p.replicas) == 2 for p in md.topics["admin-topic"].partitions.values())
    with pytest.raises(confluent_kafka.KafkaException) as e:
        create(admin, "admin-topic", 1)
    assert e.value.args[0].code() == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS
    res = ConfigResource("topic", "admin-topic", incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(timeout=30)
    (described,) = admin.describe_configs([ConfigResource("topic", "admin-topic")]).values()
    configs = described.result(timeout=30)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == confluent_kafka.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    for f in admin.delete_topics(["admin-topic"], operation_timeout=20).values():
        f.result(timeout=30)
    wait_for(lambda: "admin-topic" not in admin.list_topics(timeout=10).topics or None, timeout_s=30)


def test_a_hostile_frame_closes_only_its_own_connection(module_cluster) -> None:  # type: ignore[no-untyped-def]
    """SPEC S13: a broken or oversized frame costs its sender the connection, nothing more."""
    bootstrap = kafka_bootstrap(module_cluster)
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    # A Fetch v12 whose topics count claims 2**32 - 1 entries: kio's compiled reader used to reserve
    # memory for them and abort the broker (broker/kafka_wire_bounds.py).
    fetch = bytes.fromhex("0001000c0000000700047465737400ffffffff00000000000000007fffffff0000000000ffffffff"
                          "ffffffff0f010100")
    for bad in (struct.pack(">i", 1 << 30), struct.pack(">i", 14) + b"\x00\x03\x00\x09" + b"\xff" * 10,
                struct.pack(">i", len(fetch)) + fetch):
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(bad)
            assert s.recv(1) == b"", "the broker should close the connection"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert len(admin.list_topics(timeout=10).brokers) == 3


@pytest.mark.skipif(shutil.which("kcat") is None, reason="Debian's kcat is not installed")
def test_kcat_lists_the_cluster(module_cluster) -> None:  # type: ignore[no-untyped-def]
    bootstrap = kafka_bootstrap(module_cluster)
    r = subprocess.run(["kcat", "-L", "-b", bootstrap, "-m", "10"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "3 brokers:" in r.stdout and "(controller)" in r.stdout


def test_cluster_status_has_the_kafka_bootstrap_servers(module_cluster) -> None:  # type: ignore[no-untyped-def]
    status: Callable[[], dict[str, Any]] = module_cluster.cluster.status
    s = status()
    assert s["kafka_bootstrap_servers"] == kafka_bootstrap(module_cluster)
    assert all(b["kafka_address"] for b in s["brokers"])


def test_librdkafka_idempotent_produce_survives_a_leader_sigkill(cluster) -> None:  # type: ignore[no-untyped-def]
    """acks=all + idempotence through a leader SIGKILL mid-stream: every write acknowledged, none
    lost, duplicated or reordered (client/ops/history.py), read back through librdkafka too."""
    from client.ops.history import FAIL, OK, Read, Write, check

    c = cluster.start(3)
    bootstrap = kafka_bootstrap(cluster)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = "sigkill"
    for f in admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3,
                                           config={"min.insync.replicas": "2"})]).values():
        f.result(timeout=30)
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 2, "compression.type": "lz4", "message.timeout.ms": 120000})
    writes: list[Write] = []

    def delivered(err: Any, m: Any) -> None:
        value = m.value().decode()
        writes.append(Write("rdkafka", m.partition(), value, FAIL if err else OK, -1 if err else m.offset()))

    total = 3000
    victim = -1
    for i in range(total):
        p.produce(topic, value=f"v{i}".encode(), partition=i % 3, on_delivery=delivered)
        p.poll(0)
        if i == total // 3:
            p.flush(30)  # some history acknowledged before the fault
            victim = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
            c.signal(victim, "KILL")
        if i % 200 == 0:
            time.sleep(0.01)  # spread the stream over the failover
    assert p.flush(150) == 0
    assert len(writes) == total and {w.status for w in writes} == {OK}
    new_leader = wait_for(lambda: (admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
                                   not in (-1, victim)) or None, timeout_s=30)
    assert new_leader

    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "sigkill-check",
                                         "enable.auto.commit": False})
    reads: list[Read] = []
    ends = {part: consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, part), timeout=10)[1]
            for part in range(3)}
    consumer.assign([confluent_kafka.TopicPartition(topic, part, confluent_kafka.OFFSET_BEGINNING)
                     for part in range(3)])
    deadline = time.monotonic() + 60
    done = {part: ends[part] == 0 for part in range(3)}
    while not all(done.values()) and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is None or m.error() is not None:
            continue
        reads.append(Read(m.partition(), m.offset(), m.value().decode()))
        done[m.partition()] = m.offset() + 1 >= ends[m.partition()]
    consumer.close()
    report = check(writes, reads)
    assert report.valid, report.summary()
    assert sum(ends.values()) == total
