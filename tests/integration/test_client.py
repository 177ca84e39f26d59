"""The client library and CLI against a real cluster (SPEC S5, S6, S11)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
from helpers import E, create_topic, group_owners, leader_of, read_values, wait_for

from client.admin import AdminClient
from client.consumer import Consumer
from client.producer import Producer
from client.structs import TopicPartition

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "client.cli", *args], cwd=ROOT, input=stdin, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("idempotent", [True, False])
def test_retries_duplicate_only_without_idempotence(cluster, idempotent: bool) -> None:  # type: ignore[no-untyped-def]
    # The follower stays in the ISR while paused (long lag limit), so acks=all times out after
    # the record was appended, and the producer retries a batch the leader already has.
    c = cluster.start(2, zookeeper_session_timeout_ms="30000", replica_lag_time_max_ms="60000")
    view = cluster.view()
    topic = f"dup-{idempotent}"
    assert create_topic(view, topic, replication_factor=2).error_code == E.NONE
    leader, _ = wait_for(lambda: (lambda le: le if le[0] >= 0 else None)(leader_of(view, topic, 0)))
    follower = 2 if leader == 1 else 1
    metrics = c.broker(leader).metrics_address

    def produce_requests() -> float:
        with urllib.request.urlopen(metrics, timeout=5) as resp:
            for line in resp.read().decode().splitlines():
                if line.startswith('minikafka_requests_total{api="Produce"}'):
                    return float(line.rsplit(" ", 1)[1])
        return 0.0

    with Producer(c.state.bootstrap_servers, acks="all", enable_idempotence=idempotent, request_timeout_ms=700,
                  retry_backoff_ms=100, delivery_timeout_ms=60000) as p:
        p.send(topic, b"warm-up").result(timeout=30)
        c.signal(follower, "STOP")
        try:
            before = produce_requests()
            fut = p.send(topic, b"exactly-once?")
            # The leader answers REQUEST_TIMED_OUT after 700 ms each time: wait for three attempts.
            wait_for(lambda: produce_requests() >= before + 3, timeout_s=20, what="the batch retried")
            assert not fut.done()
        finally:
            c.signal(follower, "CONT")
        assert fut.result(timeout=60).offset >= 1
    conn, _ = view.leader_connection(topic, 0)
    copies = read_values(conn, topic, 0).count("exactly-once?")
    if idempotent:
        assert copies == 1
    else:
        assert copies > 1, "without idempotence the retried batch must have been written again"



def test_consumer_group_range_assignment_and_failover(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(1)
    view = cluster.view()
    assert create_topic(view, "grp", partitions=7, replication_factor=1).error_code == E.NONE
    wait_for(lambda: all(leader_of(view, "grp", p)[0] >= 0 for p in range(7)))
    per_partition = 1000
    with Producer(c.state.bootstrap_servers) as p:
        for i in range(7 * per_partition):
            p.send("grp", f"m{i}".encode(), partition=i % 7)
    bootstrap = c.state.bootstrap_servers

    # One member in another process, slow (10 records per poll, 10 ms apart), killed with SIGKILL
    # while it still has records to consume; two members here. Groups need bootstrap servers only.
    # Each line goes out in one write: print() writes its parts one by one, and a CI run once read
    # a line cut short by the SIGKILL.
    slow_member = (
        "import sys, time\n"
        "from client.consumer import Consumer\n"
        "c = Consumer('grp', bootstrap_servers=sys.argv[1], group_id='g', auto_offset_reset='earliest',\n"
        "             auto_commit_interval_ms=100, session_timeout_ms=2000, heartbeat_interval_ms=200,\n"
        "             max_poll_records=10, consumer_id='external')\n"
        "while True:\n"
        "    for r in c.poll(timeout_ms=100):\n"
        "        sys.stdout.write(f'{r.partition} {r.offset}\\n'); sys.stdout.flush()\n"
        "    time.sleep(0.01)\n")
    member = subprocess.Popen([sys.executable, "-c", slow_member, bootstrap], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    out_lines: list[str] = []
    reader = threading.Thread(target=lambda: out_lines.extend(member.stdout or []), daemon=True)
    reader.start()
    consumers = [Consumer("grp", bootstrap_servers=bootstrap, group_id="g", auto_offset_reset="earliest",
                          consumer_id=f"member-{i}", auto_commit_interval_ms=200, session_timeout_ms=2000,
                          heartbeat_interval_ms=200) for i in range(2)]
    seen: dict[str, set[tuple[int, int]]] = {"a": set(), "b": set()}
    stop = threading.Event()

    def run(consumer: Consumer, name: str) -> None:
        while not stop.is_set():
            for r in consumer.poll(timeout_ms=100):
                seen[name].add((r.partition, r.offset))

    # Let the external member join and consume its first records before the others start reading.
    wait_for(lambda: group_owners(bootstrap, "g") == {"external": 7}, timeout_s=30, what="the first member")
    threads = [threading.Thread(target=run, args=(cn, n)) for cn, n in zip(consumers, "ab", strict=True)]
    for t in threads:
        t.start()
    try:
        split = wait_for(lambda: (lambda o: o if sum(o.values()) == 7 and len(o) == 3 else None)(
            group_owners(bootstrap, "g")), timeout_s=30, what="all 7 partitions owned by 3 members")
        assert sorted(split.values()) == [2, 2, 3]  # S11.2 / Kafka's range assignment
        assert split["external"] == 3  # sorted member ids: "external-..." < "member-0-..." < "member-1-..."
        with AdminClient(bootstrap) as admin:
            wait_for(lambda: any(r.current_offset for r in admin.describe_group("g")), timeout_s=30,
                     what="the members to commit progress")
        os.killpg(member.pid, signal.SIGKILL)
        member.wait(10)
        reader.join(10)
        assert 0 < len(out_lines) < 3 * per_partition, "the member should die with records left to consume"
        wait_for(lambda: (lambda o: set(o) == {"member-0", "member-1"} and sum(o.values()) == 7)(
            group_owners(bootstrap, "g")), timeout_s=30, what="the survivors to take over after the session expiry")
        wait_for(lambda: len(seen["a"] | seen["b"]) + len(out_lines) >= 7 * per_partition, timeout_s=60,
                 what="everything consumed")
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        for cn in consumers:
            cn.close()
        if member.poll() is None:
            os.killpg(member.pid, signal.SIGKILL)
    got = seen["a"] | seen["b"]
    for line in out_lines:
        part, off = line.split()
        got.add((int(part), int(off)))
    assert got == {(p, o) for p in range(7) for o in range(per_partition)}, "a record was skipped"


def test_cli_round_trip_and_lag(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(1)
    common = ["--bootstrap-server", c.state.bootstrap_servers]
    r = cli("topics", "--create", "--topic", "cli", "--partitions", "2", "--replication-factor", "1", *common)
    assert r.returncode == 0, r.stderr
    assert "Created topic cli." in r.stdout
    lines = "".join(f"k{i}:v{i}\n" for i in range(10))
    r = cli("produce", "--topic", "cli", "--property", "parse.key=true", "--property", "key.separator=:", *common,
            stdin=lines)
    assert r.returncode == 0, r.stderr
    r = cli("consume", "--topic", "cli", "--group", "cg", "--from-beginning", "--max-messages", "10",
            "--timeout-ms", "10000", "--property", "print.key=true", "--property", "key.separator=:",
            *common)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == sorted(f"k{i}:v{i}" for i in range(10))
    r = cli("groups", "--describe", "--group", "cg", "--output", "json", *common)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert sum(row["current_offset"] for row in rows) == 10 and all(row["lag"] == 0 for row in rows)
    r = cli("topics", "--describe", "--topic", "cli", *common)
    assert "Partition: 0" in r.stdout and "Leader: 1" in r.stdout and "HighWatermark:" in r.stdout


BAD_INPUT = [
    (["topics", "--create", "--topic", "bad name"], "INVALID_TOPIC_EXCEPTION"),
    (["topics", "--describe", "--topic", "missing"], "UNKNOWN_TOPIC_OR_PARTITION"),
    (["topics", "--create", "--topic", "x", "--replication-factor", "5"], "INVALID_REPLICATION_FACTOR"),
    (["topics", "--create", "--topic", "y", "--config", "nonsense"], "key=value"),
    (["groups", "--describe", "--group", "nobody"], "GROUP_ID_NOT_FOUND"),
    (["consume", "--topic", "t", "--partition", "0", "--offset", "soon"], "invalid literal"),
]


def test_bad_cli_input_is_one_line_and_exit_1(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(1)
    for args, message in BAD_INPUT:
        r = cli(*args, "--bootstrap-server", c.state.bootstrap_servers)
        assert r.returncode == 1, (args, r.stderr)
        assert message in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, (args, r.stderr)


def test_consumer_follows_a_leader_change_and_seeks(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3)
    view = cluster.view()
    assert create_topic(view, "follow", replication_factor=3).error_code == E.NONE
    leader, _ = wait_for(lambda: (lambda le: le if le[0] >= 0 else None)(leader_of(view, "follow", 0)))
    with Producer(c.state.bootstrap_servers) as p:
        for i in range(50):
            p.send("follow", f"r{i}".encode())
    tp = TopicPartition("follow", 0)
    with Consumer(bootstrap_servers=c.state.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        got = []
        while len(got) < 20:
            got += [r.value for r in consumer.poll(timeout_ms=1000, max_records=20 - len(got))]
        c.signal(leader, "KILL")
        with Producer(c.state.bootstrap_servers) as p:
            for i in range(50, 60):
                p.send("follow", f"r{i}".encode())
        wait_for(lambda: len(got) >= 60 or got.extend(r.value for r in consumer.poll(timeout_ms=200)),
                 timeout_s=30, what="reading on from the new leader")
        assert got == [f"r{i}".encode() for i in range(60)]
        consumer.seek(tp, 55)
        assert [r.offset for r in consumer.poll(timeout_ms=2000)][:1] == [55]
        assert consumer.end_offsets([tp])[tp] == 60


def test_admin_client_moves_on_from_a_broker_that_just_died(cluster) -> None:  # type: ignore[no-untyped-def]
    """The metadata still lists a broker killed a moment ago (the controller has not told the others
    yet): the admin client tried the first listed broker only and failed with UNAVAILABLE (a flaky
    test_cluster_lives run); as Kafka's AdminClient it moves on to a broker it can reach."""
    from client.admin import NewTopic

    c = cluster.start(3)
    first = c.state.brokers[1].address
    others = [b.address for i, b in sorted(c.state.brokers.items()) if i != 1]
    with AdminClient(",".join([first, *others])) as admin:
        admin.list_topics()  # metadata known, broker 1 first in it
        c.signal(1, "KILL")
        c.wait_for_exit(1)
        admin.create_topics([NewTopic("after-kill", 1, 2)])
        assert "after-kill" in admin.list_topics()
