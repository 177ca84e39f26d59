"""Fixtures for integration and chaos tests: one real ZooKeeper per session (Debian's package,
on a loopback port), and per test a fresh chroot in it with real broker processes. Unit tests
use none of them (each fixture starts only when a test asks for it)."""

from __future__ import annotations

import logging
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from client.connection import ClusterView
from client.local_cluster import LocalCluster, ZooKeeperServer

logging.getLogger("kazoo").setLevel(logging.ERROR)
# PySpark starts its JVM with fork + preexec_fn; gRPC's fork handlers break that child when this
# process already has channels open (read when the fork happens, so setting it here is enough).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/helpers.py for every test directory

# Short sessions so that failover tests take seconds (ZooKeeper's minimum here is 1000 ms).
TEST_BROKER_CONFIG = {
    "zookeeper.session.timeout.ms": "2000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "100",
    "controlled.shutdown.retry.backoff.ms": "200",
    "request.timeout.ms": "5000",
    "leader.imbalance.check.interval.seconds": "3600",
    # Tests make small segments on purpose (retention, rolling); production's floor is 1 MiB.
    "min.segment.bytes": "1024",
}


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    zk = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    zk.start()
    yield zk
    zk.stop()


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperServer) -> str:
    """A fresh chroot per test: clusters of different tests never see each other."""
    return _fresh_chroot(zookeeper)


@pytest.fixture
def zk_client(zk_connect: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zk_connect, timeout=10)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


class ClusterFixture:
    def __init__(self, directory: Path, zk_connect: str) -> None:
        self.dir = directory
        self.zk_connect = zk_connect
        self.cluster: LocalCluster | None = None
        self._views: list[ClusterView] = []

    def start(self, brokers: int = 3, **overrides: str) -> LocalCluster:
        cfg = dict(TEST_BROKER_CONFIG)
        cfg.update({k.replace("_", "."): v for k, v in overrides.items()})
        self.cluster = LocalCluster(self.dir, zookeeper=self.zk_connect, broker_overrides=cfg)
        self.cluster.up(brokers)
        return self.cluster

    def view(self) -> ClusterView:
        assert self.cluster is not None and self.cluster.state is not None
        v = ClusterView(self.cluster.state.bootstrap_servers, timeout_s=5)
        self._views.append(v)
        return v

    def stop(self) -> None:
        for v in self._views:
            v.close()
        if self.cluster is not None:
            self.cluster.down(timeout_s=15)


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[ClusterFixture]:
    fx = ClusterFixture(tmp_path / "cluster", zk_connect)
    yield fx
    fx.stop()


def _fresh_chroot(zookeeper: ZooKeeperServer) -> str:
    chroot = f"/t-{uuid.uuid4().hex[:12]}"
    client = KazooClient(hosts=zookeeper.connect, timeout=10)
    client.start(timeout=10)
    client.ensure_path(chroot)
    client.stop()
    client.close()
    return zookeeper.connect + chroot


@pytest.fixture(scope="module")
def module_cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterFixture]:
    """One running 3-broker cluster shared by a module's tests that do not hurt it."""
    fx = ClusterFixture(tmp_path_factory.mktemp("module-cluster") / "cluster", _fresh_chroot(zookeeper))
    fx.start()
    yield fx
    fx.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local[2] SparkSession for the whole run (cold start ~7 s, first Python source ~10 s)."""
    pytest.importorskip("pyspark")
    from client.spark import local_session

    session = local_session("minikafka-tests", master="local[2]")
    yield session
    session.stop()
