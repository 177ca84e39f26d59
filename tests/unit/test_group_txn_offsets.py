"""Transactions' pending group offsets (TxnOffsetCommit, KIP-98; issue 31) beside plain commits,
DeleteGroups and offset expiry, as Kafka 2.8's GroupMetadata: the pure core first, then the real
GroupCoordinator over a simulated ZooKeeper (what DeleteGroups leaves behind in storage)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "simulation"))
from sim_zk import SimZooKeeper

from broker.coordinator.group.group_coordinator import GroupCoordinator, offsets_partition_for
from broker.coordinator.group.group_state import (
    NONE,
    PRODUCER_FENCED,
    CoordinatorLimits,
    GroupStateMachine,
    OffsetAndMetadata,
    PendingTxnOffsetCommit,
)
from zk.client import KafkaZkClient
from zk.data import PendingTxnOffsets, TxnOffsetsZNode

G = "g"
T0, T1 = ("t", 0), ("t", 1)
PID = 7


def om(offset: int, at: int) -> OffsetAndMetadata:
    return OffsetAndMetadata(offset, "", at)


def pending(sm: GroupStateMachine, offsets: dict[tuple[str, int], OffsetAndMetadata], epoch: int = 0,
            pid: int = PID) -> None:
    code, p = sm.prepare_txn_offsets(G, pid, epoch, offsets)
    assert code == NONE and p is not None
    sm.txn_offsets_written(G, pid, p)


def test_a_plain_commit_leaves_pending_offsets_alone_and_the_later_write_wins_at_commit() -> None:
    sm = GroupStateMachine()
    sm.load(G, {T0: om(1, 0), T1: om(1, 0)})
    pending(sm, {T0: om(10, 100), T1: om(10, 100)})
    # A plain OffsetCommit of T1 after the TxnOffsetCommit, and of T0 (hypothetically) before it:
    sm.offsets_committed(G, {T1: om(5, 200)})
    assert sm.pending_txn_partitions(G) == {T0, T1}  # both kept (Kafka keeps both)
    assert sm.fetch_offsets(G, None) == {T0: om(1, 0), T1: om(5, 200)}  # pending is not visible yet
    # COMMIT: T0's pending offset is the later write and applies; T1's plain commit came later and stays
    # (Kafka's completePendingTxnOffsetCommit: only if the committed record is older than the pending one).
    assert sm.txn_offsets_to_commit(G, PID, 300) == {T0: om(10, 100)}
    sm.txn_offsets_completed(G, PID, sm.txn_offsets_to_commit(G, PID, 300))
    assert sm.fetch_offsets(G, None) == {T0: OffsetAndMetadata(10), T1: OffsetAndMetadata(5)}
    assert sm.pending_txn_partitions(G) == set()


def test_abort_drops_the_pending_offsets_and_keeps_the_committed() -> None:
    sm = GroupStateMachine()
    sm.load(G, {T0: om(1, 0)})
    pending(sm, {T0: om(10, 100)})
    sm.offsets_committed(G, {T0: om(3, 150)})
    sm.txn_offsets_completed(G, PID, {})
    assert sm.fetch_offsets(G, None) == {T0: OffsetAndMetadata(3)}
    assert sm.pending_txn_offsets(G, PID) is None


def test_later_txn_offset_commits_add_up_and_an_older_epoch_is_fenced() -> None:
    sm = GroupStateMachine()
    sm.load(G, {})
    pending(sm, {T0: om(10, 100)}, epoch=3)
    pending(sm, {T1: om(20, 110)}, epoch=3)
    p = sm.pending_txn_offsets(G, PID)
    assert p is not None and set(p.offsets) == {T0, T1}
    assert sm.prepare_txn_offsets(G, PID, 2, {T0: om(11, 120)}) == (PRODUCER_FENCED, None)
    # An unknown commit time (stored before the times were) counts as written at the marker.
    sm.load("h", {T0: om(1, 50)}, 0, {PID: PendingTxnOffsetCommit(0, {T0: OffsetAndMetadata(9)})})
    assert sm.txn_offsets_to_commit("h", PID, 400) == {T0: om(9, 400)}


def test_expiry_removes_expired_offsets_but_a_group_with_pending_txn_offsets_is_not_emptied() -> None:
    sm = GroupStateMachine()
    sm.load(G, {T0: om(1, 0)})
    assert sm.expired_offsets(10_000, 1_000) == {G: [T0]}
    assert sm.expiry_empties_group(G, [T0])  # nothing else: the group goes as DeleteGroups deletes it
    pending(sm, {T1: om(5, 9_000)})
    # Kafka 2.8's removeExpiredOffsets looks only at committed offsets (its pendingOffsetCommits are
    # the non-transactional appends in flight); the group stays out of Dead while hasOffsets, which
    # counts pendingTransactionalOffsetCommits.
    assert sm.expired_offsets(10_000, 1_000) == {G: [T0]}
    assert not sm.expiry_empties_group(G, [T0])


def test_pending_offsets_znode_keeps_commit_times_and_reads_the_older_format() -> None:
    p = PendingTxnOffsets(2, (("a", 0, 10, ""), ("b", 1, 7, "m")), (("a", 0, 123),))
    assert PendingTxnOffsets.decode(p.encode()) == p
    old = b'{"version": 1, "producer_epoch": 2, "offsets": [{"topic": "a", "partition": 0, "offset": 10, "metadata": ""}]}'
    assert PendingTxnOffsets.decode(old) == PendingTxnOffsets(2, (("a", 0, 10, ""),))


# ------------------------------------------------------------ the shell over a simulated ZooKeeper


async def direct(fn: Any, *args: Any) -> Any:
    return fn(*args)


def coordinator(now: list[int]) -> tuple[GroupCoordinator, KafkaZkClient]:
    client = SimZooKeeper().client(name="b1")
    client.start()
    zk = KafkaZkClient.over(client)
    zk.ensure_persistent_paths()
    client.create("/brokers/ids/1", b"{}", ephemeral=True)
    c = GroupCoordinator(1, zk, lambda: [1], CoordinatorLimits(offsets_retention_ms=1_000),
                         clock=lambda: now[0], offload=direct)
    return c, zk


def test_delete_groups_removes_the_pending_txn_offsets_so_a_later_commit_marker_finds_nothing() -> None:
    async def run() -> None:
        now = [1_000]
        c, zk = coordinator(now)
        assert await c.commit_offsets(G, -1, "", {T0: OffsetAndMetadata(1)}) == {T0: NONE}
        assert await c.txn_commit_offsets(G, PID, 0, {T1: OffsetAndMetadata(10)}) == {T1: NONE}
        part = offsets_partition_for(G)
        assert zk.txn_offsets_index(part) == [(PID, G)]
        assert await c.delete_group(G) == NONE
        assert zk.get_group_txn_offsets(G) == {} and zk.txn_offsets_index(part) == []
        assert not zk.path_exists(TxnOffsetsZNode.pending_dir(G))
        # The transaction commits afterwards: the group made again under that id inherits nothing.
        assert await c.handle_txn_marker(PID, part, commit=True) == NONE
        assert await c.commit_offsets(G, -1, "", {T0: OffsetAndMetadata(2)}) == {T0: NONE}
        assert await c.fetch_offsets(G, None) == (NONE, {T0: OffsetAndMetadata(2)})

    asyncio.run(run())


def test_expiry_keeps_a_group_whose_transaction_is_open_and_its_commit_lands_later() -> None:
    async def run() -> None:
        now = [1_000]
        c, zk = coordinator(now)
        assert await c.commit_offsets(G, -1, "", {T0: OffsetAndMetadata(1)}) == {T0: NONE}
        assert await c.txn_commit_offsets(G, PID, 0, {T1: OffsetAndMetadata(10)}) == {T1: NONE}
        now[0] = 10_000
        assert await c.expire_offsets() == 1
        assert zk.get_group_txn_offsets(G) != {}  # not deleted with the group: the group is still there
        assert await c.handle_txn_marker(PID, offsets_partition_for(G), commit=True) == NONE
        assert await c.fetch_offsets(G, None) == (NONE, {T1: OffsetAndMetadata(10)})

    asyncio.run(run())


def test_offset_delete_drops_the_pending_txn_offsets_of_its_partitions() -> None:
    """Kafka's removeOffsets: OffsetDelete of T0 takes the committed offset and the one an open
    transaction holds pending; the transaction's COMMIT then brings back only T1's."""
    sm = GroupStateMachine()
    sm.load(G, {T0: om(1, 0), T1: om(1, 0)})
    pending(sm, {T0: om(10, 100), T1: om(10, 100)})
    sm.remove_offsets(G, [T0])
    assert sm.pending_txn_partitions(G) == {T1}
    assert sm.txn_offsets_to_commit(G, PID, 300) == {T1: om(10, 100)}
    sm.txn_offsets_completed(G, PID, sm.txn_offsets_to_commit(G, PID, 300))
    assert sm.fetch_offsets(G, None) == {T1: OffsetAndMetadata(10)}
    # A transaction whose every pending offset was deleted still counts until its marker (hasOffsets).
    pending(sm, {T0: om(20, 400)}, pid=PID + 1)
    sm.remove_offsets(G, [T0, T1])
    assert sm.pending_txn_partitions(G) == set() and sm.pending_txn_offsets(G, PID + 1) is not None
    assert not sm.expiry_empties_group(G, [])
    assert sm.txn_offsets_to_commit(G, PID + 1, 500) == {}


def test_offset_delete_through_the_coordinator_drops_a_pending_only_partition() -> None:
    """The shell: T1 has only a pending transactional offset (nothing stored as committed); OffsetDelete
    of T1 still removes it, so the later COMMIT marker does not make it the group's offset."""
    async def run() -> None:
        now = [1_000]
        c, _zk = coordinator(now)
        assert await c.commit_offsets(G, -1, "", {T0: OffsetAndMetadata(1)}) == {T0: NONE}
        assert await c.txn_commit_offsets(G, PID, 0, {T1: OffsetAndMetadata(10)}) == {T1: NONE}
        assert await c.delete_offsets(G, [T1]) == (NONE, {T1: NONE})
        assert await c.handle_txn_marker(PID, offsets_partition_for(G), commit=True) == NONE
        assert await c.fetch_offsets(G, None) == (NONE, {T0: OffsetAndMetadata(1)})

    asyncio.run(run())


def test_a_txn_offset_commit_of_a_fenced_epoch_after_the_abort_marker_is_refused_for_good() -> None:
    """A zombie's TxnOffsetCommit reaching the group after its successor's InitProducerId aborted the
    transaction (abort marker of epoch 1, nothing pending yet) would wait for a marker already sent:
    every read_committed OffsetFetch of the group UNSTABLE_OFFSET_COMMIT forever (the exactly-once
    chaos test's stall). Kafka refuses it through the offsets partition's producer state; here the
    marker raised the producer's fence znode, which a new coordinator reads too."""
    async def run() -> None:
        now = [1_000]
        c, zk = coordinator(now)
        part = offsets_partition_for(G)
        assert await c.handle_txn_marker(PID, part, commit=False, producer_epoch=1) == NONE
        assert zk.txn_offsets_fence(part, PID) is not None
        assert await c.txn_commit_offsets(G, PID, 0, {T1: OffsetAndMetadata(10)}) == {T1: PRODUCER_FENCED}
        assert c.pending_txn_partitions(G) == set() and zk.txn_offsets_index(part) == []
        # The group moves to a coordinator that saw no marker: ZooKeeper's fence still refuses.
        c2 = GroupCoordinator(1, zk, lambda: [1], CoordinatorLimits(), clock=lambda: now[0], offload=direct)
        assert await c2.txn_commit_offsets(G, PID, 0, {T1: OffsetAndMetadata(10)}) == {T1: PRODUCER_FENCED}
        # The successor (epoch 1) commits offsets in its own transactions as before.
        assert await c2.txn_commit_offsets(G, PID, 1, {T1: OffsetAndMetadata(11)}) == {T1: NONE}
        assert await c2.handle_txn_marker(PID, part, commit=True, producer_epoch=1) == NONE
        assert await c2.fetch_offsets(G, None) == (NONE, {T1: OffsetAndMetadata(11)})

    asyncio.run(run())


def test_a_marker_raising_the_fence_while_pending_offsets_are_written_fences_that_write() -> None:
    """The marker came between the commit's read of the fence and its multi: the multi checks the
    fence's version, fails, and the commit is refused on the second look (never written unseen)."""
    async def run() -> None:
        now = [1_000]
        c, zk = coordinator(now)
        part = offsets_partition_for(G)
        assert await c.handle_txn_marker(PID, part, commit=True, producer_epoch=0) == NONE  # fence at 0
        read = zk.txn_offsets_fence
        raced: list[int] = []

        def racing(partition: int, producer_id: int) -> tuple[int, int] | None:
            got = read(partition, producer_id)
            if not raced:
                raced.append(1)
                zk.raise_txn_offsets_fence(partition, producer_id, 1)  # the successor's abort marker
            return got

        zk.txn_offsets_fence = racing  # type: ignore[method-assign]
        assert await c.txn_commit_offsets(G, PID, 0, {T1: OffsetAndMetadata(10)}) == {T1: PRODUCER_FENCED}
        assert raced and zk.txn_offsets_index(part) == [] and zk.get_group_txn_offsets(G) == {}

    asyncio.run(run())
