"""Issue 34: the broker config table (broker.server.broker_config_defs) - every Kafka 2.8 broker config
name present with Kafka's defaults, the loader validating types and ranges against it with errors
naming the key, accepted-and-ignored and refused names, DescribeConfigs of brokers as Kafka answers it
(sources, synonyms, null values, sensitivity, documentation) on every Kafka wire version we serve, and
docs/configs.md generated from the table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kafka_frames import frame, read_response

from broker.log.config import CONFIG_TYPE_IDS, IGNORED, REFUSED, SUPPORTED
from broker.network import kafka_wire as kw
from broker.server.broker_config_defs import (
    BROKER_CONFIG_DEFS,
    BROKER_CONFIGS,
    KAFKA,
    LONG_MAX,
    BrokerConfigValueError,
    broker_config_markdown,
    broker_config_synonyms,
    check_broker_config,
)
from broker.server.broker_config_describe import broker_config_entries
from broker.server.config import CONFIG_DEFS, BrokerConfig, ConfigError, build_config
from client.cli.configs import entry_line
from proto import minikafka_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]
S = pb.ConfigSource

# Every broker config of Kafka 2.8 (KafkaConfig.configDef's public configs: the "Broker Configs" of
# Kafka 2.8's documentation, 218 names).
KAFKA_28_BROKER_CONFIGS = [
    'advertised.host.name', 'advertised.listeners', 'advertised.port', 'alter.config.policy.class.name',
    'alter.log.dirs.replication.quota.window.num', 'alter.log.dirs.replication.quota.window.size.seconds',
    'authorizer.class.name', 'auto.create.topics.enable', 'auto.leader.rebalance.enable',
    'background.threads', 'broker.id', 'broker.id.generation.enable', 'broker.rack',
    'client.quota.callback.class', 'compression.type', 'connection.failed.authentication.delay.ms',
    'connections.max.idle.ms', 'connections.max.reauth.ms', 'control.plane.listener.name',
    'controlled.shutdown.enable', 'controlled.shutdown.max.retries', 'controlled.shutdown.retry.backoff.ms',
    'controller.quota.window.num', 'controller.quota.window.size.seconds', 'controller.socket.timeout.ms',
    'create.topic.policy.class.name', 'default.replication.factor',
    'delegation.token.expiry.check.interval.ms', 'delegation.token.expiry.time.ms',
    'delegation.token.master.key', 'delegation.token.max.lifetime.ms', 'delegation.token.secret.key',
    'delete.records.purgatory.purge.interval.requests', 'delete.topic.enable', 'fetch.max.bytes',
    'fetch.purgatory.purge.interval.requests', 'group.initial.rebalance.delay.ms',
    'group.max.session.timeout.ms', 'group.max.size', 'group.min.session.timeout.ms', 'host.name',
    'inter.broker.listener.name', 'inter.broker.protocol.version', 'kafka.metrics.polling.interval.secs',
    'kafka.metrics.reporters', 'leader.imbalance.check.interval.seconds',
    'leader.imbalance.per.broker.percentage', 'listener.security.protocol.map', 'listeners',
    'log.cleaner.backoff.ms', 'log.cleaner.dedupe.buffer.size', 'log.cleaner.delete.retention.ms',
    'log.cleaner.enable', 'log.cleaner.io.buffer.load.factor', 'log.cleaner.io.buffer.size',
    'log.cleaner.io.max.bytes.per.second', 'log.cleaner.max.compaction.lag.ms',
    'log.cleaner.min.cleanable.ratio', 'log.cleaner.min.compaction.lag.ms', 'log.cleaner.threads',
    'log.cleanup.policy', 'log.dir', 'log.dirs', 'log.flush.interval.messages', 'log.flush.interval.ms',
    'log.flush.offset.checkpoint.interval.ms', 'log.flush.scheduler.interval.ms',
    'log.flush.start.offset.checkpoint.interval.ms', 'log.index.interval.bytes', 'log.index.size.max.bytes',
    'log.message.downconversion.enable', 'log.message.format.version',
    'log.message.timestamp.difference.max.ms', 'log.message.timestamp.type', 'log.preallocate',
    'log.retention.bytes', 'log.retention.check.interval.ms', 'log.retention.hours',
    'log.retention.minutes', 'log.retention.ms', 'log.roll.hours', 'log.roll.jitter.hours',
    'log.roll.jitter.ms', 'log.roll.ms', 'log.segment.bytes', 'log.segment.delete.delay.ms',
    'max.connection.creation.rate', 'max.connections', 'max.connections.per.ip',
    'max.connections.per.ip.overrides', 'max.incremental.fetch.session.cache.slots', 'message.max.bytes',
    'metric.reporters', 'metrics.num.samples', 'metrics.recording.level', 'metrics.sample.window.ms',
    'min.insync.replicas', 'num.io.threads', 'num.network.threads', 'num.partitions',
    'num.recovery.threads.per.data.dir', 'num.replica.alter.log.dirs.threads', 'num.replica.fetchers',
    'offset.metadata.max.bytes', 'offsets.commit.required.acks', 'offsets.commit.timeout.ms',
    'offsets.load.buffer.size', 'offsets.retention.check.interval.ms', 'offsets.retention.minutes',
    'offsets.topic.compression.codec', 'offsets.topic.num.partitions', 'offsets.topic.replication.factor',
    'offsets.topic.segment.bytes', 'password.encoder.cipher.algorithm', 'password.encoder.iterations',
    'password.encoder.key.length', 'password.encoder.keyfactory.algorithm', 'password.encoder.old.secret',
    'password.encoder.secret', 'port', 'principal.builder.class',
    'producer.purgatory.purge.interval.requests', 'queued.max.request.bytes', 'queued.max.requests',
    'quota.consumer.default', 'quota.producer.default', 'quota.window.num', 'quota.window.size.seconds',
    'replica.fetch.backoff.ms', 'replica.fetch.max.bytes', 'replica.fetch.min.bytes',
    'replica.fetch.response.max.bytes', 'replica.fetch.wait.max.ms',
    'replica.high.watermark.checkpoint.interval.ms', 'replica.lag.time.max.ms', 'replica.selector.class',
    'replica.socket.receive.buffer.bytes', 'replica.socket.timeout.ms', 'replication.quota.window.num',
    'replication.quota.window.size.seconds', 'request.timeout.ms', 'reserved.broker.max.id',
    'sasl.client.callback.handler.class', 'sasl.enabled.mechanisms', 'sasl.jaas.config',
    'sasl.kerberos.kinit.cmd', 'sasl.kerberos.min.time.before.relogin',
    'sasl.kerberos.principal.to.local.rules', 'sasl.kerberos.service.name',
    'sasl.kerberos.ticket.renew.jitter', 'sasl.kerberos.ticket.renew.window.factor',
    'sasl.login.callback.handler.class', 'sasl.login.class', 'sasl.login.refresh.buffer.seconds',
    'sasl.login.refresh.min.period.seconds', 'sasl.login.refresh.window.factor',
    'sasl.login.refresh.window.jitter', 'sasl.mechanism.inter.broker.protocol',
    'sasl.server.callback.handler.class', 'sasl.server.max.receive.size', 'security.inter.broker.protocol',
    'security.providers', 'socket.connection.setup.timeout.max.ms', 'socket.connection.setup.timeout.ms',
    'socket.receive.buffer.bytes', 'socket.request.max.bytes', 'socket.send.buffer.bytes',
    'ssl.cipher.suites', 'ssl.client.auth', 'ssl.enabled.protocols',
    'ssl.endpoint.identification.algorithm', 'ssl.engine.factory.class', 'ssl.key.password',
    'ssl.keymanager.algorithm', 'ssl.keystore.certificate.chain', 'ssl.keystore.key',
    'ssl.keystore.location', 'ssl.keystore.password', 'ssl.keystore.type', 'ssl.principal.mapping.rules',
    'ssl.protocol', 'ssl.provider', 'ssl.secure.random.implementation', 'ssl.trustmanager.algorithm',
    'ssl.truststore.certificates', 'ssl.truststore.location', 'ssl.truststore.password',
    'ssl.truststore.type', 'transaction.abort.timed.out.transaction.cleanup.interval.ms',
    'transaction.max.timeout.ms', 'transaction.remove.expired.transaction.cleanup.interval.ms',
    'transaction.state.log.load.buffer.size', 'transaction.state.log.min.isr',
    'transaction.state.log.num.partitions', 'transaction.state.log.replication.factor',
    'transaction.state.log.segment.bytes', 'transactional.id.expiration.ms',
    'unclean.leader.election.enable', 'zookeeper.clientCnxnSocket', 'zookeeper.connect',
    'zookeeper.connection.timeout.ms', 'zookeeper.max.in.flight.requests', 'zookeeper.session.timeout.ms',
    'zookeeper.set.acl', 'zookeeper.ssl.cipher.suites', 'zookeeper.ssl.client.enable',
    'zookeeper.ssl.crl.enable', 'zookeeper.ssl.enabled.protocols',
    'zookeeper.ssl.endpoint.identification.algorithm', 'zookeeper.ssl.keystore.location',
    'zookeeper.ssl.keystore.password', 'zookeeper.ssl.keystore.type', 'zookeeper.ssl.ocsp.enable',
    'zookeeper.ssl.protocol', 'zookeeper.ssl.truststore.location', 'zookeeper.ssl.truststore.password',
    'zookeeper.ssl.truststore.type', 'zookeeper.sync.time.ms'
]

# Kafka 2.8's internal configs (KRaft, early access): refused by name.
KAFKA_28_INTERNAL_CONFIGS = [
    "broker.heartbeat.interval.ms", "broker.session.timeout.ms", "controller.listener.names",
    "controller.quorum.append.linger.ms", "controller.quorum.election.backoff.max.ms",
    "controller.quorum.election.timeout.ms", "controller.quorum.fetch.timeout.ms",
    "controller.quorum.request.timeout.ms", "controller.quorum.retry.backoff.ms", "controller.quorum.voters",
    "initial.broker.registration.timeout.ms", "metadata.log.dir", "node.id", "process.roles",
    "sasl.mechanism.controller.protocol",
]

# A sample of Kafka 2.8's defaults, as `kafka-configs --describe --all` shows them (None: null).
KAFKA_28_DEFAULTS = {
    "broker.id": "-1", "num.network.threads": "3", "num.io.threads": "8", "background.threads": "10",
    "queued.max.requests": "500", "queued.max.request.bytes": "-1", "socket.send.buffer.bytes": "102400",
    "socket.receive.buffer.bytes": "102400", "socket.request.max.bytes": "104857600", "log.dirs": None,
    "log.dir": "/tmp/kafka-logs", "num.partitions": "1", "log.segment.bytes": "1073741824",
    "log.retention.hours": "168", "log.retention.minutes": None, "log.retention.ms": None,
    "log.retention.bytes": "-1", "log.retention.check.interval.ms": "300000", "log.roll.hours": "168",
    "log.cleanup.policy": "delete", "log.cleaner.io.max.bytes.per.second": "1.7976931348623157E308",
    "message.max.bytes": "1048588", "replica.lag.time.max.ms": "30000", "replica.fetch.max.bytes": "1048576",
    "zookeeper.session.timeout.ms": "18000", "zookeeper.connect": None, "group.min.session.timeout.ms": "6000",
    "group.max.session.timeout.ms": "1800000", "group.initial.rebalance.delay.ms": "3000",
    "group.max.size": "2147483647", "offsets.retention.minutes": "10080",
    "offsets.retention.check.interval.ms": "600000", "offsets.topic.replication.factor": "3",
    "transaction.state.log.min.isr": "2", "inter.broker.protocol.version": "2.8-IV1",
    "log.message.format.version": "2.8-IV1", "sasl.enabled.mechanisms": "GSSAPI", "ssl.keystore.type": "JKS",
    "ssl.client.auth": "none", "max.connections": "2147483647", "fetch.max.bytes": "57671680",
    "compression.type": "producer", "log.flush.interval.messages": str(LONG_MAX),
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
}

# Kafka 2.8's config/server.properties, as it ships: every name in it loads here.
KAFKA_28_SERVER_PROPERTIES = {
    "broker.id": "0", "num.network.threads": "3", "num.io.threads": "8", "socket.send.buffer.bytes": "102400",
    "socket.receive.buffer.bytes": "102400", "socket.request.max.bytes": "104857600", "log.dirs": "/tmp/kafka-logs",
    "num.partitions": "1", "num.recovery.threads.per.data.dir": "1", "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
    "log.retention.hours": "168", "log.segment.bytes": "1073741824", "log.retention.check.interval.ms": "300000",
    "zookeeper.connect": "localhost:2181", "zookeeper.connection.timeout.ms": "18000",
    "group.initial.rebalance.delay.ms": "0",
}

# A broker the loader accepts (the inter-broker listener is SSL: SPEC S12.1).
BASE = {"broker.id": "2", "zookeeper.connect": "127.0.0.1:2181", "log.dirs": "/tmp/x",
        "listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": __file__, "ssl.truststore.location": __file__}


def load(**extra: str) -> BrokerConfig:
    return build_config({**BASE, **extra})


# ---------------------------------------------------------------- the table


def test_the_table_has_every_kafka_28_broker_config() -> None:
    assert len(KAFKA_28_BROKER_CONFIGS) == 218 == len(set(KAFKA_28_BROKER_CONFIGS))
    kafka = [d.name for d in BROKER_CONFIGS if d.origin == KAFKA and not d.internal]
    assert sorted(kafka) == sorted(KAFKA_28_BROKER_CONFIGS)
    internal = [d.name for d in BROKER_CONFIGS if d.internal]
    assert sorted(internal) == sorted(KAFKA_28_INTERNAL_CONFIGS)
    assert all(BROKER_CONFIG_DEFS[n].status == REFUSED for n in internal)
    assert [d.name for d in BROKER_CONFIGS] == sorted(d.name for d in BROKER_CONFIGS) and \
        len(BROKER_CONFIG_DEFS) == len(BROKER_CONFIGS)
    for name, default in KAFKA_28_DEFAULTS.items():
        assert BROKER_CONFIG_DEFS[name].default == default, name
    d = BROKER_CONFIG_DEFS["num.network.threads"]
    assert (d.type, d.low, d.update_mode, d.importance) == ("int", 1, "cluster-wide", "high")
    assert BROKER_CONFIG_DEFS["broker.id"].update_mode == "read-only"
    assert BROKER_CONFIG_DEFS["listeners"].update_mode == "per-broker"
    assert BROKER_CONFIG_DEFS["log.cleanup.policy"].valid == ("compact", "delete")
    assert {d.type for d in BROKER_CONFIGS} <= set(CONFIG_TYPE_IDS)
    assert all(d.doc for d in BROKER_CONFIGS)


def test_every_status_is_explained_and_supported_ones_are_read_by_the_broker() -> None:
    supported = {d.name for d in BROKER_CONFIGS if d.status == SUPPORTED}
    # The loader reads exactly the supported names, each into a field of BrokerConfig.
    assert set(CONFIG_DEFS) == supported
    assert all(hasattr(BrokerConfig(), CONFIG_DEFS[n].attr) for n in supported)
    for d in BROKER_CONFIGS:
        assert d.status in (SUPPORTED, IGNORED, REFUSED), d.name
        if d.status != SUPPORTED:
            assert d.reason, f"{d.name} is {d.status} without a reason"
        assert not d.accepts_default or d.status == REFUSED, d.name
    # Where this broker's default differs from Kafka's, the table says so and why ("" and 0 are how
    # BrokerConfig spells Kafka's null: not set).
    defaults = BrokerConfig()
    for name in supported:
        d = BROKER_CONFIG_DEFS[name]
        ours = getattr(defaults, CONFIG_DEFS[name].attr)
        ours_text = str(ours).lower() if isinstance(ours, bool) else \
            repr(ours).replace("e+", "E") if isinstance(ours, float) else str(ours)
        same = ours_text == d.default or (d.default is None and ours in ("", 0))
        assert same or d.reason, f"{name}: default {ours_text} here, {d.default} in Kafka, and no reason given"
    for name in ("num.network.threads", "num.io.threads", "queued.max.requests", "socket.send.buffer.bytes",
                 "offsets.topic.replication.factor", "transaction.state.log.min.isr"):
        assert name in supported or BROKER_CONFIG_DEFS[name].status == IGNORED, name


def test_synonyms_are_kafkas() -> None:
    assert broker_config_synonyms("log.retention.hours") == ("log.retention.ms", "log.retention.minutes",
                                                             "log.retention.hours")
    assert broker_config_synonyms("log.roll.ms") == ("log.roll.ms", "log.roll.hours")
    assert broker_config_synonyms("log.flush.interval.ms") == ("log.flush.interval.ms",
                                                               "log.flush.scheduler.interval.ms")
    assert broker_config_synonyms("log.flush.scheduler.interval.ms") == ("log.flush.scheduler.interval.ms",)
    assert broker_config_synonyms("num.io.threads") == ("num.io.threads",)


# ---------------------------------------------------------------- the loader


def test_kafkas_stock_server_properties_loads() -> None:
    for key, value in KAFKA_28_SERVER_PROPERTIES.items():
        check_broker_config(key, value)
    cfg = load(**{k: v for k, v in KAFKA_28_SERVER_PROPERTIES.items() if k not in ("broker.id", "log.dirs",
                                                                                   "zookeeper.connect")})
    assert cfg.group_initial_rebalance_delay_ms == 0 and cfg.zookeeper_connection_timeout_ms == 18000
    # The ignored ones are kept, as Kafka describes their values.
    assert dict(cfg.ignored_configs)["num.network.threads"] == "3"
    assert "num.network.threads" not in CONFIG_DEFS


@pytest.mark.parametrize(("key", "good", "bad", "why"), [
    ("num.network.threads", ["1", " 64 "], ["0", "-1"], "must be in [1,...]"),                   # int, [1,...]
    ("num.network.threads", [], ["x", "1.5", "", "2147483648", "1_000"], "not a number of type int"),
    ("offsets.topic.replication.factor", ["1", "32767"], ["32768"], "not a number of type short"),  # short
    ("offsets.retention.check.interval.ms", ["1", str(LONG_MAX)], [str(LONG_MAX + 1)], "type long"),  # long
    ("offsets.retention.check.interval.ms", [], ["0"], "[1,...]"),
    ("sasl.kerberos.ticket.renew.jitter", ["0.05", "1e-3"], ["x", "nan"], "not a number"),        # double
    ("delete.topic.enable", ["true", "FALSE", " true "], ["yes", "1", ""], "true or false"),      # boolean
    ("log.cleanup.policy", ["delete", "compact, delete"], ["delete,remove"], "compact, delete"),  # list
    ("ssl.client.auth", ["none", "required"], ["requested"], "none or required"),   # narrower than Kafka's
    ("metrics.recording.level", ["INFO", "DEBUG"], [], ""),                                       # string
    ("inter.broker.protocol.version", ["2.8-IV1", "2.4", "0.11.0"], ["0.10.2-IV0", "3.0", "x"], "0.11.0 to 2.8"),
    ("log.message.format.version", ["2.8", "1.0"], ["0.9.0"], "0.11.0 to 2.8"),
    ("message.max.bytes", ["0", "104857600"], ["104857601"], "between 0 and 104857600"),
    ("group.initial.rebalance.delay.ms", ["0", "3000"], ["-1"], ">= 0"),
    ("log.segment.delete.delay.ms", ["0"], ["-1"], "[0,...]"),
])
def test_types_and_ranges(key: str, good: list[str], bad: list[str], why: str) -> None:
    for v in good:
        load(**{key: v})
    for v in bad:
        with pytest.raises(ConfigError, match=re.escape(key)) as e:
            load(**{key: v})
        assert why in str(e.value), str(e.value)


def test_unknown_and_refused_names() -> None:
    with pytest.raises(ConfigError, match=re.escape("unknown broker config 'num.netwrok.threads'")):
        load(**{"num.netwrok.threads": "3"})
    for key, value in [("port", "9092"), ("host.name", ""), ("security.inter.broker.protocol", "SSL"),
                       ("process.roles", "broker"), ("node.id", "1"), ("ssl.keystore.password", "secret"),
                       ("metric.reporters", "com.example.Reporter"), ("sasl.jaas.config", "x required;"),
                       ("max.connections.per.ip", "10"), ("zookeeper.ssl.client.enable", "true"),
                       ("quota.producer.default", "1000"), ("principal.builder.class", "com.example.P")]:
        with pytest.raises(ConfigError, match=re.escape(f"broker config {key} is not supported: ")) as e:
            load(**{key: value})
        assert BROKER_CONFIG_DEFS[key].reason in str(e.value)
    # Refused unless Kafka's default: the default (or empty, where Kafka's is null) is accepted.
    cfg = load(**{"metric.reporters": "", "ssl.keystore.password": "", "max.connections.per.ip": "2147483647",
                  "zookeeper.ssl.client.enable": "false", "quota.producer.default": str(LONG_MAX)})
    assert dict(cfg.ignored_configs)["zookeeper.ssl.client.enable"] == "false"
    # The type is checked before the name is refused: Kafka's error for a bad value.
    with pytest.raises(ConfigError, match=re.escape("invalid value 'x' for port: not a number of type int")):
        load(port="x")
    with pytest.raises(BrokerConfigValueError):
        check_broker_config("controller.quorum.voters", "1@h:9093")


def test_log_segment_delete_delay_is_the_topics_default() -> None:
    assert load(**{"log.segment.delete.delay.ms": "5"}).default_log_config().file_delete_delay_ms == 5
    assert BrokerConfig().default_log_config().file_delete_delay_ms == 60000


# ---------------------------------------------------------------- DescribeConfigs of brokers


def _entries(cfg: BrokerConfig, keys: tuple[str, ...] = ()) -> dict[str, pb.ConfigEntry]:
    return {e.name: e for e in broker_config_entries(cfg, str(cfg.broker_id), keys)}


def _syn(e: pb.ConfigEntry) -> list[tuple[str, str, int]]:
    return [(s.name, s.value, s.source) for s in e.synonyms]


def test_describe_lists_every_config_with_sources_synonyms_and_docs() -> None:
    cfg = load(**{"request.timeout.ms": "5000", "log.retention.hours": "24", "num.io.threads": "16",
                  "log.roll.ms": "3600000", "ssl.keystore.password": ""})
    entries = _entries(cfg)
    assert sorted(entries) == sorted(d.name for d in BROKER_CONFIGS if not d.internal)
    assert set(KAFKA_28_BROKER_CONFIGS) <= set(entries)
    assert all(e.read_only for e in entries.values())  # no broker config is dynamic here
    # Set in the config: STATIC_BROKER_CONFIG, then the default.
    rt = entries["request.timeout.ms"]
    assert (rt.value, rt.source, rt.is_default, rt.value_null) == ("5000", S.STATIC_BROKER_CONFIG, False, False)
    assert _syn(rt) == [("request.timeout.ms", "5000", S.STATIC_BROKER_CONFIG),
                        ("request.timeout.ms", "30000", S.DEFAULT_CONFIG)]
    assert rt.documentation == BROKER_CONFIG_DEFS["request.timeout.ms"].doc and rt.config_type == CONFIG_TYPE_IDS["int"]
    # Kafka's synonyms: log.retention.ms is null (not set), its synonyms from itself on (none);
    # log.retention.hours shows its own static value and default.
    ms = entries["log.retention.ms"]
    assert (ms.value, ms.value_null, ms.source, _syn(ms)) == ("", True, S.DEFAULT_CONFIG, [])
    hours = entries["log.retention.hours"]
    assert _syn(hours) == [("log.retention.hours", "24", S.STATIC_BROKER_CONFIG),
                           ("log.retention.hours", "168", S.DEFAULT_CONFIG)]
    roll = entries["log.roll.ms"]
    assert _syn(roll) == [("log.roll.ms", "3600000", S.STATIC_BROKER_CONFIG),
                          ("log.roll.hours", "168", S.DEFAULT_CONFIG)]
    # Not set, Kafka default: DEFAULT_CONFIG with this broker's value.
    gms = entries["group.max.size"]
    assert (gms.value, gms.source, gms.is_default) == ("1000", S.DEFAULT_CONFIG, True)
    # Accepted and ignored: its value as given, or Kafka's default.
    io = entries["num.io.threads"]
    assert (io.value, io.source) == ("16", S.STATIC_BROKER_CONFIG)
    assert _syn(io) == [("num.io.threads", "16", S.STATIC_BROKER_CONFIG), ("num.io.threads", "8", S.DEFAULT_CONFIG)]
    assert entries["num.network.threads"].value == "3"
    assert entries["log.cleaner.io.max.bytes.per.second"].value == "1.7976931348623157E308"
    # Null defaults, not set: null; sensitive ones without a value, PASSWORD type or ours.
    assert entries["broker.rack"].value_null and entries["zookeeper.connection.timeout.ms"].value_null
    pw = entries["ssl.keystore.password"]
    assert pw.is_sensitive and pw.value == "" and pw.source == S.STATIC_BROKER_CONFIG
    assert entries["sasl.jaas.config"].is_sensitive and entries["delegation.token.master.key"].is_sensitive
    zk = entries["zookeeper.connect"]
    assert zk.is_sensitive and zk.value == "" and [s.value for s in zk.synonyms] == [""]
    assert not entries["num.partitions"].is_sensitive
    assert entry_line(entries["broker.rack"]) == "  broker.rack=null sensitive=false synonyms={}"
    assert entry_line(rt) == ("  request.timeout.ms=5000 sensitive=false synonyms={STATIC_BROKER_CONFIG:"
                              "request.timeout.ms=5000, DEFAULT_CONFIG:request.timeout.ms=30000}")
    # Only the keys asked for; the cluster-wide default resource has no dynamic configs here.
    assert list(_entries(cfg, ("num.io.threads", "broker.id"))) == ["broker.id", "num.io.threads"]
    assert broker_config_entries(cfg, "") == []


@pytest.mark.parametrize("version", [1, 2, 3, 4])
@pytest.mark.parametrize("include", [False, True])
def test_describe_broker_encoding_on_every_version(version: int, include: bool) -> None:
    values = {"resources": [{"resource_type": 4, "resource_name": "2", "configuration_keys": None}],
              "include_synonyms": include}
    if version >= 3:
        values["include_documentation"] = include
    d = kw.decode_request(frame(32, version, values))
    cfg = load(**{"request.timeout.ms": "5000"})
    resp = pb.DescribeConfigsResponse(results=[pb.DescribeConfigsResult(
        resource_type=4, resource_name="2", configs=broker_config_entries(cfg, "2"))])
    _corr, body = read_response(kw.encode_answer(d, [resp]), 32, version)
    (result,) = body.results
    got = {c.name: c for c in result.configs}
    assert set(KAFKA_28_BROKER_CONFIGS) <= set(got)
    rt, rack, zk = got["request.timeout.ms"], got["broker.rack"], got["zookeeper.connect"]
    assert (rt.value, rt.config_source, rt.read_only, rt.is_sensitive) == ("5000", 4, True, False)
    assert (rack.value, rack.config_source) == (None, 5)  # Kafka's null
    assert (zk.value, zk.is_sensitive) == (None, True)
    if include:
        assert [(s.name, s.value, s.source) for s in rt.synonyms] == [
            ("request.timeout.ms", "5000", 4), ("request.timeout.ms", "30000", 5)]
        assert [(s.name, s.value) for s in zk.synonyms] == [("zookeeper.connect", None)]
    else:
        assert rt.synonyms == ()
    if version >= 3:
        assert rt.config_type == 3
        assert (rt.documentation is not None) == include
        if include:
            assert rt.documentation == BROKER_CONFIG_DEFS["request.timeout.ms"].doc


# ---------------------------------------------------------------- docs/configs.md


def test_docs_configs_holds_the_table() -> None:
    doc = (ROOT / "docs" / "configs.md").read_text()
    begin = doc.index("<!-- broker-configs:begin")
    body = doc[doc.index("\n", begin) + 1:doc.index("<!-- broker-configs:end -->")]
    assert body.strip() == broker_config_markdown().strip(), \
        "docs/configs.md's broker config table is stale: paste broker_config_markdown()"
    assert "(docs/configs.md)" in (ROOT / "README.md").read_text()
    for d in BROKER_CONFIGS:
        assert f"| `{d.name}" in body, d.name
