"""Topic and config administration on any broker (Kafka's AdminManager / AdminZkClient).

CreateTopics validates (legal name, partitions, replication factor against the
live brokers, known configs), places replicas per SPEC S1 and writes the
assignment znode the controller watches (S9.4); it then waits, bounded by the
request's timeout, until this broker's metadata shows the topic led.
DeleteTopics writes /admin/delete_topics/[topic] (S9.5) and waits until the
topic has left the metadata.

Every name is checked before it becomes a ZooKeeper path (SPEC S13.3); a topic
listed twice in one request is INVALID_REQUEST; partitions and replication
factor are -1 (the broker default) or at least 1, partitions at most
``max.partitions.per.topic``; topic configs must lie within their bounds and
the broker's segment floors (POLICY_VIOLATION); an assignment whose znode would
exceed ZooKeeper's 1 MiB limit is refused before ZooKeeper refuses it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Final

from broker.log.config import (
    CONFIG_TYPE_IDS,
    TOPIC_CONFIG_NAMES,
    TOPIC_CONFIGS,
    LogConfig,
    check_topic_config_name,
)
from broker.network.request_guard import error_message, judge_names, judge_partitions
from broker.security.authorizer import (
    CLUSTER,
    CLUSTER_NAME,
    GROUP,
    TOPIC,
    TRANSACTIONAL_ID,
    WILDCARD,
    Acl,
    AclAuthorizer,
    Resource,
)
from broker.security.gatekeeper import Gatekeeper
from broker.security.principal import LOCAL_CLIENT, RequestContext
from broker.server.broker_config_describe import (  # noqa: F401 - DescribeConfigs of brokers, re-exported
    SENSITIVE_BROKER_CONFIGS,
    broker_config_entries,
    is_sensitive_broker_config,
)
from broker.server.config import CONFIG_DEFS, BrokerConfig
from broker.server.metadata_cache import MetadataCache, PartitionInfo
from controller.assignment import assign_replicas, plan_added_partitions, validate_manual_assignment
from proto import errors
from proto import minikafka_pb2 as pb
from proto.names import ILLEGAL_GROUP_CHARS, validate_group_id, validate_topic_name
from proto.scram import MAX_ITERATIONS, MECHANISM, MIN_ITERATIONS, credential_from_salted
from zk.client import KafkaZkClient
from zk.data import (
    MAX_ZNODE_BYTES,
    ConfigTopicZNode,
    DeleteTopicsZNode,
    ReplicaAssignment,
    TopicZNode,
)

E = pb.ErrorCode
# The filter pattern types a LITERAL binding may match.
_LITERAL_MATCHING: Final = frozenset({pb.AclPatternType.PATTERN_UNSPECIFIED, pb.AclPatternType.PATTERN_ANY,
                                      pb.AclPatternType.PATTERN_MATCH, pb.AclPatternType.PATTERN_LITERAL})
UncleanElection = Callable[[list[tuple[str, int]]],
                           "concurrent.futures.Future[dict[tuple[str, int], tuple[int, str]]]"]
# The controller's AlterPartitionReassignments: partition -> target (None: cancel) in, (code, message) out.
Reassign = Callable[[dict[tuple[str, int], list[int] | None]],
                    "concurrent.futures.Future[dict[tuple[str, int], tuple[int, str]]]"]


class AdminManager:
    def __init__(self, config: BrokerConfig, zk: KafkaZkClient, metadata: MetadataCache,
                 topic_config: Callable[[str], LogConfig], gate: Gatekeeper | None = None,
                 unclean_election: UncleanElection | None = None) -> None:
        self.config = config
        # The controller's unclean election of leaderless partitions: partition -> (code, message).
        self.unclean_election = unclean_election
        # The controller's preferred elections (ElectLeaders PREFERRED), wired like ``unclean_election``.
        self.preferred_election: UncleanElection | None = None
        # The controller's reassignments (KIP-455), wired by KafkaServer like ``unclean_election``.
        self.reassign: Reassign | None = None
        self.zk = zk
        self.metadata = metadata
        self.topic_config = topic_config
        self.gate = gate or Gatekeeper(config)
        self._acl_lock = asyncio.Lock()
        self._pid_block: tuple[int, int] | None = None
        self._next_pid = 0
        self._pid_lock = asyncio.Lock()

    async def create_topics(self, req: pb.CreateTopicsRequest,
                            ctx: RequestContext = LOCAL_CLIENT) -> pb.CreateTopicsResponse:
        resp = pb.CreateTopicsResponse()
        created: list[str] = []
        verdicts = judge_names([t.name for t in req.topics], self.config.max_request_partitions)
        may_create_any = self.gate.cluster_allowed(ctx, "Create")
        for t, verdict in zip(req.topics, verdicts, strict=True):
            r = resp.topics.add(name=t.name, num_partitions=-1, replication_factor=-1)
            if verdict == E.NONE and not (may_create_any or self.gate.allowed(ctx, "Create", TOPIC, t.name)):
                verdict = E.TOPIC_AUTHORIZATION_FAILED
            if verdict != E.NONE:
                r.error_code, r.error_message = verdict, error_message(verdict)
                continue
            try:
                assignment = await self._plan_topic(t)
                config = dict(t.configs)
                if not req.validate_only:
                    await asyncio.to_thread(self.zk.create_topic, t.name, assignment, config)
                    created.append(t.name)
                r.num_partitions = len(assignment)
                r.replication_factor = len(next(iter(assignment.values())))
            except errors.KafkaError as e:
                r.error_code = e.wire_code
                r.error_message = e.message
        if created:
            await self._until_metadata_shows(lambda: all(self._is_led(t) for t in created),
                                             min(max(0, req.timeout_ms), self.config.request_timeout_ms) / 1000.0)
            for r in resp.topics:
                if r.name in created and not self._is_led(r.name):
                    r.error_code = errors.wire_code(errors.RequestTimedOutError.code)
                    r.error_message = "topic created; its leaders were not elected within the timeout"
        return resp

    async def _until_metadata_shows(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Wait, at most ``timeout_s``, until ``done()`` holds, looking again after each metadata
        update (Kafka's DelayedCreatePartitions, completed by UpdateMetadata): the answer goes as
        soon as the controller's UpdateMetadata shows the new leaders, not at the next poll (a 20 ms
        poll was ~5% of creating a 100-partition topic, issue 29)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            updated: asyncio.Future[None] = loop.create_future()

            def wake(fut: asyncio.Future[None] = updated) -> None:
                if not fut.done():
                    fut.set_result(None)

            self.metadata.listeners.append(wake)
            try:
                await asyncio.wait_for(updated, remaining)
            except TimeoutError:
                pass
            finally:
                self.metadata.listeners.remove(wake)
        return True

    def _is_led(self, topic: str) -> bool:
        parts = self.metadata.partitions.get(topic) or {}
        return bool(parts) and all(p.leader >= 0 for p in parts.values())

    async def _plan_topic(self, t: pb.CreatableTopic) -> dict[int, list[int]]:
        validate_topic_name(t.name)
        if t.configs:
            self.check_topic_configs(dict(t.configs))
        if await asyncio.to_thread(self.zk.topic_exists, t.name):
            raise errors.TopicAlreadyExistsError(f"topic {t.name!r} already exists")
        live = await asyncio.to_thread(self.zk.get_broker_ids)
        if t.assignments:
            if t.num_partitions not in (0, -1) or t.replication_factor not in (0, -1):
                raise errors.InvalidRequestError(
                    "give either an explicit assignment or partitions and replication factor, not both")
            if len(t.assignments) > self.config.max_partitions_per_topic:
                raise errors.InvalidPartitionsError(
                    f"{len(t.assignments)} partitions exceed max.partitions.per.topic="
                    f"{self.config.max_partitions_per_topic}")
            assignment: dict[int, list[int]] = {}
            for a in t.assignments:
                if a.partition in assignment:
                    raise errors.InvalidReplicaAssignmentError(f"partition {a.partition} is assigned twice")
                assignment[a.partition] = list(a.broker_ids)
            validate_manual_assignment(assignment, live)
        else:
            # Kafka's CreateTopics: -1 means the broker default; anything else must be a real count.
            if t.num_partitions == -1:
                partitions = self.config.num_partitions
            elif t.num_partitions < 1:
                raise errors.InvalidPartitionsError(f"number of partitions must be at least 1, got {t.num_partitions}")
            else:
                partitions = t.num_partitions
            if partitions > self.config.max_partitions_per_topic:
                raise errors.InvalidPartitionsError(
                    f"{partitions} partitions exceed max.partitions.per.topic={self.config.max_partitions_per_topic}")
            if t.replication_factor == -1:
                rf = self.config.default_replication_factor
            elif t.replication_factor < 1:
                raise errors.InvalidReplicationFactorError(
                    f"replication factor must be at least 1, got {t.replication_factor}")
            else:
                rf = t.replication_factor
            assignment = assign_replicas(live, partitions, rf)
        size = TopicZNode.encoded_size(assignment)
        if size > MAX_ZNODE_BYTES:
            raise errors.PolicyViolationError(
                f"the assignment of {len(assignment)} partitions is {size} bytes, over ZooKeeper's "
                f"{MAX_ZNODE_BYTES}-byte znode limit")
        return assignment

    def check_topic_configs(self, configs: dict[str, str]) -> None:
        """Known names, values within bounds (INVALID_CONFIG), the broker's floors (POLICY_VIOLATION)."""
        unknown = sorted(set(configs) - set(TOPIC_CONFIG_NAMES))
        if unknown:
            raise errors.InvalidConfigError(f"unknown topic config(s): {', '.join(unknown)}")
        if ConfigTopicZNode.encoded_size(configs) > MAX_ZNODE_BYTES:
            raise errors.PolicyViolationError("topic configs exceed ZooKeeper's znode limit")
        cfg = self.config.default_log_config().with_overrides(configs)
        try:
            cfg.check_policy(self.config.min_segment_bytes, self.config.min_segment_ms)
        except errors.InvalidConfigError as e:
            raise errors.PolicyViolationError(e.message) from None

    async def auto_create(self, topic: str) -> None:
        """auto.create.topics.enable: a metadata request for an unknown topic creates it."""
        try:
            validate_topic_name(topic)
            live = await asyncio.to_thread(self.zk.get_broker_ids)
            rf = min(self.config.default_replication_factor, len(live))
            if rf < 1:
                return
            assignment = assign_replicas(live, self.config.num_partitions, rf)
            await asyncio.to_thread(self.zk.create_topic, topic, assignment, {})
        except errors.KafkaError:
            pass

    async def delete_topics(self, req: pb.DeleteTopicsRequest,
                            ctx: RequestContext = LOCAL_CLIENT) -> pb.DeleteTopicsResponse:
        resp = pb.DeleteTopicsResponse()
        requested: list[str] = []
        verdicts = judge_names(req.topic_names, self.config.max_request_partitions)
        for name, verdict in zip(req.topic_names, verdicts, strict=True):
            r = resp.responses.add(name=name)
            if verdict == E.NONE and not self.gate.allowed(ctx, "Delete", TOPIC, name):
                verdict = E.TOPIC_AUTHORIZATION_FAILED
            if verdict != E.NONE:
                r.error_code, r.error_message = verdict, error_message(verdict)
                continue
            try:
                if not self.config.delete_topic_enable:
                    raise errors.TopicDeletionDisabledError("delete.topic.enable is false on this cluster")
                if not await asyncio.to_thread(self.zk.topic_exists, name):
                    raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
                await asyncio.to_thread(self.zk.request_topic_deletion, name)
                requested.append(name)
            except errors.KafkaError as e:
                r.error_code = e.wire_code
                r.error_message = e.message
        deadline = time.monotonic() + min(max(0, req.timeout_ms), self.config.request_timeout_ms) / 1000.0
        while requested and time.monotonic() < deadline:
            if not await asyncio.to_thread(lambda: any(self.zk.topic_exists(n) for n in requested)):
                break
            await asyncio.sleep(0.05)
        for r in resp.responses:
            if r.name in requested and await asyncio.to_thread(self.zk.topic_exists, r.name):
                r.error_code = errors.wire_code(errors.RequestTimedOutError.code)
                r.error_message = "deletion requested; not finished within the timeout"
        return resp

    # ------------------------------------------------------------ CreatePartitions (Kafka api 37)

    async def create_partitions(self, req: pb.CreatePartitionsRequest,
                                ctx: RequestContext = LOCAL_CLIENT) -> pb.CreatePartitionsResponse:
        """Grow topics (Kafka's AdminManager.createPartitions + AdminZkClient.addPartitions): Alter on
        the topic; the new partitions placed (``plan_added_partitions``) and written into the topic's
        assignment znode, conditional on the version read - the controller sees the znode change
        (PartitionModifications) and starts them; then, bounded by the timeout, until this broker's
        metadata shows every new partition led (Kafka's DelayedCreatePartitions)."""
        resp = pb.CreatePartitionsResponse()
        grown: dict[str, int] = {}
        verdicts = judge_names([t.name for t in req.topics], self.config.max_request_partitions)
        for t, verdict in zip(req.topics, verdicts, strict=True):
            r = resp.results.add(name=t.name)
            if verdict == E.NONE and not self.gate.allowed(ctx, "Alter", TOPIC, t.name):
                verdict = E.TOPIC_AUTHORIZATION_FAILED
            if verdict != E.NONE:
                r.error_code, r.error_message = verdict, error_message(verdict)
                continue
            try:
                count = await self._add_partitions(t, req.validate_only)
                if not req.validate_only:
                    grown[t.name] = count
            except errors.KafkaError as e:
                r.error_code = e.wire_code
                r.error_message = e.message
        if grown:
            def led() -> dict[str, bool]:
                return {n: all((p := self.metadata.partition(n, i)) is not None and p.leader >= 0
                               for i in range(c)) for n, c in grown.items()}

            await self._until_metadata_shows(lambda: all(led().values()),
                                             min(max(0, req.timeout_ms), self.config.request_timeout_ms) / 1000.0)
            done = led()
            for r in resp.results:
                if r.name in grown and not done[r.name]:
                    r.error_code = errors.wire_code(errors.RequestTimedOutError.code)
                    r.error_message = "partitions added; their leaders were not elected within the timeout"
        return resp

    async def _add_partitions(self, t: pb.CreatePartitionsTopic, validate_only: bool) -> int:
        """Validate, place and (unless ``validate_only``) write ``t``'s new partitions; returns the new
        count. A write that lost the race to another one (the znode's version moved) is planned again
        against what is there now - a concurrent CreatePartitions to the same count then fails."""
        validate_topic_name(t.name)
        if await asyncio.to_thread(self.zk.path_exists, DeleteTopicsZNode.path(t.name)):
            raise errors.InvalidTopicError("The topic is queued for deletion.")
        for _attempt in range(5):
            loaded = await asyncio.to_thread(self.zk.get_assignment_with_version, t.name)
            if loaded is None:
                raise errors.UnknownTopicOrPartitionError(f"The topic '{t.name}' does not exist.")
            existing, version = loaded
            live = await asyncio.to_thread(self.zk.get_broker_ids)
            proposed = [list(a.broker_ids) for a in t.assignments] if t.assignments else None
            added = plan_added_partitions(existing, t.count, proposed, live, self.config.max_partitions_per_topic)
            assignment = {**existing, **added}
            size = TopicZNode.encoded_size(assignment)
            if size > MAX_ZNODE_BYTES:
                raise errors.PolicyViolationError(
                    f"the assignment of {len(assignment)} partitions is {size} bytes, over ZooKeeper's "
                    f"{MAX_ZNODE_BYTES}-byte znode limit")
            if validate_only:
                return t.count
            if await asyncio.to_thread(self.zk.set_assignment_if_version, t.name, assignment, version):
                return t.count
        raise errors.UnknownServerError(f"the assignment of {t.name} kept changing; try again")

    # ------------------------------------------------------------ configs

    async def describe_configs(self, req: pb.DescribeConfigsRequest,
                               ctx: RequestContext = LOCAL_CLIENT) -> pb.DescribeConfigsResponse:
        resp = pb.DescribeConfigsResponse()
        for res in req.resources:
            r = resp.results.add(resource_type=res.resource_type, resource_name=res.resource_name)
            try:
                if len(req.resources) > self.config.max_request_partitions:
                    raise errors.InvalidRequestError("too many resources in one request")
                if res.resource_type == pb.ConfigResourceType.TOPIC:
                    validate_topic_name(res.resource_name)
                    if not self.gate.allowed(ctx, "DescribeConfigs", TOPIC, res.resource_name):
                        raise errors.TopicAuthorizationFailedError(f"{ctx.principal} may not describe the configs "
                                                                   f"of {res.resource_name}")
                    if not await asyncio.to_thread(self.zk.topic_exists, res.resource_name):
                        raise errors.UnknownTopicOrPartitionError(f"topic {res.resource_name!r} does not exist")
                    overrides = await asyncio.to_thread(self.zk.get_topic_config, res.resource_name)
                    r.configs.extend(topic_config_entries(self.config, overrides, res.configuration_keys))
                elif res.resource_type == pb.ConfigResourceType.BROKER:
                    if res.resource_name not in ("", str(self.config.broker_id)):
                        raise errors.InvalidRequestError(f"unexpected broker id, expected {self.config.broker_id} "
                                                         f"or empty string, but received {res.resource_name!r}")
                    if not self.gate.cluster_allowed(ctx, "DescribeConfigs"):
                        raise errors.ClusterAuthorizationFailedError(f"{ctx.principal} may not describe broker configs")
                    r.configs.extend(broker_config_entries(self.config, res.resource_name, res.configuration_keys))
                else:
                    raise errors.InvalidRequestError(f"unknown resource type {res.resource_type}")
            except errors.KafkaError as e:
                r.error_code = e.wire_code
                r.error_message = e.message
        return resp

    async def alter_configs(self, req: pb.AlterConfigsRequest,
                            ctx: RequestContext = LOCAL_CLIENT) -> pb.AlterConfigsResponse:
        resp = pb.AlterConfigsResponse()
        for res in req.resources:
            r = resp.responses.add(resource_type=res.resource_type, resource_name=res.resource_name)
            try:
                if len(req.resources) > self.config.max_request_partitions:
                    raise errors.InvalidRequestError("too many resources in one request")
                if res.resource_type != pb.ConfigResourceType.TOPIC:
                    raise errors.InvalidRequestError("only topic configs can be altered")
                topic = res.resource_name
                validate_topic_name(topic)
                if not self.gate.allowed(ctx, "AlterConfigs", TOPIC, topic):
                    raise errors.TopicAuthorizationFailedError(f"{ctx.principal} may not alter the configs of {topic}")
                if not await asyncio.to_thread(self.zk.topic_exists, topic):
                    raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
                current = await asyncio.to_thread(self.zk.get_topic_config, topic)
                for c in res.configs:
                    check_topic_config_name(c.name)  # unknown or refused by name: INVALID_CONFIG
                    if c.op == pb.AlterConfigOp.DELETE:
                        current.pop(c.name, None)
                    elif c.op == pb.AlterConfigOp.SET:
                        current[c.name] = c.value
                    else:
                        raise errors.InvalidRequestError(f"unknown config operation {c.op}")
                self.check_topic_configs(current)
                if not req.validate_only:
                    await asyncio.to_thread(self.zk.set_topic_config, topic, current)
            except errors.KafkaError as e:
                r.error_code = e.wire_code
                r.error_message = e.message
        return resp

    # ------------------------------------------------------------ producer ids

    async def init_producer_id(self, req: pb.InitProducerIdRequest,
                               ctx: RequestContext = LOCAL_CLIENT) -> pb.InitProducerIdResponse:
        # Kafka 2.8 (KIP-679): IdempotentWrite on the cluster, or Write on any topic.
        authorizer = self.gate.authorizer
        if authorizer is not None and ctx.broker_id is None and not self.gate.cluster_allowed(ctx, "IdempotentWrite") \
                and not authorizer.allows_any(ctx.principal, ctx.host, "Write", TOPIC):
            return pb.InitProducerIdResponse(error_code=E.CLUSTER_AUTHORIZATION_FAILED, producer_id=-1,
                                             producer_epoch=-1)
        if req.transactional_id:
            return pb.InitProducerIdResponse(error_code=pb.ErrorCode.UNSUPPORTED_VERSION, producer_id=-1,
                                             producer_epoch=-1)
        pid = await self.next_producer_id()
        return pb.InitProducerIdResponse(error_code=pb.ErrorCode.NONE, producer_id=pid, producer_epoch=0)

    async def next_producer_id(self) -> int:
        """The next id of this broker's block (a new block from ZooKeeper when it is used up): for
        idempotent producers and the transaction coordinator's new transactional ids."""
        async with self._pid_lock:
            if self._pid_block is None or self._next_pid > self._pid_block[1]:
                self._pid_block = await asyncio.to_thread(self.zk.allocate_producer_id_block, self.config.broker_id)
                self._next_pid = self._pid_block[0]
            pid = self._next_pid
            self._next_pid += 1
        return pid


    # ------------------------------------------------------------ elections and reassignments (S9.6)

    def _require_cluster(self, ctx: RequestContext, operation: str) -> None:
        if not self.gate.cluster_allowed(ctx, operation):
            raise errors.ClusterAuthorizationFailedError(f"{ctx.principal} may not {operation} the cluster")

    def _known_partition(self, topic: str, partition: int) -> bool:
        return self.metadata.partition(topic, partition) is not None

    async def elect_leaders(self, req: pb.ElectLeadersRequest,
                            ctx: RequestContext = LOCAL_CLIENT) -> pb.ElectLeadersResponse:
        """Preferred and unclean elections (KIP-460) as Kafka 2.4+ makes them: one controller event
        per request (``preferred_election``, ``unclean_election``), on the controller's broker only
        (NOT_CONTROLLER elsewhere: clients send ElectLeaders to the controller); requests do not wait
        for one another. /admin/preferred_replica_election stays for the legacy tool path."""
        self._require_cluster(ctx, "Alter")
        if req.election_type == pb.ElectionType.UNCLEAN:
            # UNCLEAN: a partition whose leader is live needs none; one without gets any live
            # replica, in the ISR or not (ELIGIBLE_LEADERS_NOT_AVAILABLE when none is live).
            return await self._elect(req, lambda info: info.leader >= 0, self.unclean_election,
                                     (E.ELIGIBLE_LEADERS_NOT_AVAILABLE, "no live replica"))
        # PREFERRED: a partition led by its first replica needs none.
        return await self._elect(req, lambda info: bool(info.replicas) and info.leader == info.replicas[0],
                                 self.preferred_election,
                                 (E.PREFERRED_LEADER_NOT_AVAILABLE, "no answer for the partition"))

    async def _elect(self, req: pb.ElectLeadersRequest, not_needed: Callable[[PartitionInfo], bool],
                     submit: UncleanElection | None, unanswered: tuple[int, str]) -> pb.ElectLeadersResponse:
        """The partitions named (every one when none is: then those needing no election are left
        out, as Kafka's KafkaApis does) judged here, the rest elected by one controller event."""
        resp = pb.ElectLeadersResponse(error_code=E.NONE)
        if req.partitions:
            wanted = [(p.topic_name, p.partition_index) for p in req.partitions]
        else:
            wanted = [(t, p) for t, parts in sorted(self.metadata.partitions.items()) for p in sorted(parts)]
        verdicts = judge_partitions(wanted, self.config.max_request_partitions)
        todo: list[tuple[str, int]] = []
        for (topic, part), verdict in zip(wanted, verdicts, strict=True):
            info = self.metadata.partition(topic, part) if verdict == E.NONE else None
            if verdict == E.NONE and info is None:
                verdict = E.UNKNOWN_TOPIC_OR_PARTITION
            if verdict != E.NONE:
                resp.results.add(topic_name=topic, partition_index=part, error_code=verdict,
                                 error_message=error_message(verdict))
            elif info is not None and not_needed(info):
                if req.partitions:
                    resp.results.add(topic_name=topic, partition_index=part, error_code=E.ELECTION_NOT_NEEDED)
            else:
                todo.append((topic, part))
        if not todo:
            return resp
        outcome = await self._controller_election(submit, todo, req.timeout_ms)
        for tp in todo:
            code, message = outcome.get(tp, unanswered)
            resp.results.add(topic_name=tp[0], partition_index=tp[1], error_code=code, error_message=message)
        return resp

    async def _controller_election(self, submit: UncleanElection | None, todo: list[tuple[str, int]],
                                   timeout_ms: int) -> dict[tuple[str, int], tuple[int, str]]:
        """One election event at the controller, waited for (bounded: a controller that resigns
        meanwhile answers NOT_CONTROLLER, but never wait forever)."""
        if submit is None:
            return {tp: (E.NOT_CONTROLLER, "this broker is not the controller") for tp in todo}
        timeout_s = min(max(timeout_ms, 0) or self.config.request_timeout_ms, self.config.request_timeout_ms) / 1000.0
        try:
            return await asyncio.wait_for(asyncio.wrap_future(submit(todo)), timeout_s)
        except TimeoutError:
            return {tp: (E.REQUEST_TIMED_OUT, "the controller did not answer in time") for tp in todo}


    async def alter_partition_reassignments(self, req: pb.AlterPartitionReassignmentsRequest,
                                            ctx: RequestContext = LOCAL_CLIENT) \
            -> pb.AlterPartitionReassignmentsResponse:
        """KIP-455 as Kafka 2.8 in ZooKeeper mode: the controller takes the request as one event
        (``reassign``) and answers per partition - a target starts a reassignment or replaces the
        running one's target, a cancel (null replicas) reverts a running one to its original
        replicas; other partitions' reassignments keep running. On any other broker than the
        controller's: NOT_CONTROLLER (clients send it to the controller, as Kafka's do)."""
        self._require_cluster(ctx, "Alter")
        resp = pb.AlterPartitionReassignmentsResponse(error_code=E.NONE)
        entries = [(p.topic_name, p.partition_index) for p in req.partitions]
        verdicts = judge_partitions(entries, self.config.max_request_partitions)
        requested: dict[tuple[str, int], list[int] | None] = {}
        refused: dict[tuple[str, int], tuple[int, str]] = {}
        for rp, verdict in zip(req.partitions, verdicts, strict=True):
            tp = (rp.topic_name, rp.partition_index)
            if verdict != E.NONE:
                refused[tp] = (verdict, error_message(verdict))
            else:
                requested[tp] = None if rp.cancel else list(rp.replicas)
        outcome: dict[tuple[str, int], tuple[int, str]] = {}
        if requested:
            if self.reassign is None:
                outcome = {tp: (E.NOT_CONTROLLER, "") for tp in requested}
            else:
                timeout_s = min(max(req.timeout_ms, 0) or self.config.request_timeout_ms,
                                self.config.request_timeout_ms) / 1000.0
                try:  # bounded: a controller that resigns meanwhile answers NOT_CONTROLLER, but never wait forever
                    outcome = await asyncio.wait_for(asyncio.wrap_future(self.reassign(requested)), timeout_s)
                except TimeoutError:
                    outcome = {tp: (E.REQUEST_TIMED_OUT, "the controller did not answer in time") for tp in requested}
            if all(code == E.NOT_CONTROLLER for code, _m in outcome.values()):
                resp.error_code, resp.error_message = E.NOT_CONTROLLER, "this broker is not the controller"
                return resp
        for rp in req.partitions:
            tp = (rp.topic_name, rp.partition_index)
            code, message = refused.get(tp) or outcome.get(tp, (E.UNKNOWN_SERVER_ERROR, "no answer"))
            resp.results.add(topic_name=tp[0], partition_index=tp[1], error_code=code,
                             error_message=message or ("" if code == E.NONE else E.Name(code)))
        return resp

    async def list_partition_reassignments(self, req: pb.ListPartitionReassignmentsRequest,
                                           ctx: RequestContext = LOCAL_CLIENT) -> pb.ListPartitionReassignmentsResponse:
        """The partitions being reassigned, read from their topics' assignment znodes, where the
        controller keeps RS, the adding and the removing replicas (KIP-455); answered by any broker.
        A partition still only named in /admin/reassign_partitions (the controller has not taken it
        yet) is listed with what its target would add and remove."""
        self._require_cluster(ctx, "Describe")
        ongoing = await asyncio.to_thread(self.zk.get_ongoing_reassignments)
        legacy = await asyncio.to_thread(self.zk.get_partition_reassignment) or {}
        resp = pb.ListPartitionReassignmentsResponse(error_code=E.NONE)
        for tpid in sorted(set(ongoing) | set(legacy), key=lambda t: (t.topic, t.partition)):
            moving = ongoing.get(tpid)
            if moving is None:
                info = self.metadata.partition(tpid.topic, tpid.partition)
                if info is None:
                    continue
                moving = ReplicaAssignment(tuple(info.replicas)).reassign_to(legacy[tpid])
                if not moving.being_reassigned:
                    continue
            resp.reassignments.add(topic_name=tpid.topic, partition_index=tpid.partition,
                                   replicas=list(moving.target), current_replicas=list(moving.replicas),
                                   adding_replicas=list(moving.adding), removing_replicas=list(moving.removing))
        return resp

    # ------------------------------------------------------------ ACLs (S12.3)

    def _acl_resource(self, resource_type: int, name: str) -> Resource:
        kind = {pb.AclResourceType.TOPIC_RESOURCE: TOPIC, pb.AclResourceType.GROUP_RESOURCE: GROUP,
                pb.AclResourceType.CLUSTER_RESOURCE: CLUSTER,
                pb.AclResourceType.TRANSACTIONAL_ID_RESOURCE: TRANSACTIONAL_ID}.get(resource_type)  # type: ignore[call-overload]
        if kind is None:
            raise errors.InvalidRequestError(f"unknown ACL resource type {resource_type}")
        if kind == CLUSTER and name != CLUSTER_NAME:
            raise errors.InvalidRequestError(f"the cluster resource is named {CLUSTER_NAME!r}")
        if kind == TOPIC and name != WILDCARD:
            validate_topic_name(name)
        if kind == GROUP and name != WILDCARD:
            validate_group_id(name)
        if kind == TRANSACTIONAL_ID and (not name or len(name) > 249 or "/" in name or name in (".", "..")):
            # It names a znode (/kafka-acl/TransactionalId/[id]): bounded as a topic name is.
            raise errors.InvalidRequestError(f"transactional id {name[:100]!r}: 1-249 characters, no '/'")
        return Resource(kind, name)

    @staticmethod
    def _binding(resource: Resource, acl: Acl) -> pb.AclBinding:
        rtype = {TOPIC: pb.AclResourceType.TOPIC_RESOURCE, GROUP: pb.AclResourceType.GROUP_RESOURCE,
                 CLUSTER: pb.AclResourceType.CLUSTER_RESOURCE,
                 TRANSACTIONAL_ID: pb.AclResourceType.TRANSACTIONAL_ID_RESOURCE}[resource.resource_type]
        return pb.AclBinding(resource_type=rtype, resource_name=resource.name, principal=acl.principal,
                             host=acl.host, operation=acl.operation, permission_type=acl.permission_type)

    def _authorizer_or_raise(self) -> AclAuthorizer:
        if self.gate.authorizer is None:
            raise errors.SecurityDisabledError("no authorizer is configured (authorizer.class.name)")
        return self.gate.authorizer

    async def create_acls(self, req: pb.CreateAclsRequest,
                          ctx: RequestContext = LOCAL_CLIENT) -> pb.CreateAclsResponse:
        authorizer = self._authorizer_or_raise()
        self._require_cluster(ctx, "Alter")
        resp = pb.CreateAclsResponse()
        for b in req.creations:
            try:
                if b.pattern_type not in (pb.AclPatternType.PATTERN_UNSPECIFIED, pb.AclPatternType.PATTERN_LITERAL):
                    raise errors.InvalidRequestError("only LITERAL resource patterns (a name or *) are supported")
                resource = self._acl_resource(b.resource_type, b.resource_name)
                acl = Acl(b.principal, b.host or WILDCARD, b.operation, b.permission_type)
                try:
                    acl.check()
                except ValueError as e:
                    raise errors.InvalidRequestError(str(e)) from None
                async with self._acl_lock:
                    current = {Acl(*e) for e in await asyncio.to_thread(
                        self.zk.get_acls, resource.resource_type, resource.name)}
                    current.add(acl)
                    await asyncio.to_thread(self.zk.set_acls, resource.resource_type, resource.name,
                                            [(a.principal, a.host, a.operation, a.permission_type) for a in current])
                    authorizer.set_acls(resource, current)
                resp.results.add(error_code=E.NONE)
            except errors.KafkaError as e:
                resp.results.add(error_code=e.wire_code, error_message=e.message)
        return resp

    def _filter_matches(self, f: pb.AclFilter, resource: Resource, acl: Acl) -> bool:
        if f.resource_type not in (pb.AclResourceType.ANY_RESOURCE,) and \
                self._binding(resource, acl).resource_type != f.resource_type:
            return False
        if f.pattern_type not in _LITERAL_MATCHING:
            return False  # PREFIXED (every binding here is LITERAL) or an unknown pattern type
        if f.pattern_type == pb.AclPatternType.PATTERN_MATCH and resource.name == WILDCARD:
            name = ""  # MATCH: the bindings that apply to the name, "*"'s too
        else:
            name = f.resource_name
        return all(not want or want == have for want, have in (
            (name, resource.name), (f.principal, acl.principal), (f.host, acl.host),
            (f.operation, acl.operation), (f.permission_type, acl.permission_type)))

    async def describe_acls(self, req: pb.DescribeAclsRequest,
                            ctx: RequestContext = LOCAL_CLIENT) -> pb.DescribeAclsResponse:
        authorizer = self._authorizer_or_raise()
        self._require_cluster(ctx, "Describe")
        resp = pb.DescribeAclsResponse(error_code=E.NONE)
        for resource, acls in sorted(authorizer.acls().items(), key=lambda kv: (kv[0].resource_type, kv[0].name)):
            for acl in sorted(acls, key=lambda a: (a.principal, a.operation, a.permission_type, a.host)):
                if self._filter_matches(req.filter, resource, acl):
                    resp.acls.append(self._binding(resource, acl))
        return resp

    async def delete_acls(self, req: pb.DeleteAclsRequest,
                          ctx: RequestContext = LOCAL_CLIENT) -> pb.DeleteAclsResponse:
        authorizer = self._authorizer_or_raise()
        self._require_cluster(ctx, "Alter")
        resp = pb.DeleteAclsResponse()
        for f in req.filters:
            result = resp.filter_results.add(error_code=E.NONE)
            async with self._acl_lock:
                for resource, acls in list(authorizer.acls().items()):
                    gone = {a for a in acls if self._filter_matches(f, resource, a)}
                    if not gone:
                        continue
                    keep = set(acls) - gone
                    await asyncio.to_thread(self.zk.set_acls, resource.resource_type, resource.name,
                                            [(a.principal, a.host, a.operation, a.permission_type) for a in keep])
                    authorizer.set_acls(resource, keep)
                    result.matching_acls.extend(self._binding(resource, a) for a in sorted(
                        gone, key=lambda a: (a.principal, a.operation)))
        return resp

    # ------------------------------------------------------------ SCRAM users (S12.3)

    async def alter_user_scram_credentials(self, req: pb.AlterUserScramCredentialsRequest,
                                           ctx: RequestContext = LOCAL_CLIENT) -> pb.AlterUserScramCredentialsResponse:
        self._require_cluster(ctx, "Alter")
        resp = pb.AlterUserScramCredentialsResponse()
        # Kafka: a (user, mechanism) altered twice in one request is DUPLICATE_RESOURCE for that
        # user, and none of its alterations is applied.
        pairs = Counter([(d.name, d.mechanism) for d in req.deletions] + [(u.name, u.mechanism) for u in req.upsertions])
        duplicated = list(dict.fromkeys(name for (name, _m), n in pairs.items() if n > 1))
        for name in duplicated:
            resp.results.add(user=name, error_code=E.DUPLICATE_RESOURCE,
                             error_message="A user credential cannot be altered twice in the same request")
        for d in req.deletions:
            if d.name in duplicated:
                continue
            r = resp.results.add(user=d.name, error_code=E.NONE)
            try:
                self._check_user(d.name, d.mechanism)
                config = await asyncio.to_thread(self.zk.get_user_config, d.name)
                if MECHANISM not in config:
                    raise errors.ResourceNotFoundError(f"user {d.name!r} has no {MECHANISM} credential")
                config.pop(MECHANISM)
                await asyncio.to_thread(self.zk.set_user_config, d.name, config)
            except errors.KafkaError as e:
                r.error_code, r.error_message = e.wire_code, e.message
        for u in req.upsertions:
            if u.name in duplicated:
                continue
            r = resp.results.add(user=u.name, error_code=E.NONE)
            try:
                self._check_user(u.name, u.mechanism)
                if not MIN_ITERATIONS <= u.iterations <= MAX_ITERATIONS:
                    raise errors.UnacceptableCredentialError(
                        f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")
                if len(u.salt) < 8 or len(u.salted_password) != 32:
                    raise errors.UnacceptableCredentialError("a salt of at least 8 bytes and a 32-byte salted "
                                                             "password (SHA-256) are required")
                credential = credential_from_salted(u.salt, u.salted_password, u.iterations)
                config = await asyncio.to_thread(self.zk.get_user_config, u.name)
                config[MECHANISM] = credential.encode()
                await asyncio.to_thread(self.zk.set_user_config, u.name, config)
                self.gate.credentials.set(u.name, credential)
            except errors.KafkaError as e:
                r.error_code, r.error_message = e.wire_code, e.message
        return resp

    @staticmethod
    def _check_user(name: str, mechanism: str) -> None:
        if mechanism != MECHANISM:
            raise errors.UnsupportedSaslMechanismError(f"mechanism {mechanism!r}: only {MECHANISM} is served")
        try:
            validate_group_id(name)  # the same rules make a safe ZooKeeper path component
        except errors.InvalidGroupIdError:
            raise errors.UnacceptableCredentialError(f"user name {name!r} is not valid") from None

    async def describe_user_scram_credentials(self, req: pb.DescribeUserScramCredentialsRequest,
                                              ctx: RequestContext = LOCAL_CLIENT) \
            -> pb.DescribeUserScramCredentialsResponse:
        self._require_cluster(ctx, "Describe")
        resp = pb.DescribeUserScramCredentialsResponse(error_code=E.NONE)
        users = list(req.users) or await asyncio.to_thread(self.zk.get_scram_users)
        for name in users:
            text = (await asyncio.to_thread(self.zk.get_user_config, name)).get(MECHANISM) \
                if ILLEGAL_GROUP_CHARS.search(name) is None and name not in ("", ".", "..") else None
            if text is None:
                resp.results.add(user=name, error_code=E.RESOURCE_NOT_FOUND,
                                 error_message=f"user {name!r} has no {MECHANISM} credential")
                continue
            iterations = text.rsplit("iterations=", 1)[-1]
            resp.results.add(user=name, error_code=E.NONE, mechanism=MECHANISM,
                             iterations=int(iterations) if iterations.isdigit() else 0)
        return resp


# ------------------------------------------------------------ issue 34: topic configs as Kafka shows them

# Broker configs Kafka leaves null by default (so they are no DEFAULT_CONFIG synonym of a topic config).
_NULL_DEFAULT_BROKER_CONFIGS: Final = frozenset({"log.roll.ms", "log.retention.ms", "log.retention.minutes",
                                                 "log.flush.interval.ms", "log.roll.jitter.ms"})


def _config_str(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def topic_config_entries(cfg: BrokerConfig, overrides: dict[str, str],
                         keys: Sequence[str] = ()) -> list[pb.ConfigEntry]:
    """DescribeConfigs of a TOPIC resource (Kafka's ConfigHelper.createTopicConfigEntry): every topic
    config of the table (broker.log.config.TOPIC_CONFIGS), its value, synonyms - the topic override
    (DYNAMIC_TOPIC_CONFIG), the broker's log.* synonyms set in its config file (STATIC_BROKER_CONFIG),
    the broker default (DEFAULT_CONFIG) - and the first synonym's source; never read-only nor
    sensitive. ``keys``: only these (empty: all)."""
    base = cfg.default_log_config()
    try:
        effective = base.with_overrides(overrides).to_topic_configs()
    except errors.KafkaError:  # a value stored by an older version: shown as stored
        effective = {**base.to_topic_configs(), **{k: v for k, v in overrides.items() if k in TOPIC_CONFIG_NAMES}}
    defaults = BrokerConfig()
    out = []
    for d in TOPIC_CONFIGS:
        if keys and d.name not in keys:
            continue
        synonyms = []
        if d.name in overrides:
            synonyms.append(pb.ConfigSynonym(name=d.name, value=effective[d.name],
                                             source=pb.ConfigSource.DYNAMIC_TOPIC_CONFIG))
        for s in d.synonyms:
            bdef = CONFIG_DEFS.get(s)
            if bdef is not None and s in cfg.static_keys:
                synonyms.append(pb.ConfigSynonym(name=s, value=_config_str(getattr(cfg, bdef.attr)),
                                                 source=pb.ConfigSource.STATIC_BROKER_CONFIG))
        default_name = next((s for s in d.synonyms if s not in _NULL_DEFAULT_BROKER_CONFIGS), "")
        if default_name:
            bdef = CONFIG_DEFS.get(default_name)
            value = _config_str(getattr(defaults, bdef.attr)) if bdef is not None else d.default
            synonyms.append(pb.ConfigSynonym(name=default_name, value=value, source=pb.ConfigSource.DEFAULT_CONFIG))
        source = synonyms[0].source if synonyms else pb.ConfigSource.DEFAULT_CONFIG
        out.append(pb.ConfigEntry(name=d.name, value=effective[d.name], read_only=False,
                                  is_default=source == pb.ConfigSource.DEFAULT_CONFIG, source=source,
                                  is_sensitive=False, synonyms=synonyms, documentation=d.doc,
                                  config_type=CONFIG_TYPE_IDS[d.type]))
    return out
