"""Controller events (Kafka's ControllerEvent): what the one event thread processes, in order.

ZooKeeper watchers, timers and RPC handlers only create these and put them on the queue
(controller.event_manager); nothing else touches the controller's state.
"""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, field

from proto import minikafka_pb2 as pb


@dataclass
class Event:
    pass


@dataclass
class Startup(Event):
    pass


@dataclass
class Reelect(Event):
    """Run the election again (after a resignation, or a new ZooKeeper session)."""


@dataclass
class ControllerChange(Event):
    pass


@dataclass
class Reconnected(Event):
    """The ZooKeeper connection is back with the same session: re-arm the watches (kazoo does not
    re-send them the way ZooKeeper's Java client does with SetWatches)."""


@dataclass
class Expire(Event):
    """The ZooKeeper session expired (Kafka's Expire): queued at the front, the queue cleared."""


@dataclass
class BrokerChange(Event):
    pass


@dataclass
class TopicChange(Event):
    pass


@dataclass
class TopicDeletion(Event):
    pass


@dataclass
class PartitionModifications(Event):
    """A topic's assignment znode changed (Kafka's PartitionModifications): partitions may have
    been added (CreatePartitions)."""

    topic: str


@dataclass
class PreferredReplicaElection(Event):
    pass


@dataclass
class IsrChangeNotification(Event):
    pass


@dataclass
class AutoRebalance(Event):
    pass


@dataclass
class PartitionReassignment(Event):
    pass


@dataclass
class StopReplicaResponseReceived(Event):
    broker_id: int
    response: pb.StopReplicaResponse


@dataclass
class UncleanElection(Event):
    """ElectLeaders of election type UNCLEAN (KIP-460), from this broker's API layer."""

    partitions: list[tuple[str, int]]
    # partition -> (wire error code, message)
    reply: concurrent.futures.Future[dict[tuple[str, int], tuple[int, str]]] = field(
        default_factory=concurrent.futures.Future)


@dataclass
class PreferredElection(Event):
    """ElectLeaders of election type PREFERRED from this broker's API layer (Kafka 2.4+'s
    ReplicaLeaderElection event: no /admin/preferred_replica_election znode, so requests do not
    wait for one another; that znode stays for the legacy tool path)."""

    partitions: list[tuple[str, int]]
    # partition -> (wire error code, message)
    reply: concurrent.futures.Future[dict[tuple[str, int], tuple[int, str]]] = field(
        default_factory=concurrent.futures.Future)


@dataclass
class ApiPartitionReassignment(Event):
    """AlterPartitionReassignments from this broker's API layer (Kafka's ApiPartitionReassignment):
    a target per partition, None to cancel (KIP-455)."""

    partitions: dict[tuple[str, int], list[int] | None]
    # partition -> (wire error code, message)
    reply: concurrent.futures.Future[dict[tuple[str, int], tuple[int, str]]] = field(
        default_factory=concurrent.futures.Future)


@dataclass
class ControlledShutdown(Event):
    broker_id: int
    broker_epoch: int
    reply: concurrent.futures.Future[pb.ControlledShutdownResponse] = field(
        default_factory=concurrent.futures.Future)


@dataclass
class Shutdown(Event):
    pass


# Processed even when this broker is not the active controller.
ALWAYS: tuple[type[Event], ...] = (Startup, Reelect, ControllerChange, Reconnected, Expire, ControlledShutdown,
                                   Shutdown)
