"""The consumer's read_committed filter (client/txn_filter.py, KIP-98): against a model of a log of
transactions, every committed or plain record is kept, no aborted one, control batches never
returned, and the offset after the answer reported even when everything was aborted."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from client.txn_filter import drop_aborted
from proto.record_batch import Record, decode_batch, encode_batch, encode_control_batch, iter_headers

NOW = 1_700_000_000_000


def _values(buf: bytes) -> list[str]:
    return [r.value.decode() for pos, h in iter_headers(buf) if not h.is_control
            for r in decode_batch(buf, pos)[1] if r.value is not None]


@given(st.lists(st.tuples(st.sampled_from(["data", "plain", "commit", "abort"]), st.integers(0, 3)), max_size=40))
def test_only_the_records_of_aborted_transactions_are_dropped(events: list[tuple[str, int]]) -> None:
    log = bytearray()
    offset = 0
    open_txns: dict[int, int] = {}
    txn_values: dict[int, list[tuple[int, str]]] = {}
    aborted: list[tuple[int, int]] = []
    expected: list[tuple[int, str]] = []
    seq = dict.fromkeys(range(4), 0)
    for i, (kind, pid) in enumerate(events):
        if kind == "data":
            value = f"{pid}-{i}"
            log += encode_batch([Record(value=value.encode(), timestamp=NOW)], base_offset=offset, producer_id=pid,
                                producer_epoch=0, base_sequence=seq[pid], is_transactional=True)
            seq[pid] += 1
            open_txns.setdefault(pid, offset)
            txn_values.setdefault(pid, []).append((offset, value))
        elif kind == "plain":
            log += encode_batch([Record(value=f"plain-{i}".encode(), timestamp=NOW)], base_offset=offset)
            expected.append((offset, f"plain-{i}"))
        else:
            log += encode_control_batch(producer_id=pid, producer_epoch=0, commit=kind == "commit",
                                        coordinator_epoch=0, timestamp=NOW, base_offset=offset)
            if pid in open_txns:
                first = open_txns.pop(pid)
                if kind == "abort":
                    aborted.append((pid, first))
                else:
                    expected += txn_values[pid]
                txn_values[pid] = []
        offset += 1
    # What a read_committed answer holds: up to the LSO (no open transaction's records).
    lso = min(open_txns.values(), default=offset)
    visible = b"".join(bytes(log[pos:pos + h.size]) for pos, h in iter_headers(bytes(log)) if h.base_offset < lso)
    kept, next_offset = drop_aborted(visible, aborted)
    assert sorted(_values(kept)) == sorted(v for o, v in expected if o < lso)
    if aborted:
        assert next_offset == (lso if visible else -1)
    else:
        assert kept == visible
