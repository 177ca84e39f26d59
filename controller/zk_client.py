"""Typed ZooKeeper access for brokers and the controller (Kafka's KafkaZkClient), over kazoo.

Every call is blocking (kazoo's synchronous API); callers on an asyncio loop
run them with ``asyncio.to_thread``. Paths and schemas come only from
``proto.zk_data``. Partition state writes are conditional on the znode
version: ``update_partition_state`` returns None when someone else wrote
first, which is how a deposed controller or leader learns it is stale.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.protocol.states import ZnodeStat
from kazoo.security import OPEN_ACL_UNSAFE, make_acl, make_digest_acl

from proto.errors import KafkaError, TopicAlreadyExistsError
from proto.zk_data import (
    OPEN_PATHS,
    PERSISTENT_PATHS,
    SENSITIVE_PATHS,
    AclChangesZNode,
    AclZNode,
    BrokerIdsZNode,
    BrokerIdZNode,
    BrokerRegistration,
    ClusterIdZNode,
    ConfigChangesZNode,
    ConfigTopicZNode,
    ConfigUserZNode,
    ControllerEpochZNode,
    ControllerZNode,
    DeleteTopicsZNode,
    IsrChangeNotificationZNode,
    LeaderIsrAndControllerEpoch,
    PreferredReplicaElectionZNode,
    ProducerIdBlockZNode,
    ReassignPartitionsZNode,
    TopicPartitionId,
    TopicPartitionStateZNode,
    TopicsZNode,
    TopicZNode,
)

log = logging.getLogger(__name__)


class BrokerIdInUseError(KafkaError):
    """Another live broker holds this broker.id."""


class ControllerMovedError(KafkaError):
    """Someone else became controller while this one was writing."""


def read_digest(path: str) -> tuple[str, str]:
    """(user, password) from a ``zookeeper.digest.auth.file`` holding ``user:password``."""
    try:
        text = Path(path).read_text().strip()
    except OSError as e:
        raise KafkaError(f"cannot read zookeeper.digest.auth.file {path}: {e.strerror}") from None
    name, sep, password = text.partition(":")
    if not sep or not name or not password:
        raise KafkaError(f"zookeeper.digest.auth.file {path} must hold user:password")
    return name, password


class KafkaZkClient:
    """With ``digest`` (zookeeper.set.acl, SPEC S12.4) the session authenticates with it and every
    znode it creates is readable by all but writable only by that identity (Kafka's
    ``zookeeper.set.acl``); credentials are readable only by it; /consumers stays open."""

    def __init__(self, connect: str, session_timeout_ms: int = 18000, connection_timeout_ms: int | None = None,
                 digest: tuple[str, str] | None = None):
        chroot_hosts = connect
        auth = [("digest", f"{digest[0]}:{digest[1]}")] if digest else None
        self.secure_acl = ([make_acl("world", "anyone", read=True), make_digest_acl(*digest, all=True)]
                           if digest else None)
        self.private_acl = [make_digest_acl(*digest, all=True)] if digest else None
        self.zk = KazooClient(hosts=chroot_hosts, timeout=session_timeout_ms / 1000.0,
                              connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1.0},
                              command_retry={"max_tries": 3, "delay": 0.1, "max_delay": 1.0},
                              auth_data=auth, default_acl=self.secure_acl)
        self.connection_timeout_s = (connection_timeout_ms or session_timeout_ms) / 1000.0

    def _r(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a kazoo call, retrying ConnectionLoss / OperationTimeout (kazoo's KazooRetry)."""
        return self.zk.retry(fn, *args, **kwargs)

    # ------------------------------------------------------------ session

    def start(self) -> None:
        self.zk.start(timeout=self.connection_timeout_s)

    def stop(self) -> None:
        try:
            self.zk.stop()
        finally:
            self.zk.close()

    def add_state_listener(self, listener: Callable[[KazooState], Any]) -> None:
        self.zk.add_listener(listener)

    @property
    def session_id(self) -> int:
        sid = self.zk.client_id
        return int(sid[0]) if sid else -1

    def ensure_persistent_paths(self) -> None:
        for path in PERSISTENT_PATHS:
            acl = (OPEN_ACL_UNSAFE if path in OPEN_PATHS else self.private_acl if path in SENSITIVE_PATHS
                   else self.secure_acl)
            self._r(self.zk.ensure_path, path, acl)

    def get_or_create_cluster_id(self, proposed: str) -> str:
        try:
            self._r(self.zk.create, ClusterIdZNode.PATH, ClusterIdZNode.encode(proposed), makepath=True)
        except NodeExistsError:
            pass
        data, _ = self._r(self.zk.get, ClusterIdZNode.PATH)
        return ClusterIdZNode.decode(data)

    # ------------------------------------------------------------ brokers

    def register_broker(self, reg: BrokerRegistration) -> int:
        """Create the ephemeral /brokers/ids/[id]; returns the broker epoch (its czxid)."""
        path = BrokerIdZNode.path(reg.broker_id)
        try:
            self._r(self.zk.create, path, BrokerIdZNode.encode(reg), ephemeral=True, makepath=True)
        except NodeExistsError:
            _data, stat = self._r(self.zk.get, path)
            if stat.ephemeralOwner != self.session_id:
                raise BrokerIdInUseError(
                    f"broker.id {reg.broker_id} is registered by another live broker (session "
                    f"0x{stat.ephemeralOwner:x}); pick another id or stop that broker") from None
        _data, stat = self._r(self.zk.get, path)
        return int(stat.czxid)

    def get_broker_ids(self, watch: Callable[..., Any] | None = None) -> list[int]:
        return sorted(int(c) for c in self._r(self.zk.get_children, BrokerIdsZNode.PATH, watch=watch) if c.isdigit())

    def get_broker(self, broker_id: int) -> BrokerRegistration | None:
        try:
            data, stat = self._r(self.zk.get, BrokerIdZNode.path(broker_id))
        except NoNodeError:
            return None
        return BrokerIdZNode.decode(broker_id, data, int(stat.czxid))

    def get_all_brokers(self) -> dict[int, BrokerRegistration]:
        out = {}
        for bid in self.get_broker_ids():
            reg = self.get_broker(bid)
            if reg is not None:
                out[bid] = reg
        return out

    # ------------------------------------------------------------ controller

    def get_controller_id(self) -> int | None:
        try:
            data, _ = self._r(self.zk.get, ControllerZNode.PATH)
        except NoNodeError:
            return None
        return ControllerZNode.decode(data)

    def try_create_controller(self, broker_id: int, now_ms: int) -> bool:
        try:
            self._r(self.zk.create, ControllerZNode.PATH, ControllerZNode.encode(broker_id, now_ms), ephemeral=True)
            return True
        except NodeExistsError:
            return False

    def delete_controller_if_owner(self) -> None:
        try:
            _data, stat = self._r(self.zk.get, ControllerZNode.PATH)
            if stat.ephemeralOwner == self.session_id:
                self._r(self.zk.delete, ControllerZNode.PATH, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass

    def get_controller_epoch(self) -> tuple[int, int] | None:
        """(epoch, zk_version), or None before the first controller."""
        try:
            data, stat = self._r(self.zk.get, ControllerEpochZNode.PATH)
        except NoNodeError:
            return None
        return ControllerEpochZNode.decode(data), int(stat.version)

    def increment_controller_epoch(self) -> tuple[int, int]:
        """Conditional increment (S9.2); raises ControllerMovedError if it lost the race."""
        current = self.get_controller_epoch()
        try:
            if current is None:
                self._r(self.zk.create, ControllerEpochZNode.PATH, ControllerEpochZNode.encode(1))
                return 1, 0
            epoch, version = current
            stat: ZnodeStat = self._r(self.zk.set, ControllerEpochZNode.PATH, ControllerEpochZNode.encode(epoch + 1),
                                          version=version)
            return epoch + 1, int(stat.version)
        except (BadVersionError, NodeExistsError):
            raise ControllerMovedError("controller epoch changed underneath this controller") from None

    # ------------------------------------------------------------ topics

    def get_topics(self, watch: Callable[..., Any] | None = None) -> list[str]:
        return sorted(self._r(self.zk.get_children, TopicsZNode.PATH, watch=watch))

    def get_assignment(self, topic: str) -> dict[int, list[int]] | None:
        try:
            data, _ = self._r(self.zk.get, TopicZNode.path(topic))
        except NoNodeError:
            return None
        return TopicZNode.decode(topic, data)

    def topic_exists(self, topic: str) -> bool:
        return self._r(self.zk.exists, TopicZNode.path(topic)) is not None

    def create_topic(self, topic: str, assignment: dict[int, list[int]], config: dict[str, str]) -> None:
        """Config first, then the assignment the controller watches (S9.4), as Kafka's AdminZkClient."""
        if self.topic_exists(topic) or self._r(self.zk.exists, DeleteTopicsZNode.path(topic)):
            raise TopicAlreadyExistsError(f"topic {topic!r} already exists")
        self.set_topic_config(topic, config, notify=False)
        try:
            self._r(self.zk.create, TopicZNode.path(topic), TopicZNode.encode(assignment), makepath=True)
        except NodeExistsError:
            raise TopicAlreadyExistsError(f"topic {topic!r} already exists") from None

    def delete_topic_znodes(self, topic: str) -> None:
        for path in (TopicZNode.path(topic), ConfigTopicZNode.path(topic), DeleteTopicsZNode.path(topic)):
            try:
                self._r(self.zk.delete, path, recursive=True)
            except NoNodeError:
                pass

    def request_topic_deletion(self, topic: str) -> None:
        try:
            self._r(self.zk.create, DeleteTopicsZNode.path(topic), b"", makepath=True)
        except NodeExistsError:
            pass

    def get_topics_to_delete(self, watch: Callable[..., Any] | None = None) -> list[str]:
        return sorted(self._r(self.zk.get_children, DeleteTopicsZNode.PATH, watch=watch))

    def delete_topic_deletion_request(self, topic: str) -> None:
        try:
            self._r(self.zk.delete, DeleteTopicsZNode.path(topic))
        except NoNodeError:
            pass

    # ------------------------------------------------------------ partition state

    def get_partition_state(self, topic: str, partition: int) -> LeaderIsrAndControllerEpoch | None:
        try:
            data, stat = self._r(self.zk.get, TopicPartitionStateZNode.path(topic, partition))
        except NoNodeError:
            return None
        return TopicPartitionStateZNode.decode(topic, partition, data, int(stat.version))

    def create_partition_state(self, topic: str, partition: int, state: LeaderIsrAndControllerEpoch) -> int | None:
        """Returns the new zk_version, or None if the state znode already exists."""
        try:
            self._r(self.zk.create, TopicPartitionStateZNode.path(topic, partition),
                           TopicPartitionStateZNode.encode(state), makepath=True)
        except NodeExistsError:
            return None
        return 0

    def update_partition_state(self, topic: str, partition: int, state: LeaderIsrAndControllerEpoch,
                               expected_version: int) -> int | None:
        """Conditional on ``expected_version``; None when it was stale (a newer writer won)."""
        try:
            stat = self._r(self.zk.set, TopicPartitionStateZNode.path(topic, partition),
                               TopicPartitionStateZNode.encode(state), version=expected_version)
        except (BadVersionError, NoNodeError):
            return None
        return int(stat.version)

    # ------------------------------------------------------------ configs

    def get_topic_config(self, topic: str) -> dict[str, str]:
        try:
            data, _ = self._r(self.zk.get, ConfigTopicZNode.path(topic))
        except NoNodeError:
            return {}
        return ConfigTopicZNode.decode(topic, data)

    def set_topic_config(self, topic: str, config: dict[str, str], notify: bool = True) -> None:
        path = ConfigTopicZNode.path(topic)
        data = ConfigTopicZNode.encode(config)
        if self._r(self.zk.exists, path):
            self._r(self.zk.set, path, data)
        else:
            self._r(self.zk.create, path, data, makepath=True)
        if notify:
            self._r(self.zk.create, ConfigChangesZNode.PREFIX, ConfigChangesZNode.encode(topic), sequence=True,
                           makepath=True)

    # ------------------------------------------------------------ admin requests

    def get_preferred_replica_election(self) -> list[TopicPartitionId] | None:
        try:
            data, _ = self._r(self.zk.get, PreferredReplicaElectionZNode.PATH)
        except NoNodeError:
            return None
        return PreferredReplicaElectionZNode.decode(data)

    def create_preferred_replica_election(self, partitions: list[TopicPartitionId]) -> bool:
        try:
            self._r(self.zk.create, PreferredReplicaElectionZNode.PATH, PreferredReplicaElectionZNode.encode(partitions),
                           makepath=True)
            return True
        except NodeExistsError:
            return False

    def delete_preferred_replica_election(self) -> None:
        try:
            self._r(self.zk.delete, PreferredReplicaElectionZNode.PATH)
        except NoNodeError:
            pass

    def get_partition_reassignment(self) -> dict[TopicPartitionId, list[int]] | None:
        try:
            data, _ = self._r(self.zk.get, ReassignPartitionsZNode.PATH)
        except NoNodeError:
            return None
        return ReassignPartitionsZNode.decode(data)

    def create_partition_reassignment(self, reassignment: dict[TopicPartitionId, list[int]]) -> bool:
        """Start a reassignment; False when one is in progress already."""
        try:
            self._r(self.zk.create, ReassignPartitionsZNode.PATH, ReassignPartitionsZNode.encode(reassignment),
                    makepath=True)
        except NodeExistsError:
            return False
        return True

    def set_assignment(self, topic: str, assignment: dict[int, list[int]]) -> None:
        self._r(self.zk.set, TopicZNode.path(topic), TopicZNode.encode(assignment))

    def set_partition_reassignment(self, reassignment: dict[TopicPartitionId, list[int]]) -> None:
        """Rewrite /admin/reassign_partitions with what is left; delete it when nothing is."""
        try:
            if reassignment:
                self._r(self.zk.set, ReassignPartitionsZNode.PATH, ReassignPartitionsZNode.encode(reassignment))
            else:
                self._r(self.zk.delete, ReassignPartitionsZNode.PATH)
        except NoNodeError:
            pass

    def create_isr_change_notification(self, partitions: list[TopicPartitionId]) -> None:
        self._r(self.zk.create, IsrChangeNotificationZNode.PREFIX, IsrChangeNotificationZNode.encode(partitions),
                       sequence=True, makepath=True)

    def pop_isr_change_notifications(self, watch: Callable[..., Any] | None = None) -> list[TopicPartitionId]:
        out: list[TopicPartitionId] = []
        for child in sorted(self._r(self.zk.get_children, IsrChangeNotificationZNode.PATH, watch=watch)):
            path = f"{IsrChangeNotificationZNode.PATH}/{child}"
            try:
                data, _ = self._r(self.zk.get, path)
                out.extend(IsrChangeNotificationZNode.decode(data))
                self._r(self.zk.delete, path)
            except (NoNodeError, NotEmptyError):
                continue
        return out

    # ------------------------------------------------------------ security: SCRAM users, ACLs (S12.3)

    def get_scram_users(self) -> list[str]:
        try:
            return sorted(self._r(self.zk.get_children, ConfigUserZNode.PATH))
        except NoNodeError:
            return []

    def get_user_config(self, user: str) -> dict[str, str]:
        try:
            data, _ = self._r(self.zk.get, ConfigUserZNode.path(user))
        except NoNodeError:
            return {}
        return ConfigUserZNode.decode(user, data)

    def set_user_config(self, user: str, config: dict[str, str]) -> None:
        """Write (or, when empty, delete) a user's config, then notify every broker."""
        path = ConfigUserZNode.path(user)
        if config:
            data = ConfigUserZNode.encode(config)
            try:
                self._r(self.zk.set, path, data)
            except NoNodeError:
                self._r(self.zk.create, path, data, acl=self.private_acl, makepath=True)
        else:
            try:
                self._r(self.zk.delete, path)
            except NoNodeError:
                pass
        self._r(self.zk.create, ConfigChangesZNode.PREFIX, ConfigChangesZNode.encode_entity("users", user),
                sequence=True, makepath=True)

    def get_acl_resources(self) -> list[tuple[str, str]]:
        out = []
        for kind in AclZNode.RESOURCE_TYPES:
            try:
                out += [(kind, name) for name in self._r(self.zk.get_children, f"{AclZNode.PATH}/{kind}")]
            except NoNodeError:
                continue
        return sorted(out)

    def get_acls(self, resource_type: str, name: str) -> list[tuple[str, str, str, str]]:
        path = AclZNode.path(resource_type, name)
        try:
            data, _ = self._r(self.zk.get, path)
        except NoNodeError:
            return []
        return AclZNode.decode(path, data)

    def set_acls(self, resource_type: str, name: str, acls: list[tuple[str, str, str, str]]) -> None:
        """Replace a resource's ACLs (deleting the znode when none remain) and notify every broker."""
        path = AclZNode.path(resource_type, name)
        if acls:
            data = AclZNode.encode(acls)
            try:
                self._r(self.zk.set, path, data)
            except NoNodeError:
                self._r(self.zk.create, path, data, makepath=True)
        else:
            try:
                self._r(self.zk.delete, path)
            except NoNodeError:
                pass
        self._r(self.zk.create, AclChangesZNode.PREFIX, AclChangesZNode.encode(resource_type, name), sequence=True,
                makepath=True)

    # ------------------------------------------------------------ producer ids

    def get_latest_producer_id_block(self) -> tuple[int, int] | None:
        """(start, end) of the last producer id block allocated in the cluster, None before the first."""
        try:
            data, _ = self._r(self.zk.get, ProducerIdBlockZNode.PATH)
        except NoNodeError:
            return None
        return ProducerIdBlockZNode.decode(data)

    def allocate_producer_id_block(self, broker_id: int) -> tuple[int, int]:
        """Claim the next block of producer ids with a conditional write (unique across brokers)."""
        size = ProducerIdBlockZNode.BLOCK_SIZE
        while True:
            try:
                data, stat = self._r(self.zk.get, ProducerIdBlockZNode.PATH)
            except NoNodeError:
                try:
                    self._r(self.zk.create, ProducerIdBlockZNode.PATH, ProducerIdBlockZNode.encode(broker_id, 0, size - 1))
                    return 0, size - 1
                except NodeExistsError:
                    continue
            _start, end = ProducerIdBlockZNode.decode(data)
            new_start, new_end = end + 1, end + size
            try:
                self._r(self.zk.set, ProducerIdBlockZNode.PATH, ProducerIdBlockZNode.encode(broker_id, new_start, new_end),
                            version=stat.version)
                return new_start, new_end
            except BadVersionError:
                continue
