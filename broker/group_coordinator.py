"""The group coordinator's shell (Kafka's ``GroupCoordinator``): futures, the clock, ZooKeeper.

Theory of operation
-------------------
All group state lives in the pure ``broker.group_state.GroupStateMachine``;
this shell only (1) decides whether this broker coordinates a group, (2) loads
a group's committed offsets from ZooKeeper the first time it sees the group
(coordinator failover: the new coordinator reads what the old one wrote),
(3) parks JoinGroup/SyncGroup requests on futures until the core releases
them, (4) ticks the core on a bounded timer for session and rebalance
timeouts, and (5) writes committed offsets to
``/consumers/[group]/offsets/[topic]/[partition]`` through the ZooKeeper
gateway before the core's cache records them.

Coordinator choice: ``coordinator_for(group_id, live broker ids)`` =
``sorted(ids)[crc32(group_id) % len(ids)]``, over the live brokers of this
broker's metadata cache (the controller's UpdateMetadata). Clients ask any
broker with FindCoordinator and go to the answer; a broker that is not the
coordinator answers NOT_COORDINATOR and the client asks again. When the live
brokers change, groups move; the old coordinator unloads them (parked requests
get NOT_COORDINATOR), members rejoin at the new one, which starts from the
committed offsets in ZooKeeper (members are not persisted, as Kafka persists
only to its offsets topic: a moved group rebalances).

Known limit: while two brokers' metadata caches disagree about the live brokers
(the moments around a broker joining or dying), both may believe they
coordinate a group; each fences commits only by its own generations. Kafka
closes that window with the leader epoch of the offsets partition; here the
window is the controller's UpdateMetadata propagation, and the loss is bounded
to at-least-once redelivery (a commit never moves past what its member read).

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
    commit_offsets(group_id, generation_id, member_id, offsets: dict[(topic, partition), offset])
        -> dict[(topic, partition), error_code]
    fetch_offsets(group_id, partitions: list[(topic, partition)] | None)
        -> (error_code, dict[(topic, partition), offset])   # absent: none committed
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
from collections.abc import Callable
from typing import Final

from broker.group_state import (
    JOIN,
    NONE,
    Completion,
    CoordinatorLimits,
    GroupDescription,
    GroupStateMachine,
    JoinGroupResult,
    SyncGroupResult,
    coordinator_for,
)
from proto import errors
from proto.names import validate_group_id
from proto.zk_client import KafkaZkClient

log = logging.getLogger(__name__)

NOT_COORDINATOR: Final = errors.NotCoordinatorError.code
COORDINATOR_NOT_AVAILABLE: Final = errors.CoordinatorNotAvailableError.code
INVALID_GROUP_ID: Final = errors.InvalidGroupIdError.code

# Kafka's authorizer operations per group API (resource Group; OffsetCommit/OffsetFetch also
# need Read/Describe on each topic, ListGroups Describe on the cluster or per group).
GROUP_OPERATIONS: Final = {
    "FindCoordinator": "Describe", "JoinGroup": "Read", "SyncGroup": "Read", "Heartbeat": "Read",
    "LeaveGroup": "Read", "OffsetCommit": "Read", "OffsetFetch": "Describe", "DescribeGroups": "Describe",
}


def now_ms() -> int:
    return int(time.time() * 1000)


class GroupCoordinator:
    def __init__(self, broker_id: int, zk: KafkaZkClient, live_brokers: Callable[[], list[int]],
                 limits: CoordinatorLimits | None = None, clock: Callable[[], int] = now_ms) -> None:
        self.broker_id = broker_id
        self.zk = zk
        self.live_brokers = live_brokers
        self.core = GroupStateMachine(limits)
        self.clock = clock
        self._waiters: dict[tuple[str, str, str], asyncio.Future[JoinGroupResult | SyncGroupResult]] = {}
        self._early: dict[tuple[str, str, str], JoinGroupResult | SyncGroupResult] = {}
        self._loading: dict[str, asyncio.Future[None]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for group_id in list(self.core.groups):
            self._dispatch(self.core.unload(group_id, self.clock()))

    async def _run(self) -> None:
        """Tick the core at its next deadline (bounded: membership changes are checked too)."""
        while True:
            try:
                self._dispatch(self.core.tick(self.clock()))
                for group_id in list(self.core.groups):
                    if not self.is_coordinator(group_id):
                        log.info("group %s: no longer its coordinator; unloading", group_id)
                        self._dispatch(self.core.unload(group_id, self.clock()))
            except Exception:
                log.exception("group coordinator tick failed")
            deadline = self.core.next_deadline_ms()
            wait_s = 0.25 if deadline is None else min(0.25, max(0.0, (deadline - self.clock()) / 1000.0))
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait_s)

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
        """NONE once the group's committed offsets are loaded from ZooKeeper."""
        if self.core.is_loaded(group_id):
            return NONE
        pending = self._loading.get(group_id)
        if pending is None:
            pending = self._loading[group_id] = asyncio.get_running_loop().create_future()
            try:
                offsets = await asyncio.to_thread(self.zk.get_group_offsets, group_id)
                self.core.load(group_id, offsets)
                log.info("group %s: loaded %d committed offsets from ZooKeeper", group_id, len(offsets))
                pending.set_result(None)
            except Exception as e:
                log.warning("group %s: cannot load offsets: %s", group_id, e)
                pending.set_result(None)
                return COORDINATOR_NOT_AVAILABLE
            finally:
                self._loading.pop(group_id, None)
        else:
            await pending
        return NONE if self.core.is_loaded(group_id) else COORDINATOR_NOT_AVAILABLE

    async def _admit(self, group_id: str) -> int:
        code = self._check(group_id)
        return code if code != NONE else await self._ensure_loaded(group_id)

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
                         rebalance_timeout_ms: int, require_known_member_id: bool = False) -> JoinGroupResult:
        code = await self._admit(group_id)
        if code != NONE:
            return JoinGroupResult(code, member_id=member_id)
        new_id = f"{client_id or 'member'}-{uuid.uuid4()}"
        answer, done = self.core.join(group_id, member_id, new_id, client_id, client_host, protocol_type,
                                      protocols, session_timeout_ms, rebalance_timeout_ms, self.clock(),
                                      require_known_member_id)
        # The superseded answer of a retried join is for the old future: dispatch before parking.
        self._dispatch(done)
        if answer is not None:
            return answer
        result = await self._park((group_id, member_id or new_id, JOIN))
        assert isinstance(result, JoinGroupResult)
        return result

    async def sync_group(self, group_id: str, generation_id: int, member_id: str,
                         assignments: dict[str, bytes]) -> SyncGroupResult:
        code = await self._admit(group_id)
        if code != NONE:
            return SyncGroupResult(code)
        answer, done = self.core.sync(group_id, generation_id, member_id, assignments, self.clock())
        self._dispatch(done)
        if answer is not None:
            return answer
        result = await self._park((group_id, member_id, "sync"))
        assert isinstance(result, SyncGroupResult)
        return result

    async def heartbeat(self, group_id: str, generation_id: int, member_id: str) -> int:
        code = await self._admit(group_id)
        return code if code != NONE else self.core.heartbeat(group_id, generation_id, member_id, self.clock())

    async def leave_group(self, group_id: str, member_id: str) -> int:
        code = await self._admit(group_id)
        if code != NONE:
            return code
        code, done = self.core.leave(group_id, member_id, self.clock())
        self._dispatch(done)
        return code

    async def commit_offsets(self, group_id: str, generation_id: int, member_id: str,
                             offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        code = await self._admit(group_id)
        if code == NONE:
            code = self.core.commit_offsets(group_id, generation_id, member_id)
        if code != NONE:
            return {tp: code for tp in offsets}
        result: dict[tuple[str, int], int] = {}
        written: dict[tuple[str, int], int] = {}
        for (topic, partition), offset in offsets.items():
            if offset < 0:
                result[(topic, partition)] = errors.OffsetOutOfRangeError.code
                continue
            try:
                await asyncio.to_thread(self.zk.commit_offset, group_id, topic, partition, offset)
                written[(topic, partition)] = offset
                result[(topic, partition)] = NONE
            except Exception as e:
                log.warning("group %s: commit of %s-%d failed: %s", group_id, topic, partition, e)
                result[(topic, partition)] = COORDINATOR_NOT_AVAILABLE
        self.core.offsets_committed(group_id, written)
        return result

    async def fetch_offsets(self, group_id: str,
                            partitions: list[tuple[str, int]] | None) -> tuple[int, dict[tuple[str, int], int]]:
        code = await self._admit(group_id)
        if code != NONE:
            return code, {}
        return NONE, self.core.fetch_offsets(group_id, partitions)

    async def list_groups(self) -> tuple[int, list[tuple[str, str]]]:
        """Groups this broker coordinates: loaded ones and those with offsets in ZooKeeper."""
        try:
            stored = await asyncio.to_thread(self.zk.list_groups)
        except Exception:
            stored = []
        listed = dict(self.core.list_groups())
        for group_id in stored:
            if group_id not in listed and self._check(group_id) == NONE:
                listed[group_id] = "consumer"
        return NONE, sorted(listed.items())

    async def describe_group(self, group_id: str) -> tuple[int, GroupDescription]:
        code = await self._admit(group_id)
        desc = self.core.describe(group_id)
        return code, desc
