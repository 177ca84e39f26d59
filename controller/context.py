"""The controller's in-memory view of the cluster (Kafka's ControllerContext).

Only the controller's event thread touches it; it is rebuilt from ZooKeeper
on every failover.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.state_machine import PartitionState, ReplicaState
from proto.names import TopicPartition
from zk.data import BrokerRegistration, LeaderIsrAndControllerEpoch, ReplicaAssignment


@dataclass
class ControllerContext:
    epoch: int = 0
    epoch_zk_version: int = -1
    live_brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    shutting_down_broker_ids: set[int] = field(default_factory=set)
    assignments: dict[str, dict[int, list[int]]] = field(default_factory=dict)
    leadership: dict[TopicPartition, LeaderIsrAndControllerEpoch] = field(default_factory=dict)
    partition_states: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    replica_states: dict[tuple[TopicPartition, int], ReplicaState] = field(default_factory=dict)
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    topics_to_be_deleted: set[str] = field(default_factory=set)
    # Partitions being reassigned (Kafka's partitionsBeingReassigned, KIP-455): partition -> its
    # (adding, removing) replicas; its replica set RS (= target + original while it runs) is in
    # ``assignments``. See ``full_assignment``.
    reassignments: dict[TopicPartition, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)
    # Topic deletion progress: topic -> (partition, replica) not yet confirmed deleted.
    deletion_pending: dict[str, set[tuple[TopicPartition, int]]] = field(default_factory=dict)
    # zk_version of each topic's assignment znode (reassignments write it conditionally).
    assignment_versions: dict[str, int] = field(default_factory=dict)

    def copy(self) -> ControllerContext:
        """A copy an event handler may change freely (the values inside are frozen dataclasses or
        copied here); much cheaper than ``copy.deepcopy``, which the controller ran on every event.

        A topic's assignment (partition -> replicas) is shared, not copied: it is never changed in
        place, only replaced whole (``reassignment.set_replicas``, a topic's load) - copying every
        replica list made each event cost ~3 ms at 10,000 partitions, on the controller thread."""
        return ControllerContext(
            epoch=self.epoch, epoch_zk_version=self.epoch_zk_version, live_brokers=dict(self.live_brokers),
            shutting_down_broker_ids=set(self.shutting_down_broker_ids),
            assignments=dict(self.assignments),
            leadership=dict(self.leadership), partition_states=dict(self.partition_states),
            replica_states=dict(self.replica_states),
            topic_configs={t: dict(c) for t, c in self.topic_configs.items()},
            topics_to_be_deleted=set(self.topics_to_be_deleted),
            reassignments=dict(self.reassignments),
            deletion_pending={t: set(s) for t, s in self.deletion_pending.items()},
            assignment_versions=dict(self.assignment_versions))

    @property
    def serving_broker_ids(self) -> set[int]:
        """Live brokers that may lead: not in a controlled shutdown."""
        return set(self.live_brokers) - self.shutting_down_broker_ids

    def all_partitions(self) -> list[TopicPartition]:
        return [(t, p) for t, parts in sorted(self.assignments.items()) for p in sorted(parts)]

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return [(topic, p) for p in sorted(self.assignments.get(topic, {}))]

    def replicas(self, tp: TopicPartition) -> list[int]:
        return self.assignments.get(tp[0], {}).get(tp[1], [])

    def full_assignment(self, tp: TopicPartition) -> ReplicaAssignment:
        """RS with the adding and removing replicas (none when the partition is not moving)."""
        adding, removing = self.reassignments.get(tp, ((), ()))
        return ReplicaAssignment(tuple(self.replicas(tp)), adding, removing)

    def moving(self, topic: str) -> tuple[dict[int, tuple[int, ...]], dict[int, tuple[int, ...]]]:
        """The topic's adding and removing replicas per partition (its znode's version 2 fields)."""
        adding: dict[int, tuple[int, ...]] = {}
        removing: dict[int, tuple[int, ...]] = {}
        for (t, p), (a, r) in self.reassignments.items():
            if t == topic:
                adding[p], removing[p] = a, r
        return adding, removing

    def partitions_on_broker(self, broker_id: int) -> list[TopicPartition]:
        return [tp for tp in self.all_partitions() if broker_id in self.replicas(tp)]

    def partitions_led_by(self, broker_id: int) -> list[TopicPartition]:
        return [tp for tp, st in self.leadership.items() if st.leader_and_isr.leader == broker_id]

    def remove_topic(self, topic: str) -> None:
        for tp in self.partitions_of(topic):
            self.leadership.pop(tp, None)
            self.partition_states.pop(tp, None)
            for r in self.replicas(tp):
                self.replica_states.pop((tp, r), None)
            self.reassignments.pop(tp, None)
        self.assignments.pop(topic, None)
        self.topic_configs.pop(topic, None)
        self.topics_to_be_deleted.discard(topic)
