"""The replica fetch listener: follower fetches over plain TLS sockets instead of gRPC.

Theory of operation
-------------------
acks=all waits for two hops between leader and followers (the parked follower fetch answered,
then the follower's next fetch carrying its new log end offset). Over a grpc.aio stream each hop
costs ~0.2 ms and ~150 us of CPU on each side (``bench/rpc_cost_bench.py``); over a plain asyncio
socket it costs ~30 us and ~15 us. Kafka's followers fetch over Kafka's own socket protocol for the
same reason. So every broker also listens here, on a port of its inter-broker listener's host
(``replica.fetch.listener.port``: 0 takes a free one, -1 turns the listener off), and registers
the port in its ZooKeeper registration; the controller passes it to followers in LeaderAndIsr
(``BrokerEndpoint.replica_fetch_port``). Everything else a follower asks (OffsetsForLeaderEpoch)
stays on gRPC, and so does the fetch itself when the leader advertises no port (an older broker,
or the listener turned off) or the port cannot be reached (``ReplicaFetchConnection`` raises
``ReplicaFetchUnreachable``: the fetcher uses gRPC for a while, then tries the socket again).

Wire, as Kafka's: each frame is a 4-byte big-endian size, then the body. A request body is an
8-byte header - api key (int16, 1 = FollowerFetch), api version (int16, 0), correlation id
(int32) - and a serialized ``FetchRequest``; the answer is the correlation id and a serialized
``FetchResponse``. One request at a time per connection; the answer comes back before the
next request is read.

It is an inter-broker listener served by the broker's one socket server
(``broker.network.socket_server``, with a ``ReplicaFetchProtocol`` injected as its frame handler),
so it distrusts what crosses it exactly as the Kafka listeners do (SPEC S12, S13): mutual
TLS with a certificate signed by the cluster CA (a handshake that fails or does not finish within
``request.timeout.ms`` never reaches the frame reader); frame sizes bounded by
``socket.request.max.bytes`` and the frames held at once by a memory pool of
``queued.max.request.bytes`` - its own, not the Kafka listeners' (the server gives it one): client
traffic filling the client listeners' pool must not hold up replication, and with it every acks=all
produce (SPEC S15.2; Kafka serves the replication listener on processors of its own);
``max.connections``; idle and half-sent frames closed; a frame
that is not a FollowerFetch v0 or does not parse closes its connection. A request from a
certificate that is not a broker's, or that fetches as a consumer, gets its typed error
(CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST) in the response; the rest (the replica id must be
the authenticated broker, the broker epoch must be current) is the replica manager's, shared
with the gRPC listener. The follower bounds what it reads too: an answer larger than the gRPC
channels' ``MAX_MESSAGE_BYTES``, with a foreign correlation id, or that does not parse closes the
connection and counts as a failed fetch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
from dataclasses import dataclass
from typing import Any, Final, Protocol

from google.protobuf.message import DecodeError

from broker.network.request_guard import ByteBudget, error_response
from broker.network.socket_server import Connection, ListenerLimits, Pending, SocketServer
from broker.security.principal import DEFAULT_BROKER_PREFIX, SSL, RequestContext
from proto import errors
from proto import minikafka_pb2 as pb
from proto.grpc_options import MAX_MESSAGE_BYTES

log = logging.getLogger(__name__)

LISTENER_NAME: Final = "REPLICA_FETCH"
FOLLOWER_FETCH: Final = 1
VERSION: Final = 0
_REQUEST_HEADER: Final = struct.Struct(">ihhi")  # size, api key, api version, correlation id
_RESPONSE_HEADER: Final = struct.Struct(">ii")  # size, correlation id
REQUEST_HEADER_BYTES: Final = 8


def encode_request(correlation_id: int, request: pb.FetchRequest) -> bytes:
    body = request.SerializeToString()
    return _REQUEST_HEADER.pack(REQUEST_HEADER_BYTES + len(body), FOLLOWER_FETCH, VERSION, correlation_id) + body


def decode_request(frame: bytes) -> tuple[int, pb.FetchRequest]:
    """(correlation id, request) of a request frame's body; ValueError if it is not a FollowerFetch v0."""
    if len(frame) < REQUEST_HEADER_BYTES:
        raise ValueError(f"a {len(frame)}-byte frame has no header")
    api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
    if api_key != FOLLOWER_FETCH or version != VERSION:
        raise ValueError(f"api key {api_key} version {version} (only FollowerFetch v{VERSION} is served here)")
    try:
        return correlation_id, pb.FetchRequest.FromString(frame[REQUEST_HEADER_BYTES:])
    except DecodeError as e:
        raise ValueError(f"FetchRequest does not parse: {e}") from None


def encode_response(correlation_id: int, response: pb.FetchResponse) -> bytes:
    body = response.SerializeToString()
    return _RESPONSE_HEADER.pack(4 + len(body), correlation_id) + body


class FetchApis(Protocol):
    """The request layer the broker injects (``broker.server.kafka_apis.KafkaApis``)."""

    async def handle(self, api: str, request: Any, ctx: RequestContext) -> Any:
        """``request``'s answer, typed whatever happens (never raises)."""


@dataclass(frozen=True)
class _Endpoint:
    name: str
    host: str
    port: int
    security_protocol: str


class ReplicaFetchListener(SocketServer):
    """The leader's side: the socket server with a ``ReplicaFetchProtocol`` injected, on mutual TLS,
    every connection an inter-broker one (this class only builds the pair). ``budget`` is its own
    memory pool, not the Kafka listeners' (see the module doc)."""

    def __init__(self, host: str, port: int, apis: FetchApis, limits: ListenerLimits, budget: ByteBudget,
                 tls: ssl.SSLContext, broker_prefix: str = DEFAULT_BROKER_PREFIX) -> None:
        if tls.verify_mode != ssl.CERT_REQUIRED:
            raise ValueError("the replica fetch listener serves brokers only: it must require client certificates")
        self.protocol = ReplicaFetchProtocol(apis)
        # Brokers only, as on the inter-broker gRPC listener: the handlers see an inter-broker request.
        super().__init__(_Endpoint(LISTENER_NAME, host, port, SSL), self.protocol, limits, budget, tls=tls,
                         inter_broker=True, broker_prefix=broker_prefix)

    @property
    def requests_answered(self) -> int:
        """Exported as minikafka_replica_fetch_listener_requests."""
        return self.protocol.requests_answered


class ReplicaFetchProtocol:
    """FollowerFetch v0 frames as a socket server's frame handler (``socket_server.FrameHandler``):
    one request at a time per connection, answered before the next is read."""

    min_frame_bytes = REQUEST_HEADER_BYTES
    max_waiting_answers = 1  # none ever waits: every answer is written before the next frame is read

    def __init__(self, apis: FetchApis) -> None:
        self.apis = apis
        self.requests_answered = 0

    def open(self, conn: Connection) -> None:
        pass  # mutual TLS authenticated the connection already

    async def serve(self, conn: Connection, frame: bytes, size: int) -> bytes | Pending | None:
        try:
            correlation_id, request = decode_request(frame)
        except ValueError as e:
            conn.violation(str(e))
            return None
        ctx = conn.ctx
        if ctx.broker_id is None:
            code = errors.ClusterAuthorizationFailedError.code
            log.info("%s: %s is not a broker: refusing its fetch", ctx.listener, ctx.principal)
            response = error_response("FollowerFetch", request, code)
        elif request.replica_id < 0:
            response = error_response("FollowerFetch", request, errors.InvalidRequestError.code)
        else:
            response = await self.apis.handle("FollowerFetch", request, ctx)
        self.requests_answered += 1
        return encode_response(correlation_id, response)

    def encode_pending(self, conn: Connection, token: Any, result: Any) -> bytes | None:
        raise AssertionError("the replica fetch protocol answers every request at once")


class ReplicaFetchUnreachable(ConnectionError):
    """The leader's replica fetch listener cannot be reached (connect or TLS handshake failed)."""


class ReplicaFetchConnection:
    """The follower's side: one connection to a leader's replica fetch listener, one fetch at a time.
    Any failure closes the connection (the next fetch opens a new one) and is raised."""

    def __init__(self, host: str, port: int, tls: ssl.SSLContext, connect_timeout_s: float,
                 max_response_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self.host = host
        self.port = port
        self.tls = tls
        self.connect_timeout_s = connect_timeout_s
        self.max_response_bytes = max_response_bytes
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            return await asyncio.wait_for(asyncio.open_connection(
                self.host, self.port, ssl=self.tls, server_hostname=self.host,
                ssl_handshake_timeout=self.connect_timeout_s), self.connect_timeout_s)
        except (OSError, TimeoutError, ssl.SSLError) as e:
            raise ReplicaFetchUnreachable(f"{self.host}:{self.port}: {e!r}") from e

    async def fetch(self, request: pb.FetchRequest, timeout_s: float) -> pb.FetchResponse:
        if self._writer is None:
            self._reader, self._writer = await self._connect()
        reader, writer = self._reader, self._writer
        assert reader is not None
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        try:
            async with asyncio.timeout(timeout_s):
                writer.write(encode_request(self._correlation_id, request))
                size = int.from_bytes(await reader.readexactly(4), "big", signed=True)
                if not 4 <= size <= self.max_response_bytes:
                    raise ConnectionError(f"answer of {size} bytes (at most {self.max_response_bytes})")
                body = await reader.readexactly(size)
            correlation_id = int.from_bytes(body[:4], "big", signed=True)
            if correlation_id != self._correlation_id:
                raise ConnectionError(f"answer to request {correlation_id}, expected {self._correlation_id}")
            try:
                # upb parses a memoryview (no copy of the records before its own).
                return pb.FetchResponse.FromString(memoryview(body)[4:])  # type: ignore[arg-type]
            except DecodeError as e:
                raise ConnectionError(f"FetchResponse does not parse: {e}") from None
        except asyncio.IncompleteReadError as e:
            self.close()
            raise ConnectionResetError(f"{self.host}:{self.port} closed the connection") from e
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
        self._reader = self._writer = None
