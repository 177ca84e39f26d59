"""The periodic offset checkpoints are written off the event loop (issue 29, SPEC S15): at 10,000
partitions a high-watermark checkpoint (sort, format, write, fsync) is 5 ms on a quiet disk, every
5 s. ``LogManager._checkpoint(background=True)`` reads the offsets on the caller's thread and writes
on the flusher thread; a write older than what is on disk is dropped. Real logs, no sockets."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from broker.log import manager as manager_mod
from broker.log.checkpoint import read_offsets
from broker.log.config import LogConfig
from broker.log.log import Log
from broker.log.manager import HIGH_WATERMARK_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, LogManager


def started(tmp_path: Path, loop: asyncio.AbstractEventLoop, partitions: int = 3) -> LogManager:
    lm = LogManager([tmp_path], LogConfig())
    lm.startup(0)
    lm.defer_roll_flushes(loop)
    for p in range(partitions):
        lm.get_or_create_log("t", p, 0)
    return lm


def test_a_background_checkpoint_is_written_on_the_flusher_thread(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    writers: list[str] = []
    real = manager_mod.write_offsets

    def spy(path: Path, offsets: dict[tuple[str, int], int]) -> None:
        writers.append(threading.current_thread().name)
        real(path, offsets)

    monkeypatch.setattr(manager_mod, "write_offsets", spy)
    loop = asyncio.new_event_loop()
    try:
        lm = started(tmp_path, loop)
        lm.checkpoint_high_watermarks(background=True)
        assert lm._flusher is not None
        lm._flusher.submit(lambda: None).result(5)  # the write queued before it is done
        assert writers and writers[-1].startswith("log-flusher")
        assert read_offsets(tmp_path / HIGH_WATERMARK_CHECKPOINT) == {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
        writers.clear()
        lm.get_or_create_log("t", 3, 0)  # something to write
        lm.checkpoint_high_watermarks()  # shutdown's and the deletions' write: at once, on this thread
        assert writers == [threading.current_thread().name]
        lm.shutdown()
    finally:
        loop.close()


def test_an_older_background_write_never_replaces_a_newer_one(tmp_path: Path) -> None:
    loop = asyncio.new_event_loop()
    try:
        lm = started(tmp_path, loop, partitions=1)
        assert lm._flusher is not None
        gate = threading.Event()
        lm._flusher.submit(gate.wait, 5)  # the flusher is busy: the background write waits behind
        lm.checkpoint_log_start_offsets(background=True)  # log start 0, read now
        lg = lm.get_log("t", 0)
        lg.append_as_leader(_batch(), 0, 0)
        lg.update_high_watermark(lg.log_end_offset)
        assert lg.maybe_increment_log_start_offset(1)  # DeleteRecords moves it...
        lm.checkpoint_log_start_offsets()  # ... and its checkpoint is written at once
        assert read_offsets(tmp_path / LOG_START_OFFSET_CHECKPOINT) == {("t", 0): 1}
        gate.set()
        lm._flusher.submit(lambda: None).result(5)
        # The older write (log start 0) came last, and was dropped: deleted records stay deleted.
        assert read_offsets(tmp_path / LOG_START_OFFSET_CHECKPOINT) == {("t", 0): 1}
        lm.shutdown()
    finally:
        loop.close()


def test_an_unchanged_checkpoint_is_not_written_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle broker rewrote every partition's high watermark every 5 s - most of its idle CPU at
    10,000 partitions (issue 29). A checkpoint whose offsets did not change since the last write
    is not written again; one that changed is, and so is one whose last write failed."""
    written: list[dict[tuple[str, int], int]] = []
    fail = [False]
    real = manager_mod.write_offsets

    def spy(path: Path, offsets: dict[tuple[str, int], int]) -> None:
        if fail[0]:
            raise OSError(28, "No space left on device")
        written.append(dict(offsets))
        real(path, offsets)

    monkeypatch.setattr(manager_mod, "write_offsets", spy)
    loop = asyncio.new_event_loop()
    try:
        lm = started(tmp_path, loop, partitions=2)
        written.clear()  # what the start wrote
        lm.checkpoint_high_watermarks()
        lm.checkpoint_high_watermarks()
        assert written == [{("t", 0): 0, ("t", 1): 0}]
        lg = lm.get_log("t", 0)
        lg.append_as_leader(_batch(), 0, 0)
        lg.update_high_watermark(lg.log_end_offset)
        fail[0] = True
        with pytest.raises(OSError):
            lm.checkpoint_high_watermarks()
        fail[0] = False
        lm.checkpoint_high_watermarks()  # the failed write's offsets are written now
        lm.checkpoint_high_watermarks()
        assert written == [{("t", 0): 0, ("t", 1): 0}, {("t", 0): 2, ("t", 1): 0}]
        assert read_offsets(tmp_path / HIGH_WATERMARK_CHECKPOINT) == {("t", 0): 2, ("t", 1): 0}
        written.clear()
        lm.shutdown()  # the last word before the clean-shutdown marker: every checkpoint, unskipped
        assert len(written) == 3
    finally:
        loop.close()


def test_no_log_is_looked_at_while_no_offset_moved(tmp_path: Path) -> None:
    """Each periodic checkpoint read every partition's offset (10 ms every 5 s at 10,000 partitions
    here, on the loop). The logs tick their manager's clock when a checkpointed offset moves, and
    when a log comes or goes; an unmoved clock means the same snapshot, so none is read."""
    loop = asyncio.new_event_loop()
    try:
        lm = started(tmp_path, loop, partitions=2)
        read: list[int] = []

        def hw(log: Log) -> int:
            read.append(1)
            return log.high_watermark

        lm._checkpoint(HIGH_WATERMARK_CHECKPOINT, hw)
        assert len(read) == 2
        lm._checkpoint(HIGH_WATERMARK_CHECKPOINT, hw)
        assert len(read) == 2  # nothing moved: not one log read
        lg = lm.get_log("t", 0)
        lg.append_as_leader(_batch(), 0, 0)
        lg.update_high_watermark(lg.log_end_offset)
        lm._checkpoint(HIGH_WATERMARK_CHECKPOINT, hw)
        assert len(read) == 4
        assert read_offsets(tmp_path / HIGH_WATERMARK_CHECKPOINT) == {("t", 0): 2, ("t", 1): 0}
        lm.get_or_create_log("t", 2, 0)  # a log more
        lm._checkpoint(HIGH_WATERMARK_CHECKPOINT, hw)
        assert len(read) == 7
        assert lm.delete_log("t", 1)  # a log less
        lm._checkpoint(HIGH_WATERMARK_CHECKPOINT, hw)
        assert read_offsets(tmp_path / HIGH_WATERMARK_CHECKPOINT) == {("t", 0): 2, ("t", 2): 0}
        lm.shutdown()
    finally:
        loop.close()


def test_offsets_back_to_what_is_on_disk_still_replace_a_queued_write(tmp_path: Path) -> None:
    """Offsets A on disk, a background write of B queued, then A again (a truncation): A is
    written (it differs from the last write asked for), and B, older, is dropped."""
    loop = asyncio.new_event_loop()
    try:
        lm = started(tmp_path, loop, partitions=1)
        lm.checkpoint_log_start_offsets()  # A: log start 0, on disk
        assert lm._flusher is not None
        gate = threading.Event()
        lm._flusher.submit(gate.wait, 5)
        lg = lm.get_log("t", 0)
        lg.append_as_leader(_batch(), 0, 0)
        lg.update_high_watermark(lg.log_end_offset)
        assert lg.maybe_increment_log_start_offset(1)
        lm.checkpoint_log_start_offsets(background=True)  # B: log start 1, queued behind the gate
        lg.truncate_fully_and_start_at(0)  # back to A
        lm.checkpoint_log_start_offsets()  # must not be skipped as "A is on disk"
        gate.set()
        lm._flusher.submit(lambda: None).result(5)
        assert read_offsets(tmp_path / LOG_START_OFFSET_CHECKPOINT) == {("t", 0): 0}
        lm.shutdown()
    finally:
        loop.close()


def _batch() -> bytes:
    from proto.record_batch import build_batch, encode_records

    return build_batch(encode_records([b"a", b"b"]), record_count=2, base_timestamp=0, max_timestamp=0)
