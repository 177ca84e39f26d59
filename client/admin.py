"""AdminClient: topics, configs, cluster, consumer groups, leader election, reassignment.

Every operation goes to the brokers over gRPC, as Kafka's AdminClient does (CreateTopics,
DeleteTopics, DescribeConfigs, AlterConfigs, Metadata, ListOffsets, ElectLeaders, partition
reassignments, ACLs, SCRAM credentials); consumer groups through their coordinator (FindCoordinator,
DescribeGroups, OffsetFetch, OffsetCommit). Nothing needs ZooKeeper: ``zookeeper_connect`` is
accepted for old callers (the tools' ``--zookeeper``) and not used.
"""

from __future__ import annotations

import time
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
    # kafka-consumer-groups' CONSUMER-ID, HOST, CLIENT-ID of the member that owns the partition.
    consumer_id: str | None = None
    host: str | None = None
    client_id: str | None = None


@dataclass(frozen=True)
class GroupMemberDescription:
    """One member as kafka-consumer-groups --describe --members shows it."""
    consumer_id: str
    host: str
    client_id: str
    group_instance_id: str | None
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class GroupStateDescription:
    """A group as kafka-consumer-groups --describe --state shows it."""
    group: str
    coordinator_id: int
    coordinator: str
    assignment_strategy: str
    state: str
    members: int


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

    def create_partitions(self, counts: dict[str, int], assignments: dict[str, list[list[int]]] | None = None,
                          validate_only: bool = False) -> None:
        """CreatePartitions (Kafka's api 37): grow each topic to ``counts[topic]`` partitions, placed by
        the brokers or, per topic in ``assignments``, one replica list per new partition. Raises the
        first topic's error; returns once every new partition has a leader."""
        req = pb.CreatePartitionsRequest(timeout_ms=int(self.timeout_s * 1000), validate_only=validate_only)
        for topic, count in counts.items():
            req.topics.add(name=topic, count=count, assignments=[
                pb.CreatePartitionsAssignment(broker_ids=list(r)) for r in (assignments or {}).get(topic, [])])
        resp = self._any().CreatePartitions(req, timeout=self.timeout_s + 5)
        for r in resp.results:
            raise_for(r.error_code, r.error_message or f"topic {r.name}")

    def delete_records(self, offsets: dict[TopicPartition, int]) -> dict[TopicPartition, int | errors.KafkaError]:
        """DeleteRecords (Kafka's api 21), sent to each partition's leader: every record below the
        given offset (-1: the high watermark) goes. Per partition: its new low watermark, or the
        typed error (leadership moves are retried, as Kafka's AdminClient does)."""
        out: dict[TopicPartition, int | errors.KafkaError] = {}
        todo = dict(offsets)
        for attempt in range(4):
            if attempt:
                self.view.refresh(sorted({tp.topic for tp in todo}))
            by_leader: dict[Any, list[TopicPartition]] = {}
            for tp in todo:
                try:
                    conn, _pl = self.view.leader_connection(tp.topic, tp.partition)
                except errors.KafkaError as e:
                    out[tp] = e
                    continue
                by_leader.setdefault(conn, []).append(tp)
            retry: dict[TopicPartition, int] = {}
            for conn, tps in by_leader.items():
                req = pb.DeleteRecordsRequest(timeout_ms=int(self.timeout_s * 1000))
                for topic in dict.fromkeys(tp.topic for tp in tps):
                    req.topics.add(name=topic, partitions=[pb.DeleteRecordsPartition(partition=tp.partition,
                                                                                     offset=todo[tp])
                                                           for tp in tps if tp.topic == topic])
                try:
                    resp = conn.api.DeleteRecords(req, timeout=self.timeout_s + 5)
                except grpc.RpcError as e:
                    for tp in tps:
                        out[tp] = rpc_error(e, conn.address)
                        retry[tp] = todo[tp]
                    continue
                for tr in resp.topics:
                    for pr in tr.partitions:
                        tp = TopicPartition(tr.name, pr.partition)
                        if pr.error_code == E.NONE:
                            out[tp] = pr.low_watermark
                            continue
                        err = errors.for_code(pr.error_code)(pr.error_message or f"{tp.topic}-{tp.partition}")
                        out[tp] = err
                        if pr.error_code in (E.NOT_LEADER_OR_FOLLOWER, E.LEADER_NOT_AVAILABLE):
                            retry[tp] = todo[tp]
            if not retry:
                break
            todo = retry
        return out

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

    # ------------------------------------------------------------ per-broker views (issue 30)

    def _broker_api(self, broker_id: int) -> Any:
        """The gRPC stub of broker ``broker_id`` (DescribeLogDirs and broker configs are asked of the
        broker they describe, as Kafka's AdminClient does)."""
        if broker_id not in self.view.brokers:
            self.view.refresh([])
        address = self.view.brokers.get(broker_id)
        if address is None:
            raise errors.BrokerNotAvailableError(f"broker {broker_id} is not in the cluster's metadata")
        return self.view.connection(address).api

    def describe_cluster_full(self, include_authorized_operations: bool = False) -> pb.DescribeClusterResponse:
        """DescribeCluster (Kafka's api 60): cluster id, controller, brokers with racks, and the
        cluster operations the caller may perform when asked."""
        resp: pb.DescribeClusterResponse = self._any().DescribeCluster(pb.DescribeClusterRequest(
            include_cluster_authorized_operations=include_authorized_operations), timeout=self.timeout_s)
        raise_for(resp.error_code, resp.error_message)
        return resp

    def describe_log_dirs(self, broker_ids: Sequence[int] | None = None,
                          topics: Sequence[str] | None = None) -> dict[int, pb.DescribeLogDirsResponse]:
        """broker id -> its DescribeLogDirs answer (every partition, or those of ``topics``), for
        ``broker_ids`` or every live broker."""
        if broker_ids is None:
            broker_ids = [b.broker_id for b in self.describe_cluster_full().brokers]
        wanted: list[pb.DescribeLogDirsTopic] = []
        if topics is not None:
            self.view.refresh(list(topics))
            wanted = [pb.DescribeLogDirsTopic(topic=t, partitions=self.view.partitions_of(t)) for t in topics]
        out: dict[int, pb.DescribeLogDirsResponse] = {}
        for b in broker_ids:
            req = pb.DescribeLogDirsRequest(all_partitions=topics is None, topics=wanted)
            resp: pb.DescribeLogDirsResponse = self._broker_api(b).DescribeLogDirs(req, timeout=self.timeout_s)
            raise_for(resp.error_code, f"broker {b}")
            out[b] = resp
        return out

    def describe_config_entries(self, resource_type: pb.ConfigResourceType, name: str,
                                broker_id: int | None = None) -> list[pb.ConfigEntry]:
        """DescribeConfigs of one resource, every entry with its source and sensitivity; a broker's
        resource is asked of ``broker_id`` (the default, "", of any broker)."""
        api = self._any() if broker_id is None else self._broker_api(broker_id)
        resp = api.DescribeConfigs(pb.DescribeConfigsRequest(resources=[pb.DescribeConfigsResource(
            resource_type=resource_type, resource_name=name)]), timeout=self.timeout_s)
        r = resp.results[0]
        raise_for(r.error_code, r.error_message)
        return list(r.configs)

    def list_offsets(self, topic: str, partitions: Sequence[int], timestamp: int) -> dict[int, int]:
        """partition -> offset for ``timestamp`` (-1 latest, -2 earliest, else the first offset at or
        after that time; -1 when there is none), asked of each partition's leader (ListOffsets)."""
        out: dict[int, int] = {}
        for p in partitions:
            conn, _pl = self.view.leader_connection(topic, p)
            r = conn.api.ListOffsets(pb.ListOffsetsRequest(replica_id=-1, topics=[pb.ListOffsetsTopic(
                name=topic, partitions=[pb.ListOffsetsPartition(partition=p, timestamp=timestamp)])]),
                timeout=self.timeout_s).topics[0].partitions[0]
            raise_for(r.error_code, f"{topic}-{p}")
            out[p] = r.offset
        return out

    def describe_producers(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, list[pb.ActiveProducer]]:
        """partition -> its active idempotent producers (DescribeProducers, asked of its leader)."""
        out: dict[TopicPartition, list[pb.ActiveProducer]] = {}
        for tp in partitions:
            conn, _pl = self.view.leader_connection(tp.topic, tp.partition)
            resp = conn.api.DescribeProducers(pb.DescribeProducersRequest(topics=[pb.DescribeProducersTopic(
                name=tp.topic, partitions=[tp.partition])]), timeout=self.timeout_s)
            r = resp.topics[0].partitions[0]
            raise_for(r.error_code, r.error_message or f"{tp.topic}-{tp.partition}")
            out[tp] = list(r.active_producers)
        return out

    def elect_preferred_leaders(self, partitions: Sequence[TopicPartition],
                                timeout_ms: int = 30000) -> dict[TopicPartition, str]:
        """Preferred replica election (ElectLeaders, Alter on the cluster), sent to the controller as
        Kafka's AdminClient sends it (asked again while answers say NOT_CONTROLLER: it may have moved);
        partition -> "NONE", "ELECTION_NOT_NEEDED" or the error name."""
        req = pb.ElectLeadersRequest(timeout_ms=timeout_ms, partitions=[
            pb.TopicPartitionRef(topic_name=t, partition_index=p) for t, p in partitions])
        deadline = time.monotonic() + timeout_ms / 1000.0
        while True:
            resp = self._controller().ElectLeaders(req, timeout=timeout_ms / 1000.0 + 5)
            moved = resp.error_code == pb.ErrorCode.NOT_CONTROLLER or (
                resp.results and all(r.error_code == pb.ErrorCode.NOT_CONTROLLER for r in resp.results))
            if not moved or time.monotonic() > deadline:
                break
            time.sleep(0.2)
            self.view.refresh([])
        raise_for(resp.error_code, resp.error_message)
        return {TopicPartition(r.topic_name, r.partition_index): pb.ErrorCode.Name(r.error_code) for r in resp.results}

    def reassign_partitions(self, reassignment: dict[TopicPartition, list[int]]) -> None:
        """Start (or re-target) reassignments (AlterPartitionReassignments, Alter on the cluster),
        beside any running; raises the first partition's error (the others were still taken, as
        Kafka takes each partition on its own - see ``alter_partition_reassignments``)."""
        for (t, p), (code, message) in sorted(self.alter_partition_reassignments(
                {(tp[0], tp[1]): list(r) for tp, r in reassignment.items()}).items()):
            raise_for(code, f"{t}-{p}: {message}")

    def cancel_partition_reassignments(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, str]:
        """Cancel running reassignments (KIP-455's null target): each partition goes back to its
        original replicas; partition -> "NONE" or the error name (NO_REASSIGNMENT_IN_PROGRESS, ...)."""
        results = self.alter_partition_reassignments({(tp[0], tp[1]): None for tp in partitions})
        return {TopicPartition(t, p): pb.ErrorCode.Name(code) for (t, p), (code, _m) in results.items()}

    def alter_partition_reassignments(self, reassignment: dict[tuple[str, int], list[int] | None]) \
            -> dict[tuple[str, int], tuple[int, str]]:
        """AlterPartitionReassignments as Kafka's AdminClient sends it: to the controller (asked
        again on NOT_CONTROLLER, the controller may have moved); a target per partition, None to
        cancel. partition -> (error code, message)."""
        req = pb.AlterPartitionReassignmentsRequest(timeout_ms=int(self.timeout_s * 1000), partitions=[
            pb.ReassignablePartition(topic_name=t, partition_index=p, replicas=r or [], cancel=r is None)
            for (t, p), r in sorted(reassignment.items())])
        deadline = time.monotonic() + self.timeout_s
        while True:
            resp = self._controller().AlterPartitionReassignments(req, timeout=self.timeout_s + 5)
            if resp.error_code != pb.ErrorCode.NOT_CONTROLLER or time.monotonic() > deadline:
                break
            time.sleep(0.2)
            self.view.refresh([])
        raise_for(resp.error_code, resp.error_message)
        return {(r.topic_name, r.partition_index): (r.error_code, r.error_message) for r in resp.results}

    def list_partition_reassignments(self) -> dict[TopicPartition, pb.ReassignablePartition]:
        """The partitions being reassigned: ``current_replicas`` (RS), ``replicas`` (the target),
        ``adding_replicas`` and ``removing_replicas`` (ListPartitionReassignments)."""
        resp = self._any().ListPartitionReassignments(pb.ListPartitionReassignmentsRequest(), timeout=self.timeout_s)
        raise_for(resp.error_code, resp.error_message)
        return {TopicPartition(r.topic_name, r.partition_index): r for r in resp.reassignments}

    def reassignment_in_progress(self) -> bool:
        return bool(self.list_partition_reassignments())

    def _controller(self) -> Any:
        """The controller's broker (from the metadata), or any broker when none is known."""
        self.view.refresh([])
        address = self.view.brokers.get(self.view.controller_id)
        return self.view.connection(address).api if address is not None else self._any()

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
        owning: dict[tuple[str, int], Any] = {}
        for m in desc.members:
            try:
                assigned = decode_assignment(m.member_assignment)
            except errors.KafkaError:
                continue
            for topic, parts in assigned.items():
                for p in parts:
                    owners[(topic, p)] = m.client_id or m.member_id
                    owning[(topic, p)] = m
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
                who = owning.get((topic, p))
                out.append(GroupPartition(topic, p, current, leo, lag, owners.get((topic, p)),
                                          who.member_id if who is not None else None,
                                          who.client_host if who is not None else None,
                                          who.client_id if who is not None else None))
        return out

    def describe_group_members(self, group: str) -> list[GroupMemberDescription]:
        """kafka-consumer-groups --describe --members: each member and the partitions it owns."""
        out = []
        for m in self._member(group).describe().members:
            try:
                assigned = decode_assignment(m.member_assignment)
            except errors.KafkaError:
                assigned = {}
            out.append(GroupMemberDescription(m.member_id, m.client_host, m.client_id, m.group_instance_id or None,
                                              tuple(TopicPartition(t, p) for t, ps in sorted(assigned.items())
                                                    for p in sorted(ps))))
        return sorted(out, key=lambda d: d.consumer_id)

    def describe_group_state(self, group: str) -> GroupStateDescription:
        """kafka-consumer-groups --describe --state: coordinator, assignment strategy, state, members."""
        member = self._member(group)
        desc = member.describe()
        address = member.coordinator().address
        self.view.refresh([])
        coordinator_id = next((b for b, a in self.view.brokers.items() if a == address), -1)
        return GroupStateDescription(group, coordinator_id, address, desc.protocol_data, desc.group_state,
                                     len(desc.members))

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
        """to: earliest | latest | offset | timestamp | shift (the committed offset, or the latest
        without one, moved by ``value``; kafka-consumer-groups' --shift-by), clamped into each
        partition's range. A dry run unless ``execute``; refused while the group has live members
        (as kafka-consumer-groups does; the coordinator refuses too)."""
        member = self._member(group)
        if execute and member.describe().members:
            raise errors.InvalidRequestError(f"group {group!r} has active members; stop them first")
        self.view.refresh([topic])
        parts = self.view.partitions_of(topic)
        if not parts:
            raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        offsets = self._offsets(topic, parts)
        committed = member.fetch_offsets([(topic, p) for p in parts]) if to == "shift" else {}
        plan: dict[TopicPartition, int] = {}
        for p in parts:
            hw, start = offsets[p]
            if to == "earliest":
                plan[TopicPartition(topic, p)] = start
            elif to == "latest":
                plan[TopicPartition(topic, p)] = hw
            elif to == "offset" and value is not None:
                plan[TopicPartition(topic, p)] = min(max(value, start), hw)
            elif to == "shift" and value is not None:
                plan[TopicPartition(topic, p)] = min(max(committed.get((topic, p), hw) + value, start), hw)
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
