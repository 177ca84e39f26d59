"""The leader epoch cache (SPEC S8.1-S8.3, Kafka's LeaderEpochFileCache, KIP-101).

Theory of operation: a replica remembers, for every leader epoch that wrote
to its log, the offset of the first record that leader wrote - ``(epoch,
start_offset)`` pairs, both strictly increasing. A new leader appends
``(its epoch, its LEO)`` before its first write (S8.2); a follower learns the
pairs from the ``partition_leader_epoch`` stamped into the batches it copies.

``end_offset_for(epoch, leo)`` answers OffsetsForLeaderEpoch (S8.3): the LEO
for the current epoch, else the start offset of the first epoch above the
one asked - the point where a follower's log may start to diverge from the
leader's. The follower truncates there, never to its high watermark.

This class is pure: it returns whether (``assign_changed_from``: from which
offset) it changed, and ``Log`` decides when the checkpoint file is written:
at once for truncations, at the next flush for appends (KAFKA-15046; see
``broker.log.log``).
"""

from __future__ import annotations

import bisect
from typing import Final

UNDEFINED_EPOCH: Final = -1
UNDEFINED_EPOCH_OFFSET: Final = -1


class LeaderEpochCache:
    def __init__(self, entries: list[tuple[int, int]] | None = None) -> None:
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        for epoch, offset in entries or []:
            self.assign(epoch, offset)

    def pairs(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._offsets, strict=True))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` started at ``start_offset``; True when the cache changed.

        Entries that would break monotonicity (an epoch >= the new one, or a
        start offset >= the new one) are removed first, as Kafka does: they
        belong to a log suffix that has since been replaced.
        """
        return self.assign_changed_from(epoch, start_offset) is not None

    def assign_changed_from(self, epoch: int, start_offset: int) -> int | None:
        """``assign``, returning the lowest start offset of an entry it added or removed (None:
        unchanged). Entries below it are as before, so a copy of them (the checkpoint file)
        is still right about them."""
        if epoch < 0 or start_offset < 0:
            return None
        if self._epochs and self._epochs[-1] == epoch and self._offsets[-1] <= start_offset:
            return None
        changed_from = start_offset
        while self._epochs and (self._epochs[-1] >= epoch or self._offsets[-1] >= start_offset):
            self._epochs.pop()
            changed_from = min(changed_from, self._offsets.pop())
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        return changed_from

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch, per KIP-101/KIP-279."""
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            # Larger than any epoch we know: nothing to say.
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            # Smaller than any epoch we know.
            return requested_epoch, self._offsets[0]
        # The largest epoch <= requested, ending where the next one starts.
        return self._epochs[higher - 1], self._offsets[higher]

    def truncate_from_end(self, end_offset: int) -> bool:
        """The log was truncated to ``end_offset``: forget epochs starting at or after it."""
        i = bisect.bisect_left(self._offsets, end_offset)
        if i == len(self._offsets):
            return False
        del self._epochs[i:]
        del self._offsets[i:]
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log start moved to ``start_offset``: drop epochs wholly before it and
        move the epoch that spans it to start there."""
        i = bisect.bisect_right(self._offsets, start_offset)
        if i == 0:
            return False
        last_epoch = self._epochs[i - 1]
        if i == 1 and self._offsets[0] == start_offset:
            return False
        del self._epochs[:i]
        del self._offsets[:i]
        self._epochs.insert(0, last_epoch)
        self._offsets.insert(0, start_offset)
        return True

    def clear(self) -> bool:
        changed = bool(self._epochs)
        self._epochs.clear()
        self._offsets.clear()
        return changed
