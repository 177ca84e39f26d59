"""The aborted-transaction index (Kafka's TransactionIndex, issue 31): the search a read_committed
fetch makes, the file format, truncation, a corrupt file, retention and compaction."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.log.config import LogConfig
from broker.log.log import Log
from broker.log.txn_index import (
    ENTRY_SIZE,
    AbortedTxn,
    CorruptTxnIndexError,
    TransactionIndex,
    collect_from_segments,
    decode_entries,
)
from proto.record_batch import Record, encode_batch

NOW = 1_700_000_000_000


@st.composite
def histories(draw: st.DrawFn) -> list[list[AbortedTxn]]:
    """Segments of aborted transactions as a log produces them: one event per offset (a producer's
    data opens its transaction, a marker closes it), entries with the LSO after each marker."""
    events = draw(st.lists(st.tuples(st.booleans(), st.integers(0, 4), st.booleans()), max_size=60))
    open_txns: dict[int, int] = {}
    entries = []
    for offset, (is_marker, pid, abort) in enumerate(events):
        if not is_marker:
            open_txns.setdefault(pid, offset)
        elif pid in open_txns:
            first = open_txns.pop(pid)
            lso = min(open_txns.values(), default=offset + 1)
            if abort:
                entries.append(AbortedTxn(pid, first, offset, lso))
    cuts = sorted(draw(st.lists(st.integers(0, len(entries)), max_size=4)))
    segments, start = [], 0
    for c in [*cuts, len(entries)]:
        segments.append(entries[start:c])
        start = c
    return segments


@given(histories(), st.integers(0, 70), st.integers(0, 70))
def test_the_search_finds_every_overlapping_transaction(segments: list[list[AbortedTxn]], fetch: int,
                                                        span: int) -> None:
    upper = fetch + span
    everything = [e for seg in segments for e in seg]
    expected = [e for e in everything if e.last_offset >= fetch and e.first_offset < upper]
    # The search starts at the segment holding the fetch offset: markers below it are in earlier ones.
    start = next((i for i, seg in enumerate(segments) if seg and seg[-1].last_offset >= fetch), len(segments))
    found = collect_from_segments(segments[start:], fetch, upper)
    assert [e for e in found if e.last_offset >= fetch and e.first_offset < upper] == expected
    assert set(found) <= set(expected)


@given(st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 1000), st.integers(0, 1000)), max_size=20))
def test_entries_round_trip_through_kafkas_34_byte_layout(raw: list[tuple[int, int, int]]) -> None:
    entries, last = [], 0
    for pid, gap, length in raw:
        last += gap
        entries.append(AbortedTxn(pid, max(0, last - length), last, last + 1))
    data = b"".join(e.encode() for e in entries)
    assert ENTRY_SIZE == 34 and len(data) == 34 * len(entries)
    assert decode_entries(data) == entries


def test_a_corrupt_file_is_refused_and_truncation_cuts_entries(tmp_path: Path) -> None:
    with pytest.raises(CorruptTxnIndexError):
        decode_entries(b"\x00" * 33)
    with pytest.raises(CorruptTxnIndexError):
        decode_entries(AbortedTxn(1, 5, 9, 10).encode() + AbortedTxn(1, 2, 4, 5).encode())
    idx = TransactionIndex(tmp_path / "0.txnindex")
    for e in (AbortedTxn(1, 0, 3, 4), AbortedTxn(2, 1, 7, 8), AbortedTxn(3, 8, 9, 10)):
        idx.append(e)
    idx.truncate_to(7)
    again = TransactionIndex(tmp_path / "0.txnindex")
    again.load()
    assert again.entries == [AbortedTxn(1, 0, 3, 4)]


def _txn(log: Log, pid: int, seq: int, commit: bool) -> None:
    log.append_as_leader(encode_batch([Record(key=b"k%d" % pid, value=b"v", timestamp=NOW)], producer_id=pid,
                                      producer_epoch=0, base_sequence=seq, is_transactional=True), 0, NOW)
    log.append_txn_marker(pid, 0, commit, 0, 0, NOW)


def test_a_corrupt_index_file_is_rebuilt_from_the_markers(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", "t", 0, LogConfig(), now_ms=NOW)
    _txn(log, 1, 0, False)
    log.close()
    path = log.active_segment.txn_index.path
    path.write_bytes(path.read_bytes()[:-3])
    again = Log.open(tmp_path / "t-0", "t", 0, LogConfig(), now_ms=NOW, clean_shutdown=True)
    assert [(a.producer_id, a.first_offset) for a in again.collect_aborted_transactions(0, 10)] == [(1, 0)]
    assert len(path.read_bytes()) == ENTRY_SIZE


def test_retention_takes_the_entries_with_their_segment(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", "t", 0, LogConfig(segment_bytes=300, retention_bytes=0), now_ms=NOW)
    for i in range(6):
        _txn(log, i, 0, i % 2 == 0)
    log.update_high_watermark(log.log_end_offset)
    before = log.collect_aborted_transactions(0, log.log_end_offset)
    assert len(before) == 3
    assert log.delete_old_segments(NOW) > 0
    after = log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset)
    assert after == [a for a in before if a.last_offset >= log.log_start_offset]
    names = {p.name for p in (tmp_path / "t-0").iterdir()}
    assert all(n.split(".")[0] in {p.split(".")[0] for p in names if p.endswith(".log")} for n in names
               if n.endswith(".txnindex"))


def test_a_cleaned_segment_keeps_the_entries_of_those_it_replaces(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=300, cleanup_policy="compact")
    log = Log.open(tmp_path / "t-0", "t", 0, cfg, now_ms=NOW)
    for i in range(6):
        _txn(log, i, 0, i % 2 == 0)
    before = log.collect_aborted_transactions(0, log.log_end_offset)
    old = log.segments[:2]
    # What the cleaner writes: the old segments' batches, unchanged, as one cleaned segment.
    data = b"".join(log.read(s.base_offset, 1 << 20, s.next_offset) for s in old)
    (tmp_path / "t-0" / f"{old[0].base_offset:020d}.log.cleaned").write_bytes(data)
    log.replace_segments(old, old[0].base_offset, NOW)
    assert log.collect_aborted_transactions(0, log.log_end_offset) == before
    log.close()
    again = Log.open(tmp_path / "t-0", "t", 0, cfg, now_ms=NOW, clean_shutdown=True)
    assert [s.txn_index.entries for s in again.segments] == [s.txn_index.entries for s in log.segments]
