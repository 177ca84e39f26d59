"""Issue 12's probes, one test each, deterministic: every one must end in a typed answer and leave
the cluster healthy (the harness's invariants), and the produce probes also survive a SIGKILL and
restart of the partition leader. The hypothesis tests explore around them; these pin them down."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from fuzz_batches import (
    CODEC_GZIP,
    CODEC_ZSTD,
    CONTROL_BIT,
    HEADER_SIZE,
    TRANSACTIONAL_BIT,
    Payload,
    bomb_batch,
    fix_crc,
    frame,
    hostile_record,
    set_fields,
    valid_batch_bytes,
)
from fuzz_support import FuzzFailure, Harness, check_fetch_bounds, short

from proto import minikafka_pb2 as pb

pytestmark = pytest.mark.integration
E = pb.ErrorCode
INT32_MAX = (1 << 31) - 1


def produce_refused(fuzz: Harness, payload: Payload, acks: int = -1) -> int:
    """Produce ``payload`` to the committed partition; it must be refused, writing nothing."""
    topic = fuzz.committed.name
    conn = fuzz.leader_conn(topic)
    before = fuzz.log_end_offset(conn, topic)
    resp = fuzz.call(conn, "Produce", fuzz.produce_request(topic, payload, acks=acks, timeout_ms=3000), timeout=30)
    assert resp is not None
    fuzz.check_produce_outcome(payload, resp, topic, 0, acks, before, fuzz.log_end_offset(conn, topic))
    return int(resp.topics[0].partitions[0].error_code)


def three_records() -> bytes:
    return valid_batch_bytes([b"alpha", b"beta", b"gamma"], keys=[b"k1", None, b"k3"])


# ------------------------------------------------------------------ batches (with a leader restart)

def probe_last_offset_delta_max(fuzz: Harness) -> None:
    produce_refused(fuzz, Payload("one record, last_offset_delta 2**31-1",
                                  set_fields(valid_batch_bytes([b"x"]), last_offset_delta=INT32_MAX), must_refuse=True))


def probe_garbage_records_under_valid_crc(fuzz: Harness) -> None:
    b = bytearray(three_records())
    for pos in range(HEADER_SIZE, len(b), 3):
        b[pos] ^= 0x5A
    produce_refused(fuzz, Payload("records section scrambled, CRC recomputed", fix_crc(b), must_refuse=True))


def probe_record_count_disagrees(fuzz: Harness) -> None:
    produce_refused(fuzz, Payload("3 records, record_count 5 and last_offset_delta 4",
                                  set_fields(three_records(), record_count=5, last_offset_delta=4), must_refuse=True))


def probe_negative_record_length(fuzz: Harness) -> None:
    section = hostile_record(0, None, b"ok") + hostile_record(1, "length-negative", b"bad")
    produce_refused(fuzz, Payload("second record length -5", frame(section, record_count=2), must_refuse=True))


def probe_corrupt_gzip(fuzz: Harness) -> None:
    produce_refused(fuzz, Payload("gzip magic then garbage",
                                  frame(b"\x1f\x8b\x08\x00garbage-not-deflate", record_count=1, attributes=CODEC_GZIP),
                                  must_refuse=True))


def probe_corrupt_zstd(fuzz: Harness) -> None:
    produce_refused(fuzz, Payload("zstd magic then garbage",
                                  frame(b"\x28\xb5\x2f\xfdgarbage-not-zstd", record_count=1, attributes=CODEC_ZSTD),
                                  must_refuse=True))


def probe_control_flag(fuzz: Harness) -> None:
    produce_refused(fuzz, Payload("control batch from a client",
                                  set_fields(three_records(), attributes=CONTROL_BIT), must_refuse=True))


def probe_transactional_flag(fuzz: Harness) -> None:
    produce_refused(fuzz, Payload("transactional batch without a producer id",
                                  set_fields(three_records(), attributes=TRANSACTIONAL_BIT), must_refuse=True))


def probe_absurd_timestamps(fuzz: Harness) -> None:
    section = hostile_record(0, "timestamp-delta-huge", b"future")
    produce_refused(fuzz, Payload("record timestamp now + 2**62 ms", frame(section, record_count=1), must_refuse=True))
    produce_refused(fuzz, Payload("base timestamp -2**63", set_fields(three_records(), base_timestamp=-(1 << 63),
                                                                      max_timestamp=-(1 << 63) + 2), must_refuse=True))


def probe_compression_bomb_then_list_offsets(fuzz: Harness) -> None:
    topic = fuzz.committed.name
    refused: FuzzFailure | None = None
    try:
        produce_refused(fuzz, Payload("zstd bomb: one record of 64 MiB", bomb_batch("zstd-record"), must_refuse=True))
    except FuzzFailure as e:
        refused = e
    # Whatever was kept, offset-by-timestamp (which decodes records) answers promptly.
    start = time.monotonic()
    fuzz.call(fuzz.leader_conn(topic), "ListOffsets", pb.ListOffsetsRequest(replica_id=-1, topics=[pb.ListOffsetsTopic(
        name=topic, partitions=[pb.ListOffsetsPartition(partition=0, timestamp=0)])]), timeout=30)
    took = time.monotonic() - start
    if took > 2.0:
        raise FuzzFailure(f"{refused or ''} ;; ListOffsets by timestamp took {took:.1f}s after a compression bomb")
    if refused is not None:
        raise refused


def probe_600_batches_in_one_partition(fuzz: Harness) -> None:
    topic = fuzz.committed.name
    one = valid_batch_bytes([b"many"])
    # Appended (this project's choice) or refused (Kafka takes one batch per partition), but typed.
    payload = Payload("600 valid one-record batches for one partition", one * 600)
    conn = fuzz.leader_conn(topic)
    before = fuzz.log_end_offset(conn, topic)
    resp = fuzz.call(conn, "Produce", fuzz.produce_request(topic, payload, timeout_ms=5000), timeout=30)
    assert resp is not None
    fuzz.check_produce_outcome(payload, resp, topic, 0, -1, before, fuzz.log_end_offset(conn, topic))


def probe_unknown_producer_id(fuzz: Harness) -> None:
    code = produce_refused(fuzz, Payload("producer id 2**40 that nobody allocated",
                                         valid_batch_bytes([b"who"], producer_id=1 << 40, producer_epoch=0,
                                                           base_sequence=0), must_refuse=True))
    if code != E.UNKNOWN_PRODUCER_ID:
        raise FuzzFailure(f"an unallocated producer id was refused with {E.Name(code)}, not UNKNOWN_PRODUCER_ID")


BATCH_PROBES: dict[str, Callable[[Harness], None]] = {
    "last_offset_delta_2**31-1": probe_last_offset_delta_max,
    "garbage_records_valid_crc": probe_garbage_records_under_valid_crc,
    "record_count_disagrees": probe_record_count_disagrees,
    "negative_record_length": probe_negative_record_length,
    "corrupt_gzip": probe_corrupt_gzip,
    "corrupt_zstd": probe_corrupt_zstd,
    "control_flag": probe_control_flag,
    "transactional_flag": probe_transactional_flag,
    "absurd_timestamps": probe_absurd_timestamps,
    "compression_bomb": probe_compression_bomb_then_list_offsets,
    "600_batches_one_partition": probe_600_batches_in_one_partition,
    "unknown_producer_id": probe_unknown_producer_id,
}
# The probes that leave the most interesting log behind: the leader is killed and restarted after them.
RESTART_AFTER = {"last_offset_delta_2**31-1", "garbage_records_valid_crc", "compression_bomb",
                 "600_batches_one_partition"}


@pytest.mark.parametrize("probe", sorted(BATCH_PROBES))
def test_batch_probe(fuzz: Harness, probe: str) -> None:
    with fuzz.example(probe=probe):
        # Every symptom of the probe is reported: a wrong answer does not skip the restart after it.
        found: list[str] = []
        steps: list[Callable[[], None]] = [lambda: BATCH_PROBES[probe](fuzz), fuzz.check_invariants]
        if probe in RESTART_AFTER:
            steps.append(fuzz.kill_and_restart_leader)
        for step in steps:
            try:
                step()
            except FuzzFailure as e:
                found.append(str(e))
        if found:
            raise FuzzFailure(" ;; AND THEN: ".join(found))
    if fuzz.keep_going and fuzz.failures:
        raise FuzzFailure(fuzz.failures[0])


# ------------------------------------------------------------------ requests and names

def probe_same_partition_1500_times_in_produce(fuzz: Harness) -> None:
    topic = fuzz.committed.name
    req = fuzz.produce_request(topic, valid_batch_bytes([b"dup"]), acks=-1, timeout_ms=5000)
    for _ in range(1499):
        req.topics[0].partitions.add(partition=0, records=valid_batch_bytes([b"dup"]))
    fuzz.call(fuzz.leader_conn(topic), "Produce", req, timeout=60)


def probe_same_partition_1500_times_in_fetch(fuzz: Harness) -> None:
    topic = fuzz.committed.name
    # ~130 KB in the partition, so that 1,500 copies of it would be ~200 MB.
    for i in range(13):
        fuzz.produce_valid(valid_batch_bytes([bytes([i]) * 10_000]))
    req = pb.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=INT32_MAX, topics=[pb.FetchTopic(
        name=topic, partitions=[pb.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=INT32_MAX)] * 1500)])
    resp = fuzz.call(fuzz.leader_conn(topic), "Fetch", req, timeout=60)
    if resp is not None:
        check_fetch_bounds(req, resp)


def probe_path_names_in_admin_rpcs(fuzz: Harness) -> None:
    fuzz.arm_escape_check()
    conn = fuzz.any_conn()
    for name in ["..", "../x", "a/b", "../../broker-1", "./.", "x/../.."]:
        fuzz.call(conn, "DescribeConfigs", pb.DescribeConfigsRequest(resources=[pb.DescribeConfigsResource(
            resource_type=pb.ConfigResourceType.TOPIC, resource_name=name)]))
        fuzz.call(conn, "AlterConfigs", pb.AlterConfigsRequest(resources=[pb.AlterConfigsResource(
            resource_type=pb.ConfigResourceType.TOPIC, resource_name=name,
            configs=[pb.AlterableConfig(name="retention.bytes", value="-1")])]))
        fuzz.call(conn, "DeleteTopics", pb.DeleteTopicsRequest(topic_names=[name], timeout_ms=3000))


def probe_delete_partitions_suffix(fuzz: Harness) -> None:
    """DeleteTopics("<topic>/partitions") must not delete <topic> (the invariants check it is there)."""
    conn = fuzz.any_conn()
    for suffix in ("/partitions", "/partitions/0", "/partitions/0/state"):
        resp = fuzz.call(conn, "DeleteTopics", pb.DeleteTopicsRequest(topic_names=[fuzz.committed.name + suffix],
                                                                      timeout_ms=3000))
        if resp is not None and resp.responses[0].error_code == E.NONE:
            raise FuzzFailure(f"DeleteTopics({fuzz.committed.name + suffix!r}) answered NONE")


def probe_create_100000_partitions(fuzz: Harness) -> None:
    resp = fuzz.call(fuzz.any_conn(), "CreateTopics", pb.CreateTopicsRequest(topics=[pb.CreatableTopic(
        name=fuzz.unique_name("fuzz-huge"), num_partitions=100_000, replication_factor=1)], timeout_ms=5000), timeout=60)
    if resp is not None and resp.topics[0].error_code == E.NONE:
        raise FuzzFailure("CreateTopics accepted 100,000 partitions")


def probe_create_zero_partitions_or_replicas(fuzz: Harness) -> None:
    for partitions, rf in ((0, 1), (1, 0), (-5, 1), (1, -5)):
        resp = fuzz.call(fuzz.any_conn(), "CreateTopics", pb.CreateTopicsRequest(topics=[pb.CreatableTopic(
            name=fuzz.unique_name("fuzz-zero"), num_partitions=partitions, replication_factor=rf)], timeout_ms=5000),
            timeout=30)
        if resp is not None and resp.topics[0].error_code in (E.NONE, E.REQUEST_TIMED_OUT):
            raise FuzzFailure(f"CreateTopics accepted num_partitions={partitions} replication_factor={rf}: "
                              f"{short(resp)}")


def probe_tiny_segments(fuzz: Harness) -> None:
    """segment.bytes=100 would cost a file per batch: refused, or if accepted, not one file per batch."""
    name = fuzz.unique_name("fuzz-tiny-segments")
    resp = fuzz.call(fuzz.any_conn(), "CreateTopics", pb.CreateTopicsRequest(topics=[pb.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1, configs={"segment.bytes": "100"})], timeout_ms=10000),
        timeout=30)
    if resp is None or resp.topics[0].error_code != E.NONE:
        return
    for i in range(40):
        conn = fuzz.leader_conn(name)
        fuzz.call(conn, "Produce", fuzz.produce_request(name, valid_batch_bytes([b"s%d" % i]), acks=1))
    files = [p for d in Path(fuzz.cluster.dir).glob(f"broker-*/data/{name}-0") for p in d.iterdir()]
    fuzz.call(fuzz.any_conn(), "DeleteTopics", pb.DeleteTopicsRequest(topic_names=[name], timeout_ms=10000), timeout=30)
    if len(files) > 20:
        raise FuzzFailure(f"segment.bytes=100 was accepted and 40 one-record batches made {len(files)} files")


def probe_parked_long_polls(fuzz: Harness) -> None:
    """300 fetches parked at the log end: each answers typed (or is still waiting at its deadline)."""
    topic = fuzz.committed.name
    conn = fuzz.leader_conn(topic)
    end = fuzz.log_end_offset(conn, topic)
    req = pb.FetchRequest(replica_id=-1, max_wait_ms=3000, min_bytes=1, max_bytes=1 << 20, topics=[pb.FetchTopic(
        name=topic, partitions=[pb.FetchPartition(partition=0, fetch_offset=end, partition_max_bytes=1 << 20)])])
    futures = [conn.api.Fetch.future(req, timeout=10) for _ in range(300)]
    start = time.monotonic()
    fuzz.produce_valid(valid_batch_bytes([b"wake up"]))
    took = time.monotonic() - start
    for f in futures:
        try:
            resp = f.result()
        except grpc.RpcError as e:
            code = e.code()
            if code not in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise FuzzFailure(f"a parked fetch ended in gRPC {code.name}") from None
            continue
        code = resp.topics[0].partitions[0].error_code if resp.topics else resp.error_code
        if code not in pb.ErrorCode.values() or code == E.UNKNOWN_SERVER_ERROR:
            raise FuzzFailure(f"a parked fetch answered {code}")
    if took > 5.0:
        raise FuzzFailure(f"an acks=-1 produce took {took:.1f}s with 300 fetches parked")


REQUEST_PROBES: dict[str, Callable[[Harness], None]] = {
    "same_partition_1500x_produce": probe_same_partition_1500_times_in_produce,
    "same_partition_1500x_fetch": probe_same_partition_1500_times_in_fetch,
    "path_names_in_admin_rpcs": probe_path_names_in_admin_rpcs,
    "delete_topic_partitions_suffix": probe_delete_partitions_suffix,
    "create_100000_partitions": probe_create_100000_partitions,
    "create_zero_partitions_or_rf": probe_create_zero_partitions_or_replicas,
    "segment_bytes_100": probe_tiny_segments,
    "parked_long_polls": probe_parked_long_polls,
}


@pytest.mark.parametrize("probe", sorted(REQUEST_PROBES))
def test_request_probe(fuzz: Harness, probe: str) -> None:
    with fuzz.example(probe=probe):
        REQUEST_PROBES[probe](fuzz)
    if fuzz.keep_going and fuzz.failures:
        raise FuzzFailure(fuzz.failures[0])


def test_probes_end_with_a_leader_restart(fuzz: Harness) -> None:
    fuzz.end_of_test()
