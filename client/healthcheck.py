"""``python -m client.healthcheck HOST:PORT``: exit 0 when the broker's gRPC health says SERVING
(container health checks use it)."""

from __future__ import annotations

import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m client.healthcheck HOST:PORT", file=sys.stderr)
        return 2
    with grpc.insecure_channel(argv[0]) as channel:
        try:
            resp = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=3)
        except grpc.RpcError as e:
            print(f"unhealthy: {e.code().name}", file=sys.stderr)
            return 1
    serving = resp.status == health_pb2.HealthCheckResponse.SERVING
    print("SERVING" if serving else health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status))
    return 0 if serving else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
