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
    """Item 3: `--alter --partitions 6` and a bare `--alter` printed "Updated config" and did nothing."""
    ready_topic(module_cluster, "alter-me")
    more = cli(module_cluster, "topics", "--alter", "--topic", "alter-me", "--partitions", "6")
    assert more.returncode == 1 and "not supported" in more.stderr, more
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
