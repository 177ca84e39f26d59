"""The transaction coordinator's shell (Kafka's ``TransactionCoordinator`` + ``TransactionStateManager``
+ ``TransactionMarkerChannelManager``): futures, the clock, ZooKeeper, the markers.

Theory of operation
-------------------
Every decision is the pure ``TransactionStateMachine``'s (``txn_state.py``); this shell (1) decides
whether this broker coordinates a transactional id, (2) takes the id over in ZooKeeper and loads
its state the first time it needs it, (3) makes each transit durable before the core installs it,
(4) sends the markers of a prepared transaction and then writes its completion, and (5) ticks the
core for transaction timeouts and transactional id expiry.

Storage: one znode per transactional id, /transactions/[id] (``zk.data.TransactionRecord``), where
Kafka has a record in the __transaction_state topic. One conditional ``set`` per transition - an
InitProducerId, the first AddPartitionsToTxn of a transaction and each one adding partitions, the
AddOffsetsToTxn, the EndTxn's Prepare*, the Complete* after the markers: 4-5 ZooKeeper writes per
transaction (Kafka: as many appends to __transaction_state, acks=all).

Coordinator choice: ``coordinator_for(transactional_id, live broker ids)``, the group coordinator's
rule (``sorted(ids)[crc32(id) % len(ids)]``); FindCoordinator(key_type=1) answers from this broker's
view of the live brokers, a broker that is not the coordinator answers NOT_COORDINATOR.

Fencing, as the group coordinator's (SPEC S11.4) - the pattern, on the transaction's own znode:

* **Taking an id over** reads the live brokers from ZooKeeper (not this broker's cache) and claims the
  id only if the rule names this broker there: the record is rewritten with its coordinator epoch
  bumped, conditional on the version read; that version is the coordinator's ``TxnLease``. An id
  with no znode yet is held at version -1: its first write creates the znode, and fails if another
  coordinator created it first.
* **Every write is conditional** on the lease's version: a deposed coordinator's write fails whole
  (NOT_COORDINATOR to the client; the id is unloaded). A write whose outcome is unknown (ZooKeeper
  unreachable past the retries) unloads the id too: the next request or scan reads storage again.
* **Markers carry the coordinator epoch**: a partition that saw a newer coordinator's marker refuses
  an older one (TRANSACTION_COORDINATOR_FENCED), and the sender gives up on that transaction.
* **A lost session unloads everything**; ids are claimed again on the next request or scan.
* **Prepared transactions are completed by whoever holds them**: a coordinator that loads an id in
  PrepareCommit/PrepareAbort sends its markers again, then writes Complete*. Markers are idempotent
  at the partition (same producer epoch and coordinator epoch), so a resend after a failover is safe.
* **Nothing is left behind by a crash**: every ``abort_interval_ms`` the coordinator lists the ids in
  ZooKeeper and takes over the ones the rule gives it, so an Ongoing transaction whose producer and
  coordinator both died is aborted at its timeout, and a prepared one is completed, without waiting
  for a client to come back (Kafka loads whole __transaction_state partitions on election).

The async API (transport-free: the gRPC servicer and the Kafka wire listener map onto it; the caller
authorizes)::

    find_coordinator(transactional_id) -> (error_code, broker_id)
    init_producer_id(transactional_id, timeout_ms, expected=(pid, epoch) | None) -> Answer
    add_partitions(transactional_id, producer_id, producer_epoch, [(topic, partition)]) -> error_code
    add_offsets(transactional_id, producer_id, producer_epoch, group_id) -> error_code
    verify_partitions(transactional_id, producer_id, producer_epoch, [(topic, partition)]) -> {partition: error}
    end_txn(transactional_id, producer_id, producer_epoch, commit) -> error_code

Collaborators injected: ``new_producer_id`` (the broker's producer id block allocator),
``send_markers(coordinator_epoch, job, partitions) -> {partition: error}`` (WriteTxnMarkers to each
partition's leader; a partition of a deleted topic answers NONE: it needs no marker), and
``complete_group(group_id, coordinator_epoch, job) -> error`` (the transaction's outcome for the
group's pending TxnOffsetCommit offsets: ``marker_sender.TxnMarkerSender``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from broker.coordinator.group.group_state import coordinator_for
from broker.coordinator.transaction.txn_state import (
    DEFAULT_ABORT_INTERVAL_MS,
    NONE,
    Answer,
    Kind,
    MarkerJob,
    Outcome,
    TopicPartition,
    TransactionStateMachine,
    Transit,
    TxnLimits,
    TxnMetadata,
    TxnState,
    is_epoch_exhausted,
)
from proto import errors
from zk.client import KafkaZkClient
from zk.data import TransactionRecord, TxnLease

log = logging.getLogger(__name__)

NOT_COORDINATOR: Final = errors.NotCoordinatorError.code
COORDINATOR_NOT_AVAILABLE: Final = errors.CoordinatorNotAvailableError.code
INVALID_REQUEST: Final = errors.InvalidRequestError.code

# Kafka has no bound on a transactional id; one is needed (SPEC S13): it names a znode.
MAX_TRANSACTIONAL_ID_LENGTH: Final = 1000
# Partitions one transaction may hold (its record must fit in one znode, SPEC S13.4).
MAX_TXN_PARTITIONS: Final = 10_000

# WriteTxnMarkers answers (Kafka's TransactionMarkerRequestCompletionHandler): a newer coordinator
# or producer epoch wrote there - stop sending for this transaction; the partition cannot take a
# marker at all - nothing to write there; anything else is retried (leader moved, not enough
# replicas, timed out...).
MARKERS_FENCED: Final = frozenset({errors.InvalidProducerEpochError.code, errors.ProducerFencedError.code,
                                   errors.TransactionCoordinatorFencedError.code})
MARKERS_UNNEEDED: Final = frozenset({43,  # UNSUPPORTED_FOR_MESSAGE_FORMAT
                                     errors.UnsupportedVersionError.code})

SendMarkers = Callable[[int, MarkerJob, list[TopicPartition]], Awaitable[dict[TopicPartition, int]]]
CompleteGroup = Callable[[str, int, MarkerJob], Awaitable[int]]
Offload = Callable[..., Awaitable[Any]]


def now_ms() -> int:
    return int(time.time() * 1000)


def to_record(meta: TxnMetadata, lease: TxnLease) -> TransactionRecord:
    return TransactionRecord(lease.broker_id, lease.coordinator_epoch, meta.producer_id, meta.last_producer_id,
                             meta.producer_epoch, meta.last_producer_epoch, meta.timeout_ms, meta.state.value,
                             tuple(sorted(meta.partitions)), tuple(sorted(meta.groups)), meta.txn_start_ms,
                             meta.last_update_ms)


def from_record(transactional_id: str, rec: TransactionRecord) -> TxnMetadata:
    return TxnMetadata(transactional_id, rec.producer_id, rec.last_producer_id, rec.producer_epoch,
                       rec.last_producer_epoch, rec.timeout_ms, TxnState(rec.state), frozenset(rec.partitions),
                       frozenset(rec.groups), rec.txn_start_ms, rec.last_update_ms)


class TxnOwnership:
    """The coordinator's ZooKeeper half, synchronous (run off the event loop by the shell, called
    directly by the simulation): claim, fenced writes. See the module docstring."""

    def __init__(self, broker_id: int, zk: KafkaZkClient) -> None:
        self.broker_id = broker_id
        self.zk = zk

    def take_over(self, transactional_id: str) -> tuple[TxnLease, TxnMetadata | None] | None:
        """None when ZooKeeper's live brokers name another coordinator."""
        if coordinator_for(transactional_id, self.zk.get_registered_broker_ids()) != self.broker_id:
            return None
        lease, rec = self.zk.claim_transaction(transactional_id, self.broker_id)
        return lease, None if rec is None else from_record(transactional_id, rec)

    def write(self, lease: TxnLease, meta: TxnMetadata) -> TxnLease:
        """Raises NotCoordinatorError when fenced (nothing written)."""
        if meta.state is TxnState.DEAD:
            self.zk.delete_transaction(lease)
            return lease
        return self.zk.write_transaction(lease, to_record(meta, lease))

    def still_owner(self, lease: TxnLease) -> bool:
        return self.zk.transaction_lease_valid(lease)

    def owned_ids(self) -> list[str]:
        """The ids stored in ZooKeeper whose coordinator, by ZooKeeper's live brokers, is this broker."""
        live = self.zk.get_registered_broker_ids()
        return [t for t in self.zk.list_transactional_ids() if coordinator_for(t, live) == self.broker_id]


class TransactionCoordinator:
    def __init__(self, broker_id: int, zk: KafkaZkClient, live_brokers: Callable[[], list[int]],
                 new_producer_id: Callable[[], Awaitable[int]], send_markers: SendMarkers,
                 complete_group: CompleteGroup | None = None, limits: TxnLimits | None = None,
                 clock: Callable[[], int] = now_ms, offload: Offload | None = None,
                 abort_interval_ms: int = DEFAULT_ABORT_INTERVAL_MS,
                 retry_backoff_ms: int = 100) -> None:
        self.broker_id = broker_id
        self.live_brokers = live_brokers
        self.core = TransactionStateMachine(limits)
        self.ownership = TxnOwnership(broker_id, zk)
        self.new_producer_id = new_producer_id
        self.send_markers = send_markers
        self.complete_group = complete_group
        self.clock = clock
        self.offload: Offload = offload or asyncio.to_thread
        self.abort_interval_ms = abort_interval_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.leases: dict[str, TxnLease] = {}
        self._loading: dict[str, asyncio.Future[int]] = {}
        # Bumped by every session loss: a load begun in an older session must not install its lease.
        self._session_generation = 0
        self._senders: dict[str, asyncio.Task[None]] = {}
        self._task: asyncio.Task[None] | None = None
        self._next_scan_ms = 0

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def shutdown(self) -> None:
        tasks = [t for t in (self._task, *self._senders.values()) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._senders.clear()
        self.core.unload_all()
        self.leases.clear()

    def on_session_lost(self) -> None:
        """The ZooKeeper session is gone: every lease may have been taken over. Event loop only."""
        self._session_generation += 1
        if self.leases:
            log.warning("transactional ids %s: ZooKeeper session lost; unloaded until claimed again",
                        ", ".join(sorted(self.leases)[:10]))
        for tid in list(self.leases):
            self._unload(tid)
        self.core.unload_all()

    def _unload(self, transactional_id: str) -> None:
        self.leases.pop(transactional_id, None)
        self.core.unload(transactional_id)
        sender = self._senders.pop(transactional_id, None)
        if sender is not None and sender is not asyncio.current_task():
            sender.cancel()

    async def _run(self) -> None:
        """Abort timed-out transactions, expire idle ids, and every abort interval take over the ids
        this broker should coordinate (and drop those it no longer should)."""
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction coordinator tick failed")
            deadline = self.core.next_timeout_ms()
            wait_ms = self.abort_interval_ms if deadline is None else min(
                self.abort_interval_ms, max(0, deadline - self.clock()))
            await asyncio.sleep(max(wait_ms, 10) / 1000.0)

    async def tick(self) -> None:
        now = self.clock()
        for transit in self.core.timed_out(now):
            log.info("transactional id %s: transaction timed out after %d ms; aborting it",
                     transit.transactional_id, transit.after.timeout_ms)
            self._begin_background(transit)
        for transit in self.core.expired(now):
            self._begin_background(transit)
        if now >= self._next_scan_ms:
            self._next_scan_ms = now + self.abort_interval_ms
            await self.scan()

    async def scan(self) -> None:
        for tid in list(self.leases):
            if not self.is_coordinator(tid):
                log.info("transactional id %s: no longer its coordinator; unloading", tid)
                self._unload(tid)
        try:
            owned = await self.offload(self.ownership.owned_ids)
        except Exception as e:
            log.warning("cannot list the transactional ids in ZooKeeper: %s", e)
            return
        for tid in owned:
            if tid not in self.leases and self.is_coordinator(tid):
                await self._ensure_loaded(tid)

    def _begin_background(self, transit: Transit) -> None:
        asyncio.get_running_loop().create_task(self._decide(transit))

    # ------------------------------------------------------------ plumbing

    def coordinator_of(self, transactional_id: str) -> int:
        return coordinator_for(transactional_id, self.live_brokers())

    def is_coordinator(self, transactional_id: str) -> bool:
        return self.coordinator_of(transactional_id) == self.broker_id

    def find_coordinator(self, transactional_id: str) -> tuple[int, int]:
        if not transactional_id or len(transactional_id) > MAX_TRANSACTIONAL_ID_LENGTH:
            return INVALID_REQUEST, -1
        owner = self.coordinator_of(transactional_id)
        return (COORDINATOR_NOT_AVAILABLE, -1) if owner < 0 else (NONE, owner)

    async def _ensure_loaded(self, transactional_id: str) -> int:
        """NONE once the id is claimed (its lease held) and its state loaded."""
        if not transactional_id or len(transactional_id) > MAX_TRANSACTIONAL_ID_LENGTH:
            return INVALID_REQUEST
        if transactional_id in self.leases:
            return NONE
        owner = self.coordinator_of(transactional_id)
        if owner != self.broker_id:
            return COORDINATOR_NOT_AVAILABLE if owner < 0 else NOT_COORDINATOR
        pending = self._loading.get(transactional_id)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._loading[transactional_id] = fut
        generation = self._session_generation
        try:
            code = await self._load(transactional_id, generation)
        except BaseException:
            code = COORDINATOR_NOT_AVAILABLE
            raise
        finally:
            self._loading.pop(transactional_id, None)
            if not fut.done():
                fut.set_result(code)
        return code

    async def _load(self, transactional_id: str, generation: int) -> int:
        try:
            taken = await self.offload(self.ownership.take_over, transactional_id)
        except errors.NotCoordinatorError:
            return NOT_COORDINATOR
        except Exception as e:
            log.warning("transactional id %s: cannot take it over: %s", transactional_id, e)
            return COORDINATOR_NOT_AVAILABLE
        if taken is None:
            return NOT_COORDINATOR
        if generation != self._session_generation:
            return COORDINATOR_NOT_AVAILABLE  # the session was lost meanwhile: the claim may be void
        lease, meta = taken
        self.leases[transactional_id] = lease
        self.core.unload(transactional_id)
        if meta is not None:
            outcome = self.core.load(meta, self.clock())
            if outcome.markers is not None and outcome.complete is not None:
                log.info("transactional id %s: loaded in %s; completing it", transactional_id, meta.state.value)
                self._start_sender(outcome.markers, outcome.complete)
        return NONE

    async def _persist(self, transit: Transit) -> Outcome:
        """Write ``transit`` under the id's lease; the core learns the write's fate."""
        tid = transit.transactional_id
        lease = self.leases.get(tid)
        if lease is None:
            return self.core.transit_done(transit, NOT_COORDINATOR, self.clock())
        try:
            new_lease = await self.offload(self.ownership.write, lease, transit.after)
        except errors.NotCoordinatorError:
            log.info("transactional id %s: fenced by a newer coordinator; unloading", tid)
            outcome = self.core.transit_done(transit, NOT_COORDINATOR, self.clock())
            if self.leases.get(tid) is lease:
                self._unload(tid)
            return Outcome(answer=outcome.answer)
        except Exception as e:
            # Unknown outcome (the write may have landed): read storage again on the next request.
            log.warning("transactional id %s: cannot write its state: %s", tid, e)
            outcome = self.core.transit_done(transit, COORDINATOR_NOT_AVAILABLE, self.clock())
            if self.leases.get(tid) is lease:
                self._unload(tid)
            return Outcome(answer=outcome.answer)
        if self.leases.get(tid) is not lease:
            return self.core.transit_done(transit, NOT_COORDINATOR, self.clock())
        self.leases[tid] = new_lease
        outcome = self.core.transit_done(transit, NONE, self.clock())
        if transit.kind is Kind.DEAD:
            self.leases.pop(tid, None)
        return outcome

    async def _decide(self, decision: Answer | Transit, transactional_id: str = "") -> Answer:
        if isinstance(decision, Answer):
            if decision.error == NONE and transactional_id:
                return await self._confirmed(transactional_id, decision)
            return decision
        outcome = await self._persist(decision)
        if outcome.markers is not None and outcome.complete is not None:
            self._start_sender(outcome.markers, outcome.complete)
        return outcome.answer or Answer(NONE)

    async def _confirmed(self, transactional_id: str, answer: Answer) -> Answer:
        """A success answered from the cache alone (partitions already in the transaction, a retried
        EndTxn of a completed one) is given only once a check-only multi confirms the lease: a deposed
        coordinator that still believes an old state must not tell a producer to go on producing
        into a transaction the new coordinator has finished (its records would be closed by the
        wrong markers) - the group coordinator's fenced reads, SPEC S11.4."""
        lease = self.leases.get(transactional_id)
        if lease is None:
            return Answer(NOT_COORDINATOR)
        try:
            valid = await self.offload(self.ownership.still_owner, lease)
        except Exception:
            return Answer(COORDINATOR_NOT_AVAILABLE)
        if not valid:
            if self.leases.get(transactional_id) is lease:
                log.info("transactional id %s: fenced by a newer coordinator; unloading", transactional_id)
                self._unload(transactional_id)
            return Answer(NOT_COORDINATOR)
        return answer

    # ------------------------------------------------------------ requests

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None = None) -> Answer:
        code = await self._ensure_loaded(transactional_id)
        if code != NONE:
            return Answer(code)
        if not self.core.validate_timeout(timeout_ms):
            return Answer(errors.InvalidTransactionTimeoutError.code)
        # A fresh producer id (a new transactional id, an exhausted epoch) is allocated first - it may
        # take a ZooKeeper write - and the decision taken after it, on the state as it is then.
        fresh: int | None = None
        for _attempt in range(3):
            meta = self.core.get(transactional_id)
            if (meta is None or is_epoch_exhausted(meta.producer_epoch)) and fresh is None:
                try:
                    fresh = await self.new_producer_id()
                except Exception as e:
                    log.warning("cannot allocate a producer id: %s", e)
                    return Answer(COORDINATOR_NOT_AVAILABLE)
                if transactional_id not in self.leases:
                    return Answer(NOT_COORDINATOR)
                continue

            def take(fresh: int | None = fresh) -> int:
                if fresh is None:
                    raise AssertionError("a producer id was wanted that the shell did not foresee")
                return fresh

            return await self._decide(self.core.init_producer_id(
                transactional_id, timeout_ms, self.clock(), take, expected))
        return Answer(errors.ConcurrentTransactionsError.code)

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[TopicPartition]) -> int:
        code = await self._ensure_loaded(transactional_id)
        if code != NONE:
            return code
        meta = self.core.get(transactional_id)
        if meta is not None and len(meta.partitions | set(partitions)) > MAX_TXN_PARTITIONS:
            return errors.InvalidRequestError.code
        decision = self.core.add_partitions(transactional_id, producer_id, producer_epoch, partitions, self.clock())
        return (await self._decide(decision, transactional_id)).error

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> int:
        code = await self._ensure_loaded(transactional_id)
        if code != NONE:
            return code
        decision = self.core.add_partitions(transactional_id, producer_id, producer_epoch, (), self.clock(),
                                            groups=(group_id,))
        return (await self._decide(decision, transactional_id)).error

    async def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """AddPartitionsToTxn verify_only (KIP-890 part 1), for a partition leader: {partition: error}
        from the installed state - no transit, nothing written. An id this coordinator has not loaded
        is loaded first, as for any request (after a failover: the takeover the producer's next
        request would make anyway; an id with no stored state costs one ZooKeeper read)."""
        code = await self._ensure_loaded(transactional_id)
        if code != NONE:
            return dict.fromkeys(partitions, code)
        return self.core.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> int:
        code = await self._ensure_loaded(transactional_id)
        if code != NONE:
            return code
        decision = self.core.end_txn(transactional_id, producer_id, producer_epoch, commit, self.clock())
        return (await self._decide(decision, transactional_id)).error

    # ------------------------------------------------------------ markers (TransactionMarkerChannelManager)

    def _start_sender(self, job: MarkerJob, complete: Transit) -> None:
        old = self._senders.pop(job.transactional_id, None)
        if old is not None:
            old.cancel()
        task = asyncio.get_running_loop().create_task(self._send_and_complete(job, complete))
        self._senders[job.transactional_id] = task

    async def _send_and_complete(self, job: MarkerJob, complete: Transit) -> None:
        tid = job.transactional_id
        try:
            if await self._write_markers(job, complete):
                await self._complete(complete)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("transactional id %s: marker sender failed", tid)
            if self.core.pending(tid) is complete:
                self._unload(tid)
        finally:
            if self._senders.get(tid) is asyncio.current_task():
                del self._senders[tid]

    async def _write_markers(self, job: MarkerJob, complete: Transit) -> bool:
        """Until every partition has its marker and every group the outcome; False when this
        coordinator must stop (the id was unloaded, or a newer coordinator or epoch wrote there)."""
        tid = job.transactional_id
        remaining = set(job.partitions)
        groups = set(job.groups)
        backoff_ms = self.retry_backoff_ms
        while remaining or groups:
            lease = self.leases.get(tid)
            if lease is None or self.core.pending(tid) is not complete:
                return False
            if remaining:
                try:
                    results = await self.send_markers(lease.coordinator_epoch, job, sorted(remaining))
                except Exception as e:
                    log.info("transactional id %s: markers not sent: %s", tid, e)
                    results = {}
                for tp, error in results.items():
                    if error == NONE or error in MARKERS_UNNEEDED:
                        remaining.discard(tp)
                    elif error in MARKERS_FENCED:
                        log.info("transactional id %s: %s refused the marker (%s); a newer coordinator "
                                 "owns the transaction", tid, tp, errors.for_code(error).name)
                        if self.core.pending(tid) is complete:
                            self._unload(tid)
                        return False
            if not remaining and groups and self.complete_group is not None:
                for group in sorted(groups):
                    try:
                        error = await self.complete_group(group, lease.coordinator_epoch, job)
                    except Exception as e:
                        log.info("transactional id %s: group %s not told: %s", tid, group, e)
                        continue
                    if error == NONE:
                        groups.discard(group)
            elif self.complete_group is None:
                groups.clear()
            if remaining or groups:
                await asyncio.sleep(backoff_ms / 1000.0)
                backoff_ms = min(backoff_ms * 2, 1000)
        return True

    async def _complete(self, complete: Transit) -> None:
        if self.core.pending(complete.transactional_id) is not complete:
            return
        outcome = await self._persist(complete)
        if outcome.answer is not None and outcome.answer.error == NONE:
            log.debug("transactional id %s: %s", complete.transactional_id, complete.after.state.value)
