"""``minikafka top``: a live view of replication, like the pictures in the design documents.

Every refresh asks each broker for its replicas (DescribeReplicas: LEO, HW,
leader epoch, the leader's view of its followers, recent events) and the
cluster for its metadata, then draws per topic-partition each replica's LEO
and HW as bars against the leader's LEO, ISR membership, the leader and its
epoch, under-replicated / offline flags, consumer-group lag (when ZooKeeper is
known) and the latest cluster events. ``--once --output json`` prints one
snapshot for scripts. Only public RPCs are used.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import grpc

from client.admin import AdminClient
from client.cli.tool_args import refuse_zookeeper
from client.connection import ClusterView
from client.discovery import local_cluster_dir
from client.ops.local_cluster import ClusterError, ClusterState, local_client_security
from proto import errors
from proto import minikafka_pb2 as pb
from proto.transport import PLAINTEXT_SECURITY

BAR = 28


def add_parser(sub: Any) -> None:
    p = sub.add_parser("top", help="live view of partitions, replicas' LEO/HW, ISR, lag and events")
    p.add_argument("--bootstrap-server", default=None, help="host:port[,host:port] (default: the local cluster)")
    p.add_argument("--zookeeper", default=None, help=argparse.SUPPRESS)  # refused: groups come from the brokers
    p.add_argument("--dir", type=Path, default=local_cluster_dir(), help="local cluster directory (default .minikafka)")
    p.add_argument("--topic", action="append", default=[], help="only these topics (repeatable)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes")
    p.add_argument("--events", type=int, default=8, help="recent events to show")
    p.add_argument("--once", action="store_true", help="print one snapshot and exit")
    p.add_argument("--output", choices=["table", "json"], default="table", help="table (default) or json")
    p.set_defaults(func=run)


def snapshot(view: ClusterView, topics: list[str], max_events: int, with_groups: bool = True,
             seen: dict[int, str] | None = None) -> dict[str, Any]:
    """One view of the cluster. ``seen`` (kept by the caller across refreshes): every broker shown
    before, so that a dead one stays in the header as DOWN after its registration expires (issue 33);
    brokers named in replica lists count too."""
    md = view.refresh(topics or None)
    registered = {b.broker_id: f"{b.host}:{b.port}" for b in md.brokers}
    remembered = seen if seen is not None else {}
    remembered.update(registered)
    for topic in md.topics:
        for part in topic.partitions:
            for r in part.replicas:
                remembered.setdefault(r, "?")
    brokers = dict(remembered)
    states: dict[tuple[str, int], dict[int, pb.ReplicaState]] = {}
    events: list[dict[str, Any]] = []
    alive: dict[int, bool] = {}
    for bid, address in sorted(brokers.items()):
        if bid not in registered:
            alive[bid] = False  # not registered (dead, or its session expired): nothing to ask
            continue
        try:
            resp = view.connection(address).api.DescribeReplicas(
                pb.DescribeReplicasRequest(topics=topics, max_events=max_events), timeout=2)
        except grpc.RpcError:
            alive[bid] = False
            continue
        alive[bid] = True
        for r in resp.replicas:
            states.setdefault((r.topic, r.partition), {})[bid] = r
        # --topic: that topic's events (and the cluster's own, which name no topic) only.
        events += [{"ts": e.timestamp_ms, "broker": e.broker_id, "kind": e.kind, "topic": e.topic,
                    "partition": e.partition, "detail": e.detail} for e in resp.events
                   if not topics or not e.topic or e.topic in topics]
    partitions = []
    for t in sorted(md.topics, key=lambda t: t.name):
        if topics and t.name not in topics:
            continue
        for p in sorted(t.partitions, key=lambda p: p.partition):
            per = states.get((t.name, p.partition), {})
            leader_state = per.get(p.leader)
            leader_leo = leader_state.log_end_offset if leader_state else -1
            known = {f.broker_id: f.log_end_offset for f in leader_state.followers} if leader_state else {}
            replicas = []
            for r in p.replicas:
                st = per.get(r)
                replicas.append({
                    "broker": r, "alive": alive.get(r, False) and st is not None, "in_isr": r in p.isr,
                    "leo": st.log_end_offset if st else -1, "hw": st.high_watermark if st else -1,
                    "leader_view_leo": known.get(r, leader_leo if r == p.leader else -1),
                })
            partitions.append({
                "topic": t.name, "partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
                "replicas": list(p.replicas), "isr": list(p.isr), "high_watermark":
                    leader_state.high_watermark if leader_state else -1,
                "log_end_offset": leader_leo, "under_replicated": len(p.isr) < len(p.replicas),
                "offline": p.leader < 0, "replica_state": replicas,
            })
    groups: list[dict[str, Any]] = []
    if with_groups:  # consumer-group lag, from the brokers' group coordinators
        try:
            with AdminClient(view.bootstrap) as admin:
                for g in admin.list_groups():
                    rows = admin.describe_group(g)
                    groups.append({"group": g, "lag": sum(r.lag or 0 for r in rows),
                                   "partitions": len(rows)})
        except (errors.KafkaError, Exception):
            groups = []
    events.sort(key=lambda e: e["ts"])
    return {"time_ms": int(time.time() * 1000), "controller": md.controller_id,
            "controller_epoch": md.controller_epoch,
            "brokers": [{"id": b, "address": a, "alive": alive.get(b, False)} for b, a in sorted(brokers.items())],
            "partitions": partitions, "groups": groups, "events": events[-max_events:] if max_events else []}


def _bar(value: int, scale: int) -> str:
    if value < 0:
        return " " * BAR
    # An empty partition (scale 0) is drawn empty, not full.
    filled = 0 if scale <= 0 else min(BAR, round(BAR * value / scale))
    return "█" * filled + "·" * (BAR - filled)


def render(snap: dict[str, Any], rows: int | None = None, cols: int | None = None) -> str:
    """The screen; with ``rows``/``cols`` (a terminal's size) it fits: the header stays on top,
    groups and events keep up to half the screen, partitions take the rest and what does not fit
    is counted in a last line instead of scrolling the header away."""
    header = [f"minikafka top — controller {snap['controller']} (epoch {snap['controller_epoch']})   brokers: "
             + "  ".join(f"{b['id']}{'' if b['alive'] else ' (DOWN)'}" for b in snap["brokers"]), ""]
    blocks: list[list[str]] = []
    for p in snap["partitions"]:
        lines: list[str] = []
        flags = " ".join(f for f, on in (("OFFLINE", p["offline"]), ("UNDER-REPLICATED", p["under_replicated"]))
                         if on)
        lines.append(f"{p['topic']}-{p['partition']}  leader {p['leader']}  epoch {p['leader_epoch']}  "
                     f"HW {p['high_watermark']}  LEO {p['log_end_offset']}  ISR {p['isr']}  {flags}")
        scale = max([p["log_end_offset"]] + [r["leo"] for r in p["replica_state"]])
        for r in p["replica_state"]:
            role = "leader  " if r["broker"] == p["leader"] else ("in ISR  " if r["in_isr"] else "OUT     ")
            state = "" if r["alive"] else "  (down)"
            lines.append(f"   {r['broker']:>3} {role} LEO {_bar(r['leo'], scale)} {r['leo']:>8}   "
                         f"HW {r['hw']:>8}{state}")
        lines.append("")
        blocks.append(lines)
    footer: list[str] = []
    if snap["groups"]:
        footer.append("consumer groups: " + "  ".join(f"{g['group']} lag {g['lag']}" for g in snap["groups"]))
        footer.append("")
    if snap["events"]:
        footer.append("recent events:")
        for e in snap["events"]:
            ts = time.strftime("%H:%M:%S", time.localtime(e["ts"] / 1000))
            footer.append(f"  {ts} broker {e['broker']} {e['kind']:<18} {e['detail']}")
    return "\n".join(fit(header, blocks, footer, rows, cols))


def fit(header: list[str], blocks: list[list[str]], footer: list[str], rows: int | None,
        cols: int | None) -> list[str]:
    """Header, whole partition blocks while they fit, a count of the rest, then the footer."""
    body = [ln for b in blocks for ln in b]
    if rows is None or len(header) + len(body) + len(footer) <= rows:
        out = header + body + footer
    else:
        footer = footer[:max(0, rows // 2 - len(header))]
        room = rows - len(header) - len(footer) - 1  # one line says what was left out
        shown: list[str] = []
        count = 0
        for b in blocks:
            if len(shown) + len(b) > room:
                break
            shown += b
            count += 1
        rest = len(blocks) - count
        more = [f"… {rest} more partition{'s' if rest != 1 else ''} (narrow with --topic, or a taller terminal)"]
        out = header + shown + more + footer
    return [ln[:cols] for ln in out] if cols else out


def run(args: argparse.Namespace) -> int:
    refuse_zookeeper(args, "top")
    bootstrap = args.bootstrap_server
    if not bootstrap:
        try:
            bootstrap = ClusterState.load(args.dir).bootstrap_servers
        except ClusterError:
            if not bootstrap:
                raise errors.InvalidRequestError(f"no --bootstrap-server and no local cluster in {args.dir}") from None
    security = local_client_security(args.dir) if not args.bootstrap_server else PLAINTEXT_SECURITY
    view = ClusterView(bootstrap, timeout_s=3, security=security)
    seen: dict[int, str] = {}
    try:
        while True:
            snap = snapshot(view, args.topic, args.events, seen=seen)
            if args.once:
                print(json.dumps(snap, indent=2) if args.output == "json" else render(snap))
                return 0
            size = shutil.get_terminal_size()
            text = json.dumps(snap, indent=2) if args.output == "json" else render(snap, size.lines - 1, size.columns)
            sys.stdout.write("\x1b[H\x1b[2J" + text + "\n")
            sys.stdout.flush()
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0
    finally:
        view.close()
