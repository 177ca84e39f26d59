"""``minikafka cluster ...``: a local ZooKeeper + N brokers as background processes.

Everything lives under one directory (``--dir``, default ``.minikafka``):
``cluster.json`` (ports, pids), ``zookeeper/`` (zoo.cfg, data, log),
``broker-N/`` (server.properties, data, broker.log) and ``secrets/`` (mode
0700: the cluster CA and every broker's certificate, ZooKeeper's digest
credential, and with ``--secure`` the admin user's ``client.properties``).
Ports are picked free on 127.0.0.1, so several clusters in different
directories run side by side. The same launcher starts clusters for the
integration tests.

Secure by default (SPEC S12): every broker has a ``CLIENT`` listener and an
``INTERNAL`` one; the inter-broker plane is always mutual TLS with broker
certificates, and brokers write ZooKeeper with ACLs (readable by all, writable
only with the cluster's digest credential). ``--secure`` also puts clients on
TLS + SCRAM (SASL_SSL) with the ACL authorizer on and an ``admin`` super user.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from secrets import token_urlsafe as secrets_token
from typing import Any

import grpc

from client.ops import certs
from client.ops.certs import CA_CERT
from proto.properties import parse_properties
from proto.scram import MECHANISM, new_credential
from proto.transport import PLAINTEXT_SECURITY, ChannelSecurity
from zk.client import ZooKeeperUnreachableError

ZK_JAR = Path("/usr/share/java/zookeeper.jar")
# The checkout this module belongs to (client/ops/local_cluster.py -> the repository root): brokers
# run its code, whatever else the virtualenv has installed.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
SECRETS_DIR = "secrets"
ZK_DIGEST_FILE = "zookeeper.digest"
ADMIN_USER = "admin"
ADMIN_PRINCIPAL = f"User:{ADMIN_USER}"
ZK_CONF_DIR = Path("/etc/zookeeper/conf")
STATE_FILE = "cluster.json"
SIGNALS = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM, "STOP": signal.SIGSTOP, "CONT": signal.SIGCONT}


class ClusterError(Exception):
    """A cluster command cannot do what was asked; the message says why."""


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]


def ephemeral_port_range() -> tuple[int, int]:
    """The kernel's range for source ports of outgoing connections and bind(0) (Linux:
    net.ipv4.ip_local_port_range; its default when unreadable)."""
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def listener_port_range(ephemeral: tuple[int, int]) -> tuple[int, int]:
    """Where ``free_ports`` picks (pure): below the ephemeral range and above the documented ports
    (ZooKeeper 2181..., brokers 9092...9399), or above the range when it starts too low."""
    low, high = ephemeral
    if low - 1 >= 20000 + 1000:
        return 20000, low - 1
    return (high + 1, 65535) if high < 64000 else (20000, 65535)


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct free ports for listeners started later.

    Picked outside the kernel's ephemeral range, not by bind(0): a port bind(0) handed out is free
    only until the next outgoing connection takes it as its source port, and between this pick and
    a broker's bind a client's or ZooKeeper's connection did (the broker exited with "Failed to
    bind"). Each candidate is bound without SO_REUSEADDR (so nothing, not even a connection in
    TIME_WAIT, uses it) and all stay bound until every port is picked: never the same port twice."""
    low, high = listener_port_range(ephemeral_port_range())
    rng = random.Random()
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        for _ in range(count * 50):  # bounded: a crowded range falls back to the kernel's choice
            if len(ports) == count:
                break
            port = rng.randint(low, high)
            if port in ports:
                continue
            s = socket.socket()
            try:
                s.bind((host, port))
            except OSError:
                s.close()
                continue
            socks.append(s)
            ports.append(port)
        while len(ports) < count:
            s = socket.socket()
            socks.append(s)
            s.bind((host, 0))
            ports.append(int(s.getsockname()[1]))
        return ports
    finally:
        for s in socks:
            s.close()


# The documented addresses of `minikafka cluster up`: ZooKeeper on 2181 and broker N's Kafka
# wire-protocol listener (librdkafka, kafka-python, kcat...) on 9092 + N - 1, Kafka's customary
# ones; its gRPC client listener (this project's clients) on 9392 + N - 1, its inter-broker
# (mutual TLS) listener on 9192 + N - 1 and its Prometheus metrics on 9292 + N - 1. On a secure
# cluster the Kafka listener is SASL_SSL, as the gRPC clients'. Saved addresses keep working across
# restarts; when any of them is taken (another cluster, another program) the cluster takes free
# ports instead and says so, and `--random-ports` (the tests) always does.
ZOOKEEPER_PORT = 2181
CLIENT_PORT_BASE = 9392
INTERNAL_PORT_BASE = 9192
METRICS_PORT_BASE = 9292
KAFKA_PORT_BASE = 9092


def fixed_ports(brokers: int) -> dict[str, list[int]]:
    """The documented ports for ``brokers`` brokers, per series (pure)."""
    return {"client": [CLIENT_PORT_BASE + i for i in range(brokers)],
            "internal": [INTERNAL_PORT_BASE + i for i in range(brokers)],
            "metrics": [METRICS_PORT_BASE + i for i in range(brokers)],
            "kafka": [KAFKA_PORT_BASE + i for i in range(brokers)]}


def previous_zookeeper_port(previous: ClusterState | None) -> int | None:
    """The loopback port of the ZooKeeper a stopped cluster of this directory ran (pure)."""
    if previous is None or not previous.zookeeper_dir:  # an external ZooKeeper is not ours to place
        return None
    host, _, port = previous.zookeeper_connect.rpartition(":")
    return int(port) if host == "127.0.0.1" and port.isdigit() else None


def previous_broker_ports(previous: ClusterState | None, brokers: int) -> list[int]:
    """A stopped cluster's ports per broker (client, metrics, internal, Kafka), when it had as many
    brokers; else [] (pure)."""
    if previous is None or sorted(previous.brokers) != list(range(1, brokers + 1)):
        return []
    return [p for i in range(1, brokers + 1) for p in (previous.brokers[i].port, previous.brokers[i].metrics_port,
                                                       previous.brokers[i].internal_port, previous.brokers[i].kafka_port)]


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Nothing listens on ``port``. SO_REUSEADDR, as the servers bind (ZooKeeper, gRPC, asyncio): a
    port whose last connections linger in TIME_WAIT after a stop is free to them, and so here."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _runs_config(pid: int, config: str) -> bool:
    try:
        return config.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def pid_paused(pid: int) -> bool:
    """Is ``pid`` stopped (SIGSTOP: state T in /proc/PID/stat)? Alive, but answering nothing."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] == ["T"]


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); reap it if it is ours.
    try:
        done, _status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def last_error_line(log: str | Path) -> str:
    """A failed process's own ``error: ...`` line (the last one in its log), else its last line."""
    try:
        lines = [ln.strip() for ln in Path(log).read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    errs = [ln for ln in lines if ln.startswith("error:")]
    return (errs or lines or ["empty log"])[-1]


def four_letter_word(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks = []
        while True:
            data = s.recv(4096)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


# ------------------------------------------------------------------ ZooKeeper

# A ZooKeeper ensemble (`cluster up --zookeepers 3`): server N has client port 2181 + N - 1 and,
# as ZooKeeper's docs number them, quorum port 2888 + N - 1 and leader-election port 3888 + N - 1,
# all on loopback (free ports instead when taken, or with --random-ports).
ZK_QUORUM_PORT_BASE = 2888
ZK_ELECTION_PORT_BASE = 3888
MAX_ZOOKEEPERS = 7
SERVING_MODES = ("leader", "follower", "standalone")
NOT_SERVING = "not serving"


@dataclass(frozen=True)
class ZkPeer:
    """One server of an ensemble: its ``server.N`` line and its client port."""

    server_id: int
    client_port: int
    quorum_port: int
    election_port: int
    host: str = "127.0.0.1"

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.client_port}"

    @property
    def server_line(self) -> str:
        return f"server.{self.server_id}={self.host}:{self.quorum_port}:{self.election_port}"


def zoo_cfg(host: str, port: int, data: Path, tick_ms: int, peers: tuple[ZkPeer, ...] = ()) -> str:
    """A server's zoo.cfg (pure): standalone without ``peers``, else with every ``server.N`` line."""
    return "\n".join([
        f"tickTime={tick_ms}",
        f"dataDir={data}",
        f"clientPort={port}",
        f"clientPortAddress={host}",
        "admin.enableServer=false",
        "4lw.commands.whitelist=*",
        f"minSessionTimeout={2 * tick_ms}",
        "maxSessionTimeout=60000",
        "initLimit=10",
        "syncLimit=5",
        *(p.server_line for p in peers),
        "",
    ])


def ensemble_peers(ports: list[int], host: str = "127.0.0.1") -> tuple[ZkPeer, ...]:
    """Servers 1..N from ports (client, quorum, election per server, in that order) (pure)."""
    if not ports or len(ports) % 3:
        raise ValueError(f"three ports per ZooKeeper server, got {len(ports)}")
    return tuple(ZkPeer(i + 1, ports[3 * i], ports[3 * i + 1], ports[3 * i + 2], host=host)
                 for i in range(len(ports) // 3))


def fixed_zookeeper_ports(servers: int) -> list[int]:
    """The documented client, quorum and election ports of an ensemble of ``servers`` (pure)."""
    return [p for i in range(servers) for p in (ZOOKEEPER_PORT + i, ZK_QUORUM_PORT_BASE + i, ZK_ELECTION_PORT_BASE + i)]


def ensemble_connect(peers: tuple[ZkPeer, ...] | list[ZkPeer]) -> str:
    """The connect string naming every server, as brokers and clients need it (pure): a client
    whose server dies moves to another one within its session timeout."""
    return ",".join(p.connect for p in peers)


def check_ensemble_size(servers: int) -> None:
    """1 (standalone) or an odd ensemble of 3..7 (pure): a quorum is a majority, so an even
    ensemble tolerates no more failures than the odd one below it."""
    if servers == 1 or (3 <= servers <= MAX_ZOOKEEPERS and servers % 2 == 1):
        return
    if servers % 2 == 0 and 2 <= servers <= MAX_ZOOKEEPERS + 1:
        raise ClusterError(f"--zookeepers {servers}: an ensemble of {servers} survives no more failures than one "
                           f"of {servers - 1} (a quorum is a majority); use {servers - 1} or {servers + 1}")
    raise ClusterError(f"--zookeepers must be 1 or an odd number from 3 to {MAX_ZOOKEEPERS} (got {servers})")


def zookeeper_mode(srvr: str) -> str:
    """The ``Mode:`` line of a ``srvr`` answer (leader, follower, standalone, observer), or
    ``not serving`` (a server without a quorum says so instead) (pure)."""
    for line in srvr.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "Mode":
            return value.strip()
    return NOT_SERVING


class ZooKeeperServer:
    """Debian's ZooKeeper on a loopback port, as a child process."""

    def __init__(self, directory: Path, port: int | None = None, tick_ms: int = 500,
                 host: str = "127.0.0.1", *, server_id: int = 0, peers: tuple[ZkPeer, ...] = ()) -> None:
        """``peers`` (every server of the ensemble, this one included, ``server_id`` among them):
        a member of an ensemble; none, a standalone server."""
        self.dir = directory
        self.host = host
        self.port = port or free_port()
        self.tick_ms = tick_ms
        self.server_id = server_id
        self.peers = peers
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid = -1

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout_s: float = 60.0) -> None:
        self.spawn()
        self.wait_ready(timeout_s)

    def spawn(self) -> None:
        """Write zoo.cfg (and myid in an ensemble) and start the JVM, without waiting: the servers
        of an ensemble are all spawned first, as none serves before a quorum is up."""
        if not ZK_JAR.exists():
            raise ClusterError(f"ZooKeeper is not installed ({ZK_JAR} is missing): run `make setup` "
                               "or `apt-get install zookeeper`")
        if shutil.which("java") is None:
            raise ClusterError("java is not on the PATH; ZooKeeper needs Java 17")
        data = self.dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        if self.peers:
            (data / "myid").write_text(f"{self.server_id}\n")
        cfg = self.dir / "zoo.cfg"
        cfg.write_text(zoo_cfg(self.host, self.port, data, self.tick_ms, self.peers))
        log = open(self.dir / "zookeeper.log", "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-Dzookeeper.admin.enableServer=false",
             "-cp", f"{ZK_CONF_DIR}:{ZK_JAR}", "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        self.pid = self.proc.pid

    def wait_ready(self, timeout_s: float) -> None:
        """Until it answers ``ruok``; a server of an ensemble until it serves (leader or follower),
        which needs a quorum of its peers up."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise ClusterError(f"ZooKeeper exited with {self.proc.returncode}; see {self.dir / 'zookeeper.log'}")
            try:
                if self.peers:
                    if self.mode() in SERVING_MODES:
                        return
                elif four_letter_word(self.host, self.port, "ruok") == "imok":
                    return
            except OSError:
                pass
            time.sleep(0.1)
        what = "serve (no quorum of its ensemble?)" if self.peers else "answer"
        raise ClusterError(f"ZooKeeper did not {what} on port {self.port} within {timeout_s:.0f}s")

    def mode(self) -> str:
        """What ``srvr`` says: leader, follower, standalone, or not serving (OSError: no answer)."""
        return zookeeper_mode(four_letter_word(self.host, self.port, "srvr"))

    def stop(self) -> None:
        stop_pid(self.pid, self.proc)


def stop_pid(pid: int, proc: subprocess.Popen[bytes] | None = None, timeout_s: float = 10.0) -> None:
    if pid <= 0 or not pid_alive(pid):
        return
    try:
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return
        if not pid_alive(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    if proc is not None:
        proc.wait(5)


# ------------------------------------------------------------------ brokers


@dataclass
class BrokerProc:
    broker_id: int
    port: int  # the client listener
    pid: int = -1
    config: str = ""
    log: str = ""
    metrics_port: int = -1
    host: str = "127.0.0.1"
    netns: str = ""  # run inside this network namespace (`ip netns exec`), for partition tests
    internal_port: int = -1  # the inter-broker (mutual TLS) listener
    kafka_port: int = -1  # the Kafka wire-protocol listener (SASL_SSL on a secure cluster)

    @property
    def metrics_address(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics" if self.metrics_port > 0 else ""

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def kafka_address(self) -> str:
        return f"{self.host}:{self.kafka_port}" if self.kafka_port > 0 else ""


@dataclass
class ZooKeeperProc:
    """One server of a local ZooKeeper ensemble (``cluster up --zookeepers 3``), as cluster.json keeps it."""

    server_id: int
    client_port: int
    quorum_port: int
    election_port: int
    pid: int = -1
    dir: str = ""
    host: str = "127.0.0.1"

    @property
    def peer(self) -> ZkPeer:
        return ZkPeer(self.server_id, self.client_port, self.quorum_port, self.election_port, self.host)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.client_port}"


@dataclass
class ClusterState:
    dir: str
    zookeeper_connect: str
    zookeeper_pid: int = -1
    zookeeper_dir: str = ""
    brokers: dict[int, BrokerProc] = field(default_factory=dict)
    # Clients on SASL_SSL with ACLs (``cluster up --secure``).
    secure: bool = False
    # The servers of a local ensemble (``--zookeepers 3``); empty with one server (zookeeper_pid).
    zookeepers: list[ZooKeeperProc] = field(default_factory=list)

    @property
    def peers(self) -> tuple[ZkPeer, ...]:
        return tuple(z.peer for z in self.zookeepers)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.address for _, b in sorted(self.brokers.items()))

    @property
    def kafka_bootstrap_servers(self) -> str:
        """The brokers' Kafka wire-protocol listeners, for Kafka's own clients (on a secure cluster
        they are SASL_SSL: SCRAM-SHA-256 with the admin's credentials and the cluster CA)."""
        return ",".join(b.kafka_address for _, b in sorted(self.brokers.items()) if b.kafka_address)

    @property
    def secrets(self) -> Path:
        return Path(self.dir) / SECRETS_DIR

    @property
    def client_properties(self) -> Path:
        """Kafka-style client properties of the admin user (``--command-config``); secure clusters only."""
        return self.secrets / "client.properties"

    def client_security(self) -> ChannelSecurity:
        """How a client reaches this cluster's client listeners (PLAINTEXT unless ``--secure``)."""
        if not self.secure:
            return PLAINTEXT_SECURITY
        return ChannelSecurity.from_properties(parse_properties(self.client_properties.read_text()))

    def zookeeper_digest(self) -> tuple[str, str]:
        user, _, password = (self.secrets / ZK_DIGEST_FILE).read_text().strip().partition(":")
        return user, password

    def save(self) -> None:
        path = Path(self.dir) / STATE_FILE
        data = asdict(self)
        data["brokers"] = {str(k): asdict(v) for k, v in self.brokers.items()}
        if not self.zookeepers:
            del data["zookeepers"]  # a one-server cluster's file stays as it always was
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        os.replace(tmp, path)

    @classmethod
    def load(cls, directory: Path) -> ClusterState:
        path = directory / STATE_FILE
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ClusterError(f"no cluster in {directory} (run `minikafka cluster up --dir {directory}`)") from None
        brokers = {int(k): BrokerProc(**v) for k, v in data.pop("brokers").items()}
        zookeepers = [ZooKeeperProc(**z) for z in data.pop("zookeepers", [])]
        return cls(brokers=brokers, zookeepers=zookeepers, **data)


def local_client_security(directory: Path) -> ChannelSecurity:
    """How clients reach the local cluster in ``directory`` (PLAINTEXT when there is none)."""
    try:
        return ClusterState.load(directory).client_security()
    except ClusterError:
        return PLAINTEXT_SECURITY


def broker_properties(b: BrokerProc, zookeeper_connect: str, data_dir: Path, brokers: int, secrets: Path,
                      secure: bool = False) -> dict[str, str]:
    """The broker configs a local cluster runs with (docker-compose.yml sets the same keys)."""
    props = {
        "broker.id": str(b.broker_id),
        "listeners": f"CLIENT://{b.host}:{b.port},INTERNAL://{b.host}:{b.internal_port}",
        "listener.security.protocol.map": f"CLIENT:{'SASL_SSL' if secure else 'PLAINTEXT'},INTERNAL:SSL"
                                          + (",KAFKA:SASL_SSL" if secure else ""),
        "inter.broker.listener.name": "INTERNAL",
        "ssl.keystore.location": str(secrets / f"broker-{b.broker_id}.pem"),
        "ssl.truststore.location": str(secrets / CA_CERT),
        "zookeeper.set.acl": "true",
        "zookeeper.digest.auth.file": str(secrets / ZK_DIGEST_FILE),
        "zookeeper.connect": zookeeper_connect,
        "zookeeper.session.timeout.ms": "6000",
        "log.dirs": str(data_dir),
        "default.replication.factor": str(min(3, brokers)),
        "metrics.port": str(b.metrics_port),
        "controlled.shutdown.retry.backoff.ms": "500",
    }
    if secure:
        props.update({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                      "super.users": ADMIN_PRINCIPAL})
    if b.kafka_port > 0:
        # On a secure cluster the Kafka listener authenticates as the gRPC one does (SASL_SSL, SCRAM).
        props["kafka.listeners"] = f"KAFKA://{b.host}:{b.kafka_port}"
    return props


def make_secrets(secrets: Path, broker_ids: list[int], hosts: dict[int, str],
                 zk_digest: tuple[str, str] | None = None) -> None:
    """The cluster CA, a certificate per broker, ZooKeeper's digest credential (kept if present)."""
    secrets.mkdir(parents=True, exist_ok=True)
    os.chmod(secrets, 0o700)
    certs.init_ca(secrets)
    for i in broker_ids:
        if not (secrets / f"broker-{i}.pem").exists():
            certs.issue(secrets, f"broker-{i}", hosts=sorted({"127.0.0.1", "localhost", hosts.get(i, "127.0.0.1")}))
    digest = secrets / ZK_DIGEST_FILE
    if not digest.exists() or zk_digest is not None:
        user, password = zk_digest or ("minikafka", secrets_token(18))
        fd = os.open(digest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{user}:{password}\n")


class LocalCluster:
    """ZooKeeper + brokers under one directory. Used by the CLI and by the integration tests."""

    def __init__(self, directory: Path, *, zookeeper: str | None = None,
                 broker_overrides: dict[str, str] | None = None,
                 broker_netns: dict[int, tuple[str, str]] | None = None,
                 zk_digest: tuple[str, str] | None = None, fixed_ports: bool = False,
                 wildcard_listeners: bool = False) -> None:
        """``fixed_ports``: the documented ports (ZooKeeper 2181, brokers' Kafka listeners from 9092,
        gRPC from 9392) where free;
        else (the tests) free ports. ``notices`` says when fixed ports were taken.
        ``broker_netns``: broker id -> (network namespace, address in it) for brokers that run in
        namespaces of their own (tests/chaos' network partition); others listen on 127.0.0.1.
        ``zk_digest``: the ZooKeeper credential brokers use (default: a new random one).
        ``wildcard_listeners``: brokers bind 0.0.0.0 and advertise their host (``advertised.listeners``,
        ``advertised.kafka.listeners``), as on machines of their own (tests/chaos' multi-host run)."""
        self.zk_digest = zk_digest
        self.wildcard_listeners = wildcard_listeners
        self.dir = directory.resolve()
        self.broker_netns = dict(broker_netns or {})
        self.external_zk = zookeeper
        self.overrides = dict(broker_overrides or {})
        self.zk: ZooKeeperServer | None = None
        self.ensemble: dict[int, ZooKeeperServer] = {}  # the servers of a --zookeepers N ensemble
        self.state: ClusterState | None = None
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self.fixed_ports = fixed_ports
        self.notices: list[str] = []
        # The ports this directory's previous cluster had (``up`` after ``down``): kept, so that
        # addresses saved or exported by users stay true across restarts (issue 33).
        self.previous: ClusterState | None = None

    def _zookeeper_port(self) -> int | None:
        old = previous_zookeeper_port(self.previous)
        if old is not None and port_free(old):
            return old
        if not self.fixed_ports:
            return None
        if port_free(ZOOKEEPER_PORT):
            return ZOOKEEPER_PORT
        self.notices.append(f"port {ZOOKEEPER_PORT} is taken: ZooKeeper takes a free port instead")
        return None

    def _ensemble_peers(self, servers: int) -> tuple[ZkPeer, ...]:
        """An ensemble's ports: the previous cluster's in this directory (same size) when free, else
        the documented ones (``fixed_ports``) when free, else free ones."""
        old = self.previous.peers if self.previous is not None else ()
        if len(old) == servers:
            kept = [p for peer in old for p in (peer.client_port, peer.quorum_port, peer.election_port)]
            taken = [p for p in kept if not port_free(p)]
            if not taken:
                return old
            self.notices.append(f"port{'s' if len(taken) > 1 else ''} {', '.join(map(str, taken))} of the previous "
                                f"ZooKeeper ensemble in this directory taken: ZooKeeper takes other ports")
        if self.fixed_ports:
            want = fixed_zookeeper_ports(servers)
            taken = [p for p in want if not port_free(p)]
            if not taken:
                return ensemble_peers(want)
            self.notices.append(f"port{'s' if len(taken) > 1 else ''} {', '.join(map(str, taken))} taken: "
                                f"ZooKeeper takes free ports instead")
        return ensemble_peers(free_ports(3 * servers))

    def _start_ensemble(self, servers: int, timeout_s: float) -> list[ZooKeeperProc]:
        """Spawn every server, then wait until each serves (a quorum elected a leader)."""
        peers = self._ensemble_peers(servers)
        procs = []
        for peer in peers:
            zdir = self.dir / f"zookeeper-{peer.server_id}"
            server = ZooKeeperServer(zdir, port=peer.client_port, host=peer.host, server_id=peer.server_id,
                                     peers=peers)
            self.ensemble[peer.server_id] = server
            server.spawn()
            procs.append(ZooKeeperProc(peer.server_id, peer.client_port, peer.quorum_port, peer.election_port,
                                       pid=server.pid, dir=str(zdir), host=peer.host))
        for server in self.ensemble.values():
            server.wait_ready(timeout_s)
        return procs

    def _broker_ports(self, brokers: int) -> list[int]:
        """client, metrics, internal, Kafka port per broker, in that order (as free_ports gave them)."""
        kept = previous_broker_ports(self.previous, brokers)
        if kept and not self.broker_netns:
            taken = [p for p in kept if p > 0 and not port_free(p)]
            if not taken:
                return kept
            self.notices.append(f"port{'s' if len(taken) > 1 else ''} {', '.join(map(str, taken))} of the previous "
                                f"cluster in this directory taken: the brokers take other ports")
        if self.fixed_ports and not self.broker_netns:
            want = fixed_ports(brokers)
            taken = [p for series in want.values() for p in series if not port_free(p)]
            if not taken:
                return [p for i in range(brokers) for p in (want["client"][i], want["metrics"][i],
                                                            want["internal"][i], want["kafka"][i])]
            self.notices.append(f"port{'s' if len(taken) > 1 else ''} {', '.join(map(str, taken))} "
                                f"taken: the brokers take free ports instead (`minikafka cluster status` "
                                f"shows them)")
        return free_ports(4 * brokers)

    # ------------------------------------------------------------ up / down

    def up(self, brokers: int = 3, timeout_s: float = 60.0, secure: bool = False,
           zookeepers: int = 1) -> ClusterState:
        """``zookeepers``: 1 (one standalone server, the default) or an odd ensemble of 3..7."""
        check_ensemble_size(zookeepers)
        if zookeepers > 1 and self.external_zk:
            raise ClusterError("--zookeepers starts a local ensemble; it cannot be used with --zookeeper")
        self.dir.mkdir(parents=True, exist_ok=True)
        if (self.dir / STATE_FILE).exists():
            old = ClusterState.load(self.dir)
            if any(pid_alive(b.pid) for b in old.brokers.values()) or pid_alive(old.zookeeper_pid) \
                    or any(pid_alive(z.pid) for z in old.zookeepers):
                raise ClusterError(f"a cluster is already running in {self.dir}; `minikafka cluster down` first")
            self.previous = old if not self.external_zk else None
        ensemble: list[ZooKeeperProc] = []
        try:
            if self.external_zk:
                connect = self.external_zk
                zk_pid = -1
            elif zookeepers > 1:
                ensemble = self._start_ensemble(zookeepers, timeout_s)
                connect, zk_pid = ensemble_connect([z.peer for z in ensemble]), -1
            else:
                self.zk = ZooKeeperServer(self.dir / "zookeeper", port=self._zookeeper_port())
                self.zk.start()
                connect, zk_pid = self.zk.connect, self.zk.pid
            self.state = ClusterState(str(self.dir), connect, zk_pid, "" if ensemble else str(self.dir / "zookeeper"),
                                      secure=secure, zookeepers=ensemble)
            ports = self._broker_ports(brokers)
            hosts = {i: self.broker_netns.get(i, ("", "127.0.0.1"))[1] for i in range(1, brokers + 1)}
            make_secrets(self.state.secrets, list(hosts), hosts, self.zk_digest)
            if secure:
                self._bootstrap_admin(connect)
            for i in range(1, brokers + 1):
                netns, host = self.broker_netns.get(i, ("", "127.0.0.1"))
                self.state.brokers[i] = BrokerProc(i, ports[4 * i - 4], metrics_port=ports[4 * i - 3], host=host,
                                                   netns=netns, internal_port=ports[4 * i - 2],
                                                   kafka_port=ports[4 * i - 1])
                self._write_config(self.state.brokers[i], brokers)
            self.state.save()
            for b in self.state.brokers.values():
                self._spawn(b)
            self.state.save()
            self.wait_registered(set(self.state.brokers), timeout_s)
            self.wait_for_controller(timeout_s)
            self.wait_metadata_ready(timeout_s)
        except BaseException:
            # Stop whatever this call started, so that a corrected `cluster up` starts cleanly
            # instead of refusing with "already running" (a half-started cluster is no use).
            self._stop_started()
            raise
        return self.state

    def _stop_started(self) -> None:
        for bid, proc in self._procs.items():
            stop_pid(proc.pid, proc, timeout_s=5)
            if self.state is not None and bid in self.state.brokers:
                self.state.brokers[bid].pid = -1
        if self.zk is not None:
            self.zk.stop()
            if self.state is not None:
                self.state.zookeeper_pid = -1
        for server in self.ensemble.values():
            server.stop()
        if self.state is not None:
            for z in self.state.zookeepers:
                z.pid = -1
        if self.state is not None and (self.dir / STATE_FILE).exists():
            self.state.save()

    def _bootstrap_admin(self, connect: str) -> None:
        """--secure: the admin super user's SCRAM credential straight into ZooKeeper (as Kafka's
        ``kafka-configs --zookeeper``), before any broker starts, and its client.properties."""
        from zk.client import KafkaZkClient

        assert self.state is not None
        password = secrets_token(18)
        zk = KafkaZkClient(connect, session_timeout_ms=10000, connection_timeout_ms=30000,
                           digest=self.state.zookeeper_digest())
        zk.start()
        try:
            # The paths with the brokers' ACLs (readable by all, credentials by the brokers only).
            zk.ensure_persistent_paths()
            zk.set_user_config(ADMIN_USER, {MECHANISM: new_credential(password).encode()})
        finally:
            zk.stop()
        props = self.state.client_properties
        fd = os.open(props, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("# The admin super user of this cluster (minikafka cluster up --secure)\n"
                    "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\n"
                    f"sasl.username={ADMIN_USER}\nsasl.password={password}\n"
                    f"ssl.truststore.location={self.state.secrets / CA_CERT}\n")

    def _write_config(self, b: BrokerProc, n: int) -> None:
        bdir = self.dir / f"broker-{b.broker_id}"
        bdir.mkdir(parents=True, exist_ok=True)
        assert self.state is not None
        props = broker_properties(b, self.state.zookeeper_connect, bdir / "data", n, self.state.secrets,
                                  self.state.secure)
        if self.wildcard_listeners:
            for key in ("listeners", "kafka.listeners"):
                if key in props:
                    props[f"advertised.{key}"] = props[key]
                    props[key] = props[key].replace(f"//{b.host}:", "//0.0.0.0:")
        props.update(self.overrides)
        cfg = bdir / "server.properties"
        cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        b.config = str(cfg)
        b.log = str(bdir / "broker.log")

    def _spawn(self, b: BrokerProc) -> None:
        log = open(b.log, "ab")  # noqa: SIM115 - handed to the child
        env = dict(os.environ)
        root = str(PROJECT_ROOT)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        # `ip netns exec` execs the command in place: the pid is still the broker's own.
        prefix = ["ip", "netns", "exec", b.netns] if b.netns else []
        proc = subprocess.Popen([*prefix, sys.executable, "-m", "client.cli", "broker", "--config", b.config],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env, cwd=root)
        log.close()
        b.pid = proc.pid
        self._procs[b.broker_id] = proc

    def _brokers_to_stop(self) -> list[BrokerProc]:
        """This object's brokers and those in the state file: another process (``cluster start``,
        a ``chaos`` run) may have restarted a broker with a new pid that only the file knows. A
        file pid counts only while it still runs this broker's config (pids are reused)."""
        procs = list(self.state.brokers.values()) if self.state else []
        try:
            on_disk = list(ClusterState.load(self.dir).brokers.values())
        except ClusterError:
            on_disk = []
        known = {b.pid for b in procs}
        for b in on_disk:
            if b.pid not in known and (not self.state or _runs_config(b.pid, b.config)):
                procs.append(b)
        return procs

    def down(self, timeout_s: float = 30.0) -> None:
        state = self.state or ClusterState.load(self.dir)
        brokers = self._brokers_to_stop()
        for b in brokers:
            if pid_alive(b.pid):
                os.kill(b.pid, signal.SIGCONT)
                os.kill(b.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for b in brokers:
            while pid_alive(b.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            proc = self._procs.get(b.broker_id)
            stop_pid(b.pid, proc if proc is not None and proc.pid == b.pid else None, timeout_s=1)
        if state.zookeeper_pid > 0:
            stop_pid(state.zookeeper_pid, self.zk.proc if self.zk else None)
        for z in self._zookeepers_to_stop(state):
            server = self.ensemble.get(z.server_id)
            stop_pid(z.pid, server.proc if server is not None and server.pid == z.pid else None)

    def _zookeepers_to_stop(self, state: ClusterState) -> list[ZooKeeperProc]:
        """The ensemble's servers by this object's pids and the state file's (``cluster start zk-N``
        in another process gives a server a new pid only the file knows); a file pid counts only
        while it still runs that server's zoo.cfg."""
        servers = list(state.zookeepers)
        try:
            on_disk = ClusterState.load(self.dir).zookeepers
        except ClusterError:
            on_disk = []
        known = {z.pid for z in servers}
        servers += [z for z in on_disk if z.pid not in known and _runs_config(z.pid, str(Path(z.dir) / "zoo.cfg"))]
        return servers

    # ------------------------------------------------------------ single ZooKeeper servers

    def _with_current_zookeeper_pids(self) -> ClusterState:
        """This object's state, with the pid of each ensemble server another process restarted
        (``cluster start zk-N``) taken from the state file while it runs that server's zoo.cfg."""
        if self.state is None:
            self.state = ClusterState.load(self.dir)
            return self.state
        if self.state.zookeepers and (self.dir / STATE_FILE).exists():
            on_disk = {z.server_id: z.pid for z in ClusterState.load(self.dir).zookeepers}
            for z in self.state.zookeepers:
                pid = on_disk.get(z.server_id, -1)
                if pid != z.pid and not pid_alive(z.pid) and _runs_config(pid, str(Path(z.dir) / "zoo.cfg")):
                    z.pid = pid
        return self.state

    def zookeeper_server(self, server_id: int) -> ZooKeeperProc:
        """Server ``server_id`` of the local ensemble; a one-server cluster's ZooKeeper is zk-1."""
        state = self._with_current_zookeeper_pids()
        if not state.zookeepers and state.zookeeper_dir and server_id == 1:
            host, _, port = state.zookeeper_connect.rpartition(":")
            return ZooKeeperProc(1, int(port), -1, -1, pid=state.zookeeper_pid, dir=state.zookeeper_dir, host=host)
        for z in state.zookeepers:
            if z.server_id == server_id:
                return z
        ids = [z.server_id for z in state.zookeepers] or ([1] if state.zookeeper_dir else [])
        raise ClusterError(f"no ZooKeeper server zk-{server_id} in this cluster"
                           + (f" (servers: {', '.join(f'zk-{i}' for i in ids)})" if ids else
                              " (it uses an external ZooKeeper)"))

    def signal_zookeeper(self, server_id: int, sig: str = "KILL") -> None:
        z = self.zookeeper_server(server_id)
        if sig not in SIGNALS:
            raise ClusterError(f"unknown signal {sig!r}; use one of {', '.join(SIGNALS)}")
        if not pid_alive(z.pid):
            raise ClusterError(f"ZooKeeper server zk-{server_id} is not running")
        os.kill(z.pid, SIGNALS[sig])
        server = self.ensemble.get(server_id) or (self.zk if not self.ensemble else None)
        if sig in ("KILL", "TERM") and server is not None and server.proc is not None and server.pid == z.pid:
            server.proc.wait(10)

    def start_zookeeper(self, server_id: int, timeout_s: float = 60.0) -> None:
        """Start a stopped server again with its ports and data; returns once it serves (in an
        ensemble: it rejoined the quorum as leader or follower)."""
        z = self.zookeeper_server(server_id)
        if pid_alive(z.pid):
            raise ClusterError(f"ZooKeeper server zk-{server_id} is already running (pid {z.pid})")
        assert self.state is not None
        peers = self.state.peers
        server = ZooKeeperServer(Path(z.dir), port=z.client_port, host=z.host, server_id=server_id if peers else 0,
                                 peers=peers)
        server.spawn()
        if peers:
            self.ensemble[server_id] = server
            z.pid = server.pid
        else:
            self.zk = server
            self.state.zookeeper_pid = server.pid
        self.state.save()
        server.wait_ready(timeout_s)

    def zookeeper_modes(self) -> list[dict[str, Any]]:
        """Each server of the ensemble: address, pid, alive, and its mode as ``srvr`` says."""
        state = self._with_current_zookeeper_pids()
        out = []
        for z in state.zookeepers:
            alive = pid_alive(z.pid)
            paused = alive and pid_paused(z.pid)  # SIGSTOPped: it would not answer `srvr`
            try:
                mode = "down" if not alive else "paused" if paused else \
                    zookeeper_mode(four_letter_word(z.host, z.client_port, "srvr"))
            except OSError:
                mode = "no answer"
            out.append({"id": z.server_id, "name": f"zk-{z.server_id}", "address": z.address, "pid": z.pid,
                        "alive": alive, "paused": paused, "mode": mode})
        return out

    # ------------------------------------------------------------ single brokers

    def broker(self, broker_id: int) -> BrokerProc:
        state = self.state or ClusterState.load(self.dir)
        b = state.brokers.get(broker_id)
        if b is None:
            raise ClusterError(f"no broker {broker_id} in this cluster (brokers: {sorted(state.brokers)})")
        return b

    def signal(self, broker_id: int, sig: str = "KILL") -> None:
        b = self.broker(broker_id)
        if sig not in SIGNALS:
            raise ClusterError(f"unknown signal {sig!r}; use one of {', '.join(SIGNALS)}")
        if not pid_alive(b.pid):
            raise ClusterError(f"broker {broker_id} is not running")
        os.kill(b.pid, SIGNALS[sig])
        if sig == "KILL":
            proc = self._procs.get(broker_id)
            if proc is not None:
                proc.wait(10)

    def start(self, broker_id: int) -> None:
        state = self.state or ClusterState.load(self.dir)
        self.state = state
        b = self.broker(broker_id)
        if pid_alive(b.pid):
            raise ClusterError(f"broker {broker_id} is already running (pid {b.pid})")
        # After a kill -9 its znode lives until the ZooKeeper session expires; wait for that, so
        # that "registered" afterwards means the new process (the broker would wait too).
        deadline = time.monotonic() + 60
        while broker_id in self.zk_view()["registered"] and time.monotonic() < deadline:
            time.sleep(0.1)
        self._spawn(b)
        state.save()

    def wait_for_exit(self, broker_id: int, timeout_s: float = 30.0) -> int | None:
        """The exit code (None if it did not exit in time, or -1 for a broker another process started)."""
        proc = self._procs.get(broker_id)
        if proc is None:
            pid = self.broker(broker_id).pid
            deadline = time.monotonic() + timeout_s
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            return None if pid_alive(pid) else -1
        try:
            return proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    # ------------------------------------------------------------ observing through ZooKeeper

    def zk_view(self, connection_timeout_ms: int = 10000) -> dict[str, Any]:
        """Registered brokers, controller id and controller epoch, as ZooKeeper says."""
        import logging

        from zk.client import KafkaZkClient

        logging.getLogger("kazoo").setLevel(logging.ERROR)
        state = self.state or ClusterState.load(self.dir)
        zk = KafkaZkClient(state.zookeeper_connect, session_timeout_ms=10000,
                           connection_timeout_ms=connection_timeout_ms)
        zk.start()
        try:
            registered = zk.get_registered_broker_ids()
            controller = zk.get_controller_id()
            epoch = zk.get_controller_epoch()
        finally:
            zk.stop()
        return {"registered": registered, "controller": -1 if controller is None else controller,
                "controller_epoch": 0 if epoch is None else epoch[0]}

    def wait_registered(self, ids: set[int], timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        view: dict[str, Any] = {}
        while time.monotonic() < deadline:
            # A broker that exited is the answer already; ZooKeeper need not be asked (or reachable).
            for bid in sorted(ids):
                proc = self._procs.get(bid)
                if proc is not None and proc.poll() is not None:
                    log = self.broker(bid).log
                    raise ClusterError(f"broker {bid} exited with {proc.returncode}: "
                                       f"{last_error_line(log).removeprefix('error: ')} "
                                       f"(see {log})")
            try:
                view = self.zk_view(connection_timeout_ms=2000)
            except ZooKeeperUnreachableError:
                view = {}
            if ids <= set(view.get("registered", [])):
                return
            time.sleep(0.1)
        raise ClusterError(f"brokers {sorted(ids)} did not all register within {timeout_s:.0f}s "
                           f"(registered: {view.get('registered')})")

    def wait_metadata_ready(self, timeout_s: float = 60.0) -> None:
        """Until every broker's Metadata names the controller and every broker, i.e. each has had the
        controller's first UpdateMetadata: ``cluster up`` returns a cluster that serves clients.

        Why: until then a broker answers controller -1 and lists only itself, and librdkafka's
        AdminClient looks the controller up again only when a broker connection changes state or
        the controller id changes. A CreateTopics sent in that window (a script's first command after
        ``cluster up``) could wait out its whole request timeout of 60 s: seen once in CI.

        Asked with the cluster's client security, of brokers whose client listener takes it: one
        whose listener security ``broker_overrides`` changed (as some tests do) is not waited for."""
        from client.connection import Connection
        from proto import minikafka_pb2 as pb

        assert self.state is not None
        expected = set(self.state.brokers)
        security = self.state.client_security()
        deadline = time.monotonic() + timeout_s
        for bid, b in sorted(self.state.brokers.items()):
            if not self._client_listener_takes(b, security):
                continue
            last = "no answer"
            with Connection(b.address, security) as conn:
                while True:
                    try:
                        resp = conn.api.Metadata(pb.MetadataRequest(all_topics=False), timeout=2)
                        seen = {x.broker_id for x in resp.brokers}
                        if resp.controller_id >= 0 and expected <= seen:
                            break
                        last = f"controller {resp.controller_id}, brokers {sorted(seen)}"
                    except grpc.RpcError as e:
                        last = f"{e.code().name}: {e.details()}"
                    if time.monotonic() >= deadline:
                        raise ClusterError(f"broker {bid} did not learn the cluster's metadata within "
                                           f"{timeout_s:.0f}s (last answer: {last})")
                    time.sleep(0.05)

    @staticmethod
    def _client_listener_takes(b: BrokerProc, security: ChannelSecurity) -> bool:
        """Does ``b``'s client listener, as its config file says, take a client of ``security``?"""
        try:
            props = parse_properties(Path(b.config).read_text())
        except OSError:
            return False
        protocols = dict(item.strip().split(":", 1) for item in
                         props.get("listener.security.protocol.map", "").split(",") if ":" in item)
        protocol = protocols.get("CLIENT", "PLAINTEXT").strip().upper()
        if protocol != security.security_protocol.upper():
            return False
        return not (protocol == "SSL" and props.get("ssl.client.auth", "none") == "required"
                    and not security.ssl_certfile)

    def wait_for_controller(self, timeout_s: float = 60.0, other_than: int | None = None,
                            min_epoch: int = 0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        view: dict[str, Any] = {}
        while time.monotonic() < deadline:
            view = self.zk_view()
            c = view["controller"]
            if c >= 0 and c != other_than and view["controller_epoch"] >= min_epoch:
                return view
            time.sleep(0.1)
        raise ClusterError(f"no controller elected within {timeout_s:.0f}s (last view {view})")

    def status(self) -> dict[str, Any]:
        state = self.state or ClusterState.load(self.dir)
        servers = self.zookeeper_modes() if state.zookeepers else []
        ensemble_up = any(z["mode"] in SERVING_MODES for z in servers)
        try:
            if state.zookeepers:
                view = self.zk_view(connection_timeout_ms=3000) if ensemble_up else None
            else:
                view = self.zk_view() if pid_alive(state.zookeeper_pid) or state.zookeeper_pid < 0 else None
        except Exception:
            view = None
        registered = set(view["registered"]) if view else set()
        zookeeper: dict[str, Any] = {"connect": state.zookeeper_connect, "pid": state.zookeeper_pid,
                                     "alive": view is not None}
        if servers:
            zookeeper["servers"] = servers
        return {
            "dir": state.dir,
            "zookeeper": zookeeper,
            "controller": view["controller"] if view else -1,
            "controller_epoch": view["controller_epoch"] if view else 0,
            "bootstrap_servers": state.bootstrap_servers,
            "kafka_bootstrap_servers": state.kafka_bootstrap_servers,
            "brokers": [{"id": b.broker_id, "address": b.address, "kafka_address": b.kafka_address, "pid": b.pid,
                         "alive": pid_alive(b.pid), "paused": pid_alive(b.pid) and pid_paused(b.pid),
                         "registered": b.broker_id in registered, "log": b.log, "metrics": b.metrics_address}
                        for _, b in sorted(state.brokers.items())],
        }
