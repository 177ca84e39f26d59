"""The in-memory ZooKeeper model (sim_zk.py): unit tests of the model alone, and differential tests
(``integration``) that run the same operations against the real ZooKeeper server and the model and
compare results, raised exception types, stats, children lists (in order), transaction results,
session-close effects and watch events.

Absolute zxids and session ids differ between the two servers, so a trace maps every observed zxid to
its rank among all zxids the trace observed (equalities and order must agree) and every session id to
a label (A1, B2, ...); ``test_zxid_accounting_matches`` compares exact zxid deltas on its own.
"""

from __future__ import annotations

import functools
import os
import random
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.protocol.states import Callback, EventType, KazooState, KeeperState, WatchedEvent, ZnodeStat
from kazoo.retry import ForceRetryError, KazooRetry, RetryFailedError
from sim_zk import (
    JavaHashSet,
    SimKazooClient,
    SimLivelockError,
    SimRetry,
    SimZooKeeper,
    fault_once,
    java_string_hash,
    random_faults,
)

# ============================================================================ differential harness

Op = tuple[Any, ...]
Event = tuple[str, str, "str | None", str]  # (watcher kind, event type, path, keeper state)


@dataclass(frozen=True)
class Z:
    """A raw zxid inside a trace, replaced by its rank before comparing."""

    value: int


class Side:
    """One system (the real server or the model) with two clients, A and B, each with one data-watch
    and one child-watch function (so kazoo's per-function de-duplication is exercised) that record
    events."""

    def __init__(self, make: Callable[[], Any], settle: Callable[[Any], None]) -> None:
        self.make = make
        self.settle_one = settle
        self.clients: dict[str, Any] = {}
        self.labels: dict[int, str] = {}
        self.incarnations = {"A": 0, "B": 0}
        self.events: dict[str, list[Event]] = {"A": [], "B": []}
        self.stale: dict[str, list[Event]] = {"A": [], "B": []}
        self.states: dict[str, list[str]] = {"A": [], "B": []}
        self.data_watch: dict[str, Callable[[WatchedEvent], None]] = {}
        self.child_watch: dict[str, Callable[[WatchedEvent], None]] = {}
        for who in ("A", "B"):
            c = make()
            self.clients[who] = c
            self.data_watch[who] = functools.partial(self._record, who, "data")
            self.child_watch[who] = functools.partial(self._record, who, "child")
            c.add_listener(functools.partial(self._state, who))
            self._start(who)

    def _record(self, who: str, kind: str, event: WatchedEvent) -> None:
        if event.type == EventType.NONE and event.state == KeeperState.CLOSED:
            # Watch functions left at stop() get this after the next start(), but kazoo loses them
            # when its connection thread dispatches them while the handler is stopping (~1 in 150
            # restarts measured): kept apart from the compared events.
            self.stale[who].append((kind, event.type, event.path, event.state))
            return
        self.events[who].append((kind, event.type, event.path, event.state))

    def _state(self, who: str, state: str) -> None:
        self.states[who].append(state)

    def _start(self, who: str) -> None:
        c = self.clients[who]
        c.start(timeout=10)
        self.incarnations[who] += 1
        self.labels[c.client_id[0]] = f"{who}{self.incarnations[who]}"

    def close(self) -> None:
        for c in self.clients.values():
            c.stop()
            c.close()

    def settle(self) -> None:
        for c in self.clients.values():
            self.settle_one(c)

    def norm(self, x: Any) -> Any:
        if isinstance(x, ZnodeStat):
            owner = self.labels.get(x.ephemeralOwner, f"?{x.ephemeralOwner:x}") if x.ephemeralOwner else 0
            return ("stat", Z(x.czxid), Z(x.mzxid), x.version, x.cversion, x.aversion, owner, x.dataLength,
                    x.numChildren, Z(x.pzxid))
        if isinstance(x, BaseException):
            return ("exc", type(x).__name__)
        if isinstance(x, (list, tuple)):
            return type(x)(self.norm(i) for i in x)
        return x

    def run(self, op: Op) -> Any:
        kind, who = op[0], op[1]
        c = self.clients[who]
        try:
            if kind == "create":
                _, _, path, value, ephemeral, sequence, makepath = op
                out = c.create(path, value, ephemeral=ephemeral, sequence=sequence, makepath=makepath)
            elif kind == "set":
                _, _, path, value, version = op
                out = c.set(path, value, version=version)
            elif kind == "delete":
                _, _, path, version, recursive = op
                out = c.delete(path, version=version, recursive=recursive)
            elif kind == "get":
                out = c.get(op[2], watch=self.data_watch[who] if op[3] else None)
            elif kind == "exists":
                out = c.exists(op[2], watch=self.data_watch[who] if op[3] else None)
            elif kind == "children":
                out = c.get_children(op[2], watch=self.child_watch[who] if op[3] else None, include_data=True)
            elif kind == "ensure":
                out = c.ensure_path(op[2])
            elif kind == "multi":
                t = c.transaction()
                for sub in op[2]:
                    if sub[0] == "check":
                        t.check(sub[1], sub[2])
                    elif sub[0] == "create":
                        t.create(sub[1], sub[2], ephemeral=sub[3], sequence=sub[4])
                    elif sub[0] == "set_data":
                        t.set_data(sub[1], sub[2], version=sub[3])
                    else:
                        t.delete(sub[1], version=sub[2])
                out = t.commit()
            elif kind == "restart":
                c.stop()
                self._start(who)
                out = None
            else:
                raise AssertionError(f"unknown op {op!r}")
        except (KazooException, TypeError, ValueError) as e:
            out = ("raised", type(e).__name__)
        return self.norm(out)

    def step(self, op: Op) -> tuple[Op, Any, list[Event], list[Event]]:
        outcome = self.run(op)
        self.settle()
        ev_a, ev_b = list(self.events["A"]), list(self.events["B"])
        self.events["A"].clear()
        self.events["B"].clear()
        return op, outcome, ev_a, ev_b


def _ranked(trace: list[Any]) -> list[Any]:
    zs: set[int] = set()

    def collect(x: Any) -> None:
        if isinstance(x, Z):
            zs.add(x.value)
        elif isinstance(x, (list, tuple)):
            for i in x:
                collect(i)

    collect(trace)
    rank = {z: i for i, z in enumerate(sorted(zs))}

    def sub(x: Any) -> Any:
        if isinstance(x, Z):
            return ("zxid#", rank[x.value])
        if isinstance(x, (list, tuple)):
            return type(x)(sub(i) for i in x)
        return x

    return [sub(e) for e in trace]


def _real_barrier(c: KazooClient) -> None:
    """Every watch callback for events sent before now has run: a round trip on the connection (events
    precede later replies), then a marker behind them on kazoo's callback queue. No sleeping."""
    c.exists("/")
    done = threading.Event()
    c.handler.dispatch_callback(Callback("watch", done.set, ()))
    assert done.wait(10), "kazoo's callback queue did not drain"


def _wait_until(cond: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    ev = threading.Event()
    for _ in range(int(timeout_s / 0.01)):
        if cond():
            return True
        ev.wait(0.01)  # bounded poll
    return cond()


class Pair:
    """The real server (under a fresh sub-chroot of ``zk_connect``) and a fresh model with the very same
    chroot path (so Java hash orders of full paths agree)."""

    def __init__(self, admin: KazooClient, connect: str) -> None:
        _host, slash, base = connect.partition("/")
        sub = f"/ex-{uuid.uuid4().hex[:8]}"
        admin.ensure_path(sub)
        chroot = (f"/{base}" if slash else "") + sub
        self.real = Side(lambda: KazooClient(hosts=connect + sub, timeout=10), _real_barrier)
        self.server = SimZooKeeper()
        boot = self.server.client()
        boot.start()
        boot.ensure_path(chroot)
        boot.stop()
        self.sim = Side(lambda: self.server.client("sim:2181" + chroot), self._deliver)

    def _deliver(self, _client: SimKazooClient) -> None:
        self.server.deliver_watches()

    def run(self, ops: list[Op]) -> list[Any]:
        """Run ``ops`` on both, assert the traces agree, return the (ranked) real trace."""
        real = _ranked([self.real.step(op) for op in ops])
        sim = _ranked([self.sim.step(op) for op in ops])
        for i, (r, s) in enumerate(zip(real, sim, strict=True)):
            assert r == s, f"step {i} {ops[i]!r}:\n real: {r!r}\n  sim: {s!r}"
        for who in ("A", "B"):  # kazoo may call a CONNECTED listener just after start() returned
            want = self.sim.states[who]
            assert _wait_until(functools.partial(self._caught_up, who, len(want)))
            assert self.real.states[who] == want, who
        self.server.check_invariants()
        return real

    def _caught_up(self, who: str, n: int) -> bool:
        return len(self.real.states[who]) >= n

    def close(self) -> None:
        self.real.close()
        self.sim.close()


@pytest.fixture
def zk_admin(zk_connect: str) -> Iterator[KazooClient]:
    c = KazooClient(hosts=zk_connect, timeout=10)
    c.start(timeout=10)
    yield c
    c.stop()
    c.close()


@pytest.fixture
def pair(zk_admin: KazooClient, zk_connect: str) -> Iterator[Pair]:
    p = Pair(zk_admin, zk_connect)
    yield p
    p.close()


def _outcomes(trace: list[Any]) -> list[Any]:
    return [step[1] for step in trace]


# ============================================================================ differential: targeted


@pytest.mark.integration
def test_conditional_set_with_stale_version(pair: Pair) -> None:
    trace = pair.run([
        ("create", "A", "/a", b"v0", False, False, False),
        ("set", "A", "/a", b"v1", 0),
        ("set", "B", "/a", b"v2", 0),  # stale
        ("set", "B", "/a", b"v2", 5),
        ("set", "A", "/nope", b"x", -1),
        ("set", "A", "/nope", b"x", 3),  # NoNode wins over BadVersion
        ("get", "B", "/a", False),
        ("set", "A", "/a", None, -1),
        ("get", "A", "/a", False),
    ])
    out = _outcomes(trace)
    assert out[2] == ("raised", "BadVersionError") and out[4] == out[5] == ("raised", "NoNodeError")
    assert out[6][0] == b"v1" and out[8][0] is None  # null data stays null


@pytest.mark.integration
def test_delete_non_empty_and_check_order(pair: Pair) -> None:
    trace = pair.run([
        ("create", "A", "/a/b/c", b"", False, False, True),
        ("delete", "A", "/a", -1, False),
        ("delete", "A", "/a", 7, False),  # BadVersion is checked before NotEmpty
        ("delete", "A", "/nope/x", -1, False),
        ("delete", "B", "/a", -1, True),
        ("exists", "A", "/a", False),
        ("delete", "B", "/a", -1, True),  # recursive delete of nothing: True
    ])
    out = _outcomes(trace)
    assert out[1:4] == [("raised", "NotEmptyError"), ("raised", "BadVersionError"), ("raised", "NoNodeError")]
    assert out[4] is None and out[5] is None and out[6] is True  # kazoo: None when it deleted, True if absent


@pytest.mark.integration
def test_ephemeral_with_children_and_session_close(pair: Pair) -> None:
    trace = pair.run([
        ("create", "A", "/p", b"", False, False, False),
        ("create", "B", "/p/e", b"me", True, False, False),
        ("create", "A", "/p/e/c", b"", False, False, False),
        ("create", "A", "/p/e/c/d", b"", False, False, True),
        ("ensure", "A", "/p/e/c"),
        ("create", "B", "/p/e", b"", True, False, False),  # exists beats the ephemeral-parent check
        ("exists", "A", "/p/e", True),
        ("children", "A", "/p", True),
        ("get", "A", "/p/e", False),
        ("restart", "B"),
        ("exists", "A", "/p/e", False),
        ("children", "A", "/p", False),
    ])
    out = _outcomes(trace)
    assert out[2] == out[3] == out[4] == ("raised", "NoChildrenForEphemeralsError")
    assert out[5] == ("raised", "NodeExistsError")
    assert out[8][1][6] == "B1" and out[10] is None
    assert trace[9][2] == [("data", "DELETED", "/p/e", "CONNECTED"), ("child", "CHILD", "/p", "CONNECTED")]


@pytest.mark.integration
def test_session_close_deletes_ephemerals_in_server_order(pair: Pair) -> None:
    names = [f"/d/e{i}" for i in range(12)] + ["/a/x", "/a/y", "/broker-7", "/controller"]
    ops: list[Op] = [("create", "A", "/d", b"", False, False, False), ("create", "A", "/a", b"", False, False, False)]
    ops += [("create", "B", n, b"", True, False, False) for n in names]
    ops += [("exists", "A", n, True) for n in names]
    ops += [("children", "A", "/d", True), ("children", "A", "/a", True), ("children", "A", "/", True)]
    ops += [("restart", "B"), ("children", "A", "/d", False)]
    trace = pair.run(ops)
    close_events = trace[-2][2]
    assert len(close_events) == len(names) + 3 and {e[2] for e in close_events if e[1] == "DELETED"} == set(names)


@pytest.mark.integration
def test_sequence_numbering_after_deletes(pair: Pair) -> None:
    ops: list[Op] = [("create", "A", "/s", b"", False, False, False)]
    for i in range(4):
        ops += [("create", "A", f"/s/n{i}", b"", False, False, False), ("delete", "A", f"/s/n{i}", -1, False)]
    ops += [("create", "A", "/s/q-", b"", False, True, False), ("exists", "A", "/s", False),
            ("create", "B", "/s/", b"", True, True, False),
            ("multi", "A", (("create", "/s/z", b"", False, False), ("delete", "/s/z", -1),
                            ("create", "/s/m-", b"", False, True))),
            ("multi", "A", (("create", "/s/w-", b"", False, True), ("check", "/s", 99))),  # rolled back
            ("create", "A", "/s/after-", b"", False, True, False),
            ("create", "A", "/t/deep/seq-", b"", False, True, True),
            ("children", "A", "/s", False)]
    trace = pair.run(ops)
    out = _outcomes(trace)
    assert out[9] == "/s/q-0000000004"  # 4 creates and 4 deletes before it: cversion 8, suffix 4
    assert out[10][4] == 9  # the visible cversion counts deletions too


@pytest.mark.integration
def test_multi_with_one_failing_op_applies_nothing(pair: Pair) -> None:
    trace = pair.run([
        ("create", "A", "/a", b"x", False, False, False),
        ("children", "B", "/", True),
        ("get", "B", "/a", True),
        ("multi", "A", (("create", "/b", b"", False, False), ("set_data", "/a", b"y", -1),
                        ("check", "/a", 5), ("delete", "/a", -1), ("create", "/c", b"", False, False))),
        ("exists", "A", "/b", False),
        ("get", "A", "/a", False),
        ("multi", "A", (("delete", "/nope", -1), ("create", "/b", b"", False, False))),
        ("multi", "A", ()),
        ("multi", "A", (("create", "/b", b"", False, False), ("create", "/b/c", b"", False, True),
                        ("set_data", "/a", b"z", 0), ("check", "/a", 1), ("delete", "/a", 1))),
        ("exists", "A", "/b/c0000000000", False),
        ("multi", "B", (("create", "/e", b"", True, False), ("create", "/e/x", b"", False, False))),
    ])
    out = _outcomes(trace)
    assert out[3] == [("exc", "RolledBackError"), ("exc", "RolledBackError"), ("exc", "BadVersionError"),
                      ("exc", "RuntimeInconsistency"), ("exc", "RuntimeInconsistency")]
    assert out[4] is None and out[5][0] == b"x" and trace[3][3] == []  # nothing applied, nothing fired
    assert out[6] == [("exc", "NoNodeError"), ("exc", "RuntimeInconsistency")] and out[7] == []
    ok = out[8]
    assert ok[:2] == ["/b", "/b/c0000000000"] and ok[3:] == [True, True]
    assert ok[2][2] == out[9][1]  # one zxid for the whole multi: /a's new mzxid is /b/c...'s czxid
    assert out[10] == [("exc", "RolledBackError"), ("exc", "NoChildrenForEphemeralsError")]


@pytest.mark.integration
def test_watches_are_one_shot_with_zookeeper_event_types(pair: Pair) -> None:
    trace = pair.run([
        ("exists", "A", "/w", True),
        ("get", "A", "/w", True),  # NoNode: no watch set
        ("children", "A", "/w", True),  # NoNode: no watch set
        ("create", "B", "/w", b"", False, False, False),  # CREATED (exists watch)
        ("set", "B", "/w", b"1", -1),  # nothing: the watch fired already
        ("get", "A", "/w", True),
        ("exists", "A", "/w", True),  # same function: one registration
        ("set", "B", "/w", b"2", -1),  # CHANGED once
        ("set", "B", "/w", b"3", -1),
        ("children", "A", "/w", True),
        ("set", "B", "/w", b"4", -1),  # data change does not fire a child watch
        ("create", "B", "/w/c", b"", False, False, False),  # CHILD
        ("create", "B", "/w/d", b"", False, False, False),
        ("get", "A", "/w/c", True),
        ("children", "A", "/w/c", True),
        ("delete", "B", "/w/c", -1, False),  # DELETED to the data watcher, then to the child watcher
        ("children", "A", "/w", True),
        ("get", "A", "/w", True),
        ("delete", "B", "/w", -1, True),  # DELETED (data, child) and CHILD on /
        ("children", "A", "/", True),
        ("exists", "A", "/w", True),
        ("multi", "B", (("create", "/w", b"", False, False), ("create", "/w/x", b"", False, False))),
    ])
    assert [t[2] for t in trace if t[2]] == [
        [("data", "CREATED", "/w", "CONNECTED")],
        [("data", "CHANGED", "/w", "CONNECTED")],
        [("child", "CHILD", "/w", "CONNECTED")],
        [("data", "DELETED", "/w/c", "CONNECTED"), ("child", "DELETED", "/w/c", "CONNECTED")],
        [("child", "CHILD", "/w", "CONNECTED"), ("data", "DELETED", "/w", "CONNECTED")],  # child watch spent
        [("data", "CREATED", "/w", "CONNECTED"), ("child", "CHILD", "/", "CONNECTED")],
    ]


@pytest.mark.integration
def test_stop_then_start_delivers_stale_none_events(pair: Pair) -> None:
    """A kazoo quirk the model copies: watch functions left when a client stops are called with a
    NONE event (state CLOSED) once it starts again (kazoo loses them in a rare race)."""
    pair.run([
        ("create", "A", "/n", b"", False, False, False),
        ("get", "A", "/n", True),
        ("children", "A", "/n", True),
        ("restart", "A"),
        ("set", "B", "/n", b"x", -1),  # the old session's watches are gone
    ])
    stale = [("child", "NONE", None, "CLOSED"), ("data", "NONE", None, "CLOSED")]
    assert pair.sim.stale["A"] == stale and pair.real.stale["A"] in (stale, [])


@pytest.mark.integration
def test_children_order_matches_java_hashset(pair: Pair) -> None:
    rng = random.Random(7)
    names = [f"c{i}" for i in range(30)] + ["topics", "brokers", "ids", "0", "1", "10", "isr_change_0000000001"]
    live: list[str] = []
    ops: list[Op] = []
    for _ in range(70):
        if live and rng.random() < 0.35:
            n = live.pop(rng.randrange(len(live)))
            ops.append(("delete", "A", f"/{n}", -1, False))
        else:
            n = rng.choice([x for x in names if x not in live])
            live.append(n)
            ops.append(("create", "A", f"/{n}", b"", False, False, False))
        ops.append(("children", "B", "/", False))
    pair.run(ops)


@pytest.mark.integration
def test_zxid_accounting_matches(zk_admin: KazooClient, zk_connect: str) -> None:
    """Exact zxid deltas: failed writes, failed and empty multis, session create and close each take
    one; reads take none. Another session expiring on the shared server could add a txn in the middle,
    so the real run may be repeated (extra txns only ever make the real delta larger)."""

    def measure(c: Any, other: Any) -> int:
        c.create("/m0", b"")
        base = c.exists("/m0").czxid
        for op in (lambda: c.create("/m0"), lambda: c.set("/m0", b"x", version=9),
                   lambda: c.delete("/nope"), lambda: c.transaction().commit(),
                   lambda: (lambda t: (t.check("/m0", 5), t.commit()))(c.transaction())):
            try:
                op()
            except (NodeExistsError, BadVersionError, NoNodeError):
                pass
        c.get("/m0")
        c.exists("/nope")
        c.get_children("/")
        other.start(timeout=10)
        other.create("/eph", ephemeral=True)
        other.stop()
        c.create("/m1", b"")
        delta: int = c.exists("/m1").czxid - base
        c.delete("/m0")
        c.delete("/m1")
        return delta

    server = SimZooKeeper()
    sim_delta = measure(_started(server.client()), server.client())
    assert sim_delta == 9
    real = KazooClient(hosts=zk_connect, timeout=10)
    real.start(timeout=10)
    try:
        deltas = []
        for _ in range(3):
            deltas.append(measure(real, KazooClient(hosts=zk_connect, timeout=10)))
            if deltas[-1] == sim_delta:
                break
        assert sim_delta in deltas, deltas
    finally:
        real.stop()
        real.close()


def _started(c: SimKazooClient) -> SimKazooClient:
    c.start()
    return c


@pytest.mark.integration
def test_recipes_match_kazoo(pair: Pair) -> None:
    """kazoo's real DataWatch/ChildrenWatch on the real server vs the model's on the model."""
    calls: dict[str, list[Any]] = {"real": [], "sim": []}

    def attach(side: Side, key: str) -> None:
        c = side.clients["A"]
        c.create("/r", b"0")

        def on_data(data: bytes | None, stat: ZnodeStat | None, event: WatchedEvent | None) -> bool | None:
            calls[key].append(("data", data, stat.version if stat else None, event.type if event else None))
            return False if data == b"stop" else None

        c.DataWatch("/r", on_data)
        c.DataWatch("/missing", lambda data, stat: calls[key].append(("missing", data, stat and stat.version)))
        c.ChildrenWatch("/r", lambda children, event: calls[key].append(
            ("children", sorted(children), event.type if event else None)), send_event=True)

    attach(pair.real, "real")
    attach(pair.sim, "sim")
    pair.sim.settle()
    pair.real.settle()
    pair.run([
        ("set", "B", "/r", b"1", -1),
        ("create", "B", "/r/a", b"", False, False, False),
        ("create", "B", "/missing", b"m", False, False, False),
        ("set", "B", "/r", b"stop", -1),
        ("set", "B", "/r", b"after-stop", -1),
        ("delete", "B", "/r/a", -1, False),
        ("delete", "B", "/r", -1, False),  # ChildrenWatch gets NoNode and stops
        ("create", "B", "/r", b"", False, False, False),
        ("create", "B", "/r/b", b"", False, False, False),
    ])
    assert calls["real"] == calls["sim"]
    assert calls["sim"][0] == ("data", b"0", 0, None) and ("missing", None, None) in calls["sim"]


# ============================================================================ differential: random

PATHS = ["/a", "/a/b", "/a/c", "/d", "/a/b/e"]
SEQ_PATHS = ["/a/s-", "/d/", "/q"]
who_st = st.sampled_from(["A", "B"])
path_st = st.sampled_from(PATHS)
value_st = st.sampled_from([b"", b"x", b"yz", None])
version_st = st.sampled_from([-1, -1, 0, 1, 2])
subop_st = st.one_of(
    st.tuples(st.just("check"), path_st, version_st),
    st.tuples(st.just("create"), st.sampled_from(PATHS + SEQ_PATHS), st.sampled_from([b"", b"m"]), st.booleans(),
              st.booleans()),
    st.tuples(st.just("set_data"), path_st, st.sampled_from([b"", b"m"]), version_st),
    st.tuples(st.just("delete"), path_st, version_st),
)
op_st = st.one_of(
    st.tuples(st.just("create"), who_st, path_st, value_st, st.booleans(), st.just(False), st.booleans()),
    st.tuples(st.just("create"), who_st, path_st, value_st, st.booleans(), st.just(False), st.booleans()),
    st.tuples(st.just("create"), who_st, st.sampled_from(SEQ_PATHS), value_st, st.booleans(), st.just(True),
              st.booleans()),
    st.tuples(st.just("set"), who_st, path_st, value_st, version_st),
    st.tuples(st.just("delete"), who_st, path_st, version_st, st.booleans()),
    st.tuples(st.sampled_from(["get", "exists", "children"]), who_st, st.sampled_from([*PATHS, "/"]), st.booleans()),
    st.tuples(st.sampled_from(["get", "exists", "children"]), who_st, st.sampled_from([*PATHS, "/"]), st.booleans()),
    st.tuples(st.just("ensure"), who_st, path_st),
    st.tuples(st.just("multi"), who_st, st.lists(subop_st, max_size=4).map(tuple)),
    st.tuples(st.just("restart"), who_st),
)


# MINIKAFKA_SIM_ZK_EXAMPLES=N explores N fresh random examples instead of the fixed 20.
_EXAMPLES = int(os.environ.get("MINIKAFKA_SIM_ZK_EXAMPLES", "0"))


@pytest.mark.integration
@settings(max_examples=_EXAMPLES or 20, deadline=None, derandomize=not _EXAMPLES, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=st.lists(op_st, min_size=1, max_size=15))
def test_random_op_sequences_match_real_server(zk_admin: KazooClient, zk_connect: str, ops: list[Op]) -> None:
    p = Pair(zk_admin, zk_connect)
    try:
        p.run(ops)
    finally:
        p.close()


# ============================================================================ model alone


@pytest.fixture
def server() -> SimZooKeeper:
    return SimZooKeeper()


@pytest.fixture
def zk(server: SimZooKeeper) -> SimKazooClient:
    return _started(server.client(name="zk"))


def test_java_string_hash_and_hashset_order() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == 0x80000000  # Integer.MIN_VALUE, as unsigned
    s = JavaHashSet()
    for n in ("c", "a", "b", "aa"):
        s.add(n)
    assert list(s) == ["aa", "a", "b", "c"]  # buckets (h ^ h >>> 16) & 7: "aa" 3104 -> 0, "a" 97 -> 1, ...
    for i in range(20):
        s.add(f"n{i}")
    t = s.copy()
    s.remove("a")
    assert "a" in t and "a" not in s and len(t) == len(s) + 1 and list(t) != list(s)


def test_stats_versions_and_zxids(server: SimZooKeeper, zk: SimKazooClient) -> None:
    z0 = server.zxid
    assert zk.create("/a", b"xy") == "/a"
    data, st_a = zk.get("/a")
    assert data == b"xy" and st_a.czxid == st_a.mzxid == st_a.pzxid == z0 + 1 and st_a.dataLength == 2
    assert zk.set("/a", b"z").version == 1
    with pytest.raises(BadVersionError):
        zk.set("/a", b"q", version=0)
    with pytest.raises(NodeExistsError):
        zk.create("/a")
    assert server.zxid == z0 + 4  # failed writes take a zxid
    zk.get("/a")
    zk.exists("/nope")
    assert server.zxid == z0 + 4  # reads do not
    zk.create("/a/e", ephemeral=True)
    root = zk.exists("/a")
    assert root is not None and root.numChildren == 1 and root.cversion == 1 and root.pzxid == server.zxid
    assert zk.exists("/a/e").ephemeralOwner == zk.client_id[0] == zk.session_id  # type: ignore[union-attr,index]
    assert server.ephemerals(zk.client_id[0]) == ["/a/e"]  # type: ignore[index]
    with pytest.raises(NoChildrenForEphemeralsError):
        zk.create("/a/e/x")
    with pytest.raises(NotEmptyError):
        zk.delete("/a")
    assert zk.delete("/a", recursive=True) is None  # kazoo's return value when it deleted something
    assert zk.exists("/a") is None
    server.check_invariants()


def test_sequence_suffix_counts_creates_not_deletes(zk: SimKazooClient) -> None:
    zk.create("/s")
    for i in range(3):
        zk.create(f"/s/n{i}")
        zk.delete(f"/s/n{i}")
    assert zk.exists("/s").cversion == 6  # type: ignore[union-attr]
    assert zk.create("/s/x-", sequence=True) == "/s/x-0000000003"
    assert zk.create("/s/", sequence=True) == "/s/0000000004"
    tx = zk.transaction()
    tx.create("/s/y-", sequence=True)
    tx.check("/s", 99)
    assert [type(r) for r in tx.commit()] == [RolledBackError, BadVersionError]
    assert zk.create("/s/z-", sequence=True) == "/s/z-0000000005"  # the rolled-back create left no trace


def test_multi_rollback_restores_everything(server: SimZooKeeper, zk: SimKazooClient) -> None:
    for i in range(6):
        zk.create(f"/c{i}", ephemeral=i % 2 == 0)
    before = server.snapshot()
    order = zk.get_children("/")
    eph = server.ephemerals(zk.session_id)  # type: ignore[arg-type]
    tx = zk.transaction()
    for i in range(6, 12):  # enough creates to resize the Java table of /'s children
        tx.create(f"/c{i}", ephemeral=True)
    tx.delete("/c0")
    tx.set_data("/c1", b"changed")
    tx.delete("/nope")
    tx.create("/never")
    zxid = server.zxid
    results = tx.commit()
    assert [type(r).__name__ for r in results] == ["RolledBackError"] * 8 + ["NoNodeError", "RuntimeInconsistency"]
    assert server.snapshot() == before and zk.get_children("/") == order and server.zxid == zxid + 1
    assert server.ephemerals(zk.session_id) == eph  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="already committed"):
        tx.commit()


def test_watches_queue_until_delivered_in_order(server: SimZooKeeper, zk: SimKazooClient) -> None:
    other = _started(server.client(name="other"))
    seen: list[tuple[str, str, str | None]] = []

    def w(tag: str) -> Callable[[WatchedEvent], None]:
        return lambda e: seen.append((tag, e.type, e.path))

    zk.exists("/x", watch=w("zk-exists"))
    other.exists("/x", watch=w("other-exists"))
    zk.get_children("/", watch=w("zk-children"))
    other.create("/x")
    assert seen == [] and len(server.pending) == 3
    assert server.deliver_watches(limit=1) == 1
    assert seen == [("zk-exists", EventType.CREATED, "/x")]
    other.create("/y")  # the children watch already fired: nothing more
    assert server.deliver_watches() == 2
    assert seen == [("zk-exists", EventType.CREATED, "/x"), ("other-exists", EventType.CREATED, "/x"),
                    ("zk-children", EventType.CHILD, "/")]
    assert server.deliver_watches() == 0 and server.watch_count() == 0


def test_auto_deliver_runs_callbacks_after_the_call_returns() -> None:
    server = SimZooKeeper(auto_deliver=True)
    zk = _started(server.client())
    seen: list[str] = []

    def watcher(e: WatchedEvent) -> None:
        seen.append(e.type)
        zk.exists("/x", watch=watcher)  # re-arm from inside the callback

    zk.exists("/x", watch=watcher)
    zk.create("/x")
    zk.set("/x", b"1")
    zk.delete("/x")
    assert seen == [EventType.CREATED, EventType.CHANGED, EventType.DELETED] and not server.pending


def test_lost_reply_create_then_retry_sees_node_exists(server: SimZooKeeper) -> None:
    states: list[str] = []
    zk = _started(server.client(command_retry={"max_tries": 3, "delay": 0.1}, fault_policy=fault_once("after", "create")))
    zk.add_listener(states.append)
    seen: list[WatchedEvent] = []
    zk.get_children("/", watch=seen.append)
    with pytest.raises(NodeExistsError):
        zk.retry(zk.create, "/controller", b"1", ephemeral=True)
    _data, stat = zk.get("/controller")
    assert stat.ephemeralOwner == zk.session_id  # it was ours all along
    assert states == [KazooState.SUSPENDED, KazooState.CONNECTED]
    server.deliver_watches()
    assert seen == [WatchedEvent(EventType.NONE, KeeperState.CONNECTING, None)]  # kazoo drops raw watches
    assert zk.slept_s == pytest.approx(0.1)


@pytest.mark.parametrize(("op", "expected"), [
    ("set", BadVersionError),
    ("delete", NoNodeError),
    ("create", NodeExistsError),
])
def test_lost_reply_then_retry(server: SimZooKeeper, op: str, expected: type[Exception]) -> None:
    zk = _started(server.client(command_retry={"max_tries": 3}))
    zk.create("/isr", b"v0")
    zk.fault_policy = fault_once("after", op)
    with pytest.raises(expected):
        if op == "set":
            zk.retry(zk.set, "/isr", b"v1", version=0)
        elif op == "delete":
            zk.retry(zk.delete, "/isr", version=0)
        else:
            zk.retry(zk.create, "/isr2", b"x")
    if op == "set":
        assert zk.get("/isr")[0] == b"v1"  # applied once


def test_lost_reply_sequential_create_duplicates(server: SimZooKeeper) -> None:
    zk = _started(server.client(command_retry={"max_tries": 3}, fault_policy=fault_once("after", "create", "/n/x-")))
    zk.create("/n")
    assert zk.retry(zk.create, "/n/x-", b"", sequence=True) == "/n/x-0000000001"
    assert sorted(zk.get_children("/n")) == ["x-0000000000", "x-0000000001"]


def test_lost_reply_transaction_retry_raises_already_committed(server: SimZooKeeper) -> None:
    zk = _started(server.client(command_retry={"max_tries": 3}, fault_policy=fault_once("after", "transaction")))
    tx = zk.transaction()
    tx.create("/t")
    with pytest.raises(ValueError, match="already committed"):
        zk.retry(tx.commit)  # kazoo marks it committed before sending: a retry cannot re-send it
    assert zk.exists("/t") is not None


def test_fault_before_applies_nothing_and_retry_succeeds(server: SimZooKeeper) -> None:
    zk = _started(server.client(command_retry={"max_tries": 2}, fault_policy=fault_once("before", "create")))
    z = server.zxid
    assert zk.retry(zk.create, "/x") == "/x"
    assert server.zxid == z + 1  # one create reached the server
    zk.fault_policy = random_faults(random.Random(1), p_before=1.0)
    with pytest.raises(RetryFailedError):
        zk.retry(zk.get, "/x")


def test_expire_fault_and_new_session(server: SimZooKeeper) -> None:
    states: list[str] = []
    zk = _started(server.client(command_retry={"max_tries": 3, "ignore_expire": False}))
    zk.add_listener(states.append)
    watcher = _started(server.client())
    seen: list[WatchedEvent] = []
    watcher.exists("/brokers-1", watch=seen.append)
    zk.create("/brokers-1", ephemeral=True)
    old = zk.session_id
    watcher.exists("/brokers-1", watch=seen.append)
    zk.fault_policy = fault_once("expire")
    with pytest.raises(ConnectionLoss):
        zk.get("/")
    assert states == [KazooState.SUSPENDED, KazooState.LOST] and zk.client_id is None
    assert not server.session_alive(old) and watcher.exists("/brokers-1") is None  # type: ignore[arg-type]
    with pytest.raises(SessionExpiredError):
        zk.retry(zk.get, "/")  # not retried with ignore_expire=False
    zk.restart_session()
    assert states[-1] == KazooState.CONNECTED and zk.session_id != old and zk.client_id is not None
    server.deliver_watches()
    assert [e.type for e in seen] == [EventType.CREATED, EventType.DELETED]


def test_expire_with_ignore_expire_exhausts_retries(server: SimZooKeeper) -> None:
    zk = _started(server.client(command_retry={"max_tries": 3}))
    server.expire_session(zk.session_id)  # type: ignore[arg-type]
    calls = []

    def get() -> Any:
        calls.append(1)
        return zk.get("/")

    with pytest.raises(RetryFailedError):
        zk.retry(get)
    assert len(calls) == 3


def test_auto_renew_session_lets_retry_carry_on_in_a_new_session(server: SimZooKeeper) -> None:
    zk = _started(server.client(command_retry={"max_tries": 3}, auto_renew_session=True,
                                fault_policy=fault_once("expire", "create")))
    states: list[str] = []
    zk.add_listener(states.append)
    old = zk.session_id
    assert zk.retry(zk.create, "/e", ephemeral=True) == "/e"  # kazoo's ignore_expire default at work
    assert states == [KazooState.SUSPENDED, KazooState.LOST, KazooState.CONNECTED]
    assert zk.exists("/e").ephemeralOwner == zk.session_id != old  # type: ignore[union-attr]


def test_disconnect_block_reconnect_and_timeout(server: SimZooKeeper) -> None:
    zk = _started(server.client(timeout=6.0))
    states: list[str] = []
    zk.add_listener(states.append)
    zk.create("/e", ephemeral=True)
    sid = zk.session_id
    server.disconnect(zk)
    assert states == [KazooState.SUSPENDED] and zk.client_id is None and zk.session_id == sid
    with pytest.raises(ConnectionLoss):
        zk.get("/e")
    zk.on_block = zk.reconnect  # the harness lets the world move on while kazoo would block
    assert zk.get("/e")[1].ephemeralOwner == sid
    assert states == [KazooState.SUSPENDED, KazooState.CONNECTED]
    zk.on_block = None
    server.disconnect(zk)
    assert server.advance(5999) == [] and server.session_alive(sid)  # type: ignore[arg-type]
    assert server.advance(1) == [sid] and server.node("/e") is None
    assert states[-1] == KazooState.SUSPENDED  # it cannot hear about the expiry while cut off
    zk.reconnect()
    assert states[-2:] == [KazooState.LOST, KazooState.CONNECTED] and zk.session_id != sid


def test_connected_session_does_not_time_out(server: SimZooKeeper, zk: SimKazooClient) -> None:
    server.advance(10**9)
    assert zk.connected and server.session_alive(zk.session_id)  # type: ignore[arg-type]


def test_stop_closes_session_and_calls_fail_closed(server: SimZooKeeper) -> None:
    zk = _started(server.client(command_retry={"max_tries": 5}))
    other = _started(server.client())
    zk.create("/e", ephemeral=True)
    states: list[str] = []
    zk.add_listener(states.append)
    zk.stop()
    assert states == [KazooState.LOST] and other.exists("/e") is None and zk.client_id is None
    calls = []

    def get() -> Any:
        calls.append(1)
        return zk.get("/")

    with pytest.raises(ConnectionClosedError):
        zk.retry(get)
    assert len(calls) == 1  # never retried
    zk.start()
    assert states == [KazooState.LOST, KazooState.CONNECTED] and zk.exists("/") is not None


def test_crash_leaves_session_until_timeout(server: SimZooKeeper) -> None:
    zk = _started(server.client(timeout=2.0))
    zk.create("/broker", ephemeral=True)
    sid = zk.session_id
    zk.crash()
    assert server.node("/broker") is not None
    server.advance(2000)
    assert server.node("/broker") is None and not server.session_alive(sid)  # type: ignore[arg-type]


def test_start_while_partitioned_times_out(server: SimZooKeeper) -> None:
    from kazoo.handlers.threading import KazooTimeoutError

    zk = server.client()
    server.disconnect(zk)
    with pytest.raises(KazooTimeoutError):
        zk.start()
    zk.reconnect()
    zk.start()
    assert zk.connected


def test_chroot_paths(server: SimZooKeeper) -> None:
    admin = _started(server.client())
    admin.ensure_path("/root/ns")
    zk = _started(server.client("h1:2181,h2:2181/root/ns"))
    seen: list[WatchedEvent] = []
    zk.exists("/a", watch=seen.append)
    assert zk.create("/a/", b"1") == "/a"
    assert zk.create("/a/b", b"", makepath=True) == "/a/b"
    assert zk.ensure_path("/x/y") == "/x/y" and zk.ensure_path("/x/y") is True
    tx = zk.transaction()
    tx.create("/q-", sequence=True)
    assert tx.commit() == ["/q-0000000002"]
    assert server.node("/root/ns/a/b") is not None
    server.deliver_watches()
    assert seen == [WatchedEvent(EventType.CREATED, KeeperState.CONNECTED, "/a")]


def test_data_and_children_watch_recipes_survive_session_loss(server: SimZooKeeper) -> None:
    zk = _started(server.client(command_retry={"max_tries": 3}))
    writer = _started(server.client())
    zk.ensure_path("/ids")
    children_calls: list[list[str]] = []
    data_calls: list[tuple[bytes | None, int | None]] = []
    zk.ChildrenWatch("/ids", lambda c: children_calls.append(sorted(c)))
    zk.DataWatch("/controller", lambda d, s: data_calls.append((d, s.version if s else None)))
    assert children_calls == [[]] and data_calls == [(None, None)]
    writer.create("/ids/1")
    writer.create("/controller", b"1")
    server.deliver_watches()
    assert children_calls == [[], ["1"]] and data_calls == [(None, None), (b"1", 0)]
    server.expire_session(zk.session_id)  # type: ignore[arg-type]
    writer.create("/ids/2")
    zk.restart_session()  # CONNECTED: both recipes re-read (spawned, so delivered later)
    server.deliver_watches()
    assert children_calls[-1] == ["1", "2"] and data_calls[-1] == (b"1", 0) and len(data_calls) == 2
    server.disconnect(zk)
    server.reconnect(zk)  # nothing changed: no calls
    server.deliver_watches()
    assert len(children_calls) == 3 and len(data_calls) == 2
    writer.set("/controller", b"2")
    server.deliver_watches()
    assert data_calls[-1] == (b"2", 1)


def test_children_watch_retry_failure_is_recorded_not_raised(server: SimZooKeeper) -> None:
    """kazoo's ChildrenWatch re-reads through client.retry: when that fails, the error goes to the
    callback thread (here: server.callback_errors) and the watch is re-armed by the next CONNECTED."""
    zk = _started(server.client(command_retry={"max_tries": 2}))
    zk.create("/ids")
    calls: list[list[str]] = []
    zk.ChildrenWatch("/ids", calls.append)
    writer = _started(server.client())
    writer.create("/ids/1")
    failures = 2

    def policy(op: str, path: str) -> Any:
        nonlocal failures
        if op == "get_children" and failures:
            failures -= 1
            return "before"
        return None

    zk.fault_policy = policy
    server.deliver_watches()
    assert [type(e) for _c, e in server.callback_errors] == [RetryFailedError]
    assert calls[0] == [] and calls[-1] == ["1"]  # recovered through the flaps' CONNECTED


def test_random_faults_are_deterministic_and_keep_invariants() -> None:
    def world(seed: int) -> list[Any]:
        rng = random.Random(seed)
        server = SimZooKeeper(auto_deliver=True)
        out: list[Any] = []
        clients = [_started(server.client(name=f"c{i}", command_retry={"max_tries": 4},
                                          fault_policy=random_faults(random.Random(seed * 10 + i), 0.1, 0.1, 0.02),
                                          auto_renew_session=True, retry_rng=random.Random(i)))
                   for i in range(3)]
        for c in clients:
            c.ChildrenWatch("/", lambda ch, c=c: out.append((c.name, sorted(ch))))
        for _ in range(300):
            c = rng.choice(clients)
            path = rng.choice(["/a", "/a/b", "/c", "/c/d-", "/e"])
            try:
                k = rng.randrange(4)
                if k == 0:
                    r: Any = c.retry(c.create, path, b"v", ephemeral=rng.random() < 0.3,
                                     sequence=path.endswith("-"), makepath=True)
                elif k == 1:
                    r = c.retry(c.set, path, b"w", version=rng.choice([-1, 0, 1]))
                elif k == 2:
                    r = c.retry(c.delete, path, recursive=rng.random() < 0.5)
                else:
                    r = c.retry(c.get, path)
            except KazooException as e:
                r = type(e).__name__
            out.append((c.name, path, r, server.zxid))
            server.check_invariants()
        return out

    assert world(3) == world(3)
    assert world(3) != world(4)


# ============================================================================ SimRetry vs KazooRetry


class _Scripted:
    def __init__(self, script: list[type[Exception] | None]) -> None:
        self.script = list(script)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        exc = self.script.pop(0) if self.script else None
        if exc is not None:
            raise exc()
        return "ok"


retry_exc_st = st.sampled_from([None, ConnectionLoss, OperationTimeoutError, ForceRetryError, SessionExpiredError,
                                ConnectionClosedError, NoNodeError])


@settings(max_examples=200, deadline=None, derandomize=True)
@given(script=st.lists(retry_exc_st, max_size=8), max_tries=st.sampled_from([None, -1, 0, 1, 2, 3, 5]),
       ignore_expire=st.booleans())
def test_sim_retry_matches_kazoo_retry(script: list[type[Exception] | None], max_tries: int | None,
                                       ignore_expire: bool) -> None:
    def outcome(retry: Callable[..., Any]) -> tuple[str, int]:
        fn = _Scripted(script)
        try:
            result = retry(fn)
        except Exception as e:
            result = type(e).__name__
        return result, fn.calls

    kazoo_retry = KazooRetry(max_tries=max_tries, ignore_expire=ignore_expire, sleep_func=lambda _s: None)
    sim_retry = SimRetry(max_tries=max_tries, ignore_expire=ignore_expire)
    assert outcome(kazoo_retry.copy()) == outcome(sim_retry.copy())
    assert outcome(SimRetry.from_kazoo(kazoo_retry)) == outcome(kazoo_retry)


def test_sim_retry_backoff_is_virtual_and_livelock_is_caught(server: SimZooKeeper) -> None:
    slept: list[float] = []
    zk = _started(server.client(command_retry={"max_tries": 4, "delay": 0.1, "max_delay": 0.3},
                                on_retry_sleep=slept.append,
                                fault_policy=random_faults(random.Random(0), p_before=1.0)))
    with pytest.raises(RetryFailedError):
        zk.retry(zk.get, "/")
    assert slept == pytest.approx([0.1, 0.2, 0.3])
    forever = _started(server.client())  # KazooClient's default retry: unbounded
    server.disconnect(forever)
    with pytest.raises(SimLivelockError):
        forever.retry(forever.get, "/")
