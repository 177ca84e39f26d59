"""A cluster that lives (issue 27, SPEC S14 and S11.4): every piece of state a broker caches from
ZooKeeper is right after restarts, pauses and outages, as a client sees it.

The matrix: each event below x each cached state, on real ZooKeeper and broker processes. The
victim broker (1) is the preferred leader of every topic and the coordinator of the group, and is
made leader again after the event, so what a client sees is what *its* cache says:

* topic overrides: ``min.insync.replicas=4`` on an RF 3 topic refuses acks=all (bug 1: a restarted
  broker acknowledged it); ``max.message.bytes=1000`` refuses a 2 KB record; an override changed
  while the victim was away (min ISR 1 -> 4) is enforced by it when it comes back;
* committed offsets and coordinator ownership: an acknowledged commit is never read back lower
  from any broker (bug 2: a coordinator paused past its session served its old offsets), and a
  commit made elsewhere during the event is what the victim serves once it coordinates again.

ACLs and SCRAM credentials follow the same rule through the same code (broker.server.dynamic_config);
their reload after a new session is covered by tests/unit/test_dynamic_config.py and their load
before serving by tests/integration/test_security.py.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from helpers import ClusterFixture, E, batch_of, fresh_chroot, produce, wait_for

from broker.coordinator.group.group_state import coordinator_for
from client.admin import AdminClient
from client.connection import ClusterView
from client.consumer import TopicPartition
from client.group_client import GroupMember
from client.ops.local_cluster import ZooKeeperServer, free_port
from proto import minikafka_pb2 as pb

pytestmark = pytest.mark.integration
VICTIM = 1
OTHERS = (2, 3)
GROUP = next(f"lives-{i}" for i in range(1000) if coordinator_for(f"lives-{i}", [1, 2, 3]) == VICTIM)
SESSION_MS = 2000
RETRY_CODES = {E.NOT_LEADER_OR_FOLLOWER, E.LEADER_NOT_AVAILABLE, E.UNKNOWN_TOPIC_OR_PARTITION,
               E.REQUEST_TIMED_OUT, E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE,
               E.COORDINATOR_LOAD_IN_PROGRESS, E.FENCED_LEADER_EPOCH, E.UNKNOWN_LEADER_EPOCH}
TOPICS = {"strict": {"min.insync.replicas": "4"}, "small": {"max.message.bytes": "1000"},
          "changed": {"min.insync.replicas": "1"}, "cg": {}}


# ------------------------------------------------------------------ what a client sees


def produce_code(view: ClusterView, topic: str, records: bytes, acks: int = -1) -> int:
    """The leader's answer to one Produce, once there is a leader that answers for the topic."""
    def attempt() -> int | None:
        conn, _ = view.leader_connection(topic, 0)
        code = produce(conn, topic, 0, records, acks=acks, timeout_ms=3000).error_code
        if code in RETRY_CODES:
            view.refresh([topic])
            return None
        return int(code)
    return wait_for(lambda: (lambda c: None if c is None else (c,))(attempt()), timeout_s=60,
                    what=f"an answer to a produce to {topic}")[0]


def coordinator_conn(view: ClusterView) -> Any:
    return GroupMember(view, GROUP, "probe", 10_000, 10_000, 3000, 0.1, 10.0).coordinator()


def commit(view: ClusterView, offset: int) -> None:
    """Commit ``offset`` for cg-0 (generation -1: an Empty group, as an admin's reset) until acked."""
    def attempt() -> bool:
        resp = coordinator_conn(view).api.OffsetCommit(pb.OffsetCommitRequest(
            group_id=GROUP, generation_id=-1, topics=[pb.OffsetCommitTopic(
                name="cg", partitions=[pb.OffsetCommitPartition(partition=0, offset=offset)])]), timeout=10)
        return resp.topics[0].partitions[0].error_code == E.NONE
    wait_for(attempt, timeout_s=60, interval_s=0.2, what=f"commit of {offset} acknowledged")


def fetch_at(conn: Any) -> tuple[int, int]:
    resp = conn.api.OffsetFetch(pb.OffsetFetchRequest(group_id=GROUP, topics=[
        pb.OffsetFetchTopic(name="cg", partitions=[0])]), timeout=10)
    if resp.error_code != E.NONE:
        return int(resp.error_code), -1
    p = resp.topics[0].partitions[0]
    return int(p.error_code), int(p.committed_offset)


def assert_never_lower(view: ClusterView, acked: int, brokers: tuple[int, ...] = (1, 2, 3)) -> None:
    """Every broker asked directly answers an error or at least ``acked`` - never less."""
    view.refresh([])
    for b in brokers:
        if b not in view.brokers:
            continue
        code, offset = fetch_at(view.connection(view.brokers[b]))
        assert code != E.NONE or offset >= acked, f"broker {b} served committed offset {offset} < {acked}"


def served_offset(view: ClusterView) -> int:
    """The committed offset the group's coordinator serves (bounded retries)."""
    def attempt() -> tuple[int] | None:
        code, offset = fetch_at(coordinator_conn(view))
        return (offset,) if code == E.NONE else None
    return wait_for(attempt, timeout_s=60, interval_s=0.2, what="the coordinator's committed offset")[0]


def make_victim_lead(fx: ClusterFixture, view: ClusterView) -> None:
    """Preferred election: broker 1, first in every assignment, leads every topic again."""
    cluster = fx.cluster
    assert cluster is not None and cluster.state is not None
    tps = [TopicPartition(t, 0) for t in TOPICS]

    def led() -> bool:
        view.refresh(list(TOPICS))
        if all(view.partitions[(t, 0)].leader == VICTIM for t in TOPICS):
            return True
        if all(VICTIM in view.partitions[(t, 0)].isr for t in TOPICS):
            with AdminClient(cluster.state.bootstrap_servers) as admin:
                admin.elect_preferred_leaders(tps)
        return False
    wait_for(led, timeout_s=60, interval_s=0.3, what=f"broker {VICTIM} to lead every topic again")


def assert_enforced(fx: ClusterFixture, view: ClusterView, acked: int, changed_min_isr: int = 1) -> None:
    make_victim_lead(fx, view)
    assert produce_code(view, "strict", batch_of(["x"])) == E.NOT_ENOUGH_REPLICAS, \
        "acks=all acknowledged on a topic with min.insync.replicas=4 and RF 3"
    assert produce_code(view, "small", batch_of(["y" * 2000]), acks=1) in (E.MESSAGE_TOO_LARGE,
                                                                           E.RECORD_LIST_TOO_LARGE)
    expected = E.NOT_ENOUGH_REPLICAS if changed_min_isr > 3 else E.NONE
    assert produce_code(view, "changed", batch_of(["z"])) == expected
    assert_never_lower(view, acked)
    assert served_offset(view) == acked


def setup_cluster(fx: ClusterFixture) -> ClusterView:
    fx.start(3, zookeeper_session_timeout_ms=str(SESSION_MS))
    view = fx.view()
    conn = view.connection(view.bootstrap[0])
    resp = conn.api.CreateTopics(pb.CreateTopicsRequest(timeout_ms=15000, topics=[
        pb.CreatableTopic(name=t, num_partitions=-1, replication_factor=-1, configs=cfg,
                          assignments=[pb.ReplicaAssignment(partition=0, broker_ids=[VICTIM, *OTHERS])])
        for t, cfg in TOPICS.items()]), timeout=20)
    assert all(r.error_code == E.NONE for r in resp.topics), resp
    def full_isrs() -> bool:
        view.refresh(list(TOPICS))
        return all((t, 0) in view.partitions and len(view.partitions[(t, 0)].isr) == 3 for t in TOPICS)
    wait_for(full_isrs, timeout_s=30, what="full ISRs")
    commit(view, 100)
    return view


def restarted_view(fx: ClusterFixture) -> ClusterView:
    assert fx.cluster is not None
    fx.cluster.wait_registered({1, 2, 3})
    return fx.view()


# ------------------------------------------------------------------ the events


def cold_restart(fx: ClusterFixture, view: ClusterView) -> tuple[ClusterView, int]:
    assert fx.cluster is not None
    fx.cluster.down(timeout_s=30)
    fx.cluster.up(3)
    return restarted_view(fx), 100


def restart_victim(fx: ClusterFixture, view: ClusterView) -> tuple[ClusterView, int]:
    assert fx.cluster is not None
    fx.cluster.signal(VICTIM, "KILL")
    commit(view, 150)                                   # at the coordinator that took the group over
    fx.cluster.start(VICTIM)
    return restarted_view(fx), 150


def pause_victim_past_its_session(fx: ClusterFixture, view: ClusterView) -> tuple[ClusterView, int]:
    """Bug 2: the coordinator paused past its session; another broker takes the group over and
    accepts a newer commit; the paused one resumes believing it still coordinates."""
    assert fx.cluster is not None
    fx.cluster.signal(VICTIM, "STOP")
    try:
        wait_for(lambda: VICTIM not in fx.cluster.zk_view()["registered"], timeout_s=30,  # type: ignore[union-attr]
                 what="the paused broker's session to expire")
        commit(view, 200)
    finally:
        fx.cluster.signal(VICTIM, "CONT")
    # At once, before anything settles: the resumed broker must not serve its old 150 or 100.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            assert_never_lower(view, 200, brokers=(VICTIM,))
        except AssertionError:
            raise
        except Exception:
            pass  # the resumed broker not answering yet is fine; answering low is not
        time.sleep(0.05)
    return restarted_view(fx), 200


def controller_move(fx: ClusterFixture, view: ClusterView) -> tuple[ClusterView, int]:
    assert fx.cluster is not None
    controller = fx.cluster.zk_view()["controller"]
    fx.cluster.signal(controller, "KILL")
    fx.cluster.wait_for_controller(other_than=controller)
    commit(view, 250)
    fx.cluster.start(controller)
    return restarted_view(fx), 250


def change_while_victim_down(fx: ClusterFixture, view: ClusterView) -> tuple[ClusterView, int]:
    assert fx.cluster is not None and fx.cluster.state is not None
    fx.cluster.signal(VICTIM, "TERM")
    fx.cluster.wait_for_exit(VICTIM)
    with AdminClient(fx.cluster.state.bootstrap_servers) as admin:
        admin.alter_topic_configs("changed", {"min.insync.replicas": "4"})
    commit(view, 300)
    fx.cluster.start(VICTIM)
    return restarted_view(fx), 300


EVENTS = {"cold_restart": cold_restart, "restart_victim": restart_victim,
          "pause_victim_past_its_session": pause_victim_past_its_session, "controller_move": controller_move,
          "change_while_victim_down": change_while_victim_down}


@pytest.mark.parametrize("event", sorted(EVENTS))
def test_s14_cached_state_after(event: str, cluster: ClusterFixture) -> None:
    view = setup_cluster(cluster)
    assert_enforced(cluster, view, 100)                 # before: every cell holds
    view, acked = EVENTS[event](cluster, view)
    assert_enforced(cluster, view, acked, changed_min_isr=4 if event == "change_while_victim_down" else 1)


def test_s14_cached_state_after_a_zookeeper_outage(tmp_path: Path) -> None:
    """A 30 s outage of the cluster's own ZooKeeper (sessions lost or kept, as ZooKeeper decides
    when it comes back): nothing enforced less afterwards, committed offsets never lower."""
    zk = ZooKeeperServer(tmp_path / "zk", port=free_port())
    zk.start()
    fx = ClusterFixture(tmp_path / "cluster", fresh_chroot(zk))
    try:
        view = setup_cluster(fx)
        assert_enforced(fx, view, 100)
        zk.stop()
        time.sleep(30)  # the outage itself is the event: nothing to poll for
        zk.start()
        assert_enforced(fx, restarted_view(fx), 100)
    finally:
        fx.stop()
        zk.stop()


# ------------------------------------------------------------------ ACLs and SCRAM credentials


def _as_user(fx: ClusterFixture, broker_id: int, user: str, password: str) -> Any:
    """A KafkaApi stub that authenticates as ``user`` (SASL_SSL) to one broker only."""
    from proto import minikafka_pb2_grpc as pb_grpc
    from proto.transport import ChannelSecurity

    assert fx.cluster is not None and fx.cluster.state is not None
    ca = str(Path(fx.cluster.state.secrets) / "ca.pem")
    channel = ChannelSecurity("SASL_SSL", ssl_cafile=ca, sasl_plain_username=user,
                              sasl_plain_password=password).channel(fx.cluster.broker(broker_id).address)
    return channel, pb_grpc.KafkaApiStub(channel)  # type: ignore[no-untyped-call]


def _victim_answer(fx: ClusterFixture, user: str, password: str) -> str:
    """What the victim answers ``user``'s acks=1 produce to "orders": an error name, or
    "UNAUTHENTICATED" when the login itself fails."""
    import grpc

    channel, stub = _as_user(fx, VICTIM, user, password)
    try:
        resp = stub.Produce(pb.ProduceRequest(acks=1, timeout_ms=5000, topics=[pb.ProduceTopicData(
            name="orders", partitions=[pb.ProducePartitionData(partition=0, records=batch_of(["o"]))])]), timeout=10)
        return str(pb.ErrorCode.Name(resp.topics[0].partitions[0].error_code))
    except grpc.RpcError as e:
        return str(e.code().name)
    finally:
        channel.close()


ALLOWED = {"NONE", "NOT_LEADER_OR_FOLLOWER", "LEADER_NOT_AVAILABLE"}  # authorized: the ACL let it through


@pytest.mark.parametrize("away", ["killed", "paused_past_its_session", "stopped"])
def test_s14_acls_and_credentials_changed_while_a_broker_was_away(away: str, cluster: ClusterFixture) -> None:
    """While the victim was away, alice lost Write on "orders" (a Deny) and bob was deleted: back, it
    refuses both (carol, unchanged, still gets through)."""
    from client.admin import NewTopic

    c = cluster.start(3, secure=True, zookeeper_session_timeout_ms=str(SESSION_MS))
    assert c.state is not None
    bootstrap, security = c.state.bootstrap_servers, c.state.client_security()

    def acl(user: str, op: str, permission: str = "Allow") -> pb.AclBinding:
        return pb.AclBinding(resource_type=pb.AclResourceType.TOPIC_RESOURCE, resource_name="orders",
                             principal=f"User:{user}", host="*", operation=op, permission_type=permission)

    with AdminClient(bootstrap, security=security) as admin:
        admin.create_topics([NewTopic("orders", 1, 3)])
        for user in ("alice", "bob", "carol"):
            admin.upsert_scram_user(user, f"{user}-secret")
        admin.create_acls([acl(u, op) for u in ("alice", "bob", "carol") for op in ("Describe", "Write")])
    for user in ("alice", "bob", "carol"):
        wait_for(lambda u=user: _victim_answer(cluster, u, f"{u}-secret") in ALLOWED, timeout_s=30,  # type: ignore[misc]
                 what=f"{user} allowed by broker {VICTIM}")

    if away == "killed":
        c.signal(VICTIM, "KILL")
    elif away == "stopped":
        c.signal(VICTIM, "TERM")
        c.wait_for_exit(VICTIM)
    else:
        c.signal(VICTIM, "STOP")
    try:
        wait_for(lambda: VICTIM not in c.zk_view()["registered"], timeout_s=30, what="the victim's session to end")
        with AdminClient(bootstrap, security=security) as admin:
            admin.create_acls([acl("alice", "Write", "Deny")])
            admin.delete_scram_user("bob")
    finally:
        if away == "paused_past_its_session":
            c.signal(VICTIM, "CONT")
    if away != "paused_past_its_session":
        c.start(VICTIM)
    c.wait_registered({1, 2, 3})
    wait_for(lambda: _victim_answer(cluster, "alice", "alice-secret") == "TOPIC_AUTHORIZATION_FAILED", timeout_s=30,
             what="the Deny enforced by the broker that was away")
    wait_for(lambda: _victim_answer(cluster, "bob", "bob-secret") == "UNAUTHENTICATED", timeout_s=30,
             what="the deleted user refused by the broker that was away")
    assert _victim_answer(cluster, "carol", "carol-secret") in ALLOWED
