"""One event queue, one thread (Kafka's ControllerEventManager).

Theory of operation: everything that happens to the controller becomes an event on one queue;
a single thread takes them in order and hands each to the controller. An ``Expire`` (the
ZooKeeper session was lost) does not wait its turn: the queue is cleared and it goes first, so a
controller that lost its session stops acting on stale events at once (KAFKA-6082's lesson).
An event that only says "look again" (its handler reads the current state) is not queued twice:
the one waiting will see everything (found by simulation: under a flapping connection every
reconnect re-armed the watches and retried the election, and the queue grew without bound).
The simulation drives the same controller without this thread, calling ``process`` itself.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from controller.events import (
    AutoRebalance,
    BrokerChange,
    ControllerChange,
    Event,
    Expire,
    IsrChangeNotification,
    PartitionModifications,
    PartitionReassignment,
    PreferredReplicaElection,
    Reconnected,
    Reelect,
    Shutdown,
    TopicChange,
    TopicDeletion,
)

log = logging.getLogger(__name__)


# Events whose handler reads the current state from ZooKeeper: one queued is as good as two.
LOOK_AGAIN: tuple[type[Event], ...] = (ControllerChange, Reconnected, Reelect, BrokerChange, TopicChange,
                                       TopicDeletion, IsrChangeNotification, PreferredReplicaElection,
                                       PartitionReassignment, AutoRebalance)


def enqueue(queue: deque[Event] | list[Event], event: Event) -> int:
    """Put ``event`` on ``queue`` by the rules above; returns how many queued events it dropped."""
    if isinstance(event, Expire):
        dropped = len(queue)
        queue.clear()
        queue.insert(0, event)
        return dropped
    if type(event) in LOOK_AGAIN and any(type(e) is type(event) for e in queue):
        return 0
    if isinstance(event, PartitionModifications) and event in queue:
        return 0  # the same topic's look-again, already waiting
    queue.append(event)
    return 0


class ControllerEventManager:
    def __init__(self, process: Callable[[Event], None], name: str = "controller-event-thread") -> None:
        self._process = process
        self._queue: deque[Event] = deque()
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, event: Event) -> None:
        with self._cv:
            dropped = enqueue(self._queue, event)
            if dropped:
                log.info("session expired: %d queued controller events dropped", dropped)
            self._cv.notify()

    def __len__(self) -> int:
        with self._cv:
            return len(self._queue)

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue:
                    self._cv.wait()
                event = self._queue.popleft()
            try:
                self._process(event)
            except Exception:  # the controller handles its own failures; this keeps the thread alive
                log.exception("controller event %s failed", type(event).__name__)
            if isinstance(event, Shutdown):
                return
