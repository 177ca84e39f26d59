"""The consumer's side of a fetch session (KIP-227, Kafka's FetchSessionHandler): what the next Fetch
to one broker names, forgets, and whether its answer can be trusted. Pure.

Theory of operation (SPEC S15)
------------------------------
Without a session every Fetch names every partition the consumer reads from that broker, and every
answer lists all of them: at hundreds of partitions most of each request and answer says "nothing
new". With a session the broker keeps, per partition, what the last fetches said (fetch offset,
current leader epoch, max bytes), so the consumer keeps one handler per broker it fetches from:

* the first fetch is **full** (epoch ``INITIAL_EPOCH``): it names every partition wanted now, and
  the answer - all of them - carries the new session's id (or 0: the broker made none, and every
  fetch stays full);
* later fetches are **incremental** (the session's id and its next epoch: 1, 2, ... wrapping to 1):
  they name only partitions added or whose state changed (the consumer moved its fetch position, or
  learned a new leader epoch), and ``forgotten`` those no longer wanted (reassigned, seeked past a
  corrupt batch, their buffer full, led elsewhere now). Partitions named neither way keep what the
  broker cached;
* an incremental answer lists only partitions with something new; the ones it leaves out had
  nothing (the consumer keeps their positions as they are).

A broker may read, on an incremental fetch, only the partitions named or moved since its last
answer (this project's brokers keep one answered with records to read until its next offset is
named, as Kafka's re-read every partition; an older one did not). A consumer that drops a
partition's answer (a prefetch's error, a position reset, a rebalance) therefore calls
:meth:`resend`, and the next fetch names that partition again even though its state did not change.

Errors, as Kafka's handler: FETCH_SESSION_ID_NOT_FOUND (evicted, the broker restarted) starts over
with a new session (id 0, epoch 0); INVALID_FETCH_SESSION_EPOCH, a failed or cancelled request
(whether the broker applied it is unknown), or an answer that lists a partition the fetch did not
hold, close the session and open a new one with a full fetch (the old id, epoch 0). A leader move or
metadata refresh that concerns a broker drops its session the same way (:meth:`reset`).

No I/O, no clock; keys are any hashable partition names (the consumer's ``TopicPartition``).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 0x7FFFFFFF

# The wire codes this module reacts to (proto.errors has them as classes; the values are Kafka's).
NONE = 0
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71

K = TypeVar("K", bound=Hashable)


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (Kafka's FetchMetadata.nextEpoch): wraps to 1, never to 0."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch >= MAX_EPOCH else epoch + 1


@dataclass(frozen=True, slots=True)
class PartitionFetchState:
    """What a fetch says about one partition; a change of any field is named in the next fetch."""

    fetch_offset: int
    current_leader_epoch: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchRequestData(Generic[K]):
    """One fetch to build: its session fields, the partitions it names and forgets, and every
    partition it covers (named or cached by the broker) with the state the broker holds for it."""

    session_id: int
    epoch: int
    to_send: Mapping[K, PartitionFetchState]
    forgotten: tuple[K, ...]
    covered: Mapping[K, PartitionFetchState]

    @property
    def full(self) -> bool:
        return self.epoch == INITIAL_EPOCH


class FetchSessionHandler(Generic[K]):
    """The session with one broker. ``build`` the next fetch, then give its outcome to exactly one
    of ``handle_response`` / ``handle_error``; at most one fetch per handler is outstanding."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        # What the broker's session holds after the last fetch built (Kafka's sessionPartitions).
        self._partitions: dict[K, PartitionFetchState] = {}
        self._resend: set[K] = set()
        self._outstanding: FetchRequestData[K] | None = None

    @property
    def partitions(self) -> Mapping[K, PartitionFetchState]:
        return self._partitions

    def build(self, wanted: Mapping[K, PartitionFetchState]) -> FetchRequestData[K]:
        """The next fetch, for the partitions ``wanted`` from this broker now (their current state)."""
        covered = dict(wanted)
        if self.epoch == INITIAL_EPOCH:
            data = FetchRequestData(self.session_id, INITIAL_EPOCH, covered, (), covered)
        else:
            old = self._partitions
            forgotten = tuple(k for k in old if k not in covered)
            resend = self._resend
            to_send = {k: s for k, s in covered.items() if k in resend or old.get(k) != s}
            data = FetchRequestData(self.session_id, self.epoch, to_send, forgotten, covered)
        self._partitions = covered
        self._resend = set()
        self._outstanding = data
        return data

    def handle_response(self, data: FetchRequestData[K], error_code: int, session_id: int,
                        listed: Collection[K], throttled: bool = False) -> bool:
        """The answer to ``data`` arrived: move the session on. False when the answer must not be
        used (a session error, or partitions that do not match the fetch): drop its records."""
        if data is not self._outstanding:
            return False  # answers a fetch this handler has given up on (reset since)
        self._outstanding = None
        if error_code != NONE:
            if error_code == FETCH_SESSION_ID_NOT_FOUND:
                self._start_over()
            else:  # INVALID_FETCH_SESSION_EPOCH, or the whole fetch refused: close it, open a new one
                self._close_existing()
            return False
        extra = any(k not in data.covered for k in listed)
        if data.full:
            if not listed and throttled:
                # KIP-219: a throttled full fetch may be answered empty; not an error.
                self._start_over()
                return False
            if extra or len(set(listed)) != len(data.covered):
                self._start_over()
                return False
            self.session_id = session_id
            # No session made (the broker's cache is full): every fetch stays full.
            self.epoch = next_epoch(INITIAL_EPOCH) if session_id != INVALID_SESSION_ID else INITIAL_EPOCH
            return True
        if extra or session_id not in (INVALID_SESSION_ID, self.session_id):
            self._close_existing()
            return False
        if session_id == INVALID_SESSION_ID:
            self._start_over()  # the broker closed the session; its answer still counts
            return True
        self.epoch = next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """The fetch failed or was cancelled: the broker may or may not have applied it."""
        self._outstanding = None
        self._close_existing()

    def reset(self) -> None:
        """Drop the session (a leader moved, metadata was refreshed for this broker): the next fetch
        is full, closing the broker's session under the same id."""
        self.handle_error()

    def resend(self, key: K) -> None:
        """The consumer did not take what the last answer said of ``key``: name it in the next fetch."""
        self._resend.add(key)

    def _start_over(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH

    def _close_existing(self) -> None:
        self.epoch = INITIAL_EPOCH
