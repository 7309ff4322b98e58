"""``nmt-verify``: hold a model package against the PyTorch reference decoder.

    nmt-verify packages/small-ende runs/small-ende --split test --limit 200 --beam 4

Runs a plain greedy and beam-search loop over the exported step graph in onnxruntime
(``OrtModel``, ``ort_greedy``, ``ort_beam``), mirroring ``training/decode.py`` step for
step, and reports: identical greedy tokens, max |logit difference| along the decoded
paths, identical beam n-best lists, and BLEU of every graph variant beside PyTorch's.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from export import contract
from export.package import ModelPackage


@dataclass(frozen=True)
class OrtHypothesis:
    tokens: list[int]
    score: float


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float32)
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


class OrtModel:
    """The package's two graphs in onnxruntime sessions (CPU unless told otherwise)."""

    def __init__(self, package: ModelPackage, variant: str = "fp32", threads: int = 1,
                 providers: Sequence[str] = ("CPUExecutionProvider",)) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.package = package
        self.encoder = ort.InferenceSession(str(package.graph_path(contract.ENCODER, variant)), opts,
                                            providers=list(providers))
        self.decoder = ort.InferenceSession(str(package.graph_path(contract.DECODER, variant)), opts,
                                            providers=list(providers))
        self.float_type = np.float16 if variant == "fp16" else np.float32
        d = package.dims
        self.cache_shape = (d.n_decoder_layers, d.n_heads, d.d_head)
        self.pad, self.bos, self.eos = (package.special_ids[k] for k in ("pad", "bos", "eos"))

    def encode(self, src_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cross_k, cross_v = self.encoder.run(None, {contract.SRC_IDS: src_ids.astype(np.int64)})
        return cross_k, cross_v

    def step(self, input_ids, positions, past_mask, src_mask, cross_k, cross_v, past_k, past_v):
        feeds = {contract.INPUT_IDS: input_ids, contract.POSITIONS: positions, contract.PAST_MASK: past_mask,
                 contract.SRC_MASK: src_mask, contract.CROSS_K: cross_k, contract.CROSS_V: cross_v,
                 contract.PAST_K: past_k, contract.PAST_V: past_v}
        return self.decoder.run(None, feeds)  # logits, present_k, present_v, cross_attention

    def empty_past(self, batch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        layers, heads, d_head = self.cache_shape
        empty = np.zeros((layers, batch, heads, 0, d_head), dtype=self.float_type)
        return empty, empty.copy(), np.zeros((batch, 0), dtype=bool)

    def max_output_length(self, src_len: int) -> int:
        return min(self.package.dims.max_positions - 1, int(1.5 * src_len) + 10)


class _Steps:
    """Step-by-step decoding state over the ORT graphs (mirrors training.decode._Decoder)."""

    def __init__(self, m: OrtModel, src: np.ndarray) -> None:
        self.m = m
        self.src_mask = src != m.pad
        self.cross_k, self.cross_v = m.encode(src)
        self.past_k, self.past_v, self.past_mask = m.empty_past(src.shape[0])
        self.length = 0
        self.logits: np.ndarray | None = None

    def reorder(self, rows: np.ndarray) -> None:
        self.src_mask, self.past_mask = self.src_mask[rows], self.past_mask[rows]
        self.cross_k, self.cross_v = self.cross_k[:, rows], self.cross_v[:, rows]
        self.past_k, self.past_v = self.past_k[:, rows], self.past_v[:, rows]

    def step(self, tokens: np.ndarray) -> np.ndarray:
        b = tokens.shape[0]
        positions = np.full((b, 1), self.length, dtype=np.int64)
        logits, self.past_k, self.past_v, _ = self.m.step(
            tokens[:, None].astype(np.int64), positions, self.past_mask, self.src_mask, self.cross_k, self.cross_v,
            self.past_k, self.past_v)
        self.length += 1
        self.past_mask = np.ones((b, self.length), dtype=bool)
        self.logits = logits.astype(np.float32)
        return log_softmax(self.logits)


def ort_greedy(m: OrtModel, src: np.ndarray, max_len: int | None = None, min_len: int = 0) -> list[OrtHypothesis]:
    b = src.shape[0]
    max_len = max_len or m.max_output_length(src.shape[1])
    dec = _Steps(m, src)
    tokens = np.full(b, m.bos, dtype=np.int64)
    out: list[list[int]] = [[] for _ in range(b)]
    scores, done = [0.0] * b, [False] * b
    for step in range(max_len):
        logp = dec.step(tokens)
        if step < min_len:
            logp[:, m.eos] = -np.inf
        best = logp.argmax(axis=-1)
        for i in range(b):
            if done[i]:
                continue
            scores[i] += float(logp[i, best[i]])
            if best[i] == m.eos:
                done[i] = True
            else:
                out[i].append(int(best[i]))
        if all(done):
            break
        tokens = best
    return [OrtHypothesis(o, s) for o, s in zip(out, scores)]


def ort_beam(m: OrtModel, src: np.ndarray, beam_size: int = 4, n_best: int = 1, alpha: float = 0.6,
             max_len: int | None = None) -> list[list[OrtHypothesis]]:
    """The reference beam search (training.decode.beam_search) over the ORT graphs."""
    from training.decode import length_penalty

    b, k = src.shape[0], beam_size
    max_len = max_len or m.max_output_length(src.shape[1])
    dec = _Steps(m, src)
    dec.reorder(np.repeat(np.arange(b), k))
    tokens = np.full(b * k, m.bos, dtype=np.int64)
    beam_scores = np.full((b, k), -np.inf, dtype=np.float32)
    beam_scores[:, 0] = 0.0
    beam_tokens: list[list[int]] = [[] for _ in range(b * k)]
    finished: list[list[OrtHypothesis]] = [[] for _ in range(b)]
    done = [False] * b
    for _ in range(max_len):
        logp = dec.step(tokens)
        vocab = logp.shape[-1]
        cand = (beam_scores.reshape(-1, 1) + logp).reshape(b, k * vocab)
        top_ids = np.argsort(-cand, axis=1, kind="stable")[:, : 2 * k]
        next_rows, next_tokens, next_scores, new_beam_tokens = [], [], [], []
        for i in range(b):
            kept = 0
            for flat in top_ids[i]:
                score = float(cand[i, flat])
                if kept == k or score == -np.inf:
                    break
                row, token = i * k + int(flat) // vocab, int(flat) % vocab
                if token == m.eos:
                    if not done[i] and len(finished[i]) < k:
                        hyp = beam_tokens[row]
                        finished[i].append(OrtHypothesis(hyp, score / length_penalty(len(hyp) + 1, alpha)))
                    continue
                next_rows.append(row)
                next_tokens.append(token)
                next_scores.append(score)
                new_beam_tokens.append([*beam_tokens[row], token])
                kept += 1
            while kept < k:
                next_rows.append(i * k)
                next_tokens.append(m.pad)
                next_scores.append(-np.inf)
                new_beam_tokens.append([])
                kept += 1
            if len(finished[i]) >= k:
                done[i] = True
        if all(done):
            break
        dec.reorder(np.array(next_rows))
        tokens = np.array(next_tokens, dtype=np.int64)
        beam_scores = np.array(next_scores, dtype=np.float32).reshape(b, k)
        beam_tokens = new_beam_tokens
    else:
        for i in range(b):
            if done[i]:
                continue
            for j in range(k):
                if beam_scores[i, j] > -np.inf:
                    hyp = beam_tokens[i * k + j]
                    finished[i].append(OrtHypothesis(hyp, float(beam_scores[i, j]) / length_penalty(len(hyp), alpha)))
    return [sorted(f, key=lambda h: h.score, reverse=True)[:n_best] for f in finished]


# ---------------------------------------------------------------- parity against PyTorch
@dataclass(frozen=True)
class Parity:
    rows: int
    greedy_equal: int
    max_logit_diff: float
    beam_equal: int | None


def parity(package_dir: str | Path, checkpoint: str | Path, src: np.ndarray, beam_size: int = 4,
           variant: str = "fp32") -> Parity:
    """Greedy tokens, logits along PyTorch's greedy paths (teacher-forced), beam n-best."""
    import torch

    from training import checkpoint as ckpt_io
    from training.decode import beam_search, greedy_search

    model, _, _ = ckpt_io.load_model(checkpoint)
    m = OrtModel(ModelPackage.load(package_dir), variant)
    src_t = torch.from_numpy(src.astype(np.int64))
    ref = greedy_search(model, src_t)
    got = ort_greedy(m, src)
    equal = sum(r.tokens == g.tokens for r, g in zip(ref, got))
    # Teacher-force PyTorch's own greedy outputs through the ORT step loop and compare logits.
    worst = 0.0
    with torch.no_grad():
        width = max(len(h.tokens) for h in ref) + 1
        prefix = np.full((src.shape[0], width), m.pad, dtype=np.int64)
        prefix[:, 0] = m.bos
        for i, h in enumerate(ref):
            prefix[i, 1:len(h.tokens) + 1] = h.tokens
        full = model(src_t, torch.from_numpy(prefix)).numpy()  # (B, T, V)
        dec = _Steps(m, src)
        for t in range(width):
            dec.step(prefix[:, t])
            assert dec.logits is not None
            worst = max(worst, float(np.abs(dec.logits - full[:, t]).max()))
    beam_equal = None
    if beam_size > 1:
        ref_b = beam_search(model, src_t, beam_size=beam_size, n_best=beam_size)
        got_b = ort_beam(m, src, beam_size=beam_size, n_best=beam_size)
        beam_equal = sum([h.tokens for h in r] == [h.tokens for h in g] for r, g in zip(ref_b, got_b))
    return Parity(src.shape[0], equal, worst, beam_equal)


def translate_ort(m: OrtModel, tokenizer, texts: Sequence[str], target_lang: str, beam_size: int = 1,
                  batch_size: int = 64) -> list[str]:
    from training.data import pad

    encoded = [tokenizer.encode_source(t, target_lang) for t in texts]
    order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
    out = [""] * len(texts)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        src = pad([encoded[i] for i in idx]).numpy()
        hyps = ort_greedy(m, src) if beam_size == 1 else [nb[0] for nb in ort_beam(m, src, beam_size)]
        for i, h in zip(idx, hyps):
            out[i] = tokenizer.decode(h.tokens)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="nmt-verify", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("package")
    p.add_argument("checkpoint", help="the checkpoint (or run directory) the package was exported from")
    p.add_argument("--split", default="test", choices=["dev", "test"])
    p.add_argument("--limit", type=int, default=0, help="first N sentences per direction (0 = all)")
    p.add_argument("--beam", type=int, default=1)
    p.add_argument("--parity-rows", type=int, default=16, help="sentences per direction for the token/logit checks")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)

    import torch

    from training import checkpoint as ckpt_io
    from training.data import load_pairs, pad, parse_direction
    from training.decode import translate
    from training.evaluate import score

    torch.set_num_threads(args.threads)
    package = ModelPackage.load(args.package)
    model, cfg, ckpt = ckpt_io.load_model(ckpt_io.resolve(args.checkpoint))
    tokenizer = ckpt_io.load_tokenizer(ckpt)
    by_dir: dict[str, tuple[list[str], list[str]]] = {}
    for pair in load_pairs(cfg.data, args.split):
        s, r = by_dir.setdefault(pair.direction, ([], []))
        if not args.limit or len(s) < args.limit:
            s.append(pair.src)
            r.append(pair.tgt)
    ok = True
    for direction, (sources, refs) in by_dir.items():
        tgt = parse_direction(direction)[1]
        src = pad([tokenizer.encode_source(t, tgt) for t in sources[: args.parity_rows]]).numpy()
        par = parity(args.package, ckpt_io.resolve(args.checkpoint), src, beam_size=max(args.beam, 2))
        print(f"{direction}: greedy tokens equal {par.greedy_equal}/{par.rows}, max |logit diff| "
              f"{par.max_logit_diff:.2e}, beam n-best equal {par.beam_equal}/{par.rows}")
        ok &= par.greedy_equal == par.rows and par.max_logit_diff < 1e-4
        start = time.monotonic()
        hyps = translate(model, tokenizer, sources, tgt, beam_size=args.beam)
        bleu, chrf, _ = score(hyps, refs)
        print(f"{direction}  pytorch  BLEU {bleu:6.2f}  chrF {chrf:6.2f}  ({time.monotonic() - start:.0f}s)")
        for variant in package.variants:
            if variant == "fp16":
                continue  # half precision is for CUDA; onnxruntime's CPU kernels do not all take it
            start = time.monotonic()
            hyps = translate_ort(OrtModel(package, variant, args.threads), tokenizer, sources, tgt, args.beam)
            bleu_v, chrf_v, _ = score(hyps, refs)
            print(f"{direction}  onnx-{variant:<4} BLEU {bleu_v:6.2f}  chrF {chrf_v:6.2f}  "
                  f"(delta {bleu_v - bleu:+.2f}; {time.monotonic() - start:.0f}s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
