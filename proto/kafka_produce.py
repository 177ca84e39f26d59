"""Kafka's Produce v8 on the wire, client side: the request frame and the response (pure).

Theory of operation
-------------------
The project's producer sends its Produce requests to a broker's Kafka wire-protocol listener
when the broker offers one of the client's security protocol (``MetadataResponse``'s
``kafka_produce_*``; ``client.kafka_produce`` is the connection): a message on a grpc.aio stream
costs each side ~150 us of CPU and ~0.2 ms per hop, a frame on a plain socket ~15-30 us. The
broker translates the request into the same ``ProduceRequest`` the gRPC listener takes
(``broker.network.kafka_wire``), so this module only writes and reads Kafka's bytes:

* request: header v1 (api key 0, version 8, correlation id, client id), then Produce v8 -
  transactional id (null unless the producer is transactional), acks, timeout, and per topic
  and partition the record batch bytes as the producer built them (v8 is the newest
  non-flexible version: no tagged fields);
* response: header v0 (correlation id), then per topic and partition the error code, base
  offset, log append time, log start offset, record errors and error message, then the
  throttle time - returned as the ``ProduceResponse`` the gRPC listener would have answered.
  The broker writes these answers with the same partition layout (``PARTITION_RESPONSE``,
  ``broker.network.kafka_wire.encode_produce_response``).

The response comes from the network, so every length is checked against the bytes there are:
anything short, negative or left over raises ``ValueError`` and the connection goes.
"""

from __future__ import annotations

import struct
from typing import Final

from proto import minikafka_pb2 as pb

PRODUCE: Final = 0
VERSION: Final = 8
# A client id is a nullable int16-length string: a longer one is cut (the broker reads it leniently).
MAX_CLIENT_ID_BYTES: Final = 0x7FFF

_HEADER: Final = struct.Struct(">ihhih")  # size, api key, api version, correlation id, client id length
_ACKS_TIMEOUT: Final = struct.Struct(">hi")  # acks, timeout (after the transactional id: int16 length, -1 null)
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
# One partition of a Produce v5-v8 answer: the broker writes it (broker.network.kafka_wire) and the producer reads it.
PARTITION_RESPONSE: Final = struct.Struct(">ihqqq")  # index, error code, base offset, log append time, log start offset


def encode_produce_request(correlation_id: int, client_id: str, request: pb.ProduceRequest) -> bytes:
    """The size-prefixed Produce v8 frame of ``request`` (its records passed through as they are)."""
    cid = client_id.encode()[:MAX_CLIENT_ID_BYTES]
    if request.transactional_id:  # a transactional producer's: its leaders verify with it (KIP-890)
        tid = request.transactional_id.encode()
        head = _I16.pack(len(tid)) + tid + _ACKS_TIMEOUT.pack(request.acks, request.timeout_ms)
    else:
        head = _I16.pack(-1) + _ACKS_TIMEOUT.pack(request.acks, request.timeout_ms)
    parts: list[bytes] = [b"", cid, head, _I32.pack(len(request.topics))]
    for td in request.topics:
        name = td.name.encode()
        parts.append(_I16.pack(len(name)) + name + _I32.pack(len(td.partitions)))
        for pd in td.partitions:
            records = pd.records
            parts.append(_I32.pack(pd.partition) + _I32.pack(len(records)))
            parts.append(records)
    size = _HEADER.size - 4 + sum(map(len, parts))
    parts[0] = _HEADER.pack(size, PRODUCE, VERSION, correlation_id, len(cid))
    return b"".join(parts)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes | memoryview) -> None:
        self.data = data
        self.pos = 0

    def take(self, s: struct.Struct) -> tuple[int, ...]:
        if self.pos + s.size > len(self.data):
            raise ValueError(f"the response ends at byte {len(self.data)}, inside a field at {self.pos}")
        out = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return out

    def count(self, each_at_least: int) -> int:
        (n,) = self.take(_I32)
        # A count the remaining bytes cannot hold is a lie: refused before anything is built for it.
        if n < -1 or n * each_at_least > len(self.data) - self.pos:
            raise ValueError(f"an array of {n} entries in {len(self.data) - self.pos} bytes")
        return max(n, 0)

    def string(self, nullable: bool = False) -> str:
        (n,) = self.take(_I16)
        if n < 0:
            if nullable:
                return ""
            raise ValueError(f"a string of length {n}")
        if self.pos + n > len(self.data):
            raise ValueError(f"a string of {n} bytes past the end of the response")
        raw = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return raw.decode("utf-8", "replace")


def decode_produce_response(body: bytes | memoryview) -> tuple[int, pb.ProduceResponse]:
    """(correlation id, response) of a Produce v8 response frame's body (after its size)."""
    r = _Reader(body)
    (correlation_id,) = r.take(_I32)
    resp = pb.ProduceResponse()
    for _t in range(r.count(2 + 4)):
        tr = resp.topics.add(name=r.string())
        for _p in range(r.count(PARTITION_RESPONSE.size + 4 + 2)):
            index, code, base_offset, append_time, start_offset = r.take(PARTITION_RESPONSE)
            for _e in range(r.count(4 + 2)):  # record errors: counted in the error message below
                r.take(_I32)
                r.string(nullable=True)
            tr.partitions.add(partition=index, error_code=code, base_offset=base_offset,
                              log_append_time_ms=append_time, log_start_offset=start_offset,
                              error_message=r.string(nullable=True))
    (resp.throttle_time_ms,) = r.take(_I32)
    if r.pos != len(body):
        raise ValueError(f"{len(body) - r.pos} bytes after the Produce response")
    return correlation_id, resp
