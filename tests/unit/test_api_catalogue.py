"""The API catalogue (broker.network.api_catalogue): one entry per API, and every table that used to
list APIs on its own - the gRPC services, KafkaApis' handlers, error_response, the Kafka wire's api
keys - agrees with it."""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import replace
from typing import Any
from unittest.mock import AsyncMock, MagicMock

from google.protobuf.message import Message

from broker.network import kafka_wire
from broker.network.api_catalogue import APIS, BY_NAME, NAMES, api, served_by
from broker.network.request_guard import error_response
from broker.security.principal import INTERNAL
from broker.server import grpc_servicers
from broker.server.kafka_apis import ControlPlane, KafkaApis
from proto import minikafka_pb2 as pb
from proto import minikafka_pb2_grpc as pb_grpc

E = pb.ErrorCode
SERVICES = {"KafkaApi": grpc_servicers.KafkaApiServicer, "BrokerControl": grpc_servicers.BrokerControlServicer,
            "ControllerApi": grpc_servicers.ControllerApiServicer}


def test_every_grpc_method_is_a_catalogue_api_with_its_types() -> None:
    assert set(SERVICES) == set(pb.DESCRIPTOR.services_by_name)
    for service in SERVICES:
        methods = pb.DESCRIPTOR.services_by_name[service].methods_by_name
        unary = {name for name, m in methods.items() if not m.client_streaming and not m.server_streaming}
        assert unary == {a.name for a in served_by(service)}, service
        for name, m in methods.items():
            entry = api(name)
            assert (entry.request.__name__, entry.response.__name__) == (m.input_type.name, m.output_type.name)
            if name != entry.name:  # a stream carries its API's requests
                assert entry.stream == name and entry.service == service


def test_every_grpc_method_is_served_not_left_unimplemented() -> None:
    for service, cls in SERVICES.items():
        base = getattr(pb_grpc, f"{service}Servicer")
        for name in pb.DESCRIPTOR.services_by_name[service].methods_by_name:
            method = getattr(cls, name)
            assert method is not getattr(base, name), f"{service}.{name}"
            assert inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method), name


def _apis(**control: Any) -> tuple[KafkaApis, MagicMock]:
    rm = MagicMock(controller_epoch=5)
    rm.prepare_leader_and_isr = AsyncMock()  # a LeaderAndIsr makes new logs' directories first
    shutdown = MagicMock()
    defaults: dict[str, Any] = {"broker_id": 1, "broker_epoch": lambda: 100, "zk": MagicMock(),
                                "controlled_shutdown": shutdown}
    plane = ControlPlane(**(defaults | control))
    return KafkaApis(rm, MagicMock(), MagicMock(), MagicMock(), MagicMock(), MagicMock(), plane), rm


def test_kafka_apis_has_a_handler_for_exactly_the_catalogue() -> None:
    apis, _ = _apis()
    assert apis.handlers.keys() == NAMES
    assert {a.name for a in APIS if a.control_plane} == {"LeaderAndIsr", "UpdateMetadata", "StopReplica",
                                                          "ControlledShutdown"}
    assert all(a.control_plane and a.service in ("BrokerControl", "ControllerApi") for a in APIS if a.fenced)


def _fill(msg: Message, depth: int = 0) -> Message:
    """``msg`` with two entries in every list and a value in every scalar, as deep as it goes."""
    for f in msg.DESCRIPTOR.fields:
        value: Any
        if f.message_type is not None:
            if f.message_type.GetOptions().map_entry or depth > 3:
                continue
            if f.is_repeated:
                for _ in range(2):
                    _fill(getattr(msg, f.name).add(), depth + 1)
            else:
                _fill(getattr(msg, f.name), depth + 1)
            continue
        if f.enum_type is not None:
            continue
        value = {f.TYPE_STRING: "t", f.TYPE_BYTES: b"x", f.TYPE_BOOL: True}.get(f.type, 3)
        if f.is_repeated:
            getattr(msg, f.name).extend([value, value])
        else:
            setattr(msg, f.name, value)
    return msg


def _error_slots(msg: Message) -> list[int]:
    """Every error_code of a response: at the top and in every entry of every list, as deep as it goes."""
    codes: list[int] = []
    for f in msg.DESCRIPTOR.fields:
        if f.name == "error_code":
            codes.append(getattr(msg, f.name))
        elif f.message_type is not None and f.is_repeated and not f.message_type.GetOptions().map_entry:
            for entry in getattr(msg, f.name):
                codes += _error_slots(entry)
    return codes


def test_error_response_says_the_code_in_every_slot_of_every_api() -> None:
    for name, entry in BY_NAME.items():
        for request in (entry.request(), _fill(entry.request())):
            answer = error_response(name, request, E.NOT_LEADER_OR_FOLLOWER)
            assert type(answer) is entry.response, name
            slots = _error_slots(answer)
            assert slots == [E.NOT_LEADER_OR_FOLLOWER] * len(slots), name
            if request.ListFields() and entry.name != "DescribeReplicas":  # no error field: broker_id -1 says it
                assert slots, name
    # One slot per entry the request lists, named as the request names it.
    req = pb.ProduceRequest(topics=[pb.ProduceTopicData(name=t, partitions=[pb.ProducePartitionData(partition=p)
                                                                        for p in (0, 2)]) for t in ("a", "b")])
    resp = error_response("ProduceStream", req, E.KAFKA_STORAGE_ERROR)
    assert [(t.name, p.partition, p.error_code, p.base_offset) for t in resp.topics for p in t.partitions] == [
        (t, p, E.KAFKA_STORAGE_ERROR, -1) for t in ("a", "b") for p in (0, 2)]
    # An API the catalogue does not have is a bug, not an answer.
    try:
        error_response("SaslHandshake", None, 1)
    except ValueError:
        pass
    else:
        raise AssertionError("no ValueError")


def test_kafka_wire_api_keys_agree_with_the_catalogue() -> None:
    by_key = {a.kafka_key: a.name for a in APIS if a.kafka_key is not None and a.name != "FollowerFetch"}
    assert len(by_key) == len([a for a in APIS if a.kafka_key is not None]) - 1  # one key per API
    for key, (name, lo, hi) in kafka_wire.SUPPORTED.items():
        assert lo <= hi
        if name in NAMES:
            assert by_key[key] == name, key
        else:  # answered by the listener itself, or translated into a catalogue API (IncrementalAlterConfigs)
            assert key in kafka_wire.SASL_APIS or key == kafka_wire.API_VERSIONS or key in kafka_wire._TO_PB
    translated = set(kafka_wire.SUPPORTED) - kafka_wire.SASL_APIS - {kafka_wire.API_VERSIONS}
    assert set(kafka_wire._TO_PB) == set(kafka_wire._FROM_PB) == translated


def _call(apis: KafkaApis, name: str, request: Any, broker_id: int | None = 0) -> Any:
    return asyncio.run(apis.handle_control(name, request, replace(INTERNAL, broker_id=broker_id)))


def test_controller_requests_are_admitted_by_kafka_apis() -> None:
    apis, rm = _apis()
    rm.handle_leader_and_isr.return_value = pb.LeaderAndIsrResponse()
    ok = pb.LeaderAndIsrRequest(controller_id=0, controller_epoch=5, broker_epoch=100)
    assert _call(apis, "LeaderAndIsr", ok).error_code == E.NONE
    rm.handle_leader_and_isr.assert_called_once_with(ok)
    # Not from the broker that the request says is the controller.
    assert _call(apis, "LeaderAndIsr", ok, broker_id=2).error_code == E.CLUSTER_AUTHORIZATION_FAILED
    # Another incarnation of this broker (ZooKeeper does not know the higher epoch as this broker's).
    apis._control.zk.own_broker_epoch.return_value = None  # type: ignore[attr-defined]
    for epoch in (99, 101, -1):
        stale = pb.StopReplicaRequest(controller_id=0, controller_epoch=5, broker_epoch=epoch)
        assert _call(apis, "StopReplica", stale).error_code == E.STALE_BROKER_EPOCH
    # A controller epoch beyond ZooKeeper's.
    apis._control.zk.get_controller_epoch.return_value = (5, 0)  # type: ignore[attr-defined]
    forged = pb.UpdateMetadataRequest(controller_id=0, controller_epoch=6, broker_epoch=100)
    assert _call(apis, "UpdateMetadata", forged).error_code == E.STALE_CONTROLLER_EPOCH
    assert rm.handle_stop_replica.call_count == rm.handle_update_metadata.call_count == 0
    # ControlledShutdown is not the controller's request: no epochs, its handler decides.
    shutdown = pb.ControlledShutdownResponse(error_code=E.NONE)

    async def handler(req: Any, ctx: Any) -> Any:
        return shutdown

    apis.handlers["ControlledShutdown"] = handler
    assert _call(apis, "ControlledShutdown", pb.ControlledShutdownRequest(broker_id=7), broker_id=7) is shutdown
