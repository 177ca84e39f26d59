"""Full garbage collections kept short (broker.server.gc_pauses): the policy (pure), and the guard
with CPython's real collector - a long full collection's survivors are frozen, and later full
collections no longer walk them; deleted partitions thaw them."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from broker.server.gc_pauses import Action, FullCollectionPolicy, GcPauseGuard, GcSettings

S = GcSettings(pause_budget_ms=10.0, freeze_after_added=100, thaw_after_removed=0.1, thaw_min_removed=100,
               thaw_interval_ms=3_600_000)
N, F, T = Action.NONE, Action.FREEZE, Action.THAW


def test_a_full_collection_within_budget_freezes_nothing() -> None:
    p = FullCollectionPolicy(S)
    assert not p.on_full_collection(9.9, now_ms=0, partitions=50, removed_total=0)
    assert not p.frozen and p.on_tick(now_ms=10**9, partitions=50, removed_total=0) is N


def test_a_long_full_collection_freezes_and_deleted_partitions_thaw() -> None:
    p = FullCollectionPolicy(S)
    assert p.on_full_collection(150.0, now_ms=1_000, partitions=10_000, removed_total=40)
    # 10% of the 10,000 partitions frozen: 999 removed since is not yet enough, 1,000 is.
    assert p.on_tick(now_ms=2_000, partitions=10_000 - 999, removed_total=40 + 999) is N
    assert p.on_tick(now_ms=2_000, partitions=10_000 - 1_000, removed_total=40 + 1_000) is T
    assert not p.frozen
    assert p.on_tick(now_ms=3_000, partitions=10_000 - 1_000, removed_total=40 + 1_000) is N, "thawed once"


def test_few_partitions_frozen_thaw_after_the_minimum_removed() -> None:
    p = FullCollectionPolicy(S)
    assert p.on_full_collection(11.0, now_ms=0, partitions=500, removed_total=0)
    assert p.on_tick(now_ms=1, partitions=401, removed_total=99) is N  # 10% of 500 is 50: the floor of 100 holds
    assert p.on_tick(now_ms=1, partitions=400, removed_total=100) is T


def test_frozen_objects_are_thawed_after_the_interval_whatever_happened() -> None:
    p = FullCollectionPolicy(S)
    assert p.on_full_collection(50.0, now_ms=1_000, partitions=3_000, removed_total=0)
    assert p.on_tick(now_ms=1_000 + 3_599_999, partitions=3_000, removed_total=0) is N
    assert p.on_tick(now_ms=1_000 + 3_600_000, partitions=3_000, removed_total=0) is T


def test_the_interval_runs_from_the_first_freeze_after_a_thaw() -> None:
    p = FullCollectionPolicy(S)
    p.on_full_collection(50.0, now_ms=0, partitions=3_000, removed_total=0)
    assert p.on_tick(now_ms=60_000, partitions=3_100, removed_total=0) is F  # growth: frozen again
    assert p.on_tick(now_ms=3_600_000, partitions=3_100, removed_total=0) is T  # an hour after the first
    p.on_full_collection(50.0, now_ms=3_600_000, partitions=3_100, removed_total=0)
    assert p.on_tick(now_ms=3_600_000 + 60_000, partitions=3_100, removed_total=0) is N


def test_removals_count_towards_a_thaw_across_the_freezes_for_added_partitions() -> None:
    """Deleted, then others created (a freeze for them): the dead ones are still frozen."""
    p = FullCollectionPolicy(S)
    p.on_full_collection(50.0, now_ms=0, partitions=500, removed_total=0)
    assert p.on_tick(now_ms=1, partitions=440, removed_total=60) is N
    assert p.on_tick(now_ms=2, partitions=540, removed_total=60) is F  # 100 added
    assert p.on_tick(now_ms=3, partitions=500, removed_total=100) is T  # 60 + 40 removed since the first


def test_added_partitions_are_frozen_every_hundred_without_a_collection() -> None:
    """A topic of 1,000 partitions created on a broker with nothing frozen yet: a freeze each
    time 100 more came, counting partitions removed in between as added-then-gone."""
    p = FullCollectionPolicy(S)
    assert p.on_tick(now_ms=0, partitions=99, removed_total=0) is N
    assert p.on_tick(now_ms=1_000, partitions=100, removed_total=0) is F and p.frozen
    assert p.on_tick(now_ms=2_000, partitions=150, removed_total=0) is N
    # 49 deleted since the freeze and 140 left: 89 were added.
    assert p.on_tick(now_ms=3_000, partitions=140, removed_total=49) is N
    assert p.on_tick(now_ms=4_000, partitions=151, removed_total=49) is F  # 100 added
    assert p.partitions_at_freeze == 151 and p.removed_at_freeze == 49


def test_after_a_thaw_partitions_count_as_added_from_the_thaw() -> None:
    p = FullCollectionPolicy(S)
    p.on_full_collection(50.0, now_ms=0, partitions=1_000, removed_total=0)
    assert p.on_tick(now_ms=1, partitions=900, removed_total=100) is T
    # The thaw's collection was short (no freeze): 99 created since the thaw are not yet 100.
    assert p.on_tick(now_ms=2, partitions=999, removed_total=100) is N
    assert p.on_tick(now_ms=3, partitions=1_000, removed_total=100) is F


class Counts:
    partitions = 50  # 10% of it is under the floor of 10 removed the guard below is given
    removed = 0


@pytest.fixture
def guard() -> Iterator[tuple[GcPauseGuard, asyncio.AbstractEventLoop, Counts]]:
    loop = asyncio.new_event_loop()
    counts = Counts()
    # A budget of 0 ms: every full collection is "long", so that the test does not depend on
    # this machine's speed (the figure itself is the bench's).
    g = GcPauseGuard(loop, lambda: counts.partitions, lambda: counts.removed,
                     GcSettings(pause_budget_ms=0.0, thaw_min_removed=10), clock_ms=lambda: 0)
    g.policy.partitions_at_freeze = counts.partitions  # none "added" unless a test adds them
    g.install()
    try:
        yield g, loop, counts
    finally:
        g.uninstall()
        gc.unfreeze()
        loop.close()


def run_pending(loop: asyncio.AbstractEventLoop) -> None:
    loop.run_until_complete(asyncio.sleep(0))


def test_the_survivors_of_a_long_full_collection_are_frozen_and_not_walked_again(
        guard: tuple[GcPauseGuard, asyncio.AbstractEventLoop, Counts]) -> None:
    g, loop, counts = guard
    # Tracked containers, as a broker's state (not dicts of ints: the collector untracks those).
    long_lived = [[i, []] for i in range(50_000)]
    assert gc.is_tracked(long_lived[0])
    gc.collect()
    assert g.stats.full_collections >= 1 and g.stats.freezes == 0, "frozen on the loop, not inside the collector"
    run_pending(loop)
    assert g.stats.freezes >= 1
    assert gc.get_freeze_count() >= len(long_lived)
    # The next full collection walks only what came after the freeze: the frozen dicts are not
    # among the objects the collector tracks in its generations.
    tracked = {id(o) for o in gc.get_objects()}
    assert not any(id(d) in tracked for d in long_lived[:100])
    # Partitions deleted: the next tick thaws, and the collector walks them again.
    counts.removed = 10
    g.tick()
    assert g.stats.thaws == 1 and gc.get_freeze_count() == 0
    tracked = {id(o) for o in gc.get_objects()}
    assert all(id(d) in tracked for d in long_lived[:100])


def test_a_frozen_cycle_is_collected_after_the_thaw(
        guard: tuple[GcPauseGuard, asyncio.AbstractEventLoop, Counts]) -> None:
    """What the thaw is for: a cycle frozen while alive is never freed while frozen."""
    import weakref

    g, loop, counts = guard

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a  # type: ignore[attr-defined]
    ref = weakref.ref(a)
    gc.collect()
    run_pending(loop)
    assert g.policy.frozen
    del a, b
    gc.collect()
    assert ref() is not None, "frozen: the collector does not see the dead cycle"
    counts.removed = 10
    g.tick()
    gc.collect()
    assert ref() is None


def test_uninstall_thaws_and_stops_listening(guard: tuple[GcPauseGuard, asyncio.AbstractEventLoop, Counts]) -> None:
    g, loop, _ = guard
    gc.collect()
    run_pending(loop)
    assert gc.get_freeze_count() > 0
    g.uninstall()
    assert gc.get_freeze_count() == 0
    before = g.stats.full_collections
    gc.collect()
    assert g.stats.full_collections == before


def test_the_collection_before_serving_is_counted_apart_and_freezes_too(
        guard: tuple[GcPauseGuard, asyncio.AbstractEventLoop, Counts]) -> None:
    g, loop, _ = guard
    g.collect_before_serving()
    assert g.stats.startup_pause_ms > 0
    assert g.stats.full_collections == 0 and g.stats.longest_full_pause_ms == 0
    run_pending(loop)
    assert g.stats.freezes == 1 and gc.get_freeze_count() > 0
    gc.collect()
    assert g.stats.full_collections == 1 and g.stats.over_budget == 1, "a budget of 0 ms: every one is over"


def test_a_tick_after_a_hundred_added_partitions_freezes_without_a_collection(
        guard: tuple[GcPauseGuard, asyncio.AbstractEventLoop, Counts]) -> None:
    g, _, counts = guard
    g.tick()
    assert g.stats.freezes == 0 and gc.get_freeze_count() == 0
    counts.partitions += 100
    collections = g.stats.full_collections
    g.tick()
    assert g.stats.freezes == 1 and gc.get_freeze_count() > 0
    assert g.stats.full_collections == collections
