"""``minikafka verify-replicas``: do all replicas hold the same batches below the HW? (Kafka's
ReplicaVerificationTool.)

For every partition the leader's high watermark is the bound. Each replica is read
with replica id -2 (the debugging reader a follower also answers) from the
latest log start offset among them, and every whole batch below the bound is
compared by (base offset, last offset, header CRC, CRC-32C recomputed over its
bytes) - so a replica holding different bytes under the same header is caught.
Exit code 1 on any divergence; unreachable replicas are reported, not hidden.

Compacted topics (``cleanup.policy`` includes ``compact``): every replica's cleaner cleans its own
log when it chooses to, so two healthy replicas hold different batches below the HW (one has
removed records the other still has; offsets and batch boundaries never move). Kafka's
ReplicaVerificationTool compares fetched batches up to the HW and would report them; here they are
compared by what compaction promises instead, record by record below the bound: the *latest record
of every key* (its offset and value; a key whose latest record is a tombstone counts as absent, as
a tombstone may already be gone from one replica past ``delete.retention.ms``) must be the same on
every replica, and at every offset two replicas both still hold, the record must be the same (key
and value). A replica's latest record of a key below the HW is never removed by its cleaner (only a
later record of the same key, below its own HW, supersedes it), so replicas that agree on what was
written agree on this view whatever each has cleaned.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from typing import Any

import grpc

from client.connection import ClusterView
from proto import errors
from proto import minikafka_pb2 as pb
from proto.record_batch import ATTRIBUTES_OFFSET, BatchHeader, crc32c, decode_batch_fields, iter_headers

E = pb.ErrorCode
Fingerprint = tuple[int, int, int, int]
# A record of a compacted log: offset, key, digest of the value (None: a tombstone).
RecordPrint = tuple[int, bytes | None, bytes | None]


def _replica_batches(view: ClusterView, address: str, topic: str, partition: int, start: int,
                     end: int) -> list[Fingerprint]:
    return [(h.base_offset, h.last_offset, h.crc, crc32c(batch[ATTRIBUTES_OFFSET:]))
            for h, batch in _fetch_batches(view, address, topic, partition, start, end)]


def replica_records(view: ClusterView, address: str, topic: str, partition: int, start: int,
                    end: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record with an offset in [start, end) of the replica at
    ``address`` (read with replica id -2; CRCs checked: a corrupt batch raises)."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    for _h, batch in _fetch_batches(view, address, topic, partition, start, end):
        for offset, _ts, key, value, _headers in decode_batch_fields(batch, 0)[1]:
            if start <= offset < end:
                out.append((offset, key, value))
    return out


def _replica_records(view: ClusterView, address: str, topic: str, partition: int, start: int,
                     end: int) -> list[RecordPrint]:
    return [(o, k, None if v is None else hashlib.md5(v, usedforsecurity=False).digest())
            for o, k, v in replica_records(view, address, topic, partition, start, end)]


def latest_per_key(records: list[RecordPrint]) -> dict[bytes | None, tuple[int, bytes]]:
    """Key -> (offset, value digest) of its latest record; keys whose latest record is a tombstone
    are left out (see the module's docstring)."""
    latest: dict[bytes | None, RecordPrint] = {}
    for r in records:
        if r[1] not in latest or r[0] > latest[r[1]][0]:
            latest[r[1]] = r
    return {k: (o, v) for k, (o, _k, v) in latest.items() if v is not None}


def compare_compacted(reference: list[RecordPrint], got: list[RecordPrint]) -> str | None:
    """Where a compacted replica's records (``got``) disagree with the leader's (``reference``), or
    None: offsets strictly increasing, the same record at every offset both hold, the same latest
    record of every key."""
    offsets = [o for o, _k, _v in got]
    if any(b <= a for a, b in itertools.pairwise(offsets)):
        return "offsets not strictly increasing"
    mine = {o: (k, v) for o, k, v in reference}
    for o, k, v in got:
        if o in mine and mine[o] != (k, v):
            return f"a different record at offset {o}"
    ref_latest, got_latest = latest_per_key(reference), latest_per_key(got)
    for key in sorted(set(ref_latest) | set(got_latest), key=lambda k: (k is not None, k or b"")):
        if ref_latest.get(key) != got_latest.get(key):
            a, b = ref_latest.get(key), got_latest.get(key)
            return (f"the latest record of key {key!r}: offset {b[0] if b else 'none'} against the leader's "
                    f"{a[0] if a else 'none'}")
    return None


def _fetch_batches(view: ClusterView, address: str, topic: str, partition: int, start: int,
                   end: int) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Every whole batch of a replica holding offsets in [start, end), read with replica id -2; a
    batch reaching ``end`` or beyond ends it (the bound is not inside a batch: batches are whole)."""
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
        data = memoryview(pr.records)
        progressed = False
        for pos, h in iter_headers(data):
            if h.last_offset >= end or h.base_offset >= end:
                return
            if h.last_offset >= offset:
                yield h, data[pos:pos + h.size]
                offset = h.last_offset + 1
                progressed = True
        if not progressed:
            break


def compacted_topics(view: ClusterView, topics: list[str]) -> set[str]:
    """The topics among ``topics`` whose ``cleanup.policy`` includes ``compact`` (DescribeConfigs; a
    topic whose configs cannot be read is compared byte for byte, the stricter check)."""
    if not topics:
        return set()
    req = pb.DescribeConfigsRequest(resources=[pb.DescribeConfigsResource(
        resource_type=pb.ConfigResourceType.TOPIC, resource_name=t) for t in topics])
    try:
        resp = view.connection(view.bootstrap[0]).api.DescribeConfigs(req, timeout=10, wait_for_ready=True)
    except grpc.RpcError:
        return set()
    return {r.resource_name for r in resp.results if r.error_code == E.NONE
            and any(c.name == "cleanup.policy" and "compact" in c.value.split(",") for c in r.configs)}


def verify(view: ClusterView, topic: str | None) -> list[dict[str, Any]]:
    md = view.refresh([topic] if topic else None)
    compacted = compacted_topics(view, sorted(t.name for t in md.topics if t.error_code == E.NONE))
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
            if t.name in compacted:
                _verify_compacted(view, entry, t.name, p.partition, p.leader, list(p.replicas), start, hw)
                continue
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


def _verify_compacted(view: ClusterView, entry: dict[str, Any], topic: str, partition: int, leader: int,
                      replicas: list[int], start: int, hw: int) -> None:
    entry["compacted"] = True
    records: dict[int, list[RecordPrint]] = {}
    for r in replicas:
        try:
            records[r] = _replica_records(view, view.brokers[r], topic, partition, start, hw)
        except (errors.CorruptMessageError, errors.InvalidRecordError) as e:
            entry.update(status="DIVERGED", detail=f"replica {r} holds a corrupt batch: {e}")
            return
    reference = records[leader]
    for r, got in records.items():
        problem = compare_compacted(reference, got)
        if problem is not None:
            entry.update(status="DIVERGED", detail=f"replica {r} differs from leader {leader}: {problem} "
                                                   "(compacted: compared by the latest record of every key)")
            return
    keys = len(latest_per_key(reference))
    held = ", ".join(str(len(records[r])) for r in replicas)
    entry["detail"] = (f"compacted: the latest records of {keys} keys identical on {len(records)} replicas below "
                       f"HW {hw} (records held: {held})")
