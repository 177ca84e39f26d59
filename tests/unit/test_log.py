"""The segmented log: SPEC S2 (appends, segments, retention, recovery) and its edges."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.log.config import LogConfig
from broker.log.log import Log, parse_topic_partition
from broker.log.manager import CLEAN_SHUTDOWN_FILE, LogDirLockedError, LogManager
from proto import errors
from proto.record_batch import Record, decode_batches, encode_batch, iter_headers

HOUR = 3600 * 1000


def batch(values: list[str], ts: int = 1_000) -> bytes:
    return encode_batch([Record(value=v.encode(), timestamp=ts + i) for i, v in enumerate(values)])


def values(data: bytes, from_offset: int = 0) -> list[str]:
    return [r.value.decode() for r in decode_batches(data) if r.offset >= from_offset and r.value is not None]


def open_log(path: Path, cfg: LogConfig | None = None, **kw: object) -> Log:
    return Log.open(path / "topic-0", "topic", 0, cfg or LogConfig(), now_ms=0, **kw)  # type: ignore[arg-type]


def fill(log: Log, batches: int, per_batch: int = 3, epoch: int = 0, now_ms: int = 0) -> None:
    for _b in range(batches):
        start = log.log_end_offset
        log.append_as_leader(batch([f"m{start + i}" for i in range(per_batch)], ts=1_000 + start), epoch, now_ms)


def test_s2_2_offsets_are_sequential_and_leo_is_next_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    info = log.append_as_leader(batch(["a", "b", "c"]), leader_epoch=0, now_ms=0)
    assert (info.first_offset, info.last_offset, log.log_end_offset) == (0, 2, 3)
    info = log.append_as_leader(batch(["d"]) + batch(["e", "f"]), leader_epoch=0, now_ms=0)
    assert (info.first_offset, info.last_offset, info.batch_count) == (3, 5, 2)
    assert log.log_end_offset == 6
    data = log.read(0, 1 << 20)
    assert values(data) == ["a", "b", "c", "d", "e", "f"]
    assert [h.base_offset for _, h in iter_headers(data)] == [0, 3, 4]
    assert {h.partition_leader_epoch for _, h in iter_headers(data)} == {0}


def test_s2_1_segments_roll_by_size_and_are_named_by_base_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=600))
    fill(log, 20)
    names = sorted(p.name for p in (tmp_path / "topic-0").glob("*.log"))
    assert len(names) == len(log.segments) > 3
    assert names == [f"{s.base_offset:020d}.log" for s in log.segments]
    assert all((tmp_path / "topic-0" / n.replace(".log", ".index")).exists() for n in names[:-1])
    assert all(s.size <= 600 for s in log.segments)
    assert values(log.read(0, 1 << 20, min_one_batch=True))[:3] == ["m0", "m1", "m2"]
    # Reading across all segments yields every record in order.
    got: list[str] = []
    offset = 0
    while offset < log.log_end_offset:
        recs = [r for r in decode_batches(log.read(offset, 200)) if r.offset >= offset]
        got += [r.value.decode() for r in recs if r.value]
        offset = recs[-1].offset + 1
    assert got == [f"m{i}" for i in range(60)]


def test_segment_ms_rolls_by_time(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_ms=1000))
    fill(log, 2, now_ms=0)
    assert len(log.segments) == 1
    fill(log, 1, now_ms=1001)
    assert len(log.segments) == 2 and log.segments[-1].base_offset == 6


def test_read_is_bounded_by_max_offset_and_max_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 10)  # batches of 3: 0-2, 3-5, ...
    # S3.2: consumers read below the high watermark only.
    assert values(log.read(0, 1 << 20, max_offset=6)) == [f"m{i}" for i in range(6)]
    assert log.read(6, 1 << 20, max_offset=6) == b""
    # Mid-batch start: the whole batch holding the offset comes back.
    assert values(log.read(4, 1 << 20, max_offset=9))[:1] == ["m3"]
    one = log.read(0, 10)  # smaller than one batch: still one batch (progress)
    assert values(one) == ["m0", "m1", "m2"]
    assert log.read(0, 10, min_one_batch=False) == b""
    two = log.read(0, len(one) * 2 + 5)
    assert len(values(two)) == 6
    assert log.read(30, 100) == b""  # at the LEO: nothing yet


def test_s6_2_out_of_range_and_bad_arguments(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 2)
    with pytest.raises(errors.OffsetOutOfRangeError):
        log.read(7, 100)
    with pytest.raises(errors.OffsetOutOfRangeError):
        log.read(-1, 100)
    with pytest.raises(errors.InvalidRequestError):
        log.read(0, -5)
    with pytest.raises(errors.InvalidRequestError):
        log.truncate_to(-1)


def test_bad_batches_are_rejected_and_nothing_is_written(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(max_message_bytes=500, segment_bytes=2000))
    fill(log, 1)
    good = batch(["ok"])
    corrupt = bytearray(good)
    corrupt[-2] ^= 1
    with pytest.raises(errors.CorruptMessageError):
        log.append_as_leader(good + bytes(corrupt), 0, 0)  # second batch bad: neither is written
    with pytest.raises(errors.MessageTooLargeError):
        log.append_as_leader(batch(["x" * 600]), 0, 0)
    with pytest.raises(errors.RecordListTooLargeError):
        log.append_as_leader(b"".join(batch([f"{i}" * 50]) for i in range(30)), 0, 0)
    assert log.log_end_offset == 3
    assert values(log.read(0, 1 << 20)) == ["m0", "m1", "m2"]


def test_follower_append_keeps_leader_offsets_and_epochs(tmp_path: Path) -> None:
    leader = Log.open(tmp_path / "l" / "t-0", "t", 0, LogConfig(), now_ms=0)
    follower = Log.open(tmp_path / "f" / "t-0", "t", 0, LogConfig(), now_ms=0)
    fill(leader, 2, epoch=0)
    leader.assign_epoch_start_offset(3, leader.log_end_offset)
    fill(leader, 2, epoch=3)
    follower.append_as_follower(leader.read(0, 1 << 20), now_ms=0)
    assert follower.log_end_offset == leader.log_end_offset == 12
    assert follower.epoch_cache.pairs() == leader.epoch_cache.pairs() == [(0, 0), (3, 6)]
    assert follower.read(0, 1 << 20) == leader.read(0, 1 << 20)
    with pytest.raises(errors.InvalidRequestError):
        follower.append_as_follower(leader.read(3, 1 << 20), now_ms=0)  # does not continue the log


def test_truncate_to_removes_whole_batches_and_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=400))
    fill(log, 4, epoch=1)
    log.assign_epoch_start_offset(2, log.log_end_offset)
    fill(log, 4, epoch=2)
    log.update_high_watermark(20)
    assert log.truncate_to(12)
    assert log.log_end_offset == 12 and log.high_watermark == 12
    assert log.epoch_cache.pairs() == [(1, 0)]
    assert values(log.read(0, 1 << 20, max_offset=12))[-1] == "m11"
    # Truncating into the middle of a batch drops that whole batch.
    assert log.truncate_to(7) and log.log_end_offset == 6
    assert not log.truncate_to(100)
    fill(log, 1, epoch=5)
    assert log.log_end_offset == 9 and values(log.read(6, 1 << 20)) == ["m6", "m7", "m8"]


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=300))
    fill(log, 6)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (1000, 1000, 1000)
    assert [s.base_offset for s in log.segments] == [1000]
    assert log.epoch_cache.pairs() == []
    fill(log, 1)
    assert values(log.read(1000, 1 << 20)) == ["m1000", "m1001", "m1002"]


def test_offset_for_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=400, index_interval_bytes=1))
    for i in range(10):
        log.append_as_leader(batch([f"m{3 * i}", f"m{3 * i + 1}", f"m{3 * i + 2}"], ts=10_000 + 100 * i), 0, 0)
    rec = log.offset_for_timestamp(10_301)  # batch 3 holds 10300, 10301, 10302
    assert rec is not None and (rec.offset, rec.timestamp) == (10, 10_301)
    first = log.offset_for_timestamp(0)
    assert first is not None and first.offset == 0
    assert log.offset_for_timestamp(99_999) is None


def test_s2_3_retention_by_time_never_touches_active_or_above_hw(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=300, retention_ms=HOUR))
    fill(log, 10)
    n = len(log.segments)
    now = 1_000 + 2 * HOUR
    assert log.delete_old_segments(now) == 0  # HW = 0: nothing is committed yet
    log.update_high_watermark(log.log_end_offset)
    deleted = log.delete_old_segments(now)
    assert deleted == n - 1 and len(log.segments) == 1  # the active segment stays
    assert log.log_start_offset == log.segments[0].base_offset
    with pytest.raises(errors.OffsetOutOfRangeError):
        log.read(0, 100)


def test_s2_3_retention_by_size(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=300, retention_bytes=700))
    fill(log, 12)
    log.update_high_watermark(log.log_end_offset)
    log.assign_epoch_start_offset(0, 0)
    log.delete_old_segments(now_ms=0)
    assert log.size - log.segments[0].size < 700 <= log.size or len(log.segments) == 1
    assert log.epoch_cache.pairs()[0] == (0, log.log_start_offset)
    # By time -1 (infinite) and bytes -1: nothing goes.
    keep = open_log(tmp_path / "k", LogConfig(segment_bytes=300, retention_ms=-1))
    fill(keep, 12)
    keep.update_high_watermark(keep.log_end_offset)
    assert keep.delete_old_segments(now_ms=10**15) == 0


def test_s2_4_torn_tail_is_truncated_and_nothing_before_it_lost(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=500))
    fill(log, 12)
    last = log.segments[-1]
    path, size, leo = last.log_path, last.size, log.log_end_offset
    del log  # kill -9: no close, no index flush
    os.truncate(path, size - 7)
    log = open_log(tmp_path, LogConfig(segment_bytes=500), clean_shutdown=False)
    assert log.log_end_offset == leo - 3
    assert log.recovered_bytes_truncated > 0
    assert values(log.read(0, 1 << 20))[0] == "m0"
    # Every surviving record is readable, in order.
    assert [r.offset for r in _read_all(log)] == list(range(leo - 3))


def test_s2_4_corrupt_byte_mid_segment_cuts_from_that_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 6)
    seg = log.segments[0]
    pos_of_batch_2 = seg.translate_offset(6)
    assert pos_of_batch_2 is not None
    del log
    with open(seg.log_path, "r+b") as f:
        f.seek(pos_of_batch_2[0] + 70)
        b = f.read(1)
        f.seek(pos_of_batch_2[0] + 70)
        f.write(bytes([b[0] ^ 0xFF]))
    log = open_log(tmp_path, clean_shutdown=False)
    assert log.log_end_offset == 6


@pytest.mark.parametrize(("damage", "clean"), [("torn", False), ("crc", False), ("torn", True)])
def test_item8_recovery_truncating_a_segment_removes_every_later_segment(tmp_path: Path, damage: str,
                                                                        clean: bool) -> None:
    # Kafka's Log.recoverLog: a segment cut short by recovery ends the log. Keeping the later
    # segments would leave a gap in the offsets (and new appends landing below them).
    cfg = LogConfig(segment_bytes=300)
    log = open_log(tmp_path, cfg)
    fill(log, 9)
    segs = log.segments
    assert len(segs) == 3
    middle = segs[1]
    last_batch = middle.translate_offset(middle.next_offset - 3)
    assert last_batch is not None
    cut_at, path, later = middle.next_offset - 3, middle.log_path, segs[2].log_path
    leo = log.log_end_offset
    log.close()
    if damage == "torn":
        os.truncate(path, middle.size - 7)
    else:
        with open(path, "r+b") as f:
            f.seek(last_batch[0] + 70)
            b = f.read(1)
            f.seek(last_batch[0] + 70)
            f.write(bytes([b[0] ^ 0xFF]))
    if clean:
        (tmp_path / "topic-0" / CLEAN_SHUTDOWN_FILE).touch()
    log = open_log(tmp_path, cfg, clean_shutdown=clean, recovery_point=0 if not clean else leo)
    assert log.log_end_offset == cut_at and log.corrupt_tails == 1
    assert not later.exists() and [s.base_offset for s in log.segments] == [segs[0].base_offset, middle.base_offset]
    assert [r.offset for r in _read_all(log)] == list(range(cut_at))
    fill(log, 2)  # appends continue the log without a gap
    assert [r.offset for r in _read_all(log)] == list(range(cut_at + 6))
    log.close()
    log = open_log(tmp_path, cfg, clean_shutdown=False)
    assert [r.offset for r in _read_all(log)] == list(range(cut_at + 6))


def test_clean_reopen_trusts_files_and_rebuilds_a_missing_index(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=400, index_interval_bytes=50)
    log = open_log(tmp_path, cfg)
    fill(log, 15)
    leo = log.log_end_offset
    first_index = log.segments[0].index.path
    log.close()
    first_index.unlink()
    log = open_log(tmp_path, cfg, clean_shutdown=True, recovery_point=leo)
    assert log.log_end_offset == leo
    assert len(log.segments[0].index) > 0
    assert [r.offset for r in _read_all(log)] == list(range(leo))


def _read_all(log: Log) -> list[Record]:
    out: list[Record] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        recs = [r for r in decode_batches(log.read(offset, 256)) if r.offset >= offset]
        out += recs
        offset = recs[-1].offset + 1
    return out


def test_flush_messages_policy_advances_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(flush_messages=6))
    fill(log, 1)
    assert log.recovery_point == 0
    fill(log, 1)
    assert log.recovery_point == 6
    log2 = open_log(tmp_path / "ms", LogConfig(flush_ms=100))
    fill(log2, 1)
    assert not log2.maybe_flush(now_ms=50)
    assert log2.maybe_flush(now_ms=150) and log2.recovery_point == 3


def test_the_broker_flush_walk_flushes_the_logs_that_set_flush_ms(tmp_path: Path) -> None:
    """LogManager.flush_dirty_logs (every log.flush.scheduler.interval.ms) asks only the logs with a
    finite flush.ms - a topic override, or a dynamic change - and flushes those that are due."""
    from broker.log.manager import LogManager

    lm = LogManager([tmp_path / "logs"], LogConfig())
    lm.startup(0)
    timed = lm.get_or_create_log("timed", 0, 0, LogConfig(flush_ms=100))
    default = lm.get_or_create_log("default", 0, 0)
    fill(timed, 1)
    fill(default, 1)
    lm.flush_dirty_logs(now_ms=150)
    assert timed.recovery_point == timed.log_end_offset > 0
    assert default.recovery_point == 0
    lm.update_config("default", LogConfig(flush_ms=100))  # a dynamic topic config change
    lm.flush_dirty_logs(now_ms=300)
    assert default.recovery_point == default.log_end_offset
    lm.shutdown()


def test_log_append_time(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(message_timestamp_type="LogAppendTime"))
    info = log.append_as_leader(batch(["a", "b"], ts=5), 0, now_ms=777)
    assert info.log_append_time_ms == 777
    assert [r.timestamp for r in decode_batches(log.read(0, 1000))] == [777, 777]


def test_topic_config_overrides() -> None:
    cfg = LogConfig().with_overrides({"segment.bytes": "1024", "unclean.leader.election.enable": "true"})
    assert cfg.segment_bytes == 1024 and cfg.unclean_leader_election_enable
    assert cfg.to_topic_configs()["segment.bytes"] == "1024"
    with pytest.raises(errors.InvalidConfigError):
        LogConfig().with_overrides({"no.such.config": "1"})
    with pytest.raises(errors.InvalidConfigError):
        LogConfig().with_overrides({"segment.bytes": "lots"})
    with pytest.raises(errors.InvalidConfigError):
        LogConfig().with_overrides({"min.insync.replicas": "0"})


def test_topic_partition_dir_names() -> None:
    assert parse_topic_partition("my-topic-12") == ("my-topic", 12)
    with pytest.raises(errors.KafkaStorageError):
        parse_topic_partition("nodash")


# ---------------------------------------------------------------- LogManager


def test_manager_clean_shutdown_marker_and_checkpoints(tmp_path: Path) -> None:
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    m = LogManager(dirs, LogConfig())
    m.startup(now_ms=0)
    a = m.get_or_create_log("a", 0, 0)
    b = m.get_or_create_log("b", 1, 0)
    assert a.dir.parent != b.dir.parent  # spread over the directories
    fill(a, 3)
    a.update_high_watermark(6)
    m.shutdown()
    assert all((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)
    assert "a 0 6" in (a.dir.parent / "replication-offset-checkpoint").read_text()

    m2 = LogManager(dirs, LogConfig())
    m2.startup(now_ms=0)
    assert all(m2.had_clean_shutdown.values())
    assert not any((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)  # a crash from now on is detected
    a2 = m2.get_log("a", 0)
    assert a2 is not None and a2.log_end_offset == 9 and a2.high_watermark == 6
    assert m2.delete_log("b", 1) and m2.get_log("b", 1) is None
    assert not any(p.name.startswith("b-1") for d in dirs for p in d.iterdir())
    m2.abandon()  # kill -9
    m3 = LogManager(dirs, LogConfig())
    m3.startup(now_ms=0)
    assert not any(m3.had_clean_shutdown.values())
    a3 = m3.get_log("a", 0)
    assert a3 is not None and a3.log_end_offset == 9
    m3.shutdown()


def test_manager_refuses_a_directory_in_use(tmp_path: Path) -> None:
    m = LogManager([tmp_path], LogConfig())
    m.startup(0)
    with pytest.raises(LogDirLockedError):
        LogManager([tmp_path], LogConfig()).startup(0)
    m.shutdown()
    LogManager([tmp_path], LogConfig()).startup(0)


def test_manager_finishes_an_interrupted_delete(tmp_path: Path) -> None:
    (tmp_path / "gone-0.abc-delete").mkdir()
    (tmp_path / "gone-0.abc-delete" / "00000000000000000000.log").write_bytes(b"x")
    m = LogManager([tmp_path], LogConfig())
    m.startup(0)
    assert not (tmp_path / "gone-0.abc-delete").exists() and len(m) == 0


# ------------------------------------------------------------------ nothing on disk stops a log (S13.5)


def _append_raw(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def _recrc(buf: bytearray) -> bytes:
    import struct

    from proto.record_batch import ATTRIBUTES_OFFSET, CRC_OFFSET, crc32c
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c(bytes(buf[ATTRIBUTES_OFFSET:])))
    return bytes(buf)


@pytest.mark.parametrize("clean", [True, False])
def test_s13_5_a_batch_whose_offsets_overflow_the_segment_is_a_corrupt_tail(tmp_path: Path, clean: bool) -> None:
    import struct
    log = open_log(tmp_path)
    fill(log, 2)
    path = log.segments[-1].log_path
    log.close()
    # What an older broker accepted: a valid CRC over last_offset_delta = 2^31 - 1.
    bad = bytearray(batch(["x"]))
    struct.pack_into(">q", bad, 0, 6)
    struct.pack_into(">i", bad, 23, 2**31 - 1)
    _append_raw(path, _recrc(bad))
    if clean:
        (tmp_path / "topic-0" / CLEAN_SHUTDOWN_FILE).touch()
    log = open_log(tmp_path, clean_shutdown=clean)
    assert log.log_end_offset == 6 and log.corrupt_tails == 1
    fill(log, 1)  # and the log takes appends again
    assert log.log_end_offset == 9


def test_s13_5_overlapping_segments_end_the_log(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=300))
    fill(log, 9)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) == 3
    log.close()
    # A stray segment named below the end of the one before it.
    stray = log.segments[1].log_path.with_name(f"{bases[1] + 1:020d}.log")
    stray.write_bytes(batch(["stray"]))
    log = open_log(tmp_path, LogConfig(segment_bytes=300), clean_shutdown=False)
    # Segments 0 and bases[1] load; the stray one overlaps the second: it and all after it go.
    assert log.corrupt_tails == 1 and log.log_end_offset == bases[2]


def test_s13_5_unreadable_checkpoints_and_a_broken_log_do_not_stop_the_manager(tmp_path: Path) -> None:
    cfg = LogConfig()
    lm = LogManager([tmp_path], cfg)
    lm.startup(0)
    fill(lm.get_or_create_log("good", 0, 0), 2)
    fill(lm.get_or_create_log("broken", 0, 0), 1)
    lm.shutdown()
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        (tmp_path / name).write_bytes(b"\xff\xfe\x00 not a checkpoint")
    (tmp_path / "good-0" / "leader-epoch-checkpoint").write_bytes(b"junk")
    # A directory that cannot load (its segment is a directory): moved aside, not a crash.
    seg = tmp_path / "broken-0" / ("0" * 20 + ".log")
    seg.unlink()
    seg.mkdir()
    lm = LogManager([tmp_path], cfg)
    lm.startup(0)
    good = lm.get_log("good", 0)
    assert good is not None and good.log_end_offset == 6 and good.epoch_cache.pairs() == [(0, 0)]
    assert lm.get_log("broken", 0) is None and lm.quarantined == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith("-quarantined")]
    lm.shutdown()


def test_s13_3_replica_directories_stay_inside_the_log_dir(tmp_path: Path) -> None:
    lm = LogManager([tmp_path / "data"], LogConfig())
    lm.startup(0)
    for topic in ("../escape", "a/b", "..", ""):
        with pytest.raises(errors.InvalidTopicError):
            lm.get_or_create_log(topic, 0, 0)
    assert not (tmp_path / "escape-0").exists()
    # Deleting removes a directory even when it never loaded (a leftover of a failed start).
    (tmp_path / "data" / "left-3").mkdir()
    assert lm.delete_log("left", 3) and not (tmp_path / "data" / "left-3").exists()
    lm.shutdown()


def test_s13_4_more_than_iov_max_batches_in_one_append(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    many = b"".join(batch([f"b{i}"]) for i in range(1500))
    info = log.append_as_leader(many, 0, 0)
    assert info.batch_count == 1500 and log.log_end_offset == 1500
    assert values(log.read(0, 1 << 24)) == [f"b{i}" for i in range(1500)]


# ------------------------------------------------------------ rolled segments' fsync off the loop


def test_a_deferred_roll_moves_the_recovery_point_only_once_the_segment_is_fsynced(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=600))
    log.defer_roll_flush = True
    told: list[int] = []
    log.on_roll = lambda lg: told.append(len(lg.rolled_unflushed))
    while len(log.segments) == 1:
        fill(log, 1)
    assert told == [1]
    assert log.recovery_point == 0  # not yet durable: a crash now recovers the old segment too
    (rolled,) = log.take_rolled_unflushed()
    assert rolled.up_to == log.segments[1].base_offset and log.rolls_in_flight == 1
    os.fsync(rolled.fd)
    os.close(rolled.fd)
    log.on_rolled_flushed(rolled)
    assert log.recovery_point == rolled.up_to and log.rolls_in_flight == 0


def test_a_truncation_before_the_fsync_completes_keeps_the_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=600))
    log.defer_roll_flush = True
    while len(log.segments) == 1:
        fill(log, 1)
    (rolled,) = log.take_rolled_unflushed()
    log.truncate_to(rolled.up_to - 2)  # into the rolled segment: it is written again from there
    fill(log, 1)
    os.close(rolled.fd)
    log.on_rolled_flushed(rolled)
    assert log.recovery_point == 0
    # A failed fsync moves nothing either; a full flush still covers everything.
    log.flush()
    assert log.recovery_point == log.log_end_offset


def test_rolls_past_the_in_flight_bound_flush_at_once(tmp_path: Path) -> None:
    from broker.log.log import MAX_ROLLS_IN_FLIGHT

    log = open_log(tmp_path, LogConfig(segment_bytes=300))
    log.defer_roll_flush = True
    while log.rolls_in_flight < MAX_ROLLS_IN_FLIGHT:
        fill(log, 1)
    assert log.recovery_point == 0
    segments = len(log.segments)
    while len(log.segments) == segments:
        fill(log, 1)
    assert log.rolls_in_flight == MAX_ROLLS_IN_FLIGHT  # nothing new in flight: flushed synchronously
    assert log.recovery_point == log.segments[-1].base_offset
    for rolled in log.take_rolled_unflushed():
        os.close(rolled.fd)


def test_the_log_manager_fsyncs_rolled_segments_on_its_flusher_thread(tmp_path: Path) -> None:
    import asyncio
    import threading

    async def run() -> tuple[int, int]:
        m = LogManager([tmp_path], LogConfig(segment_bytes=600))
        m.startup(0)
        m.defer_roll_flushes(asyncio.get_running_loop())
        log = m.get_or_create_log("topic", 0, 0)
        while len(log.segments) == 1:
            fill(log, 1)
        rolled_at = log.segments[-1].base_offset
        for _ in range(200):  # bounded: the flusher thread answers within milliseconds
            if log.recovery_point:
                break
            await asyncio.sleep(0.01)
        assert any(t.name.startswith("log-flusher") for t in threading.enumerate())
        recovery_point = log.recovery_point
        await asyncio.to_thread(m.shutdown)
        return rolled_at, recovery_point

    rolled_at, recovery_point = asyncio.run(run())
    assert recovery_point == rolled_at


def test_reads_at_recent_batch_offsets_match_a_scan_and_survive_truncation(tmp_path: Path) -> None:
    """S15: a fetch at a recent append's base offset is found without scanning from the index
    entry (segment's recent positions); the answers are the scan's, before and after truncation."""
    from broker.log import segment as seg_mod

    log = open_log(tmp_path, LogConfig(index_interval_bytes=1 << 20))
    for i in range(seg_mod.RECENT_BATCHES + 20):
        log.append_as_leader(batch([f"v{i}"]), 0, 0)
    seg = log.segments[-1]
    scans = 0
    real_lookup = seg.index.lookup

    def counting_lookup(offset: int) -> tuple[int, int]:
        nonlocal scans
        scans += 1
        return real_lookup(offset)

    seg.index.lookup = counting_lookup  # type: ignore[method-assign]
    for offset in range(log.log_end_offset):
        assert values(log.read(offset, 1 << 20)) == [f"v{i}" for i in range(offset, log.log_end_offset)]
    # Only offsets older than the recent window needed the index and a scan.
    assert scans == 20
    assert log.truncate_to(log.log_end_offset - 5)
    fill(log, 2, per_batch=2)
    end = log.log_end_offset
    # Offsets reused after the truncation point to the new batches, never to stale positions.
    assert values(log.read(end - 4, 1 << 20)) == [f"m{end - 4 + i}" for i in range(4)]
    assert log.read(end - 3, 1 << 20)[:8] == log.read(end - 4, 1 << 20)[:8]  # the batch holding end-3


def _count_preads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    from broker.log import segment as seg_mod

    calls: list[int] = []
    real = os.pread

    def counting(fd: int, n: int, pos: int) -> bytes:
        calls.append(pos)
        return real(fd, n, pos)

    monkeypatch.setattr(seg_mod.os, "pread", counting)
    return calls


def _file_bytes(log: Log) -> bytes:
    return b"".join(seg.log_path.read_bytes() for seg in log.segments)


def test_the_last_small_append_is_read_back_without_a_read_of_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """S15 (issue 29): at thousands of partitions every follower fetch reads the one small batch
    just appended; the segment keeps those bytes (TAIL_BYTES at most) and a recent append's first
    batch size, so the read costs no pread. The bytes are the file's, on the leader and on a
    follower; an older recent offset costs one pread (the data), no header read."""
    leader = open_log(tmp_path / "leader")
    follower = open_log(tmp_path / "follower")
    preads = _count_preads(monkeypatch)
    for i in range(4):
        start = leader.log_end_offset
        leader.append_as_leader(batch([f"v{i}"] * (i + 1)), 0, 0)
        preads.clear()
        newest = leader.read(start, 1 << 20)
        assert preads == []
        assert newest == _file_bytes(leader)[-len(newest):] and values(newest) == [f"v{i}"] * (i + 1)
        follower.append_as_follower(newest, now_ms=0)
        preads.clear()
        assert follower.read(start, 1 << 20) == newest and preads == []
    preads.clear()
    older = leader.read(1, 1 << 20)  # the second append's base offset: a recent one, not the last
    assert len(preads) == 1
    assert older == _file_bytes(leader)[-len(older):] and values(older) == ["v1"] * 2 + ["v2"] * 3 + ["v3"] * 4


def test_a_large_append_is_not_kept_and_a_truncation_or_roll_drops_the_kept_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the segment keeps is bounded (TAIL_BYTES, the active segment only) and never outlives
    the bytes in the file: after a truncation the offsets are written again with other records."""
    from broker.log import segment as seg_mod

    log = open_log(tmp_path)
    preads = _count_preads(monkeypatch)
    big = "x" * (seg_mod.TAIL_BYTES + 1)
    log.append_as_leader(batch([big]), 0, 0)
    preads.clear()
    assert values(log.read(0, 1 << 20)) == [big] and preads  # read from the file
    assert log.segments[-1]._tail is None
    log.append_as_leader(batch(["a"]), 0, 0)
    log.append_as_leader(batch(["b"]), 0, 0)
    assert log.truncate_to(2)
    assert log.segments[-1]._tail is None
    assert values(log.read(1, 1 << 20)) == ["a"]
    log.append_as_leader(batch(["c"]), 0, 0)  # offset 2 again, other bytes at the same position
    assert values(log.read(2, 1 << 20)) == ["c"] and values(log.read(1, 1 << 20)) == ["a", "c"]
    old = log.segments[-1]
    log.roll(0)
    assert old._tail is None and values(log.read(2, 1 << 20)) == ["c"]


def test_flushing_a_log_with_nothing_unflushed_makes_no_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A clean shutdown flushes every log: with 10,000 idle ones, an fsync each held the broker's
    exit for seconds (issue 29)."""
    log = open_log(tmp_path)
    fill(log, 2)
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    log.flush()
    assert calls, "unflushed records must be fsynced"
    calls.clear()
    log.flush()
    assert calls == [] and log.recovery_point == log.log_end_offset


def test_an_empty_log_closes_without_index_files_and_reopens_cleanly(tmp_path: Path) -> None:
    """Closing an idle partition writes (and fsyncs) nothing for its empty indexes (issue 29); a clean
    reopen without them works, and appends and reads as before."""
    log = open_log(tmp_path)
    log.flush()
    log.close()
    assert not list((tmp_path / "topic-0").glob("*index"))
    log = open_log(tmp_path, clean_shutdown=True)
    fill(log, 3)
    log.close()
    assert list((tmp_path / "topic-0").glob("*.index"))
    log = open_log(tmp_path, clean_shutdown=True)
    assert log.log_end_offset == 9 and values(log.read(3, 1 << 20))[0] == "m3"


def test_a_new_logs_directory_is_fsynced_with_its_first_flush_not_at_creation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Creating thousands of partitions fsynced the log directory once per log on the event loop
    (60% of the broker's loop while 10,000 were created, issue 29); as Kafka, the parent directory
    is fsynced with the log's first flush."""
    import broker.log.log as log_mod
    import broker.log.manager as manager_mod

    synced: list[Path] = []
    real_log, real_manager = log_mod.fsync_dir, manager_mod.fsync_dir
    monkeypatch.setattr(log_mod, "fsync_dir", lambda d: (synced.append(Path(d)), real_log(d))[1])
    monkeypatch.setattr(manager_mod, "fsync_dir", lambda d: (synced.append(Path(d)), real_manager(d))[1])
    # The shutdown that fsyncs file by file (where there is no syncfs: tests/unit/test_log_shutdown_sync.py).
    monkeypatch.setattr(manager_mod, "can_sync_filesystems", lambda: False)
    m = LogManager([tmp_path / "d1"], LogConfig())
    m.startup(now_ms=0)
    synced.clear()
    logs = [m.get_or_create_log("t", p, 0) for p in range(5)]
    assert synced == []
    fill(logs[0], 1)
    logs[0].flush()
    assert synced == [tmp_path / "d1"]
    logs[0].flush()
    assert synced == [tmp_path / "d1"]  # once per log
    m.shutdown()  # the others' first (and only) flush
    assert synced.count(tmp_path / "d1") >= 5
