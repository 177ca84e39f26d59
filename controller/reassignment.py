"""Partition reassignment, Kafka 2.x's ZooKeeper way (SPEC S9.6).

Theory of operation: /admin/reassign_partitions names targets. For each partition: AR := OAR +
RAR (the assignment znode written, conditional on its version, in the event's commit; the
replicas new to it enter the replica state machine and are told by a LeaderAndIsr with a bumped
leader epoch); once every target replica is in the ISR: a leader from the target if the current
one must go, ISR := ISR within the target, AR := RAR, StopReplica(delete) to the dropped
replicas. Finished and refused partitions leave the znode (a clean-up after the commit).
"""

from __future__ import annotations

import logging

from controller.partition_state_machine import Scope, change_leadership, replica_transition
from controller.plan import RewriteReassignment
from controller.state_machine import ReplicaState
from proto.names import TopicPartition
from zk.client import ZkWrite
from zk.data import NO_LEADER, LeaderAndIsr, TopicPartitionId, TopicZNode

log = logging.getLogger(__name__)


def on_partition_reassignment(s: Scope, requested: dict[TopicPartitionId, list[int]]) -> None:
    ctx = s.ctx
    for tpid, target in requested.items():
        tp = (tpid.topic, tpid.partition)
        if tp in ctx.reassignments:
            continue
        current = ctx.replicas(tp)
        st = ctx.leadership.get(tp)
        reason = None
        if not current or st is None:
            reason = "unknown partition"
        elif not target or len(set(target)) != len(target):
            reason = f"bad replica list {target}"
        elif not set(target) <= set(ctx.live_brokers):
            reason = f"replicas {sorted(set(target) - set(ctx.live_brokers))} are not live"
        if reason is not None:
            log.warning("controller: ignoring reassignment of %s-%d: %s", tp[0], tp[1], reason)
            ctx.reassignments[tp] = []
            continue
        ctx.reassignments[tp] = list(target)
        if list(target) == current:
            continue
        union = current + [r for r in target if r not in current]
        set_replicas(s, tp, union)
        for r in union:
            if r not in current:
                replica_transition(s, tp, r, ReplicaState.NEW)
                replica_transition(s, tp, r, ReplicaState.ONLINE)
        log.info("controller: reassigning %s-%d from %s to %s", tp[0], tp[1], current, target)
        # Bump the epoch so every replica of the union learns the new replica set (new ones start fetching).
        change_leadership(s, tp, lambda cur: cur.new_leader_and_isr(cur.leader, cur.isr))
        maybe_complete_reassignment(s, tp)
    finish_reassignments(s)


def set_replicas(s: Scope, tp: TopicPartition, replicas: list[int]) -> None:
    ctx = s.ctx
    assignment = dict(ctx.assignments[tp[0]])
    assignment[tp[1]] = list(replicas)
    version = ctx.assignment_versions.get(tp[0], -1)
    s.plan.stage(ZkWrite("set", TopicZNode.path(tp[0]), TopicZNode.encode(assignment), version))
    if version >= 0:
        ctx.assignment_versions[tp[0]] = version + 1
    ctx.assignments[tp[0]] = assignment


def maybe_complete_reassignment(s: Scope, tp: TopicPartition) -> None:
    ctx = s.ctx
    target = ctx.reassignments.get(tp)
    st = ctx.leadership.get(tp)
    if not target or st is None or not set(target) <= set(st.leader_and_isr.isr):
        return
    old = ctx.replicas(tp)
    live = ctx.serving_broker_ids

    def compute(cur: LeaderAndIsr) -> LeaderAndIsr | None:
        leader = cur.leader if cur.leader in target and cur.leader in live else next(
            (r for r in target if r in live and r in cur.isr), NO_LEADER)
        return cur.new_leader_and_isr(leader, tuple(r for r in cur.isr if r in target))

    if not change_leadership(s, tp, compute):
        return
    set_replicas(s, tp, list(target))
    dropped = [r for r in old if r not in target]
    s.plan.batch.add_stop_replica(dropped, tp, True, ctx)
    for r in dropped:
        ctx.replica_states.pop((tp, r), None)
    s.plan.batch.add_leader_and_isr(set(target), tp, ctx)
    ctx.reassignments[tp] = []
    log.info("controller: reassignment of %s-%d to %s complete", tp[0], tp[1], target)


def finish_reassignments(s: Scope) -> None:
    """Drop completed (or refused) partitions from /admin/reassign_partitions."""
    ctx = s.ctx
    done = [tp for tp, target in ctx.reassignments.items() if not target]
    if not done:
        return
    for tp in done:
        del ctx.reassignments[tp]
    remaining = {TopicPartitionId(*tp): target for tp, target in ctx.reassignments.items()}
    s.plan.cleanups.append(RewriteReassignment(remaining))
