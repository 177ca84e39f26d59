"""The memory pool's arrival reservations (broker.network.request_guard.ByteBudget, SPEC S13.4, S15.2): a
frame holds only the bytes that arrived, a holder stays within its cap, a wait is bounded and takes
nothing, and frames reserved piecemeal never deadlock one another. Pure asyncio, no sockets."""

from __future__ import annotations

import asyncio
import random

from broker.network.request_guard import ByteBudget


class Holder:
    """Stands in for a connection."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


def test_only_the_bytes_that_arrived_are_held() -> None:
    """A connection announced a 100 MB frame and sent 10 bytes: it holds 10 bytes, and the rest of
    the pool serves the others at once (it held the whole announced size, and everyone waited)."""
    async def go() -> None:
        budget = ByteBudget(1000)
        stalled, other = Holder("stalled"), Holder("other")
        assert await budget.acquire_arrived(stalled, 10, 0)
        assert budget.in_flight == budget.held_by(stalled) == 10
        assert await budget.acquire_arrived(other, 990, 0)  # no wait: the pool has room for it
        budget.arrived_whole(other)
        await budget.release_held(other, 990)
        await budget.abandon(stalled)  # its connection closes mid-frame: the 10 bytes come back
        assert budget.in_flight == 0 and budget.held_by(stalled) == budget.held_by(other) == 0

    asyncio.run(go())


def test_bytes_that_do_not_fit_wait_for_room_and_a_timeout_takes_nothing() -> None:
    async def go() -> None:
        budget = ByteBudget(100)
        a, b = Holder("a"), Holder("b")
        assert await budget.acquire_arrived(a, 80, 1)
        budget.arrived_whole(a)  # a complete frame, being served: its bytes come back later
        assert not await budget.acquire_arrived(b, 30, 0.05)
        assert budget.in_flight == 80 and budget.held_by(b) == 0

        async def later() -> bool:
            return await budget.acquire_arrived(b, 30, 5)

        task = asyncio.create_task(later())
        await asyncio.sleep(0.05)
        assert not task.done()
        await budget.release_held(a, 80)
        assert await asyncio.wait_for(task, 5)
        assert budget.in_flight == budget.held_by(b) == 30

    asyncio.run(go())


def test_a_holder_never_holds_more_than_its_cap() -> None:
    """The per-connection cap counts its answers not yet written too: past it the holder waits for
    its own bytes to come back, whatever room the pool has. A connection before authentication
    passes its small frame limit as its cap."""
    async def go() -> None:
        budget = ByteBudget(10_000)
        conn = Holder("conn")
        assert await budget.acquire_arrived(conn, 600, 1, cap=1000)
        budget.arrived_whole(conn)  # a produce whose answer waits, holding its 600 bytes
        assert not await budget.acquire_arrived(conn, 500, 0.05, cap=1000)
        assert budget.held_by(conn) == 600

        async def next_frame() -> bool:
            return await budget.acquire_arrived(conn, 500, 5, cap=1000)

        task = asyncio.create_task(next_frame())
        await asyncio.sleep(0.05)
        assert not task.done()
        await budget.release_held(conn, 600)  # its answer is written
        assert await asyncio.wait_for(task, 5)
        assert budget.held_by(conn) == 500
        budget.arrived_whole(conn)
        await budget.release_held(conn, 500)
        # Before authentication: a frame of at most 2048 bytes, so never more than that held.
        pre_auth = Holder("pre-auth")
        assert await budget.acquire_arrived(pre_auth, 2000, 0, cap=2048)
        assert not await budget.acquire_arrived(pre_auth, 49, 0.01, cap=2048)
        assert budget.held_by(pre_auth) == 2000
        await budget.abandon(pre_auth)
        assert budget.in_flight == 0

    asyncio.run(go())


def test_a_stalled_sender_is_not_let_past_and_no_one_waits_on_bytes_it_did_not_send() -> None:
    """A partial frame whose sender stopped holds what it sent; the others wait only for room that
    real bytes take (the pool is not stretched for them: the stalled frame's bytes may come back)."""
    async def go() -> None:
        budget = ByteBudget(100)
        stalled, other = Holder("stalled"), Holder("other")
        assert await budget.acquire_arrived(stalled, 90, 0)  # 90 bytes really arrived, then nothing
        assert not await budget.acquire_arrived(other, 20, 0.05)

        async def later() -> bool:
            return await budget.acquire_arrived(other, 20, 5)

        task = asyncio.create_task(later())
        await asyncio.sleep(0.02)
        await budget.abandon(stalled)  # request.timeout.ms: its connection is closed
        assert await asyncio.wait_for(task, 5)
        assert budget.in_flight == 20

    asyncio.run(go())


def test_partial_frames_that_fill_the_pool_do_not_wait_for_each_other() -> None:
    """Two frames hold the whole pool between them, each waiting for room for its next bytes:
    nothing would ever come back, so one of them goes past the limit (by one frame at most)."""
    async def go() -> None:
        budget = ByteBudget(100)
        a, b = Holder("a"), Holder("b")
        assert await budget.acquire_arrived(a, 60, 1)
        assert await budget.acquire_arrived(b, 40, 1)
        done: list[str] = []

        async def finish(h: Holder, chunks: list[int]) -> None:
            for n in chunks:
                assert await budget.acquire_arrived(h, n, 5)
            budget.arrived_whole(h)
            done.append(h.name)

        ta = asyncio.create_task(finish(a, [30, 30]))
        tb = asyncio.create_task(finish(b, [30]))
        await asyncio.wait([ta, tb], timeout=5, return_when=asyncio.FIRST_COMPLETED)
        assert len(done) == 1, "one frame was let past the limit"
        first = a if done == ["a"] else b
        assert budget.in_flight == 100 + (60 if first is a else 30)  # over by that frame's rest only
        await budget.release_held(first, budget.held_by(first))  # served: its bytes come back
        await asyncio.wait_for(asyncio.gather(ta, tb), 5)
        for h in (a, b):
            await budget.release_held(h, budget.held_by(h))
        assert budget.in_flight == 0

    asyncio.run(go())


def test_a_frame_larger_than_the_pool_goes_through_alone() -> None:
    async def go() -> None:
        budget = ByteBudget(100)
        big = Holder("big")
        for _ in range(3):
            assert await budget.acquire_arrived(big, 60, 1)
        budget.arrived_whole(big)
        assert budget.in_flight == 180
        await budget.release_held(big, 180)
        assert budget.in_flight == 0 and budget.held_by(big) == 0
        unbounded = ByteBudget(-1)
        assert await unbounded.acquire_arrived(big, 10**9, 0)

    asyncio.run(go())


def test_room_that_is_there_is_taken_without_yielding_to_the_loop() -> None:
    """Every Kafka-listener frame reserves its bytes: when they fit, that costs no loop iteration."""
    async def go() -> list[str]:
        budget = ByteBudget(100)
        order: list[str] = []
        asyncio.get_running_loop().call_soon(order.append, "loop ran")
        h = Holder("h")
        assert await budget.acquire_arrived(h, 60, 1, cap=100)
        assert await budget.acquire_arrived(h, 40, 1, cap=100)
        budget.arrived_whole(h)
        order.append("acquired")
        await budget.release_held(h, 100)
        await asyncio.sleep(0)
        return order

    assert asyncio.run(go()) == ["acquired", "loop ran"]


def test_many_connections_sending_frames_in_pieces_all_finish_within_one_frame_over_the_limit() -> None:
    """Random frames in random pieces over many holders sharing a small pool, some served slowly:
    every frame completes (no deadlock, no timeout), the pool never exceeds its limit by more than
    one frame, and every byte comes back."""
    async def go(seed: int) -> None:
        rng = random.Random(seed)
        limit, max_frame = 1000, 700
        budget = ByteBudget(limit)
        peak = 0

        async def connection(h: Holder) -> None:
            nonlocal peak
            for _ in range(15):
                size = rng.randint(1, max_frame)
                got = 0
                while got < size:
                    n = min(size - got, rng.randint(1, 300))
                    assert await budget.acquire_arrived(h, n, 10, cap=max_frame), f"{h} timed out"
                    got += n
                    peak = max(peak, budget.in_flight)
                    if rng.random() < 0.5:
                        await asyncio.sleep(0)
                budget.arrived_whole(h)
                await asyncio.sleep(rng.choice([0, 0, 0.001]))  # served, then answered
                await budget.release_held(h, size)

        await asyncio.wait_for(asyncio.gather(*(connection(Holder(f"c{i}")) for i in range(12))), 30)
        assert budget.in_flight == 0
        assert peak <= limit + max_frame, peak

    for seed in range(5):
        asyncio.run(go(seed))
