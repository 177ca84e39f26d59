"""A clean shutdown makes thousands of logs durable with one syncfs per log directory
(``LogManager.shutdown``, issue 29): every log's pending index entries and epoch checkpoint are
written without fsync, each log directory's file system is synced once, and only then do the
recovery points move and the checkpoints and the clean-shutdown marker get written. ~6 fsyncs a
log took ~12 s for 10,000 logs on the development machine; the sync ~3 s in all."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

import broker.log.checkpoint as checkpoint_mod
import broker.log.manager as manager_mod
from broker.log.checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    can_sync_filesystems,
    read_epoch_entries,
    read_offsets,
    sync_filesystem,
)
from broker.log.config import LogConfig
from broker.log.log import Log
from broker.log.manager import CLEAN_SHUTDOWN_FILE, LogManager
from proto.errors import KafkaStorageError
from proto.record_batch import Record, encode_batch

pytestmark = pytest.mark.skipif(not can_sync_filesystems(), reason="no syncfs in this C library")

LOGS = 30


def _fill(log: Log, epoch: int, batches: int = 2) -> None:
    for _ in range(batches):
        start = log.log_end_offset
        log.append_as_leader(encode_batch([Record(value=f"m{start}".encode(), timestamp=1_000 + start)]), epoch, 0)


def _manager(dirs: list[Path]) -> LogManager:
    m = LogManager(dirs, LogConfig())
    m.startup(now_ms=0)
    return m


def _written(dirs: list[Path]) -> dict[tuple[str, int], tuple[int, list[tuple[int, int]]]]:
    """Every log's LEO and epoch entries, as a fresh manager loads them."""
    m = _manager(dirs)
    try:
        return {tp: (lg.log_end_offset, lg.epoch_cache.pairs()) for tp, lg in m._logs.items()}
    finally:
        m.shutdown()


def test_a_clean_shutdown_syncs_each_log_directory_once_and_fsyncs_no_log_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    m = _manager(dirs)
    for p in range(LOGS):
        lg = m.get_or_create_log("t", p, 0)
        _fill(lg, epoch=0)
        _fill(lg, epoch=p % 3 + 1)  # a new epoch: an epoch checkpoint to write
    expected = {("t", p): m._logs[("t", p)].log_end_offset for p in range(LOGS)}

    fsyncs: list[int] = []
    synced: list[Path] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        fsyncs.append(fd)
        real_fsync(fd)

    def sync(d: Path) -> None:
        synced.append(d)
        sync_filesystem(d)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(manager_mod, "sync_filesystem", sync)
    m.shutdown()
    monkeypatch.undo()

    assert sorted(synced) == sorted(dirs)
    # What is left are the manager's own files, per directory (its offset checkpoints and the
    # clean-shutdown marker, a file and a directory fsync each): none per log (~6 a log before).
    assert len(fsyncs) <= 10 * len(dirs) < LOGS
    for d in dirs:
        assert (d / CLEAN_SHUTDOWN_FILE).exists()
    points: dict[tuple[str, int], int] = {}
    for d in dirs:
        points.update(read_offsets(d / RECOVERY_POINT_CHECKPOINT))
    assert points == expected  # every log durable to its end
    loaded = _written(dirs)
    assert {tp: leo for tp, (leo, _e) in loaded.items()} == expected
    for p in range(LOGS):
        assert loaded[("t", p)][1] == [(0, 0), (p % 3 + 1, 2)]


def test_a_failed_sync_leaves_no_clean_shutdown_and_no_recovery_point_beyond_what_was_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "d1"
    m = _manager([d])
    logs = [m.get_or_create_log("t", p, 0) for p in range(5)]
    for lg in logs:
        _fill(lg, epoch=0)
    m.checkpoint_recovery_points(force=True)
    before = read_offsets(d / RECOVERY_POINT_CHECKPOINT)

    def fail(_d: Path) -> None:
        raise KafkaStorageError("syncfs failed: EIO")

    monkeypatch.setattr(manager_mod, "sync_filesystem", fail)
    with pytest.raises(KafkaStorageError):
        m.shutdown()
    assert [lg.recovery_point for lg in logs] == [0] * 5  # nothing claimed durable
    assert not (d / CLEAN_SHUTDOWN_FILE).exists()
    assert read_offsets(d / RECOVERY_POINT_CHECKPOINT) == before
    monkeypatch.undo()
    m.abandon()
    again = _manager([d])  # recovers (no clean-shutdown marker), every record still there
    try:
        assert not again.had_clean_shutdown[d]
        assert [again._logs[("t", p)].log_end_offset for p in range(5)] == [2] * 5
    finally:
        again.shutdown()


def test_the_epoch_checkpoint_written_at_shutdown_is_the_one_a_clean_start_trusts(tmp_path: Path) -> None:
    d = tmp_path / "d1"
    m = _manager([d])
    lg = m.get_or_create_log("t", 0, 0)
    _fill(lg, epoch=4)
    _fill(lg, epoch=7)
    path = lg.dir / LEADER_EPOCH_CHECKPOINT
    m.shutdown()
    assert read_epoch_entries(path) == [(4, 0), (7, 2)]
    assert not path.with_name(path.name + ".tmp").exists()


def test_a_sandbox_that_refuses_syncfs_gets_sync_instead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    monkeypatch.setattr(checkpoint_mod, "_syncfs", lambda: lambda _fd: errno.ENOSYS)
    monkeypatch.setattr(os, "sync", lambda: synced.append("sync"))
    checkpoint_mod.sync_filesystem(tmp_path)
    assert synced == ["sync"]
    monkeypatch.setattr(checkpoint_mod, "_syncfs", lambda: lambda _fd: errno.EIO)
    with pytest.raises(KafkaStorageError, match="Input/output error"):
        checkpoint_mod.sync_filesystem(tmp_path)
