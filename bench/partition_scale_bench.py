"""What partitions cost: the figures of issue 29 at ~50 and at N partitions, in the same run.

Starts its own local cluster (ZooKeeper + 3 broker processes on free loopback ports, in a
temporary directory, torn down at the end whatever happens), creates a 6-partition ``hot`` topic
and a 50-partition ``base`` topic (RF 3: 56 partitions in the cluster), measures, then creates N
more partitions (``--partitions``, default 3,000, as topics ``scale-000``... of
``--topic-partitions`` = 100 partitions each) and measures again.
Producing is librdkafka (``confluent_kafka.Producer``) at the brokers' Kafka listeners: acks=all,
linger.ms=5, TCP_NODELAY, 100-byte keyless values, each record given the next partition of the set
in turn (round-robin over every partition, so every partition gets the same share; not
idempotent unless ``--idempotent``). Each produce phase first sends one record to every partition
of its set (metadata, connections; not counted), then is bounded by ``--records`` AND by
``--phase-seconds``: when the time bound hits, what was acknowledged by then is reported, the rest
is purged and the phase is marked incomplete.

Figures (goal from issue 29 beside each):

1. **spread produce**: records/s over the 50 ``base`` partitions, then over the N partitions, and
   the ratio N / 50 (goal >= 0.5); the brokers' CPU per acknowledged record: the three broker
   processes' utime+stime (``/proc/<pid>/stat``) over the measured phase / records (goal <= 10 us).
   /proc counts CPU in clock ticks (10 ms per process): a phase of a fraction of a second (the
   ~50-partition ones in a smoke run) gives only a rough per-record figure. Beside it, the
   baseline of the same run: the CPU of three one-record appends (``writev`` of 170 B, as the
   leader and both followers each make per record at RF 3) to three of 50 and of N files, with
   no broker code at all (``write_floor``). Each partition is a file, and the kernel's cost of a
   small append grows with the files being written (~2 us each over 50 files, ~4-6 us over
   thousands here): at N the floor is most of the 10 us goal. The phases also count the Produce
   requests and follower fetches the brokers handled (per record: librdkafka's one request per
   partition shows there), from each broker's metrics before and after the phase
   (``--no-count-requests``: not scraped; a scrape at 10,000 partitions set off full garbage
   collections until the per-partition gauges were made one sample at a time).
2. **hot produce**: records/s into the 6-partition ``hot`` topic with only the 50 others existing,
   and again with the N others existing idle; the ratio (goal >= 0.95).
3. **idle**: the three brokers' CPU, in cores, over ``--idle-seconds`` with no client, after the
   partitions are created and every ISR is full (plus ``--settle-seconds``); cores per 1,000
   partitions in the cluster at N (goal <= 0.005), and the marginal figure (idle at N - idle at
   56) per 1,000 added partitions.
4. **create**: seconds from the first CreateTopics request for the N partitions until every
   broker's Metadata (gRPC) shows a leader for every one of them (polled every
   ``--poll-seconds``; goal at 10,000 partitions <= 20 s); also until every ISR is full. The
   topics go ``--create-batch`` (default 1) per request, one request after another, each waiting
   in the broker until its topics are led (as ``kafka-topics.sh --create`` one topic at a time).
   ``--create-batch 30`` (all 3,000 in one request) never completes on tree cc59274: the
   controller writes the new partitions' state in one ZooKeeper transaction, 1,070,731 bytes for
   2,900 partitions (~370 B each), over ZooKeeper's jute.maxbuffer of 1,048,575 (its log: "Len
   error"); the server drops the connection, the controller resigns (``TopicChange failed
   (ConnectionLoss)``) and every re-election retries the same transaction. 1,500 partitions in
   one request were all led in 6.9 s, 2,000 in 16 s.
5. **RSS** (MB, VmRSS) and **open files** (entries of ``/proc/<pid>/fd``) per broker, right after
   creation (idle) and after the produce phases, at 56 and at N + 56 partitions.
6. **Full garbage collections**, per broker from its metrics endpoint after the produce phases: how
   many since the broker started serving, how many over 10 ms, the longest and the last pause
   (goal: none over the ~10 ms a request may hold the loop), and how often their survivors were
   frozen (``broker.server.gc_pauses``).

With ``--failover`` (off by default), at N partitions: SIGTERM (controlled shutdown) of the
non-controller broker leading most partitions, seconds until every partition it led is led
elsewhere in the survivors' Metadata (goal <= 3 s for a broker leading a third of 10,000); its
restart until it is back in every ISR; then SIGKILL of the controller, seconds until every partition
it led is led elsewhere (goal <= zookeeper.session.timeout.ms + 3 s) and the controller epoch
change (goal: +1, one election per kill).

The brokers run with ``zookeeper.session.timeout.ms=10000`` as the other benches
(``--broker-config KEY=VALUE`` adds or overrides). The load average of the machine is printed at
start and end: other processes on the machine share its cores with the brokers and this
process (librdkafka's threads run here, and their CPU is printed as ``client CPU``).

With ``--client minikafka`` the produce phases use this project's Producer, which sends one request
per leader naming every partition with a ready batch (as Kafka's Java client); librdkafka sends one
request per partition (its issue #1700), so at thousands of partitions its spread figure is the
cost of a one-record request. ``--profile-dir DIR`` records each broker with py-spy during the
hot and spread phases (collapsed stacks, one file per broker and phase; ``--gil``: only the thread
holding the GIL, so the samples are Python's CPU, not time inside system calls).

    python bench/partition_scale_bench.py [--partitions 3000] [--records 200000] [--phase-seconds 120]
                                          [--topic-partitions 100] [--create-batch 1] [--idle-seconds 10]
                                          [--failover] [--client librdkafka|minikafka] [--profile-dir DIR]
                                          [--count-requests] [--json]
    python bench/partition_scale_bench.py --partitions 300 --records 20000     # quick smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grpc

from client.connection import Connection
from client.ops.local_cluster import LocalCluster, pid_alive
from proto import minikafka_pb2 as pb

VALUE = b"v" * 100
RF = 3
HOT = ("hot", 6)
BASE = ("base", 50)
SCALE_PREFIX = "scale"
SESSION_TIMEOUT_MS = 10000

Partition = tuple[str, int]


# ------------------------------------------------------------------ per-process figures from /proc


def cpu_s(pid: int) -> float:
    """utime + stime so far of ``pid`` in seconds (fields 14 and 15 of /proc/<pid>/stat); 0 if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


def open_files(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def write_floor(files: int, root: Path, appends: int = 30_000) -> dict[str, float]:
    """The baseline under the spread figure's CPU goal, measured here on the brokers' file system:
    CPU microseconds of one small append (a one-record batch, 170 B, one ``writev``) to one of
    ``files`` files, round-robin over them as the spread phase appends, and the same over 50 files.
    At RF 3 each record is appended three times (the leader's log and each follower's), so 3x the
    figure is what the kernel alone takes per record, before any broker code runs."""
    data = [b"x" * 170]
    out: dict[str, float] = {}
    for label, n in (("few", 50), ("many", files)):
        d = Path(tempfile.mkdtemp(prefix="write-floor-", dir=root))
        fds = [os.open(d / f"{i:020d}.log", os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644) for i in range(n)]
        try:
            for fd in fds:  # the first append to each file (its first block) is not the steady state
                os.writev(fd, data)
            rounds = max(1, appends // n)
            cpu0 = time.process_time()
            for _ in range(rounds):
                for fd in fds:
                    os.writev(fd, data)
            out[f"{label}_us_per_append"] = round(1e6 * (time.process_time() - cpu0) / (rounds * n), 2)
        finally:
            for fd in fds:
                os.close(fd)
            shutil.rmtree(d, ignore_errors=True)
    out["files"] = files
    return out


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def memory_and_files(pids: dict[int, int]) -> dict[str, dict[str, float]]:
    return {str(b): {"rss_mb": round(rss_mb(p), 1), "open_files": open_files(p)} for b, p in sorted(pids.items())}


GC_METRICS = {"minikafka_gc_full_collections_total": "full_collections",
              "minikafka_gc_full_collections_over_budget_total": "over_budget",
              "minikafka_gc_full_collection_longest_seconds": "longest_ms",
              "minikafka_gc_full_collection_last_seconds": "last_ms", "minikafka_gc_freezes_total": "freezes",
              "minikafka_gc_thaws_total": "thaws"}


def _scrape(url: str) -> str:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return str(r.read().decode())
    except OSError:
        return ""


def request_counts(metrics: dict[int, str]) -> dict[str, float]:
    """Over every broker, from its Prometheus endpoint: Produce requests handled (every listener)
    and follower fetches sent (full and incremental) so far."""
    out = {"produce_requests": 0.0, "follower_fetches": 0.0}
    for url in metrics.values():
        for line in _scrape(url).splitlines():
            name, _, value = line.rpartition(" ")
            if name == 'minikafka_requests_total{api="Produce"}':
                out["produce_requests"] += float(value)
            elif name.startswith("minikafka_replica_fetches_total{"):
                out["follower_fetches"] += float(value)
    return out


def gc_figures(metrics: dict[int, str]) -> dict[str, dict[str, float]]:
    """Each broker's full garbage collections since it started (broker.server.gc_pauses), from its
    Prometheus endpoint: how many, the longest and the last pause (ms), freezes and thaws."""
    out: dict[str, dict[str, float]] = {}
    for b, url in sorted(metrics.items()):
        figures: dict[str, float] = {}
        text = _scrape(url)
        if not text:
            continue
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            key = GC_METRICS.get(name)
            if key is not None:
                v = float(value)
                figures[key] = round(v * 1000, 1) if key.endswith("_ms") else v
        out[str(b)] = figures
    return out


@dataclass
class CpuWindow:
    """CPU seconds of the brokers (and this process) between ``start()`` and ``stop()``."""
    pids: dict[int, int]
    brokers0: dict[int, float] = field(default_factory=dict)
    client0: float = 0.0
    wall0: float = 0.0
    broker_s: dict[int, float] = field(default_factory=dict)
    client_s: float = 0.0
    wall_s: float = 0.0

    def start(self) -> None:
        self.brokers0 = {b: cpu_s(p) for b, p in self.pids.items()}
        t = os.times()
        self.client0 = t.user + t.system
        self.wall0 = time.perf_counter()

    def stop(self) -> None:
        self.wall_s = time.perf_counter() - self.wall0
        self.broker_s = {b: cpu_s(p) - self.brokers0[b] for b, p in self.pids.items()}
        t = os.times()
        self.client_s = t.user + t.system - self.client0

    @property
    def brokers_total_s(self) -> float:
        return sum(self.broker_s.values())


# ------------------------------------------------------------------ metadata (gRPC, per broker)


class Metadata:
    """Each live broker's own Metadata answer: who leads every partition, and the ISR."""

    def __init__(self, addresses: dict[int, str]) -> None:
        self.conns = {b: Connection(a) for b, a in addresses.items()}

    def close(self) -> None:
        for c in self.conns.values():
            c.close()

    def of(self, broker: int, timeout_s: float = 10.0) -> dict[Partition, tuple[int, tuple[int, ...]]]:
        """(topic, partition) -> (leader, isr) as ``broker`` answers; {} if it does not answer."""
        try:
            resp = self.conns[broker].api.Metadata(pb.MetadataRequest(all_topics=True), timeout=timeout_s)
        except grpc.RpcError:
            return {}
        return {(t.name, p.partition): (p.leader, tuple(p.isr)) for t in resp.topics for p in t.partitions}


def wait_until(check: Callable[[], bool], timeout_s: float, poll_s: float) -> float | None:
    """Seconds until ``check()`` held (polled every ``poll_s``), or None if not within ``timeout_s``."""
    start = time.perf_counter()
    deadline = start + timeout_s
    while True:
        if check():
            return time.perf_counter() - start
        if time.perf_counter() >= deadline:
            return None
        time.sleep(poll_s)


def all_led(md: Metadata, brokers: list[int], expected: set[Partition], not_by: int = -1) -> bool:
    """Every expected partition has a leader (other than ``not_by``) in each of ``brokers``' Metadata."""
    for b in brokers:
        view = md.of(b)
        if any(view.get(tp, (-1, ()))[0] in (-1, not_by) for tp in expected):
            return False
    return True


def all_isr_full(md: Metadata, broker: int, expected: set[Partition], members: int = RF,
                 must_hold: int = -1) -> bool:
    view = md.of(broker)
    for tp in expected:
        isr = view.get(tp, (-1, ()))[1]
        if len(isr) < members or (must_hold >= 0 and must_hold not in isr):
            return False
    return True


def partitions_of(topics: list[tuple[str, int]]) -> list[Partition]:
    return [(name, p) for name, n in topics for p in range(n)]


def led_count(md: Metadata, brokers: list[int], expected: set[Partition]) -> int:
    """How many of ``expected`` have a leader in the Metadata of every one of ``brokers``."""
    views = [md.of(b) for b in brokers]
    return sum(1 for tp in expected if all(v.get(tp, (-1, ()))[0] >= 0 for v in views))


def create(md: Metadata, via: int, topics: list[tuple[str, int]], args: argparse.Namespace) -> dict[str, Any]:
    """Create ``topics``, ``--create-batch`` topics per CreateTopics request, the requests one after
    another (each waits in the broker until its topics are led, as kafka-topics.sh --create does),
    then time until every broker's Metadata shows a leader for each of their partitions, and until
    every ISR is full; all within ``--create-timeout``. A failure or the bound is reported in the
    result ("error", "led_at_bound"), not raised."""
    expected = set(partitions_of(topics))
    brokers = sorted(md.conns)
    out: dict[str, Any] = {"partitions": len(expected), "topics": len(topics), "per_request": args.create_batch,
                           "request_s": None, "leaders_s": None, "isr_full_s": None}
    start = time.perf_counter()
    deadline = start + args.create_timeout
    # REQUEST_TIMED_OUT: created, not led within the request's wait; the leaders are waited for below.
    created = (pb.ErrorCode.NONE, pb.ErrorCode.REQUEST_TIMED_OUT)
    for i in range(0, len(topics), args.create_batch):
        left = deadline - time.perf_counter()
        req = pb.CreateTopicsRequest(timeout_ms=int(max(0.0, min(left, 60.0)) * 1000), topics=[
            pb.CreatableTopic(name=name, num_partitions=n, replication_factor=RF)
            for name, n in topics[i:i + args.create_batch]])
        try:
            resp = md.conns[via].api.CreateTopics(req, timeout=max(1.0, left))
        except grpc.RpcError as e:
            out["error"] = f"CreateTopics: {e.code().name} {e.details()}"
            return out
        bad = [f"{t.name}: {t.error_message or t.error_code}" for t in resp.topics if t.error_code not in created]
        if bad:
            out["error"] = f"CreateTopics failed: {'; '.join(bad[:5])}"
            return out
    request_s = time.perf_counter() - start
    out["request_s"] = round(request_s, 2)
    led = wait_until(lambda: all_led(md, brokers, expected), max(0.0, deadline - time.perf_counter()),
                     args.poll_seconds)
    if led is None:
        out["led_at_bound"] = led_count(md, brokers, expected)
        out["error"] = (f"{out['led_at_bound']:,} of {len(expected):,} partitions led in every broker's Metadata "
                        f"after --create-timeout {args.create_timeout:g} s")
        return out
    out["leaders_s"] = round(time.perf_counter() - start, 2)
    isr = wait_until(lambda: all_isr_full(md, via, expected), max(0.0, deadline - time.perf_counter()),
                     args.poll_seconds)
    if isr is not None:
        out["isr_full_s"] = round(time.perf_counter() - start, 2)
    return out


# ------------------------------------------------------------------ produce (librdkafka)


@contextlib.contextmanager
def py_spy(pids: dict[int, int], out_dir: str | None, label: str) -> Iterator[None]:
    """With ``--profile-dir``, py-spy records every broker over the block (collapsed stacks, one
    file per broker): the measured phase's own profile, so optimising starts from it."""
    if not out_dir:
        yield
        return
    import subprocess
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    procs = [subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", "250", "--format", "raw", "--threads", "--gil",
                               "--output", str(Path(out_dir) / f"{label}-broker-{b}.txt"), "--nonblocking"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for b, pid in sorted(pids.items())]
    try:
        time.sleep(0.5)  # py-spy attaches
        yield
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGINT)
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)


class _MinikafkaProducer:
    """This project's Producer behind the few calls of confluent_kafka.Producer the phase makes.
    It sends one Produce request per leader naming every partition with a ready batch (as Kafka's
    Java producer does), where librdkafka sends one request per partition (librdkafka issue
    #1700): the two clients split the spread figure into per-request and per-partition costs."""

    def __init__(self, grpc_bootstrap: str, args: argparse.Namespace) -> None:
        from client.producer import Producer
        self._p = Producer(grpc_bootstrap, acks="all", linger_ms=args.linger_ms,
                           enable_idempotence=args.idempotent,
                           delivery_timeout_ms=int(args.phase_seconds * 1000) + 60_000)

    def produce(self, topic: str, value: bytes, partition: int, on_delivery: Callable[[Any, Any], None]) -> None:
        fut = self._p.send(topic, value, partition=partition)
        fut.add_done_callback(lambda f: on_delivery(f.exception(), None))

    def poll(self, _timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        try:
            self._p.flush(timeout)
        except Exception:
            return 1
        return 0

    def purge(self) -> None:
        self._p.close(0)


def produce_phase(kafka_bootstrap: str, targets: list[Partition], args: argparse.Namespace,
                  pids: dict[int, int], records: int, profile_label: str | None = None,
                  metrics: dict[int, str] | None = None) -> dict[str, Any]:
    """Round-robin over ``targets``, bounded by ``records`` and ``--phase-seconds``: records/s and
    CPU of what was acknowledged within the bound, and (with ``metrics``) the Produce requests and
    follower fetches the brokers counted meanwhile."""
    p: Any
    if args.client == "minikafka":
        p = _MinikafkaProducer(kafka_bootstrap, args)
    else:
        import confluent_kafka

        p = confluent_kafka.Producer({
            "bootstrap.servers": kafka_bootstrap, "acks": "all", "linger.ms": args.linger_ms,
            "enable.idempotence": args.idempotent, "socket.nagle.disable": True,
            "message.timeout.ms": int(args.phase_seconds * 1000) + 60_000})
    delivered = failed = 0
    first_error: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        nonlocal delivered, failed
        if err is None:
            delivered += 1
        else:
            failed += 1
            if not first_error:
                first_error.append(str(err))

    def send(tp: Partition, deadline: float) -> bool:
        while True:  # bounded by the deadline: a full queue drains as the brokers acknowledge
            try:
                p.produce(tp[0], VALUE, partition=tp[1], on_delivery=on_delivery)
                return True
            except BufferError:
                if time.perf_counter() >= deadline:
                    return False
                p.poll(0.005)

    try:
        # Warm-up, not counted: one record per partition (metadata, connections, leaders known).
        warm_deadline = time.perf_counter() + args.phase_seconds
        for tp in targets:
            if not send(tp, warm_deadline):
                break
        warm_left = p.flush(max(0.0, warm_deadline - time.perf_counter()))
        if warm_left:
            p.purge()
            p.flush(10)
        warm_ok = warm_left == 0 and failed == 0
        delivered = failed = 0
        first_error.clear()

        window = CpuWindow(pids)
        counts0 = request_counts(metrics) if metrics else {}
        with py_spy(pids, args.profile_dir if profile_label else None, profile_label or ""):
            window.start()
            deadline = window.wall0 + args.phase_seconds
            sent = 0
            n = len(targets)
            for i in range(records):
                if i % 1000 == 0:
                    p.poll(0)  # serve delivery reports as the phase goes
                    if time.perf_counter() >= deadline:
                        break
                if not send(targets[i % n], deadline):
                    break
                sent += 1
            unflushed = p.flush(max(0.0, deadline - time.perf_counter()))
            window.stop()
        counts = {k: v - counts0[k] for k, v in request_counts(metrics).items()} if metrics else {}
        acked = delivered
        if unflushed:
            p.purge()
            p.flush(10)
    finally:
        with contextlib.suppress(Exception):
            p.purge()
        p.flush(0)
    per_record = window.brokers_total_s / acked * 1e6 if acked else float("nan")
    return {"partitions": n, "records_asked": records, "sent": sent, "acknowledged": acked,
            "failed": failed, "first_error": first_error[0] if first_error else None,
            "complete": acked == records, "warm_up_complete": warm_ok, "seconds": round(window.wall_s, 2),
            "records_per_sec": round(acked / window.wall_s) if window.wall_s > 0 else 0,
            "broker_cpu_s": {str(b): round(s, 2) for b, s in sorted(window.broker_s.items())},
            "broker_cpu_us_per_record": round(per_record, 2), "client_cpu_s": round(window.client_s, 2),
            "requests": {k: int(v) for k, v in counts.items()}}


def idle_phase(pids: dict[int, int], zk_pid: int, seconds: float) -> dict[str, Any]:
    """The brokers' CPU in cores over ``seconds`` with no client (and ZooKeeper's, beside it)."""
    window = CpuWindow(pids)
    zk0 = cpu_s(zk_pid)
    window.start()
    time.sleep(seconds)
    window.stop()
    zk = cpu_s(zk_pid) - zk0
    return {"seconds": round(window.wall_s, 2), "cores": round(window.brokers_total_s / window.wall_s, 4),
            "per_broker_cores": {str(b): round(s / window.wall_s, 4) for b, s in sorted(window.broker_s.items())},
            "zookeeper_cores": round(zk / window.wall_s, 4)}


# ------------------------------------------------------------------ failover (optional)


def led_by(view: dict[Partition, tuple[int, tuple[int, ...]]], broker: int, within: set[Partition]) -> set[Partition]:
    return {tp for tp in within if view.get(tp, (-1, ()))[0] == broker}


def failover_phase(cluster: LocalCluster, md: Metadata, pids: dict[int, int], expected: set[Partition],
                   args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"session_timeout_ms": int(cluster.overrides["zookeeper.session.timeout.ms"])}
    controller = int(cluster.zk_view()["controller"])
    views = {b: md.of(b) for b in pids}
    victim = max((b for b in pids if b != controller), key=lambda b: len(led_by(views[b], b, expected)))
    moved = led_by(views[victim], victim, expected)
    survivors = [b for b in pids if b != victim]

    # 1. Controlled shutdown (SIGTERM) of a broker that is not the controller.
    exited: list[float] = []
    start = time.perf_counter()
    cluster.signal(victim, "TERM")

    def moved_away() -> bool:
        if not exited and not pid_alive(pids[victim]):
            exited.append(time.perf_counter() - start)
        return all_led(md, survivors, moved, not_by=victim)

    took = wait_until(moved_away, args.failover_timeout, args.poll_seconds)
    if not exited and cluster.wait_for_exit(victim, args.failover_timeout) is not None:
        exited.append(time.perf_counter() - start)  # exited after its leaders had moved
    out["sigterm"] = {"broker": victim, "partitions_led": len(moved),
                      "all_led_elsewhere_s": None if took is None else round(took, 2),
                      "process_exit_s": round(exited[0], 2) if exited else None}

    # 2. Back: the restarted broker in every ISR it belongs to (all of them, at RF 3 on 3 brokers).
    start = time.perf_counter()
    cluster.start(victim)
    pids[victim] = cluster.broker(victim).pid
    md.conns[victim].close()
    md.conns[victim] = Connection(cluster.broker(victim).address)
    left = max(0.0, args.failover_timeout - (time.perf_counter() - start))
    back = wait_until(lambda: all_isr_full(md, survivors[0], expected, must_hold=victim), left, args.poll_seconds)
    out["restart_back_in_every_isr_s"] = None if back is None else round(time.perf_counter() - start, 2)

    # 3. SIGKILL of the controller.
    zk0 = cluster.zk_view()
    controller = int(zk0["controller"])
    lost = led_by(md.of(controller), controller, expected)
    survivors = [b for b in pids if b != controller]
    with py_spy({b: pids[b] for b in survivors}, args.profile_dir, "sigkill-controller"):
        start = time.perf_counter()
        cluster.signal(controller, "KILL")
        took = wait_until(lambda: all_led(md, survivors, lost, not_by=controller), args.failover_timeout,
                          args.poll_seconds)
    time.sleep(args.settle_seconds)  # an extra election shortly after counts too
    zk1 = cluster.zk_view()
    out["sigkill_controller"] = {"broker": controller, "partitions_led": len(lost),
                                 "all_led_elsewhere_s": None if took is None else round(took, 2),
                                 "controller_epoch_before": zk0["controller_epoch"],
                                 "controller_epoch_after": zk1["controller_epoch"],
                                 "new_controller": zk1["controller"]}
    return out


# ------------------------------------------------------------------ the run


@contextlib.contextmanager
def terminated_cleanly() -> Iterator[None]:
    """SIGTERM / SIGHUP of the bench raise SystemExit, so the cluster is torn down as on Ctrl-C."""
    def stop(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(f"stopped by signal {signum}")

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def scale_topics(n: int, per_topic: int) -> list[tuple[str, int]]:
    count = (n + per_topic - 1) // per_topic
    return [(f"{SCALE_PREFIX}-{i:03d}", min(per_topic, n - i * per_topic)) for i in range(count)]


def measure_level(level: dict[str, Any], kbs: str, pids: dict[int, int], zk_pid: int, hot: list[Partition],
                  spread: list[Partition], args: argparse.Namespace, metrics: dict[int, str]) -> None:
    """The figures at one partition count, into ``level`` as they come (a failure keeps the earlier ones)."""
    time.sleep(args.settle_seconds)
    level["idle"] = idle_phase(pids, zk_pid, args.idle_seconds)
    level["memory_after_create"] = memory_and_files(pids)
    counted = metrics if args.count_requests else None
    level["hot"] = produce_phase(kbs, hot, args, pids, args.hot_records,
                                 profile_label=f"hot-{len(spread)}", metrics=counted)  # hot with len(spread) others
    time.sleep(args.settle_seconds)
    level["spread"] = produce_phase(kbs, spread, args, pids, args.records,
                                    profile_label=f"spread-{len(spread)}", metrics=counted)
    level["memory_after_produce"] = memory_and_files(pids)
    level["gc_after_produce"] = gc_figures(metrics)


def run(args: argparse.Namespace) -> dict[str, Any]:
    overrides = {"zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS)}
    for item in args.broker_config:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--broker-config {item!r}: expected KEY=VALUE")
        overrides[key.strip()] = value.strip()
    root = Path(tempfile.mkdtemp(prefix="partition-scale-bench-"))
    cluster = LocalCluster(root / "cluster", broker_overrides=overrides)
    md: Metadata | None = None
    result: dict[str, Any] = {"cores": os.cpu_count(), "loadavg_start": loadavg(), "partitions": args.partitions,
                              "topic_partitions": args.topic_partitions, "create_batch": args.create_batch,
                              "records": args.records, "hot_records": args.hot_records,
                              "phase_seconds": args.phase_seconds, "linger_ms": args.linger_ms,
                              "idempotent": args.idempotent, "value_size": len(VALUE), "broker_overrides": overrides,
                              "client": args.client}
    try:
        with terminated_cleanly():
            state = cluster.up(3)
            pids = {b: p.pid for b, p in state.brokers.items()}
            metrics = {b: p.metrics_address for b, p in state.brokers.items() if p.metrics_address}
            zk_pid = state.zookeeper_pid
            kbs = state.kafka_bootstrap_servers if args.client == "librdkafka" \
                else ",".join(b.address for _, b in sorted(state.brokers.items()))
            md = Metadata({b: p.address for b, p in state.brokers.items()})
            controller = int(cluster.zk_view()["controller"])
            hot = partitions_of([HOT])
            small: dict[str, Any] = {"partitions_in_cluster": HOT[1] + BASE[1],
                                     "create": create(md, controller, [HOT, BASE], args)}
            result["small"] = small
            if "error" in small["create"]:
                raise SystemExit(f"the ~50 partitions: {small['create']['error']}")
            measure_level(small, kbs, pids, zk_pid, hot, partitions_of([BASE]), args, metrics)

            time.sleep(args.settle_seconds)
            topics = scale_topics(args.partitions, args.topic_partitions)
            large: dict[str, Any] = {"partitions_in_cluster": HOT[1] + BASE[1] + args.partitions}
            result["large"] = large
            try:
                with py_spy(pids, args.profile_dir, f"create-{args.partitions}"):
                    large["create"] = create(md, controller, topics, args)
                if "error" in large["create"]:
                    raise RuntimeError(f"creating the {args.partitions:,} partitions: {large['create']['error']}")
                measure_level(large, kbs, pids, zk_pid, hot, partitions_of(topics), args, metrics)
                if args.failover:
                    time.sleep(args.settle_seconds)
                    every = set(partitions_of([HOT, BASE, *topics]))
                    result["failover"] = failover_phase(cluster, md, pids, every, args)
            except Exception as e:  # keep (and print) what was measured before it
                result["error"] = f"{type(e).__name__}: {e}"
    finally:
        if md is not None:
            md.close()
        with contextlib.suppress(Exception):
            cluster.down()
        if args.keep_dir:
            print(f"kept: {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    result["write_floor"] = write_floor(args.partitions, root.parent)
    result["loadavg_end"] = loadavg()
    return result


# ------------------------------------------------------------------ output


def ratio(a: Any, b: Any) -> str:
    return f"{a / b:.3f}" if isinstance(a, int | float) and isinstance(b, int | float) and b else "-"


def get(level: dict[str, Any], *path: str) -> Any:
    """``level[path[0]][path[1]]...``, or None where a phase did not run (it failed or was not reached)."""
    x: Any = level
    for key in path:
        if not isinstance(x, dict) or key not in x:
            return None
        x = x[key]
    return x


def cell(x: Any, spec: str = "") -> str:
    return "-" if x is None else format(x, spec)


def report(r: dict[str, Any]) -> None:
    import confluent_kafka

    s, g = r["small"], r.get("large", {})
    n_s, n_g = s["partitions_in_cluster"], g.get("partitions_in_cluster", 0)
    print(f"cores: {r['cores']}; load average at start {r['loadavg_start']}, at end {r['loadavg_end']}")
    client = f"librdkafka {confluent_kafka.libversion()[0]} (one Produce request per partition)" \
        if r.get("client", "librdkafka") == "librdkafka" else "minikafka's Producer (one Produce request per leader)"
    print(f"3 brokers on loopback, RF {RF}; {client} acks=all "
          f"linger.ms={r['linger_ms']}{' idempotent' if r['idempotent'] else ''}, {r['value_size']} B keyless "
          f"records round-robin over every partition; phases bounded by {r['records']:,} records "
          f"(hot: {r['hot_records']:,}) and {r['phase_seconds']:g} s")
    topics = -(-r["partitions"] // r["topic_partitions"])
    print(f"cluster: {n_s} partitions (hot 6 + base 50), then {n_g:,} (+ N = {r['partitions']:,} as {topics} "
          f"topics of up to {r['topic_partitions']} partitions, {r['create_batch']} topic(s) per CreateTopics "
          f"request, one request after another)")
    print()
    w, c = 46, 12
    big = f"N={r['partitions']:,}"
    print(f"{'':{w}} {'~50':>{c}} {big:>{c}} {'N / ~50':>9}   goal (issue 29)")
    rows: list[tuple[str, Any, Any, str, str]] = []
    for phase, name, goal_ratio, goal_cpu in (
            ("spread", f"spread produce ({BASE[1]} / {r['partitions']:,} p.)", ">= 0.5", "<= 10 us at N=3,000"),
            ("hot", "hot produce (6 p., the rest idle)", ">= 0.95", "")):
        a, b = get(s, phase, "records_per_sec"), get(g, phase, "records_per_sec")
        rows.append((f"{name}, records/s", a, b, ratio(b, a), f"ratio {goal_ratio}"))
        rows.append((f"{phase} produce, broker CPU us/record", get(s, phase, "broker_cpu_us_per_record"),
                     get(g, phase, "broker_cpu_us_per_record"), "", goal_cpu))
    idle_s, idle_g = get(s, "idle", "cores"), get(g, "idle", "cores")
    rows.append(("idle, 3 brokers, cores", idle_s, idle_g, "", ""))
    per_k_s = None if idle_s is None else round(idle_s / (n_s / 1000), 4)
    per_k_g = None if idle_g is None else round(idle_g / (n_g / 1000), 4)
    marginal = "-" if idle_g is None or idle_s is None else f"{(idle_g - idle_s) / (r['partitions'] / 1000):.4f}"
    rows.append(("idle, cores per 1,000 partitions in cluster", per_k_s, per_k_g, "",
                 f"<= 0.005 (marginal: {marginal} per 1,000 added)"))
    gc = g.get("create", {})
    rows.append(("create: all led in every broker's Metadata, s", get(s, "create", "leaders_s"),
                 gc.get("leaders_s"), "",
                 f"<= 20 s at 10,000 (requests answered after {cell(gc.get('request_s'))} s; "
                 f"ISRs full after {cell(gc.get('isr_full_s'))} s)"))
    floor = r.get("write_floor")
    if floor:
        rows.insert(2, ("baseline: 3 appends of 170 B (kernel), us", round(3 * floor["few_us_per_append"], 2),
                        round(3 * floor["many_us_per_append"], 2), "",
                        f"one writev to one of 50 / {floor['files']:,} files, x3 (RF 3): the floor under the line above"))
    for x_label, a, b, q, goal in rows:
        print(f"{x_label:{w}} {cell(a, ',' if isinstance(a, int) else ''):>{c}} "
              f"{cell(b, ',' if isinstance(b, int) else ''):>{c}} {q:>9}   {goal}".rstrip())
    for when in ("memory_after_create", "memory_after_produce"):
        for what, unit in (("rss_mb", "RSS MB"), ("open_files", "open files")):
            label = f"{unit} per broker, {when.removeprefix('memory_').replace('_', ' ')}"
            a = "/".join(f"{v[what]:g}" for v in (get(s, when) or {}).values()) or "-"
            b = "/".join(f"{v[what]:g}" for v in (get(g, when) or {}).values()) or "-"
            print(f"{label:{w}} {a:>{c}} {b:>{c}}")
    a = "/".join(f"{v.get('longest_ms', '-')}" for v in (get(s, "gc_after_produce") or {}).values()) or "-"
    b = "/".join(f"{v.get('longest_ms', '-')}" for v in (get(g, "gc_after_produce") or {}).values()) or "-"
    print(f"{'longest full GC pause per broker, ms':{w}} {a:>{c}} {b:>{c}}   <= 10 (one request's budget)")
    print()
    for name, level in (("~50", s), (f"N={r['partitions']:,}", g)):
        x = level.get("gc_after_produce")
        if x:
            per = "; ".join(f"broker {b}: {v.get('full_collections', 0):g} full ({v.get('over_budget', 0):g} over "
                            f"10 ms), longest {v.get('longest_ms', '-')} ms, "
                            f"last {v.get('last_ms', '-')} ms, {v.get('freezes', 0):g} freezes, {v.get('thaws', 0):g} thaws"
                            for b, v in x.items())
            print(f"garbage collection at {name}, since the broker served: {per}")
    for name, level in (("~50", s), (f"N={r['partitions']:,}", g)):
        for phase in ("hot", "spread"):
            x = level.get(phase)
            if x is None:
                continue
            note = "" if x["complete"] else (f"; INCOMPLETE: {x['acknowledged']:,} of {x['records_asked']:,} "
                                              f"acknowledged within the bound ({x['sent']:,} sent, rest purged)")
            if x["failed"]:
                note += f"; {x['failed']:,} failed, first: {x['first_error']}"
            if not x["warm_up_complete"]:
                note += "; warm-up not all acknowledged"
            cpu = ", ".join(f"broker {b} {v}" for b, v in x["broker_cpu_s"].items())
            req = x.get("requests") or {}
            if req and x["acknowledged"]:
                n = x["acknowledged"]
                note += (f"; {req['produce_requests']:,} Produce requests and {req['follower_fetches']:,} follower "
                         f"fetches ({req['produce_requests'] / n:.3f} and {req['follower_fetches'] / n:.3f} per record)")
            print(f"{phase} at {name}: {x['acknowledged']:,} records over {x['partitions']:,} partitions in "
                  f"{x['seconds']} s; CPU s: {cpu}, client ({r.get('client', 'librdkafka')}) {x['client_cpu_s']}{note}")
    for name, level in (("~50", s), (f"N={r['partitions']:,}", g)):
        i = level.get("idle")
        if i is not None:
            per = ", ".join(f"broker {b} {v}" for b, v in i["per_broker_cores"].items())
            print(f"idle at {name}: {per} cores over {i['seconds']} s (ZooKeeper {i['zookeeper_cores']})")
    f = r.get("failover")
    if f is not None:
        t, k = f["sigterm"], f["sigkill_controller"]
        print(f"SIGTERM broker {t['broker']} leading {t['partitions_led']:,} partitions -> all led elsewhere: "
              f"{cell(t['all_led_elsewhere_s'])} s (process exited after {cell(t['process_exit_s'])} s); "
              f"goal <= 3 s for a third of 10,000")
        print(f"restarted broker {t['broker']} back in every ISR: {cell(f['restart_back_in_every_isr_s'])} s")
        elections = k["controller_epoch_after"] - k["controller_epoch_before"]
        print(f"SIGKILL controller {k['broker']} leading {k['partitions_led']:,} partitions -> all led elsewhere: "
              f"{cell(k['all_led_elsewhere_s'])} s (session timeout {f['session_timeout_ms'] / 1000:g} s; goal <= "
              f"session + 3 s); controller epoch {k['controller_epoch_before']} -> {k['controller_epoch_after']} "
              f"({elections} election{'s' if elections != 1 else ''}; goal 1), new controller {k['new_controller']}")
    if "error" in r:
        print(f"NOT COMPLETED: {r['error']}")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=3000, help="N: partitions added for the second measurement")
    ap.add_argument("--topic-partitions", type=int, default=100, help="partitions per topic of the N")
    ap.add_argument("--records", type=int, default=200_000, help="records per spread produce phase (upper bound)")
    ap.add_argument("--hot-records", type=int, default=None,
                    help="records per hot produce phase (upper bound; default 5 x --records: the 6-partition "
                         "topic takes several times the spread rate, and a phase of ~1 s is too short to compare)")
    ap.add_argument("--phase-seconds", type=float, default=120.0,
                    help="time bound of each produce phase (and of its warm-up)")
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--idempotent", action="store_true", help="enable.idempotence=true (default false)")
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--settle-seconds", type=float, default=3.0, help="pause after creating and between phases")
    ap.add_argument("--create-batch", type=int, default=1,
                    help="topics per CreateTopics request (default 1, one request after another; all N in one "
                         "request made the controller's ZooKeeper transaction too large at 3,000, see the doc)")
    ap.add_argument("--create-timeout", type=float, default=300.0,
                    help="bound on creating the partitions until all are led (and their ISRs full)")
    ap.add_argument("--poll-seconds", type=float, default=0.25, help="Metadata polling interval")
    ap.add_argument("--failover", action="store_true",
                    help="also SIGTERM a broker and SIGKILL the controller at N partitions (off by default)")
    ap.add_argument("--failover-timeout", type=float, default=180.0)
    ap.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker config (repeatable)")
    ap.add_argument("--client", choices=("librdkafka", "minikafka"), default="librdkafka",
                    help="librdkafka sends one Produce request per partition (its issue #1700); minikafka's "
                         "Producer one per leader naming every ready partition, as Kafka's Java client")
    ap.add_argument("--profile-dir", default=None,
                    help="py-spy record each broker while the N partitions are created and during the hot and spread phases, "
                         "and the surviving brokers during the controller SIGKILL (collapsed stacks, thread "
                         "names first, here)")
    ap.add_argument("--count-requests", action=argparse.BooleanOptionalAction, default=True,
                    help="count each produce phase's Produce requests and follower fetches from the brokers' metrics")
    ap.add_argument("--keep-dir", action="store_true",
                    help="keep the cluster's directory (brokers' and ZooKeeper's logs) and print where")
    ap.add_argument("--json", action="store_true")
    return ap


def main() -> None:
    args = build_parser().parse_args()
    if args.hot_records is None:
        args.hot_records = 5 * args.records
    if min(args.partitions, args.topic_partitions, args.create_batch, args.records, args.hot_records) < 1:
        raise SystemExit("--partitions, --topic-partitions, --create-batch, --records and --hot-records must be >= 1")
    try:
        import confluent_kafka  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"confluent_kafka (librdkafka) is needed: {e}") from None
    result = run(args)
    report(result)
    if args.json:
        print(json.dumps(result))
    if "error" in result:
        sys.exit(1)  # printed above, with what was measured before it


if __name__ == "__main__":
    main()
