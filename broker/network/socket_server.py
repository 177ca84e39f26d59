"""The broker's one socket server (Kafka's SocketServer and RequestChannel) for every Kafka-framed listener.

Theory of operation
-------------------
An asyncio TCP server on one listener's address, in the broker's own event loop: it accepts
connections, frames their bytes (a 4-byte big-endian size, then the body), secures them (TLS,
the principal of a client certificate), bounds them and writes their answers back in the order
the requests came. What a frame *means* is not its business: each listener gets a
``FrameHandler`` injected - Kafka's wire protocol on the ``kafka.listeners``
(``broker.network.kafka_listener.KafkaProtocol``: kafka_wire, SASL, produce pipelining) and the
follower fetch protocol on the replica fetch listener
(``broker.network.replica_fetch_socket.ReplicaFetchProtocol``) - and the handler reaches the
request layer through what the broker injected into it. This module imports nothing of the API
layer (``broker.server``, ``broker.replication``, ``broker.coordinator``:
``tests/unit/test_import_layers.py``).

Each connection is served as Kafka's network layer serves one: read a frame, have the handler
answer it, write the answer, then read the next, so answers go back in request order (clients
pipeline, e.g. librdkafka's max.in.flight) and a slow client holds only its own socket buffers.
A handler may instead return a ``Pending`` answer (the Kafka protocol does for an acks=1/all
Produce: appended at once, answered once its acks are in): it waits, in arrival order, on the
connection's answer writer (``_write_answers``) while the next frames are read, holding its
frame's bytes in the memory pool until it is written. At most ``FrameHandler.max_waiting_answers``
wait per connection (``Connection.room``; then the connection is not read: TCP holds the
client), and a request that is not pipelined runs only once every earlier answer is written
(``Connection.answers``).

Every boundary distrusts its input (SPEC S12, S13):

* a frame's size must lie between the handler's smallest request (``min_frame_bytes``) and
  ``socket.request.max.bytes`` (or the smaller bound of a restricted connection: below);
* the bytes of frames being read or answered, over every connection of the listeners that share a
  ``ByteBudget`` (the server builds one for all its Kafka listeners, and one of its own for the
  replica fetch listener), stay within ``queued.max.request.bytes`` (Kafka's memory pool),
  reserved as they *arrive* (``_read_body``), never for what a size prefix only announces: a
  connection whose bytes do not fit is not read further (Kafka mutes it; TCP holds the sender) and
  is closed if room does not come within ``request.timeout.ms`` - so ``max.connections`` clients
  each sending 100 MB frames cannot take 100 GB, and clients that announce 100 MB frames and send
  10 bytes hold 10 bytes each, not the pool. One connection holds at most ``connection_cap`` of
  the pool, its unwritten answers included. A frame's bytes are counted in this pool only: the
  request layer does not reserve them again (the request context says so: ``bytes_reserved``);
* a handler closes a connection whose frame does not decode or cannot be answered (Kafka's
  behaviour on a protocol violation, ``Connection.violation``) and nothing else;
* an idle connection is closed after ``connections.max.idle.ms``, a frame that does not arrive in
  full within ``request.timeout.ms`` too, and the listener holds at most ``max.connections``
  connections (more are closed at once);
* a connection the handler restricts (``Connection.restrict``: a SASL listener's, until it
  authenticates) takes only small frames, holds only its one frame of the pool and closes at the
  handler's deadline.

Security per listener: PLAINTEXT runs every request as ``User:ANONYMOUS``; SSL and SASL_SSL
listeners speak TLS with the broker's PEM keystore (Python's ``ssl``, the same files as the gRPC
listeners), and the handshake must finish within ``request.timeout.ms`` (a client that connects
and says nothing, or speaks PLAINTEXT to a TLS port, is dropped then or at once); a connection
counts against ``max.connections`` from its completed handshake on. On SSL a client certificate
signed by the cluster CA names the principal (``User:<CN>``, the gatekeeper's mapping; a broker
certificate names a broker). SASL authentication is the Kafka protocol's
(``broker.security.kafka_sasl``), which replaces ``Connection.ctx`` once it succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from dataclasses import dataclass
from typing import Any, Protocol

from broker.network.request_guard import ByteBudget
from broker.security.principal import (
    ANONYMOUS,
    DEFAULT_BROKER_PREFIX,
    SASL_SSL,
    SSL,
    Principal,
    RequestContext,
    broker_id_of,
    common_name,
    user,
)

log = logging.getLogger(__name__)

# The most of a frame's body read from the socket at once: the bytes a connection waiting for room
# holds beyond its reservation (besides asyncio's stream buffer, which stops reading at 128 KiB).
READ_CHUNK_BYTES = 64 * 1024


class Endpoint(Protocol):
    """Where a listener listens and how it secures its connections (``broker.server.config.Listener``)."""

    @property
    def name(self) -> str: ...

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...

    @property
    def security_protocol(self) -> str: ...


@dataclass(frozen=True)
class ListenerLimits:
    max_frame_bytes: int  # socket.request.max.bytes
    idle_ms: int  # connections.max.idle.ms
    request_timeout_ms: int  # request.timeout.ms: the longest a started frame may take to arrive
    max_connections: int  # max.connections
    queued_max_request_bytes: int = -1  # queued.max.request.bytes: frames held at once, all connections


# The most answers written in one send (see SocketServer._write_answers): what a connection may
# have waiting is bounded already (FrameHandler.max_waiting_answers), this only bounds one write.
MAX_ANSWERS_PER_WRITE = 256


@dataclass(frozen=True, slots=True)
class Pending:
    """An answer that is not ready yet: written, in arrival order, once ``answer`` is done."""
    token: Any  # what the handler needs to encode the answer (the Kafka protocol's: the decoded request)
    answer: asyncio.Task[Any]  # the result the handler encodes (``FrameHandler.encode_pending``)
    size: int  # its frame's bytes, held in the memory pool until the answer is written


class FrameHandler(Protocol):
    """What a listener's frames mean: injected into the socket server, one per listener."""

    @property
    def min_frame_bytes(self) -> int:
        """The smallest frame that can be a request (its header)."""

    @property
    def max_waiting_answers(self) -> int:
        """``Pending`` answers per connection before the connection is not read further."""

    def open(self, conn: Connection) -> None:
        """A new connection: its per-connection state (``conn.state``), its restriction if it must
        authenticate first (``conn.restrict``)."""

    async def serve(self, conn: Connection, frame: bytes, size: int) -> bytes | Pending | None:
        """The answer frame to ``frame`` (the ``size`` bytes of its body; b"" when none is due), or
        a ``Pending`` one (see ``Connection``), or None to close the connection."""

    def encode_pending(self, conn: Connection, token: Any, result: Any) -> bytes | None:
        """The answer frame of a ``Pending`` (its token and its task's result); None closes the connection."""


class Connection:
    """One accepted connection as the socket server and its handler share it: the holder of its
    bytes in the memory pool, who sent them (``ctx``, the handler may replace it, e.g. once SASL
    authenticated it), the handler's own state (``state``), its frame bounds, and its answers.

    The ordered answers, as a handler uses them (directly: they are on the path of every request):
    a request that must run after every earlier answer is written awaits ``answers.join()`` first
    and gives up if ``broken`` is set then (the answer writer gave up on the connection); a handler
    that returns a ``Pending`` acquires ``room`` first (at most ``max_waiting_answers``; it releases
    it itself if it fails before returning, and gives up if ``broken``), and the writer releases it
    once the answer is written."""

    __slots__ = ("_server", "answers", "broken", "cap", "closing", "ctx", "deadline", "host", "max_frame",
                 "min_frame", "restricted_until", "room", "state")

    def __init__(self, server: SocketServer, host: str, ctx: RequestContext) -> None:
        self._server = server
        self.host = host
        self.ctx = ctx
        self.state: Any = None  # the handler's (the Kafka protocol's: its SASL session)
        self.closing = False  # set by the handler: the answer it returns is the last one
        self.broken = False  # set by the answer writer when it gave up on the connection
        self.min_frame = server.handler.min_frame_bytes
        self.max_frame = server.limits.max_frame_bytes
        self.cap = server.connection_cap  # the most of the memory pool it holds
        self.deadline: float | None = None  # time.monotonic() by which a restricted connection must be lifted
        self.restricted_until = ""
        self.answers: asyncio.Queue[Pending] = asyncio.Queue()
        self.room = asyncio.Semaphore(server.handler.max_waiting_answers)

    def __repr__(self) -> str:
        return f"<connection from {self.host}>"

    def restrict(self, max_frame: int, deadline: float, until: str) -> None:
        """Until ``lift``: frames of 1 to ``max_frame`` bytes (within ``socket.request.max.bytes``),
        the pool held to that one frame, and the connection closed at ``deadline``
        (``time.monotonic()``) - e.g. until ``until`` = "authentication"."""
        self.min_frame = 1
        self.max_frame = self.cap = min(max_frame, self._server.limits.max_frame_bytes)
        self.deadline = deadline
        self.restricted_until = until

    def lift(self) -> None:
        """The listener's own bounds again."""
        s = self._server
        self.min_frame, self.max_frame, self.cap = s.handler.min_frame_bytes, s.limits.max_frame_bytes, s.connection_cap
        self.deadline = None

    def violation(self, what: str) -> None:
        """The peer broke the protocol (the handler then closes the connection): counted and logged."""
        self._server.violation(self.host, what)


class SocketServer:
    """One listener: acceptor and connection processors around an injected ``FrameHandler``."""

    def __init__(self, listener: Endpoint, handler: FrameHandler, limits: ListenerLimits,
                 budget: ByteBudget | None = None, *, tls: ssl.SSLContext | None = None, inter_broker: bool = False,
                 broker_prefix: str = DEFAULT_BROKER_PREFIX) -> None:
        if (tls is None) == (listener.security_protocol in (SSL, SASL_SSL)):
            raise ValueError(f"{listener.name} is {listener.security_protocol}: the TLS context does not fit it")
        self.listener = listener
        self.handler = handler
        self.limits = limits
        # Shared by the listeners the broker gives the same pool (see the module doc).
        self.budget = budget if budget is not None else ByteBudget(limits.queued_max_request_bytes)
        # One connection's share of the pool: frames being read and answers not written yet. At least
        # one frame of socket.request.max.bytes (less would refuse a legal request), beyond that no
        # more than its fair share with every connection open - so one pipelining client cannot take
        # the pool from the others (with the defaults, 100 MB of 200 MB). Kafka has no such cap: it
        # mutes a channel the pool cannot serve, and by default has no pool at all; ours is shared.
        pool = self.budget.limit
        self.connection_cap = -1 if pool < 0 else max(limits.max_frame_bytes,
                                                      pool // max(1, limits.max_connections))
        self.tls = tls
        self.inter_broker = inter_broker  # brokers only: the handlers see inter-broker requests
        self.broker_prefix = broker_prefix
        self.port = -1
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        # Connections closed for a protocol violation (tests and metrics read it).
        self.closed_for_violation = 0

    async def start(self) -> int:
        """Listen; the bound port (a configured 0 takes a free one)."""
        # TLS by the server itself: the handshake must complete before any byte is read as a
        # frame (upgrading a StreamReader later can lose a ClientHello already buffered by it).
        self._server = await asyncio.start_server(
            self._accept, self.listener.host, self.listener.port, reuse_address=True, ssl=self.tls,
            ssl_handshake_timeout=self.limits.request_timeout_ms / 1000.0 if self.tls is not None else None)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=2.0)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)

    def violation(self, host: str, what: str) -> None:
        self.closed_for_violation += 1
        log.info("%s: closing the connection from %s: %s", self.listener.name, host, what)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if len(self._connections) >= self.limits.max_connections:
            log.warning("%s: max.connections (%d) reached; closing a new connection", self.listener.name,
                        self.limits.max_connections)
            writer.close()
            return
        assert task is not None
        self._connections.add(task)
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            pass
        except Exception:  # never let one connection's surprise reach the server
            log.exception("%s: connection failed unexpectedly", self.listener.name)
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    def _context(self, writer: asyncio.StreamWriter, host: str) -> RequestContext:
        """Who the connection is before any SASL exchange: its certificate's CN on an SSL
        listener (the gatekeeper's mapping, a broker certificate names a broker), else ANONYMOUS."""
        proto = self.listener.security_protocol
        principal: Principal = ANONYMOUS
        broker_id = None
        if proto == SSL:
            cn = common_name(writer.get_extra_info("peercert"))
            if cn:
                principal = user(cn)
                broker_id = broker_id_of(principal, self.broker_prefix)
        return RequestContext(principal, self.listener.name, proto, host, inter_broker=self.inter_broker,
                              broker_id=broker_id, bytes_reserved=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
        conn = Connection(self, host, self._context(writer, host))  # holds its bytes in the memory pool
        self.handler.open(conn)
        answer_writer = asyncio.get_running_loop().create_task(self._write_answers(conn, writer))
        try:
            await self._serve_frames(reader, writer, conn)
        finally:
            answer_writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await answer_writer
            while not conn.answers.empty():  # unwritten answers: their work stands, their bytes go back
                await self.budget.release_held(conn, conn.answers.get_nowait().size)

    async def _serve_frames(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            conn: Connection) -> None:
        handler = self.handler
        lim = self.limits
        idle_s = lim.idle_ms / 1000.0
        body_s = lim.request_timeout_ms / 1000.0
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        watch = ReadWatch(loop, task, body_s)
        try:
            while True:
                wait = idle_s
                deadline = conn.deadline  # a restricted connection's (until it authenticates)
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                    if wait <= 0:
                        self.violation(conn.host, f"no {conn.restricted_until} within its time")
                        return
                watch.arm(loop.time() + wait)
                try:
                    size_bytes = await reader.readexactly(4)
                except asyncio.CancelledError:
                    if watch.timed_out():
                        return  # idle for connections.max.idle.ms (or a restricted connection's time is up)
                    raise
                except (asyncio.IncompleteReadError, ConnectionError):
                    return  # closed by the peer
                finally:
                    watch.disarm()
                size = int.from_bytes(size_bytes, "big", signed=True)
                if not conn.min_frame <= size <= conn.max_frame:
                    when = f" before {conn.restricted_until}" if deadline is not None else ""
                    self.violation(conn.host, f"frame of {size} bytes (at most {conn.max_frame}{when})")
                    return
                body_wait = body_s
                if deadline is not None:
                    body_wait = max(0.0, min(body_wait, deadline - time.monotonic()))
                frame = await self._read_body(reader, conn, size, body_wait, conn.cap, watch)
                if frame is None:
                    return
                held = True  # the frame's bytes, until released below or handed to the answer writer
                try:
                    out = await handler.serve(conn, frame, size)
                    del frame
                    if isinstance(out, Pending):
                        held = False
                        conn.answers.put_nowait(out)
                        continue
                    if out is None:
                        return
                    if out:
                        writer.write(out)
                        await writer.drain()
                finally:
                    if held:
                        await self.budget.release_held(conn, size)
                if conn.closing:
                    return
        finally:
            watch.close()

    async def _read_body(self, reader: asyncio.StreamReader, conn: Connection, size: int, timeout_s: float,
                         cap: int, watch: ReadWatch) -> bytes | None:
        """A frame's ``size``-byte body, its bytes reserved in the memory pool as they arrive (held by
        ``conn`` from then on, until released); None - and nothing held - when the connection is to
        be closed: the body did not arrive in full within ``timeout_s`` (``watch`` bounds the
        reads), the peer went away, or room did not come for bytes that did arrive (``conn`` within
        ``cap``).

        Only what arrived is reserved: a client that announces a big frame and sends a few bytes
        holds those bytes. What is in memory is what is reserved, plus at most one chunk
        (``READ_CHUNK_BYTES``) waiting for room and what asyncio's stream reader buffers before it
        stops reading the socket (twice its 64 KiB limit)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        chunks: list[bytes] = []
        got = 0
        try:
            while got < size:
                watch.arm(deadline)
                try:
                    # What has arrived, within this frame (one read for most frames).
                    chunk = await reader.read(min(size - got, READ_CHUNK_BYTES))
                except asyncio.CancelledError:
                    if watch.timed_out():
                        return None  # the frame did not arrive within request.timeout.ms
                    raise
                except ConnectionError:
                    return None  # the peer went away
                finally:
                    watch.disarm()
                if not chunk:
                    return None  # closed by the peer mid-frame
                if not await self.budget.acquire_arrived(conn, len(chunk), deadline - loop.time(), cap):
                    log.info("%s: closing the connection from %s: no room within %.1f s for %d more bytes of a "
                             "%d-byte frame (queued.max.request.bytes)", self.listener.name, conn.host,
                             timeout_s, len(chunk), size)
                    return None
                chunks.append(chunk)
                got += len(chunk)
        finally:
            if got == size:
                self.budget.arrived_whole(conn)
            else:  # closing (or cancelled) mid-frame: what it took goes back
                await self.budget.abandon(conn)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _write_answers(self, conn: Connection, writer: asyncio.StreamWriter) -> None:
        """Write the connection's ``Pending`` answers in arrival order, each once it is ready.

        The answers queued behind the one just ready that are ready too go out in the same write:
        one send for many. A client that pipelines small requests (librdkafka sends a Produce per
        partition) gets many answers ready at once - one follower fetch moves the high watermark
        of many partitions - and on loopback each send costs the sender ~20 us, the peer's TCP
        receive included (the scale bench's spread produce at 3,000 partitions: 10% of a leader's
        loop was these sends, one per answer)."""
        answers = conn.answers
        ahead: Pending | None = None  # taken from the queue, not ready yet: the next one to wait for
        try:
            while True:
                item = ahead if ahead is not None else await answers.get()
                ahead = None
                taken = [item]
                try:
                    if conn.broken:
                        continue  # the connection is going: nothing more is written
                    outs: list[bytes] = []
                    failure: Exception | None = None  # of an answer behind the first: sent after those before it
                    try:
                        out = self.handler.encode_pending(conn, item.token, await _ready(item))
                        while out is not None and answers.qsize() and len(taken) < MAX_ANSWERS_PER_WRITE:
                            if out:
                                outs.append(out)
                            nxt = answers.get_nowait()
                            if not nxt.answer.done():
                                ahead = nxt
                                out = b""
                                break
                            taken.append(nxt)
                            try:
                                out = self.handler.encode_pending(conn, nxt.token, _result(nxt))
                            except Exception as e:
                                failure, out = e, None
                        if out:
                            outs.append(out)
                        if outs:
                            writer.writelines(outs)  # one send (uvloop: one writev)
                        if failure is not None:
                            raise failure  # as if its answer had been waited for alone
                        if out is None:
                            conn.broken = True
                            writer.close()  # after the answers before it: close flushes them first
                            continue
                        await writer.drain()
                    except Exception as e:  # the peer went away mid-write, or a surprise: the connection goes
                        if not isinstance(e, ConnectionError):
                            log.exception("%s: answer to %s failed unexpectedly", self.listener.name, conn.host)
                        log.debug("%s: answer to %s not written: %r", self.listener.name, conn.host, e)
                        conn.broken = True
                        writer.close()
                finally:
                    for t in taken:
                        await self.budget.release_held(conn, t.size)
                        conn.room.release()
                        answers.task_done()
        finally:
            if ahead is not None:  # cancelled with an answer taken and not written: its bytes go back
                await self.budget.release_held(conn, ahead.size)
                conn.room.release()
                answers.task_done()


class ReadWatch:
    """The deadline of one connection's reads, on one timer for the connection's life.

    A read that does not complete by its deadline (``arm``) is cancelled, as ``asyncio.timeout``
    would, and ``timed_out`` says so where the read's ``CancelledError`` is caught. But
    ``asyncio.timeout`` schedules and cancels a timer for every read, two per frame (header and
    body): ~6% of a leader's loop at one Produce per record (librdkafka spread over thousands of
    partitions). Here most reads cost two attribute writes: the timer stays scheduled while frames
    come, and when it fires it only moves itself to the current deadline, unless a read is under
    way and its deadline has passed. It is never scheduled more than ``horizon_s`` (the shortest
    deadline a read gets, ``request.timeout.ms``) ahead, so that a later, shorter deadline needs no
    new timer: an idle connection's timer fires once per ``horizon_s``.

    The task is cancelled only while it awaits a read (``arm`` .. ``disarm``, with no other await
    between them), so the cancellation surfaces in that read."""

    __slots__ = ("_deadline", "_expired", "_handle", "_horizon_s", "_loop", "_task")

    # A timer that runs this early is taken as due (libuv's timers have millisecond granularity:
    # re-arming for a remainder under that would spin).
    SLACK_S = 0.001

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any], horizon_s: float) -> None:
        self._loop = loop
        self._task = task
        self._horizon_s = max(horizon_s, self.SLACK_S)
        self._deadline = float("inf")  # inf: no read under way
        self._expired = False
        self._handle: asyncio.TimerHandle | None = None

    def arm(self, deadline: float) -> None:
        """A read begins that must complete by ``deadline`` (``loop.time()``)."""
        self._deadline = deadline
        handle = self._handle
        if handle is None:
            self._schedule()
        elif handle.when() > deadline:  # a shorter deadline than the horizon (restricted connections)
            handle.cancel()
            self._schedule()

    def disarm(self) -> None:
        """The read completed (or failed)."""
        self._deadline = float("inf")

    def timed_out(self) -> bool:
        """Whether the ``CancelledError`` of the read being caught is this watch's (then it is
        consumed: the task is no longer being cancelled), not a cancellation from elsewhere."""
        if not self._expired:
            return False
        self._expired = False
        return self._task.uncancel() == 0

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _schedule(self) -> None:
        when = min(self._deadline, self._loop.time() + self._horizon_s)
        self._handle = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._handle = None
        deadline = self._deadline
        if deadline == float("inf"):
            return  # no read under way: the next arm schedules the timer again
        if self._loop.time() + self.SLACK_S < deadline:
            self._schedule()
            return
        self._expired = True
        self._task.cancel()


async def _ready(item: Pending) -> Any:
    """``item``'s result once its answer is done. Shielded: a connection that goes away must not
    cancel the work behind an answer (an acks=all wait whose append was made: a gRPC ProduceStream
    lets them finish too)."""
    try:
        return await asyncio.shield(item.answer)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if not item.answer.cancelled() or (task is not None and task.cancelling()):
            raise  # this writer is cancelled: the connection is over
        raise ConnectionAbortedError("the answer was cancelled (the broker is stopping)") from None


def _result(item: Pending) -> Any:
    """The result of ``item``, whose answer is done, as ``_ready`` gives it."""
    if item.answer.cancelled():
        raise ConnectionAbortedError("the answer was cancelled (the broker is stopping)")
    return item.answer.result()
