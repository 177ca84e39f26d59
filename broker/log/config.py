"""Per-log configuration with Kafka's topic-level names, defaults and bounds.

Every topic config has a range (``TOPIC_CONFIG_BOUNDS``, Kafka's LogConfig ranges where Kafka has
them): a value outside it is INVALID_CONFIG. On top of that, ``check_policy`` applies the broker's
floor on what makes files (``min.segment.bytes``, ``min.segment.ms``): any client may set topic
configs, and ``segment.bytes=100`` would cost an open file per batch (SPEC S13.4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
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
            attr = TOPIC_CONFIG_NAMES.get(key)
            if attr is None:
                raise InvalidConfigError(f"unknown topic config {key!r}")
            changes[attr] = _parse(key, attr, raw)
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
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
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


TOPIC_CONFIG_NAMES: Final[dict[str, str]] = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "segment.index.bytes": "segment_index_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "max.message.bytes": "max_message_bytes",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "min.insync.replicas": "min_insync_replicas",
    "unclean.leader.election.enable": "unclean_leader_election_enable",
    "message.timestamp.type": "message_timestamp_type",
    "message.timestamp.difference.max.ms": "message_timestamp_difference_max_ms",
    "cleanup.policy": "cleanup_policy",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
    "delete.retention.ms": "delete_retention_ms",
}

# Inclusive ranges of the numeric topic configs (Kafka's, with ints where Kafka has ints).
TOPIC_CONFIG_BOUNDS: Final[dict[str, tuple[float, float]]] = {
    "segment.bytes": (14, INT_MAX),
    "segment.ms": (1, LONG_MAX),
    "segment.index.bytes": (4096, INT_MAX),
    "index.interval.bytes": (0, INT_MAX),
    "retention.ms": (-1, LONG_MAX),
    "retention.bytes": (-1, LONG_MAX),
    "flush.messages": (1, LONG_MAX),
    "flush.ms": (0, LONG_MAX),
    "max.message.bytes": (0, MAX_MESSAGE_BYTES_LIMIT),
    "file.delete.delay.ms": (0, LONG_MAX),
    "min.insync.replicas": (1, INT_MAX),
    "message.timestamp.difference.max.ms": (0, LONG_MAX),
    "min.cleanable.dirty.ratio": (0, 1),
    "min.compaction.lag.ms": (0, LONG_MAX),
    "max.compaction.lag.ms": (1, LONG_MAX),
    "delete.retention.ms": (0, LONG_MAX),
}

_TYPES: Final = {f.name: f.type for f in fields(LogConfig)}


def _parse(key: str, attr: str, raw: str) -> object:
    kind = _TYPES[attr]
    try:
        if kind == "bool":
            low = raw.strip().lower()
            if low not in ("true", "false"):
                raise ValueError(raw)
            return low == "true"
        if kind == "int":
            return int(raw.strip())
        if kind == "float":
            value = float(raw.strip())
            if value != value:  # NaN is within no range
                raise ValueError(raw)
            return value
        if attr == "cleanup_policy":
            return normalize_cleanup_policy(raw)
        return raw.strip()
    except ValueError:
        raise InvalidConfigError(f"invalid value {raw!r} for config {key}") from None
