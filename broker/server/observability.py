"""What a running broker tells the outside: Prometheus metrics, structured logs, recent events.

Metrics are read from the broker's state when scraped (a custom collector),
so the hot path pays only for per-request counters and one latency
observation per RPC - never per record. Names follow Kafka's JMX health set
(``kafka_server_replicamanager_underreplicatedpartitions``,
``kafka_controller_kafkacontroller_activecontrollercount``, ...) plus
per-partition gauges for the log (LEO, HW, leader epoch, size, segments).

Events (leadership changes, ISR changes, truncations, elections, fencing
refusals) are ordinary INFO log records carrying ``extra={"event": kind,
"topic": ..., "partition": ...}``; ``EventBuffer`` keeps the latest of them for
DescribeReplicas / ``minikafka top``, and ``JsonFormatter`` writes every log
record as one JSON line (``--log-format json``).
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample


def event(kind: str, topic: str = "", partition: int = -1, **fields: Any) -> dict[str, Any]:
    """The ``extra`` of a log call that is also a cluster event."""
    return {"event": kind, "topic": topic, "partition": partition, **fields}


@dataclass(frozen=True)
class Event:
    timestamp_ms: int
    kind: str
    topic: str
    partition: int
    detail: str


class EventBuffer(logging.Handler):
    def __init__(self, capacity: int = 500) -> None:
        super().__init__(level=logging.INFO)
        self.events: deque[Event] = deque(maxlen=capacity)

    def emit(self, record: logging.LogRecord) -> None:
        kind = getattr(record, "event", None)
        if kind:
            self.events.append(Event(int(record.created * 1000), str(kind), str(getattr(record, "topic", "")),
                                     int(getattr(record, "partition", -1)), record.getMessage()))

    def latest(self, n: int) -> list[Event]:
        return list(self.events)[-n:] if n > 0 else []


_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def __init__(self, broker_id: int) -> None:
        super().__init__()
        self.broker_id = broker_id

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "broker": self.broker_id,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class RequestMetrics:
    """Per-API request counters, error counts by code and latency histograms."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter("minikafka_requests", "Requests handled, by API", ["api"], registry=registry)
        self.errors = Counter("minikafka_request_errors", "Partition-level errors returned, by API and code",
                              ["api", "code"], registry=registry)
        self.latency = Histogram("minikafka_request_latency_seconds", "Request handling time, by API", ["api"],
                                 registry=registry,
                                 buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))


class BrokerCollector(Collector):
    """Gauges computed from the broker's state at scrape time: ``server`` is the broker
    (broker.server.kafka_server.KafkaServer), read by attribute and only as far as it is built."""

    def __init__(self, server: object) -> None:
        self.server = server

    def collect(self) -> Iterator[Any]:
        s = self.server
        rm = getattr(s, "replica_manager", None)
        ctrl = getattr(s, "controller", None)
        if rm is None or ctrl is None:
            return
        partitions = list(rm.partitions.values())
        led = [p for p in partitions if p.is_leader]
        under = sum(1 for p in led if len(p.isr) < len(p.replicas))
        yield GaugeMetricFamily("kafka_server_replicamanager_underreplicatedpartitions",
                                "Partitions led here whose ISR is smaller than their replica set", value=under)
        yield GaugeMetricFamily("kafka_server_replicamanager_leadercount", "Partitions led by this broker",
                                value=len(led))
        yield GaugeMetricFamily("kafka_server_replicamanager_partitioncount", "Replicas hosted by this broker",
                                value=len(partitions))
        yield CounterMetricFamily("kafka_server_replicamanager_isrshrinks", "ISR shrinks made by this broker",
                                  value=rm.isr_shrinks)
        yield CounterMetricFamily("kafka_server_replicamanager_isrexpands", "ISR expands made by this broker",
                                  value=rm.isr_expands)
        # Counted by the replica manager where it holds the bytes anyway: reading a protobuf bytes
        # field again to measure it would copy it.
        yield CounterMetricFamily("kafka_server_brokertopicmetrics_bytesin", "Record bytes produced to this broker",
                                  value=rm.bytes_in)
        yield CounterMetricFamily("kafka_server_brokertopicmetrics_bytesout", "Record bytes fetched from this broker",
                                  value=rm.bytes_out)
        active = 1 if ctrl.active else 0
        offline = 0
        if ctrl.active:
            offline = sum(1 for st in list(ctrl.ctx.leadership.values()) if st.leader_and_isr.leader < 0)
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_activecontrollercount",
                                "1 on the active controller, 0 elsewhere", value=active)
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_offlinepartitionscount",
                                "Partitions without a leader (reported by the active controller)", value=offline)
        yield GaugeMetricFamily("kafka_controller_controller_epoch", "Controller epoch this broker last saw",
                                value=max(rm.controller_epoch, ctrl.ctx.epoch))
        yield CounterMetricFamily("kafka_controller_controllerstats_uncleanleaderelections",
                                  "Unclean leader elections made by this controller", value=ctrl.unclean_elections)
        lm = getattr(s, "log_manager", None)
        if lm is not None:
            logs = [lg for _tp, lg in lm]
            yield CounterMetricFamily("minikafka_log_corrupt_tails", "Corrupt log tails truncated while loading",
                                      value=sum(lg.corrupt_tails for lg in logs))
            yield CounterMetricFamily("minikafka_log_recovered_bytes_truncated",
                                      "Bytes cut off logs by recovery", value=sum(lg.recovered_bytes_truncated
                                                                                  for lg in logs))
            yield CounterMetricFamily("minikafka_log_quarantined", "Logs moved aside because they could not load",
                                      value=lm.quarantined)
            cleaner = getattr(lm, "cleaner", None)
            if cleaner is not None:  # Kafka's kafka.log:type=LogCleaner / LogCleanerManager metrics
                yield GaugeMetricFamily("kafka_log_logcleanermanager_max_dirty_percent",
                                        "Largest dirty ratio of a compacted log (percent)",
                                        value=100.0 * cleaner.max_dirty_ratio)
                yield GaugeMetricFamily("kafka_log_logcleanermanager_max_compaction_delay_secs",
                                        "Longest time a log waited beyond max.compaction.lag.ms",
                                        value=cleaner.max_compaction_delay_ms / 1000.0)
                yield GaugeMetricFamily("kafka_log_logcleanermanager_uncleanable_partitions_count",
                                        "Logs the cleaner gave up on until restart", value=len(cleaner.uncleanable))
                yield GaugeMetricFamily("kafka_log_logcleaner_max_clean_time_secs",
                                        "Duration of the last clean", value=cleaner.last_clean_ms / 1000.0)
                yield CounterMetricFamily("minikafka_log_cleaner_bytes_read", "Bytes read by the log cleaner",
                                          value=cleaner.bytes_read_total)
                yield CounterMetricFamily("minikafka_log_cleaner_bytes_written", "Bytes written by the log cleaner",
                                          value=cleaner.bytes_written_total)
                yield CounterMetricFamily("minikafka_log_cleaner_cleans", "Cleans completed", value=cleaner.cleans_total)
        guard = getattr(s, "gc_guard", None)
        if guard is not None:  # broker.server.gc_pauses
            st = guard.stats
            yield CounterMetricFamily("minikafka_gc_full_collections", "Full (generation 2) garbage collections "
                                      "while serving", value=st.full_collections)
            yield CounterMetricFamily("minikafka_gc_full_collections_over_budget", "Full garbage collections "
                                      "longer than the loop's budget for one request (10 ms)", value=st.over_budget)
            yield GaugeMetricFamily("minikafka_gc_startup_full_collection_seconds",
                                    "The full collection made before serving", value=st.startup_pause_ms / 1000.0)
            yield GaugeMetricFamily("minikafka_gc_full_collection_longest_seconds",
                                    "Longest full garbage collection while serving", value=st.longest_full_pause_ms / 1000.0)
            yield GaugeMetricFamily("minikafka_gc_full_collection_last_seconds",
                                    "Duration of the last full garbage collection", value=st.last_full_pause_ms / 1000.0)
            yield CounterMetricFamily("minikafka_gc_freezes", "Freezes of a full collection's survivors",
                                      value=st.freezes)
            yield CounterMetricFamily("minikafka_gc_thaws", "Thaws of the frozen objects", value=st.thaws)
        yield CounterMetricFamily("minikafka_fetches_not_parked",
                                  "Consumer fetches answered at once because fetch.purgatory.max.requests were parked",
                                  value=rm.fetches_not_parked)
        rfl = getattr(s, "replica_fetch_listener", None)
        if rfl is not None:
            yield CounterMetricFamily("minikafka_replica_fetch_listener_requests",
                                      "Follower fetches answered on the replica fetch listener",
                                      value=rfl.requests_answered)
            yield CounterMetricFamily("minikafka_replica_fetch_listener_connections_closed",
                                      "Replica fetch listener connections closed for a protocol violation",
                                      value=rfl.closed_for_violation)
        # KIP-227's metrics: NumIncrementalFetchSessions and FetchSessionCache evictions (leader side);
        # the fetches this broker's followers sent, full and incremental.
        yield GaugeMetricFamily("kafka_server_fetchsessioncache_numincrementalfetchsessions",
                                "Fetch sessions held by this broker", value=len(rm.fetch_sessions))
        yield CounterMetricFamily("kafka_server_fetchsessioncache_incrementalfetchsessionevictions",
                                  "Fetch sessions evicted", value=rm.fetch_sessions.evictions)
        fm = getattr(s, "fetcher_manager", None)
        if fm is not None:
            fetchers = list(fm.fetchers.values())
            sent = CounterMetricFamily("minikafka_replica_fetches", "Follower fetches sent by this broker",
                                       labels=["kind"])
            sent.add_metric(["full"], sum(f.full_fetches for f in fetchers))
            sent.add_metric(["incremental"], sum(f.incremental_fetches for f in fetchers))
            yield sent
        purgatory = GaugeMetricFamily("minikafka_purgatory_size", "Delayed operations waiting",
                                      labels=["purgatory"])
        purgatory.add_metric(["fetch"], len(rm.fetch_purgatory))
        purgatory.add_metric(["produce"], len(rm.produce_purgatory))
        yield purgatory
        yield from partition_gauges(partitions)


# The per-replica gauges: (name, help, the value of one replica - a broker.replication.Partition).
PARTITION_GAUGES: tuple[tuple[str, str, Callable[[Any], float]], ...] = (
    ("minikafka_log_end_offset", "Log end offset", lambda p: p.log.log_end_offset),
    ("minikafka_high_watermark", "High watermark", lambda p: p.log.high_watermark),
    ("minikafka_leader_epoch", "Leader epoch", lambda p: p.leader_epoch),
    ("minikafka_log_size_bytes", "Log size", lambda p: p.log.size),
    ("minikafka_log_segments", "Segments", lambda p: len(p.log.segments)),
)


def partition_gauges(partitions: list[Any]) -> Iterator[Metric]:
    """The per-replica gauges of ``partitions``, their samples made as the exposition writes them.

    A gauge family holding its samples holds two tracked objects per replica (the sample and its
    labels), and a scrape at 10,000 replicas built 100,000 of them at once: enough allocations to
    set off the garbage collector's full collections, each of which walks the broker's whole heap
    (10-28 ms, measured in the scale bench: the loop stops meanwhile, whichever thread scraped).
    Made one at a time, each sample is freed once written: the collector's allocation count does
    not grow with the partitions."""
    for name, documentation, value in PARTITION_GAUGES:
        family = Metric(name, documentation, "gauge")
        family.samples = _LazySamples(name, partitions, value)  # type: ignore[assignment]
        yield family


class _LazySamples:
    """A gauge's samples over ``partitions``, made on each iteration (the exposition iterates once;
    a restricted scrape, ``?name[]=``, iterates again)."""

    __slots__ = ("_name", "_partitions", "_value")

    def __init__(self, name: str, partitions: list[Any], value: Callable[[Any], float]) -> None:
        self._name, self._partitions, self._value = name, partitions, value

    def __iter__(self) -> Iterator[Sample]:
        name, value = self._name, self._value
        for p in self._partitions:
            yield Sample(name, {"topic": p.topic, "partition": str(p.partition)}, value(p))

    def __len__(self) -> int:
        return len(self._partitions)


class BrokerMetrics:
    def __init__(self, server: object) -> None:
        self.registry = CollectorRegistry()
        self.requests = RequestMetrics(self.registry)
        self.registry.register(BrokerCollector(server))
        self.port = -1

    def serve(self, host: str, port: int) -> int:
        httpd, _thread = start_http_server(port, addr=host, registry=self.registry)
        self.port = int(httpd.server_address[1])
        return self.port
