"""Warm start: a new run begins from an earlier model's weights, across a change of vocabulary.

Every weight but the (shared source/target/output) embedding is copied as it is; the shapes
must match. The embedding is rebuilt row by row for the new tokenizer:
- a piece the old vocabulary also has (same string: "▁the", "<2de>", "<0x41>") keeps its row;
- a new piece gets the mean of the rows of the old pieces that spell its text;
- what the old vocabulary cannot spell (unknown characters) or what has no text (the
  placeholder symbols, bytes that are not characters) gets the mean row plus small noise,
  so the new pieces start where the model's embeddings live rather than at random scale.
This is how a model trained on one corpus is carried to a tokenizer trained on a wider one
without starting over.
"""

from __future__ import annotations

import torch

from training import checkpoint as ckpt_io
from training.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from training.model import Transformer
from training.tokenizer import Tokenizer

_SPECIAL = (PAD_ID, UNK_ID, BOS_ID, EOS_ID)


def piece_text(piece: str) -> str | None:
    """The text a piece stands for ("▁the" -> " the", "<0x41>" -> "A"); None when it has none."""
    if piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:
        value = int(piece[3:5], 16)
        return chr(value) if value < 0x80 else None
    if piece.startswith("<") and piece.endswith(">"):
        return None  # tags and placeholders
    return piece.replace("\u2581", " ")


@torch.no_grad()
def map_embeddings(old: torch.Tensor, old_tok: Tokenizer, new_tok: Tokenizer,
                   seed: int = 1) -> tuple[torch.Tensor, dict[str, int]]:
    """Rows of the new embedding from the old one; also how many rows came which way."""
    gen = torch.Generator().manual_seed(seed)
    mean = old[4:].mean(0)
    std = old[4:].std(0).mean() * 0.1
    new = mean.repeat(new_tok.vocab_size, 1) + std * torch.randn(new_tok.vocab_size, old.size(1), generator=gen)
    counts = {"copied": 0, "composed": 0, "mean": 0}
    old_sp = old_tok.sp
    for i in range(new_tok.vocab_size):
        piece = new_tok.sp.id_to_piece(i)
        if i in _SPECIAL:
            new[i] = old[i]
            counts["copied"] += 1
            continue
        j = old_sp.piece_to_id(piece)
        if j != UNK_ID and j not in _SPECIAL:
            new[i] = old[j]
            counts["copied"] += 1
            continue
        text = piece_text(piece)
        ids = [k for k in old_sp.encode(text.strip() or text, out_type=int) if k != UNK_ID] if text else []
        ids = [k for k in ids if old_sp.id_to_piece(k) != "\u2581"] or ids
        if ids:
            new[i] = old[ids].mean(0)
            counts["composed"] += 1
        else:
            counts["mean"] += 1
    new[PAD_ID] = 0.0
    return new, counts


def warm_start(model: Transformer, tokenizer: Tokenizer, source: str) -> str:
    """Load ``source``'s weights into ``model`` (built for ``tokenizer``); returns a summary line."""
    ckpt = ckpt_io.load(ckpt_io.resolve(source))
    state = {k: v.float() for k, v in ckpt["model"].items()}
    old_tok = ckpt_io.load_tokenizer(ckpt)
    key = "embedding.weight"
    state[key], counts = map_embeddings(state[key], old_tok, tokenizer)
    own = model.state_dict()
    wrong = [k for k in own if k not in state or state[k].shape != own[k].shape]
    if wrong:
        raise ValueError(f"--init-from {source}: its model has another shape ({', '.join(wrong[:5])} differ); "
                         "start from a checkpoint of the same preset")
    model.load_state_dict(state)
    return (f"{sum(counts.values())} embedding rows: {counts['copied']} copied, {counts['composed']} composed "
            f"from old pieces, {counts['mean']} new")
