"""Issue 34, the group settings clients rely on, live: group.initial.rebalance.delay.ms (Kafka's
InitialDelayedJoin) gives consumers of a new group started together one rebalance, and
offsets.retention.minutes removes the committed offsets of an Empty group (from ZooKeeper, by its
coordinator under the group's lease) while those of a group with members stay. librdkafka
(confluent-kafka) on the Kafka listener: no code of ours on the client side."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from helpers import wait_for

from zk.data import ConsumersZNode

pytestmark = pytest.mark.integration
confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

PARTITIONS = 6


def bootstrap_of(cluster: Any) -> str:
    c = cluster.cluster
    assert c is not None and c.state is not None
    servers: str = c.state.kafka_bootstrap_servers
    assert servers, "the brokers have Kafka listeners"
    return servers


def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                 operation_timeout=20).values():
        f.result(timeout=60)

    def ready() -> bool | None:
        t = admin.list_topics(topic, timeout=10).topics.get(topic)
        return (t is not None and t.error is None and len(t.partitions) == partitions
                and all(p.leader >= 0 for p in t.partitions.values())) or None

    wait_for(ready, timeout_s=30, what=f"{topic}'s partitions led")


class Members:
    """Consumers of one group, counting the assignments each is given (one per rebalance it takes
    part in: the default assignors are eager, and librdkafka calls on_assign once per generation)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.consumers: dict[str, Any] = {}
        self.assigned: dict[str, list[list[int]]] = {}

    def start(self, name: str) -> None:
        c = confluent_kafka.Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                                      "session.timeout.ms": 10000, "heartbeat.interval.ms": 500,
                                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self.assigned[name] = []

        def on_assign(_c: Any, parts: list[Any]) -> None:
            self.assigned[name].append(sorted(p.partition for p in parts))

        c.subscribe([self.topic], on_assign=on_assign)
        self.consumers[name] = c

    def poll_until(self, cond: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not cond():
            assert time.monotonic() < deadline, f"{what} within {timeout_s}s (assigned {self.assigned})"
            self.poll_round()

    def poll_round(self) -> None:
        for c in self.consumers.values():
            c.poll(0.05)

    def all_assigned(self) -> bool:
        """Every member holds some partitions and together they hold all of them (one generation)."""
        latest = [a[-1] for a in self.assigned.values() if a]
        return len(latest) == len(self.consumers) and all(latest) and \
            sorted(p for parts in latest for p in parts) == list(range(PARTITIONS))

    def close(self) -> None:
        for c in self.consumers.values():
            c.close()


def test_members_started_together_get_one_rebalance(cluster: Any) -> None:
    """Kafka's InitialDelayedJoin: a new group's first join waits group.initial.rebalance.delay.ms
    (extended by each member that joins meanwhile), so three consumers started together - or the
    second and third a moment after the first - share the first generation: each is assigned once.

    Without the delay, members started in the same instant often still share one generation (a join
    also waits for the member ids handed out with MEMBER_ID_REQUIRED, as Kafka's hasAllMembersJoined;
    measured: 1 run in 4 had two); the staggered half is the one the delay decides - without it the
    first member always got a generation to itself (3 runs of 3 with the delay at 0, and the test
    below)."""
    cluster.start(1, group_initial_rebalance_delay_ms="6000")
    bootstrap = bootstrap_of(cluster)
    create_topic(bootstrap, "delayed")

    together = Members(bootstrap, "together", "delayed")
    try:
        for name in ("a", "b", "c"):
            together.start(name)
        together.poll_until(together.all_assigned, "the three members assigned")
        for _ in range(20):  # a further second of polling: no second rebalance comes
            together.poll_round()
        assert {n: len(a) for n, a in together.assigned.items()} == {"a": 1, "b": 1, "c": 1}, together.assigned
    finally:
        together.close()

    # The first member alone for a moment (well within the delay), then two more: still one
    # generation. Without the delay the first would get one to itself (the test below).
    staggered = Members(bootstrap, "staggered", "delayed")
    try:
        staggered.start("a")
        for _ in range(10):
            staggered.poll_round()
        staggered.start("b")
        staggered.start("c")
        staggered.poll_until(staggered.all_assigned, "the three members assigned")
        for _ in range(20):
            staggered.poll_round()
        assert {n: len(a) for n, a in staggered.assigned.items()} == {"a": 1, "b": 1, "c": 1}, staggered.assigned
    finally:
        staggered.close()


def test_without_the_delay_the_first_member_rebalances_again(cluster: Any) -> None:
    """The control (the test brokers' group.initial.rebalance.delay.ms=0, as Kafka's test brokers):
    the first member gets a generation to itself and takes part in another when the others join -
    the extra rebalance the delay exists to avoid, seen by the counting above."""
    cluster.start(1)
    bootstrap = bootstrap_of(cluster)
    create_topic(bootstrap, "undelayed")
    members = Members(bootstrap, "undelayed-group", "undelayed")
    try:
        members.start("a")
        members.poll_until(lambda: bool(members.assigned["a"]), "the first member assigned alone")
        assert members.assigned["a"] == [list(range(PARTITIONS))]
        members.start("b")
        members.start("c")
        members.poll_until(members.all_assigned, "the three members assigned")
        assert len(members.assigned["a"]) >= 2, members.assigned
    finally:
        members.close()


def test_committed_offsets_of_an_empty_group_expire(cluster: Any, zk_client: Any) -> None:
    """offsets.retention.minutes (Kafka's smallest, 1) with a short offsets.retention.check.interval.ms:
    the offsets of a group left Empty are removed from ZooKeeper once the retention has passed since
    it became Empty, and an OffsetFetch then finds none; a group with a member keeps its offsets."""
    cluster.start(1, offsets_retention_minutes="1", offsets_retention_check_interval_ms="500")
    bootstrap = bootstrap_of(cluster)
    topic = "expiring"
    create_topic(bootstrap, topic, partitions=2)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    del producer

    def consume_and_commit(group: str) -> Any:
        c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                      "session.timeout.ms": 10000, "heartbeat.interval.ms": 500,
                                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 60
        while got < 20:
            assert time.monotonic() < deadline, f"{group} read {got} of 20 records"
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got += 1
        c.commit(asynchronous=False)
        return c

    def offsets_in_zk(group: str) -> list[str]:
        path = ConsumersZNode.offsets_topic(group, topic)
        return sorted(zk_client.get_children(path)) if zk_client.exists(path) else []

    gone = consume_and_commit("leaving")
    gone.close()  # LeaveGroup: the group is Empty from now on
    staying = consume_and_commit("staying")
    try:
        assert offsets_in_zk("leaving") == ["0", "1"] and offsets_in_zk("staying") == ["0", "1"]
        wait_for(lambda: not offsets_in_zk("leaving"), timeout_s=180, interval_s=0.5,
                 what="the Empty group's offsets expired")
        # OffsetFetch finds none (the group is gone, as DeleteGroups leaves it).
        probe = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "leaving"})
        try:
            committed = probe.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=30)
            assert [tp.offset for tp in committed] == [confluent_kafka.OFFSET_INVALID] * 2, committed
        finally:
            probe.close()
        # The group with a member keeps its offsets (Kafka: only Empty groups' offsets expire).
        assert offsets_in_zk("staying") == ["0", "1"]
        committed = staying.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=30)
        assert [tp.offset for tp in committed] == [10, 10], committed
    finally:
        staying.close()
