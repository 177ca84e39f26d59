"""Follower fetchers (Kafka's ReplicaFetcherManager / AbstractFetcherThread).

One fetcher task per source (leader) broker fetches every partition this
broker follows from that leader in one Fetch request. Its loop is Kafka's
``doWork = maybeTruncate(); maybeFetch()``: partitions that just became
followers first ask the leader OffsetsForLeaderEpoch and truncate where the
pure core says (SPEC S8.3 - never to the high watermark), then join the
fetch. Partitions are added and removed as LeaderAndIsr requests arrive,
without restarting the others.

The fetcher owns the network loop and the policy (when to ask, where to cut);
every truncation and every append it decides on is made by the partition's
``broker.replication.partition.Partition``, the only owner of the log.

Fetch sessions (KIP-227, SPEC S15): the first fetch to a leader is full (it
names every partition and opens a session); later ones are incremental: they
name only partitions whose fetch state (log end, log start, leader epoch)
changed since the leader last heard it, and forget those that stopped
fetching (truncating, backing off, removed). The leader answers only
partitions that moved. What changed is tracked as it changes (``_changed``),
so an idle fetcher's loop does no work per followed partition. Any failure -
a lost answer, FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH -
makes the next fetch full again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from broker.network.replica_fetch_socket import ReplicaFetchConnection, ReplicaFetchUnreachable
from broker.replication.fetch_session import INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch
from broker.replication.partition import Partition
from broker.replication.replica_manager import FetcherManagerProtocol, ReplicaManager, now_ms
from broker.server.observability import event
from proto import minikafka_pb2 as pb
from proto import minikafka_pb2_grpc as pb_grpc
from proto.grpc_options import CHANNEL_OPTIONS
from proto.names import TopicPartition
from proto.transport import PLAINTEXT_SECURITY, ChannelSecurity

log = logging.getLogger(__name__)
E = pb.ErrorCode
MAX_TRUNCATION_ROUNDS = 16
SOCKET_RETRY_MS = 30_000


@dataclass
class FetchState:
    partition: Partition
    leader_epoch: int
    truncating: bool = True
    rounds: int = 0
    delayed_until_ms: int = 0


@dataclass(frozen=True)
class FetcherSettings:
    broker_id: int
    fetch_max_wait_ms: int
    fetch_min_bytes: int
    fetch_max_bytes: int
    backoff_ms: int
    request_timeout_ms: int


class ReplicaFetcher:
    def __init__(self, settings: FetcherSettings, replica_manager: ReplicaManager, leader: pb.BrokerEndpoint,
                 broker_epoch: Callable[[], int], security: ChannelSecurity = PLAINTEXT_SECURITY) -> None:
        self.settings = settings
        self.rm = replica_manager
        self.leader = leader
        self.broker_epoch = broker_epoch
        self.states: dict[TopicPartition, FetchState] = {}
        # Indexes kept as states change, so that no loop walks every followed partition.
        self._truncating: set[TopicPartition] = set()
        self._delayed: dict[TopicPartition, int] = {}
        self._changed: set[TopicPartition] = set()
        # The fetch session with this leader: its id, the epoch of the next fetch (INITIAL_EPOCH:
        # full), and what the leader's session holds for each partition (log end, log start, epoch).
        self._session_id = INVALID_SESSION_ID
        self._session_epoch = INITIAL_EPOCH
        self._sent: dict[TopicPartition, tuple[int, int, int]] = {}
        self.full_fetches = 0
        self.incremental_fetches = 0
        self._wake = asyncio.Event()
        # The leader's inter-broker listener, mutual TLS with this broker's certificate (S12.1).
        self._channel = security.aio_channel(f"{leader.host}:{leader.port}", options=CHANNEL_OPTIONS)
        self._stub = pb_grpc.KafkaApiStub(self._channel)  # type: ignore[no-untyped-call]
        # One FetchStream per leader, opened on first use and dropped on any error: each fetch is a
        # message on it (half a unary call's cost), still one request in flight at a time.
        self._stream: Any = None
        # A leader of an older version has no FetchStream (a rolling upgrade): then unary Fetch.
        self._unary = False
        # The leader's replica fetch listener (broker.network.replica_fetch_socket), when it has one: each
        # hop costs ~30 us there against ~200 over gRPC. Unreachable (a port behind NAT or a
        # firewall), the fetches go over gRPC and the socket is tried again SOCKET_RETRY_MS later.
        self._socket: ReplicaFetchConnection | None = None
        self._socket_retry_at_ms = 0
        if leader.replica_fetch_port > 0 and security.is_tls:
            self._socket = ReplicaFetchConnection(leader.host, leader.replica_fetch_port, security.ssl_context(),
                                                  settings.request_timeout_ms / 1000.0)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"fetcher-{self.leader.broker_id}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        self._drop_stream()
        if self._socket is not None:
            self._socket.close()
        await self._channel.close()

    def _drop_stream(self) -> None:
        if self._stream is not None:
            self._stream.cancel()
            self._stream = None

    async def _fetch(self, req: pb.FetchRequest, timeout_s: float) -> pb.FetchResponse:
        """One Fetch round trip on the stream; any failure closes the stream (the next fetch opens
        a new one) and is raised to the loop, which backs off as after a failed unary call."""
        if self._socket is not None and now_ms() >= self._socket_retry_at_ms:
            try:
                return await self._socket.fetch(req, timeout_s)
            except ReplicaFetchUnreachable as e:
                log.warning("fetcher for leader %d: its replica fetch listener is unreachable (%s); fetching "
                            "over gRPC, trying the listener again in %d s", self.leader.broker_id, e,
                            SOCKET_RETRY_MS // 1000)
                self._socket_retry_at_ms = now_ms() + SOCKET_RETRY_MS
        if self._unary:
            return await self._stub.Fetch(req, timeout=timeout_s)  # type: ignore[no-any-return]
        if self._stream is None:
            self._stream = self._stub.FetchStream()
        stream = self._stream
        try:
            async with asyncio.timeout(timeout_s):
                await stream.write(req)
                resp = await stream.read()
        except grpc.aio.AioRpcError as e:
            if self._stream is stream:
                self._drop_stream()
            if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
            log.info("leader %d has no FetchStream (an older version): fetching with unary Fetch",
                     self.leader.broker_id)
            self._unary = True
            return await self._stub.Fetch(req, timeout=timeout_s)  # type: ignore[no-any-return]
        except BaseException:
            if self._stream is stream:
                self._drop_stream()
            raise
        if resp is grpc.aio.EOF:
            self._drop_stream()
            raise ConnectionResetError(f"leader {self.leader.broker_id} closed the fetch stream")
        return resp  # type: ignore[no-any-return]

    def add(self, p: Partition) -> None:
        self.states[p.tp] = FetchState(p, p.leader_epoch)
        self._truncating.add(p.tp)
        self._delayed.pop(p.tp, None)
        self._changed.add(p.tp)
        self._wake.set()

    def remove(self, tp: TopicPartition) -> None:
        if self.states.pop(tp, None) is not None:
            self._truncating.discard(tp)
            self._delayed.pop(tp, None)
            self._changed.add(tp)

    def _truncate_again(self, tp: TopicPartition, st: FetchState) -> None:
        st.truncating = True
        st.rounds = 0
        self._truncating.add(tp)
        self._changed.add(tp)

    def _delay(self, tp: TopicPartition, st: FetchState) -> None:
        st.delayed_until_ms = now_ms() + self.settings.backoff_ms
        self._delayed[tp] = st.delayed_until_ms
        self._changed.add(tp)

    def _reset_session(self) -> None:
        """The leader's session state is unknown (or gone): the next fetch is a full one."""
        self._session_epoch = INITIAL_EPOCH
        self._sent.clear()

    def _valid(self, tp: TopicPartition, st: FetchState) -> bool:
        """The partition is still ours to fetch: same leader epoch, still a follower."""
        return self.states.get(tp) is st and st.partition.leader_epoch == st.leader_epoch \
            and not st.partition.is_leader

    async def _run(self) -> None:
        while True:
            try:
                if not self.states:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                await self._maybe_truncate()
                await self._maybe_fetch()
            except asyncio.CancelledError:
                raise
            except grpc.aio.AioRpcError as e:
                log.debug("fetcher for leader %d: %s", self.leader.broker_id, e.code())
                await asyncio.sleep(self.settings.backoff_ms / 1000.0)
            except (TimeoutError, ConnectionError) as e:
                log.debug("fetcher for leader %d: %r", self.leader.broker_id, e)
                await asyncio.sleep(self.settings.backoff_ms / 1000.0)
            except Exception:
                log.exception("fetcher for leader %d failed; backing off", self.leader.broker_id)
                await asyncio.sleep(self.settings.backoff_ms / 1000.0)

    async def _maybe_truncate(self) -> None:
        if not self._truncating:
            return
        now = now_ms()
        pending = {tp: s for tp in self._truncating if (s := self.states.get(tp)) is not None
                   and s.delayed_until_ms <= now}
        if not pending:
            return
        req = pb.OffsetsForLeaderEpochRequest(replica_id=self.settings.broker_id)
        for topic, parts in _by_topic(pending).items():
            t = req.topics.add(topic=topic)
            for part, s in parts:
                t.partitions.add(partition=part, current_leader_epoch=s.leader_epoch,
                                 leader_epoch=s.partition.latest_epoch)
        resp = await self._stub.OffsetsForLeaderEpoch(req, timeout=self.settings.request_timeout_ms / 1000.0)
        for tr in resp.topics:
            for r in tr.partitions:
                tp = (tr.topic, r.partition)
                st = pending.get(tp)
                if st is None or not self._valid(tp, st):
                    continue
                if r.error_code != E.NONE:
                    # The leader does not know it leads yet (or has moved on): try again shortly.
                    st.delayed_until_ms = now_ms() + self.settings.backoff_ms
                    self._delayed[tp] = st.delayed_until_ms
                    continue
                p = st.partition
                decision = p.follower_truncation_offset(r.leader_epoch, r.end_offset)
                st.rounds += 1
                if decision.offset < p.log_end_offset:
                    log.info("%s-%d: truncating from %d to %d (leader %d says epoch %d ends at %d; "
                             "local high watermark %d is not used)", tp[0], tp[1], p.log_end_offset,
                             decision.offset, self.leader.broker_id, r.leader_epoch, r.end_offset,
                             p.high_watermark, extra=event("truncation", *tp))
                    p.truncate_to(decision.offset)
                if not decision.completed:
                    p.truncate_epochs_from_end(decision.offset)  # checkpointed (issue 14 item 8)
                if decision.completed or st.rounds >= MAX_TRUNCATION_ROUNDS:
                    st.truncating = False
                    self._truncating.discard(tp)
                    self._changed.add(tp)

    @staticmethod
    def _fetch_key(s: FetchState) -> tuple[int, int, int]:
        return s.partition.log_end_offset, s.partition.log_start_offset, s.leader_epoch

    def _named_and_forgotten(self, t: int) -> tuple[dict[TopicPartition, FetchState], list[TopicPartition], bool]:
        """The partitions the next fetch names and forgets, and whether it is a full fetch."""
        for tp, until in list(self._delayed.items()):
            if until <= t:
                del self._delayed[tp]
                self._changed.add(tp)
        full = self._session_epoch == INITIAL_EPOCH
        named: dict[TopicPartition, FetchState] = {}
        forgotten: list[TopicPartition] = []
        if full:
            self._sent.clear()
            candidates: Any = self.states
        else:
            candidates = self._changed
        for tp in candidates:
            s = self.states.get(tp)
            if s is not None and not s.truncating and s.delayed_until_ms <= t:
                key = self._fetch_key(s)
                if full or self._sent.get(tp) != key:
                    named[tp] = s
                    self._sent[tp] = key
            elif self._sent.pop(tp, None) is not None:
                forgotten.append(tp)
        self._changed.clear()
        return named, forgotten, full

    async def _maybe_fetch(self) -> None:
        t = now_ms()
        named, forgotten, full = self._named_and_forgotten(t)
        if not self._sent and not forgotten:
            # Nothing to fetch (every partition truncating or backing off): look again shortly.
            self._reset_session()
            await asyncio.sleep(self.settings.backoff_ms / 1000.0 / 10)
            return
        req = pb.FetchRequest(replica_id=self.settings.broker_id, max_wait_ms=self.settings.fetch_max_wait_ms,
                              min_bytes=self.settings.fetch_min_bytes, max_bytes=self.settings.fetch_max_bytes,
                              replica_epoch=self.broker_epoch(), session_id=self._session_id,
                              session_epoch=self._session_epoch)
        for topic, parts in _by_topic(named).items():
            ft = req.topics.add(name=topic)
            for part, s in parts:
                ft.partitions.add(partition=part, current_leader_epoch=s.leader_epoch,
                                  fetch_offset=s.partition.log_end_offset,
                                  log_start_offset=s.partition.log_start_offset,
                                  partition_max_bytes=self.settings.fetch_max_bytes)
        for topic, tps in _topics_of(forgotten).items():
            req.forgotten.add(name=topic).partitions.extend(pb.FetchPartition(partition=p) for p in tps)
        if full:
            self.full_fetches += 1
        else:
            self.incremental_fetches += 1
        timeout = (self.settings.fetch_max_wait_ms + self.settings.request_timeout_ms) / 1000.0
        try:
            resp = await self._fetch(req, timeout)
        except BaseException:
            self._reset_session()
            raise
        if resp.error_code != E.NONE:
            # FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH (evicted, or the leader
            # restarted) or a refusal of the whole fetch: start over with a full one.
            log.info("fetcher for leader %d: fetch refused (%s); next fetch is a full one", self.leader.broker_id,
                     pb.ErrorCode.Name(resp.error_code))
            self._reset_session()
            await asyncio.sleep(self.settings.backoff_ms / 1000.0)
            return
        self._session_id = resp.session_id
        # No session granted (an older leader, or its cache is full): every fetch stays full.
        self._session_epoch = next_epoch(req.session_epoch) if resp.session_id != INVALID_SESSION_ID \
            else INITIAL_EPOCH
        for tr in resp.topics:
            for r in tr.partitions:
                tp = (tr.name, r.partition)
                st = self.states.get(tp)
                # Fetched for the state it was asked for: not one re-added (LeaderAndIsr) meanwhile.
                if st is None or st.truncating or st.delayed_until_ms > t or not self._valid(tp, st):
                    continue
                self._process(tp, st, r)

    def _process(self, tp: TopicPartition, st: FetchState, r: pb.FetchPartitionResponse) -> None:
        p = st.partition
        if r.error_code == E.NONE:
            try:
                if self.rm.on_follower_data(st.partition, r.records, r.high_watermark, r.log_start_offset):
                    self._changed.add(tp)  # the next fetch tells the leader our new log start offset
            except Exception as e:
                log.warning("%s-%d: cannot append fetched data: %s; truncating again", tp[0], tp[1], e)
                self._truncate_again(tp, st)
                return
            if r.log_end_offset >= 0:
                p.leader_log_end_offset = r.log_end_offset  # DescribeLogDirs' offset lag
            if r.records:
                self._changed.add(tp)
            return
        if r.error_code == E.OFFSET_OUT_OF_RANGE:
            if r.log_end_offset >= 0 and p.log_end_offset > r.log_end_offset:
                # Only after an unclean election can the leader be behind us.
                log.warning("%s-%d: leader %d ends at %d below our %d; truncating", tp[0], tp[1],
                            self.leader.broker_id, r.log_end_offset, p.log_end_offset)
                p.truncate_to(r.log_end_offset)
            elif r.log_start_offset > p.log_end_offset:
                log.info("%s-%d: leader starts at %d beyond our end %d; restarting the log there", tp[0], tp[1],
                         r.log_start_offset, p.log_end_offset)
                p.truncate_fully_and_start_at(r.log_start_offset)
            self._changed.add(tp)
            return
        self._delay(tp, st)


def _topics_of(tps: list[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, part in tps:
        out.setdefault(topic, []).append(part)
    return out


def _by_topic(states: dict[TopicPartition, FetchState]) -> dict[str, list[tuple[int, FetchState]]]:
    out: dict[str, list[tuple[int, FetchState]]] = {}
    for (topic, part), s in states.items():
        out.setdefault(topic, []).append((part, s))
    return out


class ReplicaFetcherManager(FetcherManagerProtocol):
    def __init__(self, settings: FetcherSettings, replica_manager: ReplicaManager) -> None:
        self.settings = settings
        self.rm = replica_manager
        self.broker_epoch = -1
        self.security = PLAINTEXT_SECURITY
        self.fetchers: dict[tuple[int, str, int, int], ReplicaFetcher] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        # Set when this broker begins its controlled shutdown: it copies nothing more, so that no
        # leader takes it back into an ISR the controller just removed it from (the leaders move,
        # the broker becomes their follower and its fetch at the log end looked caught up:
        # Kafka's KIP-841 keeps shutting-down brokers out of ISRs for the same reason).
        self.stopped = False

    def add_partition(self, p: Partition, leader: pb.BrokerEndpoint) -> None:
        if self.stopped:
            return
        # A restarted leader has a new replica fetch port (a free one, by default): a new fetcher.
        key = (leader.broker_id, leader.host, leader.port, leader.replica_fetch_port)
        f = self.fetchers.get(key)
        if f is None:
            # The epoch is read at every fetch: a re-registration (new ZooKeeper session) changes it.
            f = ReplicaFetcher(self.settings, self.rm, leader, lambda: self.broker_epoch, self.security)
            self.fetchers[key] = f
            f.start()
        f.add(p)
        # The fetcher of the same broker's previous incarnation (or address), once nothing is left
        # in it, goes with its connections (Kafka's shutdownIdleFetcherThreads).
        for old_key, old in list(self.fetchers.items()):
            if old_key[0] == leader.broker_id and old_key != key and not old.states:
                del self.fetchers[old_key]
                task = asyncio.get_running_loop().create_task(old.stop())
                self._stopping.add(task)
                task.add_done_callback(self._stopping.discard)

    def remove_partitions(self, tps: list[TopicPartition]) -> None:
        for f in self.fetchers.values():
            for tp in tps:
                f.remove(tp)

    async def shutdown(self) -> None:
        for f in self.fetchers.values():
            await f.stop()
        self.fetchers.clear()
        if self._stopping:
            await asyncio.wait(list(self._stopping), timeout=5.0)
