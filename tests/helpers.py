"""Helpers for integration tests: bounded polling and raw produce/fetch over gRPC."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
from kazoo.client import KazooClient

from client.connection import ClusterView, Connection
from client.ops.local_cluster import ClusterError, LocalCluster, ZooKeeperServer
from proto import errors
from proto import minikafka_pb2 as pb
from proto.record_batch import Record, decode_batches, encode_batch

T = TypeVar("T")
E = pb.ErrorCode


def wait_for(condition: Callable[[], T], timeout_s: float = 30.0, interval_s: float = 0.05,
             what: str = "condition") -> T:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as e:  # a broker restarting, a znode not there yet
            last_error = e
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}"
                         + (f" (last error: {last_error!r})" if last_error else ""))


def create_topic(view: ClusterView, name: str, partitions: int = 1, replication_factor: int = 1,
                 configs: dict[str, str] | None = None) -> pb.CreatableTopicResult:
    conn = view.connection(view.bootstrap[0])
    resp = conn.api.CreateTopics(pb.CreateTopicsRequest(
        topics=[pb.CreatableTopic(name=name, num_partitions=partitions, replication_factor=replication_factor,
                                  configs=configs or {})], timeout_ms=15000), timeout=20)
    result: pb.CreatableTopicResult = resp.topics[0]
    return result


def ready_topic(fx: ClusterFixture, topic: str, rf: int = 3, **configs: str) -> tuple[int, int]:
    """Create a one-partition topic and wait until it is led with a full ISR: (leader, leader epoch)."""
    view = fx.view()
    res = create_topic(view, topic, partitions=1, replication_factor=rf, configs=configs)
    assert res.error_code == pb.ErrorCode.NONE, res.error_message
    return wait_for(lambda: (lambda le: le if le[0] >= 0 and len(isr_of(view, topic, 0)) == rf else None)(
        leader_of(view, topic, 0)), what=f"{topic} led with a full ISR")


def batch_of(values: list[str], ts: int | None = None) -> bytes:
    t = ts if ts is not None else int(time.time() * 1000)
    return encode_batch([Record(value=v.encode(), timestamp=t + i) for i, v in enumerate(values)])


def produce(conn: Connection, topic: str, partition: int, records: bytes, acks: int = -1,
            timeout_ms: int = 10000) -> pb.ProducePartitionResponse:
    resp = conn.api.Produce(pb.ProduceRequest(acks=acks, timeout_ms=timeout_ms, topics=[
        pb.ProduceTopicData(name=topic, partitions=[pb.ProducePartitionData(partition=partition, records=records)])]),
        timeout=timeout_ms / 1000 + 5)
    result: pb.ProducePartitionResponse = resp.topics[0].partitions[0]
    return result


def fetch(conn: Connection, topic: str, partition: int, offset: int, max_wait_ms: int = 0,
          current_leader_epoch: int = -1, max_bytes: int = 1 << 20) -> pb.FetchPartitionResponse:
    resp = conn.api.Fetch(pb.FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes,
                                          topics=[pb.FetchTopic(name=topic, partitions=[pb.FetchPartition(
                                              partition=partition, fetch_offset=offset,
                                              current_leader_epoch=current_leader_epoch,
                                              partition_max_bytes=max_bytes)])]), timeout=max_wait_ms / 1000 + 10)
    result: pb.FetchPartitionResponse = resp.topics[0].partitions[0]
    return result


def read_values(conn: Connection, topic: str, partition: int, start: int = 0) -> list[str]:
    """Every committed value from ``start``, fetching until the high watermark."""
    out: list[str] = []
    offset = start
    for _ in range(10_000):
        r = fetch(conn, topic, partition, offset)
        assert r.error_code == E.NONE, E.Name(r.error_code)
        recs = [rec for rec in decode_batches(r.records) if rec.offset >= offset]
        out += [rec.value.decode() for rec in recs if rec.value is not None]
        if recs:
            offset = recs[-1].offset + 1
        if offset >= r.high_watermark:
            return out
    raise AssertionError("read did not reach the high watermark")


def leader_of(view: ClusterView, topic: str, partition: int) -> tuple[int, int]:
    """(leader, leader_epoch) as the cluster's metadata says now."""
    view.refresh([topic])
    pl = view.partitions[(topic, partition)]
    return pl.leader, pl.leader_epoch


def isr_of(view: ClusterView, topic: str, partition: int) -> tuple[int, ...]:
    view.refresh([topic])
    return view.partitions[(topic, partition)].isr


def broker_security_args(secrets: Path, broker_id: int, client_port: int, internal_port: int,
                         zk_digest: tuple[str, str] | None = None) -> list[str]:
    """``--set`` arguments for a broker started by hand: a CLIENT listener and a mutual-TLS INTERNAL one,
    with a CA and broker certificate made in ``secrets`` (kept if present), and ZooKeeper ACLs when
    ``zk_digest`` is given."""
    from client.ops import certs

    certs.init_ca(secrets)
    pem = secrets / f"broker-{broker_id}.pem"
    if not pem.exists():
        certs.issue(secrets, f"broker-{broker_id}")
    args = ["--set", f"listeners=CLIENT://127.0.0.1:{client_port},INTERNAL://127.0.0.1:{internal_port}",
            "--set", "listener.security.protocol.map=CLIENT:PLAINTEXT,INTERNAL:SSL",
            "--set", "inter.broker.listener.name=INTERNAL",
            "--set", f"ssl.keystore.location={pem}", "--set", f"ssl.truststore.location={secrets / certs.CA_CERT}"]
    if zk_digest is not None:
        digest = secrets / "zookeeper.digest"
        digest.write_text(":".join(zk_digest))
        args += ["--set", "zookeeper.set.acl=true", "--set", f"zookeeper.digest.auth.file={digest}"]
    return args


def broker_stub(secrets: Path, as_broker: int, address: str) -> tuple[grpc.Channel, Any]:
    """A BrokerControl stub speaking as broker ``as_broker`` (its certificate from ``secrets``) to an
    inter-broker (control-plane) listener, as the controller does."""
    from proto import minikafka_pb2_grpc as pb_grpc
    from proto.transport import ChannelSecurity

    security = ChannelSecurity("SSL", ssl_cafile=str(secrets / "ca.pem"),
                               ssl_certfile=str(secrets / f"broker-{as_broker}.pem"))
    channel = security.channel(address)
    return channel, pb_grpc.BrokerControlStub(channel)  # type: ignore[no-untyped-call]


# ------------------------------------------------------------------ test clusters

# Short sessions so that failover tests take seconds (ZooKeeper's minimum here is 1000 ms).
TEST_BROKER_CONFIG = {
    "zookeeper.session.timeout.ms": "2000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "100",
    "controlled.shutdown.retry.backoff.ms": "200",
    "request.timeout.ms": "5000",
    "leader.imbalance.check.interval.seconds": "3600",
    # Tests make small segments on purpose (retention, rolling); production's floor is 1 MiB.
    "min.segment.bytes": "1024",
    # Group members with short sessions, so that group failover tests take seconds (Kafka's own test
    # brokers lower it too); production's floor is Kafka's 6000 ms.
    "group.min.session.timeout.ms": "1000",
    # No initial rebalance delay (Kafka's test brokers set it to 0 too): a group's first generation
    # comes at once; tests of the delay set it themselves.
    "group.initial.rebalance.delay.ms": "0",
}
# The ZooKeeper identity test clusters' brokers use (zookeeper.set.acl is on): tests that play the
# role of an admin tool writing ZooKeeper directly authenticate with it (the zk_client fixture).
TEST_ZK_DIGEST = ("minikafka", "test-digest-secret")


class ClusterFixture:
    def __init__(self, directory: Path, zk_connect: str) -> None:
        self.dir = directory
        self.zk_connect = zk_connect
        self.cluster: LocalCluster | None = None
        self._views: list[ClusterView] = []

    def start(self, brokers: int = 3, secure: bool = False, **overrides: str) -> LocalCluster:
        cfg = dict(TEST_BROKER_CONFIG)
        cfg.update({k.replace("_", "."): v for k, v in overrides.items()})
        for attempt in range(2):
            self.cluster = LocalCluster(self.dir, zookeeper=self.zk_connect, broker_overrides=cfg,
                                        zk_digest=TEST_ZK_DIGEST)
            try:
                self.cluster.up(brokers, secure=secure)
                return self.cluster
            except ClusterError as e:
                # Free ports are picked before the brokers bind them, and a port can be taken in
                # between (another process's outgoing connection gets it as its ephemeral port):
                # seen once in a full run. up() stopped what it started; pick ports again, once.
                if attempt == 1 or "address already in use" not in str(e).lower():
                    raise
        raise AssertionError("unreachable")

    def view(self) -> ClusterView:
        assert self.cluster is not None and self.cluster.state is not None
        v = ClusterView(self.cluster.state.bootstrap_servers, timeout_s=5,
                        security=self.cluster.state.client_security())
        self._views.append(v)
        return v

    def stop(self) -> None:
        for v in self._views:
            v.close()
        if self.cluster is not None:
            self.cluster.down(timeout_s=15)


def fresh_chroot(zookeeper: ZooKeeperServer) -> str:
    chroot = f"/t-{uuid.uuid4().hex[:12]}"
    client = KazooClient(hosts=zookeeper.connect, timeout=10)
    client.start(timeout=10)
    client.ensure_path(chroot)
    client.stop()
    client.close()
    return zookeeper.connect + chroot




def group_owners(bootstrap: str, group: str) -> dict[str, int]:
    """Partitions per owning member (by client id) as the group coordinator describes the group."""
    from client.admin import AdminClient

    with AdminClient(bootstrap) as admin:
        try:
            rows = admin.describe_group(group)
        except errors.KafkaError:
            return {}
    counts: dict[str, int] = {}
    for r in rows:
        if r.owner is not None:
            counts[r.owner] = counts.get(r.owner, 0) + 1
    return counts
