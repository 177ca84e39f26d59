"""Full garbage collections kept short on a broker with thousands of partitions.

Theory of operation
-------------------
CPython frees most objects by reference counting; its cyclic collector exists for reference
cycles. A full (generation 2) collection walks *every* tracked container object, and it runs on
whatever thread allocated last - here usually the broker's event loop, which stands still
meanwhile. A broker's long-lived objects grow with its partitions (a partition's state, its log and
segments, its fetch session entries: ~30 tracked objects each), so the pause grows with the
partitions that exist, not with the work at hand. Measured on one replica manager under produce
(the development machine): 64 ms at 3,000 partitions (127,000 tracked objects) and 164 ms at
10,000 (344,000), against 1.0 and 1.9 ms once they are frozen. A broker process with no partition
at all already has ~60,000 (its modules). SPEC S15 and the issue it came from allow no request to
hold the loop for more than ~10 ms.

``gc.freeze()`` moves every tracked object to a permanent generation that collections skip; reference
counting still frees frozen objects, only a frozen *cycle* that dies is kept. So:

* **Freeze after a long full collection**: one over ``pause_budget_ms`` freezes its survivors. They
  are what it just found alive, so no garbage is frozen with them, and later collections walk only
  what was allocated since: the request-by-request garbage, which dies young.
* **Freeze as partitions are added**: a broker that gains thousands of partitions (a topic created,
  a reassignment) would otherwise pay a long collection over the new ones first. Once
  ``freeze_after_added`` partitions came since the last freeze, it freezes at once (checked every
  second), without a collection: what is frozen with them is the cyclic garbage not yet collected
  at that moment, little next to them.
* **Thaw and collect** when frozen objects may have become cyclic garbage: partitions deleted from
  the broker (their state, log and sessions go) - ``thaw_after_removed`` of those frozen, at least
  ``thaw_min_removed`` - and otherwise every ``thaw_interval_ms`` for whatever else died
  (connections, sessions, groups). ``gc.unfreeze()`` then one full collection at once: one long
  pause, which frees the dead cycles and, being long, freezes the survivors again. Collecting at
  once, not at the next natural collection, so that a freeze for added partitions cannot come in
  between and freeze the dead cycles again.

``FullCollectionPolicy`` is the decision, pure (it takes ``now_ms`` and the partition counts);
``GcPauseGuard`` is the shell that listens to ``gc.callbacks`` and calls ``gc.freeze`` /
``gc.unfreeze`` / ``gc.collect`` on the event loop.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GcSettings:
    # The loop's budget for one request (SPEC S15): a full collection longer than that is one we
    # do not want to pay again for the same objects.
    pause_budget_ms: float = 10.0
    # ~30 tracked objects each: 100 partitions are a full collection of ~2 ms on the development machine.
    freeze_after_added: int = 100
    # Thaw once this share of the partitions frozen has been removed since the freeze ...
    thaw_after_removed: float = 0.1
    # ... but not for fewer than this many (a topic of a few partitions deleted is a few KB at most).
    thaw_min_removed: int = 100
    # And once an hour whatever happened: frozen connections, sessions and groups die too.
    thaw_interval_ms: int = 3_600_000


class Action(Enum):
    NONE = "none"
    FREEZE = "freeze"
    THAW = "thaw"  # unfreeze, then one full collection at once


@dataclass
class FullCollectionPolicy:
    """When to freeze and when to thaw (see the module's docstring). ``partitions`` is the count
    hosted now; ``removed_total`` counts the partitions removed since start (monotonic)."""

    settings: GcSettings
    frozen: bool = False
    frozen_at_ms: int = 0
    partitions_at_freeze: int = 0
    removed_at_freeze: int = 0
    # Removals count towards a thaw from the first freeze since the last thaw: a later freeze (for
    # added partitions) does not unfreeze what died before it.
    removed_at_first_freeze: int = 0

    def _froze(self, now_ms: int, partitions: int, removed_total: int) -> None:
        if not self.frozen:
            self.frozen_at_ms = now_ms  # the thaw interval runs from the first freeze since a thaw
            self.removed_at_first_freeze = removed_total
        self.frozen = True
        self.partitions_at_freeze = partitions
        self.removed_at_freeze = removed_total

    def on_full_collection(self, pause_ms: float, now_ms: int, partitions: int, removed_total: int) -> bool:
        """A full collection took ``pause_ms``: True when its survivors should be frozen."""
        if pause_ms <= self.settings.pause_budget_ms:
            return False
        self._froze(now_ms, partitions, removed_total)
        return True

    def on_tick(self, now_ms: int, partitions: int, removed_total: int) -> Action:
        """The periodic check (every second)."""
        if self.frozen:
            removed = removed_total - self.removed_at_first_freeze
            enough = max(self.settings.thaw_min_removed,
                         int(self.partitions_at_freeze * self.settings.thaw_after_removed))
            if removed >= enough or now_ms - self.frozen_at_ms >= self.settings.thaw_interval_ms:
                # Partitions are counted as added from here on (the thaw's collection may freeze).
                self.frozen = False
                self.partitions_at_freeze = partitions
                self.removed_at_freeze = removed_total
                return Action.THAW
        # Added since the last freeze: the partitions now, less those there were then net of removals.
        added = partitions - (self.partitions_at_freeze - (removed_total - self.removed_at_freeze))
        if added >= self.settings.freeze_after_added:
            self._froze(now_ms, partitions, removed_total)
            return Action.FREEZE
        return Action.NONE


@dataclass
class GcStats:
    """Full collections while serving; the one made before serving is apart (``startup_pause_ms``)."""
    full_collections: int = 0
    over_budget: int = 0
    longest_full_pause_ms: float = 0.0
    last_full_pause_ms: float = 0.0
    startup_pause_ms: float = 0.0
    freezes: int = 0
    thaws: int = 0


class GcPauseGuard:
    """The shell: times full collections through ``gc.callbacks`` (on any thread) and freezes on the
    event loop when the policy says so; ``tick`` (every second, on the loop) freezes for added
    partitions and thaws. ``partitions`` and ``removed_total`` read the broker's counts."""

    def __init__(self, loop: asyncio.AbstractEventLoop, partitions: Callable[[], int],
                 removed_total: Callable[[], int], settings: GcSettings = GcSettings(),
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.loop = loop
        self.partitions = partitions
        self.removed_total = removed_total
        self.policy = FullCollectionPolicy(settings)
        self.clock_ms = clock_ms
        self.stats = GcStats()
        self._started = 0.0
        self._installed = False
        self._before_serving = False

    def install(self) -> None:
        if not self._installed:
            gc.callbacks.append(self._on_gc)
            self._installed = True

    def collect_before_serving(self) -> None:
        """One full collection now, while nothing waits on the loop: the modules and logs just
        loaded are most of what a broker keeps, and they are frozen at once if it was long."""
        self._before_serving = True
        try:
            gc.collect()
        finally:
            self._before_serving = False

    def uninstall(self) -> None:
        """Stops listening and thaws what it froze (a process that goes on without the guard)."""
        if self._installed:
            gc.callbacks.remove(self._on_gc)
            self._installed = False
        if self.policy.frozen:
            self.policy.frozen = False
            gc.unfreeze()

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        # Collections never nest and run holding the GIL: one start time is enough.
        if phase == "start":
            self._started = time.perf_counter()
            return
        if info.get("generation") != 2:
            return
        pause_ms = (time.perf_counter() - self._started) * 1000.0
        if self._before_serving:
            self.stats.startup_pause_ms = pause_ms
        else:
            self.stats.full_collections += 1
            self.stats.over_budget += pause_ms > self.policy.settings.pause_budget_ms
            self.stats.last_full_pause_ms = pause_ms
            self.stats.longest_full_pause_ms = max(self.stats.longest_full_pause_ms, pause_ms)
        if self.policy.on_full_collection(pause_ms, self.clock_ms(), self.partitions(), self.removed_total()):
            # Not here: this may be any thread, in the middle of an allocation. On the loop, soon
            # after; what is allocated in between is frozen too, a handful of objects.
            try:
                self.loop.call_soon_threadsafe(self._freeze, pause_ms)
            except RuntimeError:
                self.policy.frozen = False  # the loop is closed: the process is ending

    def _freeze(self, pause_ms: float) -> None:
        if not self.policy.frozen:
            return  # thawed in between
        gc.freeze()
        self.stats.freezes += 1
        log.info("a full garbage collection took %.1f ms with %d partitions: its survivors are frozen",
                 pause_ms, self.partitions())

    def tick(self) -> None:
        removed_total = self.removed_total()
        action = self.policy.on_tick(self.clock_ms(), self.partitions(), removed_total)
        if action is Action.FREEZE:
            gc.freeze()
            self.stats.freezes += 1
        elif action is Action.THAW:
            gc.unfreeze()
            self.stats.thaws += 1
            log.info("frozen objects thawed (partitions removed, or an hour passed): one full collection now")
            gc.collect()  # timed by _on_gc, and its survivors frozen again when it was long
