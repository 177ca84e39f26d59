"""Names, topics and configs through every RPC that takes them (issue 12, SPEC S13.2-S13.4):
Metadata, CreateTopics, DeleteTopics, DescribeConfigs, AlterConfigs, InitProducerId,
DescribeReplicas, and Produce/Fetch/ListOffsets/OffsetsForLeaderEpoch with hostile topic names.

Beyond the harness's invariants: nothing is created outside log.dirs, an accepted CreateTopics
makes a usable topic whose directories a DeleteTopics removes, and requests that are invalid on
their face (0 partitions, replication factor 0 or above the live brokers, configs out of Kafka's
bounds) are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzz_batches import valid_batch_bytes
from fuzz_names import (
    TOPIC_CONFIG_KEYS,
    UNKNOWN_KEYS,
    NameSpec,
    clearly_invalid,
    config_keys,
    config_values,
    literal_names,
    names,
)
from fuzz_support import FuzzFailure, Harness, fuzz_settings, poll, short
from hypothesis import given
from hypothesis import strategies as st

from proto import minikafka_pb2 as pb

pytestmark = pytest.mark.integration
E = pb.ErrorCode
INT32 = (-(1 << 31), (1 << 31) - 1)
BROKERS = 3


def resolve(fuzz: Harness, spec: NameSpec) -> str:
    if spec.kind == "committed":
        return fuzz.committed.name + spec.text
    if spec.kind == "scratch":
        return fuzz.scratch + spec.text
    if spec.kind == "outside":
        return str(fuzz.sacrificial_root) + spec.text
    return spec.text


def partition_dirs(fuzz: Harness, topic: str) -> list[Path]:
    """Replica directories of ``topic`` that exist under any broker's log.dirs."""
    out = []
    for d in Path(fuzz.cluster.dir).glob("broker-*/data"):
        out += [p for p in d.iterdir() if p.name.rsplit("-", 1)[0] == topic]
    return out


def delete_and_check_dirs(fuzz: Harness, topic: str) -> None:
    resp = fuzz.call(fuzz.any_conn(), "DeleteTopics", pb.DeleteTopicsRequest(topic_names=[topic], timeout_ms=10000),
                     timeout=30)
    if resp is None or resp.responses[0].error_code not in (E.NONE, E.REQUEST_TIMED_OUT):
        raise FuzzFailure(f"could not delete topic {topic!r} it just created: {short(resp)}")
    if poll(lambda: not partition_dirs(fuzz, topic), 30, 0.1) is None:
        raise FuzzFailure(f"DeleteTopics({topic!r}) left directories behind: {partition_dirs(fuzz, topic)[:4]}")


def test_names_through_every_rpc(fuzz: Harness) -> None:
    fuzz.arm_escape_check()

    @fuzz_settings(30)
    @given(spec=names(), partition=st.sampled_from([0, 0, 0, 1, -1, INT32[1]]), auto_create=st.booleans(),
           create=st.booleans(), broker_index=st.integers(0, 2))
    def run(spec: NameSpec, partition: int, auto_create: bool, create: bool, broker_index: int) -> None:
        with fuzz.example(**locals()):
            name = resolve(fuzz, spec)
            conn = fuzz.any_conn(broker_index)
            md = fuzz.call(conn, "Metadata", pb.MetadataRequest(topics=[name], allow_auto_topic_creation=auto_create))
            if not any(t.name == name for t in md.topics):
                raise FuzzFailure(f"Metadata did not answer topic {name!r}: {short(md)}")
            created = False
            if create:
                ct = fuzz.call(conn, "CreateTopics", pb.CreateTopicsRequest(topics=[pb.CreatableTopic(
                    name=name, num_partitions=1, replication_factor=1)], timeout_ms=10000), timeout=30)
                created = ct is not None and ct.topics[0].error_code == E.NONE
            leader = fuzz.leader_conn(name, partition) if created else conn
            fuzz.call(leader, "Produce", fuzz.produce_request(name, valid_batch_bytes([b"named"]), partition, acks=1))
            fuzz.call(leader, "Fetch", pb.FetchRequest(replica_id=-1, max_wait_ms=0, max_bytes=1 << 16, topics=[
                pb.FetchTopic(name=name, partitions=[pb.FetchPartition(partition=partition,
                                                                       partition_max_bytes=1 << 16)])]))
            fuzz.call(leader, "ListOffsets", pb.ListOffsetsRequest(replica_id=-1, topics=[pb.ListOffsetsTopic(
                name=name, partitions=[pb.ListOffsetsPartition(partition=partition, timestamp=-1)])]))
            fuzz.call(leader, "OffsetsForLeaderEpoch", pb.OffsetsForLeaderEpochRequest(replica_id=-1, topics=[
                pb.OffsetForLeaderTopic(topic=name, partitions=[pb.OffsetForLeaderPartition(partition=partition,
                                                                                            leader_epoch=0)])]))
            fuzz.call(conn, "DescribeConfigs", pb.DescribeConfigsRequest(resources=[pb.DescribeConfigsResource(
                resource_type=pb.ConfigResourceType.TOPIC, resource_name=name)]))
            # A SET to the default value: harmless even when the name resolves to a real topic.
            fuzz.call(conn, "AlterConfigs", pb.AlterConfigsRequest(resources=[pb.AlterConfigsResource(
                resource_type=pb.ConfigResourceType.TOPIC, resource_name=name,
                configs=[pb.AlterableConfig(name="retention.bytes", value="-1")])]))
            fuzz.call(conn, "DescribeReplicas", pb.DescribeReplicasRequest(topics=[name], max_events=5))
            if created:
                delete_and_check_dirs(fuzz, name)
            else:
                fuzz.call(conn, "DeleteTopics", pb.DeleteTopicsRequest(topic_names=[name], timeout_ms=5000),
                          timeout=20)

    run()
    fuzz.end_of_test()


@st.composite
def assignments(draw: st.DrawFn) -> list[pb.ReplicaAssignment]:
    n = draw(st.integers(1, 4))
    parts = st.sampled_from([0, 0, 1, 2, 5, -1, INT32[1]])
    brokers = st.lists(st.sampled_from([1, 2, 3, 1, -1, 0, 99]), max_size=4)
    return [pb.ReplicaAssignment(partition=draw(parts), broker_ids=draw(brokers)) for _ in range(n)]


def test_create_topics(fuzz: Harness) -> None:
    @fuzz_settings(40)
    @given(spec=st.sampled_from([None, None, None]) | names(),
           num_partitions=st.sampled_from([-5, -1, 0, 0, 1, 1, 2, 3, 100_000, INT32[0]]),
           replication_factor=st.sampled_from([-5, -1, 0, 0, 1, 1, 2, 3, 4, 100, INT32[1]]),
           assignment=st.sampled_from([None, None, None]) | assignments(),
           configs=st.sampled_from([{}, {}]) | st.dictionaries(st.sampled_from(TOPIC_CONFIG_KEYS), config_values(),
                                                              max_size=2)
           | st.dictionaries(config_keys(), config_values(), max_size=3),
           validate_only=st.booleans(), timeout_ms=st.sampled_from([10000, 10000, 0, -1, 100]))
    def run(spec: NameSpec | None, num_partitions: int, replication_factor: int,
            assignment: list[pb.ReplicaAssignment] | None, configs: dict[str, str], validate_only: bool,
            timeout_ms: int) -> None:
        # 100,000 partitions is the probe; more (2**31-1) would only measure this machine's memory.
        with fuzz.example(**locals()):
            name = fuzz.unique_name("fuzz-create") if spec is None else resolve(fuzz, spec)
            topic = pb.CreatableTopic(name=name, num_partitions=num_partitions, replication_factor=replication_factor,
                                      assignments=assignment or [], configs=configs)
            resp = fuzz.call(fuzz.any_conn(), "CreateTopics", pb.CreateTopicsRequest(
                topics=[topic], timeout_ms=timeout_ms, validate_only=validate_only), timeout=60)
            if resp is None:
                return
            answers = [t for t in resp.topics if t.name == name]
            if not answers:
                raise FuzzFailure(f"CreateTopics did not answer {name!r}: {short(resp)}")
            r = answers[0]
            accepted = r.error_code in (E.NONE, E.REQUEST_TIMED_OUT)
            if accepted:
                bad = [k for k, v in configs.items() if clearly_invalid(k, v)]
                if bad:
                    raise FuzzFailure(f"CreateTopics accepted invalid configs {[(k, configs[k][:40]) for k in bad]}")
                if not assignment and (num_partitions == 0 or num_partitions < -1):
                    raise FuzzFailure(f"CreateTopics accepted num_partitions={num_partitions} "
                                      f"(answered {r.num_partitions})")
                if not assignment and (replication_factor == 0 or replication_factor < -1
                                       or replication_factor > BROKERS):
                    raise FuzzFailure(f"CreateTopics accepted replication_factor={replication_factor} "
                                      f"(answered {r.replication_factor})")
            if accepted and not validate_only:
                if r.error_code == E.NONE:
                    # A created topic is usable: its first partition takes a valid batch.
                    conn = fuzz.leader_conn(name, 0)
                    fuzz.call(conn, "Produce", fuzz.produce_request(name, valid_batch_bytes([b"new"]), 0, acks=1))
                delete_and_check_dirs(fuzz, name)

    run()
    fuzz.end_of_test()


def test_alter_and_describe_configs(fuzz: Harness) -> None:
    resource_types = st.sampled_from([pb.ConfigResourceType.TOPIC] * 4 + [pb.ConfigResourceType.BROKER,
                                                                          pb.ConfigResourceType.UNKNOWN_RESOURCE, 1, 3, 99])

    @fuzz_settings(40)
    @given(resource_type=resource_types, target=st.sampled_from(["scratch"] * 4 + ["broker", "name"]),
           spec=names(), entries=st.lists(st.tuples(config_keys(), st.sampled_from([0, 0, 0, 1, 5]), config_values()),
                                          max_size=4),
           validate_only=st.booleans(), keys=st.lists(st.sampled_from([*UNKNOWN_KEYS, "segment.bytes"]), max_size=3),
           broker_index=st.integers(0, 2))
    def run(resource_type: int, target: str, spec: NameSpec, entries: list[tuple[str, int, str]],
            validate_only: bool, keys: list[str], broker_index: int) -> None:
        with fuzz.example(**locals()):
            conn = fuzz.any_conn(broker_index)
            if target == "scratch":
                resource = fuzz.scratch
            elif target == "broker":
                resource = str(fuzz.broker_ids[broker_index])
            else:
                resource = resolve(fuzz, spec)
            alter = pb.AlterConfigsRequest(validate_only=validate_only, resources=[pb.AlterConfigsResource(
                resource_type=resource_type, resource_name=resource,  # type: ignore[arg-type]
                configs=[pb.AlterableConfig(name=k, op=op, value=v) for k, op, v in entries])])  # type: ignore[arg-type]
            resp = fuzz.call(conn, "AlterConfigs", alter)
            if resp is not None:
                if not resp.responses:
                    raise FuzzFailure(f"AlterConfigs answered no resource: {short(resp)}")
                code = resp.responses[0].error_code
                sets = [(k, v) for k, op, v in entries if op == pb.AlterConfigOp.SET]
                unknown_op = any(op not in (0, 1) for _, op, _ in entries)
                invalid = unknown_op or any(clearly_invalid(k, v) for k, v in sets)
                if code == E.NONE and invalid and resource_type == pb.ConfigResourceType.TOPIC:
                    raise FuzzFailure(f"AlterConfigs accepted {entries} for topic {resource!r}")
            # The topic still takes writes (or refuses them with a typed code), and describes.
            fuzz.call(fuzz.leader_conn(fuzz.scratch), "Produce",
                      fuzz.produce_request(fuzz.scratch, valid_batch_bytes([b"cfg"] * 3), 0, acks=1))
            fuzz.call(conn, "DescribeConfigs", pb.DescribeConfigsRequest(resources=[pb.DescribeConfigsResource(
                resource_type=resource_type, resource_name=resource, configuration_keys=keys)]))  # type: ignore[arg-type]
            # Back to defaults, so that examples do not pile up on each other.
            fuzz.call(conn, "AlterConfigs", pb.AlterConfigsRequest(resources=[pb.AlterConfigsResource(
                resource_type=pb.ConfigResourceType.TOPIC, resource_name=fuzz.scratch,
                configs=[pb.AlterableConfig(name=k, op=pb.AlterConfigOp.DELETE) for k in TOPIC_CONFIG_KEYS])]))

    run()
    fuzz.end_of_test()


def test_metadata_init_producer_id_and_describe_replicas(fuzz: Harness) -> None:
    @fuzz_settings(25)
    @given(topics=st.lists(literal_names(), max_size=5), repeat=st.sampled_from([1, 1, 1, 1500]),
           all_topics=st.booleans(), transactional_id=st.sampled_from(["", "", "tx", "\x00", "x" * 5000]),
           producer=st.sampled_from([(-1, -1), (0, 0), (0, 32767), (1 << 62, 0), (-5, -5), (INT32[1], INT32[1])]),
           tx_timeout=st.sampled_from([0, -1, 60000, INT32[1], INT32[0]]),
           max_events=st.sampled_from([0, 5, -1, INT32[1], INT32[0]]), broker_index=st.integers(0, 2))
    def run(topics: list[str], repeat: int, all_topics: bool, transactional_id: str, producer: tuple[int, int],
            tx_timeout: int, max_events: int, broker_index: int) -> None:
        with fuzz.example(**locals()):
            conn = fuzz.any_conn(broker_index)
            # Never auto-creating here: the names test does that one name at a time.
            fuzz.call(conn, "Metadata", pb.MetadataRequest(topics=topics * repeat, all_topics=all_topics))
            pid, epoch = producer
            fuzz.call(conn, "InitProducerId", pb.InitProducerIdRequest(
                transactional_id=transactional_id, transaction_timeout_ms=tx_timeout, producer_id=pid,
                producer_epoch=epoch))
            fuzz.call(conn, "DescribeReplicas", pb.DescribeReplicasRequest(topics=topics * repeat,
                                                                           max_events=max_events))

    run()
    fuzz.end_of_test()
