"""Issue 30's admin surface against real brokers: DescribeCluster, DescribeLogDirs, DescribeProducers
and DescribeConfigs of a BROKER resource - through confluent-kafka's AdminClient unchanged where it
has the call, raw Kafka frames otherwise, and gRPC - and the CLI commands log-dirs, get-offsets,
configs and dump-log run against the cluster."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import ClusterFixture, wait_for
from kafka_frames import frame, read_frame, read_response

from client.admin import AdminClient, NewTopic
from client.structs import TopicPartition
from proto.properties import parse_properties

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient as RdAdminClient  # noqa: E402
from confluent_kafka.admin import ConfigResource, ResourceType  # noqa: E402

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TOPIC = "surface"


def cli(fx: ClusterFixture, *args: str) -> subprocess.CompletedProcess[str]:
    assert fx.cluster is not None and fx.cluster.state is not None
    return subprocess.run([sys.executable, "-m", "client.cli", *args, "--bootstrap-server",
                           fx.cluster.state.bootstrap_servers], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


def offline_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "client.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


def kafka_call(address: str, api_key: int, version: int, values: dict[str, Any]) -> Any:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=20) as s:
        body = frame(api_key, version, values)
        s.sendall(struct.pack(">i", len(body)) + body)
        return read_response(read_frame(s), api_key, version)[1]


def test_describe_apis_and_their_tools_on_a_cluster(cluster: ClusterFixture) -> None:
    from kio.schema.errors import ErrorCode

    c = cluster.start(3)
    assert c.state is not None
    kafka_address = {b.broker_id: f"127.0.0.1:{b.kafka_port}" for b in c.state.brokers.values()}
    bootstrap = c.state.kafka_bootstrap_servers
    admin = AdminClient(c.state.bootstrap_servers, security=c.state.client_security())
    try:
        admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=3)])
        wait_for(lambda: len(admin.describe_topics([TOPIC])[0].partitions) == 2
                 and all(p.leader >= 0 and len(p.isr) == 3 for p in admin.describe_topics([TOPIC])[0].partitions),
                 what="the topic led with full ISRs")
        before = int(time.time() * 1000) - 1
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                             "acks": "all", "linger.ms": 5})
        for i in range(60):
            producer.produce(TOPIC, key=f"k{i}".encode(), value=f"value-{i}".encode(), partition=i % 2)
        assert producer.flush(60) == 0

        # ---- DescribeCluster: confluent-kafka's AdminClient, unchanged, and gRPC agree.
        rd = RdAdminClient({"bootstrap.servers": bootstrap})
        described = rd.describe_cluster(include_authorized_operations=True).result(timeout=30)
        ours = admin.describe_cluster_full(include_authorized_operations=True)
        assert described.cluster_id == ours.cluster_id and ours.cluster_id
        assert described.controller.id == ours.controller_id >= 0
        assert sorted(n.id for n in described.nodes) == [1, 2, 3]
        assert {n.port for n in described.nodes} == {int(a.rsplit(":", 1)[1]) for a in kafka_address.values()}
        # (librdkafka asks Metadata, not DescribeCluster, for authorized operations: raw frames below.)
        wanted_ops = {5, 7, 8, 9, 10, 11, 12}  # CREATE ALTER DESCRIBE CLUSTER_ACTION DESCRIBE_CONFIGS ALTER_CONFIGS ...
        assert ours.cluster_authorized_operations == sum(1 << op for op in wanted_ops)
        assert admin.describe_cluster_full().cluster_authorized_operations == -(1 << 31)  # not asked

        # ---- DescribeConfigs of a BROKER resource: read-only, sensitive values null.
        res = ConfigResource(ResourceType.BROKER, "2")
        entries = rd.describe_configs([res])[res].result(timeout=30)
        zk = entries["zookeeper.connect"]
        assert zk.is_sensitive and zk.value is None and zk.is_read_only
        timeout = entries["request.timeout.ms"]
        assert timeout.value == "5000" and timeout.source == confluent_kafka.admin.ConfigSource.STATIC_BROKER_CONFIG.value
        assert entries["group.max.size"].source == confluent_kafka.admin.ConfigSource.DEFAULT_CONFIG.value
        assert entries["broker.id"].value == "2"

        # ---- DescribeLogDirs: raw frames, v1 (Kafka 2.8) and v4 (with the file system's bytes).
        def sizes_everywhere() -> dict[int, dict[str, tuple[int, int]]] | None:
            out: dict[int, dict[str, tuple[int, int]]] = {}
            for b, address in kafka_address.items():
                resp = kafka_call(address, 35, 4, {"topics": None})
                assert resp.error_code == ErrorCode.none and len(resp.results) == 1
                d = resp.results[0]
                assert d.error_code == ErrorCode.none and os.path.isabs(d.log_dir)
                assert d.total_bytes > 0 and 0 <= d.usable_bytes <= d.total_bytes
                out[b] = {f"{t.name}-{p.partition_index}": (p.partition_size, p.offset_lag)
                          for t in d.topics for p in t.partitions if t.name == TOPIC}
                assert all(not p.is_future_key for t in d.topics for p in t.partitions)
            views = list(out.values())
            # Every replica holds the same bytes once the followers caught up: lag 0 everywhere.
            return out if all(v == views[0] for v in views) and all(s > 0 and lag == 0 for s, lag in views[0].values()) \
                else None

        sizes = wait_for(sizes_everywhere, timeout_s=30, what="replicas of equal size, no lag")
        assert set(sizes[1]) == {f"{TOPIC}-0", f"{TOPIC}-1"}
        only = kafka_call(kafka_address[1], 35, 1, {"topics": [{"topic": TOPIC, "partitions": [1]}]})
        assert [(t.name, [p.partition_index for p in t.partitions]) for t in only.results[0].topics] == [(TOPIC, [1])]
        grpc_dirs = admin.describe_log_dirs([1, 2, 3])
        assert {b: {f"{t.name}-{p.partition}": p.size for t in r.results[0].topics for p in t.partitions
                    if t.name == TOPIC} for b, r in grpc_dirs.items()} == \
            {b: {k: v[0] for k, v in s.items()} for b, s in sizes.items()}

        # ---- DescribeProducers: the leader's producer state; a follower says NOT_LEADER_OR_FOLLOWER.
        desc = admin.describe_topics([TOPIC])[0]
        leader = desc.partitions[0].leader
        follower = next(r for r in desc.partitions[0].replicas if r != leader)
        got = kafka_call(kafka_address[leader], 61, 0, {"topics": [{"name": TOPIC, "partition_indexes": [0]}]})
        p0 = got.topics[0].partitions[0]
        assert p0.error_code == ErrorCode.none and len(p0.active_producers) == 1
        prod = p0.active_producers[0]
        assert prod.producer_id >= 0 and prod.producer_epoch >= 0 and prod.last_sequence == 29
        assert prod.last_timestamp >= before and prod.coordinator_epoch == -1 and prod.current_txn_start_offset == -1
        refused = kafka_call(kafka_address[follower], 61, 0, {"topics": [{"name": TOPIC, "partition_indexes": [0]}]})
        assert refused.topics[0].partitions[0].error_code == ErrorCode.not_leader_or_follower
        unknown = kafka_call(kafka_address[leader], 61, 0, {"topics": [{"name": "nope", "partition_indexes": [0]}]})
        assert unknown.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
        assert [(p.producer_id, p.last_sequence) for p in admin.describe_producers([TopicPartition(TOPIC, 0)])[
            TopicPartition(TOPIC, 0)]] == [(prod.producer_id, 29)]
        # DescribeCluster on the wire, v0 (Kafka 2.8's): without authorized operations.
        wire = kafka_call(kafka_address[3], 60, 0, {"include_cluster_authorized_operations": False})
        assert wire.error_code == ErrorCode.none and wire.cluster_id == ours.cluster_id
        assert wire.cluster_authorized_operations == -(1 << 31) and len(wire.brokers) == 3
        assert sorted((b.broker_id, b.port) for b in wire.brokers) == \
            sorted((b, int(a.rsplit(":", 1)[1])) for b, a in kafka_address.items())
        wire = kafka_call(kafka_address[3], 60, 0, {"include_cluster_authorized_operations": True})
        assert wire.cluster_authorized_operations == ours.cluster_authorized_operations
        assert wire.controller_id == ours.controller_id

        # ---- the CLI: log-dirs, get-offsets, configs.
        out = cli(cluster, "log-dirs", "--describe", "--topic-list", TOPIC, "--broker-list", "1,2")
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[:2] == ["Querying brokers for log directories information",
                             "Received log directory information from brokers 1,2"]
        doc = json.loads(lines[2])
        assert doc["version"] == 1 and [b["broker"] for b in doc["brokers"]] == [1, 2]
        parts = {p["partition"]: p for p in doc["brokers"][0]["logDirs"][0]["partitions"]}
        assert set(parts) == {f"{TOPIC}-0", f"{TOPIC}-1"} and parts[f"{TOPIC}-0"]["size"] == sizes[1][f"{TOPIC}-0"][0]
        assert doc["brokers"][0]["logDirs"][0]["error"] is None and parts[f"{TOPIC}-0"]["isFuture"] is False
        assert cli(cluster, "log-dirs", "--describe", "--broker-list", "9").returncode == 1

        out = cli(cluster, "get-offsets", "--topic", TOPIC)
        assert out.returncode == 0 and out.stdout.split() == [f"{TOPIC}:0:30", f"{TOPIC}:1:30"], out
        out = cli(cluster, "get-offsets", "--topic", TOPIC, "--partitions", "1", "--time", "-2")
        assert out.stdout.split() == [f"{TOPIC}:1:0"], out
        out = cli(cluster, "get-offsets", "--topic", TOPIC, "--time", str(int(time.time() * 1000) + 3_600_000))
        assert out.stdout.split() == [f"{TOPIC}:0:", f"{TOPIC}:1:"], out  # nothing that late
        out = cli(cluster, "get-offsets", "--topic", TOPIC, "--time", str(before))
        assert out.stdout.split() == [f"{TOPIC}:0:0", f"{TOPIC}:1:0"], out
        assert cli(cluster, "get-offsets", "--topic", "nope").returncode == 1

        out = cli(cluster, "configs", "--alter", "--entity-type", "topics", "--entity-name", TOPIC,
                  "--add-config", "retention.ms=100000,cleanup.policy=[compact,delete]")
        assert out.returncode == 0 and out.stdout.strip() == f"Completed updating config for topic {TOPIC}.", out
        out = cli(cluster, "configs", "--describe", "--entity-type", "topics", "--entity-name", TOPIC)
        assert out.stdout.splitlines()[0] == f"Dynamic configs for topic {TOPIC} are:", out
        # Every synonym, as kafka-configs shows it: the topic override, then the broker's default.
        assert ("  retention.ms=100000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=100000, "
                "DEFAULT_CONFIG:log.retention.hours=168}") in out.stdout.splitlines(), out.stdout
        assert any(line.startswith("  cleanup.policy=compact,delete ") for line in out.stdout.splitlines()), out.stdout
        out = cli(cluster, "configs", "--alter", "--entity-type", "topics", "--entity-name", TOPIC,
                  "--delete-config", "retention.ms")
        assert out.returncode == 0, out
        assert "retention.ms" not in admin.describe_topic_configs(TOPIC, only_overrides=True)
        bad = cli(cluster, "configs", "--alter", "--entity-type", "topics", "--entity-name", TOPIC,
                  "--delete-config", "retention.ms")
        assert bad.returncode == 1 and "Invalid config(s): retention.ms" in bad.stderr, bad
        out = cli(cluster, "configs", "--describe", "--entity-type", "brokers", "--entity-name", "1", "--all")
        assert out.returncode == 0 and out.stdout.splitlines()[0] == "All configs for broker 1 are:", out
        assert "  zookeeper.connect=null sensitive=true synonyms={STATIC_BROKER_CONFIG:zookeeper.connect=null}" \
            in out.stdout.splitlines()
        # Kafka's synonyms of a static broker config: the static value, then the default (issue 34).
        assert ("  request.timeout.ms=5000 sensitive=false synonyms={STATIC_BROKER_CONFIG:request.timeout.ms=5000, "
                "DEFAULT_CONFIG:request.timeout.ms=30000}") in out.stdout.splitlines()
        assert "  broker.rack=null sensitive=false synonyms={}" in out.stdout.splitlines()  # Kafka's null, no synonym
        out = cli(cluster, "configs", "--describe", "--entity-type", "brokers", "--entity-name", "1")
        assert out.stdout.splitlines() == ["Dynamic configs for broker 1 are:"], out  # all static here
        out = cli(cluster, "configs", "--describe", "--entity-type", "brokers", "--entity-default")
        assert out.stdout.splitlines() == ["Default configs for brokers in the cluster are:"], out
        assert cli(cluster, "configs", "--alter", "--entity-type", "brokers", "--entity-name", "1",
                   "--add-config", "num.partitions=3").returncode == 1
        out = cli(cluster, "configs", "--alter", "--entity-type", "users", "--entity-name", "alice",
                  "--add-config", "SCRAM-SHA-256=[iterations=8192,password=alice-secret]")
        assert out.returncode == 0 and out.stdout.strip() == "Completed updating config for user alice.", out
        out = cli(cluster, "configs", "--describe", "--entity-type", "users", "--entity-name", "alice")
        assert out.stdout.strip() == "SCRAM credential configs for user-principal 'alice' are " \
                                     "SCRAM-SHA-256=iterations=8192", out
    finally:
        admin.close()

    # ---- dump-log: broker 1's replica of partition 0, read offline once the brokers stopped (a clean
    # shutdown writes the indexes, kept in memory until a roll or a flush).
    cluster.stop()
    props = parse_properties(Path(c.state.brokers[1].config).read_text())
    replica = Path(props["log.dirs"].split(",")[0]) / f"{TOPIC}-0"
    segment = replica / "00000000000000000000.log"
    out = offline_cli("dump-log", "--files", f"{segment},{replica / '00000000000000000000.index'}",
                      "--print-data-log")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:2] == [f"Dumping {segment}", "Starting offset: 0"]
    batches = [line for line in lines if line.startswith("baseOffset: ")]
    records = [line for line in lines if line.startswith("| offset: ")]
    assert batches and all(line.endswith("isvalid: true") for line in batches)
    assert len(records) == 30 and records[0].endswith("key: k0 payload: value-0"), records[:2]
    assert all(" producerId: -1 " not in line for line in batches)  # idempotent batches
    assert f"Dumping {replica / '00000000000000000000.index'}" in lines
    assert any(line.startswith("offset: 0 position: 0") for line in lines)
    assert "Mismatches" not in out.stderr
