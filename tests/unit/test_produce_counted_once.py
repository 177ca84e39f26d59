"""A Produce is counted in one memory pool only (issue 28): one that comes through a Kafka listener is
held in the listener's pool (``broker.network.socket_server``) from its arrival until its answer is
written, and the replica manager's produce pool (``ReplicaManager.produce_bytes``, queued.max.request.bytes)
does not reserve it again; a gRPC produce, which no listener pool holds, is counted there."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any

from kafka_frames import frame, read_response

from broker.log.config import LogConfig
from broker.log.manager import LogManager
from broker.network.kafka_listener import KafkaListener, ListenerLimits
from broker.replication.replica_manager import BrokerSettings, ReplicaManager
from broker.security.principal import LOCAL_CLIENT, RequestContext
from broker.server.config import Listener
from broker.server.metadata_cache import MetadataCache
from proto import minikafka_pb2 as pb
from proto.record_batch import Record, encode_batch

LEADER, FOLLOWER = 1, 2
RECORDS = encode_batch([Record(value=b"v" * 200, timestamp=1_000)])


class FakeZk:
    def update_partition_state(self, _t: str, _p: int, _state: Any, expected_version: int) -> int:
        return expected_version + 1

    def create_isr_change_notification(self, _tps: Any) -> None:
        pass


class ProduceApis:
    """The request layer as ``KafkaApis`` calls the replica manager: the listener's context is passed on."""

    def __init__(self, rm: ReplicaManager) -> None:
        self.rm = rm
        self.contexts: list[RequestContext] = []

    async def handle(self, api: str, request: Any, ctx: RequestContext) -> Any:
        self.contexts.append(ctx)
        return await self.rm.handle_produce(request, ctx)

    async def begin_produce(self, request: Any, ctx: RequestContext) -> asyncio.Task[Any]:
        self.contexts.append(ctx)
        return asyncio.get_running_loop().create_task(await self.rm.append_produce(request, ctx))


def replica_manager(tmp_path: Path) -> ReplicaManager:
    """The leader of t-0 with a follower in the ISR (acks=all waits for it), and a produce pool of
    one request's records."""
    cfg = LogConfig()
    lm = LogManager([tmp_path / "logs"], cfg)
    lm.startup(0)
    rm = ReplicaManager(BrokerSettings(LEADER, 10_000, cfg, queued_max_request_bytes=len(RECORDS)), lm,
                        FakeZk(), MetadataCache(), lambda _t: cfg)  # type: ignore[arg-type]
    resp = rm.handle_leader_and_isr(pb.LeaderAndIsrRequest(controller_id=LEADER, controller_epoch=1, partition_states=[
        pb.LeaderAndIsrPartitionState(topic_name="t", partition_index=0, controller_epoch=1, leader=LEADER,
                                      leader_epoch=0, isr=[LEADER, FOLLOWER], zk_version=0,
                                      replicas=[LEADER, FOLLOWER])]))
    assert resp.partition_errors[0].error_code == pb.ErrorCode.NONE
    return rm


async def _until(check: Any, what: str) -> None:
    for _ in range(250):  # bounded: 5 s
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not within 5 s: {what}")


def test_a_produce_through_a_kafka_listener_is_counted_in_the_listeners_pool_only(tmp_path: Path) -> None:
    async def go() -> None:
        rm = replica_manager(tmp_path)
        log = rm.partitions[("t", 0)]
        apis = ProduceApis(rm)
        kl = KafkaListener(Listener("KAFKA", "127.0.0.1", 0, "PLAINTEXT"), apis,
                           ListenerLimits(max_frame_bytes=65536, idle_ms=5000, request_timeout_ms=3000,
                                          max_connections=4, queued_max_request_bytes=1 << 20))
        port = await kl.start()
        # A gRPC produce waiting for its acks fills the replica manager's pool.
        grpc = pb.ProduceRequest(acks=-1, timeout_ms=3000, topics=[pb.ProduceTopicData(name="t", partitions=[
            pb.ProducePartitionData(partition=0, records=RECORDS)])])
        grpc_answer = asyncio.get_running_loop().create_task(await rm.append_produce(grpc, LOCAL_CLIENT))
        assert rm.produce_bytes.in_flight == len(RECORDS) == rm.produce_bytes.limit
        assert log.log_end_offset == 1
        # A produce through the Kafka listener is appended at once nonetheless: its frame is held in
        # the listener's pool while its acks are pending, and not counted a second time.
        request = frame(0, 9, {"acks": -1, "timeout": 500, "topic_data": [{"name": "t", "partition_data": [
            {"index": 0, "records": RECORDS}]}]}, correlation_id=5)
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(struct.pack(">i", len(request)) + request)
        await w.drain()
        await _until(lambda: log.log_end_offset == 2, "the Kafka listener's produce appended")
        assert apis.contexts[0].bytes_reserved and not LOCAL_CLIENT.bytes_reserved
        assert kl.budget.in_flight == len(request)
        assert rm.produce_bytes.in_flight == len(RECORDS)  # the gRPC produce's alone
        # No follower fetches: its acks time out, it is answered, and its frame's bytes go back.
        size = await asyncio.wait_for(r.readexactly(4), 5)
        correlation_id, body = read_response(size + await r.readexactly(int.from_bytes(size, "big")), 0, 9)
        assert correlation_id == 5
        assert body.responses[0].partition_responses[0].error_code == pb.ErrorCode.REQUEST_TIMED_OUT
        await _until(lambda: kl.budget.in_flight == 0, "the answered frame released")
        assert (await asyncio.wait_for(grpc_answer, 5)).topics[0].partitions[0].error_code \
            == pb.ErrorCode.REQUEST_TIMED_OUT
        assert rm.produce_bytes.in_flight == 0
        w.close()
        await kl.stop()

    asyncio.run(go())
