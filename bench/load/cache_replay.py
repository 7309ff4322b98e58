"""A repeated workload with the sentence cache off and on: hit rate, latency and throughput.

    python -m bench.load.cache_replay --package packages/default --threads 2 --sentences 200 --rounds 5 --clients 8

As a web page is translated by its visitors: ``--clients`` closed-loop clients each send the
same ``--sentences`` (the first en-de test verses, one sentence a request, beam 4 as the
gateway asks) ``--rounds`` times over, each client starting at its own place in the list
(visitors do not arrive in step). One ``nmt-serve`` (a child process, the served int8 graphs)
per setting: ``--cache off``, then ``--cache auto`` (on, on the CPU). Reported for each: the hit
rate (the server's nmt_cache_* counters: hits / (hits + misses)), p50/p99 latency of a request,
requests/s, the p50 of a client's first round against its later rounds, and what an entry
holds (nmt_cache_bytes / nmt_cache_entries). Every answer of the cached run is checked against
the uncached run's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import numpy as np

from cli import free_port
from corpus.bible import bible_pairs
from engine.defaults import BEAM_SIZE
from nmt.v1 import translator_pb2 as pb
from nmt.v1 import translator_pb2_grpc as pb_grpc
from server.child import ROOT, ServerProcess

MODES = ("off", "auto")


def scrape(port: int) -> dict[str, float]:
    """The server's nmt_cache_* samples, summed over their labels."""
    out: dict[str, float] = {}
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("nmt_cache_"):
                name = line.split("{")[0].split()[0]
                out[name] = out.get(name, 0.0) + float(line.split()[-1])
    return out


async def replay(address: str, sentences: list[str], rounds: int, clients: int,
                 beam: int) -> tuple[float, list[tuple[int, float]], dict[str, str]]:
    """Wall seconds, (round, latency) of every request, and each sentence's translation."""
    options = pb.DecodingOptions(beam_size=beam)
    results: list[tuple[int, float]] = []
    answers: dict[str, str] = {}
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.TranslatorStub(channel)
        await stub.Translate(pb.TranslateRequest(texts=["Thank you."], source_lang="en", target_lang="de",
                                                 options=options))  # warm-up, not in the workload

        async def client(c: int) -> None:
            start = c * len(sentences) // clients
            order = sentences[start:] + sentences[:start]
            for r in range(rounds):
                for text in order:
                    t0 = time.perf_counter()
                    response = await stub.Translate(pb.TranslateRequest(texts=[text], source_lang="en",
                                                                        target_lang="de", options=options),
                                                    timeout=3600)
                    results.append((r, time.perf_counter() - t0))
                    got = response.translations[0].hypotheses[0].text
                    if answers.setdefault(text, got) != got:
                        raise AssertionError(f"two answers for {text!r}: {answers[text]!r} and {got!r}")

        t0 = time.perf_counter()
        await asyncio.gather(*(client(c) for c in range(clients)))
        return time.perf_counter() - t0, results, answers


def measure(package: str, threads: int, mode: str, sentences: list[str], rounds: int, clients: int,
            beam: int) -> tuple[dict, dict[str, str]]:
    metrics_port = free_port()
    extra = ["--cache", mode, "--metrics-port", str(metrics_port), "--metrics-host", "127.0.0.1"]
    with ServerProcess(package, threads, extra=extra) as server:
        before = scrape(metrics_port)
        seconds, results, answers = asyncio.run(replay(server.address, sentences, rounds, clients, beam))
        after = scrape(metrics_port)
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    hits, misses = delta.get("nmt_cache_hits_total", 0.0), delta.get("nmt_cache_misses_total", 0.0)
    latencies = [s for _, s in results]
    first = [s for r, s in results if r == 0]
    later = [s for r, s in results if r > 0] or [0.0]
    entries = after.get("nmt_cache_entries", 0.0)
    return {"cache": mode, "requests": len(results), "seconds": seconds, "rps": len(results) / seconds,
            "hit_rate": hits / (hits + misses) if hits + misses else 0.0, "hits": hits, "misses": misses,
            "shared": delta.get("nmt_cache_shared_total", 0.0),
            "p50_ms": float(np.percentile(latencies, 50)) * 1000, "p99_ms": float(np.percentile(latencies, 99)) * 1000,
            "first_round_p50_ms": float(np.percentile(first, 50)) * 1000,
            "later_rounds_p50_ms": float(np.percentile(later, 50)) * 1000,
            "entries": entries, "bytes_per_entry": after.get("nmt_cache_bytes", 0.0) / entries if entries else 0.0
            }, answers


def table(rows: list[dict]) -> str:
    lines = ["| --cache | hit rate | req/s | p50 / p99 ms | p50 ms, round 1 / later | bytes per entry |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['cache']} | {r['hit_rate']:.1%} | {r['rps']:.1f} | {r['p50_ms']:.1f} / {r['p99_ms']:.1f} | "
                     f"{r['first_round_p50_ms']:.1f} / {r['later_rounds_p50_ms']:.1f} | "
                     f"{r['bytes_per_entry']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.load.cache_replay", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--package", required=True, help="the model package to serve")
    p.add_argument("--threads", type=int, default=1, help="server onnxruntime threads (default 1)")
    p.add_argument("--sentences", type=int, default=200, help="distinct sentences, en-de test verses (default 200)")
    p.add_argument("--rounds", type=int, default=5, help="times each client sends them all (default 5)")
    p.add_argument("--clients", type=int, default=8, help="closed-loop clients (default 8)")
    p.add_argument("--beam", type=int, default=BEAM_SIZE, help=f"beam size (default {BEAM_SIZE}, the gateway's)")
    p.add_argument("--json", dest="out", type=Path, default=ROOT / "bench" / "results" / "cache_replay.json",
                   help="where to write the results")
    args = p.parse_args(argv)
    sentences = [pair.src for pair in bible_pairs(("en-de",), "test")[: args.sentences]]
    rows, answers = [], []
    print(table([]), flush=True)
    for mode in MODES:
        row, got = measure(args.package, args.threads, mode, sentences, args.rounds, args.clients, args.beam)
        rows.append(row)
        answers.append(got)
        print(table([row]).splitlines()[-1], flush=True)
    same = sum(answers[0][s] == answers[1][s] for s in sentences)
    print(f"same answers with and without the cache: {same}/{len(sentences)}", flush=True)
    out = {"command": " ".join(["python -m bench.load.cache_replay", *(argv if argv is not None else sys.argv[1:])]),
           "package": args.package, "threads": args.threads, "rows": rows, "same_answers": same,
           "sentences": len(sentences), "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    return 0 if same == len(sentences) else 1


if __name__ == "__main__":
    sys.exit(main())
