"""Log compaction (broker/log/cleaner.py, broker/log/log_cleaner.py): what a clean keeps, the offsets
it leaves, tombstones and their retention, the active segment, the swap's crash safety, the configs,
and keyless records refused on compacted topics. Real segment files in tmp_path; the cleaner runs in
the test's thread (no event loop) except in the LogManager test."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.log.checkpoint import CLEANER_OFFSET_CHECKPOINT, read_offsets
from broker.log.cleaner import (
    CleanAbortedError,
    LogToClean,
    OffsetMap,
    SegmentSummary,
    choose_filthiest,
    cleanable_range,
    group_segments_by_size,
)
from broker.log.config import LONG_MAX, CleanerConfig, LogConfig
from broker.log.log import CLEANED_SUFFIX, SWAP_SUFFIX, Log
from broker.log.log_cleaner import LogCleaner, Throttler
from broker.log.manager import LogManager
from broker.log.segment import LogSegment
from broker.server.config import ConfigError, build_config
from proto.errors import InvalidConfigError, InvalidRecordError
from proto.record_batch import (
    COMPRESSION_GZIP,
    COMPRESSION_NONE,
    COMPRESSION_ZSTD,
    BatchHeader,
    Record,
    decode_batch,
    encode_batch,
    iter_headers,
)

NOW = 1_700_000_000_000
TP = ("t", 0)


def compact_config(**kw: object) -> LogConfig:
    base: dict[str, object] = {"cleanup_policy": "compact", "segment_bytes": 100_000, "min_cleanable_dirty_ratio": 0.0,
                               "delete_retention_ms": 86_400_000}
    base.update(kw)
    return LogConfig(**base)  # type: ignore[arg-type]


def open_log(path: Path, cfg: LogConfig, **kw: object) -> Log:
    return Log.open(path / "t-0", "t", 0, cfg, now_ms=NOW, **kw)  # type: ignore[arg-type]


def put(log: Log, pairs: Sequence[tuple[bytes | None, bytes | None]], codec: int = COMPRESSION_NONE,
        ts: int = NOW) -> None:
    recs = [Record(value=v, key=k, timestamp=ts) for k, v in pairs]
    log.append_as_leader(encode_batch(recs, compression=codec), leader_epoch=0, now_ms=NOW)


def cleaner_for(log: Log, base: Path, clock: int = NOW, **kw: object) -> LogCleaner:
    cfg = CleanerConfig(**kw)  # type: ignore[arg-type]
    return LogCleaner(cfg, [base], lambda: [(TP, log, base)], lambda tp: log if tp == TP else None,
                      clock=lambda: clock)


def read_all(log: Log) -> tuple[list[BatchHeader], list[Record]]:
    headers: list[BatchHeader] = []
    records: list[Record] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 30)
        if not data:
            break
        for pos, h in iter_headers(data):
            headers.append(h)
            records.extend(r for r in decode_batch(data, pos)[1] if r.offset >= offset)
            offset = h.next_offset
    return headers, records


def clean_until_done(cleaner: LogCleaner, limit: int = 50) -> int:
    n = 0
    while cleaner.clean_one() and n < limit:
        n += 1
    return n


def latest_by_key(records: list[Record]) -> dict[bytes | None, bytes | None]:
    out: dict[bytes | None, bytes | None] = {}
    for r in records:
        out[r.key] = r.value
    return out


# ---------------------------------------------------------------- properties of a clean

op: st.SearchStrategy[tuple[str, list[tuple[bytes, bytes | None]], int]] = st.one_of(
    st.tuples(st.just("batch"), st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f"]),
                                                   st.one_of(st.none(), st.binary(min_size=0, max_size=6))),
                                         min_size=1, max_size=4),
              st.sampled_from([COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_ZSTD])),
    st.tuples(st.just("roll"), st.just([]), st.just(0)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=1, max_size=30), dedupe=st.sampled_from([1 << 20, 24 * 3]),
       segment_bytes=st.sampled_from([100_000, 300]))
def test_cleaning_keeps_the_latest_value_of_every_key(tmp_path_factory: pytest.TempPathFactory,
                                                      ops: list[tuple[str, list[tuple[bytes, bytes | None]], int]],
                                                      dedupe: int, segment_bytes: int) -> None:
    base = tmp_path_factory.mktemp("prop")
    log = open_log(base, compact_config(segment_bytes=segment_bytes))
    for kind, pairs, codec in ops:
        if kind == "roll":
            log.roll(NOW)
        else:
            put(log, pairs, codec)
    log.update_high_watermark(log.log_end_offset)
    _h0, before = read_all(log)
    active_before = log.active_segment.log_path.read_bytes()
    active_base = log.active_segment.base_offset
    leo = log.log_end_offset

    clean_until_done(cleaner_for(log, base, dedupe_buffer_size=dedupe))

    headers, after = read_all(log)
    # Every key's latest value (a tombstone is a None value: retained, delete.retention.ms is a day).
    assert latest_by_key(after) == latest_by_key(before)
    # Offsets strictly increasing, each record unchanged at its offset, batch offsets never go back.
    offsets = [r.offset for r in after]
    assert offsets == sorted(set(offsets))
    by_offset = {r.offset: r for r in before}
    for r in after:
        assert (r.key, r.value, r.timestamp) == (by_offset[r.offset].key, by_offset[r.offset].value,
                                                 by_offset[r.offset].timestamp)
    assert all(a.next_offset <= b.base_offset for a, b in itertools.pairwise(headers))
    # The active segment is untouched; the log end is where it was.
    assert log.active_segment.base_offset == active_base
    assert log.active_segment.log_path.read_bytes() == active_before
    assert log.log_end_offset == leo
    # Below the active segment, every key is there once at most (the map covered it all in the end).
    cleaned_keys = [r.key for r in after if r.offset < active_base]
    assert len(cleaned_keys) == len(set(cleaned_keys))
    # And the files, reloaded after a crash, say the same.
    for seg in log.segments:
        seg.abandon()
    again = open_log(base, compact_config(segment_bytes=segment_bytes))
    assert read_all(again)[1] == after
    again.close()


def test_offset_map_bounds_and_partial_clean(tmp_path: Path) -> None:
    m = OffsetMap(24 * 10, load_factor=0.5)
    assert m.slots == 10 and m.max_entries == 5
    assert m.has_room_for(100)  # an empty map always takes a batch: progress
    m.put(b"k", 3)
    assert m.get(b"k") == 3 and m.get(b"x") == -1 and m.latest_offset == 3
    assert m.has_room_for(4) and not m.has_room_for(5)

    log = open_log(tmp_path, compact_config())
    for i in range(10):
        put(log, [(f"k{i % 5}".encode(), f"v{i}".encode())])
        log.roll(NOW)
    put(log, [(b"k0", b"last")])
    log.update_high_watermark(log.log_end_offset)
    cleaner = cleaner_for(log, tmp_path)
    assert cleaner.clean_one(OffsetMap(24 * 3, load_factor=1.0))
    # Only a prefix was mapped: the checkpoint stops where the map was full.
    cp = read_offsets(tmp_path / CLEANER_OFFSET_CHECKPOINT)[TP]
    assert 0 < cp < 10
    clean_until_done(cleaner)
    assert read_offsets(tmp_path / CLEANER_OFFSET_CHECKPOINT)[TP] == 10
    assert latest_by_key(read_all(log)[1]) == {b"k0": b"last", b"k1": b"v6", b"k2": b"v7", b"k3": b"v8",
                                               b"k4": b"v9"}


def test_tombstones_kept_until_delete_retention_passes(tmp_path: Path) -> None:
    log = open_log(tmp_path, compact_config(delete_retention_ms=60_000, segment_bytes=150))
    put(log, [(b"k", b"v1")])
    put(log, [(b"k", None)])  # the tombstone, offset 1
    log.roll(NOW)
    put(log, [(b"x", b"1")])
    log.roll(NOW)
    put(log, [(b"x", b"2")])
    log.update_high_watermark(log.log_end_offset)
    cleaner = cleaner_for(log, tmp_path, clock=int(time.time() * 1000))

    def tombstone_segment() -> LogSegment:
        return next(s for s in log.segments if s.base_offset <= 1 < s.next_offset)

    def more_dirty(value: bytes) -> None:
        log.roll(NOW)
        put(log, [(b"y", value)])
        log.update_high_watermark(log.log_end_offset)

    assert cleaner.clean_one()
    recs = read_all(log)[1]
    assert [(r.offset, r.key, r.value) for r in recs if r.key == b"k"] == [(1, b"k", None)]  # v1 gone, tombstone kept

    # The clean section's last segment is now, the tombstone's segment 30 s older: within 60 s, kept.
    more_dirty(b"1")
    now_s = time.time()
    os.utime(tombstone_segment().log_path, (now_s - 30, now_s - 30))
    assert cleaner.clean_one()
    assert [(r.offset, r.value) for r in read_all(log)[1] if r.key == b"k"] == [(1, None)]

    # Two minutes older: past delete.retention.ms, the tombstone goes.
    more_dirty(b"2")
    now_s = time.time()
    os.utime(tombstone_segment().log_path, (now_s - 120, now_s - 120))
    assert cleaner.clean_one()
    recs = read_all(log)[1]
    assert [r for r in recs if r.key == b"k"] == []
    assert latest_by_key(recs)[b"x"] == b"2"


def test_batches_keep_offsets_codec_producer_and_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path, compact_config())
    recs = [Record(value=b"old", key=b"a", timestamp=NOW), Record(value=b"keep", key=b"b", timestamp=NOW + 5),
            Record(value=b"old", key=b"c", timestamp=NOW + 9)]
    log.append_as_leader(encode_batch(recs, compression=COMPRESSION_GZIP, producer_id=7, producer_epoch=1,
                                      base_sequence=0), leader_epoch=3, now_ms=NOW)
    log.append_as_leader(encode_batch([Record(value=b"new", key=b"a", timestamp=NOW),
                                       Record(value=b"new", key=b"c", timestamp=NOW)], producer_id=7,
                                      producer_epoch=1, base_sequence=3), leader_epoch=3, now_ms=NOW)
    log.append_as_leader(encode_batch([Record(value=b"z", key=b"a", timestamp=NOW)], producer_id=8,
                                      producer_epoch=0, base_sequence=0), leader_epoch=3, now_ms=NOW)
    put(log, [(b"a", b"latest"), (b"c", b"latest")])
    log.roll(NOW)
    put(log, [(b"x", b"active")])
    log.update_high_watermark(log.log_end_offset)
    assert cleaner_for(log, tmp_path).clean_one()
    headers, records = read_all(log)
    first = headers[0]
    assert (first.base_offset, first.last_offset_delta, first.record_count) == (0, 2, 1)
    assert first.compression == COMPRESSION_GZIP and first.partition_leader_epoch == 3
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (7, 1, 0)
    assert first.base_timestamp == NOW + 5 and first.max_timestamp == NOW + 5
    # Producer 7's last batch lost every record but stays, empty, for its sequence; so does 8's.
    assert [(h.base_offset, h.last_offset_delta, h.record_count, h.producer_id) for h in headers[1:3]] == [
        (3, 1, 0, 7), (5, 0, 0, 8)]
    assert [(r.offset, r.key, r.value) for r in records] == [(1, b"b", b"keep"), (6, b"a", b"latest"),
                                                             (7, b"c", b"latest"), (8, b"x", b"active")]
    # A restart rebuilds the producer state from the headers: producer 7 continues at sequence 5.
    for seg in log.segments:
        seg.abandon()
    again = open_log(tmp_path, compact_config())
    assert again.producer_state.producers[7].last_seq == 4
    again.close()


def test_follower_accepts_the_gaps_of_a_cleaned_leader(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader", compact_config())
    for i in range(20):
        put(leader, [(f"k{i % 3}".encode(), str(i).encode())])
        if i % 5 == 4:
            leader.roll(NOW)
    leader.update_high_watermark(leader.log_end_offset)
    clean_until_done(cleaner_for(leader, tmp_path / "leader"))
    follower = open_log(tmp_path / "follower", compact_config())
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_as_follower(leader.read(follower.log_end_offset, 1 << 20), NOW)
    assert read_all(follower)[1] == read_all(leader)[1]


# ---------------------------------------------------------------- the swap: races and crashes


def _three_segments(path: Path) -> Log:
    log = open_log(path, compact_config())
    for i in range(9):
        put(log, [(f"k{i % 2}".encode(), str(i).encode())])
        if i % 3 == 2:
            log.roll(NOW)
    put(log, [(b"k0", b"active")])
    log.update_high_watermark(log.log_end_offset)
    return log


def test_swap_refused_when_the_log_changed_meanwhile(tmp_path: Path) -> None:
    log = _three_segments(tmp_path)
    cleaner = cleaner_for(log, tmp_path)
    real_swap = cleaner._swap

    def truncate_then_swap(*args: object) -> bool:
        log.truncate_to(4)  # a follower's truncation while the thread was cleaning
        return real_swap(*args)  # type: ignore[arg-type]

    cleaner._swap = truncate_then_swap  # type: ignore[method-assign, assignment]
    before = read_all(log)[1]
    with pytest.raises(CleanAbortedError):
        cleaner.clean_one()
    assert [r.offset for r in read_all(log)[1]] == [r.offset for r in before if r.offset < 4]
    assert not [n for n in os.listdir(log.dir) if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))]
    assert not (tmp_path / CLEANER_OFFSET_CHECKPOINT).exists()  # no clean was completed


@pytest.mark.parametrize("crash_after_deleting", [0, 1, 3])
def test_swap_left_by_a_crash_is_completed(tmp_path: Path, crash_after_deleting: int) -> None:
    reference = tmp_path / "reference"
    crashed = tmp_path / "crashed"
    log = _three_segments(reference)
    for seg in log.segments:
        seg.close()
    shutil.copytree(reference, crashed)
    ref_log = open_log(reference, compact_config(), clean_shutdown=True)
    ref_log.update_high_watermark(ref_log.log_end_offset)
    clean_until_done(cleaner_for(ref_log, reference))
    expected = read_all(ref_log)[1]

    log = open_log(crashed, compact_config(), clean_shutdown=True)
    log.update_high_watermark(log.log_end_offset)

    def crash(old: list[LogSegment], base_offset: int, now_ms: int) -> LogSegment:
        for name in os.listdir(log.dir):
            if name.endswith(CLEANED_SUFFIX):
                os.replace(log.dir / name, log.dir / (name[: -len(CLEANED_SUFFIX)] + SWAP_SUFFIX))
        for seg in old[:crash_after_deleting]:
            seg.delete()
        raise SystemExit("power cut")

    log.replace_segments = crash  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        cleaner_for(log, crashed).clean_one()
    assert any(n.endswith(".log" + SWAP_SUFFIX) for n in os.listdir(log.dir))
    for seg in log.segments:
        seg.abandon()
    again = open_log(crashed, compact_config())
    assert not [n for n in os.listdir(again.dir) if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))]
    assert read_all(again)[1] == expected
    again.close()


def test_cleaned_files_left_by_a_crash_are_deleted(tmp_path: Path) -> None:
    log = _three_segments(tmp_path)
    before = read_all(log)[1]
    for seg in log.segments:
        seg.abandon()
    for suffix in (".log", ".index", ".timeindex"):
        (log.dir / f"{0:020d}{suffix}{CLEANED_SUFFIX}").write_bytes(b"half written")
    again = open_log(tmp_path, compact_config())
    assert not [n for n in os.listdir(again.dir) if n.endswith(CLEANED_SUFFIX)]
    assert read_all(again)[1] == before
    again.close()


# ---------------------------------------------------------------- choosing what to clean


def seg(base: int, size: int = 100, ts: int = NOW) -> SegmentSummary:
    return SegmentSummary(base, size, ts, ts)


def test_cleanable_range_ratio_lags_and_checkpoint() -> None:
    segs = [seg(0), seg(10), seg(20), seg(30, ts=NOW + 1000)]
    r = cleanable_range(TP, segs, log_start_offset=0, high_watermark=35, checkpoint=10, now_ms=NOW + 1000,
                        min_compaction_lag_ms=0, max_compaction_lag_ms=LONG_MAX, min_cleanable_ratio=0.5)
    assert (r.first_dirty_offset, r.first_uncleanable_offset, r.clean_bytes, r.cleanable_bytes) == (10, 30, 100, 200)
    assert r.should_clean and not r.needs_compaction_now
    # The high watermark inside a segment: uncleanable from that segment's base.
    r = cleanable_range(TP, segs, log_start_offset=0, high_watermark=15, checkpoint=None, now_ms=NOW,
                        min_compaction_lag_ms=0, max_compaction_lag_ms=LONG_MAX, min_cleanable_ratio=0.5)
    assert (r.first_dirty_offset, r.first_uncleanable_offset) == (0, 10)
    # min.compaction.lag.ms: segment 20 holds records younger than the lag.
    segs2 = [seg(0, ts=NOW - 10_000), seg(10, ts=NOW - 10_000), seg(20, ts=NOW - 10), seg(30)]
    r = cleanable_range(TP, segs2, log_start_offset=0, high_watermark=40, checkpoint=None, now_ms=NOW,
                        min_compaction_lag_ms=1000, max_compaction_lag_ms=LONG_MAX, min_cleanable_ratio=0.5)
    assert r.first_uncleanable_offset == 20
    # A checkpoint beyond the active segment (a truncation) starts again from the log start.
    r = cleanable_range(TP, segs, log_start_offset=0, high_watermark=35, checkpoint=99, now_ms=NOW,
                        min_compaction_lag_ms=0, max_compaction_lag_ms=LONG_MAX, min_cleanable_ratio=0.5)
    assert r.first_dirty_offset == 0
    # Below the ratio, not cleaned - unless max.compaction.lag.ms is passed.
    r = cleanable_range(TP, segs, log_start_offset=0, high_watermark=35, checkpoint=20, now_ms=NOW + 5000,
                        min_compaction_lag_ms=0, max_compaction_lag_ms=LONG_MAX, min_cleanable_ratio=0.5)
    assert r.cleanable_ratio == pytest.approx(1 / 3) and not r.should_clean
    r = cleanable_range(TP, segs, log_start_offset=0, high_watermark=35, checkpoint=20, now_ms=NOW + 5000,
                        min_compaction_lag_ms=0, max_compaction_lag_ms=1000, min_cleanable_ratio=0.5)
    assert r.needs_compaction_now and r.max_compaction_delay_ms == 4000 and r.should_clean


def test_choose_filthiest_and_grouping() -> None:
    a = LogToClean(("a", 0), 0, 10, 100, 100, 0.5, 0)
    b = LogToClean(("b", 0), 0, 10, 10, 90, 0.5, 0)
    c = LogToClean(("c", 0), 0, 10, 90, 10, 0.5, 0)
    assert choose_filthiest([a, b, c]) is b
    assert choose_filthiest([a, c]) is None  # 0.5 is not above 0.5
    summaries = [SegmentSummary(0, 60, -1, -1), SegmentSummary(10, 30, -1, -1), SegmentSummary(20, 50, -1, -1),
                 SegmentSummary(30, 10, -1, -1)]
    assert group_segments_by_size(summaries, [10, 20, 30, 40], 100, 1000) == [[0, 1], [2, 3]]
    assert group_segments_by_size(summaries, [10, 20, 30, 1 << 40], 1000, 1000) == [[0, 1, 2], [3]]


def test_throttler_sleeps_to_the_rate() -> None:
    now = [0.0]
    slept: list[float] = []
    t = Throttler(1000.0, check_interval_s=0.1, clock=lambda: now[0], sleep=slept.append)
    t.maybe_throttle(500)
    now[0] = 0.2
    t.maybe_throttle(500)  # 1000 bytes in 0.2 s at 1000 B/s: 0.8 s to wait
    assert slept == [pytest.approx(0.8)]


# ---------------------------------------------------------------- configs and the append path


def test_topic_configs_and_bounds() -> None:
    cfg = LogConfig()
    assert cfg.cleanup_policy == "delete" and cfg.delete and not cfg.compact
    assert cfg.min_cleanable_dirty_ratio == 0.5 and cfg.min_compaction_lag_ms == 0
    assert cfg.max_compaction_lag_ms == LONG_MAX and cfg.delete_retention_ms == 86_400_000
    for raw in ("delete,compact", "compact, delete", "compact,delete"):
        c = cfg.with_overrides({"cleanup.policy": raw})
        assert c.cleanup_policy == "compact,delete" and c.compact and c.delete
    assert cfg.with_overrides({"cleanup.policy": "compact"}).to_topic_configs()["cleanup.policy"] == "compact"
    assert cfg.to_topic_configs()["min.cleanable.dirty.ratio"] == "0.5"
    assert cfg.with_overrides({"min.cleanable.dirty.ratio": "0.01"}).min_cleanable_dirty_ratio == 0.01
    for key, raw in (("cleanup.policy", "purge"), ("cleanup.policy", ""), ("cleanup.policy", "compact,"),
                     ("min.cleanable.dirty.ratio", "1.5"), ("min.cleanable.dirty.ratio", "nan"),
                     ("min.cleanable.dirty.ratio", "-0.1"), ("max.compaction.lag.ms", "0"),
                     ("min.compaction.lag.ms", "-1"), ("delete.retention.ms", "-1"), ("delete.retention.ms", "x")):
        with pytest.raises(InvalidConfigError):
            cfg.with_overrides({key: raw})
    with pytest.raises(InvalidConfigError, match=r"min\.compaction\.lag\.ms"):
        cfg.with_overrides({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})


def test_broker_cleaner_configs() -> None:
    base = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181", "log.dirs": "/tmp/a",
            "listeners": "SSL://127.0.0.1:9093", "listener.security.protocol.map": "SSL:SSL",
            "ssl.keystore.location": __file__, "ssl.truststore.location": __file__}
    cfg = build_config(base).default_log_config()
    assert cfg.cleanup_policy == "delete" and cfg.cleaner == CleanerConfig()
    assert cfg.cleaner.enable and cfg.cleaner.threads == 1 and cfg.cleaner.backoff_ms == 15000
    cfg = build_config({**base, "log.cleanup.policy": "delete,compact", "log.cleaner.min.cleanable.ratio": "0.1",
                        "log.cleaner.delete.retention.ms": "5", "log.cleaner.min.compaction.lag.ms": "7",
                        "log.cleaner.max.compaction.lag.ms": "9", "log.cleaner.threads": "2",
                        "log.cleaner.io.max.bytes.per.second": "1000000", "log.cleaner.backoff.ms": "100",
                        "log.cleaner.dedupe.buffer.size": "1048576", "log.cleaner.enable": "false"}
                       ).default_log_config()
    assert (cfg.cleanup_policy, cfg.min_cleanable_dirty_ratio, cfg.delete_retention_ms, cfg.min_compaction_lag_ms,
            cfg.max_compaction_lag_ms) == ("compact,delete", 0.1, 5, 7, 9)
    assert cfg.cleaner == CleanerConfig(enable=False, threads=2, io_max_bytes_per_second=1e6,
                                        dedupe_buffer_size=1048576, backoff_ms=100)
    for key, raw in (("log.cleanup.policy", "purge"), ("log.cleaner.min.cleanable.ratio", "2"),
                     ("log.cleaner.threads", "-1"), ("log.cleaner.enable", "yes")):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            build_config({**base, key: raw})
    with pytest.raises(ConfigError, match=r"min\.compaction\.lag\.ms"):
        build_config({**base, "log.cleaner.min.compaction.lag.ms": "10", "log.cleaner.max.compaction.lag.ms": "5"})


def test_keyless_records_refused_on_compacted_topics_only(tmp_path: Path) -> None:
    compacted = open_log(tmp_path / "c", compact_config())
    keyless = encode_batch([Record(value=b"v", key=b"k", timestamp=NOW), Record(value=b"v", timestamp=NOW)],
                           compression=COMPRESSION_GZIP)
    with pytest.raises(InvalidRecordError, match="Compacted topic cannot accept message without key"):
        compacted.append_as_leader(keyless, leader_epoch=0, now_ms=NOW)
    assert compacted.log_end_offset == 0
    put(compacted, [(b"k", b"v")])
    assert compacted.log_end_offset == 1
    plain = open_log(tmp_path / "d", LogConfig())
    plain.append_as_leader(keyless, leader_epoch=0, now_ms=NOW)
    assert plain.log_end_offset == 2


def test_retention_by_time_and_size_only_with_the_delete_policy(tmp_path: Path) -> None:
    for policy, expect_deleted in (("compact", 0), ("compact,delete", 3), ("delete", 3)):
        log = Log.open(tmp_path / policy.replace(",", "_") / "t-0", "t", 0,
                       LogConfig(cleanup_policy=policy, retention_ms=1000), now_ms=NOW)
        for _ in range(3):
            put(log, [(b"k", b"v")], ts=NOW)
            log.roll(NOW)
        log.update_high_watermark(log.log_end_offset)
        assert log.delete_old_segments(NOW + 10_000) == expect_deleted, policy


# ---------------------------------------------------------------- the threads, through the LogManager


def test_log_manager_runs_the_cleaner_off_the_loop(tmp_path: Path) -> None:
    cfg = compact_config(cleaner=CleanerConfig(backoff_ms=20, threads=2))

    async def scenario() -> list[Record]:
        m = LogManager([tmp_path], LogConfig(cleaner=cfg.cleaner), lambda _t: cfg)
        m.startup(NOW)
        m.defer_roll_flushes(asyncio.get_running_loop())
        assert m.cleaner is not None and m.cleaner.running
        log = m.get_or_create_log("t", 0, NOW)
        for i in range(30):
            put(log, [(f"k{i % 3}".encode(), str(i).encode())])
            if i % 10 == 9:
                log.roll(NOW)
        log.update_high_watermark(log.log_end_offset)
        deadline = time.monotonic() + 20
        while m.cleaner.cleans_total == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert m.cleaner.cleans_total >= 1 and m.cleaner.bytes_read_total > 0
        records = read_all(log)[1]
        await asyncio.to_thread(m.shutdown)
        assert not m.cleaner.running
        assert read_offsets(tmp_path / CLEANER_OFFSET_CHECKPOINT)[TP] == 30
        return records

    records = asyncio.run(scenario())
    assert [(r.offset, r.value) for r in records] == [(27, b"27"), (28, b"28"), (29, b"29")]


def test_the_cleaner_passes_over_the_compacted_logs_only(tmp_path: Path) -> None:
    """Each pass (log.cleaner.backoff.ms) looks at the logs it may clean: the others are not handed
    to it (at 10,000 partitions a tuple per log on every pass was most of the cleaner's idle work)."""
    from broker.log.manager import LogManager

    lm = LogManager([tmp_path / "logs"], LogConfig())
    lm.startup(0)
    compacted = LogConfig().with_overrides({"cleanup.policy": "compact"})
    lm.get_or_create_log("kept", 0, 0, compacted)
    lm.get_or_create_log("deleted", 0, 0)
    assert [tp for tp, _log, _d in lm._compacted_logs()] == [("kept", 0)]
    lm.update_config("deleted", compacted)  # a dynamic topic config change
    assert sorted(tp for tp, _log, _d in lm._compacted_logs()) == [("deleted", 0), ("kept", 0)]
    lm.shutdown()
