"""verify-replicas on compacted topics (client.ops.verify_replicas.compare_compacted): replicas cleaned
at different points agree; a different latest record of a key, a different record at an offset both
hold, a tombstone's older value back, or offsets going back are divergence."""

from __future__ import annotations

from client.ops.verify_replicas import RecordPrint, compare_compacted, latest_per_key

# Keys a, b, c; b deleted by a tombstone at offset 6.
UNCLEANED: list[RecordPrint] = [(0, b"a", b"1"), (1, b"b", b"2"), (2, b"a", b"3"), (3, b"c", b"4"),
                                (4, b"b", b"5"), (5, b"c", b"6"), (6, b"b", None), (7, b"a", b"8")]
CLEANED: list[RecordPrint] = [(5, b"c", b"6"), (6, b"b", None), (7, b"a", b"8")]
TOMBSTONE_GONE: list[RecordPrint] = [(5, b"c", b"6"), (7, b"a", b"8")]


def test_replicas_cleaned_at_different_points_agree() -> None:
    assert latest_per_key(UNCLEANED) == {b"a": (7, b"8"), b"c": (5, b"6")}
    for a in (UNCLEANED, CLEANED, TOMBSTONE_GONE):
        for b in (UNCLEANED, CLEANED, TOMBSTONE_GONE):
            assert compare_compacted(a, b) is None


def test_divergent_compacted_replicas_are_reported() -> None:
    assert "latest record of key b'a'" in (compare_compacted(CLEANED, CLEANED[:2]) or "")
    assert "different record at offset 7" in (compare_compacted(CLEANED, [*CLEANED[:2], (7, b"a", b"9")]) or "")
    # The tombstone gone and b's older value still there: b is back.
    assert "latest record of key b'b'" in (compare_compacted(TOMBSTONE_GONE, [(4, b"b", b"5"), *TOMBSTONE_GONE]) or "")
    assert "not strictly increasing" in (compare_compacted(CLEANED, [CLEANED[1], CLEANED[0], CLEANED[2]]) or "")
