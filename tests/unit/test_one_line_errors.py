"""Failures read as one short line (issue 17): gRPC's connect errors and a failed broker's log."""

from __future__ import annotations

from pathlib import Path

from client.connection import unreachable_reason
from client.ops.local_cluster import last_error_line

GRPC_REFUSED = ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: "
                "Failed to connect to remote host: Connection refused")


def test_unreachable_reasons() -> None:
    assert unreachable_reason("UNAVAILABLE", GRPC_REFUSED) == "connection refused"
    assert unreachable_reason("UNAVAILABLE", "DNS resolution failed for nosuch:9092") == "unknown host"
    assert unreachable_reason("DEADLINE_EXCEEDED", "Deadline Exceeded") == "timed out"
    assert "TLS listener" in unreachable_reason("UNAVAILABLE", "Socket closed")
    assert unreachable_reason("INTERNAL", "something\nelse") == "internal: something"
    assert unreachable_reason("UNAVAILABLE", "") == "unavailable"


def test_last_error_line(tmp_path: Path) -> None:
    log = tmp_path / "broker.log"
    log.write_text("2026 INFO starting\nerror: unknown broker config 'foo.bar'\n\n")
    assert last_error_line(log) == "error: unknown broker config 'foo.bar'"
    log.write_text("just a line\nthe last one\n")
    assert last_error_line(log) == "the last one"
    assert last_error_line(tmp_path / "missing.log") == "no log"


def test_describe_marks_a_leader_that_is_not_live() -> None:
    from client.cli.topics import leader_label

    assert leader_label(2, {1, 2, 3}, 10) == "2"
    assert leader_label(2, {1, 3}, 10) == "2 (not live)"
    assert leader_label(2, {1, 2, 3}, -1) == "2 (not answering)"  # registered until its session expires
    assert leader_label(-1, {1, 2}, -1) == "none"
