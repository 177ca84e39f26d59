"""Kafka's ConsumerProtocol bytes, the leader's range assignment, and the coordinator shell with a
fake ZooKeeper gateway and a fake clock (no sockets)."""

from __future__ import annotations

import asyncio
import struct
import sys
from pathlib import Path
from typing import Any

import pytest

from broker.coordinator.group.group_coordinator import GroupCoordinator
from broker.coordinator.group.group_state import NONE, CoordinatorLimits, OffsetAndMetadata, coordinator_for
from client.consumer import range_assignment
from client.group_client import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
)
from proto import errors
from zk.client import KafkaZkClient

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "simulation"))
from sim_zk import SimZooKeeper


def test_subscription_bytes_are_kafkas() -> None:
    data = encode_subscription(["b", "a"])
    # version 0, 2 topics, "a", "b", null user data
    assert data == struct.pack(">hih1sh1si", 0, 2, 1, b"a", 1, b"b", -1)
    assert decode_subscription(data) == ["a", "b"]


def test_assignment_round_trip_and_lies_refused() -> None:
    data = encode_assignment({"t": [2, 0], "u": [1]})
    assert decode_assignment(data) == {"t": [0, 2], "u": [1]}
    assert decode_assignment(b"") == {}
    with pytest.raises(errors.InvalidRequestError):
        decode_assignment(struct.pack(">hi", 0, 1_000_000))   # a count the bytes cannot hold
    with pytest.raises(errors.InvalidRequestError):
        decode_subscription(b"\x00")


def test_a_garbage_subscription_subscribes_to_nothing() -> None:
    from client.group_client import _subscription_or_none
    assert _subscription_or_none(b"\x00\x00\x7f\xff\xff\xff") == []
    assert _subscription_or_none(encode_subscription(["t"])) == ["t"]


def test_leader_range_assignment_per_topic() -> None:
    subs = {"m1": ["t"], "m0": ["t", "u"]}
    plan = range_assign(subs, lambda t: list(range(7)) if t == "t" else [0], range_assignment)
    assert plan == {"m0": {"t": [0, 1, 2, 3], "u": [0]}, "m1": {"t": [4, 5, 6]}}


async def direct(fn: Any, *args: Any) -> Any:
    """The coordinator's offload in these tests: the simulated ZooKeeper answers at once."""
    return fn(*args)


def sim_gateway(*broker_ids: int) -> KafkaZkClient:
    """The real ZooKeeper gateway over the simulation's in-memory ZooKeeper, with ``broker_ids``
    registered (the coordinator's take-over reads the live brokers there)."""
    client = SimZooKeeper().client(name="broker")
    client.start()
    gw = KafkaZkClient.over(client)
    for b in broker_ids:
        client.create(f"/brokers/ids/{b}", b"{}", makepath=True)
    return gw


def coordinator(zk: KafkaZkClient, brokers: list[int], clock: list[int], broker_id: int = 1) -> GroupCoordinator:
    return GroupCoordinator(broker_id, zk, lambda: brokers, CoordinatorLimits(min_session_timeout_ms=1000),
                            clock=lambda: clock[0], offload=direct)


def test_shell_parks_joins_and_commits_through_zookeeper() -> None:
    async def go() -> None:
        zk, clock = sim_gateway(1), [0]
        zk.commit_offset("g", "t", 0, 5)
        c = coordinator(zk, [1], clock)
        a = await c.join_group("g", "", "ca", "h", "consumer", [("range", b"x")], 10_000, 10_000)
        assert a.error_code == NONE and a.leader_id == a.member_id
        # A second member parks until the first rejoins.
        b_task = asyncio.create_task(c.join_group("g", "", "cb", "h", "consumer", [("range", b"y")], 10_000,
                                                  10_000))
        await asyncio.sleep(0)
        assert not b_task.done()
        a2 = await c.join_group("g", a.member_id, "ca", "h", "consumer", [("range", b"x")], 10_000, 10_000)
        b = await asyncio.wait_for(b_task, 1)
        assert a2.generation_id == b.generation_id == a.generation_id + 1
        sync_b = asyncio.create_task(c.sync_group("g", b.generation_id, b.member_id, {}))
        await asyncio.sleep(0)
        sa = await c.sync_group("g", a2.generation_id, a.member_id, {a.member_id: b"A", b.member_id: b"B"})
        assert sa.assignment == b"A" and (await asyncio.wait_for(sync_b, 1)).assignment == b"B"
        # Offsets: loaded from ZooKeeper on first use, written there, fenced by generation.
        assert (await c.fetch_offsets("g", [("t", 0)])) == (NONE, {("t", 0): OffsetAndMetadata(5)})
        nine = {("t", 0): OffsetAndMetadata(9, "m")}
        assert await c.commit_offsets("g", a2.generation_id, a.member_id, nine) == {("t", 0): NONE}
        assert zk.get_group_offsets_and_metadata("g") == {("t", 0): (9, "m")}
        refused = await c.commit_offsets("g", a.generation_id, a.member_id, {("t", 0): OffsetAndMetadata(1)})
        assert refused == {("t", 0): errors.IllegalGenerationError.code} and zk.get_committed_offset("g", "t", 0) == 9

    asyncio.run(go())


def test_shell_session_timeout_and_not_coordinator() -> None:
    async def go() -> None:
        zk, clock = sim_gateway(1), [0]
        brokers = [1]
        c = coordinator(zk, brokers, clock)
        c.start()
        a = await c.join_group("g", "", "ca", "h", "consumer", [("range", b"x")], 1000, 1000)
        await c.sync_group("g", a.generation_id, a.member_id, {a.member_id: b""})
        clock[0] = 5000                              # the member stopped heartbeating
        for _ in range(100):                          # bounded: the tick task expires the member
            if not (await c.describe_group("g"))[1].members:
                break
            await asyncio.sleep(0.01)
        assert await c.heartbeat("g", a.generation_id, a.member_id) == errors.UnknownMemberIdError.code
        # Another broker joins and takes the group (by the hash rule): requests are redirected.
        moved = next(f"g{i}" for i in range(100) if coordinator_for(f"g{i}", [1, 2]) == 2)
        await c.join_group(moved, "", "ca", "h", "consumer", [("range", b"x")], 1000, 1000)
        parked = asyncio.create_task(c.join_group(moved, "", "cb", "h", "consumer", [("range", b"x")], 1000,
                                                  60_000))
        await asyncio.sleep(0)
        brokers[:] = [1, 2]
        assert c.find_coordinator(moved) == (NONE, 2) and not c.is_coordinator(moved)
        assert await c.heartbeat(moved, 1, "m") == errors.NotCoordinatorError.code
        # The parked join is answered NOT_COORDINATOR when the group is unloaded (bounded wait).
        assert (await asyncio.wait_for(parked, 5)).error_code == errors.NotCoordinatorError.code
        assert (await c.join_group("", "", "x", "h", "consumer", [("range", b"")], 1000, 1000)).error_code == \
            errors.InvalidGroupIdError.code
        await c.shutdown()

    asyncio.run(go())


class DenyGate:
    """Allows everything but the listed (operation, resource type, name)."""

    def __init__(self, *denied: tuple[str, str, str]) -> None:
        self.denied = set(denied)

    def allowed(self, ctx: Any, operation: str, resource_type: str, name: str) -> bool:
        return (operation, resource_type, name) not in self.denied

    def cluster_allowed(self, ctx: Any, operation: str) -> bool:
        return True


def test_group_apis_check_group_and_topic_acls() -> None:
    from broker.coordinator.group.group_apis import GroupApis
    from broker.security.principal import LOCAL_CLIENT
    from proto import minikafka_pb2 as pb

    async def go() -> None:
        c = coordinator(sim_gateway(1), [1], [0])
        gate: Any = DenyGate(("Read", "Group", "secret"), ("Read", "Topic", "hidden"))
        apis = GroupApis(c, gate, lambda b, listener: None, 1000, lambda t, p: t != "nosuch" and p < 4)
        r = await apis.join_group(pb.JoinGroupRequest(group_id="secret", session_timeout_ms=10_000,
                                                      protocol_type="consumer",
                                                      protocols=[pb.JoinGroupProtocol(name="range")]), LOCAL_CLIENT)
        assert r.error_code == errors.GroupAuthorizationFailedError.code
        commit = await apis.offset_commit(pb.OffsetCommitRequest(group_id="open", generation_id=-1, topics=[
            pb.OffsetCommitTopic(name="hidden", partitions=[pb.OffsetCommitPartition(partition=0, offset=1)]),
            pb.OffsetCommitTopic(name="seen", partitions=[pb.OffsetCommitPartition(partition=0, offset=1)])]),
            LOCAL_CLIENT)
        codes = {t.name: t.partitions[0].error_code for t in commit.topics}
        assert codes == {"hidden": errors.TopicAuthorizationFailedError.code, "seen": NONE}

    asyncio.run(go())


def test_a_join_with_a_group_instance_id_kafka_would_refuse_is_refused() -> None:
    """SPEC S13.3: group.instance.id keys coordinator state and names member ids - bounded as Kafka's
    JoinGroupRequest.validateGroupInstanceId (1-249 of [a-zA-Z0-9._-]); a valid one joins."""
    from broker.coordinator.group.group_apis import GroupApis
    from broker.security.principal import LOCAL_CLIENT
    from proto import minikafka_pb2 as pb

    async def go() -> None:
        c = coordinator(sim_gateway(1), [1], [0])
        apis = GroupApis(c, DenyGate(), lambda b, listener: None, 1000, lambda t, p: True)

        def join(instance: str) -> Any:
            return apis.join_group(pb.JoinGroupRequest(group_id="g", session_timeout_ms=10_000,
                                                       protocol_type="consumer", group_instance_id=instance,
                                                       protocols=[pb.JoinGroupProtocol(name="range")]), LOCAL_CLIENT)

        for bad in ("x" * 250, "a/b", "..", "caf\u00e9"):
            assert (await join(bad)).error_code == errors.InvalidRequestError.code, bad
        ok = await join("consumer-1.a_b")
        assert ok.error_code == NONE and ok.member_id.startswith("consumer-1.a_b-")

    asyncio.run(go())


class FakeApi:
    def __init__(self, on_heartbeat: Any) -> None:
        self.on_heartbeat = on_heartbeat
        self.heartbeats = 0

    def FindCoordinator(self, req: Any, timeout: float) -> Any:
        from proto import minikafka_pb2 as pb
        return pb.FindCoordinatorResponse(node_id=1, host="h", port=1)

    def LeaveGroup(self, req: Any, timeout: float) -> Any:
        from proto import minikafka_pb2 as pb
        return pb.LeaveGroupResponse()

    def Heartbeat(self, req: Any, timeout: float) -> Any:
        from proto import minikafka_pb2 as pb
        self.heartbeats += 1
        self.on_heartbeat()
        return pb.HeartbeatResponse(error_code=errors.RebalanceInProgressError.code)


class FakeView:
    def __init__(self, api: FakeApi) -> None:
        self.brokers: dict[int, str] = {}
        self.bootstrap = ["h:1"]
        self.conn = type("Conn", (), {"api": api, "address": "h:1"})()

    def connection(self, address: str) -> Any:
        return self.conn


def test_heartbeats_pause_during_a_join_and_stale_answers_are_ignored() -> None:
    import time

    from client.group_client import GroupMember

    def member(api: FakeApi) -> GroupMember:
        view: Any = FakeView(api)
        m = GroupMember(view, "g", "c", 10_000, 10_000, 10, 0.01, 1.0)
        m.member_id, m.generation_id = "m", 1
        return m

    api = FakeApi(lambda: None)
    m = member(api)
    m._joining = True                      # a join is under way: no heartbeats at all
    m._start_heartbeats()
    time.sleep(0.1)
    assert api.heartbeats == 0 and not m.rejoin_needed.is_set()
    m._joining = False                     # stable again: a rebalance elsewhere is noticed
    deadline = time.monotonic() + 5
    while not m.rejoin_needed.is_set() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert m.rejoin_needed.is_set()
    m.leave()

    # A heartbeat sent before a join began answers about the rebalance that join completes.
    holder: list[GroupMember] = []

    def join_begins() -> None:
        holder[0]._joins += 1

    api2 = FakeApi(join_begins)
    m2 = member(api2)
    holder.append(m2)
    m2._start_heartbeats()
    deadline = time.monotonic() + 5
    while api2.heartbeats < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert api2.heartbeats >= 5 and not m2.rejoin_needed.is_set()
    m2.leave()


def test_a_read_committed_offset_fetch_waits_for_pending_transactional_offsets(monkeypatch: pytest.MonkeyPatch) -> None:
    """KIP-447: a read_committed consumer's OffsetFetch asks require_stable and retries while the
    coordinator answers UNSTABLE_OFFSET_COMMIT (a committed transaction's offsets whose marker is
    not in yet); taking the stale offset made the EOS copy job of tests/chaos copy records twice."""
    from client.connection import ClusterView
    from client.consumer import Consumer
    from proto import minikafka_pb2 as pb

    def answer(code: int, offset: int) -> pb.OffsetFetchResponse:
        return pb.OffsetFetchResponse(topics=[pb.OffsetFetchTopicResponse(name="t", partitions=[
            pb.OffsetFetchPartitionResponse(partition=0, committed_offset=offset, error_code=code)])])

    script = [answer(errors.UnstableOffsetCommitError.code, -1), answer(errors.UnstableOffsetCommitError.code, -1),
              answer(0, 42)]
    sent: list[Any] = []

    def call(self: Any, method: str, request: Any, timeout_s: float | None = None) -> Any:
        sent.append(request)
        return script.pop(0)

    from client.group_client import GroupMember
    monkeypatch.setattr(GroupMember, "_call", call)
    monkeypatch.setattr(ClusterView, "refresh", lambda *a, **k: None)
    c = Consumer(bootstrap_servers="127.0.0.1:1", group_id="g", isolation_level="read_committed",
                 retry_backoff_ms=1)
    assert c.committed(("t", 0)) == 42
    assert len(sent) == 3 and all(r.require_stable for r in sent)
    # read_uncommitted asks for the offsets as they are (no require_stable, nothing retried).
    script[:] = [answer(0, 7)]
    sent.clear()
    c2 = Consumer(bootstrap_servers="127.0.0.1:1", group_id="g", retry_backoff_ms=1)
    assert c2.committed(("t", 0)) == 7
    assert [r.require_stable for r in sent] == [False]
