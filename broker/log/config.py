"""Per-log configuration with Kafka's topic-level names, defaults and bounds.

Every topic config has a range (``TOPIC_CONFIG_BOUNDS``, Kafka's LogConfig ranges where Kafka has
them): a value outside it is INVALID_CONFIG. On top of that, ``check_policy`` applies the broker's
floor on what makes files (``min.segment.bytes``, ``min.segment.ms``): any client may set topic
configs, and ``segment.bytes=100`` would cost an open file per batch (SPEC S13.4).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final

from proto.errors import InvalidConfigError

LONG_MAX: Final = (1 << 63) - 1
INT_MAX: Final = (1 << 31) - 1
# The largest batch (and the largest decompressed batch) any topic may allow: Kafka's
# socket.request.max.bytes default, the size of the largest request a broker reads.
MAX_MESSAGE_BYTES_LIMIT: Final = 104857600


CLEANUP_POLICIES: Final = ("compact", "delete")


def normalize_cleanup_policy(raw: str) -> str:
    """``delete`` | ``compact`` | ``compact,delete`` (either order, spaces allowed); InvalidConfigError else."""
    items = [x.strip().lower() for x in raw.split(",")]
    if not items or any(x not in CLEANUP_POLICIES for x in items):
        raise InvalidConfigError(f"Invalid value {raw!r} for configuration cleanup.policy: "
                                 f"String must be one of: compact, delete (or both, comma-separated)")
    return ",".join(sorted(set(items)))


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's ``log.cleaner.*`` settings (Kafka's CleanerConfig); not topic configs."""

    enable: bool = True
    threads: int = 1
    io_max_bytes_per_second: float = 1.7976931348623157e308  # Kafka's Double.MaxValue: no throttle
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_size: int = 512 * 1024
    io_buffer_load_factor: float = 0.9
    backoff_ms: int = 15000


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 168 * 3600 * 1000
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1048588
    file_delete_delay_ms: int = 60000
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    message_timestamp_type: str = "CreateTime"
    message_timestamp_difference_max_ms: int = LONG_MAX
    cleanup_policy: str = "delete"
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 86400000
    compression_type: str = "producer"
    # Accepted and ignored (TOPIC_CONFIGS says why): kept so that DescribeConfigs shows them.
    follower_replication_throttled_replicas: str = ""
    leader_replication_throttled_replicas: str = ""
    message_downconversion_enable: bool = True
    message_format_version: str = "2.8-IV1"
    preallocate: bool = False
    segment_jitter_ms: int = 0
    # Broker-wide, not a topic config (not in TOPIC_CONFIG_NAMES): see the module docstring.
    cleaner: CleanerConfig = CleanerConfig()

    @property
    def compact(self) -> bool:
        """cleanup.policy includes compact: the log cleaner rewrites this log (asked on every append:
        the policy is normalized, so no split)."""
        return self.cleanup_policy.startswith("compact")

    @property
    def delete(self) -> bool:
        """cleanup.policy includes delete: retention by time and size applies."""
        return self.cleanup_policy.endswith("delete")

    @property
    def max_index_entries(self) -> int:
        return self.segment_index_bytes // 8

    def with_overrides(self, overrides: Mapping[str, str]) -> LogConfig:
        """A copy with Kafka-named overrides applied (``segment.bytes`` -> segment_bytes)."""
        changes: dict[str, object] = {}
        for key, raw in overrides.items():
            d = check_topic_config_name(key)
            changes[d.attr] = parse_topic_config(d, raw)
        cfg = replace(self, **changes)  # type: ignore[arg-type]
        cfg.validate()
        return cfg

    def to_topic_configs(self) -> dict[str, str]:
        out = {}
        for name, attr in TOPIC_CONFIG_NAMES.items():
            v = getattr(self, attr)
            out[name] = str(v).lower() if isinstance(v, bool) else str(v)
        return out

    def validate(self) -> None:
        """Every value within its range (TOPIC_CONFIG_BOUNDS); raises InvalidConfigError."""
        for name, attr in TOPIC_CONFIG_NAMES.items():
            bounds = TOPIC_CONFIG_BOUNDS.get(name)
            value = getattr(self, attr)
            if bounds is not None and not isinstance(value, bool) and not bounds[0] <= value <= bounds[1]:
                raise InvalidConfigError(f"{name} must be between {bounds[0]} and {bounds[1]}, got {value}")
        if self.compression_type not in COMPRESSION_TYPES:
            raise InvalidConfigError(f"compression.type must be one of {', '.join(COMPRESSION_TYPES)}")
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            raise InvalidConfigError("message.timestamp.type must be CreateTime or LogAppendTime")
        if normalize_cleanup_policy(self.cleanup_policy) != self.cleanup_policy:
            raise InvalidConfigError(f"cleanup.policy {self.cleanup_policy!r} is not normalized")
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            # Kafka's LogConfig.validateValues.
            raise InvalidConfigError(f"conflict topic config setting min.compaction.lag.ms "
                                     f"({self.min_compaction_lag_ms}) > max.compaction.lag.ms "
                                     f"({self.max_compaction_lag_ms})")

    def check_policy(self, min_segment_bytes: int, min_segment_ms: int) -> None:
        """The broker's floor on segment size and age (min.segment.bytes, min.segment.ms)."""
        if self.segment_bytes < min_segment_bytes:
            raise InvalidConfigError(f"segment.bytes must be at least {min_segment_bytes} (min.segment.bytes), "
                                     f"got {self.segment_bytes}")
        if self.segment_ms < min_segment_ms:
            raise InvalidConfigError(f"segment.ms must be at least {min_segment_ms} (min.segment.ms), "
                                     f"got {self.segment_ms}")


# ---------------------------------------------------------------- the topic config table

SUPPORTED: Final = "supported"
IGNORED: Final = "accepted-and-ignored"
REFUSED: Final = "refused"

# Kafka's ConfigDef types, as DescribeConfigs v3+ reports them (config_type).
CONFIG_TYPE_IDS: Final = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7,
                          "class": 8, "password": 9}
_TYPE_LIMITS: Final = {"int": (-(1 << 31), INT_MAX), "long": (-(1 << 63), LONG_MAX)}

COMPRESSION_TYPES: Final = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES: Final = ("CreateTime", "LogAppendTime")


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    """One topic config of Kafka 2.8's LogConfig: its type, Kafka's default (as DescribeConfigs
    shows it), the range enforced here, what the broker does with it, the broker configs that
    give its default (Kafka's ``TopicConfigSynonyms``, in Kafka's order) and its documentation."""

    name: str
    attr: str
    type: str
    default: str
    status: str = SUPPORTED
    low: float | None = None
    high: float | None = None
    valid: tuple[str, ...] = ()
    # Why an accepted-and-ignored config is ignored, or why a refused one is refused; or, for a
    # supported one, where its range differs from Kafka's.
    reason: str = ""
    synonyms: tuple[str, ...] = ()
    doc: str = ""

    @property
    def valid_text(self) -> str:
        """The valid values as Kafka's documentation words them."""
        if self.valid:
            return "[" + ", ".join(self.valid) + "]"
        if self.low is None and self.high is None:
            return ""
        lo = "..." if self.low is None else _num(self.low)
        hi = "..." if self.high is None or self.high >= _TYPE_LIMITS.get(self.type, (0, LONG_MAX))[1] else \
            _num(self.high)
        return f"[{lo},...,{hi}]" if hi != "..." else f"[{lo},...]"


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def _d(name: str, type_: str, default: str, *, status: str = SUPPORTED, low: float | None = None,
       high: float | None = None, valid: tuple[str, ...] = (), reason: str = "",
       synonyms: tuple[str, ...] = (), doc: str = "") -> TopicConfigDef:
    return TopicConfigDef(name, name.replace(".", "_"), type_, default, status, low, high, valid, reason,
                          synonyms, doc)


_THROTTLED_REASON: Final = ("no replication quotas here: replica fetches are bounded by replica.fetch.max.bytes "
                            "and the leader's byte budget instead; the value is validated as Kafka does and kept")

# Every topic config of Kafka 2.8 (LogConfig.configDef), alphabetically - the single source of topic
# config names, types, defaults and ranges: LogConfig.with_overrides, CreateTopics / AlterConfigs /
# IncrementalAlterConfigs validation, DescribeConfigs and the README's table all read it.
TOPIC_CONFIGS: Final[tuple[TopicConfigDef, ...]] = (
    _d("cleanup.policy", "list", "delete", valid=CLEANUP_POLICIES, synonyms=("log.cleanup.policy",),
       doc="A string that is either \"delete\" or \"compact\" or both: the retention policy of old log "
           "segments (delete: by retention.ms / retention.bytes; compact: the log cleaner keeps the latest "
           "value of every key)."),
    _d("compression.type", "string", "producer", valid=COMPRESSION_TYPES, synonyms=("compression.type",),
       doc="The final compression type of the topic's batches: 'producer' keeps the producer's codec; "
           "'uncompressed', 'gzip', 'snappy', 'lz4' and 'zstd' make the leader recompress batches written "
           "with another codec."),
    _d("delete.retention.ms", "long", "86400000", low=0, synonyms=("log.cleaner.delete.retention.ms",),
       doc="How long delete tombstones are kept for log compacted topics: a consumer starting from offset 0 "
           "within this time sees the tombstone."),
    _d("file.delete.delay.ms", "long", "60000", low=0, synonyms=("log.segment.delete.delay.ms",),
       doc="The time to wait before deleting a file from the filesystem."),
    _d("flush.messages", "long", str(LONG_MAX), low=0, synonyms=("log.flush.interval.messages",),
       doc="The number of messages written to a log partition between forced fsyncs."),
    _d("flush.ms", "long", str(LONG_MAX), low=0, synonyms=("log.flush.interval.ms",),
       doc="The time between forced fsyncs of the log."),
    _d("follower.replication.throttled.replicas", "list", "", status=IGNORED, reason=_THROTTLED_REASON,
       doc="A list of replicas whose log replication should be throttled on the follower side: "
           "[PartitionId]:[BrokerId],... or the wildcard '*'."),
    _d("index.interval.bytes", "int", "4096", low=0, synonyms=("log.index.interval.bytes",),
       doc="How frequently an entry is added to the offset index, in bytes of log."),
    _d("leader.replication.throttled.replicas", "list", "", status=IGNORED, reason=_THROTTLED_REASON,
       doc="A list of replicas whose log replication should be throttled on the leader side: "
           "[PartitionId]:[BrokerId],... or the wildcard '*'."),
    _d("max.compaction.lag.ms", "long", str(LONG_MAX), low=1, synonyms=("log.cleaner.max.compaction.lag.ms",),
       doc="The maximum time a message will remain ineligible for compaction in the log."),
    _d("max.message.bytes", "int", "1048588", low=0, high=MAX_MESSAGE_BYTES_LIMIT, synonyms=("message.max.bytes",),
       reason=f"at most {MAX_MESSAGE_BYTES_LIMIT} (socket.request.max.bytes' default): a larger batch could "
              "never arrive (Kafka: [0,...])",
       doc="The largest record batch size allowed, after compression if compression is enabled."),
    _d("message.downconversion.enable", "boolean", "true", status=IGNORED,
       synonyms=("log.message.downconversion.enable",),
       reason="the broker never down-converts: it serves only Fetch versions that read record format v2",
       doc="Whether down-conversion of the message format is enabled to satisfy consume requests."),
    _d("message.format.version", "string", "2.8-IV1", status=IGNORED, synonyms=("log.message.format.version",),
       reason="every batch is record format v2 (magic 2); versions 0.11.0 to 2.8 (all v2) are accepted and "
              "change nothing, older ones (message formats v0 and v1) are refused",
       doc="The message format version the broker uses to append messages to the logs."),
    _d("message.timestamp.difference.max.ms", "long", str(LONG_MAX), low=0,
       synonyms=("log.message.timestamp.difference.max.ms",),
       doc="The maximum difference allowed between the timestamp of a message (CreateTime) and the time the "
           "broker receives it."),
    _d("message.timestamp.type", "string", "CreateTime", valid=TIMESTAMP_TYPES,
       synonyms=("log.message.timestamp.type",),
       doc="Whether the timestamp in the message is message create time or log append time."),
    _d("min.cleanable.dirty.ratio", "double", "0.5", low=0, high=1, synonyms=("log.cleaner.min.cleanable.ratio",),
       doc="How frequently the log compactor will attempt to clean the log: the ratio of dirty log to total "
           "log above which a log is cleaned."),
    _d("min.compaction.lag.ms", "long", "0", low=0, synonyms=("log.cleaner.min.compaction.lag.ms",),
       doc="The minimum time a message will remain uncompacted in the log."),
    _d("min.insync.replicas", "int", "1", low=1, synonyms=("min.insync.replicas",),
       doc="With acks=all, the minimum number of replicas that must acknowledge a write for it to succeed "
           "(else NOT_ENOUGH_REPLICAS)."),
    _d("preallocate", "boolean", "false", status=IGNORED, synonyms=("log.preallocate",),
       reason="segments grow by appends (preallocation is a Windows-era file system optimisation)",
       doc="True if we should preallocate the file on disk when creating a new log segment."),
    _d("retention.bytes", "long", "-1", low=-1,
       synonyms=("log.retention.bytes",),
       doc="The maximum size a partition can grow to before old log segments are discarded (delete policy); "
           "-1: no limit."),
    _d("retention.ms", "long", "604800000", low=-1,
       synonyms=("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
       doc="The maximum time a log segment is retained before it is discarded (delete policy); -1: no limit."),
    _d("segment.bytes", "int", "1073741824", low=14, synonyms=("log.segment.bytes",),
       doc="The segment file size for the log (also bounded by the broker's min.segment.bytes)."),
    _d("segment.index.bytes", "int", "10485760", low=4096, synonyms=("log.index.size.max.bytes",),
       reason="at least 4096: an index smaller than a page would roll a segment every few entries "
              "(Kafka: [0,...])",
       doc="The size of the index that maps offsets to file positions."),
    _d("segment.jitter.ms", "long", "0", status=IGNORED, low=0,
       synonyms=("log.roll.jitter.ms", "log.roll.jitter.hours"),
       reason="segments roll at segment.ms exactly: no random jitter is subtracted (Kafka's default, 0, "
              "is what every topic gets)",
       doc="The maximum random jitter subtracted from the scheduled segment roll time."),
    _d("segment.ms", "long", "604800000", low=1, synonyms=("log.roll.ms", "log.roll.hours"),
       doc="The period of time after which the log rolls a segment even if it is not full (also bounded by "
           "the broker's min.segment.ms)."),
    _d("unclean.leader.election.enable", "boolean", "false", synonyms=("unclean.leader.election.enable",),
       doc="Whether replicas not in the ISR may be elected leader as a last resort, even though doing so "
           "may result in data loss."),
)

TOPIC_CONFIG_DEFS: Final[dict[str, TopicConfigDef]] = {d.name: d for d in TOPIC_CONFIGS}
# Views of the table, kept for their readers: name -> LogConfig attribute, and enforced ranges.
TOPIC_CONFIG_NAMES: Final[dict[str, str]] = {d.name: d.attr for d in TOPIC_CONFIGS}
TOPIC_CONFIG_BOUNDS: Final[dict[str, tuple[float, float]]] = {
    d.name: (d.low if d.low is not None else _TYPE_LIMITS.get(d.type, (-LONG_MAX, LONG_MAX))[0],
             d.high if d.high is not None else _TYPE_LIMITS.get(d.type, (0, LONG_MAX))[1])
    for d in TOPIC_CONFIGS if d.low is not None or d.high is not None}


def check_topic_config_name(name: str) -> TopicConfigDef:
    """The table's entry of ``name``; INVALID_CONFIG for an unknown or a refused name."""
    d = TOPIC_CONFIG_DEFS.get(name)
    if d is None:
        raise InvalidConfigError(f"unknown topic config {name!r}")
    if d.status == REFUSED:
        raise InvalidConfigError(f"topic config {name} is not supported: {d.reason}")
    return d


_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.\d+)?(?:-IV\d+)?$")


def _message_format_version(raw: str) -> str:
    """Kafka's ApiVersionValidator, narrowed to record format v2: 0.11.0 (the first v2) to 2.8."""
    v = raw.strip()
    m = _VERSION.match(v)
    if m is None or (int(m.group(1)), int(m.group(2))) > (2, 8):
        raise ValueError(raw)
    if (int(m.group(1)), int(m.group(2))) < (0, 11):
        raise InvalidConfigError(f"message.format.version {v} is not supported: only record format v2 "
                                 f"(0.11.0 and later) is written here")
    return v


def _throttled_replicas(raw: str) -> str:
    """Kafka's ThrottledReplicaListValidator: empty, '*', or [partition]:[broker],..."""
    items = [x.strip() for x in raw.split(",") if x.strip()]
    if items == ["*"] or all(re.fullmatch(r"\d+:\d+", x) for x in items):
        return ",".join(items)
    raise ValueError(raw)


def parse_topic_config(d: TopicConfigDef, raw: str) -> object:
    """``raw`` as ``d``'s type (Kafka's ConfigDef.parseType and validator); InvalidConfigError else."""
    try:
        if d.type == "boolean":
            low = raw.strip().lower()
            if low not in ("true", "false"):
                raise ValueError(raw)
            return low == "true"
        if d.type in ("int", "long"):
            number: float = int(raw.strip())
        elif d.type == "double":
            number = float(raw.strip())
            if number != number:  # NaN is within no range
                raise ValueError(raw)
        elif d.name == "cleanup.policy":
            return normalize_cleanup_policy(raw)
        elif d.name == "message.format.version":
            return _message_format_version(raw)
        elif d.type == "list":
            return _throttled_replicas(raw)
        else:
            value = raw.strip()
            if d.valid and value not in d.valid:
                raise InvalidConfigError(f"Invalid value {raw!r} for configuration {d.name}: String must be one "
                                         f"of: {', '.join(d.valid)}")
            return value
    except ValueError:
        raise InvalidConfigError(f"invalid value {raw!r} for config {d.name}") from None
    type_low, type_high = _TYPE_LIMITS.get(d.type, (float("-inf"), float("inf")))
    if not type_low <= number <= type_high:
        raise InvalidConfigError(f"invalid value {raw!r} for config {d.name}: not a {d.type}")
    return number


def topic_config_markdown() -> str:
    """The README's topic config table (tests/unit/test_topic_configs.py checks the README holds it)."""
    lines = ["| config | type | Kafka's default | valid values | here |", "|---|---|---|---|---|"]
    for d in TOPIC_CONFIGS:
        default = d.default if d.default != str(LONG_MAX) else "Long.MAX_VALUE"
        here = d.status + (f": {d.reason}" if d.reason else "")
        lines.append(f"| `{d.name}` | {d.type} | `{default}` | {d.valid_text or '-'} | {here} |")
    return "\n".join(lines)
