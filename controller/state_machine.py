"""Partition and replica state machines (Kafka's PartitionStateMachine / ReplicaStateMachine), pure.

Theory of operation: every partition and every replica the controller knows
is in one state; a transition is legal only from the states its table lists.
The tables are the documentation:

Partition states
    ===================  ==========================================  ================
    target               valid previous states                       what happens
    ===================  ==========================================  ================
    NEW                  NON_EXISTENT                                assignment read
    ONLINE               NEW, ONLINE, OFFLINE                        a leader elected
    OFFLINE              NEW, ONLINE, OFFLINE                        its leader died
    NON_EXISTENT         OFFLINE                                     topic deleted
    ===================  ==========================================  ================

Replica states
    ======================  ==============================================
    target                  valid previous states
    ======================  ==============================================
    NEW                     NON_EXISTENT
    ONLINE                  NEW, ONLINE, OFFLINE, DELETION_INELIGIBLE
    OFFLINE                 NEW, ONLINE, OFFLINE, DELETION_INELIGIBLE
    DELETION_STARTED        OFFLINE
    DELETION_SUCCESSFUL     DELETION_STARTED
    DELETION_INELIGIBLE     OFFLINE, DELETION_STARTED
    NON_EXISTENT            DELETION_SUCCESSFUL
    ======================  ==============================================

The planning functions below turn the controller context into decisions -
the new leader and ISR of each partition, with the zk_version the write must
be conditional on - and leave ZooKeeper writes and RPCs to the shell.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Final

from controller.election import (
    ElectionResult,
    controlled_shutdown_partition_leader_election,
    offline_partition_leader_election,
    preferred_replica_partition_leader_election,
    reassign_partition_leader_election,
)
from zk.data import NO_LEADER, LeaderAndIsr


class PartitionState(Enum):
    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"
    NON_EXISTENT = "NonExistentPartition"


class ReplicaState(Enum):
    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    DELETION_STARTED = "ReplicaDeletionStarted"
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"
    NON_EXISTENT = "NonExistentReplica"


P = PartitionState
R = ReplicaState

VALID_PREVIOUS_PARTITION_STATES: Final[Mapping[PartitionState, frozenset[PartitionState]]] = {
    P.NEW: frozenset({P.NON_EXISTENT}),
    P.ONLINE: frozenset({P.NEW, P.ONLINE, P.OFFLINE}),
    P.OFFLINE: frozenset({P.NEW, P.ONLINE, P.OFFLINE}),
    P.NON_EXISTENT: frozenset({P.OFFLINE}),
}

VALID_PREVIOUS_REPLICA_STATES: Final[Mapping[ReplicaState, frozenset[ReplicaState]]] = {
    R.NEW: frozenset({R.NON_EXISTENT}),
    R.ONLINE: frozenset({R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE}),
    R.OFFLINE: frozenset({R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE}),
    R.DELETION_STARTED: frozenset({R.OFFLINE}),
    R.DELETION_SUCCESSFUL: frozenset({R.DELETION_STARTED}),
    R.DELETION_INELIGIBLE: frozenset({R.OFFLINE, R.DELETION_STARTED}),
    R.NON_EXISTENT: frozenset({R.DELETION_SUCCESSFUL}),
}


class IllegalStateTransition(Exception):
    pass


def is_valid_partition_transition(current: PartitionState, target: PartitionState) -> bool:
    return current in VALID_PREVIOUS_PARTITION_STATES[target]


def is_valid_replica_transition(current: ReplicaState, target: ReplicaState) -> bool:
    return current in VALID_PREVIOUS_REPLICA_STATES[target]


def check_partition_transition(what: object, current: PartitionState, target: PartitionState) -> None:
    if not is_valid_partition_transition(current, target):
        raise IllegalStateTransition(f"partition {what}: {current.value} -> {target.value} is not allowed")


def check_replica_transition(what: object, current: ReplicaState, target: ReplicaState) -> None:
    if not is_valid_replica_transition(current, target):
        raise IllegalStateTransition(f"replica {what}: {current.value} -> {target.value} is not allowed")


# ------------------------------------------------------------------ leadership planning


class ElectionStrategy(Enum):
    OFFLINE = "offline"
    REASSIGN = "reassign"
    PREFERRED = "preferred"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"


def initial_leader_and_isr(assignment: Sequence[int], live: Collection[int]) -> LeaderAndIsr | None:
    """S9.4: a new partition's leader is its first live replica, ISR = all live replicas."""
    live_replicas = tuple(r for r in assignment if r in live)
    if not live_replicas:
        return None
    return LeaderAndIsr(live_replicas[0], 0, live_replicas, -1)


@dataclass(frozen=True, slots=True)
class ElectionDecision:
    """The new leader and ISR (leader epoch bumped, zk_version = the version to write against)."""

    leader_and_isr: LeaderAndIsr
    unclean: bool


def elect_leader(strategy: ElectionStrategy, current: LeaderAndIsr, assignment: Sequence[int],
                 live: Collection[int], *, unclean_enabled: bool = False,
                 target_replicas: Sequence[int] = (),
                 shutting_down: Collection[int] = ()) -> ElectionDecision | None:
    result: ElectionResult | None
    if strategy is ElectionStrategy.OFFLINE:
        result = offline_partition_leader_election(assignment, current.isr, live, unclean_enabled)
    elif strategy is ElectionStrategy.REASSIGN:
        result = reassign_partition_leader_election(target_replicas, current.isr, live)
    elif strategy is ElectionStrategy.PREFERRED:
        result = preferred_replica_partition_leader_election(assignment, current.isr, live)
    else:
        result = controlled_shutdown_partition_leader_election(assignment, current.isr, live, shutting_down)
    if result is None:
        return None
    return ElectionDecision(current.new_leader_and_isr(result.leader, result.isr), result.unclean)


def offline_leader_and_isr(current: LeaderAndIsr, live: Collection[int]) -> LeaderAndIsr:
    """S7.3: no replica can lead. The ISR keeps its last member so that it, and only
    it, can lead when it returns (Kafka keeps the last ISR for clean election)."""
    isr = tuple(r for r in current.isr if r in live) or current.isr[-1:]
    return current.new_leader_and_isr(NO_LEADER, isr)


def remove_replica_from_isr(current: LeaderAndIsr, replica: int) -> LeaderAndIsr | None:
    """A replica went offline: drop it from the ISR (and from leadership). None if it was
    not there, or if it is the last ISR member (the ISR never becomes empty)."""
    if replica not in current.isr or current.isr == (replica,):
        if current.leader == replica:
            return current.new_leader_and_isr(NO_LEADER, current.isr)
        return None
    new_isr = tuple(r for r in current.isr if r != replica)
    leader = NO_LEADER if current.leader == replica else current.leader
    return current.new_leader_and_isr(leader, new_isr)
