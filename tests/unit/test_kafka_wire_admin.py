"""Kafka's admin APIs on the Kafka listener (issue 30): ElectLeaders, Alter/ListPartitionReassignments,
Create/Describe/DeleteAcls and Describe/AlterUserScramCredentials translated to the protobuf requests
the gRPC path answers, and back; the ACL filters' pattern types; the controller's unclean election."""

from __future__ import annotations

from typing import Any
from unittest.mock import MagicMock

from kafka_frames import frame, read_response
from kio.schema.errors import ErrorCode
from test_controller_shell import started

from broker.network import kafka_wire as kw
from broker.security.authorizer import CLUSTER, CLUSTER_NAME, TOPIC, Acl, Resource
from broker.server.admin import AdminManager
from proto import minikafka_pb2 as pb

E = pb.ErrorCode


def _plan(api_key: int, version: int, values: dict[str, Any]) -> tuple[kw.Decoded, kw.Plan]:
    d = kw.decode_request(frame(api_key, version, values))
    return d, kw.to_pb(d)


def _answer(d: kw.Decoded, answers: list[Any]) -> Any:
    _c, body = read_response(kw.encode_response(d.header, kw.from_pb(d, answers)), d.header.api_key,
                             d.header.api_version)
    return body


def test_elect_leaders_types_null_and_empty_partitions_and_per_topic_results() -> None:
    d, plan = _plan(43, 1, {"election_type": 1, "timeout": 3000, "topic_partitions": [
        {"topic": "a", "partitions": [0, 2]}, {"topic": "b", "partitions": [1]}]})
    ((api, req),) = plan
    assert api == "ElectLeaders" and req.election_type == pb.ElectionType.UNCLEAN and req.timeout_ms == 3000
    assert [(p.topic_name, p.partition_index) for p in req.partitions] == [("a", 0), ("a", 2), ("b", 1)]
    body = _answer(d, [pb.ElectLeadersResponse(results=[
        pb.PartitionResult(topic_name="a", partition_index=0),
        pb.PartitionResult(topic_name="a", partition_index=2, error_code=E.ELECTION_NOT_NEEDED),
        pb.PartitionResult(topic_name="b", partition_index=1, error_code=E.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                           error_message="none live")])])
    assert body.error_code == ErrorCode.none
    a, b = body.replica_election_results
    assert (a.topic, [(p.partition_id, p.error_code) for p in a.partition_result]) == \
        ("a", [(0, ErrorCode.none), (2, ErrorCode.election_not_needed)])
    assert (b.topic, b.partition_result[0].error_message) == ("b", "none live")
    # v0 is preferred; null is every partition; an empty list elects nothing (no call at all).
    ((_api, req0),) = _plan(43, 0, {"topic_partitions": None})[1]
    assert req0.election_type == pb.ElectionType.PREFERRED and not req0.partitions
    d, plan = _plan(43, 2, {"topic_partitions": []})
    assert plan == [] and _answer(d, []).replica_election_results == ()


def test_a_refused_election_says_so_on_every_partition_in_v0_without_a_top_level_code() -> None:
    d = _plan(43, 0, {"topic_partitions": [{"topic": "a", "partitions": [0]}]})[0]
    code = E.CLUSTER_AUTHORIZATION_FAILED
    body = _answer(d, [pb.ElectLeadersResponse(error_code=code, results=[
        pb.PartitionResult(topic_name="a", partition_index=0, error_code=code)])])
    assert body.replica_election_results[0].partition_result[0].error_code == ErrorCode.cluster_authorization_failed


def test_alter_partition_reassignments_null_replicas_cancel() -> None:
    d, plan = _plan(45, 0, {"timeout": 5000, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "replicas": [3, 1]}, {"partition_index": 1, "replicas": None}]}]})
    ((api, req),) = plan
    assert api == "AlterPartitionReassignments" and req.timeout_ms == 5000
    assert [(p.partition_index, list(p.replicas), p.cancel) for p in req.partitions] == [(0, [3, 1], False),
                                                                                          (1, [], True)]
    body = _answer(d, [pb.AlterPartitionReassignmentsResponse(results=[
        pb.PartitionResult(topic_name="t", partition_index=0),
        pb.PartitionResult(topic_name="t", partition_index=1, error_code=E.NO_REASSIGNMENT_IN_PROGRESS)])])
    assert [(p.partition_index, p.error_code) for p in body.responses[0].partitions] == \
        [(0, ErrorCode.none), (1, ErrorCode.no_reassignment_in_progress)]


def test_list_partition_reassignments_filters_and_shows_adding_and_removing() -> None:
    answer = pb.ListPartitionReassignmentsResponse(reassignments=[
        pb.ReassignablePartition(topic_name="t", partition_index=0, replicas=[2, 3], current_replicas=[1, 2, 3],
                                 adding_replicas=[3], removing_replicas=[1]),
        pb.ReassignablePartition(topic_name="u", partition_index=4, replicas=[1])])
    d, plan = _plan(46, 0, {"topics": None})
    assert plan[0][0] == "ListPartitionReassignments"
    body = _answer(d, [answer])
    t, u = body.topics
    p = t.partitions[0]
    assert (t.name, p.replicas, p.adding_replicas, p.removing_replicas) == ("t", (1, 2, 3), (3,), (1,))
    assert (u.name, u.partitions[0].replicas) == ("u", (1,))
    d, _ = _plan(46, 0, {"topics": [{"name": "u", "partition_indexes": [4]}, {"name": "t", "partition_indexes": [9]}]})
    assert [x.name for x in _answer(d, [answer]).topics] == ["u"]


def test_acl_creations_and_filters_map_kafkas_enums() -> None:
    d, plan = _plan(30, 2, {"creations": [
        {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3, "principal": "User:alice",
         "host": "*", "operation": 3, "permission_type": 3},
        {"resource_type": 4, "resource_name": "kafka-cluster", "resource_pattern_type": 4, "principal": "User:bob",
         "host": "*", "operation": 7, "permission_type": 2}]})
    ((api, req),) = plan
    assert api == "CreateAcls"
    a, b = req.creations
    assert (a.resource_type, a.pattern_type, a.operation, a.permission_type) == (
        pb.AclResourceType.TOPIC_RESOURCE, pb.AclPatternType.PATTERN_LITERAL, "Read", "Allow")
    assert (b.resource_type, b.pattern_type, b.operation, b.permission_type) == (
        pb.AclResourceType.CLUSTER_RESOURCE, pb.AclPatternType.PATTERN_PREFIXED, "Alter", "Deny")
    body = _answer(d, [pb.CreateAclsResponse(results=[
        pb.AclResult(), pb.AclResult(error_code=E.INVALID_REQUEST, error_message="no prefixed")])])
    assert [(r.error_code, r.error_message) for r in body.results] == [
        (ErrorCode.none, None), (ErrorCode.invalid_request, "no prefixed")]
    # A filter: ANY (1) is "anything"; null strings too.
    d, plan = _plan(29, 1, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                            "principal_filter": "User:alice", "host_filter": None, "operation": 1,
                            "permission_type": 1})
    f = plan[0][1].filter
    assert (f.resource_type, f.resource_name, f.principal, f.host, f.operation, f.permission_type) == (
        pb.AclResourceType.ANY_RESOURCE, "", "User:alice", "", "", "")
    binding = pb.AclBinding(resource_type=pb.AclResourceType.TOPIC_RESOURCE, resource_name="t",
                            principal="User:alice", host="*", operation="Read", permission_type="Allow")
    body = _answer(d, [pb.DescribeAclsResponse(acls=[binding, pb.AclBinding(
        resource_type=pb.AclResourceType.TOPIC_RESOURCE, resource_name="t", principal="User:alice", host="*",
        operation="Write", permission_type="Deny")])])
    (res,) = body.resources
    assert (res.resource_type, res.resource_name, res.pattern_type) == (2, "t", 3)
    assert [(x.operation, x.permission_type) for x in res.acls] == [(3, 3), (4, 2)]
    d, plan = _plan(31, 2, {"filters": [{"resource_type_filter": 2, "resource_name_filter": "t",
                                         "pattern_type_filter": 2, "principal_filter": None, "host_filter": None,
                                         "operation": 0, "permission_type": 3}]})
    (f,) = plan[0][1].filters
    assert (f.pattern_type, f.operation) == (pb.AclPatternType.PATTERN_MATCH, "Unknown")  # UNKNOWN matches nothing
    body = _answer(d, [pb.DeleteAclsResponse(filter_results=[pb.DeleteAclsFilterResult(matching_acls=[binding])])])
    (m,) = body.filter_results[0].matching_acls
    assert (m.resource_type, m.resource_name, m.pattern_type, m.operation, m.permission_type, m.principal) == (
        2, "t", 3, 3, 3, "User:alice")


def test_security_disabled_is_answered_as_kafka_does() -> None:
    d, _p = _plan(29, 2, {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1, "permission_type": 1})
    body = _answer(d, [pb.DescribeAclsResponse(error_code=E.SECURITY_DISABLED)])
    assert body.error_code == ErrorCode.security_disabled and body.resources == ()


def test_scram_credentials_map_mechanisms_and_answer_once_per_user() -> None:
    d, plan = _plan(51, 0, {"deletions": [{"name": "old", "mechanism": 2}], "upsertions": [
        {"name": "alice", "mechanism": 1, "iterations": 8192, "salt": b"s" * 16, "salted_password": b"p" * 32},
        {"name": "alice", "mechanism": 1, "iterations": 1, "salt": b"s" * 16, "salted_password": b"p" * 32}]})
    ((api, req),) = plan
    assert api == "AlterUserScramCredentials"
    assert [(x.name, x.mechanism) for x in req.deletions] == [("old", "SCRAM-SHA-512")]
    u = req.upsertions[0]
    assert (u.name, u.mechanism, u.iterations) == ("alice", "SCRAM-SHA-256", 8192)
    body = _answer(d, [pb.AlterUserScramCredentialsResponse(results=[
        pb.UserResult(user="old", error_code=E.UNSUPPORTED_SASL_MECHANISM), pb.UserResult(user="alice"),
        pb.UserResult(user="alice", error_code=E.UNACCEPTABLE_CREDENTIAL, error_message="iterations")])])
    assert [(r.user, r.error_code) for r in body.results] == [
        ("old", ErrorCode.unsupported_sasl_mechanism), ("alice", ErrorCode.unacceptable_credential)]
    d, plan = _plan(50, 0, {"users": None})
    assert list(plan[0][1].users) == []
    body = _answer(d, [pb.DescribeUserScramCredentialsResponse(results=[
        pb.UserScramDescription(user="alice", mechanism="SCRAM-SHA-256", iterations=8192),
        pb.UserScramDescription(user="nobody", error_code=E.RESOURCE_NOT_FOUND, error_message="none")])])
    alice, nobody = body.results
    assert [(c.mechanism, c.iterations) for c in alice.credential_infos] == [(1, 8192)]
    assert (nobody.error_code, nobody.credential_infos) == (ErrorCode.resource_not_found, ())


def test_acl_filters_pattern_types_against_literal_bindings() -> None:
    match = AdminManager._filter_matches
    admin: Any = MagicMock()
    admin._binding = AdminManager._binding
    named, wild = Resource(TOPIC, "t"), Resource(TOPIC, "*")
    acl = Acl("User:a", "*", "Read", "Allow")

    def f(pattern: int, name: str = "t") -> pb.AclFilter:
        return pb.AclFilter(resource_type=pb.AclResourceType.TOPIC_RESOURCE, resource_name=name,
                            pattern_type=pattern)  # type: ignore[arg-type]

    P = pb.AclPatternType
    assert match(admin, f(P.PATTERN_LITERAL), named, acl) and not match(admin, f(P.PATTERN_LITERAL), wild, acl)
    assert match(admin, f(P.PATTERN_MATCH), named, acl) and match(admin, f(P.PATTERN_MATCH), wild, acl)
    assert not match(admin, f(P.PATTERN_MATCH), Resource(TOPIC, "u"), acl)
    assert not match(admin, f(P.PATTERN_PREFIXED), named, acl) and not match(admin, f(-1), named, acl)
    assert match(admin, f(P.PATTERN_ANY, ""), Resource(CLUSTER, CLUSTER_NAME), acl) is False  # other type


def test_the_controller_elects_an_out_of_sync_replica_only_when_asked_unclean() -> None:
    """ElectLeaders UNCLEAN (Kafka's ReplicaLeaderElection): with every ISR member dead, a live
    replica out of the ISR leads; a partition whose leader is live needs no election."""
    h = started()
    h.kill(3)
    h.run()
    h.kill(2)
    h.run()
    h.kill(1)
    h.run()
    h.register(1)  # the last ISR member is back: it leads again, cleanly
    h.register(2)  # out of the ISR: stays a follower
    h.run()
    lai = h.controller.ctx.leadership[("t", 0)].leader_and_isr
    assert lai.leader == 1 and 2 not in lai.isr
    h.kill(1)
    h.run()
    assert h.controller.ctx.leadership[("t", 0)].leader_and_isr.leader == -1  # unclean is disabled
    fut = h.controller.submit_unclean_election([("t", 0), ("nope", 0)])
    h.run()
    result = fut.result(timeout=0)
    assert result[("t", 0)][0] == E.NONE and result[("nope", 0)][0] == E.UNKNOWN_TOPIC_OR_PARTITION
    assert h.controller.ctx.leadership[("t", 0)].leader_and_isr.leader == 2
    fut = h.controller.submit_unclean_election([("t", 0)])
    h.run()
    assert fut.result(timeout=0)[("t", 0)][0] == E.ELECTION_NOT_NEEDED


def test_a_user_altered_twice_in_one_request_is_a_duplicate_resource() -> None:
    """Kafka's AlterUserScramCredentials: the same (user, mechanism) twice is DUPLICATE_RESOURCE
    (92) for that user, once, and none of its alterations is applied; other users are."""
    import asyncio

    admin: Any = MagicMock()
    admin._check_user = AdminManager._check_user
    upsert: dict[str, Any] = {"mechanism": "SCRAM-SHA-256", "iterations": 8192, "salt": b"s" * 16,
                              "salted_password": b"p" * 32}
    req = pb.AlterUserScramCredentialsRequest(
        deletions=[pb.ScramCredentialDeletion(name="alice", mechanism="SCRAM-SHA-256")],
        upsertions=[pb.ScramCredentialUpsertion(name="alice", **upsert), pb.ScramCredentialUpsertion(name="bob", **upsert)])
    resp = asyncio.run(AdminManager.alter_user_scram_credentials(admin, req))
    assert [(r.user, r.error_code) for r in resp.results] == [("alice", E.DUPLICATE_RESOURCE), ("bob", E.NONE)]
    assert [c.args[0] for c in admin.zk.set_user_config.call_args_list] == ["bob"]


def test_the_controller_makes_preferred_elections_asked_by_elect_leaders() -> None:
    """ElectLeaders PREFERRED as Kafka 2.4+ (a ReplicaLeaderElection event, no znode): a partition
    led by its preferred replica needs none; a preferred replica out of the ISR cannot lead; once
    back in the ISR it does. Any other broker's controller answers NOT_CONTROLLER."""
    from broker.replication.control import write_isr
    from zk.data import TopicPartitionId

    h = started()
    tp = ("t", 1)  # replicas [3, 1, 2]: 3 is preferred
    fut = h.controller.submit_preferred_election([tp, ("nope", 0)])
    h.run()
    result = fut.result(timeout=0)
    assert result[tp][0] == E.ELECTION_NOT_NEEDED and result[("nope", 0)][0] == E.UNKNOWN_TOPIC_OR_PARTITION
    h.kill(3)
    h.run()
    h.register(3)
    h.run()
    lai = h.controller.ctx.leadership[tp].leader_and_isr
    assert lai.leader != 3 and 3 not in lai.isr
    fut = h.controller.submit_preferred_election([tp])
    h.run()
    assert fut.result(timeout=0)[tp][0] == E.PREFERRED_LEADER_NOT_AVAILABLE
    # The leader takes 3 back into the ISR (its conditional write and notification, as a broker's).
    gw, _client = h.gateway("leader")
    st = gw.get_partition_state(*tp)
    assert st is not None
    write_isr(gw, tp[0], tp[1], st.leader_and_isr.leader, st.leader_and_isr.leader_epoch, st.controller_epoch,
              (*st.leader_and_isr.isr, 3), st.leader_and_isr.zk_version)
    gw.create_isr_change_notification([TopicPartitionId(*tp)])
    h.run()
    fut = h.controller.submit_preferred_election([tp])
    h.run()
    assert fut.result(timeout=0)[tp][0] == E.NONE
    assert h.controller.ctx.leadership[tp].leader_and_isr.leader == 3
    h.controller.active = False  # as on any broker that is not the controller
    assert h.controller.submit_preferred_election([tp]).result(timeout=0)[tp][0] == E.NOT_CONTROLLER
