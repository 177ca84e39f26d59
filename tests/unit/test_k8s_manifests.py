"""deploy/k8s (issue 32), checked offline: every object against Kubernetes' own schemas (the
kubernetes-validate package bundles them, strict: unknown fields refused), then what a schema
cannot see - selectors that match the pods' labels, services on the containers' named ports, a
ZooKeeper ensemble whose server lines name its own pods, and the broker's configuration as the
container's command renders it for a pod, loaded by the broker's own config loader, with the
certificates make-secrets.sh makes naming the address the broker advertises."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from broker.server.config import load_config

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
MANIFESTS = ("namespace.yaml", "zookeeper.yaml", "broker.yaml")
# The oldest Kubernetes the manifests are for: gRPC readiness probes are GA from 1.27.
KUBERNETES_VERSION = "1.27.0"
NAMESPACE = "minikafka"


def _docs() -> list[dict[str, Any]]:
    return [d for name in MANIFESTS for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def _one(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in _docs() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


@pytest.mark.parametrize("doc", _docs(), ids=lambda d: f"{d['kind']}-{d['metadata']['name']}")
def test_valid_against_the_kubernetes_schemas(doc: dict[str, Any]) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kustomization["resources"] == list(MANIFESTS)
    assert {p.name for p in K8S.glob("*.yaml")} == {*MANIFESTS, "kustomization.yaml"}


def test_objects_fit_together() -> None:
    docs = _docs()
    namespaced = [d for d in docs if d["kind"] != "Namespace"]
    assert {d["metadata"]["namespace"] for d in namespaced} == {NAMESPACE}
    sets = [d for d in docs if d["kind"] == "StatefulSet"]
    assert {s["metadata"]["name"] for s in sets} == {"zk", "broker"}
    for s in sets:
        labels = s["spec"]["template"]["metadata"]["labels"]
        selector = s["spec"]["selector"]["matchLabels"]
        assert selector.items() <= labels.items(), s["metadata"]["name"]
        headless = _one("Service", s["spec"]["serviceName"])
        assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
        assert headless["spec"]["selector"].items() <= labels.items()
        pod = s["spec"]["template"]["spec"]
        volumes = {v["name"] for v in pod.get("volumes", [])} | {v["metadata"]["name"]
                                                                 for v in s["spec"]["volumeClaimTemplates"]}
        ports = {p["name"]: p["containerPort"] for c in pod["containers"] for p in c["ports"]}
        for c in pod["containers"]:
            assert {m["name"] for m in c["volumeMounts"]} <= volumes
        for svc in (d for d in docs if d["kind"] == "Service" and d["spec"]["selector"].items() <= labels.items()):
            for p in svc["spec"]["ports"]:
                assert ports[p["targetPort"]] == p["port"], (svc["metadata"]["name"], p)
        pdbs = [d for d in docs if d["kind"] == "PodDisruptionBudget"
                and d["spec"]["selector"]["matchLabels"].items() <= labels.items()]
        assert len(pdbs) == 1 and pdbs[0]["spec"]["maxUnavailable"] == 1, s["metadata"]["name"]
        assert s["spec"]["replicas"] == 3


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def test_zookeeper_is_an_ensemble_of_its_own_pods() -> None:
    zk = _one("StatefulSet", "zk")
    container = zk["spec"]["template"]["spec"]["containers"][0]
    servers = _env(container)["ZOO_SERVERS"].split()
    service = zk["spec"]["serviceName"]
    assert servers == [f"server.{i + 1}=zk-{i}.{service}.{NAMESPACE}.svc.cluster.local:2888:3888;2181"
                       for i in range(zk["spec"]["replicas"])]
    assert "srvr" in _env(container)["ZOO_4LW_COMMANDS_WHITELIST"]  # the readiness probe's word
    assert zk["spec"]["podManagementPolicy"] == "Parallel"  # no server is ready before a quorum is up
    myid = subprocess.run(["sh", "-c", container["command"][2].replace("exec ", "echo $ZOO_MY_ID #")],
                          env={"HOSTNAME": "zk-2", "PATH": os.environ["PATH"]}, capture_output=True, text=True)
    assert myid.stdout.strip() == "3"  # zk-2 is server.3


@pytest.fixture
def secrets_dir(tmp_path: Path) -> Path:
    """make-secrets.sh run for real (`minikafka certs` from this checkout), kubectl faked: its
    arguments are printed instead of a Secret."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("kubectl", 'printf "%s\\n" "$@"'),
                       ("minikafka", f'exec {sys.executable} -m client.cli "$@"')):
        f = bin_dir / name
        f.write_text(f"#!/bin/sh\n{body}\n")
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    out = tmp_path / "secrets"
    root = str(K8S.parents[1])
    r = subprocess.run([str(K8S / "make-secrets.sh"), str(out), "3", NAMESPACE], capture_output=True, text=True,
                       env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": root},
                       cwd=root, timeout=120)
    assert r.returncode == 0, r.stderr
    args = r.stdout.splitlines()
    assert args[:3] == ["create", "secret", "generic"] and "minikafka-secrets" in args
    keys = sorted(a.split("=", 1)[1].split("=")[0] for a in args if a.startswith("--from-file="))
    assert keys == ["broker-0.pem", "broker-1.pem", "broker-2.pem", "ca.pem", "zookeeper.digest"]  # no CA key
    return out


def _rendered_broker_args(ordinal: int, tmp_path: Path) -> list[str]:
    """The broker container's command run by sh for pod broker-N, with `minikafka` printing its args."""
    broker = _one("StatefulSet", "broker")
    container = broker["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:2] == ["sh", "-c"]
    fake = tmp_path / "fakebin"
    fake.mkdir(exist_ok=True)
    (fake / "minikafka").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (fake / "minikafka").chmod(0o755)
    env_names = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env_names == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    r = subprocess.run(container["command"], capture_output=True, text=True, timeout=30,
                       env={"POD_NAME": f"broker-{ordinal}", "POD_NAMESPACE": NAMESPACE,
                            "PATH": f"{fake}:{os.environ['PATH']}"})
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_the_broker_config_loads_for_each_pod(tmp_path: Path, secrets_dir: Path) -> None:
    broker = _one("StatefulSet", "broker")
    pod = broker["spec"]["template"]["spec"]
    container = pod["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["secrets"]["secret"]["secretName"] == "minikafka-secrets"
    assert volumes["config"]["configMap"]["name"] == "broker-config"
    properties = tmp_path / "server.properties"
    properties.write_text(_one("ConfigMap", "broker-config")["data"]["server.properties"]
                          .replace(mounts["secrets"], str(secrets_dir)))
    zk = _one("StatefulSet", "zk")
    for ordinal in range(broker["spec"]["replicas"]):
        args = _rendered_broker_args(ordinal, tmp_path)
        assert args[:3] == ["broker", "--config", f"{mounts['config']}/server.properties"]
        sets = [a.replace(mounts["secrets"], str(secrets_dir)) for a, flag in zip(args[4:], args[3:], strict=False)
                if flag == "--set"]
        cfg = load_config(properties, sets)  # the broker's own checks: names, values, listeners, TLS files
        host = f"broker-{ordinal}.{broker['spec']['serviceName']}.{NAMESPACE}.svc.cluster.local"
        assert cfg.broker_id == ordinal
        assert {x.host for x in cfg.advertised_listener_list + cfg.advertised_kafka_listener_list} == {host}
        assert {x.host for x in cfg.listener_list + cfg.kafka_listener_list} == {"0.0.0.0"}
        assert cfg.zookeeper_connect == ",".join(
            f"zk-{i}.{zk['spec']['serviceName']}.{NAMESPACE}.svc.cluster.local:2181" for i in range(3))
        cert = x509.load_pem_x509_certificate(Path(cfg.ssl_keystore_location).read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
            x509.DNSName)
        assert host in names, f"broker-{ordinal}'s certificate must name what it advertises"
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        by_name = {x.name: x.port for x in cfg.listener_list + cfg.kafka_listener_list}
        assert (by_name["CLIENT"], by_name["INTERNAL"], by_name["KAFKA"]) == \
            (ports["client"], ports["internal"], ports["kafka"])
        assert (cfg.replica_fetch_listener_port, cfg.metrics_port) == (ports["replica-fetch"], ports["metrics"])
        # kubelet's gRPC probe speaks plaintext: it must ask the PLAINTEXT CLIENT listener.
        assert container["readinessProbe"]["grpc"]["port"] == by_name["CLIENT"]
        assert next(x for x in cfg.listener_list if x.name == "CLIENT").security_protocol == "PLAINTEXT"


def test_docs_show_how_to_apply_them() -> None:
    doc = (K8S.parents[1] / "docs" / "kubernetes.md").read_text()
    assert "make-secrets.sh" in doc and "kubectl apply -k deploy/k8s" in doc
    assert re.search(r"docs/kubernetes\.md", (K8S.parents[1] / "README.md").read_text())
