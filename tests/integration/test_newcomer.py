"""What a newcomer trips over (issue 17), through the ``minikafka`` command as they would run it:
errors in one line, refusals instead of guesses, progress on long commands, stable addresses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import wait_for

from client.ops.local_cluster import ClusterState, free_port, pid_alive

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, stdin: str | None = None, timeout: float = 120,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "client.cli", *args], cwd=ROOT, input=stdin, capture_output=True,
                          text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def one_line(r: subprocess.CompletedProcess[str]) -> str:
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


# ------------------------------------------------------------------ one line per error


def test_unreachable_bootstrap_server_is_one_line() -> None:
    port = free_port()  # nothing listens there: connection refused
    for args in (["topics", "--list"], ["produce", "--topic", "t"], ["consume", "--topic", "t", "--timeout-ms", "500"]):
        r = cli(*args, "--bootstrap-server", f"127.0.0.1:{port}", stdin="x\n")
        assert r.returncode == 1, (args, r.stderr)
        assert one_line(r) == f"error: cannot reach 127.0.0.1:{port}: connection refused", args


def test_broker_with_zookeeper_unreachable_says_so_in_one_line(tmp_path: Path) -> None:
    zk = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    r = cli("cluster", "up", "--dir", str(tmp_path / "c"), "--brokers", "1", "--zookeeper", zk, "--random-ports",
            "--set", "zookeeper.connection.timeout.ms=2000")
    assert r.returncode == 1
    line = one_line(r)
    assert f"cannot reach ZooKeeper at {zk} within 2000 ms (zookeeper.connection.timeout.ms)" in line, line
    assert time.monotonic() - started < 60
    log = (tmp_path / "c" / "broker-1" / "broker.log").read_text()
    # No kazoo retry chatter, no traceback: the broker's own error line, once.
    assert "Connection dropped" not in log and "Traceback" not in log, log
    assert log.count("error: cannot reach ZooKeeper") == 1, log


def test_a_broker_failing_during_cluster_up_stops_everything_and_a_corrected_up_works(tmp_path: Path) -> None:
    d = tmp_path / "c"
    r = cli("cluster", "up", "--dir", str(d), "--brokers", "2", "--set", "foo.bar=1", "--random-ports")
    assert r.returncode == 1
    line = one_line(r)
    assert "exited with" in line and "unknown broker config 'foo.bar'" in line, line
    state = ClusterState.load(d)
    assert not pid_alive(state.zookeeper_pid) and not any(pid_alive(b.pid) for b in state.brokers.values())
    try:
        r = cli("cluster", "up", "--dir", str(d), "--brokers", "1", "--random-ports")
        assert r.returncode == 0, r.stderr
        r = cli("topics", "--list", "--dir", str(d))
        assert r.returncode == 0, r.stderr
        # `cluster status` ends with the line that points other shells at this cluster.
        r = cli("cluster", "status", "--dir", str(d))
        state = ClusterState.load(d)
        export = r.stdout.strip().splitlines()[-1]
        assert export == (f"export MINIKAFKA_BOOTSTRAP={state.bootstrap_servers} "
                          f"MINIKAFKA_ZOOKEEPER={state.zookeeper_connect} "
                          f"MINIKAFKA_KAFKA_BOOTSTRAP={state.kafka_bootstrap_servers}"), r.stdout
        env = dict(kv.split("=", 1) for kv in export.removeprefix("export ").split())
        r = cli("topics", "--create", "--topic", "via-env", "--replication-factor", "1", env=env)
        assert r.returncode == 0, r.stderr
        # Issue 33: the directory keeps its ports across down/up, so what was exported stays true.
        assert cli("cluster", "down", "--dir", str(d)).returncode == 0
        r = cli("cluster", "up", "--dir", str(d), "--brokers", "1", "--random-ports")
        assert r.returncode == 0, r.stderr
        again = ClusterState.load(d)
        assert (again.bootstrap_servers, again.zookeeper_connect, again.kafka_bootstrap_servers) == \
            (state.bootstrap_servers, state.zookeeper_connect, state.kafka_bootstrap_servers)
        r = cli("topics", "--list", env=env)
        assert r.returncode == 0 and "via-env" in r.stdout.split(), (r.stdout, r.stderr)
        # Issue 33 item 11: a SIGSTOPped broker is "paused", not ALIVE; status of a stopped cluster
        # exits 1; a second `down` does not claim to stop it again.
        assert cli("cluster", "kill", "1", "--signal", "STOP", "--dir", str(d)).returncode == 0
        try:
            r = cli("cluster", "status", "--dir", str(d), "--output", "json")
            assert json.loads(r.stdout)["brokers"][0]["paused"] is True, r.stdout
            assert " paused " in cli("cluster", "status", "--dir", str(d)).stdout
        finally:
            cli("cluster", "kill", "1", "--signal", "CONT", "--dir", str(d))
        r = cli("cluster", "down", "--dir", str(d))
        assert r.returncode == 0 and r.stdout.strip() == "cluster stopped", r
        r = cli("cluster", "down", "--dir", str(d))
        assert r.returncode == 0 and r.stdout.strip() == "the cluster was not running", r
        r = cli("cluster", "status", "--dir", str(d))
        assert r.returncode == 1 and "not running" in r.stderr, r
    finally:
        cli("cluster", "down", "--dir", str(d))


# ------------------------------------------------------------------ refuse instead of guessing


def test_refusals_and_notices_instead_of_silent_guesses(cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(1)
    common = ["--bootstrap-server", c.state.bootstrap_servers]

    # Producing to a missing topic: created (auto.create.topics.enable defaults to true, as Kafka's),
    # and the command says so in one line.
    r = cli("produce", "--topic", "typo", *common, stdin="a\nb\n")
    assert r.returncode == 0, r.stderr
    assert "notice: topic 'typo' did not exist; the broker created it" in one_line(r)
    r = cli("produce", "--topic", "typo", *common, stdin="c\n")  # exists now: no notice
    assert r.returncode == 0 and r.stderr == "", r.stderr

    # Consuming a missing topic: an error, not an empty wait.
    r = cli("consume", "--topic", "missing", "--from-beginning", *common)
    assert r.returncode == 1 and "topic 'missing' does not exist" in one_line(r)
    r = cli("topics", "--list", *common)
    assert "missing" not in r.stdout.split()  # and asking did not create it

    # perf consume asked for more than exists says why.
    r = cli("perf", "consume", "--topic", "typo", "--messages", "10", "--timeout-ms", "1500", *common)
    assert r.returncode == 1
    assert "3 of 10 consumed" in r.stderr and "holds 3 records" in r.stderr, r.stderr

    # Reset beyond the range: clamped with Kafka's warning, per partition.
    cli("topics", "--create", "--topic", "empty", "--partitions", "1", "--replication-factor", "1", *common)
    r = cli("groups", "--reset-offsets", "--group", "g", "--topic", "empty", "--to-offset", "5", *common)
    assert r.returncode == 0, r.stderr
    assert one_line(r) == ("warning: New offset (5) is higher than latest offset for topic partition empty-0. "
                           "Value will be set to 0")

    # Reassignment to a broker that does not exist: refused at submission, nothing started.
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "typo", "partition": 0, "replicas": [7]}]}))
    r = cli("reassign-partitions", "--execute", "--reassignment-json-file", str(plan), *common)
    assert r.returncode == 1 and "brokers [7] are not live" in one_line(r)
    assert "Started" not in r.stdout

    # The Spark job on a missing topic: an error before Spark starts, not 0 rows and exit 0.
    r = subprocess.run([sys.executable, "-m", "spark_jobs.topic_to_parquet", "--topic", "missing",
                        "--out", str(tmp_path / "out"), *common], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 1 and "topic 'missing' does not exist" in one_line(r)
    assert not (tmp_path / "out").exists()


def test_produce_refused_when_the_brokers_do_not_auto_create(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(1, auto_create_topics_enable="false")
    r = cli("produce", "--topic", "typo", "--bootstrap-server", c.state.bootstrap_servers, stdin="a\n")
    assert r.returncode == 1
    assert "auto.create.topics.enable=false" in one_line(r)


# ------------------------------------------------------------------ progress and safety


def test_ctrl_c_in_chaos_heals_every_fault_and_removes_the_topic(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3)
    state = c.state
    proc = subprocess.Popen([sys.executable, "-m", "client.cli", "chaos", "--dir", str(state.dir),
                             "--scenario", "follower-pause", "--duration", "120", "--interval", "0.5"],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        def paused() -> int | None:  # a broker stopped by SIGSTOP (state T in /proc)
            for b in ClusterState.load(Path(state.dir)).brokers.values():
                try:
                    if Path(f"/proc/{b.pid}/stat").read_text().split(")")[-1].split()[0] == "T":
                        return b.broker_id
                except OSError:
                    pass
            return None

        wait_for(paused, timeout_s=60, interval_s=0.02, what="chaos to pause a broker")
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted: healed every injected fault (resumed broker" in err, err
    assert "removed topic chaos-" in err, err
    assert paused() is None
    assert all(pid_alive(b.pid) for b in ClusterState.load(Path(state.dir)).brokers.values())

    def chaos_topics() -> list[str]:
        r = cli("topics", "--list", "--bootstrap-server", state.bootstrap_servers)
        return [t for t in r.stdout.split() if t.startswith("chaos-")]

    # Deleted in ZooKeeper when chaos says so; a broker's metadata cache learns it from the
    # controller's UpdateMetadata a moment later (as in Kafka: metadata is eventually consistent).
    wait_for(lambda: not chaos_topics(), timeout_s=30, what="every broker's metadata to drop the chaos topic")


def test_perf_produce_prints_a_periodic_line_off_a_terminal(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(1)
    r = cli("perf", "produce", "--topic", "perf", "--num-records", "6000", "--throughput", "1000",
            "--bootstrap-server", c.state.bootstrap_servers)
    assert r.returncode == 0, r.stderr
    periodic = [ln for ln in r.stderr.splitlines() if "records sent" in ln and "records/sec" in ln]
    assert periodic, r.stderr  # ~6 s at 1000/s: at least the 5 s line, as kafka-producer-perf-test
    assert "6000 records sent" in r.stdout


def test_topics_describe_every_topic_and_only_the_partitions_in_trouble(cluster) -> None:  # type: ignore[no-untyped-def]
    """Issue 33, kafka-topics of week one: --describe without --topic describes every topic;
    --under-replicated-partitions and --unavailable-partitions print only those partitions."""
    from helpers import E, create_topic, isr_of, leader_of

    c = cluster.start(3)
    common = ["--bootstrap-server", c.state.bootstrap_servers]
    view = cluster.view()
    assert create_topic(view, "wide", partitions=1, replication_factor=3).error_code == E.NONE
    assert create_topic(view, "narrow", partitions=3, replication_factor=1).error_code == E.NONE
    wait_for(lambda: len(isr_of(view, "wide", 0)) == 3 and all(leader_of(view, "narrow", p)[0] >= 0
                                                                for p in range(3)), timeout_s=30)
    r = cli("topics", "--describe", *common)
    assert r.returncode == 0 and "Topic: wide\t" in r.stdout and "Topic: narrow\t" in r.stdout, r
    r = cli("topics", "--describe", "--under-replicated-partitions", *common)
    assert r.returncode == 0 and r.stdout.strip() == "", r.stdout
    victim = next(b for b in (1, 2, 3) if b != leader_of(view, "wide", 0)[0])
    lost = [p for p in range(3) if leader_of(view, "narrow", p)[0] == victim]
    c.signal(victim, "KILL")
    wait_for(lambda: len(isr_of(view, "wide", 0)) == 2, timeout_s=30, what="the wide topic's ISR to shrink")
    r = cli("topics", "--describe", "--under-replicated-partitions", *common)
    rows = [ln.strip().split("\t") for ln in r.stdout.splitlines() if ln.strip()]
    assert [row[:2] for row in rows] == [["Topic: wide", "Partition: 0"]], r
    r = cli("topics", "--describe", "--unavailable-partitions", *common)
    rows = [ln.strip().split("\t") for ln in r.stdout.splitlines() if ln.strip()]
    assert sorted(row[1] for row in rows) == [f"Partition: {p}" for p in lost], r
