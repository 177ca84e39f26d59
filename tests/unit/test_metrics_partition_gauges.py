"""A Prometheus scrape of a broker with thousands of replicas (issue 29): the per-replica gauges
are written as before, and writing them sets off no garbage collection. A family that held its
samples built two tracked objects per replica and gauge - 100,000 at 10,000 replicas - and the
collector's full collections then walked the broker's whole heap (10-28 ms in the scale bench).
No broker here: replicas as the collector reads them."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from broker.server.observability import PARTITION_GAUGES, partition_gauges


def replicas(n: int) -> list[Any]:
    return [SimpleNamespace(topic=f"t{i // 100}", partition=i % 100, leader_epoch=i % 7,
                            log=SimpleNamespace(log_end_offset=i, high_watermark=i - 1, size=10 * i,
                                                segments=[None] * (1 + i % 3)))
            for i in range(n)]


class _Gauges(Collector):
    def __init__(self, partitions: list[Any]) -> None:
        self.partitions = partitions

    def collect(self) -> Iterator[Any]:
        yield from partition_gauges(self.partitions)


def registry(partitions: list[Any]) -> CollectorRegistry:
    r = CollectorRegistry()
    r.register(_Gauges(partitions))
    return r


def test_every_replica_gauge_is_written_in_both_formats() -> None:
    ps = replicas(250)
    r = registry(ps)
    for text in (generate_latest(r).decode(), generate_openmetrics(r).decode()):
        families = {f.name: f for f in text_string_to_metric_families(text)}
        assert set(families) == {name for name, _h, _v in PARTITION_GAUGES}
        seen = {(f.name, s.labels["topic"], s.labels["partition"]): s.value
                for f in families.values() for s in f.samples}
        assert len(seen) == 5 * len(ps)
        p = ps[123]
        key = (p.topic, str(p.partition))
        assert seen[("minikafka_log_end_offset", *key)] == 123
        assert seen[("minikafka_high_watermark", *key)] == 122
        assert seen[("minikafka_leader_epoch", *key)] == 123 % 7
        assert seen[("minikafka_log_size_bytes", *key)] == 1230
        assert seen[("minikafka_log_segments", *key)] == 1 + 123 % 3
    # The samples can be iterated again (a restricted scrape, ?name[]=..., filters a copy).
    family = next(partition_gauges(ps))
    assert list(family.samples) == list(family.samples) and len(list(family.samples)) == len(ps)


def test_a_scrape_of_twenty_thousand_replicas_sets_off_no_collection() -> None:
    ps = replicas(20_000)
    r = registry(ps)
    collections: list[int] = []

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])
    gc.collect()
    gc.callbacks.append(on_gc)
    try:
        text = generate_latest(r)
    finally:
        gc.callbacks.remove(on_gc)
    assert text.count(b"\nminikafka_log_segments{") == len(ps)
    # What the exposition itself allocates may cross the youngest generation's threshold once or
    # twice; a family holding its samples crossed it ~280 times (and set off full collections).
    assert len(collections) <= 3, collections
    assert 2 not in collections
