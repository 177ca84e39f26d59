"""Log compaction with real broker processes: a compacted topic under keyed updates and tombstones is
cleaned by every replica's cleaner thread; a consumer from the beginning sees the latest record of
every key, at its original offset, with gaps where older ones were removed."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest
from helpers import E, create_topic, isr_of, leader_of, wait_for

from client.consumer import Consumer
from client.producer import Producer
from client.structs import TopicPartition
from proto import errors
from proto.record_batch import decode_batch, iter_headers

pytestmark = pytest.mark.integration

KEYS = 20
ROUNDS = 15
DELETED = {f"key-{i}" for i in range(0, KEYS, 5)}  # tombstoned at the end


def _records_on_disk(partition_dir: Path) -> list[tuple[int, str, bytes | None]]:
    """(offset, key, value) of every record in a live replica's segment files (read only; a swap
    happening meanwhile makes it raise, and the caller polls again)."""
    out: list[tuple[int, str, bytes | None]] = []
    for path in sorted(partition_dir.glob("*.log")):
        data = path.read_bytes()
        for pos, _h in iter_headers(data):
            for r in decode_batch(data, pos)[1]:
                out.append((r.offset, (r.key or b"").decode(), r.value))
    return out


def _compacted(records: list[tuple[int, str, bytes | None]]) -> bool:
    """Every update key appears once: what the cleaner leaves once it has passed all the updates."""
    keys = [k for _o, k, _v in records if k.startswith("key-")]
    offsets = [o for o, _k, _v in records]
    return len(keys) == len(set(keys)) == KEYS and offsets == sorted(set(offsets))


def test_compacted_topic_keeps_the_latest_record_per_key_on_every_replica(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3, log_cleaner_backoff_ms="200")
    view = cluster.view()
    res = create_topic(view, "compacted", replication_factor=3, configs={
        "cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01",
        "min.insync.replicas": "2"})
    assert res.error_code == E.NONE, res.error_message
    wait_for(lambda: len(isr_of(view, "compacted", 0)) == 3 and leader_of(view, "compacted", 0)[0] >= 0,
             what="the topic led with a full ISR")

    # A record without a key is refused on a compacted topic (Kafka: INVALID_RECORD).
    with Producer(c.state.bootstrap_servers, acks="all", linger_ms=1) as p, \
            pytest.raises(errors.KafkaError, match="without key"):
        p.send("compacted", b"no key").result(timeout=15)

    latest: dict[str, bytes | None] = {}
    with Producer(c.state.bootstrap_servers, acks="all", linger_ms=1, batch_size=700) as p:  # < segment.bytes
        futures = []
        for r in range(ROUNDS):
            for i in range(KEYS):
                key, value = f"key-{i}", f"value-{r}-{i}".encode()
                futures.append(p.send("compacted", value, key=key.encode()))
                latest[key] = value
            p.flush(15)
        for key in sorted(DELETED):
            futures.append(p.send("compacted", None, key=key.encode()))
            latest[key] = None
        # Records of keys of their own after the updates, so every update is in a rolled segment
        # (the active segment is never cleaned) and below the high watermark.
        for i in range(40):
            futures.append(p.send("compacted", b"x" * 64, key=f"filler-{i}".encode()))
        p.flush(15)
        offsets = [f.result(timeout=15).offset for f in futures]
    end = offsets[-1] + 1
    assert end == ROUNDS * KEYS + len(DELETED) + 40

    # Every replica's cleaner thread cleans its own log.
    data = Path(c.state.dir)
    for b in (1, 2, 3):
        wait_for(lambda b=b: _compacted(_records_on_disk(data / f"broker-{b}" / "data" / "compacted-0")),
                 timeout_s=60, what=f"broker {b}'s replica cleaned")

    # A consumer from the beginning: the latest value of every key (tombstones are within
    # delete.retention.ms, a day), offsets increasing with the gaps of what was removed.
    tp = TopicPartition("compacted", 0)
    got: list[tuple[int, str, bytes | None]] = []
    with Consumer(bootstrap_servers=c.state.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        deadline = time.monotonic() + 30
        while consumer.position(tp) < end and time.monotonic() < deadline:
            got += [(r.offset, r.key.decode(), r.value) for r in consumer.poll(timeout_ms=500)]
    offsets_read = [o for o, _k, _v in got]
    assert offsets_read == sorted(set(offsets_read))
    assert len(got) < end and any(b - a > 1 for a, b in itertools.pairwise(offsets_read))
    updates = {k: v for _o, k, v in got if k.startswith("key-")}
    assert updates == latest
    assert len([k for _o, k, _v in got if k.startswith("key-")]) == KEYS
    # Each record is where it was written; the replicas agree on every key's latest value.
    assert set(offsets_read) <= set(offsets)
    replicas = [_records_on_disk(data / f"broker-{b}" / "data" / "compacted-0") for b in (1, 2, 3)]
    for rep in replicas:
        assert {k: v for _o, k, v in rep if k.startswith("key-")} == latest
