"""Fault injection against a running cluster: the workload, the scenarios, ``minikafka chaos``.

``Workload`` runs producers writing unique values (idempotent, acks=all) at a
steady rate and records each write's outcome; after the faults heal it reads
every partition in full. ``client.ops.history.check`` then judges the history. With
``keys`` (a compacted topic, ``minikafka chaos --compacted``) every write has one
of ``keys`` keys per partition and every ``tombstone_every``-th is a tombstone;
``client.ops.history.check_compacted`` judges it by the latest value per key.

``GroupWorkload`` runs the members of one consumer group on the same topic
(``client.consumer.Consumer``, manual commits: each polled batch is recorded as
delivered, then its positions committed synchronously, and every partition the
coordinator acknowledged is recorded with when the commit was sent and when it
came back). Beside them an observer reads the group's committed offsets
(OffsetFetch) through the coordinator FindCoordinator names, and from every
broker directly: a broker that answers OffsetFetch without NOT_COORDINATOR
claims the group, and what it answers must not be below an acknowledged commit
(SPEC S11.4). After the faults heal the members drain to the end of the log and
a final OffsetFetch gives the group's committed offsets;
``client.ops.history.check_group`` judges that history (commit regressions,
skipped records).

The ``coordinator-pause`` fault SIGSTOPs the group's coordinator (FindCoordinator)
for longer than its ZooKeeper session and until another broker has taken the
group over and acknowledged newer commits (bounded), then SIGCONTs it and probes
it at once: the resumed broker must not answer for the group with what it had.
Faults go only to brokers of the local cluster whose process still runs their
own config, on 127.0.0.0/8 addresses.
"""

from __future__ import annotations

import ipaddress
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from client.connection import ClusterView
from client.consumer import Consumer
from client.group_client import GroupMember
from client.ops.history import FAIL, OK, UNKNOWN, Commit, CommittedRead, Delivery, Read, Write
from client.ops.local_cluster import BrokerProc, LocalCluster, pid_alive
from client.producer import Producer
from client.structs import TopicPartition
from proto import errors
from proto import minikafka_pb2 as pb
from proto.properties import parse_properties
from proto.transport import PLAINTEXT_SECURITY, ChannelSecurity

log = logging.getLogger(__name__)

# Errors after which the write surely did not happen (the broker refused it before appending).
# How long an abandoned producer (Ctrl-C) gets to hand over what it has before it is closed.
ABANDON_CLOSE_S = 1.0
DEFINITE_FAILURES = frozenset({"NOT_ENOUGH_REPLICAS", "INVALID_REQUIRED_ACKS", "MESSAGE_TOO_LARGE",
                               "RECORD_LIST_TOO_LARGE", "CORRUPT_MESSAGE", "INVALID_RECORD",
                               "UNKNOWN_TOPIC_OR_PARTITION", "INVALID_PRODUCER_EPOCH"})


class Workload:
    """Producers writing unique values at a steady rate; then a full read of every partition."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, producers: int = 2, rate: float = 200.0,
                 retries: int = 2_147_483_647, delivery_timeout_ms: int = 30_000,
                 security: ChannelSecurity = PLAINTEXT_SECURITY, keys: int = 0, tombstone_every: int = 0) -> None:
        self.bootstrap = bootstrap
        self.keys = keys
        self.tombstone_every = tombstone_every
        self.keyed: dict[str, tuple[str, bool]] = {}  # value -> (key, tombstone) of every keyed write
        self.security = security
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.producer_count = producers
        self.retries = retries
        self.delivery_timeout_ms = delivery_timeout_ms
        self._stop = threading.Event()
        self._abandon = threading.Event()  # stop_now: close the producers without waiting for their writes
        self._threads: list[threading.Thread] = []
        self.pending: list[tuple[str, int, str, object]] = []

    def start(self) -> None:
        for n in range(self.producer_count):
            t = threading.Thread(target=self._produce, args=(f"p{n}",), daemon=True)
            self._threads.append(t)
            t.start()

    def _produce(self, name: str) -> None:
        producer = Producer(self.bootstrap, security=self.security, acks="all", linger_ms=1, request_timeout_ms=3000,
                            delivery_timeout_ms=self.delivery_timeout_ms, retries=self.retries, retry_backoff_ms=50)
        try:
            i = 0
            start = time.monotonic()
            while not self._stop.is_set():
                value = f"{name}-{i}"
                partition = i % self.partitions
                key: bytes | None = None
                payload: bytes | None = value.encode()
                if self.keys:
                    key = f"k{(i // self.partitions) % self.keys}".encode()
                    tombstone = self.tombstone_every > 0 and i % self.tombstone_every == self.tombstone_every - 1
                    self.keyed[value] = (key.decode(), tombstone)
                    if tombstone:
                        payload = None
                try:
                    fut: object = producer.send(self.topic, payload, key=key, partition=partition)
                except Exception as e:  # metadata unavailable for a moment: a definite non-write
                    fut = e
                self.pending.append((name, partition, value, fut))
                i += 1
                ahead = i / self.rate - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)
            if not self._abandon.is_set():
                try:
                    producer.flush(timeout=self.delivery_timeout_ms / 1000 + 10)
                except Exception:
                    pass
        finally:
            # Abandoned (Ctrl-C): closed at once, retries and all. A producer still retrying would
            # refresh its metadata, and a refresh auto-creates the topic that is being removed.
            try:
                producer.close(timeout=ABANDON_CLOSE_S if self._abandon.is_set() else None)
            except Exception:
                pass

    def stop(self) -> list[Write]:
        self._stop.set()
        for t in self._threads:
            t.join(self.delivery_timeout_ms / 1000 + 30)
        writes = []
        for name, partition, value, fut in self.pending:
            key, tombstone = self.keyed.get(value, (None, False))
            if isinstance(fut, BaseException):
                writes.append(Write(name, partition, value, FAIL, key=key, tombstone=tombstone))
                continue
            try:
                meta = fut.result(timeout=1)  # type: ignore[attr-defined]
                writes.append(Write(name, partition, value, OK, meta.offset, key=key, tombstone=tombstone))
            except errors.KafkaError as e:
                writes.append(Write(name, partition, value, FAIL if e.name in DEFINITE_FAILURES else UNKNOWN,
                                    key=key, tombstone=tombstone))
            except Exception:
                writes.append(Write(name, partition, value, UNKNOWN, key=key, tombstone=tombstone))
        return writes

    def stop_now(self) -> None:
        """Stop writing without waiting for outstanding writes (an interrupted run): every producer
        is closed before this returns, so none outlives it (see ``_produce``)."""
        self._abandon.set()
        self._stop.set()
        for t in self._threads:
            t.join(5)

    def read_all(self) -> list[Read]:
        tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        out: list[Read] = []
        with Consumer(bootstrap_servers=self.bootstrap, security=self.security, auto_offset_reset="earliest",
                      max_poll_records=5000) as consumer:
            consumer.assign(tps)
            end = consumer.end_offsets(tps)
            consumer.seek_to_beginning()
            done = {tp for tp in tps if end[tp] == 0}
            for _ in range(100_000):
                if len(done) == len(tps):
                    break
                for r in consumer.poll(timeout_ms=500):
                    out.append(Read(r.partition, r.offset, (r.value or b"").decode(),
                                    key=None if r.key is None else r.key.decode(), tombstone=r.value is None))
                    if r.offset + 1 >= end[TopicPartition(r.topic, r.partition)]:
                        done.add(TopicPartition(r.topic, r.partition))
                # A compacted log's last offsets may be gone (a tombstone past delete.retention.ms):
                # the position passing the end is the end too.
                done |= {tp for tp in tps if tp not in done and consumer.position(tp) >= end[tp]}
        return out


# ------------------------------------------------------------------ `minikafka chaos`

SCENARIOS = ("leader-kill", "controller-kill", "rolling-restart", "follower-pause", "coordinator-pause", "soak")


def _leader(view: ClusterView, topic: str, partition: int) -> int:
    view.refresh([topic])
    pl = view.partitions.get((topic, partition))
    return pl.leader if pl else -1


class Outstanding:
    """Faults injected and not yet healed: what Ctrl-C must undo before the command exits."""

    def __init__(self) -> None:
        self.paused: set[int] = set()
        self.stopped: set[int] = set()

    def __bool__(self) -> bool:
        return bool(self.paused or self.stopped)


def heal(cluster: LocalCluster, outstanding: Outstanding, timeout_s: float = 60.0) -> list[str]:
    """Resume paused brokers and start stopped ones; what was done, one phrase each."""
    done = []
    for b in sorted(outstanding.paused):
        if pid_alive(cluster.broker(b).pid):
            cluster.signal(b, "CONT")
            done.append(f"resumed broker {b}")
        outstanding.paused.discard(b)
    for b in sorted(outstanding.stopped):
        if not pid_alive(cluster.broker(b).pid):
            cluster.start(b)
            cluster.wait_registered({b}, timeout_s)
            done.append(f"restarted broker {b}")
        outstanding.stopped.discard(b)
    return done


def inject(cluster: LocalCluster, view: ClusterView, topic: str, scenario: str, rng: random.Random,
           faults: list[str], outstanding: Outstanding | None = None, group: GroupWorkload | None = None) -> None:
    """One fault, then its healing; bounded waits only. ``outstanding`` holds the fault while it
    lasts, so an interrupted run knows what to heal. ``coordinator-pause`` needs the ``group``
    workload whose coordinator to pause (without one it injects nothing, and soak never picks it):
    the pause lasts until the group has commits acknowledged by another coordinator (bounded), and
    the resumed broker is probed at once."""
    out = outstanding if outstanding is not None else Outstanding()
    if scenario == "soak":
        scenario = rng.choice([s for s in SCENARIOS[:-1] if group is not None or s != "coordinator-pause"])
    if scenario == "coordinator-pause":
        if group is not None:
            since = time.monotonic()
            pause_coordinator(cluster, view, group.group, faults, out, on_resume=group.observer.probe_burst,
                              until=lambda: group.acknowledged_since(since) >= TAKEOVER_COMMITS)
        return
    status = cluster.status()
    ids = [b["id"] for b in status["brokers"]]
    if scenario == "leader-kill":
        victim = _leader(view, topic, rng.randrange(2))
    elif scenario == "controller-kill":
        victim = status["controller"]
    else:
        victim = rng.choice(ids)
    if victim not in ids:
        return
    if scenario == "rolling-restart":
        for b in ids:
            out.stopped.add(b)
            cluster.signal(b, "TERM")
            cluster.wait_for_exit(b, 30)
            cluster.start(b)
            cluster.wait_registered({b}, 60)
            out.stopped.discard(b)
        faults.append("rolling-restart")
        return
    if scenario == "follower-pause":
        out.paused.add(victim)
        cluster.signal(victim, "STOP")
        time.sleep(2.0)  # shorter than the local cluster's session (6 s): the broker stays registered
        cluster.signal(victim, "CONT")
        out.paused.discard(victim)
    else:
        out.stopped.add(victim)
        cluster.signal(victim, "KILL")
        time.sleep(1.0)
        cluster.start(victim)
        cluster.wait_registered({victim}, 60)
        out.stopped.discard(victim)
    faults.append(f"{scenario}:{victim}")


# ------------------------------------------------------------------ the group coordinator

# The pause outlasts the broker's ZooKeeper session by half of it and a second; with ``until`` it
# goes on until the condition holds or 4 sessions and 10 s more have passed; never past MAX_PAUSE_S.
MAX_PAUSE_S = 60.0
DEFAULT_SESSION_TIMEOUT_MS = 6000
# Commits acknowledged while the coordinator is paused: another broker has taken the group over.
TAKEOVER_COMMITS = 5


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host) in ipaddress.ip_network("127.0.0.0/8")
    except ValueError:
        return False


def own_broker(cluster: LocalCluster, broker_id: int) -> BrokerProc | None:
    """The cluster's broker ``broker_id`` if a fault may go to it: on a 127.0.0.0/8 address, and its
    process alive and still running this cluster's config for it (a pid is never taken on trust)."""
    try:
        b = cluster.broker(broker_id)
    except Exception:
        return None
    if not _loopback(b.host) or not b.config or not pid_alive(b.pid):
        return None
    try:
        if b.config.encode() not in Path(f"/proc/{b.pid}/cmdline").read_bytes():
            return None
    except OSError:
        return None
    return b


def session_timeout_s(b: BrokerProc) -> float:
    """The broker's ``zookeeper.session.timeout.ms`` from its config file, in seconds."""
    try:
        props = parse_properties(Path(b.config).read_text())
        return int(props.get("zookeeper.session.timeout.ms", DEFAULT_SESSION_TIMEOUT_MS)) / 1000.0
    except (OSError, ValueError):
        return DEFAULT_SESSION_TIMEOUT_MS / 1000.0


def coordinator_of(view: ClusterView, group: str, request_timeout_s: float = 5.0) -> int:
    """The broker id FindCoordinator names for ``group`` now (-1 if none is found in a bounded time).
    A fresh ``GroupMember`` each time: nothing cached from before a fault."""
    member = GroupMember(view, group, "chaos-probe", 10_000, 10_000, 3000, 0.1, request_timeout_s)
    try:
        address = member.coordinator().address
        view.refresh([])
    except (errors.KafkaError, grpc.RpcError) as e:
        log.info("no coordinator for group %s: %s", group, e)
        return -1
    return next((b for b, a in view.brokers.items() if a == address), -1)


def pause_coordinator(cluster: LocalCluster, view: ClusterView, group: str, faults: list[str],
                      outstanding: Outstanding | None = None, pause_s: float | None = None,
                      on_resume: Callable[[int], None] | None = None,
                      until: Callable[[], bool] | None = None) -> int:
    """SIGSTOP ``group``'s coordinator past its ZooKeeper session (``pause_s``, default 1.5 times
    the session plus 1 s), then - with ``until`` - on until ``until()`` holds (e.g. another broker
    took the group over and acknowledged commits; bounded, see MAX_PAUSE_S), then SIGCONT it.
    The paused broker's id, or -1 when there was no coordinator the run may pause (see
    ``own_broker``). ``on_resume(broker)`` runs right after the SIGCONT (e.g. to probe the resumed
    broker at once)."""
    out = outstanding if outstanding is not None else Outstanding()
    victim = coordinator_of(view, group)
    b = own_broker(cluster, victim) if victim >= 0 else None
    if b is None:
        log.info("group %s: coordinator %d is not a broker this run may pause", group, victim)
        return -1
    session_s = session_timeout_s(b)
    duration = min(MAX_PAUSE_S, pause_s if pause_s is not None else session_s * 1.5 + 1.0)
    out.paused.add(victim)  # an interrupted run resumes it (heal), as every fault here
    cluster.signal(victim, "STOP")
    paused_at = time.monotonic()
    time.sleep(duration)
    if until is not None:
        limit = paused_at + min(MAX_PAUSE_S, duration + 4 * session_s + 10)
        while time.monotonic() < limit and not until():
            time.sleep(0.1)
    cluster.signal(victim, "CONT")
    out.paused.discard(victim)
    faults.append(f"coordinator-pause:{victim}")
    if on_resume is not None:
        on_resume(victim)
    return victim


# ------------------------------------------------------------------ the consumer-group workload


def offset_fetch(view: ClusterView, address: str, group: str, topic: str, partitions: int,
                 timeout_s: float) -> dict[int, int] | None:
    """One OffsetFetch to the broker at ``address``: committed offset per partition (-1: none), only
    partitions answered without an error; None when the broker does not answer for the group
    (NOT_COORDINATOR, loading, unreachable)."""
    req = pb.OffsetFetchRequest(group_id=group, topics=[pb.OffsetFetchTopic(name=topic,
                                                                            partitions=list(range(partitions)))])
    try:
        resp = view.connection(address).api.OffsetFetch(req, timeout=timeout_s)
    except grpc.RpcError:
        return None
    if resp.error_code != 0:
        return None
    return {p.partition: p.committed_offset for t in resp.topics if t.name == topic for p in t.partitions
            if p.error_code == 0}


@dataclass
class GroupHistory:
    """What ``GroupWorkload`` recorded: the input of ``client.ops.history.check_group``."""

    commits: list[Commit] = field(default_factory=list)
    reads: list[CommittedRead] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    final_committed: dict[int, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)  # member errors by name (retried, not anomalies)


class OffsetObserver:
    """Reads ``group``'s committed offsets every ``interval_s``: through the coordinator that
    FindCoordinator names, and from every broker directly (one bounded call each)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, group: str, history: GroupHistory,
                 security: ChannelSecurity = PLAINTEXT_SECURITY, interval_s: float = 0.5,
                 timeout_s: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.topic = topic
        self.partitions = partitions
        self.group = group
        self.history = history
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.clock = clock
        self.view = ClusterView(bootstrap, timeout_s=timeout_s, security=security)
        self._lock = threading.Lock()  # one thread uses the view at a time (the loop, probe_broker)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"observer-{self.group}")
        self._thread.start()

    def _record(self, reader: str, sent: float, found: dict[int, int]) -> None:
        for partition, offset in sorted(found.items()):
            self.history.reads.append(CommittedRead(reader, partition, offset, sent))

    def through_coordinator(self, reader: str = "observer") -> dict[int, int] | None:
        """One OffsetFetch through the coordinator FindCoordinator names now (recorded)."""
        with self._lock:
            member = GroupMember(self.view, self.group, "chaos-observer", 10_000, 10_000, 3000, 0.1,
                                 self.timeout_s)
            try:
                address = member.coordinator().address
            except (errors.KafkaError, grpc.RpcError):
                return None
            sent = self.clock()
            found = offset_fetch(self.view, address, self.group, self.topic, self.partitions, self.timeout_s)
        if found is not None:
            self._record(reader, sent, found)
        return found

    def probe_brokers(self, only: int | None = None, refresh: bool = True) -> None:
        """OffsetFetch to every broker (or broker ``only``) directly; an answer is recorded."""
        with self._lock:
            if refresh or not self.view.brokers:
                try:
                    self.view.refresh([])
                except (errors.KafkaError, grpc.RpcError):
                    pass
            brokers = sorted(self.view.brokers.items())
        for broker, address in brokers:
            if only is not None and broker != only:
                continue
            with self._lock:
                sent = self.clock()
                found = offset_fetch(self.view, address, self.group, self.topic, self.partitions, self.timeout_s)
            if found is not None:
                self._record(f"broker {broker}", sent, found)

    def probe_burst(self, broker: int, count: int = 20, interval_s: float = 0.1) -> None:
        """Probe ``broker`` ``count`` times in a row (right after it resumed from a pause: a stale
        coordinator may be wrong for a moment only)."""
        for i in range(count):
            self.probe_brokers(only=broker, refresh=i == 0)
            time.sleep(interval_s)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.through_coordinator()
                self.probe_brokers()
            except Exception as e:  # never let the observer die quietly mid-run: note and go on
                self.history.errors[f"observer: {type(e).__name__}"] = (
                    self.history.errors.get(f"observer: {type(e).__name__}", 0) + 1)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10 + 4 * self.timeout_s)

    def close(self) -> None:
        self.stop()
        with self._lock:
            self.view.close()


class GroupWorkload:
    """``members`` consumers of one group on ``topic`` that commit after processing each polled
    batch, and an ``OffsetObserver``; see the module's docstring."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, group: str, members: int = 2,
                 security: ChannelSecurity = PLAINTEXT_SECURITY, session_timeout_ms: int = 6000,
                 heartbeat_interval_ms: int = 500, request_timeout_ms: int = 5000,
                 observe_interval_s: float = 0.5, clock: Callable[[], float] = time.monotonic) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self.topic = topic
        self.partitions = partitions
        self.group = group
        self.member_count = members
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.request_timeout_ms = request_timeout_ms
        self.clock = clock
        self.history = GroupHistory()
        self.observer = OffsetObserver(bootstrap, topic, partitions, group, self.history, security=security,
                                       interval_s=observe_interval_s, clock=clock)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._acked: dict[int, int] = {}  # partition -> highest acknowledged commit (drain's progress)
        self._lock = threading.Lock()

    def start(self) -> None:
        for n in range(self.member_count):
            t = threading.Thread(target=self._member, args=(f"m{n}",), daemon=True, name=f"member-{n}")
            self._threads.append(t)
            t.start()
        self.observer.start()

    def _error(self, name: str, e: BaseException) -> None:
        key = f"{name}: {type(e).__name__}"
        with self._lock:
            self.history.errors[key] = self.history.errors.get(key, 0) + 1

    def _member(self, name: str) -> None:
        h = self.history
        try:
            consumer = Consumer(self.topic, bootstrap_servers=self.bootstrap, security=self.security,
                                group_id=self.group, consumer_id=name, auto_offset_reset="earliest",
                                enable_auto_commit=False, session_timeout_ms=self.session_timeout_ms,
                                heartbeat_interval_ms=self.heartbeat_interval_ms,
                                max_poll_interval_ms=max(10_000, 2 * self.session_timeout_ms),
                                request_timeout_ms=self.request_timeout_ms, max_poll_records=500)
        except Exception as e:
            self._error(name, e)
            return
        try:
            while not self._stop.is_set():
                try:
                    records = consumer.poll(timeout_ms=200)
                except Exception as e:  # a coordinator or leader moving: retried, never fatal
                    self._error(name, e)
                    self._stop.wait(0.2)
                    continue
                if not records:
                    continue
                for r in records:  # processed: "delivered" to the application
                    h.deliveries.append(Delivery(name, r.partition, r.offset, (r.value or b"").decode()))
                sent = self.clock()
                try:
                    acked = consumer.commit()  # every owned partition's position, synchronously
                except Exception as e:  # an unknown outcome: not recorded as acknowledged
                    self._error(name, e)
                    continue
                done = self.clock()
                for tp, offset in sorted(acked.items()):
                    h.commits.append(Commit(name, tp.partition, offset, sent, done))
                    with self._lock:
                        self._acked[tp.partition] = max(self._acked.get(tp.partition, -1), offset)
        finally:
            try:
                consumer.close(autocommit=False)
            except Exception as e:
                self._error(name, e)

    def acknowledged_since(self, t: float) -> int:
        """Commits acknowledged after ``t`` (this workload's clock), counted from the newest back."""
        n = 0
        for c in reversed(self.history.commits[-1000:]):
            if c.acked <= t:
                break
            n += 1
        return n

    def drain(self, end_offsets: dict[int, int], timeout_s: float = 60.0) -> bool:
        """Wait (bounded) until the group's acknowledged commits reach ``end_offsets`` (partition ->
        the log's end); whether they did."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if all(self._acked.get(p, -1) >= end for p, end in end_offsets.items() if end > 0):
                    return True
            time.sleep(0.1)
        return False

    def stop(self, final_timeout_s: float = 30.0) -> GroupHistory:
        """Stop the members (each leaves the group), then read the group's final committed offsets
        through its coordinator (bounded retries); the history."""
        self._stop.set()
        for t in self._threads:
            t.join(self.request_timeout_ms / 1000 * 4 + 30)
        self.observer.stop()
        deadline = time.monotonic() + final_timeout_s
        final: dict[int, int] | None = None
        for _attempt in range(100):
            final = self.observer.through_coordinator("final")
            if (final is not None and len(final) == self.partitions) or time.monotonic() >= deadline:
                break
            time.sleep(0.3)
        self.history.final_committed = {p: o for p, o in (final or {}).items() if o >= 0}
        self.observer.close()
        return self.history

    def stop_now(self) -> None:
        """Stop without the final read (an interrupted run); members leave the group."""
        self._stop.set()
        for t in self._threads:
            t.join(5)
        self.observer.close()
