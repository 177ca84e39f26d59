"""``minikafka verify-replicas``: do all replicas hold the same batches below the HW? (Kafka's
ReplicaVerificationTool.)

For every partition the leader's high watermark is the bound. Each replica is read
with replica id -2 (the debugging reader a follower also answers) from the
latest log start offset among them, and every whole batch below the bound is
compared by (base offset, last offset, header CRC, CRC-32C recomputed over its
bytes) - so a replica holding different bytes under the same header is caught.
Exit code 1 on any divergence; unreachable replicas are reported, not hidden.
"""

from __future__ import annotations

from typing import Any

import grpc

from client.connection import ClusterView
from proto import errors
from proto import minikafka_pb2 as pb
from proto.record_batch import ATTRIBUTES_OFFSET, crc32c, iter_headers

E = pb.ErrorCode
Fingerprint = tuple[int, int, int, int]


def _replica_batches(view: ClusterView, address: str, topic: str, partition: int, start: int,
                     end: int) -> list[Fingerprint]:
    out: list[Fingerprint] = []
    offset = start
    api = view.connection(address).api
    for _ in range(1_000_000):
        if offset >= end:
            break
        req = pb.FetchRequest(replica_id=-2, max_wait_ms=0, min_bytes=1, max_bytes=4 << 20, topics=[
            pb.FetchTopic(name=topic, partitions=[pb.FetchPartition(partition=partition, fetch_offset=offset,
                                                                    partition_max_bytes=4 << 20)])])
        pr = api.Fetch(req, timeout=10, wait_for_ready=True).topics[0].partitions[0]
        if pr.error_code != E.NONE:
            raise errors.for_code(pr.error_code)(f"{topic}-{partition} at {address}")
        data = pr.records
        progressed = False
        for pos, h in iter_headers(data):
            if h.last_offset >= end or h.base_offset >= end:
                return out
            if h.last_offset >= offset:
                out.append((h.base_offset, h.last_offset, h.crc,
                            crc32c(memoryview(data)[pos + ATTRIBUTES_OFFSET:pos + h.size])))
                offset = h.last_offset + 1
                progressed = True
        if not progressed:
            break
    return out


def verify(view: ClusterView, topic: str | None) -> list[dict[str, Any]]:
    md = view.refresh([topic] if topic else None)
    report = []
    for t in sorted(md.topics, key=lambda t: t.name):
        if t.error_code not in (E.NONE,):
            raise errors.for_code(t.error_code)(f"topic {t.name!r}")
        for p in sorted(t.partitions, key=lambda p: p.partition):
            entry: dict[str, Any] = {"topic": t.name, "partition": p.partition, "leader": p.leader,
                                     "replicas": list(p.replicas), "status": "OK", "detail": ""}
            report.append(entry)
            if p.leader < 0 or p.leader not in view.brokers:
                entry.update(status="UNAVAILABLE", detail="no leader")
                continue
            starts: dict[int, int] = {}
            hw = -1
            for r in p.replicas:
                try:
                    req = pb.FetchRequest(replica_id=-2, max_wait_ms=0, topics=[pb.FetchTopic(
                        name=t.name, partitions=[pb.FetchPartition(partition=p.partition, fetch_offset=0,
                                                                   partition_max_bytes=1)])])
                    # wait_for_ready: a replica that has just restarted gets the timeout to answer,
                    # instead of failing fast on the channel's last (failed) connection attempt.
                    pr = view.connection(view.brokers[r]).api.Fetch(req, timeout=10,
                                                                    wait_for_ready=True).topics[0].partitions[0]
                    starts[r] = pr.log_start_offset
                    if r == p.leader:
                        hw = pr.high_watermark
                except (grpc.RpcError, KeyError):
                    entry.update(status="UNAVAILABLE", detail=f"replica {r} unreachable")
            if entry["status"] != "OK":
                continue
            start = max(starts.values())
            entry["high_watermark"] = hw
            batches = {r: _replica_batches(view, view.brokers[r], t.name, p.partition, start, hw) for r in p.replicas}
            reference = batches[p.leader]
            for r, got in batches.items():
                if got != reference:
                    i = next((i for i, (a, b) in enumerate(zip(reference, got, strict=False)) if a != b),
                             min(len(reference), len(got)))
                    where = f"offset {reference[i][0]}" if i < len(reference) else f"its end ({len(got)} batches)"
                    entry.update(status="DIVERGED", detail=f"replica {r} differs from leader {p.leader} at {where}")
                    break
            else:
                entry["detail"] = f"{len(reference)} batches identical on {len(batches)} replicas below HW {hw}"
    return report
