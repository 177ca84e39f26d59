"""Partition leader election, pure (Kafka's Election.scala / PartitionLeaderElectionAlgorithms).

Each function takes the assignment (replicas, preferred first), the current ISR
and the live brokers, and returns the new ``(leader, isr)`` or None when no
replica may lead. Nothing here reads a clock, ZooKeeper or a socket.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ElectionResult:
    leader: int
    isr: tuple[int, ...]
    unclean: bool = False


def offline_partition_leader_election(assignment: Sequence[int], isr: Sequence[int], live: Collection[int],
                                      unclean_enabled: bool) -> ElectionResult | None:
    """S7.2/S7.3: the first live ISR member in assignment order leads, ISR = live ISR members.

    With no live ISR member: unclean election (any live replica, ISR = [it]) when
    enabled, else None - the partition stays offline until an ISR member returns.
    """
    live_isr = tuple(r for r in isr if r in live)
    for replica in assignment:
        if replica in live and replica in live_isr:
            return ElectionResult(replica, live_isr)
    if unclean_enabled:
        for replica in assignment:
            if replica in live:
                return ElectionResult(replica, (replica,), unclean=True)
    return None


def reassign_partition_leader_election(reassignment: Sequence[int], isr: Sequence[int],
                                       live: Collection[int]) -> ElectionResult | None:
    """The first replica of the target assignment that is live and in the ISR."""
    for replica in reassignment:
        if replica in live and replica in isr:
            return ElectionResult(replica, tuple(isr))
    return None


def preferred_replica_partition_leader_election(assignment: Sequence[int], isr: Sequence[int],
                                                live: Collection[int]) -> ElectionResult | None:
    """S1.2: the preferred (first) replica leads, if it is live and in the ISR."""
    if not assignment:
        return None
    preferred = assignment[0]
    if preferred in live and preferred in isr:
        return ElectionResult(preferred, tuple(isr))
    return None


def controlled_shutdown_partition_leader_election(assignment: Sequence[int], isr: Sequence[int],
                                                  live: Collection[int],
                                                  shutting_down: Collection[int]) -> ElectionResult | None:
    """Move leadership off brokers that are shutting down: the first live ISR member
    not shutting down leads; those shutting down leave the ISR."""
    new_isr = tuple(r for r in isr if r not in shutting_down)
    for replica in assignment:
        if replica in live and replica in new_isr:
            return ElectionResult(replica, new_isr)
    return None


def imbalanced_partitions(preferred_of: dict[tuple[str, int], int], leader_of: dict[tuple[str, int], int],
                          imbalance_percentage: int) -> list[tuple[str, int]]:
    """Auto rebalance (Kafka's checkAndTriggerAutoLeaderRebalance): for each broker, the
    partitions it prefers but does not lead; returned when their share of the partitions
    it prefers exceeds leader.imbalance.per.broker.percentage."""
    by_broker: dict[int, list[tuple[str, int]]] = {}
    for tp, preferred in preferred_of.items():
        by_broker.setdefault(preferred, []).append(tp)
    out: list[tuple[str, int]] = []
    for _broker, tps in sorted(by_broker.items()):
        not_led = [tp for tp in tps if leader_of.get(tp) != preferred_of[tp]]
        if tps and len(not_led) * 100 > imbalance_percentage * len(tps):
            out.extend(sorted(not_led))
    return out
