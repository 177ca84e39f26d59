"""The Spark reader's ``kafka.isolation.level`` (KIP-98, as Spark's Kafka source passes it to its
consumer): parsed and validated; read_committed ranges are fetched read_committed and lose the records
of aborted transactions (client.txn_filter), control batches never become rows, and a range whose end
lies in aborted batches or markers is still read to its end. Against a fake leader, no sockets."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, NamedTuple

import pytest

from client.spark import cluster_io
from client.spark.options import OffsetRange, SparkOptionError, parse_source_options
from proto import minikafka_pb2 as pb
from proto.columnar import to_records
from proto.record_batch import Record, encode_batch, encode_control_batch, iter_headers

NOW = 1_700_000_000_000
COMMITTED, ABORTED, LATE_ABORTED = 11, 12, 13


def txn(pid: int, base: int, values: list[str]) -> bytes:
    return encode_batch([Record(v.encode(), timestamp=NOW) for v in values], base_offset=base, producer_id=pid,
                        producer_epoch=0, base_sequence=0, is_transactional=True)


def marker(pid: int, base: int, commit: bool) -> bytes:
    return encode_control_batch(producer_id=pid, producer_epoch=0, commit=commit, coordinator_epoch=0,
                                timestamp=NOW, base_offset=base)


# offsets: 0-1 committed, 2-3 aborted, 4 COMMIT, 5 ABORT, 6-7 aborted, 8 ABORT
LOG = [txn(COMMITTED, 0, ["c0", "c1"]), txn(ABORTED, 2, ["x0", "x1"]), marker(COMMITTED, 4, True),
       marker(ABORTED, 5, False), txn(LATE_ABORTED, 6, ["y0", "y1"]), marker(LATE_ABORTED, 8, False)]
ABORTED_TXNS = [(ABORTED, 2, 5), (LATE_ABORTED, 6, 8)]  # producer id, first offset, last offset
END = 9


class Row(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes
    headers: Any


class _Future:
    def __init__(self, resp: pb.FetchResponse) -> None:
        self.resp = resp

    def result(self) -> pb.FetchResponse:
        return self.resp

    def cancel(self) -> bool:
        return True


@dataclass
class TxnLeader:
    """Serves LOG from the fetch offset, as the leader does: the whole log is stable (LSO = HW = END);
    a read_committed answer lists the aborted transactions overlapping it."""

    isolation: list[int] = field(default_factory=list)
    timeout_s: float = 1.0

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
        self.isolation.append(req.isolation_level)
        records = b"".join(b for b in LOG if next(iter_headers(b))[1].last_offset >= offset)
        resp = pb.FetchResponse()
        pr = resp.topics.add(name="t").partitions.add(partition=0, high_watermark=END, last_stable_offset=END,
                                                      records=records)
        if req.isolation_level == pb.READ_COMMITTED:
            for pid, first, last in ABORTED_TXNS:
                if last >= offset:
                    pr.aborted_transactions.add(producer_id=pid, first_offset=first)
        return _Future(resp)

    def refresh(self, topics: list[str]) -> None:
        pass


def values(leader: TxnLeader, until: int, read_committed: bool, start: int = 0) -> list[str]:
    out: list[str] = []
    for cols in cluster_io.read_columns(leader, OffsetRange("t", 0, start, until),  # type: ignore[arg-type]
                                        include_headers=False, max_bytes=1 << 20, fail_on_data_loss=True,
                                        retry_timeout_s=5, read_committed=read_committed):
        out += [r.value.decode() for r in to_records(cols, 0, cols.num_rows, "t", 0, Row)]
    return out


def test_read_committed_drops_aborted_records_and_markers() -> None:
    leader = TxnLeader()
    assert values(leader, END, True) == ["c0", "c1"]
    assert set(leader.isolation) == {pb.READ_COMMITTED}


def test_read_uncommitted_keeps_aborted_records_but_never_markers() -> None:
    leader = TxnLeader()
    assert values(leader, END, False) == ["c0", "c1", "x0", "x1", "y0", "y1"]
    assert set(leader.isolation) == {pb.READ_UNCOMMITTED}


@pytest.mark.parametrize("until", [4, 6, 8])
def test_a_range_ending_in_aborted_batches_or_markers_is_read_to_its_end(until: int) -> None:
    """The tail of the range holds only dropped batches: the read moves past them and ends."""
    assert values(TxnLeader(), until, True) == ["c0", "c1"]
    assert values(TxnLeader(), until, True, start=2) == []


def test_the_isolation_level_option() -> None:
    base = {"bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}
    assert parse_source_options(base, streaming=False).read_committed is False
    assert parse_source_options({**base, "kafka.isolation.level": "read_committed"}, streaming=False).read_committed
    assert not parse_source_options({**base, "kafka.isolation.level": "read_uncommitted"},
                                    streaming=True).read_committed
    with pytest.raises(SparkOptionError, match=r"kafka\.isolation\.level"):
        parse_source_options({**base, "kafka.isolation.level": "serializable"}, streaming=False)
