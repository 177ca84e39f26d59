"""A progress line for long commands (``perf produce/consume``, ``chaos``).

On a terminal the line is redrawn in place every second; off a terminal (a log, CI, a pipe) a
whole line is written every 5 s, as Kafka's perf tools print their periodic report. Progress goes
to stderr so stdout stays the command's result (``--output json`` parses cleanly). The clock is
passed in, so tests drive it without waiting.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

TERMINAL_INTERVAL_S = 1.0
REPORT_INTERVAL_S = 5.0  # kafka-producer-perf-test's reporting interval


class Progress:
    def __init__(self, stream: TextIO | None = None, interactive: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, enabled: bool = True) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.interval_s = TERMINAL_INTERVAL_S if self.interactive else REPORT_INTERVAL_S
        self.clock = clock
        self.enabled = enabled
        self._last = clock()
        self._drawn = False

    def due(self) -> bool:
        return self.enabled and self.clock() - self._last >= self.interval_s

    def update(self, text: str | Callable[[], str], force: bool = False) -> None:
        """Show ``text`` if a report is due (or ``force``); a callable is only evaluated then."""
        if not self.enabled or not (force or self.due()):
            return
        self._last = self.clock()
        line = text() if callable(text) else text
        if self.interactive:
            self.stream.write(f"\r\x1b[K{line}")
            self._drawn = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def done(self) -> None:
        """End the redrawn line, so what follows starts on a line of its own."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
