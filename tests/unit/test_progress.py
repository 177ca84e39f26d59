"""Progress lines (issue 17): redrawn every second on a terminal, a line every 5 s off one."""

from __future__ import annotations

import io

from client.cli.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_off_a_terminal_a_line_every_five_seconds() -> None:
    out, clock = io.StringIO(), Clock()
    p = Progress(out, interactive=False, clock=clock)
    for t in range(1, 12):
        clock.now = float(t)
        p.update(lambda t=t: f"at {t}")
    p.done()
    assert out.getvalue() == "at 5\nat 10\n"


def test_on_a_terminal_redrawn_every_second_and_ended() -> None:
    out, clock = io.StringIO(), Clock()
    p = Progress(out, interactive=True, clock=clock)
    clock.now = 0.5
    p.update("early")  # not due yet
    clock.now = 1.0
    p.update("one")
    clock.now = 2.5
    p.update("two")
    p.done()
    assert out.getvalue() == "\r\x1b[Kone\r\x1b[Ktwo\n"


def test_disabled_and_forced() -> None:
    out, clock = io.StringIO(), Clock()
    assert Progress(out, interactive=False, clock=clock, enabled=False).due() is False
    p = Progress(out, interactive=False, clock=clock)
    p.update("now", force=True)
    assert out.getvalue() == "now\n"
