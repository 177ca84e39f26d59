"""The transaction coordinator's pure core (Kafka 2.8 ``TransactionCoordinator`` + ``TransactionMetadata``).

Theory of operation
-------------------
No I/O, no clock: every call takes ``now_ms`` and returns either an ``Answer`` (say it to the
client now, nothing changes) or a ``Transit`` - a new ``TxnMetadata`` that the shell must make
durable (ZooKeeper, conditional on its lease) before anyone may see it. While a transit is in
flight the transactional id has a *pending* state and every other request for it is answered
CONCURRENT_TRANSACTIONS (Kafka's ``pendingState``). The shell reports the write's fate with
``transit_done``, which installs the new metadata (success) or forgets it (failure: the cache
never runs ahead of storage) and says what follows: the client's answer, the markers to send, the
completion to write once they are written.

States and their valid predecessors (Kafka's ``TransactionState.validPreviousStates``)::

    Empty             <- Empty, CompleteCommit, CompleteAbort           (InitProducerId: epoch bump)
    Ongoing           <- Ongoing, Empty, CompleteCommit, CompleteAbort  (AddPartitions/AddOffsets)
    PrepareCommit     <- Ongoing                                        (EndTxn commit)
    PrepareAbort      <- Ongoing, PrepareEpochFence                     (EndTxn abort, fence, timeout)
    CompleteCommit    <- PrepareCommit                                  (markers written)
    CompleteAbort     <- PrepareAbort                                   (markers written)
    Dead              <- Empty, CompleteCommit, CompleteAbort           (transactional.id.expiration.ms)
    PrepareEpochFence <- Ongoing

``PrepareEpochFence`` is never stored: Kafka uses it as a pending marker between "fence the
epoch" and "abort with the fenced epoch"; here the two are one transit straight to PrepareAbort
with ``producer_epoch + 1`` and ``last_producer_epoch = -1`` (so the fenced epoch is never handed
to a client, as Kafka). A failed fence write leaves the durable metadata, so a later fence bumps
from the same epoch to the same value - what Kafka's ``hasFailedEpochFence`` flag achieves.

The requests (Kafka 2.8's checks, in Kafka's order):

* ``init_producer_id``: a pending transit or a Prepare* state: CONCURRENT_TRANSACTIONS; an
  expected (producer id, epoch) from the client (KIP-360) that is neither the current producer
  id, nor the last one with an exhausted epoch (a retry after a rotation): PRODUCER_FENCED.
  Empty/Complete*: bump the epoch (a retry whose expected epoch is the last epoch gets the
  current one again; an expected epoch that is neither: PRODUCER_FENCED), or when the epoch is
  exhausted (>= 32766) rotate to a fresh producer id at epoch 0. Ongoing: fence the ongoing
  transaction - abort it under a bumped epoch - and answer CONCURRENT_TRANSACTIONS, so the client
  retries and gets a second bump (the first one is never returned).
* ``add_partitions`` (AddPartitionsToTxn, and AddOffsetsToTxn with a group): unknown id or another
  producer id: INVALID_PRODUCER_ID_MAPPING; another epoch: PRODUCER_FENCED; pending or Prepare*:
  CONCURRENT_TRANSACTIONS; Ongoing and nothing new: NONE at once; else -> Ongoing (the transaction
  starts now when it was not Ongoing).
* ``verify_partitions`` (AddPartitionsToTxn verify_only, KIP-890 part 1: a partition leader asks
  before it appends a producer's first transactional batch there): answered from the installed
  metadata, no transit - NONE for the partitions of the Ongoing transaction of that producer id and
  epoch, INVALID_TXN_STATE for the others; INVALID_PRODUCER_ID_MAPPING / PRODUCER_FENCED as above,
  CONCURRENT_TRANSACTIONS while prepared.
* ``end_txn``: INVALID_PRODUCER_ID_MAPPING / PRODUCER_FENCED as above; pending:
  CONCURRENT_TRANSACTIONS; Ongoing -> PrepareCommit/PrepareAbort; a retry of a completed EndTxn
  with the same result: NONE; of a preparing one: CONCURRENT_TRANSACTIONS; the other result, or
  Empty: INVALID_TXN_STATE.
* ``timed_out``: each Ongoing transaction older than its timeout is fenced and aborted like an
  InitProducerId on Ongoing (the producer learns PRODUCER_FENCED on its next request).
* ``expired``: an idle (Empty/Complete*) transactional id past transactional.id.expiration.ms
  becomes Dead (its stored state is deleted).
* ``load``: a coordinator taking an id over that is in Prepare* completes it (markers again,
  then Complete*), as Kafka's ``loadTransactionsForTxnTopicPartition``.

Error codes are Kafka's numbers (proto/errors.py); ``NONE`` = 0.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Final

from proto import errors

NONE: Final = 0
INVALID_REQUEST: Final = errors.InvalidRequestError.code
PRODUCER_FENCED: Final = errors.ProducerFencedError.code
INVALID_PRODUCER_EPOCH: Final = errors.InvalidProducerEpochError.code
INVALID_TXN_STATE: Final = errors.InvalidTxnStateError.code
INVALID_PRODUCER_ID_MAPPING: Final = errors.InvalidProducerIdMappingError.code
INVALID_TRANSACTION_TIMEOUT: Final = errors.InvalidTransactionTimeoutError.code
CONCURRENT_TRANSACTIONS: Final = errors.ConcurrentTransactionsError.code

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
MAX_PRODUCER_EPOCH: Final = 32767  # Short.MaxValue

# Kafka's defaults (TransactionStateManager / KafkaConfig).
DEFAULT_MAX_TIMEOUT_MS: Final = 900_000
DEFAULT_ID_EXPIRATION_MS: Final = 604_800_000
DEFAULT_ABORT_INTERVAL_MS: Final = 10_000

TopicPartition = tuple[str, int]


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


S = TxnState
VALID_PREVIOUS: Final[dict[TxnState, frozenset[TxnState]]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
IDLE: Final = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
PREPARING: Final = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})


class IllegalTransitionError(AssertionError):
    """A transition the state table forbids: a bug in the coordinator, never a client's error."""


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka's ``TransactionMetadata.isEpochExhausted``: one epoch is kept for fencing."""
    return epoch >= MAX_PRODUCER_EPOCH - 1


@dataclass(frozen=True)
class TxnMetadata:
    """One transactional id's state (Kafka's TransactionMetadata; what the shell stores)."""

    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = frozenset()
    # Groups of AddOffsetsToTxn (Kafka adds the group's __consumer_offsets partition instead; the
    # offsets here live with the group coordinator, so the transaction names the group).
    groups: frozenset[str] = frozenset()
    txn_start_ms: int = -1
    last_update_ms: int = -1

    def transition(self, state: TxnState, now_ms: int, *, producer_id: int | None = None,
                   producer_epoch: int | None = None, last_producer_epoch: int | None = None,
                   timeout_ms: int | None = None, partitions: frozenset[TopicPartition] | None = None,
                   groups: frozenset[str] | None = None, txn_start_ms: int | None = None) -> TxnMetadata:
        """Kafka's ``prepareTransitionTo``: checked against the state table; the last producer id
        is always the one being replaced."""
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransitionError(f"{self.transactional_id}: {self.state.value} -> {state.value}")
        new = TxnMetadata(
            self.transactional_id,
            self.producer_id if producer_id is None else producer_id,
            self.producer_id,
            self.producer_epoch if producer_epoch is None else producer_epoch,
            self.last_producer_epoch if last_producer_epoch is None else last_producer_epoch,
            self.timeout_ms if timeout_ms is None else timeout_ms,
            state,
            self.partitions if partitions is None else partitions,
            self.groups if groups is None else groups,
            self.txn_start_ms if txn_start_ms is None else txn_start_ms,
            now_ms)
        if new.producer_id < 0 or not 0 <= new.producer_epoch <= MAX_PRODUCER_EPOCH:
            raise IllegalTransitionError(f"{self.transactional_id}: producer {new.producer_id} "
                                         f"epoch {new.producer_epoch}")
        return new


class Kind(enum.Enum):
    """Why a transit is written: decides what follows it (``transit_done``)."""
    INIT = "init"                  # InitProducerId: answer the producer id and epoch
    ADD = "add"                    # AddPartitionsToTxn / AddOffsetsToTxn: answer NONE
    END = "end"                    # EndTxn: answer NONE, then markers
    FENCE = "fence"                # InitProducerId on Ongoing: answer CONCURRENT_TRANSACTIONS, then markers
    TIMEOUT = "timeout"            # the coordinator aborts an expired transaction: markers
    COMPLETE = "complete"          # markers written: nothing to say
    DEAD = "dead"                  # transactional id expired: forget it


@dataclass(frozen=True)
class Answer:
    error: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True)
class Transit:
    """Make ``after`` durable, then call ``transit_done`` with this transit."""
    transactional_id: str
    kind: Kind
    after: TxnMetadata


@dataclass(frozen=True)
class MarkerJob:
    """WriteTxnMarkers to send for a prepared transaction: to each partition's leader, and the
    outcome to each group's pending transactional offsets."""
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]
    groups: frozenset[str]


@dataclass(frozen=True)
class Outcome:
    """What follows a transit: an answer for the request that caused it (None: no request waits),
    and for a prepared transaction the markers to send and the completion to write after them."""
    answer: Answer | None = None
    markers: MarkerJob | None = None
    complete: Transit | None = None


@dataclass(frozen=True)
class TxnLimits:
    max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS      # transaction.max.timeout.ms
    id_expiration_ms: int = DEFAULT_ID_EXPIRATION_MS  # transactional.id.expiration.ms


@dataclass
class _Entry:
    metadata: TxnMetadata
    pending: Transit | None = None


def _markers(meta: TxnMetadata) -> MarkerJob:
    return MarkerJob(meta.transactional_id, meta.producer_id, meta.producer_epoch,
                     meta.state is S.PREPARE_COMMIT, meta.partitions, meta.groups)


class TransactionStateMachine:
    """Every loaded transactional id's metadata and pending transit. See the module docstring."""

    def __init__(self, limits: TxnLimits | None = None) -> None:
        self.limits = limits or TxnLimits()
        self._entries: dict[str, _Entry] = {}

    # ------------------------------------------------------------ loading

    def is_loaded(self, transactional_id: str) -> bool:
        return transactional_id in self._entries

    def get(self, transactional_id: str) -> TxnMetadata | None:
        entry = self._entries.get(transactional_id)
        return None if entry is None else entry.metadata

    def pending(self, transactional_id: str) -> Transit | None:
        entry = self._entries.get(transactional_id)
        return None if entry is None else entry.pending

    def transactional_ids(self) -> list[str]:
        return sorted(self._entries)

    def load(self, metadata: TxnMetadata, now_ms: int) -> Outcome:
        """Install what storage holds (a coordinator taking the id over). A prepared transaction
        is completed by the new coordinator: its markers are sent again, then Complete* written."""
        if metadata.state in PREPARING:
            complete = self._complete_transit(metadata, now_ms)
            self._entries[metadata.transactional_id] = _Entry(metadata, complete)
            return Outcome(markers=_markers(metadata), complete=complete)
        self._entries[metadata.transactional_id] = _Entry(metadata)
        return Outcome()

    def unload(self, transactional_id: str) -> None:
        self._entries.pop(transactional_id, None)

    def unload_all(self) -> None:
        self._entries.clear()

    # ------------------------------------------------------------ requests

    def validate_timeout(self, timeout_ms: int) -> bool:
        return 0 < timeout_ms <= self.limits.max_timeout_ms

    def init_producer_id(self, transactional_id: str, timeout_ms: int, now_ms: int,
                         new_producer_id: Callable[[], int],
                         expected: tuple[int, int] | None = None) -> Answer | Transit:
        """InitProducerId with a transactional id (Kafka's ``handleInitProducerId``).
        ``new_producer_id`` is called only when a fresh id is needed (a new transactional id, or
        an exhausted epoch); ``expected`` is the client's current (producer id, epoch), KIP-360."""
        if not transactional_id:
            return Answer(INVALID_REQUEST)
        if not self.validate_timeout(timeout_ms):
            return Answer(INVALID_TRANSACTION_TIMEOUT)
        entry = self._entries.get(transactional_id)
        if entry is None:
            # Not durable until the transit below is: a failed write leaves an epoch -1 entry whose
            # next InitProducerId bumps it to 0 with the same producer id (as Kafka's cache).
            entry = self._entries[transactional_id] = _Entry(TxnMetadata(
                transactional_id, new_producer_id(), NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_PRODUCER_EPOCH,
                timeout_ms, S.EMPTY, last_update_ms=now_ms))
        meta = entry.metadata
        if entry.pending is not None:
            return Answer(CONCURRENT_TRANSACTIONS)
        if expected is not None and not self._valid_expected(meta, expected):
            return Answer(PRODUCER_FENCED)
        if meta.state in PREPARING:
            return Answer(CONCURRENT_TRANSACTIONS)
        if meta.state is S.ONGOING:
            return self._fence(entry, Kind.FENCE, now_ms)
        if meta.state not in IDLE:
            raise IllegalTransitionError(f"{transactional_id}: InitProducerId in {meta.state.value}")
        if is_epoch_exhausted(meta.producer_epoch) and (expected is None or expected[1] == meta.producer_epoch):
            # prepareProducerIdRotation: a fresh producer id at epoch 0.
            after = meta.transition(S.EMPTY, now_ms, producer_id=new_producer_id(), producer_epoch=0,
                                    last_producer_epoch=meta.producer_epoch if expected is not None
                                    else NO_PRODUCER_EPOCH, timeout_ms=timeout_ms, partitions=frozenset(),
                                    groups=frozenset(), txn_start_ms=-1)
            return self._begin(entry, Kind.INIT, after)
        if is_epoch_exhausted(meta.producer_epoch):
            return Answer(PRODUCER_FENCED)  # an expected epoch that is not the exhausted one
        # prepareIncrementProducerEpoch
        bumped = meta.producer_epoch + 1
        if expected is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif meta.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == meta.producer_epoch:
            epoch, last = bumped, meta.producer_epoch
        elif expected[1] == meta.last_producer_epoch:
            epoch, last = meta.producer_epoch, meta.last_producer_epoch  # a retry of a successful bump
        else:
            return Answer(PRODUCER_FENCED)
        after = meta.transition(S.EMPTY, now_ms, producer_epoch=epoch, last_producer_epoch=last,
                                timeout_ms=timeout_ms, partitions=frozenset(), groups=frozenset(), txn_start_ms=-1)
        return self._begin(entry, Kind.INIT, after)

    @staticmethod
    def _valid_expected(meta: TxnMetadata, expected: tuple[int, int]) -> bool:
        """Kafka's ``isValidProducerId``: a just-created id, the current producer id, or the last
        one with an exhausted epoch (a retry after a rotation whose answer was lost)."""
        pid, epoch = expected
        return (meta.producer_epoch == NO_PRODUCER_EPOCH or pid == meta.producer_id
                or (pid == meta.last_producer_id and is_epoch_exhausted(epoch)))

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[TopicPartition], now_ms: int,
                       groups: Iterable[str] = ()) -> Answer | Transit:
        """AddPartitionsToTxn (and AddOffsetsToTxn: ``groups``), Kafka's ``handleAddPartitionsToTransaction``."""
        if not transactional_id:
            return Answer(INVALID_REQUEST)
        entry = self._entries.get(transactional_id)
        if entry is None or entry.metadata.producer_id != producer_id:
            return Answer(INVALID_PRODUCER_ID_MAPPING)
        meta = entry.metadata
        if meta.producer_epoch != producer_epoch:
            return Answer(PRODUCER_FENCED)
        if entry.pending is not None or meta.state in PREPARING:
            return Answer(CONCURRENT_TRANSACTIONS)
        added, added_groups = frozenset(partitions), frozenset(groups)
        if meta.state is S.ONGOING and added <= meta.partitions and added_groups <= meta.groups:
            return Answer(NONE)
        if meta.state not in VALID_PREVIOUS[S.ONGOING]:
            raise IllegalTransitionError(f"{transactional_id}: AddPartitions in {meta.state.value}")
        start = meta.txn_start_ms if meta.state is S.ONGOING else now_ms
        after = meta.transition(S.ONGOING, now_ms, partitions=meta.partitions | added,
                                groups=meta.groups | added_groups, txn_start_ms=start)
        return self._begin(entry, Kind.ADD, after)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """AddPartitionsToTxn with verify_only (KIP-890 part 1, Kafka 3.6's
        ``handleVerifyPartitionsInTransaction``): read-only, from the installed metadata. NONE for
        each partition in the Ongoing transaction of exactly this producer id and epoch, else
        INVALID_TXN_STATE; the whole set: INVALID_PRODUCER_ID_MAPPING (unknown id, another producer
        id), PRODUCER_FENCED (another epoch), CONCURRENT_TRANSACTIONS (PrepareCommit/PrepareAbort:
        the markers are on their way). A pending transit is not looked at, as in Kafka: the
        partition leader's verification guard is the final check (a marker written after this
        answer voids it)."""
        parts = list(dict.fromkeys(partitions))
        entry = self._entries.get(transactional_id) if transactional_id else None
        if not transactional_id:
            code = INVALID_REQUEST
        elif entry is None or entry.metadata.producer_id != producer_id:
            code = INVALID_PRODUCER_ID_MAPPING
        elif entry.metadata.producer_epoch != producer_epoch:
            code = PRODUCER_FENCED
        elif entry.metadata.state in PREPARING:
            code = CONCURRENT_TRANSACTIONS
        else:
            meta = entry.metadata
            ongoing = meta.state is S.ONGOING
            return {tp: NONE if ongoing and tp in meta.partitions else INVALID_TXN_STATE for tp in parts}
        return dict.fromkeys(parts, code)

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                now_ms: int) -> Answer | Transit:
        """EndTxn from the client (Kafka's ``endTransaction`` with ``isFromClient``)."""
        if not transactional_id:
            return Answer(INVALID_REQUEST)
        entry = self._entries.get(transactional_id)
        if entry is None or entry.metadata.producer_id != producer_id:
            return Answer(INVALID_PRODUCER_ID_MAPPING)
        meta = entry.metadata
        if meta.producer_epoch != producer_epoch:
            return Answer(PRODUCER_FENCED)
        if entry.pending is not None:
            return Answer(CONCURRENT_TRANSACTIONS)
        state = meta.state
        if state is S.ONGOING:
            after = meta.transition(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, now_ms)
            return self._begin(entry, Kind.END, after)
        if state is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT):
            return Answer(NONE)  # a retry of an EndTxn that completed (its answer was lost)
        if state is (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
            return Answer(CONCURRENT_TRANSACTIONS)
        return Answer(INVALID_TXN_STATE)  # Empty, or the other result than the one decided

    # ------------------------------------------------------------ the coordinator's own decisions

    def timed_out(self, now_ms: int) -> list[Transit]:
        """Abort (with an epoch bump) every Ongoing transaction past its timeout (Kafka's
        ``abortTimedOutTransactions``); each returned transit is pending."""
        out = []
        for entry in self._entries.values():
            meta = entry.metadata
            if (meta.state is S.ONGOING and entry.pending is None
                    and meta.txn_start_ms + meta.timeout_ms < now_ms):
                out.append(self._fence(entry, Kind.TIMEOUT, now_ms))
        return out

    def next_timeout_ms(self) -> int | None:
        """When the earliest Ongoing transaction times out (None: none is Ongoing)."""
        deadlines = [e.metadata.txn_start_ms + e.metadata.timeout_ms + 1 for e in self._entries.values()
                     if e.metadata.state is S.ONGOING and e.pending is None]
        return min(deadlines, default=None)

    def expired(self, now_ms: int) -> list[Transit]:
        """Idle transactional ids unused for transactional.id.expiration.ms -> Dead (Kafka's
        ``removeExpiredTransactionalIds``); each returned transit is pending. An id whose first
        InitProducerId was never written (epoch -1: its write failed) has nothing on the log to
        tombstone: it is forgotten here, with no transit."""
        out = []
        never_written = []
        for tid, entry in self._entries.items():
            meta = entry.metadata
            if (meta.state in IDLE and entry.pending is None
                    and meta.last_update_ms + self.limits.id_expiration_ms <= now_ms):
                if meta.producer_epoch == NO_PRODUCER_EPOCH:
                    never_written.append(tid)
                    continue
                out.append(self._begin(entry, Kind.DEAD, meta.transition(
                    S.DEAD, now_ms, partitions=frozenset(), groups=frozenset())))
        for tid in never_written:
            del self._entries[tid]
        return out

    def _fence(self, entry: _Entry, kind: Kind, now_ms: int) -> Transit:
        """Kafka's prepareFenceProducerEpoch + endTransaction(ABORT): Ongoing -> PrepareAbort under a
        bumped epoch that no client is ever given (last epoch -1)."""
        meta = entry.metadata
        fenced = replace(meta, state=S.PREPARE_EPOCH_FENCE)
        if meta.producer_epoch >= MAX_PRODUCER_EPOCH:
            raise IllegalTransitionError(f"{meta.transactional_id}: cannot fence epoch {meta.producer_epoch}")
        after = fenced.transition(S.PREPARE_ABORT, now_ms, producer_epoch=meta.producer_epoch + 1,
                                  last_producer_epoch=NO_PRODUCER_EPOCH)
        return self._begin(entry, kind, after)

    @staticmethod
    def _complete_transit(meta: TxnMetadata, now_ms: int) -> Transit:
        state = S.COMPLETE_COMMIT if meta.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        return Transit(meta.transactional_id, Kind.COMPLETE,
                       meta.transition(state, now_ms, partitions=frozenset(), groups=frozenset()))

    @staticmethod
    def _begin(entry: _Entry, kind: Kind, after: TxnMetadata) -> Transit:
        transit = Transit(after.transactional_id, kind, after)
        entry.pending = transit
        return transit

    # ------------------------------------------------------------ the write's fate

    def transit_done(self, transit: Transit, error: int, now_ms: int) -> Outcome:
        """The shell wrote ``transit`` (``error`` NONE) or could not (its error for the client:
        NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE...). A transit that is no longer the pending one
        (the id was unloaded or reloaded meanwhile) changes nothing."""
        entry = self._entries.get(transit.transactional_id)
        if entry is None or entry.pending is not transit:
            return Outcome(answer=Answer(error if error != NONE else errors.NotCoordinatorError.code))
        entry.pending = None
        if error != NONE:
            if transit.kind is Kind.COMPLETE:
                entry.pending = transit  # the markers are written: completing is retried, not dropped
                return Outcome(complete=transit)
            return Outcome(answer=Answer(error))
        after = transit.after
        if transit.kind is Kind.DEAD:
            del self._entries[transit.transactional_id]
            return Outcome()
        entry.metadata = after
        if transit.kind is Kind.INIT:
            return Outcome(answer=Answer(NONE, after.producer_id, after.producer_epoch))
        if transit.kind in (Kind.ADD, Kind.COMPLETE):
            return Outcome(answer=Answer(NONE))
        # END, FENCE, TIMEOUT: prepared; markers next, then the completion (pending meanwhile).
        complete = self._complete_transit(after, now_ms)
        entry.pending = complete
        answer = (Answer(NONE) if transit.kind is Kind.END
                  else Answer(CONCURRENT_TRANSACTIONS) if transit.kind is Kind.FENCE else None)
        return Outcome(answer=answer, markers=_markers(after), complete=complete)
