"""The gRPC listeners' servicers: a thin adapter from gRPC calls to ``KafkaApis`` (SPEC S12.1).

Theory of operation
-------------------
A gRPC call is authenticated first (``broker.security.gatekeeper``, per listener role), then
handed with its ``RequestContext`` to ``KafkaApis`` - nothing else happens here. Every unary
method is generated from the API catalogue (``broker.network.api_catalogue``): an entry whose
``service`` names a gRPC service becomes that service's method of the same name. What is written
by hand is what is not one call for one API: Fetch (a replica's is a FollowerFetch), the two
streams (FetchStream, ProduceStream: the principal is the stream's, every other check per request)
and the control plane's admission.

* KafkaApi: a failed authentication is answered with the request's own response carrying the
  typed error (and counted), except a failed SASL authentication, which fails the call itself
  (UNAUTHENTICATED), as a failed SASL handshake fails Kafka's connection.
* BrokerControl and ControllerApi are registered on every listener, so that a call anywhere but
  the control plane gets a typed refusal (CLUSTER_AUTHORIZATION_FAILED) rather than gRPC's
  UNIMPLEMENTED; on the control plane, ``KafkaApis.handle_control`` admits the controller's
  requests by their epochs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from broker.network.api_catalogue import BROKER_CONTROL, CONTROLLER_API, KAFKA_API, fetch_api, served_by
from broker.network.request_guard import error_response
from broker.security.gatekeeper import Gatekeeper, ListenerRole
from broker.security.principal import RequestContext
from broker.server.kafka_apis import KafkaApis
from broker.server.observability import RequestMetrics
from proto import errors
from proto import minikafka_pb2 as pb
from proto import minikafka_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)
E = pb.ErrorCode
# Unanswered Produce requests one ProduceStream may hold (its appends done, acks pending). The
# producer keeps at most max_in_flight batches per partition out; several partitions' requests to
# one broker fit well under this. Memory stays bounded by queued.max.request.bytes either way.
PRODUCE_STREAM_MAX_IN_FLIGHT = 32

Unary = Callable[[Any, Any, Any], Awaitable[Any]]  # (servicer, request, grpc context) -> response


def add_servicers(server: grpc.aio.Server, role: ListenerRole, apis: KafkaApis, gate: Gatekeeper,
                  metrics: RequestMetrics, queued_max_requests: int) -> None:
    """Serve KafkaApi, BrokerControl and ControllerApi on ``server`` (the listener of ``role``)."""
    pb_grpc.add_KafkaApiServicer_to_server(  # type: ignore[no-untyped-call]
        KafkaApiServicer(apis, gate, role, metrics, queued_max_requests), server)
    pb_grpc.add_BrokerControlServicer_to_server(BrokerControlServicer(apis, gate, role), server)  # type: ignore[no-untyped-call]
    pb_grpc.add_ControllerApiServicer_to_server(ControllerApiServicer(apis, gate, role), server)  # type: ignore[no-untyped-call]


def _generate(cls: type[Any], service: str) -> None:
    """Give ``cls`` a method for every API of the catalogue that ``service`` answers (but those
    written by hand in ``cls``), each ``cls._serve(api, request, context)``."""
    for entry in served_by(service):
        if entry.name not in vars(cls):
            setattr(cls, entry.name, _forwarder(cls, entry.name))


def _forwarder(cls: type[Any], api: str) -> Unary:
    async def method(self: Any, request: Any, context: Any) -> Any:
        return await self._serve(api, request, context)

    method.__name__ = api
    method.__qualname__ = f"{cls.__name__}.{api}"
    return method


class KafkaApiServicer(pb_grpc.KafkaApiServicer):
    """KafkaApi on one listener: authenticate, then hand the request and its context to ``KafkaApis``."""

    def __init__(self, apis: KafkaApis, gate: Gatekeeper, role: ListenerRole, metrics: RequestMetrics,
                 queued_max_requests: int) -> None:
        self.apis = apis
        self.gate = gate
        self.role = role
        self.metrics = metrics
        self.queued_max_requests = queued_max_requests
        # A ProduceStream holds one of the listener's queued.max.requests concurrent calls for as
        # long as its producer lives: at most half of them, so unary calls always find room.
        self.open_produce_streams = 0
        self.max_produce_streams = max(1, queued_max_requests // 2)

    async def _authenticate(self, api: str, context: Any) -> RequestContext | errors.KafkaError:
        try:
            return self.gate.authenticate(self.role, context)
        except errors.KafkaError as e:
            log.info("%s refused on %s from %s: %s", api, self.role.listener.name, context.peer(), e)
            self.metrics.errors.labels(api, e.name).inc()
            if isinstance(e, errors.SaslAuthenticationFailedError | errors.UnsupportedSaslMechanismError):
                # Authentication fails the call itself, as a failed SASL handshake fails Kafka's
                # connection: the client sees UNAUTHENTICATED carrying the typed error.
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(e))
            return e

    async def _serve(self, api: str, request: Any, context: Any) -> Any:
        ctx = await self._authenticate(api, context)
        if isinstance(ctx, errors.KafkaError):
            return error_response(api, request, ctx.code)
        return await self.apis.handle(api, request, ctx)

    async def Fetch(self, request: pb.FetchRequest, context: Any) -> pb.FetchResponse:
        return await self._serve(fetch_api(request), request, context)  # type: ignore[no-any-return]

    async def FetchStream(self, request_iterator: AsyncIterator[pb.FetchRequest],
                          context: Any) -> AsyncIterator[pb.FetchResponse]:
        """Each request on the stream is a Fetch, answered in order: the principal is the stream's
        (authenticated once, as a Kafka connection is), every other check is per request."""
        ctx = await self._authenticate("FetchStream", context)
        async for request in request_iterator:
            api = fetch_api(request)
            if isinstance(ctx, errors.KafkaError):
                yield error_response(api, request, ctx.code)
                continue
            yield await self.apis.handle(api, request, ctx)

    async def ProduceStream(self, request_iterator: AsyncIterator[pb.ProduceRequest],
                            context: Any) -> AsyncIterator[pb.ProduceResponse]:
        """Each request on the stream is a Produce, appended in arrival order and answered in that
        order; the next one is appended while earlier ones wait for their acks (at most
        PRODUCE_STREAM_MAX_IN_FLIGHT unanswered: then the stream is not read, and gRPC's flow
        control holds the producer). The principal is the stream's; every other check is per request."""
        ctx = await self._authenticate("ProduceStream", context)
        if self.open_produce_streams >= self.max_produce_streams:
            # As a broker at max.connections: refused at once; the producer sends unary calls instead.
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"{self.open_produce_streams} ProduceStreams open on this listener (the most "
                                f"queued.max.requests={self.queued_max_requests} allows): use unary Produce")
        self.open_produce_streams += 1
        try:
            async for answer in self._produce_stream(request_iterator, ctx):
                yield answer
        finally:
            self.open_produce_streams -= 1

    async def _produce_stream(self, request_iterator: AsyncIterator[pb.ProduceRequest],
                              ctx: RequestContext | errors.KafkaError) -> AsyncIterator[pb.ProduceResponse]:
        loop = asyncio.get_running_loop()
        answers: asyncio.Queue[asyncio.Future[pb.ProduceResponse] | None] = asyncio.Queue()
        room = asyncio.Semaphore(PRODUCE_STREAM_MAX_IN_FLIGHT)

        async def take_requests() -> None:
            try:
                async for request in request_iterator:
                    await room.acquire()
                    if isinstance(ctx, errors.KafkaError):
                        refused: asyncio.Future[pb.ProduceResponse] = loop.create_future()
                        refused.set_result(error_response("Produce", request, ctx.code))
                        answers.put_nowait(refused)
                    else:
                        answers.put_nowait(await self.apis.begin_produce(request, ctx))
            finally:
                answers.put_nowait(None)

        reader = loop.create_task(take_requests())
        try:
            while (answer := await answers.get()) is not None:
                yield await answer
                room.release()
            await reader  # the client finished writing (or the read failed: raised here)
        finally:
            reader.cancel()  # appends already made still get their answers' tasks run to the end


class _ControlPlaneServicer:
    """A control-plane service (SPEC S12.1): only on the control-plane listener, only to brokers
    (mutual TLS, broker certificates); what the controller sends is then admitted by its epochs
    (``KafkaApis.handle_control``)."""

    def __init__(self, apis: KafkaApis, gate: Gatekeeper, role: ListenerRole) -> None:
        self.apis = apis
        self.gate = gate
        self.role = role

    async def _serve(self, api: str, request: Any, context: Any) -> Any:
        if not self.role.serves_control:
            log.warning("%s from %s on the %s listener: refused (not the control plane)", api, context.peer(),
                        self.role.listener.name)
            return error_response(api, request, E.CLUSTER_AUTHORIZATION_FAILED)
        try:
            ctx = self.gate.authenticate(self.role, context)
        except errors.KafkaError as e:
            return error_response(api, request, e.code)
        return await self.apis.handle_control(api, request, ctx)


class BrokerControlServicer(_ControlPlaneServicer, pb_grpc.BrokerControlServicer):
    """What the controller sends: LeaderAndIsr, UpdateMetadata, StopReplica."""


class ControllerApiServicer(_ControlPlaneServicer, pb_grpc.ControllerApiServicer):
    """What a broker asks the controller: ControlledShutdown."""


_generate(KafkaApiServicer, KAFKA_API)
_generate(BrokerControlServicer, BROKER_CONTROL)
_generate(ControllerApiServicer, CONTROLLER_API)
