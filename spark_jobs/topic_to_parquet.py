"""Batch job: copy a topic's committed records to Parquet, one Spark task per partition range.

    python -m spark_jobs.topic_to_parquet --topic events --out /tmp/events-parquet
    python -m spark_jobs.topic_to_parquet --topic events --out DIR \\
        --starting-offsets '{"events":{"0":100,"1":-2}}' --min-partitions 8

Keys and values are written as UTF-8 strings next to Spark's Kafka columns (topic, partition,
offset, timestamp, timestampType). Prints the number of rows written and per-partition offsets.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from client.cli.tool_args import add_connection_args
from spark_jobs.job_session import JobSession


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m spark_jobs.topic_to_parquet", description=__doc__.splitlines()[0])
    p.add_argument("--topic", required=True, help="topic (or comma-separated topics) to read")
    p.add_argument("--out", required=True, type=Path, help="output directory (replaced)")
    p.add_argument("--starting-offsets", default="earliest", help="earliest or Spark's per-partition JSON")
    p.add_argument("--ending-offsets", default="latest", help="latest or Spark's per-partition JSON")
    p.add_argument("--min-partitions", type=int, default=None, help="split partitions into at least N tasks")
    p.add_argument("--master", help="Spark master URL (default: spark-submit's --master, else local[2])")
    add_connection_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    job = JobSession("topic_to_parquet", args, read_topics=args.topic)
    spark, bootstrap = job.spark, job.bootstrap

    reader = (spark.read.format("minikafka").option("bootstrap.servers", bootstrap)
              .option("subscribe", args.topic).option("startingOffsets", args.starting_offsets)
              .option("endingOffsets", args.ending_offsets))
    if args.min_partitions:
        reader = reader.option("minPartitions", str(args.min_partitions))
    started = time.monotonic()
    df = reader.load().selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "topic",
                                  "partition", "offset", "timestamp", "timestampType")
    df.write.mode("overwrite").parquet(str(args.out))
    written = spark.read.parquet(str(args.out))
    total = written.count()
    seconds = time.monotonic() - started
    parts = [{"topic": r["topic"], "partition": r["partition"], "rows": r["count(1)"], "from_offset": r["min(offset)"]}
             for r in written.groupBy("topic", "partition").agg({"offset": "min", "*": "count"})
             .orderBy("topic", "partition").collect()]
    if args.output == "json":  # --output is the summary's format; the Parquet directory is --out
        print(json.dumps({"rows": total, "out": str(args.out), "seconds": seconds, "partitions": parts}))
    else:
        print(f"wrote {total} rows to {args.out} in {seconds:.1f}s")
        for e in parts:
            print(f"  {e['topic']}-{e['partition']}: {e['rows']} rows from offset {e['from_offset']}")
    job.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
