"""The group APIs over gRPC: authorize (Kafka's operations on Group and Topic resources, SPEC
S12.3), validate (S13), convert protobuf <-> the coordinator's Kafka-shaped calls."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

from broker.coordinator.group.group_coordinator import GROUP_OPERATIONS, GroupCoordinator
from broker.coordinator.group.group_state import OffsetAndMetadata
from broker.network.request_guard import judge_partitions
from broker.security.authorizer import GROUP, TOPIC
from broker.security.gatekeeper import Gatekeeper
from broker.security.principal import RequestContext
from proto import errors
from proto import minikafka_pb2 as pb

E = pb.ErrorCode
GROUP_AUTH: Any = errors.wire_code(errors.GroupAuthorizationFailedError.code)
MAX_MEMBERS_PROTOCOLS = 64
MAX_METADATA_BYTES = 1 << 20


def _w(code: int) -> Any:
    return errors.wire_code(code)


ANSWER_SLICE = 2000  # partitions added to an answer between two yields of _every_partition


async def _every_partition(req: pb.OffsetCommitRequest, code: int,
                           slice_size: int = ANSWER_SLICE) -> pb.OffsetCommitResponse:
    """The answer giving every partition of ``req`` (in its order) ``code``, built in slices with
    the loop free between them."""
    resp = pb.OffsetCommitResponse()
    wire = _w(code)
    todo = slice_size
    for t in req.topics:
        rt = resp.topics.add(name=t.name)
        add = rt.partitions.add
        for p in t.partitions:
            add(partition=p.partition, error_code=wire)
            todo -= 1
            if todo <= 0:
                todo = slice_size
                await asyncio.sleep(0)
    return resp


class GroupApis:
    def __init__(self, coordinator: GroupCoordinator, gate: Gatekeeper, endpoint: Any,
                 max_partitions: int, partition_exists: Callable[[str, int], bool]) -> None:
        self.c = coordinator
        # Kafka refuses a commit for a partition its metadata cache does not hold
        # (UNKNOWN_TOPIC_OR_PARTITION, nothing stored): no znode for a name nobody created.
        self.partition_exists = partition_exists
        self.gate = gate
        # endpoint(broker_id, listener) -> pb.BrokerEndpoint | None: the coordinator's address as a
        # client on this listener reaches it.
        self.endpoint = endpoint
        self.max_partitions = max_partitions

    def _group_allowed(self, ctx: RequestContext, api: str, group_id: str) -> bool:
        return self.gate.allowed(ctx, GROUP_OPERATIONS[api], GROUP, group_id)

    async def find_coordinator(self, req: pb.FindCoordinatorRequest,
                               ctx: RequestContext) -> pb.FindCoordinatorResponse:
        if req.key_type != 0:
            return pb.FindCoordinatorResponse(error_code=E.INVALID_REQUEST, node_id=-1)
        if not self._group_allowed(ctx, "FindCoordinator", req.key):
            return pb.FindCoordinatorResponse(error_code=GROUP_AUTH, node_id=-1)
        code, broker = self.c.find_coordinator(req.key)
        if code != 0:
            return pb.FindCoordinatorResponse(error_code=_w(code), node_id=-1)
        ep = self.endpoint(broker, ctx.listener)
        if ep is None:
            return pb.FindCoordinatorResponse(error_code=E.COORDINATOR_NOT_AVAILABLE, node_id=-1)
        return pb.FindCoordinatorResponse(node_id=broker, host=ep.host, port=ep.port)

    async def join_group(self, req: pb.JoinGroupRequest, ctx: RequestContext) -> pb.JoinGroupResponse:
        if not self._group_allowed(ctx, "JoinGroup", req.group_id):
            return pb.JoinGroupResponse(error_code=GROUP_AUTH, generation_id=-1)
        if len(req.protocols) > MAX_MEMBERS_PROTOCOLS or \
                sum(len(p.metadata) for p in req.protocols) > MAX_METADATA_BYTES:
            return pb.JoinGroupResponse(error_code=E.INVALID_REQUEST, generation_id=-1)
        if req.group_instance_id and not valid_group_instance_id(req.group_instance_id):
            # Kafka's rule for group.instance.id (JoinGroupRequest.validateGroupInstanceId): it keys
            # coordinator state and names member ids, so it is bounded like a topic name (SPEC S13.3).
            return pb.JoinGroupResponse(error_code=E.INVALID_REQUEST, generation_id=-1)
        r = await self.c.join_group(req.group_id, req.member_id, req.client_id, ctx.host, req.protocol_type,
                                    [(p.name, p.metadata) for p in req.protocols], req.session_timeout_ms,
                                    req.rebalance_timeout_ms, req.require_known_member_id, req.group_instance_id)
        instance_ids = dict(r.instance_ids)
        return pb.JoinGroupResponse(error_code=_w(r.error_code), generation_id=r.generation_id,
                                    protocol_name=r.protocol_name, leader=r.leader_id, member_id=r.member_id,
                                    members=[pb.JoinGroupMember(member_id=m, metadata=md,
                                                                group_instance_id=instance_ids.get(m, ""))
                                             for m, md in r.members])

    async def sync_group(self, req: pb.SyncGroupRequest, ctx: RequestContext) -> pb.SyncGroupResponse:
        if not self._group_allowed(ctx, "SyncGroup", req.group_id):
            return pb.SyncGroupResponse(error_code=GROUP_AUTH)
        if sum(len(a.assignment) for a in req.assignments) > MAX_METADATA_BYTES * 4:
            return pb.SyncGroupResponse(error_code=E.INVALID_REQUEST)
        r = await self.c.sync_group(req.group_id, req.generation_id, req.member_id,
                                    {a.member_id: a.assignment for a in req.assignments}, req.group_instance_id)
        return pb.SyncGroupResponse(error_code=_w(r.error_code), assignment=r.assignment)

    async def heartbeat(self, req: pb.HeartbeatRequest, ctx: RequestContext) -> pb.HeartbeatResponse:
        if not self._group_allowed(ctx, "Heartbeat", req.group_id):
            return pb.HeartbeatResponse(error_code=GROUP_AUTH)
        return pb.HeartbeatResponse(error_code=_w(await self.c.heartbeat(req.group_id, req.generation_id,
                                                                         req.member_id, req.group_instance_id)))

    async def leave_group(self, req: pb.LeaveGroupRequest, ctx: RequestContext) -> pb.LeaveGroupResponse:
        if not self._group_allowed(ctx, "LeaveGroup", req.group_id):
            return pb.LeaveGroupResponse(error_code=GROUP_AUTH)
        return pb.LeaveGroupResponse(error_code=_w(await self.c.leave_group(req.group_id, req.member_id,
                                                                            req.group_instance_id)))

    async def offset_commit(self, req: pb.OffsetCommitRequest, ctx: RequestContext) -> pb.OffsetCommitResponse:
        count = sum(len(t.partitions) for t in req.topics)
        group_ok = self._group_allowed(ctx, "OffsetCommit", req.group_id)
        if count > self.max_partitions or not group_ok:
            # One code for every partition (what the loop below gives them): the answer built in
            # slices, without judging each partition - a request may list 100,000 (SPEC S15.2).
            return await _every_partition(req, errors.GroupAuthorizationFailedError.code if not group_ok
                                          else E.INVALID_REQUEST)
        entries = [(t.name, p.partition) for t in req.topics for p in t.partitions]
        verdicts = judge_partitions(entries, self.max_partitions)
        wanted: dict[tuple[str, int], OffsetAndMetadata] = {}
        codes: dict[tuple[str, int], int] = {}
        # Up to max.request.partitions (10,000) partitions judged, then answered, with the loop free
        # every ANSWER_SLICE of them (SPEC S15.2).
        i = 0
        for t in req.topics:
            for p in t.partitions:
                tp, verdict = entries[i], verdicts[i]
                i += 1
                if verdict != E.NONE:
                    codes[tp] = verdict
                elif not self.gate.allowed(ctx, "Read", TOPIC, tp[0]):
                    codes[tp] = errors.TopicAuthorizationFailedError.code
                elif not self.partition_exists(*tp):
                    codes[tp] = errors.UnknownTopicOrPartitionError.code
                else:
                    wanted[tp] = OffsetAndMetadata(p.offset, p.metadata)
                if i % ANSWER_SLICE == 0:
                    await asyncio.sleep(0)
        if wanted:
            codes.update(await self.c.commit_offsets(req.group_id, req.generation_id, req.member_id, wanted,
                                                     req.group_instance_id))
        resp = pb.OffsetCommitResponse()
        i = 0
        for t in req.topics:
            add = resp.topics.add(name=t.name).partitions.add
            for p in t.partitions:
                add(partition=p.partition, error_code=_w(codes.get((t.name, p.partition), 0)))
                i += 1
                if i % ANSWER_SLICE == 0:
                    await asyncio.sleep(0)
        return resp

    async def offset_fetch(self, req: pb.OffsetFetchRequest, ctx: RequestContext) -> pb.OffsetFetchResponse:
        if not self._group_allowed(ctx, "OffsetFetch", req.group_id):
            return pb.OffsetFetchResponse(error_code=GROUP_AUTH)
        entries = [(t.name, p) for t in req.topics for p in t.partitions]
        verdicts = judge_partitions(entries, self.max_partitions)
        code, found = await self.c.fetch_offsets(req.group_id, entries if req.topics else None)
        resp = pb.OffsetFetchResponse(error_code=_w(code))
        if code != 0:
            return resp
        # KIP-447 (OffsetFetch v7 require_stable): a partition whose offset a transaction holds
        # pending answers UNSTABLE_OFFSET_COMMIT (retriable) until the transaction completes.
        unstable = self.c.pending_txn_partitions(req.group_id) if req.require_stable else set()
        if not req.topics:
            by_topic: dict[str, list[tuple[int, OffsetAndMetadata]]] = {}
            for (topic, part), om in sorted(found.items()):
                if self.gate.allowed(ctx, "Describe", TOPIC, topic):
                    by_topic.setdefault(topic, []).append((part, om))
            for topic, parts in by_topic.items():
                rt = resp.topics.add(name=topic)
                for part, committed in parts:
                    if (topic, part) in unstable:
                        rt.partitions.add(partition=part, committed_offset=-1, error_code=E.UNSTABLE_OFFSET_COMMIT)
                    else:
                        rt.partitions.add(partition=part, committed_offset=committed.offset,
                                          metadata=committed.metadata)
            return resp
        i = 0
        for t in req.topics:
            rt = resp.topics.add(name=t.name)
            topic_ok = self.gate.allowed(ctx, "Describe", TOPIC, t.name)
            for p in t.partitions:
                verdict = verdicts[i]
                i += 1
                if verdict != E.NONE or not topic_ok:
                    rt.partitions.add(partition=p, committed_offset=-1, error_code=verdict if verdict != E.NONE
                                      else E.TOPIC_AUTHORIZATION_FAILED)
                elif (t.name, p) in unstable:
                    rt.partitions.add(partition=p, committed_offset=-1, error_code=E.UNSTABLE_OFFSET_COMMIT)
                else:
                    got = found.get((t.name, p))
                    rt.partitions.add(partition=p, committed_offset=-1 if got is None else got.offset,
                                      metadata="" if got is None else got.metadata)
        return resp

    async def list_groups(self, req: pb.ListGroupsRequest, ctx: RequestContext) -> pb.ListGroupsResponse:
        code, groups = await self.c.list_groups()
        cluster_ok = self.gate.cluster_allowed(ctx, "Describe")
        return pb.ListGroupsResponse(error_code=_w(code), groups=[
            pb.ListedGroup(group_id=g, protocol_type=pt) for g, pt in groups
            if cluster_ok or self.gate.allowed(ctx, "Describe", GROUP, g)])

    async def describe_groups(self, req: pb.DescribeGroupsRequest,
                              ctx: RequestContext) -> pb.DescribeGroupsResponse:
        resp = pb.DescribeGroupsResponse()
        for group_id in list(req.groups)[:self.max_partitions]:
            if not self._group_allowed(ctx, "DescribeGroups", group_id):
                resp.groups.add(group_id=group_id, error_code=GROUP_AUTH)
                continue
            code, d = await self.c.describe_group(group_id)
            g = resp.groups.add(group_id=group_id, error_code=_w(code), group_state=d.state,
                                protocol_type=d.protocol_type, protocol_data=d.protocol)
            for m in d.members:
                g.members.add(member_id=m.member_id, client_id=m.client_id, client_host=m.client_host,
                              member_metadata=m.metadata, member_assignment=m.assignment,
                              group_instance_id=m.group_instance_id)
        return resp

    async def delete_groups(self, req: pb.DeleteGroupsRequest, ctx: RequestContext) -> pb.DeleteGroupsResponse:
        """Kafka's DeleteGroups: Delete on each group (GROUP_AUTHORIZATION_FAILED), then the coordinator's
        verdict per group. At most max.request.partitions groups are handled (the rest INVALID_REQUEST)."""
        resp = pb.DeleteGroupsResponse()
        for i, group_id in enumerate(req.groups):
            if i >= self.max_partitions:
                code = E.INVALID_REQUEST
            elif not self._group_allowed(ctx, "DeleteGroups", group_id):
                code = GROUP_AUTH
            else:
                code = _w(await self.c.delete_group(group_id))
            resp.results.add(group_id=group_id, error_code=code)
        return resp

    async def offset_delete(self, req: pb.OffsetDeleteRequest, ctx: RequestContext) -> pb.OffsetDeleteResponse:
        """Kafka's OffsetDelete (KIP-496): Delete on the group, Read on each topic; unknown partitions
        are UNKNOWN_TOPIC_OR_PARTITION; the coordinator decides the rest (GROUP_SUBSCRIBED_TO_TOPIC)."""
        count = sum(len(t.partitions) for t in req.topics)
        if count > self.max_partitions:
            return pb.OffsetDeleteResponse(error_code=E.INVALID_REQUEST)
        if not self._group_allowed(ctx, "OffsetDelete", req.group_id):
            return pb.OffsetDeleteResponse(error_code=GROUP_AUTH)
        codes: dict[tuple[str, int], int] = {}
        wanted: list[tuple[str, int]] = []
        for t in req.topics:
            topic_ok = self.gate.allowed(ctx, "Read", TOPIC, t.name)
            for p in t.partitions:
                if not topic_ok:
                    codes[(t.name, p)] = errors.TopicAuthorizationFailedError.code
                elif not self.partition_exists(t.name, p):
                    codes[(t.name, p)] = errors.UnknownTopicOrPartitionError.code
                else:
                    wanted.append((t.name, p))
        code, verdicts = await self.c.delete_offsets(req.group_id, wanted)
        if code != E.NONE:
            return pb.OffsetDeleteResponse(error_code=_w(code))
        codes.update(verdicts)
        resp = pb.OffsetDeleteResponse()
        for t in req.topics:
            rt = resp.topics.add(name=t.name)
            for p in t.partitions:
                rt.partitions.add(partition=p, error_code=_w(codes.get((t.name, p), E.NONE)))
        return resp


_INSTANCE_ID = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def valid_group_instance_id(instance_id: str) -> bool:
    """Kafka's JoinGroupRequest.validateGroupInstanceId: 1-249 of [a-zA-Z0-9._-], not "." or ".."."""
    return instance_id not in (".", "..") and _INSTANCE_ID.fullmatch(instance_id) is not None
