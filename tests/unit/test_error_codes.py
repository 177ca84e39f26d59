"""The error codes as the broker's hot paths read them (proto/errors.py)."""

from __future__ import annotations

from proto import errors
from proto import minikafka_pb2 as pb


def test_enum_values_are_plain_attributes_with_protobufs_numbers() -> None:
    """``E.NONE`` is read on every partition of every request; protobuf resolves it in Python
    (EnumTypeWrapper.__getattr__, ~1.4 us). After proto.errors is imported every value of every
    enum of the .proto is an attribute of its wrapper, with protobuf's own number."""
    assert errors.for_code(pb.ErrorCode.NOT_LEADER_OR_FOLLOWER).code == pb.ErrorCode.NOT_LEADER_OR_FOLLOWER
    enums = [pb.ErrorCode, pb.IsolationLevel, pb.ConfigSource, pb.AclResourceType]
    for wrapper in enums:
        for name, number in wrapper.items():
            assert vars(wrapper)[name] == number == wrapper.Value(name)
            assert wrapper.Name(number) == name
