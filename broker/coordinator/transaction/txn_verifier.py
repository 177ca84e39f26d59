"""The partition leader's client of the transaction coordinators' verification (KIP-890 part 1;
Kafka 3.6's ``AddPartitionsToTxnManager``).

Theory of operation
-------------------
``ReplicaManager.append_produce`` asks ``verify(transactional_id, producer_id, producer_epoch,
partitions)`` before it appends a producer's first transactional batch on those partitions (see
``broker.replication.txn_verification``). The answer is the coordinator's error per partition
(NONE: in the ongoing transaction of that producer id and epoch); translating it into the
produce's answer is the caller's.

* The coordinator is the broker ``coordinator_of(transactional_id)`` names (the rule of
  FindCoordinator key_type 1). When it is this broker, its ``TransactionCoordinator`` answers
  directly - no RPC.
* Otherwise the question joins that broker's queue. One request per coordinator is in flight at
  a time: what queues meanwhile goes in the next one (Kafka's one in-flight request per node),
  so verifications are batched per coordinator - one AddPartitionsToTxn in the batched form
  (``transactions``, each ``verify_only``), never one RPC per partition or per record; questions
  of one (transactional id, producer id, epoch) are merged. A request carries at most
  ``max_partitions`` partitions; the rest waits for the next round.
* It goes over the inter-broker listener with this broker's certificate, as the markers do
  (the coordinator authorizes ClusterAction); the channels are the marker sender's
  (``stub_of``).
* Failures are answers, never exceptions: the coordinator unknown (no live broker) is
  COORDINATOR_NOT_AVAILABLE; an unreachable coordinator, a failed RPC or no answer within
  ``timeout_ms`` (request.timeout.ms, counted from the question, queueing included) is
  NETWORK_EXCEPTION; a refusal of the whole request (its ``error_code``) is that code for every
  partition; a coordinator that does not know the batched form (it answers no transaction at
  all) lets the append go unverified, as Kafka does on an UNSUPPORTED_VERSION from an older broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import grpc

from broker.coordinator.transaction.txn_state import NONE, TopicPartition
from proto import errors
from proto import minikafka_pb2 as pb

log = logging.getLogger(__name__)

COORDINATOR_NOT_AVAILABLE: Final = errors.CoordinatorNotAvailableError.code
NETWORK_EXCEPTION: Final = errors.NetworkError.code

# (transactional id, producer id, producer epoch, partitions) -> {partition: error}
Verify = Callable[[str, int, int, list[TopicPartition]], Awaitable[dict[TopicPartition, int]]]
# (broker id, request, timeout s) -> its answer; None: no address known. May raise grpc.aio.AioRpcError,
# ConnectionError, OSError.
SendVerify = Callable[[int, pb.AddPartitionsToTxnRequest, float], Awaitable[pb.AddPartitionsToTxnResponse | None]]
Key = tuple[str, int, int]  # (transactional id, producer id, producer epoch)


@dataclass
class _Question:
    """One (transactional id, producer id, epoch) waiting for its coordinator's next round."""
    partitions: dict[TopicPartition, None] = field(default_factory=dict)  # an ordered set
    waiters: list[asyncio.Future[dict[TopicPartition, int]]] = field(default_factory=list)


def grpc_sender(stub_of: Callable[[int], Any]) -> SendVerify:
    """``SendVerify`` over the KafkaApi stub of a broker's inter-broker listener (None: unknown)."""
    async def send(broker_id: int, req: pb.AddPartitionsToTxnRequest,
                   timeout_s: float) -> pb.AddPartitionsToTxnResponse | None:
        stub = stub_of(broker_id)
        if stub is None:
            return None
        resp: pb.AddPartitionsToTxnResponse = await stub.AddPartitionsToTxn(req, timeout=timeout_s)
        return resp
    return send


class TxnVerifier:
    def __init__(self, broker_id: int, coordinator_of: Callable[[str], int], local: Verify, send: SendVerify,
                 timeout_ms: int, max_partitions: int) -> None:
        self.broker_id = broker_id
        self.coordinator_of = coordinator_of
        self.local = local
        self.send = send
        self.timeout_s = timeout_ms / 1000.0
        self.max_partitions = max(1, max_partitions)
        self._queues: dict[int, dict[Key, _Question]] = {}
        self._senders: dict[int, asyncio.Task[None]] = {}
        # Verification rounds sent to other brokers, and questions answered (a bench's and a test's figures).
        self.rounds = 0
        self.questions = 0
        self._warned_unsupported: set[int] = set()

    async def close(self) -> None:
        tasks = list(self._senders.values())
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        for queue in self._queues.values():
            for q in queue.values():
                _answer(q, dict.fromkeys(q.partitions, NETWORK_EXCEPTION))
        self._queues.clear()

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """{partition: the coordinator's error} (NONE: verified); see the module docstring."""
        self.questions += 1
        coordinator = self.coordinator_of(transactional_id)
        if coordinator < 0:
            return dict.fromkeys(partitions, COORDINATOR_NOT_AVAILABLE)
        if coordinator == self.broker_id:
            try:
                return await asyncio.wait_for(self.local(transactional_id, producer_id, producer_epoch, partitions),
                                              self.timeout_s)
            except TimeoutError:
                return dict.fromkeys(partitions, NETWORK_EXCEPTION)
            except Exception:  # a bug: answer, never fail the produce
                log.exception("transactional id %s: verification failed unexpectedly", transactional_id)
                return dict.fromkeys(partitions, NETWORK_EXCEPTION)
        fut: asyncio.Future[dict[TopicPartition, int]] = asyncio.get_running_loop().create_future()
        queue = self._queues.setdefault(coordinator, {})
        question = queue.setdefault((transactional_id, producer_id, producer_epoch), _Question())
        question.partitions.update(dict.fromkeys(partitions))
        question.waiters.append(fut)
        if coordinator not in self._senders:
            self._senders[coordinator] = asyncio.get_running_loop().create_task(self._drain(coordinator))
        try:
            answer = await asyncio.wait_for(asyncio.shield(fut), self.timeout_s)
        except TimeoutError:
            return dict.fromkeys(partitions, NETWORK_EXCEPTION)
        return {tp: answer.get(tp, NETWORK_EXCEPTION) for tp in partitions}

    async def _drain(self, coordinator: int) -> None:
        """Rounds to ``coordinator`` until its queue is empty (one in flight at a time)."""
        try:
            while True:
                queue = self._queues.get(coordinator)
                if not queue:
                    break
                batch: list[tuple[Key, _Question]] = []
                count = 0
                for key in list(queue):
                    if batch and count + len(queue[key].partitions) > self.max_partitions:
                        break
                    question = queue.pop(key)
                    batch.append((key, question))
                    count += len(question.partitions)
                if not queue:
                    del self._queues[coordinator]
                await self._round(coordinator, batch)
        finally:
            self._senders.pop(coordinator, None)

    async def _round(self, coordinator: int, batch: list[tuple[Key, _Question]]) -> None:
        req = pb.AddPartitionsToTxnRequest()
        for (tid, pid, epoch), question in batch:
            topics: dict[str, list[int]] = {}
            for topic, partition in question.partitions:
                topics.setdefault(topic, []).append(partition)
            req.transactions.add(transactional_id=tid, producer_id=pid, producer_epoch=epoch, verify_only=True,
                                 topics=[pb.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in topics.items()])
        self.rounds += 1
        try:
            resp = await self.send(coordinator, req, self.timeout_s)
        except (grpc.aio.AioRpcError, ConnectionError, OSError, TimeoutError) as e:
            log.info("AddPartitionsToTxn (verify) to broker %d failed: %s", coordinator,
                     e.code() if isinstance(e, grpc.aio.AioRpcError) else e)
            resp = None
        except asyncio.CancelledError:
            for _key, question in batch:
                _answer(question, dict.fromkeys(question.partitions, NETWORK_EXCEPTION))
            raise
        except Exception:  # a bug: answer, never leave a producer waiting
            log.exception("AddPartitionsToTxn (verify) to broker %d failed unexpectedly", coordinator)
            resp = None
        for i, (key, question) in enumerate(batch):
            _answer(question, self._codes(coordinator, resp, i, key, question))

    def _codes(self, coordinator: int, resp: pb.AddPartitionsToTxnResponse | None, index: int, key: Key,
               question: _Question) -> dict[TopicPartition, int]:
        if resp is None:
            return dict.fromkeys(question.partitions, NETWORK_EXCEPTION)
        if resp.error_code != NONE:
            return dict.fromkeys(question.partitions, int(resp.error_code))
        if not resp.results_by_transaction:
            if coordinator not in self._warned_unsupported:
                self._warned_unsupported.add(coordinator)
                log.warning("broker %d does not verify transactions (no batched AddPartitionsToTxn): "
                            "appending unverified, as Kafka with a broker of an older version", coordinator)
            return dict.fromkeys(question.partitions, NONE)
        codes = dict.fromkeys(question.partitions, NETWORK_EXCEPTION)
        if index < len(resp.results_by_transaction):
            result = resp.results_by_transaction[index]
            if result.transactional_id == key[0]:
                for t in result.topic_results:
                    for p in t.partitions:
                        if (t.name, p.partition) in codes:
                            codes[(t.name, p.partition)] = int(p.error_code)
        return codes


def _answer(question: _Question, codes: dict[TopicPartition, int]) -> None:
    for waiter in question.waiters:
        if not waiter.done():
            waiter.set_result(codes)
