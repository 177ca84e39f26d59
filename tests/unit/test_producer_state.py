"""Idempotent producer state on the log (KIP-98): dedup, gaps, epochs, rebuild, failover."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log.config import LogConfig
from broker.log.log import Log
from proto import errors
from proto.record_batch import Record, encode_batch


def pbatch(seq: int, n: int = 2, pid: int = 7, epoch: int = 0) -> bytes:
    return encode_batch([Record(value=f"s{seq + i}".encode()) for i in range(n)], producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq)


def open_log(path: Path) -> Log:
    return Log.open(path, "t", 0, LogConfig(), now_ms=0)


def test_retry_of_an_appended_batch_returns_its_original_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    first = log.append_as_leader(pbatch(0), 0, 0)
    log.append_as_leader(pbatch(2), 0, 0)
    retry = log.append_as_leader(pbatch(0), 0, 0)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    assert log.log_end_offset == 4  # nothing written twice


def test_gaps_and_old_epochs_are_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(pbatch(0), 0, 0)
    with pytest.raises(errors.OutOfOrderSequenceNumberError):
        log.append_as_leader(pbatch(5), 0, 0)
    log.append_as_leader(pbatch(0, epoch=1), 0, 0)  # a new epoch starts again at 0
    with pytest.raises(errors.InvalidProducerEpochError):
        log.append_as_leader(pbatch(2, epoch=0), 0, 0)
    with pytest.raises(errors.OutOfOrderSequenceNumberError):
        log.append_as_leader(pbatch(3, epoch=2), 0, 0)
    assert log.log_end_offset == 4
    log.append_as_leader(pbatch(0, pid=8), 0, 0)  # another producer is independent
    assert log.log_end_offset == 6


def test_state_is_rebuilt_after_restart_and_copied_to_followers(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "l" / "t-0")
    leader.append_as_leader(pbatch(0), 0, 0)
    leader.append_as_leader(pbatch(2), 0, 0)
    follower = open_log(tmp_path / "f" / "t-0")
    follower.append_as_follower(leader.read(0, 1 << 20), 0)
    # Failover: the follower leads and must recognise the producer's retry.
    retry = follower.append_as_leader(pbatch(2), 1, 0)
    assert retry.duplicate and retry.first_offset == 2
    follower.close()
    reopened = Log.open(tmp_path / "f" / "t-0", "t", 0, LogConfig(), now_ms=0, clean_shutdown=True)
    assert reopened.append_as_leader(pbatch(0), 1, 0).duplicate
    assert reopened.append_as_leader(pbatch(4), 1, 0).first_offset == 4


def test_truncation_forgets_truncated_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(pbatch(0), 0, 0)
    log.append_as_leader(pbatch(2), 0, 0)
    log.truncate_to(2)
    # Sequence 2 was truncated away: the producer's retry of it is appended again, not a duplicate.
    again = log.append_as_leader(pbatch(2), 1, 0)
    assert not again.duplicate and again.first_offset == 2
