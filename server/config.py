"""Server configuration: one frozen dataclass, set by flags or by the same names as
environment variables (``--max-batch-rows`` <-> ``NMT_MAX_BATCH_ROWS``); flags win."""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ServerConfig:
    model: tuple[str, ...] = ()  # "DIR" or "NAME=DIR"; the first is the default model
    host: str = "[::]"
    port: int = 50051
    device: str = "auto"  # auto | cuda | cpu
    threads: int = 0  # onnxruntime intra-op threads on the CPU; 0 = its default
    int8: bool = False  # CPU: serve the int8 graphs when the package has them
    # CPU: let onnxruntime's threads spin waiting for work. Off by default: in a server they
    # share the cores with gRPC and the event loop, and spinning threads starve those.
    spin_threads: bool = False
    metrics_port: int = 9090  # -1 disables the Prometheus exporter; 0 picks a free port
    metrics_host: str = "0.0.0.0"
    max_texts: int = 64  # texts per request
    max_chars: int = 4000  # characters per text
    max_tokens: int = 256  # source tokens per text (tag and eos included); capped by the model
    max_output_tokens: int = 256  # capped by the model
    max_beam: int = 8
    max_message_bytes: int = 4 * 1024 * 1024
    max_batch_rows: int = 64
    max_tokens_in_flight: int = 65536
    max_queue: int = 1024
    stream_window: int = 32  # requests of one stream decoded concurrently
    grace_seconds: float = 10.0  # SIGTERM: time for in-flight work to finish
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""  # set: clients must present a certificate signed by it (mutual TLS)
    auth_token: str = ""  # set: every RPC but health needs "authorization: Bearer <token>"
    auth_token_file: str = ""  # the token read from a file (a flag's value shows in the process list)
    max_concurrent_rpcs: int = 1024  # beyond it a call gets RESOURCE_EXHAUSTED at once (health included)
    log_level: str = "INFO"

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ConfigError("; ".join(problems))

    def problems(self) -> list[str]:
        """Every setting that would make the server start SERVING and then fail requests."""
        out = []
        at_least = {"port": 0, "threads": 0, "max_texts": 1, "max_chars": 1, "max_tokens": 3,
                    "max_output_tokens": 1, "max_beam": 1, "max_message_bytes": 1024, "max_batch_rows": 1,
                    "max_tokens_in_flight": 1, "max_queue": 1, "stream_window": 1, "max_concurrent_rpcs": 1}
        for name, low in at_least.items():
            if getattr(self, name) < low:
                out.append(f"{flag(name)} is {getattr(self, name)}; it must be at least {low}")
        if self.port > 65535:
            out.append(f"{flag('port')} is {self.port}; ports end at 65535")
        if not 0 <= self.grace_seconds < float("inf"):
            out.append(f"{flag('grace_seconds')} is {self.grace_seconds}; it must be 0 or more")
        if out:
            return out
        # Limits must agree, or requests within what ListModels advertises fail forever.
        if self.max_queue < self.max_texts:
            out.append(f"{flag('max_queue')} {self.max_queue} is smaller than {flag('max_texts')} "
                       f"{self.max_texts}: a request of more texts than the queue holds could never be accepted")
        if self.max_batch_rows < self.max_beam:
            out.append(f"{flag('max_batch_rows')} {self.max_batch_rows} is smaller than {flag('max_beam')} "
                       f"{self.max_beam}: a beam needs one row per hypothesis")
        biggest = self.max_beam * (self.max_tokens + self.max_output_tokens)
        if self.max_tokens_in_flight < biggest:
            out.append(f"{flag('max_tokens_in_flight')} {self.max_tokens_in_flight} is less than one text at the "
                       f"advertised limits needs ({flag('max_beam')} x ({flag('max_tokens')} + "
                       f"{flag('max_output_tokens')}) = {biggest})")
        if self.auth_token and self.auth_token_file:
            out.append(f"{flag('auth_token')} and {flag('auth_token_file')} are both set; give one")
        return out

    def bearer_token(self) -> str:
        """The token every RPC but health must carry ("" = none), from the flag, the
        environment or the file."""
        if not self.auth_token_file:
            return self.auth_token
        try:
            token = Path(self.auth_token_file).read_text().strip()
        except OSError as e:
            raise ConfigError(f"{flag('auth_token_file')}: cannot read {self.auth_token_file}: {e.strerror}") from None
        if not token:
            raise ConfigError(f"{flag('auth_token_file')}: {self.auth_token_file} is empty")
        return token

    def redacted(self) -> dict[str, Any]:
        """For the start-up log line: secrets are not logged."""
        d = dataclasses.asdict(self)
        if d["auth_token"]:
            d["auth_token"] = "***"
        return d


HELP = {
    "auth_token": "require 'authorization: Bearer TOKEN' on every RPC but health; a flag's value is visible "
                  "to every user of the machine in the process list: prefer NMT_AUTH_TOKEN or --auth-token-file",
    "auth_token_file": "read the bearer token from this file (surrounding whitespace is ignored)",
    "max_concurrent_rpcs": "calls handled at once; the excess gets RESOURCE_EXHAUSTED at once",
}


class ConfigError(ValueError):
    """A configuration the server must not start with; the message names every problem."""


def flag(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def env_name(field_name: str) -> str:
    return "NMT_" + field_name.upper()


def parse_args(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> ServerConfig:
    environ = dict(os.environ if environ is None else environ)
    defaults = ServerConfig()
    p = argparse.ArgumentParser(prog="nmt-serve", description="Serve model packages over gRPC.",
                                epilog="Every flag can also be set as an environment variable: --max-texts <-> "
                                       "NMT_MAX_TEXTS (NMT_MODEL takes several packages separated by commas).")
    for f in fields(ServerConfig):
        default = getattr(defaults, f.name)
        if f.name == "model":
            p.add_argument(flag(f.name), action="append", metavar="[NAME=]DIR",
                           help="a model package to serve (repeatable)")
        elif isinstance(default, bool):
            p.add_argument(flag(f.name), action=argparse.BooleanOptionalAction, default=None)
        else:
            p.add_argument(flag(f.name), type=type(default), default=None, metavar=f.name.upper(),
                           help=HELP.get(f.name))
    args = p.parse_args(argv)
    values: dict[str, Any] = {}
    for f in fields(ServerConfig):
        default = getattr(defaults, f.name)
        flag_value = getattr(args, f.name)
        env = environ.get(env_name(f.name))
        if f.name == "model":
            if flag_value:
                values["model"] = tuple(flag_value)
            elif env:
                values["model"] = tuple(x.strip() for x in env.split(",") if x.strip())
            continue
        if flag_value is not None:
            values[f.name] = flag_value
        elif env is not None:
            values[f.name] = _from_env(f.name, env, default)
    try:
        cfg = ServerConfig(**values)
    except ConfigError as e:
        p.error(str(e))
    if not cfg.model:
        p.error("no model: pass --model DIR (or set NMT_MODEL)")
    if cfg.device not in ("auto", "cuda", "cpu"):
        p.error(f"--device must be auto, cuda or cpu, not {cfg.device!r}")
    if bool(cfg.tls_cert) != bool(cfg.tls_key):
        p.error("--tls-cert and --tls-key go together")
    if cfg.tls_client_ca and not cfg.tls_cert:
        p.error("--tls-client-ca needs --tls-cert and --tls-key")
    return cfg


def _from_env(name: str, value: str, default: Any) -> Any:
    if isinstance(default, bool):
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off", ""):
            return False
        raise SystemExit(f"{env_name(name)}={value!r}: expected true or false")
    try:
        return type(default)(value)
    except ValueError:
        raise SystemExit(f"{env_name(name)}={value!r}: expected a {type(default).__name__}") from None
