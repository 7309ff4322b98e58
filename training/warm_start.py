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

A pre-LN model can also grow (``grow``): more encoder or decoder layers, a wider feed-forward.
The grown model computes exactly what the old one did, so training continues from the old
model's quality instead of from a damaged copy of it:
- a new layer's sub-layer outputs (attention ``w_o``, feed-forward ``w_2``) start at zero, so in
  pre-LN (x + Sublayer(LayerNorm(x))) it passes its input through unchanged; its other weights
  are a copy of a trained layer, so its first gradients carry that layer's features;
- new layers go just below the old top layer, which keeps its input and so its cross-attention
  weights (what the decoder reports as alignment);
- a wider feed-forward gets fresh rows in ``w_1`` and zero columns in ``w_2``.
Post-LN models cannot grow this way (the LayerNorm after the residual is not an identity).
"""

from __future__ import annotations

import re
from dataclasses import fields

import torch

from training import checkpoint as ckpt_io
from training.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID, ModelConfig, RunConfig
from training.model import Transformer
from training.tokenizer import Tokenizer

_SPECIAL = (PAD_ID, UNK_ID, BOS_ID, EOS_ID)
_LAYER = re.compile(r"^(encoder|decoder)_layers\.(\d+)\.(.+)$")
_SUBLAYER_OUTPUTS = ("self_attn.w_o.", "cross_attn.w_o.", "feed_forward.w_2.")
# What a warm start may change: the vocabulary (map_embeddings), the depth and feed-forward width
# (grow) and the regularisation. Anything else is another model.
_MAY_DIFFER = {"vocab_size", "n_encoder_layers", "n_decoder_layers", "d_ff", "dropout", "attention_dropout",
               "activation_dropout"}


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


def _layer_sources(n_old: int, n_new: int) -> list[tuple[int, bool]]:
    """For each layer of the grown stack: the old layer it copies and whether it is new (identity)."""
    below = max(n_old - 2, 0)
    return [(i, False) if i < n_old - 1 else (n_old - 1, False) if i == n_new - 1 else (below, True)
            for i in range(n_new)]


@torch.no_grad()
def grow(state: dict[str, torch.Tensor], old: ModelConfig, new: ModelConfig,
         fresh: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], str]:
    """``state`` (a model of config ``old``) laid out for config ``new``, computing the same function.

    ``fresh`` is the new model's own (randomly initialised) state: the rows a wider feed-forward
    adds to ``w_1`` come from it. Returns the state and a summary ("" when nothing grew)."""
    changed = [f.name for f in fields(ModelConfig)
               if f.name not in _MAY_DIFFER and getattr(old, f.name) != getattr(new, f.name)]
    if changed:
        raise ValueError("its model has another shape (" + ", ".join(
            f"{name} {getattr(old, name)} -> {getattr(new, name)}" for name in changed)
            + "); a warm start may change only the vocabulary, the number of layers and d_ff")
    depth = {"encoder": (old.n_encoder_layers, new.n_encoder_layers),
             "decoder": (old.n_decoder_layers, new.n_decoder_layers)}
    changes = {f"{stack} layers": sizes for stack, sizes in depth.items() if sizes[0] != sizes[1]}
    if old.d_ff != new.d_ff:
        changes["d_ff"] = (old.d_ff, new.d_ff)
    if not changes:
        return state, ""
    shrunk = [f"{name} {a} -> {b}" for name, (a, b) in changes.items() if b < a]
    if shrunk:
        raise ValueError(f"a warm start can grow a model, not shrink it ({', '.join(shrunk)})")
    if not old.pre_norm:
        raise ValueError("only a pre-LN model can grow (model.pre_norm=true): a post-LN layer is not "
                         "an identity with its outputs at zero")
    sources = {stack: _layer_sources(a, b) for stack, (a, b) in depth.items()}
    out: dict[str, torch.Tensor] = {k: v for k, v in state.items() if not _LAYER.match(k)}
    for key in fresh:
        m = _LAYER.match(key)
        if not m:
            continue
        stack, index, rest = m.group(1), int(m.group(2)), m.group(3)
        source, is_new = sources[stack][index]
        value = state[f"{stack}_layers.{source}.{rest}"].clone()
        if is_new and rest.startswith(_SUBLAYER_OUTPUTS):
            value.zero_()
        if rest == "feed_forward.w_1.weight" or rest == "feed_forward.w_1.bias":
            value = torch.cat([value, fresh[key][old.d_ff:].to(value.dtype)])
        elif rest == "feed_forward.w_2.weight":
            value = torch.cat([value, value.new_zeros(value.size(0), new.d_ff - old.d_ff)], dim=1)
        out[key] = value
    grown = ", ".join(f"{name} {a} -> {b}" for name, (a, b) in changes.items())
    return out, f"grown ({grown}; new parts start as identities)"


def warm_start(model: Transformer, tokenizer: Tokenizer, source: str) -> str:
    """Load ``source``'s weights into ``model`` (built for ``tokenizer``); returns a summary line."""
    ckpt = ckpt_io.load(ckpt_io.resolve(source))
    state = {k: v.float() for k, v in ckpt["model"].items()}
    old_tok = ckpt_io.load_tokenizer(ckpt)
    key = "embedding.weight"
    state[key], counts = map_embeddings(state[key], old_tok, tokenizer)
    own = model.state_dict()
    try:
        state, grown = grow(state, RunConfig.from_dict(ckpt["config"]).model, model.cfg, own)
    except ValueError as e:
        raise ValueError(f"--init-from {source}: {e}") from None
    wrong = [k for k in own if k not in state or state[k].shape != own[k].shape]
    if wrong:
        raise ValueError(f"--init-from {source}: its model has another shape ({', '.join(wrong[:5])} differ); "
                         "start from a checkpoint of the same preset")
    model.load_state_dict(state)
    return (f"{sum(counts.values())} embedding rows: {counts['copied']} copied, {counts['composed']} composed "
            f"from old pieces, {counts['mean']} new" + (f"; {grown}" if grown else ""))
