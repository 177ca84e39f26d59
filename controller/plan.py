"""What one controller event decided: the writes to make and the requests to send (the "plan").

Theory of operation: while an event is processed, nothing is written and nothing is sent. The
partition and replica state machines *stage* their ZooKeeper writes here (state znode creates
and conditional sets, assignment changes) and record the LeaderAndIsr / UpdateMetadata /
StopReplica work in the request batch, on a copy of the controller context. At the end of the
event the shell commits the writes in one multi-op guarded by the controller epoch's znode
version; only if that applied does it adopt the copy, run the idempotent admin clean-ups, change
its broker channels and send the batch. A conflict (someone wrote a state znode meanwhile)
discards the copy: the shell refreshes what conflicted and runs the event again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.channel import RequestBatch
from controller.events import Event
from zk.client import ZkWrite
from zk.data import BrokerRegistration, TopicPartitionId


# Idempotent ZooKeeper clean-ups the shell runs after a commit, each guarded by the controller epoch
# (KafkaController._cleanup): typed values, one per kind, not strings the shell dispatches on.
@dataclass(frozen=True)
class DeleteTopicRequest:
    """The /admin/delete_topics/<topic> request (done, or refused)."""

    topic: str


@dataclass(frozen=True)
class DeleteTopicZNodes:
    """A deleted topic's znodes: its assignment (with the partition states), config and request."""

    topic: str


@dataclass(frozen=True)
class RewriteReassignment:
    """Partitions leave /admin/reassign_partitions (deleted when nothing is left): completed or
    refused ones, and those an API reassignment took over (Kafka's maybeRemoveFromZkReassignment)."""

    done: frozenset[TopicPartitionId]


@dataclass(frozen=True)
class DeletePaths:
    """Notification znodes that were handled (ISR changes, a preferred election request)."""

    paths: tuple[str, ...]


Cleanup = DeleteTopicRequest | DeleteTopicZNodes | RewriteReassignment | DeletePaths


@dataclass(frozen=True)
class ElectionRecord:
    strategy: str
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    unclean: bool


@dataclass
class Plan:
    batch: RequestBatch
    writes: list[ZkWrite] = field(default_factory=list)
    # Idempotent ZooKeeper clean-ups after the commit (see KafkaController._cleanup).
    cleanups: list[Cleanup] = field(default_factory=list)
    add_brokers: list[BrokerRegistration] = field(default_factory=list)
    remove_brokers: list[int] = field(default_factory=list)
    follow_ups: list[Event] = field(default_factory=list)
    # Paths this plan creates (so parents are staged once).
    created: set[str] = field(default_factory=set)
    # Counters for metrics, applied with the context.
    elections: int = 0
    unclean_elections: int = 0
    # The elections made, logged once the plan is committed (a plan planned again after a conflict
    # is not logged twice, and thousands are summed up: see KafkaController._log_elections).
    election_log: list[ElectionRecord] = field(default_factory=list)

    def stage(self, write: ZkWrite) -> None:
        """Add a write. A path may be written more than once (a partition changed twice in one
        event): the multi-op applies them in order, and the gateway's lost-reply check follows
        the same sequence."""
        self.writes.append(write)
