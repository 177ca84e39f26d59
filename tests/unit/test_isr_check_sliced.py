"""The periodic ISR check (S4.2) walks the led partitions a slice at a time, the loop free between
slices (issue 29, S15: at 10,000 partitions one walk held the broker's loop ~50 ms), and skips a
partition removed while the loop served others. A real replica manager on real logs, no sockets."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from sole_replica import LEADER, FakeZk

from broker.log.config import LogConfig
from broker.log.manager import LogManager
from broker.replication import replica_manager as rm_mod
from broker.replication.replica_manager import BrokerSettings, ReplicaManager
from broker.server.metadata_cache import MetadataCache
from proto import minikafka_pb2 as pb

PARTITIONS = 35
LAG_MS = 1


def _led_with_a_silent_follower(tmp_path: Path) -> ReplicaManager:
    """Topic t's partitions, led here with follower 2 in the ISR; 2 never fetches, and
    replica.lag.time.max.ms is 1 ms: every partition's ISR is to shrink to the leader alone."""
    cfg = LogConfig()
    lm = LogManager([tmp_path / "logs"], cfg)
    lm.startup(0)
    rm = ReplicaManager(BrokerSettings(LEADER, LAG_MS, cfg), lm, FakeZk(), MetadataCache(),  # type: ignore[arg-type]
                        lambda _t: cfg)
    answer = rm.handle_leader_and_isr(pb.LeaderAndIsrRequest(controller_id=LEADER, controller_epoch=1, partition_states=[
        pb.LeaderAndIsrPartitionState(topic_name="t", partition_index=p, controller_epoch=1, leader=LEADER,
                                      leader_epoch=0, isr=[LEADER, 2], zk_version=0, replicas=[LEADER, 2])
        for p in range(PARTITIONS)]))
    assert all(e.error_code == pb.ErrorCode.NONE for e in answer.partition_errors)
    time.sleep(0.01)  # past the lag
    return rm


def test_the_isr_check_runs_in_slices_and_skips_what_was_removed_meanwhile(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rm_mod, "ISR_CHECK_SLICE", 10)
    rm = _led_with_a_silent_follower(tmp_path)
    proposals: list[tuple[tuple[str, int], tuple[int, ...]]] = []
    monkeypatch.setattr(rm, "_write_isr", lambda p, isr, _v, _why: proposals.append((p.tp, isr)))
    seen_between: list[int] = []

    def meanwhile() -> None:
        seen_between.append(len(proposals))
        del rm.partitions[("t", PARTITIONS - 1)]  # e.g. a StopReplica served between two slices

    async def main() -> None:
        asyncio.get_running_loop().call_soon(meanwhile)
        await rm.maybe_shrink_isr()

    asyncio.run(main())
    assert seen_between == [10]  # the loop ran other work after the first slice
    assert proposals == [(("t", p), (LEADER,)) for p in range(PARTITIONS - 1)]


def test_a_partition_that_is_not_led_is_not_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rm = _led_with_a_silent_follower(tmp_path)
    rm.handle_leader_and_isr(pb.LeaderAndIsrRequest(controller_id=LEADER, controller_epoch=1, partition_states=[
        pb.LeaderAndIsrPartitionState(topic_name="t", partition_index=0, controller_epoch=1, leader=2,
                                      leader_epoch=1, isr=[LEADER, 2], zk_version=1, replicas=[LEADER, 2])]))
    proposals: list[tuple[str, int]] = []
    monkeypatch.setattr(rm, "_write_isr", lambda p, _isr, _v, _why: proposals.append(p.tp))
    asyncio.run(rm.maybe_shrink_isr())
    assert proposals == [("t", p) for p in range(1, PARTITIONS)]
