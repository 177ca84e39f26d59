"""The Kafka listener's shell (broker.network.kafka_listener) on a real socket, with a stub request layer:
responses in request order, no answer to acks=0, and a bad frame closes its own connection only.
Also the ``kafka.listeners`` configuration rules (broker.server.config)."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any

import pytest
from kafka_frames import frame, read_response

from broker.network import kafka_wire as kw
from broker.network.kafka_listener import KafkaListener, ListenerLimits
from broker.server.config import BrokerConfig, ConfigError, Listener, build_config
from proto import minikafka_pb2 as pb

LIMITS = ListenerLimits(max_frame_bytes=4096, idle_ms=5000, request_timeout_ms=2000, max_connections=4)
KAFKA = Listener("KAFKA", "127.0.0.1", 0, "PLAINTEXT")


class StubApis:
    """Stands in for broker.server.kafka_apis.KafkaApis: records each call, answers an empty response."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, Any]] = []

    async def handle(self, api: str, request: Any, ctx: Any) -> Any:
        self.calls.append((api, request, ctx))
        if api == "Produce":
            return pb.ProduceResponse()
        return pb.MetadataResponse(cluster_id="c", controller_id=1, brokers=[
            pb.BrokerEndpoint(broker_id=1, host="127.0.0.1", port=9392)])

    async def begin_produce(self, request: Any, ctx: Any) -> asyncio.Task[Any]:
        """A Produce with acks=1/all: appended now (recorded), answered by the returned task."""
        self.calls.append(("Produce", request, ctx))
        return asyncio.get_running_loop().create_task(self.finish_produce(request))

    async def finish_produce(self, request: Any) -> Any:
        return pb.ProduceResponse()


def listener(limits: ListenerLimits = LIMITS, apis: StubApis | None = None) -> KafkaListener:
    return KafkaListener(KAFKA, apis or StubApis(), limits)  # type: ignore[arg-type]


async def _open(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def _response(reader: asyncio.StreamReader) -> bytes:
    size = await asyncio.wait_for(reader.readexactly(4), 5)
    return size + await asyncio.wait_for(reader.readexactly(int.from_bytes(size, "big")), 5)


def _sized(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


async def _closed(reader: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(reader.read(1), 5) == b""


def test_pipelined_requests_are_answered_in_order_and_acks_zero_not_at_all() -> None:
    async def go() -> None:
        apis = StubApis()
        kl = listener(apis=apis)
        port = await kl.start()
        r, w = await _open(port)
        acks0 = frame(0, 9, {"acks": 0, "topic_data": [{"name": "t", "partition_data": [
            {"index": 0, "records": b"b"}]}]}, correlation_id=2)
        w.write(_sized(frame(3, 9, correlation_id=1)) + _sized(acks0) + _sized(frame(18, 3, correlation_id=3)))
        await w.drain()
        first = await _response(r)
        second = await _response(r)
        assert read_response(first, 3, 9)[0] == 1
        correlation_id, body = read_response(second, 18, 3)
        assert correlation_id == 3 and body.api_keys  # the acks=0 produce got no answer in between
        assert [c[0] for c in apis.calls] == ["Metadata", "Produce"]
        ctx = apis.calls[0][2]
        assert (ctx.listener, str(ctx.principal), ctx.inter_broker) == ("KAFKA", "User:ANONYMOUS", False)
        w.close()
        await kl.stop()

    asyncio.run(go())


class HeldApis(StubApis):
    """Every acks=1/all Produce is appended at once and answered only once ``release`` is set, as an
    acks=all produce waits for its followers."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def finish_produce(self, request: Any) -> Any:
        await self.release.wait()
        return pb.ProduceResponse(topics=[pb.ProduceTopicResponse(name="t", partitions=[
            pb.ProducePartitionResponse(partition=0, base_offset=len(self.calls))])])


def _produce(correlation_id: int, acks: int = -1) -> bytes:
    return _sized(frame(0, 9, {"acks": acks, "timeout": 30000, "topic_data": [{"name": "t", "partition_data": [
        {"index": 0, "records": b"r"}]}]}, correlation_id=correlation_id))


async def _until(check: Any, what: str) -> None:
    for _ in range(250):  # bounded: 5 s
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not within 5 s: {what}")


def test_a_produce_is_appended_while_the_answers_before_it_wait_and_other_requests_wait_their_turn() -> None:
    """Produce with acks=1/all is appended on arrival, answered in order once its acks are in (as on a
    gRPC ProduceStream); a request of another API runs only after every earlier answer is written."""
    async def go() -> None:
        apis = HeldApis()
        kl = listener(apis=apis)
        port = await kl.start()
        r, w = await _open(port)
        w.write(_produce(1) + _produce(2, acks=1) + _sized(frame(3, 9, correlation_id=3)))
        await w.drain()
        # Both produces are appended although the first has no answer yet; Metadata waits its turn.
        await _until(lambda: [c[0] for c in apis.calls] == ["Produce", "Produce"], "both produces appended")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(r.readexactly(1), 0.3)
        assert [c[0] for c in apis.calls] == ["Produce", "Produce"]
        apis.release.set()
        answers = [read_response(await _response(r), 0, 9), read_response(await _response(r), 0, 9)]
        assert [cid for cid, _ in answers] == [1, 2]
        assert read_response(await _response(r), 3, 9)[0] == 3
        assert [c[0] for c in apis.calls] == ["Produce", "Produce", "Metadata"]
        assert kl.budget.in_flight == 0
        w.close()
        await kl.stop()

    asyncio.run(go())


def test_unanswered_produces_per_connection_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """At most PIPELINED_PRODUCE_MAX produces wait for their answers per connection: the next one is
    not appended (nor read further) until an answer is written (S13: bound every resource)."""
    from broker.network import kafka_listener

    monkeypatch.setattr(kafka_listener, "PIPELINED_PRODUCE_MAX", 2)

    async def go() -> None:
        apis = HeldApis()
        kl = listener(apis=apis)
        port = await kl.start()
        r, w = await _open(port)
        w.write(b"".join(_produce(i) for i in range(1, 6)))
        await w.drain()
        await _until(lambda: len(apis.calls) == 2, "two produces appended")
        await asyncio.sleep(0.3)
        assert len(apis.calls) == 2
        apis.release.set()
        assert [read_response(await _response(r), 0, 9)[0] for _ in range(5)] == [1, 2, 3, 4, 5]
        assert len(apis.calls) == 5 and kl.budget.in_flight == 0
        w.close()
        await kl.stop()

    asyncio.run(go())


def test_a_connection_that_goes_with_answers_pending_gives_back_their_bytes_and_keeps_their_appends() -> None:
    async def go() -> None:
        apis = HeldApis()
        kl = listener(apis=apis)
        port = await kl.start()
        _r, w = await _open(port)
        w.write(_produce(1) + _produce(2))
        await w.drain()
        await _until(lambda: len(apis.calls) == 2, "both produces appended")
        assert kl.budget.in_flight > 0
        w.close()
        await _until(lambda: kl.budget.in_flight == 0, "the closed connection's frames released")
        # The appends' acks=all waits were not cancelled with the connection: they finish on their own.
        tasks = [t for t in asyncio.all_tasks() if t.get_coro().__qualname__.endswith("finish_produce")]
        assert len(tasks) == 2 and not any(t.done() for t in tasks)
        apis.release.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        assert all(not t.cancelled() for t in tasks)
        await kl.stop()

    asyncio.run(go())


@pytest.mark.parametrize("bad", [
    struct.pack(">i", 1 << 30),  # larger than socket.request.max.bytes
    struct.pack(">i", -5),  # negative size
    _sized(struct.pack(">hhih", 7, 0, 1, -1)),  # an API that is not advertised
    _sized(b"\x00\x03\x00\x09garbage!!"),  # Metadata v9 that does not decode
])
def test_a_bad_frame_closes_its_connection_only(bad: bytes) -> None:
    async def go() -> None:
        kl = listener()
        port = await kl.start()
        r1, w1 = await _open(port)
        r2, w2 = await _open(port)
        w1.write(bad)
        await w1.drain()
        assert await _closed(r1)
        assert kl.closed_for_violation == 1
        w2.write(_sized(frame(3, 1, correlation_id=9)))
        await w2.drain()
        assert read_response(await _response(r2), 3, 1)[0] == 9
        w2.close()
        await kl.stop()

    asyncio.run(go())


def test_connections_beyond_max_connections_are_closed_and_idle_ones_too() -> None:
    async def go() -> None:
        kl = listener(ListenerLimits(max_frame_bytes=4096, idle_ms=300, request_timeout_ms=2000, max_connections=2))
        port = await kl.start()
        held = [await _open(port) for _ in range(2)]
        # Both are served (and so counted) before the third arrives.
        for r, w in held:
            w.write(_sized(frame(18, 0)))
            await w.drain()
            await _response(r)
        r3, _w3 = await _open(port)
        assert await _closed(r3)
        # connections.max.idle.ms: the two held ones go once idle.
        for r, _w in held:
            assert await _closed(r)
        await kl.stop()

    asyncio.run(go())


@pytest.fixture
def plain(tmp_path: Path) -> dict[str, str]:
    """A valid broker: a PLAINTEXT client listener, the inter-broker one on (mutual) TLS."""
    pem = tmp_path / "x.pem"
    pem.write_text("x")
    return {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181", "log.dirs": str(tmp_path / "logs"),
            "listeners": "CLIENT://127.0.0.1:9092,INTERNAL://127.0.0.1:9192",
            "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:SSL,KSSL:SSL",
            "inter.broker.listener.name": "INTERNAL", "ssl.keystore.location": str(pem),
            "ssl.truststore.location": str(pem)}


def test_kafka_listeners_config(plain: dict[str, str]) -> None:
    cfg = build_config({**plain, "kafka.listeners": "KAFKA://0.0.0.0:9392",
                        "advertised.kafka.listeners": "KAFKA://broker1:9392"})
    assert [(x.name, x.port, x.security_protocol) for x in cfg.kafka_listener_list] == [("KAFKA", 9392, "PLAINTEXT")]
    assert [x.address for x in cfg.advertised_kafka_listener_list] == ["broker1:9392"]
    assert build_config(plain).kafka_listener_list == [] == BrokerConfig().kafka_listener_list
    with pytest.raises(ConfigError, match="also a gRPC listener"):
        build_config({**plain, "kafka.listeners": "CLIENT://127.0.0.1:9392"})
    # SSL is spoken now (tests/unit/test_kafka_listener_security.py); the stand-in PEM files exist.
    assert build_config({**plain, "kafka.listeners": "KSSL://127.0.0.1:9392"}).kafka_listener_list[0].security_protocol \
        == "SSL"


def test_no_plaintext_kafka_listener_on_a_secure_cluster(plain: dict[str, str]) -> None:
    """Every gRPC client listener authenticates: an anonymous Kafka port would bypass it."""
    secure = {**plain, "listener.security.protocol.map": "CLIENT:SASL_SSL,INTERNAL:SSL"}
    build_config(secure)  # fine without a Kafka listener
    with pytest.raises(ConfigError, match="unauthenticated"):
        build_config({**secure, "kafka.listeners": "KAFKA://127.0.0.1:9392"})
    # Clients on TLS without authenticating (SSL, no client certificates): still no PLAINTEXT port.
    with pytest.raises(ConfigError, match="unencrypted"):
        build_config({**plain, "listener.security.protocol.map": "CLIENT:SSL,INTERNAL:SSL",
                      "kafka.listeners": "KAFKA://127.0.0.1:9392"})
    assert build_config({**plain, "kafka.listeners": "KAFKA://127.0.0.1:9392"}).kafka_listener_list


def test_supported_table_is_within_the_library() -> None:
    from kio.schema.index import api_key_map, schema_name_map

    for key, (_name, lo, hi) in kw.SUPPORTED.items():
        versions = schema_name_map[api_key_map[key]]
        assert lo in versions and hi in versions


def test_frames_in_flight_share_one_byte_budget_across_connections() -> None:
    """queued.max.request.bytes bounds the bytes of frames held over every connection (S13: bound
    every resource): bytes that do not fit wait until another frame's bytes are released, so N
    connections sending big frames cannot make the broker hold N big frames. (Only bytes that
    arrived are held: tests/unit/test_byte_budget.py, tests/integration/test_frame_pool.py.)"""
    async def go() -> None:
        apis = StubApis()
        kl = listener(ListenerLimits(max_frame_bytes=4096, idle_ms=5000, request_timeout_ms=3000, max_connections=4,
                                     queued_max_request_bytes=3000), apis=apis)
        port = await kl.start()
        # A announces a 2000-byte frame and sends most of it: it holds the 1900 bytes that arrived.
        _ra, wa = await _open(port)
        wa.write(struct.pack(">i", 2000) + b"\0" * 1900)
        await wa.drain()
        for _ in range(100):  # bounded: until the listener has taken A's room
            if kl.budget.in_flight == 1900:
                break
            await asyncio.sleep(0.02)
        assert kl.budget.in_flight == 1900
        # B's complete produce frame of ~1300 bytes does not fit beside it: not read, not answered.
        rb, wb = await _open(port)
        produce = frame(0, 9, {"acks": 1, "topic_data": [{"name": "t", "partition_data": [
            {"index": 0, "records": b"x" * 1200}]}]}, correlation_id=5)
        assert 1000 < len(produce) < 4096
        wb.write(_sized(produce))
        await wb.drain()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(rb.readexactly(4), 0.5)
        assert apis.calls == []
        # A goes away: its room comes back and B is answered.
        wa.close()
        answer = await _response(rb)
        assert read_response(answer, 0, 9)[0] == 5
        assert [c[0] for c in apis.calls] == ["Produce"]
        assert kl.budget.in_flight == 0
        wb.close()
        await kl.stop()

    asyncio.run(go())
