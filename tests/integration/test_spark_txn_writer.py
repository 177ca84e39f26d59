"""The Spark writer in transactions (issue 31, KIP-98): with ``transactionalIdPrefix`` each task's
rows go in one transaction (id ``<prefix>-<Spark partition id>``), committed when the task's write
ends and aborted when the task fails; read back with kafka.isolation.level=read_committed. One
local[2] Spark session (the shared fixture) and a module cluster."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import ClusterFixture, wait_for

from client.admin import AdminClient, NewTopic

pytest.importorskip("pyspark")
pytestmark = pytest.mark.integration

TOPIC = "spark-txn-written"


def bootstrap(fx: ClusterFixture) -> str:
    assert fx.cluster is not None and fx.cluster.state is not None
    return fx.cluster.state.bootstrap_servers


def make_topic(fx: ClusterFixture, name: str, partitions: int) -> None:
    with AdminClient(bootstrap(fx)) as admin:
        admin.create_topics([NewTopic(name, partitions, 3, {"min.insync.replicas": "2"})])
    view = fx.view()

    def leaders() -> bool:
        view.refresh([name])
        return sum(1 for (t, _p), pl in view.partitions.items() if t == name and pl.leader >= 0) == partitions

    wait_for(leaders, what=f"{name} leaders")


def values(spark: Any, fx: ClusterFixture, isolation: str) -> list[str]:
    df = spark.read.format("minikafka").option("bootstrap.servers", bootstrap(fx)).option("subscribe", TOPIC) \
        .option("kafka.isolation.level", isolation).load()
    return sorted(bytes(r.value).decode() for r in df.select("value").collect())


def test_each_task_commits_its_rows_in_one_transaction_and_a_failed_task_aborts(
        spark: Any, module_cluster: ClusterFixture) -> None:
    from pyspark.sql import functions as F

    make_topic(module_cluster, TOPIC, 2)
    src = spark.range(0, 200, numPartitions=2).select(F.concat(F.lit("ok-"), F.col("id").cast("string")).alias("value"))
    src.write.format("minikafka").mode("append").option("bootstrap.servers", bootstrap(module_cluster)) \
        .option("topic", TOPIC).option("transactionalIdPrefix", "spark-txn-test").save()
    expected = sorted(f"ok-{i}" for i in range(200))
    assert values(spark, module_cluster, "read_committed") == expected

    # A task that fails after some of its rows were sent: rows arrive in Arrow batches of 10 and the
    # sixth batch names a topic that does not exist, so the task raises after writing 50 rows to
    # TOPIC. Its transaction is aborted: read_committed never sees any of them.
    conf = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(conf)
    spark.conf.set(conf, "10")
    try:
        rows = [(TOPIC, f"bad-{i}") for i in range(50)] + [("spark-txn-missing", "boom")]
        bad = spark.createDataFrame(rows, "topic string, value string").coalesce(1)
        with pytest.raises(Exception, match="spark-txn-missing"):
            bad.write.format("minikafka").mode("append").option("bootstrap.servers", bootstrap(module_cluster)) \
                .option("transactionalIdPrefix", "spark-txn-bad").save()
    finally:
        spark.conf.set(conf, before)
    assert values(spark, module_cluster, "read_committed") == expected
