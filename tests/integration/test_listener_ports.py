"""The ports the local cluster and the test fixtures give listeners (brokers, ZooKeeper) come from
outside the kernel's ephemeral range, so an outgoing connection cannot take one between the pick and
the bind (a CI run lost a test to a broker's "Failed to bind")."""

from __future__ import annotations

import socket

import pytest

from client.ops.local_cluster import ephemeral_port_range, free_ports, listener_port_range

pytestmark = pytest.mark.integration


def test_free_ports_are_distinct_bindable_and_not_ephemeral() -> None:
    ephemeral = ephemeral_port_range()
    low, high = listener_port_range(ephemeral)
    ports = free_ports(64)
    assert len(set(ports)) == 64
    for port in ports:
        assert low <= port <= high
        if low < ephemeral[0] or high > ephemeral[1]:
            assert not ephemeral[0] <= port <= ephemeral[1]
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free: nothing kept it
