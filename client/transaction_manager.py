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
* ``maybe_add_partition`` (called by ``Producer.send`` before a record is appended to a partition
  new to the transaction): AddPartitionsToTxn, so that the coordinator knows every partition to
  write a marker to before any of the transaction's records can reach it.
* ``send_offsets_to_transaction``: AddOffsetsToTxn (the group joins the transaction), then
  TxnOffsetCommit at the group's coordinator: the offsets become the group's when it commits.
* ``end_transaction`` (commit or abort, after the producer flushed): EndTxn.

Errors: NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE find the coordinator again;
CONCURRENT_TRANSACTIONS (the previous transaction's markers are still being written) and other
retriable codes are retried after ``retry_backoff_s``; PRODUCER_FENCED, INVALID_PRODUCER_EPOCH,
TRANSACTIONAL_ID_AUTHORIZATION_FAILED and the like are fatal: the producer can only be closed.
A transaction whose record failed cannot commit (``AbortableError`` - abort it and go on).

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


class AbortableError(errors.KafkaError):
    """The transaction cannot commit (one of its records or offsets failed): abort it."""


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
        self.partitions: set[tuple[str, int]] = set()
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
            time.sleep(self.retry_backoff_s)

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

    def begin_transaction(self) -> None:
        with self._lock:
            self._check(READY)
            self.partitions.clear()
            self.started = False
            self.error = None
            self.state = IN_TRANSACTION

    def maybe_add_partition(self, topic: str, partition: int, timeout_s: float) -> None:
        """AddPartitionsToTxn for a partition new to the transaction (before its first record)."""
        if (topic, partition) in self.partitions and self.state == IN_TRANSACTION:
            return
        with self._lock:
            self._check(IN_TRANSACTION)
            if (topic, partition) in self.partitions:
                return

            def send(conn: Connection) -> int:
                resp = conn.api.AddPartitionsToTxn(pb.AddPartitionsToTxnRequest(
                    transactional_id=self.transactional_id, producer_id=self.producer_id,
                    producer_epoch=self.producer_epoch,
                    topics=[pb.AddPartitionsToTxnTopic(name=topic, partitions=[partition])]),
                    timeout=self.request_timeout_s)
                return next((int(p.error_code) for t in resp.topics for p in t.partitions), E.UNKNOWN_SERVER_ERROR)

            self.started = True
            self._call("AddPartitionsToTxn", timeout_s, send)
            self.partitions.add((topic, partition))

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
            self.partitions.clear()
            self.started = False
            self.error = None
            self.state = READY
