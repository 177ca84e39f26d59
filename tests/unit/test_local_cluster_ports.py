"""`cluster up` addresses (issue 17): the documented fixed ports when free, free ports (with a
notice) when one is taken, free ports always for the tests. Port probes are faked: no sockets."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.ops import local_cluster
from client.ops.local_cluster import LocalCluster, fixed_ports


def test_the_documented_series() -> None:
    # Kafka's own clients get Kafka's customary 9092 series; this project's gRPC clients 9392.
    assert fixed_ports(3) == {"client": [9392, 9393, 9394], "internal": [9192, 9193, 9194],
                              "metrics": [9292, 9293, 9294], "kafka": [9092, 9093, 9094]}


@pytest.fixture
def fake_ports(monkeypatch: pytest.MonkeyPatch) -> set[int]:
    taken: set[int] = set()
    monkeypatch.setattr(local_cluster, "port_free", lambda port, host="127.0.0.1": port not in taken)
    monkeypatch.setattr(local_cluster, "free_ports", lambda n, host="127.0.0.1": list(range(40000, 40000 + n)))
    return taken


def test_fixed_ports_when_free(tmp_path: Path, fake_ports: set[int]) -> None:
    c = LocalCluster(tmp_path, fixed_ports=True)
    assert c._zookeeper_port() == 2181
    # per broker: client, metrics, internal, Kafka protocol
    assert c._broker_ports(2) == [9392, 9292, 9192, 9092, 9393, 9293, 9193, 9093]
    assert c.notices == []


def test_free_ports_with_a_notice_when_one_is_taken(tmp_path: Path, fake_ports: set[int]) -> None:
    fake_ports.update({2181, 9093})
    c = LocalCluster(tmp_path, fixed_ports=True)
    assert c._zookeeper_port() is None
    assert c._broker_ports(2) == list(range(40000, 40008))
    assert len(c.notices) == 2 and "2181" in c.notices[0] and "9093" in c.notices[1]


def test_free_ports_unless_asked(tmp_path: Path, fake_ports: set[int]) -> None:
    c = LocalCluster(tmp_path)  # the tests' launcher: never the fixed ports
    assert c._zookeeper_port() is None
    assert c._broker_ports(1) == [40000, 40001, 40002, 40003]
    assert c.notices == []


def test_brokers_run_this_checkouts_code() -> None:
    # After the client/ split the launcher sat one level deeper and pointed brokers at client/:
    # they then ran whatever copy the virtualenv had installed, not this checkout.
    assert (local_cluster.PROJECT_ROOT / "pyproject.toml").is_file()
    assert (local_cluster.PROJECT_ROOT / "client" / "ops" / "local_cluster.py").is_file()


def test_listener_ports_are_picked_outside_the_kernels_ephemeral_range() -> None:
    # A port from bind(0) is an ephemeral one: the next outgoing connection may take it as its
    # source port before the broker binds it (a CI run's broker exited "Failed to bind").
    assert local_cluster.listener_port_range((32768, 60999)) == (20000, 32767)  # Linux's default
    assert local_cluster.listener_port_range((49152, 65535)) == (20000, 49151)  # IANA's
    assert local_cluster.listener_port_range((1024, 60000)) == (60001, 65535)   # nothing below: above
    low, high = local_cluster.listener_port_range((1024, 65000))
    assert (low, high) == (20000, 65535)  # no room outside: anywhere above the documented ports
