"""One decoding step, ours against CTranslate2, at the same number of rows; and the fixed cost.

    python -m bench.studies.step_cost --checkpoint models/default/model.pt --package packages/default \
        --variant int8 --batch-sizes 1,8,32 --beam-sizes 1,4

A whole decode mixes three costs: the encoder, one step at each number of live rows, and how
long rows stay live (beam search's stopping rule, the longest text of a batch). This study takes
them apart. The same batch (the first ``batch`` test sentences of the checkpoint's first
direction, or of ``--file``) is decoded by both engines with its output length forced (minimum =
maximum length) to ``--short`` and then ``--long`` tokens, so both do the same steps over the same rows:
``(t(long) - t(short)) / (long - short)`` is one step at batch x beam rows, search included, and
``t(short) - short x step`` is what a batch costs before its steps (the encoder, setting up).
The engines alternate, ``--rounds`` times; each figure is the best round.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def seconds_per_call(run: Callable[[], Any], repeats: int) -> float:
    """The mean of ``repeats`` calls of ``run``, after one untimed call (warm-up)."""
    run()
    start = time.perf_counter()
    for _ in range(repeats):
        run()
    return (time.perf_counter() - start) / repeats


def best_per_call(runs: dict[str, Callable[[], Any]], rounds: int, repeats: int) -> dict[str, float]:
    """Seconds per call of each run: the best of ``rounds`` rounds that alternate the runs (each
    ``seconds_per_call``), so a machine that slows down in the middle slows them all."""
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(rounds):
        for name, run in runs.items():
            best[name] = min(best[name], seconds_per_call(run, repeats))
    return best


Engine = Callable[[list[list[int]], int, int], Any]  # (sources, beam size, output length) -> decoded


def ours(package: Any, variant: str, threads: int) -> Engine:
    """Our engine, with the output length forced: eos banned before it, the search cut at it."""
    from bench.engines import variant_options
    from engine.decoding import DecodeOptions
    from engine.runtime import Runtime, RuntimeOptions
    from export.verify import decode_ids

    rt = Runtime(package, RuntimeOptions(device="cpu", threads=threads, **variant_options(variant)))
    return lambda sources, beam, length: decode_ids(rt, sources, DecodeOptions(beam_size=beam, min_len=length), length)


def ctranslate2_engine(ct2_dir: str, tokenizer: Any, variant: str, threads: int) -> Engine:
    """The same with CTranslate2 on the converted checkpoint."""
    from bench.engines import ct2_pieces, ct2_translator

    translator = ct2_translator(ct2_dir, variant, "cpu", threads)
    return lambda sources, beam, length: translator.translate_batch(
        ct2_pieces(tokenizer.sp, sources), beam_size=beam, min_decoding_length=length, max_decoding_length=length,
        max_batch_size=0)


def measure(engines: dict[str, Engine], sources: list[list[int]], beam: int, short: int, long: int, rounds: int,
            repeats: int) -> dict[str, tuple[float, float]]:
    """engine -> (milliseconds a step, milliseconds before the steps) for one batch and beam size."""
    times: dict[tuple[str, int], float] = {}
    for _ in range(rounds):
        for name, run in engines.items():
            for length in (short, long):
                t = seconds_per_call(lambda run=run, length=length: run(sources, beam, length), repeats)
                times[name, length] = min(times.get((name, length), t), t)
    out = {}
    for name in engines:
        step = (times[name, long] - times[name, short]) / (long - short)
        out[name] = (1000 * step, 1000 * (times[name, short] - short * step))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.studies.step_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--package", required=True)
    p.add_argument("--variant", default="int8", choices=["fp32", "int8"],
                   help="int8: the width a server runs on this CPU (int8w8 with VNNI/AMX), as nmt-bench")
    p.add_argument("--file", type=Path, help="sentences, one a line, to decode instead of the test split")
    p.add_argument("--pair", help="the direction of the sentences (default: the checkpoint's first)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-sizes", default="1,8,32")
    p.add_argument("--beam-sizes", default="1,4")
    p.add_argument("--short", type=int, default=6, help="output tokens of the short decode")
    p.add_argument("--long", type=int, default=16, help="output tokens of the long decode")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3, help="decodes per timing")
    p.add_argument("--ct2-model", type=Path, help="a converted model (default: convert into a temporary directory)")
    args = p.parse_args(argv)
    if not 0 < args.short < args.long:
        p.error(f"--short {args.short} and --long {args.long}: need 0 < short < long")

    from bench.nmt_bench import checkpoint_batches
    from bench.peers.ct2_convert import convert
    from engine.package import ModelPackage

    batch_sizes = [int(x) for x in args.batch_sizes.split(",")]
    beams = [int(x) for x in args.beam_sizes.split(",")]
    ckpt_path, tokenizer, items, _ = checkpoint_batches(args.checkpoint, max(batch_sizes), max(batch_sizes), args.pair,
                                                        args.file, one_direction=True)
    pair = f"{items[0].src_lang}-{items[0].tgt_lang}"
    sources = [it.ids for it in items]
    package = ModelPackage.load(args.package)
    print(f"{args.variant}, {args.threads} thread(s), {pair}: output length forced to {args.short} and {args.long} "
          f"tokens; best of {args.rounds} rounds of {args.repeats}")
    print(f"{'batch':>5} {'beam':>4} {'rows':>4} | {'ms a step: ours':>15} {'CT2':>7} {'CT2/ours':>8} | "
          f"{'ms before the steps: ours':>25} {'CT2':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        ct2_dir = str(args.ct2_model or convert(ckpt_path, Path(tmp) / "ct2"))
        engines = {"ours": ours(package, args.variant, args.threads),
                   "ct2": ctranslate2_engine(ct2_dir, tokenizer, args.variant, args.threads)}
        for bs in batch_sizes:
            if bs > len(sources):
                p.error(f"--batch-sizes {bs}: the test split of {pair} has {len(sources)} sentences here")
            for beam in beams:
                got = measure(engines, sources[:bs], beam, args.short, args.long, args.rounds, args.repeats)
                (ours_step, ours_fixed), (ct2_step, ct2_fixed) = got["ours"], got["ct2"]
                print(f"{bs:>5} {beam:>4} {bs * beam:>4} | {ours_step:>15.3f} {ct2_step:>7.3f} "
                      f"{ct2_step / ours_step:>7.2f}x | {ours_fixed:>25.1f} {ct2_fixed:>7.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
