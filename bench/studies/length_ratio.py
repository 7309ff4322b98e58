"""How long are natural translations? Target/source token ratios of a corpus, and how many of
its pairs an output-length rule would cut.

    python -m bench.studies.length_ratio                  # the default model's corpus and tokenizer
    python -m bench.studies.length_ratio --checkpoint-dir models/default --split train --json out.json

The server's default output bound (``engine.decoding.default_max_len``) must leave room for
the longest natural ratio; this measures it on the training split of a model's own data
(every direction it was trained on) with its own tokenizer. A pair is cut by a rule when its
target's pieces plus the end-of-sentence token exceed the rule applied to the source as the
server counts it (language tag + pieces + end-of-sentence token).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from engine.defaults import OUTPUT_MARGIN, OUTPUT_SLOPE

OLD_RULE = (1.5, 10)  # the bound before it was measured


def ratio_report(directions: list[str], src_lens: np.ndarray, tgt_lens: np.ndarray,
                 rules: list[tuple[float, int]]) -> dict:
    """Per direction and over all: pairs, ratio percentiles (50, 99, 99.9, max) of target
    pieces / source pieces, and for every rule (a, b) the fraction of pairs it cuts."""
    dirs = np.array(directions)
    ratio = tgt_lens / np.maximum(src_lens, 1)
    needed = tgt_lens + 1  # pieces + eos
    seen = src_lens + 2  # tag + pieces + eos
    out = {}
    for name in [*dict.fromkeys(directions), "all"]:
        m = np.ones(len(dirs), dtype=bool) if name == "all" else dirs == name
        p50, p99, p999 = np.percentile(ratio[m], [50, 99, 99.9])
        cut = {f"{a:g} x + {b}": float((needed[m] > np.floor(a * seen[m] + b)).mean()) for a, b in rules}
        out[name] = {"pairs": int(m.sum()), "p50": round(float(p50), 3), "p99": round(float(p99), 3),
                     "p99.9": round(float(p999), 3), "max": round(float(ratio[m].max()), 3), "cut": cut}
    return out


def main(argv: list[str] | None = None) -> int:
    import sentencepiece as spm

    from training.config import RunConfig
    from training.data import load_pairs

    p = argparse.ArgumentParser(prog="python -m bench.studies.length_ratio", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint-dir", type=Path, default=Path("models/default"),
                   help="a directory with config.json and tokenizer.model (default: models/default)")
    p.add_argument("--split", default="train", choices=["train", "dev", "test"])
    p.add_argument("--json", type=Path, help="also write the numbers here")
    args = p.parse_args(argv)
    cfg = RunConfig.load(args.checkpoint_dir / "config.json")
    sp = spm.SentencePieceProcessor(model_file=str(args.checkpoint_dir / "tokenizer.model"))
    pairs = load_pairs(cfg.data, args.split)
    src = np.array([len(x) for x in sp.encode([q.src for q in pairs])])
    tgt = np.array([len(x) for x in sp.encode([q.tgt for q in pairs])])
    rules = [OLD_RULE, (OUTPUT_SLOPE, OUTPUT_MARGIN)]
    report = ratio_report([q.direction for q in pairs], src, tgt, rules)
    print(f"target/source pieces, {args.split} split of {args.checkpoint_dir} ({len(pairs):,} pairs)")
    print(f"{'direction':>9} {'pairs':>8} {'p50':>6} {'p99':>6} {'p99.9':>6} {'max':>7}  "
          + "  ".join(f"cut by {r}" for r in report["all"]["cut"]))
    for name, row in report.items():
        print(f"{name:>9} {row['pairs']:>8,} {row['p50']:>6.3f} {row['p99']:>6.3f} {row['p99.9']:>6.3f} "
              f"{row['max']:>7.2f}  " + "  ".join(f"{v * 100:>{len(k) + 5}.3f}%" for k, v in row["cut"].items()))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
