"""``minikafka verify-replicas`` (Kafka's ReplicaVerificationTool) against real brokers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import E, batch_of, create_topic, isr_of, leader_of, produce, wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def verify(bootstrap: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "client.cli", "verify-replicas", "--bootstrap-server", bootstrap,
                           "--output", "json"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_identical_replicas_pass_and_a_flipped_byte_is_reported(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3)
    view = cluster.view()
    assert create_topic(view, "vr", partitions=2, replication_factor=3).error_code == E.NONE
    wait_for(lambda: all(leader_of(view, "vr", p)[0] >= 0 for p in range(2)))
    for p in range(2):
        conn, _ = view.leader_connection("vr", p)
        for i in range(5):
            assert produce(conn, "vr", p, batch_of([f"p{p}-{i}-{j}" for j in range(10)])).error_code == E.NONE
    r = verify(c.state.bootstrap_servers)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert [e["status"] for e in report] == ["OK", "OK"]
    assert all("5 batches identical on 3 replicas" in e["detail"] for e in report)

    # A follower's copy of a record changes on disk while it is down (a bit flip the CRC field
    # does not show, since it is not recomputed on reads).
    leader = view.partitions[("vr", 0)].leader
    follower = next(b for b in (1, 2, 3) if b != leader)
    c.signal(follower, "TERM")
    assert c.wait_for_exit(follower, timeout_s=30) == 0
    segment = sorted((Path(c.state.dir) / f"broker-{follower}" / "data" / "vr-0").glob("*.log"))[0]
    data = bytearray(segment.read_bytes())
    data[-3] ^= 0x01
    segment.write_bytes(bytes(data))
    c.start(follower)
    wait_for(lambda: follower in isr_of(view, "vr", 0), timeout_s=30, what="the follower back in the ISR")
    r = verify(c.state.bootstrap_servers)
    assert r.returncode == 1
    report = {e["partition"]: e for e in json.loads(r.stdout)}
    assert report[0]["status"] == "DIVERGED" and f"replica {follower}" in report[0]["detail"]
    assert report[1]["status"] == "OK"
