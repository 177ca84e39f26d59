"""Producer pieces without a cluster: Kafka's murmur2 partitioning (S5.3), sticky partitioning,
and the batch-shared futures behaving as concurrent.futures.Future."""

from __future__ import annotations

import concurrent.futures as cf
import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from client.partitioner import StickyPartitioner, murmur2, partition_for_key
from client.producer import FutureRecordMetadata, ProducerBatch, RecordMetadata
from proto import record_batch as rb

# Kafka's UtilsTest.testMurmur2 vectors.
KAFKA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_matches_kafka() -> None:
    for key, expected in KAFKA_MURMUR2.items():
        assert murmur2(key) == expected
    # DefaultPartitioner: toPositive(murmur2(key)) % numPartitions
    assert partition_for_key(b"foobar", 7) == (-790332482 & 0x7FFFFFFF) % 7
    assert murmur2(b"") == 275646681


def test_sticky_partitioner_moves_on_only_for_a_new_batch() -> None:
    sp = StickyPartitioner(random.Random(1))
    p = sp.partition("t", 6)
    assert all(sp.partition("t", 6) == p for _ in range(10))
    q = sp.on_new_batch("t", 6, p)
    assert q != p and sp.partition("t", 6) == q
    assert sp.on_new_batch("one", 1, 0) == 0


def test_batch_futures_are_concurrent_futures() -> None:
    batch = ProducerBatch("t", 3, now=0.0, deadline=1e9)
    futs = [batch.append(None, f"v{i}".encode(), (), 1000 + i) for i in range(3)]
    assert all(isinstance(f, cf.Future) and isinstance(f, FutureRecordMetadata) for f in futs)
    assert not futs[0].done()
    with pytest.raises(TimeoutError):
        futs[0].result(timeout=0.01)
    seen: list[RecordMetadata] = []
    futs[1].add_done_callback(lambda f: seen.append(f.result()))
    waiter = threading.Thread(target=lambda: cf.wait(futs, timeout=5))
    waiter.start()
    threading.Timer(0.05, lambda: batch.result.complete(100, None)).start()
    done, not_done = cf.wait(futs, timeout=5)
    waiter.join(5)
    assert len(done) == 3 and not not_done
    assert [f.result() for f in futs] == [RecordMetadata("t", 3, 100 + i, 1000 + i) for i in range(3)]
    assert seen == [RecordMetadata("t", 3, 101, 1001)]
    assert list(cf.as_completed(futs, timeout=1))


def test_a_batch_builds_its_condition_only_for_a_waiter() -> None:
    """Issue 29: a Condition per batch was the producer's largest per-batch cost at one-record
    batches; callbacks alone never build one, and a waiter after the outcome returns at once."""
    batch = ProducerBatch("t", 0, now=0.0, deadline=1e9)
    fut = batch.append(None, b"v", (), 7)
    seen: list[int] = []
    fut.add_done_callback(lambda f: seen.append(f.result().offset))
    batch.result.complete(40, None)
    fut.add_done_callback(lambda f: seen.append(f.result().offset + 1))  # after the outcome: runs at once
    assert seen == [40, 41]
    assert batch.result._cond is None  # no waiter: no Condition
    assert fut.result(timeout=0) == RecordMetadata("t", 0, 40, 7)
    batch.result.complete(99, RuntimeError("late"))  # a second outcome is ignored
    assert fut.result().offset == 40 and seen == [40, 41]


def test_callbacks_and_waiters_race_with_completion() -> None:
    """Every callback runs once and every waiter wakes, whichever of registration, waiting and
    completion comes first (the completing thread is the producer's own, in the real client)."""
    batches = [ProducerBatch("t", i, now=0.0, deadline=1e9) for i in range(2000)]
    futs = [b.append(None, b"v", (), 1) for b in batches]
    calls = [0] * len(futs)

    def complete_all() -> None:
        for i, b in enumerate(batches):
            b.result.complete(i, None)

    finisher = threading.Thread(target=complete_all)
    finisher.start()
    for i, f in enumerate(futs):
        f.add_done_callback(lambda _f, i=i: calls.__setitem__(i, calls[i] + 1))
        if i % 7 == 0:
            assert f.result(timeout=5).offset == i
    finisher.join(5)
    assert calls == [1] * len(futs)
    done, not_done = cf.wait(futs, timeout=5)
    assert len(done) == len(futs) and not not_done


def test_a_failed_batch_fails_every_record() -> None:
    batch = ProducerBatch("t", 0, now=0.0, deadline=1e9)
    futs = [batch.append(b"k", b"v", (), 1) for _ in range(2)]
    batch.result.complete(-1, RuntimeError("boom"))
    for f in futs:
        assert isinstance(f.exception(), RuntimeError)
        with pytest.raises(RuntimeError):
            f.result()


def test_batches_use_the_compiled_builder_unless_told_not_to() -> None:
    records = ProducerBatch("t", 0, now=0.0, deadline=1e9).records
    pure = os.environ.get("MINIKAFKA_PURE_PYTHON") or not rb.COMPILED
    assert isinstance(records, rb._RecordsBuilderPy) == bool(pure)
    assert isinstance(FutureRecordMetadata(None, 0, 0), rb._RecordFuturePy) == bool(pure)


def test_the_producer_core_passes_on_the_pure_python_codec() -> None:
    """The fallback is the same producer: this file and the accumulator's tests again with proto._codec
    disabled (MINIKAFKA_PURE_PYTHON), so batches use _RecordsBuilderPy and futures _RecordFuturePy."""
    if os.environ.get("MINIKAFKA_PURE_PYTHON"):
        pytest.skip("already running on the pure-Python codec")
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                          "tests/unit/test_producer_core.py", "tests/unit/test_accumulator.py"],
                         env={**os.environ, "MINIKAFKA_PURE_PYTHON": "1"}, cwd=root, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout


def test_a_metadata_refresh_asked_for_while_closing_does_nothing() -> None:
    # close() tears the streams down; the failed sends ask for a refresh that must not reach the
    # loop's executor, which may be shut down already (a task exception nobody retrieved, on stderr).
    import asyncio

    from client.producer import Producer

    producer = object.__new__(Producer)  # only the refresh is exercised: no connection
    producer._closed, producer._wake = True, None
    asked: list[list[str]] = []
    producer._refresh_metadata_sync = asked.append  # type: ignore[method-assign]
    asyncio.run(producer._refresh_metadata(["t"]))
    assert asked == []
