"""The ``minikafka`` format for PySpark 4 (Python Data Source API; no JVM jar).

Theory of operation
-------------------
``MinikafkaDataSource`` is what ``spark.dataSource.register`` takes. Its
schema is Spark's Kafka-source schema (plus ``headers`` with
``includeHeaders=true``). Planning runs on the driver: the batch reader lists
partitions and offsets once per query and returns one ``InputPartition`` per
offset range (``options.plan_ranges``); executors read the ranges in parallel,
each straight from its leader (``cluster_io.read_range``), yielding Arrow
record batches. The stream reader keeps offsets as ``{topic: {partition:
offset}}``, rate-limits with ``maxOffsetsPerTrigger`` (Spark's ``ReadMaxRows``),
supports ``Trigger.AvailableNow`` (the target is fixed when the trigger starts)
and restarts from whatever offsets Spark checkpointed. Writers (batch and
streaming) send rows through the idempotent acks=all producer; with
``transactionalIdPrefix`` each task's rows go in one transaction (``_Sink``).

All option parsing and offset arithmetic is in ``options`` (pure); this module
only adapts it to Spark's classes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from client.connection import ClusterView
from client.spark import cluster_io
from client.spark.connection_cache import CONNECTIONS, ViewKey
from client.spark.options import (
    TP,
    OffsetRange,
    SourceOptions,
    SparkOptionError,
    bootstrap_from,
    check_data_loss,
    includes_headers,
    offsets_from_json,
    offsets_to_json,
    option_value,
    parse_source_options,
    plan_ranges,
    rate_limit,
    resolve_offsets,
    security_from,
)

log = logging.getLogger("minikafka.spark")

KAFKA_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
                "timestampType int")
HEADERS_FIELD = "headers array<struct<key:string,value:binary>>"


class MinikafkaDataSource(DataSource):
    """``spark.read.format("minikafka")`` / ``readStream`` / ``write`` / ``writeStream``."""

    @classmethod
    def name(cls) -> str:
        return "minikafka"

    def schema(self) -> str:
        include = includes_headers(self.options)
        return KAFKA_SCHEMA + (", " + HEADERS_FIELD if include else "")

    def reader(self, schema: StructType) -> DataSourceReader:
        return MinikafkaBatchReader(parse_source_options(dict(self.options), streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MinikafkaStreamReader(parse_source_options(dict(self.options), streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> MinikafkaWriter:
        return MinikafkaWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> MinikafkaStreamWriter:
        return MinikafkaStreamWriter(dict(self.options), schema)


# ------------------------------------------------------------------ reading


class _RangeReading:
    """What batch and stream readers share: reading one planned range on an executor."""

    opts: SourceOptions
    spark_schema: StructType

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from pyspark.sql.pandas.types import to_arrow_schema

        rng: OffsetRange | None = partition.value
        if rng is None:  # nothing to read: Spark plans one empty partition when partitions() is empty
            return
        arrow_schema = to_arrow_schema(self.spark_schema, timezone="UTC")
        yield from cluster_io.read_range(
            self.opts.bootstrap_servers, rng, include_headers=self.opts.include_headers,
            max_bytes=self.opts.max_partition_fetch_bytes, fail_on_data_loss=self.opts.fail_on_data_loss,
            request_timeout_ms=self.opts.request_timeout_ms, retry_timeout_ms=self.opts.read_retry_timeout_ms,
            arrow_schema=arrow_schema, security=self.opts.security, read_committed=self.opts.read_committed)

    def _view(self) -> ClusterView:
        return ClusterView(self.opts.bootstrap_servers, timeout_s=self.opts.request_timeout_ms / 1000.0,
                           security=self.opts.security)

    def _list(self, view: ClusterView, tps: Sequence[TP], timestamp: int) -> dict[TP, int]:
        if not tps:
            return {}
        return cluster_io.list_offsets(view, {tp: timestamp for tp in tps}, timeout_s=self.opts.request_timeout_ms / 1000,
                                       read_committed=self.opts.read_committed)

    def _starting_offsets(self, view: ClusterView, tps: Sequence[TP], earliest: dict[TP, int],
                          latest: dict[TP, int]) -> dict[TP, int]:
        stamps = None
        if self.opts.starting.by_timestamp:
            wanted = {tp: ts for tp in tps if (ts := self.opts.starting.timestamp_for(tp)) is not None}
            stamps = cluster_io.list_offsets(view, wanted, timeout_s=self.opts.request_timeout_ms / 1000,
                                             read_committed=self.opts.read_committed)
        start = resolve_offsets(self.opts.starting, tps, earliest, latest, stamps)
        start, warnings = check_data_loss(start, earliest, latest, fail_on_data_loss=self.opts.fail_on_data_loss)
        for w in warnings:
            log.warning("%s", w)
        return start


class MinikafkaBatchReader(_RangeReading, DataSourceReader):
    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.spark_schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        # Spark plans in a Python worker it reuses: the next query's planning reuses these channels.
        key = ViewKey(self.opts.bootstrap_servers, self.opts.request_timeout_ms / 1000.0, self.opts.security)
        view = CONNECTIONS.borrow(key)
        try:
            tps = cluster_io.list_partitions(view, self.opts.subscription)
            earliest, latest = self._list(view, tps, -2), self._list(view, tps, -1)
            start = self._starting_offsets(view, tps, earliest, latest)
            end = resolve_offsets(self.opts.ending, tps, earliest, latest)
        except BaseException:
            CONNECTIONS.discard(view)
            raise
        CONNECTIONS.give_back(view)
        for tp, off in list(end.items()):
            if off > latest[tp]:  # only committed records are read (SPEC S3.2; read_committed: the LSO)
                log.warning("%s-%d: endingOffsets %d is above the %s %d; reading up to it", tp[0], tp[1], off,
                            "last stable offset" if self.opts.read_committed else "high watermark", latest[tp])
                end[tp] = latest[tp]
        ranges = plan_ranges(start, end, self.opts.min_partitions)
        log.info("minikafka batch read: %d ranges, %d records", len(ranges), sum(r.size for r in ranges))
        return [InputPartition(r) for r in ranges]


class MinikafkaStreamReader(_RangeReading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.spark_schema = schema
        self._cluster: ClusterView | None = None
        self._available_now_target: dict[TP, int] | None = None
        self._latest: dict[TP, int] | None = None  # the HWs latestOffset saw, for reportLatestOffset

    @property
    def cluster(self) -> ClusterView:
        if self._cluster is None:
            self._cluster = self._view()
        return self._cluster

    def initialOffset(self) -> dict[str, Any]:
        tps = cluster_io.list_partitions(self.cluster, self.opts.subscription)
        earliest, latest = self._list(self.cluster, tps, -2), self._list(self.cluster, tps, -1)
        return offsets_to_json(self._starting_offsets(self.cluster, tps, earliest, latest))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = cluster_io.list_partitions(self.cluster, self.opts.subscription)
        self._available_now_target = self._list(self.cluster, tps, -1)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = offsets_from_json(start)
        tps = cluster_io.list_partitions(self.cluster, self.opts.subscription)
        new = [tp for tp in tps if tp not in begin]
        if new:  # partitions added since the last batch are read from their beginning, as in Spark
            begin.update(self._list(self.cluster, new, -2))
        latest = self._latest = self._list(self.cluster, tps, -1)
        if self._available_now_target is not None:
            latest = {tp: min(hi, self._available_now_target.get(tp, begin[tp])) for tp, hi in latest.items()}
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        return offsets_to_json(latest)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        # Spark asks right after latestOffset: report what that call listed rather than ask again.
        return offsets_to_json(self._latest) if self._latest else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, until = offsets_from_json(start), offsets_from_json(end)
        tps = sorted(until)
        earliest = self._list(self.cluster, tps, -2)
        begin = {tp: begin.get(tp, earliest[tp]) for tp in tps}
        # ``end`` holds the HWs latestOffset listed: a start beyond them means the topic went back.
        begin, warnings = check_data_loss(begin, earliest, until, fail_on_data_loss=self.opts.fail_on_data_loss)
        for w in warnings:
            log.warning("%s", w)
        until = {tp: max(until[tp], begin[tp]) for tp in tps}
        return [InputPartition(r) for r in plan_ranges(begin, until, self.opts.min_partitions)]

    def commit(self, end: dict[str, Any]) -> None:
        pass  # offsets live in Spark's checkpoint, as with Spark's Kafka source

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


# ------------------------------------------------------------------ writing


@dataclass(frozen=True)
class RecordsWritten(WriterCommitMessage):
    records: int


def validate_sink_schema(schema: StructType, topic_option: str | None) -> None:
    """Spark's Kafka-sink column rules, checked on the driver before any task starts."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    names = ", ".join(f.name for f in schema.fields)
    if "value" not in fields:
        raise SparkOptionError(f"the DataFrame to write needs a 'value' column (binary or string); it has: {names}")
    for col in ("value", "key"):
        if col in fields and not isinstance(fields[col], BinaryType | StringType):
            raise SparkOptionError(f"column {col!r} must be binary or string, not {fields[col].simpleString()}")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise SparkOptionError(f"column 'topic' must be a string, not {fields['topic'].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise SparkOptionError(f"column 'partition' must be an int, not {fields['partition'].simpleString()}")
    if "headers" in fields:
        h = fields["headers"]
        ok = (isinstance(h, ArrayType) and isinstance(h.elementType, StructType)
              and [f.name for f in h.elementType.fields] == ["key", "value"]
              and isinstance(h.elementType.fields[0].dataType, StringType)
              and isinstance(h.elementType.fields[1].dataType, BinaryType))
        if not ok:
            raise SparkOptionError(f"column 'headers' must be array<struct<key:string,value:binary>>, "
                                   f"not {h.simpleString()}")
    if "topic" not in fields and not topic_option:
        raise SparkOptionError("no topic to write to: give a 'topic' column or .option('topic', NAME)")


class _Sink:
    """Both writers. ``transactionalIdPrefix`` (KIP-98): each task writes its rows in one transaction
    with transactional id ``<prefix>-<Spark partition id>``, committed at the end of the task's
    write and aborted when it fails (read_committed readers see a task's rows all or none). A
    retried or speculative attempt of the task uses the same id, so its init_transactions fences
    the earlier attempt and aborts that attempt's open transaction. What is not covered: an attempt
    that committed and then was lost before Spark recorded its success is written again by the
    retry (Spark's DataSource API has no two-phase commit across tasks), and a job that fails after
    some tasks committed keeps their rows - the guarantee is per task, not per job."""

    def __init__(self, options: dict[str, Any], schema: StructType) -> None:
        self.bootstrap = bootstrap_from(options)
        self.security = security_from(options)
        self.topic = option_value(options, "topic")
        self.txn_prefix = option_value(options, "transactionalIdPrefix")
        if self.txn_prefix is not None and not self.txn_prefix.strip():
            raise SparkOptionError("transactionalIdPrefix must not be empty")
        validate_sink_schema(schema, self.topic)
        if self.topic:  # fail fast on the driver, before tasks start
            view = ClusterView(self.bootstrap, security=self.security)
            try:
                cluster_io.check_topics_exist(view, [self.topic])
            finally:
                view.close()

    def write(self, iterator: Iterator[Any]) -> RecordsWritten:
        txn_id = None
        if self.txn_prefix is not None:
            from pyspark import TaskContext

            ctx = TaskContext.get()
            if ctx is None:
                raise SparkOptionError("transactionalIdPrefix: no Spark task context to name the transaction by")
            txn_id = f"{self.txn_prefix}-{ctx.partitionId()}"
        return RecordsWritten(cluster_io.write_arrow_batches(self.bootstrap, iterator, self.topic,
                                                             security=self.security, transactional_id=txn_id))


class MinikafkaWriter(_Sink, DataSourceArrowWriter):
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.records for m in messages if isinstance(m, RecordsWritten))
        log.info("minikafka sink: %d records written", total)


class MinikafkaStreamWriter(_Sink, DataSourceStreamArrowWriter):
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = sum(m.records for m in messages if isinstance(m, RecordsWritten))
        log.info("minikafka sink: batch %d, %d records written", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Records already acknowledged stay written (at-least-once, as Spark's Kafka sink).
        log.warning("minikafka sink: batch %d aborted", batchId)
