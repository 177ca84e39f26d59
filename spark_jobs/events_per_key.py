"""Streaming job: records per key per time window, from a topic, updated every micro-batch.

    python -m spark_jobs.events_per_key --topic events                       # console, runs until ^C
    python -m spark_jobs.events_per_key --topic events --available-now \\
        --checkpoint /tmp/epk-chk --out-topic events-per-key                  # one catch-up run

With ``--available-now`` the query reads everything committed when it starts (in micro-batches of
at most ``--max-offsets-per-trigger`` records) and stops; run it again with the same checkpoint and
it continues where it stopped. With ``--out-topic`` each micro-batch's updated window counts are
written as records (key = "<key>@<window start>", value = the count; the latest record per key
is the current count) through the minikafka writer.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import shutil
import sys
import tempfile
from typing import Any

from client.cli.tool_args import add_connection_args
from spark_jobs.job_session import JobSession


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m spark_jobs.events_per_key", description=__doc__.splitlines()[0])
    p.add_argument("--topic", required=True, help="topic (or comma-separated topics) to read")
    p.add_argument("--window", default="1 minute", help="window length (Spark interval), default '1 minute'")
    p.add_argument("--starting-offsets", default="earliest", help="earliest, latest or Spark's per-partition JSON")
    p.add_argument("--max-offsets-per-trigger", type=int, default=100_000, help="records per micro-batch at most")
    p.add_argument("--available-now", action="store_true", help="read what is there now, then stop")
    p.add_argument("--trigger-seconds", type=float, default=5.0, help="micro-batch interval when running on")
    p.add_argument("--checkpoint", default=None, help="checkpoint directory (default: a temporary one)")
    p.add_argument("--out-topic", default=None, help="write counts to this topic instead of the console")
    p.add_argument("--master", help="Spark master URL (default: spark-submit's --master, else local[2])")
    add_connection_args(p)
    return p


def await_query(query: Any) -> bool:
    """Run until the query ends (True: Ctrl-C ended it). Ctrl-C stops the query quietly: py4j's
    reports of the interrupted call and of the JVM going down are not the user's business (they
    printed tracebacks, issue 33), and a stop that fails because the JVM is already gone is fine."""
    try:
        query.awaitTermination()
        return False
    except KeyboardInterrupt:
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
        with contextlib.suppress(Exception):
            query.stop()
        return True


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    job = JobSession("events_per_key", args, read_topics=args.topic)
    spark, bootstrap = job.spark, job.bootstrap
    from pyspark.sql import functions as F  # after the session: pyspark is the spark extra

    events = (spark.readStream.format("minikafka").option("bootstrap.servers", bootstrap)
              .option("subscribe", args.topic).option("startingOffsets", args.starting_offsets)
              .option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger)).load())
    counts = (events.groupBy(F.window("timestamp", args.window).alias("w"),
                             F.coalesce(F.col("key").cast("string"), F.lit("<null>")).alias("key"))
              .count())
    checkpoint = args.checkpoint or tempfile.mkdtemp(prefix="events-per-key-")
    if args.out_topic:
        out_topic = args.out_topic

        def write_counts(batch: Any, _batch_id: int) -> None:
            # The streaming sink appends only; updated windows go through the batch writer.
            (batch.select(F.concat_ws("@", "key", F.col("w.start").cast("string")).alias("key"),
                          F.col("count").cast("string").alias("value"))
             .write.format("minikafka").mode("append").option("bootstrap.servers", bootstrap)
             .option("topic", out_topic).save())

        out = counts.writeStream.outputMode("update").foreachBatch(write_counts)
    else:
        out = (counts.select(F.col("w.start").alias("window_start"), "key", "count").orderBy("window_start", "key")
               .writeStream.format("console").outputMode("complete").option("truncate", "false")
               .option("numRows", "50"))
    out = out.option("checkpointLocation", checkpoint)
    out = out.trigger(availableNow=True) if args.available_now else \
        out.trigger(processingTime=f"{args.trigger_seconds} seconds")
    query = out.start()
    interrupted = await_query(query)
    try:
        progress = list(query.recentProgress)
    except Exception:  # the JVM went down with the Ctrl-C
        progress = []
    rows = sum(pr["numInputRows"] for pr in progress)
    # A checkpoint made up here is a temporary one: gone with the run (one given is kept).
    if args.checkpoint is None:
        shutil.rmtree(checkpoint, ignore_errors=True)
    print(f"events_per_key: {len(progress)} micro-batches, {rows} input records "
          f"({'checkpoint ' + checkpoint if args.checkpoint else 'temporary checkpoint removed'})")
    with contextlib.suppress(Exception) if interrupted else contextlib.nullcontext():
        job.close()
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
