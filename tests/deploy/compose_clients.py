"""Clients on the host against the compose cluster, run by the compose test as subprocesses (in a
mount namespace whose /etc/hosts names broker-1..3 as 127.0.0.1, where the brokers' published
ports are: the brokers advertise their compose names). Every subcommand prints one JSON object last.

  rdkafka  --bootstrap B --topic T --count N [--props JSON]  librdkafka: idempotent acks=all produce,
                                                             then read back in a group
  refused  --bootstrap B --props JSON                        librdkafka's metadata request fails
  leaders  --bootstrap B --topic T                           partition -> [leader, isr]
  keyed    --bootstrap B --topic T --count N                 librdkafka: idempotent acks=all produce of N
                                                             keyed records; each one's [partition, offset,
                                                             key, value] from its delivery report
  dump     --bootstrap B --topic T                           librdkafka: every record of every partition,
                                                             low to high watermark, as [partition, offset,
                                                             key, value] (null key: null)
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


def _keyed(args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": args.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5})
    delivered: list[list[Any]] = []
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            delivered.append([msg.partition(), msg.offset(), msg.key().decode(), msg.value().decode()])

    for i in range(args.count):
        producer.produce(args.topic, key=f"key-{i % 10}".encode(), value=f"spark-{i}".encode(),
                         on_delivery=on_delivery)
        producer.poll(0)
    left = producer.flush(LIBRDKAFKA_TIMEOUT_S)
    return {"records": sorted(delivered), "undelivered": left, "delivery_errors": errors[:5]}


def _dump(args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": f"compose-dump-{time.time_ns()}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        topic = consumer.list_topics(args.topic, timeout=LIBRDKAFKA_TIMEOUT_S).topics[args.topic]
        ends = {p: consumer.get_watermark_offsets(TopicPartition(args.topic, p), timeout=LIBRDKAFKA_TIMEOUT_S)[1]
                for p in sorted(topic.partitions)}
        consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in ends])
        records: list[list[Any]] = []
        at_end: set[int] = set()  # partitions whose end-of-partition event came at or past the high watermark
        deadline = time.monotonic() + LIBRDKAFKA_TIMEOUT_S
        while len(at_end) < len(ends) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err, partition, offset = msg.error(), int(msg.partition() or 0), int(msg.offset() or 0)
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF and offset >= ends[partition]:
                    at_end.add(partition)
                continue
            key, value = msg.key(), msg.value()
            records.append([partition, offset, None if key is None else key.decode(),
                            None if value is None else value.decode()])
    finally:
        consumer.close()
    return {"records": sorted(records, key=lambda r: (r[0], r[1])), "high_watermarks": ends,
            "complete": len(at_end) == len(ends)}


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
    for name in ("rdkafka", "refused", "leaders", "load", "keyed", "dump"):
        s = sub.add_parser(name)
        s.add_argument("--bootstrap", required=True)
        s.add_argument("--topic", default="")
        s.add_argument("--props", default="{}")
        s.add_argument("--count", type=int, default=100)
        s.add_argument("--partitions", type=int, default=3)
        s.add_argument("--rate", type=float, default=100.0)
    args = p.parse_args(argv)
    handler = {"rdkafka": _rdkafka, "refused": _refused, "leaders": _leaders, "load": _load, "keyed": _keyed,
               "dump": _dump}[args.command]
    print(json.dumps(handler(args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
