"""Fetch sessions (KIP-227, SPEC S15): the pure session cache and the liveness clock it feeds (S3.3, S4.2)."""

from __future__ import annotations

import random

import pytest

from broker.replication.fetch_session import (
    FINAL_EPOCH,
    FULL,
    INCREMENTAL,
    INITIAL_EPOCH,
    MAX_EPOCH,
    SESSIONLESS,
    FetchSessionCache,
    PartitionFetch,
    next_epoch,
)
from broker.replication.state import FetchClock, LeaderState
from proto import errors

T0 = 1_000_000


def pf(offset: int, epoch: int = 0) -> PartitionFetch:
    return PartitionFetch(fetch_offset=offset, log_start_offset=0, max_bytes=1 << 20, current_leader_epoch=epoch)


def cache(**kw: int) -> FetchSessionCache:
    return FetchSessionCache(rng=random.Random(7), **kw)


def full(c: FetchSessionCache, replica: int = 1, n: int = 3, sid: int = 0):
    return c.new_context(session_id=sid, epoch=INITIAL_EPOCH, replica_id=replica,
                         named=[(("t", i), pf(0)) for i in range(n)], forgotten=[], now_ms=T0)


def test_next_epoch_wraps_to_one_and_final_stays_final() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch(MAX_EPOCH) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_no_epoch_or_final_epoch_is_sessionless() -> None:
    c = cache()
    ctx = c.new_context(session_id=None, epoch=None, replica_id=1, named=[], forgotten=[], now_ms=T0)
    assert ctx.kind == SESSIONLESS and ctx.response_session_id == 0
    ctx = c.new_context(session_id=0, epoch=FINAL_EPOCH, replica_id=1, named=[], forgotten=[], now_ms=T0)
    assert ctx.kind == SESSIONLESS and len(c) == 0


def test_full_fetch_creates_a_session_holding_the_named_partitions() -> None:
    c = cache()
    ctx = full(c)
    assert ctx.kind == FULL and ctx.session is not None
    s = ctx.session
    assert s.session_id != 0 and ctx.response_session_id == s.session_id
    assert set(s.partitions) == {("t", 0), ("t", 1), ("t", 2)}
    assert s.epoch == 1
    assert not s.dirty  # a full fetch reads everything it named itself


def test_incremental_fetch_updates_named_forgets_and_bumps_the_epoch() -> None:
    c = cache()
    s = full(c).session
    assert s is not None
    ctx = c.new_context(session_id=s.session_id, epoch=1, replica_id=1, named=[(("t", 1), pf(5)), (("u", 0), pf(0))],
                        forgotten=[("t", 2)], now_ms=T0 + 10)
    assert ctx.kind == INCREMENTAL and ctx.session is s
    assert s.partitions[("t", 1)].fetch_offset == 5
    assert ("u", 0) in s.partitions and ("t", 2) not in s.partitions
    assert s.dirty == {("t", 1), ("u", 0)}
    assert s.epoch == 2 and s.last_used_ms == T0 + 10
    # A forgotten partition is no longer marked for the session.
    assert c.mark_changed(("t", 2)) == []


def test_unknown_session_and_wrong_epoch_are_kafkas_errors() -> None:
    c = cache()
    s = full(c).session
    assert s is not None
    with pytest.raises(errors.FetchSessionIdNotFoundError):
        c.new_context(session_id=s.session_id + 1, epoch=1, replica_id=1, named=[], forgotten=[], now_ms=T0)
    with pytest.raises(errors.InvalidFetchSessionEpochError):
        c.new_context(session_id=s.session_id, epoch=2, replica_id=1, named=[], forgotten=[], now_ms=T0)
    # Another replica cannot use this follower's session.
    with pytest.raises(errors.FetchSessionIdNotFoundError):
        c.new_context(session_id=s.session_id, epoch=1, replica_id=2, named=[], forgotten=[], now_ms=T0)
    assert errors.FetchSessionIdNotFoundError.code == 70 and errors.InvalidFetchSessionEpochError.code == 71


def test_full_fetch_with_an_id_replaces_that_session_and_final_closes_it() -> None:
    c = cache()
    s = full(c).session
    assert s is not None
    s2 = full(c, sid=s.session_id).session
    assert s2 is not None and s2.session_id != s.session_id and s.closed
    assert s.session_id not in c.sessions
    ctx = c.new_context(session_id=s2.session_id, epoch=FINAL_EPOCH, replica_id=1, named=[], forgotten=[], now_ms=T0)
    assert ctx.kind == SESSIONLESS and len(c) == 0 and s2.closed


def test_a_followers_new_session_replaces_its_old_one() -> None:
    c = cache()
    a = full(c, replica=1).session
    b = full(c, replica=2).session
    a2 = full(c, replica=1).session
    assert a is not None and b is not None and a2 is not None
    assert a.closed and not b.closed and set(c.sessions) == {b.session_id, a2.session_id}


def test_mark_changed_touches_only_the_sessions_holding_the_partition() -> None:
    c = cache()
    a = full(c, replica=1, n=2).session
    b = full(c, replica=2, n=1).session
    assert a is not None and b is not None
    assert sorted(c.mark_changed(("t", 1))) == [a.session_id]
    assert a.dirty == {("t", 1)} and not b.dirty
    assert sorted(c.mark_changed(("t", 0))) == sorted([a.session_id, b.session_id])
    assert a.take_fresh() == {("t", 1), ("t", 0)}
    assert a.take_fresh() == set()  # fresh is what a parked fetch has not looked at yet
    assert set(a.take_dirty()) == {("t", 0), ("t", 1)} and not a.dirty
    assert c.mark_changed(("nosuch", 0)) == []


def test_a_mark_on_a_partition_already_dirty_still_wakes_a_parked_fetch() -> None:
    """A parked fetch puts its candidates that cannot answer yet (the partition it just named,
    no new records) back in ``dirty``; the append that follows must still reach it. It did not:
    every acks=all produce then waited replica.fetch.wait.max.ms for the follower (hot produce
    10x slower)."""
    c = cache()
    s = full(c, n=1).session
    assert s is not None
    c.new_context(session_id=s.session_id, epoch=1, replica_id=1, named=[(("t", 0), pf(5))], forgotten=[],
                  now_ms=T0)
    candidates = s.take_dirty()
    s.dirty.update(candidates)  # nothing to answer yet: parked with them put back
    assert s.take_fresh() == set()
    c.mark_changed(("t", 0))  # the leader appends
    assert s.take_fresh() == {("t", 0)}


def test_incremental_answer_lists_only_what_moved() -> None:
    c = cache()
    s = full(c, n=1).session
    assert s is not None
    cp = s.partitions[("t", 0)]
    assert cp.maybe_answer(error=False, has_records=False, high_watermark=10, log_start_offset=0)
    assert not cp.maybe_answer(error=False, has_records=False, high_watermark=10, log_start_offset=0)
    assert cp.maybe_answer(error=False, has_records=True, high_watermark=10, log_start_offset=0)
    assert cp.maybe_answer(error=False, has_records=False, high_watermark=10, log_start_offset=3)
    assert cp.maybe_answer(error=True, has_records=False, high_watermark=-1, log_start_offset=-1)
    # An error does not overwrite what the last good answer said.
    assert not cp.maybe_answer(error=False, has_records=False, high_watermark=10, log_start_offset=3)


def test_consumer_session_holding_too_many_partitions_is_refused_and_removed() -> None:
    c = cache()
    s = c.new_context(session_id=0, epoch=0, replica_id=-1, named=[(("t", 0), pf(0))], forgotten=[], now_ms=T0).session
    assert s is not None
    with pytest.raises(errors.InvalidRequestError):
        c.new_context(session_id=s.session_id, epoch=1, replica_id=-1, named=[(("t", i), pf(0)) for i in range(1, 3)],
                      forgotten=[], now_ms=T0, max_partitions=2)
    assert s.closed and len(c) == 0


def test_eviction_follows_kafka_privileges() -> None:
    c = cache(max_slots=2, min_eviction_ms=1000)
    consumer = c.new_context(session_id=0, epoch=0, replica_id=-1, named=[], forgotten=[], now_ms=T0).session
    follower = full(c, replica=1).session
    assert consumer is not None and follower is not None
    # Full, and the consumer session is fresh: another consumer gets no session (answered without one).
    ctx = c.new_context(session_id=0, epoch=0, replica_id=-1, named=[], forgotten=[], now_ms=T0 + 10)
    assert ctx.kind == SESSIONLESS and len(c) == 2
    # A follower may evict a consumer session at once.
    f2 = full(c, replica=2).session
    assert f2 is not None and consumer.closed and c.evictions == 1
    # Followers' sessions are never evicted by consumers, however stale.
    ctx = c.new_context(session_id=0, epoch=0, replica_id=-1, named=[], forgotten=[], now_ms=T0 + 10**9)
    assert ctx.kind == SESSIONLESS and not follower.closed and not f2.closed


def test_a_stale_consumer_session_is_evicted_for_a_new_consumer() -> None:
    c = cache(max_slots=1, min_eviction_ms=1000)
    old = c.new_context(session_id=0, epoch=0, replica_id=-1, named=[], forgotten=[], now_ms=T0).session
    new = c.new_context(session_id=0, epoch=0, replica_id=-1, named=[], forgotten=[], now_ms=T0 + 1000).session
    assert old is not None and new is not None and old.closed and not new.closed


# ------------------------------------------------------------ the liveness clock (S3.3, S4.2)

LAG = 10_000


def leader(leo: int = 100) -> LeaderState:
    return LeaderState(local_id=0, leader_epoch=1, replicas=(0, 1), isr=(0, 1), zk_version=0,
                       high_watermark=leo, log_end_offset=leo, now_ms=T0)


def test_a_caught_up_follower_on_a_session_stays_in_the_isr_without_naming_the_partition() -> None:
    st = leader()
    clock = FetchClock(T0)
    st.on_follower_fetch(1, 100, T0, LAG, clock)
    # The follower keeps fetching on its session, naming other partitions only.
    for k in range(1, 6):
        clock.last_fetch_ms = T0 + k * LAG
    assert st.maybe_shrink_isr(T0 + 5 * LAG + 1, LAG) is None
    # Without the clock (a sessionless fetcher that stopped naming it) it would have gone.
    st2 = leader()
    st2.on_follower_fetch(1, 100, T0, LAG)
    change = st2.maybe_shrink_isr(T0 + 5 * LAG + 1, LAG)
    assert change is not None and change.new_isr == (0,)


def test_a_session_that_stops_fetching_lets_the_follower_fall_out() -> None:
    st = leader()
    clock = FetchClock(T0)
    st.on_follower_fetch(1, 100, T0, LAG, clock)
    clock.last_fetch_ms = T0 + 5_000  # then the follower stops (paused, dead)
    assert st.maybe_shrink_isr(T0 + 5_000 + LAG, LAG) is None
    change = st.maybe_shrink_isr(T0 + 5_000 + LAG + 1, LAG)
    assert change is not None and change.new_isr == (0,)


def test_a_follower_behind_the_log_end_is_not_kept_alive_by_its_clock() -> None:
    st = leader()
    clock = FetchClock(T0)
    st.on_follower_fetch(1, 100, T0, LAG, clock)
    clock.last_fetch_ms = T0 + 1_000
    st.on_local_append(150, T0 + 2_000, LAG)  # the follower has not fetched 100..150
    # Caught up as of its last fetch before the append (Kafka's rule of the previous fetch) ...
    assert st.caught_up_time_ms(st.followers[1]) == T0 + 1_000
    # ... and later fetches on the session that do not bring it to 150 do not count.
    clock.last_fetch_ms = T0 + 9_000
    assert st.caught_up_time_ms(st.followers[1]) == T0 + 1_000
    change = st.maybe_shrink_isr(T0 + 1_000 + LAG + 1, LAG)
    assert change is not None and change.new_isr == (0,)


def test_a_sessionless_fetch_unbinds_the_clock() -> None:
    st = leader()
    clock = FetchClock(T0)
    st.on_follower_fetch(1, 100, T0, LAG, clock)
    st.on_follower_fetch(1, 100, T0 + 1, LAG)  # the follower went back to sessionless fetches
    clock.last_fetch_ms = T0 + 5 * LAG
    assert st.caught_up_time_ms(st.followers[1]) == T0 + 1


def test_a_partition_the_session_forgot_is_no_longer_kept_alive_by_its_clock() -> None:
    """The follower backs off (or truncates) one partition and forgets it from its session while
    the session keeps fetching others: that partition falls out of the ISR after the lag time."""
    st = leader()
    clock = FetchClock(T0)
    st.on_follower_fetch(1, 100, T0, LAG, clock)
    clock.last_fetch_ms = T0 + 2_000
    st.on_follower_session_forgot(1, clock)
    assert st.caught_up_time_ms(st.followers[1]) == T0 + 2_000  # caught up until it was forgotten
    clock.last_fetch_ms = T0 + 5 * LAG  # the session fetches on, without this partition
    change = st.maybe_shrink_isr(T0 + 2_000 + LAG + 1, LAG)
    assert change is not None and change.new_isr == (0,)
    # Another session's clock is not unbound by this one's forgetting.
    st2 = leader()
    mine, other = FetchClock(T0), FetchClock(T0)
    st2.on_follower_fetch(1, 100, T0, LAG, mine)
    st2.on_follower_session_forgot(1, other)
    assert st2.followers[1].clock is mine


def test_an_expansion_refused_while_another_change_was_in_flight_is_proposed_again() -> None:
    """S4.3 with sessions: the follower named the partition once (caught up) while an ISR change was
    pending, so its expansion was refused; its later fetches do not name the idle partition. The
    periodic ISR check proposes it again (found by the simulation: the cluster never settled)."""
    st = LeaderState(local_id=0, leader_epoch=1, replicas=(0, 1), isr=(0,), zk_version=0, high_watermark=100,
                     log_end_offset=100, now_ms=T0)
    clock = FetchClock(T0)
    st.pending_isr = (0,)  # a change in flight
    _moved, expand = st.on_follower_fetch(1, 100, T0, LAG, clock)
    assert expand is None
    st.on_isr_write_failed()
    clock.last_fetch_ms = T0 + 100
    change = st.maybe_expand_isr_of_sessions(T0 + 200, LAG)
    assert change is not None and change.new_isr == (0, 1)
    # Not for a follower whose session stopped fetching.
    st2 = LeaderState(local_id=0, leader_epoch=1, replicas=(0, 1), isr=(0,), zk_version=0, high_watermark=100,
                      log_end_offset=100, now_ms=T0)
    st2.pending_isr = (0,)
    st2.on_follower_fetch(1, 100, T0, LAG, FetchClock(T0))
    st2.on_isr_write_failed()
    assert st2.maybe_expand_isr_of_sessions(T0 + LAG + 1, LAG) is None


def test_consumer_sessions_hold_a_bounded_number_of_partitions_together() -> None:
    """S13: 1,000 consumer sessions of max.request.partitions each would cache 10 million
    partitions. Past the bound a new session is not made (answered in full, without one) and a
    growing one is dropped (the client starts over); followers' sessions are not counted."""
    c = FetchSessionCache(rng=random.Random(3), max_consumer_partitions=5)
    a = c.new_context(session_id=0, epoch=0, replica_id=-1, named=[(("t", i), pf(0)) for i in range(4)],
                      forgotten=[], now_ms=T0).session
    assert a is not None and c.consumer_partitions == 4
    b = c.new_context(session_id=0, epoch=0, replica_id=-1, named=[(("u", i), pf(0)) for i in range(2)],
                      forgotten=[], now_ms=T0)
    assert b.kind == SESSIONLESS and c.consumer_partitions == 4 and len(c) == 1
    f = full(c, replica=1, n=50).session  # a follower: not counted
    assert f is not None and c.consumer_partitions == 4
    with pytest.raises(errors.FetchSessionIdNotFoundError):
        c.new_context(session_id=a.session_id, epoch=1, replica_id=-1,
                      named=[(("v", i), pf(0)) for i in range(2)], forgotten=[], now_ms=T0)
    assert a.closed and c.consumer_partitions == 0
    # Forgetting gives room back.
    d = c.new_context(session_id=0, epoch=0, replica_id=-1, named=[(("t", i), pf(0)) for i in range(5)],
                      forgotten=[], now_ms=T0).session
    assert d is not None
    c.new_context(session_id=d.session_id, epoch=1, replica_id=-1, named=[], forgotten=[("t", 0), ("t", 1)],
                  now_ms=T0)
    assert c.consumer_partitions == 3


def test_take_dirty_puts_what_the_last_answer_had_no_room_for_first() -> None:
    cache = FetchSessionCache(max_slots=10)
    ctx = cache.new_context(session_id=None, epoch=0, replica_id=2, named=[(("t", p), pf(0)) for p in range(50)],
                            forgotten=[], now_ms=0)
    assert ctx.session is not None
    s = ctx.session
    s.dirty.update(("t", p) for p in range(50))
    s.unfitted = [("t", 49), ("t", 7), ("t", 99)]  # t-99 is not dirty: not read
    out = s.take_dirty()
    assert out[:2] == [("t", 49), ("t", 7)] and sorted(out) == [("t", p) for p in range(50)]
    assert not s.dirty and not s.fresh
