"""``python -m client.ops.healthcheck HOST:PORT [CA_PEM]``: exit 0 when the broker's gRPC health says
SERVING (container health checks use it). With a CA certificate the listener is reached over TLS
(SSL and SASL_SSL listeners; health needs no credentials)."""

from __future__ import annotations

import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from proto.transport import ChannelSecurity


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: python -m client.ops.healthcheck HOST:PORT [CA_PEM]", file=sys.stderr)
        return 2
    security = ChannelSecurity("SSL", ssl_cafile=argv[1]) if len(argv) == 2 else ChannelSecurity()
    with security.channel(argv[0]) as channel:
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
