"""Pure controller logic: placement (S1), elections (S7), state machine tables, znode schemas (S10)."""

from __future__ import annotations

import json

import pytest

from controller.assignment import assign_replicas, validate_manual_assignment
from controller.election import (
    controlled_shutdown_partition_leader_election,
    imbalanced_partitions,
    offline_partition_leader_election,
    preferred_replica_partition_leader_election,
    reassign_partition_leader_election,
)
from controller.state_machine import (
    VALID_PREVIOUS_PARTITION_STATES,
    VALID_PREVIOUS_REPLICA_STATES,
    ElectionStrategy,
    IllegalStateTransition,
    PartitionState,
    ReplicaState,
    check_partition_transition,
    check_replica_transition,
    elect_leader,
    initial_leader_and_isr,
    offline_leader_and_isr,
    remove_replica_from_isr,
)
from proto import errors
from zk.data import (
    BrokerIdZNode,
    BrokerRegistration,
    ControllerEpochZNode,
    ControllerZNode,
    CorruptZnodeError,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    PreferredReplicaElectionZNode,
    ReassignPartitionsZNode,
    TopicPartitionId,
    TopicPartitionStateZNode,
    TopicZNode,
)


def test_s1_1_replica_j_of_partition_i_on_broker_i_plus_j_mod_n() -> None:
    assert assign_replicas([3, 1, 2], 4, 3) == {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2], 3: [1, 2, 3]}
    assert assign_replicas([10, 20], 3, 1) == {0: [10], 1: [20], 2: [10]}


def test_s1_3_replication_factor_above_live_brokers_is_refused() -> None:
    with pytest.raises(errors.InvalidReplicationFactorError, match="larger than the number of live brokers"):
        assign_replicas([1, 2], 1, 3)
    with pytest.raises(errors.InvalidPartitionsError):
        assign_replicas([1, 2], 0, 1)
    with pytest.raises(errors.InvalidReplicationFactorError):
        assign_replicas([1, 2], 1, 0)


def test_manual_assignment_validation() -> None:
    validate_manual_assignment({0: [1, 2], 1: [2, 1]}, [1, 2])
    for bad in ({0: [1, 1]}, {0: [1], 1: [1, 2]}, {1: [1]}, {0: [9]}, {}):
        with pytest.raises(errors.InvalidReplicaAssignmentError):
            validate_manual_assignment(bad, [1, 2])


def test_s7_2_offline_election_picks_first_live_isr_member_in_assignment_order() -> None:
    r = offline_partition_leader_election([1, 2, 3], isr=[3, 2, 1], live={2, 3}, unclean_enabled=False)
    assert r is not None and (r.leader, r.isr, r.unclean) == (2, (3, 2), False)


def test_s7_3_no_live_isr_member_stays_offline_unless_unclean() -> None:
    assert offline_partition_leader_election([1, 2, 3], isr=[1], live={2, 3}, unclean_enabled=False) is None
    r = offline_partition_leader_election([1, 2, 3], isr=[1], live={3, 2}, unclean_enabled=True)
    assert r is not None and (r.leader, r.isr, r.unclean) == (2, (2,), True)
    assert offline_partition_leader_election([1, 2], isr=[1], live=set(), unclean_enabled=True) is None


def test_other_election_strategies() -> None:
    assert preferred_replica_partition_leader_election([1, 2], [1, 2], {1, 2}).leader == 1  # type: ignore[union-attr]
    assert preferred_replica_partition_leader_election([1, 2], [2], {1, 2}) is None  # preferred not in ISR
    assert reassign_partition_leader_election([4, 5], [2, 5], {5}).leader == 5  # type: ignore[union-attr]
    r = controlled_shutdown_partition_leader_election([1, 2, 3], [1, 2, 3], {1, 2, 3}, shutting_down={1})
    assert r is not None and (r.leader, r.isr) == (2, (2, 3))
    assert controlled_shutdown_partition_leader_election([1, 2], [1], {1, 2}, {1}) is None


def test_s7_1_every_leader_change_bumps_the_leader_epoch() -> None:
    cur = LeaderAndIsr(1, 4, (1, 2, 3), zk_version=7)
    d = elect_leader(ElectionStrategy.OFFLINE, cur, [1, 2, 3], live={2, 3})
    assert d is not None and d.leader_and_isr == LeaderAndIsr(2, 5, (2, 3), 7)  # zk_version: what to write against
    assert initial_leader_and_isr([3, 1, 2], live={1, 2}) == LeaderAndIsr(1, 0, (1, 2), -1)
    assert initial_leader_and_isr([3], live={1}) is None
    off = offline_leader_and_isr(LeaderAndIsr(1, 4, (1,), 7), live={2})
    assert (off.leader, off.leader_epoch, off.isr) == (-1, 5, (1,))  # last ISR member kept for clean election


def test_removing_a_replica_from_the_isr() -> None:
    cur = LeaderAndIsr(1, 2, (1, 2, 3), 5)
    assert remove_replica_from_isr(cur, 3) == LeaderAndIsr(1, 3, (1, 2), 5)
    assert remove_replica_from_isr(cur, 1) == LeaderAndIsr(-1, 3, (2, 3), 5)
    assert remove_replica_from_isr(cur, 9) is None
    assert remove_replica_from_isr(LeaderAndIsr(1, 2, (1,), 5), 1) == LeaderAndIsr(-1, 3, (1,), 5)


def test_state_machine_tables_match_kafka() -> None:
    P, R = PartitionState, ReplicaState
    assert VALID_PREVIOUS_PARTITION_STATES[P.ONLINE] == {P.NEW, P.ONLINE, P.OFFLINE}
    assert VALID_PREVIOUS_PARTITION_STATES[P.NON_EXISTENT] == {P.OFFLINE}
    check_partition_transition("t-0", P.NON_EXISTENT, P.NEW)
    with pytest.raises(IllegalStateTransition):
        check_partition_transition("t-0", P.NON_EXISTENT, P.ONLINE)
    with pytest.raises(IllegalStateTransition):
        check_partition_transition("t-0", P.ONLINE, P.NON_EXISTENT)
    assert VALID_PREVIOUS_REPLICA_STATES[R.DELETION_STARTED] == {R.OFFLINE}
    check_replica_transition("t-0/1", R.OFFLINE, R.DELETION_STARTED)
    with pytest.raises(IllegalStateTransition):
        check_replica_transition("t-0/1", R.ONLINE, R.DELETION_STARTED)
    # Every state is a target of the table, and every previous state is a real state.
    assert set(VALID_PREVIOUS_REPLICA_STATES) == set(R)
    assert set(VALID_PREVIOUS_PARTITION_STATES) == set(P)


def test_auto_rebalance_picks_brokers_over_the_imbalance_ratio() -> None:
    preferred = {("t", 0): 1, ("t", 1): 1, ("t", 2): 2, ("t", 3): 2}
    leaders = {("t", 0): 2, ("t", 1): 1, ("t", 2): 2, ("t", 3): 2}
    assert imbalanced_partitions(preferred, leaders, 10) == [("t", 0)]  # broker 1: 50% > 10%
    assert imbalanced_partitions(preferred, leaders, 50) == []


def test_s10_znode_schemas_byte_for_byte() -> None:
    st = LeaderIsrAndControllerEpoch(LeaderAndIsr(3, 7, (3, 1)), controller_epoch=4)
    raw = TopicPartitionStateZNode.encode(st)
    assert json.loads(raw) == {"controller_epoch": 4, "leader": 3, "version": 1, "leader_epoch": 7, "isr": [3, 1]}
    assert TopicPartitionStateZNode.decode("t", 0, raw, zk_version=9).leader_and_isr.zk_version == 9
    assert TopicZNode.path("t") == "/brokers/topics/t"
    assert TopicPartitionStateZNode.path("t", 2) == "/brokers/topics/t/partitions/2/state"
    assert json.loads(TopicZNode.encode({1: [2, 3], 0: [1, 2]})) == {"version": 1, "partitions": {"0": [1, 2],
                                                                                                 "1": [2, 3]}}
    assert json.loads(ControllerZNode.encode(2, 1234)) == {"version": 1, "brokerid": 2, "timestamp": "1234"}
    assert ControllerZNode.decode(b'{"version":1,"brokerid":5,"timestamp":"1"}') == 5
    assert ControllerEpochZNode.encode(12) == b"12" and ControllerEpochZNode.decode(b"12") == 12
    reg = BrokerIdZNode.decode(1, BrokerIdZNode.encode(BrokerRegistration(1, "h", 9, 77)), epoch=42)
    assert (reg.host, reg.port, reg.timestamp_ms, reg.epoch) == ("h", 9, 77, 42)
    body = json.loads(BrokerIdZNode.encode(BrokerRegistration(1, "h", 9, 77)))
    assert {"version", "host", "port", "timestamp"} <= set(body) and body["timestamp"] == "77"
    tps = [TopicPartitionId("a", 0)]
    assert PreferredReplicaElectionZNode.decode(PreferredReplicaElectionZNode.encode(tps)) == tps
    assert ReassignPartitionsZNode.decode(ReassignPartitionsZNode.encode({tps[0]: [1, 2]})) == {tps[0]: [1, 2]}
    for bad in (b"not json", b'{"partitions": 3}'):
        with pytest.raises(CorruptZnodeError):
            TopicZNode.decode("t", bad)


def test_a_context_copy_shares_assignments_but_a_changed_one_never_leaks_back() -> None:
    """Issue 29: the per-event copy shares each topic's assignment (copying 10,000 replica lists cost
    ~3 ms per event); the one writer, reassignment.set_replicas, replaces the topic's dict, so the
    original never sees a change made on the copy."""
    from controller.channel import RequestBatch
    from controller.context import ControllerContext
    from controller.partition_state_machine import Scope
    from controller.plan import Plan
    from controller.reassignment import set_replicas

    ctx = ControllerContext()
    ctx.assignments["t"] = {0: [1, 2, 3], 1: [2, 3, 1]}
    ctx.assignment_versions["t"] = 4
    copy = ctx.copy()
    scope = Scope(copy, Plan(RequestBatch(controller_id=1)), None, False)  # type: ignore[arg-type]
    set_replicas(scope, ("t", 0), [4, 5, 6])
    assert copy.assignments["t"][0] == [4, 5, 6]
    assert ctx.assignments["t"] == {0: [1, 2, 3], 1: [2, 3, 1]}
    assert ctx.assignment_versions["t"] == 4 and copy.assignment_versions["t"] == 5
