"""The transaction coordinator's pure core (broker/coordinator/transaction/txn_state.py): every
transition of Kafka 2.8's TransactionCoordinator, and random operation sequences (hypothesis)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.coordinator.transaction.txn_state import (
    CONCURRENT_TRANSACTIONS,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_REQUEST,
    INVALID_TRANSACTION_TIMEOUT,
    INVALID_TXN_STATE,
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NONE,
    PRODUCER_FENCED,
    VALID_PREVIOUS,
    Answer,
    IllegalTransitionError,
    Kind,
    TransactionStateMachine,
    Transit,
    TxnLimits,
    TxnMetadata,
    TxnState,
)
from proto import errors

S = TxnState
TID = "app-1"
NOT_COORDINATOR = errors.NotCoordinatorError.code


class Pids:
    def __init__(self, start: int = 1000) -> None:
        self.counter = itertools.count(start)

    def __call__(self) -> int:
        return next(self.counter)


def done(core: TransactionStateMachine, decision: Answer | Transit, now: int = 0, error: int = NONE):
    """Write a transit successfully (or fail it with ``error``) and return the outcome."""
    assert isinstance(decision, Transit), decision
    return core.transit_done(decision, error, now)


def init(core: TransactionStateMachine, pids: Pids, now: int = 0, timeout: int = 60_000,
         expected: tuple[int, int] | None = None) -> tuple[int, int]:
    out = done(core, core.init_producer_id(TID, timeout, now, pids, expected), now)
    assert out.answer is not None and out.answer.error == NONE
    return out.answer.producer_id, out.answer.producer_epoch


def ongoing(core: TransactionStateMachine, pid: int, epoch: int, now: int = 0) -> None:
    out = done(core, core.add_partitions(TID, pid, epoch, [("t", 0), ("t", 1)], now), now)
    assert out.answer == Answer(NONE)


def test_new_transactional_id_gets_a_producer_id_at_epoch_0() -> None:
    core, pids = TransactionStateMachine(), Pids()
    assert init(core, pids) == (1000, 0)
    meta = core.get(TID)
    assert meta is not None and meta.state is S.EMPTY and meta.timeout_ms == 60_000


def test_init_bumps_the_epoch_and_old_epoch_is_fenced() -> None:
    core, pids = TransactionStateMachine(), Pids()
    pid, e0 = init(core, pids)
    pid2, e1 = init(core, pids)
    assert (pid2, e1) == (pid, e0 + 1)
    assert core.add_partitions(TID, pid, e0, [("t", 0)], 1) == Answer(PRODUCER_FENCED)
    assert core.end_txn(TID, pid, e0, True, 1) == Answer(PRODUCER_FENCED)
    assert core.add_partitions(TID, pid + 7, e1, [("t", 0)], 1) == Answer(INVALID_PRODUCER_ID_MAPPING)
    assert core.add_partitions("other", pid, e1, [("t", 0)], 1) == Answer(INVALID_PRODUCER_ID_MAPPING)


def test_timeout_is_bounded_by_transaction_max_timeout_ms() -> None:
    core = TransactionStateMachine(TxnLimits(max_timeout_ms=1000))
    assert core.init_producer_id(TID, 1001, 0, Pids()) == Answer(INVALID_TRANSACTION_TIMEOUT)
    assert core.init_producer_id(TID, 0, 0, Pids()) == Answer(INVALID_TRANSACTION_TIMEOUT)
    assert core.init_producer_id("", 100, 0, Pids()) == Answer(INVALID_REQUEST)
    assert isinstance(core.init_producer_id(TID, 1000, 0, Pids()), Transit)


def test_commit_prepares_answers_then_completes_after_markers() -> None:
    core, pids = TransactionStateMachine(), Pids()
    pid, epoch = init(core, pids)
    ongoing(core, pid, epoch, now=5)
    assert core.get(TID).txn_start_ms == 5
    end = core.end_txn(TID, pid, epoch, True, 9)
    assert isinstance(end, Transit) and end.after.state is S.PREPARE_COMMIT
    assert core.add_partitions(TID, pid, epoch, [("t", 0)], 9) == Answer(CONCURRENT_TRANSACTIONS)
    out = done(core, end, 9)
    assert out.answer == Answer(NONE)
    assert out.markers is not None and out.markers.commit and out.markers.partitions == {("t", 0), ("t", 1)}
    assert (out.markers.producer_id, out.markers.producer_epoch) == (pid, epoch)
    assert out.complete is not None and out.complete.after.state is S.COMPLETE_COMMIT
    # Prepared: retries of the same result wait, the other result is refused, InitProducerId waits.
    assert core.end_txn(TID, pid, epoch, True, 10) == Answer(CONCURRENT_TRANSACTIONS)
    assert core.init_producer_id(TID, 60_000, 10, pids) == Answer(CONCURRENT_TRANSACTIONS)
    assert done(core, out.complete, 11).answer == Answer(NONE)
    meta = core.get(TID)
    assert meta.state is S.COMPLETE_COMMIT and meta.partitions == frozenset()
    # A retried EndTxn after completion: NONE for the same result, INVALID_TXN_STATE for the other.
    assert core.end_txn(TID, pid, epoch, True, 12) == Answer(NONE)
    assert core.end_txn(TID, pid, epoch, False, 12) == Answer(INVALID_TXN_STATE)
    # The next transaction starts from CompleteCommit.
    ongoing(core, pid, epoch, now=20)
    assert core.get(TID).txn_start_ms == 20


def test_abort_and_end_txn_in_empty_is_invalid_state() -> None:
    core, pids = TransactionStateMachine(), Pids()
    pid, epoch = init(core, pids)
    assert core.end_txn(TID, pid, epoch, True, 1) == Answer(INVALID_TXN_STATE)
    ongoing(core, pid, epoch)
    out = done(core, core.end_txn(TID, pid, epoch, False, 2), 2)
    assert out.markers is not None and not out.markers.commit
    # Completing (markers in flight): every request waits, as Kafka's pending state makes it.
    assert core.end_txn(TID, pid, epoch, True, 3) == Answer(CONCURRENT_TRANSACTIONS)
    done(core, out.complete, 3)
    assert core.get(TID).state is S.COMPLETE_ABORT
    assert core.end_txn(TID, pid, epoch, False, 4) == Answer(NONE)


def test_add_partitions_already_in_the_transaction_answers_at_once() -> None:
    core, pids = TransactionStateMachine(), Pids()
    pid, epoch = init(core, pids)
    ongoing(core, pid, epoch)
    assert core.add_partitions(TID, pid, epoch, [("t", 1)], 3) == Answer(NONE)
    grown = core.add_partitions(TID, pid, epoch, [("u", 0)], 3, groups=["g"])
    assert isinstance(grown, Transit) and grown.after.partitions == {("t", 0), ("t", 1), ("u", 0)}
    assert grown.after.groups == {"g"} and grown.after.txn_start_ms == 0
    # A request meanwhile waits for the write.
    assert core.add_partitions(TID, pid, epoch, [("t", 1)], 3) == Answer(CONCURRENT_TRANSACTIONS)
    assert core.end_txn(TID, pid, epoch, True, 3) == Answer(CONCURRENT_TRANSACTIONS)


def test_init_on_ongoing_fences_by_aborting_under_a_bumped_epoch() -> None:
    core, pids = TransactionStateMachine(), Pids()
    pid, epoch = init(core, pids)
    ongoing(core, pid, epoch)
    fence = core.init_producer_id(TID, 60_000, 5, pids)
    assert isinstance(fence, Transit) and fence.kind is Kind.FENCE
    assert fence.after.state is S.PREPARE_ABORT and fence.after.producer_epoch == epoch + 1
    assert fence.after.last_producer_epoch == NO_PRODUCER_EPOCH
    out = done(core, fence, 5)
    assert out.answer == Answer(CONCURRENT_TRANSACTIONS)  # the fenced epoch is never handed out
    assert out.markers is not None and not out.markers.commit and out.markers.producer_epoch == epoch + 1
    # The zombie is fenced at once.
    assert core.add_partitions(TID, pid, epoch, [("t", 0)], 6) == Answer(PRODUCER_FENCED)
    assert core.end_txn(TID, pid, epoch, True, 6) == Answer(PRODUCER_FENCED)
    done(core, out.complete, 6)
    # The retry gets a second bump.
    assert init(core, pids, now=7) == (pid, epoch + 2)


def test_a_failed_fence_write_does_not_bump_twice() -> None:
    core, pids = TransactionStateMachine(), Pids()
    pid, epoch = init(core, pids)
    ongoing(core, pid, epoch)
    fence = core.init_producer_id(TID, 60_000, 5, pids)
    out = done(core, fence, 5, error=errors.CoordinatorNotAvailableError.code)
    assert out.answer == Answer(errors.CoordinatorNotAvailableError.code)
    assert core.get(TID).producer_epoch == epoch and core.get(TID).state is S.ONGOING
    again = core.init_producer_id(TID, 60_000, 6, pids)
    assert isinstance(again, Transit) and again.after.producer_epoch == epoch + 1


def test_timed_out_transaction_is_aborted_with_an_epoch_bump() -> None:
    core, pids = TransactionStateMachine(), Pids()
    pid, epoch = init(core, pids, timeout=100)
    ongoing(core, pid, epoch, now=1000)
    assert core.next_timeout_ms() == 1101
    assert core.timed_out(1100) == []
    [abort] = core.timed_out(1101)
    assert abort.kind is Kind.TIMEOUT and abort.after.state is S.PREPARE_ABORT
    assert abort.after.producer_epoch == epoch + 1
    assert core.timed_out(2000) == []  # pending: not twice
    out = done(core, abort, 1101)
    assert out.answer is None and out.markers is not None and not out.markers.commit
    assert core.end_txn(TID, pid, epoch, True, 1102) == Answer(PRODUCER_FENCED)
    done(core, out.complete, 1103)
    assert core.get(TID).state is S.COMPLETE_ABORT and core.next_timeout_ms() is None


def test_epoch_exhaustion_rotates_the_producer_id() -> None:
    core, pids = TransactionStateMachine(), Pids()
    core.load(TxnMetadata(TID, 7, -1, MAX_PRODUCER_EPOCH - 2, -1, 1000, S.EMPTY), 0)
    assert init(core, pids) == (7, MAX_PRODUCER_EPOCH - 1)
    assert init(core, pids) == (1000, 0)  # exhausted: a fresh producer id
    meta = core.get(TID)
    assert meta.last_producer_id == 7 and meta.last_producer_epoch == NO_PRODUCER_EPOCH


def test_kip360_expected_epoch_retry_and_fencing() -> None:
    core, pids = TransactionStateMachine(), Pids()
    pid, e0 = init(core, pids)
    assert init(core, pids, expected=(pid, e0)) == (pid, e0 + 1)
    # A retry of that bump (its answer lost) gets the same epoch again.
    assert init(core, pids, expected=(pid, e0)) == (pid, e0 + 1)
    assert core.get(TID).last_producer_epoch == e0
    # An epoch that is neither current nor last: fenced; another producer id: fenced.
    assert core.init_producer_id(TID, 1000, 1, pids, (pid, e0 + 5)) == Answer(PRODUCER_FENCED)
    assert core.init_producer_id(TID, 1000, 1, pids, (pid + 1, e0)) == Answer(PRODUCER_FENCED)


def test_kip360_retry_after_a_rotation() -> None:
    core, pids = TransactionStateMachine(), Pids()
    core.load(TxnMetadata(TID, 7, -1, MAX_PRODUCER_EPOCH - 1, -1, 1000, S.EMPTY), 0)
    assert init(core, pids, expected=(7, MAX_PRODUCER_EPOCH - 1)) == (1000, 0)
    meta = core.get(TID)
    assert (meta.last_producer_id, meta.last_producer_epoch) == (7, MAX_PRODUCER_EPOCH - 1)
    # The producer retries with its old, exhausted id (the answer was lost): not fenced, and its
    # expected epoch is the last epoch, so it gets the same answer again.
    assert init(core, pids, expected=(7, MAX_PRODUCER_EPOCH - 1)) == (1000, 0)


def test_load_of_a_prepared_transaction_resends_markers_and_completes() -> None:
    core = TransactionStateMachine()
    meta = TxnMetadata(TID, 5, 5, 3, -1, 1000, S.PREPARE_COMMIT, frozenset({("t", 0)}), frozenset({"g"}), 10, 20)
    out = core.load(meta, 30)
    assert out.markers is not None and out.markers.commit and out.markers.groups == {"g"}
    assert out.complete is not None and core.pending(TID) is out.complete
    assert core.end_txn(TID, 5, 3, True, 31) == Answer(CONCURRENT_TRANSACTIONS)
    done(core, out.complete, 32)
    assert core.get(TID).state is S.COMPLETE_COMMIT


def test_a_failed_completion_stays_pending_for_a_retry() -> None:
    core = TransactionStateMachine()
    out = core.load(TxnMetadata(TID, 5, 5, 3, -1, 1000, S.PREPARE_ABORT, frozenset({("t", 0)})), 30)
    again = core.transit_done(out.complete, errors.CoordinatorNotAvailableError.code, 31)
    assert again.complete is out.complete and core.pending(TID) is out.complete
    done(core, again.complete, 32)
    assert core.get(TID).state is S.COMPLETE_ABORT


def test_failed_writes_leave_the_durable_state() -> None:
    core, pids = TransactionStateMachine(), Pids()
    pid, epoch = init(core, pids)
    add = core.add_partitions(TID, pid, epoch, [("t", 0)], 1)
    assert done(core, add, 1, error=NOT_COORDINATOR).answer == Answer(NOT_COORDINATOR)
    assert core.get(TID).state is S.EMPTY and core.pending(TID) is None
    # A transit overtaken by an unload changes nothing.
    add = core.add_partitions(TID, pid, epoch, [("t", 0)], 1)
    core.unload(TID)
    assert core.transit_done(add, NONE, 2).answer == Answer(NOT_COORDINATOR)
    assert not core.is_loaded(TID)


def test_expired_transactional_ids_die() -> None:
    core, pids = TransactionStateMachine(TxnLimits(id_expiration_ms=1000)), Pids()
    pid, epoch = init(core, pids, now=0)
    ongoing(core, pid, epoch, now=10)
    assert core.expired(5000) == []  # Ongoing: never expired (it times out instead)
    done(core, core.end_txn(TID, pid, epoch, True, 20), 20)
    out = done(core, core.pending(TID), 30)
    assert out.answer == Answer(NONE)
    assert core.expired(1019) == []  # the completion was stamped when it was prepared (20)
    [dead] = core.expired(1020)
    assert dead.after.state is S.DEAD
    done(core, dead, 1020)
    assert not core.is_loaded(TID)


def test_an_id_never_written_expires_without_a_write() -> None:
    """A first InitProducerId whose write failed leaves an epoch -1 entry (nothing of it is on the
    log): expiring it is forgetting it, not a Dead transit (found by the state machine below:
    Empty -> Dead kept epoch -1 and raised IllegalTransitionError)."""
    core, pids = TransactionStateMachine(TxnLimits(id_expiration_ms=1000)), Pids()
    first = core.init_producer_id(TID, 100, 0, pids)
    assert done(core, first, 0, error=NOT_COORDINATOR).answer == Answer(NOT_COORDINATOR)
    assert core.get(TID).producer_epoch == -1
    assert core.expired(999) == [] and core.is_loaded(TID)
    assert core.expired(1000) == []
    assert not core.is_loaded(TID)
    # The id starts afresh: a new producer id at epoch 0.
    assert init(core, pids, now=1001) == (1001, 0)


def test_state_table_refuses_what_kafka_refuses() -> None:
    meta = TxnMetadata(TID, 1, -1, 0, -1, 1000, S.EMPTY)
    with pytest.raises(IllegalTransitionError):
        meta.transition(S.PREPARE_COMMIT, 0)
    with pytest.raises(IllegalTransitionError):
        meta.transition(S.COMPLETE_ABORT, 0)
    for state, previous in VALID_PREVIOUS.items():
        for before in S:
            m = TxnMetadata(TID, 1, -1, 0, -1, 1000, before)
            if before in previous:
                assert m.transition(state, 0).state is state
            else:
                with pytest.raises(IllegalTransitionError):
                    m.transition(state, 0)


# ------------------------------------------------------------------ random operation sequences

class TxnMachine(RuleBasedStateMachine):
    """Producers (some zombies) and the coordinator's own timeouts act in random order; writes
    succeed or fail at random, in any order the shell might report them. Invariants: the state
    table holds, epochs never go down, a fenced epoch is never handed out, and every transaction
    is completed once, with the result it was prepared with."""

    def __init__(self) -> None:
        super().__init__()
        self.core = TransactionStateMachine(TxnLimits(max_timeout_ms=10_000, id_expiration_ms=50_000))
        self.pids = Pids()
        self.now = 0
        self.inflight: list[Transit] = []
        self.producers: list[tuple[int, int]] = []  # every (pid, epoch) ever handed out
        self.last_state: TxnState | None = None
        self.max_epoch: dict[int, int] = {}
        self.prepared: dict[tuple[int, int, int], bool] = {}  # (pid, epoch, start) -> commit
        self.completed: dict[tuple[int, int, int], bool] = {}
        self.fenced_epochs: set[tuple[int, int]] = set()

    def _take(self, decision: Answer | Transit) -> None:
        if isinstance(decision, Transit):
            self.inflight.append(decision)

    @rule(timeout=st.sampled_from([1, 100, 5_000, 10_000, 10_001]), use_expected=st.booleans())
    def init_producer(self, timeout: int, use_expected: bool) -> None:
        expected = self.producers[-1] if use_expected and self.producers else None
        self._take(self.core.init_producer_id(TID, timeout, self.now, self.pids, expected))

    @precondition(lambda self: self.producers)
    @rule(which=st.integers(0, 1000), parts=st.lists(st.integers(0, 3), max_size=3), group=st.booleans())
    def add(self, which: int, parts: list[int], group: bool) -> None:
        pid, epoch = self.producers[which % len(self.producers)]
        # A millisecond passes per request: the model keys a transaction by its start time, and two
        # transactions of one epoch begun in the same millisecond (an empty add, an abort, again)
        # would share a key.
        self.now += 1
        self._take(self.core.add_partitions(TID, pid, epoch, [("t", p) for p in parts], self.now,
                                            groups=["g"] if group else []))

    @precondition(lambda self: self.producers)
    @rule(which=st.integers(0, 1000), commit=st.booleans())
    def end(self, which: int, commit: bool) -> None:
        pid, epoch = self.producers[which % len(self.producers)]
        self._take(self.core.end_txn(TID, pid, epoch, commit, self.now))

    @rule(ms=st.integers(1, 6_000))
    def tick(self, ms: int) -> None:
        self.now += ms
        for t in self.core.timed_out(self.now):
            self.inflight.append(t)
        for t in self.core.expired(self.now):
            self.inflight.append(t)

    @precondition(lambda self: self.inflight)
    @rule(which=st.integers(0, 1000), ok=st.booleans())
    def write(self, which: int, ok: bool) -> None:
        transit = self.inflight.pop(which % len(self.inflight))
        is_current = self.core.pending(TID) is transit
        before = self.core.get(TID)
        out = self.core.transit_done(transit, NONE if ok else NOT_COORDINATOR, self.now)
        if not is_current:
            return
        after = transit.after
        if not ok:
            if out.complete is not None:
                self.inflight.append(out.complete)
            return
        if before is not None and after.state is not S.DEAD:
            assert before.state in VALID_PREVIOUS[after.state] or (
                transit.kind in (Kind.FENCE, Kind.TIMEOUT) and before.state is S.ONGOING)
        key = (after.producer_id, after.producer_epoch, after.txn_start_ms)
        if after.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            assert key not in self.prepared
            self.prepared[key] = after.state is S.PREPARE_COMMIT
            if transit.kind in (Kind.FENCE, Kind.TIMEOUT):
                self.fenced_epochs.add((after.producer_id, after.producer_epoch))
        if after.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            assert key in self.prepared and key not in self.completed, "completed once"
            self.completed[key] = after.state is S.COMPLETE_COMMIT
            assert self.completed[key] == self.prepared[key], "completed as prepared"
        if out.answer is not None and out.answer.producer_id >= 0:
            handed = (out.answer.producer_id, out.answer.producer_epoch)
            assert handed not in self.fenced_epochs, "a fencing epoch is never handed out"
            self.producers.append(handed)
        if out.complete is not None:
            self.inflight.append(out.complete)

    @invariant()
    def epochs_only_grow(self) -> None:
        meta = self.core.get(TID)
        if meta is None:
            return
        assert -1 <= meta.producer_epoch <= MAX_PRODUCER_EPOCH
        assert meta.producer_epoch >= self.max_epoch.get(meta.producer_id, -1)
        self.max_epoch[meta.producer_id] = meta.producer_epoch
        if meta.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            assert not meta.partitions and not meta.groups
        assert meta.state not in (S.DEAD, S.PREPARE_EPOCH_FENCE)

    @invariant()
    def pending_is_inflight(self) -> None:
        pending = self.core.pending(TID)
        assert pending is None or any(t is pending for t in self.inflight)


TxnMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)
test_random_operation_sequences = TxnMachine.TestCase


# ------------------------------------------------------------------ the stored record (zk/data.py)

def test_transaction_record_round_trips_and_refuses_garbage() -> None:
    from zk.data import CorruptZnodeError, TransactionRecord, TransactionsZNode

    rec = TransactionRecord(2, 5, 1000, 999, 3, 2, 60_000, "PrepareCommit", (("a", 1), ("a", 0), ("b", 7)),
                            ("g",), 10, 20)
    back = TransactionRecord.decode(rec.encode())
    assert back.partitions == (("a", 0), ("a", 1), ("b", 7)) and back.groups == ("g",)
    assert back == TransactionRecord(2, 5, 1000, 999, 3, 2, 60_000, "PrepareCommit",
                                     (("a", 0), ("a", 1), ("b", 7)), ("g",), 10, 20)
    for bad in (b"", b"{}", b'{"state": "Nope"}', rec.encode().replace(b'"PrepareCommit"', b'"Bogus"')):
        with pytest.raises(CorruptZnodeError):
            TransactionRecord.decode(bad)
    for tid in ("app-1", "a/b", ".", "..", "ünï cödé", "%41"):
        name = TransactionsZNode.encode_id(tid)
        assert "/" not in name and name not in (".", "..") and name.isascii()
        assert TransactionsZNode.decode_id(name) == tid
