"""Many znodes in one multiRead request (zk/multi_read.py; issue 29: a controller failover reads
10,000 partition states) answer exactly as reads one znode per request, against Debian's real
ZooKeeper: data, versions, missing znodes, empty data, chunking."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers import TEST_ZK_DIGEST

from zk import client as zk_client
from zk.client import KafkaZkClient


@pytest.fixture
def gateway(zk_connect: str) -> Iterator[KafkaZkClient]:
    gw = KafkaZkClient(zk_connect, 10_000, digest=TEST_ZK_DIGEST)
    gw.start()
    yield gw
    gw.stop()


def test_multi_read_answers_as_one_read_per_znode(gateway: KafkaZkClient, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = []
    for i in range(60):
        path = f"/brokers/topics/multi/partitions/{i}/state"
        gateway.zk.create(path, (b"x" * (i * 37)) if i % 10 else b"", makepath=True)
        for _ in range(i % 3):
            gateway.zk.set(path, b"v%d" % i)  # versions 0, 1, 2
        paths.append(path)
    paths += [f"/brokers/topics/multi/partitions/{i}/state" for i in range(60, 65)]  # absent
    paths.insert(10, "/brokers/topics/nothing-here/partitions/0/state")
    expected = {p: gateway._read(p) for p in paths}

    reads: list[str] = []
    real_read = gateway._read
    monkeypatch.setattr(gateway, "_read", lambda p: reads.append(p) or real_read(p))
    got = gateway._get_many(paths)
    assert got == expected and list(got) == paths
    assert reads == [] and gateway._multi_read, "not answered by multiRead"

    monkeypatch.setattr(zk_client, "MULTI_READ_PATHS", 7)  # several requests, all out at once
    assert gateway._get_many(paths) == expected
