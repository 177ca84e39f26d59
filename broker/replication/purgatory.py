"""Delayed operations (Kafka's DelayedOperationPurgatory), for one asyncio loop.

A delayed fetch or acks=all produce waits until its condition holds or its
time runs out. Instead of a timer wheel per operation, a waiter registers on
the keys (topic-partitions) whose change may complete it; ``notify(key)``
wakes every waiter on that key, which re-checks its condition (tryComplete).
Everything runs on the broker's event loop, so check-then-watch needs no lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable


class Purgatory:
    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[Hashable, set[asyncio.Future[bool | None]]] = {}
        self._parked = 0

    def __len__(self) -> int:
        """Distinct operations waiting (an operation watching several keys counts once): a count
        kept as they park and leave, not a walk over every watched key."""
        return self._parked

    def notify(self, key: Hashable) -> None:
        for fut in self._watchers.pop(key, ()):
            if not fut.done():
                fut.set_result(None)

    def notify_all(self) -> None:
        for key in list(self._watchers):
            self.notify(key)

    async def wait_until(self, keys: Iterable[Hashable], condition: Callable[[], bool], timeout_s: float) -> bool:
        """True once ``condition()`` holds; False if ``timeout_s`` passes first."""
        keys = list(keys)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout_s)
        while True:
            if condition():
                return True
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            fut: asyncio.Future[bool | None] = loop.create_future()
            for k in keys:
                self._watchers.setdefault(k, set()).add(fut)
            self._parked += 1
            # The deadline resolves the same future a notify would, with True: no asyncio.wait_for,
            # whose waiter future and callbacks were a few percent of a leader's loop at one Produce
            # per record (librdkafka, thousands of partitions).
            expiry = loop.call_at(deadline, _expire, fut)
            try:
                expired = await fut
            finally:
                expiry.cancel()
                self._parked -= 1
                for k in keys:
                    ws = self._watchers.get(k)
                    if ws is not None:
                        ws.discard(fut)
                        if not ws:
                            del self._watchers[k]
            if expired:  # the loop's timers may run a hair early: the deadline is the deadline
                return condition()


def _expire(fut: asyncio.Future[bool | None]) -> None:
    if not fut.done():
        fut.set_result(True)
