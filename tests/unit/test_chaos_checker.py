"""The history checker finds each anomaly in a hand-made history, and none in a clean one."""

from __future__ import annotations

from client.ops.history import (
    FAIL,
    OK,
    UNKNOWN,
    Commit,
    CommittedRead,
    Delivery,
    Read,
    Write,
    check,
    check_compacted,
    check_group,
)


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


# ------------------------------------------------------------------ consumer groups (check_group)


def group_clean() -> tuple[list[Write], list[Commit], list[CommittedRead], list[Delivery]]:
    """Two partitions of 4 records each; member m0 reads and commits in two batches per partition,
    m1 takes partition 1 over after a rebalance and resumes from the committed offset."""
    writes = [Write("p0", p, f"v{p}-{i}", OK, i) for p in (0, 1) for i in range(4)]
    deliveries = [Delivery("m0", p, i, f"v{p}-{i}") for p in (0, 1) for i in range(2)]
    deliveries += [Delivery("m0", 0, i, f"v0-{i}") for i in (2, 3)]
    deliveries += [Delivery("m1", 1, i, f"v1-{i}") for i in (2, 3)]
    commits = [Commit("m0", 0, 2, sent=1.0, acked=1.1), Commit("m0", 1, 2, sent=1.0, acked=1.1),
               Commit("m0", 0, 4, sent=2.0, acked=2.1), Commit("m1", 1, 4, sent=3.0, acked=3.1)]
    reads = [CommittedRead("observer", 0, 2, sent=1.5), CommittedRead("observer", 1, 2, sent=1.5),
             CommittedRead("m1", 1, 2, sent=2.5), CommittedRead("final", 0, 4, sent=9.0),
             CommittedRead("final", 1, 4, sent=9.0)]
    return writes, commits, reads, deliveries


def test_a_clean_group_history_is_valid() -> None:
    writes, commits, reads, deliveries = group_clean()
    report = check_group(writes, commits, reads, deliveries, {0: 4, 1: 4})
    assert report.valid, report.summary()
    assert report.anomalies == {"commit_regressions": 0, "skipped": 0}
    assert (report.commits, report.reads, report.deliveries, report.redelivered) == (4, 5, 8, 0)
    assert "commit_regressions 0, skipped 0" in report.summary()


def test_a_read_lower_than_an_acknowledged_commit_is_a_regression() -> None:
    writes, commits, reads, deliveries = group_clean()
    # A resumed stale coordinator answers with what it had before the commit at 2.1 on partition 0.
    reads += [CommittedRead("broker 2", 0, 2, sent=5.0), CommittedRead("broker 2", 0, 2, sent=5.5)]
    report = check_group(writes, commits, reads, deliveries, {0: 4, 1: 4})
    assert not report.valid
    [g] = report.regressions  # the second stale read shows the same acknowledged commit: one finding
    assert (g.partition, g.acknowledged.offset, g.observed, g.by, g.at) == (0, 4, 2, "read by broker 2", 5.0)


def test_none_committed_after_an_acknowledged_commit_is_a_regression() -> None:
    writes, commits, reads, deliveries = group_clean()
    reads.append(CommittedRead("observer", 1, -1, sent=1.2))
    [g] = check_group(writes, commits, reads, deliveries, {0: 4, 1: 4}).regressions
    assert (g.partition, g.acknowledged.offset, g.observed) == (1, 2, -1)


def test_a_later_commit_acknowledged_lower_is_a_regression() -> None:
    writes, commits, reads, deliveries = group_clean()
    # m1 resumed partition 1 from a stale offset and its lower commit was accepted.
    commits.append(Commit("m1", 1, 3, sent=4.0, acked=4.1))
    [g] = check_group(writes, commits, reads, deliveries, {0: 4, 1: 4}).regressions
    assert (g.partition, g.acknowledged.offset, g.observed, g.by) == (1, 4, 3, "commit by m1")


def test_reads_and_commits_concurrent_with_a_commit_may_see_either_value() -> None:
    writes, commits, reads, deliveries = group_clean()
    # Sent before the commit of 4 on partition 0 came back (2.1): the old value is allowed.
    reads += [CommittedRead("observer", 0, 2, sent=2.05), CommittedRead("observer", 0, 2, sent=2.1)]
    commits.append(Commit("m0", 0, 3, sent=2.05, acked=2.2))  # in flight together with the commit of 4
    report = check_group(writes, commits, reads, deliveries, {0: 4, 1: 4})
    assert not report.regressions, report.regressions


def test_an_explicit_reset_may_move_the_committed_offset_back() -> None:
    writes, commits, reads, deliveries = group_clean()
    commits.append(Commit("admin", 0, 0, sent=4.0, acked=4.1, reset=True))
    reads.append(CommittedRead("observer", 0, 0, sent=5.0))
    report = check_group(writes, commits, reads, deliveries, {0: 4, 1: 4})
    assert not report.regressions
    reads.append(CommittedRead("observer", 0, 2, sent=3.0))  # before the reset: still a regression
    assert [g.observed for g in check_group(writes, commits, reads, deliveries, {0: 4, 1: 4}).regressions] == [2]


def test_an_acknowledged_record_below_the_final_commit_never_delivered_is_skipped() -> None:
    writes, commits, reads, deliveries = group_clean()
    deliveries = [d for d in deliveries if (d.partition, d.offset) != (1, 2)]
    report = check_group(writes, commits, reads, deliveries, {0: 4, 1: 4})
    assert [(w.partition, w.offset, w.value) for w in report.skipped] == [(1, 2, "v1-2")]
    assert not report.valid and report.anomalies == {"commit_regressions": 0, "skipped": 1}


def test_records_at_or_above_the_final_commit_and_unacknowledged_ones_are_not_skipped() -> None:
    writes, commits, reads, deliveries = group_clean()
    deliveries = [d for d in deliveries if d.partition != 1 or d.offset < 2]
    writes.append(Write("p0", 0, "u", UNKNOWN))  # no offset: never a skip
    writes.append(Write("p0", 0, "f", FAIL))
    report = check_group(writes, commits, reads, deliveries, {0: 4, 1: 2})  # the group committed 2 on 1
    assert report.valid, report.summary()


def test_redeliveries_are_counted_not_reported() -> None:
    writes, commits, reads, deliveries = group_clean()
    deliveries += [Delivery("m1", 1, 0, "v1-0"), Delivery("m1", 1, 1, "v1-1")]
    report = check_group(writes, commits, reads, deliveries, {0: 4, 1: 4})
    assert report.valid and report.redelivered == 2


# ------------------------------------------------------------------ compacted topics


def compacted_history() -> tuple[list[Write], list[Read]]:
    """Keys a and b updated three times each (offsets 0..5), b's last write a tombstone; the cleaner
    kept a's latest (offset 4) and b's tombstone (offset 5)."""
    writes = [Write("p0", 0, f"v{i}", OK, i, key="ab"[i % 2], tombstone=i == 5) for i in range(6)]
    reads = [Read(0, 4, "v4", key="a"), Read(0, 5, "", key="b", tombstone=True)]
    return writes, reads


def test_a_compacted_history_checks_the_latest_value_per_key() -> None:
    writes, reads = compacted_history()
    report = check_compacted(writes, reads)
    assert report.valid and report.keys == 2, report.summary()
    # Nothing cleaned yet: every record read is fine too; the tombstone gone past its retention also.
    everything = [Read(0, w.offset, "" if w.tombstone else w.value, key=w.key, tombstone=w.tombstone) for w in writes]
    assert check_compacted(writes, everything).valid
    assert check_compacted(writes, reads[:1]).valid


def test_a_lost_latest_value_and_a_value_back_from_under_a_tombstone() -> None:
    writes, reads = compacted_history()
    assert [w.value for w in check_compacted(writes, reads[1:]).lost] == ["v4"]
    # The tombstone of b gone, b's older value still there: resurrected.
    assert [w.value for w in check_compacted(writes, [reads[0], Read(0, 3, "v3", key="b")]).lost] == ["v5"]
    # An older value of a read as its latest.
    assert [w.value for w in check_compacted(writes, [Read(0, 2, "v2", key="a"), reads[1]]).lost] == ["v4"]


def test_a_later_unknown_write_may_be_the_latest_and_nothing_else() -> None:
    writes, reads = compacted_history()
    writes += [Write("p0", 0, "u6", UNKNOWN, key="a"), Write("p0", 0, "x7", FAIL, key="a")]
    assert check_compacted(writes, [reads[1], Read(0, 6, "u6", key="a")]).valid
    report = check_compacted(writes, [reads[1], Read(0, 6, "x7", key="a")])
    assert report.failed_but_read and report.phantoms and not report.valid
    assert check_compacted(writes, [reads[0], reads[1], Read(0, 7, "nobody", key="a")]).phantoms


def test_compacted_offsets_must_only_increase_and_stay_where_acknowledged() -> None:
    writes, reads = compacted_history()
    assert check_compacted(writes, [reads[1], reads[0]]).backwards
    assert check_compacted(writes, [Read(0, 3, "v4", key="a"), reads[1]]).inconsistent_offsets
    assert check_compacted(writes, [reads[0], Read(0, 5, "", key="a", tombstone=True)]).inconsistent_offsets
