"""Only brokers speak for brokers (SPEC S12): every probe of issue 13 against real brokers, refused with
a typed error and changing nothing; TLS, SCRAM, ACLs and ZooKeeper ACLs."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from helpers import (
    ClusterFixture,
    E,
    batch_of,
    broker_stub,
    create_topic,
    isr_of,
    leader_of,
    produce,
    read_values,
    ready_topic,
    wait_for,
)
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from client.admin import AdminClient
from client.consumer import Consumer
from client.ops import certs
from client.producer import Producer
from client.structs import TopicPartition
from proto import errors
from proto import minikafka_pb2 as pb
from proto import minikafka_pb2_grpc as pb_grpc
from proto.transport import ChannelSecurity

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _internal(fx: ClusterFixture, broker_id: int) -> str:
    assert fx.cluster is not None
    return f"127.0.0.1:{fx.cluster.broker(broker_id).internal_port}"


def _client_stub(address: str, security: ChannelSecurity | None = None) -> tuple[grpc.Channel, Any, Any, Any]:
    channel = (security or ChannelSecurity()).channel(address)
    return (channel, pb_grpc.KafkaApiStub(channel), pb_grpc.BrokerControlStub(channel),  # type: ignore[no-untyped-call]
            pb_grpc.ControllerApiStub(channel))  # type: ignore[no-untyped-call]


def _forged_leader_and_isr(topic: str, new_leader: int, leader_epoch: int, controller_epoch: int,
                           controller_id: int, broker_epoch: int = -1) -> pb.LeaderAndIsrRequest:
    return pb.LeaderAndIsrRequest(controller_id=controller_id, controller_epoch=controller_epoch,
                                  broker_epoch=broker_epoch, partition_states=[pb.LeaderAndIsrPartitionState(
                                      topic_name=topic, partition_index=0, controller_epoch=controller_epoch,
                                      leader=new_leader, leader_epoch=leader_epoch, isr=[new_leader], zk_version=99,
                                      replicas=[1, 2, 3])])


def test_control_plane_requests_from_non_brokers_are_refused(cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3)
    leader, epoch = ready_topic(cluster, "guarded")
    view = cluster.view()
    md = view.refresh(["guarded"])
    follower = next(b for b in (1, 2, 3) if b != leader)
    secrets = Path(c.state.secrets)
    alice = certs.issue(secrets, "alice").pem  # a client certificate from the cluster's own CA
    forged = _forged_leader_and_isr("guarded", follower, epoch + 1, md.controller_epoch, md.controller_id)
    path_topic = _forged_leader_and_isr("/some/dir/decoy", follower, 1, md.controller_epoch, md.controller_id)
    stop = pb.StopReplicaRequest(controller_id=md.controller_id, controller_epoch=md.controller_epoch, broker_epoch=-1,
                                 partitions=[pb.StopReplicaPartition(topic_name="guarded", partition_index=0,
                                                                     delete_partition=True)])
    update = pb.UpdateMetadataRequest(controller_id=md.controller_id, controller_epoch=2**31 - 1, broker_epoch=-1,
                                      deleted_topics=["guarded"])
    shutdown = pb.ControlledShutdownRequest(broker_id=leader, broker_epoch=-1)
    callers = {
        "plain client on the client listener": (c.broker(follower).address, None),
        "client certificate on the inter-broker listener": (
            _internal(cluster, follower), ChannelSecurity("SSL", ssl_cafile=str(secrets / "ca.pem"),
                                                          ssl_certfile=str(alice))),
    }
    for who, (address, security) in callers.items():
        channel, _api, control, ctrl_api = _client_stub(address, security)
        try:
            for req, call in ((forged, control.LeaderAndIsr), (path_topic, control.LeaderAndIsr),
                              (stop, control.StopReplica), (update, control.UpdateMetadata),
                              (shutdown, ctrl_api.ControlledShutdown)):
                resp = call(req, timeout=10)
                assert resp.error_code == E.CLUSTER_AUTHORIZATION_FAILED, (who, type(req).__name__)
        finally:
            channel.close()
    # No certificate at all: the inter-broker listener's TLS handshake fails.
    channel, _api, control, _c = _client_stub(_internal(cluster, follower),
                                              ChannelSecurity("SSL", ssl_cafile=str(secrets / "ca.pem")))
    with pytest.raises(grpc.RpcError) as exc:
        control.LeaderAndIsr(forged, timeout=5)
    assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
    channel.close()
    # Nothing changed: one leader, same epoch, writable, and no directory was made for the decoy.
    assert leader_of(view, "guarded", 0) == (leader, epoch)
    conn, _ = view.leader_connection("guarded", 0)
    assert produce(conn, "guarded", 0, batch_of(["still"])).error_code == E.NONE
    assert not any(p.name.startswith("decoy") for p in Path("/some/dir").glob("*")) if Path("/some/dir").exists() \
        else True


def test_s12_2_even_a_broker_cannot_skip_the_epoch_checks(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3)
    leader, epoch = ready_topic(cluster, "epochs")
    md = cluster.view().refresh(["epochs"])
    follower = next(b for b in (1, 2, 3) if b != leader)
    other = next(b for b in (1, 2, 3) if b not in (md.controller_id,))
    secrets = Path(c.state.secrets)
    # broker_epoch=-1 from the controller's own certificate: stale, not a bypass.
    channel, control = broker_stub(secrets, md.controller_id, _internal(cluster, follower))
    try:
        r = control.LeaderAndIsr(_forged_leader_and_isr("epochs", follower, epoch + 1, md.controller_epoch,
                                                        md.controller_id), timeout=10)
        assert r.error_code == E.STALE_BROKER_EPOCH
        r = control.UpdateMetadata(pb.UpdateMetadataRequest(controller_id=md.controller_id,
                                                            controller_epoch=2**31 - 1, broker_epoch=-1), timeout=10)
        assert r.error_code == E.STALE_BROKER_EPOCH
    finally:
        channel.close()
    # Another broker claiming to be the controller is refused, whatever it sends.
    channel, control = broker_stub(secrets, other, _internal(cluster, follower))
    try:
        r = control.LeaderAndIsr(_forged_leader_and_isr("epochs", follower, epoch + 1, md.controller_epoch,
                                                        md.controller_id), timeout=10)
        assert r.error_code == E.CLUSTER_AUTHORIZATION_FAILED
    finally:
        channel.close()
    assert leader_of(cluster.view(), "epochs", 0) == (leader, epoch)


def test_a_forged_follower_fetch_cannot_acknowledge_data(cluster) -> None:  # type: ignore[no-untyped-def]
    # Followers paused but still registered and in the ISR (long session, long lag limit): only their
    # fetches could commit the pending record.
    c = cluster.start(3, replica_lag_time_max_ms="60000", zookeeper_session_timeout_ms="30000")
    leader, _ = ready_topic(cluster, "acked", **{"min.insync.replicas": "2"})
    view = cluster.view()
    conn, _ = view.leader_connection("acked", 0)
    assert produce(conn, "acked", 0, batch_of(["committed"])).error_code == E.NONE
    followers = [b for b in (1, 2, 3) if b != leader]
    for f in followers:
        c.signal(f, "STOP")
    try:
        result: list[pb.ProducePartitionResponse] = []
        pending = threading.Thread(target=lambda: result.append(produce(conn, "acked", 0, batch_of(["pending"]),
                                                                        timeout_ms=4000)))
        pending.start()
        time.sleep(0.5)
        forged = pb.FetchRequest(replica_id=followers[0], max_wait_ms=0, replica_epoch=-1, topics=[pb.FetchTopic(
            name="acked", partitions=[pb.FetchPartition(partition=0, fetch_offset=2**40)])])
        resp = conn.api.Fetch(forged, timeout=10)  # a plain client on the client listener
        assert resp.error_code == E.CLUSTER_AUTHORIZATION_FAILED
        # The followers' FetchStream checks each message as a Fetch (S12.1): no way around it.
        streamed = list(conn.api.FetchStream(iter([forged, forged]), timeout=10))
        assert [r.error_code for r in streamed] == [E.CLUSTER_AUTHORIZATION_FAILED] * 2
        # Broker 2's certificate cannot fetch as replica 3 on the inter-broker listener either.
        a, b = followers
        channel = ChannelSecurity("SSL", ssl_cafile=str(Path(c.state.secrets) / "ca.pem"),
                                  ssl_certfile=str(Path(c.state.secrets) / f"broker-{a}.pem")).channel(
            _internal(cluster, leader))
        as_other = pb.FetchRequest(replica_id=b, max_wait_ms=0, topics=forged.topics)
        assert pb_grpc.KafkaApiStub(channel).Fetch(as_other, timeout=10).error_code == \
            E.CLUSTER_AUTHORIZATION_FAILED  # type: ignore[no-untyped-call]
        assert [r.error_code for r in pb_grpc.KafkaApiStub(channel).FetchStream(  # type: ignore[no-untyped-call]
            iter([as_other]), timeout=10)] == [E.CLUSTER_AUTHORIZATION_FAILED]
        channel.close()
        pending.join(20)
        assert result and result[0].error_code == E.REQUEST_TIMED_OUT, "acknowledged on a forged fetch"
    finally:
        for f in followers:
            c.signal(f, "CONT")


def test_certificates_that_are_expired_self_signed_or_foreign_are_refused(cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(1)
    secrets = Path(c.state.secrets)
    now = datetime.datetime.now(datetime.UTC)
    expired = certs.issue(secrets, "broker-1", valid_from=now - datetime.timedelta(days=10), days=1,
                          out=tmp_path / "expired.pem").pem
    self_signed = certs.issue(tmp_path, "broker-1", self_signed=True, out=tmp_path / "self.pem").pem
    certs.init_ca(tmp_path / "other-ca")
    foreign = certs.issue(tmp_path / "other-ca", "broker-1").pem
    for what, pem in (("expired", expired), ("self-signed", self_signed), ("another CA", foreign)):
        channel, _api, control, _c = _client_stub(_internal(cluster, 1), ChannelSecurity(
            "SSL", ssl_cafile=str(secrets / "ca.pem"), ssl_certfile=str(pem)))
        with pytest.raises(grpc.RpcError) as exc:
            control.UpdateMetadata(pb.UpdateMetadataRequest(controller_id=1), timeout=5)
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE, what
        channel.close()


def test_reflection_and_describe_configs_reveal_nothing_internal(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(1)
    channel = grpc.insecure_channel(c.broker(1).address)
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    answers = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)
    services = {s.name for a in answers for s in a.list_services_response.service}
    channel.close()
    assert "minikafka.v1.KafkaApi" in services
    assert not services & {"minikafka.v1.BrokerControl", "minikafka.v1.ControllerApi"}
    conn = cluster.view().connection(c.broker(1).address)
    desc = conn.api.DescribeConfigs(pb.DescribeConfigsRequest(resources=[pb.DescribeConfigsResource(
        resource_type=pb.ConfigResourceType.BROKER, resource_name="1")]), timeout=10)
    entries = {e.name: e for e in desc.results[0].configs}
    for name in ("zookeeper.connect", "log.dirs", "ssl.keystore.location", "zookeeper.digest.auth.file"):
        assert entries[name].is_sensitive and entries[name].value == "", name
    assert entries["num.partitions"].value == "1"


def test_s12_4_zookeeper_znodes_are_writable_only_by_brokers(cluster, zk_connect: str) -> None:  # type: ignore[no-untyped-def]
    cluster.start(1)
    ready_topic(cluster, "zkacl", rf=1)
    stray = KazooClient(hosts=zk_connect, timeout=10)
    stray.start(timeout=10)
    try:
        assert stray.get("/controller")[0]  # readable by all
        for path, data in (("/controller", b'{"version":1,"brokerid":9,"timestamp":"0"}'),
                           ("/brokers/topics/zkacl/partitions/0/state", b"{}"),
                           ("/brokers/topics/zkacl", b"{}")):
            with pytest.raises(NoAuthError):
                stray.set(path, data)
        for path in ("/brokers/ids/9", "/admin/reassign_partitions", "/admin/delete_topics/zkacl",
                     "/brokers/topics/evil"):
            with pytest.raises(NoAuthError):
                stray.create(path, b"{}")
        with pytest.raises(NoAuthError):
            stray.get_children("/config/users")  # credentials: brokers only
        with pytest.raises(NoAuthError):  # committed offsets: written by the group coordinator only
            stray.create("/consumers/g", b"{}")
    finally:
        stray.stop()
        stray.close()


def test_secure_cluster_scram_and_acls(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3, secure=True)
    state = c.state
    admin_sec = state.client_security()
    bootstrap = state.bootstrap_servers
    with AdminClient(bootstrap, security=admin_sec) as admin:
        from client.admin import NewTopic
        admin.create_topics([NewTopic("orders", 1, 3), NewTopic("audit", 1, 3)])
        admin.upsert_scram_user("alice", "alice-secret")
        admin.create_acls([pb.AclBinding(resource_type=pb.AclResourceType.TOPIC_RESOURCE, resource_name="orders",
                                         principal="User:alice", host="*", operation=op, permission_type="Allow")
                           for op in ("Read", "Write")])
        assert {(b.resource_name, b.operation) for b in admin.describe_acls()} >= {("orders", "Read"),
                                                                                   ("orders", "Write")}
        assert "alice" in admin.describe_scram_users()
    ca = str(Path(state.secrets) / "ca.pem")
    alice = {"security_protocol": "SASL_SSL", "ssl_cafile": ca, "sasl_plain_username": "alice",
             "sasl_plain_password": "alice-secret"}
    wait_for(lambda: _alice_can_write(bootstrap, alice), what="alice's credential and ACLs on every broker")
    # Read and Write on orders only: audit is invisible and unwritable; no cluster rights.
    with Producer(bootstrap, acks="all", request_timeout_ms=5000, delivery_timeout_ms=10000, **alice) as p:
        with pytest.raises(errors.KafkaError) as exc:
            p.send("audit", b"x").result(timeout=20)
        assert isinstance(exc.value, errors.TopicAuthorizationFailedError | errors.UnknownTopicOrPartitionError)
    with AdminClient(bootstrap, **alice) as as_alice:
        assert as_alice.list_topics() == ["orders"]
        with pytest.raises(errors.TopicAuthorizationFailedError):
            from client.admin import NewTopic
            as_alice.create_topics([NewTopic("mine", 1, 1)])
        with pytest.raises(errors.ClusterAuthorizationFailedError):
            as_alice.create_acls([pb.AclBinding(resource_type=pb.AclResourceType.TOPIC_RESOURCE,
                                                resource_name="audit", principal="User:alice", host="*",
                                                operation="Read", permission_type="Allow")])
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", **alice) as cons:
        cons.assign([TopicPartition("orders", 0)])
        got: list[bytes | None] = []
        wait_for(lambda: got.extend(r.value for r in cons.poll(timeout_ms=300)) or got)
        assert got[0] == b"hello"
    # A Deny wins: alice loses Write on orders.
    with AdminClient(bootstrap, security=admin_sec) as admin:
        admin.create_acls([pb.AclBinding(resource_type=pb.AclResourceType.TOPIC_RESOURCE, resource_name="orders",
                                         principal="User:alice", host="*", operation="Write", permission_type="Deny")])
    wait_for(lambda: not _alice_can_write(bootstrap, alice), what="the Deny to reach every broker")
    # The producer's ProduceStream checks each request as a unary Produce: no way around the ACLs.
    alice_channel = ChannelSecurity(**alice).channel(c.broker(1).address)
    streamed = list(pb_grpc.KafkaApiStub(alice_channel).ProduceStream(iter([  # type: ignore[no-untyped-call]
        pb.ProduceRequest(acks=1, timeout_ms=5000, topics=[pb.ProduceTopicData(name=t, partitions=[
            pb.ProducePartitionData(partition=0, records=batch_of(["denied"]))])]) for t in ("audit", "orders")]),
        timeout=10))
    assert [r.topics[0].partitions[0].error_code for r in streamed] == [E.TOPIC_AUTHORIZATION_FAILED] * 2
    alice_channel.close()
    # Wrong password, unknown user, no credentials, plaintext: refused.
    for bad in ({**alice, "sasl_plain_password": "wrong"}, {**alice, "sasl_plain_username": "mallory"}):
        with AdminClient(bootstrap, request_timeout_ms=5000, **bad) as a, pytest.raises(errors.KafkaError) as exc:
            a.list_topics()
        assert "SASL_AUTHENTICATION_FAILED" in str(exc.value) or isinstance(exc.value, errors.NetworkError)
    conn_ssl = ChannelSecurity("SSL", ssl_cafile=ca).channel(c.broker(1).address)
    with pytest.raises(grpc.RpcError) as rpc:  # TLS without SCRAM credentials
        pb_grpc.KafkaApiStub(conn_ssl).Metadata(pb.MetadataRequest(all_topics=True), timeout=10)  # type: ignore[no-untyped-call]
    assert rpc.value.code() == grpc.StatusCode.UNAUTHENTICATED and "SASL_AUTHENTICATION_FAILED" in rpc.value.details()
    with pytest.raises(grpc.RpcError) as rpc:  # the same on a ProduceStream
        list(pb_grpc.KafkaApiStub(conn_ssl).ProduceStream(iter([pb.ProduceRequest(acks=1)]), timeout=10))  # type: ignore[no-untyped-call]
    assert rpc.value.code() == grpc.StatusCode.UNAUTHENTICATED
    conn_ssl.close()


def _alice_can_write(bootstrap: str, alice: dict[str, str]) -> bool:
    try:
        with Producer(bootstrap, acks="all", request_timeout_ms=3000, delivery_timeout_ms=6000, retries=0,
                      **alice) as p:  # type: ignore[arg-type]
            p.send("orders", b"hello").result(timeout=10)
        return True
    except (errors.KafkaError, TimeoutError):
        return False


def test_cli_manages_users_and_acls_on_a_secure_cluster(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(1, secure=True)
    common = ["--bootstrap-server", c.state.bootstrap_servers, "--command-config", str(c.state.client_properties)]

    def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "client.cli", *args], cwd=ROOT, input=stdin, capture_output=True,
                              text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})

    r = cli("users", "--add", "bob", *common, stdin="bob-secret\n")
    assert r.returncode == 0, r.stderr
    r = cli("acls", "--add", "--allow-principal", "User:bob", "--operation", "Create", "--cluster", *common)
    assert r.returncode == 0, r.stderr
    r = cli("acls", "--list", "--cluster", *common, "--output", "json")
    assert '"principal": "User:bob"' in r.stdout and '"operation": "Create"' in r.stdout
    r = cli("users", "--list", *common)
    assert "bob" in r.stdout and "admin" in r.stdout
    r = cli("topics", "--list", "--bootstrap-server", c.state.bootstrap_servers)  # plaintext to a TLS listener
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1 and "cannot reach" in r.stderr, r.stderr
    props = Path(c.state.client_properties).read_text().replace("sasl.password=", "sasl.password=wrong")
    (Path(c.state.dir) / "wrong.properties").write_text(props)
    r = cli("topics", "--list", "--bootstrap-server", c.state.bootstrap_servers, "--command-config",
            str(Path(c.state.dir) / "wrong.properties"))
    assert r.returncode == 1 and "SASL_AUTHENTICATION_FAILED" in r.stderr, r.stderr
    r = cli("acls", "--remove", "--allow-principal", "User:bob", "--operation", "Create", "--cluster", *common)
    assert r.returncode == 0 and "Removed 1 ACLs" in r.stdout, r.stdout + r.stderr


def test_a_broker_restart_and_replication_run_over_mutual_tls(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3, secure=True)
    view = cluster.view()
    assert create_topic(view, "tls", partitions=1, replication_factor=3).error_code == E.NONE
    leader, _ = wait_for(lambda: (lambda le: le if le[0] >= 0 and len(isr_of(view, "tls", 0)) == 3 else None)(
        leader_of(view, "tls", 0)))
    conn, _ = view.leader_connection("tls", 0)
    assert produce(conn, "tls", 0, batch_of(["a", "b"])).error_code == E.NONE
    c.signal(leader, "KILL")
    c.start(leader)
    c.wait_registered({1, 2, 3})
    wait_for(lambda: len(isr_of(view, "tls", 0)) == 3, what="the restarted broker back in the ISR over TLS")
    # Metadata may come from the restarted broker before the controller has seen the kill (leader 1 at
    # epoch 0, ISR full, read from ZooKeeper at start-up): refresh on every poll, as a client does on
    # NOT_LEADER_OR_FOLLOWER, until it reads.
    def read_from_leader() -> bool:
        view.refresh(["tls"])
        return read_values(view.leader_connection("tls", 0)[0], "tls", 0) == ["a", "b"]

    wait_for(read_from_leader, what="the records read from the current leader")
