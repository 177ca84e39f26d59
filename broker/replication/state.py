"""The replication core of one partition, pure: no sockets, no clock, no disk.

Theory of operation (SPEC S3, S4, S5, S8)
-----------------------------------------
On the **leader**, ``LeaderState`` tracks every follower's log end offset as
carried by its fetch offset (S3.3) and when it last caught up:

* a fetch at or beyond the leader's LEO at fetch time means "caught up now";
  a fetch at or beyond the leader's LEO of the *previous* fetch means "was
  caught up when it sent the previous one" (Kafka's lastCaughtUpTimeMs);
  a follower on a fetch session (KIP-227) names a partition only when its fetch
  offset changes, so while that offset is the LEO its session's ``FetchClock``
  (the time of its last fetch) is its caught-up time, and an append
  materialises that time before moving the LEO (``caught_up_time_ms``);
* the high watermark is the minimum LEO of the leader and every ISR member,
  plus any follower caught up within replica.lag.time.max.ms (it is about to
  join), and it never moves backwards (S3.4);
* a follower in the ISR that has not caught up for replica.lag.time.max.ms
  is proposed for removal (S4.2); one outside whose LEO reached the HW (and
  the start of the current epoch) is proposed for addition (S4.3).

ISR changes are *proposals*: the shell writes the state znode conditionally
on ``zk_version`` and reports back with ``on_isr_committed`` (or
``on_isr_write_failed``, which means this leader has been deposed). While a
change is in flight the HW is computed over the larger of the old and new
ISR, so it can never pass a replica that may still be counted as in sync.

On a **follower**, the HW is min(own LEO, leader HW) (S3.5), and the
truncation point after a leader change comes from OffsetsForLeaderEpoch,
never from the HW (S8.3, KIP-101/KIP-279): ``truncation_offset``.

Every method takes ``now_ms`` where time matters and returns decisions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from broker.log.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache


@dataclass(slots=True)
class FetchClock:
    """When a follower last fetched on its fetch session (broker.replication.fetch_session).

    Shared by every partition the session holds: one fetch moves it for all of them, so a
    partition the fetch did not name (its fetch offset unchanged) needs no work to stay alive."""

    last_fetch_ms: int = 0


@dataclass
class ReplicaProgress:
    """The leader's view of one follower."""

    log_end_offset: int = -1
    last_caught_up_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = -1
    last_fetch_time_ms: int = 0
    # The session the follower last named this partition on, if any (see caught_up_time_ms).
    clock: FetchClock | None = None


@dataclass(frozen=True, slots=True)
class IsrChange:
    new_isr: tuple[int, ...]
    expected_zk_version: int
    reason: str


@dataclass(frozen=True, slots=True)
class AckDecision:
    """Whether a delayed acks=all produce up to ``required_offset`` can complete."""

    done: bool
    not_enough_replicas: bool = False


# The three decisions, made once: one is asked for every delayed produce on each wake-up.
_ACKED = AckDecision(True)
_ACKED_TOO_FEW = AckDecision(True, True)
_NOT_YET = AckDecision(False)


class LeaderState:
    def __init__(self, *, local_id: int, leader_epoch: int, replicas: Iterable[int], isr: Iterable[int],
                 zk_version: int, high_watermark: int, log_end_offset: int, now_ms: int) -> None:
        self.local_id = local_id
        self.leader_epoch = leader_epoch
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.zk_version = zk_version
        self.high_watermark = high_watermark
        self.log_end_offset = log_end_offset
        # S8.2: the first offset of this leader's epoch; a follower joins only past it.
        self.epoch_start_offset = log_end_offset
        self.pending_isr: tuple[int, ...] | None = None
        self.followers: dict[int, ReplicaProgress] = {}
        for r in self.replicas:
            if r != local_id:
                # Members of the ISR start as caught up now, others as never (Kafka's makeLeader).
                self.followers[r] = ReplicaProgress(last_caught_up_time_ms=now_ms if r in self.isr else 0)

    # ------------------------------------------------------------ derived

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending_isr is None:
            return self.isr
        return tuple(sorted(set(self.isr) | set(self.pending_isr)))

    def follower_log_end_offset(self, replica_id: int) -> int:
        p = self.followers.get(replica_id)
        return p.log_end_offset if p else -1

    # ------------------------------------------------------------ events

    def caught_up_time_ms(self, p: ReplicaProgress) -> int:
        """When follower ``p`` last caught up. A follower fetching on a session names a partition
        only when its fetch offset changes: if that offset is still the LEO, every later fetch on
        the session found it caught up, so its session's clock is its last caught-up time."""
        c = p.clock
        if c is not None and p.log_end_offset >= self.log_end_offset and c.last_fetch_ms > p.last_caught_up_time_ms:
            return c.last_fetch_ms
        return p.last_caught_up_time_ms

    def on_local_append(self, log_end_offset: int, now_ms: int, lag_max_ms: int) -> bool:
        """The leader appended; returns True if the HW moved (only possible with ISR = [leader])."""
        for p in self.followers.values():
            if p.clock is not None and p.log_end_offset >= self.log_end_offset:
                # Caught up until this append: as of its last session fetch (Kafka's rule of the
                # previous fetch, for a partition the follower's fetches do not name).
                p.last_caught_up_time_ms = max(p.last_caught_up_time_ms, p.clock.last_fetch_ms)
        self.log_end_offset = log_end_offset
        return self.maybe_increment_high_watermark(now_ms, lag_max_ms)

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int,
                          lag_max_ms: int, clock: FetchClock | None = None) -> tuple[bool, IsrChange | None]:
        """S3.3: a follower fetched from ``fetch_offset`` (its LEO). Returns (HW moved, ISR expansion).

        ``clock`` is the fetch session the fetch came on (None: sessionless, every fetch names
        every partition)."""
        p = self.followers.get(replica_id)
        if p is None:
            return False, None
        p.clock = clock
        if fetch_offset >= self.log_end_offset:
            p.last_caught_up_time_ms = max(p.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= p.last_fetch_leader_log_end_offset >= 0:
            p.last_caught_up_time_ms = max(p.last_caught_up_time_ms, p.last_fetch_time_ms)
        p.log_end_offset = fetch_offset
        p.last_fetch_leader_log_end_offset = self.log_end_offset
        p.last_fetch_time_ms = now_ms
        expand = self.maybe_expand_isr(replica_id)
        moved = self.maybe_increment_high_watermark(now_ms, lag_max_ms)
        return moved, expand

    def on_follower_session_forgot(self, replica_id: int, clock: FetchClock) -> None:
        """The follower's session stopped holding this partition (it backs off, truncates or left):
        its clock no longer says anything about it. Caught up as of now if it was; from here on only
        a fetch that names the partition counts (S4.2: it falls out if none comes)."""
        p = self.followers.get(replica_id)
        if p is None or p.clock is not clock:
            return
        p.last_caught_up_time_ms = self.caught_up_time_ms(p)
        p.clock = None

    def maybe_increment_high_watermark(self, now_ms: int, lag_max_ms: int) -> bool:
        """S3.4: min LEO over leader, ISR and recently caught-up followers; never backwards."""
        new_hw = self.log_end_offset
        isr = self.maximal_isr
        for r, p in self.followers.items():
            counts = r in isr or now_ms - self.caught_up_time_ms(p) <= lag_max_ms
            if counts and p.log_end_offset < new_hw:
                new_hw = p.log_end_offset
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            return True
        return False

    def maybe_expand_isr(self, replica_id: int) -> IsrChange | None:
        """S4.3: a follower outside the ISR rejoins once its LEO reaches the HW."""
        if self.pending_isr is not None or replica_id in self.isr or replica_id not in self.followers:
            return None
        leo = self.followers[replica_id].log_end_offset
        if leo >= self.high_watermark and leo >= self.epoch_start_offset:
            new_isr = tuple(sorted((*self.isr, replica_id)))
            self.pending_isr = new_isr
            return IsrChange(new_isr, self.zk_version, f"replica {replica_id} caught up to {leo}")
        return None

    def maybe_expand_isr_of_sessions(self, now_ms: int, lag_max_ms: int) -> IsrChange | None:
        """S4.3 for followers whose fetch sessions no longer name this partition: a follower on a
        session fetching within ``lag_max_ms``, caught up, but left out of the ISR (its expansion was
        refused while another change was in flight) would otherwise never be proposed again - without
        a session, every fetch retried it (Kafka's leader updates every session partition per fetch)."""
        for r, p in self.followers.items():
            if r not in self.isr and p.clock is not None and now_ms - p.clock.last_fetch_ms <= lag_max_ms:
                change = self.maybe_expand_isr(r)
                if change is not None:
                    return change
        return None

    def maybe_shrink_isr(self, now_ms: int, lag_max_ms: int) -> IsrChange | None:
        """S4.2: followers that have not caught up for replica.lag.time.max.ms leave the ISR."""
        if self.pending_isr is not None:
            return None
        # A loop, not a comprehension: it runs for every led partition every lag/2 (at 10,000
        # partitions, the largest part of an idle broker's work), and nearly always finds no one.
        out: list[int] = []
        followers = self.followers
        for r in self.isr:
            if r != self.local_id:
                p = followers.get(r)
                if p is not None and now_ms - self.caught_up_time_ms(p) > lag_max_ms:
                    out.append(r)
        if not out:
            return None
        new_isr = tuple(r for r in self.isr if r not in out)
        self.pending_isr = new_isr
        lags = ", ".join(f"{r} (leo {self.followers[r].log_end_offset})" for r in out)
        return IsrChange(new_isr, self.zk_version, f"out of sync for more than {lag_max_ms} ms: {lags}")

    def on_isr_committed(self, isr: tuple[int, ...], zk_version: int, now_ms: int, lag_max_ms: int) -> bool:
        """The state znode now says ``isr``; returns True if the HW moved (S3.4: re-evaluate on shrink)."""
        self.isr = isr
        self.zk_version = zk_version
        self.pending_isr = None
        return self.maybe_increment_high_watermark(now_ms, lag_max_ms)

    def on_isr_write_failed(self) -> None:
        """The conditional write lost: someone newer owns the partition. Keep the old ISR."""
        self.pending_isr = None

    def check_enough_replicas_reach(self, required_offset: int, min_insync_replicas: int) -> AckDecision:
        """S5.1/S5.2 for a delayed acks=all produce ending at ``required_offset`` (exclusive)."""
        if self.high_watermark >= required_offset:
            return _ACKED_TOO_FEW if len(self.isr) < min_insync_replicas else _ACKED
        return _NOT_YET


# What a delayed acks=all produce answers (Kafka's DelayedProduce.tryComplete / onComplete).
ACK = "ack"
WAIT = "wait"
NOT_ENOUGH_REPLICAS_AFTER_APPEND = "not_enough_replicas_after_append"
NOT_LEADER = "not_leader"
TIMED_OUT = "timed_out"


def delayed_produce_outcome(state: LeaderState | None, local_high_watermark: int, required_offset: int,
                            min_insync_replicas: int, timed_out: bool) -> str:
    """S5.1/S5.2 for a pending acks=all produce ending at ``required_offset`` (exclusive).

    Leadership gone: answered (NOT_LEADER unless the records were already committed). Still the
    leader - whatever the leader epoch, an ISR shrink bumps it - wait for the high watermark; once
    it passes, acknowledge only if the ISR is at least min.insync.replicas: a shrunken ISR moves
    the HW past records only the leader has (issue 14 item 1).
    """
    if state is None:
        return ACK if local_high_watermark >= required_offset else NOT_LEADER
    decision = state.check_enough_replicas_reach(required_offset, min_insync_replicas)
    if not decision.done:
        return TIMED_OUT if timed_out else WAIT
    return NOT_ENOUGH_REPLICAS_AFTER_APPEND if decision.not_enough_replicas else ACK


def follower_high_watermark(log_end_offset: int, leader_high_watermark: int) -> int:
    """S3.5."""
    return min(log_end_offset, leader_high_watermark)


@dataclass(frozen=True, slots=True)
class TruncationDecision:
    offset: int
    # False: truncate there, then ask again with the follower's new latest epoch (KIP-279).
    completed: bool


def truncation_offset(local_cache: LeaderEpochCache, local_log_end_offset: int, leader_epoch: int,
                      leader_end_offset: int) -> TruncationDecision:
    """S8.3: where a new follower truncates, from the leader's OffsetsForLeaderEpoch answer.

    ``leader_epoch``/``leader_end_offset`` answer the follower's own latest epoch:
    the leader's largest epoch <= it and where that epoch ends on the leader.
    """
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        # The leader knows nothing to compare with: keep the log; an out-of-range fetch reconciles.
        return TruncationDecision(local_log_end_offset, True)
    if leader_epoch == UNDEFINED_EPOCH:
        return TruncationDecision(min(leader_end_offset, local_log_end_offset), True)
    follower_epoch, follower_end = local_cache.end_offset_for(leader_epoch, local_log_end_offset)
    if follower_epoch == UNDEFINED_EPOCH:
        return TruncationDecision(min(leader_end_offset, local_log_end_offset), True)
    if follower_epoch != leader_epoch:
        # We never saw the epoch the leader named: cut back to the end of our largest
        # epoch below it and ask again.
        return TruncationDecision(min(follower_end, local_log_end_offset), False)
    return TruncationDecision(min(follower_end, leader_end_offset, local_log_end_offset), True)
