"""Server configuration: one frozen dataclass, set by flags or by the same names as
environment variables (``--max-batch-rows`` <-> ``NMT_MAX_BATCH_ROWS``); flags win."""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass, fields
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
    log_level: str = "INFO"

    def redacted(self) -> dict[str, Any]:
        """For the start-up log line: secrets are not logged."""
        d = dataclasses.asdict(self)
        if d["auth_token"]:
            d["auth_token"] = "***"
        return d


def env_name(field_name: str) -> str:
    return "NMT_" + field_name.upper()


def parse_args(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> ServerConfig:
    environ = dict(os.environ if environ is None else environ)
    defaults = ServerConfig()
    p = argparse.ArgumentParser(prog="nmt-serve", description="Serve model packages over gRPC.",
                                epilog="Every flag can also be set as an environment variable: --max-texts <-> "
                                       "NMT_MAX_TEXTS (NMT_MODEL takes several packages separated by commas).")
    for f in fields(ServerConfig):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        if f.name == "model":
            p.add_argument(flag, action="append", metavar="[NAME=]DIR",
                           help="a model package to serve (repeatable)")
        elif isinstance(default, bool):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=None)
        else:
            p.add_argument(flag, type=type(default), default=None, metavar=f.name.upper())
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
    cfg = ServerConfig(**values)
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
