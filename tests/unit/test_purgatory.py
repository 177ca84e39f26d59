"""broker.replication.purgatory: delayed operations wake on notify (re-checking their condition), time out,
and clean up after themselves (every parked follower fetch and acks=all produce waits here)."""

from __future__ import annotations

import asyncio

from broker.replication.purgatory import Purgatory


def test_notify_wakes_a_waiter_whose_condition_now_holds() -> None:
    async def main() -> None:
        p = Purgatory("fetch")
        ready = [False]
        task = asyncio.create_task(p.wait_until(["t-0"], lambda: ready[0], 30.0))
        await asyncio.sleep(0)
        assert len(p) == 1
        ready[0] = True
        p.notify("t-0")
        assert await asyncio.wait_for(task, 5) is True
        assert len(p) == 0

    asyncio.run(main())


def test_a_waiter_whose_condition_still_fails_waits_on_and_times_out() -> None:
    async def main() -> None:
        p = Purgatory("produce")
        checks = [0]

        def condition() -> bool:
            checks[0] += 1
            return False

        task = asyncio.create_task(p.wait_until(["a", "b"], condition, 0.05))
        await asyncio.sleep(0)
        p.notify("b")  # re-checked, still not ready: parked again on both keys
        for _ in range(3):
            await asyncio.sleep(0)
        assert len(p) == 1 and checks[0] == 2
        assert await asyncio.wait_for(task, 5) is False
        assert len(p) == 0 and p._watchers == {}

    asyncio.run(main())


def test_a_cancelled_waiter_leaves_nothing_behind() -> None:
    async def main() -> None:
        p = Purgatory("fetch")
        task = asyncio.create_task(p.wait_until(["k"], lambda: False, 30.0))
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert len(p) == 0 and p._watchers == {}
        p.notify("k")  # nothing to wake, nothing raised

    asyncio.run(main())
