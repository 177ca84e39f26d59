"""Two decisions a broker makes about the controller's world, shared by the broker and the
simulation (tests/simulation/sim_cluster.py calls these, never a copy of them).

Theory of operation
-------------------
**Fencing a control request** (LeaderAndIsr, UpdateMetadata, StopReplica; SPEC S12.2, S9):

* the broker epoch: a request for another incarnation of this broker is refused
  (STALE_BROKER_EPOCH). A *higher* epoch than the broker knows is its very registration when
  ZooKeeper says so - the controller saw the znode before the create's reply reached the broker,
  or the reply was lost while the retry still runs; refusing it lost that LeaderAndIsr for good
  (found by simulation, issue 14). No value skips the check (-1 included);
* the controller epoch: an epoch *above* what this broker knows is accepted only if ZooKeeper's
  /controller_epoch has reached it (a forged or confused sender cannot raise the broker's bar); one
  *below* it is a deposed controller's (STALE_CONTROLLER_EPOCH), refused by ``accept_controller_epoch``
  once the request is admitted.

The ZooKeeper reads are effects passed in (``registered_broker_epoch``, ``zk_controller_epoch``),
as kazoo's retry takes its sleep: called only when the decision needs them, so the common case
does no I/O and the shell may call the whole function on its event loop; when ``needs_lookup``
says otherwise, the shell runs it on a thread.

**After a leader's conditional ISR write** (S4, Kafka's ``Partition.updateIsr`` and
``checkLeaderAndIsrZkData``): ``decide_after_isr_write`` tells what the leader does with the
result of ``write_isr``, which made the write and, on a conflict, read what ZooKeeper now holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from proto import errors
from zk.data import LeaderAndIsr, LeaderIsrAndControllerEpoch

NONE: Final = 0
STALE_BROKER_EPOCH: Final = errors.StaleBrokerEpochError.code
STALE_CONTROLLER_EPOCH: Final = errors.StaleControllerEpochError.code


# ------------------------------------------------------------------ control requests


def needs_lookup(request_broker_epoch: int, broker_epoch: int, request_controller_epoch: int,
                 known_controller_epoch: int) -> bool:
    """Will ``fence_control_request`` read ZooKeeper for these values?"""
    return request_broker_epoch > broker_epoch or request_controller_epoch > known_controller_epoch


def fence_control_request(request_broker_epoch: int, broker_epoch: int,
                          registered_broker_epoch: Callable[[], int | None],
                          request_controller_epoch: int, known_controller_epoch: int,
                          zk_controller_epoch: Callable[[], int | None]) -> int:
    """NONE, or the error code a control request is refused with (see the module docstring)."""
    if request_broker_epoch != broker_epoch and (
            request_broker_epoch < broker_epoch or request_broker_epoch != registered_broker_epoch()):
        return STALE_BROKER_EPOCH
    if request_controller_epoch > known_controller_epoch:
        current = zk_controller_epoch()
        if current is None or request_controller_epoch > current:
            return STALE_CONTROLLER_EPOCH
    return NONE


def accept_controller_epoch(request_controller_epoch: int, known_controller_epoch: int) -> bool:
    """An admitted request's controller epoch: refused below the one this broker knows (a deposed
    controller's); otherwise it becomes the known one."""
    return request_controller_epoch >= known_controller_epoch


# ------------------------------------------------------------------ ISR writes


class PartitionStateGateway(Protocol):
    """The part of the ZooKeeper gateway (zk.client.KafkaZkClient) an ISR write uses."""

    def update_partition_state(self, topic: str, partition: int, state: LeaderIsrAndControllerEpoch,
                               expected_version: int) -> int | None: ...

    def get_partition_state(self, topic: str, partition: int) -> LeaderIsrAndControllerEpoch | None: ...


@dataclass(frozen=True, slots=True)
class IsrWriteResult:
    """``version``: the znode version written, None when the conditional write lost; then
    ``current``: the state ZooKeeper held when read back (None: unreadable or gone)."""
    version: int | None
    current: LeaderAndIsr | None = None


def write_isr(zk: PartitionStateGateway, topic: str, partition: int, local_id: int, leader_epoch: int,
              controller_epoch: int, new_isr: tuple[int, ...], expected_version: int) -> IsrWriteResult:
    """The leader's conditional write of its new ISR (blocking: a thread in the broker); raises what
    the gateway raises when ZooKeeper cannot be reached."""
    state = LeaderIsrAndControllerEpoch(LeaderAndIsr(local_id, leader_epoch, new_isr, expected_version),
                                        controller_epoch)
    version = zk.update_partition_state(topic, partition, state, expected_version)
    if version is not None:
        return IsrWriteResult(version)
    try:
        current = zk.get_partition_state(topic, partition)
    except Exception:  # the read-back is advice: without it the leader waits for LeaderAndIsr
        current = None
    return IsrWriteResult(None, None if current is None else current.leader_and_isr)


APPLIED: Final = "applied"      # the new ISR is committed at ``zk_version``
ADOPT: Final = "adopt"          # another writer (the controller) changed it under this leader: take theirs
DEPOSED: Final = "deposed"      # the write lost to a newer leader epoch: a LeaderAndIsr is on its way
IGNORE: Final = "ignore"        # the leader moved on while the write was in flight: nothing to do


@dataclass(frozen=True, slots=True)
class IsrWriteDecision:
    kind: str
    isr: tuple[int, ...] = ()
    zk_version: int = -1


def decide_after_isr_write(local_id: int, epoch_at_write: int, is_leader: bool, leader_epoch: int,
                           new_isr: tuple[int, ...], result: IsrWriteResult) -> IsrWriteDecision:
    """What the leader does with ``result`` of its write at ``epoch_at_write``, given what it is
    now (``is_leader``, ``leader_epoch``): a result for an epoch it no longer leads is ignored."""
    if not is_leader or leader_epoch != epoch_at_write:
        return IsrWriteDecision(IGNORE)
    if result.version is not None:
        return IsrWriteDecision(APPLIED, new_isr, result.version)
    cur = result.current
    if cur is not None and adopt_after_isr_conflict(local_id, leader_epoch, cur.leader, cur.leader_epoch):
        return IsrWriteDecision(ADOPT, cur.isr, cur.zk_version)
    return IsrWriteDecision(DEPOSED)


def adopt_after_isr_conflict(local_id: int, leader_epoch: int, current_leader: int, current_leader_epoch: int) -> bool:
    """A leader's conditional ISR write lost to another writer. Adopt what ZooKeeper now holds (its
    ISR and zk_version) when it still names this leader at this epoch - the controller changed the
    ISR under it - so the next change is made against them; otherwise the leader was deposed and
    a LeaderAndIsr is on its way (Kafka's checkLeaderAndIsrZkData, KAFKA-2729)."""
    return current_leader == local_id and current_leader_epoch == leader_epoch
