"""A ZooKeeper fault proxy for chaos tests: a TCP proxy on 127.0.0.1 between clients (brokers) and
a real ZooKeeper that understands just enough of ZooKeeper's wire protocol (jute) to

* parse client -> server request frames: a 4-byte big-endian length, then ``xid`` (int32) and
  ``opcode`` (int32); for create/delete/setData/check the path follows as a length-prefixed UTF-8
  string, a multi (14) is a sequence of ``MultiHeader(type, done, err)`` + op records ended by a
  header with ``done``; the first frame of a connection is the ConnectRequest (no header);
  pings have xid -2, auth -4, set-watches -8;
* match server -> client reply frames (``ReplyHeader(xid, zxid, err)``) to their request by xid
  (watch events have xid -1 and answer nothing); and
* on command: DROP the reply of the next request whose opcode and path match (by default only a
  reply saying the write succeeded) and reset that client's connection - both sockets closed - so
  the client sees ConnectionLoss although the server applied the write: a *lost reply*. Also reset
  every connection now, and delay replies.

It runs on its own event loop in a background thread, started and stopped from tests; every wait
in it is bounded. Nothing here knows about brokers: rules match on opcodes and paths only
(``path_suffix`` works with chroots, whose prefix is on the wire).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import struct
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

# ------------------------------------------------------------------ jute framing (pure)

OP_NOTIFICATION = 0
OP_CREATE = 1
OP_DELETE = 2
OP_EXISTS = 3
OP_GET_DATA = 4
OP_SET_DATA = 5
OP_GET_ACL = 6
OP_SET_ACL = 7
OP_GET_CHILDREN = 8
OP_SYNC = 9
OP_PING = 11
OP_GET_CHILDREN2 = 12
OP_CHECK = 13
OP_MULTI = 14
OP_CREATE2 = 15
OP_RECONFIG = 16
OP_CREATE_CONTAINER = 19
OP_CREATE_TTL = 21
OP_MULTI_READ = 22
OP_AUTH = 100
OP_SET_WATCHES = 101
OP_SASL = 102
OP_CLOSE = -11
OP_ERROR = -1  # a failed op's result inside a multi reply

XID_WATCH = -1
XID_PING = -2
XID_AUTH = -4
XID_SET_WATCHES = -8

CREATE_OPS = frozenset({OP_CREATE, OP_CREATE2, OP_CREATE_CONTAINER, OP_CREATE_TTL})
OP_NAMES = {"create": CREATE_OPS, "delete": frozenset({OP_DELETE}), "setData": frozenset({OP_SET_DATA}),
            "check": frozenset({OP_CHECK}), "multi": frozenset({OP_MULTI}),
            "getData": frozenset({OP_GET_DATA}), "exists": frozenset({OP_EXISTS}),
            "getChildren": frozenset({OP_GET_CHILDREN, OP_GET_CHILDREN2})}
# Requests whose body starts with a path (reads too: handy for delays and logs).
PATH_OPS = CREATE_OPS | {OP_DELETE, OP_EXISTS, OP_GET_DATA, OP_SET_DATA, OP_GET_ACL, OP_SET_ACL,
                         OP_GET_CHILDREN, OP_SYNC, OP_GET_CHILDREN2, OP_CHECK}

MAX_FRAME = 64 << 20  # well above jute.maxbuffer; anything bigger is a framing bug
_INT = struct.Struct("!i")
_HEADER = struct.Struct("!ii")
_REPLY_HEADER = struct.Struct("!iqi")
_MULTI_HEADER = struct.Struct("!iBi")
_STAT_SIZE = struct.calcsize("!qqqqiiiqiiq")


class FrameError(ValueError):
    """A frame that does not parse as ZooKeeper's protocol."""


@dataclass(frozen=True)
class Op:
    opcode: int
    path: str | None


@dataclass(frozen=True)
class Request:
    xid: int
    opcode: int
    ops: tuple[Op, ...]  # the request itself, or a multi's operations

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(o.path for o in self.ops if o.path is not None)


@dataclass(frozen=True)
class Reply:
    xid: int
    zxid: int
    err: int
    # For a multi: each operation's result opcode (OP_ERROR for a failed one); else empty.
    multi_results: tuple[int, ...] = ()

    @property
    def ok(self) -> bool:
        return self.err == 0 and OP_ERROR not in self.multi_results


def _read_int(buf: bytes, off: int) -> tuple[int, int]:
    if off + 4 > len(buf):
        raise FrameError(f"truncated int at {off} of {len(buf)}")
    return _INT.unpack_from(buf, off)[0], off + 4


def _read_buffer(buf: bytes, off: int) -> tuple[bytes | None, int]:
    n, off = _read_int(buf, off)
    if n < 0:
        return None, off
    if off + n > len(buf):
        raise FrameError(f"truncated buffer of {n} bytes at {off} of {len(buf)}")
    return buf[off:off + n], off + n


def _read_string(buf: bytes, off: int) -> tuple[str | None, int]:
    raw, off = _read_buffer(buf, off)
    return (None if raw is None else raw.decode("utf-8", errors="replace")), off


def _skip_op_body(opcode: int, buf: bytes, off: int) -> tuple[str | None, int]:
    """Parse one multi operation's record: (path, offset after it)."""
    path, off = _read_string(buf, off)
    if opcode in CREATE_OPS:
        _data, off = _read_buffer(buf, off)
        n_acl, off = _read_int(buf, off)
        if not 0 <= n_acl <= 1024:
            raise FrameError(f"bad ACL count {n_acl}")
        for _ in range(n_acl):
            _perms, off = _read_int(buf, off)
            _scheme, off = _read_string(buf, off)
            _ident, off = _read_string(buf, off)
        _flags, off = _read_int(buf, off)
        if opcode == OP_CREATE_TTL:
            off += 8
    elif opcode == OP_SET_DATA:
        _data, off = _read_buffer(buf, off)
        _version, off = _read_int(buf, off)
    elif opcode in (OP_DELETE, OP_CHECK):
        _version, off = _read_int(buf, off)
    elif opcode in (OP_GET_DATA, OP_GET_CHILDREN):  # multiRead's ops: path only
        pass
    else:
        raise FrameError(f"unknown op {opcode} in a multi")
    return path, off


def parse_request(payload: bytes) -> Request:
    """A client -> server frame's payload (after the length prefix), not the ConnectRequest."""
    if len(payload) < _HEADER.size:
        raise FrameError(f"request of {len(payload)} bytes has no header")
    xid, opcode = _HEADER.unpack_from(payload, 0)
    off = _HEADER.size
    if opcode in (OP_MULTI, OP_MULTI_READ):
        ops: list[Op] = []
        for _ in range(100_000):
            if off + _MULTI_HEADER.size > len(payload):
                raise FrameError("multi without its end header")
            t, done, _err = _MULTI_HEADER.unpack_from(payload, off)
            off += _MULTI_HEADER.size
            if done:
                return Request(xid, opcode, tuple(ops))
            path, off = _skip_op_body(t, payload, off)
            ops.append(Op(t, path))
        raise FrameError("multi with too many operations")
    if opcode in PATH_OPS:
        path, _ = _read_string(payload, off)
        return Request(xid, opcode, (Op(opcode, path),))
    return Request(xid, opcode, (Op(opcode, None),))


def parse_reply(payload: bytes, request_opcode: int | None = None) -> Reply:
    """A server -> client frame's payload (not the ConnectResponse). ``request_opcode`` (of the
    request with this xid) lets a multi's per-operation results be read."""
    if len(payload) < _REPLY_HEADER.size:
        raise FrameError(f"reply of {len(payload)} bytes has no header")
    xid, zxid, err = _REPLY_HEADER.unpack_from(payload, 0)
    if request_opcode != OP_MULTI or err != 0:
        return Reply(xid, zxid, err)
    off = _REPLY_HEADER.size
    results: list[int] = []
    for _ in range(100_000):
        if off + _MULTI_HEADER.size > len(payload):
            raise FrameError("multi reply without its end header")
        t, done, _e = _MULTI_HEADER.unpack_from(payload, off)
        off += _MULTI_HEADER.size
        if done:
            return Reply(xid, zxid, err, tuple(results))
        results.append(t)
        if t in (OP_CREATE, OP_CREATE_CONTAINER):
            _path, off = _read_string(payload, off)
        elif t in (OP_CREATE2, OP_CREATE_TTL):
            _path, off = _read_string(payload, off)
            off += _STAT_SIZE
        elif t == OP_SET_DATA:
            off += _STAT_SIZE
        elif t == OP_ERROR:
            _code, off = _read_int(payload, off)
        elif t not in (OP_DELETE, OP_CHECK):
            raise FrameError(f"unknown result type {t} in a multi reply")
    raise FrameError("multi reply with too many results")


def frame(payload: bytes) -> bytes:
    return _INT.pack(len(payload)) + payload


# ------------------------------------------------------------------ rules and records


@dataclass
class DroppedReply:
    """What the proxy swallowed: the request and the reply the client never saw."""

    conn_id: int
    request: Request
    reply: Reply
    at: float


@dataclass
class DropRule:
    """Drop the reply of the next ``count`` requests matching ``op`` and ``path`` (a regex searched in
    any of the request's paths; for a multi, ``op`` may also name one of its operations)."""

    opcodes: frozenset[int]
    path: re.Pattern[str] | None
    count: int = 1
    only_ok: bool = True  # drop only replies saying the request succeeded (the write was applied)
    also_in_multi: bool = False
    dropped: list[DroppedReply] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    def matches(self, req: Request, reply: Reply) -> bool:
        if self.done.is_set() or (self.only_ok and not reply.ok):
            return False
        if req.opcode in self.opcodes:
            ops = req.ops  # a multi's rule matches any of its operations' paths
        elif self.also_in_multi and req.opcode == OP_MULTI:
            ops = tuple(o for o in req.ops if o.opcode in self.opcodes)
            if not ops:
                return False
        else:
            return False
        return self.path is None or any(o.path is not None and self.path.search(o.path) for o in ops)

    def wait(self, timeout_s: float) -> bool:
        return self.done.wait(timeout_s)


@dataclass
class DelayRule:
    """Hold the replies of requests matching ``opcodes`` and ``path`` this long (until removed)."""

    opcodes: frozenset[int]
    path: re.Pattern[str] | None
    seconds: float
    delayed: int = 0

    def matches(self, req: Request) -> bool:
        return req.opcode in self.opcodes and (self.path is None or any(self.path.search(p) for p in req.paths))


@dataclass(frozen=True)
class Traced:
    """A request and its reply's error code (0: ok), as the proxy passed them."""

    conn_id: int
    opcode: int
    paths: tuple[str, ...]
    err: int
    zxid: int
    at: float


@dataclass
class Trace:
    path: re.Pattern[str]
    seen: list[Traced] = field(default_factory=list)


@dataclass
class _Conn:
    conn_id: int
    client_w: asyncio.StreamWriter
    server_w: asyncio.StreamWriter
    pending: dict[int, Request] = field(default_factory=dict)
    session_id: int = 0
    closed: bool = False


class ZkFaultProxy:
    """``start()`` it, point clients at ``connect(chroot)``, arm faults, ``stop()`` it."""

    def __init__(self, upstream: str, host: str = "127.0.0.1", port: int = 0) -> None:
        up_host, _, up_port = upstream.rpartition(":")
        self.upstream = (up_host, int(up_port))
        self.host = host
        self.port = port
        self.delay_s = 0.0
        self.connections_made = 0
        self.resets = 0
        self.requests_seen = 0
        self.errors: list[str] = []
        self._rules: list[DropRule] = []
        self._dropped: list[DroppedReply] = []
        self._traces: list[Trace] = []
        self._delays: list[DelayRule] = []
        self._lock = threading.Lock()
        self._conns: dict[int, _Conn] = {}
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------ lifecycle (test thread)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def connect(self, chroot: str = "") -> str:
        """A ZooKeeper connect string through this proxy."""
        return self.address + chroot

    def start(self, timeout_s: float = 10.0) -> ZkFaultProxy:
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._on_client, self.host, self.port))
                self.port = int(self._server.sockets[0].getsockname()[1])
            except BaseException as e:
                failure.append(e)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="zk-fault-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(timeout_s):
            raise RuntimeError("the ZooKeeper proxy did not start")
        if failure:
            raise failure[0]
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        loop = self._loop
        if loop is None or self._thread is None:
            return

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for c in list(self._conns.values()):
                self._close(c)
            for t in list(self._tasks):
                t.cancel()
            if self._tasks:
                await asyncio.wait(list(self._tasks), timeout=timeout_s / 2)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout_s)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(timeout_s)
        self._thread = None
        self._loop = None

    def __enter__(self) -> ZkFaultProxy:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------ faults (test thread)

    def drop_reply(self, op: str | Iterable[str], path: str | None = None, *, count: int = 1,
                   only_ok: bool = True, also_in_multi: bool = False) -> DropRule:
        """Arm: drop the reply of the next ``count`` matching requests, resetting their connections.
        ``op``: "create", "delete", "setData", "check", "multi" (or several); ``path``: a regex
        searched in the request's path(s), e.g. ``r"/partitions/0/state$"``."""
        names = [op] if isinstance(op, str) else list(op)
        opcodes = frozenset().union(*(OP_NAMES[n] for n in names))
        rule = DropRule(opcodes, re.compile(path) if path is not None else None, count, only_ok, also_in_multi)
        with self._lock:
            self._rules.append(rule)
        return rule

    def disarm(self, rule: DropRule) -> None:
        with self._lock:
            if rule in self._rules:
                self._rules.remove(rule)
        rule.done.set()

    def delay_replies(self, op: str | Iterable[str], path: str | None, seconds: float) -> DelayRule:
        """Hold the reply of every request matching ``op`` and ``path`` (a regex) ``seconds`` - the
        connection's later replies wait behind it - until ``remove_delay``."""
        names = [op] if isinstance(op, str) else list(op)
        rule = DelayRule(frozenset().union(*(OP_NAMES[n] for n in names)),
                         re.compile(path) if path is not None else None, seconds)
        with self._lock:
            self._delays.append(rule)
        return rule

    def remove_delay(self, rule: DelayRule) -> None:
        with self._lock:
            if rule in self._delays:
                self._delays.remove(rule)

    def trace(self, path: str) -> Trace:
        """Record every request whose path (any of a multi's) matches the regex ``path``, with its
        reply's error code, from now on."""
        t = Trace(re.compile(path))
        with self._lock:
            self._traces.append(t)
        return t

    def clear_rules(self) -> None:
        with self._lock:
            rules, self._rules = self._rules, []
            self._delays.clear()
        for r in rules:
            r.done.set()

    def set_delay(self, seconds: float) -> None:
        """Hold every server -> client frame this long before passing it on (0: no delay)."""
        self.delay_s = max(0.0, seconds)

    def reset_all(self, timeout_s: float = 5.0) -> int:
        """Close every proxied connection now (both sides); the number closed."""
        loop = self._loop
        if loop is None:
            return 0

        async def reset() -> int:
            conns = [c for c in self._conns.values() if not c.closed]
            for c in conns:
                self._close(c)
            return len(conns)

        n = asyncio.run_coroutine_threadsafe(reset(), loop).result(timeout_s)
        self.resets += n
        return n

    def open_connections(self) -> int:
        return sum(1 for c in self._conns.values() if not c.closed)

    @property
    def dropped(self) -> list[DroppedReply]:
        """Every reply dropped so far, by any rule."""
        with self._lock:
            return list(self._dropped)

    # ------------------------------------------------------------ the proxy (its own loop)

    def _spawn(self, coro: object) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _on_client(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.wait_for(asyncio.open_connection(*self.upstream), 5.0)
        except (TimeoutError, OSError) as e:
            self.errors.append(f"upstream connect failed: {e!r}")
            client_w.transport.abort()
            return
        conn = _Conn(next(self._ids), client_w, server_w)
        self._conns[conn.conn_id] = conn
        self.connections_made += 1
        self._spawn(self._pump_requests(conn, client_r))
        self._spawn(self._pump_replies(conn, server_r))

    def _close(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        conn.client_w.transport.abort()
        conn.server_w.transport.abort()
        self._conns.pop(conn.conn_id, None)

    @staticmethod
    async def _read_frame(reader: asyncio.StreamReader) -> bytes:
        size = _INT.unpack(await reader.readexactly(4))[0]
        if not 0 <= size <= MAX_FRAME:
            raise FrameError(f"frame length {size}")
        return await reader.readexactly(size)

    async def _pump_requests(self, conn: _Conn, reader: asyncio.StreamReader) -> None:
        first = True
        try:
            while not conn.closed:
                payload = await self._read_frame(reader)
                if first:
                    first = False  # the ConnectRequest: no header
                else:
                    req = parse_request(payload)
                    self.requests_seen += 1
                    if req.xid not in (XID_PING, XID_AUTH, XID_SET_WATCHES):
                        conn.pending[req.xid] = req
                if conn.closed:
                    return
                conn.server_w.write(frame(payload))
                await asyncio.wait_for(conn.server_w.drain(), 10.0)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        except FrameError as e:
            self.errors.append(f"conn {conn.conn_id}: bad request frame: {e}")
        finally:
            self._close(conn)

    async def _pump_replies(self, conn: _Conn, reader: asyncio.StreamReader) -> None:
        first = True
        try:
            while not conn.closed:
                payload = await self._read_frame(reader)
                req: Request | None = None
                if first:
                    first = False  # the ConnectResponse: protocolVersion, timeOut, sessionId, passwd
                    if len(payload) >= 16:
                        conn.session_id = struct.unpack_from("!q", payload, 8)[0]
                else:
                    xid = _INT.unpack_from(payload, 0)[0] if len(payload) >= 4 else 0
                    req = conn.pending.pop(xid, None) if xid >= 0 else None
                    if req is not None:
                        reply = parse_reply(payload, req.opcode)
                        with self._lock:
                            for t in self._traces:
                                if any(t.path.search(p) for p in req.paths):
                                    t.seen.append(Traced(conn.conn_id, req.opcode, req.paths, reply.err, reply.zxid,
                                                         time.time()))
                            rule = next((r for r in self._rules if r.matches(req, reply)), None)
                            if rule is not None:
                                record = DroppedReply(conn.conn_id, req, reply, time.time())
                                rule.dropped.append(record)
                                self._dropped.append(record)
                                if len(rule.dropped) >= rule.count:
                                    self._rules.remove(rule)
                                    rule.done.set()
                        if rule is not None:
                            self._close(conn)  # a lost reply: the client sees the connection go
                            self.resets += 1
                            return
                delay = self.delay_s
                if req is not None and self._delays:
                    with self._lock:
                        for d in self._delays:
                            if d.matches(req):
                                d.delayed += 1
                                delay = max(delay, d.seconds)
                if delay > 0:
                    await asyncio.sleep(delay)
                if conn.closed:
                    return
                conn.client_w.write(frame(payload))
                await asyncio.wait_for(conn.client_w.drain(), 10.0)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        except FrameError as e:
            self.errors.append(f"conn {conn.conn_id}: bad reply frame: {e}")
        finally:
            self._close(conn)
