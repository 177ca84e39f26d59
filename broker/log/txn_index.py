"""The aborted-transaction index of one segment (Kafka's TransactionIndex, ``<base>.txnindex``).

Theory of operation
-------------------
When an ABORT marker closes a transaction, the segment the marker is written
to records an ``AbortedTxn``: the producer id, the transaction's first offset
(its first batch, possibly in an earlier segment), its last offset (the
marker's) and the last stable offset right after the marker. Entries are
appended in marker order, so ``last_offset`` only grows within a segment and
across segments.

A read_committed fetch from ``fetch_offset`` returning records up to (not
including) ``upper_bound`` must list every aborted transaction overlapping
that range: ``last_offset >= fetch_offset`` and ``first_offset <
upper_bound`` (``collect``). A transaction overlapping the range has its
marker at or after ``fetch_offset``, so the search starts at the segment
holding ``fetch_offset`` and walks later segments until an entry whose
``last_stable_offset >= upper_bound`` proves no later marker can close a
transaction that began below ``upper_bound`` (Kafka's ``isComplete``).

On disk each entry is 34 bytes, Kafka's layout: version int16 (0), producer id
int64, first offset int64, last offset int64, last stable offset int64. The
file is appended to as markers are written and fsynced with its segment; after
a crash the entries of the recovered segments are rebuilt from the log (the
producer state replays the markers), and truncation drops the entries whose
marker it removed. A file that does not parse is rebuilt the same way.

The entries are held in memory too: a segment holds at most one per aborted
transaction whose marker it contains.
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

TXN_INDEX_SUFFIX: Final = ".txnindex"
VERSION: Final = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE: Final = _ENTRY.size  # 34


class CorruptTxnIndexError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


def decode_entries(data: bytes) -> list[AbortedTxn]:
    """The entries of a ``.txnindex`` file; CorruptTxnIndexError when it does not parse."""
    if len(data) % ENTRY_SIZE:
        raise CorruptTxnIndexError(f"{len(data)} bytes is not a whole number of {ENTRY_SIZE}-byte entries")
    out: list[AbortedTxn] = []
    last = -1
    for pos in range(0, len(data), ENTRY_SIZE):
        version, pid, first, last_offset, lso = _ENTRY.unpack_from(data, pos)
        if version != VERSION:
            raise CorruptTxnIndexError(f"entry at {pos} has version {version}")
        if pid < 0 or first < 0 or last_offset < first or last_offset < last:
            raise CorruptTxnIndexError(f"entry at {pos} is not a transaction after the last one")
        last = last_offset
        out.append(AbortedTxn(pid, first, last_offset, lso))
    return out


def collect(entries: Sequence[AbortedTxn], fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
    """The entries overlapping [fetch_offset, upper_bound), and whether the search is complete
    (no later segment can hold one: Kafka's ``TxnIndexSearchResult``). ``entries`` in marker order."""
    start = bisect.bisect_left(entries, fetch_offset, key=lambda e: e.last_offset)
    found: list[AbortedTxn] = []
    for e in entries[start:]:
        if e.first_offset < upper_bound:
            found.append(e)
        if e.last_stable_offset >= upper_bound:
            return found, True
    return found, False


def collect_from_segments(indexes: Iterable[Sequence[AbortedTxn]], fetch_offset: int,
                          upper_bound: int) -> list[AbortedTxn]:
    """``collect`` over the indexes of consecutive segments, the first holding ``fetch_offset``."""
    out: list[AbortedTxn] = []
    for entries in indexes:
        found, complete = collect(entries, fetch_offset, upper_bound)
        out.extend(found)
        if complete:
            break
    return out


class TransactionIndex:
    """A segment's ``.txnindex``: entries in memory, appended to the file as they come."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = []
        self._dirty = False

    def load(self) -> None:
        """Read the file (absent: no entries); CorruptTxnIndexError when it does not parse."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            self.entries = []
            return
        self.entries = decode_entries(data)

    def append(self, entry: AbortedTxn) -> None:
        if self.entries and entry.last_offset < self.entries[-1].last_offset:
            raise ValueError(f"aborted transaction ending at {entry.last_offset} is before the last entry")
        self.entries.append(entry)
        with open(self.path, "ab") as f:
            f.write(entry.encode())
        self._dirty = True

    def replace(self, entries: Sequence[AbortedTxn]) -> bool:
        """Make the index hold exactly ``entries`` (a rebuild); True when that changed anything."""
        if list(entries) == self.entries and (entries or not self.path.exists()):
            return False
        self.entries = list(entries)
        self._rewrite()
        return True

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset`` (their markers were cut off)."""
        keep = bisect.bisect_left(self.entries, offset, key=lambda e: e.last_offset)
        if keep < len(self.entries):
            del self.entries[keep:]
            self._rewrite()

    def _rewrite(self) -> None:
        if not self.entries:
            self.path.unlink(missing_ok=True)
            self._dirty = False
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(b"".join(e.encode() for e in self.entries))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._dirty = False

    def flush(self, durable: bool = True) -> None:
        """fsync what was appended (with the segment's flush); ``durable=False``: the caller syncs
        the file system instead (a clean shutdown)."""
        if not self._dirty or not durable:
            self._dirty = False
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self._dirty = False
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._dirty = False

    def reset(self) -> None:
        """Forget every entry (recovery rebuilds them from the log)."""
        self.entries = []
        self.path.unlink(missing_ok=True)
        self._dirty = False

    def delete(self) -> None:
        self.entries = []
        self.path.unlink(missing_ok=True)
