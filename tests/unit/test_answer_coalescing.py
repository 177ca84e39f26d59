"""The socket server writes the answers that are ready together in one send (issue 29): a client
that pipelines small requests (librdkafka: a Produce per partition) gets many answers ready at once,
and each send on loopback costs the broker ~20 us. Order, the memory pool, the connection's room and
``answers.join()`` behave as with one write per answer; no socket here (a writer that records)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker.network.socket_server import (
    MAX_ANSWERS_PER_WRITE,
    Connection,
    ListenerLimits,
    Pending,
    SocketServer,
)
from broker.security.principal import ANONYMOUS, PLAINTEXT, RequestContext

FRAME = 100  # bytes each answered frame held in the pool


class _Listener:
    name, host, port, security_protocol = "CLIENT", "127.0.0.1", 0, PLAINTEXT


class _Handler:
    """Answers are their results' bytes; ``refuse`` makes one answer unencodable (the connection goes)."""

    min_frame_bytes = 1
    max_waiting_answers = 1000

    def __init__(self) -> None:
        self.refuse: object = object()  # no token is it, unless a test says so

    def open(self, conn: Connection) -> None:
        pass

    async def serve(self, conn: Connection, frame: bytes, size: int) -> bytes | Pending | None:
        raise AssertionError("not read here")

    def encode_pending(self, conn: Connection, token: Any, result: Any) -> bytes | None:
        return None if token is self.refuse else bytes(result)


class _Writer:
    """What the answer writer sends: one entry per send."""

    def __init__(self) -> None:
        self.sends: list[bytes] = []
        self.closed = False

    def writelines(self, data: list[bytes]) -> None:
        self.sends.append(b"".join(data))

    def write(self, data: bytes) -> None:
        self.sends.append(data)

    async def drain(self) -> None:
        await asyncio.sleep(0)

    def close(self) -> None:
        self.closed = True


def _server() -> tuple[SocketServer, _Handler]:
    handler = _Handler()
    limits = ListenerLimits(max_frame_bytes=1 << 20, idle_ms=60_000, request_timeout_ms=30_000, max_connections=10,
                            queued_max_request_bytes=1 << 20)
    return SocketServer(_Listener(), handler, limits), handler


def _connection(server: SocketServer) -> Connection:
    return Connection(server, "127.0.0.1", RequestContext(ANONYMOUS, "CLIENT", PLAINTEXT, "127.0.0.1"))


async def _queue(server: SocketServer, conn: Connection, results: list[bytes | None]) -> list[asyncio.Future[Any]]:
    """One Pending per result, in order, each holding FRAME bytes of the pool and a place in the
    connection's room as a Produce does; a None result's answer is left pending (returned)."""
    loop = asyncio.get_running_loop()
    futures = []
    for r in results:
        assert await server.budget.acquire_arrived(conn, FRAME, 1.0)
        server.budget.arrived_whole(conn)
        await conn.room.acquire()
        fut: asyncio.Future[Any] = loop.create_future()
        if r is not None:
            fut.set_result(r)
        futures.append(fut)
        conn.answers.put_nowait(Pending(r, fut, FRAME))  # type: ignore[arg-type]
    return futures


def _start(server: SocketServer, conn: Connection, writer: _Writer) -> asyncio.Task[None]:
    """The connection's answer writer, as the server runs it, over the recording writer."""
    return asyncio.get_running_loop().create_task(server._write_answers(conn, writer))  # type: ignore[arg-type]


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _until_written(conn: Connection) -> None:
    await asyncio.wait_for(conn.answers.join(), 5.0)


def test_answers_ready_together_go_in_one_send_in_order() -> None:
    async def run() -> None:
        server, _ = _server()
        conn, writer = _connection(server), _Writer()
        await _queue(server, conn, [b"a", b"b", b"c", b"d"])
        task = _start(server, conn, writer)
        await _until_written(conn)
        assert writer.sends == [b"abcd"]
        assert server.budget.in_flight == 0 and server.budget.held_by(conn) == 0
        await _stop(task)
    asyncio.run(run())


def test_an_answer_not_ready_ends_the_send_and_the_rest_follow_once_it_is() -> None:
    async def run() -> None:
        server, _ = _server()
        conn, writer = _connection(server), _Writer()
        futures = await _queue(server, conn, [b"a", b"b", None, b"d", b"e"])
        task = _start(server, conn, writer)
        for _ in range(5):
            await asyncio.sleep(0)
        assert writer.sends == [b"ab"]
        assert server.budget.held_by(conn) == 3 * FRAME  # the one waited for, and the two behind it
        futures[2].set_result(b"c")
        await _until_written(conn)
        assert writer.sends == [b"ab", b"cde"]
        assert server.budget.in_flight == 0
        await _stop(task)
    asyncio.run(run())


def test_one_send_holds_at_most_max_answers_per_write() -> None:
    async def run() -> None:
        server, _ = _server()
        conn, writer = _connection(server), _Writer()
        n = MAX_ANSWERS_PER_WRITE + 3
        await _queue(server, conn, [b"x"] * n)
        task = _start(server, conn, writer)
        await _until_written(conn)
        assert [len(s) for s in writer.sends] == [MAX_ANSWERS_PER_WRITE, 3]
        await _stop(task)
    asyncio.run(run())


def test_an_answer_that_cannot_be_encoded_sends_those_before_it_and_closes() -> None:
    async def run() -> None:
        server, handler = _server()
        conn, writer = _connection(server), _Writer()
        handler.refuse = b"c"
        await _queue(server, conn, [b"a", b"b", b"c", b"d"])
        task = _start(server, conn, writer)
        await _until_written(conn)
        assert writer.sends == [b"ab"] and writer.closed and conn.broken
        assert server.budget.in_flight == 0  # the unwritten answers' bytes came back too
        await _stop(task)
    asyncio.run(run())


def test_a_writer_cancelled_while_it_waits_gives_back_what_it_took() -> None:
    async def run() -> None:
        server, _ = _server()
        conn, writer = _connection(server), _Writer()
        await _queue(server, conn, [b"a", None, b"c"])
        task = _start(server, conn, writer)
        for _ in range(5):
            await asyncio.sleep(0)
        assert writer.sends == [b"a"]
        task.cancel()  # the connection closes while the second answer is pending
        with pytest.raises(asyncio.CancelledError):
            await task
        # What is still queued is the server's to give back (SocketServer._serve); the one taken is not.
        assert conn.answers.qsize() == 1
        assert server.budget.held_by(conn) == FRAME
    asyncio.run(run())


def test_an_answer_that_failed_sends_those_before_it_and_closes() -> None:
    """An answer whose work raised (a bug, or the broker stopping) ends the connection, as when each
    answer was written alone: the answers before it still go out first."""
    async def run() -> None:
        server, _ = _server()
        conn, writer = _connection(server), _Writer()
        futures = await _queue(server, conn, [b"a", b"b", None, b"d"])
        futures[2].set_exception(ConnectionAbortedError("the answer was cancelled"))
        task = _start(server, conn, writer)
        await _until_written(conn)
        assert writer.sends == [b"ab"] and writer.closed and conn.broken
        assert server.budget.in_flight == 0
        await _stop(task)
    asyncio.run(run())
