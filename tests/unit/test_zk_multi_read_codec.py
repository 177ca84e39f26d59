"""zk/multi_read.py's request and reply bytes (ZooKeeper's Jute records for multiRead), and the
gateway's fallback to one read per znode where the server has no multiRead (before 3.6)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kazoo.exceptions import NoAuthError, NoNodeError, UnimplementedError
from kazoo.protocol.serialization import (
    int_struct,
    multiheader_struct,
    stat_struct,
    write_buffer,
    write_string,
)

from zk.client import KafkaZkClient
from zk.multi_read import ERROR, GET_DATA, MULTI_READ, MultiGetData

STAT = (1, 2, 3, 4, 5, 0, 0, 0, 3, 0, 6)  # czxid mzxid ctime mtime version cversion aversion owner len nc pzxid


def test_request_bytes() -> None:
    req = MultiGetData(("/a", "/bb"))
    assert req.type == MULTI_READ == 22
    assert bytes(req.serialize()) == (multiheader_struct.pack(GET_DATA, 0, -1) + bytes(write_string("/a")) + b"\0"
                                      + multiheader_struct.pack(GET_DATA, 0, -1) + bytes(write_string("/bb")) + b"\0"
                                      + multiheader_struct.pack(-1, 1, -1))


def test_reply_bytes() -> None:
    reply = (b"junk" + multiheader_struct.pack(GET_DATA, 0, 0) + bytes(write_buffer(b"abc")) + stat_struct.pack(*STAT)
             + multiheader_struct.pack(ERROR, 0, NoNodeError.code) + int_struct.pack(NoNodeError.code)
             + multiheader_struct.pack(GET_DATA, 0, 0) + bytes(write_buffer(None)) + stat_struct.pack(*STAT)
             + multiheader_struct.pack(ERROR, 0, NoAuthError.code) + int_struct.pack(NoAuthError.code)
             + multiheader_struct.pack(-1, 1, -1))
    first, missing, empty, denied = MultiGetData.deserialize(reply, 4)
    assert first[0] == b"abc" and first[1].version == 5
    assert isinstance(missing, NoNodeError) and isinstance(denied, NoAuthError)
    assert empty[0] is None and empty[1].version == 5


class _Result:
    def __init__(self, value: Any = None, error: Exception | None = None) -> None:
        self.value, self.error = value, error

    def get(self, timeout: float | None = None) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


def test_a_server_without_multi_read_is_read_one_znode_per_request() -> None:
    znodes = {f"/p/{i}": (b"d%d" % i, SimpleNamespace(version=i)) for i in range(20)}
    calls: list[Any] = []

    def call(request: Any, result: _Result) -> None:
        calls.append(request)
        result.error = UnimplementedError()

    def get_async(path: str) -> _Result:
        return _Result(znodes[path]) if path in znodes else _Result(error=NoNodeError())

    gw = KafkaZkClient.__new__(KafkaZkClient)
    gw.zk = SimpleNamespace(chroot="/root", handler=SimpleNamespace(async_result=_Result), _call=call,  # type: ignore[assignment]
                            get_async=get_async)
    gw.connection_timeout_s = 1.0
    gw._multi_read = True
    paths = [*znodes, "/p/missing"]
    want = {p: (znodes[p][0], znodes[p][1].version) for p in znodes} | {"/p/missing": None}
    assert gw._get_many(paths) == want
    assert len(calls) == 1 and calls[0].paths[0] == "/root/p/0"  # chrooted as kazoo's own calls
    assert gw._multi_read is False
    assert gw._get_many(paths) == want and len(calls) == 1  # not asked again
