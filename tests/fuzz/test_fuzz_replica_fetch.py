"""The replica fetch listener (broker.network.replica_fetch_socket) under hostile frames from an
authenticated broker (SPEC S12, S13): whatever the frame - random bytes, a FollowerFetch with
absurd offsets, sizes, waits and epochs - the leader answers with typed codes or closes that one
connection, and the cluster's invariants hold after every example (alive, topics intact, writable,
replicas identical, nothing outside log.dirs)."""

from __future__ import annotations

import socket
import ssl
import struct
from pathlib import Path

import pytest
from fuzz_support import FuzzFailure, Harness, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st
from kazoo.client import KazooClient

from broker.network.replica_fetch_socket import FOLLOWER_FETCH, encode_request
from proto import minikafka_pb2 as pb
from proto.transport import ChannelSecurity
from zk.data import BrokerIdZNode

pytestmark = pytest.mark.integration

INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)
KNOWN_CODES = set(pb.ErrorCode.values())


def _registrations(zk: KazooClient, broker_ids: list[int]) -> dict[int, tuple[int, int]]:
    """broker id -> (replica fetch port, broker epoch), as registered in ZooKeeper now."""
    out = {}
    for b in broker_ids:
        data, stat = zk.get(BrokerIdZNode.path(b))
        out[b] = (BrokerIdZNode.decode(b, data).replica_fetch_port, stat.czxid)
    return out


def _exchange(port: int, tls: ssl.SSLContext, frame: bytes) -> bytes | None:
    """Send one frame as a broker; the answer frame's body, or None if the leader closed the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            tls.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        s.sendall(frame)
        data = b""
        try:
            while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
                chunk = s.recv(1 << 20)
                if not chunk:
                    return None
                data += chunk
        except (ConnectionError, ssl.SSLError):
            return None
        return data[4:]


def test_hostile_replica_fetch_frames(fuzz: Harness) -> None:
    secrets = Path(fuzz.cluster.state.secrets)
    # One session for the whole test; registrations are read per example (a restarted leader
    # has a new port and epoch).
    zk = KazooClient(fuzz.cluster.state.zookeeper_connect, timeout=10)
    zk.start(timeout=10)

    @fuzz_settings(40)
    @given(raw=st.none() | st.binary(max_size=64),
           header=st.tuples(st.sampled_from([FOLLOWER_FETCH, FOLLOWER_FETCH, 0, -1, 2]), st.sampled_from([0, 0, 1, -1])),
           fetch_offset=st.sampled_from([INT64[0], -1, 0, 1, 3, 10, 1 << 40, INT64[1]]),
           partition_max_bytes=st.sampled_from([INT32[0], -1, 0, 1, 61, 1 << 20, INT32[1]]),
           max_wait_ms=st.sampled_from([0, 0, 1, 50, -1, INT32[0], INT32[1]]),
           min_bytes=st.sampled_from([0, 1, INT32[1]]),
           max_bytes=st.sampled_from([INT32[0], 0, 1, 1 << 20, INT32[1]]),
           epoch_delta=st.sampled_from([0, 0, -1, 1, INT32[0]]),
           current_leader_epoch=st.none() | st.sampled_from([INT32[0], -1, 0, 1, 1000]),
           as_replica=st.sampled_from(["self", "self", "other", "leader", "consumer"]),
           partition=st.sampled_from([0, 0, 0, 1, -1, INT32[1]]))
    def run(raw: bytes | None, header: tuple[int, int], fetch_offset: int, partition_max_bytes: int,
            max_wait_ms: int, min_bytes: int, max_bytes: int, epoch_delta: int, current_leader_epoch: int | None,
            as_replica: str, partition: int) -> None:
        with fuzz.example(**locals()):
            topic = fuzz.committed.name
            leader = fuzz.leader_of(topic)
            if leader < 0:
                return
            regs = _registrations(zk, fuzz.broker_ids)
            port = regs[leader][0]
            follower = next(b for b in fuzz.broker_ids if b != leader)
            tls = ChannelSecurity("SSL", ssl_cafile=str(secrets / "ca.pem"),
                                  ssl_certfile=str(secrets / f"broker-{follower}.pem")).ssl_context()
            if raw is not None:
                frame = struct.pack(">ihhi", 8 + len(raw), *header, 1) + raw
            else:
                fp = pb.FetchPartition(partition=partition, fetch_offset=fetch_offset,
                                       partition_max_bytes=partition_max_bytes)
                if current_leader_epoch is not None:
                    fp.current_leader_epoch = current_leader_epoch
                replica_id = {"self": follower, "other": next(b for b in fuzz.broker_ids if b not in (leader, follower)),
                              "leader": leader, "consumer": -1}[as_replica]
                req = pb.FetchRequest(replica_id=replica_id, max_wait_ms=min(max_wait_ms, 100),
                                      replica_epoch=max(INT64[0], regs[follower][1] + epoch_delta),
                                      min_bytes=min_bytes, max_bytes=max_bytes,
                                      topics=[pb.FetchTopic(name=topic, partitions=[fp])])
                frame = encode_request(1, req)
            body = _exchange(port, tls, frame)
            if body is None:
                if raw is None:
                    raise FuzzFailure("a well-formed FollowerFetch frame closed the connection")
                return
            if body[:4] != struct.pack(">i", 1):
                raise FuzzFailure(f"answer to correlation id {body[:4]!r}, expected 1")
            resp = pb.FetchResponse.FromString(body[4:])
            codes = {resp.error_code} | {p.error_code for t in resp.topics for p in t.partitions}
            if not codes <= KNOWN_CODES:
                raise FuzzFailure(f"untyped codes {sorted(codes - KNOWN_CODES)}")
    try:
        run()
    finally:
        zk.stop()
        zk.close()
