"""``minikafka perf produce | consume``: mirrors kafka-producer-perf-test.sh and kafka-consumer-perf-test.sh."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from client.admin import AdminClient
from client.cli.progress import Progress
from client.cli.tool_args import (
    add_connection_args,
    bootstrap_from_args,
    parse_acks,
    print_result,
    security_from_args,
)
from client.cli.topic_checks import require_topic
from client.consumer import Consumer
from client.producer import Producer
from proto import errors


def add_parser(sub: Any) -> None:
    perf = sub.add_parser("perf", help="producer and consumer performance tests")
    psub = perf.add_subparsers(dest="perf_command", metavar="SUBCOMMAND")
    psub.required = True
    pp = psub.add_parser("produce", help="kafka-producer-perf-test")
    add_connection_args(pp)
    pp.add_argument("--topic", required=True, help="the topic to write to")
    pp.add_argument("--num-records", type=int, required=True, help="how many records to send")
    pp.add_argument("--record-size", type=int, default=100, help="bytes per record value (default 100)")
    pp.add_argument("--throughput", type=int, default=-1, help="records/s cap; -1 for none")
    pp.add_argument("--acks", default="all", choices=["0", "1", "all", "-1"], help="as the producer's acks (default all)")
    pp.add_argument("--batch-size", type=int, default=65536, help="producer batch.size in bytes")
    pp.add_argument("--linger-ms", type=int, default=2, help="producer linger.ms")
    pp.set_defaults(func=cmd_perf_produce)
    pc = psub.add_parser("consume", help="kafka-consumer-perf-test")
    add_connection_args(pc)
    pc.add_argument("--topic", required=True, help="the topic to read (it must exist)")
    pc.add_argument("--messages", type=int, required=True, help="how many records to consume")
    pc.add_argument("--timeout-ms", type=int, default=30000,
                    help="give up after this long without new records (default 30000)")
    pc.set_defaults(func=cmd_perf_consume)


def cmd_perf_produce(args: argparse.Namespace) -> int:
    acks = parse_acks(args.acks)
    value = b"x" * args.record_size
    latencies: list[float] = []
    progress = Progress()
    with Producer(bootstrap_from_args(args), security=security_from_args(args), acks=acks, enable_idempotence=acks == "all", batch_size=args.batch_size,
                  linger_ms=args.linger_ms, buffer_memory=1_000_000) as producer:
        perf = time.perf_counter
        start = perf()
        window: list[float] = []  # latencies since the last report, as Kafka's periodic line

        def report(sent: int) -> str:
            now_lat = sorted(x * 1000 for x in latencies[len(window):]) or [0.0]
            window[:] = latencies[:]
            return (f"{sent} records sent, {sent / max(1e-9, perf() - start):,.1f} records/sec, "
                    f"{sum(now_lat) / len(now_lat):.1f} ms avg latency, {now_lat[-1]:.1f} ms max latency")

        def record_latency(t0: float) -> Any:
            return lambda _f: latencies.append(perf() - t0)

        # Kafka's perf tool counts a record when its acknowledgement arrives: a failed send (too
        # large, not authorized, timed out) is an error, never a record sent.
        failures: list[BaseException] = []

        def on_done(f: Any) -> None:
            e = f.exception()
            if e is not None:
                failures.append(e)

        for i in range(args.num_records):
            try:
                fut = producer.send(args.topic, value)
            except errors.KafkaError as e:
                failures.append(e)
                continue
            fut.add_done_callback(on_done)
            if i % 10 == 0:
                fut.add_done_callback(record_latency(perf()))
            if args.throughput > 0:
                ahead = (i + 1) / args.throughput - (perf() - start)
                if ahead > 0:
                    time.sleep(ahead)
            if progress.due():
                progress.update(report(i + 1))
        producer.flush()
        elapsed = perf() - start
    progress.done()
    acked = args.num_records - len(failures)
    if failures:
        print(f"{len(failures)} of {args.num_records} records failed: {failures[0]}", file=sys.stderr)
    lat = sorted(x * 1000 for x in latencies) or [0.0]

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(len(lat) * q))]

    summary = {"records": acked, "failed": len(failures), "records_per_sec": acked / elapsed,
               "mb_per_sec": acked * args.record_size / elapsed / (1024 * 1024),
               "avg_latency_ms": sum(lat) / len(lat), "max_latency_ms": lat[-1], "p50_ms": pct(0.5),
               "p95_ms": pct(0.95), "p99_ms": pct(0.99), "p999_ms": pct(0.999)}
    print_result(args, summary,
                 f"{acked} records sent, {summary['records_per_sec']:.1f} records/sec "
                 f"({summary['mb_per_sec']:.2f} MB/sec), {summary['avg_latency_ms']:.2f} ms avg latency, "
                 f"{summary['max_latency_ms']:.2f} ms max latency, {summary['p50_ms']:.0f} ms 50th, "
                 f"{summary['p95_ms']:.0f} ms 95th, {summary['p99_ms']:.0f} ms 99th, {summary['p999_ms']:.0f} ms 99.9th.")
    return 1 if failures else 0


def cmd_perf_consume(args: argparse.Namespace) -> int:
    require_topic(args, args.topic)
    consumer = Consumer(args.topic, bootstrap_servers=bootstrap_from_args(args), security=security_from_args(args),
                        auto_offset_reset="earliest",
                        max_poll_records=10_000)
    n = nbytes = 0
    start = time.perf_counter()
    last = start
    progress = Progress()
    try:
        while n < args.messages:
            records = consumer.poll(timeout_ms=500)
            if progress.due():
                progress.update(f"{n} of {args.messages} messages consumed, "
                                f"{n / max(1e-9, time.perf_counter() - start):,.0f} msg/s, "
                                f"{nbytes / (1024 * 1024):.1f} MB")
            if not records:
                if time.perf_counter() - last > args.timeout_ms / 1000.0:
                    break
                continue
            last = time.perf_counter()
            n += len(records)
            nbytes += sum(len(r.value or b"") for r in records)
    finally:
        consumer.close()
        progress.done()
    elapsed = max(1e-9, time.perf_counter() - start)
    summary = {"messages": n, "mb": nbytes / (1024 * 1024), "mb_per_sec": nbytes / (1024 * 1024) / elapsed,
               "messages_per_sec": n / elapsed, "seconds": elapsed}
    print_result(args, summary, "data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec\n"
                                f"{summary['mb']:.4f}, {summary['mb_per_sec']:.4f}, {n}, {summary['messages_per_sec']:.4f}")
    if n < args.messages:
        # kafka-consumer-perf-test's warning, with what the topic holds: asking for more than exists
        # is the usual cause.
        with AdminClient(bootstrap_from_args(args), security=security_from_args(args)) as admin:
            held = sum(max(0, p.high_watermark - p.log_start_offset)
                       for d in admin.describe_topics([args.topic]) for p in d.partitions)
        print(f"error: exiting before consuming the expected number of messages: {n} of {args.messages} "
              f"consumed, none new for {args.timeout_ms} ms (--timeout-ms); topic {args.topic!r} holds {held} "
              f"records below its high watermarks", file=sys.stderr)
        return 1
    return 0
