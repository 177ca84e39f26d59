"""Full garbage collections kept short on a broker with thousands of partitions.

Theory of operation
-------------------
CPython frees most objects by reference counting; its cyclic collector exists for reference
cycles. A full (generation 2) collection walks *every* tracked container object, and it runs on
whatever thread allocated last - here usually the broker's event loop, which stands still
meanwhile. A broker's long-lived objects grow with its partitions (a partition's state, its log and
segments, its fetch session entries: ~40 tracked objects each), so the pause grows with the
partitions that exist, not with the work at hand: 55-64 ms was measured at 3,000 partitions
(118,000 tracked objects on one replica manager), and it scales linearly from there. SPEC S15 and
the issue it came from allow no request to hold the loop for more than ~10 ms.

``gc.freeze()`` moves every tracked object to a permanent generation that collections skip.
Freezing right after a full collection freezes exactly what that collection found alive, so no
garbage is frozen with it, and every later collection walks only what was allocated since: the
request-by-request garbage, which dies young. So the policy here is:

* **Freeze** after a full collection that took longer than ``pause_budget_ms``. One long pause is
  paid, once, and then never again for those objects.
* **Thaw** (``gc.unfreeze()``) when frozen objects may have become cyclic garbage: a frozen cycle is
  never collected, though reference counting still frees everything that is not in a cycle. That
  happens when partitions are deleted or move away (their state, log and sessions go), so after
  ``thaw_after_removed`` partitions are gone since the freeze (at least ``thaw_min_removed``), and
  otherwise every ``thaw_interval_ms`` for whatever else died (connections, sessions, groups).
  The next full collection then walks everything once, frees the dead cycles, and - being long -
  freezes the survivors again.

``FullCollectionPolicy`` is the decision, pure (it takes ``now_ms``); ``GcPauseGuard`` is the shell
that listens to ``gc.callbacks`` and calls ``gc.freeze`` / ``gc.unfreeze`` on the event loop.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GcSettings:
    # The loop's budget for one request (SPEC S15): a full collection longer than that is one we
    # do not want to pay again for the same objects.
    pause_budget_ms: float = 10.0
    # Thaw once this share of the partitions frozen has been removed since the freeze ...
    thaw_after_removed: float = 0.1
    # ... but not for fewer than this many (a topic of a few partitions deleted is a few KB at most).
    thaw_min_removed: int = 100
    # And once an hour whatever happened: frozen connections, sessions and groups die too.
    thaw_interval_ms: int = 3_600_000


@dataclass
class FullCollectionPolicy:
    """When to freeze and when to thaw (see the module's docstring). The counts are monotonic
    totals kept by the caller: partitions hosted now, and partitions removed since start."""

    settings: GcSettings
    frozen: bool = False
    frozen_at_ms: int = 0
    partitions_at_freeze: int = 0
    removed_at_freeze: int = 0

    def on_full_collection(self, pause_ms: float, now_ms: int, partitions: int, removed_total: int) -> bool:
        """A full collection took ``pause_ms``: True when its survivors should be frozen."""
        if pause_ms <= self.settings.pause_budget_ms:
            return False
        self.frozen = True
        self.frozen_at_ms = now_ms
        self.partitions_at_freeze = partitions
        self.removed_at_freeze = removed_total
        return True

    def on_tick(self, now_ms: int, removed_total: int) -> bool:
        """Periodic check: True when the frozen objects should be thawed."""
        if not self.frozen:
            return False
        removed = removed_total - self.removed_at_freeze
        enough = max(self.settings.thaw_min_removed, int(self.partitions_at_freeze * self.settings.thaw_after_removed))
        if removed >= enough or now_ms - self.frozen_at_ms >= self.settings.thaw_interval_ms:
            self.frozen = False
            return True
        return False


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
    """The shell: times full collections through ``gc.callbacks`` (on any thread), freezes on the
    event loop when the policy says so, and thaws from ``tick`` (called periodically on the loop).
    ``partitions`` and ``removed_total`` read the replica manager's counts."""

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
        if self.policy.on_tick(self.clock_ms(), self.removed_total()):
            gc.unfreeze()
            self.stats.thaws += 1
            log.info("frozen objects thawed (%d partitions removed since the freeze)",
                     self.removed_total() - self.policy.removed_at_freeze)
