"""``minikafka top`` fits the terminal (issue 17): header pinned, the partitions that do not fit
counted instead of scrolling the header away, empty partitions drawn empty."""

from __future__ import annotations

from typing import Any

from client.cli.top import render


def _partition(n: int, leo: int) -> dict[str, Any]:
    return {"topic": "t", "partition": n, "leader": 1, "leader_epoch": 0, "high_watermark": leo,
            "log_end_offset": leo, "isr": [1, 2], "replicas": [1, 2], "under_replicated": False, "offline": False,
            "replica_state": [{"broker": b, "in_isr": True, "alive": True, "leo": leo, "hw": leo} for b in (1, 2)]}


def _snap(partitions: int, leo: int = 0, events: int = 8) -> dict[str, Any]:
    return {"controller": 1, "controller_epoch": 3,
            "brokers": [{"id": 1, "address": "a", "alive": True}, {"id": 2, "address": "b", "alive": True}],
            "partitions": [_partition(i, leo) for i in range(partitions)], "groups": [],
            "events": [{"ts": 0, "broker": 1, "kind": "LeaderChange", "detail": f"e{i}"} for i in range(events)]}


def test_fits_a_40_row_terminal_with_the_header_pinned() -> None:
    lines = render(_snap(30, leo=10), rows=40, cols=80).splitlines()
    assert len(lines) <= 40
    assert lines[0].startswith("minikafka top — controller 1")
    assert any("more partitions" in ln for ln in lines)
    assert all(len(ln) <= 80 for ln in lines)
    assert "recent events:" in lines


def test_everything_shown_when_it_fits() -> None:
    lines = render(_snap(2, leo=10), rows=40, cols=200).splitlines()
    assert not any("more partition" in ln for ln in lines)
    assert sum("t-" in ln for ln in lines) == 2


def test_empty_partitions_are_drawn_empty() -> None:
    text = render(_snap(1, leo=0))
    assert "█" not in text and "·" * 28 in text
    assert "█" * 28 in render(_snap(1, leo=5))
