"""State a broker caches from ZooKeeper: topic config overrides, SCRAM credentials and ACLs
(Kafka's DynamicConfigManager and the authorizer's ACL cache).

Theory of operation - the cached-state rule (SPEC S14)
------------------------------------------------------
Every value a broker derives from ZooKeeper is

(a) **loaded before anything that depends on it runs**: ``load_all`` reads every topic's
    overrides (/config/topics), every SCRAM credential (/config/users) and every ACL
    (/kafka-acl) right after the ZooKeeper session starts, before the log manager loads a
    single log (Kafka's order: a log is opened with its topic's real config, never with the
    broker defaults - a restarted broker once enforced min.insync.replicas=1 on a topic whose
    override said 4);
(b) **invalidated and reloaded when a session is re-established**: ``reload_all`` reads it all
    again and replaces what changed (notifications made while this broker had no session, or
    was paused, cannot be lost), and whatever was deleted meanwhile is dropped;
(c) **kept current by its watch**: the change notifications (/config/changes,
    /kafka-acl-changes) reload the one entity each names.

While the session is down the cache stays as it was: the last state the cluster stored, never
less (S14.2). A topic this broker has not seen yet (created after the start) is read from
ZooKeeper when its first log is made, before the log exists.

Reads run on a worker thread (ZooKeeper calls block); what they found is installed on the
event loop, which owns the logs, the authorizer and the credential cache.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from broker.log.config import LogConfig
from broker.security.authorizer import Acl, Resource
from broker.security.gatekeeper import Gatekeeper
from broker.server.config import BrokerConfig
from proto import errors
from proto.scram import MECHANISM, ScramCredential
from zk.client import KafkaZkClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusterState:
    """One complete read of what this manager caches."""
    topic_overrides: dict[str, dict[str, str]]
    users: dict[str, str]  # user -> its SCRAM credential text
    acls: dict[Resource, list[Acl]]


class DynamicConfigManager:
    def __init__(self, config: BrokerConfig, zk: KafkaZkClient, gate: Gatekeeper) -> None:
        self.config = config
        self.zk = zk
        self.gate = gate
        self._topic_configs: dict[str, LogConfig] = {}
        self._users: set[str] = set()
        self._acl_resources: set[Resource] = set()
        self._seen_config_changes: set[str] = set()
        self._seen_acl_changes: set[str] = set()
        self.loaded = False
        # Called on the event loop with (topic, new config) when a topic's config changed.
        self.on_topic_config: Callable[[str, LogConfig], None] = lambda _t, _c: None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------ topic configs

    def _make(self, topic: str, overrides: dict[str, str]) -> LogConfig:
        try:
            cfg = self.config.default_log_config().with_overrides(overrides)
            cfg.check_policy(self.config.min_segment_bytes, self.config.min_segment_ms)
            return cfg
        except errors.KafkaError as e:
            # Stored by an older version or written by hand: the broker still starts (S13.5).
            log.warning("topic %s: ignoring bad config overrides %s: %s", topic, overrides, e)
            return self.config.default_log_config()

    def topic_config(self, topic: str) -> LogConfig:
        """The topic's config: cached, or read from ZooKeeper (a topic new to this broker). Never
        the broker defaults in place of overrides that could not be read: that raises."""
        cfg = self._topic_configs.get(topic)
        if cfg is None:
            if not self.loaded:
                raise errors.KafkaStorageError(f"topic {topic}: configs are not loaded from ZooKeeper yet")
            cfg = self._topic_configs[topic] = self._make(topic, self.zk.get_topic_config(topic))
        return cfg

    def forget_topic(self, topic: str) -> None:
        """The topic was deleted here; a topic created again under its name is read afresh."""
        self._topic_configs.pop(topic, None)

    # ------------------------------------------------------------ (a) load, (b) reload

    def read_all(self) -> ClusterState:
        """Everything cached, read from ZooKeeper (blocking: a worker thread)."""
        overrides = self.zk.get_topic_configs(self.zk.get_configured_topics())
        users: dict[str, str] = {}
        for name in self.zk.get_scram_users():
            text = self.zk.get_user_config(name).get(MECHANISM)
            if text:
                users[name] = text
        acls: dict[Resource, list[Acl]] = {}
        if self.gate.authorizer is not None:
            for resource_type, name in self.zk.get_acl_resources():
                acls[Resource(resource_type, name)] = [Acl(*e) for e in self.zk.get_acls(resource_type, name)]
        return ClusterState(overrides, users, acls)

    def load_all(self) -> None:
        """(a): at start-up, before the logs are loaded (blocking: a worker thread)."""
        self.install(self.read_all())
        self.loaded = True

    def install(self, state: ClusterState) -> list[str]:
        """Replace the cache with ``state``; returns the topics whose config changed."""
        changed: list[str] = []
        for topic in sorted(set(self._topic_configs) | set(state.topic_overrides)):
            new = self._make(topic, state.topic_overrides.get(topic, {}))
            if self._topic_configs.get(topic) != new:
                changed.append(topic)
            self._topic_configs[topic] = new
        for name in self._users - set(state.users):
            self.gate.credentials.set(name, None)
        for name, text in state.users.items():
            self._set_user(name, text)
        self._users = set(state.users)
        if self.gate.authorizer is not None:
            for resource in self._acl_resources - set(state.acls):
                self.gate.authorizer.set_acls(resource, [])
            for resource, entries in state.acls.items():
                self.gate.authorizer.set_acls(resource, entries)
            self._acl_resources = set(state.acls)
        return changed

    def _set_user(self, name: str, text: str | None) -> None:
        try:
            credential = ScramCredential.decode(text) if text else None
        except ValueError as e:
            log.warning("user %s: ignoring a bad SCRAM credential: %s", name, e)
            credential = None
        self.gate.credentials.set(name, credential)
        (self._users.add if credential is not None else self._users.discard)(name)

    async def reload_all(self) -> None:
        """(b): a new ZooKeeper session (after an expiry: every notification of the gap is covered)."""
        state = await asyncio.to_thread(self.read_all)
        for topic in self.install(state):
            self.on_topic_config(topic, self._topic_configs[topic])
            log.info("topic %s: config reloaded after a new ZooKeeper session", topic)
        log.info("cached ZooKeeper state reloaded: %d topic configs, %d users, %d ACL resources",
                 len(state.topic_overrides), len(state.users), len(state.acls))

    # ------------------------------------------------------------ (c) watches

    def start_watches(self, loop: asyncio.AbstractEventLoop) -> None:
        from zk.data import AclChangesZNode, ConfigChangesZNode

        self._loop = loop
        self.zk.watch_children(ConfigChangesZNode.PATH, self._on_config_changes_watch, ensure=False)
        self.zk.watch_children(AclChangesZNode.PATH, self._on_acl_changes_watch, ensure=False)

    def _spawn_on_loop(self, coro_fn: Callable[[], object]) -> None:
        loop = self._loop
        if loop is None:
            return

        def spawn() -> None:
            task: asyncio.Task[None] = loop.create_task(coro_fn())  # type: ignore[arg-type]
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        loop.call_soon_threadsafe(spawn)

    def _on_config_changes_watch(self, children: list[str]) -> None:
        self._spawn_on_loop(lambda: self._reload_configs(children))

    async def _reload_configs(self, children: list[str]) -> None:
        for child in sorted(set(children) - self._seen_config_changes):
            self._seen_config_changes.add(child)
            try:
                kind, name = await asyncio.to_thread(self.zk.get_config_change, child)
                if kind == "users":
                    text = (await asyncio.to_thread(self.zk.get_user_config, name)).get(MECHANISM)
                    self._set_user(name, text)
                    continue
                overrides = await asyncio.to_thread(self.zk.get_topic_config, name)
            except Exception as e:
                log.debug("config change %s: %s", child, e)
                continue
            new = self._make(name, overrides)
            if self._topic_configs.get(name) != new:
                self._topic_configs[name] = new
                self.on_topic_config(name, new)
                log.info("topic %s: config reloaded", name)

    def _on_acl_changes_watch(self, children: list[str]) -> None:
        self._spawn_on_loop(lambda: self._reload_acls(children))

    async def _reload_acls(self, children: list[str]) -> None:
        if self.gate.authorizer is None:
            return
        for child in sorted(set(children) - self._seen_acl_changes):
            self._seen_acl_changes.add(child)
            try:
                resource_type, name = await asyncio.to_thread(self.zk.get_acl_change, child)
                entries = await asyncio.to_thread(self.zk.get_acls, resource_type, name)
            except Exception as e:
                log.debug("ACL change %s: %s", child, e)
                continue
            resource = Resource(resource_type, name)
            self.gate.authorizer.set_acls(resource, [Acl(*e) for e in entries])
            (self._acl_resources.add if entries else self._acl_resources.discard)(resource)

    async def shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()
