"""read_committed on the consumer side (KIP-98): drop the batches of aborted transactions, pure.

Theory of operation
-------------------
A read_committed fetch answer holds records up to the last stable offset and lists the aborted
transactions overlapping them: (producer id, first offset). Kafka's consumer (``Fetcher``'s
``CompletedFetch``) walks the batches in offset order with the list as a queue sorted by first
offset: before a batch of producer P, every aborted transaction starting at or before the batch's
last offset makes its producer "aborted"; a transactional data batch of an aborted producer is
skipped; that producer's ABORT marker ends it. Control batches are never records for the user
(the record decoder skips them). The transactions of one producer never overlap, so this is exact.

``drop_aborted`` returns the answer's bytes without the aborted batches (whole batches, unchanged,
so offsets and CRCs stay valid) and the offset after the last batch seen, so a consumer whose
whole answer was aborted still moves past it.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Iterable
from typing import Final

from proto.record_batch import (
    CONTROL_MASK,
    CONTROL_TYPE_ABORT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TRANSACTIONAL_MASK,
    decode_batch_fields,
)

# base_offset, batch_length, partition_leader_epoch, magic, crc, attributes, last_offset_delta, and
# (at 43) producer_id.
_HEAD = struct.Struct(">qiibIhi")
_PRODUCER_ID = struct.Struct(">q")
_PRODUCER_ID_OFFSET: Final = 43


def _is_abort_marker(buf: bytes | memoryview, pos: int) -> bool:
    try:
        _h, records = decode_batch_fields(buf, pos)
    except Exception:  # a malformed control batch is no abort marker; the record decoder reports it
        return False
    key = records[0][2] if records else None
    return key is not None and len(key) >= 4 and struct.unpack_from(">h", key, 2)[0] == CONTROL_TYPE_ABORT


def drop_aborted(records: bytes, aborted: Iterable[tuple[int, int]]) -> tuple[bytes, int]:
    """``records`` (a fetch answer's whole batches) without the batches of the ``aborted``
    transactions ((producer id, first offset) pairs), and the offset after the last whole batch
    (-1 when there is none)."""
    queue = sorted((first, pid) for pid, first in aborted)
    if not queue:
        return records, -1
    mv = memoryview(records)
    aborted_producers: set[int] = set()
    kept: list[memoryview] = []
    pos = 0
    next_offset = -1
    while len(records) - pos >= HEADER_SIZE:
        base, length, _e, _m, _c, attributes, last_delta = _HEAD.unpack_from(records, pos)
        size = length + LOG_OVERHEAD
        if length < HEADER_SIZE - LOG_OVERHEAD or pos + size > len(records):
            break  # a partial trailing batch: the decoder ignores it too
        last_offset = base + last_delta
        while queue and queue[0][0] <= last_offset:
            aborted_producers.add(heapq.heappop(queue)[1])
        (pid,) = _PRODUCER_ID.unpack_from(records, pos + _PRODUCER_ID_OFFSET)
        keep = True
        if attributes & CONTROL_MASK:
            if pid in aborted_producers and _is_abort_marker(mv, pos):
                aborted_producers.discard(pid)
        elif attributes & TRANSACTIONAL_MASK and pid in aborted_producers:
            keep = False
        if keep:
            kept.append(mv[pos:pos + size])
        next_offset = last_offset + 1
        pos += size
    tail = mv[pos:]  # a partial batch stays for the decoder to judge
    return b"".join([*kept, tail]), next_offset
