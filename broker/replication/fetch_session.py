"""Fetch sessions (KIP-227): a fetch names only what changed, its answer only what moved. Pure.

Theory of operation (SPEC S15, S3.3, S4.2)
------------------------------------------
Without a session every follower fetch names every partition the follower
copies from this leader and every answer lists all of them: at thousands of
partitions the work per fetch (building, encoding, parsing and walking them on
both sides) grows with the partitions followed, not with the records moved. A
session keeps on the leader, per partition, what the fetches said (fetch
offset, log start, current leader epoch, max bytes) and what the answers said
(high watermark, log start):

* a **full** fetch (epoch ``INITIAL_EPOCH``) names every partition and opens a
  session (with an existing id it replaces that session);
  ``FINAL_EPOCH`` (or, on this project's gRPC wire, no epoch at all) is a
  sessionless fetch, as before sessions;
* an **incremental** fetch (the session's id and the epoch it expects next)
  names only partitions added or whose fetch state changed, and ``forgotten``
  those that leave; the others keep their cached state;
* the answer to an incremental fetch lists only partitions with something
  new: records, a moved high watermark or log start, or an error;
* the session keeps the last fetch's isolation level: a read_committed
  consumer's parked fetch waits for records below the last stable offset.

To keep the leader's work per fetch proportional to what moved, each session
keeps a **dirty** set: the partitions the last request named, plus those the
shell marked (``mark_changed``) since the last answer because they were
appended to, their high watermark moved or their leadership changed, plus
those the last answer carried records for (read again until a fetch names a
new offset: a fetcher that dropped the answer gets it again, as from Kafka,
whose session re-reads every partition from its cached offset). An
incremental fetch reads only its dirty partitions; a parked one is woken only
by marks on its own partitions, and checks only the partitions marked since it
last looked (``take_fresh``), never a walk over all it follows.

A session is also a **liveness clock** (``FetchClock``, in
``broker.replication.state``): a follower that fetched on its session at time
t, and whose cached fetch offset of a partition is the leader's log end offset,
was caught up at t (S3.3) without naming that partition. The leader's replica
state reads the clock; a session that stops fetching stops its clock, and the
follower falls out of the ISR after replica.lag.time.max.ms (S4.2) as before.

Errors as Kafka's ``FetchManager``: an unknown id (evicted, or this broker
restarted) is FETCH_SESSION_ID_NOT_FOUND, a wrong epoch
INVALID_FETCH_SESSION_EPOCH; either way the fetcher starts over with a full
fetch. The cache holds at most ``max_slots`` sessions
(max.incremental.fetch.session.cache.slots); a follower's new session replaces
its previous one on this broker; otherwise a new session evicts the least
recently used consumer session idle for ``min_eviction_ms``, and when none can
go the fetch is answered without a session (id 0), as Kafka does.

No I/O and no clock: ``now_ms`` is passed in, ids come from the given ``Random``.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from broker.replication.state import FetchClock
from proto import errors
from proto.names import TopicPartition

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 0x7FFFFFFF

# Partitions all consumer sessions may hold together (SPEC S13: every resource bounded; Kafka bounds
# only the number of sessions, and 1,000 of max.request.partitions each would be 10 million cached
# partitions). Beyond it a new consumer session is not made (answered without one, as Kafka does when
# its cache is full) and one that grows past it is dropped (FETCH_SESSION_ID_NOT_FOUND: the client
# starts over with a full fetch). Followers' sessions are not counted: they hold real replicas.
MAX_CONSUMER_SESSION_PARTITIONS = 100_000

SESSIONLESS = "sessionless"
FULL = "full"
INCREMENTAL = "incremental"


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (Kafka's FetchMetadata.nextEpoch): wraps to 1, never to 0."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch >= MAX_EPOCH else epoch + 1


class PartitionFetch(NamedTuple):
    """What one fetch request says about one partition. A NamedTuple (an immutable value, as a
    frozen dataclass, built 4x faster): one per partition a fetch names, and at thousands of
    partitions every produced record makes each follower name its partition once (issue 29)."""

    fetch_offset: int
    log_start_offset: int
    max_bytes: int
    current_leader_epoch: int


@dataclass(slots=True)
class CachedPartition:
    """A session's state of one partition: the last request's fields and the last answer's."""

    fetch_offset: int
    log_start_offset: int
    max_bytes: int
    current_leader_epoch: int
    answered_high_watermark: int = -1
    answered_log_start_offset: int = -1

    def update(self, f: PartitionFetch) -> None:
        self.fetch_offset = f.fetch_offset
        self.log_start_offset = f.log_start_offset
        self.max_bytes = f.max_bytes
        self.current_leader_epoch = f.current_leader_epoch

    def maybe_answer(self, *, error: bool, has_records: bool, high_watermark: int, log_start_offset: int) -> bool:
        """Does an incremental answer list this partition? Records what it says when it does."""
        if not (error or has_records or high_watermark != self.answered_high_watermark
                or log_start_offset != self.answered_log_start_offset):
            return False
        if not error:
            self.answered_high_watermark = high_watermark
            self.answered_log_start_offset = log_start_offset
        return True


@dataclass(eq=False, slots=True)
class FetchSession:
    session_id: int
    replica_id: int
    epoch: int  # the epoch the next incremental fetch must carry
    created_ms: int
    last_used_ms: int
    clock: FetchClock
    partitions: dict[TopicPartition, CachedPartition] = field(default_factory=dict)
    # Partitions to read on the next answer (named, or marked since the last answer).
    dirty: set[TopicPartition] = field(default_factory=set)
    # Partitions marked since a parked fetch last looked (see take_fresh) - dirty or not: a parked
    # fetch puts its unready candidates back in ``dirty``, and a mark must still wake it.
    fresh: set[TopicPartition] = field(default_factory=set)
    closed: bool = False
    # The isolation level of the last fetch on the session (KIP-98): a read_committed consumer's
    # parked fetch may answer only with records below the last stable offset, not the high watermark
    # - else an open transaction answers it at once, empty, and the consumer refetches in a loop.
    read_committed: bool = False
    # Partitions with records the last answer had no room for (its max bytes): read first on the
    # next one, else a partition late in the dirty set's order could miss every full answer (Kafka
    # rotates its sessions' partitions for the same reason).
    unfitted: list[TopicPartition] = field(default_factory=list)

    @property
    def privileged(self) -> bool:
        """A follower's session: evicted only by that follower's next one (Kafka's privileged)."""
        return self.replica_id >= 0

    def take_dirty(self) -> list[TopicPartition]:
        """The partitions to read now, those the last answer had no room for first; the caller puts
        back those it could not answer."""
        dirty = self.dirty
        if self.unfitted:
            first = [tp for tp in self.unfitted if tp in dirty]
            taken = set(first)
            out = first + [tp for tp in dirty if tp not in taken]
        else:
            out = list(dirty)
        dirty.clear()
        self.fresh.clear()
        return out

    def take_fresh(self) -> set[TopicPartition]:
        """Partitions marked since the last call (or answer): a parked fetch re-checks only these."""
        out = self.fresh
        self.fresh = set()
        return out


@dataclass(frozen=True, slots=True)
class FetchContext:
    """How to answer one fetch: without a session, fully (opening one), or incrementally."""

    kind: str
    session: FetchSession | None

    @property
    def response_session_id(self) -> int:
        return self.session.session_id if self.session is not None else INVALID_SESSION_ID


class FetchSessionCache:
    def __init__(self, max_slots: int = 1000, min_eviction_ms: int = 120_000,
                 rng: random.Random | None = None,
                 max_consumer_partitions: int = MAX_CONSUMER_SESSION_PARTITIONS) -> None:
        self.max_slots = max_slots
        self.max_consumer_partitions = max_consumer_partitions
        self.consumer_partitions = 0  # held by consumer (non-privileged) sessions
        self.min_eviction_ms = min_eviction_ms
        self._rng = rng if rng is not None else random.Random()
        self.sessions: dict[int, FetchSession] = {}
        # Which sessions hold a partition: mark_changed touches only those.
        self._holders: dict[TopicPartition, set[int]] = {}
        self.evictions = 0

    def __len__(self) -> int:
        return len(self.sessions)

    # ------------------------------------------------------------ requests

    def new_context(self, *, session_id: int | None, epoch: int | None, replica_id: int,
                    named: Iterable[tuple[TopicPartition, PartitionFetch]], forgotten: Iterable[TopicPartition],
                    now_ms: int, max_partitions: int = 1 << 31, read_committed: bool = False) -> FetchContext:
        """Apply one fetch request's session fields (Kafka's FetchManager.newContext).
        ``read_committed``: the request's isolation level, kept on the session it opens or updates.

        Raises FetchSessionIdNotFoundError / InvalidFetchSessionEpochError, or InvalidRequestError
        when an incremental fetch would hold more than ``max_partitions`` partitions."""
        sid = session_id or INVALID_SESSION_ID
        if epoch is None:
            return FetchContext(SESSIONLESS, None)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if sid != INVALID_SESSION_ID:
                self.remove(sid)
            if epoch == FINAL_EPOCH:
                return FetchContext(SESSIONLESS, None)
            session = self._create(replica_id, now_ms)
            if session is None:
                return FetchContext(SESSIONLESS, None)
            session.read_committed = read_committed
            for tp, f in named:
                self._add(session, tp, f)
            session.dirty.clear()
            if self.consumer_partitions > self.max_consumer_partitions:
                self.remove(session.session_id)  # answered in full, without a session
                return FetchContext(SESSIONLESS, None)
            return FetchContext(FULL, session)
        session = self.sessions.get(sid)
        if session is None or session.replica_id != replica_id:
            raise errors.FetchSessionIdNotFoundError(f"fetch session {sid} is not known to this broker")
        if epoch != session.epoch:
            raise errors.InvalidFetchSessionEpochError(
                f"fetch session {sid} expects epoch {session.epoch}, the request has {epoch}")
        for tp in forgotten:
            self._forget(session, tp)
        for tp, f in named:
            self._add(session, tp, f)
        if len(session.partitions) > max_partitions:
            self.remove(sid)
            raise errors.InvalidRequestError(
                f"fetch session {sid} would hold more than {max_partitions} partitions (max.request.partitions)")
        if self.consumer_partitions > self.max_consumer_partitions:
            self.remove(sid)
            raise errors.FetchSessionIdNotFoundError(
                f"fetch session {sid} was dropped: consumer sessions would hold more than "
                f"{self.max_consumer_partitions} partitions on this broker")
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = now_ms
        session.read_committed = read_committed
        return FetchContext(INCREMENTAL, session)

    def mark_changed(self, tp: TopicPartition) -> list[int]:
        """``tp`` was appended to, its HW or leadership moved: the sessions holding it (to wake)."""
        ids = self._holders.get(tp)
        if not ids:
            return []
        for sid in ids:
            s = self.sessions[sid]
            s.dirty.add(tp)
            s.fresh.add(tp)
        return list(ids)

    def remove(self, session_id: int) -> FetchSession | None:
        s = self.sessions.pop(session_id, None)
        if s is None:
            return None
        if not s.privileged:
            self.consumer_partitions -= len(s.partitions)
        for tp in s.partitions:
            holders = self._holders.get(tp)
            if holders is not None:
                holders.discard(session_id)
                if not holders:
                    del self._holders[tp]
        s.closed = True
        return s

    # ------------------------------------------------------------ internals

    def _create(self, replica_id: int, now_ms: int) -> FetchSession | None:
        if replica_id >= 0:
            # A follower fetches this leader through one fetcher: its older session is dead.
            for old in [s.session_id for s in self.sessions.values() if s.replica_id == replica_id]:
                self.remove(old)
        if len(self.sessions) >= self.max_slots and not self._evict_one(replica_id >= 0, now_ms):
            return None
        sid = self._new_id()
        s = FetchSession(sid, replica_id, next_epoch(INITIAL_EPOCH), now_ms, now_ms, FetchClock(now_ms))
        self.sessions[sid] = s
        return s

    def _evict_one(self, privileged: bool, now_ms: int) -> bool:
        """Kafka's rule: a stale consumer session (idle min_eviction_ms) goes first; a follower may
        also evict any consumer session. Followers' sessions are never evicted by others."""
        candidates = [s for s in self.sessions.values() if not s.privileged]
        if not candidates:
            return False
        lru = min(candidates, key=lambda s: s.last_used_ms)
        if not privileged and now_ms - lru.last_used_ms < self.min_eviction_ms:
            return False
        self.remove(lru.session_id)
        self.evictions += 1
        return True

    def _new_id(self) -> int:
        while True:
            sid = self._rng.randint(1, MAX_EPOCH)
            if sid not in self.sessions:
                return sid

    def _add(self, s: FetchSession, tp: TopicPartition, f: PartitionFetch) -> None:
        cached = s.partitions.get(tp)
        if cached is None:
            s.partitions[tp] = CachedPartition(f.fetch_offset, f.log_start_offset, f.max_bytes,
                                               f.current_leader_epoch)
            self._holders.setdefault(tp, set()).add(s.session_id)
            if not s.privileged:
                self.consumer_partitions += 1
        else:
            cached.update(f)
        s.dirty.add(tp)

    def _forget(self, s: FetchSession, tp: TopicPartition) -> None:
        if s.partitions.pop(tp, None) is None:
            return
        if not s.privileged:
            self.consumer_partitions -= 1
        s.dirty.discard(tp)
        holders = self._holders.get(tp)
        if holders is not None:
            holders.discard(s.session_id)
            if not holders:
                del self._holders[tp]
