"""Static group membership (KIP-345) in the group coordinator's pure core, and Kafka's
group.min/max.session.timeout.ms bounds (issue 30)."""

from __future__ import annotations

from broker.coordinator.group.group_state import (
    FENCED_INSTANCE_ID,
    INVALID_SESSION_TIMEOUT,
    JOIN,
    NONE,
    PREPARING_REBALANCE,
    STABLE,
    SYNC,
    UNKNOWN_MEMBER_ID,
    Completion,
    CoordinatorLimits,
    GroupStateMachine,
    JoinGroupResult,
    SyncGroupResult,
)

G = "g"
PROTOS = [("range", b"meta")]


def join(sm: GroupStateMachine, member: str, now: int, new_id: str, instance: str = "",
         protocols: list[tuple[str, bytes]] | None = None) -> tuple[JoinGroupResult | None, list[Completion]]:
    # JoinGroup v5 semantics: require_known_member_id is set, as every v4+ client's join.
    return sm.join(G, member, new_id, "client", "host", "consumer", protocols or PROTOS, 10_000, 30_000, now,
                   require_known_member_id=True, group_instance_id=instance)


def joins(done: list[Completion]) -> dict[str, JoinGroupResult]:
    return {c.member_id: c.result for c in done if c.api == JOIN and isinstance(c.result, JoinGroupResult)}


def syncs(done: list[Completion]) -> dict[str, SyncGroupResult]:
    return {c.member_id: c.result for c in done if c.api == SYNC and isinstance(c.result, SyncGroupResult)}


def stable_static_pair(sm: GroupStateMachine) -> int:
    """Static members a1 (instance "ia", leader) and b1 (instance "ib") in a Stable generation."""
    answer, done = join(sm, "", 0, "a1", "ia")
    assert answer is None, "a static member is not asked for a member id first (KIP-345 skips KIP-394)"
    gen = joins(done)["a1"].generation_id
    sm.sync(G, gen, "a1", {"a1": b"A"}, 0, "ia")
    join(sm, "", 10, "b1", "ib")
    _, done = join(sm, "a1", 20, "unused", "ia")
    results = joins(done)
    gen2 = results["a1"].generation_id
    assert results["a1"].instance_ids == (("a1", "ia"), ("b1", "ib"))
    sm.sync(G, gen2, "b1", {}, 30, "ib")
    synced, _ = sm.sync(G, gen2, "a1", {"a1": b"A0", "b1": b"B1"}, 40, "ia")
    assert synced == SyncGroupResult(NONE, b"A0") and sm.groups[G].state == STABLE
    return gen2


def test_a_restarted_static_member_takes_its_place_back_without_a_rebalance() -> None:
    sm = GroupStateMachine()
    gen = stable_static_pair(sm)
    # b restarts: it joins with no member id and its instance id.
    answer, done = join(sm, "", 100, "b2", "ib")
    assert answer is not None and answer.error_code == NONE
    assert (answer.generation_id, answer.member_id, answer.leader_id) == (gen, "b2", "a1")
    assert sm.groups[G].state == STABLE and not done
    # Its SyncGroup gets the assignment its old id had; nobody else is asked to rejoin.
    assert sm.sync(G, gen, "b2", {}, 110, "ib")[0] == SyncGroupResult(NONE, b"B1")
    assert sm.heartbeat(G, gen, "a1", 120, "ia") == NONE
    assert sm.describe(G).members[1].group_instance_id == "ib"
    # The old id is fenced wherever it shows up.
    assert sm.heartbeat(G, gen, "b1", 130, "ib") == FENCED_INSTANCE_ID
    assert sm.sync(G, gen, "b1", {}, 130, "ib")[0] == SyncGroupResult(FENCED_INSTANCE_ID)
    assert sm.commit_offsets(G, gen, "b1", "ib") == FENCED_INSTANCE_ID
    assert join(sm, "b1", 130, "x", "ib")[0] == JoinGroupResult(FENCED_INSTANCE_ID, member_id="b1")
    assert sm.commit_offsets(G, gen, "b2", "ib") == NONE


def test_a_restarted_static_leader_is_answered_with_the_old_leader_id() -> None:
    """Kafka: a rejoining leader of a Stable group must not compute an assignment the group would
    never hand out, so its answer names the old leader id (not its own): it only syncs."""
    sm = GroupStateMachine()
    gen = stable_static_pair(sm)
    answer, _ = join(sm, "", 100, "a2", "ia")
    assert answer is not None and answer.leader_id == "a1" and answer.member_id == "a2" and answer.members == ()
    assert sm.groups[G].leader_id == "a2"
    assert sm.sync(G, gen, "a2", {}, 110, "ia")[0] == SyncGroupResult(NONE, b"A0")


def test_a_static_rejoin_that_changes_the_groups_protocol_rebalances() -> None:
    both = [("range", b"m"), ("roundrobin", b"m")]
    sm = GroupStateMachine()
    _, done = join(sm, "", 0, "a1", "ia", both)
    gen = joins(done)["a1"].generation_id
    sm.sync(G, gen, "a1", {"a1": b"A"}, 0, "ia")
    assert sm.groups[G].protocol == "range"
    # The same protocols in another order of a non-leader would not change the choice ...
    answer, _ = join(sm, "", 100, "a2", "ia", both)
    assert answer is not None and answer.error_code == NONE and sm.groups[G].state == STABLE
    # ... the leader now preferring roundrobin does: a rebalance, the member parked in it.
    answer, done = join(sm, "", 200, "a3", "ia", [("roundrobin", b"m"), ("range", b"m")])
    assert answer is None  # its join barrier (it is the only member) completes a new generation at once
    assert joins(done)["a3"].generation_id == gen + 1 and sm.groups[G].protocol == "roundrobin"
    assert sm.heartbeat(G, gen, "a2", 210, "ia") == FENCED_INSTANCE_ID


def test_a_static_rejoin_while_the_assignment_is_computed_rebalances_and_fences_the_old_sync() -> None:
    sm = GroupStateMachine()
    _, done = join(sm, "", 0, "a1", "ia")
    gen = joins(done)["a1"].generation_id
    join(sm, "", 10, "b1", "ib")
    _, done = join(sm, "a1", 20, "unused", "ia")
    gen = joins(done)["a1"].generation_id
    assert sm.sync(G, gen, "b1", {}, 30, "ib")[0] is None  # b1 parked for the assignment
    answer, done = join(sm, "", 40, "b2", "ib")
    assert answer is None and sm.groups[G].state == PREPARING_REBALANCE
    assert syncs(done)["b1"] == SyncGroupResult(FENCED_INSTANCE_ID)


def test_leave_by_instance_id_and_the_session_timeout_free_the_instance_id() -> None:
    sm = GroupStateMachine()
    gen = stable_static_pair(sm)
    assert sm.leave(G, "", 100, "nosuch")[0] == UNKNOWN_MEMBER_ID
    assert sm.leave(G, "someone-else", 100, "ib")[0] == FENCED_INSTANCE_ID
    code, _ = sm.leave(G, "", 100, "ib")  # the admin's removal of a static member
    assert code == NONE and "b1" not in sm.groups[G].members and "ib" not in sm.groups[G].static_members
    assert sm.groups[G].state == PREPARING_REBALANCE
    # A static member that stops heartbeating is removed as any other; its instance id is free.
    _, done = join(sm, "a1", 200, "unused", "ia")
    gen = joins(done)["a1"].generation_id
    sm.sync(G, gen, "a1", {"a1": b"A"}, 210, "ia")
    sm.tick(210 + 10_001)
    assert sm.groups[G].static_members == {}
    answer, done = join(sm, "", 30_000, "a9", "ia")
    assert answer is None and joins(done)["a9"].generation_id > gen


def test_a_new_static_member_with_a_member_id_it_never_had_is_unknown() -> None:
    sm = GroupStateMachine()
    assert join(sm, "made-up", 0, "x", "ia")[0] == JoinGroupResult(UNKNOWN_MEMBER_ID, member_id="made-up")


def test_session_timeouts_are_bounded_as_kafka_by_default() -> None:
    """Kafka's group.min.session.timeout.ms (6000) and group.max.session.timeout.ms (1800000)."""
    sm = GroupStateMachine()
    for session, code in [(3000, INVALID_SESSION_TIMEOUT), (5999, INVALID_SESSION_TIMEOUT), (6000, NONE),
                          (1_800_000, NONE), (1_800_001, INVALID_SESSION_TIMEOUT)]:
        answer, done = sm.join(G, "", f"m{session}", "c", "h", "consumer", PROTOS, session, 30_000, 0)
        got = answer.error_code if answer is not None else joins(done).get(f"m{session}", JoinGroupResult(NONE)).error_code
        assert got == code, session
    lowered = GroupStateMachine(CoordinatorLimits(min_session_timeout_ms=1000))
    answer, _ = lowered.join(G, "", "m", "c", "h", "consumer", PROTOS, 3000, 30_000, 0)
    assert answer is None or answer.error_code == NONE


def test_the_initial_rebalance_delay_gives_members_started_together_one_generation() -> None:
    """group.initial.rebalance.delay.ms (Kafka's InitialDelayedJoin): the first join of an Empty
    group completes after the delay, extended (within the rebalance timeout) while members keep
    arriving - three members started 2 s apart get generation 1 together."""
    sm = GroupStateMachine(CoordinatorLimits(initial_rebalance_delay_ms=3000))

    def dynamic_join(new_id: str, now: int) -> tuple[JoinGroupResult | None, list[Completion]]:
        return sm.join(G, "", new_id, "c", "h", "consumer", PROTOS, 10_000, 30_000, now)

    assert dynamic_join("m1", 0) == (None, [])
    assert sm.next_deadline_ms() == 3000
    assert dynamic_join("m2", 2000) == (None, [])
    assert sm.tick(2999) == []
    assert sm.tick(3000) == [], "a member joined during the delay: it is extended"
    assert dynamic_join("m3", 4000) == (None, [])
    assert sm.tick(6000) == [], "and again: m3 joined during the extension"
    done = sm.tick(9000)
    results = joins(done)
    assert set(results) == {"m1", "m2", "m3"} and {r.generation_id for r in results.values()} == {1}
    # Later rebalances are not delayed: a member leaving is answered by the others' rejoin at once.
    for mid in ("m1", "m2", "m3"):
        sm.sync(G, 1, mid, {}, 9000)
    sm.leave(G, "m3", 9100)
    sm.join(G, "m1", "x", "c", "h", "consumer", PROTOS, 10_000, 30_000, 9200)
    _, done = sm.join(G, "m2", "x", "c", "h", "consumer", PROTOS, 10_000, 30_000, 9300)
    assert {r.generation_id for r in joins(done).values()} == {2}


def test_the_initial_delay_is_bounded_by_the_rebalance_timeout() -> None:
    sm = GroupStateMachine(CoordinatorLimits(initial_rebalance_delay_ms=3000))
    now = 0
    sm.join(G, "", "m0", "c", "h", "consumer", PROTOS, 10_000, 7000, now)
    first_done: list[Completion] = []
    for i in range(1, 20):  # a member every second: the delay is extended until 7 s at most
        now = i * 1000
        _, done = sm.join(G, "", f"m{i}", "c", "h", "consumer", PROTOS, 10_000, 7000, now)
        first_done = done + sm.tick(now)
        if first_done:
            break
    assert now == 7000 and {r.generation_id for r in joins(first_done).values()} == {1}
