"""A read_committed consumer's fetch session waits for the last stable offset (KIP-98 with KIP-227,
SPEC S15): an incremental fetch parked on a session whose partition has an open transaction is not
answered by the transaction's appends (the high watermark moves, the LSO does not) - without this it
answered at once, empty, and the consumer refetched in a busy loop - and answers once the COMMIT
marker moves the LSO. A read_uncommitted session on the same partition answers at the append. The
session keeps the isolation level of its last fetch. A real replica manager on real logs, no sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from sole_replica import sole_replica_manager

from broker.replication.fetch_session import FetchSessionCache, PartitionFetch
from broker.replication.replica_manager import ReplicaManager
from proto import minikafka_pb2 as pb
from proto.record_batch import Record, decode_batch, encode_batch, iter_headers

E = pb.ErrorCode
PID, PEPOCH = 4242, 0


def replica_manager(tmp_path: Path) -> ReplicaManager:
    """The only replica of t-0."""
    return sole_replica_manager(tmp_path, [0])


def txn_batch(values: list[str], seq: int) -> bytes:
    return encode_batch([Record(value=v.encode(), timestamp=1_000) for v in values], producer_id=PID,
                        producer_epoch=PEPOCH, base_sequence=seq, is_transactional=True)


async def produce(rm: ReplicaManager, records: bytes) -> None:
    # A transactional batch names its transactional id (no coordinator here to verify it with).
    resp = await rm.handle_produce(pb.ProduceRequest(acks=-1, timeout_ms=1000, transactional_id="txn", topics=[pb.ProduceTopicData(
        name="t", partitions=[pb.ProducePartitionData(partition=0, records=records)])]))
    assert resp.topics[0].partitions[0].error_code == E.NONE, resp


async def commit(rm: ReplicaManager) -> None:
    resp = await rm.handle_write_txn_markers(pb.WriteTxnMarkersRequest(markers=[pb.WritableTxnMarker(
        producer_id=PID, producer_epoch=PEPOCH, transaction_result=True, coordinator_epoch=0,
        topics=[pb.WritableTxnMarkerTopic(name="t", partition_indexes=[0])])]))
    assert resp.markers[0].topics[0].partitions[0].error_code == E.NONE, resp


def fetch(sid: int, epoch: int, offset: int | None, isolation: pb.IsolationLevel, wait_ms: int = 0) -> pb.FetchRequest:
    req = pb.FetchRequest(replica_id=-1, max_wait_ms=wait_ms, min_bytes=1, max_bytes=1 << 20,
                          session_id=sid, session_epoch=epoch, isolation_level=isolation)
    if offset is not None:
        req.topics.add(name="t").partitions.add(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
    return req


async def still_parked(task: asyncio.Task[Any]) -> bool:
    """The parked fetch did not answer while the loop ran everything the appends woke (bounded)."""
    for _ in range(50):
        await asyncio.sleep(0)
    await asyncio.sleep(0.05)
    return not task.done()


def values(resp: pb.FetchResponse) -> list[str]:
    return [(r.value or b"").decode() for t in resp.topics for p in t.partitions
            for pos, h in iter_headers(p.records) if not h.is_control
            for r in decode_batch(p.records, pos)[1]]


async def open_session(rm: ReplicaManager, isolation: pb.IsolationLevel) -> tuple[int, pb.FetchResponse]:
    first = await rm.handle_fetch(fetch(0, 0, 0, isolation))
    assert first.error_code == E.NONE and first.session_id != 0
    return first.session_id, first


def test_a_read_committed_session_fetch_waits_for_the_lso_not_the_high_watermark(tmp_path: Path) -> None:
    async def go() -> None:
        rm = replica_manager(tmp_path)
        await produce(rm, txn_batch(["a", "b"], 0))  # a transaction opens at offset 0
        sid, first = await open_session(rm, pb.READ_COMMITTED)
        p0 = first.topics[0].partitions[0]
        assert (p0.high_watermark, p0.last_stable_offset, p0.records) == (2, 0, b"")
        loop = asyncio.get_running_loop()
        # Parked at offset 0 = LSO < HW: before the fix this answered at once (offset 0 < HW), empty.
        task = loop.create_task(rm.handle_fetch(fetch(sid, 1, None, pb.READ_COMMITTED, wait_ms=30_000)))
        assert await still_parked(task), "a read_committed session fetch answered below the LSO"
        await produce(rm, txn_batch(["c"], 2))  # inside the transaction: the HW moves, the LSO does not
        assert await still_parked(task), "an append inside an open transaction answered a read_committed fetch"
        await commit(rm)
        resp = await asyncio.wait_for(task, 5)
        assert resp.error_code == E.NONE and resp.session_id == sid
        pr = resp.topics[0].partitions[0]
        assert pr.error_code == E.NONE and pr.last_stable_offset == pr.high_watermark == 4
        assert values(resp) == ["a", "b", "c"]

    asyncio.run(go())


def test_a_read_uncommitted_session_fetch_answers_at_the_append(tmp_path: Path) -> None:
    async def go() -> None:
        rm = replica_manager(tmp_path)
        sid, _first = await open_session(rm, pb.READ_UNCOMMITTED)
        task = asyncio.get_running_loop().create_task(
            rm.handle_fetch(fetch(sid, 1, None, pb.READ_UNCOMMITTED, wait_ms=30_000)))
        assert await still_parked(task)
        await produce(rm, txn_batch(["a"], 0))
        resp = await asyncio.wait_for(task, 5)
        assert values(resp) == ["a"]

    asyncio.run(go())


def test_the_session_keeps_the_isolation_level_of_its_last_fetch(tmp_path: Path) -> None:
    """Opened read_uncommitted, then fetched read_committed: the parked fetch waits for the LSO."""
    async def go() -> None:
        rm = replica_manager(tmp_path)
        await produce(rm, txn_batch(["a"], 0))
        sid, first = await open_session(rm, pb.READ_UNCOMMITTED)
        assert values(first) == ["a"]
        assert rm.fetch_sessions.sessions[sid].read_committed is False
        # Back to offset 0 as read_committed (the consumer restarted its position): nothing below the LSO.
        task = asyncio.get_running_loop().create_task(
            rm.handle_fetch(fetch(sid, 1, 0, pb.READ_COMMITTED, wait_ms=30_000)))
        assert await still_parked(task)
        assert rm.fetch_sessions.sessions[sid].read_committed is True
        await commit(rm)
        resp = await asyncio.wait_for(task, 5)
        assert values(resp) == ["a"]

    asyncio.run(go())


def test_the_cache_records_each_fetchs_isolation_level() -> None:
    """Pure: a full fetch opens the session with its isolation level; an incremental one updates it."""
    cache = FetchSessionCache()
    named = [(("t", 0), PartitionFetch(0, 0, 1 << 20, -1))]
    s = cache.new_context(session_id=0, epoch=0, replica_id=-1, named=named, forgotten=[], now_ms=0,
                          read_committed=True).session
    assert s is not None and s.read_committed
    cache.new_context(session_id=s.session_id, epoch=1, replica_id=-1, named=[], forgotten=[], now_ms=1)
    assert not s.read_committed
