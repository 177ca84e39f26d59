"""Metadata and DescribeReplicas: what a client learns of the cluster from one broker.

Theory of operation
-------------------
Metadata answers from the broker's ``MetadataCache`` (filled by the controller's
UpdateMetadata), never from ZooKeeper: brokers as the client's listener reaches them (Kafka
answers with the listener the request came in on), topics the caller may Describe (S12.3), and
auto-creation where it is allowed. A request naming up to a million topics is within the limits
(SPEC S15.2): the answer is built a slice at a time, the loop free between slices.
DescribeReplicas is the project's view of this broker's replicas (``minikafka top``,
verify-replicas): leader, epochs, offsets, ISR and each follower's progress.

Taken out of ``broker.server.kafka_server`` (issue 28: the server only wires); its collaborators are passed in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from broker.network.kafka_wire import METADATA_SLICE
from broker.network.request_guard import judge_names
from broker.security.authorizer import TOPIC
from broker.security.principal import PLAINTEXT, SSL, RequestContext
from broker.server.metadata_cache import MetadataCache
from proto import errors
from proto import minikafka_pb2 as pb
from zk.data import Endpoint

if TYPE_CHECKING:
    from broker.replication.replica_manager import ReplicaManager
    from broker.security.gatekeeper import Gatekeeper
    from broker.server.admin import AdminManager
    from broker.server.config import BrokerConfig
    from broker.server.observability import EventBuffer

E = pb.ErrorCode


class MetadataApis:
    def __init__(self, *, broker_id: int, config: BrokerConfig, metadata: MetadataCache, gate: Gatekeeper,
                 admin: AdminManager, replica_manager: ReplicaManager, events: EventBuffer,
                 cluster_id: Callable[[], str], registered: Callable[[], bool],
                 advertised_endpoints: Callable[[], tuple[Endpoint, ...]],
                 controller_active: Callable[[], bool], controller_epoch: Callable[[], int],
                 now_ms: Callable[[], int]) -> None:
        self.broker_id = broker_id
        self.config = config
        self.metadata = metadata
        self.gate = gate
        self.admin = admin
        self.replica_manager = replica_manager
        self.events = events
        self.cluster_id = cluster_id
        self.registered = registered
        self.advertised_endpoints = advertised_endpoints
        self.controller_active = controller_active
        self.controller_epoch = controller_epoch
        self.now_ms = now_ms

    def endpoint_of(self, broker_id: int, listener: str) -> pb.BrokerEndpoint | None:
        """Broker ``broker_id`` as a client of ``listener`` reaches it (the group coordinator's address)."""
        b = self.metadata.brokers.get(broker_id)
        return None if b is None else self._endpoint_on(b, listener)

    async def handle_metadata(self, req: pb.MetadataRequest, ctx: RequestContext) -> pb.MetadataResponse:
        md = self.metadata
        resp = pb.MetadataResponse(cluster_id=self.cluster_id(), controller_id=md.controller_id,
                                   controller_epoch=md.controller_epoch)
        kafka_produce = self._kafka_produce_listener(ctx)
        brokers = [b for b in (self._endpoint_on(b, ctx.listener, kafka_produce) for b in md.brokers.values())
                   if b is not None]
        if not brokers and self.registered():
            own = next((e for e in self.advertised_endpoints() if e.name == ctx.listener), None)
            if own is not None:
                brokers = [pb.BrokerEndpoint(broker_id=self.broker_id, host=own.host, port=own.port)]
        resp.brokers.extend(sorted(brokers, key=lambda b: b.broker_id))
        gate = self.gate
        names: Sequence[str]
        if req.all_topics:
            names = [t for t in md.topics() if gate.allowed(ctx, "Describe", TOPIC, t)]
            verdicts = [E.NONE] * len(names)
        elif len(req.topics) > self.config.max_request_partitions:
            # judge_names's answer to too many names (each refused), without copying a million of them.
            names = req.topics
            verdicts = [E.INVALID_REQUEST] * len(names)
        else:
            names = list(req.topics)
            verdicts = judge_names(names, self.config.max_request_partitions)
        work = 0  # topics and partitions added since the loop last let other work run
        for name, verdict in zip(names, verdicts, strict=True):
            work += 1
            if work >= METADATA_SLICE:  # a request may name a million topics (SPEC S15.2)
                work = 0
                await asyncio.sleep(0)
            tm = resp.topics.add(name=name)
            if verdict == E.NONE and not gate.allowed(ctx, "Describe", TOPIC, name):
                verdict = E.TOPIC_AUTHORIZATION_FAILED
            if verdict != E.NONE:
                tm.error_code = verdict
                continue
            parts = md.partitions.get(name)
            if parts is None:
                may_create = gate.cluster_allowed(ctx, "Create") or gate.allowed(ctx, "Create", TOPIC, name)
                if self.config.auto_create_topics_enable and req.allow_auto_topic_creation and may_create:
                    await self.admin.auto_create(name)
                    tm.error_code = E.LEADER_NOT_AVAILABLE
                else:
                    tm.error_code = E.UNKNOWN_TOPIC_OR_PARTITION
                continue
            work += len(parts)
            for p, info in sorted(parts.items()):
                tm.partitions.add(error_code=E.LEADER_NOT_AVAILABLE if info.leader < 0 else E.NONE, partition=p,
                                  leader=info.leader, leader_epoch=info.leader_epoch, replicas=info.replicas,
                                  isr=info.isr, offline_replicas=info.offline_replicas)
        return resp

    @staticmethod
    def _endpoint_on(b: pb.BrokerEndpoint, listener: str, kafka_produce: str | None = None) -> pb.BrokerEndpoint | None:
        """Broker ``b`` as a client on ``listener`` reaches it (Kafka answers with the listener the
        request came in on), with its Kafka listener ``kafka_produce`` if it has one; None when ``b``
        has no such listener."""
        for x in b.listeners:
            if x.name == listener:
                out = pb.BrokerEndpoint(broker_id=b.broker_id, host=x.host, port=x.port, rack=b.rack)
                k = next((k for k in b.listeners if k.name == kafka_produce), None)
                if k is not None:
                    out.kafka_produce_host, out.kafka_produce_port = k.host, k.port
                return out
        return None if b.listeners else b

    def _kafka_produce_listener(self, ctx: RequestContext) -> str | None:
        """The Kafka listener that a client of ``ctx``'s gRPC listener may send its Produce requests
        to: the first with the same security protocol, PLAINTEXT or SSL - so the same principal
        (anonymous, or the certificate's) under the same ACLs (the gatekeeper requires client
        certificates on both alike). SASL_SSL clients stay on gRPC (the project's producer speaks no
        SASL on a plain socket), and so does anything on the inter-broker listener. Listener names
        are the same on every broker, as Kafka assumes."""
        proto = ctx.security_protocol
        if ctx.inter_broker or proto not in (PLAINTEXT, SSL):
            return None
        return next((x.name for x in self.config.kafka_listener_list if x.security_protocol == proto), None)

    def handle_describe_replicas(self, req: pb.DescribeReplicasRequest,
                                 ctx: RequestContext) -> pb.DescribeReplicasResponse:
        if not self.gate.cluster_allowed(ctx, "Describe"):
            raise errors.ClusterAuthorizationFailedError(f"{ctx.principal} may not describe the cluster")
        rm = self.replica_manager
        t = self.now_ms()
        resp = pb.DescribeReplicasResponse(broker_id=self.broker_id, is_controller=self.controller_active(),
                                           controller_epoch=max(rm.controller_epoch, self.controller_epoch()))
        wanted = set(req.topics)
        for (topic, part), p in sorted(rm.partitions.items()):
            if wanted and topic not in wanted:
                continue
            lg = p.log
            r = resp.replicas.add(topic=topic, partition=part, is_leader=p.is_leader, leader=p.leader_id,
                                  leader_epoch=p.leader_epoch, log_start_offset=lg.log_start_offset,
                                  log_end_offset=lg.log_end_offset, high_watermark=lg.high_watermark,
                                  replicas=p.replicas, isr=p.isr, size_bytes=lg.size, segments=len(lg.segments))
            if p.leader_state is not None:
                for fid, prog in sorted(p.leader_state.followers.items()):
                    r.followers.add(broker_id=fid, log_end_offset=prog.log_end_offset,
                                    last_caught_up_ms_ago=t - p.leader_state.caught_up_time_ms(prog)
                                    if p.leader_state.caught_up_time_ms(prog) else -1)
        for ev in self.events.latest(req.max_events):
            resp.events.add(timestamp_ms=ev.timestamp_ms, broker_id=self.broker_id, kind=ev.kind, topic=ev.topic,
                            partition=ev.partition, detail=ev.detail)
        return resp
