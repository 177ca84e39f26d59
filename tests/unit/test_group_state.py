"""The group coordinator's pure core: join/sync barriers, timeouts driven by now_ms, fencing."""

from __future__ import annotations

from broker.coordinator.group.group_state import (
    COMPLETING_REBALANCE,
    EMPTY,
    ILLEGAL_GENERATION,
    JOIN,
    MEMBER_ID_REQUIRED,
    NONE,
    PREPARING_REBALANCE,
    REBALANCE_IN_PROGRESS,
    STABLE,
    SYNC,
    UNKNOWN_MEMBER_ID,
    Completion,
    CoordinatorLimits,
    GroupStateMachine,
    JoinGroupResult,
    SyncGroupResult,
    coordinator_for,
)
from proto import errors

G = "g"
PROTOS = [("range", b"meta")]


def join(sm: GroupStateMachine, member: str, now: int, new_id: str = "", session: int = 10_000,
         rebalance: int = 30_000) -> tuple[JoinGroupResult | None, list[Completion]]:
    return sm.join(G, member, new_id or member, "client", "host", "consumer", PROTOS, session, rebalance, now)


def joins(done: list[Completion]) -> dict[str, JoinGroupResult]:
    return {c.member_id: c.result for c in done if c.api == JOIN and isinstance(c.result, JoinGroupResult)}


def syncs(done: list[Completion]) -> dict[str, SyncGroupResult]:
    return {c.member_id: c.result for c in done if c.api == SYNC and isinstance(c.result, SyncGroupResult)}


def stable_pair(sm: GroupStateMachine) -> int:
    """Two members a (leader) and b in a Stable generation; returns the generation."""
    _, done = join(sm, "", 0, new_id="a")
    gen = joins(done)["a"].generation_id
    sm.sync(G, gen, "a", {"a": b"A"}, 0)
    answer, done = join(sm, "", 10, new_id="b")          # a new member: rebalance
    assert answer is None and not done
    assert sm.groups[G].state == PREPARING_REBALANCE
    assert sm.heartbeat(G, gen, "a", 20) == REBALANCE_IN_PROGRESS
    answer, done = join(sm, "a", 30)                      # barrier: released when a rejoins
    results = joins(done)
    assert set(results) == {"a", "b"}
    gen2 = results["a"].generation_id
    assert gen2 == gen + 1 and results["a"].leader_id == "a"
    assert [m for m, _ in results["a"].members] == ["a", "b"] and results["b"].members == ()
    answer_b, _ = sm.sync(G, gen2, "b", {}, 40)           # the follower waits for the leader
    assert answer_b is None and sm.groups[G].state == COMPLETING_REBALANCE
    answer_a, done = sm.sync(G, gen2, "a", {"a": b"A0", "b": b"B1"}, 50)
    assert answer_a == SyncGroupResult(NONE, b"A0")
    assert syncs(done) == {"b": SyncGroupResult(NONE, b"B1")}
    assert sm.groups[G].state == STABLE
    return gen2


def test_first_member_joins_alone_and_leads() -> None:
    sm = GroupStateMachine()
    answer, done = join(sm, "", 0, new_id="a")
    assert answer is None
    r = joins(done)["a"]
    assert r.error_code == NONE and r.generation_id == 1 and r.leader_id == "a" and r.members == (("a", b"meta"),)


def test_join_and_sync_barriers() -> None:
    stable_pair(GroupStateMachine())


def test_session_timeout_removes_member_and_rebalances() -> None:
    sm = GroupStateMachine()
    gen = stable_pair(sm)
    assert sm.heartbeat(G, gen, "a", 5_000) == NONE
    assert sm.tick(9_000) == []                    # b last heard at 40: not yet expired
    done = sm.tick(10_100)                          # b's 10 s session ran out
    assert "b" not in sm.groups[G].members
    assert sm.groups[G].state == PREPARING_REBALANCE and not done
    _, done = join(sm, "a", 10_200)
    assert joins(done)["a"].generation_id == gen + 1 and joins(done)["a"].members == (("a", b"meta"),)


def test_rebalance_timeout_drops_members_that_do_not_rejoin() -> None:
    sm = GroupStateMachine()
    gen = stable_pair(sm)
    join(sm, "", 100, new_id="c")                   # c joins: a and b must rejoin
    join(sm, "a", 200)
    for t in (9_000, 18_000, 27_000):               # b heartbeats in time but never rejoins
        assert sm.heartbeat(G, gen, "b", t) == REBALANCE_IN_PROGRESS
        assert sm.tick(t + 1) == []
    done = sm.tick(30_100)                          # rebalance timeout (30 s from 100)
    assert set(joins(done)) == {"a", "c"} and "b" not in sm.groups[G].members


def test_leave_rebalances_and_pending_sync_is_told() -> None:
    sm = GroupStateMachine()
    gen = stable_pair(sm)
    code, done = sm.leave(G, "b", 100)
    assert code == NONE and sm.groups[G].state == PREPARING_REBALANCE
    _, done = join(sm, "a", 110)
    assert joins(done)["a"].generation_id == gen + 1
    assert sm.leave(G, "nobody", 120)[0] == UNKNOWN_MEMBER_ID


def test_member_leaving_while_follower_waits_for_sync() -> None:
    sm = GroupStateMachine()
    join(sm, "", 0, new_id="a")
    _, done = join(sm, "", 0, new_id="b")
    # a has not synced yet: the group is in CompletingRebalance after the second join completes.
    join(sm, "a", 1)
    gen = sm.groups[G].generation_id
    assert sm.sync(G, gen, "b", {}, 2)[0] is None
    _, done = sm.leave(G, "a", 3)
    assert syncs(done) == {"b": SyncGroupResult(REBALANCE_IN_PROGRESS)}


def test_commit_is_fenced_by_generation_and_member() -> None:
    sm = GroupStateMachine()
    gen = stable_pair(sm)
    assert sm.commit_offsets(G, gen, "a") == NONE
    assert sm.commit_offsets(G, gen - 1, "a") == ILLEGAL_GENERATION
    assert sm.commit_offsets(G, gen, "zombie") == UNKNOWN_MEMBER_ID
    assert sm.commit_offsets(G, -1, "") == UNKNOWN_MEMBER_ID    # the admin path needs an Empty group
    assert sm.sync(G, gen - 1, "a", {}, 0)[0] == SyncGroupResult(ILLEGAL_GENERATION)
    assert sm.heartbeat(G, gen - 1, "a", 0) == ILLEGAL_GENERATION
    join(sm, "", 100, new_id="c")
    assert sm.commit_offsets(G, gen, "a") == NONE                # PreparingRebalance: old generation may commit


def test_commit_refused_while_awaiting_assignment() -> None:
    sm = GroupStateMachine()
    _, done = join(sm, "", 0, new_id="a")
    assert sm.commit_offsets(G, joins(done)["a"].generation_id, "a") == REBALANCE_IN_PROGRESS


def test_offsets_survive_members_and_reload() -> None:
    sm = GroupStateMachine()
    sm.load(G, {("t", 0): 5})
    assert sm.fetch_offsets(G, [("t", 0), ("t", 1)]) == {("t", 0): 5}
    gen = stable_pair(sm)
    sm.offsets_committed(G, {("t", 1): 7})
    sm.leave(G, "a", 100)
    sm.leave(G, "b", 100)
    assert sm.groups[G].state == EMPTY and sm.groups[G].generation_id == gen + 1
    assert sm.fetch_offsets(G, None) == {("t", 0): 5, ("t", 1): 7}
    assert sm.commit_offsets(G, -1, "") == NONE


def test_unload_answers_parked_requests_not_coordinator() -> None:
    sm = GroupStateMachine()
    stable_pair(sm)
    join(sm, "", 100, new_id="c")
    done = sm.unload(G, 200)
    assert joins(done)["c"].error_code == errors.NotCoordinatorError.code
    assert not sm.is_loaded(G)


def test_unknown_member_and_bad_session_timeout() -> None:
    sm = GroupStateMachine()
    answer, _ = join(sm, "ghost", 0)
    assert answer is not None and answer.error_code == UNKNOWN_MEMBER_ID
    answer, _ = join(sm, "", 0, new_id="a", session=10)
    assert answer is not None and answer.error_code == errors.InvalidSessionTimeoutError.code


def test_retried_join_supersedes_the_parked_one() -> None:
    sm = GroupStateMachine()
    stable_pair(sm)
    join(sm, "", 100, new_id="c")
    join(sm, "b", 110)
    _, done = join(sm, "b", 120)
    assert joins(done)["b"].error_code == REBALANCE_IN_PROGRESS


def test_group_size_is_bounded() -> None:
    sm = GroupStateMachine(CoordinatorLimits(max_group_size=2))
    join(sm, "", 0, new_id="a")
    join(sm, "", 0, new_id="b")
    answer, _ = join(sm, "", 0, new_id="c")
    assert answer is not None and answer.error_code == errors.GroupMaxSizeReachedError.code
    assert set(sm.groups[G].members) == {"a", "b"}


def test_coordinator_choice_is_deterministic() -> None:
    assert coordinator_for("g", [3, 1, 2]) == coordinator_for("g", [1, 2, 3])
    assert coordinator_for("g", []) == -1
    owners = {coordinator_for(f"group-{i}", [1, 2, 3]) for i in range(50)}
    assert owners == {1, 2, 3}


# ------------------------------------------------------------------ Kafka 2.x behaviours real clients meet


def join_v4(sm: GroupStateMachine, member: str, now: int, new_id: str = "",
            session: int = 10_000) -> tuple[JoinGroupResult | None, list[Completion]]:
    return sm.join(G, member, new_id or member, "client", "host", "consumer", PROTOS, session, 30_000, now,
                   require_known_member_id=True)


def test_join_v4_hands_out_a_member_id_first_and_admits_it_on_the_next_join() -> None:
    sm = GroupStateMachine()
    answer, done = join_v4(sm, "", 0, new_id="a")
    assert answer == JoinGroupResult(MEMBER_ID_REQUIRED, member_id="a") and not done
    assert sm.groups[G].members == {} and sm.groups[G].state == EMPTY
    answer, done = join_v4(sm, "a", 10)
    assert answer is None and joins(done)["a"].error_code == NONE and joins(done)["a"].leader_id == "a"


def test_a_pending_member_id_holds_the_join_barrier_until_it_joins() -> None:
    sm = GroupStateMachine()
    stable_pair(sm)
    join(sm, "", 100, new_id="c")                       # a rebalance starts
    join_v4(sm, "", 110, new_id="d")                   # d asked for an id and is coming back with it
    _, done_a = join(sm, "a", 120)
    _, done_b = join(sm, "b", 130)
    assert done_a == [] and done_b == [] and sm.groups[G].state == PREPARING_REBALANCE
    _, done = join_v4(sm, "d", 140)
    assert set(joins(done)) == {"a", "b", "c", "d"}


def test_a_pending_member_id_never_used_expires_after_the_session_timeout() -> None:
    sm = GroupStateMachine()
    stable_pair(sm)
    join(sm, "", 100, new_id="c")
    join_v4(sm, "", 110, new_id="d", session=6_000)
    join(sm, "a", 120)
    join(sm, "b", 130)
    assert sm.next_deadline_ms() == 6_110
    assert sm.tick(6_000) == []
    done = sm.tick(6_110)                               # d's id expired: the barrier completes without it
    assert set(joins(done)) == {"a", "b", "c"}
    answer, _ = join_v4(sm, "d", 6_200)
    assert answer is not None and answer.error_code == UNKNOWN_MEMBER_ID


def test_pending_member_ids_count_towards_the_group_size() -> None:
    sm = GroupStateMachine(CoordinatorLimits(max_group_size=2))
    join(sm, "", 0, new_id="a")
    join_v4(sm, "", 0, new_id="b")
    answer, _ = join_v4(sm, "", 0, new_id="c")
    assert answer is not None and answer.error_code == errors.GroupMaxSizeReachedError.code


def test_the_leader_rejoining_before_its_sync_gets_the_same_generation_back() -> None:
    """Kafka 2.x: in CompletingRebalance a join with unchanged metadata (the leader lost its join
    answer) is answered with the current generation, members included - not a new rebalance."""
    sm = GroupStateMachine()
    gen = stable_pair(sm)
    join(sm, "", 100, new_id="c")
    join(sm, "a", 110)
    _, done = join(sm, "b", 120)
    gen2 = joins(done)["a"].generation_id
    assert gen2 == gen + 1 and sm.groups[G].state == COMPLETING_REBALANCE
    answer, done = join(sm, "a", 130)
    assert done == [] and answer is not None and answer.generation_id == gen2
    assert [m for m, _ in answer.members] == ["a", "b", "c"]
    assert sm.groups[G].state == COMPLETING_REBALANCE


def test_a_heartbeat_of_an_old_generation_is_illegal_and_keeps_nobody_alive() -> None:
    sm = GroupStateMachine()
    gen = stable_pair(sm)
    join(sm, "", 100, new_id="c")                       # PreparingRebalance, generation still gen
    assert sm.heartbeat(G, gen - 1, "b", 5_000) == ILLEGAL_GENERATION
    assert sm.heartbeat(G, gen, "a", 5_000) == REBALANCE_IN_PROGRESS
    sm.tick(10_100)                                     # b last heard at 40 (its sync): expired anyway
    assert "b" not in sm.groups[G].members and "a" in sm.groups[G].members
