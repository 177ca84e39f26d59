"""Kafka's wire protocol on the broker's socket server (the handler around ``broker.network.kafka_wire``).

Theory of operation
-------------------
Each ``kafka.listeners`` address is a ``broker.network.socket_server.SocketServer`` - accepting,
framing, TLS, limits, the memory pool, answers in request order - with a ``KafkaProtocol``
injected as its frame handler (``KafkaListener`` builds the pair). This module says what a frame
means: it decodes it (``kafka_wire.decode_request``; a Produce without kio), authenticates the
connection (SASL), hands the request to the request layer the broker injected (``Apis``: the
same ``KafkaApis.handle`` as the gRPC listeners', ``broker.server.kafka_apis``) and encodes the
answer. It imports nothing of the API layer either.

One exception to one-at-a-time, as on a gRPC ProduceStream: a Produce with acks=1 or acks=all is
appended at once and its answer is a ``Pending`` one, written in arrival order by the
connection's answer writer while the next frames are read - otherwise every produce request
behind an acks=all one waited a whole replication round trip before it was even appended, and a
pipelining producer (this project's, ``client.kafka_produce``) would wait for each answer in turn.
At most ``PIPELINED_PRODUCE_MAX`` answers wait per connection (then the connection is not read:
TCP holds the client), each holding its frame's bytes in the memory pool until it is written -
the only pool that counts them (the replica manager does not reserve them again); any other
request is served only once every earlier answer is written, so the order in which requests run
and answers go back is the order the client sent them.

No request holds the loop for long (SPEC S15.2): a Metadata request naming more than
``kafka_wire.LARGE_METADATA_TOPICS`` topics (a million fit in the limits) is decoded, handled and
encoded a slice of names at a time, the loop running the other connections' work and the
replication between slices (``_answer_large_metadata``), and the C heap it used is given back
afterwards; its answer is byte for byte the one-go path's. So is an OffsetCommit frame longer than
``kafka_wire.LARGE_OFFSET_COMMIT_BYTES`` (100,000 partitions fit) and a consumer's Fetch frame
longer than ``kafka_wire.LARGE_FETCH_BYTES``, a slice of partitions at a time (``_answer_sliced``).

Every frame distrusts its sender (SPEC S12, S13; the socket server bounds sizes, bytes, time and
connections): a frame that does not decode, names an API or version that ApiVersions did not
advertise, or that the translation cannot answer closes *that* connection (Kafka's behaviour on a
protocol violation) and nothing else; a handler error never surfaces as a broken connection:
``KafkaApis`` answers every request with its typed error.

Security (SPEC S12), per listener protocol, as Kafka 2.x:

* PLAINTEXT: every request runs as ``User:ANONYMOUS``.
* SSL: TLS with the broker's PEM keystore (the socket server's); with ``ssl.client.auth=required``
  the client must present a certificate signed by the cluster CA and its common name is the
  principal (``User:<CN>``, the gatekeeper's mapping), else ANONYMOUS.
* SASL_SSL: TLS, then SCRAM-SHA-256 through SaslHandshake/SaslAuthenticate
  (``broker.security.kafka_sasl``) against the credentials the gRPC listeners use; the principal is
  ``User:<name>``. Until authentication completes only ApiVersions, SaslHandshake and
  SaslAuthenticate are served, frames are small (``MAX_PREAUTH_FRAME_BYTES``), and the SASL
  exchange must finish within ``request.timeout.ms`` of the TLS handshake (``Connection.restrict``);
  anything else closes the connection.

The principal then goes into the ``RequestContext`` of every request, so the ACLs apply exactly
as on the gRPC listeners. SASL_PLAINTEXT is not offered: the gRPC listeners never take SASL
credentials without TLS, and SCRAM without TLS would leave the session after authentication open
to reading and hijacking. ``broker.server.config`` refuses a Kafka listener that does not authenticate
on a cluster whose every gRPC client listener does.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import logging
import ssl
import time
from collections.abc import Callable, Generator
from typing import Any, Protocol, TypeVar

from broker.network import kafka_wire
from broker.network.request_guard import ByteBudget
from broker.network.socket_server import Connection, Endpoint, ListenerLimits, Pending, SocketServer
from broker.security import kafka_sasl
from broker.security.kafka_sasl import SaslServerConfig, SaslSession
from broker.security.principal import DEFAULT_BROKER_PREFIX, SASL_SSL, SSL, RequestContext, user

__all__ = ["PIPELINED_PRODUCE_MAX", "Apis", "KafkaListener", "KafkaProtocol", "ListenerLimits"]

log = logging.getLogger(__name__)
R = TypeVar("R")

# Unanswered pipelined Produce requests per connection (as a gRPC ProduceStream's
# PRODUCE_STREAM_MAX_IN_FLIGHT; Kafka's producers keep 5 in flight by default).
PIPELINED_PRODUCE_MAX = 32


class Apis(Protocol):
    """The request layer the broker injects (``broker.server.kafka_apis.KafkaApis``)."""

    async def handle(self, api: str, request: Any, ctx: RequestContext) -> Any:
        """``request``'s answer, typed whatever happens (never raises)."""

    async def begin_produce(self, request: Any, ctx: RequestContext) -> asyncio.Task[Any]:
        """Append a Produce now (in the caller's order); the task that answers it once its acks are in."""


class KafkaListener(SocketServer):
    """A ``kafka.listeners`` listener: the socket server with a ``KafkaProtocol`` injected (this class
    only builds the pair; every behaviour is the server's or the protocol's)."""

    def __init__(self, listener: Endpoint, apis: Apis, limits: ListenerLimits, budget: ByteBudget | None = None,
                 *, tls: ssl.SSLContext | None = None, sasl: SaslServerConfig | None = None,
                 broker_prefix: str = DEFAULT_BROKER_PREFIX) -> None:
        proto = listener.security_protocol
        if (tls is None) == (proto in (SSL, SASL_SSL)) or (sasl is None) == (proto == SASL_SSL):
            raise ValueError(f"{listener.name} is {proto}: TLS context and SASL config do not fit it")
        self.protocol = KafkaProtocol(apis, sasl, limits.request_timeout_ms)
        super().__init__(listener, self.protocol, limits, budget, tls=tls, broker_prefix=broker_prefix)


class KafkaProtocol:
    """Kafka's wire protocol as a socket server's frame handler (``socket_server.FrameHandler``)."""

    min_frame_bytes = kafka_wire.MIN_FRAME_BYTES  # the smallest request header

    def __init__(self, apis: Apis, sasl: SaslServerConfig | None, request_timeout_ms: int) -> None:
        self.apis = apis
        self.sasl = sasl
        self.max_waiting_answers = PIPELINED_PRODUCE_MAX
        self._auth_s = request_timeout_ms / 1000.0  # the whole SASL exchange, from the end of the TLS handshake

    def open(self, conn: Connection) -> None:
        if self.sasl is not None:
            conn.state = SaslSession(self.sasl)
            # Before authentication a connection holds its one small frame at most.
            conn.restrict(kafka_sasl.MAX_PREAUTH_FRAME_BYTES, time.monotonic() + self._auth_s, "authentication")

    async def serve(self, conn: Connection, frame: bytes, size: int) -> bytes | Pending | None:
        session: SaslSession | None = conn.state
        if session is not None and not session.authenticated:
            out = self._pre_auth(frame, session, conn)
            if session.authenticated:
                assert session.user is not None
                conn.ctx = dataclasses.replace(conn.ctx, principal=user(session.user))
                conn.lift()
                log.debug("%s: %s authenticated from %s", conn.ctx.listener, conn.ctx.principal, conn.host)
            return out
        if kafka_wire.api_key_of(frame) != kafka_wire.PRODUCE:
            await conn.answers.join()  # every earlier answer is written before this one runs
            if conn.broken:
                return None
            return await self._answer(frame, conn)
        # A Produce is appended now: its pending answer (acks=1/all), b"" for acks=0 (appended, never
        # answered), None to close the connection (the frame does not decode or translate, or the
        # connection is going). Inline, not in a coroutine of its own: this is the hot path.
        try:
            d = kafka_wire.decode_request(frame)
        except kafka_wire.ProtocolError as e:
            conn.violation(str(e))
            return None
        try:
            (api, request), = kafka_wire.to_pb(d)
        except Exception as e:
            self._unanswerable(d, conn, e)
            return None
        if not kafka_wire.expects_response(d):
            await self.apis.handle(api, request, conn.ctx)
            return b""
        # Room first: the append must not run ahead of PIPELINED_PRODUCE_MAX unwritten answers.
        room = conn.room
        await room.acquire()
        if conn.broken:  # the answer writer gave up on the connection while this waited
            room.release()
            return None
        try:
            produced = await self.apis.begin_produce(request, conn.ctx)
        except BaseException:
            room.release()
            raise
        return Pending(d, produced, size)

    def encode_pending(self, conn: Connection, token: Any, result: Any) -> bytes | None:
        try:  # _encode's, not through it: a pipelined Produce's answer, the hot path
            return kafka_wire.encode_answer(token, [result])
        except Exception as e:
            self._unanswerable(token, conn, e)
            return None

    def _encode(self, d: kafka_wire.Decoded, answers: list[Any], conn: Connection) -> bytes | None:
        """The response frame of ``d`` from its handlers' answers; None (and the connection goes)
        when a value cannot be put in the response of the client's version."""
        try:
            return kafka_wire.encode_answer(d, answers)
        except Exception as e:
            self._unanswerable(d, conn, e)
            return None

    def _pre_auth(self, frame: bytes, session: SaslSession, conn: Connection) -> bytes | None:
        """What to send for a frame of a connection not yet authenticated (``conn.closing`` when it
        is the last); None closes the connection at once."""
        if session.expects_token:  # v0 handshake: the frame is a bare SCRAM message
            reply = session.authenticate(frame)
            if reply.close:
                conn.violation(f"SASL authentication failed: {reply.values.get('error_message')}")
                return None
            token: bytes = reply.values["auth_bytes"]
            return len(token).to_bytes(4, "big") + token
        try:
            d = kafka_wire.decode_request(frame)
        except kafka_wire.UnsupportedVersion as e:
            if not session.admits(kafka_wire.API_VERSIONS):
                conn.violation("too many requests before authentication")
                return None
            return kafka_wire.unsupported_api_versions_frame(e.header)
        except kafka_wire.ProtocolError as e:
            conn.violation(f"before authentication: {e}")
            return None
        key = d.header.api_key
        if not session.admits(key):
            conn.violation(f"{d.api} v{d.header.api_version} before authentication")
            return None
        if key == kafka_wire.API_VERSIONS:
            return kafka_wire.encode_response(d.header, kafka_wire.api_versions_response(d))
        if key == kafka_sasl.SASL_HANDSHAKE:
            reply = session.handshake(d.request.mechanism, d.header.api_version)
        else:
            reply = session.authenticate(d.request.auth_bytes)
        if reply.close:
            conn.violation(f"{d.api}: error {reply.values['error_code']} "
                           f"{reply.values.get('error_message') or ''}".rstrip())
            conn.closing = True
        return kafka_wire.encode_response(d.header, kafka_wire.response(d, reply.values))

    async def _answer(self, frame: bytes, conn: Connection) -> bytes | None:
        """The response frame (b"" when none is due); None closes the connection."""
        if kafka_wire.large_metadata(frame):
            return await self._answer_large_metadata(frame, conn)
        if kafka_wire.large_offset_commit(frame):
            return await self._answer_sliced(frame, conn, "OffsetCommit", kafka_wire.decode_offset_commit_sliced,
                                             kafka_wire.encode_offset_commit_sliced)
        if kafka_wire.large_fetch(frame):
            return await self._answer_sliced(frame, conn, "Fetch", kafka_wire.decode_fetch_sliced,
                                             kafka_wire.encode_fetch_sliced)
        try:
            d = kafka_wire.decode_request(frame)
        except kafka_wire.UnsupportedVersion as e:
            return kafka_wire.unsupported_api_versions_frame(e.header)
        except kafka_wire.ProtocolError as e:
            conn.violation(str(e))
            return None
        if d.header.api_key == kafka_wire.API_VERSIONS:
            return kafka_wire.encode_response(d.header, kafka_wire.api_versions_response(d))
        if d.header.api_key in kafka_wire.SASL_APIS:  # authenticated already, or no SASL here
            return kafka_wire.encode_response(d.header, kafka_wire.response(d, kafka_sasl.illegal_state(
                d.header.api_key)))
        try:
            plan = kafka_wire.to_pb(d)
        except Exception as e:
            self._unanswerable(d, conn, e)
            return None
        ctx = conn.ctx
        answers = [await self.apis.handle(api, request, ctx) for api, request in plan]  # typed, never raise
        if not kafka_wire.expects_response(d):
            return b""
        return self._encode(d, answers, conn)

    async def _answer_large_metadata(self, frame: bytes, conn: Connection) -> bytes | None:
        """``_answer`` for a Metadata request naming many topics (up to a million within the
        limits): decoded, handled and encoded a slice of names at a time, the loop free for the
        other connections and the replication between slices (SPEC S15.2); the same answer."""
        try:
            sliced = await _sliced(kafka_wire.decode_metadata_sliced(frame))
        except kafka_wire.ProtocolError as e:
            conn.violation(str(e))
            return None
        del frame
        answer = await self.apis.handle("Metadata", sliced.request, conn.ctx)  # typed, never raises
        decoded = sliced.decoded
        del sliced  # every name, no longer needed
        try:
            out: bytes | None = await _sliced(kafka_wire.encode_metadata_sliced(decoded.header, answer))
        except Exception as e:
            self._unanswerable(decoded, conn, e)
            out = None
        del answer
        _return_memory()
        return out

    async def _answer_sliced(self, frame: bytes, conn: Connection, api: str,
                             decode: Callable[[bytes], Generator[None, None, kafka_wire.SlicedRequest]],
                             encode: Callable[[kafka_wire.Header, Any, Any], Generator[None, None, bytes]]
                             ) -> bytes | None:
        """``_answer`` for a long OffsetCommit (100,000 partitions fit in the limits) or consumer
        Fetch: decoded, handled (the handlers slice a refusal's answer too) and encoded a slice of
        partitions at a time, the loop free between slices (SPEC S15.2); the same answer."""
        try:
            sliced = await _sliced(decode(frame))
        except kafka_wire.ProtocolError as e:
            conn.violation(str(e))
            return None
        del frame
        answer = await self.apis.handle(api, sliced.request, conn.ctx)  # typed, never raises
        decoded = sliced.decoded
        try:
            out: bytes | None = await _sliced(encode(decoded.header, sliced.request, answer))
        except Exception as e:
            self._unanswerable(decoded, conn, e)
            out = None
        del answer, sliced
        _return_memory()
        return out

    def _unanswerable(self, d: kafka_wire.Decoded, conn: Connection, e: Exception) -> None:
        # Values the protobuf or the response schema refuse (an int out of range...): the request
        # cannot be answered in its own shape, so its connection goes, as in Kafka.
        log.warning("%s: %s v%d from %s cannot be answered", conn.ctx.listener, d.api, d.header.api_version,
                    conn.host, exc_info=e)
        conn.violation(f"{d.api} v{d.header.api_version}: {e!r}")


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
