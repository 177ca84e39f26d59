"""docker-compose.yml is valid and runs brokers exactly as the local launcher does: every command,
config key and port in it is one that `minikafka` and the broker accept (no Docker engine needed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from broker.server.config import build_config
from client.cli import build_parser
from client.ops.local_cluster import BrokerProc, broker_properties

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
SECURE = ROOT / "docker-compose.secure.yml"
SINGLE_ZK = ROOT / "docker-compose.single-zk.yml"
ENSEMBLE_CONNECT = "zookeeper-1:2181,zookeeper-2:2181,zookeeper-3:2181"


def test_compose_file_validates_with_docker_compose() -> None:
    exe = shutil.which("docker-compose")
    assert exe, "docker-compose is installed by `make setup` (scripts/ensure-system-packages.sh)"
    # Every combination the README documents: the ensemble or one ZooKeeper, plain or secure.
    for files in ([COMPOSE], [COMPOSE, SECURE], [COMPOSE, SINGLE_ZK], [COMPOSE, SINGLE_ZK, SECURE]):
        r = subprocess.run([exe, *(x for f in files for x in ("-f", str(f))), "config", "-q"], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr


def _launcher_keys(secure: bool) -> set[str]:
    return set(broker_properties(BrokerProc(1, 1, metrics_port=2, internal_port=3), "zk:2181", Path("/d"), 3,
                                 Path("/s"), secure))


def test_compose_brokers_match_the_local_launcher() -> None:
    spec = yaml.safe_load(COMPOSE.read_text())
    secure_spec = yaml.safe_load(SECURE.read_text())
    assert "version" not in spec  # obsolete in the Compose specification
    brokers = {name: svc for name, svc in spec["services"].items() if name.startswith("broker-")}
    assert sorted(brokers) == ["broker-1", "broker-2", "broker-3"]
    parser = build_parser()
    for name, svc in brokers.items():
        for command, secure in ((svc["command"], False), (secure_spec["services"][name]["command"], True)):
            args = parser.parse_args(command)
            assert args.command == "broker" and args.config is None
            props = dict(item.split("=", 1) for item in args.set)
            # Certificates exist only at run time: point the checks at stand-ins.
            for key in ("ssl.keystore.location", "ssl.truststore.location"):
                assert props[key].startswith("/etc/minikafka/secrets/")
            cfg = build_config({**props, "ssl.keystore.location": __file__, "ssl.truststore.location": __file__})
            assert _launcher_keys(secure) <= set(props), f"{name} lacks {_launcher_keys(secure) - set(props)}"
            assert cfg.broker_id == int(name.split("-")[1])
            assert cfg.zookeeper_connect == ENSEMBLE_CONNECT and cfg.zookeeper_set_acl
            assert props["zookeeper.session.timeout.ms"] == broker_properties(
                BrokerProc(1, 1), "", Path("/d"), 3, Path("/s"))["zookeeper.session.timeout.ms"]
            assert cfg.authorizer_enabled == secure
            client = next(x for x in cfg.advertised_listener_list if x.name == "CLIENT")
            internal = next(x for x in cfg.advertised_listener_list if x.name == "INTERNAL")
            assert client.host == internal.host == name
            assert client.security_protocol == ("SASL_SSL" if secure else "PLAINTEXT")
            assert cfg.inter_broker_listener.name == "INTERNAL" and internal.security_protocol == "SSL"
            # Followers fetch on a fixed port beside INTERNAL (never published, checked below).
            assert cfg.replica_fetch_listener_port == int(f"{cfg.broker_id}9095")
            # The Kafka protocol listener, advertised under the broker's name: PLAINTEXT on the plain
            # cluster, SASL_SSL on the secure one (broker.server.config refuses anything weaker there).
            assert [(x.name, x.host, x.security_protocol) for x in cfg.advertised_kafka_listener_list] == \
                [("KAFKA", name, "SASL_SSL" if secure else "PLAINTEXT")]
        plain = build_config({**dict(i.split("=", 1) for i in parser.parse_args(svc["command"]).set),
                              "ssl.keystore.location": __file__, "ssl.truststore.location": __file__})
        (kafka,) = plain.advertised_kafka_listener_list
        client = next(x for x in plain.advertised_listener_list if x.name == "CLIENT")
        published = {str(p) for p in svc["ports"]}
        # Only the client listeners (gRPC and Kafka protocol), and only on the host's loopback;
        # never INTERNAL nor metrics.
        assert published == {f"127.0.0.1:{client.port}:{client.port}", f"127.0.0.1:{kafka.port}:{kafka.port}"}
        assert svc["healthcheck"]["test"][-1] == f"127.0.0.1:{client.port}"
        assert any(v.endswith(":" + str(cfg.log_dir_paths[0])) for v in svc["volumes"])
        assert "secrets:/etc/minikafka/secrets:ro" in svc["volumes"]
    # Everything that depends on another service waits for it to be healthy (or done).
    for name, svc in spec["services"].items():
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert cond["condition"] in ("service_healthy", "service_completed_successfully"), (name, dep)
    init = parser.parse_args(spec["services"]["secrets"]["command"])
    assert init.command == "certs" and init.brokers == "1,2,3" and init.zookeeper_digest
    boot = parser.parse_args(secure_spec["services"]["bootstrap-admin"]["command"])
    assert boot.command == "users" and boot.add == "admin" and boot.zookeeper_bootstrap == ENSEMBLE_CONNECT
    demo = parser.parse_args(spec["services"]["demo"]["command"])
    assert demo.command == "demo" and demo.what == "cluster"
    assert "python:3.11-slim-bookworm" in (ROOT / "Dockerfile").read_text()


def test_compose_zookeeper_ensemble_and_the_single_zookeeper_override() -> None:
    spec = yaml.safe_load(COMPOSE.read_text())
    zks = {name: svc for name, svc in spec["services"].items() if name.startswith("zookeeper")}
    assert sorted(zks) == ["zookeeper-1", "zookeeper-2", "zookeeper-3"]
    servers = {f"server.{n}=zookeeper-{n}:2888:3888;2181" for n in (1, 2, 3)}
    for name, svc in zks.items():
        n = int(name.split("-")[1])
        env = svc["environment"]
        assert env["ZOO_MY_ID"] == str(n) and set(env["ZOO_SERVERS"].split()) == servers
        assert svc["healthcheck"]["test"] == ["CMD", "zk-healthcheck"]
        assert svc["ports"] == [f"127.0.0.1:{2180 + n}:2181"]  # as `cluster up --zookeepers 3` numbers them
        assert sorted(v.split(":")[1] for v in svc["volumes"]) == ["/data", "/datalog"]
    # Brokers wait for all three to serve (compose cannot say "a quorum of"); so does bootstrap-admin.
    secure_spec = yaml.safe_load(SECURE.read_text())
    for services in (spec["services"], secure_spec["services"]):
        for name, svc in services.items():
            if name.startswith("broker-") or name == "bootstrap-admin":
                assert {zk: cond["condition"] for zk, cond in svc["depends_on"].items()
                        if zk.startswith("zookeeper")} == dict.fromkeys(zks, "service_healthy"), name
    # The override: zookeeper-1 standalone under all three names, the others without a container.
    single = yaml.safe_load(SINGLE_ZK.read_text())["services"]
    assert single["zookeeper-1"]["environment"]["ZOO_SERVERS"] == ""
    assert single["zookeeper-1"]["networks"]["default"]["aliases"] == ["zookeeper-2", "zookeeper-3"]
    assert single["zookeeper-2"] == single["zookeeper-3"] == {"scale": 0}


def test_compose_spark_job_runs_a_real_job_with_valid_arguments() -> None:
    from spark_jobs import topic_to_parquet

    spec = yaml.safe_load(COMPOSE.read_text())
    job = spec["services"]["spark-job"]
    assert job["entrypoint"][:3] == ["python", "-m", "spark_jobs.topic_to_parquet"]
    assert job["build"]["args"]["WITH_SPARK"] == "1"
    assert "WITH_SPARK" in (ROOT / "Dockerfile").read_text()
    parsed = topic_to_parquet.build_parser().parse_args(job["command"])
    assert parsed.bootstrap_server == "broker-1:19092,broker-2:29092,broker-3:39092"
    assert parsed.topic == "events"
