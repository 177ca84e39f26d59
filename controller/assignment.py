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


def assign_added_partitions(existing: Mapping[int, list[int]], broker_ids: Iterable[int],
                            num_partitions: int) -> dict[int, list[int]]:
    """Replicas for partitions ``len(existing)..num_partitions-1`` of a topic that grows (Kafka's
    AdminZkClient.createNewPartitionsAssignment): the replication factor of partition 0, and the
    round-robin continued from the existing partitions - the start index is where partition 0's
    first replica sits among the live brokers (the first id at or above it), so a topic placed by
    ``assign_replicas`` on the same brokers grows as if it had been created with more partitions."""
    if 0 not in existing or not existing[0]:
        raise InvalidReplicaAssignmentError("the topic has no partition 0 to take the replication factor from")
    brokers = sorted(set(broker_ids))
    added = num_partitions - len(existing)
    if added <= 0:
        raise InvalidPartitionsError(f"topic has {len(existing)} partitions, {num_partitions} would not be an increase")
    rf = len(existing[0])
    if rf > len(brokers):
        raise InvalidReplicationFactorError(
            f"replication factor {rf} is larger than the number of live brokers {len(brokers)}")
    first = existing[0][0]
    start = next((i for i, b in enumerate(brokers) if b >= first), 0)
    n = len(brokers)
    return {p: [brokers[(start + p + j) % n] for j in range(rf)]
            for p in range(len(existing), num_partitions)}


def plan_added_partitions(existing: Mapping[int, list[int]], num_partitions: int,
                          proposed: list[list[int]] | None, live_brokers: Iterable[int],
                          max_partitions: int) -> dict[int, list[int]]:
    """The new partitions of a CreatePartitions request, validated as Kafka's AdminManager and
    AdminZkClient do: the count must grow (INVALID_PARTITIONS, also above ``max_partitions``); an
    explicit assignment (one replica list per added partition) names live, distinct brokers, as many
    as partition 0 has (INVALID_REPLICA_ASSIGNMENT); without one, ``assign_added_partitions``."""
    current = len(existing)
    if num_partitions < current:
        raise InvalidPartitionsError(
            f"Topic currently has {current} partitions, which is higher than the requested {num_partitions}.")
    if num_partitions == current:
        raise InvalidPartitionsError(f"Topic already has {current} partitions.")
    if num_partitions > max_partitions:
        raise InvalidPartitionsError(
            f"{num_partitions} partitions exceed max.partitions.per.topic={max_partitions}")
    live = set(live_brokers)
    if proposed is None:
        return assign_added_partitions(existing, live, num_partitions)
    unknown = sorted({b for replicas in proposed for b in replicas} - live)
    if unknown:
        raise InvalidReplicaAssignmentError(
            f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.")
    increment = num_partitions - current
    if len(proposed) != increment:
        raise InvalidReplicaAssignmentError(
            f"Increasing the number of partitions by {increment} but {len(proposed)} assignments provided.")
    assignment = {current + i: list(replicas) for i, replicas in enumerate(proposed)}
    rf = len(existing.get(0, ()))
    bad = {p: len(r) for p, r in assignment.items() if len(r) != rf}
    if bad:
        raise InvalidReplicaAssignmentError(
            f"Inconsistent replication factor between partitions, partition 0 has {rf} while partitions "
            f"[{', '.join(map(str, bad))}] have replication factors [{', '.join(map(str, bad.values()))}], "
            "respectively.")
    for p, replicas in assignment.items():
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(
                f"Duplicate brokers not allowed in replica assignment: {', '.join(map(str, replicas))} "
                f"for partition id {p}.")
    return assignment


def added_partitions(known: Mapping[int, list[int]], current: Mapping[int, list[int]],
                     started: Iterable[int]) -> tuple[dict[int, list[int]], list[int]]:
    """The controller's view of a topic's changed assignment znode (Kafka's PartitionModifications):
    the partitions of ``current`` not ``started`` yet (no state in the controller) to create, and the
    started partitions whose replicas differ from what the controller ``known`` - changed behind its
    back (only the controller moves replicas, through reassignment): Kafka restores its own view."""
    started_set = set(started)
    new = {p: list(r) for p, r in sorted(current.items()) if p not in started_set}
    changed = sorted(p for p in started_set if p in known and current.get(p) != known[p])
    return new, changed
