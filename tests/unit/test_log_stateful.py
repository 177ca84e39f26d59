"""Stateful model test of the log (SPEC S2): random appends, reads, rolls, truncations,
clean restarts and crashes that tear the active segment at a random byte, checked
against an in-memory model of the batches that must survive."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.log.config import LogConfig
from broker.log.log import Log
from broker.log.manager import LogManager
from proto.record_batch import Record, decode_batch, encode_batch, iter_headers

CONFIG = LogConfig(segment_bytes=1200, index_interval_bytes=150)


@dataclass
class ModelBatch:
    base_offset: int
    values: list[bytes]
    size: int

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.values)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="log-model-"))
        self.batches: list[ModelBatch] = []
        self.now = 0
        self.counter = 0
        self._start()

    def _start(self) -> None:
        self.manager = LogManager([self.root], CONFIG)
        self.manager.startup(self.now)
        self.log: Log = self.manager.get_or_create_log("t", 0, self.now)

    @property
    def leo(self) -> int:
        return self.batches[-1].next_offset if self.batches else 0

    def teardown(self) -> None:
        self.manager.abandon()
        shutil.rmtree(self.root, ignore_errors=True)

    @rule(sizes=st.lists(st.integers(min_value=0, max_value=120), min_size=1, max_size=6))
    def append(self, sizes: list[int]) -> None:
        vals = []
        for s in sizes:
            self.counter += 1
            vals.append(f"{self.counter}:".encode() + b"x" * s)
        data = encode_batch([Record(value=v, timestamp=self.now) for v in vals])
        info = self.log.append_as_leader(data, leader_epoch=0, now_ms=self.now)
        assert info.first_offset == self.leo
        self.batches.append(ModelBatch(self.leo, vals, len(data)))
        self.log.update_high_watermark(self.log.log_end_offset)
        self.now += 1

    @rule(data=st.data(), max_bytes=st.integers(min_value=0, max_value=3000))
    def read(self, data: st.DataObject, max_bytes: int) -> None:
        start = data.draw(st.integers(min_value=0, max_value=self.leo))
        raw = self.log.read(start, max_bytes)
        got = [(pos, h) for pos, h in iter_headers(raw)]
        assert sum(h.size for _, h in got) == len(raw), "read returned a partial batch"
        if start == self.leo:
            assert raw == b""
            return
        assert got, "a read below the LEO returns at least one batch"
        first = next(i for i, b in enumerate(self.batches) if b.base_offset <= start < b.next_offset)
        expected = self.batches[first:first + len(got)]
        assert len(expected) == len(got)
        for (pos, _h), mb in zip(got, expected, strict=True):
            header, recs = decode_batch(raw, pos)
            assert header.base_offset == mb.base_offset
            assert [r.value for r in recs] == mb.values
        if len(got) > 1:
            assert len(raw) <= max_bytes

    @rule()
    def roll(self) -> None:
        self.log.roll(self.now)

    @precondition(lambda self: bool(self.batches))
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        target = data.draw(st.sampled_from([b.base_offset for b in self.batches] + [self.leo]))
        self.log.truncate_to(target)
        self.batches = [b for b in self.batches if b.base_offset < target]

    @rule()
    def clean_restart(self) -> None:
        hw = self.log.high_watermark
        self.manager.shutdown()
        self._start()
        assert self.log.high_watermark == hw

    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        """kill -9, then lose an unflushed tail of the active segment at a random byte."""
        self.manager.abandon()
        part = self.root / "t-0"
        last = max(part.glob("*.log"), key=lambda p: int(p.name[:-4]))
        size = last.stat().st_size
        cut = data.draw(st.integers(min_value=0, max_value=size))
        os.truncate(last, cut)
        seg_base = int(last.name[:-4])
        keep = [b for b in self.batches if b.base_offset < seg_base]
        pos = 0
        for b in (b for b in self.batches if b.base_offset >= seg_base):
            if pos + b.size > cut:
                break
            keep.append(b)
            pos += b.size
        self.batches = keep
        self._start()

    @invariant()
    def offsets_agree(self) -> None:
        assert self.log.log_end_offset == self.leo
        assert self.log.log_start_offset <= self.log.high_watermark <= self.log.log_end_offset


TestLogModel = LogMachine.TestCase
TestLogModel.settings = settings(max_examples=60, stateful_step_count=40, deadline=None,
                                 suppress_health_check=[HealthCheck.too_slow])
