"""`docker compose up` for real (issues 35, 32): the images docker-compose.yml builds, the cluster it
starts with its health checks (a ZooKeeper ensemble of three: one leader, two followers), clients on
the host (the project's CLI and librdkafka) and in the network (the `demo` service, the Spark
profile's job reading the topic into Parquet, `verify-replicas`), a partition leader and then the
ZooKeeper leader SIGKILLed under idempotent acks=all load (SPEC S4, S8: nothing acknowledged lost,
nothing duplicated; the brokers serve on through ZooKeeper's leader election), and `down -v` leaving
nothing behind. The secure override, over the single-ZooKeeper override, is
test_compose_secure_override.py.

Needs a Docker engine (tests/deploy/docker_engine.py starts one of its own as root) and either an
image registry or debootstrap (base images made from Debian); skipped with the reason otherwise.
Durations, image sizes and build time are printed in pytest's "compose test" section."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from compose_project import (
    BROKERS,
    COMPOSE,
    PEM_PRIVATE_KEY,
    PLAIN_GRPC,
    PLAIN_KAFKA,
    PROJECT_IMAGES,
    SPARK_IMAGE,
    ZOOKEEPERS,
    BuiltImages,
    ComposeProject,
    image_layer_hits,
    note,
)
from docker_engine import DockerEngine

pytestmark = pytest.mark.timeout(2400)

SERVICES = (*ZOOKEEPERS, *BROKERS)


@pytest.fixture(scope="module")
def plain(docker_engine: DockerEngine, compose_images: BuiltImages,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeProject]:
    project = ComposeProject(docker_engine, f"mkplain{os.getpid()}", [COMPOSE], tmp_path_factory.mktemp("plain"))
    t0 = time.monotonic()
    try:
        project.compose("up", "-d", timeout=600)
        up_s = time.monotonic() - t0
        took = project.wait_healthy(SERVICES)
        note(f"plain cluster: `up -d` returned in {up_s:.0f} s, then healthy: "
             + ", ".join(f"{k} {v:.0f} s" for k, v in took.items()) + f"; ZooKeeper modes {project.zookeeper_modes()}")
        yield project
    finally:
        project.compose("down", "-v", "--remove-orphans", timeout=300, check=False)


def test_images_run_as_non_root_and_hold_no_key_material(docker_engine: DockerEngine, compose_images: BuiltImages,
                                                         tmp_path: Path) -> None:
    users = {image: docker_engine.docker("image", "inspect", "-f", "{{.Config.User}}", image).stdout.strip()
             for image in PROJECT_IMAGES}
    assert users == {"minikafka:latest": "minikafka", "minikafka-zookeeper:3.8": "zookeeper"}
    # The codec was compiled in the build stage and is what the image imports.
    codec = docker_engine.docker("run", "--rm", "--entrypoint", "python", "minikafka:latest", "-c",
                                 "import proto._codec, proto._columnar; print(proto._codec.__file__)").stdout
    assert ".so" in codec
    # No private key anywhere in the image's layers or history (certificates are made at run time).
    t0 = time.monotonic()
    hits = image_layer_hits(docker_engine, "minikafka:latest", [PEM_PRIVATE_KEY], tmp_path)
    assert hits == []
    note(f"layer scan of minikafka:latest for key material: clean ({time.monotonic() - t0:.0f} s)")


def test_three_zookeepers_serve_as_one_ensemble(plain: ComposeProject) -> None:
    # Healthy means serving in the quorum (zk-healthcheck): one leader, the others its followers.
    assert sorted(plain.zookeeper_modes().values()) == ["follower", "follower", "leader"]
    # Every broker is registered, seen from each server (a follower serves reads from its own copy,
    # synced at most one write behind: `sync` first, as zkCli's `sync /` does).
    from kazoo.client import KazooClient

    from zk.data import BrokerIdsZNode

    for port in ZOOKEEPERS.values():
        zk = KazooClient(hosts=f"127.0.0.1:{port}", timeout=30)
        zk.start(timeout=30)
        try:
            zk.sync(BrokerIdsZNode.PATH)
            assert sorted(zk.get_children(BrokerIdsZNode.PATH), key=int) == ["1", "2", "3"], port
        finally:
            zk.stop()
            zk.close()


def test_the_cluster_serves_the_cli_librdkafka_and_the_demo(plain: ComposeProject) -> None:
    t0 = time.monotonic()
    r = plain.cli("topics", "--create", "--topic", "events", "--partitions", "3", "--replication-factor", "3",
                  "--bootstrap-server", PLAIN_GRPC)
    assert r.returncode == 0, r.stderr
    lines = [f"cli-{i}" for i in range(50)]
    r = plain.cli("produce", "--topic", "events", "--bootstrap-server", PLAIN_GRPC, stdin="\n".join(lines) + "\n")
    assert r.returncode == 0, r.stderr
    r = plain.cli("consume", "--topic", "events", "--from-beginning", "--max-messages", "50", "--timeout-ms", "30000",
                  "--bootstrap-server", PLAIN_GRPC)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == sorted(lines)
    # librdkafka on the Kafka protocol listeners: an idempotent acks=all producer, a group consumer.
    rd = plain.client("rdkafka", "--bootstrap", PLAIN_KAFKA, "--topic", "events", "--count", "200")
    assert rd == {"produced": 200, "delivery_errors": [], "read_back": 200}
    # The compose `demo` service, in the network.
    demo = plain.compose("--profile", "demo", "run", "--rm", "demo", timeout=300)
    assert demo.returncode == 0
    note(f"plain cluster: CLI + librdkafka round trips and the demo service in {time.monotonic() - t0:.0f} s")


# The spark-job service's command in docker-compose.yml: topic `events` into this folder of its
# `spark-out` volume.
SPARK_TOPIC = "events"
SPARK_OUT = "/var/lib/minikafka/data/events-parquet"
# Run in the Spark image: the Parquet the job wrote, read back with pyarrow (not Spark), one JSON line.
READ_PARQUET = f"""import json, pyarrow.parquet as pq
t = pq.read_table({SPARK_OUT!r})
print(json.dumps({{"columns": t.column_names, "topics": sorted(set(t.column("topic").to_pylist())),
                   "timestamp_types": sorted(set(t.column("timestampType").to_pylist())),
                   "null_timestamps": t.column("timestamp").null_count,
                   "records": sorted([r["partition"], r["offset"], r["key"], r["value"]] for r in t.to_pylist())}}))
"""


def test_the_spark_profile_job_reads_the_topic_into_parquet(plain: ComposeProject, docker_engine: DockerEngine,
                                                            tmp_path: Path) -> None:
    """`docker compose --profile spark run --rm spark-job` as the compose file has it (topic_to_parquet,
    `events` into the spark-out volume, local[2] Spark in the container): every record of the topic,
    with its partition, offset, key and value, is a row of the Parquet, and nothing else is."""
    t_all = time.monotonic()
    r = plain.cli("topics", "--create", "--if-not-exists", "--topic", SPARK_TOPIC, "--partitions", "3",
                  "--replication-factor", "3", "--bootstrap-server", PLAIN_GRPC)
    assert r.returncode == 0, r.stderr
    produced = plain.client("keyed", "--bootstrap", PLAIN_KAFKA, "--topic", SPARK_TOPIC, "--count", "300")
    assert (produced["undelivered"], produced["delivery_errors"], len(produced["records"])) == (0, [], 300)
    # The whole topic (the records of the tests before this one too), read independently of Spark.
    topic = plain.client("dump", "--bootstrap", PLAIN_KAFKA, "--topic", SPARK_TOPIC)
    assert topic["complete"], topic["high_watermarks"]
    expected = sorted(topic["records"])
    assert {tuple(x) for x in produced["records"]} <= {tuple(x) for x in expected}

    t0 = time.monotonic()
    plain.compose("--profile", "spark", "build", "spark-job", timeout=1500)
    build_s = time.monotonic() - t0
    size_mb = int(docker_engine.docker("image", "inspect", "-f", "{{.Size}}", SPARK_IMAGE).stdout) / 1e6
    user = docker_engine.docker("image", "inspect", "-f", "{{.Config.User}}", SPARK_IMAGE).stdout.strip()
    assert user == "minikafka"
    t1 = time.monotonic()
    assert image_layer_hits(docker_engine, SPARK_IMAGE, [PEM_PRIVATE_KEY], tmp_path) == []
    scan_s = time.monotonic() - t1

    t2 = time.monotonic()
    job = plain.compose("--profile", "spark", "run", "-T", "--rm", "spark-job", timeout=600)
    job_s = time.monotonic() - t2
    summary = re.search(r"^wrote (\d+) rows to (\S+) in ([\d.]+)s$", job.stdout, re.MULTILINE)
    assert summary, job.stdout[-3000:] + job.stderr[-3000:]
    assert (int(summary[1]), summary[2]) == (len(expected), SPARK_OUT)

    out = plain.compose("--profile", "spark", "run", "-T", "--rm", "--no-deps", "--entrypoint", "python",
                        "spark-job", "-c", READ_PARQUET, timeout=300)
    parquet = json.loads(out.stdout.strip().splitlines()[-1])
    assert parquet["columns"] == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert (parquet["topics"], parquet["timestamp_types"], parquet["null_timestamps"]) == ([SPARK_TOPIC], [0], 0)
    assert len(parquet["records"]) == len(expected)
    assert parquet["records"] == expected
    note(f"spark profile: `--profile spark build spark-job` {build_s:.0f} s ({SPARK_IMAGE} {size_mb:.0f} MB, "
         f"user minikafka, layer scan clean in {scan_s:.0f} s); `--profile spark run --rm spark-job` "
         f"(topic_to_parquet, local[2] in the container) {job_s:.0f} s (Spark's own {float(summary[3]):.1f} s): "
         f"{len(expected)} rows = the topic's {len(expected)} records (partition, offset, key, value; "
         f"{len(produced['records'])} keyed ones produced by librdkafka), read back with pyarrow; "
         f"the Spark step {time.monotonic() - t_all:.0f} s in all")


def _acked(proc_line: str) -> int:
    return int(json.loads(proc_line)["acked"])


def test_a_leader_and_the_zookeeper_leader_killed_under_load_lose_nothing(plain: ComposeProject) -> None:
    t0 = time.monotonic()
    r = plain.cli("topics", "--create", "--topic", "chaos", "--partitions", "3", "--replication-factor", "3",
                  "--config", "min.insync.replicas=2", "--bootstrap-server", PLAIN_GRPC)
    assert r.returncode == 0, r.stderr
    leaders = plain.client("leaders", "--bootstrap", PLAIN_GRPC, "--topic", "chaos")
    victim = 2 if any(leader == 2 for leader, _ in leaders.values()) else leaders["0"][0]
    service = f"broker-{victim}"
    led = sorted(int(p) for p, (leader, _) in leaders.items() if leader == victim)
    load = plain.client_process("load", "--bootstrap", PLAIN_GRPC, "--topic", "chaos", "--partitions", "3",
                                "--rate", "100")
    assert load.stdout is not None and load.stdin is not None
    try:
        def acked_at_least(n: int) -> int:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                line = load.stdout.readline()  # type: ignore[union-attr]
                assert line, f"the load exited: {load.stderr.read()[-3000:]}"  # type: ignore[union-attr]
                if _acked(line) >= n:
                    return _acked(line)
            raise AssertionError(f"fewer than {n} writes acknowledged in 120 s")

        before = acked_at_least(300)
        plain.compose("kill", "-s", "KILL", service, timeout=60)
        # Leadership moves to the other replicas and writes go on (min.insync.replicas=2 of 3).
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            now = plain.client("leaders", "--bootstrap", PLAIN_GRPC, "--topic", "chaos")
            if all(now[str(p)][0] not in (victim, -1) for p in led):
                break
            time.sleep(1.0)
        else:
            raise AssertionError(f"partitions {led} still led by {victim} or leaderless: {now}")
        during = acked_at_least(before + 300)
        plain.compose("start", service, timeout=120)
        plain.wait_healthy((service,))
        deadline = time.monotonic() + 120  # back in every ISR
        while time.monotonic() < deadline:
            now = plain.client("leaders", "--bootstrap", PLAIN_GRPC, "--topic", "chaos")
            if all(victim in isr for _, isr in now.values()):
                break
            time.sleep(1.0)
        else:
            raise AssertionError(f"{service} not back in every ISR: {now}")
        after_broker = acked_at_least(during + 200)
        # The ZooKeeper leader SIGKILLed under the same load: the other two elect a leader among them
        # (a quorum of two of three), the brokers' sessions move to them and writes go on; the
        # killed server, started again, rejoins as a follower.
        zk_leader = next(s for s, mode in plain.zookeeper_modes().items() if mode == "leader")
        t_zk = time.monotonic()
        plain.compose("kill", "-s", "KILL", zk_leader, timeout=60)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            modes = plain.zookeeper_modes()
            if sorted(m for s, m in modes.items() if s != zk_leader) == ["follower", "leader"]:
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"no new ZooKeeper leader after {zk_leader} was killed: {modes}")
        elected_s = time.monotonic() - t_zk
        without_zk = acked_at_least(after_broker + 300)
        t_start = time.monotonic()
        plain.compose("start", zk_leader, timeout=120)
        plain.wait_healthy((zk_leader,))
        rejoined_s = time.monotonic() - t_start
        modes = plain.zookeeper_modes()
        assert sorted(modes.values()) == ["follower", "follower", "leader"] and modes[zk_leader] == "follower", modes
        acked_at_least(without_zk + 200)
        out, err = load.communicate("stop\n", timeout=300)
    finally:
        if load.poll() is None:
            load.kill()
            load.wait(10)
    assert load.returncode == 0, err[-3000:]
    report = json.loads(out.strip().splitlines()[-1])
    assert report["valid"], report["summary"]
    assert report["acked"] >= without_zk + 200
    # Every replica byte-identical below the high watermark, checked from inside the network.
    verify = plain.compose("run", "--rm", "--no-deps", "--entrypoint", "minikafka", "secrets", "verify-replicas",
                           "--bootstrap-server", PLAIN_GRPC, "--topic", "chaos", timeout=180, check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    note(f"chaos: SIGKILL of {service} (leader of partitions {led}), then of ZooKeeper's leader {zk_leader}, "
         f"under idempotent acks=all load, each restarted, {report['summary']}; verify-replicas OK; "
         f"{time.monotonic() - t0:.0f} s (ZooKeeper step {time.monotonic() - t_zk:.0f} s: new leader seen "
         f"{elected_s:.1f} s after the kill, restarted server healthy {rejoined_s:.0f} s after `start`)")


def test_down_v_leaves_no_container_network_or_volume(plain: ComposeProject) -> None:
    before = plain.leftovers()
    assert before["containers"] and before["volumes"]
    t0 = time.monotonic()
    plain.compose("down", "-v", "--remove-orphans", timeout=300)
    assert plain.leftovers() == {"containers": [], "networks": [], "volumes": []}
    note(f"`down -v`: nothing left ({len(before['containers'])} containers, {len(before['volumes'])} volumes "
         f"removed in {time.monotonic() - t0:.0f} s)")
