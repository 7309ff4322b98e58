"""What the key/value cache and onnxruntime buy: one table, same sentences, same weights.

    python -m bench.cache_speedup --checkpoint runs/small-ende --package packages/small-ende

Greedy decoding forced to exactly ``--tokens`` output tokens (eos suppressed), so every
engine does the same work:
  - PyTorch, no cache: the full decoder re-run over the whole prefix at every step
  - PyTorch, KV cache: one decoder step per token (training/decode.py)
  - onnxruntime step graph (fp32, and int8 if the package has it): export/verify.py's loop
All engines get the same number of threads. Prints the table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

from cli import parse_direction
from engine.decoding import DecodeOptions
from engine.package import ModelPackage
from export.verify import cpu_runtime, decode_ids, unpad
from training import checkpoint as ckpt_io
from training.data import load_pairs, pad
from training.decode import greedy_search


def run(checkpoint: str, package: str, tokens: int, sentences: int, batch_sizes: list[int], threads: int,
        repeats: int, source_file: Path | None = None) -> dict:
    torch.set_num_threads(threads)
    path = ckpt_io.resolve(checkpoint)
    model, cfg, ckpt = ckpt_io.load_model(path)
    tok = ckpt_io.load_tokenizer(ckpt)
    pkg = ModelPackage.load(package)
    direction = cfg.data.directions[0]
    if source_file:
        texts = [line for line in source_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    else:
        texts = [p.src for p in load_pairs(cfg.data, "test") if p.direction == direction]
    if not texts:
        raise SystemExit(f"no sentences: the checkpoint's data has no test split for {direction}; pass --source-file")
    target = parse_direction(direction)[1]
    encoded = [tok.encode_source(t, target) for t in texts[:sentences]]
    engines = {
        "pytorch, no cache": lambda src: greedy_search(model, torch.from_numpy(src), tokens, tokens, use_cache=False),
        "pytorch, KV cache": lambda src: greedy_search(model, torch.from_numpy(src), tokens, tokens),
    }
    for variant in pkg.variants:
        if variant == "fp16":
            continue
        rt = cpu_runtime(pkg, variant, threads=threads)
        engines[f"onnxruntime {variant}, KV cache"] = (
            lambda r: lambda src: [nb[0] for nb in decode_ids(r, unpad(src, 0), DecodeOptions(min_len=tokens), tokens)]
        )(rt)
    rows = []
    for bs in batch_sizes:
        batches = [pad(encoded[i:i + bs]).numpy() for i in range(0, len(encoded), bs)]
        for name, fn in engines.items():
            fn(batches[0])  # warm-up
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                with torch.no_grad():
                    for src in batches:
                        out = fn(src)
                        assert all(len(h.tokens) == tokens for h in out)
                best = min(best, time.perf_counter() - start)
            rows.append({"engine": name, "batch_size": bs, "seconds": round(best, 3),
                         "sentences_per_s": round(len(encoded) / best, 2),
                         "tokens_per_s": round(len(encoded) * tokens / best, 1)})
    for bs in batch_sizes:
        base = next(r for r in rows if r["batch_size"] == bs and r["engine"] == "pytorch, no cache")
        for r in rows:
            if r["batch_size"] == bs:
                r["speedup_vs_no_cache"] = round(base["seconds"] / r["seconds"], 2)
    return {"checkpoint": str(path), "package": package, "direction": direction, "sentences": len(encoded),
            "output_tokens": tokens, "threads": threads, "parameters": sum(p.numel() for p in model.parameters()),
            "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, torch {torch.__version__}",
            "rows": rows, "mean_source_tokens": float(np.mean([len(e) for e in encoded]))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--package", required=True)
    p.add_argument("--tokens", type=int, default=64, help="output tokens per sentence")
    p.add_argument("--sentences", type=int, default=32)
    p.add_argument("--source-file", type=Path, help="source sentences, one a line (default: the test split)")
    p.add_argument("--batch-sizes", default="1,32")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("bench/results/cache_speedup.json"))
    args = p.parse_args(argv)
    result = run(args.checkpoint, args.package, args.tokens, args.sentences,
                 [int(x) for x in args.batch_sizes.split(",")], args.threads, args.repeats, args.source_file)
    print(f"{result['sentences']} sentences ({result['direction']}), {result['output_tokens']} output tokens each, "
          f"{result['threads']} thread(s), {result['parameters'] / 1e6:.1f}M parameters")
    print(f"{'engine':<32} {'batch':>5} {'seconds':>8} {'sent/s':>8} {'tok/s':>9} {'vs no cache':>11}")
    for r in result["rows"]:
        print(f"{r['engine']:<32} {r['batch_size']:>5} {r['seconds']:>8.2f} {r['sentences_per_s']:>8.1f} "
              f"{r['tokens_per_s']:>9.0f} {r['speedup_vs_no_cache']:>10.1f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
