"""Idempotent producer state of one partition (Kafka's ProducerStateManager, KIP-98), pure.

Theory of operation: a batch from an idempotent producer carries
``producer_id``, ``producer_epoch`` and ``base_sequence``. For each producer
the leader remembers its epoch and the metadata of its last five batches
(first/last sequence, first/last offset). A new batch must continue the last
sequence; a batch equal to one of the five is a retry whose answer is the
original offset (no second copy is written); anything else is out of order.

The state is derived from the log alone - every batch header holds what it
needs - so followers update it as they copy batches, a new leader has it
already (dedup survives failover), and after a restart or truncation it is
rebuilt by reading batch headers (never record bodies).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Protocol

from proto.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError
from proto.record_batch import BatchHeader

NUM_BATCHES_TO_RETAIN: Final = 5
INT32_MAX: Final = 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp: int = -1  # the max timestamp of its last batch (DescribeProducers)

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


def _next_seq(seq: int) -> int:
    return 0 if seq == INT32_MAX else seq + 1


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

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
        if header.producer_id < 0 or header.base_sequence < 0:
            return
        entry = self.producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = ProducerEntry(header.producer_epoch)
            self.producers[header.producer_id] = entry
        elif header.producer_epoch < entry.epoch:
            return
        entry.batches.append(BatchMetadata(header.base_sequence, header.last_sequence, base_offset,
                                           base_offset + header.last_offset_delta))
        entry.last_timestamp = header.max_timestamp if timestamp is None else timestamp

    def rebuild(self, headers: Iterable[BatchHeader]) -> None:
        """From the batch headers of the whole log, in offset order."""
        self.producers.clear()
        for h in headers:
            self.update(h, h.base_offset)
