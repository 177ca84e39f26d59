"""Brokers on hosts of their own (issue 32), the part that runs inside the test's client namespace.

Network layout (made and removed by ``test_netns_multihost.py``; nothing outside these namespaces is
touched): a hub namespace holding only a bridge, one namespace per broker with a veth on it at
``<prefix>.<id>``, and this driver's namespace at ``<prefix>.100`` - the clients' machine, which also
runs ZooKeeper. Every broker binds its listeners on 0.0.0.0 and advertises its own address
(``advertised.listeners``, ``advertised.kafka.listeners``), as on separate machines, so what crosses
the bridge is what a real deployment sends between hosts: registrations read by the controller,
inter-broker requests and replica fetches on the advertised INTERNAL address, and clients sent from
the bootstrap list to the addresses in metadata.

It checks the registrations advertise the brokers' own addresses, runs the chaos workload (RF=3,
min.insync.replicas=2, acks=all, idempotent, unique values) while the leader of partition 0 is
killed and started again, checks the history and the replicas, and has a Kafka client (librdkafka)
write and read back through the advertised Kafka listeners. The last line of output is one JSON
object with what it saw.

    ip netns exec CLIENT_NS python tests/chaos/netns_multihost.py --prefix 10.233.0 --netns-prefix mkh1 --dir D
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/helpers.py

from helpers import wait_for
from kazoo.client import KazooClient

from client.connection import ClusterView
from client.ops.chaos import Workload
from client.ops.history import OK, check
from client.ops.local_cluster import LocalCluster, ZooKeeperServer
from client.ops.verify_replicas import verify
from proto import minikafka_pb2 as pb

TOPIC = "multihost"
PARTITIONS = 2
CLIENT_HOST = 100

BROKER_CONFIG = {
    "zookeeper.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "100",
    "request.timeout.ms": "5000",
    "controlled.shutdown.retry.backoff.ms": "200",
    "leader.imbalance.check.interval.seconds": "3600",
}


def registrations(connect: str) -> dict[int, dict[str, Any]]:
    zk = KazooClient(hosts=connect, timeout=10)
    zk.start(timeout=10)
    try:
        return {int(b): json.loads(zk.get(f"/brokers/ids/{b}")[0]) for b in zk.get_children("/brokers/ids")}
    finally:
        zk.stop()
        zk.close()


def kafka_round_trip(bootstrap: str, count: int) -> int:
    """librdkafka writes ``count`` records and reads them back: it bootstraps on one address and then
    connects to whatever each broker advertises."""
    from confluent_kafka import Consumer, Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(count):
        producer.produce(TOPIC, value=f"kafka-{i}".encode(), partition=0)
    assert producer.flush(30) == 0, "librdkafka could not deliver through the advertised Kafka listeners"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "multihost", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    seen: set[str] = set()
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and len(seen) < count:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None and (msg.value() or b"").startswith(b"kafka-"):
                seen.add(msg.value().decode())
    finally:
        consumer.close()
    return len(seen)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", required=True, help="first three octets of the namespaces' subnet")
    ap.add_argument("--netns-prefix", required=True, help="broker namespaces are <this>-b1..b3")
    ap.add_argument("--dir", required=True, type=Path)
    args = ap.parse_args()

    ns = {i: (f"{args.netns_prefix}-b{i}", f"{args.prefix}.{i}") for i in (1, 2, 3)}
    zk = ZooKeeperServer(args.dir / "zookeeper", host=f"{args.prefix}.{CLIENT_HOST}")
    zk.start()
    cluster = LocalCluster(args.dir / "cluster", zookeeper=zk.connect, broker_overrides=BROKER_CONFIG,
                           broker_netns=ns, wildcard_listeners=True)
    out: dict[str, Any] = {}
    try:
        state = cluster.up(3)
        regs = registrations(zk.connect)
        out["advertised"] = {b: sorted({e.split("://")[1].rsplit(":", 1)[0] for e in r["endpoints"]} | {r["host"]})
                             for b, r in regs.items()}
        out["binds"] = sorted({line.split("=", 1)[1] for b in state.brokers.values()
                               for line in Path(b.config).read_text().splitlines()
                               if line.startswith(("listeners=", "kafka.listeners="))})
        view = ClusterView(state.bootstrap_servers, timeout_s=5)
        resp = view.connection(view.bootstrap[0]).api.CreateTopics(pb.CreateTopicsRequest(topics=[
            pb.CreatableTopic(name=TOPIC, num_partitions=PARTITIONS, replication_factor=3,
                              configs={"min.insync.replicas": "2"})], timeout_ms=15000), timeout=20)
        assert resp.topics[0].error_code == pb.ErrorCode.NONE, resp.topics[0].error_message

        def isrs() -> list[tuple[int, ...]]:
            view.refresh([TOPIC])
            return [tuple(sorted(view.partitions[(TOPIC, p)].isr)) for p in range(PARTITIONS)]

        def leader(p: int) -> int:
            view.refresh([TOPIC])
            return int(view.partitions[(TOPIC, p)].leader)

        # Followers fetch from leaders across the bridge: a full ISR means replica fetching works.
        wait_for(lambda: all(len(i) == 3 for i in isrs()), timeout_s=30, what="full ISRs across namespaces")
        workload = Workload(state.bootstrap_servers, TOPIC, PARTITIONS, rate=150)
        workload.start()
        time.sleep(1.0)
        victim = leader(0)
        cluster.signal(victim, "KILL")
        out["killed_leader"] = victim
        wait_for(lambda: leader(0) not in (-1, victim), timeout_s=30, what="a new leader across namespaces")
        time.sleep(0.5)
        cluster.start(victim)
        cluster.wait_registered({victim})
        wait_for(lambda: all(len(i) == 3 for i in isrs()), timeout_s=60, what="the killed leader back in sync")
        writes = workload.stop()
        report = check(writes, workload.read_all())
        replicas = verify(view, TOPIC)
        out.update(writes_ok=report.writes.get(OK, 0), valid=report.valid, summary=report.summary(),
                   lost=len(report.lost), duplicates=len(report.duplicates),
                   replicas_identical=all(e["status"] == "OK" for e in replicas),
                   led=all(leader(p) >= 0 for p in range(PARTITIONS)))
        out["kafka_read_back"] = kafka_round_trip(state.kafka_bootstrap_servers, 20)
        view.close()
    finally:
        cluster.down(timeout_s=15)
        zk.stop()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
