"""Many znodes read in one ZooKeeper request: ``multiRead`` (ZooKeeper 3.6+, ZOOKEEPER-3242).

Theory of operation: a controller failover at 10,000 partitions reads 10,000 partition-state
znodes. Pipelined through kazoo (``get_async``), each read is a Python request object, a wake-up
write to kazoo's connection thread, a send and a reply parsed one at a time: ~2.5 s of one broker's
CPU, shared under the GIL with the controller and the broker's event loop (issue 29). ZooKeeper 3.6
added ``multiRead`` (opcode 22): like ``multi`` for writes, one request carrying many getData
operations, one reply carrying each one's data and stat, or its error (a missing znode is an error
of its own operation, not of the request). Not atomic, and need not be: reads.

kazoo (2.10) has no multiRead, but sends any request object that has kazoo's request shape
(``type``, ``serialize``, ``deserialize``) through ``KazooClient._call``: ``MultiGetData`` is that
object, written after kazoo's own ``Transaction`` (opcode 14) and Jute's records. Paths are given
chrooted, as kazoo's own calls do. Where the server does not know opcode 22 (before 3.6) it answers
UNIMPLEMENTED; the caller then reads one znode per request as before.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any

from kazoo.exceptions import EXCEPTIONS
from kazoo.protocol.serialization import (
    int_struct,
    multiheader_struct,
    read_buffer,
    stat_struct,
    write_string,
)
from kazoo.protocol.states import ZnodeStat

MULTI_READ = 22  # ZooDefs.OpCode.multiRead
GET_DATA = 4  # ZooDefs.OpCode.getData
ERROR = -1  # ZooDefs.OpCode.error: an operation's own failure, its code follows


class MultiGetData(namedtuple("MultiGetData", "paths")):  # kazoo's request shape
    """getData of each of ``paths`` (chrooted), without watches, in one multiRead."""

    type = MULTI_READ

    def serialize(self) -> bytearray:
        b = bytearray()
        for path in self.paths:
            b += multiheader_struct.pack(GET_DATA, False, -1)
            b += write_string(path)
            b.append(0)  # no watch
        b += multiheader_struct.pack(-1, True, -1)  # the end
        return b

    @classmethod
    def deserialize(cls, buf: bytes, offset: int) -> list[Any]:
        """One entry per path, in order: (data, ZnodeStat), or the kazoo exception of its error
        (NoNodeError for a missing znode)."""
        results: list[Any] = []
        while True:
            op, done, err = multiheader_struct.unpack_from(buf, offset)
            offset += multiheader_struct.size
            if done:
                return results
            if op == ERROR:
                code = int_struct.unpack_from(buf, offset)[0]
                offset += int_struct.size
                results.append(EXCEPTIONS[code]())
            elif op == GET_DATA:
                data, offset = read_buffer(buf, offset)
                stat = ZnodeStat._make(stat_struct.unpack_from(buf, offset))
                offset += stat_struct.size
                results.append((data, stat))
            else:
                raise ValueError(f"multiRead answered an operation of type {op} (error {err})")
