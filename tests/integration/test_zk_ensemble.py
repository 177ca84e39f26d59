"""`minikafka cluster up --zookeepers 3` (issue 32): a real quorum of Debian's ZooKeeper under the
local launcher - one leader and two followers, brokers given the full connect string,
`cluster status` showing each server's mode, and `cluster kill/start zk-N` acting on one server
(losing the ZooKeeper leader elects another; the server comes back as a follower)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import TEST_BROKER_CONFIG, TEST_ZK_DIGEST, wait_for
from kazoo.client import KazooClient

from client.ops.local_cluster import LocalCluster, pid_alive
from proto.properties import parse_properties

pytestmark = pytest.mark.integration


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path / "cluster", broker_overrides=TEST_BROKER_CONFIG, zk_digest=TEST_ZK_DIGEST)
    try:
        c.up(1, zookeepers=3)
        yield c
    finally:
        c.down(timeout_s=15)


def _modes(c: LocalCluster) -> dict[int, str]:
    return {z["id"]: z["mode"] for z in c.zookeeper_modes()}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "client.cli", "cluster", *args], capture_output=True, text=True,
                          timeout=120)


def test_three_servers_elect_one_leader_and_brokers_get_every_server(ensemble: LocalCluster) -> None:
    assert ensemble.state is not None
    modes = _modes(ensemble)
    assert sorted(modes.values()) == ["follower", "follower", "leader"], modes
    servers = ensemble.state.zookeepers
    assert len({p for z in servers for p in (z.client_port, z.quorum_port, z.election_port)}) == 9
    for z in servers:  # a real quorum: myid and a server.N line per member in each zoo.cfg
        assert (Path(z.dir) / "data" / "myid").read_text().strip() == str(z.server_id)
        cfg = (Path(z.dir) / "zoo.cfg").read_text()
        assert all(f"server.{o.server_id}=127.0.0.1:{o.quorum_port}:{o.election_port}" in cfg for o in servers)
    props = parse_properties(Path(ensemble.broker(1).config).read_text())
    assert props["zookeeper.connect"] == ",".join(z.address for z in servers) == ensemble.state.zookeeper_connect
    # One replicated tree: the broker's registration is read from each server alone.
    for z in servers:
        zk = KazooClient(hosts=z.address, timeout=10)
        zk.start(timeout=10)
        try:
            zk.sync("/brokers/ids")
            assert zk.get_children("/brokers/ids") == ["1"], z
        finally:
            zk.stop()
            zk.close()

    status = json.loads(_cli("status", "--dir", ensemble.state.dir, "--output", "json").stdout)
    assert [s["mode"] for s in status["zookeeper"]["servers"]] == [modes[1], modes[2], modes[3]]
    assert status["zookeeper"]["alive"] and status["brokers"][0]["registered"]


def test_kill_and_start_one_server_by_name(ensemble: LocalCluster) -> None:
    assert ensemble.state is not None
    leader = next(i for i, m in _modes(ensemble).items() if m == "leader")
    r = _cli("kill", f"zk-{leader}", "--dir", ensemble.state.dir)
    assert r.returncode == 0 and f"zk-{leader}" in r.stdout, r.stderr
    others = wait_for(lambda: (m := _modes(ensemble)) and sorted(v for i, v in m.items() if i != leader)
                      == ["follower", "leader"] and m, timeout_s=30, what="the two others to elect a leader")
    assert others[leader] == "down"
    table = _cli("status", "--dir", ensemble.state.dir).stdout
    assert f"zk-{leader}" in table and "down" in table
    wait_for(lambda: ensemble.zk_view(connection_timeout_ms=2000)["registered"] == [1], timeout_s=30,
             what="the broker registered through the two servers left")

    r = _cli("start", f"zk-{leader}", "--dir", ensemble.state.dir)
    assert r.returncode == 0 and "follower" in r.stdout, r.stdout + r.stderr
    assert sorted(_modes(ensemble).values()) == ["follower", "follower", "leader"]
    bad = _cli("kill", "zk-9", "--dir", ensemble.state.dir)
    assert bad.returncode == 1 and "no ZooKeeper server zk-9" in bad.stderr


def test_down_stops_a_server_started_by_another_process(ensemble: LocalCluster) -> None:
    assert ensemble.state is not None
    ensemble.signal_zookeeper(2, "KILL")
    assert _cli("start", "zk-2", "--dir", ensemble.state.dir).returncode == 0
    restarted = LocalCluster(Path(ensemble.state.dir)).zookeeper_server(2).pid
    assert pid_alive(restarted)
    ensemble.down(timeout_s=15)  # this object still holds the killed pid; the file has the new one
    assert not pid_alive(restarted)
