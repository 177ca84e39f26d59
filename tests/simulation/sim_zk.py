"""An in-memory ZooKeeper and a kazoo-compatible client for deterministic simulation (issue 14).

Theory of operation
===================

``SimZooKeeper`` is one ZooKeeper ensemble reduced to what a client can observe; ``SimKazooClient`` is a
drop-in replacement for the part of ``kazoo.client.KazooClient`` this project uses. Both are
single-threaded and deterministic: no threads, no wall clock, no hidden randomness (the only random
sources are ``random.Random`` objects the caller passes in). The same calls on the same seed give the
same znodes, zxids, session ids, watch events and faults.

The server
----------
* **Znodes and stats.** Every znode has data (``bytes`` or ``None``, as ZooKeeper stores null data),
  and the stat fields of ZooKeeper's ``Stat``: czxid, mzxid, pzxid, version, cversion, aversion,
  ephemeralOwner, dataLength, numChildren; ctime/mtime come from the logical clock ``now_ms``.
  Stats are returned as kazoo's own ``ZnodeStat``.
* **zxid.** One global counter, advanced once per write *request* like ZooKeeper's
  PrepRequestProcessor: every create/delete/set/multi takes a zxid even when it fails (the failure is
  logged as an error txn), a multi's ops all share one zxid, creating and closing a session take one
  each (all ephemerals of a closed session are deleted under the close's zxid); reads take none. The
  czxid of an ephemeral znode is what the project uses as a broker epoch.
* **Checks, in ZooKeeper's order.** create: NoNode (parent) > NodeExists > NoChildrenForEphemerals;
  delete: NoNode > BadVersion > NotEmpty; set/check: NoNode > BadVersion; version -1 matches any.
* **Sequential names.** The ``%010d`` suffix counts the children ever *created* under the parent
  (deletions do not advance it), while the visible ``cversion`` counts creations and deletions:
  measured on ZooKeeper 3.8.0 (3 creates + 3 deletes: cversion 6, next suffix 3). Inside a multi a
  sequential create sees the creates of the ops before it.
* **Multi.** Ops apply in order on the live tree with an undo log (later ops see earlier ones); the
  first failure undoes everything and the result list is what kazoo's ``TransactionRequest.commit()``
  returns from a real server: ``RolledBackError()`` for the ops before the failing one, the failing
  op's error, and ``RuntimeInconsistency()`` for the ops after it. Watches fire only when the whole
  multi commits. The failed multi still takes a zxid.
* **Orders.** ZooKeeper returns children in Java ``HashSet`` order, and a closing session deletes its
  ephemerals in the order of another HashSet; the model emulates Java's ``String.hashCode`` and
  ``HashMap`` bucket layout (children: ``HashSet(8)``; a session's ephemerals: ``HashSet()``, by full
  path) so ``get_children`` lists and session-close events come out in the real server's order. Give
  the server an ``rng`` to shuffle children instead (to flush out code that depends on an order
  ZooKeeper does not promise).
* **Watches** are one-shot and registered per connection, in ZooKeeper's tables: data watches (from
  ``get`` and ``exists``, including ``exists`` on a missing node) and child watches (``get_children``).
  They fire as ZooKeeper fires them: create -> CREATED on the node, CHILD on the parent; delete ->
  DELETED on the node (data and child watchers, one event per connection), CHILD on the parent; set ->
  CHANGED. A connection drop removes the connection's server-side watches (kazoo never re-registers
  them; see below).
* **Delayed delivery.** A fired event reaches the client at once, like a packet on the connection:
  the client pops its watcher functions for the path exactly as kazoo's reader thread does (so
  ordering with later replies holds), but the *callbacks* are queued on ``server.pending`` as
  ``(client, callback, event)`` and run only when the harness calls ``server.deliver_watches(limit)``
  (or at the end of each top-level client call with ``auto_deliver=True``). That is kazoo's separate
  callback thread, with the harness choosing when it runs. Entries with ``event=None`` are deferred
  tasks (``handler.spawn`` of the DataWatch/ChildrenWatch recipes) and are called with no argument.
  Callback exceptions are logged and appended to ``server.callback_errors`` (kazoo logs and swallows).
* **Sessions** have ids, passwords, timeouts and their ephemeral znodes. ``expire_session`` deletes a
  session's ephemerals (firing their watches) and tells its client; ``advance(ms)`` moves the logical
  clock and expires every session whose connection has been down for its timeout.

The client
----------
``SimKazooClient`` mirrors kazoo's state machine (``KeeperState`` underneath, ``KazooState`` for
listeners): ``start`` -> CONNECTED; a connection drop -> SUSPENDED (and kazoo calls every pending watch
function with a ``WatchedEvent(NONE, CONNECTING, None)`` and forgets it); reconnect with the session
alive -> CONNECTED; with the session expired -> LOST, then a new session -> CONNECTED; ``stop`` ->
LOST and the session is closed (ephemerals go at once). As observed with kazoo 2.11, ``stop`` first
runs the client's queued callbacks (kazoo's handler drains its queue when it stops), and the watch
functions it still held get a ``NONE``/``CLOSED`` event after the next ``start()``. ``crash()`` (sim
only) is a dying process: no closeSession, the session lingers until it times out. Listeners run
synchronously at the state change (kazoo runs them on its connection thread); a listener returning
True is removed. ``client_id`` is ``(session_id, password)`` only while connected, else None, as in
kazoo.

Paths go through kazoo's own ``normpath``/chroot code (``hosts="sim:2181/chroot"`` works), so ``"/a/"``
means ``"/a"`` and returned paths are un-chrooted. ``create(makepath=True)``, ``ensure_path`` and
``delete(recursive=True)`` are composed of single requests exactly as kazoo composes them (each one
consults the fault policy), including kazoo's return values (``ensure_path`` returns the created path,
or True when it already existed; ``delete(recursive=True)`` returns None when it deleted the node and
True when there was none).

Calls while not connected: CLOSED (before ``start``/after ``stop``) -> ``ConnectionClosedError``;
session expired and not renewed -> ``SessionExpiredError``; SUSPENDED -> kazoo would *block* until the
connection is back, which a single-threaded model cannot do, so the client calls the ``on_block()``
hook (the harness may reconnect, expire or advance the world there) and then raises ``ConnectionLoss``
if it is still suspended.

Faults
------
Per client, ``fault_policy(op, path)`` is consulted before every request (op is one of ``create``,
``delete``, ``set``, ``get``, ``exists``, ``get_children``, ``transaction``, ``sync``, ``get_acls``,
``set_acls``; path is the client's view, the first op's path for a transaction) and returns:

* ``None``: no fault;
* ``"before"``: the connection drops before the request reaches the server: nothing applied;
* ``"after"``: the server applies the request (a write takes effect, its watches fire for others),
  then the connection drops and the reply is lost: the caller sees ``ConnectionLoss``. kazoo's retry
  then re-sends the request, which now meets its own effect (``NodeExistsError`` for a create,
  ``BadVersionError`` for a conditional set, ``NoNodeError`` for a delete, a fresh sequential node for
  a sequential create, a failed multi for a replayed multi);
* ``"expire"``: the server expires the session (ephemerals deleted) and closes the connection; the
  in-flight request fails with ``ConnectionLoss`` (kazoo fails in-flight requests when the socket
  drops), the client goes SUSPENDED then LOST, and later calls raise ``SessionExpiredError`` until
  ``restart_session()``/``reconnect()`` (or at once with ``auto_renew_session=True``, kazoo's own
  behaviour of opening a new session immediately).

A connection drop from a fault is a flap: the client reconnects at once with the same session
(``reconnect_after_fault=True``), so listeners see SUSPENDED then CONNECTED and raw watches are lost
(their functions get the NONE event; an event the faulting request itself triggered for its own
client is lost with the reply).
``server.disconnect(client)`` is a sustained partition: the client stays SUSPENDED (its session
ageing towards expiry under ``advance``) until ``server.reconnect(client)``/``client.reconnect()``.

Retries
-------
``client.retry(fn, *args, **kwargs)`` follows ``kazoo.retry.KazooRetry`` to the letter (``SimRetry``,
tested against KazooRetry): ConnectionLoss and OperationTimeout are retried, SessionExpired too unless
``ignore_expire=False``, ConnectionClosedError never; ``max_tries`` counts calls (3 -> at most 3
attempts, then ``RetryFailedError``), ``None``/-1 is unbounded. Sleeps are virtual: they call
``on_retry_sleep(seconds)`` (a harness hook) instead of sleeping. ``command_retry`` takes kazoo's dict
or a ``KazooRetry``. Without one, kazoo retries forever; ``SimRetry.livelock_limit`` turns a retry that
can never succeed into ``SimLivelockError`` instead of a hang.

Known simplifications: ACLs are stored and returned but never enforced; no quotas, TTL/container
nodes, persistent watches, reconfig or read-only mode; a data size limit is not enforced; Java
HashSet treeification (9+ colliding names in one bucket of a 64+ table) is not emulated.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
from collections import deque
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from os.path import split as _split_path
from typing import Any, Literal, ParamSpec, TypeVar

from kazoo.exceptions import (
    BadArgumentsError,
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
    ZookeeperError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.hosts import collect_hosts
from kazoo.protocol.paths import _prefix_root, normpath
from kazoo.protocol.states import EventType, KazooState, KeeperState, WatchedEvent, ZnodeStat
from kazoo.retry import ForceRetryError, KazooRetry, RetryFailedError
from kazoo.retry import InterruptedError as RetryInterruptedError
from kazoo.security import ACL, OPEN_ACL_UNSAFE

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

FaultOutcome = Literal["before", "after", "expire"]
FaultPolicy = Callable[[str, str], "FaultOutcome | None"]
Watcher = Callable[[WatchedEvent], object]
Listener = Callable[[str], object]
PendingCallback = tuple["SimKazooClient", Callable[..., object], "WatchedEvent | None"]

_CLOSED_STATES = (KeeperState.EXPIRED_SESSION, KeeperState.AUTH_FAILED, KeeperState.CLOSED)
_FIRST_SESSION_ID = 0x0100_0000_0000_0000  # ZooKeeper puts the server id in the top byte
_FAULT_OUTCOMES = ("before", "after", "expire")


class SimLivelockError(RuntimeError):
    """A retry loop that can never succeed (e.g. unbounded retries while partitioned)."""


# ---------------------------------------------------------------------------------------------- faults


def random_faults(rng: random.Random, p_before: float = 0.0, p_after: float = 0.0, p_expire: float = 0.0,
                  ops: Collection[str] | None = None) -> FaultPolicy:
    """A policy drawing one ``rng.random()`` per request (of ``ops``, default all): "before" with
    probability p_before, "after" with p_after, "expire" with p_expire, else no fault."""
    if p_before < 0 or p_after < 0 or p_expire < 0 or p_before + p_after + p_expire > 1:
        raise ValueError("fault probabilities must be >= 0 and sum to at most 1")

    def policy(op: str, path: str) -> FaultOutcome | None:
        if ops is not None and op not in ops:
            return None
        x = rng.random()
        if x < p_before:
            return "before"
        if x < p_before + p_after:
            return "after"
        if x < p_before + p_after + p_expire:
            return "expire"
        return None

    return policy


def fault_once(outcome: FaultOutcome, op: str | None = None, path: str | None = None) -> FaultPolicy:
    """A policy that injects ``outcome`` into the first request matching ``op`` and ``path`` (None:
    any), and never again."""
    if outcome not in _FAULT_OUTCOMES:
        raise ValueError(f"unknown fault outcome {outcome!r}")
    fired = False

    def policy(req_op: str, req_path: str) -> FaultOutcome | None:
        nonlocal fired
        if fired or (op is not None and req_op != op) or (path is not None and req_path != path):
            return None
        fired = True
        return outcome

    return policy


# ---------------------------------------------------------------------------------------------- retry


def _no_sleep(_seconds: float) -> None:
    return None


class SimRetry:
    """``kazoo.retry.KazooRetry`` with virtual sleeps and jitter from an optional ``random.Random``.

    Same arguments and semantics; ``deadline`` counts virtual seconds slept. ``livelock_limit``
    (sim only) raises SimLivelockError after that many failed attempts of one call."""

    RETRY_EXCEPTIONS: tuple[type[BaseException], ...] = (ConnectionLoss, OperationTimeoutError, ForceRetryError)
    EXPIRED_EXCEPTIONS: tuple[type[BaseException], ...] = (SessionExpiredError,)

    def __init__(self, max_tries: int | None = 1, delay: float = 0.1, backoff: float = 2, max_jitter: float = 0.4,
                 max_delay: float = 60.0, ignore_expire: bool = True,
                 sleep_func: Callable[[float], None] = _no_sleep, deadline: float | None = None,
                 interrupt: Callable[[], bool] | None = None, rng: random.Random | None = None,
                 livelock_limit: int | None = 10_000) -> None:
        self.max_tries = max_tries
        self.delay = delay
        self.backoff = backoff
        self.max_jitter = max(min(max_jitter, 1.0), 0.0)
        self.max_delay = float(max_delay)
        self.sleep_func = sleep_func
        self.deadline = deadline
        self.interrupt = interrupt
        self.rng = rng
        self.livelock_limit = livelock_limit
        self.retry_exceptions = self.RETRY_EXCEPTIONS + (self.EXPIRED_EXCEPTIONS if ignore_expire else ())
        self.attempts = 0  # failed attempts of the last call (KazooRetry's _attempts)

    @classmethod
    def from_kazoo(cls, retry: KazooRetry, sleep_func: Callable[[float], None] = _no_sleep,
                   rng: random.Random | None = None) -> SimRetry:
        obj = cls(max_tries=retry.max_tries, delay=retry.delay, backoff=retry.backoff, max_jitter=retry.max_jitter,
                  max_delay=retry.max_delay, sleep_func=sleep_func, deadline=retry.deadline,
                  interrupt=retry.interrupt, rng=rng)
        obj.retry_exceptions = tuple(retry.retry_exceptions)
        return obj

    def copy(self) -> SimRetry:
        obj = SimRetry(max_tries=self.max_tries, delay=self.delay, backoff=self.backoff, max_jitter=self.max_jitter,
                       max_delay=self.max_delay, sleep_func=self.sleep_func, deadline=self.deadline,
                       interrupt=self.interrupt, rng=self.rng, livelock_limit=self.livelock_limit)
        obj.retry_exceptions = self.retry_exceptions
        return obj

    def __call__(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        self.attempts = 0
        cur_delay = self.delay
        slept = 0.0
        while True:
            try:
                return func(*args, **kwargs)
            except ConnectionClosedError:
                raise
            except self.retry_exceptions:
                self.attempts += 1
                # Note: like kazoo, max_tries == -1 (or None, or 0) never equals the count: unbounded.
                if self.attempts == self.max_tries:
                    raise RetryFailedError("Too many retry attempts") from None
                if self.livelock_limit is not None and self.attempts >= self.livelock_limit:
                    raise SimLivelockError(f"{self.attempts} failed attempts of {func!r}") from None
                jitter = self.rng.uniform(1.0 - self.max_jitter, 1.0 + self.max_jitter) if self.rng else 1.0
                sleeptime = cur_delay * jitter
                if self.deadline is not None and slept + sleeptime >= self.deadline:
                    raise RetryFailedError("Exceeded retry deadline") from None
                if self.interrupt:
                    remain = sleeptime
                    while remain > 0:
                        self.sleep_func(min(0.1, remain))
                        remain -= 0.1
                        if self.interrupt():
                            raise RetryInterruptedError() from None
                else:
                    self.sleep_func(sleeptime)
                slept += sleeptime
                cur_delay = min(sleeptime * self.backoff, self.max_delay)


# ---------------------------------------------------------------------------------------------- tree


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units) as an unsigned 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h


class JavaHashSet:
    """Iteration order of a ``java.util.HashSet<String>``: ZooKeeper's DataNode children
    (``new HashSet<>(8)``) and a session's ephemeral paths (``new HashSet<>()``, 16 buckets)."""

    __slots__ = ("_buckets", "_members", "_threshold")

    def __init__(self, initial_capacity: int = 8) -> None:
        self._buckets: list[list[tuple[int, str]]] = []
        self._members: set[str] = set()
        self._threshold = initial_capacity  # a power of two: the first put allocates this many buckets

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, name: object) -> bool:
        return name in self._members

    def __iter__(self) -> Iterator[str]:
        for bucket in self._buckets:
            for _h, name in bucket:
                yield name

    def copy(self) -> JavaHashSet:
        other = JavaHashSet(self._threshold)
        other._buckets = [list(b) for b in self._buckets]
        other._members = set(self._members)
        return other

    @staticmethod
    def _hash(name: str) -> int:
        raw = java_string_hash(name)
        return raw ^ (raw >> 16)  # HashMap.hash: h ^ (h >>> 16)

    def _resize(self) -> None:
        old = self._buckets
        if not old:
            self._buckets = [[] for _ in range(self._threshold)]
            self._threshold = int(len(self._buckets) * 0.75)
            return
        cap = len(old)
        new: list[list[tuple[int, str]]] = [[] for _ in range(cap * 2)]
        for j, bucket in enumerate(old):
            for h, name in bucket:  # Java splits each bin into lo/hi lists, keeping their order
                new[j + cap if h & cap else j].append((h, name))
        self._buckets = new
        self._threshold = int(len(new) * 0.75)

    def add(self, name: str) -> None:
        if name in self._members:
            return
        if not self._buckets:
            self._resize()
        h = self._hash(name)
        bucket = self._buckets[h & (len(self._buckets) - 1)]
        bucket.append((h, name))
        self._members.add(name)
        if len(bucket) > 8 and len(self._buckets) < 64:  # treeifyBin on a small table resizes instead
            self._resize()
        if len(self._members) > self._threshold:
            self._resize()

    def remove(self, name: str) -> None:
        if name not in self._members:
            return
        self._members.discard(name)
        bucket = self._buckets[self._hash(name) & (len(self._buckets) - 1)]
        for i, (_h, n) in enumerate(bucket):
            if n == name:
                del bucket[i]
                return


@dataclass
class _Node:
    data: bytes | None
    czxid: int
    mzxid: int
    pzxid: int
    ctime: int
    mtime: int
    ephemeral_owner: int = 0
    version: int = 0
    cversion: int = 0
    aversion: int = 0
    child_creates: int = 0  # the sequential-name counter: child creations only (cversion counts deletes too)
    acl: list[ACL] = field(default_factory=lambda: list(OPEN_ACL_UNSAFE))
    children: JavaHashSet = field(default_factory=JavaHashSet)

    def stat(self) -> ZnodeStat:
        return ZnodeStat(self.czxid, self.mzxid, self.ctime, self.mtime, self.version, self.cversion, self.aversion,
                         self.ephemeral_owner, len(self.data) if self.data else 0, len(self.children), self.pzxid)


@dataclass
class _Session:
    session_id: int
    password: bytes
    timeout_ms: int
    client: SimKazooClient | None
    alive: bool = True
    ephemerals: JavaHashSet = field(default_factory=lambda: JavaHashSet(16))  # closeSession deletes in this order
    disconnected_since: int | None = None


@dataclass
class _TxOp:
    kind: Literal["create", "delete", "set_data", "check"]
    path: str  # full (chrooted) path
    data: bytes | None = None
    version: int = -1
    ephemeral: bool = False
    sequence: bool = False
    acl: list[ACL] | None = None


class _Txn:
    """One write request being applied: its zxid, an undo log (multi only: a single op checks
    everything before it mutates), and the watch triggers to fire."""

    def __init__(self, zxid: int, undoable: bool = False) -> None:
        self.zxid = zxid
        self.undoable = undoable
        self.undo: list[Callable[[], None]] = []
        self.events: list[tuple[str, str]] = []


def _parent_of(path: str) -> tuple[str, str]:
    i = path.rfind("/")
    return (path[:i] or "/"), path[i + 1:]


def _bad_path_char(c: str) -> bool:
    o = ord(c)
    return (o == 0 or 0 < o <= 0x1F or 0x7F <= o <= 0x9F or 0xD800 <= o <= 0xF8FF or 0xFFF0 <= o <= 0xFFFF)


def _validate_path(path: str) -> None:
    """ZooKeeper's PathUtils.validatePath (the server answers BadArguments)."""
    if not path or path[0] != "/":
        raise BadArgumentsError()
    if path == "/":
        return
    if path[-1] == "/":
        raise BadArgumentsError()
    for comp in path[1:].split("/"):
        if comp in ("", ".", ".."):
            raise BadArgumentsError()
    # Fast path: printable ASCII (0x20-0x7E) has no forbidden character.
    if not (path.isascii() and path.isprintable()) and any(_bad_path_char(c) for c in path):
        raise BadArgumentsError()


# ---------------------------------------------------------------------------------------------- server


class SimZooKeeper:
    """The in-memory server (see the module docstring)."""

    def __init__(self, *, auto_deliver: bool = False, rng: random.Random | None = None) -> None:
        self.auto_deliver = auto_deliver
        self.rng = rng
        self.zxid = 0
        self.now_ms = 0
        self.pending: deque[PendingCallback] = deque()
        self.callback_errors: list[tuple[SimKazooClient, BaseException]] = []
        self.delivered = 0
        self._nodes: dict[str, _Node] = {}
        self._sessions: dict[int, _Session] = {}
        self._next_session = _FIRST_SESSION_ID
        self._data_watches: dict[str, dict[SimKazooClient, None]] = {}
        self._child_watches: dict[str, dict[SimKazooClient, None]] = {}
        self._delivering = False
        self._depth = 0  # client calls in progress: auto delivery waits for the outermost to return
        self._nodes["/"] = _Node(None, 0, 0, 0, 0, 0)
        for path in ("/zookeeper", "/zookeeper/config", "/zookeeper/quota"):
            self._nodes[path] = _Node(b"" if path != "/zookeeper" else None, 0, 0, 0, 0, 0)
            parent, name = _parent_of(path)
            self._nodes[parent].children.add(name)

    # ------------------------------------------------------------------ harness API

    def client(self, hosts: str = "sim:2181", **kwargs: Any) -> SimKazooClient:
        return SimKazooClient(self, hosts, **kwargs)

    def deliver_watches(self, limit: int | None = None) -> int:
        """Run up to ``limit`` (None: all, including ones queued meanwhile) queued callbacks in order."""
        n = 0
        was = self._delivering
        self._delivering = True
        try:
            while self.pending and (limit is None or n < limit):
                entry = self.pending.popleft()
                n += 1
                if not entry[0]._stopped:
                    self._run_callbacks([entry])
        finally:
            self._delivering = was
        return n

    def _run_callbacks(self, entries: list[PendingCallback]) -> None:
        was = self._delivering
        self._delivering = True
        try:
            for client, callback, event in entries:
                self.delivered += 1
                try:
                    if event is None:
                        callback()
                    else:
                        callback(event)
                except Exception as e:  # kazoo's callback thread logs and carries on
                    log.debug("callback %r of %r raised %r", callback, client, e)
                    self.callback_errors.append((client, e))
        finally:
            self._delivering = was

    def expire_session(self, session_id: int) -> None:
        """Expire a session now, as the leader does when it stops hearing from the client."""
        sess = self._sessions.get(session_id)
        if sess is None or not sess.alive:
            return
        self._kill_session(sess)
        if sess.client is not None:
            sess.client._on_session_expired(sess)
        self._auto()

    def disconnect(self, client: SimKazooClient) -> None:
        """Cut ``client`` off (SUSPENDED, session kept and ageing) until ``reconnect``."""
        client._link_up = False
        client._lose_connection()
        self._auto()

    def reconnect(self, client: SimKazooClient) -> None:
        client.reconnect()

    def advance(self, ms: int) -> list[int]:
        """Move the logical clock; expire sessions disconnected for their timeout. Returns their ids."""
        self.now_ms += ms
        expired = [s.session_id for s in self._sessions.values()
                   if s.alive and s.disconnected_since is not None
                   and self.now_ms - s.disconnected_since >= s.timeout_ms]
        for sid in expired:
            self.expire_session(sid)
        return expired

    def session_ids(self) -> list[int]:
        return [s.session_id for s in self._sessions.values() if s.alive]

    def session_alive(self, session_id: int) -> bool:
        sess = self._sessions.get(session_id)
        return sess is not None and sess.alive

    def ephemerals(self, session_id: int) -> list[str]:
        sess = self._sessions.get(session_id)
        return list(sess.ephemerals) if sess is not None else []

    def node(self, path: str) -> tuple[bytes | None, ZnodeStat] | None:
        """(data, stat) of a znode by full path, without a client, faults or watches."""
        n = self._nodes.get(path)
        return None if n is None else (n.data, n.stat())

    def snapshot(self, under: str = "/") -> dict[str, tuple[bytes | None, ZnodeStat]]:
        prefix = under.rstrip("/") + "/"
        return {p: (n.data, n.stat()) for p, n in sorted(self._nodes.items()) if p == under or p.startswith(prefix)}

    def watch_count(self) -> int:
        return sum(len(w) for w in self._data_watches.values()) + sum(len(w) for w in self._child_watches.values())

    def check_invariants(self) -> None:
        for path, node in self._nodes.items():
            if path != "/":
                parent, name = _parent_of(path)
                assert parent in self._nodes and name in self._nodes[parent].children, path
            for child in node.children:
                assert (path.rstrip("/") + "/" + child) in self._nodes, (path, child)
            if node.ephemeral_owner:
                sess = self._sessions.get(node.ephemeral_owner)
                assert sess is not None and sess.alive and path in sess.ephemerals, path
                assert len(node.children) == 0, path
            assert node.czxid <= node.mzxid <= self.zxid and node.pzxid <= self.zxid, path
        for sess in self._sessions.values():
            for path in sess.ephemerals:
                assert sess.alive and self._nodes[path].ephemeral_owner == sess.session_id, path

    # ------------------------------------------------------------------ sessions

    def _create_session(self, client: SimKazooClient, timeout_ms: int) -> _Session:
        self.zxid += 1  # createSession is a txn
        sid = self._next_session
        self._next_session += 1
        sess = _Session(sid, sid.to_bytes(8, "big") * 2, timeout_ms, client)
        self._sessions[sid] = sess
        return sess

    def _kill_session(self, sess: _Session) -> None:
        """closeSession: one zxid, every ephemeral deleted under it, watches fired."""
        self.zxid += 1
        txn = _Txn(self.zxid)
        for path in list(sess.ephemerals):
            self._apply_delete(txn, path, -1)
        sess.alive = False
        self._fire(txn)

    def _drop_connection(self, client: SimKazooClient) -> None:
        for table in (self._data_watches, self._child_watches):
            for path in [p for p, w in table.items() if client in w]:
                del table[path][client]
                if not table[path]:
                    del table[path]
        sess = client._session
        if sess is not None and sess.alive and sess.disconnected_since is None:
            sess.disconnected_since = self.now_ms

    def _auto(self) -> None:
        if self.auto_deliver and not self._delivering and self._depth == 0:
            self.deliver_watches()

    # ------------------------------------------------------------------ reads

    def _node_or_nonode(self, path: str) -> _Node:
        _validate_path(path)
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError()
        return node

    def _watch(self, table: dict[str, dict[SimKazooClient, None]], path: str, client: SimKazooClient | None) -> None:
        if client is not None:
            table.setdefault(path, {})[client] = None

    def _get(self, path: str, watcher: SimKazooClient | None) -> tuple[bytes | None, ZnodeStat]:
        node = self._node_or_nonode(path)
        self._watch(self._data_watches, path, watcher)
        return node.data, node.stat()

    def _exists(self, path: str, watcher: SimKazooClient | None) -> ZnodeStat | None:
        _validate_path(path)
        self._watch(self._data_watches, path, watcher)
        node = self._nodes.get(path)
        return None if node is None else node.stat()

    def _get_children(self, path: str, watcher: SimKazooClient | None) -> tuple[list[str], ZnodeStat]:
        node = self._node_or_nonode(path)
        self._watch(self._child_watches, path, watcher)
        children = list(node.children)
        if self.rng is not None:
            self.rng.shuffle(children)
        return children, node.stat()

    def _get_acls(self, path: str) -> tuple[list[ACL], ZnodeStat]:
        node = self._node_or_nonode(path)
        return list(node.acl), node.stat()

    # ------------------------------------------------------------------ writes

    def _write(self, fn: Callable[[_Txn], T]) -> T:
        self.zxid += 1  # failed writes take a zxid too (an error txn)
        txn = _Txn(self.zxid)
        try:
            result = fn(txn)
        except ZookeeperError:
            self._rollback(txn)
            raise
        self._fire(txn)
        return result

    def _rollback(self, txn: _Txn) -> None:
        for undo in reversed(txn.undo):
            undo()
        txn.undo.clear()
        txn.events.clear()

    def _apply_create(self, txn: _Txn, path: str, data: bytes | None, owner: int, sequence: bool,
                      acl: list[ACL] | None) -> tuple[str, ZnodeStat]:
        if "\0" in path or not path.startswith("/"):
            raise BadArgumentsError()
        parent_path, _name = _parent_of(path)
        if path == "/":
            parent_path = ""
        parent = self._nodes.get(parent_path) if parent_path else self._nodes["/"]
        if parent is None:
            raise NoNodeError()
        if sequence:
            path = f"{path}{parent.child_creates:010d}"
        _validate_path(path)
        if path in self._nodes:
            raise NodeExistsError()
        if parent.ephemeral_owner:
            raise NoChildrenForEphemeralsError()
        name = _parent_of(path)[1]
        zxid, now = txn.zxid, self.now_ms
        node = _Node(data, zxid, zxid, zxid, now, now, ephemeral_owner=owner,
                     acl=list(acl) if acl else list(OPEN_ACL_UNSAFE))
        sess = self._sessions.get(owner) if owner else None
        if txn.undoable:  # restore the exact Java set layouts, not just their members
            saved = (parent.children.copy(), parent.cversion, parent.child_creates, parent.pzxid,
                     sess.ephemerals.copy() if sess is not None else None)

            def undo() -> None:
                del self._nodes[path]
                parent.children, parent.cversion, parent.child_creates, parent.pzxid, eph = saved
                if sess is not None and eph is not None:
                    sess.ephemerals = eph

            txn.undo.append(undo)
        self._nodes[path] = node
        parent.children.add(name)
        parent.cversion += 1
        parent.child_creates += 1
        parent.pzxid = zxid
        if sess is not None:
            sess.ephemerals.add(path)
        txn.events.append((EventType.CREATED, path))
        txn.events.append((EventType.CHILD, parent_path))
        return path, node.stat()

    def _apply_delete(self, txn: _Txn, path: str, version: int) -> None:
        _validate_path(path)
        if path == "/":
            raise BadArgumentsError()
        parent_path, name = _parent_of(path)
        parent = self._nodes.get(parent_path)
        node = self._nodes.get(path)
        if parent is None or node is None:
            raise NoNodeError()
        if version != -1 and version != node.version:
            raise BadVersionError()
        if len(node.children):
            raise NotEmptyError()
        sess = self._sessions.get(node.ephemeral_owner) if node.ephemeral_owner else None
        if txn.undoable:
            saved = (parent.children.copy(), parent.cversion, parent.pzxid,
                     sess.ephemerals.copy() if sess is not None else None)

            def undo() -> None:
                self._nodes[path] = node
                parent.children, parent.cversion, parent.pzxid, eph = saved
                if sess is not None and eph is not None:
                    sess.ephemerals = eph

            txn.undo.append(undo)
        del self._nodes[path]
        parent.children.remove(name)
        parent.cversion += 1
        parent.pzxid = txn.zxid
        if sess is not None:
            sess.ephemerals.remove(path)
        txn.events.append((EventType.DELETED, path))
        txn.events.append((EventType.CHILD, parent_path))

    def _apply_set(self, txn: _Txn, path: str, data: bytes | None, version: int) -> ZnodeStat:
        node = self._node_or_nonode(path)
        if version != -1 and version != node.version:
            raise BadVersionError()
        if txn.undoable:
            old = (node.data, node.version, node.mzxid, node.mtime)

            def undo() -> None:
                node.data, node.version, node.mzxid, node.mtime = old

            txn.undo.append(undo)
        node.data, node.version, node.mzxid, node.mtime = data, node.version + 1, txn.zxid, self.now_ms
        txn.events.append((EventType.CHANGED, path))
        return node.stat()

    def _apply_check(self, path: str, version: int) -> None:
        node = self._node_or_nonode(path)
        if version != -1 and version != node.version:
            raise BadVersionError()

    def _create(self, session_id: int, path: str, data: bytes | None, ephemeral: bool, sequence: bool,
                acl: list[ACL] | None) -> tuple[str, ZnodeStat]:
        return self._write(lambda txn: self._apply_create(txn, path, data, session_id if ephemeral else 0,
                                                          sequence, acl))

    def _delete(self, path: str, version: int) -> None:
        self._write(lambda txn: self._apply_delete(txn, path, version))

    def _set(self, path: str, data: bytes | None, version: int) -> ZnodeStat:
        return self._write(lambda txn: self._apply_set(txn, path, data, version))

    def _set_acls(self, path: str, acls: list[ACL], version: int) -> ZnodeStat:
        def apply(txn: _Txn) -> ZnodeStat:
            node = self._node_or_nonode(path)
            if version != -1 and version != node.aversion:
                raise BadVersionError()
            node.acl, node.aversion = list(acls), node.aversion + 1
            return node.stat()

        return self._write(apply)

    def _multi(self, session_id: int, ops: Sequence[_TxOp]) -> list[object]:
        self.zxid += 1
        txn = _Txn(self.zxid, undoable=True)
        results: list[object] = []
        for i, op in enumerate(ops):
            try:
                if op.kind == "create":
                    results.append(self._apply_create(txn, op.path, op.data, session_id if op.ephemeral else 0,
                                                      op.sequence, op.acl)[0])
                elif op.kind == "delete":
                    self._apply_delete(txn, op.path, op.version)
                    results.append(True)
                elif op.kind == "set_data":
                    results.append(self._apply_set(txn, op.path, op.data, op.version))
                else:
                    self._apply_check(op.path, op.version)
                    results.append(True)
            except ZookeeperError as e:
                self._rollback(txn)
                return ([RolledBackError() for _ in range(i)] + [type(e)()]
                        + [RuntimeInconsistency() for _ in range(len(ops) - i - 1)])
        self._fire(txn)
        return results

    # ------------------------------------------------------------------ watch triggers

    def _fire(self, txn: _Txn) -> None:
        """DataTree's triggers, in order; each notified connection gets the event at once."""
        for etype, path in txn.events:
            if etype in (EventType.CREATED, EventType.CHANGED):
                targets = list(self._data_watches.pop(path, {}))
            elif etype == EventType.DELETED:
                data = self._data_watches.pop(path, {})
                child = self._child_watches.pop(path, {})
                targets = list(data) + [c for c in child if c not in data]
            else:
                targets = list(self._child_watches.pop(path, {}))
            for client in targets:
                client._receive_event(etype, path)
        txn.events.clear()


# ---------------------------------------------------------------------------------------------- client


def _api(fn: Callable[P, T]) -> Callable[P, T]:
    """A public client call: auto-delivers queued callbacks when the outermost call returns."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        client = args[0]
        assert isinstance(client, SimKazooClient)
        server = client.server
        server._depth += 1
        try:
            return fn(*args, **kwargs)
        finally:
            server._depth -= 1
            server._auto()

    return wrapper


class SimHandler:
    """The bits of kazoo's handler that recipes touch: spawn is a deferred task on the server queue."""

    timeout_exception = KazooTimeoutError

    def __init__(self, client: SimKazooClient) -> None:
        self._client = client

    def spawn(self, func: Callable[..., object], *args: Any, **kwargs: Any) -> None:
        self._client.server.pending.append((self._client, functools.partial(func, *args, **kwargs), None))

    def sleep_func(self, seconds: float) -> None:
        self._client._sleep(seconds)

    def lock_object(self) -> threading.RLock:
        return threading.RLock()

    def rlock_object(self) -> threading.RLock:
        return threading.RLock()

    def event_object(self) -> threading.Event:
        return threading.Event()


class SimKazooClient:
    """A ``KazooClient`` look-alike over a ``SimZooKeeper`` (see the module docstring).

    Accepts KazooClient's constructor arguments (most are ignored) plus the simulation's own
    keyword-only ones: ``fault_policy``, ``reconnect_after_fault``, ``auto_renew_session``,
    ``on_retry_sleep``, ``on_block``, ``retry_rng`` and ``name``."""

    def __init__(self, server: SimZooKeeper, hosts: str = "sim:2181", timeout: float = 10.0,
                 client_id: tuple[int, bytes] | None = None, handler: object = None,
                 default_acl: Sequence[ACL] | None = None, auth_data: object = None,
                 connection_retry: object = None, command_retry: dict[str, Any] | KazooRetry | None = None,
                 *, fault_policy: FaultPolicy | None = None, reconnect_after_fault: bool = True,
                 auto_renew_session: bool = False, on_retry_sleep: Callable[[float], None] | None = None,
                 on_block: Callable[[], None] | None = None, retry_rng: random.Random | None = None,
                 name: str | None = None, **_ignored: Any) -> None:
        self.server = server
        self.name = name
        self.hosts, chroot = collect_hosts(hosts)
        self.chroot = normpath(chroot) if chroot else ""
        self._session_timeout = int(timeout * 1000)
        self.default_acl = list(default_acl) if default_acl else None
        self.fault_policy = fault_policy
        self.reconnect_after_fault = reconnect_after_fault
        self.auto_renew_session = auto_renew_session
        self.on_retry_sleep = on_retry_sleep
        self.on_block = on_block
        self.slept_s = 0.0
        self.handler = SimHandler(self)
        self._state: str = KeeperState.CLOSED
        self.state: str = KazooState.LOST
        self.state_listeners: dict[Listener, None] = {}
        self._data_watchers: dict[str, dict[Watcher, None]] = {}
        self._child_watchers: dict[str, dict[Watcher, None]] = {}
        self._session: _Session | None = None
        self._live = False
        self._stopped = True
        self._link_up = True
        self._stale: list[PendingCallback] = []
        self._deaf = False
        self.last_zxid = 0
        if isinstance(command_retry, KazooRetry):
            self._retry = SimRetry.from_kazoo(command_retry, sleep_func=self._sleep, rng=retry_rng)
        elif isinstance(command_retry, dict):
            self._retry = SimRetry(**command_retry, sleep_func=self._sleep, rng=retry_rng)
        else:  # KazooClient's default: KazooRetry(max_tries=None, delay=0.1, backoff=2, max_delay=3600)
            self._retry = SimRetry(max_tries=None, delay=0.1, backoff=2, max_delay=3600, sleep_func=self._sleep,
                                   rng=retry_rng)
        self.ChildrenWatch = functools.partial(SimChildrenWatch, self)
        self.DataWatch = functools.partial(SimDataWatch, self)

    def __repr__(self) -> str:
        sid = f"0x{self._session.session_id:x}" if self._session else "-"
        return f"<SimKazooClient {self.name or hex(id(self))} {self.state} session={sid}>"

    # ------------------------------------------------------------------ session state

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        if self._live and self._session is not None:
            return self._session.session_id, self._session.password
        return None

    @property
    def session_id(self) -> int | None:
        """The current session id even when not connected (sim only; kazoo hides it)."""
        return self._session.session_id if self._session is not None else None

    @property
    def connected(self) -> bool:
        return self._live

    @property
    def client_state(self) -> str:
        return self._state

    def add_listener(self, listener: Listener) -> None:
        if not callable(listener):
            raise ValueError("listener must be callable")
        self.state_listeners[listener] = None

    def remove_listener(self, listener: Listener) -> None:
        self.state_listeners.pop(listener, None)

    def _make_state_change(self, state: str) -> None:
        if self.state == state:
            return
        self.state = state
        for listener in list(self.state_listeners):
            try:
                if listener(state) is True:
                    self.remove_listener(listener)
            except Exception as e:
                log.debug("state listener %r raised %r", listener, e)
                self.server.callback_errors.append((self, e))

    def _session_callback(self, state: str) -> None:
        """kazoo's KazooClient._session_callback, line for line."""
        if state == self._state:
            return
        closed_state = self._state in _CLOSED_STATES
        self._state = state
        if closed_state and state == KeeperState.CONNECTING:
            return
        if state in (KeeperState.CONNECTED, KeeperState.CONNECTED_RO):
            self._live = True
            self._make_state_change(KazooState.CONNECTED)
        elif state in _CLOSED_STATES:
            self._live = False
            self._make_state_change(KazooState.LOST)
            self._reset_watchers()
            self.last_zxid = 0
        else:
            self._live = False
            self._make_state_change(KazooState.SUSPENDED)
            self._reset_watchers()

    def _reset_watchers(self) -> None:
        watchers: list[Watcher] = []
        for table in (self._child_watchers, self._data_watchers):
            for fns in table.values():
                watchers.extend(fns)
        self._child_watchers = {}
        self._data_watchers = {}
        ev = WatchedEvent(EventType.NONE, self._state, None)
        if self._stopped:  # kazoo's handler is stopped: the calls wait in its queue for the next start()
            self._stale.extend((self, w, ev) for w in watchers)
            return
        for w in watchers:
            self.server.pending.append((self, w, ev))

    def _new_session(self) -> None:
        self._session = self.server._create_session(self, self._session_timeout)
        self._session_callback(KeeperState.CONNECTED)

    def _lose_connection(self) -> None:
        """The TCP connection drops (the session lives on in the server)."""
        if self._state != KeeperState.CONNECTED:
            return
        self.server._drop_connection(self)
        self._session_callback(KeeperState.CONNECTING)

    def _try_reconnect(self) -> None:
        if self._stopped or not self._link_up or self._state == KeeperState.CONNECTED:
            return
        sess = self._session
        if sess is not None and sess.alive:
            sess.disconnected_since = None
            self._session_callback(KeeperState.CONNECTED)
            return
        if self._state != KeeperState.EXPIRED_SESSION:
            self._session_callback(KeeperState.EXPIRED_SESSION)
        self._session_callback(KeeperState.CONNECTING)
        self._new_session()

    def _on_session_expired(self, sess: _Session) -> None:
        """The server expired our session: a connected client hears at once (the server closes the
        connection and the reconnect is refused); a disconnected one on reconnect."""
        if sess is not self._session or self._state != KeeperState.CONNECTED:
            return
        self.server._drop_connection(self)
        self._session_callback(KeeperState.CONNECTING)
        self._session_callback(KeeperState.EXPIRED_SESSION)
        if self.auto_renew_session and self._link_up:
            self._session_callback(KeeperState.CONNECTING)
            self._new_session()

    @_api
    def reconnect(self) -> None:
        """The network is back: resume the session, or (if it expired) LOST then a new session."""
        self._link_up = True
        self._try_reconnect()

    @_api
    def restart_session(self) -> None:
        """After expiry: a new session, CONNECTED (kazoo does this on its own)."""
        self.reconnect()

    @_api
    def start(self, timeout: float = 15) -> None:
        if self._live:
            return
        if not self._stopped:  # kazoo: start_async on a live-less client reconnects
            self._try_reconnect()
            if self._live:
                return
        elif self._link_up:
            self._stopped = False
            self.server.pending.extend(self._stale)  # observed with kazoo 2.11: NONE(CLOSED) events now
            self._stale = []
            self._new_session()
            return
        self.stop()
        self.close()
        raise KazooTimeoutError("Connection time-out")

    def start_async(self) -> threading.Event:
        ev = threading.Event()
        self.start()
        ev.set()
        return ev

    @_api
    def stop(self) -> None:
        """Close the session (its ephemerals go at once); listeners see LOST. Like kazoo, whose
        handler drains its queue when it stops, this client's queued callbacks run first; the watch
        functions it still held get a NONE event (state CLOSED) after the next ``start()``."""
        if self._stopped:
            return
        self._stopped = True
        mine = [e for e in self.server.pending if e[0] is self]
        self.server.pending = deque(e for e in self.server.pending if e[0] is not self)
        self.server._run_callbacks(mine)
        sess = self._session
        if self._state == KeeperState.CONNECTED and sess is not None and sess.alive:
            self.server._drop_connection(self)
            self.server._kill_session(sess)  # kazoo sends closeSession; ephemerals go now
        elif sess is not None and sess.alive:
            sess.client = None  # can't reach the server: the session lingers until it times out
            if sess.disconnected_since is None:
                sess.disconnected_since = self.server.now_ms
        self._session_callback(KeeperState.CLOSED)
        self._session = None

    def crash(self) -> None:
        """The process dies (sim only): no closeSession, no listeners, nothing queued runs; the
        session lingers on the server until ``advance`` times it out or ``expire_session``."""
        self._stopped = True
        self.server.pending = deque(e for e in self.server.pending if e[0] is not self)
        sess = self._session
        if sess is not None and sess.alive:
            if self._state == KeeperState.CONNECTED:
                self.server._drop_connection(self)
            sess.client = None
        self._session = None
        self._state = KeeperState.CLOSED
        self.state = KazooState.LOST
        self._live = False
        self._child_watchers = {}
        self._data_watchers = {}
        self._stale = []

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        return None

    def add_auth(self, scheme: str, credential: str) -> None:
        return None

    # ------------------------------------------------------------------ request plumbing

    def _sleep(self, seconds: float) -> None:
        self.slept_s += seconds
        if self.on_retry_sleep is not None:
            self.on_retry_sleep(seconds)

    def retry(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """kazoo's ``client.retry``: a fresh copy of the command retry for every call."""
        return self._retry.copy()(func, *args, **kwargs)

    def _full(self, path: str, trailing: bool = False) -> str:
        if not isinstance(path, str):
            raise TypeError("Invalid type for 'path' (string expected)")
        return str(_prefix_root(self.chroot, path, trailing=trailing))

    def unchroot(self, path: str) -> str:
        if not self.chroot:
            return path
        if self.chroot == path:
            return "/"
        return path[len(self.chroot):] if path.startswith(self.chroot) else path

    def _check_usable(self) -> None:
        if self._state == KeeperState.CONNECTING and self.on_block is not None:
            self.on_block()  # kazoo would block here until the connection is back
        if self._state == KeeperState.CLOSED:
            raise ConnectionClosedError("Connection has been closed")
        if self._state in (KeeperState.EXPIRED_SESSION, KeeperState.AUTH_FAILED):
            raise SessionExpiredError()
        if self._state != KeeperState.CONNECTED:
            raise ConnectionLoss()

    def _request(self, op: str, path: str, fn: Callable[[], T]) -> T:
        """One request on the wire, with the fault policy's say."""
        self._check_usable()
        outcome = self.fault_policy(op, self.unchroot(path)) if self.fault_policy is not None else None
        if outcome is None:
            result = fn()
            self.last_zxid = self.server.zxid
            return result
        if outcome not in _FAULT_OUTCOMES:
            raise ValueError(f"fault policy returned {outcome!r}")
        if outcome == "after":
            self._deaf = True  # whatever the server sends from here on (events, the reply) is lost
            try:
                fn()
            except ZookeeperError:
                pass
            finally:
                self._deaf = False
        if outcome == "expire":
            assert self._session is not None
            self.server.expire_session(self._session.session_id)
        else:
            self._lose_connection()
            if self.reconnect_after_fault:
                self._try_reconnect()
        raise ConnectionLoss()

    def _owner(self) -> int:
        assert self._session is not None
        return self._session.session_id

    def _add_watcher(self, table: dict[str, dict[Watcher, None]], path: str, watch: Watcher | None) -> None:
        if watch is not None and not self._stopped:
            table.setdefault(path, {})[watch] = None

    def _receive_event(self, etype: str, path: str) -> None:
        """kazoo's ConnectionHandler._read_watch_event: pop this path's watchers, queue the calls."""
        if self._deaf:
            return  # lost with the connection: the watchers stay until the drop hands them NONE
        watchers: list[Watcher] = []
        if etype in (EventType.CREATED, EventType.CHANGED):
            watchers.extend(self._data_watchers.pop(path, {}))
        elif etype == EventType.DELETED:
            watchers.extend(self._data_watchers.pop(path, {}))
            watchers.extend(self._child_watchers.pop(path, {}))
        else:
            watchers.extend(self._child_watchers.pop(path, {}))
        if self._stopped:
            return
        ev = WatchedEvent(etype, self._state, self.unchroot(path))
        for w in watchers:
            self.server.pending.append((self, w, ev))

    @staticmethod
    def _check_watch(watch: object) -> None:
        if watch and not callable(watch):
            raise TypeError("Invalid type for 'watch' (must be a callable)")

    @staticmethod
    def _check_version(version: object) -> None:
        if not isinstance(version, int):
            raise TypeError("Invalid type for 'version' (int expected)")

    @staticmethod
    def _check_value(value: object, allow_none: bool = True) -> None:
        if not (value is None and allow_none) and not isinstance(value, bytes):
            raise TypeError("Invalid type for 'value' (must be a byte string)")

    # ------------------------------------------------------------------ reads

    @_api
    def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes | None, ZnodeStat]:
        full = self._full(path)
        self._check_watch(watch)
        result = self._request("get", full, lambda: self.server._get(full, self if watch else None))
        self._add_watcher(self._data_watchers, full, watch)
        return result

    @_api
    def exists(self, path: str, watch: Watcher | None = None) -> ZnodeStat | None:
        full = self._full(path)
        self._check_watch(watch)
        result = self._request("exists", full, lambda: self.server._exists(full, self if watch else None))
        self._add_watcher(self._data_watchers, full, watch)
        return result

    @_api
    def get_children(self, path: str, watch: Watcher | None = None,
                     include_data: bool = False) -> Any:
        full = self._full(path)
        self._check_watch(watch)
        children, stat = self._request("get_children", full,
                                       lambda: self.server._get_children(full, self if watch else None))
        self._add_watcher(self._child_watchers, full, watch)
        return (children, stat) if include_data else children

    @_api
    def get_acls(self, path: str) -> tuple[list[ACL], ZnodeStat]:
        full = self._full(path)
        return self._request("get_acls", full, lambda: self.server._get_acls(full))

    @_api
    def sync(self, path: str) -> str:
        full = self._full(path)
        self._request("sync", full, lambda: None)
        return self.unchroot(full)

    # ------------------------------------------------------------------ writes

    @_api
    def create(self, path: str, value: bytes | None = b"", acl: Sequence[ACL] | None = None,
               ephemeral: bool = False, sequence: bool = False, makepath: bool = False,
               include_data: bool = False) -> Any:
        acl = acl or self.default_acl
        if acl and (isinstance(acl, ACL) or not isinstance(acl, (tuple, list))):
            raise TypeError("Invalid type for 'acl' (acl must be a tuple/list of ACL's")
        self._check_value(value)
        for flag, what in ((ephemeral, "ephemeral"), (sequence, "sequence"), (makepath, "makepath"),
                           (include_data, "include_data")):
            if not isinstance(flag, bool):
                raise TypeError(f"Invalid type for '{what}' (bool expected)")
        full = self._full(path, trailing=sequence)
        acl_list = list(acl) if acl else None
        for _ in range(100):  # kazoo loops create -> NoNode -> ensure_path(parent) -> create
            try:
                created, stat = self._request("create", full, lambda: self.server._create(
                    self._owner(), full, value, ephemeral, sequence, acl_list))
                return (self.unchroot(created), stat) if include_data else self.unchroot(created)
            except NoNodeError:
                if not makepath:
                    raise
                parent = path.rstrip("/") if sequence and path.endswith("/") else _split_path(path)[0]
                self.ensure_path(parent, acl)
        raise NoNodeError()

    @_api
    def ensure_path(self, path: str, acl: Sequence[ACL] | None = None) -> Any:
        """kazoo's ensure_path: exists? else ensure the parent, then create (NodeExists -> True)."""
        acl = acl or self.default_acl
        if self.exists(path):
            return True
        parent, node = _split_path(path)
        if node:
            self.ensure_path(parent, acl)
        try:
            return self.create(path, acl=acl)
        except NodeExistsError:
            return True

    @_api
    def set(self, path: str, value: bytes | None, version: int = -1) -> ZnodeStat:
        self._check_value(value)
        self._check_version(version)
        full = self._full(path)
        return self._request("set", full, lambda: self.server._set(full, value, version))

    @_api
    def set_acls(self, path: str, acls: Sequence[ACL], version: int = -1) -> ZnodeStat:
        self._check_version(version)
        full = self._full(path)
        return self._request("set_acls", full, lambda: self.server._set_acls(full, list(acls), version))

    @_api
    def delete(self, path: str, version: int = -1, recursive: bool = False) -> bool | None:
        """True; with ``recursive`` (which ignores ``version``) kazoo returns True when the node was
        not there and None when it deleted it."""
        if not isinstance(recursive, bool):
            raise TypeError("Invalid type for 'recursive' (bool expected)")
        if recursive:
            return self._delete_recursive(path)
        self._check_version(version)
        full = self._full(path)
        self._request("delete", full, lambda: self.server._delete(full, version))
        return True

    def _delete_recursive(self, path: str) -> bool | None:
        try:
            children = self.get_children(path)
        except NoNodeError:
            return True
        for child in children:
            self._delete_recursive(path + child if path == "/" else path + "/" + child)
        try:
            self.delete(path)
        except NoNodeError:
            pass
        return None

    def transaction(self) -> SimTransactionRequest:
        return SimTransactionRequest(self)

    @_api
    def _commit(self, ops: list[_TxOp]) -> list[object]:
        first = ops[0].path if ops else self._full("/")
        results = self._request("transaction", first, lambda: self.server._multi(self._owner(), ops))
        return [self.unchroot(r) if isinstance(r, str) else r for r in results]


class SimTransactionRequest:
    """kazoo's TransactionRequest: check/create/set_data/delete, then one atomic commit()."""

    def __init__(self, client: SimKazooClient) -> None:
        self.client = client
        self.operations: list[_TxOp] = []
        self.committed = False

    def create(self, path: str, value: bytes = b"", acl: Sequence[ACL] | None = None, ephemeral: bool = False,
               sequence: bool = False) -> None:
        if acl is None and self.client.default_acl:
            acl = self.client.default_acl
        if acl and not isinstance(acl, (tuple, list)):
            raise TypeError("Invalid type for 'acl' (acl must be a tuple/list of ACL's")
        self.client._check_value(value, allow_none=False)
        if not isinstance(ephemeral, bool) or not isinstance(sequence, bool):
            raise TypeError("Invalid type for 'ephemeral'/'sequence' (bool expected)")
        self._add(_TxOp("create", self.client._full(path), value, ephemeral=ephemeral, sequence=sequence,
                        acl=list(acl) if acl else None))

    def delete(self, path: str, version: int = -1) -> None:
        self.client._check_version(version)
        self._add(_TxOp("delete", self.client._full(path), version=version))

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self.client._check_value(value, allow_none=False)
        self.client._check_version(version)
        self._add(_TxOp("set_data", self.client._full(path), value, version=version))

    def check(self, path: str, version: int) -> None:
        self.client._check_version(version)
        self._add(_TxOp("check", self.client._full(path), version=version))

    def commit(self) -> list[object]:
        """Like kazoo, marks the request committed *before* sending it: re-committing the same
        object (e.g. ``client.retry(tx.commit)`` after a ConnectionLoss) raises ValueError."""
        self._check_tx_state()
        self.committed = True
        return self.client._commit(self.operations)

    def __enter__(self) -> SimTransactionRequest:
        return self

    def __exit__(self, exc_type: object, exc_value: object, exc_tb: object) -> None:
        if not exc_type:
            self.commit()

    def _check_tx_state(self) -> None:
        if self.committed:
            raise ValueError("Transaction already committed")

    def _add(self, op: _TxOp) -> None:
        self._check_tx_state()
        self.operations.append(op)


# ---------------------------------------------------------------------------------------------- recipes


class _RecipeSuspended(Exception):
    """The connection is down: the recipe waits for CONNECTED instead of kazoo's blocking retry."""


class SimDataWatch:
    """kazoo.recipe.watchers.DataWatch: ``func(data, stat)`` or ``func(data, stat, event)`` now and
    after every change (by mzxid); stops when func returns False. kazoo retries its reads forever
    (blocking while disconnected); here a read that fails while the client is not connected gives
    up, and the CONNECTED listener re-reads, as kazoo's does."""

    RETRY_LIMIT = 1000

    def __init__(self, client: SimKazooClient, path: str, func: Callable[..., object] | None = None,
                 *args: Any, **kwargs: Any) -> None:
        self._client = client
        self._path = path
        self._func = func
        self._stopped = False
        self._version: int | None = None
        self._ever_called = False
        self._used = False
        if func is not None:
            self._used = True
            self._client.add_listener(self._session_watcher)
            self._get_data()

    def __call__(self, func: Callable[..., object]) -> Callable[..., object]:
        if self._used:
            raise KazooException("A function has already been associated with this DataWatch instance.")
        self._func = func
        self._used = True
        self._client.add_listener(self._session_watcher)
        self._get_data()
        return func

    def _retry(self, fn: Callable[..., T], *args: Any) -> T:
        attempts = 0
        while True:
            try:
                return fn(*args)
            except ConnectionClosedError:
                raise
            except (ConnectionLoss, OperationTimeoutError, SessionExpiredError):
                attempts += 1
                self._client._sleep(0.1)
                if not self._client.connected or attempts >= self.RETRY_LIMIT:
                    raise _RecipeSuspended() from None

    def _log_func_exception(self, data: bytes | None, stat: ZnodeStat | None, event: WatchedEvent | None) -> None:
        assert self._func is not None
        self._ever_called = True
        try:
            result = self._func(data, stat, event)
        except TypeError:  # kazoo's call convention: two-argument functions get (data, stat)
            result = self._func(data, stat)
        if result is False:
            self._stopped = True
            self._func = None
            self._client.remove_listener(self._session_watcher)

    def _get_data(self, event: WatchedEvent | None = None) -> None:
        if self._stopped:
            return
        initial_version = self._version
        stat: ZnodeStat | None
        try:
            try:
                data, stat = self._retry(self._client.get, self._path, self._watcher)
            except NoNodeError:
                data = None
                stat = self._retry(self._client.exists, self._path, self._watcher)
                if stat:
                    self._client.handler.spawn(self._get_data)
                    return
        except (ConnectionClosedError, _RecipeSuspended):
            return
        self._version = None if stat is None else stat.mzxid
        if initial_version != self._version or not self._ever_called:
            self._log_func_exception(data, stat, event)

    def _watcher(self, event: WatchedEvent) -> None:
        self._get_data(event=event)

    def _session_watcher(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._client.handler.spawn(self._get_data)


class SimChildrenWatch:
    """kazoo.recipe.watchers.ChildrenWatch: ``func(children)`` (or ``func(children, event)`` with
    send_event) now and after each change; stops when func returns False or the node is gone. Reads
    go through ``client.retry`` like kazoo's (so they can fail with RetryFailedError)."""

    def __init__(self, client: SimKazooClient, path: str, func: Callable[..., object] | None = None,
                 allow_session_lost: bool = True, send_event: bool = False) -> None:
        self._client = client
        self._path = path
        self._func = func
        self._send_event = send_event
        self._stopped = False
        self._watch_established = False
        self._allow_session_lost = allow_session_lost
        self._prior_children: list[str] | None = None
        self._used = False
        if func is not None:
            self._used = True
            if allow_session_lost:
                self._client.add_listener(self._session_watcher)
            self._get_children()

    def __call__(self, func: Callable[..., object]) -> Callable[..., object]:
        if self._used:
            raise KazooException("A function has already been associated with this ChildrenWatch instance.")
        self._func = func
        self._used = True
        if self._allow_session_lost:
            self._client.add_listener(self._session_watcher)
        self._get_children()
        return func

    def _get_children(self, event: WatchedEvent | None = None) -> None:
        if self._stopped:
            return
        try:
            children: list[str] = self._client.retry(self._client.get_children, self._path, self._watcher)
        except NoNodeError:
            self._stopped = True
            return
        except ConnectionClosedError:
            return
        if not self._watch_established:
            self._watch_established = True
            if self._prior_children is not None and self._prior_children == children:
                return
        self._prior_children = children
        assert self._func is not None
        result = self._func(children, event) if self._send_event else self._func(children)
        if result is False:
            self._stopped = True
            self._func = None
            if self._allow_session_lost:
                self._client.remove_listener(self._session_watcher)

    def _watcher(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE:
            self._get_children(event)

    def _session_watcher(self, state: str) -> None:
        if state in (KazooState.LOST, KazooState.SUSPENDED):
            self._watch_established = False
        elif state == KazooState.CONNECTED and not self._watch_established and not self._stopped:
            self._client.handler.spawn(self._get_children)
