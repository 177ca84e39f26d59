"""The ZooKeeper fault proxy itself: its jute framing parser (pure, on frames made by kazoo's own
serializers) and, against the real ZooKeeper, that a dropped reply is a write applied whose
client saw ConnectionLoss."""

from __future__ import annotations

import struct
import threading

import pytest
from helpers import TEST_ZK_DIGEST, wait_for
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NodeExistsError
from kazoo.protocol.serialization import (
    CheckVersion,
    Create,
    Create2,
    Delete,
    GetData,
    MultiHeader,
    SetData,
    Transaction,
)
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl
from zk_proxy import (
    OP_CHECK,
    OP_CREATE,
    OP_CREATE2,
    OP_DELETE,
    OP_ERROR,
    OP_GET_DATA,
    OP_MULTI,
    OP_SET_DATA,
    DropRule,
    FrameError,
    Op,
    Reply,
    Request,
    ZkFaultProxy,
    parse_reply,
    parse_request,
)

STAT = struct.pack("!qqqqiiiqiiq", 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)


def _request(xid: int, op: object) -> bytes:
    return struct.pack("!ii", xid, op.type) + bytes(op.serialize())  # type: ignore[attr-defined]


def test_parse_requests_made_by_kazoo() -> None:
    acl = [make_digest_acl("u", "p", all=True), *OPEN_ACL_UNSAFE]
    assert parse_request(_request(7, Create("/t/controller", b"{}", acl, 1))) == \
        Request(7, OP_CREATE, (Op(OP_CREATE, "/t/controller"),))
    assert parse_request(_request(8, Create2("/a", b"", acl, 0))).paths == ("/a",)
    assert parse_request(_request(9, Delete("/x/y", 3))) == Request(9, OP_DELETE, (Op(OP_DELETE, "/x/y"),))
    r = parse_request(_request(10, SetData("/c/brokers/topics/t/partitions/0/state", b"{\"a\":1}", 4)))
    assert (r.xid, r.opcode, r.paths) == (10, OP_SET_DATA, ("/c/brokers/topics/t/partitions/0/state",))
    assert parse_request(_request(11, GetData("/g", False))).ops == (Op(OP_GET_DATA, "/g"),)
    assert parse_request(struct.pack("!ii", -2, 11)) == Request(-2, 11, (Op(11, None),))  # a ping
    multi = Transaction([CheckVersion("/c/controller_epoch", 3), SetData("/c/s", b"x" * 300, 2),
                         Create("/c/new", b"d", acl, 0), Delete("/c/old", -1)])
    m = parse_request(_request(12, multi))
    assert m.opcode == OP_MULTI and m.xid == 12
    assert m.ops == (Op(OP_CHECK, "/c/controller_epoch"), Op(OP_SET_DATA, "/c/s"), Op(OP_CREATE, "/c/new"),
                     Op(OP_DELETE, "/c/old"))
    assert parse_request(_request(13, Create("/u/\u00e9", None, acl, 0))).paths == ("/u/\u00e9",)


def test_parse_rejects_truncated_frames() -> None:
    whole = _request(7, SetData("/a/b", b"data", 1))
    with pytest.raises(FrameError):
        parse_request(whole[:5])
    with pytest.raises(FrameError):
        parse_request(struct.pack("!ii", 7, OP_SET_DATA) + struct.pack("!i", 50) + b"/short")
    multi = _request(3, Transaction([CheckVersion("/e", 1)]))
    with pytest.raises(FrameError):
        parse_request(multi[:-9])  # no end header
    with pytest.raises(FrameError):
        parse_reply(b"\x00\x00")


def test_parse_replies_and_multi_results() -> None:
    header = struct.pack("!iqi", 5, 0x1234, 0)
    assert parse_reply(header + STAT, OP_SET_DATA) == Reply(5, 0x1234, 0)
    bad_version = parse_reply(struct.pack("!iqi", 6, 0x99, -103), OP_SET_DATA)
    assert not bad_version.ok and bad_version.err == -103

    def hdr(t: int, done: bool = False, err: int = 0) -> bytes:
        return bytes(MultiHeader(t, done, err).serialize())

    def s(text: str) -> bytes:
        return struct.pack("!i", len(text)) + text.encode()

    ok = header + hdr(OP_CHECK) + hdr(OP_SET_DATA) + STAT + hdr(OP_CREATE) + s("/c/new") + hdr(OP_CREATE2) \
        + s("/c/n2") + STAT + hdr(OP_DELETE) + hdr(-1, True, -1)
    r = parse_reply(ok, OP_MULTI)
    assert r.ok and r.multi_results == (OP_CHECK, OP_SET_DATA, OP_CREATE, OP_CREATE2, OP_DELETE)
    failed = header + hdr(OP_ERROR, err=-103) + struct.pack("!i", -103) + hdr(OP_ERROR, err=-2) \
        + struct.pack("!i", -2) + hdr(-1, True, -1)
    r = parse_reply(failed, OP_MULTI)
    assert not r.ok and r.multi_results == (OP_ERROR, OP_ERROR)


def test_rule_matching() -> None:
    import re

    ok = Reply(1, 1, 0)
    state = Request(1, OP_SET_DATA, (Op(OP_SET_DATA, "/c/brokers/topics/t/partitions/0/state"),))
    rule = DropRule(frozenset({OP_SET_DATA}), re.compile(r"/partitions/0/state$"))
    assert rule.matches(state, ok)
    assert not rule.matches(state, Reply(1, 1, -103))  # only replies of writes that were applied
    assert not rule.matches(Request(1, OP_SET_DATA, (Op(OP_SET_DATA, "/c/brokers/topics/t/partitions/10/state"),)),
                            ok)
    multi = Request(2, OP_MULTI, (Op(OP_CHECK, "/c/controller_epoch"),
                                  Op(OP_SET_DATA, "/c/brokers/topics/t/partitions/0/state")))
    assert not rule.matches(multi, ok)
    assert DropRule(frozenset({OP_SET_DATA}), re.compile("/0/state$"), also_in_multi=True).matches(multi, ok)
    assert DropRule(frozenset({OP_MULTI}), re.compile("/controller_epoch$")).matches(multi, ok)
    assert not DropRule(frozenset({OP_MULTI}), None).matches(multi, Reply(2, 1, 0, (OP_ERROR,)))
    create = Request(3, OP_CREATE2, (Op(OP_CREATE2, "/c/controller"),))
    assert DropRule(frozenset({OP_CREATE, OP_CREATE2}), re.compile("^/c/controller$")).matches(create, ok)
    assert not DropRule(frozenset({OP_CREATE, OP_CREATE2}), re.compile("^/c/controller$")).matches(
        Request(3, OP_CREATE, (Op(OP_CREATE, "/c/controller_epoch"),)), ok)


@pytest.mark.integration
def test_a_dropped_reply_is_an_applied_write_the_client_saw_fail(zookeeper, zk_connect: str) -> None:  # type: ignore[no-untyped-def]
    chroot = zk_connect[len(zookeeper.connect):]
    direct = KazooClient(hosts=zk_connect, timeout=10, auth_data=[("digest", ":".join(TEST_ZK_DIGEST))])
    direct.start(timeout=10)
    with ZkFaultProxy(zookeeper.connect) as proxy:
        client = KazooClient(hosts=proxy.connect(chroot), timeout=4,
                             connection_retry={"max_tries": -1, "delay": 0.05, "max_delay": 0.5})
        client.start(timeout=10)
        try:
            rule = proxy.drop_reply("create", r"/lost$")
            with pytest.raises(ConnectionLoss):
                client.create("/lost", b"applied")
            assert rule.done.is_set() and rule.dropped[0].request.paths == (chroot + "/lost",)
            assert direct.get("/lost")[0] == b"applied"  # the server applied it
            # kazoo's retry now sees its own write as a conflict: what the code under test must handle.
            with pytest.raises(NodeExistsError):
                client.retry(client.create, "/lost", b"applied")

            client.create("/v", b"0")
            rule = proxy.drop_reply("setData", r"/v$")
            with pytest.raises(ConnectionLoss):
                client.set("/v", b"1", version=0)
            assert direct.get("/v")[1].version == 1

            tx_rule = proxy.drop_reply("multi", r"/v$")
            tx = client.transaction()
            tx.check("/v", 1)
            tx.set_data("/v", b"2", 1)
            with pytest.raises(ConnectionLoss):
                tx.commit()
            assert tx_rule.dropped and direct.get("/v")[0] == b"2"

            # A failed write's reply is passed on: only_ok.
            proxy.drop_reply("setData", r"/v$")
            from kazoo.exceptions import BadVersionError
            with pytest.raises(BadVersionError):
                client.retry(client.set, "/v", b"3", version=0)

            # Reset all and delay: the session survives both.
            session = client.client_id
            assert proxy.reset_all() >= 1
            wait_for(lambda: client.connected and client.exists("/v") is not None, timeout_s=10)
            proxy.set_delay(0.3)
            timer = threading.Event()
            client.get_async("/v").rawlink(lambda _r: timer.set())
            assert not timer.wait(0.15) and timer.wait(5)
            proxy.set_delay(0)
            assert client.client_id == session
            assert not proxy.errors, proxy.errors
        finally:
            client.stop()
            client.close()
            direct.stop()
            direct.close()


def test_state_recorder_flags_zombie_writes() -> None:
    """The zombie-controller check of the scenarios, on a made-up history."""
    from zk_chaos import StateRecorder, Version

    rec = StateRecorder(None)  # type: ignore[arg-type]  # never started: no ZooKeeper needed
    rec.epochs = [(1, 0x10, 0.0), (2, 0x50, 0.0)]

    def v(version: int, zxid: int, leader_epoch: int, controller_epoch: int, isr: tuple[int, ...] = (1,)) -> Version:
        return Version(version, zxid, 1, leader_epoch, isr, controller_epoch, 0.0)

    rec.history = {
        "/ok": [v(0, 0x20, 0, 1), v(1, 0x30, 1, 1), v(2, 0x60, 2, 2), v(3, 0x70, 2, 2, (1, 2))],
        # A leader's own ISR write keeps the controller epoch it was given: not a zombie.
        "/leader-isr-write": [v(0, 0x20, 0, 1), v(1, 0x60, 0, 1, (1, 2))],
        # A controller write (new leader epoch) with epoch 1 after /controller_epoch reached 2.
        "/zombie": [v(0, 0x20, 0, 1), v(1, 0x60, 1, 1)],
        "/went-down": [v(0, 0x20, 0, 1), v(1, 0x60, 1, 2), v(2, 0x61, 1, 1, (1, 3))],
    }
    found = rec.violations()
    assert [f.split(":")[0] for f in found] == ["/went-down", "/zombie"], found
    rec.history = {"/gap": [v(0, 0x20, 0, 1), v(4, 0x60, 2, 2)]}
    assert rec.missed_versions() == 3 and not rec.violations()
