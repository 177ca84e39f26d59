"""The Spark reader's connection cache (client.spark.connection_cache): a worker's next task reuses
the view (metadata + channels) the previous task gave back, as Spark's Kafka source reuses its
consumers; failed tasks' views are closed, idle ones expire, the cache is bounded - and
read_range gives its view back only after a read without error."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from client.spark import cluster_io
from client.spark.connection_cache import ConnectionCache, ViewKey
from client.spark.options import OffsetRange
from proto.transport import PLAINTEXT_SECURITY


class FakeView:
    def __init__(self, key: ViewKey) -> None:
        self.key = key
        self.closed = False

    def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def key(servers: str = "127.0.0.1:9092", timeout_s: float = 30.0) -> ViewKey:
    return ViewKey(servers, timeout_s, PLAINTEXT_SECURITY)


def cache(capacity: int = 4, idle_timeout_s: float = 300.0) -> tuple[ConnectionCache, list[FakeView], Clock]:
    made: list[FakeView] = []
    clock = Clock()

    def make(k: ViewKey) -> Any:
        v = FakeView(k)
        made.append(v)
        return v

    return ConnectionCache(capacity, idle_timeout_s, make=make, clock=clock), made, clock


def test_the_next_task_reuses_the_view_the_last_one_gave_back() -> None:
    c, made, _ = cache()
    v = c.borrow(key())
    c.give_back(v)
    assert c.borrow(key()) is v
    assert len(made) == 1 and not v.closed


def test_a_view_is_lent_to_one_task_at_a_time() -> None:
    c, made, _ = cache()
    a, b = c.borrow(key()), c.borrow(key())
    assert a is not b and len(made) == 2
    c.give_back(a)
    c.give_back(a)  # twice: still kept once
    assert c.idle_count() == 1


def test_views_are_not_shared_across_clusters_security_or_timeouts() -> None:
    c, _made, _ = cache()
    v = c.borrow(key("127.0.0.1:9092"))
    c.give_back(v)
    assert c.borrow(key("127.0.0.1:9093")) is not v
    assert c.borrow(key(timeout_s=5.0)) is not v
    assert c.borrow(key()) is v


def test_a_failed_tasks_view_is_closed_and_never_lent_again() -> None:
    c, _made, _ = cache()
    v = c.borrow(key())
    c.discard(v)
    assert v.closed
    assert c.borrow(key()) is not v


def test_idle_views_expire() -> None:
    c, _made, clock = cache(idle_timeout_s=300.0)
    v = c.borrow(key())
    c.give_back(v)
    clock.now += 301
    w = c.borrow(key())
    assert w is not v and v.closed


def test_at_most_capacity_idle_views_are_kept_oldest_closed_first() -> None:
    c, _made, clock = cache(capacity=2)
    views = [c.borrow(key(f"127.0.0.1:{9092 + i}")) for i in range(3)]
    for v in views:
        clock.now += 1
        c.give_back(v)
    assert c.idle_count() == 2
    assert [v.closed for v in views] == [True, False, False]


# ------------------------------------------------------------------ read_range's use of the cache


def test_read_range_gives_its_view_back_after_a_clean_read() -> None:
    c, made, _clock = cache()
    rng = OffsetRange("t", 0, 5, 5)
    for _ in range(3):
        list(cluster_io.read_range("127.0.0.1:9092", rng, include_headers=False, max_bytes=1 << 20,
                                   fail_on_data_loss=True, request_timeout_ms=1000, retry_timeout_ms=1000,
                                   arrow_schema=None, cache=c))
    assert len(made) == 1 and not made[0].closed and c.idle_count() == 1


def test_read_range_closes_its_view_when_the_read_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    c, made, _clock = cache()

    def failing(*_a: Any, **_k: Any) -> Any:
        raise cluster_io.RangeReadError("no progress")
        yield  # pragma: no cover

    monkeypatch.setattr(cluster_io, "read_columns", failing)
    with pytest.raises(cluster_io.RangeReadError):
        list(cluster_io.read_range("127.0.0.1:9092", OffsetRange("t", 0, 0, 5), include_headers=False,
                                   max_bytes=1 << 20, fail_on_data_loss=True, request_timeout_ms=1000,
                                   retry_timeout_ms=1000, arrow_schema=None, cache=c))
    assert made[0].closed and c.idle_count() == 0


def test_read_range_closes_its_view_when_spark_stops_reading_early(monkeypatch: pytest.MonkeyPatch) -> None:
    c, made, _clock = cache()

    def two_batches(*_a: Any, **_k: Any) -> Any:
        yield SimpleNamespace(num_rows=1)
        yield SimpleNamespace(num_rows=1)

    monkeypatch.setattr(cluster_io, "read_columns", two_batches)
    monkeypatch.setattr(cluster_io, "to_arrow", lambda cols, *a: cols)
    it = cluster_io.read_range("127.0.0.1:9092", OffsetRange("t", 0, 0, 5), include_headers=False,
                               max_bytes=1 << 20, fail_on_data_loss=True, request_timeout_ms=1000,
                               retry_timeout_ms=1000, arrow_schema=None, cache=c)
    next(it)
    it.close()  # a LIMIT query: Spark closes the iterator with the in-flight fetch still out
    assert made[0].closed and c.idle_count() == 0


# ------------------------------------------------------------------ a reused view's metadata


def _metadata(**topics: list[int] | None) -> Any:
    from proto import minikafka_pb2 as pb

    resp = pb.MetadataResponse(controller_id=1)
    resp.brokers.add(broker_id=1, host="127.0.0.1", port=9092)
    for name, parts in topics.items():
        t = resp.topics.add(name=name, error_code=0 if parts is not None else 3)  # 3: UNKNOWN_TOPIC_OR_PARTITION
        for p in parts or []:
            t.partitions.add(partition=p, leader=1, leader_epoch=0, replicas=[1], isr=[1])
    return resp


def test_a_reused_view_forgets_a_deleted_or_shrunk_topic() -> None:
    """A cached view lives across queries: what a Metadata answer lists replaces what the view knew
    of those topics (Kafka's client metadata does the same), so a topic deleted (or deleted and
    re-created with fewer partitions) since the last query leaves no partition behind to plan or
    fetch."""
    from client.connection import ClusterView

    view = ClusterView("127.0.0.1:9092")
    view._apply(_metadata(a=[0, 1, 2], b=[0]), all_topics=True)
    assert sorted(view.partitions) == [("a", 0), ("a", 1), ("a", 2), ("b", 0)]
    view._apply(_metadata(a=[0]))  # a re-created with one partition; b not asked about: kept
    assert sorted(view.partitions) == [("a", 0), ("b", 0)]
    view._apply(_metadata(b=None))  # b deleted
    assert view.partitions_of("b") == [] and view.topic_errors["b"] == 3
    view._apply(_metadata(a=[0]), all_topics=True)  # every topic asked about: only a exists
    assert sorted(view.partitions) == [("a", 0)] and set(view.topic_errors) == {"a"}
