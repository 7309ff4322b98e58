"""Server configuration: one frozen dataclass, set by flags or by the same names as
environment variables (``--max-batch-rows`` <-> ``NMT_MAX_BATCH_ROWS``); flags win."""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from cli import EXIT_FAILED, EXIT_USAGE, GRPC_PORT, LOCALHOST, MAX_CONNECTIONS, ArgumentParser, exit_status_help
from cli.settings import LOG_LEVELS, ConfigError, Settings, flag, one_of, setting
from cli.settings import add_flags as _add_flags
from cli.settings import values as _values
from engine.defaults import DEVICES, INT8_GRAPHS, RESIDENT_MODES

SENTENCES_PER_TEXT = 16  # the automatic sentence limit per text (see max_sentences)
# The scheduler's limits (server/scheduler.py, SchedulerLimits), the defaults of their flags.
MAX_BATCH_ROWS = 64
MAX_TOKENS_IN_FLIGHT = 65536
MAX_QUEUE = 1024
# Rows of the batch while interactive work runs beside bulk work (server/scheduler.py): a step of 16
# rows takes 2.6x one of 4, a step of 64 rows 8.4x (int8, one thread, docs/BENCHMARKS.md).
INTERACTIVE_ROWS = 16
METRICS_PORT = 9090
# The graph variant served on the CPU, defined here once: the int8 graphs, which the README's
# scores and the quality gate (tests/test_default_model.py) measure; the model card quotes their
# distance from fp32 for the shipped model. On CUDA the fp16 graphs are served when the package
# has them, whatever this says.
INT8 = True
# The sentence cache (server/cache.py): its bound in bytes, and when it is used: auto = for models
# decoded batch-invariantly (on the CPU), where a cached answer equals a fresh one exactly.
CACHE_BYTES = 64 * 1024 * 1024
CACHE_MODES = ("auto", "on", "off")


@dataclass(frozen=True)
class ServerConfig(Settings):
    model: tuple[str, ...] = setting((), "a model to serve: DIR or NAME=DIR, the package directory nmt-export "
                                         "or nmt-import wrote; or a Hugging Face model, an id (owner/name, "
                                         "owner/name@revision) or its downloaded directory, converted once into "
                                         "--model-cache (repeatable; the first is the default model)")
    glossary: tuple[str, ...] = setting((), "a named glossary, NAME=FILE: a UTF-8 tab-separated file whose first line "
                                            "names its two languages (en<TAB>de) and whose other lines are "
                                            "SOURCE<TAB>TARGET; requests use it by glossary_name for that pair "
                                            "(repeatable; one NAME may have a file per pair)")
    model_cache: str = setting("", "where Hugging Face models given to --model are converted to packages, once per "
                                   "revision; empty: $XDG_CACHE_HOME/nmt/packages (~/.cache/nmt/packages)")
    import_languages: str = setting("", "Hugging Face models given to --model: the languages to convert them for, as "
                                        "nmt-import --languages (NLLB: en,de,fr or en=eng_Latn,...; OPUS-MT with "
                                        "several targets: the targets); empty: nmt-import's default")
    host: str = setting(LOCALHOST, "address to listen on: 127.0.0.1 for this machine only; 0.0.0.0 or [::] "
                                     "for every interface (in a container)")
    port: int = setting(GRPC_PORT, "gRPC port; 0 picks a free one")
    device: str = setting("auto", "auto (CUDA when it works, else the CPU with one warning), cuda or cpu")
    device_resident: str = setting("auto", "keep the caches on the device between decoder steps: auto (on CUDA, "
                                           "when the package has the step and rows graphs), on or off")
    threads: int = setting(0, "onnxruntime intra-op threads on the CPU; 0 = its default")
    int8: bool = setting(INT8, "CPU: serve the int8 graphs when the package has them (int8w8 where this CPU runs "
                               "8-bit weights exactly, else int8); --no-int8 serves the fp32 graphs. Every way of "
                               "serving (README's commands, scripts/run.sh, docker-compose, Kubernetes) uses this "
                               "default, so the same text gets the same translation")
    int8_graphs: str = setting("auto", "CPU, with --int8: which int8 graphs. auto: int8w8 (8-bit weights) where this "
                                       "CPU runs them exactly (VNNI or AMX), else int8 (7-bit); int8: the 7-bit "
                                       "ones on every CPU, so a fleet of mixed CPUs gives a text the same "
                                       "translation; int8w8: refused on a CPU without VNNI or AMX")
    shortlist: bool = setting(True, "CPU: score only the vocabulary shortlist of each batch when the package has "
                                    "one (python -m export.shortlist_graph adds it); --no-shortlist scores every "
                                    "piece")
    spin_threads: bool = setting(False, "CPU: let onnxruntime's threads spin waiting for work, between runs "
                                        "too. Off by default: they never spin, since gRPC's threads and the "
                                        "event loop need the cores during runs as well (engine/defaults.py)")
    cache: str = setting("auto", "the sentence cache: a sentence sent again with the same options is answered "
                                 "from memory. auto: on for models served on the CPU, whose answers do not depend on "
                                 "the batch, so a cached answer equals a fresh one exactly; off on CUDA, where that "
                                 "is not shown; on; off")
    cache_bytes: int = setting(CACHE_BYTES, "the sentence cache's size in bytes, shared by the models (least "
                                            "recently used out first); 0 turns it off")
    metrics_port: int = setting(METRICS_PORT, f"port of the Prometheus exporter; -1 turns it off; 0 picks a free "
                                              f"one. When the default, {METRICS_PORT}, is taken (a second "
                                              f"nmt-serve on this machine), the server starts without metrics "
                                              f"and says so; another port given here must be free")
    metrics_host: str = setting(LOCALHOST, "address the Prometheus exporter listens on (0.0.0.0: every "
                                             "interface)")
    max_texts: int = setting(64, "texts per request")
    max_sentences: int = setting(0, "sentences per request, after texts are split into sentences; 0: "
                                    "16 per text, at most the queue")
    max_chars: int = setting(4000, "characters per text")
    max_tokens: int = setting(256, "source tokens per text (tag and eos included); capped by the model")
    max_output_tokens: int = setting(256, "output tokens per text; capped by the model")
    max_beam: int = setting(8, "the largest beam size a request may ask for")
    max_message_bytes: int = setting(4 * 1024 * 1024, "the largest gRPC message, request or response, in bytes")
    max_batch_rows: int = setting(MAX_BATCH_ROWS, "rows (texts x beams) decoded together in one step")
    max_tokens_in_flight: int = setting(MAX_TOKENS_IN_FLIGHT, "source and output tokens held by the batch at once")
    max_queue: int = setting(MAX_QUEUE, "texts waiting to join the batch; beyond it a request gets "
                                   "RESOURCE_EXHAUSTED at once")
    interactive_rows: int = setting(INTERACTIVE_ROWS, "rows of the batch while interactive work runs beside bulk "
                                                      "work: bulk texts above it are suspended (kept, not "
                                                      "recomputed) until the interactive work is done; 0: never")
    stream_window: int = setting(32, "requests of one stream decoded concurrently")
    lameduck_seconds: float = setting(0.0, "on SIGTERM, first keep accepting work this long while health "
                                            "says NOT_SERVING, so balancers that re-resolve names or probe "
                                            "health (nginx here: every 5 s) stop sending before new work is "
                                            "refused; then the drain's grace starts")
    grace_seconds: float = setting(10.0, "on SIGTERM, time for in-flight work to finish")
    tls_cert: str = setting("", "the server's certificate (PEM): serve with TLS (with --tls-key)")
    tls_key: str = setting("", "the private key of --tls-cert (PEM)")
    tls_client_ca: str = setting("", "a CA certificate (PEM): clients must present a certificate signed by it "
                                     "(mutual TLS)")
    auth_token: str = setting("", "require 'authorization: Bearer TOKEN' on every RPC but health; a flag's value "
                                  "is visible to every user of the machine in the process list: prefer "
                                  "NMT_AUTH_TOKEN or --auth-token-file")
    auth_token_file: str = setting("", "read the bearer token from this file (surrounding whitespace is ignored)")
    max_concurrent_rpcs: int = setting(1024, "translation calls (Translate and TranslateStream) handled at once; "
                                             "the excess gets RESOURCE_EXHAUSTED at once. Health is not counted: "
                                             "it always answers")
    max_streams: int = setting(256, "TranslateStream calls open at once (within --max-concurrent-rpcs); the "
                                    "excess gets RESOURCE_EXHAUSTED at once")
    stream_idle_seconds: float = setting(60.0, "a stream with no request in flight that sends nothing for this "
                                               "long is closed (DEADLINE_EXCEEDED), so idle clients cannot "
                                               "hold every call")
    max_connections: int = setting(MAX_CONNECTIONS, "TCP connections to the gRPC port open at once; one beyond it is "
                                         "closed at once")
    handshake_seconds: float = setting(10.0, "time a new connection has to complete its TLS and HTTP/2 "
                                             "handshake; one that sends nothing is closed after it")
    max_connection_age_seconds: float = setting(0.0, "close each client connection after this long (gracefully: "
                                                     "calls in flight finish within --grace-seconds); clients "
                                                     "reconnect and resolve the address again, so replicas added "
                                                     "behind one DNS name (a Kubernetes headless Service) get "
                                                     "traffic; 0: never")
    log_level: str = setting("INFO", "DEBUG, INFO, WARNING or ERROR")

    def problems(self) -> list[str]:
        """Every setting that would make the server start SERVING and then fail requests."""
        out = []
        at_least = {"port": 0, "threads": 0, "max_texts": 1, "max_chars": 1, "max_tokens": 3,
                    "max_output_tokens": 1, "max_beam": 1, "max_message_bytes": 1024, "max_batch_rows": 1,
                    "max_tokens_in_flight": 1, "max_queue": 1, "interactive_rows": 0, "stream_window": 1,
                    "max_concurrent_rpcs": 1, "max_streams": 1, "max_connections": 1}
        for name, low in at_least.items():
            if getattr(self, name) < low:
                out.append(f"{flag(name)} is {getattr(self, name)}; it must be at least {low}")
        for name in ("port", "metrics_port"):
            if getattr(self, name) > 65535:
                out.append(f"{flag(name)} is {getattr(self, name)}; ports end at 65535")
        if self.metrics_port < -1:
            out.append(f"{flag('metrics_port')} is {self.metrics_port}; give a port, 0 for a free one or -1 for none")
        for name in ("grace_seconds", "lameduck_seconds"):
            if not 0 <= getattr(self, name) < float("inf"):
                out.append(f"{flag(name)} is {getattr(self, name)}; it must be 0 or more")
        if not 0 <= self.max_connection_age_seconds < float("inf"):
            out.append(f"{flag('max_connection_age_seconds')} is {self.max_connection_age_seconds}; it must be 0 "
                       f"(never) or a number of seconds")
        for name in ("stream_idle_seconds", "handshake_seconds"):
            if not 0 < getattr(self, name) < float("inf"):
                out.append(f"{flag(name)} is {getattr(self, name)}; it must be a number of seconds above 0")
        for spec in self.model:
            name, sep, directory = spec.partition("=")
            if sep and not name.strip():
                out.append(f"{flag('model')} {spec!r}: the name before '=' is empty; give NAME=DIR, or DIR alone "
                           f"(named after the directory)")
            elif not (directory if sep else spec).strip():
                out.append(f"{flag('model')} {spec!r}: no directory; give NAME=DIR or DIR")
        out += one_of("device", self.device, DEVICES)
        out += one_of("device_resident", self.device_resident, RESIDENT_MODES)
        out += one_of("cache", self.cache, CACHE_MODES)
        out += one_of("int8_graphs", self.int8_graphs, INT8_GRAPHS)
        if not self.int8 and self.int8_graphs != "auto":
            out.append(f"{flag('int8_graphs')} {self.int8_graphs} chooses int8 graphs, but {flag('int8')} is off")
        if self.cache_bytes < 0:
            out.append(f"{flag('cache_bytes')} is {self.cache_bytes}; give a size in bytes, or 0 to turn the cache off")
        out += one_of("log_level", self.log_level, LOG_LEVELS, any_case=True)
        for name in ("host", "metrics_host"):
            if not getattr(self, name).strip():
                out.append(f"{flag(name)} is empty; give an address such as 127.0.0.1")
        if bool(self.tls_cert) != bool(self.tls_key):
            out.append(f"{flag('tls_cert')} and {flag('tls_key')} go together")
        if self.tls_client_ca and not self.tls_cert:
            out.append(f"{flag('tls_client_ca')} needs {flag('tls_cert')} and {flag('tls_key')}")
        if out:
            return out
        # Limits must agree, or requests within what ListModels advertises fail forever.
        if self.max_queue < self.max_texts:
            out.append(f"{flag('max_queue')} {self.max_queue} is smaller than {flag('max_texts')} "
                       f"{self.max_texts}: a request of more texts than the queue holds could never be accepted")
        if self.max_sentences and not self.max_texts <= self.max_sentences <= self.max_queue:
            out.append(f"{flag('max_sentences')} {self.max_sentences} must be between {flag('max_texts')} "
                       f"{self.max_texts} and {flag('max_queue')} {self.max_queue}: each text is one sentence "
                       f"at least, and a request's sentences wait in the queue together")
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

    @property
    def sentences_per_request(self) -> int:
        """The sentence limit in force: --max-sentences, or 16 per text within the queue."""
        return self.max_sentences or min(self.max_texts * SENTENCES_PER_TEXT, self.max_queue)

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


def env_name(field_name: str) -> str:
    return "NMT_" + field_name.upper()


def build_parser() -> argparse.ArgumentParser:
    """The flags, one per field of ServerConfig, with the field's help and default (and its
    environment variable). Flags default to None so that parse_args can tell a flag given
    from one left to the environment or the default."""
    p = ArgumentParser(prog="nmt-serve", description="Serve model packages (the directories nmt-export writes) "
                       "over gRPC.\n\n  nmt-serve --model packages/default --port 50051 --device auto",
                       epilog="Every flag can also be set as an environment variable: --max-texts <-> "
                              "NMT_MAX_TEXTS (NMT_MODEL takes several packages separated by commas); flags win. "
                              + exit_status_help(EXIT_FAILED, EXIT_USAGE, done="stopped by SIGTERM or Ctrl-C, "
                                                 "after draining") + ".")
    [model] = [f for f in fields(ServerConfig) if f.name == "model"]
    p.add_argument(flag("model"), action="append", metavar="[NAME=]DIR",
                   help=f"{model.metadata['help']} (default: none; ${env_name('model')})")
    [glossary] = [f for f in fields(ServerConfig) if f.name == "glossary"]
    p.add_argument(flag("glossary"), action="append", metavar="NAME=FILE",
                   help=f"{glossary.metadata['help']} (default: none; ${env_name('glossary')}, comma-separated)")
    _add_flags(p, ServerConfig, env_name, skip=("model", "glossary"))
    return p


def parse_args(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> ServerConfig:
    environ = os.environ if environ is None else environ
    p = build_parser()
    args = p.parse_args(argv)
    try:
        values = _values(args, ServerConfig, environ, env_name, skip=("model", "glossary"))
        if args.glossary:
            values["glossary"] = tuple(args.glossary)
        elif environ.get(env_name("glossary")):
            values["glossary"] = tuple(x.strip() for x in environ[env_name("glossary")].split(",") if x.strip())
        if args.model:
            values["model"] = tuple(args.model)
        elif environ.get(env_name("model")):
            values["model"] = tuple(x.strip() for x in environ[env_name("model")].split(",") if x.strip())
        cfg = ServerConfig(**values)
    except ConfigError as e:
        p.error(str(e))
    if not cfg.model:
        p.error("no model: pass --model DIR, a package written by nmt-export, or --model OWNER/NAME, a Hugging Face "
                "model id (or set NMT_MODEL)")
    return cfg
