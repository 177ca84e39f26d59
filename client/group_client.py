"""The client side of the group protocol (Kafka's ConsumerCoordinator / AbstractCoordinator).

Theory of operation
-------------------
A member finds its coordinator (FindCoordinator to any broker), joins
(JoinGroup, parked by the coordinator until every member has joined), and the
leader - the member the coordinator names - computes the assignment
client-side, as Kafka's consumers do: the range assignor (SPEC S11.2) over the
subscriptions every member sent in Kafka's ConsumerProtocol bytes. SyncGroup
then brings each member its assignment. A background thread heartbeats every
``heartbeat_interval_ms``; an answer saying the group rebalances (or that the
member or generation is no longer known) sets ``rejoin_needed`` for the
consumer's next ``poll()``. Offsets are committed and fetched through the
coordinator (OffsetCommit is fenced by generation: a member that was
rebalanced out cannot commit).

ConsumerProtocol (Kafka's ``ConsumerProtocol`` v0, big-endian):
Subscription = int16 version, array<string topic>, bytes user_data;
Assignment = int16 version, array<string topic, array<int32 partition>>, bytes user_data;
an array is an int32 count, a string an int16 length + UTF-8, bytes an int32 length (-1 = null).
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from client.connection import ClusterView, Connection
from proto import errors
from proto import minikafka_pb2 as pb

log = logging.getLogger(__name__)

PROTOCOL_TYPE = "consumer"
RANGE = "range"
_COORDINATOR_ERRORS = (errors.NotCoordinatorError.code, errors.CoordinatorNotAvailableError.code,
                       errors.CoordinatorLoadInProgressError.code)
_REJOIN_ERRORS = (errors.RebalanceInProgressError.code, errors.IllegalGenerationError.code,
                  errors.UnknownMemberIdError.code)


# ------------------------------------------------------------------ ConsumerProtocol bytes


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def encode_subscription(topics: list[str], user_data: bytes | None = None) -> bytes:
    out = struct.pack(">hi", 0, len(topics)) + b"".join(_string(t) for t in sorted(topics))
    return out + (struct.pack(">i", -1) if user_data is None else struct.pack(">i", len(user_data)) + user_data)


def encode_assignment(partitions: dict[str, list[int]]) -> bytes:
    out = struct.pack(">hi", 0, len(partitions))
    for topic in sorted(partitions):
        parts = sorted(partitions[topic])
        out += _string(topic) + struct.pack(f">i{len(parts)}i", len(parts), *parts)
    return out + struct.pack(">i", -1)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise errors.InvalidRequestError("truncated ConsumerProtocol bytes")
        value = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value[0] if len(value) == 1 else value

    def string(self) -> str:
        n = self.take(">h")
        if n < 0 or self.pos + n > len(self.data):
            raise errors.InvalidRequestError("bad string in ConsumerProtocol bytes")
        s = self.data[self.pos:self.pos + n].decode("utf-8", "replace")
        self.pos += n
        return s

    def count(self) -> int:
        n = int(self.take(">i"))
        # Each element takes at least 2 bytes: a larger count is a lie (distrust input, S13).
        if n < 0 or n > (len(self.data) - self.pos) // 2 + 1:
            raise errors.InvalidRequestError("bad array length in ConsumerProtocol bytes")
        return n


def decode_subscription(data: bytes) -> list[str]:
    r = _Reader(data)
    r.take(">h")
    return [r.string() for _ in range(r.count())]


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    if not data:
        return {}
    r = _Reader(data)
    r.take(">h")
    out: dict[str, list[int]] = {}
    for _ in range(r.count()):
        topic = r.string()
        out[topic] = [int(r.take(">i")) for _ in range(r.count())]
    return out


def _subscription_or_none(data: bytes) -> list[str]:
    """A member's subscription; an undecodable one (another member's bytes are not to be trusted)
    subscribes to nothing, rather than failing the leader's assignment for the whole group."""
    try:
        return decode_subscription(data)
    except (errors.KafkaError, UnicodeDecodeError) as e:
        log.warning("ignoring an undecodable subscription: %s", e)
        return []


def range_assign(subscriptions: dict[str, list[str]], partitions_of: Callable[[str], list[int]],
                 assign: Callable[[list[str], list[int]], dict[str, list[int]]]) -> dict[str, dict[str, list[int]]]:
    """member -> topic -> partitions: per topic, ``assign`` over the members subscribed to it."""
    out: dict[str, dict[str, list[int]]] = {m: {} for m in subscriptions}
    for topic in sorted({t for ts in subscriptions.values() for t in ts}):
        members = sorted(m for m, ts in subscriptions.items() if topic in ts)
        for m, parts in assign(members, partitions_of(topic)).items():
            if parts:
                out[m][topic] = parts
    return out


# ------------------------------------------------------------------ the member


class GroupMember:
    def __init__(self, view: ClusterView, group_id: str, client_id: str, session_timeout_ms: int,
                 rebalance_timeout_ms: int, heartbeat_interval_ms: int, retry_backoff_s: float,
                 request_timeout_s: float, group_instance_id: str | None = None) -> None:
        self.view = view
        self.group_id = group_id
        # KIP-345: a static member rejoins after a restart in its old place, without a rebalance; it
        # sends no LeaveGroup on close (its partitions wait session_timeout_ms for it to come back).
        self.group_instance_id = group_instance_id or ""
        self.client_id = client_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000.0
        self.retry_backoff_s = retry_backoff_s
        self.request_timeout_s = request_timeout_s
        self.member_id = ""
        self.generation_id = -1
        self.rejoin_needed = threading.Event()
        self._lock = threading.Lock()
        self._coordinator: str | None = None
        self._closed = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None
        # Heartbeats pause while a join is under way, and an answer to one sent before a join began
        # is ignored: it would say REBALANCE_IN_PROGRESS about the rebalance this join completes,
        # and a leader rejoining for it would start yet another (a rebalance storm).
        self._joins = 0
        self._joining = False

    # ------------------------------------------------------------ coordinator

    def coordinator(self) -> Connection:
        """The coordinator's connection (FindCoordinator, bounded retries)."""
        with self._lock:
            address = self._coordinator
        if address is not None:
            return self.view.connection(address)
        last = ""
        for attempt in range(50):
            candidates = list(dict.fromkeys([*self.view.brokers.values(), *self.view.bootstrap]))
            for candidate in candidates:
                try:
                    resp = self.view.connection(candidate).api.FindCoordinator(
                        pb.FindCoordinatorRequest(key=self.group_id), timeout=self.request_timeout_s)
                except grpc.RpcError as e:
                    last = f"{candidate}: {e.code().name}"
                    continue
                if resp.error_code == 0:
                    address = f"{resp.host}:{resp.port}"
                    with self._lock:
                        self._coordinator = address
                    return self.view.connection(address)
                last = f"{candidate}: {errors.for_code(resp.error_code).name}"
                if resp.error_code not in _COORDINATOR_ERRORS:
                    raise errors.for_code(resp.error_code)(f"FindCoordinator({self.group_id}): {last}")
                break
            if attempt % 5 == 4:
                try:
                    self.view.refresh([])
                except errors.KafkaError:
                    pass
            time.sleep(self.retry_backoff_s * min(5, attempt + 1))
        raise errors.CoordinatorNotAvailableError(f"no coordinator for group {self.group_id}: {last}")

    def coordinator_dead(self) -> None:
        with self._lock:
            self._coordinator = None

    def _call(self, method: str, request: Any, timeout_s: float | None = None) -> Any:
        """One call to the coordinator; None on a network error (the coordinator is forgotten)."""
        conn = self.coordinator()
        try:
            resp = getattr(conn.api, method)(request, timeout=timeout_s or self.request_timeout_s)
        except grpc.RpcError as e:
            log.info("group %s: %s to %s failed: %s", self.group_id, method, conn.address, e.code().name)
            self.coordinator_dead()
            return None
        code = getattr(resp, "error_code", 0)
        if code in _COORDINATOR_ERRORS:
            self.coordinator_dead()
        return resp

    # ------------------------------------------------------------ join + sync

    def join(self, topics: list[str], partitions_of: Callable[[str], list[int]],
             assign: Callable[[list[str], list[int]], dict[str, list[int]]]) -> dict[str, list[int]]:
        """Join and sync until a generation is complete; this member's assignment (topic -> parts)."""
        with self._lock:
            self._joins += 1
            self._joining = True
        self.rejoin_needed.clear()
        try:
            return self._join(topics, partitions_of, assign)
        finally:
            with self._lock:
                self._joining = False

    def _join(self, topics: list[str], partitions_of: Callable[[str], list[int]],
              assign: Callable[[list[str], list[int]], dict[str, list[int]]]) -> dict[str, list[int]]:
        deadline = time.monotonic() + (self.rebalance_timeout_ms + self.session_timeout_ms) / 1000.0 + 30
        last = ""
        while time.monotonic() < deadline and not self._closed.is_set():
            resp = self._call("JoinGroup", pb.JoinGroupRequest(
                group_id=self.group_id, session_timeout_ms=self.session_timeout_ms,
                rebalance_timeout_ms=self.rebalance_timeout_ms, member_id=self.member_id,
                protocol_type=PROTOCOL_TYPE, client_id=self.client_id, group_instance_id=self.group_instance_id,
                protocols=[pb.JoinGroupProtocol(name=RANGE, metadata=encode_subscription(topics))]),
                timeout_s=self.rebalance_timeout_ms / 1000.0 + self.request_timeout_s)
            if resp is None or resp.error_code in _COORDINATOR_ERRORS or \
                    resp.error_code == errors.RebalanceInProgressError.code:
                last = "coordinator unavailable" if resp is None else errors.for_code(resp.error_code).name
                time.sleep(self.retry_backoff_s)
                continue
            if resp.error_code == errors.UnknownMemberIdError.code:
                self.member_id = ""
                continue
            if resp.error_code != 0:
                raise errors.for_code(resp.error_code)(f"JoinGroup({self.group_id})")
            with self._lock:
                self.member_id = resp.member_id
                self.generation_id = resp.generation_id
            assignments: list[pb.SyncGroupAssignment] = []
            if resp.leader == resp.member_id:
                subs = {m.member_id: _subscription_or_none(m.metadata) for m in resp.members}
                plan = range_assign(subs, partitions_of, assign)
                assignments = [pb.SyncGroupAssignment(member_id=m, assignment=encode_assignment(a))
                               for m, a in plan.items()]
                log.info("group %s generation %d: leader %s assigns %s", self.group_id, resp.generation_id,
                         self.member_id, plan)
            sresp = self._call("SyncGroup", pb.SyncGroupRequest(
                group_id=self.group_id, generation_id=resp.generation_id, member_id=self.member_id,
                group_instance_id=self.group_instance_id, assignments=assignments), timeout_s=self.rebalance_timeout_ms / 1000.0 + self.request_timeout_s)
            if sresp is None or sresp.error_code in _COORDINATOR_ERRORS or sresp.error_code in _REJOIN_ERRORS:
                last = "coordinator unavailable" if sresp is None else errors.for_code(sresp.error_code).name
                if sresp is not None and sresp.error_code == errors.UnknownMemberIdError.code:
                    self.member_id = ""
                continue
            if sresp.error_code != 0:
                raise errors.for_code(sresp.error_code)(f"SyncGroup({self.group_id})")
            self._start_heartbeats()
            return decode_assignment(sresp.assignment)
        raise errors.RebalanceInProgressError(f"group {self.group_id}: could not join ({last})")

    # ------------------------------------------------------------ heartbeats

    def _start_heartbeats(self) -> None:
        if self._heartbeat_thread is None:
            self._heartbeat_thread = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                                      name=f"heartbeat-{self.group_id}")
            self._heartbeat_thread.start()

    def _heartbeat_loop(self) -> None:
        while not self._closed.wait(self.heartbeat_interval_s):
            with self._lock:
                generation, member, joins, joining = self.generation_id, self.member_id, self._joins, self._joining
            if not member or joining or self.rejoin_needed.is_set():
                continue
            try:
                resp = self._call("Heartbeat", pb.HeartbeatRequest(group_id=self.group_id,
                                                                   generation_id=generation, member_id=member,
                                                                   group_instance_id=self.group_instance_id))
            except errors.KafkaError as e:
                log.info("group %s: heartbeat: %s", self.group_id, e)
                continue
            if resp is None or resp.error_code == 0:
                continue
            with self._lock:
                if generation != self.generation_id or joins != self._joins or self._joining:
                    continue  # an answer about a generation we have left or are leaving
                if resp.error_code == errors.UnknownMemberIdError.code:
                    self.member_id = ""
            # FENCED_INSTANCE_ID: another consumer took this static member's place; the join that
            # follows is refused with it too and raises it from poll(), as Kafka's consumer does.
            if resp.error_code in _REJOIN_ERRORS or resp.error_code in _COORDINATOR_ERRORS \
                    or resp.error_code == errors.FencedInstanceIdError.code:
                log.info("group %s: heartbeat says %s: rejoining", self.group_id,
                         errors.for_code(resp.error_code).name)
                self.rejoin_needed.set()

    # ------------------------------------------------------------ offsets

    def commit(self, offsets: dict[tuple[str, int], int], as_member: bool = True) -> dict[tuple[str, int], int]:
        """Error code per partition; retried on coordinator moves (bounded)."""
        with self._lock:
            generation, member = (self.generation_id, self.member_id) if as_member else (-1, "")
        by_topic: dict[str, list[pb.OffsetCommitPartition]] = {}
        for (topic, part), off in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(pb.OffsetCommitPartition(partition=part, offset=off))
        req = pb.OffsetCommitRequest(group_id=self.group_id, generation_id=generation, member_id=member,
                                     group_instance_id=self.group_instance_id if as_member else "",
                                     topics=[pb.OffsetCommitTopic(name=t, partitions=ps)
                                             for t, ps in by_topic.items()])
        result: dict[tuple[str, int], int] = {}
        for _attempt in range(10):
            resp = self._call("OffsetCommit", req)
            if resp is None:
                time.sleep(self.retry_backoff_s)
                continue
            result = {(t.name, p.partition): p.error_code for t in resp.topics for p in t.partitions}
            if any(c in _COORDINATOR_ERRORS for c in result.values()):
                time.sleep(self.retry_backoff_s)
                continue
            if any(c in _REJOIN_ERRORS for c in result.values()):
                self.rejoin_needed.set()
            return result
        raise errors.CoordinatorNotAvailableError(f"OffsetCommit({self.group_id}): no coordinator answered")

    def fetch_offsets(self, partitions: list[tuple[str, int]] | None,
                      require_stable: bool = False) -> dict[tuple[str, int], int]:
        """Committed offsets (absent: none committed). ``require_stable`` (KIP-447, what a
        read_committed consumer asks): while a transaction holds offsets of a partition pending -
        committed, its marker not yet at the group's coordinator - the coordinator answers
        UNSTABLE_OFFSET_COMMIT and the fetch is retried, as Kafka's consumer does; else a consumer
        that (re)took the partition would start from the offset before that transaction and copy
        its records again."""
        by_topic: dict[str, list[int]] = {}
        for topic, part in partitions or []:
            by_topic.setdefault(topic, []).append(part)
        req = pb.OffsetFetchRequest(group_id=self.group_id, require_stable=require_stable, topics=[
            pb.OffsetFetchTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
        last = ""
        # Unstable offsets wait for a transaction's markers, which a coordinator failover can delay
        # by seconds: bounded by time rather than by the 20 attempts a coordinator move gets.
        unstable_deadline = time.monotonic() + max(30.0, 2 * self.request_timeout_s)
        attempts = 0
        while attempts < 20:
            resp = self._call("OffsetFetch", req)
            if resp is None or resp.error_code in _COORDINATOR_ERRORS:
                last = "unavailable" if resp is None else errors.for_code(resp.error_code).name
                attempts += 1
                time.sleep(self.retry_backoff_s)
                continue
            if resp.error_code != 0:
                raise errors.for_code(resp.error_code)(f"OffsetFetch({self.group_id})")
            if any(p.error_code == errors.UnstableOffsetCommitError.code for t in resp.topics for p in t.partitions):
                last = errors.UnstableOffsetCommitError.name
                if time.monotonic() >= unstable_deadline:
                    raise errors.UnstableOffsetCommitError(f"OffsetFetch({self.group_id}): offsets still pending")
                time.sleep(self.retry_backoff_s)
                continue
            return {(t.name, p.partition): p.committed_offset for t in resp.topics for p in t.partitions
                    if p.error_code == 0 and p.committed_offset >= 0}
        raise errors.CoordinatorNotAvailableError(f"OffsetFetch({self.group_id}): {last}")

    def delete(self) -> int:
        """DeleteGroups of this group at its coordinator: the error code (NONE, NON_EMPTY_GROUP,
        GROUP_ID_NOT_FOUND, ...), retried while the coordinator moves (bounded)."""
        code = errors.CoordinatorNotAvailableError.code
        for _attempt in range(20):
            resp = self._call("DeleteGroups", pb.DeleteGroupsRequest(groups=[self.group_id]))
            code = code if resp is None or not resp.results else resp.results[0].error_code
            if resp is not None and resp.results and code not in _COORDINATOR_ERRORS:
                return int(code)
            if code in _COORDINATOR_ERRORS:
                self.coordinator_dead()
            time.sleep(self.retry_backoff_s)
        return int(code)

    def delete_offsets(self, partitions: list[tuple[str, int]]) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete (KIP-496): (the group's error code, the code per partition)."""
        by_topic: dict[str, list[int]] = {}
        for topic, part in partitions:
            by_topic.setdefault(topic, []).append(part)
        req = pb.OffsetDeleteRequest(group_id=self.group_id, topics=[
            pb.OffsetDeleteTopic(name=t, partitions=ps) for t, ps in sorted(by_topic.items())])
        code = errors.CoordinatorNotAvailableError.code
        for _attempt in range(20):
            resp = self._call("OffsetDelete", req)
            if resp is not None and resp.error_code not in _COORDINATOR_ERRORS:
                return int(resp.error_code), {(t.name, p.partition): int(p.error_code)
                                              for t in resp.topics for p in t.partitions}
            code = code if resp is None else resp.error_code
            time.sleep(self.retry_backoff_s)
        return int(code), {}

    def describe(self) -> pb.DescribedGroup:
        for _attempt in range(20):
            resp = self._call("DescribeGroups", pb.DescribeGroupsRequest(groups=[self.group_id]))
            if resp is None or not resp.groups or resp.groups[0].error_code in _COORDINATOR_ERRORS:
                time.sleep(self.retry_backoff_s)
                continue
            g: pb.DescribedGroup = resp.groups[0]
            if g.error_code != 0:
                raise errors.for_code(g.error_code)(f"DescribeGroups({self.group_id})")
            return g
        raise errors.CoordinatorNotAvailableError(f"DescribeGroups({self.group_id}): no coordinator answered")

    # ------------------------------------------------------------ leaving

    def leave(self) -> None:
        self._closed.set()
        with self._lock:
            member = self.member_id
        if member and not self.group_instance_id:
            try:
                self._call("LeaveGroup", pb.LeaveGroupRequest(group_id=self.group_id, member_id=member))
            except errors.KafkaError as e:
                log.info("group %s: LeaveGroup: %s", self.group_id, e)
        if self._heartbeat_thread is not None:
            self._heartbeat_thread.join(timeout=self.request_timeout_s)
