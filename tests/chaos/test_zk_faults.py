"""ZooKeeper answering late or not at all, against real broker processes (issue 14, "Real processes").

Every broker reaches ZooKeeper through the fault proxy of ``zk_proxy.py`` (its connect string is
``proxy:port/chroot``), which can drop the reply of one write the server applied - the client sees
ConnectionLoss and retries - reset connections and delay replies. The test's own checks read
ZooKeeper directly. Scenarios:

* item 2: a partition leader's ISR write (shrink, then expand) loses its reply;
* item 3: the winning broker's create of /controller loses its reply;
* item 5: a controller paused past its session timeout wakes up after its successor acted (4 brokers,
  RF 2, so some state znodes are never rewritten by the successor);
* item 7: a broker SIGKILLed and restarted at once, 16 rounds (some with the registration's reply
  lost, some with slow replies);
* item 4: a reassignment, then a kill of the broker the reassignment added;
* item 1: both followers of an RF 3, min.insync.replicas=2 partition paused under acks=all load;
* beyond the items: lost replies of the controller's guarded multis; a registration whose reply is
  lost or slow (the broker must still get its partitions); the controller paused in the middle of
  an event (item 5's zombie, made likely); connection churn under load with a pause and a kill.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from helpers import ClusterFixture, batch_of, create_topic, fresh_chroot, produce, read_values, wait_for
from zk_chaos import E, ProxiedCluster, StateRecorder, all_led, direct_client, leaderless
from zk_proxy import CREATE_OPS, OP_GET_DATA, OP_MULTI, ZkFaultProxy

from client.admin import AdminClient
from client.ops.chaos import Workload
from client.ops.history import OK, check
from client.ops.local_cluster import pid_alive
from client.structs import TopicPartition
from proto import minikafka_pb2 as pb

pytestmark = pytest.mark.integration
NODE_EXISTS, NO_NODE = -110, -101  # ZooKeeper's error codes


@pytest.fixture
def pc(zookeeper, tmp_path: Path) -> Iterator[ProxiedCluster]:  # type: ignore[no-untyped-def]
    proxy = ZkFaultProxy(zookeeper.connect).start()
    chroot = fresh_chroot(zookeeper)[len(zookeeper.connect):]
    zk = direct_client(zookeeper.connect + chroot)
    env = ProxiedCluster(proxy, ClusterFixture(tmp_path / "cluster", proxy.connect(chroot)), chroot, zk)
    try:
        yield env
    finally:
        print(env.report())  # shown when the scenario failed
        env.resume_all()
        proxy.clear_rules()
        proxy.set_delay(0)
        try:
            env.fx.stop()
        finally:
            zk.stop()
            zk.close()
            proxy.stop()


def _state_path(pc: ProxiedCluster, topic: str, partition: int) -> str:
    return rf"^{re.escape(pc.chroot)}/brokers/topics/{re.escape(topic)}/partitions/{partition}/state$"


def _produce_ok(pc: ProxiedCluster, topic: str, partition: int, values: list[str], timeout_ms: int = 5000) -> None:
    r = pc.produce_to_leader(topic, partition, values, timeout_ms=timeout_ms)
    assert r.error_code == E.NONE, f"{topic}-{partition}: {E.Name(r.error_code)} {r.error_message}"


def _read_from_leader(pc: ProxiedCluster, topic: str, partition: int) -> list[str]:
    assert pc.c is not None and pc.view is not None
    st = pc.state(topic, partition)
    assert st is not None
    return read_values(pc.view.connection(pc.c.broker(st.leader_and_isr.leader).address), topic, partition)


# ------------------------------------------------------------------ item 2


def test_lost_reply_of_a_leaders_isr_write_leaves_zookeeper_and_leader_agreeing(pc: ProxiedCluster) -> None:
    # A session longer than the lag time: the leader, not the controller (on a session expiry),
    # takes the paused follower out of the ISR.
    _c, view = pc.start(3, zookeeper_session_timeout_ms="6000", replica_lag_time_max_ms="1500")
    topic = "isr"
    res = create_topic(view, topic, partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"})
    assert res.error_code == E.NONE, res.error_message
    leader, isr = pc.wait_isr_agrees(topic, 0, size=3, timeout_s=20)
    before = pc.state(topic, 0)
    assert before is not None
    controller_epoch = pc.controller_epoch()
    follower = next(b for b in isr if b not in (leader, pc.controller()))
    _produce_ok(pc, topic, 0, ["before"])

    shrink = pc.proxy.drop_reply("setData", _state_path(pc, topic, 0))
    pc.pause(follower)
    try:
        assert shrink.wait(20), "the leader's ISR shrink never reached ZooKeeper"
        assert shrink.dropped[0].reply.ok
        leader_now, isr_now = pc.wait_isr_agrees(topic, 0, size=2)
        assert leader_now == leader and follower not in isr_now
        _produce_ok(pc, topic, 0, ["during"])  # acks=all does not stall
        expand = pc.proxy.drop_reply("setData", _state_path(pc, topic, 0))
    finally:
        pc.resume(follower)
    assert expand.wait(20), "the leader's ISR expansion never reached ZooKeeper"
    assert pc.wait_isr_agrees(topic, 0, size=3) == (leader, tuple(sorted(isr)))
    _produce_ok(pc, topic, 0, ["after"])

    # The leader adopted the zkVersion of its own write: its next ISR change goes through too.
    pc.pause(follower)
    try:
        pc.wait_isr_agrees(topic, 0, size=2, timeout_s=20)
        _produce_ok(pc, topic, 0, ["again"])
    finally:
        pc.resume(follower)
    pc.wait_isr_agrees(topic, 0, size=3, timeout_s=20)

    after = pc.state(topic, 0)
    assert after is not None
    assert after.leader_and_isr.leader_epoch == before.leader_and_isr.leader_epoch, "no election was needed"
    assert pc.controller_epoch() == controller_epoch, "no controller failover was needed"
    assert not pc.grep(leader, r"deposed|refused \(zk_version"), pc.grep(leader, r"deposed|refused")
    assert len(pc.grep(leader, r"ISR \[.*\] -> \[.*\] at zk_version")) >= 4
    assert _read_from_leader(pc, topic, 0) == ["before", "during", "after", "again"]


# ------------------------------------------------------------------ item 3


def test_lost_reply_of_the_controller_create_still_leaves_an_acting_controller(pc: ProxiedCluster) -> None:
    c, _view = pc.start(3)
    old, epoch = pc.controller(), pc.controller_epoch()
    # The winner's create of /controller loses its reply - a plain create, or the multi that also
    # bumps /controller_epoch (Kafka's registerControllerAndIncrementControllerEpoch). If the epoch
    # is bumped by a separate write, that one's reply is lost too.
    rule = pc.proxy.drop_reply("create", rf"^{re.escape(pc.chroot)}/controller$", also_in_multi=True)
    epoch_rule = pc.proxy.drop_reply("setData", rf"^{re.escape(pc.chroot)}/controller_epoch$")
    c.signal(old, "KILL")
    assert rule.wait(20), "no broker's create of /controller went through"
    if rule.dropped[0].request.opcode != OP_MULTI:
        assert epoch_rule.wait(20), "no controller epoch increment went through"
    pc.proxy.disarm(epoch_rule)
    pc.notes.append(f"lost: {[(d.request.opcode, d.request.paths) for d in pc.proxy.dropped]}")

    def successor() -> int | None:
        now = pc.controller()
        return now if now not in (-1, old) and pc.controller_epoch() > epoch else None

    new = wait_for(successor, timeout_s=20, what="a new controller with a higher epoch")
    wait_for(lambda: pc.describe(new).is_controller, timeout_s=15,
             what=f"broker {new}, named by /controller, to act as the controller")
    live = [b for b in (1, 2, 3) if b != old]
    assert {b: pc.describe(b).is_controller for b in live} == {b: b == new for b in live}
    _create_topic(pc, new, "after", partitions=3, rf=2)
    wait_for(lambda: all_led(pc, ["after"], exclude={old}), timeout_s=15, what="leaders for the new topic")
    for p in range(3):
        _produce_ok(pc, "after", p, [f"v{p}"])
    assert pc.controller() == new and pc.controller_epoch() == epoch + 1


def test_lost_replies_of_the_controllers_guarded_multis(pc: ProxiedCluster) -> None:
    """The controller's writes are one multi each (guarded by /controller_epoch's version): their
    lost replies are recognised (re-read and compared), not taken for conflicts or a lost epoch."""
    c, _view = pc.start(3)
    controller, epoch = pc.controller(), pc.controller_epoch()
    others = [b for b in (1, 2, 3) if b != controller]
    # A new topic: the multi creating its partition state znodes.
    created = pc.proxy.drop_reply("multi", r"/brokers/topics/lm/partitions/\d+/state$")
    _create_topic(pc, others[0], "lm", partitions=4, rf=2)
    assert created.wait(10) and created.dropped[0].reply.ok
    wait_for(lambda: all_led(pc, ["lm"]), timeout_s=15, what="leaders for the new topic")
    # A broker dies: the multi moving leadership and shrinking ISRs.
    victim = others[1]
    moved = pc.proxy.drop_reply("multi", r"/brokers/topics/lm/partitions/\d+/state$")
    c.signal(victim, "KILL")
    assert moved.wait(20), "the controller wrote no state after the kill"
    wait_for(lambda: all_led(pc, ["lm"], exclude={victim}), timeout_s=20, what="leaders after the kill")
    # It comes back: the controller's writes for it (if any) and the leaders' ISR expansions.
    c.start(victim)
    c.wait_registered({victim})
    wait_for(lambda: _fully_in_sync(pc), timeout_s=30, what="every replica back in sync")
    for p in range(4):
        _produce_ok(pc, "lm", p, [f"v{p}"])
    assert pc.controller() == controller and pc.controller_epoch() == epoch, "the controller resigned"
    assert not pc.grep(controller, r"resigning|conflict on|kept conflicting"), \
        pc.grep(controller, r"resign|conflict")


# ------------------------------------------------------------------ item 5


def _create_topic(pc: ProxiedCluster, via: int, name: str, partitions: int, rf: int, timeout_ms: int = 15000,
                  configs: dict[str, str] | None = None) -> None:
    """CreateTopics through broker ``via`` (``timeout_ms=0``: without waiting for leaders, as when
    there is no controller right now)."""
    assert pc.c is not None and pc.view is not None
    resp = pc.view.connection(pc.c.broker(via).address).api.CreateTopics(pb.CreateTopicsRequest(
        topics=[pb.CreatableTopic(name=name, num_partitions=partitions, replication_factor=rf, configs=configs or {})],
        timeout_ms=timeout_ms), timeout=timeout_ms / 1000 + 10)
    ok = (E.NONE, E.REQUEST_TIMED_OUT) if timeout_ms == 0 else (E.NONE,)  # timed out: created, not yet led
    assert resp.topics[0].error_code in ok, resp.topics[0].error_message


def _led_by(pc: ProxiedCluster, broker_id: int) -> list[str]:
    return [f"{t}-{p}" for t, parts in pc.topics().items() for p in parts
            if (pc.state(t, p) or _none()).leader_and_isr.leader == broker_id]


def _fully_in_sync(pc: ProxiedCluster) -> bool:
    """Every partition: its ISR is all its replicas, each of which is at ZooKeeper's leader epoch."""
    for t, parts in pc.topics().items():
        assignment = pc.topic_assignment(t)
        for p in parts:
            st = pc.state(t, p)
            if st is None or sorted(st.leader_and_isr.isr) != sorted(assignment[p]):
                return False
            for b in assignment[p]:
                r = pc.replica(b, t, p)
                if r is None or r.leader_epoch != st.leader_and_isr.leader_epoch:
                    return False
    return True


def test_paused_controller_past_its_session_never_writes_over_its_successor(pc: ProxiedCluster) -> None:
    c, view = pc.start(4)
    for name in ("z1", "z2"):
        res = create_topic(view, name, partitions=6, replication_factor=2)
        assert res.error_code == E.NONE, res.error_message
    wait_for(lambda: all_led(pc, ["z1", "z2"]), timeout_s=20, what="leaders for every partition")
    recorder = StateRecorder(pc.zk).start()
    old, epoch = pc.controller(), pc.controller_epoch()
    others = [b for b in (1, 2, 3, 4) if b != old]
    try:
        pc.pause(old)
        try:
            # Work the paused controller is notified of while its session still lives: it finds it
            # in its socket when it wakes up, after its successor handled it.
            _create_topic(pc, others[0], "z3", partitions=4, rf=2, timeout_ms=0)
            new = c.wait_for_controller(timeout_s=20, other_than=old, min_epoch=epoch + 1)["controller"]
            wait_for(lambda: all_led(pc, ["z1", "z2", "z3"], exclude={old}), timeout_s=20,
                     what="the successor to move leadership off the paused controller")
            victim = next(b for b in others if b != new)
            c.signal(victim, "KILL")
            wait_for(lambda: victim not in pc.registered() and not _led_by(pc, victim), timeout_s=20,
                     what="the successor to move leadership off the killed broker")
            _create_topic(pc, new, "z4", partitions=4, rf=2)
        finally:
            pc.resume(old)
        c.start(victim)
        wait_for(lambda: {old, victim} <= set(pc.registered()), timeout_s=20,
                 what="the woken controller and the restarted broker to register again")
        wait_for(lambda: _fully_in_sync(pc), timeout_s=30, what="every replica to follow the successor's states")
    finally:
        recorder.stop()
    pc.notes.append(f"recorder: {recorder.summary()}")
    assert not recorder.errors, recorder.errors[:5]
    assert recorder.polls > 50
    assert not recorder.violations(), "\n".join(recorder.violations())
    assert pc.controller() == new and pc.controller_epoch() == epoch + 1, "the woken controller took over again"
    assert not pc.describe(old).is_controller
    topics = ["z1", "z2", "z3", "z4"]
    assert all_led(pc, topics), leaderless(pc, topics)
    for t, parts in sorted(pc.topics().items()):
        for p in parts:
            _produce_ok(pc, t, p, [f"{t}-{p}"])
            assert _read_from_leader(pc, t, p)[-1] == f"{t}-{p}"


def test_controller_paused_in_the_middle_of_an_event_never_writes_after_its_successor(pc: ProxiedCluster) -> None:
    """Item 5, the busy variant: the controller is paused while it is handling an event (a broker's
    controlled shutdown, its state writes slowed by the proxy), past its session timeout; it is
    woken as soon as a successor exists. Whatever it had left to do must not reach ZooKeeper: the
    broker's other partitions were touched by nobody since, so a zombie write would succeed."""
    c, view = pc.start(4)
    res = create_topic(view, "busy", partitions=16, replication_factor=2)
    assert res.error_code == E.NONE, res.error_message
    wait_for(lambda: _fully_in_sync(pc), timeout_s=20, what="every replica in sync")
    recorder = StateRecorder(pc.zk).start()
    old, epoch = pc.controller(), pc.controller_epoch()
    leaving = next(b for b in (1, 2, 3, 4) if b != old)
    slow = pc.proxy.delay_replies(["setData", "multi"], r"/brokers/topics/busy/partitions/\d+/state$", 0.25)
    try:
        c.signal(leaving, "TERM")  # a controlled shutdown: the controller moves its leaderships away
        wait_for(lambda: slow.delayed >= 1, timeout_s=15, what="the controller's first state write")
        pc.pause(old)
        try:
            new = c.wait_for_controller(timeout_s=20, other_than=old, min_epoch=epoch + 1)["controller"]
        finally:
            pc.resume(old)
        pc.proxy.remove_delay(slow)
        c.wait_for_exit(leaving, timeout_s=30)
        wait_for(lambda: old in pc.registered(), timeout_s=20, what="the woken controller to register again")
        c.start(leaving)
        c.wait_registered({leaving})
        try:
            wait_for(lambda: _fully_in_sync(pc), timeout_s=30, what="every replica back in sync")
            stuck: AssertionError | None = None
        except AssertionError as e:
            stuck = e  # reported after the zombie check, which may explain it
    finally:
        pc.proxy.remove_delay(slow)
        recorder.stop()
    pc.notes.append(f"recorder: {recorder.summary()}")
    assert not recorder.errors, recorder.errors[:5]
    assert not recorder.violations(), "\n".join(recorder.violations())
    if stuck is not None:
        raise stuck
    # The successor may be the broker shutting down, which hands over again: epoch + 2. That election
    # may go to the woken broker itself: a controllership of its own, won after it registered again,
    # not the zombie's (the recorder above shows the zombie wrote nothing).
    controller, controller_epoch = pc.controller(), pc.controller_epoch()
    assert controller_epoch > epoch, (controller, controller_epoch, new)
    if controller == old:
        assert new == leaving and controller_epoch >= epoch + 2, (controller, controller_epoch, new)
    else:
        assert not pc.describe(old).is_controller
    assert all_led(pc, ["busy"]), leaderless(pc, ["busy"])
    for p in range(16):
        _produce_ok(pc, "busy", p, [f"v{p}"])


# ------------------------------------------------------------------ item 7


def test_broker_killed_and_restarted_at_once_always_registers_again(pc: ProxiedCluster) -> None:
    c, view = pc.start(3)
    res = create_topic(view, "fast", partitions=1, replication_factor=3)
    assert res.error_code == E.NONE, res.error_message
    bid = next(b for b in (1, 2, 3) if b != pc.controller())
    assert c.state is not None
    ids_path = rf"^{re.escape(pc.chroot)}/brokers/ids/{bid}$"
    trace = pc.proxy.trace(ids_path)
    for rnd in range(16):
        owner = pc.registered().get(bid)
        assert owner is not None
        # Every fourth round the registration's reply is lost. Every other round the replies to its
        # creates are held 0.2 s, which widens item 7's window (create -> NodeExists, the old node
        # expires, the read -> NoNode); in rounds 2, 6, ... every reply is slowed a little.
        lost = pc.proxy.drop_reply("create", ids_path) if rnd % 4 == 3 else None
        slow = pc.proxy.delay_replies("create", ids_path, 0.2) if rnd % 2 else None
        pc.proxy.set_delay(0.03 if rnd % 4 == 2 else 0)
        c.signal(bid, "KILL")
        c._spawn(c.broker(bid))  # at once: not LocalCluster.start, which waits for the old node to expire
        c.state.save()
        try:
            wait_for(lambda owner=owner: pc.registered().get(bid) not in (None, owner) or not pid_alive(pc.pid(bid)),
                     timeout_s=20, what=f"round {rnd}: broker {bid} to register again")
            assert pid_alive(pc.pid(bid)), f"round {rnd}: broker {bid} exited: {pc.grep(bid, 'Error|error')[-5:]}"
            c.wait_registered({bid}, timeout_s=5)
        finally:
            pc.proxy.set_delay(0)
            if slow is not None:
                pc.proxy.remove_delay(slow)
        if lost is not None:
            assert lost.done.is_set(), f"round {rnd}: the registration did not go through the proxy"
            pc.proxy.disarm(lost)
            pc.notes.append(f"round {rnd}: registration reply lost")
    # Registered, alive and serving. (Whether it also gets its partitions back after a lost or slow
    # registration reply is test_registration_reply_lost_or_slow_the_broker_still_gets_its_partitions.)
    assert pid_alive(pc.pid(bid)) and bid in pc.registered()
    wait_for(lambda: pc.describe(bid).broker_id == bid, timeout_s=10, what="the restarted broker to answer")
    _produce_ok(pc, "fast", 0, ["ok"])
    # How often the restart hit item 7's window: create -> NodeExists, then the read -> NoNode.
    seen = trace.seen
    races = sum(1 for a, b in itertools.pairwise(seen)
                if a.conn_id == b.conn_id and a.opcode in CREATE_OPS and a.err == NODE_EXISTS
                and b.opcode == OP_GET_DATA and b.err == NO_NODE)
    pc.notes.append(f"registration: {sum(t.opcode in CREATE_OPS for t in seen)} creates, "
                    f"{sum(t.err == NODE_EXISTS for t in seen)} NodeExists, {races} node gone before the read")


@pytest.mark.parametrize("fault", ["lost", "slow"])
def test_registration_reply_lost_or_slow_the_broker_still_gets_its_partitions(pc: ProxiedCluster, fault: str) -> None:
    """A broker restarts; the reply to its registration's create is lost (it learns its broker epoch
    only after reconnecting and reading the node back) or slow (0.3 s). The controller sees the node
    at once and sends LeaderAndIsr/UpdateMetadata with the new broker epoch: the broker must end up
    following its partitions and back in the ISR."""
    c, view = pc.start(3)
    res = create_topic(view, "reg", partitions=2, replication_factor=3)
    assert res.error_code == E.NONE, res.error_message
    for p in range(2):
        pc.wait_isr_agrees("reg", p, size=3, timeout_s=20)
    bid = next(b for b in (1, 2, 3) if b != pc.controller())
    ids_path = rf"^{re.escape(pc.chroot)}/brokers/ids/{bid}$"
    c.signal(bid, "KILL")
    wait_for(lambda: bid not in pc.registered(), timeout_s=20, what="the killed broker's node to expire")
    for p in range(2):
        wait_for(lambda p=p: bid not in (pc.state("reg", p) or _none()).leader_and_isr.isr, timeout_s=20,
                 what="the killed broker out of the ISR")
    rule = pc.proxy.drop_reply("create", ids_path) if fault == "lost" \
        else pc.proxy.delay_replies("create", ids_path, 0.3)
    c.start(bid)
    c.wait_registered({bid}, timeout_s=30)
    if fault == "lost":
        assert rule.done.is_set()  # type: ignore[union-attr]
    for p in range(2):
        try:
            pc.wait_isr_agrees("reg", p, size=3, timeout_s=20)
        except AssertionError as e:
            st = pc.state("reg", p)
            mine = pc.replica(bid, "reg", p)
            raise AssertionError(
                f"{e}: broker {bid} (broker epoch {pc.zk.get(f'/brokers/ids/{bid}')[1].czxid}) never followed "
                f"reg-{p}: ZooKeeper has {st}, the broker's own replica is at leader epoch "
                f"{mine.leader_epoch if mine else None} (leader {mine.leader if mine else None}); its log after "
                f"the restart: {pc.grep(bid, 'registered|became|Connection dropped')[-4:]}") from None


# ------------------------------------------------------------------ item 4


def test_kill_after_a_reassignment_every_partition_gets_a_leader(pc: ProxiedCluster) -> None:
    c, view = pc.start(3)
    topic = "moved"
    res = create_topic(view, topic, partitions=3, replication_factor=2)
    assert res.error_code == E.NONE, res.error_message
    wait_for(lambda: all(len((pc.state(topic, p) or _none()).leader_and_isr.isr) == 2 for p in range(3)),
             timeout_s=20, what="full ISRs")
    controller, epoch = pc.controller(), pc.controller_epoch()
    assignment = {int(p): r for p, r in pc.topic_assignment(topic).items()}
    # A partition that gains a replica on a broker other than the controller: that broker is killed.
    part, added = next((p, b) for p, r in sorted(assignment.items()) for b in (1, 2, 3)
                       if b not in r and b != controller)
    target = [added, assignment[part][0]]
    assert c.state is not None
    with AdminClient(c.state.bootstrap_servers) as admin:
        admin.reassign_partitions({TopicPartition(topic, part): target})
        wait_for(lambda: not admin.reassignment_in_progress() and pc.topic_assignment(topic)[part] == target
                 and set((pc.state(topic, part) or _none()).leader_and_isr.isr) == set(target),
                 timeout_s=30, what=f"the reassignment of {topic}-{part} to {target}")
    c.signal(added, "KILL")
    wait_for(lambda: all_led(pc, [topic], exclude={added}) and added not in pc.registered(), timeout_s=20,
             what="a leader for every partition after the kill")
    for p in range(3):
        _produce_ok(pc, topic, p, [f"v{p}"])
    assert pc.controller() == controller and pc.controller_epoch() == epoch, "it took a controller failover"
    assert not pc.grep(controller, r"resigning|IllegalStateTransition|failed \("), \
        pc.grep(controller, r"resigning|IllegalState|failed")


def _none() -> object:
    raise AssertionError("no partition state")


# ------------------------------------------------------------------ item 1


@dataclass(frozen=True)
class Sent:
    value: str
    sent: float
    answered: float
    code: int


def test_both_followers_paused_nothing_is_acknowledged_below_min_insync(pc: ProxiedCluster) -> None:
    c, view = pc.start(3)
    topic = "minisr"
    res = create_topic(view, topic, partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"})
    assert res.error_code == E.NONE, res.error_message
    leader, _ = pc.wait_isr_agrees(topic, 0, size=3, timeout_s=20)
    followers = [b for b in (1, 2, 3) if b != leader]
    conn = view.connection(c.broker(leader).address)
    results: list[Sent] = []
    stop = threading.Event()
    deadline = time.monotonic() + 60

    def producer(k: int) -> None:
        for i in range(100_000):
            if stop.is_set() or time.monotonic() > deadline:
                return
            v = f"p{k}-{i}"
            t0 = time.monotonic()
            try:
                code = produce(conn, topic, 0, batch_of([v]), acks=-1, timeout_ms=2000).error_code
            except grpc.RpcError:
                code = -1000  # no answer at all
            results.append(Sent(v, t0, time.monotonic(), code))

    threads = [threading.Thread(target=producer, args=(k,), daemon=True) for k in range(3)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: sum(r.code == E.NONE for r in results) >= 30, timeout_s=15, what="acknowledged writes")
        for f in followers:
            pc.pause(f)
        t_stop = time.monotonic()
        try:
            wait_for(lambda: (pc.state(topic, 0) or _none()).leader_and_isr.isr == (leader,), timeout_s=20,
                     what="the ISR to shrink to the leader")
            wait_for(lambda: any(r.sent > t_stop and r.code in (E.NOT_ENOUGH_REPLICAS,
                                                                 E.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
                                 for r in list(results)), timeout_s=10, what="refused writes")
        finally:
            t_cont = time.monotonic()
            for f in followers:
                pc.resume(f)
        pc.wait_isr_agrees(topic, 0, size=3, timeout_s=30)
        wait_for(lambda: any(r.sent > t_cont and r.code == E.NONE for r in list(results)), timeout_s=15,
                 what="acknowledged writes after the followers came back")
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    # Written after both followers stopped and answered before either resumed: only the leader had
    # them, so none may have been acknowledged.
    window = [r for r in results if r.sent > t_stop and r.answered < t_cont]
    acked_alone = [r for r in window if r.code == E.NONE]
    codes = {E.Name(r.code) if r.code >= 0 else "NO_ANSWER" for r in window}
    pc.notes.append(f"{len(results)} writes, {len(window)} while both followers were stopped: {sorted(codes)}")
    assert window, "no write was made while the followers were stopped"
    assert not acked_alone, f"acknowledged while only the leader had them: {acked_alone[:5]}"
    assert codes <= {"NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "REQUEST_TIMED_OUT", "NO_ANSWER"}, codes
    acked = {r.value for r in results if r.code == E.NONE}
    readable = set(_read_from_leader(pc, topic, 0))
    assert acked <= readable, f"acknowledged but not readable: {sorted(acked - readable)[:10]}"
    with contextlib.suppress(Exception):
        pc.notes.append(f"leader {leader}: {pc.grep(leader, 'ISR')[-6:]}")


# ------------------------------------------------------------------ all of it at once


def test_zookeeper_connection_churn_under_load_loses_nothing(pc: ProxiedCluster) -> None:
    """Every broker's ZooKeeper connection is reset over and over for ~8 s with slowed replies, so any
    request in flight - ISR writes, controller multis, watch re-registrations - may or may not have
    been applied when its client sees ConnectionLoss; meanwhile a follower is paused past the lag time
    (the leader shrinks, then expands, the ISR through the churn) and the controller is killed once.
    Acknowledged writes survive, and ZooKeeper and the leaders agree afterwards."""
    c, _view = pc.start(3, zookeeper_session_timeout_ms="6000", replica_lag_time_max_ms="1500")
    assert c.state is not None
    _create_topic(pc, 1, "churn", partitions=2, rf=3, configs={"min.insync.replicas": "2"})
    for p in range(2):
        pc.wait_isr_agrees("churn", p, size=3, timeout_s=20)
    workload = Workload(c.state.bootstrap_servers, "churn", 2, rate=150.0, security=c.state.client_security())
    workload.start()
    leader = (pc.state("churn", 0) or _none()).leader_and_isr.leader
    follower = next(b for b in (1, 2, 3) if b not in (leader, pc.controller()))
    killed = -1
    paused = False
    resets = 0
    pc.proxy.set_delay(0.02)
    t0 = time.monotonic()
    try:
        for _ in range(500):
            elapsed = time.monotonic() - t0
            if (elapsed > 8 and killed > 0) or elapsed > 20:
                break
            resets += pc.proxy.reset_all()
            live = 3 - (killed > 0) - paused  # a paused broker does not reconnect
            # Paced by the brokers themselves: reset again once they all reconnected.
            wait_for(lambda live=live: pc.proxy.open_connections() >= live, timeout_s=10,
                     what="the brokers to reconnect to ZooKeeper")
            if elapsed > 1 and not paused and killed < 0 and follower > 0:
                pc.pause(follower)
                paused = True
            elif paused and (len((pc.state("churn", 0) or _none()).leader_and_isr.isr) == 2 or elapsed > 6):
                pc.resume(follower)
                paused, follower = False, -1
            if elapsed > 4 and killed < 0 and not paused:
                # Through the churn /controller can be absent for a moment (a controller resigning or
                # its session being re-established): kill one once there is one.
                current = pc.controller()
                if current > 0:
                    killed = current
                    c.signal(killed, "KILL")
    finally:
        pc.proxy.set_delay(0)
        if paused:
            pc.resume(follower)
    pc.notes.append(f"churn: {resets} connections reset; killed controller {killed}")
    assert killed > 0 and follower == -1, "the schedule did not run"
    c.start(killed)
    c.wait_registered({killed})
    for p in range(2):
        pc.wait_isr_agrees("churn", p, size=3, timeout_s=40)
    # The controller still hears of everything: a new topic, a broker's death, ISR changes.
    controller = pc.controller()
    _create_topic(pc, controller, "after", partitions=2, rf=3)
    victim = next(b for b in (1, 2, 3) if b != controller)
    c.signal(victim, "KILL")
    wait_for(lambda: all_led(pc, ["churn", "after"], exclude={victim}) and not _led_by(pc, victim), timeout_s=20,
             what="the controller to handle a broker's death after the churn")
    c.start(victim)
    c.wait_registered({victim})
    for t in ("churn", "after"):
        for p in range(2):
            pc.wait_isr_agrees(t, p, size=3, timeout_s=30)

    def metadata_agrees() -> bool:  # ISR change notifications reached the controller, which told everyone
        assert c.state is not None and pc.view is not None
        for b in c.state.brokers.values():
            md = pc.view.connection(b.address).api.Metadata(pb.MetadataRequest(topics=["churn", "after"]), timeout=3)
            for t in md.topics:
                for pm in t.partitions:
                    st = pc.state(t.name, pm.partition)
                    if st is None or sorted(pm.isr) != sorted(st.leader_and_isr.isr) or pm.leader != st.leader_and_isr.leader:
                        return False
        return True

    wait_for(metadata_agrees, timeout_s=20, what="every broker's metadata to match ZooKeeper")
    writes = workload.stop()
    report = check(writes, workload.read_all())
    pc.notes.append(f"churn history: {report.summary()}")
    assert report.writes.get(OK, 0) > 100, report.summary()
    assert report.valid, report.summary()
    assert all_led(pc, ["churn"])
    assert resets >= 20, f"only {resets} resets"
