"""docker-compose.yml is valid and runs brokers exactly as the local launcher does: every command,
config key and port in it is one that `minikafka` and the broker accept (no Docker engine needed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from broker.config import build_config
from client.cli import build_parser
from client.local_cluster import BrokerProc, broker_properties

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"


def test_compose_file_validates_with_docker_compose() -> None:
    exe = shutil.which("docker-compose")
    assert exe, "docker-compose is installed by `make setup` (scripts/ensure-system-packages.sh)"
    r = subprocess.run([exe, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_compose_brokers_match_the_local_launcher() -> None:
    spec = yaml.safe_load(COMPOSE.read_text())
    brokers = {name: svc for name, svc in spec["services"].items() if name.startswith("broker-")}
    assert sorted(brokers) == ["broker-1", "broker-2", "broker-3"]
    launcher_keys = set(broker_properties(BrokerProc(1, 1, metrics_port=2), "zk:2181", Path("/d"), 3))
    parser = build_parser()
    for name, svc in brokers.items():
        args = parser.parse_args(svc["command"])
        assert args.command == "broker" and args.config is None
        props = dict(item.split("=", 1) for item in args.set)
        cfg = build_config(props)  # every key known, every value valid
        assert launcher_keys <= set(props), f"{name} lacks {launcher_keys - set(props)}"
        assert cfg.broker_id == int(name.split("-")[1])
        assert cfg.zookeeper_connect == "zookeeper:2181"
        assert props["zookeeper.session.timeout.ms"] == broker_properties(
            BrokerProc(1, 1), "", Path("/d"), 3)["zookeeper.session.timeout.ms"]
        host, port = cfg.advertised
        assert host == name and cfg.listener[1] == port
        published = {str(p) for p in svc["ports"]}
        assert f"{port}:{port}" in published and f"{cfg.metrics_port}" in {p.split(":")[1] for p in published}
        assert svc["healthcheck"]["test"][-1] == f"127.0.0.1:{port}"
        assert any(v.endswith(":" + str(cfg.log_dir_paths[0])) for v in svc["volumes"])
    demo = parser.parse_args(spec["services"]["demo"]["command"])
    assert demo.command == "demo" and demo.what == "cluster"


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
