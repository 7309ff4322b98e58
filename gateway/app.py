"""The gateway's HTTP application (Starlette): LibreTranslate's API, our JSON API, health and
the web page, in front of one gRPC channel to nmt-serve.

Endpoints:

    POST /translate     LibreTranslate's: q (a string or a list), source, target, format
                        (text or html), alternatives, api_key, source "auto" (gateway/langid.py);
                        in the query string, a JSON,
                        form or multipart body (the body's over the query string's)
    GET  /languages     LibreTranslate's: [{"code", "name", "targets"}] of every language of
                        every model's pairs (a target-only one with no targets)
    POST /detect        LibreTranslate's: [{"confidence", "language"}] of q, best first
    POST /translate_file, GET /download_file/NAME   LibreTranslate's: a document (gateway/files.py)
    GET  /frontend/settings, /health   LibreTranslate's
    POST /v1/translate  ours: every DecodingOptions field, hypotheses, segments, scores, attention
    GET  /v1/models     ours: ListModels as JSON
    GET  /healthz       200 while this process runs
    GET  /readyz        200 while the gRPC server's health check says SERVING, else 503
    GET  /, /static/... the web page (gateway/static/)
    GET  /spec, /docs   this API as an OpenAPI document and as a page (gateway/openapi.py, reference.py)
    GET  /metrics       Prometheus: each API key's requests, characters and refusals (--metrics)

Every error is ``{"error": "message"}`` with the status LibreTranslate uses: 400 for a bad
request (LibreTranslate's words where it has them: "xx is not supported", "request (600)
exceeds text limit (500)", a missing API key; otherwise the server's INVALID_ARGUMENT message
passes through; with format=html it names the paragraph it is about, "q, paragraph 18", and a
request holding more tags than --max-html-tags is refused before any is translated), 403 for
a wrong API key, 413 for a body over --max-body-bytes, 429 while the server is saturated
(RESOURCE_EXHAUSTED, with Retry-After) or a key is over its limits ("Slowdown: ...", with
Retry-After: gateway/keys.py), 503 while it cannot be reached or is shutting down
(UNAVAILABLE, with Retry-After), 504 when the deadline passes, 500 for anything else. The
deadline of every gRPC call is the request's (--timeout, lowered by an X-Timeout-Seconds
header), and a client that disconnects cancels its gRPC call, so the server frees its rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import math
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cli import LB_POLICY, language, parse_direction
from cli.version import VERSION_HEADER
from documents.alignment import aligned_placement, translation_alignments
from documents.document import Document, DocumentError, Limits
from documents.formats import EXTENSIONS, media_type, read_document
from documents.html_text import HtmlText, TooManyTags
from documents.translate import Batching, Call, name_segment, sample, translate_segments
from gateway import files, langid, reference
from gateway.config import GatewayConfig
from gateway.keys import ApiKey, KeyRing, Refused, Usage
from gateway.metrics import Exporter
from gateway.terms import NO_TERMS, TERM_KEYS, Terms, TermsInvalid, terms_of
from gateway.version import VersionHeader
from nmt.v1 import translator_pb2 as pb
from nmt.v1 import translator_pb2_grpc as pb_grpc

log = logging.getLogger("nmt.http")
T = TypeVar("T")

STATIC_DIR = Path(__file__).resolve().parent / "static"
TIMEOUT_HEADER = "x-timeout-seconds"
MODELS_TTL = 10.0  # seconds the model list (pairs, limits) is reused to route /translate
MODELS_MISS_TTL = 1.0  # an unknown pair asks again once the list is this old (a model may have been added)
HTML_TEXTS_PER_CALL = 16  # units of format=html per Translate call, at most (each answer carries its attention)
READY_TIMEOUT = 3.0  # seconds /readyz waits for the server's health check (a probe's own timeout is short)
CLIENT_GONE = 499  # nginx's "client closed request": logged, never seen by the client
# gRPC's reconnect backoff grows to 120 s by default, and a call on a channel waiting it out
# fails at once: capped at 1 s, the gateway reaches a restarted server about a second after it is back.
CHANNEL_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 200), ("grpc.max_reconnect_backoff_ms", 1000),
                   ("grpc.lb_policy_name", LB_POLICY),
                   ("grpc.max_receive_message_length", 64 * 1024 * 1024),  # above any server's --max-message-bytes
                   ("grpc.max_send_message_length", -1)]  # requests are bounded by --max-body-bytes
LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French", "es": "Spanish", "it": "Italian",
                  "pt": "Portuguese", "nl": "Dutch", "pl": "Polish", "ru": "Russian", "uk": "Ukrainian",
                  "sv": "Swedish", "da": "Danish", "fi": "Finnish", "cs": "Czech", "el": "Greek", "tr": "Turkish",
                  "ar": "Arabic", "he": "Hebrew", "hi": "Hindi", "zh": "Chinese", "ja": "Japanese", "ko": "Korean",
                  "la": "Latin"}
# /v1/translate: the body's keys and the option each sets (api_key is read by the key check).
V1_INT_OPTIONS = ("beam_size", "num_hypotheses", "max_output_tokens")
V1_BOOL_OPTIONS = ("return_scores", "return_attention", "no_sentence_split")
V1_KEYS = ("q", "source", "target", "model", *V1_INT_OPTIONS, "length_penalty", *V1_BOOL_OPTIONS, *TERM_KEYS,
           "api_key")
UINT32_MAX = 2**32 - 1
FRONTEND_TIMEOUT_MS = 500  # LibreTranslate's --frontend-timeout: the page waits this long after typing
MAX_JSON_DEPTH = 32  # a request body needs 2 levels (an object holding a list of strings)
SURROGATE = re.compile("[\ud800-\udfff]")
SPLIT_ALL, SPLIT_NONE, SPLIT_NO_NEWLINES = "1", "0", "nonewlines"  # DeepL's split_sentences
LINE_BREAK = re.compile(r"\r\n|[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]")  # as the server's segmenter reads them
SENTENCE_END = re.compile(r"[.!?…‽][\"'”’»›)\]]*\s*$")
KEY_MISSING = "Please contact the server operator to get an API key"  # LibreTranslate's words (400)


class GatewayError(Exception):
    """An answer other than 200: the status and LibreTranslate's ``{"error": message}``."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, dict(headers or {})

    def response(self) -> JSONResponse:
        return JSONResponse({"error": self.message}, self.status, headers=self.headers)


class BodyTooLarge(GatewayError):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is larger than this gateway's limit of {limit} bytes")


def bad_request(message: str) -> GatewayError:
    return GatewayError(400, message)


# ---------------------------------------------------------------- deadlines and gRPC errors
@dataclass(frozen=True)
class Deadline:
    """When the request's gRPC work must be done: --timeout, or less by X-Timeout-Seconds."""

    at: float  # time.monotonic()
    seconds: float

    @classmethod
    def of(cls, request: Request, limit: float) -> Deadline:
        seconds = limit
        given = request.headers.get(TIMEOUT_HEADER)
        if given is not None:
            try:
                asked = float(given)
            except ValueError:
                asked = math.nan
            if not (math.isfinite(asked) and asked > 0):
                raise bad_request(f"X-Timeout-Seconds: {given[:40]!r} is not a number of seconds above 0")
            seconds = min(asked, limit)
        return cls(time.monotonic() + seconds, seconds)

    def remaining(self) -> float:
        left = self.at - time.monotonic()
        if left <= 0:
            raise self.exceeded()
        return left

    def exceeded(self) -> GatewayError:
        return GatewayError(504, f"deadline exceeded: the translation server did not answer within "
                                 f"{self.seconds:g} s")


def rpc_error(e: grpc.aio.AioRpcError, deadline: Deadline, address: str) -> GatewayError:
    """The HTTP answer to a failed gRPC call."""
    code, details = e.code(), e.details() or ""
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE):
        return bad_request(details)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return GatewayError(429, details, {"Retry-After": "1"})
    if code == grpc.StatusCode.UNAVAILABLE:
        return GatewayError(503, f"the translation server at {address} is unavailable: {details}", {"Retry-After": "1"})
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return deadline.exceeded()
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return GatewayError(500, f"the translation server refused the gateway ({code.name}: {details}); its "
                                 f"operator must check --grpc-token-file")
    return GatewayError(500, f"translation failed: {code.name}: {details}")


# ---------------------------------------------------------------- the gRPC side
class Upstream:
    """The gateway's one channel to the gRPC server (made in the app's lifespan, shared by
    every request), its stubs, and the model list (pairs and limits) kept for MODELS_TTL."""

    def __init__(self, cfg: GatewayConfig, token: str) -> None:
        self.address = cfg.grpc_address
        self.channel = grpc.aio.insecure_channel(cfg.grpc_address, options=CHANNEL_OPTIONS)
        self.translator = pb_grpc.TranslatorStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.metadata = (("authorization", f"Bearer {token}"),) if token else None
        self._models: list[pb.ModelInfo] = []
        self.pivots: list[pb.PivotRoute] = []  # pairs the server translates through a pivot (its ListModels)
        self._models_at = -math.inf

    async def close(self) -> None:
        await self.channel.close()

    async def probe(self) -> None:
        """At start-up: one warning line when the server does not answer its health check (the
        gateway starts all the same, and reaches the server as soon as it is up)."""
        try:
            response = await self.health.Check(health_pb2.HealthCheckRequest(service=""), timeout=READY_TIMEOUT,
                                               metadata=self.metadata)
        except grpc.aio.AioRpcError as e:
            if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                log.warning("no gRPC server answers at %s yet; requests will get 503 until it does (%s)",
                            self.address, e.code().name)
            else:
                log.warning("the gRPC server at %s refused its health check: %s: %s", self.address, e.code().name,
                            e.details())
            return
        if response.status != health_pb2.HealthCheckResponse.SERVING:
            log.info("the gRPC server at %s answers but is not serving yet (%s)", self.address,
                     health_pb2.HealthCheckResponse.ServingStatus.Name(response.status))

    async def call(self, method, message, deadline: Deadline):
        """One unary call with the request's deadline; GatewayError when it fails."""
        try:
            return await method(message, timeout=deadline.remaining(), metadata=self.metadata)
        except grpc.aio.AioRpcError as e:
            raise rpc_error(e, deadline, self.address) from None

    async def models(self, deadline: Deadline, max_age: float = 0.0) -> list[pb.ModelInfo]:
        """ListModels, or its answer of less than ``max_age`` seconds ago."""
        if time.monotonic() - self._models_at >= max_age:
            response = await self.call(self.translator.ListModels, pb.ListModelsRequest(), deadline)
            self._models, self._models_at = list(response.models), time.monotonic()
            self.pivots = list(response.pivots)
        return self._models

    async def pairs(self, deadline: Deadline, max_age: float = 0.0) -> dict[str, set[str]]:
        """Each source language and the targets it is translated into, through a pivot too."""
        return language_pairs(await self.models(deadline, max_age), self.pivots)

    async def route(self, source: str, target: str, deadline: Deadline) -> pb.ModelInfo | None:
        """The first model (the default first) that translates source -> target; None when none
        does or the list cannot be had: the request then goes to the default model, whose
        answer says what is wrong."""
        pair = f"{source}-{target}"
        try:
            for max_age in (MODELS_TTL, MODELS_MISS_TTL):
                for m in await self.models(deadline, max_age):
                    if pair in m.pairs:
                        return m
        except GatewayError:
            pass
        return None

    async def translate(self, request: pb.TranslateRequest, deadline: Deadline) -> pb.TranslateResponse:
        return await self.call(self.translator.Translate, request, deadline)


# ---------------------------------------------------------------- ASGI middleware
class BodyLimit:
    """Refuses a body over ``limit`` bytes with 413: at once by its Content-Length, else
    (chunked) as soon as the bytes read pass the limit. ``paths``: other limits for some paths
    (/translate_file takes a file)."""

    def __init__(self, app: ASGIApp, limit: int, paths: Mapping[str, int] | None = None) -> None:
        self.app, self.limit, self.paths = app, limit, dict(paths or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.paths.get(scope["path"], self.limit)
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length.isdigit() and int(length) > limit:
            await BodyTooLarge(limit).response()(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)  # answered by the app's GatewayError handler
            return message

        await self.app(scope, limited, send)


class HostCheck:
    """Refuses (400) a request whose Host header is not one of ``names`` (lower case, no port;
    None: any). A gateway listening on this machine only answers to localhost's names, so a
    page on another site cannot reach it by pointing its own name at 127.0.0.1 (DNS rebinding)."""

    def __init__(self, app: ASGIApp, names: frozenset[str] | None) -> None:
        self.app, self.names = app, names

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.names is None:
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
        if host_name(given) not in self.names:
            error = bad_request(f"Host {given[:100]!r} is not a name of this gateway (--allowed-hosts): "
                                f"{', '.join(sorted(self.names))}")
            await error.response()(scope, receive, send)
            return
        await self.app(scope, receive, send)


def host_name(header: str) -> str:
    """A Host header's name without its port, lower case: "[::1]:5000" -> "::1"."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


async def until_disconnected(request: Request, work: Awaitable[T]) -> T | None:
    """``await work``, unless the client disconnects first: then the work is cancelled (a
    cancelled grpc.aio call cancels the RPC, and the server frees its rows) and the answer
    is None. The body must have been read: what the client sends next can only be its leaving."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.create_task(_disconnect(request.receive))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when this handler is cancelled itself (the gateway shutting down)
        watcher.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        log.info("%s %s: the client went away; its translation was cancelled", request.method, request.url.path)
        return None
    return task.result()


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


# ---------------------------------------------------------------- request bodies
async def json_body(request: Request) -> dict[str, Any]:
    """The body as a JSON object; 400 with one line for anything else (bad syntax, bad UTF-8,
    nesting deeper than any request needs, a lone surrogate that no text may hold)."""
    body = await request.body()
    try:
        data = json.loads(body)
    except RecursionError:
        raise bad_request(f"Invalid JSON format: nested deeper than {MAX_JSON_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise bad_request(f"Invalid JSON format: {str(e)[:200]}") from None
    if not isinstance(data, dict):
        raise bad_request("Invalid JSON format: the body must be a JSON object")
    if problem := _json_problem(data):
        raise bad_request(f"Invalid JSON format: {problem}")
    return data


def _json_problem(data: Any) -> str:
    """What makes a parsed body unusable ("" when nothing): nesting deeper than
    MAX_JSON_DEPTH, or a string (key or value) with a lone surrogate such as "\\ud800",
    which JSON's escapes allow and UTF-8 (gRPC, the tokenizer) cannot carry. Iterative: a
    deep body must not exhaust Python's stack here either."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if SURROGATE.search(value):
                return "a string holds a lone surrogate (such as \\ud800): text must be valid Unicode"
        elif isinstance(value, dict | list):
            if depth > MAX_JSON_DEPTH:
                return f"nested deeper than {MAX_JSON_DEPTH} levels"
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                stack.append((key, depth))
                stack.append((item, depth + 1))
    return ""


def is_json(request: Request) -> bool:
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


async def libre_fields(request: Request, limit: int) -> dict[str, Any]:
    """LibreTranslate's parameters: the query string's, then the body's over them (a JSON object,
    or a form's fields, as Flask's request.values). A client may send everything in the query
    string of a POST (deep-translator does). A field given more than once (q) is a list."""
    fields: dict[str, list[Any]] = {}
    for key, value in request.query_params.multi_items():
        fields.setdefault(key, []).append(value)
    out: dict[str, Any] = {k: v[0] if k != "q" or len(v) == 1 else v for k, v in fields.items()}
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if is_json(request):
        if (await request.body()).strip():
            out.update(await json_body(request))
        return out
    if media in ("application/x-www-form-urlencoded", "multipart/form-data"):
        form = await request.form(max_part_size=limit)
        from_form: dict[str, list[Any]] = {}
        for key, value in form.multi_items():
            if isinstance(value, UploadFile):
                raise bad_request(f"Invalid request: {key} must be a form field, not a file")
            from_form.setdefault(key, []).append(value)
        # The text as sent, every character kept: the same text answers the same whatever the
        # encoding (a line or paragraph separator, a form feed or CRLF is not rewritten to LF).
        out.update({k: v[0] if k != "q" or len(v) == 1 else v for k, v in from_form.items()})
    elif await request.body():
        raise bad_request(f"Invalid request: unsupported Content-Type {media or 'none'!r}; send application/json, "
                          f"application/x-www-form-urlencoded or multipart/form-data")
    return out


# ---------------------------------------------------------------- format=html
def parse_html(texts: Sequence[str], max_tags: int) -> list[HtmlText]:
    """Each text's HtmlText; 400 naming the limit when they hold more than ``max_tags`` tags
    together (the scan stops at the first tag over it)."""
    documents: list[HtmlText] = []
    left = max_tags
    for text in texts:
        try:
            documents.append(HtmlText(text, left))
        except TooManyTags:
            raise bad_request(f"Invalid request: the html holds more than {max_tags} tags, this gateway's limit "
                              f"per request (--max-html-tags)") from None
        left -= documents[-1].tags
    return documents


def render_html(documents: Sequence[HtmlText], answers: Sequence[pb.Translation]) -> list[str]:
    """Each document with its units' translations (``answers``, in the order of their texts)
    and their markup placed by the attention."""
    it = iter(answers)
    out = []
    for d in documents:
        placed = [translation_alignments(unit, next(it)) for unit in d.texts]
        out.append(d.render([text for text, _ in placed], [aligned_placement(a) for _, a in placed]))
    return out


SERVER_TEXT_INDEX = re.compile(r"texts\[(\d+)\]")  # how the server names the text an error is about


def in_document(error: GatewayError, places: Sequence[tuple[int, int]], listed: bool) -> GatewayError:
    """The server's error about one of the units of an html call, naming the unit by its place
    in the request instead of in that call: "texts[1]" becomes "q, paragraph 18" (or
    "q[2], paragraph 18" when q is a list), a paragraph being a document's block of running
    text (a <p>, an <li>, a cell...), counted from 1 in that document."""
    m = SERVER_TEXT_INDEX.match(error.message)
    if error.status != 400 or m is None or int(m.group(1)) >= len(places):
        return error
    document, paragraph = places[int(m.group(1))]
    where = f"q[{document}], paragraph {paragraph + 1}" if listed else f"q, paragraph {paragraph + 1}"
    return GatewayError(error.status, where + error.message[m.end():], error.headers)


# ---------------------------------------------------------------- the application
class Gateway:
    """The endpoints; ``upstream`` is set by the lifespan."""

    def __init__(self, cfg: GatewayConfig, api_keys: Sequence[ApiKey], grpc_token: str, metrics_token: str = "",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg, self.grpc_token = cfg, grpc_token
        self.exporter = Exporter(cfg.metrics, metrics_token)
        self.keys = KeyRing(api_keys, clock, Usage(self.exporter.registry))  # what each key may send (gateway/keys.py)
        self.upstream: Upstream | None = None
        self.store: files.FileStore  # translated files for /download_file, made by the lifespan

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.upstream = Upstream(self.cfg, self.grpc_token)
        log.info("translating with the gRPC server at %s", self.cfg.grpc_address)
        await self.upstream.probe()
        # The language identifier's model loads in the background (about a second, once a process).
        preload = asyncio.create_task(asyncio.to_thread(_load_langid))
        self.store = files.FileStore(self.cfg.files_dir, self.cfg.files_ttl)
        try:
            yield
        finally:
            await preload  # a thread cannot be cancelled; a second at most
            await self.upstream.close()
            self.store.close()

    @property
    def up(self) -> Upstream:
        assert self.upstream is not None, "the app's lifespan makes the channel"
        return self.upstream

    def check_key(self, request: Request, given: Any) -> ApiKey | None:
        """When keys are configured, the request must carry one: as api_key wherever LibreTranslate
        takes it (the JSON body, the form, the query string: the caller passes what it read) or as
        'Authorization: Bearer KEY' (the scheme in any case). As LibreTranslate answers: a missing
        key is 400 "Please contact the server operator to get an API key", a wrong one 403 "Invalid
        API key". The access log masks a key in the URL (gateway.main.MaskKeys). The key found (None
        when none is needed), for ``spend``."""
        if not self.keys:
            return None
        if given is None or given == "":
            scheme, _, token = request.headers.get("authorization", "").strip().partition(" ")
            given = token.strip() if scheme.lower() == "bearer" else None
        if given is None or given == "":
            raise GatewayError(400, KEY_MISSING)
        key = self.keys.find(str(given))
        if key is None:
            raise GatewayError(403, "Invalid API key")
        return key

    def spend(self, key: ApiKey | None, chars: int) -> None:
        """One request and ``chars`` characters of ``key``'s limits, or its 429 (Retry-After) or 400."""
        if key is None:
            return
        try:
            self.keys.spend(key, chars)
        except Refused as e:
            raise GatewayError(e.status, e.message, {"Retry-After": str(e.retry_after)} if e.retry_after else None
                               ) from None

    def beam(self, model: pb.ModelInfo | None, hypotheses: int = 1) -> int:
        """The beam of a request that names none: --beam, or more for more hypotheses; at most
        the model's largest (when known). /translate, /v1/translate and the page share it."""
        wanted = max(self.cfg.beam, hypotheses)
        return min(wanted, model.max_beam_size) if model is not None and model.max_beam_size else wanted

    # ------------------------------------------------------------ LibreTranslate's API
    async def translate(self, request: Request) -> Response:
        p = await libre_fields(request, self.cfg.max_body_bytes)
        key = self.check_key(request, p.get("api_key"))
        q = _q(p)
        self.spend(key, characters(q))
        source, target = (_language(p.get(name), name) for name in ("source", "target"))
        fmt = p.get("format") or "text"
        if fmt not in ("text", "html"):
            raise bad_request(f"{str(fmt)[:40]} format is not supported")
        alternatives = _alternatives(p.get("alternatives", 0))
        split = _split_sentences(p.get("split_sentences"), fmt)
        terms = _terms(p, "Invalid request: ")  # our extension: keep, glossary, glossary_name
        deadline = Deadline.of(request, self.cfg.timeout)
        work = self._auto(q, target, fmt, alternatives, deadline, split, terms) if source == "auto" else \
            self._libre(q, source, target, fmt, alternatives, deadline, split, terms)
        result = await until_disconnected(request, work)
        return Response(status_code=CLIENT_GONE) if result is None else JSONResponse(result)

    async def _auto(self, q: str | list[str], target: str, fmt: str, alternatives: int,
                    deadline: Deadline, split: str = SPLIT_ALL, terms: Terms = NO_TERMS) -> dict[str, Any]:
        """source "auto": each text's language, among those translated into ``target`` (and the
        target itself), then each group of texts of one language translated from it. A text in
        the target language, or with no language to tell (numbers, emoji, "ok"), comes back as
        it was. ``detectedLanguage`` is one object for a string, a list for a list (per text)."""
        pairs = await self.up.pairs(deadline, MODELS_TTL)
        sources = sorted(code for code, targets in pairs.items() if target in targets)
        if not sources:
            await self._unsupported(sorted(pairs)[0] if pairs else target, target, deadline)
            raise bad_request(f"{target} is not supported")
        texts = [q] if isinstance(q, str) else q
        try:
            ranked = await asyncio.to_thread(lambda: [langid.rank(langid.plain(t, fmt), [*sources, target])
                                                      for t in texts])
        except langid.Unavailable as e:
            raise GatewayError(500, str(e)) from None
        fallback = "en" if "en" in sources else sources[0]
        detected = [{"confidence": r[0][1], "language": r[0][0]} if r else {"confidence": 0.0, "language": fallback}
                    for r in ranked]
        best: list[str] = list(texts)
        others: list[list[str]] = [[] for _ in texts]
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(ranked):
            if r and r[0][0] != target:
                groups.setdefault(r[0][0], []).append(i)
        for source, where in groups.items():
            answer = await self._libre([texts[i] for i in where], source, target, fmt, alternatives, deadline,
                                       split, terms)
            for n, i in enumerate(where):
                best[i] = answer["translatedText"][n]
                if alternatives > 0:
                    others[i] = answer["alternatives"][n]
        out: dict[str, Any] = {"translatedText": best[0] if isinstance(q, str) else best,
                               "detectedLanguage": detected[0] if isinstance(q, str) else detected}
        if alternatives > 0:
            out["alternatives"] = others[0] if isinstance(q, str) else others
        return out

    async def detect(self, request: Request) -> Response:
        """LibreTranslate's /detect: the likeliest languages of q among every language of the
        models, best first, ``[{"confidence": 90.0, "language": "de"}, ...]`` (one ranking for a
        list, as LibreTranslate's); a text with no language to tell gives LibreTranslate's
        ``[{"confidence": 0.0, "language": "en"}]`` (or the models' first language without English)."""
        p = await libre_fields(request, self.cfg.max_body_bytes)
        key = self.check_key(request, p.get("api_key"))
        q = _q(p)
        self.spend(key, characters(q))
        pairs = await self.up.pairs(Deadline.of(request, self.cfg.timeout), MODELS_TTL)
        every = sorted(set(pairs).union(*pairs.values()))
        texts = [q] if isinstance(q, str) else q
        try:
            ranked = await asyncio.to_thread(langid.rank_many, texts, every)
        except langid.Unavailable as e:
            raise GatewayError(500, str(e)) from None
        if not ranked:
            ranked = [("en" if "en" in every or not every else every[0], 0.0)]
        return JSONResponse([{"confidence": confidence, "language": code} for code, confidence in ranked])

    async def _libre(self, q: str | list[str], source: str, target: str, fmt: str, alternatives: int,
                     deadline: Deadline, split: str = SPLIT_ALL, terms: Terms = NO_TERMS) -> dict[str, Any]:
        texts = [q] if isinstance(q, str) else q
        model = await self.up.route(source, target, deadline)
        if model is None:
            await self._unsupported(source, target, deadline)
        else:
            if alternatives + 1 > model.max_beam_size:
                raise bad_request(f"Invalid request: alternatives parameter must be <= {model.max_beam_size - 1}")
            _within_limits(texts, fmt, model)

        def beam(hypotheses: int) -> int:
            return self.beam(model, hypotheses)

        request = pb.TranslateRequest(source_lang=source, target_lang=target, model=model.name if model else "")
        request.options.no_sentence_split = split == SPLIT_NONE
        sent = join_wrapped_lines if split == SPLIT_NO_NEWLINES else str
        if fmt == "html":
            # Each unit of running text is translated whole; its inline markup goes back where the
            # attention says its words went (documents/alignment.py). Scanning and placing the markup
            # run in a worker thread: the event loop goes on answering other requests (/healthz).
            request.options.beam_size = beam(1)
            request.options.return_attention = True
            documents = await asyncio.to_thread(parse_html, texts, self.cfg.max_html_tags)
            # translate="no" inline: its text kept by the server, the element written over it.
            terms.apply(request, (k for d in documents for k in d.kept))
            units = [u for d in documents for u in d.texts]
            # A <pre>'s line breaks are its content: each line stays a line, whatever split_sentences says.
            pre = [f for d in documents for f in d.preformatted]
            places = [(d, j) for d, doc in enumerate(documents) for j in range(len(doc.texts))]
            per_call = min(max(1, model.max_texts_per_request) if model else HTML_TEXTS_PER_CALL, HTML_TEXTS_PER_CALL)
            answers: list[pb.Translation] = []
            for i in range(0, len(units), per_call):
                request.texts[:] = [u if p else sent(u) for u, p in zip(units[i:i + per_call], pre[i:i + per_call])]
                try:
                    response = await self.up.translate(request, deadline)
                except GatewayError as e:
                    raise in_document(e, places[i:i + per_call], isinstance(q, list)) from None
                answers += list(response.translations)
            best = await asyncio.to_thread(render_html, documents, answers)
            others: list[list[str]] = [[] for _ in texts]  # LibreTranslate gives none for html either
        else:
            # The translation is --beam's, with or without alternatives: up to --beam - 1 of them
            # come from the same beam; more need a wider one, asked for in a second call.
            request.texts.extend(sent(t) for t in texts)
            terms.apply(request)
            request.options.beam_size = beam(1)
            request.options.num_hypotheses = min(alternatives + 1, request.options.beam_size)
            response = await self.up.translate(request, deadline)
            best = [_best(t) for t in response.translations]
            nbest = response
            if alternatives + 1 > request.options.beam_size:
                request.options.beam_size = request.options.num_hypotheses = beam(alternatives + 1)
                nbest = await self.up.translate(request, deadline)
            others = [_unique([h.text for h in t.hypotheses], b)[:alternatives]
                      for t, b in zip(nbest.translations, best)]
        out: dict[str, Any] = {"translatedText": best[0] if isinstance(q, str) else best}
        if alternatives > 0:
            out["alternatives"] = others[0] if isinstance(q, str) else others
        return out

    async def _unsupported(self, source: str, target: str, deadline: Deadline) -> None:
        """LibreTranslate's 400 for a language or a pair that no model serves ("xx is not
        supported", "German (de) is not available as a target language from English (en)"); nothing
        when the model list cannot be had (the default model's answer then says what is wrong)."""
        try:
            pairs = await self.up.pairs(deadline, MODELS_TTL)
        except GatewayError:
            return
        every = set(pairs).union(*pairs.values())
        for code in (source, target):
            if code not in every:
                raise bad_request(f"{code} is not supported")
        if target not in pairs.get(source, ()):
            raise bad_request(f"{language_name(target)} ({target}) is not available as a target language from "
                              f"{language_name(source)} ({source})")

    # ------------------------------------------------------------ LibreTranslate's files (gateway/files.py)
    async def translate_file(self, request: Request) -> Response:
        """A document translated whole (documents/), stored for /download_file; its URL."""
        form = await files.read_form(request)
        key = self.check_key(request, form.fields.get("api_key"))
        try:
            upload = await files.upload(form, self.cfg.max_file_bytes)
        except files.FileError as e:
            raise GatewayError(e.status, e.message) from None
        source, target = (_language(upload.fields.get(name), name) for name in ("source", "target"))
        deadline = Deadline.of(request, self.cfg.file_timeout)
        stored = await until_disconnected(request, self._translate_file(upload, source, target, deadline, key))
        if stored is None:
            return Response(status_code=CLIENT_GONE)
        return JSONResponse({"translatedFileUrl": str(request.url_for("download_file", name=stored))})

    async def _translate_file(self, upload: files.Upload, source: str, target: str, deadline: Deadline,
                              key: ApiKey | None = None) -> str:
        try:
            document = await asyncio.to_thread(read_document, upload.name, upload.data,
                                               Limits(max_bytes=self.cfg.max_file_bytes))
        except DocumentError as e:
            raise bad_request(f"Invalid request: {e}") from None
        self.spend(key, sum(len(s.text) for s in document.segments))  # the document's characters to translate
        data = upload.data
        auto = source == "auto"
        if auto:
            source = await self._document_language(document, target, deadline)
        if not (auto and source == target):  # a document told to be in the target language comes back as it is
            model = await self.up.route(source, target, deadline)
            if model is None:
                await self._unsupported(source, target, deadline)
            try:
                files.check_segments(document.segments, model.max_chars_per_text if model else 0,
                                     self.cfg.max_file_chars)
            except files.FileError as e:
                raise GatewayError(e.status, e.message) from None
            per_call = min(model.max_texts_per_request or HTML_TEXTS_PER_CALL * 2, HTML_TEXTS_PER_CALL * 2) \
                if model else HTML_TEXTS_PER_CALL
            answers = await translate_segments(document.segments, self._document_call(model, source, target, deadline),
                                               Batching(per_call, HTML_TEXTS_PER_CALL))
            data = await asyncio.to_thread(document.render, answers)
        return await asyncio.to_thread(self.store.put, data, files.download_name(upload.name, target))

    def _document_call(self, model: pb.ModelInfo | None, source: str, target: str, deadline: Deadline) -> Call:
        """One Translate call of a document's segments: bulk work, as nmt-translate's files (the
        server admits a person's sentence ahead of it); an error names the segment."""
        async def call(segments: list, attention: bool) -> list[pb.Translation]:
            request = pb.TranslateRequest(texts=[s.text for s in segments], source_lang=source, target_lang=target,
                                          model=model.name if model else "", priority=pb.PRIORITY_BULK)
            request.options.beam_size = self.beam(model)
            request.options.return_attention = attention
            try:
                return list((await self.up.translate(request, deadline)).translations)
            except GatewayError as e:
                raise GatewayError(e.status, name_segment(e.message, segments), e.headers) from None
        return call

    async def _document_language(self, document: Document, target: str, deadline: Deadline) -> str:
        """source "auto" of a file: the language of its text among those translated into
        ``target`` (and the target itself: a document already in it comes back as it is)."""
        pairs = await self.up.pairs(deadline, MODELS_TTL)
        sources = sorted(code for code, targets in pairs.items() if target in targets)
        if not sources:
            await self._unsupported(sorted(pairs)[0] if pairs else target, target, deadline)
            raise bad_request(f"{target} is not supported")
        try:
            ranked = await asyncio.to_thread(langid.rank, sample(document.segments), [*sources, target])
        except langid.Unavailable as e:
            raise GatewayError(500, str(e)) from None
        return ranked[0][0] if ranked else ("en" if "en" in sources else sources[0])

    async def download_file(self, request: Request) -> Response:
        """A translated file, as an attachment with its download name; 404 for a name that is not
        a stored file's (none reaches outside the store) or one that has expired."""
        found = await asyncio.to_thread(self.store.get, request.path_params["name"])
        if found is None:
            raise GatewayError(404, "Invalid filename: no such file here, or it has expired (--files-ttl)")
        path, name = found
        return FileResponse(path, media_type=media_type(name), filename=name)

    async def languages(self, request: Request) -> Response:
        """Every language of every model, the target-only ones too (with no targets), as
        LibreTranslate lists them."""
        models = await self.up.models(Deadline.of(request, self.cfg.timeout))
        return JSONResponse(libre_languages(models, self.up.pivots))

    async def frontend_settings(self, request: Request) -> Response:
        """LibreTranslate's /frontend/settings: the character limit (the smallest model's; -1 when
        the server cannot be asked), whether keys are needed, the file formats (no suggestions here), and
        the page's default languages (the source detected, as LibreTranslate's default)."""
        try:
            models = await self.up.models(Deadline.of(request, self.cfg.timeout), MODELS_TTL)
        except GatewayError:
            models = []
        pairs = language_pairs(models, self.up.pivots if models else ())
        limits = [m.max_chars_per_text for m in models if m.max_chars_per_text]
        first = "en" if pairs.get("en") else min(pairs, default="en")
        targets = sorted(pairs.get(first, ()))
        target = targets[0] if targets else first
        return JSONResponse({
            "charLimit": min(limits) if limits else -1,
            "frontendTimeout": FRONTEND_TIMEOUT_MS,
            "apiKeys": bool(self.keys),
            "keyRequired": bool(self.keys),
            "suggestions": False,
            "filesTranslation": True,
            "supportedFilesFormat": list(EXTENSIONS),
            "language": {"source": {"code": "auto", "name": "Auto Detect"},
                         "target": {"code": target, "name": language_name(target)}},
        })

    # ------------------------------------------------------------ our JSON API
    async def v1_translate(self, request: Request) -> Response:
        body = await json_body(request)
        unknown = [k for k in body if k not in V1_KEYS]
        if unknown:
            raise bad_request(f"unknown keys: {', '.join(repr(k)[:60] for k in unknown)}; known: {', '.join(V1_KEYS)}")
        key = self.check_key(request, body.get("api_key") or request.query_params.get("api_key"))
        translate = _v1_request(body)
        self.spend(key, sum(len(t) for t in translate.texts))
        deadline = Deadline.of(request, self.cfg.timeout)
        result = await until_disconnected(request, self._v1(translate, deadline))
        return Response(status_code=CLIENT_GONE) if result is None else JSONResponse(result)

    async def _v1(self, request: pb.TranslateRequest, deadline: Deadline) -> dict[str, Any]:
        model = None
        if not request.model:
            model = await self.up.route(language(request.source_lang), language(request.target_lang), deadline)
            request.model = model.name if model else ""
        if not request.options.beam_size:
            # Not given: --beam, as /translate and the page, within the model's largest beam.
            if model is None and request.model:
                with contextlib.suppress(GatewayError):
                    model = next((m for m in await self.up.models(deadline, MODELS_TTL) if m.name == request.model),
                                 None)
            request.options.beam_size = self.beam(model, request.options.num_hypotheses)
        response = await self.up.translate(request, deadline)
        attention = request.options.return_attention
        pivot = {"pivot": {"via": response.pivot_lang, "model": response.pivot_model}} if response.pivot_lang else {}
        return {"model": response.model, **pivot,
                "translations": [{"hypotheses": [_hypothesis(h, attention) for h in t.hypotheses],
                                  "segments": [{"source": s.source, "start": s.start, "end": s.end,
                                                "hypotheses": [_hypothesis(h, attention) for h in s.hypotheses]}
                                               for s in t.segments]}
                                 for t in response.translations]}

    async def v1_models(self, request: Request) -> Response:
        models = await self.up.models(Deadline.of(request, self.cfg.timeout))
        limits = [f.name for f in pb.ModelInfo.DESCRIPTOR.fields if f.name.startswith("max_")]
        return JSONResponse({"models": [{"name": m.name, "pairs": list(m.pairs), "device": m.device,
                                         "variant": m.variant, "device_resident": m.device_resident,
                                         "limits": {name: getattr(m, name) for name in limits}}
                                        for m in models],
                             "pivots": [{"pair": r.pair, "via": r.via, "first_model": r.first_model,
                                         "second_model": r.second_model} for r in self.up.pivots]})

    # ------------------------------------------------------------ health and the page
    async def healthz(self, request: Request) -> Response:
        """/healthz and LibreTranslate's /health: this process answers."""
        return JSONResponse({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        try:
            response = await self.up.health.Check(health_pb2.HealthCheckRequest(service=""),
                                                  timeout=min(self.cfg.timeout, READY_TIMEOUT),
                                                  metadata=self.up.metadata)
        except grpc.aio.AioRpcError as e:
            return JSONResponse({"status": "UNREACHABLE", "error": f"{e.code().name}: {e.details()}"}, 503)
        status = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
        return JSONResponse({"status": status}, 200 if response.status == health_pb2.HealthCheckResponse.SERVING
                            else 503)

    async def index(self, request: Request) -> Response:
        page = STATIC_DIR / "index.html"
        if not page.is_file():
            raise GatewayError(404, "no web page here: gateway/static/index.html is missing")
        return FileResponse(page, media_type="text/html; charset=utf-8")


def _load_langid() -> None:
    try:
        langid.load()
    except langid.Unavailable as e:
        log.warning("%s; source 'auto' and /detect answer 500 until it is installed", e)


def language_name(code: str) -> str:
    return LANGUAGE_NAMES.get(code, code)


def language_pairs(models: Sequence[pb.ModelInfo], pivots: Sequence[pb.PivotRoute] = ()) -> dict[str, set[str]]:
    """Each source language of the models and the targets it is translated into, directly or
    through a pivot (the server's ListModels names those)."""
    targets: dict[str, set[str]] = {}
    for pair in [*(p for m in models for p in m.pairs), *(r.pair for r in pivots)]:
        source, target = parse_direction(pair)
        targets.setdefault(source, set()).add(target)
    return targets


def libre_languages(models: Sequence[pb.ModelInfo], pivots: Sequence[pb.PivotRoute] = ()) -> list[dict[str, Any]]:
    """/languages: every language of the models' pairs, each with the targets it is translated
    into, directly or through a pivot (none for a target-only language), as LibreTranslate
    lists them."""
    pairs = language_pairs(models, pivots)
    return [{"code": code, "name": language_name(code), "targets": sorted(pairs.get(code, ()))}
            for code in sorted(set(pairs).union(*pairs.values()))]


def _within_limits(texts: Sequence[str], fmt: str, model: pb.ModelInfo) -> None:
    """LibreTranslate's 400 for too many texts or too long a text, before the server is asked
    (format=html is measured by the server, paragraph by paragraph: its markup does not count)."""
    if fmt != "text":
        return
    if model.max_texts_per_request and len(texts) > model.max_texts_per_request:
        raise bad_request(f"Invalid request: request ({len(texts)}) exceeds text limit "
                          f"({model.max_texts_per_request})")
    if model.max_chars_per_text:
        for text in texts:
            if len(text) > model.max_chars_per_text:
                raise bad_request(f"Invalid request: request ({len(text)}) exceeds text limit "
                                  f"({model.max_chars_per_text})")


def _split_sentences(value: Any, fmt: str) -> str:
    """DeepL's split_sentences: "1" (at sentence ends and at every line break), "0" (each text as
    one sentence), "nonewlines" (at sentence ends only: a line break inside a sentence, as in
    hard-wrapped text or an HTML block, is a space). Not given: "1" for text, "nonewlines" for html."""
    if value is None or value == "":
        return SPLIT_NO_NEWLINES if fmt == "html" else SPLIT_ALL
    given = str(value).strip().lower()
    if value is True or given in ("1", "true"):
        return SPLIT_ALL
    if value is False or given in ("0", "false"):
        return SPLIT_NONE
    if given == SPLIT_NO_NEWLINES:
        return SPLIT_NO_NEWLINES
    raise bad_request(f"Invalid request: split_sentences must be 1, 0 or nonewlines, not {str(value)[:40]!r}")


def join_wrapped_lines(text: str) -> str:
    """``text`` with every line break that ends neither a sentence nor a paragraph written as
    spaces, one a character, so that every offset holds: the server then splits the text at its
    sentence ends only. A break is kept after a line that ends a sentence (. ! ? … and what
    closes after them), next to a blank line, and at the text's start or end."""
    breaks = list(LINE_BREAK.finditer(text))
    if not breaks:
        return text
    out, last = [], 0
    for n, m in enumerate(breaks):
        before = text[breaks[n - 1].end() if n else 0:m.start()]
        after = text[m.end():breaks[n + 1].start() if n + 1 < len(breaks) else len(text)]
        keep = not before.strip() or not after.strip() or SENTENCE_END.search(before) is not None
        out += [text[last:m.start()], m.group() if keep else " " * len(m.group())]
        last = m.end()
    out.append(text[last:])
    return "".join(out)


def characters(q: str | list[str]) -> int:
    """What a key's character limits count of q, as LibreTranslate counts it: its length, or its
    texts' lengths together."""
    return len(q) if isinstance(q, str) else sum(len(t) for t in q)


def _q(p: dict) -> str | list[str]:
    """LibreTranslate's ``q``: a non-empty string or list of strings, else its 400."""
    q = p.get("q")
    if not q:
        raise bad_request("Invalid request: missing q parameter")
    if not (isinstance(q, str) or (isinstance(q, list) and all(isinstance(x, str) for x in q))):
        raise bad_request("Invalid request: q must be a string or a list of strings")
    return q


def _language(value: Any, name: str) -> str:
    if value is None or value == "":
        raise bad_request(f"Invalid request: missing {name} parameter")
    if not isinstance(value, str):
        raise bad_request(f"Invalid request: {name} must be a language code such as en")
    return language(value)


def _alternatives(value: Any) -> int:
    """LibreTranslate's alternatives: a whole number (as a number or a string), 0 or more."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise bad_request("Invalid request: alternatives parameter is not a number")
    try:
        n = int(value)
    except ValueError:
        raise bad_request("Invalid request: alternatives parameter is not a number") from None
    return max(0, n)  # LibreTranslate reads a negative number as 0


def _best(t: pb.Translation) -> str:
    return t.hypotheses[0].text if t.hypotheses else ""


def _unique(texts: Sequence[str], best: str) -> list[str]:
    """The alternatives: in order, without repeats, without the best translation and empty ones."""
    seen = {best, ""}
    return [t for t in texts if not (t in seen or seen.add(t))]


def _v1_request(body: dict[str, Any]) -> pb.TranslateRequest:
    """The TranslateRequest a /v1/translate body asks for; 400 naming a key of the wrong type."""
    q = body.get("q")
    if q is None:
        raise bad_request("missing q: give a string or a list of strings")
    if not (isinstance(q, str) or (isinstance(q, list) and all(isinstance(x, str) for x in q))):
        raise bad_request("q: expected a string or a list of strings")
    request = pb.TranslateRequest(texts=[q] if isinstance(q, str) else q)
    for name, field in (("source", "source_lang"), ("target", "target_lang")):
        value = body.get(name)
        if not isinstance(value, str) or not value.strip():
            raise bad_request(f"{'missing ' if value in (None, '') else ''}{name}: expected a language code such as "
                              f"en")
        setattr(request, field, value)
    model = body.get("model", "")
    if not isinstance(model, str):
        raise bad_request("model: expected a model's name (a string)")
    request.model = model
    for name in V1_INT_OPTIONS:
        value = body.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= UINT32_MAX:
            raise bad_request(f"{name}: expected a whole number of 0 or more, got {json.dumps(value)[:40]}")
        setattr(request.options, name, value)
    penalty = body.get("length_penalty", 0.0)
    if isinstance(penalty, bool) or not isinstance(penalty, int | float) or not math.isfinite(penalty):
        raise bad_request(f"length_penalty: expected a number, got {json.dumps(penalty)[:40]}")
    request.options.length_penalty = penalty
    for name in V1_BOOL_OPTIONS:
        value = body.get(name, False)
        if not isinstance(value, bool):
            raise bad_request(f"{name}: expected true or false, got {json.dumps(value)[:40]}")
        setattr(request.options, name, value)
    _terms(body).apply(request)
    return request


def _terms(p: Mapping[str, Any], prefix: str = "") -> Terms:
    """The keep, glossary and glossary_name parameters (gateway/terms.py); 400 naming one of the wrong shape."""
    try:
        return terms_of(p)
    except TermsInvalid as e:
        raise bad_request(f"{prefix}{e}") from None


def _hypothesis(h: pb.Hypothesis, attention: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"text": h.text, "score": h.score, "num_tokens": h.num_tokens,
                           "stop_reason": pb.StopReason.Name(h.stop_reason).removeprefix("STOP_REASON_")}
    if attention:
        sources, targets = list(h.source_pieces), list(h.target_pieces)
        weights = list(h.attention)
        width = len(sources)
        out["source_pieces"], out["target_pieces"] = sources, targets
        # Row-major [target pieces x source pieces] on the wire; 6 decimals are plenty for a heat map.
        out["attention"] = [[round(w, 6) for w in weights[i * width:(i + 1) * width]] for i in range(len(targets))] \
            if width and len(weights) == width * len(targets) else []
    return out


# ---------------------------------------------------------------- errors as LibreTranslate answers them
async def _gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    if exc.status >= 500:
        log.warning("%s %s: %d %s", request.method, request.url.path, exc.status, exc.message)
    return exc.response()


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return JSONResponse({"error": exc.detail}, exc.status_code, headers=exc.headers)


UNEXPECTED = {"error": "internal error in the gateway; its log has the details"}


async def _unexpected(request: Request, exc: Exception) -> Response:
    # The last resort (a failure outside the endpoints): the traceback goes to the log
    # (Starlette re-raises to uvicorn, which also closes the connection), never to the client.
    return JSONResponse(UNEXPECTED, 500)


def guarded(endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint, answering a failure it did not expect with 500 and the traceback in the log
    only; the connection stays usable (an exception left to Starlette makes uvicorn close it)."""
    @functools.wraps(endpoint)
    async def run(request: Request) -> Response:
        try:
            return await endpoint(request)
        except (GatewayError, HTTPException):
            raise  # answered by their handlers
        except ClientDisconnect:  # gone while sending its body: nobody to answer
            return Response(status_code=CLIENT_GONE)
        except Exception:
            log.exception("%s %s failed", request.method, request.url.path)
            return JSONResponse(UNEXPECTED, 500)
    return run


def create_app(cfg: GatewayConfig, api_keys: Sequence[ApiKey] = (), grpc_token: str = "", metrics_token: str = "",
               clock: Callable[[], float] = time.monotonic) -> Starlette:
    """The application; ``clock`` times the keys' limits (tests give their own)."""
    gateway = Gateway(cfg, api_keys, grpc_token, metrics_token, clock)
    routes = [
        Route("/translate", guarded(gateway.translate), methods=["POST"]),
        Route("/languages", guarded(gateway.languages), methods=["GET"]),
        Route("/detect", guarded(gateway.detect), methods=["POST"]),
        Route("/translate_file", guarded(gateway.translate_file), methods=["POST"]),
        Route("/download_file/{name:str}", guarded(gateway.download_file), methods=["GET"], name="download_file"),
        Route("/frontend/settings", guarded(gateway.frontend_settings), methods=["GET"]),
        Route("/health", guarded(gateway.healthz), methods=["GET"]),
        Route("/v1/translate", guarded(gateway.v1_translate), methods=["POST"]),
        Route("/v1/models", guarded(gateway.v1_models), methods=["GET"]),
        Route("/healthz", guarded(gateway.healthz), methods=["GET"]),
        Route("/readyz", guarded(gateway.readyz), methods=["GET"]),
        Route("/", guarded(gateway.index), methods=["GET"]),
        Mount("/static", StaticFiles(directory=STATIC_DIR, check_dir=False), name="static"),
        Route("/spec", guarded(reference.spec), methods=["GET"]),  # every route is in gateway/openapi.py
        Route("/docs", guarded(reference.docs), methods=["GET"]),
        Route("/metrics", guarded(gateway.exporter.endpoint), methods=["GET"]),  # gateway/metrics.py
    ]
    middleware = [Middleware(VersionHeader), Middleware(HostCheck, cfg.host_names())]
    if origins := cfg.cors_origin_list():
        # Browser clients on other origins may read the answers (LibreTranslate allows any origin);
        # keys travel in bodies or the Authorization header, never in cookies, so "*" is safe.
        middleware.append(Middleware(CORSMiddleware, allow_origins=origins, allow_methods=["GET", "POST"],
                                     allow_headers=["Content-Type", "Authorization", "X-Timeout-Seconds"],
                                     expose_headers=["Retry-After", VERSION_HEADER], max_age=600))
    # A file's form is its bytes and a few short fields.
    middleware.append(Middleware(BodyLimit, cfg.max_body_bytes,
                                 {"/translate_file": max(cfg.max_body_bytes, cfg.max_file_bytes + 64 * 1024)}))
    app = Starlette(routes=routes, lifespan=gateway.lifespan, middleware=middleware,
                    exception_handlers={GatewayError: _gateway_error, HTTPException: _http_error,
                                        Exception: _unexpected})
    app.state.gateway = gateway
    return app
