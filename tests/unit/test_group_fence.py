"""The group coordinator's ZooKeeper fence (SPEC S11.4, issue 27): two coordinator shells over one
simulated ZooKeeper, each with its own session; a stale one (its live-broker view behind, as after a
pause past its session) can neither write nor serve the offsets it had. Also OffsetCommit's own
checks (unknown partitions, metadata, negative offsets, bounded partitions per group)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "simulation"))
from sim_zk import SimKazooClient, SimZooKeeper, fault_once

from broker.coordinator.group.group_apis import GroupApis
from broker.coordinator.group.group_coordinator import GroupCoordinator
from broker.coordinator.group.group_state import (
    NONE,
    CoordinatorLimits,
    GroupStateMachine,
    OffsetAndMetadata,
    coordinator_for,
)
from broker.security.principal import LOCAL_CLIENT
from proto import errors
from proto import minikafka_pb2 as pb
from zk.client import KafkaZkClient
from zk.data import ConsumersZNode, GroupCoordinatorState

RETRY = {"max_tries": 3, "delay": 0.1, "max_delay": 1.0, "ignore_expire": False}
NOT_COORDINATOR = errors.NotCoordinatorError.code
# A group that the rule gives to broker 1 among [1] and to broker 2 among [1, 2].
G = next(f"g{i}" for i in range(1000) if coordinator_for(f"g{i}", [1, 2]) == 2)
T0 = ("t", 0)


async def direct(fn: Any, *args: Any) -> Any:
    return fn(*args)


class Broker:
    def __init__(self, server: SimZooKeeper, broker_id: int, view: list[int], policy: Any = None) -> None:
        self.client: SimKazooClient = server.client(name=f"b{broker_id}", command_retry=RETRY, fault_policy=policy)
        self.client.start()
        self.zk = KafkaZkClient.over(self.client)
        self.zk.ensure_persistent_paths()
        self.client.create(f"/brokers/ids/{broker_id}", b"{}", ephemeral=True)
        self.view = view
        self.c = GroupCoordinator(broker_id, self.zk, lambda: self.view, clock=lambda: 0, offload=direct)


async def member_of(c: GroupCoordinator, group: str) -> tuple[str, int]:
    """Join alone and sync: (member id, generation)."""
    j = await c.join_group(group, "", "m", "h", "consumer", [("range", b"")], 10_000, 10_000)
    assert j.error_code == NONE, j
    s = await c.sync_group(group, j.generation_id, j.member_id, {j.member_id: b"A"})
    assert s.error_code == NONE, s
    return j.member_id, j.generation_id


def test_a_stale_coordinator_can_neither_commit_nor_serve_old_offsets() -> None:
    """Issue 27's bug 2: A paused past its session; B took the group over and accepted newer
    commits; A resumed, still believing it coordinates."""
    async def go() -> None:
        server = SimZooKeeper()
        a = Broker(server, 1, [1])
        m, gen = await member_of(a.c, G)
        assert await a.c.commit_offsets(G, gen, m, {T0: OffsetAndMetadata(10)}) == {T0: NONE}

        b = Broker(server, 2, [1, 2])                      # B joins; A's view is left stale
        mb, gen_b = await member_of(b.c, G)
        assert gen_b > gen                                  # generations continue across the move
        assert (await b.c.fetch_offsets(G, [T0]))[1] == {T0: OffsetAndMetadata(10)}
        assert await b.c.commit_offsets(G, gen_b, mb, {T0: OffsetAndMetadata(20)}) == {T0: NONE}

        # A, resumed: its commit fails and writes nothing; it serves no offsets; it unloads the group.
        assert await a.c.commit_offsets(G, gen, m, {T0: OffsetAndMetadata(15)}) == {T0: NOT_COORDINATOR}
        assert a.zk.get_committed_offset(G, "t", 0) == 20
        assert not a.c.core.is_loaded(G)
        # Reloaded only through a claim, which ZooKeeper's live brokers refuse to A.
        assert (await a.c.fetch_offsets(G, [T0]))[0] == NOT_COORDINATOR
        state = a.zk.get_group_coordinator(G)
        assert state is not None and state[0].broker_id == 2 and state[0].coordinator_epoch == 2

    asyncio.run(go())


def test_a_stale_coordinator_fetch_is_fenced_even_before_it_writes() -> None:
    async def go() -> None:
        server = SimZooKeeper()
        a = Broker(server, 1, [1])
        m, gen = await member_of(a.c, G)
        assert await a.c.commit_offsets(G, gen, m, {T0: OffsetAndMetadata(10)}) == {T0: NONE}
        b = Broker(server, 2, [1, 2])
        mb, gen_b = await member_of(b.c, G)
        assert await b.c.commit_offsets(G, gen_b, mb, {T0: OffsetAndMetadata(20)}) == {T0: NONE}
        code, found = await a.c.fetch_offsets(G, [T0])
        assert (code, found) == (NOT_COORDINATOR, {})        # never the old 10

    asyncio.run(go())


def test_a_stale_coordinator_hands_out_no_assignment() -> None:
    """Its join may complete in memory, but the generation cannot be recorded under its lease, so
    SyncGroup answers NOT_COORDINATOR: no two coordinators give out assignments at once."""
    async def go() -> None:
        server = SimZooKeeper()
        a = Broker(server, 1, [1])
        m, gen = await member_of(a.c, G)
        b = Broker(server, 2, [1, 2])
        await member_of(b.c, G)
        # At A, the member rejoins (a new generation in A's memory), and its leader syncs.
        j = await a.c.join_group(G, m, "m", "h", "consumer", [("range", b"changed")], 10_000, 10_000)
        assert j.error_code == NONE and j.generation_id == gen + 1
        s = await a.c.sync_group(G, j.generation_id, m, {m: b"A"})
        assert s.error_code == NOT_COORDINATOR and not a.c.core.is_loaded(G)
        state = b.zk.get_group_coordinator(G)
        assert state is not None and state[0].broker_id == 2

    asyncio.run(go())


def test_session_loss_unloads_every_group_and_parked_joins_get_not_coordinator() -> None:
    async def go() -> None:
        server = SimZooKeeper()
        a = Broker(server, 1, [1])
        first = await a.c.join_group(G, "", "m1", "h", "consumer", [("range", b"")], 10_000, 10_000)
        parked = asyncio.create_task(a.c.join_group(G, "", "m2", "h", "consumer", [("range", b"")], 10_000, 60_000))
        await asyncio.sleep(0)
        assert first.error_code == NONE and not parked.done()
        a.c.on_session_lost()
        assert (await asyncio.wait_for(parked, 1)).error_code == NOT_COORDINATOR
        assert not a.c.core.groups and not a.c.leases

    asyncio.run(go())


def test_claim_and_generation_writes_survive_their_own_lost_replies() -> None:
    server = SimZooKeeper()
    lossy = Broker(server, 1, [1], policy=fault_once("after", "create", ConsumersZNode.coordinator("g")))
    lease = lossy.zk.claim_group("g", 1, 5)
    assert (lease.coordinator_epoch, lease.zk_version, lease.generation_id) == (1, 0, 0)
    other = Broker(server, 2, [1, 2], policy=fault_once("after", "set", ConsumersZNode.coordinator("g")))
    lease2 = other.zk.claim_group("g", 2, 6)
    assert (lease2.coordinator_epoch, lease2.zk_version) == (2, 1)
    lease3 = other.zk.set_group_generation(lease2, 7, 7)
    assert lease3.zk_version == 2 and lease3.generation_id == 7
    state = other.zk.get_group_coordinator("g")
    assert state == (GroupCoordinatorState(2, 2, 7, 7), 2)
    assert other.zk.group_lease_valid(lease3) and not lossy.zk.group_lease_valid(lease)
    try:
        lossy.zk.set_group_generation(lease, 9, 9)
    except errors.NotCoordinatorError:
        pass
    else:
        raise AssertionError("a fenced lease recorded a generation")


def test_fenced_multi_commit_creates_and_sets_and_guesses_wrong_safely() -> None:
    server = SimZooKeeper()
    b = Broker(server, 1, [1])
    lease = b.zk.claim_group("g", 1, 0)
    b.zk.commit_group_offsets(lease, {("t", 0): (5, ""), ("u", 1): (6, "meta")}, known=set())
    # Wrong guesses both ways: ("t", 0) exists but is said unknown; ("t", 1) is said known.
    b.zk.commit_group_offsets(lease, {("t", 0): (7, ""), ("t", 1): (8, "")}, known={("t", 1)})
    assert b.zk.get_group_offsets_and_metadata("g") == {("t", 0): (7, ""), ("t", 1): (8, ""), ("u", 1): (6, "meta")}
    assert b.client.get("/consumers/g/offsets/t/0")[0] == b"7"      # Kafka's plain form without metadata
    newer = b.zk.claim_group("g", 1, 1)
    try:
        b.zk.commit_group_offsets(lease, {("t", 0): (1, "")}, known={("t", 0)})
    except errors.NotCoordinatorError:
        pass
    else:
        raise AssertionError("a fenced commit was written")
    assert b.zk.get_committed_offset("g", "t", 0) == 7 and b.zk.group_lease_valid(newer)


def test_offset_znode_forms() -> None:
    assert ConsumersZNode.decode_offset_and_metadata(b"42") == (42, "")
    assert ConsumersZNode.decode_offset_and_metadata(ConsumersZNode.encode_offset(3, "x\"y")) == (3, "x\"y")
    assert ConsumersZNode.decode_offset(ConsumersZNode.encode_offset(3, "m")) == 3
    for garbage in (b"", b"{", b'{"offset":"1"}', b'{"offset":1,"metadata":2}', b"\xff"):
        assert ConsumersZNode.decode_offset_and_metadata(garbage) is None


def test_commit_entry_checks_are_kafkas() -> None:
    sm = GroupStateMachine(CoordinatorLimits(max_committed_partitions=2, offset_metadata_max_bytes=4))
    sm.load("g", {("t", 0): OffsetAndMetadata(1)})
    assert sm.check_commit_entry("g", ("t", 0), 5, "abcd", 0) == NONE
    assert sm.check_commit_entry("g", ("t", 0), 5, "abcde", 0) == errors.OffsetMetadataTooLargeError.code
    assert sm.check_commit_entry("g", ("t", 0), -1, "", 0) == NONE
    assert sm.check_commit_entry("g", ("t", 0), -2, "", 0) == errors.InvalidCommitOffsetSizeError.code
    assert sm.check_commit_entry("g", ("t", 1), 0, "", 0) == NONE
    assert sm.check_commit_entry("g", ("t", 2), 0, "", 1) == errors.InvalidCommitOffsetSizeError.code


def test_offset_commit_refuses_unknown_partitions_and_keeps_metadata() -> None:
    """Issue 27's item 3: nothing stored for a partition that does not exist; metadata kept."""
    class Gate:
        def allowed(self, *_a: Any) -> bool:
            return True

        def cluster_allowed(self, *_a: Any) -> bool:
            return True

    async def go() -> None:
        server = SimZooKeeper()
        b = Broker(server, 1, [1])
        gate: Any = Gate()
        apis = GroupApis(b.c, gate, lambda _b, _l: None, 1000, lambda t, p: t == "t" and 0 <= p < 2)
        resp = await apis.offset_commit(pb.OffsetCommitRequest(group_id="g", generation_id=-1, topics=[
            pb.OffsetCommitTopic(name="t", partitions=[
                pb.OffsetCommitPartition(partition=0, offset=5, metadata="meta"),
                pb.OffsetCommitPartition(partition=2147483647, offset=1)]),
            pb.OffsetCommitTopic(name="nosuch", partitions=[pb.OffsetCommitPartition(partition=0, offset=1)]),
            pb.OffsetCommitTopic(name="t", partitions=[pb.OffsetCommitPartition(partition=1, offset=1,
                                                                                metadata="x" * 5000)])]),
            LOCAL_CLIENT)
        codes = [(t.name, p.partition, p.error_code) for t in resp.topics for p in t.partitions]
        unknown = errors.UnknownTopicOrPartitionError.code
        assert codes == [("t", 0, NONE), ("t", 2147483647, unknown), ("nosuch", 0, unknown),
                         ("t", 1, errors.OffsetMetadataTooLargeError.code)]
        assert b.zk.get_group_offsets_and_metadata("g") == {("t", 0): (5, "meta")}
        assert not b.client.exists("/consumers/g/offsets/nosuch")
        fetched = await apis.offset_fetch(pb.OffsetFetchRequest(group_id="g", topics=[
            pb.OffsetFetchTopic(name="t", partitions=[0, 1])]), LOCAL_CLIENT)
        got = [(p.partition, p.committed_offset, p.metadata) for p in fetched.topics[0].partitions]
        assert got == [(0, 5, "meta"), (1, -1, "")]

    asyncio.run(go())


def test_reading_a_group_that_never_existed_stores_nothing() -> None:
    async def go() -> None:
        server = SimZooKeeper()
        b = Broker(server, 1, [1])
        assert await b.c.fetch_offsets("ghost", None) == (NONE, {})
        code, desc = await b.c.describe_group("ghost")
        assert code == NONE and desc.state == "Dead" and not desc.members
        assert not b.client.exists("/consumers/ghost")
        # A group with offsets from an older version (no coordinator znode) is claimed and read.
        b.zk.commit_offset("old", "t", 0, 4)
        assert await b.c.fetch_offsets("old", None) == (NONE, {T0: OffsetAndMetadata(4)})
        assert b.zk.get_group_coordinator("old") is not None

    asyncio.run(go())
