"""A produce from an idempotent producer id above the broker's known allocation bound re-reads the
bound (ZooKeeper's last producer id block) once and appends if the id was allocated since; an id
never allocated is refused UNKNOWN_PRODUCER_ID and nothing is written (SPEC S13.1). Other
partitions of the same request are appended either way. A real replica manager on real logs."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sole_replica import sole_replica_manager

from proto import minikafka_pb2 as pb
from proto.record_batch import Record, encode_batch

E = pb.ErrorCode


def idempotent(producer_id: int) -> bytes:
    return encode_batch([Record(value=b"x", timestamp=1_000)], producer_id=producer_id, producer_epoch=0,
                        base_sequence=0)


def test_an_id_allocated_since_is_appended_after_one_refresh_and_a_made_up_one_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        rm = sole_replica_manager(tmp_path, (0, 1, 2))
        assert rm.max_allocated_producer_id == -1  # nothing read yet: FakeZk's block ends at 9,999
        plain = encode_batch([Record(value=b"p", timestamp=1_000)])
        resp = await rm.handle_produce(pb.ProduceRequest(acks=1, timeout_ms=1000, topics=[pb.ProduceTopicData(
            name="t", partitions=[pb.ProducePartitionData(partition=0, records=idempotent(5_000)),
                                  pb.ProducePartitionData(partition=1, records=idempotent(10**12)),
                                  pb.ProducePartitionData(partition=2, records=plain)])]))
        codes = [p.error_code for p in resp.topics[0].partitions]
        assert codes == [E.NONE, E.UNKNOWN_PRODUCER_ID, E.NONE]
        assert rm.max_allocated_producer_id == 9_999
        assert [rm.partitions[("t", p)].log_end_offset for p in (0, 1, 2)] == [1, 0, 1]

    asyncio.run(main())
