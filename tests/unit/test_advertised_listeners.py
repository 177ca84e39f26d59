"""A wrong advertised address fails the broker's start with a clear error (issue 32), as Kafka's
KafkaConfig does: no advertised listener on the 0.0.0.0 meta-address (brokers on other hosts and
clients would be told to connect to it) and no advertised name that is not a listener's."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.server.config import ConfigError, build_config

PEM = str(Path(__file__))
BASE = {"broker.id": "1", "zookeeper.connect": "zk-0.zk:2181,zk-1.zk:2181,zk-2.zk:2181", "log.dirs": "/tmp/a",
        "listeners": "CLIENT://0.0.0.0:9092,INTERNAL://0.0.0.0:9093",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:SSL", "inter.broker.listener.name": "INTERNAL",
        "ssl.keystore.location": PEM, "ssl.truststore.location": PEM,
        "kafka.listeners": "KAFKA://0.0.0.0:9094"}


def test_bind_everywhere_advertise_the_host_name() -> None:
    cfg = build_config({**BASE, "advertised.listeners": "CLIENT://broker-0.brokers.ns.svc:9092,"
                                                        "INTERNAL://broker-0.brokers.ns.svc:9093",
                        "advertised.kafka.listeners": "KAFKA://10.1.2.3:9094"})
    assert [x.address for x in cfg.advertised_listener_list] == ["broker-0.brokers.ns.svc:9092",
                                                                 "broker-0.brokers.ns.svc:9093"]
    assert [x.address for x in cfg.advertised_kafka_listener_list] == ["10.1.2.3:9094"]


@pytest.mark.parametrize("key, value", [
    ("advertised.listeners", "CLIENT://0.0.0.0:9092,INTERNAL://10.0.0.1:9093"),
    ("advertised.listeners", "CLIENT://10.0.0.1:9092,INTERNAL://[::]:9093"),
    ("advertised.kafka.listeners", "KAFKA://0.0.0.0:9094"),
])
def test_the_wildcard_meta_address_is_refused(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"{key} cannot use the nonroutable meta-address"):
        build_config({**BASE, key: value})


@pytest.mark.parametrize("key, value, listeners_key", [
    ("advertised.listeners", "CLIENT://10.0.0.1:9092,EXTERNAL://10.0.0.1:9099", "listeners"),
    ("advertised.kafka.listeners", "PLAINTEXT://10.0.0.1:9094", "kafka.listeners"),
])
def test_an_advertised_name_must_be_a_listener(key: str, value: str, listeners_key: str) -> None:
    with pytest.raises(ConfigError, match=f"not in {listeners_key}; advertised listener names must be"):
        build_config({**BASE, key: value})


def test_a_listener_left_out_is_advertised_as_it_binds() -> None:
    # Kafka advertises `listeners` when advertised.listeners is unset; a subset is fine.
    cfg = build_config({**BASE, "listeners": "CLIENT://0.0.0.0:9092,INTERNAL://10.0.0.1:9093",
                        "advertised.listeners": "CLIENT://10.0.0.1:9092"})
    assert [x.address for x in cfg.advertised_listener_list] == ["10.0.0.1:9092", "10.0.0.1:9093"]
