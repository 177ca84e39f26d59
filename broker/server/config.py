"""Broker configuration with Kafka's names, defaults and start-up validation.

``minikafka broker --config FILE [--set key=value ...]`` reads a Java-style
properties file; every key is a Kafka broker config name. Unknown keys and bad
values are refused at start with a message naming the key.

Listeners follow Kafka (KIP-103, KIP-291): ``listeners=CLIENT://h:9092,INTERNAL://h:9093``,
``listener.security.protocol.map=CLIENT:PLAINTEXT,INTERNAL:SSL``, ``inter.broker.listener.name``
and optionally ``control.plane.listener.name``. The inter-broker (and control-plane) listener
must be SSL: it is served with mutual TLS and only broker certificates are let in (SPEC S12.1).
Certificates are PEM files: ``ssl.keystore.location`` (certificate chain and private key) and
``ssl.truststore.location`` (the CA); ``minikafka certs`` makes them.

Kafka wire-protocol listeners (``kafka.listeners``, ``advertised.kafka.listeners``, served by
``broker.network.kafka_listener``) take their protocol from the same map: PLAINTEXT, SSL or SASL_SSL
(SCRAM-SHA-256 against the same credentials). ``check_kafka_listeners`` keeps them no weaker than
the gRPC client listeners: no PLAINTEXT one beside TLS-only clients, and none that lets anonymous
clients in where every gRPC client authenticates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.log.config import (
    COMPRESSION_TYPES,
    MAX_MESSAGE_BYTES_LIMIT,
    CleanerConfig,
    LogConfig,
    normalize_cleanup_policy,
)
from broker.server.broker_config_defs import BrokerConfigValueError, check_broker_config
from proto.properties import PropertiesError, parse_properties


class ConfigError(PropertiesError):
    """A broker config is missing, unknown or invalid."""


def _bool(v: str) -> bool:
    low = v.strip().lower()
    if low not in ("true", "false"):
        raise ValueError("expected true or false")
    return low == "true"


@dataclass(frozen=True)
class _Def:
    attr: str
    parse: Callable[[str], Any]
    check: Callable[[Any], bool] = lambda _v: True
    rule: str = ""


def _nonneg(v: int) -> bool:
    return v >= 0


def _pos(v: int) -> bool:
    return v > 0


def _cleanup_policy(v: str) -> str:
    try:
        return normalize_cleanup_policy(v)
    except Exception as e:
        raise ValueError(str(e)) from None


CONFIG_DEFS: dict[str, _Def] = {
    "broker.id": _Def("broker_id", int, _nonneg, ">= 0"),
    "listeners": _Def("listeners", str),
    # Kafka wire-protocol listeners (broker.network.kafka_listener), beside the gRPC ``listeners``.
    "kafka.listeners": _Def("kafka_listeners", str),
    "advertised.kafka.listeners": _Def("advertised_kafka_listeners", str),
    "max.connections": _Def("max_connections", int, _pos, ">= 1"),
    "advertised.listeners": _Def("advertised_listeners", str),
    "zookeeper.connect": _Def("zookeeper_connect", str),
    "zookeeper.session.timeout.ms": _Def("zookeeper_session_timeout_ms", int, _pos, "> 0"),
    "zookeeper.connection.timeout.ms": _Def("zookeeper_connection_timeout_ms", int, _pos, "> 0"),
    "log.dirs": _Def("log_dirs", str),
    "log.dir": _Def("log_dir", str),
    "num.partitions": _Def("num_partitions", int, _pos, ">= 1"),
    "default.replication.factor": _Def("default_replication_factor", int, _pos, ">= 1"),
    "min.insync.replicas": _Def("min_insync_replicas", int, _pos, ">= 1"),
    "unclean.leader.election.enable": _Def("unclean_leader_election_enable", _bool),
    "auto.create.topics.enable": _Def("auto_create_topics_enable", _bool),
    "delete.topic.enable": _Def("delete_topic_enable", _bool),
    "auto.leader.rebalance.enable": _Def("auto_leader_rebalance_enable", _bool),
    "leader.imbalance.per.broker.percentage": _Def("leader_imbalance_per_broker_percentage", int, _nonneg),
    "leader.imbalance.check.interval.seconds": _Def("leader_imbalance_check_interval_seconds", int, _pos),
    "controlled.shutdown.enable": _Def("controlled_shutdown_enable", _bool),
    "controlled.shutdown.max.retries": _Def("controlled_shutdown_max_retries", int, _nonneg),
    "controlled.shutdown.retry.backoff.ms": _Def("controlled_shutdown_retry_backoff_ms", int, _nonneg),
    "controller.socket.timeout.ms": _Def("controller_socket_timeout_ms", int, _pos),
    "replica.lag.time.max.ms": _Def("replica_lag_time_max_ms", int, _pos, "> 0"),
    "replica.fetch.wait.max.ms": _Def("replica_fetch_wait_max_ms", int, _nonneg),
    "replica.fetch.min.bytes": _Def("replica_fetch_min_bytes", int, _pos),
    "replica.fetch.max.bytes": _Def("replica_fetch_max_bytes", int, _pos),
    "replica.fetch.backoff.ms": _Def("replica_fetch_backoff_ms", int, _nonneg),
    # The replica fetch listener (broker.network.replica_fetch_socket): a port on the inter-broker listener's
    # host; 0 takes a free one, -1 turns it off (followers then fetch over gRPC FetchStream).
    "replica.fetch.listener.port": _Def("replica_fetch_listener_port", int, lambda v: -1 <= v <= 65535,
                                        "-1 (off), 0 (a free port) or a port"),
    "replica.high.watermark.checkpoint.interval.ms": _Def("replica_high_watermark_checkpoint_interval_ms",
                                                          int, _pos),
    "request.timeout.ms": _Def("request_timeout_ms", int, _pos),
    "log.segment.bytes": _Def("log_segment_bytes", int, lambda v: v >= 14, ">= 14"),
    "log.roll.ms": _Def("log_roll_ms", int, _pos),
    "log.roll.hours": _Def("log_roll_hours", int, _pos),
    "log.retention.ms": _Def("log_retention_ms", int, lambda v: v >= -1, ">= -1"),
    "log.retention.minutes": _Def("log_retention_minutes", int, lambda v: v >= -1),
    "log.retention.hours": _Def("log_retention_hours", int, lambda v: v >= -1),
    "log.retention.bytes": _Def("log_retention_bytes", int, lambda v: v >= -1, ">= -1"),
    "log.retention.check.interval.ms": _Def("log_retention_check_interval_ms", int, _pos),
    "log.segment.delete.delay.ms": _Def("log_segment_delete_delay_ms", int, _nonneg, ">= 0"),
    "log.cleanup.policy": _Def("log_cleanup_policy", _cleanup_policy),
    "log.cleaner.enable": _Def("log_cleaner_enable", _bool),
    "log.cleaner.threads": _Def("log_cleaner_threads", int, _nonneg, ">= 0"),
    "log.cleaner.min.cleanable.ratio": _Def("log_cleaner_min_cleanable_ratio", float, lambda v: 0 <= v <= 1,
                                            "between 0 and 1"),
    "log.cleaner.delete.retention.ms": _Def("log_cleaner_delete_retention_ms", int, _nonneg, ">= 0"),
    "log.cleaner.min.compaction.lag.ms": _Def("log_cleaner_min_compaction_lag_ms", int, _nonneg, ">= 0"),
    "log.cleaner.max.compaction.lag.ms": _Def("log_cleaner_max_compaction_lag_ms", int, _pos, ">= 1"),
    "log.cleaner.io.max.bytes.per.second": _Def("log_cleaner_io_max_bytes_per_second", float, _pos, "> 0"),
    "log.cleaner.dedupe.buffer.size": _Def("log_cleaner_dedupe_buffer_size", int, lambda v: v >= 1024, ">= 1024"),
    "log.cleaner.io.buffer.size": _Def("log_cleaner_io_buffer_size", int, lambda v: v >= 512, ">= 512"),
    "log.cleaner.io.buffer.load.factor": _Def("log_cleaner_io_buffer_load_factor", float, lambda v: 0 < v <= 1,
                                              "in (0, 1]"),
    "log.cleaner.backoff.ms": _Def("log_cleaner_backoff_ms", int, _nonneg, ">= 0"),
    "log.index.interval.bytes": _Def("log_index_interval_bytes", int, _nonneg),
    "log.index.size.max.bytes": _Def("log_index_size_max_bytes", int, lambda v: v >= 8),
    "log.flush.interval.messages": _Def("log_flush_interval_messages", int, _pos),
    "log.flush.interval.ms": _Def("log_flush_interval_ms", int, _nonneg),
    "log.flush.scheduler.interval.ms": _Def("log_flush_scheduler_interval_ms", int, _pos),
    "log.flush.offset.checkpoint.interval.ms": _Def("log_flush_offset_checkpoint_interval_ms", int, _pos),
    "message.max.bytes": _Def("message_max_bytes", int, lambda v: 0 <= v <= MAX_MESSAGE_BYTES_LIMIT,
                              f"between 0 and {MAX_MESSAGE_BYTES_LIMIT}"),
    "log.message.timestamp.difference.max.ms": _Def("log_message_timestamp_difference_max_ms", int, _nonneg,
                                                    ">= 0"),
    # Bounds on what a request may cost (SPEC S13.4), Kafka's names where Kafka has them.
    "socket.request.max.bytes": _Def("socket_request_max_bytes", int, lambda v: v >= 1024, ">= 1024"),
    "fetch.max.bytes": _Def("fetch_max_bytes", int, lambda v: v >= 1024, ">= 1024"),
    "queued.max.request.bytes": _Def("queued_max_request_bytes", int, lambda v: v == -1 or v > 0, "-1 or > 0"),
    "queued.max.requests": _Def("queued_max_requests", int, _pos, ">= 1"),
    "connections.max.idle.ms": _Def("connections_max_idle_ms", int, _pos, "> 0"),
    "max.request.partitions": _Def("max_request_partitions", int, _pos, ">= 1"),
    "max.partitions.per.topic": _Def("max_partitions_per_topic", int, _pos, ">= 1"),
    "offset.metadata.max.bytes": _Def("offset_metadata_max_bytes", int, _nonneg, ">= 0"),
    "group.max.committed.partitions": _Def("group_max_committed_partitions", int, _pos, ">= 1"),
    # Kafka's group settings: the session timeouts a member may ask for (else INVALID_SESSION_TIMEOUT)
    # and the members a group may have (GROUP_MAX_SIZE_REACHED; Kafka's default is unbounded, SPEC S13.4
    # bounds it).
    "group.min.session.timeout.ms": _Def("group_min_session_timeout_ms", int, _nonneg, ">= 0"),
    "group.max.session.timeout.ms": _Def("group_max_session_timeout_ms", int, _pos, ">= 1"),
    "group.max.size": _Def("group_max_size", int, _pos, ">= 1"),
    "group.initial.rebalance.delay.ms": _Def("group_initial_rebalance_delay_ms", int, _nonneg, ">= 0"),
    # Issue 34: the topic default of compression.type; how long an empty group's committed offsets
    # are kept (Kafka's offsets.retention.minutes) and how often the coordinator looks.
    "compression.type": _Def("compression_type", str, lambda v: v in COMPRESSION_TYPES,
                             "one of " + ", ".join(COMPRESSION_TYPES)),
    "offsets.retention.minutes": _Def("offsets_retention_minutes", int, _pos, ">= 1"),
    "offsets.retention.check.interval.ms": _Def("offsets_retention_check_interval_ms", int, _pos, ">= 1"),
    # Issue 31 (transactions): the transaction coordinator's bounds and timers.
    "transaction.max.timeout.ms": _Def("transaction_max_timeout_ms", int, _pos, ">= 1"),
    "transactional.id.expiration.ms": _Def("transactional_id_expiration_ms", int, _pos, ">= 1"),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": _Def(
        "transaction_abort_timed_out_transaction_cleanup_interval_ms", int, _pos, ">= 1"),
    # Kafka 3.6's KIP-890 part 1: leaders verify a transaction's partitions with its coordinator.
    "transaction.partition.verification.enable": _Def("transaction_partition_verification_enable", _bool),
    "fetch.purgatory.max.requests": _Def("fetch_purgatory_max_requests", int, _nonneg, ">= 0"),
    "min.segment.bytes": _Def("min_segment_bytes", int, lambda v: v >= 14, ">= 14"),
    "min.segment.ms": _Def("min_segment_ms", int, _pos, ">= 1"),
    "log.message.timestamp.type": _Def("log_message_timestamp_type", str,
                                       lambda v: v in ("CreateTime", "LogAppendTime"),
                                       "CreateTime or LogAppendTime"),
    "listener.security.protocol.map": _Def("listener_security_protocol_map", str),
    "inter.broker.listener.name": _Def("inter_broker_listener_name", str),
    "control.plane.listener.name": _Def("control_plane_listener_name", str),
    "ssl.keystore.location": _Def("ssl_keystore_location", str),
    "ssl.keystore.type": _Def("ssl_keystore_type", str, lambda v: v.upper() == "PEM", "PEM"),
    "ssl.truststore.location": _Def("ssl_truststore_location", str),
    "ssl.truststore.type": _Def("ssl_truststore_type", str, lambda v: v.upper() == "PEM", "PEM"),
    "ssl.client.auth": _Def("ssl_client_auth", str, lambda v: v in ("none", "required"), "none or required"),
    "sasl.enabled.mechanisms": _Def("sasl_enabled_mechanisms", str, lambda v: v == "SCRAM-SHA-256",
                                    "SCRAM-SHA-256"),
    "authorizer.class.name": _Def("authorizer_class_name", str,
                                  lambda v: v in ("", "AclAuthorizer", "kafka.security.authorizer.AclAuthorizer"),
                                  "empty (off) or kafka.security.authorizer.AclAuthorizer"),
    "allow.everyone.if.no.acl.found": _Def("allow_everyone_if_no_acl_found", _bool),
    "super.users": _Def("super_users", str),
    "broker.principal.prefix": _Def("broker_principal_prefix", str, lambda v: bool(v), "not empty"),
    "zookeeper.set.acl": _Def("zookeeper_set_acl", _bool),
    "zookeeper.digest.auth.file": _Def("zookeeper_digest_auth_file", str),
    "grpc.reflection.enable": _Def("grpc_reflection_enable", _bool),
    "broker.rack": _Def("broker_rack", str),
    "metrics.port": _Def("metrics_port", int, lambda v: -1 <= v <= 65535, "-1 (off), 0 (any free port) or a port"),
    "metrics.host": _Def("metrics_host", str),
}

LONG_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class BrokerConfig:
    broker_id: int = -1
    listeners: str = "PLAINTEXT://127.0.0.1:9092"
    advertised_listeners: str = ""
    kafka_listeners: str = ""
    advertised_kafka_listeners: str = ""
    # Per Kafka listener; Kafka's default is unbounded, a bound keeps a connection flood from
    # exhausting the broker's file descriptors (SPEC S13.4).
    max_connections: int = 1000
    zookeeper_connect: str = ""
    zookeeper_session_timeout_ms: int = 18000
    zookeeper_connection_timeout_ms: int = 0
    log_dirs: str = ""
    log_dir: str = "/tmp/minikafka-logs"
    num_partitions: int = 1
    default_replication_factor: int = 1
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    auto_create_topics_enable: bool = True
    delete_topic_enable: bool = True
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_per_broker_percentage: int = 10
    leader_imbalance_check_interval_seconds: int = 300
    controlled_shutdown_enable: bool = True
    controlled_shutdown_max_retries: int = 3
    controlled_shutdown_retry_backoff_ms: int = 5000
    controller_socket_timeout_ms: int = 30000
    replica_lag_time_max_ms: int = 10000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_max_bytes: int = 1048576
    replica_fetch_backoff_ms: int = 1000
    replica_fetch_listener_port: int = 0
    replica_high_watermark_checkpoint_interval_ms: int = 5000
    request_timeout_ms: int = 30000
    log_segment_bytes: int = 1 << 30
    log_roll_ms: int = 0
    log_roll_hours: int = 168
    log_retention_ms: int = 0
    log_retention_minutes: int = 0
    log_retention_hours: int = 168
    log_retention_bytes: int = -1
    log_retention_check_interval_ms: int = 300000
    log_segment_delete_delay_ms: int = 60000
    log_cleanup_policy: str = "delete"
    log_cleaner_enable: bool = True
    log_cleaner_threads: int = 1
    log_cleaner_min_cleanable_ratio: float = 0.5
    log_cleaner_delete_retention_ms: int = 86400000
    log_cleaner_min_compaction_lag_ms: int = 0
    log_cleaner_max_compaction_lag_ms: int = LONG_MAX
    log_cleaner_io_max_bytes_per_second: float = 1.7976931348623157e308
    log_cleaner_dedupe_buffer_size: int = 128 * 1024 * 1024
    log_cleaner_io_buffer_size: int = 512 * 1024
    log_cleaner_io_buffer_load_factor: float = 0.9
    log_cleaner_backoff_ms: int = 15000
    log_index_interval_bytes: int = 4096
    log_index_size_max_bytes: int = 10 * 1024 * 1024
    log_flush_interval_messages: int = LONG_MAX
    log_flush_interval_ms: int = 0
    log_flush_scheduler_interval_ms: int = 3000
    log_flush_offset_checkpoint_interval_ms: int = 60000
    message_max_bytes: int = 1048588
    log_message_timestamp_type: str = "CreateTime"
    log_message_timestamp_difference_max_ms: int = LONG_MAX
    socket_request_max_bytes: int = 104857600
    fetch_max_bytes: int = 57671680
    queued_max_request_bytes: int = 209715200
    queued_max_requests: int = 500
    connections_max_idle_ms: int = 600000
    max_request_partitions: int = 10000
    max_partitions_per_topic: int = 10000
    # Kafka's offset.metadata.max.bytes; and a bound of ours on the partitions one group may hold
    # committed offsets for (each is a znode: SPEC S13.4).
    offset_metadata_max_bytes: int = 4096
    group_max_committed_partitions: int = 100000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_max_size: int = 1000
    group_initial_rebalance_delay_ms: int = 3000
    fetch_purgatory_max_requests: int = 500
    compression_type: str = "producer"
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600000
    transaction_max_timeout_ms: int = 900000
    transactional_id_expiration_ms: int = 604800000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10000
    transaction_partition_verification_enable: bool = True
    # Floors on segment.bytes / segment.ms that any client may set (each segment is open files).
    min_segment_bytes: int = 1048576
    min_segment_ms: int = 60000
    listener_security_protocol_map: str = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL"
    inter_broker_listener_name: str = ""
    control_plane_listener_name: str = ""
    ssl_keystore_location: str = ""
    ssl_keystore_type: str = "PEM"
    ssl_truststore_location: str = ""
    ssl_truststore_type: str = "PEM"
    ssl_client_auth: str = "none"
    sasl_enabled_mechanisms: str = "SCRAM-SHA-256"
    authorizer_class_name: str = ""
    allow_everyone_if_no_acl_found: bool = False
    super_users: str = ""
    broker_principal_prefix: str = "broker-"
    zookeeper_set_acl: bool = False
    zookeeper_digest_auth_file: str = ""
    grpc_reflection_enable: bool = True
    broker_rack: str = ""
    metrics_port: int = -1
    metrics_host: str = "127.0.0.1"
    # The config names given in the file or on the command line (DescribeConfigs: STATIC_BROKER_CONFIG;
    # the others are DEFAULT_CONFIG).
    static_keys: frozenset[str] = frozenset()
    # Kafka configs given but not read here (accepted-and-ignored in broker_config_defs, or refused
    # ones at Kafka's default), as Kafka would describe their values: DescribeConfigs shows them.
    ignored_configs: tuple[tuple[str, str], ...] = ()

    # ------------------------------------------------------------ derived values

    @property
    def listener_list(self) -> list[Listener]:
        return parse_listeners(self.listeners, self.protocol_map)

    @property
    def advertised_listener_list(self) -> list[Listener]:
        """What the broker registers: ``advertised.listeners`` where given, else ``listeners``
        (a wildcard host advertised as 127.0.0.1)."""
        advertised = {x.name: x for x in parse_listeners(self.advertised_listeners, self.protocol_map)} \
            if self.advertised_listeners else {}
        out = []
        for x in self.listener_list:
            a = advertised.get(x.name, x)
            host = "127.0.0.1" if a.host in ("0.0.0.0", "") else a.host
            out.append(Listener(x.name, host, a.port, x.security_protocol))
        return out

    @property
    def kafka_listener_list(self) -> list[Listener]:
        """The Kafka wire-protocol listeners (``kafka.listeners``; none by default). A name absent
        from listener.security.protocol.map is PLAINTEXT (Kafka's map names SSL and SASL_SSL ones)."""
        if not self.kafka_listeners.strip():
            return []
        return parse_listeners(self.kafka_listeners, self.protocol_map, default_protocol="PLAINTEXT")

    @property
    def advertised_kafka_listener_list(self) -> list[Listener]:
        advertised = {x.name: x for x in parse_listeners(self.advertised_kafka_listeners, self.protocol_map,
                                                         default_protocol="PLAINTEXT")} \
            if self.advertised_kafka_listeners.strip() else {}
        out = []
        for x in self.kafka_listener_list:
            a = advertised.get(x.name, x)
            host = "127.0.0.1" if a.host in ("0.0.0.0", "") else a.host
            out.append(Listener(x.name, host, a.port, x.security_protocol))
        return out

    @property
    def protocol_map(self) -> dict[str, str]:
        return parse_protocol_map(self.listener_security_protocol_map)

    @property
    def inter_broker_listener(self) -> Listener:
        listeners = self.listener_list
        name = self.inter_broker_listener_name or (listeners[0].name if len(listeners) == 1 else "")
        for x in listeners:
            if x.name == name:
                return x
        raise ConfigError("inter.broker.listener.name must name one of the listeners "
                          f"({', '.join(x.name for x in listeners)})")

    @property
    def control_plane_listener(self) -> Listener:
        if not self.control_plane_listener_name:
            return self.inter_broker_listener
        for x in self.listener_list:
            if x.name == self.control_plane_listener_name:
                return x
        raise ConfigError("control.plane.listener.name must name one of the listeners")

    @property
    def authorizer_enabled(self) -> bool:
        return bool(self.authorizer_class_name)

    @property
    def log_dir_paths(self) -> list[Path]:
        raw = self.log_dirs or self.log_dir
        return [Path(p.strip()) for p in raw.split(",") if p.strip()]

    @property
    def session_timeout_ms(self) -> int:
        return self.zookeeper_session_timeout_ms

    @property
    def connection_timeout_ms(self) -> int:
        return self.zookeeper_connection_timeout_ms or self.zookeeper_session_timeout_ms

    def default_log_config(self) -> LogConfig:
        """Topic-level defaults from the broker's log.* settings (Kafka's LogConfig defaults)."""
        roll_ms = self.log_roll_ms or self.log_roll_hours * 3600 * 1000
        if self.log_retention_ms:
            retention_ms = self.log_retention_ms
        elif self.log_retention_minutes:
            retention_ms = self.log_retention_minutes * 60 * 1000
        else:
            retention_ms = self.log_retention_hours * 3600 * 1000
        if retention_ms < 0:
            retention_ms = -1
        return LogConfig(
            segment_bytes=self.log_segment_bytes,
            segment_ms=roll_ms,
            segment_index_bytes=self.log_index_size_max_bytes,
            file_delete_delay_ms=self.log_segment_delete_delay_ms,
            index_interval_bytes=self.log_index_interval_bytes,
            retention_ms=retention_ms,
            retention_bytes=self.log_retention_bytes,
            flush_messages=self.log_flush_interval_messages,
            flush_ms=self.log_flush_interval_ms or LONG_MAX,
            max_message_bytes=self.message_max_bytes,
            min_insync_replicas=self.min_insync_replicas,
            unclean_leader_election_enable=self.unclean_leader_election_enable,
            message_timestamp_type=self.log_message_timestamp_type,
            message_timestamp_difference_max_ms=self.log_message_timestamp_difference_max_ms,
            cleanup_policy=self.log_cleanup_policy,
            min_cleanable_dirty_ratio=self.log_cleaner_min_cleanable_ratio,
            min_compaction_lag_ms=self.log_cleaner_min_compaction_lag_ms,
            max_compaction_lag_ms=self.log_cleaner_max_compaction_lag_ms,
            delete_retention_ms=self.log_cleaner_delete_retention_ms,
            compression_type=self.compression_type,
            cleaner=CleanerConfig(
                enable=self.log_cleaner_enable, threads=self.log_cleaner_threads,
                io_max_bytes_per_second=self.log_cleaner_io_max_bytes_per_second,
                dedupe_buffer_size=self.log_cleaner_dedupe_buffer_size,
                io_buffer_size=self.log_cleaner_io_buffer_size,
                io_buffer_load_factor=self.log_cleaner_io_buffer_load_factor,
                backoff_ms=self.log_cleaner_backoff_ms),
        )


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int
    security_protocol: str

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")


def parse_protocol_map(value: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in value.split(","):
        name, sep, proto = item.strip().partition(":")
        if not item.strip():
            continue
        if not sep or not name or proto.upper() not in SECURITY_PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map: expected NAME:PROTOCOL with PROTOCOL one of "
                              f"{', '.join(SECURITY_PROTOCOLS)}, got {item.strip()!r}")
        out[name.upper()] = proto.upper()
    return out


def parse_listeners(value: str, protocols: dict[str, str], default_protocol: str = "") -> list[Listener]:
    """``NAME://host:port,...`` (Kafka's ``listeners``) with each name's security protocol."""
    out: list[Listener] = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, address = item.partition("://")
        host, colon, port = address.rpartition(":")
        if not sep or not name or not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ConfigError(f"listeners: expected NAME://host:port, got {item!r}")
        proto = protocols.get(name.upper()) or default_protocol or None
        if proto is None:
            raise ConfigError(f"listeners: {name!r} has no entry in listener.security.protocol.map")
        if any(x.name == name.upper() for x in out):
            raise ConfigError(f"listeners: {name!r} is listed twice")
        out.append(Listener(name.upper(), host or "0.0.0.0", int(port), proto))
    if not out:
        raise ConfigError("listeners is empty")
    return out


def parse_listener(value: str) -> tuple[str, int]:
    """``NAME://host:port`` (or ``host:port``) -> (host, port) of the first listener."""
    first = value.split(",")[0].strip()
    if "://" in first:
        first = first.split("://", 1)[1]
    host, sep, port = first.rpartition(":")
    if not sep or not port.isdigit() or not (0 <= int(port) <= 65535):
        raise ConfigError(f"listeners: expected NAME://host:port, got {value!r}")
    return host or "0.0.0.0", int(port)


def build_config(props: Mapping[str, str]) -> BrokerConfig:
    """Every key checked against the broker config table (broker_config_defs: unknown and refused
    names, Kafka's types and ranges), then a supported one read into its field with this broker's
    own checks (CONFIG_DEFS, at times narrower than Kafka's); an accepted-and-ignored one is kept."""
    values: dict[str, Any] = {}
    ignored: list[tuple[str, str]] = []
    for key, raw in props.items():
        try:
            described = check_broker_config(key, raw)
        except BrokerConfigValueError as e:
            raise ConfigError(str(e)) from None
        d = CONFIG_DEFS.get(key)
        if d is None:
            ignored.append((key, described))
            continue
        try:
            v = d.parse(raw)
        except ValueError:
            raise ConfigError(f"invalid value {raw!r} for {key}") from None
        if not d.check(v):
            raise ConfigError(f"invalid value {raw!r} for {key}: must be {d.rule or 'valid'}")
        values[d.attr] = v
    cfg = BrokerConfig(**values, static_keys=frozenset(props), ignored_configs=tuple(sorted(ignored)))
    if "broker.id" not in props:
        raise ConfigError("broker.id is required")
    if not cfg.zookeeper_connect:
        raise ConfigError("zookeeper.connect is required")
    if not cfg.log_dir_paths:
        raise ConfigError("log.dirs is empty")
    check_listeners(cfg)
    if cfg.group_min_session_timeout_ms > cfg.group_max_session_timeout_ms:
        raise ConfigError("group.min.session.timeout.ms must be <= group.max.session.timeout.ms")
    try:
        cfg.default_log_config().validate()
    except Exception as e:
        raise ConfigError(str(e)) from None
    return cfg


# A host no client can connect to: Kafka refuses it in advertised listeners (KafkaConfig).
NONROUTABLE_HOSTS = ("0.0.0.0", "::", "[::]")


def check_advertised(key: str, value: str, listeners: list[Listener], listeners_key: str) -> None:
    """Kafka's checks of advertised listeners (KafkaConfig.validateValues): every advertised name is
    a listener's, and no advertised host is the wildcard meta-address - brokers on other hosts and
    clients would be told to connect to 0.0.0.0 (issue 32: the most common deployment mistake)."""
    names = {x.name for x in listeners}
    for item in (i.strip() for i in value.split(",") if i.strip()):
        name, _sep, address = item.partition("://")
        host = address.rpartition(":")[0]
        if host in NONROUTABLE_HOSTS:
            raise ConfigError(f"{key} cannot use the nonroutable meta-address {host} ({item}). Use a routable IP "
                              f"address or host name that other brokers and clients reach this broker by "
                              f"({listeners_key} may bind {host})")
        if name.upper() not in names:
            raise ConfigError(f"{key}: listener name {name!r} is not in {listeners_key}; advertised listener "
                              f"names must be equal to or a subset of the ones defined in {listeners_key}")


def check_listeners(cfg: BrokerConfig) -> None:
    """The listener rules of SPEC S12.1, at start-up."""
    listeners = cfg.listener_list
    check_advertised("advertised.listeners", cfg.advertised_listeners, listeners, "listeners")
    cfg.advertised_listener_list  # noqa: B018 - parses advertised.listeners
    inter = cfg.inter_broker_listener
    control = cfg.control_plane_listener
    for x, what in ((inter, "inter.broker.listener.name"), (control, "control.plane.listener.name")):
        if x.security_protocol != "SSL":
            raise ConfigError(f"{what}: listener {x.name} must use SSL - the inter-broker plane is mutual TLS "
                              "with broker certificates (SPEC S12.1); `minikafka certs` makes them")
    if any(x.security_protocol in ("SSL", "SASL_SSL") for x in listeners):
        if not cfg.ssl_keystore_location or not cfg.ssl_truststore_location:
            raise ConfigError("SSL listeners need ssl.keystore.location (PEM certificate and key) and "
                              "ssl.truststore.location (PEM CA)")
        for key, path in (("ssl.keystore.location", cfg.ssl_keystore_location),
                          ("ssl.truststore.location", cfg.ssl_truststore_location)):
            if not Path(path).is_file():
                raise ConfigError(f"{key}: {path} is not a readable file")
    check_kafka_listeners(cfg)
    if cfg.zookeeper_set_acl and not cfg.zookeeper_digest_auth_file:
        raise ConfigError("zookeeper.set.acl needs zookeeper.digest.auth.file (a file holding user:password)")
    for p in (x.strip() for x in cfg.super_users.split(";") if x.strip()):
        if ":" not in p:
            raise ConfigError(f"super.users: {p!r} is not a principal (User:name)")


def authenticates(cfg: BrokerConfig, x: Listener) -> bool:
    """Does every client on ``x`` prove who it is? SASL_SSL always; SSL when a client certificate
    is required (``ssl.client.auth=required``, or the inter-broker/control-plane listener)."""
    if x.security_protocol == "SASL_SSL":
        return True
    if x.security_protocol == "SSL":
        grpc_planes = {cfg.inter_broker_listener.name, cfg.control_plane_listener.name}
        return cfg.ssl_client_auth == "required" or x.name in grpc_planes
    return False


def check_kafka_listeners(cfg: BrokerConfig) -> None:
    """The Kafka wire-protocol listeners: names apart from the gRPC listeners', PLAINTEXT, SSL or
    SASL_SSL (SASL_PLAINTEXT is not offered: SCRAM without TLS leaves the session open), the TLS
    material present for SSL/SASL_SSL, and none weaker than the gRPC client listeners:

    * when no gRPC client listener is PLAINTEXT (clients are on TLS), no PLAINTEXT Kafka listener;
    * when every gRPC client listener authenticates, no Kafka listener that does not (PLAINTEXT,
      or SSL without ``ssl.client.auth=required``) - an anonymous port would bypass it."""
    kafka = cfg.kafka_listener_list
    check_advertised("advertised.kafka.listeners", cfg.advertised_kafka_listeners, kafka, "kafka.listeners")
    cfg.advertised_kafka_listener_list  # noqa: B018 - parses advertised.kafka.listeners
    if not kafka:
        return
    grpc_listeners = cfg.listener_list
    grpc_names = {x.name for x in grpc_listeners}
    grpc_planes = {cfg.inter_broker_listener.name, cfg.control_plane_listener.name}
    clients = [x for x in grpc_listeners if x.name not in grpc_planes] or grpc_listeners
    all_tls = not any(x.security_protocol == "PLAINTEXT" for x in clients)
    all_authenticate = all(authenticates(cfg, x) for x in clients)
    for x in kafka:
        if x.name in grpc_names:
            raise ConfigError(f"kafka.listeners: {x.name} is also a gRPC listener in listeners; name it apart "
                              "(e.g. KAFKA)")
        if x.security_protocol in ("SSL", "SASL_SSL"):
            for key, path in (("ssl.keystore.location", cfg.ssl_keystore_location),
                              ("ssl.truststore.location", cfg.ssl_truststore_location)):
                if not path or not Path(path).is_file():
                    raise ConfigError(f"kafka.listeners: {x.name} is {x.security_protocol} and needs {key} "
                                      f"(PEM), got {path or 'nothing'!r}")
        if x.security_protocol == "PLAINTEXT" and all_tls:
            raise ConfigError(f"kafka.listeners: {x.name} is PLAINTEXT but every gRPC client listener of this "
                              "broker is TLS: it would let clients in unencrypted and unauthenticated. Map it to "
                              f"SASL_SSL in listener.security.protocol.map (e.g. {x.name}:SASL_SSL)")
        if all_authenticate and not authenticates(cfg, x):
            raise ConfigError(f"kafka.listeners: {x.name} ({x.security_protocol}) does not authenticate its "
                              "clients but every gRPC client listener does: it would let unauthenticated clients "
                              f"in. Map it to SASL_SSL (e.g. {x.name}:SASL_SSL)")


def load_config(path: Path | None, overrides: list[str]) -> BrokerConfig:
    props: dict[str, str] = {}
    if path is not None:
        try:
            props.update(parse_properties(path.read_text()))
        except PropertiesError as e:
            raise ConfigError(f"{path}: {e}") from None
        except OSError as e:
            raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        props[key.strip()] = value.strip()
    return build_config(props)
