"""Our consumer fetches through fetch sessions (KIP-227, SPEC S15) on the gRPC listener: one session
per leader, a full fetch first, then incremental fetches naming only the partitions that moved; the
brokers hold its sessions next to their followers' and free them when it closes. Through a leader's
death (SIGKILL) or controlled shutdown (SIGTERM) the consumer moves its partitions to the new
leaders' sessions and sees every partition's log exactly: no gap, no duplicate (S3.2, S11)."""

from __future__ import annotations

import threading
from collections import defaultdict

import pytest
from helpers import E, create_topic, isr_of, read_values, wait_for
from test_observability import scrape

from client.consumer import Consumer
from client.producer import Producer
from client.structs import TopicPartition

pytestmark = pytest.mark.integration
TOPIC = "sessions"
PARTITIONS = 200
GAUGE = "kafka_server_fetchsessioncache_numincrementalfetchsessions"


def _produce(bootstrap: str, tag: str, acked: list[str], rounds: int = 1, stop: threading.Event | None = None) -> None:
    """Rounds of one record into every partition (at least ``rounds``, then until ``stop``); the values
    the cluster acknowledged go to ``acked``, a round at a time."""
    with Producer(bootstrap) as p:
        i = 0
        while i < rounds or (stop is not None and not stop.is_set() and i < 500):
            sent = [(v, p.send(TOPIC, v.encode(), partition=part))
                    for part in range(PARTITIONS) for v in [f"{tag}-{part}-{i}"]]
            p.flush(timeout=120)
            for v, fut in sent:
                try:
                    fut.result(timeout=0)
                    acked.append(v)
                except Exception:  # not acknowledged: may or may not be in the log
                    pass
            i += 1


@pytest.mark.parametrize("sig", ["KILL", "TERM"])
def test_our_consumer_reads_200_partitions_incrementally_and_through_a_leader_move(cluster, sig: str) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL: the leader's answers stop (its fetch fails). SIGTERM: a controlled shutdown moves its
    leaderships first, so it answers the consumer's sessions NOT_LEADER_OR_FOLLOWER for a while."""
    c = cluster.start(3)
    view = cluster.view()
    bootstrap = c.state.bootstrap_servers
    assert create_topic(view, TOPIC, partitions=PARTITIONS, replication_factor=3).error_code == E.NONE
    wait_for(lambda: all(len(isr_of(view, TOPIC, p)) == 3 for p in range(PARTITIONS)), timeout_s=60,
             what="every partition led with a full ISR")
    urls = {b.broker_id: b.metrics_address for b in c.state.brokers.values()}
    # The followers' sessions first: each broker leads partitions the two others follow.
    for b, u in urls.items():
        wait_for(lambda u=u: scrape(u)[GAUGE] == 2, timeout_s=30, what=f"two follower sessions on broker {b}")

    acked: list[str] = []
    _produce(bootstrap, "a", acked, rounds=3)
    seen: dict[TopicPartition, list[tuple[int, str]]] = defaultdict(list)
    with Consumer(TOPIC, bootstrap_servers=bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=200) as consumer:
        def poll() -> int:
            for r in consumer.poll(timeout_ms=200, max_records=1000):
                seen[TopicPartition(r.topic, r.partition)].append((r.offset, r.value.decode()))
            return sum(map(len, seen.values()))

        wait_for(lambda: poll() >= len(acked), timeout_s=60, what="the first records")
        # Then a trickle, a few partitions at a time: fetches name what moved, not all 200.
        before = consumer.fetch_session_metrics()
        with Producer(bootstrap) as p:
            for i in range(30):
                for part in (i % PARTITIONS, (7 * i + 3) % PARTITIONS):
                    v = f"b-{part}-{i}"
                    p.send(TOPIC, v.encode(), partition=part).result(timeout=30)
                    acked.append(v)
                poll()
        wait_for(lambda: poll() >= len(acked), timeout_s=60, what="the trickle")
        m = consumer.fetch_session_metrics()
        incremental = m["incremental"] - before["incremental"]
        full = m["full"] - before["full"]
        named = m["partitions_named"] - before["partitions_named"]
        assert m["sessions"] == 3, m  # one per leader
        assert incremental > 10 * max(full, 1), m
        # Sessionless, every fetch would name every partition its leader has for us (~67).
        assert named / incremental < 10, m
        # Each broker holds the consumer's session next to its two followers'.
        for b, u in urls.items():
            wait_for(lambda u=u: scrape(u)[GAUGE] == 3, timeout_s=30, what=f"the consumer's session on broker {b}")

        # A leader dies while records keep coming: its partitions move, the consumer's sessions
        # with the dead broker and (on errors) the others start over; nothing is lost or repeated.
        stop = threading.Event()
        producing = threading.Thread(target=_produce, args=(bootstrap, "c", acked), kwargs={"rounds": 3, "stop": stop})
        start = len(acked)
        producing.start()
        try:
            wait_for(lambda: poll() >= start + PARTITIONS, timeout_s=60, what="records of the third round")
            c.signal(1, sig)
            c.wait_for_exit(1)
            wait_for(lambda: (view.refresh([TOPIC]), all(view.partitions[(TOPIC, p)].leader in (2, 3)
                                                         for p in range(PARTITIONS)))[1],
                     timeout_s=60, what="every partition led by a live broker")
            mark = len(acked)
            wait_for(lambda: (poll(), len(acked) >= mark + PARTITIONS)[1], timeout_s=60,
                     what="a round acknowledged by the new leaders")
        finally:
            stop.set()
            producing.join(timeout=180)
        assert not producing.is_alive()
        ends = wait_for(lambda: consumer.end_offsets([TopicPartition(TOPIC, p) for p in range(PARTITIONS)]),
                        timeout_s=30, what="the end offsets")
        wait_for(lambda: poll() >= sum(ends.values()), timeout_s=90, what="everything the partitions hold")
        assert poll() == sum(ends.values())
        after = consumer.fetch_session_metrics()
        assert after["incremental"] > m["incremental"] and after["sessions"] == 2, (m, after)
        held = {b: scrape(urls[b])[GAUGE] for b in (2, 3)}
    # Closing the consumer closes its sessions (epoch -1): the brokers free them at once.
    for b, n in held.items():
        wait_for(lambda b=b, n=n: scrape(urls[b])[GAUGE] == n - 1, timeout_s=30,
                 what=f"the consumer's session on broker {b} closed")

    for p in range(PARTITIONS):
        tp = TopicPartition(TOPIC, p)
        offsets = [o for o, _v in seen[tp]]
        assert offsets == list(range(ends[tp])), (tp, offsets)  # no gap, no duplicate
        conn, _ = view.leader_connection(TOPIC, p)
        assert [v for _o, v in seen[tp]] == read_values(conn, TOPIC, p), tp  # the log, as a plain fetch reads it
    assert set(acked) <= {v for vs in seen.values() for _o, v in vs}


def test_records_dropped_unread_are_fetched_again_from_the_offset_the_session_cached(cluster) -> None:  # type: ignore[no-untyped-def]
    """A reassignment (a rebalance, assign()) drops what a fetch answered before the caller took it,
    and the consumer resumes from the offset its session had cached (the committed one). The broker
    reads an incremental fetch's partitions only when named or moved since its last answer, so the
    consumer must name them again: without that a CI run's group consumer got nothing more after a
    coordinator failover's rebalance came between a fetch's answer and the next poll."""
    c = cluster.start(1)
    view = cluster.view()
    assert create_topic(view, "dropped", partitions=1, replication_factor=1).error_code == E.NONE
    bootstrap = c.state.bootstrap_servers
    with Producer(bootstrap, acks="all") as p:
        for i in range(10):
            p.send("dropped", f"v{i}".encode(), partition=0)
        p.flush(timeout=60)
    tp = TopicPartition("dropped", 0)
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as consumer:
        consumer.assign([tp])
        # One fetch answered and buffered, none in flight: the moment between two polls at which the
        # heartbeat thread's rejoin request is acted on.
        for _ in range(100):
            consumer._send_fetches()
            consumer._collect(1.0)
            if consumer._buffer.get(tp) and not consumer._inflight:
                break
        assert consumer._buffer.get(tp) and not consumer._inflight
        assert consumer.fetch_session_metrics()["sessions"] == 1
        consumer.assign([])    # given up unread...
        consumer.assign([tp])  # ...and back, from offset 0 again: what the session cached
        got: list[int] = []
        for _ in range(50):
            got += [r.offset for r in consumer.poll(timeout_ms=100)]
            if len(got) >= 10:
                break
        assert got == list(range(10))
