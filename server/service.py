"""The gRPC servicer: validate, enqueue, await. No decoding happens here.

Every rejection names the item and the limit (INVALID_ARGUMENT); a full queue answers
RESOURCE_EXHAUSTED at once; an expired deadline answers DEADLINE_EXCEEDED after freeing
the text's rows; a model failure on one request answers INTERNAL without a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass

import grpc
import numpy as np
import sentencepiece as spm

from export.package import ModelPackage
from nmt.v1 import translator_pb2 as pb
from nmt.v1 import translator_pb2_grpc as pb_grpc
from server.config import ServerConfig
from server.decoding import DecodeOptions, Hypothesis, Job, default_max_len
from server.metrics import Metrics
from server.scheduler import DeadlineExpired, JobCancelled, JobFailed, QueueFull, Scheduler, Ticket

log = logging.getLogger("nmt.server")
DEFAULT_LENGTH_PENALTY = 0.6


class RequestError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclass
class LoadedModel:
    name: str
    package: ModelPackage
    tokenizer: spm.SentencePieceProcessor
    scheduler: Scheduler

    @property
    def max_source_tokens(self) -> int:
        return self.package.max_source_tokens

    @property
    def max_target_tokens(self) -> int:
        return self.package.max_target_tokens


class TranslatorService(pb_grpc.TranslatorServicer):
    def __init__(self, models: dict[str, LoadedModel], cfg: ServerConfig, metrics: Metrics) -> None:
        self.cfg, self.metrics = cfg, metrics
        self.draining = False
        self.active = 0  # RPCs being handled (drain waits for them)
        self.set_models(models)

    def set_models(self, models: dict[str, LoadedModel]) -> None:
        self.models = models
        self.default_model = next(iter(models), "")

    # ------------------------------------------------------------ RPCs
    async def Translate(self, request: pb.TranslateRequest, context: grpc.aio.ServicerContext) -> pb.TranslateResponse:
        start = time.monotonic()
        code = grpc.StatusCode.OK
        self.active += 1
        try:
            if self.draining:
                raise RequestError(grpc.StatusCode.UNAVAILABLE, "the server is shutting down; retry elsewhere")
            return await self._translate(request, _deadline(context))
        except RequestError as e:
            code = e.code
            await context.abort(e.code, e.message)
            raise  # unreachable: abort raises
        except asyncio.CancelledError:
            code = grpc.StatusCode.CANCELLED
            raise
        finally:
            self.active -= 1
            self._observe("Translate", code, start)

    async def TranslateStream(self, request_iterator, context: grpc.aio.ServicerContext):
        start = time.monotonic()
        window = asyncio.Semaphore(self.cfg.stream_window)
        results: asyncio.Queue = asyncio.Queue()
        deadline = _deadline(context)
        pending = 0

        async def one(request: pb.TranslateRequest) -> None:
            try:
                if self.draining:
                    raise RequestError(grpc.StatusCode.UNAVAILABLE, "the server is shutting down; retry elsewhere")
                response = await self._translate(request, deadline)
            except RequestError as e:
                response = pb.TranslateResponse(request_id=request.request_id,
                                                error=pb.Error(code=e.code.value[0], message=e.message))
            finally:
                window.release()
            await results.put(response)

        tasks = set()
        self.active += 1
        try:
            async for request in request_iterator:
                await window.acquire()
                task = asyncio.create_task(one(request))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                pending += 1
                while not results.empty():
                    yield results.get_nowait()
                    pending -= 1
            while pending:
                yield await results.get()
                pending -= 1
        finally:
            for task in tasks:
                task.cancel()
            self.active -= 1
            self._observe("TranslateStream", grpc.StatusCode.OK, start)

    async def ListModels(self, request: pb.ListModelsRequest, context) -> pb.ListModelsResponse:
        start = time.monotonic()
        out = pb.ListModelsResponse()
        for m in self.models.values():
            out.models.append(pb.ModelInfo(
                name=m.name, pairs=list(m.package.pairs), device=m.scheduler.rt.device, variant=m.scheduler.rt.variant,
                max_texts_per_request=self.cfg.max_texts, max_chars_per_text=self.cfg.max_chars,
                max_tokens_per_text=min(self.cfg.max_tokens, m.max_source_tokens), max_beam_size=self.cfg.max_beam,
                max_output_tokens=min(self.cfg.max_output_tokens, m.max_target_tokens)))
        self._observe("ListModels", grpc.StatusCode.OK, start)
        return out

    # ------------------------------------------------------------ the work
    async def _translate(self, request: pb.TranslateRequest, deadline: float | None) -> pb.TranslateResponse:
        model = self._model(request.model)
        tags = model.package.language_tags
        pair = f"{request.source_lang}-{request.target_lang}"
        if pair not in model.package.pairs:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"language pair {pair!r} is not supported by model {model.name!r}; "
                               f"supported: {', '.join(model.package.pairs)}")
        n = len(request.texts)
        if n > self.cfg.max_texts:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"texts: {n} texts in one request; the limit is {self.cfg.max_texts}")
        options, max_out = self._options(request.options, model)
        response = pb.TranslateResponse(model=model.name, request_id=request.request_id)
        if n == 0:
            return response
        self.metrics.texts.labels(model.name).inc(n)
        sp = model.tokenizer
        special = model.package.special_ids
        max_tokens = min(self.cfg.max_tokens, model.max_source_tokens)
        sources: list[list[int] | None] = []
        for i, text in enumerate(request.texts):
            if len(text) > self.cfg.max_chars:
                raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                   f"texts[{i}]: {len(text)} characters; the limit is {self.cfg.max_chars}")
            if not text.strip():
                sources.append(None)  # empty in, empty out, without touching the model
                continue
            ids = [tags[request.target_lang], *sp.encode(text), special["eos"]]
            if len(ids) > max_tokens:
                raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                   f"texts[{i}]: {len(ids)} tokens; the limit is {max_tokens}")
            sources.append(ids)
        tickets: list[Ticket | None] = []
        try:
            for ids in sources:
                if ids is None:
                    tickets.append(None)
                    continue
                limit = max_out if request.options.max_output_tokens else default_max_len(len(ids), max_out)
                job = Job(ids, options, max_len=limit, bos=special["bos"], eos=special["eos"], pad=special["pad"])
                tickets.append(model.scheduler.submit(job, deadline))
            results = await asyncio.gather(*(asyncio.wrap_future(t.future) for t in tickets if t is not None))
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
        it = iter(results)
        for ids in sources:
            translation = response.translations.add()
            if ids is None:
                translation.hypotheses.add(text="", score=0.0)
                continue
            for hyp in next(it):
                translation.hypotheses.append(self._hypothesis(model, ids, hyp, request.options))
        return response

    def _model(self, name: str) -> LoadedModel:
        if not self.models:
            raise RequestError(grpc.StatusCode.UNAVAILABLE, "the server is still loading its models")
        if not name:
            return self.models[self.default_model]
        if name not in self.models:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"unknown model {name!r}; loaded: {', '.join(self.models)}")
        return self.models[name]

    def _options(self, o: pb.DecodingOptions, model: LoadedModel) -> tuple[DecodeOptions, int]:
        beam = o.beam_size or 1
        if beam > self.cfg.max_beam:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"options.beam_size: {beam}; the limit is {self.cfg.max_beam}")
        n_best = o.num_hypotheses or 1
        if n_best > beam:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"options.num_hypotheses: {n_best} is more than beam_size {beam}")
        alpha = o.length_penalty or DEFAULT_LENGTH_PENALTY
        if not math.isfinite(alpha) or not 0.0 <= alpha <= 10.0:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"options.length_penalty: {alpha}; it must be between 0 and 10")
        limit = min(self.cfg.max_output_tokens, model.max_target_tokens)
        if o.max_output_tokens > limit:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"options.max_output_tokens: {o.max_output_tokens}; the limit is {limit}")
        return DecodeOptions(beam_size=beam, n_best=n_best, alpha=alpha, attention=o.return_attention), \
            (o.max_output_tokens or limit)

    def _hypothesis(self, model: LoadedModel, src: list[int], hyp: Hypothesis, o: pb.DecodingOptions) -> pb.Hypothesis:
        sp = model.tokenizer
        out = pb.Hypothesis(text=sp.decode(hyp.tokens), num_tokens=len(hyp.tokens))
        if o.return_scores:
            out.score = hyp.score
        if o.return_attention and hyp.attention is not None:
            out.source_pieces.extend(sp.id_to_piece(i) for i in src)
            out.target_pieces.extend(sp.id_to_piece(i) for i in hyp.tokens)
            out.attention.extend(np.asarray(hyp.attention, dtype=np.float32).ravel().tolist())
        return out

    @staticmethod
    def _cancel(model: LoadedModel, tickets: list[Ticket | None]) -> None:
        for t in tickets:
            if t is not None:
                model.scheduler.cancel(t)

    def _observe(self, method: str, code: grpc.StatusCode, start: float) -> None:
        self.metrics.requests.labels(method, code.name).inc()
        self.metrics.latency.labels(method).observe(time.monotonic() - start)


def _deadline(context: grpc.aio.ServicerContext) -> float | None:
    remaining = context.time_remaining()
    return None if remaining is None else time.monotonic() + remaining
