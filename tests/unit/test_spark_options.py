"""The Spark connector's pure planning: Spark Kafka-source options, offsets, ranges, rate limits."""

from __future__ import annotations

import pytest

from client.spark.options import (
    EARLIEST,
    LATEST,
    DataLossError,
    OffsetRange,
    SparkOptionError,
    check_data_loss,
    offsets_from_json,
    offsets_to_json,
    parse_source_options,
    plan_ranges,
    rate_limit,
    resolve_offsets,
)

BS = {"bootstrap.servers": "127.0.0.1:9092"}


def opts(**kw: str) -> dict[str, str]:
    return {**BS, **kw}


def test_bootstrap_accepts_spark_kafka_prefix_and_is_required() -> None:
    o = parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t"}, streaming=False)
    assert o.bootstrap_servers == "h:1"
    with pytest.raises(SparkOptionError, match=r"bootstrap\.servers"):
        parse_source_options({"subscribe": "t"}, streaming=False)


def test_exactly_one_subscription_option() -> None:
    with pytest.raises(SparkOptionError, match="exactly one"):
        parse_source_options(opts(), streaming=False)
    with pytest.raises(SparkOptionError, match="exactly one"):
        parse_source_options(opts(subscribe="a", assign='{"a":[0]}'), streaming=False)


def test_options_are_case_insensitive() -> None:
    o = parse_source_options({"BOOTSTRAP.SERVERS": "h:1", "SubscribePattern": "ev.*", "STARTINGOFFSETS": "earliest"},
                             streaming=True)
    assert o.subscription.kind == "subscribePattern"
    assert o.starting.default == EARLIEST


def test_subscription_selection() -> None:
    available = {"events": [0, 1], "events2": [0], "other": [0]}
    sub = parse_source_options(opts(subscribe="events,missing"), streaming=False).subscription
    assert sub.select(available) == [("events", 0), ("events", 1)]
    pat = parse_source_options(opts(subscribePattern="events.*"), streaming=False).subscription
    assert pat.select(available) == [("events", 0), ("events", 1), ("events2", 0)]
    asg = parse_source_options(opts(assign='{"events":[1],"other":[0]}'), streaming=False).subscription
    assert asg.select(available) == [("events", 1), ("other", 0)]
    bad = parse_source_options(opts(assign='{"events":[7]}'), streaming=False).subscription
    with pytest.raises(SparkOptionError, match="events-7"):
        bad.select(available)


def test_batch_defaults_and_forbidden_values() -> None:
    o = parse_source_options(opts(subscribe="t"), streaming=False)
    assert (o.starting.default, o.ending.default) == (EARLIEST, LATEST)
    with pytest.raises(SparkOptionError, match="cannot start at latest"):
        parse_source_options(opts(subscribe="t", startingOffsets="latest"), streaming=False)
    with pytest.raises(SparkOptionError, match="cannot end at earliest"):
        parse_source_options(opts(subscribe="t", endingOffsets="earliest"), streaming=False)
    with pytest.raises(SparkOptionError, match="not allowed"):
        parse_source_options(opts(subscribe="t", startingOffsets='{"t":{"0":-1}}'), streaming=False)
    with pytest.raises(SparkOptionError, match="batch queries only"):
        parse_source_options(opts(subscribe="t", endingOffsets="latest"), streaming=True)
    s = parse_source_options(opts(subscribe="t"), streaming=True)
    assert s.starting.default == LATEST


def test_bad_json_and_numbers_are_named() -> None:
    with pytest.raises(SparkOptionError, match="not valid JSON"):
        parse_source_options(opts(subscribe="t", startingOffsets="{t:0"), streaming=False)
    with pytest.raises(SparkOptionError, match="minPartitions"):
        parse_source_options(opts(subscribe="t", minPartitions="0"), streaming=False)
    with pytest.raises(SparkOptionError, match="failOnDataLoss"):
        parse_source_options(opts(subscribe="t", failOnDataLoss="maybe"), streaming=False)


def test_resolve_json_offsets_with_earliest_and_latest_markers() -> None:
    o = parse_source_options(opts(subscribe="t", startingOffsets='{"t":{"0":5,"1":-2}}',
                                  endingOffsets='{"t":{"0":-1,"1":7}}'), streaming=False)
    tps = [("t", 0), ("t", 1)]
    earliest, latest = {("t", 0): 0, ("t", 1): 3}, {("t", 0): 50, ("t", 1): 60}
    assert resolve_offsets(o.starting, tps, earliest, latest) == {("t", 0): 5, ("t", 1): 3}
    assert resolve_offsets(o.ending, tps, earliest, latest) == {("t", 0): 50, ("t", 1): 7}


def test_json_offsets_must_name_every_partition() -> None:
    o = parse_source_options(opts(subscribe="t", startingOffsets='{"t":{"0":5}}'), streaming=False)
    with pytest.raises(SparkOptionError, match="missing: t-1"):
        resolve_offsets(o.starting, [("t", 0), ("t", 1)], {("t", 0): 0, ("t", 1): 0}, {("t", 0): 9, ("t", 1): 9})


def test_starting_timestamp_wins_and_strategy() -> None:
    o = parse_source_options(opts(subscribe="t", startingOffsets='{"t":{"0":1}}', startingTimestamp="1000"),
                             streaming=False)
    tps = [("t", 0), ("t", 1)]
    found = {("t", 0): 4, ("t", 1): None}
    with pytest.raises(SparkOptionError, match="no record at or after timestamp 1000 in t-1"):
        resolve_offsets(o.starting, tps, {("t", 0): 0, ("t", 1): 0}, {("t", 0): 9, ("t", 1): 8}, found)
    o2 = parse_source_options(opts(subscribe="t", startingTimestamp="1000",
                                   startingOffsetsByTimestampStrategy="latest"), streaming=False)
    assert resolve_offsets(o2.starting, tps, {("t", 0): 0, ("t", 1): 0}, {("t", 0): 9, ("t", 1): 8},
                           found) == {("t", 0): 4, ("t", 1): 8}
    o3 = parse_source_options(opts(subscribe="t", startingOffsetsByTimestamp='{"t":{"0":5,"1":6}}'),
                              streaming=False)
    assert o3.starting.timestamps == {("t", 0): 5, ("t", 1): 6}


def test_data_loss_fails_or_skips() -> None:
    earliest, latest = {("t", 0): 10}, {("t", 0): 20}
    with pytest.raises(DataLossError, match="failOnDataLoss=false"):
        check_data_loss({("t", 0): 4}, earliest, latest, fail_on_data_loss=True)
    start, warnings = check_data_loss({("t", 0): 4}, earliest, latest, fail_on_data_loss=False)
    assert start == {("t", 0): 10} and "4..9" in warnings[0]
    assert check_data_loss({("t", 0): 12}, earliest, latest, fail_on_data_loss=True) == ({("t", 0): 12}, [])


def test_one_range_per_partition_and_empty_ones_dropped() -> None:
    start = {("t", 0): 0, ("t", 1): 5, ("t", 2): 9}
    end = {("t", 0): 100, ("t", 1): 5, ("t", 2): 19}
    assert plan_ranges(start, end) == [OffsetRange("t", 0, 0, 100), OffsetRange("t", 2, 9, 19)]


def test_min_partitions_splits_large_partitions_proportionally() -> None:
    start = {("t", 0): 0, ("t", 1): 0}
    end = {("t", 0): 300, ("t", 1): 100}
    ranges = plan_ranges(start, end, min_partitions=4)
    assert [(r.partition, r.from_offset, r.until_offset) for r in ranges] == [
        (0, 0, 100), (0, 100, 200), (0, 200, 300), (1, 0, 100)]
    # The split covers every offset exactly once.
    assert sum(r.size for r in ranges) == 400
    assert plan_ranges(start, end, min_partitions=2) == plan_ranges(start, end)
    six = {("t", p): 0 for p in range(6)}
    six_end = {("t", p): 2000 + p for p in range(6)}
    assert len(plan_ranges(six, six_end, min_partitions=13)) == 13  # never fewer than asked


def test_ending_before_starting_is_data_loss() -> None:
    with pytest.raises(DataLossError):
        plan_ranges({("t", 0): 10}, {("t", 0): 5})


def test_rate_limit_prorates_like_spark() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 50}
    latest = {("t", 0): 300, ("t", 1): 100, ("t", 2): 50}
    assert rate_limit(start, latest, 100) == {("t", 0): 75, ("t", 1): 25, ("t", 2): 50}
    assert rate_limit(start, latest, 10_000) == latest
    # A partition with a tiny share still moves by one offset.
    assert rate_limit({("a", 0): 0, ("b", 0): 0}, {("a", 0): 1000, ("b", 0): 1}, 10)[("b", 0)] == 1


def test_offsets_json_round_trip_uses_string_partitions() -> None:
    offsets = {("t", 0): 5, ("t", 1): 7, ("u", 0): 1}
    js = offsets_to_json(offsets)
    assert js == {"t": {"0": 5, "1": 7}, "u": {"0": 1}}
    assert offsets_from_json(js) == offsets
    assert offsets_from_json('{"t": {"0": 5}}') == {("t", 0): 5}
