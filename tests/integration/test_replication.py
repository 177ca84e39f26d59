"""Replication with real broker processes (SPEC S3-S6): acks=all under a leader kill,
min.insync.replicas, ISR shrink and expand, identical replicas."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from helpers import E, batch_of, create_topic, isr_of, leader_of, produce, read_values, wait_for

from broker.log.config import LogConfig
from broker.log.log import Log
from client.producer import Producer
from proto import errors
from proto import minikafka_pb2 as pb

pytestmark = pytest.mark.integration


def _list_latest(conn, topic: str) -> int:  # type: ignore[no-untyped-def]
    r = conn.api.ListOffsets(pb.ListOffsetsRequest(replica_id=-1, topics=[pb.ListOffsetsTopic(
        name=topic, partitions=[pb.ListOffsetsPartition(partition=0, timestamp=-1)])]), timeout=5)
    pr = r.topics[0].partitions[0]
    assert pr.error_code == E.NONE, E.Name(pr.error_code)
    return int(pr.offset)


def test_kill_leader_under_acks_all_load_loses_nothing(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3)
    view = cluster.view()
    res = create_topic(view, "load", partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"})
    assert res.error_code == E.NONE
    leader, epoch = wait_for(lambda: (lambda le: le if le[0] >= 0 else None)(leader_of(view, "load", 0)))
    futures = []
    stop = threading.Event()

    def load() -> None:
        with Producer(c.state.bootstrap_servers, acks="all", linger_ms=2, batch_size=4096, request_timeout_ms=3000,
                      delivery_timeout_ms=60000, retry_backoff_ms=50) as p:
            deadline = time.monotonic() + 30
            i = 0
            while not stop.is_set() and time.monotonic() < deadline and i < 200_000:
                futures.append((f"v{i}", p.send("load", f"v{i}".encode())))
                i += 1
                if i % 200 == 0:
                    time.sleep(0.01)

    t = threading.Thread(target=load)
    t.start()
    wait_for(lambda: len(futures) > 3000, timeout_s=20)
    c.signal(leader, "KILL")
    wait_for(lambda: leader_of(view, "load", 0)[0] not in (-1, leader), timeout_s=20, what="a new leader")
    wait_for(lambda: len(futures) > 12000, timeout_s=30, what="load continuing on the new leader")
    stop.set()
    t.join(60)
    assert not t.is_alive()

    acked: dict[str, int] = {}
    failed = 0
    for value, f in futures:
        try:
            acked[value] = f.result(timeout=60).offset
        except errors.KafkaError:
            failed += 1
    assert len(acked) > 10000
    conn, _ = view.leader_connection("load", 0)
    values = read_values(conn, "load", 0)
    positions = {v: i for i, v in enumerate(values)}
    assert len(positions) == len(values), "a value was written twice (idempotence failed)"
    for value, offset in acked.items():
        assert positions.get(value) == offset, f"acknowledged {value} at {offset} not read back there"
    sent_order = [v for v, _f in futures if v in positions]
    assert sent_order == sorted(sent_order, key=positions.__getitem__), "records of the partition were reordered"
    assert leader_of(view, "load", 0)[1] == epoch + 1

    # The old leader returns, catches up; every replica's log is identical up to the HW.
    c.start(leader)
    wait_for(lambda: set(isr_of(view, "load", 0)) == {1, 2, 3}, timeout_s=30, what="the old leader back in sync")
    conn, _ = view.leader_connection("load", 0)
    hw = _list_latest(conn, "load")
    assert hw >= len(acked)
    c.down(timeout_s=20)
    logs = [Log.open(Path(c.state.dir) / f"broker-{b}" / "data" / "load-0", "load", 0, LogConfig(), now_ms=0,
                     clean_shutdown=True) for b in (1, 2, 3)]
    contents = [lg.read(0, 1 << 30, max_offset=hw) for lg in logs]
    assert contents[0] and contents[0] == contents[1] == contents[2]
    for lg in logs:
        lg.close()


def test_s5_2_min_insync_replicas_refuses_acks_all_when_followers_are_down(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3)
    view = cluster.view()
    assert create_topic(view, "mir", replication_factor=3, configs={"min.insync.replicas": "2"}).error_code == E.NONE
    leader, _ = wait_for(lambda: (lambda le: le if le[0] >= 0 else None)(leader_of(view, "mir", 0)))
    conn, _ = view.leader_connection("mir", 0)
    assert produce(conn, "mir", 0, batch_of(["before"])).error_code == E.NONE
    followers = [b for b in (1, 2, 3) if b != leader]
    for b in followers:
        c.signal(b, "KILL")
    wait_for(lambda: isr_of(view, "mir", 0) == (leader,), timeout_s=20, what="the ISR to shrink to the leader")
    hw = _list_latest(conn, "mir")
    r = produce(conn, "mir", 0, batch_of(["refused"]))
    assert r.error_code == E.NOT_ENOUGH_REPLICAS
    assert _list_latest(conn, "mir") == hw  # nothing appended, HW unchanged
    assert produce(conn, "mir", 0, batch_of(["acks=1 still works"]), acks=1).error_code == E.NONE
    for b in followers:
        c.start(b)
    wait_for(lambda: len(isr_of(view, "mir", 0)) >= 2, timeout_s=30, what="followers back in the ISR")
    assert produce(conn, "mir", 0, batch_of(["after"])).error_code == E.NONE
    assert read_values(conn, "mir", 0) == ["before", "acks=1 still works", "after"]


def test_s4_paused_follower_leaves_the_isr_and_rejoins(cluster) -> None:  # type: ignore[no-untyped-def]
    # Session timeout above the lag limit: the leader, not the controller, must notice.
    c = cluster.start(3, zookeeper_session_timeout_ms="20000", replica_lag_time_max_ms="1500")
    view = cluster.view()
    assert create_topic(view, "lag", replication_factor=3).error_code == E.NONE
    leader, _ = wait_for(lambda: (lambda le: le if le[0] >= 0 else None)(leader_of(view, "lag", 0)))
    # Not the controller: a paused controller would also pause the metadata updates we watch.
    controller = c.zk_view()["controller"]
    follower = next(b for b in (1, 2, 3) if b not in (leader, controller))
    conn, _ = view.leader_connection("lag", 0)
    c.signal(follower, "STOP")
    try:
        assert produce(conn, "lag", 0, batch_of(["a"]), acks=1).error_code == E.NONE
        wait_for(lambda: follower not in isr_of(view, "lag", 0), timeout_s=15, what="the ISR shrink (S4.2)")
        assert follower in c.zk_view()["registered"]  # still alive as far as ZooKeeper knows
        # With the follower out of the ISR, acks=all completes without it.
        assert produce(conn, "lag", 0, batch_of(["b"])).error_code == E.NONE
    finally:
        c.signal(follower, "CONT")
    wait_for(lambda: follower in isr_of(view, "lag", 0), timeout_s=15, what="the ISR expand (S4.3)")


def test_s9_6_reassignment_under_load_loses_nothing(cluster, zk_client) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3)
    view = cluster.view()
    assert create_topic(view, "move", partitions=1, replication_factor=2,
                        configs={"min.insync.replicas": "2"}).error_code == E.NONE
    wait_for(lambda: leader_of(view, "move", 0)[0] >= 0)
    assert view.partitions[("move", 0)].replicas == (1, 2)
    futures = []
    stop = threading.Event()

    def load() -> None:
        with Producer(c.state.bootstrap_servers, acks="all", linger_ms=2, request_timeout_ms=3000) as p:
            i = 0
            while not stop.is_set() and i < 100_000:
                futures.append((f"v{i}", p.send("move", f"v{i}".encode())))
                i += 1
                if i % 100 == 0:
                    time.sleep(0.01)

    t = threading.Thread(target=load)
    t.start()
    try:
        wait_for(lambda: len(futures) > 2000, timeout_s=20)
        zk_client.create("/admin/reassign_partitions",
                         b'{"version":1,"partitions":[{"topic":"move","partition":0,"replicas":[2,3]}]}')
        wait_for(lambda: zk_client.exists("/admin/reassign_partitions") is None, timeout_s=30,
                 what="the reassignment to complete")
        wait_for(lambda: len(futures) > 8000, timeout_s=30, what="load continuing after the move")
    finally:
        stop.set()
        t.join(60)
    view.refresh(["move"])
    pl = view.partitions[("move", 0)]
    assert pl.replicas == (2, 3) and pl.leader in (2, 3) and set(pl.isr) <= {2, 3}
    acked = {v: f.result(timeout=60).offset for v, f in futures}
    conn, _ = view.leader_connection("move", 0)
    values = read_values(conn, "move", 0)
    assert len(values) == len(set(values))
    positions = {v: i for i, v in enumerate(values)}
    assert all(positions.get(v) == off for v, off in acked.items())
    wait_for(lambda: not (Path(c.state.dir) / "broker-1" / "data" / "move-0").exists(), timeout_s=20,
             what="the dropped replica's log deleted")
    assert (Path(c.state.dir) / "broker-3" / "data" / "move-0").exists()
