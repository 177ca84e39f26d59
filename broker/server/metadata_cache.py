"""The broker's copy of cluster metadata, kept by the controller's UpdateMetadata requests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from proto import minikafka_pb2 as pb
from proto.names import topic_name_error


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    controller_epoch: int
    zk_version: int


@dataclass
class MetadataCache:
    controller_id: int = -1
    controller_epoch: int = 0
    brokers: dict[int, pb.BrokerEndpoint] = field(default_factory=dict)
    partitions: dict[str, dict[int, PartitionInfo]] = field(default_factory=dict)
    # Called after every update, on the updater's thread (the broker's event loop): a request that
    # waits for the metadata to show something (CreateTopics until its topics are led) looks again
    # then, instead of polling.
    listeners: list[Callable[[], None]] = field(default_factory=list)

    def update(self, req: pb.UpdateMetadataRequest) -> None:
        self.controller_id = req.controller_id
        self.controller_epoch = req.controller_epoch
        self.brokers = {b.broker_id: b for b in req.live_brokers}
        for topic in req.deleted_topics:
            self.partitions.pop(topic, None)
        for s in req.partition_states:
            if topic_name_error(s.topic_name) is not None or s.partition_index < 0:
                continue  # never a topic of this cluster: keep it out of every Metadata answer
            self.partitions.setdefault(s.topic_name, {})[s.partition_index] = PartitionInfo(
                s.leader, s.leader_epoch, tuple(s.replicas), tuple(s.isr), tuple(s.offline_replicas),
                s.controller_epoch, s.zk_version)
        for listener in list(self.listeners):
            listener()

    def topics(self) -> list[str]:
        return sorted(self.partitions)

    def has_topic(self, topic: str) -> bool:
        return topic in self.partitions

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        return self.partitions.get(topic, {}).get(partition)

    def endpoint(self, broker_id: int) -> pb.BrokerEndpoint | None:
        return self.brokers.get(broker_id)

    def broker_epoch(self, broker_id: int) -> int | None:
        """The broker's registration epoch as the controller last told (None: unknown)."""
        b = self.brokers.get(broker_id)
        return b.broker_epoch if b is not None and b.broker_epoch > 0 else None
