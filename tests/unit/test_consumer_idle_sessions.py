"""The consumer holds a fetch session per leader it fetches from (KIP-227). Once a broker leads none
of its assigned partitions (it died, or its partitions moved) and no fetch to it is in flight, the
session is forgotten: before, a dead broker's session stayed counted as held whenever the last fetch
to it had been answered rather than failed (the consumer-session integration test's leader move
hit this in one CI run). No sockets: the cluster view is set by hand."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from client.consumer import Consumer
from client.fetch_session_handler import FetchSessionHandler
from client.structs import TopicPartition

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def held(session_id: int) -> FetchSessionHandler[TopicPartition]:
    h: FetchSessionHandler[TopicPartition] = FetchSessionHandler()
    h.session_id, h.epoch = session_id, 3
    return h


def test_a_session_with_a_broker_that_leads_nothing_assigned_is_forgotten_unless_a_fetch_is_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    c = Consumer(bootstrap_servers="127.0.0.1:1", auto_offset_reset="earliest")
    try:
        # Broker 1 led t-0 and died: both partitions are led by 2 and 3 now.
        monkeypatch.setattr(c.view, "partitions", {("t", 0): SimpleNamespace(leader=2, leader_epoch=4),
                                                   ("t", 1): SimpleNamespace(leader=3, leader_epoch=3)})
        c.assign([TP0, TP1])
        c._sessions = {1: held(11), 2: held(12), 3: held(13)}
        c._inflight = {1: (SimpleNamespace(done=lambda: False), {}, None)}  # type: ignore[dict-item]
        c._drop_idle_sessions()
        assert sorted(c._sessions) == [1, 2, 3]  # its fetch is still out: answered or failed later
        assert c.fetch_session_metrics()["sessions"] == 3
        c._inflight = {}
        c._drop_idle_sessions()
        assert sorted(c._sessions) == [2, 3]
        assert c.fetch_session_metrics()["sessions"] == 2
    finally:
        c._inflight = {}
        c.close()
