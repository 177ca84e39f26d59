"""The broker's Kafka wire-protocol listener (the shell around ``broker.kafka_wire``).

Theory of operation
-------------------
An asyncio TCP server on each ``kafka.listeners`` address, in the broker's own
event loop. Each connection is served as Kafka's network layer serves one: read
a size-prefixed frame, answer it, then read the next, so responses go back in
request order (clients pipeline, e.g. librdkafka's max.in.flight) and a slow
client holds only its own socket buffers. Every request goes through the same
``KafkaApis.handle`` as the gRPC listeners' (``broker.kafka_apis``): this file
only frames, translates and authenticates.

Every boundary distrusts its input (SPEC S12, S13):

* a frame's size must lie between a header's and ``socket.request.max.bytes``;
* the bytes of frames being read or answered, over every connection of every
  Kafka listener of the broker, stay within ``queued.max.request.bytes``
  (Kafka's memory pool): a connection whose next frame does not fit waits
  (Kafka mutes it) and is closed if room does not come within
  ``request.timeout.ms`` - so ``max.connections`` clients each announcing a
  100 MB frame cannot take 100 GB;
* a frame that does not decode, names an API or version that ApiVersions did
  not advertise, or that the translation cannot answer closes *that*
  connection (Kafka's behaviour on a protocol violation) and nothing else;
* an idle connection is closed after ``connections.max.idle.ms``, a frame
  that does not arrive in full within ``request.timeout.ms`` too, and the
  listener holds at most ``max.connections`` connections (more are closed at
  once);
* a handler error never surfaces as a broken connection: ``KafkaApis``
  answers every request with its typed error.

Security: the Kafka listener is PLAINTEXT only (no SASL or TLS on this
transport yet); every request on it runs as ``User:ANONYMOUS`` and goes through
the same ACLs as any other listener. ``broker.config`` refuses to open it when
every gRPC client listener authenticates (the cluster is secure): an
unauthenticated Kafka port would be a way around that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from broker import kafka_wire
from broker.config import Listener
from broker.kafka_apis import KafkaApis
from broker.request_guard import ByteBudget
from broker.security.principal import ANONYMOUS, PLAINTEXT, RequestContext

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ListenerLimits:
    max_frame_bytes: int  # socket.request.max.bytes
    idle_ms: int  # connections.max.idle.ms
    request_timeout_ms: int  # request.timeout.ms: the longest a started frame may take to arrive
    max_connections: int  # max.connections
    queued_max_request_bytes: int = -1  # queued.max.request.bytes: frames held at once, all connections


class KafkaListener:
    def __init__(self, listener: Listener, apis: KafkaApis, limits: ListenerLimits,
                 budget: ByteBudget | None = None) -> None:
        self.listener = listener
        self.apis = apis
        self.limits = limits
        # Shared by every Kafka listener of a broker (the server passes one), like Kafka's memory pool.
        self.budget = budget if budget is not None else ByteBudget(limits.queued_max_request_bytes)
        self.port = -1
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        # Connections closed for a protocol violation (tests and metrics read it).
        self.closed_for_violation = 0

    async def start(self) -> int:
        """Listen; the bound port (a configured 0 takes a free one)."""
        self._server = await asyncio.start_server(self._accept, self.listener.host, self.listener.port,
                                                  reuse_address=True)
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

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
        ctx = RequestContext(ANONYMOUS, self.listener.name, PLAINTEXT, host)
        lim = self.limits
        while True:
            try:
                size_bytes = await asyncio.wait_for(reader.readexactly(4), lim.idle_ms / 1000.0)
            except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
                return  # closed by the peer, or idle for connections.max.idle.ms
            size = int.from_bytes(size_bytes, "big", signed=True)
            if not kafka_wire.MIN_FRAME_BYTES <= size <= lim.max_frame_bytes:
                self._violation(host, f"frame of {size} bytes (socket.request.max.bytes is {lim.max_frame_bytes})")
                return
            # Room for the frame before reading it: a frame is held until its answer is written.
            if not await self.budget.acquire(size, lim.request_timeout_ms / 1000.0):
                log.info("%s: closing the connection from %s: no room for a %d-byte frame within %d ms "
                         "(queued.max.request.bytes)", self.listener.name, host, size, lim.request_timeout_ms)
                return
            try:
                try:
                    frame = await asyncio.wait_for(reader.readexactly(size), lim.request_timeout_ms / 1000.0)
                except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
                    return
                out = await self._answer(frame, ctx, host)
                del frame
                if out is None:
                    return
                if out:
                    writer.write(out)
                    await writer.drain()
            finally:
                await self.budget.release(size)

    async def _answer(self, frame: bytes, ctx: RequestContext, host: str) -> bytes | None:
        """The response frame (b"" when none is due); None closes the connection."""
        try:
            d = kafka_wire.decode_request(frame)
        except kafka_wire.UnsupportedVersion as e:
            return kafka_wire.unsupported_api_versions_frame(e.header)
        except kafka_wire.ProtocolError as e:
            self._violation(host, str(e))
            return None
        if d.header.api_key == kafka_wire.API_VERSIONS:
            return kafka_wire.encode_response(d.header, kafka_wire.api_versions_response(d))
        try:
            plan = kafka_wire.to_pb(d)
            answers = [await self.apis.handle(api, request, ctx) for api, request in plan]
            if not kafka_wire.expects_response(d):
                return b""
            return kafka_wire.encode_response(d.header, kafka_wire.from_pb(d, answers))
        except asyncio.CancelledError:
            raise
        except Exception as e:
            # Values the protobuf or the response schema refuse (an int out of range...): the
            # request cannot be answered in its own shape, so its connection goes, as in Kafka.
            log.warning("%s: %s v%d from %s cannot be answered", self.listener.name, d.api, d.header.api_version,
                        host, exc_info=True)
            self._violation(host, f"{d.api} v{d.header.api_version}: {e!r}")
            return None

    def _violation(self, host: str, what: str) -> None:
        self.closed_for_violation += 1
        log.info("%s: closing the connection from %s: %s", self.listener.name, host, what)
