"""The transaction APIs (KIP-98) over the one request layer: authorize as Kafka 2.8's KafkaApis
does, validate (SPEC S13), convert protobuf <-> the coordinators' calls.

* FindCoordinator key_type 1: Describe on the TransactionalId; the coordinator choice of
  ``TransactionCoordinator.find_coordinator`` (key_type 0 goes to the group APIs).
* InitProducerId with a transactional id: Write on the TransactionalId, then the transaction
  coordinator (NOT_COORDINATOR on any other broker); without one, the idempotent path (admin).
* AddPartitionsToTxn: Write on the TransactionalId (else every partition
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED); Write on each topic (TOPIC_AUTHORIZATION_FAILED) and a
  partition the metadata knows (UNKNOWN_TOPIC_OR_PARTITION) - one refused partition refuses the
  request, the others answered OPERATION_NOT_ATTEMPTED, as Kafka. Its batched form (Kafka's v4+,
  ``transactions``): partition leaders verifying a producer's first transactional batch on a
  partition (KIP-890 part 1, ``broker.coordinator.transaction.txn_verifier``) - ClusterAction,
  verify_only, answered from the coordinator's state.
* AddOffsetsToTxn: Write on the TransactionalId, Read on the group.
* EndTxn: Write on the TransactionalId.
* TxnOffsetCommit: Write on the TransactionalId, Read on the group, Read on each topic; then the
  group coordinator keeps the offsets pending for the producer until the transaction's marker.
* WriteTxnMarkers (``write_txn_markers`` wraps the partition leader's handler): entries of topic
  __consumer_offsets are the transaction's outcome for its groups' pending offsets and go to the
  group coordinator (``GroupCoordinator.handle_txn_marker``); the rest to the leader's handler.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from broker.coordinator.group.group_state import OFFSETS_TOPIC, OFFSETS_TOPIC_PARTITIONS, OffsetAndMetadata
from broker.coordinator.transaction.txn_coordinator import MAX_TRANSACTIONAL_ID_LENGTH, TransactionCoordinator
from broker.network.request_guard import judge_partitions
from broker.security.authorizer import CLUSTER, CLUSTER_NAME, GROUP, TOPIC, TRANSACTIONAL_ID
from broker.security.gatekeeper import Gatekeeper
from broker.security.principal import RequestContext
from proto import errors
from proto import minikafka_pb2 as pb

if TYPE_CHECKING:
    from broker.coordinator.group.group_apis import GroupApis
    from broker.coordinator.group.group_coordinator import GroupCoordinator
    from broker.server.admin import AdminManager

E = pb.ErrorCode
TXN_AUTH: Final = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
TRANSACTION_KEY: Final = 1  # FindCoordinator key_type
Handler = Callable[[Any, RequestContext], Awaitable[Any]]


def _w(code: int) -> Any:
    return errors.wire_code(code)


async def _no_answers() -> dict[tuple[str, int], int]:
    return {}


class TxnApis:
    def __init__(self, coordinator: TransactionCoordinator, groups: GroupApis, group_coordinator: GroupCoordinator,
                 admin: AdminManager, gate: Gatekeeper, endpoint: Any, max_partitions: int,
                 partition_exists: Callable[[str, int], bool]) -> None:
        self.c = coordinator
        self.groups = groups
        self.group_coordinator = group_coordinator
        self.admin = admin
        self.gate = gate
        self.endpoint = endpoint  # (broker_id, listener) -> pb.BrokerEndpoint | None
        self.max_partitions = max_partitions
        self.partition_exists = partition_exists

    def _txn_allowed(self, ctx: RequestContext, operation: str, transactional_id: str) -> bool:
        return self.gate.allowed(ctx, operation, TRANSACTIONAL_ID, transactional_id)

    async def find_coordinator(self, req: pb.FindCoordinatorRequest,
                               ctx: RequestContext) -> pb.FindCoordinatorResponse:
        if req.key_type != TRANSACTION_KEY:
            return await self.groups.find_coordinator(req, ctx)
        if not self._txn_allowed(ctx, "Describe", req.key):
            return pb.FindCoordinatorResponse(error_code=TXN_AUTH, node_id=-1)
        code, broker = self.c.find_coordinator(req.key)
        if code != E.NONE:
            return pb.FindCoordinatorResponse(error_code=_w(code), node_id=-1)
        ep = self.endpoint(broker, ctx.listener)
        if ep is None:
            return pb.FindCoordinatorResponse(error_code=E.COORDINATOR_NOT_AVAILABLE, node_id=-1)
        return pb.FindCoordinatorResponse(node_id=broker, host=ep.host, port=ep.port)

    async def init_producer_id(self, req: pb.InitProducerIdRequest,
                               ctx: RequestContext) -> pb.InitProducerIdResponse:
        if not req.transactional_id:
            return await self.admin.init_producer_id(req, ctx)
        if not self._txn_allowed(ctx, "Write", req.transactional_id):
            return pb.InitProducerIdResponse(error_code=TXN_AUTH, producer_id=-1, producer_epoch=-1)
        # KIP-360: an existing (producer id, epoch) asks for a bump of exactly that epoch; both or neither.
        if (req.producer_id < 0) != (req.producer_epoch < 0):
            return pb.InitProducerIdResponse(error_code=E.INVALID_REQUEST, producer_id=-1, producer_epoch=-1)
        expected = None if req.producer_id < 0 else (req.producer_id, req.producer_epoch)
        answer = await self.c.init_producer_id(req.transactional_id, req.transaction_timeout_ms, expected)
        return pb.InitProducerIdResponse(error_code=_w(answer.error), producer_id=answer.producer_id,
                                         producer_epoch=answer.producer_epoch)

    async def add_partitions_to_txn(self, req: pb.AddPartitionsToTxnRequest,
                                    ctx: RequestContext) -> pb.AddPartitionsToTxnResponse:
        if req.transactions:
            return await self._verify_partitions(req, ctx)
        entries = [(t.name, p) for t in req.topics for p in t.partitions]
        codes: dict[tuple[str, int], int] = {}
        if not self._txn_allowed(ctx, "Write", req.transactional_id):
            codes = {tp: TXN_AUTH for tp in entries}
        else:
            verdicts = judge_partitions(entries, self.max_partitions)
            for tp, verdict in zip(entries, verdicts, strict=True):
                if verdict != E.NONE:
                    codes[tp] = verdict
                elif not self.gate.allowed(ctx, "Write", TOPIC, tp[0]):
                    codes[tp] = E.TOPIC_AUTHORIZATION_FAILED
                elif not self.partition_exists(*tp):
                    codes[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
            if codes:
                codes = {tp: codes.get(tp, E.OPERATION_NOT_ATTEMPTED) for tp in entries}
            else:
                code = await self.c.add_partitions(req.transactional_id, req.producer_id, req.producer_epoch,
                                                   sorted(set(entries)))
                codes = {tp: code for tp in entries}
        resp = pb.AddPartitionsToTxnResponse()
        for t in req.topics:
            rt = resp.topics.add(name=t.name)
            for p in t.partitions:
                rt.partitions.add(partition=p, error_code=_w(codes[(t.name, p)]))
        return resp

    async def _verify_partitions(self, req: pb.AddPartitionsToTxnRequest,
                                 ctx: RequestContext) -> pb.AddPartitionsToTxnResponse:
        """The batched form (Kafka's v4+, KIP-890 part 1): partition leaders verifying, per
        transaction, that partitions are in its ongoing transaction before they append. Brokers
        only (ClusterAction, else CLUSTER_AUTHORIZATION_FAILED for the whole request, as Kafka);
        only verify_only transactions (KIP-890 part 2's adding by the leader is not built:
        INVALID_REQUEST); answered from the coordinator's state, in the request's order."""
        resp = pb.AddPartitionsToTxnResponse()
        if req.transactional_id or req.topics:
            resp.error_code = E.INVALID_REQUEST  # one form or the other, as Kafka's versions
            return resp
        if not self.gate.allowed(ctx, "ClusterAction", CLUSTER, CLUSTER_NAME):
            resp.error_code = E.CLUSTER_AUTHORIZATION_FAILED
            return resp
        # Judged per transaction (transactions of different producers name the same partitions),
        # bounded over the request, as WriteTxnMarkers' markers.
        limit = 1 << 31 if ctx.inter_broker else self.max_partitions
        too_many = sum(len(t.partitions) for x in req.transactions for t in x.topics) > limit
        verdicts = iter([v for x in req.transactions for v in judge_partitions(
            [(t.name, p) for t in x.topics for p in t.partitions], -1 if too_many else limit)])
        pending: list[Awaitable[dict[tuple[str, int], int]]] = []
        refused: list[dict[tuple[str, int], int]] = []
        for x in req.transactions:
            codes: dict[tuple[str, int], int] = {}
            wanted = []
            for t in x.topics:
                for p in t.partitions:
                    verdict = next(verdicts)
                    if verdict != E.NONE:
                        codes[(t.name, p)] = verdict
                    elif not x.verify_only or x.producer_id < 0 or not 0 <= x.producer_epoch <= 0x7FFF:
                        codes[(t.name, p)] = E.INVALID_REQUEST
                    else:
                        wanted.append((t.name, p))
            refused.append(codes)
            pending.append(self.c.verify_partitions(x.transactional_id, x.producer_id, x.producer_epoch, wanted)
                           if wanted else _no_answers())
        answers = await asyncio.gather(*pending)
        for x, codes, answer in zip(req.transactions, refused, answers, strict=True):
            rx = resp.results_by_transaction.add(transactional_id=x.transactional_id)
            for t in x.topics:
                rt = rx.topic_results.add(name=t.name)
                for p in t.partitions:
                    code = codes.get((t.name, p), answer.get((t.name, p), E.INVALID_REQUEST))
                    rt.partitions.add(partition=p, error_code=_w(code))
        return resp

    async def add_offsets_to_txn(self, req: pb.AddOffsetsToTxnRequest,
                                 ctx: RequestContext) -> pb.AddOffsetsToTxnResponse:
        if not self._txn_allowed(ctx, "Write", req.transactional_id):
            return pb.AddOffsetsToTxnResponse(error_code=TXN_AUTH)
        if not self.gate.allowed(ctx, "Read", GROUP, req.group_id):
            return pb.AddOffsetsToTxnResponse(error_code=E.GROUP_AUTHORIZATION_FAILED)
        if not req.group_id:
            return pb.AddOffsetsToTxnResponse(error_code=E.INVALID_GROUP_ID)
        code = await self.c.add_offsets(req.transactional_id, req.producer_id, req.producer_epoch, req.group_id)
        return pb.AddOffsetsToTxnResponse(error_code=_w(code))

    async def end_txn(self, req: pb.EndTxnRequest, ctx: RequestContext) -> pb.EndTxnResponse:
        if not self._txn_allowed(ctx, "Write", req.transactional_id):
            return pb.EndTxnResponse(error_code=TXN_AUTH)
        code = await self.c.end_txn(req.transactional_id, req.producer_id, req.producer_epoch, req.committed)
        return pb.EndTxnResponse(error_code=_w(code))

    async def txn_offset_commit(self, req: pb.TxnOffsetCommitRequest,
                                ctx: RequestContext) -> pb.TxnOffsetCommitResponse:
        entries = [(t.name, p.partition) for t in req.topics for p in t.partitions]
        codes: dict[tuple[str, int], int] = {}
        wanted: dict[tuple[str, int], OffsetAndMetadata] = {}
        if not req.transactional_id or len(req.transactional_id) > MAX_TRANSACTIONAL_ID_LENGTH:
            codes = {tp: E.INVALID_REQUEST for tp in entries}
        elif not self._txn_allowed(ctx, "Write", req.transactional_id):
            codes = {tp: TXN_AUTH for tp in entries}
        elif not self.gate.allowed(ctx, "Read", GROUP, req.group_id):
            codes = {tp: E.GROUP_AUTHORIZATION_FAILED for tp in entries}
        else:
            verdicts = iter(judge_partitions(entries, self.max_partitions))
            for t in req.topics:
                topic_ok = self.gate.allowed(ctx, "Read", TOPIC, t.name)
                for p in t.partitions:
                    tp, verdict = (t.name, p.partition), next(verdicts)
                    if verdict != E.NONE:
                        codes[tp] = verdict
                    elif not topic_ok:
                        codes[tp] = E.TOPIC_AUTHORIZATION_FAILED
                    elif not self.partition_exists(*tp):
                        codes[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
                    else:
                        wanted[tp] = OffsetAndMetadata(p.offset, p.metadata)
            if wanted:
                codes.update(await self.group_coordinator.txn_commit_offsets(
                    req.group_id, req.producer_id, req.producer_epoch, wanted, req.generation_id, req.member_id,
                    req.group_instance_id))
        resp = pb.TxnOffsetCommitResponse()
        for t in req.topics:
            rt = resp.topics.add(name=t.name)
            for p in t.partitions:
                rt.partitions.add(partition=p.partition, error_code=_w(codes.get((t.name, p.partition), E.NONE)))
        return resp

    def write_txn_markers(self, data_handler: Handler) -> Handler:
        """WriteTxnMarkers: the __consumer_offsets entries to the group coordinator, the others to
        ``data_handler`` (the partition leader's), answered as one response (see the module docstring)."""
        async def handle(req: pb.WriteTxnMarkersRequest, ctx: RequestContext) -> pb.WriteTxnMarkersResponse:
            if not any(t.name == OFFSETS_TOPIC for m in req.markers for t in m.topics):
                return await data_handler(req, ctx)  # type: ignore[no-any-return]
            if not self.gate.allowed(ctx, "ClusterAction", CLUSTER, CLUSTER_NAME):
                raise errors.ClusterAuthorizationFailedError(f"{ctx.principal} may not write transaction markers")
            data = pb.WriteTxnMarkersRequest()
            for m in req.markers:
                dm = data.markers.add(producer_id=m.producer_id, producer_epoch=m.producer_epoch,
                                      transaction_result=m.transaction_result, coordinator_epoch=m.coordinator_epoch)
                dm.topics.extend(t for t in m.topics if t.name != OFFSETS_TOPIC)
            answered = (await data_handler(data, ctx) if any(m.topics for m in data.markers)
                        else pb.WriteTxnMarkersResponse(markers=[pb.WritableTxnMarkerResult(producer_id=m.producer_id)
                                                                 for m in req.markers]))
            budget = self.max_partitions
            for m, mr in zip(req.markers, answered.markers, strict=True):
                for t in m.topics:
                    if t.name != OFFSETS_TOPIC:
                        continue
                    tr = mr.topics.add(name=t.name)
                    for index in t.partition_indexes:
                        budget -= 1
                        if budget < 0 or not 0 <= index < OFFSETS_TOPIC_PARTITIONS or m.producer_id < 0:
                            code = E.INVALID_REQUEST
                        else:
                            code = _w(await self.group_coordinator.handle_txn_marker(
                                m.producer_id, index, m.transaction_result, m.producer_epoch))
                        tr.partitions.add(partition_index=index, error_code=code)
            return answered

        return handle
