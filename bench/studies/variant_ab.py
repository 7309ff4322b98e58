"""``python -m bench.studies.variant_ab``: graph variants side by side: BLEU, batch invariance, greedy speed.

    python -m bench.studies.variant_ab --checkpoint models/default --directions en-de --sentences 879 --beam 4 \
        --batch-sizes "" int8=packages/default:int8    # batch invariance of beam 4 over all of John

    python -m bench.studies.variant_ab --checkpoint models/default --directions en-de,de-en --sentences 200 \\
        fp32=packages/default:fp32 int8=packages/default:int8 int8-old=packages/default-old:int8

Each ``NAME=PACKAGE:VARIANT`` is one onnxruntime CPU runtime (``--threads``, 1 by default)
decoded greedily (or with ``--beam``, for quality and invariance) by the server's own loop
(``export/verify.py``'s ``decode_ids`` over ``engine/decoding.py``). Sentences: the first
``--sentences`` test verses of each direction in ``--directions`` (the checkpoint's data, as
``nmt-verify`` reads them), or of ``--input`` (``source<TAB>reference`` lines in the first of
``--directions``). Reported per variant:

- BLEU and chrF per direction, decoding batches of 64 sources sorted by length;
- batch invariance: how many texts decode to other tokens alone than in those batches, and
  than under continuous batching as the server runs it (sources in input order joining a
  running batch of up to 64 rows, two per step, as rows free up);
- closeness to ``--reference`` (the first variant unless named), finer than BLEU: fed the
  reference's greedy outputs token by token, the mean |log p - log p_ref| over the
  vocabulary per step, and the share of steps whose best token is the reference's;
- speed: sentences/s over the first ``--speed-sentences`` of each direction, sorted by length
  and cut into batches of each ``--batch-sizes`` (as ``nmt-bench``): in each of ``--rounds``
  rounds every batch is decoded by every variant back to back, in alternating order, and
  the sum of each batch's fastest time is kept, so a load that comes and goes on the
  machine hits all variants alike. Ratios are to the first variant.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from engine.decoding import Batch, DecodeOptions, encode_jobs
from engine.package import ModelPackage
from engine.runtime import Runtime
from export.verify import cpu_runtime, decode_ids, source_jobs, step_log_probs

BLEU_BATCH = 64


def batches_by_length(sources: list[list[int]], size: int) -> list[list[int]]:
    """Indices of the sources sorted by length (stable), cut into batches."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    return [order[i:i + size] for i in range(0, len(order), size)]


def continuous_ids(rt: Runtime, sources: list[list[int]], options: DecodeOptions, rows: int = BLEU_BATCH,
                   join: int = 2) -> list[list[int]]:
    """The best hypothesis of each source decoded with continuous batching: sources in input
    order join the running batch ``join`` at a time after each step while it has room for
    their beams within ``rows`` rows; finished jobs leave."""
    jobs = source_jobs(rt, sources, options)
    batch, pending = Batch(rt), list(jobs)
    while pending or batch.jobs:
        new = []
        while pending and len(new) < join and batch.n + sum(j.k for j in new) + pending[0].k <= rows:
            new.append(pending.pop(0))
        if new:
            batch.add(encode_jobs(rt, new))
        batch.remove({j.id for j in batch.step()})
    return [j.result[0].tokens for j in jobs]


def forced_closeness(rt: Runtime, ref: Runtime, sources: list[list[int]],
                     paths: list[list[int]]) -> tuple[float, float]:
    """Teacher-forced along ``paths`` (the reference's outputs): mean |log p - log p_ref| over
    the vocabulary per step, and the share of steps where both rank the same token first."""
    ids = rt.package.special_ids
    error, agree, steps = 0.0, 0, 0
    for rows in batches_by_length(sources, 16):
        src = np.full((len(rows), max(len(sources[i]) for i in rows)), ids["pad"], dtype=np.int64)
        prefix = np.full((len(rows), max(len(paths[i]) for i in rows) + 1), ids["pad"], dtype=np.int64)
        prefix[:, 0] = ids["bos"]
        for j, i in enumerate(rows):
            src[j, :len(sources[i])] = sources[i]
            prefix[j, 1:len(paths[i]) + 1] = paths[i]
        got, want = step_log_probs(rt, src, prefix), step_log_probs(ref, src, prefix)
        for j, i in enumerate(rows):
            n = len(paths[i]) + 1  # every position of the path, and the one that should end it
            error += float(np.abs(got[j, :n] - want[j, :n]).mean(axis=1).sum())
            agree += int((got[j, :n].argmax(axis=1) == want[j, :n].argmax(axis=1)).sum())
            steps += n
    return error / steps, agree / steps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.studies.variant_ab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("variants", nargs="+", metavar="NAME=PACKAGE:VARIANT")
    p.add_argument("--checkpoint", required=True, help="the checkpoint the packages come from (tokenizer, data)")
    p.add_argument("--directions", default="en-de,de-en", help="comma-separated language pairs")
    p.add_argument("--input", type=Path, help="source<TAB>reference lines in the first of --directions "
                   "(default: the checkpoint's test split)")
    p.add_argument("--sentences", type=int, default=200, help="test verses per direction for BLEU and invariance")
    p.add_argument("--speed-sentences", type=int, default=64, help="of those, per direction, for the timing")
    p.add_argument("--beam", type=int, default=1, help="beam size of the quality and invariance decodes "
                   "(the timing is greedy)")
    p.add_argument("--batch-sizes", default="1,32", help="greedy timing at these batch sizes (empty: no timing)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reference", help="the variant the others are held to (default: the first)")
    p.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = p.parse_args(argv)

    from cli import parse_direction
    from training import checkpoint as ckpt_io
    from training.config import RunConfig
    from training.data import load_pairs
    from training.evaluate import score

    ckpt = ckpt_io.load(ckpt_io.resolve(args.checkpoint))
    cfg = RunConfig.from_dict(ckpt["config"])
    tokenizer = ckpt_io.load_tokenizer(ckpt)
    pairs = args.directions.split(",")
    data: dict[str, tuple[list[list[int]], list[str]]] = {d: ([], []) for d in pairs}
    originals: dict[str, list[tuple[str, ...]]] = {d: [] for d in pairs}  # of each source's placeholders
    if args.input:
        data = {pairs[0]: data[pairs[0]]}
        lines = [line.split("\t") for line in args.input.read_text(encoding="utf-8").splitlines() if line.strip()]
        test = [(pairs[0], src, ref) for src, ref in lines]
    else:
        test = [(pair.direction, pair.src, pair.tgt) for pair in load_pairs(cfg.data, "test")]
    for direction, src, ref in test:
        if direction in data and len(data[direction][0]) < args.sentences:
            ids, spans = tokenizer.encode_protected(src, parse_direction(direction)[1])  # as the server does
            data[direction][0].append(ids)
            originals[direction].append(spans)
            data[direction][1].append(ref)
    runtimes = {}
    for spec in args.variants:
        name, _, rest = spec.partition("=")
        package, _, variant = rest.rpartition(":")
        runtimes[name] = cpu_runtime(ModelPackage.load(package), variant, args.threads)

    result: dict = {"variants": args.variants, "sentences": args.sentences, "threads": args.threads,
                    "quality": [], "speed": []}
    reference = args.reference or next(iter(runtimes))
    for direction, (sources, refs) in data.items():
        outputs = {}
        for name in [reference, *(n for n in runtimes if n != reference)]:  # the reference first
            rt = runtimes[name]
            tokens: list[list[int]] = [[] for _ in sources]
            options = DecodeOptions(beam_size=args.beam)
            for rows in batches_by_length(sources, BLEU_BATCH):
                for i, nbest in zip(rows, decode_ids(rt, [sources[i] for i in rows], options)):
                    tokens[i] = nbest[0].tokens
            outputs[name] = tokens
            alone = [decode_ids(rt, [s], options)[0][0].tokens for s in sources]
            bleu, chrf, _ = score([tokenizer.decode_restored(t, o) for t, o in zip(tokens, originals[direction])], refs)
            differ = sum(a != t for a, t in zip(alone, tokens))
            continuous = continuous_ids(rt, sources, options)
            differ_continuous = [i for i, (a, t) in enumerate(zip(alone, continuous)) if a != t]
            error, agree = forced_closeness(rt, runtimes[reference], sources, outputs[reference])
            result["quality"].append({"direction": direction, "variant": name, "bleu": bleu, "chrf": chrf,
                                      "differ_alone": differ, "texts": len(sources), "logprob_error": error,
                                      "argmax_agree": agree, "reference": reference,
                                      "differ_continuous": len(differ_continuous)})
            result["quality"][-1]["differing"] = [i for i, (a, t) in enumerate(zip(alone, tokens)) if a != t]
            result["quality"][-1]["differing_continuous"] = differ_continuous
            print(f"{direction}  {name:<10} beam {args.beam} BLEU {bleu:6.2f}  chrF {chrf:6.2f}  alone vs in a "
                  f"batch of {BLEU_BATCH}: {differ}/{len(sources)} texts differ, continuous batching: "
                  f"{len(differ_continuous)}/{len(sources)}  vs {reference}: mean |d log p| "
                  f"{error:.4f}, same best token {agree:.2%}", flush=True)

    timed = [s for sources, _ in data.values() for s in sources[: args.speed_sentences]]
    for size in [int(b) for b in args.batch_sizes.split(",") if b.strip()]:
        # Per direction, as nmt-bench cuts them (directions never share a batch).
        batches, start = [], 0
        for sources, _ in data.values():
            n = min(len(sources), args.speed_sentences)
            batches += [[start + i for i in rows] for rows in batches_by_length(sources[:n], size)]
            start += n
        # Every batch is timed for every variant back to back (order alternating), and each
        # batch's fastest time over the rounds is kept: a load that comes and goes on the
        # machine then costs every variant alike.
        fastest = {name: [float("inf")] * len(batches) for name in runtimes}
        for rt in runtimes.values():  # warm-up
            decode_ids(rt, [timed[i] for i in batches[0]])
        for r in range(args.rounds):
            for b, rows in enumerate(batches):
                names = list(runtimes) if (r + b) % 2 == 0 else list(runtimes)[::-1]
                for name in names:
                    began = time.perf_counter()
                    decode_ids(runtimes[name], [timed[i] for i in rows])
                    fastest[name][b] = min(fastest[name][b], time.perf_counter() - began)
        best = {name: sum(times) for name, times in fastest.items()}
        first = next(iter(best.values()))
        for name, seconds in best.items():
            result["speed"].append({"batch_size": size, "variant": name, "sentences_per_s": len(timed) / seconds,
                                    "ratio": first / seconds})
        print(f"greedy batch {size:>3}: " + "  ".join(f"{name} {len(timed) / s:7.2f} sent/s ({first / s:.3f}x)"
                                                      for name, s in best.items()), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
