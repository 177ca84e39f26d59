"""The history checker finds each anomaly in a hand-made history, and none in a clean one."""

from __future__ import annotations

from client.ops.history import FAIL, OK, UNKNOWN, Read, Write, check


def clean() -> tuple[list[Write], list[Read]]:
    writes = [Write("p1", 0, f"v{i}", OK, i) for i in range(5)] + [Write("p1", 0, "x", FAIL)]
    reads = [Read(0, i, f"v{i}") for i in range(5)]
    return writes, reads


def test_a_clean_history_is_valid() -> None:
    report = check(*clean())
    assert report.valid and report.writes == {OK: 5, FAIL: 1}
    assert "writes ok 5, failed 1, unknown 0" in report.summary()


def test_unknown_writes_may_or_may_not_appear() -> None:
    writes, reads = clean()
    writes += [Write("p1", 0, "u1", UNKNOWN), Write("p1", 0, "u2", UNKNOWN)]
    reads.append(Read(0, 5, "u1"))
    assert check(writes, reads).valid


def test_lost_acknowledged_write() -> None:
    writes, reads = clean()
    reads = [r for r in reads if r.value != "v2"]
    report = check(writes, reads)
    assert [w.value for w in report.lost] == ["v2"] and not report.valid


def test_unseen_acknowledged_write_at_the_end() -> None:
    writes, reads = clean()
    report = check(writes, reads[:-1])
    assert [w.value for w in report.unseen] == ["v4"] and not report.lost


def test_duplicate_value_at_two_offsets() -> None:
    writes, reads = clean()
    reads.append(Read(0, 5, "v3"))
    assert check(writes, reads).duplicates == [("v3", [3, 5])]


def test_two_values_at_one_offset_and_a_moved_ack() -> None:
    writes, reads = clean()
    reads.append(Read(0, 4, "other"))
    report = check(writes, reads)
    assert (0, 4, ["other", "v4"]) in report.inconsistent_offsets
    writes2, reads2 = clean()
    writes2[1] = Write("p1", 0, "v1", OK, 9)  # acknowledged at 9, read at 1
    assert (0, 9, ["v1"]) in check(writes2, reads2).inconsistent_offsets


def test_reordered_writes_of_one_producer() -> None:
    writes = [Write("p1", 0, "a", OK, 1), Write("p1", 0, "b", OK, 0), Write("p2", 0, "c", OK, 2)]
    reads = [Read(0, 0, "b"), Read(0, 1, "a"), Read(0, 2, "c")]
    assert check(writes, reads).reordered == [("p1", 0, "a", "b")]


def test_definitely_failed_write_that_was_read() -> None:
    writes, reads = clean()
    reads.append(Read(0, 5, "x"))
    assert [w.value for w in check(writes, reads).failed_but_read] == ["x"]
