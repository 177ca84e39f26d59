"""KIP-890 part 1 (issue 31: "transactional batches accepted only from the producer id/epoch the
coordinator registered for that partition"), the pure decisions: the coordinator's answer to a
verification (txn_state.verify_partitions), the leader's - whether a batch needs one and whether an
append may open a transaction (producer_state's verification guards, the log's check) - and the
request-level rules and error translation (broker/replication/txn_verification.py)."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.coordinator.transaction.txn_state import (
    CONCURRENT_TRANSACTIONS,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_REQUEST,
    INVALID_TXN_STATE,
    NONE,
    PRODUCER_FENCED,
    Answer,
    TransactionStateMachine,
    Transit,
    TxnState,
)
from broker.log.config import LogConfig
from broker.log.log import Log
from broker.log.producer_state import MAX_VERIFICATIONS, ProducerStateManager
from broker.replication.txn_verification import (
    MIXED,
    TxnProducer,
    judge_request,
    produce_error,
    transactional_producer,
)
from proto import errors
from proto.record_batch import Record, TxnMarker, encode_batch, encode_control_batch, iter_headers

TID = "app"
T0, T1, T2 = ("t", 0), ("t", 1), ("t", 2)
NOW = 1_700_000_000_000


def pids() -> itertools.count[int]:
    return itertools.count(1000)


def done(core: TransactionStateMachine, decision: Answer | Transit, now: int = 0) -> Answer | None:
    assert isinstance(decision, Transit), decision
    return core.transit_done(decision, NONE, now).answer


def registered() -> tuple[TransactionStateMachine, int, int]:
    core, ids = TransactionStateMachine(), pids()
    out = done(core, core.init_producer_id(TID, 60_000, 0, lambda: next(ids)))
    assert out is not None and out.error == NONE
    return core, out.producer_id, out.producer_epoch


# ------------------------------------------------------------------ the coordinator's answer


def test_the_coordinator_verifies_only_partitions_of_the_ongoing_transaction_of_that_producer() -> None:
    core, pid, epoch = registered()
    # No transaction yet (Empty): nothing is in it.
    assert core.verify_partitions(TID, pid, epoch, [T0]) == {T0: INVALID_TXN_STATE}
    assert done(core, core.add_partitions(TID, pid, epoch, [T0, T1], 1)) == Answer(NONE)
    assert core.verify_partitions(TID, pid, epoch, [T0, T1, T2]) == {T0: NONE, T1: NONE, T2: INVALID_TXN_STATE}
    # The whole set is refused for another producer id or epoch, or an unknown or empty id.
    assert core.verify_partitions(TID, pid + 1, epoch, [T0, T1]) == dict.fromkeys([T0, T1], INVALID_PRODUCER_ID_MAPPING)
    assert core.verify_partitions(TID, pid, epoch + 1, [T0]) == {T0: PRODUCER_FENCED}
    assert core.verify_partitions(TID, pid, epoch - 1, [T0]) == {T0: PRODUCER_FENCED}
    assert core.verify_partitions("other", pid, epoch, [T0]) == {T0: INVALID_PRODUCER_ID_MAPPING}
    assert core.verify_partitions("", pid, epoch, [T0]) == {T0: INVALID_REQUEST}
    # Being committed: the markers are on their way (retriable at the leader); then over.
    end = core.end_txn(TID, pid, epoch, True, 2)
    assert isinstance(end, Transit)
    assert core.verify_partitions(TID, pid, epoch, [T0]) == {T0: NONE}  # a pending transit is not looked at
    outcome = core.transit_done(end, NONE, 2)
    assert core.verify_partitions(TID, pid, epoch, [T0]) == {T0: CONCURRENT_TRANSACTIONS}
    assert outcome.complete is not None
    core.transit_done(outcome.complete, NONE, 3)
    assert core.get(TID).state is TxnState.COMPLETE_COMMIT  # type: ignore[union-attr]
    assert core.verify_partitions(TID, pid, epoch, [T0, T1]) == {T0: INVALID_TXN_STATE, T1: INVALID_TXN_STATE}


def test_a_partition_being_added_is_not_verified_until_the_add_is_durable() -> None:
    core, pid, epoch = registered()
    assert done(core, core.add_partitions(TID, pid, epoch, [T0], 1)) == Answer(NONE)
    add = core.add_partitions(TID, pid, epoch, [T1], 2)
    assert isinstance(add, Transit)
    assert core.verify_partitions(TID, pid, epoch, [T0, T1]) == {T0: NONE, T1: INVALID_TXN_STATE}
    core.transit_done(add, NONE, 2)
    assert core.verify_partitions(TID, pid, epoch, [T0, T1]) == {T0: NONE, T1: NONE}


def test_a_fenced_transaction_is_no_longer_verified() -> None:
    core, pid, epoch = registered()
    assert done(core, core.add_partitions(TID, pid, epoch, [T0], 1)) == Answer(NONE)
    (fence,) = core.timed_out(10**9)
    core.transit_done(fence, NONE, 10**9)
    assert core.verify_partitions(TID, pid, epoch, [T0]) == {T0: PRODUCER_FENCED}


ops = st.lists(st.tuples(st.sampled_from(["add", "commit", "abort", "init", "complete", "fail"]),
                         st.sampled_from([T0, T1, T2]), st.booleans()), max_size=25)


def step(core: TransactionStateMachine, op: str, tp: tuple[str, int], now: int, ids: itertools.count[int]) \
        -> Answer | Transit | None:
    """One client request or write outcome (None: a write's fate was reported)."""
    meta = core.get(TID)
    assert meta is not None
    pid, epoch = meta.producer_id, meta.producer_epoch
    if op in ("complete", "fail"):
        pending = core.pending(TID)
        if pending is not None:
            core.transit_done(pending, NONE if op == "complete" else errors.NotCoordinatorError.code, now)
        return None
    if op == "add":
        return core.add_partitions(TID, pid, epoch, [tp], now)
    if op in ("commit", "abort"):
        return core.end_txn(TID, pid, epoch, op == "commit", now)
    return core.init_producer_id(TID, 60_000, now, lambda: next(ids))


@settings(max_examples=200, deadline=None)
@given(ops, st.sets(st.sampled_from([T0, T1, T2]), min_size=1), st.integers(-1, 1))
def test_verification_is_read_only_and_says_none_exactly_for_the_ongoing_transactions_partitions(
        steps: list[tuple[str, tuple[str, int], bool]], asked: set[tuple[str, int]], epoch_delta: int) -> None:
    core, _pid, _epoch = registered()
    ids = pids()
    for now, (op, tp, complete) in enumerate(steps, start=1):
        decision = step(core, op, tp, now, ids)
        if isinstance(decision, Transit):
            out = core.transit_done(decision, NONE, now)
            if out.complete is not None and complete:  # the markers written: Complete*
                core.transit_done(out.complete, NONE, now)
    meta, pending = core.get(TID), core.pending(TID)
    assert meta is not None
    asked_epoch = meta.producer_epoch + epoch_delta
    answer = core.verify_partitions(TID, meta.producer_id, asked_epoch, sorted(asked))
    assert core.get(TID) is meta and core.pending(TID) is pending  # nothing changed
    for tp in asked:
        verified = (meta.state is TxnState.ONGOING and asked_epoch == meta.producer_epoch
                    and tp in meta.partitions)
        assert (answer[tp] == NONE) == verified, (meta, tp, answer)


# ------------------------------------------------------------------ the leader: producer state


def txn_batch(pid: int, seq: int, epoch: int = 0, n: int = 1, txn: bool = True) -> bytes:
    return encode_batch([Record(value=f"p{pid}-{seq + i}".encode(), timestamp=NOW) for i in range(n)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn)


def header(buf: bytes):  # type: ignore[no-untyped-def]
    return next(iter_headers(buf))[1]


def test_a_producer_with_a_transaction_open_here_needs_no_verification() -> None:
    state = ProducerStateManager()
    guard = state.maybe_start_verification(7, NOW, 1000)
    assert guard is not None
    # Concurrent requests of the producer share its pending guard; another producer gets its own.
    assert state.maybe_start_verification(7, NOW + 1, 1000) is guard
    assert state.maybe_start_verification(8, NOW, 1000) is not guard
    state.check_verified(header(txn_batch(7, 0)), guard)
    state.update(header(txn_batch(7, 0)), 0)  # the transaction opens: the guard is retired, the open
    assert state.verification_guard(7) is None  # transaction is the cache from now on
    assert state.maybe_start_verification(7, NOW, 1000) is None
    state.check_verified(header(txn_batch(7, 1)), None)


def test_an_unverified_transactional_batch_is_refused_and_plain_batches_never_need_it() -> None:
    state = ProducerStateManager()
    with pytest.raises(errors.InvalidTxnStateError):
        state.check_verified(header(txn_batch(7, 0)), None)
    other = state.maybe_start_verification(8, NOW, 1000)
    with pytest.raises(errors.InvalidTxnStateError):  # another producer's guard proves nothing
        state.check_verified(header(txn_batch(7, 0)), other)
    state.check_verified(header(txn_batch(7, 0, txn=False)), None)  # idempotent, not transactional
    state.check_verified(header(encode_control_batch(producer_id=7, producer_epoch=0, commit=True, coordinator_epoch=0, timestamp=NOW)), None)


def test_a_marker_voids_a_verification_begun_before_it_the_aba_race() -> None:
    """Verified, then the transaction is aborted (its marker written here), then the stale answer:
    the guard taken before the marker is not the producer's any more."""
    state = ProducerStateManager()
    stale = state.maybe_start_verification(7, NOW, 1000)
    state.update_marker(7, 0, TxnMarker(False, 0), 0, NOW)
    with pytest.raises(errors.InvalidTxnStateError):
        state.check_verified(header(txn_batch(7, 0)), stale)
    fresh = state.maybe_start_verification(7, NOW, 1000)
    assert fresh is not None and fresh is not stale
    state.check_verified(header(txn_batch(7, 0)), fresh)


def test_guards_expire_and_are_bounded() -> None:
    """SPEC S13.4: the verifications a partition keeps pending are bounded; beyond, a retriable refusal."""
    state = ProducerStateManager()
    old = state.maybe_start_verification(1, NOW, 1000)
    assert state.maybe_start_verification(2, NOW + 999, 1000) is not None
    assert state.verification_guard(1) is old
    assert state.maybe_start_verification(3, NOW + 1000, 1000) is not None  # 1 expired meanwhile
    assert state.verification_guard(1) is None and state.verification_guard(2) is not None
    with pytest.raises(errors.InvalidTxnStateError):
        state.check_verified(header(txn_batch(1, 0)), old)
    for pid in range(10, 10 + MAX_VERIFICATIONS - 2):
        state.maybe_start_verification(pid, NOW + 1000, 1000)
    with pytest.raises(errors.NotEnoughReplicasError):  # retriable: verifications complete or expire
        state.maybe_start_verification(99_999, NOW + 1000, 1000)
    assert state.maybe_start_verification(99_999, NOW + 2000, 1000) is not None


# ------------------------------------------------------------------ the leader: the log's append


def open_log(path: Path) -> Log:
    return Log.open(path, "t", 0, LogConfig(), now_ms=NOW)


def test_the_log_opens_a_transaction_only_with_the_producers_current_guard() -> None:
    with tempfile.TemporaryDirectory() as d:
        log = open_log(Path(d))
        with pytest.raises(errors.InvalidTxnStateError):
            log.append_as_leader(txn_batch(7, 0), 0, NOW, verify_txn=True)
        assert log.log_end_offset == 0 and log.producer_state.ongoing == {}
        guard = log.producer_state.maybe_start_verification(7, NOW, 1000)
        log.append_as_leader(txn_batch(7, 0, n=2), 0, NOW, verify_txn=True, verification_guard=guard)
        log.append_as_leader(txn_batch(7, 2), 0, NOW, verify_txn=True)  # open here: no guard needed
        assert log.log_end_offset == 3 and log.producer_state.ongoing == {7: 0}
        log.append_txn_marker(7, 0, False, 0, 0, NOW)  # aborted: offset 3
        # A retry of a batch already written is answered its offsets (the duplicate check comes first).
        dup = log.append_as_leader(txn_batch(7, 2), 0, NOW, verify_txn=True)
        assert dup.duplicate and dup.first_offset == 2
        # The next batch of the aborted transaction needs a verification again - the old guard is void.
        with pytest.raises(errors.InvalidTxnStateError):
            log.append_as_leader(txn_batch(7, 3), 0, NOW, verify_txn=True, verification_guard=guard)
        assert log.log_end_offset == 4 and log.producer_state.ongoing == {}
        # Without verification (transaction.partition.verification.enable=false): Kafka 2.8's rules.
        log.append_as_leader(txn_batch(7, 3), 0, NOW)
        assert log.producer_state.ongoing == {7: 4}


# ------------------------------------------------------------------ the request-level rules


def test_the_peek_finds_the_transactional_producer_of_a_partitions_batches() -> None:
    assert transactional_producer(b"") is None
    assert transactional_producer(txn_batch(7, 0, txn=False)) is None
    assert transactional_producer(encode_batch([Record(value=b"x", timestamp=NOW)])) is None
    assert transactional_producer(encode_control_batch(producer_id=7, producer_epoch=0, commit=True, coordinator_epoch=0, timestamp=NOW)) is None
    assert transactional_producer(txn_batch(7, 0, epoch=3)) == TxnProducer(7, 3)
    assert transactional_producer(txn_batch(7, 0) + txn_batch(7, 1)) == TxnProducer(7, 0)
    assert transactional_producer(txn_batch(7, 0) + txn_batch(8, 0)) is MIXED
    assert transactional_producer(txn_batch(7, 0) + txn_batch(7, 1, epoch=1)) is MIXED
    assert transactional_producer(txn_batch(7, 0)[:40]) is None  # no whole header: not framed
    bad_length = bytearray(txn_batch(7, 0))
    bad_length[8:12] = (0).to_bytes(4, "big")
    assert transactional_producer(bytes(bad_length)) == TxnProducer(7, 0)  # the framing is validation's


batches = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.booleans()), max_size=4)


@settings(max_examples=200, deadline=None)
@given(batches)
def test_the_peek_agrees_with_the_batch_headers(spec: list[tuple[int, int, bool]]) -> None:
    buf = b"".join(txn_batch(pid, 0, epoch, txn=txn) for pid, epoch, txn in spec)
    producers = {(h.producer_id, h.producer_epoch) for _pos, h in iter_headers(buf) if h.is_transactional}
    peek = transactional_producer(buf)
    if not producers:
        assert peek is None
    elif len(producers) > 1:
        assert peek is MIXED
    else:
        assert peek == TxnProducer(*producers.pop())


def test_the_request_level_rules() -> None:
    p7, p8 = TxnProducer(7, 0), TxnProducer(8, 0)
    assert judge_request("", [None, None], True).refusal == NONE
    assert judge_request("", [None, p7], True).refusal == errors.TransactionalIdAuthorizationFailedError.code
    assert judge_request("", [p7], False).refusal == errors.TransactionalIdAuthorizationFailedError.code
    assert judge_request(TID, [p7, None, p7], True) == judge_request(TID, [p7], True)
    assert judge_request(TID, [p7], True).producer == p7
    assert judge_request(TID, [p7, p8], True).refusal == errors.InvalidProducerIdMappingError.code
    assert judge_request(TID, [MIXED], True).refusal == errors.InvalidProducerIdMappingError.code
    assert judge_request(TID, [p7, p8], False).refusal == NONE  # Kafka 2.8 without verification


def test_the_coordinators_answer_as_the_produce_says_it() -> None:
    assert produce_error(NONE) == (NONE, "")
    assert produce_error(INVALID_TXN_STATE) == (INVALID_TXN_STATE, "Partition was not added to the transaction")
    assert produce_error(errors.ClusterAuthorizationFailedError.code)[0] == INVALID_TXN_STATE
    assert produce_error(PRODUCER_FENCED)[0] == errors.InvalidProducerEpochError.code
    for retriable in (errors.NetworkError, errors.RequestTimedOutError, errors.NotCoordinatorError,
                      errors.CoordinatorNotAvailableError, errors.CoordinatorLoadInProgressError,
                      errors.ConcurrentTransactionsError):
        code, message = produce_error(retriable.code)
        assert code == errors.NotEnoughReplicasError.code and retriable.name in message
        assert errors.for_code(code).retriable
    assert produce_error(INVALID_PRODUCER_ID_MAPPING)[0] == INVALID_PRODUCER_ID_MAPPING
