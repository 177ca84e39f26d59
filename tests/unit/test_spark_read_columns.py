"""The Spark reader's range read (client.spark.cluster_io.read_columns) against a fake leader: every
record of the range exactly once, decoded by the columnar codec, with the next Fetch already in
flight when a batch of rows is handed to Spark (pipelining), and a corrupt batch a typed error; a
compacted log's gaps in offsets are read through, not taken for data loss."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from broker.log.cleaner import encode_cleaned_batch
from client.spark import cluster_io
from client.spark.options import DataLossError, OffsetRange, after_fetch
from proto import errors
from proto import minikafka_pb2 as pb
from proto.record_batch import Record, decode_batch_fields, encode_batch, read_header

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


# ------------------------------------------------------------------ compacted logs: gaps in offsets


def test_after_fetch_gaps_left_by_compaction_are_legal_a_moved_log_start_is_data_loss() -> None:
    # Rows decoded past the position: go on from where the batches end.
    assert after_fetch(3, 20, next_offset=12, first_offset=3, high_watermark=30, log_start_offset=0) == (12, None)
    # The first row beyond the one expected, the log start at or below it: a compacted gap, legal.
    assert after_fetch(3, 20, next_offset=12, first_offset=9, high_watermark=30, log_start_offset=3) == (12, None)
    # ... the log start beyond it: retention deleted [3, 9) before it was read (Spark's rule).
    pos, loss = after_fetch(3, 20, next_offset=12, first_offset=9, high_watermark=30, log_start_offset=8)
    assert pos == 12 and loss is not None and "offsets 3..7 were deleted" in loss
    # The first batch at or past the range's end: the rest of the range was compacted away.
    assert after_fetch(12, 20, next_offset=12, first_offset=24, high_watermark=30, log_start_offset=0) == (20, None)
    # No batch at all: done when the high watermark is at or past the end, else wait for it.
    assert after_fetch(16, 24, next_offset=16, first_offset=None, high_watermark=24, log_start_offset=0) == (24, None)
    assert after_fetch(16, 24, next_offset=16, first_offset=None, high_watermark=20, log_start_offset=0) == (16, None)
    assert after_fetch(16, 24, next_offset=16, first_offset=None, high_watermark=24, log_start_offset=20) == (16, None)


def compacted_batch(base: int, kept: list[int]) -> bytes:
    """A 4-record batch at ``base`` (keys k<offset>) as the cleaner leaves it holding only ``kept``."""
    full = encode_batch([Record(f"v{base + i}".encode(), key=f"k{base + i}".encode(), timestamp=NOW + i)
                         for i in range(4)], base_offset=base)
    header, fields = decode_batch_fields(full)
    return encode_cleaned_batch(header, [f for f in fields if f[0] in kept])


@dataclass
class CompactedLeader(FakeLeader):
    """Serves a cleaned log (batches at any offsets, gaps between and inside them), two a Fetch."""

    high_watermark: int = 0
    log_start_offset: int = 0

    def future(self, req: pb.FetchRequest, timeout: float) -> _Future:
        offset = req.topics[0].partitions[0].fetch_offset
        self.requests.append(offset)
        after = [b for b in self.batches if read_header(b).last_offset >= offset
                 and read_header(b).base_offset < self.high_watermark]
        resp = pb.FetchResponse()
        resp.topics.add(name="t").partitions.add(partition=0, high_watermark=self.high_watermark,
                                                 log_start_offset=self.log_start_offset,
                                                 records=b"".join(after[:2]))
        fut = _Future(resp)
        self.futures.append(fut)
        return fut


def read_offsets(leader: FakeLeader, lo: int, hi: int, fail_on_data_loss: bool = True) -> list[int]:
    reader = cluster_io.read_columns(leader, OffsetRange("t", 0, lo, hi), include_headers=False,  # type: ignore[arg-type]
                                     max_bytes=1 << 20, fail_on_data_loss=fail_on_data_loss, retry_timeout_s=3)
    return [cols.offset_at(i) for cols in reader for i in range(cols.num_rows)]


def test_a_compacted_range_is_read_through_its_gaps_without_data_loss() -> None:
    # Offsets 0..27: [0, 4) keeps 1 and 3, [4, 8) and [12, 20) are gone, [8, 12) keeps 11,
    # [20, 24) is whole; [24, 28) is gone too although the high watermark is 28.
    leader = CompactedLeader([compacted_batch(0, [1, 3]), compacted_batch(8, [11]), compacted_batch(20, [20, 21, 22, 23])],
                             high_watermark=28)
    assert read_offsets(leader, 0, 28) == [1, 3, 11, 20, 21, 22, 23]
    # A range whose tail was compacted away ends at its end (the next batch is past it) ...
    assert read_offsets(leader, 0, 16) == [1, 3, 11]
    # ... one wholly inside a gap is empty, ...
    assert read_offsets(leader, 12, 20) == []
    # ... and so is one past the last batch, below the high watermark.
    assert read_offsets(leader, 24, 28) == []
    # A gap whose offsets retention deleted (the log start moved past them) is data loss.
    leader.log_start_offset = 10
    with pytest.raises(DataLossError, match=r"offsets 4\.\.9 were deleted"):
        read_offsets(leader, 4, 28)
    assert read_offsets(leader, 4, 28, fail_on_data_loss=False) == [11, 20, 21, 22, 23]
