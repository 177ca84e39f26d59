"""The test cluster fixture starts again once, with fresh ports, when a broker could not bind a
port picked free (another process took it in between): '[Errno 98] Address already in use'."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import helpers

from client.ops.local_cluster import ClusterError


def test_a_port_taken_in_between_is_retried_once_whatever_the_messages_case(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def up(self: Any, brokers: int = 3, timeout_s: float = 60.0, secure: bool = False) -> None:
        calls.append(brokers)
        if len(calls) == 1:
            raise ClusterError("broker 1 exited with 1: broker failed to start: [Errno 98] Address already in use")

    monkeypatch.setattr(helpers.LocalCluster, "up", up)
    fx = helpers.ClusterFixture(tmp_path, "127.0.0.1:1")
    assert fx.start(3) is fx.cluster
    assert calls == [3, 3]


def test_any_other_start_failure_is_not_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def up(self: Any, brokers: int = 3, timeout_s: float = 60.0, secure: bool = False) -> None:
        calls.append(brokers)
        raise ClusterError("broker 1 exited with 1: bad config")

    monkeypatch.setattr(helpers.LocalCluster, "up", up)
    with pytest.raises(ClusterError):
        helpers.ClusterFixture(tmp_path, "127.0.0.1:1").start(3)
    assert calls == [3]
