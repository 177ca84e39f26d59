"""Spark Kafka-source options, offset resolution and range planning (pure: no I/O, no Spark).

Theory of operation
-------------------
The connector is split like Spark's own Kafka source: the *driver* turns the
options into concrete ``[from, until)`` offset ranges per topic-partition
(``KafkaOffsetReader`` + ``KafkaOffsetRangeCalculator``), and each *executor*
task reads one range straight from the partition's leader. Everything the
driver decides lives here, as functions of the options and of offsets the shell
has listed from the cluster:

- ``parse_source_options``: the option names and meanings of Spark's Kafka
  source (``subscribe`` / ``subscribePattern`` / ``assign``, ``startingOffsets``
  / ``endingOffsets`` as ``earliest`` / ``latest`` / per-partition JSON with -2
  and -1, ``startingTimestamp`` / ``startingOffsetsByTimestamp``,
  ``failOnDataLoss``, ``minPartitions``, ``maxOffsetsPerTrigger``,
  ``includeHeaders``, ``kafka.isolation.level``), with Spark's validation (exactly one subscription,
  batch queries cannot start at ``latest`` nor end at ``earliest``, streams take
  no ``endingOffsets``).
- ``resolve_offsets``: an ``OffsetSpec`` plus the listed earliest / latest /
  by-timestamp offsets -> one offset per partition; ``check_data_loss`` applies
  ``failOnDataLoss`` (a start below the log start was deleted by retention).
- ``plan_ranges``: one range per partition, split into more when
  ``minPartitions`` asks (Spark's proportional split); ``rate_limit``: Spark's
  ``maxOffsetsPerTrigger`` prorating over partitions.
- ``after_fetch``: where an executor's range read goes on after one Fetch, with
  Spark's rule for gaps in offsets: a compacted log has them (the cleaner
  removed older records of a key, offsets never move), and they are legal as
  long as the log start is at or below the offset expected (Spark's
  ``KafkaDataConsumer.fetchRecord``); only a log start beyond it is data loss. A
  range whose tail was compacted away ends at its ``until`` offset.
- ``offsets_to_json`` / ``offsets_from_json``: the streaming offset
  ``{topic: {partition: offset}}`` with string partition keys, as Spark writes it.

"latest" always means the high watermark: only committed records are ever read
(SPEC S3.2), and a range is fixed once planned, so a read is repeatable. With
``kafka.isolation.level=read_committed`` (KIP-98, as Spark's Kafka source passes it
to its consumer) "latest" is the last stable offset instead (ListOffsets with
read_committed), so a range never reaches into an undecided transaction, and the
executors fetch read_committed and drop the records of aborted transactions.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from client.discovery import BOOTSTRAP_ENV
from proto.transport import PLAINTEXT_SECURITY, ChannelSecurity

EARLIEST = -2
LATEST = -1

TP = tuple[str, int]


class SparkOptionError(ValueError):
    """A bad or missing option of the minikafka Spark source or sink (raised on the driver)."""


class DataLossError(RuntimeError):
    """Offsets the query needs are gone (retention, or a recreated topic) and failOnDataLoss=true."""


@dataclass(frozen=True)
class Subscription:
    """Which topic-partitions a query reads: Spark's subscribe / subscribePattern / assign."""

    kind: Literal["subscribe", "subscribePattern", "assign"]
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assigned: tuple[TP, ...] = ()

    def topic_filter(self) -> tuple[str, ...] | None:
        """The topics to ask metadata for; None = every topic (a pattern needs all names)."""
        if self.kind == "subscribe":
            return self.topics
        if self.kind == "assign":
            return tuple(dict.fromkeys(t for t, _p in self.assigned))
        return None

    def select(self, available: Mapping[str, Sequence[int]]) -> list[TP]:
        """The partitions to read, given ``{topic: partitions}`` from the cluster's metadata."""
        if self.kind == "assign":
            missing = [tp for tp in self.assigned if tp[1] not in available.get(tp[0], ())]
            if missing:
                raise SparkOptionError(f"assigned partitions do not exist: {_fmt(missing)}")
            return sorted(self.assigned)
        if self.kind == "subscribe":
            names: Iterable[str] = [t for t in self.topics if t in available]
        else:
            rx = re.compile(self.pattern)
            names = [t for t in available if rx.fullmatch(t)]
        return sorted((t, p) for t in names for p in available[t])


@dataclass(frozen=True)
class OffsetSpec:
    """Where a query starts or ends, per partition.

    ``default`` (EARLIEST or LATEST) applies to partitions that ``offsets`` does not name;
    ``offsets`` holds absolute offsets or -2/-1 per partition. With ``timestamp`` (one for all
    partitions) or ``timestamps`` (per partition), the offset is the first record at or after it;
    ``timestamp_strategy`` says what happens when there is none: "error" or "latest".
    """

    default: int = EARLIEST
    offsets: Mapping[TP, int] = field(default_factory=dict)
    timestamp: int | None = None
    timestamps: Mapping[TP, int] = field(default_factory=dict)
    timestamp_strategy: Literal["error", "latest"] = "error"
    option: str = "startingOffsets"  # for error messages

    @property
    def by_timestamp(self) -> bool:
        return self.timestamp is not None or bool(self.timestamps)

    def timestamp_for(self, tp: TP) -> int | None:
        if self.timestamp is not None:
            return self.timestamp
        return self.timestamps.get(tp)


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_offsets_per_trigger: int | None = None
    include_headers: bool = False
    max_partition_fetch_bytes: int = 1 << 20
    request_timeout_ms: int = 30_000
    read_retry_timeout_ms: int = 60_000
    security: ChannelSecurity = PLAINTEXT_SECURITY
    read_committed: bool = False  # kafka.isolation.level=read_committed


@dataclass(frozen=True)
class OffsetRange:
    """One Spark input partition: records ``from_offset <= offset < until_offset`` of one partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return max(0, self.until_offset - self.from_offset)


# ------------------------------------------------------------------ parsing


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    # Spark's options are case-insensitive (CaseInsensitiveDict); the values are not.
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def option_value(options: Mapping[str, str], name: str) -> str | None:
    """One option, looked up case-insensitively as Spark does."""
    return _lower(options).get(name.lower())


def includes_headers(options: Mapping[str, str]) -> bool:
    return _bool(_lower(options), "includeHeaders", False)


def bootstrap_from(options: Mapping[str, str]) -> str:
    opts = _lower(options)
    # The driver's $MINIKAFKA_BOOTSTRAP stands in for a missing option, as for the library and CLI.
    servers = (opts.get("bootstrap.servers") or opts.get("kafka.bootstrap.servers")
               or os.environ.get(BOOTSTRAP_ENV, "").strip())
    if not servers:
        raise SparkOptionError("option 'bootstrap.servers' (or 'kafka.bootstrap.servers') is required "
                               f"unless ${BOOTSTRAP_ENV} is set, e.g. .option('bootstrap.servers', '127.0.0.1:9392')")
    return servers


_JAAS_FIELD = re.compile(r'(username|password)\s*=\s*"([^"]*)"')


def security_from(options: Mapping[str, str]) -> ChannelSecurity:
    """TLS and SCRAM from Spark's Kafka-source option names: ``kafka.security.protocol``,
    ``kafka.ssl.truststore.location`` (the CA, PEM), ``kafka.ssl.keystore.location`` (client
    certificate and key, PEM), ``kafka.sasl.mechanism`` and the credentials, either
    ``kafka.sasl.jaas.config`` (``... username="u" password="p";``, as Spark takes them) or
    ``kafka.sasl.username`` / ``kafka.sasl.password``."""
    opts = _lower(options)
    props = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
    jaas = props.get("sasl.jaas.config")
    if jaas:
        fields = dict(_JAAS_FIELD.findall(jaas))
        props.setdefault("sasl.username", fields.get("username", ""))
        props.setdefault("sasl.password", fields.get("password", ""))
    try:
        return ChannelSecurity.from_properties(props)
    except ValueError as e:
        raise SparkOptionError(f"security options: {e}") from None


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise SparkOptionError(f"option {name!r} must be true or false, got {raw!r}")


def _positive_int(opts: Mapping[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise SparkOptionError(f"option {name!r} must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise SparkOptionError(f"option {name!r} must be a positive integer, got {raw!r}")
    return value


def _json_object(name: str, raw: str) -> dict[str, object]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise SparkOptionError(f"option {name!r} is not valid JSON ({e.msg}): {raw!r}") from None
    if not isinstance(value, dict):
        raise SparkOptionError(f"option {name!r} must be a JSON object, got {raw!r}")
    return value


def _partition_map(name: str, raw: str) -> dict[TP, int]:
    """``{"topicA":{"0":23,"1":-1}}`` -> {("topicA", 0): 23, ("topicA", 1): -1}."""
    out: dict[TP, int] = {}
    for topic, parts in _json_object(name, raw).items():
        if not isinstance(parts, dict):
            raise SparkOptionError(f"option {name!r}: topic {topic!r} must map partitions to numbers")
        for p, v in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise SparkOptionError(f"option {name!r}: {p!r} of topic {topic!r} is not a partition") from None
            if isinstance(v, bool) or not isinstance(v, int):
                raise SparkOptionError(f"option {name!r}: {topic}-{partition} must be an integer, got {v!r}")
            out[(topic, partition)] = v
    return out


ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


def _read_committed(opts: Mapping[str, str]) -> bool:
    """``kafka.isolation.level``: the consumer's isolation.level, read_uncommitted by default (Kafka's)."""
    raw = opts.get("kafka.isolation.level")
    if raw is None:
        return False
    level = raw.strip().lower()
    if level not in ISOLATION_LEVELS:
        raise SparkOptionError(f"option 'kafka.isolation.level' must be read_uncommitted or read_committed, "
                               f"got {raw!r}")
    return level == "read_committed"


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(given) != 1:
        raise SparkOptionError("exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be "
                               f"given (got {len(given)})")
    kind = given[0]
    raw = opts[kind]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise SparkOptionError("option 'subscribe' names no topic")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribepattern":
        if not raw.strip():
            raise SparkOptionError("option 'subscribePattern' is empty")
        try:
            re.compile(raw)
        except re.error as e:
            raise SparkOptionError(f"option 'subscribePattern' is not a valid pattern: {e}") from None
        return Subscription("subscribePattern", pattern=raw)
    assigned: list[TP] = []
    for topic, parts in _json_object("assign", raw).items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in parts):
            raise SparkOptionError(f"option 'assign': topic {topic!r} must map to a list of partition numbers")
        assigned.extend((topic, int(p)) for p in parts)
    if not assigned:
        raise SparkOptionError("option 'assign' names no partition")
    return Subscription("assign", assigned=tuple(dict.fromkeys(assigned)))


def _offset_spec(opts: Mapping[str, str], name: str, default: int, *, forbidden: int) -> OffsetSpec:
    raw = opts.get(name.lower())
    words = {"earliest": EARLIEST, "latest": LATEST}
    if raw is None:
        return OffsetSpec(default=default, option=name)
    text = raw.strip()
    if text.lower() in words:
        value = words[text.lower()]
        if value == forbidden:
            raise SparkOptionError(f"option {name!r} cannot be {text!r} for this query "
                                   f"({'batch queries cannot start at latest' if forbidden == LATEST else 'batch queries cannot end at earliest'})")
        return OffsetSpec(default=value, option=name)
    offsets = _partition_map(name, text)
    bad = [tp for tp, v in offsets.items() if v == forbidden or v < EARLIEST]
    if bad:
        raise SparkOptionError(f"option {name!r}: offsets of {_fmt(bad)} are not allowed here "
                               f"({forbidden} is not accepted, and offsets must be >= -2)")
    return OffsetSpec(default=default, offsets=offsets, option=name)


def _timestamp_spec(opts: Mapping[str, str], default: OffsetSpec) -> OffsetSpec:
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise SparkOptionError(f"option 'startingOffsetsByTimestampStrategy' must be error or latest, got {strategy!r}")
    strat: Literal["error", "latest"] = "error" if strategy == "error" else "latest"
    if "startingtimestamp" in opts:  # Spark: startingTimestamp wins over the other two
        raw = opts["startingtimestamp"]
        try:
            ts = int(raw)
        except ValueError:
            raise SparkOptionError(f"option 'startingTimestamp' must be milliseconds since the epoch, "
                                   f"got {raw!r}") from None
        if ts < 0:
            raise SparkOptionError(f"option 'startingTimestamp' must be >= 0, got {raw!r}")
        return OffsetSpec(default=default.default, timestamp=ts, timestamp_strategy=strat, option="startingTimestamp")
    if "startingoffsetsbytimestamp" in opts:
        stamps = _partition_map("startingOffsetsByTimestamp", opts["startingoffsetsbytimestamp"])
        return OffsetSpec(default=default.default, timestamps=stamps, timestamp_strategy=strat,
                          option="startingOffsetsByTimestamp")
    return default


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Spark Kafka-source options -> ``SourceOptions``; a ``SparkOptionError`` names what is wrong."""
    opts = _lower(options)
    if streaming and "endingoffsets" in opts:
        raise SparkOptionError("option 'endingOffsets' is for batch queries only (streams run until stopped)")
    starting = _offset_spec(opts, "startingOffsets", LATEST if streaming else EARLIEST,
                            forbidden=-99 if streaming else LATEST)
    starting = _timestamp_spec(opts, starting)
    ending = OffsetSpec(default=LATEST) if streaming else _offset_spec(opts, "endingOffsets", LATEST,
                                                                       forbidden=EARLIEST)
    max_offsets = _positive_int(opts, "maxOffsetsPerTrigger")
    if max_offsets is not None and not streaming:
        max_offsets = None  # Spark ignores it for batch queries
    return SourceOptions(
        bootstrap_servers=bootstrap_from(opts),
        subscription=_subscription(opts),
        starting=starting,
        ending=ending,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        min_partitions=_positive_int(opts, "minPartitions"),
        max_offsets_per_trigger=max_offsets,
        include_headers=_bool(opts, "includeHeaders", False),
        max_partition_fetch_bytes=_positive_int(opts, "kafka.max.partition.fetch.bytes") or 1 << 20,
        request_timeout_ms=_positive_int(opts, "kafka.request.timeout.ms") or 30_000,
        read_retry_timeout_ms=_positive_int(opts, "readRetryTimeoutMs") or 60_000,
        security=security_from(opts),
        read_committed=_read_committed(opts),
    )


# ------------------------------------------------------------------ offsets


def resolve_offsets(spec: OffsetSpec, tps: Sequence[TP], earliest: Mapping[TP, int], latest: Mapping[TP, int],
                    by_timestamp: Mapping[TP, int | None] | None = None) -> dict[TP, int]:
    """One concrete offset per partition.

    ``earliest`` / ``latest`` are the log start and the high watermark; ``by_timestamp`` the first
    offset at or after the partition's timestamp (None: no such record). Absolute offsets in the
    spec are returned as given: ``check_data_loss`` and the range planner judge them.
    """
    named = set(spec.timestamps) if spec.timestamps else set(spec.offsets)
    if named and named != set(tps):
        # Spark's rule: per-partition offsets must name every partition the query reads.
        missing, extra = sorted(set(tps) - named), sorted(named - set(tps))
        raise SparkOptionError(
            f"option {spec.option!r} must give every partition the query reads (-2 = earliest, -1 = latest)"
            + (f"; missing: {_fmt(missing)}" if missing else "") + (f"; not read: {_fmt(extra)}" if extra else ""))
    out: dict[TP, int] = {}
    for tp in tps:
        if spec.by_timestamp and spec.timestamp_for(tp) is not None:
            found = (by_timestamp or {}).get(tp)
            if found is None or found < 0:
                if spec.timestamp_strategy == "error":
                    raise SparkOptionError(f"no record at or after timestamp {spec.timestamp_for(tp)} in "
                                           f"{tp[0]}-{tp[1]} (set startingOffsetsByTimestampStrategy=latest "
                                           "to start at the latest offset instead)")
                found = latest[tp]
            out[tp] = found
            continue
        value = spec.offsets.get(tp, spec.default)
        out[tp] = earliest[tp] if value == EARLIEST else latest[tp] if value == LATEST else value
    return out


def check_data_loss(start: Mapping[TP, int], earliest: Mapping[TP, int], latest: Mapping[TP, int], *,
                    fail_on_data_loss: bool) -> tuple[dict[TP, int], list[str]]:
    """Clamp starts into [log start, HW]; raise ``DataLossError`` or return warnings as Spark does."""
    out: dict[TP, int] = {}
    warnings: list[str] = []
    for tp, off in start.items():
        lo, hi = earliest[tp], latest[tp]
        if off < lo:
            msg = (f"{tp[0]}-{tp[1]}: offsets {off}..{lo - 1} are gone (log start is {lo}); "
                   "some data may have been lost because they are not available any more")
            if fail_on_data_loss:
                raise DataLossError(msg + " (set failOnDataLoss=false to skip them)")
            warnings.append(msg)
            off = lo
        elif off > hi:
            msg = f"{tp[0]}-{tp[1]}: offset {off} is beyond the high watermark {hi}"
            if fail_on_data_loss:
                raise DataLossError(msg + " (the topic may have been deleted and recreated; "
                                          "set failOnDataLoss=false to go on from the high watermark)")
            warnings.append(msg)
            off = hi
        out[tp] = off
    return out, warnings


def plan_ranges(start: Mapping[TP, int], end: Mapping[TP, int], min_partitions: int | None = None) -> list[OffsetRange]:
    """Spark's KafkaOffsetRangeCalculator: one range per partition, or a proportional split of the
    larger ones into at least ``min_partitions`` ranges when there are fewer. Empty ranges are dropped."""
    ranges = [OffsetRange(t, p, start[(t, p)], end[(t, p)]) for (t, p) in sorted(start) if (t, p) in end]
    for r in ranges:
        if r.until_offset < r.from_offset:
            raise DataLossError(f"{r.topic}-{r.partition}: ending offset {r.until_offset} is before starting offset "
                                f"{r.from_offset}")
    ranges = [r for r in ranges if r.size > 0]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    # Largest remainder: shares proportional to size, at least one each, summing to min_partitions
    # (Spark rounds each share on its own and can end up below minPartitions; we do not).
    shares = [r.size / total * min_partitions for r in ranges]
    counts = [max(1, int(x)) for x in shares]
    by_remainder = sorted(range(len(ranges)), key=lambda i: shares[i] - int(shares[i]), reverse=True)
    for i in by_remainder:
        if sum(counts) >= min_partitions:
            break
        counts[i] += 1
    out: list[OffsetRange] = []
    for r, n in zip(ranges, counts, strict=True):
        parts = min(n, r.size)
        for i in range(parts):
            lo = r.from_offset + r.size * i // parts
            hi = r.from_offset + r.size * (i + 1) // parts
            out.append(OffsetRange(r.topic, r.partition, lo, hi))
    return out


def after_fetch(position: int, until: int, *, next_offset: int, first_offset: int | None, high_watermark: int,
                log_start_offset: int) -> tuple[int, str | None]:
    """A range read of ``[position, until)`` after one Fetch at ``position``: the offset to go on
    from, and a data-loss message when offsets in between are missing because the log start moved
    past them (retention, DeleteRecords; None for gaps compaction left, which are legal).

    ``next_offset``: where the decoded batches end (clamped to ``until``; ``position`` when no batch
    past it was decoded); ``first_offset``: the first offset the Fetch holds past ``position`` (its
    first row's, or the base of its first batch when none of its records is in the range), None when
    it returned no batch at all. As Spark's Kafka source: a record beyond the one expected is data
    loss only when the log start is beyond the expected offset too; otherwise the offsets between
    were removed by the cleaner and are skipped. A first batch at or past ``until`` means the rest
    of the range was compacted away: the range is done. So is an empty answer while the high
    watermark is at or past ``until`` (every record below the high watermark would have been
    returned, so none is left in the range); below it the read waits (a new leader catching up)."""
    loss = None
    if first_offset is not None and first_offset > position and log_start_offset > position:
        loss = (f"offsets {position}..{min(first_offset, log_start_offset, until) - 1} were deleted before they "
                f"were read (log start is {log_start_offset})")
    if next_offset > position:
        return next_offset, loss
    if first_offset is not None and first_offset >= until:
        return until, loss
    if first_offset is None and high_watermark >= until and log_start_offset <= position:
        return until, None
    return position, None


def rate_limit(start: Mapping[TP, int], latest: Mapping[TP, int], max_offsets: int) -> dict[TP, int]:
    """Spark's maxOffsetsPerTrigger: share ``max_offsets`` over partitions by how far each lags."""
    sizes = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(sizes.values())
    if total <= max_offsets:
        return dict(latest)
    out: dict[TP, int] = {}
    for tp, hi in latest.items():
        begin = start.get(tp, hi)
        size = sizes[tp]
        if size == 0:
            out[tp] = hi
            continue
        prorate = max_offsets * size / total
        # Spark: at least one offset for a lagging partition, so every partition makes progress.
        step = int(prorate) if prorate >= 1 else 1
        out[tp] = min(hi, begin + step)
    return out


def offsets_to_json(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (t, p), off in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = off
    return out


def offsets_from_json(value: Mapping[str, Mapping[str, int]] | str) -> dict[TP, int]:
    data = json.loads(value) if isinstance(value, str) else value
    return {(t, int(p)): int(off) for t, parts in data.items() for p, off in parts.items()}


def _fmt(tps: Iterable[TP]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps)
