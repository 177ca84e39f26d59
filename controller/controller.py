"""The controller (SPEC S7, S9; Kafka's KafkaController): events in, plans out, plans executed.

Theory of operation
-------------------
Every broker runs one ``KafkaController``; the one whose ephemeral ``/controller`` znode wins is
*active*. Everything arrives as an event on one queue (``controller.event_manager``): ZooKeeper
watchers, timers and RPC handlers only enqueue. ``process(event)`` handles one event at a time::

    event --> handler(scope)            scope = a copy of the context + an empty plan;
                 |                      reads ZooKeeper, decides with the pure modules
                 v                      (election, state_machine, assignment), stages writes
               plan                     and requests (partition_state_machine, topic_deletion,
                 |                      reassignment, controlled_shutdown)
                 v
    commit_guarded(plan.writes)         one multi-op, only if /controller_epoch is still ours
                                        (several, in order, each guarded, above 512 KiB: a
                                        conflict after the first raises PartialCommitError,
                                        which resigns like any failure)
         |              |
      applied        conflict --> refresh what conflicted, run the handler again (bounded)
         v
    adopt the copy; clean-ups; channels; send LeaderAndIsr/UpdateMetadata/StopReplica; follow-ups

Failure is not survived half-way (issue 14 items 5, 6): a ``ControllerMovedError`` (the epoch
moved: a successor exists) resigns; any other failure resigns, gives up ``/controller`` and runs
the election again, so a controller never runs on with half-applied state. A lost session is an
``Expire`` that clears the queue and resigns at once. The controller becomes ``active`` only
after its failover load committed. ZooKeeper access goes through one gateway
(``zk.client``) that recognises lost replies; the channel manager and the scheduler
are injectable, so the deterministic simulation (tests/simulation) runs this very class.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from kazoo.exceptions import KazooException
from kazoo.protocol.states import KazooState
from kazoo.retry import RetryFailedError

from controller import controlled_shutdown, reassignment, topic_deletion
from controller.assignment import added_partitions
from controller.channel import ControllerChannelManager, RequestBatch
from controller.context import ControllerContext
from controller.election import imbalanced_partitions
from controller.event_manager import ControllerEventManager, enqueue
from controller.events import (
    ALWAYS,
    ApiPartitionReassignment,
    AutoRebalance,
    BrokerChange,
    ControlledShutdown,
    ControllerChange,
    Event,
    Expire,
    IsrChangeNotification,
    PartitionModifications,
    PartitionReassignment,
    PreferredElection,
    PreferredReplicaElection,
    Reconnected,
    Reelect,
    Shutdown,
    Startup,
    StopReplicaResponseReceived,
    TopicChange,
    TopicDeletion,
    UncleanElection,
)
from controller.partition_state_machine import (
    Scope,
    change_leadership,
    elect,
    mark_offline,
    partition_znodes,
    replica_transition,
    transition,
    trigger_online_partition_state_change,
    without,
)
from controller.plan import (
    Cleanup,
    DeletePaths,
    DeleteTopicRequest,
    DeleteTopicZNodes,
    ElectionRecord,
    Plan,
    RewriteReassignment,
)
from controller.state_machine import ElectionStrategy, PartitionState, ReplicaState
from proto import minikafka_pb2 as pb
from proto.names import TopicPartition
from proto.transport import PLAINTEXT_SECURITY, ChannelSecurity
from zk.client import ControllerMovedError, KafkaZkClient, PartialCommitError, ZkWrite
from zk.data import (
    NO_LEADER,
    BrokerIdsZNode,
    BrokerRegistration,
    ConfigTopicZNode,
    ControllerZNode,
    DeleteTopicsZNode,
    IsrChangeNotificationZNode,
    PreferredReplicaElectionZNode,
    ReassignPartitionsZNode,
    ReplicaAssignment,
    TopicPartitionStateZNode,
    TopicsZNode,
    TopicZNode,
)

log = logging.getLogger(__name__)
R = TypeVar("R")
MAX_CONFLICT_RETRIES = 5
# Plans of partition states whose commit applied part of them (the rest met leaders' own ISR
# writes) make progress and are planned again, up to this many attempts in all (issue 29).
MAX_PLANNING_ATTEMPTS = 20
# After a failed election or a failure that resigned, try again this much later: the gateway's
# ZooKeeper retries are bounded, so a long connection loss can make an election fail outright, and
# nothing else would run it again if /controller never changes (issue 14, found by simulation).
ELECTION_RETRY_S = 1.0


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


class Channel(Protocol):
    """What the controller needs of its channels to brokers (controller.channel, or a simulated one)."""

    def add_broker(self, reg: BrokerRegistration) -> None: ...
    def remove_broker(self, broker_id: int) -> None: ...
    def send(self, broker_id: int, method: str, request: Any, callback: Any = None) -> None: ...
    def shutdown(self) -> None: ...


class ControllerStateError(Exception):
    """An event could not be applied (conflicts kept coming): resign and start over."""


class KafkaController:
    def __init__(self, settings: ControllerSettings, zk: KafkaZkClient, *, channel: Channel | None = None,
                 schedule: Callable[[float, Callable[[], None]], Any] | None = None,
                 threaded: bool = True) -> None:
        self.settings = settings
        self.broker_id = settings.broker_id
        self.zk = zk
        self.ctx = ControllerContext()
        self.active = False
        self.active_controller_id = -1
        self.channel: Channel = channel or ControllerChannelManager(
            settings.request_timeout_ms, settings.channel_security, settings.control_plane_listener)
        self._schedule = schedule or _thread_timer
        self._generation = 0
        self._timer: Any = None
        self._election_timer: Any = None
        self._last_zk_state = KazooState.CONNECTED
        self._watch_token: object | None = None
        self._controller_watch_token: object | None = None
        # The active term's watches of each topic's assignment znode (PartitionModifications): kazoo's
        # DataWatch re-reads after a reconnect and fires on a changed version, so these live as long
        # as the term (not re-armed by Reconnected, unlike the child watches).
        self._topic_watch_token: object | None = None
        self._watched_topics: set[str] = set()
        self._stopped = threading.Event()
        self.events: ControllerEventManager | None = ControllerEventManager(self.process) if threaded else None
        # Events put while not threaded (the simulation takes them from here).
        self.pending: list[Event] = []
        self.elections = 0
        self.unclean_elections = 0
        self.resignations = 0
        # The last exception an event ended with (the simulation checks that only ZooKeeper's did).
        self.last_failure: BaseException | None = None

    # ------------------------------------------------------------ lifecycle (any thread)

    def start(self) -> None:
        if self.events is not None:
            self.events.start()
        self.put(Startup())

    def shutdown(self, timeout_s: float = 10.0) -> None:
        self.put(Shutdown())
        if self.events is not None:
            self.events.join(timeout_s)

    def put(self, event: Event) -> None:
        if self.events is not None:
            self.events.put(event)
        else:
            enqueue(self.pending, event)

    def on_zk_state(self, state: KazooState) -> None:
        """kazoo connection listener: runs on kazoo's thread, so it only enqueues."""
        previous, self._last_zk_state = self._last_zk_state, state
        if state == KazooState.LOST:
            self.put(Expire())
        elif state == KazooState.CONNECTED and previous == KazooState.SUSPENDED:
            # After a LOST the broker re-registers first and then sends Reelect.
            self.put(Reconnected())

    def on_session_reestablished(self) -> None:
        self.put(Reelect())

    def submit_unclean_election(self, partitions: list[TopicPartition]) \
            -> concurrent.futures.Future[dict[TopicPartition, tuple[int, str]]]:
        """ElectLeaders UNCLEAN (Kafka's ReplicaLeaderElection event): NOT_CONTROLLER on any other broker."""
        ev = UncleanElection(list(partitions))
        if not self.active:
            ev.reply.set_result(_not_controller(partitions))
            return ev.reply
        self.put(ev)
        return ev.reply

    def submit_preferred_election(self, partitions: list[TopicPartition]) \
            -> concurrent.futures.Future[dict[TopicPartition, tuple[int, str]]]:
        """ElectLeaders PREFERRED (Kafka 2.4+'s ReplicaLeaderElection event): NOT_CONTROLLER on any other broker."""
        ev = PreferredElection(list(partitions))
        if not self.active:
            ev.reply.set_result(_not_controller(partitions))
            return ev.reply
        self.put(ev)
        return ev.reply

    def submit_partition_reassignments(self, partitions: dict[TopicPartition, list[int] | None]) \
            -> concurrent.futures.Future[dict[TopicPartition, tuple[int, str]]]:
        """AlterPartitionReassignments (Kafka 2.8's ApiPartitionReassignment event): a target per
        partition, None to cancel; NOT_CONTROLLER on any other broker."""
        ev = ApiPartitionReassignment(dict(partitions))
        if not self.active:
            ev.reply.set_result(_not_controller(list(partitions)))
            return ev.reply
        self.put(ev)
        return ev.reply

    def submit_controlled_shutdown(self, broker_id: int, broker_epoch: int) \
            -> concurrent.futures.Future[pb.ControlledShutdownResponse]:
        ev = ControlledShutdown(broker_id, broker_epoch)
        if not self.active:
            ev.reply.set_result(pb.ControlledShutdownResponse(error_code=pb.ErrorCode.NOT_CONTROLLER))
            return ev.reply
        self.put(ev)
        return ev.reply

    # ------------------------------------------------------------ processing one event

    def process(self, ev: Event) -> None:
        if isinstance(ev, Shutdown):
            self._cancel_election_retry()
            self._resign(delete_znode=True)
            self._stopped.set()
            return
        if not self.active and not isinstance(ev, ALWAYS):
            if isinstance(ev, UncleanElection | PreferredElection):
                ev.reply.set_result(_not_controller(ev.partitions))
            if isinstance(ev, ApiPartitionReassignment):
                ev.reply.set_result(_not_controller(list(ev.partitions)))
            return
        if isinstance(ev, ControlledShutdown) and not self.active:
            ev.reply.set_result(pb.ControlledShutdownResponse(error_code=pb.ErrorCode.NOT_CONTROLLER))
            return
        handler: Callable[[Any], None] = getattr(self, f"_on_{_snake(type(ev).__name__)}")
        try:
            handler(ev)
        except ControllerMovedError as e:
            self.last_failure = e
            log.warning("controller %d: %s; resigning", self.broker_id, e)
            self._resign(delete_znode=False)
        except Exception as e:
            # Never run on with half-applied state (issue 14 item 6): resign and elect again - at
            # once if we were acting, and in any case later, in case ZooKeeper was unreachable.
            self.last_failure = e
            # ZooKeeper trouble is expected weather; anything else is a bug worth its traceback.
            log.log(logging.WARNING if isinstance(e, (KazooException, RetryFailedError)) else logging.ERROR,
                    "controller %d: %s failed (%s: %s); resigning and re-electing", self.broker_id,
                    type(ev).__name__, type(e).__name__, e,
                    exc_info=not isinstance(e, (KazooException, RetryFailedError)))
            was_active = self.active
            self._resign(delete_znode=True)
            if was_active:
                self.put(Reelect())
            self._retry_election_later()
        finally:
            if isinstance(ev, ControlledShutdown) and not ev.reply.done():
                ev.reply.set_result(pb.ControlledShutdownResponse(error_code=pb.ErrorCode.NOT_CONTROLLER))
            if isinstance(ev, UncleanElection | PreferredElection) and not ev.reply.done():
                ev.reply.set_result(_not_controller(ev.partitions))
            if isinstance(ev, ApiPartitionReassignment) and not ev.reply.done():
                ev.reply.set_result(_not_controller(list(ev.partitions)))

    def _run_planned(self, fn: Callable[[Scope], R]) -> R:
        """Run ``fn`` on a copy of the context, commit its staged writes guarded by the controller
        epoch, then adopt the copy and execute the rest of the plan; retry on conflicts."""
        refreshed: set[TopicPartition] = set()
        carried: list[ElectionRecord] = []  # elections applied by a partial commit: logged and counted at the end
        stalled = 0  # attempts that applied nothing
        for attempt in range(MAX_PLANNING_ATTEMPTS):
            if stalled >= MAX_CONFLICT_RETRIES:
                break
            scope = Scope(self.ctx.copy(), Plan(RequestBatch(controller_id=self.broker_id)), self.zk,
                          self.settings.unclean_leader_election_enable)
            result = fn(scope)
            planned = time.monotonic()
            try:
                commit = self.zk.commit_guarded(self.ctx.epoch_zk_version, scope.plan.writes,
                                                skip_conflicts=_partition_states_only(scope.plan.writes))
            except PartialCommitError as e:
                # Several multis, a later one conflicted (e.g. a leader's own ISR change among
                # thousands of partitions): take what was applied, refresh what conflicted and plan
                # again, as Kafka's updateLeaderAndIsr retries only the partitions that failed -
                # rather than resign or reload everything (~3 s at 10,000 partitions, issue 29).
                taken = self._take_applied(scope.ctx, scope.plan.writes, e)
                if taken is None:
                    raise
                applied = set(e.applied)
                unapplied = {w.path for w in scope.plan.writes if w not in applied}
                carried += [r for r in scope.plan.election_log
                            if TopicPartitionStateZNode.path(r.topic, r.partition) not in unapplied]
                log.info("controller %d: %d of %d writes applied, %d znodes conflicted (%s...) in %.2f s "
                         "(attempt %d); refreshing and planning again", self.broker_id, len(e.applied),
                         len(scope.plan.writes), len(e.current), sorted(e.current)[:3], time.monotonic() - planned,
                         attempt + 1)
                refreshed |= taken
                continue  # progress: planning again is bounded by MAX_PLANNING_ATTEMPTS only
            if commit.applied:
                if len(scope.plan.writes) >= 1000:
                    log.info("controller %d: %d writes committed in %.2f s", self.broker_id,
                             len(scope.plan.writes), time.monotonic() - planned)
                self.ctx = scope.ctx
                if carried:
                    scope.plan.election_log[:0] = carried
                    scope.plan.elections += len(carried)
                    scope.plan.unclean_elections += sum(r.unclean for r in carried)
                # A partition someone else changed under us: its replicas may not have heard of
                # that state (its writer may be gone); telling them again is harmless.
                for tp in sorted(refreshed):
                    if tp in self.ctx.leadership:
                        scope.plan.batch.add_leader_and_isr(set(self.ctx.replicas(tp)), tp, self.ctx)
                self._execute(scope.plan)
                return result
            log.info("controller %d: conflict on %d znodes (%s...) (attempt %d); refreshing and planning again",
                     self.broker_id, len(commit.current), sorted(commit.current)[:3], attempt + 1)
            refreshed |= self._refresh(commit.current)
            stalled += 1
        raise ControllerStateError(f"writes kept conflicting after {attempt + 1} attempts")

    def _take_applied(self, planned: ControllerContext, writes: list[ZkWrite],
                      e: PartialCommitError) -> set[TopicPartition] | None:
        """After a partial commit: the partitions whose every planned write was applied take their
        planned state (leadership, partition and replica states) from ``planned``; the others take
        what ZooKeeper holds now. Returns those partitions (their replicas must hear of them), or
        None when something other than partition states was written (then the caller gives up)."""
        if not _partition_states_only(writes):
            return None
        applied = set(e.applied)
        done: set[TopicPartition] = set()
        partial: set[TopicPartition] = set()
        for w in writes:
            tp = _partition_of(w.path)
            if tp is not None:
                (done if w in applied else partial).add(tp)
        done -= partial  # a partition written twice in the plan, once applied: read it back
        ctx = self.ctx
        for tp in done:
            if tp in planned.leadership:
                ctx.leadership[tp] = planned.leadership[tp]
            if tp in planned.partition_states:
                ctx.partition_states[tp] = planned.partition_states[tp]
            for r in planned.replicas(tp):
                if (tp, r) in planned.replica_states:
                    ctx.replica_states[(tp, r)] = planned.replica_states[(tp, r)]
        # Written in a multi not attempted (or only in part): as ZooKeeper holds them now.
        stale = sorted(partial - {_partition_of(p) for p in e.current})
        found = self.zk.get_partition_states(stale) if stale else {}  # pipelined
        for tp in stale:
            if tp in found:
                ctx.leadership[tp] = found[tp]
            else:
                ctx.leadership.pop(tp, None)
        return done | set(stale) | self._refresh(e.current)

    def _refresh(self, current: dict[str, tuple[bytes, int] | None]) -> set[TopicPartition]:
        """Take what ZooKeeper holds for the paths that conflicted; returns the partitions whose
        state was refreshed."""
        ctx = self.ctx
        refreshed: set[TopicPartition] = set()
        for path, value in current.items():
            parts = path.split("/")
            if path.endswith("/state") and len(parts) == 7:  # /brokers/topics/t/partitions/p/state
                tp = (parts[3], int(parts[5]))
                refreshed.add(tp)
                if value is None:
                    ctx.leadership.pop(tp, None)
                else:
                    ctx.leadership[tp] = TopicPartitionStateZNode.decode(tp[0], tp[1], value[0], value[1])
            elif len(parts) == 4 and path == TopicZNode.path(parts[3]) and value is not None:
                self._take_assignment(ctx, parts[3], TopicZNode.decode_full(parts[3], value[0]), value[1])
        return refreshed

    def _execute(self, plan: Plan) -> None:
        ctx = self.ctx
        for b in plan.remove_brokers:
            self.channel.remove_broker(b)
        for reg in plan.add_brokers:
            self.channel.add_broker(reg)
        for cleanup in plan.cleanups:
            self._cleanup(cleanup)
        self.elections += plan.elections
        self.unclean_elections += plan.unclean_elections
        _log_elections(plan.election_log)
        plan.batch.send(ctx, self.channel, self._stop_replica_callback)  # type: ignore[arg-type]
        for ev in plan.follow_ups:
            self.put(ev)

    def _cleanup(self, cleanup: Cleanup) -> None:
        """Idempotent ZooKeeper clean-ups after a commit, each guarded by the controller epoch."""
        version = self.ctx.epoch_zk_version
        if isinstance(cleanup, DeleteTopicRequest):
            self.zk.delete_guarded(version, [DeleteTopicsZNode.path(cleanup.topic)])
        elif isinstance(cleanup, DeleteTopicZNodes):
            topic = cleanup.topic
            self.zk.delete_guarded(version, [TopicZNode.path(topic), ConfigTopicZNode.path(topic),
                                             DeleteTopicsZNode.path(topic)], recursive=True)
        elif isinstance(cleanup, RewriteReassignment):
            current = self.zk.get_partition_reassignment()
            if current is None:
                return
            remaining = {tp: r for tp, r in current.items() if tp not in cleanup.done}
            if remaining != current:
                self.zk.set_or_delete_guarded(version, ReassignPartitionsZNode.PATH,
                                              ReassignPartitionsZNode.encode(remaining) if remaining else None)
        else:
            self.zk.delete_guarded(version, list(cleanup.paths))

    def _stop_replica_callback(self, broker_id: int, resp: Any) -> None:
        self.put(StopReplicaResponseReceived(broker_id, resp))

    # ------------------------------------------------------------ election (S9.1)

    def _on_startup(self, _ev: Startup) -> None:
        self._watch_controller()
        self._elect()

    def _watch_controller(self) -> None:
        token = self._controller_watch_token = object()

        def watch_controller(_data: bytes | None, _stat: Any) -> bool | None:
            if self._controller_watch_token is not token:
                return False  # replaced by a fresh watch after a reconnect
            self.put(ControllerChange())
            return None

        # kazoo's DataWatch re-arms itself (watches are one-shot in ZooKeeper, S9.1).
        self.zk.watch_data(ControllerZNode.PATH, watch_controller)

    def _on_reconnected(self, _ev: Reconnected) -> None:
        """kazoo drops its watches when the connection drops and, unlike ZooKeeper's Java client, does
        not re-send them (SetWatches); its recipes re-read on reconnect but stay silent when a child
        list or a version looks unchanged - yet a broker may have bounced meanwhile (same id, new
        epoch) or /controller changed hands (found by simulation, issue 14). Fresh watches: each
        fires once at once, after its watch is set, so nothing falls between read and watch."""
        self._watch_controller()
        if self.active:
            self._arm_watches()

    def _on_reelect(self, _ev: Reelect) -> None:
        self._cancel_election_retry()
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

    def _on_expire(self, _ev: Expire) -> None:
        # The broker re-registers and sends Reelect once it has a new session; an election retry
        # scheduled under the old session must not run before that.
        self._cancel_election_retry()
        if self.active:
            log.warning("controller %d: ZooKeeper session expired; resigning", self.broker_id)
            self._resign(delete_znode=False)

    def _retry_election_later(self) -> None:
        self._cancel_election_retry()
        timer: Any = None

        def fire() -> None:
            if self._election_timer is timer:
                self._election_timer = None
                self.put(Reelect())

        timer = self._schedule(ELECTION_RETRY_S, fire)
        self._election_timer = timer

    def _cancel_election_retry(self) -> None:
        if self._election_timer is not None:
            self._election_timer.cancel()
            self._election_timer = None

    def _elect(self) -> None:
        if self.active:
            return
        won = self.zk.register_controller_and_increment_epoch(self.broker_id, _now_ms())
        if won is not None:
            self.active_controller_id = self.broker_id
            try:
                self._on_controller_failover(*won)
            except Exception:
                log.warning("controller %d lost the election while starting", self.broker_id, exc_info=True)
                self._resign(delete_znode=True)
                raise
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
        self._watch_token = None
        self._topic_watch_token = None
        self._watched_topics = set()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.channel.shutdown()
        self.ctx = ControllerContext()
        if delete_znode and (was_active or self.active_controller_id == self.broker_id):
            try:
                self.zk.delete_controller_if_owner()
            except Exception as e:
                log.debug("could not delete /controller: %s", e)
        if was_active:
            self.resignations += 1
            log.info("controller %d resigned", self.broker_id)

    # ------------------------------------------------------------ failover (S9.2)

    def _on_controller_failover(self, epoch: int, version: int) -> None:
        self.ctx = ControllerContext(epoch=epoch, epoch_zk_version=version)
        gen = self._generation
        self._arm_watches()
        started = time.monotonic()
        loaded = started
        for attempt in range(MAX_CONFLICT_RETRIES):
            try:
                self._load()
                loaded = time.monotonic()
                self._run_planned(self._resume)
                break
            except PartialCommitError as e:
                # Resuming thousands of partitions takes several multis; leaders changing ISRs
                # meanwhile can fail a later one. What was applied is ours, at our epoch: load
                # again and resume from there rather than resign and elect again (issue 29).
                if attempt == MAX_CONFLICT_RETRIES - 1:
                    raise
                log.info("controller %d: resuming conflicted after a partial commit (%s); loading again",
                         self.broker_id, e)
        self._topic_watch_token = object()
        self._watched_topics = set()
        self._watch_topics(sorted(self.ctx.assignments))
        # Active only once everything is loaded and the resumed state is committed (item 6).
        self.active = True
        done = time.monotonic()
        # The phases' durations: what a failover at thousands of partitions spends where (issue 29).
        log.info("broker %d is now the controller, controller epoch %d (%d partitions: loaded in %.2f s, "
                 "resumed - planned, committed, sent - in %.2f s)", self.broker_id, epoch,
                 len(self.ctx.leadership), loaded - started, done - loaded,
                 extra={"event": "controller_elected", "topic": "", "partition": -1})
        for ev in (TopicDeletion(), PreferredReplicaElection(), IsrChangeNotification(), PartitionReassignment()):
            self.put(ev)
        if self.settings.auto_leader_rebalance_enable:
            self._schedule_rebalance(gen)

    def _load(self) -> None:
        """The failover's reads, into the context: nothing is written here, so a conflict of the
        resume's writes plans again from this (refreshed where it conflicted), not from a reload."""
        ctx = self.ctx = ControllerContext(epoch=self.ctx.epoch, epoch_zk_version=self.ctx.epoch_zk_version)
        for reg in self.zk.get_all_brokers().values():
            ctx.live_brokers[reg.broker_id] = reg
        # Pipelined reads (Kafka 1.1): one read per znode one after another took ~14 s for 10,000
        # partitions, while their leaders shrank ISRs under the stale copy - the commit then
        # conflicted half-way (issue 29).
        topics = self.zk.get_topics()
        assignments = self.zk.get_full_assignments_with_versions(topics)
        configs = self.zk.get_topic_configs(list(assignments))
        for topic, (assignment, version) in assignments.items():
            self._take_assignment(ctx, topic, assignment, version)
            ctx.topic_configs[topic] = configs.get(topic, {})
        ctx.leadership.update(self.zk.get_partition_states(
            [(topic, p) for topic, (assignment, _v) in assignments.items() for p in assignment]))
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
        ctx.topics_to_be_deleted.update(t for t in self.zk.get_topics_to_delete() if t in ctx.assignments)

    def _resume(self, s: Scope) -> None:
        """The failover's plan from the loaded context: every broker told everything, elections
        where leaders are gone, dead replicas out of ISRs, reassignments resumed."""
        ctx = s.ctx
        s.plan.add_brokers.extend(reg for _, reg in sorted(ctx.live_brokers.items()))
        batch = s.plan.batch
        batch.add_update_metadata(set(ctx.live_brokers), ctx.all_partitions())
        for tp in ctx.all_partitions():
            if tp in ctx.leadership:
                batch.add_leader_and_isr(set(ctx.replicas(tp)), tp, ctx)
        trigger_online_partition_state_change(s)
        # Replicas on brokers that died while there was no controller leave the ISR now.
        live = set(ctx.live_brokers)
        for tp, st in list(ctx.leadership.items()):
            gone = set(st.leader_and_isr.isr) - live
            if gone and st.leader_and_isr.leader in live:
                change_leadership(s, tp, lambda cur, g=gone: without(cur, g))  # type: ignore[misc]
        # Reassignments the topic znodes show in progress (KIP-455) go on; the caught-up ones finish.
        reassignment.resume_reassignments(s)

    @staticmethod
    def _take_assignment(ctx: ControllerContext, topic: str, full: dict[int, ReplicaAssignment], version: int) -> None:
        """A topic's assignment znode as read: RS per partition, and the partitions being reassigned."""
        ctx.assignments[topic] = {p: list(a.replicas) for p, a in full.items()}
        ctx.assignment_versions[topic] = version
        for p, a in full.items():
            if a.being_reassigned:
                ctx.reassignments[(topic, p)] = (a.adding, a.removing)
            else:
                ctx.reassignments.pop((topic, p), None)

    def _load_topic(self, s: Scope, topic: str) -> None:
        loaded = self.zk.get_assignment_with_version(topic)
        if loaded is None:
            return
        ctx = s.ctx
        ctx.assignments[topic], ctx.assignment_versions[topic] = loaded
        ctx.topic_configs[topic] = self.zk.get_topic_config(topic)
        # The state znodes that exist (a topic just created has none: one getChildren, no read per
        # partition), read pipelined.
        existing = partition_znodes(s, [topic])[topic] or frozenset()
        ctx.leadership.update(self.zk.get_partition_states([(topic, p) for p in loaded[0] if p in existing]))

    def _arm_watches(self) -> None:
        """The active controller's watches (S9.2); a later call replaces them, _resign stops them."""
        token = self._watch_token = object()
        self._watch_children(BrokerIdsZNode.PATH, BrokerChange, token)
        self._watch_children(TopicsZNode.PATH, TopicChange, token)
        self._watch_children(DeleteTopicsZNode.PATH, TopicDeletion, token)
        self._watch_children(IsrChangeNotificationZNode.PATH, IsrChangeNotification, token)
        self._watch_data(PreferredReplicaElectionZNode.PATH, PreferredReplicaElection, token)
        self._watch_data(ReassignPartitionsZNode.PATH, PartitionReassignment, token)

    def _watch_children(self, path: str, event: type[Event], token: object) -> None:
        def on_children(_children: list[str]) -> bool | None:
            if self._watch_token is not token:
                return False  # a previous term's (or connection's) watch: stop it
            self.put(event())
            return None

        self.zk.watch_children(path, on_children)

    def _watch_data(self, path: str, event: type[Event], token: object) -> None:
        def on_data(_data: bytes | None, _stat: Any) -> bool | None:
            if self._watch_token is not token:
                return False
            self.put(event())
            return None

        self.zk.watch_data(path, on_data)

    def _schedule_rebalance(self, gen: int) -> None:
        def tick() -> None:
            if gen == self._generation:
                self.put(AutoRebalance())
                self._schedule_rebalance(gen)

        self._timer = self._schedule(self.settings.leader_imbalance_check_interval_seconds, tick)

    # ------------------------------------------------------------ brokers (S9.3, S7.2)

    def _on_broker_change(self, _ev: BrokerChange) -> None:
        current = self.zk.get_all_brokers()
        self._run_planned(lambda s: self._broker_change(s, current))

    def _broker_change(self, s: Scope, current: dict[int, BrokerRegistration]) -> None:
        ctx = s.ctx
        new = sorted(set(current) - set(ctx.live_brokers))
        dead = sorted(set(ctx.live_brokers) - set(current))
        bounced = sorted(b for b in set(current) & set(ctx.live_brokers)
                         if current[b].epoch != ctx.live_brokers[b].epoch)
        if not (new or dead or bounced):
            return
        log.info("controller: brokers new %s, dead %s, bounced %s", new, dead, bounced,
                 extra={"event": "broker_change", "topic": "", "partition": -1})
        if dead or bounced:
            self._broker_failure(s, dead + bounced)
        if new or bounced:
            self._broker_startup(s, {b: current[b] for b in new + bounced})

    def _broker_failure(self, s: Scope, dead: list[int]) -> None:
        ctx = s.ctx
        for b in dead:
            ctx.live_brokers.pop(b, None)
            ctx.shutting_down_broker_ids.discard(b)
            s.plan.remove_brokers.append(b)
        dead_set = set(dead)
        # set_p: every partition with a replica on a dead broker (S7.2).
        for tp in ctx.all_partitions():
            replicas = ctx.replicas(tp)
            if not dead_set & set(replicas):
                continue
            for r in replicas:
                if r in dead_set:
                    replica_transition(s, tp, r, ReplicaState.OFFLINE)
            st = ctx.leadership.get(tp)
            if st is None or tp[0] in ctx.topics_to_be_deleted:
                continue
            if st.leader_and_isr.leader in dead_set or st.leader_and_isr.leader == NO_LEADER:
                transition(s, tp, PartitionState.OFFLINE)
                if not elect(s, tp, ElectionStrategy.OFFLINE):
                    mark_offline(s, tp)
            else:
                change_leadership(s, tp, lambda cur: without(cur, dead_set))
        s.plan.batch.add_update_metadata(set(ctx.live_brokers), ctx.all_partitions())

    def _broker_startup(self, s: Scope, regs: dict[int, BrokerRegistration]) -> None:
        ctx = s.ctx
        for b, reg in regs.items():
            ctx.live_brokers[b] = reg
            s.plan.add_brokers.append(reg)
        batch = s.plan.batch
        batch.add_update_metadata(set(ctx.live_brokers), ctx.all_partitions())
        for tp in ctx.all_partitions():
            on_new = [r for r in ctx.replicas(tp) if r in regs]
            if not on_new:
                continue
            for r in on_new:
                if tp[0] not in ctx.topics_to_be_deleted:
                    replica_transition(s, tp, r, ReplicaState.ONLINE)
            if tp in ctx.leadership and tp[0] not in ctx.topics_to_be_deleted:
                batch.add_leader_and_isr(on_new, tp, ctx)
        trigger_online_partition_state_change(s)
        if ctx.deletion_pending or ctx.topics_to_be_deleted:
            s.plan.follow_ups.append(TopicDeletion())

    # ------------------------------------------------------------ topics (S9.4, S9.5)

    def _on_topic_change(self, _ev: TopicChange) -> None:
        topics = set(self.zk.get_topics())
        self._run_planned(lambda s: self._topic_change(s, topics))
        self._watched_topics &= set(self.ctx.assignments)  # a topic created again gets a watch of its own
        self._watch_topics(sorted(set(self.ctx.assignments) - self._watched_topics))

    # ------------------------------------------------------------ partitions added to a topic

    def _watch_topics(self, topics: list[str]) -> None:
        """Watch each topic's assignment znode (Kafka's PartitionModificationsHandler). The watch's
        first call, made here on the event thread, is skipped when it shows the version the
        controller loaded; a version that moved in between, and every later change, is an event."""
        token = self._topic_watch_token
        if token is None:
            return
        for topic in topics:
            if topic in self._watched_topics:
                continue
            self._watched_topics.add(topic)
            arming = [True]
            loaded = self.ctx.assignment_versions.get(topic)

            def on_data(data: bytes | None, stat: Any, topic: str = topic, arming: list[bool] = arming,
                        loaded: int | None = loaded) -> bool | None:
                if self._topic_watch_token is not token or stat is None:
                    return False  # another term's watch, or the topic is gone (a new one is watched anew)
                if arming[0] and stat.version == loaded:
                    return None
                self.put(PartitionModifications(topic))
                return None

            self.zk.watch_data(TopicZNode.path(topic), on_data)
            arming[0] = False

    def _on_partition_modifications(self, ev: PartitionModifications) -> None:
        topic = ev.topic
        if topic not in self.ctx.assignments:
            return  # a new topic is TopicChange's; a deleted one is gone
        loaded = self.zk.get_assignment_with_version(topic)
        if loaded is None:
            return
        assignment, version = loaded
        self._run_planned(lambda s: self._partition_modifications(s, topic, assignment, version))

    def _partition_modifications(self, s: Scope, topic: str, current: dict[int, list[int]], version: int) -> None:
        """Start the partitions the topic's znode has and the controller has not started (Kafka's
        processPartitionModifications -> onNewPartitionCreation): NEW, a leader elected, its state
        znode created (staged), LeaderAndIsr to its replicas, UpdateMetadata to every broker. The
        replicas of started partitions are the controller's to change (reassignment): a znode
        that says otherwise gets the controller's view back, as Kafka 2.x restores it."""
        ctx = s.ctx
        known = ctx.assignments.get(topic)
        if known is None:
            return
        started = [p for p in known if (topic, p) in ctx.partition_states]
        new, changed = added_partitions(known, current, started)
        if topic in ctx.topics_to_be_deleted:
            if new:
                log.info("controller: not adding partitions %s to %s: it is being deleted", sorted(new), topic)
            return
        merged = {p: r for p, r in known.items() if p in set(started)} | new
        ctx.assignments[topic] = merged
        if version > ctx.assignment_versions.get(topic, -1):
            ctx.assignment_versions[topic] = version
        if changed:
            log.warning("controller: the replicas of %s partitions %s changed behind the controller; restoring",
                        topic, changed)
            v = ctx.assignment_versions[topic]
            s.plan.stage(ZkWrite("set", TopicZNode.path(topic), TopicZNode.encode(merged, *ctx.moving(topic)), v))
            ctx.assignment_versions[topic] = v + 1
        if not new:
            return
        log.info("controller: new partitions of %s: %s", topic, new,
                 extra={"event": "partitions_added", "topic": topic, "partition": -1})
        tps = [(topic, p) for p in sorted(new)]
        for tp in tps:
            transition(s, tp, PartitionState.NEW)
            for r in ctx.replicas(tp):
                if (tp, r) not in ctx.replica_states:
                    replica_transition(s, tp, r, ReplicaState.NEW)
        trigger_online_partition_state_change(s, tps)

    def _topic_change(self, s: Scope, topics: set[str]) -> None:
        ctx = s.ctx
        new = sorted(topics - set(ctx.assignments))
        gone = sorted(set(ctx.assignments) - topics)
        for topic in gone:
            ctx.remove_topic(topic)
            s.plan.batch.deleted_topics.add(topic)
        for topic in new:
            self._load_topic(s, topic)
            log.info("controller: new topic %s with assignment %s", topic, ctx.assignments.get(topic))
            for tp in ctx.partitions_of(topic):
                transition(s, tp, PartitionState.NEW)
                if tp in ctx.leadership:
                    transition(s, tp, PartitionState.OFFLINE)  # its state znode exists already
                    s.plan.batch.add_leader_and_isr(set(ctx.replicas(tp)), tp, ctx)
                for r in ctx.replicas(tp):
                    replica_transition(s, tp, r, ReplicaState.NEW)
            trigger_online_partition_state_change(s, ctx.partitions_of(topic))
        if gone:
            s.plan.batch.add_update_metadata(set(ctx.live_brokers), [])

    def _on_topic_deletion(self, _ev: TopicDeletion) -> None:
        requested = self.zk.get_topics_to_delete()
        self._run_planned(lambda s: topic_deletion.on_topic_deletion(s, requested, self.settings.delete_topic_enable))

    def _on_stop_replica_response_received(self, ev: StopReplicaResponseReceived) -> None:
        self._run_planned(lambda s: topic_deletion.on_stop_replica_response(s, ev.broker_id, ev.response))

    # ------------------------------------------------------------ preferred replicas (S9.6)

    def _on_preferred_replica_election(self, _ev: PreferredReplicaElection) -> None:
        requested = self.zk.get_preferred_replica_election()
        if requested is None:
            return

        def plan(s: Scope) -> None:
            for tpid in requested:
                self._maybe_elect_preferred(s, (tpid.topic, tpid.partition))
            s.plan.cleanups.append(DeletePaths((PreferredReplicaElectionZNode.PATH,)))

        self._run_planned(plan)

    @staticmethod
    def _maybe_elect_preferred(s: Scope, tp: TopicPartition) -> bool:
        ctx = s.ctx
        st = ctx.leadership.get(tp)
        replicas = ctx.replicas(tp)
        if st is None or not replicas or st.leader_and_isr.leader == replicas[0] or tp[0] in ctx.topics_to_be_deleted:
            return False
        return elect(s, tp, ElectionStrategy.PREFERRED)

    def _on_preferred_election(self, ev: PreferredElection) -> None:
        """Kafka 2.8's processReplicaLeaderElection for PREFERRED: a partition led by its preferred
        replica needs no election; otherwise the preferred replica leads if it is live and in the ISR."""

        def plan(s: Scope) -> dict[TopicPartition, tuple[int, str]]:
            ctx = s.ctx
            out: dict[TopicPartition, tuple[int, str]] = {}
            for tp in ev.partitions:
                st = ctx.leadership.get(tp)
                replicas = ctx.replicas(tp)
                if st is None or not replicas:
                    out[tp] = (pb.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                elif tp[0] in ctx.topics_to_be_deleted:
                    out[tp] = (pb.ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is being deleted")
                elif st.leader_and_isr.leader == replicas[0]:
                    out[tp] = (pb.ErrorCode.ELECTION_NOT_NEEDED, "")
                elif self._maybe_elect_preferred(s, tp):
                    out[tp] = (pb.ErrorCode.NONE, "")
                else:
                    out[tp] = (pb.ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                               f"the preferred replica {replicas[0]} is not live or not in the ISR")
            return out

        ev.reply.set_result(self._run_planned(plan))  # on failure: NOT_CONTROLLER (``process``)

    def _on_unclean_election(self, ev: UncleanElection) -> None:
        """Kafka 2.8's processReplicaLeaderElection for UNCLEAN: a partition whose leader is live needs
        no election; one without gets its first live replica (in the ISR first, any otherwise)."""

        def plan(s: Scope) -> dict[TopicPartition, tuple[int, str]]:
            ctx = s.ctx
            out: dict[TopicPartition, tuple[int, str]] = {}
            for tp in ev.partitions:
                st = ctx.leadership.get(tp)
                if st is None:
                    out[tp] = (pb.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                elif tp[0] in ctx.topics_to_be_deleted:
                    out[tp] = (pb.ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is being deleted")
                elif st.leader_and_isr.leader in ctx.serving_broker_ids:
                    out[tp] = (pb.ErrorCode.ELECTION_NOT_NEEDED, "")
                elif elect(s, tp, ElectionStrategy.OFFLINE, force_unclean=True):
                    out[tp] = (pb.ErrorCode.NONE, "")
                else:
                    out[tp] = (pb.ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "no replica of the partition is live")
            return out

        ev.reply.set_result(self._run_planned(plan))  # on failure: NOT_CONTROLLER (``process``)

    def _on_auto_rebalance(self, _ev: AutoRebalance) -> None:
        def plan(s: Scope) -> None:
            ctx = s.ctx
            preferred = {tp: ctx.replicas(tp)[0] for tp in ctx.all_partitions() if ctx.replicas(tp)}
            leaders = {tp: st.leader_and_isr.leader for tp, st in ctx.leadership.items()}
            for tp in imbalanced_partitions(preferred, leaders, self.settings.leader_imbalance_per_broker_percentage):
                if preferred[tp] in ctx.serving_broker_ids:
                    self._maybe_elect_preferred(s, tp)

        self._run_planned(plan)

    # ------------------------------------------------------------ ISR changes made by leaders

    def _on_isr_change_notification(self, _ev: IsrChangeNotification) -> None:
        notifications = self.zk.get_isr_change_notifications()
        if not notifications:
            return
        changed = {(tpid.topic, tpid.partition) for _path, tps in notifications for tpid in tps}
        found = self.zk.get_partition_states(sorted(changed))  # pipelined
        states = {tp: found.get(tp) for tp in sorted(changed)}

        def plan(s: Scope) -> None:
            ctx = s.ctx
            tps = []
            for tp, st in states.items():
                if st is not None and tp in ctx.leadership:
                    ctx.leadership[tp] = st
                    tps.append(tp)
            s.plan.batch.add_update_metadata(set(ctx.live_brokers), tps)
            for tp in tps:
                if tp in ctx.reassignments:
                    reassignment.maybe_complete_reassignment(s, tp)
            s.plan.cleanups.append(DeletePaths(tuple(path for path, _tps in notifications)))

        self._run_planned(plan)

    # ------------------------------------------------------------ partition reassignment (S9.6)

    def _on_partition_reassignment(self, _ev: PartitionReassignment) -> None:
        """/admin/reassign_partitions (the ZooKeeper way, kept in Kafka 2.4+ beside the API)."""
        found = self.zk.get_partition_reassignment()
        if not found:
            return
        requested: dict[TopicPartition, list[int] | None] = {(t.topic, t.partition): r for t, r in found.items()}
        self._run_planned(lambda s: reassignment.on_partition_reassignment(s, requested, from_zk=True))

    def _on_api_partition_reassignment(self, ev: ApiPartitionReassignment) -> None:
        """AlterPartitionReassignments (Kafka's processApiPartitionReassignment): per partition."""
        ev.reply.set_result(self._run_planned(lambda s: reassignment.on_partition_reassignment(s, ev.partitions)))

    # ------------------------------------------------------------ controlled shutdown

    def _on_controlled_shutdown(self, ev: ControlledShutdown) -> None:
        resp = self._run_planned(lambda s: controlled_shutdown.on_controlled_shutdown(s, ev.broker_id,
                                                                                       ev.broker_epoch))
        ev.reply.set_result(resp)


# Up to this many clean elections of one plan are logged one line each; beyond, one line per new
# leader (with DEBUG lines each): at 10,000 partitions a line per election was a fifth of the
# controller thread's time in a failover (issue 29). Unclean ones are always logged each.
ELECTIONS_LOGGED_EACH = 100


def _log_elections(records: Sequence[ElectionRecord]) -> None:
    clean = [r for r in records if not r.unclean]
    for r in records:
        if r.unclean:
            log.warning("controller: UNCLEAN election of %d for %s-%d at leader epoch %d (data may be lost)",
                        r.leader, r.topic, r.partition, r.leader_epoch,
                        extra={"event": "unclean_election", "topic": r.topic, "partition": r.partition})
    if len(clean) <= ELECTIONS_LOGGED_EACH:
        for r in clean:
            log.info("controller: %s election: %s-%d led by %d at leader epoch %d, isr %s", r.strategy, r.topic,
                     r.partition, r.leader, r.leader_epoch, list(r.isr),
                     extra={"event": "election", "topic": r.topic, "partition": r.partition})
        return
    by: dict[tuple[str, int], list[ElectionRecord]] = {}
    for r in clean:
        by.setdefault((r.strategy, r.leader), []).append(r)
    for (strategy, leader), rs in sorted(by.items()):
        log.info("controller: %d %s elections led by %d (%s%s)", len(rs), strategy, leader,
                 ", ".join(f"{r.topic}-{r.partition}" for r in rs[:5]), f" and {len(rs) - 5} more" * (len(rs) > 5),
                 extra={"event": "election", "topic": "", "partition": -1})
    if log.isEnabledFor(logging.DEBUG):
        for r in clean:
            log.debug("controller: %s election: %s-%d led by %d at leader epoch %d, isr %s", r.strategy, r.topic,
                      r.partition, r.leader, r.leader_epoch, list(r.isr))


def _partition_of(path: str) -> TopicPartition | None:
    """The partition whose state znode ``path`` is (/brokers/topics/T/partitions/P/state), else None."""
    parts = path.split("/")
    if len(parts) == 7 and parts[:3] == ["", "brokers", "topics"] and parts[4] == "partitions" \
            and parts[6] == "state" and parts[5].isdigit():
        return parts[3], int(parts[5])
    return None


def _partition_states_only(writes: Sequence[ZkWrite]) -> bool:
    """Are ``writes`` only partition states (and a new partition's /partitions and /partitions/P
    parents)? Each partition's writes then stand alone: a commit may apply some and not others."""
    def is_parent(w: ZkWrite) -> bool:
        parts = w.path.split("/")
        return w.kind == "create" and parts[:3] == ["", "brokers", "topics"] and len(parts) in (5, 6) \
            and parts[4] == "partitions"

    return all(_partition_of(w.path) is not None or is_parent(w) for w in writes)


def _not_controller(partitions: list[TopicPartition]) -> dict[TopicPartition, tuple[int, str]]:
    return {tp: (pb.ErrorCode.NOT_CONTROLLER, "this broker is not the controller") for tp in partitions}


def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i:
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def _thread_timer(delay_s: float, fn: Callable[[], None]) -> threading.Timer:
    timer = threading.Timer(delay_s, fn)
    timer.daemon = True
    timer.start()
    return timer
