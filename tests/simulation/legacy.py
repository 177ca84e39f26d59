"""The behaviour issue 14 replaced, item by item, to show the simulation finds each defect.

Each function here is the old code (or its exact effect) that a regression test patches back in
with ``monkeypatch``; the test then asserts that some seed in a small range now violates an
invariant. Nothing outside the tests imports this module.
"""

from __future__ import annotations

from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from broker.replication.state import ACK, NOT_LEADER, TIMED_OUT, WAIT, LeaderState
from controller.controller import KafkaController
from controller.events import Event
from controller.state_machine import ReplicaState, check_replica_transition
from proto import minikafka_pb2 as pb
from zk.client import CommitResult, KafkaZkClient, ZkWrite
from zk.data import (
    ControllerEpochZNode,
    ControllerZNode,
    LeaderIsrAndControllerEpoch,
    TopicPartitionStateZNode,
)


def delayed_produce_outcome(state: LeaderState | None, local_high_watermark: int, required_offset: int,
                            min_insync_replicas: int, timed_out: bool) -> str:
    """Item 1: after the controller shrank the ISR (which bumps the leader epoch) the old
    _await_acks answered success once the HW passed, without looking at the ISR size."""
    hw = state.high_watermark if state is not None else local_high_watermark
    if hw >= required_offset:
        return ACK
    if state is None:
        return NOT_LEADER
    return TIMED_OUT if timed_out else WAIT


def update_partition_state(self: KafkaZkClient, topic: str, partition: int, state: LeaderIsrAndControllerEpoch,
                           expected_version: int) -> int | None:
    """Item 2: BadVersion taken at its word, even when it answers our own write's lost reply."""
    try:
        stat = self._r(self.zk.set, TopicPartitionStateZNode.path(topic, partition),
                       TopicPartitionStateZNode.encode(state), version=expected_version)
    except (BadVersionError, NoNodeError):
        return None
    return int(stat.version)


def adopt_after_isr_conflict(*_args: Any) -> bool:
    """Item 2: the leader never adopted what ZooKeeper held after a conflict."""
    return False


def register_controller_and_increment_epoch(self: KafkaZkClient, broker_id: int,
                                            now_ms: int) -> tuple[int, int] | None:
    """Item 3: NodeExists meant "someone else", even for our own create whose reply was lost (and
    the epoch was bumped by a second, separate write)."""
    try:
        self._r(self.zk.create, ControllerZNode.PATH, ControllerZNode.encode(broker_id, now_ms), ephemeral=True)
    except NodeExistsError:
        return None
    current = self.get_controller_epoch()
    if current is None:
        self._r(self.zk.create, ControllerEpochZNode.PATH, ControllerEpochZNode.encode(1))
        return 1, 0
    epoch, version = current
    stat = self._r(self.zk.set, ControllerEpochZNode.PATH, ControllerEpochZNode.encode(epoch + 1), version=version)
    return epoch + 1, int(stat.version)


def replica_transition(s: Any, tp: tuple[str, int], replica: int, target: ReplicaState) -> None:
    """Item 4: a replica a reassignment added had no state; OFFLINE/ONLINE from NON_EXISTENT raised."""
    current = s.ctx.replica_states.get((tp, replica), ReplicaState.NON_EXISTENT)
    if current is target and target is not ReplicaState.ONLINE:
        return
    check_replica_transition(f"{tp[0]}-{tp[1]} on broker {replica}", current, target)
    s.ctx.replica_states[(tp, replica)] = target


def commit_unguarded(self: KafkaZkClient, epoch_zk_version: int, writes: list[ZkWrite],
                     skip_conflicts: bool = False) -> CommitResult:
    """Item 5: controller writes not guarded by /controller_epoch's version (KAFKA-6082)."""
    for w in writes:
        if w.kind == "create":
            self._r(self.zk.create, w.path, w.data)
        elif w.kind == "set":
            try:
                self._r(self.zk.set, w.path, w.data, version=w.version)
            except BadVersionError:
                return CommitResult(False, {x.path: self._read(x.path) for x in writes})
        else:
            self._r(self.zk.delete, w.path)
    return CommitResult(True)


def put_expire_behind(self: KafkaController, event: Event) -> None:
    """Item 5: SessionExpired was queued behind the pending events like any other event."""
    self.pending.append(event)


def reassignment_replica_transition(*_args: Any) -> None:
    """Item 4: the old reassignment added replicas to the assignment without giving them a state."""



def strict_broker_epoch_fence(self: Any, req: Any) -> int:
    """The broker-epoch race the simulation found: a broker that re-registered after a session
    expiry answered STALE_BROKER_EPOCH to the controller's requests carrying its *new* epoch
    whenever they arrived before its own registration call had returned (it compared with the
    epoch it had recorded only, never asking ZooKeeper), so it stayed out of the cluster's plan."""
    if req.broker_epoch != self.epoch:
        return int(pb.ErrorCode.STALE_BROKER_EPOCH)
    if req.controller_epoch < self.controller_epoch:
        return int(pb.ErrorCode.STALE_CONTROLLER_EPOCH)
    self.controller_epoch = req.controller_epoch
    return int(pb.ErrorCode.NONE)
