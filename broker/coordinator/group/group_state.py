"""The group coordinator's pure core (Kafka 2.x ``GroupCoordinator`` + ``GroupMetadata``).

Theory of operation
-------------------
No I/O, no clock, no randomness: every call takes ``now_ms`` (and, for a new
member, the id the shell generated) and returns what to answer. Answers that
must wait for other members (JoinGroup waits for the join barrier, SyncGroup
for the leader's assignment) come back later as ``Completion`` values from
whichever call (or ``tick``) released them; the shell holds one future per
(group, member, api) and resolves it with the completion.

A group moves through Kafka's states::

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable | CompletingRebalance --join of a new member / changed member, leave,
                                   session timeout--> PreparingRebalance
    PreparingRebalance --last member gone--> Empty
    any --offsets expired/group deleted--> Dead (not used: offsets live in ZooKeeper)

* Join barrier: in PreparingRebalance the join completes once every known
  member has sent JoinGroup, or when the rebalance timeout (the largest of the
  members') runs out; members that did not rejoin by then are removed. The
  generation is then incremented, the first member to have joined (or the
  previous leader if it rejoined) becomes leader and alone receives every
  member's subscription metadata; the protocol is the first of the leader's
  that every member supports.
* Initial rebalance delay (Kafka's ``group.initial.rebalance.delay.ms``, InitialDelayedJoin): the
  first join of an Empty group does not complete at once but after the delay, extended by another
  delay (within the rebalance timeout) each time new members joined meanwhile - so that members
  started together get one generation, not one each.
* Sync barrier: followers' SyncGroup waits until the leader's SyncGroup brings
  the assignment of every member; then all get theirs and the group is Stable.
* Member ids (KIP-394): a JoinGroup v4+ without a member id is answered
  MEMBER_ID_REQUIRED with a fresh id, kept pending (it holds the join barrier)
  until the member joins with it or its session timeout passes.
* Static membership (KIP-345): a member that joins with a ``group_instance_id`` is static. It
  skips MEMBER_ID_REQUIRED; when it restarts and joins again without a member id, it takes the
  place of its old member id (which is fenced: FENCED_INSTANCE_ID on anything it sends later,
  parked requests included). In Stable, with a protocol that leaves the group's choice unchanged,
  that rejoin answers at once with the current generation and the old leader id - no rebalance,
  the member's SyncGroup gets its old assignment; in CompletingRebalance it starts a rebalance
  (the leader may be assigning the old id). Kafka's ``updateStaticMemberAndRebalance``.
* Liveness: a member is alive while it heartbeats within its session timeout
  (a heartbeat of the current generation only); a member parked in JoinGroup is
  kept alive (its answer is what it waits for). Heartbeats answer
  REBALANCE_IN_PROGRESS while the group prepares a rebalance: the member rejoins.
* Offsets: OffsetCommit is fenced by generation and member id (ILLEGAL_GENERATION,
  UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS while the group awaits its
  assignment). A commit with generation -1 is accepted only
  for an Empty group (the admin's reset-offsets, a consumer without a group
  protocol). ``commit_offsets`` only validates: the shell writes ZooKeeper and
  then calls ``offsets_committed`` so the cache never runs ahead of storage.
* Transactional offsets (KIP-98, Kafka's ``pendingTransactionalOffsetCommits``): a
  TxnOffsetCommit's offsets are kept per producer id beside the committed ones
  (``prepare_txn_offsets`` decides, the shell writes, ``txn_offsets_written`` records);
  a plain OffsetCommit of the same partition meanwhile leaves them alone - both are
  kept. At the transaction's COMMIT marker each pending offset becomes the committed
  one unless the committed one was written later (``txn_offsets_to_commit``: Kafka
  compares the commit records' log offsets, here their commit times); ABORT drops them.
  DeleteGroups takes them with the group, OffsetDelete those of its partitions
  (``remove_offsets``, Kafka's removeOffsets); offset expiry removes expired committed
  offsets as before (Kafka 2.8 does not look at pending transactional ones there), but a
  group with pending transactional offsets is not deleted by expiry (Kafka's
  ``hasOffsets`` keeps it out of Dead) - ``expiry_empties_group``.

Error codes are Kafka's (proto/errors.py): ``NONE`` = 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Final

from proto import errors

EMPTY: Final = "Empty"
PREPARING_REBALANCE: Final = "PreparingRebalance"
COMPLETING_REBALANCE: Final = "CompletingRebalance"
STABLE: Final = "Stable"
DEAD: Final = "Dead"

NONE: Final = 0
UNKNOWN_MEMBER_ID: Final = errors.UnknownMemberIdError.code
ILLEGAL_GENERATION: Final = errors.IllegalGenerationError.code
REBALANCE_IN_PROGRESS: Final = errors.RebalanceInProgressError.code
INCONSISTENT_GROUP_PROTOCOL: Final = errors.InconsistentGroupProtocolError.code
INVALID_SESSION_TIMEOUT: Final = errors.InvalidSessionTimeoutError.code
MEMBER_ID_REQUIRED: Final = errors.MemberIdRequiredError.code
FENCED_INSTANCE_ID: Final = errors.FencedInstanceIdError.code
NON_EMPTY_GROUP: Final = errors.NonEmptyGroupError.code
PRODUCER_FENCED: Final = errors.ProducerFencedError.code
GROUP_SUBSCRIBED_TO_TOPIC: Final = errors.GroupSubscribedToTopicError.code
CONSUMER_PROTOCOL: Final = "consumer"

JOIN: Final = "join"
SYNC: Final = "sync"


@dataclass(frozen=True)
class MemberMetadata:
    member_id: str
    client_id: str
    client_host: str
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    last_heartbeat_ms: int
    assignment: bytes = b""
    awaiting_join: bool = False
    awaiting_sync: bool = False
    group_instance_id: str = ""  # KIP-345: non-empty for a static member

    def metadata(self, protocol: str) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")

    def supports(self, protocol: str) -> bool:
        return any(name == protocol for name, _ in self.protocols)


@dataclass(frozen=True)
class OffsetAndMetadata:
    """A committed offset with the client's metadata string (Kafka's OffsetAndMetadata)."""
    offset: int
    metadata: str = ""
    # When the coordinator wrote it (offsets.retention.minutes counts from here); -1 unknown. Not
    # part of equality: two commits of the same offset and metadata are the same committed offset.
    commit_timestamp_ms: int = field(default=-1, compare=False)


@dataclass(frozen=True)
class PendingTxnOffsetCommit:
    """One transaction's offsets for a group (TxnOffsetCommit), not yet committed: the producer
    epoch that wrote them last, and per partition the offset with its TxnOffsetCommit's time."""
    producer_epoch: int
    offsets: dict[tuple[str, int], OffsetAndMetadata]


@dataclass(frozen=True)
class JoinGroupResult:
    error_code: int
    generation_id: int = -1
    protocol_name: str = ""
    leader_id: str = ""
    member_id: str = ""
    # (member id, metadata) of every member: only in the leader's answer.
    members: tuple[tuple[str, bytes], ...] = ()
    # The static members' instance ids, by member id (KIP-345; in the leader's answer, JoinGroup v5+).
    instance_ids: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class SyncGroupResult:
    error_code: int
    assignment: bytes = b""


@dataclass(frozen=True)
class Completion:
    """A parked request's answer: ``api`` is JOIN or SYNC."""
    group_id: str
    member_id: str
    api: str
    result: JoinGroupResult | SyncGroupResult


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes
    group_instance_id: str = ""


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]


@dataclass
class GroupMetadata:
    """One group's mutable state (owned by the core; values handed out are frozen)."""
    group_id: str
    state: str = EMPTY
    generation_id: int = 0
    protocol_type: str = ""
    protocol: str = ""
    leader_id: str = ""
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    # Join order: the first joined member leads a new generation.
    join_order: list[str] = field(default_factory=list)
    rebalance_deadline_ms: int = 0
    # group.initial.rebalance.delay.ms: no join completes before this (0: no delay running); what is
    # left of the rebalance timeout for extending it; whether a new member joined since it was set.
    initial_delay_until_ms: int = 0
    initial_delay_remaining_ms: int = 0
    new_member_added: bool = False
    # KIP-394: ids handed out with MEMBER_ID_REQUIRED, not yet joined with -> when they expire
    # (the session timeout of the join that asked). They hold the join barrier as members do.
    pending_members: dict[str, int] = field(default_factory=dict)
    # KIP-345: group.instance.id -> the member id that holds it now.
    static_members: dict[str, str] = field(default_factory=dict)
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    # When the group last became Empty (Kafka's currentStateTimestamp for offset expiry); -1 unknown.
    empty_since_ms: int = -1
    # KIP-98: producer id -> the offsets its open transaction committed (TxnOffsetCommit).
    pending_txn_offsets: dict[int, PendingTxnOffsetCommit] = field(default_factory=dict)

    def describe(self) -> GroupDescription:
        return GroupDescription(self.group_id, self.state, self.protocol_type,
                                self.protocol if self.state in (STABLE, COMPLETING_REBALANCE) else "",
                                tuple(MemberDescription(m.member_id, m.client_id, m.client_host,
                                                        m.metadata(self.protocol), m.assignment,
                                                        m.group_instance_id)
                                      for m in sorted(self.members.values(), key=lambda m: m.member_id)))


@dataclass(frozen=True)
class CoordinatorLimits:
    """Kafka's group.min/max.session.timeout.ms and group.max.size (SPEC S13.4: bounded)."""
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_group_size: int = 1000
    # Kafka's group.initial.rebalance.delay.ms is 3000 and the broker passes its config; the core's
    # default of 0 (as Kafka's own test brokers set it) keeps a join's completion immediate.
    initial_rebalance_delay_ms: int = 0
    # Partitions one group may hold committed offsets for (each is a znode), and the bytes of one
    # commit's metadata string (Kafka's offset.metadata.max.bytes).
    max_committed_partitions: int = 100_000
    offset_metadata_max_bytes: int = 4096
    # Kafka's offsets.retention.minutes (in ms) and offsets.retention.check.interval.ms.
    offsets_retention_ms: int = 10080 * 60 * 1000
    offsets_retention_check_interval_ms: int = 600_000


class GroupStateMachine:
    """Every group this coordinator owns. Methods return (immediate answer, released completions)."""

    def __init__(self, limits: CoordinatorLimits | None = None) -> None:
        self.limits = limits or CoordinatorLimits()
        self.groups: dict[str, GroupMetadata] = {}

    # ------------------------------------------------------------ loading (coordinator failover)

    def is_loaded(self, group_id: str) -> bool:
        return group_id in self.groups

    def load(self, group_id: str, offsets: dict[tuple[str, int], OffsetAndMetadata], generation_id: int = 0,
             pending_txn_offsets: dict[int, PendingTxnOffsetCommit] | None = None) -> None:
        """A group this coordinator just took over: its committed offsets from storage (and its
        transactions' pending ones), and the last generation a coordinator handed out, so that
        generations stay monotonic across coordinator moves (the next join completes generation + 1)."""
        if group_id not in self.groups:
            self.groups[group_id] = GroupMetadata(group_id, generation_id=generation_id, offsets=dict(offsets),
                                                  pending_txn_offsets=dict(pending_txn_offsets or {}))

    def unload_all(self, now_ms: int) -> list[Completion]:
        """The coordinator lost its fence for every group at once (its ZooKeeper session)."""
        out: list[Completion] = []
        for group_id in list(self.groups):
            out += self.unload(group_id, now_ms)
        return out

    def unload(self, group_id: str, now_ms: int) -> list[Completion]:
        """No longer the coordinator: parked requests are answered NOT_COORDINATOR."""
        g = self.groups.pop(group_id, None)
        if g is None:
            return []
        code = errors.NotCoordinatorError.code
        out: list[Completion] = []
        for m in g.members.values():
            if m.awaiting_join:
                out.append(Completion(group_id, m.member_id, JOIN, JoinGroupResult(code, member_id=m.member_id)))
            if m.awaiting_sync:
                out.append(Completion(group_id, m.member_id, SYNC, SyncGroupResult(code)))
        return out

    def _group(self, group_id: str) -> GroupMetadata:
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = GroupMetadata(group_id)
        return g

    # ------------------------------------------------------------ JoinGroup

    def join(self, group_id: str, member_id: str, new_member_id: str, client_id: str, client_host: str,
             protocol_type: str, protocols: list[tuple[str, bytes]], session_timeout_ms: int,
             rebalance_timeout_ms: int, now_ms: int, require_known_member_id: bool = False,
             group_instance_id: str = "") -> tuple[JoinGroupResult | None, list[Completion]]:
        """None as the answer: the member is parked until a completion carries its JoinGroupResult.

        ``require_known_member_id`` (JoinGroup v4+, KIP-394): a join without a member id is not
        admitted but answered MEMBER_ID_REQUIRED with ``new_member_id``, which the client sends
        back in its next join. A client whose first join timed out and retried then cannot leave
        an orphan member behind that holds every later join barrier until its session expires."""
        lim = self.limits
        if not lim.min_session_timeout_ms <= session_timeout_ms <= lim.max_session_timeout_ms:
            return JoinGroupResult(INVALID_SESSION_TIMEOUT, member_id=member_id), []
        if not protocols or not protocol_type:
            return JoinGroupResult(INCONSISTENT_GROUP_PROTOCOL, member_id=member_id), []
        g = self._group(group_id)
        if g.state == DEAD:
            return JoinGroupResult(errors.CoordinatorNotAvailableError.code, member_id=member_id), []
        if g.members and (protocol_type != g.protocol_type
                          or not self._protocol_candidates(g, [p for p, _ in protocols])):
            return JoinGroupResult(INCONSISTENT_GROUP_PROTOCOL, member_id=member_id), []
        rebalance_timeout_ms = max(rebalance_timeout_ms, session_timeout_ms) if rebalance_timeout_ms <= 0 \
            else rebalance_timeout_ms
        out: list[Completion] = []
        if group_instance_id:
            holder = g.static_members.get(group_instance_id)
            if not member_id and holder is not None:
                return self._rejoin_static(g, holder, new_member_id, group_instance_id, client_id, client_host,
                                           protocols, session_timeout_ms, rebalance_timeout_ms, now_ms)
            if member_id and holder is not None and holder != member_id:
                return JoinGroupResult(FENCED_INSTANCE_ID, member_id=member_id), []
        if member_id in g.pending_members:
            del g.pending_members[member_id]  # the id handed out with MEMBER_ID_REQUIRED: admitted now
        elif member_id and member_id not in g.members:
            return JoinGroupResult(UNKNOWN_MEMBER_ID, member_id=member_id), []
        elif not member_id:
            # Pending ids count: they are members in the making, and the group's size is bounded.
            if len(g.members) + len(g.pending_members) >= lim.max_group_size:
                return JoinGroupResult(errors.GroupMaxSizeReachedError.code), []
            if require_known_member_id and not group_instance_id:  # static members skip it (KIP-345)
                g.pending_members[new_member_id] = now_ms + session_timeout_ms
                return JoinGroupResult(MEMBER_ID_REQUIRED, member_id=new_member_id), []
            member_id = new_member_id
        if member_id not in g.members:
            m = MemberMetadata(member_id, client_id, client_host, protocol_type, tuple(protocols),
                               session_timeout_ms, rebalance_timeout_ms, now_ms, awaiting_join=True,
                               group_instance_id=group_instance_id)
            g.members[member_id] = m
            if group_instance_id:
                g.static_members[group_instance_id] = member_id
            g.join_order.append(member_id)
            g.protocol_type = protocol_type
            g.new_member_added = True
            delay = lim.initial_rebalance_delay_ms
            if g.state == EMPTY and delay > 0:
                # InitialDelayedJoin(delay, remaining = rebalance timeout - delay).
                g.initial_delay_until_ms = now_ms + min(delay, rebalance_timeout_ms)
                g.initial_delay_remaining_ms = max(0, rebalance_timeout_ms - delay)
                g.new_member_added = False
            if g.state != PREPARING_REBALANCE:
                out += self._prepare_rebalance(g, now_ms)
            else:
                g.rebalance_deadline_ms = max(g.rebalance_deadline_ms, now_ms + rebalance_timeout_ms)
            out += self._maybe_complete_join(g, now_ms)
            return None, out
        old = g.members[member_id]
        changed = old.protocols != tuple(protocols)
        m = replace(old, client_id=client_id, client_host=client_host, protocols=tuple(protocols),
                    session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
                    last_heartbeat_ms=now_ms)
        if old.awaiting_join:
            # A retried JoinGroup replaces the parked one, which is answered as superseded.
            out.append(Completion(group_id, member_id, JOIN, JoinGroupResult(errors.RebalanceInProgressError.code,
                                                                             member_id=member_id)))
        if not changed and (g.state == COMPLETING_REBALANCE or (g.state == STABLE and member_id != g.leader_id)):
            # Nothing new: the current generation stands and Kafka answers at once - the leader
            # too while its assignment is awaited (it lost its join answer; it gets the members
            # again). Only in Stable does the leader's join ask for a new assignment: rebalance.
            g.members[member_id] = m
            return self._join_result(g, member_id), out
        g.members[member_id] = replace(m, awaiting_join=True)
        if member_id not in g.join_order:
            g.join_order.append(member_id)
        if g.state != PREPARING_REBALANCE:
            out += self._prepare_rebalance(g, now_ms)
        out += self._maybe_complete_join(g, now_ms)
        return None, out

    def _rejoin_static(self, g: GroupMetadata, old_id: str, new_id: str, instance_id: str, client_id: str,
                       client_host: str, protocols: list[tuple[str, bytes]], session_timeout_ms: int,
                       rebalance_timeout_ms: int, now_ms: int) -> tuple[JoinGroupResult | None, list[Completion]]:
        """A known static member joined without a member id (it restarted): ``new_id`` replaces
        ``old_id`` (fenced from now on), keeping its place, join order, leadership and assignment."""
        out: list[Completion] = []
        old = g.members[old_id]
        if old.awaiting_join:
            out.append(Completion(g.group_id, old_id, JOIN, JoinGroupResult(FENCED_INSTANCE_ID, member_id=old_id)))
        if old.awaiting_sync:
            out.append(Completion(g.group_id, old_id, SYNC, SyncGroupResult(FENCED_INSTANCE_ID)))
        current_leader = g.leader_id
        del g.members[old_id]
        g.members[new_id] = replace(old, member_id=new_id, client_id=client_id, client_host=client_host,
                                    protocols=tuple(protocols), session_timeout_ms=session_timeout_ms,
                                    rebalance_timeout_ms=rebalance_timeout_ms, last_heartbeat_ms=now_ms,
                                    awaiting_join=False, awaiting_sync=False)
        g.join_order = [new_id if mid == old_id else mid for mid in g.join_order]
        if g.leader_id == old_id:
            g.leader_id = new_id
        g.static_members[instance_id] = new_id
        if g.state == STABLE:
            candidates = self._protocol_candidates(g, [p for p, _ in g.members[g.leader_id].protocols])
            if candidates and candidates[0] == g.protocol:
                # Kafka answers with the *old* leader id, so that a rejoining leader does not compute
                # an assignment a Stable group would never hand out; its SyncGroup gets its old one.
                return JoinGroupResult(NONE, g.generation_id, g.protocol, current_leader, new_id), out
        g.members[new_id] = replace(g.members[new_id], awaiting_join=True)
        if g.state != PREPARING_REBALANCE:
            out += self._prepare_rebalance(g, now_ms)
        out += self._maybe_complete_join(g, now_ms)
        return None, out

    def is_fenced(self, group_id: str, member_id: str, group_instance_id: str) -> bool:
        """KIP-345: ``group_instance_id`` is held by another member id now (Kafka's isStaticMemberFenced)."""
        if not group_instance_id:
            return False
        g = self.groups.get(group_id)
        holder = None if g is None else g.static_members.get(group_instance_id)
        return holder is not None and holder != member_id

    def _protocol_candidates(self, g: GroupMetadata, offered: list[str]) -> list[str]:
        return [p for p in offered if all(m.supports(p) for m in g.members.values())]

    def _prepare_rebalance(self, g: GroupMetadata, now_ms: int) -> list[Completion]:
        out: list[Completion] = []
        if g.state == COMPLETING_REBALANCE:
            # The assignment being computed is for a membership that no longer holds.
            for mid, m in list(g.members.items()):
                if m.awaiting_sync:
                    g.members[mid] = replace(m, awaiting_sync=False)
                    out.append(Completion(g.group_id, mid, SYNC, SyncGroupResult(REBALANCE_IN_PROGRESS)))
        g.state = PREPARING_REBALANCE
        g.rebalance_deadline_ms = now_ms + max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        return out

    def _maybe_complete_join(self, g: GroupMetadata, now_ms: int, force: bool = False) -> list[Completion]:
        if g.state != PREPARING_REBALANCE:
            return []
        if g.initial_delay_until_ms and g.members:
            if now_ms < g.initial_delay_until_ms:
                return []  # the initial delay decides when this join completes (see tick)
            if g.new_member_added and g.initial_delay_remaining_ms > 0:
                step = min(self.limits.initial_rebalance_delay_ms, g.initial_delay_remaining_ms)
                g.initial_delay_until_ms = now_ms + step
                g.initial_delay_remaining_ms -= step
                g.new_member_added = False
                return []
            force = True
        g.initial_delay_until_ms = 0
        if not force and (g.pending_members or not all(m.awaiting_join for m in g.members.values())):
            return []
        for mid in [mid for mid, m in g.members.items() if not m.awaiting_join]:
            self._remove(g, mid)  # did not rejoin within the rebalance timeout
        g.generation_id += 1
        if not g.members:
            g.state, g.protocol, g.leader_id, g.protocol_type = EMPTY, "", "", ""
            g.empty_since_ms = now_ms
            return []
        joined = [mid for mid in g.join_order if mid in g.members]
        if g.leader_id not in g.members:
            g.leader_id = joined[0]
        leader = g.members[g.leader_id]
        g.protocol = self._protocol_candidates(g, [p for p, _ in leader.protocols])[0]
        g.state = COMPLETING_REBALANCE
        out: list[Completion] = []
        for mid in joined:
            g.members[mid] = replace(g.members[mid], awaiting_join=False, assignment=b"", last_heartbeat_ms=now_ms)
        for mid in joined:
            out.append(Completion(g.group_id, mid, JOIN, self._join_result(g, mid)))
        return out

    def _join_result(self, g: GroupMetadata, member_id: str) -> JoinGroupResult:
        if member_id != g.leader_id:
            return JoinGroupResult(NONE, g.generation_id, g.protocol, g.leader_id, member_id)
        joined = [g.members[mid] for mid in g.join_order if mid in g.members]
        return JoinGroupResult(NONE, g.generation_id, g.protocol, g.leader_id, member_id,
                               tuple((m.member_id, m.metadata(g.protocol)) for m in joined),
                               tuple((m.member_id, m.group_instance_id) for m in joined if m.group_instance_id))

    def _remove(self, g: GroupMetadata, member_id: str) -> None:
        m = g.members.pop(member_id, None)
        if m is not None and m.group_instance_id and g.static_members.get(m.group_instance_id) == member_id:
            del g.static_members[m.group_instance_id]
        if member_id in g.join_order:
            g.join_order.remove(member_id)

    # ------------------------------------------------------------ SyncGroup

    def sync(self, group_id: str, generation_id: int, member_id: str, assignments: dict[str, bytes],
             now_ms: int, group_instance_id: str = "") -> tuple[SyncGroupResult | None, list[Completion]]:
        g = self.groups.get(group_id)
        if self.is_fenced(group_id, member_id, group_instance_id):
            return SyncGroupResult(FENCED_INSTANCE_ID), []
        if g is None or member_id not in g.members:
            return SyncGroupResult(UNKNOWN_MEMBER_ID), []
        if generation_id != g.generation_id:
            return SyncGroupResult(ILLEGAL_GENERATION), []
        m = g.members[member_id]
        if g.state == PREPARING_REBALANCE:
            return SyncGroupResult(REBALANCE_IN_PROGRESS), []
        g.members[member_id] = replace(m, last_heartbeat_ms=now_ms)
        if g.state == STABLE:
            return SyncGroupResult(NONE, g.members[member_id].assignment), []
        # CompletingRebalance: park until the leader brings the assignment.
        g.members[member_id] = replace(g.members[member_id], awaiting_sync=True)
        if member_id != g.leader_id:
            return None, []
        out: list[Completion] = []
        for mid, mm in list(g.members.items()):
            g.members[mid] = replace(mm, assignment=assignments.get(mid, b""), awaiting_sync=False)
            if mm.awaiting_sync and mid != member_id:
                out.append(Completion(group_id, mid, SYNC, SyncGroupResult(NONE, g.members[mid].assignment)))
        g.state = STABLE
        return SyncGroupResult(NONE, g.members[member_id].assignment), out

    # ------------------------------------------------------------ Heartbeat, LeaveGroup, timeouts

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, now_ms: int,
                  group_instance_id: str = "") -> int:
        """Kafka 2.x's order: the member, then its generation, and only a heartbeat of the current
        generation keeps the member alive (a zombie of an old one must not) - answered
        REBALANCE_IN_PROGRESS while the group prepares a rebalance (the member must rejoin) and
        NONE in CompletingRebalance (the member's SyncGroup is on its way)."""
        if self.is_fenced(group_id, member_id, group_instance_id):
            return FENCED_INSTANCE_ID
        g = self.groups.get(group_id)
        if g is None or member_id not in g.members:
            return UNKNOWN_MEMBER_ID
        if generation_id != g.generation_id:
            return ILLEGAL_GENERATION
        g.members[member_id] = replace(g.members[member_id], last_heartbeat_ms=now_ms)
        if g.state == PREPARING_REBALANCE:
            return REBALANCE_IN_PROGRESS
        return NONE

    def leave(self, group_id: str, member_id: str, now_ms: int,
              group_instance_id: str = "") -> tuple[int, list[Completion]]:
        """A member leaves. With a ``group_instance_id`` (LeaveGroup v3+): an empty ``member_id`` names
        whoever holds that instance id (the admin's removal of a static member); another member id
        than the holder's is FENCED_INSTANCE_ID."""
        g = self.groups.get(group_id)
        if group_instance_id:
            holder = None if g is None else g.static_members.get(group_instance_id)
            if holder is None:
                return UNKNOWN_MEMBER_ID, []
            if member_id and member_id != holder:
                return FENCED_INSTANCE_ID, []
            member_id = holder
        if g is not None and member_id in g.pending_members:
            # An id handed out but never joined with: forget it; a barrier it held may now complete.
            del g.pending_members[member_id]
            return NONE, self._maybe_complete_join(g, now_ms)
        if g is None or member_id not in g.members:
            return UNKNOWN_MEMBER_ID, []
        return NONE, self._member_gone(g, member_id, now_ms)

    def _member_gone(self, g: GroupMetadata, member_id: str, now_ms: int) -> list[Completion]:
        m = g.members[member_id]
        out: list[Completion] = []
        if m.awaiting_join:
            out.append(Completion(g.group_id, member_id, JOIN, JoinGroupResult(UNKNOWN_MEMBER_ID,
                                                                              member_id=member_id)))
        if m.awaiting_sync:
            out.append(Completion(g.group_id, member_id, SYNC, SyncGroupResult(UNKNOWN_MEMBER_ID)))
        self._remove(g, member_id)
        if g.state in (STABLE, COMPLETING_REBALANCE):
            out += self._prepare_rebalance(g, now_ms)
        if g.state == PREPARING_REBALANCE:
            out += self._maybe_complete_join(g, now_ms)
        return out

    def tick(self, now_ms: int) -> list[Completion]:
        """Session timeouts (members that stopped heartbeating) and rebalance timeouts."""
        out: list[Completion] = []
        for g in list(self.groups.values()):
            expired = [mid for mid, deadline in g.pending_members.items() if now_ms >= deadline]
            for mid in expired:
                del g.pending_members[mid]
            if expired:
                out += self._maybe_complete_join(g, now_ms)
            for mid, m in list(g.members.items()):
                if mid in g.members and not m.awaiting_join and now_ms - m.last_heartbeat_ms > m.session_timeout_ms:
                    out += self._member_gone(g, mid, now_ms)
            if g.state == PREPARING_REBALANCE and g.initial_delay_until_ms:
                if now_ms >= g.initial_delay_until_ms:
                    out += self._maybe_complete_join(g, now_ms)
            elif g.state == PREPARING_REBALANCE and now_ms >= g.rebalance_deadline_ms:
                out += self._maybe_complete_join(g, now_ms, force=True)
        return out

    def next_deadline_ms(self) -> int | None:
        """When ``tick`` next has something to do (the shell sleeps until then, bounded)."""
        times = [m.last_heartbeat_ms + m.session_timeout_ms + 1 for g in self.groups.values()
                 for m in g.members.values() if not m.awaiting_join]
        times += [g.initial_delay_until_ms or g.rebalance_deadline_ms for g in self.groups.values()
                  if g.state == PREPARING_REBALANCE]
        times += [deadline for g in self.groups.values() for deadline in g.pending_members.values()]
        return min(times, default=None)

    # ------------------------------------------------------------ offsets

    def commit_offsets(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str = "") -> int:
        """NONE when the commit may be written (the shell then writes and calls offsets_committed)."""
        if self.is_fenced(group_id, member_id, group_instance_id):
            return FENCED_INSTANCE_ID
        g = self.groups.get(group_id)
        # Kafka 2.x: a commit outside the group protocol (generation -1: the admin's reset, a
        # consumer with assign()) only to an Empty group; anything else must be a current member.
        if generation_id < 0 and (g is None or g.state == EMPTY):
            return NONE
        if g is None or member_id not in g.members:
            return UNKNOWN_MEMBER_ID
        if generation_id != g.generation_id:
            return ILLEGAL_GENERATION
        if g.state == COMPLETING_REBALANCE:
            return REBALANCE_IN_PROGRESS
        return NONE

    def offsets_committed(self, group_id: str, offsets: dict[tuple[str, int], OffsetAndMetadata]) -> None:
        self._group(group_id).offsets.update(offsets)

    def check_commit_entry(self, group_id: str, tp: tuple[str, int], offset: int, metadata: str,
                           adding: int) -> int:
        """Kafka's per-partition checks of an OffsetCommit entry: OFFSET_METADATA_TOO_LARGE above
        offset.metadata.max.bytes; a negative offset other than Kafka's -1 ("no offset") refused;
        INVALID_COMMIT_OFFSET_SIZE when the group would hold more than max_committed_partitions
        (``adding`` new partitions in this commit so far)."""
        if len(metadata.encode()) > self.limits.offset_metadata_max_bytes:
            return errors.OffsetMetadataTooLargeError.code
        if offset < -1:
            return errors.InvalidCommitOffsetSizeError.code
        g = self.groups.get(group_id)
        stored = 0 if g is None else len(g.offsets)
        if g is not None and tp not in g.offsets and stored + adding + 1 > self.limits.max_committed_partitions:
            return errors.InvalidCommitOffsetSizeError.code
        return NONE

    def stored_partitions(self, group_id: str, among: Iterable[tuple[str, int]]) -> set[tuple[str, int]]:
        """Which of ``among`` have a committed offset in storage (the shell updates those, creates
        the others): work in the partitions a commit names, not in all the group holds."""
        g = self.groups.get(group_id)
        return set() if g is None else {tp for tp in among if tp in g.offsets}

    def fetch_offsets(self, group_id: str,
                      partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], OffsetAndMetadata]:
        """Committed offsets (all of the group's when ``partitions`` is None); absent = none committed."""
        g = self.groups.get(group_id)
        if g is None:
            return {}
        if partitions is None:
            return dict(g.offsets)
        return {tp: g.offsets[tp] for tp in partitions if tp in g.offsets}

    # ------------------------------------------------------------ deleting (DeleteGroups, OffsetDelete)

    def check_delete_group(self, group_id: str) -> int:
        """NONE when ``group_id`` may be deleted - Kafka deletes only groups without members (Empty,
        or Dead: not loaded) - else NON_EMPTY_GROUP; pending transactional offsets do not stop it
        (Kafka's deleteGroups looks at members only). The shell then deletes its offsets, its
        transactions' pending offsets and its fence from storage under the lease, and unloads it: a
        later join starts a new group, and a later marker of such a transaction finds nothing."""
        g = self.groups.get(group_id)
        if g is not None and (g.members or g.pending_members):
            return NON_EMPTY_GROUP
        return NONE

    def check_delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]
                             ) -> tuple[int, dict[tuple[str, int], int]]:
        """Kafka's handleDeleteOffsets (KIP-496): (group error, code per partition). An empty group's
        offsets may all go; a consumer group's offsets of a topic some member subscribes to are
        GROUP_SUBSCRIBED_TO_TOPIC (the others may go); a group of another protocol with members is
        NON_EMPTY_GROUP. A subscription that cannot be read counts as subscribed to everything."""
        g = self.groups.get(group_id)
        tps = list(partitions)
        if g is None or not (g.members or g.pending_members):
            return NONE, dict.fromkeys(tps, NONE)
        if g.protocol_type != CONSUMER_PROTOCOL:
            return NON_EMPTY_GROUP, {}
        subscribed: set[str] = set()
        everything = False
        for m in g.members.values():
            for _name, metadata in m.protocols:
                topics = consumer_subscription(metadata)
                if topics is None:
                    everything = True
                else:
                    subscribed |= topics
        return NONE, {tp: GROUP_SUBSCRIBED_TO_TOPIC if everything or tp[0] in subscribed else NONE for tp in tps}

    def expired_offsets(self, now_ms: int, retention_ms: int,
                        group_id: str | None = None) -> dict[str, list[tuple[str, int]]]:
        """offsets.retention.minutes (Kafka's GroupMetadata.removeExpiredOffsets for Empty groups): per
        Empty group without members, the committed offsets whose commit - or the moment the group
        became Empty, whichever is later - is at least ``retention_ms`` old. An offset with no known
        commit time (written before commit times were stored) is not expired here: the shell stamps
        it with the time it loaded it. Groups with members keep every offset. ``group_id``: that
        group only."""
        out: dict[str, list[tuple[str, int]]] = {}
        if group_id is None:
            groups = list(self.groups.values())
        else:
            one = self.groups.get(group_id)
            groups = [] if one is None else [one]
        for g in groups:
            if g.state != EMPTY or g.members or g.pending_members:
                continue
            doomed = sorted(tp for tp, om in g.offsets.items()
                            if om.commit_timestamp_ms >= 0
                            and now_ms - max(om.commit_timestamp_ms, g.empty_since_ms) >= retention_ms)
            if doomed:
                out[g.group_id] = doomed
        return out

    def offsets_deleted(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        """Expired committed offsets are gone (pending transactional ones stay, as in Kafka 2.8's
        removeExpiredOffsets)."""
        g = self.groups.get(group_id)
        if g is not None:
            for tp in partitions:
                g.offsets.pop(tp, None)

    def remove_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        """OffsetDelete took ``partitions`` (Kafka's GroupMetadata.removeOffsets): their committed
        offsets go, and so do the offsets any open transaction holds pending for them - the
        transaction's COMMIT marker must not bring back an offset the admin deleted. A producer
        whose pending offsets are all gone keeps its (empty) entry until its marker, as Kafka's
        ``pendingTransactionalOffsetCommits`` does: the group still counts as having offsets then."""
        g = self.groups.get(group_id)
        if g is None:
            return
        doomed = set(partitions)
        for tp in doomed:
            g.offsets.pop(tp, None)
        for producer_id, pending in list(g.pending_txn_offsets.items()):
            if doomed & pending.offsets.keys():
                g.pending_txn_offsets[producer_id] = replace(pending, offsets={
                    tp: om for tp, om in pending.offsets.items() if tp not in doomed})

    def expiry_empties_group(self, group_id: str, doomed: Iterable[tuple[str, int]]) -> bool:
        """Would removing the expired offsets ``doomed`` leave the group with nothing - so that it
        goes as DeleteGroups deletes it? Kafka 2.8's cleanupGroupMetadata: an Empty group becomes
        Dead only when ``!hasOffsets``, which counts pending transactional offsets too."""
        g = self.groups.get(group_id)
        if g is None or g.members or g.pending_members or g.pending_txn_offsets:
            return False
        return set(g.offsets) <= set(doomed)

    # ------------------------------------------------------------ transactional offsets (KIP-98)

    def prepare_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                            offsets: dict[tuple[str, int], OffsetAndMetadata]
                            ) -> tuple[int, PendingTxnOffsetCommit | None]:
        """A TxnOffsetCommit (validated entries, each stamped with the time it was accepted): what
        the producer's pending offsets become - a later commit of the same transaction adds to them
        - or PRODUCER_FENCED when an older epoch than the one that wrote them asks. Nothing changes
        until ``txn_offsets_written``; a plain commit of the same partitions is not affected."""
        g = self.groups.get(group_id)
        before = None if g is None else g.pending_txn_offsets.get(producer_id)
        if before is not None and before.producer_epoch > producer_epoch:
            return PRODUCER_FENCED, None
        merged = {} if before is None else dict(before.offsets)
        merged.update(offsets)
        return NONE, PendingTxnOffsetCommit(producer_epoch, merged)

    def txn_offsets_written(self, group_id: str, producer_id: int, pending: PendingTxnOffsetCommit) -> None:
        self._group(group_id).pending_txn_offsets[producer_id] = pending

    def pending_txn_offsets(self, group_id: str, producer_id: int) -> PendingTxnOffsetCommit | None:
        g = self.groups.get(group_id)
        return None if g is None else g.pending_txn_offsets.get(producer_id)

    def pending_txn_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """Partitions with transactional offsets pending (OffsetFetch require_stable: UNSTABLE_OFFSET_COMMIT)."""
        g = self.groups.get(group_id)
        return set() if g is None else {tp for p in g.pending_txn_offsets.values() for tp in p.offsets}

    def txn_offsets_to_commit(self, group_id: str, producer_id: int, now_ms: int
                              ) -> dict[tuple[str, int], OffsetAndMetadata]:
        """The transaction committed: which of its pending offsets become committed offsets (Kafka's
        completePendingTxnOffsetCommit). A partition whose committed offset was written after the
        pending one (a plain OffsetCommit that came later) keeps it - Kafka compares the two commit
        records' positions in the log; here their commit times (one coordinator at a time writes a
        group, so they follow each other; within the same millisecond the transaction's wins, as the
        later decision). A pending offset without a known time counts as written ``now_ms``."""
        pending = self.pending_txn_offsets(group_id, producer_id)
        if pending is None:
            return {}
        g = self.groups[group_id]
        out: dict[tuple[str, int], OffsetAndMetadata] = {}
        for tp, om in pending.offsets.items():
            if om.commit_timestamp_ms < 0:
                om = replace(om, commit_timestamp_ms=now_ms)
            current = g.offsets.get(tp)
            if current is None or current.commit_timestamp_ms <= om.commit_timestamp_ms:
                out[tp] = om
        return out

    def txn_offsets_completed(self, group_id: str, producer_id: int,
                              committed: dict[tuple[str, int], OffsetAndMetadata]) -> None:
        """The marker's outcome is stored: the pending offsets go, ``committed`` (empty on ABORT) are
        the group's committed offsets now."""
        g = self.groups.get(group_id)
        if g is not None:
            g.pending_txn_offsets.pop(producer_id, None)
            g.offsets.update(committed)

    def describe(self, group_id: str) -> GroupDescription:
        g = self.groups.get(group_id)
        return g.describe() if g is not None else GroupDescription(group_id, DEAD, "", "", ())

    def list_groups(self) -> list[tuple[str, str]]:
        """(group id, protocol type) of every group loaded here."""
        return sorted((g.group_id, g.protocol_type) for g in self.groups.values())


def consumer_subscription(metadata: bytes) -> frozenset[str] | None:
    """The topics of Kafka's ConsumerProtocolSubscription (int16 version, int32 count, int16-length
    strings, then fields this does not need); None if ``metadata`` is not one."""
    if len(metadata) < 6:
        return None
    count = int.from_bytes(metadata[2:6], "big", signed=True)
    if count < 0 or count > len(metadata):
        return None
    pos, topics = 6, set()
    for _ in range(count):
        if pos + 2 > len(metadata):
            return None
        size = int.from_bytes(metadata[pos:pos + 2], "big", signed=True)
        pos += 2
        if size < 0 or pos + size > len(metadata):
            return None
        try:
            topics.add(metadata[pos:pos + size].decode())
        except UnicodeDecodeError:
            return None
        pos += size
    return frozenset(topics)


def coordinator_for(group_id: str, live_brokers: list[int]) -> int:
    """The broker that coordinates ``group_id``: every broker and client computes the same.

    Kafka hashes the group id onto a partition of ``__consumer_offsets`` and takes its leader.
    Here the offsets live in ZooKeeper, so the rule is over the sorted live broker ids:
    ``crc32(group_id) % len(brokers)`` (crc32, not ``hash()``, which Python salts per process).
    A broker failure moves the groups it coordinated; the new coordinator loads their offsets
    from ZooKeeper on first use.
    """
    import zlib

    if not live_brokers:
        return -1
    brokers = sorted(live_brokers)
    return brokers[zlib.crc32(group_id.encode()) % len(brokers)]


# Transactions (KIP-98): a transaction that committed offsets (TxnOffsetCommit) closes them with a
# marker on the group's partition of __consumer_offsets, as Kafka does; here no such topic exists, so
# the partition is only a name for a set of groups, numbered as Kafka numbers them (the group id's
# hash modulo offsets.topic.num.partitions, 50 by default) - crc32, stable across processes - and
# independent of the live brokers, so that a marker names the same groups on every broker.
OFFSETS_TOPIC: Final = "__consumer_offsets"
OFFSETS_TOPIC_PARTITIONS: Final = 50


def offsets_partition_for(group_id: str) -> int:
    import zlib

    return zlib.crc32(group_id.encode()) % OFFSETS_TOPIC_PARTITIONS
