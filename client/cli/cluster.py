"""``minikafka cluster up | status | down | kill | start``: the local cluster from the command line.

The launcher itself is :mod:`client.ops.local_cluster`; this module only parses flags and prints.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from client.discovery import BOOTSTRAP_ENV, KAFKA_BOOTSTRAP_ENV, ZOOKEEPER_ENV, local_cluster_dir
from client.ops.certs import CA_CERT
from client.ops.local_cluster import SIGNALS, ZK_DIGEST_FILE, ClusterError, LocalCluster

ZK_PREFIX = "zk-"


def add_parser(sub: Any) -> None:
    p = sub.add_parser("cluster", help="run a local ZooKeeper + brokers in the background")
    csub = p.add_subparsers(dest="cluster_command", metavar="SUBCOMMAND")
    csub.required = True

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--dir", type=Path, default=local_cluster_dir(), help="cluster directory (.minikafka)")

    up = csub.add_parser("up", help="start ZooKeeper and N brokers, wait for a controller")
    common(up)
    up.add_argument("--brokers", type=int, default=3, help="how many brokers (default 3)")
    up.add_argument("--zookeeper", default=None, metavar="HOST:PORT", help="use a running ZooKeeper")
    up.add_argument("--zookeepers", type=int, default=1, metavar="N",
                    help="run a ZooKeeper ensemble of N servers (3 or 5, as production Kafka does; "
                         "default 1, a single server)")
    up.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="broker config override")
    up.add_argument("--random-ports", action="store_true",
                    help="free ports instead of the fixed ones (ZooKeeper 2181, brokers' Kafka protocol 9092.., "
                         "gRPC clients 9392.., inter-broker 9192.., metrics 9292..), which are used when free")
    up.add_argument("--secure", action="store_true",
                    help="clients on TLS + SCRAM (SASL_SSL) with ACLs on and an admin super user")
    up.set_defaults(func=_cmd_up)

    st = csub.add_parser("status", help="brokers, pids, liveness, controller")
    common(st)
    st.add_argument("--output", choices=["table", "json"], default="table", help="table (default) or json")
    st.set_defaults(func=_cmd_status)

    down = csub.add_parser("down", help="stop every broker (controlled) and ZooKeeper")
    common(down)
    down.add_argument("--purge", action="store_true", help="also delete the cluster directory")
    down.set_defaults(func=_cmd_down)

    kill = csub.add_parser("kill", help="send a signal to one broker, or to one ZooKeeper server (zk-N)")
    common(kill)
    kill.add_argument("id", type=target, metavar="ID|zk-N", help="broker id, or zk-N for ZooKeeper server N")
    kill.add_argument("--signal", default="KILL", choices=sorted(SIGNALS),
                      help="KILL (default: a crash), TERM (controlled shutdown), STOP (pause) or CONT (resume)")
    kill.set_defaults(func=_cmd_kill)

    start = csub.add_parser("start", help="start one (stopped) broker, or ZooKeeper server (zk-N), again")
    common(start)
    start.add_argument("id", type=target, metavar="ID|zk-N", help="broker id, or zk-N for ZooKeeper server N")
    start.set_defaults(func=_cmd_start)


def target(value: str) -> tuple[str, int]:
    """``3`` -> ("broker", 3); ``zk-2`` -> ("zookeeper", 2) (an argparse type)."""
    kind, number = ("zookeeper", value[len(ZK_PREFIX):]) if value.lower().startswith(ZK_PREFIX) else ("broker", value)
    if not number.isdigit() or int(number) < 1:
        raise argparse.ArgumentTypeError(f"expected a broker id or zk-N (a ZooKeeper server), got {value!r}")
    return kind, int(number)


def export_line(bootstrap: str, zookeeper: str, kafka_bootstrap: str = "") -> str:
    """The shell line that points clients elsewhere at this cluster; with the Kafka protocol
    listeners as MINIKAFKA_KAFKA_BOOTSTRAP, which the README's librdkafka/kafka-python snippets read."""
    kafka = f" {KAFKA_BOOTSTRAP_ENV}={kafka_bootstrap}" if kafka_bootstrap else ""
    return f"export {BOOTSTRAP_ENV}={bootstrap} {ZOOKEEPER_ENV}={zookeeper}{kafka}"


def _run(fn: Any) -> int:
    try:
        fn()
    except ClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def _cmd_up(args: argparse.Namespace) -> int:
    if args.brokers < 1:
        print("error: --brokers must be at least 1", file=sys.stderr)
        return 1
    overrides = {}
    for item in args.set:
        k, sep, v = item.partition("=")
        if not sep:
            print(f"error: --set expects KEY=VALUE, got {item!r}", file=sys.stderr)
            return 1
        overrides[k] = v

    def go() -> None:
        cluster = LocalCluster(args.dir, zookeeper=args.zookeeper, broker_overrides=overrides,
                               fixed_ports=not args.random_ports)
        state = cluster.up(args.brokers, secure=args.secure, zookeepers=args.zookeepers)
        for notice in cluster.notices:
            print(f"notice: {notice}", file=sys.stderr)
        view = cluster.zk_view()
        print(f"ZooKeeper: {state.zookeeper_connect}")
        for z in cluster.zookeeper_modes():
            print(f"  {z['name']}: {z['address']} (pid {z['pid']}, {z['mode']})")
        for _, b in sorted(state.brokers.items()):
            print(f"broker {b.broker_id}: {b.address} (pid {b.pid}, metrics {b.metrics_address}, log {b.log})")
        print(f"controller: broker {view['controller']} (controller epoch {view['controller_epoch']})")
        print(f"bootstrap servers: {state.bootstrap_servers}")
        if state.kafka_bootstrap_servers:
            print(f"Kafka protocol bootstrap servers (librdkafka, kafka-python, kcat): {state.kafka_bootstrap_servers}")
        print(export_line(state.bootstrap_servers, state.zookeeper_connect, state.kafka_bootstrap_servers))
        print(f"inter-broker plane: mutual TLS (CA {state.secrets / CA_CERT}); ZooKeeper writes need the "
              f"digest in {state.secrets / ZK_DIGEST_FILE}")
        if state.secure:
            print(f"clients: SASL_SSL (SCRAM-SHA-256), ACLs on; the admin super user's settings are in "
                  f"{state.client_properties}")
            print(f"  minikafka topics --list --bootstrap-server {state.bootstrap_servers} "
                  f"--command-config {state.client_properties}")

    return _run(go)


def _cmd_status(args: argparse.Namespace) -> int:
    seen: list[dict[str, Any]] = []

    def go() -> None:
        s = LocalCluster(args.dir).status()
        seen.append(s)
        if args.output == "json":
            print(json.dumps(s, indent=2))
            return
        print(f"ZooKeeper {s['zookeeper']['connect']} ({'up' if s['zookeeper']['alive'] else 'DOWN'}), "
              f"controller: {s['controller']}, controller epoch: {s['controller_epoch']}")
        for z in s["zookeeper"].get("servers", []):  # an ensemble: each server's mode, from `srvr`
            alive = "paused" if z["paused"] else str(z["alive"]).lower()
            print(f"{z['name']:>5}  {z['address']:<22} {z['pid']:>8}  {alive:<6} {z['mode']}")
        print(f"{'ID':>3}  {'ADDRESS':<22} {'PID':>8}  {'ALIVE':<6} {'REGISTERED':<10} ROLE")
        for b in s["brokers"]:
            role = "controller" if b["id"] == s["controller"] else ""
            alive = "paused" if b["paused"] else str(b["alive"]).lower()  # SIGSTOPped: alive, answering nothing
            print(f"{b['id']:>3}  {b['address']:<22} {b['pid']:>8}  {alive:<6} "
                  f"{str(b['registered']).lower():<10} {role}")
        if s["kafka_bootstrap_servers"]:
            print(f"Kafka protocol bootstrap servers: {s['kafka_bootstrap_servers']}")
        # For clients in other shells and directories (the library, the CLI and Spark honour them).
        print(export_line(s["bootstrap_servers"], s["zookeeper"]["connect"], s["kafka_bootstrap_servers"]))

    rc = _run(go)
    if rc == 0 and seen and not cluster_running(seen[0]):
        print("error: the cluster is not running (ZooKeeper down, no broker alive): minikafka cluster up",
              file=sys.stderr)
        return 1
    return rc


def cluster_running(status: dict[str, Any]) -> bool:
    """Anything of the cluster up: ZooKeeper or a broker (a status of nothing alive exits 1)."""
    return bool(status["zookeeper"]["alive"]) or any(b["alive"] for b in status["brokers"]) \
        or any(z["alive"] for z in status["zookeeper"].get("servers", []))


def _cmd_down(args: argparse.Namespace) -> int:
    def go() -> None:
        cluster = LocalCluster(args.dir)
        was_running = cluster_running(cluster.status())
        cluster.down()
        if args.purge:
            shutil.rmtree(args.dir, ignore_errors=True)
        print("cluster stopped" if was_running else "the cluster was not running" + (" (purged)" if args.purge else ""))

    return _run(go)


def _cmd_kill(args: argparse.Namespace) -> int:
    kind, n = args.id

    def go() -> None:
        if kind == "zookeeper":
            LocalCluster(args.dir).signal_zookeeper(n, args.signal)
            print(f"sent SIG{args.signal} to ZooKeeper server zk-{n}")
            return
        LocalCluster(args.dir).signal(n, args.signal)
        print(f"sent SIG{args.signal} to broker {n}")

    return _run(go)


def _cmd_start(args: argparse.Namespace) -> int:
    kind, n = args.id

    def go() -> None:
        c = LocalCluster(args.dir)
        if kind == "zookeeper":
            c.start_zookeeper(n)
            modes = {z["id"]: z["mode"] for z in c.zookeeper_modes()}
            print(f"ZooKeeper server zk-{n} started" + (f" ({modes[n]})" if n in modes else ""))
            return
        c.start(n)
        c.wait_registered({n}, 60)
        print(f"broker {n} started and registered")

    return _run(go)
