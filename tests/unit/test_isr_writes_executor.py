"""Leaders' ISR writes do not occupy the event loop's default executor (issue 29). When a broker
dies at 10,000 partitions, its peers write thousands of ISR shrinks at once; they queued on the
default executor, and whatever else ran there waited behind all of them - the new controller's first
LeaderAndIsr (its controller-epoch lookup runs there) was applied ~4 s late. A real replica manager
on real logs, a ZooKeeper gateway whose writes block; no sockets."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from sole_replica import FakeZk
from test_session_fetch_min_bytes import replica_manager


class BlockingZk(FakeZk):
    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = 0

    def update_partition_state(self, _t: str, _p: int, _state: Any, expected_version: int) -> int:
        self.started += 1
        self.release.wait(10)  # bounded: the test releases it
        return expected_version + 1


def test_a_storm_of_isr_writes_leaves_the_default_executor_free(tmp_path: Path) -> None:
    async def run() -> None:
        rm = replica_manager(tmp_path)
        zk = BlockingZk()
        rm.zk = zk  # type: ignore[assignment]
        p = rm.partitions[("t", 0)]
        for _ in range(100):  # more writes than any executor has threads, all stuck in ZooKeeper
            rm._write_isr(p, tuple(p.isr), p.zk_version, "test")
        try:
            for _ in range(100):
                if zk.started:
                    break
                await asyncio.sleep(0.01)
            assert zk.started, "no ISR write reached the gateway"
            # Anything else run on the default executor is not queued behind them.
            assert await asyncio.wait_for(asyncio.to_thread(lambda: "ran"), timeout=5) == "ran"
        finally:
            zk.release.set()
            await asyncio.gather(*list(rm._isr_writes), return_exceptions=True)

    asyncio.run(run())
