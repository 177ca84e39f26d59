"""proto.kafka_produce, the producer's Produce v8 on Kafka's wire, against the broker's own reading
and writing of it (broker.network.kafka_wire, kio's schemas generated from Kafka's message definitions):
what the producer writes is what the broker reads, and what the broker answers is what the
producer reads - including hostile answers, refused before anything is built for them."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial.errors import SerialError

from broker.network import kafka_wire as kw
from proto import minikafka_pb2 as pb
from proto.kafka_produce import decode_produce_response, encode_produce_request

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz._-0123456789", min_size=1, max_size=20)


@st.composite
def produce_requests(draw: st.DrawFn) -> pb.ProduceRequest:
    req = pb.ProduceRequest(acks=draw(st.sampled_from([-1, 0, 1])), timeout_ms=draw(st.integers(0, 2**31 - 1)),
                            transactional_id=draw(st.one_of(st.just(""), names)))  # a transactional producer's
    for name in draw(st.lists(names, max_size=3, unique=True)):
        td = req.topics.add(name=name)
        for p in draw(st.lists(st.integers(0, 1000), max_size=3, unique=True)):
            td.partitions.add(partition=p, records=draw(st.binary(max_size=64)))
    return req


@settings(max_examples=200, deadline=None)
@given(produce_requests(), st.integers(0, 2**31 - 1), names)
def test_the_broker_reads_the_request_the_producer_wrote(req: pb.ProduceRequest, cid: int, client: str) -> None:
    frame = encode_produce_request(cid, client, req)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    d = kw.decode_request(frame[4:])
    assert (d.header.api_key, d.header.api_version, d.header.correlation_id, d.header.client_id) == (0, 8, cid, client)
    (api, got), = kw.to_pb(d)
    assert api == "Produce"
    assert got.SerializeToString(deterministic=True) == req.SerializeToString(deterministic=True)


@st.composite
def produce_responses(draw: st.DrawFn) -> pb.ProduceResponse:
    resp = pb.ProduceResponse(throttle_time_ms=draw(st.integers(0, 2**31 - 1)))
    i64 = st.integers(-1, 2**62)
    for name in draw(st.lists(names, max_size=3, unique=True)):
        tr = resp.topics.add(name=name)
        for p in draw(st.lists(st.integers(0, 1000), max_size=3, unique=True)):
            tr.partitions.add(partition=p, error_code=draw(st.sampled_from([0, 2, 6, 19, 45])),
                              base_offset=draw(i64), log_start_offset=draw(i64),
                              # kio carries it as a datetime: -1 or a time before the year 10000
                              log_append_time_ms=draw(st.one_of(st.just(-1), st.integers(0, 2**41))),
                              error_message=draw(st.text(max_size=30)))
    return resp


@settings(max_examples=200, deadline=None)
@given(produce_responses(), st.integers(0, 2**31 - 1))
def test_the_producer_reads_the_answer_the_broker_wrote(resp: pb.ProduceResponse, cid: int) -> None:
    d = kw.decode_request(encode_produce_request(cid, "p", pb.ProduceRequest(acks=-1))[4:])
    frame = kw.encode_response(d.header, kw.from_pb(d, [resp]))
    got_cid, got = decode_produce_response(frame[4:])
    assert got_cid == cid
    assert got.SerializeToString(deterministic=True) == resp.SerializeToString(deterministic=True)


def _answer() -> bytes:
    resp = pb.ProduceResponse(topics=[pb.ProduceTopicResponse(name="t", partitions=[
        pb.ProducePartitionResponse(partition=0, base_offset=5, error_message="m")])])
    d = kw.decode_request(encode_produce_request(3, "p", pb.ProduceRequest(acks=-1))[4:])
    return kw.encode_response(d.header, kw.from_pb(d, [resp]))[4:]


@pytest.mark.parametrize("bad", [
    b"",
    b"\0\0\0\3",  # a correlation id and nothing else
    _answer()[:-1],  # cut short
    _answer() + b"\0",  # a byte too many
    struct.pack(">ii", 3, 0x7FFFFFFF),  # 2**31 - 1 topics claimed in no bytes
    struct.pack(">iih", 3, 1, 0x7FFF) + b"t",  # a name longer than the bytes left
    struct.pack(">iih", 3, 1, -1) + b"\0" * 20,  # a null topic name
])
def test_an_answer_that_does_not_hold_together_is_refused(bad: bytes) -> None:
    with pytest.raises(ValueError):
        decode_produce_response(bad)


@st.composite
def broker_answers(draw: st.DrawFn) -> pb.ProduceResponse:
    """What the broker's handler may answer: any of its error codes (some unknown to Kafka), any
    log append time, long messages, and no topics or partitions at all."""
    resp = pb.ProduceResponse(throttle_time_ms=draw(st.integers(0, 2**31 - 1)))
    codes = st.sampled_from([*sorted(set(pb.ErrorCode.values())), 9999, -1])
    for name in draw(st.lists(names, max_size=3, unique=True)):
        tr = resp.topics.add(name=name)
        for p in draw(st.lists(st.integers(0, 2**31 - 1), max_size=3, unique=True)):
            tr.partitions.add(partition=p, error_code=draw(codes), base_offset=draw(st.integers(-1, 2**63 - 1)),
                              log_start_offset=draw(st.integers(-1, 2**63 - 1)),
                              log_append_time_ms=draw(st.one_of(st.integers(-2**40, -1), st.integers(0, 2**41))),
                              error_message=draw(st.text(max_size=300)))
    return resp


@settings(max_examples=300, deadline=None)
@given(broker_answers(), st.integers(0, 2**31 - 1), st.integers(3, 9))
def test_the_broker_writes_produce_answers_as_kio_does(resp: pb.ProduceResponse, cid: int, version: int) -> None:
    header = kw.Header(kw.PRODUCE, version, cid, "p")
    fast = kw.encode_produce_response(header, resp)
    if version not in range(5, 10):
        assert fast is None  # the oldest versions: through kio
        return
    d = kw.Decoded(header, None)
    assert fast == kw.encode_response(header, kw.from_pb(d, [resp])) == kw.encode_answer(d, [resp])


def test_an_error_message_too_long_for_its_int16_length_is_refused_as_kio_refuses_it() -> None:
    resp = pb.ProduceResponse(topics=[pb.ProduceTopicResponse(name="t", partitions=[
        pb.ProducePartitionResponse(partition=0, error_code=2, error_message="m" * 0x8000)])])
    header = kw.Header(kw.PRODUCE, 8, 1, "p")
    with pytest.raises(ValueError):
        kw.encode_produce_response(header, resp)
    with pytest.raises(SerialError):
        kw.encode_response(header, kw.from_pb(kw.Decoded(header, None), [resp]))
    # v9's compact strings have a varint length: kio writes it, and so does the fast writer.
    header = kw.Header(kw.PRODUCE, 9, 1, "p")
    d = kw.Decoded(header, None)
    assert kw.encode_produce_response(header, resp) == kw.encode_response(header, kw.from_pb(d, [resp]))


# ------------------------------------------------------------------ requests read without kio (S15)

def _kio_frame(req: pb.ProduceRequest, version: int, cid: int, client: str, null_records: set[int]) -> bytes:
    """``req`` as a Kafka client writes Produce ``version`` (kio's writer)."""
    from kafka_frames import frame

    return frame(0, version, {
        "transactional_id": req.transactional_id or None, "acks": req.acks, "timeout": req.timeout_ms,
        "topic_data": [{"name": t.name, "partition_data": [
            {"index": p.partition, "records": None if p.partition in null_records else p.records}
            for p in t.partitions]} for t in req.topics]}, correlation_id=cid, client_id=client)


def _through_kio(frame: bytes) -> pb.ProduceRequest:
    h = kw.peek_header(frame)
    cls = kw._request_class(h.api_key, h.api_version)
    from kio.serial import entity_reader

    from broker.network.kafka_wire_bounds import check_request

    check_request(cls.__header_schema__, cls, frame)
    _header, size = entity_reader(cls.__header_schema__)(frame, 0)
    request, _n = entity_reader(cls)(frame, size)
    (_api, got), = kw.to_pb(kw.Decoded(h, request))
    return got


@settings(max_examples=300, deadline=None)
@given(produce_requests(), st.integers(3, 9), st.integers(0, 2**31 - 1), names,
       st.sets(st.integers(0, 1000), max_size=2), st.sampled_from(["", "txn-1"]))
def test_the_fast_reader_reads_every_version_as_kio_does(req: pb.ProduceRequest, version: int, cid: int, client: str,
                                                         null_records: set[int], txn: str) -> None:
    from broker.network.kafka_wire_produce import decode_produce

    req.transactional_id = txn
    frame = _kio_frame(req, version, cid, client, null_records)
    fast = decode_produce(frame, version)
    assert fast is not None
    assert fast.SerializeToString(deterministic=True) == _through_kio(frame).SerializeToString(deterministic=True)
    d = kw.decode_request(frame)
    assert isinstance(d.request, kw.FastProduce) and d.request.acks == req.acks
    (_api, got), = kw.to_pb(d)
    assert got is fast or got == fast


@settings(max_examples=500, deadline=None)
@given(produce_requests(), st.integers(3, 9), st.data())
def test_the_fast_reader_never_takes_a_frame_kio_refuses(req: pb.ProduceRequest, version: int,
                                                        data: st.DataObject) -> None:
    """Cut, grown or corrupted frames: the fast reader either declines (kio decides) or reads what kio reads."""
    from broker.network.kafka_wire_produce import decode_produce

    frame = bytearray(_kio_frame(req, version, 1, "c", set()))
    kind = data.draw(st.sampled_from(["cut", "flip", "grow"]))
    if kind == "cut":
        frame = frame[:data.draw(st.integers(0, len(frame) - 1))]
    elif kind == "flip":
        for _ in range(data.draw(st.integers(1, 4))):
            i = data.draw(st.integers(10, len(frame) - 1))
            frame[i] = data.draw(st.integers(0, 255))
    else:
        frame += data.draw(st.binary(min_size=1, max_size=8))
    fast = decode_produce(bytes(frame), version)
    if fast is None:
        return
    try:
        slow = _through_kio(bytes(frame))
    except Exception as e:  # kio refuses: the fast reader must have refused too
        raise AssertionError(f"the fast reader took a frame kio refuses ({e!r})") from None
    assert fast.SerializeToString(deterministic=True) == slow.SerializeToString(deterministic=True)


@pytest.mark.parametrize("version", [7, 9])
def test_a_forged_count_is_declined_without_reserving_anything(version: int) -> None:
    from broker.network.kafka_wire_produce import decode_produce

    frame = _kio_frame(pb.ProduceRequest(acks=-1, timeout_ms=5), version, 1, "c", set())
    # The topic count sits right after acks and timeout; claim 2**31 - 1 (or a huge varint) topics.
    head = frame[:-1] if version >= 9 else frame[:-4]
    tail = b"\xff\xff\xff\xff\x07" if version >= 9 else struct.pack(">i", 0x7FFFFFFF)
    assert decode_produce(head[:len(head) - (1 if version >= 9 else 0)] + tail, version) is None
