"""The secure override for real (issue 35, SPEC S12.3): `docker compose -f docker-compose.yml -f
docker-compose.secure.yml up -d` starts a cluster whose clients need TLS + SCRAM-SHA-256. It runs
over the single-ZooKeeper override (issue 32: `-f docker-compose.single-zk.yml` before it), so that
override runs for real too - a standalone ZooKeeper answering for zookeeper-1..3, the other two with
no container - while the ensemble runs in test_compose_cluster.py (the secure override touches no
ZooKeeper setting but its connect strings and depends_on, the same for both). The
admin's password and the CA come out of the `secrets` volume (as the README says); a SCRAM client
- the project's CLI and librdkafka - produces and reads back, an anonymous one and a wrong password
are refused, and neither the password nor any key the `secrets` service made is in the image.
The plain cluster is test_compose_cluster.py (its module's cluster is down before this one is up:
both publish the same ports)."""

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
    PLAIN_GRPC,
    PLAIN_KAFKA,
    SECURE,
    SINGLE_ZK,
    ZOOKEEPERS,
    BuiltImages,
    ComposeProject,
    image_layer_hits,
    note,
)
from docker_engine import DockerEngine

pytestmark = pytest.mark.timeout(2400)

SERVICES = ("zookeeper-1", *BROKERS)


@pytest.fixture(scope="module")
def secure(docker_engine: DockerEngine, compose_images: BuiltImages,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeProject]:
    project = ComposeProject(docker_engine, f"mksecure{os.getpid()}", [COMPOSE, SINGLE_ZK, SECURE],
                             tmp_path_factory.mktemp("secure"))
    t0 = time.monotonic()
    try:
        project.compose("up", "-d", timeout=600)
        up_s = time.monotonic() - t0
        took = project.wait_healthy(SERVICES)
        note(f"secure + single-zk overrides: `up -d` returned in {up_s:.0f} s, then healthy: "
             + ", ".join(f"{k} {v:.0f} s" for k, v in took.items()))
        yield project
    finally:
        project.compose("down", "-v", "--remove-orphans", timeout=300, check=False)


def _secret(project: ComposeProject, name: str) -> str:
    """A file of the secrets volume, read the README's way (a one-shot container that mounts it)."""
    r = project.compose("run", "--rm", "--no-deps", "--entrypoint", "cat", "bootstrap-admin",
                        f"/etc/minikafka/secrets/{name}", timeout=120)
    return r.stdout


def test_the_single_zookeeper_override_runs_one_standalone_server(secure: ComposeProject) -> None:
    assert secure.zookeeper_modes() == {"zookeeper-1": "standalone", "zookeeper-2": "not serving",
                                        "zookeeper-3": "not serving"}
    assert {zk: secure.compose("ps", "-q", zk, timeout=60).stdout.split() != [] for zk in ZOOKEEPERS} == \
        {"zookeeper-1": True, "zookeeper-2": False, "zookeeper-3": False}


def test_a_scram_client_produces_and_an_anonymous_one_is_refused(secure: ComposeProject) -> None:
    t0 = time.monotonic()
    password = _secret(secure, "admin.password").strip()
    assert len(password) >= 16
    ca = secure.workdir / "ca.pem"
    ca.write_text(_secret(secure, "ca.pem"))
    admin = secure.workdir / "admin.properties"
    admin.write_text(f"security.protocol=SASL_SSL\nssl.truststore.location={ca}\nsasl.mechanism=SCRAM-SHA-256\n"
                     f"sasl.username=admin\nsasl.password={password}\n")
    cfg = ("--bootstrap-server", PLAIN_GRPC, "--command-config", str(admin))
    r = secure.cli("topics", "--create", "--topic", "secure-events", "--partitions", "3", "--replication-factor", "3",
                   *cfg)
    assert r.returncode == 0, r.stderr
    lines = [f"scram-{i}" for i in range(20)]
    r = secure.cli("produce", "--topic", "secure-events", *cfg, stdin="\n".join(lines) + "\n")
    assert r.returncode == 0, r.stderr
    r = secure.cli("consume", "--topic", "secure-events", "--from-beginning", "--max-messages", "20",
                   "--timeout-ms", "30000", *cfg)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == sorted(lines)
    scram = {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "admin",
             "sasl.password": password, "ssl.ca.location": str(ca)}
    rd = secure.client("rdkafka", "--bootstrap", PLAIN_KAFKA, "--topic", "secure-events", "--count", "100",
                       "--props", json.dumps(scram))
    assert rd == {"produced": 100, "delivery_errors": [], "read_back": 100}
    # Anonymous: no credentials on either listener, or a wrong password, is refused.
    r = secure.cli("topics", "--list", "--bootstrap-server", PLAIN_GRPC, timeout=120)
    assert r.returncode != 0 and "secure-events" not in r.stdout
    for props in ({}, {"security.protocol": "SSL", "ssl.ca.location": str(ca)},
                  {**scram, "sasl.password": password + "x"}):
        refused = secure.client("refused", "--bootstrap", PLAIN_KAFKA, "--props", json.dumps(props))
        assert refused["refused"], (props.get("security.protocol", "PLAINTEXT"), refused)
    note(f"secure override: SCRAM client (CLI, librdkafka) served, anonymous and wrong password refused in "
         f"{time.monotonic() - t0:.0f} s")


def test_no_secret_of_the_cluster_is_in_the_image(secure: ComposeProject, tmp_path: Path) -> None:
    password = _secret(secure, "admin.password").strip()
    key = _secret(secure, "broker-1.pem")
    body = key.split("PRIVATE KEY-----", 1)[1].split()[0]  # the key's first base64 line
    assert len(body) >= 40
    hits = image_layer_hits(secure.engine, "minikafka:latest",
                            [re.compile(re.escape(password.encode())), re.compile(re.escape(body.encode()))], tmp_path)
    assert hits == []


def test_secure_down_v_leaves_nothing(secure: ComposeProject) -> None:
    secure.compose("down", "-v", "--remove-orphans", timeout=300)
    assert secure.leftovers() == {"containers": [], "networks": [], "volumes": []}
