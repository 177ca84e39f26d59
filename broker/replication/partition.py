"""One replica of one partition on this broker, and the only owner of its log (Kafka's ``Partition``).

Theory of operation (SPEC S3, S4, S5, S7.4, S8)
-----------------------------------------------
A ``Partition`` holds this broker's ``Log`` of the partition and what the
controller last told it about the partition: leader, leader epoch, assigned
replicas, ISR, the state znode's ``zk_version`` and the controller epoch. On the
leader it also holds the pure ``LeaderState`` (``broker.replication.state``),
which decides the high watermark and proposes ISR changes.

One owner: every move of the high watermark and every truncation of the log
goes through a method here, so the HW the log stores (and checkpoints, and
serves consumers below) is always the one the replication rules computed:

* as **leader** (``make_leader``), the HW is ``LeaderState.high_watermark``,
  copied into the log whenever it moves - after a local append
  (``append_as_leader``), a follower fetch (``record_follower_fetch``) or a
  committed ISR change (``on_isr_committed``). The leader never truncates.
* as **follower** (``make_follower``), the HW is min(own LEO, leader's HW)
  (S3.5), set with each fetched chunk (``append_as_follower``); truncation
  (``truncate_to``, ``truncate_fully_and_start_at``,
  ``truncate_epochs_from_end``) happens only here, at the offset the fetcher
  derived from OffsetsForLeaderEpoch (``follower_truncation_offset``, S8.3) or
  from an out-of-range answer - never at the HW.

A follower's fetch is *validated before it is counted*
(``validate_follower_fetch``): only an assigned replica, at the current leader
epoch, fetching at an offset inside [log start, LEO], tells the leader how far
that replica has copied. Anything else is refused with the typed error the
fetch answers with, and moves neither the HW nor the ISR.

ISR changes are proposals: ``record_follower_fetch`` and ``maybe_shrink_isr``
return an ``IsrChange`` for the caller (the ``ReplicaManager``, which owns
ZooKeeper) to write conditionally on ``zk_version``; it reports back with
``on_isr_committed`` or ``on_isr_write_failed``.

The object does no I/O besides the log's and keeps no clock: every method that
depends on time takes ``now_ms``. It is not thread-safe: the broker's event
loop owns it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from broker.log.log import Log, LogAppendInfo
from broker.log.producer_state import VerificationGuard
from broker.replication.state import (
    FetchClock,
    IsrChange,
    LeaderState,
    TruncationDecision,
    delayed_produce_outcome,
    follower_high_watermark,
    truncation_offset,
)
from proto import errors
from proto.names import TopicPartition
from zk.data import NO_LEADER


class LeaderAppendResult(NamedTuple):  # one per append: a NamedTuple for LogAppendInfo's reason
    info: LogAppendInfo
    # The append moved the HW (only possible when the ISR is the leader alone): wake waiters.
    high_watermark_moved: bool


@dataclass(frozen=True, slots=True)
class FollowerFetchResult:
    high_watermark_moved: bool
    # An ISR expansion to write to the state znode, or None.
    isr_change: IsrChange | None


class Partition:
    def __init__(self, topic: str, partition: int, log: Log, local_id: int) -> None:
        self.topic = topic
        self.partition = partition
        self.local_id = local_id
        self._log = log
        self._leader_id = NO_LEADER
        self._leader_epoch = -1
        self._replicas: tuple[int, ...] = ()
        self._isr: tuple[int, ...] = ()
        self._zk_version = -1
        self._controller_epoch = 0
        self._leader_state: LeaderState | None = None
        # On the leader: each follower's log start offset as its fetches said (DeleteRecords' low
        # watermark, Kafka's Replica.logStartOffset); reset whenever this broker becomes leader.
        self._follower_log_starts: dict[int, int] = {}
        # A follower's last view of its leader's log end offset (the fetch answers'; -1: none yet),
        # for DescribeLogDirs' offset lag. Reset whenever the leadership changes.
        self.leader_log_end_offset = -1

    def __repr__(self) -> str:
        return (f"Partition({self.topic}-{self.partition}, leader={self._leader_id}, epoch={self._leader_epoch}, "
                f"isr={list(self._isr)}, leo={self._log.log_end_offset}, hw={self._log.high_watermark})")

    # ------------------------------------------------------------ read-only views

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def log(self) -> Log:
        """The replica's log, for reads. Writes, truncations and HW moves go through this object."""
        return self._log

    @property
    def leader_id(self) -> int:
        return self._leader_id

    @property
    def leader_epoch(self) -> int:
        return self._leader_epoch

    @property
    def replicas(self) -> tuple[int, ...]:
        return self._replicas

    @property
    def isr(self) -> tuple[int, ...]:
        return self._isr

    @property
    def zk_version(self) -> int:
        return self._zk_version

    @property
    def controller_epoch(self) -> int:
        return self._controller_epoch

    @property
    def leader_state(self) -> LeaderState | None:
        """The pure leader core (None unless leader); for inspection (DescribeReplicas), not mutation."""
        return self._leader_state

    @property
    def is_leader(self) -> bool:
        return self._leader_state is not None

    @property
    def high_watermark(self) -> int:
        return self._log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self._log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def latest_epoch(self) -> int:
        return self._log.latest_epoch

    @property
    def log_end_offset_lag(self) -> int:
        """DescribeLogDirs' offset lag (Kafka's ``getLogEndOffsetLag``): 0 for a leader; for a follower
        the leader's log end offset it last heard of minus its own, else ``max(HW - LEO, 0)`` as Kafka."""
        if self.is_leader:
            return 0
        if self.leader_log_end_offset >= 0:
            return max(self.leader_log_end_offset - self._log.log_end_offset, 0)
        return max(self._log.high_watermark - self._log.log_end_offset, 0)

    # ------------------------------------------------------------ leadership (LeaderAndIsr, StopReplica)

    def _assign(self, controller_epoch: int, leader_id: int, leader_epoch: int, replicas: Iterable[int],
                isr: Iterable[int], zk_version: int) -> None:
        self._controller_epoch = controller_epoch
        self._leader_id = leader_id
        self._leader_epoch = leader_epoch
        self._replicas = tuple(replicas)
        self._isr = tuple(isr)
        self._zk_version = zk_version
        self.leader_log_end_offset = -1

    def make_leader(self, *, controller_epoch: int, leader_epoch: int, replicas: Iterable[int], isr: Iterable[int],
                    zk_version: int, now_ms: int, lag_max_ms: int) -> bool:
        """Become leader at ``leader_epoch`` (the caller checked it is newer). Returns True if the HW moved."""
        self._assign(controller_epoch, self.local_id, leader_epoch, replicas, isr, zk_version)
        self._follower_log_starts = {}
        # S8.2: the new leader records where its epoch starts before any write, so followers
        # asking OffsetsForLeaderEpoch for an older epoch learn where it ended here.
        self._log.assign_epoch_start_offset(leader_epoch, self._log.log_end_offset)
        self._leader_state = LeaderState(local_id=self.local_id, leader_epoch=leader_epoch, replicas=self._replicas,
                                         isr=self._isr, zk_version=zk_version,
                                         high_watermark=self._log.high_watermark,
                                         log_end_offset=self._log.log_end_offset, now_ms=now_ms)
        # With the leader alone in the ISR its LEO is already committed.
        return self._sync_leader_high_watermark(self._leader_state.maybe_increment_high_watermark(now_ms, lag_max_ms))

    def make_follower(self, *, controller_epoch: int, leader_id: int, leader_epoch: int, replicas: Iterable[int],
                      isr: Iterable[int], zk_version: int) -> None:
        """Follow ``leader_id`` (NO_LEADER: none live) at ``leader_epoch``. The HW stays where it is
        until the first fetch; the log is truncated only after OffsetsForLeaderEpoch (S8.3)."""
        self._assign(controller_epoch, leader_id, leader_epoch, replicas, isr, zk_version)
        self._leader_state = None

    def stop_leading(self) -> None:
        """StopReplica: this broker no longer serves the partition as leader (the log stays)."""
        self._leader_state = None

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """KIP-320: a request naming a leader epoch must name ours (-1: not checked)."""
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self._leader_epoch:
            raise errors.FencedLeaderEpochError(
                f"{self.topic}-{self.partition}: epoch {current_leader_epoch} is older than {self._leader_epoch}")
        if current_leader_epoch > self._leader_epoch:
            raise errors.UnknownLeaderEpochError(
                f"{self.topic}-{self.partition}: epoch {current_leader_epoch} is newer than {self._leader_epoch}")

    def _require_leader(self) -> LeaderState:
        if self._leader_state is None:
            raise errors.NotLeaderOrFollowerError(
                f"broker {self.local_id} is not the leader of {self.topic}-{self.partition} "
                f"(leader {self._leader_id})")
        return self._leader_state

    def _sync_leader_high_watermark(self, moved: bool) -> bool:
        """Copy the leader core's HW into the log (which stores, clamps and checkpoints it)."""
        if moved and self._leader_state is not None:
            self._log.update_high_watermark(self._leader_state.high_watermark)
        return moved

    # ------------------------------------------------------------ leader: produce

    def append_as_leader(self, records: bytes, required_acks: int, now_ms: int, lag_max_ms: int,
                         max_producer_id: int | None = None, verify_txn: bool = False,
                         verification_guard: VerificationGuard | None = None) -> LeaderAppendResult:
        """Validate, stamp and append a produced request's batches (Kafka's appendRecordsToLeader).

        acks=all is refused before anything is written when the ISR is already smaller than
        min.insync.replicas (S5.2)."""
        state = self._require_leader()
        min_isr = self._log.config.min_insync_replicas
        if required_acks == -1 and len(state.isr) < min_isr:
            raise errors.NotEnoughReplicasError(
                f"{self.topic}-{self.partition}: ISR {list(state.isr)} is smaller than "
                f"min.insync.replicas={min_isr}")
        info = self._log.append_as_leader(records, self._leader_epoch, now_ms, max_producer_id=max_producer_id,
                                          verify_txn=verify_txn, verification_guard=verification_guard)
        moved = state.on_local_append(self._log.log_end_offset, now_ms, lag_max_ms)
        return LeaderAppendResult(info, self._sync_leader_high_watermark(moved))

    def maybe_start_txn_verification(self, producer_id: int, now_ms: int, ttl_ms: int) -> VerificationGuard | None:
        """KIP-890 on the leader: None when ``producer_id``'s transaction is open here already, else
        the guard its first transactional batch must present once the coordinator verified it."""
        self._require_leader()
        return self._log.producer_state.maybe_start_verification(producer_id, now_ms, ttl_ms)

    def append_txn_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                          now_ms: int, lag_max_ms: int) -> LeaderAppendResult:
        """A COMMIT/ABORT marker from the transaction coordinator (WriteTxnMarkers; acks=all, so
        refused when the ISR is below min.insync.replicas, as a produce). Fencing: the log's
        producer state (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED)."""
        state = self._require_leader()
        min_isr = self._log.config.min_insync_replicas
        if len(state.isr) < min_isr:
            raise errors.NotEnoughReplicasError(
                f"{self.topic}-{self.partition}: ISR {list(state.isr)} is smaller than "
                f"min.insync.replicas={min_isr}")
        info = self._log.append_txn_marker(producer_id, producer_epoch, commit, coordinator_epoch,
                                           self._leader_epoch, now_ms)
        moved = state.on_local_append(self._log.log_end_offset, now_ms, lag_max_ms)
        return LeaderAppendResult(info, self._sync_leader_high_watermark(moved))

    def last_stable_offset(self) -> int:
        """KIP-98's LSO of this replica's log (read_committed fetches and ListOffsets)."""
        return self._log.last_stable_offset()

    def delayed_produce_outcome(self, required_offset: int, timed_out: bool) -> str:
        """What a parked acks=all produce ending at ``required_offset`` answers now (S5.1, S5.2)."""
        return delayed_produce_outcome(self._leader_state, self._log.high_watermark, required_offset,
                                       self._log.config.min_insync_replicas, timed_out)

    # ------------------------------------------------------------ leader: follower fetches and the ISR

    def validate_follower_fetch(self, replica_id: int, fetch_offset: int, current_leader_epoch: int) -> None:
        """Raise the error a follower's fetch at ``fetch_offset`` answers with, if any.

        The same checks decide whether the fetch is served and whether it is counted: an offset
        the leader never wrote (beyond its LEO) proves nothing about how far the follower copied,
        and a broker that is not an assigned replica has no place in the ISR or the HW."""
        self._require_leader()
        if replica_id not in self._replicas:
            raise errors.NotLeaderOrFollowerError(
                f"broker {replica_id} is not a replica of {self.topic}-{self.partition}")
        self.check_leader_epoch(current_leader_epoch)
        if not self._log.log_start_offset <= fetch_offset <= self._log.log_end_offset:
            raise errors.OffsetOutOfRangeError(
                f"offset {fetch_offset} is outside [{self._log.log_start_offset}, {self._log.log_end_offset}] "
                f"of {self.topic}-{self.partition}")

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, current_leader_epoch: int, now_ms: int,
                              lag_max_ms: int, clock: FetchClock | None = None) -> FollowerFetchResult:
        """S3.3: a valid follower fetch carries the follower's LEO (Kafka's updateFollowerFetchState).

        Raises (and counts nothing) when ``validate_follower_fetch`` does. Returns whether the HW
        moved and the ISR expansion to write, if the follower caught up (S4.3)."""
        self.validate_follower_fetch(replica_id, fetch_offset, current_leader_epoch)
        state = self._require_leader()
        moved, expand = state.on_follower_fetch(replica_id, fetch_offset, now_ms, lag_max_ms, clock)
        return FollowerFetchResult(self._sync_leader_high_watermark(moved), expand)

    def on_follower_session_forgot(self, replica_id: int, clock: FetchClock) -> None:
        """A follower's fetch session forgot this partition (see LeaderState.on_follower_session_forgot)."""
        if self._leader_state is not None:
            self._leader_state.on_follower_session_forgot(replica_id, clock)

    def maybe_shrink_isr(self, now_ms: int, lag_max_ms: int) -> IsrChange | None:
        """S4.2: the ISR shrink to write, if a follower has not caught up for ``lag_max_ms``; else
        S4.3: an expansion a session follower's fetches no longer propose (see LeaderState)."""
        if self._leader_state is None:
            return None
        return self._leader_state.maybe_shrink_isr(now_ms, lag_max_ms) \
            or self._leader_state.maybe_expand_isr_of_sessions(now_ms, lag_max_ms)

    def on_isr_committed(self, isr: Iterable[int], zk_version: int, now_ms: int, lag_max_ms: int) -> bool:
        """The state znode now holds ``isr`` at ``zk_version`` (our write, the controller's resend at
        the same epoch, or a conflicting write we adopt). Returns True if the HW moved: a shrink
        can let it pass records only the removed follower lacked (S3.4)."""
        self._isr = tuple(isr)
        self._zk_version = zk_version
        if self._leader_state is None:
            return False
        return self._sync_leader_high_watermark(
            self._leader_state.on_isr_committed(self._isr, zk_version, now_ms, lag_max_ms))

    def on_isr_write_failed(self, leader_epoch: int) -> None:
        """A proposal made at ``leader_epoch`` was not written: keep the old ISR, allow a new proposal.
        A failure reported after a newer LeaderAndIsr must not clear that epoch's own proposal."""
        if self._leader_state is not None and leader_epoch == self._leader_epoch:
            self._leader_state.on_isr_write_failed()

    # ------------------------------------------------------------ leader: OffsetsForLeaderEpoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """S8.3 on the leader: (largest epoch <= ``epoch``, where it ends here)."""
        return self._log.end_offset_for_epoch(epoch)

    # ------------------------------------------------------------ log start offset (DeleteRecords)

    def delete_records_on_leader(self, offset: int) -> int:
        """Kafka's Partition.deleteRecordsOnLeader: move the leader's log start offset to ``offset``
        (-1: the high watermark); refused on a log whose cleanup.policy lacks delete, and for an
        offset below 0 or beyond the high watermark. Returns the offset now required of every replica."""
        self._require_leader()
        if not self._log.config.delete:
            raise errors.PolicyViolationError(
                f"Records of partition {self.topic}-{self.partition} can not be deleted due to the configured policy")
        converted = self._log.high_watermark if offset == -1 else offset
        if converted < 0:
            raise errors.OffsetOutOfRangeError(
                f"the offset {offset} of {self.topic}-{self.partition} is neither -1 nor an offset")
        self._log.maybe_increment_log_start_offset(converted)
        return converted

    def record_follower_log_start(self, replica_id: int, log_start_offset: int) -> bool:
        """A valid follower fetch said where the follower's log starts; True when that moved."""
        if self._leader_state is None or self._follower_log_starts.get(replica_id) == log_start_offset:
            return False
        self._follower_log_starts[replica_id] = log_start_offset
        return True

    def low_watermark(self, live_brokers: Iterable[int]) -> int:
        """On the leader (Kafka's lowWatermarkIfLeader): the smallest log start offset of the replicas
        on live brokers, the leader's own included; a follower not heard from yet counts as -1."""
        self._require_leader()
        live = set(live_brokers)
        starts = [self._log.log_start_offset]
        starts += [self._follower_log_starts.get(r, -1) for r in self._replicas if r != self.local_id and r in live]
        return min(starts)

    def maybe_increment_log_start_offset_as_follower(self, leader_log_start_offset: int) -> bool:
        """Take the leader's log start offset from a fetch answer (Kafka's follower
        maybeIncrementLogStartOffset), within our high watermark; True when it moved."""
        if self._leader_state is not None or leader_log_start_offset < 0:
            return False
        return self._log.maybe_increment_log_start_offset(min(leader_log_start_offset, self._log.high_watermark))

    # ------------------------------------------------------------ follower: fetched data and truncation

    def _require_follower(self, what: str) -> None:
        # A leader's log is the reference its followers copy: it never truncates (S8).
        if self._leader_state is not None:
            raise errors.NotLeaderOrFollowerError(
                f"{self.topic}-{self.partition}: broker {self.local_id} leads at epoch {self._leader_epoch}; "
                f"it does not {what}")

    def append_as_follower(self, records: bytes, leader_high_watermark: int, now_ms: int) -> LogAppendInfo | None:
        """Append what the leader sent (may be nothing) and take its HW, capped at our LEO (S3.5)."""
        self._require_follower("append as a follower")
        info = self._log.append_as_follower(records, now_ms) if records else None
        self._log.update_high_watermark(follower_high_watermark(self._log.log_end_offset, leader_high_watermark))
        return info

    def follower_truncation_offset(self, leader_epoch: int, leader_end_offset: int) -> TruncationDecision:
        """S8.3: where to truncate given the leader's OffsetsForLeaderEpoch answer (no change made)."""
        return truncation_offset(self._log.epoch_cache, self._log.log_end_offset, leader_epoch, leader_end_offset)

    def truncate_to(self, offset: int) -> bool:
        """Cut the log back to ``offset`` (whole batches); the HW follows it down. True if anything went."""
        self._require_follower("truncate")
        return self._log.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """The leader's log starts beyond ours: drop everything and restart, empty, at ``offset``."""
        self._require_follower("truncate")
        self._log.truncate_fully_and_start_at(offset)

    def truncate_epochs_from_end(self, offset: int) -> None:
        """KIP-279: forget our epochs from ``offset`` on before asking the leader again (checkpointed)."""
        self._require_follower("truncate its epochs")
        self._log.truncate_epochs_from_end(offset)
