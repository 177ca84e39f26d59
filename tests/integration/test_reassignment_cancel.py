"""KIP-455 reassignments as Kafka 2.8 in ZooKeeper mode (issue 30), against real brokers: a running
reassignment is listed with its exact adding and removing replicas, another partition's is taken
while it runs, and a cancel reverts it to the original replicas - through the project's client
(gRPC), the Kafka wire (raw AlterPartitionReassignments / ListPartitionReassignments frames) and
``minikafka reassign-partitions --cancel``.

The added replica's broker is paused (SIGSTOP) so that it cannot catch up: the reassignment stays
in flight as long as the test needs it to. Its ZooKeeper session outlives the pause (a long
session timeout), so the controller keeps it live."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import E, batch_of, produce, wait_for
from kazoo.client import KazooClient

from client.admin import AdminClient
from client.connection import ClusterView
from client.ops.local_cluster import LocalCluster
from client.structs import TopicPartition
from proto import minikafka_pb2 as pb

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parent.parent.parent


def kafka_call(sock: socket.socket, api_key: int, version: int, values: dict[str, Any]) -> Any:
    """One request on a raw Kafka connection and its decoded response (bounded reads)."""
    from kafka_frames import frame, read_response

    body = frame(api_key, version, values)
    sock.sendall(struct.pack(">i", len(body)) + body)
    data = b""
    for _ in range(100_000):
        want = 4 if len(data) < 4 else 4 + struct.unpack(">i", data[:4])[0]
        if len(data) >= want and len(data) >= 4:
            break
        chunk = sock.recv(want - len(data))
        assert chunk, "the broker closed the connection"
        data += chunk
    return read_response(data, api_key, version)[1]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "client.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


class Moving:
    """A 3-broker cluster: ``mv`` (one partition on brokers a, b) moved to [a, p] with p paused."""

    def __init__(self, c: LocalCluster, view: ClusterView, zk: KazooClient) -> None:
        self.c, self.view, self.zk = c, view, zk
        assert c.state is not None
        self.admin = AdminClient(c.state.bootstrap_servers, security=c.state.client_security())
        wait_for(lambda: (view.refresh([]) and len(view.brokers) == 3 and view.controller_id >= 0) or None,
                 timeout_s=30, what="every broker and the controller in the metadata")
        self.controller = view.controller_id
        # The paused broker is not the controller (a paused controller would stall everything).
        self.p = max(b for b in view.brokers if b != self.controller)
        self.a, self.b = sorted(b for b in view.brokers if b != self.p)
        conn = view.connection(view.brokers[self.controller])
        resp = conn.api.CreateTopics(pb.CreateTopicsRequest(timeout_ms=10_000, topics=[
            pb.CreatableTopic(name="mv", num_partitions=-1, replication_factor=-1,
                              assignments=[pb.ReplicaAssignment(partition=0, broker_ids=[self.a, self.b])]),
            pb.CreatableTopic(name="mv2", num_partitions=-1, replication_factor=-1,
                              assignments=[pb.ReplicaAssignment(partition=0, broker_ids=[self.a])])]), timeout=20)
        assert all(t.error_code == E.NONE for t in resp.topics), resp
        wait_for(lambda: (self.replicas("mv") == (self.a, self.b) and self.isr("mv") == {self.a, self.b}) or None,
                 timeout_s=30, what="mv's leader and ISR")
        wait_for(lambda: self.replicas("mv2") == (self.a,) or None, timeout_s=30, what="mv2's leader")
        lconn, _ = view.leader_connection("mv", 0)
        assert produce(lconn, "mv", 0, batch_of([f"v{i}" for i in range(50)])).error_code == E.NONE

    def replicas(self, topic: str) -> tuple[int, ...] | None:
        self.view.refresh([topic])
        pl = self.view.partitions.get((topic, 0))
        return pl.replicas if pl is not None and pl.leader >= 0 else None

    def isr(self, topic: str) -> set[int]:
        self.view.refresh([topic])
        pl = self.view.partitions.get((topic, 0))
        return set(pl.isr) if pl is not None else set()

    def start(self) -> None:
        """mv-0 from [a, b] to [a, p]: RS = [a, p, b], adding [p], removing [b]."""
        assert self.admin.alter_partition_reassignments({("mv", 0): [self.a, self.p]}) == {("mv", 0): (E.NONE, "")}
        wait_for(lambda: self.replicas("mv") == (self.a, self.p, self.b) or None, timeout_s=30,
                 what="the reassignment to start")

    def topic_znode(self) -> dict[str, Any]:
        data, _ = self.zk.get("/brokers/topics/mv")
        return dict(json.loads(data))

    def reverted(self) -> None:
        wait_for(lambda: self.replicas("mv") == (self.a, self.b) or None, timeout_s=30,
                 what="the original replicas back")
        assert self.topic_znode() == {"version": 1, "partitions": {"0": [self.a, self.b]}}
        assert TopicPartition("mv", 0) not in self.admin.list_partition_reassignments()
        assert self.isr("mv") == {self.a, self.b}


@pytest.fixture
def moving(cluster, zk_client: KazooClient) -> Iterator[Moving]:  # type: ignore[no-untyped-def]
    # A session that outlives the pause: the paused broker stays live for the controller.
    c = cluster.start(3, zookeeper_session_timeout_ms="60000")
    m = Moving(c, cluster.view(), zk_client)
    c.signal(m.p, "STOP")
    try:
        yield m
    finally:
        c.signal(m.p, "CONT")
        m.admin.close()


def test_cancel_reverts_a_running_reassignment_and_another_partition_moves_meanwhile(moving: Moving) -> None:
    m = moving
    m.start()
    # The original set is kept in the topic znode (Kafka 2.4+'s version 2 fields).
    assert m.topic_znode() == {"version": 2, "partitions": {"0": [m.a, m.p, m.b]},
                               "adding_replicas": {"0": [m.p]}, "removing_replicas": {"0": [m.b]}}
    listed = m.admin.list_partition_reassignments()[TopicPartition("mv", 0)]
    assert (list(listed.current_replicas), list(listed.replicas)) == ([m.a, m.p, m.b], [m.a, m.p])
    assert (list(listed.adding_replicas), list(listed.removing_replicas)) == ([m.p], [m.b])
    # A second reassignment, of another partition, is taken while the first runs, and completes.
    assert m.admin.alter_partition_reassignments({("mv2", 0): [m.b]}) == {("mv2", 0): (E.NONE, "")}
    wait_for(lambda: m.replicas("mv2") == (m.b,) or None, timeout_s=30, what="mv2 moved to b")
    wait_for(lambda: TopicPartition("mv2", 0) not in m.admin.list_partition_reassignments() or None,
             timeout_s=30, what="mv2's reassignment to finish")
    assert TopicPartition("mv", 0) in m.admin.list_partition_reassignments()  # still waiting for p
    # A cancel of one not moving, and of the running one.
    assert m.admin.cancel_partition_reassignments([TopicPartition("mv2", 0), TopicPartition("mv", 0)]) == {
        TopicPartition("mv2", 0): "NO_REASSIGNMENT_IN_PROGRESS", TopicPartition("mv", 0): "NONE"}
    m.reverted()


def test_cancel_and_list_on_the_kafka_wire_and_with_the_cli(moving: Moving, tmp_path: Path) -> None:
    m = moving
    state = m.c.state
    assert state is not None
    host, port = state.brokers[m.controller].kafka_address.rsplit(":", 1)
    m.start()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        listed = kafka_call(sock, 46, 0, {"timeout": 10_000, "topics": [{"name": "mv", "partition_indexes": [0]}]})
        assert listed.error_code == 0
        part = listed.topics[0].partitions[0]
        assert (list(part.replicas), list(part.adding_replicas), list(part.removing_replicas)) == (
            [m.a, m.p, m.b], [m.p], [m.b])
        answer = kafka_call(sock, 45, 0, {"timeout": 10_000, "topics": [{"name": "mv", "partitions": [
            {"partition_index": 0, "replicas": None}]}]})
        assert answer.error_code == 0 and answer.responses[0].partitions[0].error_code == 0, answer
    m.reverted()
    # Not the controller: NOT_CONTROLLER (41), as Kafka 2.8 answers (its clients go to the controller).
    other = state.brokers[m.a if m.a != m.controller else m.b].kafka_address.rsplit(":", 1)
    with socket.create_connection((other[0], int(other[1])), timeout=30) as sock:
        answer = kafka_call(sock, 45, 0, {"timeout": 10_000, "topics": [{"name": "mv", "partitions": [
            {"partition_index": 0, "replicas": [m.b, m.a]}]}]})
        assert answer.error_code == 41 and not answer.responses, answer
    # kafka-reassign-partitions --cancel with the file that started it.
    m.start()
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "mv", "partition": 0,
                                                              "replicas": [m.a, m.p]}]}))
    common = ("--bootstrap-server", state.bootstrap_servers)
    r = cli("reassign-partitions", "--verify", *common)
    assert r.returncode == 0 and "Reassignment in progress." in r.stdout, r.stderr
    # --verify with the file: per partition, as kafka-reassign-partitions (exit 1 until complete).
    r = cli("reassign-partitions", "--verify", "--reassignment-json-file", str(plan), *common)
    assert r.returncode == 1 and "Reassignment of partition mv-0 is still in progress." in r.stdout, r
    r = cli("reassign-partitions", "--execute", "--reassignment-json-file", str(plan), *common)
    assert r.returncode == 1 and "existing partition assignment" in r.stderr  # Kafka's refusal without --additional
    r = cli("reassign-partitions", "--cancel", "--reassignment-json-file", str(plan), *common)
    assert r.returncode == 0 and "Successfully cancelled reassignment of partitions: mv-0" in r.stdout, r.stderr
    m.reverted()
    r = cli("reassign-partitions", "--cancel", "--reassignment-json-file", str(plan), *common)
    assert r.returncode == 1 and "mv-0: NO_REASSIGNMENT_IN_PROGRESS" in r.stdout, r.stdout + r.stderr
    r = cli("reassign-partitions", "--verify", "--reassignment-json-file", str(plan), *common)
    assert r.returncode == 1 and "There is no active reassignment of partition mv-0, but replica set is" in r.stdout, r
    # Refused per partition by the controller, with Kafka's reason: nothing started.
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "mv", "partition": 0, "replicas": [m.a, 7]}]}))
    r = cli("reassign-partitions", "--execute", "--reassignment-json-file", str(plan), *common)
    assert r.returncode == 1 and "mv-0: brokers [7] are not live" in r.stderr, r.stderr
    assert not m.admin.list_partition_reassignments()
