"""Controller-to-broker requests (Kafka's ControllerChannelManager + ControllerBrokerRequestBatch).

Each live broker gets a sender thread with its own queue, so requests to one
broker go out in order and a slow or dead broker never blocks the controller's
event thread or the other brokers. A request is retried until it is answered
or the broker is removed (its death is the controller's business, seen through
ZooKeeper). Responses are handed to a callback, which enqueues an event.

``RequestBatch`` collects, while one event is processed, the LeaderAndIsr,
StopReplica and UpdateMetadata work per broker, and sends it as one request of
each kind per broker - many partitions per RPC (SPEC S7.2).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from controller.context import ControllerContext
from proto import minikafka_pb2 as pb
from proto import minikafka_pb2_grpc as pb_grpc
from proto.grpc_options import CHANNEL_OPTIONS
from proto.names import TopicPartition
from proto.transport import PLAINTEXT_SECURITY, ChannelSecurity
from zk.data import BrokerRegistration

log = logging.getLogger(__name__)

Callback = Callable[[int, Any], None]


@dataclass
class _Request:
    method: str
    request: Any
    callback: Callback | None


class _BrokerSender:
    def __init__(self, reg: BrokerRegistration, timeout_s: float, security: ChannelSecurity, listener: str) -> None:
        self.reg = reg
        self.timeout_s = timeout_s
        self.queue: queue.Queue[_Request | None] = queue.Queue()
        # The broker's control-plane listener, mutual TLS with the controller's broker certificate.
        control = reg.endpoint(listener)
        self.channel = security.channel(control.address if control is not None else reg.address,
                                        options=CHANNEL_OPTIONS)
        self.stub = pb_grpc.BrokerControlStub(self.channel)  # type: ignore[no-untyped-call]
        self.running = True
        self.thread = threading.Thread(target=self._run, name=f"controller-to-broker-{reg.broker_id}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while self.running:
            item = self.queue.get()
            if item is None:
                break
            backoff = 0.05
            while self.running:
                try:
                    resp = getattr(self.stub, item.method)(item.request, timeout=self.timeout_s)
                except grpc.RpcError as e:
                    log.debug("%s to broker %d failed: %s; retrying", item.method, self.reg.broker_id, e)
                    threading.Event().wait(backoff)
                    backoff = min(1.0, backoff * 2)
                    continue
                if item.callback is not None:
                    item.callback(self.reg.broker_id, resp)
                break
        self.channel.close()

    def stop(self) -> None:
        self.running = False
        self.queue.put(None)


class ControllerChannelManager:
    def __init__(self, timeout_ms: int, security: ChannelSecurity = PLAINTEXT_SECURITY,
                 control_plane_listener: str = "") -> None:
        self.timeout_s = timeout_ms / 1000.0
        self.security = security
        self.control_plane_listener = control_plane_listener
        self._senders: dict[int, _BrokerSender] = {}

    def add_broker(self, reg: BrokerRegistration) -> None:
        old = self._senders.get(reg.broker_id)
        if old is not None:
            if old.reg == reg:
                return
            old.stop()
        self._senders[reg.broker_id] = _BrokerSender(reg, self.timeout_s, self.security, self.control_plane_listener)

    def remove_broker(self, broker_id: int) -> None:
        sender = self._senders.pop(broker_id, None)
        if sender is not None:
            sender.stop()

    def send(self, broker_id: int, method: str, request: Any, callback: Callback | None = None) -> None:
        sender = self._senders.get(broker_id)
        if sender is None:
            log.debug("dropping %s to broker %d: not live", method, broker_id)
            return
        sender.queue.put(_Request(method, request, callback))

    def shutdown(self) -> None:
        for broker_id in list(self._senders):
            self.remove_broker(broker_id)


def endpoint(reg: BrokerRegistration) -> pb.BrokerEndpoint:
    """A broker as other brokers see it: its inter-broker address, every listener, its epoch."""
    return pb.BrokerEndpoint(broker_id=reg.broker_id, host=reg.host, port=reg.port, rack=reg.rack or "",
                             broker_epoch=reg.epoch, replica_fetch_port=reg.replica_fetch_port, listeners=[
                                 pb.ListenerEndpoint(name=e.name, host=e.host, port=e.port,
                                                     security_protocol=e.security_protocol) for e in reg.listeners])


@dataclass
class RequestBatch:
    controller_id: int
    leader_and_isr: dict[int, dict[TopicPartition, bool]] = field(default_factory=dict)
    stop_replica: dict[int, dict[TopicPartition, bool]] = field(default_factory=dict)
    update_metadata_brokers: set[int] = field(default_factory=set)
    update_metadata_partitions: set[TopicPartition] = field(default_factory=set)
    deleted_topics: set[str] = field(default_factory=set)

    def add_leader_and_isr(self, brokers: set[int] | list[int], tp: TopicPartition, ctx: ControllerContext,
                           is_new: bool = False) -> None:
        """LeaderAndIsr for ``tp`` to ``brokers``, and UpdateMetadata for it to every live broker."""
        for b in brokers:
            if b in ctx.live_brokers:
                self.leader_and_isr.setdefault(b, {})[tp] = is_new
        self.add_update_metadata(set(ctx.live_brokers), [tp])

    def add_stop_replica(self, brokers: set[int] | list[int], tp: TopicPartition, delete: bool,
                         ctx: ControllerContext) -> None:
        for b in brokers:
            if b in ctx.live_brokers:
                self.stop_replica.setdefault(b, {})[tp] = delete

    def add_update_metadata(self, brokers: set[int], partitions: list[TopicPartition]) -> None:
        self.update_metadata_brokers |= brokers
        self.update_metadata_partitions.update(partitions)

    def _update_metadata(self, ctx: ControllerContext, live: list[pb.BrokerEndpoint]) -> pb.UpdateMetadataRequest:
        ureq = pb.UpdateMetadataRequest(controller_id=self.controller_id, controller_epoch=ctx.epoch,
                                       live_brokers=live, deleted_topics=sorted(self.deleted_topics))
        for tp in sorted(self.update_metadata_partitions):
            st = ctx.leadership.get(tp)
            if st is None or tp[0] in self.deleted_topics:
                continue
            lai = st.leader_and_isr
            replicas = ctx.replicas(tp)
            ureq.partition_states.add(topic_name=tp[0], partition_index=tp[1],
                                      controller_epoch=st.controller_epoch, leader=lai.leader,
                                      leader_epoch=lai.leader_epoch, isr=list(lai.isr),
                                      zk_version=lai.zk_version, replicas=replicas,
                                      offline_replicas=[r for r in replicas if r not in ctx.live_brokers])
        return ureq

    def send(self, ctx: ControllerContext, channel: ControllerChannelManager,
             stop_replica_callback: Callback | None = None) -> None:
        live = [endpoint(r) for _, r in sorted(ctx.live_brokers.items())]
        for broker_id, tps in self.leader_and_isr.items():
            req = pb.LeaderAndIsrRequest(controller_id=self.controller_id, controller_epoch=ctx.epoch,
                                         broker_epoch=ctx.live_brokers[broker_id].epoch)
            leaders: set[int] = set()
            for tp, is_new in sorted(tps.items()):
                st = ctx.leadership.get(tp)
                if st is None:
                    continue
                lai = st.leader_and_isr
                leaders.add(lai.leader)
                adding, removing = ctx.reassignments.get(tp, ((), ()))
                req.partition_states.add(topic_name=tp[0], partition_index=tp[1],
                                         controller_epoch=st.controller_epoch, leader=lai.leader,
                                         leader_epoch=lai.leader_epoch, isr=list(lai.isr),
                                         zk_version=lai.zk_version, replicas=ctx.replicas(tp), is_new=is_new,
                                         adding_replicas=list(adding), removing_replicas=list(removing))
            req.live_leaders.extend(endpoint(ctx.live_brokers[b]) for b in sorted(leaders) if b in ctx.live_brokers)
            channel.send(broker_id, "LeaderAndIsr", req)
        # One UpdateMetadata built, then copied per broker with its broker epoch (a C-level copy):
        # building it per broker was most of sending a failover's 10,000 partitions (issue 29).
        template: pb.UpdateMetadataRequest | None = None
        for broker_id in sorted(self.update_metadata_brokers):
            if broker_id not in ctx.live_brokers:
                continue
            if template is None:
                template = self._update_metadata(ctx, live)
            ureq = pb.UpdateMetadataRequest()
            ureq.CopyFrom(template)
            ureq.broker_epoch = ctx.live_brokers[broker_id].epoch
            channel.send(broker_id, "UpdateMetadata", ureq)
        for broker_id, stops in self.stop_replica.items():
            if broker_id not in ctx.live_brokers:
                continue
            sreq = pb.StopReplicaRequest(controller_id=self.controller_id, controller_epoch=ctx.epoch,
                                         broker_epoch=ctx.live_brokers[broker_id].epoch)
            for tp, delete in sorted(stops.items()):
                st = ctx.leadership.get(tp)
                sreq.partitions.add(topic_name=tp[0], partition_index=tp[1], delete_partition=delete,
                                    leader_epoch=st.leader_and_isr.leader_epoch if st else -1)
            channel.send(broker_id, "StopReplica", sreq, stop_replica_callback)
