"""DescribeConfigs of a BROKER resource (issue 34; Kafka's ``ConfigHelper.createBrokerConfigEntry``).

Theory of operation
-------------------
Pure: answered from the broker config table (``broker.server.broker_config_defs``) and this broker's config,
in ``broker_config_entries``: every config of the table but Kafka's internal ones, with its value
(null where Kafka's default is null and nothing set it), its synonyms in Kafka's order (those of
``brokerConfigSynonyms`` set in the config file or on the command line, STATIC_BROKER_CONFIG, then
their defaults, DEFAULT_CONFIG; from the described name on), the first synonym's source, Kafka's
type id and documentation. Every one is read-only here: no broker config is dynamic (AlterConfigs
of brokers is refused), whatever Kafka's update mode. PASSWORD-typed configs (Kafka's
``maybeSensitive``) and SENSITIVE_BROKER_CONFIGS are sensitive: described without their values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from broker.log.config import CONFIG_TYPE_IDS, SUPPORTED
from broker.server.broker_config_defs import BROKER_CONFIGS, BrokerConfigDef, broker_config_synonyms, render
from broker.server.config import CONFIG_DEFS, BrokerConfig
from proto import minikafka_pb2 as pb

# Shown as null (is_sensitive) by DescribeConfigs beside Kafka's PASSWORD-typed configs: where the
# broker keeps its data, secrets and keys, and how to reach ZooKeeper (whose writes only brokers
# should make, S12.4).
SENSITIVE_BROKER_CONFIGS: Final = frozenset({
    "zookeeper.connect", "log.dirs", "log.dir", "ssl.keystore.location", "ssl.truststore.location",
    "zookeeper.digest.auth.file", "super.users",
})


def is_sensitive_broker_config(name: str) -> bool:
    """Shown as null: passwords, keystore passwords, SASL/SCRAM secrets (any name with 'password' or
    'secret' in it, Kafka's PASSWORD-typed configs), and SENSITIVE_BROKER_CONFIGS."""
    low = name.lower()
    return name in SENSITIVE_BROKER_CONFIGS or "password" in low or "secret" in low


_DEFAULTS: Final = BrokerConfig()


def _static_value(cfg: BrokerConfig, d: BrokerConfigDef) -> str:
    """The value the config file or command line gave ``d`` (the broker reads it, or kept it)."""
    mapped = CONFIG_DEFS.get(d.name)
    if mapped is not None:
        return render(getattr(cfg, mapped.attr))
    return dict(cfg.ignored_configs).get(d.name, d.default or "")


def _default_value(d: BrokerConfigDef) -> str | None:
    """The DEFAULT_CONFIG value: None where Kafka's default is null, this broker's default for a
    config it reads, else Kafka's."""
    if d.default is None:
        return None
    mapped = CONFIG_DEFS.get(d.name)
    return render(getattr(_DEFAULTS, mapped.attr)) if mapped is not None and d.status == SUPPORTED else d.default


def broker_config_entries(cfg: BrokerConfig, resource_name: str, keys: Sequence[str] = ()) -> list[pb.ConfigEntry]:
    """DescribeConfigs of a BROKER resource (see the module docstring): ``resource_name`` this
    broker's id gives every broker config; the empty name (the cluster-wide dynamic defaults) none,
    as none is dynamic here. ``keys``: only these (empty: all)."""
    if not resource_name:
        return []
    S = pb.ConfigSource
    by_name = {d.name: d for d in BROKER_CONFIGS}
    out = []
    for d in BROKER_CONFIGS:
        if d.internal or (keys and d.name not in keys):
            continue
        sensitive = d.sensitive or is_sensitive_broker_config(d.name)
        names = [n for n in broker_config_synonyms(d.name) if n in by_name]
        synonyms = [(n, _static_value(cfg, by_name[n]), S.STATIC_BROKER_CONFIG) for n in names
                    if n in cfg.static_keys]
        for n in names:
            default = _default_value(by_name[n])
            if default is not None:
                synonyms.append((n, default, S.DEFAULT_CONFIG))
        while synonyms and synonyms[0][0] != d.name:  # Kafka: from the described name on
            synonyms.pop(0)
        value = _static_value(cfg, d) if d.name in cfg.static_keys else _default_value(d)
        source = synonyms[0][2] if synonyms else S.DEFAULT_CONFIG
        out.append(pb.ConfigEntry(
            name=d.name, value="" if sensitive or value is None else value, value_null=value is None,
            read_only=True, is_default=source == S.DEFAULT_CONFIG, source=source, is_sensitive=sensitive,
            synonyms=[pb.ConfigSynonym(name=n, value="" if sensitive else v, source=src) for n, v, src in synonyms],
            documentation=d.doc, config_type=CONFIG_TYPE_IDS[d.type]))
    return out
