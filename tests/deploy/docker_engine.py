"""A Docker engine for the compose test: the one ``DOCKER_HOST`` names, else one of the test's own,
else the machine's default socket.

The engine of the test's own is Debian's ``dockerd`` (needs root), isolated from anything
system-wide: its data root, exec root (with the containerd it starts), socket and pid file all in
one temporary folder; its own daemon.json (empty: /etc/docker's is not read); its own containerd
namespace; no ``docker0`` bridge (``--bridge=none``) and no iptables rules (``--iptables=false``),
so compose's user-defined networks (bridges with service-name DNS) take addresses from a pool the
test chooses and published ports are served by docker-proxy on the host's loopback. Without NAT
the containers reach nothing outside their networks; image builds that download packages run on
the host network (the test's compose override). Stopping it removes every container, network and
volume it holds, ends the daemon (its process group: it was started in a session of its own),
unmounts what it left mounted and removes the folder.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ADDRESS_POOL = "base=10.232.0.0/16,size=24"
START_TIMEOUT_S = 60.0


class EngineUnavailable(Exception):
    """No engine can be used here; the message says why (the test is skipped with it)."""


@dataclass
class DockerEngine:
    host: str  # a DOCKER_HOST value
    own: bool  # started by the test (and stopped by it)
    description: str
    workdir: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    docker_cli: str = field(default_factory=lambda: shutil.which("docker") or "docker")

    def env(self) -> dict[str, str]:
        # The legacy builder: docker-compose 1.x builds through the API, and the Debian engine's
        # BuildKit needs the buildx plugin on the client side, which Debian does not ship.
        return {**os.environ, "DOCKER_HOST": self.host, "DOCKER_BUILDKIT": "0", "COMPOSE_DOCKER_CLI_BUILD": "0"}

    def docker(self, *args: str, timeout: float = 120.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([self.docker_cli, *args], env=self.env(), capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args)} exited {r.returncode}: {r.stderr.strip()[-2000:]}")
        return r

    def responds(self) -> bool:
        try:
            return self.docker("version", "--format", "{{.Server.Version}}", timeout=10, check=False).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def log_tail(self, lines: int = 40) -> str:
        if self.workdir is None or not (self.workdir / "dockerd.log").exists():
            return ""
        return "\n".join((self.workdir / "dockerd.log").read_text(errors="replace").splitlines()[-lines:])


def _probe(host: str, description: str) -> DockerEngine | None:
    engine = DockerEngine(host, own=False, description=description)
    return engine if engine.responds() else None


def start_engine() -> DockerEngine:
    """An engine that answers, or EngineUnavailable with every reason tried."""
    if shutil.which("docker") is None:
        raise EngineUnavailable("no docker client on the PATH (Debian: apt-get install docker.io)")
    reasons = []
    if os.environ.get("DOCKER_HOST"):
        engine = _probe(os.environ["DOCKER_HOST"], f"the engine at DOCKER_HOST={os.environ['DOCKER_HOST']}")
        if engine:
            return engine
        reasons.append(f"DOCKER_HOST={os.environ['DOCKER_HOST']} does not answer")
    if os.geteuid() != 0:
        reasons.append("not root, so no dockerd of the test's own")
    elif shutil.which("dockerd") is None:
        reasons.append("no dockerd (Debian: apt-get install docker.io; `make setup` does as root)")
    else:
        try:
            return _start_own()
        except EngineUnavailable as e:
            reasons.append(str(e))
    engine = _probe("unix:///var/run/docker.sock", "the machine's engine (/var/run/docker.sock)")
    if engine:
        return engine
    reasons.append("nothing answers on /var/run/docker.sock")
    raise EngineUnavailable("no Docker engine: " + "; ".join(reasons))


def _start_own() -> DockerEngine:
    # A short path: containerd's sockets under the exec root must fit in 108 bytes.
    workdir = Path(tempfile.mkdtemp(prefix="mkd-", dir="/tmp"))
    failures = []
    for driver in ("overlay2", "vfs"):
        engine = _launch(workdir, driver)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and engine.proc is not None and engine.proc.poll() is None:
            if engine.responds():
                return engine
            time.sleep(0.2)
        failures.append(f"dockerd --storage-driver={driver}: {engine.log_tail(3)}")
        _stop_own(engine, remove=False)
        for d in ("root", "exec"):
            _unmount_under(workdir / d)
            shutil.rmtree(workdir / d, ignore_errors=True)
    shutil.rmtree(workdir, ignore_errors=True)
    raise EngineUnavailable("dockerd did not start: " + " | ".join(failures))


def _launch(workdir: Path, driver: str) -> DockerEngine:
    (workdir / "daemon.json").write_text("{}\n")
    namespace = f"minikafka-test-{os.getpid()}"
    cmd = ["dockerd", f"--config-file={workdir / 'daemon.json'}", f"--data-root={workdir / 'root'}",
           f"--exec-root={workdir / 'exec'}", f"--pidfile={workdir / 'docker.pid'}",
           f"--host=unix://{workdir / 'docker.sock'}", f"--storage-driver={driver}",
           "--iptables=false", "--ip-masq=false", "--bridge=none", f"--default-address-pool={ADDRESS_POOL}",
           f"--containerd-namespace={namespace}", f"--containerd-plugins-namespace={namespace}-plugins",
           "--shutdown-timeout=5"]
    log = (workdir / "dockerd.log").open("ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    log.close()
    return DockerEngine(f"unix://{workdir / 'docker.sock'}", own=True, workdir=workdir, proc=proc,
                        description=f"dockerd of the test's own (--storage-driver={driver}, pool {ADDRESS_POOL})")


def stop_engine(engine: DockerEngine) -> dict[str, float]:
    """The test's own engine: everything in it removed, the daemon ended, its folder removed (the
    seconds each step took). An engine the test did not start is left running."""
    return _stop_own(engine, remove=True) if engine.own else {}


def _stop_own(engine: DockerEngine, remove: bool) -> dict[str, float]:
    steps: dict[str, float] = {}
    t = time.monotonic()
    proc = engine.proc
    if proc is not None and proc.poll() is None and engine.responds():
        # Everything in this engine is the test's: containers first (their shims would outlive the
        # daemon), then networks (their bridges are interfaces of the host) and volumes.
        ids = engine.docker("ps", "-aq", timeout=30, check=False).stdout.split()
        if ids:
            engine.docker("rm", "-f", "-v", *ids, timeout=120, check=False)
        engine.docker("network", "prune", "-f", timeout=60, check=False)
        engine.docker("volume", "prune", "-f", timeout=60, check=False)
    steps["remove containers, networks, volumes"], t = time.monotonic() - t, time.monotonic()
    if proc is not None and proc.poll() is None:
        proc.terminate()  # dockerd then stops the containerd it started
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    if proc is not None:  # anything of its session still there (containerd, if dockerd was killed)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    steps["stop dockerd"], t = time.monotonic() - t, time.monotonic()
    if remove and engine.workdir is not None:
        _unmount_under(engine.workdir)
        shutil.rmtree(engine.workdir, ignore_errors=True)
        steps["remove its data root"] = time.monotonic() - t
    return steps


def _unmount_under(path: Path) -> None:
    """Lazily unmount what the daemon left mounted below ``path`` (overlays, shm, netns), deepest first."""
    prefix = str(path.resolve()) + "/"
    try:
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    except OSError:
        return
    for mnt in sorted((m for m in mounts if (m + "/").startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", mnt], capture_output=True, timeout=30)
