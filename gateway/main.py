"""``nmt-http``: the HTTP gateway in front of ``nmt-serve`` (see gateway/app.py for the API).

    nmt-http --grpc-address 127.0.0.1:50051 --port 5000
    nmt-http --api-keys-file keys.txt --grpc-token-file token.txt --timeout 20

Served by uvicorn; SIGTERM or Ctrl-C stops taking connections and lets the requests in
flight finish (within --timeout: none lasts longer).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import re
import resource
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence

import uvicorn

from cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, fail
from gateway.app import create_app
from gateway.config import ConfigError, GatewayConfig, parse_args
from gateway.connections import AcceptErrors, ConnectionGuard, protocol_class
from gateway.keys import ApiKey

log = logging.getLogger("nmt.http")
FD_HEADROOM = 64  # file descriptors kept beyond --max-connections: the gRPC channel, logs, the listening socket


class MaskKeys(logging.Filter):
    """No log line shows an API key: api_key=... in a logged URL (LibreTranslate's clients send it
    in the query string) becomes api_key=***."""

    PATTERN = re.compile(r"(?i)(api_key=)[^&\s#]*")

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = self.PATTERN.sub(r"\1***", record.msg)
        if record.args and isinstance(record.args, tuple):
            record.args = tuple(self.PATTERN.sub(r"\1***", a) if isinstance(a, str) else a for a in record.args)
        return True


def _add_filter_once(logger: logging.Logger, kind: type[logging.Filter]) -> None:
    if not any(isinstance(f, kind) for f in logger.filters):
        logger.addFilter(kind())


def raise_file_limit(needed: int) -> int:
    """Raise this process's open-file limit towards ``needed`` (within the hard limit, as nginx's
    worker_rlimit_nofile does); the limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        soft = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return soft


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (port 0: a free one); OSError says why it cannot be."""
    family, kind, proto, _, address = socket.getaddrinfo(host.strip("[]") or None, port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart does not wait out TIME_WAIT
        sock.bind(address)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def cannot_listen(host: str, port: int, error: OSError) -> str:
    """One line: which address could not be bound, why, and what to change."""
    head = f"cannot listen for HTTP on {host}:{port}"
    if isinstance(error, socket.gaierror) or error.errno == errno.EADDRNOTAVAIL:
        return (f"{head}: {host} is not an address of this machine; pass --host 127.0.0.1 (this machine only) or "
                f"--host 0.0.0.0 (every interface)")
    if error.errno == errno.EADDRINUSE:
        return f"{head}: the port is already in use; stop that process or pass another --port (0 picks a free one)"
    if error.errno == errno.EACCES:
        return f"{head}: permission denied (ports below 1024 need privileges); pass another --port"
    return f"{head}: {error.strerror or error}"


def server(cfg: GatewayConfig, api_keys: Sequence[ApiKey] = (), grpc_token: str = "", metrics_token: str = "",
           clock: Callable[[], float] = time.monotonic) -> uvicorn.Server:
    """The uvicorn server of the gateway (run it with ``.run(sockets=[listen(...)])``); ``clock``
    times the keys' limits."""
    app = create_app(cfg, api_keys, grpc_token, metrics_token, clock)
    guard = ConnectionGuard(cfg.max_connections, cfg.header_seconds, cfg.body_seconds)
    app.state.connections = guard
    for name in ("uvicorn.access", "uvicorn.error", "nmt.http"):
        _add_filter_once(logging.getLogger(name), MaskKeys)
    _add_filter_once(logging.getLogger("asyncio"), AcceptErrors)
    # log_config=None: uvicorn's loggers go to the root logger, in the project's format.
    return uvicorn.Server(uvicorn.Config(app, http=protocol_class(guard), log_config=None,
                                         log_level=cfg.log_level.lower(), lifespan="on",
                                         timeout_graceful_shutdown=int(cfg.timeout) + 1, server_header=False))


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    logging.basicConfig(level=cfg.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    try:
        keys, token, metrics_token = cfg.api_keys(), cfg.grpc_token(), cfg.metrics_token()  # parse_args checked them
    except ConfigError as e:
        return fail("nmt-http", str(e), EXIT_USAGE)
    log.info("configuration: %s (%d API keys, %d with limits)", json.dumps(dataclasses.asdict(cfg), sort_keys=True),
             len(keys), sum(1 for k in keys if k.limits.buckets()))
    files = raise_file_limit(cfg.max_connections + FD_HEADROOM)
    if files < cfg.max_connections + FD_HEADROOM:
        log.warning("this process may open %d files: fewer than --max-connections %d needs (%d); lower it or raise "
                    "the limit (ulimit -n)", files, cfg.max_connections, cfg.max_connections + FD_HEADROOM)
    try:
        sock = listen(cfg.host, cfg.port)
    except OSError as e:
        return fail("nmt-http", cannot_listen(cfg.host, cfg.port, e), EXIT_USAGE)
    host, port = sock.getsockname()[:2]
    log.info("serving HTTP on %s:%d", host, port)
    s = server(cfg, keys, token, metrics_token)
    # uvicorn handles SIGTERM and SIGINT while it runs (a graceful shutdown), then restores these
    # handlers and raises the signal again: a SIGTERM then ends the process with status 0, as
    # nmt-serve's does, instead of being killed by it (status -15); a SIGINT is a KeyboardInterrupt.
    signal.signal(signal.SIGTERM, _stopped)
    try:
        s.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return EXIT_OK if s.started else EXIT_FAILED


def _stopped(signum: int, frame: object) -> None:
    raise SystemExit(EXIT_OK)


if __name__ == "__main__":
    sys.exit(main())
