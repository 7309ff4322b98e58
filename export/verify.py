"""``nmt-verify``: hold a model package against the PyTorch reference decoder.

    nmt-verify packages/small-ende runs/small-ende --split test --limit 200 --beam 4

The package is decoded by the server's own decoding loop (``engine/decoding.py`` over
``engine/runtime.py``: greedy and beam search over the step graph in onnxruntime), so
what is verified is what is served. Reported: identical greedy tokens, max |log-probability
difference| along PyTorch's greedy paths, identical beam n-best lists, and BLEU of every
CPU graph variant beside PyTorch's.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, ArgumentParser, UsageError, exit_status_help, fail
from engine.decoding import DecodeOptions, Hypothesis, Job, decode_all
from engine.defaults import default_max_len
from engine.package import ModelPackage, PackageError
from engine.runtime import Runtime, RuntimeOptions


def cpu_runtime(package: ModelPackage, variant: str = "fp32", threads: int = 1, shortlist: bool = True) -> Runtime:
    """A CPU runtime of one graph variant; with ``shortlist`` it scores the package's vocabulary
    shortlist when it has one, as a server does by default."""
    return Runtime(package, RuntimeOptions(device="cpu", threads=threads, variant=variant, shortlist=shortlist))


def unpad(src: np.ndarray, pad: int) -> list[list[int]]:
    return [[int(t) for t in row if t != pad] for row in src]


def decode_ids(rt: Runtime, sources: Sequence[Sequence[int]], options: DecodeOptions | None = None,
               max_len: int | None = None, prefix: Sequence[int] = ()) -> list[list[Hypothesis]]:
    """Decode sources (tag + pieces + eos each) in one batch; n-best lists in input order."""
    return decode_all(rt, source_jobs(rt, sources, options or DecodeOptions(), max_len, prefix))


def source_jobs(rt: Runtime, sources: Sequence[Sequence[int]], options: DecodeOptions,
                max_len: int | None = None, prefix: Sequence[int] = ()) -> list[Job]:
    """One decoding job per source, bounded as the server bounds it (or by ``max_len``);
    ``prefix``: the target's forced first tokens (``ModelPackage.target_prefix``)."""
    p = rt.package
    ids = p.special_ids
    return [Job(list(s), options, max_len=max_len or default_max_len(len(s), p.max_target_tokens),
                bos=ids["bos"], eos=ids["eos"], pad=ids["pad"], prefix=tuple(prefix)) for s in sources]


def step_log_probs(rt: Runtime, src: np.ndarray, prefix: np.ndarray) -> np.ndarray:
    """Teacher-forced log-probabilities (B, T, V) of a fixed target prefix, one cached step at a time."""
    pad = rt.package.special_ids["pad"]
    src_mask = src != pad
    cross_k, cross_v = rt.encode(src.astype(np.int64))
    b = src.shape[0]
    past_k = [rt.cache(b, 0, keys=True) for _ in range(rt.n_layers)]
    past_v = [rt.cache(b, 0) for _ in range(rt.n_layers)]
    out = []
    for t in range(prefix.shape[1]):
        log_probs, new_k, new_v, _ = rt.step(prefix[:, t:t + 1].astype(np.int64), np.full((b, 1), t, dtype=np.int64),
                                          np.ones((b, t), dtype=bool), src_mask, cross_k, cross_v, past_k, past_v)
        past_k = [np.concatenate([p, k], axis=3) for p, k in zip(past_k, new_k)]  # keys (B, H, Dh, P)
        past_v = [np.concatenate([p, v], axis=2) for p, v in zip(past_v, new_v)]
        out.append(log_probs.astype(np.float32))
    return np.stack(out, axis=1)


@dataclass(frozen=True)
class Parity:
    rows: int
    greedy_equal: int
    max_logprob_diff: float
    beam_equal: int | None


def parity(rt: Runtime, model, src: np.ndarray, beam_size: int = 4) -> Parity:
    """Greedy tokens, log-probabilities along PyTorch's greedy paths (teacher-forced), beam n-best
    of the package's runtime ``rt`` against the PyTorch ``model`` it was exported from; ``src``
    is a right-padded (B, S) batch of sources."""
    import torch

    from training.decode import beam_search, greedy_search

    pad = rt.package.special_ids["pad"]
    src_t = torch.from_numpy(src.astype(np.int64))
    sources = unpad(src, pad)
    limits = [default_max_len(len(s), rt.package.max_target_tokens) for s in sources]  # the server's, both sides
    ref = greedy_search(model, src_t, max_len=limits)
    got = [nb[0] for nb in decode_ids(rt, sources)]
    equal = sum(r.tokens == g.tokens for r, g in zip(ref, got))
    width = max(len(h.tokens) for h in ref) + 1
    prefix = np.full((src.shape[0], width), pad, dtype=np.int64)
    prefix[:, 0] = rt.package.special_ids["bos"]
    for i, h in enumerate(ref):
        prefix[i, 1:len(h.tokens) + 1] = h.tokens
    with torch.no_grad():
        full = torch.log_softmax(model(src_t, torch.from_numpy(prefix)), dim=-1).numpy()
    worst = float(np.abs(step_log_probs(rt, src, prefix) - full).max())
    beam_equal = None
    if beam_size > 1:
        ref_b = beam_search(model, src_t, beam_size=beam_size, n_best=beam_size, max_len=limits)
        got_b = decode_ids(rt, sources, DecodeOptions(beam_size=beam_size, n_best=beam_size))
        beam_equal = sum([h.tokens for h in r] == [h.tokens for h in g] for r, g in zip(ref_b, got_b))
    return Parity(src.shape[0], equal, worst, beam_equal)


def translate_onnx(rt: Runtime, tokenizer, texts: Sequence[str], target_lang: str, beam_size: int = 1,
                   batch_size: int = 64) -> list[str]:
    """Translate texts with the package (batched by length, returned in input order); spans are
    protected by placeholders when the tokenizer has them, as training/decode.py ``translate``
    and the server do."""
    encoded = [tokenizer.encode_protected(t, target_lang) for t in texts]  # (ids, originals) each
    order = sorted(range(len(texts)), key=lambda i: len(encoded[i][0]))
    out = [""] * len(texts)
    options = DecodeOptions(beam_size=beam_size)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        for i, nbest in zip(idx, decode_ids(rt, [encoded[i][0] for i in idx], options)):
            out[i] = tokenizer.decode_restored(nbest[0].tokens, encoded[i][1])
    return out


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="nmt-verify", description=__doc__,
                       epilog=exit_status_help(EXIT_FAILED, EXIT_USAGE).replace(
                           "failed while running (run it again as it is)", "the package differs from PyTorch"))
    p.add_argument("package", help="the model package (the directory nmt-export wrote)")
    p.add_argument("checkpoint", help="the checkpoint (or run directory) the package was exported from")
    p.add_argument("--split", default="test", choices=["dev", "test"], help="which split of the checkpoint's data")
    p.add_argument("--limit", type=int, default=0, help="first N sentences per direction (0 = all)")
    p.add_argument("--beam", type=int, default=1, help="beam size of the BLEU runs (1: greedy)")
    p.add_argument("--parity-rows", type=int, default=16, help="sentences per direction for the token/logit checks")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads of PyTorch and onnxruntime")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return verify(args)
    except UsageError as e:
        return fail("nmt-verify", str(e), EXIT_USAGE)


def verify(args: argparse.Namespace) -> int:
    import torch

    from training import checkpoint as ckpt_io
    from training.data import eval_sets, label_direction, pad
    from training.decode import translate
    from training.evaluate import score

    torch.set_num_threads(args.threads)
    try:
        package = ModelPackage.load(args.package)
        path = ckpt_io.resolve(args.checkpoint)
        model, cfg, ckpt = ckpt_io.load_model(path)
    except (PackageError, FileNotFoundError, ValueError) as e:  # not there, not valid, sha256 mismatch
        raise UsageError(str(e)) from None
    tokenizer = ckpt_io.load_tokenizer(ckpt)
    by_dir: dict[str, tuple[list[str], list[str]]] = {}
    for label, pairs in eval_sets(cfg.data, args.split).items():  # "en-de", or "en-de/libreoffice-help"
        take = pairs[:args.limit] if args.limit else pairs
        by_dir[label] = ([p.src for p in take], [p.tgt for p in take])
    ok = True
    # Each artifact is loaded (and its sha256 checked) once for all the directions.
    runtimes = {variant: cpu_runtime(package, variant, args.threads) for variant in package.variants
                if variant != "fp16"}  # half precision is for CUDA
    for direction, (sources, refs) in by_dir.items():
        tgt = label_direction(direction)[1]
        src = pad([tokenizer.encode_source(t, tgt) for t in sources[: args.parity_rows]]).numpy()
        par = parity(runtimes["fp32"], model, src, beam_size=max(args.beam, 2))
        print(f"{direction}: greedy tokens equal {par.greedy_equal}/{par.rows}, max |log-prob diff| "
              f"{par.max_logprob_diff:.2e}, beam n-best equal {par.beam_equal}/{par.rows}", flush=True)
        ok &= par.greedy_equal == par.rows and par.max_logprob_diff < 1e-4
        start = time.monotonic()
        hyps = translate(model, tokenizer, sources, tgt, beam_size=args.beam)
        bleu, chrf, _ = score(hyps, refs)
        print(f"{direction}  pytorch    BLEU {bleu:6.2f}  chrF {chrf:6.2f}  ({time.monotonic() - start:.0f}s)",
              flush=True)
        for variant, rt in runtimes.items():
            start = time.monotonic()
            hyps = translate_onnx(rt, tokenizer, sources, tgt, args.beam)
            bleu_v, chrf_v, _ = score(hyps, refs)
            print(f"{direction}  onnx-{variant:<5} BLEU {bleu_v:6.2f}  chrF {chrf_v:6.2f}  "
                  f"(delta {bleu_v - bleu:+.2f}; {time.monotonic() - start:.0f}s)", flush=True)
    return EXIT_OK if ok else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
