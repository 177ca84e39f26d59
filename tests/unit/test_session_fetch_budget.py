"""An incremental fetch whose answer fills its max bytes keeps what did not fit for the next one
(KIP-227 sessions, SPEC S15; issue 29). A partition whose batch did not fit the bytes left was
dropped from the session's dirty set and waited for its next append; when its producer waited for
that very batch's acks=all there was none, and at thousands of partitions (a follower's answer
filling its max bytes) partitions stalled until the ISR shrank. A real replica manager on real
logs, no sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sole_replica import sole_replica_manager

from proto import minikafka_pb2 as pb
from proto.record_batch import Record, encode_batch

E = pb.ErrorCode
PARTITIONS = (0, 1)
BATCH = encode_batch([Record(value=b"v" * 1000, timestamp=1_000)])


def fetch(sid: int, epoch: int, offsets: dict[int, int], max_bytes: int) -> pb.FetchRequest:
    req = pb.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, session_id=sid,
                          session_epoch=epoch)
    if offsets:
        req.topics.add(name="t").partitions.extend(
            pb.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20) for p, o in offsets.items())
    return req


def with_records(resp: pb.FetchResponse) -> list[int]:
    return [p.partition for t in resp.topics for p in t.partitions if p.records]


def test_a_batch_that_does_not_fit_the_bytes_left_is_answered_on_the_next_fetch(tmp_path: Path) -> None:
    async def main() -> None:
        rm = sole_replica_manager(tmp_path, PARTITIONS)
        opened = await rm.handle_fetch(fetch(0, 0, dict.fromkeys(PARTITIONS, 0), 1 << 20))
        sid = opened.session_id
        assert sid > 0
        for p in PARTITIONS:
            resp = await rm.handle_produce(pb.ProduceRequest(acks=1, timeout_ms=1000, topics=[pb.ProduceTopicData(
                name="t", partitions=[pb.ProducePartitionData(partition=p, records=BATCH)])]))
            assert resp.topics[0].partitions[0].error_code == E.NONE
        # Room for one batch and a half: the first partition read fits, the second does not.
        first = await rm.handle_fetch(fetch(sid, 1, {}, len(BATCH) * 3 // 2))
        assert first.error_code == E.NONE
        got = with_records(first)
        assert len(got) == 1
        other = 1 - got[0]
        # The next fetch names the answered partition's next offset (no new records there) and
        # nothing else: the one that did not fit is read now, with no append in between.
        second = await rm.handle_fetch(fetch(sid, 2, {got[0]: 1}, 1 << 20))
        assert second.error_code == E.NONE
        assert with_records(second) == [other]

    asyncio.run(main())


def test_a_batch_the_full_answer_had_no_room_for_is_answered_on_the_next_fetch(tmp_path: Path) -> None:
    """The same for the full fetch that opens the session (a follower's first fetch after a leader
    change, with records waiting on many partitions)."""
    async def main() -> None:
        rm = sole_replica_manager(tmp_path, PARTITIONS)
        for p in PARTITIONS:
            resp = await rm.handle_produce(pb.ProduceRequest(acks=1, timeout_ms=1000, topics=[pb.ProduceTopicData(
                name="t", partitions=[pb.ProducePartitionData(partition=p, records=BATCH)])]))
            assert resp.topics[0].partitions[0].error_code == E.NONE
        opened = await rm.handle_fetch(fetch(0, 0, dict.fromkeys(PARTITIONS, 0), len(BATCH) * 3 // 2))
        got = with_records(opened)
        assert len(got) == 1 and opened.session_id > 0
        second = await rm.handle_fetch(fetch(opened.session_id, 1, {got[0]: 1}, 1 << 20))
        assert with_records(second) == [1 - got[0]]

    asyncio.run(main())


def test_what_an_answer_had_no_room_for_is_read_first_on_the_next_fetch(tmp_path: Path) -> None:
    """Fetch after fetch full of records, the partition left out is not left out again: the dirty
    set's order alone would put the same partition first every time."""
    async def main() -> None:
        rm = sole_replica_manager(tmp_path, PARTITIONS)
        opened = await rm.handle_fetch(fetch(0, 0, dict.fromkeys(PARTITIONS, 0), 1 << 20))
        sid, epoch = opened.session_id, 1
        offsets = dict.fromkeys(PARTITIONS, 0)
        answered: list[int] = []
        for _ in range(4):
            for p in PARTITIONS:  # both partitions get a batch before every fetch
                resp = await rm.handle_produce(pb.ProduceRequest(acks=1, timeout_ms=1000, topics=[
                    pb.ProduceTopicData(name="t", partitions=[pb.ProducePartitionData(partition=p, records=BATCH)])]))
                assert resp.topics[0].partitions[0].error_code == E.NONE
            # Room for one batch and a half: one partition per answer.
            resp = await rm.handle_fetch(fetch(sid, epoch, dict(offsets), len(BATCH) * 3 // 2))
            epoch += 1
            got = with_records(resp)
            assert len(got) == 1
            answered.append(got[0])
            offsets[got[0]] += 1
        assert answered in ([0, 1, 0, 1], [1, 0, 1, 0])

    asyncio.run(main())
