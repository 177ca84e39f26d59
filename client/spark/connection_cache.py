"""Cluster connections kept between the tasks a Python worker runs (Spark's Kafka consumer cache).

Theory of operation
-------------------
Spark reuses its Python workers (``spark.python.worker.reuse``, on by default): one worker runs
task after task of the same query and of the next one. Spark's own Kafka source keeps its Kafka
consumers in a per-executor cache between tasks (``spark.kafka.consumer.cache.capacity`` 64,
``spark.kafka.consumer.cache.timeout`` 5 minutes) so a task does not pay for connecting and
fetching metadata; this is that cache for the ``minikafka`` reader. A task *borrows* a
``ClusterView`` (its metadata and gRPC channels) for a cluster address, security settings and
timeout, and *gives it back* when its range was read without error; a view whose task failed is
*discarded* (closed), so a broken channel or a view in a strange state is never lent again.
A view is lent to one task at a time. Views idle longer than ``idle_timeout_s`` are closed when
the cache is next used, and at most ``capacity`` idle views are kept (the least recently returned
go first).

Reusing a view never weakens a read: its metadata may be stale (a leader moved since it was
cached), and the reader already handles that as it does a move during a read - the old leader
answers NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH (or cannot be reached), the reader
refreshes the metadata and fetches again from the same offset.

The clock and the view factory are parameters, so the policy is unit-tested without a cluster.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from client.connection import ClusterView
from proto.transport import ChannelSecurity

DEFAULT_CAPACITY = 64  # spark.kafka.consumer.cache.capacity
DEFAULT_IDLE_TIMEOUT_S = 300.0  # spark.kafka.consumer.cache.timeout (5m)


@dataclass(frozen=True)
class ViewKey:
    bootstrap_servers: str
    timeout_s: float
    security: ChannelSecurity


ViewFactory = Callable[[ViewKey], ClusterView]


def _new_view(key: ViewKey) -> ClusterView:
    return ClusterView(key.bootstrap_servers, timeout_s=key.timeout_s, security=key.security)


class ConnectionCache:
    def __init__(self, capacity: int = DEFAULT_CAPACITY, idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
                 make: ViewFactory = _new_view, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = capacity
        self.idle_timeout_s = idle_timeout_s
        self._make = make
        self._clock = clock
        self._lock = threading.Lock()
        # Idle views, least recently returned first: (key, view, returned at).
        self._idle: list[tuple[ViewKey, ClusterView, float]] = []
        self._lent: dict[int, ViewKey] = {}  # id(view) -> its key, while a task holds it

    def borrow(self, key: ViewKey) -> ClusterView:
        """An idle view for ``key`` (the most recently returned), else a new one."""
        with self._lock:
            expired = self._expire_locked()
            view = None
            for i in range(len(self._idle) - 1, -1, -1):
                if self._idle[i][0] == key:
                    view = self._idle.pop(i)[1]
                    break
        for v in expired:
            v.close()
        if view is None:
            view = self._make(key)
        with self._lock:
            self._lent[id(view)] = key
        return view

    def give_back(self, view: ClusterView) -> None:
        """A view whose task read without error: kept for the next task (within capacity)."""
        with self._lock:
            key = self._lent.pop(id(view), None)
            if key is None:  # not ours (or given back twice): never keep a view twice
                return
            self._idle.append((key, view, self._clock()))
            closing = self._expire_locked()
            while len(self._idle) > self.capacity:
                closing.append(self._idle.pop(0)[1])
        for v in closing:
            v.close()

    def discard(self, view: ClusterView) -> None:
        """A view whose task failed: closed, never lent again."""
        with self._lock:
            self._lent.pop(id(view), None)
        view.close()

    def idle_count(self) -> int:
        with self._lock:
            return len(self._idle)

    def _expire_locked(self) -> list[ClusterView]:
        cutoff = self._clock() - self.idle_timeout_s
        keep = [e for e in self._idle if e[2] > cutoff]
        expired = [e[1] for e in self._idle if e[2] <= cutoff]
        self._idle = keep
        return expired


# The worker process's cache: Spark runs the tasks of a reused Python worker one after another.
CONNECTIONS = ConnectionCache()
