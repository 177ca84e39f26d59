"""Issue 34 through confluent-kafka (librdkafka), unchanged: DescribeConfigs lists every topic config
of Kafka 2.8 with its source and synonyms, CreateTopics takes Kafka's defaults passed explicitly, and
compression.type=gzip makes the leader recompress a zstd producer's batches (checked on the wire)."""

from __future__ import annotations

import socket
import struct
from typing import Any

import pytest
from helpers import wait_for

from broker.log.config import TOPIC_CONFIGS
from proto.record_batch import COMPRESSION_GZIP, decode_batch, iter_headers

pytestmark = pytest.mark.integration
confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic  # noqa: E402


def _bootstrap(cluster: Any) -> str:
    state = cluster.cluster.state
    assert state is not None
    servers: str = state.kafka_bootstrap_servers
    return servers


def _create(admin: AdminClient, topic: str, config: dict[str, str]) -> None:
    for f in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=3, config=config)],
                                 operation_timeout=20).values():
        f.result(timeout=60)

    def led() -> bool | None:
        t = admin.list_topics(topic, timeout=10).topics.get(topic)
        return (t is not None and t.error is None and all(p.leader >= 0 for p in t.partitions.values())) or None

    wait_for(led, timeout_s=30, what=f"{topic} led")


def _kafka_call(sock: socket.socket, api_key: int, version: int, values: dict[str, Any]) -> Any:
    from kafka_frames import frame, read_response

    body = frame(api_key, version, values)
    sock.sendall(struct.pack(">i", len(body)) + body)
    data = b""
    for _ in range(100_000):  # bounded: recv returns at least one byte or b"" (closed)
        if len(data) >= 4 and len(data) >= 4 + struct.unpack_from(">i", data)[0]:
            break
        chunk = sock.recv(1 << 16)
        assert chunk, "the broker closed the connection"
        data += chunk
    return read_response(data, api_key, version)[1]


def test_describe_configs_lists_every_topic_config_with_sources(module_cluster) -> None:  # type: ignore[no-untyped-def]
    admin = AdminClient({"bootstrap.servers": _bootstrap(module_cluster)})
    # Kafka's defaults passed explicitly (as many tools do) are accepted.
    _create(admin, "tc-defaults", {"cleanup.policy": "delete", "compression.type": "producer",
                                   "message.format.version": "2.8-IV1", "retention.ms": "3600000"})
    (described,) = admin.describe_configs([ConfigResource("topic", "tc-defaults")]).values()
    configs = described.result(timeout=30)
    assert set(configs) == {d.name for d in TOPIC_CONFIGS}
    for name in ("cleanup.policy", "compression.type", "message.format.version", "retention.ms"):
        assert configs[name].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, name
    assert configs["retention.ms"].value == "3600000"
    synonyms = configs["retention.ms"].synonyms
    assert next(iter(synonyms)) == "retention.ms" and "log.retention.hours" in synonyms
    assert synonyms["log.retention.hours"].source == ConfigSource.DEFAULT_CONFIG.value
    for name in ("segment.bytes", "delete.retention.ms", "preallocate", "leader.replication.throttled.replicas"):
        assert configs[name].source == ConfigSource.DEFAULT_CONFIG.value, name
        assert configs[name].is_default and not configs[name].is_read_only and not configs[name].is_sensitive
    assert configs["segment.bytes"].value == "1073741824" and configs["delete.retention.ms"].value == "86400000"
    # An unknown name is still refused; a value outside Kafka's range too.
    for bad in ({"no.such.config": "1"}, {"compression.type": "brotli"}, {"message.format.version": "0.10.2"}):
        with pytest.raises(confluent_kafka.KafkaException) as e:
            _create(admin, "tc-refused", bad)
        assert e.value.args[0].code() == confluent_kafka.KafkaError.INVALID_CONFIG, bad


def test_compression_type_gzip_recompresses_a_zstd_producers_batches(module_cluster) -> None:  # type: ignore[no-untyped-def]
    bootstrap = _bootstrap(module_cluster)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = "tc-gzip"
    _create(admin, topic, {"compression.type": "gzip"})
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "compression.type": "zstd",
                                         "linger.ms": 20, "acks": "all"})
    values = [f"value-{i}".encode() * 10 for i in range(50)]
    for v in values:
        producer.produce(topic, v, key=b"k")
    assert producer.flush(30) == 0
    # The consumer reads every record back.
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "tc-gzip-reader",
                                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        def read() -> bool | None:
            m = consumer.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.value())
            return len(got) >= len(values) or None

        wait_for(read, timeout_s=60, what="the records")
    finally:
        consumer.close()
    assert got == values
    # On the wire (a raw Fetch v4 to the leader): every batch is gzip, offsets from 0.
    md = admin.list_topics(topic, timeout=10)
    leader = md.topics[topic].partitions[0].leader
    b = md.brokers[leader]
    with socket.create_connection((b.host, b.port), timeout=20) as s:
        resp = _kafka_call(s, 1, 4, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                        "partition_max_bytes": 1 << 20}]}]})
    records = resp.responses[0].partitions[0].records
    assert records
    headers = list(iter_headers(records))
    assert headers and all(h.compression == COMPRESSION_GZIP for _pos, h in headers)
    decoded = [r for pos, _h in headers for r in decode_batch(records, pos)[1]]
    assert [r.value for r in decoded] == values and [r.offset for r in decoded] == list(range(len(values)))
