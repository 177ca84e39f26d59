"""Fixtures for integration and chaos tests: one real ZooKeeper per session (Debian's package,
on a loopback port), and per test a fresh chroot in it with real broker processes. Unit tests
use none of them (each fixture starts only when a test asks for it)."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

# PySpark starts its JVM with fork + preexec_fn. With gRPC's fork support on, a fork while another
# thread is inside gRPC skips its handlers and the child dies ("Other threads are currently calling
# into gRPC, skipping fork() handlers", then "Java gateway process exited": all of test_spark.py
# erred once in a full run). gRPC's core reads this when it is first imported, so before any import
# that brings in grpc (client.ops.local_cluster below does).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import pytest
from hypothesis import HealthCheck, settings
from kazoo.client import KazooClient

from client.ops.local_cluster import ZooKeeperServer

logging.getLogger("kazoo").setLevel(logging.ERROR)
# A shell without job control starts a background command (`make test &`, CI runners, nohup) with
# SIGINT ignored, and an ignored signal stays ignored across exec: every CLI process a test starts
# would then ignore the Ctrl-C the Ctrl-C tests send it (seen: the console consumer and
# `minikafka chaos` running on after SIGINT). A Python handler is reset to the default at exec, so
# the children get Python's KeyboardInterrupt again.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# Property tests check behaviour, not speed: on a loaded 2-core CI machine Hypothesis' 200 ms
# per-example deadline and its too-slow health check failed correct code (seen once in tests/unit).
settings.register_profile("minikafka", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("minikafka")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/helpers.py for every test directory
from helpers import TEST_ZK_DIGEST, ClusterFixture, fresh_chroot  # noqa: E402 - needs the path above


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--sim-seed", type=int, default=None, metavar="N",
                     help="replay one seed of the deterministic simulation (tests/simulation) with its trace")


@pytest.fixture
def sim_seed(request: pytest.FixtureRequest) -> int | None:
    value = request.config.getoption("--sim-seed")
    return None if value is None else int(value)


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    zk = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    zk.start()
    yield zk
    zk.stop()


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperServer) -> str:
    """A fresh chroot per test: clusters of different tests never see each other."""
    return fresh_chroot(zookeeper)


@pytest.fixture
def zk_client(zk_connect: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zk_connect, timeout=10, auth_data=[("digest", ":".join(TEST_ZK_DIGEST))])
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[ClusterFixture]:
    fx = ClusterFixture(tmp_path / "cluster", zk_connect)
    yield fx
    fx.stop()


@pytest.fixture(scope="module")
def module_cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterFixture]:
    """One running 3-broker cluster shared by a module's tests that do not hurt it."""
    fx = ClusterFixture(tmp_path_factory.mktemp("module-cluster") / "cluster", fresh_chroot(zookeeper))
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
