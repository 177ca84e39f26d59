"""Per-log configuration with Kafka's topic-level names and defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Final

from proto.errors import InvalidConfigError

LONG_MAX: Final = (1 << 63) - 1


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
        if self.segment_bytes < 14:
            raise InvalidConfigError("segment.bytes must be at least 14")
        if self.segment_ms < 1:
            raise InvalidConfigError("segment.ms must be positive")
        if self.index_interval_bytes < 0:
            raise InvalidConfigError("index.interval.bytes must be >= 0")
        if self.segment_index_bytes < 8:
            raise InvalidConfigError("segment.index.bytes must be at least 8")
        if self.retention_ms < -1:
            raise InvalidConfigError("retention.ms must be >= -1")
        if self.flush_messages < 1 or self.flush_ms < 0:
            raise InvalidConfigError("flush.messages must be >= 1 and flush.ms >= 0")
        if self.max_message_bytes < 0:
            raise InvalidConfigError("max.message.bytes must be >= 0")
        if self.min_insync_replicas < 1:
            raise InvalidConfigError("min.insync.replicas must be at least 1")
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise InvalidConfigError("message.timestamp.type must be CreateTime or LogAppendTime")


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
        return raw.strip()
    except ValueError:
        raise InvalidConfigError(f"invalid value {raw!r} for config {key}") from None
