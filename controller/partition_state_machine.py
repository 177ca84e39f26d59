"""Partition and replica state machines at work (Kafka's PartitionStateMachine, ReplicaStateMachine).

Theory of operation: the transition tables and the election rules are pure
(``controller.state_machine``, ``controller.election``); this module applies them to the
context copy an event works on (``Scope``), and *stages* every ZooKeeper write in the event's
plan instead of making it (``controller.plan``): a new partition's state znode is a create, a
leadership change a set conditional on the zk_version the context holds, and the context is
updated as if the write succeeded (the version one higher). If the commit finds a conflict,
the whole copy is thrown away, so nothing here needs to undo anything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from controller.context import ControllerContext
from controller.plan import ElectionRecord, Plan
from controller.state_machine import (
    ElectionStrategy,
    PartitionState,
    ReplicaState,
    check_partition_transition,
    check_replica_transition,
    elect_leader,
    initial_leader_and_isr,
    offline_leader_and_isr,
    remove_replica_from_isr,
)
from proto.names import TopicPartition
from zk.client import KafkaZkClient, ZkWrite
from zk.data import (
    NO_LEADER,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    TopicPartitionStateZNode,
    TopicPartitionsZNode,
)

log = logging.getLogger(__name__)


@dataclass
class Scope:
    """What one event's processing works with: a context copy, its plan, ZooKeeper reads."""

    ctx: ControllerContext
    plan: Plan
    zk: KafkaZkClient
    unclean_leader_election_enable: bool
    # What new partitions' state znodes and their parents look like, read pipelined ahead of their
    # initialisation (``prefetch_new_partitions``): three reads one after another per partition took
    # ~1 s per 1,000 new partitions.
    prefetched_states: dict[TopicPartition, LeaderIsrAndControllerEpoch | None] = field(default_factory=dict)
    prefetched_paths: dict[str, bool] = field(default_factory=dict)
    # Each topic's partitions that have a znode (None: no ``partitions`` znode), read once per event
    # (``partition_znodes``): the topic's load and its partitions' initialisation both ask.
    partition_znodes: dict[str, frozenset[int] | None] = field(default_factory=dict)


def partition_znodes(s: Scope, topics: list[str]) -> dict[str, frozenset[int] | None]:
    """Which partitions of ``topics`` have a znode, read (one getChildren per topic, pipelined) only
    for the topics this event has not asked about yet."""
    unknown = [t for t in topics if t not in s.partition_znodes]
    if unknown:
        s.partition_znodes.update(s.zk.get_partition_znodes(unknown))
    return {t: s.partition_znodes[t] for t in topics}


def prefetch_new_partitions(s: Scope, tps: list[TopicPartition]) -> None:
    """Read, pipelined, what ``initialize_leadership`` needs for each of ``tps``: which of their
    znodes exist (one getChildren per topic) and the state znodes of those that do. A new topic's
    partitions have none: no read per partition (reading each one's state and both its parents
    was most of the controller's time per new topic of 100 partitions, issue 29)."""
    if len(tps) < 2:
        return  # one partition: read as it goes
    existing = partition_znodes(s, sorted({t for t, _p in tps}))
    states = s.zk.get_partition_states([tp for tp in tps if tp[1] in (existing.get(tp[0]) or ())])
    for topic, part in tps:
        parts = existing.get(topic)
        s.prefetched_states[(topic, part)] = states.get((topic, part))
        s.prefetched_paths[TopicPartitionsZNode.path(topic)] = parts is not None
        s.prefetched_paths[f"{TopicPartitionsZNode.path(topic)}/{part}"] = parts is not None and part in parts


# ------------------------------------------------------------------ transitions


def transition(s: Scope, tp: TopicPartition, target: PartitionState) -> None:
    """Move a partition to ``target``, only along the table of controller.state_machine."""
    current = s.ctx.partition_states.get(tp, PartitionState.NON_EXISTENT)
    check_partition_transition(f"{tp[0]}-{tp[1]}", current, target)
    s.ctx.partition_states[tp] = target


def replica_transition(s: Scope, tp: TopicPartition, replica: int, target: ReplicaState) -> None:
    current = s.ctx.replica_states.get((tp, replica), ReplicaState.NON_EXISTENT)
    if current is ReplicaState.DELETION_SUCCESSFUL and target is ReplicaState.OFFLINE:
        return  # already gone; its broker's death changes nothing
    if current is ReplicaState.DELETION_STARTED and target is ReplicaState.OFFLINE:
        target = ReplicaState.DELETION_INELIGIBLE  # its broker died mid-deletion: retried on return
    if current is target and target is not ReplicaState.ONLINE:
        return
    if current is ReplicaState.NON_EXISTENT and target in (ReplicaState.ONLINE, ReplicaState.OFFLINE):
        # A replica the controller has not seen yet (one a reassignment added, issue 14 item 4):
        # it enters through NEW, as Kafka's replica state machine would have taken it.
        s.ctx.replica_states[(tp, replica)] = ReplicaState.NEW
        current = ReplicaState.NEW
    check_replica_transition(f"{tp[0]}-{tp[1]} on broker {replica}", current, target)
    s.ctx.replica_states[(tp, replica)] = target


# ------------------------------------------------------------------ leadership (staged writes)


def change_leadership(s: Scope, tp: TopicPartition, compute: Callable[[LeaderAndIsr], LeaderAndIsr | None]) -> bool:
    """Stage a new leader/ISR computed from the current one (conditional on its zk_version)."""
    ctx = s.ctx
    current = ctx.leadership.get(tp)
    if current is None:
        return False
    new = compute(current.leader_and_isr)
    if new is None:
        return False
    expected = current.leader_and_isr.zk_version
    state = LeaderIsrAndControllerEpoch(new.with_zk_version(expected + 1), ctx.epoch)
    s.plan.stage(ZkWrite("set", TopicPartitionStateZNode.path(*tp), TopicPartitionStateZNode.encode(state), expected))
    ctx.leadership[tp] = state
    transition(s, tp, PartitionState.ONLINE if new.leader != NO_LEADER else PartitionState.OFFLINE)
    s.plan.batch.add_leader_and_isr(set(ctx.replicas(tp)), tp, ctx)
    return True


def unclean_enabled(s: Scope, topic: str) -> bool:
    raw = s.ctx.topic_configs.get(topic, {}).get("unclean.leader.election.enable")
    if raw is None:
        return s.unclean_leader_election_enable
    return raw.strip().lower() == "true"


def elect(s: Scope, tp: TopicPartition, strategy: ElectionStrategy, target_replicas: Iterable[int] = (),
          *, force_unclean: bool = False) -> bool:
    """``force_unclean``: an OFFLINE election that may pick a replica out of the ISR whatever the
    topic's unclean.leader.election.enable (an admin's ElectLeaders UNCLEAN)."""
    ctx = s.ctx
    live = ctx.serving_broker_ids if strategy is not ElectionStrategy.CONTROLLED_SHUTDOWN else set(ctx.live_brokers)
    unclean = force_unclean or unclean_enabled(s, tp[0])
    outcome: dict[str, bool] = {}

    def compute(current: LeaderAndIsr) -> LeaderAndIsr | None:
        decision = elect_leader(strategy, current, ctx.replicas(tp), live, unclean_enabled=unclean,
                                target_replicas=list(target_replicas), shutting_down=ctx.shutting_down_broker_ids)
        if decision is None:
            return None
        outcome["unclean"] = decision.unclean
        return decision.leader_and_isr

    if not change_leadership(s, tp, compute):
        return False
    s.plan.elections += 1
    lai = ctx.leadership[tp].leader_and_isr
    unclean_outcome = bool(outcome.get("unclean"))
    if unclean_outcome:
        s.plan.unclean_elections += 1
    s.plan.election_log.append(ElectionRecord(strategy.value, tp[0], tp[1], lai.leader, lai.leader_epoch,
                                              tuple(lai.isr), unclean_outcome))
    return True


def without(current: LeaderAndIsr, gone: set[int]) -> LeaderAndIsr | None:
    """The leader/ISR with ``gone`` removed (one epoch bump for the whole change)."""
    new = current
    changed = False
    for r in sorted(gone):
        nxt = remove_replica_from_isr(new, r)
        if nxt is not None:
            new = LeaderAndIsr(nxt.leader, current.leader_epoch + 1, nxt.isr, current.zk_version)
            changed = True
    return new if changed else None


def initialize_leadership(s: Scope, tp: TopicPartition) -> None:
    """S9.4: a NEW partition's first leader and ISR; its state znode is created (staged)."""
    ctx = s.ctx
    existing = s.prefetched_states.pop(tp) if tp in s.prefetched_states else s.zk.get_partition_state(*tp)
    if existing is not None:
        # Written before (a previous controller, or a lost reply): take it as it is.
        ctx.leadership[tp] = existing
        transition(s, tp, PartitionState.OFFLINE)
        trigger_online_partition_state_change(s, [tp])
        return
    lai = initial_leader_and_isr(ctx.replicas(tp), ctx.serving_broker_ids)
    if lai is None:
        log.warning("controller: no live replica for new partition %s-%d (replicas %s)", tp[0], tp[1],
                    ctx.replicas(tp))
        return
    state = LeaderIsrAndControllerEpoch(lai.with_zk_version(0), ctx.epoch)
    for parent in (TopicPartitionsZNode.path(tp[0]), f"{TopicPartitionsZNode.path(tp[0])}/{tp[1]}"):
        exists = s.prefetched_paths.get(parent)
        if parent not in s.plan.created and not (s.zk.path_exists(parent) if exists is None else exists):
            s.plan.stage(ZkWrite("create", parent))
            s.plan.created.add(parent)
    s.plan.stage(ZkWrite("create", TopicPartitionStateZNode.path(*tp), TopicPartitionStateZNode.encode(state)))
    ctx.leadership[tp] = state
    transition(s, tp, PartitionState.ONLINE)
    for r in ctx.replicas(tp):
        replica_transition(s, tp, r, ReplicaState.ONLINE if r in ctx.live_brokers else ReplicaState.OFFLINE)
    s.plan.batch.add_leader_and_isr(set(ctx.replicas(tp)), tp, ctx, is_new=True)


def mark_offline(s: Scope, tp: TopicPartition) -> None:
    """S7.3: no replica may lead; record leader -1 (unless already so)."""
    live = s.ctx.serving_broker_ids

    def compute(current: LeaderAndIsr) -> LeaderAndIsr | None:
        if current.leader == NO_LEADER:
            return None
        return offline_leader_and_isr(current, live)

    if not change_leadership(s, tp, compute):
        transition(s, tp, PartitionState.OFFLINE)
    log.warning("controller: %s-%d is offline: no in-sync replica is alive", tp[0], tp[1],
                extra={"event": "offline", "topic": tp[0], "partition": tp[1]})


def trigger_online_partition_state_change(s: Scope, only: Iterable[TopicPartition] | None = None) -> None:
    """NEW and OFFLINE partitions -> ONLINE where a leader can be found (S7.2, S7.3, S9.4)."""
    ctx = s.ctx
    candidates = list(only) if only is not None else ctx.all_partitions()
    prefetch_new_partitions(s, [tp for tp in candidates if tp[0] not in ctx.topics_to_be_deleted
                                and ctx.partition_states.get(tp) is PartitionState.NEW])
    for tp in candidates:
        if tp[0] in ctx.topics_to_be_deleted:
            continue
        state = ctx.partition_states.get(tp)
        if state is PartitionState.NEW:
            initialize_leadership(s, tp)
            continue
        needs_leader = state is PartitionState.OFFLINE or (
            state is PartitionState.ONLINE and ctx.leadership[tp].leader_and_isr.leader not in ctx.serving_broker_ids)
        if needs_leader and not elect(s, tp, ElectionStrategy.OFFLINE):
            mark_offline(s, tp)
