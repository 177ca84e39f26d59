"""The Spark reader's range read (client.spark.cluster_io.read_columns) against a fake leader: every
record of the range exactly once, decoded by the columnar codec, with the next Fetch already in
flight when a batch of rows is handed to Spark (pipelining), and a corrupt batch a typed error."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from client.spark import cluster_io
from client.spark.options import OffsetRange
from proto import errors
from proto import minikafka_pb2 as pb
from proto.record_batch import Record, encode_batch

NOW = 1_700_000_000_000


class _Future:
    def __init__(self, resp: pb.FetchResponse) -> None:
        self.resp = resp
        self.cancelled = False

    def result(self) -> pb.FetchResponse:
        return self.resp

    def cancel(self) -> bool:
        self.cancelled = True
        return True


@dataclass
class FakeLeader:
    """Serves a log of 4-record batches; two batches per Fetch."""

    batches: list[bytes]
    requests: list[int] = field(default_factory=list)
    futures: list[_Future] = field(default_factory=list)
    timeout_s: float = 1.0

    # ClusterView's surface that read_columns uses
    def leader_connection(self, topic: str, partition: int) -> tuple[Any, Any]:
        return self, SimpleNamespace(leader_epoch=0)

    @property
    def api(self) -> Any:
        return self

    @property
    def Fetch(self) -> Any:  # the gRPC stub's method name
        return self

    def future(self, req: pb.FetchRequest, timeout: float) -> _Future:
        offset = req.topics[0].partitions[0].fetch_offset
        self.requests.append(offset)
        first = offset // 4
        resp = pb.FetchResponse()
        resp.topics.add(name="t").partitions.add(partition=0, high_watermark=4 * len(self.batches),
                                                 records=b"".join(self.batches[first:first + 2]))
        fut = _Future(resp)
        self.futures.append(fut)
        return fut

    def refresh(self, topics: list[str]) -> None:
        pass


def log_of(n_batches: int) -> list[bytes]:
    return [encode_batch([Record(f"v{4 * b + i}".encode(), timestamp=NOW + i) for i in range(4)], base_offset=4 * b)
            for b in range(n_batches)]


def test_every_record_of_the_range_once_with_the_next_fetch_already_in_flight() -> None:
    leader = FakeLeader(log_of(6))
    reader = cluster_io.read_columns(leader, OffsetRange("t", 0, 3, 17), include_headers=False,  # type: ignore[arg-type]
                                     max_bytes=1 << 20, fail_on_data_loss=True, retry_timeout_s=5)
    offsets: list[int] = []
    for cols in reader:
        # Spark has the rows now; the Fetch for what follows them was sent before they were yielded.
        if cols.next_offset < 17:
            assert leader.requests[-1] == cols.next_offset
        offsets += [cols.offset_at(i) for i in range(cols.num_rows)]
    assert offsets == list(range(3, 17))
    assert leader.requests == [3, 8, 16]


def test_stopping_early_cancels_the_fetch_in_flight() -> None:
    leader = FakeLeader(log_of(6))
    reader = cluster_io.read_columns(leader, OffsetRange("t", 0, 0, 24), include_headers=False,  # type: ignore[arg-type]
                                     max_bytes=1 << 20, fail_on_data_loss=True, retry_timeout_s=5)
    next(reader)
    reader.close()
    assert leader.futures[-1].cancelled


def test_a_corrupt_batch_in_the_range_is_a_typed_error() -> None:
    batches = log_of(3)
    bad = bytearray(batches[1])
    bad[70] ^= 0xFF
    batches[1] = bytes(bad)
    reader = cluster_io.read_columns(FakeLeader(batches), OffsetRange("t", 0, 0, 12),  # type: ignore[arg-type]
                                     include_headers=False, max_bytes=1 << 20, fail_on_data_loss=True,
                                     retry_timeout_s=5)
    with pytest.raises(errors.CorruptMessageError, match="batch at offset 4 is corrupt"):
        list(reader)
