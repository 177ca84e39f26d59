"""Creating many partitions does not hold the event loop in mkdir and file creations (issue 29,
SPEC S15): a LeaderAndIsr that creates at least PREPARE_DIRS_MIN logs has them opened in threads
first (``ReplicaManager.prepare_leader_and_isr`` -> ``LogManager.open_new_logs``), adopted by the
loop, then is applied as before. A real replica manager on real logs, no sockets."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from sole_replica import FakeZk

from broker.log.config import LogConfig
from broker.log.manager import LogManager
from broker.replication.replica_manager import PREPARE_DIRS_MIN, BrokerSettings, ReplicaManager
from broker.server.metadata_cache import MetadataCache
from proto import minikafka_pb2 as pb

E = pb.ErrorCode
BROKER = 1


def request(topic: str, n: int, replicas: tuple[int, ...] = (BROKER, 2), controller_epoch: int = 1) \
        -> pb.LeaderAndIsrRequest:
    return pb.LeaderAndIsrRequest(controller_id=2, controller_epoch=controller_epoch, partition_states=[
        pb.LeaderAndIsrPartitionState(topic_name=topic, partition_index=p, controller_epoch=controller_epoch,
                                      leader=BROKER, leader_epoch=0, isr=list(replicas), zk_version=0,
                                      replicas=list(replicas))
        for p in range(n)])


def managers(tmp_path: Path, dirs: int = 1) -> tuple[LogManager, ReplicaManager]:
    cfg = LogConfig()
    lm = LogManager([tmp_path / f"logs{i}" for i in range(dirs)], cfg)
    lm.startup(0)
    rm = ReplicaManager(BrokerSettings(BROKER, 10_000, cfg), lm, FakeZk(), MetadataCache(),  # type: ignore[arg-type]
                        lambda _t: cfg)
    return lm, rm


def test_new_partitions_directories_are_made_off_the_event_loop(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    lm, rm = managers(tmp_path)
    n = PREPARE_DIRS_MIN * 4
    loop_thread = threading.get_ident()
    made_on: list[int] = []
    real_mkdir = Path.mkdir

    def mkdir(self: Path, *args: Any, **kwargs: Any) -> None:
        if self.name.startswith("t-"):
            made_on.append(threading.get_ident())
        real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)

    async def run() -> pb.LeaderAndIsrResponse:
        req = request("t", n)
        await rm.prepare_leader_and_isr(req)
        return rm.handle_leader_and_isr(req)

    resp = asyncio.run(run())
    assert [e.error_code for e in resp.partition_errors] == [E.NONE] * n
    assert len(made_on) >= n and loop_thread not in made_on[:n], "the directories were made on the event loop"
    assert all(lm.get_log("t", p) is not None for p in range(n))
    assert sorted(p.name for p in (tmp_path / "logs0").iterdir() if p.name.startswith("t-")) == \
        sorted(f"t-{p}" for p in range(n))


def test_nothing_is_made_ahead_for_what_the_request_will_not_create(tmp_path: Path) -> None:
    _lm, rm = managers(tmp_path)
    n = PREPARE_DIRS_MIN * 2
    rm.controller_epoch = 5

    async def prepare(req: pb.LeaderAndIsrRequest) -> None:
        await rm.prepare_leader_and_isr(req)

    asyncio.run(prepare(request("stale", n, controller_epoch=4)))   # a deposed controller's
    asyncio.run(prepare(request("other", n, replicas=(2, 3), controller_epoch=5)))  # not a replica here
    assert not [p for p in (tmp_path / "logs0").iterdir() if p.name.startswith(("stale-", "other-"))]


def test_several_log_directories_choose_at_creation(tmp_path: Path) -> None:
    """With several log.dirs the directory is chosen when the log is created: nothing ahead."""
    lm, _rm = managers(tmp_path, dirs=2)
    assert lm.open_new_logs([("t", p, LogConfig()) for p in range(PREPARE_DIRS_MIN * 2)], now_ms=0) == []
    assert not [p for d in ("logs0", "logs1") for p in (tmp_path / d).iterdir() if p.name.startswith("t-")]


def test_a_log_made_meanwhile_is_kept_and_the_copy_opened_ahead_closed(tmp_path: Path) -> None:
    lm, _rm = managers(tmp_path)
    cfg = LogConfig()
    opened = lm.open_new_logs([("t", p, cfg) for p in range(3)], now_ms=0)
    assert [tp for tp, _log in opened] == [("t", 0), ("t", 1), ("t", 2)]
    assert lm.get_log("t", 0) is None, "not registered before the loop adopts them"
    made_meanwhile = lm.get_or_create_log("t", 1, 0, cfg)
    lm.adopt_logs(opened, lambda _t: cfg)
    assert lm.get_log("t", 1) is made_meanwhile
    assert lm.get_log("t", 0) is opened[0][1] and lm.get_log("t", 2) is opened[2][1]


def test_the_topic_config_at_adoption_wins(tmp_path: Path) -> None:
    """A topic's config changed while its logs were opened: the adopted logs carry the new one."""
    lm, rm = managers(tmp_path)
    old, new = LogConfig(), LogConfig(segment_bytes=2 * 1024 * 1024)
    configs = iter([old] * PREPARE_DIRS_MIN + [new] * (10 * PREPARE_DIRS_MIN))
    rm.topic_config = lambda _t: next(configs)

    async def run() -> None:
        await rm.prepare_leader_and_isr(request("c", PREPARE_DIRS_MIN))

    asyncio.run(run())
    logs = [lm.get_log("c", p) for p in range(PREPARE_DIRS_MIN)]
    assert all(log is not None and log.config is not old and log.config.segment_bytes == new.segment_bytes
               for log in logs)


def test_logs_opened_for_a_request_fenced_meanwhile_are_not_adopted(tmp_path: Path) -> None:
    """A newer controller spoke while the logs were opened: they are closed, not registered."""
    lm, rm = managers(tmp_path)
    real = lm.open_new_logs

    def open_then_fence(*args: Any, **kwargs: Any) -> Any:
        opened = real(*args, **kwargs)
        rm.controller_epoch = 9  # as a newer controller's request would, meanwhile
        return opened

    lm.open_new_logs = open_then_fence  # type: ignore[method-assign]

    async def run() -> None:
        await rm.prepare_leader_and_isr(request("fenced", PREPARE_DIRS_MIN, controller_epoch=1))

    asyncio.run(run())
    assert all(lm.get_log("fenced", p) is None for p in range(PREPARE_DIRS_MIN))


def test_a_log_whose_directory_was_removed_meanwhile_is_not_adopted(tmp_path: Path) -> None:
    import shutil

    lm, _rm = managers(tmp_path)
    opened = lm.open_new_logs([("gone", 0, LogConfig()), ("kept", 0, LogConfig())], now_ms=0)
    shutil.rmtree(tmp_path / "logs0" / "gone-0")
    lm.adopt_logs(opened, lambda _t: LogConfig())
    assert lm.get_log("gone", 0) is None and lm.get_log("kept", 0) is not None


def test_a_partition_directory_that_is_a_link_out_of_the_log_directory_is_refused(tmp_path: Path) -> None:
    """S13.3: a partition's directory lies directly inside its log directory. A legal name cannot
    leave it, so only a symbolic link there is resolved (one lstat per new log, not a resolve of
    every path component): one pointing out is refused, on the loop's path and the threads' alike."""
    from proto.errors import InvalidTopicError

    lm, _rm = managers(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "logs0" / "t-0").symlink_to(outside, target_is_directory=True)
    with pytest.raises(InvalidTopicError):
        lm.get_or_create_log("t", 0, 0)
    opened = lm.open_new_logs([("t", 0, LogConfig()), ("t", 1, LogConfig())], 0, threads=1)
    assert [tp for tp, _log in opened] == [("t", 1)]
    assert not any(outside.iterdir())  # nothing was written through the link
    inside = tmp_path / "logs0" / "in-place"
    inside.mkdir()
    (tmp_path / "logs0" / "u-0").symlink_to(inside, target_is_directory=True)  # a link that stays inside
    assert lm.get_or_create_log("u", 0, 0) is not None
