"""DescribeCluster, DescribeLogDirs and DescribeProducers (Kafka's api 60, 35 and 61; issue 30).

Theory of operation
-------------------
Three read-only views of one broker, answered from what it holds, never from ZooKeeper:

* DescribeCluster (Kafka's ``handleDescribeCluster``): the cluster id, the controller and the live
  brokers from the metadata cache (as the client's listener reaches them, with their racks), and -
  when asked - the operations the caller may perform on the cluster, Kafka's bit field (``1 <<``
  AclOperation code), 0 for a caller without Describe on the cluster.
* DescribeLogDirs (``handleDescribeLogDirsRequest`` / ``ReplicaManager.describeLogDirs``): every log
  directory with the replicas in it - all of them or those asked for - each with its size, its
  offset lag (``Partition.log_end_offset_lag``: 0 for a leader, a follower's distance to its
  leader's log end) and is_future false (replicas never move between directories here), and the
  file system's total and usable bytes. Describe on the cluster is required: without it the answer
  says CLUSTER_AUTHORIZATION_FAILED (Kafka 2.8 answers an empty list; v3+ of the wire says the code).
* DescribeProducers (KIP-664): per partition led here, the idempotent producers of its log's
  producer state (``broker.log.producer_state``): id, epoch, last sequence, last timestamp;
  coordinator epoch and transaction start offset -1 (no transactions). Read on the topic, else
  TOPIC_AUTHORIZATION_FAILED; a partition not led here NOT_LEADER_OR_FOLLOWER, an unknown one
  UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from broker.network.request_guard import judge_partitions
from broker.security.authorizer import TOPIC
from broker.security.principal import RequestContext
from broker.server.metadata_apis import MetadataApis
from proto import errors
from proto import minikafka_pb2 as pb

if TYPE_CHECKING:
    from broker.log.manager import LogManager
    from broker.replication.replica_manager import ReplicaManager
    from broker.security.gatekeeper import Gatekeeper
    from broker.server.config import BrokerConfig
    from broker.server.metadata_cache import MetadataCache

E = pb.ErrorCode
NOT_REQUESTED: Final = -(1 << 31)  # Kafka's Int.MinValue: authorized operations not asked for
# The operations Kafka supports on the CLUSTER resource, by AclOperation code.
CLUSTER_OPERATIONS: Final = {"Create": 5, "Alter": 7, "Describe": 8, "ClusterAction": 9, "DescribeConfigs": 10,
                             "AlterConfigs": 11, "IdempotentWrite": 12}


def operations_bit_field(allowed: Callable[[str], bool]) -> int:
    """Kafka's authorized-operations bit field of the cluster: ``1 << code`` per allowed operation."""
    return sum(1 << code for op, code in CLUSTER_OPERATIONS.items() if allowed(op))


def disk_usage(path: Path) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding ``path``; (-1, -1) when unknown."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return -1, -1
    return usage.total, usage.free


class DescribeApis:
    def __init__(self, *, config: BrokerConfig, metadata: MetadataCache, gate: Gatekeeper,
                 cluster_id: Callable[[], str], log_manager: LogManager, replica_manager: ReplicaManager) -> None:
        self.config = config
        self.metadata = metadata
        self.gate = gate
        self.cluster_id = cluster_id
        self.log_manager = log_manager
        self.replica_manager = replica_manager

    async def describe_cluster(self, req: pb.DescribeClusterRequest, ctx: RequestContext) -> pb.DescribeClusterResponse:
        md = self.metadata
        ops = NOT_REQUESTED
        if req.include_cluster_authorized_operations:
            ops = operations_bit_field(lambda op: self.gate.cluster_allowed(ctx, op)) \
                if self.gate.cluster_allowed(ctx, "Describe") else 0
        resp = pb.DescribeClusterResponse(cluster_id=self.cluster_id(), controller_id=md.controller_id,
                                          cluster_authorized_operations=ops)
        for b in sorted(md.brokers.values(), key=lambda b: b.broker_id):
            e = MetadataApis._endpoint_on(b, ctx.listener)
            if e is not None:
                resp.brokers.add(broker_id=e.broker_id, host=e.host, port=e.port, rack=e.rack)
        return resp

    async def describe_log_dirs(self, req: pb.DescribeLogDirsRequest,
                                ctx: RequestContext) -> pb.DescribeLogDirsResponse:
        if not self.gate.cluster_allowed(ctx, "Describe"):
            return pb.DescribeLogDirsResponse(error_code=E.CLUSTER_AUTHORIZATION_FAILED)
        wanted: set[tuple[str, int]] | None = None
        if not req.all_partitions:
            wanted = {(t.topic, p) for t in req.topics for p in t.partitions}
        partitions = self.replica_manager.partitions
        resp = pb.DescribeLogDirsResponse()
        for d, logs in self.log_manager.logs_by_dir().items():
            total, usable = disk_usage(d)
            r = resp.results.add(log_dir=os.path.abspath(d), total_bytes=total, usable_bytes=usable)
            by_topic: dict[str, pb.DescribeLogDirsTopicResult] = {}
            for tp, lg in logs:
                if wanted is not None and tp not in wanted:
                    continue
                p = partitions.get(tp)
                lag = p.log_end_offset_lag if p is not None else -1  # Kafka's INVALID_OFFSET_LAG: no replica
                t = by_topic.get(tp[0])
                if t is None:
                    t = by_topic[tp[0]] = r.topics.add(name=tp[0])
                t.partitions.add(partition=tp[1], size=lg.size, offset_lag=lag, is_future=False)
        return resp

    async def describe_producers(self, req: pb.DescribeProducersRequest,
                                 ctx: RequestContext) -> pb.DescribeProducersResponse:
        entries = [(t.name, p) for t in req.topics for p in t.partitions]
        verdicts = judge_partitions(entries, self.config.max_request_partitions)
        resp = pb.DescribeProducersResponse()
        by_topic: dict[str, pb.DescribeProducersTopicResult] = {}
        for (topic, partition), verdict in zip(entries, verdicts, strict=True):
            t = by_topic.get(topic)
            if t is None:
                t = by_topic[topic] = resp.topics.add(name=topic)
            out = t.partitions.add(partition=partition)
            if verdict == E.NONE and not self.gate.allowed(ctx, "Read", TOPIC, topic):
                verdict = E.TOPIC_AUTHORIZATION_FAILED
            if verdict != E.NONE:
                out.error_code = verdict
                continue
            p = self.replica_manager.partitions.get((topic, partition))
            if p is None or not p.is_leader:
                known = p is not None or self.metadata.partition(topic, partition) is not None
                e: errors.KafkaError = errors.NotLeaderOrFollowerError(
                    f"broker {self.config.broker_id} does not lead {topic}-{partition}") if known \
                    else errors.UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist")
                out.error_code, out.error_message = e.wire_code, e.message
                continue
            for pid, entry in sorted(p.log.producer_state.producers.items()):
                out.active_producers.add(producer_id=pid, producer_epoch=entry.epoch, last_sequence=entry.last_seq,
                                         last_timestamp=entry.last_timestamp,
                                         coordinator_epoch=entry.coordinator_epoch,
                                         current_txn_start_offset=entry.current_txn_first_offset)
        return resp
