"""One compose project of the compose test: the repository's compose files plus the test's override,
driven with the compose command the machine has, and clients on the host.

The override only makes image builds run on the host network (the test's engine has no NAT, see
docker_engine.py); everything else is the users' docker-compose.yml / docker-compose.secure.yml as
they are. Clients on the host run in a mount namespace of their own whose /etc/hosts says
``127.0.0.1 broker-1 broker-2 broker-3`` - what the README asks users to add to theirs - so the
machine's /etc/hosts is never touched.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docker_engine import DockerEngine

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
SECURE = ROOT / "docker-compose.secure.yml"
SINGLE_ZK = ROOT / "docker-compose.single-zk.yml"
# The ensemble: zookeeper-N's client port is published on the host's loopback as 2180 + N.
ZOOKEEPERS = {"zookeeper-1": 2181, "zookeeper-2": 2182, "zookeeper-3": 2183}
# (spark-job, of the `spark` profile, is built only when named: `--profile spark build spark-job`.)
BUILT_SERVICES = {**{zk: ROOT / "docker" / "zookeeper" for zk in ZOOKEEPERS}, "secrets": ROOT, "broker-1": ROOT,
                  "broker-2": ROOT, "broker-3": ROOT, "spark-job": ROOT}
BROKERS = ("broker-1", "broker-2", "broker-3")
PLAIN_GRPC = "broker-1:19092,broker-2:29092,broker-3:39092"
PLAIN_KAFKA = "broker-1:19094,broker-2:29094,broker-3:39094"
CLIENTS = Path(__file__).resolve().parent / "compose_clients.py"
PROJECT_IMAGES = ("minikafka:latest", "minikafka-zookeeper:3.8")
SPARK_IMAGE = "minikafka-spark:latest"  # the same Dockerfile with WITH_SPARK=1: Java and PySpark
# What the compose test did and how long it took: printed at the end of pytest's output (conftest.py).
REPORT: list[str] = []


def note(line: str) -> None:
    REPORT.append(line)


@dataclass(frozen=True)
class BuiltImages:
    build_s: float
    sizes_mb: dict[str, float]


def compose_command() -> list[str]:
    """docker-compose (1.29, Debian's: it builds through the engine's API) where it exists, else the
    docker CLI's compose plugin."""
    exe = shutil.which("docker-compose")
    if exe:
        return [exe]
    return [shutil.which("docker") or "docker", "compose"]


class ComposeProject:
    def __init__(self, engine: DockerEngine, name: str, files: list[Path], workdir: Path) -> None:
        self.engine = engine
        self.name = name
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        override = workdir / "docker-compose.test.yml"
        override.write_text(json.dumps({"services": {
            svc: {"build": {"context": str(ctx), "network": "host"}} for svc, ctx in BUILT_SERVICES.items()}}))
        self.files = [*files, override]
        self.hosts = workdir / "hosts"
        self.hosts.write_text("127.0.0.1 localhost\n::1 localhost\n127.0.0.1 broker-1 broker-2 broker-3\n")

    def compose(self, *args: str, timeout: float = 600.0, check: bool = True,
                stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        files = [x for f in self.files for x in ("-f", str(f))]
        r = subprocess.run([*compose_command(), "-p", self.name, "--project-directory", str(ROOT), *files, *args],
                           env=self.engine.env(), capture_output=True, text=True, timeout=timeout, input=stdin,
                           cwd=ROOT)
        if check and r.returncode != 0:
            raise AssertionError(f"compose {' '.join(args)} exited {r.returncode}:\n{r.stdout[-3000:]}\n"
                                 f"{r.stderr[-3000:]}")
        return r

    def container(self, service: str) -> str:
        ids = self.compose("ps", "-q", service, timeout=60).stdout.split()
        assert ids, f"no container for {service}"
        return ids[0]

    def state(self, service: str) -> dict[str, Any]:
        out = self.engine.docker("inspect", "-f", "{{json .State}}", self.container(service), timeout=30).stdout
        state: dict[str, Any] = json.loads(out)
        return state

    def health(self, service: str) -> str:
        state = self.state(service)
        return str((state.get("Health") or {}).get("Status", "running" if state.get("Running") else "not running"))

    def wait_healthy(self, services: tuple[str, ...], timeout_s: float = 240.0) -> dict[str, float]:
        """Bounded poll until every service's health check passes; returns the seconds each took."""
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        health: dict[str, str] = {}
        took: dict[str, float] = {}
        while time.monotonic() < deadline:
            health = {s: self.health(s) for s in services}
            took.update({s: time.monotonic() - t0 for s, h in health.items() if h == "healthy" and s not in took})
            if len(took) == len(services):
                return took
            time.sleep(1.0)
        logs = self.compose("logs", "--tail", "30", timeout=60, check=False).stdout
        raise AssertionError(f"not healthy after {timeout_s}s: {health}\n{logs[-6000:]}")

    def zookeeper_modes(self) -> dict[str, str]:
        """Each ZooKeeper's ``srvr`` Mode (leader, follower, standalone), asked from the host on its
        published port; ``not serving`` for one without a quorum or not running."""
        from client.ops.local_cluster import NOT_SERVING, four_letter_word, zookeeper_mode

        modes = {}
        for service, port in ZOOKEEPERS.items():
            try:
                modes[service] = zookeeper_mode(four_letter_word("127.0.0.1", port, "srvr", timeout=5.0))
            except OSError:
                modes[service] = NOT_SERVING
        return modes

    def leftovers(self) -> dict[str, list[str]]:
        """Containers, networks and volumes of this project still in the engine."""
        label = f"label=com.docker.compose.project={self.name}"
        return {kind: self.engine.docker(*cmd, "--filter", label, timeout=30).stdout.split()
                for kind, cmd in (("containers", ("ps", "-aq")), ("networks", ("network", "ls", "-q")),
                                  ("volumes", ("volume", "ls", "-q")))}

    # ------------------------------------------------------------------ clients on the host

    def _on_host(self, argv: list[str]) -> list[str]:
        return ["unshare", "--mount", "--", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', str(self.hosts),
                *argv]

    def host(self, *argv: str, timeout: float = 120.0, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self._on_host(list(argv)), capture_output=True, text=True, timeout=timeout, input=stdin,
                              cwd=ROOT)

    def cli(self, *args: str, timeout: float = 120.0, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """The project's own CLI on the host."""
        return self.host(sys.executable, "-m", "client.cli", *args, timeout=timeout, stdin=stdin)

    def client(self, *args: str, timeout: float = 180.0) -> dict[str, Any]:
        """compose_clients.py on the host; its last line's JSON."""
        r = self.host(sys.executable, str(CLIENTS), *args, timeout=timeout)
        assert r.returncode == 0, f"compose_clients {args[0]} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        result: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
        return result

    def client_process(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self._on_host([sys.executable, str(CLIENTS), *args]), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


# A PEM private key with its body (code that parses PEM holds the header line alone).
PEM_PRIVATE_KEY = re.compile(rb"-----BEGIN [A-Z ]*PRIVATE KEY-----\r?\n[A-Za-z0-9+/=\r\n]{64,}")


def image_layer_hits(engine: DockerEngine, image: str, needles: list[re.Pattern[bytes]], workdir: Path,
                     base: str = "python:3.11-slim-bookworm") -> list[str]:
    """Every file in a layer that ``image`` adds to ``base`` (``docker save``) whose content matches
    one of ``needles``, and every layer command (``docker history``) that does: where a secret baked
    into an image would be. The base's own layers are Debian's (libgnutls carries self-test keys);
    files over 8 MiB are skipped (interpreters, libraries)."""
    import tarfile

    base_layers = len(json.loads(engine.docker("image", "inspect", "-f", "{{json .RootFS.Layers}}", base).stdout))
    hits = []
    history = engine.docker("history", "--no-trunc", "--format", "{{.CreatedBy}}", image, timeout=60).stdout
    hits += [f"history: {line[:120]}" for line in history.splitlines()
             if any(n.search(line.encode()) for n in needles)]
    saved = workdir / f"{image.replace(':', '-').replace('/', '-')}.tar"
    engine.docker("save", "-o", str(saved), image, timeout=600)
    try:
        with tarfile.open(saved) as outer:
            manifest = json.loads(outer.extractfile("manifest.json").read())  # type: ignore[union-attr]
            own_layers = manifest[0]["Layers"][base_layers:]
            assert own_layers, f"{image} adds no layer to {base}"
            for name in own_layers:
                member = outer.getmember(name)
                layer = outer.extractfile(member)
                assert layer is not None
                with tarfile.open(fileobj=layer) as inner:
                    for f in inner:
                        if not f.isfile() or f.size > 8 * 2**20:
                            continue
                        data = inner.extractfile(f)
                        content = data.read() if data else b""
                        hits += [f"{member.name.split('/')[0][:12]}:{f.name}" for n in needles if n.search(content)]
    finally:
        saved.unlink(missing_ok=True)
    return hits
