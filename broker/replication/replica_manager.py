"""The broker's replicas: leadership changes, produce, fetch (Kafka's ReplicaManager).

This is the imperative shell around ``broker.replication.partition``: it keeps
one ``Partition`` per hosted replica (which alone appends, truncates and moves
the high watermark), applies LeaderAndIsr / StopReplica from the controller
(fenced by controller epoch and leader epoch, SPEC S7.4), answers produce and
fetch requests through the purgatories, and carries out the ISR changes the
partitions propose by writing the partition state znode conditionally on its
zk_version. It runs on the broker's asyncio loop; ZooKeeper calls go to a
worker thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

from broker.log.config import LogConfig
from broker.log.log import Log
from broker.log.manager import LogManager
from broker.log.producer_state import VerificationGuard
from broker.network.request_guard import ByteBudget, error_message, judge_partitions
from broker.replication.control import (
    ADOPT,
    DEPOSED,
    IGNORE,
    accept_controller_epoch,
    decide_after_isr_write,
    write_isr,
)
from broker.replication.fetch_session import INCREMENTAL, FetchSession, FetchSessionCache, PartitionFetch
from broker.replication.partition import Partition
from broker.replication.purgatory import Purgatory
from broker.replication.state import NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER, TIMED_OUT, WAIT, FetchClock
from broker.replication.txn_verification import judge_request, produce_error, transactional_producer
from broker.security.authorizer import CLUSTER, CLUSTER_NAME, TOPIC, TRANSACTIONAL_ID
from broker.security.principal import LOCAL_CLIENT, RequestContext
from broker.server.metadata_cache import MetadataCache
from broker.server.observability import event
from proto import errors
from proto import minikafka_pb2 as pb
from proto.names import MAX_PARTITION, TopicPartition, topic_name_error
from proto.record_batch import SPAN_BYTES, batch_span
from zk.client import KafkaZkClient
from zk.data import NO_LEADER, TopicPartitionId

log = logging.getLogger(__name__)
# LeaderAndIsr requests of up to this many partitions log each transition at INFO; larger ones one
# line in all (and DEBUG lines each).
TRANSITIONS_LOGGED_EACH = 20
# Led partitions whose ISR the periodic check looks at between two turns of the loop.
ISR_CHECK_SLICE = 1000

__all__ = ["BrokerSettings", "FetcherManagerProtocol", "Partition", "ReplicaManager", "TopicPartition", "now_ms"]

E = pb.ErrorCode
# Kafka's DebuggingConsumerId: a fetch that may read a follower's replica.
DEBUGGING_REPLICA_ID = -2


# ISR changes are told to the controller at most this often, in notifications of at most this many
# partitions (~30 bytes each: well within a znode's 1 MiB).
ISR_CHANGE_BATCH_MS = 100
ISR_CHANGE_BATCH_MAX = 5000


# A LeaderAndIsr creating at least this many logs makes their directories in threads first.
PREPARE_DIRS_MIN = 16


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class BrokerSettings:
    broker_id: int
    replica_lag_time_max_ms: int
    default_log_config: LogConfig
    # Request bounds (SPEC S13.4); see broker.server.config for their Kafka-style names.
    max_request_partitions: int = 10000
    fetch_max_bytes: int = 57671680
    fetch_purgatory_max_requests: int = 500
    fetch_session_cache_slots: int = 1000
    queued_max_request_bytes: int = -1
    # The longest a produce or fetch may be parked (request.timeout.ms).
    max_wait_ms: int = 30000


async def _answer_now(resp: pb.ProduceResponse) -> pb.ProduceResponse:
    return resp


class ReplicaManager:
    def __init__(self, settings: BrokerSettings, log_manager: LogManager, zk: KafkaZkClient,
                 metadata: MetadataCache, topic_config: Callable[[str], LogConfig]) -> None:
        self.settings = settings
        self.broker_id = settings.broker_id
        self.log_manager = log_manager
        self.zk = zk
        self.metadata = metadata
        self.topic_config = topic_config
        # Told when a topic's logs are deleted (StopReplica with delete): its cached config goes.
        self.on_topic_deleted: Callable[[str], None] = lambda _topic: None
        self.partitions: dict[TopicPartition, Partition] = {}
        self.controller_epoch = 0
        self.fetch_purgatory = Purgatory("fetch")
        # KIP-227: fetches on a session name and answer only the partitions that moved.
        self.fetch_sessions = FetchSessionCache(settings.fetch_session_cache_slots)
        self.produce_purgatory = Purgatory("produce")
        # DeleteRecords waits here until every live replica's log start offset reached the request's
        # (Kafka's DelayedDeleteRecords); keyed by partition, woken by follower fetches.
        self.delete_records_purgatory = Purgatory("delete-records")
        self._log_start_checkpoint: asyncio.TimerHandle | None = None
        self.fetcher_manager: FetcherManagerProtocol | None = None
        self._isr_writes: set[asyncio.Task[None]] = set()
        self._isr_changed: set[TopicPartition] = set()
        self._isr_notifier: asyncio.Task[None] | None = None
        self.isr_shrinks = 0
        # Partitions deleted from this broker since start (the garbage collection guard's thaw).
        self.partitions_removed = 0
        # Record bytes produced to (every Produce's) and fetched from this broker (consumers and
        # followers): Kafka's BytesIn/BytesOut, exported at scrape time by broker.server.observability.
        self.bytes_in = 0
        self.bytes_out = 0
        self.isr_expands = 0
        # queued.max.request.bytes of produce requests from the gRPC listeners; a Kafka listener's are
        # counted in its own memory pool instead (ctx.bytes_reserved: append_produce).
        self.produce_bytes = ByteBudget(settings.queued_max_request_bytes)
        # Producer ids are handed out in blocks recorded in ZooKeeper; a batch claiming an id beyond
        # the last block ever allocated is refused (UNKNOWN_PRODUCER_ID). Refreshed on demand.
        self.max_allocated_producer_id = -1
        self._producer_id_refresh: asyncio.Task[None] | None = None
        # Consumer fetches answered at once because the purgatory was full (throttled).
        self.fetches_not_parked = 0
        # The authorizer's verdict (broker.security.gatekeeper.Gatekeeper.allowed); all allowed by default.
        self.allowed: Callable[[RequestContext, str, str, str], bool] = lambda _c, _o, _t, _n: True
        self._log_dirs_executor: concurrent.futures.ThreadPoolExecutor | None = None  # prepare_leader_and_isr
        # The leaders' ISR writes: thousands at once when a broker dies at scale. On the loop's
        # default executor they queued ahead of everything else run there - the new controller's
        # first LeaderAndIsr waited ~4 s behind them for its epoch lookup (issue 29).
        self._isr_executor: concurrent.futures.ThreadPoolExecutor | None = None
        # While a large LeaderAndIsr is applied: its transitions, logged as one line at the end.
        self._transitions: dict[str, list[TopicPartition]] | None = None
        # KIP-890 part 1 (transaction.partition.verification.enable): a producer's first transactional
        # batch on a partition is appended only once its transaction coordinator verified the partition
        # is in the producer's ongoing transaction; ``verify_txn`` asks it (TxnVerifier.verify, wired by
        # KafkaServer; None: nobody to ask, so not verified - the log refuses no batch for it then).
        self.txn_verification_enabled = True
        self.verify_txn: Callable[[str, int, int, list[TopicPartition]],
                                  Awaitable[dict[TopicPartition, int]]] | None = None
        self.txn_verifications = 0  # Produce requests that waited for a verification

    # ------------------------------------------------------------ controller requests

    def _check_controller_epoch(self, epoch: int, what: str) -> bool:
        if not accept_controller_epoch(epoch, self.controller_epoch):
            log.info("refusing %s from controller epoch %d: current controller epoch is %d",
                     what, epoch, self.controller_epoch, extra=event("fenced_controller_epoch"))
            return False
        self.controller_epoch = epoch
        return True

    async def prepare_leader_and_isr(self, req: pb.LeaderAndIsrRequest) -> None:
        """Before ``handle_leader_and_isr``: the logs of the partitions it will create, opened in
        threads (several at once), so that creating thousands of partitions does not hold the
        event loop in mkdir and file creations (issue 29); the loop adopts them once made, and
        ``handle_leader_and_isr`` finds them. The same checks as ``_apply_partition_state`` pick
        them; if the request is refused meanwhile, empty logs are what a crash leaves too."""
        if req.controller_epoch < self.controller_epoch:
            return
        new = [(s.topic_name, s.partition_index) for s in req.partition_states
               if self.broker_id in s.replicas and (s.topic_name, s.partition_index) not in self.partitions
               and topic_name_error(s.topic_name) is None and 0 <= s.partition_index <= MAX_PARTITION]
        if len(new) >= PREPARE_DIRS_MIN:
            # Its own thread, not the loop's default executor: that one runs the ZooKeeper writes
            # of ISR changes, thousands at a time at scale, and a LeaderAndIsr must not queue behind them.
            if self._log_dirs_executor is None:
                self._log_dirs_executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="log-dirs")
            specs = [(t, p, self.topic_config(t)) for t, p in new]
            opened = await asyncio.get_running_loop().run_in_executor(
                self._log_dirs_executor, self.log_manager.open_new_logs, specs, now_ms())
            if req.controller_epoch < self.controller_epoch:
                # A newer controller spoke meanwhile (it may have deleted these partitions): this
                # request will be refused, so its logs are not adopted.
                for _tp, opened_log in opened:
                    opened_log.close()
                return
            self.log_manager.adopt_logs(opened, self.topic_config)

    def handle_leader_and_isr(self, req: pb.LeaderAndIsrRequest) -> pb.LeaderAndIsrResponse:
        if not self._check_controller_epoch(req.controller_epoch, "LeaderAndIsr"):
            return pb.LeaderAndIsrResponse(error_code=E.STALE_CONTROLLER_EPOCH)
        endpoints = {b.broker_id: b for b in req.live_leaders}
        resp = pb.LeaderAndIsrResponse(error_code=E.NONE)
        # A large request's transitions are summed up in one line (DEBUG lines each): at 10,000
        # partitions a line per partition was ~17% of the loop while they were created (issue 29).
        summed = self._transitions = {"leader": [], "follower": []} \
            if len(req.partition_states) > TRANSITIONS_LOGGED_EACH else None
        try:
            for s in req.partition_states:
                tp = (s.topic_name, s.partition_index)
                code = self._apply_partition_state(s, endpoints)
                resp.partition_errors.add(topic_name=tp[0], partition_index=tp[1], error_code=code)
        finally:
            self._transitions = None
        if summed is not None:
            def some(tps: list[TopicPartition]) -> str:
                return ", ".join(f"{t}-{p}" for t, p in tps[:5]) + f" and {len(tps) - 5} more" * (len(tps) > 5)

            log.info("LeaderAndIsr of %d partitions from controller %d (epoch %d): became leader of %d (%s), "
                     "follower of %d (%s)", len(req.partition_states), req.controller_id, req.controller_epoch,
                     len(summed["leader"]), some(summed["leader"]), len(summed["follower"]),
                     some(summed["follower"]), extra=event("leader_and_isr", "", -1))
        return resp

    def _apply_partition_state(self, s: pb.LeaderAndIsrPartitionState,
                               endpoints: dict[int, pb.BrokerEndpoint]) -> int:
        tp = (s.topic_name, s.partition_index)
        if topic_name_error(tp[0]) is not None:
            return E.INVALID_TOPIC_EXCEPTION
        if not 0 <= tp[1] <= MAX_PARTITION:
            return E.UNKNOWN_TOPIC_OR_PARTITION
        p = self.partitions.get(tp)
        if p is not None and s.leader_epoch < p.leader_epoch:
            log.info("refusing LeaderAndIsr for %s-%d: leader epoch %d is older than %d",
                     tp[0], tp[1], s.leader_epoch, p.leader_epoch, extra=event("fenced_leader_epoch", *tp))
            return E.FENCED_LEADER_EPOCH
        if p is not None and s.leader_epoch == p.leader_epoch:
            # A controller failover resends what we have; the ISR may have moved on since.
            if s.zk_version > p.zk_version:
                self._set_isr(p, tuple(s.isr), s.zk_version)
            return E.NONE
        if self.broker_id not in s.replicas:
            return E.UNKNOWN_TOPIC_OR_PARTITION
        if p is None:
            cfg = self.topic_config(tp[0])
            p = Partition(tp[0], tp[1], self.log_manager.get_or_create_log(tp[0], tp[1], now_ms(), cfg),
                          self.broker_id)
            self.partitions[tp] = p
        if s.leader == self.broker_id:
            self._make_leader(p, s)
        else:
            self._make_follower(p, s, endpoints.get(s.leader))
        self._wake_fetches(tp)
        self.produce_purgatory.notify(tp)
        self.delete_records_purgatory.notify(tp)
        return E.NONE

    def _make_leader(self, p: Partition, s: pb.LeaderAndIsrPartitionState) -> None:
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_partitions([p.tp])
        # A moved HW wakes no one yet: the caller notifies both purgatories after any change.
        p.make_leader(controller_epoch=s.controller_epoch, leader_epoch=s.leader_epoch, replicas=s.replicas,
                      isr=s.isr, zk_version=s.zk_version, now_ms=now_ms(),
                      lag_max_ms=self.settings.replica_lag_time_max_ms)
        if self._transitions is not None:
            self._transitions["leader"].append(p.tp)
            if not log.isEnabledFor(logging.DEBUG):
                return
        log.log(logging.INFO if self._transitions is None else logging.DEBUG,
                "%s-%d: became leader at epoch %d, isr %s, log end %d, high watermark %d",
                p.topic, p.partition, p.leader_epoch, list(p.isr), p.log.log_end_offset, p.log.high_watermark,
                extra=event("became_leader", *p.tp, leader_epoch=p.leader_epoch))

    def _make_follower(self, p: Partition, s: pb.LeaderAndIsrPartitionState,
                       leader: pb.BrokerEndpoint | None) -> None:
        p.make_follower(controller_epoch=s.controller_epoch, leader_id=s.leader, leader_epoch=s.leader_epoch,
                        replicas=s.replicas, isr=s.isr, zk_version=s.zk_version)
        if self.fetcher_manager is None:
            return
        self.fetcher_manager.remove_partitions([p.tp])
        if p.leader_id == NO_LEADER or leader is None:
            log.info("%s-%d: follower at epoch %d with no live leader", p.topic, p.partition, p.leader_epoch)
            return
        if self._transitions is not None:
            self._transitions["follower"].append(p.tp)
        if self._transitions is None or log.isEnabledFor(logging.DEBUG):
            log.log(logging.INFO if self._transitions is None else logging.DEBUG,
                    "%s-%d: became follower of %d at epoch %d, log end %d", p.topic, p.partition, p.leader_id,
                    p.leader_epoch, p.log.log_end_offset, extra=event("became_follower", *p.tp,
                                                                       leader_epoch=p.leader_epoch))
        self.fetcher_manager.add_partition(p, leader)

    def _set_isr(self, p: Partition, isr: tuple[int, ...], zk_version: int) -> None:
        if p.on_isr_committed(isr, zk_version, now_ms(), self.settings.replica_lag_time_max_ms):
            self._on_high_watermark_moved(p)

    def handle_stop_replica(self, req: pb.StopReplicaRequest) -> pb.StopReplicaResponse:
        if not self._check_controller_epoch(req.controller_epoch, "StopReplica"):
            return pb.StopReplicaResponse(error_code=E.STALE_CONTROLLER_EPOCH)
        resp = pb.StopReplicaResponse(error_code=E.NONE)
        for sp in req.partitions:
            tp = (sp.topic_name, sp.partition_index)
            p = self.partitions.get(tp)
            code = E.NONE
            if topic_name_error(tp[0]) is not None:
                code = E.INVALID_TOPIC_EXCEPTION
            elif not 0 <= tp[1] <= MAX_PARTITION:
                code = E.UNKNOWN_TOPIC_OR_PARTITION
            elif p is not None and sp.leader_epoch >= 0 and sp.leader_epoch < p.leader_epoch:
                code = E.FENCED_LEADER_EPOCH
            else:
                if self.fetcher_manager is not None:
                    self.fetcher_manager.remove_partitions([tp])
                if p is not None:
                    p.stop_leading()
                    if sp.delete_partition:
                        del self.partitions[tp]
                        self.partitions_removed += 1
                if sp.delete_partition:
                    self.log_manager.delete_log(tp[0], tp[1])
                    # A topic created again under this name brings its own config.
                    self.on_topic_deleted(tp[0])
                self._wake_fetches(tp)
                self.produce_purgatory.notify(tp)
            resp.partition_errors.add(topic_name=tp[0], partition_index=tp[1], error_code=code)
        return resp

    def handle_update_metadata(self, req: pb.UpdateMetadataRequest) -> pb.UpdateMetadataResponse:
        if not self._check_controller_epoch(req.controller_epoch, "UpdateMetadata"):
            return pb.UpdateMetadataResponse(error_code=E.STALE_CONTROLLER_EPOCH)
        self.metadata.update(req)
        self.delete_records_purgatory.notify_all()  # a replica's broker died: the low watermark may pass
        return pb.UpdateMetadataResponse(error_code=E.NONE)

    # ------------------------------------------------------------ produce

    def _leader_partition(self, topic: str, partition: int) -> Partition:
        p = self.partitions.get((topic, partition))
        if p is None:
            if self.metadata.partition(topic, partition) is None:
                raise errors.UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist")
            raise errors.NotLeaderOrFollowerError(f"broker {self.broker_id} is not the leader of {topic}-{partition}")
        if not p.is_leader:
            raise errors.NotLeaderOrFollowerError(
                f"broker {self.broker_id} is not the leader of {topic}-{partition} (leader {p.leader_id})")
        return p

    async def handle_produce(self, req: pb.ProduceRequest, ctx: RequestContext = LOCAL_CLIENT) -> pb.ProduceResponse:
        return await (await self.append_produce(req, ctx))

    async def append_produce(self, req: pb.ProduceRequest,
                             ctx: RequestContext = LOCAL_CLIENT) -> Coroutine[Any, Any, pb.ProduceResponse]:
        """The part of a Produce that must happen in arrival order: every partition's append. Returns
        the rest as a coroutine - the acks=all wait, then the answer - which the caller must start
        at once (await it or make it a task): it releases the request's queued.max.request.bytes.
        A ProduceStream appends the next request while this one's acks are pending.

        A request's record bytes are counted in one memory pool only: one that came through a
        socket server listener (a Kafka listener: ``ctx.bytes_reserved``) is held in that
        listener's pool from its arrival until its answer is written, so ``produce_bytes`` -
        the pool of the gRPC listeners' produce requests - does not reserve it again."""
        acks = req.acks
        resp = pb.ProduceResponse()
        entries = [(td.name, pd.partition) for td in req.topics for pd in td.partitions]
        verdict_list = self._authorize(judge_partitions(entries, self.settings.max_request_partitions), entries,
                                       ctx, "Write")
        verdicts = iter(verdict_list)
        # Reading a protobuf bytes field copies it (upb makes a new bytes object each time): every
        # partition's records are read once, here, and handed on.
        payloads = [pd.records for td in req.topics for pd in td.partitions]
        nbytes = sum(map(len, payloads))
        self.bytes_in += nbytes
        timeout_ms = min(max(req.timeout_ms, 0), self.settings.max_wait_ms)
        reserved = 0 if ctx.bytes_reserved else nbytes  # what this call holds of produce_bytes
        if reserved and not await self.produce_bytes.acquire(reserved, timeout_ms / 1000.0):
            for td in req.topics:
                tr = resp.topics.add(name=td.name)
                for pd in td.partitions:
                    tr.partitions.add(partition=pd.partition, base_offset=-1, log_append_time_ms=-1,
                                      log_start_offset=-1, error_code=E.REQUEST_TIMED_OUT,
                                      error_message="the broker has queued.max.request.bytes in flight")
            return _answer_now(resp)
        try:
            # Transactional batches (KIP-98/KIP-890): the request's transactional id, and the
            # coordinator's verification of the partitions where a transaction would open.
            refused, guards = await self._check_transactional(req, ctx, entries, verdict_list, payloads)
            pending: list[tuple[Partition, pb.ProducePartitionResponse, int, int]] = []
            records = iter(payloads)
            index = -1
            now = now_ms()  # one clock read per request, as Kafka's appendRecords
            for td in req.topics:
                tr = resp.topics.add(name=td.name)
                for pd in td.partitions:
                    index += 1
                    pr = tr.partitions.add(partition=pd.partition, base_offset=-1, log_append_time_ms=-1,
                                           log_start_offset=-1)
                    verdict = next(verdicts)
                    data = next(records)
                    if verdict != E.NONE:
                        pr.error_code = verdict
                        pr.error_message = error_message(verdict)
                        continue
                    if acks not in (0, 1, -1):
                        pr.error_code = E.INVALID_REQUIRED_ACKS
                        continue
                    if refused and index in refused:
                        code, pr.error_message = refused[index]
                        pr.error_code = errors.wire_code(code)
                        continue
                    guard = guards.get(index) if guards else None
                    try:
                        # Synchronous: at thousands of partitions a request names hundreds, and a
                        # coroutine each cost more than the rest of a one-record batch's bookkeeping.
                        item = self._append_partition(td.name, pd.partition, data, acks, pr, guard, now, False)
                    except errors.UnknownProducerIdError as e:
                        if await self._refresh_producer_id_bound():  # nothing was written: try again
                            item = self._append_partition(td.name, pd.partition, data, acks, pr, guard, now_ms(),
                                                          True)
                        else:
                            pr.error_code, pr.error_message = e.wire_code, e.message
                            item = None
                    if item is not None:
                        pending.append(item)
        except BaseException:
            if reserved:
                await self.produce_bytes.release(reserved)
            raise
        return self._complete_produce(resp, pending, timeout_ms, reserved)

    async def _complete_produce(self, resp: pb.ProduceResponse,
                                pending: list[tuple[Partition, pb.ProducePartitionResponse, int, int]],
                                timeout_ms: int, reserved: int) -> pb.ProduceResponse:
        try:
            if pending:
                await self._await_acks(pending, timeout_ms)
        finally:
            if reserved:
                await self.produce_bytes.release(reserved)
        return resp

    @property
    def _verifying_txn(self) -> bool:
        return self.txn_verification_enabled and self.verify_txn is not None

    async def _check_transactional(self, req: pb.ProduceRequest, ctx: RequestContext,
                                   entries: list[tuple[str, int]], verdicts: list[pb.ErrorCode],
                                   payloads: list[bytes]) \
            -> tuple[dict[int, tuple[int, str]], dict[int, VerificationGuard]]:
        """The transactional part of a Produce, before any append (by index in request order):
        the partitions refused (code, message), and the verification guards of the partitions
        whose first transactional batch the transaction coordinator verified (KIP-890 part 1,
        ``broker.replication.txn_verification``). A request without transactional batches costs a
        header read per batch. The wait for the coordinator is asynchronous: the loop serves others
        meanwhile; this connection's next Produce waits, as in Kafka (in order per connection)."""
        if req.acks not in (0, 1, -1):
            return {}, {}  # every partition is refused INVALID_REQUIRED_ACKS: nothing to verify
        peeks = [transactional_producer(data) if v == E.NONE else None for v, data in zip(verdicts, payloads,
                                                                                            strict=True)]
        if not any(peeks):
            return {}, {}
        verifying = self._verifying_txn
        verdict = judge_request(req.transactional_id, peeks, verifying)
        refusal, message = verdict.refusal, verdict.message
        if refusal == E.NONE and not self.allowed(ctx, "Write", TRANSACTIONAL_ID, req.transactional_id):
            refusal, message = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, f"{ctx.principal} may not use transactional id"
        if refusal != E.NONE:  # the whole request, as Kafka's KafkaApis answers it
            return dict.fromkeys(range(len(entries)), (refusal, message)), {}
        producer = verdict.producer
        if not verifying or producer is None or self.verify_txn is None:
            return {}, {}
        now = now_ms()
        ttl_ms = 2 * self.settings.max_wait_ms + 1000  # outlives the verifier's own deadline (request.timeout.ms)
        asked: list[tuple[int, TopicPartition, VerificationGuard]] = []
        refused: dict[int, tuple[int, str]] = {}
        for i, peek in enumerate(peeks):
            if peek is None:
                continue
            try:
                guard = self._leader_partition(*entries[i]).maybe_start_txn_verification(
                    producer.producer_id, now, ttl_ms)
            except errors.KafkaError as e:
                refused[i] = (e.wire_code, e.message)
                continue
            if guard is not None:
                asked.append((i, entries[i], guard))
        if not asked:
            return refused, {}
        self.txn_verifications += 1
        try:
            codes = await self.verify_txn(req.transactional_id, producer.producer_id, producer.producer_epoch,
                                          [tp for _i, tp, _g in asked])
        except Exception:  # a bug in the verifier (it answers its failures): retriable, never the request's end
            log.exception("transactional id %s: the verification failed unexpectedly", req.transactional_id)
            codes = {}
        guards: dict[int, VerificationGuard] = {}
        for i, tp, guard in asked:
            code, why = produce_error(codes.get(tp, errors.NetworkError.code))
            if code == E.NONE:
                guards[i] = guard
            else:
                refused[i] = (code, why)
        return refused, guards

    def _append_partition(self, topic: str, partition: int, records: bytes, acks: int,
                          pr: pb.ProducePartitionResponse, guard: VerificationGuard | None, now: int,
                          refreshed: bool) -> tuple[Partition, pb.ProducePartitionResponse, int, int] | None:
        """Append one partition's batches; fills ``pr``; returns what an acks=all wait needs. An
        unknown producer id propagates unless the caller ``refreshed`` the allocated bound already
        (nothing was written: it re-reads the bound and tries once more)."""
        try:
            p = self._leader_partition(topic, partition)
            result = p.append_as_leader(records, acks, now, self.settings.replica_lag_time_max_ms,
                                        max_producer_id=self.max_allocated_producer_id,
                                        verify_txn=self._verifying_txn, verification_guard=guard)
        except errors.UnknownProducerIdError as e:
            if not refreshed:
                raise
            pr.error_code, pr.error_message = e.wire_code, e.message
            return None
        except errors.KafkaError as e:
            pr.error_code, pr.error_message = e.wire_code, e.message
            return None
        except OSError as e:
            log.error("%s-%d: append failed: %s", topic, partition, e)
            pr.error_code, pr.error_message = E.KAFKA_STORAGE_ERROR, f"append failed: {e.strerror}"
            return None
        except Exception as e:  # a bug: answer this partition truthfully, keep the others' answers
            log.exception("%s-%d: append failed unexpectedly", topic, partition)
            pr.error_code, pr.error_message = E.UNKNOWN_SERVER_ERROR, f"append failed: {e!r}"
            return None
        info = result.info
        pr.base_offset = info.first_offset
        pr.log_append_time_ms = info.log_append_time_ms
        pr.log_start_offset = info.log_start_offset
        if result.high_watermark_moved:
            self._on_high_watermark_moved(p)
        else:
            self._wake_fetches(p.tp)
        if acks == -1:
            return (p, pr, info.last_offset + 1, p.leader_epoch)
        return None

    async def _refresh_producer_id_bound(self) -> bool:
        """Re-read the last allocated producer id block; True if the bound moved. Concurrent callers
        share one ZooKeeper read, so a flood of made-up ids costs one read at a time."""
        before = self.max_allocated_producer_id
        if self._producer_id_refresh is None or self._producer_id_refresh.done():
            self._producer_id_refresh = asyncio.get_running_loop().create_task(self._read_producer_id_bound())
        try:
            await asyncio.shield(self._producer_id_refresh)
        except Exception as e:
            log.warning("cannot read the producer id block: %s", e)
            return False
        return self.max_allocated_producer_id > before

    async def _read_producer_id_bound(self) -> None:
        block = await asyncio.to_thread(self.zk.get_latest_producer_id_block)
        if block is not None:
            self.max_allocated_producer_id = max(self.max_allocated_producer_id, block[1])

    async def _await_acks(self, pending: list[tuple[Partition, pb.ProducePartitionResponse, int, int]],
                          timeout_ms: int) -> None:
        """The delayed produce of acks=all: done when the HW passed every batch (S5.1)."""

        def outcome(item: tuple[Partition, pb.ProducePartitionResponse, int, int], timed_out: bool) -> str:
            p, _pr, required, _epoch = item
            return p.delayed_produce_outcome(required, timed_out)

        await self.produce_purgatory.wait_until([p.tp for p, *_ in pending],
                                                lambda: all(outcome(i, False) != WAIT for i in pending),
                                                timeout_ms / 1000.0)
        for item in pending:
            p, pr, required, _epoch = item
            result = outcome(item, True)
            if result == NOT_LEADER:
                pr.error_code = E.NOT_LEADER_OR_FOLLOWER
                pr.error_message = "leadership moved before the records were committed"
            elif result == TIMED_OUT:
                pr.error_code = E.REQUEST_TIMED_OUT
                pr.error_message = f"the ISR {list(p.isr)} did not replicate up to {required} in time"
            elif result == NOT_ENOUGH_REPLICAS_AFTER_APPEND:
                pr.error_code = E.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                pr.error_message = f"ISR shrank to {list(p.isr)} below min.insync.replicas"

    def _on_high_watermark_moved(self, p: Partition) -> None:
        """``p`` already moved its HW: wake the produces and fetches waiting on it."""
        self.produce_purgatory.notify(p.tp)
        self._wake_fetches(p.tp)

    def _wake_fetches(self, tp: TopicPartition) -> None:
        """``tp`` moved (data, HW, leadership): wake the fetches parked on it, with or without a session."""
        self.fetch_purgatory.notify(tp)
        for sid in self.fetch_sessions.mark_changed(tp):
            self.fetch_purgatory.notify(("fetch-session", sid))

    # ------------------------------------------------------------ fetch

    async def handle_fetch(self, req: pb.FetchRequest, ctx: RequestContext = LOCAL_CLIENT) -> pb.FetchResponse:
        if req.replica_id == -1 and not req.forgotten and (
                not req.HasField("session_epoch") or (req.session_epoch == -1 and not req.session_id)) and \
                sum(len(t.partitions) for t in req.topics) > self.settings.max_request_partitions:
            # A sessionless consumer fetch of too many partitions (20,000 fit in the limits): every
            # one INVALID_REQUEST, as below, the answer built in slices (SPEC S15.2).
            return await _refused_fetch(req)
        follower = req.replica_id >= 0
        entries = [(t.name, fp.partition) for t in req.topics for fp in t.partitions]
        limit = 1 << 31 if follower else self.settings.max_request_partitions
        verdicts = judge_partitions(entries, limit)
        if req.replica_id == DEBUGGING_REPLICA_ID:
            if not self.allowed(ctx, "Describe", CLUSTER, CLUSTER_NAME):
                raise errors.ClusterAuthorizationFailedError(f"{ctx.principal} may not read replicas directly")
            return self._read_any_replica(req, verdicts)
        if req.replica_id < -1:
            raise errors.InvalidRequestError(f"replica id {req.replica_id} is neither a consumer (-1) nor a broker")
        if follower:
            # S12.1: a follower fetch comes from the authenticated broker it names, on the inter-broker
            # listener, from its current incarnation (S12.2: no epoch value skips the check).
            if not ctx.inter_broker or ctx.broker_id != req.replica_id:
                raise errors.ClusterAuthorizationFailedError(
                    f"{ctx.principal} on {ctx.listener or 'this listener'} may not fetch as replica {req.replica_id}")
            known = self.metadata.broker_epoch(req.replica_id)
            if known is not None and req.replica_epoch < known:
                raise errors.StaleBrokerEpochError(
                    f"replica {req.replica_id} fetches with broker epoch {req.replica_epoch}, current is {known}")
        else:
            verdicts = self._authorize(verdicts, entries, ctx, "Read")
        session: FetchSession | None = None
        kind = ""
        if req.HasField("session_epoch"):
            session, kind = self._fetch_session(req, entries, verdicts, follower, limit)
        if follower:
            clock = session.clock if session is not None else None
            self._record_follower_fetch(req, verdicts, clock)
            if clock is not None:
                clock.last_fetch_ms = now_ms()
        min_bytes = max(1, req.min_bytes)
        max_wait_ms = min(max(0, req.max_wait_ms), self.settings.max_wait_ms)
        if session is not None and kind == INCREMENTAL:
            return await self._incremental_fetch(req, session, follower, entries, verdicts, max_wait_ms, min_bytes)

        resp, nbytes, has_error = self._read_fetch(req, follower, verdicts)
        if nbytes >= min_bytes or has_error or max_wait_ms == 0:
            self.bytes_out += nbytes
            return self._full_session_answer(resp, session)
        if not follower and len(self.fetch_purgatory) >= self.settings.fetch_purgatory_max_requests:
            # Too many consumers parked already: answer now and ask the client to back off.
            self.fetches_not_parked += 1
            resp.throttle_time_ms = min(max_wait_ms, 100)
            self.bytes_out += nbytes
            return self._full_session_answer(resp, session)
        tps = [e for e, v in zip(entries, verdicts, strict=True) if v == E.NONE]

        def ready() -> bool:
            # Cheap when min_bytes is 1 (every consumer's and follower's default): offsets, not bytes.
            if min_bytes <= 1:
                return self._fetch_may_answer(req, follower, verdicts)
            _r, n, err = self._read_fetch(req, follower, verdicts)
            return n >= min_bytes or err

        await self.fetch_purgatory.wait_until(tps, ready, max_wait_ms / 1000.0)
        resp, nbytes, _err = self._read_fetch(req, follower, verdicts)
        self.bytes_out += nbytes
        return self._full_session_answer(resp, session)

    # ------------------------------------------------------------ fetch sessions (KIP-227)

    def _fetch_session(self, req: pb.FetchRequest, entries: list[tuple[str, int]], verdicts: list[pb.ErrorCode],
                       follower: bool, limit: int) -> tuple[FetchSession | None, str]:
        """Apply the request's session fields; raises the session errors as the fetch's own."""
        named = []
        i = 0
        for t in req.topics:
            for fp in t.partitions:
                if verdicts[i] == E.NONE:
                    named.append((entries[i], PartitionFetch(fp.fetch_offset, fp.log_start_offset,
                                                             fp.partition_max_bytes, _epoch_of(fp))))
                i += 1
        forgotten = [(t.name, fp.partition) for t in req.forgotten for fp in t.partitions]
        if len(forgotten) > limit:
            raise errors.InvalidRequestError(f"a fetch may forget at most {limit} partitions")
        fctx = self.fetch_sessions.new_context(
            session_id=req.session_id if req.HasField("session_id") else None, epoch=req.session_epoch,
            replica_id=req.replica_id, named=named, forgotten=forgotten, now_ms=now_ms(), max_partitions=limit,
            read_committed=not follower and req.isolation_level == pb.READ_COMMITTED)
        if follower and fctx.session is not None:
            # A partition the follower stopped fetching is no longer kept alive by its session's clock.
            for tp in forgotten:
                p = self.partitions.get(tp)
                if p is not None:
                    p.on_follower_session_forgot(req.replica_id, fctx.session.clock)
        return fctx.session, fctx.kind

    def _full_session_answer(self, resp: pb.FetchResponse, session: FetchSession | None) -> pb.FetchResponse:
        """A full fetch's answer lists every partition; the session remembers what it said."""
        if session is None:
            return resp
        resp.session_id = session.session_id
        for tr in resp.topics:
            for pr in tr.partitions:
                cp = session.partitions.get((tr.name, pr.partition))
                if cp is not None and pr.error_code == E.NONE:
                    cp.answered_high_watermark = pr.high_watermark
                    cp.answered_log_start_offset = pr.log_start_offset
        session.take_dirty()
        # Every partition is read again on the next fetch: those answered with records until the
        # fetcher names a new offset (see _read_session), and those this answer had no room for
        # (its max bytes) - left out, they would wait for their next append, and there may be
        # none (a producer waiting for these very records' acks=all). One walk, after a full fetch.
        session.dirty.update(session.partitions)
        return resp

    async def _incremental_fetch(self, req: pb.FetchRequest, session: FetchSession, follower: bool,
                                 entries: list[tuple[str, int]], verdicts: list[pb.ErrorCode],
                                 max_wait_ms: int, min_bytes: int = 1) -> pb.FetchResponse:
        """Read only the session's dirty partitions; park, if they cannot answer (no records, or fewer
        than ``min_bytes`` together), until one of its own partitions moves (no walk over every
        partition it holds, on either path)."""
        candidates = session.take_dirty()
        refused = any(v != E.NONE for v in verdicts)
        if max_wait_ms > 0 and not refused and not self._session_can_answer(session, candidates, follower,
                                                                           min_bytes):
            # A moved HW alone does not answer a follower (as without a session): it travels
            # with the next records. Put everything back and wait for a mark that can answer.
            session.dirty.update(candidates)
            session.fresh.clear()

            def ready() -> bool:
                if session.closed:
                    return True
                fresh = session.take_fresh()
                if min_bytes <= 1:
                    return any(self._session_ready(session, tp, follower) for tp in fresh)
                # fetch.min.bytes: the bytes of every partition that may have some (the dirty ones,
                # which hold the fresh ones), summed again only when one of them moved.
                return bool(fresh) and self._session_can_answer(session, session.dirty, follower, min_bytes)

            await self.fetch_purgatory.wait_until([("fetch-session", session.session_id)], ready,
                                                  max_wait_ms / 1000.0)
            candidates = session.take_dirty()
        resp, nbytes, leftover, unfitted = self._read_session(req, session, candidates, follower)
        session.dirty.update(leftover)
        session.unfitted = unfitted
        if refused:
            self._answer_refused(resp, entries, verdicts)
        self.bytes_out += nbytes
        return resp

    def _session_can_answer(self, session: FetchSession, tps: Iterable[TopicPartition], follower: bool,
                            min_bytes: int) -> bool:
        """May a session's fetch answer now: an error to report, or records - at least ``min_bytes``
        of them across ``tps`` (Kafka's DelayedFetch: fetch.min.bytes holds a session's fetch too)?
        Reads no more than ``min_bytes`` in all beyond one batch per partition."""
        if min_bytes <= 1:
            return any(self._session_ready(session, tp, follower) for tp in tps)
        need = min_bytes
        for tp in tps:
            if not self._session_ready(session, tp, follower):
                continue
            cp = session.partitions[tp]
            p = self.partitions.get(tp)
            if p is None or not p.is_leader or cp.max_bytes < 0 or \
                    (cp.current_leader_epoch >= 0 and cp.current_leader_epoch != p.leader_epoch):
                return True  # an error to report
            lg = p.log
            bound = _session_bound(session, lg, follower)
            if not lg.log_start_offset <= cp.fetch_offset < bound or \
                    (follower and cp.log_start_offset < lg.log_start_offset != cp.answered_log_start_offset):
                return True  # out of range, or a moved log start to report: _session_ready said so
            try:
                need -= len(lg.read(cp.fetch_offset, min(cp.max_bytes or need, need), bound))
            except (errors.KafkaError, OSError):
                return True  # answered with its error
            if need <= 0:
                return True
        return False

    def _session_ready(self, session: FetchSession, tp: TopicPartition, follower: bool) -> bool:
        """Can ``tp`` answer now: records beyond the cached fetch offset, or an error to report?"""
        cp = session.partitions.get(tp)
        if cp is None:
            return False
        p = self.partitions.get(tp)
        if p is None or not p.is_leader:
            return True
        if cp.current_leader_epoch >= 0 and cp.current_leader_epoch != p.leader_epoch:
            return True
        lg = p.log
        bound = _session_bound(session, lg, follower)
        if follower and cp.log_start_offset < lg.log_start_offset != cp.answered_log_start_offset:
            return True  # DeleteRecords moved the log start: the follower follows it (and says so) now
        return cp.fetch_offset < bound or not lg.log_start_offset <= cp.fetch_offset <= lg.log_end_offset

    def _read_session(self, req: pb.FetchRequest, session: FetchSession, candidates: list[TopicPartition],
                      follower: bool) -> tuple[pb.FetchResponse, int, list[TopicPartition], list[TopicPartition]]:
        """An incremental answer: the candidates with records, a moved HW or log start, or an error.
        Returns it, its record bytes, the candidates to read on the next fetch again (those the byte
        budget left, and those answered with records until a fetch names their next offset), and
        of those the ones the budget left (read first next time)."""
        resp = pb.FetchResponse(error_code=E.NONE, session_id=session.session_id)
        cap = self.settings.fetch_max_bytes
        budget = min(req.max_bytes, cap) if req.max_bytes > 0 else cap
        total = 0
        leftover: list[TopicPartition] = []
        unfitted: list[TopicPartition] = []
        by_topic: dict[str, pb.FetchTopicResponse] = {}
        for tp in candidates:
            cp = session.partitions.get(tp)
            if cp is None:
                continue  # forgotten since it was marked
            if budget <= 0:
                leftover.append(tp)
                unfitted.append(tp)
                continue
            code = E.NONE
            data = b""
            hw = lso = leo = stable = -1
            leader_epoch = -1
            committed = False
            try:
                if cp.max_bytes < 0:
                    raise errors.InvalidFetchSizeError(f"partition_max_bytes {cp.max_bytes} < 0")
                p = self._leader_partition(*tp)
                if follower:
                    p.validate_follower_fetch(req.replica_id, cp.fetch_offset, cp.current_leader_epoch)
                else:
                    p.check_leader_epoch(cp.current_leader_epoch)
                lg = p.log
                leader_epoch, hw, lso, leo = p.leader_epoch, lg.high_watermark, lg.log_start_offset, lg.log_end_offset
                committed = not follower and req.isolation_level == pb.READ_COMMITTED
                stable = lg.last_stable_offset() if committed else lg.last_stable_offset_if_known()
                limit = min(cp.max_bytes or budget, budget)
                bound = leo if follower else (stable if committed else hw)
                if limit > 0:
                    data = lg.read(cp.fetch_offset, limit, bound, min_one_batch=total == 0)
                if not data and cp.fetch_offset < bound and total > 0:
                    # Records are there, but the first batch does not fit what is left of this
                    # answer's bytes: read it on the next fetch. Dropped from the dirty set here, it
                    # waited for the partition's next append - none, when its producer waits for
                    # this very batch's acks=all (at thousands of partitions a follower's answer
                    # fills its max bytes: partitions stalled for replica.lag.time.max.ms, until
                    # the ISR shrank, issue 29).
                    leftover.append(tp)
                    unfitted.append(tp)
            except errors.KafkaError as e:
                code = e.wire_code
            except OSError as e:
                log.error("%s-%d: read failed: %s", tp[0], tp[1], e)
                code = E.KAFKA_STORAGE_ERROR
            if not cp.maybe_answer(error=code != E.NONE, has_records=bool(data), high_watermark=hw,
                                   log_start_offset=lso):
                continue
            tr = by_topic.get(tp[0])
            if tr is None:
                tr = by_topic[tp[0]] = resp.topics.add(name=tp[0])
            pr = tr.partitions.add(partition=tp[1], error_code=code, high_watermark=hw,
                                   last_stable_offset=hw if code != E.NONE else stable, log_start_offset=lso,
                                   log_end_offset=leo, records=data, leader_epoch=leader_epoch)
            if committed and data:
                _add_aborted_transactions(pr, lg, cp.fetch_offset, data)
            if data:
                # Read again on the next fetch unless it names a new offset: a fetcher that dropped
                # this answer (a consumer's rebalance or seek) and fetches from the same offset gets
                # the records again, as from Kafka, whose session reads every partition from its
                # cached offset on each fetch. One that took them names its next offset anyway.
                leftover.append(tp)
            total += len(data)
            budget -= len(data)
        return resp, total, leftover, unfitted

    @staticmethod
    def _answer_refused(resp: pb.FetchResponse, entries: list[tuple[str, int]],
                        verdicts: list[pb.ErrorCode]) -> None:
        """Named partitions refused before the session (bad names, duplicates, ACLs): their errors."""
        for (topic, partition), v in zip(entries, verdicts, strict=True):
            if v != E.NONE:
                resp.topics.add(name=topic).partitions.add(
                    partition=partition, error_code=v, high_watermark=-1, last_stable_offset=-1,
                    log_start_offset=-1, log_end_offset=-1)

    def _authorize(self, verdicts: list[pb.ErrorCode], entries: list[tuple[str, int]], ctx: RequestContext,
                   operation: str) -> list[pb.ErrorCode]:
        """TOPIC_AUTHORIZATION_FAILED for the entries whose topic ``ctx`` may not ``operation``."""
        decided: dict[str, bool] = {}
        out = []
        for (topic, _p), v in zip(entries, verdicts, strict=True):
            if v == E.NONE:
                ok = decided.get(topic)
                if ok is None:
                    ok = decided[topic] = self.allowed(ctx, operation, TOPIC, topic)
                if not ok:
                    v = E.TOPIC_AUTHORIZATION_FAILED
            out.append(v)
        return out

    def _fetch_may_answer(self, req: pb.FetchRequest, follower: bool, verdicts: list[pb.ErrorCode]) -> bool:
        """Has any requested partition data beyond the fetch offset, or a reason to answer now?"""
        i = 0
        for td in req.topics:
            for fp in td.partitions:
                ok = verdicts[i] == E.NONE
                i += 1
                if not ok:
                    continue
                p = self.partitions.get((td.name, fp.partition))
                if p is None or not p.is_leader:
                    return True  # an error to report
                epoch = _epoch_of(fp)
                if epoch >= 0 and epoch != p.leader_epoch:
                    return True
                lg = p.log
                bound = lg.log_end_offset if follower else (
                    lg.last_stable_offset() if req.isolation_level == pb.READ_COMMITTED else lg.high_watermark)
                if fp.fetch_offset < lg.log_start_offset or fp.fetch_offset > lg.log_end_offset \
                        or fp.fetch_offset < bound:
                    return True
        return False

    def _record_follower_fetch(self, req: pb.FetchRequest, verdicts: list[pb.ErrorCode],
                               clock: FetchClock | None = None) -> None:
        t = now_ms()
        lag = self.settings.replica_lag_time_max_ms
        i = 0
        for td in req.topics:
            for fp in td.partitions:
                ok = verdicts[i] == E.NONE
                i += 1
                if not ok or fp.partition_max_bytes < 0:
                    continue  # answered with an error below: not counted
                p = self.partitions.get((td.name, fp.partition))
                if p is None:
                    continue
                try:
                    # Validated first (replica, epoch, offset within the log), the same checks the read
                    # makes: a refused fetch moves neither HW nor ISR.
                    result = p.record_follower_fetch(req.replica_id, fp.fetch_offset, _epoch_of(fp), t, lag, clock)
                except errors.KafkaError:
                    continue
                if result.high_watermark_moved:
                    self._on_high_watermark_moved(p)
                if p.record_follower_log_start(req.replica_id, fp.log_start_offset):
                    self.delete_records_purgatory.notify(p.tp)
                change = result.isr_change
                if change is not None:
                    self._write_isr(p, change.new_isr, change.expected_zk_version, change.reason)

    def _read_fetch(self, req: pb.FetchRequest, follower: bool,
                    verdicts: list[pb.ErrorCode]) -> tuple[pb.FetchResponse, int, bool]:
        resp = pb.FetchResponse(error_code=E.NONE)
        cap = self.settings.fetch_max_bytes
        budget = min(req.max_bytes, cap) if req.max_bytes > 0 else cap
        total = 0
        has_error = False
        i = 0
        for td in req.topics:
            tr = resp.topics.add(name=td.name)
            for fp in td.partitions:
                pr = tr.partitions.add(partition=fp.partition, high_watermark=-1, last_stable_offset=-1,
                                       log_start_offset=-1, log_end_offset=-1)
                verdict = verdicts[i]
                i += 1
                if verdict != E.NONE:
                    pr.error_code = verdict
                    has_error = True
                    continue
                try:
                    if fp.partition_max_bytes < 0:
                        raise errors.InvalidFetchSizeError(f"partition_max_bytes {fp.partition_max_bytes} < 0")
                    p = self._leader_partition(td.name, fp.partition)
                    if follower:
                        p.validate_follower_fetch(req.replica_id, fp.fetch_offset, _epoch_of(fp))
                    else:
                        p.check_leader_epoch(_epoch_of(fp))
                    lg = p.log
                    committed = not follower and req.isolation_level == pb.READ_COMMITTED
                    pr.leader_epoch = p.leader_epoch
                    pr.high_watermark = lg.high_watermark
                    pr.last_stable_offset = lg.last_stable_offset() if committed else lg.last_stable_offset_if_known()
                    pr.log_start_offset = lg.log_start_offset
                    pr.log_end_offset = lg.log_end_offset
                    max_offset = lg.log_end_offset if follower else (
                        pr.last_stable_offset if committed else lg.high_watermark)
                    limit = min(fp.partition_max_bytes or budget, budget)
                    if limit <= 0:
                        continue
                    # At least one batch for the first partition with data, so a consumer always
                    # makes progress even past a batch larger than its limits (Kafka's KIP-74).
                    data = lg.read(fp.fetch_offset, limit, max_offset, min_one_batch=total == 0)
                    if committed and data:
                        _add_aborted_transactions(pr, lg, fp.fetch_offset, data)
                except errors.KafkaError as e:
                    pr.error_code = e.wire_code
                    has_error = True
                    continue
                except OSError as e:
                    log.error("%s-%d: read failed: %s", td.name, fp.partition, e)
                    pr.error_code = E.KAFKA_STORAGE_ERROR
                    has_error = True
                    continue
                pr.records = data
                total += len(data)
                budget -= len(data)
        return resp, total, has_error

    def _read_any_replica(self, req: pb.FetchRequest, verdicts: list[pb.ErrorCode]) -> pb.FetchResponse:
        """replica_id -2 (Kafka's debugging consumer): read this broker's replica, leader or follower,
        up to its LEO - what the replica verification tool compares. Never waits."""
        resp = pb.FetchResponse(error_code=E.NONE)
        cap = self.settings.fetch_max_bytes
        budget = min(req.max_bytes, cap) if req.max_bytes > 0 else cap
        i = 0
        for td in req.topics:
            tr = resp.topics.add(name=td.name)
            for fp in td.partitions:
                pr = tr.partitions.add(partition=fp.partition, high_watermark=-1, last_stable_offset=-1,
                                       log_start_offset=-1, log_end_offset=-1)
                verdict = verdicts[i]
                i += 1
                if verdict != E.NONE:
                    pr.error_code = verdict
                    continue
                p = self.partitions.get((td.name, fp.partition))
                if p is None:
                    pr.error_code = E.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                lg = p.log
                pr.leader_epoch = p.leader_epoch
                pr.high_watermark = lg.high_watermark
                pr.log_start_offset = lg.log_start_offset
                pr.log_end_offset = lg.log_end_offset
                limit = min(fp.partition_max_bytes or (1 << 20), budget)
                if limit <= 0:
                    continue
                try:
                    data = lg.read(fp.fetch_offset, limit)
                except errors.KafkaError as e:
                    pr.error_code = e.wire_code
                    continue
                pr.records = data
                budget -= len(data)
                self.bytes_out += len(data)
        return resp

    # ------------------------------------------------------------ offsets

    def handle_list_offsets(self, req: pb.ListOffsetsRequest,
                            ctx: RequestContext = LOCAL_CLIENT) -> pb.ListOffsetsResponse:
        resp = pb.ListOffsetsResponse()
        entries = [(t.name, lp.partition) for t in req.topics for lp in t.partitions]
        verdicts = iter(self._authorize(judge_partitions(entries, self.settings.max_request_partitions), entries,
                                        ctx, "Describe"))
        # Only a broker sees offsets up to the LEO; anyone else asking as a replica is a consumer.
        as_replica = req.replica_id >= 0 and ctx.inter_broker
        for td in req.topics:
            tr = resp.topics.add(name=td.name)
            for lp in td.partitions:
                pr = tr.partitions.add(partition=lp.partition, timestamp=-1, offset=-1, leader_epoch=-1)
                verdict = next(verdicts)
                if verdict != E.NONE:
                    pr.error_code = verdict
                    continue
                try:
                    p = self._leader_partition(td.name, lp.partition)
                    p.check_leader_epoch(_epoch_of(lp))
                    lg = p.log
                    bound = lg.log_end_offset if as_replica else (
                        lg.last_stable_offset() if req.isolation_level == pb.READ_COMMITTED else lg.high_watermark)
                    pr.leader_epoch = p.leader_epoch
                    if lp.timestamp == -2:
                        pr.offset = lg.log_start_offset
                    elif lp.timestamp == -1:
                        pr.offset = bound
                    elif lp.timestamp < 0:
                        raise errors.InvalidRequestError(f"timestamp {lp.timestamp} is not -2, -1 or a time")
                    else:
                        rec = lg.offset_for_timestamp(lp.timestamp)
                        if rec is not None and rec.offset < bound:
                            pr.offset, pr.timestamp = rec.offset, rec.timestamp
                except errors.KafkaError as e:
                    pr.error_code = e.wire_code
        return resp

    def handle_offsets_for_leader_epoch(self, req: pb.OffsetsForLeaderEpochRequest,
                                        ctx: RequestContext = LOCAL_CLIENT) -> pb.OffsetsForLeaderEpochResponse:
        """S8.3 on the leader: LEO for its current epoch, else where the next epoch starts."""
        resp = pb.OffsetsForLeaderEpochResponse()
        limit = 1 << 31 if ctx.inter_broker else self.settings.max_request_partitions
        entries = [(t.topic, op.partition) for t in req.topics for op in t.partitions]
        verdicts = iter(self._authorize(judge_partitions(entries, limit), entries, ctx, "Describe"))
        for td in req.topics:
            tr = resp.topics.add(topic=td.topic)
            for op in td.partitions:
                pr = tr.partitions.add(partition=op.partition, leader_epoch=-1, end_offset=-1)
                verdict = next(verdicts)
                if verdict != E.NONE:
                    pr.error_code = verdict
                    continue
                try:
                    p = self._leader_partition(td.topic, op.partition)
                    p.check_leader_epoch(_epoch_of(op))
                    epoch, end = p.end_offset_for_epoch(op.leader_epoch)
                    pr.leader_epoch, pr.end_offset = epoch, end
                except errors.KafkaError as e:
                    pr.error_code = e.wire_code
        return resp

    # ------------------------------------------------------------ transactions (KIP-98)

    async def handle_write_txn_markers(self, req: pb.WriteTxnMarkersRequest,
                                       ctx: RequestContext = LOCAL_CLIENT) -> pb.WriteTxnMarkersResponse:
        """WriteTxnMarkers on the partitions' leader (Kafka's handleWriteTxnMarkersRequest): the
        transaction coordinator - a broker, ClusterAction on the cluster - asks for a COMMIT/ABORT
        marker per producer and partition. Each is appended with acks=all semantics and answered
        per partition when the high watermark passed it (or with the error: NOT_LEADER_OR_FOLLOWER,
        UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED,
        NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT after request.timeout.ms)."""
        if not self.allowed(ctx, "ClusterAction", CLUSTER, CLUSTER_NAME):
            raise errors.ClusterAuthorizationFailedError(f"{ctx.principal} may not write transaction markers")
        resp = pb.WriteTxnMarkersResponse()
        # Partitions are judged per marker: markers of different producers name the same partitions.
        limit = 1 << 31 if ctx.inter_broker else self.settings.max_request_partitions
        too_many = sum(len(t.partition_indexes) for m in req.markers for t in m.topics) > limit
        verdicts = iter([v for m in req.markers for v in judge_partitions(
            [(t.name, p) for t in m.topics for p in t.partition_indexes], -1 if too_many else limit)])
        pending: list[tuple[Partition, pb.ProducePartitionResponse, int, int]] = []
        answers: list[tuple[pb.ProducePartitionResponse, pb.WritableTxnMarkerPartitionResult]] = []
        for m in req.markers:
            mr = resp.markers.add(producer_id=m.producer_id)
            for t in m.topics:
                tr = mr.topics.add(name=t.name)
                for index in t.partition_indexes:
                    pr = tr.partitions.add(partition_index=index)
                    verdict = next(verdicts)
                    if verdict != E.NONE:
                        pr.error_code = verdict
                        continue
                    if m.producer_id < 0 or not 0 <= m.producer_epoch <= 0x7FFF or m.coordinator_epoch < 0:
                        pr.error_code = E.INVALID_REQUEST
                        continue
                    try:
                        p = self._leader_partition(t.name, index)
                        result = p.append_txn_marker(m.producer_id, m.producer_epoch, m.transaction_result,
                                                     m.coordinator_epoch, now_ms(),
                                                     self.settings.replica_lag_time_max_ms)
                    except errors.KafkaError as e:
                        pr.error_code = e.wire_code
                        continue
                    except OSError as e:
                        log.error("%s-%d: marker append failed: %s", t.name, index, e)
                        pr.error_code = E.KAFKA_STORAGE_ERROR
                        continue
                    if result.high_watermark_moved:
                        self._on_high_watermark_moved(p)
                    else:
                        self._wake_fetches(p.tp)
                    wait = pb.ProducePartitionResponse(partition=index)
                    pending.append((p, wait, result.info.last_offset + 1, p.leader_epoch))
                    answers.append((wait, pr))
        if pending:
            await self._await_acks(pending, self.settings.max_wait_ms)  # request.timeout.ms
            for wait, pr in answers:
                pr.error_code = wait.error_code
        return resp

    # ------------------------------------------------------------ followers' side

    def on_follower_data(self, p: Partition, records: bytes, leader_high_watermark: int,
                         leader_log_start_offset: int = -1) -> bool:
        """Called by the fetcher with what it fetched for ``p``; returns True when the leader's log
        start offset moved ours (the fetcher tells the leader so with its next fetch)."""
        p.append_as_follower(records, leader_high_watermark, now_ms())
        moved = p.maybe_increment_log_start_offset_as_follower(leader_log_start_offset)
        if moved:
            self._schedule_log_start_checkpoint()
        self._wake_fetches(p.tp)
        return moved

    # ------------------------------------------------------------ DeleteRecords (Kafka api 21)

    async def handle_delete_records(self, req: pb.DeleteRecordsRequest,
                                    ctx: RequestContext = LOCAL_CLIENT) -> pb.DeleteRecordsResponse:
        """Kafka's ReplicaManager.deleteRecords: Delete on the topic; on the leader only, its log start
        offset moved to the requested offset (-1: the high watermark) and checkpointed at once; the
        answer - the partition's low watermark - waits (Kafka's DelayedDeleteRecords, bounded by the
        timeout) until every replica on a live broker has moved its log start offset as far, which
        followers do from their fetch answers and report with their next fetch."""
        resp = pb.DeleteRecordsResponse()
        entries = [(t.name, dp.partition) for t in req.topics for dp in t.partitions]
        verdicts = iter(self._authorize(judge_partitions(entries, self.settings.max_request_partitions), entries,
                                        ctx, "Delete"))
        pending: list[tuple[Partition, pb.DeleteRecordsPartitionResult, int]] = []
        moved = False
        for td in req.topics:
            tr = resp.topics.add(name=td.name)
            for dp in td.partitions:
                pr = tr.partitions.add(partition=dp.partition, low_watermark=-1)
                verdict = next(verdicts)
                if verdict != E.NONE:
                    pr.error_code, pr.error_message = verdict, error_message(verdict)
                    continue
                try:
                    p = self._leader_partition(td.name, dp.partition)
                    before = p.log_start_offset
                    required = p.delete_records_on_leader(dp.offset)
                    if p.log_start_offset != before:
                        moved = True
                        self._wake_fetches(p.tp)
                    pending.append((p, pr, required))
                except errors.KafkaError as e:
                    pr.error_code, pr.error_message = e.wire_code, e.message
        if moved:
            # Before answering: a crash of this leader must not bring the deleted records back.
            self.log_manager.checkpoint_log_start_offsets()

        def reached(p: Partition, required: int) -> bool:
            return not p.is_leader or p.low_watermark(self.metadata.brokers) >= required

        timeout_ms = min(max(req.timeout_ms, 0), self.settings.max_wait_ms)
        await self.delete_records_purgatory.wait_until(
            [p.tp for p, _pr, _r in pending], lambda: all(reached(p, r) for p, _pr, r in pending), timeout_ms / 1000.0)
        for p, pr, required in pending:
            if not p.is_leader:
                pr.error_code = E.NOT_LEADER_OR_FOLLOWER
                pr.error_message = "leadership moved before the replicas deleted the records"
                continue
            low = p.low_watermark(self.metadata.brokers)
            if low >= required:
                pr.low_watermark = low
            else:
                pr.error_code = E.REQUEST_TIMED_OUT
                pr.error_message = (f"the leader's log starts at {p.log_start_offset}; not every replica did "
                                    f"within the timeout (low watermark {low})")
        return resp

    def _schedule_log_start_checkpoint(self) -> None:
        """A follower's log start offset moved: checkpoint it shortly, once for a burst of moves."""
        if self._log_start_checkpoint is not None:
            return

        def write() -> None:
            self._log_start_checkpoint = None
            try:
                self.log_manager.checkpoint_log_start_offsets()
            except OSError as e:
                log.warning("cannot checkpoint log start offsets: %s", e)

        self._log_start_checkpoint = asyncio.get_running_loop().call_later(0.1, write)

    # ------------------------------------------------------------ ISR upkeep

    async def maybe_shrink_isr(self) -> None:
        """Periodic (S4.2): ask every led partition whether a follower fell out of sync, a slice of
        ISR_CHECK_SLICE partitions at a time with the loop free between slices (at 10,000
        partitions one walk held the loop ~50 ms here). A partition removed meanwhile is skipped."""
        lag = self.settings.replica_lag_time_max_ms
        t = now_ms()
        hosted = self.partitions
        for i, p in enumerate([p for p in hosted.values() if p.is_leader]):
            if i and i % ISR_CHECK_SLICE == 0:
                await asyncio.sleep(0)
                t = now_ms()
            if i >= ISR_CHECK_SLICE and hosted.get(p.tp) is not p:
                continue  # removed (or made anew) while the loop served others
            change = p.maybe_shrink_isr(t, lag)
            if change is not None:
                self._write_isr(p, change.new_isr, change.expected_zk_version, change.reason)

    def _write_isr(self, p: Partition, new_isr: tuple[int, ...], expected_version: int, reason: str) -> None:
        task = asyncio.get_running_loop().create_task(self._persist_isr(p, new_isr, expected_version, reason))
        self._isr_writes.add(task)
        task.add_done_callback(self._isr_writes.discard)

    async def _persist_isr(self, p: Partition, new_isr: tuple[int, ...], expected_version: int, reason: str) -> None:
        epoch = p.leader_epoch
        try:
            if self._isr_executor is None:
                self._isr_executor = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="isr-writes")
            result = await asyncio.get_running_loop().run_in_executor(
                self._isr_executor, write_isr, self.zk, p.topic, p.partition, self.broker_id, epoch,
                p.controller_epoch, new_isr, expected_version)
        except Exception as e:  # ZooKeeper unreachable: try again on the next check
            log.warning("%s-%d: cannot write ISR %s: %s", p.topic, p.partition, list(new_isr), e)
            p.on_isr_write_failed(epoch)
            return
        decision = decide_after_isr_write(self.broker_id, epoch, p.is_leader, p.leader_epoch, new_isr, result)
        if decision.kind == IGNORE:
            return
        if decision.kind in (ADOPT, DEPOSED):
            p.on_isr_write_failed(epoch)
        if decision.kind == ADOPT:
            # The controller wrote the state znode under this leader, at this epoch: take its ISR and
            # version, so the next change is made against them rather than failing forever.
            self._set_isr(p, decision.isr, decision.zk_version)
            log.info("%s-%d: ISR update to %s lost to a newer write; took ISR %s at zk_version %d", p.topic,
                     p.partition, list(new_isr), list(decision.isr), decision.zk_version,
                     extra=event("isr_update_fenced", *p.tp))
            return
        if decision.kind == DEPOSED:
            log.info("%s-%d: ISR update to %s refused (zk_version %d is stale): this leader was deposed",
                     p.topic, p.partition, list(new_isr), expected_version, extra=event("isr_update_fenced", *p.tp))
            return
        grew = len(new_isr) > len(p.isr)
        if grew:
            self.isr_expands += 1
        else:
            self.isr_shrinks += 1
        log.info("%s-%d: ISR %s -> %s at zk_version %d (%s)", p.topic, p.partition, list(p.isr), list(new_isr),
                 decision.zk_version, reason, extra=event("isr_expand" if grew else "isr_shrink", *p.tp))
        self._set_isr(p, new_isr, decision.zk_version)
        self._isr_changed.add(p.tp)
        if self._isr_notifier is None or self._isr_notifier.done():
            self._isr_notifier = asyncio.get_running_loop().create_task(self._propagate_isr_changes())

    async def _propagate_isr_changes(self) -> None:
        """Tell the controller of ISR changes in batches (Kafka's maybePropagateIsrChanges): one
        notification znode per ISR_CHANGE_BATCH_MS, not one per change - a restarted broker rejoining
        thousands of ISRs wrote thousands, which the controller then read one by one."""
        await asyncio.sleep(ISR_CHANGE_BATCH_MS / 1000.0)
        while self._isr_changed:
            batch = sorted(self._isr_changed)[:ISR_CHANGE_BATCH_MAX]
            self._isr_changed.difference_update(batch)
            try:
                await asyncio.to_thread(self.zk.create_isr_change_notification,
                                        [TopicPartitionId(t, p) for t, p in batch])
            except Exception as e:  # ZooKeeper unreachable: keep them, try again shortly
                log.warning("cannot notify the controller of %d ISR changes: %s", len(batch), e)
                self._isr_changed.update(batch)
                await asyncio.sleep(1.0)

    def checkpoint_high_watermarks(self, background: bool = False) -> None:
        self.log_manager.checkpoint_high_watermarks(background)

    def leader_count(self) -> int:
        return sum(1 for p in self.partitions.values() if p.is_leader)


FETCH_ANSWER_SLICE = 1000  # partitions added to a refused fetch's answer between two yields


async def _refused_fetch(req: pb.FetchRequest, slice_size: int = FETCH_ANSWER_SLICE) -> pb.FetchResponse:
    """``_read_fetch``'s answer when every partition's verdict is INVALID_REQUEST (nothing read),
    built in slices with the loop free between them."""
    resp = pb.FetchResponse(error_code=E.NONE)
    todo = slice_size
    for td in req.topics:
        add = resp.topics.add(name=td.name).partitions.add
        for fp in td.partitions:
            add(partition=fp.partition, high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
                log_end_offset=-1, error_code=E.INVALID_REQUEST)
            todo -= 1
            if todo <= 0:
                todo = slice_size
                await asyncio.sleep(0)
    return resp


def _add_aborted_transactions(pr: pb.FetchPartitionResponse, lg: Log, fetch_offset: int, data: bytes) -> None:
    """A read_committed answer's aborted transactions (KIP-98): those overlapping the offsets of
    the batches in ``data`` (Kafka's ``addAbortedTransactions``, bounded by what was read)."""
    pos = end = 0
    while pos + SPAN_BYTES <= len(data):
        base, size, last_delta = batch_span(data, pos)
        end = base + last_delta + 1
        pos += size
    for txn in lg.collect_aborted_transactions(fetch_offset, end):
        pr.aborted_transactions.add(producer_id=txn.producer_id, first_offset=txn.first_offset)


def _session_bound(session: FetchSession, lg: Log, follower: bool) -> int:
    """Where a session's fetch may read to: a follower the log end, a read_committed consumer the
    last stable offset (KIP-98: records of an open transaction do not answer it), others the HW."""
    if follower:
        return lg.log_end_offset
    return lg.last_stable_offset() if session.read_committed else lg.high_watermark


def _epoch_of(part: pb.FetchPartition | pb.ListOffsetsPartition | pb.OffsetForLeaderPartition) -> int:
    """The request's current_leader_epoch; -1 (unknown, not checked) when unset."""
    return part.current_leader_epoch if part.HasField("current_leader_epoch") else -1


class FetcherManagerProtocol:
    """What the replica manager needs of the fetchers (see broker.replication.fetcher)."""

    def add_partition(self, p: Partition, leader: pb.BrokerEndpoint) -> None:
        raise NotImplementedError

    def remove_partitions(self, tps: list[TopicPartition]) -> None:
        raise NotImplementedError
