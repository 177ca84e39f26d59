"""Issue 34: the topic config table (every Kafka 2.8 topic config, Kafka's defaults, validation of
each type and range), DescribeConfigs of topics as Kafka encodes it on every version, compression.type
recompression on the leader, offsets.retention.minutes in the pure group core, and the README's
copy of the table."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kafka_frames import frame, read_response

from broker.coordinator.group.group_state import GroupStateMachine, OffsetAndMetadata
from broker.log.config import (
    IGNORED,
    LONG_MAX,
    TOPIC_CONFIG_DEFS,
    TOPIC_CONFIG_NAMES,
    TOPIC_CONFIGS,
    LogConfig,
    parse_topic_config,
    topic_config_markdown,
)
from broker.log.log import Log
from broker.network import kafka_wire as kw
from broker.server.admin import topic_config_entries
from broker.server.config import BrokerConfig
from proto import errors
from proto import minikafka_pb2 as pb
from proto.record_batch import (
    CODEC_BY_NAME,
    COMPRESSION_GZIP,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    Header,
    Record,
    decode_batch,
    encode_batch,
    iter_headers,
)
from zk.data import ConsumersZNode

# Kafka 2.8's LogConfig: every topic config and its default, as `kafka-configs --describe --all` shows it.
KAFKA_28_TOPIC_DEFAULTS = {
    "cleanup.policy": "delete", "compression.type": "producer", "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000", "flush.messages": str(LONG_MAX), "flush.ms": str(LONG_MAX),
    "follower.replication.throttled.replicas": "", "index.interval.bytes": "4096",
    "leader.replication.throttled.replicas": "", "max.compaction.lag.ms": str(LONG_MAX),
    "max.message.bytes": "1048588", "message.downconversion.enable": "true", "message.format.version": "2.8-IV1",
    "message.timestamp.difference.max.ms": str(LONG_MAX), "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5", "min.compaction.lag.ms": "0", "min.insync.replicas": "1",
    "preallocate": "false", "retention.bytes": "-1", "retention.ms": "604800000", "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760", "segment.jitter.ms": "0", "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}


def test_the_table_has_every_kafka_28_topic_config_with_kafkas_default() -> None:
    assert {d.name: d.default for d in TOPIC_CONFIGS} == KAFKA_28_TOPIC_DEFAULTS
    assert set(TOPIC_CONFIG_NAMES) == set(KAFKA_28_TOPIC_DEFAULTS)
    # A broker with Kafka's defaults gives every topic Kafka's defaults.
    assert LogConfig().to_topic_configs() == KAFKA_28_TOPIC_DEFAULTS
    assert BrokerConfig().default_log_config().to_topic_configs() == KAFKA_28_TOPIC_DEFAULTS
    ignored = {d.name for d in TOPIC_CONFIGS if d.status == IGNORED}
    assert ignored == {"message.format.version", "message.downconversion.enable", "preallocate",
                       "leader.replication.throttled.replicas", "follower.replication.throttled.replicas",
                       "segment.jitter.ms"}
    assert all(TOPIC_CONFIG_DEFS[n].reason for n in ignored)
    assert all(d.doc for d in TOPIC_CONFIGS)


@pytest.mark.parametrize(("name", "good", "bad"), [
    ("segment.bytes", ["14", "2147483647"], ["13", "2147483648", "x", "1.5"]),           # int, [14,...]
    ("index.interval.bytes", ["0"], ["-1"]),
    ("retention.ms", ["-1", str(LONG_MAX)], ["-2", str(LONG_MAX + 1), ""]),              # long, [-1,...]
    ("max.compaction.lag.ms", ["1"], ["0"]),
    ("flush.messages", ["0", "1"], ["-1"]),
    ("min.cleanable.dirty.ratio", ["0", "0.01", "1"], ["1.01", "-0.1", "nan"]),          # double, [0,...,1]
    ("min.insync.replicas", ["1"], ["0"]),
    ("max.message.bytes", ["0", "104857600"], ["104857601"]),
    ("preallocate", ["true", "FALSE"], ["yes", "1"]),                                     # boolean
    ("unclean.leader.election.enable", ["true"], ["maybe"]),
    ("message.downconversion.enable", ["false"], ["no"]),
    ("compression.type", ["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"], ["none", "GZIP", "brotli"]),
    ("message.timestamp.type", ["CreateTime", "LogAppendTime"], ["createtime", "Now"]),
    ("cleanup.policy", ["delete", "compact", "compact,delete", "delete, compact"], ["remove", ""]),
    ("message.format.version", ["2.8-IV1", "2.8", "2.1", "1.0", "0.11.0", "2.7-IV2", "2.4.1"],
     ["0.10.2", "0.8.0", "3.0", "latest", ""]),
    ("leader.replication.throttled.replicas", ["", "*", "0:1,1:2", " 0:1 , 2:3 "], ["0-1", "a:b", "*,0:1"]),
    ("follower.replication.throttled.replicas", ["*"], ["1"]),
    ("segment.jitter.ms", ["0", "1000"], ["-1"]),
    ("segment.index.bytes", ["4096"], ["4095"]),
])
def test_validation_of_each_type_and_range(name: str, good: list[str], bad: list[str]) -> None:
    for raw in good:
        cfg = LogConfig().with_overrides({name: raw})
        assert getattr(cfg, TOPIC_CONFIG_NAMES[name]) == parse_topic_config(TOPIC_CONFIG_DEFS[name], raw)
    for raw in bad:
        with pytest.raises(errors.InvalidConfigError):
            LogConfig().with_overrides({name: raw})


def test_unknown_names_stay_invalid_config_and_old_message_formats_are_refused_by_name() -> None:
    with pytest.raises(errors.InvalidConfigError, match="unknown topic config"):
        LogConfig().with_overrides({"no.such.config": "1"})
    with pytest.raises(errors.InvalidConfigError, match="not supported"):
        LogConfig().with_overrides({"message.format.version": "0.10.2"})
    assert LogConfig().with_overrides({"leader.replication.throttled.replicas": " 0:1 , 2:3 "}).to_topic_configs()[
        "leader.replication.throttled.replicas"] == "0:1,2:3"


def test_broker_compression_type_and_offsets_retention_configs() -> None:
    assert BrokerConfig().offsets_retention_minutes == 10080
    assert BrokerConfig().offsets_retention_check_interval_ms == 600000
    assert BrokerConfig(compression_type="gzip").default_log_config().compression_type == "gzip"


# ---------------------------------------------------------------- DescribeConfigs of topics


def _entries() -> dict[str, pb.ConfigEntry]:
    cfg = BrokerConfig(broker_id=1, log_roll_hours=24, log_retention_bytes=5000,
                       static_keys=frozenset({"broker.id", "log.roll.hours", "log.retention.bytes"}))
    return {e.name: e for e in topic_config_entries(cfg, {"retention.ms": "1000", "compression.type": "gzip",
                                                          "retention.bytes": "7000"})}


def test_describe_configs_of_a_topic_lists_every_config_with_sources_and_synonyms() -> None:
    entries = _entries()
    assert list(entries) == [d.name for d in TOPIC_CONFIGS]
    S = pb.ConfigSource
    syn = {n: [(s.name, s.value, s.source) for s in e.synonyms] for n, e in entries.items()}
    # An override: the topic's, then the broker's static synonym, then the default.
    assert entries["retention.bytes"].source == S.DYNAMIC_TOPIC_CONFIG and entries["retention.bytes"].value == "7000"
    assert syn["retention.bytes"] == [("retention.bytes", "7000", S.DYNAMIC_TOPIC_CONFIG),
                                      ("log.retention.bytes", "5000", S.STATIC_BROKER_CONFIG),
                                      ("log.retention.bytes", "-1", S.DEFAULT_CONFIG)]
    assert syn["retention.ms"] == [("retention.ms", "1000", S.DYNAMIC_TOPIC_CONFIG),
                                   ("log.retention.hours", "168", S.DEFAULT_CONFIG)]
    # Set in server.properties only: STATIC_BROKER_CONFIG with the broker's value.
    assert entries["segment.ms"].source == S.STATIC_BROKER_CONFIG and entries["segment.ms"].value == "86400000"
    assert syn["segment.ms"] == [("log.roll.hours", "24", S.STATIC_BROKER_CONFIG),
                                 ("log.roll.hours", "168", S.DEFAULT_CONFIG)]
    # Neither: DEFAULT_CONFIG; a config without broker synonym has none.
    assert entries["segment.bytes"].source == S.DEFAULT_CONFIG and entries["segment.bytes"].is_default
    assert syn["leader.replication.throttled.replicas"] == []
    assert entries["leader.replication.throttled.replicas"].source == S.DEFAULT_CONFIG
    assert not any(e.read_only or e.is_sensitive for e in entries.values())
    assert entries["min.cleanable.dirty.ratio"].config_type == 6 and entries["preallocate"].config_type == 1
    assert [e.name for e in topic_config_entries(BrokerConfig(), {}, ["segment.ms", "preallocate"])] == [
        "preallocate", "segment.ms"]


@pytest.mark.parametrize("version", [1, 2, 3, 4])
@pytest.mark.parametrize("include", [False, True])
def test_describe_configs_encoding_on_every_version(version: int, include: bool) -> None:
    values = {"resources": [{"resource_type": 2, "resource_name": "t", "configuration_keys": None}],
              "include_synonyms": include}
    if version >= 3:
        values["include_documentation"] = include
    d = kw.decode_request(frame(32, version, values))
    resp = pb.DescribeConfigsResponse(results=[pb.DescribeConfigsResult(
        resource_type=2, resource_name="t", configs=list(_entries().values()))])
    _corr, body = read_response(kw.encode_answer(d, [resp]), 32, version)
    (result,) = body.results
    got = {c.name: c for c in result.configs}
    assert list(got) == [c.name for c in TOPIC_CONFIGS]
    rb = got["retention.bytes"]
    assert (rb.value, rb.config_source, rb.read_only, rb.is_sensitive) == ("7000", 1, False, False)
    if include:
        assert [(s.name, s.value, s.source) for s in rb.synonyms] == [
            ("retention.bytes", "7000", 1), ("log.retention.bytes", "5000", 4), ("log.retention.bytes", "-1", 5)]
    else:
        assert rb.synonyms == ()
    if version >= 3:
        assert rb.config_type == 5
        assert (rb.documentation is not None) == include
        if include:
            assert rb.documentation == TOPIC_CONFIG_DEFS["retention.bytes"].doc


# ---------------------------------------------------------------- compression.type on the leader


def _records(now: int, n: int, tag: str) -> list[Record]:
    return [Record(value=f"{tag}-{i}".encode() * 20, key=f"k{i}".encode(), timestamp=now + i,
                   headers=(Header("h", b"x"),)) for i in range(n)]


@pytest.mark.parametrize("topic_codec", ["gzip", "uncompressed", "snappy", "lz4", "zstd", "producer"])
def test_recompression_keeps_records_and_offsets(tmp_path: Path, topic_codec: str) -> None:
    now = int(time.time() * 1000)
    log = Log.open(tmp_path / "t-0", "t", 0, LogConfig().with_overrides({"compression.type": topic_codec}),
                   now_ms=now)
    batches = [(_records(now, 5, "a"), COMPRESSION_ZSTD), (_records(now, 2, "b"), COMPRESSION_GZIP),
               (_records(now, 3, "c"), COMPRESSION_NONE), (_records(now, 4, "d"), COMPRESSION_SNAPPY)]
    first = log.append_as_leader(encode_batch(batches[0][0], compression=batches[0][1], producer_id=7,
                                              producer_epoch=0, base_sequence=0), 3, now)
    rest = log.append_as_leader(b"".join(encode_batch(r, compression=c) for r, c in batches[1:]), 3, now)
    assert (first.first_offset, first.last_offset, rest.first_offset, rest.last_offset) == (0, 4, 5, 13)
    data = log.read(0, 1 << 20)
    got = []
    for pos, header in iter_headers(data):
        want = [c for _r, c in batches][len(got)]
        expect_codec = want if topic_codec == "producer" else (
            COMPRESSION_NONE if topic_codec == "uncompressed" else CODEC_BY_NAME[topic_codec])
        assert header.compression == expect_codec
        assert header.partition_leader_epoch == 3
        _h, recs = decode_batch(data, pos)
        got.append(recs)
    assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for rs in got for r in rs] == [
        (i, r.key, r.value, r.timestamp, r.headers) for i, r in enumerate(x for rs, _c in batches for x in rs)]
    first_header = next(iter(iter_headers(data)))[1]
    assert (first_header.producer_id, first_header.producer_epoch, first_header.base_sequence) == (7, 0, 0)


def test_a_batch_too_large_once_recompressed_is_refused_before_append(tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    recs = [Record(value=b"z" * 4000, timestamp=now)]
    small = encode_batch(recs, compression=COMPRESSION_ZSTD)
    log = Log.open(tmp_path / "t-0", "t", 0, LogConfig().with_overrides(
        {"compression.type": "uncompressed", "max.message.bytes": str(len(small) + 100)}), now_ms=now)
    with pytest.raises(errors.MessageTooLargeError):
        log.append_as_leader(small, 0, now)
    assert log.log_end_offset == 0


# ---------------------------------------------------------------- offsets.retention.minutes


def test_offsets_of_empty_groups_expire_after_the_retention() -> None:
    core = GroupStateMachine()
    day = 24 * 3600 * 1000
    core.load("old", {("t", 0): OffsetAndMetadata(5, "", 1000), ("t", 1): OffsetAndMetadata(6, "", 1000 + day)})
    core.load("legacy", {("t", 0): OffsetAndMetadata(5)})  # no commit time known: never expired here
    retention = 7 * day
    assert core.expired_offsets(1000 + retention - 1, retention) == {}
    assert core.expired_offsets(1000 + retention, retention) == {"old": [("t", 0)]}
    assert core.expired_offsets(1000 + day + retention, retention) == {"old": [("t", 0), ("t", 1)]}
    assert core.expired_offsets(1000 + day + retention, retention, "legacy") == {}
    # A group with members keeps its offsets; once it is Empty again, retention counts from then.
    t0 = 1000 + 10 * day
    core.join("old", "", "m1", "c", "h", "consumer", [("range", b"")], 10000, 10000, t0)
    core.tick(t0 + 1)
    assert core.groups["old"].members
    assert core.expired_offsets(t0 + 1, retention) == {}
    gone = t0 + 20_000
    core.tick(gone)  # the member's session expires: the group is Empty from about now
    assert not core.groups["old"].members and core.groups["old"].state == "Empty"
    since = core.groups["old"].empty_since_ms
    assert since >= t0
    assert core.expired_offsets(since + retention - 1, retention) == {}
    assert core.expired_offsets(since + retention, retention) == {"old": [("t", 0), ("t", 1)]}
    core.offsets_deleted("old", [("t", 0)])
    assert core.expired_offsets(since + retention, retention) == {"old": [("t", 1)]}


def test_the_offset_znode_keeps_its_commit_time_and_reads_older_forms() -> None:
    assert ConsumersZNode.encode_offset(5) == b"5"
    assert ConsumersZNode.decode_offset_commit(b"5") == (5, "", -1)
    stamped = ConsumersZNode.encode_offset(5, "", 1234)
    assert ConsumersZNode.decode_offset_commit(stamped) == (5, "", 1234)
    assert ConsumersZNode.decode_offset_and_metadata(stamped) == (5, "")
    assert ConsumersZNode.decode_offset(stamped) == 5
    old_json = ConsumersZNode.encode_offset(9, "meta")
    assert ConsumersZNode.decode_offset_commit(old_json) == (9, "meta", -1)
    assert ConsumersZNode.decode_offset_commit(b'{"offset": 1, "commit_timestamp": "x"}') is None


# ---------------------------------------------------------------- the README


def test_the_readme_holds_the_table() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    begin = readme.index("<!-- topic-configs:begin")
    body = readme[readme.index("\n", begin) + 1:readme.index("<!-- topic-configs:end -->")]
    assert body.strip() == topic_config_markdown().strip(), \
        "README's topic config table is stale: paste broker.log.config.topic_config_markdown()"
