"""The producer's ProduceStream: answers matched to requests in order, any failure failing every
unanswered request (the producer retries them), and unary Produce to a broker without the stream
(an older version). The gRPC call object is faked: that boundary is gRPC's, not ours."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import grpc
import pytest

from client.produce_stream import ProduceStream, ProduceStreamClosed
from client.producer import Producer
from proto import minikafka_pb2 as pb


class _Call:
    """A stream-stream call: what is written is answered, in order, by ``answer`` (None: EOF)."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.written: list[pb.ProduceRequest] = []
        self.answers: asyncio.Queue[Any] = asyncio.Queue()
        self.cancelled = False

    async def write(self, req: pb.ProduceRequest) -> None:
        self.written.append(req)
        reply = self.answer(req)
        if isinstance(reply, BaseException):
            raise reply
        if reply is not ...:
            self.answers.put_nowait(reply)

    async def read(self) -> Any:
        reply = await self.answers.get()
        if reply is None:
            return grpc.aio.EOF
        if reply is _CANCELLED:
            raise asyncio.CancelledError  # as grpc.aio's read() after a local cancel
        return reply

    def cancel(self) -> None:
        self.cancelled = True
        self.answers.put_nowait(_CANCELLED)


_CANCELLED = object()


class _Stub:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: list[_Call] = []
        self.unary = 0

    def ProduceStream(self) -> _Call:
        self.calls.append(_Call(self.answer))
        return self.calls[-1]

    async def Produce(self, req: pb.ProduceRequest, timeout: float) -> pb.ProduceResponse:
        self.unary += 1
        return pb.ProduceResponse(throttle_time_ms=req.timeout_ms)


def _unimplemented() -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(grpc.StatusCode.UNIMPLEMENTED, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                "Method not found!")


def test_answers_are_matched_to_requests_in_order() -> None:
    async def run() -> list[int]:
        stream = ProduceStream(_Stub(lambda req: pb.ProduceResponse(throttle_time_ms=req.timeout_ms)))
        futures = [stream.send(pb.ProduceRequest(timeout_ms=i)) for i in range(5)]
        return [(await f).throttle_time_ms for f in futures]

    assert asyncio.run(run()) == [0, 1, 2, 3, 4]


def test_the_end_of_the_stream_fails_every_unanswered_request() -> None:
    async def run() -> tuple[int, list[BaseException | None], bool]:
        # The broker answers the first request, then ends the stream.
        stub = _Stub(lambda req: pb.ProduceResponse() if req.timeout_ms == 0 else None if req.timeout_ms == 1 else ...)
        stream = ProduceStream(stub)
        futures = [stream.send(pb.ProduceRequest(timeout_ms=i)) for i in range(3)]
        await asyncio.wait(futures)
        late = stream.send(pb.ProduceRequest(timeout_ms=9))  # after the failure: fails at once
        await asyncio.wait([late])
        return (sum(1 for f in futures if f.exception() is None),
                [f.exception() for f in [*futures[1:], late]], stub.calls[0].cancelled)

    answered, failures, cancelled = asyncio.run(run())
    assert answered == 1 and cancelled
    assert all(isinstance(e, ProduceStreamClosed) for e in failures)


def test_an_unexpected_error_reaches_the_senders_as_a_connection_error() -> None:
    async def run() -> BaseException | None:
        stream = ProduceStream(_Stub(lambda req: RuntimeError("boom")))
        fut = stream.send(pb.ProduceRequest())
        await asyncio.wait([fut])
        return fut.exception()

    e = asyncio.run(run())
    assert isinstance(e, ProduceStreamClosed) and "boom" in str(e)


def test_a_broker_without_produce_stream_gets_unary_produce_calls() -> None:
    stub = _Stub(lambda req: _unimplemented())
    producer = object.__new__(Producer)  # only the transport half is exercised
    producer._unary_produce = {}
    producer._produce_streams = {}
    producer.request_timeout_s = 5.0
    producer._stub = lambda address: stub  # type: ignore[method-assign]

    async def two_requests() -> list[int]:
        out = []
        for i in (7, 8):
            req = pb.ProduceRequest(timeout_ms=i)
            stream = producer._produce_stream("b:1") if producer._streams_to("b:1") else None
            call = stream.send(req) if stream is not None else stub.Produce(req, timeout=5)
            out.append((await producer._answer("b:1", req, call, stream)).throttle_time_ms)
        return out

    assert asyncio.run(two_requests()) == [7, 8]
    assert (len(stub.calls), stub.unary) == (1, 2), "the stream is tried once, then unary Produce"
    assert producer._unary_produce == {"b:1": math.inf}


def test_a_late_answer_fails_the_stream_so_the_requests_behind_it_are_retried() -> None:
    stub = _Stub(lambda req: ...)  # never answers
    producer = object.__new__(Producer)
    producer._unary_produce = {}
    producer._produce_streams = {}
    producer.request_timeout_s = -4.95  # the wait is request_timeout_s + 5: 50 ms
    producer._stub = lambda address: stub  # type: ignore[method-assign]

    async def run() -> BaseException | None:
        stream = producer._produce_stream("b:1")
        first = stream.send(pb.ProduceRequest(timeout_ms=1))
        behind = stream.send(pb.ProduceRequest(timeout_ms=2))
        with pytest.raises(Exception) as exc:
            await producer._answer("b:1", pb.ProduceRequest(), first, stream)
        assert "request_timeout_ms" in str(exc.value)
        await asyncio.wait([behind])
        assert producer._produce_stream("b:1") is not stream, "a new stream for what comes next"
        return behind.exception()

    assert asyncio.run(run()) is not None


def test_close_waits_for_the_pending_read_and_fails_what_is_unanswered() -> None:
    async def run() -> tuple[bool, BaseException | None, list[bool]]:
        stub = _Stub(lambda req: ...)  # never answers
        stream = ProduceStream(stub)
        fut = stream.send(pb.ProduceRequest())
        await asyncio.sleep(0)
        await asyncio.wait_for(stream.close(), 1.0)  # not its 2 s bound: the read ended at the cancel
        return stub.calls[0].cancelled, fut.exception(), [t.done() for t in stream._tasks]

    cancelled, error, tasks_done = asyncio.run(run())
    assert cancelled and isinstance(error, ProduceStreamClosed) and all(tasks_done)


def test_a_broker_without_room_for_a_stream_gets_unary_calls_for_a_while() -> None:
    refused = grpc.aio.AioRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                   "2 ProduceStreams open on this listener")
    stub = _Stub(lambda req: refused)
    producer = object.__new__(Producer)
    producer._unary_produce = {}
    producer._produce_streams = {}
    producer.request_timeout_s = 5.0
    producer._stub = lambda address: stub  # type: ignore[method-assign]

    async def run() -> None:
        stream = producer._produce_stream("b:1")
        req = pb.ProduceRequest()
        with pytest.raises(grpc.aio.AioRpcError):  # retried by the caller, as after any failed call
            await producer._answer("b:1", req, stream.send(req), stream)
        assert not producer._streams_to("b:1"), "unary calls for a while"
        producer._unary_produce["b:1"] = time.monotonic() - 1  # ... which passes
        assert producer._streams_to("b:1") and "b:1" not in producer._unary_produce

    asyncio.run(run())
    assert stub.unary == 0, "nothing resent inline: the stream may have appended part of it"


def test_a_drained_batch_is_on_its_brokers_stream_before_the_drain_returns() -> None:
    """The sender hands each request to the broker's stream in the drain's own loop iteration (no
    task in between): every task hop before the write was a loop iteration added to each send's
    latency. The answer is then awaited by a task, and completes the batch."""
    from client.accumulator import ProducerBatch
    from client.connection import ClusterView

    stub = _Stub(lambda req: pb.ProduceResponse(topics=[pb.ProduceTopicResponse(name="t", partitions=[
        pb.ProducePartitionResponse(partition=0, base_offset=41)])]))
    producer = object.__new__(Producer)  # only the send half is exercised: no connection
    producer._unary_produce, producer._produce_streams = {}, {}
    producer.kafka_listener, producer._kafka_conns, producer._kafka_connecting = False, {}, set()
    producer._grpc_in_flight, producer._requests = {}, set()
    producer.request_timeout_s, producer.acks, producer.codec, producer.max_request_size = 5.0, -1, 0, 1 << 20
    producer._stub = lambda address: stub  # type: ignore[method-assign]
    producer._view = object.__new__(ClusterView)
    producer._view.brokers = {1: "b:1"}
    producer._accumulator = type("Ids", (), {"producer_id": -1, "producer_epoch": -1})()  # type: ignore[assignment]
    finished: list[tuple[int, BaseException | None]] = []
    producer._finish = lambda b, offset, error: finished.append((offset, error))  # type: ignore[method-assign]
    batch = ProducerBatch("t", 0, now=0.0, deadline=1e9)
    batch.append(None, b"v", (), 0)

    async def run() -> list[int]:
        producer._loop = asyncio.get_running_loop()
        producer._send_to_leader(1, [batch])
        on_stream = len(producer._produce_streams["b:1"]._waiters)  # no await since the call
        for _ in range(100):  # bounded: the answer's task completes the batch
            if finished:
                break
            await asyncio.sleep(0.01)
        await producer._produce_streams["b:1"].close()
        return [on_stream, len(stub.calls)]

    assert asyncio.run(run()) == [1, 1]
    assert finished == [(41, None)]


def test_a_surprise_while_sending_retries_the_batches_instead_of_stranding_them() -> None:
    """A drained batch belongs to no queue until its answer: if handing the request over fails in an
    unforeseen way, the batch goes back to retry-or-fail (a NetworkError), never nowhere."""
    from proto import errors

    producer = object.__new__(Producer)
    producer._unary_produce, producer._produce_streams = {}, {}
    producer.kafka_listener, producer._kafka_conns, producer._kafka_connecting = False, {}, set()
    producer._grpc_in_flight, producer._requests = {}, set()
    producer.request_timeout_s, producer.acks = 5.0, -1

    def broken_stream(address: str) -> Any:
        raise RuntimeError("surprise")

    producer._produce_stream = broken_stream  # type: ignore[method-assign]
    outcome: list[tuple[Any, BaseException]] = []
    producer._retry_or_fail = lambda b, error: outcome.append((b, error))  # type: ignore[method-assign]
    batch = type("B", (), {"topic": "t", "partition": 0, "payload": b"x"})()
    producer._send_request(1, "b:1", [batch])  # type: ignore[list-item]
    assert [(b, type(e)) for b, e in outcome] == [(batch, errors.NetworkError)]
    assert producer._grpc_in_flight == {} and producer._requests == set()
