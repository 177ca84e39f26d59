"""Shared pieces of the ZooKeeper-fault scenarios (test_zk_faults.py): a cluster whose brokers reach
ZooKeeper through the fault proxy, reads of what ZooKeeper and the brokers say, and a recorder of
every partition state znode's versions over time."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers import TEST_ZK_DIGEST, ClusterFixture, batch_of, produce, wait_for
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from zk_proxy import ZkFaultProxy

from client.connection import ClusterView
from client.ops.local_cluster import LocalCluster, pid_alive
from proto import minikafka_pb2 as pb
from zk.data import (
    ControllerEpochZNode,
    ControllerZNode,
    LeaderIsrAndControllerEpoch,
    TopicPartitionStateZNode,
    TopicZNode,
)

E = pb.ErrorCode


def direct_client(connect: str) -> KazooClient:
    """A test's own ZooKeeper client, straight to the server (not through the proxy), as the
    brokers' digest identity (an admin tool's)."""
    zk = KazooClient(hosts=connect, timeout=10, auth_data=[("digest", ":".join(TEST_ZK_DIGEST))])
    zk.start(timeout=10)
    return zk


@dataclass
class ProxiedCluster:
    """Brokers whose ZooKeeper connect string is ``proxy:port/chroot``; ``zk`` reads directly."""

    proxy: ZkFaultProxy
    fx: ClusterFixture
    chroot: str
    zk: KazooClient
    c: LocalCluster | None = None
    view: ClusterView | None = None
    notes: list[str] = field(default_factory=list)

    def start(self, brokers: int, **overrides: str) -> tuple[LocalCluster, ClusterView]:
        self.c = self.fx.start(brokers, **overrides)
        self.view = self.fx.view()
        return self.c, self.view

    # ------------------------------------------------------------ processes

    def pid(self, broker_id: int) -> int:
        assert self.c is not None
        return self.c.broker(broker_id).pid

    def pause(self, broker_id: int) -> None:
        os.kill(self.pid(broker_id), signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid(broker_id), signal.SIGCONT)

    def resume_all(self) -> None:
        if self.c is None or self.c.state is None:
            return
        for b in self.c.state.brokers.values():
            if pid_alive(b.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(b.pid, signal.SIGCONT)

    def log(self, broker_id: int) -> str:
        assert self.c is not None
        try:
            return Path(self.c.broker(broker_id).log).read_text(errors="replace")
        except OSError:
            return ""

    def grep(self, broker_id: int, pattern: str) -> list[str]:
        rx = re.compile(pattern)
        return [line for line in self.log(broker_id).splitlines() if rx.search(line)]

    def report(self, lines: int = 25) -> str:
        """The end of every broker's log and what the proxy did: printed when a scenario fails."""
        out = [f"chroot {self.chroot}; proxy: {self.proxy.connections_made} connections, {self.proxy.resets} resets, "
               f"errors {self.proxy.errors}"]
        out += [f"dropped reply: conn {d.conn_id} op {d.request.opcode} paths {list(d.request.paths)} "
                f"zxid 0x{d.reply.zxid:x}" for d in self.proxy.dropped]
        out += self.notes
        if self.c is not None and self.c.state is not None:
            for bid, b in sorted(self.c.state.brokers.items()):
                text = self.log(bid).splitlines()
                interesting = [x for x in text if re.search(r"WARNING|ERROR|Traceback|resign|controller|ISR|"
                                                            r"registered|fenced|deposed", x)]
                out.append(f"--- broker {bid} (pid {b.pid}, alive {pid_alive(b.pid)}), log {b.log}:")
                out += interesting[-lines:]
        return "\n".join(out)

    # ------------------------------------------------------------ ZooKeeper, read directly

    def state(self, topic: str, partition: int) -> LeaderIsrAndControllerEpoch | None:
        try:
            data, stat = self.zk.get(TopicPartitionStateZNode.path(topic, partition))
        except NoNodeError:
            return None
        return TopicPartitionStateZNode.decode(topic, partition, data, stat.version)

    def controller(self) -> int:
        try:
            return ControllerZNode.decode(self.zk.get(ControllerZNode.PATH)[0])
        except NoNodeError:
            return -1

    def controller_epoch(self) -> int:
        try:
            return ControllerEpochZNode.decode(self.zk.get(ControllerEpochZNode.PATH)[0])
        except NoNodeError:
            return 0

    def registered(self) -> dict[int, int]:
        """broker id -> the session owning its ephemeral registration."""
        out = {}
        for child in self.zk.get_children("/brokers/ids"):
            with contextlib.suppress(NoNodeError):
                out[int(child)] = int(self.zk.get(f"/brokers/ids/{child}")[1].ephemeralOwner)
        return out

    def topic_assignment(self, topic: str) -> dict[int, list[int]]:
        return TopicZNode.decode(topic, self.zk.get(TopicZNode.path(topic))[0])

    def topics(self) -> dict[str, list[int]]:
        out = {}
        for t in self.zk.get_children("/brokers/topics"):
            with contextlib.suppress(NoNodeError):
                out[t] = sorted(int(p) for p in self.zk.get_children(f"/brokers/topics/{t}/partitions"))
        return out

    # ------------------------------------------------------------ brokers, over gRPC

    def describe(self, broker_id: int, topics: list[str] | None = None) -> pb.DescribeReplicasResponse:
        assert self.c is not None and self.view is not None
        conn = self.view.connection(self.c.broker(broker_id).address)
        resp: pb.DescribeReplicasResponse = conn.api.DescribeReplicas(
            pb.DescribeReplicasRequest(topics=topics or []), timeout=3)
        return resp

    def replica(self, broker_id: int, topic: str, partition: int) -> pb.ReplicaState | None:
        for r in self.describe(broker_id, [topic]).replicas:
            if r.topic == topic and r.partition == partition:
                return r
        return None

    def produce_to_leader(self, topic: str, partition: int, values: list[str], acks: int = -1,
                          timeout_ms: int = 5000) -> pb.ProducePartitionResponse:
        """One produce to the partition's leader as ZooKeeper names it."""
        assert self.c is not None and self.view is not None
        st = self.state(topic, partition)
        assert st is not None and st.leader_and_isr.leader >= 0, f"{topic}-{partition} has no leader: {st}"
        conn = self.view.connection(self.c.broker(st.leader_and_isr.leader).address)
        return produce(conn, topic, partition, batch_of(values), acks=acks, timeout_ms=timeout_ms)

    def wait_isr_agrees(self, topic: str, partition: int, size: int | None = None,
                        timeout_s: float = 15.0) -> tuple[int, tuple[int, ...]]:
        """Until ZooKeeper's ISR and the leader's own are equal (and of ``size``): (leader, isr)."""

        def agreed() -> tuple[int, tuple[int, ...]] | None:
            st = self.state(topic, partition)
            if st is None or st.leader_and_isr.leader < 0:
                return None
            leader = st.leader_and_isr.leader
            r = self.replica(leader, topic, partition)
            if r is None or not r.is_leader or r.leader_epoch != st.leader_and_isr.leader_epoch:
                return None
            zk_isr = tuple(sorted(st.leader_and_isr.isr))
            if tuple(sorted(r.isr)) != zk_isr or (size is not None and len(zk_isr) != size):
                return None
            return leader, zk_isr

        return wait_for(agreed, timeout_s=timeout_s, interval_s=0.1,
                        what=f"ZooKeeper's and the leader's ISR of {topic}-{partition} to agree"
                             + (f" at {size} replicas" if size else ""))


@dataclass(frozen=True)
class Version:
    """One observed version of a partition state znode."""

    version: int
    mzxid: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    seen_at: float


class StateRecorder:
    """Polls every partition state znode and /controller_epoch (directly, asynchronously batched)
    and keeps each new version it sees: the history the zombie-controller scenario checks."""

    def __init__(self, zk: KazooClient, interval_s: float = 0.02) -> None:
        self.zk = zk
        self.interval_s = interval_s
        self.history: dict[str, list[Version]] = {}
        self.epochs: list[tuple[int, int, float]] = []  # (controller epoch, mzxid, seen at)
        self.polls = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="state-recorder", daemon=True)
        self._paths: list[tuple[str, str, int]] = []
        self._paths_at = 0.0

    def start(self) -> StateRecorder:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def _refresh_paths(self) -> None:
        paths = []
        for t in self.zk.get_children("/brokers/topics"):
            try:
                parts = self.zk.get_children(f"/brokers/topics/{t}/partitions")
            except NoNodeError:
                continue
            paths += [(TopicPartitionStateZNode.path(t, int(p)), t, int(p)) for p in parts]
        self._paths = paths
        self._paths_at = time.monotonic()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception as e:  # the recorder must not die on a hiccup
                if len(self.errors) < 100:
                    self.errors.append(repr(e))
            self._stop.wait(self.interval_s)

    def poll(self) -> None:
        if time.monotonic() - self._paths_at > 0.3:
            self._refresh_paths()
        epoch_async = self.zk.get_async(ControllerEpochZNode.PATH)
        pending = [(path, t, p, self.zk.get_async(path)) for path, t, p in self._paths]
        now = time.time()
        try:
            data, stat = epoch_async.get(timeout=5)
            epoch = ControllerEpochZNode.decode(data)
            if not self.epochs or self.epochs[-1][1] != stat.mzxid:
                self.epochs.append((epoch, int(stat.mzxid), now))
        except NoNodeError:
            pass
        for path, t, p, res in pending:
            try:
                data, stat = res.get(timeout=5)
            except NoNodeError:
                continue
            st = TopicPartitionStateZNode.decode(t, p, data, stat.version)
            seen = self.history.setdefault(path, [])
            if not seen or seen[-1].version != stat.version:
                lai = st.leader_and_isr
                seen.append(Version(stat.version, int(stat.mzxid), lai.leader, lai.leader_epoch, tuple(lai.isr),
                                    st.controller_epoch, now))
        self.polls += 1

    # ------------------------------------------------------------ the invariants

    def violations(self) -> list[str]:
        """(1) Per znode, the controller epoch never goes down. (2) A controller's write - one that
        changes the leader epoch (a leader's own ISR write never does) - committed after
        /controller_epoch reached E (by zxid) carries a controller epoch >= E: no zombie writes."""
        out = []
        epochs = sorted(self.epochs, key=lambda e: e[1])
        for path, versions in sorted(self.history.items()):
            for before, after in itertools.pairwise(versions):
                if after.controller_epoch < before.controller_epoch:
                    out.append(f"{path}: controller epoch went down {before} -> {after}")
            for i, v in enumerate(versions):
                controller_write = (i == 0 and v.version == 0) or (i > 0 and v.leader_epoch != versions[i - 1].leader_epoch)
                if not controller_write:
                    continue
                current = max((e for e, zxid, _t in epochs if zxid < v.mzxid), default=0)
                if v.controller_epoch < current:
                    out.append(f"{path}: written at zxid 0x{v.mzxid:x} with controller epoch {v.controller_epoch} "
                               f"after /controller_epoch reached {current}: {v}")
        return out

    def missed_versions(self) -> int:
        """Versions written between two polls (not seen; the checks cover only what was seen)."""
        n = 0
        for versions in self.history.values():
            for before, after in itertools.pairwise(versions):
                n += max(0, after.version - before.version - 1)
        return n

    def summary(self) -> str:
        return (f"{self.polls} polls, {len(self.history)} state znodes, "
                f"{sum(len(v) for v in self.history.values())} versions seen, {self.missed_versions()} missed, "
                f"controller epochs {[(e, hex(z)) for e, z, _t in self.epochs]}")


def all_led(pc: ProxiedCluster, topics: list[str], exclude: set[int] | frozenset[int] = frozenset()) -> bool:
    """Every partition of ``topics`` has a leader in ZooKeeper that is registered and not excluded."""
    live = set(pc.registered()) - set(exclude)
    parts = pc.topics()
    for t in topics:
        if t not in parts or not parts[t]:
            return False
        for p in parts[t]:
            st = pc.state(t, p)
            if st is None or st.leader_and_isr.leader not in live:
                return False
    return True


def leaderless(pc: ProxiedCluster, topics: list[str]) -> dict[str, Any]:
    live = set(pc.registered())
    out: dict[str, Any] = {}
    for t, parts in pc.topics().items():
        if t in topics:
            for p in parts:
                st = pc.state(t, p)
                if st is None or st.leader_and_isr.leader not in live:
                    out[f"{t}-{p}"] = st
    return out
