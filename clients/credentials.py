"""How the command-line clients reach the server, with the same flags in each: the address
(``--address``, else ``$NMT_ADDRESS``), TLS (``--tls-ca``, and ``--tls-cert``/``--tls-key``
for mutual TLS) and the bearer token, kept off the command line where other users of the
machine can read it (``ps``, /proc): from a file (``--auth-token-file``) or from the
environment (``$NMT_AUTH_TOKEN``; the older ``$NMT_TOKEN`` is still read)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path

import grpc

from cli import GRPC_PORT, UsageError, check_input_file, deprecated_alias
from clients.client import (
    DEFAULT_ADDRESS,
    HTTP1_HINTS,
    Connection,
    NotReady,
    TranslationError,
    parse_addresses,
    speaks_http1,
)

ADDRESS_ENV = "NMT_ADDRESS"
TOKEN_ENV = "NMT_AUTH_TOKEN"
OLD_TOKEN_ENV = "NMT_TOKEN"


def add_token_arguments(p: argparse.ArgumentParser) -> None:
    """``--auth-token-file PATH`` or ``--auth-token TOKEN`` (``--token``: its deprecated spelling)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--auth-token-file", type=Path, metavar="PATH",
                   help=f"read the server's bearer token from this file (one line; make it readable only by "
                   f"you) (default: ${TOKEN_ENV}, if set)")
    g.add_argument("--auth-token", dest="token", metavar="TOKEN",
                   help="the bearer token itself. Visible to other users of this machine in the process list: "
                   f"prefer --auth-token-file or ${TOKEN_ENV} (default: none)")
    deprecated_alias(p, "--token", "--auth-token")


def add_connection_arguments(p: argparse.ArgumentParser) -> None:
    """The flags every client takes to reach the servers."""
    p.add_argument("--address", action="append", metavar="HOST:PORT",
                   help="server address; repeat (or comma-separate) to balance round-robin over several "
                   f"(default: ${ADDRESS_ENV}, else {DEFAULT_ADDRESS})")
    add_token_arguments(p)
    p.add_argument("--tls-ca", type=Path, metavar="PEM", help="CA certificate: connect with TLS (default: none)")
    p.add_argument("--tls-cert", type=Path, metavar="PEM", help="client certificate, for mutual TLS (default: none)")
    p.add_argument("--tls-key", type=Path, metavar="PEM", help="the client certificate's key (default: none)")


def connection(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Connection:
    """The Connection the flags describe; UsageError for a file that is not there or flags that
    do not go together."""
    try:
        addresses = parse_addresses(args.address or environ.get(ADDRESS_ENV))
        token = resolve_token(args, environ)
    except ValueError as e:
        raise UsageError(str(e)) from None
    for flag in ("tls_ca", "tls_cert", "tls_key"):
        if getattr(args, flag):
            check_input_file(getattr(args, flag), "--" + flag.replace("_", "-"), "a PEM file")
    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("--tls-cert and --tls-key go together (mutual TLS)")
    return Connection(addresses=tuple(addresses), token=token, tls_ca=args.tls_ca, tls_cert=args.tls_cert,
                      tls_key=args.tls_key)


def explain(error: TranslationError, conn_args: argparse.Namespace) -> str:
    """The error, and for a server that cannot be reached where the client looked for it: an
    HTTP server answering there (the gateway's port given for the gRPC server's), or none."""
    if error.code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) or \
            isinstance(error, NotReady):
        return str(error)
    addresses = parse_addresses(conn_args.address or os.environ.get(ADDRESS_ENV))
    if any(hint in error.details for hint in HTTP1_HINTS):
        http = [a for a in addresses if speaks_http1(a)] or addresses[:1]
        return (f"{', '.join(http)} {'is an HTTP server' if len(http) == 1 else 'are HTTP servers'} (the "
                f"gateway?); the gRPC server usually listens on {GRPC_PORT}: pass --address HOST:{GRPC_PORT} "
                f"or set ${ADDRESS_ENV}")
    return f"{error} (is a server running at {', '.join(addresses)}? pass --address HOST:PORT or set ${ADDRESS_ENV})"


def resolve_token(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> str | None:
    """The token from --auth-token, else --auth-token-file, else the environment; None: no token.
    Raises ValueError for a token file that cannot be read or holds no single-line token."""
    if args.token:
        return args.token
    path = args.auth_token_file
    if path is not None:
        try:
            token = Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"--auth-token-file: cannot read {path}: {e}") from None
        if not token or "\n" in token:
            raise ValueError(f"--auth-token-file: {path} must hold the token on one line")
        return token
    return environ.get(TOKEN_ENV) or environ.get(OLD_TOKEN_ENV) or None
