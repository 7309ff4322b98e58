"""``nmt-serve``: load model packages, warm up, serve gRPC; SIGTERM drains.

    nmt-serve --model packages/small-ende --port 50051 --device auto --metrics-port 9090

``build_server(cfg)`` does everything but wait, so tests run the server in-process on
port 0; ``main()`` adds the command line, logging and signal handling.
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import json
import logging
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

from cli import EXIT_FAILED, EXIT_USAGE, parse_direction
from engine.decoding import DecodeOptions, Job, StopReason, decode_all
from engine.defaults import SERVER_SPIN, SPIN_ASKED, default_max_len
from engine.package import ModelPackage, PackageError
from engine.runtime import DeviceError, Runtime, RuntimeOptions
from nmt.v1 import translator_pb2 as pb
from nmt.v1 import translator_pb2_grpc as pb_grpc
from server import cache
from server.config import METRICS_PORT, ServerConfig, flag, parse_args
from server.glossary import load_named
from server.metrics import Metrics
from server.model_source import default_name, package_directory
from server.scheduler import Scheduler, SchedulerLimits
from server.service import LoadedModel, RequestLimits, TranslatorService, tolerant

log = logging.getLogger("nmt.server")
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Translator"].full_name  # "nmt.v1.Translator"
OPEN_METHODS = ("/grpc.health.v1.Health/", "/grpc.reflection.")  # reachable without the bearer token
WARM_UP_TEXT = "Thank you."  # what warm-up translates in every pair
HEALTH_CALLS = 64  # calls grpc admits beyond --max-concurrent-rpcs: room kept for health and reflection
REFUSAL_WINDOW = 0.25  # seconds a draining server refuses new calls itself before grpc stops (drain)


@dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    metrics_port: int | None
    service: TranslatorService
    health: health_aio.HealthServicer
    models: dict[str, LoadedModel]

    async def drain(self, grace: float, lameduck: float = 0.0) -> None:
        """Health NOT_SERVING at once; new work is still accepted for ``lameduck`` seconds
        (balancers that only re-resolve names need that long to stop sending it here), then
        refused with UNAVAILABLE; in-flight work finishes (within ``grace`` seconds); what has
        not finished by then ends UNAVAILABLE, so its clients retry elsewhere; then the
        server stops."""
        await self.health.enter_graceful_shutdown()
        if lameduck > 0:
            await asyncio.sleep(lameduck)
        self.service.draining = True
        deadline = time.monotonic() + grace
        # Calls already on their way when the draining began reach a handler in this window and
        # are refused with UNAVAILABLE; grpc's stop would end those not yet handed to a handler
        # CANCELLED, which a client cannot tell from its own cancelling and must not retry.
        await asyncio.sleep(min(REFUSAL_WINDOW, grace))
        while self.service.active and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if self.service.active:
            await self.service.stop_calls()
        await self.server.stop(max(0.0, deadline - time.monotonic()))
        await self.service.metrics.close()
        for m in self.models.values():
            m.scheduler.stop()


def load_models(cfg: ServerConfig, metrics: Metrics) -> dict[str, LoadedModel]:
    models: dict[str, LoadedModel] = {}
    spin = SPIN_ASKED if cfg.spin_threads else SERVER_SPIN
    for spec in cfg.model:
        name, sep, directory = spec.partition("=")
        if not sep:
            name, directory = default_name(spec), spec
        if name in models:
            raise ValueError(f"two models are named {name!r}; name them with NAME=DIR")
        # A Hugging Face model id or directory: the package converted from it (once, in a child process).
        directory = package_directory(directory, cfg.model_cache, cfg.import_languages, name)
        package = ModelPackage.load(directory)
        try:
            runtime = Runtime(package, RuntimeOptions(cfg.device, cfg.threads, cfg.int8, spin=spin,
                                                      resident=cfg.device_resident, shortlist=cfg.shortlist,
                                                      int8_graphs=cfg.int8_graphs))
            tokenizer = package.load_tokenizer()
        except DeviceError as e:  # the GPU was asked for and cannot be used: the reason is the message
            raise StartupError(f"model {name} ({package.path}) does not load: {e}") from None
        except Exception as e:  # a graph or tokenizer that does not load, whatever the library raises
            raise StartupError(f"model {name} ({package.path}) does not load: {first_line(e)}") from None
        limits = SchedulerLimits(cfg.max_batch_rows, cfg.max_tokens_in_flight, cfg.max_queue,
                                 interactive_rows=cfg.interactive_rows)
        scheduler = Scheduler(runtime, limits, metrics, name)
        models[name] = LoadedModel(name, package, tokenizer, scheduler, RequestLimits.of(cfg, package))
        models[name].longest_piece_bytes  # noqa: B018  (computed once, before requests need it)
        protected = models[name].protector.enabled  # one Protector per model, built with its tokenizer
        metrics.model_device.labels(name, runtime.device, runtime.variant, str(runtime.resident).lower()).set(1)
        log.info("model %s: %s (%s), %s", name, package.path, ", ".join(package.pairs), placement(runtime, cfg))
        log.debug("model %s: providers %s; caches %s; placeholders %s; sentence cache %s%s", name,
                  ", ".join(runtime.providers),
                  f"resident on {runtime.device}" if runtime.resident else "in host memory",
                  "on" if protected else "off (the tokenizer has no <ph1>..<ph12>)",
                  "on" if cache.used(cfg.cache, cfg.cache_bytes, runtime) else "off",
                  f"; CUDA not used: {runtime.fallback_reason}" if runtime.fallback_reason else "")
    return models


def placement(runtime: Runtime, cfg: ServerConfig) -> str:
    """Where and how a model runs, in words: "int8w8 graphs on the CPU (2 threads)"."""
    if runtime.device == "cuda":
        return f"{runtime.variant} graphs on the GPU (CUDA)"
    threads = f"{cfg.threads} thread{'s' if cfg.threads != 1 else ''}" if cfg.threads else "onnxruntime's threads"
    return f"{runtime.variant} graphs on the CPU ({threads})"


class StartupError(Exception):
    """The server cannot serve what it was given; the message says what and where."""


def warm_up(model: LoadedModel) -> None:
    """A real decode through both graphs, greedy and beam, for every pair, before the server
    reports SERVING: a package whose graphs do not match its model.json fails here, with
    one clear line, rather than on every request of one pair later. Then a greedy translation
    per pair with the usual length bound. When none of them ends (eos), the model translates
    badly, which is not the server's to refuse: it serves, after a warning with the likely
    causes (an undertrained model; an eos id it was not trained with)."""
    package, special = model.package, model.package.special_ids
    ended = []
    for pair in package.pairs:
        source, target = parse_direction(pair)
        src = package.source_ids(model.tokenizer.encode(WARM_UP_TEXT), target, source)
        ids = {"bos": special["bos"], "eos": special["eos"], "pad": special["pad"],
               "prefix": package.target_prefix(target)}
        for beam, max_len in ((1, 4), (2, 4), (1, default_max_len(len(src), package.max_target_tokens))):
            try:
                [hyps] = decode_all(model.scheduler.rt, [Job(src, DecodeOptions(beam_size=beam), max_len=max_len,
                                                             **ids)])
            except Exception as e:
                raise StartupError(f"model {model.name} ({package.path}) fails a {pair} decode with beam "
                                   f"{beam}: {first_line(e)}") from None
            if not hyps:
                raise StartupError(f"model {model.name}: the {pair} warm-up decode gave no hypothesis")
        if hyps[0].stop_reason == StopReason.END_OF_SENTENCE:
            ended.append(pair)
    if not ended:
        log.warning(never_ends(model))


def never_ends(model: LoadedModel) -> str:
    """The warning for a model none of whose warm-up translations ended."""
    package = model.package
    step = package.provenance.get("step")
    trained = f" (trained {step} steps)" if isinstance(step, int) else ""
    return (f"model {model.name} ({package.path}): no warm-up translation of {WARM_UP_TEXT!r} ended: each ran to its "
            f"length limit without the end-of-sentence id (special_ids.eos {package.special_ids['eos']}), so its "
            f"translations will run on to the output-length limit. Serving it anyway. Likely causes: the model is "
            f"undertrained{trained}: train it longer; or model.json's special ids do not match the checkpoint: "
            f"export it again")


# What start-up raises for what it was given: one "cannot start" line and exit 2.
STARTUP_ERRORS = (PackageError, StartupError, ValueError, OSError)


def first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:500]


class TolerantRequests(grpc.aio.ServerInterceptor):
    """Translator requests that are not valid protobuf reach the handler as ``Malformed``
    (answered INVALID_ARGUMENT, counted, logged in one rate-limited line) instead of
    failing in grpc's deserializer (UNKNOWN, an 8-line traceback per call, and the end of a
    stream with the work it had accepted)."""

    def __init__(self) -> None:
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}  # per method: built once, not per call

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)
        service, _, method = details.method.strip("/").partition("/")
        if handler is None or service != SERVICE_NAME or handler.request_deserializer is None:
            return handler
        if details.method not in self._wrapped:
            message_type = pb.DESCRIPTOR.services_by_name["Translator"].methods_by_name[method].input_type.full_name
            self._wrapped[details.method] = _handler_like(
                handler, handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream,
                tolerant(handler.request_deserializer, message_type))
        return self._wrapped[details.method]


def _handler_like(handler, behaviour, request_deserializer):
    """A method handler of ``handler``'s kind with another behaviour and deserializer."""
    kinds = {(False, False): grpc.unary_unary_rpc_method_handler,
             (True, False): grpc.stream_unary_rpc_method_handler,
             (False, True): grpc.unary_stream_rpc_method_handler,
             (True, True): grpc.stream_stream_rpc_method_handler}
    make = kinds[(handler.request_streaming, handler.response_streaming)]
    return make(behaviour, request_deserializer=request_deserializer, response_serializer=handler.response_serializer)


class TokenAuth(grpc.aio.ServerInterceptor):
    """Every RPC except health and reflection needs ``authorization: Bearer <token>``."""

    def __init__(self, token: str) -> None:
        self.expected = token.encode()

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)
        if handler is None or details.method.startswith(OPEN_METHODS):
            return handler
        given = str(dict(details.invocation_metadata or ()).get("authorization", "")).strip()
        scheme, _, token = given.partition(" ")
        # The scheme is case-insensitive (RFC 9110 11.1): "bearer TOKEN" is as good as "Bearer TOKEN".
        if hmac.compare_digest(token.strip().encode(), self.expected) and scheme.lower() == "bearer":
            return handler

        async def deny(request_or_iterator, context):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")

        async def deny_stream(request_or_iterator, context):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
            yield  # pragma: no cover  (makes this an async generator)

        # The body of a call that is refused is never parsed (no deserializer: raw bytes).
        return _handler_like(handler, deny_stream if handler.response_streaming else deny, None)


def _listen(server: grpc.aio.Server, cfg: ServerConfig) -> int:
    """Bind the gRPC port (with TLS when configured); StartupError says why it cannot."""
    address = f"{cfg.host}:{cfg.port}"
    creds = None
    if cfg.tls_cert:
        client_ca = _read(cfg.tls_client_ca, "tls_client_ca") if cfg.tls_client_ca else None
        creds = grpc.ssl_server_credentials([(_read(cfg.tls_key, "tls_key"), _read(cfg.tls_cert, "tls_cert"))],
                                            root_certificates=client_ca, require_client_auth=client_ca is not None)
    # Binding a test socket first finds the reason (grpc says only "Failed to bind to address")
    # and keeps grpc's own multi-line log of the failure off the terminal.
    if cfg.port and (error := bind_error(cfg.host, cfg.port)):
        raise StartupError(cannot_listen("gRPC", cfg.host, cfg.port, error))
    try:
        return server.add_secure_port(address, creds) if creds else server.add_insecure_port(address)
    except RuntimeError:  # lost a race for the port, or something the test socket did not meet
        raise StartupError(cannot_listen("gRPC", cfg.host, cfg.port, bind_error(cfg.host, cfg.port))) from None


def _read(path: str, field_name: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise StartupError(f"{flag(field_name)} {path}: cannot read it: {e.strerror}") from None


def bind_error(host: str, port: int) -> OSError | None:
    """What binding ``host:port`` runs into when no address it resolves to can be bound, as grpc
    fails (None: one can; the failure was something else)."""
    try:
        infos = socket.getaddrinfo(host.strip("[]") or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        return e
    errors: list[OSError] = []
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as grpc and http.server do
            try:
                s.bind(sockaddr)
            except OSError as e:
                errors.append(e)
    if not errors or len(errors) < len(infos):
        return None
    return next((e for e in errors if e.errno == errno.EADDRINUSE), errors[0])


def cannot_listen(what: str, host: str, port: int, error: OSError | None) -> str:
    """One line: which address could not be bound, why, and what to change."""
    port_flag, host_flag = ("--port", "--host") if what == "gRPC" else ("--metrics-port", "--metrics-host")
    head = f"cannot listen for {what} on {host}:{port}"
    if isinstance(error, socket.gaierror) or (error and error.errno == errno.EADDRNOTAVAIL):
        return (f"{head}: {host} is not an address of this machine; pass {host_flag} 127.0.0.1 (this machine "
                f"only) or {host_flag} 0.0.0.0 (every interface)")
    if error and error.errno == errno.EADDRINUSE:
        off = " or -1 to turn metrics off" if what == "metrics" else ""
        return (f"{head}: the port is already in use (another nmt-serve?); stop that process or pass another "
                f"{port_flag} (0 picks a free port{off})")
    if error and error.errno == errno.EACCES:
        return f"{head}: permission denied (ports below 1024 need privileges); pass another {port_flag}"
    return f"{head}: {error.strerror if error and error.strerror else error or 'grpc could not bind it'}"


async def build_server(cfg: ServerConfig) -> RunningServer:
    """Bind and start with health NOT_SERVING, load and warm up the models, then SERVING.

    A package that fails to load stops the server and raises (a clear start-up error)."""
    glossaries = load_named(cfg.glossary)  # a malformed file stops the start-up before anything is bound
    for name, pairs in glossaries.items():
        log.info("glossary %s: %s", name, ", ".join(f"{pair} ({len(g)} terms)" for pair, g in pairs.items()))
    metrics = Metrics()
    options = [("grpc.max_receive_message_length", cfg.max_message_bytes),
               ("grpc.max_send_message_length", cfg.max_message_bytes),
               ("grpc.so_reuseport", 0),
               # Idle or half-open TCP connections must not take the port: a cap, and a deadline for the
               # handshake (grpc's default is 120 s; it also closes a connection that sends no HTTP/2 settings).
               ("grpc.max_allowed_incoming_connections", cfg.max_connections),
               ("grpc.server_handshake_timeout_ms", int(cfg.handshake_seconds * 1000))]
    if cfg.max_connection_age_seconds > 0:
        # GOAWAY after the age, then the grace for calls in flight: the client opens a new connection
        # and re-resolves its target, which is how replicas behind one DNS name share the load.
        options += [("grpc.max_connection_age_ms", int(cfg.max_connection_age_seconds * 1000)),
                    ("grpc.max_connection_age_grace_ms", int(cfg.grace_seconds * 1000))]
    token = cfg.bearer_token()
    # The token check comes first, so that a refused call's body is not even parsed.
    interceptors = [*([TokenAuth(token)] if token else []), TolerantRequests()]
    # grpc's own cap sits above ours by HEALTH_CALLS: translation calls beyond
    # --max-concurrent-rpcs are refused by the servicer, so health always finds room.
    server = grpc.aio.server(options=options, interceptors=interceptors,
                             maximum_concurrent_rpcs=cfg.max_concurrent_rpcs + HEALTH_CALLS)
    health = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    for name in ("", SERVICE_NAME):
        await health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    service = TranslatorService({}, cfg, metrics)  # answers UNAVAILABLE until the models are in
    service.glossaries = glossaries
    pb_grpc.add_TranslatorServicer_to_server(service, server)
    reflection.enable_server_reflection((SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                                         reflection.SERVICE_NAME), server)
    port = _listen(server, cfg)
    try:
        metrics_port = await metrics.serve(cfg.metrics_port, cfg.metrics_host) if cfg.metrics_port >= 0 else None
    except OSError as e:
        if e.errno != errno.EADDRINUSE or cfg.metrics_port != METRICS_PORT:
            await server.stop(None)  # releases the gRPC port it bound
            raise StartupError(cannot_listen("metrics", cfg.metrics_host, cfg.metrics_port, e)) from None
        # The default port, taken: most likely a second server on this machine, which should not fail
        # for want of metrics (any other port must be free: the error above).
        log.warning("no metrics: the default metrics port %s:%d is already in use (another nmt-serve?); pass "
                    "--metrics-port PORT to export them there (0 picks a free port), or --metrics-port -1 to go "
                    "without them and without this warning", cfg.metrics_host, cfg.metrics_port)
        metrics_port = None
    await server.start()
    try:
        models = await asyncio.to_thread(load_models, cfg, metrics)
        for m in models.values():
            await asyncio.to_thread(warm_up, m)
        for m in models.values():
            m.scheduler.start()
    except BaseException:
        await server.stop(None)
        await metrics.close()
        raise
    service.set_models(models)
    for name in ("", SERVICE_NAME):
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    return RunningServer(server, port, metrics_port, service, health, models)


def host_port(host: str, port: int) -> str:
    """``127.0.0.1:50051``, ``[::]:50051``."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


# Signals that stop the server by draining. SIGHUP (the terminal or SSH session that started it
# went away) drains too: its default would kill the process at once, failing the calls in flight.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


async def serve(cfg: ServerConfig) -> int:
    started = time.monotonic()
    try:
        running = await build_server(cfg)
    except STARTUP_ERRORS:
        raise
    except Exception as e:  # a port in use, a provider that does not start: one line, not a traceback
        raise StartupError(first_line(e)) from None
    scheme = " with TLS" if cfg.tls_cert else ""
    metrics = f"metrics at http://{host_port(cfg.metrics_host, running.metrics_port)}/metrics" \
        if running.metrics_port is not None else "metrics off"
    log.info("serving %s on %s (gRPC%s; %s), ready in %.1fs", ", ".join(running.models),
             host_port(cfg.host, running.port), scheme, metrics, time.monotonic() - started)
    stop = asyncio.Event()
    received: list[str] = []
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig.name)
        stop.set()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    await stop.wait()
    if cfg.lameduck_seconds > 0:
        log.info("%s received: NOT_SERVING, still accepting work for %gs, then draining (grace %.0fs)",
                 received[0], cfg.lameduck_seconds, cfg.grace_seconds)
    else:
        log.info("%s received: draining (grace %.0fs)", received[0], cfg.grace_seconds)
    await running.drain(cfg.grace_seconds, cfg.lameduck_seconds)
    log.info("stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    level = cfg.log_level.upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if level == "INFO":
        # The engine's notes (the CUDA provider a CPU install lacks, ...) are details: the server's
        # own lines say what runs where. Its warnings still show.
        logging.getLogger("nmt.engine").setLevel(logging.WARNING)
    log.debug("configuration: %s", json.dumps(cfg.redacted(), sort_keys=True))
    try:
        return asyncio.run(serve(cfg))
    except STARTUP_ERRORS as e:
        log.error("cannot start: %s", e)
        return EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C before the models were in (after that, SIGINT drains)
        log.error("interrupted while starting")
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
