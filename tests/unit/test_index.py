"""Sparse offset and time indexes (SPEC S2.1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log.checkpoint import CorruptCheckpointError, read_offsets, write_offsets
from broker.log.index import CorruptIndexError, OffsetIndex, TimeIndex


def test_offset_index_lookup_is_floor(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "x.index", base_offset=100, max_entries=10)
    assert idx.lookup(150) == (100, 0)
    for off, pos in [(100, 0), (110, 4096), (125, 8200)]:
        idx.append(off, pos)
    idx.append(120, 9000)  # not increasing: ignored
    assert idx.lookup(99) == (100, 0)
    assert idx.lookup(109) == (100, 0)
    assert idx.lookup(110) == (110, 4096)
    assert idx.lookup(10_000) == (125, 8200)
    assert idx.floor_position(8199) == 4096
    assert idx.floor_position(8200) == 8200


def test_offset_index_persists_and_truncates(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    idx = OffsetIndex(path, 0, 10)
    for i in range(5):
        idx.append(i * 10, i * 1000)
    idx.flush()
    assert path.stat().st_size == 5 * 8
    idx.truncate_to(25)
    assert len(idx) == 3 and path.stat().st_size == 3 * 8
    again = OffsetIndex(path, 0, 10)
    again.load()
    assert again.lookup(100) == (20, 2000)
    idx.truncate_to_position(1000)
    assert len(idx) == 1


def test_corrupt_offset_index_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    path.write_bytes(b"\x00\x00\x00\x05\x00\x00\x00\x10" + b"\x00\x00\x00\x01\x00\x00\x00\x20")
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, 0, 10).load()
    path.write_bytes(b"\x00\x00\x00")
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, 0, 10).load()
    idx = OffsetIndex(tmp_path / "ok.index", 0, 10)
    idx.append(0, 500)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(segment_size=100)


def test_time_index(tmp_path: Path) -> None:
    ti = TimeIndex(tmp_path / "x.timeindex", 50, 10)
    assert ti.lookup(5) == (-1, 50)
    ti.maybe_append(1000, 50)
    ti.maybe_append(1000, 60)  # not larger: ignored
    ti.maybe_append(2000, 70)
    assert ti.lookup(999) == (-1, 50)
    assert ti.lookup(1500) == (1000, 50)
    assert ti.lookup(2000) == (2000, 70)
    ti.flush()
    loaded = TimeIndex(tmp_path / "x.timeindex", 50, 10)
    loaded.load()
    assert loaded.lookup(5000) == (2000, 70)
    ti.truncate_to(70)
    assert ti.lookup(5000) == (1000, 50)


def test_offset_checkpoint_format(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    write_offsets(path, {("b-topic", 1): 7, ("a", 0): 3})
    assert path.read_text() == "0\n2\na 0 3\nb-topic 1 7\n"
    assert read_offsets(path) == {("a", 0): 3, ("b-topic", 1): 7}
    assert read_offsets(tmp_path / "missing") == {}
    path.write_text("0\n3\na 0 1\n")
    with pytest.raises(CorruptCheckpointError):
        read_offsets(path)
