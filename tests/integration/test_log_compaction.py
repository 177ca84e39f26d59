"""Log compaction with real broker processes: a compacted topic under keyed updates and tombstones is
cleaned by every replica's cleaner thread; a consumer from the beginning sees the latest record of
every key, at its original offset, with gaps where older ones were removed. Under load, with its
leader SIGKILLed in the middle of a clean: the half-done clean is discarded at the restart, readers
meanwhile see offsets only increase, and every replica keeps the latest acknowledged value per key."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import E, create_topic, fetch, isr_of, leader_of, wait_for

from client.consumer import Consumer
from client.ops.chaos import Workload
from client.ops.history import OK, Read, check_compacted
from client.ops.verify_replicas import replica_records, verify
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
    # The cleaner's metrics as Kafka's kafka.log:type=LogCleaner{,Manager} (each replica cleans its own log).
    for b in (1, 2, 3):
        scraped = _metrics(c.broker(b).metrics_address)
        assert scraped["minikafka_log_cleaner_cleans_total"] >= 1 and scraped["minikafka_log_cleaner_bytes_read_total"] > 0
        assert "kafka_log_logcleanermanager_max_dirty_percent" in scraped and \
            scraped["kafka_log_logcleanermanager_uncleanable_partitions_count"] == 0


def _metrics(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in resp.read().decode().splitlines()
                if line and not line.startswith("#")}


# ------------------------------------------------------------------ cleaning under load, leader killed mid-clean

KILL_TOPIC = "compacted-kill"
KILL_KEYS = 30


class PassReader:
    """A consumer reading the partition from its start over and over while it is written and
    cleaned: each pass from the beginning to the end offset listed when it began."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.tp = TopicPartition(topic, 0)
        self.passes: list[list[Read]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="pass-reader")

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                with Consumer(bootstrap_servers=self.bootstrap, auto_offset_reset="earliest",
                              request_timeout_ms=3000) as consumer:
                    consumer.assign([self.tp])
                    while not self.stop.is_set():
                        end = consumer.end_offsets([self.tp])[self.tp]
                        consumer.seek_to_beginning()
                        got: list[Read] = []
                        deadline = time.monotonic() + 30
                        while consumer.position(self.tp) < end and time.monotonic() < deadline \
                                and not self.stop.is_set():
                            got += [Read(r.partition, r.offset, (r.value or b"").decode(), key=r.key.decode(),
                                         tombstone=r.value is None) for r in consumer.poll(timeout_ms=200)]
                        self.passes.append(got)
            except Exception as e:  # the leader was killed under it: start again with a new consumer
                self.errors.append(f"{type(e).__name__}: {e}")
                self.stop.wait(0.2)


def _cleaning_files(partition_dir: Path) -> dict[str, int]:
    """A clean's files in flight in a replica's directory: name -> inode."""
    out: dict[str, int] = {}
    for p in partition_dir.iterdir():
        if p.name.endswith((".cleaned", ".swap")):
            with contextlib.suppress(FileNotFoundError):
                out[p.name] = p.stat().st_ino
    return out


def _replica_reads(view, broker: int, hw: int) -> list[Read]:  # type: ignore[no-untyped-def]
    return [Read(0, o, (v or b"").decode(), key=(k or b"").decode(), tombstone=v is None)
            for o, k, v in replica_records(view, view.brokers[broker], KILL_TOPIC, 0, 0, hw)]


def test_cleaned_under_load_and_reads_while_the_leader_is_killed_mid_clean(cluster) -> None:  # type: ignore[no-untyped-def]
    # An eager, slow cleaner: cleans back to back (50 ms backoff), every clean stretched by the
    # throttle (20 kB/s, read in 1 kB pieces), so a clean is in progress most of the time.
    c = cluster.start(3, log_cleaner_backoff_ms="50", log_cleaner_io_max_bytes_per_second="20000",
                      log_cleaner_io_buffer_size="1024")
    view = cluster.view()
    res = create_topic(view, KILL_TOPIC, replication_factor=3, configs={
        "cleanup.policy": "compact", "segment.bytes": "8192", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "1000", "min.insync.replicas": "2"})
    assert res.error_code == E.NONE, res.error_message
    wait_for(lambda: len(isr_of(view, KILL_TOPIC, 0)) == 3 and leader_of(view, KILL_TOPIC, 0)[0] >= 0,
             what="the topic led with a full ISR")
    data = Path(c.state.dir)

    def partition_dir(b: int) -> Path:
        return data / f"broker-{b}" / "data" / f"{KILL_TOPIC}-0"

    # Keyed updates of 30 keys, every 7th write a tombstone; a consumer reading from the start meanwhile.
    workload = Workload(c.state.bootstrap_servers, KILL_TOPIC, 1, producers=1, rate=150.0, keys=KILL_KEYS,
                        tombstone_every=7)
    reader = PassReader(c.state.bootstrap_servers, KILL_TOPIC)
    workload.start()
    reader.thread.start()
    try:
        # The leader cleans; the moment a clean of it has files in flight, it is SIGKILLed.
        leader = leader_of(view, KILL_TOPIC, 0)[0]
        in_flight = wait_for(lambda: {n: i for n, i in _cleaning_files(partition_dir(leader)).items()
                                      if n.endswith(".cleaned")} or None,
                             timeout_s=60, interval_s=0.002, what="the leader in the middle of a clean")
        c.signal(leader, "KILL")
        c.wait_for_exit(leader, timeout_s=30)
        left = _cleaning_files(partition_dir(leader))
        assert any(n.endswith(".cleaned") for n in left), f"no clean in flight at the kill: {left}"
        wait_for(lambda: leader_of(view, KILL_TOPIC, 0)[0] not in (-1, leader), timeout_s=30,
                 what="a new leader")
        passes_before = len(reader.passes)
        wait_for(lambda: len(reader.passes) > passes_before + 1, timeout_s=30,
                 what="the consumer reading on through the new leader")
        c.start(leader)
        c.wait_registered({leader})
        # Recovery at load discarded the half-written .cleaned files (a new clean may have new ones).
        wait_for(lambda: not any(_cleaning_files(partition_dir(leader)).get(n) == i for n, i in left.items()),
                 timeout_s=30, what="the killed leader's clean in flight discarded")
        wait_for(lambda: len(isr_of(view, KILL_TOPIC, 0)) == 3, timeout_s=60, what="the killed leader back in the ISR")
        passes_before = len(reader.passes)
        wait_for(lambda: len(reader.passes) > passes_before + 1, timeout_s=30, what="more reads after the restart")
    finally:
        writes = workload.stop()
        reader.stop.set()
        reader.thread.join(30)
    assert in_flight
    acked = [w for w in writes if w.status == OK]
    assert len(acked) > 500, f"{len(acked)} writes acknowledged"

    # Every pass the consumer made while the log was written, cleaned and its leader killed: offsets
    # only increase, every record is where it was written, nothing read that was not written.
    assert len(reader.passes) > 5
    for got in reader.passes:
        r = check_compacted(writes, got)
        assert not (r.backwards or r.inconsistent_offsets or r.duplicates or r.phantoms or r.failed_but_read), \
            r.summary()

    # Every replica cleans after the writes stop (the restarted one included), and each keeps the
    # latest value of every key as the acknowledged writes have it; the replicas agree.
    view.refresh([KILL_TOPIC])
    hw = fetch_hw(view)

    def cleaned_and_valid(b: int) -> bool:
        reads = _replica_reads(view, b, hw)
        return len(reads) < hw // 4 and check_compacted(writes, reads).valid

    for b in (1, 2, 3):
        wait_for(lambda b=b: cleaned_and_valid(b), timeout_s=60, interval_s=0.5,
                 what=f"broker {b}'s replica cleaned and holding the latest acknowledged value of every key")
        r = check_compacted(writes, _replica_reads(view, b, hw))
        assert r.valid and r.keys == KILL_KEYS, f"broker {b}: {r.summary()}"
    full = check_compacted(writes, workload.read_all())
    assert full.valid, full.summary()
    print(f"killed broker {leader} with {sorted(left)} in flight; {len(reader.passes)} passes read "
          f"({len(reader.errors)} consumer restarts); HW {hw}; {full.summary()}")
    report = verify(view, KILL_TOPIC)
    assert [(e["status"], e.get("compacted")) for e in report] == [("OK", True)], report


def fetch_hw(view) -> int:  # type: ignore[no-untyped-def]
    """The partition's high watermark, from its leader."""
    conn, _ = view.leader_connection(KILL_TOPIC, 0)
    return fetch(conn, KILL_TOPIC, 0, 0).high_watermark
