"""Training steps per second on this machine, fp32 against bfloat16 autocast, side by side.

    python -m bench.studies.train_speed --preset deep-shallow --batch-tokens 6000 --steps 12 --rounds 3
    python -m bench.studies.train_speed --arms fp32,compiled     # fp32 eager against torch.compile

Each round times the same batches (Bible training pairs, the shipped tokenizer) through a full
step (forward, label-smoothed loss, backward, clipping, Adam) once per arm, the arms
alternating so that a noisy shared machine loads both alike. Weights stay fp32 in both arms;
bf16 is autocast only. Prints tokens/s (source + target, as nmt-train logs them) per round
and the median ratio of the second arm to the first.

``--arms`` picks two of: ``fp32`` (eager), ``bf16`` (autocast, eager) and ``compiled`` (fp32 through
``torch.compile(dynamic=True)``: batches differ in shape, so a static compile would recompile at
almost every step). The compiled arm's first call compiles; it is timed apart and reported as
the one-off cost.
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import nullcontext

import torch

from training import checkpoint as ckpt_io
from training.config import MODEL_PRESETS, PAD_ID, DataConfig
from training.data import BatchStream, bible_pairs, encode_pairs
from training.model import Transformer
from training.train import bf16_native, label_smoothed_loss


def time_steps(model: Transformer, batches: list, bf16: bool) -> float:
    """Tokens per second of full training steps over ``batches`` (after one warm-up step)."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-5)
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else nullcontext()
    tokens, elapsed = 0, 0.0
    for n, b in enumerate(batches):
        start = time.perf_counter()
        with ctx:
            logits = model(b.src, b.tgt_in)
        loss = label_smoothed_loss(logits, b.tgt_out, 0.1) / b.n_tokens
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if n:  # the first step pays for one-off allocations and kernel choice
            elapsed += time.perf_counter() - start
            tokens += int(b.src.ne(PAD_ID).sum()) + b.n_tokens
    return tokens / elapsed


ARMS = ("fp32", "bf16", "compiled")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="deep-shallow", choices=sorted(MODEL_PRESETS))
    p.add_argument("--tokenizer-from", default="models/default", help="a checkpoint whose tokenizer encodes the text")
    p.add_argument("--batch-tokens", type=int, default=6000)
    p.add_argument("--steps", type=int, default=12, help="timed steps per arm and round (plus one warm-up)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch threads; 0 = torch's default")
    p.add_argument("--arms", default="fp32,bf16", help=f"two of {', '.join(ARMS)}: the first is the baseline")
    args = p.parse_args(argv)
    arms = args.arms.split(",")
    if len(arms) != 2 or len(set(arms)) != 2 or not set(arms) <= set(ARMS):
        p.error(f"--arms takes two different arms of {', '.join(ARMS)}, got {args.arms!r}")
    if args.threads:
        torch.set_num_threads(args.threads)
    tokenizer = ckpt_io.load_tokenizer(ckpt_io.load(ckpt_io.resolve(args.tokenizer_from)))
    pairs = bible_pairs(DataConfig(directions=("en-de", "de-en")), "train")
    stream = iter(BatchStream(encode_pairs(pairs, tokenizer, 200), args.batch_tokens, seed=1))
    batches = [next(stream) for _ in range(args.steps + 1)]
    model = Transformer(MODEL_PRESETS[args.preset].__class__(**{**MODEL_PRESETS[args.preset].__dict__,
                                                                 "vocab_size": tokenizer.vocab_size}))
    model.train()
    print(f"preset {args.preset}, {args.batch_tokens} tokens a batch, {torch.get_num_threads()} threads, "
          f"bf16 units: {'yes' if bf16_native(torch.device('cpu')) else 'no (bf16 is emulated)'}")
    compiled = None
    if "compiled" in arms:
        compiled = torch.compile(model, dynamic=True)
        start = time.perf_counter()
        time_steps(compiled, batches[:2], bf16=False)  # compiles (and recompiles once for the dynamic shapes)
        print(f"torch.compile: {time.perf_counter() - start:.0f} s before its first timed step")

    def rate(arm: str) -> float:
        return time_steps(compiled if arm == "compiled" else model, batches, bf16=arm == "bf16")

    ratios = []
    for r in range(args.rounds):
        base, other = rate(arms[0]), rate(arms[1])
        ratios.append(other / base)
        print(f"round {r + 1}: {arms[0]} {base:,.0f} tok/s | {arms[1]} {other:,.0f} tok/s | {other / base:.2f}x",
              flush=True)
    print(f"median {arms[1]} / {arms[0]}: {statistics.median(ratios):.2f}x over {args.rounds} rounds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
