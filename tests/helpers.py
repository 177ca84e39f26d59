"""Helpers for integration tests: bounded polling and raw produce/fetch over gRPC."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from client.connection import ClusterView, Connection
from proto import minikafka_pb2 as pb
from proto.record_batch import Record, decode_batches, encode_batch

T = TypeVar("T")
E = pb.ErrorCode


def wait_for(condition: Callable[[], T], timeout_s: float = 30.0, interval_s: float = 0.05,
             what: str = "condition") -> T:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as e:  # a broker restarting, a znode not there yet
            last_error = e
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}"
                         + (f" (last error: {last_error!r})" if last_error else ""))


def create_topic(view: ClusterView, name: str, partitions: int = 1, replication_factor: int = 1,
                 configs: dict[str, str] | None = None) -> pb.CreatableTopicResult:
    conn = view.connection(view.bootstrap[0])
    resp = conn.api.CreateTopics(pb.CreateTopicsRequest(
        topics=[pb.CreatableTopic(name=name, num_partitions=partitions, replication_factor=replication_factor,
                                  configs=configs or {})], timeout_ms=15000), timeout=20)
    result: pb.CreatableTopicResult = resp.topics[0]
    return result


def batch_of(values: list[str], ts: int | None = None) -> bytes:
    t = ts if ts is not None else int(time.time() * 1000)
    return encode_batch([Record(value=v.encode(), timestamp=t + i) for i, v in enumerate(values)])


def produce(conn: Connection, topic: str, partition: int, records: bytes, acks: int = -1,
            timeout_ms: int = 10000) -> pb.ProducePartitionResponse:
    resp = conn.api.Produce(pb.ProduceRequest(acks=acks, timeout_ms=timeout_ms, topics=[
        pb.ProduceTopicData(name=topic, partitions=[pb.ProducePartitionData(partition=partition, records=records)])]),
        timeout=timeout_ms / 1000 + 5)
    result: pb.ProducePartitionResponse = resp.topics[0].partitions[0]
    return result


def fetch(conn: Connection, topic: str, partition: int, offset: int, max_wait_ms: int = 0,
          current_leader_epoch: int = -1, max_bytes: int = 1 << 20) -> pb.FetchPartitionResponse:
    resp = conn.api.Fetch(pb.FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes,
                                          topics=[pb.FetchTopic(name=topic, partitions=[pb.FetchPartition(
                                              partition=partition, fetch_offset=offset,
                                              current_leader_epoch=current_leader_epoch,
                                              partition_max_bytes=max_bytes)])]), timeout=max_wait_ms / 1000 + 10)
    result: pb.FetchPartitionResponse = resp.topics[0].partitions[0]
    return result


def read_values(conn: Connection, topic: str, partition: int, start: int = 0) -> list[str]:
    """Every committed value from ``start``, fetching until the high watermark."""
    out: list[str] = []
    offset = start
    for _ in range(10_000):
        r = fetch(conn, topic, partition, offset)
        assert r.error_code == E.NONE, E.Name(r.error_code)
        recs = [rec for rec in decode_batches(r.records) if rec.offset >= offset]
        out += [rec.value.decode() for rec in recs if rec.value is not None]
        if recs:
            offset = recs[-1].offset + 1
        if offset >= r.high_watermark:
            return out
    raise AssertionError("read did not reach the high watermark")


def leader_of(view: ClusterView, topic: str, partition: int) -> tuple[int, int]:
    """(leader, leader_epoch) as the cluster's metadata says now."""
    view.refresh([topic])
    pl = view.partitions[(topic, partition)]
    return pl.leader, pl.leader_epoch


def isr_of(view: ClusterView, topic: str, partition: int) -> tuple[int, ...]:
    view.refresh([topic])
    return view.partitions[(topic, partition)].isr
