"""KIP-890 part 1 (issue 31), the shells around the pure decisions: the leader's verifier
(broker/coordinator/transaction/txn_verifier.py - batched per coordinator, one request in flight
each, failures as answers), the replica manager's produce path with it (a real replica manager on
real logs, the verifier a function: the cache, the ABA race with an abort marker written while the
verification is out, the request-level refusals, the config switched off), and the coordinator's
handler of the batched AddPartitionsToTxn (txn_apis)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sole_replica import FakeZk

from broker.coordinator.transaction.txn_apis import TxnApis
from broker.coordinator.transaction.txn_verifier import (
    COORDINATOR_NOT_AVAILABLE,
    NETWORK_EXCEPTION,
    TxnVerifier,
)
from broker.log.config import LogConfig
from broker.log.manager import LogManager
from broker.replication.replica_manager import BrokerSettings, ReplicaManager
from broker.security.principal import INTERNAL, LOCAL_CLIENT, RequestContext
from broker.server.metadata_cache import MetadataCache
from proto import errors
from proto import minikafka_pb2 as pb
from proto.record_batch import Record, encode_batch

E = pb.ErrorCode
NONE = 0
TP0, TP1 = ("t", 0), ("t", 1)


# ------------------------------------------------------------------ the verifier


class Coordinators:
    """The injected send: every request recorded; each answered per ``codes`` (NONE by default)
    once ``gate`` opens (so that questions queue behind the request in flight)."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, pb.AddPartitionsToTxnRequest]] = []
        self.codes: dict[tuple[str, int], int] = {}
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail: Exception | None = None
        self.top_error = NONE
        self.unsupported = False

    async def send(self, broker: int, req: pb.AddPartitionsToTxnRequest, timeout_s: float) -> pb.AddPartitionsToTxnResponse:
        assert timeout_s > 0
        self.sent.append((broker, req))
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        resp = pb.AddPartitionsToTxnResponse(error_code=self.top_error)  # type: ignore[arg-type]
        if self.unsupported:
            return resp
        for x in req.transactions:
            assert x.verify_only
            rx = resp.results_by_transaction.add(transactional_id=x.transactional_id)
            for t in x.topics:
                rt = rx.topic_results.add(name=t.name)
                for p in t.partitions:
                    rt.partitions.add(partition=p, error_code=self.codes.get((t.name, p), NONE))
        return resp

    def transactions(self, i: int) -> list[tuple[str, int, int, list[tuple[str, int]]]]:
        return [(x.transactional_id, x.producer_id, x.producer_epoch,
                 sorted((t.name, p) for t in x.topics for p in t.partitions)) for x in self.sent[i][1].transactions]


async def settle() -> None:
    """Let every ready task run until it waits (a few loop iterations; no time passes)."""
    for _ in range(10):
        await asyncio.sleep(0)


def verifier(coordinators: Coordinators, owner: dict[str, int], max_partitions: int = 100,
             timeout_ms: int = 5000) -> tuple[TxnVerifier, list[tuple[str, list[tuple[str, int]]]]]:
    local_calls: list[tuple[str, list[tuple[str, int]]]] = []

    async def local(tid: str, _pid: int, _epoch: int, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        local_calls.append((tid, partitions))
        return dict.fromkeys(partitions, NONE)

    return TxnVerifier(1, lambda tid: owner.get(tid, -1), local, coordinators.send, timeout_ms,
                       max_partitions), local_calls


def test_questions_are_batched_per_coordinator_one_request_in_flight_each() -> None:
    async def run() -> None:
        c = Coordinators()
        v, local = verifier(c, {"a": 2, "b": 2, "c": 3, "mine": 1})
        c.gate.clear()
        first = asyncio.create_task(v.verify("a", 10, 0, [TP0]))
        await settle()
        # While a's request is out, three questions for broker 2 queue (two of one producer: merged)
        # and one for broker 3 goes at once.
        rest = [asyncio.create_task(v.verify(*q)) for q in (("b", 11, 0, [TP0]), ("b", 11, 0, [TP1]),
                                                            ("a", 10, 0, [TP1]), ("c", 12, 1, [TP0, TP1]))]
        await settle()
        assert [b for b, _r in c.sent] == [2, 3]
        c.gate.set()
        answers = await asyncio.gather(first, *rest)
        assert answers == [{TP0: NONE}, {TP0: NONE}, {TP1: NONE}, {TP1: NONE}, {TP0: NONE, TP1: NONE}]
        assert [b for b, _r in c.sent] == [2, 3, 2]
        assert c.transactions(0) == [("a", 10, 0, [TP0])]
        assert c.transactions(1) == [("c", 12, 1, [TP0, TP1])]
        assert c.transactions(2) == [("b", 11, 0, [TP0, TP1]), ("a", 10, 0, [TP1])]
        # This broker's own transactional ids: its coordinator answers, no request.
        assert await v.verify("mine", 13, 0, [TP0]) == {TP0: NONE}
        assert local == [("mine", [TP0])] and len(c.sent) == 3
        assert v.rounds == 3

    asyncio.run(run())


def test_each_answer_goes_to_its_partitions() -> None:
    async def run() -> None:
        c = Coordinators()
        c.codes = {TP1: E.INVALID_TXN_STATE}
        v, _local = verifier(c, {"a": 2})
        assert await v.verify("a", 10, 0, [TP0, TP1]) == {TP0: NONE, TP1: E.INVALID_TXN_STATE}

    asyncio.run(run())


def test_failures_are_answers() -> None:
    async def run() -> None:
        c = Coordinators()
        v, _local = verifier(c, {"a": 2})
        assert await v.verify("nobody-coordinates-it", 10, 0, [TP0]) == {TP0: COORDINATOR_NOT_AVAILABLE}
        c.fail = ConnectionError("broker 2 is down")
        assert await v.verify("a", 10, 0, [TP0]) == {TP0: NETWORK_EXCEPTION}
        c.fail = None
        c.top_error = E.CLUSTER_AUTHORIZATION_FAILED
        assert await v.verify("a", 10, 0, [TP0]) == {TP0: E.CLUSTER_AUTHORIZATION_FAILED}
        c.top_error = NONE
        c.unsupported = True  # a coordinator without the batched form: appended unverified, as Kafka
        assert await v.verify("a", 10, 0, [TP0]) == {TP0: NONE}
        c.unsupported = False
        slow, _ = verifier(c, {"a": 2}, timeout_ms=50)
        c.gate.clear()
        assert await slow.verify("a", 10, 0, [TP0]) == {TP0: NETWORK_EXCEPTION}
        c.gate.set()
        await slow.close()

    asyncio.run(run())


def test_a_request_carries_at_most_max_partitions() -> None:
    """SPEC S13.4: a verification request is bounded like any request (max.request.partitions)."""
    async def run() -> None:
        c = Coordinators()
        v, _local = verifier(c, {"a": 2, "b": 2, "c": 2}, max_partitions=2)
        c.gate.clear()
        tasks = [asyncio.create_task(v.verify(t, 1, 0, [TP0, TP1])) for t in ("a", "b", "c")]
        await settle()
        c.gate.set()
        await asyncio.gather(*tasks)
        assert [len(r.transactions) for _b, r in c.sent] == [1, 1, 1]

    asyncio.run(run())


# ------------------------------------------------------------------ the produce path


def replica_manager(tmp_path: Path, partitions: int = 2) -> ReplicaManager:
    cfg = LogConfig()
    lm = LogManager([tmp_path / "logs"], cfg)
    lm.startup(0)
    rm = ReplicaManager(BrokerSettings(1, 10_000, cfg), lm, FakeZk(), MetadataCache(),  # type: ignore[arg-type]
                        lambda _t: cfg)
    req = pb.LeaderAndIsrRequest(controller_id=1, controller_epoch=1, partition_states=[
        pb.LeaderAndIsrPartitionState(topic_name="t", partition_index=p, controller_epoch=1, leader=1,
                                      leader_epoch=0, isr=[1], zk_version=0, replicas=[1, 2])
        for p in range(partitions)])
    assert all(e.error_code == E.NONE for e in rm.handle_leader_and_isr(req).partition_errors)
    return rm


class Verifications:
    """The replica manager's ``verify_txn``: records each question, answers ``codes`` (NONE by
    default), and runs ``meanwhile`` (a coroutine) before answering."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int, int, list[tuple[str, int]]]] = []
        self.codes: dict[tuple[str, int], int] = {}
        self.meanwhile: Any = None

    async def __call__(self, tid: str, pid: int, epoch: int, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        self.asked.append((tid, pid, epoch, list(partitions)))
        if self.meanwhile is not None:
            await self.meanwhile
            self.meanwhile = None
        return {tp: self.codes.get(tp, NONE) for tp in partitions}


def batch(pid: int, seq: int, txn: bool = True, n: int = 1) -> bytes:
    return encode_batch([Record(value=f"{pid}-{seq + i}".encode(), timestamp=1_000) for i in range(n)],
                        producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=txn)


async def produce(rm: ReplicaManager, parts: dict[int, bytes], tid: str = "app",
                  ctx: RequestContext = LOCAL_CLIENT) -> list[tuple[int, int]]:
    resp = await rm.handle_produce(pb.ProduceRequest(acks=1, timeout_ms=1000, transactional_id=tid, topics=[
        pb.ProduceTopicData(name="t", partitions=[pb.ProducePartitionData(partition=p, records=r)
                                                  for p, r in parts.items()])]), ctx)
    return [(p.error_code, p.base_offset) for p in resp.topics[0].partitions]


def lso_and_leo(rm: ReplicaManager, partition: int) -> tuple[int, int]:
    p = rm.partitions[("t", partition)]
    return p.last_stable_offset(), p._log.log_end_offset


def test_a_transactions_first_batch_per_partition_is_verified_once_and_together(tmp_path: Path) -> None:
    async def run() -> None:
        rm = replica_manager(tmp_path)
        rm.verify_txn = v = Verifications()
        assert await produce(rm, {0: batch(7, 0), 1: batch(7, 0)}) == [(E.NONE, 0), (E.NONE, 0)]
        assert v.asked == [("app", 7, 0, [TP0, TP1])]  # one question for the request's partitions
        assert await produce(rm, {0: batch(7, 1), 1: batch(7, 1)}) == [(E.NONE, 1), (E.NONE, 1)]
        assert len(v.asked) == 1  # the open transaction is the cache
        assert await produce(rm, {0: batch(8, 0, txn=False)}, tid="") == [(E.NONE, 2)]  # nothing to verify
        assert len(v.asked) == 1 and rm.txn_verifications == 1

    asyncio.run(run())


def test_a_refused_verification_writes_nothing_and_leaves_no_open_transaction(tmp_path: Path) -> None:
    async def run() -> None:
        rm = replica_manager(tmp_path)
        rm.verify_txn = v = Verifications()
        v.codes = {TP0: E.INVALID_TXN_STATE, TP1: E.CONCURRENT_TRANSACTIONS}
        assert await produce(rm, {0: batch(7, 0), 1: batch(7, 0)}) == [
            (E.INVALID_TXN_STATE, -1), (E.NOT_ENOUGH_REPLICAS, -1)]
        assert lso_and_leo(rm, 0) == lso_and_leo(rm, 1) == (0, 0)
        v.codes = {TP0: errors.ProducerFencedError.code}
        assert await produce(rm, {0: batch(7, 0)}) == [(E.INVALID_PRODUCER_EPOCH, -1)]

    asyncio.run(run())


def test_an_abort_marker_written_during_the_verification_voids_it(tmp_path: Path) -> None:
    """The ABA race: the coordinator verified, but the transaction was aborted (its markers sent to
    every partition in it, this one too) before the batch was appended: appended, it would open a
    transaction no marker will ever close."""
    async def run() -> None:
        rm = replica_manager(tmp_path)
        rm.verify_txn = v = Verifications()
        v.meanwhile = rm.handle_write_txn_markers(pb.WriteTxnMarkersRequest(markers=[pb.WritableTxnMarker(
            producer_id=7, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
            topics=[pb.WritableTxnMarkerTopic(name="t", partition_indexes=[0])])]), INTERNAL)
        assert await produce(rm, {0: batch(7, 0)}) == [(E.INVALID_TXN_STATE, -1)]
        assert lso_and_leo(rm, 0) == (1, 1)  # the marker alone; nothing left open
        # The producer's next transaction (added, so verified again): appended.
        assert await produce(rm, {0: batch(7, 0)}) == [(E.NONE, 1)]
        assert len(v.asked) == 2 and lso_and_leo(rm, 0) == (1, 2)

    asyncio.run(run())


def test_the_request_level_refusals(tmp_path: Path) -> None:
    """SPEC S13.2 / S12.3: typed per-partition answers; Write on the TransactionalId as Kafka's ACLs."""
    async def run() -> None:
        rm = replica_manager(tmp_path)
        rm.verify_txn = v = Verifications()
        # Without its transactional id: the whole request, the plain partition too (Kafka's KafkaApis).
        assert await produce(rm, {0: batch(7, 0), 1: batch(8, 0, txn=False)}, tid="") == [
            (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)] * 2
        # Two producers' transactional batches in one request.
        assert await produce(rm, {0: batch(7, 0), 1: batch(8, 0)}) == [(E.INVALID_PRODUCER_ID_MAPPING, -1)] * 2
        # No Write on the TransactionalId.
        rm.allowed = lambda _c, op, kind, name: not (kind == "TransactionalId" and name == "app")
        assert await produce(rm, {0: batch(7, 0)}) == [(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)]
        assert v.asked == [] and lso_and_leo(rm, 0) == (0, 0)

    asyncio.run(run())


def test_without_verification_the_batch_is_appended_as_in_kafka_28(tmp_path: Path) -> None:
    async def run() -> None:
        rm = replica_manager(tmp_path)
        rm.verify_txn = v = Verifications()
        rm.txn_verification_enabled = False  # transaction.partition.verification.enable=false
        v.codes = {TP0: E.INVALID_TXN_STATE}
        assert await produce(rm, {0: batch(7, 0)}) == [(E.NONE, 0)]
        assert v.asked == [] and lso_and_leo(rm, 0) == (0, 1)

    asyncio.run(run())


# ------------------------------------------------------------------ the coordinator's handler


class FakeCoordinator:
    def __init__(self) -> None:
        self.asked: list[tuple[str, int, int, list[tuple[str, int]]]] = []

    async def verify_partitions(self, tid: str, pid: int, epoch: int,
                                partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        self.asked.append((tid, pid, epoch, partitions))
        return {tp: NONE if tp[1] == 0 else E.INVALID_TXN_STATE for tp in partitions}


class Gate:
    def __init__(self, cluster_action: bool) -> None:
        self.cluster_action = cluster_action

    def allowed(self, _ctx: RequestContext, operation: str, _kind: str, _name: str) -> bool:
        return operation != "ClusterAction" or self.cluster_action


def apis(cluster_action: bool = True) -> tuple[TxnApis, FakeCoordinator]:
    c = FakeCoordinator()
    return TxnApis(c, None, None, None, Gate(cluster_action), None, 100,  # type: ignore[arg-type]
                   lambda _t, _p: True), c


def verify_request(*transactions: tuple[str, bool, list[int]]) -> pb.AddPartitionsToTxnRequest:
    return pb.AddPartitionsToTxnRequest(transactions=[pb.AddPartitionsToTxnTransaction(
        transactional_id=tid, producer_id=5, producer_epoch=1, verify_only=verify_only,
        topics=[pb.AddPartitionsToTxnTopic(name="t", partitions=parts)]) for tid, verify_only, parts in transactions])


def results(resp: pb.AddPartitionsToTxnResponse) -> list[tuple[str, list[tuple[int, int]]]]:
    return [(r.transactional_id, [(p.partition, p.error_code) for t in r.topic_results for p in t.partitions])
            for r in resp.results_by_transaction]


@pytest.mark.parametrize("cluster_action", [True, False])
def test_the_coordinator_answers_the_batched_form_for_brokers_only(cluster_action: bool) -> None:
    """SPEC S12.3: the batched form is a broker's request (ClusterAction, as Kafka's v4+)."""
    async def run() -> None:
        handler, c = apis(cluster_action)
        resp = await handler.add_partitions_to_txn(
            verify_request(("a", True, [0, 1]), ("b", False, [0]), ("c", True, [0])), INTERNAL)
        if not cluster_action:
            assert resp.error_code == E.CLUSTER_AUTHORIZATION_FAILED and not resp.results_by_transaction
            assert c.asked == []
            return
        assert resp.error_code == E.NONE
        # In order; verify_only=false (KIP-890 part 2's add by the leader) is not served.
        assert results(resp) == [("a", [(0, E.NONE), (1, E.INVALID_TXN_STATE)]), ("b", [(0, E.INVALID_REQUEST)]),
                                 ("c", [(0, E.NONE)])]
        assert c.asked == [("a", 5, 1, [TP0, TP1]), ("c", 5, 1, [TP0])]
        mixed = verify_request(("a", True, [0]))
        mixed.transactional_id = "a"
        assert (await handler.add_partitions_to_txn(mixed, INTERNAL)).error_code == E.INVALID_REQUEST

    asyncio.run(run())


def test_the_coordinator_verifies_from_memory_without_zookeeper() -> None:
    """A loaded transactional id is verified from the coordinator's state: no ZooKeeper call at all
    (every one raises here), nothing written, nothing pending after."""
    from broker.coordinator.transaction.txn_coordinator import TransactionCoordinator
    from broker.coordinator.transaction.txn_state import TxnMetadata, TxnState
    from zk.data import TxnLease

    class NoZooKeeper:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"ZooKeeper touched: {name}")

    async def no_markers(*_a: Any) -> dict[tuple[str, int], int]:
        raise AssertionError("no markers")

    async def no_ids() -> int:
        raise AssertionError("no producer id")

    async def run() -> None:
        c = TransactionCoordinator(1, NoZooKeeper(), lambda: [1], no_ids, no_markers)  # type: ignore[arg-type]
        meta = TxnMetadata("app", 5, -1, 2, -1, 60_000, TxnState.ONGOING, frozenset({TP0}), txn_start_ms=1,
                           last_update_ms=1)
        c.leases["app"] = TxnLease("app", 1, 3, 7)
        c.core.load(meta, 1)
        assert await c.verify_partitions("app", 5, 2, [TP0, TP1]) == {TP0: NONE, TP1: E.INVALID_TXN_STATE}
        assert await c.verify_partitions("app", 5, 1, [TP0]) == {TP0: errors.ProducerFencedError.code}
        assert c.core.get("app") is meta and c.core.pending("app") is None

    asyncio.run(run())
