"""The socket server's read deadlines on one timer per connection (``ReadWatch``, issue 29):
``asyncio.timeout`` scheduled and cancelled a timer for every read, two per frame, ~6% of a
leader's loop at one Produce per record. The watch must bound reads as the timeouts did: a read
past its deadline is cancelled and reported as timed out, a cancellation from elsewhere is not
swallowed, and reads that complete keep the one timer. No socket: a StreamReader fed by hand, on
asyncio's loop and on uvloop's."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from broker.network.socket_server import ReadWatch

LOOPS = {"asyncio": asyncio.run, "uvloop": uvloop.run}


def run(kind: str, main: Callable[[], Awaitable[None]]) -> None:
    LOOPS[kind](main())


async def _bounded_read(watch: ReadWatch, reader: asyncio.StreamReader, deadline: float) -> bytes | None:
    """One read as ``SocketServer._serve_frames`` makes it: None when it timed out."""
    watch.arm(deadline)
    try:
        return await reader.readexactly(4)
    except asyncio.CancelledError:
        if watch.timed_out():
            return None
        raise
    finally:
        watch.disarm()


@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_a_read_past_its_deadline_is_cancelled_and_reported_timed_out(kind: str) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()

        async def serve() -> tuple[bytes | None, int]:
            task = asyncio.current_task()
            assert task is not None
            watch = ReadWatch(loop, task, horizon_s=10.0)
            try:
                got = await _bounded_read(watch, reader, loop.time() + 0.05)
                return got, task.cancelling()
            finally:
                watch.close()

        start = loop.time()
        got, cancelling = await asyncio.wait_for(asyncio.ensure_future(serve()), 5)
        assert got is None and cancelling == 0  # timed out, and the task is not left cancelling
        assert 0.04 <= loop.time() - start < 2.0
    run(kind, main)


@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_reads_that_complete_keep_one_timer_and_an_idle_deadline_beyond_the_horizon_holds(kind: str) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        task = asyncio.current_task()
        assert task is not None
        watch = ReadWatch(loop, task, horizon_s=0.02)  # the timer moves itself every 20 ms
        scheduled = []
        call_at = loop.call_at

        def counting_call_at(when: float, cb: Callable[..., None], *args: object,
                             **kw: object) -> asyncio.TimerHandle:
            if cb == watch._fire:
                scheduled.append(when)
            return call_at(when, cb, *args, **kw)  # type: ignore[arg-type]
        loop.call_at = counting_call_at  # type: ignore[method-assign]
        try:
            for i in range(1000):
                reader.feed_data(i.to_bytes(4, "big"))
                assert await _bounded_read(watch, reader, loop.time() + 30.0) == i.to_bytes(4, "big")
            assert len(scheduled) == 1  # one timer for a thousand reads
            # A read that waits longer than the horizon but not its deadline is not cancelled.
            loop.call_later(0.15, reader.feed_data, b"late")
            assert await _bounded_read(watch, reader, loop.time() + 30.0) == b"late"
            assert len(scheduled) > 3  # the timer moved itself along meanwhile
            # A deadline shorter than the scheduled timer (a restricted connection's) is kept.
            start = loop.time()
            watch.arm(loop.time() + 60.0)
            watch.disarm()
            assert await _bounded_read(watch, reader, loop.time() + 0.01) is None
            assert loop.time() - start < 1.0
        finally:
            loop.call_at = call_at  # type: ignore[method-assign]
            watch.close()
    run(kind, main)


@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_a_cancellation_from_elsewhere_is_not_taken_for_a_timeout(kind: str) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        watches: list[ReadWatch] = []

        async def serve() -> bytes | None:
            task = asyncio.current_task()
            assert task is not None
            watch = ReadWatch(loop, task, horizon_s=10.0)
            watches.append(watch)
            try:
                return await _bounded_read(watch, reader, loop.time() + 30.0)
            finally:
                watch.close()

        t = asyncio.ensure_future(serve())
        await asyncio.sleep(0.01)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        # Both at once: the deadline passed and the server is stopping - the stop wins.
        t = asyncio.ensure_future(serve())
        await asyncio.sleep(0.01)
        watches[-1].arm(loop.time() - 1.0)
        watches[-1]._fire()
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
    run(kind, main)


@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_the_timer_firing_between_reads_cancels_nothing(kind: str) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        task = asyncio.current_task()
        assert task is not None
        watch = ReadWatch(loop, task, horizon_s=0.01)
        try:
            reader.feed_data(b"abcd")
            assert await _bounded_read(watch, reader, loop.time() + 0.01) == b"abcd"
            await asyncio.sleep(0.05)  # past that deadline, with no read under way (handling a request)
            assert task.cancelling() == 0
            reader.feed_data(b"efgh")
            assert await _bounded_read(watch, reader, loop.time() + 1.0) == b"efgh"
        finally:
            watch.close()
    run(kind, main)
