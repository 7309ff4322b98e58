"""``python -m bench.studies.marian_parity``: is Marian running our model? Scores, decoding, texts.

    python -m bench.studies.marian_parity --checkpoint models/default --sentences 60

Converts the checkpoint with bench/peers/marian_convert.py and checks, on the first
``--sentences`` test verses (split over the checkpoint's directions), three things:

1. **The weights.** ``marian score`` (teacher-forced, one pass) of each source against our
   greedy output, token by token, against our PyTorch model run with Marian's two
   conventions (decoding starts from a zero vector instead of ``<s>``'s embedding; Marian's
   sinusoid frequencies): the largest |difference| of a token's log-probability. Beside it,
   the same against our model as it is: what the conventions alone change.
2. **Marian's decoding.** Marian's greedy outputs, scored the way Marian decodes them
   (``marian decode --word-scores``), against the same PyTorch model with Marian 1.12's
   incremental pre-LN self-attention emulated: after the first step its keys and values are
   the layer's *unnormalised* inputs (bench/peers/marian_convert.py). A match means the
   diagnosis is the whole difference.
3. **The texts.** Marian's greedy outputs identical to ours (%), and BLEU of both.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bench.nmt_bench import checkpoint_batches
from bench.peers.marian_convert import MODEL_FILE, VOCAB_FILE, convert, run_marian
from engine.defaults import OUTPUT_SLOPE
from training import checkpoint as ckpt_io
from training.config import BOS_ID, EOS_ID
from training.decode import greedy_search
from training.model import Transformer


def marian_positions(max_positions: int, d_model: int) -> Tensor:
    """Marian's sinusoids in our interleaved layout: sin/cos of p * exp(-i ln(10^4) / (d/2 - 1))."""
    half = d_model // 2
    p = torch.arange(max_positions, dtype=torch.float64)[:, None]
    angle = p * torch.exp(-math.log(10000.0) / (half - 1) * torch.arange(half, dtype=torch.float64))[None]
    table = torch.zeros(max_positions, d_model, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return table.float()


def embed(model: Transformer, ids: Tensor, table: Tensor, zero_start: bool) -> Tensor:
    """Scaled embeddings plus positions; with ``zero_start`` the first position (the start
    token) gets its position only, as in Marian."""
    x = model.embedding(ids) * model.embed_scale + table[: ids.size(1)][None]
    if zero_start:
        x = torch.cat([table[:1][None].expand(ids.size(0), 1, -1), x[:, 1:]], dim=1)
    return x


@torch.inference_mode()
def log_probs(model: Transformer, src: Tensor, tgt_in: Tensor, marian: bool, as_decoded: bool = False) -> Tensor:
    """Teacher-forced log-probabilities (B, T, V), with Marian's conventions (``marian``) and,
    with ``as_decoded``, Marian's incremental pre-LN self-attention: the query at target
    position j > 0 attends to keys and values of the layer's raw inputs, position 0 to the
    normalised ones (keys and queries are then one tensor, which Marian normalises)."""
    table = marian_positions(*model.positional.table.shape) if marian else model.positional.table
    src_mask = src.ne(model.cfg.pad_id)
    x = embed(model, src, table, zero_start=False)
    for layer in model.encoder_layers:
        x = layer(x, src_mask[:, None, None, :])
    memory = model.encoder_norm(x)
    y = embed(model, tgt_in, table, zero_start=marian)
    t = tgt_in.size(1)
    causal = torch.ones(t, t, dtype=torch.bool).tril()[None, None]
    for layer in model.decoder_layers:
        attn, h = layer.self_attn, layer.sublayer[0].before(y)
        k_t, v = attn.project_kv(h)
        out = attn(h, k_t, v, causal)[0]
        if as_decoded and model.cfg.pre_norm and t > 1:
            raw_k, raw_v = attn.project_kv(y)
            out = torch.cat([out[:, :1], attn(h, raw_k, raw_v, causal)[0][:, 1:]], dim=1)
        y = layer.sublayer[0].after(y, out)
        h = layer.sublayer[1].before(y)
        ck, cv = layer.cross_attn.project_kv(memory)
        y = layer.sublayer[1].after(y, layer.cross_attn(h, ck, cv, src_mask[:, None, None, :])[0])
        y = layer.sublayer[2].after(y, layer.feed_forward(layer.sublayer[2].before(y)))
    return torch.log_softmax(model.project(model.decoder_norm(y)).float(), dim=-1)


def token_scores(model: Transformer, src: list[int], out: list[int], **kw: bool) -> np.ndarray:
    """log p of each output token and of eos, teacher-forced."""
    target = [*out, EOS_ID]
    lp = log_probs(model, torch.tensor([src]), torch.tensor([[BOS_ID, *out]]), **kw)[0]
    return lp[torch.arange(len(target)), torch.tensor(target)].numpy()


def marian_word_scores(text: str) -> list[np.ndarray]:
    """Per line of ``... ||| WordScores= a b c``: the scores."""
    return [np.array([float(s) for s in line.split("WordScores=")[1].split()]) for line in text.splitlines() if line]


def marian_runs(model_dir: Path, work: Path, tokenizer: Any, sources: list[list[int]], ours: list[list[int]]
                ) -> tuple[list[np.ndarray], list[list[int]], list[np.ndarray]]:
    """Marian on a converted model (``model_dir``), files in ``work``: its teacher-forced scores of
    ``ours`` (each token and eos), its greedy outputs of ``sources`` (tag + pieces + eos) and its
    scores of those as it decoded them."""
    piece = tokenizer.sp.id_to_piece
    src, forced, scores, decoded = (work / f"{n}.txt" for n in ("src", "ours", "scores", "marian"))
    src.write_text("".join(" ".join(map(piece, s[:-1])) + "\n" for s in sources))  # Marian appends eos
    forced.write_text("".join(" ".join(map(piece, o)) + "\n" for o in ours))
    model = ["-m", str(model_dir / MODEL_FILE), "-v", str(model_dir / VOCAB_FILE), str(model_dir / VOCAB_FILE),
             "--word-scores", "--cpu-threads", "1", "--quiet"]
    run_marian(["score", *model, "-t", str(src), str(forced), "-o", str(scores)])
    run_marian(["decode", *model, "-i", str(src), "--beam-size", "1", "--max-length-factor", str(OUTPUT_SLOPE),
                "-o", str(decoded)])
    lines = decoded.read_text().splitlines()
    outputs = [[tokenizer.sp.piece_to_id(t) for t in line.split("|||")[0].split()] for line in lines]
    return marian_word_scores(scores.read_text()), outputs, marian_word_scores("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.studies.marian_parity", description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", default="models/default", help="checkpoint file or run directory")
    p.add_argument("--sentences", type=int, default=60, help="test verses, split over the checkpoint's directions")
    p.add_argument("--input", type=Path, help="'source<TAB>reference' lines in the checkpoint's first direction "
                   "instead of its test split")
    p.add_argument("--marian-model", type=Path, help="where to convert (default: a temporary directory)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    model, _ = ckpt_io.model_from(ckpt_io.load(ckpt_io.resolve(args.checkpoint)))
    model.eval()
    _, tokenizer, items, _ = checkpoint_batches(args.checkpoint, 1, args.sentences, file=args.input,
                                                one_direction=args.input is not None)
    ours = [greedy_search(model, torch.tensor([it.ids]))[0].tokens for it in items]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        out_dir = convert(args.checkpoint, args.marian_model or work / "marian", force=True)
        scored, marian_ids, decoded_scores = marian_runs(out_dir, work, tokenizer, [it.ids for it in items], ours)
    forced = max(float(np.abs(token_scores(model, it.ids, o, marian=True) - s).max())
                 for it, o, s in zip(items, ours, scored))
    unchanged = float(np.mean([np.abs(token_scores(model, it.ids, o, marian=False) - s).mean()
                               for it, o, s in zip(items, ours, scored)]))
    # an output cut at the length limit has no eos score: compare the tokens Marian scored
    emulated = max(float(np.abs(token_scores(model, it.ids, o, marian=True, as_decoded=True)[:len(s)] - s).max())
                   for it, o, s in zip(items, marian_ids, decoded_scores))
    same = sum(m == o for m, o in zip(marian_ids, ours))
    from sacrebleu.metrics import BLEU

    refs = [[it.ref or "" for it in items]]
    bleu_ours = BLEU().corpus_score([tokenizer.decode(o) for o in ours], refs).score
    bleu_marian = BLEU().corpus_score([tokenizer.decode(m) for m in marian_ids], refs).score
    print(f"{len(items)} verses ({', '.join(sorted({f'{i.src_lang}-{i.tgt_lang}' for i in items}))}), greedy, 1 thread")
    print(f"1. marian score vs our model with Marian's conventions: max |d log p| {forced:.2e} per token "
          f"(vs our model as it is: mean {unchanged:.3f})")
    print(f"2. marian decode's own scores vs that model with Marian's incremental pre-LN keys: max |d log p| "
          f"{emulated:.2e}")
    print(f"3. Marian's greedy texts identical to ours: {same}/{len(items)}; BLEU ours {bleu_ours:.2f}, "
          f"Marian {bleu_marian:.2f}; output tokens ours {sum(map(len, ours))}, Marian {sum(map(len, marian_ids))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
