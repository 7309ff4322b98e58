"""A fixed list of requests replayed by closed-loop gRPC clients, every answer kept in order.

``nmt-bench``'s server rows and ``bench/load/gateway_load.py`` use it: they score the answers
(BLEU, identity with the offline engines), so every request is sent exactly once and its
response kept. ``nmt-loadtest`` (clients/loadtest.py) is the other kind of load: sentences
sent for a duration at a rate or a concurrency, latency percentiles over time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from engine.defaults import LENGTH_PENALTY
from nmt.v1 import translator_pb2 as pb
from nmt.v1 import translator_pb2_grpc as pb_grpc


@dataclass(frozen=True)
class Request:
    texts: list[str]
    source_lang: str
    target_lang: str


@dataclass(frozen=True)
class LoadResult:
    seconds: float  # wall time of the whole load, first request sent to last answer
    latencies: list[float]  # per request, in the order of ``requests``
    responses: list[pb.TranslateResponse]


async def _load(address: str, requests: Sequence[Request], concurrency: int, beam_size: int,
                alpha: float) -> LoadResult:
    # Each text as one sentence: the offline engines this is compared with do not split.
    options = pb.DecodingOptions(beam_size=beam_size, length_penalty=alpha if beam_size > 1 else 0.0,
                                 no_sentence_split=True)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.TranslatorStub(channel)
        first = requests[0]
        await stub.Translate(pb.TranslateRequest(texts=first.texts[:1], source_lang=first.source_lang,
                                                 target_lang=first.target_lang, options=options))  # warm-up
        todo = list(range(len(requests)))[::-1]
        latencies = [0.0] * len(requests)
        responses: list[pb.TranslateResponse | None] = [None] * len(requests)

        async def client() -> None:
            while todo:
                i = todo.pop()
                r = requests[i]
                t0 = time.perf_counter()
                responses[i] = await stub.Translate(pb.TranslateRequest(
                    texts=r.texts, source_lang=r.source_lang, target_lang=r.target_lang, options=options), timeout=3600)
                latencies[i] = time.perf_counter() - t0

        start = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        seconds = time.perf_counter() - start
    return LoadResult(seconds, latencies, [r for r in responses if r is not None])


def run_load(address: str, requests: Sequence[Request], concurrency: int, beam_size: int = 1,
             alpha: float = LENGTH_PENALTY) -> LoadResult:
    """``concurrency`` closed-loop clients send ``requests`` (each waits for its answer before
    taking the next one); one untimed warm-up request first."""
    return asyncio.run(_load(address, requests, concurrency, beam_size, alpha))
