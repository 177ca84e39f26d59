"""All logs of one broker across its log directories (Kafka's LogManager).

Theory of operation: each log directory holds one sub-directory per replica
(``topic-partition``), a lock file (one broker per directory), and three
checkpoint files - recovery points, log start offsets and high watermarks -
keyed by topic-partition. A ``.kafka_cleanshutdown`` marker written last at
shutdown and removed at start-up tells the next start whether the logs can be
trusted as they are or must be recovered from their recovery points.

Periodic duties (retention, flush.ms, checkpoints) are methods taking
``now_ms``; the broker's scheduler calls them. Log compaction runs on the
manager's own cleaner threads (broker/log/log_cleaner.py, ``self.cleaner``,
configured by ``default_config.cleaner``): created at start-up, started when the
broker hands over its event loop (``defer_roll_flushes``), stopped first at
shutdown.

Nothing on disk may stop a broker from starting (SPEC S13.5): an unreadable
checkpoint is treated as absent (the logs are then recovered from their start),
a log whose loading fails in a way recovery did not foresee is moved aside as
``<dir>.<id>-quarantined`` (kept for inspection, never loaded again) and the
replica starts empty, to be refilled by replication. Every directory built from
a topic name is checked to lie directly inside its log directory (S13.3).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from operator import attrgetter
from pathlib import Path
from typing import IO

from broker.log.checkpoint import (
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    CorruptCheckpointError,
    can_sync_filesystems,
    fsync_dir,
    read_offsets,
    sync_filesystem,
    write_atomically,
    write_offsets,
)
from broker.log.config import LONG_MAX, LogConfig
from broker.log.log import Log, OffsetsClock, RolledSegment, parse_topic_partition
from broker.log.log_cleaner import LogCleaner
from proto.errors import InvalidTopicError, KafkaStorageError
from proto.names import TopicPartition, topic_name_error, validate_partition

logger = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
DELETE_SUFFIX = "-delete"
QUARANTINE_SUFFIX = "-quarantined"
# Errors of the disk itself (not of what is on it): loading stops, as Kafka takes the directory offline.
DISK_ERRNOS = frozenset({errno.EIO, errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.ENOMEM})



class LogDirLockedError(KafkaStorageError):
    """Another process holds this log directory."""


class LogManager:
    def __init__(self, log_dirs: list[Path], default_config: LogConfig,
                 config_for_topic: Callable[[str], LogConfig] | None = None) -> None:
        if not log_dirs:
            raise KafkaStorageError("at least one log directory is required")
        self.log_dirs = [Path(d) for d in log_dirs]
        self._resolved_dirs: dict[Path, Path] = {}
        self.default_config = default_config
        self._config_for_topic = config_for_topic or (lambda _topic: default_config)
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self._locks: list[IO[bytes]] = []
        self.had_clean_shutdown: dict[Path, bool] = {}
        # Logs moved aside at start-up because they could not be loaded (minikafka_log_quarantined_total).
        self.quarantined = 0
        # Rolled segments are fsynced here, in roll order, once the broker calls defer_roll_flushes.
        self._flusher: ThreadPoolExecutor | None = None
        # Checkpoint writes (see _checkpoint): serialised, and numbered so that an older one is dropped.
        self._checkpoint_lock = threading.Lock()
        self._checkpoint_seq = 0
        self._checkpoint_written: dict[str, int] = {}
        # What each checkpoint file was last given to write (dropped if that write fails): an
        # unchanged one is not written again (an idle broker rewrote every partition's high
        # watermark every 5 s: most of its idle CPU at 10,000 partitions, issue 29).
        self._checkpoint_content: dict[str, list[tuple[Path, dict[TopicPartition, int]]]] = {}
        # Every log's offsets clock (see OffsetsClock), and its reading at each checkpoint's last
        # snapshot: unmoved, the snapshot would be the same, so no log is looked at.
        self._offsets_clock = OffsetsClock()
        self._checkpoint_clock: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        # Log compaction (created at start-up, once the directories are locked).
        self.cleaner: LogCleaner | None = None

    # ------------------------------------------------------------ start-up

    def startup(self, now_ms: int) -> None:
        """Lock the directories and load (recovering where needed) every log in them."""
        for d in self.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
            self._lock(d)
        for d in self.log_dirs:
            marker = d / CLEAN_SHUTDOWN_FILE
            clean = marker.exists()
            self.had_clean_shutdown[d] = clean
            recovery = _read_offsets_or_empty(d / RECOVERY_POINT_CHECKPOINT)
            if recovery is None:
                clean = False  # without recovery points, every log is recovered from its start
                recovery = {}
            starts = _read_offsets_or_empty(d / LOG_START_OFFSET_CHECKPOINT) or {}
            hws = _read_offsets_or_empty(d / HIGH_WATERMARK_CHECKPOINT) or {}
            for entry in sorted(os.scandir(d), key=lambda e: e.name):
                if not entry.is_dir(follow_symlinks=False):
                    continue
                if entry.name.endswith(DELETE_SUFFIX):
                    shutil.rmtree(entry.path, ignore_errors=True)
                    continue
                try:
                    tp = parse_topic_partition(entry.name)
                except KafkaStorageError:
                    continue
                if topic_name_error(tp[0]) is not None:
                    logger.warning("ignoring %s: not a legal topic name", entry.path)
                    continue
                if tp in self._logs:
                    self._quarantine(Path(entry.path), f"{tp[0]}-{tp[1]} also exists in {self._dir_of[tp]}")
                    continue
                try:
                    log = Log.open(Path(entry.path), tp[0], tp[1], self._config_for_topic(tp[0]), now_ms=now_ms,
                                   recovery_point=recovery.get(tp, 0), log_start_offset=starts.get(tp, 0),
                                   high_watermark=hws.get(tp, 0), clean_shutdown=clean)
                except OSError as e:
                    if e.errno in DISK_ERRNOS:
                        raise  # the disk, not the data: Kafka takes the directory offline; we stop
                    self._quarantine(Path(entry.path), f"cannot be loaded: {e!r}")
                    continue
                except Exception as e:
                    self._quarantine(Path(entry.path), f"cannot be loaded: {e!r}")
                    continue
                self._register(tp, log, d)
            # From here on a crash must be detected: the marker goes until the next clean stop.
            marker.unlink(missing_ok=True)
        self.checkpoint_recovery_points()
        self.cleaner = LogCleaner(self.default_config.cleaner, self.log_dirs, self._compacted_logs,
                                  lambda tp: self.get_log(*tp))

    def defer_roll_flushes(self, loop: asyncio.AbstractEventLoop) -> None:
        """From now on a rolled segment is fsynced on one flusher thread, not on ``loop`` (which
        owns the logs and gets the results back): Kafka's flush-log task at roll."""
        self._loop = loop
        self._flusher = ThreadPoolExecutor(1, thread_name_prefix="log-flusher")
        for log in self._logs.values():
            self._defer(log)
        if self.cleaner is not None:
            self.cleaner.start(loop)  # the cleaner's swaps run on ``loop``, which owns the logs

    def _compacted_logs(self) -> list[tuple[TopicPartition, Log, Path]]:
        """The logs the cleaner may clean (cleanup.policy compact), with their directories: the
        cleaner looks at each of them on every pass (log.cleaner.backoff.ms), so the others are
        left out here (a tuple per log of every partition was most of its pass at 10,000)."""
        return [(tp, log, self._dir_of[tp]) for tp, log in list(self._logs.items()) if log.config.compact]

    def logs_by_dir(self) -> dict[Path, list[tuple[TopicPartition, Log]]]:
        """Every log directory (those without logs too), in configured order, with its logs
        (DescribeLogDirs)."""
        out: dict[Path, list[tuple[TopicPartition, Log]]] = {d: [] for d in self.log_dirs}
        for tp, log in sorted(self._logs.items()):
            out.setdefault(self._dir_of[tp], []).append((tp, log))
        return out

    def _defer(self, log: Log) -> None:
        if self._flusher is not None:
            log.defer_roll_flush = True
            log.on_roll = self._on_roll

    def _on_roll(self, log: Log) -> None:
        assert self._flusher is not None and self._loop is not None
        loop = self._loop
        for rolled in log.take_rolled_unflushed():
            def done(f: Future[None], log: Log = log, rolled: RolledSegment = rolled) -> None:
                ok = f.exception() is None
                if not ok:
                    logger.error("%s-%d: fsync of the segment rolled at %d failed: %r; the recovery point "
                                 "stays", log.topic, log.partition, rolled.up_to, f.exception())
                with contextlib.suppress(RuntimeError):  # the loop is gone: shutdown flushed everything
                    loop.call_soon_threadsafe(log.on_rolled_flushed, rolled, ok)
            self._flusher.submit(_fsync_and_close, rolled.fd).add_done_callback(done)

    def _quarantine(self, path: Path, reason: str) -> None:
        doomed = path.with_name(f"{path.name}.{uuid.uuid4().hex}{QUARANTINE_SUFFIX}")
        os.rename(path, doomed)
        fsync_dir(path.parent)
        self.quarantined += 1
        logger.error("log %s %s: moved aside to %s; the replica starts empty", path.name, reason, doomed.name)

    def _replica_dir(self, d: Path, topic: str, partition: int) -> Path:
        """``<d>/<topic>-<partition>``, refused unless it lies directly inside ``d`` (S13.3)."""
        reason = topic_name_error(topic)
        if reason is not None:
            raise InvalidTopicError(reason)
        validate_partition(partition)
        path = d / f"{topic}-{partition}"
        # A legal name is one path component, never "." or "..": only a symbolic link there can
        # lead elsewhere. One lstat, not a resolve of every component of the path (a tenth of a
        # broker's time creating thousands of partitions, issue 29).
        if os.path.islink(path):
            resolved = self._resolved_dirs.get(d)
            if resolved is None:
                resolved = self._resolved_dirs[d] = d.resolve()
            if path.resolve().parent != resolved:
                raise InvalidTopicError(f"{topic}-{partition} does not resolve inside {d}")
        return path

    def _lock(self, d: Path) -> None:
        f = open(d / LOCK_FILE, "a+b")  # noqa: SIM115 - held for the life of the manager
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise LogDirLockedError(f"log directory {d} is in use by another process") from None
        self._locks.append(f)

    # ------------------------------------------------------------ logs

    def __iter__(self) -> Iterator[tuple[TopicPartition, Log]]:
        return iter(list(self._logs.items()))

    def __len__(self) -> int:
        return len(self._logs)

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def open_new_logs(self, specs: Sequence[tuple[str, int, LogConfig]], now_ms: int,
                      threads: int = 8) -> list[tuple[TopicPartition, Log]]:
        """Open (create) the logs of new partitions, several at a time, for ``adopt_logs``: the
        caller runs this in a thread, so that the event loop does not spend a new partition's
        mkdir (~0.3 ms here), file creations and listing (~1 ms in all: 10,000 partitions held a
        broker's loop for seconds while they were created, issue 29); the disk serves several at
        once. Nothing here is shared with the
        loop: the logs are not registered until the loop adopts them. Only with one log
        directory (with several, ``get_or_create_log`` chooses one at creation time). A log whose
        partition is never created after all (a LeaderAndIsr refused meanwhile) leaves an empty
        log, as a crash right after its creation would."""
        if len(self.log_dirs) != 1 or not specs:
            return []
        d = self.log_dirs[0]
        todo = [(t, p, cfg) for t, p, cfg in specs if (t, p) not in self._logs]

        def open_all(chunk: Sequence[tuple[str, int, LogConfig]]) -> list[tuple[TopicPartition, Log]]:
            opened = []
            for t, p, cfg in chunk:
                try:
                    opened.append(((t, p), Log.open(self._replica_dir(d, t, p), t, p, cfg, now_ms=now_ms)))
                except Exception as e:  # left to get_or_create_log on the loop, which reports it as always
                    logger.debug("%s-%d: not opened ahead: %r", t, p, e)
            return opened

        if len(todo) < 2 * threads:
            return open_all(todo)
        with ThreadPoolExecutor(threads, thread_name_prefix="log-open") as pool:
            return [x for opened in pool.map(open_all, [todo[i::threads] for i in range(threads)]) for x in opened]

    def adopt_logs(self, opened: Sequence[tuple[TopicPartition, Log]],
                   config_for_topic: Callable[[str], LogConfig]) -> None:
        """Register logs made by ``open_new_logs`` (on the loop's thread), each with its topic's
        config as ``config_for_topic`` gives it now (it may have changed while they were opened).
        One that exists already (made meanwhile by ``get_or_create_log``) is kept and the new
        copy closed; one whose directory was removed meanwhile (a StopReplica that deleted it) is
        closed, not adopted."""
        for tp, log in opened:
            if tp in self._logs or not log.dir.is_dir():  # made meanwhile, or removed meanwhile
                log.close()
                continue
            _set_config(log, config_for_topic(tp[0]))
            log.parent_dir_unsynced = True  # fsynced with its first flush (see Log.parent_dir_unsynced)
            self._register(tp, log, self.log_dirs[0])

    def get_or_create_log(self, topic: str, partition: int, now_ms: int,
                          config: LogConfig | None = None) -> Log:
        tp = (topic, partition)
        log = self._logs.get(tp)
        if log is not None:
            return log
        # The directory holding the fewest logs gets the new one, as Kafka does (counted only when
        # there is a choice: a walk over every log per new log made creating 10,000 quadratic).
        d = self.log_dirs[0]
        if len(self.log_dirs) > 1:
            counts = {d: 0 for d in self.log_dirs}
            for x in self._dir_of.values():
                counts[x] += 1
            d = min(self.log_dirs, key=lambda x: counts[x])
        log = Log.open(self._replica_dir(d, topic, partition), topic, partition,
                       config or self._config_for_topic(topic), now_ms=now_ms)
        log.parent_dir_unsynced = True  # fsynced with its first flush (see Log.parent_dir_unsynced)
        self._register(tp, log, d)
        return log

    def _register(self, tp: TopicPartition, log: Log, d: Path) -> None:
        """``log`` is this manager's, in directory ``d``: it shares the manager's offsets clock."""
        self._defer(log)
        log.offsets_clock = self._offsets_clock
        self._offsets_clock.ticks += 1  # a log more: the checkpoints change
        self._logs[tp] = log
        self._dir_of[tp] = d

    def delete_log(self, topic: str, partition: int) -> bool:
        """Remove a replica's log: renamed first, so a crash mid-delete finishes at next start.

        Also removes a directory of that name that is not loaded (one that failed to load, or was
        left by a crash), so StopReplica(delete) and DeleteTopics always leave nothing behind."""
        tp = (topic, partition)
        log = self._logs.pop(tp, None)
        self._offsets_clock.ticks += 1  # a log less: the checkpoints change
        if self.cleaner is not None:
            self.cleaner.forget(tp)
        dirs = [self._dir_of.pop(tp)] if log is not None else list(self.log_dirs)
        if log is not None:
            log.close()
        removed = False
        for d in dirs:
            path = self._replica_dir(d, topic, partition)
            if not path.is_dir() or path.is_symlink():
                continue
            doomed = d / f"{topic}-{partition}.{uuid.uuid4().hex}{DELETE_SUFFIX}"
            os.rename(path, doomed)
            fsync_dir(d)
            shutil.rmtree(doomed, ignore_errors=True)
            removed = True
        return removed

    def update_config(self, topic: str, config: LogConfig) -> None:
        for (t, _p), log in self._logs.items():
            if t == topic:
                _set_config(log, config)

    # ------------------------------------------------------------ periodic duties

    def cleanup_logs(self, now_ms: int) -> int:
        """Retention over every log; returns the number of segments deleted."""
        return sum(log.delete_old_segments(now_ms) for log in self._logs.values())

    def flush_dirty_logs(self, now_ms: int) -> None:
        """flush.ms, for the logs that set one: the default (Kafka's, Long.MAX_VALUE) never flushes
        by time, and a call per log was most of this walk (every 3 s, over every partition)."""
        for log in self._logs.values():
            if log.config.flush_ms < LONG_MAX:
                log.maybe_flush(now_ms)

    def _checkpoint(self, name: str, value: Callable[[Log], int], background: bool = False,
                    force: bool = False) -> None:
        """Write checkpoint ``name`` of every directory: the offsets are read here (the logs belong
        to the caller's thread, the loop), the file written here or, ``background``, on the
        flusher thread. At 10,000 partitions a write (sort, format, write, fsync) is 5 ms on a
        quiet disk and far more on a busy one, every 5 s for the high watermarks: off the loop
        (issue 29). Writes of one file are serialised, and one older than what is on disk is
        dropped, so a periodic write that finishes late never replaces a newer one (a stale log
        start offset would bring deleted records back after a restart). Unless ``force`` (shutdown),
        a checkpoint whose offsets did not change is not written again."""
        ticks = self._offsets_clock.ticks
        with self._checkpoint_lock:
            if self._checkpoint_clock.get(name) == ticks and not force:
                return  # no offset moved, no log came or went since the last snapshot
        if len(self.log_dirs) == 1:  # no directory to look up per log (a Path comparison each)
            snapshot = [(self.log_dirs[0], {tp: value(log) for tp, log in self._logs.items()})]
        else:
            by_dir: dict[Path, dict[TopicPartition, int]] = {d: {} for d in self.log_dirs}
            for tp, log in self._logs.items():
                by_dir[self._dir_of[tp]][tp] = value(log)
            snapshot = list(by_dir.items())
        with self._checkpoint_lock:
            self._checkpoint_clock[name] = ticks
            if self._checkpoint_content.get(name) == snapshot and not force:
                return  # the files hold (or are about to hold) these offsets: nothing to write
            self._checkpoint_content[name] = snapshot
            self._checkpoint_seq += 1
            seq = self._checkpoint_seq

        def write() -> None:
            with self._checkpoint_lock:
                if seq < self._checkpoint_written.get(name, 0):
                    return
                try:
                    for d, offsets in snapshot:
                        write_offsets(d / name, offsets)
                except BaseException:
                    if self._checkpoint_content.get(name) is snapshot:
                        del self._checkpoint_content[name]  # not on disk: the next call writes it again
                        self._checkpoint_clock.pop(name, None)
                    raise
                self._checkpoint_written[name] = seq

        if not background or self._flusher is None:
            write()
            return

        def write_logged() -> None:
            try:
                write()
            except OSError as e:
                logger.warning("cannot write checkpoint %s: %s", name, e)

        self._flusher.submit(write_logged)

    def checkpoint_recovery_points(self, background: bool = False, force: bool = False) -> None:
        self._checkpoint(RECOVERY_POINT_CHECKPOINT, attrgetter("recovery_point"), background, force)

    def checkpoint_log_start_offsets(self, background: bool = False, force: bool = False) -> None:
        self._checkpoint(LOG_START_OFFSET_CHECKPOINT, attrgetter("log_start_offset"), background, force)

    def checkpoint_high_watermarks(self, background: bool = False, force: bool = False) -> None:
        self._checkpoint(HIGH_WATERMARK_CHECKPOINT, attrgetter("high_watermark"), background, force)

    # ------------------------------------------------------------ shutdown

    def shutdown(self) -> None:
        """Flush and close every log, write all checkpoints, then the clean-shutdown marker.

        Where the C library has syncfs (Linux), every log's files are written without fsync and
        each log directory's file system is synced once (below). Elsewhere the logs are flushed by
        SHUTDOWN_FLUSH_THREADS threads (Kafka's per-directory recovery threads): with thousands of
        logs, one fsync after another (segments, leader-epoch checkpoints) took 10-30 s, while an
        fsync releases the GIL and the disk takes them in parallel."""
        if self.cleaner is not None:
            self.cleaner.shutdown()  # first: a clean in progress must not swap segments into closed logs
        logs = list(self._logs.values())
        if logs and can_sync_filesystems():
            # Each log's files written (no fsync), then one syncfs per log directory: ~6 fsyncs a
            # log (segment, indexes, epoch checkpoint and its directory, a new log's parent) took
            # ~12 s for 10,000 logs here, the journal committing them one after another however many
            # threads asked. On one thread: without fsyncs the work holds the GIL, and threads only
            # contend for it. The recovery points move only once the sync returned.
            self._drain_flusher()  # a checkpoint queued before must not run amid the unsynced writes
            for log in logs:
                log.write_out()
                log.close()
            for d in self.log_dirs:
                sync_filesystem(d)
            for log in logs:
                log.on_filesystem_synced()
        elif logs:
            with ThreadPoolExecutor(min(SHUTDOWN_FLUSH_THREADS, len(logs)), thread_name_prefix="log-shutdown") as pool:
                list(pool.map(_flush_and_close, logs))  # re-raises the first failure
        # Written whatever the skips above say: the last word before the clean-shutdown marker
        # (the flushes just ran on several threads, each ticking the offsets clock).
        self.checkpoint_recovery_points(force=True)
        self.checkpoint_log_start_offsets(force=True)
        self.checkpoint_high_watermarks(force=True)
        for d in self.log_dirs:
            write_atomically(d / CLEAN_SHUTDOWN_FILE, b"")
        self._release()
        if self._flusher is not None:
            self._flusher.shutdown(wait=True)  # the logs are flushed: what is left only closes descriptors

    def _drain_flusher(self) -> None:
        """Wait for what the flusher thread was given so far (rolled segments' fsyncs, background
        checkpoints): it runs one task at a time, in order."""
        if self._flusher is not None:
            self._flusher.submit(lambda: None).result()

    def _release(self) -> None:
        for f in self._locks:
            f.close()
        self._locks.clear()

    def abandon(self) -> None:
        """Drop everything without flushing or checkpointing: what a kill -9 leaves behind.

        Used by crash tests and by a broker whose storage failed; the next start recovers.
        """
        if self.cleaner is not None:
            self.cleaner.shutdown(wait=False)
        for log in self._logs.values():
            for seg in log.segments:
                seg.abandon()
        self._logs.clear()
        self._release()
        if self._flusher is not None:
            self._flusher.shutdown(wait=False)


def _fsync_and_close(fd: int) -> None:
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _set_config(log: Log, config: LogConfig) -> None:
    log.config = config
    for seg in log.segments:
        seg.config = config


def _read_offsets_or_empty(path: Path) -> dict[TopicPartition, int] | None:
    """A checkpoint's offsets; None (with a warning) when it exists but cannot be read."""
    try:
        return read_offsets(path)
    except CorruptCheckpointError as e:
        logger.warning("ignoring unreadable checkpoint: %s", e)
        return None


SHUTDOWN_FLUSH_THREADS = 8


def _flush_and_close(log: Log) -> None:
    log.flush()
    log.close()
