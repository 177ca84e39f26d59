"""Leader epoch cache: SPEC S8.1-S8.3 (KIP-101 end-offset rules)."""

from __future__ import annotations

from pathlib import Path

from broker.log.checkpoint import read_epoch_entries, write_epoch_entries
from broker.log.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache


def test_s8_3_current_epoch_answers_log_end_offset() -> None:
    cache = LeaderEpochCache([(0, 0), (2, 10), (5, 20)])
    assert cache.end_offset_for(5, log_end_offset=33) == (5, 33)


def test_s8_3_older_epoch_answers_start_of_next_higher_epoch() -> None:
    cache = LeaderEpochCache([(0, 0), (2, 10), (5, 20)])
    assert cache.end_offset_for(0, 33) == (0, 10)
    assert cache.end_offset_for(2, 33) == (2, 20)
    # An epoch this replica never saw (3, 4): the largest known epoch below it,
    # ending where the next known epoch starts.
    assert cache.end_offset_for(3, 33) == (2, 20)
    assert cache.end_offset_for(4, 33) == (2, 20)


def test_s8_3_unknown_epochs() -> None:
    cache = LeaderEpochCache([(3, 7), (4, 9)])
    assert cache.end_offset_for(1, 20) == (1, 7)  # below every epoch: where the first one starts
    assert cache.end_offset_for(9, 20) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert cache.end_offset_for(UNDEFINED_EPOCH, 20) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert LeaderEpochCache().end_offset_for(0, 0) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def test_s8_2_assign_appends_and_is_idempotent() -> None:
    cache = LeaderEpochCache()
    assert cache.assign(1, 0)
    assert not cache.assign(1, 5)  # same epoch, later offset: still epoch 1 from 0
    assert cache.assign(2, 5)
    assert cache.pairs() == [(1, 0), (2, 5)]
    assert cache.latest_epoch == 2


def test_assign_drops_entries_that_break_monotonicity() -> None:
    cache = LeaderEpochCache([(1, 0), (2, 5), (3, 9)])
    # Epoch 4 starting at 6: entries at offsets >= 6 belonged to a replaced suffix.
    assert cache.assign(4, 6)
    assert cache.pairs() == [(1, 0), (2, 5), (4, 6)]
    # A lower epoch than we have: its entries above are dropped too.
    assert cache.assign(3, 8)
    assert cache.pairs() == [(1, 0), (2, 5), (3, 8)]
    assert not cache.assign(-1, 3)


def test_truncate_from_end_and_start() -> None:
    cache = LeaderEpochCache([(0, 0), (2, 10), (5, 20)])
    assert cache.truncate_from_end(20)
    assert cache.pairs() == [(0, 0), (2, 10)]
    assert not cache.truncate_from_end(30)
    assert cache.truncate_from_start(12)
    assert cache.pairs() == [(2, 12)]
    assert not cache.truncate_from_start(12)
    assert not cache.truncate_from_start(3)
    assert cache.clear() and cache.pairs() == []


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_epoch_entries(path, [(0, 0), (3, 41)])
    assert path.read_text() == "0\n2\n0 0\n3 41\n"
    assert read_epoch_entries(path) == [(0, 0), (3, 41)]
    assert not (tmp_path / "leader-epoch-checkpoint.tmp").exists()
