"""The PySpark connector: format ``minikafka`` with Spark's Kafka-source options and schema.

    from client.spark import local_session, register
    spark = local_session("my-job")          # or any SparkSession, then: register(spark)
    df = (spark.read.format("minikafka").option("bootstrap.servers", "127.0.0.1:9392")
          .option("subscribe", "events").load())

``client.spark.options`` (pure) and ``client.spark.cluster_io`` do not import
pyspark; only ``client.spark.datasource`` does, and it is imported on demand.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any


def register(spark: Any) -> Any:
    """Register the ``minikafka`` format on a SparkSession (returns the session)."""
    from client.spark.datasource import MinikafkaDataSource

    spark.dataSource.register(MinikafkaDataSource)
    return spark


DEFAULT_MASTER = "local[2]"


def choose_master(requested: str | None, environ: Mapping[str, str]) -> str | None:
    """The master a job's session asks for: the one given (``--master``); else none when the job runs
    under spark-submit (its ``--master`` reaches the driver through the JVM's spark.master, which a
    builder's .master() would override: issue 33); else ``local[2]``."""
    if requested:
        return requested
    return None if "PYSPARK_GATEWAY_PORT" in environ else DEFAULT_MASTER


def local_session(app_name: str = "minikafka", master: str | None = DEFAULT_MASTER, **conf: str) -> Any:
    """A SparkSession on loopback with the format registered.

    Python workers run this interpreter (so they import this project), Spark binds 127.0.0.1, and
    the UI stays off: what the jobs, tests and benchmark all want on one machine.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # PySpark forks (with a preexec_fn) to start its JVM; gRPC's fork handlers, enabled by default,
    # break that child when another thread is inside gRPC at that moment ("Java gateway process
    # exited"). gRPC reads this when first imported: it only helps a program that has not imported
    # grpc yet; the tests and the Spark bench set it before their first import.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder if master is None else SparkSession.builder.master(master)
    builder = (builder.appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.driver.host", "127.0.0.1"))
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return register(spark)
