"""One broker process (Kafka's KafkaServer): start-up, the gRPC services, shutdown.

Start-up order matters and follows Kafka: recover the logs, connect to
ZooKeeper, start serving gRPC, *then* register the ephemeral
/brokers/ids/[id] znode (so the controller never sends requests to a broker
that cannot answer), then start the controller component.

Every listener is its own gRPC server (SPEC S12.1): client listeners serve
KafkaApi (follower fetches refused there); the inter-broker listener serves
follower fetches and the control-plane listener BrokerControl and
ControllerApi, both with mutual TLS and to broker certificates only
(``broker.security.gatekeeper``). Each call is authenticated first, and every
handler receives its ``RequestContext`` for authorization. SIGTERM is a
controlled shutdown: leaderships move away first, then everything is
checkpointed and the clean-shutdown marker written. SIGKILL is survived
through the ZooKeeper session expiry and log recovery.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import uuid
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from broker.coordinator.group.group_apis import GroupApis
from broker.coordinator.group.group_coordinator import GroupCoordinator
from broker.coordinator.group.group_state import CoordinatorLimits
from broker.coordinator.transaction.marker_sender import TxnMarkerSender
from broker.coordinator.transaction.txn_apis import TxnApis
from broker.coordinator.transaction.txn_coordinator import TransactionCoordinator
from broker.coordinator.transaction.txn_state import TxnLimits
from broker.coordinator.transaction.txn_verifier import TxnVerifier, grpc_sender
from broker.log.manager import LogManager
from broker.network.kafka_listener import KafkaListener, ListenerLimits
from broker.network.replica_fetch_socket import ReplicaFetchListener
from broker.network.request_guard import ByteBudget
from broker.network.socket_server import SocketServer
from broker.replication.fetcher import FetcherSettings, ReplicaFetcherManager
from broker.replication.replica_manager import BrokerSettings, ReplicaManager, now_ms
from broker.security.gatekeeper import Gatekeeper
from broker.security.principal import RequestContext
from broker.server.admin import AdminManager
from broker.server.config import BrokerConfig
from broker.server.describe_apis import DescribeApis
from broker.server.dynamic_config import DynamicConfigManager
from broker.server.gc_pauses import GcPauseGuard
from broker.server.grpc_servicers import add_servicers
from broker.server.kafka_apis import ControlPlane, KafkaApis
from broker.server.metadata_apis import MetadataApis
from broker.server.metadata_cache import MetadataCache
from broker.server.observability import BrokerMetrics, EventBuffer
from broker.server.registration import BrokerRegistrationManager, SessionListeners
from controller.controller import ControllerSettings, KafkaController
from proto import errors
from proto import minikafka_pb2 as pb
from proto import minikafka_pb2_grpc as pb_grpc
from proto.grpc_options import SERVER_OPTIONS
from zk.client import KafkaZkClient, read_digest
from zk.data import BrokerRegistration, Endpoint

log = logging.getLogger(__name__)
E = pb.ErrorCode


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
        # Bound port of every listener (a configured port 0 is picked by the OS).
        self.ports: dict[str, int] = {}
        self.gate = Gatekeeper(config)
        self.cluster_id = ""
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self.registered = asyncio.Event()
        self.gc_guard: GcPauseGuard | None = None
        # Recent cluster events seen by this broker (log records tagged with an "event").
        self.events = EventBuffer()
        logging.getLogger().addHandler(self.events)

        # The collaborators, built here and wired once (Kafka's KafkaServer fields): constructing
        # them touches no disk beyond the config's files, no network and no event loop; startup()
        # brings them up in order and shutdown() always finds every one.
        cfg = config
        # Not connected until startup(), which loads every topic's config (and the ACLs and
        # credentials) through dynamic_config before the log manager opens a log (SPEC S14.1).
        self.zk = KafkaZkClient(cfg.zookeeper_connect, cfg.session_timeout_ms, cfg.connection_timeout_ms,
                                digest=read_digest(cfg.zookeeper_digest_auth_file) if cfg.zookeeper_set_acl else None)
        self.dynamic_config = DynamicConfigManager(cfg, self.zk, self.gate)
        self.topic_config = self.dynamic_config.topic_config
        self.log_manager = LogManager(cfg.log_dir_paths, cfg.default_log_config(), self.topic_config)
        self.dynamic_config.on_topic_config = self.log_manager.update_config
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
        self.replica_manager.allowed = self.gate.allowed
        self.replica_manager.on_topic_deleted = self.dynamic_config.forget_topic
        self.fetcher_manager.security = self.gate.broker_channel_security()
        self.admin = AdminManager(cfg, self.zk, self.metadata, self.topic_config, self.gate)
        self.controller = KafkaController(ControllerSettings(
            broker_id=self.broker_id,
            delete_topic_enable=cfg.delete_topic_enable,
            unclean_leader_election_enable=cfg.unclean_leader_election_enable,
            auto_leader_rebalance_enable=cfg.auto_leader_rebalance_enable,
            leader_imbalance_per_broker_percentage=cfg.leader_imbalance_per_broker_percentage,
            leader_imbalance_check_interval_seconds=cfg.leader_imbalance_check_interval_seconds,
            request_timeout_ms=min(cfg.controller_socket_timeout_ms, cfg.request_timeout_ms),
            control_plane_listener=cfg.control_plane_listener.name,
            channel_security=self.gate.broker_channel_security()), self.zk)
        self.admin.unclean_election = self.controller.submit_unclean_election  # ElectLeaders UNCLEAN
        self.admin.preferred_election = self.controller.submit_preferred_election  # ElectLeaders PREFERRED
        self.admin.reassign = self.controller.submit_partition_reassignments  # AlterPartitionReassignments
        self.group_coordinator = GroupCoordinator(self.broker_id, self.zk, self._live_broker_ids, CoordinatorLimits(
            min_session_timeout_ms=cfg.group_min_session_timeout_ms,
            max_session_timeout_ms=cfg.group_max_session_timeout_ms, max_group_size=cfg.group_max_size,
            initial_rebalance_delay_ms=cfg.group_initial_rebalance_delay_ms,
            max_committed_partitions=cfg.group_max_committed_partitions,
            offset_metadata_max_bytes=cfg.offset_metadata_max_bytes,
            offsets_retention_ms=cfg.offsets_retention_minutes * 60 * 1000,
            offsets_retention_check_interval_ms=cfg.offsets_retention_check_interval_ms))
        # Transactions (KIP-98): the coordinator of the transactional ids the rule gives this broker,
        # its markers sent to partition leaders (and to group coordinators for TxnOffsetCommit).
        self.txn_markers = TxnMarkerSender(self.metadata, self.gate.broker_channel_security(), cfg.request_timeout_ms,
                                           self.group_coordinator.coordinator_of)
        self.txn_coordinator = TransactionCoordinator(
            self.broker_id, self.zk, self._live_broker_ids, self.admin.next_producer_id,
            self.txn_markers.send_markers, self.txn_markers.complete_group,
            TxnLimits(max_timeout_ms=cfg.transaction_max_timeout_ms,
                      id_expiration_ms=cfg.transactional_id_expiration_ms),
            abort_interval_ms=cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms)
        # KIP-890 part 1: a partition leader appends a producer's first transactional batch only once
        # the transaction's coordinator verified the partition is in it (batched per coordinator).
        self.txn_verifier = TxnVerifier(self.broker_id, self.txn_coordinator.coordinator_of,
                                        self.txn_coordinator.verify_partitions, grpc_sender(self.txn_markers.stub),
                                        cfg.request_timeout_ms, cfg.max_request_partitions)
        self.replica_manager.verify_txn = self.txn_verifier.verify
        self.replica_manager.txn_verification_enabled = cfg.transaction_partition_verification_enable
        self.registration = BrokerRegistrationManager(
            self.zk, self.broker_id, cfg.session_timeout_ms, self._registration, self._on_registered,
            SessionListeners(on_zk_state=self.controller.on_zk_state,
                             on_session_lost=self._on_session_lost,
                             on_session_reestablished=self.controller.on_session_reestablished,
                             reload_cached_state=self.dynamic_config.reload_all),
            stopping=lambda: self._stopping, spawn=self._spawn)
        self.metadata_apis = MetadataApis(
            broker_id=self.broker_id, config=cfg, metadata=self.metadata, gate=self.gate, admin=self.admin,
            replica_manager=self.replica_manager, events=self.events, cluster_id=lambda: self.cluster_id,
            registered=self.registered.is_set, advertised_endpoints=self.advertised_endpoints,
            controller_active=lambda: self.controller.active,
            controller_epoch=lambda: self.controller.ctx.epoch,
            now_ms=now_ms)
        self.group_apis = GroupApis(self.group_coordinator, self.gate, self.metadata_apis.endpoint_of,
                                    cfg.max_request_partitions,
                                    lambda t, p: self.metadata.partition(t, p) is not None)
        self.txn_apis = TxnApis(self.txn_coordinator, self.group_apis, self.group_coordinator, self.admin, self.gate,
                                self.metadata_apis.endpoint_of, cfg.max_request_partitions,
                                lambda t, p: self.metadata.partition(t, p) is not None)
        self.metrics = BrokerMetrics(self)
        # The one request-handling layer behind every listener, gRPC or Kafka protocol.
        self.apis = KafkaApis(self.replica_manager, self.admin, self.group_apis, self.metrics.requests,
                              self.metadata_apis.handle_metadata, self.metadata_apis.handle_describe_replicas,
                              ControlPlane(self.broker_id, lambda: self.broker_epoch, self.zk,
                                           self.handle_controlled_shutdown),
                              describe=DescribeApis(config=cfg, metadata=self.metadata, gate=self.gate,
                                                    cluster_id=lambda: self.cluster_id,
                                                    log_manager=self.log_manager,
                                                    replica_manager=self.replica_manager),
                              txn=self.txn_apis)

    def _on_session_lost(self) -> None:
        """Every coordinator's ZooKeeper leases may have been taken over (SPEC S11.4)."""
        self.group_coordinator.on_session_lost()
        self.txn_coordinator.on_session_lost()

    def _live_broker_ids(self) -> list[int]:
        # Before the controller's first UpdateMetadata this broker knows only itself: no answer
        # yet rather than a coordinator that the rest of the cluster does not agree on.
        return sorted(self.metadata.brokers)

    # ------------------------------------------------------------ start-up

    async def startup(self) -> None:
        cfg = self.config
        self.loop = asyncio.get_running_loop()
        # Kafka's order: ZooKeeper, then every topic's config, then the logs (opened with it).
        await asyncio.to_thread(self.zk.start)
        await asyncio.to_thread(self.zk.ensure_persistent_paths)
        self.cluster_id = await asyncio.to_thread(self.zk.get_or_create_cluster_id, uuid.uuid4().hex[:22])
        await asyncio.to_thread(self.dynamic_config.load_all)

        t0 = time.monotonic()
        await asyncio.to_thread(self.log_manager.startup, now_ms())
        # From here on the loop owns the logs; rolled segments are fsynced on the flusher thread.
        self.log_manager.defer_roll_flushes(asyncio.get_running_loop())
        log.info("broker %d: loaded %d logs in %.2fs (clean shutdown: %s)", self.broker_id, len(self.log_manager),
                 time.monotonic() - t0, all(self.log_manager.had_clean_shutdown.values()))
        # Full garbage collections walk every long-lived object, so they grow with the partitions:
        # the survivors of one over budget are frozen (broker.server.gc_pauses). The first is made
        # here, before this broker serves anything: the modules and the logs just loaded are most
        # of what a broker keeps, and a pause now delays no request.
        rm, logs = self.replica_manager, self.log_manager
        self.gc_guard = GcPauseGuard(asyncio.get_running_loop(), lambda: len(logs), lambda: rm.partitions_removed)
        self.gc_guard.install()
        self.gc_guard.collect_before_serving()

        if cfg.metrics_port >= 0:
            port = self.metrics.serve(cfg.metrics_host, cfg.metrics_port)
            log.info("broker %d: metrics on http://%s:%d/metrics", self.broker_id, cfg.metrics_host, port)

        # Health (NOT_SERVING until the logs are recovered and the broker is registered) and reflection
        # of the client services, so that grpcurl and container health checks work without our .proto.
        self.health = health.aio.HealthServicer()
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        self.grpc_servers: list[grpc.aio.Server] = []
        for role in self.gate.roles():
            server = grpc.aio.server(options=server_options(cfg), maximum_concurrent_rpcs=cfg.queued_max_requests)
            health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
            services = [health_pb2.DESCRIPTOR.services_by_name["Health"].full_name]
            # KafkaApi, and BrokerControl and ControllerApi on every listener, so that a call anywhere but
            # the control plane gets a typed refusal (CLUSTER_AUTHORIZATION_FAILED), not UNIMPLEMENTED.
            add_servicers(server, role, self.apis, self.gate, self.metrics.requests, cfg.queued_max_requests)
            if not role.inter_broker:
                services.append(pb.DESCRIPTOR.services_by_name["KafkaApi"].full_name)
            if cfg.grpc_reflection_enable and not role.inter_broker:
                reflection.enable_server_reflection([*services, reflection.SERVICE_NAME], server)
            x = role.listener
            creds = self.gate.server_credentials(role)
            address = f"{x.host}:{x.port}"
            port = server.add_insecure_port(address) if creds is None else server.add_secure_port(address, creds)
            if port == 0:
                raise OSError(f"cannot listen on {address} ({x.name})")
            self.ports[x.name] = port
            await server.start()
            self.grpc_servers.append(server)
        # The Kafka-framed listeners, each the one socket server (broker.network.socket_server) with its
        # protocol injected - Kafka's (broker.network.kafka_listener) or the follower fetch's
        # (broker.network.replica_fetch_socket) - before registering: a broker is advertised only
        # once every listener it names answers.
        self.kafka_listeners: list[SocketServer] = []
        limits = ListenerLimits(cfg.socket_request_max_bytes, cfg.connections_max_idle_ms, cfg.request_timeout_ms,
                                cfg.max_connections, cfg.queued_max_request_bytes)
        # The memory pools (queued.max.request.bytes each): one shared by every Kafka listener, and
        # one of the replica fetch listener's own (below). A request is counted in one pool only: a
        # Produce that came through a Kafka listener is held in this one until its answer is written,
        # and the replica manager's produce pool (ReplicaManager.produce_bytes) counts only the gRPC
        # listeners' produce requests (RequestContext.bytes_reserved).
        frame_budget = ByteBudget(cfg.queued_max_request_bytes)
        for x in cfg.kafka_listener_list:
            kl = KafkaListener(x, self.apis, limits, frame_budget, tls=self.gate.kafka_tls(x),
                               sasl=self.gate.kafka_sasl(x), broker_prefix=cfg.broker_principal_prefix)
            self.ports[x.name] = await kl.start()
            self.kafka_listeners.append(kl)
        # Follower fetches over plain TLS sockets (broker.network.replica_fetch_socket), on the inter-broker host.
        self.replica_fetch_port = 0
        self.replica_fetch_listener: ReplicaFetchListener | None = None
        if cfg.replica_fetch_listener_port >= 0:
            # A pool of its own, deliberately: clients filling the Kafka listeners' pool must not starve
            # replication (and so every acks=all produce); Kafka serves its replication listener on its
            # own processors. It holds follower fetch frames only, so nothing is counted in both pools.
            rfl = ReplicaFetchListener(cfg.inter_broker_listener.host, cfg.replica_fetch_listener_port, self.apis,
                                       limits, ByteBudget(cfg.queued_max_request_bytes), self.gate.replica_fetch_tls(),
                                       cfg.broker_principal_prefix)
            self.replica_fetch_port = await rfl.start()
            self.replica_fetch_listener = rfl
            self.kafka_listeners.append(rfl)
        self.port = self.ports[next(r.listener.name for r in self.gate.roles() if not r.inter_broker)
                               if any(not r.inter_broker for r in self.gate.roles())
                               else cfg.inter_broker_listener.name]

        await self.registration.register()
        await self._set_health(health_pb2.HealthCheckResponse.SERVING)
        self.registration.watch_session(self.loop)
        self.controller.start()
        self.group_coordinator.start()
        self.txn_coordinator.start()
        self.dynamic_config.start_watches(self.loop)

        self._every(cfg.replica_lag_time_max_ms / 2000.0, self.replica_manager.maybe_shrink_isr)
        if self.gc_guard is not None:
            self._every(1.0, self.gc_guard.tick)
        # The periodic checkpoints are written on the log manager's flusher thread (see
        # LogManager._checkpoint); those at shutdown and after deletions are written at once.
        self._every(cfg.replica_high_watermark_checkpoint_interval_ms / 1000.0,
                    lambda: self.replica_manager.checkpoint_high_watermarks(background=True))
        self._every(cfg.log_retention_check_interval_ms / 1000.0, self._cleanup_logs)
        self._every(cfg.log_flush_scheduler_interval_ms / 1000.0, lambda: self.log_manager.flush_dirty_logs(now_ms()))
        self._every(cfg.log_flush_offset_checkpoint_interval_ms / 1000.0, self._checkpoint_offsets)
        log.info("broker %d started on %s (cluster %s, broker epoch %d)", self.broker_id,
                 ", ".join(f"{x.name}://{x.host}:{self.ports[x.name]} ({x.security_protocol})"
                           for x in [*cfg.listener_list, *cfg.kafka_listener_list]), self.cluster_id,
                 self.broker_epoch)

    def advertised_endpoints(self) -> tuple[Endpoint, ...]:
        """What this broker registers: advertised listeners, with the bound port where it was 0."""
        cfg = self.config
        return tuple(Endpoint(x.name, x.host, x.port or self.ports.get(x.name, 0), x.security_protocol)
                     for x in [*cfg.advertised_listener_list, *cfg.advertised_kafka_listener_list])

    def _registration(self) -> BrokerRegistration:
        """What /brokers/ids/[id] says of this broker (its listeners are bound by now)."""
        endpoints = self.advertised_endpoints()
        inter = self.config.inter_broker_listener.name
        ib = next(e for e in endpoints if e.name == inter)
        return BrokerRegistration(self.broker_id, ib.host, ib.port, now_ms(), self.config.broker_rack or None,
                                  endpoints=endpoints, inter_broker_listener=inter,
                                  replica_fetch_port=self.replica_fetch_port)

    def _on_registered(self, broker_epoch: int) -> None:
        self.broker_epoch = broker_epoch
        self.fetcher_manager.broker_epoch = broker_epoch
        self.registered.set()

    async def _set_health(self, status: Any) -> None:
        for service in ("", "minikafka.v1.KafkaApi"):
            await self.health.set(service, status)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    def _every(self, seconds: float, fn: Any) -> None:
        """Run ``fn`` every ``seconds`` (awaited when it is a coroutine function: it may slice its
        work), on the loop, for the life of the server."""
        async def loop() -> None:
            while True:
                await asyncio.sleep(seconds)
                try:
                    result = fn()
                    if inspect.isawaitable(result):
                        await result
                except Exception:
                    log.exception("periodic task %s failed", getattr(fn, "__name__", fn))

        self._tasks.append(asyncio.get_running_loop().create_task(loop()))

    def _cleanup_logs(self) -> None:
        deleted = self.log_manager.cleanup_logs(now_ms())
        if deleted:
            log.info("retention deleted %d segments", deleted)
            self.log_manager.checkpoint_log_start_offsets()

    def _checkpoint_offsets(self) -> None:
        self.log_manager.checkpoint_recovery_points(background=True)
        self.log_manager.checkpoint_log_start_offsets(background=True)

    # ------------------------------------------------------------ requests answered here

    async def handle_controlled_shutdown(self, req: pb.ControlledShutdownRequest,
                                         ctx: RequestContext) -> pb.ControlledShutdownResponse:
        if ctx.broker_id != req.broker_id:
            raise errors.ClusterAuthorizationFailedError(
                f"{ctx.principal} may not ask for the controlled shutdown of broker {req.broker_id}")
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
                reg = await self.registration.controller_registration()
                if reg is None:
                    raise errors.NotControllerError("no controller")
                control = reg.endpoint(cfg.control_plane_listener.name)
                address = control.address if control is not None else reg.address
                async with self.gate.broker_channel_security().aio_channel(address) as ch:
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
            self.fetcher_manager.stopped = True
            await self.fetcher_manager.shutdown()
            await self.controlled_shutdown()
        for t in list(self._tasks):
            t.cancel()
        if self.gc_guard is not None:
            self.gc_guard.uninstall()
        await self.txn_coordinator.shutdown()
        await self.txn_verifier.close()
        await self.txn_markers.close()
        await self.group_coordinator.shutdown()
        await self.dynamic_config.shutdown()
        await asyncio.to_thread(self.controller.shutdown)
        await self.fetcher_manager.shutdown()
        for kl in getattr(self, "kafka_listeners", []):
            await kl.stop()
        for server in self.grpc_servers:
            await server.stop(grace=0.5)
        self.replica_manager.checkpoint_high_watermarks()
        await asyncio.to_thread(self.log_manager.shutdown)
        await asyncio.to_thread(self.zk.stop)
        log.info("broker %d: shut down cleanly", self.broker_id)
