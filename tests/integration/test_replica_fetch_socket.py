"""The replica fetch listener (broker.network.replica_fetch_socket) on real brokers: followers fetch over
it, it serves brokers only (SPEC S12.1), and hostile frames close only their own connection (S13)."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import time
from pathlib import Path

import pytest
from helpers import batch_of, isr_of, produce, ready_topic
from kazoo.client import KazooClient
from test_observability import scrape

from broker.network.replica_fetch_socket import ReplicaFetchConnection, encode_request
from broker.replication.fetcher import FetcherSettings, ReplicaFetcher
from client.ops import certs
from client.ops.local_cluster import free_port
from proto import minikafka_pb2 as pb
from proto.transport import ChannelSecurity
from zk.data import BrokerIdZNode, BrokerRegistration

pytestmark = pytest.mark.integration
E = pb.ErrorCode


def _registration(zk: KazooClient, broker_id: int) -> BrokerRegistration:
    data, stat = zk.get(BrokerIdZNode.path(broker_id))
    return BrokerIdZNode.decode(broker_id, data, epoch=stat.czxid)


def _tls(secrets: Path, cert: Path | None) -> ssl.SSLContext:
    return ChannelSecurity("SSL", ssl_cafile=str(secrets / "ca.pem"),
                           ssl_certfile=str(cert) if cert else None).ssl_context()


def _fetch_request(topic: str, replica_id: int, replica_epoch: int) -> pb.FetchRequest:
    return pb.FetchRequest(replica_id=replica_id, replica_epoch=replica_epoch, max_wait_ms=0, topics=[
        pb.FetchTopic(name=topic, partitions=[pb.FetchPartition(partition=0, fetch_offset=0, current_leader_epoch=-1,
                                                                partition_max_bytes=1 << 20)])])


def _fetch(port: int, tls: ssl.SSLContext, request: pb.FetchRequest) -> pb.FetchPartitionResponse:
    async def go() -> pb.FetchResponse:
        conn = ReplicaFetchConnection("127.0.0.1", port, tls, 5.0)
        try:
            return await conn.fetch(request, 10.0)
        finally:
            conn.close()
    resp = asyncio.run(go())
    return resp.topics[0].partitions[0]


def _closed_after(port: int, tls: ssl.SSLContext, frame: bytes) -> bool:
    """Send ``frame`` on an authenticated connection: does the broker close it (EOF within 10 s)?"""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            tls.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        s.sendall(frame)
        try:
            return s.recv(1 << 16) == b""
        except (ConnectionError, ssl.SSLError):
            return True


def test_s12_1_followers_fetch_over_the_replica_fetch_listener_which_serves_brokers_only(  # type: ignore[no-untyped-def]
        cluster, zk_client: KazooClient, tmp_path: Path) -> None:
    c = cluster.start(3)
    leader, _ = ready_topic(cluster, "sock", **{"min.insync.replicas": "2"})
    view = cluster.view()
    conn, _ = view.leader_connection("sock", 0)
    assert produce(conn, "sock", 0, batch_of(["committed"])).error_code == E.NONE  # acks=all, min ISR 2
    metrics = c.broker(leader).metrics_address
    assert scrape(metrics)["minikafka_replica_fetch_listener_requests_total"] > 0, "followers did not use it"

    secrets = Path(c.state.secrets)
    reg = _registration(zk_client, leader)
    port = reg.replica_fetch_port
    assert port > 0
    follower, other = (b for b in (1, 2, 3) if b != leader)
    epoch = _registration(zk_client, follower).epoch
    as_follower = _tls(secrets, secrets / f"broker-{follower}.pem")
    # The follower's own certificate, its own id and epoch: served like its fetcher's requests.
    ok = _fetch(port, as_follower, _fetch_request("sock", follower, epoch))
    assert ok.error_code == E.NONE and ok.high_watermark == 1 and len(ok.records) > 0
    # A client certificate from the cluster's CA is not a broker; a broker cannot fetch as another
    # broker, nor as a consumer here; an old incarnation's epoch is stale.
    alice = _tls(secrets, certs.issue(secrets, "alice").pem)
    assert _fetch(port, alice, _fetch_request("sock", follower, epoch)).error_code == E.CLUSTER_AUTHORIZATION_FAILED
    assert _fetch(port, as_follower, _fetch_request("sock", other, epoch)).error_code == \
        E.CLUSTER_AUTHORIZATION_FAILED
    assert _fetch(port, as_follower, _fetch_request("sock", -1, epoch)).error_code == E.INVALID_REQUEST
    assert _fetch(port, as_follower, _fetch_request("sock", follower, epoch - 1)).error_code == \
        E.STALE_BROKER_EPOCH
    # No certificate, or one from another CA: the TLS handshake fails, no frame is read; the
    # follower sees a failed fetch (a ConnectionError, which its fetcher backs off from).
    certs.init_ca(tmp_path / "other-ca")
    foreign = _tls(secrets, certs.issue(tmp_path / "other-ca", f"broker-{follower}").pem)
    for tls in (_tls(secrets, None), foreign):
        with pytest.raises(ConnectionError):
            _fetch(port, tls, _fetch_request("sock", follower, epoch))

    # Hostile frames from an authenticated broker close that connection and nothing else (S13).
    header = struct.pack(">hhi", 1, 0, 7)
    hostile = {
        "a 2 GiB frame": struct.pack(">i", 2**31 - 1) + header,
        "a negative size": struct.pack(">i", -5),
        "another api": struct.pack(">ihhi", 8, 0, 0, 7),
        "a body that is not a FetchRequest": struct.pack(">i", 8 + 6) + header + b"\xff" * 6,
    }
    for what, frame in hostile.items():
        assert _closed_after(port, as_follower, frame), what
    closed = scrape(metrics)["minikafka_replica_fetch_listener_connections_closed_total"]
    assert closed >= len(hostile)
    # A well-formed frame on a fresh connection is still answered, and replication goes on.
    assert not _closed_after(port, as_follower, encode_request(1, _fetch_request("sock", follower, epoch)))
    assert produce(conn, "sock", 0, batch_of(["after"])).error_code == E.NONE
    assert len(isr_of(view, "sock", 0)) == 3


def test_followers_fetch_over_grpc_when_the_listener_is_off(cluster, zk_client: KazooClient) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3, replica_fetch_listener_port="-1")
    leader, _ = ready_topic(cluster, "grpc", **{"min.insync.replicas": "2"})
    assert _registration(zk_client, leader).replica_fetch_port == 0
    conn, _ = cluster.view().leader_connection("grpc", 0)
    assert produce(conn, "grpc", 0, batch_of(["over grpc"])).error_code == E.NONE
    m = scrape(c.broker(leader).metrics_address)
    assert "minikafka_replica_fetch_listener_requests_total" not in m
    assert m['minikafka_high_watermark{partition="0",topic="grpc"}'] == 1


def test_an_unreachable_replica_fetch_listener_falls_back_to_grpc(cluster, zk_client: KazooClient) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3)
    leader, _ = ready_topic(cluster, "fallback", **{"min.insync.replicas": "2"})
    conn, _ = cluster.view().leader_connection("fallback", 0)
    assert produce(conn, "fallback", 0, batch_of(["x"])).error_code == E.NONE
    follower = next(b for b in (1, 2, 3) if b != leader)
    secrets = Path(c.state.secrets)
    reg = _registration(zk_client, leader)
    # The leader as a follower would see it, but behind a port nothing listens on (NAT, a firewall).
    endpoint = pb.BrokerEndpoint(broker_id=leader, host="127.0.0.1", port=reg.port, replica_fetch_port=free_port())
    security = ChannelSecurity("SSL", ssl_cafile=str(secrets / "ca.pem"),
                               ssl_certfile=str(secrets / f"broker-{follower}.pem"))
    epoch = _registration(zk_client, follower).epoch
    settings = FetcherSettings(broker_id=follower, fetch_max_wait_ms=0, fetch_min_bytes=1, fetch_max_bytes=1 << 20,
                               backoff_ms=100, request_timeout_ms=5000)

    async def go() -> tuple[pb.FetchResponse, int]:
        fetcher = ReplicaFetcher(settings, None, endpoint, lambda: epoch, security)  # type: ignore[arg-type]
        try:
            return await fetcher._fetch(_fetch_request("fallback", follower, epoch), 10.0), \
                fetcher._socket_retry_at_ms
        finally:
            await fetcher.stop()

    before_ms = int(time.time() * 1000)
    resp, retry_at_ms = asyncio.run(go())
    part = resp.topics[0].partitions[0]
    assert part.error_code == E.NONE and part.high_watermark == 1  # answered over gRPC
    assert retry_at_ms > before_ms  # and the socket is tried again later, not at every fetch
