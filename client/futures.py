"""The producer's futures: one outcome per batch, shared by the futures of its records.

``Future.__init__`` builds a Condition and a Lock per future; at hundreds of thousands of records
per second that dominated the producer, so a record's :class:`FutureRecordMetadata` only points at
its batch's :class:`BatchResult` (plus its offset delta and timestamp) and every record of a batch
shares that result's condition. :class:`BatchSendResult` is ``send_batch``'s single handle.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from proto.record_batch import RecordFuture

log = logging.getLogger("client.producer")


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int


class BatchResult:
    """The outcome of one batch, shared by the futures of its records.

    A Condition per batch (a Python object holding an RLock and eight bound methods, ~7 us with the
    garbage collection it caused) was the producer's largest per-batch cost once thousands of
    partitions got one-record batches (issue 29). So a batch holds a bare (C) reentrant lock, which
    orders its outcome against callback registration, and builds a Condition over that same lock
    only once somebody waits (``result()``, ``concurrent.futures.wait``, which acquires every
    future's condition, the same one for a batch's records: hence reentrant). One lock per batch,
    not one for all: the caller's thread and the producer's would contend for a shared one on every
    record, and a thread that blocks on a lock gives up the GIL."""

    __slots__ = ("_cond", "_lock", "base_offset", "callbacks", "done", "error", "partition", "topic", "waited")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self._lock = threading.RLock()
        self._cond: threading.Condition | None = None
        self.done = False
        self.base_offset = -1
        self.error: BaseException | None = None
        self.callbacks: list[Callable[[], None]] = []
        self.waited: list[FutureRecordMetadata] = []

    @property
    def _condition(self) -> threading.Condition:
        with self._lock:
            cond = self._cond
            if cond is None:
                cond = self._cond = threading.Condition(self._lock)
            return cond

    def complete(self, base_offset: int, error: BaseException | None) -> None:
        with self._lock:
            if self.done:
                return
            self.base_offset = base_offset
            self.error = error
            self.done = True
            callbacks, self.callbacks = self.callbacks, []
            if self._cond is not None:  # somebody waits, or waited
                for f in self.waited:  # futures someone passed to concurrent.futures.wait()
                    for waiter in f.__dict__.get("_mk_waiters", []):
                        if error is None:
                            waiter.add_result(f)
                        else:
                            waiter.add_exception(f)
                self._cond.notify_all()
        for cb in callbacks:
            try:
                cb()
            except Exception:
                log.exception("exception in a producer callback")


def _call(fn: Callable[[Any], object], arg: Any) -> None:
    fn(arg)


class FutureRecordMetadata(RecordFuture, concurrent.futures.Future):  # type: ignore[misc, type-arg]
    """A ``concurrent.futures.Future`` for one record, resolved with its batch.

    ``Future.__init__`` builds a Condition and a Lock per future; at hundreds of
    thousands of records per second that dominates the producer, so the records
    of a batch share the batch's condition instead. The methods (and the private
    attributes ``concurrent.futures.wait`` / ``as_completed`` use) map onto it.

    ``FutureRecordMetadata(result, relative_offset, timestamp)``: the fields ``_mk_result``,
    ``_mk_rel`` and ``_mk_ts`` live in ``RecordFuture`` (compiled, proto/_codec.c, so that the
    producer's RecordsBuilder creates a record's future without running Python; deliberately
    no ``Future.__init__``, see above).
    """

    _mk_result: BatchResult
    _mk_rel: int
    _mk_ts: int

    # The attributes concurrent.futures.wait() and as_completed() read.
    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        return self._mk_result._condition

    @property
    def _state(self) -> str:  # type: ignore[override]
        return "FINISHED" if self._mk_result.done else "PENDING"

    @property
    def _waiters(self) -> list[Any]:  # type: ignore[override]
        ws: list[Any] | None = self.__dict__.get("_mk_waiters")
        if ws is None:
            ws = self.__dict__["_mk_waiters"] = []
            self._mk_result.waited.append(self)
        return ws

    def cancel(self) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return not self._mk_result.done

    def done(self) -> bool:
        return self._mk_result.done

    def _wait(self, timeout: float | None) -> None:
        r = self._mk_result
        if r.done:
            return
        with r._condition:
            if not r.done and not r._condition.wait_for(lambda: r.done, timeout):
                raise TimeoutError("the record was not acknowledged in time")

    def result(self, timeout: float | None = None) -> RecordMetadata:
        self._wait(timeout)
        r = self._mk_result
        if r.error is not None:
            raise r.error
        offset = r.base_offset + self._mk_rel if r.base_offset >= 0 else -1
        return RecordMetadata(r.topic, r.partition, offset, self._mk_ts)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return self._mk_result.error

    def add_done_callback(self, fn: Callable[[concurrent.futures.Future[Any]], object]) -> None:
        r = self._mk_result
        with r._lock:
            if not r.done:
                r.callbacks.append(partial(_call, fn, self))
                return
        fn(self)

    def set_running_or_notify_cancel(self) -> bool:
        return True

    def set_result(self, result: Any) -> None:
        raise RuntimeError("a producer future is completed by its batch")

    def set_exception(self, exception: BaseException | None) -> None:
        raise RuntimeError("a producer future is completed by its batch")


class BatchSendResult:
    """What ``Producer.send_batch`` returns: one handle for the whole call.

    ``result(timeout)`` waits for every record and returns their ``RecordMetadata`` in the order of
    the values given (raising the first failure, as ``Future.result`` does); ``exception()``,
    ``done()`` and ``futures()`` (one ``FutureRecordMetadata`` per record, built on demand) cover
    the rest. The records share their batches' outcomes, so nothing is allocated per record
    until asked for.
    """

    def __init__(self) -> None:
        # (batch outcome, first offset delta in that batch, record count, timestamp) per slice
        self._slices: list[tuple[BatchResult, int, int, int]] = []
        self._futures: list[FutureRecordMetadata] = []  # records sent one by one (keyed, no partition)

    def done(self) -> bool:
        return all(r.done for r, _, _, _ in self._slices) and all(f.done() for f in self._futures)

    def _wait(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        for r, _, _, _ in self._slices:
            if not r.done:
                with r._condition:
                    left = None if deadline is None else max(0.0, deadline - time.monotonic())
                    if not r._condition.wait_for(lambda r=r: r.done, left):  # type: ignore[misc]
                        raise TimeoutError("the records were not acknowledged in time")
        for f in self._futures:
            f._wait(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        for r, _, _, _ in self._slices:
            if r.error is not None:
                return r.error
        for f in self._futures:
            if f._mk_result.error is not None:
                return f._mk_result.error
        return None

    def futures(self) -> list[FutureRecordMetadata]:
        out = list(self._futures)
        for r, first, count, ts in self._slices:
            out.extend(FutureRecordMetadata(r, first + i, ts) for i in range(count))
        return out

    def result(self, timeout: float | None = None) -> list[RecordMetadata]:
        error = self.exception(timeout)
        if error is not None:
            raise error
        out = [f.result() for f in self._futures]
        for r, first, count, ts in self._slices:
            base = r.base_offset + first if r.base_offset >= 0 else -1
            out.extend(RecordMetadata(r.topic, r.partition, base + i if base >= 0 else -1, ts)
                       for i in range(count))
        return out
