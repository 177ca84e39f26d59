"""fetch.min.bytes holds a fetch on a session as it holds a sessionless one (KIP-227 with Kafka's
DelayedFetch, SPEC S15): an incremental fetch with min_bytes N parked on its session answers only
once N bytes of new records are there across its partitions (or max_wait_ms ends), not at the first
append; an error still answers it at once. A real replica manager on real logs, no sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from sole_replica import leader_and_isr, sole_replica_manager

from broker.replication.replica_manager import ReplicaManager
from proto import minikafka_pb2 as pb
from proto.record_batch import Record, encode_batch

E = pb.ErrorCode
PARTITIONS = (0, 1, 2)


def batch(value: str) -> bytes:
    return encode_batch([Record(value=value.encode() * 50, timestamp=1_000)])


def replica_manager(tmp_path: Path) -> ReplicaManager:
    """The only replica of t-0..t-2."""
    return sole_replica_manager(tmp_path, PARTITIONS)


async def produce(rm: ReplicaManager, partition: int, records: bytes) -> None:
    resp = await rm.handle_produce(pb.ProduceRequest(acks=1, timeout_ms=1000, topics=[pb.ProduceTopicData(
        name="t", partitions=[pb.ProducePartitionData(partition=partition, records=records)])]))
    assert resp.topics[0].partitions[0].error_code == E.NONE, resp


def fetch(sid: int, epoch: int, offsets: dict[int, int], min_bytes: int = 1, wait_ms: int = 0) -> pb.FetchRequest:
    req = pb.FetchRequest(replica_id=-1, max_wait_ms=wait_ms, min_bytes=min_bytes, max_bytes=1 << 20,
                          session_id=sid, session_epoch=epoch)
    if offsets:
        req.topics.add(name="t").partitions.extend(
            pb.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20) for p, o in offsets.items())
    return req


def answered(resp: pb.FetchResponse) -> dict[int, tuple[int, int]]:
    """partition -> (error code, record bytes) of every partition the answer lists."""
    return {p.partition: (p.error_code, len(p.records)) for t in resp.topics for p in t.partitions}


async def still_parked(task: asyncio.Task[Any]) -> bool:
    """The parked fetch did not answer while the loop ran everything the appends woke (bounded)."""
    for _ in range(50):
        await asyncio.sleep(0)
    await asyncio.sleep(0.05)
    return not task.done()


async def open_session(rm: ReplicaManager) -> int:
    first = await rm.handle_fetch(fetch(0, 0, dict.fromkeys(PARTITIONS, 0)))
    assert first.error_code == E.NONE and first.session_id != 0
    assert sorted(answered(first)) == list(PARTITIONS)  # a full answer lists every partition
    return first.session_id


def test_a_parked_session_fetch_waits_for_min_bytes_across_its_partitions(tmp_path: Path) -> None:
    async def go() -> None:
        rm = replica_manager(tmp_path)
        sid = await open_session(rm)
        one = len(batch("a"))
        # Parked with nothing named: min_bytes is more than one batch, less than two.
        task = asyncio.get_running_loop().create_task(rm.handle_fetch(fetch(sid, 1, {}, min_bytes=one + 1,
                                                                            wait_ms=30_000)))
        assert await still_parked(task)
        await produce(rm, 0, batch("a"))
        assert await still_parked(task), "answered with fewer than min_bytes"
        await produce(rm, 2, batch("c"))
        resp = await asyncio.wait_for(task, 5)
        assert resp.error_code == E.NONE and resp.session_id == sid
        assert answered(resp) == {0: (E.NONE, one), 2: (E.NONE, one)}  # both appends, nothing of t-1

    asyncio.run(go())


def test_bytes_already_there_count_towards_min_bytes(tmp_path: Path) -> None:
    """Records that arrived before the fetch (the partition named, or marked since the last answer)
    count: the fetch waits only for the rest."""
    async def go() -> None:
        rm = replica_manager(tmp_path)
        sid = await open_session(rm)
        one = len(batch("a"))
        await produce(rm, 1, batch("b"))
        task = asyncio.get_running_loop().create_task(rm.handle_fetch(fetch(sid, 1, {}, min_bytes=2 * one,
                                                                            wait_ms=30_000)))
        assert await still_parked(task)
        await produce(rm, 1, batch("b"))
        resp = await asyncio.wait_for(task, 5)
        assert answered(resp) == {1: (E.NONE, 2 * one)}
        # Enough at once: answered without parking.
        await produce(rm, 0, batch("a"))
        resp = await asyncio.wait_for(rm.handle_fetch(fetch(sid, 2, {1: 2}, min_bytes=one, wait_ms=30_000)), 5)
        assert answered(resp) == {0: (E.NONE, one)}

    asyncio.run(go())


def test_an_error_answers_a_session_fetch_held_by_min_bytes(tmp_path: Path) -> None:
    async def go() -> None:
        rm = replica_manager(tmp_path)
        sid = await open_session(rm)
        task = asyncio.get_running_loop().create_task(rm.handle_fetch(fetch(sid, 1, {}, min_bytes=1 << 20,
                                                                            wait_ms=30_000)))
        await produce(rm, 0, batch("a"))
        assert await still_parked(task)
        # Leadership moves to another broker: the fetch answers now, with the error.
        rm.handle_leader_and_isr(leader_and_isr(PARTITIONS, leader=2, epoch=1))
        resp = await asyncio.wait_for(task, 5)
        assert {p: code for p, (code, _n) in answered(resp).items()} == dict.fromkeys(PARTITIONS,
                                                                                 E.NOT_LEADER_OR_FOLLOWER)

    asyncio.run(go())


def test_max_wait_ends_a_session_fetch_short_of_min_bytes(tmp_path: Path) -> None:
    async def go() -> None:
        rm = replica_manager(tmp_path)
        sid = await open_session(rm)
        await produce(rm, 0, batch("a"))
        resp = await asyncio.wait_for(rm.handle_fetch(fetch(sid, 1, {}, min_bytes=1 << 20, wait_ms=50)), 5)
        assert answered(resp) == {0: (E.NONE, len(batch("a")))}

    asyncio.run(go())
