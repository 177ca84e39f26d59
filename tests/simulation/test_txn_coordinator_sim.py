"""The transaction coordinator (issue 31) under coordinator crashes mid-commit, expired sessions, lost
ZooKeeper replies and lost WriteTxnMarkers replies: a deterministic, seeded simulation.

Theory of operation
===================
Three brokers run the REAL ``TransactionCoordinator`` shell (and so the real ``TxnOwnership``,
``TransactionStateMachine`` and ``KafkaZkClient`` gateway), each over its own ``SimKazooClient``
session on one ``SimZooKeeper`` with seeded lost requests and lost replies; each registers the
ephemeral /brokers/ids/N. A broker's view of the live brokers lags ZooKeeper's (updated at random
steps). Everything runs in one asyncio loop whose clock is virtual; ZooKeeper calls run inline
(``offload``), so a seed replays exactly.

The partitions are modelled as the coordinator sees the data plane (txn-log's side): a produce of
(producer id, epoch) is refused below the partition's highest epoch for that producer; a marker is
refused with INVALID_PRODUCER_EPOCH below it and TRANSACTION_COORDINATOR_FENCED below the highest
coordinator epoch of a marker for that producer; a marker closes every open record of the producer
with its result. WriteTxnMarkers loses requests and replies at random.

Producers (one per transactional id) run Kafka clients' loop: find the coordinator (through a random
broker), InitProducerId, AddPartitionsToTxn, produce records tagged with the transaction, sometimes
stall past the transaction timeout, EndTxn commit or abort; they follow Kafka's error handling
(NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / CONCURRENT_TRANSACTIONS: retry; PRODUCER_FENCED and
INVALID_TXN_STATE: start over with InitProducerId).

Faults, seeded per step: a broker crashes (often the coordinator, often between PrepareCommit and
its markers) and restarts later as a fresh process; a broker's session expires (it notices and
re-registers); lost ZooKeeper and marker replies throughout.

Invariants: a transaction's records are closed with one result on every partition (committed xor
aborted - never partially), the result a client was told (EndTxn answered NONE) is the one its
records get, and after the faults stop every transaction is completed: no record left open, no id
left in Prepare*.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.exceptions import KazooException, NodeExistsError
from sim_zk import SimKazooClient, SimZooKeeper, random_faults

from broker.coordinator.transaction.txn_coordinator import TransactionCoordinator
from broker.coordinator.transaction.txn_state import MarkerJob, TxnLimits
from proto import errors
from zk.client import KafkaZkClient
from zk.data import TransactionRecord, TransactionsZNode

NONE = 0
RETRIABLE = {errors.NotCoordinatorError.code, errors.CoordinatorNotAvailableError.code,
             errors.ConcurrentTransactionsError.code, errors.CoordinatorLoadInProgressError.code}
RETRY = {"max_tries": 3, "delay": 0.1, "max_delay": 1.0, "ignore_expire": False}
STEP_MS = 50
TOPIC_PARTITIONS = [("t", p) for p in range(4)]


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self.now_s = 0.0
        super().__init__()

    def time(self) -> float:
        return self.now_s


class Partitions:
    """The partitions' producer state, as WriteTxnMarkers and Produce see it."""

    def __init__(self) -> None:
        self.epoch: dict[tuple[tuple[str, int], int], int] = {}
        self.coordinator_epoch: dict[tuple[tuple[str, int], int], int] = {}
        self.open: dict[tuple[tuple[str, int], int], list[tuple[str, int]]] = {}
        self.closed: dict[tuple[str, int], dict[tuple[str, int], bool]] = {}  # tag -> tp -> commit
        self.appended: dict[tuple[str, int], set[tuple[str, int]]] = {}

    def produce(self, tp: tuple[str, int], pid: int, epoch: int, tag: tuple[str, int]) -> bool:
        if epoch < self.epoch.get((tp, pid), -1):
            return False
        self.epoch[(tp, pid)] = epoch
        self.open.setdefault((tp, pid), []).append(tag)
        self.appended.setdefault(tag, set()).add(tp)
        return True

    def marker(self, tp: tuple[str, int], job: MarkerJob, coordinator_epoch: int) -> int:
        key = (tp, job.producer_id)
        if job.producer_epoch < self.epoch.get(key, -1):
            return errors.InvalidProducerEpochError.code
        if coordinator_epoch < self.coordinator_epoch.get(key, -1):
            return errors.TransactionCoordinatorFencedError.code
        self.epoch[key] = job.producer_epoch
        self.coordinator_epoch[key] = coordinator_epoch
        for tag in self.open.pop(key, []):
            self.closed.setdefault(tag, {})[tp] = job.commit
        return NONE


class Sim:
    def __init__(self, seed: int, steps: int) -> None:
        self.seed = seed
        self.steps = steps
        self.rng = random.Random(f"txn-sim:{seed}")
        self.zk = SimZooKeeper()
        self.loop_clock_ms = 0
        self.parts = Partitions()
        self.brokers: dict[int, Broker] = {}
        self.told: dict[tuple[str, int], bool] = {}  # tag -> the result EndTxn answered NONE for
        self.trace: list[str] = []
        self.p_lost = self.rng.choice((0.0, 0.02, 0.05))
        self.p_marker_lost = self.rng.choice((0.0, 0.1, 0.3))
        self.faults_on = True
        self.completed_commits = 0
        self.completed_aborts = 0

    def log(self, msg: str) -> None:
        self.trace.append(f"[{self.loop_clock_ms:>6}] {msg}")

    def clock(self) -> int:
        return self.loop_clock_ms

    def check(self) -> None:
        for tag, by_tp in self.parts.closed.items():
            results = set(by_tp.values())
            assert len(results) <= 1, f"{tag} closed partially: {by_tp}"
            if tag in self.told:
                assert results <= {self.told[tag]}, f"{tag}: told {self.told[tag]}, closed {by_tp}"


class Broker:
    def __init__(self, sim: Sim, broker_id: int) -> None:
        self.sim = sim
        self.id = broker_id
        self.up = False
        self.client: SimKazooClient | None = None
        self.coord: TransactionCoordinator | None = None
        self.view: list[int] = []
        self.faults = random_faults(random.Random(f"{sim.seed}:zk:{broker_id}"), sim.p_lost, sim.p_lost)
        self.faults_on = True
        self.rng = random.Random(f"{sim.seed}:broker:{broker_id}")
        self.next_pid = broker_id * 1_000_000
        self.restart_at = -1

    def _policy(self, op: str, path: str) -> str | None:
        return self.faults(op, path) if self.faults_on and self.sim.faults_on else None

    async def offload(self, fn: Callable[..., Any], *args: Any) -> Any:
        await asyncio.sleep(0)
        if not self.up:
            raise KazooException("process is down")
        return fn(*args)

    async def new_producer_id(self) -> int:
        await asyncio.sleep(0)
        self.next_pid += 1
        return self.next_pid

    async def send_markers(self, coordinator_epoch: int, job: MarkerJob,
                           tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        await asyncio.sleep(0)
        out = {}
        for tp in tps:
            x = self.rng.random() if self.sim.faults_on else 1.0
            if x < self.sim.p_marker_lost / 2:
                continue  # the request was lost
            error = self.sim.parts.marker(tp, job, coordinator_epoch)
            self.sim.log(f"b{self.id} marker {job.transactional_id} pid {job.producer_id} e{job.producer_epoch} "
                         f"ce{coordinator_epoch} {'C' if job.commit else 'A'} {tp}: {error}")
            if x < self.sim.p_marker_lost:
                continue  # the reply was lost
            out[tp] = error
        if not self.up:
            raise ConnectionError("down")
        return out

    def start(self) -> None:
        self.up = True
        self.client = self.sim.zk.client(name=f"b{self.id}", timeout=2.0, command_retry=RETRY,
                                         fault_policy=self._policy, auto_renew_session=True)
        self.client.start()
        self.register()
        self.coord = TransactionCoordinator(
            self.id, KafkaZkClient.over(self.client), lambda: list(self.view), self.new_producer_id,
            self.send_markers, limits=TxnLimits(max_timeout_ms=5_000), clock=self.sim.clock,
            offload=self.offload, abort_interval_ms=500, retry_backoff_ms=50)
        self.coord.start()
        self.sim.log(f"b{self.id} starts")

    def register(self) -> bool:
        assert self.client is not None
        self.faults_on = False
        try:
            self.client.create(f"/brokers/ids/{self.id}", b"{}", ephemeral=True, makepath=True)
            return True
        except (NodeExistsError, KazooException):
            return False
        finally:
            self.faults_on = True

    def crash(self) -> None:
        assert self.client is not None and self.coord is not None
        self.up = False
        if self.coord._task is not None:
            self.coord._task.cancel()
        for t in self.coord._senders.values():
            t.cancel()
        sid = self.client.session_id
        self.client.crash()
        if sid is not None:
            self.sim.zk.expire_session(sid)
        self.coord = None
        self.restart_at = self.sim.loop_clock_ms + self.rng.randrange(200, 3000)
        self.sim.log(f"b{self.id} crashes")

    def expire(self) -> None:
        assert self.client is not None and self.coord is not None
        sid = self.client.session_id
        if sid is not None:
            self.sim.zk.expire_session(sid)
        self.coord.on_session_lost()
        self.faults_on = False
        try:
            self.client.exists("/")  # a new session (auto_renew_session)
        except KazooException:
            pass
        finally:
            self.faults_on = True
        self.register()
        self.sim.log(f"b{self.id}: session expired, re-registered")


class Producer:
    def __init__(self, sim: Sim, tid: str) -> None:
        self.sim = sim
        self.tid = tid
        self.rng = random.Random(f"{sim.seed}:producer:{tid}")
        self.pid = -1
        self.epoch = -1
        self.txn_no = 0

    def _coordinator(self) -> TransactionCoordinator | None:
        up = [b for b in self.sim.brokers.values() if b.up and b.coord is not None]
        if not up:
            return None
        err, owner = self.rng.choice(up).coord.find_coordinator(self.tid)  # type: ignore[union-attr]
        target = self.sim.brokers.get(owner) if err == NONE else None
        return target.coord if target is not None and target.up else None

    async def call(self, api: str, *args: Any) -> Any:
        """Retry retriable answers (Kafka's clients), a bounded number of times."""
        for _attempt in range(200):
            coord = self._coordinator()
            if coord is not None:
                result = await getattr(coord, api)(self.tid, *args)
                code = result.error if api == "init_producer_id" else result
                if code not in RETRIABLE:
                    return result
            await asyncio.sleep(self.rng.choice((0.02, 0.1, 0.3)))
        return None

    async def run(self) -> None:
        while True:
            if self.pid < 0:
                answer = await self.call("init_producer_id", 2_000)
                if answer is None or answer.error != NONE:
                    continue
                self.pid, self.epoch = answer.producer_id, answer.producer_epoch
            self.txn_no += 1
            tag = (self.tid, self.txn_no)
            tps = self.rng.sample(TOPIC_PARTITIONS, self.rng.randint(1, 3))
            error = await self.call("add_partitions", self.pid, self.epoch, tps)
            if error != NONE:
                self.pid = -1
                continue
            for tp in tps:
                ok = self.sim.parts.produce(tp, self.pid, self.epoch, tag)
                self.sim.log(f"{self.tid} txn {self.txn_no} pid {self.pid} e{self.epoch} produce {tp}: {ok}")
            await asyncio.sleep(self.rng.choice((0.01, 0.1, 0.5, 3.0 if self.rng.random() < 0.1 else 0.2)))
            commit = self.rng.random() < 0.7
            error = await self.call("end_txn", self.pid, self.epoch, commit)
            if error == NONE:
                self.sim.told[tag] = commit
                self.sim.log(f"{self.tid}: txn {self.txn_no} {'committed' if commit else 'aborted'}")
            else:
                self.pid = -1  # fenced, timed out: start over


async def run_sim(sim: Sim) -> None:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualClockLoop)
    for n in (1, 2, 3):
        sim.brokers[n] = Broker(sim, n)
        sim.brokers[n].start()
    producers = [Producer(sim, f"txn-{i}") for i in range(3)]
    tasks = [loop.create_task(p.run()) for p in producers]
    quiet_from = sim.steps
    for step in range(sim.steps + 400):
        if step == quiet_from:
            sim.faults_on = False
            for t in tasks:
                t.cancel()
            sim.log("faults stop; producers stop")
        sim.loop_clock_ms += STEP_MS
        loop.now_s = sim.loop_clock_ms / 1000
        for b in sim.brokers.values():
            if not b.up and 0 <= b.restart_at <= sim.loop_clock_ms:
                b.start()
            if b.up and (sim.rng.random() < 0.2 or not sim.faults_on):
                b.view = sorted(n for n, x in sim.brokers.items() if x.up)
        if sim.faults_on and sim.rng.random() < 0.03:
            victim = sim.brokers[sim.rng.choice((1, 2, 3))]
            if victim.up and sum(b.up for b in sim.brokers.values()) > 1:
                victim.crash() if sim.rng.random() < 0.7 else victim.expire()
        for _ in range(60):
            await asyncio.sleep(0)
        sim.check()
    for b in sim.brokers.values():
        if b.coord is not None:
            await b.coord.shutdown()
    # Everything completed: nothing open, no id left prepared, every appended tag closed everywhere.
    assert not any(sim.parts.open.values()), {k: v for k, v in sim.parts.open.items() if v}
    for tag, tps in sim.parts.appended.items():
        assert set(sim.parts.closed.get(tag, {})) == tps, f"{tag}: appended {tps}, closed {sim.parts.closed.get(tag)}"
    gateway = KafkaZkClient.over(sim.zk.client(name="checker"))
    gateway.zk.start()
    for tid in gateway.list_transactional_ids():
        found = gateway.get_transaction(tid)
        assert found is not None
        rec: TransactionRecord = found[0]
        assert rec.state not in ("PrepareCommit", "PrepareAbort", "Ongoing"), (tid, rec)
        assert TransactionsZNode.path(tid).startswith("/transactions/")
    sim.completed_commits = sum(1 for r in sim.told.values() if r)
    sim.completed_aborts = sum(1 for r in sim.told.values() if not r)


def run_seed(seed: int, steps: int = 400) -> Sim:
    sim = Sim(seed, steps)
    loop = VirtualClockLoop()
    logging.disable(logging.CRITICAL)
    try:
        loop.run_until_complete(run_sim(sim))
    except BaseException:
        print("\n".join(sim.trace[-60:]))
        raise
    finally:
        logging.disable(logging.NOTSET)
        for t in asyncio.all_tasks(loop):
            t.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
    return sim


@pytest.mark.parametrize("seed", range(12))
def test_transactions_complete_committed_xor_aborted_once(seed: int) -> None:
    sim = run_seed(seed)
    assert sim.told, "no transaction completed at all"
    assert sim.completed_commits > 0
