"""The consumer's side of fetch sessions (KIP-227, SPEC S15: ``client.fetch_session_handler``): full then
incremental fetches, what they name and forget, and every way back to a full fetch - checked by hand,
and against the broker's own session cache (``broker.replication.fetch_session``) under lost requests,
lost answers, evictions and partial answers (hypothesis)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.replication.fetch_session import FetchSessionCache, PartitionFetch
from client.fetch_session_handler import (
    FETCH_SESSION_ID_NOT_FOUND,
    INITIAL_EPOCH,
    INVALID_FETCH_SESSION_EPOCH,
    INVALID_SESSION_ID,
    MAX_EPOCH,
    FetchSessionHandler,
    PartitionFetchState,
    next_epoch,
)
from proto import errors

TP = tuple[str, int]
A, B, C = ("t", 0), ("t", 1), ("u", 0)


def ps(offset: int, epoch: int = 0) -> PartitionFetchState:
    return PartitionFetchState(fetch_offset=offset, current_leader_epoch=epoch, max_bytes=1 << 20)


def opened(sid: int = 42) -> FetchSessionHandler[TP]:
    """A handler whose full fetch of A, B (at 0) was answered with session ``sid``."""
    h: FetchSessionHandler[TP] = FetchSessionHandler()
    data = h.build({A: ps(0), B: ps(0)})
    assert h.handle_response(data, 0, sid, [A, B])
    return h


def test_the_first_fetch_is_full_and_opens_a_session() -> None:
    h: FetchSessionHandler[TP] = FetchSessionHandler()
    data = h.build({A: ps(0), B: ps(5)})
    assert data.full and (data.session_id, data.epoch) == (INVALID_SESSION_ID, INITIAL_EPOCH)
    assert dict(data.to_send) == {A: ps(0), B: ps(5)} and data.forgotten == ()
    assert h.handle_response(data, 0, 42, [B, A])
    nxt = h.build({A: ps(0), B: ps(5)})
    assert not nxt.full and (nxt.session_id, nxt.epoch) == (42, 1)


def test_incremental_fetches_name_only_changes_and_forget_what_left() -> None:
    h = opened()
    data = h.build({A: ps(3), B: ps(0), C: ps(7)})  # A moved, B did not, C is new
    assert dict(data.to_send) == {A: ps(3), C: ps(7)} and data.forgotten == ()
    assert dict(data.covered) == {A: ps(3), B: ps(0), C: ps(7)}
    assert h.handle_response(data, 0, 42, [A])  # only A moved: B and C had nothing
    data = h.build({A: ps(3), C: ps(7, epoch=4)})  # B reassigned away; C's leader epoch is new
    assert dict(data.to_send) == {C: ps(7, epoch=4)} and data.forgotten == (B,)
    assert data.epoch == 2
    assert h.handle_response(data, 0, 42, [])
    assert h.build({A: ps(3), C: ps(7, epoch=4)}).to_send == {}  # nothing changed: names nothing


def test_epochs_wrap_to_one_never_zero() -> None:
    assert next_epoch(0) == 1 and next_epoch(MAX_EPOCH) == 1 and next_epoch(-1) == -1
    h = opened()
    h.epoch = MAX_EPOCH
    data = h.build({A: ps(0), B: ps(0)})
    assert h.handle_response(data, 0, 42, [])
    assert h.epoch == 1


def test_unknown_session_starts_over_and_a_wrong_epoch_closes_the_session() -> None:
    h = opened()
    data = h.build({A: ps(1), B: ps(0)})
    assert not h.handle_response(data, FETCH_SESSION_ID_NOT_FOUND, 0, [A, B])
    full = h.build({A: ps(1), B: ps(0)})
    assert full.full and full.session_id == INVALID_SESSION_ID and dict(full.to_send) == {A: ps(1), B: ps(0)}
    h = opened()
    data = h.build({A: ps(1), B: ps(0)})
    assert not h.handle_response(data, INVALID_FETCH_SESSION_EPOCH, 0, [])
    full = h.build({A: ps(1), B: ps(0)})
    assert full.full and full.session_id == 42  # epoch 0 with the old id: the broker closes it


def test_a_failed_or_cancelled_fetch_makes_the_next_one_full_and_its_late_answer_is_ignored() -> None:
    h = opened()
    lost = h.build({A: ps(1), B: ps(0)})
    h.handle_error()
    full = h.build({A: ps(1), B: ps(0)})
    assert full.full and full.session_id == 42
    assert not h.handle_response(lost, 0, 42, [A])  # the abandoned fetch's answer moves nothing
    assert h.handle_response(full, 0, 43, [A, B])
    assert (h.session_id, h.epoch) == (43, 1)
    h.reset()  # a leader moved: the same way back
    assert h.build({A: ps(1)}).full


def test_resend_names_a_partition_whose_answer_was_not_taken() -> None:
    h = opened()
    data = h.build({A: ps(0), B: ps(0)})
    assert h.handle_response(data, 0, 42, [A])
    h.resend(A)  # e.g. a prefetch's error that the consumer skipped
    assert dict(h.build({A: ps(0), B: ps(0)}).to_send) == {A: ps(0)}


def test_no_session_granted_keeps_every_fetch_full() -> None:
    h: FetchSessionHandler[TP] = FetchSessionHandler()
    data = h.build({A: ps(0)})
    assert h.handle_response(data, 0, INVALID_SESSION_ID, [A])
    assert h.build({A: ps(1)}).full


def test_answers_that_do_not_match_the_fetch_are_refused() -> None:
    h: FetchSessionHandler[TP] = FetchSessionHandler()
    data = h.build({A: ps(0), B: ps(0)})
    assert not h.handle_response(data, 0, 42, [A])  # a full answer must list every partition
    assert h.build({A: ps(0), B: ps(0)}).full
    h = opened()
    data = h.build({A: ps(0)})
    assert not h.handle_response(data, 0, 42, [C])  # an incremental answer about a partition not held
    again = h.build({A: ps(0)})
    assert again.full and again.session_id == 42
    h = opened()
    data = h.build({A: ps(0), B: ps(0)})
    assert not h.handle_response(data, 0, 77, [])  # another session's answer
    h = opened()
    data = h.build({A: ps(0), B: ps(0)})
    assert h.handle_response(data, 0, INVALID_SESSION_ID, [])  # the broker closed the session
    nxt = h.build({A: ps(0), B: ps(0)})
    assert nxt.full and nxt.session_id == INVALID_SESSION_ID
    h = FetchSessionHandler()
    data = h.build({A: ps(0)})
    assert not h.handle_response(data, 0, 0, [], throttled=True)  # KIP-219's empty throttled answer
    assert h.build({A: ps(0)}).full


# ------------------------------------------------------------------ against the broker's session cache

PARTS = [("t", p) for p in range(4)] + [("u", 0)]
OK, LOST_REQUEST, LOST_ANSWER, EVICTED = "ok", "lost-request", "lost-answer", "evicted"

wanted_maps = st.dictionaries(st.sampled_from(PARTS), st.builds(ps, st.integers(0, 3), st.integers(0, 1)),
                              max_size=len(PARTS))
steps = st.lists(st.tuples(wanted_maps, st.sampled_from([OK, OK, OK, OK, LOST_REQUEST, LOST_ANSWER, EVICTED]),
                           st.sets(st.sampled_from(PARTS))), min_size=1, max_size=25)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_the_brokers_session_always_holds_what_the_consumer_wants(plan: list) -> None:  # type: ignore[type-arg]
    """Whatever is lost on the way, every fetch the broker takes on a session leaves the session
    holding exactly the partitions, offsets and leader epochs the consumer wanted when it built it;
    and after a clean exchange the consumer is back on an incremental session."""
    cache = FetchSessionCache(rng=random.Random(3))
    h: FetchSessionHandler[TP] = FetchSessionHandler()
    resent: set[TP] = set()
    for wanted, outcome, moved in plan:
        data = h.build(wanted)
        if not data.full:
            assert resent & set(wanted) <= set(data.to_send)  # answers the consumer dropped come again
        resent = set()
        if outcome == LOST_REQUEST:
            h.handle_error()
            continue
        if outcome == EVICTED and data.session_id:
            cache.remove(data.session_id)
        named = [(tp, PartitionFetch(s.fetch_offset, -1, s.max_bytes, s.current_leader_epoch))
                 for tp, s in data.to_send.items()]
        code, sid = 0, 0
        try:
            ctx = cache.new_context(session_id=data.session_id, epoch=data.epoch, replica_id=-1, named=named,
                                    forgotten=list(data.forgotten), now_ms=0)
        except (errors.FetchSessionIdNotFoundError, errors.InvalidFetchSessionEpochError) as e:
            code = e.code
        else:
            assert ctx.session is not None
            sid = ctx.session.session_id
            held = {tp: PartitionFetchState(cp.fetch_offset, cp.current_leader_epoch, cp.max_bytes)
                    for tp, cp in ctx.session.partitions.items()}
            assert held == dict(data.covered)
        if outcome == LOST_ANSWER:
            h.handle_error()
            continue
        listed = list(data.covered) if data.full or code else [tp for tp in data.covered if tp in moved]
        used = h.handle_response(data, code, sid, listed)
        assert used == (code == 0)
        if used:
            assert h.session_id == sid and h.epoch == next_epoch(data.epoch)
            resent = moved & set(listed)
            for tp in resent:
                h.resend(tp)  # the consumer dropped these answers: they must be named again
        else:
            assert h.epoch == INITIAL_EPOCH  # a session error: the next fetch is full
