"""KIP-455 reassignments as Kafka 2.4+ keeps them in ZooKeeper (issue 30): the pure decisions of
controller/reassignment.py, the topic znode's version 2 fields, and the controller over the
simulation's in-memory ZooKeeper - a cancel reverts to the original replicas, a new target replaces
the running one, a second partition is taken while the first moves, a failover resumes."""

from __future__ import annotations

import json

import pytest
from test_controller_shell import Harness, started

from controller.events import Reelect
from controller.reassignment import build_reassignment, is_complete, leadership_for, refusal
from proto import minikafka_pb2 as pb
from zk.data import (
    NO_LEADER,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    ReplicaAssignment,
    TopicPartitionId,
    TopicPartitionStateZNode,
    TopicZNode,
)

E = pb.ErrorCode


# ------------------------------------------------------------------ pure


def test_reassign_to_is_target_then_original_with_adding_and_removing() -> None:
    moving = ReplicaAssignment((1, 2, 3)).reassign_to([3, 4, 5])
    assert moving == ReplicaAssignment((3, 4, 5, 1, 2), adding=(4, 5), removing=(1, 2))
    assert moving.target == (3, 4, 5) and moving.being_reassigned
    assert set(moving.origin) == {1, 2, 3}
    # Kafka's order: ORS = RS - AR in RS's order (the original order when the target shares no prefix).
    assert ReplicaAssignment((1, 2)).reassign_to([1, 3]).origin == (1, 2)
    assert ReplicaAssignment((1, 2)).reassign_to([4, 5]).origin == (1, 2)


def test_a_new_target_replaces_the_running_one_and_a_cancel_goes_back_to_the_original() -> None:
    moving = ReplicaAssignment((1, 2)).reassign_to([3, 4])
    again = build_reassignment(moving, [5, 1])
    assert again == ReplicaAssignment((5, 1, 2), adding=(5,), removing=(2,))  # 3 and 4 are no longer wanted
    assert again is not None and again.origin == (1, 2)
    assert build_reassignment(moving, None) == ReplicaAssignment((1, 2))
    assert build_reassignment(ReplicaAssignment((1, 2)), None) is None  # NO_REASSIGNMENT_IN_PROGRESS
    assert build_reassignment(ReplicaAssignment((1, 2)), [2, 1]) == ReplicaAssignment((2, 1))  # a reorder


@pytest.mark.parametrize("target,why", [
    ([], "Empty replica list"), ([1, 1], "Duplicate replica ids"), ([1, 9], "brokers [9] are not live"), ([-1], "Invalid broker"),
])
def test_refused_targets(target: list[int], why: str) -> None:
    reason = refusal(target, {1, 2, 3})
    assert reason is not None and why in reason
    assert refusal([3, 1], {1, 2, 3}) is None and refusal(None, set()) is None


def test_complete_when_every_target_replica_is_in_sync() -> None:
    moving = ReplicaAssignment((3, 4, 1, 2), adding=(3, 4), removing=(1, 2))
    assert not is_complete(moving, [1, 2, 3])
    assert is_complete(moving, [1, 2, 3, 4])


def test_leadership_within_a_replica_set() -> None:
    cur = LeaderAndIsr(4, 7, (1, 4, 2))
    # The leader stays if it is in the set and live; the ISR is cut to the set; a new epoch.
    assert leadership_for(cur, [1, 2, 4], {1, 2, 4}) == LeaderAndIsr(4, 8, (1, 4, 2), cur.zk_version)
    # An adding replica led: the first original replica that is live and in sync takes over.
    new = leadership_for(cur, [2, 1], {1, 2, 4})
    assert new is not None and (new.leader, new.isr, new.leader_epoch) == (2, (1, 2), 8)
    assert leadership_for(cur, [3], {1, 2, 3, 4}) is None  # nobody in sync could lead
    offline = LeaderAndIsr(NO_LEADER, 3, (1,))
    kept = leadership_for(offline, [2, 3], {2, 3})
    assert kept is not None and (kept.leader, kept.isr) == (NO_LEADER, (1,))


def test_topic_znode_version_2_round_trip_and_version_1_still_read() -> None:
    moving = ReplicaAssignment((3, 4, 1, 2), adding=(3, 4), removing=(1, 2))
    raw = TopicZNode.encode_full({0: moving, 1: ReplicaAssignment((2, 3))})
    assert json.loads(raw) == {"version": 2, "partitions": {"0": [3, 4, 1, 2], "1": [2, 3]},
                               "adding_replicas": {"0": [3, 4]}, "removing_replicas": {"0": [1, 2]}}
    assert TopicZNode.decode_full("t", raw) == {0: moving, 1: ReplicaAssignment((2, 3))}
    assert TopicZNode.decode("t", raw) == {0: [3, 4, 1, 2], 1: [2, 3]}
    old = b'{"version":1,"partitions":{"0":[1,2]}}'
    assert TopicZNode.decode_full("t", old) == {0: ReplicaAssignment((1, 2))}
    # Nothing moving: the version 1 JSON, byte for byte as before.
    assert TopicZNode.encode_full({0: ReplicaAssignment((1, 2))}) == TopicZNode.encode({0: [1, 2]}) == old


# ------------------------------------------------------------------ the controller (in-memory ZooKeeper)


def reassign(h: Harness, partitions: dict[tuple[str, int], list[int] | None]) -> dict[tuple[str, int], int]:
    fut = h.controller.submit_partition_reassignments(partitions)
    h.run()
    return {tp: code for tp, (code, _m) in fut.result(timeout=0).items()}


def znode(h: Harness) -> dict[int, ReplicaAssignment]:
    node = h.server.node(TopicZNode.path("t"))
    assert node is not None and node[0] is not None
    return TopicZNode.decode_full("t", node[0])


def leader_expands_isr(h: Harness, partition: int, isr: tuple[int, ...]) -> None:
    """What a leader does when followers catch up: the state znode's ISR, then a notification."""
    gw, client = h.gateway(f"leader-{len(h.channel.sent)}")
    st = gw.get_partition_state("t", partition)
    assert st is not None
    lai = st.leader_and_isr
    new = LeaderIsrAndControllerEpoch(LeaderAndIsr(lai.leader, lai.leader_epoch, isr), st.controller_epoch)
    client.set(TopicPartitionStateZNode.path("t", partition), TopicPartitionStateZNode.encode(new),
               version=lai.zk_version)
    gw.create_isr_change_notification([TopicPartitionId("t", partition)])
    h.run()


def leader_of(h: Harness, partition: int) -> LeaderAndIsr:
    st = h.controller.zk.get_partition_state("t", partition)
    assert st is not None
    return st.leader_and_isr


def stops(h: Harness, broker_id: int) -> list[tuple[str, int]]:
    return [(p.topic_name, p.partition_index) for b, m, r in h.channel.sent if m == "StopReplica" and b == broker_id
            for p in r.partitions if p.delete_partition]


def four_brokers() -> Harness:
    h = started()
    h.register(4)
    h.run()
    assert 4 in h.controller.ctx.live_brokers
    return h


def test_cancel_reverts_to_the_original_replicas_and_stops_the_adding_ones() -> None:
    h = four_brokers()
    assert reassign(h, {("t", 0): [4, 2, 3]}) == {("t", 0): E.NONE}
    assert znode(h)[0] == ReplicaAssignment((4, 2, 3, 1), adding=(4,), removing=(1,))
    assert h.controller.ctx.reassignments[("t", 0)] == ((4,), (1,))
    assert any(4 in ps.adding_replicas for req in h.channel.leader_and_isr(4) for ps in req.partition_states)
    # Another partition is taken while the first moves (Kafka takes each partition on its own).
    assert reassign(h, {("t", 1): [3, 4, 2]}) == {("t", 1): E.NONE}
    assert znode(h)[1].being_reassigned and znode(h)[0].being_reassigned
    assert reassign(h, {("t", 0): None, ("t", 7): None}) == {("t", 0): E.NONE, ("t", 7): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert znode(h)[0] == ReplicaAssignment((2, 3, 1))  # RS - AR: Kafka's order of the original set
    assert ("t", 0) not in h.controller.ctx.reassignments
    assert ("t", 0) in stops(h, 4)
    state = h.controller.zk.get_partition_state("t", 0)
    assert state is not None and 4 not in state.leader_and_isr.isr and state.leader_and_isr.leader in (1, 2, 3)
    assert znode(h)[1].being_reassigned  # untouched
    assert reassign(h, {("t", 0): None}) == {("t", 0): E.NO_REASSIGNMENT_IN_PROGRESS}


def test_completion_moves_leadership_into_the_target_and_a_cancel_keeps_a_leader_of_the_original() -> None:
    h = four_brokers()
    reassign(h, {("t", 0): [4, 2, 3]})
    leader_expands_isr(h, 0, (1, 2, 3, 4))
    # Complete (every target replica in sync): 1 led and was removed, so the target's first leads.
    assert ("t", 0) not in h.controller.ctx.reassignments and znode(h)[0] == ReplicaAssignment((4, 2, 3))
    assert leader_of(h, 0).leader == 4 and ("t", 0) in stops(h, 1)
    reassign(h, {("t", 0): [4, 1]})
    assert znode(h)[0] == ReplicaAssignment((4, 1, 2, 3), adding=(1,), removing=(2, 3))
    assert reassign(h, {("t", 0): None}) == {("t", 0): E.NONE}
    assert znode(h)[0] == ReplicaAssignment((4, 2, 3))  # the original of the second reassignment
    assert leader_of(h, 0).leader == 4


def test_cancel_of_a_leading_adding_replica_hands_leadership_to_an_original_one() -> None:
    h = four_brokers()
    reassign(h, {("t", 0): [4, 3, 2]})  # RS [4, 3, 2, 1]: 4 is the preferred replica while it runs
    gw = h.gateway("partial")[0]
    leader_expands_isr(h, 0, (1, 4))  # 4 caught up, 2 and 3 fell behind: not complete
    assert ("t", 0) in h.controller.ctx.reassignments
    assert gw.create_preferred_replica_election([TopicPartitionId("t", 0)])
    h.run()
    assert leader_of(h, 0).leader == 4
    assert reassign(h, {("t", 0): None}) == {("t", 0): E.NONE}
    lai = leader_of(h, 0)
    assert (lai.leader, lai.isr) == (1, (1,))  # the only original replica in sync
    assert znode(h)[0] == ReplicaAssignment((3, 2, 1)) and ("t", 0) in stops(h, 4)


def test_a_cancel_no_original_replica_could_lead_is_refused() -> None:
    h = four_brokers()
    reassign(h, {("t", 0): [4, 3, 2]})
    leader_expands_isr(h, 0, (1, 4))
    h.gateway("pe")[0].create_preferred_replica_election([TopicPartitionId("t", 0)])
    h.run()
    leader_expands_isr(h, 0, (4,))  # the original replicas fell out of the ISR
    assert reassign(h, {("t", 0): None}) == {("t", 0): E.REASSIGNMENT_IN_PROGRESS}
    assert leader_of(h, 0).leader == 4 and znode(h)[0].being_reassigned


def test_a_new_target_replaces_the_running_one() -> None:
    h = four_brokers()
    reassign(h, {("t", 0): [4, 2, 3]})
    assert reassign(h, {("t", 0): [1, 2, 3]}) == {("t", 0): E.NONE}  # back to where it was: done at once
    assert znode(h)[0] == ReplicaAssignment((1, 2, 3))
    assert ("t", 0) in stops(h, 4) and ("t", 0) not in h.controller.ctx.reassignments


def test_completion_when_the_target_is_in_sync_and_a_failover_resumes_from_the_topic_znode() -> None:
    h = four_brokers()
    reassign(h, {("t", 0): [4, 2, 3]})
    # A new controller (this one resigns) learns the reassignment from the topic znode alone.
    h.controller._resign(delete_znode=True)
    h.controller.put(Reelect())
    h.run()
    assert h.controller.active and h.controller.ctx.reassignments[("t", 0)] == ((4,), (1,))
    leader_expands_isr(h, 0, (1, 2, 3, 4))
    assert znode(h)[0] == ReplicaAssignment((4, 2, 3))
    assert ("t", 0) in stops(h, 1) and ("t", 0) not in h.controller.ctx.reassignments
    lai = leader_of(h, 0)
    assert lai.leader in (4, 2, 3) and 1 not in lai.isr


def test_the_legacy_znode_still_works_and_an_api_request_takes_its_partition_over() -> None:
    h = four_brokers()
    admin = h.gateway("admin2")[0]
    assert admin.create_partition_reassignment({TopicPartitionId("t", 0): [4, 2, 3],
                                                TopicPartitionId("t", 1): [9, 1]})
    h.run()
    assert znode(h)[0] == ReplicaAssignment((4, 2, 3, 1), adding=(4,), removing=(1,))
    # The refused partition (broker 9) left the znode; the running one stays until it completes.
    assert admin.get_partition_reassignment() == {TopicPartitionId("t", 0): [4, 2, 3]}
    assert reassign(h, {("t", 0): None}) == {("t", 0): E.NONE}
    assert admin.get_partition_reassignment() is None
    assert znode(h)[0] == ReplicaAssignment((2, 3, 1))


def test_not_controller_answers_at_once() -> None:
    h = Harness()
    fut = h.controller.submit_partition_reassignments({("t", 0): [1, 2, 3]})
    assert fut.result(timeout=0) == {("t", 0): (E.NOT_CONTROLLER, "this broker is not the controller")}


def test_partitions_added_while_one_moves_keep_its_adding_and_removing_replicas() -> None:
    """CreatePartitions rewrites the topic znode (Kafka's addPartitions keeps the full assignment)."""
    h = four_brokers()
    reassign(h, {("t", 0): [4, 2, 3]})
    gw = h.gateway("admin3")[0]
    loaded = gw.get_assignment_with_version("t")
    assert loaded is not None
    assignment, version = loaded
    assert gw.set_assignment_if_version("t", {**assignment, 2: [1, 2, 3]}, version)
    assert znode(h)[0] == ReplicaAssignment((4, 2, 3, 1), adding=(4,), removing=(1,))
    assert znode(h)[2] == ReplicaAssignment((1, 2, 3))
    h.run()
    assert ("t", 2) in h.controller.ctx.leadership and h.controller.ctx.reassignments[("t", 0)] == ((4,), (1,))
    assert gw.get_ongoing_reassignments() == {TopicPartitionId("t", 0): znode(h)[0]}
