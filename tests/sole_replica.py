"""A real replica manager on real logs that is the only replica of its partitions (an ISR of one:
an append moves the high watermark at once), for the fetch-session unit tests. No sockets; the
leader's ISR writes and producer id lookups go to ``FakeZk``, a boundary these tests do not cover
(the integration tests do, against Debian's ZooKeeper)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from broker.log.config import LogConfig
from broker.log.manager import LogManager
from broker.replication.replica_manager import BrokerSettings, ReplicaManager
from broker.server.metadata_cache import MetadataCache
from proto import minikafka_pb2 as pb

LEADER = 1


class FakeZk:
    def update_partition_state(self, _t: str, _p: int, _state: Any, expected_version: int) -> int:
        return expected_version + 1

    def create_isr_change_notification(self, _tps: Any) -> None:
        pass

    def get_latest_producer_id_block(self) -> tuple[int, int]:
        return 0, 9_999  # producer ids up to here were allocated by this cluster


def leader_and_isr(partitions: Iterable[int], leader: int = LEADER, epoch: int = 0) -> pb.LeaderAndIsrRequest:
    """Topic ``t``'s ``partitions`` led by ``leader`` at ``epoch``; replicas LEADER and 2, ISR LEADER."""
    return pb.LeaderAndIsrRequest(controller_id=LEADER, controller_epoch=1, partition_states=[
        pb.LeaderAndIsrPartitionState(topic_name="t", partition_index=p, controller_epoch=1, leader=leader,
                                      leader_epoch=epoch, isr=[LEADER], zk_version=epoch, replicas=[LEADER, 2])
        for p in partitions])


def sole_replica_manager(tmp_path: Path, partitions: Iterable[int]) -> ReplicaManager:
    cfg = LogConfig()
    lm = LogManager([tmp_path / "logs"], cfg)
    lm.startup(0)
    rm = ReplicaManager(BrokerSettings(LEADER, 10_000, cfg), lm, FakeZk(), MetadataCache(),  # type: ignore[arg-type]
                        lambda _t: cfg)
    answer = rm.handle_leader_and_isr(leader_and_isr(partitions))
    assert all(e.error_code == pb.ErrorCode.NONE for e in answer.partition_errors)
    return rm
