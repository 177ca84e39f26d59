"""Broker configuration: Kafka's names and defaults, clear errors for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.server.config import ConfigError, build_config, load_config, parse_listener, parse_properties

PEM = str(Path(__file__))  # any readable file will do for the config checks (TLS reads it later)
BASE = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181", "log.dirs": "/tmp/a,/tmp/b",
        "listeners": "CLIENT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:SSL", "inter.broker.listener.name": "INTERNAL",
        "ssl.keystore.location": PEM, "ssl.truststore.location": PEM}


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
                 "listeners=CLIENT://0.0.0.0:9093,INTERNAL://0.0.0.0:19093\nlog.retention.hours=1\n"
                 "listener.security.protocol.map=CLIENT:SASL_SSL,INTERNAL:SSL\ninter.broker.listener.name=INTERNAL\n"
                 f"ssl.keystore.location={PEM}\nssl.truststore.location={PEM}\n")
    cfg = load_config(f, ["advertised.listeners=CLIENT://broker-3:9093,INTERNAL://broker-3:19093", "log.roll.ms=1000"])
    assert cfg.broker_id == 3
    assert [(x.name, x.host, x.port, x.security_protocol) for x in cfg.listener_list] == [
        ("CLIENT", "0.0.0.0", 9093, "SASL_SSL"), ("INTERNAL", "0.0.0.0", 19093, "SSL")]
    assert [(x.name, x.host, x.port) for x in cfg.advertised_listener_list] == [
        ("CLIENT", "broker-3", 9093), ("INTERNAL", "broker-3", 19093)]
    assert cfg.inter_broker_listener.name == cfg.control_plane_listener.name == "INTERNAL"
    assert cfg.default_log_config().retention_ms == 3600 * 1000
    assert cfg.default_log_config().segment_ms == 1000


def test_s12_1_the_inter_broker_plane_is_tls() -> None:
    # Kafka's default single PLAINTEXT listener would leave the control plane open: refused.
    with pytest.raises(ConfigError, match="must use SSL"):
        build_config({k: v for k, v in BASE.items() if not k.startswith(("listener", "inter", "ssl"))})
    with pytest.raises(ConfigError, match="must use SSL"):
        build_config({**BASE, "inter.broker.listener.name": "CLIENT"})
    with pytest.raises(ConfigError, match=r"ssl\.keystore\.location"):
        build_config({**BASE, "ssl.keystore.location": "/nonexistent.pem"})
    with pytest.raises(ConfigError, match=r"control\.plane\.listener\.name"):
        build_config({**BASE, "control.plane.listener.name": "CLIENT"})
    with pytest.raises(ConfigError, match=r"zookeeper\.digest\.auth\.file"):
        build_config({**BASE, "zookeeper.set.acl": "true"})


@pytest.mark.parametrize("props, message", [
    ({"broker.id": "1", "log.dirs": "/x"}, "zookeeper.connect is required"),
    ({**BASE, "broker.id": "-2"}, "broker.id"),
    ({**BASE, "replica.lag.time.max.ms": "soon"}, "replica.lag.time.max.ms"),
    ({**BASE, "unclean.leader.election.enable": "yes"}, "unclean.leader.election.enable"),
    ({**BASE, "no.such.setting": "1"}, "unknown broker config 'no.such.setting'"),
    ({**BASE, "listeners": "CLIENT://h:1,OTHER://h:2"}, "OTHER"),
    ({**BASE, "listeners": "CLIENT://h:port"}, "listeners"),
    ({**BASE, "listener.security.protocol.map": "CLIENT:TLS"}, "listener.security.protocol.map"),
    ({**BASE, "log.segment.bytes": "3"}, "log.segment.bytes"),
    ({**BASE, "replica.fetch.listener.port": "-2"}, "replica.fetch.listener.port"),
    ({**BASE, "replica.fetch.listener.port": "65536"}, "replica.fetch.listener.port"),
])
def test_bad_configs_name_the_key(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config(props)


def test_properties_parser() -> None:
    assert parse_properties("a=1\n! bang comment\n\nb : two words\n") == {"a": "1", "b": "two words"}
    with pytest.raises(ValueError):
        parse_properties("just a line")
    assert parse_listener("127.0.0.1:0") == ("127.0.0.1", 0)
    with pytest.raises(ConfigError):
        load_config(Path("/nonexistent/server.properties"), [])


def test_group_settings_have_kafkas_names_and_defaults() -> None:
    """group.min/max.session.timeout.ms, group.max.size, group.initial.rebalance.delay.ms (issue 30/34)."""
    base = BASE
    cfg = build_config(base)
    assert (cfg.group_min_session_timeout_ms, cfg.group_max_session_timeout_ms) == (6000, 1800000)
    assert cfg.group_initial_rebalance_delay_ms == 3000
    cfg = build_config({**base, "group.min.session.timeout.ms": "1000", "group.initial.rebalance.delay.ms": "0",
                        "group.max.size": "50"})
    assert (cfg.group_min_session_timeout_ms, cfg.group_initial_rebalance_delay_ms, cfg.group_max_size) == (1000, 0, 50)
    with pytest.raises(ConfigError, match=r"group\.min\.session\.timeout\.ms"):
        build_config({**base, "group.min.session.timeout.ms": "7000", "group.max.session.timeout.ms": "6000"})
