"""One broker process (Kafka's KafkaServer): start-up, the gRPC services, shutdown.

Start-up order matters and follows Kafka: recover the logs, connect to
ZooKeeper, start serving gRPC, *then* register the ephemeral
/brokers/ids/[id] znode (so the controller never sends requests to a broker
that cannot answer), then start the controller component. SIGTERM is a
controlled shutdown: leaderships move away first, then everything is
checkpointed and the clean-shutdown marker written. SIGKILL is survived
through the ZooKeeper session expiry and log recovery.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from kazoo.protocol.states import KazooState

from broker.admin import AdminManager
from broker.config import BrokerConfig
from broker.fetcher import FetcherSettings, ReplicaFetcherManager
from broker.log.config import LogConfig
from broker.log.manager import LogManager
from broker.metadata_cache import MetadataCache
from broker.observability import BrokerMetrics, EventBuffer
from broker.replica_manager import BrokerSettings, ReplicaManager, now_ms
from broker.request_guard import error_response, judge_names
from controller.controller import ControllerSettings, KafkaController
from controller.zk_client import BrokerIdInUseError, KafkaZkClient
from proto import errors
from proto import minikafka_pb2 as pb
from proto import minikafka_pb2_grpc as pb_grpc
from proto.grpc_options import SERVER_OPTIONS
from proto.zk_data import BrokerRegistration, ConfigChangesZNode

log = logging.getLogger(__name__)
E = pb.ErrorCode
R = TypeVar("R")
Q = TypeVar("Q")


def server_options(cfg: BrokerConfig) -> list[tuple[str, int]]:
    """gRPC server options from the broker's bounds (SPEC S13.4)."""
    options = dict(SERVER_OPTIONS)
    options["grpc.max_receive_message_length"] = cfg.socket_request_max_bytes
    # connections.max.idle.ms: an idle connection is closed (GOAWAY); clients reconnect on demand.
    options["grpc.max_connection_idle_ms"] = cfg.connections_max_idle_ms
    return list(options.items())


class KafkaServer:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.metadata = MetadataCache()
        self.broker_epoch = -1
        self.port = -1
        self.cluster_id = ""
        self._topic_configs: dict[str, LogConfig] = {}
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self._session_lost = threading.Event()
        self._seen_config_changes: set[str] = set()
        self.registered = asyncio.Event()
        # Recent cluster events seen by this broker (log records tagged with an "event").
        self.events = EventBuffer()
        logging.getLogger().addHandler(self.events)

    # ------------------------------------------------------------ start-up

    async def startup(self) -> None:
        cfg = self.config
        self.loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        self.log_manager = LogManager(cfg.log_dir_paths, cfg.default_log_config(), self.topic_config)
        await asyncio.to_thread(self.log_manager.startup, now_ms())
        log.info("broker %d: loaded %d logs in %.2fs (clean shutdown: %s)", self.broker_id, len(self.log_manager),
                 time.monotonic() - t0, all(self.log_manager.had_clean_shutdown.values()))

        self.zk = KafkaZkClient(cfg.zookeeper_connect, cfg.session_timeout_ms, cfg.connection_timeout_ms)
        await asyncio.to_thread(self.zk.start)
        await asyncio.to_thread(self.zk.ensure_persistent_paths)
        self.cluster_id = await asyncio.to_thread(self.zk.get_or_create_cluster_id, uuid.uuid4().hex[:22])

        self.replica_manager = ReplicaManager(
            BrokerSettings(self.broker_id, cfg.replica_lag_time_max_ms, cfg.default_log_config(),
                           max_request_partitions=cfg.max_request_partitions, fetch_max_bytes=cfg.fetch_max_bytes,
                           fetch_purgatory_max_requests=cfg.fetch_purgatory_max_requests,
                           queued_max_request_bytes=cfg.queued_max_request_bytes,
                           max_wait_ms=cfg.request_timeout_ms),
            self.log_manager, self.zk, self.metadata, self.topic_config)
        self.fetcher_manager = ReplicaFetcherManager(
            FetcherSettings(self.broker_id, cfg.replica_fetch_wait_max_ms, cfg.replica_fetch_min_bytes,
                            cfg.replica_fetch_max_bytes, cfg.replica_fetch_backoff_ms, cfg.request_timeout_ms),
            self.replica_manager)
        self.replica_manager.fetcher_manager = self.fetcher_manager
        self.admin = AdminManager(cfg, self.zk, self.metadata, self.topic_config)
        self.controller = KafkaController(ControllerSettings(
            broker_id=self.broker_id,
            delete_topic_enable=cfg.delete_topic_enable,
            unclean_leader_election_enable=cfg.unclean_leader_election_enable,
            auto_leader_rebalance_enable=cfg.auto_leader_rebalance_enable,
            leader_imbalance_per_broker_percentage=cfg.leader_imbalance_per_broker_percentage,
            leader_imbalance_check_interval_seconds=cfg.leader_imbalance_check_interval_seconds,
            request_timeout_ms=min(cfg.controller_socket_timeout_ms, cfg.request_timeout_ms)), self.zk)

        self.metrics = BrokerMetrics(self)
        if cfg.metrics_port >= 0:
            port = self.metrics.serve(cfg.metrics_host, cfg.metrics_port)
            log.info("broker %d: metrics on http://%s:%d/metrics", self.broker_id, cfg.metrics_host, port)

        self.grpc_server = grpc.aio.server(options=server_options(cfg),
                                           maximum_concurrent_rpcs=cfg.queued_max_requests)
        # Health (NOT_SERVING until the logs are recovered and the broker is registered) and reflection,
        # so that grpcurl and container health checks work without our .proto files.
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.grpc_server)
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        reflection.enable_server_reflection([
            pb.DESCRIPTOR.services_by_name[name].full_name for name in ("KafkaApi", "BrokerControl", "ControllerApi")
        ] + [health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME], self.grpc_server)
        pb_grpc.add_KafkaApiServicer_to_server(KafkaApiServicer(self), self.grpc_server)  # type: ignore[no-untyped-call]
        pb_grpc.add_BrokerControlServicer_to_server(BrokerControlServicer(self), self.grpc_server)  # type: ignore[no-untyped-call]
        pb_grpc.add_ControllerApiServicer_to_server(ControllerApiServicer(self), self.grpc_server)  # type: ignore[no-untyped-call]
        host, port = cfg.listener
        self.port = self.grpc_server.add_insecure_port(f"{host}:{port}")
        if self.port == 0:
            raise OSError(f"cannot listen on {host}:{port}")
        await self.grpc_server.start()

        await self._register()
        await self._set_health(health_pb2.HealthCheckResponse.SERVING)
        self.zk.add_state_listener(self._on_zk_state)
        self.controller.start()
        self.zk.zk.ChildrenWatch(ConfigChangesZNode.PATH, self._on_config_changes_watch)

        self._every(cfg.replica_lag_time_max_ms / 2000.0, self.replica_manager.maybe_shrink_isr)
        self._every(cfg.replica_high_watermark_checkpoint_interval_ms / 1000.0,
                    self.replica_manager.checkpoint_high_watermarks)
        self._every(cfg.log_retention_check_interval_ms / 1000.0, self._cleanup_logs)
        self._every(cfg.log_flush_scheduler_interval_ms / 1000.0, lambda: self.log_manager.flush_dirty_logs(now_ms()))
        self._every(cfg.log_flush_offset_checkpoint_interval_ms / 1000.0, self._checkpoint_offsets)
        log.info("broker %d started on %s:%d (cluster %s, broker epoch %d)", self.broker_id, *cfg.advertised[:1],
                 self.port, self.cluster_id, self.broker_epoch)

    async def _register(self) -> None:
        host = self.config.advertised[0]
        if host in ("0.0.0.0", ""):
            host = "127.0.0.1"
        reg = BrokerRegistration(self.broker_id, host, self.port, now_ms(), self.config.broker_rack or None)
        # A znode left by our own previous incarnation (kill -9, quick restart) goes away when its
        # session expires: wait that long before concluding that a live broker holds the id.
        deadline = time.monotonic() + self.config.session_timeout_ms / 1000.0 + 2.0
        while True:
            try:
                self.broker_epoch = await asyncio.to_thread(self.zk.register_broker, reg)
                break
            except BrokerIdInUseError:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.2)
        self.fetcher_manager.broker_epoch = self.broker_epoch
        self.registered.set()
        log.info("broker %d registered at /brokers/ids/%d (broker epoch %d)", self.broker_id, self.broker_id,
                 self.broker_epoch)

    async def _set_health(self, status: Any) -> None:
        for service in ("", "minikafka.v1.KafkaApi"):
            await self.health.set(service, status)

    def _on_zk_state(self, state: KazooState) -> None:
        """kazoo's thread: record session loss; re-register once a new session is up."""
        self.controller.on_zk_state(state)
        if state == KazooState.LOST:
            log.warning("broker %d: ZooKeeper session expired", self.broker_id)
            self._session_lost.set()
        elif state == KazooState.CONNECTED and self._session_lost.is_set() and not self._stopping:
            self._session_lost.clear()
            self.loop.call_soon_threadsafe(lambda: self._spawn(self._reregister()))

    async def _reregister(self) -> None:
        try:
            await self._register()
        except Exception as e:
            log.error("broker %d: re-registration failed: %s", self.broker_id, e)
            return
        self.controller.on_session_reestablished()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    def _every(self, seconds: float, fn: Any) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(seconds)
                try:
                    fn()
                except Exception:
                    log.exception("periodic task %s failed", getattr(fn, "__name__", fn))

        self._tasks.append(asyncio.get_running_loop().create_task(loop()))

    def _cleanup_logs(self) -> None:
        deleted = self.log_manager.cleanup_logs(now_ms())
        if deleted:
            log.info("retention deleted %d segments", deleted)
            self.log_manager.checkpoint_log_start_offsets()

    def _checkpoint_offsets(self) -> None:
        self.log_manager.checkpoint_recovery_points()
        self.log_manager.checkpoint_log_start_offsets()

    # ------------------------------------------------------------ topic configs

    def topic_config(self, topic: str) -> LogConfig:
        cfg = self._topic_configs.get(topic)
        if cfg is None:
            overrides = self.zk.get_topic_config(topic) if hasattr(self, "zk") else {}
            try:
                cfg = self.config.default_log_config().with_overrides(overrides)
                cfg.check_policy(self.config.min_segment_bytes, self.config.min_segment_ms)
            except errors.KafkaError as e:
                log.warning("topic %s: ignoring bad config overrides %s: %s", topic, overrides, e)
                cfg = self.config.default_log_config()
            self._topic_configs[topic] = cfg
        return cfg

    def _on_config_changes_watch(self, children: list[str]) -> None:
        self.loop.call_soon_threadsafe(lambda: self._spawn(self._reload_configs(children)))

    async def _reload_configs(self, children: list[str]) -> None:
        for child in sorted(set(children) - self._seen_config_changes):
            self._seen_config_changes.add(child)
            try:
                data, _ = await asyncio.to_thread(self.zk.zk.get, f"{ConfigChangesZNode.PATH}/{child}")
                topic = ConfigChangesZNode.decode(data)
            except Exception:
                continue
            self._topic_configs.pop(topic, None)
            if any(t == topic for (t, _p), _l in self.log_manager):
                cfg = await asyncio.to_thread(self.topic_config, topic)
                self.log_manager.update_config(topic, cfg)
                log.info("topic %s: config reloaded", topic)

    # ------------------------------------------------------------ requests answered here

    async def handle_metadata(self, req: pb.MetadataRequest) -> pb.MetadataResponse:
        md = self.metadata
        resp = pb.MetadataResponse(cluster_id=self.cluster_id, controller_id=md.controller_id,
                                   controller_epoch=md.controller_epoch)
        brokers = list(md.brokers.values())
        if not brokers and self.registered.is_set():
            brokers = [pb.BrokerEndpoint(broker_id=self.broker_id, host=self.config.advertised[0], port=self.port)]
        resp.brokers.extend(sorted(brokers, key=lambda b: b.broker_id))
        names = md.topics() if req.all_topics else list(req.topics)
        verdicts = [E.NONE] * len(names) if req.all_topics else judge_names(names, self.config.max_request_partitions)
        for name, verdict in zip(names, verdicts, strict=True):
            tm = resp.topics.add(name=name)
            if verdict != E.NONE:
                tm.error_code = verdict
                continue
            parts = md.partitions.get(name)
            if parts is None:
                if self.config.auto_create_topics_enable and req.allow_auto_topic_creation and not req.all_topics:
                    await self.admin.auto_create(name)
                    tm.error_code = E.LEADER_NOT_AVAILABLE
                else:
                    tm.error_code = E.UNKNOWN_TOPIC_OR_PARTITION
                continue
            for p, info in sorted(parts.items()):
                tm.partitions.add(error_code=E.LEADER_NOT_AVAILABLE if info.leader < 0 else E.NONE, partition=p,
                                  leader=info.leader, leader_epoch=info.leader_epoch, replicas=info.replicas,
                                  isr=info.isr, offline_replicas=info.offline_replicas)
        return resp

    def handle_describe_replicas(self, req: pb.DescribeReplicasRequest) -> pb.DescribeReplicasResponse:
        rm = self.replica_manager
        t = now_ms()
        resp = pb.DescribeReplicasResponse(broker_id=self.broker_id, is_controller=self.controller.active,
                                           controller_epoch=max(rm.controller_epoch, self.controller.ctx.epoch))
        wanted = set(req.topics)
        for (topic, part), p in sorted(rm.partitions.items()):
            if wanted and topic not in wanted:
                continue
            lg = p.log
            r = resp.replicas.add(topic=topic, partition=part, is_leader=p.is_leader, leader=p.leader_id,
                                  leader_epoch=p.leader_epoch, log_start_offset=lg.log_start_offset,
                                  log_end_offset=lg.log_end_offset, high_watermark=lg.high_watermark,
                                  replicas=p.replicas, isr=p.isr, size_bytes=lg.size, segments=len(lg.segments))
            if p.leader_state is not None:
                for fid, prog in sorted(p.leader_state.followers.items()):
                    r.followers.add(broker_id=fid, log_end_offset=prog.log_end_offset,
                                    last_caught_up_ms_ago=t - prog.last_caught_up_time_ms
                                    if prog.last_caught_up_time_ms else -1)
        for ev in self.events.latest(req.max_events):
            resp.events.add(timestamp_ms=ev.timestamp_ms, broker_id=self.broker_id, kind=ev.kind, topic=ev.topic,
                            partition=ev.partition, detail=ev.detail)
        return resp

    async def handle_controlled_shutdown(self, req: pb.ControlledShutdownRequest) -> pb.ControlledShutdownResponse:
        fut = self.controller.submit_controlled_shutdown(req.broker_id, req.broker_epoch)
        return await asyncio.wrap_future(fut)

    # ------------------------------------------------------------ shutdown

    async def controlled_shutdown(self) -> bool:
        """Ask the controller to move this broker's leaderships away (bounded retries)."""
        cfg = self.config
        if not cfg.controlled_shutdown_enable:
            return False
        for attempt in range(cfg.controlled_shutdown_max_retries + 1):
            try:
                controller_id = await asyncio.to_thread(self.zk.get_controller_id)
                reg = await asyncio.to_thread(self.zk.get_broker, controller_id) if controller_id is not None \
                    else None
                if reg is None:
                    raise errors.NotControllerError("no controller")
                async with grpc.aio.insecure_channel(reg.address) as ch:
                    stub = pb_grpc.ControllerApiStub(ch)  # type: ignore[no-untyped-call]
                    resp = await stub.ControlledShutdown(
                        pb.ControlledShutdownRequest(broker_id=self.broker_id, broker_epoch=self.broker_epoch),
                        timeout=cfg.request_timeout_ms / 1000.0)
                if resp.error_code == E.NONE and not resp.remaining_partitions:
                    # Wait (bounded) for the LeaderAndIsr that makes us a follower everywhere.
                    deadline = time.monotonic() + 5
                    while self.replica_manager.leader_count() and time.monotonic() < deadline:
                        await asyncio.sleep(0.05)
                    log.info("broker %d: controlled shutdown succeeded", self.broker_id)
                    return True
                log.info("broker %d: controlled shutdown attempt %d: error %s, %d partitions still led",
                         self.broker_id, attempt + 1, E.Name(resp.error_code), len(resp.remaining_partitions))
            except Exception as e:
                log.info("broker %d: controlled shutdown attempt %d failed: %s", self.broker_id, attempt + 1, e)
            await asyncio.sleep(cfg.controlled_shutdown_retry_backoff_ms / 1000.0)
        log.warning("broker %d: controlled shutdown did not complete; shutting down anyway", self.broker_id)
        return False

    async def shutdown(self, controlled: bool = True) -> None:
        if self._stopping:
            return
        self._stopping = True
        log.info("broker %d: shutting down", self.broker_id)
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        if controlled and self.registered.is_set():
            await self.controlled_shutdown()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.to_thread(self.controller.shutdown)
        await self.fetcher_manager.shutdown()
        await self.grpc_server.stop(grace=0.5)
        self.replica_manager.checkpoint_high_watermarks()
        await asyncio.to_thread(self.log_manager.shutdown)
        await asyncio.to_thread(self.zk.stop)
        log.info("broker %d: shut down cleanly", self.broker_id)


# ------------------------------------------------------------------ gRPC servicers (thin)


def _partition_errors(resp: Any) -> list[int]:
    """Every non-zero partition (or topic) error code in a response, for the error counters."""
    codes = []
    for t in getattr(resp, "topics", ()):
        for p in getattr(t, "partitions", ()):
            if p.error_code:
                codes.append(p.error_code)
        if getattr(t, "error_code", 0) and not getattr(t, "partitions", ()):
            codes.append(t.error_code)
    return codes


class KafkaApiServicer(pb_grpc.KafkaApiServicer):
    def __init__(self, server: KafkaServer) -> None:
        self.s = server

    async def _measured(self, api: str, call: Awaitable[R], request: Any) -> R:
        m = self.s.metrics.requests
        start = time.perf_counter()
        resp = await answer_typed(api, call, request)
        m.latency.labels(api).observe(time.perf_counter() - start)
        m.requests.labels(api).inc()
        for code in _partition_errors(resp):
            m.errors.labels(api, E.Name(code)).inc()
        return resp

    async def Metadata(self, request: pb.MetadataRequest, context: Any) -> pb.MetadataResponse:
        return await self._measured("Metadata", self.s.handle_metadata(request), request)

    async def Produce(self, request: pb.ProduceRequest, context: Any) -> pb.ProduceResponse:
        self.s.metrics.requests.bytes_in.inc(sum(len(p.records) for t in request.topics for p in t.partitions))
        return await self._measured("Produce", self.s.replica_manager.handle_produce(request), request)

    async def Fetch(self, request: pb.FetchRequest, context: Any) -> pb.FetchResponse:
        resp = await self._measured("Fetch" if request.replica_id < 0 else "FollowerFetch",
                                    self.s.replica_manager.handle_fetch(request), request)
        self.s.metrics.requests.bytes_out.inc(sum(len(p.records) for t in resp.topics for p in t.partitions))
        return resp

    async def ListOffsets(self, request: pb.ListOffsetsRequest, context: Any) -> pb.ListOffsetsResponse:
        return await self._measured("ListOffsets", _call(self.s.replica_manager.handle_list_offsets, request),
                                    request)

    async def OffsetsForLeaderEpoch(self, request: pb.OffsetsForLeaderEpochRequest,
                                    context: Any) -> pb.OffsetsForLeaderEpochResponse:
        return await self._measured("OffsetsForLeaderEpoch",
                                    _call(self.s.replica_manager.handle_offsets_for_leader_epoch, request), request)

    async def CreateTopics(self, request: pb.CreateTopicsRequest, context: Any) -> pb.CreateTopicsResponse:
        return await self._measured("CreateTopics", self.s.admin.create_topics(request), request)

    async def DeleteTopics(self, request: pb.DeleteTopicsRequest, context: Any) -> pb.DeleteTopicsResponse:
        return await self._measured("DeleteTopics", self.s.admin.delete_topics(request), request)

    async def DescribeConfigs(self, request: pb.DescribeConfigsRequest, context: Any) -> pb.DescribeConfigsResponse:
        return await self._measured("DescribeConfigs", self.s.admin.describe_configs(request), request)

    async def AlterConfigs(self, request: pb.AlterConfigsRequest, context: Any) -> pb.AlterConfigsResponse:
        return await self._measured("AlterConfigs", self.s.admin.alter_configs(request), request)

    async def InitProducerId(self, request: pb.InitProducerIdRequest, context: Any) -> pb.InitProducerIdResponse:
        return await self._measured("InitProducerId", self.s.admin.init_producer_id(request), request)

    async def DescribeReplicas(self, request: pb.DescribeReplicasRequest,
                               context: Any) -> pb.DescribeReplicasResponse:
        return await self._measured("DescribeReplicas", _call(self.s.handle_describe_replicas, request), request)


async def _call(handler: Callable[[Q], R], request: Q) -> R:
    """Await-able wrapper for handlers that answer synchronously (called inside answer_typed)."""
    return handler(request)


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
    except Exception:
        log.exception("%s failed unexpectedly; answering UNKNOWN_SERVER_ERROR", api)
        resp = error_response(api, request, errors.UnknownServerError.code)
        return resp


class BrokerControlServicer(pb_grpc.BrokerControlServicer):
    def __init__(self, server: KafkaServer) -> None:
        self.s = server

    async def LeaderAndIsr(self, request: pb.LeaderAndIsrRequest, context: Any) -> pb.LeaderAndIsrResponse:
        if request.broker_epoch >= 0 and request.broker_epoch < self.s.broker_epoch:
            return pb.LeaderAndIsrResponse(error_code=E.STALE_BROKER_EPOCH)
        return await answer_typed("LeaderAndIsr", _call(self.s.replica_manager.handle_leader_and_isr, request),
                                  request)

    async def UpdateMetadata(self, request: pb.UpdateMetadataRequest, context: Any) -> pb.UpdateMetadataResponse:
        if request.broker_epoch >= 0 and request.broker_epoch < self.s.broker_epoch:
            return pb.UpdateMetadataResponse(error_code=E.STALE_BROKER_EPOCH)
        return await answer_typed("UpdateMetadata", _call(self.s.replica_manager.handle_update_metadata, request),
                                  request)

    async def StopReplica(self, request: pb.StopReplicaRequest, context: Any) -> pb.StopReplicaResponse:
        if request.broker_epoch >= 0 and request.broker_epoch < self.s.broker_epoch:
            return pb.StopReplicaResponse(error_code=E.STALE_BROKER_EPOCH)
        return await answer_typed("StopReplica", _call(self.s.replica_manager.handle_stop_replica, request),
                                  request)


class ControllerApiServicer(pb_grpc.ControllerApiServicer):
    def __init__(self, server: KafkaServer) -> None:
        self.s = server

    async def ControlledShutdown(self, request: pb.ControlledShutdownRequest,
                                 context: Any) -> pb.ControlledShutdownResponse:
        return await answer_typed("ControlledShutdown", self.s.handle_controlled_shutdown(request), request)
