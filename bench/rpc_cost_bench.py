"""What one request costs the server: a unary gRPC call against a message on an open stream.

Measures the server process's CPU (``/proc/<pid>/stat``) per request, and the wall time per
request seen by one client sending them one after the other (unary) or pipelined (stream):

- **bare grpc.aio**: a server of this project's service whose Produce and ProduceStream answer
  an empty response at once (grpc.aio + uvloop, as the brokers): the floor of the transport,
  the same-run baseline;
- **broker**: a real broker (its own one-broker cluster) taking a one-record acks=1 Produce on a
  replication-factor-1 topic, as a unary call and on a ProduceStream - the same handler behind
  both, so the difference is the transport;
- **one message at a time** (ping-pong on an open connection, as each hop of an acks=all
  record is): the bare grpc.aio stream against a length-prefixed echo over a plain uvloop TCP
  connection - the floor of any transport in these processes - round trip p50 and CPU per round
  trip on each side.

The producer sends on ProduceStream, the followers fetch on FetchStream, because of this ratio.

    python bench/rpc_cost_bench.py [--requests 3000] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grpc

from client.connection import ClusterView
from client.ops.local_cluster import LocalCluster
from proto import minikafka_pb2 as pb
from proto import minikafka_pb2_grpc as pb_grpc
from proto.record_batch import Record, encode_batch

TOPIC = "rpc-cost"
FRAME = struct.Struct(">I")


def serve_bare() -> None:
    """The bare server (run in a child process): prints its port, serves until killed."""
    import uvloop

    class Bare(pb_grpc.KafkaApiServicer):
        async def Produce(self, request: pb.ProduceRequest, context: Any) -> pb.ProduceResponse:
            return pb.ProduceResponse()

        async def ProduceStream(self, request_iterator: AsyncIterator[pb.ProduceRequest],
                                context: Any) -> AsyncIterator[pb.ProduceResponse]:
            async for _request in request_iterator:
                yield pb.ProduceResponse()

    async def main() -> None:
        server = grpc.aio.server()
        pb_grpc.add_KafkaApiServicer_to_server(Bare(), server)  # type: ignore[no-untyped-call]
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(port, flush=True)
        await server.wait_for_termination()

    uvloop.run(main())


def serve_raw() -> None:
    """A length-prefixed echo on a plain uvloop TCP server (run in a child process)."""
    import uvloop

    class Echo(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport: Any = transport  # uvloop's TCPTransport (not an asyncio.Transport subclass)
            self.buf = b""

        def data_received(self, data: bytes) -> None:
            self.buf += data
            while len(self.buf) >= 4:
                (n,) = FRAME.unpack_from(self.buf)
                if len(self.buf) < 4 + n:
                    break
                self.transport.write(self.buf[:4 + n])
                self.buf = self.buf[4 + n:]

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Event().wait()

    uvloop.run(main())


async def _grpc_ping_pong(port: int, payload: bytes, n: int) -> list[float]:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        call = pb_grpc.KafkaApiStub(channel).ProduceStream()  # type: ignore[no-untyped-call]
        request = pb.ProduceRequest(acks=1, topics=[pb.ProduceTopicData(
            name=TOPIC, partitions=[pb.ProducePartitionData(partition=0, records=payload)])])
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            await call.write(request)
            await call.read()
            times.append(time.perf_counter() - t0)
        await call.done_writing()
        return times
    finally:
        await channel.close()


async def _raw_ping_pong(port: int, payload: bytes, n: int) -> list[float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    frame = FRAME.pack(len(payload)) + payload
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        writer.write(frame)
        await reader.readexactly(len(frame))
        times.append(time.perf_counter() - t0)
    writer.close()
    return times


def ping_pong(kind: str, n: int) -> dict[str, float]:
    """Round trip p50 and CPU per round trip (server and this client), one message at a time."""
    import uvloop

    server = subprocess.Popen([sys.executable, __file__, f"--serve-{kind}"], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        payload = encode_batch([Record(value=b"v" * 100, timestamp=int(time.time() * 1000))])
        run = _grpc_ping_pong if kind == "bare" else _raw_ping_pong
        uvloop.run(run(port, payload, 200))  # warm-up
        c0, t0 = cpu_s(server.pid), os.times()
        times = sorted(uvloop.run(run(port, payload, n)))
        c1, t1 = cpu_s(server.pid), os.times()
    finally:
        server.kill()
        server.wait()
    return {"round_trip_p50_us": round(times[len(times) // 2] * 1e6),
            "server_cpu_us": round((c1 - c0) / n * 1e6),
            "client_cpu_us": round(((t1.user - t0.user) + (t1.system - t0.system)) / n * 1e6)}


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (fields 14 and 15 of /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(stub: Any, pid: int, request: pb.ProduceRequest, n: int) -> dict[str, dict[str, float]]:
    """Server CPU and client wall time per request: n unary calls, then n messages on one stream."""
    out: dict[str, dict[str, float]] = {}
    for _ in range(200):  # warm-up: connection, caches
        stub.Produce(request, timeout=10)
    c0, t0 = cpu_s(pid), time.perf_counter()
    for _ in range(n):
        stub.Produce(request, timeout=10)
    out["unary"] = {"server_cpu_us": (cpu_s(pid) - c0) / n * 1e6, "wall_us": (time.perf_counter() - t0) / n * 1e6}

    def requests() -> Iterator[pb.ProduceRequest]:
        for _ in range(n):
            yield request

    c0, t0 = cpu_s(pid), time.perf_counter()
    answered = sum(1 for _ in stub.ProduceStream(requests(), timeout=120))
    assert answered == n
    out["stream"] = {"server_cpu_us": (cpu_s(pid) - c0) / n * 1e6, "wall_us": (time.perf_counter() - t0) / n * 1e6}
    return {k: {m: round(v) for m, v in d.items()} for k, d in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    result: dict[str, Any] = {"requests": args.requests}
    bare = subprocess.Popen([sys.executable, __file__, "--serve-bare"], stdout=subprocess.PIPE, text=True)
    try:
        assert bare.stdout is not None
        port = int(bare.stdout.readline())
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        result["bare_grpc_aio"] = measure(pb_grpc.KafkaApiStub(channel), bare.pid,  # type: ignore[no-untyped-call]
                                          pb.ProduceRequest(acks=1), args.requests)
        channel.close()
    finally:
        bare.kill()
        bare.wait()

    result["ping_pong"] = {"bare_grpc_aio_stream": ping_pong("bare", args.requests),
                           "raw_uvloop_tcp": ping_pong("raw", args.requests)}

    root = Path(tempfile.mkdtemp(prefix="rpc-cost-bench-"))
    cluster = LocalCluster(root / "cluster")
    try:
        state = cluster.up(1)
        view = ClusterView(state.bootstrap_servers)
        conn = view.connection(view.bootstrap[0])
        resp = conn.api.CreateTopics(pb.CreateTopicsRequest(topics=[pb.CreatableTopic(
            name=TOPIC, num_partitions=1, replication_factor=1)], timeout_ms=30000), timeout=40)
        if resp.topics[0].error_code != pb.ErrorCode.NONE:
            raise SystemExit(f"cannot create {TOPIC}: {resp.topics[0].error_message}")
        request = pb.ProduceRequest(acks=1, timeout_ms=30000, topics=[pb.ProduceTopicData(name=TOPIC, partitions=[
            pb.ProducePartitionData(partition=0, records=encode_batch([Record(value=b"v" * 100,
                                                                              timestamp=int(time.time() * 1000))]))])])
        deadline = time.monotonic() + 30
        while conn.api.Produce(request, timeout=10).topics[0].partitions[0].error_code != pb.ErrorCode.NONE:
            if time.monotonic() > deadline:
                raise SystemExit(f"{TOPIC} never took a record")
            time.sleep(0.1)
        pid = next(iter(state.brokers.values())).pid
        result["broker_produce_1_record"] = measure(conn.api, pid, request, args.requests)
        view.close()
    finally:
        cluster.down()
        shutil.rmtree(root, ignore_errors=True)

    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.requests} requests each way; server CPU and client wall time per request")
    print(f"{'':40} {'server CPU us':>14} {'wall us':>9}")
    for name, label in (("bare_grpc_aio", "bare grpc.aio (baseline)"), ("broker_produce_1_record", "broker, Produce 1 record acks=1")):
        for kind in ("unary", "stream"):
            r = result[name][kind]
            print(f"{label + ', ' + kind:40} {r['server_cpu_us']:>14,} {r['wall_us']:>9,}")
    for name in ("bare_grpc_aio", "broker_produce_1_record"):
        r = result[name]
        print(f"{name}: stream / unary server CPU = {r['stream']['server_cpu_us'] / r['unary']['server_cpu_us']:.2f}")
    print("one message at a time on an open connection (each hop of an acks=all record):")
    for name, label in (("bare_grpc_aio_stream", "bare grpc.aio stream"), ("raw_uvloop_tcp", "plain uvloop TCP, framed")):
        r = result["ping_pong"][name]
        print(f"  {label:26} round trip p50 {r['round_trip_p50_us']:>5} us; CPU per round trip: "
              f"server {r['server_cpu_us']} us, client {r['client_cpu_us']} us")


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve-bare"]:
        serve_bare()
    elif sys.argv[1:] == ["--serve-raw"]:
        serve_raw()
    else:
        main()
