"""Kafka request and response frames for tests, written and read with kio's schemas (as a client would)."""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from broker.network import kafka_wire as kw


def frame(api_key: int, version: int, values: dict[str, Any] | None = None, correlation_id: int = 7,
          client_id: str = "test") -> bytes:
    """A request frame (no size prefix) as a client writes it."""
    cls = load_request_schema(api_key, version)
    buf = io.BytesIO()
    header = cls.__header_schema__
    entity_writer(header)(buf, kw.build(header, {"request_api_key": api_key, "request_api_version": version,
                                                  "correlation_id": correlation_id, "client_id": client_id}))
    entity_writer(cls)(buf, kw.build(cls, values or {}))
    return buf.getvalue()


def read_response(data: bytes, api_key: int, version: int) -> tuple[int, Any]:
    """(correlation id, response) of a size-prefixed response frame."""
    (size,) = struct.unpack_from(">i", data, 0)
    assert size == len(data) - 4
    cls = load_response_schema(api_key, version)
    header, n = entity_reader(cls.__header_schema__)(data, 4)
    body, m = entity_reader(cls)(data, 4 + n)
    assert 4 + n + m == len(data), "the response frame has trailing bytes"
    return header.correlation_id, body


def recv_exactly(s: socket.socket, n: int) -> bytes:
    """``n`` bytes from ``s`` (each recv returns at least one byte, or b"" when the peer closed)."""
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def read_frame(s: socket.socket) -> bytes:
    """One size-prefixed frame from ``s``, prefix included."""
    size = recv_exactly(s, 4)
    return size + recv_exactly(s, int.from_bytes(size, "big"))
