"""The broker-side group coordinator against a real cluster (issue 16, SPEC S11): members split
partitions, a leaving member's partitions move at once, the coordinator broker's SIGKILL moves the
group to another broker that resumes from the offsets in ZooKeeper, a new member resumes from
committed offsets, and the CLI needs bootstrap servers only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import E, create_topic, group_owners, leader_of, wait_for

from client.admin import AdminClient
from client.consumer import Consumer, TopicPartition
from client.group_client import GroupMember
from client.producer import Producer
from zk.data import ConsumersZNode

pytestmark = pytest.mark.integration
PARTS = 4
ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "client.cli", *args], cwd=ROOT, input=stdin, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})



def produce(bootstrap: str, topic: str, start: int, per_partition: int) -> None:
    with Producer(bootstrap, acks="all") as p:
        futures = [p.send(topic, f"v{start + i}".encode(), partition=i % PARTS) for i in range(per_partition * PARTS)]
        for f in futures:
            f.result(timeout=60)


def coordinator_id(bootstrap: str, group: str) -> int:
    with AdminClient(bootstrap) as admin:
        member = GroupMember(admin.view, group, "probe", 10_000, 10_000, 3000, 0.1, 10.0)
        address = member.coordinator().address
        admin.view.refresh([])
        return next(b for b, a in admin.view.brokers.items() if a == address)


def test_leave_rebalance_coordinator_failover_and_resume(cluster, zk_client) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3, zookeeper_session_timeout_ms="4000")
    view = cluster.view()
    assert create_topic(view, "cg", partitions=PARTS, replication_factor=3).error_code == E.NONE
    wait_for(lambda: all(leader_of(view, "cg", p)[0] >= 0 for p in range(PARTS)))
    bootstrap = c.state.bootstrap_servers
    produce(bootstrap, "cg", 0, 100)

    def member(name: str) -> Consumer:
        return Consumer("cg", bootstrap_servers=bootstrap, group_id="fo", auto_offset_reset="earliest",
                        consumer_id=name, auto_commit_interval_ms=100, session_timeout_ms=30_000,
                        heartbeat_interval_ms=200)

    a, b = member("a"), member("b")
    seen: dict[str, list[tuple[int, int]]] = {"a": [], "b": []}
    stops = {"a": threading.Event(), "b": threading.Event()}

    def run(consumer: Consumer, name: str) -> None:
        while not stops[name].is_set():
            seen[name].extend((r.partition, r.offset) for r in consumer.poll(timeout_ms=100))

    threads = {"a": threading.Thread(target=run, args=(a, "a")), "b": threading.Thread(target=run, args=(b, "b"))}
    for t in threads.values():
        t.start()
    try:
        wait_for(lambda: group_owners(bootstrap, "fo") == {"a": 2, "b": 2}, timeout_s=30, what="a 2/2 split")
        # b leaves (LeaveGroup): a owns everything long before b's 30 s session could expire.
        stops["b"].set()
        threads["b"].join(10)
        b.close()
        wait_for(lambda: group_owners(bootstrap, "fo") == {"a": PARTS}, timeout_s=10, what="a to own all after b left")
        wait_for(lambda: len(set(seen["a"]) | set(seen["b"])) >= PARTS * 100, timeout_s=30, what="first 400")
        wait_for(lambda: all(zk_client.exists(ConsumersZNode.offset("fo", "cg", p)) for p in range(PARTS)),
                 timeout_s=10, what="offsets committed to ZooKeeper by the coordinator")

        # SIGKILL the coordinator: the group moves to another broker, which loads the offsets.
        old = coordinator_id(bootstrap, "fo")
        c.signal(old, "KILL")
        survivor = next(i for i in (1, 2, 3) if i != old)
        survivors = c.broker(survivor).address
        wait_for(lambda: coordinator_id(survivors, "fo") != old, timeout_s=30, what="a new coordinator")
        produce(survivors, "cg", PARTS * 100, 50)
        wait_for(lambda: len(set(seen["a"]) | set(seen["b"])) >= PARTS * 150, timeout_s=60,
                 what="a to consume through the coordinator failover")
        wait_for(lambda: group_owners(survivors, "fo") == {"a": PARTS}, timeout_s=30, what="a rejoined")
    finally:
        for s in stops.values():
            s.set()
        for t in threads.values():
            t.join(10)
        a.close()
    got = set(seen["a"]) | set(seen["b"])
    assert got == {(p, o) for p in range(PARTS) for o in range(150)}, "a record was skipped"

    # Committed offsets are the end of every partition; a new member resumes there, not at "latest".
    with AdminClient(survivors) as admin:
        rows = admin.describe_group("fo")
    assert {r.partition: r.current_offset for r in rows} == {p: 150 for p in range(PARTS)}
    produce(survivors, "cg", PARTS * 150, 10)
    with Consumer("cg", bootstrap_servers=survivors, group_id="fo", auto_offset_reset="latest",
                  heartbeat_interval_ms=200) as d:
        late: set[tuple[int, int]] = set()
        wait_for(lambda: late.update((r.partition, r.offset) for r in d.poll(timeout_ms=200))
                 or len(late) >= PARTS * 10, timeout_s=30, what="the new member to resume")
        assert late == {(p, o) for p in range(PARTS) for o in range(150, 160)}
        assert d.assignment() == [TopicPartition("cg", p) for p in range(PARTS)]


def test_cli_groups_from_bootstrap_only(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(1)
    common = ["--bootstrap-server", c.state.bootstrap_servers]
    assert cli("topics", "--create", "--topic", "gcli", "--partitions", "2", "--replication-factor", "1",
               *common).returncode == 0
    r = cli("produce", "--topic", "gcli", *common, stdin="".join(f"v{i}\n" for i in range(6)))
    assert r.returncode == 0, r.stderr
    r = cli("consume", "--topic", "gcli", "--group", "cli-g", "--from-beginning", "--max-messages", "6",
            "--timeout-ms", "10000", *common)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == sorted(f"v{i}" for i in range(6))
    r = cli("groups", "--list", *common)
    assert r.returncode == 0 and "cli-g" in r.stdout.split(), (r.stdout, r.stderr)
    r = cli("groups", "--reset-offsets", "--group", "cli-g", "--topic", "gcli", "--to-earliest", "--execute", *common)
    assert r.returncode == 0, r.stderr
    r = cli("groups", "--describe", "--group", "cli-g", "--output", "json", *common)
    assert r.returncode == 0, r.stderr
    assert sum(row["current_offset"] for row in json.loads(r.stdout)) == 0
    # The group consumes again from the reset offsets.
    r = cli("consume", "--topic", "gcli", "--group", "cli-g", "--max-messages", "6", "--timeout-ms", "10000",
            *common)
    assert r.returncode == 0 and len(r.stdout.split()) == 6, r.stderr

    # Issue 30: --delete-offsets (KIP-496) and --delete (DeleteGroups), refused while a member consumes.
    member = Consumer("gcli", bootstrap_servers=c.state.bootstrap_servers, group_id="cli-g", consumer_id="live",
                      session_timeout_ms=10_000, heartbeat_interval_ms=200, enable_auto_commit=False)
    stop = threading.Event()
    poller = threading.Thread(target=lambda: [member.poll(timeout_ms=50) for _ in iter(stop.is_set, True)],
                              daemon=True)
    poller.start()
    try:
        wait_for(lambda: group_owners(c.state.bootstrap_servers, "cli-g") == {"live": 2}, timeout_s=30,
                 what="the live member to own gcli")
        r = cli("groups", "--delete", "--group", "cli-g", *common)
        assert r.returncode == 1 and "NON_EMPTY_GROUP" in r.stderr, (r.stdout, r.stderr)
        r = cli("groups", "--delete-offsets", "--group", "cli-g", "--topic", "gcli", *common)
        assert r.returncode == 1 and r.stdout.count("GROUP_SUBSCRIBED_TO_TOPIC") == 2, (r.stdout, r.stderr)
    finally:
        stop.set()
        poller.join(10)
        member.close()  # LeaveGroup: the group is empty again
    r = cli("groups", "--delete-offsets", "--group", "cli-g", "--topic", "gcli:0", *common)
    assert r.returncode == 0 and "Successful" in r.stdout, (r.stdout, r.stderr)
    r = cli("groups", "--describe", "--group", "cli-g", "--output", "json", *common)
    current = {row["partition"]: row["current_offset"] for row in json.loads(r.stdout)}
    assert current[0] is None and current[1] is not None, r.stdout  # only partition 1's offset is left
    r = cli("groups", "--delete", "--group", "cli-g", *common)
    assert r.returncode == 0 and "Deletion of requested consumer groups ('cli-g') was successful." in r.stdout, \
        (r.stdout, r.stderr)
    assert "cli-g" not in cli("groups", "--list", *common).stdout.split()
    r = cli("groups", "--delete", "--group", "cli-g", *common)
    assert r.returncode == 1 and "GROUP_ID_NOT_FOUND" in r.stderr, (r.stdout, r.stderr)


def test_a_static_member_of_our_consumer_restarts_without_a_rebalance(cluster) -> None:  # type: ignore[no-untyped-def]
    """KIP-345 with this project's Consumer (group_instance_id): a static member's close sends no
    LeaveGroup, and a new consumer with the same instance id takes the old one's partitions back in
    the same generation; the other member is never asked to rejoin."""
    c = cluster.start(1)
    view = cluster.view()
    assert create_topic(view, "static", partitions=PARTS, replication_factor=1).error_code == E.NONE
    wait_for(lambda: all(leader_of(view, "static", p)[0] >= 0 for p in range(PARTS)))
    bootstrap = c.state.bootstrap_servers

    def member(name: str) -> Consumer:
        return Consumer("static", bootstrap_servers=bootstrap, group_id="static-group", consumer_id=name,
                        group_instance_id=f"instance-{name}", session_timeout_ms=30_000, heartbeat_interval_ms=200)

    consumers = {"a": member("a"), "b": member("b")}
    stops = {"a": threading.Event(), "b": threading.Event()}

    def run(name: str) -> None:  # each member polls in its own thread, as a join waits for the others
        consumer = consumers[name]
        while not stops[name].is_set():
            consumer.poll(timeout_ms=50)

    threads = {n: threading.Thread(target=run, args=(n,), daemon=True) for n in consumers}
    for th in threads.values():
        th.start()
    try:
        wait_for(lambda: group_owners(bootstrap, "static-group") == {"a": 2, "b": 2}, timeout_s=30,
                 what="a 2/2 split of static members")
        a, b = consumers["a"], consumers["b"]
        assert a._group is not None and b._group is not None
        generation, a_parts = b._group.generation_id, set(a.assignment())
        stops["a"].set()
        threads["a"].join(10)
        a.close()  # no LeaveGroup: b keeps its partitions, a's wait for a's return
        consumers["a"] = member("a")
        stops["a"] = threading.Event()
        threads["a"] = threading.Thread(target=run, args=("a",), daemon=True)
        threads["a"].start()
        wait_for(lambda: set(consumers["a"].assignment()) == a_parts, timeout_s=30,
                 what="the restarted static member to get its old partitions back")
        a = consumers["a"]
        assert a._group is not None and a._group.generation_id == generation == b._group.generation_id
        assert not b._group.rejoin_needed.is_set()
    finally:
        for name, consumer in consumers.items():
            stops[name].set()
            threads[name].join(10)
            consumer.close()
