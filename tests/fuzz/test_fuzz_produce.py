"""Produce with hostile record batches (issue 12, SPEC S13.1/S13.2): mutated headers with the CRC
recomputed, broken record framing, malformed and bomb-sized compressed payloads, garbage, many
batches per partition, the same partition many times - then the read paths (ListOffsets by
timestamp, consumer Fetch) over whatever the leader kept."""

from __future__ import annotations

import pytest
from fuzz_batches import Payload, now_ms, payloads, valid_batch_bytes
from fuzz_support import FuzzFailure, Harness, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

from proto import minikafka_pb2 as pb

pytestmark = pytest.mark.integration

ACKS = st.sampled_from([-1, -1, -1, 1, 1, 0, 2, -2])
# Mostly the committed partition; sometimes one that does not exist.
PARTITIONS = st.sampled_from([0] * 8 + [1, -1, (1 << 31) - 1])
TIMESTAMPS = st.sampled_from([-1, -2, -3, 0, 1, (1 << 63) - 1, -(1 << 63)]) | st.just("now")


def test_produce_hostile_batches(fuzz: Harness) -> None:
    @fuzz_settings(60)
    @given(payload=payloads(), acks=ACKS, partition=PARTITIONS, list_ts=TIMESTAMPS,
           also_missing_topic=st.booleans(), copies=st.sampled_from([1] * 10 + [2, 3]))
    def run(payload: Payload, acks: int, partition: int, list_ts: int | str, also_missing_topic: bool,
            copies: int) -> None:
        with fuzz.example(**locals()):
            topic = fuzz.committed.name
            conn = fuzz.leader_conn(topic)
            leo_before = fuzz.log_end_offset(conn, topic)
            req = fuzz.produce_request(topic, payload, partition, acks=acks, timeout_ms=3000)
            for _ in range(copies - 1):  # the same partition listed again in one request
                req.topics[0].partitions.add(partition=partition, records=payload.data)
            if also_missing_topic:
                req.topics.add(name=fuzz.unique_name("fuzz-missing"),
                               partitions=[pb.ProducePartitionData(partition=0, records=payload.data)])
            resp = fuzz.call(conn, "Produce", req, timeout=30)
            leo_after = fuzz.log_end_offset(conn, topic)
            # The cold read paths over whatever was stored: offset by timestamp, a consumer fetch.
            ts = now_ms() if list_ts == "now" else int(list_ts)
            fuzz.call(conn, "ListOffsets", pb.ListOffsetsRequest(replica_id=-1, topics=[pb.ListOffsetsTopic(
                name=topic, partitions=[pb.ListOffsetsPartition(partition=0, timestamp=ts)])]), timeout=30)
            fuzz.call(conn, "Fetch", pb.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                                                     topics=[pb.FetchTopic(name=topic, partitions=[pb.FetchPartition(
                                                         partition=0, fetch_offset=max(leo_before, 0),
                                                         partition_max_bytes=1 << 20)])]))
            if resp is not None:
                if copies == 1 and partition == 0:
                    fuzz.check_produce_outcome(payload, resp, topic, partition, acks, leo_before, leo_after)
                elif payload.must_refuse and any(p.error_code == pb.ErrorCode.NONE
                                                 for t in resp.topics for p in t.partitions):
                    raise FuzzFailure(f"the leader accepted a batch it must refuse: {payload.label}")

    run()
    fuzz.end_of_test()


def test_produce_hostile_batches_to_several_partitions(fuzz: Harness) -> None:
    """A hostile batch and valid batches for other partitions in one request: each partition is
    answered for itself, and the valid ones are written."""
    topic_holder: list[str] = []

    @fuzz_settings(15)
    @given(payload=payloads(with_heavy=False), acks=st.sampled_from([-1, 1]))
    def run(payload: Payload, acks: int) -> None:
        if fuzz.damaged:
            topic_holder.clear()  # the last example may have broken it: a fresh topic after the repair
        with fuzz.example(**locals()):
            if not topic_holder:
                topic_holder.append(fuzz.create_topic_ok(fuzz.unique_name("fuzz-multi"), partitions=3, rf=3))
            multi = topic_holder[0]
            leaders = {p: fuzz.leader_of(multi, p) for p in range(3)}
            leader = leaders[0]
            # Only partitions this broker leads can be written through it.
            led = [p for p, b in leaders.items() if b == leader]
            req = pb.ProduceRequest(acks=acks, timeout_ms=3000, topics=[pb.ProduceTopicData(name=multi, partitions=[
                pb.ProducePartitionData(partition=p, records=payload.data if p == 0 else valid_batch_bytes([b"ok"]))
                for p in led])])
            resp = fuzz.call(fuzz.conn(leader), "Produce", req, timeout=30)
            if resp is None:
                return
            got = {p.partition: p.error_code for t in resp.topics for p in t.partitions}
            if set(got) != set(led):
                raise FuzzFailure(f"Produce answered partitions {sorted(got)}, asked {led}")
            for p in led:
                if p != 0 and got[p] not in (pb.ErrorCode.NONE, pb.ErrorCode.NOT_ENOUGH_REPLICAS,
                                             pb.ErrorCode.REQUEST_TIMED_OUT):
                    raise FuzzFailure(f"a valid batch for partition {p} was refused ({pb.ErrorCode.Name(got[p])}) "
                                      f"next to {payload.label}")
                if p == 0 and payload.must_refuse and got[p] == pb.ErrorCode.NONE:
                    raise FuzzFailure(f"the leader accepted a batch it must refuse: {payload.label}")

    run()
    fuzz.end_of_test()
