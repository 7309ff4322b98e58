"""Server throughput under concurrent single-sentence clients vs offline batch decoding.

    python -m bench.server_throughput --package packages/small-ende --sentences 256

Starts ``nmt-serve`` as a subprocess on a free localhost port, then for each concurrency
level runs that many closed-loop clients (one sentence per request, greedy) over the same
sentences, and compares with offline decoding of those sentences in one process (the
server's own decoder, batches of --batch-rows sorted by length). Same threads for both.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import sentencepiece as spm

from bench.server_load import Request, ServerProcess, run_load
from cli import parse_direction
from engine.package import ModelPackage
from engine.runtime import Runtime, RuntimeOptions
from export.verify import decode_ids


def load_sentences(package: ModelPackage, pair: str, n: int, source_file: Path | None) -> list[str]:
    if source_file:
        lines = [x for x in source_file.read_text(encoding="utf-8").splitlines() if x.strip()]
    else:
        from training.config import DataConfig
        from training.data import bible_pairs

        lines = [p.src for p in bible_pairs(DataConfig(directions=(pair,)), "test")]
    return (lines * (n // max(len(lines), 1) + 1))[:n]


def offline(package: ModelPackage, pair: str, sentences: list[str], threads: int, rows: int) -> float:
    rt = Runtime(package, RuntimeOptions(device="cpu", threads=threads))
    sp = spm.SentencePieceProcessor(model_file=str(package.tokenizer_path))
    target = parse_direction(pair)[1]
    srcs = sorted((package.source_ids(sp.encode(s), target) for s in sentences), key=len)
    decode_ids(rt, srcs[:rows])  # warm-up
    start = time.perf_counter()
    for i in range(0, len(srcs), rows):
        decode_ids(rt, srcs[i:i + rows])
    return len(srcs) / (time.perf_counter() - start)


def clients(address: str, pair: str, sentences: list[str], concurrency: int) -> tuple[float, list[float]]:
    src, tgt = parse_direction(pair)
    result = run_load(address, [Request([text], src, tgt) for text in sentences], concurrency)
    return len(sentences) / result.seconds, sorted(result.latencies)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--package", required=True)
    p.add_argument("--pair", help="default: the package's first pair")
    p.add_argument("--sentences", type=int, default=256)
    p.add_argument("--source-file", type=Path)
    p.add_argument("--levels", default="1,8,64")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-rows", type=int, default=64)
    p.add_argument("--out", type=Path, default=Path("bench/results/server_throughput.json"))
    args = p.parse_args(argv)
    package = ModelPackage.load(args.package)
    pair = args.pair or package.pairs[0]
    sentences = load_sentences(package, pair, args.sentences, args.source_file)
    offline_rate = offline(package, pair, sentences, args.threads, args.batch_rows)
    rows = []
    with ServerProcess(args.package, args.threads, args.batch_rows) as srv:
        for level in (int(x) for x in args.levels.split(",")):
            rate, lat = clients(srv.address, pair, sentences, level)
            rows.append({"clients": level, "sentences_per_s": round(rate, 2),
                         "vs_offline": round(rate / offline_rate, 2), "p50_ms": round(1000 * lat[len(lat) // 2], 1),
                         "p99_ms": round(1000 * lat[int(len(lat) * .99)], 1)})
    result = {"package": args.package, "pair": pair, "sentences": len(sentences), "threads": args.threads,
              "offline_sentences_per_s": round(offline_rate, 2), "rows": rows}
    print(f"{len(sentences)} sentences ({pair}), greedy, {args.threads} threads; offline batch decoding "
          f"{offline_rate:.1f} sentences/s")
    print(f"{'clients':>7} {'sent/s':>8} {'vs offline':>10} {'p50 ms':>8} {'p99 ms':>8}")
    for r in rows:
        print(f"{r['clients']:>7} {r['sentences_per_s']:>8.1f} {r['vs_offline']:>9.2f}x {r['p50_ms']:>8.1f} "
              f"{r['p99_ms']:>8.1f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
