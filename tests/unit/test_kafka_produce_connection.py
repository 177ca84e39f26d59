"""client.kafka_produce: the producer's connection to a broker's Kafka listener, against a stand-in
broker on a real loopback socket (the broker's side is broker.network.kafka_wire's own encoder): answers
matched in order, acks=0 never waited for, and any broken promise of the broker's - an answer too
large, to another request, to none, or that does not parse - fails every unanswered request
with a ConnectionError, which the producer retries (S13: the client distrusts the broker too).
Also the producer's choice of transport: gRPC while the Kafka listener cannot be reached."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable
from typing import Any

import pytest

from broker.network import kafka_wire as kw
from client.kafka_produce import KafkaProduceClosed, KafkaProduceConnection, KafkaProduceUnreachable
from proto import minikafka_pb2 as pb

Answer = Callable[[kw.Decoded], bytes | None]


def _ok(d: kw.Decoded) -> bytes:
    req = kw.to_pb(d)[0][1]
    resp = pb.ProduceResponse(topics=[pb.ProduceTopicResponse(name=t.name, partitions=[
        pb.ProducePartitionResponse(partition=p.partition, base_offset=d.header.correlation_id * 10)
        for p in t.partitions]) for t in req.topics])
    return kw.encode_response(d.header, kw.from_pb(d, [resp]))


async def _broker(answer: Answer) -> tuple[asyncio.Server, int, list[kw.Decoded]]:
    """A stand-in broker: decodes each Produce frame and writes what ``answer`` makes of it."""
    seen: list[kw.Decoded] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                d = kw.decode_request(await reader.readexactly(size))
                seen.append(d)
                out = answer(d) if kw.expects_response(d) else None
                if out:
                    writer.write(out)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], seen


def _request(acks: int = -1, topic: str = "t") -> pb.ProduceRequest:
    return pb.ProduceRequest(acks=acks, timeout_ms=1000, topics=[pb.ProduceTopicData(name=topic, partitions=[
        pb.ProducePartitionData(partition=0, records=b"batch")])])


def test_answers_are_matched_in_order_and_acks_zero_is_done_once_written() -> None:
    async def go() -> None:
        server, port, seen = await _broker(_ok)
        conn = await KafkaProduceConnection.open("127.0.0.1", port, None, 5)
        futures = [conn.send(_request()), conn.send(_request(acks=0)), conn.send(_request(acks=1))]
        assert futures[1].done()  # acks=0: never answered, done once handed to the socket
        answers = await asyncio.wait_for(asyncio.gather(*futures), 5)
        assert [a.topics[0].partitions[0].base_offset for a in (answers[0], answers[2])] == [10, 30]
        assert [d.request.acks for d in seen] == [-1, 0, 1]
        await conn.close()
        server.close()

    asyncio.run(go())


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


@pytest.mark.parametrize("hostile", [
    lambda d: _frame(b"\0" * 64),  # does not parse as a Produce answer
    lambda d: struct.pack(">i", 1 << 30),  # larger than any answer may be
    lambda d: _ok(kw.Decoded(kw.Header(0, 8, d.header.correlation_id + 7, ""), d.request)),  # someone else's
    lambda d: _ok(d) + _ok(d),  # an answer to a request never sent
], ids=["garbage", "oversized", "foreign-correlation-id", "unsolicited"])
def test_a_broken_answer_fails_every_unanswered_request(hostile: Answer) -> None:
    async def go() -> list[BaseException | None]:
        server, port, _seen = await _broker(hostile)
        conn = await KafkaProduceConnection.open("127.0.0.1", port, None, 5, max_response_bytes=1 << 20)
        first = conn.send(_request())
        await asyncio.wait([first], timeout=5)
        second = conn.send(_request())  # after the failure: fails at once
        await asyncio.wait([second], timeout=5)
        server.close()
        return [f.exception() if f.done() else None for f in (first, second)]

    failures = asyncio.run(go())
    # "unsolicited": the first answer is fine, the extra one fails the connection afterwards.
    assert all(e is None or isinstance(e, ConnectionError) for e in failures)
    assert isinstance(failures[1], ConnectionError)


def test_the_broker_going_away_fails_the_waiting_requests() -> None:
    async def go() -> BaseException | None:
        async def read_one_and_go(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readexactly(int.from_bytes(await reader.readexactly(4), "big"))
            writer.close()

        server = await asyncio.start_server(read_one_and_go, "127.0.0.1", 0)
        conn = await KafkaProduceConnection.open("127.0.0.1", server.sockets[0].getsockname()[1], None, 5)
        fut = conn.send(_request())
        await asyncio.wait([fut], timeout=5)
        server.close()
        return fut.exception() if fut.done() else None

    assert isinstance(asyncio.run(go()), KafkaProduceClosed)


def test_a_request_on_a_connection_closed_under_it_fails_as_a_connection_error() -> None:
    """On uvloop (the producer's loop) a closed transport raises on write: a request sent once the
    connection is closed fails like any on a broken connection (the producer retries it)."""
    import uvloop

    async def go() -> BaseException | None:
        server, port, _seen = await _broker(_ok)
        conn = await KafkaProduceConnection.open("127.0.0.1", port, None, 5)
        assert conn._transport is not None
        conn._transport.close()
        fut = conn.send(_request())
        await asyncio.wait([fut], timeout=5)
        server.close()
        return fut.exception() if fut.done() else None

    assert isinstance(uvloop.run(go()), ConnectionError)


async def _closed_port() -> int:
    """A loopback port nothing listens on any more (connecting is refused)."""
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port: int = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    return port


def test_a_listener_that_cannot_be_reached_is_reported_as_such() -> None:
    async def go() -> None:
        port = await _closed_port()
        with pytest.raises(KafkaProduceUnreachable):
            await KafkaProduceConnection.open("127.0.0.1", port, None, 2)

    asyncio.run(go())


def test_the_producer_sends_over_grpc_while_the_kafka_listener_cannot_be_reached() -> None:
    from client import producer as producer_module
    from client.connection import ClusterView
    from client.producer import Producer

    async def go() -> tuple[Any, Any, Any, bool]:
        port = await _closed_port()
        p = object.__new__(Producer)  # only the transport choice is exercised
        p.kafka_listener, p._closed, p.request_timeout_s, p.client_id = True, False, 2.0, "c"
        p._kafka_conns, p._kafka_connecting, p._kafka_retry_at, p._grpc_in_flight = {}, set(), {}, {}
        p.security = producer_module.ChannelSecurity()
        p._loop = asyncio.get_running_loop()
        p._view = object.__new__(ClusterView)
        p._view.kafka_produce = {1: f"127.0.0.1:{port}"}
        first = p._kafka_connection(1, "b:1", [])  # none yet: gRPC, and a connection is tried
        assert "b:1" in p._kafka_connecting
        for _ in range(100):  # bounded: the connect fails quickly (refused)
            if not p._kafka_connecting:
                break
            await asyncio.sleep(0.02)
        retry_at = p._kafka_retry_at.get("b:1", 0.0)
        again = p._kafka_connection(1, "b:1", [])  # within the retry time: gRPC, no new attempt
        return first, again, retry_at, bool(p._kafka_connecting)

    first, again, retry_at, connecting = asyncio.run(go())
    assert first is None and again is None and not connecting
    assert retry_at > time.monotonic() + producer_module.KAFKA_PRODUCE_RETRY_AFTER_S - 2
