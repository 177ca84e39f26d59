"""offsets.retention.minutes for groups nobody asks about (issue 34): after a coordinator restart a
group loads on its first request, so an Empty group nobody touches again kept its offsets forever
(Kafka loads every group of the offsets partitions it leads). The expiry pass now loads the stored
groups this broker coordinates, a bounded number per pass, through the claim a request makes - so a
broker whose live-broker view is wrong (at start-up) cannot steal a group: ZooKeeper's registered
brokers and the group's fence decide. The real GroupCoordinator over a simulated ZooKeeper."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "simulation"))
from sim_zk import SimKazooClient, SimZooKeeper

from broker.coordinator.group import group_coordinator
from broker.coordinator.group.group_coordinator import GroupCoordinator
from broker.coordinator.group.group_state import NONE, CoordinatorLimits, OffsetAndMetadata, coordinator_for
from zk.client import KafkaZkClient

RETENTION_MS = 60_000
T0 = ("t", 0)
# A group that the rule gives to broker 1 among [1, 2] (so broker 2 must not take it).
G = next(f"g{i}" for i in range(1000) if coordinator_for(f"g{i}", [1, 2]) == 1)


async def direct(fn: Any, *args: Any) -> Any:
    return fn(*args)


class Broker:
    """One broker's coordinator over its own ZooKeeper session, with a clock and a live-broker view."""

    def __init__(self, server: SimZooKeeper, broker_id: int, view: list[int], now: list[int]) -> None:
        self.client: SimKazooClient = server.client(name=f"b{broker_id}")
        self.client.start()
        self.zk = KafkaZkClient.over(self.client)
        self.zk.ensure_persistent_paths()
        self.client.create(f"/brokers/ids/{broker_id}", b"{}", ephemeral=True)
        self.view = view
        self.c = GroupCoordinator(broker_id, self.zk, lambda: self.view,
                                  CoordinatorLimits(offsets_retention_ms=RETENTION_MS),
                                  clock=lambda: now[0], offload=direct)

    def stop(self) -> None:
        self.client.stop()


async def commit_and_leave(c: GroupCoordinator, group: str, offset: int) -> None:
    """A consumer joins alone, commits, and leaves: the group is Empty with one committed offset."""
    j = await c.join_group(group, "", "m", "h", "consumer", [("range", b"")], 10_000, 10_000)
    assert j.error_code == NONE, j
    s = await c.sync_group(group, j.generation_id, j.member_id, {j.member_id: b"A"})
    assert s.error_code == NONE, s
    assert await c.commit_offsets(group, j.generation_id, j.member_id, {T0: OffsetAndMetadata(offset)}) == {T0: NONE}
    assert await c.leave_group(group, j.member_id) == NONE


def test_offsets_of_a_group_nobody_asks_about_after_a_restart_expire() -> None:
    async def go() -> None:
        server, now = SimZooKeeper(), [1_000]
        first = Broker(server, 1, [1], now)
        await commit_and_leave(first.c, G, 7)
        first.stop()  # the coordinator broker restarts; nobody asks about the group again
        now[0] += RETENTION_MS + 1
        restarted = Broker(server, 1, [1], now)
        assert not restarted.c.core.is_loaded(G)
        assert await restarted.c.expire_offsets() == 1
        assert restarted.zk.get_group_offsets(G) == {}
        assert restarted.zk.get_group_coordinator(G) is None  # left with none: deleted, as Kafka
        assert not restarted.c.core.is_loaded(G)

    asyncio.run(go())


def test_a_group_still_within_its_retention_is_loaded_and_kept() -> None:
    async def go() -> None:
        server, now = SimZooKeeper(), [1_000]
        first = Broker(server, 1, [1], now)
        await commit_and_leave(first.c, G, 7)
        first.stop()
        now[0] += RETENTION_MS // 2
        restarted = Broker(server, 1, [1], now)
        assert await restarted.c.expire_offsets() == 0
        assert restarted.c.core.is_loaded(G) and restarted.zk.get_group_offsets(G) == {T0: 7}
        now[0] += RETENTION_MS // 2 + 1  # the next pass, once it is old enough
        assert await restarted.c.expire_offsets() == 1
        assert restarted.zk.get_group_offsets(G) == {}

    asyncio.run(go())


def test_a_wrong_view_of_live_brokers_at_start_up_cannot_steal_a_group() -> None:
    """Broker 2 starts believing it is alone ([2]: every group is its own by its view); ZooKeeper has
    brokers 1 and 2, and the rule gives G to 1. Its expiry pass neither claims G nor removes its
    offsets; the fence is untouched. Broker 1, the coordinator, expires them."""
    async def go() -> None:
        server, now = SimZooKeeper(), [1_000]
        one = Broker(server, 1, [1, 2], now)
        await commit_and_leave(one.c, G, 7)
        fence = one.zk.get_group_coordinator(G)
        now[0] += RETENTION_MS + 1
        two = Broker(server, 2, [2], now)
        assert await two.c.expire_offsets() == 0
        assert not two.c.core.is_loaded(G) and G not in two.c.leases
        assert two.zk.get_group_coordinator(G) == fence and two.zk.get_group_offsets(G) == {T0: 7}
        assert await one.c.expire_offsets() == 1
        assert one.zk.get_group_offsets(G) == {}

    asyncio.run(go())


def test_each_pass_loads_a_bounded_number_of_groups(monkeypatch: Any) -> None:
    """Stored groups are loaded LOADS_PER_PASS at a time; groups without offsets are not claimed."""
    monkeypatch.setattr(group_coordinator, "LOADS_PER_PASS", 2)

    async def go() -> None:
        server, now = SimZooKeeper(), [1_000]
        first = Broker(server, 1, [1], now)
        groups = [f"grp{i}" for i in range(5)]
        for g in groups:
            await commit_and_leave(first.c, g, 3)
        first.zk.claim_group("no-offsets", 1, now[0])  # a fence, no offsets: nothing to expire
        first.stop()
        now[0] += RETENTION_MS + 1
        restarted = Broker(server, 1, [1], now)
        removed = [await restarted.c.expire_offsets() for _ in range(3)]
        assert removed == [2, 2, 1]
        assert all(restarted.zk.get_group_offsets(g) == {} for g in groups)
        state = restarted.zk.get_group_coordinator("no-offsets")
        assert state is not None and state[0].coordinator_epoch == 1  # never claimed again

    asyncio.run(go())
