"""Controlled shutdown (Kafka's ControlledShutdown handling): leaderships move away first.

Theory of operation: a broker about to stop asks the controller (on the control-plane listener,
as itself, with its current broker epoch). The controller marks it shutting down, elects other
leaders for the partitions it leads (from the ISR, never it) and takes it out of the ISR of the
others (StopReplica without delete); the answer lists what it still leads (empty: go).
"""

from __future__ import annotations

import logging

from controller.partition_state_machine import Scope, change_leadership, elect, without
from controller.state_machine import ElectionStrategy
from proto import minikafka_pb2 as pb

log = logging.getLogger(__name__)


def on_controlled_shutdown(s: Scope, broker_id: int, broker_epoch: int) -> pb.ControlledShutdownResponse:
    ctx = s.ctx
    reg = ctx.live_brokers.get(broker_id)
    if reg is None:
        return pb.ControlledShutdownResponse(error_code=pb.ErrorCode.BROKER_NOT_AVAILABLE)
    if broker_epoch != reg.epoch:
        # S12.2: no value skips the fence; only the broker's current incarnation may ask.
        return pb.ControlledShutdownResponse(error_code=pb.ErrorCode.STALE_BROKER_EPOCH)
    ctx.shutting_down_broker_ids.add(broker_id)
    log.info("controller: controlled shutdown of broker %d", broker_id)
    for tp in ctx.partitions_on_broker(broker_id):
        st = ctx.leadership.get(tp)
        if st is None or len(ctx.replicas(tp)) < 2:
            continue
        if st.leader_and_isr.leader == broker_id:
            elect(s, tp, ElectionStrategy.CONTROLLED_SHUTDOWN)
        else:
            s.plan.batch.add_stop_replica([broker_id], tp, False, ctx)
            change_leadership(s, tp, lambda cur: without(cur, {broker_id}))
    resp = pb.ControlledShutdownResponse(error_code=pb.ErrorCode.NONE)
    for t, p in ctx.partitions_led_by(broker_id):
        resp.remaining_partitions.add(topic_name=t, partition_index=p)
    return resp
