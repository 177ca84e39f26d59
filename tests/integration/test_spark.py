"""The PySpark connector against a real cluster: local[2] Spark, real brokers, one shared session."""

from __future__ import annotations

import threading
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from helpers import ClusterFixture, wait_for

from client.admin import AdminClient, NewTopic
from client.producer import Producer
from proto import minikafka_pb2 as pb

pytest.importorskip("pyspark")
pytestmark = pytest.mark.integration

Acked = dict[tuple[int, int], bytes]  # (partition, offset) -> value


def make_topic(fx: ClusterFixture, name: str, partitions: int, rf: int = 3, **configs: str) -> None:
    assert fx.cluster is not None and fx.cluster.state is not None
    with AdminClient(fx.cluster.state.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(name, partitions, rf, {"min.insync.replicas": "2", **configs})])
    view = fx.view()

    def leaders() -> bool:
        view.refresh([name])
        return sum(1 for (t, _p), pl in view.partitions.items() if t == name and pl.leader >= 0) == partitions

    wait_for(leaders, what=f"{name} leaders")


def produce(fx: ClusterFixture, topic: str, count: int, start: int = 0, prefix: str = "v") -> Acked:
    assert fx.cluster is not None and fx.cluster.state is not None
    acked: Acked = {}
    with Producer(fx.cluster.state.bootstrap_servers, acks="all", linger_ms=5) as p:
        futs = [(p.send(topic, f"{prefix}{i}".encode(), key=f"k{i}".encode()), f"{prefix}{i}".encode())
                for i in range(start, start + count)]
        p.flush()
        for f, v in futs:
            md = f.result(timeout=30)
            acked[(md.partition, md.offset)] = v
    return acked


def bootstrap(fx: ClusterFixture) -> str:
    assert fx.cluster is not None and fx.cluster.state is not None
    return fx.cluster.state.bootstrap_servers


def read(spark: Any, fx: ClusterFixture, **options: str) -> Any:
    r = spark.read.format("minikafka").option("bootstrap.servers", bootstrap(fx))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def rows_of(df: Any) -> Acked:
    rows = df.select("partition", "offset", "value").collect()
    out = {(r.partition, r.offset): bytes(r.value) for r in rows}
    assert len(out) == len(rows), "a (partition, offset) came out twice"
    return out


def test_batch_read_of_six_partitions_matches_what_was_produced(spark: Any, module_cluster: ClusterFixture) -> None:
    from pyspark.sql import functions as F

    make_topic(module_cluster, "six", 6)
    acked = produce(module_cluster, "six", 12_000)
    df = read(spark, module_cluster, subscribe="six")
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert df.count() == len(acked)
    ranges = {r.partition: (r.lo, r.hi, r.n) for r in
              df.groupBy("partition").agg(F.min("offset").alias("lo"), F.max("offset").alias("hi"),
                                          F.count("*").alias("n")).collect()}
    expected: dict[int, tuple[int, int, int]] = {}
    for (p, o) in acked:
        lo, hi, n = expected.get(p, (o, o, 0))
        expected[p] = (min(lo, o), max(hi, o), n + 1)
    assert ranges == expected
    checksum = df.select(F.sum(F.crc32("value")).alias("c")).collect()[0].c
    assert checksum == sum(zlib.crc32(v) for v in acked.values())
    assert rows_of(df) == acked
    # minPartitions splits partitions into more Spark tasks and still reads each record once.
    split = read(spark, module_cluster, subscribe="six", minPartitions="13")
    assert split.rdd.getNumPartitions() >= 13
    assert rows_of(split) == acked
    # Spark's Kafka schema, headers included on request.
    with_headers = read(spark, module_cluster, subscribe="six", includeHeaders="true")
    assert with_headers.schema.simpleString().endswith("headers:array<struct<key:string,value:binary>>>")


def test_starting_and_ending_offsets_json(spark: Any, module_cluster: ClusterFixture) -> None:
    make_topic(module_cluster, "ranges", 2)
    acked = produce(module_cluster, "ranges", 400)
    df = read(spark, module_cluster, assign='{"ranges":[0,1]}',
              startingOffsets='{"ranges":{"0":10,"1":-2}}', endingOffsets='{"ranges":{"0":25,"1":-1}}')
    want = {k: v for k, v in acked.items() if (k[0] == 0 and 10 <= k[1] < 25) or k[0] == 1}
    assert rows_of(df) == want
    only_one = read(spark, module_cluster, assign='{"ranges":[1]}', startingOffsets='{"ranges":{"1":5}}',
                    endingOffsets='{"ranges":{"1":9}}')
    assert sorted(rows_of(only_one)) == [(1, 5), (1, 6), (1, 7), (1, 8)]
    # A pattern subscription, and a startingTimestamp after everything: nothing to read.
    assert read(spark, module_cluster, subscribePattern="rang.*").count() == 400
    future = str(int(time.time() * 1000) + 3_600_000)
    assert read(spark, module_cluster, subscribe="ranges", startingTimestamp=future,
                startingOffsetsByTimestampStrategy="latest").count() == 0
    with pytest.raises(Exception, match="must give every partition"):
        read(spark, module_cluster, subscribe="ranges", startingOffsets='{"ranges":{"0":1}}').count()


def test_read_committed_reads_only_committed_transactions(spark: Any, module_cluster: ClusterFixture) -> None:
    """kafka.isolation.level (KIP-98): two transactions of our transactional Producer, one committed
    and one aborted (their coordinator's markers; the leader verified each first batch, KIP-890)."""
    topic = "spark-txn"
    make_topic(module_cluster, topic, 1)
    producers = [Producer(bootstrap(module_cluster), transactional_id=f"spark-txn-{name}", linger_ms=1)
                 for name in ("committed", "aborted")]
    committed = {"kafka.isolation.level": "read_committed", "subscribe": topic}
    try:
        for name, p in zip(("committed", "aborted"), producers, strict=True):
            p.init_transactions()
            p.begin_transaction()
            for i in range(3):
                p.send(topic, f"{name}{i}".encode(), partition=0)
            p.flush()
        # Both transactions open: the last stable offset is 0, nothing is read (and nothing waited for).
        assert read(spark, module_cluster, **committed).count() == 0
        producers[0].commit_transaction()
        producers[1].abort_transaction()
    finally:
        for p in producers:
            p.close()
    view = module_cluster.view()
    conn, _pl = view.leader_connection(topic, 0)

    def lso_reached_hw() -> bool:
        r = conn.api.ListOffsets(pb.ListOffsetsRequest(replica_id=-1, isolation_level=pb.READ_COMMITTED, topics=[
            pb.ListOffsetsTopic(name=topic, partitions=[pb.ListOffsetsPartition(partition=0, timestamp=-1)])]),
            timeout=10)
        return r.topics[0].partitions[0].offset == 8  # 6 records and the two markers

    wait_for(lso_reached_hw, what="both markers (EndTxn answers before they are written)")

    def values(**options: str) -> list[str]:
        return sorted(bytes(r.value).decode() for r in read(spark, module_cluster, **options).select("value").collect())

    assert values(**committed) == ["committed0", "committed1", "committed2"]
    assert values(subscribe=topic) == sorted(f"{n}{i}" for n in ("committed", "aborted") for i in range(3))


def test_writer_round_trip_and_clear_errors(spark: Any, module_cluster: ClusterFixture) -> None:
    from pyspark.sql import functions as F

    make_topic(module_cluster, "written", 3)
    src = spark.range(0, 3000).select(F.concat(F.lit("k"), F.col("id").cast("string")).alias("key"),
                                      F.concat(F.lit("value-"), F.col("id").cast("string")).alias("value"))
    src.write.format("minikafka").mode("append").option("bootstrap.servers", bootstrap(module_cluster)) \
        .option("topic", "written").save()
    back = read(spark, module_cluster, subscribe="written")
    got = sorted((bytes(r.key).decode(), bytes(r.value).decode()) for r in back.select("key", "value").collect())
    assert got == sorted((f"k{i}", f"value-{i}") for i in range(3000))
    # Same key -> same partition (the producer's murmur2 partitioner), headers and a topic column.
    rows = [("written", b"h", b"x", [("trace", b"1")])]
    hdf = spark.createDataFrame(rows, "topic string, key binary, value binary, headers array<struct<key:string,"
                                      "value:binary>>")
    hdf.write.format("minikafka").mode("append").option("bootstrap.servers", bootstrap(module_cluster)).save()
    last = read(spark, module_cluster, subscribe="written", includeHeaders="true").where("key = X'68'").collect()
    assert len(last) == 1 and [(h.key, bytes(h.value)) for h in last[0].headers] == [("trace", b"1")]

    # Column names resolve case-insensitively, as in Spark's Kafka sink.
    spark.createDataFrame([("UP", "case")], "KEY string, Value string").write.format("minikafka") \
        .mode("append").option("bootstrap.servers", bootstrap(module_cluster)).option("topic", "written").save()
    up = read(spark, module_cluster, subscribe="written").where("key = CAST('UP' AS BINARY)").collect()
    assert [bytes(r.value) for r in up] == [b"case"]

    with pytest.raises(Exception, match="needs a 'value' column"):
        spark.range(3).write.format("minikafka").mode("append") \
            .option("bootstrap.servers", bootstrap(module_cluster)).option("topic", "written").save()
    with pytest.raises(Exception, match="does not exist"):
        src.write.format("minikafka").mode("append").option("bootstrap.servers", bootstrap(module_cluster)) \
            .option("topic", "no-such-topic").save()


def test_streaming_available_now_in_micro_batches_and_restart(spark: Any, module_cluster: ClusterFixture,
                                                              tmp_path: Path) -> None:
    make_topic(module_cluster, "stream", 3)
    acked = produce(module_cluster, "stream", 3000)
    out, chk = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> Any:
        q = (spark.readStream.format("minikafka").option("bootstrap.servers", bootstrap(module_cluster))
             .option("subscribe", "stream").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "1000").load()
             .select("partition", "offset", "value")
             .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(chk))
             .trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert not q.isActive
        return q

    q = run()
    batches = [p for p in q.recentProgress if p["numInputRows"] > 0]
    assert len(batches) >= 3 and all(p["numInputRows"] <= 1000 for p in batches)
    assert rows_of(spark.read.parquet(str(out))) == acked
    more = produce(module_cluster, "stream", 1500, start=3000)
    run()  # the same checkpoint: only the new records
    assert rows_of(spark.read.parquet(str(out))) == {**acked, **more}


def test_streaming_processing_time_trigger_picks_up_new_records(spark: Any, module_cluster: ClusterFixture,
                                                                 tmp_path: Path) -> None:
    make_topic(module_cluster, "live", 2)
    first = produce(module_cluster, "live", 200)
    seen: Acked = {}
    duplicates: list[tuple[int, int]] = []

    def on_batch(df: Any, _batch_id: int) -> None:
        for r in df.select("partition", "offset", "value").collect():
            if (r.partition, r.offset) in seen:
                duplicates.append((r.partition, r.offset))
            seen[(r.partition, r.offset)] = bytes(r.value)

    q = (spark.readStream.format("minikafka").option("bootstrap.servers", bootstrap(module_cluster))
         .option("subscribe", "live").option("startingOffsets", "earliest").load()
         .writeStream.foreachBatch(on_batch).option("checkpointLocation", str(tmp_path / "chk"))
         .trigger(processingTime="500 milliseconds").start())
    try:
        wait_for(lambda: len(seen) >= 200, timeout_s=60, what="the first records")
        more = produce(module_cluster, "live", 300, start=200)  # arrive while the query runs
        wait_for(lambda: len(seen) >= 500, timeout_s=60, what="the records produced later")
    finally:
        q.stop()
    assert seen == {**first, **more} and not duplicates


def test_streaming_write_to_another_topic(spark: Any, module_cluster: ClusterFixture, tmp_path: Path) -> None:
    make_topic(module_cluster, "pipe-in", 2)
    make_topic(module_cluster, "pipe-out", 2)
    acked = produce(module_cluster, "pipe-in", 800)
    q = (spark.readStream.format("minikafka").option("bootstrap.servers", bootstrap(module_cluster))
         .option("subscribe", "pipe-in").option("startingOffsets", "earliest").load()
         .selectExpr("key", "upper(cast(value as string)) as value")
         .writeStream.format("minikafka").option("bootstrap.servers", bootstrap(module_cluster))
         .option("topic", "pipe-out").option("checkpointLocation", str(tmp_path / "chk"))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    got = sorted(bytes(r.value) for r in read(spark, module_cluster, subscribe="pipe-out").collect())
    assert got == sorted(v.upper() for v in acked.values())


def test_records_above_the_high_watermark_never_appear(spark: Any, cluster: ClusterFixture) -> None:
    # Followers that stay in the ISR (long lag time) while paused: the leader's LEO moves, its HW not.
    cluster.start(replica_lag_time_max_ms="60000")
    make_topic(cluster, "hw", 1)
    acked = produce(cluster, "hw", 100)
    view = cluster.view()
    view.refresh(["hw"])
    leader = view.partitions[("hw", 0)].leader
    followers = [b for b in view.partitions[("hw", 0)].replicas if b != leader]
    assert cluster.cluster is not None
    for b in followers:
        cluster.cluster.signal(b, "STOP")
    try:
        with Producer(bootstrap(cluster), acks=1, enable_idempotence=False) as p:
            futs = [p.send("hw", f"above-{i}".encode()) for i in range(50)]
            p.flush()
            assert all(f.result(timeout=10).offset >= 100 for f in futs)  # appended, not committed
        df = read(spark, cluster, subscribe="hw")
        assert rows_of(df) == acked
        beyond = read(spark, cluster, subscribe="hw", endingOffsets='{"hw":{"0":150}}')
        assert rows_of(beyond) == acked  # an ending offset above the HW is cut at the HW
    finally:
        for b in followers:
            cluster.cluster.signal(b, "CONT")


def test_leader_killed_during_a_read_yields_every_record_once(spark: Any, cluster: ClusterFixture) -> None:
    cluster.start()
    make_topic(cluster, "kill", 3)
    acked = produce(cluster, "kill", 60_000)
    view = cluster.view()
    view.refresh(["kill"])
    victim = view.partitions[("kill", 0)].leader
    # Small fetches make every range take hundreds of round trips, so the kill lands mid-read.
    df = read(spark, cluster, subscribe="kill", **{"kafka.max.partition.fetch.bytes": "4096"})
    result: dict[str, Any] = {}

    def collect() -> None:
        try:
            result["rows"] = rows_of(df)
        except Exception as e:  # reported below
            result["error"] = e

    t = threading.Thread(target=collect)
    t.start()
    tracker = spark.sparkContext.statusTracker()
    wait_for(lambda: tracker.getActiveStageIds() or "rows" in result or "error" in result, timeout_s=60,
             interval_s=0.02, what="the read to start")
    assert cluster.cluster is not None
    cluster.cluster.signal(victim, "KILL")
    assert "rows" not in result and "error" not in result, "the read finished before the kill"
    t.join(180)
    assert not t.is_alive()
    assert "error" not in result, result.get("error")
    assert result["rows"] == acked
    view.refresh(["kill"])
    assert view.partitions[("kill", 0)].leader != victim


def test_example_jobs_run_as_the_readme_says(spark: Any, module_cluster: ClusterFixture, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from spark_jobs import events_per_key, topic_to_parquet

    make_topic(module_cluster, "jobs-in", 3)
    make_topic(module_cluster, "jobs-out", 1)
    acked = produce(module_cluster, "jobs-in", 500)
    out = tmp_path / "parquet"
    assert topic_to_parquet.main(["--bootstrap-server", bootstrap(module_cluster), "--topic", "jobs-in",
                                  "--out", str(out)]) == 0
    assert "wrote 500 rows" in capsys.readouterr().out
    copied = spark.read.parquet(str(out))
    assert sorted(r.value for r in copied.select("value").collect()) == sorted(v.decode() for v in acked.values())
    assert events_per_key.main(["--bootstrap-server", bootstrap(module_cluster), "--topic", "jobs-in",
                                "--available-now", "--out-topic", "jobs-out",
                                "--checkpoint", str(tmp_path / "chk")]) == 0
    assert "500 input records" in capsys.readouterr().out
    counts = read(spark, module_cluster, subscribe="jobs-out").selectExpr("cast(value as string) AS v").collect()
    assert sum(int(r.v) for r in counts) == 500  # every key once (unique keys), one window each


def test_fail_on_data_loss_when_retention_deleted_the_starting_offsets(spark: Any, cluster: ClusterFixture) -> None:
    from client.spark.cluster_io import list_offsets

    cluster.start(log_retention_check_interval_ms="200")
    make_topic(cluster, "retained", 1, **{"segment.bytes": "2048", "retention.bytes": "4096"})
    acked: Acked = {}
    for round_ in range(10):  # separate batches, so segments roll and old ones can go
        acked.update(produce(cluster, "retained", 40, start=40 * round_))
    view = cluster.view()
    log_start = wait_for(lambda: list_offsets(view, {("retained", 0): -2})[("retained", 0)], timeout_s=30,
                         what="retention to delete the first segments")
    start_at_zero = '{"retained":{"0":0}}'
    with pytest.raises(Exception, match="failOnDataLoss=false"):
        read(spark, cluster, subscribe="retained", startingOffsets=start_at_zero).count()
    rows = rows_of(read(spark, cluster, subscribe="retained", startingOffsets=start_at_zero, failOnDataLoss="false"))
    first = min(o for _p, o in rows)  # the log start when the query ran (retention may have moved on)
    assert first >= log_start > 0
    assert rows == {k: v for k, v in acked.items() if k[1] >= first}


def test_a_compacted_topic_is_read_through_its_gaps_without_data_loss(spark: Any, cluster: ClusterFixture) -> None:
    from client.consumer import Consumer
    from client.structs import TopicPartition

    cluster.start(log_cleaner_backoff_ms="200")
    make_topic(cluster, "compacted", 1, **{"cleanup.policy": "compact", "segment.bytes": "2048",
                                           "min.cleanable.dirty.ratio": "0.01"})
    latest: dict[bytes, bytes] = {}
    with Producer(bootstrap(cluster), acks="all", linger_ms=1) as p:
        for round_ in range(20):  # each round its own batches, so segments roll between updates
            for i in range(20):
                p.send("compacted", f"r{round_}-k{i}".encode(), key=f"k{i}".encode())
                latest[f"k{i}".encode()] = f"r{round_}-k{i}".encode()
            p.flush(30)
        for i in range(40):  # keys of their own after the updates: every update leaves the active segment
            p.send("compacted", b"filler", key=f"filler-{i}".encode())
        p.flush(30)
    tp = TopicPartition("compacted", 0)

    def consumed() -> dict[tuple[int, int], bytes] | None:
        """What a consumer reads from the start once the cleaner has left one record of each key."""
        with Consumer(bootstrap_servers=bootstrap(cluster), auto_offset_reset="earliest") as c:
            c.assign([tp])
            end = c.end_offsets([tp])[tp]
            got = []
            deadline = time.monotonic() + 20
            while c.position(tp) < end and time.monotonic() < deadline:
                got += c.poll(timeout_ms=200)
        updates = [r for r in got if r.key in latest]
        if len(updates) != len(latest) or {r.key: r.value for r in updates} != latest:
            return None
        return {(r.partition, r.offset): r.value for r in got}

    expected = wait_for(consumed, timeout_s=60, interval_s=0.5, what="the compacted topic cleaned")
    assert len(expected) < 20 * 20  # gaps: most of the offsets below the high watermark are gone
    # Many small ranges (minPartitions): most of them lie wholly in a gap or end in one; none of that
    # is data loss (failOnDataLoss defaults to true), and no range waits for records that are gone (a
    # range stuck in a gap would fail after readRetryTimeoutMs without progress).
    rows = rows_of(read(spark, cluster, subscribe="compacted", minPartitions="16", readRetryTimeoutMs="5000"))
    assert rows == expected
