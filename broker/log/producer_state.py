"""Idempotent and transactional producer state of one partition (Kafka's ProducerStateManager, KIP-98), pure.

Theory of operation: a batch from an idempotent producer carries
``producer_id``, ``producer_epoch`` and ``base_sequence``. For each producer
the leader remembers its epoch and the metadata of its last five batches
(first/last sequence, first/last offset). A new batch must continue the last
sequence; a batch equal to one of the five is a retry whose answer is the
original offset (no second copy is written); anything else is out of order.

The state is derived from the log alone - every batch header holds what it
needs - so followers update it as they copy batches, a new leader has it
already (dedup survives failover), and after a restart or truncation it is
rebuilt by reading batch headers (never record bodies, but the one record of
each control batch).

Transactions: a transactional data batch (attribute bit 4) opens its
producer's transaction if none is open: the batch's first offset becomes the
transaction's first offset and the producer joins ``ongoing``. A COMMIT or
ABORT marker (a control batch, written only through WriteTxnMarkers) closes
it and yields a ``CompletedTxn`` - none for a marker closing nothing (Kafka
writes no index entry for an empty transaction). Markers are fenced like
Kafka 2.8's ``ProducerAppendInfo``: an older producer epoch is
INVALID_PRODUCER_EPOCH, an older coordinator epoch than the producer's last
marker TRANSACTION_COORDINATOR_FENCED (leader only; followers and rebuilds
take what the leader wrote).

Verification (KIP-890 part 1, Kafka 3.6's ``VerificationGuard``): with
transaction.partition.verification.enable, the leader appends a transactional
batch of a producer with no open transaction here only after the
transaction coordinator confirmed that this partition is in that producer's
ongoing transaction - else a client could open a transaction the coordinator
never heard of, which no marker would ever close (the LSO stuck for good).
``maybe_start_verification`` says whether a batch needs it (None: the
producer's transaction is open here already - the open transaction is the
cache of an earlier verification) and hands out the producer's guard, a
unique token; the append presents it (``check_verified``). A marker, or the
transaction opening, retires the guard, so a verification answered before
an abort's marker was written cannot open a transaction after it (the ABA
race: verified, aborted, a new transaction begun without this partition,
then the stale answer). Guards are kept until used or ``ttl_ms`` old, at most
``MAX_VERIFICATIONS``; they are leader-only and never rebuilt.

The last stable offset (Kafka's ``firstUnstableOffset``): the smallest first
offset among the open transactions and the completed ones whose marker the
high watermark has not passed yet (a reader must not see a transaction's
records before its outcome is committed), capped by the high watermark. An
aborted transaction's index entry carries the LSO at its marker (the first
offset of the oldest other open transaction, else the marker's offset + 1),
which bounds the search of the aborted-transaction index (``txn_index``).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Protocol

from proto.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    NotEnoughReplicasError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)
from proto.record_batch import CONTROL_MASK, TRANSACTIONAL_MASK, BatchHeader, TxnMarker

NUM_BATCHES_TO_RETAIN: Final = 5
INT32_MAX: Final = 0x7FFFFFFF
# Producers of one partition awaiting the coordinator's verification at once (SPEC S13.4): beyond it,
# a retriable refusal (the producer retries; by then verifications have completed or expired).
MAX_VERIFICATIONS: Final = 10_000


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker closed: offsets ``first_offset`` (its first batch) to ``last_offset``
    (the marker); ``last_stable_offset``: the LSO right after it (what its index entry records)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool
    last_stable_offset: int


@dataclass(frozen=True, eq=False, slots=True)
class VerificationGuard:
    """Kafka's VerificationGuard: the token of one producer's verification on one partition,
    compared by identity (``eq=False``) - an equal-looking guard from before a marker is not it."""

    producer_id: int
    created_ms: int


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp: int = -1  # the max timestamp of its last batch (DescribeProducers)
    # The first offset of its open transaction (-1: none), and the coordinator epoch of its last marker.
    current_txn_first_offset: int = -1
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


class ProducerBatch(Protocol):
    """What the state needs of a batch: a header read from disk or what validation returned."""

    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def base_sequence(self) -> int: ...
    @property
    def last_sequence(self) -> int: ...
    @property
    def last_offset_delta(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def attributes(self) -> int: ...


def _next_seq(seq: int) -> int:
    return 0 if seq == INT32_MAX else seq + 1


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        # Open transactions: producer id -> first offset, and a min-heap of (first offset, producer id)
        # over them with lazy deletion (an entry no longer in ``ongoing`` is skipped when it surfaces).
        self.ongoing: dict[int, int] = {}
        self._ongoing_heap: list[tuple[int, int]] = []
        # Completed transactions whose marker the high watermark may not have passed, in marker order.
        self._unreplicated: deque[CompletedTxn] = deque()
        # Producer id -> its guard while a verification is pending (leader only); in creation order.
        self._verifications: dict[int, VerificationGuard] = {}

    def check(self, header: ProducerBatch, log_was_trimmed: bool = False) -> BatchMetadata | None:
        """Validate a leader append of ``header`` (offsets not yet assigned).

        Returns the original batch if this one is a retry of it (a duplicate);
        raises OutOfOrderSequenceNumberError / InvalidProducerEpochError; None
        means append it. A producer this log has never seen must start at
        sequence 0 - unless retention trimmed the log (``log_was_trimmed``) and
        may have taken its earlier batches with it.
        """
        if header.producer_id < 0:
            return None
        entry = self.producers.get(header.producer_id)
        if entry is None:
            if header.base_sequence != 0 and not log_was_trimmed:
                # Typically a later batch overtook the first one in flight: the producer retries in order.
                raise OutOfOrderSequenceNumberError(
                    f"producer {header.producer_id} is new here: its first batch must have sequence 0, "
                    f"got {header.base_sequence}")
            return None
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {header.producer_id} epoch {header.producer_epoch} is older than {entry.epoch}")
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise OutOfOrderSequenceNumberError(
                    f"producer {header.producer_id}: a new epoch must start at sequence 0, "
                    f"got {header.base_sequence}")
            return None
        dup = entry.find_duplicate(header.base_sequence, header.last_sequence)
        if dup is not None:
            return dup
        expected = _next_seq(entry.last_seq)
        if header.base_sequence != expected:
            raise OutOfOrderSequenceNumberError(
                f"producer {header.producer_id}: expected sequence {expected}, got {header.base_sequence}")
        return None

    def update(self, header: ProducerBatch, base_offset: int, timestamp: int | None = None) -> None:
        """Record an appended batch (leader or follower) whose first offset is ``base_offset``;
        ``timestamp``: its max timestamp as stored, where the log rewrote it (LogAppendTime)."""
        if header.producer_id < 0 or header.base_sequence < 0 or header.attributes & CONTROL_MASK:
            return
        pid = header.producer_id
        entry = self.producers.get(pid)
        if entry is None or header.producer_epoch > entry.epoch:
            # A new epoch forgets the sequences, not an open transaction (its marker closes it).
            old = entry
            entry = ProducerEntry(header.producer_epoch)
            if old is not None:
                entry.current_txn_first_offset = old.current_txn_first_offset
                entry.coordinator_epoch = old.coordinator_epoch
            self.producers[pid] = entry
        elif header.producer_epoch < entry.epoch:
            return
        entry.batches.append(BatchMetadata(header.base_sequence, header.last_sequence, base_offset,
                                           base_offset + header.last_offset_delta))
        entry.last_timestamp = header.max_timestamp if timestamp is None else timestamp
        if header.attributes & TRANSACTIONAL_MASK and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = base_offset
            self.ongoing[pid] = base_offset
            heapq.heappush(self._ongoing_heap, (base_offset, pid))
            self._verifications.pop(pid, None)  # the open transaction is the verification's cache now

    # ------------------------------------------------------------ verification (KIP-890 part 1)

    def maybe_start_verification(self, producer_id: int, now_ms: int, ttl_ms: int) -> VerificationGuard | None:
        """Before a leader append of ``producer_id``'s transactional batch: None when its transaction
        is open here (nothing to verify), else its guard - the pending one, shared by concurrent
        requests, or a new one. NotEnoughReplicasError (retriable) when MAX_VERIFICATIONS are pending."""
        if producer_id in self.ongoing:
            return None
        pending = self._verifications
        while pending:  # creation order: the expired ones are at the front
            oldest = next(iter(pending.values()))
            if oldest.created_ms + ttl_ms > now_ms:
                break
            del pending[oldest.producer_id]
        guard = pending.get(producer_id)
        if guard is None:
            if len(pending) >= MAX_VERIFICATIONS:
                raise NotEnoughReplicasError(
                    f"{len(pending)} producers await the verification of their transactions here; retry")
            guard = pending[producer_id] = VerificationGuard(producer_id, now_ms)
        return guard

    def verification_guard(self, producer_id: int) -> VerificationGuard | None:
        return self._verifications.get(producer_id)

    def check_verified(self, header: ProducerBatch, guard: VerificationGuard | None) -> None:
        """A leader append with verification on: a transactional data batch of a producer with no
        transaction open here must present the producer's current guard (Kafka's
        ``batchMissingRequiredVerification``), else INVALID_TXN_STATE and nothing is written."""
        if not header.attributes & TRANSACTIONAL_MASK or header.attributes & CONTROL_MASK:
            return
        pid = header.producer_id
        if pid in self.ongoing:
            return
        if guard is None or guard.producer_id != pid or self._verifications.get(pid) is not guard:
            raise InvalidTxnStateError(
                f"producer {pid}: the transactional batch is not part of an ongoing transaction that the "
                f"transaction coordinator verified for this partition")

    # ------------------------------------------------------------ transactions

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Validate a marker the leader is about to write (WriteTxnMarkers; Kafka 2.8's
        ``checkProducerEpoch`` / ``checkCoordinatorEpoch`` for a coordinator append)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id}: marker epoch {producer_epoch} is older than {entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"producer {producer_id}: coordinator epoch {coordinator_epoch} is older than "
                f"{entry.coordinator_epoch}, the epoch of its last marker")

    def update_marker(self, producer_id: int, producer_epoch: int, marker: TxnMarker, offset: int,
                      timestamp: int) -> CompletedTxn | None:
        """Record a marker appended at ``offset`` (leader, follower or rebuild); the transaction it
        completed, None when its producer had none open."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(producer_epoch)
        elif producer_epoch > entry.epoch:
            entry.epoch = producer_epoch
            entry.batches.clear()
        completed: CompletedTxn | None = None
        first = entry.current_txn_first_offset
        if first >= 0:
            del self.ongoing[producer_id]
            completed = CompletedTxn(producer_id, first, offset, not marker.commit,
                                     self._first_ongoing_offset(offset + 1))
            self._unreplicated.append(completed)
            if len(self._ongoing_heap) > 2 * len(self.ongoing) + 64:  # bound the lazily deleted entries
                self._ongoing_heap = [(f, p) for p, f in self.ongoing.items()]
                heapq.heapify(self._ongoing_heap)
        entry.current_txn_first_offset = -1
        entry.coordinator_epoch = marker.coordinator_epoch
        self._verifications.pop(producer_id, None)  # a verification begun before this marker is void
        entry.last_timestamp = timestamp
        return completed

    def _first_ongoing_offset(self, default: int) -> int:
        heap = self._ongoing_heap
        while heap and self.ongoing.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else default

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset a read_committed reader may not pass (None: no transaction holds one
        back): the oldest open transaction's, or a completed one's whose marker is at or above the
        high watermark (Kafka's ``firstUnstableOffset``)."""
        self.prune_replicated(high_watermark)
        first = self._first_ongoing_offset(-1)
        for txn in self._unreplicated:
            if first < 0 or txn.first_offset < first:
                first = txn.first_offset
        return None if first < 0 else first

    def prune_replicated(self, high_watermark: int) -> None:
        """Forget the completed transactions whose marker is below ``high_watermark`` (every move of
        the HW, so a replica nobody reads from keeps none)."""
        unreplicated = self._unreplicated
        while unreplicated and unreplicated[0].last_offset < high_watermark:
            unreplicated.popleft()

    def last_stable_offset(self, high_watermark: int) -> int:
        """min(first unstable offset, high watermark) (KIP-98's LSO)."""
        first = self.first_unstable_offset(high_watermark)
        return high_watermark if first is None else min(first, high_watermark)

    def apply(self, header: BatchHeader, marker: TxnMarker | None) -> CompletedTxn | None:
        """One batch read back from the log (rebuild, follower): a data batch, or a control batch
        with its marker (None for a control record of another type)."""
        if header.attributes & CONTROL_MASK:
            if marker is None or header.producer_id < 0:
                return None
            return self.update_marker(header.producer_id, header.producer_epoch, marker, header.base_offset,
                                      header.max_timestamp)
        self.update(header, header.base_offset)
        return None

    def rebuild(self, headers: Iterable[BatchHeader | tuple[BatchHeader, TxnMarker | None]]) -> list[CompletedTxn]:
        """From the batches of the whole log, in offset order: headers, or (header, marker) for the
        control batches. Returns every transaction completed on the way, in marker order."""
        self.producers.clear()
        self.ongoing.clear()
        self._ongoing_heap.clear()
        self._unreplicated.clear()
        self._verifications.clear()
        completed: list[CompletedTxn] = []
        for item in headers:
            header, marker = item if isinstance(item, tuple) else (item, None)
            txn = self.apply(header, marker)
            if txn is not None:
                completed.append(txn)
        return completed
