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


def _batch() -> bytes:
    from proto.record_batch import build_batch, encode_records

    return build_batch(encode_records([b"a", b"b"]), record_count=2, base_timestamp=0, max_timestamp=0)
