"""DeleteGroups and OffsetDelete (KIP-496) in the group coordinator's pure core (issue 30)."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from broker.coordinator.group.group_state import (
    GROUP_SUBSCRIBED_TO_TOPIC,
    NON_EMPTY_GROUP,
    NONE,
    GroupStateMachine,
    OffsetAndMetadata,
    consumer_subscription,
)

G = "g"


def subscription(*topics: str, user_data: bytes = b"") -> bytes:
    """Kafka's ConsumerProtocolSubscription v0 (as the Java client and librdkafka write it)."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t.encode())) + t.encode()
    return out + struct.pack(">i", len(user_data)) + user_data


def test_the_consumer_subscription_is_read_and_garbage_is_not() -> None:
    assert consumer_subscription(subscription("a", "bé")) == frozenset({"a", "bé"})
    assert consumer_subscription(subscription()) == frozenset()
    for junk in (b"", b"\x00\x00", b"\x00\x00\x00\x00\x00\x05\x00\x01a", b"\x00\x00\xff\xff\xff\xff",
                 struct.pack(">hih", 0, 1, -1)):
        assert consumer_subscription(junk) is None


@given(st.binary(max_size=64))
def test_the_subscription_reader_never_raises(data: bytes) -> None:
    consumer_subscription(data)


def test_only_a_group_without_members_may_be_deleted() -> None:
    sm = GroupStateMachine()
    assert sm.check_delete_group("never-loaded") == NONE  # the shell says GROUP_ID_NOT_FOUND if it never existed
    sm.join(G, "", "m1", "c", "h", "consumer", [("range", subscription("t"))], 10_000, 30_000, 0)
    assert sm.check_delete_group(G) == NON_EMPTY_GROUP
    sm.leave(G, "m1", 10)
    assert sm.check_delete_group(G) == NONE
    # An id handed out with MEMBER_ID_REQUIRED is a member in the making: not empty either.
    sm.join(G, "", "m2", "c", "h", "consumer", [("range", b"")], 10_000, 30_000, 20, require_known_member_id=True)
    assert sm.check_delete_group(G) == NON_EMPTY_GROUP


def test_offsets_of_subscribed_topics_stay_the_others_go() -> None:
    sm = GroupStateMachine()
    sm.load(G, {("t", 0): OffsetAndMetadata(5), ("u", 0): OffsetAndMetadata(7)})
    # Empty: everything may go.
    assert sm.check_delete_offsets(G, [("t", 0), ("u", 0)]) == (NONE, {("t", 0): NONE, ("u", 0): NONE})
    sm.join(G, "", "m1", "c", "h", "consumer", [("range", subscription("t")), ("roundrobin", subscription("t"))],
            10_000, 30_000, 0)
    assert sm.check_delete_offsets(G, [("t", 0), ("u", 0)]) == \
        (NONE, {("t", 0): GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): NONE})
    sm.offsets_deleted(G, [("u", 0)])
    assert sm.fetch_offsets(G, None) == {("t", 0): OffsetAndMetadata(5)}
    # A member whose subscription cannot be read protects every topic.
    sm.join(G, "", "m2", "c", "h", "consumer", [("range", b"junk"), ("roundrobin", b"junk")], 10_000, 30_000, 1)
    assert sm.check_delete_offsets(G, [("u", 1)]) == (NONE, {("u", 1): GROUP_SUBSCRIBED_TO_TOPIC})


def test_a_non_consumer_group_with_members_keeps_its_offsets() -> None:
    sm = GroupStateMachine()
    sm.join(G, "", "m1", "c", "h", "connect", [("default", b"x")], 10_000, 30_000, 0)
    assert sm.check_delete_offsets(G, [("t", 0)]) == (NON_EMPTY_GROUP, {})
