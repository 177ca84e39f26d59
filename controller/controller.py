"""The controller (SPEC S7, S9; Kafka's KafkaController with its ControllerEventManager).

Theory of operation
-------------------
Every broker runs one ``KafkaController``; the one whose ephemeral
``/controller`` znode wins is *active*. All work happens on one event thread
that takes events from one queue, in order: kazoo watchers, timers and RPC
handlers only ``put`` events. Decisions (who leads, what the ISR becomes, which
state transitions are legal) come from the pure modules ``election``,
``state_machine`` and ``assignment``; this module reads and writes ZooKeeper
(partition state writes conditional on zk_version) and hands requests to the
channel manager.

Fencing: the controller epoch is incremented with a conditional write on
failover, stamped into every request and every state znode it writes; a write
that finds a state znode from a newer controller epoch means this controller
was deposed, and it resigns.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kazoo.protocol.states import KazooState

from controller.channel import ControllerChannelManager, RequestBatch
from controller.context import ControllerContext, TopicPartition
from controller.election import imbalanced_partitions
from controller.state_machine import (
    ElectionStrategy,
    PartitionState,
    ReplicaState,
    check_partition_transition,
    check_replica_transition,
    elect_leader,
    initial_leader_and_isr,
    offline_leader_and_isr,
    remove_replica_from_isr,
)
from controller.zk_client import ControllerMovedError, KafkaZkClient
from proto import minikafka_pb2 as pb
from proto.transport import PLAINTEXT_SECURITY, ChannelSecurity
from proto.zk_data import (
    NO_LEADER,
    BrokerIdsZNode,
    ControllerZNode,
    DeleteTopicsZNode,
    IsrChangeNotificationZNode,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    PreferredReplicaElectionZNode,
    ReassignPartitionsZNode,
    TopicPartitionId,
    TopicsZNode,
)

log = logging.getLogger(__name__)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class ControllerSettings:
    broker_id: int
    delete_topic_enable: bool = True
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_per_broker_percentage: int = 10
    leader_imbalance_check_interval_seconds: int = 300
    request_timeout_ms: int = 30000
    # Where and how the controller reaches brokers (SPEC S12.1).
    control_plane_listener: str = ""
    channel_security: ChannelSecurity = PLAINTEXT_SECURITY


# ------------------------------------------------------------------ events


@dataclass
class Event:
    pass


@dataclass
class Startup(Event):
    pass


@dataclass
class Reelect(Event):
    pass


@dataclass
class ControllerChange(Event):
    pass


@dataclass
class BrokerChange(Event):
    pass


@dataclass
class TopicChange(Event):
    pass


@dataclass
class TopicDeletion(Event):
    pass


@dataclass
class PreferredReplicaElection(Event):
    pass


@dataclass
class IsrChangeNotification(Event):
    pass


@dataclass
class AutoRebalance(Event):
    pass


@dataclass
class PartitionReassignment(Event):
    pass


@dataclass
class StopReplicaResponseReceived(Event):
    broker_id: int
    response: pb.StopReplicaResponse


@dataclass
class ControlledShutdown(Event):
    broker_id: int
    broker_epoch: int
    reply: concurrent.futures.Future[pb.ControlledShutdownResponse] = field(
        default_factory=concurrent.futures.Future)


@dataclass
class SessionExpired(Event):
    pass


@dataclass
class Shutdown(Event):
    pass


class KafkaController:
    def __init__(self, settings: ControllerSettings, zk: KafkaZkClient) -> None:
        self.settings = settings
        self.broker_id = settings.broker_id
        self.zk = zk
        self.events: queue.Queue[Event] = queue.Queue()
        self.ctx = ControllerContext()
        self.active = False
        self.active_controller_id = -1
        self.channel = ControllerChannelManager(settings.request_timeout_ms, settings.channel_security,
                                                settings.control_plane_listener)
        self._generation = 0
        self._thread = threading.Thread(target=self._run, name="controller-event-thread", daemon=True)
        self._timer: threading.Timer | None = None
        self._stopped = threading.Event()
        # Topic deletion progress: topic -> replicas (broker ids) not yet confirmed deleted.
        self._deleting: dict[str, set[tuple[TopicPartition, int]]] = {}
        self.elections = 0
        self.unclean_elections = 0

    # ------------------------------------------------------------ lifecycle (any thread)

    def start(self) -> None:
        self._thread.start()
        self.put(Startup())

    def shutdown(self, timeout_s: float = 10.0) -> None:
        self.put(Shutdown())
        self._thread.join(timeout_s)

    def put(self, event: Event) -> None:
        self.events.put(event)

    def on_zk_state(self, state: KazooState) -> None:
        """kazoo connection listener: runs on kazoo's thread, so it only enqueues."""
        if state == KazooState.LOST:
            self.put(SessionExpired())

    def on_session_reestablished(self) -> None:
        self.put(Reelect())

    def submit_controlled_shutdown(self, broker_id: int, broker_epoch: int) \
            -> concurrent.futures.Future[pb.ControlledShutdownResponse]:
        ev = ControlledShutdown(broker_id, broker_epoch)
        if not self.active:
            ev.reply.set_result(pb.ControlledShutdownResponse(error_code=pb.ErrorCode.NOT_CONTROLLER))
            return ev.reply
        self.put(ev)
        return ev.reply

    # ------------------------------------------------------------ the event thread

    def _run(self) -> None:
        handlers: dict[type[Event], Callable[[Any], None]] = {
            Startup: self._on_startup,
            Reelect: self._on_reelect,
            ControllerChange: self._on_controller_change,
            BrokerChange: self._on_broker_change,
            TopicChange: self._on_topic_change,
            TopicDeletion: self._on_topic_deletion,
            PreferredReplicaElection: self._on_preferred_replica_election,
            IsrChangeNotification: self._on_isr_change_notification,
            AutoRebalance: self._on_auto_rebalance,
            PartitionReassignment: self._on_partition_reassignment,
            StopReplicaResponseReceived: self._on_stop_replica_response,
            ControlledShutdown: self._on_controlled_shutdown,
            SessionExpired: self._on_session_expired,
        }
        while True:
            ev = self.events.get()
            if isinstance(ev, Shutdown):
                self._resign(delete_znode=True)
                self._stopped.set()
                return
            if not self.active and type(ev) not in (Startup, Reelect, ControllerChange, SessionExpired,
                                                    ControlledShutdown):
                continue
            try:
                handlers[type(ev)](ev)
            except ControllerMovedError as e:
                log.warning("controller %d: %s; resigning", self.broker_id, e)
                self._resign(delete_znode=False)
            except Exception:
                log.exception("controller %d: error processing %s", self.broker_id, type(ev).__name__)
                if isinstance(ev, ControlledShutdown) and not ev.reply.done():
                    ev.reply.set_result(pb.ControlledShutdownResponse(error_code=pb.ErrorCode.UNKNOWN_SERVER_ERROR))

    # ------------------------------------------------------------ election (S9.1)

    def _on_startup(self, _ev: Startup) -> None:
        def watch_controller(_data: bytes | None, _stat: Any, *_args: Any) -> None:
            self.put(ControllerChange())

        # kazoo's DataWatch re-arms itself (watches are one-shot in ZooKeeper, S9.1).
        self.zk.zk.DataWatch(ControllerZNode.PATH, watch_controller)
        self._elect()

    def _on_reelect(self, _ev: Reelect) -> None:
        if self.active:
            self._resign(delete_znode=True)
        self._elect()

    def _on_controller_change(self, _ev: ControllerChange) -> None:
        current = self.zk.get_controller_id()
        if current is None:
            if self.active:
                self._resign(delete_znode=False)
            self._elect()
            return
        self.active_controller_id = current
        if self.active and current != self.broker_id:
            log.info("controller %d: /controller now names %d; resigning", self.broker_id, current)
            self._resign(delete_znode=False)

    def _on_session_expired(self, _ev: SessionExpired) -> None:
        if self.active:
            log.warning("controller %d: ZooKeeper session expired; resigning", self.broker_id)
            self._resign(delete_znode=False)

    def _elect(self) -> None:
        if self.active:
            return
        if self.zk.try_create_controller(self.broker_id, _now_ms()):
            self.active_controller_id = self.broker_id
            try:
                self._on_controller_failover()
            except ControllerMovedError as e:
                log.warning("controller %d lost the election while starting: %s", self.broker_id, e)
                self._resign(delete_znode=True)
        else:
            current = self.zk.get_controller_id()
            if current is None:
                self.put(Reelect())  # it vanished between our create and our read
            else:
                self.active_controller_id = current

    def _resign(self, delete_znode: bool) -> None:
        was_active = self.active
        self.active = False
        self._generation += 1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.channel.shutdown()
        self.ctx = ControllerContext()
        self._deleting.clear()
        if delete_znode and was_active:
            try:
                self.zk.delete_controller_if_owner()
            except Exception as e:
                log.debug("could not delete /controller: %s", e)
        if was_active:
            log.info("controller %d resigned", self.broker_id)

    # ------------------------------------------------------------ failover (S9.2)

    def _on_controller_failover(self) -> None:
        epoch, version = self.zk.increment_controller_epoch()
        self.ctx = ControllerContext(epoch=epoch, epoch_zk_version=version)
        self.active = True
        log.info("broker %d is now the controller, controller epoch %d", self.broker_id, epoch,
                 extra={"event": "controller_elected", "topic": "", "partition": -1})
        gen = self._generation
        self._watch_children(BrokerIdsZNode.PATH, BrokerChange, gen)
        self._watch_children(TopicsZNode.PATH, TopicChange, gen)
        self._watch_children(DeleteTopicsZNode.PATH, TopicDeletion, gen)
        self._watch_children(IsrChangeNotificationZNode.PATH, IsrChangeNotification, gen)
        self._watch_data(PreferredReplicaElectionZNode.PATH, PreferredReplicaElection, gen)
        self._watch_data(ReassignPartitionsZNode.PATH, PartitionReassignment, gen)

        ctx = self.ctx
        for reg in self.zk.get_all_brokers().values():
            ctx.live_brokers[reg.broker_id] = reg
            self.channel.add_broker(reg)
        for topic in self.zk.get_topics():
            self._load_topic(topic)
        for tp in ctx.all_partitions():
            st = ctx.leadership.get(tp)
            for r in ctx.replicas(tp):
                ctx.replica_states[(tp, r)] = ReplicaState.ONLINE if r in ctx.live_brokers else ReplicaState.OFFLINE
            if st is None:
                ctx.partition_states[tp] = PartitionState.NEW
            elif st.leader_and_isr.leader in ctx.live_brokers:
                ctx.partition_states[tp] = PartitionState.ONLINE
            else:
                ctx.partition_states[tp] = PartitionState.OFFLINE

        batch = self._batch()
        batch.add_update_metadata(set(ctx.live_brokers), ctx.all_partitions())
        for tp in ctx.all_partitions():
            if tp in ctx.leadership:
                batch.add_leader_and_isr(set(ctx.replicas(tp)), tp, ctx)
        self._trigger_online_partition_state_change(batch)
        # Replicas on brokers that died while there was no controller leave the ISR now.
        live = set(ctx.live_brokers)
        for tp, st in list(ctx.leadership.items()):
            gone = set(st.leader_and_isr.isr) - live
            if gone and st.leader_and_isr.leader in live:
                self._change_leadership(tp, lambda cur, g=gone: self._without(cur, g), batch)  # type: ignore[misc]
        batch.send(ctx, self.channel, self._stop_replica_callback)
        self.put(TopicDeletion())
        self.put(PreferredReplicaElection())
        self.put(IsrChangeNotification())
        if self.settings.auto_leader_rebalance_enable:
            self._schedule_rebalance(gen)

    def _load_topic(self, topic: str) -> None:
        assignment = self.zk.get_assignment(topic)
        if assignment is None:
            return
        self.ctx.assignments[topic] = assignment
        self.ctx.topic_configs[topic] = self.zk.get_topic_config(topic)
        for p in assignment:
            st = self.zk.get_partition_state(topic, p)
            if st is not None:
                self.ctx.leadership[(topic, p)] = st

    def _watch_children(self, path: str, event: type[Event], gen: int) -> None:
        def on_children(_children: list[str]) -> bool | None:
            if gen != self._generation:
                return False  # a previous term's watch: stop it
            self.put(event())
            return None

        self.zk.zk.ensure_path(path)
        self.zk.zk.ChildrenWatch(path, on_children, send_event=False)

    def _watch_data(self, path: str, event: type[Event], gen: int) -> None:
        def on_data(_data: bytes | None, _stat: Any, *_a: Any) -> bool | None:
            if gen != self._generation:
                return False
            self.put(event())
            return None

        self.zk.zk.DataWatch(path, on_data)

    def _schedule_rebalance(self, gen: int) -> None:
        def tick() -> None:
            if gen == self._generation:
                self.put(AutoRebalance())
                self._schedule_rebalance(gen)

        self._timer = threading.Timer(self.settings.leader_imbalance_check_interval_seconds, tick)
        self._timer.daemon = True
        self._timer.start()

    def _transition(self, tp: TopicPartition, target: PartitionState) -> None:
        """Move a partition to ``target``, only along the table of controller.state_machine."""
        current = self.ctx.partition_states.get(tp, PartitionState.NON_EXISTENT)
        check_partition_transition(f"{tp[0]}-{tp[1]}", current, target)
        self.ctx.partition_states[tp] = target

    def _replica_transition(self, tp: TopicPartition, replica: int, target: ReplicaState) -> None:
        current = self.ctx.replica_states.get((tp, replica), ReplicaState.NON_EXISTENT)
        if current is ReplicaState.DELETION_SUCCESSFUL and target is ReplicaState.OFFLINE:
            return  # already gone; its broker's death changes nothing
        if current is ReplicaState.DELETION_STARTED and target is ReplicaState.OFFLINE:
            target = ReplicaState.DELETION_INELIGIBLE  # its broker died mid-deletion: retried on return
        if current is target and target is not ReplicaState.ONLINE:
            return
        check_replica_transition(f"{tp[0]}-{tp[1]} on broker {replica}", current, target)
        self.ctx.replica_states[(tp, replica)] = target

    def _batch(self) -> RequestBatch:
        return RequestBatch(controller_id=self.broker_id)

    def _stop_replica_callback(self, broker_id: int, resp: Any) -> None:
        self.put(StopReplicaResponseReceived(broker_id, resp))

    # ------------------------------------------------------------ partition state changes

    def _write_leadership(self, tp: TopicPartition, new: LeaderAndIsr) -> bool:
        """Conditional write of the state znode; on a version conflict re-read and report
        failure (the caller retries with fresh state). Raises ControllerMovedError when a
        newer controller wrote it."""
        ctx = self.ctx
        state = LeaderIsrAndControllerEpoch(new, ctx.epoch)
        version = self.zk.update_partition_state(tp[0], tp[1], state, new.zk_version)
        if version is None:
            fresh = self.zk.get_partition_state(tp[0], tp[1])
            if fresh is not None:
                if fresh.controller_epoch > ctx.epoch:
                    raise ControllerMovedError(
                        f"{tp[0]}-{tp[1]} was written by controller epoch {fresh.controller_epoch}")
                ctx.leadership[tp] = fresh
            return False
        ctx.leadership[tp] = LeaderIsrAndControllerEpoch(new.with_zk_version(version), ctx.epoch)
        return True

    def _change_leadership(self, tp: TopicPartition, compute: Callable[[LeaderAndIsr], LeaderAndIsr | None],
                           batch: RequestBatch) -> bool:
        """Compute a new leader/ISR from the current one and write it, retrying version conflicts."""
        for _attempt in range(5):
            current = self.ctx.leadership.get(tp)
            if current is None:
                return False
            new = compute(current.leader_and_isr)
            if new is None:
                return False
            if self._write_leadership(tp, new):
                st = self.ctx.leadership[tp].leader_and_isr
                self._transition(tp, PartitionState.ONLINE if st.leader != NO_LEADER else PartitionState.OFFLINE)
                batch.add_leader_and_isr(set(self.ctx.replicas(tp)), tp, self.ctx)
                return True
        log.warning("controller: giving up on %s-%d after repeated zk_version conflicts", tp[0], tp[1])
        return False

    def _elect_leader(self, tp: TopicPartition, strategy: ElectionStrategy, batch: RequestBatch) -> bool:
        ctx = self.ctx
        unclean = self._unclean_enabled(tp[0])
        live = ctx.serving_broker_ids if strategy is not ElectionStrategy.CONTROLLED_SHUTDOWN \
            else set(ctx.live_brokers)
        outcome: dict[str, bool] = {}

        def compute(current: LeaderAndIsr) -> LeaderAndIsr | None:
            decision = elect_leader(strategy, current, ctx.replicas(tp), live, unclean_enabled=unclean,
                                    shutting_down=ctx.shutting_down_broker_ids)
            if decision is None:
                return None
            outcome["unclean"] = decision.unclean
            return decision.leader_and_isr

        ok = self._change_leadership(tp, compute, batch)
        if ok:
            self.elections += 1
            lai = ctx.leadership[tp].leader_and_isr
            if outcome.get("unclean"):
                self.unclean_elections += 1
                log.warning("controller: UNCLEAN election of %d for %s-%d at leader epoch %d (data may be lost)",
                            lai.leader, tp[0], tp[1], lai.leader_epoch,
                            extra={"event": "unclean_election", "topic": tp[0], "partition": tp[1]})
            else:
                log.info("controller: %s election: %s-%d led by %d at leader epoch %d, isr %s", strategy.value,
                         tp[0], tp[1], lai.leader, lai.leader_epoch, list(lai.isr),
                         extra={"event": "election", "topic": tp[0], "partition": tp[1]})
        return ok

    def _unclean_enabled(self, topic: str) -> bool:
        raw = self.ctx.topic_configs.get(topic, {}).get("unclean.leader.election.enable")
        if raw is None:
            return self.settings.unclean_leader_election_enable
        return raw.strip().lower() == "true"

    def _trigger_online_partition_state_change(self, batch: RequestBatch,
                                               only: Iterable[TopicPartition] | None = None) -> None:
        """NEW and OFFLINE partitions -> ONLINE where a leader can be found (S7.2, S7.3, S9.4)."""
        ctx = self.ctx
        candidates = list(only) if only is not None else ctx.all_partitions()
        for tp in candidates:
            if tp[0] in ctx.topics_to_be_deleted:
                continue
            state = ctx.partition_states.get(tp)
            if state is PartitionState.NEW:
                self._initialize_leadership(tp, batch)
                continue
            needs_leader = state is PartitionState.OFFLINE or (
                state is PartitionState.ONLINE
                and ctx.leadership[tp].leader_and_isr.leader not in ctx.serving_broker_ids)
            if needs_leader and not self._elect_leader(tp, ElectionStrategy.OFFLINE, batch):
                self._mark_offline(tp, batch)

    def _initialize_leadership(self, tp: TopicPartition, batch: RequestBatch) -> None:
        ctx = self.ctx
        lai = initial_leader_and_isr(ctx.replicas(tp), ctx.serving_broker_ids)
        if lai is None:
            log.warning("controller: no live replica for new partition %s-%d (replicas %s)", tp[0], tp[1],
                        ctx.replicas(tp))
            return
        state = LeaderIsrAndControllerEpoch(lai, ctx.epoch)
        version = self.zk.create_partition_state(tp[0], tp[1], state)
        if version is None:
            existing = self.zk.get_partition_state(tp[0], tp[1])
            if existing is None:
                return
            ctx.leadership[tp] = existing
            self._transition(tp, PartitionState.OFFLINE)
            self._trigger_online_partition_state_change(batch, [tp])
            return
        ctx.leadership[tp] = LeaderIsrAndControllerEpoch(lai.with_zk_version(version), ctx.epoch)
        self._transition(tp, PartitionState.ONLINE)
        for r in ctx.replicas(tp):
            self._replica_transition(tp, r, ReplicaState.ONLINE if r in ctx.live_brokers else ReplicaState.OFFLINE)
        batch.add_leader_and_isr(set(ctx.replicas(tp)), tp, ctx, is_new=True)

    def _mark_offline(self, tp: TopicPartition, batch: RequestBatch) -> None:
        """S7.3: no replica may lead; record leader -1 (unless already so)."""
        ctx = self.ctx
        live = ctx.serving_broker_ids

        def compute(current: LeaderAndIsr) -> LeaderAndIsr | None:
            if current.leader == NO_LEADER:
                return None
            return offline_leader_and_isr(current, live)

        if not self._change_leadership(tp, compute, batch):
            self._transition(tp, PartitionState.OFFLINE)
        log.warning("controller: %s-%d is offline: no in-sync replica is alive", tp[0], tp[1],
                    extra={"event": "offline", "topic": tp[0], "partition": tp[1]})

    # ------------------------------------------------------------ brokers (S9.3, S7.2)

    def _on_broker_change(self, _ev: BrokerChange) -> None:
        ctx = self.ctx
        current = self.zk.get_all_brokers()
        new = sorted(set(current) - set(ctx.live_brokers))
        dead = sorted(set(ctx.live_brokers) - set(current))
        bounced = sorted(b for b in set(current) & set(ctx.live_brokers) if current[b].epoch != ctx.live_brokers[b].epoch)
        if not (new or dead or bounced):
            return
        log.info("controller: brokers new %s, dead %s, bounced %s", new, dead, bounced,
                 extra={"event": "broker_change", "topic": "", "partition": -1})
        if dead or bounced:
            self._on_broker_failure(dead + bounced)
        if new or bounced:
            self._on_broker_startup({b: current[b] for b in new + bounced})

    def _on_broker_failure(self, dead: list[int]) -> None:
        ctx = self.ctx
        for b in dead:
            ctx.live_brokers.pop(b, None)
            ctx.shutting_down_broker_ids.discard(b)
            self.channel.remove_broker(b)
        dead_set = set(dead)
        batch = self._batch()
        # set_p: every partition with a replica on a dead broker (S7.2).
        for tp in ctx.all_partitions():
            replicas = ctx.replicas(tp)
            if not dead_set & set(replicas):
                continue
            for r in replicas:
                if r in dead_set:
                    self._replica_transition(tp, r, ReplicaState.OFFLINE)
            st = ctx.leadership.get(tp)
            if st is None or tp[0] in ctx.topics_to_be_deleted:
                continue
            if st.leader_and_isr.leader in dead_set or st.leader_and_isr.leader == NO_LEADER:
                self._transition(tp, PartitionState.OFFLINE)
                if not self._elect_leader(tp, ElectionStrategy.OFFLINE, batch):
                    self._mark_offline(tp, batch)
            else:
                self._change_leadership(tp, lambda cur: self._without(cur, dead_set), batch)
        batch.add_update_metadata(set(ctx.live_brokers), ctx.all_partitions())
        batch.send(ctx, self.channel, self._stop_replica_callback)

    @staticmethod
    def _without(current: LeaderAndIsr, gone: set[int]) -> LeaderAndIsr | None:
        new = current
        changed = False
        for r in sorted(gone):
            nxt = remove_replica_from_isr(new, r)
            if nxt is not None:
                # One epoch bump for the whole change, not one per replica.
                new = LeaderAndIsr(nxt.leader, current.leader_epoch + 1, nxt.isr, current.zk_version)
                changed = True
        return new if changed else None

    def _on_broker_startup(self, regs: dict[int, Any]) -> None:
        ctx = self.ctx
        for b, reg in regs.items():
            ctx.live_brokers[b] = reg
            self.channel.add_broker(reg)
        batch = self._batch()
        batch.add_update_metadata(set(ctx.live_brokers), ctx.all_partitions())
        for tp in ctx.all_partitions():
            on_new = [r for r in ctx.replicas(tp) if r in regs]
            if not on_new:
                continue
            for r in on_new:
                if tp[0] not in ctx.topics_to_be_deleted:
                    self._replica_transition(tp, r, ReplicaState.ONLINE)
            if tp in ctx.leadership and tp[0] not in ctx.topics_to_be_deleted:
                batch.add_leader_and_isr(on_new, tp, ctx)
        self._trigger_online_partition_state_change(batch)
        batch.send(ctx, self.channel, self._stop_replica_callback)
        if self._deleting or ctx.topics_to_be_deleted:
            self.put(TopicDeletion())

    # ------------------------------------------------------------ topics (S9.4, S9.5)

    def _on_topic_change(self, _ev: TopicChange) -> None:
        ctx = self.ctx
        topics = set(self.zk.get_topics())
        new = sorted(topics - set(ctx.assignments))
        gone = sorted(set(ctx.assignments) - topics)
        batch = self._batch()
        for topic in gone:
            ctx.remove_topic(topic)
            batch.deleted_topics.add(topic)
        for topic in new:
            self._load_topic(topic)
            log.info("controller: new topic %s with assignment %s", topic, ctx.assignments.get(topic))
            for tp in ctx.partitions_of(topic):
                self._transition(tp, PartitionState.NEW)
                if tp in ctx.leadership:
                    self._transition(tp, PartitionState.OFFLINE)  # its state znode exists already
                    batch.add_leader_and_isr(set(ctx.replicas(tp)), tp, ctx)
                for r in ctx.replicas(tp):
                    self._replica_transition(tp, r, ReplicaState.NEW)
            self._trigger_online_partition_state_change(batch, ctx.partitions_of(topic))
        if gone:
            batch.add_update_metadata(set(ctx.live_brokers), [])
        batch.send(ctx, self.channel, self._stop_replica_callback)

    def _on_topic_deletion(self, _ev: TopicDeletion) -> None:
        ctx = self.ctx
        requested = self.zk.get_topics_to_delete()
        batch = self._batch()
        for topic in requested:
            if not self.settings.delete_topic_enable:
                log.info("controller: ignoring deletion of %s: delete.topic.enable is false", topic)
                self.zk.delete_topic_deletion_request(topic)
                continue
            if topic not in ctx.assignments:
                self.zk.delete_topic_deletion_request(topic)
                continue
            ctx.topics_to_be_deleted.add(topic)
            batch.deleted_topics.add(topic)
            pending = self._deleting.setdefault(topic, set())
            for tp in ctx.partitions_of(topic):
                for r in ctx.replicas(tp):
                    if ctx.replica_states.get((tp, r)) is ReplicaState.DELETION_SUCCESSFUL:
                        continue
                    pending.add((tp, r))
                    if ctx.replica_states.get((tp, r)) is not ReplicaState.DELETION_STARTED:
                        self._replica_transition(tp, r, ReplicaState.OFFLINE)
                    if r in ctx.live_brokers:
                        self._replica_transition(tp, r, ReplicaState.DELETION_STARTED)
                        batch.add_stop_replica([r], tp, True, ctx)
                    else:
                        self._replica_transition(tp, r, ReplicaState.DELETION_INELIGIBLE)
            log.info("controller: deleting topic %s", topic)
        if batch.deleted_topics:
            batch.add_update_metadata(set(ctx.live_brokers), [])
        batch.send(ctx, self.channel, self._stop_replica_callback)
        self._maybe_complete_deletions()

    def _on_stop_replica_response(self, ev: StopReplicaResponseReceived) -> None:
        for pe in ev.response.partition_errors:
            tp = (pe.topic_name, pe.partition_index)
            pending = self._deleting.get(tp[0])
            if pending is None:
                continue
            started = self.ctx.replica_states.get((tp, ev.broker_id)) is ReplicaState.DELETION_STARTED
            if pe.error_code == pb.ErrorCode.NONE and started:
                pending.discard((tp, ev.broker_id))
                self._replica_transition(tp, ev.broker_id, ReplicaState.DELETION_SUCCESSFUL)
        self._maybe_complete_deletions()

    def _maybe_complete_deletions(self) -> None:
        for topic, pending in list(self._deleting.items()):
            if pending:
                continue
            del self._deleting[topic]
            self.zk.delete_topic_znodes(topic)
            self.ctx.remove_topic(topic)
            log.info("controller: topic %s deleted", topic)

    # ------------------------------------------------------------ preferred replicas (S9.6)

    def _on_preferred_replica_election(self, _ev: PreferredReplicaElection) -> None:
        requested = self.zk.get_preferred_replica_election()
        if requested is None:
            return
        batch = self._batch()
        for tpid in requested:
            tp = (tpid.topic, tpid.partition)
            self._maybe_elect_preferred(tp, batch)
        batch.send(self.ctx, self.channel, self._stop_replica_callback)
        self.zk.delete_preferred_replica_election()

    def _maybe_elect_preferred(self, tp: TopicPartition, batch: RequestBatch) -> bool:
        ctx = self.ctx
        st = ctx.leadership.get(tp)
        replicas = ctx.replicas(tp)
        if st is None or not replicas or st.leader_and_isr.leader == replicas[0] \
                or tp[0] in ctx.topics_to_be_deleted:
            return False
        return self._elect_leader(tp, ElectionStrategy.PREFERRED, batch)

    def _on_auto_rebalance(self, _ev: AutoRebalance) -> None:
        ctx = self.ctx
        preferred = {tp: ctx.replicas(tp)[0] for tp in ctx.all_partitions() if ctx.replicas(tp)}
        leaders = {tp: st.leader_and_isr.leader for tp, st in ctx.leadership.items()}
        batch = self._batch()
        for tp in imbalanced_partitions(preferred, leaders, self.settings.leader_imbalance_per_broker_percentage):
            if preferred[tp] in ctx.serving_broker_ids:
                self._maybe_elect_preferred(tp, batch)
        batch.send(ctx, self.channel, self._stop_replica_callback)

    # ------------------------------------------------------------ ISR changes made by leaders

    def _on_isr_change_notification(self, _ev: IsrChangeNotification) -> None:
        changed = self.zk.pop_isr_change_notifications()
        if not changed:
            return
        ctx = self.ctx
        tps = []
        for tpid in changed:
            tp = (tpid.topic, tpid.partition)
            st = self.zk.get_partition_state(tpid.topic, tpid.partition)
            if st is not None and tp in ctx.leadership:
                ctx.leadership[tp] = st
                tps.append(tp)
        batch = self._batch()
        batch.add_update_metadata(set(ctx.live_brokers), tps)
        for tp in tps:
            if tp in ctx.reassignments:
                self._maybe_complete_reassignment(tp, batch)
        self._finish_reassignments(batch)
        batch.send(ctx, self.channel, self._stop_replica_callback)

    # ------------------------------------------------------------ partition reassignment (S9.6)

    def _on_partition_reassignment(self, _ev: PartitionReassignment) -> None:
        """Kafka 2.x's ZooKeeper reassignment: AR := OAR + RAR, wait until RAR is in the ISR,
        elect from RAR if the leader must move, AR := RAR, stop and delete the dropped replicas."""
        requested = self.zk.get_partition_reassignment()
        if not requested:
            return
        ctx = self.ctx
        batch = self._batch()
        for tpid, target in requested.items():
            tp = (tpid.topic, tpid.partition)
            if tp in ctx.reassignments:
                continue
            current = ctx.replicas(tp)
            st = ctx.leadership.get(tp)
            reason = None
            if not current or st is None:
                reason = "unknown partition"
            elif not target or len(set(target)) != len(target):
                reason = f"bad replica list {target}"
            elif not set(target) <= set(ctx.live_brokers):
                reason = f"replicas {sorted(set(target) - set(ctx.live_brokers))} are not live"
            if reason is not None:
                log.warning("controller: ignoring reassignment of %s-%d: %s", tp[0], tp[1], reason)
                ctx.reassignments[tp] = []
                continue
            ctx.reassignments[tp] = list(target)
            if list(target) == current:
                continue
            union = current + [r for r in target if r not in current]
            self._set_replicas(tp, union)
            log.info("controller: reassigning %s-%d from %s to %s", tp[0], tp[1], current, target)
            # Bump the epoch so every replica of the union learns the new replica set (new ones start fetching).
            self._change_leadership(tp, lambda cur: cur.new_leader_and_isr(cur.leader, cur.isr), batch)
            self._maybe_complete_reassignment(tp, batch)
        self._finish_reassignments(batch)
        batch.send(ctx, self.channel, self._stop_replica_callback)

    def _set_replicas(self, tp: TopicPartition, replicas: list[int]) -> None:
        assignment = dict(self.ctx.assignments[tp[0]])
        assignment[tp[1]] = list(replicas)
        self.zk.set_assignment(tp[0], assignment)
        self.ctx.assignments[tp[0]] = assignment

    def _maybe_complete_reassignment(self, tp: TopicPartition, batch: RequestBatch) -> None:
        ctx = self.ctx
        target = ctx.reassignments.get(tp)
        st = ctx.leadership.get(tp)
        if not target or st is None or not set(target) <= set(st.leader_and_isr.isr):
            return
        old = ctx.replicas(tp)
        live = ctx.serving_broker_ids

        def compute(cur: LeaderAndIsr) -> LeaderAndIsr | None:
            leader = cur.leader if cur.leader in target and cur.leader in live else next(
                (r for r in target if r in live and r in cur.isr), NO_LEADER)
            return cur.new_leader_and_isr(leader, tuple(r for r in cur.isr if r in target))

        if not self._change_leadership(tp, compute, batch):
            return
        self._set_replicas(tp, list(target))
        dropped = [r for r in old if r not in target]
        batch.add_stop_replica(dropped, tp, True, ctx)
        for r in dropped:
            ctx.replica_states.pop((tp, r), None)
        batch.add_leader_and_isr(set(target), tp, ctx)
        ctx.reassignments[tp] = []
        log.info("controller: reassignment of %s-%d to %s complete", tp[0], tp[1], target)

    def _finish_reassignments(self, batch: RequestBatch) -> None:
        """Drop completed (or refused) partitions from /admin/reassign_partitions."""
        ctx = self.ctx
        done = [tp for tp, target in ctx.reassignments.items() if not target]
        if not done:
            return
        for tp in done:
            del ctx.reassignments[tp]
        remaining = {TopicPartitionId(*tp): target for tp, target in ctx.reassignments.items()}
        self.zk.set_partition_reassignment(remaining)

    # ------------------------------------------------------------ controlled shutdown

    def _on_controlled_shutdown(self, ev: ControlledShutdown) -> None:
        ctx = self.ctx
        if not self.active:
            ev.reply.set_result(pb.ControlledShutdownResponse(error_code=pb.ErrorCode.NOT_CONTROLLER))
            return
        reg = ctx.live_brokers.get(ev.broker_id)
        if reg is None:
            ev.reply.set_result(pb.ControlledShutdownResponse(error_code=pb.ErrorCode.BROKER_NOT_AVAILABLE))
            return
        if ev.broker_epoch >= 0 and reg.epoch >= 0 and ev.broker_epoch != reg.epoch:
            ev.reply.set_result(pb.ControlledShutdownResponse(error_code=pb.ErrorCode.STALE_BROKER_EPOCH))
            return
        ctx.shutting_down_broker_ids.add(ev.broker_id)
        log.info("controller: controlled shutdown of broker %d", ev.broker_id)
        batch = self._batch()
        for tp in ctx.partitions_on_broker(ev.broker_id):
            st = ctx.leadership.get(tp)
            if st is None or len(ctx.replicas(tp)) < 2:
                continue
            if st.leader_and_isr.leader == ev.broker_id:
                self._elect_leader(tp, ElectionStrategy.CONTROLLED_SHUTDOWN, batch)
            else:
                batch.add_stop_replica([ev.broker_id], tp, False, ctx)
                self._change_leadership(tp, lambda cur: self._without(cur, {ev.broker_id}), batch)
        batch.send(ctx, self.channel, self._stop_replica_callback)
        remaining = [tp for tp in ctx.partitions_led_by(ev.broker_id)]
        resp = pb.ControlledShutdownResponse(error_code=pb.ErrorCode.NONE)
        for t, p in remaining:
            resp.remaining_partitions.add(topic_name=t, partition_index=p)
        ev.reply.set_result(resp)
