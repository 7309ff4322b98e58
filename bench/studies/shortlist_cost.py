"""What a vocabulary shortlist (engine/shortlist.py) would cost in translation quality, before
any graph uses one.

    python -m bench.studies.shortlist_cost --checkpoint models/default/model.pt --package packages/default \
        --sizes 256x32,512x64 --splits bible,modern --limit 200

Learns shortlists of each ``FREQUENTxPER_SOURCE`` size from the checkpoint's training data (the
sources its config names, tokenized as in training), then decodes the test sets (John for
``bible``, LibreOffice help for ``modern``) with the package's int8 graphs on the CPU, in
batches of ``--batch-size`` sentences sorted by length as the server would batch them: once
with the whole vocabulary and once per size with every step's log-probabilities limited to the
batch's shortlist (the union over its sources) and normalised over it, which is what a step graph
that gathers only those rows of the output projection computes. Prints, per direction and size:
the mean allowed vocabulary per batch, the share of reference tokens inside it, BLEU and chrF
with and without, and the share of outputs that did not change.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np
import sacrebleu

from engine.shortlist import Shortlist, learn
from export.shortlist_graph import training_examples


def limited(step, allowed: np.ndarray):
    """``rt.step`` with log-probabilities outside ``allowed`` at -inf and the rest normalised."""
    def run(*args):
        log_probs, new_k, new_v, attention = step(*args)
        sub = log_probs[:, allowed].astype(np.float64)
        peak = sub.max(axis=1, keepdims=True)
        norm = peak + np.log(np.exp(sub - peak).sum(axis=1, keepdims=True))
        out = np.full_like(log_probs, -np.inf)
        out[:, allowed] = (sub - norm).astype(log_probs.dtype)
        return out, new_k, new_v, attention
    return run


def batches(tokenizer, texts: Sequence[str], tgt: str, batch_size: int) -> list[list[int]]:
    """The texts' indices in the batches the server would make: by source length, ``batch_size`` at a time."""
    lengths = [len(tokenizer.encode_protected(t, tgt)[0]) for t in texts]
    order = sorted(range(len(texts)), key=lengths.__getitem__)
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def decode(rt, tokenizer, texts: Sequence[str], tgt: str, batch_size: int, beam: int,
           shortlist: Shortlist | None) -> tuple[list[str], list[int]]:
    """Translations in input order (``translate_onnx`` on each batch), and the allowed vocabulary
    size of each batch."""
    from export.verify import translate_onnx

    out, sizes = [""] * len(texts), []
    step = rt.step
    try:
        for idx in batches(tokenizer, texts, tgt, batch_size):
            chunk = [texts[i] for i in idx]
            if shortlist is not None:
                allowed = shortlist.ids([tokenizer.encode_protected(t, tgt)[0] for t in chunk], tgt)
                sizes.append(int(allowed.size))
                rt.step = limited(step, allowed)
            for i, text in zip(idx, translate_onnx(rt, tokenizer, chunk, tgt, beam_size=beam, batch_size=batch_size)):
                out[i] = text
    finally:
        rt.step = step
    return out, sizes


def coverage(shortlist: Shortlist, tokenizer, sources: Sequence[str], references: Sequence[str], tgt: str,
             batch_size: int) -> float:
    """Share of reference target tokens inside their batch's shortlist (batches as ``decode``)."""
    inside = total = 0
    for idx in batches(tokenizer, sources, tgt, batch_size):
        allowed = shortlist.ids([tokenizer.encode_protected(sources[i], tgt)[0] for i in idx], tgt)
        for i in idx:
            ref = np.asarray(tokenizer.encode(tokenizer.protector.protect(references[i]).text))
            inside += int(np.isin(ref, allowed).sum())
            total += ref.size
    return inside / max(total, 1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--package", required=True)
    p.add_argument("--sizes", default="256x32,512x64", help="FREQUENTxPER_SOURCE, comma-separated")
    p.add_argument("--splits", default="bible,modern")
    p.add_argument("--directions", default="en-de,de-en,en-fr,fr-en,en-es,es-en")
    p.add_argument("--limit", type=int, default=200, help="test lines per set (0: all)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--beam", type=int, default=1)
    p.add_argument("--max-pairs", type=int, default=0, help="training pairs to learn from (0: all)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    from bench.modern_eval import load_sets
    from cli import parse_direction
    from engine.package import ModelPackage
    from export.verify import cpu_runtime
    from training.tokenizer import Tokenizer

    started = time.monotonic()
    examples, vocab = training_examples(args.checkpoint, args.max_pairs)
    print(f"{len(examples)} training examples tokenized ({time.monotonic() - started:.0f}s)", flush=True)
    shortlists = {}
    for size in args.sizes.split(","):
        frequent, per_source = (int(x) for x in size.split("x"))
        t = time.monotonic()
        shortlists[size] = learn(examples, vocab, frequent=frequent, per_source=per_source)
        print(f"shortlist {size} learned in {time.monotonic() - t:.0f}s", flush=True)
    package = ModelPackage.load(args.package)
    tokenizer = Tokenizer(package.tokenizer_path)
    rt = cpu_runtime(package, "int8", args.threads)
    sets = load_sets(args.splits.split(","), args.directions.split(","), args.limit)
    print(f"{'set':<22} {'size':>9} {'vocab':>6} {'ref in':>7} {'BLEU':>13} {'chrF':>13} {'same':>5}")
    for (split, direction), pairs in sets.items():
        _, tgt = parse_direction(direction)
        sources, refs = [x.src for x in pairs], [x.tgt for x in pairs]
        full, _ = decode(rt, tokenizer, sources, tgt, args.batch_size, args.beam, None)
        bleu0 = sacrebleu.corpus_bleu(full, [refs]).score
        chrf0 = sacrebleu.corpus_chrf(full, [refs]).score
        for size, shortlist in shortlists.items():
            hyps, sizes = decode(rt, tokenizer, sources, tgt, args.batch_size, args.beam, shortlist)
            bleu = sacrebleu.corpus_bleu(hyps, [refs]).score
            chrf = sacrebleu.corpus_chrf(hyps, [refs]).score
            same = sum(a == b for a, b in zip(hyps, full)) / len(full)
            cov = coverage(shortlist, tokenizer, sources, refs, tgt, args.batch_size)
            print(f"{split + ' ' + direction:<22} {size:>9} {np.mean(sizes):6.0f} {cov:7.1%} "
                  f"{bleu0:6.2f}>{bleu:6.2f} {chrf0:6.2f}>{chrf:6.2f} {same:5.0%}", flush=True)
    print(f"({time.monotonic() - started:.0f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
