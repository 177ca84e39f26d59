"""The group coordinator's shell (Kafka's ``GroupCoordinator``): futures, the clock, ZooKeeper.

Theory of operation
-------------------
All group state lives in the pure ``broker.coordinator.group.group_state.GroupStateMachine``;
this shell only (1) decides whether this broker coordinates a group, (2) loads
a group's committed offsets from ZooKeeper the first time it sees the group
(coordinator failover: the new coordinator reads what the old one wrote),
(3) parks JoinGroup/SyncGroup requests on futures until the core releases
them, (4) ticks the core on a bounded timer for session and rebalance
timeouts, and (5) writes committed offsets to
``/consumers/[group]/offsets/[topic]/[partition]`` through the ZooKeeper
gateway before the core's cache records them.

Coordinator choice: ``coordinator_for(group_id, live broker ids)`` =
``sorted(ids)[crc32(group_id) % len(ids)]``. FindCoordinator answers from this
broker's metadata cache (the controller's UpdateMetadata); a broker that is not
the coordinator answers NOT_COORDINATOR and the client asks again. When the
live brokers change, groups move; the old coordinator unloads them (parked
requests get NOT_COORDINATOR), members rejoin at the new one, which starts from
the committed offsets in ZooKeeper (members are not persisted, as Kafka
persists only to its offsets topic: a moved group rebalances).

Fencing (SPEC S11.4). Ownership is decided and fenced through ZooKeeper, not by
each broker's own view of the live set, which can be stale (a broker paused past
its session resumes believing it still coordinates). ``GroupOwnership`` below:

* **Taking a group over** reads the live brokers from ZooKeeper itself (not the
  cache) and claims the group only if the rule names this broker there: it bumps
  the coordinator epoch in /consumers/[group]/coordinator with a write
  conditional on the version it read, then loads the offsets *after* the claim
  (so it sees every commit the previous coordinator could still make). The
  znode version it wrote is its ``GroupLease``.
* **Every write is fenced** by the lease: committed offsets go in one multi-op
  that first checks the coordinator znode's version, and the generation whose
  assignment SyncGroup hands out is recorded in the znode (conditional too)
  before any member receives it. A fenced write fails whole: the group is
  unloaded and the client told NOT_COORDINATOR.
* **Reads are fenced too**: OffsetFetch answers from the cache only after a
  check-only multi confirms the lease (linearizable: it goes through
  ZooKeeper's leader) - a resumed stale coordinator cannot serve old offsets.
* **A lost session unloads every group** at once; they are claimed again, with
  a fresh load, on the next request that finds this broker their coordinator
  (or by the offsets-expiry pass, which loads the stored groups this broker
  coordinates, a bounded number per pass, through the same claim).
* Generations stay monotonic across moves: a claim keeps the recorded
  generation, and the new coordinator's next generation is one above it.

So an acknowledged commit is never read back lower: it was written under the
lease current at that moment, and any later reader either holds that lease
(its cache holds the commit) or took the group over after it (and loaded it).

The async API is Kafka-shaped and transport-free, so that the gRPC servicer
and a Kafka wire-protocol listener map onto the same calls (authorization is
the caller's: see ``GROUP_OPERATIONS``)::

    find_coordinator(group_id) -> (error_code, broker_id)
    join_group(group_id, member_id, client_id, client_host, protocol_type,
               protocols: list[tuple[str, bytes]], session_timeout_ms,
               rebalance_timeout_ms, require_known_member_id) -> JoinGroupResult
    sync_group(group_id, generation_id, member_id, assignments: dict[str, bytes]) -> SyncGroupResult
    heartbeat(group_id, generation_id, member_id) -> error_code
    leave_group(group_id, member_id) -> error_code
    commit_offsets(group_id, generation_id, member_id,
                   offsets: dict[(topic, partition), OffsetAndMetadata])
        -> dict[(topic, partition), error_code]
    fetch_offsets(group_id, partitions: list[(topic, partition)] | None)
        -> (error_code, dict[(topic, partition), OffsetAndMetadata])   # absent: none committed
    list_groups() -> (error_code, list[(group_id, protocol_type)])
    describe_group(group_id) -> (error_code, GroupDescription)

Error codes are Kafka's numbers (proto/errors.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Final

from broker.coordinator.group.group_state import (
    JOIN,
    NONE,
    Completion,
    CoordinatorLimits,
    GroupDescription,
    GroupStateMachine,
    JoinGroupResult,
    OffsetAndMetadata,
    PendingTxnOffsetCommit,
    SyncGroupResult,
    coordinator_for,
    offsets_partition_for,
)
from proto import errors
from proto.names import validate_group_id
from zk.client import KafkaZkClient, PartialCommitError
from zk.data import ConsumersZNode, GroupLease, PendingTxnOffsets

log = logging.getLogger(__name__)

NOT_COORDINATOR: Final = errors.NotCoordinatorError.code
PRODUCER_FENCED: Final = errors.ProducerFencedError.code
MAX_CACHED_TXN_FENCES: Final = 100_000
COORDINATOR_NOT_AVAILABLE: Final = errors.CoordinatorNotAvailableError.code
GROUP_ID_NOT_FOUND: Final = errors.GroupIdNotFoundError.code
INVALID_GROUP_ID: Final = errors.InvalidGroupIdError.code

# Kafka's authorizer operations per group API (resource Group; OffsetCommit/OffsetFetch also
# need Read/Describe on each topic, ListGroups Describe on the cluster or per group).
GROUP_OPERATIONS: Final = {
    "FindCoordinator": "Describe", "JoinGroup": "Read", "SyncGroup": "Read", "Heartbeat": "Read",
    "LeaveGroup": "Read", "OffsetCommit": "Read", "OffsetFetch": "Describe", "DescribeGroups": "Describe",
    "DeleteGroups": "Delete", "OffsetDelete": "Delete",
}


def now_ms() -> int:
    return int(time.time() * 1000)


Offload = Callable[..., Awaitable[Any]]

# offsets.retention.minutes for groups nobody asks about: each expiry pass looks at no more than this
# many stored group names and loads no more than this many of them (see ``_load_unloaded_groups``).
SCAN_NAMES_PER_PASS: Final = 10_000
LOADS_PER_PASS: Final = 200


@dataclass(frozen=True)
class Loaded:
    """A group taken over: the lease that fences it and what storage held at that moment."""
    lease: GroupLease
    offsets: dict[tuple[str, int], OffsetAndMetadata]
    # Transactions' pending offsets (TxnOffsetCommit), per producer id.
    pending: dict[int, PendingTxnOffsetCommit] = field(default_factory=dict)


class GroupOwnership:
    """The coordinator's ZooKeeper half, synchronous (run off the event loop by the shell, called
    directly by the simulation): claim, fenced writes, lease checks. See the module docstring."""

    def __init__(self, broker_id: int, zk: KafkaZkClient, clock: Callable[[], int] = now_ms) -> None:
        self.broker_id = broker_id
        self.zk = zk
        self.clock = clock

    def take_over(self, group_id: str) -> Loaded | None:
        """None when ZooKeeper's live brokers name another coordinator (this broker's cache is behind)."""
        if coordinator_for(group_id, self.zk.get_registered_broker_ids()) != self.broker_id:
            return None
        lease = self.zk.claim_group(group_id, self.broker_id, self.clock())
        stored = self.zk.get_group_offset_commits(group_id)
        # An offset stored without its commit time counts from now for offsets.retention.minutes.
        loaded_at = self.clock()
        return Loaded(lease, {tp: OffsetAndMetadata(o, m, ts if ts >= 0 else loaded_at)
                              for tp, (o, m, ts) in stored.items()},
                      {pid: pending_from_znode(p) for pid, p in self.zk.get_group_txn_offsets(group_id).items()})

    def group_exists(self, group_id: str) -> bool:
        """Did any coordinator ever take the group, or does it have offsets (stored by an older
        version)? A read of a group that never existed must not create a znode for it."""
        return self.zk.get_group_coordinator(group_id) is not None or self.zk.path_exists(
            ConsumersZNode.offsets(group_id))

    def commit(self, lease: GroupLease, offsets: dict[tuple[str, int], OffsetAndMetadata],
               known: set[tuple[str, int]]) -> None:
        """Raises NotCoordinatorError when fenced (nothing written)."""
        self.zk.commit_group_offsets(lease, {tp: (om.offset, om.metadata) for tp, om in offsets.items()}, known,
                                     max((om.commit_timestamp_ms for om in offsets.values()), default=-1))

    def record_generation(self, lease: GroupLease, generation_id: int) -> GroupLease:
        """Raises NotCoordinatorError when fenced."""
        return self.zk.set_group_generation(lease, generation_id, self.clock())

    def still_owner(self, lease: GroupLease) -> bool:
        return self.zk.group_lease_valid(lease)

    def delete_group(self, lease: GroupLease) -> None:
        """The group's transactions' pending offsets (and their index entries) first, each under the
        lease, then the group: a later COMMIT marker of such a transaction then finds nothing to
        apply, and a group made again under the same id does not inherit them (Kafka's deleteGroups
        drops them with the group). Raises NotCoordinatorError when fenced."""
        partition = offsets_partition_for(lease.group_id)
        for producer_id in sorted(self.zk.get_group_txn_offsets(lease.group_id)):
            self.zk.complete_group_txn_offsets(lease, producer_id, partition, {}, set())
        self.zk.delete_group(lease)

    def delete_offsets(self, lease: GroupLease, partitions: list[tuple[str, int]]) -> None:
        """Raises NotCoordinatorError when fenced."""
        self.zk.delete_group_offsets(lease, partitions)

    def write_txn_offsets(self, lease: GroupLease, producer_id: int, pending: PendingTxnOffsetCommit,
                          exists: bool) -> None:
        """Raises NotCoordinatorError when fenced."""
        self.zk.write_group_txn_offsets(lease, producer_id, pending_to_znode(pending),
                                        offsets_partition_for(lease.group_id), exists)

    def complete_txn_offsets(self, lease: GroupLease, producer_id: int,
                             offsets: dict[tuple[str, int], OffsetAndMetadata], known: set[tuple[str, int]]) -> None:
        """Raises NotCoordinatorError when fenced."""
        self.zk.complete_group_txn_offsets(lease, producer_id, offsets_partition_for(lease.group_id),
                                           {tp: (om.offset, om.metadata) for tp, om in offsets.items()}, known,
                                           max((om.commit_timestamp_ms for om in offsets.values()), default=-1))

    def txn_offsets_index(self, partition: int) -> list[tuple[int, str]]:
        return self.zk.txn_offsets_index(partition)

    def raise_txn_fence(self, partition: int, producer_id: int, producer_epoch: int) -> int:
        return self.zk.raise_txn_offsets_fence(partition, producer_id, producer_epoch)


def pending_to_znode(pending: PendingTxnOffsetCommit) -> PendingTxnOffsets:
    return PendingTxnOffsets(
        pending.producer_epoch,
        tuple(sorted((t, p, om.offset, om.metadata) for (t, p), om in pending.offsets.items())),
        tuple(sorted((t, p, om.commit_timestamp_ms) for (t, p), om in pending.offsets.items()
                     if om.commit_timestamp_ms >= 0)))


def pending_from_znode(stored: PendingTxnOffsets) -> PendingTxnOffsetCommit:
    stamps = {(t, p): ts for t, p, ts in stored.commit_timestamps}
    return PendingTxnOffsetCommit(stored.producer_epoch, {
        (t, p): OffsetAndMetadata(o, m, stamps.get((t, p), -1)) for t, p, o, m in stored.offsets})


class GroupCoordinator:
    def __init__(self, broker_id: int, zk: KafkaZkClient, live_brokers: Callable[[], list[int]],
                 limits: CoordinatorLimits | None = None, clock: Callable[[], int] = now_ms,
                 offload: Offload | None = None) -> None:
        self.broker_id = broker_id
        self.zk = zk
        self.live_brokers = live_brokers
        self.core = GroupStateMachine(limits)
        self.clock = clock
        self.ownership = GroupOwnership(broker_id, zk, clock)
        # Blocking ZooKeeper calls run here: a thread in the broker, a direct call in the simulation.
        self.offload: Offload = offload or asyncio.to_thread
        self.leases: dict[str, GroupLease] = {}
        # One ZooKeeper operation under a group's lease at a time: a commit must not run on the
        # version a generation write is replacing, nor a fetch answer from a cache unloaded meanwhile.
        self._lease_locks: dict[str, asyncio.Lock] = {}
        self._waiters: dict[tuple[str, str, str], asyncio.Future[JoinGroupResult | SyncGroupResult]] = {}
        self._early: dict[tuple[str, str, str], JoinGroupResult | SyncGroupResult] = {}
        self._loading: dict[str, asyncio.Future[None]] = {}
        # (offsets partition, producer id) -> the fence epoch ZooKeeper holds at least (markers of the
        # same epoch, every transaction of a producer but its first, write nothing).
        self._fences: dict[tuple[int, int], int] = {}
        # Bumped by every session loss: a load begun in an older session must not install its lease.
        self._session_generation = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # offsets.retention.minutes: when the next expiry pass is due, and the one running.
        self._next_expiry_ms = 0
        self._expiry: asyncio.Task[int] | None = None
        # The stored group names the expiry passes still have to look at (popped from the end).
        self._scan: list[str] = []

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def shutdown(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expiry
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for group_id in list(self.core.groups):
            self._unload(group_id)

    def on_session_lost(self) -> None:
        """The ZooKeeper session is gone: every lease may have been taken over. Stop answering for
        every group until it is claimed and loaded again (SPEC S14.1, S11.4). Event loop only."""
        self._session_generation += 1
        if self.core.groups:
            log.warning("groups %s: ZooKeeper session lost; unloaded until claimed again",
                        ", ".join(sorted(self.core.groups)))
        self._dispatch(self.core.unload_all(self.clock()))
        self.leases.clear()

    def _unload(self, group_id: str) -> None:
        self.leases.pop(group_id, None)
        lock = self._lease_locks.get(group_id)
        if lock is not None and not lock.locked():
            del self._lease_locks[group_id]
        self._dispatch(self.core.unload(group_id, self.clock()))

    async def _run(self) -> None:
        """Tick the core at its next deadline (bounded: membership changes are checked too)."""
        while True:
            try:
                self._dispatch(self.core.tick(self.clock()))
                self._maybe_expire_offsets()
                for group_id in list(self.core.groups):
                    if not self.is_coordinator(group_id):
                        log.info("group %s: no longer its coordinator; unloading", group_id)
                        self._unload(group_id)
            except Exception:
                log.exception("group coordinator tick failed")
            deadline = self.core.next_deadline_ms()
            wait_s = 0.25 if deadline is None else min(0.25, max(0.0, (deadline - self.clock()) / 1000.0))
            self._wake.clear()
            # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancellation that arrives
            # in the loop turn the event is set (CPython gh-86296), and shutdown() waited forever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self._wake.wait()

    def _maybe_expire_offsets(self) -> None:
        """Start an expiry pass every offsets.retention.check.interval.ms (one at a time, off the tick)."""
        now = self.clock()
        if now < self._next_expiry_ms or (self._expiry is not None and not self._expiry.done()):
            return
        self._next_expiry_ms = now + self.core.limits.offsets_retention_check_interval_ms
        self._expiry = asyncio.get_running_loop().create_task(self.expire_offsets())

    async def expire_offsets(self) -> int:
        """offsets.retention.minutes (Kafka's cleanupGroupMetadata): remove the expired committed
        offsets of this coordinator's Empty groups (``GroupStateMachine.expired_offsets``) from
        ZooKeeper under each group's lease; a group left with none is deleted as DeleteGroups does
        (offsets and fence) and unloaded. Groups stored in ZooKeeper but not loaded here are loaded
        first, a bounded number per pass (``_load_unloaded_groups``). Returns how many offsets were
        removed."""
        await self._load_unloaded_groups()
        retention = self.core.limits.offsets_retention_ms
        removed = 0
        for group_id in self.core.expired_offsets(self.clock(), retention):
            async with self._lease_lock(group_id):
                lease = self.leases.get(group_id)
                if lease is None or not self.core.is_loaded(group_id):
                    continue
                # Decided again under the lock: a join or a commit may have come meanwhile.
                doomed = self.core.expired_offsets(self.clock(), retention, group_id).get(group_id, [])
                if not doomed:
                    continue
                # Gone whole only with nothing left, pending transactional offsets included.
                whole = self.core.expiry_empties_group(group_id, doomed)
                try:
                    if whole and self.core.check_delete_group(group_id) == NONE:
                        await self.offload(self.ownership.delete_group, lease)
                    else:
                        whole = False
                        await self.offload(self.ownership.delete_offsets, lease, doomed)
                except errors.NotCoordinatorError:
                    self._fenced(group_id, lease)
                    continue
                except Exception as e:
                    log.warning("group %s: cannot remove expired offsets: %s", group_id, e)
                    continue
                removed += len(doomed)
                if self._same_claim(group_id, lease):
                    if whole:
                        self._unload(group_id)
                    else:
                        self.core.offsets_deleted(group_id, doomed)
                log.info("group %s: %d committed offsets expired (offsets.retention.minutes)%s", group_id,
                         len(doomed), "; the group is gone" if whole else "")
        return removed

    async def _load_unloaded_groups(self) -> int:
        """Load the stored groups this broker coordinates that nobody asked about since it started
        (Kafka loads every group of the offsets partitions it leads; here a group loads on its first
        request, so after a restart an Empty group nobody asks about would keep its offsets forever).
        Walks the names under /consumers with a cursor kept between passes (listed again once it is
        through): per pass at most SCAN_NAMES_PER_PASS names looked at and LOADS_PER_PASS groups
        loaded, so a cluster with many groups gets through them over several passes without a pass
        ever holding the event loop or ZooKeeper long. Returns how many groups it loaded.

        Only groups with committed offsets (an offsets znode) are loaded, each through
        ``_ensure_loaded``: the same claim a request makes. This broker's live-broker view only picks
        the candidates; it may be wrong at start-up (the controller's metadata not here yet, or stale).
        That cannot steal a group: ``GroupOwnership.take_over`` claims a group only if the
        coordinator rule names this broker among the brokers registered in ZooKeeper, and the claim
        is a conditional write of the group's fence - the lease. A broker that should not have it
        either never claims it or is fenced by the rightful coordinator's next claim (its later
        writes, the expiry's deletion included, fail whole and unload the group), exactly as a
        request that reached a broker with a stale view."""
        if not self._scan:
            try:
                self._scan = list(reversed(await self.offload(self.zk.list_groups)))
            except Exception as e:
                log.warning("cannot list the stored groups: %s", e)
                return 0
        loaded = looked = 0
        while self._scan and looked < SCAN_NAMES_PER_PASS and loaded < LOADS_PER_PASS:
            group_id = self._scan.pop()
            looked += 1
            if group_id in self.leases or self._check(group_id) != NONE:
                continue  # loaded already, not a valid group id, or another broker's (by our view)
            try:
                if not await self.offload(self.zk.path_exists, ConsumersZNode.offsets(group_id)):
                    continue  # nothing to expire: claiming it would only write a fence for nothing
            except Exception as e:
                log.warning("group %s: cannot read it: %s", group_id, e)
                continue
            if group_id not in self.leases and await self._ensure_loaded(group_id) == NONE:
                loaded += 1
        if loaded:
            log.info("%d stored groups loaded for offsets.retention.minutes", loaded)
        return loaded

    # ------------------------------------------------------------ plumbing

    def coordinator_of(self, group_id: str) -> int:
        return coordinator_for(group_id, self.live_brokers())

    def is_coordinator(self, group_id: str) -> bool:
        return self.coordinator_of(group_id) == self.broker_id

    def _check(self, group_id: str) -> int:
        try:
            validate_group_id(group_id)
        except errors.KafkaError:
            return INVALID_GROUP_ID
        owner = self.coordinator_of(group_id)
        if owner < 0:
            return COORDINATOR_NOT_AVAILABLE
        return NONE if owner == self.broker_id else NOT_COORDINATOR

    async def _ensure_loaded(self, group_id: str) -> int:
        """NONE once the group is claimed (its lease held) and its committed offsets loaded."""
        if self.core.is_loaded(group_id) and group_id in self.leases:
            return NONE
        pending = self._loading.get(group_id)
        if pending is not None:
            await pending
        else:
            pending = self._loading[group_id] = asyncio.get_running_loop().create_future()
            session = self._session_generation
            try:
                loaded = await self.offload(self.ownership.take_over, group_id)
                if loaded is None:
                    return NOT_COORDINATOR
                if session != self._session_generation:
                    return COORDINATOR_NOT_AVAILABLE  # the session was lost while claiming
                self._unload(group_id)  # whatever was cached belongs to an older lease
                self.core.load(group_id, loaded.offsets, loaded.lease.generation_id, loaded.pending)
                self.leases[group_id] = loaded.lease
                log.info("group %s: coordinator epoch %d, generation %d, %d committed offsets loaded",
                         group_id, loaded.lease.coordinator_epoch, loaded.lease.generation_id, len(loaded.offsets))
            except Exception as e:
                log.warning("group %s: cannot take it over: %s", group_id, e)
                return COORDINATOR_NOT_AVAILABLE
            finally:
                self._loading.pop(group_id, None)
                pending.set_result(None)
        return NONE if self.core.is_loaded(group_id) and group_id in self.leases else COORDINATOR_NOT_AVAILABLE

    async def _admit(self, group_id: str) -> int:
        code = self._check(group_id)
        return code if code != NONE else await self._ensure_loaded(group_id)

    async def _admit_read(self, group_id: str) -> int | None:
        """``_admit`` for the read-only APIs; None: this broker coordinates a group that does not
        exist (answered empty, with nothing claimed or stored for it)."""
        code = self._check(group_id)
        if code != NONE:
            return code
        if not (self.core.is_loaded(group_id) and group_id in self.leases):
            try:
                if not await self.offload(self.ownership.group_exists, group_id):
                    return None
            except Exception as e:
                log.warning("group %s: cannot read it: %s", group_id, e)
                return COORDINATOR_NOT_AVAILABLE
        return await self._ensure_loaded(group_id)

    def _lease_lock(self, group_id: str) -> asyncio.Lock:
        return self._lease_locks.setdefault(group_id, asyncio.Lock())

    def _same_claim(self, group_id: str, lease: GroupLease) -> bool:
        """Does this broker still hold the claim ``lease`` came from (it may have moved on to a
        newer version of it by its own generation write)? False once unloaded or claimed anew."""
        now = self.leases.get(group_id)
        return now is not None and now.coordinator_epoch == lease.coordinator_epoch and self.core.is_loaded(group_id)

    def _fenced(self, group_id: str, lease: GroupLease) -> None:
        """Another coordinator took ``group_id`` over: drop it (if still under that claim)."""
        if self._same_claim(group_id, lease):
            log.warning("group %s: coordinator epoch %d fenced by a newer coordinator; unloading",
                        group_id, lease.coordinator_epoch)
            self._unload(group_id)

    async def _record_generation(self, group_id: str, generation: int) -> int:
        """Before a member receives the assignment of ``generation`` (read when SyncGroup gave it:
        the group may move on while this waits for the lease), it is recorded under the lease
        (NONE), or this coordinator was fenced (NOT_COORDINATOR, group unloaded)."""
        async with self._lease_lock(group_id):
            lease = self.leases.get(group_id)
            if lease is None or not self.core.is_loaded(group_id):
                return NOT_COORDINATOR
            if generation <= lease.generation_id:
                return NONE
            try:
                new_lease = await self.offload(self.ownership.record_generation, lease, generation)
            except errors.NotCoordinatorError:
                self._fenced(group_id, lease)
                return NOT_COORDINATOR
            except Exception as e:
                log.warning("group %s: cannot record generation %d: %s", group_id, generation, e)
                return COORDINATOR_NOT_AVAILABLE
            if not self._same_claim(group_id, lease):
                return NOT_COORDINATOR  # unloaded meanwhile (session lost, group moved)
            self.leases[group_id] = new_lease
            return NONE

    def _dispatch(self, completions: list[Completion]) -> None:
        for c in completions:
            key = (c.group_id, c.member_id, c.api)
            fut = self._waiters.pop(key, None)
            if fut is not None and not fut.done():
                fut.set_result(c.result)
            else:
                self._early[key] = c.result
        self._wake.set()

    async def _park(self, key: tuple[str, str, str]) -> JoinGroupResult | SyncGroupResult:
        early = self._early.pop(key, None)
        if early is not None:
            return early
        fut: asyncio.Future[JoinGroupResult | SyncGroupResult] = asyncio.get_running_loop().create_future()
        self._waiters[key] = fut
        try:
            return await fut
        finally:
            if self._waiters.get(key) is fut:
                del self._waiters[key]

    # ------------------------------------------------------------ the API

    def find_coordinator(self, group_id: str) -> tuple[int, int]:
        try:
            validate_group_id(group_id)
        except errors.KafkaError:
            return INVALID_GROUP_ID, -1
        owner = self.coordinator_of(group_id)
        return (COORDINATOR_NOT_AVAILABLE, -1) if owner < 0 else (NONE, owner)

    async def join_group(self, group_id: str, member_id: str, client_id: str, client_host: str,
                         protocol_type: str, protocols: list[tuple[str, bytes]], session_timeout_ms: int,
                         rebalance_timeout_ms: int, require_known_member_id: bool = False,
                         group_instance_id: str = "") -> JoinGroupResult:
        code = await self._admit(group_id)
        if code != NONE:
            return JoinGroupResult(code, member_id=member_id)
        # Kafka names a static member's ids after its instance id (KIP-345), a dynamic one's after its client.
        new_id = f"{group_instance_id or client_id or 'member'}-{uuid.uuid4()}"
        answer, done = self.core.join(group_id, member_id, new_id, client_id, client_host, protocol_type,
                                      protocols, session_timeout_ms, rebalance_timeout_ms, self.clock(),
                                      require_known_member_id, group_instance_id)
        # The superseded answer of a retried join is for the old future: dispatch before parking.
        self._dispatch(done)
        if answer is not None:
            return answer
        result = await self._park((group_id, member_id or new_id, JOIN))
        assert isinstance(result, JoinGroupResult)
        return result

    async def sync_group(self, group_id: str, generation_id: int, member_id: str,
                         assignments: dict[str, bytes], group_instance_id: str = "") -> SyncGroupResult:
        code = await self._admit(group_id)
        if code != NONE:
            return SyncGroupResult(code)
        answer, done = self.core.sync(group_id, generation_id, member_id, assignments, self.clock(),
                                      group_instance_id)
        if answer is not None and answer.error_code == NONE:
            # The leader's assignment completed the generation (``done`` holds the followers'
            # answers), or a member of a Stable group asks again: nobody receives an assignment
            # before its generation is recorded under this coordinator's lease.
            code = await self._record_generation(group_id, generation_id)
            if code != NONE:
                self._dispatch([Completion(c.group_id, c.member_id, c.api, SyncGroupResult(code)) for c in done])
                return SyncGroupResult(code)
        self._dispatch(done)
        if answer is not None:
            return answer
        result = await self._park((group_id, member_id, "sync"))
        assert isinstance(result, SyncGroupResult)
        return result

    async def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str = "") -> int:
        code = await self._admit(group_id)
        return code if code != NONE else self.core.heartbeat(group_id, generation_id, member_id, self.clock(),
                                                             group_instance_id)

    async def leave_group(self, group_id: str, member_id: str, group_instance_id: str = "") -> int:
        code = await self._admit(group_id)
        if code != NONE:
            return code
        code, done = self.core.leave(group_id, member_id, self.clock(), group_instance_id)
        self._dispatch(done)
        return code

    async def commit_offsets(self, group_id: str, generation_id: int, member_id: str,
                             offsets: dict[tuple[str, int], OffsetAndMetadata],
                             group_instance_id: str = "") -> dict[tuple[str, int], int]:
        """Validated per partition (see ``GroupStateMachine.check_commit_entry``; the caller has
        refused unknown topics and partitions), then written in one fenced multi-op: all or none."""
        code = await self._admit(group_id)
        if code == NONE:
            code = self.core.commit_offsets(group_id, generation_id, member_id, group_instance_id)
        if code != NONE:
            return {tp: code for tp in offsets}
        result: dict[tuple[str, int], int] = {}
        accepted: dict[tuple[str, int], OffsetAndMetadata] = {}
        adding = 0
        stored = self.core.stored_partitions(group_id, offsets)
        for tp, om in offsets.items():
            verdict = self.core.check_commit_entry(group_id, tp, om.offset, om.metadata, adding)
            result[tp] = verdict
            if verdict == NONE:
                accepted[tp] = replace(om, commit_timestamp_ms=self.clock())
                adding += tp not in stored
        if not accepted:
            return result
        async with self._lease_lock(group_id):
            lease = self.leases.get(group_id)
            if lease is None or not self.core.is_loaded(group_id):
                return {tp: NOT_COORDINATOR for tp in offsets}
            try:
                await self.offload(self.ownership.commit, lease, accepted,
                                   self.core.stored_partitions(group_id, accepted))
            except errors.NotCoordinatorError:
                self._fenced(group_id, lease)
                return {tp: NOT_COORDINATOR for tp in offsets}
            except Exception as e:
                log.warning("group %s: commit of %d offsets failed: %s", group_id, len(accepted), e)
                if isinstance(e, PartialCommitError):
                    self._unload(group_id)  # part of it is in ZooKeeper: reload rather than guess
                return {tp: (COORDINATOR_NOT_AVAILABLE if tp in accepted else c) for tp, c in result.items()}
            # Written under the lease: durable, and the answer is NONE. The cache learns it only if
            # it is still this claim's (else whoever loads the group next reads it from ZooKeeper).
            if self._same_claim(group_id, lease):
                self.core.offsets_committed(group_id, accepted)
        return result

    async def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                            ) -> tuple[int, dict[tuple[str, int], OffsetAndMetadata]]:
        code = await self._admit_read(group_id)
        if code is None:
            return NONE, {}
        if code != NONE:
            return code, {}
        async with self._lease_lock(group_id):
            lease = self.leases.get(group_id)
            if lease is None or not self.core.is_loaded(group_id):
                return NOT_COORDINATOR, {}
            # The cache is the truth only while the lease is: confirm it (a resumed, paused
            # coordinator would otherwise answer with the offsets it had before another broker
            # took the group over).
            try:
                valid = await self.offload(self.ownership.still_owner, lease)
            except Exception as e:
                log.warning("group %s: cannot confirm the coordinator lease: %s", group_id, e)
                return COORDINATOR_NOT_AVAILABLE, {}
            if not valid:
                self._fenced(group_id, lease)
                return NOT_COORDINATOR, {}
            if not self._same_claim(group_id, lease):
                return NOT_COORDINATOR, {}  # unloaded while confirming: the cache is gone, not empty
            return NONE, self.core.fetch_offsets(group_id, partitions)

    async def delete_group(self, group_id: str) -> int:
        """DeleteGroups for one group: GROUP_ID_NOT_FOUND for a group that never existed,
        NON_EMPTY_GROUP while it has members; else its offsets and fence are deleted under the lease
        and it is unloaded (a later join makes a new group, generations from 1)."""
        code = await self._admit_read(group_id)
        if code is None:
            return GROUP_ID_NOT_FOUND
        if code != NONE:
            return code
        async with self._lease_lock(group_id):
            lease = self.leases.get(group_id)
            if lease is None or not self.core.is_loaded(group_id):
                return NOT_COORDINATOR
            code = self.core.check_delete_group(group_id)
            if code != NONE:
                return code
            try:
                await self.offload(self.ownership.delete_group, lease)
            except errors.NotCoordinatorError:
                self._fenced(group_id, lease)
                return NOT_COORDINATOR
            except Exception as e:
                log.warning("group %s: cannot delete it: %s", group_id, e)
                return COORDINATOR_NOT_AVAILABLE
            if self._same_claim(group_id, lease):
                self._unload(group_id)
            log.info("group %s: deleted", group_id)
            return NONE

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                             ) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete (KIP-496): (group error, code per partition); see
        ``GroupStateMachine.check_delete_offsets``. The caller has judged topics (ACLs, existence)."""
        code = await self._admit_read(group_id)
        if code is None:
            return GROUP_ID_NOT_FOUND, {}
        if code != NONE:
            return code, {}
        async with self._lease_lock(group_id):
            lease = self.leases.get(group_id)
            if lease is None or not self.core.is_loaded(group_id):
                return NOT_COORDINATOR, {}
            code, verdicts = self.core.check_delete_offsets(group_id, partitions)
            if code != NONE:
                return code, {}
            removable = [tp for tp, c in verdicts.items() if c == NONE]
            doomed = sorted(self.core.stored_partitions(group_id, removable))
            if doomed:
                try:
                    await self.offload(self.ownership.delete_offsets, lease, doomed)
                except errors.NotCoordinatorError:
                    self._fenced(group_id, lease)
                    return NOT_COORDINATOR, {}
                except Exception as e:
                    log.warning("group %s: cannot delete offsets: %s", group_id, e)
                    return COORDINATOR_NOT_AVAILABLE, {}
            if self._same_claim(group_id, lease):
                # Kafka's removeOffsets: a transaction's pending offsets of these partitions go too.
                self.core.remove_offsets(group_id, removable)
            return NONE, verdicts

    async def list_groups(self) -> tuple[int, list[tuple[str, str]]]:
        """Groups this broker coordinates: loaded ones and those with offsets in ZooKeeper."""
        try:
            stored = await self.offload(self.zk.list_groups)
        except Exception:
            stored = []
        listed = dict(self.core.list_groups())
        for group_id in stored:
            if group_id not in listed and self._check(group_id) == NONE:
                listed[group_id] = "consumer"
        return NONE, sorted(listed.items())

    async def describe_group(self, group_id: str) -> tuple[int, GroupDescription]:
        code = await self._admit_read(group_id)
        desc = self.core.describe(group_id)
        return (NONE, desc) if code is None else (code, desc)

    # ------------------------------------------------------------ transactions (TxnOffsetCommit, KIP-98)

    async def txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                                 offsets: dict[tuple[str, int], OffsetAndMetadata], generation_id: int = -1,
                                 member_id: str = "", group_instance_id: str = "") -> dict[tuple[str, int], int]:
        """Kafka's handleTxnCommitOffsets: the offsets are kept pending for ``producer_id`` (in
        ZooKeeper under the group's lease) until the transaction's marker; a later TxnOffsetCommit
        of the same transaction adds to them. A member's generation is checked only when the
        request carries one (v3+, KIP-447), as Kafka."""
        if producer_id < 0 or not 0 <= producer_epoch <= 0x7FFF:
            return {tp: errors.InvalidRequestError.code for tp in offsets}
        code = await self._admit(group_id)
        if code == NONE and (generation_id >= 0 or member_id):
            code = self.core.commit_offsets(group_id, generation_id, member_id, group_instance_id)
        if code != NONE:
            return {tp: code for tp in offsets}
        result: dict[tuple[str, int], int] = {}
        accepted: dict[tuple[str, int], OffsetAndMetadata] = {}
        for tp, om in offsets.items():
            verdict = self.core.check_commit_entry(group_id, tp, om.offset, om.metadata, 0)
            result[tp] = verdict
            if verdict == NONE:
                accepted[tp] = replace(om, commit_timestamp_ms=self.clock())
        if not accepted:
            return result
        async with self._lease_lock(group_id):
            lease = self.leases.get(group_id)
            if lease is None or not self.core.is_loaded(group_id):
                return {tp: NOT_COORDINATOR for tp in offsets}
            existed = self.core.pending_txn_offsets(group_id, producer_id) is not None
            code, pending = self.core.prepare_txn_offsets(group_id, producer_id, producer_epoch, accepted)
            if pending is None:
                return {tp: code for tp in offsets}
            try:
                await self.offload(self.ownership.write_txn_offsets, lease, producer_id, pending, existed)
            except errors.NotCoordinatorError:
                self._fenced(group_id, lease)
                return {tp: NOT_COORDINATOR for tp in offsets}
            except errors.ProducerFencedError as e:
                # A marker of a newer epoch (a zombie's transaction aborted by its successor's
                # InitProducerId) came first: pending offsets written now would wait for a marker that
                # was already sent, and every read_committed OffsetFetch would be UNSTABLE_OFFSET_COMMIT.
                log.info("group %s: %s", group_id, e)
                return {tp: PRODUCER_FENCED for tp in offsets}
            except errors.KafkaError as e:
                return {tp: (e.code if tp in accepted else c) for tp, c in result.items()}
            except Exception as e:
                log.warning("group %s: pending offsets of producer %d not written: %s", group_id, producer_id, e)
                self._unload(group_id)  # unknown outcome: read ZooKeeper again on the next request
                return {tp: (COORDINATOR_NOT_AVAILABLE if tp in accepted else c) for tp, c in result.items()}
            if self._same_claim(group_id, lease):
                self.core.txn_offsets_written(group_id, producer_id, pending)
        return result

    def pending_txn_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """Partitions of ``group_id`` with transactional offsets pending (OffsetFetch require_stable)."""
        return self.core.pending_txn_partitions(group_id)

    async def handle_txn_marker(self, producer_id: int, partition: int, commit: bool, producer_epoch: int = -1) -> int:
        """A transaction's COMMIT/ABORT for its offsets in __consumer_offsets ``partition`` (Kafka's
        handleTxnCompletion): every group of that partition with offsets pending for ``producer_id``
        - found through ZooKeeper's index - that this broker coordinates has them committed (COMMIT)
        or dropped (ABORT). NONE when none is left here; NOT_COORDINATOR when such a group belongs to
        another coordinator (whose own marker completes it; the sender retries after metadata moves);
        COORDINATOR_NOT_AVAILABLE to retry.

        First the producer's fence on ``partition`` is raised to the marker's ``producer_epoch``
        (``TxnOffsetsZNode.fence``), then the index is read: a TxnOffsetCommit of an older epoch still
        on its way is refused, and one written before the fence moved is in the index."""
        if producer_epoch >= 0 and self._fences.get((partition, producer_id), -1) < producer_epoch:
            try:
                stored = await self.offload(self.ownership.raise_txn_fence, partition, producer_id, producer_epoch)
            except Exception as e:
                log.warning("transaction marker for producer %d: cannot raise its fence: %s", producer_id, e)
                return COORDINATOR_NOT_AVAILABLE
            if len(self._fences) >= MAX_CACHED_TXN_FENCES:
                self._fences.clear()  # a cache: ZooKeeper has them all
            self._fences[(partition, producer_id)] = stored
        try:
            entries = await self.offload(self.ownership.txn_offsets_index, partition)
        except Exception as e:
            log.warning("transaction marker for producer %d: cannot read the pending offsets' index: %s",
                        producer_id, e)
            return COORDINATOR_NOT_AVAILABLE
        foreign = False
        for pid, group_id in entries:
            if pid != producer_id:
                continue
            if self._check(group_id) != NONE:
                foreign = True
                continue
            code = await self._ensure_loaded(group_id)
            if code != NONE:
                return code
            code = await self._complete_txn(group_id, producer_id, commit)
            if code != NONE:
                return code
        return NOT_COORDINATOR if foreign else NONE

    async def _complete_txn(self, group_id: str, producer_id: int, commit: bool) -> int:
        async with self._lease_lock(group_id):
            lease = self.leases.get(group_id)
            if lease is None or not self.core.is_loaded(group_id):
                return NOT_COORDINATOR
            pending = self.core.pending_txn_offsets(group_id, producer_id)
            offsets = self.core.txn_offsets_to_commit(group_id, producer_id, self.clock()) if commit else {}
            try:
                await self.offload(self.ownership.complete_txn_offsets, lease, producer_id, offsets,
                                   self.core.stored_partitions(group_id, offsets))
            except errors.NotCoordinatorError:
                self._fenced(group_id, lease)
                return NOT_COORDINATOR
            except Exception as e:
                log.warning("group %s: transactional offsets of producer %d not completed: %s", group_id,
                            producer_id, e)
                self._unload(group_id)
                return COORDINATOR_NOT_AVAILABLE
            if self._same_claim(group_id, lease):
                self.core.txn_offsets_completed(group_id, producer_id, offsets)
            log.info("group %s: %d transactional offsets of producer %d %s", group_id,
                     0 if pending is None else len(pending.offsets), producer_id,
                     "committed" if commit else "aborted")
            return NONE
