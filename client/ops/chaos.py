"""Fault injection against a running cluster: the workload, the scenarios, ``minikafka chaos``.

``Workload`` runs producers writing unique values (idempotent, acks=all) at a
steady rate and records each write's outcome; after the faults heal it reads
every partition in full. ``client.ops.history.check`` then judges the history.
"""

from __future__ import annotations

import random
import threading
import time

from client.connection import ClusterView
from client.consumer import Consumer
from client.ops.history import FAIL, OK, UNKNOWN, Read, Write
from client.ops.local_cluster import LocalCluster, pid_alive
from client.producer import Producer
from client.structs import TopicPartition
from proto import errors
from proto.transport import PLAINTEXT_SECURITY, ChannelSecurity

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
                 security: ChannelSecurity = PLAINTEXT_SECURITY) -> None:
        self.bootstrap = bootstrap
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
                try:
                    fut: object = producer.send(self.topic, value.encode(), partition=partition)
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
            if isinstance(fut, BaseException):
                writes.append(Write(name, partition, value, FAIL))
                continue
            try:
                meta = fut.result(timeout=1)  # type: ignore[attr-defined]
                writes.append(Write(name, partition, value, OK, meta.offset))
            except errors.KafkaError as e:
                writes.append(Write(name, partition, value, FAIL if e.name in DEFINITE_FAILURES else UNKNOWN))
            except Exception:
                writes.append(Write(name, partition, value, UNKNOWN))
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
                    out.append(Read(r.partition, r.offset, (r.value or b"").decode()))
                    if r.offset + 1 >= end[TopicPartition(r.topic, r.partition)]:
                        done.add(TopicPartition(r.topic, r.partition))
        return out


# ------------------------------------------------------------------ `minikafka chaos`

SCENARIOS = ("leader-kill", "controller-kill", "rolling-restart", "follower-pause", "soak")


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
           faults: list[str], outstanding: Outstanding | None = None) -> None:
    """One fault, then its healing; bounded waits only. ``outstanding`` holds the fault while it
    lasts, so an interrupted run knows what to heal."""
    out = outstanding if outstanding is not None else Outstanding()
    status = cluster.status()
    ids = [b["id"] for b in status["brokers"]]
    if scenario == "soak":
        scenario = rng.choice(SCENARIOS[:-1])
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
