"""Partition reassignment as Kafka 2.4+ does it in ZooKeeper mode (KIP-455; SPEC S9.6).

Theory of operation: a reassignment of a partition to the target replicas TRS (from the API's
``ApiPartitionReassignment`` event or from /admin/reassign_partitions) makes its replica set
RS = TRS + ORS (each broker once, target first) with AR = RS - ORS being added and
RR = RS - TRS being removed. RS, AR and RR are written to the topic's assignment znode (its
version 2 fields ``adding_replicas`` / ``removing_replicas``) in the event's commit, so that the
original set ORS = RS - AR survives a controller failover and a cancel can go back to it. The
replicas new to RS enter the replica state machine and learn the set from a LeaderAndIsr with a
bumped leader epoch. Once every target replica is in the ISR: a leader from the target if the
current one must go, ISR := ISR within the target, RS := TRS (AR and RR gone), StopReplica(delete)
to the removed replicas.

A new target for a partition already moving replaces its target: RS := TRS' + ORS, and the
replicas being added that are no longer wanted are stopped and deleted at once (Kafka's
updateCurrentReassignment). A cancel (no target) is a reassignment back to ORS: the adding replicas
are stopped and deleted, leadership moves into ORS if an adding replica leads, RS := ORS and AR/RR
are removed - in one commit (``on_partition_reassignment``).

The decisions are pure (``refusal``, ``build_reassignment``, ``is_complete``, ``leadership_for``);
the rest stages their writes and requests on the event's scope (controller.partition_state_machine).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence

from controller.partition_state_machine import Scope, change_leadership, replica_transition
from controller.plan import RewriteReassignment
from controller.state_machine import ReplicaState
from proto import minikafka_pb2 as pb
from proto.names import TopicPartition
from zk.client import ZkWrite
from zk.data import NO_LEADER, LeaderAndIsr, ReplicaAssignment, TopicPartitionId, TopicZNode

log = logging.getLogger(__name__)

E = pb.ErrorCode
# A partition's answer: (wire error code, message).
Result = tuple[int, str]
ACCEPTED: Result = (E.NONE, "")


# ------------------------------------------------------------------ pure decisions


def refusal(target: Sequence[int] | None, live: Collection[int]) -> str | None:
    """Why a target replica list is refused (INVALID_REPLICA_ASSIGNMENT; Kafka's validateReplicas),
    None when it is fine. No target is a cancel, never refused here."""
    if target is None:
        return None
    if not target:
        return "Empty replica list specified in partition reassignment."
    if len(set(target)) != len(target):
        return f"Duplicate replica ids in partition reassignment replica list: {list(target)}"
    if any(r < 0 for r in target):
        return f"Invalid broker id in replica list: {list(target)}"
    missing = sorted(set(target) - set(live))
    if missing:
        return f"brokers {missing} are not live (replica list {list(target)}, live brokers {sorted(live)})"
    return None


def build_reassignment(current: ReplicaAssignment, target: Sequence[int] | None) -> ReplicaAssignment | None:
    """Kafka's maybeBuildReassignment: the replica assignment a request leads to. A target gives
    RS = TRS + ORS (a new target of a moving partition replaces its target); no target is a cancel:
    back to ORS if the partition is moving, None (NO_REASSIGNMENT_IN_PROGRESS) if it is not."""
    if target is None:
        return current.reassign_to(current.origin) if current.being_reassigned else None
    return current.reassign_to(target)


def is_complete(assignment: ReplicaAssignment, isr: Collection[int]) -> bool:
    """Every target replica has caught up (Kafka's isReassignmentComplete)."""
    return set(assignment.target) <= set(isr)


def leadership_for(current: LeaderAndIsr, replicas: Sequence[int], live: Collection[int]) -> LeaderAndIsr | None:
    """The leader and ISR once the replica set is ``replicas``, at a new leader epoch (every replica
    learns the set): the ISR cut to ``replicas``; the leader kept if it is one of them and live,
    otherwise the first of ``replicas`` that is live and in the ISR (Kafka's reassignment election).
    A partition without a leader stays so. None when a leader must be found and none can be."""
    isr = tuple(r for r in current.isr if r in replicas)
    if current.leader == NO_LEADER:
        return current.new_leader_and_isr(NO_LEADER, isr or current.isr)
    if current.leader in replicas and current.leader in live:
        return current.new_leader_and_isr(current.leader, isr)
    leader = next((r for r in replicas if r in live and r in current.isr), NO_LEADER)
    if leader == NO_LEADER:
        return None
    return current.new_leader_and_isr(leader, isr)


# ------------------------------------------------------------------ staged on an event's scope


def on_partition_reassignment(s: Scope, requested: Mapping[TopicPartition, Sequence[int] | None], *,
                              from_zk: bool = False) -> dict[TopicPartition, Result]:
    """Start, replace or cancel (target None) each partition's reassignment; its answer per partition.

    ``from_zk``: the targets come from /admin/reassign_partitions, where a partition stays until its
    reassignment completes - seen again, the same target is left to run; refused ones leave the
    znode. Partitions an API request reassigned leave it too (the latest request wins)."""
    results = {tp: _reassign(s, tp, target, from_zk) for tp, target in requested.items()}
    leave = [tp for tp, (code, _m) in results.items() if code != E.NONE or not from_zk]
    leave_zk_reassignment(s, leave)
    return results


def _reassign(s: Scope, tp: TopicPartition, target: Sequence[int] | None, from_zk: bool) -> Result:
    ctx = s.ctx
    st = ctx.leadership.get(tp)
    if st is None or not ctx.replicas(tp) or tp[0] in ctx.topics_to_be_deleted:
        return E.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
    why = refusal(target, ctx.live_brokers)
    if why is not None:
        log.warning("controller: refusing the reassignment of %s-%d: %s", tp[0], tp[1], why)
        return E.INVALID_REPLICA_ASSIGNMENT, why
    current = ctx.full_assignment(tp)
    new = build_reassignment(current, target)
    if new is None:
        return E.NO_REASSIGNMENT_IN_PROGRESS, "No reassignment in progress for this partition."
    if from_zk and tp in ctx.reassignments and new == current:
        return ACCEPTED  # the znode's own reassignment, running already
    live = ctx.serving_broker_ids
    if leadership_for(st.leader_and_isr, new.replicas, live) is None:
        # Kafka would take the partition offline; refusing keeps its in-sync replicas leading.
        return (E.REASSIGNMENT_IN_PROGRESS,
                f"no replica of {list(new.replicas)} is live and in sync to take over leadership; try again later")
    unneeded = [r for r in current.replicas if r not in new.replicas]
    if new != current:
        set_replicas(s, tp, list(new.replicas), new.adding, new.removing)
    ctx.reassignments[tp] = (new.adding, new.removing)
    # A new leader epoch tells every replica of RS the new set (the new ones start fetching); a
    # leader no longer in RS hands over to one that is.
    change_leadership(s, tp, lambda cur: leadership_for(cur, new.replicas, live))
    if unneeded:
        s.plan.batch.add_stop_replica(unneeded, tp, True, ctx)
        for r in unneeded:
            ctx.replica_states.pop((tp, r), None)
    for r in new.replicas:
        if r not in current.replicas:
            replica_transition(s, tp, r, ReplicaState.NEW)
            replica_transition(s, tp, r, ReplicaState.ONLINE)
    if target is None:
        log.info("controller: reassignment of %s-%d cancelled: back to %s (stopped %s)", tp[0], tp[1],
                 list(new.replicas), unneeded)
    else:
        log.info("controller: reassigning %s-%d from %s to %s (replicas %s, adding %s, removing %s)", tp[0], tp[1],
                 list(current.origin), list(target), list(new.replicas), list(new.adding), list(new.removing))
    maybe_complete_reassignment(s, tp)
    return ACCEPTED


def set_replicas(s: Scope, tp: TopicPartition, replicas: list[int], adding: Sequence[int] = (),
                 removing: Sequence[int] = ()) -> None:
    """Stage the topic's assignment znode with ``tp``'s new RS, AR and RR (conditional on its version)."""
    ctx = s.ctx
    assignment = dict(ctx.assignments[tp[0]])
    assignment[tp[1]] = list(replicas)
    if adding or removing:
        ctx.reassignments[tp] = (tuple(adding), tuple(removing))
    elif ctx.reassignments.get(tp, ((), ())) != ((), ()):
        ctx.reassignments[tp] = ((), ())
    version = ctx.assignment_versions.get(tp[0], -1)
    s.plan.stage(ZkWrite("set", TopicZNode.path(tp[0]), TopicZNode.encode(assignment, *ctx.moving(tp[0])), version))
    if version >= 0:
        ctx.assignment_versions[tp[0]] = version + 1
    ctx.assignments[tp[0]] = assignment


def maybe_complete_reassignment(s: Scope, tp: TopicPartition) -> None:
    """Once every target replica is in the ISR: RS := TRS, a leader from the target, the removed
    replicas stopped and deleted (Kafka's onPartitionReassignment, steps B1-B8)."""
    ctx = s.ctx
    st = ctx.leadership.get(tp)
    if tp not in ctx.reassignments or st is None:
        return
    full = ctx.full_assignment(tp)
    target = list(full.target)
    live = ctx.serving_broker_ids
    if not is_complete(full, st.leader_and_isr.isr) or leadership_for(st.leader_and_isr, target, live) is None:
        return
    if not change_leadership(s, tp, lambda cur: leadership_for(cur, target, live)):
        return
    dropped = [r for r in full.replicas if r not in target]
    if list(full.replicas) != target or full.being_reassigned:
        set_replicas(s, tp, target)
    s.plan.batch.add_stop_replica(dropped, tp, True, ctx)
    for r in dropped:
        ctx.replica_states.pop((tp, r), None)
    s.plan.batch.add_leader_and_isr(set(target), tp, ctx)
    del ctx.reassignments[tp]
    leave_zk_reassignment(s, [tp])
    log.info("controller: reassignment of %s-%d to %s complete", tp[0], tp[1], target)


def leave_zk_reassignment(s: Scope, tps: Sequence[TopicPartition]) -> None:
    """After the commit, these partitions leave /admin/reassign_partitions (if they are there)."""
    if not tps:
        return
    done = frozenset(TopicPartitionId(*tp) for tp in tps)
    for i, c in enumerate(s.plan.cleanups):
        if isinstance(c, RewriteReassignment):
            s.plan.cleanups[i] = RewriteReassignment(c.done | done)
            return
    s.plan.cleanups.append(RewriteReassignment(done))


def resume_reassignments(s: Scope) -> None:
    """After a failover: the partitions the topic znodes show moving may have caught up meanwhile."""
    for tp in sorted(s.ctx.reassignments):
        maybe_complete_reassignment(s, tp)
