"""The transaction coordinator's WriteTxnMarkers client (the network half of Kafka's
``TransactionMarkerChannelManager``).

Theory of operation
-------------------
The coordinator (``txn_coordinator.py``) decides *when* markers go out and what to do with each
answer (retry, stop when fenced, complete when all are written); this module only delivers one
round: it groups the partitions by their leader in this broker's metadata cache (the controller's
UpdateMetadata, as Kafka's channel manager uses its metadata cache) and sends each leader one
``KafkaApi.WriteTxnMarkers`` on its inter-broker listener - mutual TLS with this broker's
certificate, as the replica fetchers reach leaders (the leader authorizes ClusterAction) - and
answers per partition:

* a partition of a topic the cache no longer has (deleted): NONE - it needs no marker (Kafka's
  ``removeMarkersForTxnTopicPartition``/unknown-topic rule);
* a partition with no live leader, or whose leader cannot be reached: a retriable code
  (LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT); the coordinator sends the
  round again after a backoff, by which time the controller's metadata has moved the leader;
* otherwise the leader's own answer.

A transaction's consumer-group offsets (TxnOffsetCommit) are closed the way Kafka closes them: a
marker for topic ``__consumer_offsets``, partition ``offsets_partition_for(group)``, sent to the
group's coordinator, whose WriteTxnMarkers handler hands it to the group coordinator
(``complete_group``). One channel per broker is kept open and rebuilt when its address changes.
The one network call is ``send`` (``SendMarkers``): the gRPC stub by default, a function given to
the constructor in tests (tests/unit/test_marker_sender.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

import grpc

from broker.coordinator.group.group_state import OFFSETS_TOPIC, offsets_partition_for
from broker.coordinator.transaction.txn_state import NONE, MarkerJob, TopicPartition
from broker.server.metadata_cache import MetadataCache
from proto import errors
from proto import minikafka_pb2 as pb
from proto import minikafka_pb2_grpc as pb_grpc
from proto.grpc_options import CHANNEL_OPTIONS
from proto.transport import ChannelSecurity

log = logging.getLogger(__name__)

LEADER_NOT_AVAILABLE: Final = errors.LeaderNotAvailableError.code
NOT_LEADER: Final = errors.NotLeaderOrFollowerError.code
TIMED_OUT: Final = errors.RequestTimedOutError.code
NOT_COORDINATOR: Final = errors.NotCoordinatorError.code

# (broker id, request, timeout s) -> the broker's answer; None: no address known for the broker.
# Raises grpc.aio.AioRpcError or ConnectionError when the broker cannot be reached.
SendMarkers = Callable[[int, pb.WriteTxnMarkersRequest, float], Awaitable[pb.WriteTxnMarkersResponse | None]]


class TxnMarkerSender:
    def __init__(self, metadata: MetadataCache, security: ChannelSecurity, request_timeout_ms: int,
                 group_coordinator_of: Callable[[str], int], send: SendMarkers | None = None) -> None:
        self.metadata = metadata
        self.security = security
        self.timeout_s = request_timeout_ms / 1000.0
        self.group_coordinator_of = group_coordinator_of
        self._channels: dict[int, tuple[str, grpc.aio.Channel, Any]] = {}
        self.send: SendMarkers = send or self._send_grpc

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        for _address, channel, _stub in channels.values():
            await channel.close()

    def stub(self, broker_id: int) -> Any:
        """The KafkaApi stub of ``broker_id``'s inter-broker listener (None: no address known); its
        channel is shared with the transaction verifier (``txn_verifier``)."""
        endpoint = self.metadata.endpoint(broker_id)
        if endpoint is None:
            return None
        address = f"{endpoint.host}:{endpoint.port}"
        known = self._channels.get(broker_id)
        if known is not None and known[0] == address:
            return known[2]
        if known is not None:
            asyncio.get_running_loop().create_task(known[1].close())
        channel = self.security.aio_channel(address, options=CHANNEL_OPTIONS)
        stub = pb_grpc.KafkaApiStub(channel)  # type: ignore[no-untyped-call]
        self._channels[broker_id] = (address, channel, stub)
        return stub

    async def _send_grpc(self, broker_id: int, req: pb.WriteTxnMarkersRequest,
                         timeout_s: float) -> pb.WriteTxnMarkersResponse | None:
        stub = self.stub(broker_id)
        if stub is None:
            return None
        resp: pb.WriteTxnMarkersResponse = await stub.WriteTxnMarkers(req, timeout=timeout_s)
        return resp

    async def _write(self, broker_id: int, coordinator_epoch: int, job: MarkerJob,
                     partitions: list[TopicPartition], unreachable: int) -> dict[TopicPartition, int]:
        """One WriteTxnMarkers to ``broker_id``; every partition ``unreachable`` when it fails."""
        topics: dict[str, list[int]] = {}
        for topic, partition in partitions:
            topics.setdefault(topic, []).append(partition)
        req = pb.WriteTxnMarkersRequest(markers=[pb.WritableTxnMarker(
            producer_id=job.producer_id, producer_epoch=job.producer_epoch, transaction_result=job.commit,
            coordinator_epoch=coordinator_epoch,
            topics=[pb.WritableTxnMarkerTopic(name=t, partition_indexes=ps) for t, ps in topics.items()])])
        try:
            resp = await self.send(broker_id, req, self.timeout_s + 5)
        except (grpc.aio.AioRpcError, ConnectionError) as e:
            log.info("transactional id %s: WriteTxnMarkers to broker %d failed: %s", job.transactional_id,
                     broker_id, e.code() if isinstance(e, grpc.aio.AioRpcError) else e)
            return {tp: unreachable for tp in partitions}
        if resp is None:
            return {tp: unreachable for tp in partitions}
        out = {tp: unreachable for tp in partitions}
        for m in resp.markers:
            if m.producer_id != job.producer_id:
                continue
            for t in m.topics:
                for p in t.partitions:
                    if (t.name, p.partition_index) in out:
                        out[(t.name, p.partition_index)] = int(p.error_code)
        return out

    async def send_markers(self, coordinator_epoch: int, job: MarkerJob,
                           partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """One round of markers for ``partitions``: {partition: error code} (see the module docstring)."""
        results: dict[TopicPartition, int] = {}
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            info = self.metadata.partition(*tp)
            if info is None:
                # The controller's metadata reached this broker (it knows brokers) and has no such
                # topic: deleted, so no marker is needed. Before any metadata: retried.
                known = bool(self.metadata.brokers) and not self.metadata.has_topic(tp[0])
                results[tp] = NONE if known else LEADER_NOT_AVAILABLE
            elif info.leader < 0 or info.leader not in self.metadata.brokers:
                results[tp] = LEADER_NOT_AVAILABLE
            else:
                by_leader.setdefault(info.leader, []).append(tp)
        answers = await asyncio.gather(*(self._write(leader, coordinator_epoch, job, tps, NOT_LEADER)
                                         for leader, tps in by_leader.items()))
        for answer in answers:
            results.update(answer)
        return results

    async def complete_group(self, group_id: str, coordinator_epoch: int, job: MarkerJob) -> int:
        """The transaction's outcome for ``group_id``'s pending TxnOffsetCommit offsets: a marker on
        (__consumer_offsets, the group's partition) at the group's coordinator."""
        broker = self.group_coordinator_of(group_id)
        if broker < 0:
            return errors.CoordinatorNotAvailableError.code
        tp = (OFFSETS_TOPIC, offsets_partition_for(group_id))
        return (await self._write(broker, coordinator_epoch, job, [tp], NOT_COORDINATOR))[tp]
