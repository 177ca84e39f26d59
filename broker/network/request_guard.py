"""The request boundary of a broker: what a request may ask for, and a typed answer whatever happens.

Theory of operation (SPEC S13.2, S13.4)
---------------------------------------
Every KafkaApi request that lists topic-partitions (Produce, Fetch, ListOffsets,
OffsetsForLeaderEpoch) is first judged entry by entry by ``judge_partitions``:
an illegal topic name is INVALID_TOPIC_EXCEPTION, a partition index outside
int32's non-negative range UNKNOWN_TOPIC_OR_PARTITION, a partition listed twice
INVALID_REQUEST (every occurrence: one request cannot ask twice for the same
thing and get two answers), and a request listing more than
``max.request.partitions`` entries INVALID_REQUEST throughout. Handlers then
serve only the entries judged NONE and answer the others with their code - so
one bad entry never costs the others their answer.

Whatever a handler does not expect (a bug, a disk error) must still not end the
RPC in gRPC's UNKNOWN status: ``error_response`` builds the request's own
response shape with the error code on every topic/partition (or at the top
where the response has one), and the servicers answer with it.

``ByteBudget`` bounds the bytes of produce requests being handled at once
(Kafka's ``queued.max.request.bytes``): a request waits for room, bounded by its
own timeout, and a request larger than the whole budget is let through only
alone, so it can never wait forever.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable
from typing import Any

from broker.network.api_catalogue import BY_NAME
from proto import errors
from proto import minikafka_pb2 as pb
from proto.names import MAX_PARTITION, topic_name_error

E = pb.ErrorCode


def judge_partitions(entries: Iterable[tuple[str, int]], max_partitions: int) -> list[pb.ErrorCode]:
    """An error code (or NONE) for every (topic, partition) entry of a request, in order."""
    items = list(entries)
    if len(items) > max_partitions:
        return [E.INVALID_REQUEST] * len(items)
    # Duplicates are rare: counted only when there are some (a Counter per request costs ~1 us).
    counts = Counter(items) if len(set(items)) != len(items) else None
    verdicts: list[pb.ErrorCode] = []
    for topic, partition in items:
        if topic_name_error(topic) is not None:
            verdicts.append(E.INVALID_TOPIC_EXCEPTION)
        elif not 0 <= partition <= MAX_PARTITION:
            verdicts.append(E.UNKNOWN_TOPIC_OR_PARTITION)
        elif counts is not None and counts[(topic, partition)] > 1:
            verdicts.append(E.INVALID_REQUEST)
        else:
            verdicts.append(E.NONE)
    return verdicts


def judge_names(names: Iterable[str], max_entries: int) -> list[pb.ErrorCode]:
    """The same for requests that list topic names (CreateTopics, DeleteTopics, Metadata)."""
    items = list(names)
    if len(items) > max_entries:
        return [E.INVALID_REQUEST] * len(items)
    counts = Counter(items)
    return [E.INVALID_TOPIC_EXCEPTION if topic_name_error(n) is not None
            else E.INVALID_REQUEST if counts[n] > 1 else E.NONE for n in items]


_MESSAGES: dict[int, str] = {
    E.INVALID_REQUEST: "the partition is listed twice, or the request lists too many partitions",
    E.INVALID_TOPIC_EXCEPTION: "illegal topic name",
    E.UNKNOWN_TOPIC_OR_PARTITION: "no such partition",
}


def error_message(code: pb.ErrorCode) -> str:
    return _MESSAGES.get(code) or E.Name(code)


def error_response(api: str, request: Any, code: int) -> Any:
    """``request``'s response with ``code`` everywhere an error can be said (see the module doc): the
    API's entry in the catalogue (``broker.network.api_catalogue``) builds it."""
    entry = BY_NAME.get(api)
    if entry is None:
        raise ValueError(f"no error response for {api}")
    return entry.error_response(request, errors.wire_code(code))


class ByteBudget:
    """Bytes of requests in flight, bounded (queued.max.request.bytes; -1 = unbounded).

    Two ways to hold room, which may share one budget:

    * ``acquire`` / ``release``: a whole request at once (the produce path, whose request is in
      memory already): it waits for room, bounded by its timeout, and a request larger than the
      whole budget is let through only alone, so it can never wait forever.
    * ``acquire_arrived`` / ``arrived_whole`` / ``release_held`` / ``abandon``: a frame reserved
      by its *holder* (a Kafka-listener connection) as its bytes arrive from the socket, never for
      what was only announced. (Reserved at its announced size once the size prefix was read - as
      Kafka's pool does - eleven connections announcing ~200 MB and sending 10 bytes each held the
      whole pool until ``request.timeout.ms``, and every other request waited.) A holder waits while the bytes that did arrive do
      not fit (its connection is not read meanwhile: TCP holds the sender, as Kafka mutes the
      channel), and never holds more than the ``cap`` it passes (its own share: the frame being
      received and those whose answers are not written yet).

    Reserving piecemeal could deadlock where reserving whole frames could not: frames that each
    hold part of the pool, every one waiting for room for its next bytes. So when every byte held
    belongs to a partial frame whose holder is waiting for room, one of those holders is let past
    the limit - the same one (``_privileged``) until its frame is whole or abandoned; its frame
    then runs and its bytes come back. The budget exceeds its limit by at most that one frame (a
    frame larger than the whole limit gets through this way too, alone). A holder whose sender
    stopped is not waiting for room, so it is never let past: it holds only what it sent.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        self._changed = asyncio.Condition()
        self._waiting = 0  # acquirers parked on _changed
        # Arrival reservations, per holder: every byte it holds, and of those its partial frame's.
        self._held: dict[object, int] = {}
        self._receiving: dict[object, int] = {}
        self._parked = 0  # partial-frame bytes of holders parked in acquire_arrived
        self._privileged: object | None = None  # the holder let past the limit (see the class doc)

    async def acquire(self, nbytes: int, timeout_s: float) -> bool:
        """Wait until ``nbytes`` fit; False if ``timeout_s`` passed first (nothing taken)."""
        if self.limit < 0 or self.in_flight == 0 or self.in_flight + nbytes <= self.limit:
            # Fits now: taken without a lock or a wait (everything runs on one event loop, and
            # nothing here awaits). asyncio.wait_for started a task for every request - two loop
            # iterations on the path of every Produce and every Kafka-listener frame.
            self.in_flight += nbytes
            return True
        self._waiting += 1
        try:
            async with self._changed:
                try:
                    await asyncio.wait_for(self._changed.wait_for(
                        lambda: self.in_flight == 0 or self.in_flight + nbytes <= self.limit), max(0.0, timeout_s))
                except TimeoutError:
                    return False
                self.in_flight += nbytes
                return True
        finally:
            self._waiting -= 1

    async def release(self, nbytes: int) -> None:
        self.in_flight -= nbytes
        if self._waiting:  # wait_for re-checks the predicate: no wake-up is lost before a wait
            async with self._changed:
                self._changed.notify_all()

    def held_by(self, holder: object) -> int:
        """The bytes ``holder`` holds (arrival reservations)."""
        return self._held.get(holder, 0)

    def _fits(self, holder: object, nbytes: int, cap: int) -> bool:
        if 0 <= cap < self._held.get(holder, 0) + nbytes:
            return False  # over its own share: it waits for its own answers to be written
        return (self.limit < 0 or self.in_flight == 0 or self.in_flight + nbytes <= self.limit
                or self._privileged is holder)

    def _stuck(self, holder: object, nbytes: int, cap: int) -> bool:
        """Every byte held is a partial frame waiting for room (``holder``'s among them): nothing
        would ever come back, so ``holder`` is let past the limit."""
        return (self._privileged is None and self.in_flight == self._parked
                and not 0 <= cap < self._held.get(holder, 0) + nbytes)

    async def acquire_arrived(self, holder: object, nbytes: int, timeout_s: float, cap: int = -1) -> bool:
        """Reserve ``nbytes`` that arrived of the frame ``holder`` is receiving (its first call opens
        the frame), waiting until they fit and ``holder`` stays within ``cap`` (-1: no cap of its
        own); False if ``timeout_s`` passed first (nothing more taken: ``abandon`` gives back the
        frame's bytes taken so far)."""
        if self._fits(holder, nbytes, cap):
            self._take(holder, nbytes)  # no lock, no wait: as in acquire
            return True
        receiving = self._receiving.get(holder, 0)
        self._parked += receiving
        self._waiting += 1
        try:
            async with self._changed:
                # asyncio.timeout, not wait_for: no task boundary between the predicate that held
                # and the bytes taken below (wait_for could time out after it held).
                try:
                    async with asyncio.timeout(max(0.0, timeout_s)):
                        await self._changed.wait_for(
                            lambda: self._fits(holder, nbytes, cap) or self._stuck(holder, nbytes, cap))
                except TimeoutError:
                    return False
                if not self._fits(holder, nbytes, cap):
                    self._privileged = holder
                self._take(holder, nbytes)
                return True
        finally:
            self._parked -= receiving
            self._waiting -= 1

    def _take(self, holder: object, nbytes: int) -> None:
        self.in_flight += nbytes
        self._held[holder] = self._held.get(holder, 0) + nbytes
        self._receiving[holder] = self._receiving.get(holder, 0) + nbytes

    def arrived_whole(self, holder: object) -> None:
        """``holder``'s frame is complete: its bytes stay held until ``release_held``."""
        self._receiving.pop(holder, None)
        if self._privileged is holder:
            self._privileged = None

    async def abandon(self, holder: object) -> None:
        """``holder``'s partial frame is dropped (its connection goes): its bytes come back."""
        nbytes = self._receiving.pop(holder, 0)
        if self._privileged is holder:
            self._privileged = None
        if nbytes:
            await self.release_held(holder, nbytes)

    async def release_held(self, holder: object, nbytes: int) -> None:
        """Give back ``nbytes`` of a complete frame ``holder`` held (its answer is written)."""
        left = self._held.get(holder, 0) - nbytes
        if left > 0:
            self._held[holder] = left
        else:
            self._held.pop(holder, None)
        await self.release(nbytes)
