"""The ZooKeeper gateway (zk/client.py) against lost replies, expiring sessions and races,
over the simulation's in-memory ZooKeeper (tests/simulation/sim_zk.py, itself tested against the
real server). Issue 14 items 2, 3, 5 and 7, and the lost-commit case the simulation found."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from kazoo.exceptions import SessionExpiredError

from proto import errors

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "simulation"))
from sim_zk import SimKazooClient, SimZooKeeper, fault_once

from zk import client as zk_client
from zk.client import (
    BrokerIdInUseError,
    ControllerMovedError,
    KafkaZkClient,
    ZkWrite,
)
from zk.data import (
    BrokerIdZNode,
    BrokerRegistration,
    ControllerZNode,
    Endpoint,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    TopicPartitionId,
    TopicPartitionStateZNode,
)

RETRY = {"max_tries": 3, "delay": 0.1, "max_delay": 1.0, "ignore_expire": False}
Policy = Callable[[str, str], "str | None"]


def gateway(server: SimZooKeeper, policy: Policy | None = None, name: str = "broker") -> tuple[KafkaZkClient,
                                                                                               SimKazooClient]:
    client = server.client(name=name, command_retry=RETRY, fault_policy=policy)
    client.start()
    gw = KafkaZkClient.over(client)
    gw.ensure_persistent_paths()
    return gw, client


def registration(broker_id: int = 1) -> BrokerRegistration:
    return BrokerRegistration(broker_id, "localhost", 9092, 0, endpoints=(Endpoint("INTERNAL", "localhost", 9092, "SSL"),),
                              inter_broker_listener="INTERNAL")


def state(leader: int, epoch: int, isr: tuple[int, ...], controller_epoch: int = 1) -> LeaderIsrAndControllerEpoch:
    return LeaderIsrAndControllerEpoch(LeaderAndIsr(leader, epoch, isr, 0), controller_epoch)


# ---------------------------------------------------------------- broker registration (item 7)


def test_register_broker_lost_reply_is_our_node() -> None:
    server = SimZooKeeper()
    gw, client = gateway(server, fault_once("after", "create", BrokerIdZNode.path(1)))
    epoch = gw.register_broker(registration())
    node = server.node(BrokerIdZNode.path(1))
    assert node is not None and node[1].czxid == epoch and node[1].ephemeralOwner == client.session_id


def test_register_broker_when_the_old_incarnations_node_expires_between_create_and_get() -> None:
    """Item 7: NodeExists on create (the node of our killed previous incarnation), then that
    session expires before the follow-up read: the old code raised NoNodeError and the broker
    stayed down; now it creates its node again."""
    server = SimZooKeeper()
    old, old_client = gateway(server, name="old incarnation")
    old.register_broker(registration())
    old_session = old_client.session_id
    assert old_session is not None
    old_client.crash()  # kill -9: the session lingers until it times out
    expired = []

    def policy(op: str, path: str) -> str | None:
        if op == "get" and path == BrokerIdZNode.path(1) and not expired:
            server.expire_session(old_session)  # ... just now
            expired.append(True)
        return None

    gw, client = gateway(server, policy, name="new incarnation")
    epoch = gw.register_broker(registration())
    node = server.node(BrokerIdZNode.path(1))
    assert expired and node is not None and node[1].ephemeralOwner == client.session_id and node[1].czxid == epoch


def test_register_broker_refuses_an_id_held_by_a_live_broker() -> None:
    server = SimZooKeeper()
    gateway(server, name="other")[0].register_broker(registration())
    gw, _client = gateway(server)
    with pytest.raises(BrokerIdInUseError):
        gw.register_broker(registration())


# ---------------------------------------------------------------- controller election (items 3, 5)


def test_controller_registration_lost_reply_is_ours() -> None:
    """Item 3: the retried create meets our own node; the old code answered "someone else" and
    /controller then named a broker that never acted."""
    server = SimZooKeeper()
    gw, _client = gateway(server, fault_once("after", "transaction", ControllerZNode.PATH))
    assert gw.register_controller_and_increment_epoch(1, 0) == (1, 0)
    assert gw.get_controller_id() == 1 and gw.get_controller_epoch() == (1, 0)


def test_controller_registration_bumps_the_epoch_each_time() -> None:
    server = SimZooKeeper()
    gw, _client = gateway(server)
    assert gw.register_controller_and_increment_epoch(1, 0) == (1, 0)
    gw.delete_controller_if_owner()
    gw.zk.fault_policy = fault_once("after", "transaction")
    assert gw.register_controller_and_increment_epoch(1, 0) == (2, 1)
    assert gw.get_controller_epoch() == (2, 1)


def test_controller_registration_lost_to_another_broker() -> None:
    server = SimZooKeeper()
    other, _ = gateway(server, name="other")
    assert other.register_controller_and_increment_epoch(2, 0) == (1, 0)
    gw, _client = gateway(server)
    assert gw.register_controller_and_increment_epoch(1, 0) is None
    assert gw.get_controller_epoch() == (1, 0)  # the loser wrote nothing


def test_controller_registration_after_a_concurrent_epoch_bump() -> None:
    """The epoch moved between our read and our multi (a contender that won and lost its session
    already): the multi fails as a whole and is tried again at the new version."""
    server = SimZooKeeper()
    gw, _client = gateway(server)
    other, other_client = gateway(server, name="other")
    bumped = []

    def policy(op: str, path: str) -> str | None:
        if op == "transaction" and not bumped:
            bumped.append(True)
            assert other.register_controller_and_increment_epoch(2, 0) == (1, 0)
            assert other_client.session_id is not None
            server.expire_session(other_client.session_id)
        return None

    gw.zk.fault_policy = policy
    assert gw.register_controller_and_increment_epoch(1, 0) == (2, 1)
    assert gw.get_controller_id() == 1


def _epoch_version(gw: KafkaZkClient) -> int:
    won = gw.register_controller_and_increment_epoch(1, 0)
    assert won is not None
    return won[1]


def _partition(gw: KafkaZkClient) -> str:
    gw.create_topic("t", {0: [1, 2]}, {})
    path = TopicPartitionStateZNode.path("t", 0)
    gw.zk.ensure_path(path.rsplit("/", 1)[0])
    gw.zk.create(path, TopicPartitionStateZNode.encode(state(1, 0, (1, 2))))
    return path


def test_commit_guarded_lost_reply_counts_as_applied() -> None:
    server = SimZooKeeper()
    gw, _client = gateway(server)
    epoch_version = _epoch_version(gw)
    path = _partition(gw)
    gw.zk.fault_policy = fault_once("after", "transaction")
    result = gw.commit_guarded(epoch_version, [ZkWrite("set", path, TopicPartitionStateZNode.encode(state(1, 1, (1,))), 0)])
    assert result.applied
    assert server.node(path)[1].version == 1  # type: ignore[index]


def test_commit_guarded_lost_reply_with_two_writes_to_one_path() -> None:
    """Found by simulation: a partition changed twice in one event. Comparing each write on its own
    made the applied commit look unapplied; the controller then replanned on top of its own
    writes and never sent the first change's LeaderAndIsr (a follower lost acknowledged data)."""
    server = SimZooKeeper()
    gw, _client = gateway(server)
    epoch_version = _epoch_version(gw)
    path = _partition(gw)
    gw.zk.fault_policy = fault_once("after", "transaction")
    writes = [ZkWrite("set", path, TopicPartitionStateZNode.encode(state(1, 1, (1,))), 0),
              ZkWrite("set", path, TopicPartitionStateZNode.encode(state(1, 2, (1, 2))), 1)]
    assert gw.commit_guarded(epoch_version, writes).applied
    assert server.node(path)[1].version == 2  # type: ignore[index]


def test_commit_guarded_refuses_a_zombie_controller() -> None:
    """Item 5 (KAFKA-6082): once a newer controller bumped /controller_epoch, nothing the old one
    stages is written."""
    server = SimZooKeeper()
    gw, _client = gateway(server)
    epoch_version = _epoch_version(gw)
    path = _partition(gw)
    gw.delete_controller_if_owner()
    newer, _ = gateway(server, name="newer controller")
    assert newer.register_controller_and_increment_epoch(2, 0) is not None
    with pytest.raises(ControllerMovedError):
        gw.commit_guarded(epoch_version, [ZkWrite("set", path, TopicPartitionStateZNode.encode(state(2, 1, (2,))), 0)])
    assert server.node(path)[1].version == 0  # type: ignore[index]


def test_commit_guarded_conflict_returns_what_zookeeper_holds() -> None:
    server = SimZooKeeper()
    gw, _client = gateway(server)
    epoch_version = _epoch_version(gw)
    path = _partition(gw)
    gw.zk.set(path, TopicPartitionStateZNode.encode(state(1, 0, (1,))), version=0)  # the leader shrank the ISR
    result = gw.commit_guarded(epoch_version, [ZkWrite("set", path, TopicPartitionStateZNode.encode(state(2, 1, (2,))), 0)])
    assert not result.applied and result.current[path] is not None and result.current[path][1] == 1


def _partitions(gw: KafkaZkClient, n: int) -> list[str]:
    gw.create_topic("many", {p: [1, 2] for p in range(n)}, {})
    paths = []
    for p in range(n):
        path = TopicPartitionStateZNode.path("many", p)
        gw.zk.ensure_path(path.rsplit("/", 1)[0])
        gw.zk.create(path, TopicPartitionStateZNode.encode(state(1, 0, (1, 2))))
        paths.append(path)
    return paths


@pytest.mark.parametrize("multi_bytes", [512 * 1024, 600])  # one multi; several multis
def test_commit_skipping_conflicts_applies_every_write_whose_znode_did_not_move(
        monkeypatch: pytest.MonkeyPatch, multi_bytes: int) -> None:
    """Issue 29: a leader's own ISR change on one partition no longer voids the controller's writes
    of every other partition of the multi (nor stops the later multis)."""
    monkeypatch.setattr(zk_client, "MAX_MULTI_BYTES", multi_bytes)
    server = SimZooKeeper()
    gw, _client = gateway(server)
    epoch_version = _epoch_version(gw)
    paths = _partitions(gw, 12)
    for moved in (paths[1], paths[7]):
        gw.zk.set(moved, TopicPartitionStateZNode.encode(state(1, 0, (1,))), version=0)  # the leader shrank the ISR
    planned = TopicPartitionStateZNode.encode(state(2, 1, (2,)))
    writes = [ZkWrite("set", path, planned, 0) for path in paths]
    assert len(zk_client.multi_chunks(writes, zk_client.MAX_MULTI_BYTES)) == (1 if multi_bytes > 600 else 4)
    # Without skipping: nothing applied from the first conflicting multi on.
    result = gw.commit_guarded(epoch_version, writes[:3])
    assert not result.applied and server.node(paths[0])[1].version == 0  # type: ignore[index]

    with pytest.raises(zk_client.PartialCommitError) as caught:
        gw.commit_guarded(epoch_version, writes, skip_conflicts=True)
    e = caught.value
    assert {w.path for w in e.applied} == set(paths) - {paths[1], paths[7]}
    assert set(e.current) == {paths[1], paths[7]} and all(v is not None and v[1] == 1 for v in e.current.values())
    for path in paths:
        data, stat = server.node(path)  # type: ignore[misc]
        assert (data == planned) == (path not in (paths[1], paths[7])), path
        assert stat.version == 1


def test_commit_skipping_conflicts_with_nothing_left_applies_nothing() -> None:
    server = SimZooKeeper()
    gw, _client = gateway(server)
    epoch_version = _epoch_version(gw)
    path = _partition(gw)
    gw.zk.set(path, TopicPartitionStateZNode.encode(state(1, 0, (1,))), version=0)
    result = gw.commit_guarded(epoch_version, [ZkWrite("set", path, b"{}", 0)], skip_conflicts=True)
    assert not result.applied and result.current[path] is not None and result.current[path][1] == 1


def test_commit_skipping_conflicts_still_stops_at_a_newer_controller() -> None:
    server = SimZooKeeper()
    gw, _client = gateway(server)
    epoch_version = _epoch_version(gw)
    paths = _partitions(gw, 3)
    gw.zk.set(paths[0], TopicPartitionStateZNode.encode(state(1, 0, (1,))), version=0)
    gw.delete_controller_if_owner()
    newer, _ = gateway(server, name="newer controller")
    assert newer.register_controller_and_increment_epoch(2, 0) is not None
    with pytest.raises(ControllerMovedError):
        gw.commit_guarded(epoch_version, [ZkWrite("set", p, b"{}", 0) for p in paths], skip_conflicts=True)
    assert all(server.node(p)[1].version == (1 if p == paths[0] else 0) for p in paths)  # type: ignore[index]


def test_session_expiry_is_not_retried_in_a_new_session() -> None:
    """Item 5: kazoo's default retry carries a call over into a new session; a deposed controller
    must see the expiry instead."""
    server = SimZooKeeper()
    gw, client = gateway(server)
    assert client.session_id is not None
    server.expire_session(client.session_id)
    with pytest.raises(SessionExpiredError):
        gw.register_controller_and_increment_epoch(1, 0)


# ---------------------------------------------------------------- leader ISR writes (item 2)


def test_isr_write_lost_reply_is_recognised() -> None:
    """Item 2 (KAFKA-2729): our conditional write applied, its reply lost, the retry got
    BadVersion; the old code concluded it was deposed and kept the old ISR forever."""
    server = SimZooKeeper()
    gw, _client = gateway(server)
    _partition(gw)
    gw.zk.fault_policy = fault_once("after", "set")
    assert gw.update_partition_state("t", 0, state(1, 0, (1,)), 0) == 1


def test_isr_write_that_lost_to_the_controller() -> None:
    server = SimZooKeeper()
    gw, _client = gateway(server)
    path = _partition(gw)
    gw.zk.set(path, TopicPartitionStateZNode.encode(state(2, 1, (2,))), version=0)
    assert gw.update_partition_state("t", 0, state(1, 0, (1,)), 0) is None


# ---------------------------------------------------------------- admin requests


def test_reassignment_request_lost_reply() -> None:
    server = SimZooKeeper()
    gw, _client = gateway(server, fault_once("after", "create"))
    assert gw.create_partition_reassignment({TopicPartitionId("t", 0): [2, 3]})
    other, _ = gateway(server, name="other")
    assert not other.create_partition_reassignment({TopicPartitionId("t", 0): [1, 3]})


# ---------------------------------------------------------------- consumer groups (/consumers)


def test_committed_offsets_round_trip_lost_reply_and_garbage() -> None:
    server = SimZooKeeper()
    gw, _client = gateway(server, fault_once("after", "create"))
    assert gw.get_committed_offset("g", "t", 0) is None
    gw.commit_offset("g", "t", 0, 42)  # the create's reply is lost; the retry meets it, then sets
    assert gw.get_committed_offset("g", "t", 0) == 42
    gw.commit_offset("g", "t", 0, 43)
    assert gw.get_committed_offset("g", "t", 0) == 43
    gw.zk.set("/consumers/g/offsets/t/0", b"not a number")
    assert gw.get_committed_offset("g", "t", 0) is None
    assert gw.list_groups() == ["g"]
    gw.commit_offset("g", "t", 1, 7)
    assert gw.get_group_offsets("g") == {("t", 1): 7}  # the unreadable offset is skipped


# ---------------------------------------------------------------- commits too large for one multi


def test_a_commit_larger_than_one_multi_goes_in_guarded_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """ZooKeeper drops the connection of a request over jute.maxbuffer: a controller event writing
    thousands of partition states looped forever (resign, re-elect, the same multi). Now it goes as
    several multis, each guarded by the epoch check."""
    import zk.client as zk_client
    from zk.client import PartialCommitError, ZkWrite, multi_chunks

    monkeypatch.setattr(zk_client, "MAX_MULTI_BYTES", 400)
    server = SimZooKeeper()
    gw, client = gateway(server)
    client.create("/epoch", b"1")
    writes = [ZkWrite("create", f"/big/{i:03d}", b"x" * 50) for i in range(20)]
    assert len(multi_chunks(writes, 400)) > 3
    client.create("/big", b"")
    assert gw.commit_guarded(0, writes, guard="/epoch").applied
    assert sorted(client.get_children("/big")) == [f"{i:03d}" for i in range(20)]
    # A conflict in the first multi: nothing applied, the caller refreshes and plans again.
    first_conflict = [ZkWrite("create", "/big/000", b"y"), *[ZkWrite("create", f"/big/n{i}", b"y" * 50)
                                                            for i in range(10)]]
    result = gw.commit_guarded(0, first_conflict, guard="/epoch")
    assert not result.applied and not client.exists("/big/n0")
    # A conflict in a later one: the first multis stay applied, and the caller is told not to run on.
    later_conflict = [*[ZkWrite("create", f"/big/m{i}", b"y" * 50) for i in range(10)],
                      ZkWrite("create", "/big/000", b"y")]
    with pytest.raises(PartialCommitError):
        gw.commit_guarded(0, later_conflict, guard="/epoch")
    assert client.exists("/big/m0")
    # The epoch moved: no chunk is applied.
    client.set("/epoch", b"2")
    with pytest.raises(errors.NotCoordinatorError):
        gw.commit_guarded(0, [ZkWrite("create", "/big/z", b"")], guard="/epoch")
