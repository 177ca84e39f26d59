"""Topic and config administration on any broker (Kafka's AdminManager / AdminZkClient).

CreateTopics validates (legal name, partitions, replication factor against the
live brokers, known configs), places replicas per SPEC S1 and writes the
assignment znode the controller watches (S9.4); it then waits, bounded by the
request's timeout, until this broker's metadata shows the topic led.
DeleteTopics writes /admin/delete_topics/[topic] (S9.5) and waits until the
topic has left the metadata.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable

from broker.config import CONFIG_DEFS, BrokerConfig
from broker.log.config import TOPIC_CONFIG_NAMES, LogConfig
from broker.metadata_cache import MetadataCache
from controller.assignment import assign_replicas, validate_manual_assignment
from controller.zk_client import KafkaZkClient
from proto import errors
from proto import minikafka_pb2 as pb

LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_LENGTH = 249


def validate_topic_name(name: str) -> None:
    if not name:
        raise errors.InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise errors.InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_LENGTH:
        raise errors.InvalidTopicError(f"topic name is longer than {MAX_TOPIC_LENGTH} characters")
    if not LEGAL_TOPIC.match(name):
        raise errors.InvalidTopicError(
            f"topic name {name!r} is illegal: only ASCII letters, digits, '.', '_' and '-' are allowed")


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
        for t in req.topics:
            r = resp.topics.add(name=t.name, num_partitions=-1, replication_factor=-1)
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
            deadline = time.monotonic() + max(0, req.timeout_ms) / 1000.0
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
            unknown = sorted(set(t.configs) - set(TOPIC_CONFIG_NAMES))
            if unknown:
                raise errors.InvalidConfigError(f"unknown topic config(s): {', '.join(unknown)}")
            self.config.default_log_config().with_overrides(dict(t.configs))
        if await asyncio.to_thread(self.zk.topic_exists, t.name):
            raise errors.TopicAlreadyExistsError(f"topic {t.name!r} already exists")
        live = await asyncio.to_thread(self.zk.get_broker_ids)
        if t.assignments:
            if t.num_partitions not in (0, -1) or t.replication_factor not in (0, -1):
                raise errors.InvalidRequestError(
                    "give either an explicit assignment or partitions and replication factor, not both")
            assignment = {a.partition: list(a.broker_ids) for a in t.assignments}
            validate_manual_assignment(assignment, live)
            return assignment
        partitions = self.config.num_partitions if t.num_partitions in (0, -1) else t.num_partitions
        rf = self.config.default_replication_factor if t.replication_factor in (0, -1) else t.replication_factor
        return assign_replicas(live, partitions, rf)

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
        for name in req.topic_names:
            r = resp.responses.add(name=name)
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
        deadline = time.monotonic() + max(0, req.timeout_ms) / 1000.0
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
                if res.resource_type == pb.ConfigResourceType.TOPIC:
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
                if res.resource_type != pb.ConfigResourceType.TOPIC:
                    raise errors.InvalidRequestError("only topic configs can be altered")
                topic = res.resource_name
                if not await asyncio.to_thread(self.zk.topic_exists, topic):
                    raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
                current = await asyncio.to_thread(self.zk.get_topic_config, topic)
                for c in res.configs:
                    if c.name not in TOPIC_CONFIG_NAMES:
                        raise errors.InvalidConfigError(f"unknown topic config {c.name!r}")
                    if c.op == pb.AlterConfigOp.DELETE:
                        current.pop(c.name, None)
                    else:
                        current[c.name] = c.value
                self.config.default_log_config().with_overrides(current)
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
