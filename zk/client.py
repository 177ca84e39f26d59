"""Typed ZooKeeper access for brokers and the controller (Kafka's KafkaZkClient): the one gateway.

Every call is blocking (kazoo's synchronous API); callers on an asyncio loop
run them with ``asyncio.to_thread``. Paths and schemas come only from
``zk.data``. The client object is injected-friendly: anything with
kazoo's ``KazooClient`` API works, which is how the deterministic simulation
(tests/simulation) runs this very code over an in-memory ZooKeeper.

Lost replies (SPEC S12/S13 of issue 14, Kafka's KAFKA-2729): kazoo retries an
operation after a ConnectionLoss, and the first attempt may already have been
applied. So a retried write that fails with NodeExists or BadVersion is not
taken at its word: the znode is re-read and compared with what was written
(``_settle``) - equal data (and, for ephemerals, our session) means it was
ours. Session expiry is never retried under a new session (``ignore_expire``
off): a deposed controller or leader must learn it lost its session.

Controller writes are guarded by the controller epoch's znode version (Kafka's
KAFKA-6082 fix): ``commit_guarded`` runs them in one multi-op that also checks
``/controller_epoch`` is still at the version this controller set, so a zombie
controller can never write again once a successor exists.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
    UnimplementedError,
)
from kazoo.protocol.states import ZnodeStat
from kazoo.retry import RetryFailedError
from kazoo.security import OPEN_ACL_UNSAFE, make_acl, make_digest_acl

from proto.errors import (
    KafkaError,
    NotCoordinatorError,
    ProducerFencedError,
    RecordListTooLargeError,
    TopicAlreadyExistsError,
)
from zk.data import (
    MAX_ZNODE_BYTES,
    OPEN_PATHS,
    PERSISTENT_PATHS,
    SENSITIVE_PATHS,
    AclChangesZNode,
    AclZNode,
    BrokerIdsZNode,
    BrokerIdZNode,
    BrokerRegistration,
    ClusterIdZNode,
    ConfigChangesZNode,
    ConfigTopicZNode,
    ConfigUserZNode,
    ConsumersZNode,
    ControllerEpochZNode,
    ControllerZNode,
    CorruptZnodeError,
    DeleteTopicsZNode,
    GroupCoordinatorState,
    GroupLease,
    IsrChangeNotificationZNode,
    LeaderIsrAndControllerEpoch,
    PendingTxnOffsets,
    PreferredReplicaElectionZNode,
    ProducerIdBlockZNode,
    ReassignPartitionsZNode,
    ReplicaAssignment,
    TopicPartitionId,
    TopicPartitionStateZNode,
    TopicPartitionsZNode,
    TopicsZNode,
    TopicZNode,
    TransactionRecord,
    TransactionsZNode,
    TxnLease,
    TxnOffsetsZNode,
)
from zk.multi_read import MultiGetData

log = logging.getLogger(__name__)


class ZkState:
    """kazoo's connection states, for callers that must not import kazoo (client/)."""

    LOST = KazooState.LOST
    SUSPENDED = KazooState.SUSPENDED
    CONNECTED = KazooState.CONNECTED


class BrokerIdInUseError(KafkaError):
    """Another live broker holds this broker.id."""


def is_zookeeper_unavailable(e: BaseException) -> bool:
    """A call failed only because this process's ZooKeeper session is lost, expired or
    reconnecting: the same request may succeed shortly (a broker answers it with a retriable error)."""
    return isinstance(e, ConnectionLoss | SessionExpiredError | ConnectionClosedError | OperationTimeoutError
                      | RetryFailedError)


class ZooKeeperUnreachableError(KafkaError):
    """No ZooKeeper session within zookeeper.connection.timeout.ms (Kafka's ZooKeeperClientTimeoutException)."""

    name = "ZOOKEEPER_CLIENT_TIMEOUT"


class _BelowError(logging.Filter):
    """Drops kazoo's per-attempt WARNINGs ("Connection dropped ...") while a session is first
    established: the caller reports the outcome once, in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


class ControllerMovedError(KafkaError):
    """Someone else became controller while this one was writing."""


# ZooKeeper refuses a request larger than its jute.maxbuffer (1 MiB by default) by dropping the
# connection ("Len error"): a controller event writing the state of ~2,800 partitions at once then
# failed, resigned and failed again on every re-election, forever. A commit larger than this goes
# as several multis, in order, each guarded (as Kafka 2.x writes partition states in pipelined
# requests, each with its own controller epoch check).
MAX_MULTI_BYTES: Final = 512 * 1024
# Reads of at least MULTI_READ_MIN znodes go in multiRead requests of MULTI_READ_PATHS (zk/multi_read.py).
MULTI_READ_MIN: Final = 16
MULTI_READ_PATHS: Final = 500
# A conflicting multi of independent writes (``commit_guarded(skip_conflicts=True)``) is committed
# again in multis of this many writes, at most this many times.
AROUND_CONFLICTS_MULTI: Final = 100
AROUND_CONFLICTS_ATTEMPTS: Final = 4


class PartialCommitError(KafkaError):
    """A commit too large for one multi was applied only in part (a later multi conflicted). The
    caller must not run on as if it all applied: the controller takes what was applied and what
    conflicted (``applied``, ``current``) and plans again when it can (only partition states were
    written), else resigns and reloads; the group coordinator reloads."""

    def __init__(self, message: str = "", applied: Sequence[ZkWrite] = (),
                 current: dict[str, tuple[bytes, int] | None] | None = None) -> None:
        super().__init__(message)
        self.applied = tuple(applied)
        # The current (data, version) of every path of the multi that conflicted, None where absent.
        self.current = dict(current or {})


def multi_chunks(writes: Sequence[ZkWrite], limit: int) -> list[list[ZkWrite]]:
    """``writes`` in order, cut into runs of at most ``limit`` request bytes (a run holds at least
    one write: a single write larger than the limit is ZooKeeper's to refuse)."""
    chunks: list[list[ZkWrite]] = [[]]
    size = 0
    for w in writes:
        n = len(w.path.encode()) + len(w.data) + 64  # op header, version, ACL reference
        if chunks[-1] and size + n > limit:
            chunks.append([])
            size = 0
        chunks[-1].append(w)
        size += n
    return chunks


def _partition_ids(children: Sequence[str]) -> frozenset[int]:
    """The partition numbers among a topic's ``partitions`` znode children (other names ignored)."""
    return frozenset(int(c) for c in children if c.isascii() and c.isdigit())


def _fits(w: ZkWrite, current: tuple[bytes, int] | None) -> bool:
    """Would ``w`` apply to a znode that holds ``current`` (None: absent)? A create needs it absent;
    a set or delete needs it present, at ``w.version`` unless that is -1."""
    if w.kind == "create":
        return current is None
    return current is not None and (w.version < 0 or current[1] == w.version)


@dataclass(frozen=True)
class ZkWrite:
    """One write of a guarded commit: create, set (conditional on ``version``) or delete."""

    kind: str  # "create" | "set" | "delete"
    path: str
    data: bytes = b""
    version: int = -1


@dataclass(frozen=True)
class CommitResult:
    applied: bool
    # On a conflict: the current (data, version) of every path written, None where absent.
    current: dict[str, tuple[bytes, int] | None] = field(default_factory=dict)


def read_digest(path: str) -> tuple[str, str]:
    """(user, password) from a ``zookeeper.digest.auth.file`` holding ``user:password``."""
    try:
        text = Path(path).read_text().strip()
    except OSError as e:
        raise KafkaError(f"cannot read zookeeper.digest.auth.file {path}: {e.strerror}") from None
    name, sep, password = text.partition(":")
    if not sep or not name or not password:
        raise KafkaError(f"zookeeper.digest.auth.file {path} must hold user:password")
    return name, password


class KafkaZkClient:
    """With ``digest`` (zookeeper.set.acl, SPEC S12.4) the session authenticates with it and every
    znode it creates is readable by all but writable only by that identity (Kafka's
    ``zookeeper.set.acl``); credentials are readable only by it; /consumers stays open."""

    def __init__(self, connect: str, session_timeout_ms: int = 18000, connection_timeout_ms: int | None = None,
                 digest: tuple[str, str] | None = None):
        chroot_hosts = connect
        self.connect = connect
        auth = [("digest", f"{digest[0]}:{digest[1]}")] if digest else None
        self.secure_acl = ([make_acl("world", "anyone", read=True), make_digest_acl(*digest, all=True)]
                           if digest else None)
        self.private_acl = [make_digest_acl(*digest, all=True)] if digest else None
        self.zk = KazooClient(hosts=chroot_hosts, timeout=session_timeout_ms / 1000.0,
                              connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1.0},
                              # ignore_expire=False: a call must not quietly carry on in a new session.
                              command_retry={"max_tries": 3, "delay": 0.1, "max_delay": 1.0,
                                             "ignore_expire": False},
                              auth_data=auth, default_acl=self.secure_acl)
        self.connection_timeout_s = (connection_timeout_ms or session_timeout_ms) / 1000.0
        self._multi_read = True  # until the server answers UNIMPLEMENTED (before ZooKeeper 3.6)

    def _r(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a kazoo call, retrying ConnectionLoss / OperationTimeout (kazoo's KazooRetry)."""
        return self.zk.retry(fn, *args, **kwargs)

    # ------------------------------------------------------------ session

    def start(self) -> None:
        """Connect within ``connection_timeout_s`` or raise ZooKeeperUnreachableError; the
        connection thread is stopped then, so nothing keeps retrying (and logging) behind it."""
        quiet = _BelowError()
        kazoo_log = logging.getLogger("kazoo.client")
        kazoo_log.addFilter(quiet)
        try:
            self.zk.start(timeout=self.connection_timeout_s)
        except self.zk.handler.timeout_exception:
            try:
                self.zk.stop()
                self.zk.close()
            except Exception:
                pass
            raise ZooKeeperUnreachableError(
                f"cannot reach ZooKeeper at {self.connect} within "
                f"{self.connection_timeout_s * 1000:.0f} ms (zookeeper.connection.timeout.ms)") from None
        finally:
            kazoo_log.removeFilter(quiet)

    def stop(self) -> None:
        try:
            self.zk.stop()
        finally:
            self.zk.close()

    def add_state_listener(self, listener: Callable[[KazooState], Any]) -> None:
        self.zk.add_listener(listener)

    # ------------------------------------------------------------ watches

    def watch_children(self, path: str, fn: Callable[[list[str]], bool | None], ensure: bool = True) -> None:
        """kazoo's ChildrenWatch: ``fn(children)`` now and after every change until it returns False.
        The recipe re-arms the one-shot ZooKeeper watch itself (S9.1)."""
        if ensure:
            self._r(self.zk.ensure_path, path)
        self.zk.ChildrenWatch(path, fn, send_event=False)

    def watch_data(self, path: str, fn: Callable[[bytes | None, ZnodeStat | None], bool | None]) -> None:
        """kazoo's DataWatch: ``fn(data, stat)`` now and after every change (None, None: no znode)
        until it returns False."""
        self.zk.DataWatch(path, lambda data, stat, *_event: fn(data, stat))

    @property
    def session_id(self) -> int:
        sid = self.zk.client_id
        return int(sid[0]) if sid else -1

    def ensure_persistent_paths(self) -> None:
        for path in PERSISTENT_PATHS:
            acl = (OPEN_ACL_UNSAFE if path in OPEN_PATHS else self.private_acl if path in SENSITIVE_PATHS
                   else self.secure_acl)
            self._r(self.zk.ensure_path, path, acl)

    def get_or_create_cluster_id(self, proposed: str) -> str:
        try:
            self._r(self.zk.create, ClusterIdZNode.PATH, ClusterIdZNode.encode(proposed), makepath=True)
        except NodeExistsError:
            pass
        data, _ = self._r(self.zk.get, ClusterIdZNode.PATH)
        return ClusterIdZNode.decode(data)

    # ------------------------------------------------------------ brokers

    @classmethod
    def over(cls, client: Any) -> KafkaZkClient:
        """A gateway over an already made client (the simulation's in-memory one)."""
        self = cls.__new__(cls)
        self.zk = client
        self.secure_acl = self.private_acl = None
        self.connection_timeout_s = 10.0
        return self

    def register_broker(self, reg: BrokerRegistration) -> int:
        """Create the ephemeral /brokers/ids/[id]; returns the broker epoch (its czxid).

        A lost reply makes the retried create see NodeExists for our own node (same session:
        ours). A node of our previous incarnation that expires between the create and the read
        is simply created again (KAFKA-7165-like race of a fast restart)."""
        path = BrokerIdZNode.path(reg.broker_id)
        for _attempt in range(20):
            try:
                self._r(self.zk.create, path, BrokerIdZNode.encode(reg), ephemeral=True, makepath=True)
            except NodeExistsError:
                try:
                    _data, stat = self._r(self.zk.get, path)
                except NoNodeError:
                    continue  # the old incarnation's node just expired: try again
                if stat.ephemeralOwner != self.session_id:
                    raise BrokerIdInUseError(
                        f"broker.id {reg.broker_id} is registered by another live broker (session "
                        f"0x{stat.ephemeralOwner:x}); pick another id or stop that broker") from None
                return int(stat.czxid)
            try:
                _data, stat = self._r(self.zk.get, path)
            except NoNodeError:
                continue
            return int(stat.czxid)
        raise BrokerIdInUseError(f"broker.id {reg.broker_id}: registration kept racing with an expiring node")

    def own_broker_epoch(self, broker_id: int) -> int | None:
        """The epoch (czxid) of /brokers/ids/[id] if this session holds it, else None. A broker whose
        registration reply is still on its way (or was lost) learns its epoch here when the
        controller's first request names it."""
        try:
            _data, stat = self._r(self.zk.get, BrokerIdZNode.path(broker_id))
        except NoNodeError:
            return None
        return int(stat.czxid) if stat.ephemeralOwner == self.session_id else None

    def get_registered_broker_ids(self) -> list[int]:
        """Like get_broker_ids, but [] before any broker made /brokers/ids."""
        try:
            return self.get_broker_ids()
        except NoNodeError:
            return []

    def get_broker_ids(self, watch: Callable[..., Any] | None = None) -> list[int]:
        return sorted(int(c) for c in self._r(self.zk.get_children, BrokerIdsZNode.PATH, watch=watch) if c.isdigit())

    def get_broker(self, broker_id: int) -> BrokerRegistration | None:
        try:
            data, stat = self._r(self.zk.get, BrokerIdZNode.path(broker_id))
        except NoNodeError:
            return None
        return BrokerIdZNode.decode(broker_id, data, int(stat.czxid))

    def get_all_brokers(self) -> dict[int, BrokerRegistration]:
        out = {}
        for bid in self.get_broker_ids():
            reg = self.get_broker(bid)
            if reg is not None:
                out[bid] = reg
        return out

    # ------------------------------------------------------------ controller

    def get_controller_id(self) -> int | None:
        try:
            data, _ = self._r(self.zk.get, ControllerZNode.PATH)
        except NoNodeError:
            return None
        return ControllerZNode.decode(data)

    def register_controller_and_increment_epoch(self, broker_id: int, now_ms: int) -> tuple[int, int] | None:
        """S9.1/S9.2 as Kafka's registerControllerAndIncrementControllerEpoch: create the ephemeral
        /controller and bump /controller_epoch in one multi-op, so no one holds /controller with a
        stale epoch and no two controllers share an epoch. Returns (epoch, epoch zk_version) when
        this session won, None when another broker holds /controller.

        A lost reply (issue 14 item 3) is recognised: the retried multi meets our own /controller
        (ephemeralOwner is our session) - then the epoch it wrote is the one there now, since both
        writes applied together. A concurrent epoch bump (a contender that won and already lost its
        session) is retried against the new version."""
        lost = 0
        for _attempt in range(10):
            current = self.get_controller_epoch()
            epoch, version = current if current is not None else (0, -1)
            tx = self.zk.transaction()
            tx.create(ControllerZNode.PATH, ControllerZNode.encode(broker_id, now_ms), ephemeral=True)
            if current is None:
                tx.create(ControllerEpochZNode.PATH, ControllerEpochZNode.encode(epoch + 1))
            else:
                tx.set_data(ControllerEpochZNode.PATH, ControllerEpochZNode.encode(epoch + 1), version)
            try:
                results = tx.commit()
            except (ConnectionLoss, OperationTimeoutError):
                results = None  # applied or not: ask ZooKeeper below
                lost += 1
            if results is not None and not any(isinstance(r, Exception) for r in results):
                return epoch + 1, version + 1
            try:
                _data, stat = self._r(self.zk.get, ControllerZNode.PATH)
            except NoNodeError:
                if lost >= 3:
                    raise ConnectionLoss("could not register as controller: ZooKeeper kept dropping the "
                                         "connection") from None
                continue  # not applied (or the winner already gone): try again
            if stat.ephemeralOwner != self.session_id:
                return None
            now = self.get_controller_epoch()
            if now is None:
                raise ControllerMovedError("/controller_epoch vanished")
            return now
        raise ControllerMovedError("could not register as controller: the controller epoch kept moving")

    def delete_controller_if_owner(self) -> None:
        try:
            _data, stat = self._r(self.zk.get, ControllerZNode.PATH)
            if stat.ephemeralOwner == self.session_id:
                self._r(self.zk.delete, ControllerZNode.PATH, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass

    def get_controller_epoch(self) -> tuple[int, int] | None:
        """(epoch, zk_version), or None before the first controller."""
        try:
            data, stat = self._r(self.zk.get, ControllerEpochZNode.PATH)
        except NoNodeError:
            return None
        return ControllerEpochZNode.decode(data), int(stat.version)

    def commit_guarded(self, epoch_zk_version: int, writes: Sequence[ZkWrite],
                       guard: str = ControllerEpochZNode.PATH, skip_conflicts: bool = False) -> CommitResult:
        """Apply ``writes`` atomically, only if ``guard`` (/controller_epoch unless said) is still at
        ``epoch_zk_version``.

        Raises ControllerMovedError when the epoch moved (a newer controller exists; for another
        guard, NotCoordinatorError: a newer group coordinator). On any other conflict nothing was
        applied and the result carries the current data of every path. A lost reply is recognised
        by re-reading: every written path as written means applied.

        ``skip_conflicts`` (the controller's plans made only of partition states, whose writes are
        independent of one another): a multi that conflicts is tried again without the writes whose
        znode moved, and the later multis go on; PartialCommitError then says what was applied and
        what conflicted. Kafka's updateLeaderAndIsr writes each partition on its own and retries
        only the failed ones; without this, one leader's ISR change among 10,000 partitions voided
        a whole multi, and the replans that followed met new ones, until the controller gave up
        (issue 29)."""
        if not writes:
            return CommitResult(True)
        chunks = multi_chunks(writes, MAX_MULTI_BYTES)
        applied: list[ZkWrite] = []
        conflicts: dict[str, tuple[bytes, int] | None] = {}
        for i, chunk in enumerate(chunks):
            result = self._commit_multi(epoch_zk_version, chunk, guard)
            if result.applied:
                applied.extend(chunk)
                continue
            if skip_conflicts:
                taken, current = self._commit_around_conflicts(epoch_zk_version, chunk, guard, result.current)
                applied.extend(taken)
                conflicts.update(current)
                continue
            if i == 0:
                return result  # nothing applied: the caller refreshes and plans again
            raise PartialCommitError(f"{i} of {len(chunks)} multis applied before a conflict on "
                                     f"{sorted(result.current)[:3]}", applied=applied, current=result.current)
        if not conflicts:
            return CommitResult(True)
        if not applied:
            return CommitResult(False, conflicts)
        raise PartialCommitError(f"{len(applied)} of {len(writes)} writes applied, {len(conflicts)} znodes "
                                 f"conflicted: {sorted(conflicts)[:3]}", applied=applied, current=conflicts)

    def _commit_around_conflicts(self, epoch_zk_version: int, chunk: Sequence[ZkWrite], guard: str,
                                 current: dict[str, tuple[bytes, int] | None]
                                 ) -> tuple[list[ZkWrite], dict[str, tuple[bytes, int] | None]]:
        """A multi of ``chunk`` conflicted and ``current`` is what its paths hold now: commit it
        again without the paths whose first write no longer fits, in multis of at most
        ``AROUND_CONFLICTS_MULTI`` writes (while leaders write ISR changes by the thousand, a large
        multi keeps meeting a new one), a bounded number of times. Returns the writes applied and
        the current data of the paths left out."""
        rest = list(chunk)
        applied: list[ZkWrite] = []
        left_out: set[str] = set()
        for _attempt in range(AROUND_CONFLICTS_ATTEMPTS):
            first: dict[str, ZkWrite] = {}
            for w in rest:
                first.setdefault(w.path, w)
            moved = {path for path, w in first.items() if not _fits(w, current.get(path))}
            if not moved:
                break  # a conflict these reads do not explain: leave the rest out
            left_out |= moved
            rest = [w for w in rest if w.path not in moved]
            failed: list[ZkWrite] = []
            for start in range(0, len(rest), AROUND_CONFLICTS_MULTI):
                piece = rest[start:start + AROUND_CONFLICTS_MULTI]
                result = self._commit_multi(epoch_zk_version, piece, guard)
                if result.applied:
                    applied.extend(piece)
                else:
                    failed.extend(piece)
                    current = {**current, **result.current}
            rest = failed
            if not rest:
                break
        left_out |= {w.path for w in rest}
        return applied, {path: current.get(path) for path in sorted(left_out)}

    def _commit_multi(self, epoch_zk_version: int, writes: Sequence[ZkWrite], guard: str) -> CommitResult:
        attempts = 0
        while True:
            attempts += 1
            tx = self.zk.transaction()
            tx.check(guard, epoch_zk_version)
            for w in writes:
                if w.kind == "create":
                    tx.create(w.path, w.data)
                elif w.kind == "set":
                    tx.set_data(w.path, w.data, w.version)
                else:
                    tx.delete(w.path, w.version)
            try:
                results = tx.commit()
            except (ConnectionLoss, OperationTimeoutError):
                if attempts >= 3:
                    raise
                if self._applied_already(writes):
                    return CommitResult(True)
                continue
            failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if not failures:
                return CommitResult(True)
            if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
                if guard != ControllerEpochZNode.PATH:
                    raise NotCoordinatorError(f"{guard} moved: a newer coordinator exists")
                raise ControllerMovedError("/controller_epoch moved: a newer controller exists")
            if attempts > 1 and self._applied_already(writes):
                return CommitResult(True)  # our previous attempt went through; its reply was lost
            # ZooKeeper reports only a multi's first failing op (the later ones: "runtime
            # inconsistency"), so every path is read back - pipelined: one read after another took
            # seconds for a multi of thousands of partition states (issue 29).
            return CommitResult(False, self._get_many(list(dict.fromkeys(w.path for w in writes))))

    def path_exists(self, path: str) -> bool:
        return self._r(self.zk.exists, path) is not None

    def _read(self, path: str) -> tuple[bytes, int] | None:
        try:
            data, stat = self._r(self.zk.get, path)
        except NoNodeError:
            return None
        return bytes(data), int(stat.version)

    def _applied_already(self, writes: Sequence[ZkWrite]) -> bool:
        """Does ZooKeeper hold exactly what ``writes`` would have left (data, and the version a
        conditional set leads to)? Then a commit whose reply was lost went through."""
        expected: dict[str, tuple[bytes, int | None] | None] = {}
        for w in writes:
            if w.kind == "create":
                expected[w.path] = (w.data, 0)
            elif w.kind == "set":
                prev = expected.get(w.path)
                base = prev[1] if prev is not None else (w.version if w.version >= 0 else None)
                expected[w.path] = (w.data, None if base is None else base + 1)
            else:
                expected[w.path] = None
        for path, want in expected.items():
            now = self._read(path)
            if want is None:
                if now is not None:
                    return False
            elif now is None or now[0] != want[0] or (want[1] is not None and now[1] != want[1]):
                return False
        return True

    # ------------------------------------------------------------ topics

    def get_topics(self, watch: Callable[..., Any] | None = None) -> list[str]:
        return sorted(self._r(self.zk.get_children, TopicsZNode.PATH, watch=watch))

    def get_assignment(self, topic: str) -> dict[int, list[int]] | None:
        try:
            data, _ = self._r(self.zk.get, TopicZNode.path(topic))
        except NoNodeError:
            return None
        return TopicZNode.decode(topic, data)

    def topic_exists(self, topic: str) -> bool:
        return self._r(self.zk.exists, TopicZNode.path(topic)) is not None

    def create_topic(self, topic: str, assignment: dict[int, list[int]], config: dict[str, str]) -> None:
        """Config first, then the assignment the controller watches (S9.4), as Kafka's AdminZkClient."""
        if self.topic_exists(topic) or self._r(self.zk.exists, DeleteTopicsZNode.path(topic)):
            raise TopicAlreadyExistsError(f"topic {topic!r} already exists")
        self.set_topic_config(topic, config, notify=False)
        try:
            self._r(self.zk.create, TopicZNode.path(topic), TopicZNode.encode(assignment), makepath=True)
        except NodeExistsError:
            raise TopicAlreadyExistsError(f"topic {topic!r} already exists") from None

    def delete_topic_znodes(self, topic: str) -> None:
        for path in (TopicZNode.path(topic), ConfigTopicZNode.path(topic), DeleteTopicsZNode.path(topic)):
            try:
                self._r(self.zk.delete, path, recursive=True)
            except NoNodeError:
                pass

    def request_topic_deletion(self, topic: str) -> None:
        try:
            self._r(self.zk.create, DeleteTopicsZNode.path(topic), b"", makepath=True)
        except NodeExistsError:
            pass

    def get_assignment_with_version(self, topic: str) -> tuple[dict[int, list[int]], int] | None:
        try:
            data, stat = self._r(self.zk.get, TopicZNode.path(topic))
        except NoNodeError:
            return None
        return TopicZNode.decode(topic, data), int(stat.version)

    def get_full_assignments_with_versions(self, topics: Sequence[str]) \
            -> dict[str, tuple[dict[int, ReplicaAssignment], int]]:
        """As ``get_assignments_with_versions``, with each partition's adding and removing replicas
        (KIP-455: a reassignment in progress), read pipelined."""
        found = self._get_many([TopicZNode.path(t) for t in topics])
        return {t: (TopicZNode.decode_full(t, v[0]), v[1]) for t in topics
                if (v := found.get(TopicZNode.path(t))) is not None}

    def get_ongoing_reassignments(self, topics: Sequence[str] | None = None) -> dict[TopicPartitionId,
                                                                                     ReplicaAssignment]:
        """Partitions being reassigned (adding or removing replicas in their topic's znode), every
        topic's unless ``topics`` names some (ListPartitionReassignments)."""
        names = self.get_topics() if topics is None else list(topics)
        return {TopicPartitionId(t, p): a for t, (full, _v) in self.get_full_assignments_with_versions(names).items()
                for p, a in sorted(full.items()) if a.being_reassigned}

    def get_assignments_with_versions(self, topics: Sequence[str]) -> dict[str, tuple[dict[int, list[int]], int]]:
        """Every topic's assignment and znode version, read pipelined (a vanished topic is absent)."""
        found = self._get_many([TopicZNode.path(t) for t in topics])
        return {t: (TopicZNode.decode(t, v[0]), v[1]) for t in topics
                if (v := found.get(TopicZNode.path(t))) is not None}

    def _get_many(self, paths: Sequence[str]) -> dict[str, tuple[bytes, int] | None]:
        """Read ``paths`` pipelined (Kafka 1.1's async ZooKeeper reads: all requests out, then the
        answers), so that thousands of znodes cost a few round trips' latency, not thousands. None
        for a path that does not exist; a read lost to a connection blip is retried alone."""
        get_async = getattr(self.zk, "get_async", None)
        out: dict[str, tuple[bytes, int] | None] = {}
        if get_async is None:  # the simulation's client: one at a time
            for path in paths:
                out[path] = self._read(path)
            return out
        if self._multi_read and len(paths) >= MULTI_READ_MIN:
            try:
                return self._multi_read_many(paths)
            except UnimplementedError:
                self._multi_read = False  # a ZooKeeper before 3.6: one read per znode from now on
                log.info("ZooKeeper has no multiRead (before 3.6): reading znodes one per request")
        for start in range(0, len(paths), 1000):
            pending = [(path, get_async(path)) for path in paths[start:start + 1000]]
            for path, result in pending:
                try:
                    data, stat = result.get(timeout=self.connection_timeout_s)
                except NoNodeError:
                    out[path] = None
                    continue
                except (ConnectionLoss, OperationTimeoutError):
                    out[path] = self._read(path)  # retried like every other read
                    continue
                out[path] = (data, int(stat.version))
        return out

    def _multi_read_many(self, paths: Sequence[str]) -> dict[str, tuple[bytes, int] | None]:
        """``_get_many`` in multiRead requests of ``MULTI_READ_PATHS`` znodes (zk/multi_read.py), all
        sent before the first answer is awaited. A request lost to a connection blip, or a znode
        whose read failed otherwise than by its absence, is read again alone (and raises as
        ``_read`` does)."""
        chroot = self.zk.chroot or ""
        pending = []
        for start in range(0, len(paths), MULTI_READ_PATHS):
            chunk = paths[start:start + MULTI_READ_PATHS]
            result = self.zk.handler.async_result()
            self.zk._call(MultiGetData(tuple(chroot + p for p in chunk)), result)
            pending.append((chunk, result))
        out: dict[str, tuple[bytes, int] | None] = {}
        for chunk, result in pending:
            try:
                answers = result.get(timeout=self.connection_timeout_s)
            except (ConnectionLoss, OperationTimeoutError):
                answers = [None] * len(chunk)
            if len(answers) != len(chunk):
                raise KazooException(f"multiRead answered {len(answers)} reads for {len(chunk)} znodes")
            for path, answer in zip(chunk, answers, strict=True):
                if isinstance(answer, NoNodeError):
                    out[path] = None
                elif isinstance(answer, tuple):
                    out[path] = (answer[0], int(answer[1].version))
                else:
                    out[path] = self._read(path)
        return out

    def get_partition_znodes(self, topics: Sequence[str]) -> dict[str, frozenset[int] | None]:
        """For each of ``topics``, the partitions that have a znode under its ``partitions`` znode,
        or None when that znode does not exist: one getChildren per topic (pipelined), where
        asking each partition's znodes would take two reads per partition. A new topic's
        partitions have none, so its first leaders need no read per partition (issue 29: reading
        100 state znodes and 101 parents was most of the controller's time per new topic)."""
        get_children_async = getattr(self.zk, "get_children_async", None)
        out: dict[str, frozenset[int] | None] = {}
        pending: list[tuple[str, Any]] = []
        for topic in topics:
            path = TopicPartitionsZNode.path(topic)
            if get_children_async is None:  # the simulation's client: one at a time
                try:
                    out[topic] = _partition_ids(self._r(self.zk.get_children, path))
                except NoNodeError:
                    out[topic] = None
            else:
                pending.append((topic, get_children_async(path)))
        for topic, result in pending:
            try:
                children = result.get(timeout=self.connection_timeout_s)
            except NoNodeError:
                out[topic] = None
                continue
            except (ConnectionLoss, OperationTimeoutError):
                try:  # retried like every other read
                    children = self._r(self.zk.get_children, TopicPartitionsZNode.path(topic))
                except NoNodeError:
                    out[topic] = None
                    continue
            out[topic] = _partition_ids(children)
        return out

    def paths_exist(self, paths: Sequence[str]) -> dict[str, bool]:
        """Whether each of ``paths`` exists, asked pipelined (see ``_get_many``)."""
        exists_async = getattr(self.zk, "exists_async", None)
        if exists_async is None:  # the simulation's client: one at a time
            return {p: self.path_exists(p) for p in paths}
        out: dict[str, bool] = {}
        for start in range(0, len(paths), 1000):
            pending = [(p, exists_async(p)) for p in paths[start:start + 1000]]
            for p, result in pending:
                try:
                    out[p] = result.get(timeout=self.connection_timeout_s) is not None
                except (ConnectionLoss, OperationTimeoutError):
                    out[p] = self.path_exists(p)  # retried like every other read
        return out

    def get_topics_to_delete(self, watch: Callable[..., Any] | None = None) -> list[str]:
        return sorted(self._r(self.zk.get_children, DeleteTopicsZNode.PATH, watch=watch))

    def delete_topic_deletion_request(self, topic: str) -> None:
        try:
            self._r(self.zk.delete, DeleteTopicsZNode.path(topic))
        except NoNodeError:
            pass

    # ------------------------------------------------------------ partition state

    def get_partition_state(self, topic: str, partition: int) -> LeaderIsrAndControllerEpoch | None:
        try:
            data, stat = self._r(self.zk.get, TopicPartitionStateZNode.path(topic, partition))
        except NoNodeError:
            return None
        return TopicPartitionStateZNode.decode(topic, partition, data, int(stat.version))

    def get_partition_states(self, tps: Sequence[tuple[str, int]]) -> dict[tuple[str, int], LeaderIsrAndControllerEpoch]:
        """The state znodes of ``tps``, read pipelined (see ``_get_many``); absent ones are left out."""
        found = self._get_many([TopicPartitionStateZNode.path(t, p) for t, p in tps])
        out: dict[tuple[str, int], LeaderIsrAndControllerEpoch] = {}
        for t, p in tps:
            v = found.get(TopicPartitionStateZNode.path(t, p))
            if v is not None:
                out[(t, p)] = TopicPartitionStateZNode.decode(t, p, v[0], v[1])
        return out

    def create_partition_state(self, topic: str, partition: int, state: LeaderIsrAndControllerEpoch) -> int | None:
        """Returns the new zk_version, or None if the state znode already exists."""
        try:
            self._r(self.zk.create, TopicPartitionStateZNode.path(topic, partition),
                           TopicPartitionStateZNode.encode(state), makepath=True)
        except NodeExistsError:
            return None
        return 0

    def update_partition_state(self, topic: str, partition: int, state: LeaderIsrAndControllerEpoch,
                               expected_version: int) -> int | None:
        """Conditional on ``expected_version``; the new zk_version, or None when it was stale (a newer
        writer won). A lost reply (our write applied, the retry then stale) is recognised by
        re-reading and comparing, as Kafka's checkLeaderAndIsrZkData (KAFKA-2729)."""
        path = TopicPartitionStateZNode.path(topic, partition)
        data = TopicPartitionStateZNode.encode(state)
        try:
            stat = self._r(self.zk.set, path, data, version=expected_version)
        except NoNodeError:
            return None
        except BadVersionError:
            now = self._read(path)
            if now is not None and now[1] == expected_version + 1:
                current = TopicPartitionStateZNode.decode(topic, partition, now[0], now[1])
                if current.leader_and_isr.with_zk_version(-1) == state.leader_and_isr.with_zk_version(-1) \
                        and current.controller_epoch == state.controller_epoch:
                    return now[1]
            return None
        return int(stat.version)

    # ------------------------------------------------------------ configs

    def get_topic_config(self, topic: str) -> dict[str, str]:
        try:
            data, _ = self._r(self.zk.get, ConfigTopicZNode.path(topic))
        except NoNodeError:
            return {}
        return ConfigTopicZNode.decode(topic, data)

    def get_configured_topics(self) -> list[str]:
        """Topics with a /config/topics znode (every topic created through the brokers has one)."""
        try:
            return sorted(self._r(self.zk.get_children, ConfigTopicZNode.PATH))
        except NoNodeError:
            return []

    def get_topic_configs(self, topics: Sequence[str]) -> dict[str, dict[str, str]]:
        """Every topic's overrides, read pipelined (all requests out, then the answers: Kafka's
        getEntitiesConfigs) so that thousands of topics cost one round trip's latency, not
        thousands. A topic whose config vanished meanwhile is absent; an unreadable one raises."""
        get_async = getattr(self.zk, "get_async", None)
        if get_async is None:  # the simulation's client: one at a time
            return {t: self.get_topic_config(t) for t in topics}
        out: dict[str, dict[str, str]] = {}
        for start in range(0, len(topics), 1000):
            chunk = topics[start:start + 1000]
            pending = [(t, get_async(ConfigTopicZNode.path(t))) for t in chunk]
            for topic, result in pending:
                try:
                    data, _ = result.get(timeout=self.connection_timeout_s)
                except NoNodeError:
                    continue
                except (ConnectionLoss, OperationTimeoutError):
                    try:
                        out[topic] = self.get_topic_config(topic)  # retried like every other read
                    except NoNodeError:
                        pass
                    continue
                out[topic] = ConfigTopicZNode.decode(topic, data)
        return out

    def set_topic_config(self, topic: str, config: dict[str, str], notify: bool = True) -> None:
        path = ConfigTopicZNode.path(topic)
        data = ConfigTopicZNode.encode(config)
        if self._r(self.zk.exists, path):
            self._r(self.zk.set, path, data)
        else:
            self._r(self.zk.create, path, data, makepath=True)
        if notify:
            self._r(self.zk.create, ConfigChangesZNode.PREFIX, ConfigChangesZNode.encode(topic), sequence=True,
                           makepath=True)

    # ------------------------------------------------------------ admin requests

    def get_preferred_replica_election(self) -> list[TopicPartitionId] | None:
        try:
            data, _ = self._r(self.zk.get, PreferredReplicaElectionZNode.PATH)
        except NoNodeError:
            return None
        return PreferredReplicaElectionZNode.decode(data)

    def create_preferred_replica_election(self, partitions: list[TopicPartitionId]) -> bool:
        """Request an election; False when one is in progress already (a lost reply to our own
        create is recognised by its data)."""
        data = PreferredReplicaElectionZNode.encode(partitions)
        try:
            self._r(self.zk.create, PreferredReplicaElectionZNode.PATH, data, makepath=True)
            return True
        except NodeExistsError:
            current = self._read(PreferredReplicaElectionZNode.PATH)
            return current is not None and current[0] == data and current[1] == 0

    def delete_preferred_replica_election(self) -> None:
        try:
            self._r(self.zk.delete, PreferredReplicaElectionZNode.PATH)
        except NoNodeError:
            pass

    def get_partition_reassignment(self) -> dict[TopicPartitionId, list[int]] | None:
        try:
            data, _ = self._r(self.zk.get, ReassignPartitionsZNode.PATH)
        except NoNodeError:
            return None
        return ReassignPartitionsZNode.decode(data)

    def create_partition_reassignment(self, reassignment: dict[TopicPartitionId, list[int]]) -> bool:
        """Start a reassignment; False when one is in progress already (a lost reply to our own
        create is recognised by its data)."""
        data = ReassignPartitionsZNode.encode(reassignment)
        try:
            self._r(self.zk.create, ReassignPartitionsZNode.PATH, data, makepath=True)
        except NodeExistsError:
            current = self._read(ReassignPartitionsZNode.PATH)
            return current is not None and current[0] == data and current[1] == 0
        return True

    def set_assignment(self, topic: str, assignment: dict[int, list[int]]) -> None:
        self._r(self.zk.set, TopicZNode.path(topic), TopicZNode.encode(assignment))

    def set_assignment_if_version(self, topic: str, assignment: dict[int, list[int]], version: int) -> bool:
        """Write a topic's assignment (partitions added: Kafka's AdminZkClient.addPartitions) only if
        its znode is still at ``version``; False when someone wrote it meanwhile (or it is gone). A
        retried set whose first reply was lost is recognised: our data at ``version + 1``. The
        adding and removing replicas of partitions being reassigned are kept (KIP-455)."""
        read = self._read(TopicZNode.path(topic))
        moving = TopicZNode.decode_full(topic, read[0]) if read is not None and read[1] == version else {}
        kept = {p: a for p, a in moving.items() if a.being_reassigned and list(a.replicas) == assignment.get(p)}
        data = TopicZNode.encode(assignment, {p: a.adding for p, a in kept.items()},
                                 {p: a.removing for p, a in kept.items()})
        try:
            self._r(self.zk.set, TopicZNode.path(topic), data, version=version)
        except NoNodeError:
            return False
        except BadVersionError:
            current = self._read(TopicZNode.path(topic))
            return current is not None and current[0] == data and current[1] == version + 1
        return True

    def set_partition_reassignment(self, reassignment: dict[TopicPartitionId, list[int]]) -> None:
        """Rewrite /admin/reassign_partitions with what is left; delete it when nothing is."""
        try:
            if reassignment:
                self._r(self.zk.set, ReassignPartitionsZNode.PATH, ReassignPartitionsZNode.encode(reassignment))
            else:
                self._r(self.zk.delete, ReassignPartitionsZNode.PATH)
        except NoNodeError:
            pass

    def create_isr_change_notification(self, partitions: list[TopicPartitionId]) -> None:
        self._r(self.zk.create, IsrChangeNotificationZNode.PREFIX, IsrChangeNotificationZNode.encode(partitions),
                       sequence=True, makepath=True)

    def get_isr_change_notifications(self) -> list[tuple[str, list[TopicPartitionId]]]:
        """(path, partitions) of every pending notification; the controller deletes them after use."""
        paths = [f"{IsrChangeNotificationZNode.PATH}/{child}"
                 for child in sorted(self._r(self.zk.get_children, IsrChangeNotificationZNode.PATH))]
        found = self._get_many(paths)  # pipelined: thousands pile up after a broker restarts
        return [(path, IsrChangeNotificationZNode.decode(v[0])) for path in paths
                if (v := found.get(path)) is not None]

    def _subtree(self, path: str) -> list[str]:
        """``path`` and everything under it, children first (what a recursive delete removes)."""
        try:
            children = self._r(self.zk.get_children, path)
        except NoNodeError:
            return []
        out: list[str] = []
        for c in children:
            out.extend(self._subtree(f"{path}/{c}"))
        out.append(path)
        return out

    def delete_guarded(self, epoch_zk_version: int, paths: Sequence[str], recursive: bool = False) -> None:
        """Delete what exists of ``paths`` (with their subtrees when ``recursive``), in one multi guarded
        by the controller epoch: a deposed controller deletes nothing (ControllerMovedError)."""
        for _attempt in range(5):
            doomed: list[str] = []
            for p in paths:
                doomed.extend(self._subtree(p) if recursive else ([p] if self.path_exists(p) else []))
            if not doomed:
                return
            result = self.commit_guarded(epoch_zk_version, [ZkWrite("delete", p) for p in doomed])
            if result.applied:
                return
        log.warning("could not delete %s: they kept changing", list(paths))

    def set_or_delete_guarded(self, epoch_zk_version: int, path: str, data: bytes | None) -> None:
        """Rewrite ``path`` with ``data`` (delete it when None), guarded by the controller epoch."""
        if data is None:
            self.delete_guarded(epoch_zk_version, [path])
            return
        if self.path_exists(path):
            self.commit_guarded(epoch_zk_version, [ZkWrite("set", path, data, -1)])

    def pop_isr_change_notifications(self, watch: Callable[..., Any] | None = None) -> list[TopicPartitionId]:
        out: list[TopicPartitionId] = []
        for child in sorted(self._r(self.zk.get_children, IsrChangeNotificationZNode.PATH, watch=watch)):
            path = f"{IsrChangeNotificationZNode.PATH}/{child}"
            try:
                data, _ = self._r(self.zk.get, path)
                out.extend(IsrChangeNotificationZNode.decode(data))
                self._r(self.zk.delete, path)
            except (NoNodeError, NotEmptyError):
                continue
        return out

    # ------------------------------------------------------------ security: SCRAM users, ACLs (S12.3)

    def get_config_change(self, child: str) -> tuple[str, str]:
        """(entity type, entity name) of one /config/changes notification."""
        data, _ = self._r(self.zk.get, f"{ConfigChangesZNode.PATH}/{child}")
        return ConfigChangesZNode.decode_entity(data)

    def get_acl_change(self, child: str) -> tuple[str, str]:
        """(resource type, resource name) of one /kafka-acl-changes notification."""
        data, _ = self._r(self.zk.get, f"{AclChangesZNode.PATH}/{child}")
        return AclChangesZNode.decode(data)

    def get_scram_users(self) -> list[str]:
        try:
            return sorted(self._r(self.zk.get_children, ConfigUserZNode.PATH))
        except NoNodeError:
            return []

    def get_user_config(self, user: str) -> dict[str, str]:
        try:
            data, _ = self._r(self.zk.get, ConfigUserZNode.path(user))
        except NoNodeError:
            return {}
        return ConfigUserZNode.decode(user, data)

    def set_user_config(self, user: str, config: dict[str, str]) -> None:
        """Write (or, when empty, delete) a user's config, then notify every broker."""
        path = ConfigUserZNode.path(user)
        if config:
            data = ConfigUserZNode.encode(config)
            try:
                self._r(self.zk.set, path, data)
            except NoNodeError:
                try:
                    self._r(self.zk.create, path, data, acl=self.private_acl, makepath=True)
                except NodeExistsError:  # our create's lost reply, or a racer: write ours again
                    self._r(self.zk.set, path, data)
        else:
            try:
                self._r(self.zk.delete, path)
            except NoNodeError:
                pass
        self._r(self.zk.create, ConfigChangesZNode.PREFIX, ConfigChangesZNode.encode_entity("users", user),
                sequence=True, makepath=True)

    def get_acl_resources(self) -> list[tuple[str, str]]:
        out = []
        for kind in AclZNode.RESOURCE_TYPES:
            try:
                out += [(kind, name) for name in self._r(self.zk.get_children, f"{AclZNode.PATH}/{kind}")]
            except NoNodeError:
                continue
        return sorted(out)

    def get_acls(self, resource_type: str, name: str) -> list[tuple[str, str, str, str]]:
        path = AclZNode.path(resource_type, name)
        try:
            data, _ = self._r(self.zk.get, path)
        except NoNodeError:
            return []
        return AclZNode.decode(path, data)

    def set_acls(self, resource_type: str, name: str, acls: list[tuple[str, str, str, str]]) -> None:
        """Replace a resource's ACLs (deleting the znode when none remain) and notify every broker."""
        path = AclZNode.path(resource_type, name)
        if acls:
            data = AclZNode.encode(acls)
            try:
                self._r(self.zk.set, path, data)
            except NoNodeError:
                self._r(self.zk.create, path, data, makepath=True)
        else:
            try:
                self._r(self.zk.delete, path)
            except NoNodeError:
                pass
        self._r(self.zk.create, AclChangesZNode.PREFIX, AclChangesZNode.encode(resource_type, name), sequence=True,
                makepath=True)

    # ------------------------------------------------------------ consumer groups (/consumers, SPEC S11)
    #
    # Committed offsets, persistent znodes under /consumers/[group]/offsets/, written and read by
    # the group coordinator (broker/coordinator/group/group_coordinator.py). Every create may meet its own lost reply.

    def list_groups(self) -> list[str]:
        try:
            return sorted(self._r(self.zk.get_children, ConsumersZNode.PATH))
        except NoNodeError:
            return []

    def get_committed_offset(self, group: str, topic: str, partition: int) -> int | None:
        try:
            data, _ = self._r(self.zk.get, ConsumersZNode.offset(group, topic, partition))
        except NoNodeError:
            return None
        return ConsumersZNode.decode_offset(data)

    def get_group_offsets(self, group: str) -> dict[tuple[str, int], int]:
        """Every committed offset of ``group`` (unreadable ones skipped)."""
        return {tp: offset for tp, (offset, _m) in self.get_group_offsets_and_metadata(group).items()}

    def get_group_offsets_and_metadata(self, group: str) -> dict[tuple[str, int], tuple[int, str]]:
        """Every committed (offset, metadata) of ``group``; unreadable ones skipped."""
        return {tp: (o, m) for tp, (o, m, _ts) in self.get_group_offset_commits(group).items()}

    def get_group_offset_commits(self, group: str) -> dict[tuple[str, int], tuple[int, str, int]]:
        """Every committed (offset, metadata, commit timestamp - -1 when not stored) of ``group``;
        unreadable ones skipped."""
        out: dict[tuple[str, int], tuple[int, str, int]] = {}
        try:
            topics = self._r(self.zk.get_children, ConsumersZNode.offsets(group))
        except NoNodeError:
            return out
        for topic in topics:
            try:
                parts = self._r(self.zk.get_children, ConsumersZNode.offsets_topic(group, topic))
            except NoNodeError:
                continue
            for part in parts:
                if not part.isdigit():
                    continue
                try:
                    data, _ = self._r(self.zk.get, ConsumersZNode.offset(group, topic, int(part)))
                except NoNodeError:
                    continue
                found = ConsumersZNode.decode_offset_commit(data)
                if found is not None:
                    out[(topic, int(part))] = found
        return out

    # The coordinator's fence (SPEC S11.4): /consumers/[group]/coordinator, see GroupCoordinatorState.

    def get_group_coordinator(self, group: str) -> tuple[GroupCoordinatorState, int] | None:
        """The group's coordinator record and its znode version; None if no coordinator ever took it
        (or the record is unreadable: the next claim overwrites it)."""
        found = self._read(ConsumersZNode.coordinator(group))
        if found is None:
            return None
        try:
            return GroupCoordinatorState.decode(found[0]), found[1]
        except KafkaError:
            return GroupCoordinatorState(-1, 0), found[1]

    def claim_group(self, group: str, broker_id: int, now_ms: int) -> GroupLease:
        """Take the group over: bump its coordinator epoch with a write conditional on the version
        read, so that every later write of the previous coordinator fails. A lost reply is told
        from a lost race by re-reading (our broker id, epoch and timestamp there: ours)."""
        path = ConsumersZNode.coordinator(group)
        for _attempt in range(10):
            current = self.get_group_coordinator(group)
            old, version = current if current is not None else (None, -1)
            new = GroupCoordinatorState(broker_id, (old.coordinator_epoch if old else 0) + 1,
                                        old.generation_id if old else 0, now_ms)
            data = new.encode()
            try:
                if current is None:
                    self._r(self.zk.create, path, data, makepath=True)
                    new_version = 0
                else:
                    new_version = int(self._r(self.zk.set, path, data, version=version).version)
            except (NodeExistsError, BadVersionError):
                again = self._read(path)
                if again is not None and again[0] == data:
                    new_version = again[1]  # our own write; its reply was lost
                else:
                    continue  # another claim won the race: read again
            return GroupLease(group, broker_id, new.coordinator_epoch, new_version, new.generation_id)
        raise NotCoordinatorError(f"group {group}: could not take it over (claims kept racing)")

    def set_group_generation(self, lease: GroupLease, generation_id: int, now_ms: int) -> GroupLease:
        """Record the generation the coordinator hands assignments out for, conditional on the
        lease: NotCoordinatorError when another coordinator took the group over."""
        path = ConsumersZNode.coordinator(lease.group_id)
        data = GroupCoordinatorState(lease.broker_id, lease.coordinator_epoch, generation_id, now_ms).encode()
        try:
            stat = self._r(self.zk.set, path, data, version=lease.zk_version)
            version = int(stat.version)
        except (BadVersionError, NoNodeError):
            again = self._read(path)
            if again is None or again[0] != data:
                raise NotCoordinatorError(f"group {lease.group_id}: coordinator epoch "
                                          f"{lease.coordinator_epoch} was fenced by a newer coordinator") from None
            version = again[1]  # our own write; its reply was lost
        return GroupLease(lease.group_id, lease.broker_id, lease.coordinator_epoch, version, generation_id)

    def group_lease_valid(self, lease: GroupLease) -> bool:
        """Is ``lease`` still the group's current fence? A check-only multi: it goes through
        ZooKeeper's leader like a write, so a server lagging behind cannot answer from old state."""
        def check() -> list[Any]:
            tx = self.zk.transaction()  # a transaction commits once: a fresh one per retry
            tx.check(ConsumersZNode.coordinator(lease.group_id), lease.zk_version)
            return list(tx.commit())

        return not any(isinstance(r, Exception) for r in self._r(check))

    def commit_group_offsets(self, lease: GroupLease, offsets: dict[tuple[str, int], tuple[int, str]],
                             known: set[tuple[str, int]], commit_timestamp_ms: int = -1) -> None:
        """Write committed offsets in one multi-op conditional on ``lease`` (NotCoordinatorError when
        it was fenced: nothing written). ``known`` are the partitions believed to have a znode
        (set) - the others are created; a wrong guess is corrected from the conflict's re-read."""
        group = lease.group_id
        for topic in sorted({t for (t, p) in offsets if (t, p) not in known}):
            self._r(self.zk.ensure_path, ConsumersZNode.offsets_topic(group, topic))
        exists = {tp: tp in known for tp in offsets}
        guard = ConsumersZNode.coordinator(group)
        for _attempt in range(3):
            writes = [ZkWrite("set" if exists[(t, p)] else "create", ConsumersZNode.offset(group, t, p),
                              ConsumersZNode.encode_offset(o, m, commit_timestamp_ms))
                      for (t, p), (o, m) in sorted(offsets.items())]
            result = self.commit_guarded(lease.zk_version, writes, guard=guard)
            if result.applied:
                return
            for (t, p) in offsets:
                path = ConsumersZNode.offset(group, t, p)
                if path in result.current:  # what the conflict read back (only its own multi's paths)
                    exists[(t, p)] = result.current[path] is not None
        raise KazooException(f"group {group}: offsets could not be written (znodes kept changing)")

    def delete_group_offsets(self, lease: GroupLease, partitions: Sequence[tuple[str, int]]) -> None:
        """Delete committed offsets, conditional on ``lease`` (NotCoordinatorError when fenced). Many
        partitions go in several multis, each under the lease; a topic's znode stays (empty)."""
        group = lease.group_id
        present = [tp for tp in partitions if self._read(ConsumersZNode.offset(group, *tp)) is not None]
        writes = [ZkWrite("delete", ConsumersZNode.offset(group, t, p)) for t, p in sorted(present)]
        if not self.commit_guarded(lease.zk_version, writes, guard=ConsumersZNode.coordinator(group)).applied:
            raise KazooException(f"group {group}: offsets could not be deleted (znodes kept changing)")

    def delete_group(self, lease: GroupLease) -> None:
        """Delete ``lease``'s group: its committed offsets, then its coordinator record (the fence
        itself, last, in a multi that checks it), then /consumers/[group] if nothing else is under it
        (the old ZooKeeper consumer's ids/owners, say). NotCoordinatorError when fenced."""
        group = lease.group_id
        guard = ConsumersZNode.coordinator(group)
        offsets = self.get_group_offsets_and_metadata(group)
        self.delete_group_offsets(lease, list(offsets))
        try:
            topics = self._r(self.zk.get_children, ConsumersZNode.offsets(group))
        except NoNodeError:
            topics = []
        writes = [ZkWrite("delete", ConsumersZNode.offsets_topic(group, t)) for t in sorted(topics)]
        if topics:
            writes.append(ZkWrite("delete", ConsumersZNode.offsets(group)))
        writes.append(ZkWrite("delete", guard, version=lease.zk_version))
        if not self.commit_guarded(lease.zk_version, writes, guard=guard).applied:
            raise KazooException(f"group {group}: could not be deleted (znodes kept changing)")
        # Transactions' pending offsets were completed (removed) under the lease by the coordinator
        # first; their directory goes when empty so that /consumers/[group] can go too.
        with contextlib.suppress(NoNodeError, NotEmptyError):
            self._r(self.zk.delete, TxnOffsetsZNode.pending_dir(group))
        with contextlib.suppress(NoNodeError, NotEmptyError):
            self._r(self.zk.delete, ConsumersZNode.group(group))

    def commit_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        path = ConsumersZNode.offset(group, topic, partition)
        data = ConsumersZNode.encode_offset(offset)
        try:
            self._r(self.zk.set, path, data)
        except NoNodeError:
            try:
                self._r(self.zk.create, path, data, makepath=True)
            except NodeExistsError:  # a racing commit, or our own create's lost reply: write again
                self._r(self.zk.set, path, data)

    # ------------------------------------------------------------ transactions (/transactions, KIP-98)
    #
    # One znode per transactional id, written only by its transaction coordinator
    # (broker/coordinator/transaction/txn_coordinator.py), every write conditional on the version the
    # coordinator last wrote (TransactionRecord, TxnLease). A lost reply is told from a lost race by
    # re-reading: our own bytes there mean our write went through.

    def list_transactional_ids(self) -> list[str]:
        try:
            names = self._r(self.zk.get_children, TransactionsZNode.PATH)
        except NoNodeError:
            return []
        out = []
        for name in names:
            try:
                out.append(TransactionsZNode.decode_id(name))
            except UnicodeDecodeError:
                continue  # not written by us
        return sorted(out)

    def get_transaction(self, transactional_id: str) -> tuple[TransactionRecord, int] | None:
        """The stored record and its znode version; None when there is none. A record that does not
        decode raises CorruptZnodeError (the coordinator refuses the id rather than reset it)."""
        path = TransactionsZNode.path(transactional_id)
        found = self._read(path)
        if found is None:
            return None
        return TransactionRecord.decode(found[0], path), found[1]

    def claim_transaction(self, transactional_id: str, broker_id: int) -> tuple[TxnLease, TransactionRecord | None]:
        """Take the transactional id over: rewrite its record with the coordinator epoch bumped,
        conditional on the version read, so that every later write of the previous coordinator
        fails. No record yet: a lease at version -1 (the first write creates the znode)."""
        path = TransactionsZNode.path(transactional_id)
        for _attempt in range(10):
            current = self.get_transaction(transactional_id)
            if current is None:
                return TxnLease(transactional_id, broker_id, 0, -1), None
            old, version = current
            new = dataclasses.replace(old, broker_id=broker_id, coordinator_epoch=old.coordinator_epoch + 1)
            data = new.encode()
            try:
                new_version = int(self._r(self.zk.set, path, data, version=version).version)
            except (BadVersionError, NoNodeError):
                again = self._read(path)
                if again is None or again[0] != data:
                    continue  # another claim (or an expiry) won the race: read again
                new_version = again[1]  # our own write; its reply was lost
            return TxnLease(transactional_id, broker_id, new.coordinator_epoch, new_version), new
        raise NotCoordinatorError(f"transactional id {transactional_id}: could not take it over (claims kept racing)")

    def write_transaction(self, lease: TxnLease, record: TransactionRecord) -> TxnLease:
        """Store ``record`` conditional on ``lease`` (creating the znode at version -1);
        NotCoordinatorError when another coordinator wrote since (nothing written)."""
        path = TransactionsZNode.path(lease.transactional_id)
        data = record.encode()
        if len(data) > MAX_ZNODE_BYTES:
            raise RecordListTooLargeError(f"transactional id {lease.transactional_id}: its state is "
                                          f"{len(data)} bytes, above what ZooKeeper stores")
        try:
            if lease.zk_version < 0:
                self._r(self.zk.create, path, data, makepath=True)
                version = 0
            else:
                version = int(self._r(self.zk.set, path, data, version=lease.zk_version).version)
        except (BadVersionError, NoNodeError, NodeExistsError):
            again = self._read(path)
            if again is None or again[0] != data:
                raise NotCoordinatorError(f"transactional id {lease.transactional_id}: coordinator epoch "
                                          f"{lease.coordinator_epoch} was fenced by a newer coordinator") from None
            version = again[1]  # our own write; its reply was lost
        return dataclasses.replace(lease, zk_version=version)

    def delete_transaction(self, lease: TxnLease) -> None:
        """Delete the id's record (transactional.id.expiration.ms), conditional on ``lease``."""
        if lease.zk_version < 0:
            return
        path = TransactionsZNode.path(lease.transactional_id)
        try:
            self._r(self.zk.delete, path, version=lease.zk_version)
        except NoNodeError:
            return  # gone: our own delete whose reply was lost (or another's - nothing to keep)
        except BadVersionError:
            raise NotCoordinatorError(f"transactional id {lease.transactional_id}: fenced") from None

    def transaction_lease_valid(self, lease: TxnLease) -> bool:
        """Is ``lease`` still the id's fence? A check-only multi, linearizable like a write."""
        path = TransactionsZNode.path(lease.transactional_id)
        if lease.zk_version < 0:
            return not self.path_exists(path)

        def check() -> list[Any]:
            tx = self.zk.transaction()
            tx.check(path, lease.zk_version)
            return list(tx.commit())

        return not any(isinstance(r, Exception) for r in self._r(check))

    # ------------------------------------------------------------ transactional group offsets (TxnOffsetCommit)
    #
    # Written only by the group's coordinator, every multi guarded by its lease (the coordinator
    # znode's version), the pending znode and its index entry together (zk.data.TxnOffsetsZNode).

    def get_group_txn_offsets(self, group: str) -> dict[int, PendingTxnOffsets]:
        """Every producer's pending transactional offsets of ``group``; unreadable ones skipped."""
        try:
            names = self._r(self.zk.get_children, TxnOffsetsZNode.pending_dir(group))
        except NoNodeError:
            return {}
        out: dict[int, PendingTxnOffsets] = {}
        for name in names:
            if not name.isdigit():
                continue
            path = TxnOffsetsZNode.pending(group, int(name))
            found = self._read(path)
            if found is None:
                continue
            try:
                out[int(name)] = PendingTxnOffsets.decode(found[0], path)
            except CorruptZnodeError as e:
                log.warning("%s", e)
        return out

    def txn_offsets_index(self, partition: int) -> list[tuple[int, str]]:
        """(producer id, group) of every pending transactional offsets of __consumer_offsets ``partition``."""
        try:
            names = self._r(self.zk.get_children, TxnOffsetsZNode.index_dir(partition))
        except NoNodeError:
            return []
        return sorted(e for e in (TxnOffsetsZNode.parse_index(n) for n in names) if e is not None)

    def txn_offsets_fence(self, partition: int, producer_id: int) -> tuple[int, int] | None:
        """(epoch, znode version) of ``producer_id``'s fence on __consumer_offsets ``partition``
        (``TxnOffsetsZNode.fence``); None when no marker set one."""
        try:
            data, stat = self._r(self.zk.get, TxnOffsetsZNode.fence(partition, producer_id))
        except NoNodeError:
            return None
        try:
            return int(data.decode()), stat.version
        except (UnicodeDecodeError, ValueError):
            return -1, stat.version  # unreadable: no fence (the next marker writes a good one)

    def raise_txn_offsets_fence(self, partition: int, producer_id: int, epoch: int) -> int:
        """A marker of ``epoch`` reached ``partition``: the fence becomes at least ``epoch`` (conditional
        writes, retried on a race). Returns the fence now stored."""
        path = TxnOffsetsZNode.fence(partition, producer_id)
        for _attempt in range(5):
            current = self.txn_offsets_fence(partition, producer_id)
            try:
                if current is None:
                    self._r(self.zk.create, path, str(epoch).encode(), makepath=True)
                    return epoch
                if current[0] >= epoch:
                    return current[0]
                self._r(self.zk.set, path, str(epoch).encode(), current[1])
                return epoch
            except (NodeExistsError, BadVersionError):
                continue  # another marker or commit wrote it meanwhile: read again
        raise KazooException(f"transaction fence of producer {producer_id} on partition {partition} kept changing")

    def write_group_txn_offsets(self, lease: GroupLease, producer_id: int, pending: PendingTxnOffsets,
                                partition: int, exists: bool) -> None:
        """Store ``pending`` (creating it and its index entry unless ``exists``), guarded by ``lease``
        and by the producer's fence (``TxnOffsetsZNode.fence``): ProducerFencedError when a marker of a
        newer epoch reached the partition; NotCoordinatorError when the lease is fenced."""
        group = lease.group_id
        self._r(self.zk.ensure_path, TxnOffsetsZNode.pending_dir(group))
        self._r(self.zk.ensure_path, TxnOffsetsZNode.index_dir(partition))
        path, index = TxnOffsetsZNode.pending(group, producer_id), TxnOffsetsZNode.index(partition, producer_id, group)
        fence_path = TxnOffsetsZNode.fence(partition, producer_id)
        data = pending.encode()
        if len(data) > MAX_ZNODE_BYTES:
            raise RecordListTooLargeError(f"group {group}: {len(pending.offsets)} pending offsets do not fit a znode")
        for _attempt in range(5):
            fence = self.txn_offsets_fence(partition, producer_id)
            if fence is not None and fence[0] > pending.producer_epoch:
                raise ProducerFencedError(f"producer {producer_id} epoch {pending.producer_epoch} was fenced: a "
                                          f"transaction marker of epoch {fence[0]} reached the group's partition")
            if fence is None:
                self._r(self.zk.ensure_path, TxnOffsetsZNode.fences_dir(partition))
                guard_fence = ZkWrite("create", fence_path, b"-1")
            else:  # unchanged, but only if no marker moved it since it was read: the version check
                guard_fence = ZkWrite("set", fence_path, str(fence[0]).encode(), fence[1])
            writes = ([ZkWrite("set", path, data)] if exists
                      else [ZkWrite("create", path, data), ZkWrite("create", index)])
            result = self.commit_guarded(lease.zk_version, [*writes, guard_fence],
                                         guard=ConsumersZNode.coordinator(group))
            if result.applied:
                return
            if path in result.current:
                exists = result.current[path] is not None
        raise KazooException(f"group {group}: pending offsets could not be written (znodes kept changing)")

    def complete_group_txn_offsets(self, lease: GroupLease, producer_id: int, partition: int,
                                   offsets: dict[tuple[str, int], tuple[int, str]], known: set[tuple[str, int]],
                                   commit_timestamp_ms: int = -1) -> None:
        """The transaction's outcome for ``group``: ``offsets`` (empty on abort) become committed
        offsets and the pending znode and its index entry go, in one multi guarded by ``lease``."""
        group = lease.group_id
        for topic in sorted({t for (t, p) in offsets if (t, p) not in known}):
            self._r(self.zk.ensure_path, ConsumersZNode.offsets_topic(group, topic))
        exists = {tp: tp in known for tp in offsets}
        path, index = TxnOffsetsZNode.pending(group, producer_id), TxnOffsetsZNode.index(partition, producer_id, group)
        has_pending, has_index = self.path_exists(path), self.path_exists(index)
        for _attempt in range(3):
            writes = [ZkWrite("set" if exists[(t, p)] else "create", ConsumersZNode.offset(group, t, p),
                              ConsumersZNode.encode_offset(o, m, commit_timestamp_ms))
                      for (t, p), (o, m) in sorted(offsets.items())]
            writes += [ZkWrite("delete", p) for p, present in ((path, has_pending), (index, has_index)) if present]
            result = self.commit_guarded(lease.zk_version, writes, guard=ConsumersZNode.coordinator(group))
            if result.applied:
                return
            for (t, p) in offsets:
                at = ConsumersZNode.offset(group, t, p)
                if at in result.current:
                    exists[(t, p)] = result.current[at] is not None
            if path in result.current:
                has_pending = result.current[path] is not None
            if index in result.current:
                has_index = result.current[index] is not None
        raise KazooException(f"group {group}: transactional offsets could not be completed (znodes kept changing)")

    # ------------------------------------------------------------ producer ids

    def get_latest_producer_id_block(self) -> tuple[int, int] | None:
        """(start, end) of the last producer id block allocated in the cluster, None before the first."""
        try:
            data, _ = self._r(self.zk.get, ProducerIdBlockZNode.PATH)
        except NoNodeError:
            return None
        return ProducerIdBlockZNode.decode(data)

    def allocate_producer_id_block(self, broker_id: int) -> tuple[int, int]:
        """Claim the next block of producer ids with a conditional write (unique across brokers)."""
        size = ProducerIdBlockZNode.BLOCK_SIZE
        while True:
            try:
                data, stat = self._r(self.zk.get, ProducerIdBlockZNode.PATH)
            except NoNodeError:
                try:
                    self._r(self.zk.create, ProducerIdBlockZNode.PATH, ProducerIdBlockZNode.encode(broker_id, 0, size - 1))
                    return 0, size - 1
                except NodeExistsError:
                    continue
            _start, end = ProducerIdBlockZNode.decode(data)
            new_start, new_end = end + 1, end + size
            try:
                self._r(self.zk.set, ProducerIdBlockZNode.PATH, ProducerIdBlockZNode.encode(broker_id, new_start, new_end),
                            version=stat.version)
                return new_start, new_end
            except BadVersionError:
                continue
