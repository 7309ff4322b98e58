"""Wait until a server's health check says SERVING (exit 1 after --timeout seconds)."""

from __future__ import annotations

import argparse
import sys
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--address", default="127.0.0.1:50051")
    p.add_argument("--timeout", type=float, default=120)
    args = p.parse_args()
    health = health_pb2_grpc.HealthStub(grpc.insecure_channel(args.address))
    end = time.monotonic() + args.timeout
    while time.monotonic() < end:
        try:
            if health.Check(health_pb2.HealthCheckRequest(), timeout=1).status == \
                    health_pb2.HealthCheckResponse.SERVING:
                return 0
        except grpc.RpcError:
            pass
        time.sleep(0.2)
    print(f"{args.address} did not become SERVING within {args.timeout:.0f}s", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
