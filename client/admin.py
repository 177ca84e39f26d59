"""AdminClient: topics, configs, cluster, consumer groups, leader election, reassignment.

Every operation goes to the brokers over gRPC, as Kafka's AdminClient does (CreateTopics,
DeleteTopics, DescribeConfigs, AlterConfigs, Metadata, ListOffsets, ElectLeaders, partition
reassignments, ACLs, SCRAM credentials); consumer groups through their coordinator (FindCoordinator,
DescribeGroups, OffsetFetch, OffsetCommit). Nothing needs ZooKeeper: ``zookeeper_connect`` is
accepted for old callers (the tools' ``--zookeeper``) and not used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from client.connection import ClusterView, raise_for, rpc_error
from client.discovery import default_bootstrap, default_zookeeper
from client.group_client import GroupMember, decode_assignment
from client.structs import TopicPartition
from proto import errors
from proto import minikafka_pb2 as pb
from proto.scram import MECHANISM, MIN_ITERATIONS, salt_password
from proto.transport import ChannelSecurity, client_security

E = pb.ErrorCode


@dataclass(frozen=True)
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    high_watermark: int
    log_start_offset: int


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: list[PartitionDescription]
    configs: dict[str, str]


@dataclass(frozen=True)
class GroupPartition:
    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int
    lag: int | None
    owner: str | None


class AdminClient:
    def __init__(self, bootstrap_servers: str | Sequence[str] | None = None, zookeeper_connect: str | None = None,
                 request_timeout_ms: int = 30000, *,
                 security_protocol: str = "PLAINTEXT", ssl_cafile: str | None = None,
                 ssl_certfile: str | None = None, ssl_keyfile: str | None = None,
                 sasl_mechanism: str = "SCRAM-SHA-256", sasl_plain_username: str | None = None,
                 sasl_plain_password: str | None = None, security: ChannelSecurity | None = None) -> None:
        self.security = client_security(security, security_protocol=security_protocol, ssl_cafile=ssl_cafile,
                                        ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile,
                                        sasl_mechanism=sasl_mechanism, sasl_plain_username=sasl_plain_username,
                                        sasl_plain_password=sasl_plain_password)
        self.view = ClusterView(default_bootstrap() if bootstrap_servers is None else bootstrap_servers, timeout_s=request_timeout_ms / 1000.0, security=self.security)
        self.timeout_s = request_timeout_ms / 1000.0
        self.zookeeper_connect = zookeeper_connect or default_zookeeper()

    def close(self) -> None:
        self.view.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _any(self) -> Any:
        """Any broker that accepts a connection: the metadata may still list one that just died
        (the controller has not told the others yet), so each is tried in turn, as Kafka's
        AdminClient moves on from a node it cannot reach. None reachable: the first, whose call
        then fails with the typed error of an unreachable broker."""
        if not self.view.brokers:
            self.view.refresh([])
        candidates = list(dict.fromkeys([*self.view.brokers.values(), *self.view.bootstrap]))
        for address in candidates:
            conn = self.view.connection(address)
            try:
                # A Metadata request for no topic: the cheapest call every broker answers. (grpc's
                # channel_ready_future leaves a polling thread that fails once the channel closes.)
                conn.api.Metadata(pb.MetadataRequest(), timeout=min(2.0, self.timeout_s))
            except grpc.RpcError:
                continue
            return conn.api
        return self.view.connection(candidates[0]).api

    # ------------------------------------------------------------ topics

    def create_topics(self, topics: Sequence[NewTopic], validate_only: bool = False) -> None:
        req = pb.CreateTopicsRequest(timeout_ms=int(self.timeout_s * 1000), validate_only=validate_only)
        for t in topics:
            req.topics.add(name=t.name, num_partitions=t.num_partitions, replication_factor=t.replication_factor,
                           configs=t.configs)
        resp = self._any().CreateTopics(req, timeout=self.timeout_s + 5)
        for r in resp.topics:
            raise_for(r.error_code, r.error_message or f"topic {r.name}")

    def delete_topics(self, names: Sequence[str]) -> None:
        resp = self._any().DeleteTopics(pb.DeleteTopicsRequest(topic_names=list(names),
                                                               timeout_ms=int(self.timeout_s * 1000)),
                                        timeout=self.timeout_s + 5)
        for r in resp.responses:
            raise_for(r.error_code, r.error_message or f"topic {r.name}")

    def list_topics(self) -> list[str]:
        resp = self.view.refresh(None)
        return sorted(t.name for t in resp.topics)

    def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]:
        resp = self.view.refresh(list(names) if names else None)
        out = []
        for t in sorted(resp.topics, key=lambda t: t.name):
            if t.error_code not in (E.NONE, E.LEADER_NOT_AVAILABLE) or not t.partitions:
                raise_for(t.error_code or E.UNKNOWN_TOPIC_OR_PARTITION, f"topic {t.name!r}")
            offsets = self._offsets(t.name, [p.partition for p in t.partitions])
            parts = [PartitionDescription(p.partition, p.leader, p.leader_epoch, tuple(p.replicas), tuple(p.isr),
                                          tuple(p.offline_replicas), *offsets.get(p.partition, (-1, -1)))
                     for p in sorted(t.partitions, key=lambda p: p.partition)]
            out.append(TopicDescription(t.name, parts, self.describe_topic_configs(t.name, only_overrides=True)))
        return out

    def _offsets(self, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
        """partition -> (high watermark, log start offset), asked of each leader."""
        out: dict[int, tuple[int, int]] = {}
        for p in partitions:
            try:
                conn, _pl = self.view.leader_connection(topic, p)
                # One partition per request: a partition listed twice is INVALID_REQUEST (as Kafka's).
                latest, earliest = (conn.api.ListOffsets(pb.ListOffsetsRequest(replica_id=-1, topics=[
                    pb.ListOffsetsTopic(name=topic, partitions=[pb.ListOffsetsPartition(partition=p, timestamp=ts)])]),
                    timeout=self.timeout_s).topics[0].partitions[0] for ts in (-1, -2))
                out[p] = (latest.offset, earliest.offset)
            except (errors.KafkaError, Exception):
                out[p] = (-1, -1)
        return out

    def describe_topic_configs(self, topic: str, only_overrides: bool = False) -> dict[str, str]:
        resp = self._any().DescribeConfigs(pb.DescribeConfigsRequest(resources=[pb.DescribeConfigsResource(
            resource_type=pb.ConfigResourceType.TOPIC, resource_name=topic)]), timeout=self.timeout_s)
        r = resp.results[0]
        raise_for(r.error_code, r.error_message)
        return {c.name: c.value for c in r.configs if not (only_overrides and c.is_default)}

    def alter_topic_configs(self, topic: str, set_configs: dict[str, str] | None = None,
                            delete_configs: Sequence[str] = ()) -> None:
        res = pb.AlterConfigsResource(resource_type=pb.ConfigResourceType.TOPIC, resource_name=topic)
        for k, v in (set_configs or {}).items():
            res.configs.add(name=k, value=v, op=pb.AlterConfigOp.SET)
        for k in delete_configs:
            res.configs.add(name=k, op=pb.AlterConfigOp.DELETE)
        resp = self._any().AlterConfigs(pb.AlterConfigsRequest(resources=[res]), timeout=self.timeout_s)
        raise_for(resp.responses[0].error_code, resp.responses[0].error_message)

    def describe_cluster(self) -> dict[str, object]:
        resp = self.view.refresh([])
        return {"cluster_id": resp.cluster_id, "controller": resp.controller_id,
                "controller_epoch": resp.controller_epoch,
                "brokers": [{"id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack or None}
                            for b in sorted(resp.brokers, key=lambda b: b.broker_id)]}

    def elect_preferred_leaders(self, partitions: Sequence[TopicPartition],
                                timeout_ms: int = 30000) -> dict[TopicPartition, str]:
        """Preferred replica election through the broker (ElectLeaders, Alter on the cluster);
        partition -> "NONE", "ELECTION_NOT_NEEDED" or the error name."""
        resp = self._any().ElectLeaders(pb.ElectLeadersRequest(timeout_ms=timeout_ms, partitions=[
            pb.TopicPartitionRef(topic_name=t, partition_index=p) for t, p in partitions]),
            timeout=timeout_ms / 1000.0 + 5)
        raise_for(resp.error_code, resp.error_message)
        return {TopicPartition(r.topic_name, r.partition_index): pb.ErrorCode.Name(r.error_code) for r in resp.results}

    def reassign_partitions(self, reassignment: dict[TopicPartition, list[int]]) -> None:
        """Start a reassignment (AlterPartitionReassignments, Alter on the cluster); refused as a whole
        when any target is not live or names an unknown partition."""
        resp = self._any().AlterPartitionReassignments(pb.AlterPartitionReassignmentsRequest(partitions=[
            pb.ReassignablePartition(topic_name=t, partition_index=p, replicas=r)
            for (t, p), r in sorted(reassignment.items())]), timeout=self.timeout_s)
        for r in resp.results:
            raise_for(r.error_code, f"{r.topic_name}-{r.partition_index}: {r.error_message}")
        raise_for(resp.error_code, resp.error_message)

    def reassignment_in_progress(self) -> bool:
        resp = self._any().ListPartitionReassignments(pb.ListPartitionReassignmentsRequest(), timeout=self.timeout_s)
        raise_for(resp.error_code, resp.error_message)
        return bool(resp.reassignments)

    # ------------------------------------------------------------ ACLs and users (S12.3)

    def create_acls(self, bindings: Sequence[pb.AclBinding]) -> None:
        resp = self._any().CreateAcls(pb.CreateAclsRequest(creations=list(bindings)), timeout=self.timeout_s)
        for r in resp.results:
            raise_for(r.error_code, r.error_message)

    def describe_acls(self, acl_filter: pb.AclFilter | None = None) -> list[pb.AclBinding]:
        resp = self._any().DescribeAcls(pb.DescribeAclsRequest(filter=acl_filter or pb.AclFilter()),
                                        timeout=self.timeout_s)
        raise_for(resp.error_code, resp.error_message)
        return list(resp.acls)

    def delete_acls(self, filters: Sequence[pb.AclFilter]) -> list[pb.AclBinding]:
        resp = self._any().DeleteAcls(pb.DeleteAclsRequest(filters=list(filters)), timeout=self.timeout_s)
        out: list[pb.AclBinding] = []
        for r in resp.filter_results:
            raise_for(r.error_code, r.error_message)
            out.extend(r.matching_acls)
        return out

    def upsert_scram_user(self, name: str, password: str, iterations: int = MIN_ITERATIONS) -> None:
        """Set a user's SCRAM-SHA-256 password; only its salted form leaves this process (KIP-554)."""
        salt, salted = salt_password(password, iterations)
        resp = self._any().AlterUserScramCredentials(pb.AlterUserScramCredentialsRequest(upsertions=[
            pb.ScramCredentialUpsertion(name=name, mechanism=MECHANISM, iterations=iterations, salt=salt,
                                        salted_password=salted)]), timeout=self.timeout_s)
        for r in resp.results:
            raise_for(r.error_code, r.error_message)

    def delete_scram_user(self, name: str) -> None:
        resp = self._any().AlterUserScramCredentials(pb.AlterUserScramCredentialsRequest(deletions=[
            pb.ScramCredentialDeletion(name=name, mechanism=MECHANISM)]), timeout=self.timeout_s)
        for r in resp.results:
            raise_for(r.error_code, r.error_message)

    def describe_scram_users(self, names: Sequence[str] = ()) -> dict[str, int]:
        """user -> SCRAM iterations."""
        resp = self._any().DescribeUserScramCredentials(pb.DescribeUserScramCredentialsRequest(users=list(names)),
                                                        timeout=self.timeout_s)
        raise_for(resp.error_code, resp.error_message)
        out = {}
        for r in resp.results:
            raise_for(r.error_code, r.error_message)
            out[r.user] = r.iterations
        return out

    # ------------------------------------------------------------ consumer groups (the coordinator)

    def _member(self, group: str) -> GroupMember:
        return GroupMember(self.view, group, "admin", 10_000, 10_000, 3000, 0.1, self.timeout_s)

    def list_groups(self) -> list[str]:
        """Every broker lists the groups it coordinates (Kafka's ListGroups); the union."""
        self.view.refresh([])
        groups: set[str] = set()
        for address in sorted(set(self.view.brokers.values())):
            try:
                resp = self.view.connection(address).api.ListGroups(pb.ListGroupsRequest(), timeout=self.timeout_s)
            except grpc.RpcError as e:
                raise rpc_error(e, address) from None
            raise_for(resp.error_code)
            groups.update(g.group_id for g in resp.groups)
        return sorted(groups)

    def describe_group(self, group: str) -> list[GroupPartition]:
        member = self._member(group)
        desc = member.describe()
        committed = member.fetch_offsets(None)
        owners: dict[tuple[str, int], str] = {}
        for m in desc.members:
            try:
                assigned = decode_assignment(m.member_assignment)
            except errors.KafkaError:
                continue
            for topic, parts in assigned.items():
                for p in parts:
                    owners[(topic, p)] = m.client_id or m.member_id
        topics = {t for t, _ in committed} | {t for t, _ in owners}
        if not topics and desc.group_state in ("Dead", "Empty") and not desc.members:
            raise errors.GroupIdNotFoundError(f"group {group!r} does not exist")
        out = []
        for topic in sorted(topics):
            self.view.refresh([topic])
            parts = self.view.partitions_of(topic)
            offsets = self._offsets(topic, parts)
            for p in parts:
                current = committed.get((topic, p))
                leo = offsets.get(p, (-1, -1))[0]
                lag = leo - current if current is not None and leo >= 0 else None
                out.append(GroupPartition(topic, p, current, leo, lag, owners.get((topic, p))))
        return out

    def delete_groups(self, groups: Sequence[str]) -> dict[str, int]:
        """Kafka's deleteConsumerGroups: the error code per group (NONE when deleted; NON_EMPTY_GROUP
        while it has members; GROUP_ID_NOT_FOUND)."""
        return {g: self._member(g).delete() for g in groups}

    def delete_group_offsets(self, group: str, partitions: Sequence[tuple[str, int]]
                             ) -> tuple[int, dict[tuple[str, int], int]]:
        """Kafka's deleteConsumerGroupOffsets (KIP-496): (group error code, code per partition;
        GROUP_SUBSCRIBED_TO_TOPIC for a topic the group's members consume)."""
        return self._member(group).delete_offsets(list(partitions))

    def reset_group_offsets(self, group: str, topic: str, to: str, value: int | None = None,
                            execute: bool = False) -> dict[TopicPartition, int]:
        """to: earliest | latest | offset | timestamp. A dry run unless ``execute``; refused while
        the group has live members (as kafka-consumer-groups does; the coordinator refuses too)."""
        member = self._member(group)
        if execute and member.describe().members:
            raise errors.InvalidRequestError(f"group {group!r} has active members; stop them first")
        self.view.refresh([topic])
        parts = self.view.partitions_of(topic)
        if not parts:
            raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        offsets = self._offsets(topic, parts)
        plan: dict[TopicPartition, int] = {}
        for p in parts:
            hw, start = offsets[p]
            if to == "earliest":
                plan[TopicPartition(topic, p)] = start
            elif to == "latest":
                plan[TopicPartition(topic, p)] = hw
            elif to == "offset" and value is not None:
                plan[TopicPartition(topic, p)] = min(max(value, start), hw)
            elif to == "timestamp" and value is not None:
                conn, _pl = self.view.leader_connection(topic, p)
                r = conn.api.ListOffsets(pb.ListOffsetsRequest(replica_id=-1, topics=[pb.ListOffsetsTopic(
                    name=topic, partitions=[pb.ListOffsetsPartition(partition=p, timestamp=value)])]),
                    timeout=self.timeout_s).topics[0].partitions[0]
                plan[TopicPartition(topic, p)] = r.offset if r.offset >= 0 else hw
            else:
                raise errors.InvalidRequestError(f"unknown reset target {to!r}")
        if execute:
            result = member.commit({(tp.topic, tp.partition): off for tp, off in plan.items()}, as_member=False)
            for code in result.values():
                if code == errors.IllegalGenerationError.code:
                    raise errors.InvalidRequestError(f"group {group!r} has active members; stop them first")
                raise_for(code)
        return plan
