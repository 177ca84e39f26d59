"""The fuzz suite's harness: raw gRPC calls that fail on untyped outcomes, and the invariants
checked after every example (issue 12, SPEC S13):

1. every broker process is alive and answers a Metadata request;
2. no RPC ended in a gRPC status other than OK - in particular never UNKNOWN or INTERNAL -
   except RESOURCE_EXHAUSTED for a request too large to receive, and DEADLINE_EXCEEDED for a
   fetch that asked to wait longer than the call's deadline;
3. every error code in every response is a value of the ErrorCode enum, and never the untyped
   UNKNOWN_SERVER_ERROR;
4. the records committed at the start (acks=-1, replication factor 3) are still there, every
   batch below the high watermark is byte-identical on all three replicas and decodes with the
   project's own decoder, and a fresh acks=-1 produce succeeds.

Periodically, and at the end of every test, the partition's leader is SIGKILLed and started
again: it must register, rejoin the ISR and leave the committed records identical.

After a failed example the harness repairs what it can before the next one (restarts dead
brokers, moving aside a data directory the broker cannot start from, and writes the committed
records into a fresh topic), so that every example - and hypothesis's replay of the failing
one - starts from a healthy cluster. Every failure is also appended, as one JSON line, to the
file named by MINIKAFKA_FUZZ_JOURNAL when that is set.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
from fuzz_batches import HEADER, HEADER_SIZE, LOG_OVERHEAD, Payload, valid_batch_bytes
from google.protobuf.message import Message
from hypothesis import HealthCheck, Phase, settings

from client.connection import ClusterView, Connection
from client.ops.local_cluster import ClusterError, LocalCluster, pid_alive
from proto import minikafka_pb2 as pb
from proto.record_batch import decode_batch

E = pb.ErrorCode
T = TypeVar("T")
M = TypeVar("M", bound=Message)

VALID_ERROR_CODES = frozenset(pb.ErrorCode.values())
# Valid enum values that still say "the broker did not know what went wrong" (S13.2: typed errors only).
UNTYPED_ERROR_CODES = frozenset({E.UNKNOWN_SERVER_ERROR})
RETRIABLE_PRODUCE = frozenset({E.NOT_LEADER_OR_FOLLOWER, E.LEADER_NOT_AVAILABLE, E.NOT_ENOUGH_REPLICAS,
                               E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.REQUEST_TIMED_OUT,
                               E.UNKNOWN_TOPIC_OR_PARTITION, E.FENCED_LEADER_EPOCH, E.UNKNOWN_LEADER_EPOCH,
                               E.KAFKA_STORAGE_ERROR})
JOURNAL_ENV = "MINIKAFKA_FUZZ_JOURNAL"
PROFILE_ENV = "MINIKAFKA_FUZZ_PROFILE"
SCALE_ENV = "MINIKAFKA_FUZZ_SCALE"
KEEP_GOING_ENV = "MINIKAFKA_FUZZ_KEEP_GOING"
DEBUGGING_REPLICA_ID = -2

# Kafka's default fetch.max.bytes (55 MiB): the most any fetch may return, whatever max_bytes says.
BROKER_FETCH_CAP = 57_671_680
# A batch may exceed a fetch's limits when it is the first one (Kafka's "at least one batch"), up to
# max.message.bytes (1 MiB + overhead by default).
ONE_BATCH_SLACK = 1_048_588 + 61


class FuzzFailure(AssertionError):
    """An invariant of issue 12 does not hold."""


# Hypothesis profiles (MINIKAFKA_FUZZ_PROFILE): ``short`` for `make test` - few examples,
# derandomized so CI is deterministic, no shrinking (a failing example is printed as found, and
# shrinking against a live cluster costs minutes) - and ``long`` for `make fuzz`: 15x the examples,
# random, shrinking, the example database on. Applied per test (``fuzz_settings``), not loaded
# globally, so the project's other hypothesis tests keep their own defaults.
_HEALTH = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large,
           HealthCheck.filter_too_much, HealthCheck.large_base_example]
settings.register_profile("minikafka-fuzz-short", deadline=None, derandomize=True, database=None,
                          print_blob=False, phases=(Phase.explicit, Phase.generate), suppress_health_check=_HEALTH)
settings.register_profile("minikafka-fuzz-long", deadline=None, derandomize=False, print_blob=True,
                          suppress_health_check=_HEALTH)


def profile() -> str:
    name = os.environ.get(PROFILE_ENV, "short")
    if name not in ("short", "long"):
        raise ValueError(f"{PROFILE_ENV}={name!r}: use 'short' or 'long'")
    return name


def examples(short: int) -> int:
    """``max_examples`` for a test: ``short`` in the short profile, 15x in the long one
    (MINIKAFKA_FUZZ_SCALE overrides the factor)."""
    default = 15.0 if profile() == "long" else 1.0
    factor = float(os.environ.get(SCALE_ENV, default))
    return max(1, round(short * factor))


def fuzz_settings(short_examples: int) -> settings:
    """The profile's settings with ``examples(short_examples)`` examples."""
    return settings(settings.get_profile(f"minikafka-fuzz-{profile()}"), max_examples=examples(short_examples))


def fail(message: str) -> FuzzFailure:
    return FuzzFailure(message)


def poll(condition: Callable[[], T | None], timeout_s: float, interval_s: float = 0.05) -> T | None:
    """Poll ``condition`` until it returns something other than None/False; None on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        time.sleep(interval_s)


def short(obj: object, limit: int = 400) -> str:
    text = repr(obj) if not isinstance(obj, Message) else " ".join(str(obj).split())
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def bad_error_codes(msg: Message, path: str = "") -> list[str]:
    """Every ErrorCode field anywhere in ``msg`` whose value is not a typed ErrorCode."""
    out: list[str] = []
    for fd, value in msg.ListFields():
        where = f"{path}.{fd.name}" if path else fd.name
        if fd.message_type is not None:
            if isinstance(value, Message):
                out += bad_error_codes(value, where)
            elif not hasattr(value, "keys"):  # repeated messages (maps hold no error codes)
                for i, item in enumerate(value):
                    out += bad_error_codes(item, f"{where}[{i}]")
        elif fd.enum_type is not None and fd.enum_type.name == "ErrorCode":
            for code in [value] if isinstance(value, int) else list(value):
                if code not in VALID_ERROR_CODES:
                    out.append(f"{where}={code} (not an ErrorCode)")
                elif code in UNTYPED_ERROR_CODES:
                    out.append(f"{where}={E.Name(code)} (untyped)")
    return out


def check_fetch_bounds(req: pb.FetchRequest, resp: pb.FetchResponse) -> None:
    """A fetch answers at most max_bytes (capped by the broker) and partition_max_bytes per
    partition, give or take the one batch that may exceed them."""
    total = 0
    for t in resp.topics:
        for p in t.partitions:
            n = len(p.records)
            total += n
            asked = [fp.partition_max_bytes for rt in req.topics if rt.name == t.name for fp in rt.partitions
                     if fp.partition == p.partition]
            limit = max(asked) if asked else 0
            if limit > 0 and n > limit + ONE_BATCH_SLACK:
                raise fail(f"Fetch returned {n} bytes for {t.name}-{p.partition}, partition_max_bytes {limit}")
    cap = min(req.max_bytes, BROKER_FETCH_CAP) if req.max_bytes > 0 else BROKER_FETCH_CAP
    if total > cap + ONE_BATCH_SLACK:
        raise fail(f"Fetch returned {total} bytes of records; max_bytes was {req.max_bytes} "
                   f"(request: {short(req, 200)})")


@dataclass
class BatchCopy:
    base_offset: int
    last_offset: int
    data: bytes


@dataclass
class CommittedTopic:
    name: str
    # (base offset, batch bytes as sent) of the known-good batches written at the start.
    known: list[tuple[int, bytes]] = field(default_factory=list)


class Harness:
    """One per test module: a 3-broker cluster, a topic of committed records, the invariants."""

    def __init__(self, cluster: LocalCluster, view: ClusterView, module: str, *, kill_every: int,
                 sacrificial_root: Path) -> None:
        self.cluster = cluster
        self.view = view
        self.module = module
        self.kill_every = kill_every
        self.sacrificial_root = sacrificial_root
        self.examples = 0
        self.damaged = False
        self.broken: str | None = None
        self.failures: list[str] = []
        self._topic_seq = itertools.count()
        self.committed = CommittedTopic("")
        self.scratch = ""
        # Topics the harness made and did not delete: they must survive every example.
        self.owned: set[str] = set()
        self.producer_id = -1
        assert cluster.state is not None
        self.broker_ids = sorted(cluster.state.brokers)
        self.canary = 0
        self.inputs: dict[str, str] = {}
        self.test_name = ""
        # Survey mode (MINIKAFKA_FUZZ_KEEP_GOING=1): record failures in the journal and go on, so one
        # run lists every distinct failure instead of stopping at the first.
        self.keep_going = os.environ.get(KEEP_GOING_ENV, "") not in ("", "0")

    # ------------------------------------------------------------ setup

    def setup(self) -> None:
        self.producer_id = self._allocate_producer_id()
        self.new_committed_topic()
        self.scratch = self.create_topic_ok(f"fuzz-scratch-{next(self._topic_seq)}", partitions=2, rf=3)

    def unique_name(self, prefix: str) -> str:
        return f"{prefix}-{next(self._topic_seq)}"

    def _allocate_producer_id(self) -> int:
        resp = self.call(self.any_conn(), "InitProducerId", pb.InitProducerIdRequest(producer_id=-1, producer_epoch=-1))
        assert resp is not None and resp.error_code == E.NONE, short(resp)
        return int(resp.producer_id)

    def create_topic_ok(self, name: str, partitions: int = 1, rf: int = 3,
                        configs: dict[str, str] | None = None) -> str:
        def attempt() -> bool:
            resp = self.call(self.any_conn(), "CreateTopics", pb.CreateTopicsRequest(topics=[pb.CreatableTopic(
                name=name, num_partitions=partitions, replication_factor=rf, configs=configs or {})],
                timeout_ms=10000), timeout=30)
            assert resp is not None
            code = resp.topics[0].error_code
            if code not in (E.NONE, E.TOPIC_ALREADY_EXISTS, E.REQUEST_TIMED_OUT):
                raise fail(f"could not create topic {name}: {short(resp)}")
            return True

        attempt()
        if poll(lambda: self._all_led(name, partitions, rf), 30) is None:
            raise fail(f"topic {name} has no leaders with a full ISR after 30 s")
        self.owned.add(name)
        return name

    def _all_led(self, name: str, partitions: int, rf: int) -> bool:
        try:
            self.view.refresh([name])
        except Exception:
            return False
        for p in range(partitions):
            pl = self.view.partitions.get((name, p))
            if pl is None or pl.leader < 0 or len(pl.isr) < rf:
                return False
        return True

    def new_committed_topic(self) -> None:
        """A fresh RF=3 topic holding the known-good batches, written with acks=-1."""
        name = self.create_topic_ok(f"fuzz-committed-{next(self._topic_seq)}", partitions=1, rf=3,
                                    configs={"min.insync.replicas": "2"})
        self.owned.discard(self.committed.name)
        self.committed = CommittedTopic(name)
        pid = self.producer_id
        batches = [
            valid_batch_bytes([b"plain-0", b"plain-1", b"plain-2"]),
            valid_batch_bytes([b"v0", None, b"v2"], keys=[b"k0", b"k1", None],
                              headers=[(), (), ()]),
            valid_batch_bytes([b"gz-%d" % i for i in range(10)], compression=1),
            valid_batch_bytes([b"zs-%d" % i for i in range(10)], compression=4),
            valid_batch_bytes([b"idem-0", b"idem-1"], producer_id=pid, producer_epoch=0, base_sequence=0),
        ]
        for b in batches:
            offset = self.produce_valid(b, what="writing a known-good batch")
            self.committed.known.append((offset, b))

    # ------------------------------------------------------------ connections

    def conn(self, broker_id: int) -> Connection:
        assert self.cluster.state is not None
        return self.view.connection(self.cluster.state.brokers[broker_id].address)

    def any_conn(self, index: int = 0) -> Connection:
        return self.conn(self.broker_ids[index % len(self.broker_ids)])

    def leader_of(self, topic: str, partition: int = 0) -> int:
        self.view.refresh([topic])
        pl = self.view.partitions.get((topic, partition))
        return pl.leader if pl is not None else -1

    def leader_conn(self, topic: str | None = None, partition: int = 0) -> Connection:
        """The partition leader's connection (the first broker if there is none right now)."""
        try:
            leader = self.leader_of(topic or self.committed.name, partition)
        except Exception:
            leader = -1
        return self.conn(leader) if leader in self.broker_ids else self.any_conn()

    # ------------------------------------------------------------ raw calls

    def call(self, conn: Connection, method: str, request: M, *, timeout: float = 20.0,
             may_wait: bool = False) -> Any:
        """One raw RPC. Returns the response (None when an acceptable transport error ended it);
        raises FuzzFailure for an untyped outcome or an invalid error code."""
        try:
            # wait_for_ready: a broker that just restarted gets the deadline to accept the connection
            # (instead of failing fast on the channel's last failed attempt); a broker that dies while
            # answering still ends the call in UNAVAILABLE.
            resp = getattr(conn.api, method)(request, timeout=timeout, wait_for_ready=True)
        except grpc.RpcError as e:
            code = e.code()
            details = e.details() or ""
            if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "Received message larger than max" not in details:
                return None  # the broker refused a request too large for it
            if code == grpc.StatusCode.DEADLINE_EXCEEDED and may_wait:
                return None  # a long poll that asked to wait longer than we do
            raise fail(f"{method} to {conn.address} ended in gRPC {code.name}: {details[:300]!r}; "
                       f"request: {short(request)}") from None
        bad = bad_error_codes(resp)
        if bad:
            raise fail(f"{method} to {conn.address} answered untyped/invalid error codes {bad[:5]}; "
                       f"request: {short(request)}; response: {short(resp)}")
        return resp

    def produce_request(self, topic: str, records: bytes | Payload, partition: int = 0, acks: int = -1,
                        timeout_ms: int = 5000) -> pb.ProduceRequest:
        data = records.data if isinstance(records, Payload) else records
        return pb.ProduceRequest(acks=acks, timeout_ms=timeout_ms, topics=[pb.ProduceTopicData(
            name=topic, partitions=[pb.ProducePartitionData(partition=partition, records=data)])])

    def produce_valid(self, batch: bytes, *, topic: str | None = None, partition: int = 0,
                      what: str = "a valid acks=-1 produce", timeout_s: float = 30.0) -> int:
        """Produce ``batch`` with acks=-1, retrying retriable errors; the base offset."""
        topic = topic or self.committed.name
        last = ""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            conn = self.leader_conn(topic, partition)
            try:
                resp = conn.api.Produce(self.produce_request(topic, batch, partition), timeout=15)
            except grpc.RpcError as e:
                code = e.code()
                if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    last = f"gRPC {code.name}"
                    time.sleep(0.2)
                    continue
                raise fail(f"{what} to {topic}-{partition} ended in gRPC {code.name}: "
                           f"{(e.details() or '')[:300]!r}") from None
            pr = resp.topics[0].partitions[0]
            if pr.error_code == E.NONE:
                return int(pr.base_offset)
            if pr.error_code not in RETRIABLE_PRODUCE:
                raise fail(f"{what} to {topic}-{partition} failed: {E.Name(pr.error_code)} {pr.error_message!r}")
            last = f"{E.Name(pr.error_code)} {pr.error_message!r}"
            time.sleep(0.1)
        raise fail(f"{what} to {topic}-{partition} did not succeed within {timeout_s:.0f}s (last: {last})")

    def log_end_offset(self, conn: Connection, topic: str, partition: int = 0) -> int:
        """The log end offset of ``conn``'s replica (-1 if it has none)."""
        resp = self.call(conn, "Fetch", pb.FetchRequest(replica_id=DEBUGGING_REPLICA_ID, max_wait_ms=0, topics=[
            pb.FetchTopic(name=topic, partitions=[pb.FetchPartition(partition=partition, fetch_offset=0,
                                                                    partition_max_bytes=1)])]))
        pr = resp.topics[0].partitions[0]
        return int(pr.log_end_offset) if pr.error_code == E.NONE else -1

    def check_produce_outcome(self, payload: Payload, resp: pb.ProduceResponse, topic: str, partition: int,
                              acks: int, leo_before: int, leo_after: int) -> None:
        """What a correct leader answers for ``payload`` (issue 12's LogValidator rules): a typed
        refusal that writes nothing, or - for a well-formed batch - an append."""
        answers = [p for t in resp.topics if t.name == topic for p in t.partitions if p.partition == partition]
        if not answers:
            raise fail(f"Produce answered nothing for {topic}-{partition}: {short(resp)}")
        code = answers[0].error_code
        if payload.must_refuse and code == E.NONE:
            raise fail(f"the leader accepted a batch it must refuse ({payload.label}) at offset "
                       f"{answers[0].base_offset}")
        if payload.must_accept and acks in (-1, 0, 1) and code not in (E.NONE, *RETRIABLE_PRODUCE):
            raise fail(f"the leader refused a well-formed batch ({payload.label}): {E.Name(code)} "
                       f"{answers[0].error_message!r}")
        appended_anyway = (E.REQUEST_TIMED_OUT, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.NOT_LEADER_OR_FOLLOWER)
        if code != E.NONE and code not in appended_anyway and leo_before >= 0 and leo_after != leo_before:
            raise fail(f"a refused produce ({E.Name(code)}) still moved the log end of {topic}-{partition} "
                       f"from {leo_before} to {leo_after} ({payload.label})")

    # ------------------------------------------------------------ examples

    @contextlib.contextmanager
    def example(self, check: bool = True, **inputs: object) -> Iterator[None]:
        """Wrap one hypothesis example: repair first if the last one failed, check invariants after.
        ``inputs`` (the example's arguments) go into the journal with a failure."""
        self.inputs = {k: short(v, 300) for k, v in inputs.items() if not isinstance(v, Harness) and not k.endswith("_holder")}
        self.begin()
        try:
            yield
            if check:
                self.check_invariants()
                self.examples += 1
                if self.kill_every > 0 and self.examples % self.kill_every == 0:
                    self.kill_and_restart_leader()
        except Exception as e:
            self.record_failure(e)
            if not self.keep_going:
                raise

    def end_of_test(self) -> None:
        """What every test ends with: the leader killed and restarted, then the invariants."""
        print(f"{self.module}::{self.test_name}: {self.examples} examples passed the invariants so far in this module")
        with self.example(check=False, step="end of test: SIGKILL and restart of the leader"):
            self.kill_and_restart_leader()
        if self.keep_going and self.failures:
            raise fail(f"{len(self.failures)} failed examples (all in ${JOURNAL_ENV} when set); the first: {self.failures[0]}")

    def begin(self) -> None:
        if self.broken is not None:
            raise fail(f"the cluster could not be repaired after an earlier failure: {self.broken}")
        if self.damaged:
            self.repair()

    def record_failure(self, e: BaseException) -> None:
        self.damaged = True
        text = f"{type(e).__name__}: {e}"
        self.failures.append(text)
        path = os.environ.get(JOURNAL_ENV)
        if path:
            with open(path, "a") as f:
                f.write(json.dumps({"module": self.module, "test": self.test_name, "failure": text[:4000],
                                    "inputs": self.inputs}) + "\n")

    def repair(self) -> None:
        """Bring every broker back (moving aside data it cannot start from) and start a new committed topic."""
        try:
            assert self.cluster.state is not None
            for bid in self.broker_ids:
                if not pid_alive(self.cluster.state.brokers[bid].pid):
                    self._start_broker(bid, move_data_if_needed=True)
            self.cluster.wait_registered(set(self.broker_ids), 60)
            self.cluster.wait_for_controller(60)
            # The old committed topic may hold what broke it: deleted, so later restarts do not load it.
            with contextlib.suppress(Exception):
                self.any_conn().api.DeleteTopics(pb.DeleteTopicsRequest(topic_names=[self.committed.name],
                                                                        timeout_ms=5000), timeout=15)
            self.new_committed_topic()
            self.view.refresh(sorted(self.owned))
            for name in list(self.owned):
                if self.view.topic_errors.get(name) != E.NONE:
                    self.owned.discard(name)
            if self.scratch not in self.owned:
                self.scratch = self.create_topic_ok(f"fuzz-scratch-{next(self._topic_seq)}", partitions=2, rf=3)
            self.damaged = False
        except BaseException as e:
            self.broken = f"{type(e).__name__}: {e}"
            raise

    def _start_broker(self, bid: int, move_data_if_needed: bool = False) -> None:
        self.cluster.start(bid)
        try:
            self.cluster.wait_registered({bid}, 60)
        except ClusterError:
            if not move_data_if_needed:
                raise
            data = Path(self.cluster.broker(bid).config).parent / "data"
            data.rename(data.with_name(f"data.unstartable-{time.time_ns()}"))
            self.cluster.start(bid)
            self.cluster.wait_registered({bid}, 60)

    # ------------------------------------------------------------ invariants

    def check_invariants(self) -> None:
        self.check_alive()
        self.check_topics_intact()
        self.check_writable()
        self.check_replicas_identical()
        self.check_no_escape()

    def check_topics_intact(self) -> None:
        resp = self.call(self.any_conn(), "Metadata", pb.MetadataRequest(topics=sorted(self.owned)))
        gone = [t.name for t in resp.topics if t.error_code == E.UNKNOWN_TOPIC_OR_PARTITION]
        if gone:
            raise fail(f"topics the harness owns disappeared: {gone}")

    def broker_log_tail(self, bid: int, lines: int = 15) -> str:
        try:
            text = Path(self.cluster.broker(bid).log).read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def check_alive(self) -> None:
        assert self.cluster.state is not None
        for bid in self.broker_ids:
            b = self.cluster.state.brokers[bid]
            if not pid_alive(b.pid):
                raise fail(f"broker {bid} (pid {b.pid}) died; its log ends:\n{self.broker_log_tail(bid)}")
            try:
                self.conn(bid).api.Metadata(pb.MetadataRequest(), timeout=10, wait_for_ready=True)
            except grpc.RpcError as e:
                raise fail(f"broker {bid} is alive but does not answer Metadata: gRPC "
                           f"{e.code().name}") from None

    def check_writable(self) -> int:
        self.canary += 1
        batch = valid_batch_bytes([b"canary-%d" % self.canary])
        return self.produce_valid(batch, what="a fresh valid acks=-1 produce (writability check)")

    def replica_batches(self, bid: int, topic: str, partition: int, start: int, end: int) -> list[BatchCopy]:
        """Every whole batch of broker ``bid``'s replica from ``start`` below ``end`` (replica id -2)."""
        out: list[BatchCopy] = []
        offset = start
        max_bytes = 4 << 20
        api = self.conn(bid).api
        for _ in range(100_000):
            if offset >= end:
                return out
            req = pb.FetchRequest(replica_id=DEBUGGING_REPLICA_ID, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes,
                                  topics=[pb.FetchTopic(name=topic, partitions=[pb.FetchPartition(
                                      partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes)])])
            resp = self.call(self.conn(bid), "Fetch", req, timeout=20)
            if resp is None:
                raise fail(f"replica {bid} of {topic}-{partition}: Fetch(-2) at {offset} was refused")
            pr = resp.topics[0].partitions[0]
            if pr.error_code != E.NONE:
                raise fail(f"replica {bid} of {topic}-{partition}: Fetch(-2) at {offset} answered "
                           f"{E.Name(pr.error_code)}")
            data = pr.records
            pos = 0
            progressed = False
            while len(data) - pos >= HEADER_SIZE:
                base, length = HEADER.unpack_from(data, pos)[:2]
                size = length + LOG_OVERHEAD
                if length < HEADER_SIZE - LOG_OVERHEAD or pos + size > len(data):
                    break
                last = base + HEADER.unpack_from(data, pos)[6]
                if base >= end:
                    return out
                if last >= offset:
                    out.append(BatchCopy(base, last, bytes(data[pos:pos + size])))
                    offset = last + 1
                    progressed = True
                pos += size
            if not progressed:
                if max_bytes >= 256 << 20 or (not data and pr.log_end_offset <= offset):
                    break
                max_bytes *= 4
        del api
        return out

    def check_replicas_identical(self, timeout_s: float = 20.0) -> None:
        topic = self.committed.name
        state: dict[str, str] = {"why": ""}

        def compare() -> bool:
            try:
                self.view.refresh([topic])
            except Exception as e:
                state["why"] = f"metadata: {e}"
                return False
            pl = self.view.partitions.get((topic, 0))
            if pl is None or pl.leader not in self.broker_ids:
                state["why"] = f"no leader ({pl})"
                return False
            head = self.call(self.conn(pl.leader), "Fetch", pb.FetchRequest(
                replica_id=DEBUGGING_REPLICA_ID, max_wait_ms=0, topics=[pb.FetchTopic(
                    name=topic, partitions=[pb.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1)])]))
            hp = head.topics[0].partitions[0]
            if hp.error_code != E.NONE:
                state["why"] = f"leader {pl.leader} answered {E.Name(hp.error_code)}"
                return False
            hw = hp.high_watermark
            copies = {r: self.replica_batches(r, topic, 0, 0, hw) for r in pl.replicas}
            reference = copies[pl.leader]
            for r, got in copies.items():
                if [(c.base_offset, c.data) for c in got] != [(c.base_offset, c.data) for c in reference]:
                    diff = next((i for i, (a, b) in enumerate(zip(reference, got, strict=False))
                                 if (a.base_offset, a.data) != (b.base_offset, b.data)),
                                min(len(reference), len(got)))
                    at = reference[diff].base_offset if diff < len(reference) else f"end ({len(got)} batches)"
                    state["why"] = (f"replica {r} differs from leader {pl.leader} below HW {hw} at offset {at} "
                                    f"({len(got)} vs {len(reference)} batches); isr {list(pl.isr)}")
                    return False
            self._check_committed_content(reference, hw)
            return True

        if poll(compare, timeout_s, 0.2) is None:
            raise fail(f"committed records of {topic} are not identical on all replicas within {timeout_s:.0f}s: "
                       f"{state['why']}")

    def _check_committed_content(self, batches: list[BatchCopy], hw: int) -> None:
        topic = self.committed.name
        by_base = {c.base_offset: c for c in batches}
        for base, sent in self.committed.known:
            got = by_base.get(base)
            # The leader stamps base offset, length and leader epoch (the first 16 bytes); the rest is as sent.
            if got is None or got.data[16:] != sent[16:]:
                raise fail(f"known-good batch at offset {base} of {topic} is "
                           f"{'missing' if got is None else 'changed'} (HW {hw})")
        for c in batches:
            try:
                decode_batch(c.data)
            except Exception as e:
                raise fail(f"committed batch at offset {c.base_offset} of {topic} (below HW {hw}) cannot be "
                           f"decoded by the project's consumer: {type(e).__name__}: {e}; first bytes "
                           f"{c.data[:80].hex()}") from None

    # ------------------------------------------------------------ paths outside log.dirs

    def snapshot_paths(self) -> set[str]:
        """Names directly under the cluster directory, each broker directory and the sacrificial root."""
        root = Path(self.cluster.dir)
        seen: set[str] = set()
        for d in [root, root.parent, self.sacrificial_root, *root.glob("broker-*")]:
            if d.is_dir():
                seen |= {str(p) for p in d.iterdir()}
        return seen

    def arm_escape_check(self) -> None:
        self._baseline = self.snapshot_paths()

    def check_no_escape(self) -> None:
        baseline = getattr(self, "_baseline", None)
        if baseline is None:
            return
        new = sorted(p for p in self.snapshot_paths() - baseline
                     if not Path(p).name.startswith(("data.unstartable-", "broker.log"))
                     and not p.endswith(".tmp"))
        if new:
            self._baseline = self.snapshot_paths()
            raise fail(f"files were created outside log.dirs: {new[:5]}")

    # ------------------------------------------------------------ kill -9 and restart

    def kill_and_restart_leader(self) -> None:
        """SIGKILL the committed partition's leader, start it again; it must come back and rejoin."""
        topic = self.committed.name
        leader = self.leader_of(topic)
        if leader not in self.broker_ids:
            raise fail(f"{topic}-0 has no leader before the kill")
        self.cluster.signal(leader, "KILL")
        if poll(lambda: self.leader_of(topic) not in (-1, leader), 30, 0.1) is None:
            raise fail(f"no new leader for {topic}-0 within 30 s after SIGKILL of broker {leader}")
        try:
            self._start_broker(leader)
        except ClusterError as e:
            raise fail(f"broker {leader} could not start again after SIGKILL: {e}; its log ends:\n"
                       f"{self.broker_log_tail(leader)}") from None

        def rejoined() -> bool:
            self.view.refresh([topic])
            pl = self.view.partitions.get((topic, 0))
            return pl is not None and leader in pl.isr

        if poll(rejoined, 45, 0.1) is None:
            raise fail(f"broker {leader} restarted but did not rejoin the ISR of {topic}-0 within 45 s; its log "
                       f"ends:\n{self.broker_log_tail(leader)}")
        self.check_invariants()
