"""A whole cluster in one thread, from a seed: real controllers and replication cores, simulated I/O.

Theory of operation
===================
Each ``SimBroker`` runs the project's real ``KafkaController`` (unthreaded: the simulation takes its
events one at a time) and real ``KafkaZkClient`` gateway over a ``sim_zk.SimKazooClient``; its
replicas run the real pure replication core (``broker.replication.state``: ``LeaderState``, the
delayed-produce outcome, truncation by leader epoch, the ISR-conflict rule) over an in-memory log.
What is simulated is only what the broker's asyncio shell does with sockets: LeaderAndIsr,
UpdateMetadata, StopReplica, follower fetches, OffsetsForLeaderEpoch and produces are messages on
``SimNetwork``, delivered in an order the seed picks (or dropped by a partition).

A run is a sequence of steps. Each step the seeded RNG picks one enabled action: deliver a watch
callback, process one controller event, deliver one message, a follower fetch, a client produce
(acks=all), a leader's ISR check, advancing the clock - and, in the fault phase, a fault: crash or
restart a broker, pause or resume it, cut or heal the network between two brokers, disconnect a
broker from ZooKeeper (its session then expires), and ZooKeeper faults on the brokers' requests
(lost replies, connection loss, session expiry). Then every fault is healed and the run goes on
until it is quiet.

Invariants are checked after every step (``check_step``) and at the end (``check_final``); a
violation raises ``InvariantViolation`` naming the seed, which replays alone.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import KazooException
from kazoo.protocol.states import KazooState
from kazoo.retry import RetryFailedError
from sim_zk import SimKazooClient, SimZooKeeper

from broker.log.epoch_cache import LeaderEpochCache
from broker.replication.control import (
    ADOPT,
    APPLIED,
    IGNORE,
    accept_controller_epoch,
    decide_after_isr_write,
    fence_control_request,
    write_isr,
)
from broker.replication.fetch_session import FULL, FetchSessionCache, PartitionFetch, next_epoch
from broker.replication.state import (
    ACK,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER,
    TIMED_OUT,
    WAIT,
    LeaderState,
    delayed_produce_outcome,
    follower_high_watermark,
    truncation_offset,
)
from controller.controller import ControllerSettings, ControllerStateError, KafkaController
from proto import errors
from proto import minikafka_pb2 as pb
from zk.client import BrokerIdInUseError, ControllerMovedError, KafkaZkClient
from zk.data import (
    NO_LEADER,
    BrokerRegistration,
    Endpoint,
    LeaderIsrAndControllerEpoch,
    TopicPartitionId,
    TopicPartitionStateZNode,
    TopicZNode,
)

TOPIC = "sim"
ZOOKEEPER_FAILURES = (KazooException, RetryFailedError, ControllerMovedError, ControllerStateError)
FETCH_TIMEOUT_MS = 300
TP = tuple[str, int]
E = pb.ErrorCode


class InvariantViolation(AssertionError):
    pass


@dataclass
class SimConfig:
    brokers: int = 3
    partitions: int = 1
    replication_factor: int = 3
    min_isr: int = 2
    fault_steps: int = 200
    heal_steps: int = 2000
    heal_produce_steps: int = 100
    step_ms: int = 20
    session_timeout_ms: int = 1000
    lag_max_ms: int = 400
    ack_timeout_ms: int = 1500
    p_zk_fault: float = 0.03
    p_fault: float = 0.04
    p_admin: float = 0.01
    # The brokers' kazoo settings (the regression tests put back the old ones).
    ignore_expire: bool = False
    auto_renew_session: bool = False
    # Followers fetch through fetch sessions (KIP-227: broker.replication.fetch_session's real cache
    # and the sessions' liveness clocks in LeaderState), one per leader, instead of per partition.
    fetch_sessions: bool = False


# The cluster shapes a seed picks from: (brokers, partitions, replication factor, min.insync.replicas).
SHAPES = ((3, 1, 3, 2), (4, 2, 2, 1), (4, 3, 3, 2), (3, 2, 2, 2))


# How often a broker's ZooKeeper request meets a fault: calm, flaky, stormy.
ZK_WEATHER = (0.03, 0.1, 0.2)


def config_for(seed: int) -> SimConfig:
    brokers, partitions, rf, min_isr = SHAPES[seed % len(SHAPES)]
    blocks = len(SHAPES) * len(ZK_WEATHER)
    return SimConfig(brokers=brokers, partitions=partitions, replication_factor=rf, min_isr=min_isr,
                     p_zk_fault=ZK_WEATHER[seed // len(SHAPES) % len(ZK_WEATHER)],
                     fetch_sessions=seed // blocks % 2 == 1)  # every shape and weather, with and without


# ------------------------------------------------------------------ network


@dataclass
class Msg:
    src: int
    dst: int
    kind: str
    body: Any
    reply: Callable[[Any], None] | None = None
    sender_incarnation: int = 0


class SimNetwork:
    def __init__(self) -> None:
        self.inflight: list[Msg] = []
        self.cut: set[frozenset[int]] = set()

    def send(self, msg: Msg) -> None:
        self.inflight.append(msg)

    def blocked(self, a: int, b: int) -> bool:
        return frozenset((a, b)) in self.cut


class SimChannel:
    """The controller's channels to brokers, as messages (controller.channel's contract)."""

    def __init__(self, sim: Simulation, owner: int) -> None:
        self.sim = sim
        self.owner = owner
        self.brokers: set[int] = set()
        self.generation = 0

    def add_broker(self, reg: BrokerRegistration) -> None:
        self.brokers.add(reg.broker_id)

    def remove_broker(self, broker_id: int) -> None:
        self.brokers.discard(broker_id)

    def send(self, broker_id: int, method: str, request: Any, callback: Any = None) -> None:
        if broker_id not in self.brokers:
            return
        gen = self.generation
        owner = self.sim.brokers[self.owner]

        def reply(resp: Any) -> None:
            if callback is not None and gen == self.generation and owner.up:
                callback(broker_id, resp)

        self.sim.net.send(Msg(self.owner, broker_id, method, request, reply, owner.incarnation))

    def shutdown(self) -> None:
        self.brokers.clear()
        self.generation += 1


# ------------------------------------------------------------------ replicas


@dataclass
class DiskLog:
    """What survives a crash: the log (entries are (leader epoch, record id)) and the epoch cache."""

    entries: list[tuple[int, int]] = field(default_factory=list)
    epochs: LeaderEpochCache = field(default_factory=LeaderEpochCache)
    hw: int = 0

    @property
    def leo(self) -> int:
        return len(self.entries)

    def truncate(self, offset: int) -> None:
        if offset < self.leo:
            del self.entries[offset:]
            self.epochs.truncate_from_end(offset)
        self.hw = min(self.hw, self.leo)


@dataclass
class Replica:
    tp: TP
    log: DiskLog
    leader: int = NO_LEADER
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    zk_version: int = -1
    controller_epoch: int = 0
    state: LeaderState | None = None
    truncating: bool = True
    isr_write_inflight: bool = False
    # The fetcher keeps one request in flight per partition; a lost one times out.
    request_sent_ms: int | None = None


@dataclass
class FollowerSession:
    """A follower's fetch session with one leader (the fetcher's side of broker.replication.fetcher)."""

    session_id: int = 0
    epoch: int = 0  # 0: the next fetch is full
    sent: dict[TP, tuple[int, int]] = field(default_factory=dict)  # what the leader holds: (offset, epoch)
    request_sent_ms: int | None = None
    request_no: int = 0

    def reset(self) -> None:
        self.epoch = 0
        self.sent.clear()
        self.request_sent_ms = None


@dataclass
class PendingAck:
    broker: int
    incarnation: int
    tp: TP
    offset: int
    record: int
    required: int
    deadline_ms: int


@dataclass
class SimTimer:
    due_ms: int
    fn: Callable[[], None]
    broker: int
    incarnation: int
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


# ------------------------------------------------------------------ brokers


class SimBroker:
    def __init__(self, sim: Simulation, broker_id: int) -> None:
        self.sim = sim
        self.id = broker_id
        self.disks: dict[TP, DiskLog] = {}
        self.up = False
        self.paused = False
        self.incarnation = 0
        self.zkc: SimKazooClient | None = None
        self.gw: KafkaZkClient | None = None
        self.controller: KafkaController | None = None
        self.channel: SimChannel | None = None
        self.replicas: dict[TP, Replica] = {}
        self.controller_epoch = 0
        self.epoch = -1
        self.registered = False
        self.session_lost = False

    # -------------------------------------------------------- lifecycle

    def boot(self) -> None:
        sim = self.sim
        self.incarnation += 1
        self.replicas = {}
        self.controller_epoch = 0
        self.registered = False
        self.session_lost = False
        self.controller_started = False
        # A restarted broker has lost its fetch sessions (its followers get FETCH_SESSION_ID_NOT_FOUND).
        # Its own seed (not drawn from the run's RNG): runs without sessions keep their trajectories.
        self.fetch_sessions = FetchSessionCache(rng=random.Random(sim.seed * 1009 + self.id * 31 + self.incarnation))
        self.sessions_out: dict[int, FollowerSession] = {}
        self.zkc = sim.zk.client(name=f"broker-{self.id}", timeout=sim.cfg.session_timeout_ms / 1000.0,
                                 command_retry={"max_tries": 3, "delay": 0.1, "max_delay": 1.0,
                                                "ignore_expire": sim.cfg.ignore_expire},
                                 auto_renew_session=sim.cfg.auto_renew_session,
                                 fault_policy=sim.zk_fault_policy, retry_rng=random.Random(sim.rng.random()))
        self.zkc.start()
        self.gw = KafkaZkClient.over(self.zkc)
        self.channel = SimChannel(sim, self.id)
        self.controller = KafkaController(
            ControllerSettings(broker_id=self.id, auto_leader_rebalance_enable=False,
                               unclean_leader_election_enable=False, request_timeout_ms=5000),
            self.gw, channel=self.channel, schedule=self._schedule, threaded=False)
        self.zkc.add_listener(self._on_zk_state)
        self.up = True
        self.paused = False

    def _schedule(self, delay_s: float, fn: Callable[[], None]) -> SimTimer:
        timer = SimTimer(self.sim.now + int(delay_s * 1000), fn, self.id, self.incarnation)
        self.sim.timers.append(timer)
        return timer

    def _on_zk_state(self, state: str) -> None:
        """KafkaServer._on_zk_state: the controller hears of the loss; a new session re-registers."""
        if self.controller is not None:
            self.controller.on_zk_state(state)
        if state == KazooState.LOST:
            self.session_lost = True
            self.registered = False
        elif state == KazooState.CONNECTED and self.session_lost:
            self.session_lost = False
            self.registered = False

    def try_register(self) -> None:
        """Registration, as KafkaServer._register (the gateway's register_broker)."""
        assert self.gw is not None and self.controller is not None
        if self.registered:
            return
        reg = BrokerRegistration(self.id, "sim", self.id, 0, endpoints=(Endpoint("INTERNAL", "sim", self.id, "SSL"),),
                                 inter_broker_listener="INTERNAL")
        try:
            self.epoch = self.gw.register_broker(reg)
        except (KazooException, RetryFailedError, BrokerIdInUseError):
            return  # try again on a later step (an old incarnation's znode, a faulty ZooKeeper)
        self.registered = True
        if not self.controller_started:
            self.controller_started = True
            self.controller.start()
        else:
            self.controller.on_session_reestablished()

    def crash(self) -> None:
        """kill -9: memory gone, the log stays; the session expires after its timeout."""
        self.up = False
        self.paused = False
        if self.zkc is not None:
            self.sim.zk.disconnect(self.zkc)
        self.controller = None
        self.replicas = {}

    def restart(self) -> None:
        self.boot()

    # -------------------------------------------------------- controller requests

    def handle(self, msg: Msg) -> Any:
        if msg.kind == "LeaderAndIsr":
            return self.leader_and_isr(msg.body)
        if msg.kind == "UpdateMetadata":
            return pb.UpdateMetadataResponse(error_code=self._fence(msg.body))
        if msg.kind == "StopReplica":
            return self.stop_replica(msg.body)
        if msg.kind == "Fetch":
            return self.serve_fetch(*msg.body)
        if msg.kind == "FetchSession":
            return self.serve_fetch_session(*msg.body)
        if msg.kind == "OffsetsForLeaderEpoch":
            return self.serve_epoch_end(*msg.body)
        if msg.kind == "Produce":
            return self.produce(*msg.body)
        raise AssertionError(msg.kind)

    def _fence(self, req: Any) -> int:
        """KafkaApis._admit's epoch checks, then ReplicaManager's controller epoch: the
        broker's own functions (broker.replication.control)."""
        gw = self.gw
        assert gw is not None

        def zk_controller_epoch() -> int | None:
            current = gw.get_controller_epoch()
            return None if current is None else current[0]

        # A ZooKeeper failure in a lookup propagates, as in the broker (see _deliver).
        code = fence_control_request(req.broker_epoch, self.epoch, lambda: gw.own_broker_epoch(self.id),
                                     req.controller_epoch, self.controller_epoch, zk_controller_epoch)
        if code != E.NONE:
            return code
        if not accept_controller_epoch(req.controller_epoch, self.controller_epoch):
            return E.STALE_CONTROLLER_EPOCH
        self.controller_epoch = req.controller_epoch
        return E.NONE

    def leader_and_isr(self, req: pb.LeaderAndIsrRequest) -> pb.LeaderAndIsrResponse:
        code = self._fence(req)
        if code != E.NONE:
            return pb.LeaderAndIsrResponse(error_code=code)
        now = self.sim.now
        for st in req.partition_states:
            tp = (st.topic_name, st.partition_index)
            r = self.replicas.get(tp)
            if r is not None and st.leader_epoch < r.leader_epoch:
                continue
            if r is not None and st.leader_epoch == r.leader_epoch:
                if st.zk_version > r.zk_version:
                    self._set_isr(r, tuple(st.isr), st.zk_version)
                continue
            if self.id not in st.replicas:
                continue
            if r is None:
                r = Replica(tp, self.disks.setdefault(tp, DiskLog()))
                self.replicas[tp] = r
            r.leader_epoch, r.replicas, r.isr = st.leader_epoch, tuple(st.replicas), tuple(st.isr)
            r.zk_version, r.controller_epoch, r.leader = st.zk_version, st.controller_epoch, st.leader
            self.sim.note(f"b{self.id} LeaderAndIsr {tp} leader {st.leader} epoch {st.leader_epoch} isr {list(st.isr)} "
                          f"v{st.zk_version} (leo {r.log.leo}, hw {r.log.hw})")
            if st.leader == self.id:
                r.log.epochs.assign(r.leader_epoch, r.log.leo)  # S8.2
                r.state = LeaderState(local_id=self.id, leader_epoch=r.leader_epoch, replicas=r.replicas, isr=r.isr,
                                      zk_version=r.zk_version, high_watermark=r.log.hw, log_end_offset=r.log.leo,
                                      now_ms=now)
                if r.state.maybe_increment_high_watermark(now, self.sim.cfg.lag_max_ms):
                    r.log.hw = r.state.high_watermark
            else:
                r.state = None
                r.truncating = True
            self.fetch_sessions.mark_changed(tp)
        return pb.LeaderAndIsrResponse(error_code=E.NONE)

    def stop_replica(self, req: pb.StopReplicaRequest) -> pb.StopReplicaResponse:
        code = self._fence(req)
        resp = pb.StopReplicaResponse(error_code=code)
        if code != E.NONE:
            return resp
        for sp in req.partitions:
            tp = (sp.topic_name, sp.partition_index)
            r = self.replicas.get(tp)
            if r is not None:
                r.state = None
                self.fetch_sessions.mark_changed(tp)
                if sp.delete_partition:
                    del self.replicas[tp]
                    self.disks.pop(tp, None)
            resp.partition_errors.add(topic_name=tp[0], partition_index=tp[1], error_code=E.NONE)
        return resp

    def _set_isr(self, r: Replica, isr: tuple[int, ...], version: int) -> None:
        r.isr, r.zk_version = isr, version
        if r.state is not None and r.state.on_isr_committed(isr, version, self.sim.now, self.sim.cfg.lag_max_ms):
            r.log.hw = r.state.high_watermark
            self.fetch_sessions.mark_changed(r.tp)

    # -------------------------------------------------------- leader side

    def leader(self, tp: TP) -> Replica | None:
        r = self.replicas.get(tp)
        return r if r is not None and r.state is not None else None

    def produce(self, tp: TP, record: int) -> tuple[int, int] | None:
        """Append as the leader; (offset, required HW) or None when not the leader or ISR too small."""
        r = self.leader(tp)
        if r is None or r.state is None:
            return None
        if len(r.state.isr) < self.sim.cfg.min_isr:  # S5.2: nothing appended
            return None
        offset = r.log.leo
        r.log.entries.append((r.leader_epoch, record))
        r.log.epochs.assign(r.leader_epoch, offset)
        if r.state.on_local_append(r.log.leo, self.sim.now, self.sim.cfg.lag_max_ms):
            r.log.hw = r.state.high_watermark
        self.fetch_sessions.mark_changed(tp)
        return offset, offset + 1

    def serve_fetch(self, tp: TP, replica_id: int, leader_epoch: int, fetch_offset: int) -> Any:
        r = self.leader(tp)
        if r is None or r.state is None or leader_epoch != r.leader_epoch:
            return ("error", E.NOT_LEADER_OR_FOLLOWER)
        if replica_id not in r.replicas:
            return ("error", E.NOT_LEADER_OR_FOLLOWER)
        if not 0 <= fetch_offset <= r.log.leo:
            return ("out_of_range", r.log.leo)
        moved, expand = r.state.on_follower_fetch(replica_id, fetch_offset, self.sim.now, self.sim.cfg.lag_max_ms)
        if moved:
            r.log.hw = r.state.high_watermark
            self.fetch_sessions.mark_changed(tp)
        if expand is not None:
            self.persist_isr(r, expand.new_isr, expand.expected_zk_version)
        return ("data", list(r.log.entries[fetch_offset:fetch_offset + 8]), r.log.hw)

    def serve_fetch_session(self, replica_id: int, session_id: int, epoch: int,
                            named: list[tuple[TP, int, int]], forgotten: list[TP]) -> Any:
        """ReplicaManager's session fetch: the real FetchSessionCache, the named partitions recorded
        against the session's clock, the answer of the dirty ones (all of them on a full fetch)."""
        now = self.sim.now
        try:
            ctx = self.fetch_sessions.new_context(
                session_id=session_id, epoch=epoch, replica_id=replica_id,
                named=[(tp, PartitionFetch(offset, 0, 1 << 20, leader_epoch)) for tp, offset, leader_epoch in named],
                forgotten=forgotten, now_ms=now)
        except errors.KafkaError as e:
            return ("error", e.code)
        session = ctx.session
        assert session is not None  # the cache never fills here
        for tp in forgotten:
            r = self.leader(tp)
            if r is not None and r.state is not None:
                r.state.on_follower_session_forgot(replica_id, session.clock)
        for tp, offset, leader_epoch in named:
            r = self.leader(tp)
            if r is None or r.state is None or leader_epoch != r.leader_epoch or replica_id not in r.replicas \
                    or not 0 <= offset <= r.log.leo:
                continue  # answered with its error below; counts for nothing
            moved, expand = r.state.on_follower_fetch(replica_id, offset, now, self.sim.cfg.lag_max_ms, session.clock)
            if moved:
                r.log.hw = r.state.high_watermark
                self.fetch_sessions.mark_changed(tp)
            if expand is not None:
                self.persist_isr(r, expand.new_isr, expand.expected_zk_version)
        session.clock.last_fetch_ms = now
        candidates = list(session.partitions) if ctx.kind == FULL else session.take_dirty()
        if ctx.kind == FULL:
            session.take_dirty()
        answers = []
        for tp in candidates:
            cp = session.partitions.get(tp)
            if cp is None:
                continue
            r = self.leader(tp)
            hw = -1
            if r is None or r.state is None or cp.current_leader_epoch != r.leader_epoch \
                    or replica_id not in r.replicas:
                kind, payload = "error", E.NOT_LEADER_OR_FOLLOWER
            elif not 0 <= cp.fetch_offset <= r.log.leo:
                kind, payload = "out_of_range", r.log.leo
            else:
                hw = r.log.hw
                kind, payload = "data", (list(r.log.entries[cp.fetch_offset:cp.fetch_offset + 8]), hw)
            changed = cp.maybe_answer(error=kind != "data", has_records=kind == "data" and bool(payload[0]),
                                      high_watermark=hw, log_start_offset=0)
            if changed or ctx.kind == FULL:
                answers.append((tp, cp.fetch_offset, cp.current_leader_epoch, kind, payload))
        return ("ok", session.session_id, answers)

    def serve_epoch_end(self, tp: TP, leader_epoch: int, asked_epoch: int) -> Any:
        r = self.leader(tp)
        if r is None or leader_epoch != r.leader_epoch:
            return ("error", E.NOT_LEADER_OR_FOLLOWER)
        return ("ok", *r.log.epochs.end_offset_for(asked_epoch, r.log.leo))

    def maybe_shrink_isr(self) -> None:
        for r in list(self.replicas.values()):
            if r.state is None or r.isr_write_inflight:
                continue
            change = r.state.maybe_shrink_isr(self.sim.now, self.sim.cfg.lag_max_ms) \
                or r.state.maybe_expand_isr_of_sessions(self.sim.now, self.sim.cfg.lag_max_ms)
            if change is not None:
                self.persist_isr(r, change.new_isr, change.expected_zk_version)

    def persist_isr(self, r: Replica, new_isr: tuple[int, ...], expected: int) -> None:
        """ReplicaManager._persist_isr: the broker's write and decision (broker.replication.control)."""
        assert self.gw is not None and r.state is not None
        epoch = r.leader_epoch
        try:
            result = write_isr(self.gw, r.tp[0], r.tp[1], self.id, epoch, r.controller_epoch, new_isr, expected)
        except (KazooException, RetryFailedError):
            r.state.on_isr_write_failed()
            return
        decision = decide_after_isr_write(self.id, epoch, r.state is not None, r.leader_epoch, new_isr, result)
        if decision.kind == IGNORE:
            return
        if decision.kind != APPLIED:
            r.state.on_isr_write_failed()
            if decision.kind == ADOPT:
                self._set_isr(r, decision.isr, decision.zk_version)
            return
        self._set_isr(r, new_isr, decision.zk_version)
        try:
            self.gw.create_isr_change_notification([TopicPartitionId(*r.tp)])
        except (KazooException, RetryFailedError):
            pass

    # -------------------------------------------------------- follower side

    def follower_step(self) -> None:
        now = self.sim.now
        sessions = self.sim.cfg.fetch_sessions
        ready: dict[int, list[Replica]] = {}
        for r in list(self.replicas.values()):
            if r.state is not None or r.leader in (NO_LEADER, self.id):
                continue
            if sessions and not r.truncating:
                ready.setdefault(r.leader, []).append(r)
                continue
            if r.request_sent_ms is not None and now - r.request_sent_ms < FETCH_TIMEOUT_MS:
                continue
            r.request_sent_ms = now
            if r.truncating:
                self.sim.net.send(Msg(self.id, r.leader, "OffsetsForLeaderEpoch",
                                      (r.tp, r.leader_epoch, r.log.epochs.latest_epoch),
                                      self._on_epoch_end(r, r.leader_epoch), self.incarnation))
            else:
                self.sim.net.send(Msg(self.id, r.leader, "Fetch", (r.tp, self.id, r.leader_epoch, r.log.leo),
                                      self._on_fetch(r, r.leader_epoch, r.log.leo), self.incarnation))
        if sessions:
            for leader in sorted(set(ready) | set(self.sessions_out)):
                self._session_fetch(leader, ready.get(leader, []))

    def _session_fetch(self, leader: int, ready: list[Replica]) -> None:
        """broker.replication.fetcher's session loop: name what changed since the leader last heard, forget what
        stopped fetching; a lost answer (timeout) or a refused fetch starts over with a full one."""
        now = self.sim.now
        fs = self.sessions_out.setdefault(leader, FollowerSession())
        if fs.request_sent_ms is not None:
            if now - fs.request_sent_ms < FETCH_TIMEOUT_MS:
                return
            fs.reset()
        want = {r.tp: (r.log.leo, r.leader_epoch) for r in ready}
        full = fs.epoch == 0
        if full:
            fs.sent.clear()
        named = [(tp, key[0], key[1]) for tp, key in sorted(want.items()) if fs.sent.get(tp) != key]
        forgotten = sorted(tp for tp in fs.sent if tp not in want)
        if not named and not forgotten and (full or not fs.sent):
            return  # nothing in the session to fetch
        for tp, offset, leader_epoch in named:
            fs.sent[tp] = (offset, leader_epoch)
        for tp in forgotten:
            del fs.sent[tp]
        fs.request_sent_ms = now
        fs.request_no += 1
        self.sim.net.send(Msg(self.id, leader, "FetchSession", (self.id, fs.session_id, fs.epoch, named, forgotten),
                              self._on_session_fetch(leader, fs.request_no, fs.epoch), self.incarnation))

    def _on_session_fetch(self, leader: int, request_no: int, epoch_sent: int) -> Callable[[Any], None]:
        def handle(resp: Any) -> None:
            fs = self.sessions_out.get(leader)
            if fs is None or fs.request_no != request_no or fs.request_sent_ms is None:
                return  # an answer to a request given up on
            fs.request_sent_ms = None
            if resp[0] == "error":  # FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH
                fs.reset()
                return
            _ok, session_id, answers = resp
            fs.session_id = session_id
            fs.epoch = next_epoch(epoch_sent) if session_id else 0
            for tp, fetch_offset, leader_epoch, kind, payload in answers:
                r = self.replicas.get(tp)
                if r is None or r.leader != leader or not self._valid(r, leader_epoch) or r.truncating \
                        or r.log.leo != fetch_offset:
                    continue  # fetched for a state it is no longer in: it is named again when it changes
                if kind == "out_of_range":
                    if r.log.leo > payload:
                        r.log.truncate(payload)
                    continue
                if kind != "data":
                    # The fetcher backs the partition off (forgotten) and names it again later: the
                    # leader may not know yet that it leads (a restarted one, same leader epoch).
                    fs.sent.pop(tp, None)
                    continue
                entries, leader_hw = payload
                for e, rec in entries:
                    offset = r.log.leo
                    r.log.entries.append((e, rec))
                    r.log.epochs.assign(e, offset)
                r.log.hw = follower_high_watermark(r.log.leo, leader_hw)
        return handle

    def _valid(self, r: Replica, epoch: int) -> bool:
        return self.replicas.get(r.tp) is r and r.leader_epoch == epoch and r.state is None

    def _on_epoch_end(self, r: Replica, epoch: int) -> Callable[[Any], None]:
        def handle(resp: Any) -> None:
            r.request_sent_ms = None
            if not self._valid(r, epoch) or resp[0] != "ok" or not r.truncating:
                return
            decision = truncation_offset(r.log.epochs, r.log.leo, resp[1], resp[2])
            r.log.truncate(decision.offset)
            if not decision.completed:
                r.log.epochs.truncate_from_end(decision.offset)
            else:
                r.truncating = False
        return handle

    def _on_fetch(self, r: Replica, epoch: int, fetch_offset: int) -> Callable[[Any], None]:
        def handle(resp: Any) -> None:
            r.request_sent_ms = None
            if not self._valid(r, epoch) or r.log.leo != fetch_offset or r.truncating:
                return  # a stale answer (the fetcher drops a response for an offset it no longer fetches)
            if resp[0] == "out_of_range":
                if r.log.leo > resp[1]:
                    r.log.truncate(resp[1])
                return
            if resp[0] != "data":
                return
            entries, leader_hw = resp[1], resp[2]
            for e, rec in entries:
                offset = r.log.leo
                r.log.entries.append((e, rec))
                r.log.epochs.assign(e, offset)
            r.log.hw = follower_high_watermark(r.log.leo, leader_hw)
        return handle


# ------------------------------------------------------------------ the simulation


class Simulation:
    def __init__(self, seed: int, cfg: SimConfig | None = None) -> None:
        self.seed = seed
        self.cfg = cfg or SimConfig()
        self.rng = random.Random(seed)
        self.zk = SimZooKeeper(auto_deliver=False)
        self.net = SimNetwork()
        self.now = 1_000_000
        self.step_no = 0
        self.faults_on = True
        self.producing = True
        self.brokers = {b: SimBroker(self, b) for b in range(1, self.cfg.brokers + 1)}
        self.pending_acks: list[PendingAck] = []
        self.timers: list[SimTimer] = []
        self.state_epochs: dict[int, int] = {}
        self.state_mzxid: dict[int, int] = {}
        self.checked_zxid = -1
        self.acked: dict[TP, dict[int, int]] = {}
        self.next_record = 1
        self.leader_hw: dict[int, tuple[LeaderState, int]] = {}
        self.trace: list[str] = []

    # -------------------------------------------------------- faults

    def zk_fault_policy(self, op: str, _path: str) -> str | None:
        if not self.faults_on or op in ("get", "exists", "get_children"):
            return None
        x = self.rng.random()
        p = self.cfg.p_zk_fault
        if x < p * 0.5:
            return "after"  # a lost reply: the write happened
        if x < p * 0.8:
            return "before"
        if x < p * 0.85:
            return "expire"
        return None

    # -------------------------------------------------------- setup

    def setup(self) -> None:
        self.faults_on = False
        admin = self.zk.client(name="admin", command_retry={"max_tries": 3, "delay": 0.1, "ignore_expire": False},
                               fault_policy=self.zk_fault_policy, auto_renew_session=True)
        admin.start()
        gw = self.admin = KafkaZkClient.over(admin)
        gw.ensure_persistent_paths()
        ids = sorted(self.brokers)
        n = len(ids)
        assignment = {p: [ids[(p + j) % n] for j in range(self.cfg.replication_factor)]
                      for p in range(self.cfg.partitions)}
        gw.create_topic(TOPIC, assignment, {"min.insync.replicas": str(self.cfg.min_isr)})
        self.zk.deliver_watches()
        for b in self.brokers.values():
            b.boot()
        self.faults_on = True

    # -------------------------------------------------------- one step

    def actions(self) -> list[tuple[float, Callable[[], None]]]:
        acts: list[tuple[float, Callable[[], None]]] = []
        live = [b for b in self.brokers.values() if b.up and not b.paused]
        if self.zk.pending:
            acts.append((3.0, lambda: self.zk.deliver_watches(1)))
        for b in live:
            if not b.registered:
                acts.append((1.0, b.try_register))
            if b.controller is not None and b.controller.pending:
                acts.append((3.0, lambda b=b: self._process_event(b)))
            acts.append((1.0, b.follower_step))
            acts.append((0.3, b.maybe_shrink_isr))
            if b.zkc is not None and b.zkc.state == KazooState.LOST:
                acts.append((1.0, lambda b=b: self._renew_session(b)))
        if self.net.inflight:
            acts.append((4.0, self._deliver))
        if self.producing:
            acts.append((1.0, self._produce))
        acts.append((1.5, self._tick))
        if self.faults_on:
            acts.append((self.cfg.p_fault * 10, self._fault))
            acts.append((self.cfg.p_admin * 10, self._admin_request))
        return acts

    def step(self) -> None:
        self.step_no += 1
        acts = self.actions()
        total = sum(w for w, _ in acts)
        x = self.rng.random() * total
        for w, act in acts:
            x -= w
            if x <= 0:
                act()
                break
        self._settle_acks()
        self.check_step()

    def _process_event(self, b: SimBroker) -> None:
        assert b.controller is not None
        ev = b.controller.pending.pop(0)
        self.trace.append(f"{self.step_no} b{b.id} {type(ev).__name__}")
        b.controller.last_failure = None
        b.controller.process(ev)
        failure = b.controller.last_failure
        if failure is not None and not isinstance(failure, ZOOKEEPER_FAILURES):
            # Only ZooKeeper may make an event fail; anything else is a controller bug (item 4).
            self.violation(f"controller {b.id}: {type(ev).__name__} failed with {type(failure).__name__}: {failure}")

    def _renew_session(self, b: SimBroker) -> None:
        """kazoo opens a new session by itself after an expiry; the simulated client waits for this."""
        assert b.zkc is not None
        b.zkc.restart_session()

    def _deliver(self) -> None:
        i = self.rng.randrange(len(self.net.inflight))
        msg = self.net.inflight[i]
        dst = self.brokers.get(msg.dst)
        src = self.brokers.get(msg.src)
        if dst is None or not dst.up or (src is not None and (not src.up or src.incarnation != msg.sender_incarnation)):
            self.net.inflight.pop(i)
            return
        if dst.paused:
            return  # stays in flight until it resumes
        if self.net.blocked(msg.src, msg.dst):
            self.net.inflight.pop(i)
            if msg.kind in ("LeaderAndIsr", "UpdateMetadata", "StopReplica"):
                self.net.inflight.append(msg)  # the controller's sender retries until the broker is removed
            return
        self.net.inflight.pop(i)
        try:
            resp = dst.handle(msg)
        except (KazooException, RetryFailedError):
            # The broker's fence could not read ZooKeeper: its servicer fails the call (nothing
            # answered) and the controller's sender retries it, as over a broken connection.
            self.net.inflight.append(msg)
            return
        if msg.reply is not None and src is not None and src.up:
            msg.reply(resp)

    def _produce(self) -> None:
        tp = (TOPIC, self.rng.randrange(self.cfg.partitions))
        leaders = [b for b in self.brokers.values() if b.up and not b.paused and b.leader(tp) is not None]
        if not leaders:
            return
        b = self.rng.choice(leaders)
        record = self.next_record
        self.next_record += 1
        placed = b.produce(tp, record)
        if placed is not None:
            offset, required = placed
            self.pending_acks.append(PendingAck(b.id, b.incarnation, tp, offset, record, required,
                                                self.now + self.cfg.ack_timeout_ms))

    def _tick(self) -> None:
        self.now += self.cfg.step_ms
        self.zk.advance(self.cfg.step_ms)
        due = [t for t in self.timers if t.due_ms <= self.now]
        self.timers = [t for t in self.timers if t.due_ms > self.now and not t.cancelled]
        for t in due:
            b = self.brokers[t.broker]
            if not t.cancelled and b.up and b.incarnation == t.incarnation:
                t.fn()  # a paused process's timer thread is paused too, but firing late is the same

    def _fault(self) -> None:
        brokers = list(self.brokers.values())
        b = self.rng.choice(brokers)
        kind = self.rng.choice(["crash", "restart", "pause", "resume", "cut", "heal", "zk_disconnect",
                                "zk_reconnect", "expire"])
        applied = True
        if kind == "crash" and b.up:
            b.crash()
        elif kind == "restart" and not b.up:
            b.restart()
        elif kind == "pause" and b.up and not b.paused:
            b.paused = True
            if b.zkc is not None:
                self.zk.disconnect(b.zkc)  # a paused process stops heartbeating
        elif kind == "resume" and b.paused:
            b.paused = False
            if b.zkc is not None and b.zkc.state != KazooState.LOST:
                self.zk.reconnect(b.zkc)
        elif kind == "cut":
            other = self.rng.choice(brokers)
            applied = other is not b
            if applied:
                self.net.cut.add(frozenset((b.id, other.id)))
                kind = f"cut b{other.id} from"
        elif kind == "heal" and self.net.cut:
            self.net.cut.clear()
        elif kind == "zk_disconnect" and b.up and b.zkc is not None:
            self.zk.disconnect(b.zkc)
        elif kind == "zk_reconnect" and b.up and not b.paused and b.zkc is not None \
                and b.zkc.state != KazooState.LOST:
            self.zk.reconnect(b.zkc)
        elif kind == "expire" and b.up and b.zkc is not None and b.zkc.session_id is not None:
            self.zk.expire_session(b.zkc.session_id)
        else:
            applied = False
        if applied:
            self.note(f"fault {kind} b{b.id}")

    def _admin_request(self) -> None:
        """What kafka-reassign-partitions and kafka-leader-election write (S10.3, S10.4), and
        AlterPartitionReassignments sent to the controller (KIP-455: a target or a cancel)."""
        p = self.rng.randrange(self.cfg.partitions)
        tp = TopicPartitionId(TOPIC, p)
        try:
            kind = self.rng.random()
            if kind < 0.3:
                target = self.rng.sample(sorted(self.brokers), self.cfg.replication_factor)
                if self.admin.create_partition_reassignment({tp: target}):
                    self.note(f"admin: reassign {tp} to {target}")
            elif kind < 0.6:
                self._api_reassignment(tp)
            elif self.admin.create_preferred_replica_election([tp]):
                self.note(f"admin: preferred election for {tp}")
        except (KazooException, RetryFailedError):
            pass  # the tool reports the error; the user tries again

    def _api_reassignment(self, tp: TopicPartitionId) -> None:
        """AlterPartitionReassignments to the broker the admin believes is the controller: a new
        target (replacing a running one) or, half the time, a cancel (null target)."""
        target = None if self.rng.random() < 0.5 else self.rng.sample(sorted(self.brokers), self.cfg.replication_factor)
        acting = [b for b in self.brokers.values() if b.up and b.controller is not None and b.controller.active]
        if not acting:
            return
        b = acting[self.rng.randrange(len(acting))]
        assert b.controller is not None
        reply = b.controller.submit_partition_reassignments({(tp.topic, tp.partition): target})
        what = "cancel reassignment of" if target is None else f"reassign (API) to {target}"
        self.note(f"admin: {what} {tp} via b{b.id}")

        def answered(f: Any) -> None:
            code, message = f.result()[(tp.topic, tp.partition)]
            self.note(f"admin: {what} {tp}: {E.Name(code)} {message}".rstrip())

        reply.add_done_callback(answered)

    def heal(self) -> None:
        self.faults_on = False
        self.net.cut.clear()
        for b in self.brokers.values():
            if not b.up:
                b.restart()
            b.paused = False
            if b.zkc is not None and b.zkc.state != KazooState.LOST:
                self.zk.reconnect(b.zkc)

    # -------------------------------------------------------- acknowledgements

    def _settle_acks(self) -> None:
        if not self.pending_acks:
            return
        keep = []
        for a in self.pending_acks:
            b = self.brokers[a.broker]
            if not b.up or b.incarnation != a.incarnation:
                continue  # the connection died with the broker: no answer
            if b.paused:
                keep.append(a)
                continue
            r = b.replicas.get(a.tp)
            state = r.state if r is not None else None
            hw = r.log.hw if r is not None else 0
            outcome = delayed_produce_outcome(state, hw, a.required, self.cfg.min_isr, self.now >= a.deadline_ms)
            if outcome == WAIT:
                keep.append(a)
                continue
            if outcome == ACK:
                if state is not None and len(state.isr) < self.cfg.min_isr:
                    self.violation(f"acks=all acknowledged {a.tp} offset {a.offset} with ISR {state.isr}")
                if r is None or a.offset >= r.log.leo or r.log.entries[a.offset][1] != a.record:
                    self.violation(f"acknowledged {a.record} at {a.offset} is not in the log it was acked from")
                self.acked.setdefault(a.tp, {})[a.offset] = a.record
                self.note(f"ack record {a.record} at {a.tp} offset {a.offset} from b{a.broker} isr {state.isr if state else None}")
            elif outcome not in (NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER, TIMED_OUT):
                self.violation(f"unexpected outcome {outcome}")
        self.pending_acks = keep

    # -------------------------------------------------------- invariants

    def note(self, what: str) -> None:
        self.trace.append(f"{self.step_no} {what}")

    def violation(self, what: str) -> None:
        tail = "\n  ".join(self.trace[-60:])
        raise InvariantViolation(f"seed {self.seed}, step {self.step_no}: {what}\n  last steps:\n  {tail}")

    def check_step(self) -> None:
        # 1. At most one acting controller per controller epoch.
        epochs: dict[int, int] = {}
        for b in self.brokers.values():
            c = b.controller
            if b.up and c is not None and c.active:
                if c.ctx.epoch in epochs:
                    self.violation(f"brokers {epochs[c.ctx.epoch]} and {b.id} both act as controller at epoch "
                                   f"{c.ctx.epoch}")
                epochs[c.ctx.epoch] = b.id
        # 2. No write from a deposed controller (item 5): the controller epoch stamped in a partition's
        #    state znode never goes down.
        for p in range(self.cfg.partitions if self.zk.zxid != self.checked_zxid else 0):
            node = self.zk.node(f"/brokers/topics/{TOPIC}/partitions/{p}/state")
            if node is None or node[0] is None or self.state_mzxid.get(p) == node[1].mzxid:
                continue
            self.state_mzxid[p] = node[1].mzxid
            st = TopicPartitionStateZNode.decode(TOPIC, p, node[0], node[1].version)
            last_epoch = self.state_epochs.get(p, 0)
            if st.controller_epoch < last_epoch:
                self.violation(f"partition {p}: state znode written by controller epoch {st.controller_epoch} "
                               f"after epoch {last_epoch} (a zombie controller)")
            self.state_epochs[p] = st.controller_epoch
        self.checked_zxid = self.zk.zxid
        # 3. A leader's HW never moves backwards.
        for b in self.brokers.values():
            for r in b.replicas.values():
                if r.state is None:
                    continue
                # Keyed by the LeaderState object itself (kept alive here, so its id is never reused).
                held, last = self.leader_hw.get(id(r.state), (r.state, -1))
                if held is r.state and r.state.high_watermark < last:
                    self.violation(f"leader {b.id} of {r.tp}: HW went back from {last} to {r.state.high_watermark}")
                self.leader_hw[id(r.state)] = (r.state, r.state.high_watermark)

    def quiet(self) -> bool:
        if self.zk.pending or any(b.controller is not None and b.controller.pending for b in self.brokers.values()):
            return False
        if any(m.kind in ("LeaderAndIsr", "UpdateMetadata", "StopReplica") for m in self.net.inflight):
            return False
        return all(self._settled(p) for p in range(self.cfg.partitions)) and not self._hanging_reassignments()

    def _hanging_reassignments(self) -> list[str]:
        """Reassignments whose target replicas are all in sync but which have not completed (a
        controller finishes them: it may still have to be elected again, see ELECTION_RETRY_S)."""
        node = self.zk.node(TopicZNode.path(TOPIC))
        assert node is not None and node[0] is not None
        out = []
        for p, a in sorted(TopicZNode.decode_full(TOPIC, node[0]).items()):
            state = self.zk_state((TOPIC, p))
            isr = set(state.leader_and_isr.isr) if state is not None else set()
            if a.being_reassigned and set(a.target) <= isr:
                out.append(f"{(TOPIC, p)}: the reassignment to {list(a.target)} never completed (ISR {sorted(isr)})")
        return out

    def _settled(self, p: int) -> bool:
        tp = (TOPIC, p)
        state = self.zk_state(tp)
        if state is None or state.leader_and_isr.leader == NO_LEADER:
            return False
        leader = self.brokers[state.leader_and_isr.leader]
        r = leader.leader(tp)
        if not leader.up or r is None or r.state is None:
            return False
        return set(r.state.isr) == set(state.leader_and_isr.isr) and r.state.pending_isr is None \
            and set(r.state.isr) == set(r.replicas) and r.state.high_watermark == r.log.leo

    def zk_state(self, tp: TP) -> LeaderIsrAndControllerEpoch | None:
        node = self.zk.node(f"/brokers/topics/{tp[0]}/partitions/{tp[1]}/state")
        if node is None or node[0] is None:
            return None
        return TopicPartitionStateZNode.decode(tp[0], tp[1], node[0], node[1].version)

    def check_final(self) -> None:
        self._check_reassignments()
        for p in range(self.cfg.partitions):
            tp = (TOPIC, p)
            state = self.zk_state(tp)
            if state is None or state.leader_and_isr.leader == NO_LEADER:
                self.violation(f"{tp} has no leader after the faults healed")
            leader = self.brokers[state.leader_and_isr.leader]
            r = leader.leader(tp)
            if r is None or r.state is None:
                self.violation(f"{tp}: ZooKeeper names leader {leader.id}, which does not lead")
            assert r is not None and r.state is not None
            if set(r.state.isr) != set(state.leader_and_isr.isr):
                self.violation(f"{tp}: leader ISR {r.state.isr} != ZooKeeper ISR {state.leader_and_isr.isr}")
            for offset, record in sorted(self.acked.get(tp, {}).items()):
                if offset >= r.log.leo or r.log.entries[offset][1] != record:
                    self.violation(f"{tp}: acknowledged record {record} at offset {offset} is lost "
                                   f"(leader {leader.id} has {r.log.entries[offset:offset + 1]})")

    def _check_reassignments(self) -> None:
        """The topic znode's KIP-455 fields are well formed, the ISR is within the replica set, and
        no reassignment is left hanging once its target replicas are all in sync."""
        node = self.zk.node(TopicZNode.path(TOPIC))
        assert node is not None and node[0] is not None
        for p, a in sorted(TopicZNode.decode_full(TOPIC, node[0]).items()):
            tp = (TOPIC, p)
            if not (set(a.adding) | set(a.removing)) <= set(a.replicas) or set(a.adding) & set(a.removing) \
                    or not a.target or len(set(a.replicas)) != len(a.replicas):
                self.violation(f"{tp}: malformed assignment {a}")
            state = self.zk_state(tp)
            isr = set(state.leader_and_isr.isr) if state is not None else set()
            if not isr <= set(a.replicas):
                self.violation(f"{tp}: ISR {sorted(isr)} outside the replicas {list(a.replicas)}")
        for what in self._hanging_reassignments():
            self.violation(what)

    # -------------------------------------------------------- a run

    def run(self) -> None:
        logging.disable(logging.CRITICAL)
        try:
            self.setup()
            for _ in range(self.cfg.fault_steps):
                self.step()
            self.heal()
            for i in range(self.cfg.heal_steps):
                self.producing = i < self.cfg.heal_produce_steps  # then drain, so the ISR can settle
                self.step()
                if self.step_no % 25 == 0 and self.quiet():
                    break
            else:
                if not self.quiet():
                    self.violation("the cluster did not settle within the bounded heal phase")
            self.check_final()
        finally:
            logging.disable(logging.NOTSET)


def run_seed(seed: int, cfg: SimConfig | None = None) -> Simulation:
    sim = Simulation(seed, cfg or config_for(seed))
    sim.run()
    return sim
