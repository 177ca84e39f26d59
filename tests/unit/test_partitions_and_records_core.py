"""Issue 30: the pure parts of CreatePartitions (placement of added partitions, validation, what the
controller starts on a changed assignment znode) and of DeleteRecords (the log start offset on the
log, the leader's low watermark, the follower taking the leader's), and kafka-delete-records' JSON."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka_frames import frame, read_response
from kio.schema.errors import ErrorCode

from broker.log.config import LogConfig
from broker.log.log import Log
from broker.network import kafka_wire as kw
from broker.replication.partition import Partition
from client.cli.delete_records import parse_offset_json
from client.structs import TopicPartition
from controller.assignment import (
    added_partitions,
    assign_added_partitions,
    assign_replicas,
    plan_added_partitions,
)
from controller.event_manager import enqueue
from controller.events import Event, PartitionModifications, TopicChange
from proto import errors
from proto import minikafka_pb2 as pb
from proto.record_batch import Record, encode_batch

T = 1_700_000_000_000
LAG = 10_000

# ------------------------------------------------------------------ placement of added partitions


@given(brokers=st.sets(st.integers(0, 20), min_size=1, max_size=6), existing=st.integers(1, 12),
       added=st.integers(1, 12), rf=st.integers(1, 6))
def test_growing_a_topic_places_as_if_it_had_been_created_bigger(brokers: set[int], existing: int, added: int,
                                                                 rf: int) -> None:
    """Kafka's round-robin continued: on the same brokers, partitions added to a topic placed by
    ``assign_replicas`` land where a topic created with that many partitions would have put them."""
    if rf > len(brokers):
        return
    before = assign_replicas(brokers, existing, rf)
    grown = assign_added_partitions(before, brokers, existing + added)
    assert sorted(grown) == list(range(existing, existing + added))
    assert {**before, **grown} == assign_replicas(brokers, existing + added, rf)
    for replicas in grown.values():
        assert len(replicas) == rf and len(set(replicas)) == rf and set(replicas) <= brokers


def test_the_round_robin_starts_where_partition_0_leads() -> None:
    # Partition 0 led by broker 3 (e.g. an explicit assignment): the next partition goes on the next broker.
    existing = {0: [3, 1], 1: [1, 2]}
    assert assign_added_partitions(existing, [1, 2, 3], 4) == {2: [2, 3], 3: [3, 1]}
    # Partition 0's first replica gone: the first live broker above it (Kafka's indexWhere(_.id >= ...)).
    assert assign_added_partitions({0: [2]}, [1, 3, 5], 2) == {1: [5]}


def test_added_partitions_keep_partition_0s_replication_factor() -> None:
    with pytest.raises(errors.InvalidReplicationFactorError):
        assign_added_partitions({0: [1, 2, 3]}, [1, 2], 2)


# ------------------------------------------------------------------ validation (Kafka's messages)


def test_the_count_must_grow_and_stay_within_the_limit() -> None:
    existing = {0: [1], 1: [2], 2: [3]}
    with pytest.raises(errors.InvalidPartitionsError, match="currently has 3 partitions, which is higher than "
                                                           "the requested 2"):
        plan_added_partitions(existing, 2, None, [1, 2, 3], 100)
    with pytest.raises(errors.InvalidPartitionsError, match="already has 3 partitions"):
        plan_added_partitions(existing, 3, None, [1, 2, 3], 100)
    with pytest.raises(errors.InvalidPartitionsError, match=r"max\.partitions\.per\.topic=4"):
        plan_added_partitions(existing, 5, None, [1, 2, 3], 4)
    assert plan_added_partitions(existing, 4, None, [1, 2, 3], 4) == {3: [1]}


def test_an_explicit_assignment_is_checked_as_kafka_checks_it() -> None:
    existing = {0: [1, 2], 1: [2, 3]}
    live = [1, 2, 3]
    assert plan_added_partitions(existing, 4, [[3, 1], [1, 3]], live, 100) == {2: [3, 1], 3: [1, 3]}
    with pytest.raises(errors.InvalidReplicaAssignmentError, match="Unknown broker"):
        plan_added_partitions(existing, 3, [[1, 9]], live, 100)
    with pytest.raises(errors.InvalidReplicaAssignmentError, match="by 2 but 1 assignments"):
        plan_added_partitions(existing, 4, [[1, 2]], live, 100)
    with pytest.raises(errors.InvalidReplicaAssignmentError, match="Inconsistent replication factor"):
        plan_added_partitions(existing, 3, [[1, 2, 3]], live, 100)
    with pytest.raises(errors.InvalidReplicaAssignmentError, match="Duplicate brokers"):
        plan_added_partitions(existing, 3, [[2, 2]], live, 100)


# ------------------------------------------------------------------ the controller's view


def test_the_controller_starts_what_it_has_not_and_spots_replicas_changed_behind_it() -> None:
    known = {0: [1, 2], 1: [2, 3]}
    new, changed = added_partitions(known, {0: [1, 2], 1: [2, 3], 2: [3, 1]}, started=[0, 1])
    assert new == {2: [3, 1]} and changed == []
    # Its own reassignment write (or nothing new): nothing to do.
    assert added_partitions(known, dict(known), started=[0, 1]) == ({}, [])
    # A partition known (a refresh took the znode) but not started yet is still new.
    assert added_partitions({**known, 2: [3, 1]}, {**known, 2: [3, 1]}, started=[0, 1]) == ({2: [3, 1]}, [])
    new, changed = added_partitions(known, {0: [3, 2], 1: [2, 3], 2: [1, 2]}, started=[0, 1])
    assert new == {2: [1, 2]} and changed == [0]


def test_one_partition_modifications_per_topic_waits_in_the_queue() -> None:
    queue: list[Event] = []
    for ev in (PartitionModifications("a"), PartitionModifications("a"), PartitionModifications("b"),
               TopicChange(), PartitionModifications("a")):
        enqueue(queue, ev)
    assert queue == [PartitionModifications("a"), PartitionModifications("b"), TopicChange()]


# ------------------------------------------------------------------ the log start offset


def batch(values: list[str]) -> bytes:
    return encode_batch([Record(key=v.encode(), value=v.encode(), timestamp=1_000 + i) for i, v in enumerate(values)])


def open_log(tmp_path: Path, name: str = "t-0", cfg: LogConfig | None = None) -> Log:
    return Log.open(tmp_path / name, "t", 0, cfg or LogConfig(segment_bytes=300), now_ms=0)


def test_the_log_start_moves_up_to_the_high_watermark_and_retention_drops_what_is_below(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(10):
        log.append_as_leader(batch([f"record-{i:03d}" * 4]), leader_epoch=0, now_ms=0)
    log.update_high_watermark(8)
    segments = len(log.segments)
    assert segments > 2
    with pytest.raises(errors.OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(9)
    assert log.maybe_increment_log_start_offset(6) and log.log_start_offset == 6
    assert not log.maybe_increment_log_start_offset(4) and log.log_start_offset == 6  # never backwards
    with pytest.raises(errors.OffsetOutOfRangeError):
        log.read(5, 1 << 20)
    assert log.read(6, 1 << 20)
    deleted = log.delete_old_segments(0)
    assert deleted > 0 and log.segments[0].base_offset <= 6 and log.log_start_offset == 6


def leader_of(tmp_path: Path, cfg: LogConfig | None = None) -> Partition:
    p = Partition("t", 0, open_log(tmp_path, cfg=cfg), 1)
    p.make_leader(controller_epoch=1, leader_epoch=0, replicas=(1, 2, 3), isr=(1,), zk_version=0, now_ms=T,
                  lag_max_ms=LAG)
    for i in range(5):
        p.append_as_leader(batch([f"m{i}"]), 1, T, LAG)
    return p


def test_delete_records_on_the_leader_and_its_low_watermark(tmp_path: Path) -> None:
    p = leader_of(tmp_path)
    assert p.high_watermark == 5
    with pytest.raises(errors.OffsetOutOfRangeError):
        p.delete_records_on_leader(6)
    with pytest.raises(errors.OffsetOutOfRangeError):
        p.delete_records_on_leader(-2)
    assert p.delete_records_on_leader(3) == 3 and p.log_start_offset == 3
    # Followers not heard of yet count as -1; a dead one (not live) does not count.
    assert p.low_watermark([1, 2, 3]) == -1
    assert p.record_follower_log_start(2, 3) and not p.record_follower_log_start(2, 3)
    assert p.low_watermark([1, 2, 3]) == -1 and p.low_watermark([1, 2]) == 3
    p.record_follower_log_start(3, 3)
    assert p.low_watermark([1, 2, 3]) == 3
    assert p.delete_records_on_leader(-1) == 5  # -1: the high watermark
    assert p.low_watermark([1, 2, 3]) == 3 and p.log_start_offset == 5


def test_delete_records_needs_the_leader_and_the_delete_policy(tmp_path: Path) -> None:
    p = leader_of(tmp_path / "a")
    p.make_follower(controller_epoch=1, leader_id=2, leader_epoch=1, replicas=(1, 2, 3), isr=(2,), zk_version=1)
    with pytest.raises(errors.NotLeaderOrFollowerError):
        p.delete_records_on_leader(1)
    compacted = leader_of(tmp_path / "b", LogConfig(segment_bytes=300, cleanup_policy="compact"))
    with pytest.raises(errors.PolicyViolationError):
        compacted.delete_records_on_leader(1)


def test_a_follower_takes_the_leaders_log_start_within_its_high_watermark(tmp_path: Path) -> None:
    leader = leader_of(tmp_path)
    follower = Partition("t", 0, open_log(tmp_path, "f-0"), 2)
    follower.make_follower(controller_epoch=1, leader_id=1, leader_epoch=0, replicas=(1, 2, 3), isr=(1, 2),
                           zk_version=0)
    while follower.log_end_offset < leader.log_end_offset:  # a read stops at a segment's end
        follower.append_as_follower(leader.log.read(follower.log_end_offset, 1 << 20), 2, T)
    assert (follower.log_end_offset, follower.high_watermark) == (5, 2)
    assert follower.maybe_increment_log_start_offset_as_follower(4)  # capped at its HW, 2
    assert follower.log_start_offset == 2
    assert not follower.maybe_increment_log_start_offset_as_follower(-1)
    follower.append_as_follower(b"", 5, T)
    assert follower.maybe_increment_log_start_offset_as_follower(4) and follower.log_start_offset == 4


# ------------------------------------------------------------------ kafka-delete-records' JSON


def test_the_offset_json_file_as_kafka_reads_it() -> None:
    text = '{"partitions": [{"topic": "a", "partition": 0, "offset": 3}, ' \
           '{"topic": "b", "partition": 1, "offset": -1}], "version": 1}'
    assert parse_offset_json(text) == {TopicPartition("a", 0): 3, TopicPartition("b", 1): -1}
    with pytest.raises(errors.InvalidRequestError, match="duplicate topic partitions: a-0"):
        parse_offset_json('{"partitions": [{"topic": "a", "partition": 0, "offset": 3}, '
                          '{"topic": "a", "partition": 0, "offset": 4}], "version": 1}')
    for bad in ('{"partitions": []}', '[1]', 'not json', '{"partitions": [{"topic": "a", "offset": 1}]}',
                '{"partitions": [{"topic": "a", "partition": 0, "offset": 1}], "version": 2}'):
        with pytest.raises(errors.InvalidRequestError):
            parse_offset_json(bad)


# ------------------------------------------------------------------ the Kafka wire, every advertised version


def test_create_partitions_on_the_kafka_wire_every_version() -> None:
    assert kw.SUPPORTED[37] == ("CreatePartitions", 0, 3)
    for version in range(4):
        d = kw.decode_request(frame(37, version, {"timeout": 5000, "validate_only": True, "topics": [
            {"name": "a", "count": 4, "assignments": [{"broker_ids": [1, 2]}, {"broker_ids": [2, 3]}]},
            {"name": "b", "count": 2, "assignments": None}]}))
        ((api, req),) = kw.to_pb(d)
        assert api == "CreatePartitions" and req.timeout_ms == 5000 and req.validate_only
        assert [(t.name, t.count, [list(x.broker_ids) for x in t.assignments]) for t in req.topics] == \
            [("a", 4, [[1, 2], [2, 3]]), ("b", 2, [])]
        answer = pb.CreatePartitionsResponse(results=[
            pb.CreatePartitionsTopicResult(name="a"),
            pb.CreatePartitionsTopicResult(name="b", error_code=pb.ErrorCode.INVALID_PARTITIONS,
                                           error_message="Topic already has 2 partitions.")])
        _c, body = read_response(kw.encode_response(d.header, kw.from_pb(d, [answer])), 37, version)
        assert [(r.name, r.error_code, r.error_message) for r in body.results] == \
            [("a", ErrorCode.none, None), ("b", ErrorCode.invalid_partitions, "Topic already has 2 partitions.")]


def test_delete_records_on_the_kafka_wire_every_version() -> None:
    assert kw.SUPPORTED[21] == ("DeleteRecords", 0, 2)
    for version in range(3):
        d = kw.decode_request(frame(21, version, {"timeout": 3000, "topics": [
            {"name": "a", "partitions": [{"partition_index": 0, "offset": 7},
                                         {"partition_index": 1, "offset": -1}]}]}))
        ((api, req),) = kw.to_pb(d)
        assert api == "DeleteRecords" and req.timeout_ms == 3000
        assert [(p.partition, p.offset) for p in req.topics[0].partitions] == [(0, 7), (1, -1)]
        answer = pb.DeleteRecordsResponse(topics=[pb.DeleteRecordsTopicResult(name="a", partitions=[
            pb.DeleteRecordsPartitionResult(partition=0, low_watermark=7),
            pb.DeleteRecordsPartitionResult(partition=1, low_watermark=-1,
                                            error_code=pb.ErrorCode.NOT_LEADER_OR_FOLLOWER)])])
        _c, body = read_response(kw.encode_response(d.header, kw.from_pb(d, [answer])), 21, version)
        assert [(p.partition_index, p.low_watermark, p.error_code) for p in body.topics[0].partitions] == \
            [(0, 7, ErrorCode.none), (1, -1, ErrorCode.not_leader_or_follower)]


# ------------------------------------------------------------------ DeleteRecords in the ReplicaManager


def test_delete_records_waits_for_live_followers_and_needs_delete_on_the_topic(tmp_path: Path) -> None:
    from test_partition import FOLLOWER, LEADER, as_broker, replica_manager
    from test_partition import produce as produce_on

    from broker.log.checkpoint import LOG_START_OFFSET_CHECKPOINT

    rm, _zk = replica_manager(tmp_path, isr=(LEADER, FOLLOWER))
    p = rm.partitions[("t", 0)]
    produce_on(p, 6)
    p.record_follower_fetch(FOLLOWER, 6, 0, T, LAG)
    assert p.high_watermark == 6

    def request(offset: int, timeout_ms: int = 2000) -> pb.DeleteRecordsRequest:
        return pb.DeleteRecordsRequest(timeout_ms=timeout_ms, topics=[pb.DeleteRecordsTopic(
            name="t", partitions=[pb.DeleteRecordsPartition(partition=0, offset=offset)])])

    rm.metadata.brokers = {b: pb.BrokerEndpoint(broker_id=b) for b in (LEADER, FOLLOWER)}

    async def scenario() -> pb.DeleteRecordsPartitionResult:
        pending = asyncio.ensure_future(rm.handle_delete_records(request(4)))
        await asyncio.sleep(0.05)
        assert not pending.done() and p.log_start_offset == 4  # moved on the leader, waiting for the follower
        # The follower's next fetch says its log starts at 4 too.
        await rm.handle_fetch(pb.FetchRequest(replica_id=FOLLOWER, max_wait_ms=0, max_bytes=1 << 20, topics=[
            pb.FetchTopic(name="t", partitions=[pb.FetchPartition(partition=0, fetch_offset=6, log_start_offset=4,
                                                                  partition_max_bytes=1 << 20)])]),
            as_broker(FOLLOWER))
        return (await asyncio.wait_for(pending, 2)).topics[0].partitions[0]

    r = asyncio.run(scenario())
    assert (r.error_code, r.low_watermark) == (pb.ErrorCode.NONE, 4)
    checkpoint = (tmp_path / "logs" / LOG_START_OFFSET_CHECKPOINT).read_text().split()
    assert checkpoint[-3:] == ["t", "0", "4"]  # written before the answer

    # Beyond the HW; a follower that does not follow within the timeout; no Delete on the topic.
    r = asyncio.run(rm.handle_delete_records(request(7))).topics[0].partitions[0]
    assert r.error_code == pb.ErrorCode.OFFSET_OUT_OF_RANGE and r.low_watermark == -1
    r = asyncio.run(rm.handle_delete_records(request(-1, timeout_ms=100))).topics[0].partitions[0]
    assert r.error_code == pb.ErrorCode.REQUEST_TIMED_OUT and p.log_start_offset == 6
    rm.allowed = lambda _ctx, op, _type, _name: op != "Delete"
    r = asyncio.run(rm.handle_delete_records(request(6))).topics[0].partitions[0]
    assert r.error_code == pb.ErrorCode.TOPIC_AUTHORIZATION_FAILED


def test_create_partitions_needs_alter_on_the_topic() -> None:
    from unittest.mock import MagicMock

    from broker.server.admin import AdminManager
    from broker.server.config import BrokerConfig

    gate = MagicMock()
    gate.allowed = lambda _ctx, op, _type, name: not (op == "Alter" and name == "secret")
    zk = MagicMock()
    zk.path_exists.return_value = False
    zk.get_assignment_with_version.return_value = ({0: [1]}, 3)
    zk.get_broker_ids.return_value = [1, 2]
    metadata = MagicMock()
    metadata.partition.return_value = None  # not led yet: the answer says so once the (zero) timeout passed
    admin = AdminManager(BrokerConfig(), zk, metadata, lambda _t: LogConfig(), gate=gate)
    resp = asyncio.run(admin.create_partitions(pb.CreatePartitionsRequest(timeout_ms=0, validate_only=True, topics=[
        pb.CreatePartitionsTopic(name="secret", count=2), pb.CreatePartitionsTopic(name="open", count=2),
        pb.CreatePartitionsTopic(name="open2", count=1)])))
    assert [(r.name, r.error_code) for r in resp.results] == [
        ("secret", pb.ErrorCode.TOPIC_AUTHORIZATION_FAILED), ("open", pb.ErrorCode.NONE),
        ("open2", pb.ErrorCode.INVALID_PARTITIONS)]
    zk.set_assignment_if_version.assert_not_called()  # validate_only
    zk.set_assignment_if_version.return_value = True
    resp = asyncio.run(admin.create_partitions(pb.CreatePartitionsRequest(timeout_ms=0, topics=[
        pb.CreatePartitionsTopic(name="open", count=3)])))
    zk.set_assignment_if_version.assert_called_once_with("open", {0: [1], 1: [2], 2: [1]}, 3)
    assert resp.results[0].error_code == pb.ErrorCode.REQUEST_TIMED_OUT
