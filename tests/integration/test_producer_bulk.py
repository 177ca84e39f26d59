"""Producer.send_batch (issue 15): the bulk path shares send()'s queue, sequences and ordering."""

from __future__ import annotations

from helpers import E, create_topic, leader_of, read_values, wait_for

from client.producer import Producer


def test_send_batch_splits_orders_and_interleaves_with_send(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(2)
    view = cluster.view()
    topic = "bulk"
    assert create_topic(view, topic, replication_factor=2).error_code == E.NONE
    wait_for(lambda: leader_of(view, topic, 0)[0] >= 0 or None)
    # batch_size and buffer_memory small enough that one call makes many batches and blocks on
    # back-pressure (the acks of earlier batches free the space).
    with Producer(c.state.bootstrap_servers, acks="all", batch_size=2048, buffer_memory=16384, linger_ms=0) as p:
        first = p.send(topic, b"single-0", partition=0)
        values = [f"bulk-{i}".encode() for i in range(3000)]
        handle = p.send_batch(topic, values, partition=0)
        last = p.send(topic, b"single-1", partition=0)
        metas = handle.result(timeout=60)
        assert [m.offset for m in metas] == list(range(1, 3001))
        assert {m.partition for m in metas} == {0}
        assert first.result(timeout=30).offset == 0
        assert last.result(timeout=30).offset == 3001
        assert [f.result(timeout=5).offset for f in handle.futures()[:3]] == [1, 2, 3]
        assert len(handle._slices) > 1, "3000 values must not fit one 2 KiB batch"
        keyed = p.send_batch(topic, [b"a", b"b"], keys=[b"k1", b"k2"])
        assert len(keyed.result(timeout=30)) == 2
    conn, _ = view.leader_connection(topic, 0)
    got = read_values(conn, topic, 0)
    assert got[:3002] == ["single-0", *(v.decode() for v in values), "single-1"]


def test_every_kafka_codec_through_a_replicated_partition(cluster) -> None:  # type: ignore[no-untyped-def]
    """gzip, snappy (xerial-framed, as Kafka's Java client), lz4 (independent blocks) and zstd:
    the leader validates inside each (issue 12), followers copy the bytes, a consumer decodes."""
    from client.consumer import Consumer
    from client.structs import TopicPartition

    c = cluster.start(2)
    view = cluster.view()
    codecs = ("gzip", "snappy", "lz4", "zstd")
    for codec in codecs:
        assert create_topic(view, f"z-{codec}", replication_factor=2).error_code == E.NONE
    for codec in codecs:
        wait_for(lambda codec=codec: leader_of(view, f"z-{codec}", 0)[0] >= 0 or None)  # type: ignore[misc]
        with Producer(c.state.bootstrap_servers, acks="all", compression_type=codec) as p:
            sent = [f"{codec}-{i}".encode() * 5 for i in range(300)]
            p.send_batch(f"z-{codec}", sent, partition=0).result(timeout=60)
        consumer = Consumer(bootstrap_servers=c.state.bootstrap_servers, auto_offset_reset="earliest",
                            consumer_timeout_ms=10_000)
        consumer.assign([TopicPartition(f"z-{codec}", 0)])
        got: list[bytes] = []
        for _ in range(100):
            got += [r.value for r in consumer.poll(timeout_ms=500, max_records=500)]
            if len(got) >= len(sent):
                break
        consumer.close()
        assert got == sent, codec
