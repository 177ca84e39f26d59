"""Where the cluster is when nobody said: the library's, CLI's and Spark connector's defaults.

A saved address breaks when the local cluster restarts on other ports, so a client given no
``bootstrap_servers`` looks, in order, at:

1. ``MINIKAFKA_BOOTSTRAP`` (``host:port[,host:port...]``; ``minikafka cluster status`` prints the
   ``export`` line), and ``MINIKAFKA_ZOOKEEPER`` for the ZooKeeper-based consumer groups;
2. the local cluster's state file, ``cluster.json`` in ``MINIKAFKA_DIR`` or ``./.minikafka``
   (what ``minikafka cluster up`` writes; read here as plain JSON so the library does not import
   the launcher);
3. the local cluster's documented gRPC address ``127.0.0.1:9392`` (Kafka's customary 9092 is
   the local cluster's Kafka wire-protocol listener, for Kafka's own clients; for ZooKeeper: none - a consumer group then says it
   needs ``zookeeper_connect``, rather than waiting on a guessed address).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

BOOTSTRAP_ENV = "MINIKAFKA_BOOTSTRAP"
# The Kafka wire-protocol listeners, for Kafka's own clients (librdkafka, kafka-python...): only
# printed by `minikafka cluster up/status` for them; this library speaks gRPC to BOOTSTRAP_ENV.
KAFKA_BOOTSTRAP_ENV = "MINIKAFKA_KAFKA_BOOTSTRAP"
ZOOKEEPER_ENV = "MINIKAFKA_ZOOKEEPER"
DIR_ENV = "MINIKAFKA_DIR"
DEFAULT_DIR = ".minikafka"
STATE_FILE = "cluster.json"  # client/ops/local_cluster.py writes it
FALLBACK_BOOTSTRAP = "127.0.0.1:9392"


def local_cluster_dir() -> Path:
    return Path(os.environ.get(DIR_ENV) or DEFAULT_DIR)


def _local_state() -> dict[str, Any] | None:
    try:
        data = json.loads((local_cluster_dir() / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def default_bootstrap() -> str:
    """The bootstrap servers a client given none uses (see the module docstring)."""
    env = os.environ.get(BOOTSTRAP_ENV, "").strip()
    if env:
        return env
    state = _local_state()
    if state is not None:
        brokers = state.get("brokers")
        if isinstance(brokers, dict):
            addresses = [f"{b.get('host', '127.0.0.1')}:{b['port']}" for _k, b in sorted(brokers.items())
                         if isinstance(b, dict) and isinstance(b.get("port"), int)]
            if addresses:
                return ",".join(addresses)
    return FALLBACK_BOOTSTRAP


def default_zookeeper() -> str | None:
    """The ZooKeeper connect string for consumer groups when none is given, if one is known."""
    env = os.environ.get(ZOOKEEPER_ENV, "").strip()
    if env:
        return env
    state = _local_state()
    if state is not None and isinstance(state.get("zookeeper_connect"), str):
        return str(state["zookeeper_connect"])
    return None


def kafka_bootstrap() -> str:
    """The local cluster's Kafka wire-protocol listeners, for Kafka's own clients (confluent-kafka,
    kafka-python, ...): ``MINIKAFKA_KAFKA_BOOTSTRAP``, else the local cluster's state file. Raises
    LookupError with what to do when neither says - never a guessed 127.0.0.1:9092, which may be
    another cluster's or nobody's (issue 33)."""
    env = os.environ.get(KAFKA_BOOTSTRAP_ENV, "").strip()
    if env:
        return env
    state = _local_state()
    brokers = state.get("brokers") if state is not None else None
    if isinstance(brokers, dict):
        addresses = [f"{b.get('host', '127.0.0.1')}:{b['kafka_port']}" for _k, b in sorted(brokers.items())
                     if isinstance(b, dict) and isinstance(b.get("kafka_port"), int) and b["kafka_port"] > 0]
        if addresses:
            return ",".join(addresses)
    raise LookupError(f"no local cluster in {local_cluster_dir()} and ${KAFKA_BOOTSTRAP_ENV} unset: start one "
                      f"(minikafka cluster up) or export what `minikafka cluster status` prints")
