"""Chaos scenario: a ZooKeeper ensemble of 3 losing servers under acks=all load (issue 32).

A `cluster up --zookeepers 3` cluster (3 brokers, RF=3, min.insync.replicas=2, acks=all idempotent
producers writing unique values) loses the ZooKeeper leader (SIGKILL, then started again), then a
follower, then every server in turn (a rolling restart with SIGTERM), then the leader is paused
(SIGSTOP: cut off from its peers and clients alike) and resumed. A minority down never costs
the quorum, so:

* no acknowledged write is lost or duplicated (the history checker) and the replicas agree;
* every partition is led afterwards;
* each broker keeps its ZooKeeper session: a broker whose server dies reconnects to another server
  of its connect string within the session timeout - its registration znode keeps its owner
  session, and the session shows up on another server (``cons``);
* the controller changes only when a session actually expired (counted, and printed).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import TEST_BROKER_CONFIG, TEST_ZK_DIGEST, E, create_topic, isr_of, leader_of, wait_for
from kazoo.client import KazooClient

from client.connection import ClusterView
from client.ops.chaos import Workload
from client.ops.history import OK, check
from client.ops.local_cluster import SERVING_MODES, LocalCluster, four_letter_word
from client.ops.verify_replicas import verify

pytestmark = pytest.mark.integration
TOPIC = "zk-ensemble-chaos"
PARTITIONS = 2
# Kafka's own default is 18 s; 6 s (the local launcher's) leaves room for an election on 2 cores.
SESSION_TIMEOUT_MS = 6000


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[LocalCluster]:
    cfg = dict(TEST_BROKER_CONFIG, **{"zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS)})
    c = LocalCluster(tmp_path / "cluster", broker_overrides=cfg, zk_digest=TEST_ZK_DIGEST)
    try:
        c.up(3, zookeepers=3)
        yield c
    finally:
        c.down(timeout_s=15)


def _modes(c: LocalCluster) -> dict[int, str]:
    return {z["id"]: z["mode"] for z in c.zookeeper_modes()}


def _quorum(c: LocalCluster) -> dict[int, str]:
    """Every running server serving, one of them the leader (else {}); a paused one is left out."""
    modes = _modes(c)
    serving = [m for m in modes.values() if m not in ("down", "paused")]
    return modes if serving and all(m in SERVING_MODES for m in serving) and serving.count("leader") == 1 else {}


def _sessions_on(c: LocalCluster, server_id: int) -> set[int]:
    """Session ids of the clients connected to one server (``cons``: ``sid=0x...`` per connection)."""
    z = c.zookeeper_server(server_id)
    try:
        text = four_letter_word(z.host, z.client_port, "cons")
    except OSError:
        return set()
    return {int(m, 16) for m in re.findall(r"sid=0x([0-9a-f]+)", text)}


def _owners(zk: KazooClient) -> dict[int, int]:
    """Broker id -> the session owning its registration znode."""
    zk.sync("/brokers/ids")
    return {int(b): zk.exists(f"/brokers/ids/{b}").ephemeralOwner for b in zk.get_children("/brokers/ids")}


def test_ensemble_loses_leader_follower_and_rolls_without_losing_a_write(ensemble: LocalCluster) -> None:
    c = ensemble
    assert c.state is not None
    view = ClusterView(c.state.bootstrap_servers, timeout_s=5)
    zk = KazooClient(hosts=c.state.zookeeper_connect, timeout=10)
    zk.start(timeout=10)
    try:
        res = create_topic(view, TOPIC, partitions=PARTITIONS, replication_factor=3,
                           configs={"min.insync.replicas": "2"})
        assert res.error_code == E.NONE, res.error_message
        wait_for(lambda: all(len(isr_of(view, TOPIC, p)) == 3 for p in range(PARTITIONS)), timeout_s=30)
        owners_before = _owners(zk)
        assert sorted(owners_before) == [1, 2, 3]
        epoch_before = c.zk_view()["controller_epoch"]
        broker_sessions = set(owners_before.values())
        moved: set[int] = set()  # broker sessions seen on another server after theirs went down
        events: list[str] = []

        def bounce(server_id: int, sig: str) -> None:
            on_victim = _sessions_on(c, server_id) & broker_sessions
            c.signal_zookeeper(server_id, sig)
            wait_for(lambda: _quorum(c), timeout_s=30, what=f"a quorum without zk-{server_id}")
            # The broker sessions it served reconnect to another server of the connect string.
            others = [z.server_id for z in c.state.zookeepers if z.server_id != server_id]  # type: ignore[union-attr]
            wait_for(lambda: on_victim <= set().union(*(_sessions_on(c, o) for o in others)), timeout_s=30,
                     what=f"the broker sessions of zk-{server_id} on another server")
            moved.update(on_victim)
            time.sleep(0.5)  # writes go on against a two-server quorum
            if sig == "STOP":
                c.signal_zookeeper(server_id, "CONT")
            else:
                c.start_zookeeper(server_id, timeout_s=60)
            wait_for(lambda: (q := _quorum(c)) and not {"down", "paused"} & set(q.values()), timeout_s=30,
                     what=f"zk-{server_id} back in the quorum")
            events.append(f"{sig} zk-{server_id}: {len(on_victim)} broker session(s) moved")

        workload = Workload(c.state.bootstrap_servers, TOPIC, PARTITIONS, rate=150)
        workload.start()
        time.sleep(1.0)
        leader = next(i for i, m in _modes(c).items() if m == "leader")
        bounce(leader, "KILL")
        follower = next(i for i, m in _modes(c).items() if m == "follower")
        bounce(follower, "KILL")
        for z in (1, 2, 3):  # a rolling restart of the ensemble
            bounce(z, "TERM")
        # The leader cut off from everyone (paused: its peers and clients get no answer) and back.
        bounce(next(i for i, m in _modes(c).items() if m == "leader"), "STOP")
        time.sleep(1.0)
        writes = workload.stop()

        # Sessions: kept, unless one expired (then the broker registered again with a new one).
        owners_after = wait_for(lambda: (o := _owners(zk)) and sorted(o) == [1, 2, 3] and o, timeout_s=30)
        expired = [b for b in (1, 2, 3) if owners_after[b] != owners_before[b]]
        controller_changes = c.zk_view()["controller_epoch"] - epoch_before
        print(f"zk ensemble chaos: {'; '.join(events)}; broker sessions expired: {expired}; "
              f"controller changes: {controller_changes}")
        assert moved == broker_sessions - {owners_before[b] for b in expired}, \
            "every broker's session must have moved to another server at least once (the rolling restart)"
        assert controller_changes <= len(expired), "the controller may change only when a session expired"

        wait_for(lambda: all(leader_of(view, TOPIC, p)[0] >= 0 and len(isr_of(view, TOPIC, p)) == 3
                             for p in range(PARTITIONS)), timeout_s=60, what="every partition led, full ISRs")
        report = check(writes, workload.read_all())
        assert report.writes.get(OK, 0) > 100, report.summary()
        assert report.valid, report.summary()
        assert not report.lost and not report.duplicates, report.summary()
        replicas = verify(view, TOPIC)
        assert all(e["status"] == "OK" for e in replicas), replicas
    finally:
        view.close()
        zk.stop()
        zk.close()
