from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NONE: _ClassVar[ErrorCode]
    UNKNOWN_SERVER_ERROR: _ClassVar[ErrorCode]
    OFFSET_OUT_OF_RANGE: _ClassVar[ErrorCode]
    CORRUPT_MESSAGE: _ClassVar[ErrorCode]
    UNKNOWN_TOPIC_OR_PARTITION: _ClassVar[ErrorCode]
    INVALID_FETCH_SIZE: _ClassVar[ErrorCode]
    LEADER_NOT_AVAILABLE: _ClassVar[ErrorCode]
    NOT_LEADER_OR_FOLLOWER: _ClassVar[ErrorCode]
    REQUEST_TIMED_OUT: _ClassVar[ErrorCode]
    BROKER_NOT_AVAILABLE: _ClassVar[ErrorCode]
    REPLICA_NOT_AVAILABLE: _ClassVar[ErrorCode]
    MESSAGE_TOO_LARGE: _ClassVar[ErrorCode]
    STALE_CONTROLLER_EPOCH: _ClassVar[ErrorCode]
    OFFSET_METADATA_TOO_LARGE: _ClassVar[ErrorCode]
    NETWORK_EXCEPTION: _ClassVar[ErrorCode]
    COORDINATOR_LOAD_IN_PROGRESS: _ClassVar[ErrorCode]
    COORDINATOR_NOT_AVAILABLE: _ClassVar[ErrorCode]
    NOT_COORDINATOR: _ClassVar[ErrorCode]
    INVALID_TOPIC_EXCEPTION: _ClassVar[ErrorCode]
    RECORD_LIST_TOO_LARGE: _ClassVar[ErrorCode]
    NOT_ENOUGH_REPLICAS: _ClassVar[ErrorCode]
    NOT_ENOUGH_REPLICAS_AFTER_APPEND: _ClassVar[ErrorCode]
    INVALID_REQUIRED_ACKS: _ClassVar[ErrorCode]
    ILLEGAL_GENERATION: _ClassVar[ErrorCode]
    INCONSISTENT_GROUP_PROTOCOL: _ClassVar[ErrorCode]
    INVALID_GROUP_ID: _ClassVar[ErrorCode]
    UNKNOWN_MEMBER_ID: _ClassVar[ErrorCode]
    INVALID_SESSION_TIMEOUT: _ClassVar[ErrorCode]
    REBALANCE_IN_PROGRESS: _ClassVar[ErrorCode]
    INVALID_COMMIT_OFFSET_SIZE: _ClassVar[ErrorCode]
    TOPIC_AUTHORIZATION_FAILED: _ClassVar[ErrorCode]
    GROUP_AUTHORIZATION_FAILED: _ClassVar[ErrorCode]
    CLUSTER_AUTHORIZATION_FAILED: _ClassVar[ErrorCode]
    INVALID_TIMESTAMP: _ClassVar[ErrorCode]
    UNSUPPORTED_SASL_MECHANISM: _ClassVar[ErrorCode]
    UNSUPPORTED_VERSION: _ClassVar[ErrorCode]
    TOPIC_ALREADY_EXISTS: _ClassVar[ErrorCode]
    INVALID_PARTITIONS: _ClassVar[ErrorCode]
    INVALID_REPLICATION_FACTOR: _ClassVar[ErrorCode]
    INVALID_REPLICA_ASSIGNMENT: _ClassVar[ErrorCode]
    INVALID_CONFIG: _ClassVar[ErrorCode]
    NOT_CONTROLLER: _ClassVar[ErrorCode]
    INVALID_REQUEST: _ClassVar[ErrorCode]
    POLICY_VIOLATION: _ClassVar[ErrorCode]
    OUT_OF_ORDER_SEQUENCE_NUMBER: _ClassVar[ErrorCode]
    DUPLICATE_SEQUENCE_NUMBER: _ClassVar[ErrorCode]
    INVALID_PRODUCER_EPOCH: _ClassVar[ErrorCode]
    INVALID_TXN_STATE: _ClassVar[ErrorCode]
    INVALID_PRODUCER_ID_MAPPING: _ClassVar[ErrorCode]
    INVALID_TRANSACTION_TIMEOUT: _ClassVar[ErrorCode]
    CONCURRENT_TRANSACTIONS: _ClassVar[ErrorCode]
    TRANSACTION_COORDINATOR_FENCED: _ClassVar[ErrorCode]
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED: _ClassVar[ErrorCode]
    SECURITY_DISABLED: _ClassVar[ErrorCode]
    OPERATION_NOT_ATTEMPTED: _ClassVar[ErrorCode]
    KAFKA_STORAGE_ERROR: _ClassVar[ErrorCode]
    SASL_AUTHENTICATION_FAILED: _ClassVar[ErrorCode]
    UNKNOWN_PRODUCER_ID: _ClassVar[ErrorCode]
    REASSIGNMENT_IN_PROGRESS: _ClassVar[ErrorCode]
    NON_EMPTY_GROUP: _ClassVar[ErrorCode]
    GROUP_ID_NOT_FOUND: _ClassVar[ErrorCode]
    FETCH_SESSION_ID_NOT_FOUND: _ClassVar[ErrorCode]
    INVALID_FETCH_SESSION_EPOCH: _ClassVar[ErrorCode]
    TOPIC_DELETION_DISABLED: _ClassVar[ErrorCode]
    FENCED_LEADER_EPOCH: _ClassVar[ErrorCode]
    UNKNOWN_LEADER_EPOCH: _ClassVar[ErrorCode]
    UNSUPPORTED_COMPRESSION_TYPE: _ClassVar[ErrorCode]
    STALE_BROKER_EPOCH: _ClassVar[ErrorCode]
    OFFSET_NOT_AVAILABLE: _ClassVar[ErrorCode]
    MEMBER_ID_REQUIRED: _ClassVar[ErrorCode]
    PREFERRED_LEADER_NOT_AVAILABLE: _ClassVar[ErrorCode]
    GROUP_MAX_SIZE_REACHED: _ClassVar[ErrorCode]
    FENCED_INSTANCE_ID: _ClassVar[ErrorCode]
    ELIGIBLE_LEADERS_NOT_AVAILABLE: _ClassVar[ErrorCode]
    ELECTION_NOT_NEEDED: _ClassVar[ErrorCode]
    NO_REASSIGNMENT_IN_PROGRESS: _ClassVar[ErrorCode]
    GROUP_SUBSCRIBED_TO_TOPIC: _ClassVar[ErrorCode]
    INVALID_RECORD: _ClassVar[ErrorCode]
    UNSTABLE_OFFSET_COMMIT: _ClassVar[ErrorCode]
    PRODUCER_FENCED: _ClassVar[ErrorCode]
    RESOURCE_NOT_FOUND: _ClassVar[ErrorCode]
    DUPLICATE_RESOURCE: _ClassVar[ErrorCode]
    UNACCEPTABLE_CREDENTIAL: _ClassVar[ErrorCode]

class IsolationLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    READ_UNCOMMITTED: _ClassVar[IsolationLevel]
    READ_COMMITTED: _ClassVar[IsolationLevel]

class ConfigResourceType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNKNOWN_RESOURCE: _ClassVar[ConfigResourceType]
    TOPIC: _ClassVar[ConfigResourceType]
    BROKER: _ClassVar[ConfigResourceType]

class ConfigSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNKNOWN_CONFIG: _ClassVar[ConfigSource]
    DYNAMIC_TOPIC_CONFIG: _ClassVar[ConfigSource]
    DYNAMIC_BROKER_CONFIG: _ClassVar[ConfigSource]
    STATIC_BROKER_CONFIG: _ClassVar[ConfigSource]
    DEFAULT_CONFIG: _ClassVar[ConfigSource]

class AlterConfigOp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SET: _ClassVar[AlterConfigOp]
    DELETE: _ClassVar[AlterConfigOp]

class ElectionType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PREFERRED: _ClassVar[ElectionType]
    UNCLEAN: _ClassVar[ElectionType]

class AclResourceType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ANY_RESOURCE: _ClassVar[AclResourceType]
    TOPIC_RESOURCE: _ClassVar[AclResourceType]
    GROUP_RESOURCE: _ClassVar[AclResourceType]
    CLUSTER_RESOURCE: _ClassVar[AclResourceType]
    TRANSACTIONAL_ID_RESOURCE: _ClassVar[AclResourceType]

class AclPatternType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PATTERN_UNSPECIFIED: _ClassVar[AclPatternType]
    PATTERN_ANY: _ClassVar[AclPatternType]
    PATTERN_MATCH: _ClassVar[AclPatternType]
    PATTERN_LITERAL: _ClassVar[AclPatternType]
    PATTERN_PREFIXED: _ClassVar[AclPatternType]
NONE: ErrorCode
UNKNOWN_SERVER_ERROR: ErrorCode
OFFSET_OUT_OF_RANGE: ErrorCode
CORRUPT_MESSAGE: ErrorCode
UNKNOWN_TOPIC_OR_PARTITION: ErrorCode
INVALID_FETCH_SIZE: ErrorCode
LEADER_NOT_AVAILABLE: ErrorCode
NOT_LEADER_OR_FOLLOWER: ErrorCode
REQUEST_TIMED_OUT: ErrorCode
BROKER_NOT_AVAILABLE: ErrorCode
REPLICA_NOT_AVAILABLE: ErrorCode
MESSAGE_TOO_LARGE: ErrorCode
STALE_CONTROLLER_EPOCH: ErrorCode
OFFSET_METADATA_TOO_LARGE: ErrorCode
NETWORK_EXCEPTION: ErrorCode
COORDINATOR_LOAD_IN_PROGRESS: ErrorCode
COORDINATOR_NOT_AVAILABLE: ErrorCode
NOT_COORDINATOR: ErrorCode
INVALID_TOPIC_EXCEPTION: ErrorCode
RECORD_LIST_TOO_LARGE: ErrorCode
NOT_ENOUGH_REPLICAS: ErrorCode
NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode
INVALID_REQUIRED_ACKS: ErrorCode
ILLEGAL_GENERATION: ErrorCode
INCONSISTENT_GROUP_PROTOCOL: ErrorCode
INVALID_GROUP_ID: ErrorCode
UNKNOWN_MEMBER_ID: ErrorCode
INVALID_SESSION_TIMEOUT: ErrorCode
REBALANCE_IN_PROGRESS: ErrorCode
INVALID_COMMIT_OFFSET_SIZE: ErrorCode
TOPIC_AUTHORIZATION_FAILED: ErrorCode
GROUP_AUTHORIZATION_FAILED: ErrorCode
CLUSTER_AUTHORIZATION_FAILED: ErrorCode
INVALID_TIMESTAMP: ErrorCode
UNSUPPORTED_SASL_MECHANISM: ErrorCode
UNSUPPORTED_VERSION: ErrorCode
TOPIC_ALREADY_EXISTS: ErrorCode
INVALID_PARTITIONS: ErrorCode
INVALID_REPLICATION_FACTOR: ErrorCode
INVALID_REPLICA_ASSIGNMENT: ErrorCode
INVALID_CONFIG: ErrorCode
NOT_CONTROLLER: ErrorCode
INVALID_REQUEST: ErrorCode
POLICY_VIOLATION: ErrorCode
OUT_OF_ORDER_SEQUENCE_NUMBER: ErrorCode
DUPLICATE_SEQUENCE_NUMBER: ErrorCode
INVALID_PRODUCER_EPOCH: ErrorCode
INVALID_TXN_STATE: ErrorCode
INVALID_PRODUCER_ID_MAPPING: ErrorCode
INVALID_TRANSACTION_TIMEOUT: ErrorCode
CONCURRENT_TRANSACTIONS: ErrorCode
TRANSACTION_COORDINATOR_FENCED: ErrorCode
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: ErrorCode
SECURITY_DISABLED: ErrorCode
OPERATION_NOT_ATTEMPTED: ErrorCode
KAFKA_STORAGE_ERROR: ErrorCode
SASL_AUTHENTICATION_FAILED: ErrorCode
UNKNOWN_PRODUCER_ID: ErrorCode
REASSIGNMENT_IN_PROGRESS: ErrorCode
NON_EMPTY_GROUP: ErrorCode
GROUP_ID_NOT_FOUND: ErrorCode
FETCH_SESSION_ID_NOT_FOUND: ErrorCode
INVALID_FETCH_SESSION_EPOCH: ErrorCode
TOPIC_DELETION_DISABLED: ErrorCode
FENCED_LEADER_EPOCH: ErrorCode
UNKNOWN_LEADER_EPOCH: ErrorCode
UNSUPPORTED_COMPRESSION_TYPE: ErrorCode
STALE_BROKER_EPOCH: ErrorCode
OFFSET_NOT_AVAILABLE: ErrorCode
MEMBER_ID_REQUIRED: ErrorCode
PREFERRED_LEADER_NOT_AVAILABLE: ErrorCode
GROUP_MAX_SIZE_REACHED: ErrorCode
FENCED_INSTANCE_ID: ErrorCode
ELIGIBLE_LEADERS_NOT_AVAILABLE: ErrorCode
ELECTION_NOT_NEEDED: ErrorCode
NO_REASSIGNMENT_IN_PROGRESS: ErrorCode
GROUP_SUBSCRIBED_TO_TOPIC: ErrorCode
INVALID_RECORD: ErrorCode
UNSTABLE_OFFSET_COMMIT: ErrorCode
PRODUCER_FENCED: ErrorCode
RESOURCE_NOT_FOUND: ErrorCode
DUPLICATE_RESOURCE: ErrorCode
UNACCEPTABLE_CREDENTIAL: ErrorCode
READ_UNCOMMITTED: IsolationLevel
READ_COMMITTED: IsolationLevel
UNKNOWN_RESOURCE: ConfigResourceType
TOPIC: ConfigResourceType
BROKER: ConfigResourceType
UNKNOWN_CONFIG: ConfigSource
DYNAMIC_TOPIC_CONFIG: ConfigSource
DYNAMIC_BROKER_CONFIG: ConfigSource
STATIC_BROKER_CONFIG: ConfigSource
DEFAULT_CONFIG: ConfigSource
SET: AlterConfigOp
DELETE: AlterConfigOp
PREFERRED: ElectionType
UNCLEAN: ElectionType
ANY_RESOURCE: AclResourceType
TOPIC_RESOURCE: AclResourceType
GROUP_RESOURCE: AclResourceType
CLUSTER_RESOURCE: AclResourceType
TRANSACTIONAL_ID_RESOURCE: AclResourceType
PATTERN_UNSPECIFIED: AclPatternType
PATTERN_ANY: AclPatternType
PATTERN_MATCH: AclPatternType
PATTERN_LITERAL: AclPatternType
PATTERN_PREFIXED: AclPatternType

class ListenerEndpoint(_message.Message):
    __slots__ = ("name", "host", "port", "security_protocol")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    SECURITY_PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    name: str
    host: str
    port: int
    security_protocol: str
    def __init__(self, name: _Optional[str] = ..., host: _Optional[str] = ..., port: _Optional[int] = ..., security_protocol: _Optional[str] = ...) -> None: ...

class BrokerEndpoint(_message.Message):
    __slots__ = ("broker_id", "host", "port", "rack", "listeners", "broker_epoch", "replica_fetch_port", "kafka_produce_host", "kafka_produce_port")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    LISTENERS_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FETCH_PORT_FIELD_NUMBER: _ClassVar[int]
    KAFKA_PRODUCE_HOST_FIELD_NUMBER: _ClassVar[int]
    KAFKA_PRODUCE_PORT_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    host: str
    port: int
    rack: str
    listeners: _containers.RepeatedCompositeFieldContainer[ListenerEndpoint]
    broker_epoch: int
    replica_fetch_port: int
    kafka_produce_host: str
    kafka_produce_port: int
    def __init__(self, broker_id: _Optional[int] = ..., host: _Optional[str] = ..., port: _Optional[int] = ..., rack: _Optional[str] = ..., listeners: _Optional[_Iterable[_Union[ListenerEndpoint, _Mapping]]] = ..., broker_epoch: _Optional[int] = ..., replica_fetch_port: _Optional[int] = ..., kafka_produce_host: _Optional[str] = ..., kafka_produce_port: _Optional[int] = ...) -> None: ...

class MetadataRequest(_message.Message):
    __slots__ = ("topics", "all_topics", "allow_auto_topic_creation")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    ALL_TOPICS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_AUTO_TOPIC_CREATION_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    all_topics: bool
    allow_auto_topic_creation: bool
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., all_topics: _Optional[bool] = ..., allow_auto_topic_creation: _Optional[bool] = ...) -> None: ...

class PartitionMetadata(_message.Message):
    __slots__ = ("error_code", "partition", "leader", "leader_epoch", "replicas", "isr", "offline_replicas")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    OFFLINE_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    partition: int
    leader: int
    leader_epoch: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    isr: _containers.RepeatedScalarFieldContainer[int]
    offline_replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., partition: _Optional[int] = ..., leader: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., isr: _Optional[_Iterable[int]] = ..., offline_replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class TopicMetadata(_message.Message):
    __slots__ = ("error_code", "name", "is_internal", "partitions")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    IS_INTERNAL_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    name: str
    is_internal: bool
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionMetadata]
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., name: _Optional[str] = ..., is_internal: _Optional[bool] = ..., partitions: _Optional[_Iterable[_Union[PartitionMetadata, _Mapping]]] = ...) -> None: ...

class MetadataResponse(_message.Message):
    __slots__ = ("brokers", "cluster_id", "controller_id", "controller_epoch", "topics")
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    brokers: _containers.RepeatedCompositeFieldContainer[BrokerEndpoint]
    cluster_id: str
    controller_id: int
    controller_epoch: int
    topics: _containers.RepeatedCompositeFieldContainer[TopicMetadata]
    def __init__(self, brokers: _Optional[_Iterable[_Union[BrokerEndpoint, _Mapping]]] = ..., cluster_id: _Optional[str] = ..., controller_id: _Optional[int] = ..., controller_epoch: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[TopicMetadata, _Mapping]]] = ...) -> None: ...

class ProducePartitionData(_message.Message):
    __slots__ = ("partition", "records")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    records: bytes
    def __init__(self, partition: _Optional[int] = ..., records: _Optional[bytes] = ...) -> None: ...

class ProduceTopicData(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[ProducePartitionData]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[ProducePartitionData, _Mapping]]] = ...) -> None: ...

class ProduceRequest(_message.Message):
    __slots__ = ("transactional_id", "acks", "timeout_ms", "topics")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    acks: int
    timeout_ms: int
    topics: _containers.RepeatedCompositeFieldContainer[ProduceTopicData]
    def __init__(self, transactional_id: _Optional[str] = ..., acks: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[ProduceTopicData, _Mapping]]] = ...) -> None: ...

class ProducePartitionResponse(_message.Message):
    __slots__ = ("partition", "error_code", "base_offset", "log_append_time_ms", "log_start_offset", "error_message")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_APPEND_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    partition: int
    error_code: ErrorCode
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    error_message: str
    def __init__(self, partition: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., base_offset: _Optional[int] = ..., log_append_time_ms: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class ProduceTopicResponse(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[ProducePartitionResponse]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[ProducePartitionResponse, _Mapping]]] = ...) -> None: ...

class ProduceResponse(_message.Message):
    __slots__ = ("topics", "throttle_time_ms")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[ProduceTopicResponse]
    throttle_time_ms: int
    def __init__(self, topics: _Optional[_Iterable[_Union[ProduceTopicResponse, _Mapping]]] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class FetchPartition(_message.Message):
    __slots__ = ("partition", "current_leader_epoch", "fetch_offset", "log_start_offset", "partition_max_bytes")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    CURRENT_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    FETCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PARTITION_MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    log_start_offset: int
    partition_max_bytes: int
    def __init__(self, partition: _Optional[int] = ..., current_leader_epoch: _Optional[int] = ..., fetch_offset: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., partition_max_bytes: _Optional[int] = ...) -> None: ...

class FetchTopic(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[FetchPartition]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[FetchPartition, _Mapping]]] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("replica_id", "max_wait_ms", "min_bytes", "max_bytes", "isolation_level", "topics", "replica_epoch", "session_id", "session_epoch", "forgotten")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    MIN_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    FORGOTTEN_FIELD_NUMBER: _ClassVar[int]
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: IsolationLevel
    topics: _containers.RepeatedCompositeFieldContainer[FetchTopic]
    replica_epoch: int
    session_id: int
    session_epoch: int
    forgotten: _containers.RepeatedCompositeFieldContainer[FetchTopic]
    def __init__(self, replica_id: _Optional[int] = ..., max_wait_ms: _Optional[int] = ..., min_bytes: _Optional[int] = ..., max_bytes: _Optional[int] = ..., isolation_level: _Optional[_Union[IsolationLevel, str]] = ..., topics: _Optional[_Iterable[_Union[FetchTopic, _Mapping]]] = ..., replica_epoch: _Optional[int] = ..., session_id: _Optional[int] = ..., session_epoch: _Optional[int] = ..., forgotten: _Optional[_Iterable[_Union[FetchTopic, _Mapping]]] = ...) -> None: ...

class FetchPartitionResponse(_message.Message):
    __slots__ = ("partition", "error_code", "high_watermark", "last_stable_offset", "log_start_offset", "log_end_offset", "records", "leader_epoch", "aborted_transactions")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LAST_STABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ABORTED_TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    error_code: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    log_end_offset: int
    records: bytes
    leader_epoch: int
    aborted_transactions: _containers.RepeatedCompositeFieldContainer[AbortedTransaction]
    def __init__(self, partition: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., high_watermark: _Optional[int] = ..., last_stable_offset: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., records: _Optional[bytes] = ..., leader_epoch: _Optional[int] = ..., aborted_transactions: _Optional[_Iterable[_Union[AbortedTransaction, _Mapping]]] = ...) -> None: ...

class AbortedTransaction(_message.Message):
    __slots__ = ("producer_id", "first_offset")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    first_offset: int
    def __init__(self, producer_id: _Optional[int] = ..., first_offset: _Optional[int] = ...) -> None: ...

class FetchTopicResponse(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[FetchPartitionResponse]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[FetchPartitionResponse, _Mapping]]] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("throttle_time_ms", "error_code", "topics", "session_id")
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    throttle_time_ms: int
    error_code: ErrorCode
    topics: _containers.RepeatedCompositeFieldContainer[FetchTopicResponse]
    session_id: int
    def __init__(self, throttle_time_ms: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., topics: _Optional[_Iterable[_Union[FetchTopicResponse, _Mapping]]] = ..., session_id: _Optional[int] = ...) -> None: ...

class ListOffsetsPartition(_message.Message):
    __slots__ = ("partition", "current_leader_epoch", "timestamp")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    CURRENT_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    partition: int
    current_leader_epoch: int
    timestamp: int
    def __init__(self, partition: _Optional[int] = ..., current_leader_epoch: _Optional[int] = ..., timestamp: _Optional[int] = ...) -> None: ...

class ListOffsetsTopic(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[ListOffsetsPartition]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[ListOffsetsPartition, _Mapping]]] = ...) -> None: ...

class ListOffsetsRequest(_message.Message):
    __slots__ = ("replica_id", "isolation_level", "topics")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    replica_id: int
    isolation_level: IsolationLevel
    topics: _containers.RepeatedCompositeFieldContainer[ListOffsetsTopic]
    def __init__(self, replica_id: _Optional[int] = ..., isolation_level: _Optional[_Union[IsolationLevel, str]] = ..., topics: _Optional[_Iterable[_Union[ListOffsetsTopic, _Mapping]]] = ...) -> None: ...

class ListOffsetsPartitionResponse(_message.Message):
    __slots__ = ("partition", "error_code", "timestamp", "offset", "leader_epoch")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    partition: int
    error_code: ErrorCode
    timestamp: int
    offset: int
    leader_epoch: int
    def __init__(self, partition: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., timestamp: _Optional[int] = ..., offset: _Optional[int] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class ListOffsetsTopicResponse(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[ListOffsetsPartitionResponse]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[ListOffsetsPartitionResponse, _Mapping]]] = ...) -> None: ...

class ListOffsetsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[ListOffsetsTopicResponse]
    def __init__(self, topics: _Optional[_Iterable[_Union[ListOffsetsTopicResponse, _Mapping]]] = ...) -> None: ...

class OffsetForLeaderPartition(_message.Message):
    __slots__ = ("partition", "current_leader_epoch", "leader_epoch")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    CURRENT_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    partition: int
    current_leader_epoch: int
    leader_epoch: int
    def __init__(self, partition: _Optional[int] = ..., current_leader_epoch: _Optional[int] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class OffsetForLeaderTopic(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedCompositeFieldContainer[OffsetForLeaderPartition]
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetForLeaderPartition, _Mapping]]] = ...) -> None: ...

class OffsetsForLeaderEpochRequest(_message.Message):
    __slots__ = ("replica_id", "topics")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    replica_id: int
    topics: _containers.RepeatedCompositeFieldContainer[OffsetForLeaderTopic]
    def __init__(self, replica_id: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[OffsetForLeaderTopic, _Mapping]]] = ...) -> None: ...

class EpochEndOffset(_message.Message):
    __slots__ = ("error_code", "partition", "leader_epoch", "end_offset")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    partition: int
    leader_epoch: int
    end_offset: int
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., partition: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., end_offset: _Optional[int] = ...) -> None: ...

class OffsetForLeaderTopicResult(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedCompositeFieldContainer[EpochEndOffset]
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[EpochEndOffset, _Mapping]]] = ...) -> None: ...

class OffsetsForLeaderEpochResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[OffsetForLeaderTopicResult]
    def __init__(self, topics: _Optional[_Iterable[_Union[OffsetForLeaderTopicResult, _Mapping]]] = ...) -> None: ...

class ReplicaAssignment(_message.Message):
    __slots__ = ("partition", "broker_ids")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    BROKER_IDS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    broker_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partition: _Optional[int] = ..., broker_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class CreatableTopic(_message.Message):
    __slots__ = ("name", "num_partitions", "replication_factor", "assignments", "configs")
    class ConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    NUM_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    num_partitions: int
    replication_factor: int
    assignments: _containers.RepeatedCompositeFieldContainer[ReplicaAssignment]
    configs: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., num_partitions: _Optional[int] = ..., replication_factor: _Optional[int] = ..., assignments: _Optional[_Iterable[_Union[ReplicaAssignment, _Mapping]]] = ..., configs: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CreateTopicsRequest(_message.Message):
    __slots__ = ("topics", "timeout_ms", "validate_only")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[CreatableTopic]
    timeout_ms: int
    validate_only: bool
    def __init__(self, topics: _Optional[_Iterable[_Union[CreatableTopic, _Mapping]]] = ..., timeout_ms: _Optional[int] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class CreatableTopicResult(_message.Message):
    __slots__ = ("name", "error_code", "error_message", "num_partitions", "replication_factor")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NUM_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    name: str
    error_code: ErrorCode
    error_message: str
    num_partitions: int
    replication_factor: int
    def __init__(self, name: _Optional[str] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., num_partitions: _Optional[int] = ..., replication_factor: _Optional[int] = ...) -> None: ...

class CreateTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[CreatableTopicResult]
    def __init__(self, topics: _Optional[_Iterable[_Union[CreatableTopicResult, _Mapping]]] = ...) -> None: ...

class DeleteTopicsRequest(_message.Message):
    __slots__ = ("topic_names", "timeout_ms")
    TOPIC_NAMES_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    topic_names: _containers.RepeatedScalarFieldContainer[str]
    timeout_ms: int
    def __init__(self, topic_names: _Optional[_Iterable[str]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class DeletableTopicResult(_message.Message):
    __slots__ = ("name", "error_code", "error_message")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    name: str
    error_code: ErrorCode
    error_message: str
    def __init__(self, name: _Optional[str] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class DeleteTopicsResponse(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[DeletableTopicResult]
    def __init__(self, responses: _Optional[_Iterable[_Union[DeletableTopicResult, _Mapping]]] = ...) -> None: ...

class CreatePartitionsAssignment(_message.Message):
    __slots__ = ("broker_ids",)
    BROKER_IDS_FIELD_NUMBER: _ClassVar[int]
    broker_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, broker_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class CreatePartitionsTopic(_message.Message):
    __slots__ = ("name", "count", "assignments")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    count: int
    assignments: _containers.RepeatedCompositeFieldContainer[CreatePartitionsAssignment]
    def __init__(self, name: _Optional[str] = ..., count: _Optional[int] = ..., assignments: _Optional[_Iterable[_Union[CreatePartitionsAssignment, _Mapping]]] = ...) -> None: ...

class CreatePartitionsRequest(_message.Message):
    __slots__ = ("topics", "timeout_ms", "validate_only")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[CreatePartitionsTopic]
    timeout_ms: int
    validate_only: bool
    def __init__(self, topics: _Optional[_Iterable[_Union[CreatePartitionsTopic, _Mapping]]] = ..., timeout_ms: _Optional[int] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class CreatePartitionsTopicResult(_message.Message):
    __slots__ = ("name", "error_code", "error_message")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    name: str
    error_code: ErrorCode
    error_message: str
    def __init__(self, name: _Optional[str] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class CreatePartitionsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CreatePartitionsTopicResult]
    def __init__(self, results: _Optional[_Iterable[_Union[CreatePartitionsTopicResult, _Mapping]]] = ...) -> None: ...

class DeleteRecordsPartition(_message.Message):
    __slots__ = ("partition", "offset")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class DeleteRecordsTopic(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[DeleteRecordsPartition]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[DeleteRecordsPartition, _Mapping]]] = ...) -> None: ...

class DeleteRecordsRequest(_message.Message):
    __slots__ = ("topics", "timeout_ms")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[DeleteRecordsTopic]
    timeout_ms: int
    def __init__(self, topics: _Optional[_Iterable[_Union[DeleteRecordsTopic, _Mapping]]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class DeleteRecordsPartitionResult(_message.Message):
    __slots__ = ("partition", "low_watermark", "error_code", "error_message")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LOW_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    partition: int
    low_watermark: int
    error_code: ErrorCode
    error_message: str
    def __init__(self, partition: _Optional[int] = ..., low_watermark: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class DeleteRecordsTopicResult(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[DeleteRecordsPartitionResult]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[DeleteRecordsPartitionResult, _Mapping]]] = ...) -> None: ...

class DeleteRecordsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[DeleteRecordsTopicResult]
    def __init__(self, topics: _Optional[_Iterable[_Union[DeleteRecordsTopicResult, _Mapping]]] = ...) -> None: ...

class DescribeConfigsResource(_message.Message):
    __slots__ = ("resource_type", "resource_name", "configuration_keys")
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIGURATION_KEYS_FIELD_NUMBER: _ClassVar[int]
    resource_type: ConfigResourceType
    resource_name: str
    configuration_keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, resource_type: _Optional[_Union[ConfigResourceType, str]] = ..., resource_name: _Optional[str] = ..., configuration_keys: _Optional[_Iterable[str]] = ...) -> None: ...

class DescribeConfigsRequest(_message.Message):
    __slots__ = ("resources",)
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    resources: _containers.RepeatedCompositeFieldContainer[DescribeConfigsResource]
    def __init__(self, resources: _Optional[_Iterable[_Union[DescribeConfigsResource, _Mapping]]] = ...) -> None: ...

class ConfigEntry(_message.Message):
    __slots__ = ("name", "value", "read_only", "is_default", "source", "is_sensitive", "synonyms", "documentation", "config_type", "value_null")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    IS_SENSITIVE_FIELD_NUMBER: _ClassVar[int]
    SYNONYMS_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTATION_FIELD_NUMBER: _ClassVar[int]
    CONFIG_TYPE_FIELD_NUMBER: _ClassVar[int]
    VALUE_NULL_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    read_only: bool
    is_default: bool
    source: ConfigSource
    is_sensitive: bool
    synonyms: _containers.RepeatedCompositeFieldContainer[ConfigSynonym]
    documentation: str
    config_type: int
    value_null: bool
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., read_only: _Optional[bool] = ..., is_default: _Optional[bool] = ..., source: _Optional[_Union[ConfigSource, str]] = ..., is_sensitive: _Optional[bool] = ..., synonyms: _Optional[_Iterable[_Union[ConfigSynonym, _Mapping]]] = ..., documentation: _Optional[str] = ..., config_type: _Optional[int] = ..., value_null: _Optional[bool] = ...) -> None: ...

class ConfigSynonym(_message.Message):
    __slots__ = ("name", "value", "source")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    source: ConfigSource
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., source: _Optional[_Union[ConfigSource, str]] = ...) -> None: ...

class DescribeConfigsResult(_message.Message):
    __slots__ = ("error_code", "error_message", "resource_type", "resource_name", "configs")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    error_message: str
    resource_type: ConfigResourceType
    resource_name: str
    configs: _containers.RepeatedCompositeFieldContainer[ConfigEntry]
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., resource_type: _Optional[_Union[ConfigResourceType, str]] = ..., resource_name: _Optional[str] = ..., configs: _Optional[_Iterable[_Union[ConfigEntry, _Mapping]]] = ...) -> None: ...

class DescribeConfigsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[DescribeConfigsResult]
    def __init__(self, results: _Optional[_Iterable[_Union[DescribeConfigsResult, _Mapping]]] = ...) -> None: ...

class AlterableConfig(_message.Message):
    __slots__ = ("name", "op", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    op: AlterConfigOp
    value: str
    def __init__(self, name: _Optional[str] = ..., op: _Optional[_Union[AlterConfigOp, str]] = ..., value: _Optional[str] = ...) -> None: ...

class AlterConfigsResource(_message.Message):
    __slots__ = ("resource_type", "resource_name", "configs")
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    resource_type: ConfigResourceType
    resource_name: str
    configs: _containers.RepeatedCompositeFieldContainer[AlterableConfig]
    def __init__(self, resource_type: _Optional[_Union[ConfigResourceType, str]] = ..., resource_name: _Optional[str] = ..., configs: _Optional[_Iterable[_Union[AlterableConfig, _Mapping]]] = ...) -> None: ...

class AlterConfigsRequest(_message.Message):
    __slots__ = ("resources", "validate_only")
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    resources: _containers.RepeatedCompositeFieldContainer[AlterConfigsResource]
    validate_only: bool
    def __init__(self, resources: _Optional[_Iterable[_Union[AlterConfigsResource, _Mapping]]] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class AlterConfigsResult(_message.Message):
    __slots__ = ("error_code", "error_message", "resource_type", "resource_name")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    error_message: str
    resource_type: ConfigResourceType
    resource_name: str
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., resource_type: _Optional[_Union[ConfigResourceType, str]] = ..., resource_name: _Optional[str] = ...) -> None: ...

class AlterConfigsResponse(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[AlterConfigsResult]
    def __init__(self, responses: _Optional[_Iterable[_Union[AlterConfigsResult, _Mapping]]] = ...) -> None: ...

class InitProducerIdRequest(_message.Message):
    __slots__ = ("transactional_id", "transaction_timeout_ms", "producer_id", "producer_epoch")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    transaction_timeout_ms: int
    producer_id: int
    producer_epoch: int
    def __init__(self, transactional_id: _Optional[str] = ..., transaction_timeout_ms: _Optional[int] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ...) -> None: ...

class InitProducerIdResponse(_message.Message):
    __slots__ = ("error_code", "producer_id", "producer_epoch")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    producer_id: int
    producer_epoch: int
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ...) -> None: ...

class LeaderAndIsrPartitionState(_message.Message):
    __slots__ = ("topic_name", "partition_index", "controller_epoch", "leader", "leader_epoch", "isr", "zk_version", "replicas", "adding_replicas", "removing_replicas", "is_new")
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    ZK_VERSION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ADDING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REMOVING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    IS_NEW_FIELD_NUMBER: _ClassVar[int]
    topic_name: str
    partition_index: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: _containers.RepeatedScalarFieldContainer[int]
    zk_version: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    adding_replicas: _containers.RepeatedScalarFieldContainer[int]
    removing_replicas: _containers.RepeatedScalarFieldContainer[int]
    is_new: bool
    def __init__(self, topic_name: _Optional[str] = ..., partition_index: _Optional[int] = ..., controller_epoch: _Optional[int] = ..., leader: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., isr: _Optional[_Iterable[int]] = ..., zk_version: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., adding_replicas: _Optional[_Iterable[int]] = ..., removing_replicas: _Optional[_Iterable[int]] = ..., is_new: _Optional[bool] = ...) -> None: ...

class LeaderAndIsrRequest(_message.Message):
    __slots__ = ("controller_id", "controller_epoch", "broker_epoch", "partition_states", "live_leaders")
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITION_STATES_FIELD_NUMBER: _ClassVar[int]
    LIVE_LEADERS_FIELD_NUMBER: _ClassVar[int]
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partition_states: _containers.RepeatedCompositeFieldContainer[LeaderAndIsrPartitionState]
    live_leaders: _containers.RepeatedCompositeFieldContainer[BrokerEndpoint]
    def __init__(self, controller_id: _Optional[int] = ..., controller_epoch: _Optional[int] = ..., broker_epoch: _Optional[int] = ..., partition_states: _Optional[_Iterable[_Union[LeaderAndIsrPartitionState, _Mapping]]] = ..., live_leaders: _Optional[_Iterable[_Union[BrokerEndpoint, _Mapping]]] = ...) -> None: ...

class PartitionError(_message.Message):
    __slots__ = ("topic_name", "partition_index", "error_code")
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    topic_name: str
    partition_index: int
    error_code: ErrorCode
    def __init__(self, topic_name: _Optional[str] = ..., partition_index: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ...) -> None: ...

class LeaderAndIsrResponse(_message.Message):
    __slots__ = ("error_code", "partition_errors")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ERRORS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    partition_errors: _containers.RepeatedCompositeFieldContainer[PartitionError]
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., partition_errors: _Optional[_Iterable[_Union[PartitionError, _Mapping]]] = ...) -> None: ...

class UpdateMetadataPartitionState(_message.Message):
    __slots__ = ("topic_name", "partition_index", "controller_epoch", "leader", "leader_epoch", "isr", "zk_version", "replicas", "offline_replicas")
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    ZK_VERSION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    OFFLINE_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    topic_name: str
    partition_index: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: _containers.RepeatedScalarFieldContainer[int]
    zk_version: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    offline_replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic_name: _Optional[str] = ..., partition_index: _Optional[int] = ..., controller_epoch: _Optional[int] = ..., leader: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., isr: _Optional[_Iterable[int]] = ..., zk_version: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., offline_replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class UpdateMetadataRequest(_message.Message):
    __slots__ = ("controller_id", "controller_epoch", "broker_epoch", "partition_states", "live_brokers", "deleted_topics")
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITION_STATES_FIELD_NUMBER: _ClassVar[int]
    LIVE_BROKERS_FIELD_NUMBER: _ClassVar[int]
    DELETED_TOPICS_FIELD_NUMBER: _ClassVar[int]
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partition_states: _containers.RepeatedCompositeFieldContainer[UpdateMetadataPartitionState]
    live_brokers: _containers.RepeatedCompositeFieldContainer[BrokerEndpoint]
    deleted_topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, controller_id: _Optional[int] = ..., controller_epoch: _Optional[int] = ..., broker_epoch: _Optional[int] = ..., partition_states: _Optional[_Iterable[_Union[UpdateMetadataPartitionState, _Mapping]]] = ..., live_brokers: _Optional[_Iterable[_Union[BrokerEndpoint, _Mapping]]] = ..., deleted_topics: _Optional[_Iterable[str]] = ...) -> None: ...

class UpdateMetadataResponse(_message.Message):
    __slots__ = ("error_code",)
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ...) -> None: ...

class StopReplicaPartition(_message.Message):
    __slots__ = ("topic_name", "partition_index", "leader_epoch", "delete_partition")
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    DELETE_PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic_name: str
    partition_index: int
    leader_epoch: int
    delete_partition: bool
    def __init__(self, topic_name: _Optional[str] = ..., partition_index: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., delete_partition: _Optional[bool] = ...) -> None: ...

class StopReplicaRequest(_message.Message):
    __slots__ = ("controller_id", "controller_epoch", "broker_epoch", "partitions")
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partitions: _containers.RepeatedCompositeFieldContainer[StopReplicaPartition]
    def __init__(self, controller_id: _Optional[int] = ..., controller_epoch: _Optional[int] = ..., broker_epoch: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[StopReplicaPartition, _Mapping]]] = ...) -> None: ...

class StopReplicaResponse(_message.Message):
    __slots__ = ("error_code", "partition_errors")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ERRORS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    partition_errors: _containers.RepeatedCompositeFieldContainer[PartitionError]
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., partition_errors: _Optional[_Iterable[_Union[PartitionError, _Mapping]]] = ...) -> None: ...

class ControlledShutdownRequest(_message.Message):
    __slots__ = ("broker_id", "broker_epoch")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ...) -> None: ...

class TopicPartitionRef(_message.Message):
    __slots__ = ("topic_name", "partition_index")
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    topic_name: str
    partition_index: int
    def __init__(self, topic_name: _Optional[str] = ..., partition_index: _Optional[int] = ...) -> None: ...

class ControlledShutdownResponse(_message.Message):
    __slots__ = ("error_code", "remaining_partitions")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    REMAINING_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    remaining_partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitionRef]
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., remaining_partitions: _Optional[_Iterable[_Union[TopicPartitionRef, _Mapping]]] = ...) -> None: ...

class DescribeReplicasRequest(_message.Message):
    __slots__ = ("topics", "max_events")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    MAX_EVENTS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    max_events: int
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., max_events: _Optional[int] = ...) -> None: ...

class FollowerState(_message.Message):
    __slots__ = ("broker_id", "log_end_offset", "last_caught_up_ms_ago")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_CAUGHT_UP_MS_AGO_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    log_end_offset: int
    last_caught_up_ms_ago: int
    def __init__(self, broker_id: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., last_caught_up_ms_ago: _Optional[int] = ...) -> None: ...

class ReplicaState(_message.Message):
    __slots__ = ("topic", "partition", "is_leader", "leader", "leader_epoch", "log_start_offset", "log_end_offset", "high_watermark", "replicas", "isr", "size_bytes", "segments", "followers")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    IS_LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    FOLLOWERS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    is_leader: bool
    leader: int
    leader_epoch: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    isr: _containers.RepeatedScalarFieldContainer[int]
    size_bytes: int
    segments: int
    followers: _containers.RepeatedCompositeFieldContainer[FollowerState]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., is_leader: _Optional[bool] = ..., leader: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., high_watermark: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., isr: _Optional[_Iterable[int]] = ..., size_bytes: _Optional[int] = ..., segments: _Optional[int] = ..., followers: _Optional[_Iterable[_Union[FollowerState, _Mapping]]] = ...) -> None: ...

class ClusterEvent(_message.Message):
    __slots__ = ("timestamp_ms", "broker_id", "kind", "topic", "partition", "detail")
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    timestamp_ms: int
    broker_id: int
    kind: str
    topic: str
    partition: int
    detail: str
    def __init__(self, timestamp_ms: _Optional[int] = ..., broker_id: _Optional[int] = ..., kind: _Optional[str] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...

class DescribeReplicasResponse(_message.Message):
    __slots__ = ("broker_id", "replicas", "events", "is_controller", "controller_epoch")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    IS_CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaState]
    events: _containers.RepeatedCompositeFieldContainer[ClusterEvent]
    is_controller: bool
    controller_epoch: int
    def __init__(self, broker_id: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[ReplicaState, _Mapping]]] = ..., events: _Optional[_Iterable[_Union[ClusterEvent, _Mapping]]] = ..., is_controller: _Optional[bool] = ..., controller_epoch: _Optional[int] = ...) -> None: ...

class ElectLeadersRequest(_message.Message):
    __slots__ = ("partitions", "timeout_ms", "election_type")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    ELECTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitionRef]
    timeout_ms: int
    election_type: ElectionType
    def __init__(self, partitions: _Optional[_Iterable[_Union[TopicPartitionRef, _Mapping]]] = ..., timeout_ms: _Optional[int] = ..., election_type: _Optional[_Union[ElectionType, str]] = ...) -> None: ...

class PartitionResult(_message.Message):
    __slots__ = ("topic_name", "partition_index", "error_code", "error_message")
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    topic_name: str
    partition_index: int
    error_code: ErrorCode
    error_message: str
    def __init__(self, topic_name: _Optional[str] = ..., partition_index: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class ElectLeadersResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "results")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    error_message: str
    results: _containers.RepeatedCompositeFieldContainer[PartitionResult]
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., results: _Optional[_Iterable[_Union[PartitionResult, _Mapping]]] = ...) -> None: ...

class ReassignablePartition(_message.Message):
    __slots__ = ("topic_name", "partition_index", "replicas", "cancel", "current_replicas", "adding_replicas", "removing_replicas")
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    CURRENT_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ADDING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REMOVING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    topic_name: str
    partition_index: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    cancel: bool
    current_replicas: _containers.RepeatedScalarFieldContainer[int]
    adding_replicas: _containers.RepeatedScalarFieldContainer[int]
    removing_replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic_name: _Optional[str] = ..., partition_index: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., cancel: _Optional[bool] = ..., current_replicas: _Optional[_Iterable[int]] = ..., adding_replicas: _Optional[_Iterable[int]] = ..., removing_replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class AlterPartitionReassignmentsRequest(_message.Message):
    __slots__ = ("partitions", "timeout_ms")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[ReassignablePartition]
    timeout_ms: int
    def __init__(self, partitions: _Optional[_Iterable[_Union[ReassignablePartition, _Mapping]]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class AlterPartitionReassignmentsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "results")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    error_message: str
    results: _containers.RepeatedCompositeFieldContainer[PartitionResult]
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., results: _Optional[_Iterable[_Union[PartitionResult, _Mapping]]] = ...) -> None: ...

class ListPartitionReassignmentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListPartitionReassignmentsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "reassignments")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    error_message: str
    reassignments: _containers.RepeatedCompositeFieldContainer[ReassignablePartition]
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., reassignments: _Optional[_Iterable[_Union[ReassignablePartition, _Mapping]]] = ...) -> None: ...

class AclBinding(_message.Message):
    __slots__ = ("resource_type", "resource_name", "principal", "host", "operation", "permission_type", "pattern_type")
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    PATTERN_TYPE_FIELD_NUMBER: _ClassVar[int]
    resource_type: AclResourceType
    resource_name: str
    principal: str
    host: str
    operation: str
    permission_type: str
    pattern_type: AclPatternType
    def __init__(self, resource_type: _Optional[_Union[AclResourceType, str]] = ..., resource_name: _Optional[str] = ..., principal: _Optional[str] = ..., host: _Optional[str] = ..., operation: _Optional[str] = ..., permission_type: _Optional[str] = ..., pattern_type: _Optional[_Union[AclPatternType, str]] = ...) -> None: ...

class CreateAclsRequest(_message.Message):
    __slots__ = ("creations",)
    CREATIONS_FIELD_NUMBER: _ClassVar[int]
    creations: _containers.RepeatedCompositeFieldContainer[AclBinding]
    def __init__(self, creations: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...

class AclResult(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    error_message: str
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class CreateAclsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AclResult]
    def __init__(self, results: _Optional[_Iterable[_Union[AclResult, _Mapping]]] = ...) -> None: ...

class AclFilter(_message.Message):
    __slots__ = ("resource_type", "resource_name", "principal", "host", "operation", "permission_type", "pattern_type")
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    PATTERN_TYPE_FIELD_NUMBER: _ClassVar[int]
    resource_type: AclResourceType
    resource_name: str
    principal: str
    host: str
    operation: str
    permission_type: str
    pattern_type: AclPatternType
    def __init__(self, resource_type: _Optional[_Union[AclResourceType, str]] = ..., resource_name: _Optional[str] = ..., principal: _Optional[str] = ..., host: _Optional[str] = ..., operation: _Optional[str] = ..., permission_type: _Optional[str] = ..., pattern_type: _Optional[_Union[AclPatternType, str]] = ...) -> None: ...

class DescribeAclsRequest(_message.Message):
    __slots__ = ("filter",)
    FILTER_FIELD_NUMBER: _ClassVar[int]
    filter: AclFilter
    def __init__(self, filter: _Optional[_Union[AclFilter, _Mapping]] = ...) -> None: ...

class DescribeAclsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "acls")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ACLS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    error_message: str
    acls: _containers.RepeatedCompositeFieldContainer[AclBinding]
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., acls: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...

class DeleteAclsRequest(_message.Message):
    __slots__ = ("filters",)
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    filters: _containers.RepeatedCompositeFieldContainer[AclFilter]
    def __init__(self, filters: _Optional[_Iterable[_Union[AclFilter, _Mapping]]] = ...) -> None: ...

class DeleteAclsFilterResult(_message.Message):
    __slots__ = ("error_code", "error_message", "matching_acls")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MATCHING_ACLS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    error_message: str
    matching_acls: _containers.RepeatedCompositeFieldContainer[AclBinding]
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., matching_acls: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...

class DeleteAclsResponse(_message.Message):
    __slots__ = ("filter_results",)
    FILTER_RESULTS_FIELD_NUMBER: _ClassVar[int]
    filter_results: _containers.RepeatedCompositeFieldContainer[DeleteAclsFilterResult]
    def __init__(self, filter_results: _Optional[_Iterable[_Union[DeleteAclsFilterResult, _Mapping]]] = ...) -> None: ...

class ScramCredentialUpsertion(_message.Message):
    __slots__ = ("name", "mechanism", "iterations", "salt", "salted_password")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    SALT_FIELD_NUMBER: _ClassVar[int]
    SALTED_PASSWORD_FIELD_NUMBER: _ClassVar[int]
    name: str
    mechanism: str
    iterations: int
    salt: bytes
    salted_password: bytes
    def __init__(self, name: _Optional[str] = ..., mechanism: _Optional[str] = ..., iterations: _Optional[int] = ..., salt: _Optional[bytes] = ..., salted_password: _Optional[bytes] = ...) -> None: ...

class ScramCredentialDeletion(_message.Message):
    __slots__ = ("name", "mechanism")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    name: str
    mechanism: str
    def __init__(self, name: _Optional[str] = ..., mechanism: _Optional[str] = ...) -> None: ...

class AlterUserScramCredentialsRequest(_message.Message):
    __slots__ = ("deletions", "upsertions")
    DELETIONS_FIELD_NUMBER: _ClassVar[int]
    UPSERTIONS_FIELD_NUMBER: _ClassVar[int]
    deletions: _containers.RepeatedCompositeFieldContainer[ScramCredentialDeletion]
    upsertions: _containers.RepeatedCompositeFieldContainer[ScramCredentialUpsertion]
    def __init__(self, deletions: _Optional[_Iterable[_Union[ScramCredentialDeletion, _Mapping]]] = ..., upsertions: _Optional[_Iterable[_Union[ScramCredentialUpsertion, _Mapping]]] = ...) -> None: ...

class UserResult(_message.Message):
    __slots__ = ("user", "error_code", "error_message")
    USER_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    user: str
    error_code: ErrorCode
    error_message: str
    def __init__(self, user: _Optional[str] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class AlterUserScramCredentialsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[UserResult]
    def __init__(self, results: _Optional[_Iterable[_Union[UserResult, _Mapping]]] = ...) -> None: ...

class DescribeUserScramCredentialsRequest(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, users: _Optional[_Iterable[str]] = ...) -> None: ...

class UserScramDescription(_message.Message):
    __slots__ = ("user", "error_code", "error_message", "mechanism", "iterations")
    USER_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    user: str
    error_code: ErrorCode
    error_message: str
    mechanism: str
    iterations: int
    def __init__(self, user: _Optional[str] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., mechanism: _Optional[str] = ..., iterations: _Optional[int] = ...) -> None: ...

class DescribeUserScramCredentialsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "results")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    error_message: str
    results: _containers.RepeatedCompositeFieldContainer[UserScramDescription]
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., results: _Optional[_Iterable[_Union[UserScramDescription, _Mapping]]] = ...) -> None: ...

class FindCoordinatorRequest(_message.Message):
    __slots__ = ("key", "key_type")
    KEY_FIELD_NUMBER: _ClassVar[int]
    KEY_TYPE_FIELD_NUMBER: _ClassVar[int]
    key: str
    key_type: int
    def __init__(self, key: _Optional[str] = ..., key_type: _Optional[int] = ...) -> None: ...

class FindCoordinatorResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "node_id", "host", "port")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    error_message: str
    node_id: int
    host: str
    port: int
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., node_id: _Optional[int] = ..., host: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class JoinGroupProtocol(_message.Message):
    __slots__ = ("name", "metadata")
    NAME_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    metadata: bytes
    def __init__(self, name: _Optional[str] = ..., metadata: _Optional[bytes] = ...) -> None: ...

class JoinGroupRequest(_message.Message):
    __slots__ = ("group_id", "session_timeout_ms", "rebalance_timeout_ms", "member_id", "protocol_type", "protocols", "client_id", "require_known_member_id", "group_instance_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOLS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_KNOWN_MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str
    protocol_type: str
    protocols: _containers.RepeatedCompositeFieldContainer[JoinGroupProtocol]
    client_id: str
    require_known_member_id: bool
    group_instance_id: str
    def __init__(self, group_id: _Optional[str] = ..., session_timeout_ms: _Optional[int] = ..., rebalance_timeout_ms: _Optional[int] = ..., member_id: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocols: _Optional[_Iterable[_Union[JoinGroupProtocol, _Mapping]]] = ..., client_id: _Optional[str] = ..., require_known_member_id: _Optional[bool] = ..., group_instance_id: _Optional[str] = ...) -> None: ...

class JoinGroupMember(_message.Message):
    __slots__ = ("member_id", "metadata", "group_instance_id")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    metadata: bytes
    group_instance_id: str
    def __init__(self, member_id: _Optional[str] = ..., metadata: _Optional[bytes] = ..., group_instance_id: _Optional[str] = ...) -> None: ...

class JoinGroupResponse(_message.Message):
    __slots__ = ("error_code", "generation_id", "protocol_name", "leader", "member_id", "members")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    generation_id: int
    protocol_name: str
    leader: str
    member_id: str
    members: _containers.RepeatedCompositeFieldContainer[JoinGroupMember]
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., generation_id: _Optional[int] = ..., protocol_name: _Optional[str] = ..., leader: _Optional[str] = ..., member_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[JoinGroupMember, _Mapping]]] = ...) -> None: ...

class SyncGroupAssignment(_message.Message):
    __slots__ = ("member_id", "assignment")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    assignment: bytes
    def __init__(self, member_id: _Optional[str] = ..., assignment: _Optional[bytes] = ...) -> None: ...

class SyncGroupRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "assignments", "group_instance_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    assignments: _containers.RepeatedCompositeFieldContainer[SyncGroupAssignment]
    group_instance_id: str
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., assignments: _Optional[_Iterable[_Union[SyncGroupAssignment, _Mapping]]] = ..., group_instance_id: _Optional[str] = ...) -> None: ...

class SyncGroupResponse(_message.Message):
    __slots__ = ("error_code", "assignment")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    assignment: bytes
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., assignment: _Optional[bytes] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("error_code",)
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ...) -> None: ...

class LeaveGroupRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "group_instance_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    group_instance_id: str
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ...) -> None: ...

class LeaveGroupResponse(_message.Message):
    __slots__ = ("error_code",)
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ...) -> None: ...

class OffsetCommitPartition(_message.Message):
    __slots__ = ("partition", "offset", "metadata")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    metadata: str
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ..., metadata: _Optional[str] = ...) -> None: ...

class OffsetCommitTopic(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[OffsetCommitPartition]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetCommitPartition, _Mapping]]] = ...) -> None: ...

class OffsetCommitRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "topics", "group_instance_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    topics: _containers.RepeatedCompositeFieldContainer[OffsetCommitTopic]
    group_instance_id: str
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[OffsetCommitTopic, _Mapping]]] = ..., group_instance_id: _Optional[str] = ...) -> None: ...

class OffsetCommitPartitionResponse(_message.Message):
    __slots__ = ("partition", "error_code")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    partition: int
    error_code: ErrorCode
    def __init__(self, partition: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ...) -> None: ...

class OffsetCommitTopicResponse(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[OffsetCommitPartitionResponse]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetCommitPartitionResponse, _Mapping]]] = ...) -> None: ...

class OffsetCommitResponse(_message.Message):
    __slots__ = ("error_code", "topics")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    topics: _containers.RepeatedCompositeFieldContainer[OffsetCommitTopicResponse]
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., topics: _Optional[_Iterable[_Union[OffsetCommitTopicResponse, _Mapping]]] = ...) -> None: ...

class OffsetFetchTopic(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class OffsetFetchRequest(_message.Message):
    __slots__ = ("group_id", "topics", "require_stable")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_STABLE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    topics: _containers.RepeatedCompositeFieldContainer[OffsetFetchTopic]
    require_stable: bool
    def __init__(self, group_id: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[OffsetFetchTopic, _Mapping]]] = ..., require_stable: _Optional[bool] = ...) -> None: ...

class OffsetFetchPartitionResponse(_message.Message):
    __slots__ = ("partition", "committed_offset", "metadata", "error_code")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    partition: int
    committed_offset: int
    metadata: str
    error_code: ErrorCode
    def __init__(self, partition: _Optional[int] = ..., committed_offset: _Optional[int] = ..., metadata: _Optional[str] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ...) -> None: ...

class OffsetFetchTopicResponse(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[OffsetFetchPartitionResponse]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetFetchPartitionResponse, _Mapping]]] = ...) -> None: ...

class OffsetFetchResponse(_message.Message):
    __slots__ = ("error_code", "topics")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    topics: _containers.RepeatedCompositeFieldContainer[OffsetFetchTopicResponse]
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., topics: _Optional[_Iterable[_Union[OffsetFetchTopicResponse, _Mapping]]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListedGroup(_message.Message):
    __slots__ = ("group_id", "protocol_type")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    protocol_type: str
    def __init__(self, group_id: _Optional[str] = ..., protocol_type: _Optional[str] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("error_code", "groups")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    groups: _containers.RepeatedCompositeFieldContainer[ListedGroup]
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., groups: _Optional[_Iterable[_Union[ListedGroup, _Mapping]]] = ...) -> None: ...

class DescribeGroupsRequest(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, groups: _Optional[_Iterable[str]] = ...) -> None: ...

class DescribedGroupMember(_message.Message):
    __slots__ = ("member_id", "client_id", "client_host", "member_metadata", "member_assignment", "group_instance_id")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
    MEMBER_METADATA_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes
    group_instance_id: str
    def __init__(self, member_id: _Optional[str] = ..., client_id: _Optional[str] = ..., client_host: _Optional[str] = ..., member_metadata: _Optional[bytes] = ..., member_assignment: _Optional[bytes] = ..., group_instance_id: _Optional[str] = ...) -> None: ...

class DescribedGroup(_message.Message):
    __slots__ = ("error_code", "group_id", "group_state", "protocol_type", "protocol_data", "members")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_STATE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_DATA_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    group_id: str
    group_state: str
    protocol_type: str
    protocol_data: str
    members: _containers.RepeatedCompositeFieldContainer[DescribedGroupMember]
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., group_id: _Optional[str] = ..., group_state: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocol_data: _Optional[str] = ..., members: _Optional[_Iterable[_Union[DescribedGroupMember, _Mapping]]] = ...) -> None: ...

class DescribeGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[DescribedGroup]
    def __init__(self, groups: _Optional[_Iterable[_Union[DescribedGroup, _Mapping]]] = ...) -> None: ...

class DeleteGroupsRequest(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, groups: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteGroupsResult(_message.Message):
    __slots__ = ("group_id", "error_code")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    error_code: ErrorCode
    def __init__(self, group_id: _Optional[str] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ...) -> None: ...

class DeleteGroupsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[DeleteGroupsResult]
    def __init__(self, results: _Optional[_Iterable[_Union[DeleteGroupsResult, _Mapping]]] = ...) -> None: ...

class OffsetDeleteTopic(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class OffsetDeleteRequest(_message.Message):
    __slots__ = ("group_id", "topics")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    topics: _containers.RepeatedCompositeFieldContainer[OffsetDeleteTopic]
    def __init__(self, group_id: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[OffsetDeleteTopic, _Mapping]]] = ...) -> None: ...

class OffsetDeletePartitionResponse(_message.Message):
    __slots__ = ("partition", "error_code")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    partition: int
    error_code: ErrorCode
    def __init__(self, partition: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ...) -> None: ...

class OffsetDeleteTopicResponse(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[OffsetDeletePartitionResponse]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetDeletePartitionResponse, _Mapping]]] = ...) -> None: ...

class OffsetDeleteResponse(_message.Message):
    __slots__ = ("error_code", "topics")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    topics: _containers.RepeatedCompositeFieldContainer[OffsetDeleteTopicResponse]
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., topics: _Optional[_Iterable[_Union[OffsetDeleteTopicResponse, _Mapping]]] = ...) -> None: ...

class DescribeClusterRequest(_message.Message):
    __slots__ = ("include_cluster_authorized_operations",)
    INCLUDE_CLUSTER_AUTHORIZED_OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    include_cluster_authorized_operations: bool
    def __init__(self, include_cluster_authorized_operations: _Optional[bool] = ...) -> None: ...

class DescribeClusterBroker(_message.Message):
    __slots__ = ("broker_id", "host", "port", "rack")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    host: str
    port: int
    rack: str
    def __init__(self, broker_id: _Optional[int] = ..., host: _Optional[str] = ..., port: _Optional[int] = ..., rack: _Optional[str] = ...) -> None: ...

class DescribeClusterResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "cluster_id", "controller_id", "brokers", "cluster_authorized_operations")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_AUTHORIZED_OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    error_message: str
    cluster_id: str
    controller_id: int
    brokers: _containers.RepeatedCompositeFieldContainer[DescribeClusterBroker]
    cluster_authorized_operations: int
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., cluster_id: _Optional[str] = ..., controller_id: _Optional[int] = ..., brokers: _Optional[_Iterable[_Union[DescribeClusterBroker, _Mapping]]] = ..., cluster_authorized_operations: _Optional[int] = ...) -> None: ...

class DescribeLogDirsTopic(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class DescribeLogDirsRequest(_message.Message):
    __slots__ = ("all_partitions", "topics")
    ALL_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    all_partitions: bool
    topics: _containers.RepeatedCompositeFieldContainer[DescribeLogDirsTopic]
    def __init__(self, all_partitions: _Optional[bool] = ..., topics: _Optional[_Iterable[_Union[DescribeLogDirsTopic, _Mapping]]] = ...) -> None: ...

class DescribeLogDirsPartition(_message.Message):
    __slots__ = ("partition", "size", "offset_lag", "is_future")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_LAG_FIELD_NUMBER: _ClassVar[int]
    IS_FUTURE_FIELD_NUMBER: _ClassVar[int]
    partition: int
    size: int
    offset_lag: int
    is_future: bool
    def __init__(self, partition: _Optional[int] = ..., size: _Optional[int] = ..., offset_lag: _Optional[int] = ..., is_future: _Optional[bool] = ...) -> None: ...

class DescribeLogDirsTopicResult(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[DescribeLogDirsPartition]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[DescribeLogDirsPartition, _Mapping]]] = ...) -> None: ...

class DescribeLogDirsResult(_message.Message):
    __slots__ = ("error_code", "log_dir", "topics", "total_bytes", "usable_bytes")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    LOG_DIR_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    USABLE_BYTES_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    log_dir: str
    topics: _containers.RepeatedCompositeFieldContainer[DescribeLogDirsTopicResult]
    total_bytes: int
    usable_bytes: int
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., log_dir: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[DescribeLogDirsTopicResult, _Mapping]]] = ..., total_bytes: _Optional[int] = ..., usable_bytes: _Optional[int] = ...) -> None: ...

class DescribeLogDirsResponse(_message.Message):
    __slots__ = ("error_code", "results")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    results: _containers.RepeatedCompositeFieldContainer[DescribeLogDirsResult]
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., results: _Optional[_Iterable[_Union[DescribeLogDirsResult, _Mapping]]] = ...) -> None: ...

class DescribeProducersTopic(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class DescribeProducersRequest(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[DescribeProducersTopic]
    def __init__(self, topics: _Optional[_Iterable[_Union[DescribeProducersTopic, _Mapping]]] = ...) -> None: ...

class ActiveProducer(_message.Message):
    __slots__ = ("producer_id", "producer_epoch", "last_sequence", "last_timestamp", "coordinator_epoch", "current_txn_start_offset")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    LAST_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    CURRENT_TXN_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int
    def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., last_sequence: _Optional[int] = ..., last_timestamp: _Optional[int] = ..., coordinator_epoch: _Optional[int] = ..., current_txn_start_offset: _Optional[int] = ...) -> None: ...

class DescribeProducersPartition(_message.Message):
    __slots__ = ("partition", "error_code", "error_message", "active_producers")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    error_code: ErrorCode
    error_message: str
    active_producers: _containers.RepeatedCompositeFieldContainer[ActiveProducer]
    def __init__(self, partition: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., active_producers: _Optional[_Iterable[_Union[ActiveProducer, _Mapping]]] = ...) -> None: ...

class DescribeProducersTopicResult(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[DescribeProducersPartition]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[DescribeProducersPartition, _Mapping]]] = ...) -> None: ...

class DescribeProducersResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[DescribeProducersTopicResult]
    def __init__(self, topics: _Optional[_Iterable[_Union[DescribeProducersTopicResult, _Mapping]]] = ...) -> None: ...

class WritableTxnMarkerTopic(_message.Message):
    __slots__ = ("name", "partition_indexes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITION_INDEXES_FIELD_NUMBER: _ClassVar[int]
    name: str
    partition_indexes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., partition_indexes: _Optional[_Iterable[int]] = ...) -> None: ...

class WritableTxnMarker(_message.Message):
    __slots__ = ("producer_id", "producer_epoch", "transaction_result", "topics", "coordinator_epoch")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_RESULT_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_epoch: int
    transaction_result: bool
    topics: _containers.RepeatedCompositeFieldContainer[WritableTxnMarkerTopic]
    coordinator_epoch: int
    def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., transaction_result: _Optional[bool] = ..., topics: _Optional[_Iterable[_Union[WritableTxnMarkerTopic, _Mapping]]] = ..., coordinator_epoch: _Optional[int] = ...) -> None: ...

class WriteTxnMarkersRequest(_message.Message):
    __slots__ = ("markers",)
    MARKERS_FIELD_NUMBER: _ClassVar[int]
    markers: _containers.RepeatedCompositeFieldContainer[WritableTxnMarker]
    def __init__(self, markers: _Optional[_Iterable[_Union[WritableTxnMarker, _Mapping]]] = ...) -> None: ...

class WritableTxnMarkerPartitionResult(_message.Message):
    __slots__ = ("partition_index", "error_code")
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    partition_index: int
    error_code: ErrorCode
    def __init__(self, partition_index: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ...) -> None: ...

class WritableTxnMarkerTopicResult(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[WritableTxnMarkerPartitionResult]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[WritableTxnMarkerPartitionResult, _Mapping]]] = ...) -> None: ...

class WritableTxnMarkerResult(_message.Message):
    __slots__ = ("producer_id", "topics")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    topics: _containers.RepeatedCompositeFieldContainer[WritableTxnMarkerTopicResult]
    def __init__(self, producer_id: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[WritableTxnMarkerTopicResult, _Mapping]]] = ...) -> None: ...

class WriteTxnMarkersResponse(_message.Message):
    __slots__ = ("markers",)
    MARKERS_FIELD_NUMBER: _ClassVar[int]
    markers: _containers.RepeatedCompositeFieldContainer[WritableTxnMarkerResult]
    def __init__(self, markers: _Optional[_Iterable[_Union[WritableTxnMarkerResult, _Mapping]]] = ...) -> None: ...

class AddPartitionsToTxnTopic(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class AddPartitionsToTxnRequest(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "topics", "transactions")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    topics: _containers.RepeatedCompositeFieldContainer[AddPartitionsToTxnTopic]
    transactions: _containers.RepeatedCompositeFieldContainer[AddPartitionsToTxnTransaction]
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[AddPartitionsToTxnTopic, _Mapping]]] = ..., transactions: _Optional[_Iterable[_Union[AddPartitionsToTxnTransaction, _Mapping]]] = ...) -> None: ...

class AddPartitionsToTxnPartitionResult(_message.Message):
    __slots__ = ("partition", "error_code")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    partition: int
    error_code: ErrorCode
    def __init__(self, partition: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ...) -> None: ...

class AddPartitionsToTxnTopicResult(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[AddPartitionsToTxnPartitionResult]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[AddPartitionsToTxnPartitionResult, _Mapping]]] = ...) -> None: ...

class AddPartitionsToTxnResponse(_message.Message):
    __slots__ = ("topics", "error_code", "results_by_transaction")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_BY_TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[AddPartitionsToTxnTopicResult]
    error_code: ErrorCode
    results_by_transaction: _containers.RepeatedCompositeFieldContainer[AddPartitionsToTxnResult]
    def __init__(self, topics: _Optional[_Iterable[_Union[AddPartitionsToTxnTopicResult, _Mapping]]] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., results_by_transaction: _Optional[_Iterable[_Union[AddPartitionsToTxnResult, _Mapping]]] = ...) -> None: ...

class AddOffsetsToTxnRequest(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "group_id")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., group_id: _Optional[str] = ...) -> None: ...

class AddOffsetsToTxnResponse(_message.Message):
    __slots__ = ("error_code",)
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ...) -> None: ...

class EndTxnRequest(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "committed")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., committed: _Optional[bool] = ...) -> None: ...

class EndTxnResponse(_message.Message):
    __slots__ = ("error_code",)
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ...) -> None: ...

class TxnOffsetCommitPartition(_message.Message):
    __slots__ = ("partition", "offset", "metadata", "leader_epoch")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    metadata: str
    leader_epoch: int
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ..., metadata: _Optional[str] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class TxnOffsetCommitTopic(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[TxnOffsetCommitPartition]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[TxnOffsetCommitPartition, _Mapping]]] = ...) -> None: ...

class TxnOffsetCommitRequest(_message.Message):
    __slots__ = ("transactional_id", "group_id", "producer_id", "producer_epoch", "generation_id", "member_id", "group_instance_id", "topics")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int
    member_id: str
    group_instance_id: str
    topics: _containers.RepeatedCompositeFieldContainer[TxnOffsetCommitTopic]
    def __init__(self, transactional_id: _Optional[str] = ..., group_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[TxnOffsetCommitTopic, _Mapping]]] = ...) -> None: ...

class TxnOffsetCommitPartitionResponse(_message.Message):
    __slots__ = ("partition", "error_code")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    partition: int
    error_code: ErrorCode
    def __init__(self, partition: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ...) -> None: ...

class TxnOffsetCommitTopicResponse(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[TxnOffsetCommitPartitionResponse]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[TxnOffsetCommitPartitionResponse, _Mapping]]] = ...) -> None: ...

class TxnOffsetCommitResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TxnOffsetCommitTopicResponse]
    def __init__(self, topics: _Optional[_Iterable[_Union[TxnOffsetCommitTopicResponse, _Mapping]]] = ...) -> None: ...

class AddPartitionsToTxnTransaction(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "verify_only", "topics")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    VERIFY_ONLY_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    verify_only: bool
    topics: _containers.RepeatedCompositeFieldContainer[AddPartitionsToTxnTopic]
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., verify_only: _Optional[bool] = ..., topics: _Optional[_Iterable[_Union[AddPartitionsToTxnTopic, _Mapping]]] = ...) -> None: ...

class AddPartitionsToTxnResult(_message.Message):
    __slots__ = ("transactional_id", "topic_results")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_RESULTS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    topic_results: _containers.RepeatedCompositeFieldContainer[AddPartitionsToTxnTopicResult]
    def __init__(self, transactional_id: _Optional[str] = ..., topic_results: _Optional[_Iterable[_Union[AddPartitionsToTxnTopicResult, _Mapping]]] = ...) -> None: ...
