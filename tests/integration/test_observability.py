"""Observability against real brokers: Kafka's health metrics, gRPC health, ``minikafka top``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from helpers import (
    TEST_ZK_DIGEST,
    E,
    batch_of,
    broker_security_args,
    create_topic,
    isr_of,
    leader_of,
    produce,
    wait_for,
)
from kazoo.client import KazooClient

from client.cli.top import snapshot
from client.ops.local_cluster import free_ports

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def scrape(url: str) -> dict[str, float]:
    out: dict[str, float] = {}
    with urllib.request.urlopen(url, timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
    return out


def test_metrics_follow_a_follower_failure(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3)
    view = cluster.view()
    assert create_topic(view, "obs", partitions=1, replication_factor=3).error_code == E.NONE
    leader, _ = wait_for(lambda: (lambda le: le if le[0] >= 0 else None)(leader_of(view, "obs", 0)))
    urls = {b.broker_id: b.metrics_address for b in c.state.brokers.values()}
    assert sum(scrape(u)["kafka_controller_kafkacontroller_activecontrollercount"] for u in urls.values()) == 1
    for u in urls.values():
        # Each broker made a full garbage collection before it served (its pause timed, and its
        # survivors frozen when over budget: broker.server.gc_pauses); the thaws come later.
        m = scrape(u)
        assert m["minikafka_gc_startup_full_collection_seconds"] > 0
        assert m["minikafka_gc_full_collections_total"] >= m["minikafka_gc_full_collections_over_budget_total"] >= 0
        assert m["minikafka_gc_freezes_total"] >= 0 and m["minikafka_gc_thaws_total"] == 0
    conn, _ = view.leader_connection("obs", 0)
    records = batch_of(["x"])
    assert produce(conn, "obs", 0, records).error_code == E.NONE
    m = scrape(urls[leader])
    assert m["kafka_server_brokertopicmetrics_bytesin_total"] == len(records)
    # The two followers fetched the batch (acks=all answered): BytesOut counts their fetches.
    assert m["kafka_server_brokertopicmetrics_bytesout_total"] >= 2 * len(records)
    assert m["kafka_server_replicamanager_underreplicatedpartitions"] == 0
    assert m['minikafka_high_watermark{partition="0",topic="obs"}'] == 1
    assert m['minikafka_requests_total{api="Produce"}'] >= 1
    follower = next(b for b in (1, 2, 3) if b not in (leader, c.zk_view()["controller"]))
    c.signal(follower, "KILL")
    wait_for(lambda: scrape(urls[leader])["kafka_server_replicamanager_underreplicatedpartitions"] == 1,
             timeout_s=20, what="under-replicated partitions to go up")
    c.start(follower)
    wait_for(lambda: scrape(urls[leader])["kafka_server_replicamanager_underreplicatedpartitions"] == 0,
             timeout_s=30, what="under-replicated partitions back to 0")
    assert scrape(urls[leader])["kafka_server_replicamanager_isrexpands_total"] >= 1
    assert sum(scrape(u)["kafka_controller_kafkacontroller_activecontrollercount"] for u in urls.values()) == 1


def test_health_is_serving_only_after_registration(tmp_path: Path, zk_connect: str, zk_client: KazooClient) -> None:
    # Another session holds broker id 7: the new broker serves gRPC but cannot register yet.
    zk_client.create("/brokers/ids/7", b'{"version":4,"host":"x","port":1,"timestamp":"0"}', ephemeral=True,
                     makepath=True)
    port, internal = free_ports(2)
    proc = subprocess.Popen([sys.executable, "-m", "client.cli", "broker", "--set", "broker.id=7",
                             *broker_security_args(tmp_path / "secrets", 7, port, internal, TEST_ZK_DIGEST),
                             "--set", f"zookeeper.connect={zk_connect}",
                             "--set", f"log.dirs={tmp_path / 'data'}", "--set", "zookeeper.session.timeout.ms=20000"],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = health_pb2_grpc.HealthStub(channel)

    def status() -> int:
        return int(stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2).status)

    try:
        assert wait_for(lambda: status() == health_pb2.HealthCheckResponse.NOT_SERVING, timeout_s=30,
                        what="the gRPC server to answer NOT_SERVING")
        zk_client.delete("/brokers/ids/7")
        wait_for(lambda: status() == health_pb2.HealthCheckResponse.SERVING, timeout_s=30,
                 what="SERVING after registration")
        assert zk_client.exists("/brokers/ids/7") is not None
    finally:
        channel.close()
        proc.terminate()
        proc.wait(30)


def test_top_shows_a_follower_leaving_and_catching_up(cluster) -> None:  # type: ignore[no-untyped-def]
    # Small follower fetches, so that catching up takes a moment we can watch.
    c = cluster.start(3, replica_fetch_max_bytes="4096")
    view = cluster.view()
    assert create_topic(view, "topv", partitions=1, replication_factor=3).error_code == E.NONE
    leader, _ = wait_for(lambda: (lambda le: le if le[0] >= 0 else None)(leader_of(view, "topv", 0)))
    follower = next(b for b in (1, 2, 3) if b not in (leader, c.zk_view()["controller"]))

    def top_cli() -> dict:  # type: ignore[type-arg]
        r = subprocess.run([sys.executable, "-m", "client.cli", "top", "--once", "--output", "json",
                            "--bootstrap-server", c.state.bootstrap_servers,
                            "--topic", "topv"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def replica(snap: dict, broker: int) -> dict:  # type: ignore[type-arg]
        return next(r for r in snap["partitions"][0]["replica_state"] if r["broker"] == broker)

    seen: dict[int, str] = {}  # what `top` remembers between refreshes
    snapshot(view, ["topv"], 50, seen=seen)
    c.signal(follower, "KILL")
    wait_for(lambda: follower not in isr_of(view, "topv", 0), timeout_s=20)
    # Issue 33: once its registration expired, the dead broker stays in top's header as DOWN; and
    # --topic shows that topic's events and the cluster's own only.
    wait_for(lambda: (view.refresh([]), follower not in view.brokers)[1], timeout_s=20,
             what="the killed broker's registration to expire")
    down = snapshot(view, ["topv"], 50, seen=seen)
    assert {b["id"]: b["alive"] for b in down["brokers"]}.get(follower) is False, down["brokers"]
    assert all(e["topic"] in ("", "topv") for e in down["events"]), down["events"]
    conn, _ = view.leader_connection("topv", 0)
    for i in range(150):
        assert produce(conn, "topv", 0, batch_of([f"r{i}"] * 50), acks=1).error_code == E.NONE
    total = 150 * 50
    snap = top_cli()
    p = snap["partitions"][0]
    assert follower not in p["isr"] and p["under_replicated"] and not replica(snap, follower)["in_isr"]
    assert not replica(snap, follower)["alive"] and replica(snap, leader)["leo"] == total
    # It returns: first alive but lagging (seen directly, or through its own became-follower event,
    # which records the log end it came back with), then caught up and back in the ISR.
    c.start(follower)

    def lag_seen(s: dict) -> bool:  # type: ignore[type-arg]
        r = replica(s, follower)
        if r["alive"] and 0 <= r["leo"] < total:
            return True
        for e in s["events"]:
            if e["broker"] == follower and e["kind"] == "became_follower" and e["topic"] == "topv":
                return int(e["detail"].rsplit("log end ", 1)[1]) < total
        return False

    lagging = wait_for(lambda: (lambda s: s if lag_seen(s) else None)(snapshot(view, ["topv"], 50)),
                       timeout_s=30, interval_s=0.02, what="the returned follower seen lagging")
    assert lagging is not None
    snap = wait_for(lambda: (lambda s: s if replica(s, follower)["in_isr"] and replica(s, follower)["leo"] == total
                             else None)(top_cli()), timeout_s=30, what="the follower caught up in top")
    assert not snap["partitions"][0]["under_replicated"]
    assert "isr_expand" in {e["kind"] for e in snap["events"]}
