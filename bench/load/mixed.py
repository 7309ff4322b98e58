"""Mixed load: interactive one-sentence requests while bulk clients keep the server saturated.

    python -m bench.load.mixed --package packages/default --int8 --seconds 20

One ``nmt-serve`` (server/child.py). Three phases of ``--seconds`` each, one after another:

1. idle: ``--interactive-clients`` clients alone, each sending one sentence (a test verse,
   one text), waiting for its answer and ``--think`` seconds before the next;
2. bulk alone: ``--bulk-clients`` closed-loop clients, each sending requests of
   ``--bulk-texts`` texts (priority ``--bulk-priority``, default bulk) until the time is up;
3. mixed: both at once, the interactive clients for as long as the bulk ones run.

Reported: interactive latency p50/p99 idle and mixed (and their ratio: the target is a p99
at most 3x idle), bulk throughput alone and mixed in sentences/s and output tokens/s (the
target: at most 10 % lower mixed), all output tokens/s mixed (bulk and interactive: what the
server made of its capacity; the interactive clients' share of it is not the bulk clients'
any more), and whether every interactive sentence came back the same idle and mixed (a text
decoded in a mixed batch equals it decoded alone). A bulk phase lasts
from its first request to its last answer (the clients stop sending at ``--seconds``), so
no request is cut short. ``--bulk-priority interactive`` sends the bulk work as interactive
(what a client that does not say gets): fair turns between requests without the priority.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np

from corpus.bible import bible_pairs
from nmt.v1 import translator_pb2 as pb
from nmt.v1 import translator_pb2_grpc as pb_grpc
from server.child import ServerProcess
from server.config import INTERACTIVE_ROWS, MAX_BATCH_ROWS

PRIORITIES = {"bulk": pb.PRIORITY_BULK, "interactive": pb.PRIORITY_INTERACTIVE}


@dataclass
class Interactive:
    latencies: list[float] = field(default_factory=list)
    answers: dict[str, str] = field(default_factory=dict)  # sentence -> its translation
    tokens: int = 0  # output tokens of the best hypotheses


@dataclass
class Bulk:
    seconds: float = 0.0  # first request sent to last answer
    requests: int = 0
    sentences: int = 0
    tokens: int = 0  # output tokens of the best hypotheses

    @property
    def sentences_per_s(self) -> float:
        return self.sentences / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def percentile_ms(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1000 if values else float("nan")


async def interactive_client(stub, sentences: list[str], offset: int, beam: int, think: float,
                             running: asyncio.Event, out: Interactive) -> None:
    options = pb.DecodingOptions(beam_size=beam)
    i = offset
    while running.is_set():
        text = sentences[i % len(sentences)]
        i += 1
        start = time.perf_counter()
        response = await stub.Translate(pb.TranslateRequest(texts=[text], source_lang="en", target_lang="de",
                                                            options=options, priority=pb.PRIORITY_INTERACTIVE),
                                        timeout=600)
        out.latencies.append(time.perf_counter() - start)
        out.answers[text] = response.translations[0].hypotheses[0].text
        out.tokens += response.translations[0].hypotheses[0].num_tokens
        await asyncio.sleep(think)


async def bulk_client(stub, sentences: list[str], offset: int, texts: int, beam: int, priority: int,
                      until: float, out: Bulk) -> None:
    options = pb.DecodingOptions(beam_size=beam)
    i = offset
    while time.monotonic() < until:
        chunk = [sentences[(i + j) % len(sentences)] for j in range(texts)]
        i += texts
        response = await stub.Translate(pb.TranslateRequest(texts=chunk, source_lang="en", target_lang="de",
                                                            options=options, priority=priority), timeout=600)
        out.requests += 1
        out.sentences += sum(len(t.segments) for t in response.translations)
        out.tokens += sum(t.hypotheses[0].num_tokens for t in response.translations)


async def phase(address: str, args: argparse.Namespace, sentences: list[str], interactive: bool,
                bulk: bool) -> tuple[Interactive, Bulk]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.TranslatorStub(channel)
        await stub.Translate(pb.TranslateRequest(texts=sentences[:1], source_lang="en", target_lang="de"),
                             timeout=600)  # the channel is up
        inter, work = Interactive(), Bulk()
        running = asyncio.Event()
        running.set()
        step = max(1, len(sentences) // max(1, args.interactive_clients + args.bulk_clients))
        clients = [interactive_client(stub, sentences, c * step, args.interactive_beam, args.think, running, inter)
                   for c in range(args.interactive_clients if interactive else 0)]
        waiting = [asyncio.ensure_future(c) for c in clients]
        start = time.monotonic()
        if bulk:
            await asyncio.gather(*(bulk_client(stub, sentences, (args.interactive_clients + c) * step,
                                               args.bulk_texts, args.bulk_beam, PRIORITIES[args.bulk_priority],
                                               start + args.seconds, work)
                                   for c in range(args.bulk_clients)))
            work.seconds = time.monotonic() - start
        else:
            await asyncio.sleep(args.seconds)
        running.clear()
        await asyncio.gather(*waiting)
        return inter, work


def report(idle: Interactive, alone: Bulk, mixed_i: Interactive, mixed_b: Bulk) -> dict:
    same = [s for s in mixed_i.answers if s in idle.answers]
    return {
        "interactive_idle": {"requests": len(idle.latencies), "p50_ms": percentile_ms(idle.latencies, 50),
                             "p99_ms": percentile_ms(idle.latencies, 99)},
        "interactive_mixed": {"requests": len(mixed_i.latencies), "p50_ms": percentile_ms(mixed_i.latencies, 50),
                              "p99_ms": percentile_ms(mixed_i.latencies, 99)},
        "bulk_alone": {"requests": alone.requests, "sentences": alone.sentences, "seconds": alone.seconds,
                       "sentences_per_s": alone.sentences_per_s, "tokens_per_s": alone.tokens_per_s},
        "bulk_mixed": {"requests": mixed_b.requests, "sentences": mixed_b.sentences, "seconds": mixed_b.seconds,
                       "sentences_per_s": mixed_b.sentences_per_s, "tokens_per_s": mixed_b.tokens_per_s},
        "p99_ratio": percentile_ms(mixed_i.latencies, 99) / percentile_ms(idle.latencies, 99),
        "p50_ratio": percentile_ms(mixed_i.latencies, 50) / percentile_ms(idle.latencies, 50),
        "bulk_tokens_ratio": mixed_b.tokens_per_s / alone.tokens_per_s if alone.tokens_per_s else float("nan"),
        "all_tokens_per_s_mixed": (mixed_b.tokens + mixed_i.tokens) / mixed_b.seconds if mixed_b.seconds else 0.0,
        "same_translations": f"{sum(idle.answers[s] == mixed_i.answers[s] for s in same)}/{len(same)}",
    }


def table(r: dict) -> str:
    ii, im, ba, bm = r["interactive_idle"], r["interactive_mixed"], r["bulk_alone"], r["bulk_mixed"]
    return "\n".join([
        "| | idle / bulk alone | mixed | mixed / alone | target |",
        "|---|---:|---:|---:|---|",
        f"| interactive p50 ms | {ii['p50_ms']:.1f} | {im['p50_ms']:.1f} | {r['p50_ratio']:.2f}x | |",
        f"| interactive p99 ms | {ii['p99_ms']:.1f} | {im['p99_ms']:.1f} | {r['p99_ratio']:.2f}x | <= 3x |",
        f"| interactive requests | {ii['requests']} | {im['requests']} | | |",
        f"| bulk sentences/s | {ba['sentences_per_s']:.1f} | {bm['sentences_per_s']:.1f} | "
        f"{bm['sentences_per_s'] / ba['sentences_per_s'] if ba['sentences_per_s'] else float('nan'):.2f}x | |",
        f"| bulk output tokens/s | {ba['tokens_per_s']:.0f} | {bm['tokens_per_s']:.0f} | "
        f"{r['bulk_tokens_ratio']:.2f}x | >= 0.90x |",
        f"| all output tokens/s (bulk + interactive) | {ba['tokens_per_s']:.0f} | {r['all_tokens_per_s_mixed']:.0f} | "
        f"{r['all_tokens_per_s_mixed'] / ba['tokens_per_s'] if ba['tokens_per_s'] else float('nan'):.2f}x | |",
        f"| bulk requests (sentences) | {ba['requests']} ({ba['sentences']}) | {bm['requests']} ({bm['sentences']}) "
        "| | |",
        f"| interactive answers the same idle and mixed | | {r['same_translations']} | | all |",
    ])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.load.mixed", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--package", required=True, help="the model package to serve")
    p.add_argument("--int8", action="store_true", help="serve the int8 graphs")
    p.add_argument("--threads", type=int, default=1, help="server onnxruntime threads (default 1)")
    p.add_argument("--device", default="cpu", help="the server's --device (default cpu)")
    p.add_argument("--max-batch-rows", type=int, default=MAX_BATCH_ROWS,
                   help=f"the server's --max-batch-rows (default {MAX_BATCH_ROWS}, the server's)")
    p.add_argument("--interactive-rows", type=int, default=INTERACTIVE_ROWS,
                   help=f"the server's --interactive-rows (default {INTERACTIVE_ROWS}, the server's; 0: bulk rows are "
                        "never suspended)")
    p.add_argument("--seconds", type=float, default=20.0, help="each phase's length (default 20)")
    p.add_argument("--interactive-clients", type=int, default=2, help="default 2")
    p.add_argument("--interactive-beam", type=int, default=4, help="default 4")
    p.add_argument("--think", type=float, default=0.25,
                   help="seconds an interactive client waits between its requests (default 0.25)")
    p.add_argument("--bulk-clients", type=int, default=2, help="default 2")
    p.add_argument("--bulk-texts", type=int, default=32, help="texts in each bulk request (default 32)")
    p.add_argument("--bulk-beam", type=int, default=4, help="default 4")
    p.add_argument("--bulk-priority", choices=sorted(PRIORITIES), default="bulk", help="default bulk")
    p.add_argument("--json", dest="out", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    sentences = [pair.src for pair in bible_pairs(("en-de",), "test")]
    # The cache is off in a ServerProcess: the scheduler is measured.
    extra = [*(["--int8"] if args.int8 else []), "--interactive-rows", str(args.interactive_rows)]
    with ServerProcess(args.package, args.threads, max_batch_rows=args.max_batch_rows, device=args.device,
                       extra=extra) as server:
        idle, _ = asyncio.run(phase(server.address, args, sentences, interactive=True, bulk=False))
        print(f"idle: {len(idle.latencies)} interactive requests", file=sys.stderr, flush=True)
        _, alone = asyncio.run(phase(server.address, args, sentences, interactive=False, bulk=True))
        print(f"bulk alone: {alone.sentences} sentences in {alone.seconds:.1f} s", file=sys.stderr, flush=True)
        mixed_i, mixed_b = asyncio.run(phase(server.address, args, sentences, interactive=True, bulk=True))
    r = report(idle, alone, mixed_i, mixed_b)
    print(table(r))
    if args.out:
        command = " ".join(["python -m bench.load.mixed", *(argv if argv is not None else sys.argv[1:])])
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"command": command, **r}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
