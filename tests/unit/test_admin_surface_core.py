"""Issue 30's admin surface, the pure parts: kafka-dump-log's lines of a log written by broker/log,
broker configs as DescribeConfigs shows them (sensitive values null), the CLI's parsing and output,
the producer state DescribeProducers reads and the offset lag of DescribeLogDirs."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from broker.log.checkpoint import write_epoch_entries, write_offsets
from broker.log.config import LogConfig
from broker.log.log import Log
from broker.network import kafka_wire
from broker.replication.partition import Partition
from broker.server.admin import broker_config_entries, is_sensitive_broker_config
from broker.server.config import BrokerConfig
from broker.server.describe_apis import CLUSTER_OPERATIONS, operations_bit_field
from client.cli.configs import entry_line, parse_add_config
from client.cli.dump_log import dump_file, dump_segment
from client.cli.get_offsets import offset_lines
from client.cli.log_dirs import log_dirs_json
from proto import minikafka_pb2 as pb
from proto.record_batch import Header, Record, encode_batch

BATCH_LINE = re.compile(
    r"baseOffset: (\d+) lastOffset: (\d+) count: (\d+) baseSequence: (-?\d+) lastSequence: (-?\d+) "
    r"producerId: (-?\d+) producerEpoch: (-?\d+) partitionLeaderEpoch: (\d+) isTransactional: false "
    r"isControl: false position: (\d+) CreateTime: (\d+) size: (\d+) magic: 2 compresscodec: (\w+) "
    r"crc: (\d+) isvalid: (true|false)$")


def _written_log(tmp_path: Path) -> Path:
    d = tmp_path / "t-0"
    log = Log.open(d, "t", 0, LogConfig(index_interval_bytes=0), now_ms=1000)
    log.append_as_leader(encode_batch([Record(value=b"v0", key=b"k0", timestamp=1000),
                                       Record(value=b"v1", timestamp=1001,
                                              headers=(Header("h", b"x"),))]), 3, 2000)
    log.append_as_leader(encode_batch([Record(value=None, key=b"k2", timestamp=1500)], producer_id=7,
                                      producer_epoch=1, base_sequence=0), 3, 2000)
    log.append_as_leader(encode_batch([Record(value=b"z" * 200, timestamp=1600)] * 3, compression=1), 4, 2000)
    log.flush()
    log.close()
    return d


def test_dump_log_prints_kafkas_batch_and_record_lines_and_checks_crcs(tmp_path: Path) -> None:
    d = _written_log(tmp_path)
    segment = d / "00000000000000000000.log"
    lines, problems = dump_file(segment, deep=True, print_data=True)
    assert not problems and lines[0] == "Starting offset: 0"
    batches = [BATCH_LINE.match(line) for line in lines if line.startswith("baseOffset")]
    assert all(batches) and len(batches) == 3
    first, second, third = (m.groups() for m in batches if m)
    assert first[:8] == ("0", "1", "2", "-1", "-1", "-1", "-1", "3") and first[8] == "0" and first[13] == "true"
    assert second[:8] == ("2", "2", "1", "0", "0", "7", "1", "3")
    assert third[:3] == ("3", "5", "3") and third[11] == "GZIP"
    assert int(second[8]) == int(first[10])  # position: the bytes before it
    records = [line for line in lines if line.startswith("|")]
    assert records[0] == ("| offset: 0 CreateTime: 1000 keysize: 2 valuesize: 2 sequence: -1 headerKeys: [] "
                          "key: k0 payload: v0")
    assert records[1] == "| offset: 1 CreateTime: 1001 keysize: -1 valuesize: 2 sequence: -1 headerKeys: [h] payload: v1"
    assert records[2] == "| offset: 2 CreateTime: 1500 keysize: 2 valuesize: -1 sequence: 0 headerKeys: [] key: k2"
    assert len(records) == 6
    # Without --deep-iteration: batches only; without --print-data-log: no keys or payloads.
    assert not [line for line in dump_segment(segment.read_bytes(), 0) if line.startswith("|")]
    assert " payload: " not in "\n".join(dump_segment(segment.read_bytes(), 0, deep=True))


def test_dump_log_says_a_corrupt_batch_is_invalid_and_counts_trailing_bytes(tmp_path: Path) -> None:
    data = bytearray((_written_log(tmp_path) / "00000000000000000000.log").read_bytes())
    data[70] ^= 0xFF  # a byte of the first batch's records: under its CRC
    lines = list(dump_segment(bytes(data) + b"\0\0\0", 0))
    assert lines[1].endswith("isvalid: false") and lines[2].endswith("isvalid: true")
    assert lines[-1] == "Found 3 invalid bytes at the end of the segment"


def test_dump_log_reads_indexes_and_checkpoints(tmp_path: Path) -> None:
    d = _written_log(tmp_path)
    index, problems = dump_file(d / "00000000000000000000.index")
    assert not problems
    assert [line.split()[1] for line in index] == ["0", "2", "3"]  # every batch indexed (interval 0)
    assert all(re.fullmatch(r"offset: \d+ position: \d+", line) for line in index)
    times, problems = dump_file(d / "00000000000000000000.timeindex")
    assert not problems and times and all(re.fullmatch(r"timestamp: \d+ offset: \d+", t) for t in times)
    write_offsets(tmp_path / "recovery-point-offset-checkpoint", {("t", 0): 6, ("a", 1): 2})
    lines, _ = dump_file(tmp_path / "recovery-point-offset-checkpoint")
    assert lines == ["topic: a partition: 1 offset: 2", "topic: t partition: 0 offset: 6"]
    write_epoch_entries(tmp_path / "leader-epoch-checkpoint", [(3, 0), (4, 3)])
    assert dump_file(tmp_path / "leader-epoch-checkpoint")[0] == ["epoch: 3 offset: 0", "epoch: 4 offset: 3"]
    assert dump_file(tmp_path / "notes.txt") == ([], [f"Ignoring unknown file {tmp_path / 'notes.txt'}"])


def test_broker_configs_hide_sensitive_values_and_say_their_source() -> None:
    for name in ("ssl.keystore.password", "sasl.jaas.secret", "listener.name.x.scram-sha-256.sasl.jaas.config.password",
                 "zookeeper.connect", "log.dirs", "ssl.truststore.location"):
        assert is_sensitive_broker_config(name), name
    assert not is_sensitive_broker_config("num.partitions")
    cfg = BrokerConfig(broker_id=2, zookeeper_connect="127.0.0.1:2181", log_dirs="/tmp/x", num_partitions=3,
                       static_keys=frozenset({"broker.id", "zookeeper.connect", "log.dirs", "num.partitions"}))
    entries = {e.name: e for e in broker_config_entries(cfg, "2")}
    assert entries["num.partitions"].value == "3" and entries["num.partitions"].source == pb.ConfigSource.STATIC_BROKER_CONFIG
    assert entries["default.replication.factor"].source == pb.ConfigSource.DEFAULT_CONFIG
    assert entries["default.replication.factor"].is_default
    assert all(e.read_only for e in entries.values())
    zk = entries["zookeeper.connect"]
    assert zk.is_sensitive and zk.value == "" and zk.source == pb.ConfigSource.STATIC_BROKER_CONFIG
    assert [e.name for e in broker_config_entries(cfg, "2", ["num.partitions"])] == ["num.partitions"]
    assert broker_config_entries(cfg, "") == []  # the cluster default: dynamic defaults only, none here
    # On the Kafka wire a sensitive value is null; in kafka-configs' lines too.
    d = kafka_wire.Decoded(kafka_wire.Header(32, 4, 1, "c"), None)
    resp = pb.DescribeConfigsResponse(results=[pb.DescribeConfigsResult(resource_type=4, resource_name="2",
                                                                        configs=[zk, entries["num.partitions"]])])
    out = kafka_wire._describe_configs_out(d.request, [resp])
    assert [(c["value"], c["is_sensitive"]) for c in out["results"][0]["configs"]] == [(None, True), ("3", False)]
    assert entry_line(zk) == "  zookeeper.connect=null sensitive=true synonyms={STATIC_BROKER_CONFIG:zookeeper.connect=null}"


def test_cli_parsing_and_output() -> None:
    assert parse_add_config("retention.ms=1000, cleanup.policy=[compact,delete],x=") == {
        "retention.ms": "1000", "cleanup.policy": "compact,delete", "x": ""}
    assert parse_add_config("SCRAM-SHA-256=[iterations=8192,password=a,b]") == {
        "SCRAM-SHA-256": "iterations=8192,password=a,b"}
    assert offset_lines("t", {1: 5, 0: 3, 2: -1}) == ["t:0:3", "t:1:5", "t:2:"]
    resp = pb.DescribeLogDirsResponse(results=[pb.DescribeLogDirsResult(log_dir="/d", topics=[
        pb.DescribeLogDirsTopicResult(name="a", partitions=[pb.DescribeLogDirsPartition(partition=0, size=10)]),
        pb.DescribeLogDirsTopicResult(name="b", partitions=[pb.DescribeLogDirsPartition(partition=1, size=3,
                                                                                       offset_lag=2)])])])
    assert log_dirs_json({1: resp}, {"b"}) == {"version": 1, "brokers": [{"broker": 1, "logDirs": [
        {"logDir": "/d", "error": None, "partitions": [{"partition": "b-1", "size": 3, "offsetLag": 2,
                                                        "isFuture": False}]}]}]}


def test_cluster_operations_bit_field() -> None:
    assert operations_bit_field(lambda _op: True) == sum(1 << c for c in CLUSTER_OPERATIONS.values())
    assert operations_bit_field(lambda op: op == "Describe") == 1 << 8
    assert operations_bit_field(lambda _op: False) == 0


def test_producer_state_keeps_each_producers_last_timestamp(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", "t", 0, LogConfig(), now_ms=0)
    log.append_as_leader(encode_batch([Record(value=b"a", timestamp=500)], producer_id=9, producer_epoch=2,
                                      base_sequence=0), 0, 1000)
    log.append_as_leader(encode_batch([Record(value=b"b", timestamp=700), Record(value=b"c", timestamp=800)],
                                      producer_id=9, producer_epoch=2, base_sequence=1), 0, 1000)
    entry = log.producer_state.producers[9]
    assert (entry.epoch, entry.last_seq, entry.last_timestamp) == (2, 2, 800)
    log.close()
    reopened = Log.open(tmp_path / "t-0", "t", 0, LogConfig(), now_ms=0)  # rebuilt from the batch headers
    assert reopened.producer_state.producers[9].last_timestamp == 800
    reopened.close()


@pytest.mark.parametrize("leader_leo, expected", [(-1, 0), (10, 6), (3, 0)])
def test_offset_lag_of_a_follower_is_its_distance_to_the_leaders_end(tmp_path: Path, leader_leo: int,
                                                                      expected: int) -> None:
    log = Log.open(tmp_path / "t-0", "t", 0, LogConfig(), now_ms=0)
    log.append_as_leader(encode_batch([Record(value=b"x")] * 4), 0, 0)
    p = Partition("t", 0, log, local_id=2)
    p.make_follower(controller_epoch=1, leader_id=1, leader_epoch=1, replicas=[1, 2], isr=[1, 2], zk_version=0)
    p.leader_log_end_offset = leader_leo
    assert p.log_end_offset_lag == expected
    p.make_leader(controller_epoch=1, leader_epoch=2, replicas=[1, 2], isr=[2], zk_version=1, now_ms=0,
                  lag_max_ms=1000)
    assert p.leader_log_end_offset == -1 and p.log_end_offset_lag == 0
    log.close()


def test_describe_log_dirs_on_the_wire_drops_the_top_level_error_before_v3() -> None:
    refused = pb.DescribeLogDirsResponse(error_code=pb.ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    for version, has_code in ((1, False), (2, False), (3, True), (4, True)):
        d = kafka_wire.Decoded(kafka_wire.Header(35, version, 1, "c"), SimpleNamespace(topics=None))
        frame = kafka_wire.encode_answer(d, [refused])
        assert frame  # encodes
        resp = kafka_wire.response(d, kafka_wire._describe_log_dirs_out(d.request, [refused]))
        assert hasattr(resp, "error_code") == has_code
        assert resp.results == ()


def test_describe_apis_refuse_without_the_acls() -> None:
    import asyncio

    from broker.security.principal import LOCAL_CLIENT
    from broker.server.describe_apis import NOT_REQUESTED, DescribeApis
    from broker.server.metadata_cache import MetadataCache

    class Gate:
        def __init__(self, allow: bool) -> None:
            self.allow = allow

        def cluster_allowed(self, _ctx: object, _op: str) -> bool:
            return self.allow

        def allowed(self, _ctx: object, _op: str, _type: str, _name: str) -> bool:
            return self.allow

    def apis(allow: bool) -> DescribeApis:
        return DescribeApis(config=BrokerConfig(broker_id=1), metadata=MetadataCache(), gate=Gate(allow),  # type: ignore[arg-type]
                            cluster_id=lambda: "cid", log_manager=SimpleNamespace(logs_by_dir=dict),  # type: ignore[arg-type]
                            replica_manager=SimpleNamespace(partitions={}))  # type: ignore[arg-type]

    refused, allowed = apis(False), apis(True)
    dirs = asyncio.run(refused.describe_log_dirs(pb.DescribeLogDirsRequest(all_partitions=True), LOCAL_CLIENT))
    assert dirs.error_code == pb.ErrorCode.CLUSTER_AUTHORIZATION_FAILED and not dirs.results
    ask = pb.DescribeClusterRequest(include_cluster_authorized_operations=True)
    assert asyncio.run(refused.describe_cluster(ask, LOCAL_CLIENT)).cluster_authorized_operations == 0
    assert asyncio.run(refused.describe_cluster(pb.DescribeClusterRequest(), LOCAL_CLIENT)
                       ).cluster_authorized_operations == NOT_REQUESTED
    req = pb.DescribeProducersRequest(topics=[pb.DescribeProducersTopic(name="t", partitions=[0, 0, 1])])
    codes = [p.error_code for p in asyncio.run(refused.describe_producers(req, LOCAL_CLIENT)).topics[0].partitions]
    assert codes == [pb.ErrorCode.INVALID_REQUEST, pb.ErrorCode.INVALID_REQUEST,
                     pb.ErrorCode.TOPIC_AUTHORIZATION_FAILED]  # a partition named twice: INVALID_REQUEST
    codes = [p.error_code for p in asyncio.run(allowed.describe_producers(req, LOCAL_CLIENT)).topics[0].partitions]
    assert codes[2] == pb.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    resp = asyncio.run(allowed.describe_cluster(ask, LOCAL_CLIENT))
    assert (resp.cluster_id, resp.controller_id) == ("cid", -1)
