"""Large requests are decoded, answered and encoded in slices, their counts checked first (SPEC S15.2).

A Metadata request may name a million topics within every limit (a 2.9 MB frame): decoded,
handled and encoded in one go it held the broker's event loop for 4-12 s. Requests naming more
than ``LARGE_METADATA_TOPICS`` topics now go through ``decode_metadata_sliced`` and
``encode_metadata_sliced``, which yield between slices; these tests hold them to the answers of
the one-go path, byte for byte, and check that a count is refused from the count alone."""

from __future__ import annotations

import struct
import time
import tracemalloc
from collections import Counter
from collections.abc import Generator
from typing import Any

import pytest
from kafka_frames import frame

from broker import kafka_wire as kw
from broker.kafka_apis import partition_error_counts, partition_errors
from broker.kafka_wire_bounds import FrameBoundsError, array_count, check_header
from proto import minikafka_pb2 as pb

VERSIONS = range(0, 13)


def _drive(work: Generator[None, None, Any]) -> tuple[Any, int]:
    """(result, slices yielded) of a sliced generator."""
    yields = 0
    while True:
        try:
            next(work)
        except StopIteration as done:
            return done.value, yields
        yields += 1


def _metadata_frame(version: int, names: list[str], allow: bool = False) -> bytes:
    values: dict[str, Any] = {"topics": [{"name": n} for n in names]}
    if version >= 4:
        values["allow_auto_topic_creation"] = allow
    return frame(3, version, values, correlation_id=31, client_id="big")


def _v1_frame(names: int, claimed: int | None = None) -> bytes:
    """Metadata v1 with ``names`` one-character names, its count saying ``claimed`` (default: names)."""
    count = names if claimed is None else claimed
    return struct.pack(">hhih", 3, 1, 9, 1) + b"c" + struct.pack(">i", count) + b"\x00\x01a" * names


def _answer(names: list[str]) -> pb.MetadataResponse:
    """An answer with every kind of topic: with partitions, with an error, internal, an unknown code."""
    resp = pb.MetadataResponse(cluster_id="cluster", controller_id=2)
    resp.brokers.add(broker_id=1, host="h1", port=9092, rack="r1")
    resp.brokers.add(broker_id=2, host="h2", port=9093)
    for i, name in enumerate(names):
        t = resp.topics.add(name=name)
        if i % 3 == 0:
            t.partitions.add(partition=0, leader=1, leader_epoch=3, replicas=[1, 2], isr=[1], offline_replicas=[2])
            t.partitions.add(partition=1, leader=-1, error_code=pb.ErrorCode.LEADER_NOT_AVAILABLE)
        elif i % 3 == 1:
            t.error_code = pb.ErrorCode.INVALID_REQUEST
        if i % 7 == 0:
            t.is_internal = True
        if i % 11 == 0:
            t.error_code = 9999  # not a Kafka code: written as UNKNOWN_SERVER_ERROR, as kio's path does
    return resp


@pytest.mark.parametrize("version", VERSIONS)
def test_sliced_decode_is_decode_request_and_to_pb(version: int) -> None:
    names = [f"topic-{i}-é" for i in range(2500)]
    f = _metadata_frame(version, names, allow=False)
    assert kw.large_metadata(f)
    d = kw.decode_request(f)
    sliced, yields = _drive(kw.decode_metadata_sliced(f, slice_size=1000))
    assert sliced.request == kw.to_pb(d)[0][1]
    assert list(sliced.request.topics) == names
    assert sliced.decoded.header == d.header
    assert yields == 2  # after 1000 and 2000 names


@pytest.mark.parametrize("version", VERSIONS)
def test_sliced_encode_is_encode_answer_byte_for_byte(version: int) -> None:
    names = [f"t{i}" for i in range(2500)] + ["n" * 300]
    f = _metadata_frame(version, names)
    d = kw.decode_request(f)
    resp = _answer(names)
    out, yields = _drive(kw.encode_metadata_sliced(d.header, resp, slice_size=1000))
    assert out == kw.encode_answer(d, [resp])
    assert yields == 2


@pytest.mark.parametrize("version", VERSIONS)
def test_sliced_encode_of_no_topics_and_of_one(version: int) -> None:
    d = kw.decode_request(_metadata_frame(version, ["x"]))
    for names in ([], ["x"], ["ab"]):
        resp = _answer(names)
        assert _drive(kw.encode_metadata_sliced(d.header, resp))[0] == kw.encode_answer(d, [resp])


def test_small_and_other_requests_take_the_usual_path() -> None:
    assert not kw.large_metadata(_metadata_frame(1, ["a"] * kw.LARGE_METADATA_TOPICS))
    assert kw.large_metadata(_metadata_frame(1, ["a"] * (kw.LARGE_METADATA_TOPICS + 1)))
    assert not kw.large_metadata(frame(18, 3))
    assert not kw.large_metadata(frame(9, 1, {"group_id": "g", "topics": [{"name": "a", "partition_indexes": [0]}
                                                                          for _ in range(5000)]}))
    unsupported = bytearray(_v1_frame(5000))
    struct.pack_into(">h", unsupported, 2, 99)  # version 99
    assert not kw.large_metadata(bytes(unsupported))
    null = struct.pack(">hhih", 3, 1, 9, 1) + b"c" + struct.pack(">i", -1) + b"\0" * 20000
    assert not kw.large_metadata(null)


def test_a_forged_count_is_refused_from_the_count_alone() -> None:
    forged = _v1_frame(3, claimed=10**6)  # a million names claimed, three sent
    assert not kw.large_metadata(forged)  # left to decode_request, which refuses it
    with pytest.raises(kw.ProtocolError):
        kw.decode_request(forged)
    cls = kw._request_class(3, 1)
    tracemalloc.start()
    try:
        start = time.perf_counter()
        with pytest.raises(FrameBoundsError, match="1000000 elements"):
            array_count(cls, "topics", forged, check_header(cls.__header_schema__, forged))
        took = time.perf_counter() - start
        _size, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert took < 0.05
    assert peak < 64 * 1024  # nothing allocated for the claimed elements
    # The sliced decoder refuses it before reading (or yielding for) a single name.
    gen = kw.decode_metadata_sliced(forged)
    with pytest.raises(kw.ProtocolError, match="cannot fit"):
        next(gen)


def test_a_name_longer_than_what_follows_is_refused_by_the_sliced_decoder_too() -> None:
    # The count fits the bytes left (two bytes a name at least), the last name does not: the walk of
    # each name before kio reads it refuses the frame, as decode_request's check does.
    f = _v1_frame(4999, claimed=5000) + b"\x00\x05a"
    assert kw.large_metadata(f)
    with pytest.raises(kw.ProtocolError):
        kw.decode_request(f)
    with pytest.raises(kw.ProtocolError, match="5 bytes announced"):
        _drive(kw.decode_metadata_sliced(f))


def test_a_name_that_is_not_utf8_is_refused_as_by_decode_request() -> None:
    f = bytearray(_v1_frame(5000))
    f[-1] = 0xFF
    with pytest.raises(kw.ProtocolError):
        kw.decode_request(bytes(f))
    with pytest.raises(kw.ProtocolError):
        _drive(kw.decode_metadata_sliced(bytes(f)))


def test_a_million_names_go_in_short_slices() -> None:
    n = 1_000_000
    f = _v1_frame(n)
    assert kw.large_metadata(f)
    work = kw.decode_metadata_sliced(f)
    longest = 0.0
    while True:
        start = time.perf_counter()
        try:
            next(work)
        except StopIteration as done:
            sliced = done.value
            break
        finally:
            longest = max(longest, time.perf_counter() - start)
    assert len(sliced.request.topics) == n and not sliced.request.all_topics
    assert sliced.request.allow_auto_topic_creation  # v1 has no such field: Kafka's default
    resp = pb.MetadataResponse(controller_id=1)
    resp.topics.extend(pb.TopicMetadata(name="a", error_code=pb.ErrorCode.INVALID_REQUEST) for _ in range(n))
    work2 = kw.encode_metadata_sliced(sliced.decoded.header, resp)
    while True:
        start = time.perf_counter()
        try:
            next(work2)
        except StopIteration as done:
            out = done.value
            break
        finally:
            longest = max(longest, time.perf_counter() - start)
    assert len(out) == 4 + 4 + 4 + 4 + 4 + n * (2 + 3 + 1 + 4)  # size, correlation, brokers, controller, topics
    assert longest < 0.05, f"a slice took {longest * 1000:.0f} ms"  # ~3 ms here; generous for slow machines


def test_error_counts_in_slices_are_partition_errors_tallied() -> None:
    resp = _answer([f"t{i}" for i in range(12_000)])
    tally, yields = _drive(partition_error_counts(resp, slice_size=5000))
    assert tally == dict(Counter(partition_errors(resp)))
    assert yields == 2
    fetch = pb.FetchResponse(topics=[pb.FetchTopicResponse(name="a", partitions=[
        pb.FetchPartitionResponse(partition=0, error_code=pb.ErrorCode.NOT_LEADER_OR_FOLLOWER),
        pb.FetchPartitionResponse(partition=1)])])
    assert _drive(partition_error_counts(fetch))[0] == {pb.ErrorCode.NOT_LEADER_OR_FOLLOWER: 1}
    assert _drive(partition_error_counts(pb.HeartbeatResponse()))[0] == {}
