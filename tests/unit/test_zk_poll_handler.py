"""zk/poll_handler.py answers as kazoo's selector_select does (issue 29: one poll per select
instead of an epoll instance made and closed per call). Over socketpairs: no network."""

from __future__ import annotations

import socket
import time

import pytest
from kazoo.handlers.utils import selector_select

from zk.poll_handler import PollingThreadingHandler, poll_select


def both(r: list[object], w: list[object], timeout: float = 0) -> tuple[object, object]:
    return poll_select(r, w, [], timeout), selector_select(r, w, [], timeout)


def test_same_answers_as_kazoos_select() -> None:
    a, b = socket.socketpair()
    c, d = socket.socketpair()
    try:
        # Nothing to read, both writable.
        mine, theirs = both([a, c], [a, c])
        assert mine == theirs and mine[0] == [] and mine[1] == [a, a, c, c]  # each object as often as given
        # Readable and writable: readable only.
        b.send(b"x")
        mine, theirs = both([a, c], [a, c])
        assert mine == theirs and mine[0] == [a, a] and mine[1] == [c, c]
        # A descriptor (int) is accepted as kazoo passes them, and given back as given.
        mine, theirs = both([a.fileno()], [])
        assert mine == theirs == ([a.fileno()], [], [])
        # The peer gone: readable (the reader sees the end) where reading was asked for.
        d.close()
        mine, theirs = both([c], [])
        assert mine == theirs == ([c], [], [])
        mine, theirs = both([], [c])
        assert mine == theirs == ([], [c], [])
    finally:
        for s in (a, b, c):
            s.close()


def test_timeout_waits_and_bad_timeouts_are_refused() -> None:
    a, b = socket.socketpair()
    try:
        started = time.monotonic()
        assert poll_select([a], [], [], 0.05) == ([], [], [])
        assert time.monotonic() - started >= 0.04  # a bound from below only: it waited, not spun
        with pytest.raises(ValueError):
            poll_select([a], [], [], -1)
        with pytest.raises(TypeError):
            poll_select([a], [], [], "1")  # type: ignore[arg-type]
    finally:
        a.close()
        b.close()


def test_the_handler_selects_with_it() -> None:
    a, b = socket.socketpair()
    try:
        b.send(b"x")
        assert PollingThreadingHandler().select([a], [], [], 0) == ([a], [], [])
    finally:
        a.close()
        b.close()
