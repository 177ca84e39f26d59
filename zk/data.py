"""Every ZooKeeper path and JSON schema, in one place (SPEC S10; Kafka's ZkData.scala).

Theory of operation: each znode kind is a small class with ``path(...)`` and,
where it holds data, ``encode(...)`` / ``decode(bytes)``. Brokers, the
controller and clients read and write ZooKeeper only through these, so the
field names match Kafka 0.8-2.x byte for byte and nothing else spells a path.
Decoders raise ``CorruptZnodeError`` for data that is not what the schema says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, unquote

from proto.errors import KafkaError


class CorruptZnodeError(KafkaError):
    """A znode's data does not follow its schema."""


def _json(data: bytes, path: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise CorruptZnodeError(f"{path}: not JSON: {data[:80]!r}") from None


def _dump(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


# ZooKeeper refuses a znode larger than jute.maxbuffer (0xfffff by default); writers check first, so
# the answer is a typed error instead of a ConnectionLoss (SPEC S13.4).
MAX_ZNODE_BYTES: Final = 0xFFFFF - 1024


# ------------------------------------------------------------------ brokers


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener of a broker, as registered (Kafka's EndPoint)."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    # The inter-broker listener's address: what the controller and followers connect to.
    host: str
    port: int
    timestamp_ms: int
    rack: str | None = None
    # The czxid of the ephemeral znode: the broker epoch (KIP-380), not part of the JSON.
    epoch: int = -1
    # Every listener (an old registration without them has one PLAINTEXT listener at host:port).
    endpoints: tuple[Endpoint, ...] = ()
    inter_broker_listener: str = "PLAINTEXT"
    # The replica fetch listener's port on ``host`` (broker.network.replica_fetch_socket); 0: none, followers
    # fetch over the inter-broker gRPC listener. Kafka has no such key; Kafka's readers ignore it.
    replica_fetch_port: int = 0

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def listeners(self) -> tuple[Endpoint, ...]:
        return self.endpoints or (Endpoint(self.inter_broker_listener, self.host, self.port),)

    def endpoint(self, listener: str) -> Endpoint | None:
        return next((e for e in self.listeners if e.name == listener), None)


class BrokerIdsZNode:
    PATH: Final = "/brokers/ids"


class BrokerIdZNode:
    @staticmethod
    def path(broker_id: int) -> str:
        return f"/brokers/ids/{broker_id}"

    @staticmethod
    def encode(reg: BrokerRegistration) -> bytes:
        return _dump({
            "version": 4,
            "host": reg.host,
            "port": reg.port,
            "jmx_port": -1,
            "timestamp": str(reg.timestamp_ms),
            "endpoints": [f"{e.name}://{e.host}:{e.port}" for e in reg.listeners],
            "listener_security_protocol_map": {e.name: e.security_protocol for e in reg.listeners},
            "inter_broker_listener_name": reg.inter_broker_listener,
            "rack": reg.rack,
            "replica_fetch_port": reg.replica_fetch_port,
        })

    @staticmethod
    def decode(broker_id: int, data: bytes, epoch: int = -1) -> BrokerRegistration:
        path = BrokerIdZNode.path(broker_id)
        obj = _json(data, path)
        try:
            protocols = {str(k): str(v) for k, v in (obj.get("listener_security_protocol_map") or {}).items()}
            endpoints = []
            for text in obj.get("endpoints") or []:
                name, _, address = str(text).partition("://")
                host, _, port = address.rpartition(":")
                endpoints.append(Endpoint(name, host, int(port), protocols.get(name, "PLAINTEXT")))
            replica_fetch_port = int(obj.get("replica_fetch_port") or 0)
            if not 0 <= replica_fetch_port <= 65535:
                raise ValueError(f"replica_fetch_port {replica_fetch_port}")
            return BrokerRegistration(broker_id, str(obj["host"]), int(obj["port"]), int(obj["timestamp"]),
                                      obj.get("rack"), epoch, tuple(endpoints),
                                      str(obj.get("inter_broker_listener_name") or "PLAINTEXT"), replica_fetch_port)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise CorruptZnodeError(f"{path}: bad broker registration {obj!r}") from None


# ------------------------------------------------------------------ topics and partitions


class TopicsZNode:
    PATH: Final = "/brokers/topics"


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """A partition's replica set while it may be moving (Kafka 2.4+'s ReplicaAssignment, KIP-455):
    RS = ``replicas``, AR = ``adding``, RR = ``removing``. The original set is RS - AR and the
    target RS - RR, in RS's order; a reassignment to TRS makes RS = TRS + ORS (TRS first, each
    broker once), as Kafka's ``reassignTo``, so the target keeps its order (its first replica is
    the preferred leader) and ORS comes back in RS's order when it is cancelled."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def origin(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    def reassign_to(self, target: Sequence[int]) -> ReplicaAssignment:
        origin = self.origin
        full = tuple(dict.fromkeys([*target, *origin]))
        return ReplicaAssignment(full, tuple(r for r in full if r not in origin),
                                 tuple(r for r in full if r not in target))


class TopicZNode:
    """/brokers/topics/[topic]: {"version":1,"partitions":{"0":[3,0,1],...}}; while partitions move,
    Kafka 2.4+'s version 2: {"version":2,"partitions":{...},"adding_replicas":{"0":[4]},
    "removing_replicas":{"0":[1]}} (only partitions with some listed). Version 1 is written when
    nothing moves (what every Kafka reader and older tool takes); both are read."""

    @staticmethod
    def path(topic: str) -> str:
        return f"/brokers/topics/{topic}"

    @staticmethod
    def encode(assignment: dict[int, list[int]], adding: Mapping[int, Sequence[int]] | None = None,
               removing: Mapping[int, Sequence[int]] | None = None) -> bytes:
        partitions = {str(p): list(r) for p, r in sorted(assignment.items())}
        moving_in = {str(p): list(r) for p, r in sorted((adding or {}).items()) if r and p in assignment}
        moving_out = {str(p): list(r) for p, r in sorted((removing or {}).items()) if r and p in assignment}
        if not moving_in and not moving_out:
            return _dump({"version": 1, "partitions": partitions})
        return _dump({"version": 2, "partitions": partitions, "adding_replicas": moving_in,
                      "removing_replicas": moving_out})

    @staticmethod
    def encode_full(assignment: Mapping[int, ReplicaAssignment]) -> bytes:
        return TopicZNode.encode({p: list(a.replicas) for p, a in assignment.items()},
                                 {p: a.adding for p, a in assignment.items()},
                                 {p: a.removing for p, a in assignment.items()})

    @staticmethod
    def decode_full(topic: str, data: bytes) -> dict[int, ReplicaAssignment]:
        """Every partition's replicas with what is being added and removed (nothing, for version 1)."""
        path = TopicZNode.path(topic)
        obj = _json(data, path)
        try:
            def lists(key: str) -> dict[int, tuple[int, ...]]:
                return {int(p): tuple(int(b) for b in r) for p, r in (obj.get(key) or {}).items()}

            replicas, adding, removing = lists("partitions"), lists("adding_replicas"), lists("removing_replicas")
            if "partitions" not in obj:
                raise KeyError("partitions")
        except (KeyError, TypeError, ValueError, AttributeError):
            raise CorruptZnodeError(f"{path}: bad assignment {obj!r}") from None
        return {p: ReplicaAssignment(r, adding.get(p, ()), removing.get(p, ())) for p, r in replicas.items()}

    @staticmethod
    def encoded_size(assignment: dict[int, list[int]]) -> int:
        return len(TopicZNode.encode(assignment))

    @staticmethod
    def decode(topic: str, data: bytes) -> dict[int, list[int]]:
        path = TopicZNode.path(topic)
        obj = _json(data, path)
        try:
            return {int(p): [int(b) for b in replicas] for p, replicas in obj["partitions"].items()}
        except (KeyError, TypeError, ValueError, AttributeError):
            raise CorruptZnodeError(f"{path}: bad assignment {obj!r}") from None


class TopicPartitionsZNode:
    @staticmethod
    def path(topic: str) -> str:
        return f"/brokers/topics/{topic}/partitions"


class TopicPartitionZNode:
    @staticmethod
    def path(topic: str, partition: int) -> str:
        return f"/brokers/topics/{topic}/partitions/{partition}"


NO_LEADER: Final = -1


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int = -1

    def new_leader_and_isr(self, leader: int, isr: tuple[int, ...]) -> LeaderAndIsr:
        """A change of leader or ISR: bumps the leader epoch (SPEC S7.1)."""
        return LeaderAndIsr(leader, self.leader_epoch + 1, isr, self.zk_version)

    def with_zk_version(self, zk_version: int) -> LeaderAndIsr:
        return LeaderAndIsr(self.leader, self.leader_epoch, self.isr, zk_version)


@dataclass(frozen=True, slots=True)
class LeaderIsrAndControllerEpoch:
    leader_and_isr: LeaderAndIsr
    controller_epoch: int


class TopicPartitionStateZNode:
    """{"controller_epoch":c,"leader":l,"version":1,"leader_epoch":e,"isr":[...]}"""

    @staticmethod
    def path(topic: str, partition: int) -> str:
        return f"/brokers/topics/{topic}/partitions/{partition}/state"

    @staticmethod
    def encode(state: LeaderIsrAndControllerEpoch) -> bytes:
        lai = state.leader_and_isr
        return _dump({"controller_epoch": state.controller_epoch, "leader": lai.leader, "version": 1,
                      "leader_epoch": lai.leader_epoch, "isr": list(lai.isr)})

    @staticmethod
    def decode(topic: str, partition: int, data: bytes, zk_version: int) -> LeaderIsrAndControllerEpoch:
        path = TopicPartitionStateZNode.path(topic, partition)
        obj = _json(data, path)
        try:
            lai = LeaderAndIsr(int(obj["leader"]), int(obj["leader_epoch"]), tuple(int(b) for b in obj["isr"]),
                               zk_version)
            return LeaderIsrAndControllerEpoch(lai, int(obj["controller_epoch"]))
        except (KeyError, TypeError, ValueError):
            raise CorruptZnodeError(f"{path}: bad partition state {obj!r}") from None


# ------------------------------------------------------------------ controller


class ControllerZNode:
    """/controller (ephemeral): {"version":1,"brokerid":N,"timestamp":"ms"}"""

    PATH: Final = "/controller"

    @staticmethod
    def encode(broker_id: int, timestamp_ms: int) -> bytes:
        return _dump({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)})

    @staticmethod
    def decode(data: bytes) -> int:
        obj = _json(data, ControllerZNode.PATH)
        try:
            return int(obj["brokerid"]) if isinstance(obj, dict) else int(obj)
        except (KeyError, TypeError, ValueError):
            raise CorruptZnodeError(f"/controller: bad data {obj!r}") from None


class ControllerEpochZNode:
    """/controller_epoch: a plain integer."""

    PATH: Final = "/controller_epoch"

    @staticmethod
    def encode(epoch: int) -> bytes:
        return str(epoch).encode()

    @staticmethod
    def decode(data: bytes) -> int:
        try:
            return int(data.decode())
        except (UnicodeDecodeError, ValueError):
            raise CorruptZnodeError(f"/controller_epoch: not an integer: {data!r}") from None


# ------------------------------------------------------------------ admin


class DeleteTopicsZNode:
    PATH: Final = "/admin/delete_topics"

    @staticmethod
    def path(topic: str) -> str:
        return f"/admin/delete_topics/{topic}"


@dataclass(frozen=True, slots=True)
class TopicPartitionId:
    topic: str
    partition: int


class PreferredReplicaElectionZNode:
    """{"version":1,"partitions":[{"topic":"t","partition":0},...]}"""

    PATH: Final = "/admin/preferred_replica_election"

    @staticmethod
    def encode(partitions: list[TopicPartitionId]) -> bytes:
        return _dump({"version": 1, "partitions": [{"topic": p.topic, "partition": p.partition}
                                                   for p in partitions]})

    @staticmethod
    def decode(data: bytes) -> list[TopicPartitionId]:
        obj = _json(data, PreferredReplicaElectionZNode.PATH)
        try:
            return [TopicPartitionId(str(p["topic"]), int(p["partition"])) for p in obj["partitions"]]
        except (KeyError, TypeError, ValueError):
            raise CorruptZnodeError(f"{PreferredReplicaElectionZNode.PATH}: bad data {obj!r}") from None


class ReassignPartitionsZNode:
    """{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3]},...]}"""

    PATH: Final = "/admin/reassign_partitions"

    @staticmethod
    def encode(reassignment: dict[TopicPartitionId, list[int]]) -> bytes:
        return _dump({"version": 1, "partitions": [
            {"topic": tp.topic, "partition": tp.partition, "replicas": list(r)}
            for tp, r in sorted(reassignment.items(), key=lambda kv: (kv[0].topic, kv[0].partition))]})

    @staticmethod
    def decode(data: bytes) -> dict[TopicPartitionId, list[int]]:
        obj = _json(data, ReassignPartitionsZNode.PATH)
        try:
            return {TopicPartitionId(str(p["topic"]), int(p["partition"])): [int(b) for b in p["replicas"]]
                    for p in obj["partitions"]}
        except (KeyError, TypeError, ValueError):
            raise CorruptZnodeError(f"{ReassignPartitionsZNode.PATH}: bad data {obj!r}") from None


class IsrChangeNotificationZNode:
    """Sequential znodes a leader writes after changing an ISR, so the controller
    refreshes metadata: {"version":1,"partitions":[{"topic":..,"partition":..}]}"""

    PATH: Final = "/isr_change_notification"
    PREFIX: Final = "/isr_change_notification/isr_change_"

    encode = PreferredReplicaElectionZNode.encode
    decode = PreferredReplicaElectionZNode.decode


# ------------------------------------------------------------------ configs


class ConfigTopicZNode:
    """/config/topics/[topic]: {"version":1,"config":{"k":"v"}}"""

    PATH: Final = "/config/topics"

    @staticmethod
    def path(topic: str) -> str:
        return f"/config/topics/{topic}"

    @staticmethod
    def encode(config: dict[str, str]) -> bytes:
        return _dump({"version": 1, "config": dict(sorted(config.items()))})

    @staticmethod
    def encoded_size(config: dict[str, str]) -> int:
        return len(ConfigTopicZNode.encode(config))

    @staticmethod
    def decode(topic: str, data: bytes) -> dict[str, str]:
        obj = _json(data, ConfigTopicZNode.path(topic))
        try:
            return {str(k): str(v) for k, v in obj["config"].items()}
        except (KeyError, TypeError, AttributeError):
            raise CorruptZnodeError(f"{ConfigTopicZNode.path(topic)}: bad data {obj!r}") from None


class ConfigChangesZNode:
    """Sequential notifications that a topic's config changed (Kafka's config_change_)."""

    PATH: Final = "/config/changes"
    PREFIX: Final = "/config/changes/config_change_"

    @staticmethod
    def encode(topic: str) -> bytes:
        return _dump({"version": 2, "entity_path": f"topics/{topic}"})

    @staticmethod
    def encode_entity(entity_type: str, name: str) -> bytes:
        return _dump({"version": 2, "entity_path": f"{entity_type}/{name}"})

    @staticmethod
    def decode(data: bytes) -> str:
        return ConfigChangesZNode.decode_entity(data)[1]

    @staticmethod
    def decode_entity(data: bytes) -> tuple[str, str]:
        """(entity type, name): ("topics", "t") or ("users", "alice")."""
        obj = _json(data, ConfigChangesZNode.PATH)
        try:
            entity = str(obj["entity_path"])
        except (KeyError, TypeError):
            raise CorruptZnodeError(f"{ConfigChangesZNode.PATH}: bad data {obj!r}") from None
        kind, sep, name = entity.partition("/")
        return (kind, name) if sep else ("topics", entity)


class ConfigUserZNode:
    """/config/users/[user]: {"version":1,"config":{"SCRAM-SHA-256":"salt=...,stored_key=...,..."}}

    Sensitive: with zookeeper.set.acl only brokers may read it (Kafka's sensitive paths)."""

    PATH: Final = "/config/users"

    @staticmethod
    def path(user: str) -> str:
        return f"/config/users/{user}"

    @staticmethod
    def encode(config: dict[str, str]) -> bytes:
        return _dump({"version": 1, "config": dict(sorted(config.items()))})

    @staticmethod
    def decode(user: str, data: bytes) -> dict[str, str]:
        obj = _json(data, ConfigUserZNode.path(user))
        try:
            return {str(k): str(v) for k, v in obj["config"].items()}
        except (KeyError, TypeError, AttributeError):
            raise CorruptZnodeError(f"{ConfigUserZNode.path(user)}: bad data {obj!r}") from None


# ------------------------------------------------------------------ ACLs (Kafka's AclAuthorizer layout)


class AclZNode:
    """/kafka-acl/[Topic|Group|Cluster]/[name]:
    {"version":1,"acls":[{"principal":"User:a","permissionType":"Allow","operation":"Read","host":"*"}]}"""

    PATH: Final = "/kafka-acl"
    RESOURCE_TYPES: Final = ("Topic", "Group", "Cluster", "TransactionalId")

    @staticmethod
    def path(resource_type: str, name: str) -> str:
        return f"/kafka-acl/{resource_type}/{name}"

    @staticmethod
    def encode(acls: list[tuple[str, str, str, str]]) -> bytes:
        """(principal, host, operation, permission type) entries."""
        return _dump({"version": 1, "acls": [
            {"principal": p, "permissionType": t, "operation": o, "host": h} for p, h, o, t in sorted(acls)]})

    @staticmethod
    def decode(path: str, data: bytes) -> list[tuple[str, str, str, str]]:
        obj = _json(data, path)
        try:
            return [(str(a["principal"]), str(a["host"]), str(a["operation"]), str(a["permissionType"]))
                    for a in obj["acls"]]
        except (KeyError, TypeError):
            raise CorruptZnodeError(f"{path}: bad ACLs {obj!r}") from None


class AclChangesZNode:
    """/kafka-acl-changes/acl_changes_[seq]: "Topic:name" - which resource's ACLs to reload."""

    PATH: Final = "/kafka-acl-changes"
    PREFIX: Final = "/kafka-acl-changes/acl_changes_"

    @staticmethod
    def encode(resource_type: str, name: str) -> bytes:
        return f"{resource_type}:{name}".encode()

    @staticmethod
    def decode(data: bytes) -> tuple[str, str]:
        text = data.decode("utf-8", "replace")
        kind, sep, name = text.partition(":")
        if not sep:
            raise CorruptZnodeError(f"{AclChangesZNode.PATH}: bad change {text!r}")
        return kind, name


# ------------------------------------------------------------------ producer ids and cluster id


class ProducerIdBlockZNode:
    """/latest_producer_id_block: {"version":1,"broker":N,"block_start":"s","block_end":"e"}"""

    PATH: Final = "/latest_producer_id_block"
    BLOCK_SIZE: Final = 1000

    @staticmethod
    def encode(broker_id: int, start: int, end: int) -> bytes:
        return _dump({"version": 1, "broker": broker_id, "block_start": str(start), "block_end": str(end)})

    @staticmethod
    def decode(data: bytes) -> tuple[int, int]:
        obj = _json(data, ProducerIdBlockZNode.PATH)
        try:
            return int(obj["block_start"]), int(obj["block_end"])
        except (KeyError, TypeError, ValueError):
            raise CorruptZnodeError(f"{ProducerIdBlockZNode.PATH}: bad data {obj!r}") from None


class ClusterIdZNode:
    PATH: Final = "/cluster/id"

    @staticmethod
    def encode(cluster_id: str) -> bytes:
        return _dump({"version": "1", "id": cluster_id})

    @staticmethod
    def decode(data: bytes) -> str:
        obj = _json(data, ClusterIdZNode.PATH)
        try:
            return str(obj["id"])
        except (KeyError, TypeError):
            raise CorruptZnodeError(f"{ClusterIdZNode.PATH}: bad data {obj!r}") from None


# ------------------------------------------------------------------ consumer groups (seed design, SPEC S11)


class ConsumersZNode:
    PATH: Final = "/consumers"

    @staticmethod
    def offset(group: str, topic: str, partition: int) -> str:
        return f"/consumers/{group}/offsets/{topic}/{partition}"

    @staticmethod
    def group(group: str) -> str:
        return f"/consumers/{group}"

    @staticmethod
    def offsets(group: str) -> str:
        return f"/consumers/{group}/offsets"

    @staticmethod
    def offsets_topic(group: str, topic: str) -> str:
        return f"/consumers/{group}/offsets/{topic}"

    @staticmethod
    def coordinator(group: str) -> str:
        return f"/consumers/{group}/coordinator"

    @staticmethod
    def encode_offset(offset: int, metadata: str = "", commit_timestamp_ms: int = -1) -> bytes:
        """A plain decimal number when there is no metadata nor commit time (what Kafka's old
        consumer wrote, and every reader of this layout understands); JSON with the commit's
        metadata and, when given, its commit time (``commit_timestamp``, for offsets.retention.minutes;
        readers that predate it ignore the key) otherwise."""
        if not metadata and commit_timestamp_ms < 0:
            return str(offset).encode()
        obj: dict[str, Any] = {"version": 1, "offset": offset, "metadata": metadata}
        if commit_timestamp_ms >= 0:
            obj["commit_timestamp"] = commit_timestamp_ms
        return _dump(obj)

    @staticmethod
    def decode_offset_and_metadata(data: bytes | None) -> tuple[int, str] | None:
        """(offset, metadata) of either form; None if unreadable."""
        found = ConsumersZNode.decode_offset_commit(data)
        return None if found is None else found[:2]

    @staticmethod
    def decode_offset_commit(data: bytes | None) -> tuple[int, str, int] | None:
        """(offset, metadata, commit timestamp) of either form, the timestamp -1 where none was
        stored (the plain form, or JSON written before it was); None if unreadable."""
        raw = bytes(data or b"")
        try:
            if raw.startswith(b"{"):
                obj = json.loads(raw.decode())
                offset, metadata = obj["offset"], obj.get("metadata", "")
                ts = obj.get("commit_timestamp", -1)
                if type(offset) is not int or not isinstance(metadata, str) or type(ts) is not int:
                    return None
                return offset, metadata, ts
            return int(raw.decode()), "", -1
        except (UnicodeDecodeError, ValueError, KeyError, TypeError):
            return None

    @staticmethod
    def decode_offset(data: bytes | None) -> int | None:
        """A committed offset (a decimal number, as Kafka's old consumer wrote it, or the JSON form
        with metadata); None if unreadable."""
        found = ConsumersZNode.decode_offset_and_metadata(data)
        return None if found is None else found[0]


@dataclass(frozen=True, slots=True)
class GroupCoordinatorState:
    """/consumers/[group]/coordinator: who coordinates the group, under which coordinator epoch,
    and the last generation it handed out assignments for (SPEC S11.4).

    The znode's *version* is the fence: a coordinator holds the version it last wrote, and every
    write it makes for the group (offsets, the next generation) is a multi-op conditional on it. A
    broker taking the group over bumps ``coordinator_epoch`` with a conditional write, which moves
    the version and so fences the previous coordinator's every later write. ``generation_id`` lets
    the new coordinator continue the group's generations instead of restarting them at 0."""

    broker_id: int
    coordinator_epoch: int
    generation_id: int = 0
    timestamp_ms: int = 0

    def encode(self) -> bytes:
        return _dump({"version": 1, "broker": self.broker_id, "coordinator_epoch": self.coordinator_epoch,
                      "generation": self.generation_id, "timestamp": str(self.timestamp_ms)})

    @staticmethod
    def decode(data: bytes | None, path: str = "/consumers/[group]/coordinator") -> GroupCoordinatorState:
        obj = _json(bytes(data or b""), path)
        try:
            broker, epoch, generation = obj["broker"], obj["coordinator_epoch"], obj.get("generation", 0)
            ts = int(obj.get("timestamp", "0"))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise CorruptZnodeError(f"{path}: not a coordinator record: {obj!r}") from None
        if not all(type(v) is int for v in (broker, epoch, generation)):
            raise CorruptZnodeError(f"{path}: not a coordinator record: {obj!r}")
        return GroupCoordinatorState(broker, epoch, generation, ts)


@dataclass(frozen=True, slots=True)
class GroupLease:
    """What a coordinator holds for one group: its coordinator epoch and the version of
    /consumers/[group]/coordinator it last wrote (every write of the group is conditional on it)."""

    group_id: str
    broker_id: int
    coordinator_epoch: int
    zk_version: int
    generation_id: int


# ------------------------------------------------------------------ transactions (KIP-98, issue 31)


class TransactionsZNode:
    """/transactions/[transactional id, percent-encoded]: one transactional id's state (Kafka keeps
    it in the __transaction_state topic). The id is any string to Kafka; a znode name may not hold
    '/', be '.' or '..', nor some code points, so the path holds its UTF-8 bytes percent-encoded
    (RFC 3986 unreserved characters stay as they are) - readable for the usual ids."""

    PATH: Final = "/transactions"

    @staticmethod
    def encode_id(transactional_id: str) -> str:
        name = quote(transactional_id, safe="")
        return name.replace(".", "%2E") if name in (".", "..") else name

    @staticmethod
    def decode_id(name: str) -> str:
        return unquote(name, errors="strict")

    @staticmethod
    def path(transactional_id: str) -> str:
        return f"{TransactionsZNode.PATH}/{TransactionsZNode.encode_id(transactional_id)}"


TXN_STATES: Final = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
                      "Dead", "PrepareEpochFence")


@dataclass(frozen=True, slots=True)
class TransactionRecord:
    """The data of /transactions/[id]: Kafka's TransactionMetadata (the __transaction_state value
    schema's fields) plus who coordinates it under which coordinator epoch.

    The znode's *version* is the coordinator's fence, as /consumers/[group]/coordinator's for a
    group: a broker taking the id over rewrites the record with ``coordinator_epoch + 1``
    conditional on the version it read, and every later write of the state is conditional on the
    version it last wrote - so a deposed coordinator's next write fails whole. The coordinator
    epoch goes on its WriteTxnMarkers, which partitions fence by (TRANSACTION_COORDINATOR_FENCED)."""

    broker_id: int
    coordinator_epoch: int
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: str
    partitions: tuple[tuple[str, int], ...] = ()
    groups: tuple[str, ...] = ()
    txn_start_ms: int = -1
    last_update_ms: int = -1

    def encode(self) -> bytes:
        topics: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            topics.setdefault(topic, []).append(partition)
        return _dump({"version": 1, "broker": self.broker_id, "coordinator_epoch": self.coordinator_epoch,
                      "producer_id": self.producer_id, "last_producer_id": self.last_producer_id,
                      "producer_epoch": self.producer_epoch, "last_producer_epoch": self.last_producer_epoch,
                      "transaction_timeout_ms": self.timeout_ms, "state": self.state,
                      "partitions": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
                      "groups": sorted(self.groups), "transaction_start_timestamp": self.txn_start_ms,
                      "transaction_last_update_timestamp": self.last_update_ms})

    @staticmethod
    def decode(data: bytes | None, path: str = "/transactions/[id]") -> TransactionRecord:
        obj = _json(bytes(data or b""), path)
        try:
            ints = [obj[k] for k in ("broker", "coordinator_epoch", "producer_id", "last_producer_id",
                                     "producer_epoch", "last_producer_epoch", "transaction_timeout_ms",
                                     "transaction_start_timestamp", "transaction_last_update_timestamp")]
            state = obj["state"]
            partitions = tuple((e["topic"], p) for e in obj["partitions"] for p in e["partitions"])
            groups = tuple(obj["groups"])
        except (KeyError, TypeError, AttributeError):
            raise CorruptZnodeError(f"{path}: not a transaction record: {obj!r}") from None
        if (not all(type(v) is int for v in ints) or state not in TXN_STATES
                or not all(isinstance(t, str) and type(p) is int for t, p in partitions)
                or not all(isinstance(g, str) for g in groups)):
            raise CorruptZnodeError(f"{path}: not a transaction record: {obj!r}")
        broker, epoch, pid, last_pid, pepoch, last_pepoch, timeout, start, update = ints
        return TransactionRecord(broker, epoch, pid, last_pid, pepoch, last_pepoch, timeout, state,
                                 partitions, groups, start, update)


@dataclass(frozen=True, slots=True)
class TxnLease:
    """What a transaction coordinator holds for one transactional id: its coordinator epoch and the
    version of /transactions/[id] it last wrote (-1: no znode yet - its first write creates it, and
    fails if another coordinator created it first)."""

    transactional_id: str
    broker_id: int
    coordinator_epoch: int
    zk_version: int


@dataclass(frozen=True, slots=True)
class PendingTxnOffsets:
    """The data of /consumers/[group]/txn_offsets/[producer id]: offsets a transaction committed
    for the group (TxnOffsetCommit) that become its committed offsets only when the transaction
    commits (Kafka's ``pendingTransactionalOffsetCommits``). Written by the group's coordinator
    under its lease (the fence of /consumers/[group]/coordinator), with the group's index entry
    ``TxnOffsetsZNode.index`` in the same multi."""

    producer_epoch: int
    offsets: tuple[tuple[str, int, int, str], ...]  # (topic, partition, offset, metadata), sorted
    # (topic, partition, when the TxnOffsetCommit that last set it was accepted): at the commit
    # marker a pending offset replaces a committed one only if it is the later write (Kafka's
    # CommitRecordMetadataAndOffset.olderThan). Optional "commit_timestamp" per entry; absent: -1.
    commit_timestamps: tuple[tuple[str, int, int], ...] = ()

    def encode(self) -> bytes:
        stamps = {(t, p): ts for t, p, ts in self.commit_timestamps}
        return _dump({"version": 1, "producer_epoch": self.producer_epoch, "offsets": [
            {"topic": t, "partition": p, "offset": o, "metadata": m}
            | ({"commit_timestamp": stamps[(t, p)]} if (t, p) in stamps else {})
            for t, p, o, m in self.offsets]})

    @staticmethod
    def decode(data: bytes | None, path: str = "/consumers/[group]/txn_offsets/[id]") -> PendingTxnOffsets:
        obj = _json(bytes(data or b""), path)
        try:
            epoch = obj["producer_epoch"]
            offsets = tuple((e["topic"], e["partition"], e["offset"], e["metadata"]) for e in obj["offsets"])
            stamps = tuple((e["topic"], e["partition"], e["commit_timestamp"]) for e in obj["offsets"]
                           if "commit_timestamp" in e)
        except (KeyError, TypeError, AttributeError):
            raise CorruptZnodeError(f"{path}: not pending transactional offsets: {obj!r}") from None
        if type(epoch) is not int or not all(
                isinstance(t, str) and type(p) is int and type(o) is int and isinstance(m, str)
                for t, p, o, m in offsets) or not all(type(ts) is int for _t, _p, ts in stamps):
            raise CorruptZnodeError(f"{path}: not pending transactional offsets: {obj!r}")
        return PendingTxnOffsets(epoch, tuple(sorted(offsets)), tuple(sorted(stamps)))


class TxnOffsetsZNode:
    """Where transactions' pending group offsets live. Per group and producer id:
    /consumers/[group]/txn_offsets/[producer id] (``PendingTxnOffsets``). And an index, so that a
    transaction marker for (producer id, __consumer_offsets partition P) finds its groups without
    listing every group (Kafka finds them in partition P's log): /txn_offsets/[P]/[producer id]-[group],
    empty, created and deleted in the same multi as the pending znode."""

    INDEX: Final = "/txn_offsets"

    @staticmethod
    def pending_dir(group: str) -> str:
        return f"/consumers/{group}/txn_offsets"

    @staticmethod
    def pending(group: str, producer_id: int) -> str:
        return f"/consumers/{group}/txn_offsets/{producer_id}"

    @staticmethod
    def index_dir(partition: int) -> str:
        return f"{TxnOffsetsZNode.INDEX}/{partition}"

    @staticmethod
    def index(partition: int, producer_id: int, group: str) -> str:
        return f"{TxnOffsetsZNode.INDEX}/{partition}/{producer_id}-{group}"

    @staticmethod
    def parse_index(name: str) -> tuple[int, str] | None:
        pid, sep, group = name.partition("-")
        return (int(pid), group) if sep and pid.isdigit() and group else None

    @staticmethod
    def fence(partition: int, producer_id: int) -> str:
        """The highest producer epoch a transaction marker for ``producer_id`` carried to
        __consumer_offsets ``partition`` (a decimal number; -1: none yet). Kafka fences a late
        TxnOffsetCommit of a fenced producer with that partition's producer state (the marker's epoch
        is in its log); here a TxnOffsetCommit of an older epoch is refused against this znode, and
        its pending offsets are written in a multi that checks the znode's version, so a marker
        written meanwhile either fences the commit or finds its pending offsets in the index."""
        return f"{TxnOffsetsZNode.fences_dir(partition)}/{producer_id}"

    @staticmethod
    def fences_dir(partition: int) -> str:
        return f"{TxnOffsetsZNode.INDEX}/{partition}/fences"  # not an index entry: parse_index skips it


# Paths the cluster needs before anything runs (Kafka's ZkData.PersistentZkPaths).
PERSISTENT_PATHS: Final = (
    "/consumers",
    BrokerIdsZNode.PATH,
    TopicsZNode.PATH,
    "/config/topics",
    ConfigUserZNode.PATH,
    ConfigChangesZNode.PATH,
    DeleteTopicsZNode.PATH,
    "/admin",
    IsrChangeNotificationZNode.PATH,
    "/cluster",
    *(f"{AclZNode.PATH}/{t}" for t in AclZNode.RESOURCE_TYPES),
    AclChangesZNode.PATH,
    TransactionsZNode.PATH,
    TxnOffsetsZNode.INDEX,
)

# With zookeeper.set.acl, what stays writable by everyone (nothing since the group coordinator
# writes the committed offsets: clients no longer touch /consumers), and what only brokers may even
# read (Kafka's sensitive paths: credentials).
OPEN_PATHS: Final[tuple[str, ...]] = ()
SENSITIVE_PATHS: Final = (ConfigUserZNode.PATH,)
