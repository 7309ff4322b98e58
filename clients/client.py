"""A client library for the ``nmt.v1.Translator`` service, blocking and asyncio.

    from clients.client import TranslatorClient

    with TranslatorClient(["127.0.0.1:50051", "127.0.0.1:50052"]) as client:
        [t] = client.translate(["Jesus wept."], "en", "de", beam_size=4)
        print(t.text)

Both clients balance calls round-robin over the addresses they are given and put a deadline
on every call (``timeout``, retries included). UNAVAILABLE and RESOURCE_EXHAUSTED (a server
restarting, draining or busy) are retried, each retry on the next address, with capped
exponential backoff and jitter (:class:`RetryPolicy`: 0.1 s doubling up to 2 s) for as long
as the call's deadline allows, so a server restart of a few seconds is ridden out; a policy
may also cap the number of attempts (``RetryPolicy(attempts=1)``, :data:`NO_RETRY`, turns
retries off), and ``on_retry(error, delay)``, if given, hears of each retry. The channels
reconnect at least every second while a server is away, so a call gets through soon after it
is back. Every other failure, and a retryable one that used up its deadline or its attempts,
raises :class:`TranslationError` carrying the gRPC status code, the server's message and the
number of attempts. Streams (``translate_stream``) are not retried: a request that fails
comes back as its own error, in band, and a broken stream raises.

A server answers ListModels from the moment it listens, with no model until its models are
loaded and warmed up; ``ready_models`` waits for them (within its timeout), which is what a
command started right after its server needs before it checks the language pair.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import itertools
import random
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from cli import GRPC_ADDRESS, LB_POLICY
from engine.defaults import BEAM_SIZE
from nmt.v1 import translator_pb2 as pb
from nmt.v1 import translator_pb2_grpc as pb_grpc

RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})
DEFAULT_ADDRESS = GRPC_ADDRESS
# How long a command waits for a server it has not reached yet (a wrong port, a host that does not
# resolve): long enough for a server that is starting, short of the minutes a restart is ridden out.
FIRST_CONTACT_SECONDS = 5.0
LOADING_POLL_SECONDS = 0.2  # how often ready_models asks a server that is still loading


class StopReason(enum.Enum):
    """Why decoding stopped (``nmt.v1.StopReason``)."""

    UNSPECIFIED = pb.STOP_REASON_UNSPECIFIED  # nothing was decoded: an empty or blank text
    END_OF_SENTENCE = pb.STOP_REASON_END_OF_SENTENCE
    LENGTH_LIMIT = pb.STOP_REASON_LENGTH_LIMIT  # may be cut short: raise max_output_tokens


@dataclass(frozen=True)
class Hypothesis:
    text: str
    score: float = 0.0  # with return_scores
    num_tokens: int = 0  # target tokens, without the end-of-sentence token
    source_pieces: tuple[str, ...] = ()  # with return_attention: the source as the model saw it
    target_pieces: tuple[str, ...] = ()
    attention: tuple[tuple[float, ...], ...] = ()  # [target piece][source piece]
    stop_reason: StopReason = StopReason.UNSPECIFIED


@dataclass(frozen=True)
class Segment:
    """One sentence of a text (the server splits texts into sentences) and its translations."""

    source: str  # the sentence as it stands in the text: text[start:end]
    start: int  # offsets in the text, in Unicode code points (Python str indices)
    end: int
    hypotheses: tuple[Hypothesis, ...]  # best first, with pieces and attention when asked for

    @property
    def text(self) -> str:
        return self.hypotheses[0].text if self.hypotheses else ""


@dataclass(frozen=True)
class Translation:
    hypotheses: tuple[Hypothesis, ...]  # the whole text, best first (its sentences' translations in their places)
    segments: tuple[Segment, ...] = ()  # its sentences, in order; none for a blank text

    @property
    def text(self) -> str:
        return self.hypotheses[0].text if self.hypotheses else ""

    @property
    def length_limited(self) -> bool:
        """Did the best translation stop at the output-length limit (in any of its sentences)?"""
        return bool(self.hypotheses) and self.hypotheses[0].stop_reason is StopReason.LENGTH_LIMIT


class TranslationError(Exception):
    """A call that failed for good: the status code, the server's message, and how many attempts it took."""

    def __init__(self, code: grpc.StatusCode, details: str, attempts: int = 1) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
        self.attempts = attempts

    @classmethod
    def from_rpc(cls, error: grpc.RpcError, attempts: int = 1) -> TranslationError:
        code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
        details = error.details() if hasattr(error, "details") else str(error)
        return cls(code or grpc.StatusCode.UNKNOWN, details or "", attempts)


class NotReady(TranslationError):
    """The server answers but had not loaded its models when the time to wait for them ran out."""

    def __init__(self, waited: float) -> None:
        super().__init__(grpc.StatusCode.UNAVAILABLE, f"the server is still loading its models (waited {waited:g} s "
                                                      "for it to be ready)")


# What grpc says when the address answers in HTTP/1.x instead of HTTP/2 (an HTTP server: the gateway,
# a metrics port, a web server): "Trying to connect an http1.x server", or the failed parse of its
# answer as HTTP/2 frames.
HTTP1_HINTS = ("http1.x server", "Expected SETTINGS frame as the first frame")
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def speaks_http1(address: str, timeout: float = 2.0) -> bool:
    """Whether ``address`` (HOST:PORT) answers the HTTP/2 preface as an HTTP/1.x server does
    ("HTTP/1.1 400 ..."); a gRPC server answers with HTTP/2 frames. False when it cannot be reached."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as s:
            s.sendall(HTTP2_PREFACE)
            return s.recv(16).startswith(b"HTTP/1.")
    except (OSError, ValueError):
        return False


@dataclass(frozen=True)
class RetryPolicy:
    """When to retry UNAVAILABLE and RESOURCE_EXHAUSTED: until the call's deadline, after a
    capped exponential backoff with jitter (each wait is 50-100% of ``initial_backoff *
    multiplier ** (n - 1)``, at most ``max_backoff``). The last wait is shortened so that a
    final attempt still has ``min_attempt`` seconds before the deadline."""

    attempts: int = 0  # at most this many in all, the first one included; 0: as many as the deadline allows
    initial_backoff: float = 0.1  # seconds
    max_backoff: float = 2.0
    multiplier: float = 2.0
    min_attempt: float = 0.1  # seconds an attempt needs at least; less left: give up

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        ceiling = min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))
        return ceiling * (0.5 + 0.5 * rng.random())

    def next_delay(self, error: grpc.RpcError, attempt: int, deadline: float, rng: random.Random) -> float | None:
        """How long to wait before retrying, or None when the error is final."""
        code = error.code() if hasattr(error, "code") else None
        if code not in RETRYABLE or (self.attempts and attempt >= self.attempts):
            return None
        left = deadline - time.monotonic() - self.min_attempt  # the most we may wait
        if left <= 0:
            return None
        return min(self.delay(attempt, rng), left)


NO_RETRY = RetryPolicy(attempts=1)


OnRetry = Callable[[TranslationError, float], None]
"""Called before each retry with the error that failed the attempt and the seconds it waits."""


class _Attempts:
    """The attempts of one call under one deadline: ``next()`` before each (the time left),
    ``backoff(error)`` after a failure (how long to wait, or the final TranslationError)."""

    def __init__(self, policy: RetryPolicy, timeout: float, rng: random.Random,
                 on_retry: OnRetry | None = None) -> None:
        self.policy = policy
        self.deadline = time.monotonic() + timeout
        self.rng = rng
        self.on_retry = on_retry
        self.count = 0

    def next(self) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TranslationError(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded while retrying", self.count)
        self.count += 1
        return remaining

    def backoff(self, error: grpc.RpcError) -> float:
        delay = self.policy.next_delay(error, self.count, self.deadline, self.rng)
        if delay is None:
            raise TranslationError.from_rpc(error, self.count) from None
        if self.on_retry:
            self.on_retry(TranslationError.from_rpc(error, self.count), delay)
        return delay


def served_model(models: Sequence[pb.ModelInfo], source: str, target: str, model: str = "") -> pb.ModelInfo:
    """The model of ``models`` (ListModels) that translates source -> target: ``model`` by name,
    else the server's first (its default). ValueError naming what is served when there is none."""
    if not models:
        raise ValueError("the server has no model loaded")
    chosen = next((m for m in models if m.name == model), None) if model else models[0]
    if chosen is None:
        raise ValueError(f"model {model!r} is not served; served: {', '.join(m.name for m in models)}")
    pair = f"{source}-{target}"
    if pair not in chosen.pairs:
        raise ValueError(f"language pair {pair} is not served by model {chosen.name!r}; it serves: "
                         f"{', '.join(chosen.pairs)}")
    return chosen


def decoding_options(beam_size: int = BEAM_SIZE, num_hypotheses: int = 1, length_penalty: float = 0.0,
                     max_output_tokens: int = 0, return_scores: bool = False, return_attention: bool = False,
                     no_sentence_split: bool = False) -> pb.DecodingOptions:
    return pb.DecodingOptions(beam_size=beam_size, num_hypotheses=num_hypotheses, length_penalty=length_penalty,
                              max_output_tokens=max_output_tokens, return_scores=return_scores,
                              return_attention=return_attention, no_sentence_split=no_sentence_split)


def make_request(texts: Sequence[str], source: str, target: str, model: str = "", request_id: str = "",
                 priority: int = pb.PRIORITY_UNSPECIFIED, **options) -> pb.TranslateRequest:
    """``priority``: pb.PRIORITY_INTERACTIVE (what UNSPECIFIED means) or pb.PRIORITY_BULK (files and
    batches: the server admits interactive work ahead of it)."""
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings, not one string")
    return pb.TranslateRequest(texts=list(texts), source_lang=source, target_lang=target, model=model,
                               request_id=request_id, priority=priority, options=decoding_options(**options))


_STOP_REASONS = {r.value: r for r in StopReason}


def parse_hypothesis(h: pb.Hypothesis) -> Hypothesis:
    n_src = len(h.source_pieces)
    flat = list(h.attention)
    rows = tuple(tuple(flat[i:i + n_src]) for i in range(0, len(flat), n_src)) if n_src else ()
    return Hypothesis(h.text, h.score, h.num_tokens, tuple(h.source_pieces), tuple(h.target_pieces), rows,
                      _STOP_REASONS.get(h.stop_reason, StopReason.UNSPECIFIED))


def parse_translations(response: pb.TranslateResponse) -> list[Translation]:
    """The translations of a response. The server sends a one-sentence text's pieces and
    attention once, with the text's hypotheses; its segment gets them here too, so that every
    segment's hypotheses carry their own."""
    out = []
    for t in response.translations:
        hyps = tuple(parse_hypothesis(h) for h in t.hypotheses)
        segments = []
        for s in t.segments:
            parsed = tuple(parse_hypothesis(h) for h in s.hypotheses)
            if len(t.segments) == 1:
                parsed = tuple(dataclasses.replace(own, source_pieces=h.source_pieces, target_pieces=h.target_pieces,
                                                   attention=h.attention) if not own.attention else own
                               for own, h in zip(parsed, hyps))
            segments.append(Segment(s.source, s.start, s.end, parsed))
        out.append(Translation(hyps, tuple(segments)))
    return out


def parse_addresses(values: str | Sequence[str] | None) -> list[str]:
    """``"a:1,b:2"`` or ``["a:1", "b:2,c:3"]`` -> ``["a:1", "b:2", "c:3"]``; nothing -> the default address."""
    if values is None:
        return [DEFAULT_ADDRESS]
    if isinstance(values, str):
        values = [values]
    out = [a.strip() for v in values for a in v.split(",") if a.strip()]
    if not out:
        raise ValueError("no server address given")
    return out


@dataclass(frozen=True)
class Connection:
    """How to reach the servers: addresses, TLS, bearer token, message size."""

    addresses: tuple[str, ...] = (DEFAULT_ADDRESS,)
    token: str | None = None
    tls_ca: Path | None = None  # TLS with this CA bundle; with cert and key as well: mutual TLS
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls: bool = False  # TLS with the system's roots (when no CA file is given)
    max_message_bytes: int = 64 * 1024 * 1024

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()

    @property
    def channel_options(self) -> list[tuple[str, int | str]]:
        # gRPC's own reconnect backoff grows to 120 s by default, and a call on a channel
        # waiting out that backoff fails at once: capped at 1 s, retries reach a restarted
        # server within about a second of its return.
        return [("grpc.max_receive_message_length", self.max_message_bytes),
                ("grpc.max_send_message_length", self.max_message_bytes),
                ("grpc.initial_reconnect_backoff_ms", 200),
                ("grpc.max_reconnect_backoff_ms", 1000),
                ("grpc.lb_policy_name", LB_POLICY)]

    def credentials(self) -> grpc.ChannelCredentials | None:
        if not (self.tls or self.tls_ca or self.tls_cert):
            return None
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("mutual TLS needs both a client certificate and its key")
        return grpc.ssl_channel_credentials(_read(self.tls_ca), _read(self.tls_key), _read(self.tls_cert))


def _read(path: Path | None) -> bytes | None:
    return Path(path).read_bytes() if path else None


class _RoundRobin:
    def __init__(self, channels: list) -> None:
        self.channels = channels
        self.stubs = [pb_grpc.TranslatorStub(c) for c in channels]
        self._next = itertools.cycle(range(len(channels)))

    def next(self) -> pb_grpc.TranslatorStub:
        return self.stubs[next(self._next)]


class TranslatorClient:
    """Blocking client; safe to share between threads."""

    def __init__(self, addresses: str | Sequence[str] | None = None, *, connection: Connection | None = None,
                 token: str | None = None, timeout: float = 60.0, retry: RetryPolicy = RetryPolicy(),
                 on_retry: OnRetry | None = None) -> None:
        conn = connection or Connection(addresses=tuple(parse_addresses(addresses)), token=token)
        creds = conn.credentials()
        make = (lambda a: grpc.secure_channel(a, creds, options=conn.channel_options)) if creds else \
            (lambda a: grpc.insecure_channel(a, options=conn.channel_options))
        self.connection = conn
        self.timeout = timeout
        self.retry = retry
        self.on_retry = on_retry
        self._rr = _RoundRobin([make(a) for a in conn.addresses])
        self._rng = random.Random()

    def _unary(self, method: str, request, timeout: float | None):
        attempts = _Attempts(self.retry, timeout or self.timeout, self._rng, self.on_retry)
        while True:
            stub, remaining = self._rr.next(), attempts.next()
            try:
                return getattr(stub, method)(request, timeout=remaining, metadata=self.connection.metadata)
            except grpc.RpcError as e:
                time.sleep(attempts.backoff(e))

    def translate(self, texts: Sequence[str], source: str, target: str, *, model: str = "",
                  timeout: float | None = None, **options) -> list[Translation]:
        """One translation per text, in order. ``options``: beam_size, num_hypotheses,
        length_penalty, max_output_tokens, return_scores, return_attention, no_sentence_split
        (the server splits every text into sentences unless it is set), and the request's
        priority (make_request)."""
        if not texts:
            return []
        response = self._unary("Translate", make_request(texts, source, target, model, **options), timeout)
        return parse_translations(response)

    def translate_stream(self, batches: Iterable[Sequence[str]], source: str, target: str, *, model: str = "",
                         timeout: float | None = None, **options
                         ) -> Iterator[tuple[int, list[Translation] | TranslationError]]:
        """Send every batch of texts on one stream; yield ``(batch index, translations or error)``
        as the answers arrive (not necessarily in order)."""
        requests = (make_request(b, source, target, model, request_id=str(i), **options)
                    for i, b in enumerate(batches))
        call = self._rr.next().TranslateStream(requests, timeout=timeout or self.timeout,
                                               metadata=self.connection.metadata)
        try:
            for response in call:
                yield int(response.request_id), _stream_result(response)
        except grpc.RpcError as e:
            raise TranslationError.from_rpc(e) from None

    def list_models(self, timeout: float | None = None) -> list[pb.ModelInfo]:
        return list(self._unary("ListModels", pb.ListModelsRequest(), timeout).models)

    def ready_models(self, timeout: float | None = None, first_contact: float | None = None,
                     on_wait: Callable[[], None] | None = None) -> list[pb.ModelInfo]:
        """ListModels once the server has its models: one that answers with none (it is loading
        and warming them up) is asked again until ``timeout`` (default: the client's) is used up,
        then NotReady. ``first_contact``: how long to try to reach a server at all (a wrong address
        fails then). ``on_wait()`` is called once if it has to wait."""
        timeout = timeout or self.timeout
        deadline = time.monotonic() + timeout
        models = self.list_models(timeout=min(timeout, first_contact or timeout))
        if not models and on_wait:
            on_wait()
        while not models:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NotReady(timeout)
            time.sleep(min(LOADING_POLL_SECONDS, left))
            models = self.list_models(timeout=max(deadline - time.monotonic(), LOADING_POLL_SECONDS))
        return models

    def close(self) -> None:
        for c in self._rr.channels:
            c.close()

    def __enter__(self) -> TranslatorClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncTranslatorClient:
    """asyncio client (grpc.aio); create and use it inside one running event loop."""

    def __init__(self, addresses: str | Sequence[str] | None = None, *, connection: Connection | None = None,
                 token: str | None = None, timeout: float = 60.0, retry: RetryPolicy = RetryPolicy(),
                 on_retry: OnRetry | None = None) -> None:
        conn = connection or Connection(addresses=tuple(parse_addresses(addresses)), token=token)
        creds = conn.credentials()
        make = (lambda a: grpc.aio.secure_channel(a, creds, options=conn.channel_options)) if creds else \
            (lambda a: grpc.aio.insecure_channel(a, options=conn.channel_options))
        self.connection = conn
        self.timeout = timeout
        self.retry = retry
        self.on_retry = on_retry
        self._rr = _RoundRobin([make(a) for a in conn.addresses])
        self._rng = random.Random()

    async def _unary(self, method: str, request, timeout: float | None):
        attempts = _Attempts(self.retry, timeout or self.timeout, self._rng, self.on_retry)
        while True:
            stub, remaining = self._rr.next(), attempts.next()
            try:
                return await getattr(stub, method)(request, timeout=remaining, metadata=self.connection.metadata)
            except grpc.RpcError as e:
                await asyncio.sleep(attempts.backoff(e))

    async def translate(self, texts: Sequence[str], source: str, target: str, *, model: str = "",
                        timeout: float | None = None, **options) -> list[Translation]:
        if not texts:
            return []
        return parse_translations(await self.translate_response(texts, source, target, model=model, timeout=timeout,
                                                                **options))

    async def translate_response(self, texts: Sequence[str], source: str, target: str, *, model: str = "",
                                 timeout: float | None = None, **options) -> pb.TranslateResponse:
        """As ``translate``, the server's message as it came (documents/ reads its attention)."""
        return await self._unary("Translate", make_request(texts, source, target, model, **options), timeout)

    async def translate_stream(self, batches: Iterable[Sequence[str]], source: str, target: str, *,
                               model: str = "", timeout: float | None = None, **options
                               ) -> AsyncIterator[tuple[int, list[Translation] | TranslationError]]:
        requests = [make_request(b, source, target, model, request_id=str(i), **options)
                    for i, b in enumerate(batches)]
        call = self._rr.next().TranslateStream(iter(requests), timeout=timeout or self.timeout,
                                               metadata=self.connection.metadata)
        try:
            async for response in call:
                yield int(response.request_id), _stream_result(response)
        except grpc.RpcError as e:
            raise TranslationError.from_rpc(e) from None

    async def list_models(self, timeout: float | None = None) -> list[pb.ModelInfo]:
        return list((await self._unary("ListModels", pb.ListModelsRequest(), timeout)).models)

    async def ready_models(self, timeout: float | None = None, first_contact: float | None = None,
                           on_wait: Callable[[], None] | None = None) -> list[pb.ModelInfo]:
        """As TranslatorClient.ready_models."""
        timeout = timeout or self.timeout
        deadline = time.monotonic() + timeout
        models = await self.list_models(timeout=min(timeout, first_contact or timeout))
        if not models and on_wait:
            on_wait()
        while not models:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NotReady(timeout)
            await asyncio.sleep(min(LOADING_POLL_SECONDS, left))
            models = await self.list_models(timeout=max(deadline - time.monotonic(), LOADING_POLL_SECONDS))
        return models

    async def close(self) -> None:
        for c in self._rr.channels:
            await c.close()

    async def __aenter__(self) -> AsyncTranslatorClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


def _stream_result(response: pb.TranslateResponse) -> list[Translation] | TranslationError:
    if response.HasField("error") and response.error.code:
        return TranslationError(status_code(response.error.code), response.error.message)
    return parse_translations(response)


_CODES = {code.value[0]: code for code in grpc.StatusCode}


def status_code(value: int) -> grpc.StatusCode:
    """The grpc.StatusCode with this integer value (as carried in ``Error.code``)."""
    return _CODES.get(value, grpc.StatusCode.UNKNOWN)
