"""The producer's connection to a broker's Kafka listener: Produce requests written in order,
answers matched in order.

Theory of operation
-------------------
acks=all is a chain of hops: the produce, the followers' fetches and the answer. The followers
fetch over plain sockets (``broker.network.replica_fetch_socket``); the produce and its answer went over
a grpc.aio stream, where each hop costs ~0.2 ms and ~150 us of CPU on each side, against
~30 us on a socket. So when a broker offers a Kafka listener of the client's own security
protocol, PLAINTEXT or SSL (``MetadataResponse``'s ``kafka_produce_host``/``_port``: the same
principal under the same ACLs as on its gRPC listener), the producer sends its Produce
requests there as Kafka's own producers do: Produce v8 frames (``proto.kafka_produce``), several
in flight, appended by the broker on arrival and answered in order
(``broker.network.kafka_listener``). Everything else stays on gRPC.

This class has the interface of ``client.produce_stream.ProduceStream`` (``send``, ``fail``,
``close``, ``failed``), so the producer treats both alike. ``send`` writes the frame at once,
in the caller's loop iteration (no task hop before the bytes leave), and queues a future; the
protocol's ``data_received`` cuts the answers out of the byte stream and resolves the futures
in order. An acks=0 request gets no answer (Kafka's rule): its future is done once written.

It distrusts the broker's bytes as the broker distrusts the client's: an answer larger than
``max_response_bytes``, with a foreign correlation id, one more than was asked, or that does
not decode fails the connection. Any failure - those, the broker going away, a timeout the
producer decides - fails every unanswered request with a ConnectionError: the producer retries
those batches (idempotent sequence numbers keep the retries in order) and sends over gRPC
until it tries the Kafka listener again (``Producer``'s ``KAFKA_PRODUCE_RETRY_AFTER_S``).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from typing import Any

from proto import minikafka_pb2 as pb
from proto.grpc_options import MAX_MESSAGE_BYTES
from proto.kafka_produce import decode_produce_response, encode_produce_request


class KafkaProduceUnreachable(ConnectionError):
    """The broker's Kafka listener cannot be reached (connect or TLS handshake failed or timed out)."""


class KafkaProduceClosed(ConnectionResetError):
    """The connection ended, or the broker's bytes broke the protocol."""


def _retrieve(fut: asyncio.Future[Any]) -> None:
    # A future nobody awaits any more (its sender timed out): mark its failure as seen.
    if not fut.cancelled():
        fut.exception()


class KafkaProduceConnection(asyncio.Protocol):
    """One connection to one broker's Kafka listener. Open it with ``open`` inside the producer's loop."""

    def __init__(self, address: str, client_id: str, max_response_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self.address = address
        self.client_id = client_id
        self.max_response_bytes = max_response_bytes
        self.failed: BaseException | None = None
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._waiters: deque[tuple[int, asyncio.Future[pb.ProduceResponse]]] = deque()
        self._correlation_id = 0
        self._lost: asyncio.Future[None] | None = None  # set by connection_lost once close() asked for it

    @classmethod
    async def open(cls, host: str, port: int, tls: ssl.SSLContext | None, timeout_s: float,
                   client_id: str = "minikafka-producer",
                   max_response_bytes: int = MAX_MESSAGE_BYTES) -> KafkaProduceConnection:
        conn = cls(f"{host}:{port}", client_id, max_response_bytes)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout_s):
                transport, _ = await loop.create_connection(
                    lambda: conn, host, port, ssl=tls, server_hostname=host if tls is not None else None,
                    ssl_handshake_timeout=timeout_s if tls is not None else None)
        except (OSError, TimeoutError, ssl.SSLError) as e:
            raise KafkaProduceUnreachable(f"{host}:{port}: {e!r}") from e
        # uvloop may return before it has called connection_made (asyncio calls it first).
        conn._transport = transport
        return conn

    def send(self, request: pb.ProduceRequest) -> asyncio.Future[pb.ProduceResponse]:
        """Write ``request`` now; the future is its answer (or the connection's failure)."""
        fut: asyncio.Future[pb.ProduceResponse] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(_retrieve)
        transport = self._transport
        if self.failed is not None or transport is None:
            fut.set_exception(self.failed or KafkaProduceClosed(f"{self.address}: not connected"))
            return fut
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        try:
            transport.write(encode_produce_request(self._correlation_id, self.client_id, request))
        except (RuntimeError, OSError) as e:  # uvloop raises on a closed transport: never the sender's problem
            self.fail(KafkaProduceClosed(f"{self.address}: {e}"))
            fut.set_exception(self.failed or KafkaProduceClosed(f"{self.address}: closed"))
            return fut
        if request.acks == 0:
            fut.set_result(pb.ProduceResponse())  # acks=0 is never answered
        else:
            self._waiters.append((self._correlation_id, fut))
        return fut

    def fail(self, error: BaseException) -> None:
        """End the connection: every unanswered request gets ``error``."""
        if self.failed is None:
            self.failed = error
            if self._transport is not None:
                self._transport.abort()
        self._buffer.clear()
        while self._waiters:
            _cid, fut = self._waiters.popleft()
            if not fut.done():
                fut.set_exception(self.failed)

    async def close(self, timeout_s: float = 2.0) -> None:
        """Close after writing what is buffered (acks=0 requests were done once handed over: aborting
        would drop them), waiting at most ``timeout_s`` for the connection to end."""
        transport = self._transport
        if self.failed is None and transport is not None:
            self.failed = KafkaProduceClosed("the producer closed")
            self._lost = asyncio.get_running_loop().create_future()
            transport.close()
            await asyncio.wait([self._lost], timeout=timeout_s)
            transport.abort()
        self.fail(self.failed or KafkaProduceClosed("the producer closed"))

    # ------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport subclass

    def connection_lost(self, exc: Exception | None) -> None:
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)
        self.fail(KafkaProduceClosed(f"{self.address} closed the connection" + (f": {exc!r}" if exc else "")))

    def data_received(self, data: bytes) -> None:
        if self.failed is not None:
            return
        buf = self._buffer
        buf += data
        start = 0
        try:
            while len(buf) - start >= 4:
                size = int.from_bytes(buf[start:start + 4], "big", signed=True)
                if not 4 <= size <= self.max_response_bytes:
                    raise KafkaProduceClosed(f"{self.address}: an answer of {size} bytes "
                                             f"(at most {self.max_response_bytes})")
                end = start + 4 + size
                if len(buf) < end:
                    break
                if not self._waiters:
                    raise KafkaProduceClosed(f"{self.address} answered a request that was not sent")
                try:
                    # A copy: answers are small, and the buffer must stay resizable.
                    correlation_id, resp = decode_produce_response(bytes(buf[start + 4:end]))
                except ValueError as e:
                    raise KafkaProduceClosed(f"{self.address}: a Produce answer that does not parse: {e}") from None
                expected, fut = self._waiters.popleft()
                if correlation_id != expected:
                    raise KafkaProduceClosed(f"{self.address}: answer to request {correlation_id}, "
                                             f"expected {expected}")
                if not fut.done():  # done: its sender timed out and gave up on it
                    fut.set_result(resp)
                start = end
        except KafkaProduceClosed as e:
            self.fail(e)
            return
        if start:
            del buf[:start]
