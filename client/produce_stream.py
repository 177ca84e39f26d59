"""The producer's ProduceStream to one broker: requests written in order, answers matched in order.

Theory of operation
-------------------
A unary gRPC call costs the broker about 340 us of CPU here and a message on an open stream
about 150 us (``bench/rpc_cost_bench.py``), so the producer sends its Produce requests to a broker
over one long-lived ``ProduceStream``. The broker appends them in arrival order and answers in
that order, so the n-th answer read belongs to the n-th request written: ``send`` queues the
request and a future, one writer task writes the queue in order, one reader task resolves the
futures in order. The producer keeps its own in-flight limits (``max_in_flight`` per partition),
so the stream is just a cheaper pipe.

Any failure (the broker went away, a timeout, a protocol violation) fails the stream as a whole:
every unanswered request gets the error - the producer retries those batches as after a failed
unary call, idempotent sequence numbers keeping the retries in order - and the next ``send``
to that broker opens a new stream. A broker of an older version has no ``ProduceStream``: the
error is gRPC's ``UNIMPLEMENTED``, which the producer answers by sending unary Produce calls to
that broker from then on (``is_unimplemented``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import grpc

from proto import minikafka_pb2 as pb


class ProduceStreamClosed(ConnectionResetError):
    """The broker ended the stream, or answered more than was asked."""


def is_unimplemented(e: BaseException) -> bool:
    """The broker has no ProduceStream (an older version)."""
    return isinstance(e, grpc.aio.AioRpcError) and e.code() == grpc.StatusCode.UNIMPLEMENTED


def _retrieve(fut: asyncio.Future[Any]) -> None:
    # An acks=0 send never awaits its answer: mark a failure as seen, so asyncio does not log it.
    if not fut.cancelled():
        fut.exception()


def _as_stream_error(e: Exception) -> Exception:
    """What the producer's senders are told: gRPC's error or a ConnectionError, nothing else."""
    if isinstance(e, grpc.aio.AioRpcError | ConnectionError):
        return e
    return ProduceStreamClosed(f"the produce stream failed: {e!r}")


class ProduceStream:
    """One open ProduceStream. Create it inside the producer's event loop."""

    def __init__(self, stub: Any) -> None:
        self._call = stub.ProduceStream()
        self._waiters: deque[asyncio.Future[pb.ProduceResponse]] = deque()
        self._outbox: asyncio.Queue[pb.ProduceRequest] = asyncio.Queue()
        self.failed: BaseException | None = None
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._write_all()), loop.create_task(self._read_all())]

    def send(self, request: pb.ProduceRequest) -> asyncio.Future[pb.ProduceResponse]:
        """Queue ``request``; the future is its answer (or the stream's failure)."""
        fut: asyncio.Future[pb.ProduceResponse] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(_retrieve)
        if self.failed is not None:
            fut.set_exception(self.failed)
            return fut
        self._waiters.append(fut)
        self._outbox.put_nowait(request)
        return fut

    def fail(self, error: BaseException) -> None:
        """End the stream: every unanswered request gets ``error``."""
        if self.failed is None:
            self.failed = error
            self._call.cancel()
            current = asyncio.current_task()
            for t in self._tasks:
                if t is not current:
                    t.cancel()
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_exception(self.failed)

    async def close(self, timeout_s: float = 2.0) -> None:
        """Cancel the call and wait (bounded) for its pending read and write to end through this
        loop, so no event of the call reaches the loop after the producer closed it."""
        if self.failed is None:
            self.failed = ProduceStreamClosed("the producer closed")
            self._call.cancel()  # the pending read ends (cancelled) as gRPC delivers the cancellation
            self._tasks[0].cancel()  # the writer: idle on its queue, or a write the cancel just failed
            await asyncio.wait(self._tasks, timeout=timeout_s)
        self.fail(self.failed)

    async def _write_all(self) -> None:
        try:
            while True:
                await self._call.write(await self._outbox.get())
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.fail(_as_stream_error(e))

    async def _read_all(self) -> None:
        try:
            while True:
                resp = await self._call.read()
                if resp is grpc.aio.EOF:
                    raise ProduceStreamClosed("the broker ended the produce stream")
                if not self._waiters:
                    raise ProduceStreamClosed("the broker answered a request that was not sent")
                fut = self._waiters.popleft()
                if not fut.done():  # done: its sender timed out and gave up on it
                    fut.set_result(resp)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.fail(_as_stream_error(e))
