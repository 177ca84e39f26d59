"""The transactional producer's side of KIP-98 (Kafka's ``TransactionManager``): the transaction's
state and the requests to the transaction coordinator.

Theory of operation
-------------------
A producer with a ``transactional_id`` owns one ``TransactionManager``. Its calls run on the
caller's thread and block (bounded by ``timeout_s``), as kafka-python's and librdkafka's
transactional calls do:

* ``init_transactions``: FindCoordinator(key_type 1), then InitProducerId(transactional_id,
  transaction_timeout_ms) at the coordinator - the producer id and the epoch that fences every
  earlier producer of the id (an open transaction of theirs is aborted by the coordinator).
* ``begin_transaction`` opens a transaction locally (nothing is sent).
* ``maybe_add_partition`` (called by ``Producer.send`` for the partition a record goes to) only
  notes a partition new to the transaction, without blocking - so the sticky partitioner moves on
  from a full batch as it does outside transactions. The producer's sender holds back the batches
  of partitions not yet added (``may_send``) and, once one of them is ready to go, sends one
  AddPartitionsToTxn for every partition noted so far (``add_new_partitions``, Kafka's
  ``newPartitionsInTransaction``): the coordinator knows every partition to write a marker to
  before any of the transaction's records reaches it, at one request per batch of new partitions.
* ``send_offsets_to_transaction``: AddOffsetsToTxn (the group joins the transaction), then
  TxnOffsetCommit at the group's coordinator: the offsets become the group's when it commits.
* ``end_transaction`` (commit or abort, after the producer flushed): EndTxn.

Errors: NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE find the coordinator again;
CONCURRENT_TRANSACTIONS (the previous transaction's markers are still being written) and other
retriable codes are retried after ``retry_backoff_s``; PRODUCER_FENCED, INVALID_PRODUCER_EPOCH,
TRANSACTIONAL_ID_AUTHORIZATION_FAILED and the like are fatal: the producer can only be closed.
Kafka's abortable errors - a record of the transaction failed (say MESSAGE_TOO_LARGE), a partition
could not be added (TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION) - leave ``error`` set:
the producer's sender then fails the transaction's batches not yet sent, ``commit_transaction``
raises ``AbortableError``, ``abort_transaction`` works and the next transaction can go on. When a
failed batch had a sequence number (the leader's expectation for that partition is unknown now),
the abort is followed by KIP-360's epoch bump (``bump_epoch``: InitProducerId with the current
producer id and epoch) and sequences start again at 0 under the new epoch, as Kafka's producer
does since 2.5.

States: UNINITIALIZED -> READY (init) -> IN_TRANSACTION (begin) -> READY (commit/abort), and
FATAL from anywhere.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import grpc

from client.connection import ClusterView, Connection
from proto import errors
from proto import minikafka_pb2 as pb

E = pb.ErrorCode
UNINITIALIZED: Final = "UNINITIALIZED"
READY: Final = "READY"
IN_TRANSACTION: Final = "IN_TRANSACTION"
FATAL: Final = "FATAL"

_REFIND: Final = frozenset({E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS})
_FATAL: Final = frozenset({E.PRODUCER_FENCED, E.INVALID_PRODUCER_EPOCH, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                           E.INVALID_PRODUCER_ID_MAPPING, E.CLUSTER_AUTHORIZATION_FAILED,
                           E.TRANSACTION_COORDINATOR_FENCED, E.INVALID_TRANSACTION_TIMEOUT})


CONCURRENT_TXN_BACKOFF_S: Final = 0.02


class AbortableError(errors.KafkaError):
    """The transaction cannot commit (one of its records or offsets failed): abort it."""


class TransactionAbortedError(errors.KafkaError):
    """A record of a transaction that was aborted before the record was sent (Kafka's
    TransactionAbortedException)."""


# A produce answer with one of these makes a transactional producer fatal (Kafka's producer).
TXN_FATAL_ERRORS: Final = (errors.ProducerFencedError, errors.InvalidProducerEpochError,
                           errors.TransactionalIdAuthorizationFailedError)


class TransactionManager:
    def __init__(self, transactional_id: str, transaction_timeout_ms: int, view: ClusterView,
                 view_lock: threading.Lock, retry_backoff_s: float, request_timeout_s: float) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.view = view
        self.view_lock = view_lock
        self.retry_backoff_s = retry_backoff_s
        self.request_timeout_s = request_timeout_s
        self.state = UNINITIALIZED
        self.producer_id = -1
        self.producer_epoch = -1
        # Partitions the coordinator has in the open transaction (replaced whole, never mutated: the
        # sender's drain reads it without a lock), and those noted by send() not yet added.
        self.partitions: frozenset[tuple[str, int]] = frozenset()
        self.new_partitions: set[tuple[str, int]] = set()
        self._parts_lock = threading.Lock()
        self.add_requests = 0  # AddPartitionsToTxn requests sent (one per batch of new partitions)
        self.aborting = False  # abort_transaction began: the sender fails the batches not yet sent
        self.epoch_bump_required = False  # a failed batch had a sequence (KIP-360)
        self.started = False  # the coordinator knows of the open transaction (a partition or group added)
        self.error: BaseException | None = None  # a failed record of the open transaction
        self.fatal: errors.KafkaError | None = None
        self._coordinator: str | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------ plumbing

    def _check(self, *states: str) -> None:
        if self.fatal is not None:
            raise self.fatal
        if self.state not in states:
            raise errors.InvalidTxnStateError(f"transactional id {self.transactional_id}: {self.state}, "
                                              f"expected {' or '.join(states)}")

    def _find(self, key: str, key_type: int) -> Connection:
        with self.view_lock:
            candidates = list(dict.fromkeys([*self.view.brokers.values(), *self.view.bootstrap]))
        last: Any = None
        for address in candidates:
            try:
                resp = self.view.connection(address).api.FindCoordinator(
                    pb.FindCoordinatorRequest(key=key, key_type=key_type), timeout=self.request_timeout_s)
            except grpc.RpcError as e:
                last = e
                continue
            if resp.error_code == E.NONE:
                return self.view.connection(f"{resp.host}:{resp.port}")
            last = resp.error_code
            if resp.error_code not in _REFIND:
                raise errors.for_code(resp.error_code)(f"FindCoordinator({key!r}): {E.Name(resp.error_code)}")
        raise errors.CoordinatorNotAvailableError(f"no coordinator for {key!r} yet ({last})")

    def _call(self, what: str, timeout_s: float, send: Callable[[Connection], int],
              group: str | None = None) -> None:
        """``send`` to the transaction coordinator (or ``group``'s) until it answers NONE, a fatal or
        non-retriable code (raised), or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        coordinator: Connection | None = None
        while True:
            code: int = E.COORDINATOR_NOT_AVAILABLE
            try:
                if coordinator is None:
                    coordinator = self._find(group or self.transactional_id, 0 if group else 1)
                code = send(coordinator)
            except errors.KafkaError as e:
                if not e.retriable:
                    raise
            except grpc.RpcError:
                coordinator = None
            if code == E.NONE:
                return
            if code in _FATAL:
                self.state = FATAL
                self.fatal = errors.for_code(code)(f"{what}: {E.Name(code)}")
                raise self.fatal
            if code in _REFIND:
                coordinator = None
            elif not errors.for_code(code).retriable:
                raise errors.for_code(code)(f"{what}: {E.Name(code)}")
            if time.monotonic() >= deadline:
                raise errors.RequestTimedOutError(f"{what}: not done within {timeout_s:.0f} s (last: {E.Name(code)})")
            # CONCURRENT_TRANSACTIONS: the previous transaction's markers are being written, which
            # takes milliseconds - Kafka's producer retries AddPartitionsToTxn then after 20 ms
            # (KAFKA-5477), not retry.backoff.ms, or every transaction right after a commit waits it out.
            time.sleep(min(self.retry_backoff_s, CONCURRENT_TXN_BACKOFF_S) if code == E.CONCURRENT_TRANSACTIONS
                       else self.retry_backoff_s)

    # ------------------------------------------------------------ the API

    def init_transactions(self, timeout_s: float) -> tuple[int, int]:
        with self._lock:
            self._check(UNINITIALIZED, READY)
            answer: list[pb.InitProducerIdResponse] = []

            def send(conn: Connection) -> int:
                resp = conn.api.InitProducerId(pb.InitProducerIdRequest(
                    transactional_id=self.transactional_id, transaction_timeout_ms=self.transaction_timeout_ms,
                    producer_id=-1, producer_epoch=-1), timeout=self.request_timeout_s)
                answer[:] = [resp]
                return int(resp.error_code)

            self._call("InitProducerId", timeout_s, send)
            self.producer_id, self.producer_epoch = answer[0].producer_id, answer[0].producer_epoch
            self.state = READY
            return self.producer_id, self.producer_epoch

    def bump_epoch(self, timeout_s: float) -> tuple[int, int]:
        """KIP-360: InitProducerId with the current producer id and epoch - the coordinator bumps
        exactly that epoch (PRODUCER_FENCED if another producer of the id bumped it meanwhile)."""
        with self._lock:
            self._check(READY)
            answer: list[pb.InitProducerIdResponse] = []

            def send(conn: Connection) -> int:
                resp = conn.api.InitProducerId(pb.InitProducerIdRequest(
                    transactional_id=self.transactional_id, transaction_timeout_ms=self.transaction_timeout_ms,
                    producer_id=self.producer_id, producer_epoch=self.producer_epoch), timeout=self.request_timeout_s)
                answer[:] = [resp]
                return int(resp.error_code)

            self._call("InitProducerId (epoch bump)", timeout_s, send)
            self.producer_id, self.producer_epoch = answer[0].producer_id, answer[0].producer_epoch
            self.epoch_bump_required = False
            return self.producer_id, self.producer_epoch

    def begin_transaction(self) -> None:
        with self._lock:
            self._check(READY)
            with self._parts_lock:
                self.partitions = frozenset()
                self.new_partitions.clear()
            self.started = False
            self.error = None
            self.aborting = False
            self.state = IN_TRANSACTION

    def check_can_send(self) -> None:
        """send() within a transaction only (Kafka: "Cannot call send in state READY"); after an
        abortable error the transaction must be aborted first."""
        if self.fatal is not None:
            raise self.fatal
        if self.state != IN_TRANSACTION or self.aborting:
            raise errors.InvalidTxnStateError(f"transactional id {self.transactional_id}: cannot send in state "
                                              f"{'ABORTING' if self.aborting else self.state}")
        if self.error is not None:
            raise AbortableError(f"the transaction cannot commit ({self.error}): abort it")

    def maybe_add_partition(self, topic: str, partition: int) -> None:
        """Note a partition the transaction writes to (non-blocking; see the module docstring)."""
        tp = (topic, partition)
        if tp in self.partitions:
            return
        with self._parts_lock:
            if tp not in self.partitions:
                self.new_partitions.add(tp)

    def may_send(self, topic: str, partition: int) -> bool:
        """Whether the partition's batches may go: the coordinator has it in the transaction."""
        return (topic, partition) in self.partitions

    def add_new_partitions(self, timeout_s: float) -> None:
        """One AddPartitionsToTxn for every partition noted and not yet added (the sender's thread).
        A fatal code makes the producer fatal; any other failure makes the transaction abortable
        (``error``): its batches not yet sent are failed and it can only be aborted."""
        with self._lock:
            with self._parts_lock:
                wanted = sorted(self.new_partitions)
            if not wanted or self.state != IN_TRANSACTION or self.aborting or self.fatal is not None \
                    or self.error is not None:
                return
            by_topic: dict[str, list[int]] = {}
            for t, p in wanted:
                by_topic.setdefault(t, []).append(p)
            failed: list[str] = []

            def send(conn: Connection) -> int:
                self.add_requests += 1
                resp = conn.api.AddPartitionsToTxn(pb.AddPartitionsToTxnRequest(
                    transactional_id=self.transactional_id, producer_id=self.producer_id,
                    producer_epoch=self.producer_epoch,
                    topics=[pb.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()]),
                    timeout=self.request_timeout_s)
                codes = {(t.name, p.partition): int(p.error_code) for t in resp.topics for p in t.partitions}
                bad = {c for c in codes.values() if c != E.NONE}
                if not codes:
                    return E.UNKNOWN_SERVER_ERROR
                # OPERATION_NOT_ATTEMPTED: another partition of the request failed (Kafka's answer).
                real = bad - {E.OPERATION_NOT_ATTEMPTED}
                failed[:] = [f"{t}-{p}: {E.Name(c)}" for (t, p), c in sorted(codes.items())
                             if c not in (E.NONE, E.OPERATION_NOT_ATTEMPTED)]
                if real:
                    return min(real & _FATAL or real)  # a fatal code wins over an abortable one
                return E.NONE if not bad else E.OPERATION_NOT_ATTEMPTED

            self.started = True
            try:
                self._call("AddPartitionsToTxn", timeout_s, send)
            except errors.KafkaError as e:
                if self.fatal is None:
                    self.error = e if not failed else AbortableError(f"AddPartitionsToTxn: {', '.join(failed)}")
                return
            with self._parts_lock:
                self.partitions = self.partitions | frozenset(wanted)
                self.new_partitions.difference_update(wanted)

    def send_offsets_to_transaction(self, offsets: Mapping[tuple[str, int], int] | Iterable[Any], group: object,
                                    timeout_s: float) -> None:
        """``offsets``: {(topic, partition): next offset} or objects with topic/partition/offset;
        ``group``: a group id, or a consumer's group metadata (group_id, generation_id, member_id)."""
        with self._lock:
            self._check(IN_TRANSACTION)
            items: Any = offsets
            wanted: dict[tuple[str, int], int] = (dict(items) if isinstance(items, Mapping)
                                                  else {(o.topic, o.partition): o.offset for o in items})
            group_id = group if isinstance(group, str) else str(getattr(group, "group_id", ""))
            generation = -1 if isinstance(group, str) else int(getattr(group, "generation_id", -1))
            member = "" if isinstance(group, str) else str(getattr(group, "member_id", ""))
            instance = "" if isinstance(group, str) else str(getattr(group, "group_instance_id", "") or "")

            def add(conn: Connection) -> int:
                return int(conn.api.AddOffsetsToTxn(pb.AddOffsetsToTxnRequest(
                    transactional_id=self.transactional_id, producer_id=self.producer_id,
                    producer_epoch=self.producer_epoch, group_id=group_id), timeout=self.request_timeout_s).error_code)

            self.started = True
            self._call("AddOffsetsToTxn", timeout_s, add)
            by_topic: dict[str, list[pb.TxnOffsetCommitPartition]] = {}
            for (topic, partition), offset in sorted(wanted.items()):
                by_topic.setdefault(topic, []).append(pb.TxnOffsetCommitPartition(partition=partition, offset=offset,
                                                                                  leader_epoch=-1))

            def commit(conn: Connection) -> int:
                resp = conn.api.TxnOffsetCommit(pb.TxnOffsetCommitRequest(
                    transactional_id=self.transactional_id, group_id=group_id, producer_id=self.producer_id,
                    producer_epoch=self.producer_epoch, generation_id=generation, member_id=member,
                    group_instance_id=instance,
                    topics=[pb.TxnOffsetCommitTopic(name=t, partitions=ps) for t, ps in by_topic.items()]),
                    timeout=self.request_timeout_s)
                codes = {int(p.error_code) for t in resp.topics for p in t.partitions} - {E.NONE}
                return min(codes) if codes else E.NONE

            self._call("TxnOffsetCommit", timeout_s, commit, group=group_id)

    def end_transaction(self, commit: bool, timeout_s: float) -> None:
        with self._lock:
            self._check(IN_TRANSACTION)
            if commit and self.error is not None:
                raise AbortableError(f"a record of the transaction failed ({self.error}): abort it")

            def send(conn: Connection) -> int:
                return int(conn.api.EndTxn(pb.EndTxnRequest(
                    transactional_id=self.transactional_id, producer_id=self.producer_id,
                    producer_epoch=self.producer_epoch, committed=commit), timeout=self.request_timeout_s).error_code)

            if self.started:  # else the coordinator never heard of it: nothing to end there (as Kafka)
                self._call("EndTxn", timeout_s, send)
            with self._parts_lock:
                self.partitions = frozenset()
                self.new_partitions.clear()
            self.started = False
            self.error = None
            self.aborting = False
            self.state = READY
