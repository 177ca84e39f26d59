"""Follower fetch sessions (KIP-227, SPEC S15) on real brokers: followers fetch incrementally, idle
partitions stay in the ISR without being named (S3.3, S4.2), and a restarted leader's lost sessions
are rebuilt with full fetches (FETCH_SESSION_ID_NOT_FOUND) without losing an acknowledged record."""

from __future__ import annotations

import time

import pytest
from helpers import E, batch_of, create_topic, isr_of, produce, read_values, wait_for
from test_observability import scrape

pytestmark = pytest.mark.integration
PARTITIONS = 30


def _produce_everywhere(view, topic: str, tag: str) -> None:  # type: ignore[no-untyped-def]
    for p in range(PARTITIONS):
        def sent(p: int = p) -> bool:
            try:
                conn, _ = view.leader_connection(topic, p)
                return produce(conn, topic, p, batch_of([f"{tag}-{p}"])).error_code == E.NONE
            except Exception:
                view.refresh()
                return False
        wait_for(sent, timeout_s=30)


def test_followers_fetch_incrementally_and_idle_partitions_stay_in_sync(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3)
    view = cluster.view()
    assert create_topic(view, "fs", partitions=PARTITIONS, replication_factor=3).error_code == E.NONE
    wait_for(lambda: all(len(isr_of(view, "fs", p)) == 3 for p in range(PARTITIONS)), timeout_s=30)
    _produce_everywhere(view, "fs", "a")
    urls = {b.broker_id: b.metrics_address for b in c.state.brokers.values()}
    start = {b: scrape(u) for b, u in urls.items()}
    # Idle for three replica.lag.time.max.ms (3 s in tests): the followers' fetches name no
    # partition, yet every follower stays in every ISR - its session's clock keeps it caught up.
    # Checked all along the window (bounded), not once at its end.
    deadline = time.monotonic() + 9.5
    for _ in range(1000):
        view.refresh()
        assert all(len(isr_of(view, "fs", p)) == 3 for p in range(PARTITIONS))
        if time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    for b, u in urls.items():
        m = scrape(u)
        assert m["kafka_server_replicamanager_isrshrinks_total"] == start[b]["kafka_server_replicamanager_isrshrinks_total"]
        # Each broker leads partitions the two others follow: one session per follower. Polled
        # (bounded): on a loaded machine a follower whose fetch timed out opens a new session, which
        # counts as incremental from its second fetch on; session churn shows in the ratio below.
        wait_for(lambda u=u: scrape(u)["kafka_server_fetchsessioncache_numincrementalfetchsessions"] == 2,
                 timeout_s=15, what=f"two incremental sessions on broker {b}")
        incremental = m['minikafka_replica_fetches_total{kind="incremental"}']
        full = m['minikafka_replica_fetches_total{kind="full"}']
        assert incremental > 10 * full, (b, full, incremental)


def test_a_restarted_leaders_sessions_are_rebuilt_without_losing_records(cluster, zk_client) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3)
    view = cluster.view()
    assert create_topic(view, "fr", partitions=PARTITIONS, replication_factor=3).error_code == E.NONE
    wait_for(lambda: all(len(isr_of(view, "fr", p)) == 3 for p in range(PARTITIONS)), timeout_s=30)
    _produce_everywhere(view, "fr", "a")
    victim = 1
    urls = {b.broker_id: b.metrics_address for b in c.state.brokers.values()}
    before = {b: scrape(u)['minikafka_replica_fetches_total{kind="full"}'] for b, u in urls.items() if b != victim}
    c.signal(victim, "KILL")
    c.wait_for_exit(victim)
    wait_for(lambda: (view.refresh(), all(victim not in isr_of(view, "fr", p) for p in range(PARTITIONS)))[1],
             timeout_s=60)
    _data, before_rejoin = zk_client.get("/isr_change_notification")
    c.start(victim)
    # Back in every ISR: it fetched from the others, and (once leaders again, or as followers) the
    # others' fetchers, whose sessions with it died, started over with full fetches.
    wait_for(lambda: (view.refresh(), all(len(isr_of(view, "fr", p)) == 3 for p in range(PARTITIONS)))[1],
             timeout_s=60)
    # The leaders told the controller of the 30 ISR expansions in a few batched notifications
    # (each one a child created and deleted), not one each.
    _data, after_rejoin = zk_client.get("/isr_change_notification")
    assert after_rejoin.cversion - before_rejoin.cversion <= 2 * 8, (before_rejoin.cversion, after_rejoin.cversion)
    for b, full_before in before.items():
        assert scrape(urls[b])['minikafka_replica_fetches_total{kind="full"}'] > full_before
    _produce_everywhere(view, "fr", "b")
    wait_for(lambda: (view.refresh(), all(len(isr_of(view, "fr", p)) == 3 for p in range(PARTITIONS)))[1],
             timeout_s=30)
    for p in range(PARTITIONS):
        conn, _ = view.leader_connection("fr", p)
        assert read_values(conn, "fr", p) == [f"a-{p}", f"b-{p}"]
