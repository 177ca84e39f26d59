"""Transactions on the log (KIP-98, issue 31): validation of transactional and control batches, the
control batch codec, epoch and coordinator fencing of markers, the last stable offset and the
aborted transactions - against a model, on the leader, on a follower copying it, after a restart
(clean or crashed) and after truncation."""

from __future__ import annotations

import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.log.config import LogConfig
from broker.log.log import Log
from broker.log.producer_state import ProducerStateManager
from proto import errors
from proto import record_batch as rb
from proto.record_batch import Record, decode_txn_marker, encode_batch, encode_control_batch, read_header

NOW = 1_700_000_000_000
compiled = pytest.mark.skipif(not rb.COMPILED, reason="proto._codec is not built")


def tbatch(pid: int, seq: int, n: int = 2, epoch: int = 0, txn: bool = True) -> bytes:
    return encode_batch([Record(value=f"p{pid}-{seq + i}".encode(), timestamp=NOW) for i in range(n)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn)


def open_log(path: Path, **kw: object) -> Log:
    return Log.open(path, "t", 0, LogConfig(segment_bytes=600), now_ms=NOW, **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------ validation (both validators)


def _both(buf: bytes) -> list[object]:
    out: list[object] = []
    walks = [rb._validate_py] + ([rb._codec.validate] if rb.COMPILED else [])
    for walk in walks:
        try:
            walk(buf, True, 1 << 20, 0, rb.MAX_TIMESTAMP)
            out.append("ok")
        except errors.KafkaError as e:
            out.append(type(e))
    return out


def test_transactional_batches_are_accepted_from_producers() -> None:
    info = rb.validate_batches(tbatch(5, 0), deep=True)
    assert info.batches[0].attributes & rb.TRANSACTIONAL_MASK
    assert set(_both(tbatch(5, 0))) == {"ok"}


def test_a_transactional_batch_without_a_producer_id_is_refused() -> None:
    buf = encode_batch([Record(value=b"x", timestamp=NOW)], is_transactional=True)
    assert set(_both(buf)) == {errors.InvalidRecordError}


def test_control_batches_from_clients_are_refused_by_both_validators() -> None:
    marker = encode_control_batch(producer_id=5, producer_epoch=0, commit=True, coordinator_epoch=3, timestamp=NOW)
    assert set(_both(marker)) == {errors.InvalidRecordError}
    rb.validate_batches(marker)  # the shallow check (follower, recovery) takes it


@given(pid=st.integers(0, 2**63 - 1), epoch=st.integers(0, 2**15 - 1), commit=st.booleans(),
       coordinator_epoch=st.integers(0, 2**31 - 1))
def test_control_batches_round_trip_in_kafkas_format(pid: int, epoch: int, commit: bool,
                                                     coordinator_epoch: int) -> None:
    buf = encode_control_batch(producer_id=pid, producer_epoch=epoch, commit=commit,
                               coordinator_epoch=coordinator_epoch, timestamp=NOW)
    h = read_header(buf)
    assert h.is_control and h.is_transactional and h.base_sequence == -1 and h.record_count == 1
    assert (h.producer_id, h.producer_epoch) == (pid, epoch)
    marker = decode_txn_marker(buf)
    assert marker is not None and (marker.commit, marker.coordinator_epoch) == (commit, coordinator_epoch)
    _h, [rec] = rb.decode_batch(buf)
    assert rec.key == struct.pack(">hh", 0, 1 if commit else 0)
    assert rec.value == struct.pack(">hi", 0, coordinator_epoch)


# ------------------------------------------------------------------ fencing


def test_markers_are_fenced_by_producer_and_coordinator_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(tbatch(7, 0, epoch=2), 0, NOW)
    with pytest.raises(errors.InvalidProducerEpochError):
        log.append_txn_marker(7, 1, True, 0, 0, NOW)
    log.append_txn_marker(7, 2, False, 5, 0, NOW)
    with pytest.raises(errors.TransactionCoordinatorFencedError):
        log.append_txn_marker(7, 2, True, 4, 0, NOW)
    end = log.log_end_offset
    # An epoch bump by the coordinator (a zombie fenced): the old epoch's data is refused next.
    log.append_txn_marker(7, 3, False, 5, 0, NOW)
    with pytest.raises(errors.InvalidProducerEpochError):
        log.append_as_leader(tbatch(7, 2, epoch=2), 0, NOW)
    assert log.log_end_offset == end + 1


def test_a_new_epoch_keeps_the_open_transaction_until_its_marker(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(tbatch(7, 0, epoch=0), 0, NOW)
    log.append_as_leader(tbatch(7, 0, epoch=1), 0, NOW)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset() == 0
    log.append_txn_marker(7, 1, False, 0, 0, NOW)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset() == log.log_end_offset
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in log.collect_aborted_transactions(0, 5)] == \
        [(7, 0, 4)]


def test_an_empty_transaction_leaves_no_index_entry() -> None:
    state = ProducerStateManager()
    assert state.update_marker(3, 0, rb.TxnMarker(False, 0), 10, NOW) is None
    assert state.last_stable_offset(11) == 11


# ------------------------------------------------------------------ a model of the LSO and aborted set


@dataclass
class Model:
    open: dict[int, int] = field(default_factory=dict)  # pid -> first offset
    done: list[tuple[int, int, int, bool]] = field(default_factory=list)  # pid, first, marker, aborted
    seq: dict[int, int] = field(default_factory=dict)

    def lso(self, hw: int) -> int:
        firsts = list(self.open.values()) + [f for _p, f, m, _a in self.done if m >= hw]
        return min([hw, *firsts])

    def aborted(self, below: int) -> list[tuple[int, int]]:
        return [(p, f) for p, f, m, a in self.done if a and m < below]


ops = st.lists(st.one_of(
    st.tuples(st.just("data"), st.integers(0, 3), st.integers(1, 3), st.booleans()),
    st.tuples(st.just("marker"), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("hw"), st.integers(0, 100)),
), min_size=1, max_size=30)


def _aborted(log: Log) -> list[tuple[int, int]]:
    return [(a.producer_id, a.first_offset) for a in log.collect_aborted_transactions(0, log.log_end_offset)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops, cut=st.integers(0, 100))
def test_lso_and_aborted_transactions_match_the_model_everywhere(ops: list[tuple], cut: int) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        leader = open_log(root / "l" / "t-0")
        follower = open_log(root / "f" / "t-0")
        model = Model()
        hw = 0
        for op in ops:
            if op[0] == "data":
                _k, pid, n, txn = op
                seq = model.seq.get(pid, 0)
                first = leader.log_end_offset
                leader.append_as_leader(tbatch(pid, seq, n, txn=txn), 0, NOW)
                model.seq[pid] = seq + n
                if txn and pid not in model.open:
                    model.open[pid] = first
            elif op[0] == "marker":
                _k, pid, commit = op
                offset = leader.log_end_offset
                leader.append_txn_marker(pid, 0, commit, 0, 0, NOW)
                if pid in model.open:
                    model.done.append((pid, model.open.pop(pid), offset, not commit))
            else:
                hw = max(hw, min(op[1], leader.log_end_offset))
                leader.update_high_watermark(hw)
            assert leader.last_stable_offset() == model.lso(hw)
        assert _aborted(leader) == model.aborted(leader.log_end_offset)
        # A follower copying the leader (in chunks) derives the same.
        offset = 0
        while offset < leader.log_end_offset:
            chunk = leader.read(offset, 700)
            follower.append_as_follower(chunk, NOW)
            offset = follower.log_end_offset
        follower.update_high_watermark(hw)
        assert follower.last_stable_offset() == model.lso(hw)
        assert _aborted(follower) == model.aborted(leader.log_end_offset)
        # A crash (no clean shutdown, indexes not flushed): the same after recovery.
        for seg in leader.segments:
            seg.abandon()
        crashed = open_log(root / "l" / "t-0", high_watermark=hw)
        assert crashed.last_stable_offset() == model.lso(hw)
        assert _aborted(crashed) == model.aborted(leader.log_end_offset)
        # A clean restart trusts the files.
        crashed.close()
        clean = open_log(root / "l" / "t-0", high_watermark=hw, clean_shutdown=True)
        assert _aborted(clean) == model.aborted(leader.log_end_offset)
        assert clean.last_stable_offset() == model.lso(hw)
        # Truncation forgets the markers it cuts: the index and the LSO follow what is left.
        follower.truncate_to(min(cut, follower.log_end_offset))
        end = follower.log_end_offset
        kept = Model(seq={})
        for pid, first, marker, aborted in model.done:
            if marker < end:
                kept.done.append((pid, first, marker, aborted))
            elif first < end:
                kept.open[pid] = first
        for pid, first in model.open.items():
            if first < end:
                kept.open[pid] = first
        follower.update_high_watermark(end)
        assert _aborted(follower) == kept.aborted(end)
        assert follower.last_stable_offset() == kept.lso(follower.high_watermark)
        for lg in (clean, follower):
            lg.close()
