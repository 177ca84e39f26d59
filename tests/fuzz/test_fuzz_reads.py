"""Fetch, ListOffsets and OffsetsForLeaderEpoch with hostile sizes, offsets, epochs and ids
(issue 12, SPEC S13.2/S13.4): every partition answered with a typed code, fetch responses bounded
by the request's max_bytes (and a broker cap), long polls bounded by max_wait_ms."""

from __future__ import annotations

import pytest
from fuzz_support import FuzzFailure, Harness, check_fetch_bounds, fuzz_settings, short
from hypothesis import given
from hypothesis import strategies as st

from proto import minikafka_pb2 as pb

pytestmark = pytest.mark.integration

INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)
# Replica ids a client may send: consumer (-1), debugging consumer (-2), and ids that are no broker.
# (Ids of real brokers are follower fetches: authentication for those is S12, not this suite.)
REPLICA_IDS = st.sampled_from([-1, -1, -1, -2, -3, 99, INT32[0], INT32[1]])


def int32s(*extra: int) -> st.SearchStrategy[int]:
    return st.sampled_from(sorted({INT32[0], -2, -1, 0, 1, 2, INT32[1], *extra})) | st.integers(*INT32)


def int64s(*extra: int) -> st.SearchStrategy[int]:
    return st.sampled_from(sorted({INT64[0], -2, -1, 0, 1, 5, 1 << 62, INT64[1], *extra})) | st.integers(*INT64)


def test_fetch_sizes_offsets_and_ids(fuzz: Harness) -> None:
    @fuzz_settings(50)
    @given(fetch_offset=int64s(3, 10, 1 << 40), max_bytes=int32s(61, 100), partition_max_bytes=int32s(61, 100),
           max_wait_ms=st.sampled_from([0, 0, 0, 1, 100, -1, -1000, INT32[0], INT32[1], 60_000]),
           min_bytes=int32s(1 << 30), replica_id=REPLICA_IDS, isolation=st.sampled_from([0, 0, 1, 2, 99]),
           current_leader_epoch=st.none() | int32s(), log_start_offset=int64s(),
           partition=st.sampled_from([0] * 6 + [1, -1, INT32[1]]), duplicates=st.sampled_from([1] * 8 + [2, 50, 1500]),
           missing_topic=st.booleans())
    def run(fetch_offset: int, max_bytes: int, partition_max_bytes: int, max_wait_ms: int, min_bytes: int,
            replica_id: int, isolation: int, current_leader_epoch: int | None, log_start_offset: int,
            partition: int, duplicates: int, missing_topic: bool) -> None:
        with fuzz.example(**locals()):
            topic = fuzz.committed.name
            fp = pb.FetchPartition(partition=partition, fetch_offset=fetch_offset, log_start_offset=log_start_offset,
                                   partition_max_bytes=partition_max_bytes)
            if current_leader_epoch is not None:
                fp.current_leader_epoch = current_leader_epoch
            req = pb.FetchRequest(replica_id=replica_id, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                                  max_bytes=max_bytes, isolation_level=isolation,  # type: ignore[arg-type]
                                  topics=[pb.FetchTopic(name=topic, partitions=[fp] * duplicates)])
            if missing_topic:
                req.topics.add(name=fuzz.unique_name("fuzz-missing"), partitions=[fp])
            # A long poll may outlast our deadline (that is what it asked for); a prompt one may not.
            long_poll = max_wait_ms > 1000
            resp = fuzz.call(fuzz.leader_conn(topic), "Fetch", req, timeout=2.0 if long_poll else 5.0,
                             may_wait=long_poll)
            if resp is not None:
                if resp.error_code == pb.ErrorCode.NONE:
                    names = {t.name for t in resp.topics}
                    missing = [t.name for t in req.topics if t.name not in names]
                    if missing:
                        raise FuzzFailure(f"Fetch did not answer topics {missing}")
                check_fetch_bounds(req, resp)

    run()
    fuzz.end_of_test()


def test_list_offsets_and_offsets_for_leader_epoch(fuzz: Harness) -> None:
    @fuzz_settings(30)
    @given(timestamp=int64s(-3, -4, 1_700_000_000_000), replica_id=REPLICA_IDS,
           isolation=st.sampled_from([0, 1, 2, 99]), current_leader_epoch=st.none() | int32s(),
           leader_epoch=int32s(3, 1000), partition=st.sampled_from([0] * 6 + [1, -1, INT32[1]]),
           duplicates=st.sampled_from([1] * 8 + [2, 1500]), broker_index=st.integers(0, 2))
    def run(timestamp: int, replica_id: int, isolation: int, current_leader_epoch: int | None, leader_epoch: int,
            partition: int, duplicates: int, broker_index: int) -> None:
        with fuzz.example(**locals()):
            topic = fuzz.committed.name
            lp = pb.ListOffsetsPartition(partition=partition, timestamp=timestamp)
            ep = pb.OffsetForLeaderPartition(partition=partition, leader_epoch=leader_epoch)
            if current_leader_epoch is not None:
                lp.current_leader_epoch = current_leader_epoch
                ep.current_leader_epoch = current_leader_epoch
            # Sent to the leader and to a broker that may not be it.
            for conn in (fuzz.leader_conn(topic), fuzz.any_conn(broker_index)):
                lo = fuzz.call(conn, "ListOffsets", pb.ListOffsetsRequest(
                    replica_id=replica_id, isolation_level=isolation,  # type: ignore[arg-type]
                    topics=[pb.ListOffsetsTopic(name=topic, partitions=[lp] * duplicates)]), timeout=20)
                if lo is not None and not any(t.name == topic for t in lo.topics):
                    raise FuzzFailure(f"ListOffsets did not answer {topic}: {short(lo)}")
                oe = fuzz.call(conn, "OffsetsForLeaderEpoch", pb.OffsetsForLeaderEpochRequest(
                    replica_id=replica_id, topics=[pb.OffsetForLeaderTopic(topic=topic, partitions=[ep] * duplicates)]),
                    timeout=20)
                if oe is not None and not any(t.topic == topic for t in oe.topics):
                    raise FuzzFailure(f"OffsetsForLeaderEpoch did not answer {topic}: {short(oe)}")

    run()
    fuzz.end_of_test()
