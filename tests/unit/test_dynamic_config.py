"""The cached-state rule (SPEC S14.1, issue 27's bug 1) on broker.server.dynamic_config over the simulated
ZooKeeper: configs are loaded before any log could use them (never the defaults in their place),
reloaded whole after a new session (changes and deletions made meanwhile), and kept by the watch."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "simulation"))
from sim_zk import SimZooKeeper

from broker.security.gatekeeper import Gatekeeper
from broker.server.config import BrokerConfig
from broker.server.dynamic_config import DynamicConfigManager
from proto import errors
from zk.client import KafkaZkClient


def manager() -> tuple[DynamicConfigManager, KafkaZkClient]:
    client = SimZooKeeper().client(name="broker")
    client.start()
    zk = KafkaZkClient.over(client)
    zk.ensure_persistent_paths()
    cfg = BrokerConfig()
    return DynamicConfigManager(cfg, zk, Gatekeeper(cfg)), zk


def test_configs_come_from_zookeeper_before_any_log_and_never_default_in_their_place() -> None:
    m, zk = manager()
    zk.set_topic_config("strict", {"min.insync.replicas": "4", "retention.ms": "1000"}, notify=False)
    with pytest.raises(errors.KafkaStorageError):
        m.topic_config("strict")                      # before the load: refused, not the defaults
    m.load_all()
    assert m.topic_config("strict").min_insync_replicas == 4
    assert m.topic_config("strict").retention_ms == 1000
    # A topic created after the start is read when its first log is made.
    zk.set_topic_config("later", {"min.insync.replicas": "2"}, notify=False)
    assert m.topic_config("later").min_insync_replicas == 2
    assert m.topic_config("plain").min_insync_replicas == BrokerConfig().default_log_config().min_insync_replicas


def test_a_new_session_reloads_what_changed_and_drops_what_went() -> None:
    async def go() -> None:
        m, zk = manager()
        zk.set_topic_config("a", {"min.insync.replicas": "2"}, notify=False)
        zk.set_topic_config("b", {"max.message.bytes": "2000"}, notify=False)
        m.load_all()
        applied: dict[str, int] = {}
        m.on_topic_config = lambda t, c: applied.__setitem__(t, c.min_insync_replicas)
        # While this broker had no session: a changed, b's overrides removed (no notification seen).
        zk.set_topic_config("a", {"min.insync.replicas": "3"}, notify=False)
        zk.zk.delete("/config/topics/b")
        await m.reload_all()
        assert m.topic_config("a").min_insync_replicas == 3 and applied["a"] == 3
        assert m.topic_config("b").max_message_bytes == BrokerConfig().default_log_config().max_message_bytes
        assert "b" in applied
        m.forget_topic("a")
        zk.set_topic_config("a", {"min.insync.replicas": "1"}, notify=False)   # deleted, created again
        assert m.topic_config("a").min_insync_replicas == 1

    asyncio.run(go())


def test_users_removed_while_away_are_forgotten() -> None:
    from proto.scram import MECHANISM, new_credential

    async def go() -> None:
        m, zk = manager()
        cred = new_credential("pw")
        zk.set_user_config("alice", {MECHANISM: cred.encode()})
        m.load_all()
        assert m.gate.credentials.get("alice") is not None
        zk.set_user_config("alice", {})
        await m.reload_all()
        assert m.gate.credentials.get("alice") is None

    asyncio.run(go())
