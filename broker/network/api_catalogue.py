"""The one catalogue of a broker's APIs (Kafka's ``ApiKeys`` with ``AbstractRequest.getErrorResponse``).

Theory of operation
-------------------
Every API a broker answers is ONE ``Api`` entry below: its name (the key of
``broker.server.kafka_apis.KafkaApis.handlers``, of the request metrics and of the logs), its
protobuf request and response types (``proto/minikafka.proto``), how its response says an error
code everywhere an error can be said (``error``: every topic/partition slot, or the top where the
response has one), which gRPC service answers it as a unary call of the same name, which
streaming call carries a sequence of it, whether it belongs to the control plane, and its Kafka
api key.

Who reads it:

* ``broker.network.request_guard.error_response`` - the typed fallback answer of any API;
* ``broker.server.kafka_apis.KafkaApis`` - its handler table must name exactly these APIs, and
  control-plane APIs are admitted (controller epoch, broker epoch) by what ``fenced`` says;
* ``broker.server.grpc_servicers`` - every unary gRPC method is generated from the entries whose
  ``service`` names it;
* ``broker.network.kafka_wire`` - the Kafka wire protocol's translations name these APIs, and the
  api keys agree (``tests/unit/test_api_catalogue.py``).

Adding an API: its messages and rpc in ``minikafka.proto``, one entry here, its handler in
``KafkaApis.handlers``. The module is pure (protobuf types only), so every layer may import it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from proto import minikafka_pb2 as pb

KAFKA_API: Final = "KafkaApi"  # the gRPC services (proto/minikafka.proto)
BROKER_CONTROL: Final = "BrokerControl"
CONTROLLER_API: Final = "ControllerApi"

ErrorResponse = Callable[[Any, pb.ErrorCode], Any]  # (request, wire error code) -> its response


@dataclass(frozen=True, slots=True)
class Api:
    name: str
    request: type[Any]
    response: type[Any]
    # (request, code) -> the response with ``code`` in every slot; None: the response's own error_code.
    error: ErrorResponse | None = None
    service: str | None = KAFKA_API  # the gRPC service with a unary method of this name; None: no such call
    stream: str | None = None  # the gRPC streaming method carrying a sequence of this API's requests
    control_plane: bool = False  # served on the control-plane listener only, to brokers only
    fenced: bool = False  # sent by the controller: admitted by the broker and controller epochs (S12.2)
    kafka_key: int | None = None  # Kafka's api key (ApiKeys), where Kafka has this API

    def error_response(self, request: Any, code: pb.ErrorCode) -> Any:
        """``request``'s response saying ``code`` (a wire code) wherever it can."""
        if self.error is None:
            return self.response(error_code=code)
        return self.error(request, code)


def _metadata(r: pb.MetadataRequest, c: pb.ErrorCode) -> pb.MetadataResponse:
    return pb.MetadataResponse(controller_id=-1, topics=[pb.TopicMetadata(name=t, error_code=c) for t in r.topics])


def _produce(r: pb.ProduceRequest, c: pb.ErrorCode) -> pb.ProduceResponse:
    return pb.ProduceResponse(topics=[pb.ProduceTopicResponse(name=t.name, partitions=[
        pb.ProducePartitionResponse(partition=p.partition, error_code=c, base_offset=-1, log_append_time_ms=-1,
                                    log_start_offset=-1) for p in t.partitions]) for t in r.topics])


def _fetch(r: pb.FetchRequest, c: pb.ErrorCode) -> pb.FetchResponse:
    return pb.FetchResponse(error_code=c, topics=[pb.FetchTopicResponse(name=t.name, partitions=[
        pb.FetchPartitionResponse(partition=p.partition, error_code=c, high_watermark=-1, last_stable_offset=-1,
                                  log_start_offset=-1, log_end_offset=-1) for p in t.partitions])
        for t in r.topics])


def _list_offsets(r: pb.ListOffsetsRequest, c: pb.ErrorCode) -> pb.ListOffsetsResponse:
    return pb.ListOffsetsResponse(topics=[pb.ListOffsetsTopicResponse(name=t.name, partitions=[
        pb.ListOffsetsPartitionResponse(partition=p.partition, error_code=c, timestamp=-1, offset=-1,
                                        leader_epoch=-1) for p in t.partitions]) for t in r.topics])


def _offsets_for_leader_epoch(r: pb.OffsetsForLeaderEpochRequest, c: pb.ErrorCode) -> pb.OffsetsForLeaderEpochResponse:
    return pb.OffsetsForLeaderEpochResponse(topics=[pb.OffsetForLeaderTopicResult(topic=t.topic, partitions=[
        pb.EpochEndOffset(partition=p.partition, error_code=c, leader_epoch=-1, end_offset=-1)
        for p in t.partitions]) for t in r.topics])


def _create_topics(r: pb.CreateTopicsRequest, c: pb.ErrorCode) -> pb.CreateTopicsResponse:
    return pb.CreateTopicsResponse(topics=[pb.CreatableTopicResult(name=t.name, error_code=c, num_partitions=-1,
                                                                   replication_factor=-1) for t in r.topics])


def _delete_topics(r: pb.DeleteTopicsRequest, c: pb.ErrorCode) -> pb.DeleteTopicsResponse:
    return pb.DeleteTopicsResponse(responses=[pb.DeletableTopicResult(name=n, error_code=c) for n in r.topic_names])


def _create_partitions(r: pb.CreatePartitionsRequest, c: pb.ErrorCode) -> pb.CreatePartitionsResponse:
    return pb.CreatePartitionsResponse(results=[pb.CreatePartitionsTopicResult(name=t.name, error_code=c)
                                                for t in r.topics])


def _delete_records(r: pb.DeleteRecordsRequest, c: pb.ErrorCode) -> pb.DeleteRecordsResponse:
    return pb.DeleteRecordsResponse(topics=[pb.DeleteRecordsTopicResult(name=t.name, partitions=[
        pb.DeleteRecordsPartitionResult(partition=p.partition, error_code=c, low_watermark=-1)
        for p in t.partitions]) for t in r.topics])


def _describe_configs(r: pb.DescribeConfigsRequest, c: pb.ErrorCode) -> pb.DescribeConfigsResponse:
    return pb.DescribeConfigsResponse(results=[pb.DescribeConfigsResult(
        error_code=c, resource_type=x.resource_type, resource_name=x.resource_name) for x in r.resources])


def _alter_configs(r: pb.AlterConfigsRequest, c: pb.ErrorCode) -> pb.AlterConfigsResponse:
    return pb.AlterConfigsResponse(responses=[pb.AlterConfigsResult(
        error_code=c, resource_type=x.resource_type, resource_name=x.resource_name) for x in r.resources])


def _init_producer_id(_r: pb.InitProducerIdRequest, c: pb.ErrorCode) -> pb.InitProducerIdResponse:
    return pb.InitProducerIdResponse(error_code=c, producer_id=-1, producer_epoch=-1)


def _describe_replicas(_r: pb.DescribeReplicasRequest, _c: pb.ErrorCode) -> pb.DescribeReplicasResponse:
    return pb.DescribeReplicasResponse(broker_id=-1)  # no error field: "no broker" says it


def _partition_results(response: type[Any]) -> ErrorResponse:
    """ElectLeaders and AlterPartitionReassignments: the code at the top and on every partition."""
    def error(r: Any, c: pb.ErrorCode) -> Any:
        return response(error_code=c, results=[pb.PartitionResult(
            topic_name=p.topic_name, partition_index=p.partition_index, error_code=c) for p in r.partitions])
    return error


def _create_acls(r: pb.CreateAclsRequest, c: pb.ErrorCode) -> pb.CreateAclsResponse:
    return pb.CreateAclsResponse(results=[pb.AclResult(error_code=c) for _ in r.creations])


def _delete_acls(r: pb.DeleteAclsRequest, c: pb.ErrorCode) -> pb.DeleteAclsResponse:
    return pb.DeleteAclsResponse(filter_results=[pb.DeleteAclsFilterResult(error_code=c) for _ in r.filters])


def _alter_user_scram_credentials(r: pb.AlterUserScramCredentialsRequest,
                                  c: pb.ErrorCode) -> pb.AlterUserScramCredentialsResponse:
    return pb.AlterUserScramCredentialsResponse(results=[
        pb.UserResult(user=name, error_code=c) for name in [*(u.name for u in r.deletions),
                                                            *(u.name for u in r.upsertions)]])


def _find_coordinator(_r: pb.FindCoordinatorRequest, c: pb.ErrorCode) -> pb.FindCoordinatorResponse:
    return pb.FindCoordinatorResponse(error_code=c, node_id=-1)


def _join_group(r: pb.JoinGroupRequest, c: pb.ErrorCode) -> pb.JoinGroupResponse:
    return pb.JoinGroupResponse(error_code=c, generation_id=-1, member_id=r.member_id)


def _offset_commit(r: pb.OffsetCommitRequest, c: pb.ErrorCode) -> pb.OffsetCommitResponse:
    return pb.OffsetCommitResponse(error_code=c, topics=[pb.OffsetCommitTopicResponse(name=t.name, partitions=[
        pb.OffsetCommitPartitionResponse(partition=p.partition, error_code=c) for p in t.partitions])
        for t in r.topics])


def _describe_groups(r: pb.DescribeGroupsRequest, c: pb.ErrorCode) -> pb.DescribeGroupsResponse:
    return pb.DescribeGroupsResponse(groups=[pb.DescribedGroup(group_id=g, error_code=c) for g in r.groups])


def _delete_groups(r: pb.DeleteGroupsRequest, c: pb.ErrorCode) -> pb.DeleteGroupsResponse:
    return pb.DeleteGroupsResponse(results=[pb.DeleteGroupsResult(group_id=g, error_code=c) for g in r.groups])


def _offset_delete(r: pb.OffsetDeleteRequest, c: pb.ErrorCode) -> pb.OffsetDeleteResponse:
    return pb.OffsetDeleteResponse(error_code=c, topics=[pb.OffsetDeleteTopicResponse(name=t.name, partitions=[
        pb.OffsetDeletePartitionResponse(partition=p, error_code=c) for p in t.partitions]) for t in r.topics])


def _describe_cluster(_r: pb.DescribeClusterRequest, c: pb.ErrorCode) -> pb.DescribeClusterResponse:
    return pb.DescribeClusterResponse(error_code=c, controller_id=-1, cluster_authorized_operations=-(1 << 31))


def _describe_producers(r: pb.DescribeProducersRequest, c: pb.ErrorCode) -> pb.DescribeProducersResponse:
    return pb.DescribeProducersResponse(topics=[pb.DescribeProducersTopicResult(name=t.name, partitions=[
        pb.DescribeProducersPartition(partition=p, error_code=c) for p in t.partitions]) for t in r.topics])


def _write_txn_markers(r: pb.WriteTxnMarkersRequest, c: pb.ErrorCode) -> pb.WriteTxnMarkersResponse:
    return pb.WriteTxnMarkersResponse(markers=[pb.WritableTxnMarkerResult(producer_id=m.producer_id, topics=[
        pb.WritableTxnMarkerTopicResult(name=t.name, partitions=[
            pb.WritableTxnMarkerPartitionResult(partition_index=p, error_code=c) for p in t.partition_indexes])
        for t in m.topics]) for m in r.markers])


def _add_partitions_to_txn(r: pb.AddPartitionsToTxnRequest, c: pb.ErrorCode) -> pb.AddPartitionsToTxnResponse:
    def results(topics: Any) -> list[pb.AddPartitionsToTxnTopicResult]:
        return [pb.AddPartitionsToTxnTopicResult(name=t.name, partitions=[
            pb.AddPartitionsToTxnPartitionResult(partition=p, error_code=c) for p in t.partitions]) for t in topics]

    # The batched form's (v4+, broker to broker: transactions) results, and its top-level code.
    return pb.AddPartitionsToTxnResponse(
        topics=results(r.topics), error_code=c,
        results_by_transaction=[pb.AddPartitionsToTxnResult(transactional_id=x.transactional_id,
                                                            topic_results=results(x.topics))
                                for x in r.transactions])


def _txn_offset_commit(r: pb.TxnOffsetCommitRequest, c: pb.ErrorCode) -> pb.TxnOffsetCommitResponse:
    return pb.TxnOffsetCommitResponse(topics=[pb.TxnOffsetCommitTopicResponse(name=t.name, partitions=[
        pb.TxnOffsetCommitPartitionResponse(partition=p.partition, error_code=c) for p in t.partitions])
        for t in r.topics])


# The catalogue, in the order of minikafka.proto's services.
APIS: Final[tuple[Api, ...]] = (
    # KafkaApi: clients (and, for FollowerFetch, followers)
    Api("Metadata", pb.MetadataRequest, pb.MetadataResponse, _metadata, kafka_key=3),
    Api("Produce", pb.ProduceRequest, pb.ProduceResponse, _produce, stream="ProduceStream", kafka_key=0),
    # gRPC's Fetch serves both: a replica_id >= 0 makes it a FollowerFetch (see ``fetch_api``).
    Api("Fetch", pb.FetchRequest, pb.FetchResponse, _fetch, stream="FetchStream", kafka_key=1),
    Api("FollowerFetch", pb.FetchRequest, pb.FetchResponse, _fetch, service=None, kafka_key=1),
    Api("ListOffsets", pb.ListOffsetsRequest, pb.ListOffsetsResponse, _list_offsets, kafka_key=2),
    Api("OffsetsForLeaderEpoch", pb.OffsetsForLeaderEpochRequest, pb.OffsetsForLeaderEpochResponse,
        _offsets_for_leader_epoch, kafka_key=23),
    Api("CreateTopics", pb.CreateTopicsRequest, pb.CreateTopicsResponse, _create_topics, kafka_key=19),
    Api("DeleteTopics", pb.DeleteTopicsRequest, pb.DeleteTopicsResponse, _delete_topics, kafka_key=20),
    Api("CreatePartitions", pb.CreatePartitionsRequest, pb.CreatePartitionsResponse, _create_partitions,
        kafka_key=37),
    Api("DeleteRecords", pb.DeleteRecordsRequest, pb.DeleteRecordsResponse, _delete_records, kafka_key=21),
    Api("DescribeConfigs", pb.DescribeConfigsRequest, pb.DescribeConfigsResponse, _describe_configs,
        kafka_key=32),
    Api("AlterConfigs", pb.AlterConfigsRequest, pb.AlterConfigsResponse, _alter_configs, kafka_key=33),
    Api("InitProducerId", pb.InitProducerIdRequest, pb.InitProducerIdResponse, _init_producer_id, kafka_key=22),
    Api("DescribeReplicas", pb.DescribeReplicasRequest, pb.DescribeReplicasResponse, _describe_replicas),
    Api("ElectLeaders", pb.ElectLeadersRequest, pb.ElectLeadersResponse,
        _partition_results(pb.ElectLeadersResponse), kafka_key=43),
    Api("AlterPartitionReassignments", pb.AlterPartitionReassignmentsRequest,
        pb.AlterPartitionReassignmentsResponse, _partition_results(pb.AlterPartitionReassignmentsResponse),
        kafka_key=45),
    Api("ListPartitionReassignments", pb.ListPartitionReassignmentsRequest, pb.ListPartitionReassignmentsResponse,
        kafka_key=46),
    Api("CreateAcls", pb.CreateAclsRequest, pb.CreateAclsResponse, _create_acls, kafka_key=30),
    Api("DescribeAcls", pb.DescribeAclsRequest, pb.DescribeAclsResponse, kafka_key=29),
    Api("DeleteAcls", pb.DeleteAclsRequest, pb.DeleteAclsResponse, _delete_acls, kafka_key=31),
    Api("AlterUserScramCredentials", pb.AlterUserScramCredentialsRequest, pb.AlterUserScramCredentialsResponse,
        _alter_user_scram_credentials, kafka_key=51),
    Api("DescribeUserScramCredentials", pb.DescribeUserScramCredentialsRequest,
        pb.DescribeUserScramCredentialsResponse, kafka_key=50),
    Api("FindCoordinator", pb.FindCoordinatorRequest, pb.FindCoordinatorResponse, _find_coordinator, kafka_key=10),
    Api("JoinGroup", pb.JoinGroupRequest, pb.JoinGroupResponse, _join_group, kafka_key=11),
    Api("SyncGroup", pb.SyncGroupRequest, pb.SyncGroupResponse, kafka_key=14),
    Api("Heartbeat", pb.HeartbeatRequest, pb.HeartbeatResponse, kafka_key=12),
    Api("LeaveGroup", pb.LeaveGroupRequest, pb.LeaveGroupResponse, kafka_key=13),
    Api("OffsetCommit", pb.OffsetCommitRequest, pb.OffsetCommitResponse, _offset_commit, kafka_key=8),
    Api("OffsetFetch", pb.OffsetFetchRequest, pb.OffsetFetchResponse, kafka_key=9),
    Api("ListGroups", pb.ListGroupsRequest, pb.ListGroupsResponse, kafka_key=16),
    Api("DescribeGroups", pb.DescribeGroupsRequest, pb.DescribeGroupsResponse, _describe_groups, kafka_key=15),
    Api("DeleteGroups", pb.DeleteGroupsRequest, pb.DeleteGroupsResponse, _delete_groups, kafka_key=42),
    Api("OffsetDelete", pb.OffsetDeleteRequest, pb.OffsetDeleteResponse, _offset_delete, kafka_key=47),
    Api("DescribeCluster", pb.DescribeClusterRequest, pb.DescribeClusterResponse, _describe_cluster, kafka_key=60),
    Api("DescribeLogDirs", pb.DescribeLogDirsRequest, pb.DescribeLogDirsResponse, kafka_key=35),
    Api("DescribeProducers", pb.DescribeProducersRequest, pb.DescribeProducersResponse, _describe_producers,
        kafka_key=61),
    # Transactions (KIP-98): the transaction coordinator's markers, broker to broker (ClusterAction).
    Api("WriteTxnMarkers", pb.WriteTxnMarkersRequest, pb.WriteTxnMarkersResponse, _write_txn_markers,
        kafka_key=27),
    # The transactional producer's (broker.coordinator.transaction.txn_apis).
    Api("AddPartitionsToTxn", pb.AddPartitionsToTxnRequest, pb.AddPartitionsToTxnResponse, _add_partitions_to_txn,
        kafka_key=24),
    Api("AddOffsetsToTxn", pb.AddOffsetsToTxnRequest, pb.AddOffsetsToTxnResponse, kafka_key=25),
    Api("EndTxn", pb.EndTxnRequest, pb.EndTxnResponse, kafka_key=26),
    Api("TxnOffsetCommit", pb.TxnOffsetCommitRequest, pb.TxnOffsetCommitResponse, _txn_offset_commit,
        kafka_key=28),
    # BrokerControl: the controller's requests to every broker
    Api("LeaderAndIsr", pb.LeaderAndIsrRequest, pb.LeaderAndIsrResponse, service=BROKER_CONTROL,
        control_plane=True, fenced=True, kafka_key=4),
    Api("UpdateMetadata", pb.UpdateMetadataRequest, pb.UpdateMetadataResponse, service=BROKER_CONTROL,
        control_plane=True, fenced=True, kafka_key=6),
    Api("StopReplica", pb.StopReplicaRequest, pb.StopReplicaResponse, service=BROKER_CONTROL,
        control_plane=True, fenced=True, kafka_key=5),
    # ControllerApi: a broker's requests to the controller
    Api("ControlledShutdown", pb.ControlledShutdownRequest, pb.ControlledShutdownResponse, service=CONTROLLER_API,
        control_plane=True, kafka_key=7),
)

# name -> entry; a streaming method's name (ProduceStream, FetchStream) names the API it carries.
BY_NAME: Final[dict[str, Api]] = {a.name: a for a in APIS} | {a.stream: a for a in APIS if a.stream}
NAMES: Final[frozenset[str]] = frozenset(a.name for a in APIS)


def api(name: str) -> Api:
    """The entry of ``name`` (an API's or a streaming method's); ValueError for no API."""
    entry = BY_NAME.get(name)
    if entry is None:
        raise ValueError(f"no API {name}")
    return entry


def served_by(service: str) -> Iterator[Api]:
    """The APIs that ``service`` answers as unary calls, one method each, named as the API."""
    return (a for a in APIS if a.service == service)


def fetch_api(request: pb.FetchRequest) -> str:
    """The API a gRPC Fetch is: a replica's (replica_id >= 0) is a FollowerFetch."""
    return "Fetch" if request.replica_id < 0 else "FollowerFetch"
