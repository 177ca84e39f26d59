"""Produce throughput and latency through the project's own producer, RF=1 acks=1 vs RF=3 acks=all.

Starts its own local cluster (ZooKeeper + 3 broker processes on loopback, in a
temporary directory; the inter-broker plane is mutual TLS, as always), creates two topics - ``rf1`` (replication factor 1) and
``rf3`` (replication factor 3, min.insync.replicas=2) - and, in the same run,
produces 100-byte records to each from this one process with
``client.producer.Producer`` (records encoded by the client, batched,
pipelined; idempotent for acks=all). Latency is from the send() call (time
blocked on a full buffer included, as in Kafka's producer perf tool) to the
acknowledgement, sampled on every 50th record.

With ``--tls`` a second cluster started with ``cluster up --secure`` (clients on
TLS + SCRAM-SHA-256, ACLs on, the producer as its admin user) runs the RF=3
acks=all case too, and the ratio TLS / plaintext is printed (issue 13's goal: >= 0.8).

With ``--rate N`` the same two cases also run at a fixed offered load of N records/s (paced
sends) and their p50/p99 go in ``latency_at_rate``: latency at moderate load, where the producer
is not saturated; ``--rate-linger-ms`` gives those runs their own linger (the issue's latency
figure is at ``linger_ms=0`` while the throughput figures use the default of 2). ``--bulk`` adds the bulk API figure: ``Producer.send_batch`` of 1000 values per
call, RF=3 acks=all. When confluent-kafka is installed, librdkafka's own producer
(``confluent_kafka.Producer``: acks=all, idempotent, the same linger, 100-byte values) runs the
RF=3 case too, through the brokers' Kafka listeners, next to the project's producer in the same
run (and at the fixed rate with ``--rate``); without it that part is skipped with the reason printed.
Every case reports the CPU seconds of this (producer) process and of each
broker (``/proc/<pid>/stat``) during the case, and the brokers' kernel share, so each run shows
where the time went. The brokers' kernel time depends on the page cache: on this VM, a page the
guest has not handed out recently costs 10-15x more to write than a recycled one, so once the run
has filled the recently freed pages every case's log writes cost more. The last throughput case's
log bytes are therefore written again with plain ``os.write`` to a new file right after it - the
same bytes in the same page-cache state - and that CPU time is printed as the baseline.

    python bench/replication_bench.py [--records 400000] [--partitions 6] [--linger-ms 2] [--rate 20000]
                                      [--rate-linger-ms 0] [--bulk] [--tls] [--no-librdkafka] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from client.connection import ClusterView
from client.ops.local_cluster import LocalCluster
from client.producer import Producer
from proto import minikafka_pb2 as pb
from proto.transport import PLAINTEXT_SECURITY, ChannelSecurity

VALUE = b"v" * 100
SAMPLE_EVERY = 50


def create_topics(bootstrap: str, partitions: int, security: ChannelSecurity = PLAINTEXT_SECURITY) -> None:
    view = ClusterView(bootstrap, security=security)
    conn = view.connection(view.bootstrap[0])
    resp = conn.api.CreateTopics(pb.CreateTopicsRequest(topics=[
        pb.CreatableTopic(name="rf1", num_partitions=partitions, replication_factor=1),
        pb.CreatableTopic(name="rf3", num_partitions=partitions, replication_factor=3,
                          configs={"min.insync.replicas": "2"}),
    ], timeout_ms=30000), timeout=40)
    for t in resp.topics:
        if t.error_code != pb.ErrorCode.NONE:
            raise SystemExit(f"cannot create {t.name}: {t.error_message}")
    view.close()


def broker_cpu_split(pids: dict[int, int]) -> dict[int, tuple[float, float]]:
    """(user, system) CPU seconds so far of each broker process (fields 14 and 15 of /proc/<pid>/stat)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[float, float]] = {}
    for broker_id, pid in pids.items():
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[broker_id] = (int(fields[11]) / tick, int(fields[12]) / tick)
        except (OSError, IndexError, ValueError):
            out[broker_id] = (0.0, 0.0)
    return out


def broker_cpu_s(pids: dict[int, int]) -> dict[int, float]:
    """User + system CPU seconds so far of each broker process."""
    return {b: user + system for b, (user, system) in broker_cpu_split(pids).items()}


def bytes_on_disk(roots: list[Path]) -> int:
    """Total size of the files under ``roots`` (the brokers' log directories: segments, indexes)."""
    total = 0
    for root in roots:
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def measured(case: Callable[[], dict[str, Any]], pids: dict[int, int],
             log_dirs: list[Path] | None = None) -> dict[str, Any]:
    """Run ``case`` and add the CPU seconds it cost: this process (producer) and each broker, the
    brokers' system (kernel) share, and with ``log_dirs`` the bytes the brokers wrote there."""
    written0 = bytes_on_disk(log_dirs) if log_dirs is not None else 0
    t0, b0 = os.times(), broker_cpu_split(pids)
    result = case()
    t1, b1 = os.times(), broker_cpu_split(pids)
    result["producer_cpu_s"] = round((t1.user - t0.user) + (t1.system - t0.system), 2)
    zero = (0.0, 0.0)
    result["broker_cpu_s"] = {str(k): round(sum(b1[k]) - sum(b0.get(k, zero)), 2) for k in b1}
    result["broker_system_s"] = round(sum(b1[k][1] - b0.get(k, zero)[1] for k in b1), 2)
    if log_dirs is not None:
        result["bytes_written"] = bytes_on_disk(log_dirs) - written0
    return result


def fresh_write_cost(directory: Path, nbytes: int, chunk: int = 1 << 20) -> float:
    """CPU seconds (almost all system) this process spends writing ``nbytes`` to a new file with plain
    os.write: the page-cache cost of the same bytes at the same moment, the baseline of the brokers'
    system time. On a VM the first touch of a page the guest has not handed out recently is
    expensive, so the same write costs 10-15x more once the page cache has used up the recently
    freed pages (300 MB: 0.05 s of system time, then 0.7-0.8 s): a case's broker CPU moves with
    the run order."""
    path = directory / "fresh-write-baseline.bin"
    buf = b"\0" * chunk
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    try:
        t0 = os.times()
        left = nbytes
        while left > 0:
            left -= os.write(fd, buf[:min(chunk, left)])
        t1 = os.times()
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return (t1.user - t0.user) + (t1.system - t0.system)


def run_bulk(bootstrap: str, topic: str, records: int, args: argparse.Namespace, per_call: int = 1000) -> dict[str, Any]:
    """RF=3 acks=all through ``send_batch``: ``per_call`` values per call, every handle awaited."""
    producer = Producer(bootstrap, acks="all", enable_idempotence=True, linger_ms=args.linger_ms,
                        batch_size=args.batch_size, buffer_memory=args.buffer_memory,
                        kafka_listener=not args.grpc_produce)
    values = [VALUE] * per_call
    try:
        producer.send_batch(topic, values).result(timeout=60)
        perf = time.perf_counter
        start = perf()
        handles = [producer.send_batch(topic, values) for _ in range(max(1, records // per_call))]
        producer.flush()
        elapsed = perf() - start
        for h in handles:  # every record acknowledged (flush returns on failures too)
            h.result(timeout=60)
    finally:
        producer.close()
    sent = max(1, records // per_call) * per_call
    return {"records": sent, "records_per_sec": round(sent / elapsed),
            "mb_per_sec": round(sent * len(VALUE) / elapsed / 1e6, 2), "values_per_call": per_call}


def run(bootstrap: str, topic: str, acks: str | int, records: int, args: argparse.Namespace,
        security: ChannelSecurity = PLAINTEXT_SECURITY, rate: int = -1,
        linger_ms: int | None = None) -> dict[str, Any]:
    latencies: list[float] = []
    offered = rate if rate > 0 else args.throughput
    linger = args.linger_ms if linger_ms is None else linger_ms
    producer = Producer(bootstrap, acks=acks, enable_idempotence=acks == "all", linger_ms=linger,
                        batch_size=args.batch_size, buffer_memory=args.buffer_memory, security=security,
                        kafka_listener=not args.grpc_produce)
    try:
        for _ in range(args.warmup):
            producer.send(topic, VALUE)
        producer.flush()
        perf = time.perf_counter
        start = perf()
        def done_since(t0: float) -> Callable[[Any], None]:
            return lambda _f: latencies.append(perf() - t0)

        for i in range(records):
            sampled = i % SAMPLE_EVERY == 0
            t0 = perf() if sampled else 0.0  # before send(), as Kafka's perf tool: blocking time counts
            fut = producer.send(topic, VALUE)
            if sampled:
                fut.add_done_callback(done_since(t0))
                if offered > 0:  # kafka-producer-perf-test's --throughput: pace the sends
                    ahead = (i + 1) / offered - (perf() - start)
                    if ahead > 0:
                        time.sleep(ahead)
        producer.flush()
        elapsed = perf() - start
    finally:
        producer.close()
    lat_ms = sorted(x * 1000 for x in latencies)
    return {
        "records": records,
        "records_per_sec": round(records / elapsed),
        "mb_per_sec": round(records * len(VALUE) / elapsed / 1e6, 2),
        "p50_ms": round(statistics.median(lat_ms), 2),
        "p99_ms": round(lat_ms[int(len(lat_ms) * 0.99) - 1], 2),
        "max_ms": round(lat_ms[-1], 2),
    }


def librdkafka_missing() -> str | None:
    """Why the librdkafka figure cannot run here (None: it can)."""
    try:
        import confluent_kafka  # noqa: F401
    except ImportError as e:
        return f"confluent_kafka is not installed ({e})"
    return None


def run_librdkafka(kafka_bootstrap: str, topic: str, records: int, args: argparse.Namespace, rate: int = -1,
                   linger_ms: int | None = None) -> dict[str, Any]:
    """The same case as ``run`` through librdkafka at the Kafka listener: acks=all, idempotent.

    Latency is from produce() (time spent retrying a full local queue included, as ``run``
    counts time blocked on a full buffer) to the delivery report, sampled on every 50th record."""
    import confluent_kafka

    offered = rate if rate > 0 else args.throughput
    linger = args.linger_ms if linger_ms is None else linger_ms
    p = confluent_kafka.Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": linger, "batch.size": args.batch_size,
                                  # TCP_NODELAY, as the Java producer and gRPC set it: with Nagle on (librdkafka's
                                  # default) a small request waits for the ACK of the previous one.
                                  "socket.nagle.disable": True})
    latencies: list[float] = []
    failed: list[Any] = []
    perf = time.perf_counter

    def produce(sample_t0: float | None) -> None:
        def report(err: Any, _msg: Any) -> None:
            if err is not None:
                failed.append(err)
            elif sample_t0 is not None:
                latencies.append(perf() - sample_t0)
        for _ in range(1_000_000):  # bounded: a full queue drains as the brokers acknowledge
            try:
                p.produce(topic, VALUE, on_delivery=report)
                return
            except BufferError:
                p.poll(0.001)
        raise RuntimeError("librdkafka's queue never drained")

    for _ in range(args.warmup):
        produce(None)
    if p.flush(60) != 0:
        raise RuntimeError("librdkafka warm-up not acknowledged within 60 s")
    start = perf()
    for i in range(records):
        sampled = i % SAMPLE_EVERY == 0
        produce(perf() if sampled else None)
        if sampled:
            p.poll(0)  # serve delivery reports as the run goes, not all at the end
            if offered > 0:
                ahead = (i + 1) / offered - (perf() - start)
                if ahead > 0:
                    time.sleep(ahead)
    if p.flush(120) != 0:
        raise RuntimeError("librdkafka records not acknowledged within 120 s")
    elapsed = perf() - start
    if failed:
        raise RuntimeError(f"librdkafka: {len(failed)} records failed, first: {failed[0]}")
    lat_ms = sorted(x * 1000 for x in latencies)
    return {
        "records": records,
        "records_per_sec": round(records / elapsed),
        "mb_per_sec": round(records * len(VALUE) / elapsed / 1e6, 2),
        "p50_ms": round(statistics.median(lat_ms), 2),
        "p99_ms": round(lat_ms[int(len(lat_ms) * 0.99) - 1], 2),
        "max_ms": round(lat_ms[-1], 2),
    }


def rate_linger_ms(args: argparse.Namespace) -> int:
    """The linger of the --rate runs: their own if given, else the throughput runs' one."""
    return args.linger_ms if args.rate_linger_ms is None else int(args.rate_linger_ms)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--warmup", type=int, default=20_000)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=1_000_000,
                    help="the producer's batch_size (Kafka's default: 16384; a throughput run wants large batches: "
                         "every request costs the brokers the same few hundred us of gRPC, whatever it carries)")
    ap.add_argument("--linger-ms", type=int, default=2, help="the producer's linger_ms (Kafka 2.x default: 0)")
    ap.add_argument("--rate", type=int, default=0,
                    help="also measure latency at this offered load (records/s), e.g. 20000 (0: skip)")
    ap.add_argument("--rate-linger-ms", type=int, default=None,
                    help="the producer's linger_ms in the --rate runs (default: --linger-ms)")
    ap.add_argument("--bulk", action="store_true", help="also RF=3 acks=all through send_batch (1000 values/call)")
    ap.add_argument("--buffer-memory", type=int, default=8_388_608,
                    help="bytes the producer may hold unacknowledged (Kafka's default: 32 MiB; bounds latency at "
                         "full speed, and must hold several batches per broker to keep each one busy)")
    ap.add_argument("--throughput", type=int, default=-1, help="records/s to offer (-1: as fast as possible)")
    ap.add_argument("--tls", action="store_true", help="also RF=3 acks=all with clients on TLS + SCRAM (--secure)")
    ap.add_argument("--no-librdkafka", action="store_true",
                    help="skip the librdkafka (confluent_kafka.Producer) figure at the Kafka listener")
    ap.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker config for both clusters (repeatable), e.g. log.segment.bytes=67108864")
    ap.add_argument("--grpc-replication", action="store_true",
                    help="followers fetch over gRPC FetchStream (replica.fetch.listener.port=-1), for comparison")
    ap.add_argument("--grpc-produce", action="store_true",
                    help="the producer sends over gRPC ProduceStreams, not the brokers' Kafka listeners, for comparison")
    ap.add_argument("--json", action="store_true")
    return ap


def main() -> None:
    args = build_parser().parse_args()

    root = Path(tempfile.mkdtemp(prefix="replication-bench-"))
    overrides = {"zookeeper.session.timeout.ms": "10000"}
    if args.grpc_replication:
        overrides["replica.fetch.listener.port"] = "-1"
    for item in args.broker_config:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--broker-config {item!r}: expected KEY=VALUE")
        overrides[key.strip()] = value.strip()
    cluster = LocalCluster(root / "cluster", broker_overrides=overrides)
    try:
        state = cluster.up(3)
        create_topics(state.bootstrap_servers, args.partitions)
        pids = {bid: b.pid for bid, b in state.brokers.items()}
        bs = state.bootstrap_servers
        kbs = state.kafka_bootstrap_servers
        data = sorted((root / "cluster").glob("broker-*/data"))  # log.dirs (not ZooKeeper's, not text logs)
        if len(data) != len(pids):
            raise SystemExit(f"expected {len(pids)} broker log directories under {root / 'cluster'}, found {data}")
        a = measured(lambda: run(bs, "rf1", 1, args.records, args), pids, data)
        b = measured(lambda: run(bs, "rf3", "all", args.records, args), pids, data)
        rd_skip = "--no-librdkafka" if args.no_librdkafka else librdkafka_missing()
        rd = None if rd_skip else measured(lambda: run_librdkafka(kbs, "rf3", args.records, args), pids, data)
        bulk = measured(lambda: run_bulk(bs, "rf3", args.records, args), pids, data) if args.bulk else None
        # The baseline of the last throughput case's broker system time: its bytes written to a new
        # file right after it, in the same page-cache state (the file is removed at once).
        last_name, last = ("send_batch", bulk) if bulk else ("RF=3 acks=all, librdkafka", rd) if rd \
            else ("RF=3 acks=all", b)
        baseline = {"case": last_name, "bytes": last["bytes_written"],
                    "cpu_s": round(fresh_write_cost(root, last["bytes_written"]), 2)}
        at_rate: dict[str, Any] | None = None
        if args.rate > 0:
            n = min(args.records, args.rate * 5)  # about five seconds of offered load each
            rate_linger = rate_linger_ms(args)
            at_rate = {"offered_per_sec": args.rate, "linger_ms": rate_linger,
                       "rf1_acks_1": measured(lambda: run(bs, "rf1", 1, n, args, rate=args.rate,
                                                          linger_ms=rate_linger), pids),
                       "rf3_acks_all": measured(lambda: run(bs, "rf3", "all", n, args, rate=args.rate,
                                                            linger_ms=rate_linger), pids)}
            if rd is not None:
                at_rate["rf3_acks_all_librdkafka"] = measured(
                    lambda: run_librdkafka(kbs, "rf3", n, args, rate=args.rate, linger_ms=rate_linger), pids)
    finally:
        cluster.down()
        shutil.rmtree(root, ignore_errors=True)
    tls: dict[str, Any] | None = None
    if args.tls:
        root = Path(tempfile.mkdtemp(prefix="replication-bench-tls-"))
        cluster = LocalCluster(root / "cluster", broker_overrides=overrides)
        try:
            state = cluster.up(3, secure=True)
            security = state.client_security()
            create_topics(state.bootstrap_servers, args.partitions, security)
            tls = run(state.bootstrap_servers, "rf3", "all", args.records, args, security)
        finally:
            cluster.down()
            shutil.rmtree(root, ignore_errors=True)
    result = {"rf1_acks_1": a, "rf3_acks_all": b, "ratio": round(b["records_per_sec"] / a["records_per_sec"], 3),
              "partitions": args.partitions, "batch_size": args.batch_size, "value_size": len(VALUE)}
    result["linger_ms"] = args.linger_ms
    if bulk is not None:
        result["rf3_acks_all_send_batch"] = bulk
    if rd is not None:
        result["rf3_acks_all_librdkafka"] = rd
        result["librdkafka_ratio"] = round(rd["records_per_sec"] / b["records_per_sec"], 3)
    else:
        result["librdkafka_skipped"] = rd_skip
    if at_rate is not None:
        result["latency_at_rate"] = at_rate
    result["fresh_write_baseline"] = baseline
    if tls is not None:
        result["rf3_acks_all_tls_scram"] = tls
        result["tls_ratio"] = round(tls["records_per_sec"] / b["records_per_sec"], 3)
    print(f"{args.records} records of {len(VALUE)} B, {args.partitions} partitions, 3 brokers on loopback")
    print(f"{'':22} {'records/s':>11} {'MB/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    rows = [("RF=1 acks=1", a), ("RF=3 acks=all (min.isr=2)", b)]
    if rd is not None:
        rows.append(("RF=3 acks=all, librdkafka", rd))
    if tls is not None:
        rows.append(("RF=3 acks=all, TLS+SCRAM", tls))
    for name, r in rows:
        print(f"{name:26} {r['records_per_sec']:>11,} {r['mb_per_sec']:>8} {r['p50_ms']:>8} {r['p99_ms']:>8} "
              f"{r['max_ms']:>8}")
    print(f"ratio (RF=3 acks=all) / (RF=1 acks=1): {result['ratio']}")
    if rd is None:
        print(f"librdkafka figure skipped: {rd_skip}")
    else:
        print(f"ratio librdkafka / project producer (RF=3 acks=all, idempotent): {result['librdkafka_ratio']}")
    if bulk is not None:
        print(f"{'RF=3 acks=all, send_batch':26} {bulk['records_per_sec']:>11,} {bulk['mb_per_sec']:>8}")
    if at_rate is not None:
        rate_rows = [("RF=1 acks=1", at_rate["rf1_acks_1"]), ("RF=3 acks=all", at_rate["rf3_acks_all"])]
        if "rf3_acks_all_librdkafka" in at_rate:
            rate_rows.append(("RF=3 acks=all, librdkafka", at_rate["rf3_acks_all_librdkafka"]))
        for name, r in rate_rows:
            print(f"at {args.rate:,} rec/s offered, linger_ms={at_rate['linger_ms']}, {name}: "
                  f"p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms")
    cases = [("RF=1 acks=1", a), ("RF=3 acks=all", b)] + ([("send_batch", bulk)] if bulk is not None else [])
    if rd is not None:
        cases.append(("RF=3 acks=all, librdkafka", rd))
    if at_rate is not None:
        cases.append((f"RF=3 acks=all at {args.rate:,}/s", at_rate["rf3_acks_all"]))
        if "rf3_acks_all_librdkafka" in at_rate:
            # librdkafka's threads are this process's CPU: at linger.ms=0 with records on three leaders
            # they took a whole core here (0.3 s in 3 s at linger.ms=1, or on one leader), which on
            # two cores leaves the brokers too little: its latency at rate is mostly that.
            cases.append((f"RF=3 acks=all at {args.rate:,}/s, librdkafka", at_rate["rf3_acks_all_librdkafka"]))
    for name, r in cases:
        per_broker = ", ".join(f"broker {k} {v}" for k, v in r["broker_cpu_s"].items())
        total = sum(r["broker_cpu_s"].values())
        per_record = total / max(1, r["records"]) * 1e6
        kernel = r["broker_system_s"] / max(1, r["records"]) * 1e6
        print(f"CPU s, {name}: producer {r['producer_cpu_s']}, {per_broker} "
              f"({per_record:.2f} us broker CPU per record, {kernel:.2f} us of it in the kernel)")
    last_case = dict(cases)[baseline["case"]]
    print(f"baseline: the {baseline['bytes'] / 1e6:,.0f} MB the brokers wrote in the {baseline['case']} case, "
          f"written with os.write to a new file right after it, cost {baseline['cpu_s']} CPU s "
          f"({baseline['cpu_s'] / max(1, last_case['records']) * 1e6:.2f} us per record; the brokers' kernel "
          f"time in that case: {last_case['broker_system_s']} s)")
    if tls is not None:
        print(f"ratio TLS+SCRAM / plaintext clients (RF=3 acks=all): {result['tls_ratio']}")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
