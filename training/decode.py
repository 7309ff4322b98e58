"""Reference PyTorch decoding: greedy and beam search over ``Transformer.decode_step``.

This is the reference the exported ONNX graphs and the server are held against, so
it is written for clarity and determinism rather than speed. ``use_cache=False`` re-runs
the full decoder over the whole prefix at every step (the slow baseline benchmarks
compare against).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from engine.defaults import BOS_ID, EOS_ID, LENGTH_PENALTY, PAD_ID, default_max_len, length_penalty
from training.data import pad
from training.model import Transformer


@dataclass(frozen=True)
class Decoded:
    """One output of the reference decoder (the engine's is engine.decoding.Hypothesis)."""

    tokens: list[int]  # generated ids, without bos and eos
    score: float  # sum of log-probabilities, divided by the length penalty for beam search


def max_output_length(src_len: int, model: Transformer) -> int:
    """The engine's rule (engine/defaults.py), capped by the positions a target may use."""
    return default_max_len(src_len, model.cfg.max_positions - 1)


def row_limits(src: Tensor, model: Transformer, max_len: int | Sequence[int] | None) -> list[int]:
    """Output-length bound of every row: ``max_len`` if given (one for all rows, or one per
    row: the parity checks pass the server's), else from the row's own (unpadded) length, so
    that a sentence decodes the same in any batch."""
    if isinstance(max_len, Sequence):
        if len(max_len) != src.size(0):
            raise ValueError(f"{len(max_len)} length limits for {src.size(0)} rows")
        return list(max_len)
    if max_len:
        return [max_len] * src.size(0)
    return [max_output_length(int(n), model) for n in src.ne(PAD_ID).sum(dim=1)]


class _Decoder:
    """Runs the decoder step by step for a (B, S) source, with or without the cache."""

    def __init__(self, model: Transformer, src: Tensor, use_cache: bool) -> None:
        self.model, self.use_cache = model, use_cache
        self.src_mask = src.ne(PAD_ID)
        self.cross_k, self.cross_v = model.cross_kv(model.encode(src, self.src_mask))
        self.past_k, self.past_v, self.past_mask = model.empty_cache(src.size(0), src.device, self.cross_k[0].dtype)
        self.prefix = torch.empty(src.size(0), 0, dtype=torch.long, device=src.device)

    def reorder(self, rows: Tensor) -> None:
        """Keep only / duplicate rows (beam search reordering). Cross K/V and the source
        mask are indexed too: the reference favours simplicity over sharing."""
        self.src_mask = self.src_mask.index_select(0, rows)
        self.cross_k = [c.index_select(0, rows) for c in self.cross_k]
        self.cross_v = [c.index_select(0, rows) for c in self.cross_v]
        self.past_k = [c.index_select(0, rows) for c in self.past_k]
        self.past_v = [c.index_select(0, rows) for c in self.past_v]
        self.past_mask = self.past_mask.index_select(0, rows)
        self.prefix = self.prefix.index_select(0, rows)

    def step(self, tokens: Tensor) -> Tensor:
        """Feed one token per row (B,), return log-probabilities (B, V) of the next one."""
        m = self.model
        self.prefix = torch.cat([self.prefix, tokens[:, None]], dim=1)
        b, t = self.prefix.shape
        if self.use_cache:
            positions = torch.full((b, 1), t - 1, dtype=torch.long, device=tokens.device)
            out = m.decode_step(tokens[:, None], positions, self.past_mask, self.src_mask,
                                self.cross_k, self.cross_v, self.past_k, self.past_v)
            self.past_k = [torch.cat([p, n], dim=-1) for p, n in zip(self.past_k, out.new_k)]  # keys (B, H, Dh, P)
            self.past_v = [torch.cat([p, n], dim=2) for p, n in zip(self.past_v, out.new_v)]
            self.past_mask = torch.ones(b, t, dtype=torch.bool, device=tokens.device)
        else:
            positions = torch.arange(t, device=tokens.device).expand(b, t)
            past_k, past_v, past_mask = m.empty_cache(b, tokens.device, self.cross_k[0].dtype)
            out = m.decode_step(self.prefix, positions, past_mask, self.src_mask,
                                self.cross_k, self.cross_v, past_k, past_v)
        logp = torch.log_softmax(m.project(out.hidden[:, -1]).float(), dim=-1)
        logp[:, m.cfg.pad_id] = -float("inf")  # pad is no token (training never asks for it): never output
        return logp


@torch.no_grad()
def greedy_search(model: Transformer, src: Tensor, max_len: int | Sequence[int] | None = None, min_len: int = 0,
                  use_cache: bool = True) -> list[Decoded]:
    """Batched greedy decoding of a right-padded (B, S) source."""
    b = src.size(0)
    limits = row_limits(src, model, max_len)
    dec = _Decoder(model, src, use_cache)
    tokens = torch.full((b,), BOS_ID, dtype=torch.long, device=src.device)
    out: list[list[int]] = [[] for _ in range(b)]
    scores = [0.0] * b
    done = [False] * b
    for step in range(max(limits)):
        logp = dec.step(tokens)
        if step < min_len:
            logp[:, EOS_ID] = -float("inf")
        best = logp.argmax(dim=-1)
        best_logp = logp.gather(1, best[:, None]).squeeze(1)
        for i in range(b):
            if done[i]:
                continue
            scores[i] += float(best_logp[i])
            if int(best[i]) == EOS_ID:
                done[i] = True
            else:
                out[i].append(int(best[i]))
                done[i] = step + 1 >= limits[i]
        if all(done):
            break
        tokens = best
    return [Decoded(o, s) for o, s in zip(out, scores)]


@torch.no_grad()
def beam_search(model: Transformer, src: Tensor, beam_size: int = 4, n_best: int = 1, alpha: float = LENGTH_PENALTY,
                max_len: int | Sequence[int] | None = None, min_len: int = 0,
                use_cache: bool = True) -> list[list[Decoded]]:
    """Batched beam search; returns the ``n_best`` hypotheses of each source, best first.

    Every step takes the top 2K continuations of each source's K beams; those ending in
    eos among the top K are finished (scored by logprob / GNMT length penalty), the best K
    others go on (as in fairseq and Transformers: a finished hypothesis must be one the
    beam would have kept).
    A source stops once it has K finished hypotheses (or at its length limit, see
    ``row_limits``, where its live beams are finished as they stand).
    """
    if not 1 <= n_best <= beam_size:
        raise ValueError(f"n_best={n_best} must be between 1 and beam_size={beam_size}")
    b, k = src.size(0), beam_size
    limits = row_limits(src, model, max_len)
    dec = _Decoder(model, src, use_cache)
    dec.reorder(torch.arange(b, device=src.device).repeat_interleave(k))  # row = source * K + beam
    tokens = torch.full((b * k,), BOS_ID, dtype=torch.long, device=src.device)
    beam_scores = torch.full((b, k), -float("inf"), device=src.device)
    beam_scores[:, 0] = 0.0  # all beams start identical: let only the first expand
    beam_tokens: list[list[int]] = [[] for _ in range(b * k)]
    finished: list[list[Decoded]] = [[] for _ in range(b)]
    done = [False] * b
    for step in range(max(limits)):
        logp = dec.step(tokens)  # (B*K, V)
        if step < min_len:
            logp[:, EOS_ID] = -float("inf")
        vocab = logp.size(-1)
        cand = (beam_scores.view(-1, 1) + logp).view(b, k * vocab)
        top_scores, top_ids = cand.topk(2 * k, dim=1)  # (B, 2K)
        next_rows, next_tokens, next_scores = [], [], []
        new_beam_tokens: list[list[int]] = []
        for i in range(b):
            kept = 0
            for rank, (score, flat) in enumerate(zip(top_scores[i].tolist(), top_ids[i].tolist())):
                if kept == k:
                    break
                row, token = i * k + flat // vocab, flat % vocab
                if score == -float("inf"):
                    break
                if token == EOS_ID:
                    if rank < k and not done[i] and len(finished[i]) < k:
                        hyp = beam_tokens[row]
                        finished[i].append(Decoded(hyp, score / length_penalty(len(hyp) + 1, alpha)))
                    continue
                next_rows.append(row)
                next_tokens.append(token)
                next_scores.append(score)
                new_beam_tokens.append(beam_tokens[row] + [token])
                kept += 1
            while kept < k:  # pad with dead beams so every source keeps K rows
                next_rows.append(i * k)
                next_tokens.append(PAD_ID)
                next_scores.append(-float("inf"))
                new_beam_tokens.append([])
                kept += 1
            if len(finished[i]) >= k:
                done[i] = True
        if all(done):
            break
        dec.reorder(torch.tensor(next_rows, device=src.device))
        tokens = torch.tensor(next_tokens, device=src.device)
        beam_scores = torch.tensor(next_scores, device=src.device).view(b, k)
        beam_tokens = new_beam_tokens
        for i in range(b):  # at its length limit a source's live beams finish as they stand
            if not done[i] and step + 1 >= limits[i]:
                for j in range(k):
                    score = float(beam_scores[i, j])
                    if score > -float("inf"):
                        hyp = beam_tokens[i * k + j]
                        finished[i].append(Decoded(hyp, score / length_penalty(len(hyp), alpha)))
                done[i] = True
        if all(done):
            break
    results = []
    for i in range(b):
        ranked = sorted(finished[i], key=lambda h: h.score, reverse=True)
        results.append(ranked[:n_best])
    return results


@torch.no_grad()
def translate(model: Transformer, tokenizer, texts: Sequence[str], target_lang: str, beam_size: int = 1,
              batch_size: int = 64, alpha: float = LENGTH_PENALTY, device: torch.device | str = "cpu") -> list[str]:
    """Translate texts (batched by length, returned in input order)."""
    model.eval()
    encoded = [tokenizer.encode_protected(t, target_lang) for t in texts]  # (ids, originals) each
    order = sorted(range(len(texts)), key=lambda i: len(encoded[i][0]))
    results: list[str] = [""] * len(texts)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        src = pad([encoded[i][0] for i in idx]).to(device)
        if beam_size == 1:
            hyps = greedy_search(model, src)
        else:
            hyps = [nb[0] for nb in beam_search(model, src, beam_size=beam_size, alpha=alpha)]
        for i, h in zip(idx, hyps):
            results[i] = tokenizer.decode_restored(h.tokens, encoded[i][1])
    return results
