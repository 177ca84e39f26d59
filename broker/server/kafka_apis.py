"""The one request-handling layer of a broker (Kafka's KafkaApis).

Theory of operation
-------------------
A request reaches a broker through one of two transports: a gRPC listener
(``broker.server.grpc_servicers``, the project's own clients and the controller) or a Kafka
wire-protocol listener (``broker.network.kafka_listener``, librdkafka, kafka-python,
kcat...). Each transport authenticates the caller its own way and turns the
request into the protobuf request of ``minikafka.proto``; from there on both
call ``KafkaApis.handle(api, request, ctx)``, which

* looks the handler up by the API's name (``handlers`` below: the replica
  manager for produce/fetch/offsets and the control plane, the admin manager, the
  group APIs...; exactly the APIs of ``broker.network.api_catalogue``),
* runs it under ``answer_typed``: whatever it raises, the caller gets the
  request's own response shape with a typed error (SPEC S13.2), never a dead
  connection or gRPC's UNKNOWN,
* counts requests, errors, latency and record bytes in and out.

So there is exactly one copy of produce, fetch, metadata and admin logic; a
transport only translates and authenticates. The controller's requests
(LeaderAndIsr, UpdateMetadata, StopReplica) come through ``handle_control``, which
admits them by the broker and controller epochs first (``broker.replication.control``).

A gRPC ProduceStream, and a Kafka listener connection (``broker.network.kafka_listener``),
carries many Produce requests in order. For them ``begin_produce`` does the ordered part of one (its appends, through the replica
manager's ``append_produce``) and returns a task that finishes it (the acks=all
wait) under the same ``answer_typed`` and counters: the next request on the
connection is appended while this one waits for its followers, and the answers go
back in arrival order.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from broker.network.api_catalogue import NAMES
from broker.network.api_catalogue import api as catalogue_api
from broker.network.request_guard import error_response
from broker.replication.control import fence_control_request, needs_lookup
from broker.security.principal import RequestContext
from proto import errors
from proto import minikafka_pb2 as pb
from zk.client import KafkaZkClient, is_zookeeper_unavailable

if TYPE_CHECKING:
    from broker.coordinator.group.group_apis import GroupApis
    from broker.coordinator.transaction.txn_apis import TxnApis
    from broker.replication.replica_manager import ReplicaManager
    from broker.server.admin import AdminManager
    from broker.server.describe_apis import DescribeApis
    from broker.server.observability import RequestMetrics

log = logging.getLogger(__name__)
E = pb.ErrorCode
R = TypeVar("R")
Q = TypeVar("Q")
Handler = Callable[[Any, RequestContext], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class ControlPlane:
    """What the control-plane APIs need of the broker: its id and current broker epoch (-1 until
    registered), the ZooKeeper gateway (read, on a thread, only when a request's epoch is above what
    the broker knows) and the ControlledShutdown handler (the controller's)."""
    broker_id: int
    broker_epoch: Callable[[], int]
    zk: KafkaZkClient
    controlled_shutdown: Handler


class KafkaApis:
    def __init__(self, rm: ReplicaManager, admin: AdminManager, groups: GroupApis, metrics: RequestMetrics,
                 handle_metadata: Handler, handle_describe_replicas: Callable[[Any, RequestContext], Any],
                 control: ControlPlane, describe: DescribeApis | None = None, txn: TxnApis | None = None) -> None:
        self.metrics = metrics
        self._rm = rm
        self._control = control
        # API name -> (its latency histogram's observe, its request counter's inc): prometheus_client's
        # labels() takes a lock and builds the label key on every call, twice per request.
        self._per_api: dict[str, tuple[Callable[[float], None], Callable[[], None]]] = {}
        self._append_produce = rm.append_produce
        # API name (as in metrics and error_response) -> handler of the protobuf request.
        self.handlers: dict[str, Handler] = {
            "Metadata": handle_metadata,
            "Produce": rm.handle_produce,
            "Fetch": rm.handle_fetch,
            "FollowerFetch": rm.handle_fetch,
            "ListOffsets": _sync(rm.handle_list_offsets),
            "OffsetsForLeaderEpoch": _sync(rm.handle_offsets_for_leader_epoch),
            "CreateTopics": admin.create_topics,
            "DeleteTopics": admin.delete_topics,
            "CreatePartitions": admin.create_partitions,
            "DeleteRecords": rm.handle_delete_records,
            "DescribeConfigs": admin.describe_configs,
            "AlterConfigs": admin.alter_configs,
            # With a transactional id: the transaction coordinator (broker.coordinator.transaction.txn_apis).
            "InitProducerId": admin.init_producer_id if txn is None else txn.init_producer_id,
            "DescribeReplicas": _sync(handle_describe_replicas),
            "ElectLeaders": admin.elect_leaders,
            "AlterPartitionReassignments": admin.alter_partition_reassignments,
            "ListPartitionReassignments": admin.list_partition_reassignments,
            "CreateAcls": admin.create_acls,
            "DescribeAcls": admin.describe_acls,
            "DeleteAcls": admin.delete_acls,
            "AlterUserScramCredentials": admin.alter_user_scram_credentials,
            "DescribeUserScramCredentials": admin.describe_user_scram_credentials,
            "FindCoordinator": groups.find_coordinator if txn is None else txn.find_coordinator,  # key_type 1 too
            "JoinGroup": groups.join_group,
            "SyncGroup": groups.sync_group,
            "Heartbeat": groups.heartbeat,
            "LeaveGroup": groups.leave_group,
            "OffsetCommit": groups.offset_commit,
            "OffsetFetch": groups.offset_fetch,
            "ListGroups": groups.list_groups,
            "DescribeGroups": groups.describe_groups,
            "DeleteGroups": groups.delete_groups,
            "OffsetDelete": groups.offset_delete,
            # DescribeCluster, DescribeLogDirs, DescribeProducers (broker.server.describe_apis; absent:
            # answered UNKNOWN_SERVER_ERROR, as for a handler that fails).
            "DescribeCluster": _wired(describe, "describe_cluster"),
            "DescribeLogDirs": _wired(describe, "describe_log_dirs"),
            "DescribeProducers": _wired(describe, "describe_producers"),
            # The __consumer_offsets entries (a transaction's group offsets) to the group coordinator.
            "WriteTxnMarkers": (rm.handle_write_txn_markers if txn is None
                                else txn.write_txn_markers(rm.handle_write_txn_markers)),
            "AddPartitionsToTxn": _wired(txn, "add_partitions_to_txn"),
            "AddOffsetsToTxn": _wired(txn, "add_offsets_to_txn"),
            "EndTxn": _wired(txn, "end_txn"),
            "TxnOffsetCommit": _wired(txn, "txn_offset_commit"),
            # The control plane: admitted by handle_control first.
            "LeaderAndIsr": _leader_and_isr(rm),
            "UpdateMetadata": _sync(lambda req, _ctx: rm.handle_update_metadata(req)),
            "StopReplica": _sync(lambda req, _ctx: rm.handle_stop_replica(req)),
            "ControlledShutdown": control.controlled_shutdown,
        }
        # One handler for every API of the catalogue (broker.network.api_catalogue), and no other.
        if self.handlers.keys() != NAMES:
            raise AssertionError(f"handlers and API catalogue differ: {sorted(self.handlers.keys() ^ NAMES)}")

    async def handle(self, api: str, request: Any, ctx: RequestContext) -> Any:
        """``request``'s answer from its handler, typed whatever happens, and counted."""
        return await self._answered(api, request, self.handlers[api](request, ctx), time.perf_counter())

    async def handle_control(self, api: str, request: Any, ctx: RequestContext) -> Any:
        """A control-plane request (authenticated on the control-plane listener): a request from the
        controller (``fenced`` in the catalogue) is admitted first - sent by the broker that is the
        controller, for this incarnation of this broker, by a controller epoch ZooKeeper has reached
        (S12.1, S12.2) - and answered with the refusal's code otherwise; then ``handle``. A ZooKeeper
        failure in the epochs' lookup propagates (the controller's channel retries the request)."""
        if catalogue_api(api).fenced:
            code = await self._admit(api, request, ctx)
            if code != E.NONE:
                return error_response(api, request, code)
        return await self.handle(api, request, ctx)

    async def _admit(self, api: str, request: Any, ctx: RequestContext) -> int:
        """NONE, or the error code to refuse the controller's ``request`` with."""
        if ctx.broker_id != request.controller_id:
            log.warning("%s from %s claims controller %d: refused", api, ctx.principal, request.controller_id)
            return E.CLUSTER_AUTHORIZATION_FAILED
        # The broker and controller epochs (broker.replication.control, which the simulation runs
        # too); ZooKeeper is read, on a thread, only when a request's epoch is above what we know.
        control, rm = self._control, self._rm
        zk, broker_id, broker_epoch = control.zk, control.broker_id, control.broker_epoch()
        args = (request.broker_epoch, broker_epoch, lambda: zk.own_broker_epoch(broker_id),
                request.controller_epoch, rm.controller_epoch,
                lambda: (lambda c: None if c is None else c[0])(zk.get_controller_epoch()))
        if needs_lookup(request.broker_epoch, broker_epoch, request.controller_epoch, rm.controller_epoch):
            code = await asyncio.to_thread(fence_control_request, *args)
        else:
            code = fence_control_request(*args)
        if code == E.STALE_CONTROLLER_EPOCH:
            log.warning("%s claims controller epoch %d beyond ZooKeeper's: refused", api, request.controller_epoch)
        return code

    async def begin_produce(self, request: pb.ProduceRequest, ctx: RequestContext) -> asyncio.Task[pb.ProduceResponse]:
        """Append ``request``'s batches now (in the caller's order) and return the task that answers
        it once its acks are in - typed and counted as ``handle`` does."""
        start = time.perf_counter()
        try:
            finish = await self._append_produce(request, ctx)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # typed by answer_typed below, as handle() would
            finish = _raising(e)
        return asyncio.get_running_loop().create_task(self._answered("Produce", request, finish, start))

    async def _answered(self, api: str, request: Any, call: Awaitable[Any], start: float) -> Any:
        resp = await answer_typed(api, call, request)
        counted = self._per_api.get(api)
        if counted is None:
            m = self.metrics
            counted = self._per_api[api] = (m.latency.labels(api).observe, m.requests.labels(api).inc)
        observe, inc = counted
        observe(time.perf_counter() - start)
        inc()
        counts = partition_error_counts(resp)  # slices: a Metadata answer may list a million topics
        while True:
            try:
                next(counts)
            except StopIteration as done:
                tally: dict[int, int] = done.value
                break
            await asyncio.sleep(0)
        for code, n in tally.items():
            self.metrics.errors.labels(api, E.Name(code)).inc(n)
        return resp


async def _raising(e: Exception) -> Any:
    raise e


def _wired(owner: Any, method: str) -> Handler:
    """``owner``'s handler ``method``; without an owner (a KafkaApis built without it, in tests), one
    that fails."""
    if owner is not None:
        handler: Handler = getattr(owner, method)
        return handler

    async def missing(_request: Any, _ctx: RequestContext) -> Any:
        raise RuntimeError(f"{method}: not wired into this KafkaApis")
    return missing


def partition_errors(resp: Any) -> list[int]:
    """Every non-zero partition (or topic) error code in a response, for the error counters."""
    codes = []
    for t in getattr(resp, "topics", ()):
        for p in getattr(t, "partitions", ()):
            if p.error_code:
                codes.append(p.error_code)
        if getattr(t, "error_code", 0) and not getattr(t, "partitions", ()):
            codes.append(t.error_code)
    return codes


ERROR_COUNT_SLICE = 1000  # topics counted between two yields of partition_error_counts (~1 ms)
PARTITIONS_PER_TOPIC = 1  # and ERROR_COUNT_SLICE times this many partitions


def partition_error_counts(resp: Any, slice_size: int = ERROR_COUNT_SLICE) -> Generator[None, None, dict[int, int]]:
    """``partition_errors(resp)`` tallied per code (code -> how many), yielding after every
    ``slice_size`` topics and every ``slice_size * PARTITIONS_PER_TOPIC`` partitions so that the
    caller can let other work run between slices. Every answer is counted (a follower fetch's of
    dozens of topics too): which fields its topics have is looked up once per message type, as a
    ``getattr`` with a default on a protobuf message that lacks the field raises and catches an
    AttributeError inside (~1 us a topic)."""
    tally: dict[int, int] = {}
    topics = getattr(resp, "topics", ())
    if not topics:
        return tally
    has_partitions, has_error_code = _topic_fields(topics[0])
    todo = slice_size * PARTITIONS_PER_TOPIC  # partitions counted until the next yield
    for i, t in enumerate(topics):
        parts = t.partitions if has_partitions else ()
        for p in parts:
            if p.error_code:
                tally[p.error_code] = tally.get(p.error_code, 0) + 1
            todo -= 1
            if todo <= 0:  # one topic may have 100,000 partitions (an OffsetCommit's answer)
                todo = slice_size * PARTITIONS_PER_TOPIC
                yield
        if has_error_code:
            code = t.error_code
            if code and not parts:
                tally[code] = tally.get(code, 0) + 1
        if (i + 1) % slice_size == 0:
            yield
    return tally


# A response's topic message type -> (has partitions, has an error code).
_TOPIC_FIELDS: dict[type, tuple[bool, bool]] = {}


def _topic_fields(topic: Any) -> tuple[bool, bool]:
    kind = type(topic)
    fields = _TOPIC_FIELDS.get(kind)
    if fields is None:
        fields = _TOPIC_FIELDS[kind] = (hasattr(topic, "partitions"), hasattr(topic, "error_code"))
    return fields


def _leader_and_isr(rm: ReplicaManager) -> Callable[[pb.LeaderAndIsrRequest, RequestContext],
                                                   Awaitable[pb.LeaderAndIsrResponse]]:
    """LeaderAndIsr: new logs' directories made off the loop first, then applied as before; one
    request at a time, in arrival order (an asyncio.Lock is FIFO), as the await would otherwise let
    a later, smaller request be applied first."""
    lock = asyncio.Lock()

    async def call(req: pb.LeaderAndIsrRequest, _ctx: RequestContext) -> pb.LeaderAndIsrResponse:
        async with lock:
            await rm.prepare_leader_and_isr(req)
            return rm.handle_leader_and_isr(req)
    return call


def _sync(handler: Callable[[Q, RequestContext], R]) -> Callable[[Q, RequestContext], Awaitable[R]]:
    """Await-able wrapper for handlers that answer synchronously (called inside answer_typed)."""
    async def call(request: Q, ctx: RequestContext) -> R:
        return handler(request, ctx)
    return call


async def answer_typed(api: str, call: Awaitable[R], request: Any) -> R:
    """The handler's answer; if it raised anyway, the request's response with a typed error on every
    partition - never gRPC's UNKNOWN (SPEC S13.2)."""
    try:
        return await call
    except asyncio.CancelledError:
        raise
    except errors.KafkaError as e:
        log.info("%s refused: %s", api, e)
        resp: R = error_response(api, request, e.code)
        return resp
    except Exception as e:
        if is_zookeeper_unavailable(e):
            # The session is expiring or reconnecting (a paused broker, a ZooKeeper outage): a
            # retriable answer, as Kafka's admin manager times out, not an unexplained server error.
            log.warning("%s: ZooKeeper unavailable (%r); answering REQUEST_TIMED_OUT", api, e)
            resp = error_response(api, request, errors.RequestTimedOutError.code)
            return resp
        log.exception("%s failed unexpectedly; answering UNKNOWN_SERVER_ERROR", api)
        resp = error_response(api, request, errors.UnknownServerError.code)
        return resp
