"""broker.replication.partition.Partition over a real Log (SPEC S3, S4, S5, S8), and the
ReplicaManager's validation of follower fetches through it (issue 14 item 8). No sockets."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from broker.log.config import LogConfig
from broker.log.log import Log
from broker.log.manager import LogManager
from broker.replication.partition import Partition
from broker.replication.replica_manager import BrokerSettings, ReplicaManager
from broker.replication.state import ACK, NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER, WAIT
from broker.security.principal import PLAINTEXT, Principal, RequestContext
from broker.server.metadata_cache import MetadataCache
from proto import errors
from proto import minikafka_pb2 as pb
from proto.record_batch import Record, decode_batches, encode_batch

LAG = 10_000
# Wall-clock times (the core reads last_caught_up_time_ms = 0 as "never", far in the past).
T = 1_700_000_000_000
LEADER, FOLLOWER, OUTSIDER = 1, 2, 3


def batch(values: list[str]) -> bytes:
    return encode_batch([Record(value=v.encode(), timestamp=1_000 + i) for i, v in enumerate(values)])


def open_log(tmp_path: Path, name: str = "t-0", cfg: LogConfig | None = None, **kw: Any) -> Log:
    return Log.open(tmp_path / name, "t", 0, cfg or LogConfig(), now_ms=0, **kw)


def leader(tmp_path: Path, isr: tuple[int, ...] = (LEADER, FOLLOWER), epoch: int = 0, now: int = T,
           cfg: LogConfig | None = None, log: Log | None = None) -> Partition:
    p = Partition("t", 0, log or open_log(tmp_path, cfg=cfg), LEADER)
    p.make_leader(controller_epoch=1, leader_epoch=epoch, replicas=(LEADER, FOLLOWER), isr=isr, zk_version=0,
                  now_ms=now, lag_max_ms=LAG)
    return p


def follower(tmp_path: Path, name: str = "f-0", epoch: int = 0) -> Partition:
    p = Partition("t", 0, open_log(tmp_path, name), FOLLOWER)
    p.make_follower(controller_epoch=1, leader_id=LEADER, leader_epoch=epoch, replicas=(LEADER, FOLLOWER),
                    isr=(LEADER, FOLLOWER), zk_version=0)
    return p


def produce(p: Partition, n: int, now: int = T, acks: int = 1) -> None:
    for _ in range(n):
        p.append_as_leader(batch([f"m{p.log_end_offset}"]), acks, now, LAG)


# ------------------------------------------------------------------ leadership


def test_make_leader_records_the_epoch_start_and_a_lone_leader_commits_its_log(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    lg.append_as_leader(batch(["a", "b", "c"]), leader_epoch=0, now_ms=0)
    p = Partition("t", 0, lg, LEADER)
    assert not p.is_leader and p.high_watermark == 0
    moved = p.make_leader(controller_epoch=3, leader_epoch=2, replicas=(LEADER, FOLLOWER), isr=(LEADER,),
                          zk_version=7, now_ms=T, lag_max_ms=LAG)
    # S8.2: epoch 2 starts at the LEO; with the ISR = [leader] every record is committed (S3.4).
    assert moved and p.high_watermark == lg.high_watermark == 3
    assert lg.epoch_cache.pairs() == [(0, 0), (2, 3)]
    assert (p.is_leader, p.leader_id, p.leader_epoch, p.isr, p.zk_version, p.controller_epoch) == \
        (True, LEADER, 2, (LEADER,), 7, 3)


def test_make_follower_and_stop_leading_drop_the_leader_state(tmp_path: Path) -> None:
    p = leader(tmp_path)
    p.make_follower(controller_epoch=2, leader_id=FOLLOWER, leader_epoch=1, replicas=(LEADER, FOLLOWER),
                    isr=(FOLLOWER,), zk_version=1)
    assert not p.is_leader and p.leader_state is None and (p.leader_id, p.leader_epoch) == (FOLLOWER, 1)
    with pytest.raises(errors.NotLeaderOrFollowerError):
        produce(p, 1)
    q = leader(tmp_path / "q")
    q.stop_leading()
    assert not q.is_leader


def test_check_leader_epoch_fences_older_and_refuses_newer(tmp_path: Path) -> None:
    p = leader(tmp_path, epoch=5)
    p.check_leader_epoch(-1)
    p.check_leader_epoch(5)
    with pytest.raises(errors.FencedLeaderEpochError):
        p.check_leader_epoch(4)
    with pytest.raises(errors.UnknownLeaderEpochError):
        p.check_leader_epoch(6)


# ------------------------------------------------------------------ leader: HW (S3) and acks (S5)


def test_s3_hw_moves_on_the_followers_second_fetch_and_the_log_stores_it(tmp_path: Path) -> None:
    p = leader(tmp_path)
    produce(p, 1)
    assert p.high_watermark == 0  # the follower's LEO is unknown
    r = p.record_follower_fetch(FOLLOWER, 0, -1, now_ms=T + 1, lag_max_ms=LAG)
    assert not r.high_watermark_moved and r.isr_change is None and p.high_watermark == 0
    r = p.record_follower_fetch(FOLLOWER, 1, 0, now_ms=T + 2, lag_max_ms=LAG)
    assert r.high_watermark_moved and p.high_watermark == p.log.high_watermark == 1
    assert p.leader_state is not None and p.leader_state.high_watermark == 1


def test_s5_2_acks_all_is_refused_before_writing_when_the_isr_is_too_small(tmp_path: Path) -> None:
    p = leader(tmp_path, isr=(LEADER,), cfg=LogConfig(min_insync_replicas=2))
    with pytest.raises(errors.NotEnoughReplicasError):
        p.append_as_leader(batch(["x"]), -1, T, LAG)
    assert p.log_end_offset == 0
    result = p.append_as_leader(batch(["x"]), 1, T, LAG)  # acks=1 is not bound by min.insync.replicas
    assert (result.info.first_offset, result.high_watermark_moved, p.high_watermark) == (0, True, 1)


def test_s5_delayed_produce_outcomes(tmp_path: Path) -> None:
    p = leader(tmp_path, cfg=LogConfig(min_insync_replicas=2))
    produce(p, 2, acks=-1)
    assert p.delayed_produce_outcome(2, timed_out=False) == WAIT
    p.record_follower_fetch(FOLLOWER, 2, -1, T + 1, LAG)
    assert p.delayed_produce_outcome(2, timed_out=False) == ACK
    produce(p, 1, acks=-1)
    # The follower falls out; the shrink moves the HW past offset 2, which only the leader has.
    change = p.maybe_shrink_isr(T + LAG + 2, LAG)
    assert change is not None and change.new_isr == (LEADER,)
    assert p.on_isr_committed(change.new_isr, 1, T + LAG + 2, LAG) and p.high_watermark == 3
    assert p.delayed_produce_outcome(3, timed_out=False) == NOT_ENOUGH_REPLICAS_AFTER_APPEND
    p.make_follower(controller_epoch=1, leader_id=FOLLOWER, leader_epoch=1, replicas=(LEADER, FOLLOWER),
                    isr=(FOLLOWER,), zk_version=2)
    assert p.delayed_produce_outcome(3, timed_out=False) == ACK  # committed before the leadership moved
    assert p.delayed_produce_outcome(4, timed_out=False) == NOT_LEADER


# ------------------------------------------------------------------ leader: the ISR (S4)


def test_s4_3_a_caught_up_follower_is_proposed_and_joins_on_commit(tmp_path: Path) -> None:
    p = leader(tmp_path, isr=(LEADER,))
    produce(p, 2)
    assert p.high_watermark == 2
    r = p.record_follower_fetch(FOLLOWER, 2, -1, T + 1, LAG)
    assert r.isr_change is not None and r.isr_change.new_isr == (LEADER, FOLLOWER)
    assert r.isr_change.expected_zk_version == 0
    assert p.isr == (LEADER,)  # a proposal until ZooKeeper says so
    p.on_isr_committed(r.isr_change.new_isr, 1, T + 1, LAG)
    assert (list(p.isr), p.zk_version) == ([LEADER, FOLLOWER], 1)
    assert p.leader_state is not None and p.leader_state.isr == (LEADER, FOLLOWER)


def test_s4_2_shrink_proposal_and_a_failed_write_of_this_epoch_allows_a_new_one(tmp_path: Path) -> None:
    p = leader(tmp_path)
    produce(p, 1)
    assert p.maybe_shrink_isr(T + LAG, LAG) is None  # caught up at make_leader: not yet
    change = p.maybe_shrink_isr(T + LAG + 1, LAG)
    assert change is not None and change.new_isr == (LEADER,)
    assert p.maybe_shrink_isr(T + LAG + 2, LAG) is None  # one change in flight at a time
    p.on_isr_write_failed(leader_epoch=0)
    assert p.isr == (LEADER, FOLLOWER)
    assert p.maybe_shrink_isr(T + LAG + 3, LAG) is not None


def test_an_isr_write_failure_of_an_older_epoch_leaves_the_new_epochs_proposal(tmp_path: Path) -> None:
    p = leader(tmp_path, epoch=0)
    p.make_leader(controller_epoch=1, leader_epoch=1, replicas=(LEADER, FOLLOWER), isr=(LEADER, FOLLOWER),
                  zk_version=1, now_ms=T, lag_max_ms=LAG)
    assert p.maybe_shrink_isr(T + LAG + 1, LAG) is not None
    p.on_isr_write_failed(leader_epoch=0)  # the answer to a write made at epoch 0
    assert p.leader_state is not None and p.leader_state.pending_isr == (LEADER,)


def test_s3_4_a_committed_shrink_moves_the_hw_a_lagging_follower_held(tmp_path: Path) -> None:
    p = leader(tmp_path)
    produce(p, 3)
    p.record_follower_fetch(FOLLOWER, 1, -1, T + 1, LAG)
    assert p.high_watermark == 1
    assert not p.on_isr_committed((LEADER, FOLLOWER), 1, T + 2, LAG)
    assert p.on_isr_committed((LEADER,), 2, T + LAG + 10, LAG)
    assert p.high_watermark == p.log.high_watermark == 3


# ------------------------------------------------------------------ leader: follower fetches are validated first (item 8)


def test_item8_a_fetch_beyond_the_leo_is_out_of_range_and_not_counted(tmp_path: Path) -> None:
    p = leader(tmp_path, isr=(LEADER,))
    produce(p, 2)
    with pytest.raises(errors.OffsetOutOfRangeError):
        p.record_follower_fetch(FOLLOWER, 100, -1, T + 1, LAG)
    st = p.leader_state
    assert st is not None
    # Counted, it would have made the follower "caught up" at 100 and proposed it for the ISR.
    assert st.follower_log_end_offset(FOLLOWER) == -1 and st.followers[FOLLOWER].last_caught_up_time_ms == 0
    assert st.pending_isr is None and p.high_watermark == 2


def test_item8_a_fetch_below_the_log_start_is_out_of_range_and_not_counted(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    lg.append_as_leader(batch(["a", "b", "c"]) + batch(["d", "e", "f"]), leader_epoch=0, now_ms=0)
    lg.close()
    p = leader(tmp_path, log=open_log(tmp_path, log_start_offset=3, high_watermark=6))
    assert (p.log_start_offset, p.log_end_offset) == (3, 6)
    with pytest.raises(errors.OffsetOutOfRangeError):
        p.record_follower_fetch(FOLLOWER, 1, -1, T + 1, LAG)
    assert p.leader_state is not None and p.leader_state.follower_log_end_offset(FOLLOWER) == -1


def test_item8_a_fetch_from_a_broker_that_is_not_a_replica_is_refused(tmp_path: Path) -> None:
    p = leader(tmp_path)
    produce(p, 1)
    with pytest.raises(errors.NotLeaderOrFollowerError):
        p.record_follower_fetch(OUTSIDER, 1, -1, T + 1, LAG)
    with pytest.raises(errors.NotLeaderOrFollowerError):
        p.validate_follower_fetch(OUTSIDER, 0, -1)


def test_item8_a_fetch_at_another_epoch_or_to_a_follower_is_refused(tmp_path: Path) -> None:
    p = leader(tmp_path, epoch=3)
    produce(p, 1)
    with pytest.raises(errors.FencedLeaderEpochError):
        p.record_follower_fetch(FOLLOWER, 1, 2, T + 1, LAG)
    assert p.leader_state is not None and p.leader_state.follower_log_end_offset(FOLLOWER) == -1
    q = follower(tmp_path)
    with pytest.raises(errors.NotLeaderOrFollowerError):
        q.record_follower_fetch(LEADER, 0, -1, T + 1, LAG)


# ------------------------------------------------------------------ follower: appends, HW, truncation (S3.5, S8)


def test_s3_5_follower_appends_and_takes_the_leaders_hw_capped_at_its_leo(tmp_path: Path) -> None:
    src = leader(tmp_path, isr=(LEADER,))
    produce(src, 4)
    f = follower(tmp_path)
    data = src.log.read(0, 1 << 20, max_offset=2)
    info = f.append_as_follower(data, leader_high_watermark=4, now_ms=0)
    assert info is not None and f.log_end_offset == 2 and f.high_watermark == 2
    assert f.append_as_follower(b"", leader_high_watermark=4, now_ms=0) is None and f.high_watermark == 2
    f.append_as_follower(src.log.read(2, 1 << 20), leader_high_watermark=3, now_ms=0)
    assert (f.log_end_offset, f.high_watermark) == (4, 3)
    assert [r.value for r in decode_batches(f.log.read(0, 1 << 20))] == [b"m0", b"m1", b"m2", b"m3"]


def test_s8_3_truncation_goes_through_the_partition_and_the_hw_follows(tmp_path: Path) -> None:
    src = leader(tmp_path, isr=(LEADER,))
    produce(src, 5)
    f = follower(tmp_path)
    f.append_as_follower(src.log.read(0, 1 << 20), leader_high_watermark=5, now_ms=0)
    assert f.high_watermark == 5
    assert f.truncate_to(3) and (f.log_end_offset, f.high_watermark) == (3, 3)
    assert not f.truncate_to(3)
    f.truncate_fully_and_start_at(10)
    assert (f.log_start_offset, f.log_end_offset, f.high_watermark) == (10, 10, 10)


def test_s8_3_kip279_epoch_truncation_is_checkpointed(tmp_path: Path) -> None:
    # The follower saw epochs 0 and 2; the new leader never saw epoch 2: cut there and ask again.
    f = follower(tmp_path, epoch=3)
    src = leader(tmp_path, isr=(LEADER,), epoch=0)
    produce(src, 2)
    src.make_leader(controller_epoch=1, leader_epoch=2, replicas=(LEADER, FOLLOWER), isr=(LEADER,), zk_version=1,
                    now_ms=T, lag_max_ms=LAG)
    produce(src, 2)
    f.append_as_follower(src.log.read(0, 1 << 20), leader_high_watermark=0, now_ms=0)
    assert f.log.epoch_cache.pairs() == [(0, 0), (2, 2)] and f.latest_epoch == 2
    decision = f.follower_truncation_offset(leader_epoch=1, leader_end_offset=3)
    assert (decision.offset, decision.completed) == (2, False)
    assert f.truncate_to(decision.offset)
    f.truncate_epochs_from_end(decision.offset)
    f.log.close()
    assert open_log(tmp_path, "f-0").epoch_cache.pairs() == [(0, 0)]


def test_a_leader_never_truncates_or_appends_as_a_follower(tmp_path: Path) -> None:
    p = leader(tmp_path, isr=(LEADER,))
    produce(p, 2)
    for call in (lambda: p.truncate_to(0), lambda: p.truncate_fully_and_start_at(5),
                 lambda: p.truncate_epochs_from_end(0),
                 lambda: p.append_as_follower(b"", leader_high_watermark=0, now_ms=0)):
        with pytest.raises(errors.NotLeaderOrFollowerError):
            call()
    assert (p.log_end_offset, p.high_watermark) == (2, 2)


# ------------------------------------------------------------------ the ReplicaManager's fetch path (item 8)


@dataclass
class FakeZk:
    """The gateway calls the replica manager may make; records ISR writes instead of making them."""

    isr_writes: list[tuple[str, int, Any, int]] = field(default_factory=list)

    def update_partition_state(self, topic: str, partition: int, state: Any, expected_version: int) -> int:
        self.isr_writes.append((topic, partition, state, expected_version))
        return expected_version + 1

    def create_isr_change_notification(self, _tps: Any) -> None:
        pass


def replica_manager(tmp_path: Path, isr: tuple[int, ...]) -> tuple[ReplicaManager, FakeZk]:
    cfg = LogConfig()
    lm = LogManager([tmp_path / "logs"], cfg)
    lm.startup(0)
    zk = FakeZk()
    rm = ReplicaManager(BrokerSettings(LEADER, LAG, cfg), lm, zk, MetadataCache(),  # type: ignore[arg-type]
                        lambda _t: cfg)
    resp = rm.handle_leader_and_isr(pb.LeaderAndIsrRequest(controller_id=LEADER, controller_epoch=1, partition_states=[
        pb.LeaderAndIsrPartitionState(topic_name="t", partition_index=0, controller_epoch=1, leader=LEADER,
                                      leader_epoch=0, isr=isr, zk_version=0, replicas=[LEADER, FOLLOWER])]))
    assert resp.partition_errors[0].error_code == pb.ErrorCode.NONE
    return rm, zk


def as_broker(broker_id: int) -> RequestContext:
    return RequestContext(Principal("User", f"broker-{broker_id}"), "INTERNAL", PLAINTEXT, "127.0.0.1",
                          inter_broker=True, broker_id=broker_id)


def follower_fetch(rm: ReplicaManager, replica_id: int, offset: int) -> pb.FetchPartitionResponse:
    req = pb.FetchRequest(replica_id=replica_id, max_wait_ms=0, max_bytes=1 << 20, topics=[pb.FetchTopic(
        name="t", partitions=[pb.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])])
    resp = asyncio.run(rm.handle_fetch(req, as_broker(replica_id)))
    return resp.topics[0].partitions[0]


def test_item8_replica_manager_answers_out_of_range_beyond_the_leo_and_counts_nothing(tmp_path: Path) -> None:
    rm, zk = replica_manager(tmp_path, isr=(LEADER,))
    p = rm.partitions[("t", 0)]
    produce(p, 2)
    r = follower_fetch(rm, FOLLOWER, 100)
    assert r.error_code == pb.ErrorCode.OFFSET_OUT_OF_RANGE and r.records == b""
    st = p.leader_state
    assert st is not None and st.follower_log_end_offset(FOLLOWER) == -1 and st.pending_isr is None
    assert zk.isr_writes == [] and p.isr == (LEADER,)
    # A valid fetch at the LEO is served, counted, and proposes the follower for the ISR.
    r = follower_fetch(rm, FOLLOWER, 2)
    assert r.error_code == pb.ErrorCode.NONE and st.follower_log_end_offset(FOLLOWER) == 2
    assert st.pending_isr == (LEADER, FOLLOWER)


def test_item8_replica_manager_refuses_and_does_not_serve_a_broker_that_is_not_a_replica(tmp_path: Path) -> None:
    rm, zk = replica_manager(tmp_path, isr=(LEADER, FOLLOWER))
    p = rm.partitions[("t", 0)]
    produce(p, 2)
    r = follower_fetch(rm, OUTSIDER, 0)
    assert r.error_code == pb.ErrorCode.NOT_LEADER_OR_FOLLOWER and r.records == b""
    assert r.high_watermark == -1  # nothing about the partition is disclosed either
    assert p.leader_state is not None and OUTSIDER not in p.leader_state.followers
    assert zk.isr_writes == [] and p.high_watermark == 0
    r = follower_fetch(rm, FOLLOWER, 0)
    assert r.error_code == pb.ErrorCode.NONE and len(r.records) > 0


def test_bytes_in_and_out_count_each_answered_byte_once(tmp_path: Path) -> None:
    """Kafka's BytesIn/BytesOut, counted by the replica manager where it holds the bytes (reading a
    protobuf bytes field again to measure it would copy it): a Produce's records once, a Fetch's
    answer once - also when it parked and was read again before answering."""
    rm, _zk = replica_manager(tmp_path, isr=(LEADER,))
    batch = encode_batch([Record(value=b"v" * 50, timestamp=T + i) for i in range(3)])
    req = pb.ProduceRequest(acks=1, timeout_ms=1000, topics=[pb.ProduceTopicData(
        name="t", partitions=[pb.ProducePartitionData(partition=0, records=batch)])])

    async def run() -> None:
        resp = await rm.handle_produce(req)
        assert resp.topics[0].partitions[0].error_code == pb.ErrorCode.NONE
        assert (rm.bytes_in, rm.bytes_out) == (len(batch), 0)
        fetch = pb.FetchRequest(replica_id=-1, max_wait_ms=0, max_bytes=1 << 20, topics=[pb.FetchTopic(
            name="t", partitions=[pb.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
        # (the leader stamped its epoch into the batch: same length, not the same bytes)
        assert len((await rm.handle_fetch(fetch)).topics[0].partitions[0].records) == len(batch)
        assert rm.bytes_out == len(batch)
        # min_bytes above what there is: read, parked (read again by every readiness check), read at the end.
        fetch.min_bytes, fetch.max_wait_ms = 10 * len(batch), 30
        assert len((await rm.handle_fetch(fetch)).topics[0].partitions[0].records) == len(batch)
        assert rm.bytes_out == 2 * len(batch)

    asyncio.run(run())
