"""``nmt-health``: one gRPC health check; exit 0 when the server says SERVING, 1 otherwise.

    nmt-health                                  # 127.0.0.1:$NMT_PORT (default 50051), whole server
    nmt-health --address 127.0.0.1:50051 --service nmt.v1.Translator --timeout 3

Made for container health checks (Docker HEALTHCHECK, compose ``healthcheck``): it asks
the standard ``grpc.health.v1`` service once, prints the status, and never waits past
``--timeout``. Health stays open without the bearer token. For a server with TLS give
the CA that signed its certificate (``--tls-ca`` or ``NMT_HEALTH_TLS_CA``) and the name
in that certificate (``--tls-server-name``, default localhost); with mutual TLS also a
client certificate and key (``NMT_HEALTH_TLS_CERT``, ``NMT_HEALTH_TLS_KEY``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def _channel(args: argparse.Namespace) -> grpc.Channel:
    if not args.tls_ca:
        return grpc.insecure_channel(args.address)
    key = Path(args.tls_client_key).read_bytes() if args.tls_client_key else None
    cert = Path(args.tls_client_cert).read_bytes() if args.tls_client_cert else None
    creds = grpc.ssl_channel_credentials(Path(args.tls_ca).read_bytes(), key, cert)
    return grpc.secure_channel(args.address, creds, options=[("grpc.ssl_target_name_override",
                                                              args.tls_server_name)])


def main(argv: list[str] | None = None) -> int:
    env = os.environ
    p = argparse.ArgumentParser(prog="nmt-health", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--address", default=f"127.0.0.1:{env.get('NMT_PORT', '50051')}")
    p.add_argument("--service", default="", help="the service to ask about ('' = the whole server)")
    p.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the answer")
    p.add_argument("--tls-ca", default=env.get("NMT_HEALTH_TLS_CA", ""), help="connect with TLS, trusting this CA")
    p.add_argument("--tls-server-name", default=env.get("NMT_HEALTH_TLS_SERVER_NAME", "localhost"),
                   help="the name the server's certificate holds")
    p.add_argument("--tls-client-cert", default=env.get("NMT_HEALTH_TLS_CERT", ""),
                   help="a client certificate, for mutual TLS")
    p.add_argument("--tls-client-key", default=env.get("NMT_HEALTH_TLS_KEY", ""), help="its key")
    args = p.parse_args(argv)
    with _channel(args) as channel:
        try:
            response = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout)
        except grpc.RpcError as e:
            print(f"{args.address}: {e.code().name}: {e.details()}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    print(f"{args.address}: {status}")
    return 0 if response.status == health_pb2.HealthCheckResponse.SERVING else 1


if __name__ == "__main__":
    sys.exit(main())
