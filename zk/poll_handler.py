"""kazoo's threading handler with a ``select`` that costs one ``poll(2)``.

Theory of operation: kazoo's connection thread calls ``handler.select`` once per request sent and
once per reply read. ``SequentialThreadingHandler.select`` (``kazoo.handlers.utils.selector_select``)
makes a new epoll instance for every call: ``epoll_create``, one ``epoll_ctl`` per socket, the wait,
then ``close``. Reading 10,000 partition states pipelined on a controller failover made ~20,000 such
calls; py-spy put 53% of the connection thread there, and that thread shares the GIL with the
controller and the broker's event loop (issue 29). ``poll_select`` answers the same question with a
``select.poll`` object, which holds no descriptor of its own: one system call per select.

The answer keeps ``selector_select``'s shape exactly: (readable, writable, []) with every file
object as given, a socket that is both readable and writable reported as readable only, an error
or hang-up reported where it was asked for (as ``selectors.PollSelector`` maps them).
"""

from __future__ import annotations

import math
import select
from collections import defaultdict
from typing import Any

from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import fileobj_to_fd


def poll_select(rlist: list[Any], wlist: list[Any], xlist: list[Any],
                timeout: float | None = None) -> tuple[list[Any], list[Any], list[Any]]:
    """``select.select``'s contract (as kazoo's ``selector_select`` gives it) over one ``poll``."""
    if timeout is not None:
        if not isinstance(timeout, int | float):
            raise TypeError("timeout must be a number")
        if timeout < 0:
            raise ValueError("timeout must be non-negative")
    masks: dict[int, int] = defaultdict(int)
    objects: dict[int, list[Any]] = defaultdict(list)
    for mask, fileobjs in ((select.POLLIN, rlist), (select.POLLOUT, wlist)):
        for fileobj in fileobjs:
            fd = fileobj_to_fd(fileobj)
            masks[fd] |= mask
            objects[fd].append(fileobj)
    poller = select.poll()
    for fd, mask in masks.items():
        poller.register(fd, mask)
    # poll takes milliseconds; rounded up, as the selectors module does, so a short timeout waits
    # rather than spins.
    ready = poller.poll(None if timeout is None else math.ceil(timeout * 1000))
    readable: list[Any] = []
    writable: list[Any] = []
    for fd, events in ready:
        # As selectors.PollSelector: any event but POLLOUT (an error, a hang-up) counts as readable,
        # any but POLLIN as writable, each only where it was asked for.
        if events & ~select.POLLOUT and masks[fd] & select.POLLIN:
            readable.extend(objects[fd])
        elif events & ~select.POLLIN and masks[fd] & select.POLLOUT:
            writable.extend(objects[fd])
    return readable, writable, []


class PollingThreadingHandler(SequentialThreadingHandler):  # type: ignore[misc]  # kazoo is untyped
    """``SequentialThreadingHandler`` whose ``select`` is ``poll_select``."""

    def select(self, *args: Any, **kwargs: Any) -> tuple[list[Any], list[Any], list[Any]]:
        return poll_select(*args, **kwargs)
