"""``minikafka demo cluster``: a produce/consume round trip against a running cluster.

Creates a topic replicated on every broker (up to 3), produces records with
acks=all to each partition's leader, reads them back below the high watermark
and prints the partition layout. The README's quick start runs it right
after ``minikafka cluster up``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from client.connection import ClusterView, raise_for
from client.ops.local_cluster import ClusterState, local_client_security
from proto import errors
from proto import minikafka_pb2 as pb
from proto.record_batch import Record, decode_batches, encode_batch
from proto.transport import PLAINTEXT_SECURITY


def run_cluster_demo(args: argparse.Namespace) -> int:
    bootstrap = args.bootstrap_server or ClusterState.load(Path(args.dir)).bootstrap_servers
    security = local_client_security(Path(args.dir)) if not args.bootstrap_server else PLAINTEXT_SECURITY
    view = ClusterView(bootstrap, security=security)
    view.refresh()
    rf = min(3, len(view.brokers))
    conn = view.connection(next(iter(view.brokers.values())))
    resp = conn.api.CreateTopics(pb.CreateTopicsRequest(
        topics=[pb.CreatableTopic(name=args.topic, num_partitions=3, replication_factor=rf)], timeout_ms=10000),
        timeout=15)
    code = resp.topics[0].error_code
    if code not in (pb.ErrorCode.NONE, pb.ErrorCode.TOPIC_ALREADY_EXISTS):
        raise_for(code, resp.topics[0].error_message)
    view.refresh([args.topic])
    now = int(time.time() * 1000)
    sent: dict[int, list[bytes]] = {}
    for p in view.partitions_of(args.topic):
        values = [f"hello {i} from partition {p}".encode() for i in range(args.records)]
        batch = encode_batch([Record(value=v, timestamp=now) for v in values])
        leader_conn, pl = view.leader_connection(args.topic, p)
        r = leader_conn.api.Produce(pb.ProduceRequest(acks=-1, timeout_ms=10000, topics=[
            pb.ProduceTopicData(name=args.topic, partitions=[pb.ProducePartitionData(partition=p, records=batch)])]),
            timeout=15)
        pr = r.topics[0].partitions[0]
        raise_for(pr.error_code, pr.error_message)
        sent[p] = values
        print(f"produced {len(values)} records to {args.topic}-{p} (leader {pl.leader}) at offset {pr.base_offset}")
    for p, values in sent.items():
        leader_conn, pl = view.leader_connection(args.topic, p)
        f = leader_conn.api.Fetch(pb.FetchRequest(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20,
                                                  topics=[pb.FetchTopic(name=args.topic, partitions=[
                                                      pb.FetchPartition(partition=p, fetch_offset=0,
                                                                        current_leader_epoch=pl.leader_epoch,
                                                                        partition_max_bytes=1 << 20)])]),
                                  timeout=15)
        fp = f.topics[0].partitions[0]
        raise_for(fp.error_code)
        got = [r.value for r in decode_batches(fp.records)]
        if got[-len(values):] != values:
            raise errors.CorruptMessageError(f"{args.topic}-{p}: read back {got[-len(values):]!r}, sent {values!r}")
        print(f"consumed {len(got)} records from {args.topic}-{p}: the last {len(values)} are the ones just "
              f"produced; high watermark {fp.high_watermark}")
    view.refresh([args.topic])
    for p in view.partitions_of(args.topic):
        pl = view.partitions[(args.topic, p)]
        print(f"Topic: {args.topic}\tPartition: {p}\tLeader: {pl.leader}\tLeaderEpoch: {pl.leader_epoch}\t"
              f"Replicas: {','.join(map(str, pl.replicas))}\tIsr: {','.join(map(str, pl.isr))}")
    view.close()
    return 0
