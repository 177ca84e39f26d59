"""Short chaos scenarios (seconds each) against a real 3-broker cluster: RF=3,
min.insync.replicas=2, acks=all, idempotent producers, unique values; after each, the
history checker and verify-replicas must find nothing, and epochs may only have grown.
The negative control shows the checker does report a loss when one happens."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import E, create_topic, isr_of, leader_of, wait_for
from kazoo.client import KazooClient

from client.ops.chaos import Workload
from client.ops.history import FAIL, OK, check
from client.ops.local_cluster import pid_alive
from client.ops.verify_replicas import verify
from proto import errors
from zk.data import ControllerEpochZNode

pytestmark = pytest.mark.integration
PARTITIONS = 2


def _epochs(view, zk_client: KazooClient) -> tuple[int, list[int]]:  # type: ignore[no-untyped-def]
    controller = ControllerEpochZNode.decode(zk_client.get("/controller_epoch")[0])
    return controller, [leader_of(view, "chaos", p)[1] for p in range(PARTITIONS)]


@pytest.fixture(params=[False, True], ids=["mtls", "secure"])
def secure(request: pytest.FixtureRequest) -> bool:
    """Every scenario twice: the default cluster (inter-broker plane on mutual TLS, as always) and a
    `cluster up --secure` one (clients on TLS + SCRAM, ACLs on; the workload runs as the admin)."""
    return bool(request.param)


def _setup(cluster, secure: bool = False, **overrides: str):  # type: ignore[no-untyped-def]
    c = cluster.start(3, secure=secure, **overrides)
    view = cluster.view()
    res = create_topic(view, "chaos", partitions=PARTITIONS, replication_factor=3,
                       configs={"min.insync.replicas": "2"})
    assert res.error_code == E.NONE, res.error_message
    wait_for(lambda: all(len(isr_of(view, "chaos", p)) == 3 for p in range(PARTITIONS)))
    return c, view


def _finish(c, view, workload: Workload, zk_client: KazooClient, before: tuple[int, list[int]]) -> None:  # type: ignore[no-untyped-def]
    writes = workload.stop()
    for b in c.state.brokers:
        if not pid_alive(c.broker(b).pid):
            c.start(b)
    wait_for(lambda: all(len(isr_of(view, "chaos", p)) == 3 for p in range(PARTITIONS)), timeout_s=60,
             what="every replica back in sync")
    report = check(writes, workload.read_all())
    assert report.writes.get(OK, 0) > 100, report.summary()
    assert report.valid, report.summary()
    replicas = verify(view, "chaos")
    assert all(e["status"] == "OK" for e in replicas), f"replicas not verified identical below the HW: {replicas}"
    controller_epoch, leader_epochs = _epochs(view, zk_client)
    assert controller_epoch >= before[0]
    assert all(now >= then for now, then in zip(leader_epochs, before[1], strict=True))


def test_leader_killed_and_restarted_repeatedly(cluster, zk_client: KazooClient, secure: bool) -> None:  # type: ignore[no-untyped-def]
    c, view = _setup(cluster, secure)
    before = _epochs(view, zk_client)
    workload = Workload(c.state.bootstrap_servers, "chaos", PARTITIONS, security=c.state.client_security())
    workload.start()
    for _round in range(5):
        time.sleep(0.5)
        leader = leader_of(view, "chaos", 0)[0]
        c.signal(leader, "KILL")
        wait_for(lambda leader=leader: leader_of(view, "chaos", 0)[0] not in (-1, leader), timeout_s=20)
        c.start(leader)
        c.wait_registered({leader})
    _finish(c, view, workload, zk_client, before)


def test_controller_killed_and_restarted(cluster, zk_client: KazooClient, secure: bool) -> None:  # type: ignore[no-untyped-def]
    c, view = _setup(cluster, secure)
    before = _epochs(view, zk_client)
    workload = Workload(c.state.bootstrap_servers, "chaos", PARTITIONS, security=c.state.client_security())
    workload.start()
    for _round in range(2):
        time.sleep(0.5)
        view_zk = c.zk_view()
        c.signal(view_zk["controller"], "KILL")
        c.wait_for_controller(timeout_s=20, other_than=view_zk["controller"],
                              min_epoch=view_zk["controller_epoch"] + 1)
        c.start(view_zk["controller"])
        c.wait_registered({view_zk["controller"]})
    _finish(c, view, workload, zk_client, before)


def test_both_followers_down_writes_fail_definitely(cluster, zk_client: KazooClient, secure: bool) -> None:  # type: ignore[no-untyped-def]
    c, view = _setup(cluster, secure)
    before = _epochs(view, zk_client)
    leader = leader_of(view, "chaos", 0)[0]
    # One partition whose leader stays up; no retries, so refusals are definite failures.
    workload = Workload(c.state.bootstrap_servers, "chaos", 1, producers=1, retries=0,
                        security=c.state.client_security())
    workload.start()
    time.sleep(0.5)
    followers = [b for b in (1, 2, 3) if b != leader]
    for b in followers:
        c.signal(b, "KILL")
    wait_for(lambda: isr_of(view, "chaos", 0) == (leader,), timeout_s=20)

    def refused() -> bool:
        return any(getattr(f, "done", lambda: False)() and isinstance(f.exception(), errors.NotEnoughReplicasError)
                   for _n, _p, _v, f in list(workload.pending)[-500:])

    wait_for(refused, timeout_s=20, what="acks=all writes refused with NOT_ENOUGH_REPLICAS")
    c.start(followers[0])
    wait_for(lambda: len(isr_of(view, "chaos", 0)) >= 2, timeout_s=30)
    time.sleep(0.5)
    writes = workload.stop()
    assert any(w.status == FAIL for w in writes), "writes during the outage must fail definitely"
    c.start(followers[1])
    workload.stop = lambda: writes  # type: ignore[method-assign]
    _finish(c, view, workload, zk_client, before)


def test_negative_control_checker_reports_an_unclean_loss(cluster, zk_client: KazooClient) -> None:  # type: ignore[no-untyped-def]
    # min.insync.replicas=1 and unclean election on: kill the whole ISR but a lagging replica.
    c = cluster.start(3, replica_lag_time_max_ms="1000")
    view = cluster.view()
    res = create_topic(view, "chaos", partitions=1, replication_factor=2,
                       configs={"min.insync.replicas": "1", "unclean.leader.election.enable": "true"})
    assert res.error_code == E.NONE
    leader, _ = wait_for(lambda: (lambda le: le if le[0] >= 0 else None)(leader_of(view, "chaos", 0)))
    follower = next(r for r in view.partitions[("chaos", 0)].replicas if r != leader)
    c.signal(follower, "KILL")
    wait_for(lambda: isr_of(view, "chaos", 0) == (leader,), timeout_s=20)
    workload = Workload(c.state.bootstrap_servers, "chaos", 1, producers=1, retries=0,
                        security=c.state.client_security())
    workload.start()
    wait_for(lambda: len(workload.pending) > 200, timeout_s=20)
    c.signal(leader, "KILL")  # the only ISR member: what it acknowledged is now only on its disk
    c.start(follower)  # the out-of-sync replica takes over (unclean)
    wait_for(lambda: leader_of(view, "chaos", 0)[0] == follower, timeout_s=30, what="the unclean election")
    writes = workload.stop()
    report = check(writes, workload.read_all())
    assert report.lost or report.unseen, "the checker must see the acknowledged writes the unclean election lost"


def test_rolling_restart_with_sigterm_only_retriable_errors(cluster, zk_client: KazooClient, secure: bool) -> None:  # type: ignore[no-untyped-def]
    c, view = _setup(cluster, secure)
    before = _epochs(view, zk_client)
    workload = Workload(c.state.bootstrap_servers, "chaos", PARTITIONS, security=c.state.client_security())
    workload.start()
    for b in (1, 2, 3):
        time.sleep(0.3)
        c.signal(b, "TERM")
        assert c.wait_for_exit(b, timeout_s=30) == 0
        c.start(b)
        c.wait_registered({b})
        wait_for(lambda: all(len(isr_of(view, "chaos", p)) == 3 for p in range(PARTITIONS)), timeout_s=30)
    writes = workload.stop()
    assert not [w for w in writes if w.status != OK], "a controlled rolling restart must not fail a write"
    workload.stop = lambda: writes  # type: ignore[method-assign]
    _finish(c, view, workload, zk_client, before)


def test_paused_leader_past_session_timeout_acknowledges_nothing(cluster, zk_client: KazooClient, secure: bool) -> None:  # type: ignore[no-untyped-def]
    c, view = _setup(cluster, secure)
    before = _epochs(view, zk_client)
    workload = Workload(c.state.bootstrap_servers, "chaos", PARTITIONS, security=c.state.client_security())
    workload.start()
    time.sleep(0.5)
    zombie = leader_of(view, "chaos", 0)[0]
    c.signal(zombie, "STOP")
    try:
        wait_for(lambda: leader_of(view, "chaos", 0)[0] not in (-1, zombie), timeout_s=20, what="a successor")
        time.sleep(1)
    finally:
        c.signal(zombie, "CONT")  # the zombie wakes up believing it leads
    wait_for(lambda: zombie in isr_of(view, "chaos", 0), timeout_s=30, what="the zombie back as a follower")
    _finish(c, view, workload, zk_client, before)


def test_paused_controller_past_session_timeout_changes_nothing(cluster, zk_client: KazooClient, secure: bool) -> None:  # type: ignore[no-untyped-def]
    c, view = _setup(cluster, secure)
    before = _epochs(view, zk_client)
    workload = Workload(c.state.bootstrap_servers, "chaos", PARTITIONS, security=c.state.client_security())
    workload.start()
    time.sleep(0.5)
    old = c.zk_view()
    c.signal(old["controller"], "STOP")
    try:
        c.wait_for_controller(timeout_s=20, other_than=old["controller"], min_epoch=old["controller_epoch"] + 1)
    finally:
        c.signal(old["controller"], "CONT")
    wait_for(lambda: old["controller"] in c.zk_view()["registered"], timeout_s=20)
    assert c.zk_view()["controller"] != old["controller"]  # the woken one did not take over again
    _finish(c, view, workload, zk_client, before)


def test_zookeeper_outage_does_not_stop_produce_and_consume(cluster, zookeeper, zk_client: KazooClient,
                                                           secure: bool) -> None:  # type: ignore[no-untyped-def]
    c, view = _setup(cluster, secure)
    before = _epochs(view, zk_client)
    workload = Workload(c.state.bootstrap_servers, "chaos", PARTITIONS, security=c.state.client_security())
    workload.start()
    time.sleep(0.5)
    os.kill(zookeeper.pid, signal.SIGSTOP)
    try:
        during = len(workload.pending)
        time.sleep(5)
        assert len(workload.pending) > during + 500  # writes go on against the current leaders
    finally:
        os.kill(zookeeper.pid, signal.SIGCONT)
    wait_for(lambda: sorted(c.zk_view()["registered"]) == [1, 2, 3], timeout_s=30, what="brokers re-registered")
    _finish(c, view, workload, zk_client, before)


def _netns_unavailable() -> str | None:
    """Why network-namespace scenarios cannot run here (None when they can)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("ip") is None:
        return "the ip tool (iproute2) is not installed"
    probe = f"mkprobe{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"`ip netns add` does not work here: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def test_network_partition_of_one_follower_shrinks_and_regrows_the_isr(tmp_path) -> None:  # type: ignore[no-untyped-def]
    reason = _netns_unavailable()
    if reason:
        pytest.skip(reason)
    tag = f"mk{os.getpid() % 100_000}"
    hub, brokers = f"{tag}-hub", [f"{tag}-b{i}" for i in (1, 2, 3)]
    prefix = "10.231.0"  # private to these namespaces: nothing outside them sees it

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)

    try:
        for n in (hub, *brokers):
            ip("netns", "add", n)
            ip("-n", n, "link", "set", "lo", "up")
        ip("-n", hub, "link", "add", "br0", "type", "bridge")
        ip("-n", hub, "addr", "add", f"{prefix}.254/24", "dev", "br0")
        ip("-n", hub, "link", "set", "br0", "up")
        for i, n in enumerate(brokers, start=1):
            ip("-n", hub, "link", "add", f"vb{i}", "type", "veth", "peer", "name", "eth0", "netns", n)
            ip("-n", hub, "link", "set", f"vb{i}", "master", "br0", "up")
            ip("-n", n, "addr", "add", f"{prefix}.{i}/24", "dev", "eth0")
            ip("-n", n, "link", "set", "eth0", "up")
        driver = Path(__file__).with_name("netns_partition.py")
        r = subprocess.run(["ip", "netns", "exec", hub, sys.executable, str(driver), "--prefix", prefix,
                            "--netns-prefix", tag, "--dir", str(tmp_path)],
                           capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        seen = json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        for n in (*brokers, hub):
            pids = subprocess.run(["ip", "netns", "pids", n], capture_output=True, text=True).stdout.split()
            for pid in pids:  # only if the driver died before stopping its cluster
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
    print("scenario 8:", seen)
    follower = seen["follower"]
    assert seen["isr_before"] == [1, 2, 3]
    assert follower not in seen["isr_during"] and len(seen["isr_during"]) == 2, seen
    assert seen["follower_still_registered"], "the partition must not cut the follower from ZooKeeper"
    assert seen["isr_after"] == [1, 2, 3], seen
    assert seen["valid"] and seen["writes_ok"] > 100, seen["summary"]
    assert seen["replicas_identical"], seen
    assert seen["epoch_after"] >= seen["epoch_before"]
