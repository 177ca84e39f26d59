"""TLS and SASL on the Kafka listener (broker.network.kafka_listener, broker.security.kafka_sasl) over real sockets with
real certificates and a stub request layer: the pre-authentication gate, SCRAM through SaslHandshake /
SaslAuthenticate (v1 framing and the bare tokens of v0), failures answered then closed, principals
into the RequestContext, and the broker.server.config rules for secure Kafka listeners."""

from __future__ import annotations

import asyncio
import ssl
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kafka_frames import frame, read_response
from scram_client import client_final

from broker.network.kafka_listener import KafkaListener, ListenerLimits
from broker.security import kafka_sasl
from broker.security.kafka_sasl import SaslServerConfig
from broker.server.config import ConfigError, Listener, build_config
from client.ops import certs
from proto import minikafka_pb2 as pb
from proto import scram

LIMITS = ListenerLimits(max_frame_bytes=65536, idle_ms=5000, request_timeout_ms=3000, max_connections=8)
USERS = {"alice": scram.new_credential("alice-secret")}


class StubApis:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, Any]] = []

    async def handle(self, api: str, request: Any, ctx: Any) -> Any:
        self.calls.append((api, request, ctx))
        return pb.MetadataResponse(cluster_id="c", controller_id=1)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    certs.init_ca(d)
    certs.issue(d, "broker-1", hosts=["127.0.0.1", "localhost"])
    certs.issue(d, "alice")
    return d


def server_tls(pki: Path, require_client_cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki / "broker-1.pem")
    ctx.load_verify_locations(pki / "ca.pem")
    ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_NONE
    return ctx


def client_tls(pki: Path, cert: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if cert:
        ctx.load_cert_chain(pki / f"{cert}.pem")
    return ctx


def sized(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


async def response(reader: asyncio.StreamReader) -> bytes:
    size = await asyncio.wait_for(reader.readexactly(4), 5)
    return size + await asyncio.wait_for(reader.readexactly(int.from_bytes(size, "big")), 5)


async def closed(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), 6) == b""
    except ConnectionError:
        return True


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.r, self.w = reader, writer
        self.cid = 0

    async def call(self, api_key: int, version: int, values: dict[str, Any] | None = None) -> Any:
        self.cid += 1
        self.w.write(sized(frame(api_key, version, values, correlation_id=self.cid)))
        await self.w.drain()
        cid, body = read_response(await response(self.r), api_key, version)
        assert cid == self.cid
        return body

    async def send(self, api_key: int, version: int, values: dict[str, Any] | None = None) -> None:
        self.w.write(sized(frame(api_key, version, values)))
        await self.w.drain()


def run(pki: Path, protocol: str, body: Callable[[KafkaListener, StubApis, Callable[..., Awaitable[Conn]]],
                                                   Awaitable[None]],
        limits: ListenerLimits = LIMITS, require_client_cert: bool = False) -> None:
    async def go() -> None:
        apis = StubApis()
        tls = server_tls(pki, require_client_cert) if protocol != "PLAINTEXT" else None
        sasl = SaslServerConfig(USERS.get, b"secret") if protocol == "SASL_SSL" else None
        kl = KafkaListener(Listener("KAFKA", "127.0.0.1", 0, protocol), apis, limits, tls=tls,  # type: ignore[arg-type]
                           sasl=sasl)
        port = await kl.start()

        async def connect(tls_client: ssl.SSLContext | None = None, plain: bool = False) -> Conn:
            ctx = None if plain or protocol == "PLAINTEXT" else (tls_client or client_tls(pki))
            r, w = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
            return Conn(r, w)

        try:
            await body(kl, apis, connect)
        finally:
            await kl.stop()

    asyncio.run(go())


async def scram_login(c: Conn, user: str, password: str, version: int = 2) -> Any:
    hs = await c.call(17, 1, {"mechanism": "SCRAM-SHA-256"})
    assert hs.error_code == 0 and list(hs.mechanisms) == ["SCRAM-SHA-256"]
    bare = f"n={user},r=clientnonce"
    first = await c.call(36, version, {"auth_bytes": f"n,,{bare}".encode()})
    if first.error_code:
        return first
    return await c.call(36, version, {"auth_bytes": client_final(password, bare, first.auth_bytes.decode())})


def test_sasl_ssl_scram_login_then_requests_run_as_the_user(pki: Path) -> None:
    async def body(kl: KafkaListener, apis: StubApis, connect: Callable[..., Awaitable[Conn]]) -> None:
        c = await connect()
        versions = await c.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        advertised = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert advertised[17] == (0, 1) and advertised[36] == (0, 2)
        final = await scram_login(c, "alice", "alice-secret")
        assert final.error_code == 0 and final.auth_bytes.startswith(b"v=")
        await c.call(3, 9)
        ctx = apis.calls[-1][2]
        assert (str(ctx.principal), ctx.listener, ctx.security_protocol) == ("User:alice", "KAFKA", "SASL_SSL")
        # Authenticated: a second exchange is not due (no re-authentication).
        assert (await c.call(17, 1, {"mechanism": "SCRAM-SHA-256"})).error_code == kafka_sasl.ILLEGAL_SASL_STATE
        await c.call(3, 9)  # and the connection still serves
        assert len(apis.calls) == 2

    run(pki, "SASL_SSL", body)


@pytest.mark.parametrize("version", [0, 1])
def test_old_sasl_authenticate_versions(pki: Path, version: int) -> None:
    async def body(_kl: KafkaListener, apis: StubApis, connect: Callable[..., Awaitable[Conn]]) -> None:
        c = await connect()
        assert (await scram_login(c, "alice", "alice-secret", version)).error_code == 0
        await c.call(3, 1)
        assert str(apis.calls[-1][2].principal) == "User:alice"

    run(pki, "SASL_SSL", body)


def test_v0_handshake_then_bare_scram_tokens(pki: Path) -> None:
    async def body(_kl: KafkaListener, apis: StubApis, connect: Callable[..., Awaitable[Conn]]) -> None:
        c = await connect()
        assert (await c.call(17, 0, {"mechanism": "SCRAM-SHA-256"})).error_code == 0
        bare = "n=alice,r=legacy"
        c.w.write(sized(f"n,,{bare}".encode()))
        server_first = (await response(c.r))[4:].decode()
        c.w.write(sized(client_final("alice-secret", bare, server_first)))
        assert (await response(c.r))[4:].startswith(b"v=")
        await c.call(3, 9)
        assert str(apis.calls[-1][2].principal) == "User:alice"
        # A wrong password in v0 framing: nothing to answer it with, the connection just closes.
        d = await connect()
        assert (await d.call(17, 0, {"mechanism": "SCRAM-SHA-256"})).error_code == 0
        d.w.write(sized(f"n,,{bare}".encode()))
        server_first = (await response(d.r))[4:].decode()
        d.w.write(sized(client_final("wrong", bare, server_first)))
        assert await closed(d.r)

    run(pki, "SASL_SSL", body)


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("mallory", "alice-secret")])
def test_failed_authentication_is_answered_58_then_closed(pki: Path, user: str, password: str) -> None:
    async def body(kl: KafkaListener, apis: StubApis, connect: Callable[..., Awaitable[Conn]]) -> None:
        c = await connect()
        final = await scram_login(c, user, password)
        assert final.error_code == kafka_sasl.SASL_AUTHENTICATION_FAILED and "invalid credentials" in final.error_message
        assert await closed(c.r)
        assert apis.calls == [] and kl.closed_for_violation == 1

    run(pki, "SASL_SSL", body)


def test_unsupported_mechanism_is_answered_33_then_closed(pki: Path) -> None:
    async def body(_kl: KafkaListener, _apis: StubApis, connect: Callable[..., Awaitable[Conn]]) -> None:
        c = await connect()
        hs = await c.call(17, 1, {"mechanism": "PLAIN"})
        assert hs.error_code == kafka_sasl.UNSUPPORTED_SASL_MECHANISM and list(hs.mechanisms) == ["SCRAM-SHA-256"]
        assert await closed(c.r)

    run(pki, "SASL_SSL", body)


PRE_AUTH_VIOLATIONS: list[tuple[str, Callable[[Conn], Awaitable[None]]]] = [
    ("Metadata before authenticating", lambda c: c.send(3, 9)),
    ("Produce before authenticating", lambda c: c.send(0, 9, {"acks": -1, "topic_data": []})),
    ("SaslAuthenticate before the handshake", lambda c: c.send(36, 2, {"auth_bytes": b"n,,n=alice,r=x"})),
    ("a frame larger than a SCRAM message", lambda c: c.send(36, 2, {"auth_bytes": b"x" * 8192})),
    ("a garbled frame", lambda c: _raw(c, sized(b"\x00\x11\x00\x01garbage"))),
    ("a negative size", lambda c: _raw(c, struct.pack(">i", -1))),
]


async def _raw(c: Conn, data: bytes) -> None:
    c.w.write(data)
    await c.w.drain()


@pytest.mark.parametrize("what", [w for w, _f in PRE_AUTH_VIOLATIONS])
def test_anything_but_the_sasl_exchange_before_authentication_closes_unanswered(pki: Path, what: str) -> None:
    send = dict(PRE_AUTH_VIOLATIONS)[what]

    async def body(kl: KafkaListener, apis: StubApis, connect: Callable[..., Awaitable[Conn]]) -> None:
        c = await connect()
        await send(c)
        assert await closed(c.r)  # no answer: the first bytes back are the end of the stream
        assert apis.calls == [] and kl.closed_for_violation == 1
        # The listener still serves others.
        ok = await connect()
        assert (await scram_login(ok, "alice", "alice-secret")).error_code == 0

    run(pki, "SASL_SSL", body)


def test_sasl_exchange_rounds_and_requests_are_bounded(pki: Path) -> None:
    async def body(_kl: KafkaListener, _apis: StubApis, connect: Callable[..., Awaitable[Conn]]) -> None:
        c = await connect()
        for _ in range(kafka_sasl.MAX_PREAUTH_REQUESTS):
            await c.call(18, 0)
        await c.send(18, 0)
        assert await closed(c.r)

    run(pki, "SASL_SSL", body)


def test_authentication_must_finish_in_time_and_plaintext_gets_nowhere(pki: Path) -> None:
    limits = ListenerLimits(max_frame_bytes=65536, idle_ms=60000, request_timeout_ms=500, max_connections=8)

    async def body(kl: KafkaListener, apis: StubApis, connect: Callable[..., Awaitable[Conn]]) -> None:
        slow = await connect()
        await slow.call(18, 0)
        assert await closed(slow.r)  # request.timeout.ms passed without authenticating
        # A Kafka client without TLS: its ApiVersions is not a TLS ClientHello; nothing comes back.
        plain = await connect(plain=True)
        await plain.send(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        back = await asyncio.wait_for(plain.r.read(), 6)  # until the broker closes it
        assert back == b"" or back[0] == 0x15, back  # at most a TLS alert record, never a Kafka answer
        # Nor does a client that opens TCP and says nothing: the TLS handshake is bounded too.
        mute = await connect(plain=True)
        assert await closed(mute.r)
        assert apis.calls == []
        ok = await connect()
        assert (await scram_login(ok, "alice", "alice-secret")).error_code == 0
        assert len(kl._connections) <= 1

    run(pki, "SASL_SSL", body, limits=limits)


def test_ssl_listener_principal_is_the_certificate_cn(pki: Path) -> None:
    async def body(_kl: KafkaListener, apis: StubApis, connect: Callable[..., Awaitable[Conn]]) -> None:
        c = await connect(client_tls(pki, "alice"))
        await c.call(3, 9)
        ctx = apis.calls[-1][2]
        assert (str(ctx.principal), ctx.security_protocol, ctx.broker_id) == ("User:alice", "SSL", None)
        b = await connect(client_tls(pki, "broker-1"))
        await b.call(3, 9)
        assert apis.calls[-1][2].broker_id == 1
        # No certificate: the handshake fails (ssl.client.auth=required).
        with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
            nocert = await connect(client_tls(pki))
            await nocert.call(3, 9)

    run(pki, "SSL", body, require_client_cert=True)


def test_sasl_apis_on_a_listener_without_sasl_are_illegal_state(pki: Path) -> None:
    async def body(_kl: KafkaListener, apis: StubApis, connect: Callable[..., Awaitable[Conn]]) -> None:
        c = await connect()
        assert (await c.call(17, 1, {"mechanism": "SCRAM-SHA-256"})).error_code == kafka_sasl.ILLEGAL_SASL_STATE
        assert (await c.call(36, 2, {"auth_bytes": b"x"})).error_code == kafka_sasl.ILLEGAL_SASL_STATE
        await c.call(3, 9)
        assert str(apis.calls[-1][2].principal) == "User:ANONYMOUS"

    run(pki, "PLAINTEXT", body)


def test_listener_refuses_a_security_setup_that_does_not_fit_its_protocol(pki: Path) -> None:
    with pytest.raises(ValueError):
        KafkaListener(Listener("K", "127.0.0.1", 0, "SASL_SSL"), StubApis(), LIMITS,  # type: ignore[arg-type]
                      tls=server_tls(pki))
    with pytest.raises(ValueError):
        KafkaListener(Listener("K", "127.0.0.1", 0, "PLAINTEXT"), StubApis(), LIMITS,  # type: ignore[arg-type]
                      tls=server_tls(pki))


# ------------------------------------------------------------------ broker.server.config


@pytest.fixture
def secure(pki: Path, tmp_path: Path) -> dict[str, str]:
    """Every gRPC client listener authenticates (SASL_SSL)."""
    return {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181", "log.dirs": str(tmp_path / "logs"),
            "listeners": "CLIENT://127.0.0.1:9092,INTERNAL://127.0.0.1:9192",
            "listener.security.protocol.map": "CLIENT:SASL_SSL,INTERNAL:SSL,KAFKA:SASL_SSL,KSSL:SSL,KPLAIN:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL", "ssl.keystore.location": str(pki / "broker-1.pem"),
            "ssl.truststore.location": str(pki / "ca.pem")}


def test_secure_cluster_takes_sasl_ssl_kafka_listeners_and_refuses_anonymous_ones(secure: dict[str, str]) -> None:
    cfg = build_config({**secure, "kafka.listeners": "KAFKA://127.0.0.1:9392"})
    assert [(x.name, x.security_protocol) for x in cfg.kafka_listener_list] == [("KAFKA", "SASL_SSL")]
    with pytest.raises(ConfigError, match="PLAINTEXT but every gRPC client listener"):
        build_config({**secure, "kafka.listeners": "KPLAIN://127.0.0.1:9392"})
    with pytest.raises(ConfigError, match="does not authenticate"):
        build_config({**secure, "kafka.listeners": "KSSL://127.0.0.1:9392"})
    # SSL with client certificates required authenticates.
    cfg = build_config({**secure, "ssl.client.auth": "required", "kafka.listeners": "KSSL://127.0.0.1:9392"})
    assert cfg.kafka_listener_list[0].security_protocol == "SSL"
    with pytest.raises(ConfigError, match="SASL_PLAINTEXT"):
        build_config({**secure, "listener.security.protocol.map": secure["listener.security.protocol.map"]
                      + ",KSP:SASL_PLAINTEXT", "kafka.listeners": "KSP://127.0.0.1:9392"})


def test_tls_kafka_listener_needs_its_pem_files(secure: dict[str, str], tmp_path: Path) -> None:
    plain = {**secure, "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:SSL,KAFKA:SASL_SSL"}
    assert build_config({**plain, "kafka.listeners": "KAFKA://127.0.0.1:9392"}).kafka_listener_list
    with pytest.raises(ConfigError, match=r"ssl\.keystore\.location|is not a readable file"):
        build_config({**plain, "ssl.keystore.location": str(tmp_path / "missing.pem"),
                      "kafka.listeners": "KAFKA://127.0.0.1:9392"})


def test_sasl_session_gate_is_a_pure_state_machine() -> None:
    """broker.security.kafka_sasl without sockets: what each phase admits, and every way out of it."""
    from broker.security.kafka_sasl import Phase, SaslSession

    s = SaslSession(SaslServerConfig(USERS.get, b"k"), nonce=lambda: "srv")
    assert s.admits(18) and s.admits(17) and not s.admits(3)  # Metadata: never before authentication
    assert not s.admits(36)  # SaslAuthenticate before the handshake
    assert s.handshake("SCRAM-SHA-256", 1).values["error_code"] == 0 and s.phase is Phase.AUTHENTICATE
    assert s.admits(36) and not s.admits(18) and not s.admits(17)
    first = s.authenticate(b"n,,n=alice,r=c")
    assert first.values["auth_bytes"].startswith(b"r=csrv,") and not first.close
    final = s.authenticate(client_final("alice-secret", "n=alice,r=c", first.values["auth_bytes"].decode()))
    assert not final.close and s.authenticated and s.user == "alice" and s.admits(3)
    # A third SCRAM message is not due.
    assert s.authenticate(b"more").values["error_code"] == kafka_sasl.ILLEGAL_SASL_STATE and s.authenticated
    # Garbled first message: answered 58 and closed; the session is over.
    t = SaslSession(SaslServerConfig(USERS.get, b"k"))
    t.handshake("SCRAM-SHA-256", 1)
    bad = t.authenticate(b"\x00garbage")
    assert bad.close and bad.values["error_code"] == kafka_sasl.SASL_AUTHENTICATION_FAILED and t.phase is Phase.FAILED
    assert not t.admits(36)
    # The request budget before authentication.
    u = SaslSession(SaslServerConfig(USERS.get, b"k"))
    assert all(u.admits(18) for _ in range(kafka_sasl.MAX_PREAUTH_REQUESTS)) and not u.admits(17)


def test_metadata_offers_for_produce_only_a_kafka_listener_of_the_clients_own_protocol() -> None:
    """A client's Produce requests may move to a Kafka listener only where it is the same principal
    under the same ACLs: a PLAINTEXT client to a PLAINTEXT one, an SSL client to an SSL one; never a
    SASL_SSL client (the producer speaks no SASL on a plain socket), nor the inter-broker listener."""
    from types import SimpleNamespace

    from broker.security.principal import ANONYMOUS, RequestContext
    from broker.server.metadata_apis import MetadataApis

    server = object.__new__(MetadataApis)
    server.config = SimpleNamespace(kafka_listener_list=[  # type: ignore[assignment]
        Listener("KSASL", "h", 1, "SASL_SSL"), Listener("KPLAIN", "h", 2, "PLAINTEXT"), Listener("KSSL", "h", 3, "SSL")])

    def offered(protocol: str, inter_broker: bool = False) -> str | None:
        return server._kafka_produce_listener(RequestContext(ANONYMOUS, "CLIENT", protocol, "h", inter_broker))

    assert offered("PLAINTEXT") == "KPLAIN"
    assert offered("SSL") == "KSSL"
    assert offered("SASL_SSL") is None
    assert offered("SSL", inter_broker=True) is None
    server.config = SimpleNamespace(kafka_listener_list=[Listener("KSASL", "h", 1, "SASL_SSL")])  # type: ignore[assignment]
    assert offered("PLAINTEXT") is None

    broker = pb.BrokerEndpoint(broker_id=2, host="i", port=1, listeners=[
        pb.ListenerEndpoint(name="CLIENT", host="c", port=9092, security_protocol="PLAINTEXT"),
        pb.ListenerEndpoint(name="KPLAIN", host="k", port=9093, security_protocol="PLAINTEXT")])
    answered = MetadataApis._endpoint_on(broker, "CLIENT", "KPLAIN")
    assert answered is not None
    assert (answered.host, answered.port, answered.kafka_produce_host, answered.kafka_produce_port) == \
        ("c", 9092, "k", 9093)
    answered = MetadataApis._endpoint_on(broker, "CLIENT", None)
    assert answered is not None and answered.kafka_produce_port == 0
