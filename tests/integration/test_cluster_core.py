"""Cluster core against real ZooKeeper and real broker processes (SPEC S1, S7, S9, S10)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import (
    TEST_ZK_DIGEST,
    E,
    batch_of,
    broker_security_args,
    broker_stub,
    create_topic,
    fetch,
    leader_of,
    produce,
    read_values,
    wait_for,
)
from kazoo.client import KazooClient

from controller.assignment import assign_replicas
from proto import minikafka_pb2 as pb
from proto.record_batch import Record, encode_batch
from zk.data import ControllerEpochZNode, TopicPartitionStateZNode, TopicZNode

pytestmark = pytest.mark.integration


def test_s9_1_one_controller_and_failover_bumps_epoch(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3)
    view = c.zk_view()
    assert view["registered"] == [1, 2, 3]
    old, epoch = view["controller"], view["controller_epoch"]
    assert old in (1, 2, 3)
    c.signal(old, "KILL")
    # The session timeout is 2 s: a new controller well within a few multiples of it.
    new_view = c.wait_for_controller(timeout_s=15, other_than=old, min_epoch=epoch + 1)
    assert new_view["controller"] != old
    assert new_view["controller_epoch"] == epoch + 1
    assert old not in new_view["registered"]


def test_cluster_up_returns_once_every_broker_names_the_controller_and_every_broker(cluster) -> None:  # type: ignore[no-untyped-def]
    """``cluster up`` (and every test's cluster.start) returns a cluster that serves clients: each
    broker has had the controller's first UpdateMetadata. Before that a broker answers controller -1
    and lists only itself, and librdkafka's AdminClient, which looks the controller up again only on
    a broker state change, waited out a CreateTopics' whole 60 s request timeout once in CI. Asked
    at once, no poll: both listeners of every broker already name the controller and all three."""
    from confluent_kafka.admin import AdminClient

    from client.connection import Connection

    c = cluster.start(3)
    for b in c.state.brokers.values():
        with Connection(b.address) as conn:
            resp = conn.api.Metadata(pb.MetadataRequest(all_topics=False), timeout=5)
        assert resp.controller_id in (1, 2, 3), (b.broker_id, resp.controller_id)
        assert sorted(x.broker_id for x in resp.brokers) == [1, 2, 3], b.broker_id
    for address in c.state.kafka_bootstrap_servers.split(","):
        md = AdminClient({"bootstrap.servers": address}).list_topics(timeout=10)
        assert md.controller_id in (1, 2, 3) and sorted(md.brokers) == [1, 2, 3], address


def test_waiting_for_the_cluster_metadata_names_a_broker_that_does_not_answer(cluster) -> None:  # type: ignore[no-untyped-def]
    """The wait ``cluster up`` ends with asks every broker, each on its own connection: a broker
    that answers nothing (SIGSTOPped) is named in the error, and the wait passes once it answers."""
    from client.ops.local_cluster import ClusterError

    c = cluster.start(3)
    c.signal(2, "STOP")
    try:
        with pytest.raises(ClusterError, match="broker 2 did not learn the cluster's metadata"):
            c.wait_metadata_ready(timeout_s=3)
    finally:
        c.signal(2, "CONT")
    c.wait_metadata_ready(timeout_s=30)


def test_s1_s9_4_topic_creation_writes_s10_znodes_and_deletion_removes_them(cluster, zk_client: KazooClient) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3)
    view = cluster.view()
    res = create_topic(view, "orders", partitions=5, replication_factor=2)
    assert res.error_code == E.NONE, res.error_message
    data, _ = zk_client.get(TopicZNode.path("orders"))
    assignment = TopicZNode.decode("orders", data)
    assert assignment == assign_replicas([1, 2, 3], 5, 2)  # S1.1: partition i replica j on broker (i+j) mod n
    assert json.loads(data) == {"version": 1, "partitions": {str(p): r for p, r in assignment.items()}}
    epoch = ControllerEpochZNode.decode(zk_client.get("/controller_epoch")[0])
    for p, replicas in assignment.items():
        raw, _stat = zk_client.get(TopicPartitionStateZNode.path("orders", p))
        assert json.loads(raw) == {"controller_epoch": epoch, "leader": replicas[0], "version": 1,
                                   "leader_epoch": 0, "isr": replicas}
    wait_for(lambda: all(leader_of(view, "orders", p)[0] == assignment[p][0] for p in range(5)),
             what="metadata shows the preferred leaders")
    data_dirs = [Path(c.state.dir) / f"broker-{b}" / "data" for b in (1, 2, 3)]
    # A follower makes its log on LeaderAndIsr, which may reach it after Metadata shows the leader.
    wait_for(lambda: sum(1 for d in data_dirs for x in d.iterdir() if x.name.startswith("orders-")) == 10,
             timeout_s=30, what="every replica's log directory")

    conn = view.connection(view.bootstrap[0])
    resp = conn.api.DeleteTopics(pb.DeleteTopicsRequest(topic_names=["orders"], timeout_ms=15000), timeout=20)
    assert resp.responses[0].error_code == E.NONE, resp.responses[0].error_message
    assert zk_client.exists(TopicZNode.path("orders")) is None
    assert zk_client.exists("/admin/delete_topics/orders") is None
    wait_for(lambda: not any(x.name.startswith("orders-") for d in data_dirs for x in d.iterdir()),
             what="replica directories deleted")
    view.refresh(["orders"])
    assert view.topic_errors["orders"] == E.UNKNOWN_TOPIC_OR_PARTITION or \
        view.topic_errors["orders"] == E.LEADER_NOT_AVAILABLE


def test_s7_2_leader_kill_elects_isr_member_with_higher_epoch(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3, auto_create_topics_enable="false")
    view = cluster.view()
    assert create_topic(view, "t", partitions=1, replication_factor=3).error_code == E.NONE
    leader, epoch = wait_for(lambda: leader_of(view, "t", 0) if leader_of(view, "t", 0)[0] >= 0 else None)
    conn, _ = view.leader_connection("t", 0)
    old_address = conn.address
    assert produce(conn, "t", 0, batch_of(["a", "b", "c"])).error_code == E.NONE
    c.signal(leader, "KILL")
    new_leader, new_epoch = wait_for(
        lambda: (lambda le: le if le[0] not in (-1, leader) else None)(leader_of(view, "t", 0)),
        timeout_s=20, what="a new leader")
    assert new_epoch == epoch + 1
    assert new_leader in view.partitions[("t", 0)].isr
    new_conn, _ = view.leader_connection("t", 0)
    assert produce(new_conn, "t", 0, batch_of(["d"])).error_code == E.NONE
    assert read_values(new_conn, "t", 0) == ["a", "b", "c", "d"]
    # The old leader comes back as a follower: its address answers NOT_LEADER_OR_FOLLOWER.
    c.start(leader)
    c.wait_registered({leader})
    old = view.connection(old_address)
    wait_for(lambda: produce(old, "t", 0, batch_of(["x"])).error_code == E.NOT_LEADER_OR_FOLLOWER,
             what="old leader refuses as a follower")
    assert fetch(old, "t", 0, 0).error_code == E.NOT_LEADER_OR_FOLLOWER


def test_s7_4_stale_controller_epoch_and_old_leader_epoch_are_refused(cluster, zk_client: KazooClient) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(2)
    view = cluster.view()
    assert create_topic(view, "fenced", partitions=1, replication_factor=2).error_code == E.NONE
    leader, epoch = wait_for(lambda: leader_of(view, "fenced", 0) if leader_of(view, "fenced", 0)[0] >= 0 else None)
    conn, _ = view.leader_connection("fenced", 0)
    controller_epoch = ControllerEpochZNode.decode(zk_client.get("/controller_epoch")[0])
    controller = c.zk_view()["controller"]
    follower = 2 if leader == 1 else 1
    leader_epoch_now = zk_client.get(f"/brokers/ids/{leader}")[1].czxid
    # Speak as the controller itself (its certificate, its id), to the leader's control-plane listener:
    # the epochs, not the identity, must fence these (S7.4).
    channel, control = broker_stub(Path(c.state.secrets), controller,
                                   f"127.0.0.1:{c.broker(leader).internal_port}")

    def lai(ctrl_epoch: int, leader_epoch: int) -> pb.LeaderAndIsrRequest:
        # Both try to make the follower the leader: neither may take effect.
        return pb.LeaderAndIsrRequest(controller_id=controller, controller_epoch=ctrl_epoch,
                                      broker_epoch=leader_epoch_now,
                                      partition_states=[pb.LeaderAndIsrPartitionState(
                                          topic_name="fenced", partition_index=0, controller_epoch=ctrl_epoch,
                                          leader=follower, leader_epoch=leader_epoch, isr=[follower],
                                          zk_version=0, replicas=[1, 2])])

    try:
        stale = control.LeaderAndIsr(lai(controller_epoch - 1, epoch + 5), timeout=5)
        assert stale.error_code == E.STALE_CONTROLLER_EPOCH
        older = control.LeaderAndIsr(lai(controller_epoch, epoch - 1), timeout=5)
        assert older.error_code == E.NONE and older.partition_errors[0].error_code == E.FENCED_LEADER_EPOCH
        # Nothing changed: the leader still leads and takes writes.
        assert produce(conn, "fenced", 0, batch_of(["still leader"])).error_code == E.NONE
        assert leader_of(view, "fenced", 0) == (leader, epoch)
        um = control.UpdateMetadata(pb.UpdateMetadataRequest(controller_id=controller,
                                                             controller_epoch=controller_epoch - 1,
                                                             broker_epoch=leader_epoch_now), timeout=5)
        assert um.error_code == E.STALE_CONTROLLER_EPOCH
    finally:
        channel.close()


def test_sigterm_is_a_controlled_shutdown(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3)
    view = cluster.view()
    assert create_topic(view, "cs", partitions=3, replication_factor=3).error_code == E.NONE
    wait_for(lambda: all(leader_of(view, "cs", p)[0] >= 0 for p in range(3)))
    victim = view.partitions[("cs", 0)].leader
    c.signal(victim, "TERM")
    assert c.wait_for_exit(victim, timeout_s=30) == 0
    log = Path(c.broker(victim).log).read_text()
    assert "controlled shutdown succeeded" in log
    # Leadership moved before it exited: the others lead everything, with the victim out of the ISR.
    view.refresh(["cs"])
    for p in range(3):
        pl = view.partitions[("cs", p)]
        assert pl.leader not in (-1, victim)
        assert victim not in pl.isr
    assert (Path(c.state.dir) / f"broker-{victim}" / "data" / ".kafka_cleanshutdown").exists()


def test_produce_fetch_round_trip_and_bad_requests(cluster) -> None:  # type: ignore[no-untyped-def]
    cluster.start(1, message_max_bytes="2000", auto_create_topics_enable="false")
    view = cluster.view()
    assert create_topic(view, "rt", partitions=2, replication_factor=1).error_code == E.NONE
    wait_for(lambda: leader_of(view, "rt", 1)[0] >= 0)
    conn, _ = view.leader_connection("rt", 0)
    ok = produce(conn, "rt", 0, batch_of(["one", "two"], ts=1_000) + batch_of(["three"], ts=5_000), acks=1)
    assert ok.error_code == E.NONE and ok.base_offset == 0
    assert read_values(conn, "rt", 0) == ["one", "two", "three"]

    assert produce(conn, "nope", 0, batch_of(["x"])).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    assert produce(conn, "rt", 7, batch_of(["x"])).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    assert fetch(conn, "rt", 0, -1).error_code == E.OFFSET_OUT_OF_RANGE
    assert fetch(conn, "rt", 0, 99).error_code == E.OFFSET_OUT_OF_RANGE
    corrupt = bytearray(batch_of(["bad"]))
    corrupt[-1] ^= 0x55
    assert produce(conn, "rt", 0, bytes(corrupt)).error_code == E.CORRUPT_MESSAGE
    assert produce(conn, "rt", 0, b"\x00garbage").error_code == E.CORRUPT_MESSAGE
    big = encode_batch([Record(value=b"x" * 5000)])
    assert produce(conn, "rt", 0, big).error_code == E.MESSAGE_TOO_LARGE
    assert produce(conn, "rt", 0, batch_of(["x"]), acks=2).error_code == E.INVALID_REQUIRED_ACKS
    # Still serving, and nothing bad was appended.
    assert produce(conn, "rt", 0, batch_of(["four"]), acks=1).base_offset == 3
    assert read_values(conn, "rt", 0) == ["one", "two", "three", "four"]

    def list_offset(t: int) -> int:
        lo = conn.api.ListOffsets(pb.ListOffsetsRequest(replica_id=-1, topics=[pb.ListOffsetsTopic(
            name="rt", partitions=[pb.ListOffsetsPartition(partition=0, timestamp=t)])]), timeout=5)
        offset: int = lo.topics[0].partitions[0].offset
        return offset

    assert [list_offset(t) for t in (-2, -1, 4_000)] == [0, 4, 2]
    # One partition asked twice in one request is INVALID_REQUEST on every copy (Kafka's rule, S13.4).
    twice = conn.api.ListOffsets(pb.ListOffsetsRequest(replica_id=-1, topics=[pb.ListOffsetsTopic(
        name="rt", partitions=[pb.ListOffsetsPartition(partition=0, timestamp=t) for t in (-2, -1)])]), timeout=5)
    assert [p.error_code for p in twice.topics[0].partitions] == [E.INVALID_REQUEST] * 2


def test_a_second_broker_with_a_live_id_refuses_to_start(cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(1)
    cfg = tmp_path / "dup.properties"
    cfg.write_text(f"broker.id=1\nzookeeper.connect={cluster.zk_connect}\n"
                   f"log.dirs={tmp_path / 'dup-data'}\nzookeeper.session.timeout.ms=2000\n")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "client.cli", "broker", "--config", str(cfg),
                           *broker_security_args(Path(c.state.secrets), 1, 0, 0, TEST_ZK_DIGEST)], cwd=root,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 1
    assert "broker.id 1 is registered by another live broker" in proc.stderr
    assert c.zk_view()["registered"] == [1]


def test_bad_broker_config_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "client.cli", "broker", "--set", "broker.id=1",
                           "--set", "zookeeper.connect=127.0.0.1:1", "--set", "replica.lag.time.max.ms=soon"],
                          cwd=root, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 2
    assert "replica.lag.time.max.ms" in proc.stderr and "Traceback" not in proc.stderr


def test_cluster_down_stops_a_broker_that_another_process_restarted(cluster) -> None:  # type: ignore[no-untyped-def]
    """`cluster start N` from another shell (or a chaos run) gives broker N a pid only the state
    file knows; `cluster down` (and so the test fixture) must stop it too (brokers leaked before)."""
    from client.ops.local_cluster import ClusterState, LocalCluster, pid_alive

    c = cluster.start(1)
    other_shell = LocalCluster(c.dir)
    other_shell.signal(1, "KILL")
    assert other_shell.wait_for_exit(1, timeout_s=30) is not None
    other_shell.start(1)
    new_pid = ClusterState.load(c.dir).brokers[1].pid
    assert pid_alive(new_pid)
    c.down(timeout_s=15)
    deadline = time.monotonic() + 30
    while pid_alive(new_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(new_pid)
