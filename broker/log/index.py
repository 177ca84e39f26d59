"""Sparse offset and time indexes of one segment (Kafka's OffsetIndex / TimeIndex).

Theory of operation: the offset index maps a relative offset (offset minus
the segment's base offset) to the byte position of the batch holding it; an
entry is added at most every ``index.interval.bytes`` of appended data, so a
lookup is a binary search followed by a short scan of batch headers. The time
index maps a timestamp to the first offset at or after which records may
carry it; entries are added only when the segment's max timestamp grows.

Entries live in memory (``array``) and are appended to the ``.index`` /
``.timeindex`` file on ``flush()``; the segment data is the truth and an
index that fails its sanity check after a crash is rebuilt from it.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path
from typing import Final

from proto.errors import KafkaStorageError

OFFSET_ENTRY: Final = struct.Struct(">ii")  # relative offset, position
TIME_ENTRY: Final = struct.Struct(">qi")  # timestamp, relative offset


class CorruptIndexError(KafkaStorageError):
    """An index file does not agree with itself; rebuild it from the segment."""


class OffsetIndex:
    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_entries
        self._rel: array[int] = array("i")
        self._pos: array[int] = array("i")
        self._persisted = 0

    def __len__(self) -> int:
        return len(self._rel)

    @property
    def is_full(self) -> bool:
        return len(self._rel) >= self.max_entries

    @property
    def last_offset(self) -> int:
        return self.base_offset + self._rel[-1] if self._rel else self.base_offset

    def load(self) -> None:
        """Read the file and check it is sorted; raises CorruptIndexError otherwise."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            raise CorruptIndexError(f"{self.path} is missing") from None
        if len(data) % OFFSET_ENTRY.size:
            raise CorruptIndexError(f"{self.path} has a partial entry")
        rel: array[int] = array("i")
        pos: array[int] = array("i")
        for r, p in OFFSET_ENTRY.iter_unpack(data):
            if r < 0 or p < 0 or (rel and (r <= rel[-1] or p <= pos[-1])):
                raise CorruptIndexError(f"{self.path} is not sorted")
            rel.append(r)
            pos.append(p)
        self._rel, self._pos, self._persisted = rel, pos, len(rel)

    def sanity_check(self, segment_size: int) -> None:
        if self._pos and self._pos[-1] >= segment_size:
            raise CorruptIndexError(f"{self.path} points past the end of its segment")

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if self._rel and rel <= self._rel[-1]:
            return
        self._rel.append(rel)
        self._pos.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry with offset <= ``offset``; (base, 0) if none."""
        i = bisect.bisect_right(self._rel, offset - self.base_offset)
        if i == 0:
            return self.base_offset, 0
        return self.base_offset + self._rel[i - 1], self._pos[i - 1]

    def floor_position(self, position: int) -> int:
        """The largest indexed batch position <= ``position`` (0 if none): a batch boundary."""
        i = bisect.bisect_right(self._pos, position)
        return self._pos[i - 1] if i else 0

    def truncate_to(self, offset: int) -> None:
        """Remove entries for offsets >= ``offset``."""
        i = bisect.bisect_left(self._rel, offset - self.base_offset)
        self._truncate_entries(i)

    def truncate_to_position(self, position: int) -> None:
        """Remove entries pointing at ``position`` or beyond."""
        self._truncate_entries(bisect.bisect_left(self._pos, position))

    def _truncate_entries(self, n: int) -> None:
        if n >= len(self._rel):
            return
        del self._rel[n:]
        del self._pos[n:]
        if self._persisted > n:
            self._persisted = n
            if self.path.exists():
                os.truncate(self.path, n * OFFSET_ENTRY.size)

    def reset(self) -> None:
        self._truncate_entries(0)

    def flush(self, durable: bool = True) -> None:
        # Nothing new: no write, no fsync, not even a stat. An index never written has no entries,
        # so its segment is empty and loading it without a file costs nothing (a clean shutdown of
        # 10,000 idle partitions created and fsynced 20,000 empty index files).
        if self._persisted == len(self._rel):
            return
        buf = b"".join(OFFSET_ENTRY.pack(self._rel[i], self._pos[i])
                       for i in range(self._persisted, len(self._rel)))
        with open(self.path, "r+b" if self.path.exists() else "wb") as f:
            f.seek(self._persisted * OFFSET_ENTRY.size)
            f.write(buf)
            f.truncate()
            f.flush()
            if durable:  # else the caller syncs the file system (a clean shutdown)
                os.fsync(f.fileno())
        self._persisted = len(self._rel)


class TimeIndex:
    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_entries
        self._ts: array[int] = array("q")
        self._rel: array[int] = array("i")
        self._persisted = 0

    def __len__(self) -> int:
        return len(self._ts)

    @property
    def is_full(self) -> bool:
        return len(self._ts) >= self.max_entries

    @property
    def last_timestamp(self) -> int:
        return self._ts[-1] if self._ts else -1

    def load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            raise CorruptIndexError(f"{self.path} is missing") from None
        if len(data) % TIME_ENTRY.size:
            raise CorruptIndexError(f"{self.path} has a partial entry")
        ts: array[int] = array("q")
        rel: array[int] = array("i")
        for t, r in TIME_ENTRY.iter_unpack(data):
            if r < 0 or (ts and (t <= ts[-1] or r < rel[-1])):
                raise CorruptIndexError(f"{self.path} is not sorted")
            ts.append(t)
            rel.append(r)
        self._ts, self._rel, self._persisted = ts, rel, len(ts)

    def sanity_check(self, next_offset: int) -> None:
        if self._rel and self.base_offset + self._rel[-1] >= max(next_offset, self.base_offset + 1):
            raise CorruptIndexError(f"{self.path} points past the end of its segment")

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add (timestamp, offset) if the timestamp is larger than the last entry's."""
        if self._ts and timestamp <= self._ts[-1]:
            return
        self._ts.append(timestamp)
        self._rel.append(offset - self.base_offset)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry with timestamp <= ``timestamp``;
        (-1, base offset) if none."""
        i = bisect.bisect_right(self._ts, timestamp)
        if i == 0:
            return -1, self.base_offset
        return self._ts[i - 1], self.base_offset + self._rel[i - 1]

    def truncate_to(self, offset: int) -> None:
        rel = offset - self.base_offset
        n = len(self._rel)
        while n and self._rel[n - 1] >= rel:
            n -= 1
        if n >= len(self._ts):
            return
        del self._ts[n:]
        del self._rel[n:]
        if self._persisted > n:
            self._persisted = n
            if self.path.exists():
                os.truncate(self.path, n * TIME_ENTRY.size)

    def reset(self) -> None:
        self.truncate_to(self.base_offset)

    def flush(self, durable: bool = True) -> None:
        if self._persisted == len(self._ts):  # nothing new (see OffsetIndex.flush)
            return
        buf = b"".join(TIME_ENTRY.pack(self._ts[i], self._rel[i]) for i in range(self._persisted, len(self._ts)))
        with open(self.path, "r+b" if self.path.exists() else "wb") as f:
            f.seek(self._persisted * TIME_ENTRY.size)
            f.write(buf)
            f.truncate()
            f.flush()
            if durable:  # else the caller syncs the file system (a clean shutdown)
                os.fsync(f.fileno())
        self._persisted = len(self._ts)
