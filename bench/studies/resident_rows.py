"""How often device-resident decoding rebuilds its buffers: graph runs for one batch of everyday
phrases decoded at once, with the rows of finished jobs kept (dead) until ``COMPACT_AT`` of the
rows are dead, and with a rebuild at every job that leaves (``COMPACT_AT`` 0, the old way).

    python -m bench.studies.resident_rows --package packages/default --sentences 256

On a GPU each run is a graph launch and a host round trip; the CPU counts them (the resident
graphs run on the CPU too) and checks that both ways give the same tokens.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import sentencepiece as spm

from engine.decoding import ResidentBatch
from engine.package import ModelPackage
from engine.runtime import Runtime, RuntimeOptions
from export.verify import decode_ids

EVERYDAY = Path(__file__).resolve().parents[1] / "data" / "everyday.tsv"


def count_runs(package: Path, sentences: int, compact_at: float) -> tuple[dict[str, int], list[list[int]]]:
    """Step and rows graph runs, and the greedy tokens, for ``sentences`` English phrases into German."""
    pkg = ModelPackage.load(package)
    rt = Runtime(pkg, RuntimeOptions(device="cpu", threads=1, resident="on", variant="fp32"))
    sp = spm.SentencePieceProcessor(model_file=str(Path(package) / "tokenizer.model"))
    with EVERYDAY.open(encoding="utf-8") as f:
        english = [r["en"] for r in csv.DictReader(f, delimiter="\t")]
    english = (english * (sentences // len(english) + 1))[:sentences]
    src = [[sp.piece_to_id("<2de>"), *sp.encode(t), pkg.special_ids["eos"]] for t in english]
    runs = {"step": 0, "rows": 0}
    for name in runs:
        run = getattr(rt, f"run_{name}")
        setattr(rt, f"run_{name}", lambda *a, _run=run, _name=name, **k: (
            runs.__setitem__(_name, runs[_name] + 1), _run(*a, **k))[1])
    default = ResidentBatch.COMPACT_AT
    ResidentBatch.COMPACT_AT = compact_at
    try:
        tokens = [h[0].tokens for h in decode_ids(rt, src)]
    finally:
        ResidentBatch.COMPACT_AT = default
    return runs, tokens


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.studies.resident_rows", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--package", type=Path, required=True, help="a package with the resident step and rows graphs")
    p.add_argument("--sentences", type=int, default=256, help="phrases decoded as one batch (default: 256)")
    args = p.parse_args(argv)
    kept, kept_tokens = count_runs(args.package, args.sentences, ResidentBatch.COMPACT_AT)
    every, every_tokens = count_runs(args.package, args.sentences, 0.0)
    print(f"{args.sentences} phrases, greedy, one batch | step runs | rows runs")
    print(f"dead rows kept (COMPACT_AT {ResidentBatch.COMPACT_AT}) | {kept['step']} | {kept['rows']}")
    print(f"a rebuild at every leave | {every['step']} | {every['rows']}")
    print(f"same tokens: {kept_tokens == every_tokens}")
    return 0 if kept_tokens == every_tokens else 1


if __name__ == "__main__":
    raise SystemExit(main())
