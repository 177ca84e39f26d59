"""Transactions' API surface, pure parts (issue 31, KIP-98): the Kafka-wire translations of
AddPartitionsToTxn / AddOffsetsToTxn / EndTxn / TxnOffsetCommit / InitProducerId (PRODUCER_FENCED
said as INVALID_PRODUCER_EPOCH to versions before KIP-588's, as Kafka 2.8), the TransactionalId
ACL resource, and the znode schemas of transactions' pending group offsets."""

from __future__ import annotations

from typing import Any

import pytest
from kafka_frames import frame

from broker.coordinator.group.group_state import OFFSETS_TOPIC_PARTITIONS, offsets_partition_for
from broker.network import kafka_wire as kw
from broker.security.authorizer import ALLOW, TRANSACTIONAL_ID, Acl, AclAuthorizer, Resource
from broker.security.principal import user
from proto import minikafka_pb2 as pb
from zk.data import CorruptZnodeError, PendingTxnOffsets, TxnOffsetsZNode

E = pb.ErrorCode
FENCED, OLD_FENCED = E.PRODUCER_FENCED, E.INVALID_PRODUCER_EPOCH


def translate(api_key: int, version: int, values: dict[str, Any], answer: Any) -> tuple[Any, Any]:
    d = kw.decode_request(frame(api_key, version, values))
    plan = kw.to_pb(d)
    assert len(plan) == 1
    return plan[0][1], kw.from_pb(d, [answer])


@pytest.mark.parametrize(("version", "said"), [(0, OLD_FENCED), (1, OLD_FENCED), (2, FENCED), (3, FENCED)])
def test_add_partitions_to_txn(version: int, said: int) -> None:
    req, resp = translate(24, version, {
        "v3_and_below_transactional_id": "t", "v3_and_below_producer_id": 7, "v3_and_below_producer_epoch": 2,
        "v3_and_below_topics": [{"name": "a", "partitions": [0, 2]}]},
        pb.AddPartitionsToTxnResponse(topics=[pb.AddPartitionsToTxnTopicResult(name="a", partitions=[
            pb.AddPartitionsToTxnPartitionResult(partition=0, error_code=FENCED),
            pb.AddPartitionsToTxnPartitionResult(partition=2, error_code=E.NONE)])]))
    assert (req.transactional_id, req.producer_id, req.producer_epoch) == ("t", 7, 2)
    assert [(t.name, list(t.partitions)) for t in req.topics] == [("a", [0, 2])]
    [topic] = resp.results_by_topic_v3_and_below
    assert [(p.partition_index, int(p.partition_error_code)) for p in topic.results_by_partition] == \
        [(0, said), (2, 0)]


@pytest.mark.parametrize(("version", "said"), [(1, OLD_FENCED), (2, FENCED), (3, FENCED)])
def test_end_txn_and_add_offsets(version: int, said: int) -> None:
    req, resp = translate(26, version, {"transactional_id": "t", "producer_id": 7, "producer_epoch": 2,
                                        "committed": True}, pb.EndTxnResponse(error_code=FENCED))
    assert req.committed and req.transactional_id == "t"
    assert int(resp.error_code) == said
    req, resp = translate(25, version, {"transactional_id": "t", "producer_id": 7, "producer_epoch": 2,
                                        "group_id": "g"}, pb.AddOffsetsToTxnResponse(error_code=FENCED))
    assert req.group_id == "g"
    assert int(resp.error_code) == said


@pytest.mark.parametrize(("version", "said"), [(2, OLD_FENCED), (3, FENCED)])
def test_txn_offset_commit(version: int, said: int) -> None:
    partition = {"partition_index": 1, "committed_offset": 42, "committed_metadata": "m"}
    if version >= 2:
        partition["committed_leader_epoch"] = 5
    values: dict[str, Any] = {"transactional_id": "t", "group_id": "g", "producer_id": 7, "producer_epoch": 2,
                              "topics": [{"name": "a", "partitions": [partition]}]}
    if version >= 3:
        values |= {"generation_id": 3, "member_id": "m-1", "group_instance_id": None}
    req, resp = translate(28, version, values, pb.TxnOffsetCommitResponse(topics=[pb.TxnOffsetCommitTopicResponse(
        name="a", partitions=[pb.TxnOffsetCommitPartitionResponse(partition=1, error_code=FENCED)])]))
    assert (req.group_id, req.producer_id, req.generation_id) == ("g", 7, 3 if version >= 3 else -1)
    assert [(p.partition, p.offset, p.metadata) for t in req.topics for p in t.partitions] == [(1, 42, "m")]
    assert [int(p.error_code) for t in resp.topics for p in t.partitions] == [said]


@pytest.mark.parametrize(("version", "said"), [(3, OLD_FENCED), (4, FENCED)])
def test_init_producer_id_fenced_by_version(version: int, said: int) -> None:
    _req, resp = translate(22, version, {"transactional_id": "t", "transaction_timeout": 60000},
                           pb.InitProducerIdResponse(error_code=FENCED, producer_id=-1, producer_epoch=-1))
    assert int(resp.error_code) == said


def test_api_versions_advertise_the_transaction_apis() -> None:
    for key, name in ((24, "AddPartitionsToTxn"), (25, "AddOffsetsToTxn"), (26, "EndTxn"), (28, "TxnOffsetCommit")):
        assert kw.SUPPORTED[key] == (name, 0, 3)
    assert kw.SUPPORTED[22][1:] == (0, 4)


def test_offset_fetch_v7_asks_for_stable_offsets() -> None:
    req, _ = translate(9, 7, {"group_id": "g", "topics": None, "require_stable": True},
                       pb.OffsetFetchResponse())
    assert req.require_stable
    req, _ = translate(9, 6, {"group_id": "g", "topics": None}, pb.OffsetFetchResponse())
    assert not req.require_stable


def test_transactional_id_acls_as_kafka() -> None:
    alice, bob = user("alice"), user("bob")
    a = AclAuthorizer()
    a.set_acls(Resource(TRANSACTIONAL_ID, "tx"), [Acl("User:alice", "*", "Write", ALLOW)])
    assert a.authorize(alice, "h", "Write", Resource(TRANSACTIONAL_ID, "tx"))
    assert a.authorize(alice, "h", "Describe", Resource(TRANSACTIONAL_ID, "tx"))  # Write implies Describe
    assert not a.authorize(bob, "h", "Write", Resource(TRANSACTIONAL_ID, "tx"))
    assert not a.authorize(alice, "h", "Write", Resource(TRANSACTIONAL_ID, "other"))


def test_pending_offsets_znodes() -> None:
    p = PendingTxnOffsets(3, (("a", 0, 10, ""), ("b", 2, 7, "meta")))
    assert PendingTxnOffsets.decode(p.encode()) == p
    with pytest.raises(CorruptZnodeError):
        PendingTxnOffsets.decode(b'{"producer_epoch": "x", "offsets": []}')
    name = TxnOffsetsZNode.index(7, 1234, "my-group-1").rsplit("/", 1)[1]
    assert TxnOffsetsZNode.parse_index(name) == (1234, "my-group-1")
    assert TxnOffsetsZNode.parse_index("junk") is None
    # The group's partition of __consumer_offsets: the same on every broker, whatever the live set.
    assert offsets_partition_for("my-group-1") == offsets_partition_for("my-group-1")
    assert all(0 <= offsets_partition_for(f"g{i}") < OFFSETS_TOPIC_PARTITIONS for i in range(500))
    assert len({offsets_partition_for(f"g{i}") for i in range(500)}) == OFFSETS_TOPIC_PARTITIONS
