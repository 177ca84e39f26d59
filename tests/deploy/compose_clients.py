"""Clients on the host against the compose cluster, run by the compose test as subprocesses (in a
mount namespace whose /etc/hosts names broker-1..3 as 127.0.0.1, where the brokers' published
ports are: the brokers advertise their compose names). Every subcommand prints one JSON object last.

  rdkafka  --bootstrap B --topic T --count N [--props JSON]  librdkafka: idempotent acks=all produce,
                                                             then read back in a group
  refused  --bootstrap B --props JSON                        librdkafka's metadata request fails
  leaders  --bootstrap B --topic T                           partition -> [leader, isr]
  load     --bootstrap B --topic T --partitions P --rate R   the chaos workload (client.ops.chaos):
           prints {"acked": n} lines until a line "stop" on stdin, then the history checker's report
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

LIBRDKAFKA_TIMEOUT_S = 60.0


def _rdkafka(args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import Consumer, Producer

    props = json.loads(args.props)
    base = {"bootstrap.servers": args.bootstrap, **props}
    producer = Producer({**base, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    sent = [f"rdkafka-{i}" for i in range(args.count)]
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for value in sent:
        producer.produce(args.topic, value.encode(), on_delivery=on_delivery)
        producer.poll(0)
    left = producer.flush(LIBRDKAFKA_TIMEOUT_S)
    consumer = Consumer({**base, "group.id": f"compose-test-{time.time_ns()}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([args.topic])
    seen: set[str] = set()
    deadline = time.monotonic() + LIBRDKAFKA_TIMEOUT_S
    while time.monotonic() < deadline and not set(sent) <= seen:
        msg = consumer.poll(0.5)
        got = msg.value() if msg is not None and msg.error() is None else None
        if got is not None:
            seen.add(got.decode())
    consumer.close()
    return {"produced": len(sent) - left - len(errors), "delivery_errors": errors[:5],
            "read_back": len(set(sent) & seen)}


def _refused(args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": args.bootstrap, **json.loads(args.props)})
    try:
        md = admin.list_topics(timeout=10)
    except KafkaException as e:
        return {"refused": True, "error": str(e)}
    return {"refused": False, "topics": sorted(md.topics)}


def _leaders(args: argparse.Namespace) -> dict[str, Any]:
    from client.connection import ClusterView

    view = ClusterView(args.bootstrap)
    try:
        view.refresh([args.topic])
        return {str(p): [pl.leader, list(pl.isr)] for (t, p), pl in sorted(view.partitions.items()) if t == args.topic}
    finally:
        view.close()


def _load(args: argparse.Namespace) -> dict[str, Any]:
    from client.ops.chaos import Workload
    from client.ops.history import OK, check

    workload = Workload(args.bootstrap, args.topic, args.partitions, producers=2, rate=args.rate)
    workload.start()
    stop = threading.Event()

    def wait_for_stop() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()

    threading.Thread(target=wait_for_stop, daemon=True).start()
    while not stop.wait(0.5):
        acked = sum(1 for *_, fut in list(workload.pending) if getattr(fut, "done", lambda: False)()
                    and fut.exception() is None)
        print(json.dumps({"acked": acked}), flush=True)
    writes = workload.stop()
    reads = workload.read_all()
    report = check(writes, reads)
    return {"valid": report.valid, "summary": report.summary(), "anomalies": report.anomalies,
            "writes": len(writes), "acked": sum(1 for w in writes if w.status == OK), "read": len(reads)}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("rdkafka", "refused", "leaders", "load"):
        s = sub.add_parser(name)
        s.add_argument("--bootstrap", required=True)
        s.add_argument("--topic", default="")
        s.add_argument("--props", default="{}")
        s.add_argument("--count", type=int, default=100)
        s.add_argument("--partitions", type=int, default=3)
        s.add_argument("--rate", type=float, default=100.0)
    args = p.parse_args(argv)
    handler = {"rdkafka": _rdkafka, "refused": _refused, "leaders": _leaders, "load": _load}[args.command]
    print(json.dumps(handler(args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
