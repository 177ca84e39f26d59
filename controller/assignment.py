"""Replica placement (SPEC S1), pure.

With n live brokers sorted by id and partitions 0..P-1, replica j of partition
i goes on broker ``sorted_ids[(i + j) mod n]``; the first replica is the
preferred replica (S1.2). A replication factor above the number of live
brokers is refused (S1.3).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from proto.errors import InvalidPartitionsError, InvalidReplicaAssignmentError, InvalidReplicationFactorError


def assign_replicas(broker_ids: Iterable[int], num_partitions: int, replication_factor: int,
                    first_partition: int = 0) -> dict[int, list[int]]:
    brokers = sorted(set(broker_ids))
    if num_partitions < 1:
        raise InvalidPartitionsError(f"number of partitions must be at least 1, got {num_partitions}")
    if replication_factor < 1:
        raise InvalidReplicationFactorError(f"replication factor must be at least 1, got {replication_factor}")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the number of live brokers {len(brokers)}")
    n = len(brokers)
    return {i: [brokers[(i + j) % n] for j in range(replication_factor)]
            for i in range(first_partition, first_partition + num_partitions)}


def validate_manual_assignment(assignment: Mapping[int, list[int]], live_brokers: Iterable[int]) -> None:
    """An explicit assignment: partitions 0..P-1, one replication factor, distinct live brokers."""
    live = set(live_brokers)
    if not assignment:
        raise InvalidReplicaAssignmentError("the assignment is empty")
    if sorted(assignment) != list(range(len(assignment))):
        raise InvalidReplicaAssignmentError("partitions must be numbered 0..P-1")
    sizes = {len(r) for r in assignment.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise InvalidReplicaAssignmentError("every partition needs the same, non-zero replication factor")
    for p, replicas in assignment.items():
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(f"partition {p} lists a broker twice: {replicas}")
        unknown = set(replicas) - live
        if unknown:
            raise InvalidReplicaAssignmentError(f"partition {p} names brokers that are not live: {sorted(unknown)}")
