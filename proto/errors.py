"""One error root for broker, controller and client.

Theory of operation: every error that can cross the wire is a subclass of
``KafkaError`` carrying Kafka's numeric ``code`` (the ``ErrorCode`` enum of
``minikafka.proto``) and two flags that drive client behaviour, as in
aiokafka's ``errors.py``:

* ``retriable`` - the same request may succeed later unchanged;
* ``invalid_metadata`` - the client's view of leaders is stale: refresh
  metadata before retrying.

``for_code(code)`` maps a code back to its class, so a response's error code
becomes a typed exception with ``raise for_code(code)(message)``.
"""

from __future__ import annotations

from typing import ClassVar, cast

from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper

from proto import minikafka_pb2 as pb


def _plain_enum_values() -> None:
    """Make ``pb.ErrorCode.NONE`` (and every enum of the .proto) a plain attribute lookup.

    protobuf resolves an enum's values in ``EnumTypeWrapper.__getattr__``, in Python: 1.4 us per
    ``E.NONE`` here, paid on every partition of every Produce and Fetch (and by their followers and
    clients) - ~20% of the broker's own code per Produce in a py-spy profile. Stored on the wrapper
    instance, the same ints are found before ``__getattr__`` is ever asked. Done here, on import of
    the module that owns the error codes, which broker, controller and client all import."""
    for name in dir(pb):
        wrapper = getattr(pb, name)
        if isinstance(wrapper, EnumTypeWrapper):
            for value_name, number in wrapper.items():
                setattr(wrapper, value_name, number)  # the same int __getattr__ would give


_plain_enum_values()

_BY_CODE: dict[int, type[KafkaError]] = {}


class KafkaError(Exception):
    """Root of every minikafka error."""

    code: ClassVar[int] = -1
    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    retriable: ClassVar[bool] = False
    invalid_metadata: ClassVar[bool] = False
    description: ClassVar[str] = "An unexpected server error."

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.description)
        self.message = message or self.description

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        _BY_CODE.setdefault(cls.code, cls)

    def __str__(self) -> str:
        return f"{self.name}: {self.message}"

    @property
    def wire_code(self) -> pb.ErrorCode:
        return wire_code(self.code)


class UnknownServerError(KafkaError):
    """The catch-all: anything the broker did not expect."""


class OffsetOutOfRangeError(KafkaError):
    code, name = 1, "OFFSET_OUT_OF_RANGE"
    description = "The requested offset is outside the log."


class CorruptMessageError(KafkaError):
    code, name = 2, "CORRUPT_MESSAGE"
    description = "A record batch failed its CRC or is malformed."
    retriable = True


class UnknownTopicOrPartitionError(KafkaError):
    code, name = 3, "UNKNOWN_TOPIC_OR_PARTITION"
    description = "This server does not host this topic-partition."
    retriable = True
    invalid_metadata = True


class InvalidFetchSizeError(KafkaError):
    code, name = 4, "INVALID_FETCH_SIZE"
    description = "The requested fetch size is invalid."


class LeaderNotAvailableError(KafkaError):
    code, name = 5, "LEADER_NOT_AVAILABLE"
    description = "There is no leader for this partition."
    retriable = True
    invalid_metadata = True


class NotLeaderOrFollowerError(KafkaError):
    code, name = 6, "NOT_LEADER_OR_FOLLOWER"
    description = "This server is not the leader (or follower) of the partition."
    retriable = True
    invalid_metadata = True


class RequestTimedOutError(KafkaError):
    code, name = 7, "REQUEST_TIMED_OUT"
    description = "The request timed out."
    retriable = True


class BrokerNotAvailableError(KafkaError):
    code, name = 8, "BROKER_NOT_AVAILABLE"
    description = "The broker is not available."


class ReplicaNotAvailableError(KafkaError):
    code, name = 9, "REPLICA_NOT_AVAILABLE"
    description = "The replica is not available."
    retriable = True
    invalid_metadata = True


class MessageTooLargeError(KafkaError):
    code, name = 10, "MESSAGE_TOO_LARGE"
    description = "A batch is larger than max.message.bytes."


class StaleControllerEpochError(KafkaError):
    code, name = 11, "STALE_CONTROLLER_EPOCH"
    description = "The request came from a controller with an old epoch."


class OffsetMetadataTooLargeError(KafkaError):
    code, name = 12, "OFFSET_METADATA_TOO_LARGE"
    description = "The metadata of an offset commit is larger than offset.metadata.max.bytes."


class NetworkError(KafkaError):
    code, name = 13, "NETWORK_EXCEPTION"
    description = "The connection to the broker failed."
    retriable = True
    invalid_metadata = True


class CoordinatorNotAvailableError(KafkaError):
    code, name = 15, "COORDINATOR_NOT_AVAILABLE"
    description = "The coordinator is not available."
    retriable = True


class CoordinatorLoadInProgressError(KafkaError):
    code, name = 14, "COORDINATOR_LOAD_IN_PROGRESS"
    description = "The coordinator is loading the group's state."
    retriable = True


class NotCoordinatorError(KafkaError):
    code, name = 16, "NOT_COORDINATOR"
    description = "This broker is not the group's coordinator."
    retriable = True


class InvalidTopicError(KafkaError):
    code, name = 17, "INVALID_TOPIC_EXCEPTION"
    description = "The topic name is not legal."


class RecordListTooLargeError(KafkaError):
    code, name = 18, "RECORD_LIST_TOO_LARGE"
    description = "The record data is larger than the segment size."


class NotEnoughReplicasError(KafkaError):
    code, name = 19, "NOT_ENOUGH_REPLICAS"
    description = "The ISR is smaller than min.insync.replicas."
    retriable = True


class NotEnoughReplicasAfterAppendError(KafkaError):
    code, name = 20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    description = "Appended, but the ISR shrank below min.insync.replicas."
    retriable = True


class InvalidRequiredAcksError(KafkaError):
    code, name = 21, "INVALID_REQUIRED_ACKS"
    description = "acks must be 0, 1 or -1 (all)."


class IllegalGenerationError(KafkaError):
    code, name = 22, "ILLEGAL_GENERATION"
    description = "The generation id is not the group's current generation."


class InconsistentGroupProtocolError(KafkaError):
    code, name = 23, "INCONSISTENT_GROUP_PROTOCOL"
    description = "The member's protocols are incompatible with the group's."


class InvalidGroupIdError(KafkaError):
    code, name = 24, "INVALID_GROUP_ID"
    description = "The group id is not valid."


class UnknownMemberIdError(KafkaError):
    code, name = 25, "UNKNOWN_MEMBER_ID"
    description = "The coordinator does not know this member id."


class InvalidSessionTimeoutError(KafkaError):
    code, name = 26, "INVALID_SESSION_TIMEOUT"
    description = "The session timeout is outside the broker's allowed range."


class RebalanceInProgressError(KafkaError):
    code, name = 27, "REBALANCE_IN_PROGRESS"
    description = "The group is rebalancing: rejoin."


class InvalidCommitOffsetSizeError(KafkaError):
    code, name = 28, "INVALID_COMMIT_OFFSET_SIZE"
    description = "The offset commit is not valid (its offset, or the group's number of committed partitions)."


class TopicAuthorizationFailedError(KafkaError):
    code, name = 29, "TOPIC_AUTHORIZATION_FAILED"
    description = "Not authorized to access the topic."


class GroupAuthorizationFailedError(KafkaError):
    code, name = 30, "GROUP_AUTHORIZATION_FAILED"
    description = "Not authorized to access the group."


class ClusterAuthorizationFailedError(KafkaError):
    code, name = 31, "CLUSTER_AUTHORIZATION_FAILED"
    description = "Not authorized for this cluster operation."


class UnsupportedSaslMechanismError(KafkaError):
    code, name = 33, "UNSUPPORTED_SASL_MECHANISM"
    description = "The SASL mechanism is not enabled."


class InvalidTimestampError(KafkaError):
    code, name = 32, "INVALID_TIMESTAMP"
    description = "A timestamp is out of the accepted range."


class UnsupportedVersionError(KafkaError):
    code, name = 35, "UNSUPPORTED_VERSION"
    description = "This version is not supported."


class TopicAlreadyExistsError(KafkaError):
    code, name = 36, "TOPIC_ALREADY_EXISTS"
    description = "The topic already exists."


class InvalidPartitionsError(KafkaError):
    code, name = 37, "INVALID_PARTITIONS"
    description = "The number of partitions is invalid."


class InvalidReplicationFactorError(KafkaError):
    code, name = 38, "INVALID_REPLICATION_FACTOR"
    description = "The replication factor is invalid."


class InvalidReplicaAssignmentError(KafkaError):
    code, name = 39, "INVALID_REPLICA_ASSIGNMENT"
    description = "The replica assignment is invalid."


class InvalidConfigError(KafkaError):
    code, name = 40, "INVALID_CONFIG"
    description = "A configuration is invalid."


class NotControllerError(KafkaError):
    code, name = 41, "NOT_CONTROLLER"
    description = "This broker is not the controller."
    retriable = True
    invalid_metadata = True


class InvalidRequestError(KafkaError):
    code, name = 42, "INVALID_REQUEST"
    description = "The request is malformed."


class PolicyViolationError(KafkaError):
    code, name = 44, "POLICY_VIOLATION"
    description = "The request violates a policy."


class OutOfOrderSequenceNumberError(KafkaError):
    code, name = 45, "OUT_OF_ORDER_SEQUENCE_NUMBER"
    description = "The broker received an out of order sequence number."


class DuplicateSequenceNumberError(KafkaError):
    code, name = 46, "DUPLICATE_SEQUENCE_NUMBER"
    description = "The broker received a duplicate sequence number."


class InvalidProducerEpochError(KafkaError):
    code, name = 47, "INVALID_PRODUCER_EPOCH"
    description = "The producer epoch is stale."


class InvalidTxnStateError(KafkaError):
    code, name = 48, "INVALID_TXN_STATE"
    description = "The producer attempted a transactional operation in an invalid state."


class InvalidProducerIdMappingError(KafkaError):
    code, name = 49, "INVALID_PRODUCER_ID_MAPPING"
    description = ("The producer attempted to use a producer id which is not currently assigned to its "
                   "transactional id.")


class InvalidTransactionTimeoutError(KafkaError):
    code, name = 50, "INVALID_TRANSACTION_TIMEOUT"
    description = ("The transaction timeout is larger than the maximum value allowed by the broker "
                   "(as configured by transaction.max.timeout.ms).")


class ConcurrentTransactionsError(KafkaError):
    code, name = 51, "CONCURRENT_TRANSACTIONS"
    description = ("The producer attempted to update a transaction while another concurrent operation on "
                   "the same transaction was ongoing.")
    retriable = True


class TransactionCoordinatorFencedError(KafkaError):
    code, name = 52, "TRANSACTION_COORDINATOR_FENCED"
    description = ("Indicates that the transaction coordinator sending a WriteTxnMarker is no longer the "
                   "current coordinator for a given producer.")


class TransactionalIdAuthorizationFailedError(KafkaError):
    code, name = 53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    description = "Transactional Id authorization failed."


class SecurityDisabledError(KafkaError):
    code, name = 54, "SECURITY_DISABLED"
    description = "Security features are disabled."


class OperationNotAttemptedError(KafkaError):
    code, name = 55, "OPERATION_NOT_ATTEMPTED"
    description = "The broker did not attempt this operation because another part of the request failed."


class KafkaStorageError(KafkaError):
    code, name = 56, "KAFKA_STORAGE_ERROR"
    description = "A disk error on the broker."
    retriable = True
    invalid_metadata = True


class SaslAuthenticationFailedError(KafkaError):
    code, name = 58, "SASL_AUTHENTICATION_FAILED"
    description = "Authentication failed: invalid credentials."


class UnknownProducerIdError(KafkaError):
    code, name = 59, "UNKNOWN_PRODUCER_ID"
    description = "The broker has no state for this producer id."


class ReassignmentInProgressError(KafkaError):
    code, name = 60, "REASSIGNMENT_IN_PROGRESS"
    description = "A reassignment is in progress."


class NonEmptyGroupError(KafkaError):
    code, name = 68, "NON_EMPTY_GROUP"
    description = "The group has active members."


class GroupIdNotFoundError(KafkaError):
    code, name = 69, "GROUP_ID_NOT_FOUND"
    description = "The group does not exist."


class FetchSessionIdNotFoundError(KafkaError):
    code, name = 70, "FETCH_SESSION_ID_NOT_FOUND"
    description = "The fetch session id is not known to this broker (evicted, or the broker restarted)."
    retriable = True


class InvalidFetchSessionEpochError(KafkaError):
    code, name = 71, "INVALID_FETCH_SESSION_EPOCH"
    description = "The fetch session epoch is not the one this broker expects next."
    retriable = True


class TopicDeletionDisabledError(KafkaError):
    code, name = 73, "TOPIC_DELETION_DISABLED"
    description = "delete.topic.enable is false."


class FencedLeaderEpochError(KafkaError):
    code, name = 74, "FENCED_LEADER_EPOCH"
    description = "The leader epoch in the request is older than the broker's."
    retriable = True
    invalid_metadata = True


class UnknownLeaderEpochError(KafkaError):
    code, name = 75, "UNKNOWN_LEADER_EPOCH"
    description = "The leader epoch in the request is newer than the broker's."
    retriable = True


class UnsupportedCompressionTypeError(KafkaError):
    code, name = 76, "UNSUPPORTED_COMPRESSION_TYPE"
    description = "The compression codec is not supported."


class StaleBrokerEpochError(KafkaError):
    code, name = 77, "STALE_BROKER_EPOCH"
    description = "The broker epoch is stale."


class OffsetNotAvailableError(KafkaError):
    code, name = 78, "OFFSET_NOT_AVAILABLE"
    description = "The offset is not available yet."
    retriable = True


class MemberIdRequiredError(KafkaError):
    code, name = 79, "MEMBER_ID_REQUIRED"
    description = "The group member needs a member id: rejoin with the one in this response (KIP-394)."


class PreferredLeaderNotAvailableError(KafkaError):
    code, name = 80, "PREFERRED_LEADER_NOT_AVAILABLE"
    description = "The preferred leader is not available."
    retriable = True


class GroupMaxSizeReachedError(KafkaError):
    code, name = 81, "GROUP_MAX_SIZE_REACHED"
    description = "The group already has group.max.size members."


class FencedInstanceIdError(KafkaError):
    code, name = 82, "FENCED_INSTANCE_ID"
    description = ("Another member joined with this member's group.instance.id (KIP-345): this one is "
                   "fenced and must not rejoin with it.")


class EligibleLeadersNotAvailableError(KafkaError):
    code, name = 83, "ELIGIBLE_LEADERS_NOT_AVAILABLE"
    description = "No eligible leader is available."
    retriable = True


class ElectionNotNeededError(KafkaError):
    code, name = 84, "ELECTION_NOT_NEEDED"
    description = "The preferred replica already leads."


class NoReassignmentInProgressError(KafkaError):
    code, name = 85, "NO_REASSIGNMENT_IN_PROGRESS"
    description = "No reassignment is in progress."


class GroupSubscribedToTopicError(KafkaError):
    code, name = 86, "GROUP_SUBSCRIBED_TO_TOPIC"
    description = "The group's members are subscribed to this topic: its offsets cannot be deleted (KIP-496)."


class InvalidRecordError(KafkaError):
    code, name = 87, "INVALID_RECORD"
    description = "A record failed broker-side validation."


class UnstableOffsetCommitError(KafkaError):
    code, name = 88, "UNSTABLE_OFFSET_COMMIT"
    description = ("There are unstable offsets that need to be cleared: a transaction holds offsets of "
                   "this group pending (OffsetFetch require_stable, KIP-447).")
    retriable = True


class ProducerFencedError(KafkaError):
    code, name = 90, "PRODUCER_FENCED"
    description = "A newer producer with this id exists."


class ResourceNotFoundError(KafkaError):
    code, name = 91, "RESOURCE_NOT_FOUND"
    description = "The resource does not exist."


class DuplicateResourceError(KafkaError):
    code, name = 92, "DUPLICATE_RESOURCE"
    description = "A request illegally referred to the same resource twice."


class UnacceptableCredentialError(KafkaError):
    code, name = 93, "UNACCEPTABLE_CREDENTIAL"
    description = "The credential is not acceptable."


def for_code(code: int) -> type[KafkaError]:
    """The error class of a wire error code (UNKNOWN_SERVER_ERROR for unknown codes)."""
    if code == 0:
        raise ValueError("error code 0 (NONE) is not an error")
    return _BY_CODE.get(code, UnknownServerError)


def wire_code(code: int) -> pb.ErrorCode:
    """A code as the generated ``ErrorCode`` type (a plain int at run time)."""
    return cast(pb.ErrorCode, code)


def all_error_classes() -> list[type[KafkaError]]:
    return [_BY_CODE[c] for c in sorted(_BY_CODE)]
