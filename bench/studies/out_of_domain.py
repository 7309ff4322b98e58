"""Out-of-domain check: modern sentences through a model package, in every direction it serves.

    python -m bench.studies.out_of_domain --package packages/default --variant int8 --beam 4

``bench/data/modern.tsv`` holds 30 sentences of everyday, news and technical English written
for this project (trains, passwords, software updates, elections), each with a German,
French and Spanish translation written with it: one reference each, nothing from the
Bible. The package is decoded by the server's own decoding loop (as ``nmt-verify`` does).
Prints BLEU and chrF per direction and a few outputs; ``--json`` keeps every output.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

import sacrebleu

from cli import parse_direction
from engine.package import ModelPackage
from export.verify import cpu_runtime, translate_onnx
from training.tokenizer import Tokenizer

DATA = Path(__file__).resolve().parents[1] / "data" / "modern.tsv"


def load(path: Path = DATA) -> dict[str, list[str]]:
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return {lang: [r[lang] for r in rows] for lang in rows[0]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--package", required=True)
    p.add_argument("--variant", default="fp32", help="graph variant: fp32 or int8")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--examples", type=int, default=3, help="outputs to print per direction")
    p.add_argument("--json", type=Path, help="write every source, reference and output here")
    args = p.parse_args(argv)
    package = ModelPackage.load(args.package)
    rt = cpu_runtime(package, args.variant, args.threads)
    tokenizer = Tokenizer(package.tokenizer_path)
    texts = load()
    results = []
    for src, tgt in map(parse_direction, package.pairs):
        if src not in texts or tgt not in texts:
            continue
        start = time.monotonic()
        hyps = translate_onnx(rt, tokenizer, texts[src], tgt, beam_size=args.beam)
        bleu = sacrebleu.corpus_bleu(hyps, [texts[tgt]]).score
        chrf = sacrebleu.corpus_chrf(hyps, [texts[tgt]]).score
        print(f"{src}-{tgt}  BLEU {bleu:6.2f}  chrF {chrf:6.2f}  ({len(hyps)} sentences, {args.variant}, "
              f"beam {args.beam}, {time.monotonic() - start:.1f}s)", flush=True)
        for s, r, h in list(zip(texts[src], texts[tgt], hyps))[:args.examples]:
            print(f"    {s}\n    -> {h}\n    (reference: {r})")
        results.append({"direction": f"{src}-{tgt}", "bleu": round(bleu, 2), "chrf": round(chrf, 2),
                        "outputs": [{"source": s, "reference": r, "hypothesis": h}
                                    for s, r, h in zip(texts[src], texts[tgt], hyps)]})
    if args.json:
        args.json.write_text(json.dumps(results, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
