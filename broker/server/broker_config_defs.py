"""Every broker config of Kafka 2.8 by name, and this broker's own: the broker config table.

Theory of operation
-------------------
``BROKER_CONFIGS`` holds one ``BrokerConfigDef`` per name: every config of Kafka 2.8's
``KafkaConfig.configDef`` (its public ones, as Kafka's "Broker Configs" documentation lists them,
and its internal KRaft ones), the two of Kafka's ``AclAuthorizer`` that a broker's properties carry
(``super.users``, ``allow.everyone.if.no.acl.found``), and this broker's own (``kafka.listeners``,
``min.segment.bytes``, ...: SPEC S13.4's bounds and the gRPC/Kafka listener split). Each has Kafka's
type, Kafka's default (as DescribeConfigs shows it; ``None`` is Kafka's null), Kafka's valid range,
Kafka's dynamic update mode (read-only / per-broker / cluster-wide, ``DynamicBrokerConfig``), its
documentation (Kafka's own text for Kafka's configs) and a status:

* *supported*: the broker reads it (``broker.server.config.CONFIG_DEFS`` maps it to a
  ``BrokerConfig`` field, and may narrow its range: ``reason`` says where, and where this broker's
  default differs from Kafka's and why);
* *accepted-and-ignored*: validated as Kafka validates it (type, range), kept and described, and
  changes nothing here - ``reason`` says why our design has no use for it;
* *refused*: naming it stops the broker at start with ``reason``; with ``accepts_default`` only a
  value other than Kafka's default is refused (a stock ``server.properties`` that spells out
  defaults still loads, a setting that would not be honoured does not).

A name in no row is an unknown broker config, refused at start as before (Kafka only warns; a
typo here should not silently lose a setting). ``check_broker_config`` is the table's half of the
loader's validation (``broker.server.config.build_config`` adds the narrower checks of supported
configs); ``broker_config_synonyms`` is Kafka's ``brokerConfigSynonyms`` for DescribeConfigs; the
table in docs/configs.md is ``broker_config_markdown()`` (a unit test keeps the two equal).

Pure data and pure functions: no I/O.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Final

from broker.log.config import IGNORED, REFUSED, SUPPORTED

READ_ONLY: Final = "read-only"
PER_BROKER: Final = "per-broker"
CLUSTER_WIDE: Final = "cluster-wide"

KAFKA: Final = "KafkaConfig"
ACL_AUTHORIZER: Final = "AclAuthorizer"
MINIKAFKA: Final = "minikafka"
KAFKA_36: Final = "Kafka 3.6"  # a later Kafka's config this broker has too (KIP-890 part 1)

_INT_TYPES: Final = {"short": (-(1 << 15), (1 << 15) - 1), "int": (-(1 << 31), (1 << 31) - 1),
                     "long": (-(1 << 63), (1 << 63) - 1)}
LONG_MAX: Final = (1 << 63) - 1


class BrokerConfigValueError(ValueError):
    """A broker config name that is unknown or refused, or a value outside its type or range; the
    message names the key."""


@dataclass(frozen=True, slots=True)
class BrokerConfigDef:
    name: str
    type: str  # Kafka's ConfigDef type: boolean, string, int, short, long, double, list, class, password
    default: str | None  # Kafka's default as Kafka shows it; None is null
    update_mode: str  # Kafka's: read-only, per-broker or cluster-wide (none is dynamic here)
    status: str
    low: float | None = None
    high: float | None = None
    valid: tuple[str, ...] = ()
    accepts_default: bool = False  # refused, except at Kafka's default (or empty, where that is null)
    origin: str = KAFKA
    internal: bool = False  # Kafka's internal configs (KRaft): not documented nor described by Kafka
    importance: str = ""
    reason: str = ""
    doc: str = ""

    @property
    def sensitive(self) -> bool:
        """Kafka's ``KafkaConfig.maybeSensitive``: PASSWORD-typed configs are described as null."""
        return self.type == "password"

    @property
    def valid_text(self) -> str:
        """The valid values as Kafka's documentation words them."""
        if self.valid:
            return "[" + ", ".join(self.valid) + "]"
        if self.name in _VERSION_CONFIGS:
            return "[0.11.0, ..., 2.8]"
        if self.low is None and self.high is None:
            return ""
        lo = "..." if self.low is None else _num(self.low)
        return f"[{lo},...]" if self.high is None else f"[{lo},...,{_num(self.high)}]"

    @property
    def here(self) -> str:
        """The status as docs/configs.md words it."""
        status = "refused unless Kafka's default" if self.accepts_default else self.status
        return status + (f": {self.reason}" if self.reason else "")


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


_c = BrokerConfigDef

# Why groups of Kafka's configs are accepted and ignored or refused.
_THREADS = (
    'one asyncio event loop per broker (and worker threads for disk and ZooKeeper calls) serves every'
    ' connection: there are no network/IO/recovery/fetcher thread pools to size')
_QUOTA = (
    'no client or replication quotas here (SPEC S13.4 bounds what each request may cost instead): the'
    ' quota windows have nothing to sample')
_OFFSETS_TOPIC = (
    "committed offsets live in ZooKeeper (/consumers/<group>/offsets, as Kafka's ZooKeeper-era "
    'consumers), not in an __consumer_offsets topic')
_TXN = (
    "transactions' state lives in ZooKeeper (/transactions/<transactional.id>, one znode per id, "
    'written by its coordinator under a fenced lease), not in a __transaction_state topic')
_PURGATORY = (
    'the purgatories drop a completed operation at once: there is nothing to purge periodically')
_SOCKBUF = (
    "socket buffers are left to the kernel's autotuning")
_JSSE = (
    "TLS is OpenSSL's (Python's ssl module), not Java's JSSE: there is no provider, key/trust manager"
    ' algorithm or secure random implementation to choose')
_CLASS = (
    'Java plug-in classes cannot be loaded: this broker is Python')
_KERB = (
    'GSSAPI (Kerberos) is not offered (sasl.enabled.mechanisms is SCRAM-SHA-256): the Kerberos '
    'settings have nothing to act on')
_OAUTH = (
    'OAUTHBEARER is not offered (sasl.enabled.mechanisms is SCRAM-SHA-256): there is no login to '
    'refresh')
_ZKSSL = (
    'only used with zookeeper.ssl.client.enable, which is refused: ZooKeeper is reached without TLS')
_METRICS = (
    'metrics are Prometheus counters and gauges served on metrics.port, not sampled windows')
_DELEG = (
    'delegation tokens (KIP-48) are not offered: the token lifetimes have nothing to act on')
_PWENC = (
    'there are no dynamic broker configs here (AlterConfigs of brokers is refused), so no password '
    'configs to encrypt in ZooKeeper')
_KRAFT = "KRaft mode (KIP-500, early access in Kafka 2.8) is not offered: brokers use ZooKeeper and a ZooKeeper-elected controller"

# Every broker config, alphabetically: Kafka 2.8's (KafkaConfig, docs from Kafka's own), AclAuthorizer's and ours.
BROKER_CONFIGS: Final[tuple[BrokerConfigDef, ...]] = (
    _c('advertised.host.name', 'string', None, READ_ONLY, REFUSED, importance='high', reason='deprecated in Kafka since 0.10: give advertised.listeners',
       doc='DEPRECATED: only used when <code>advertised.listeners</code> or <code>listeners</code> are not '
           'set. Use <code>advertised.listeners</code> instead. <br>Hostname to publish to ZooKeeper for '
           'clients to use. In IaaS environments, this may need to be different from the interface to which '
           'the broker binds. If this is not set, it will use the value for <code>host.name</code> if '
           'configured. Otherwise it will use the value returned from '
           'java.net.InetAddress.getCanonicalHostName().'),
    _c('advertised.kafka.listeners', 'string', '', READ_ONLY, SUPPORTED, origin=MINIKAFKA,
       doc='Kafka wire-protocol listeners to publish for clients, if different from kafka.listeners '
           '(NAME://host:port,...).'),
    _c('advertised.listeners', 'string', None, PER_BROKER, SUPPORTED, importance='high',
       doc='Listeners to publish to ZooKeeper for clients to use, if different than the '
           '<code>listeners</code> config property. In IaaS environments, this may need to be different from'
           ' the interface to which the broker binds. If this is not set, the value for '
           '<code>listeners</code> will be used. Unlike <code>listeners</code>, it is not valid to advertise'
           ' the 0.0.0.0 meta-address.<br> Also unlike <code>listeners</code>, there can be duplicated ports'
           " in this property, so that one listener can be configured to advertise another listener's "
           'address. This can be useful in some cases where external load balancers are used.'),
    _c('advertised.port', 'int', None, READ_ONLY, REFUSED, importance='high', reason='deprecated in Kafka since 0.10: give advertised.listeners',
       doc='DEPRECATED: only used when <code>advertised.listeners</code> or <code>listeners</code> are not '
           'set. Use <code>advertised.listeners</code> instead. <br>The port to publish to ZooKeeper for '
           'clients to use. In IaaS environments, this may need to be different from the port to which the '
           'broker binds. If this is not set, it will publish the same port that the broker binds to.'),
    _c('allow.everyone.if.no.acl.found', 'boolean', 'false', READ_ONLY, SUPPORTED, origin=ACL_AUTHORIZER,
       doc='AclAuthorizer: whether a resource with no ACL is open to every principal (false: only super '
           'users may use it).'),
    _c('alter.config.policy.class.name', 'class', None, READ_ONLY, REFUSED, accepts_default=True, importance='low', reason='Java plug-in classes cannot be loaded: this broker is Python (no AlterConfigs policy plug-ins)',
       doc='The alter configs policy class that should be used for validation. The class should implement '
           'the <code>org.apache.kafka.server.policy.AlterConfigPolicy</code> interface.'),
    _c('alter.log.dirs.replication.quota.window.num', 'int', '11', READ_ONLY, IGNORED, low=1, importance='low', reason=_QUOTA,
       doc='The number of samples to retain in memory for alter log dirs replication quotas'),
    _c('alter.log.dirs.replication.quota.window.size.seconds', 'int', '1', READ_ONLY, IGNORED, low=1, importance='low', reason=_QUOTA,
       doc='The time span of each sample for alter log dirs replication quotas'),
    _c('authorizer.class.name', 'string', '', READ_ONLY, SUPPORTED, importance='low', reason="empty (no authorizer) or kafka.security.authorizer.AclAuthorizer (also spelt AclAuthorizer): ACLs are stored in ZooKeeper as Kafka's AclAuthorizer stores them",
       doc='The fully qualified name of a class that implements '
           'sorg.apache.kafka.server.authorizer.Authorizer interface, which is used by the broker for '
           'authorization. This config also supports authorizers that implement the deprecated '
           'kafka.security.auth.Authorizer trait which was previously used for authorization.'),
    _c('auto.create.topics.enable', 'boolean', 'true', READ_ONLY, SUPPORTED, importance='high',
       doc='Enable auto creation of topic on the server'),
    _c('auto.leader.rebalance.enable', 'boolean', 'true', READ_ONLY, SUPPORTED, importance='high',
       doc='Enables auto leader balancing. A background thread checks the distribution of partition leaders '
           'at regular intervals, configurable by `leader.imbalance.check.interval.seconds`. If the leader '
           'imbalance exceeds `leader.imbalance.per.broker.percentage`, leader rebalance to the preferred '
           'leader for partitions is triggered.'),
    _c('background.threads', 'int', '10', CLUSTER_WIDE, IGNORED, low=1, importance='high', reason=_THREADS,
       doc='The number of threads to use for various background processing tasks'),
    _c('broker.heartbeat.interval.ms', 'int', '2000', READ_ONLY, REFUSED, internal=True, reason=_KRAFT,
       doc='KRaft mode (KIP-500): internal, early access in Kafka 2.8.'),
    _c('broker.id', 'int', '-1', READ_ONLY, SUPPORTED, importance='high',
       doc='The broker id for this server. If unset, a unique broker id will be generated.To avoid conflicts'
           " between zookeeper generated broker id's and user configured broker id's, generated broker ids "
           'start from reserved.broker.max.id + 1.'),
    _c('broker.id.generation.enable', 'boolean', 'true', READ_ONLY, IGNORED, importance='medium', reason='broker.id is required (a broker id is never generated), so this changes nothing',
       doc='Enable automatic broker id generation on the server. When enabled the value configured for '
           'reserved.broker.max.id should be reviewed.'),
    _c('broker.principal.prefix', 'string', 'broker-', READ_ONLY, SUPPORTED, origin=MINIKAFKA,
       doc='The certificate common names that identify brokers on the inter-broker listener: a client '
           'certificate whose CN starts with this prefix is a broker (User:<CN>).'),
    _c('broker.rack', 'string', None, READ_ONLY, SUPPORTED, importance='medium',
       doc='Rack of the broker. This will be used in rack aware replication assignment for fault tolerance. '
           'Examples: `RACK1`, `us-east-1d`'),
    _c('broker.session.timeout.ms', 'int', '9000', READ_ONLY, REFUSED, internal=True, reason=_KRAFT,
       doc='KRaft mode (KIP-500): internal, early access in Kafka 2.8.'),
    _c('client.quota.callback.class', 'class', None, READ_ONLY, REFUSED, accepts_default=True, importance='low', reason='Java plug-in classes cannot be loaded: this broker is Python (and there are no client quotas)',
       doc='The fully qualified name of a class that implements the ClientQuotaCallback interface, which is '
           'used to determine quota limits applied to client requests. By default, <user, client-id>, <user>'
           ' or <client-id> quotas stored in ZooKeeper are applied. For any given request, the most specific'
           ' quota that matches the user principal of the session and the client-id of the request is '
           'applied.'),
    _c('compression.type', 'string', 'producer', CLUSTER_WIDE, SUPPORTED, importance='high',
       doc='Specify the final compression type for a given topic. This configuration accepts the standard '
           "compression codecs ('gzip', 'snappy', 'lz4', 'zstd'). It additionally accepts 'uncompressed' "
           "which is equivalent to no compression; and 'producer' which means retain the original "
           'compression codec set by the producer.'),
    _c('connection.failed.authentication.delay.ms', 'int', '100', READ_ONLY, IGNORED, low=0, importance='low', reason='a failed SASL authentication closes the connection at once',
       doc='Connection close delay on failed authentication: this is the time (in milliseconds) by which '
           'connection close will be delayed on authentication failure. This must be configured to be less '
           'than connections.max.idle.ms to prevent connection timeout.'),
    _c('connections.max.idle.ms', 'long', '600000', READ_ONLY, SUPPORTED, importance='medium',
       doc='Idle connections timeout: the server socket processor threads close the connections that idle '
           'more than this'),
    _c('connections.max.reauth.ms', 'long', '0', READ_ONLY, REFUSED, accepts_default=True, importance='medium', reason='no re-authentication of SASL sessions (KIP-368): a connection authenticates once',
       doc='When explicitly set to a positive number (the default is 0, not a positive number), a session '
           'lifetime that will not exceed the configured value will be communicated to v2.2.0 or later '
           'clients when they authenticate. The broker will disconnect any such connection that is not '
           're-authenticated within the session lifetime and that is then subsequently used for any purpose '
           'other than re-authentication. Configuration names can optionally be prefixed with listener '
           'prefix and SASL mechanism name in lower-case. For example, '
           'listener.name.sasl_ssl.oauthbearer.connections.max.reauth.ms=3600000'),
    _c('control.plane.listener.name', 'string', None, READ_ONLY, SUPPORTED, importance='high',
       doc='Name of listener used for communication between controller and brokers. Broker will use the '
           'control.plane.listener.name to locate the endpoint in listeners list, to listen for connections '
           "from the controller. For example, if a broker's config is :<br>listeners = "
           'INTERNAL://192.1.1.8:9092, EXTERNAL://10.1.1.5:9093, '
           'CONTROLLER://192.1.1.8:9094<br>listener.security.protocol.map = INTERNAL:PLAINTEXT, '
           'EXTERNAL:SSL, CONTROLLER:SSL<br>control.plane.listener.name = CONTROLLER<br>On startup, the '
           'broker will start listening on "192.1.1.8:9094" with security protocol "SSL".<br>On controller '
           "side, when it discovers a broker's published endpoints through zookeeper, it will use the "
           'control.plane.listener.name to find the endpoint, which it will use to establish connection to '
           "the broker.<br>For example, if the broker's published endpoints on zookeeper are "
           ':<br>"endpoints" : ["INTERNAL://broker1.example.com:9092","EXTERNAL://broker1.example.com:9093",'
           '"CONTROLLER://broker1.example.com:9094"]<br> and the controller\'s config is '
           ':<br>listener.security.protocol.map = INTERNAL:PLAINTEXT, EXTERNAL:SSL, '
           'CONTROLLER:SSL<br>control.plane.listener.name = CONTROLLER<br>then controller will use '
           '"broker1.example.com:9094" with security protocol "SSL" to connect to the broker.<br>If not '
           'explicitly configured, the default value will be null and there will be no dedicated endpoints '
           'for controller connections.'),
    _c('controlled.shutdown.enable', 'boolean', 'true', READ_ONLY, SUPPORTED, importance='medium',
       doc='Enable controlled shutdown of the server'),
    _c('controlled.shutdown.max.retries', 'int', '3', READ_ONLY, SUPPORTED, importance='medium',
       doc='Controlled shutdown can fail for multiple reasons. This determines the number of retries when '
           'such failure happens'),
    _c('controlled.shutdown.retry.backoff.ms', 'long', '5000', READ_ONLY, SUPPORTED, importance='medium',
       doc='Before each retry, the system needs time to recover from the state that caused the previous '
           'failure (Controller fail over, replica lag etc). This config determines the amount of time to '
           'wait before retrying.'),
    _c('controller.listener.names', 'string', None, READ_ONLY, REFUSED, internal=True, reason=_KRAFT,
       doc='KRaft mode (KIP-500): internal, early access in Kafka 2.8.'),
    _c('controller.quorum.append.linger.ms', 'int', '25', READ_ONLY, REFUSED, internal=True, reason=_KRAFT,
       doc='KRaft mode (KIP-500): internal, early access in Kafka 2.8.'),
    _c('controller.quorum.election.backoff.max.ms', 'int', '1000', READ_ONLY, REFUSED, internal=True, reason=_KRAFT,
       doc='KRaft mode (KIP-500): internal, early access in Kafka 2.8.'),
    _c('controller.quorum.election.timeout.ms', 'int', '1000', READ_ONLY, REFUSED, internal=True, reason=_KRAFT,
       doc='KRaft mode (KIP-500): internal, early access in Kafka 2.8.'),
    _c('controller.quorum.fetch.timeout.ms', 'int', '2000', READ_ONLY, REFUSED, internal=True, reason=_KRAFT,
       doc='KRaft mode (KIP-500): internal, early access in Kafka 2.8.'),
    _c('controller.quorum.request.timeout.ms', 'int', '2000', READ_ONLY, REFUSED, internal=True, reason=_KRAFT,
       doc='KRaft mode (KIP-500): internal, early access in Kafka 2.8.'),
    _c('controller.quorum.retry.backoff.ms', 'int', '20', READ_ONLY, REFUSED, internal=True, reason=_KRAFT,
       doc='KRaft mode (KIP-500): internal, early access in Kafka 2.8.'),
    _c('controller.quorum.voters', 'list', '', READ_ONLY, REFUSED, internal=True, reason=_KRAFT,
       doc='KRaft mode (KIP-500): internal, early access in Kafka 2.8.'),
    _c('controller.quota.window.num', 'int', '11', READ_ONLY, IGNORED, low=1, importance='low', reason=_QUOTA,
       doc='The number of samples to retain in memory for controller mutation quotas'),
    _c('controller.quota.window.size.seconds', 'int', '1', READ_ONLY, IGNORED, low=1, importance='low', reason=_QUOTA,
       doc='The time span of each sample for controller mutations quotas'),
    _c('controller.socket.timeout.ms', 'int', '30000', READ_ONLY, SUPPORTED, importance='medium',
       doc='The socket timeout for controller-to-broker channels'),
    _c('create.topic.policy.class.name', 'class', None, READ_ONLY, REFUSED, accepts_default=True, importance='low', reason='Java plug-in classes cannot be loaded: this broker is Python (no CreateTopics policy plug-ins; min.segment.bytes and min.segment.ms bound topic configs instead)',
       doc='The create topic policy class that should be used for validation. The class should implement the'
           ' <code>org.apache.kafka.server.policy.CreateTopicPolicy</code> interface.'),
    _c('default.replication.factor', 'int', '1', READ_ONLY, SUPPORTED, importance='medium',
       doc='default replication factors for automatically created topics'),
    _c('delegation.token.expiry.check.interval.ms', 'long', '3600000', READ_ONLY, IGNORED, low=1, importance='low', reason=_DELEG,
       doc='Scan interval to remove expired delegation tokens.'),
    _c('delegation.token.expiry.time.ms', 'long', '86400000', READ_ONLY, IGNORED, low=1, importance='medium', reason=_DELEG,
       doc='The token validity time in miliseconds before the token needs to be renewed. Default value 1 '
           'day.'),
    _c('delegation.token.master.key', 'password', None, READ_ONLY, REFUSED, accepts_default=True, importance='medium', reason='delegation tokens (KIP-48) are not offered: a master key would enable them in Kafka',
       doc='DEPRECATED: An alias for delegation.token.secret.key, which should be used instead of this '
           'config.'),
    _c('delegation.token.max.lifetime.ms', 'long', '604800000', READ_ONLY, IGNORED, low=1, importance='medium', reason=_DELEG,
       doc='The token has a maximum lifetime beyond which it cannot be renewed anymore. Default value 7 '
           'days.'),
    _c('delegation.token.secret.key', 'password', None, READ_ONLY, REFUSED, accepts_default=True, importance='medium', reason='delegation tokens (KIP-48) are not offered: a secret key would enable them in Kafka',
       doc='Secret key to generate and verify delegation tokens. The same key must be configured across all '
           'the brokers.  If the key is not set or set to empty string, brokers will disable the delegation '
           'token support.'),
    _c('delete.records.purgatory.purge.interval.requests', 'int', '1', READ_ONLY, IGNORED, importance='medium', reason=_PURGATORY,
       doc='The purge interval (in number of requests) of the delete records request purgatory'),
    _c('delete.topic.enable', 'boolean', 'true', READ_ONLY, SUPPORTED, importance='high',
       doc='Enables delete topic. Delete topic through the admin tool will have no effect if this config is '
           'turned off'),
    _c('fetch.max.bytes', 'int', '57671680', READ_ONLY, SUPPORTED, low=1024, importance='medium',
       doc='The maximum number of bytes we will return for a fetch request. Must be at least 1024.'),
    _c('fetch.purgatory.max.requests', 'int', '500', READ_ONLY, SUPPORTED, low=0, origin=MINIKAFKA,
       doc='How many fetches may wait in the fetch purgatory at once (SPEC S13.4); beyond it a fetch is '
           'answered at once.'),
    _c('fetch.purgatory.purge.interval.requests', 'int', '1000', READ_ONLY, IGNORED, importance='medium', reason='the purgatories drop a completed operation at once: there is nothing to purge periodically (fetch.purgatory.max.requests bounds the parked fetches instead)',
       doc='The purge interval (in number of requests) of the fetch request purgatory'),
    _c('group.initial.rebalance.delay.ms', 'int', '3000', READ_ONLY, SUPPORTED, importance='medium',
       doc='The amount of time the group coordinator will wait for more consumers to join a new group before'
           ' performing the first rebalance. A longer delay means potentially fewer rebalances, but '
           'increases the time until processing begins.'),
    _c('group.max.committed.partitions', 'int', '100000', READ_ONLY, SUPPORTED, low=1, origin=MINIKAFKA,
       doc='How many partitions one consumer group may hold committed offsets for (each is a ZooKeeper '
           'znode, SPEC S13.4).'),
    _c('group.max.session.timeout.ms', 'int', '1800000', READ_ONLY, SUPPORTED, importance='medium',
       doc='The maximum allowed session timeout for registered consumers. Longer timeouts give consumers '
           'more time to process messages in between heartbeats at the cost of a longer time to detect '
           'failures.'),
    _c('group.max.size', 'int', '2147483647', READ_ONLY, SUPPORTED, low=1, importance='medium', reason='default 1000 (Kafka: unbounded): SPEC S13.4 bounds the members one group may hold',
       doc='The maximum number of consumers that a single consumer group can accommodate.'),
    _c('group.min.session.timeout.ms', 'int', '6000', READ_ONLY, SUPPORTED, importance='medium',
       doc='The minimum allowed session timeout for registered consumers. Shorter timeouts result in quicker'
           ' failure detection at the cost of more frequent consumer heartbeating, which can overwhelm '
           'broker resources.'),
    _c('grpc.reflection.enable', 'boolean', 'true', READ_ONLY, SUPPORTED, origin=MINIKAFKA,
       doc='Whether the gRPC listeners offer server reflection (grpcurl and other tools list the services).'),
    _c('host.name', 'string', '', READ_ONLY, REFUSED, importance='high', reason='deprecated in Kafka since 0.10: give listeners',
       doc='DEPRECATED: only used when <code>listeners</code> is not set. Use <code>listeners</code> '
           'instead. <br>hostname of broker. If this is set, it will only bind to this address. If this is '
           'not set, it will bind to all interfaces'),
    _c('initial.broker.registration.timeout.ms', 'int', '60000', READ_ONLY, REFUSED, internal=True, reason=_KRAFT,
       doc='KRaft mode (KIP-500): internal, early access in Kafka 2.8.'),
    _c('inter.broker.listener.name', 'string', None, READ_ONLY, SUPPORTED, importance='medium',
       doc='Name of listener used for communication between brokers. If this is unset, the listener name is '
           'defined by security.inter.broker.protocol. It is an error to set this and '
           'security.inter.broker.protocol properties at the same time.'),
    _c('inter.broker.protocol.version', 'string', '2.8-IV1', READ_ONLY, IGNORED, importance='medium', reason='brokers speak one gRPC protocol between them: there are no inter-broker protocol versions to pin; versions 0.11.0 to 2.8 are accepted and change nothing, older ones (before record format v2) are refused',
       doc='Specify which version of the inter-broker protocol will be used.<br> This is typically bumped '
           'after all brokers were upgraded to a new version.<br> Example of some valid values are: 0.8.0, '
           '0.8.1, 0.8.1.1, 0.8.2, 0.8.2.0, 0.8.2.1, 0.9.0.0, 0.9.0.1 Check ApiVersion for the full list.'),
    _c('kafka.listeners', 'string', '', READ_ONLY, SUPPORTED, origin=MINIKAFKA,
       doc='Kafka wire-protocol listeners (NAME://host:port,...), beside the gRPC listeners; their security '
           'protocols come from listener.security.protocol.map (PLAINTEXT, SSL or SASL_SSL).'),
    _c('kafka.metrics.polling.interval.secs', 'int', '10', READ_ONLY, IGNORED, low=1, importance='low', reason=_METRICS,
       doc='The metrics polling interval (in seconds) which can be used in kafka.metrics.reporters '
           'implementations.'),
    _c('kafka.metrics.reporters', 'list', '', READ_ONLY, REFUSED, accepts_default=True, importance='low', reason='Java plug-in classes cannot be loaded: this broker is Python; metrics are Prometheus counters and gauges served on metrics.port, not sampled windows',
       doc='A list of classes to use as Yammer metrics custom reporters. The reporters should implement '
           '<code>kafka.metrics.KafkaMetricsReporter</code> trait. If a client wants to expose JMX '
           'operations on a custom reporter, the custom reporter needs to additionally implement an MBean '
           'trait that extends <code>kafka.metrics.KafkaMetricsReporterMBean</code> trait so that the '
           'registered MBean is compliant with the standard MBean convention.'),
    _c('leader.imbalance.check.interval.seconds', 'long', '300', READ_ONLY, SUPPORTED, importance='high',
       doc='The frequency with which the partition rebalance check is triggered by the controller'),
    _c('leader.imbalance.per.broker.percentage', 'int', '10', READ_ONLY, SUPPORTED, importance='high',
       doc='The ratio of leader imbalance allowed per broker. The controller would trigger a leader balance '
           'if it goes above this value per broker. The value is specified in percentage.'),
    _c('listener.security.protocol.map', 'string', 'PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL', PER_BROKER, SUPPORTED, importance='low', reason='default PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL: SASL_PLAINTEXT is not offered (SCRAM without TLS leaves the session open to anyone on the path)',
       doc='Map between listener names and security protocols. This must be defined for the same security '
           'protocol to be usable in more than one port or IP. For example, internal and external traffic '
           'can be separated even if SSL is required for both. Concretely, the user could define listeners '
           'with names INTERNAL and EXTERNAL and this property as: `INTERNAL:SSL,EXTERNAL:SSL`. As shown, '
           'key and value are separated by a colon and map entries are separated by commas. Each listener '
           'name should only appear once in the map. Different security (SSL and SASL) settings can be '
           'configured for each listener by adding a normalised prefix (the listener name is lowercased) to '
           'the config name. For example, to set a different keystore for the INTERNAL listener, a config '
           'with name <code>listener.name.internal.ssl.keystore.location</code> would be set. If the config '
           'for the listener name is not set, the config will fallback to the generic config (i.e. '
           '<code>ssl.keystore.location</code>). '),
    _c('listeners', 'string', None, PER_BROKER, SUPPORTED, importance='high', reason='unset: PLAINTEXT://127.0.0.1:9092 (Kafka: every interface); the inter-broker listener must be SSL (SPEC S12.1)',
       doc='Listener List - Comma-separated list of URIs we will listen on and the listener names. If the '
           'listener name is not a security protocol, <code>listener.security.protocol.map</code> must also '
           'be set.<br> Listener names and port numbers must be unique.<br> Specify hostname as 0.0.0.0 to '
           'bind to all interfaces.<br> Leave hostname empty to bind to default interface.<br> Examples of '
           'legal listener lists:<br> PLAINTEXT://myhost:9092,SSL://:9091<br> '
           'CLIENT://0.0.0.0:9092,REPLICATION://localhost:9093<br>'),
    _c('log.cleaner.backoff.ms', 'long', '15000', CLUSTER_WIDE, SUPPORTED, low=0, importance='medium',
       doc='The amount of time to sleep when there are no logs to clean'),
    _c('log.cleaner.dedupe.buffer.size', 'long', '134217728', CLUSTER_WIDE, SUPPORTED, importance='medium', reason='at least 1024',
       doc='The total memory used for log deduplication across all cleaner threads'),
    _c('log.cleaner.delete.retention.ms', 'long', '86400000', CLUSTER_WIDE, SUPPORTED, importance='medium',
       doc='How long are delete records retained?'),
    _c('log.cleaner.enable', 'boolean', 'true', READ_ONLY, SUPPORTED, importance='medium',
       doc='Enable the log cleaner process to run on the server. Should be enabled if using any topics with '
           'a cleanup.policy=compact including the internal offsets topic. If disabled those topics will not'
           ' be compacted and continually grow in size.'),
    _c('log.cleaner.io.buffer.load.factor', 'double', '0.9', CLUSTER_WIDE, SUPPORTED, importance='medium',
       doc='Log cleaner dedupe buffer load factor. The percentage full the dedupe buffer can become. A '
           'higher value will allow more log to be cleaned at once but will lead to more hash collisions'),
    _c('log.cleaner.io.buffer.size', 'int', '524288', CLUSTER_WIDE, SUPPORTED, low=0, importance='medium', reason='at least 512 (Kafka: [0,...])',
       doc='The total memory used for log cleaner I/O buffers across all cleaner threads'),
    _c('log.cleaner.io.max.bytes.per.second', 'double', '1.7976931348623157E308', CLUSTER_WIDE, SUPPORTED, importance='medium',
       doc='The log cleaner will be throttled so that the sum of its read and write i/o will be less than '
           'this value on average'),
    _c('log.cleaner.max.compaction.lag.ms', 'long', '9223372036854775807', CLUSTER_WIDE, SUPPORTED, importance='medium',
       doc='The maximum time a message will remain ineligible for compaction in the log. Only applicable for'
           ' logs that are being compacted.'),
    _c('log.cleaner.min.cleanable.ratio', 'double', '0.5', CLUSTER_WIDE, SUPPORTED, importance='medium',
       doc='The minimum ratio of dirty log to total log for a log to eligible for cleaning. If the '
           'log.cleaner.max.compaction.lag.ms or the log.cleaner.min.compaction.lag.ms configurations are '
           'also specified, then the log compactor considers the log eligible for compaction as soon as '
           'either: (i) the dirty ratio threshold has been met and the log has had dirty (uncompacted) '
           'records for at least the log.cleaner.min.compaction.lag.ms duration, or (ii) if the log has had '
           'dirty (uncompacted) records for at most the log.cleaner.max.compaction.lag.ms period.'),
    _c('log.cleaner.min.compaction.lag.ms', 'long', '0', CLUSTER_WIDE, SUPPORTED, importance='medium',
       doc='The minimum time a message will remain uncompacted in the log. Only applicable for logs that are'
           ' being compacted.'),
    _c('log.cleaner.threads', 'int', '1', CLUSTER_WIDE, SUPPORTED, low=0, importance='medium',
       doc='The number of background threads to use for log cleaning'),
    _c('log.cleanup.policy', 'list', 'delete', CLUSTER_WIDE, SUPPORTED, valid=('compact', 'delete'), importance='medium',
       doc='The default cleanup policy for segments beyond the retention window. A comma separated list of '
           'valid policies. Valid policies are: "delete" and "compact"'),
    _c('log.dir', 'string', '/tmp/kafka-logs', READ_ONLY, SUPPORTED, importance='high', reason='default /tmp/minikafka-logs',
       doc='The directory in which the log data is kept (supplemental for log.dirs property)'),
    _c('log.dirs', 'string', None, READ_ONLY, SUPPORTED, importance='high',
       doc='The directories in which the log data is kept. If not set, the value in log.dir is used'),
    _c('log.flush.interval.messages', 'long', '9223372036854775807', CLUSTER_WIDE, SUPPORTED, low=1, importance='high',
       doc='The number of messages accumulated on a log partition before messages are flushed to disk '),
    _c('log.flush.interval.ms', 'long', None, CLUSTER_WIDE, SUPPORTED, importance='high',
       doc='The maximum time in ms that a message in any topic is kept in memory before flushed to disk. If '
           'not set, the value in log.flush.scheduler.interval.ms is used'),
    _c('log.flush.offset.checkpoint.interval.ms', 'int', '60000', READ_ONLY, SUPPORTED, low=0, importance='high',
       doc='The frequency with which we update the persistent record of the last flush which acts as the log'
           ' recovery point'),
    _c('log.flush.scheduler.interval.ms', 'long', '9223372036854775807', READ_ONLY, SUPPORTED, importance='high', reason="default 3000 (Kafka: Long.MAX_VALUE, never): how often logs past their flush.ms are flushed; with Kafka's default a topic's flush.ms would never be honoured",
       doc='The frequency in ms that the log flusher checks whether any log needs to be flushed to disk'),
    _c('log.flush.start.offset.checkpoint.interval.ms', 'int', '60000', READ_ONLY, IGNORED, low=0, importance='high', reason='the log start offsets are checkpointed together with the recovery points, every log.flush.offset.checkpoint.interval.ms',
       doc='The frequency with which we update the persistent record of log start offset'),
    _c('log.index.interval.bytes', 'int', '4096', CLUSTER_WIDE, SUPPORTED, low=0, importance='medium',
       doc='The interval with which we add an entry to the offset index'),
    _c('log.index.size.max.bytes', 'int', '10485760', CLUSTER_WIDE, SUPPORTED, low=4, importance='medium', reason='at least 8 (one index entry; Kafka: [4,...])',
       doc='The maximum size in bytes of the offset index'),
    _c('log.message.downconversion.enable', 'boolean', 'true', CLUSTER_WIDE, IGNORED, importance='low', reason='the broker never down-converts: it serves only Fetch versions that read record format v2',
       doc='This configuration controls whether down-conversion of message formats is enabled to satisfy '
           'consume requests. When set to <code>false</code>, broker will not perform down-conversion for '
           'consumers expecting an older message format. The broker responds with '
           '<code>UNSUPPORTED_VERSION</code> error for consume requests from such older clients. This '
           'configurationdoes not apply to any message format conversion that might be required for '
           'replication to followers.'),
    _c('log.message.format.version', 'string', '2.8-IV1', READ_ONLY, IGNORED, importance='medium', reason='every batch is record format v2 (magic 2); versions 0.11.0 to 2.8 (all v2) are accepted and change nothing, older ones (message formats v0 and v1) are refused',
       doc='Specify the message format version the broker will use to append messages to the logs. The value'
           ' should be a valid ApiVersion. Some examples are: 0.8.2, 0.9.0.0, 0.10.0, check ApiVersion for '
           'more details. By setting a particular message format version, the user is certifying that all '
           'the existing messages on disk are smaller or equal than the specified version. Setting this '
           'value incorrectly will cause consumers with older versions to break as they will receive '
           "messages with a format that they don't understand."),
    _c('log.message.timestamp.difference.max.ms', 'long', '9223372036854775807', CLUSTER_WIDE, SUPPORTED, importance='medium',
       doc='The maximum difference allowed between the timestamp when a broker receives a message and the '
           'timestamp specified in the message. If log.message.timestamp.type=CreateTime, a message will be '
           'rejected if the difference in timestamp exceeds this threshold. This configuration is ignored if'
           ' log.message.timestamp.type=LogAppendTime.The maximum timestamp difference allowed should be no '
           'greater than log.retention.ms to avoid unnecessarily frequent log rolling.'),
    _c('log.message.timestamp.type', 'string', 'CreateTime', CLUSTER_WIDE, SUPPORTED, valid=('CreateTime', 'LogAppendTime'), importance='medium',
       doc='Define whether the timestamp in the message is message create time or log append time. The value'
           ' should be either `CreateTime` or `LogAppendTime`'),
    _c('log.preallocate', 'boolean', 'false', CLUSTER_WIDE, IGNORED, importance='medium', reason='segments grow by appends (preallocation is a Windows-era file system optimisation)',
       doc='Should pre allocate file when create new segment? If you are using Kafka on Windows, you '
           'probably need to set it to true.'),
    _c('log.retention.bytes', 'long', '-1', CLUSTER_WIDE, SUPPORTED, importance='high',
       doc='The maximum size of the log before deleting it'),
    _c('log.retention.check.interval.ms', 'long', '300000', READ_ONLY, SUPPORTED, low=1, importance='medium',
       doc='The frequency in milliseconds that the log cleaner checks whether any log is eligible for '
           'deletion'),
    _c('log.retention.hours', 'int', '168', READ_ONLY, SUPPORTED, importance='high',
       doc='The number of hours to keep a log file before deleting it (in hours), tertiary to '
           'log.retention.ms property'),
    _c('log.retention.minutes', 'int', None, READ_ONLY, SUPPORTED, importance='high',
       doc='The number of minutes to keep a log file before deleting it (in minutes), secondary to '
           'log.retention.ms property. If not set, the value in log.retention.hours is used'),
    _c('log.retention.ms', 'long', None, CLUSTER_WIDE, SUPPORTED, importance='high',
       doc='The number of milliseconds to keep a log file before deleting it (in milliseconds), If not set, '
           'the value in log.retention.minutes is used. If set to -1, no time limit is applied.'),
    _c('log.roll.hours', 'int', '168', READ_ONLY, SUPPORTED, low=1, importance='high',
       doc='The maximum time before a new log segment is rolled out (in hours), secondary to log.roll.ms '
           'property'),
    _c('log.roll.jitter.hours', 'int', '0', READ_ONLY, IGNORED, low=0, importance='high', reason='segments roll at segment.ms exactly: no random jitter is subtracted',
       doc='The maximum jitter to subtract from logRollTimeMillis (in hours), secondary to '
           'log.roll.jitter.ms property'),
    _c('log.roll.jitter.ms', 'long', None, CLUSTER_WIDE, IGNORED, importance='high', reason='segments roll at segment.ms exactly: no random jitter is subtracted',
       doc='The maximum jitter to subtract from logRollTimeMillis (in milliseconds). If not set, the value '
           'in log.roll.jitter.hours is used'),
    _c('log.roll.ms', 'long', None, CLUSTER_WIDE, SUPPORTED, importance='high',
       doc='The maximum time before a new log segment is rolled out (in milliseconds). If not set, the value'
           ' in log.roll.hours is used'),
    _c('log.segment.bytes', 'int', '1073741824', CLUSTER_WIDE, SUPPORTED, low=14, importance='high',
       doc='The maximum size of a single log file'),
    _c('log.segment.delete.delay.ms', 'long', '60000', CLUSTER_WIDE, SUPPORTED, low=0, importance='high',
       doc='The amount of time to wait before deleting a file from the filesystem'),
    _c('max.connection.creation.rate', 'int', '2147483647', CLUSTER_WIDE, REFUSED, low=0, accepts_default=True, importance='medium', reason='connections are bounded in number per listener (max.connections), not in creation rate: a rate limit would not be enforced',
       doc='The maximum connection creation rate we allow in the broker at any time. Listener-level limits '
           'may also be configured by prefixing the config name with the listener prefix, for example, '
           '<code>listener.name.internal.max.connection.creation.rate</code>.Broker-wide connection rate '
           'limit should be configured based on broker capacity while listener limits should be configured '
           'based on application requirements. New connections will be throttled if either the listener or '
           'the broker limit is reached, with the exception of inter-broker listener. Connections on the '
           'inter-broker listener will be throttled only when the listener-level rate limit is reached.'),
    _c('max.connections', 'int', '2147483647', CLUSTER_WIDE, SUPPORTED, low=0, importance='medium', reason="default 1000 per Kafka listener (Kafka: unbounded): SPEC S13.4, a connection flood must not exhaust the broker's file descriptors",
       doc='The maximum number of connections we allow in the broker at any time. This limit is applied in '
           'addition to any per-ip limits configured using max.connections.per.ip. Listener-level limits may'
           ' also be configured by prefixing the config name with the listener prefix, for example, '
           '<code>listener.name.internal.max.connections</code>. Broker-wide limit should be configured '
           'based on broker capacity while listener limits should be configured based on application '
           'requirements. New connections are blocked if either the listener or broker limit is reached. '
           'Connections on the inter-broker listener are permitted even if broker-wide limit is reached. The'
           ' least recently used connection on another listener will be closed in this case.'),
    _c('max.connections.per.ip', 'int', '2147483647', CLUSTER_WIDE, REFUSED, low=0, accepts_default=True, importance='medium', reason='connections are bounded per listener (max.connections), not per client address: a per-address limit would not be enforced',
       doc='The maximum number of connections we allow from each ip address. This can be set to 0 if there '
           'are overrides configured using max.connections.per.ip.overrides property. New connections from '
           'the ip address are dropped if the limit is reached.'),
    _c('max.connections.per.ip.overrides', 'string', '', CLUSTER_WIDE, REFUSED, accepts_default=True, importance='medium', reason='connections are bounded per listener (max.connections), not per client address: a per-address limit would not be enforced',
       doc='A comma-separated list of per-ip or hostname overrides to the default maximum number of '
           'connections. An example value is "hostName:100,127.0.0.1:200"'),
    _c('max.incremental.fetch.session.cache.slots', 'int', '1000', READ_ONLY, IGNORED, low=0, importance='medium', reason="the fetch session cache (KIP-227) holds Kafka's default, 1000 sessions; the setting is validated and kept",
       doc='The maximum number of incremental fetch sessions that we will maintain.'),
    _c('max.partitions.per.topic', 'int', '10000', READ_ONLY, SUPPORTED, low=1, origin=MINIKAFKA,
       doc='The most partitions one topic may have (CreateTopics and CreatePartitions beyond it are '
           'INVALID_PARTITIONS).'),
    _c('max.request.partitions', 'int', '10000', READ_ONLY, SUPPORTED, low=1, origin=MINIKAFKA,
       doc='The most partitions (or resources) one request may name (SPEC S13.4); a larger request is '
           'answered with an error per partition.'),
    _c('message.max.bytes', 'int', '1048588', CLUSTER_WIDE, SUPPORTED, low=0, importance='high', reason="at most 104857600 (socket.request.max.bytes' default): a larger batch could never arrive (Kafka: [0,...])",
       doc='The largest record batch size allowed by Kafka (after compression if compression is enabled). If'
           " this is increased and there are consumers older than 0.10.2, the consumers' fetch size must "
           'also be increased so that they can fetch record batches this large. In the latest message format'
           ' version, records are always grouped into batches for efficiency. In previous message format '
           'versions, uncompressed records are not grouped into batches and this limit only applies to a '
           'single record in that case.This can be set per topic with the topic level '
           '<code>max.message.bytes</code> config.'),
    _c('metadata.log.dir', 'string', None, READ_ONLY, REFUSED, internal=True, reason=_KRAFT,
       doc='KRaft mode (KIP-500): internal, early access in Kafka 2.8.'),
    _c('metric.reporters', 'list', '', CLUSTER_WIDE, REFUSED, accepts_default=True, importance='low', reason='Java plug-in classes cannot be loaded: this broker is Python; metrics are Prometheus counters and gauges served on metrics.port, not sampled windows',
       doc='A list of classes to use as metrics reporters. Implementing the '
           '<code>org.apache.kafka.common.metrics.MetricsReporter</code> interface allows plugging in '
           'classes that will be notified of new metric creation. The JmxReporter is always included to '
           'register JMX statistics.'),
    _c('metrics.host', 'string', '127.0.0.1', READ_ONLY, SUPPORTED, origin=MINIKAFKA,
       doc='The address the Prometheus metrics endpoint listens on.'),
    _c('metrics.num.samples', 'int', '2', READ_ONLY, IGNORED, low=1, importance='low', reason=_METRICS,
       doc='The number of samples maintained to compute metrics.'),
    _c('metrics.port', 'int', '-1', READ_ONLY, SUPPORTED, low=-1, high=65535, origin=MINIKAFKA,
       doc='The port of the Prometheus metrics endpoint: -1 off, 0 any free port.'),
    _c('metrics.recording.level', 'string', 'INFO', READ_ONLY, IGNORED, importance='low', reason=_METRICS,
       doc='The highest recording level for metrics.'),
    _c('metrics.sample.window.ms', 'long', '30000', READ_ONLY, IGNORED, low=1, importance='low', reason=_METRICS,
       doc='The window of time a metrics sample is computed over.'),
    _c('min.insync.replicas', 'int', '1', CLUSTER_WIDE, SUPPORTED, low=1, importance='high',
       doc='When a producer sets acks to "all" (or "-1"), min.insync.replicas specifies the minimum number '
           'of replicas that must acknowledge a write for the write to be considered successful. If this '
           'minimum cannot be met, then the producer will raise an exception (either NotEnoughReplicas or '
           'NotEnoughReplicasAfterAppend).<br>When used together, min.insync.replicas and acks allow you to '
           'enforce greater durability guarantees. A typical scenario would be to create a topic with a '
           'replication factor of 3, set min.insync.replicas to 2, and produce with acks of "all". This will'
           ' ensure that the producer raises an exception if a majority of replicas do not receive a write.'),
    _c('min.segment.bytes', 'int', '1048576', READ_ONLY, SUPPORTED, low=14, origin=MINIKAFKA,
       doc='The smallest segment.bytes a topic may be given (each segment is open files; SPEC S13.4).'),
    _c('min.segment.ms', 'int', '60000', READ_ONLY, SUPPORTED, low=1, origin=MINIKAFKA,
       doc='The smallest segment.ms a topic may be given (each segment is open files; SPEC S13.4).'),
    _c('node.id', 'int', '-1', READ_ONLY, REFUSED, internal=True, reason=_KRAFT,
       doc='KRaft mode (KIP-500): internal, early access in Kafka 2.8.'),
    _c('num.io.threads', 'int', '8', CLUSTER_WIDE, IGNORED, low=1, importance='high', reason=_THREADS,
       doc='The number of threads that the server uses for processing requests, which may include disk I/O'),
    _c('num.network.threads', 'int', '3', CLUSTER_WIDE, IGNORED, low=1, importance='high', reason=_THREADS,
       doc='The number of threads that the server uses for receiving requests from the network and sending '
           'responses to the network'),
    _c('num.partitions', 'int', '1', READ_ONLY, SUPPORTED, low=1, importance='medium',
       doc='The default number of log partitions per topic'),
    _c('num.recovery.threads.per.data.dir', 'int', '1', CLUSTER_WIDE, IGNORED, low=1, importance='high', reason=_THREADS,
       doc='The number of threads per data directory to be used for log recovery at startup and flushing at '
           'shutdown'),
    _c('num.replica.alter.log.dirs.threads', 'int', None, READ_ONLY, IGNORED, importance='high', reason='one asyncio event loop per broker (and worker threads for disk and ZooKeeper calls) serves every connection: there are no network/IO/recovery/fetcher thread pools to size (and replicas never move between log directories)',
       doc='The number of threads that can move replicas between log directories, which may include disk I/O'),
    _c('num.replica.fetchers', 'int', '1', CLUSTER_WIDE, IGNORED, importance='high', reason='a follower fetches from each leader over one multiplexed stream (replica.fetch.listener.port or gRPC FetchStream): there are no fetcher threads to multiply',
       doc='Number of fetcher threads used to replicate messages from a source broker. Increasing this value'
           ' can increase the degree of I/O parallelism in the follower broker.'),
    _c('offset.metadata.max.bytes', 'int', '4096', READ_ONLY, SUPPORTED, importance='high',
       doc='The maximum size for a metadata entry associated with an offset commit'),
    _c('offsets.commit.required.acks', 'short', '-1', READ_ONLY, IGNORED, importance='high', reason="committed offsets live in ZooKeeper (/consumers/<group>/offsets, as Kafka's ZooKeeper-era consumers), not in an __consumer_offsets topic: a commit is one ZooKeeper write",
       doc='The required acks before the commit can be accepted. In general, the default (-1) should not be '
           'overridden'),
    _c('offsets.commit.timeout.ms', 'int', '5000', READ_ONLY, IGNORED, low=1, importance='high', reason="committed offsets live in ZooKeeper (/consumers/<group>/offsets, as Kafka's ZooKeeper-era consumers), not in an __consumer_offsets topic: a commit is one ZooKeeper write, bounded by the ZooKeeper session",
       doc='Offset commit will be delayed until all replicas for the offsets topic receive the commit or '
           'this timeout is reached. This is similar to the producer request timeout.'),
    _c('offsets.load.buffer.size', 'int', '5242880', READ_ONLY, IGNORED, low=1, importance='high', reason=_OFFSETS_TOPIC,
       doc='Batch size for reading from the offsets segments when loading offsets into the cache '
           '(soft-limit, overridden if records are too large).'),
    _c('offsets.retention.check.interval.ms', 'long', '600000', READ_ONLY, SUPPORTED, low=1, importance='high',
       doc='Frequency at which to check for stale offsets'),
    _c('offsets.retention.minutes', 'int', '10080', READ_ONLY, SUPPORTED, low=1, importance='high',
       doc='After a consumer group loses all its consumers (i.e. becomes empty) its offsets will be kept for'
           ' this retention period before getting discarded. For standalone consumers (using manual '
           'assignment), offsets will be expired after the time of last commit plus this retention period.'),
    _c('offsets.topic.compression.codec', 'int', '0', READ_ONLY, IGNORED, importance='high', reason=_OFFSETS_TOPIC,
       doc='Compression codec for the offsets topic - compression may be used to achieve "atomic" commits'),
    _c('offsets.topic.num.partitions', 'int', '50', READ_ONLY, IGNORED, low=1, importance='high', reason="committed offsets live in ZooKeeper (/consumers/<group>/offsets, as Kafka's ZooKeeper-era consumers), not in an __consumer_offsets topic; a group's coordinator is chosen among the live brokers by the group id's hash",
       doc='The number of partitions for the offset commit topic (should not change after deployment)'),
    _c('offsets.topic.replication.factor', 'short', '3', READ_ONLY, IGNORED, low=1, importance='high', reason="committed offsets live in ZooKeeper (/consumers/<group>/offsets, as Kafka's ZooKeeper-era consumers), not in an __consumer_offsets topic (replicated by the ZooKeeper ensemble)",
       doc='The replication factor for the offsets topic (set higher to ensure availability). Internal topic'
           ' creation will fail until the cluster size meets this replication factor requirement.'),
    _c('offsets.topic.segment.bytes', 'int', '104857600', READ_ONLY, IGNORED, low=1, importance='high', reason=_OFFSETS_TOPIC,
       doc='The offsets topic segment bytes should be kept relatively small in order to facilitate faster '
           'log compaction and cache loads'),
    _c('password.encoder.cipher.algorithm', 'string', 'AES/CBC/PKCS5Padding', READ_ONLY, IGNORED, importance='low', reason=_PWENC,
       doc='The Cipher algorithm used for encoding dynamically configured passwords.'),
    _c('password.encoder.iterations', 'int', '4096', READ_ONLY, IGNORED, low=1024, importance='low', reason=_PWENC,
       doc='The iteration count used for encoding dynamically configured passwords.'),
    _c('password.encoder.key.length', 'int', '128', READ_ONLY, IGNORED, low=8, importance='low', reason=_PWENC,
       doc='The key length used for encoding dynamically configured passwords.'),
    _c('password.encoder.keyfactory.algorithm', 'string', None, READ_ONLY, IGNORED, importance='low', reason=_PWENC,
       doc='The SecretKeyFactory algorithm used for encoding dynamically configured passwords. Default is '
           'PBKDF2WithHmacSHA512 if available and PBKDF2WithHmacSHA1 otherwise.'),
    _c('password.encoder.old.secret', 'password', None, READ_ONLY, IGNORED, importance='medium', reason=_PWENC,
       doc='The old secret that was used for encoding dynamically configured passwords. This is required '
           'only when the secret is updated. If specified, all dynamically encoded passwords are decoded '
           'using this old secret and re-encoded using password.encoder.secret when broker starts up.'),
    _c('password.encoder.secret', 'password', None, READ_ONLY, IGNORED, importance='medium', reason=_PWENC,
       doc='The secret used for encoding dynamically configured passwords for this broker.'),
    _c('port', 'int', '9092', READ_ONLY, REFUSED, importance='high', reason='deprecated in Kafka since 0.10: give listeners',
       doc='DEPRECATED: only used when <code>listeners</code> is not set. Use <code>listeners</code> '
           'instead. <br>the port to listen and accept connections on'),
    _c('principal.builder.class', 'class', None, PER_BROKER, REFUSED, accepts_default=True, importance='medium', reason="Java plug-in classes cannot be loaded: this broker is Python: principals are built from the TLS certificate or the SCRAM user name as the README's security section says",
       doc='The fully qualified name of a class that implements the KafkaPrincipalBuilder interface, which '
           'is used to build the KafkaPrincipal object used during authorization. This config also supports '
           'the deprecated PrincipalBuilder interface which was previously used for client authentication '
           'over SSL. If no principal builder is defined, the default behavior depends on the security '
           'protocol in use. For SSL authentication,  the principal will be derived using the rules defined '
           'by <code>ssl.principal.mapping.rules</code> applied on the distinguished name from the client '
           'certificate if one is provided; otherwise, if client authentication is not required, the '
           'principal name will be ANONYMOUS. For SASL authentication, the principal will be derived using '
           'the rules defined by <code>sasl.kerberos.principal.to.local.rules</code> if GSSAPI is in use, '
           'and the SASL authentication ID for other mechanisms. For PLAINTEXT, the principal will be '
           'ANONYMOUS.'),
    _c('process.roles', 'list', '', READ_ONLY, REFUSED, internal=True, reason=_KRAFT,
       doc='KRaft mode (KIP-500): internal, early access in Kafka 2.8.'),
    _c('producer.purgatory.purge.interval.requests', 'int', '1000', READ_ONLY, IGNORED, importance='medium', reason=_PURGATORY,
       doc='The purge interval (in number of requests) of the producer request purgatory'),
    _c('queued.max.request.bytes', 'long', '-1', READ_ONLY, SUPPORTED, importance='medium', reason='default 209715200 (Kafka: -1, unbounded): SPEC S13.4 bounds the bytes of requests read and not yet answered',
       doc='The number of queued bytes allowed before no more requests are read'),
    _c('queued.max.requests', 'int', '500', READ_ONLY, SUPPORTED, low=1, importance='high',
       doc='The number of queued requests allowed for data-plane, before blocking the network threads'),
    _c('quota.consumer.default', 'long', '9223372036854775807', READ_ONLY, REFUSED, low=1, accepts_default=True, importance='high', reason='no client quotas here (SPEC S13.4 bounds requests instead): a byte-rate limit would not be enforced',
       doc='DEPRECATED: Used only when dynamic default quotas are not configured for <user, <client-id> or '
           '<user, client-id> in Zookeeper. Any consumer distinguished by clientId/consumer group will get '
           'throttled if it fetches more bytes than this value per-second'),
    _c('quota.producer.default', 'long', '9223372036854775807', READ_ONLY, REFUSED, low=1, accepts_default=True, importance='high', reason='no client quotas here (SPEC S13.4 bounds requests instead): a byte-rate limit would not be enforced',
       doc='DEPRECATED: Used only when dynamic default quotas are not configured for <user>, <client-id> or '
           '<user, client-id> in Zookeeper. Any producer distinguished by clientId will get throttled if it '
           'produces more bytes than this value per-second'),
    _c('quota.window.num', 'int', '11', READ_ONLY, IGNORED, low=1, importance='low', reason=_QUOTA,
       doc='The number of samples to retain in memory for client quotas'),
    _c('quota.window.size.seconds', 'int', '1', READ_ONLY, IGNORED, low=1, importance='low', reason=_QUOTA,
       doc='The time span of each sample for client quotas'),
    _c('replica.fetch.backoff.ms', 'int', '1000', READ_ONLY, SUPPORTED, low=0, importance='medium',
       doc='The amount of time to sleep when fetch partition error occurs.'),
    _c('replica.fetch.listener.port', 'int', '0', READ_ONLY, SUPPORTED, low=-1, high=65535, origin=MINIKAFKA,
       doc="The replica fetch listener's port, on the inter-broker listener's host: 0 a free port, -1 off "
           '(followers then fetch over gRPC FetchStream).'),
    _c('replica.fetch.max.bytes', 'int', '1048576', READ_ONLY, SUPPORTED, low=0, importance='medium',
       doc='The number of bytes of messages to attempt to fetch for each partition. This is not an absolute '
           'maximum, if the first record batch in the first non-empty partition of the fetch is larger than '
           'this value, the record batch will still be returned to ensure that progress can be made. The '
           'maximum record batch size accepted by the broker is defined via <code>message.max.bytes</code> '
           '(broker config) or <code>max.message.bytes</code> (topic config).'),
    _c('replica.fetch.min.bytes', 'int', '1', READ_ONLY, SUPPORTED, importance='high',
       doc='Minimum bytes expected for each fetch response. If not enough bytes, wait up to '
           '<code>replica.fetch.wait.max.ms</code> (broker config).'),
    _c('replica.fetch.response.max.bytes', 'int', '10485760', READ_ONLY, IGNORED, low=0, importance='medium', reason="a follower's fetch is bounded per partition by replica.fetch.max.bytes and in total by the leader's fetch byte budget",
       doc='Maximum bytes expected for the entire fetch response. Records are fetched in batches, and if the'
           ' first record batch in the first non-empty partition of the fetch is larger than this value, the'
           ' record batch will still be returned to ensure that progress can be made. As such, this is not '
           'an absolute maximum. The maximum record batch size accepted by the broker is defined via '
           '<code>message.max.bytes</code> (broker config) or <code>max.message.bytes</code> (topic config).'),
    _c('replica.fetch.wait.max.ms', 'int', '500', READ_ONLY, SUPPORTED, importance='high',
       doc='max wait time for each fetcher request issued by follower replicas. This value should always be '
           'less than the replica.lag.time.max.ms at all times to prevent frequent shrinking of ISR for low '
           'throughput topics'),
    _c('replica.high.watermark.checkpoint.interval.ms', 'long', '5000', READ_ONLY, SUPPORTED, importance='high',
       doc='The frequency with which the high watermark is saved out to disk'),
    _c('replica.lag.time.max.ms', 'long', '30000', READ_ONLY, SUPPORTED, importance='high', reason="default 10000 (Kafka's before 2.5; KIP-537 raised it to 30000): a stalled follower leaves the ISR, and acks=all writes resume, sooner",
       doc="If a follower hasn't sent any fetch requests or hasn't consumed up to the leaders log end offset"
           ' for at least this time, the leader will remove the follower from isr'),
    _c('replica.selector.class', 'string', None, READ_ONLY, REFUSED, accepts_default=True, importance='medium', reason='consumers fetch from partition leaders only (no KIP-392 follower fetching), and java plug-in classes cannot be loaded: this broker is Python',
       doc='The fully qualified class name that implements ReplicaSelector. This is used by the broker to '
           'find the preferred read replica. By default, we use an implementation that returns the leader.'),
    _c('replica.socket.receive.buffer.bytes', 'int', '65536', READ_ONLY, IGNORED, importance='high', reason=_SOCKBUF,
       doc='The socket receive buffer for network requests'),
    _c('replica.socket.timeout.ms', 'int', '30000', READ_ONLY, IGNORED, importance='high', reason='replica fetches are bounded by replica.fetch.wait.max.ms and request.timeout.ms',
       doc='The socket timeout for network requests. Its value should be at least replica.fetch.wait.max.ms'),
    _c('replication.quota.window.num', 'int', '11', READ_ONLY, IGNORED, low=1, importance='low', reason=_QUOTA,
       doc='The number of samples to retain in memory for replication quotas'),
    _c('replication.quota.window.size.seconds', 'int', '1', READ_ONLY, IGNORED, low=1, importance='low', reason=_QUOTA,
       doc='The time span of each sample for replication quotas'),
    _c('request.timeout.ms', 'int', '30000', READ_ONLY, SUPPORTED, importance='high',
       doc='The configuration controls the maximum amount of time the client will wait for the response of a'
           ' request. If the response is not received before the timeout elapses the client will resend the '
           'request if necessary or fail the request if retries are exhausted.'),
    _c('reserved.broker.max.id', 'int', '1000', READ_ONLY, IGNORED, low=0, importance='medium', reason='broker.id is required (a broker id is never generated), so there is no generated range to reserve',
       doc='Max number that can be used for a broker.id'),
    _c('sasl.client.callback.handler.class', 'class', None, READ_ONLY, REFUSED, accepts_default=True, importance='medium', reason=_CLASS,
       doc='The fully qualified name of a SASL client callback handler class that implements the '
           'AuthenticateCallbackHandler interface.'),
    _c('sasl.enabled.mechanisms', 'list', 'GSSAPI', PER_BROKER, SUPPORTED, importance='medium', reason='SCRAM-SHA-256 only (also the default): the SASL_SSL listeners authenticate against the SCRAM credentials in ZooKeeper',
       doc='The list of SASL mechanisms enabled in the Kafka server. The list may contain any mechanism for '
           'which a security provider is available. Only GSSAPI is enabled by default.'),
    _c('sasl.jaas.config', 'password', None, PER_BROKER, REFUSED, accepts_default=True, importance='medium', reason='no JAAS login modules: SCRAM-SHA-256 credentials are stored in ZooKeeper (`minikafka users`), and brokers authenticate each other by TLS certificate',
       doc='JAAS login context parameters for SASL connections in the format used by JAAS configuration '
           'files. JAAS configuration file format is described <a href="http://docs.oracle.com/javase/8/docs'
           '/technotes/guides/security/jgss/tutorials/LoginConfigFile.html">here</a>. The format for the '
           'value is: <code>loginModuleClass controlFlag (optionName=optionValue)*;</code>. For brokers, the'
           ' config must be prefixed with listener prefix and SASL mechanism name in lower-case. For '
           'example, listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=com.example.ScramLoginModule '
           'required;'),
    _c('sasl.kerberos.kinit.cmd', 'string', '/usr/bin/kinit', PER_BROKER, IGNORED, importance='medium', reason=_KERB,
       doc='Kerberos kinit command path.'),
    _c('sasl.kerberos.min.time.before.relogin', 'long', '60000', PER_BROKER, IGNORED, importance='medium', reason=_KERB,
       doc='Login thread sleep time between refresh attempts.'),
    _c('sasl.kerberos.principal.to.local.rules', 'list', 'DEFAULT', PER_BROKER, IGNORED, importance='medium', reason=_KERB,
       doc='A list of rules for mapping from principal names to short names (typically operating system '
           'usernames). The rules are evaluated in order and the first rule that matches a principal name is'
           ' used to map it to a short name. Any later rules in the list are ignored. By default, principal '
           'names of the form {username}/{hostname}@{REALM} are mapped to {username}. For more details on '
           'the format please see <a href="#security_authz"> security authorization and acls</a>. Note that '
           'this configuration is ignored if an extension of KafkaPrincipalBuilder is provided by the '
           '<code>principal.builder.class</code> configuration.'),
    _c('sasl.kerberos.service.name', 'string', None, PER_BROKER, IGNORED, importance='medium', reason=_KERB,
       doc="The Kerberos principal name that Kafka runs as. This can be defined either in Kafka's JAAS "
           "config or in Kafka's config."),
    _c('sasl.kerberos.ticket.renew.jitter', 'double', '0.05', PER_BROKER, IGNORED, importance='medium', reason=_KERB,
       doc='Percentage of random jitter added to the renewal time.'),
    _c('sasl.kerberos.ticket.renew.window.factor', 'double', '0.8', PER_BROKER, IGNORED, importance='medium', reason=_KERB,
       doc="Login thread will sleep until the specified window factor of time from last refresh to ticket's "
           'expiry has been reached, at which time it will try to renew the ticket.'),
    _c('sasl.login.callback.handler.class', 'class', None, READ_ONLY, REFUSED, accepts_default=True, importance='medium', reason=_CLASS,
       doc='The fully qualified name of a SASL login callback handler class that implements the '
           'AuthenticateCallbackHandler interface. For brokers, login callback handler config must be '
           'prefixed with listener prefix and SASL mechanism name in lower-case. For example, listener.name.'
           'sasl_ssl.scram-sha-256.sasl.login.callback.handler.class=com.example.CustomScramLoginCallbackHan'
           'dler'),
    _c('sasl.login.class', 'class', None, READ_ONLY, REFUSED, accepts_default=True, importance='medium', reason=_CLASS,
       doc='The fully qualified name of a class that implements the Login interface. For brokers, login '
           'config must be prefixed with listener prefix and SASL mechanism name in lower-case. For example,'
           ' listener.name.sasl_ssl.scram-sha-256.sasl.login.class=com.example.CustomScramLogin'),
    _c('sasl.login.refresh.buffer.seconds', 'short', '300', PER_BROKER, IGNORED, importance='medium', reason=_OAUTH,
       doc='The amount of buffer time before credential expiration to maintain when refreshing a credential,'
           ' in seconds. If a refresh would otherwise occur closer to expiration than the number of buffer '
           'seconds then the refresh will be moved up to maintain as much of the buffer time as possible. '
           'Legal values are between 0 and 3600 (1 hour); a default value of  300 (5 minutes) is used if no '
           'value is specified. This value and sasl.login.refresh.min.period.seconds are both ignored if '
           'their sum exceeds the remaining lifetime of a credential. Currently applies only to OAUTHBEARER.'),
    _c('sasl.login.refresh.min.period.seconds', 'short', '60', PER_BROKER, IGNORED, importance='medium', reason=_OAUTH,
       doc='The desired minimum time for the login refresh thread to wait before refreshing a credential, in'
           ' seconds. Legal values are between 0 and 900 (15 minutes); a default value of 60 (1 minute) is '
           'used if no value is specified.  This value and  sasl.login.refresh.buffer.seconds are both '
           'ignored if their sum exceeds the remaining lifetime of a credential. Currently applies only to '
           'OAUTHBEARER.'),
    _c('sasl.login.refresh.window.factor', 'double', '0.8', PER_BROKER, IGNORED, importance='medium', reason=_OAUTH,
       doc="Login refresh thread will sleep until the specified window factor relative to the credential's "
           'lifetime has been reached, at which time it will try to refresh the credential. Legal values are'
           ' between 0.5 (50%) and 1.0 (100%) inclusive; a default value of 0.8 (80%) is used if no value is'
           ' specified. Currently applies only to OAUTHBEARER.'),
    _c('sasl.login.refresh.window.jitter', 'double', '0.05', PER_BROKER, IGNORED, importance='medium', reason=_OAUTH,
       doc="The maximum amount of random jitter relative to the credential's lifetime that is added to the "
           "login refresh thread's sleep time. Legal values are between 0 and 0.25 (25%) inclusive; a "
           'default value of 0.05 (5%) is used if no value is specified. Currently applies only to '
           'OAUTHBEARER.'),
    _c('sasl.mechanism.controller.protocol', 'string', 'GSSAPI', READ_ONLY, REFUSED, internal=True, reason=_KRAFT,
       doc='KRaft mode (KIP-500): internal, early access in Kafka 2.8.'),
    _c('sasl.mechanism.inter.broker.protocol', 'string', 'GSSAPI', PER_BROKER, IGNORED, importance='medium', reason='the inter-broker listener is mutual TLS with broker certificates (SPEC S12.1), never SASL',
       doc='SASL mechanism used for inter-broker communication. Default is GSSAPI.'),
    _c('sasl.server.callback.handler.class', 'class', None, READ_ONLY, REFUSED, accepts_default=True, importance='medium', reason='Java plug-in classes cannot be loaded: this broker is Python: SCRAM credentials are checked against those stored in ZooKeeper',
       doc='The fully qualified name of a SASL server callback handler class that implements the '
           'AuthenticateCallbackHandler interface. Server callback handlers must be prefixed with listener '
           'prefix and SASL mechanism name in lower-case. For example, listener.name.sasl_ssl.plain.sasl.ser'
           'ver.callback.handler.class=com.example.CustomPlainCallbackHandler.'),
    _c('sasl.server.max.receive.size', 'int', '524288', READ_ONLY, IGNORED, importance='medium', reason='SASL messages are Kafka requests here (SaslAuthenticate), bounded by socket.request.max.bytes',
       doc='The maximum receive size allowed before and during initial SASL authentication. Default receive '
           'size is 512KB. GSSAPI limits requests to 64K, but we allow upto 512KB by default for custom SASL'
           ' mechanisms. In practice, PLAIN, SCRAM and OAUTH mechanisms can use much smaller limits.'),
    _c('security.inter.broker.protocol', 'string', 'PLAINTEXT', READ_ONLY, REFUSED, importance='medium', reason='name the inter-broker listener with inter.broker.listener.name: it is always SSL with broker certificates (SPEC S12.1)',
       doc='Security protocol used to communicate between brokers. Valid values are: PLAINTEXT, SSL, '
           'SASL_PLAINTEXT, SASL_SSL. It is an error to set this and inter.broker.listener.name properties '
           'at the same time.'),
    _c('security.providers', 'string', None, READ_ONLY, REFUSED, accepts_default=True, importance='low', reason="Java security providers cannot be loaded: TLS is OpenSSL's (Python's ssl module), not Java's JSSE: there is no provider, key/trust manager algorithm or secure random implementation to choose",
       doc='A list of configurable creator classes each returning a provider implementing security '
           'algorithms. These classes should implement the '
           '<code>org.apache.kafka.common.security.auth.SecurityProviderCreator</code> interface.'),
    _c('socket.connection.setup.timeout.max.ms', 'long', '30000', READ_ONLY, IGNORED, importance='medium', reason="brokers reach each other over gRPC channels, whose reconnect backoff is gRPC's",
       doc='The maximum amount of time the client will wait for the socket connection to be established. The'
           ' connection setup timeout will increase exponentially for each consecutive connection failure up'
           ' to this maximum. To avoid connection storms, a randomization factor of 0.2 will be applied to '
           'the timeout resulting in a random range between 20% below and 20% above the computed value.'),
    _c('socket.connection.setup.timeout.ms', 'long', '10000', READ_ONLY, IGNORED, importance='medium', reason="brokers reach each other over gRPC channels, whose reconnect backoff is gRPC's",
       doc='The amount of time the client will wait for the socket connection to be established. If the '
           'connection is not built before the timeout elapses, clients will close the socket channel.'),
    _c('socket.receive.buffer.bytes', 'int', '102400', READ_ONLY, IGNORED, importance='high', reason=_SOCKBUF,
       doc='The SO_RCVBUF buffer of the socket server sockets. If the value is -1, the OS default will be '
           'used.'),
    _c('socket.request.max.bytes', 'int', '104857600', READ_ONLY, SUPPORTED, low=1, importance='high',
       doc='The maximum number of bytes in a socket request'),
    _c('socket.send.buffer.bytes', 'int', '102400', READ_ONLY, IGNORED, importance='high', reason=_SOCKBUF,
       doc='The SO_SNDBUF buffer of the socket server sockets. If the value is -1, the OS default will be '
           'used.'),
    _c('ssl.cipher.suites', 'list', '', PER_BROKER, REFUSED, accepts_default=True, importance='medium', reason="the cipher suites are OpenSSL's defaults for TLS 1.2 and 1.3 (Java suite names do not apply): a restricted list would not be enforced",
       doc='A list of cipher suites. This is a named combination of authentication, encryption, MAC and key '
           'exchange algorithm used to negotiate the security settings for a network connection using TLS or'
           ' SSL network protocol. By default all the available cipher suites are supported.'),
    _c('ssl.client.auth', 'string', 'none', PER_BROKER, SUPPORTED, valid=('required', 'requested', 'none'), importance='medium', reason='none or required (requested is not offered: a client either proves who it is or need not)',
       doc='Configures kafka broker to request client authentication. The following settings are common:  '
           '<ul> <li><code>ssl.client.auth=required</code> If set to required client authentication is '
           'required. <li><code>ssl.client.auth=requested</code> This means client authentication is '
           'optional. unlike required, if this option is set client can choose not to provide authentication'
           ' information about itself <li><code>ssl.client.auth=none</code> This means client authentication'
           ' is not needed.</ul>'),
    _c('ssl.enabled.protocols', 'list', 'TLSv1.2', PER_BROKER, IGNORED, importance='medium', reason='TLS 1.2 and 1.3, as OpenSSL negotiates; older protocols are never enabled',
       doc="The list of protocols enabled for SSL connections. The default is 'TLSv1.2,TLSv1.3' when running"
           " with Java 11 or newer, 'TLSv1.2' otherwise. With the default value for Java 11, clients and "
           'servers will prefer TLSv1.3 if both support it and fallback to TLSv1.2 otherwise (assuming both '
           'support at least TLSv1.2). This default should be fine for most cases. Also see the config '
           'documentation for `ssl.protocol`.'),
    _c('ssl.endpoint.identification.algorithm', 'string', 'https', PER_BROKER, IGNORED, importance='low', reason="clients check the broker's certificate host name as their own settings say; brokers check each other by the CA and the broker principal (broker.principal.prefix)",
       doc='The endpoint identification algorithm to validate server hostname using server certificate. '),
    _c('ssl.engine.factory.class', 'class', None, PER_BROKER, REFUSED, accepts_default=True, importance='low', reason=_CLASS,
       doc='The class of type org.apache.kafka.common.security.auth.SslEngineFactory to provide SSLEngine '
           'objects. Default value is org.apache.kafka.common.security.ssl.DefaultSslEngineFactory'),
    _c('ssl.key.password', 'password', None, PER_BROKER, REFUSED, accepts_default=True, importance='medium', reason='the private key in ssl.keystore.location must be unencrypted PEM (`minikafka certs` writes it, mode 0600)',
       doc='The password of the private key in the key store file orthe PEM key specified in '
           "`ssl.keystore.key'. This is required for clients only if two-way authentication is configured."),
    _c('ssl.keymanager.algorithm', 'string', 'SunX509', PER_BROKER, IGNORED, importance='medium', reason=_JSSE,
       doc='The algorithm used by key manager factory for SSL connections. Default value is the key manager '
           'factory algorithm configured for the Java Virtual Machine.'),
    _c('ssl.keystore.certificate.chain', 'password', None, PER_BROKER, REFUSED, accepts_default=True, importance='medium', reason='give PEM files: ssl.keystore.location (certificate chain and key) and ssl.truststore.location',
       doc="Certificate chain in the format specified by 'ssl.keystore.type'. Default SSL engine factory "
           'supports only PEM format with a list of X.509 certificates'),
    _c('ssl.keystore.key', 'password', None, PER_BROKER, REFUSED, accepts_default=True, importance='medium', reason='give PEM files: ssl.keystore.location (certificate chain and key) and ssl.truststore.location',
       doc="Private key in the format specified by 'ssl.keystore.type'. Default SSL engine factory supports "
           'only PEM format with PKCS#8 keys. If the key is encrypted, key password must be specified using '
           "'ssl.key.password'"),
    _c('ssl.keystore.location', 'string', None, PER_BROKER, SUPPORTED, importance='medium',
       doc='The location of the key store file. This is optional for client and can be used for two-way '
           'authentication for client.'),
    _c('ssl.keystore.password', 'password', None, PER_BROKER, REFUSED, accepts_default=True, importance='medium', reason='keystores are PEM files without a store password (ssl.keystore.type=PEM)',
       doc='The store password for the key store file. This is optional for client and only needed if '
           "'ssl.keystore.location' is configured.  Key store password is not supported for PEM format."),
    _c('ssl.keystore.type', 'string', 'JKS', PER_BROKER, SUPPORTED, importance='medium', reason='PEM only (also the default): a PEM file with the certificate chain and the unencrypted key',
       doc='The file format of the key store file. This is optional for client.'),
    _c('ssl.principal.mapping.rules', 'string', 'DEFAULT', READ_ONLY, REFUSED, accepts_default=True, importance='low', reason="no mapping rules: a TLS principal is built from the certificate as the README's security section says",
       doc='A list of rules for mapping from distinguished name from the client certificate to short name. '
           'The rules are evaluated in order and the first rule that matches a principal name is used to map'
           ' it to a short name. Any later rules in the list are ignored. By default, distinguished name of '
           'the X.500 certificate will be the principal. For more details on the format please see <a '
           'href="#security_authz"> security authorization and acls</a>. Note that this configuration is '
           'ignored if an extension of KafkaPrincipalBuilder is provided by the '
           '<code>principal.builder.class</code> configuration.'),
    _c('ssl.protocol', 'string', 'TLSv1.2', PER_BROKER, IGNORED, importance='medium', reason="TLS 1.2 and 1.3, as OpenSSL negotiates (tLS is OpenSSL's (Python's ssl module), not Java's JSSE: there is no provider, key/trust manager algorithm or secure random implementation to choose)",
       doc="The SSL protocol used to generate the SSLContext. The default is 'TLSv1.3' when running with "
           "Java 11 or newer, 'TLSv1.2' otherwise. This value should be fine for most use cases. Allowed "
           "values in recent JVMs are 'TLSv1.2' and 'TLSv1.3'. 'TLS', 'TLSv1.1', 'SSL', 'SSLv2' and 'SSLv3' "
           'may be supported in older JVMs, but their usage is discouraged due to known security '
           "vulnerabilities. With the default value for this config and 'ssl.enabled.protocols', clients "
           "will downgrade to 'TLSv1.2' if the server does not support 'TLSv1.3'. If this config is set to "
           "'TLSv1.2', clients will not use 'TLSv1.3' even if it is one of the values in "
           "ssl.enabled.protocols and the server only supports 'TLSv1.3'."),
    _c('ssl.provider', 'string', None, PER_BROKER, IGNORED, importance='medium', reason=_JSSE,
       doc='The name of the security provider used for SSL connections. Default value is the default '
           'security provider of the JVM.'),
    _c('ssl.secure.random.implementation', 'string', None, PER_BROKER, IGNORED, importance='low', reason=_JSSE,
       doc='The SecureRandom PRNG implementation to use for SSL cryptography operations. '),
    _c('ssl.trustmanager.algorithm', 'string', 'PKIX', PER_BROKER, IGNORED, importance='medium', reason=_JSSE,
       doc='The algorithm used by trust manager factory for SSL connections. Default value is the trust '
           'manager factory algorithm configured for the Java Virtual Machine.'),
    _c('ssl.truststore.certificates', 'password', None, PER_BROKER, REFUSED, accepts_default=True, importance='medium', reason='give PEM files: ssl.keystore.location (certificate chain and key) and ssl.truststore.location',
       doc="Trusted certificates in the format specified by 'ssl.truststore.type'. Default SSL engine "
           'factory supports only PEM format with X.509 certificates.'),
    _c('ssl.truststore.location', 'string', None, PER_BROKER, SUPPORTED, importance='medium',
       doc='The location of the trust store file. '),
    _c('ssl.truststore.password', 'password', None, PER_BROKER, REFUSED, accepts_default=True, importance='medium', reason='truststores are PEM files without a store password (ssl.truststore.type=PEM)',
       doc='The password for the trust store file. If a password is not set, trust store file configured '
           'will still be used, but integrity checking is disabled. Trust store password is not supported '
           'for PEM format.'),
    _c('ssl.truststore.type', 'string', 'JKS', PER_BROKER, SUPPORTED, importance='medium', reason='PEM only (also the default): a PEM file with the CA certificates',
       doc='The file format of the trust store file.'),
    _c('super.users', 'string', '', READ_ONLY, SUPPORTED, origin=ACL_AUTHORIZER,
       doc='AclAuthorizer: principals allowed everything, separated by semicolons (User:alice;User:bob).'),
    _c('transaction.abort.timed.out.transaction.cleanup.interval.ms', 'int', '10000', READ_ONLY, SUPPORTED, low=1, importance='low',
       doc='The interval at which to rollback transactions that have timed out'),
    _c('transaction.max.timeout.ms', 'int', '900000', READ_ONLY, SUPPORTED, low=1, importance='high',
       doc="The maximum allowed timeout for transactions. If a client's requested transaction time exceed "
           'this, then the broker will return an error in InitProducerIdRequest. This prevents a client from'
           ' too large of a timeout, which can stall consumers reading from topics included in the '
           'transaction.'),
    _c('transaction.partition.verification.enable', 'boolean', 'true', CLUSTER_WIDE, SUPPORTED, origin=KAFKA_36, importance='low',
       reason='read at start (no dynamic broker configs here); verification by the coordinator of the '
              "request's transactional.id over the inter-broker listener (AddPartitionsToTxn, batched form)",
       doc='Enable verification that checks that the partition has been added to the transaction before '
           'writing transactional records to the partition'),
    _c('transaction.remove.expired.transaction.cleanup.interval.ms', 'int', '3600000', READ_ONLY, IGNORED, low=1, importance='low', reason=_TXN,
       doc='The interval at which to remove transactions that have expired due to '
           '<code>transactional.id.expiration.ms</code> passing'),
    _c('transaction.state.log.load.buffer.size', 'int', '5242880', READ_ONLY, IGNORED, low=1, importance='high', reason=_TXN,
       doc='Batch size for reading from the transaction log segments when loading producer ids and '
           'transactions into the cache (soft-limit, overridden if records are too large).'),
    _c('transaction.state.log.min.isr', 'int', '2', READ_ONLY, IGNORED, low=1, importance='high', reason=_TXN,
       doc='Overridden min.insync.replicas config for the transaction topic.'),
    _c('transaction.state.log.num.partitions', 'int', '50', READ_ONLY, IGNORED, low=1, importance='high', reason=_TXN,
       doc='The number of partitions for the transaction topic (should not change after deployment).'),
    _c('transaction.state.log.replication.factor', 'short', '3', READ_ONLY, IGNORED, low=1, importance='high', reason=_TXN,
       doc='The replication factor for the transaction topic (set higher to ensure availability). Internal '
           'topic creation will fail until the cluster size meets this replication factor requirement.'),
    _c('transaction.state.log.segment.bytes', 'int', '104857600', READ_ONLY, IGNORED, low=1, importance='high', reason=_TXN,
       doc='The transaction topic segment bytes should be kept relatively small in order to facilitate '
           'faster log compaction and cache loads'),
    _c('transactional.id.expiration.ms', 'int', '604800000', READ_ONLY, SUPPORTED, low=1, importance='high',
       doc='The time in ms that the transaction coordinator will wait without receiving any transaction '
           'status updates for the current transaction before expiring its transactional id. This setting '
           'also influences producer id expiration - producer ids are expired once this time has elapsed '
           'after the last write with the given producer id. Note that producer ids may expire sooner if the'
           " last write from the producer id is deleted due to the topic's retention settings."),
    _c('unclean.leader.election.enable', 'boolean', 'false', CLUSTER_WIDE, SUPPORTED, importance='high',
       doc='Indicates whether to enable replicas not in the ISR set to be elected as leader as a last '
           'resort, even though doing so may result in data loss'),
    _c('zookeeper.clientCnxnSocket', 'string', None, READ_ONLY, IGNORED, importance='medium', reason='ZooKeeper is reached through kazoo (Python), which has one connection implementation',
       doc='Typically set to <code>org.apache.zookeeper.ClientCnxnSocketNetty</code> when using TLS '
           'connectivity to ZooKeeper. Overrides any explicit value set via the same-named '
           '<code>zookeeper.clientCnxnSocket</code> system property.'),
    _c('zookeeper.connect', 'string', None, READ_ONLY, SUPPORTED, importance='high',
       doc='Specifies the ZooKeeper connection string in the form <code>hostname:port</code> where host and '
           'port are the host and port of a ZooKeeper server. To allow connecting through other ZooKeeper '
           'nodes when that ZooKeeper machine is down you can also specify multiple hosts in the form '
           '<code>hostname1:port1,hostname2:port2,hostname3:port3</code>.<br>The server can also have a '
           'ZooKeeper chroot path as part of its ZooKeeper connection string which puts its data under some '
           'path in the global ZooKeeper namespace. For example to give a chroot path of '
           '<code>/chroot/path</code> you would give the connection string as '
           '<code>hostname1:port1,hostname2:port2,hostname3:port3/chroot/path</code>.'),
    _c('zookeeper.connection.timeout.ms', 'int', None, READ_ONLY, SUPPORTED, importance='high', reason='unset: zookeeper.session.timeout.ms, as Kafka',
       doc='The max time that the client waits to establish a connection to zookeeper. If not set, the value'
           ' in zookeeper.session.timeout.ms is used'),
    _c('zookeeper.digest.auth.file', 'string', '', READ_ONLY, SUPPORTED, origin=MINIKAFKA,
       doc='A file holding user:password: the ZooKeeper digest identity of the brokers (with '
           "zookeeper.set.acl, only it may write the cluster's znodes)."),
    _c('zookeeper.max.in.flight.requests', 'int', '10', READ_ONLY, IGNORED, low=1, importance='high', reason='kazoo pipelines requests on its one connection; ZooKeeper calls are bounded by the worker threads that make them',
       doc='The maximum number of unacknowledged requests the client will send to Zookeeper before blocking.'),
    _c('zookeeper.session.timeout.ms', 'int', '18000', READ_ONLY, SUPPORTED, importance='high',
       doc='Zookeeper session timeout'),
    _c('zookeeper.set.acl', 'boolean', 'false', READ_ONLY, SUPPORTED, importance='high',
       doc='Set client to use secure ACLs'),
    _c('zookeeper.ssl.cipher.suites', 'list', None, READ_ONLY, IGNORED, importance='low', reason=_ZKSSL,
       doc='Specifies the enabled cipher suites to be used in ZooKeeper TLS negotiation (csv). Overrides any'
           ' explicit value set via the <code>zookeeper.ssl.ciphersuites</code> system property (note the '
           'single word "ciphersuites"). The default value of <code>null</code> means the list of enabled '
           'cipher suites is determined by the Java runtime being used.'),
    _c('zookeeper.ssl.client.enable', 'boolean', 'false', READ_ONLY, REFUSED, accepts_default=True, importance='medium', reason='ZooKeeper is reached without TLS (digest authentication and ACLs: zookeeper.set.acl, zookeeper.digest.auth.file)',
       doc='Set client to use TLS when connecting to ZooKeeper. An explicit value overrides any value set '
           'via the <code>zookeeper.client.secure</code> system property (note the different name). Defaults'
           ' to false if neither is set; when true, <code>zookeeper.clientCnxnSocket</code> must be set '
           '(typically to <code>org.apache.zookeeper.ClientCnxnSocketNetty</code>); other values to set may '
           'include <code>zookeeper.ssl.cipher.suites</code>, <code>zookeeper.ssl.crl.enable</code>, '
           '<code>zookeeper.ssl.enabled.protocols</code>, '
           '<code>zookeeper.ssl.endpoint.identification.algorithm</code>, '
           '<code>zookeeper.ssl.keystore.location</code>, <code>zookeeper.ssl.keystore.password</code>, '
           '<code>zookeeper.ssl.keystore.type</code>, <code>zookeeper.ssl.ocsp.enable</code>, '
           '<code>zookeeper.ssl.protocol</code>, <code>zookeeper.ssl.truststore.location</code>, '
           '<code>zookeeper.ssl.truststore.password</code>, <code>zookeeper.ssl.truststore.type</code>'),
    _c('zookeeper.ssl.crl.enable', 'boolean', 'false', READ_ONLY, IGNORED, importance='low', reason=_ZKSSL,
       doc='Specifies whether to enable Certificate Revocation List in the ZooKeeper TLS protocols. '
           'Overrides any explicit value set via the <code>zookeeper.ssl.crl</code> system property (note '
           'the shorter name).'),
    _c('zookeeper.ssl.enabled.protocols', 'list', None, READ_ONLY, IGNORED, importance='low', reason=_ZKSSL,
       doc='Specifies the enabled protocol(s) in ZooKeeper TLS negotiation (csv). Overrides any explicit '
           'value set via the <code>zookeeper.ssl.enabledProtocols</code> system property (note the '
           'camelCase). The default value of <code>null</code> means the enabled protocol will be the value '
           'of the <code>zookeeper.ssl.protocol</code> configuration property.'),
    _c('zookeeper.ssl.endpoint.identification.algorithm', 'string', 'HTTPS', READ_ONLY, IGNORED, importance='low', reason=_ZKSSL,
       doc='Specifies whether to enable hostname verification in the ZooKeeper TLS negotiation process, with'
           ' (case-insensitively) "https" meaning ZooKeeper hostname verification is enabled and an explicit'
           ' blank value meaning it is disabled (disabling it is only recommended for testing purposes). An '
           'explicit value overrides any "true" or "false" value set via the '
           '<code>zookeeper.ssl.hostnameVerification</code> system property (note the different name and '
           'values; true implies https and false implies blank).'),
    _c('zookeeper.ssl.keystore.location', 'string', None, READ_ONLY, IGNORED, importance='medium', reason=_ZKSSL,
       doc='Keystore location when using a client-side certificate with TLS connectivity to ZooKeeper. '
           'Overrides any explicit value set via the <code>zookeeper.ssl.keyStore.location</code> system '
           'property (note the camelCase).'),
    _c('zookeeper.ssl.keystore.password', 'password', None, READ_ONLY, IGNORED, importance='medium', reason=_ZKSSL,
       doc='Keystore password when using a client-side certificate with TLS connectivity to ZooKeeper. '
           'Overrides any explicit value set via the <code>zookeeper.ssl.keyStore.password</code> system '
           'property (note the camelCase). Note that ZooKeeper does not support a key password different '
           'from the keystore password, so be sure to set the key password in the keystore to be identical '
           'to the keystore password; otherwise the connection attempt to Zookeeper will fail.'),
    _c('zookeeper.ssl.keystore.type', 'string', None, READ_ONLY, IGNORED, importance='medium', reason=_ZKSSL,
       doc='Keystore type when using a client-side certificate with TLS connectivity to ZooKeeper. Overrides'
           ' any explicit value set via the <code>zookeeper.ssl.keyStore.type</code> system property (note '
           'the camelCase). The default value of <code>null</code> means the type will be auto-detected '
           'based on the filename extension of the keystore.'),
    _c('zookeeper.ssl.ocsp.enable', 'boolean', 'false', READ_ONLY, IGNORED, importance='low', reason=_ZKSSL,
       doc='Specifies whether to enable Online Certificate Status Protocol in the ZooKeeper TLS protocols. '
           'Overrides any explicit value set via the <code>zookeeper.ssl.ocsp</code> system property (note '
           'the shorter name).'),
    _c('zookeeper.ssl.protocol', 'string', 'TLSv1.2', READ_ONLY, IGNORED, importance='low', reason=_ZKSSL,
       doc='Specifies the protocol to be used in ZooKeeper TLS negotiation. An explicit value overrides any '
           'value set via the same-named <code>zookeeper.ssl.protocol</code> system property.'),
    _c('zookeeper.ssl.truststore.location', 'string', None, READ_ONLY, IGNORED, importance='medium', reason=_ZKSSL,
       doc='Truststore location when using TLS connectivity to ZooKeeper. Overrides any explicit value set '
           'via the <code>zookeeper.ssl.trustStore.location</code> system property (note the camelCase).'),
    _c('zookeeper.ssl.truststore.password', 'password', None, READ_ONLY, IGNORED, importance='medium', reason=_ZKSSL,
       doc='Truststore password when using TLS connectivity to ZooKeeper. Overrides any explicit value set '
           'via the <code>zookeeper.ssl.trustStore.password</code> system property (note the camelCase).'),
    _c('zookeeper.ssl.truststore.type', 'string', None, READ_ONLY, IGNORED, importance='medium', reason=_ZKSSL,
       doc='Truststore type when using TLS connectivity to ZooKeeper. Overrides any explicit value set via '
           'the <code>zookeeper.ssl.trustStore.type</code> system property (note the camelCase). The default'
           ' value of <code>null</code> means the type will be auto-detected based on the filename extension'
           ' of the truststore.'),
    _c('zookeeper.sync.time.ms', 'int', '2000', READ_ONLY, IGNORED, importance='low', reason='deprecated and unused in Kafka 2.8 too',
       doc='How far a ZK follower can be behind a ZK leader'),
)

BROKER_CONFIG_DEFS: Final[dict[str, BrokerConfigDef]] = {d.name: d for d in BROKER_CONFIGS}

# Kafka's ApiVersionValidator configs: here narrowed to the versions of record format v2.
_VERSION_CONFIGS: Final = frozenset({"inter.broker.protocol.version", "log.message.format.version"})
_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.\d+)?(?:-IV\d+)?$")
_INTEGER = re.compile(r"^[+-]?\d+$")


def render(value: object) -> str:
    """A parsed value as Kafka's ``ConfigDef.convertToString`` writes it (booleans lower case,
    doubles as Java's ``Double.toString`` for the large ones)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return repr(value).replace("e+", "E").replace("e-", "E-")
    return str(value)


def check_broker_config(name: str, raw: str) -> str:
    """``raw`` checked against the table as Kafka's ConfigDef parses and validates it; returns the
    value as Kafka would describe it. BrokerConfigValueError for an unknown or refused name, or a
    value of the wrong type or out of range."""
    d = BROKER_CONFIG_DEFS.get(name)
    if d is None:
        raise BrokerConfigValueError(f"unknown broker config {name!r}")
    value = _parse(d, raw)
    if d.status == REFUSED and not (d.accepts_default and value == (d.default or "")):
        raise BrokerConfigValueError(f"broker config {name} is not supported: {d.reason}")
    return value


def _parse(d: BrokerConfigDef, raw: str) -> str:
    v = raw.strip()
    bad = f"invalid value {raw!r} for {d.name}"
    if d.type == "boolean":
        if v.lower() not in ("true", "false"):
            raise BrokerConfigValueError(f"{bad}: must be true or false")
        return v.lower()
    if d.type in _INT_TYPES or d.type == "double":
        number: float
        if d.type == "double":
            try:
                number = float(v)
            except ValueError:
                raise BrokerConfigValueError(f"{bad}: not a number") from None
            if math.isnan(number):
                raise BrokerConfigValueError(f"{bad}: not a number")
        else:
            lo, hi = _INT_TYPES[d.type]
            if not _INTEGER.match(v) or not lo <= int(v) <= hi:
                raise BrokerConfigValueError(f"{bad}: not a number of type {d.type}")
            number = int(v)
        if (d.low is not None and number < d.low) or (d.high is not None and number > d.high):
            raise BrokerConfigValueError(f"{bad}: must be in {d.valid_text}")
        return render(number)
    if d.type == "list":
        items = [x.strip() for x in v.split(",")] if v else []
        if d.valid and any(x not in d.valid for x in items):
            raise BrokerConfigValueError(f"{bad}: every item must be one of {', '.join(d.valid)}")
        return ",".join(items)
    if d.valid and v not in d.valid:
        raise BrokerConfigValueError(f"{bad}: must be one of {', '.join(d.valid)}")
    if d.name in _VERSION_CONFIGS:
        m = _VERSION.match(v)
        if m is None or not (0, 11) <= (int(m.group(1)), int(m.group(2))) <= (2, 8):
            raise BrokerConfigValueError(f"{bad}: must be a Kafka version from 0.11.0 to 2.8 (older versions "
                                         "wrote message formats v0 and v1, which are not written here)")
    return v


def broker_config_synonyms(name: str) -> tuple[str, ...]:
    """Kafka's ``DynamicBrokerConfig.brokerConfigSynonyms``: the names that set ``name``, most
    specific first (DescribeConfigs lists their sources in this order)."""
    for group in _SYNONYM_GROUPS:
        if name in group:
            return group
    if name == "log.flush.interval.ms":  # log.flush.scheduler.interval.ms is its default
        return ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")
    return (name,)


_SYNONYM_GROUPS: Final = (("log.roll.ms", "log.roll.hours"), ("log.roll.jitter.ms", "log.roll.jitter.hours"),
                          ("log.retention.ms", "log.retention.minutes", "log.retention.hours"))


def broker_config_markdown() -> str:
    """docs/configs.md's broker config table (tests/unit/test_broker_config_table.py checks the copy)."""
    lines = ["| config | type | Kafka's default | valid values | update mode (Kafka) | here |",
             "|---|---|---|---|---|---|"]
    for d in BROKER_CONFIGS:
        default = "null" if d.default is None else "Long.MAX_VALUE" if d.default == str(LONG_MAX) else d.default
        name = d.name if d.origin == KAFKA else f"{d.name} ({d.origin})"
        mode = "internal" if d.internal else d.update_mode
        lines.append(f"| `{name}` | {d.type} | `{default}` | {d.valid_text or '-'} | {mode} | {d.here} |")
    return "\n".join(lines)
