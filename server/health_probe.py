"""``nmt-health``: one gRPC health check; exit 0 when the server says SERVING, 1 otherwise.

    nmt-health                                  # $NMT_ADDRESS, else 127.0.0.1:$NMT_PORT (50051)
    nmt-health --address 127.0.0.1:50051 --service nmt.v1.Translator --timeout 3

Made for container health checks (Docker HEALTHCHECK, compose ``healthcheck``): it asks
the standard ``grpc.health.v1`` service once, prints the status, and never waits past
``--timeout``. Health stays open without the bearer token. For a server with TLS give
the CA that signed its certificate (``--tls-ca`` or ``NMT_HEALTH_TLS_CA``) and the name
in that certificate (``--tls-server-name``, default localhost); with mutual TLS also a
client certificate and key (``--tls-cert``/``--tls-key``, or ``NMT_HEALTH_TLS_CERT``,
``NMT_HEALTH_TLS_KEY``): the same flags as the other clients'.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cli import (
    EXIT_FAILED,
    EXIT_USAGE,
    ArgumentParser,
    UsageError,
    check_input_file,
    deprecated_alias,
    exit_status_help,
    fail,
)
from server.config import ServerConfig


def _channel(args: argparse.Namespace) -> grpc.Channel:
    if not args.tls_ca:
        return grpc.insecure_channel(args.address)
    key = Path(args.tls_key).read_bytes() if args.tls_key else None
    cert = Path(args.tls_cert).read_bytes() if args.tls_cert else None
    creds = grpc.ssl_channel_credentials(Path(args.tls_ca).read_bytes(), key, cert)
    return grpc.secure_channel(args.address, creds, options=[("grpc.ssl_target_name_override",
                                                              args.tls_server_name)])


def build_parser(env: Mapping[str, str] = os.environ) -> argparse.ArgumentParser:
    p = ArgumentParser(prog="nmt-health", description=__doc__,
                       epilog=exit_status_help(EXIT_FAILED, EXIT_USAGE, done="SERVING").replace(
                           "failed while running (run it again as it is)", "not SERVING, or no answer"))
    port = env.get("NMT_PORT", str(ServerConfig.port))
    p.add_argument("--address", default=env.get("NMT_ADDRESS") or f"127.0.0.1:{port}", metavar="HOST:PORT",
                   help="the server ($NMT_ADDRESS, else 127.0.0.1 and the server's $NMT_PORT)")
    p.add_argument("--service", default="", help="the service to ask about ('' = the whole server)")
    p.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the answer")
    p.add_argument("--tls-ca", default=env.get("NMT_HEALTH_TLS_CA", ""), metavar="PEM",
                   help="connect with TLS, trusting this CA (default: $NMT_HEALTH_TLS_CA, else none)")
    p.add_argument("--tls-server-name", default=env.get("NMT_HEALTH_TLS_SERVER_NAME", "localhost"),
                   help="the name the server's certificate holds ($NMT_HEALTH_TLS_SERVER_NAME)")
    p.add_argument("--tls-cert", default=env.get("NMT_HEALTH_TLS_CERT", ""), metavar="PEM",
                   help="client certificate, for mutual TLS (default: $NMT_HEALTH_TLS_CERT, else none)")
    p.add_argument("--tls-key", default=env.get("NMT_HEALTH_TLS_KEY", ""), metavar="PEM",
                   help="the client certificate's key (default: $NMT_HEALTH_TLS_KEY, else none)")
    deprecated_alias(p, "--tls-client-cert", "--tls-cert")
    deprecated_alias(p, "--tls-client-key", "--tls-key")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        for name in ("tls_ca", "tls_cert", "tls_key"):
            if getattr(args, name):
                check_input_file(getattr(args, name), "--" + name.replace("_", "-"), "a PEM file")
    except UsageError as e:
        return fail("nmt-health", str(e), EXIT_USAGE)
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
