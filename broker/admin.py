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
import time
from collections.abc import Callable

from broker.config import CONFIG_DEFS, BrokerConfig
from broker.log.config import TOPIC_CONFIG_NAMES, LogConfig
from broker.metadata_cache import MetadataCache
from broker.request_guard import error_message, judge_names
from controller.assignment import assign_replicas, validate_manual_assignment
from controller.zk_client import KafkaZkClient
from proto import errors
from proto import minikafka_pb2 as pb
from proto.names import validate_topic_name
from proto.zk_data import MAX_ZNODE_BYTES, ConfigTopicZNode, TopicZNode

E = pb.ErrorCode


class AdminManager:
    def __init__(self, config: BrokerConfig, zk: KafkaZkClient, metadata: MetadataCache,
                 topic_config: Callable[[str], LogConfig]) -> None:
        self.config = config
        self.zk = zk
        self.metadata = metadata
        self.topic_config = topic_config
        self._pid_block: tuple[int, int] | None = None
        self._next_pid = 0
        self._pid_lock = asyncio.Lock()

    async def create_topics(self, req: pb.CreateTopicsRequest) -> pb.CreateTopicsResponse:
        resp = pb.CreateTopicsResponse()
        created: list[str] = []
        verdicts = judge_names([t.name for t in req.topics], self.config.max_request_partitions)
        for t, verdict in zip(req.topics, verdicts, strict=True):
            r = resp.topics.add(name=t.name, num_partitions=-1, replication_factor=-1)
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
            deadline = time.monotonic() + min(max(0, req.timeout_ms), self.config.request_timeout_ms) / 1000.0
            while time.monotonic() < deadline and not all(self._is_led(t) for t in created):
                await asyncio.sleep(0.02)
            for r in resp.topics:
                if r.name in created and not self._is_led(r.name):
                    r.error_code = errors.wire_code(errors.RequestTimedOutError.code)
                    r.error_message = "topic created; its leaders were not elected within the timeout"
        return resp

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

    async def delete_topics(self, req: pb.DeleteTopicsRequest) -> pb.DeleteTopicsResponse:
        resp = pb.DeleteTopicsResponse()
        requested: list[str] = []
        verdicts = judge_names(req.topic_names, self.config.max_request_partitions)
        for name, verdict in zip(req.topic_names, verdicts, strict=True):
            r = resp.responses.add(name=name)
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

    # ------------------------------------------------------------ configs

    async def describe_configs(self, req: pb.DescribeConfigsRequest) -> pb.DescribeConfigsResponse:
        resp = pb.DescribeConfigsResponse()
        for res in req.resources:
            r = resp.results.add(resource_type=res.resource_type, resource_name=res.resource_name)
            try:
                if len(req.resources) > self.config.max_request_partitions:
                    raise errors.InvalidRequestError("too many resources in one request")
                if res.resource_type == pb.ConfigResourceType.TOPIC:
                    validate_topic_name(res.resource_name)
                    if not await asyncio.to_thread(self.zk.topic_exists, res.resource_name):
                        raise errors.UnknownTopicOrPartitionError(f"topic {res.resource_name!r} does not exist")
                    overrides = await asyncio.to_thread(self.zk.get_topic_config, res.resource_name)
                    defaults = self.config.default_log_config().to_topic_configs()
                    for name, value in sorted(defaults.items()):
                        if res.configuration_keys and name not in res.configuration_keys:
                            continue
                        if name in overrides:
                            r.configs.add(name=name, value=overrides[name], source=pb.ConfigSource.DYNAMIC_TOPIC_CONFIG)
                        else:
                            r.configs.add(name=name, value=value, is_default=True,
                                          source=pb.ConfigSource.DEFAULT_CONFIG)
                elif res.resource_type == pb.ConfigResourceType.BROKER:
                    if res.resource_name not in ("", str(self.config.broker_id)):
                        raise errors.InvalidRequestError(f"this is broker {self.config.broker_id}")
                    for name, d in sorted(_broker_config_items(self.config).items()):
                        if res.configuration_keys and name not in res.configuration_keys:
                            continue
                        r.configs.add(name=name, value=d, read_only=True, source=pb.ConfigSource.STATIC_BROKER_CONFIG)
                else:
                    raise errors.InvalidRequestError(f"unknown resource type {res.resource_type}")
            except errors.KafkaError as e:
                r.error_code = e.wire_code
                r.error_message = e.message
        return resp

    async def alter_configs(self, req: pb.AlterConfigsRequest) -> pb.AlterConfigsResponse:
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
                if not await asyncio.to_thread(self.zk.topic_exists, topic):
                    raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
                current = await asyncio.to_thread(self.zk.get_topic_config, topic)
                for c in res.configs:
                    if c.name not in TOPIC_CONFIG_NAMES:
                        raise errors.InvalidConfigError(f"unknown topic config {c.name!r}")
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

    async def init_producer_id(self, req: pb.InitProducerIdRequest) -> pb.InitProducerIdResponse:
        if req.transactional_id:
            return pb.InitProducerIdResponse(error_code=pb.ErrorCode.UNSUPPORTED_VERSION, producer_id=-1,
                                             producer_epoch=-1)
        async with self._pid_lock:
            if self._pid_block is None or self._next_pid > self._pid_block[1]:
                self._pid_block = await asyncio.to_thread(self.zk.allocate_producer_id_block, self.config.broker_id)
                self._next_pid = self._pid_block[0]
            pid = self._next_pid
            self._next_pid += 1
        return pb.InitProducerIdResponse(error_code=pb.ErrorCode.NONE, producer_id=pid, producer_epoch=0)


def _broker_config_items(cfg: BrokerConfig) -> dict[str, str]:
    out = {}
    for name, d in CONFIG_DEFS.items():
        v = getattr(cfg, d.attr)
        out[name] = str(v).lower() if isinstance(v, bool) else str(v)
    return out
