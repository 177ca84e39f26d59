"""Topic deletion (SPEC S9.5, Kafka's TopicDeletionManager).

Theory of operation: a name under /admin/delete_topics marks the topic; every replica goes
OFFLINE -> DELETION_STARTED with a StopReplica(delete) to its broker (DELETION_INELIGIBLE while
its broker is down, retried when it returns). Each successful StopReplica response moves the
replica to DELETION_SUCCESSFUL; when none is left the topic's znodes are removed (a clean-up
after the event's commit) and the topic leaves the context.
"""

from __future__ import annotations

import logging

from controller.partition_state_machine import Scope, replica_transition
from controller.plan import DeleteTopicRequest, DeleteTopicZNodes
from controller.state_machine import ReplicaState
from proto import minikafka_pb2 as pb

log = logging.getLogger(__name__)


def on_topic_deletion(s: Scope, requested: list[str], delete_topic_enable: bool) -> None:
    ctx = s.ctx
    for topic in requested:
        if not delete_topic_enable:
            log.info("controller: ignoring deletion of %s: delete.topic.enable is false", topic)
            s.plan.cleanups.append(DeleteTopicRequest(topic))
            continue
        if topic not in ctx.assignments:
            s.plan.cleanups.append(DeleteTopicRequest(topic))
            continue
        ctx.topics_to_be_deleted.add(topic)
        s.plan.batch.deleted_topics.add(topic)
        pending = ctx.deletion_pending.setdefault(topic, set())
        for tp in ctx.partitions_of(topic):
            for r in ctx.replicas(tp):
                if ctx.replica_states.get((tp, r)) is ReplicaState.DELETION_SUCCESSFUL:
                    continue
                pending.add((tp, r))
                if ctx.replica_states.get((tp, r)) is not ReplicaState.DELETION_STARTED:
                    replica_transition(s, tp, r, ReplicaState.OFFLINE)
                if r in ctx.live_brokers:
                    replica_transition(s, tp, r, ReplicaState.DELETION_STARTED)
                    s.plan.batch.add_stop_replica([r], tp, True, ctx)
                else:
                    replica_transition(s, tp, r, ReplicaState.DELETION_INELIGIBLE)
        log.info("controller: deleting topic %s", topic)
    if s.plan.batch.deleted_topics:
        s.plan.batch.add_update_metadata(set(ctx.live_brokers), [])
    maybe_complete_deletions(s)


def on_stop_replica_response(s: Scope, broker_id: int, response: pb.StopReplicaResponse) -> None:
    ctx = s.ctx
    for pe in response.partition_errors:
        tp = (pe.topic_name, pe.partition_index)
        pending = ctx.deletion_pending.get(tp[0])
        if pending is None:
            continue
        started = ctx.replica_states.get((tp, broker_id)) is ReplicaState.DELETION_STARTED
        if pe.error_code == pb.ErrorCode.NONE and started:
            pending.discard((tp, broker_id))
            replica_transition(s, tp, broker_id, ReplicaState.DELETION_SUCCESSFUL)
    maybe_complete_deletions(s)


def maybe_complete_deletions(s: Scope) -> None:
    ctx = s.ctx
    for topic, pending in list(ctx.deletion_pending.items()):
        if pending:
            continue
        del ctx.deletion_pending[topic]
        s.plan.cleanups.append(DeleteTopicZNodes(topic))
        ctx.remove_topic(topic)
        log.info("controller: topic %s deleted", topic)
