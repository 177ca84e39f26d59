"""gRPC channel and server options shared by brokers, the controller and clients."""

from __future__ import annotations

from typing import Final

MAX_MESSAGE_BYTES: Final = 256 * 1024 * 1024

CHANNEL_OPTIONS: Final[list[tuple[str, int]]] = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # A broker that restarts is back in seconds: do not let gRPC's reconnect backoff
    # (up to two minutes by default) keep a channel to it failing fast meanwhile.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]

SERVER_OPTIONS: Final[list[tuple[str, int]]] = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # Two brokers must never share a port by accident.
    ("grpc.so_reuseport", 0),
]
