"""The gRPC servicer: validate, enqueue, await. No decoding happens here.

Each text is split into sentences (server/segment.py); the sentences of a request are
queued together as one job each, and every text's answer joins its sentences' translations
back in their places (``whole_text``). What the model reads of a sentence is normalised
first (engine/tokenizer.py ``normalize``: invisible characters removed); a sentence without
a letter is not translated: it comes back as it was. When the model's tokenizer has the
placeholder symbols, a sentence's URLs, e-mail addresses, paths, code, format placeholders and
numbers (up to MAX_PROTECTED of them) are replaced by placeholders before it is encoded and put
back in every hypothesis (engine/placeholders.py). The search cannot write an id that is not
text (a language tag, a control piece, a placeholder the sentence lacks), and every hypothesis
is checked: each placeholder back exactly once, no number the source lacks and, for a model
with the placeholders, every span of the source in it. A sentence whose hypothesis fails is
translated again with its spans as text, and a hypothesis that fails that too is the sentence
as it was sent (docs/UNICODE.md).

Every rejection names the item and the limit (INVALID_ARGUMENT); a full queue answers
RESOURCE_EXHAUSTED at once; an expired deadline answers DEADLINE_EXCEEDED after freeing the
text's rows; a model failure on one request answers INTERNAL without a traceback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import grpc
import numpy as np

from cli.version import VERSION_METADATA, __version__
from engine.decoding import DecodeOptions, Hypothesis, Job, StopReason
from engine.defaults import LENGTH_PENALTY, default_max_len
from engine.package import ModelPackage
from engine.placeholders import Protector, faithful, remove, restore_checked
from engine.tokenizer import PackageTokenizer, has_letter, normalize
from nmt.v1 import translator_pb2 as pb
from nmt.v1 import translator_pb2_grpc as pb_grpc
from server import pivot, segment
from server.cache import SentenceCache, model_identity
from server.config import ServerConfig
from server.glossary import Glossary, RequestTerms, TermsError, request_terms
from server.metrics import Metrics
from server.scheduler import DeadlineExpired, JobCancelled, JobFailed, Priority, QueueFull, Scheduler, Ticket
from server.terms import Aligned, aligned, expected, place, usable
from server.terms import protect as protect_with_terms

log = logging.getLogger("nmt.server")
DEADLINE_SLACK = 0.1  # seconds: a cancellation this close to the deadline is the deadline
STOPPED = "the server stopped before this call finished (its drain grace was used up); retry elsewhere"
LOG_EVERY = 10.0  # seconds between two log lines about malformed requests
_READ_ALL = object()  # TranslateStream: the client closed its side and every request was read


class _RequestsBroke(Exception):
    """TranslateStream: reading the client's requests failed (the client left or its transport
    broke); the writer re-raises it so the stream ends the way the client ended it."""


WIRE_STOP_REASON = {reason: pb.StopReason.Value(f"STOP_REASON_{reason.name}") for reason in StopReason}
ECHO_CHARS = 64  # what an error message repeats of the caller's input, at most
# Texts are split into sentences, each decoded on its own. A request may carry at most
# ServerConfig.sentences_per_request sentences in all (--max-sentences), and at most
# max_texts x max_tokens source tokens in all: what max_texts texts at the per-text limit
# carried before splitting, so splitting never makes a request more work than that.


def shown(value: str, limit: int = ECHO_CHARS) -> str:
    """``repr`` of caller input for an error message, cut to ``limit`` characters: a 20 KB
    language code must not turn INVALID_ARGUMENT into a metadata-size failure."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} characters)"


class Malformed:
    """What a request that is not valid protobuf deserializes to (see ``tolerant``): the
    handler answers INVALID_ARGUMENT instead of grpc's UNKNOWN and traceback."""

    def __init__(self, message_type: str, error: Exception) -> None:
        self.message_type, self.error = message_type, error

    @property
    def reason(self) -> str:
        return f"the request is not a valid {self.message_type} message ({str(self.error)[:200]})"


def tolerant(deserializer, message_type: str):
    """Wrap a request deserializer so that malformed bytes become a ``Malformed`` value."""
    def deserialize(data: bytes):
        try:
            return deserializer(data)
        except Exception as e:  # DecodeError, and whatever else a hostile body provokes
            return Malformed(message_type, e)
    return deserialize


@dataclass(frozen=True)
class Segment:
    """One segment (sentence) of a request's text: where it stands in the text, its job (None
    for a sentence without a letter: it comes back as it is), what the job's placeholders stand
    for (``originals[i]`` for ``<ph{i+1}>``; none when nothing is protected), the sentence as the
    model reads it (normalised: what hypotheses are checked against), and the job that reads its
    spans as text, decoded when a hypothesis of ``job`` fails its check (None when ``job`` is
    that already, or when it would be too long)."""

    span: segment.Span
    job: Job | None
    originals: tuple[str, ...] = ()
    text: str = ""
    plain: Job | None = None
    # Glossary and do-not-translate terms, placed by attention in the hypotheses of the job that
    # reads them as text (``plain``, else ``job``): server/terms.py. ``text`` then has each
    # glossary term's target in its place.
    terms: Aligned | None = None


class RequestError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclass(frozen=True)
class RequestLimits:
    """What one request to one model may ask for: the server's flags within what the model's
    package allows, computed once per model (``of``) and used by every check and by ListModels.
    "Per sentence" limits apply to each sentence a text is split into."""

    texts: int  # per request
    chars_per_text: int
    tokens_per_sentence: int  # source tokens, tag and eos included
    output_tokens: int  # per sentence
    beam: int
    sentences: int  # per request, after splitting
    tokens: int  # source tokens per request, after splitting

    @classmethod
    def of(cls, cfg: ServerConfig, package: ModelPackage) -> RequestLimits:
        per_sentence = min(cfg.max_tokens, package.max_source_tokens)
        return cls(texts=cfg.max_texts, chars_per_text=cfg.max_chars, tokens_per_sentence=per_sentence,
                   output_tokens=min(cfg.max_output_tokens, package.max_target_tokens), beam=cfg.max_beam,
                   sentences=cfg.sentences_per_request, tokens=cfg.max_texts * per_sentence)


@dataclass
class LoadedModel:
    name: str
    package: ModelPackage
    tokenizer: PackageTokenizer
    scheduler: Scheduler
    limits: RequestLimits

    @functools.cached_property
    def longest_piece_bytes(self) -> int:
        """UTF-8 bytes of the vocabulary's longest piece: what one output token can add to
        a response's text."""
        sp = self.tokenizer
        return max(len(sp.id_to_piece(i).encode()) for i in range(sp.get_piece_size()))

    @functools.cached_property
    def protector(self) -> Protector:
        """Placeholder protection for this model: on only when its tokenizer has every symbol
        (older packages are served without it)."""
        return Protector.for_pieces(self.tokenizer.piece_to_id, self.tokenizer.unk_id())

    @functools.cached_property
    def banned(self) -> tuple[tuple[int, ...], ...]:
        """``banned[n]``: what a sentence with ``n`` placeholders must never be translated into
        (a Job's ``banned``): every id that is not text but eos, its own placeholders and the
        unknown id (a model may write it where it learned to, as Transformers' generate lets
        it: decoding drops it)."""
        tok = self.tokenizer
        never = tok.not_text - {self.package.special_ids["eos"], self.package.special_ids["unk"]}
        ph = tok.placeholder_ids if self.protector.enabled else ()
        return tuple(tuple(sorted(never - set(ph[:n]))) for n in range(len(ph) + 1))

    @functools.cached_property
    def symbols(self) -> re.Pattern[str]:
        """The text of every internal symbol (tokenizer.symbol_pattern)."""
        return self.tokenizer.symbol_pattern()



class TranslatorService(pb_grpc.TranslatorServicer):
    # nmt-serve --glossary: name -> language pair -> glossary (server/main.py sets it before serving)
    glossaries: Mapping[str, Mapping[str, Glossary]] = MappingProxyType({})

    def __init__(self, models: dict[str, LoadedModel], cfg: ServerConfig, metrics: Metrics) -> None:
        self.cfg, self.metrics = cfg, metrics
        self.cache = SentenceCache(cfg.cache_bytes, cfg.cache, metrics)
        self.draining = False
        self.stopping = False  # the drain's grace is used up: calls still running end UNAVAILABLE
        self._calls: set[asyncio.Task] = set()  # handler tasks of the translation calls being handled
        self.streams = 0  # of which TranslateStream calls
        self._malformed_logged_at, self._malformed_unlogged = -LOG_EVERY, 0
        self.set_models(models)

    @property
    def active(self) -> int:
        """Translation calls being handled: drain waits for them, admission counts them."""
        return len(self._calls)

    def set_models(self, models: dict[str, LoadedModel]) -> None:
        self.models = models
        self.default_model = next(iter(models), "")

    # ------------------------------------------------------------ RPCs
    async def Translate(self, request: pb.TranslateRequest, context: grpc.aio.ServicerContext) -> pb.TranslateResponse:
        start = time.monotonic()
        code: grpc.StatusCode | None = grpc.StatusCode.OK
        self._calls.add(asyncio.current_task())
        try:
            self._admit()
            self._admissible(request)
            return await self._translate(request, _deadline(context))
        except asyncio.CancelledError:
            if not self.stopping:
                code = _why_cancelled(context)
                raise
            code = None
            self._observe("Translate", grpc.StatusCode.UNAVAILABLE, start)
            await context.abort(grpc.StatusCode.UNAVAILABLE, STOPPED)
            raise  # unreachable: abort raises
        except RequestError as e:
            # Counted before the status goes out: a client that reads the metric right after its
            # answer must see its call counted (counting in `finally` raced the next scrape).
            self._observe("Translate", e.code, start)
            code = None
            await context.abort(e.code, e.message)
            raise  # unreachable: abort raises
        finally:
            self._calls.discard(asyncio.current_task())
            if code is not None:
                self._observe("Translate", code, start)

    async def TranslateStream(self, request_iterator, context: grpc.aio.ServicerContext):
        """Answers each request the moment it finishes (tagged with its request_id), whatever
        the client is doing: a reader task takes requests off the stream while this generator
        writes answers, so a client that waits for an answer before it sends the next request
        gets it at once. A request that fails, or a message that is not valid protobuf, is
        answered in band and the stream goes on: work already accepted is never dropped
        because of a later bad message."""
        start = time.monotonic()
        code = grpc.StatusCode.OK
        window = asyncio.Semaphore(self.cfg.stream_window)
        results: asyncio.Queue = asyncio.Queue()  # answers, then _READ_ALL or the reader's exception
        deadline = _deadline(context)
        tasks: set[asyncio.Task] = set()
        accepted = 0

        async def one(request: pb.TranslateRequest | Malformed) -> None:
            try:
                self._admissible(request)
                response = await self._translate(request, deadline)
            except RequestError as e:
                response = pb.TranslateResponse(request_id="" if isinstance(request, Malformed) else request.request_id,
                                                error=pb.Error(code=e.code.value[0], message=e.message))
            finally:
                window.release()
            await results.put(response)

        async def read() -> None:
            nonlocal accepted
            try:
                async for request in request_iterator:
                    await window.acquire()  # at most stream_window requests decode at once
                    task = asyncio.create_task(one(request))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                    accepted += 1
                await results.put(_READ_ALL)
            except Exception as e:  # the transport failed: the writer re-raises it
                await results.put(_RequestsBroke(repr(e)))

        self.streams += 1
        handler = asyncio.current_task()
        self._calls.add(handler)
        reader = None
        finished = False

        def finish(final: grpc.StatusCode) -> None:
            """Once per stream: stop its tasks, free its call slot, count it."""
            nonlocal finished
            if finished:
                return
            finished = True
            if reader:
                reader.cancel()
            for task in tasks:
                task.cancel()
            self.streams -= 1
            self._calls.discard(handler)
            self._observe("TranslateStream", final, start)

        # A client that cancels while grpc is writing an answer leaves this generator suspended
        # at its yield, and grpc closes it only when it is collected: the stream's slot and its
        # count must not wait for that.
        context.add_done_callback(lambda ctx: finish(_why_cancelled(ctx)) if ctx.cancelled() else None)
        completed = False  # the loop below ran to its end: every accepted request answered
        try:
            try:
                self._admit(stream=True)
            except RequestError as e:
                code = e.code
                await context.abort(e.code, e.message)
            reader = asyncio.create_task(read())
            answered, read_all = 0, False
            idle = self.cfg.stream_idle_seconds
            while not read_all or answered < accepted:
                try:
                    # An open stream with nothing in flight holds a call slot and a connection;
                    # one that stays so for stream_idle_seconds is closed (as proxies do).
                    item = await asyncio.wait_for(results.get(), idle if answered == accepted else None)
                except TimeoutError:
                    if answered < accepted:
                        continue  # a request arrived as the clock ran out
                    code = grpc.StatusCode.DEADLINE_EXCEEDED
                    await context.abort(code, f"the stream was idle for {idle:g} s: no request and none in "
                                              f"flight (--stream-idle-seconds); open a new stream to go on")
                if item is _READ_ALL:
                    read_all = True
                elif isinstance(item, Exception):
                    raise item
                else:
                    yield item
                    answered += 1
            completed = True
        except asyncio.CancelledError:
            if not self.stopping:
                code = _why_cancelled(context)
                raise
            code = grpc.StatusCode.UNAVAILABLE
            await context.abort(code, STOPPED)
        except _RequestsBroke:
            # The reader sees the client's cancel (as an error of the request stream), often
            # before grpc marks the call cancelled: it is the caller who ended the call.
            if code == grpc.StatusCode.OK:
                code = _why_cancelled(context)
            raise
        except Exception:
            if code == grpc.StatusCode.OK:  # not an abort of ours (those set the code first)
                code = _why_cancelled(context) if context.cancelled() else grpc.StatusCode.UNKNOWN
            raise
        finally:
            if code == grpc.StatusCode.OK and not completed:
                # Closed at a yield (GeneratorExit) before every answer went out: grpc does that
                # when the caller has left, sometimes before the done callback above has run.
                code = _why_cancelled(context)
            finish(code)

    async def stop_calls(self, wait: float = 1.0) -> None:
        """The drain's grace is used up: end every call still running with UNAVAILABLE (the
        clients retry elsewhere; grpc's own stop would end them CANCELLED, which a client must
        not retry, since it cannot tell it from its own cancelling), then wait up to ``wait``
        seconds for those statuses to go out."""
        self.stopping = True
        for task in list(self._calls):
            task.cancel()
        deadline = time.monotonic() + wait
        while self._calls and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def ListModels(self, request: pb.ListModelsRequest, context) -> pb.ListModelsResponse:
        start = time.monotonic()
        if isinstance(request, Malformed):
            self.malformed(request)
            self._observe("ListModels", grpc.StatusCode.INVALID_ARGUMENT, start)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)
        # The server's version travels as metadata: ListModelsResponse has no field for it.
        await context.send_initial_metadata(((VERSION_METADATA, __version__),))
        out = pb.ListModelsResponse()
        for m in self.models.values():
            limits = m.limits
            out.models.append(pb.ModelInfo(
                name=m.name, pairs=list(m.package.pairs), device=m.scheduler.rt.device, variant=m.scheduler.rt.variant,
                max_texts_per_request=limits.texts, max_chars_per_text=limits.chars_per_text,
                max_tokens_per_text=limits.tokens_per_sentence, max_beam_size=limits.beam,
                max_output_tokens=limits.output_tokens, max_sentences_per_request=limits.sentences,
                max_tokens_per_request=limits.tokens, device_resident=m.scheduler.rt.resident))
        for way in pivot.routes({n: m.package.pairs for n, m in self.models.items()}, self.default_model):
            out.pivots.append(pb.PivotRoute(pair=way.pair, via=way.via, first_model=way.first, second_model=way.second))
        self._observe("ListModels", grpc.StatusCode.OK, start)
        return out

    # ------------------------------------------------------------ the work
    async def translate_here(self, request: pb.TranslateRequest) -> pb.TranslateResponse:
        """Translate's checks and work for a caller in this process (nmt-bulk's actors): no call
        around it, no deadline; a refusal raises RequestError with Translate's code and message."""
        self._admissible(request)
        return await self._translate(request, None)

    async def _translate(self, request: pb.TranslateRequest, deadline: float | None) -> pb.TranslateResponse:
        source, target = request.source_lang.strip().lower(), request.target_lang.strip().lower()  # "EN" is "en"
        way = self.route(request.model, source, target)
        if way.via:
            return await self._pivoted(request, way, source, target, deadline)
        model = self.models[way.second]
        self._check_count(request, model)
        options, fixed_max_len = self._options(request.options, model)
        response = pb.TranslateResponse(model=model.name, request_id=request.request_id)
        if not request.texts:
            return response
        self.metrics.texts.labels(model.name).inc(len(request.texts))
        plans, answers = await self._run(request, model, source, target, options, fixed_max_len, deadline,
                                         self._terms(request, source, target))
        assemble(response, request.texts, plans, answers, max(1, options.n_best))
        return response

    def route(self, name: str, source: str, target: str) -> pivot.Route:
        """The model that serves the pair (the named one, else the default, else any), else a
        route through a pivot language; INVALID_ARGUMENT naming what is served when none."""
        model = self._model(name)
        way = pivot.route({n: m.package.pairs for n, m in self.models.items()}, source, target, named=name,
                          default=self.default_model)
        if way is None:
            pair = f"{source}-{target}"
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"language pair {shown(pair)} is not supported by model {model.name!r}; "
                               f"supported: {', '.join(model.package.pairs)}")
        return way

    def _check_count(self, request: pb.TranslateRequest, model: LoadedModel) -> None:
        n = len(request.texts)
        if n > model.limits.texts:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"texts: {n} texts in one request; the limit is {model.limits.texts}")

    async def _run(self, request: pb.TranslateRequest, model: LoadedModel, source: str, target: str,
                   options: DecodeOptions, fixed_max_len: int | None, deadline: float | None,
                   terms: RequestTerms | None = None
                   ) -> tuple[list[list[Segment]], dict[int, list[pb.Hypothesis | None]]]:
        """Every text's sentences and each decoded sentence's hypotheses (keyed by ``id`` of its
        Segment; None for one that failed every check)."""
        plans = self._segments(request, model, source, target, options, fixed_max_len, terms)
        self._check_response_fits(model, request, plans)
        work = [x for p in plans for x in p if x.job is not None]
        priority = Priority.of(request.priority)
        results = await self._decode(model, [x.job for x in work if x.job], deadline, priority)
        self.metrics.sentences.labels(model.name).inc(len(work))
        cut = sum(1 for hyps in results if hyps and hyps[0].stop_reason is StopReason.LENGTH_LIMIT)
        if cut:
            self.metrics.length_limited.labels(model.name).inc(cut)
        o = request.options
        answers = {id(x): [self._hypothesis(model, x, x.job, h, o) for h in hyps]
                   for x, hyps in zip(work, results) if x.job}
        # A hypothesis failed its check: the sentence again with its spans as text, hypothesis
        # by hypothesis in the place of those that failed.
        again = [x for x in work if x.plain is not None and None in answers[id(x)]]
        retried = await self._decode(model, [x.plain for x in again if x.plain], deadline, priority)
        for x, hyps in zip(again, retried):
            plain = [self._hypothesis(model, x, x.plain, h, o) for h in hyps] if x.plain else []
            answers[id(x)] = [a if a is not None else (plain[i] if i < len(plain) else None)
                              for i, a in enumerate(answers[id(x)])]
        return plans, answers

    async def _pivoted(self, request: pb.TranslateRequest, way: pivot.Route, source: str, target: str,
                       deadline: float | None) -> pb.TranslateResponse:
        """Two legs: every sentence into ``way.via`` (its best hypothesis, with the request's
        beam), then each of those on its own into the target with the request's options; the
        answer keeps the source's sentences, with the attention of the legs composed."""
        first, second = self.models[way.first], self.models[way.second]
        self._check_count(request, first)
        o1 = pb.DecodingOptions()
        o1.CopyFrom(request.options)
        o1.num_hypotheses, o1.return_scores = 0, False
        o2 = pb.DecodingOptions()
        o2.CopyFrom(request.options)
        o2.no_sentence_split = True
        options1, fixed1 = self._options(o1, first)
        options2, fixed2 = self._options(o2, second)  # both legs' options checked before any work
        response = pb.TranslateResponse(model=second.name, request_id=request.request_id, pivot_lang=way.via,
                                        pivot_model=first.name)
        if not request.texts:
            return response
        self.metrics.texts.labels(first.name).inc(len(request.texts))
        leg1 = pb.TranslateRequest(texts=request.texts, options=o1, priority=request.priority)
        # Terms: the first leg puts each in the pivot text as the target asks for it, the second keeps it.
        plans, answers1 = await self._run(leg1, first, source, way.via, options1, fixed1, deadline,
                                          self._terms(request, source, target))
        kept = RequestTerms.keeping({r for plan in plans for x in plan if x.terms for r in x.terms.replacements})
        n_best = max(1, options2.n_best)
        # Sentences that failed every check in the first leg come back as they were sent.
        middle = [(x, answers1[id(x)][0]) for plan in plans for x in plan
                  if x.job is not None and answers1[id(x)][0] is not None]
        leg2 = pb.TranslateRequest(texts=[h.text for _, h in middle], options=o2, priority=request.priority)
        try:
            plans2, answers2 = await self._run(leg2, second, way.via, target, options2, fixed2, deadline, kept) \
                if middle else ([], {})
        except RequestError as e:
            raise RequestError(e.code, f"through {way.via}: {e.message}") from None
        answers: dict[int, list[pb.Hypothesis | None]] = {
            id(x): [None] * n_best for plan in plans for x in plan if x.job is not None}
        for (x, h1), plan2 in zip(middle, plans2):
            if not plan2 or plan2[0].job is None:  # nothing to translate on in the pivot text
                answers[id(x)] = [pb.Hypothesis(text=h1.text, num_tokens=h1.num_tokens, stop_reason=h1.stop_reason)
                                  ] * n_best
                continue
            answers[id(x)] = [None if h2 is None else chained(h1, h2) for h2 in answers2[id(plan2[0])]]
        assemble(response, request.texts, plans, answers, n_best)
        return response

    async def _decode(self, model: LoadedModel, jobs: list[Job], deadline: float | None,
                      priority: Priority = Priority.INTERACTIVE) -> list[list[Hypothesis]]:
        """Every job's hypotheses: from the sentence cache where the model uses it (server/cache.py),
        else through the scheduler; its refusals as RequestError."""
        if not jobs or not self.cache.used_for(model.scheduler.rt):
            return await self._submit(model, jobs, deadline, priority)
        return await self.cache.decode(model.name, model_identity(model.package, model.scheduler.rt), jobs,
                                       lambda todo: self._submit(model, todo, deadline, priority), priority, deadline)

    async def _submit(self, model: LoadedModel, jobs: list[Job], deadline: float | None,
                      priority: Priority) -> list[list[Hypothesis]]:
        """Every job's hypotheses, through the scheduler (the jobs are one request for its fair
        admission); its refusals as RequestError."""
        if not jobs:
            return []
        tickets: list[Ticket] = []
        try:
            tickets = model.scheduler.submit_all(jobs, deadline, priority=priority)
            return list(await asyncio.gather(*(asyncio.wrap_future(t.future) for t in tickets)))
        except QueueFull as e:
            self._cancel(model, tickets)
            raise RequestError(grpc.StatusCode.RESOURCE_EXHAUSTED, f"server busy: {e}; retry with backoff") from None
        except ValueError as e:
            self._cancel(model, tickets)
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None
        except DeadlineExpired:
            self._cancel(model, tickets)
            raise RequestError(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded before the translation finished"
                               ) from None
        except JobFailed as e:
            self._cancel(model, tickets)
            raise RequestError(grpc.StatusCode.INTERNAL, str(e)) from None
        except JobCancelled as e:
            self._cancel(model, tickets)
            raise RequestError(grpc.StatusCode.UNAVAILABLE, str(e)) from None
        except asyncio.CancelledError:
            self._cancel(model, tickets)
            raise

    def _terms(self, request: pb.TranslateRequest, source: str, target: str) -> RequestTerms:
        """The request's keep spans, glossary entries and named glossary, checked (server/glossary.py)."""
        try:
            return request_terms(request.keep, [(e.source, e.target) for e in request.glossary],
                                 request.glossary_name, self.glossaries, f"{source}-{target}")
        except TermsError as e:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None

    def _segments(self, request: pb.TranslateRequest, model: LoadedModel, source: str, target: str,
                   options: DecodeOptions, fixed_max_len: int | None, terms: RequestTerms | None = None
                   ) -> list[list[Segment]]:
        """Every text's sentences with their jobs (none for a blank text: it comes back as it is,
        without touching the model), checked against the limits: characters per text, tokens
        per sentence, sentences and tokens per request. Each job's output bound is
        ``fixed_max_len`` (the caller's options.max_output_tokens), else the default rule for
        its length within the model's limit."""
        limits = model.limits
        split = not request.options.no_sentence_split
        spans: list[list[segment.Span]] = []
        for i, text in enumerate(request.texts):
            if len(text) > limits.chars_per_text:
                raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                   f"texts[{i}]: {len(text)} characters; the limit is {limits.chars_per_text}")
            spans.append(segment.split_sentences(text, source) if split else segment.whole(text))
        count = sum(len(s) for s in spans)
        if count > limits.sentences:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"texts: {count} sentences in one request; the limit is {limits.sentences}")
        sp = model.tokenizer
        special = model.package.special_ids
        max_tokens = limits.tokens_per_sentence
        prefix = model.package.target_prefix(target)
        plans: list[list[Segment]] = []
        total = 0
        def job(ids: list[int], placeholders: int, attention: bool = False) -> Job:
            limit = fixed_max_len or default_max_len(len(ids), limits.output_tokens)
            return Job(ids, dataclasses.replace(options, attention=True) if attention else options, max_len=limit,
                       bos=special["bos"], eos=special["eos"], pad=special["pad"], prefix=prefix,
                       banned=model.banned[placeholders])

        for i, (text, text_spans) in enumerate(zip(request.texts, spans)):
            plan = []
            for j, (start, end) in enumerate(text_spans):
                clean = normalize(text[start:end])
                if not has_letter(clean):  # "...", "!!!", "123": nothing to translate
                    plan.append(Segment((start, end), None, text=clean))
                    continue
                found = usable(clean, terms.find(clean)) if terms else []
                # The text itself when protection is off (and the terms are placed by attention).
                protected = protect_with_terms(clean, found, model.protector.enabled) if found else \
                    model.protector.protect(clean)
                ids = model.package.source_ids(sp.encode(protected.text, protected.symbols), target, source)
                if len(ids) > max_tokens:
                    where = f"texts[{i}]" if len(text_spans) == 1 else \
                        f"texts[{i}], sentence {j + 1} of {len(text_spans)} {shown(text[start:end])}"
                    raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"{where}: {len(ids)} tokens; the limit is {max_tokens}")
                total += len(ids)
                plain = None
                if protected.originals:
                    plain_ids = model.package.source_ids(sp.encode(clean), target, source)
                    plain = job(plain_ids, 0, bool(found)) if len(plain_ids) <= max_tokens else None
                main = job(ids, len(protected.originals), bool(found) and not protected.originals)
                placed = aligned(sp, clean, found, (plain or main).src) if found and (plain or main) else None
                plan.append(Segment((start, end), main, protected.originals, expected(clean, found), plain, placed))
            plans.append(plan)
        if total > limits.tokens:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"texts: {total} source tokens in {count} sentences in one request; the limit is "
                               f"{limits.tokens} (max texts x max tokens per text)")
        return plans

    def _check_response_fits(self, model: LoadedModel, request: pb.TranslateRequest,
                             plans: list[list[Segment]]) -> None:
        """Refuse, before decoding, a request whose answer could exceed the message limit:
        grpc would fail it only after the whole decode, as RESOURCE_EXHAUSTED, which
        clients take for "busy" and retry."""
        bound = response_bound(model, request, plans)
        if bound > self.cfg.max_message_bytes:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"the response could take up to {bound:,} bytes, more than this server's limit of "
                               f"{self.cfg.max_message_bytes:,} bytes per message; send fewer texts, ask for fewer "
                               f"hypotheses or no attention, or set a lower options.max_output_tokens")

    def _model(self, name: str) -> LoadedModel:
        if not self.models:
            raise RequestError(grpc.StatusCode.UNAVAILABLE, "the server is still loading its models")
        if not name:
            return self.models[self.default_model]
        if name not in self.models:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"unknown model {shown(name)}; loaded: {', '.join(self.models)}")
        return self.models[name]

    def _options(self, o: pb.DecodingOptions, model: LoadedModel) -> tuple[DecodeOptions, int | None]:
        """The decoding options of a request, checked, and its fixed output bound (None: the
        default rule per sentence)."""
        limits = model.limits
        beam = o.beam_size or 1
        if beam > limits.beam:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"options.beam_size: {beam}; the limit is {limits.beam}")
        n_best = o.num_hypotheses or 1
        if n_best > beam:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"options.num_hypotheses: {n_best} is more than beam_size {beam}")
        alpha = o.length_penalty or LENGTH_PENALTY
        if not math.isfinite(alpha) or not 0.0 <= alpha <= 10.0:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"options.length_penalty: {alpha}; it must be between 0 and 10")
        if o.max_output_tokens > limits.output_tokens:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"options.max_output_tokens: {o.max_output_tokens}; the limit is {limits.output_tokens}")
        return DecodeOptions(beam_size=beam, n_best=n_best, alpha=alpha, attention=o.return_attention), \
            (o.max_output_tokens or None)

    def _hypothesis(self, model: LoadedModel, x: Segment, job: Job, hyp: Hypothesis,
                    o: pb.DecodingOptions) -> pb.Hypothesis | None:
        """One hypothesis of a sentence (decoded by ``job``: its own, or its ``plain`` one), its
        placeholders put back in its text; None when it fails the check: a placeholder not back
        exactly once, a number the source lacks, a span of the source missing (models with the
        placeholders)."""
        sp = model.tokenizer
        text = sp.decode(hyp.tokens)
        if job is x.job and x.originals:
            checked = restore_checked(text, x.originals)
            if checked is None:
                return None
            text = checked
        elif x.terms is not None:  # the terms read as text: each put in place by the attention
            placed = place(sp, x.terms, hyp, model.tokenizer.not_text)
            if placed is None:
                return None
            text = placed
        # An internal symbol's text (spelled out of ordinary pieces) only where the source has it.
        text = remove(text, model.symbols, lambda m: m.group() if m.group() in x.text else None)
        if not faithful(text, x.text, spans=model.protector.enabled):
            return None
        out = pb.Hypothesis(text=text, num_tokens=len(hyp.tokens), stop_reason=WIRE_STOP_REASON[hyp.stop_reason])
        if o.return_scores:
            out.score = hyp.score
        if o.return_attention and hyp.attention is not None:
            # The pieces are what the model saw and wrote: placeholders (``<ph1>``) where the
            # text has a protected span, so that they line up with the attention matrix.
            out.source_pieces.extend(sp.id_to_piece(i) for i in job.src)
            out.target_pieces.extend(sp.id_to_piece(i) for i in hyp.tokens)
            out.attention.extend(np.asarray(hyp.attention, dtype=np.float32).ravel().tolist())
        return out

    @staticmethod
    def _cancel(model: LoadedModel, tickets: list[Ticket]) -> None:
        for t in tickets:
            model.scheduler.cancel(t)

    def _admit(self, stream: bool = False) -> None:
        """Raise RESOURCE_EXHAUSTED for a call beyond --max-concurrent-rpcs (or a stream beyond
        --max-streams); the caller has counted itself in ``active`` (and ``streams``). Health
        is not counted: it has room of its own (server/main.py), so it answers however busy
        or however many idle clients hold calls open."""
        if stream and self.streams > self.cfg.max_streams:
            raise RequestError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                               f"{self.streams - 1} streams are open; the limit is {self.cfg.max_streams} "
                               f"(--max-streams): try again later or send Translate calls")
        if self.active > self.cfg.max_concurrent_rpcs:
            raise RequestError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                               f"{self.active - 1} calls are in progress; the limit is "
                               f"{self.cfg.max_concurrent_rpcs} (--max-concurrent-rpcs): try again later")

    def _admissible(self, request: pb.TranslateRequest | Malformed) -> None:
        """Raise RequestError for a message that is not a request, or while draining."""
        if isinstance(request, Malformed):
            self.malformed(request)
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, request.reason)
        if self.draining:
            raise RequestError(grpc.StatusCode.UNAVAILABLE, "the server is shutting down; retry elsewhere")

    def malformed(self, request: Malformed) -> None:
        """One log line for a malformed message, at most one every ``LOG_EVERY`` seconds
        (with how many were not logged): a flood of garbage must not flood the log."""
        self._malformed_unlogged += 1
        now = time.monotonic()
        if now - self._malformed_logged_at >= LOG_EVERY:
            log.warning("malformed request answered INVALID_ARGUMENT: %s (%d such requests since the last line)",
                        request.reason, self._malformed_unlogged)
            self._malformed_logged_at, self._malformed_unlogged = now, 0

    def _observe(self, method: str, code: grpc.StatusCode, start: float) -> None:
        self.metrics.requests.labels(method, code.name).inc()
        self.metrics.latency.labels(method).observe(time.monotonic() - start)


def assemble(response: pb.TranslateResponse, texts: Sequence[str], plans: list[list[Segment]],
             answers: dict[int, list[pb.Hypothesis | None]], n_best: int) -> None:
    """Every text's translation into ``response``: its sentences with their hypotheses (what
    no check passed, and a sentence without a letter: the sentence as it came), and the whole
    text's hypotheses from them."""
    for text, sentences in zip(texts, plans):
        translation = response.translations.add()
        for x in sentences:
            start, end = x.span
            seg = translation.segments.add(source=text[start:end], start=start, end=end)
            got = answers[id(x)] if x.job is not None else [None] * n_best
            seg.hypotheses.extend(h if h is not None else pb.Hypothesis(text=text[start:end]) for h in got)
        translation.hypotheses.extend(whole_text(text, translation.segments))


def chained(first: pb.Hypothesis, second: pb.Hypothesis) -> pb.Hypothesis:
    """A hypothesis through a pivot: the second leg's text, score and tokens; cut short if either
    leg was; with attention, the source's pieces and the legs' attention composed."""
    out = pb.Hypothesis()
    out.CopyFrom(second)
    if first.stop_reason == pb.STOP_REASON_LENGTH_LIMIT:
        out.stop_reason = pb.STOP_REASON_LENGTH_LIMIT
    if second.attention and first.attention:
        a1 = np.asarray(first.attention, dtype=np.float32).reshape(len(first.target_pieces), len(first.source_pieces))
        a2 = np.asarray(second.attention, dtype=np.float32).reshape(len(second.target_pieces),
                                                                    len(second.source_pieces))
        composed = pivot.compose_attention(a1, first.target_pieces, a2, second.source_pieces)
        del out.source_pieces[:], out.attention[:]
        out.source_pieces.extend(first.source_pieces)
        out.attention.extend(composed.ravel().tolist())
    return out


def whole_text(text: str, segments: Sequence[pb.Segment]) -> list[pb.Hypothesis]:
    """A text's hypotheses from its sentences': the i-th puts every sentence's i-th hypothesis
    in that sentence's place and keeps the rest of the text (whitespace) as it is. The pieces
    and attention of a text of one sentence move to the text's hypotheses (where clients
    found them before texts were split), so that the response carries them once."""
    if not segments:
        return [pb.Hypothesis(text=text)]  # blank: as it came, nothing decoded
    spans = [(s.start, s.end) for s in segments]
    out = []
    for i in range(min(len(s.hypotheses) for s in segments)):
        hyps = [s.hypotheses[i] for s in segments]
        joined = segment.join(text, spans, [h.text for h in hyps])
        if len(hyps) == 1:
            h = pb.Hypothesis()
            h.CopyFrom(hyps[0])
            h.text = joined
            for moved in (hyps[0].source_pieces, hyps[0].target_pieces, hyps[0].attention):
                del moved[:]
        else:
            cut = any(h.stop_reason == pb.STOP_REASON_LENGTH_LIMIT for h in hyps)
            h = pb.Hypothesis(text=joined, score=sum(h.score for h in hyps), num_tokens=sum(h.num_tokens for h in hyps),
                              stop_reason=pb.STOP_REASON_LENGTH_LIMIT if cut else pb.STOP_REASON_END_OF_SENTENCE)
        out.append(h)
    return out


# A hypothesis's protobuf fields at their widest: its own framing, the text's, score,
# num_tokens and stop_reason (a tag byte and a 5-byte length or varint each; score 4 bytes).
HYPOTHESIS_FIELDS = 6 + 6 + 5 + 6 + 6


def response_bound(model: LoadedModel, request: pb.TranslateRequest, plans: list[list[Segment]]) -> int:
    """An upper bound of the serialized TranslateResponse's size in bytes: every hypothesis
    at its length limit, each token the vocabulary's longest piece and every placeholder put
    back as its span, or decoded again with the spans as text, or the sentence as it came,
    whichever is longest (protobuf framing counted at its widest: one tag byte and a 5-byte
    length or varint for each field)."""
    o = request.options
    n_best = max(1, o.num_hypotheses)
    piece = model.longest_piece_bytes

    def text_size(x: Segment, text: str) -> int:
        """One sentence's hypothesis text: a checked output holds each placeholder once, put back
        as its span; what fails every check is the sentence as it came."""
        sizes = [len(text[x.span[0]:x.span[1]].encode())]
        terms = sum(len(s.encode()) for s in x.terms.replacements) if x.terms else 0  # placed by attention
        if x.job is not None:
            sizes.append(x.job.max_len * piece + sum(len(s.encode()) for s in x.originals) + terms)
        if x.plain is not None:
            sizes.append(x.plain.max_len * piece + terms)
        return max(sizes)

    def hypothesis(x: Segment, text: str) -> int:
        """One sentence's hypothesis with its attention."""
        size = HYPOTHESIS_FIELDS + text_size(x, text)
        if o.return_attention:
            sp = model.tokenizer
            size += max([0, *(sum(6 + len(sp.id_to_piece(i).encode()) for i in job.src)  # source pieces
                              + job.max_len * (6 + piece)  # target pieces
                              + 6 + 4 * job.max_len * len(job.src)  # packed float32 attention
                              for job in (x.job, x.plain) if job is not None)])
        return size

    total = 16 + len(model.name.encode()) + len(request.request_id.encode())
    for text, sentences in zip(request.texts, plans):
        text_bytes = len(text.encode())
        total += 6 + 6 + 6 + text_bytes  # the translation; a blank text's one hypothesis
        for x in sentences:  # the segments: source, start, end, hypotheses
            total += 6 + 6 + 4 * (x.span[1] - x.span[0]) + 12 + n_best * hypothesis(x, text)
        if sentences:  # the text's hypotheses: its sentences' texts in place (attention moved, not copied)
            total += n_best * (HYPOTHESIS_FIELDS + text_bytes + sum(text_size(x, text) for x in sentences))
    return total


def _why_cancelled(context: grpc.aio.ServicerContext) -> grpc.StatusCode:
    """A handler cancelled by grpc: because its deadline passed, or because the caller left."""
    remaining = context.time_remaining()
    # The caller's own deadline timer cancels the call; it arrives here a little before our
    # clock reaches the deadline (observed up to tens of milliseconds under load).
    return grpc.StatusCode.DEADLINE_EXCEEDED if remaining is not None and remaining <= DEADLINE_SLACK else \
        grpc.StatusCode.CANCELLED


def _deadline(context: grpc.aio.ServicerContext) -> float | None:
    remaining = context.time_remaining()
    return None if remaining is None else time.monotonic() + remaining
