"""The replica fetch listener's frames (broker.network.replica_fetch_socket) and how its port is registered."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.network.replica_fetch_socket import (
    FOLLOWER_FETCH,
    decode_request,
    encode_request,
    encode_response,
)
from controller.channel import endpoint
from proto import minikafka_pb2 as pb
from zk.data import BrokerIdZNode, BrokerRegistration, CorruptZnodeError


def _request(replica_id: int = 2) -> pb.FetchRequest:
    return pb.FetchRequest(replica_id=replica_id, replica_epoch=77, max_wait_ms=500, topics=[pb.FetchTopic(
        name="t", partitions=[pb.FetchPartition(partition=3, fetch_offset=10, current_leader_epoch=4)])])


@given(correlation_id=st.integers(0, 2**31 - 1), replica_id=st.integers(-1, 2**31 - 1))
def test_a_request_frame_round_trips(correlation_id: int, replica_id: int) -> None:
    frame = encode_request(correlation_id, _request(replica_id))
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    assert decode_request(frame[4:]) == (correlation_id, _request(replica_id))


def test_a_response_frame_is_its_size_correlation_id_and_response() -> None:
    resp = pb.FetchResponse(topics=[pb.FetchTopicResponse(name="t", partitions=[
        pb.FetchPartitionResponse(partition=3, high_watermark=9, records=b"\x00" * 70)])])
    frame = encode_response(12, resp)
    size, correlation_id = struct.unpack_from(">ii", frame)
    assert (size, correlation_id) == (len(frame) - 4, 12)
    assert pb.FetchResponse.FromString(frame[8:]) == resp


@pytest.mark.parametrize("body, why", [
    (b"", "no header"),
    (struct.pack(">hh", FOLLOWER_FETCH, 0), "no header"),
    (struct.pack(">hhi", 0, 0, 1), "api key 0"),
    (struct.pack(">hhi", FOLLOWER_FETCH, 1, 1), "version 1"),
    (struct.pack(">hhi", FOLLOWER_FETCH, 0, 1) + b"\xff\xff\xff", "does not parse"),
])
def test_frames_that_are_not_a_follower_fetch_v0_are_refused(body: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        decode_request(body)


def test_the_port_is_registered_and_reaches_followers_in_leader_and_isr() -> None:
    reg = BrokerRegistration(1, "h", 9, 77, replica_fetch_port=4242)
    raw = BrokerIdZNode.encode(reg)
    assert json.loads(raw)["replica_fetch_port"] == 4242
    decoded = BrokerIdZNode.decode(1, raw, epoch=5)
    assert decoded.replica_fetch_port == 4242
    assert endpoint(decoded).replica_fetch_port == 4242
    # A registration from a broker without the listener (or an older version): none.
    old = json.loads(raw)
    del old["replica_fetch_port"]
    assert BrokerIdZNode.decode(1, json.dumps(old).encode()).replica_fetch_port == 0
    for bad in (-1, 70000, "x"):
        with pytest.raises(CorruptZnodeError):
            BrokerIdZNode.decode(1, json.dumps({**old, "replica_fetch_port": bad}).encode())
