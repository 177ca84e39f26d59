"""The transaction coordinator's WriteTxnMarkers client (broker/coordinator/transaction/marker_sender.py,
issue 31): one round groups the partitions by their leader in the metadata cache; a deleted topic
needs no marker (NONE); no live leader, an unreachable leader or NOT_LEADER_OR_FOLLOWER are retried
by the coordinator, and the next round follows the metadata to the new leader. The network call is
the injected send function; the metadata cache is the real one fed UpdateMetadata requests."""

from __future__ import annotations

import asyncio

from broker.coordinator.group.group_state import OFFSETS_TOPIC, offsets_partition_for
from broker.coordinator.transaction.marker_sender import LEADER_NOT_AVAILABLE, NOT_LEADER, TxnMarkerSender
from broker.coordinator.transaction.txn_coordinator import MARKERS_FENCED, MARKERS_UNNEEDED
from broker.coordinator.transaction.txn_state import NONE, MarkerJob
from broker.server.metadata_cache import MetadataCache
from proto import minikafka_pb2 as pb
from proto.transport import ChannelSecurity

JOB = MarkerJob("tid", producer_id=42, producer_epoch=3, commit=True,
                partitions=frozenset({("t", 0), ("t", 1), ("u", 0)}), groups=frozenset({"g"}))


def metadata(leaders: dict[tuple[str, int], int], live: tuple[int, ...] = (1, 2, 3),
             deleted: tuple[str, ...] = ()) -> pb.UpdateMetadataRequest:
    return pb.UpdateMetadataRequest(
        controller_id=1, controller_epoch=1, deleted_topics=list(deleted),
        live_brokers=[pb.BrokerEndpoint(broker_id=b, host="127.0.0.1", port=9000 + b) for b in live],
        partition_states=[pb.UpdateMetadataPartitionState(topic_name=t, partition_index=p, leader=leader,
                                                          leader_epoch=1, isr=[leader], replicas=[1, 2, 3])
                          for (t, p), leader in leaders.items()])


class Brokers:
    """The injected send: records each request and answers per broker with ``answer`` (code per
    partition, NONE by default); a broker in ``down`` cannot be reached."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, pb.WriteTxnMarkersRequest]] = []
        self.answer: dict[tuple[int, str, int], int] = {}
        self.down: set[int] = set()
        self.leave_out: set[tuple[str, int]] = set()

    async def send(self, broker: int, req: pb.WriteTxnMarkersRequest, timeout_s: float) -> pb.WriteTxnMarkersResponse:
        assert timeout_s > 0
        self.sent.append((broker, req))
        if broker in self.down:
            raise ConnectionError(f"broker {broker} is down")
        resp = pb.WriteTxnMarkersResponse()
        for m in req.markers:
            out = resp.markers.add(producer_id=m.producer_id)
            for t in m.topics:
                topic = out.topics.add(name=t.name)
                for p in t.partition_indexes:
                    if (t.name, p) not in self.leave_out:
                        topic.partitions.add(partition_index=p,
                                             error_code=self.answer.get((broker, t.name, p), NONE))
        return resp

    def partitions_sent(self) -> dict[int, list[tuple[str, int]]]:
        return {b: sorted((t.name, p) for m in r.markers for t in m.topics for p in t.partition_indexes)
                for b, r in self.sent}


def sender(cache: MetadataCache, brokers: Brokers, group_coordinator: int = 3) -> TxnMarkerSender:
    return TxnMarkerSender(cache, ChannelSecurity(), 30_000, lambda _g: group_coordinator, send=brokers.send)


def test_one_request_per_leader_with_the_marker_fields() -> None:
    cache, brokers = MetadataCache(), Brokers()
    cache.update(metadata({("t", 0): 1, ("t", 1): 2, ("u", 0): 1}))
    results = asyncio.run(sender(cache, brokers).send_markers(7, JOB, sorted(JOB.partitions)))
    assert results == {("t", 0): NONE, ("t", 1): NONE, ("u", 0): NONE}
    assert brokers.partitions_sent() == {1: [("t", 0), ("u", 0)], 2: [("t", 1)]}
    marker = brokers.sent[0][1].markers[0]
    assert (marker.producer_id, marker.producer_epoch, marker.transaction_result, marker.coordinator_epoch) == \
        (42, 3, True, 7)


def test_a_deleted_topic_needs_no_marker_but_before_any_metadata_it_is_retried() -> None:
    cache, brokers = MetadataCache(), Brokers()
    # No metadata yet (no brokers known): nothing can be said about "u" - retried.
    assert asyncio.run(sender(cache, brokers).send_markers(7, JOB, [("u", 0)])) == {("u", 0): LEADER_NOT_AVAILABLE}
    cache.update(metadata({("t", 0): 1, ("u", 0): 2}))
    cache.update(metadata({}, deleted=("u",)))
    results = asyncio.run(sender(cache, brokers).send_markers(7, JOB, [("t", 0), ("u", 0)]))
    assert results == {("t", 0): NONE, ("u", 0): NONE}
    assert brokers.partitions_sent() == {1: [("t", 0)]}  # nothing sent for the deleted topic


def test_no_live_leader_is_retried_without_a_request() -> None:
    cache, brokers = MetadataCache(), Brokers()
    cache.update(metadata({("t", 0): -1, ("t", 1): 3}, live=(1, 2)))  # no leader; a leader not alive
    results = asyncio.run(sender(cache, brokers).send_markers(7, JOB, [("t", 0), ("t", 1)]))
    assert results == {("t", 0): LEADER_NOT_AVAILABLE, ("t", 1): LEADER_NOT_AVAILABLE}
    assert brokers.sent == []
    # The coordinator's loop retries these (neither "done" nor "fenced").
    assert LEADER_NOT_AVAILABLE not in MARKERS_UNNEEDED | MARKERS_FENCED | {NONE}
    assert NOT_LEADER not in MARKERS_UNNEEDED | MARKERS_FENCED | {NONE}


def test_not_leader_is_retried_at_the_new_leader_once_the_metadata_moves() -> None:
    cache, brokers = MetadataCache(), Brokers()
    s = sender(cache, brokers)
    cache.update(metadata({("t", 0): 1, ("t", 1): 2}))
    brokers.answer[(1, "t", 0)] = NOT_LEADER  # broker 1 lost the leadership; its metadata is ahead of ours
    first = asyncio.run(s.send_markers(7, JOB, [("t", 0), ("t", 1)]))
    assert first == {("t", 0): NOT_LEADER, ("t", 1): NONE}
    # The coordinator sends the round again for what is left; the controller's UpdateMetadata moved t-0.
    cache.update(metadata({("t", 0): 3, ("t", 1): 2}))
    brokers.sent.clear()
    again = asyncio.run(s.send_markers(7, JOB, [("t", 0)]))
    assert again == {("t", 0): NONE}
    assert brokers.partitions_sent() == {3: [("t", 0)]}


def test_an_unreachable_leader_or_a_missing_answer_is_retried() -> None:
    cache, brokers = MetadataCache(), Brokers()
    cache.update(metadata({("t", 0): 1, ("t", 1): 2}))
    brokers.down.add(1)
    brokers.leave_out.add(("t", 1))  # a leader's answer without the partition
    results = asyncio.run(sender(cache, brokers).send_markers(7, JOB, [("t", 0), ("t", 1)]))
    assert results == {("t", 0): NOT_LEADER, ("t", 1): NOT_LEADER}


def test_group_offsets_are_closed_by_a_marker_at_the_groups_coordinator() -> None:
    cache, brokers = MetadataCache(), Brokers()
    cache.update(metadata({}))
    assert asyncio.run(sender(cache, brokers, group_coordinator=2).complete_group("g", 7, JOB)) == NONE
    assert brokers.partitions_sent() == {2: [(OFFSETS_TOPIC, offsets_partition_for("g"))]}
    assert asyncio.run(sender(cache, brokers, group_coordinator=-1).complete_group("g", 7, JOB)) != NONE
