"""A LeaderAndIsr of thousands of partitions logs its transitions in one line (issue 29: a line per
partition was ~17% of a broker's loop while 10,000 partitions were created); a small one logs each
transition, as the event log (`minikafka top`) shows them. Real replica manager and logs."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from sole_replica import FakeZk

from broker.log.config import LogConfig
from broker.log.manager import LogManager
from broker.replication.replica_manager import TRANSITIONS_LOGGED_EACH, BrokerSettings, ReplicaManager
from broker.server.metadata_cache import MetadataCache
from proto import minikafka_pb2 as pb


def request(n: int, epoch: int = 0) -> pb.LeaderAndIsrRequest:
    """Partitions 0..n-1 of t: the even ones led here (broker 1), the odd ones by broker 2."""
    return pb.LeaderAndIsrRequest(controller_id=1, controller_epoch=1, partition_states=[
        pb.LeaderAndIsrPartitionState(topic_name="t", partition_index=p, controller_epoch=1, leader=1 + p % 2,
                                      leader_epoch=epoch, isr=[1, 2], zk_version=epoch, replicas=[1, 2])
        for p in range(n)])


@pytest.mark.parametrize("n", [TRANSITIONS_LOGGED_EACH, TRANSITIONS_LOGGED_EACH + 1])
def test_transitions_logged_each_or_summed_up(tmp_path: Path, caplog: pytest.LogCaptureFixture, n: int) -> None:
    async def run() -> None:
        cfg = LogConfig()
        lm = LogManager([tmp_path / "logs"], cfg)
        lm.startup(0)
        rm = ReplicaManager(BrokerSettings(1, 10_000, cfg), lm, FakeZk(), MetadataCache(),  # type: ignore[arg-type]
                            lambda _t: cfg)
        caplog.set_level(logging.INFO, logger="broker.replication.replica_manager")
        resp = rm.handle_leader_and_isr(request(n))
        assert len(resp.partition_errors) == n and all(e.error_code == 0 for e in resp.partition_errors)
        assert rm._transitions is None

    asyncio.run(run())
    kinds = [getattr(r, "event", None) for r in caplog.records if r.levelno >= logging.INFO]
    leaders = (n + 1) // 2
    if n <= TRANSITIONS_LOGGED_EACH:
        assert kinds.count("became_leader") == leaders and "leader_and_isr" not in kinds
    else:
        assert "became_leader" not in kinds and "became_follower" not in kinds
        [line] = [r.getMessage() for r in caplog.records if getattr(r, "event", None) == "leader_and_isr"]
        assert f"LeaderAndIsr of {n} partitions" in line and f"became leader of {leaders} (t-0, t-2," in line
