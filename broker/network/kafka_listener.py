"""The broker's Kafka wire-protocol listener (the shell around ``broker.network.kafka_wire``).

Theory of operation
-------------------
An asyncio TCP server on each ``kafka.listeners`` address, in the broker's own
event loop. Each connection is served as Kafka's network layer serves one: read
a size-prefixed frame, answer it, then read the next, so responses go back in
request order (clients pipeline, e.g. librdkafka's max.in.flight) and a slow
client holds only its own socket buffers. Every request goes through the same
``KafkaApis.handle`` as the gRPC listeners' (``broker.server.kafka_apis``): this file
only frames, translates and authenticates.

One exception to one-at-a-time, as on a gRPC ProduceStream: a Produce with
acks=1 or acks=all is appended at once and its answer waits, in arrival order,
on the connection's answer writer (``_write_answers``) while the next frames are
read - otherwise every produce request behind an acks=all one waited a whole
replication round trip before it was even appended, and a pipelining producer
(this project's, ``client.kafka_produce``) would wait for each answer in
turn. At most ``PIPELINED_PRODUCE_MAX`` answers wait per
connection (then the connection is not read: TCP holds the client), each
holding its frame's bytes in the memory pool until it is written; any other
request is served only once every earlier answer is written, so the order in
which requests run and answers go back is the order the client sent them.

No request holds the loop for long (SPEC S15.2): a Metadata request naming more than
``kafka_wire.LARGE_METADATA_TOPICS`` topics (a million fit in the limits) is decoded, handled and
encoded a slice of names at a time, the loop running the other connections' work and the
replication between slices (``_answer_large_metadata``), and the C heap it used is given back
afterwards; its answer is byte for byte the one-go path's. So is an OffsetCommit frame longer than
``kafka_wire.LARGE_OFFSET_COMMIT_BYTES`` (100,000 partitions fit) and a consumer's Fetch frame
longer than ``kafka_wire.LARGE_FETCH_BYTES``, a slice of partitions at a time (``_answer_sliced``).

Every boundary distrusts its input (SPEC S12, S13):

* a frame's size must lie between a header's and ``socket.request.max.bytes``;
* the bytes of frames being read or answered, over every connection of every
  Kafka listener of the broker, stay within ``queued.max.request.bytes``
  (Kafka's memory pool, ``ByteBudget``), reserved as they *arrive*
  (``_read_body``), never for what a size prefix only announces: a connection
  whose bytes do not fit is not read further (Kafka mutes it; TCP holds the
  sender) and is closed if room does not come within ``request.timeout.ms`` -
  so ``max.connections`` clients each sending 100 MB frames cannot take
  100 GB, and clients that announce 100 MB frames and send 10 bytes hold 10
  bytes each, not the pool (they held it until ``request.timeout.ms``, and
  every other client's request waited). One connection holds at most
  ``connection_cap`` of the pool, its unwritten answers included, and a
  connection not yet authenticated at most its small pre-authentication frame;
* a frame that does not decode, names an API or version that ApiVersions did
  not advertise, or that the translation cannot answer closes *that*
  connection (Kafka's behaviour on a protocol violation) and nothing else;
* an idle connection is closed after ``connections.max.idle.ms``, a frame
  that does not arrive in full within ``request.timeout.ms`` too, and the
  listener holds at most ``max.connections`` connections (more are closed at
  once);
* a handler error never surfaces as a broken connection: ``KafkaApis``
  answers every request with its typed error.

Security (SPEC S12), per listener protocol, as Kafka 2.x:

* PLAINTEXT: every request runs as ``User:ANONYMOUS``.
* SSL: TLS with the broker's PEM keystore (Python's ``ssl``, the same files as the gRPC
  listeners); with ``ssl.client.auth=required`` the client must present a certificate signed by
  the cluster CA and its common name is the principal (``User:<CN>``, the gatekeeper's mapping),
  else ANONYMOUS.
* SASL_SSL: TLS, then SCRAM-SHA-256 through SaslHandshake/SaslAuthenticate
  (``broker.security.kafka_sasl``) against the credentials the gRPC listeners use; the principal is
  ``User:<name>``. Until authentication completes only ApiVersions, SaslHandshake and
  SaslAuthenticate are served, frames are small (``MAX_PREAUTH_FRAME_BYTES``), and the SASL
  exchange must finish within ``request.timeout.ms`` of the TLS handshake; anything else closes
  the connection.

The TLS handshake must finish within ``request.timeout.ms`` (a client that connects and says
nothing, or speaks PLAINTEXT to a TLS port, is dropped then or at once); a connection counts
against ``max.connections`` from its completed handshake on.
The principal then goes into the ``RequestContext`` of every request, so the ACLs apply exactly
as on the gRPC listeners. SASL_PLAINTEXT is not offered: the gRPC listeners never take SASL
credentials without TLS, and SCRAM without TLS would leave the session after authentication open
to reading and hijacking. ``broker.server.config`` refuses a Kafka listener that does not authenticate
on a cluster whose every gRPC client listener does.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import logging
import ssl
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from broker.network import kafka_wire
from broker.network.request_guard import ByteBudget
from broker.security import kafka_sasl
from broker.security.kafka_sasl import SaslServerConfig, SaslSession
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
from broker.server.config import Listener
from broker.server.kafka_apis import KafkaApis

log = logging.getLogger(__name__)
R = TypeVar("R")

# The most of a frame's body read from the socket at once: the bytes a connection waiting for room
# holds beyond its reservation (besides asyncio's stream buffer, which stops reading at 128 KiB).
READ_CHUNK_BYTES = 64 * 1024

# Unanswered pipelined Produce requests per connection (as a gRPC ProduceStream's
# PRODUCE_STREAM_MAX_IN_FLIGHT; Kafka's producers keep 5 in flight by default).
PIPELINED_PRODUCE_MAX = 32


@dataclass(frozen=True, slots=True)
class _Pending:
    """A pipelined Produce: appended, its answer not written yet."""
    decoded: kafka_wire.Decoded
    produced: asyncio.Task[Any]  # KafkaApis.begin_produce's task: the typed ProduceResponse
    size: int  # its frame's bytes, held in the memory pool until the answer is written


class _Connection:
    """One connection, as the holder of its bytes in the memory pool (``ByteBudget.acquire_arrived``)."""
    __slots__ = ("host",)

    def __init__(self, host: str) -> None:
        self.host = host

    def __repr__(self) -> str:
        return f"<connection from {self.host}>"


@dataclass(frozen=True)
class ListenerLimits:
    max_frame_bytes: int  # socket.request.max.bytes
    idle_ms: int  # connections.max.idle.ms
    request_timeout_ms: int  # request.timeout.ms: the longest a started frame may take to arrive
    max_connections: int  # max.connections
    queued_max_request_bytes: int = -1  # queued.max.request.bytes: frames held at once, all connections


class KafkaListener:
    min_frame_bytes = kafka_wire.MIN_FRAME_BYTES  # the smallest request header
    pipelines_produce = True  # acks=1/all Produce requests are appended while earlier answers wait

    def __init__(self, listener: Listener, apis: KafkaApis, limits: ListenerLimits,
                 budget: ByteBudget | None = None, *, tls: ssl.SSLContext | None = None,
                 sasl: SaslServerConfig | None = None, broker_prefix: str = DEFAULT_BROKER_PREFIX) -> None:
        proto = listener.security_protocol
        if (tls is None) == (proto in (SSL, SASL_SSL)) or (sasl is None) == (proto == SASL_SSL):
            raise ValueError(f"{listener.name} is {proto}: TLS context and SASL config do not fit it")
        self.listener = listener
        self.apis = apis
        self.limits = limits
        # Shared by every Kafka listener of a broker (the server passes one), like Kafka's memory pool.
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
        self.sasl = sasl
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
        return RequestContext(principal, self.listener.name, proto, host, broker_id=broker_id)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
        ctx = self._context(writer, host)
        conn = _Connection(host)  # holds this connection's bytes in the memory pool
        answers: asyncio.Queue[_Pending] = asyncio.Queue()
        room = asyncio.Semaphore(PIPELINED_PRODUCE_MAX)
        broken: list[bool] = []  # set by the answer writer when it gave up on the connection
        answer_writer = asyncio.get_running_loop().create_task(
            self._write_answers(answers, room, writer, conn, broken))
        try:
            await self._serve_frames(reader, writer, conn, ctx, answers, room, broken)
        finally:
            answer_writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await answer_writer
            while not answers.empty():  # unwritten answers: their appends stand, their bytes go back
                await self.budget.release_held(conn, answers.get_nowait().size)

    async def _serve_frames(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: _Connection,
                            ctx: RequestContext, answers: asyncio.Queue[_Pending], room: asyncio.Semaphore,
                            broken: list[bool]) -> None:
        host = conn.host
        session = SaslSession(self.sasl) if self.sasl is not None else None
        lim = self.limits
        # The whole SASL exchange, from the end of the TLS handshake.
        auth_deadline = time.monotonic() + lim.request_timeout_ms / 1000.0
        while True:
            pending = session is not None and not session.authenticated
            wait = lim.idle_ms / 1000.0
            if pending:
                wait = min(wait, auth_deadline - time.monotonic())
                if wait <= 0:
                    self._violation(host, "did not authenticate within request.timeout.ms")
                    return
            try:
                # asyncio.timeout, not wait_for: wait_for makes a task of every read it bounds.
                async with asyncio.timeout(wait):
                    size_bytes = await reader.readexactly(4)
            except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
                return  # closed by the peer, or idle for connections.max.idle.ms
            size = int.from_bytes(size_bytes, "big", signed=True)
            most = min(lim.max_frame_bytes, kafka_sasl.MAX_PREAUTH_FRAME_BYTES) if pending else lim.max_frame_bytes
            if not (1 if pending else self.min_frame_bytes) <= size <= most:
                when = " before authentication" if pending else ""
                self._violation(host, f"frame of {size} bytes (at most {most}{when})")
                return
            body_wait = lim.request_timeout_ms / 1000.0
            if pending:
                body_wait = max(0.0, min(body_wait, auth_deadline - time.monotonic()))
            # Before authentication a connection holds its one small frame at most: `most`.
            frame = await self._read_body(reader, conn, size, body_wait, most if pending else self.connection_cap)
            if frame is None:
                return
            held = True  # the frame's bytes, until released below or handed to the answer writer
            try:
                if not pending and self.pipelines_produce and kafka_wire.api_key_of(frame) == kafka_wire.PRODUCE:
                    started = await self._begin_produce(frame, ctx, host, size, room, broken)
                    if started is None:
                        return
                    if isinstance(started, _Pending):
                        held = False
                        answers.put_nowait(started)
                        continue
                    out, close = b"", False  # acks=0: appended in order, never answered
                elif pending:
                    assert session is not None
                    out, close = self._pre_auth(frame, session, host)
                    if session.authenticated:
                        assert session.user is not None
                        ctx = dataclasses.replace(ctx, principal=user(session.user))
                        log.debug("%s: %s authenticated from %s", self.listener.name, ctx.principal, host)
                else:
                    await answers.join()  # every earlier answer is written before this one runs
                    if broken:
                        return
                    answer = await self._answer(frame, ctx, host)
                    out, close = (answer or b""), answer is None
                del frame
                if out:
                    writer.write(out)
                    await writer.drain()
            finally:
                if held:
                    await self.budget.release_held(conn, size)
            if close:
                return

    async def _read_body(self, reader: asyncio.StreamReader, conn: _Connection, size: int, timeout_s: float,
                         cap: int) -> bytes | None:
        """A frame's ``size``-byte body, its bytes reserved in the memory pool as they arrive (held by
        ``conn`` from then on, until released); None - and nothing held - when the connection is to
        be closed: the body did not arrive in full within ``timeout_s``, the peer went away, or room
        did not come for bytes that did arrive (``conn`` within ``cap``).

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
                try:
                    # asyncio.timeout_at, not wait_for: wait_for makes a task of every read it bounds.
                    async with asyncio.timeout_at(deadline):
                        # What has arrived, within this frame (one read for most frames).
                        chunk = await reader.read(min(size - got, READ_CHUNK_BYTES))
                except (ConnectionError, TimeoutError):
                    return None  # the peer went away, or the frame did not arrive within request.timeout.ms
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

    async def _begin_produce(self, frame: bytes, ctx: RequestContext, host: str, size: int,
                             room: asyncio.Semaphore, broken: list[bool]) -> _Pending | bool | None:
        """Append a Produce now: its pending answer (acks=1/all), True for acks=0 (appended, never
        answered), None to close the connection (the frame does not decode or translate, or the
        connection is going)."""
        try:
            d = kafka_wire.decode_request(frame)
        except kafka_wire.ProtocolError as e:
            self._violation(host, str(e))
            return None
        try:
            (api, request), = kafka_wire.to_pb(d)
        except Exception as e:
            self._unanswerable(d, host, e)
            return None
        if not kafka_wire.expects_response(d):
            await self.apis.handle(api, request, ctx)
            return True
        # Room first: the append must not run ahead of PIPELINED_PRODUCE_MAX unwritten answers.
        await room.acquire()
        if broken:  # the answer writer gave up on the connection while this waited
            room.release()
            return None
        try:
            produced = await self.apis.begin_produce(request, ctx)
        except BaseException:
            room.release()
            raise
        return _Pending(d, produced, size)

    async def _write_answers(self, answers: asyncio.Queue[_Pending], room: asyncio.Semaphore,
                             writer: asyncio.StreamWriter, conn: _Connection, broken: list[bool]) -> None:
        """Write the pipelined Produce answers in arrival order, each once its acks are in."""
        host = conn.host
        while True:
            item = await answers.get()
            try:
                if broken:
                    continue  # the connection is going: nothing more is written
                try:
                    # Shielded: a connection that goes away must not cancel an acks=all wait whose
                    # append was made (the gRPC ProduceStream lets them finish the same way).
                    resp = await asyncio.shield(item.produced)
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if not item.produced.cancelled() or (task is not None and task.cancelling()):
                        raise  # this writer is cancelled: the connection is over
                    raise ConnectionAbortedError("the produce was cancelled (the broker is stopping)") from None
                out = self._encode(item.decoded, [resp], host)
                if out is None:
                    broken.append(True)
                    writer.close()
                    continue
                writer.write(out)
                await writer.drain()
            except Exception as e:  # the peer went away mid-write, or a surprise: the connection goes
                if not isinstance(e, ConnectionError):
                    log.exception("%s: answer to %s failed unexpectedly", self.listener.name, host)
                log.debug("%s: answer to %s not written: %r", self.listener.name, host, e)
                broken.append(True)
                writer.close()
            finally:
                await self.budget.release_held(conn, item.size)
                room.release()
                answers.task_done()

    def _encode(self, d: kafka_wire.Decoded, answers: list[Any], host: str) -> bytes | None:
        """The response frame of ``d`` from its handlers' answers; None (and the connection goes)
        when a value cannot be put in the response of the client's version."""
        try:
            return kafka_wire.encode_answer(d, answers)
        except Exception as e:
            self._unanswerable(d, host, e)
            return None

    def _pre_auth(self, frame: bytes, session: SaslSession, host: str) -> tuple[bytes, bool]:
        """(what to send, close afterwards) for a frame of a connection not yet authenticated."""
        if session.expects_token:  # v0 handshake: the frame is a bare SCRAM message
            reply = session.authenticate(frame)
            if reply.close:
                self._violation(host, f"SASL authentication failed: {reply.values.get('error_message')}")
                return b"", True
            token: bytes = reply.values["auth_bytes"]
            return len(token).to_bytes(4, "big") + token, False
        try:
            d = kafka_wire.decode_request(frame)
        except kafka_wire.UnsupportedVersion as e:
            if not session.admits(kafka_wire.API_VERSIONS):
                self._violation(host, "too many requests before authentication")
                return b"", True
            return kafka_wire.unsupported_api_versions_frame(e.header), False
        except kafka_wire.ProtocolError as e:
            self._violation(host, f"before authentication: {e}")
            return b"", True
        key = d.header.api_key
        if not session.admits(key):
            self._violation(host, f"{d.api} v{d.header.api_version} before authentication")
            return b"", True
        if key == kafka_wire.API_VERSIONS:
            return kafka_wire.encode_response(d.header, kafka_wire.api_versions_response(d)), False
        if key == kafka_sasl.SASL_HANDSHAKE:
            reply = session.handshake(d.request.mechanism, d.header.api_version)
        else:
            reply = session.authenticate(d.request.auth_bytes)
        if reply.close:
            self._violation(host, f"{d.api}: error {reply.values['error_code']} "
                                  f"{reply.values.get('error_message') or ''}".rstrip())
        return kafka_wire.encode_response(d.header, kafka_wire.response(d, reply.values)), reply.close

    async def _answer(self, frame: bytes, ctx: RequestContext, host: str) -> bytes | None:
        """The response frame (b"" when none is due); None closes the connection."""
        if kafka_wire.large_metadata(frame):
            return await self._answer_large_metadata(frame, ctx, host)
        if kafka_wire.large_offset_commit(frame):
            return await self._answer_sliced(frame, ctx, host, "OffsetCommit", kafka_wire.decode_offset_commit_sliced,
                                             kafka_wire.encode_offset_commit_sliced)
        if kafka_wire.large_fetch(frame):
            return await self._answer_sliced(frame, ctx, host, "Fetch", kafka_wire.decode_fetch_sliced,
                                             kafka_wire.encode_fetch_sliced)
        try:
            d = kafka_wire.decode_request(frame)
        except kafka_wire.UnsupportedVersion as e:
            return kafka_wire.unsupported_api_versions_frame(e.header)
        except kafka_wire.ProtocolError as e:
            self._violation(host, str(e))
            return None
        if d.header.api_key == kafka_wire.API_VERSIONS:
            return kafka_wire.encode_response(d.header, kafka_wire.api_versions_response(d))
        if d.header.api_key in kafka_wire.SASL_APIS:  # authenticated already, or no SASL here
            return kafka_wire.encode_response(d.header, kafka_wire.response(d, kafka_sasl.illegal_state(
                d.header.api_key)))
        try:
            plan = kafka_wire.to_pb(d)
        except Exception as e:
            self._unanswerable(d, host, e)
            return None
        answers = [await self.apis.handle(api, request, ctx) for api, request in plan]  # typed, never raise
        if not kafka_wire.expects_response(d):
            return b""
        return self._encode(d, answers, host)

    async def _answer_large_metadata(self, frame: bytes, ctx: RequestContext, host: str) -> bytes | None:
        """``_answer`` for a Metadata request naming many topics (up to a million within the
        limits): decoded, handled and encoded a slice of names at a time, the loop free for the
        other connections and the replication between slices (SPEC S15.2); the same answer."""
        try:
            sliced = await _sliced(kafka_wire.decode_metadata_sliced(frame))
        except kafka_wire.ProtocolError as e:
            self._violation(host, str(e))
            return None
        del frame
        answer = await self.apis.handle("Metadata", sliced.request, ctx)  # typed, never raises
        decoded = sliced.decoded
        del sliced  # every name, no longer needed
        try:
            out: bytes | None = await _sliced(kafka_wire.encode_metadata_sliced(decoded.header, answer))
        except Exception as e:
            self._unanswerable(decoded, host, e)
            out = None
        del answer
        _return_memory()
        return out

    async def _answer_sliced(self, frame: bytes, ctx: RequestContext, host: str, api: str,
                             decode: Callable[[bytes], Generator[None, None, kafka_wire.SlicedRequest]],
                             encode: Callable[[kafka_wire.Header, Any, Any], Generator[None, None, bytes]]
                             ) -> bytes | None:
        """``_answer`` for a long OffsetCommit (100,000 partitions fit in the limits) or consumer
        Fetch: decoded, handled (the handlers slice a refusal's answer too) and encoded a slice of
        partitions at a time, the loop free between slices (SPEC S15.2); the same answer."""
        try:
            sliced = await _sliced(decode(frame))
        except kafka_wire.ProtocolError as e:
            self._violation(host, str(e))
            return None
        del frame
        answer = await self.apis.handle(api, sliced.request, ctx)  # typed, never raises
        decoded = sliced.decoded
        try:
            out: bytes | None = await _sliced(encode(decoded.header, sliced.request, answer))
        except Exception as e:
            self._unanswerable(decoded, host, e)
            out = None
        del answer, sliced
        _return_memory()
        return out

    def _unanswerable(self, d: kafka_wire.Decoded, host: str, e: Exception) -> None:
        # Values the protobuf or the response schema refuse (an int out of range...): the request
        # cannot be answered in its own shape, so its connection goes, as in Kafka.
        log.warning("%s: %s v%d from %s cannot be answered", self.listener.name, d.api, d.header.api_version,
                    host, exc_info=e)
        self._violation(host, f"{d.api} v{d.header.api_version}: {e!r}")

    def _violation(self, host: str, what: str) -> None:
        self.closed_for_violation += 1
        log.info("%s: closing the connection from %s: %s", self.listener.name, host, what)


async def _sliced(work: Generator[None, None, R]) -> R:
    """Run ``work`` (a generator that yields after each slice of its work) to its result, letting
    the event loop run everything else that is ready between slices."""
    while True:
        try:
            next(work)
        except StopIteration as done:
            result: R = done.value
            return result
        await asyncio.sleep(0)


def _load_malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to give back this way
        return None
    return trim


_MALLOC_TRIM = _load_malloc_trim()


def _return_memory() -> None:
    """Give the C heap's free memory back to the system (glibc's ``malloc_trim``): a request of a
    million names leaves ~100 MB of freed protobuf and Python objects in the heap, which glibc
    would otherwise keep (RSS stayed 90-130 MB higher); this takes a few milliseconds at most."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
