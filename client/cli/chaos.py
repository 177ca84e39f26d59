"""``minikafka chaos``: faults under load against the local cluster (:mod:`client.ops.chaos`)."""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

from client.admin import AdminClient
from client.cli.progress import Progress
from client.connection import ClusterView
from client.discovery import local_cluster_dir
from client.ops.chaos import SCENARIOS, GroupWorkload, Outstanding, Workload, heal, inject
from client.ops.history import CompactedReport, GroupReport, Report, check, check_compacted, check_group
from client.ops.local_cluster import ClusterState, LocalCluster, pid_alive
from client.ops.verify_replicas import verify
from proto import errors
from proto import minikafka_pb2 as pb


def add_parser(sub: Any) -> None:
    p = sub.add_parser("chaos", help="inject faults into the local cluster under load and check the history")
    p.add_argument("--dir", type=Path, default=local_cluster_dir(), help="local cluster directory (default .minikafka)")
    p.add_argument("--scenario", choices=SCENARIOS, default="soak", help="which fault (default soak: a random mix)")
    p.add_argument("--duration", type=float, default=30.0, help="seconds of faults")
    p.add_argument("--interval", type=float, default=3.0, help="seconds between faults")
    p.add_argument("--rate", type=float, default=300.0, help="writes per second per producer")
    p.add_argument("--members", type=int, default=2,
                   help="members of the consumer group that reads the topic meanwhile, committing after "
                        "each batch (default 2; 0: no group, and no coordinator-pause)")
    p.add_argument("--seed", type=int, default=None, help="random seed, to repeat a run's choices")
    p.add_argument("--output", choices=["table", "json"], default="table", help="the report's format")
    p.add_argument("--compacted", action="store_true",
                   help="a compacted topic (cleanup.policy=compact, small segments, eager cleaning): keyed updates "
                        "and tombstones, checked by the latest value per key")
    p.add_argument("--keys", type=int, default=50, help="keys per partition with --compacted (default 50)")
    p.add_argument("--keep-topic", action="store_true",
                   help="keep the run's chaos-<time> topic (default: removed at the end)")
    p.set_defaults(func=run)


DRAIN_TIMEOUT_S = 60.0
# --compacted: small segments and an eager cleaner, so that cleans run (and are interrupted by
# faults) within a short run; tombstones go 2 s after the log is clean up to them. The cleaner's
# backoff is the brokers' log.cleaner.backoff.ms (15 s by default).
COMPACTED_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "32768", "min.cleanable.dirty.ratio": "0.05",
                     "delete.retention.ms": "2000"}
TOMBSTONE_EVERY = 10


def run(args: argparse.Namespace) -> int:
    """Create a topic, write to it and consume it in a group under faults with a progress line, heal,
    check both histories, and remove the topic. Ctrl-C at any point heals every fault still in
    place before exiting."""
    if args.members < 0:
        print("error: --members must be 0 or more", file=sys.stderr)
        return 2
    if args.compacted and args.keys < 1:
        print("error: --keys must be 1 or more", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    cluster = LocalCluster(args.dir)
    state = ClusterState.load(args.dir)
    cluster.state = state
    security = state.client_security()
    view = ClusterView(state.bootstrap_servers, security=security)
    topic = f"chaos-{int(time.time())}"
    conn = view.connection(view.bootstrap[0])
    resp = conn.api.CreateTopics(pb.CreateTopicsRequest(topics=[pb.CreatableTopic(
        name=topic, num_partitions=2, replication_factor=min(3, len(state.brokers)),
        configs={"min.insync.replicas": "2" if len(state.brokers) >= 3 else "1",
                 **(COMPACTED_CONFIGS if args.compacted else {})})], timeout_ms=30000), timeout=40)
    if resp.topics[0].error_code != pb.ErrorCode.NONE:
        raise errors.for_code(resp.topics[0].error_code)(resp.topics[0].error_message)
    workload = Workload(state.bootstrap_servers, topic, 2, rate=args.rate, security=security,
                        keys=args.keys if args.compacted else 0, tombstone_every=TOMBSTONE_EVERY)
    group = GroupWorkload(state.bootstrap_servers, topic, 2, f"{topic}-readers", members=args.members,
                          security=security) if args.members else None
    group_report: GroupReport | None = None
    drained = True
    faults: list[str] = []
    outstanding = Outstanding()
    progress = Progress()
    started = time.monotonic()
    try:
        workload.start()
        if group is not None:
            group.start()
        deadline = started + args.duration
        next_fault = started + args.interval
        while time.monotonic() < deadline:
            progress.update(lambda: f"chaos {args.scenario}: {time.monotonic() - started:.0f}/{args.duration:.0f} s, "
                                    f"{len(faults)} faults, {len(workload.pending)} writes sent"
                                    + (f", {len(group.history.deliveries)} delivered to the group"
                                       if group is not None else ""))
            if time.monotonic() >= next_fault:
                inject(cluster, view, topic, args.scenario, rng, faults, outstanding, group=group)
                next_fault = time.monotonic() + args.interval
            time.sleep(max(0.0, min(0.2, deadline - time.monotonic())))
        progress.update(f"chaos {args.scenario}: faults over; reading back {len(workload.pending)} writes "
                        "and checking the history", force=True)
        writes = workload.stop()
        for b in state.brokers:  # a fault interrupted by an error elsewhere: never leave a broker down
            if not pid_alive(cluster.broker(b).pid):
                outstanding.stopped.add(b)
        heal(cluster, outstanding)
        reads = workload.read_all()
        report: Report | CompactedReport = check_compacted(writes, reads) if args.compacted else check(writes, reads)
        if group is not None:
            # The group reads on to the end of the log, then the final committed offsets are read.
            progress.update(f"chaos {args.scenario}: the group consumes to the end and commits", force=True)
            ends: dict[int, int] = {}
            for r in reads:
                ends[r.partition] = max(ends.get(r.partition, 0), r.offset + 1)
            drained = group.drain(ends, DRAIN_TIMEOUT_S)
            history = group.stop()
            # Compacted: records the cleaner removed before the group got to them are not skipped;
            # only those still in the log (the full read) must have been delivered.
            read_at = {(r.partition, r.offset) for r in reads}
            judged = [w for w in writes if (w.partition, w.offset) in read_at] if args.compacted else writes
            group_report = check_group(judged, history.commits, history.reads, history.deliveries,
                                       history.final_committed)
        replicas = verify(view, topic)
    except KeyboardInterrupt:
        # Heal first, with a second Ctrl-C ignored: exiting with a broker killed or paused is the
        # one thing this command must never do.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            progress.done()
            workload.stop_now()
            if group is not None:
                group.stop_now()
            healed = heal(cluster, outstanding)
            removed = _remove_topic(state, topic, args.keep_topic)
        finally:
            signal.signal(signal.SIGINT, previous)
        print(f"interrupted: healed every injected fault ({', '.join(healed) or 'none was in place'}); "
              f"{removed}", file=sys.stderr)
        return 130
    finally:
        view.close()
    progress.done()
    removed = _remove_topic(state, topic, args.keep_topic)
    result: dict[str, Any] = {
        "scenario": args.scenario, "duration_s": args.duration, "compacted": args.compacted, "faults": faults,
        "writes": report.writes, "records_read": len(reads),
        "anomalies": report.anomalies, "replicas_identical": all(e["status"] == "OK" for e in replicas),
        "topic": topic, "topic_kept": args.keep_topic}
    if group is not None and group_report is not None:
        result["group"] = _group_result(group, group_report, drained)
    if args.output == "json":
        print(json.dumps(result, indent=2))
    else:
        print(f"scenario {args.scenario}: {len(faults)} faults injected ({', '.join(faults) or 'none'})")
        print(report.summary())
        if group_report is not None:
            print(group_report.summary())
            for g in group_report.regressions[:10]:
                print(f"  commit regression: partition {g.partition}: {g.acknowledged.offset} acknowledged "
                      f"(commit by {g.acknowledged.member}), then {g.observed} ({g.by})")
            if group_report.skipped:
                print(f"  skipped: {len(group_report.skipped)} acknowledged records below the final committed "
                      "offset never delivered, e.g. " + ", ".join(f"{w.partition}@{w.offset}"
                                                                   for w in group_report.skipped[:10]))
            if not drained:
                print(f"  the group did not reach the end of the log within {DRAIN_TIMEOUT_S:.0f} s")
        print("replicas identical below the HW: " + ("yes" if result["replicas_identical"] else "NO"))
        print(removed)
    group_ok = group_report is None or group_report.valid
    return 0 if report.valid and group_ok and result["replicas_identical"] else 1


def _group_result(group: GroupWorkload, r: GroupReport, drained: bool) -> dict[str, Any]:
    return {"group_id": group.group, "members": group.member_count, "commits": r.commits, "reads": r.reads,
            "deliveries": r.deliveries, "redelivered": r.redelivered,
            "final_committed": {str(p): o for p, o in sorted(r.final_committed.items())},
            "drained": drained, "anomalies": r.anomalies,
            "regressions": [{"partition": g.partition, "acknowledged": g.acknowledged.offset,
                             "acknowledged_by": g.acknowledged.member, "observed": g.observed, "by": g.by}
                            for g in r.regressions[:100]],
            "skipped": [{"partition": w.partition, "offset": w.offset, "value": w.value} for w in r.skipped[:100]],
            "member_errors": dict(sorted(group.history.errors.items()))}


REMOVE_TOPIC_TIMEOUT_S = 30.0


def _remove_topic(state: ClusterState, topic: str, keep: bool) -> str:
    if keep:
        return f"kept topic {topic} (--keep-topic)"
    # Right after the faults heal a broker may still be re-establishing its ZooKeeper session and
    # answer a retriable error: try again for a bounded while before giving up.
    deadline = time.monotonic() + REMOVE_TOPIC_TIMEOUT_S
    for _attempt in range(100):
        try:
            with AdminClient(state.bootstrap_servers, security=state.client_security()) as admin:
                admin.delete_topics([topic])
            return f"removed topic {topic} (--keep-topic keeps it)"
        except errors.KafkaError as e:
            if not e.retriable or time.monotonic() >= deadline:
                return f"could not remove topic {topic}: {e}"
            time.sleep(0.5)
    return f"could not remove topic {topic}: still failing after 100 attempts"
