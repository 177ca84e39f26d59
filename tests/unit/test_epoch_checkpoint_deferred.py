"""The leader-epoch checkpoint is not written on the append path (KAFKA-15046): SPEC S8.1 with S2.4.

A new epoch only marks the cache dirty; the file is written before the recovery point moves past
the new entries (flush, rolls, close), at once by truncations (KIP-279), and after a crash the
recovered segments' batch headers rebuild whatever the file missed. "Crash" here is what a kill -9
leaves: the Log is dropped without close() or flush(), and reopened with clean_shutdown=False.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import broker.log.log as log_module
from broker.log.checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    read_epoch_entries,
    read_offsets,
    write_epoch_entries,
)
from broker.log.config import LogConfig
from broker.log.epoch_cache import LeaderEpochCache
from broker.log.log import Log
from broker.log.manager import CLEAN_SHUTDOWN_FILE, LogManager
from proto.record_batch import Record, encode_batch


def batch(values: list[str], epoch: int = -1, base_offset: int = 0) -> bytes:
    return encode_batch([Record(value=v.encode(), timestamp=1_000 + i) for i, v in enumerate(values)],
                        partition_leader_epoch=epoch, base_offset=base_offset)


def open_log(path: Path, cfg: LogConfig | None = None, **kw: object) -> Log:
    return Log.open(path / "topic-0", "topic", 0, cfg or LogConfig(), now_ms=0, **kw)  # type: ignore[arg-type]


def fill(log: Log, batches: int, epoch: int, per_batch: int = 3) -> None:
    for _ in range(batches):
        start = log.log_end_offset
        log.append_as_leader(batch([f"m{start + i}" for i in range(per_batch)]), epoch, now_ms=0)


def on_disk(log: Log) -> list[tuple[int, int]]:
    return read_epoch_entries(log.dir / LEADER_EPOCH_CHECKPOINT)


def crash(log: Log) -> None:
    """kill -9: the segment files are closed, nothing flushed, nothing checkpointed."""
    for seg in log.segments:
        seg.abandon()


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[int, int]]]:
    """Every leader-epoch checkpoint write the log makes."""
    seen: list[list[tuple[int, int]]] = []
    real = write_epoch_entries

    def spy(path: Path, entries: list[tuple[int, int]], durable: bool = True) -> None:
        seen.append(list(entries))
        real(path, entries, durable)

    monkeypatch.setattr(log_module, "write_epoch_entries", spy)
    return seen


# ------------------------------------------------------------------ (a) appends do not write the file


def test_appends_starting_new_epochs_do_not_write_the_checkpoint(tmp_path: Path,
                                                                 writes: list[list[tuple[int, int]]]) -> None:
    leader = open_log(tmp_path / "l")
    fill(leader, 2, epoch=0)
    leader.assign_epoch_start_offset(3, leader.log_end_offset)  # S8.2: becoming leader
    fill(leader, 2, epoch=3)
    follower = open_log(tmp_path / "f")
    follower.append_as_follower(leader.read(0, 1 << 20), now_ms=0)  # epochs 0 and 3 in one fetch
    assert leader.epoch_cache.pairs() == follower.epoch_cache.pairs() == [(0, 0), (3, 6)]
    assert writes == []
    assert not (leader.dir / LEADER_EPOCH_CHECKPOINT).exists()
    assert not (follower.dir / LEADER_EPOCH_CHECKPOINT).exists()


# ------------------------------------------------------------------ (b) a crash before any flush


@pytest.mark.parametrize("segment_bytes", [1 << 20, 300])
def test_a_crash_after_unflushed_new_epochs_rebuilds_them_from_the_batches(tmp_path: Path,
                                                                           segment_bytes: int) -> None:
    cfg = LogConfig(segment_bytes=segment_bytes)
    log = open_log(tmp_path, cfg)
    log.defer_roll_flush = True  # as a broker: the rolled segments' fsyncs never land before the crash
    fill(log, 3, epoch=0)
    log.flush()  # recovery point 9, the file has (0, 0)
    assert (log.recovery_point, on_disk(log)) == (9, [(0, 0)])
    log.assign_epoch_start_offset(2, log.log_end_offset)
    fill(log, 2, epoch=2)
    log.assign_epoch_start_offset(5, log.log_end_offset)
    fill(log, 3, epoch=5)
    assert on_disk(log) == [(0, 0)]  # not written: the appends only marked it dirty
    assert log.recovery_point == 9 and (segment_bytes > 300 or len(log.segments) > 2)
    leo = log.log_end_offset
    for rolled in log.take_rolled_unflushed():
        os.close(rolled.fd)
    crash(log)
    log = open_log(tmp_path, cfg, clean_shutdown=False, recovery_point=9)
    assert log.log_end_offset == leo == 24
    assert log.epoch_cache.pairs() == [(0, 0), (2, 9), (5, 15)]
    assert log.end_offset_for_epoch(0) == (0, 9)
    assert log.end_offset_for_epoch(2) == (2, 15)
    assert log.end_offset_for_epoch(3) == (2, 15)  # never seen here: the largest below it
    assert log.end_offset_for_epoch(5) == (5, leo)
    assert on_disk(log) == [(0, 0), (2, 9), (5, 15)]  # start-up writes what it rebuilt


def test_a_crashed_follower_rebuilds_the_epochs_it_copied(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "l")
    fill(leader, 2, epoch=1)
    leader.assign_epoch_start_offset(4, leader.log_end_offset)
    fill(leader, 2, epoch=4)
    follower = open_log(tmp_path / "f")
    follower.append_as_follower(leader.read(0, 1 << 20), now_ms=0)
    crash(follower)
    follower = open_log(tmp_path / "f", clean_shutdown=False, recovery_point=0)
    assert follower.epoch_cache.pairs() == [(1, 0), (4, 6)]
    assert follower.end_offset_for_epoch(1) == (1, 6)


def test_a_crash_after_a_log_manager_kill_rebuilds_the_epochs(tmp_path: Path) -> None:
    m = LogManager([tmp_path], LogConfig(segment_bytes=300))
    m.startup(0)
    log = m.get_or_create_log("t", 0, 0)
    fill(log, 2, epoch=0)
    log.assign_epoch_start_offset(7, log.log_end_offset)
    fill(log, 4, epoch=7)
    m.checkpoint_recovery_points()
    m.abandon()  # kill -9
    m = LogManager([tmp_path], LogConfig(segment_bytes=300))
    m.startup(0)
    log2 = m.get_log("t", 0)
    assert log2 is not None and not any(m.had_clean_shutdown.values())
    assert log2.epoch_cache.pairs() == [(0, 0), (7, 6)] and log2.log_end_offset == 18
    m.shutdown()


def test_recovery_keeps_older_epochs_the_file_already_has(tmp_path: Path) -> None:
    # The file is ahead of the recovery-point checkpoint: the recovered batches of epoch 0
    # (lower than the latest) must not erase the entries after them.
    cfg = LogConfig(segment_bytes=300)
    log = open_log(tmp_path, cfg)
    fill(log, 4, epoch=0)
    log.assign_epoch_start_offset(3, log.log_end_offset)
    fill(log, 4, epoch=3)
    log.flush()
    assert on_disk(log) == [(0, 0), (3, 12)]
    crash(log)
    log = open_log(tmp_path, cfg, clean_shutdown=False, recovery_point=0)
    assert log.epoch_cache.pairs() == [(0, 0), (3, 12)]


def test_a_recovered_batch_of_a_lower_epoch_does_not_erase_later_entries(tmp_path: Path) -> None:
    # A batch of epoch 1 after epoch 3's (what no correct leader writes; an older broker, a bad
    # disk): recovery must not let it replace epoch 3's entry, which starts in a trusted segment.
    cfg = LogConfig(segment_bytes=300)
    log = open_log(tmp_path, cfg)
    fill(log, 1, epoch=0)
    log.assign_epoch_start_offset(3, log.log_end_offset)
    while len(log.segments) < 2:
        fill(log, 1, epoch=3)
    log.flush()
    leo, active = log.log_end_offset, log.segments[-1]
    assert active.base_offset > 3 and on_disk(log) == [(0, 0), (3, 3)]
    crash(log)
    with open(active.log_path, "ab") as f:
        f.write(batch(["stale"], epoch=1, base_offset=leo))
    log = open_log(tmp_path, cfg, clean_shutdown=False, recovery_point=leo)
    assert log.log_end_offset == leo + 1
    assert log.epoch_cache.pairs() == [(0, 0), (3, 3)]


def test_recovery_replaces_a_flushed_entry_a_later_append_replaced(tmp_path: Path) -> None:
    # A leader that wrote nothing in epoch 5 (flushed as (5, 6)) follows a leader whose batches from 6
    # on are of epoch 4: the append replaces (5, 6) with (4, 6) without writing the file. After a
    # crash the batches win over the file.
    log = open_log(tmp_path)
    fill(log, 2, epoch=0)
    log.assign_epoch_start_offset(5, log.log_end_offset)
    log.flush()
    assert on_disk(log) == [(0, 0), (5, 6)]
    log.append_as_follower(batch(["x", "y"], epoch=4, base_offset=6), now_ms=0)
    assert log.epoch_cache.pairs() == [(0, 0), (4, 6)] and on_disk(log) == [(0, 0), (5, 6)]
    crash(log)
    log = open_log(tmp_path, clean_shutdown=False, recovery_point=6)
    assert log.epoch_cache.pairs() == [(0, 0), (4, 6)]
    assert log.end_offset_for_epoch(4) == (4, 8)


def test_an_append_below_an_earlier_recovery_point_is_written_at_once(tmp_path: Path) -> None:
    # A recovery-point checkpoint may still say 18 after the truncation: a restart would trust the
    # segments below it without reading their batches, so the new entry cannot wait for a flush.
    cfg = LogConfig(segment_bytes=300)
    log = open_log(tmp_path, cfg)
    fill(log, 6, epoch=0)
    log.flush()
    assert log.recovery_point == 18
    assert log.truncate_to(6)
    log.append_as_follower(batch(["a", "b", "c"], epoch=2, base_offset=6), now_ms=0)
    assert on_disk(log) == [(0, 0), (2, 6)]
    # Past it, the next new epoch is deferred again.
    log.append_as_follower(batch([f"v{i}" for i in range(12)], epoch=2, base_offset=9), now_ms=0)
    log.append_as_follower(batch(["z"], epoch=3, base_offset=21), now_ms=0)
    assert on_disk(log) == [(0, 0), (2, 6)]


# ------------------------------------------------------------------ (c) the recovery point never passes a dirty entry


def test_flush_writes_the_file_before_the_recovery_point_moves(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 2, epoch=0)
    log.assign_epoch_start_offset(4, log.log_end_offset)
    fill(log, 1, epoch=4)
    assert not (log.dir / LEADER_EPOCH_CHECKPOINT).exists() and log.recovery_point == 0
    log.flush()
    assert on_disk(log) == [(0, 0), (4, 6)] and log.recovery_point == 9
    crash(log)
    # The recovery point now trusts everything: the file alone must carry the epochs.
    log = open_log(tmp_path, clean_shutdown=False, recovery_point=9)
    assert log.epoch_cache.pairs() == [(0, 0), (4, 6)]


def test_maybe_flush_writes_the_file(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(flush_ms=100))
    fill(log, 1, epoch=3)
    assert log.maybe_flush(now_ms=100)
    assert on_disk(log) == [(3, 0)]


def test_a_synchronous_roll_writes_the_file_before_the_recovery_point_moves(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=300))
    fill(log, 1, epoch=0)
    log.assign_epoch_start_offset(1, log.log_end_offset)
    while len(log.segments) == 1:
        fill(log, 1, epoch=1)
    assert log.recovery_point == log.segments[-1].base_offset > 3
    assert on_disk(log) == [(0, 0), (1, 3)]


def test_a_deferred_roll_writes_the_file_when_its_fsync_lands(tmp_path: Path,
                                                             writes: list[list[tuple[int, int]]]) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=300))
    log.defer_roll_flush = True
    fill(log, 1, epoch=0)
    log.assign_epoch_start_offset(2, log.log_end_offset)
    while len(log.segments) == 1:
        fill(log, 1, epoch=2)
    assert writes == [] and log.recovery_point == 0
    (rolled,) = log.take_rolled_unflushed()
    os.fsync(rolled.fd)
    os.close(rolled.fd)
    log.on_rolled_flushed(rolled)
    assert log.recovery_point == rolled.up_to
    assert writes == [[(0, 0), (2, 3)]] and on_disk(log) == [(0, 0), (2, 3)]
    # A new epoch in the new active segment is not below the recovery point: not written.
    log.assign_epoch_start_offset(3, log.log_end_offset)
    fill(log, 1, epoch=3)
    assert len(writes) == 1


def test_a_failed_deferred_fsync_moves_nothing_and_writes_nothing(tmp_path: Path,
                                                                 writes: list[list[tuple[int, int]]]) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=300))
    log.defer_roll_flush = True
    fill(log, 1, epoch=0)
    while len(log.segments) == 1:
        fill(log, 1, epoch=0)
    (rolled,) = log.take_rolled_unflushed()
    os.close(rolled.fd)
    log.on_rolled_flushed(rolled, ok=False)
    assert log.recovery_point == 0 and writes == []


# ------------------------------------------------------------------ (d) clean shutdown


def test_close_then_a_clean_start_trusts_a_complete_file(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 2, epoch=0)
    log.assign_epoch_start_offset(6, log.log_end_offset)
    fill(log, 2, epoch=6)
    leo = log.log_end_offset
    log.close()
    assert on_disk(log) == [(0, 0), (6, 6)]
    log = open_log(tmp_path, clean_shutdown=True, recovery_point=leo)
    assert log.epoch_cache.pairs() == [(0, 0), (6, 6)]
    assert log.end_offset_for_epoch(0) == (0, 6)


def test_log_manager_clean_shutdown_leaves_a_complete_file(tmp_path: Path) -> None:
    m = LogManager([tmp_path], LogConfig())
    m.startup(0)
    log = m.get_or_create_log("t", 0, 0)
    fill(log, 2, epoch=1)
    log.assign_epoch_start_offset(2, log.log_end_offset)
    fill(log, 1, epoch=2)
    m.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert read_epoch_entries(tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT) == [(1, 0), (2, 6)]
    m = LogManager([tmp_path], LogConfig())
    m.startup(0)
    log2 = m.get_log("t", 0)
    assert log2 is not None and all(m.had_clean_shutdown.values())
    assert log2.epoch_cache.pairs() == [(1, 0), (2, 6)]
    m.shutdown()


# ------------------------------------------------------------------ (e) truncations stay durable at once


def test_a_truncation_after_a_dirty_append_writes_the_file_without_the_cut_epochs(
        tmp_path: Path, writes: list[list[tuple[int, int]]]) -> None:
    log = open_log(tmp_path)
    fill(log, 2, epoch=0)
    log.flush()
    log.assign_epoch_start_offset(3, log.log_end_offset)
    fill(log, 1, epoch=3)
    log.assign_epoch_start_offset(4, log.log_end_offset)
    fill(log, 1, epoch=4)
    assert writes == [[(0, 0)]]
    assert log.truncate_to(9)  # cuts epoch 4, keeps epoch 3 (still dirty until now)
    assert writes[-1] == [(0, 0), (3, 6)] and on_disk(log) == [(0, 0), (3, 6)]
    n = len(writes)
    log.flush()  # the truncation's write cleared the dirty mark: nothing left to write
    assert len(writes) == n
    fill(log, 1, epoch=3)
    crash(log)
    log = open_log(tmp_path, clean_shutdown=False, recovery_point=0)
    assert log.epoch_cache.pairs() == [(0, 0), (3, 6)]


def test_a_truncation_into_an_unflushed_tail_does_not_resurrect_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 2, epoch=0)
    log.assign_epoch_start_offset(3, log.log_end_offset)
    fill(log, 2, epoch=3)
    assert log.truncate_to(6)
    assert on_disk(log) == [(0, 0)]
    crash(log)
    log = open_log(tmp_path, clean_shutdown=False, recovery_point=0)
    assert log.epoch_cache.pairs() == [(0, 0)]
    assert log.end_offset_for_epoch(0) == (0, 6)


def test_kip279_epoch_truncation_and_full_truncation_are_durable_at_once(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 2, epoch=0)
    log.assign_epoch_start_offset(5, log.log_end_offset)  # a leader that wrote nothing in epoch 5
    log.flush()
    assert on_disk(log) == [(0, 0), (5, 6)]
    log.truncate_epochs_from_end(6)  # KIP-279: a follower asking again
    assert on_disk(log) == [(0, 0)]
    log.assign_epoch_start_offset(6, log.log_end_offset)
    fill(log, 1, epoch=6)
    log.truncate_fully_and_start_at(100)
    assert on_disk(log) == []
    crash(log)
    log = open_log(tmp_path, clean_shutdown=False, recovery_point=0)
    assert log.epoch_cache.pairs() == [] and log.log_end_offset == 100


def test_assign_changed_from_names_the_lowest_changed_entry() -> None:
    cache = LeaderEpochCache()
    assert cache.assign_changed_from(1, 0) == 0
    assert cache.assign_changed_from(1, 5) is None
    assert cache.assign_changed_from(3, 10) == 10
    assert cache.assign_changed_from(2, 10) == 10  # replaces (3, 10)
    assert cache.assign_changed_from(1, 12) == 0  # a lower epoch removes everything from (1, 0) on
    assert cache.pairs() == [(1, 12)]
    assert cache.assign_changed_from(-1, 20) is None


# ------------------------------------------------------------------ a model: the invariant under crashes

CONFIG = LogConfig(segment_bytes=400, index_interval_bytes=100)


def derived_epochs(log: Log) -> list[tuple[int, int]]:
    """The epochs the batches of ``log`` carry, as the cache must hold them."""
    cache = LeaderEpochCache()
    for h in log.iter_batch_headers():
        if h.partition_leader_epoch > cache.latest_epoch:
            cache.assign(h.partition_leader_epoch, h.base_offset)
    return cache.pairs()


class EpochMachine(RuleBasedStateMachine):
    """Appends of new epochs (as leader and as follower), elections without writes, rolls,
    flushes, recovery-point checkpoints, truncations, clean restarts and kill -9."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="epoch-model-"))
        self.counter = 0
        self._start()

    def _start(self) -> None:
        self.manager = LogManager([self.root], CONFIG)
        self.manager.startup(0)
        self.log = self.manager.get_or_create_log("t", 0, 0)

    def teardown(self) -> None:
        self.manager.abandon()
        shutil.rmtree(self.root, ignore_errors=True)

    def _values(self, n: int) -> list[str]:
        self.counter += n
        return [f"{self.counter - i}:" + "x" * 20 for i in range(n)]

    @rule(bump=st.integers(min_value=0, max_value=2), n=st.integers(min_value=1, max_value=4))
    def append_as_leader(self, bump: int, n: int) -> None:
        epoch = max(0, self.log.latest_epoch) + bump
        if bump:
            self.log.assign_epoch_start_offset(epoch, self.log.log_end_offset)
        self.log.append_as_leader(batch(self._values(n)), epoch, now_ms=0)

    @rule(bumps=st.lists(st.integers(min_value=0, max_value=2), min_size=1, max_size=3))
    def append_as_follower(self, bumps: list[int]) -> None:
        # The leader's batches continue our data's latest epoch or start newer ones; when we were
        # elected since without writing, a newer one (it may be below the epoch we were elected at,
        # whose entry it then replaces).
        derived = derived_epochs(self.log)
        epoch = derived[-1][0] if derived else 0
        if self.log.latest_epoch > epoch:
            epoch += 1
        chunks, offset = [], self.log.log_end_offset
        for bump in bumps:
            epoch += bump
            chunks.append(batch(self._values(2), epoch=epoch, base_offset=offset))
            offset += 2
        self.log.append_as_follower(b"".join(chunks), now_ms=0)

    @rule(bump=st.integers(min_value=1, max_value=3))
    def elected_without_writing(self, bump: int) -> None:
        self.log.assign_epoch_start_offset(max(0, self.log.latest_epoch) + bump, self.log.log_end_offset)

    @rule()
    def roll(self) -> None:
        self.log.roll(0)

    @rule()
    def flush(self) -> None:
        self.log.flush()

    @rule()
    def checkpoint_recovery_points(self) -> None:
        self.manager.checkpoint_recovery_points()

    @precondition(lambda self: self.log.log_end_offset > 0)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        self.log.truncate_to(data.draw(st.integers(min_value=0, max_value=self.log.log_end_offset)))

    @rule()
    def clean_restart(self) -> None:
        self.manager.shutdown()
        self._start()

    @rule()
    def kill_9(self) -> None:
        self.manager.abandon()
        self._start()

    @invariant()
    def the_cache_matches_the_batches(self) -> None:
        leo = self.log.log_end_offset
        # Beyond the batches: only entries of leaders that wrote nothing yet (at the LEO).
        pairs = [p for p in self.log.epoch_cache.pairs() if p[1] < leo]
        assert pairs == derived_epochs(self.log)

    @invariant()
    def entries_below_the_recovery_point_are_durable(self) -> None:
        # The one in memory, and the checkpointed one a restart would use (it may be higher, after
        # a truncation): a restart trusts the segments below it without reading their batches.
        checkpointed = read_offsets(self.root / RECOVERY_POINT_CHECKPOINT).get(("t", 0), 0)
        rp = max(self.log.recovery_point, checkpointed)
        path = self.log.dir / LEADER_EPOCH_CHECKPOINT
        assert [p for p in read_epoch_entries(path) if p[1] < rp] == \
            [p for p in self.log.epoch_cache.pairs() if p[1] < rp]


TestEpochModel = EpochMachine.TestCase
TestEpochModel.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                   suppress_health_check=[HealthCheck.too_slow])
