"""The Kafka wire protocol's pure core (broker.network.kafka_wire): frames, advertised versions, translation.

No broker here: requests are built with kio's schemas, answers are protobuf responses, and every
response frame is read back with kio's own reader."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka_frames import frame, read_response
from kio.schema.errors import ErrorCode

from broker.log.config import TOPIC_CONFIG_NAMES
from broker.network import kafka_wire as kw
from broker.network.api_catalogue import APIS
from broker.security import kafka_sasl
from proto import minikafka_pb2 as pb

# Each API's response type, from the one catalogue (issue 28).
ANSWERS: dict[str, Any] = {a.name: a.response for a in APIS}

EVERY_VERSION = [(k, v) for k, (_n, lo, hi) in sorted(kw.SUPPORTED.items()) for v in range(lo, hi + 1)]


@pytest.mark.parametrize(("api_key", "version"), EVERY_VERSION)
def test_every_advertised_version_decodes_translates_and_answers(api_key: int, version: int) -> None:
    """What ApiVersions advertises is all answerable: a request of each version decodes, becomes
    protobuf requests, and their answers become a response frame kio reads back."""
    d = kw.decode_request(frame(api_key, version, correlation_id=41))
    assert (d.header.api_key, d.header.api_version, d.header.correlation_id) == (api_key, version, 41)
    if api_key == kw.API_VERSIONS:
        resp = kw.api_versions_response(d)
    elif api_key in kw.SASL_APIS:  # answered by the listener (broker.security.kafka_sasl), not translated
        resp = kw.response(d, kafka_sasl.illegal_state(api_key))
    else:
        plan = kw.to_pb(d)
        answers = [ANSWERS[api]() for api, _req in plan]
        resp = kw.from_pb(d, answers)
    correlation_id, body = read_response(kw.encode_response(d.header, resp), api_key, version)
    assert correlation_id == 41
    assert body == resp


def test_api_versions_advertises_exactly_the_supported_table() -> None:
    d = kw.decode_request(frame(18, 3, {"client_software_name": "t", "client_software_version": "1"}))
    _c, body = read_response(kw.encode_response(d.header, kw.api_versions_response(d)), 18, 3)
    assert body.error_code == ErrorCode.none
    assert {k.api_key: (k.min_version, k.max_version) for k in body.api_keys} == \
        {k: (lo, hi) for k, (_n, lo, hi) in kw.SUPPORTED.items()}


def test_an_unknown_api_versions_version_is_answered_in_v0_with_the_list() -> None:
    """Kafka's rule: a newer client's ApiVersions gets UNSUPPORTED_VERSION in v0, so it can retry lower."""
    data = struct.pack(">hhih", 18, 99, 5, 1) + b"x" + b"\0" * 8
    with pytest.raises(kw.UnsupportedVersion) as e:
        kw.decode_request(data)
    correlation_id, body = read_response(kw.unsupported_api_versions_frame(e.value.header), 18, 0)
    assert correlation_id == 5 and body.error_code == ErrorCode.unsupported_version
    assert len(body.api_keys) == len(kw.SUPPORTED)


@pytest.mark.parametrize("data", [
    b"",  # nothing
    struct.pack(">hhi", 3, 1, 1),  # no client id
    struct.pack(">hhih", 7, 0, 1, -1),  # ControlledShutdown: never advertised here
    struct.pack(">hhih", 0, 2, 1, -1),  # Produce v2: below the advertised range (magic < 2)
    struct.pack(">hhih", 1, 13, 1, -1),  # Fetch v13 (topic ids): above it
    struct.pack(">hhih", 3, 1, 1, -1) + struct.pack(">i", 1000),  # Metadata claiming 1000 topics
])
def test_what_is_not_an_advertised_request_is_a_protocol_error(data: bytes) -> None:
    with pytest.raises(kw.ProtocolError):
        kw.decode_request(data)


@given(st.binary(max_size=200))
def test_no_bytes_raise_anything_but_a_protocol_error(data: bytes) -> None:
    try:
        d = kw.decode_request(data)
    except kw.ProtocolError:
        return
    if d.header.api_key != kw.API_VERSIONS:
        kw.to_pb(d)


@given(st.sampled_from(EVERY_VERSION), st.data())
def test_truncated_requests_are_protocol_errors(kv: tuple[int, int], data: st.DataObject) -> None:
    raw = frame(*kv, correlation_id=3)
    cut = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    try:
        kw.decode_request(raw[:cut])
    except kw.ProtocolError:
        return
    # Some prefixes are whole requests of their own (an empty tagged-field tail, arrays of 0).


def test_metadata_all_topics_null_and_empty() -> None:
    def request(version: int, topics: Any) -> pb.MetadataRequest:
        d = kw.decode_request(frame(3, version, {"topics": topics}))
        ((api, req),) = kw.to_pb(d)
        assert api == "Metadata"
        return req  # type: ignore[no-any-return]

    assert request(0, []).all_topics  # v0: empty means all
    assert not request(1, []).all_topics and not request(1, []).topics  # v1+: empty means none
    assert request(1, None).all_topics  # v1+: null means all
    assert list(request(12, [{"name": "a", "topic_id": None}]).topics) == ["a"]


def test_produce_passes_batches_through_and_acks_zero_expects_no_answer() -> None:
    batch = b"\x00" * 61 + b"any bytes: the validator judges them"
    values = {"acks": -1, "timeout": 1500, "topic_data": [
        {"name": "t", "partition_data": [{"index": 2, "records": batch}]}]}
    d = kw.decode_request(frame(0, 9, values))
    ((api, req),) = kw.to_pb(d)
    assert api == "Produce" and req.acks == -1 and req.timeout_ms == 1500
    assert req.topics[0].partitions[0].records == batch and req.topics[0].partitions[0].partition == 2
    assert kw.expects_response(d)
    assert not kw.expects_response(kw.decode_request(frame(0, 9, {**values, "acks": 0})))


def test_produce_answer_keeps_offsets_and_typed_errors() -> None:
    d = kw.decode_request(frame(0, 8, {"acks": 1, "topic_data": [{"name": "t", "partition_data": [
        {"index": 0, "records": b"x"}, {"index": 1, "records": b"y"}]}]}))
    answer = pb.ProduceResponse(topics=[pb.ProduceTopicResponse(name="t", partitions=[
        pb.ProducePartitionResponse(partition=0, base_offset=42, log_append_time_ms=-1, log_start_offset=0),
        pb.ProducePartitionResponse(partition=1, error_code=pb.ErrorCode.NOT_LEADER_OR_FOLLOWER, base_offset=-1,
                                    log_append_time_ms=-1, log_start_offset=-1, error_message="moved")])])
    _c, body = read_response(kw.encode_response(d.header, kw.from_pb(d, [answer])), 0, 8)
    p0, p1 = body.responses[0].partition_responses
    assert (p0.index, p0.error_code, p0.base_offset, p0.log_append_time) == (0, ErrorCode.none, 42, None)
    assert (p1.index, p1.error_code, p1.error_message) == (1, ErrorCode.not_leader_or_follower, "moved")


def test_fetch_answers_as_a_sessionless_broker_with_the_stored_bytes() -> None:
    d = kw.decode_request(frame(1, 11, {"max_wait": 500, "min_bytes": 1, "session_epoch": 0, "topics": [
        {"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 5, "partition_max_bytes": 1 << 20,
                                       "current_leader_epoch": 3}]}]}))
    ((_api, req),) = kw.to_pb(d)
    assert req.replica_id == -1 and req.max_wait_ms == 500
    p = req.topics[0].partitions[0]
    assert (p.fetch_offset, p.current_leader_epoch, p.partition_max_bytes) == (5, 3, 1 << 20)
    answer = pb.FetchResponse(topics=[pb.FetchTopicResponse(name="t", partitions=[pb.FetchPartitionResponse(
        partition=0, high_watermark=9, last_stable_offset=9, log_start_offset=0, records=b"stored batch")])])
    _c, body = read_response(kw.encode_response(d.header, kw.from_pb(d, [answer])), 1, 11)
    assert body.session_id == 0
    part = body.responses[0].partitions[0]
    assert (part.high_watermark, part.records) == (9, b"stored batch")


def test_alter_configs_replaces_the_whole_set_incremental_keeps_the_rest() -> None:
    d = kw.decode_request(frame(33, 1, {"resources": [{"resource_type": 2, "resource_name": "t", "configs": [
        {"name": "retention.ms", "value": "1000"}]}], "validate_only": False}))
    ((_api, req),) = kw.to_pb(d)
    ops = {c.name: c.op for c in req.resources[0].configs}
    assert ops.pop("retention.ms") == pb.AlterConfigOp.SET
    assert set(ops) == set(TOPIC_CONFIG_NAMES) - {"retention.ms"}
    assert set(ops.values()) == {pb.AlterConfigOp.DELETE}
    d = kw.decode_request(frame(44, 1, {"resources": [{"resource_type": 2, "resource_name": "t", "configs": [
        {"name": "retention.ms", "config_operation": 1, "value": None}]}], "validate_only": True}))
    ((api, req),) = kw.to_pb(d)
    assert api == "AlterConfigs" and req.validate_only
    assert [(c.name, c.op) for c in req.resources[0].configs] == [("retention.ms", pb.AlterConfigOp.DELETE)]


def test_leave_group_v3_asks_once_per_member_and_answers_each() -> None:
    d = kw.decode_request(frame(13, 4, {"group_id": "g", "members": [{"member_id": "a"}, {"member_id": "b"}]}))
    plan = kw.to_pb(d)
    assert [(api, r.member_id) for api, r in plan] == [("LeaveGroup", "a"), ("LeaveGroup", "b")]
    resp = kw.from_pb(d, [pb.LeaveGroupResponse(), pb.LeaveGroupResponse(error_code=pb.ErrorCode.UNKNOWN_MEMBER_ID)])
    assert [(m.member_id, m.error_code) for m in resp.members] == [("a", ErrorCode.none),
                                                                    ("b", ErrorCode.unknown_member_id)]


def test_join_group_v0_takes_the_session_timeout_for_rebalances_and_the_header_client_id() -> None:
    d = kw.decode_request(frame(11, 0, {"group_id": "g", "session_timeout": 6000, "member_id": "",
                                         "protocol_type": "consumer", "protocols": [{"name": "range",
                                                                                     "metadata": b"m"}]},
                                client_id="rdkafka"))
    ((_api, req),) = kw.to_pb(d)
    assert (req.session_timeout_ms, req.rebalance_timeout_ms, req.client_id) == (6000, 6000, "rdkafka")
    assert [(p.name, p.metadata) for p in req.protocols] == [("range", b"m")]


@pytest.mark.parametrize(("version", "required"), [(3, False), (4, True), (7, True)])
def test_join_group_v4_and_later_require_a_known_member_id(version: int, required: bool) -> None:
    """KIP-394 (Kafka 2.2): from v4 on the client handles MEMBER_ID_REQUIRED, so the broker asks for it."""
    body = {"group_id": "g", "session_timeout": 6000, "rebalance_timeout": 9000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b"m"}]}
    if version >= 5:
        body["group_instance_id"] = None
    if version >= 7:
        body["reason"] = None
    d = kw.decode_request(frame(11, version, body))
    ((_api, req),) = kw.to_pb(d)
    assert req.require_known_member_id is required
    resp = kw.from_pb(d, [pb.JoinGroupResponse(error_code=pb.ErrorCode.MEMBER_ID_REQUIRED, generation_id=-1,
                                               member_id="c-1")])
    assert (resp.error_code, resp.member_id, resp.generation_id) == (ErrorCode.member_id_required, "c-1", -1)


def test_offset_fetch_v1_says_a_group_error_on_every_partition() -> None:
    d = kw.decode_request(frame(9, 1, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1]}]}))
    resp = kw.from_pb(d, [pb.OffsetFetchResponse(error_code=pb.ErrorCode.NOT_COORDINATOR)])
    assert [(p.partition_index, p.error_code) for p in resp.topics[0].partitions] == \
        [(0, ErrorCode.not_coordinator), (1, ErrorCode.not_coordinator)]


def test_unknown_error_codes_become_unknown_server_error() -> None:
    assert kw.error_code(3) == ErrorCode.unknown_topic_or_partition
    assert kw.error_code(31337) == ErrorCode.unknown_server_error
