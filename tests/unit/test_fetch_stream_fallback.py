"""A follower falls back to unary Fetch when its leader has no FetchStream (a leader of an older
version during a rolling upgrade), instead of backing off forever. The gRPC stub is faked: the
boundary is gRPC's, not ours."""

from __future__ import annotations

import asyncio

import grpc

from broker.replication.fetcher import ReplicaFetcher
from proto import minikafka_pb2 as pb


class _OldLeaderStream:
    async def write(self, _req: pb.FetchRequest) -> None:
        raise grpc.aio.AioRpcError(grpc.StatusCode.UNIMPLEMENTED, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                   "Method not found!")

    async def read(self) -> pb.FetchResponse:
        raise AssertionError("never reached")

    def cancel(self) -> None:
        pass


class _OldLeaderStub:
    def __init__(self) -> None:
        self.streams = 0
        self.unary = 0

    def FetchStream(self) -> _OldLeaderStream:
        self.streams += 1
        return _OldLeaderStream()

    async def Fetch(self, _req: pb.FetchRequest, timeout: float) -> pb.FetchResponse:
        self.unary += 1
        return pb.FetchResponse(throttle_time_ms=7)


def test_a_leader_without_fetch_stream_is_fetched_from_with_unary_calls() -> None:
    stub = _OldLeaderStub()
    fetcher = object.__new__(ReplicaFetcher)  # only the transport half is exercised
    fetcher._stub, fetcher._stream, fetcher._unary, fetcher._socket = stub, None, False, None
    fetcher.leader = pb.BrokerEndpoint(broker_id=2)

    async def two_fetches() -> list[pb.FetchResponse]:
        return [await fetcher._fetch(pb.FetchRequest(replica_id=1), 5.0) for _ in range(2)]

    responses = asyncio.run(two_fetches())
    assert [r.throttle_time_ms for r in responses] == [7, 7]
    assert (stub.streams, stub.unary) == (1, 2), "the stream is tried once, then unary Fetch"
