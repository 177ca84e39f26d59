"""`cluster up --zookeepers N` (issue 32): each server's zoo.cfg, its ports (documented, kept across
down/up, free when taken), the connect string brokers get, `srvr`'s mode, and cluster.json. No
sockets: port probes are faked."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from client.cli.cluster import target
from client.ops import local_cluster
from client.ops.local_cluster import (
    NOT_SERVING,
    BrokerProc,
    ClusterError,
    ClusterState,
    LocalCluster,
    ZkPeer,
    ZooKeeperProc,
    check_ensemble_size,
    ensemble_connect,
    ensemble_peers,
    fixed_zookeeper_ports,
    zoo_cfg,
    zookeeper_mode,
)

# What ZooKeeperServer wrote before ensembles existed: a one-server cluster must not change.
STANDALONE = """tickTime=500
dataDir=/d/data
clientPort=2181
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=*
minSessionTimeout=1000
maxSessionTimeout=60000
initLimit=10
syncLimit=5
"""


def test_standalone_zoo_cfg_is_unchanged() -> None:
    assert zoo_cfg("127.0.0.1", 2181, Path("/d/data"), 500) == STANDALONE


def test_ensemble_zoo_cfg_lists_every_server() -> None:
    peers = ensemble_peers(fixed_zookeeper_ports(3))
    text = zoo_cfg("127.0.0.1", 2182, Path("/d/data"), 500, peers)
    assert text.startswith(STANDALONE.replace("2181", "2182"))
    assert text.splitlines()[-3:] == ["server.1=127.0.0.1:2888:3888", "server.2=127.0.0.1:2889:3889",
                                      "server.3=127.0.0.1:2890:3890"]
    assert text.endswith("\n")


def test_documented_ports_and_connect_string() -> None:
    assert fixed_zookeeper_ports(3) == [2181, 2888, 3888, 2182, 2889, 3889, 2183, 2890, 3890]
    peers = ensemble_peers(fixed_zookeeper_ports(5))
    assert [p.server_id for p in peers] == [1, 2, 3, 4, 5]
    assert ensemble_connect(peers) == "127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183,127.0.0.1:2184,127.0.0.1:2185"
    with pytest.raises(ValueError):
        ensemble_peers([1, 2])


@pytest.mark.parametrize("n", [1, 3, 5, 7])
def test_ensemble_sizes_accepted(n: int) -> None:
    check_ensemble_size(n)


@pytest.mark.parametrize(("n", "says"), [(2, "use 1 or 3"), (4, "use 3 or 5"), (0, "1 or an odd"),
                                         (9, "1 or an odd"), (-1, "1 or an odd")])
def test_ensemble_sizes_refused(n: int, says: str) -> None:
    with pytest.raises(ClusterError, match=says):
        check_ensemble_size(n)


def test_mode_from_srvr() -> None:
    srvr = ("Zookeeper version: 3.8.0-debian\nLatency min/avg/max: 0/0.0/0\nReceived: 3\nSent: 2\n"
            "Connections: 1\nOutstanding: 0\nZxid: 0x100000000\nMode: follower\nNode count: 5\n")
    assert zookeeper_mode(srvr) == "follower"
    assert zookeeper_mode(srvr.replace("follower", "leader")) == "leader"
    assert zookeeper_mode("This ZooKeeper instance is not currently serving requests\n") == NOT_SERVING


@pytest.fixture
def fake_ports(monkeypatch: pytest.MonkeyPatch) -> set[int]:
    taken: set[int] = set()
    monkeypatch.setattr(local_cluster, "port_free", lambda port, host="127.0.0.1": port not in taken)
    monkeypatch.setattr(local_cluster, "free_ports", lambda n, host="127.0.0.1": list(range(40000, 40000 + n)))
    return taken


def test_ensemble_ports_documented_when_free(tmp_path: Path, fake_ports: set[int]) -> None:
    c = LocalCluster(tmp_path, fixed_ports=True)
    assert c._ensemble_peers(3) == ensemble_peers(fixed_zookeeper_ports(3))
    assert c.notices == []


def test_ensemble_ports_free_with_a_notice_when_taken(tmp_path: Path, fake_ports: set[int]) -> None:
    fake_ports.add(3889)
    c = LocalCluster(tmp_path, fixed_ports=True)
    assert c._ensemble_peers(3) == ensemble_peers(list(range(40000, 40009)))
    assert len(c.notices) == 1 and "3889" in c.notices[0]
    assert LocalCluster(tmp_path)._ensemble_peers(3)[0].client_port == 40000  # the tests: free ports


def test_ensemble_ports_kept_across_down_and_up(tmp_path: Path, fake_ports: set[int]) -> None:
    old = [ZooKeeperProc(i, 50000 + i, 51000 + i, 52000 + i, dir=str(tmp_path / f"zookeeper-{i}")) for i in (1, 2, 3)]
    c = LocalCluster(tmp_path, fixed_ports=True)
    c.previous = ClusterState(str(tmp_path), ensemble_connect([z.peer for z in old]), zookeepers=old)
    assert c._ensemble_peers(3) == tuple(z.peer for z in old)
    assert c._ensemble_peers(5) == ensemble_peers(fixed_zookeeper_ports(5))  # another size: new ports
    fake_ports.add(51002)
    assert c._ensemble_peers(3) == ensemble_peers(fixed_zookeeper_ports(3))
    assert "51002" in c.notices[-1]


def test_cluster_json_of_one_server_has_no_ensemble_key(tmp_path: Path) -> None:
    state = ClusterState(str(tmp_path), "127.0.0.1:2181", 42, str(tmp_path / "zookeeper"),
                         brokers={1: BrokerProc(1, 9392)})
    state.save()
    data = json.loads((tmp_path / "cluster.json").read_text())
    assert "zookeepers" not in data
    assert ClusterState.load(tmp_path) == state


def test_cluster_json_keeps_the_ensemble(tmp_path: Path) -> None:
    servers = [ZooKeeperProc(i, 2180 + i, 2887 + i, 3887 + i, pid=100 + i, dir=f"/d/zookeeper-{i}") for i in (1, 2, 3)]
    state = ClusterState(str(tmp_path), ensemble_connect([z.peer for z in servers]), zookeepers=servers)
    state.save()
    loaded = ClusterState.load(tmp_path)
    assert loaded == state
    assert loaded.peers[1] == ZkPeer(2, 2182, 2889, 3889)
    assert loaded.zookeeper_connect == "127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183"


def test_a_one_server_clusters_zookeeper_is_zk_1(tmp_path: Path) -> None:
    ClusterState(str(tmp_path), "127.0.0.1:2999", 42, str(tmp_path / "zookeeper")).save()
    z = LocalCluster(tmp_path).zookeeper_server(1)
    assert (z.client_port, z.pid) == (2999, 42)
    with pytest.raises(ClusterError, match="no ZooKeeper server zk-2"):
        LocalCluster(tmp_path).zookeeper_server(2)


def test_an_ensemble_refuses_an_external_zookeeper(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="cannot be used with --zookeeper"):
        LocalCluster(tmp_path, zookeeper="127.0.0.1:2181").up(1, zookeepers=3)


def test_cli_targets() -> None:
    assert target("2") == ("broker", 2)
    assert target("zk-3") == ("zookeeper", 3)
    assert target("ZK-1") == ("zookeeper", 1)
    for bad in ("zk-", "zk-0", "x", "-1", "zk-a"):
        with pytest.raises(argparse.ArgumentTypeError):
            target(bad)
