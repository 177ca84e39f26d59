"""Broker configuration: Kafka's names and defaults, clear errors for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import ConfigError, build_config, load_config, parse_listener, parse_properties

BASE = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181", "log.dirs": "/tmp/a,/tmp/b"}


def test_kafka_defaults() -> None:
    cfg = build_config(BASE)
    assert cfg.zookeeper_session_timeout_ms == 18000
    assert cfg.replica_lag_time_max_ms == 10000
    assert cfg.min_insync_replicas == 1 and not cfg.unclean_leader_election_enable
    assert cfg.log_dir_paths == [Path("/tmp/a"), Path("/tmp/b")]
    log_cfg = cfg.default_log_config()
    assert log_cfg.segment_bytes == 1 << 30 and log_cfg.retention_ms == 168 * 3600 * 1000
    assert log_cfg.retention_bytes == -1 and log_cfg.index_interval_bytes == 4096


def test_overrides_and_derived_settings(tmp_path: Path) -> None:
    f = tmp_path / "server.properties"
    f.write_text("# a comment\nbroker.id=3\nzookeeper.connect: zk:2181/kafka\nlog.dir=/data\n"
                 "listeners=PLAINTEXT://0.0.0.0:9093\nlog.retention.hours=1\n")
    cfg = load_config(f, ["advertised.listeners=PLAINTEXT://broker-3:9093", "log.roll.ms=1000"])
    assert cfg.broker_id == 3 and cfg.listener == ("0.0.0.0", 9093) and cfg.advertised == ("broker-3", 9093)
    assert cfg.default_log_config().retention_ms == 3600 * 1000
    assert cfg.default_log_config().segment_ms == 1000


@pytest.mark.parametrize("props, message", [
    ({"broker.id": "1", "log.dirs": "/x"}, "zookeeper.connect is required"),
    ({**BASE, "broker.id": "-2"}, "broker.id"),
    ({**BASE, "replica.lag.time.max.ms": "soon"}, "replica.lag.time.max.ms"),
    ({**BASE, "unclean.leader.election.enable": "yes"}, "unclean.leader.election.enable"),
    ({**BASE, "no.such.setting": "1"}, "unknown broker config 'no.such.setting'"),
    ({**BASE, "listeners": "SSL://h:1"}, "only PLAINTEXT"),
    ({**BASE, "listeners": "PLAINTEXT://h:port"}, "listeners"),
    ({**BASE, "log.segment.bytes": "3"}, "log.segment.bytes"),
])
def test_bad_configs_name_the_key(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config(props)


def test_properties_parser() -> None:
    assert parse_properties("a=1\n! bang comment\n\nb : two words\n") == {"a": "1", "b": "two words"}
    with pytest.raises(ConfigError):
        parse_properties("just a line")
    assert parse_listener("127.0.0.1:0") == ("127.0.0.1", 0)
    with pytest.raises(ConfigError):
        load_config(Path("/nonexistent/server.properties"), [])
