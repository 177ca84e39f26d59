"""Hostile input against real brokers (SPEC S13): every probe of issue 12 answers with a typed error
and leaves the cluster writable and restartable."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import zstandard
from helpers import (
    ClusterFixture,
    E,
    batch_of,
    create_topic,
    fetch,
    fresh_chroot,
    leader_of,
    produce,
    read_values,
    wait_for,
)

from client.connection import Connection
from client.consumer import Consumer, CorruptRecordError
from client.ops.local_cluster import LocalCluster, ZooKeeperServer
from client.structs import TopicPartition
from proto import minikafka_pb2 as pb
from proto import minikafka_pb2_grpc as pb_grpc
from proto.record_batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_ZSTD,
    CRC_OFFSET,
    Record,
    build_batch,
    crc32c,
    encode_batch,
    encode_record_body,
)

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
NOW = int(time.time() * 1000)


def recrc(batch: bytes | bytearray) -> bytes:
    b = bytearray(batch)
    struct.pack_into(">I", b, CRC_OFFSET, crc32c(bytes(b[ATTRIBUTES_OFFSET:])))
    return bytes(b)


def with_field(batch: bytes, offset: int, fmt: str, value: int) -> bytes:
    b = bytearray(batch)
    struct.pack_into(fmt, b, offset, value)
    return recrc(b)


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def metric(c: LocalCluster, broker_id: int, name: str) -> float:
    with urllib.request.urlopen(c.broker(broker_id).metrics_address, timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture(scope="module")
def hostile(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterFixture]:
    """One 3-broker cluster the probes share: they must not hurt it, and each checks that."""
    fx = ClusterFixture(tmp_path_factory.mktemp("hostile") / "cluster", fresh_chroot(zookeeper))
    fx.start(3, fetch_purgatory_max_requests="5")
    yield fx
    fx.stop()


def ready_topic(fx: ClusterFixture, name: str, rf: int = 3, **configs: str) -> tuple[Connection, int]:
    view = fx.view()
    res = create_topic(view, name, partitions=1, replication_factor=rf, configs=configs)
    assert res.error_code in (E.NONE, E.TOPIC_ALREADY_EXISTS), res.error_message
    wait_for(lambda: leader_of(view, name, 0)[0] >= 0 and len(view.partitions[(name, 0)].isr) == rf,
             what=f"{name} led with a full ISR")
    conn, pl = view.leader_connection(name, 0)
    return conn, pl.leader


def assert_still_writable(conn: Connection, topic: str, expected: list[str]) -> None:
    assert produce(conn, topic, 0, batch_of(["after"])).error_code == E.NONE
    assert read_values(conn, topic, 0) == [*expected, "after"]


# ------------------------------------------------------------------ records (S13.1)


def test_a_batch_claiming_2_pow_31_offsets_is_refused_and_the_leader_restarts(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3)
    conn, leader = ready_topic(cluster, "huge-delta")
    assert produce(conn, "huge-delta", 0, batch_of(["before"])).error_code == E.NONE
    bad = with_field(encode_batch([Record(value=b"x", timestamp=NOW)]), 23, ">i", 2**31 - 1)
    r = produce(conn, "huge-delta", 0, bad)
    assert r.error_code == E.INVALID_RECORD and "last_offset_delta" in r.error_message
    assert produce(conn, "huge-delta", 0, batch_of(["next"])).error_code == E.NONE
    c.signal(leader, "KILL")
    c.start(leader)
    c.wait_registered({1, 2, 3})
    view = cluster.view()
    wait_for(lambda: len(view.partitions[("huge-delta", 0)].isr) == 3 if leader_of(view, "huge-delta", 0)[0] >= 0
             else False, what="the restarted broker back in the ISR")
    conn, _ = view.leader_connection("huge-delta", 0)
    assert_still_writable(conn, "huge-delta", ["before", "next"])


def _record(i: int) -> bytes:
    return encode_record_body(i, 0, None, b"v")


def _raw(section: bytes, count: int, compression: int = 0, attributes: int = 0, base_ts: int = NOW) -> bytes:
    b = bytearray(build_batch(section, record_count=max(count, 1), base_timestamp=base_ts, max_timestamp=base_ts))
    struct.pack_into(">i", b, 57, count)
    struct.pack_into(">i", b, 23, count - 1)
    struct.pack_into(">h", b, 21, compression | attributes)
    return recrc(b)


PROBES = [
    ("garbage records under a valid CRC", _raw(b"\xff" * 64, 3), E.CORRUPT_MESSAGE),
    ("record count above the records", _raw(_record(0) + _record(1), 3), E.CORRUPT_MESSAGE),
    ("negative record length", _raw(b"\x09" + b"\x00" * 20, 1), E.CORRUPT_MESSAGE),
    ("corrupt zstd payload", _raw(b"\x28\xb5\x2f\xfd\x00" + b"\x5a" * 40, 1, compression=4), E.CORRUPT_MESSAGE),
    ("corrupt gzip payload", _raw(b"\x1f\x8b\x08\x00" + b"\x5a" * 40, 1, compression=1), E.CORRUPT_MESSAGE),
    ("control batch", _raw(_record(0), 1, attributes=0x20), E.INVALID_RECORD),
    # A transactional batch in a Produce that names no transactional id: refused before it is
    # read, for the whole request, as Kafka 2.8's KafkaApis does (KIP-98; KIP-890's checks follow).
    ("transactional batch", _raw(_record(0), 1, attributes=0x10), E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    ("negative timestamp", _raw(_record(0), 1, base_ts=-1000), E.INVALID_TIMESTAMP),
    ("timestamp after 9999", _raw(_record(0), 1, base_ts=2**62), E.INVALID_TIMESTAMP),
]


def test_malformed_batches_are_refused_and_nothing_is_stored(hostile: ClusterFixture) -> None:
    conn, _ = ready_topic(hostile, "probes")
    assert produce(conn, "probes", 0, batch_of(["good"])).error_code == E.NONE
    for what, batch, code in PROBES:
        r = produce(conn, "probes", 0, batch)
        assert r.error_code == code, f"{what}: {E.Name(r.error_code)} {r.error_message}"
    # A refused batch writes nothing; the consumer still reads everything before and after.
    assert_still_writable(conn, "probes", ["good"])
    with Consumer(bootstrap_servers=hostile.cluster.state.bootstrap_servers, auto_offset_reset="earliest") as cons:  # type: ignore[union-attr]
        cons.assign([TopicPartition("probes", 0)])
        got: list[bytes | None] = []
        wait_for(lambda: got.extend(r.value for r in cons.poll(timeout_ms=200)) or len(got) >= 2)
        assert got == [b"good", b"after"]


def test_timestamp_difference_bound_is_a_topic_config(hostile: ClusterFixture) -> None:
    conn, _ = ready_topic(hostile, "ts-bound", **{"message.timestamp.difference.max.ms": "60000"})
    old = encode_batch([Record(value=b"old", timestamp=NOW - 3_600_000)])
    assert produce(conn, "ts-bound", 0, old).error_code == E.INVALID_TIMESTAMP
    assert produce(conn, "ts-bound", 0, batch_of(["now"])).error_code == E.NONE


def test_a_compression_bomb_is_refused_without_inflating_it(hostile: ClusterFixture) -> None:
    conn, leader = ready_topic(hostile, "bomb")
    # 1 GiB of zero-valued records compresses to a few hundred KB; the broker must stop at
    # max.message.bytes instead of inflating it (before: 57 MB -> 2.1 GB RSS).
    record = encode_record_body(0, 0, None, b"\x00" * (1 << 20))
    cctx = zstandard.ZstdCompressor(level=1)
    chunks = cctx.compressobj()
    payload = b"".join([chunks.compress(record) for _ in range(1024)] + [chunks.flush()])
    assert len(payload) < 1 << 20
    bomb = _raw(payload, 1024, compression=COMPRESSION_ZSTD)
    pid = hostile.cluster.broker(leader).pid  # type: ignore[union-attr]
    before = rss_kb(pid)
    r = produce(conn, "bomb", 0, bomb)
    assert r.error_code == E.MESSAGE_TOO_LARGE, r.error_message
    assert rss_kb(pid) - before < 200 * 1024, "the broker inflated the bomb"
    assert_still_writable(conn, "bomb", [])


def test_an_unallocated_producer_id_is_refused(hostile: ClusterFixture) -> None:
    conn, _ = ready_topic(hostile, "pids")
    made_up = encode_batch([Record(value=b"x", timestamp=NOW)], producer_id=10**12, producer_epoch=0, base_sequence=0)
    assert produce(conn, "pids", 0, made_up).error_code == E.UNKNOWN_PRODUCER_ID
    pid = conn.api.InitProducerId(pb.InitProducerIdRequest(), timeout=10)
    assert pid.error_code == E.NONE
    real = encode_batch([Record(value=b"x", timestamp=NOW)], producer_id=pid.producer_id, producer_epoch=0,
                        base_sequence=0)
    assert produce(conn, "pids", 0, real).error_code == E.NONE


# ------------------------------------------------------------------ requests (S13.2, S13.4)


def test_many_batches_for_one_partition_in_one_request(hostile: ClusterFixture) -> None:
    conn, _ = ready_topic(hostile, "many-batches")
    batches = b"".join(batch_of([f"m{i}"]) for i in range(1500))  # > IOV_MAX pieces in one writev
    assert produce(conn, "many-batches", 0, batches).error_code == E.NONE
    values = read_values(conn, "many-batches", 0)
    assert values == [f"m{i}" for i in range(1500)]


def test_one_partition_listed_1500_times_is_refused_cheaply(hostile: ClusterFixture) -> None:
    conn, _ = ready_topic(hostile, "dup-fetch")
    assert produce(conn, "dup-fetch", 0, batch_of(["x" * 1000] * 50)).error_code == E.NONE
    req = pb.FetchRequest(replica_id=-1, max_wait_ms=0, max_bytes=2**31 - 1, topics=[pb.FetchTopic(
        name="dup-fetch", partitions=[pb.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=2**31 - 1)
                                      for _ in range(1500)])])
    resp = conn.api.Fetch(req, timeout=10)
    codes = {p.error_code for p in resp.topics[0].partitions}
    assert codes == {E.INVALID_REQUEST} and resp.ByteSize() < 100_000
    produce_twice = conn.api.Produce(pb.ProduceRequest(acks=1, timeout_ms=1000, topics=[pb.ProduceTopicData(
        name="dup-fetch", partitions=[pb.ProducePartitionData(partition=0, records=batch_of(["d"]))] * 2)]),
        timeout=10)
    assert [p.error_code for p in produce_twice.topics[0].partitions] == [E.INVALID_REQUEST] * 2


def test_names_that_are_paths_are_refused_everywhere(hostile: ClusterFixture) -> None:
    view = hostile.view()
    assert create_topic(view, "a_b", partitions=1, replication_factor=1).error_code == E.NONE
    conn = view.connection(view.bootstrap[0])
    for name in ("a_b/partitions", "../etc", "..", ".", "x/y", "a\nb", "é"):
        d = conn.api.DeleteTopics(pb.DeleteTopicsRequest(topic_names=[name], timeout_ms=1000), timeout=10)
        assert d.responses[0].error_code == E.INVALID_TOPIC_EXCEPTION, name
        for rtype in (pb.ConfigResourceType.TOPIC,):
            dc = conn.api.DescribeConfigs(pb.DescribeConfigsRequest(resources=[pb.DescribeConfigsResource(
                resource_type=rtype, resource_name=name)]), timeout=10)
            assert dc.results[0].error_code == E.INVALID_TOPIC_EXCEPTION, name
            ac = conn.api.AlterConfigs(pb.AlterConfigsRequest(resources=[pb.AlterConfigsResource(
                resource_type=rtype, resource_name=name, configs=[pb.AlterableConfig(name="retention.ms",
                                                                                    value="1000")])]), timeout=10)
            assert ac.responses[0].error_code == E.INVALID_TOPIC_EXCEPTION, name
        assert produce(conn, name, 0, batch_of(["x"])).error_code == E.INVALID_TOPIC_EXCEPTION
        assert fetch(conn, name, 0, 0).error_code == E.INVALID_TOPIC_EXCEPTION
    assert "a_b" in {t.name for t in conn.api.Metadata(pb.MetadataRequest(all_topics=True), timeout=10).topics}


def test_topic_sizes_and_configs_are_bounded(hostile: ClusterFixture) -> None:
    view = hostile.view()
    assert create_topic(view, "wide", partitions=100_000, replication_factor=1).error_code == E.INVALID_PARTITIONS
    assert create_topic(view, "zero", partitions=0, replication_factor=1).error_code == E.INVALID_PARTITIONS
    assert create_topic(view, "norep", partitions=1, replication_factor=0).error_code == E.INVALID_REPLICATION_FACTOR
    tiny = create_topic(view, "tiny", configs={"segment.bytes": "100"})
    assert tiny.error_code == E.POLICY_VIOLATION, tiny.error_message  # min.segment.bytes (1024 in tests)
    assert create_topic(view, "neg", configs={"retention.ms": "-7"}).error_code == E.INVALID_CONFIG
    assert create_topic(view, "big", configs={"max.message.bytes": str(2**40)}).error_code == E.INVALID_CONFIG
    conn, _ = ready_topic(hostile, "alter-bounds", rf=1)
    alter = conn.api.AlterConfigs(pb.AlterConfigsRequest(resources=[pb.AlterConfigsResource(
        resource_type=pb.ConfigResourceType.TOPIC, resource_name="alter-bounds",
        configs=[pb.AlterableConfig(name="segment.bytes", value="100")])]), timeout=10)
    assert alter.responses[0].error_code == E.POLICY_VIOLATION


def test_cli_refuses_zero_partitions_and_illegal_names(hostile: ClusterFixture) -> None:
    bootstrap = hostile.cluster.state.bootstrap_servers  # type: ignore[union-attr]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "client.cli", *args, "--bootstrap-server", bootstrap], cwd=ROOT,
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})

    for args in (["topics", "--create", "--topic", "t0", "--partitions", "0"],
                 ["topics", "--create", "--topic", "t0", "--replication-factor", "0"]):
        r = cli(*args)
        assert r.returncode != 0 and "at least 1" in r.stderr, r.stderr
    r = cli("produce", "--topic", "../x")
    assert r.returncode == 1 and "INVALID_TOPIC_EXCEPTION" in r.stderr and len(r.stderr.splitlines()) == 1


def test_parked_long_polls_are_capped(hostile: ClusterFixture) -> None:
    conn, leader = ready_topic(hostile, "parked", rf=1)
    results: list[pb.FetchResponse] = []

    def long_poll() -> None:
        req = pb.FetchRequest(replica_id=-1, max_wait_ms=3000, min_bytes=1, max_bytes=1 << 20, topics=[
            pb.FetchTopic(name="parked", partitions=[pb.FetchPartition(partition=0, fetch_offset=0)])])
        results.append(conn.api.Fetch(req, timeout=20))

    threads = [threading.Thread(target=long_poll) for _ in range(12)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    throttled = [r for r in results if r.throttle_time_ms > 0]
    # fetch.purgatory.max.requests=5 here: the rest were answered at once and told to back off.
    assert len(results) == 12 and len(throttled) >= 12 - 5 - 1  # -1: one may arrive after another left
    assert time.monotonic() - t0 < 20
    c = hostile.cluster
    assert c is not None and metric(c, leader, 'minikafka_purgatory_size{purgatory="fetch"}') <= 5


def test_a_corrupt_batch_on_disk_is_a_typed_consumer_error_with_a_way_past_it(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(1)
    conn, leader = ready_topic(cluster, "rot", rf=1)
    for i in range(3):
        assert produce(conn, "rot", 0, batch_of([f"b{i}-0", f"b{i}-1"])).error_code == E.NONE
    # Bit rot in the second batch, under the running broker (it serves bytes from disk as they are).
    seg = Path(c.state.dir) / f"broker-{leader}" / "data" / "rot-0" / ("0" * 20 + ".log")
    data = bytearray(seg.read_bytes())
    second = struct.unpack_from(">i", data, 8)[0] + 12
    data[second + 70] ^= 0xFF
    with open(seg, "r+b") as f:
        f.seek(second + 70)
        f.write(bytes([data[second + 70]]))
    with Consumer(bootstrap_servers=c.state.bootstrap_servers, auto_offset_reset="earliest") as cons:
        cons.assign([TopicPartition("rot", 0)])
        got = [r.value for r in cons.poll(timeout_ms=5000)]
        assert got == [b"b0-0", b"b0-1"]  # what precedes the bad batch is delivered
        with pytest.raises(CorruptRecordError) as exc:
            for _ in range(20):
                cons.poll(timeout_ms=500)
        assert exc.value.offset == 2 and exc.value.next_offset == 4 and "rot-0" in str(exc.value)
    r = subprocess.run([sys.executable, "-m", "client.cli", "consume", "--topic", "rot", "--partition", "0",
                        "--offset", "0", "--max-messages", "10", "--timeout-ms", "3000",
                        "--bootstrap-server", c.state.bootstrap_servers], cwd=ROOT, capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 1 and "--offset 4" in r.stderr, r.stderr


def test_idle_connections_are_closed(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(1, connections_max_idle_ms="1000")
    states: list[grpc.ChannelConnectivity] = []
    channel = grpc.insecure_channel(c.broker(1).address)
    channel.subscribe(states.append, try_to_connect=False)
    try:
        stub = pb_grpc.KafkaApiStub(channel)  # type: ignore[no-untyped-call]
        stub.Metadata(pb.MetadataRequest(), timeout=10)
        wait_for(lambda: states and states[-1] == grpc.ChannelConnectivity.READY, timeout_s=5)
        # The server sends GOAWAY after connections.max.idle.ms without RPCs: the channel goes idle.
        wait_for(lambda: states[-1] == grpc.ChannelConnectivity.IDLE, timeout_s=15, what="the idle connection closed")
        stub.Metadata(pb.MetadataRequest(), timeout=10)  # and a client simply reconnects
    finally:
        channel.close()


# ------------------------------------------------------------------ a broker always starts (S13.5)


def test_a_broker_starts_over_corrupt_logs_and_checkpoints(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(1)
    conn, _ = ready_topic(cluster, "disk", rf=1)
    assert produce(conn, "disk", 0, batch_of(["kept-0", "kept-1"])).error_code == E.NONE
    data_dir = Path(c.state.dir) / "broker-1" / "data"
    c.signal(1, "KILL")
    seg = data_dir / "disk-0" / ("0" * 20 + ".log")
    # A batch an older version accepted (last_offset_delta 2^31-1, valid CRC) at the tail, then bit rot
    # in every checkpoint, and a stray directory that looks like a replica.
    bad = with_field(encode_batch([Record(value=b"x", timestamp=NOW)]), 0, ">q", 2)
    bad = with_field(bad, 23, ">i", 2**31 - 1)
    with open(seg, "ab") as f:
        f.write(bad)
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint", "log-start-offset-checkpoint"):
        (data_dir / name).write_bytes(os.urandom(50))
    (data_dir / "disk-0" / "leader-epoch-checkpoint").write_bytes(b"\xff\xfe garbage")
    c.start(1)
    c.wait_registered({1})
    view = cluster.view()
    wait_for(lambda: leader_of(view, "disk", 0)[0] == 1, what="the broker leading again")
    conn, _ = view.leader_connection("disk", 0)
    wait_for(lambda: read_values(conn, "disk", 0) == ["kept-0", "kept-1"], what="the valid records")
    assert_still_writable(conn, "disk", ["kept-0", "kept-1"])
    assert metric(c, 1, "minikafka_log_corrupt_tails_total") >= 1


def test_deleting_a_topic_removes_every_directory(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3)
    ready_topic(cluster, "gone", rf=3)
    data_dirs = [Path(c.state.dir) / f"broker-{b}" / "data" for b in (1, 2, 3)]
    view = cluster.view()
    conn = view.connection(view.bootstrap[0])
    d = conn.api.DeleteTopics(pb.DeleteTopicsRequest(topic_names=["gone"], timeout_ms=15000), timeout=20)
    assert d.responses[0].error_code == E.NONE
    wait_for(lambda: not any(x.name.startswith("gone-") for dd in data_dirs for x in dd.iterdir()),
             what="every replica directory removed")
