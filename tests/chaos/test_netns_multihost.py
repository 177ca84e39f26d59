"""Brokers on hosts of their own (issue 32): each broker in a network namespace with its own
address on a test-made bridge, listeners bound on 0.0.0.0 and advertised by address, clients and
ZooKeeper in another namespace; the chaos checker runs across them (``netns_multihost.py`` is the
part inside the namespaces). Skipped, with the reason, where ``ip netns`` is unavailable."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
PREFIX = "10.233.0"  # private to these namespaces (the partition scenario uses 10.231.0)
CLIENT_HOST = 100


def netns_unavailable() -> str | None:
    """Why network namespaces cannot be made here (None when they can)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("ip") is None:
        return "the ip tool (iproute2) is not installed"
    probe = f"mkhprobe{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"`ip netns add` does not work here: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def test_brokers_on_separate_hosts_advertise_their_addresses_and_lose_nothing(tmp_path: Path) -> None:
    reason = netns_unavailable()
    if reason:
        pytest.skip(reason)
    tag = f"mkh{os.getpid() % 100_000}"
    hub, client, brokers = f"{tag}-hub", f"{tag}-cl", [f"{tag}-b{i}" for i in (1, 2, 3)]
    hosts = {client: CLIENT_HOST, **{n: i for i, n in enumerate(brokers, start=1)}}

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)

    seen: dict[str, object] = {}
    try:
        for n in (hub, *hosts):
            ip("netns", "add", n)
            ip("-n", n, "link", "set", "lo", "up")
        ip("-n", hub, "link", "add", "br0", "type", "bridge")
        ip("-n", hub, "link", "set", "br0", "up")
        for n, host in hosts.items():
            ip("-n", hub, "link", "add", f"vh{host}", "type", "veth", "peer", "name", "eth0", "netns", n)
            ip("-n", hub, "link", "set", f"vh{host}", "master", "br0", "up")
            ip("-n", n, "addr", "add", f"{PREFIX}.{host}/24", "dev", "eth0")
            ip("-n", n, "link", "set", "eth0", "up")
        driver = Path(__file__).with_name("netns_multihost.py")
        r = subprocess.run(["ip", "netns", "exec", client, sys.executable, str(driver), "--prefix", PREFIX,
                            "--netns-prefix", tag, "--dir", str(tmp_path)],
                           capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        seen = json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        for n in (*hosts, hub):
            pids = subprocess.run(["ip", "netns", "pids", n], capture_output=True, text=True).stdout.split()
            for pid in pids:  # only if the driver died before stopping its cluster
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
    print("multi-host:", seen)
    # Bound everywhere, advertised by each broker's own address only (never 0.0.0.0 or loopback).
    assert seen["binds"] and all("//0.0.0.0:" in b and PREFIX not in b for b in seen["binds"]), seen["binds"]  # type: ignore[union-attr]
    assert seen["advertised"] == {str(i): [f"{PREFIX}.{i}"] for i in (1, 2, 3)}, seen["advertised"]
    assert seen["valid"] and seen["writes_ok"] > 100 and seen["lost"] == seen["duplicates"] == 0, seen["summary"]  # type: ignore[operator]
    assert seen["replicas_identical"] and seen["led"], seen
    assert seen["kafka_read_back"] == 20, "librdkafka must reach every broker by its advertised Kafka listener"
