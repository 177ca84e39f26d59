"""Topic admin validation, topic configs, preferred replica election and the automatic
rebalance, and ZooKeeper session expiry (SPEC S1.3, S9.4-S9.6, S10)."""

from __future__ import annotations

import json

import pytest
from helpers import E, batch_of, create_topic, isr_of, leader_of, produce, wait_for
from kazoo.client import KazooClient

from proto import minikafka_pb2 as pb
from zk.data import PreferredReplicaElectionZNode, TopicPartitionId

pytestmark = pytest.mark.integration


def test_create_topics_validation_uses_kafkas_error_codes(cluster) -> None:  # type: ignore[no-untyped-def]
    cluster.start(2)
    view = cluster.view()
    assert create_topic(view, "bad/name").error_code == E.INVALID_TOPIC_EXCEPTION
    assert create_topic(view, "x" * 250).error_code == E.INVALID_TOPIC_EXCEPTION
    # -1 is the broker default (Kafka's CreateTopics); 0 is an error, never silently the default (S13).
    assert create_topic(view, "p", partitions=0, replication_factor=1).error_code == E.INVALID_PARTITIONS
    assert create_topic(view, "p", partitions=1, replication_factor=0).error_code == E.INVALID_REPLICATION_FACTOR
    assert create_topic(view, "p", partitions=-1, replication_factor=-1).error_code == E.NONE
    assert create_topic(view, "p", partitions=1).error_code == E.TOPIC_ALREADY_EXISTS
    res = create_topic(view, "rf", partitions=1, replication_factor=3)
    assert res.error_code == E.INVALID_REPLICATION_FACTOR and "live brokers" in res.error_message  # S1.3
    assert create_topic(view, "neg", partitions=-5, replication_factor=1).error_code == E.INVALID_PARTITIONS
    assert create_topic(view, "cfg", configs={"no.such": "1"}).error_code == E.INVALID_CONFIG
    assert create_topic(view, "cfg", configs={"retention.ms": "soon"}).error_code == E.INVALID_CONFIG


def test_topic_config_overrides_are_stored_and_enforced(cluster, zk_client: KazooClient) -> None:  # type: ignore[no-untyped-def]
    cluster.start(1)
    view = cluster.view()
    res = create_topic(view, "small", configs={"max.message.bytes": "300", "segment.bytes": "4096"})
    assert res.error_code == E.NONE, res.error_message
    assert json.loads(zk_client.get("/config/topics/small")[0]) == {
        "version": 1, "config": {"max.message.bytes": "300", "segment.bytes": "4096"}}
    wait_for(lambda: leader_of(view, "small", 0)[0] >= 0)
    conn, _ = view.leader_connection("small", 0)
    assert produce(conn, "small", 0, batch_of(["x" * 400])).error_code == E.MESSAGE_TOO_LARGE
    assert produce(conn, "small", 0, batch_of(["ok"])).error_code == E.NONE
    desc = conn.api.DescribeConfigs(pb.DescribeConfigsRequest(resources=[pb.DescribeConfigsResource(
        resource_type=pb.ConfigResourceType.TOPIC, resource_name="small")]), timeout=5)
    entries = {c.name: c for c in desc.results[0].configs}
    assert entries["max.message.bytes"].value == "300" and not entries["max.message.bytes"].is_default
    assert entries["retention.ms"].is_default
    alter = conn.api.AlterConfigs(pb.AlterConfigsRequest(resources=[pb.AlterConfigsResource(
        resource_type=pb.ConfigResourceType.TOPIC, resource_name="small",
        configs=[pb.AlterableConfig(name="max.message.bytes", value="1000")])]), timeout=5)
    assert alter.responses[0].error_code == E.NONE
    wait_for(lambda: produce(conn, "small", 0, batch_of(["x" * 400])).error_code == E.NONE,
             what="the altered config to reach the broker")


def test_s9_6_preferred_replica_election_via_znode(cluster, zk_client: KazooClient) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(2)
    view = cluster.view()
    assert create_topic(view, "pref", partitions=1, replication_factor=2).error_code == E.NONE
    preferred, epoch = wait_for(lambda: (lambda le: le if le[0] >= 0 else None)(leader_of(view, "pref", 0)))
    other = 2 if preferred == 1 else 1
    # Bounce the preferred leader: the other replica takes over.
    c.signal(preferred, "KILL")
    wait_for(lambda: leader_of(view, "pref", 0)[0] == other, timeout_s=20, what="failover")
    c.start(preferred)
    wait_for(lambda: preferred in isr_of(view, "pref", 0), timeout_s=20, what="preferred replica back in ISR")
    zk_client.create(PreferredReplicaElectionZNode.PATH,
                     PreferredReplicaElectionZNode.encode([TopicPartitionId("pref", 0)]))
    _leader, new_epoch = wait_for(lambda: (lambda le: le if le[0] == preferred else None)(leader_of(view, "pref", 0)),
                                 timeout_s=20, what="preferred replica leads again")
    assert new_epoch >= epoch + 2
    wait_for(lambda: zk_client.exists(PreferredReplicaElectionZNode.PATH) is None,
             what="the request znode removed when done")


def test_automatic_leader_rebalance(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(2, leader_imbalance_check_interval_seconds="1")
    view = cluster.view()
    assert create_topic(view, "auto", partitions=2, replication_factor=2).error_code == E.NONE
    wait_for(lambda: all(leader_of(view, "auto", p)[0] >= 0 for p in range(2)))
    preferred = {p: view.partitions[("auto", p)].replicas[0] for p in range(2)}
    c.signal(1, "KILL")
    wait_for(lambda: all(leader_of(view, "auto", p)[0] == 2 for p in range(2)), timeout_s=20)
    c.start(1)
    wait_for(lambda: all(leader_of(view, "auto", p)[0] == preferred[p] for p in range(2)), timeout_s=30,
             what="the automatic rebalance to restore preferred leaders")


def test_session_expiry_re_registers_and_rejoins(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(2)
    view = cluster.view()
    assert create_topic(view, "exp", partitions=1, replication_factor=2).error_code == E.NONE
    wait_for(lambda: leader_of(view, "exp", 0)[0] >= 0)
    follower = next(r for r in view.partitions[("exp", 0)].replicas if r != view.partitions[("exp", 0)].leader)
    c.signal(follower, "STOP")
    wait_for(lambda: follower not in c.zk_view()["registered"], timeout_s=20, what="session expiry")
    c.signal(follower, "CONT")
    wait_for(lambda: follower in c.zk_view()["registered"], timeout_s=20, what="re-registration")
    conn, _ = view.leader_connection("exp", 0)
    assert produce(conn, "exp", 0, batch_of(["after"])).error_code == E.NONE
    wait_for(lambda: follower in isr_of(view, "exp", 0), timeout_s=20, what="the follower back in the ISR")


def test_cli_leader_election_refuses_unknown_names_and_reports_failures(cluster) -> None:  # type: ignore[no-untyped-def]
    """Issue 33 item 1: a typo in --topic printed "Successfully completed leader election for 5
    partitions", exit 0, and moved the leaders of *other* topics (an empty partition list is the
    API's "every partition"). Now it is refused and nothing moves; failures exit 1."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    c = cluster.start(3)
    view = cluster.view()
    assert create_topic(view, "elect", partitions=2, replication_factor=3).error_code == E.NONE
    wait_for(lambda: all(len(isr_of(view, "elect", p)) == 3 for p in range(2)), what="full ISRs")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "client.cli", "leader-election",
                               "--bootstrap-server", c.state.bootstrap_servers, *args], cwd=root, capture_output=True,
                              text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(root)})

    # Move a leader away from its preferred replica, so that a cluster-wide election would move it back.
    preferred = [leader_of(view, "elect", p)[0] for p in range(2)]
    c.signal(preferred[0], "KILL")
    wait_for(lambda: leader_of(view, "elect", 0)[0] not in (-1, preferred[0]), what="a new leader of elect-0")
    c.start(preferred[0])
    wait_for(lambda: preferred[0] in isr_of(view, "elect", 0), timeout_s=30, what="the preferred replica back")
    moved = leader_of(view, "elect", 0)[0]

    typo = cli("--topic", "nosuch-topic")
    assert typo.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in typo.stderr + typo.stdout, typo
    bad_partition = cli("--topic", "elect", "--partition", "7")
    assert bad_partition.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in bad_partition.stderr + bad_partition.stdout
    assert leader_of(view, "elect", 0)[0] == moved          # nothing moved
    ok = cli("--topic", "elect", "--partition", "0")
    assert ok.returncode == 0, ok
    wait_for(lambda: leader_of(view, "elect", 0)[0] == preferred[0], what="the preferred leader elected")
