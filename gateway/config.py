"""Gateway configuration: one frozen dataclass, set by flags or by the same names as
environment variables (``--api-keys-file`` <-> ``NMT_HTTP_API_KEYS_FILE``); flags win.

The secrets the settings name (the API keys with their limits, the gRPC bearer token, the
metrics token) are read from their files by ``api_keys()``, ``grpc_token()`` and
``metrics_token()``; ``parse_args`` reads them once, so that a file that is missing,
unreadable, empty or malformed stops the gateway at start-up with one line and exit status 2.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cli import (
    EXIT_FAILED,
    EXIT_USAGE,
    GRPC_ADDRESS,
    LOCALHOST,
    MAX_CONNECTIONS,
    ArgumentParser,
    deprecated_alias,
    exit_status_help,
)
from cli.settings import LOG_LEVELS, ConfigError, Settings, flag, one_of, setting
from cli.settings import add_flags as _add_flags
from cli.settings import values as _values
from engine.defaults import BEAM_SIZE
from gateway.keys import ApiKey, parse_keys

ENV_PREFIX = "NMT_HTTP_"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


@dataclass(frozen=True)
class GatewayConfig(Settings):
    grpc_address: str = setting(GRPC_ADDRESS, "the nmt-serve gRPC server (or the balancer in front of "
                                                   "several), HOST:PORT")
    host: str = setting(LOCALHOST, "address to listen on for HTTP: 127.0.0.1 for this machine only; 0.0.0.0 "
                                     "or [::] for every interface (in a container)")
    port: int = setting(5000, "HTTP port (LibreTranslate's); 0 picks a free one")
    api_keys_file: str = setting("", "a file of API keys, one per line (blank lines and lines starting with # "
                                     "are ignored), or TOML with a [keys.NAME] table per key giving its key and "
                                     "any of requests_per_minute, requests_per_day, chars_per_minute, "
                                     "chars_per_day (gateway/keys.py): /translate, /detect, /translate_file and "
                                     "/v1/translate then need one of them as api_key (body, query string or "
                                     "'Authorization: Bearer KEY'), and a key over a limit gets 429; without a "
                                     "file no key is needed")
    grpc_token_file: str = setting("", "the bearer token of a server started with --auth-token-file, read from "
                                       "this file (surrounding whitespace ignored) and sent as 'authorization: "
                                       "Bearer TOKEN' on every call")
    timeout: float = setting(30.0, "seconds a request may take: the deadline of its gRPC calls; a request's "
                                   "X-Timeout-Seconds header may lower it")
    max_body_bytes: int = setting(1024 * 1024, "the largest request body in bytes; a larger one is answered "
                                               "413")
    max_html_tags: int = setting(10_000, "tags (start, end and self-closing) that the texts of one format=html "
                                         "request may hold together; a request with more is answered 400 as soon "
                                         "as its scan reaches one over (placing the markup back is work for each "
                                         "tag)")
    beam: int = setting(BEAM_SIZE, "beam size of /translate (LibreTranslate's API, which has no such option), "
                                "raised to alternatives + 1 when more alternatives are asked for, at most the "
                                "server's largest beam; /v1/translate takes beam_size per request")
    cors_origins: str = setting("*", "origins whose web pages may call the API from a browser (CORS), separated "
                                     "by commas: * for any (as LibreTranslate), empty for none")
    allowed_hosts: str = setting("auto", "Host header values accepted, separated by commas (* for any): auto "
                                         "accepts localhost, 127.0.0.1 and ::1 when listening on this machine only "
                                         "(a page on another site cannot reach it through DNS rebinding) and any "
                                         "name otherwise")
    max_connections: int = setting(MAX_CONNECTIONS, "HTTP connections open at once; a connection beyond it "
                                                    "is answered 503 and closed at once")
    header_seconds: float = setting(10.0, "time a client has to send a request's headers (and to start it on a "
                                          "new connection); a slower one is disconnected")
    body_seconds: float = setting(30.0, "time a client has to send a request's body once its headers are in; a "
                                        "slower one is answered 408")
    max_file_bytes: int = setting(10 * 1024 * 1024, "the largest file /translate_file takes, in bytes (its "
                                                    "request body may be this much larger than --max-body-bytes)")
    max_file_chars: int = setting(200_000, "characters to translate that one file may hold (each paragraph is also "
                                           "held to the model's characters per text); a larger one is answered 400")
    file_timeout: float = setting(600.0, "seconds /translate_file may take to translate a file (its X-Timeout-"
                                         "Seconds header may lower it)")
    files_dir: str = setting("", "the folder of translated files waiting for /download_file; none: a private "
                                 "folder made at start and removed at exit")
    files_ttl: float = setting(1800.0, "seconds a translated file can be downloaded; older ones are removed")
    metrics: bool = setting(False, "serve Prometheus metrics at /metrics: requests, characters and refusals per "
                                   "API key, labelled by the key's name (never the key), as LibreTranslate's "
                                   "--metrics")
    metrics_token_file: str = setting("", "with --metrics: /metrics then needs 'Authorization: Bearer TOKEN' with "
                                          "the token this file holds (LibreTranslate's --metrics-auth-token)")
    log_level: str = setting("INFO", "DEBUG, INFO, WARNING or ERROR")

    def problems(self) -> list[str]:
        out = []
        if self.max_connections < 1:
            out.append(f"{flag('max_connections')} is {self.max_connections}; it must be at least 1")
        for name in ("header_seconds", "body_seconds"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                out.append(f"{flag(name)} is {getattr(self, name)}; it must be a number of seconds above 0")
        if not self.grpc_address.strip():
            out.append(f"{flag('grpc_address')} is empty; give HOST:PORT of nmt-serve, such as 127.0.0.1:50051")
        elif not _has_port(self.grpc_address):
            out.append(f"{flag('grpc_address')} is {self.grpc_address!r}; give HOST:PORT, such as 127.0.0.1:50051")
        if not self.host.strip():
            out.append(f"{flag('host')} is empty; give an address such as 127.0.0.1")
        if not 0 <= self.port <= 65535:
            out.append(f"{flag('port')} is {self.port}; give a port from 1 to 65535, or 0 for a free one")
        if not (math.isfinite(self.timeout) and self.timeout > 0):
            out.append(f"{flag('timeout')} is {self.timeout}; it must be a number of seconds above 0")
        if self.max_body_bytes < 1024:
            out.append(f"{flag('max_body_bytes')} is {self.max_body_bytes}; it must be at least 1024")
        if self.max_html_tags < 1:
            out.append(f"{flag('max_html_tags')} is {self.max_html_tags}; it must be at least 1")
        if self.beam < 1:
            out.append(f"{flag('beam')} is {self.beam}; it must be at least 1")
        if self.max_file_bytes < 1 or self.max_file_chars < 1:
            out.append(f"{flag('max_file_bytes')} and {flag('max_file_chars')} must be at least 1")
        for name in ("file_timeout", "files_ttl"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                out.append(f"{flag(name)} is {getattr(self, name)}; it must be a number of seconds above 0")
        if self.metrics_token_file and not self.metrics:
            out.append(f"{flag('metrics_token_file')} guards /metrics, which is off: add {flag('metrics')}")
        out += one_of("log_level", self.log_level, LOG_LEVELS, any_case=True)
        return out

    def cors_origin_list(self) -> list[str]:
        return [o.strip() for o in self.cors_origins.split(",") if o.strip()]

    def host_names(self) -> frozenset[str] | None:
        """The Host header names accepted (lower case, no port); None: any."""
        if self.allowed_hosts.strip() == "auto":
            return LOOPBACK_NAMES if self.host.strip().strip("[]") in LOOPBACK_NAMES else None
        names = frozenset(h.strip().lower().strip("[]") for h in self.allowed_hosts.split(",") if h.strip())
        return None if "*" in names else names

    def api_keys(self) -> tuple[ApiKey, ...]:
        """The keys a translation request must carry one of, with their limits; none: no key needed."""
        if not self.api_keys_file:
            return ()
        keys = parse_keys(_read(self.api_keys_file, "api_keys_file"), f"{flag('api_keys_file')}: {self.api_keys_file}")
        if not keys:
            raise ConfigError(f"{flag('api_keys_file')}: {self.api_keys_file} holds no key; put one key per line "
                              f"(or leave {flag('api_keys_file')} out to need none)")
        return keys

    def grpc_token(self) -> str:
        """The bearer token to send the gRPC server ("" = none)."""
        if not self.grpc_token_file:
            return ""
        return _token(self.grpc_token_file, "grpc_token_file")

    def metrics_token(self) -> str:
        """The bearer token /metrics needs ("" = none)."""
        return _token(self.metrics_token_file, "metrics_token_file") if self.metrics_token_file else ""


def env_name(field_name: str) -> str:
    return ENV_PREFIX + field_name.upper()


def _has_port(address: str) -> bool:
    """HOST:PORT with a port from 1 to 65535 ([::1]:50051 too), or a gRPC target URI (unix:, dns:///...)."""
    if address.startswith(("unix:", "unix-abstract:", "dns:", "ipv4:", "ipv6:")):
        return True
    _, sep, port = address.rpartition(":")
    return bool(sep) and port.isdigit() and 1 <= int(port) <= 65535


def _token(path: str, field_name: str) -> str:
    token = _read(path, field_name).strip()
    if not token or "\n" in token:
        raise ConfigError(f"{flag(field_name)}: {path} must hold the token on one line")
    return token


def _read(path: str, field_name: str) -> str:
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{flag(field_name)}: {path} is a directory; give a file")
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{flag(field_name)}: {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ConfigError(f"{flag(field_name)}: cannot read {path}: {reason}") from None


def build_parser() -> argparse.ArgumentParser:
    """The flags, one per field of GatewayConfig, with the field's help and default (and its
    environment variable). Flags default to None so that parse_args can tell a flag given
    from one left to the environment or the default."""
    p = ArgumentParser(prog="nmt-http", description="An HTTP gateway in front of nmt-serve: LibreTranslate's API "
                       "(POST /translate, GET /languages), a JSON API with every decoding option (POST "
                       "/v1/translate, GET /v1/models), health (/healthz, /readyz) and the web page (/).\n\n"
                       "  nmt-http --grpc-address 127.0.0.1:50051 --port 5000",
                       epilog="Every flag can also be set as an environment variable: --api-keys-file <-> "
                              "NMT_HTTP_API_KEYS_FILE; flags win. "
                              + exit_status_help(EXIT_FAILED, EXIT_USAGE, done="stopped by SIGTERM or Ctrl-C") + ".")
    _add_flags(p, GatewayConfig, env_name)
    deprecated_alias(p, "--beam-size", "--beam")  # --beam in every command
    return p


def parse_args(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> GatewayConfig:
    """The configuration from the flags and the environment; a bad value (or a secrets file
    that cannot be used) exits with status 2 and one line on stderr."""
    environ = os.environ if environ is None else environ
    p = build_parser()
    args = p.parse_args(argv)
    try:
        cfg = GatewayConfig(**_values(args, GatewayConfig, environ, env_name))
        cfg.api_keys()
        cfg.grpc_token()
        cfg.metrics_token()
    except ConfigError as e:
        p.error(str(e))
    return cfg
