"""Clients find the cluster without flags (issue 17): environment, then the local cluster, then 9392."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from client import discovery


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in (discovery.BOOTSTRAP_ENV, discovery.ZOOKEEPER_ENV, discovery.DIR_ENV, discovery.KAFKA_BOOTSTRAP_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)


def write_state(directory: Path) -> None:
    directory.mkdir(parents=True)
    (directory / "cluster.json").write_text(json.dumps({
        "dir": str(directory), "zookeeper_connect": "127.0.0.1:41000/c",
        "brokers": {"1": {"broker_id": 1, "port": 40001, "host": "127.0.0.1", "kafka_port": 40101},
                    "2": {"broker_id": 2, "port": 40002, "host": "127.0.0.1", "kafka_port": 40102}}}))


def test_nothing_known_gives_the_local_clusters_grpc_default_and_no_zookeeper() -> None:
    # 9392: the documented gRPC port of `cluster up`'s broker 1 (9092 is its Kafka-protocol port).
    assert discovery.default_bootstrap() == "127.0.0.1:9392"
    assert discovery.default_zookeeper() is None


def test_the_local_cluster_in_the_working_directory_is_found(tmp_path: Path) -> None:
    write_state(tmp_path / ".minikafka")
    assert discovery.default_bootstrap() == "127.0.0.1:40001,127.0.0.1:40002"
    assert discovery.default_zookeeper() == "127.0.0.1:41000/c"


def test_minikafka_dir_points_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_state(tmp_path / "elsewhere")
    monkeypatch.setenv(discovery.DIR_ENV, str(tmp_path / "elsewhere"))
    assert discovery.default_bootstrap() == "127.0.0.1:40001,127.0.0.1:40002"


def test_the_environment_wins_over_the_local_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_state(tmp_path / ".minikafka")
    monkeypatch.setenv(discovery.BOOTSTRAP_ENV, "10.0.0.1:9092")
    monkeypatch.setenv(discovery.ZOOKEEPER_ENV, "10.0.0.1:2181")
    assert discovery.default_bootstrap() == "10.0.0.1:9092"
    assert discovery.default_zookeeper() == "10.0.0.1:2181"


def test_a_damaged_state_file_is_ignored(tmp_path: Path) -> None:
    (tmp_path / ".minikafka").mkdir()
    (tmp_path / ".minikafka" / "cluster.json").write_text("{not json")
    assert discovery.default_bootstrap() == "127.0.0.1:9392"


def test_kafkas_own_clients_get_the_local_clusters_kafka_listeners_or_a_clear_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33 item 4: the README's confluent-kafka block fell back to 127.0.0.1:9092 (another
    cluster's, or nobody's: "Connection refused" forever)."""
    with pytest.raises(LookupError, match="minikafka cluster up"):
        discovery.kafka_bootstrap()
    write_state(tmp_path / ".minikafka")
    assert discovery.kafka_bootstrap() == "127.0.0.1:40101,127.0.0.1:40102"
    monkeypatch.setenv(discovery.KAFKA_BOOTSTRAP_ENV, "10.0.0.1:9092")
    assert discovery.kafka_bootstrap() == "10.0.0.1:9092"
