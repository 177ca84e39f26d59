"""The pure replication core: HW (S3), ISR (S4), acks (S5) and truncation (S8)."""

from __future__ import annotations

from pathlib import Path

from broker.log.config import LogConfig
from broker.log.epoch_cache import LeaderEpochCache
from broker.log.log import Log
from broker.replication.state import LeaderState, follower_high_watermark, truncation_offset
from proto.record_batch import Record, decode_batches, encode_batch

LAG = 10_000


def leader(isr: tuple[int, ...] = (1, 2), leo: int = 0, hw: int = 0, now: int = 0) -> LeaderState:
    return LeaderState(local_id=1, leader_epoch=0, replicas=(1, 2), isr=isr, zk_version=0, high_watermark=hw,
                       log_end_offset=leo, now_ms=now)


def test_s3_two_round_fetch_moves_hw_on_the_second_fetch() -> None:
    st = leader()
    assert not st.on_local_append(1, now_ms=1, lag_max_ms=LAG)  # m0 appended; B's LEO unknown
    assert st.high_watermark == 0
    moved, _ = st.on_follower_fetch(2, fetch_offset=0, now_ms=2, lag_max_ms=LAG)  # first fetch: gets m0
    assert not moved and st.high_watermark == 0
    assert follower_high_watermark(1, st.high_watermark) == 0  # S3.5: B has m0 but learns HW 0
    moved, _ = st.on_follower_fetch(2, fetch_offset=1, now_ms=3, lag_max_ms=LAG)  # second fetch: B's LEO is 1
    assert moved and st.high_watermark == 1
    assert follower_high_watermark(1, st.high_watermark) == 1


def test_s3_4_hw_never_moves_backwards_and_never_passes_an_isr_member() -> None:
    st = leader(leo=10, hw=8)
    st.on_follower_fetch(2, fetch_offset=5, now_ms=1, lag_max_ms=LAG)
    assert st.high_watermark == 8  # min would be 5: never backwards
    st.on_local_append(12, now_ms=2, lag_max_ms=LAG)
    st.on_follower_fetch(2, fetch_offset=11, now_ms=3, lag_max_ms=LAG)
    assert st.high_watermark == 11


def test_s3_4_single_replica_isr_commits_on_append() -> None:
    st = LeaderState(local_id=1, leader_epoch=0, replicas=(1,), isr=(1,), zk_version=0, high_watermark=0,
                     log_end_offset=0, now_ms=0)
    assert st.on_local_append(3, now_ms=1, lag_max_ms=LAG) and st.high_watermark == 3


def test_s4_2_follower_that_stops_catching_up_leaves_the_isr() -> None:
    st = leader(leo=5, now=0)
    st.on_follower_fetch(2, fetch_offset=5, now_ms=100, lag_max_ms=LAG)  # caught up at 100
    st.on_local_append(9, now_ms=200, lag_max_ms=LAG)
    assert st.maybe_shrink_isr(now_ms=100 + LAG, lag_max_ms=LAG) is None  # exactly at the limit: stays
    change = st.maybe_shrink_isr(now_ms=101 + LAG, lag_max_ms=LAG)
    assert change is not None and change.new_isr == (1,) and change.expected_zk_version == 0
    assert st.maybe_shrink_isr(now_ms=200 + LAG, lag_max_ms=LAG) is None  # one change in flight at a time
    # While the shrink is in flight the HW still counts the follower (maximal ISR).
    st.on_local_append(12, now_ms=LAG + 300, lag_max_ms=LAG)
    assert st.high_watermark == 5
    assert st.on_isr_committed((1,), zk_version=1, now_ms=2 * LAG + 300, lag_max_ms=LAG)  # S3.4: re-evaluated
    assert st.high_watermark == 12


def test_a_follower_that_keeps_fetching_but_lags_still_leaves() -> None:
    st = leader(leo=100, now=0)
    for t in range(1, 30):  # fetches every 1000 ms, always 50 behind the leader's LEO
        st.on_local_append(100 + t * 10, now_ms=t * 1000, lag_max_ms=LAG)
        st.on_follower_fetch(2, fetch_offset=50 + t * 10, now_ms=t * 1000, lag_max_ms=LAG)
    assert st.maybe_shrink_isr(now_ms=30_000, lag_max_ms=LAG) is not None


def test_s4_3_follower_rejoins_once_its_leo_reaches_the_hw() -> None:
    st = leader(isr=(1,), leo=10, hw=10)
    _, expand = st.on_follower_fetch(2, fetch_offset=4, now_ms=1, lag_max_ms=LAG)
    assert expand is None
    _, expand = st.on_follower_fetch(2, fetch_offset=10, now_ms=2, lag_max_ms=LAG)
    assert expand is not None and expand.new_isr == (1, 2)
    st.on_isr_write_failed()  # a deposed leader's write: nothing changes
    assert st.isr == (1,) and st.pending_isr is None


def test_s5_acks_all_completion_and_min_insync() -> None:
    st = leader(leo=10, hw=5)
    assert not st.check_enough_replicas_reach(10, min_insync_replicas=2).done
    st.on_follower_fetch(2, fetch_offset=10, now_ms=1, lag_max_ms=LAG)
    d = st.check_enough_replicas_reach(10, min_insync_replicas=2)
    assert d.done and not d.not_enough_replicas
    st.isr = (1,)
    assert st.check_enough_replicas_reach(10, min_insync_replicas=2).not_enough_replicas


def test_s8_3_truncation_offsets() -> None:
    cache = LeaderEpochCache([(0, 0), (2, 10)])
    # The leader knows our epoch 2 and says it ends at 15; we have 20: cut to 15.
    assert truncation_offset(cache, 20, leader_epoch=2, leader_end_offset=15).offset == 15
    # The leader's epoch 2 goes beyond our LEO: keep everything.
    assert truncation_offset(cache, 12, 2, 30).offset == 12
    # The leader answers with epoch 1 (it never saw our 2): we know epoch 0 ends at 10; ask again.
    d = truncation_offset(cache, 20, 1, 14)
    assert (d.offset, d.completed) == (10, False)
    # Leader knows nothing: the log stays (never the high watermark).
    assert truncation_offset(cache, 20, -1, -1).offset == 20


# ------------------------------------------------------------------ S8.4 replayed on real logs


def _log(path: Path) -> Log:
    return Log.open(path, "t", 0, LogConfig(), now_ms=0)


def _values(log: Log) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for r in decode_batches(log.read(0, 1 << 20))] if log.log_end_offset else []


def _lead(log: Log, epoch: int, value: bytes) -> None:
    log.assign_epoch_start_offset(epoch, log.log_end_offset)
    log.append_as_leader(encode_batch([Record(value=value)]), epoch, 0)


def _copy(leader_log: Log, follower: Log) -> None:
    data = leader_log.read(follower.log_end_offset, 1 << 20)
    if data:
        follower.append_as_follower(data, 0)


def _become_follower(follower: Log, leader_log: Log, use_epochs: bool) -> None:
    if not use_epochs:
        follower.truncate_to(follower.high_watermark)  # the old rule (pre KIP-101)
        return
    for _ in range(10):
        epoch, end = leader_log.end_offset_for_epoch(follower.latest_epoch)
        d = truncation_offset(follower.epoch_cache, follower.log_end_offset, epoch, end)
        follower.truncate_to(d.offset)
        if d.completed:
            return
        follower.epoch_cache.truncate_from_end(d.offset)


def _scenario_a(tmp: Path, use_epochs: bool) -> tuple[Log, Log]:
    """S8.4(a): A leads, both hold m0, m1; HW 2 on A, 1 on B. B restarts; A dies, B leads; A returns."""
    a, b = _log(tmp / "a"), _log(tmp / "b")
    _lead(a, 0, b"m0")
    _lead(a, 0, b"m1")
    _copy(a, b)
    a.update_high_watermark(2)
    b.update_high_watermark(1)
    _become_follower(b, a, use_epochs)  # B restarts and follows A again
    _lead(b, 1, b"m2")  # A dies; B leads at epoch 1 and takes a write
    _become_follower(a, b, use_epochs)  # A returns as follower of B
    _copy(b, a)
    return a, b


def _scenario_b(tmp: Path, use_epochs: bool) -> tuple[Log, Log]:
    """S8.4(b): A holds m0, m1 (HW 2), B only m0 (HW 1); both crash; B leads first and takes m2."""
    a, b = _log(tmp / "a"), _log(tmp / "b")
    _lead(a, 0, b"m0")
    _copy(a, b)
    _lead(a, 0, b"m1")
    a.update_high_watermark(2)
    b.update_high_watermark(1)
    _lead(b, 1, b"m2")
    _become_follower(a, b, use_epochs)
    _copy(b, a)
    return a, b


def test_s8_4_a_no_loss_with_leader_epochs(tmp_path: Path) -> None:
    a, b = _scenario_a(tmp_path / "epochs", use_epochs=True)
    assert _values(a) == _values(b) == [(0, b"m0"), (1, b"m1"), (2, b"m2")]
    # The old rule loses the committed m1 on that same history.
    _a_old, b_old = _scenario_a(tmp_path / "hw", use_epochs=False)
    assert (1, b"m1") not in _values(b_old)


def test_s8_4_b_no_divergence_with_leader_epochs(tmp_path: Path) -> None:
    a, b = _scenario_b(tmp_path / "epochs", use_epochs=True)
    assert _values(a) == _values(b) == [(0, b"m0"), (1, b"m2")]
    a_old, b_old = _scenario_b(tmp_path / "hw", use_epochs=False)
    assert _values(a_old) != _values(b_old)  # offset 1 holds m1 on A and m2 on B
