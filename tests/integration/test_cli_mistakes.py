"""A week-one operator never trips (issue 33): CLI commands that printed success for nothing now
say what happened and exit 1. One shared cluster (module_cluster): nothing here hurts it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ClusterFixture, ready_topic

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def cli(fx: ClusterFixture, *args: str) -> subprocess.CompletedProcess[str]:
    assert fx.cluster is not None and fx.cluster.state is not None
    return subprocess.run([sys.executable, "-m", "client.cli", *args, "--bootstrap-server",
                           fx.cluster.state.bootstrap_servers], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_perf_produce_counts_only_acknowledged_records(module_cluster: ClusterFixture) -> None:
    """Item 2: "3 records sent, 84.8 records/sec (161.79 MB/sec)", exit 0, with nothing written."""
    ready_topic(module_cluster, "perf-small", **{"max.message.bytes": "1000"})
    refused = cli(module_cluster, "perf", "produce", "--topic", "perf-small", "--num-records", "3",
                  "--record-size", "2000", "--acks", "all")
    assert refused.returncode == 1, refused
    assert "3 of 3 records failed" in refused.stderr and "MESSAGE_TOO_LARGE" in refused.stderr, refused.stderr
    assert refused.stdout.startswith("0 records sent"), refused.stdout
    ready_topic(module_cluster, "perf-plain")
    fine = cli(module_cluster, "perf", "produce", "--topic", "perf-plain", "--num-records", "50",
               "--record-size", "100", "--acks", "all")
    assert fine.returncode == 0 and fine.stdout.startswith("50 records sent"), fine


def test_topics_alter_refuses_what_it_cannot_do(module_cluster: ClusterFixture) -> None:
    """Item 3: `--alter --partitions 6` and a bare `--alter` printed "Updated config" and did nothing.
    Since issue 30 `--alter --partitions` adds partitions (CreatePartitions); a count that does not
    grow is refused as Kafka does, and a bare `--alter` still is."""
    ready_topic(module_cluster, "alter-me")
    more = cli(module_cluster, "topics", "--alter", "--topic", "alter-me", "--partitions", "6")
    assert more.returncode == 0 and "Adding partitions succeeded!" in more.stdout, more
    fewer = cli(module_cluster, "topics", "--alter", "--topic", "alter-me", "--partitions", "2")
    assert fewer.returncode == 1 and "higher than the requested 2" in fewer.stderr, fewer
    bare = cli(module_cluster, "topics", "--alter", "--topic", "alter-me")
    assert bare.returncode == 1 and "--config" in bare.stderr, bare
    ok = cli(module_cluster, "topics", "--alter", "--topic", "alter-me", "--config", "retention.ms=60000")
    assert ok.returncode == 0 and "Updated config" in ok.stdout, ok


def test_commands_that_talk_to_the_brokers_refuse_zookeeper(module_cluster: ClusterFixture) -> None:
    """Item 8: `--zookeeper 127.0.0.1:1` was accepted and ignored by leader-election,
    reassign-partitions --verify ("Reassignment complete.", exit 0) and top --once."""
    for args in (("leader-election", "--all-topic-partitions"), ("reassign-partitions", "--verify"),
                 ("top", "--once")):
        r = cli(module_cluster, *args, "--zookeeper", "127.0.0.1:1")
        assert r.returncode == 1 and "does not use --zookeeper" in r.stderr, (args, r)


def test_a_consumer_piped_into_head_exits_quietly(module_cluster: ClusterFixture) -> None:
    """Item 10: `consume ... | head -2` ended with "error: [Errno 32] Broken pipe" and exit 1."""
    ready_topic(module_cluster, "piped")
    assert module_cluster.cluster is not None and module_cluster.cluster.state is not None
    bootstrap = module_cluster.cluster.state.bootstrap_servers
    produced = cli(module_cluster, "perf", "produce", "--topic", "piped", "--num-records", "20000",
                   "--record-size", "100", "--acks", "all")
    assert produced.returncode == 0, produced
    pipeline = (f"{sys.executable} -m client.cli consume --topic piped --from-beginning --max-messages 20000 "
                f"--timeout-ms 20000 --bootstrap-server {bootstrap} | head -2; echo \"exit=${{PIPESTATUS[0]}}\"")
    r = subprocess.run(["bash", "-c", pipeline], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = r.stdout.splitlines()
    assert len(lines) == 3 and lines[-1] == "exit=0", (r.stdout, r.stderr)
    assert r.stderr == "", r.stderr


def test_the_consumer_group_tools_of_week_one(module_cluster: ClusterFixture) -> None:
    """Kafka tools a user reaches for in week one: kafka-consumer-groups --describe with HOST and
    CLIENT-ID, --members, --state, --all-groups, --reset-offsets --all-topics --shift-by and
    --to-datetime in Kafka's ISO-8601."""
    import json
    import threading

    from helpers import wait_for

    from client.consumer import Consumer

    ready_topic(module_cluster, "week-one")
    assert cli(module_cluster, "perf", "produce", "--topic", "week-one", "--num-records", "10", "--record-size",
               "10", "--acks", "all").returncode == 0
    consumed = cli(module_cluster, "consume", "--topic", "week-one", "--group", "wk", "--from-beginning",
                   "--max-messages", "10", "--timeout-ms", "20000")
    assert consumed.returncode == 0, consumed
    state = cli(module_cluster, "groups", "--describe", "--group", "wk", "--state")
    assert state.returncode == 0 and "Empty" in state.stdout.splitlines()[1], state
    members = cli(module_cluster, "groups", "--describe", "--group", "wk", "--members")
    assert members.returncode == 0 and "has no active members" in members.stderr, members
    # --shift-by -3 from the committed 10; --to-datetime long ago: the log start.
    shifted = cli(module_cluster, "groups", "--reset-offsets", "--group", "wk", "--all-topics", "--shift-by", "-3",
                  "--execute", "--output", "json")
    assert shifted.returncode == 0 and [r["new_offset"] for r in json.loads(shifted.stdout)] == [7], shifted
    dated = cli(module_cluster, "groups", "--reset-offsets", "--group", "wk", "--topic", "week-one",
                "--to-datetime", "2001-02-03T04:05:06.789", "--output", "json")
    assert dated.returncode == 0 and [r["new_offset"] for r in json.loads(dated.stdout)] == [0], dated
    bad = cli(module_cluster, "groups", "--reset-offsets", "--group", "wk", "--topic", "week-one",
              "--to-datetime", "yesterday")
    assert bad.returncode == 1 and "YYYY-MM-DDTHH:mm:SS.sss" in bad.stderr, bad
    every = cli(module_cluster, "groups", "--describe", "--all-groups", "--output", "json")
    assert every.returncode == 0 and "wk" in {r["group"] for r in json.loads(every.stdout)}, every
    # A live member: its consumer id, host and client id in --describe and --members.
    assert module_cluster.cluster is not None and module_cluster.cluster.state is not None
    member = Consumer("week-one", bootstrap_servers=module_cluster.cluster.state.bootstrap_servers, group_id="wk",
                      consumer_id="wk-client", heartbeat_interval_ms=200, enable_auto_commit=False)
    stop = threading.Event()
    poller = threading.Thread(target=lambda: [member.poll(timeout_ms=50) for _ in iter(stop.is_set, True)],
                              daemon=True)
    poller.start()
    try:
        wait_for(lambda: member.assignment() or None, timeout_s=30, what="the member's assignment")
        rows = json.loads(cli(module_cluster, "groups", "--describe", "--group", "wk", "--output", "json").stdout)
        assert rows and rows[0]["client_id"] == "wk-client" and rows[0]["host"] and rows[0]["member_id"], rows
        live = cli(module_cluster, "groups", "--describe", "--group", "wk", "--members", "--verbose")
        assert live.returncode == 0 and "wk-client" in live.stdout and "week-one(0)" in live.stdout, live
        state = cli(module_cluster, "groups", "--describe", "--group", "wk", "--state")
        assert "Stable" in state.stdout and "range" in state.stdout, state
    finally:
        stop.set()
        poller.join(10)
        member.close()


def test_a_produce_that_cannot_succeed_says_why_while_it_retries(module_cluster: ClusterFixture) -> None:
    """Item 9: min.insync.replicas above the replication factor - the create warns, and the
    console producer says NOT_ENOUGH_REPLICAS while it retries instead of 120 s of silence;
    item 11: `--property bogus` names --property, and snappy/lz4 are offered."""
    created = cli(module_cluster, "topics", "--create", "--topic", "too-few", "--replication-factor", "1",
                  "--config", "min.insync.replicas=2")
    assert created.returncode == 0 and "min.insync.replicas=2 exceeds the replication factor 1" in created.stderr
    assert module_cluster.cluster is not None and module_cluster.cluster.state is not None
    r = subprocess.run([sys.executable, "-m", "client.cli", "produce", "--topic", "too-few", "--producer-property",
                        "delivery.timeout.ms=4000", "--compression", "lz4", "--bootstrap-server",
                        module_cluster.cluster.state.bootstrap_servers], cwd=ROOT, input="x\n", capture_output=True,
                       text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 1, r
    assert "NOT_ENOUGH_REPLICAS" in r.stderr and "retrying" in r.stderr, r.stderr
    bogus = cli(module_cluster, "produce", "--topic", "too-few", "--property", "bogus")
    assert bogus.returncode == 1 and "--property expects key=value" in bogus.stderr, bogus


def test_the_tools_pointed_at_a_kafka_listener_say_so(module_cluster: ClusterFixture) -> None:
    """Item 5: `topics --list --bootstrap-server <Kafka port>` said "connection closed by the server
    (a TLS listener? ...)"; it names the Kafka listener and where the gRPC one is."""
    assert module_cluster.cluster is not None and module_cluster.cluster.state is not None
    kafka = module_cluster.cluster.state.kafka_bootstrap_servers.split(",")[0]
    r = subprocess.run([sys.executable, "-m", "client.cli", "topics", "--list", "--bootstrap-server", kafka], cwd=ROOT,
                       capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 1 and "Kafka wire-protocol listener" in r.stderr and "gRPC" in r.stderr, r


def test_the_console_consumer_prints_headers_and_its_count_on_ctrl_c(module_cluster: ClusterFixture) -> None:
    """Item 11: the console consumer ignored print.headers, and said nothing on Ctrl-C."""
    import signal

    from client.producer import Producer

    ready_topic(module_cluster, "headed")
    assert module_cluster.cluster is not None and module_cluster.cluster.state is not None
    bootstrap = module_cluster.cluster.state.bootstrap_servers
    with Producer(bootstrap, acks="all") as p:
        p.send("headed", b"v1", headers=[("trace", b"t-1"), ("kind", b"click")]).result(timeout=30)
        p.send("headed", b"v2").result(timeout=30)
    r = cli(module_cluster, "consume", "--topic", "headed", "--from-beginning", "--max-messages", "2",
            "--timeout-ms", "20000", "--property", "print.headers=true")
    assert r.returncode == 0 and r.stdout.splitlines() == ["trace:t-1,kind:click\tv1", "NO_HEADERS\tv2"], r
    proc = subprocess.Popen([sys.executable, "-m", "client.cli", "consume", "--topic", "headed", "--from-beginning",
                             "--bootstrap-server", bootstrap], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout is not None
        assert [proc.stdout.readline(), proc.stdout.readline()] == ["v1\n", "v2\n"]
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "Processed a total of 2 messages" in err, (proc.returncode, err)
