"""The log cleaner's shell: threads, files, throttle, swap and checkpoint (Kafka's LogCleaner and
LogCleanerManager); the cleaning itself is broker/log/cleaner.py.

Theory of operation
-------------------
Threads. ``log.cleaner.threads`` threads (started by the LogManager when the broker hands it its
event loop, ``start``) each loop: choose a log, clean it, or sleep ``log.cleaner.backoff.ms`` when
none is worth it. The logs belong to the event loop, so a thread touches a ``Log`` only through
calls it schedules on the loop and waits for (``_call_on_loop``):

- *choosing* (``_grab_filthiest``, on the loop): every compacted log's cleanable range and dirty
  ratio from in-memory segment sizes and timestamps; the dirtiest not already being cleaned is marked
  in progress, and its rolled segments below the first uncleanable offset are captured as
  ``FileSegmentSource``: base offset, size, modification time and a duplicate of the file descriptor
  (what the thread reads, valid whatever happens to the segment meanwhile);
- *cleaning* (the thread): the offset map and the rewrite of each group of segments into
  ``<base>.log.cleaned`` (and ``.index.cleaned``, ``.timeindex.cleaned``), written in
  ``log.cleaner.io.buffer.size`` pieces, fsynced, given the newest source's modification time;
  reads and writes go through one ``Throttler`` shared by the threads
  (``log.cleaner.io.max.bytes.per.second``). Memory: the offset map (bounded by
  ``log.cleaner.dedupe.buffer.size`` / threads) plus an I/O buffer and the batch being rewritten;
- *swapping* (``_swap``, on the loop): only if the segments the group was cleaned from are still the
  log's, at the same place and of the same size (retention, a truncation, a deletion of the log or
  of the topic may have removed or changed them meanwhile; then the cleaned files are deleted and
  this clean ends), ``Log.replace_segments`` renames the cleaned files to ``.swap`` and fsyncs the
  directory (the commit point), deletes the old segments, renames the swap files to their final
  names and loads the new segment. Renames and two directory fsyncs: no data is copied on the loop.

Crash safety (Kafka's rules, ``Log._complete_swaps`` at load): ``.cleaned`` files are deleted (the
clean had not committed); a ``.swap`` completes the swap (the old segments it covers are deleted and
it takes its final name). Either way the log is a valid log: the old segments or the cleaned one.

Checkpoint: ``cleaner-offset-checkpoint`` in each log directory (Kafka's format, checkpoint.py) holds
each compacted log's first dirty offset; it is advanced after every group of a clean has been swapped
and written by the cleaner thread (off the loop). A clean that stops half way leaves it where it was:
the next clean starts from there again (the groups already swapped are just cleaned again).

A log that fails to clean with an unexpected error is marked uncleanable (Kafka's
``markPartitionUncleanable``) and skipped until it is deleted or the broker restarts.

Metrics (attributes): bytes read and written, cleans, time of the last clean, the largest dirty
ratio and compaction delay seen at the last choice (Kafka's max-dirty-percent and
max-compaction-delay-secs), and the partitions marked uncleanable.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeVar

from broker.log.checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    CorruptCheckpointError,
    read_offsets,
    write_offsets,
)
from broker.log.cleaner import (
    CleanAbortedError,
    CleanStats,
    LogToClean,
    OffsetMap,
    SegmentSummary,
    build_offset_map,
    clean_into,
    cleanable_range,
    delete_horizon_ms,
    group_segments_by_size,
    last_batches_of_producers,
)
from broker.log.config import CleanerConfig, LogConfig
from broker.log.index import OffsetIndex, TimeIndex
from broker.log.log import CLEANED_SUFFIX, Log
from broker.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment, segment_file_name
from proto.record_batch import BatchHeader

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
T = TypeVar("T")

NO_THROTTLE: Final = 1e300
_LOOP_POLL_S: Final = 0.1


def wall_ms() -> int:
    return int(time.time() * 1000)


class Throttler:
    """At most ``rate`` bytes a second, measured over windows of ``check_interval_s`` (Kafka's
    Throttler); shared by the cleaner threads."""

    def __init__(self, rate: float, check_interval_s: float = 0.3,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.rate = rate
        self.check_interval_s = check_interval_s
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._period_start = clock()
        self._observed = 0.0
        self.throttled_s = 0.0

    def maybe_throttle(self, n: int) -> None:
        if self.rate >= NO_THROTTLE:
            return
        with self._lock:
            self._observed += n
            now = self._clock()
            elapsed = now - self._period_start
            if elapsed < self.check_interval_s:
                return
            wait = self._observed / self.rate - elapsed
            if wait > 0:
                self.throttled_s += wait
                self._sleep(wait)
            self._period_start = self._clock()
            self._observed = 0.0


@dataclass
class FileSegmentSource:
    """A rolled segment captured on the loop: its own descriptor, so reads stay valid."""

    base_offset: int
    size: int
    last_modified_ms: int
    next_base: int  # where its offsets end: the next segment's base
    fd: int
    segment: LogSegment
    index_bytes: int
    time_index_bytes: int

    def read(self, position: int, size: int) -> bytes:
        return os.pread(self.fd, size, position)

    def summary(self) -> SegmentSummary:
        return SegmentSummary(self.base_offset, self.size, -1, -1, self.index_bytes, self.time_index_bytes)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class CleanedSegmentWriter:
    """``<base>.log.cleaned`` and its indexes, written as LogSegment.append would index them."""

    def __init__(self, directory: Path, base_offset: int, config: LogConfig, buffer_size: int) -> None:
        self.base_offset = base_offset
        self.paths = [directory / (segment_file_name(base_offset, suffix) + CLEANED_SUFFIX)
                      for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)]
        for p in self.paths:  # what an earlier, aborted clean may have left
            p.unlink(missing_ok=True)
        self._fd = os.open(self.paths[0], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.index = OffsetIndex(self.paths[1], base_offset, config.max_index_entries)
        self.time_index = TimeIndex(self.paths[2], base_offset, config.max_index_entries)
        self._interval = config.index_interval_bytes
        self._buffer_size = buffer_size
        self._buffer = bytearray()
        self.size = 0
        self._since_index = 0
        self.max_timestamp = -1
        self._offset_of_max = base_offset
        self.written: Callable[[int], None] | None = None

    def append(self, header: BatchHeader, batch: bytes) -> None:
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp, self._offset_of_max = header.max_timestamp, header.last_offset
        if self._since_index > self._interval or self.size == 0:
            self.index.append(header.base_offset, self.size)
            self.time_index.maybe_append(self.max_timestamp, self._offset_of_max)
            self._since_index = 0
        self._buffer += batch
        self.size += len(batch)
        self._since_index += len(batch)
        if len(self._buffer) >= self._buffer_size:
            self._write_buffer()

    def _write_buffer(self) -> None:
        view = memoryview(self._buffer)
        while view:
            view = view[os.write(self._fd, view):]
        view.release()
        self._buffer.clear()

    def finish(self, last_modified_ms: int) -> None:
        """Everything durable; the data file's modification time that of the newest source (Kafka
        gives a cleaned segment its sources' last modification: the delete horizon is measured on it)."""
        self._write_buffer()
        if self.size:
            self.time_index.maybe_append(self.max_timestamp, self._offset_of_max)
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1
        self.index.flush()
        self.time_index.flush()
        ns = last_modified_ms * 1_000_000
        os.utime(self.paths[0], ns=(ns, ns))

    def abort(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        for p in self.paths:
            p.unlink(missing_ok=True)


@dataclass
class CleanTask:
    key: TopicPartition
    log: Log
    log_dir: Path
    config: LogConfig
    to_clean: LogToClean
    sources: list[FileSegmentSource]

    def close(self) -> None:
        for s in self.sources:
            s.close()


@dataclass
class _LoopCall:
    fn: Callable[[], object]
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    started: bool = False
    cancelled: bool = False
    result: object = None
    error: BaseException | None = None

    def run(self) -> None:
        with self.lock:
            if self.cancelled:
                return
            self.started = True
        try:
            self.result = self.fn()
        except BaseException as e:
            self.error = e
        finally:
            self.done.set()

    def cancel(self) -> bool:
        with self.lock:
            if self.started:
                return False
            self.cancelled = True
            return True


class LogCleaner:
    """The cleaner threads of one broker (see the module docstring)."""

    def __init__(self, config: CleanerConfig, log_dirs: Sequence[Path],
                 logs: Callable[[], Iterable[tuple[TopicPartition, Log, Path]]],
                 get_log: Callable[[TopicPartition], Log | None], clock: Callable[[], int] = wall_ms) -> None:
        self.config = config
        self._logs = logs
        self._get_log = get_log
        self._clock = clock
        self._lock = threading.Lock()
        self._file_lock = threading.Lock()
        self._checkpoints: dict[Path, dict[TopicPartition, int]] = {}
        for d in log_dirs:
            try:
                self._checkpoints[Path(d)] = read_offsets(Path(d) / CLEANER_OFFSET_CHECKPOINT)
            except CorruptCheckpointError as e:
                logger.warning("ignoring unreadable cleaner checkpoint (logs are cleaned from their start): %s", e)
                self._checkpoints[Path(d)] = {}
        self._in_progress: set[TopicPartition] = set()
        self.uncleanable: set[TopicPartition] = set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.throttler = Throttler(config.io_max_bytes_per_second)
        # Metrics.
        self.bytes_read_total = 0
        self.bytes_written_total = 0
        self.cleans_total = 0
        self.aborted_total = 0
        self.last_clean_ms = 0.0
        self.last_stats: CleanStats | None = None
        self.max_dirty_ratio = 0.0
        self.max_compaction_delay_ms = 0

    # ------------------------------------------------------------ lifecycle

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the threads (none when log.cleaner.enable is false or threads is 0)."""
        if self._threads or not self.config.enable or self.config.threads <= 0:
            return
        self._loop = loop
        for i in range(self.config.threads):
            t = threading.Thread(target=self._run, name=f"log-cleaner-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def shutdown(self, wait: bool = True) -> None:
        """Stop the threads (a clean in progress is abandoned: its cleaned files are deleted) and write
        the checkpoints."""
        self._stop.set()
        if wait:
            for t in self._threads:
                t.join(timeout=30)
            self.write_checkpoints()
        self._threads.clear()

    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    # ------------------------------------------------------------ checkpoints

    def checkpoint_of(self, log_dir: Path, tp: TopicPartition) -> int | None:
        with self._lock:
            return self._checkpoints.get(Path(log_dir), {}).get(tp)

    def forget(self, tp: TopicPartition) -> None:
        """The log was deleted: no checkpoint, and a new log of that name is cleanable again."""
        with self._lock:
            for offsets in self._checkpoints.values():
                offsets.pop(tp, None)
            self.uncleanable.discard(tp)

    def _set_checkpoint(self, log_dir: Path, tp: TopicPartition, offset: int) -> None:
        with self._lock:
            self._checkpoints.setdefault(Path(log_dir), {})[tp] = offset
        self._write_checkpoint(Path(log_dir))

    def _write_checkpoint(self, log_dir: Path) -> None:
        with self._file_lock:
            with self._lock:
                offsets = dict(self._checkpoints.get(log_dir, {}))
            if log_dir.is_dir():
                write_offsets(log_dir / CLEANER_OFFSET_CHECKPOINT, offsets)

    def write_checkpoints(self) -> None:
        for d in list(self._checkpoints):
            try:
                self._write_checkpoint(d)
            except OSError as e:
                logger.error("cannot write the cleaner checkpoint of %s: %r", d, e)

    # ------------------------------------------------------------ the threads

    def _run(self) -> None:
        offset_map = OffsetMap(self.config.dedupe_buffer_size // max(1, self.config.threads),
                               self.config.io_buffer_load_factor)
        while not self._stop.is_set():
            try:
                worked = self.clean_one(offset_map)
            except CleanAbortedError:
                worked = False
            except Exception:
                logger.exception("log cleaner failed")
                worked = False
            if not worked:
                self._stop.wait(self.config.backoff_ms / 1000.0)

    def clean_one(self, offset_map: OffsetMap | None = None) -> bool:
        """Choose the dirtiest log and clean it; False when none needs it. Called by the threads, or
        directly (tests, tools: then everything runs in the caller's thread)."""
        if offset_map is None:
            offset_map = OffsetMap(self.config.dedupe_buffer_size, self.config.io_buffer_load_factor)
        task = self._call_on_loop(self._grab_filthiest)
        if task is None:
            return False
        try:
            self._clean(task, offset_map)
        except CleanAbortedError:
            self.aborted_total += 1
            raise
        except Exception:
            logger.exception("%s-%d: cleaning failed; the log is marked uncleanable", *task.key)
            with self._lock:
                self.uncleanable.add(task.key)
            raise
        finally:
            task.close()
            with self._lock:
                self._in_progress.discard(task.key)
        return True

    def _call_on_loop(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the event loop that owns the logs and wait for it (directly without a loop).
        On shutdown a call not yet started is withdrawn (CleanAbortedError)."""
        loop = self._loop
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop:
            return fn()
        call = _LoopCall(fn)
        try:
            loop.call_soon_threadsafe(call.run)
        except RuntimeError:  # the loop is closed
            raise CleanAbortedError("the event loop is gone") from None
        while not call.done.wait(_LOOP_POLL_S):
            if self._stop.is_set() and call.cancel():
                raise CleanAbortedError("shutting down")
        if call.error is not None:
            raise call.error
        return call.result  # type: ignore[return-value]

    def _progress(self, n: int) -> None:
        if self._stop.is_set():
            raise CleanAbortedError("shutting down")
        self.throttler.maybe_throttle(n)

    # ------------------------------------------------------------ on the loop: choose, swap

    def _grab_filthiest(self) -> CleanTask | None:
        now = self._clock()
        best: tuple[LogToClean, Log, Path] | None = None
        max_ratio = 0.0
        max_delay = 0
        with self._lock:
            busy = self._in_progress | self.uncleanable
        for tp, log, log_dir in self._logs():
            cfg = log.config
            if not cfg.compact:
                continue
            segments = log.segments
            if len(segments) < 2:
                continue
            summaries = [SegmentSummary(s.base_offset, s.size, s.max_timestamp,
                                        -1 if s.rolling_base_ms is None else s.rolling_base_ms)
                         for s in segments]
            ltc = cleanable_range(tp, summaries, log_start_offset=log.log_start_offset,
                                  high_watermark=log.high_watermark, checkpoint=self.checkpoint_of(log_dir, tp),
                                  now_ms=now, min_compaction_lag_ms=cfg.min_compaction_lag_ms,
                                  max_compaction_lag_ms=cfg.max_compaction_lag_ms,
                                  min_cleanable_ratio=cfg.min_cleanable_dirty_ratio)
            max_ratio = max(max_ratio, ltc.cleanable_ratio)
            max_delay = max(max_delay, ltc.max_compaction_delay_ms)
            if tp in busy or not ltc.should_clean:
                continue
            if best is None or (ltc.cleanable_ratio, ltc.max_compaction_delay_ms) > \
                    (best[0].cleanable_ratio, best[0].max_compaction_delay_ms):
                best = (ltc, log, log_dir)
        self.max_dirty_ratio, self.max_compaction_delay_ms = max_ratio, max_delay
        if best is None:
            return None
        ltc, log, log_dir = best
        segments = log.segments
        sources: list[FileSegmentSource] = []
        try:
            for i, seg in enumerate(segments[:-1]):
                if seg.base_offset >= ltc.first_uncleanable_offset:
                    break
                fd = seg.dup_fd()
                sources.append(FileSegmentSource(
                    seg.base_offset, seg.size, int(os.fstat(fd).st_mtime * 1000), segments[i + 1].base_offset, fd,
                    seg, len(seg.index) * 8, len(seg.time_index) * 12))
        except OSError:
            for s in sources:
                s.close()
            raise
        with self._lock:
            self._in_progress.add(ltc.key)
        return CleanTask(ltc.key, log, log_dir, log.config, ltc, sources)

    def _swap(self, task: CleanTask, group: Sequence[FileSegmentSource], base_offset: int) -> bool:
        """On the loop: put the cleaned segment in place of ``group`` if that is still the log's."""
        if self._stop.is_set() or self._get_log(task.key) is not task.log:
            return False
        segments = task.log.segments
        old = [s.segment for s in group]
        at = next((i for i, s in enumerate(segments) if s is old[0]), None)
        if at is None or at + len(old) >= len(segments):
            return False
        if any(segments[at + j] is not s.segment or s.segment.size != s.size for j, s in enumerate(group)):
            return False
        task.log.replace_segments(old, base_offset, self._clock())
        return True

    # ------------------------------------------------------------ in the thread: clean

    def _clean(self, task: CleanTask, offset_map: OffsetMap) -> None:
        started = time.monotonic()
        cfg = task.config
        ltc = task.to_clean
        io_buffer = self.config.io_buffer_size
        stats = CleanStats()
        first_dirty, uncleanable = ltc.first_dirty_offset, ltc.first_uncleanable_offset
        dirty = [s for s in task.sources if s.next_base > first_dirty and s.base_offset < uncleanable]
        build_offset_map(dirty, first_dirty, uncleanable, offset_map, io_buffer, self._progress)
        stats.map_records = len(offset_map)
        stats.buffer_utilization = offset_map.utilization
        if offset_map.latest_offset < first_dirty:  # no batch in the dirty section at all
            self._set_checkpoint(task.log_dir, task.key, uncleanable)
            return
        end_offset = offset_map.latest_offset + 1
        horizon = delete_horizon_ms([s.last_modified_ms for s in task.sources if s.base_offset < first_dirty],
                                    cfg.delete_retention_ms)
        to_clean = [s for s in task.sources if s.base_offset < end_offset]
        producers = last_batches_of_producers(to_clean, io_buffer, self._progress)
        groups = group_segments_by_size([s.summary() for s in to_clean], [s.next_base for s in to_clean],
                                        cfg.segment_bytes, cfg.segment_index_bytes)
        for indexes in groups:
            group = [to_clean[i] for i in indexes]
            base = group[0].base_offset
            writer = CleanedSegmentWriter(task.log.dir, base, cfg, io_buffer)
            try:
                clean_into(group, writer, offset_map, delete_horizon=horizon, producer_last_offsets=producers,
                           io_buffer_size=io_buffer, stats=stats, progress=self._progress)
                writer.finish(max(s.last_modified_ms for s in group))
                swapped = self._call_on_loop(functools.partial(self._swap, task, group, base))
            except BaseException:
                writer.abort()
                raise
            if not swapped:
                writer.abort()
                raise CleanAbortedError(f"{task.key[0]}-{task.key[1]} changed while it was being cleaned")
        self._set_checkpoint(task.log_dir, task.key, end_offset)
        elapsed = time.monotonic() - started
        with self._lock:
            self.cleans_total += 1
            self.bytes_read_total += stats.bytes_read
            self.bytes_written_total += stats.bytes_written
            self.last_clean_ms = elapsed * 1000
            self.last_stats = stats
        logger.info("%s-%d cleaned up to offset %d: %d groups, %.1f MB read, %.1f MB written (%.0f%% of it), "
                    "%d records kept of %d, map of %d keys (%.0f%% full), %.2f s", task.key[0], task.key[1],
                    end_offset, len(groups), stats.bytes_read / 1e6, stats.bytes_written / 1e6,
                    100.0 * stats.bytes_written / max(1, stats.bytes_read), stats.records_written,
                    stats.records_read, stats.map_records, 100 * stats.buffer_utilization, elapsed)
