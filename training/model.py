"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), in one file.

Shapes use B = batch, S = source length, T = new target tokens, P = cached target
positions, H = heads, Dh = d_model / H, L = decoder layers, V = vocabulary.

Masks are boolean and True where a position is real (may be attended to). They are
applied with ``masked_fill`` to a large negative that is finite in fp16, so a fully
masked row gives a uniform distribution instead of NaN.

The decoder has one code path: ``decode_step`` takes new tokens, their explicit
positions, a cache of past keys/values with a mask over it, and the source's
cross-attention keys/values. Training calls it with P = 0 and the whole target
prefix; incremental decoding (reference decoder, ONNX export, the server) calls it
one token at a time. Because the same function serves both, "the cache gives the same
logits as the full decoder" is a property of the code, and a test checks it. The cache is
read-only inside a step (attention over it and over the new tokens is joined at the
scores, not by concatenating keys), and keys and values are kept per layer, so a decoder
that owns its cache as a preallocated buffer appends one column per step in place.
Stored keys (cache, cross-attention) are transposed, (B, H, Dh, positions): see
``MultiHeadAttention.project_kv``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from training.config import ModelConfig

MASK_VALUE = -1.0e4  # finite in fp16 (max 65504); exp(-1e4) underflows to exactly 0


def scaled_dot_product_attention(
    q: Tensor, k_t: Tensor, v: Tensor, mask: Tensor | None, dropout: nn.Module | None = None,
    cache: tuple[Tensor, Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.

    q: (B, H, T, Dh); keys come transposed, k_t: (B, H, Dh, S) (see ``project_kv``);
    v: (B, H, S, Dh); mask: bool broadcastable to (B, H, T, S).
    ``cache``: optional past keys (B, H, Dh, P), values (B, H, P, Dh) and their mask
    (B, 1, 1, P), attended together with k_t/v. The result equals attention over the
    concatenated keys and values, but the cache is only read: the scores of both parts are
    joined (small, (B, H, T, P+S)), and the two weighted sums added. Concatenating instead
    would copy the whole cache at every decoding step.
    Returns the output (B, H, T, Dh) and the attention weights (B, H, T, P+S).
    """
    q = q / math.sqrt(q.size(-1))  # the same as scaling the scores, on T x Dh values instead of T x S
    # One new token (a decoding step): its score against its own key is a dot product, and
    # its share of the output a scaled copy of its value. Written as elementwise products
    # because runtimes multiply batched matrices one (row, head) at a time, and 1 x 1
    # products would cost as much as the scores over the whole cache.
    one_new = cache is not None and k_t.size(-1) == 1
    scores = (q * k_t.transpose(-2, -1)).sum(-1, keepdim=True) if one_new else torch.matmul(q, k_t)  # (B, H, T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, MASK_VALUE)
    if cache is not None:
        past_kt, _, past_mask = cache
        past_scores = torch.matmul(q, past_kt).masked_fill(~past_mask, MASK_VALUE)
        scores = torch.cat([past_scores, scores], dim=-1)  # (B, H, T, P+S)
    weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    attended = weights if dropout is None else dropout(weights)
    if cache is None:
        return torch.matmul(attended, v), weights
    past_v, p = cache[1], cache[0].size(-1)
    own = attended[..., p:] * v if one_new else torch.matmul(attended[..., p:], v)
    return torch.matmul(attended[..., :p], past_v) + own, weights


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W^Q_i, K W^K_i, V W^V_i)."""

    def __init__(self, d_model: int, n_heads: int, attention_dropout: float) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(attention_dropout)

    def split_heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape  # (B, T, D) -> (B, H, T, Dh)
        return x.view(b, t, self.n_heads, self.d_head).transpose(1, 2)

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of a memory: keys transposed, (B, H, Dh, S), values (B, H, S, Dh).

        Keys are kept transposed wherever they are stored (cross-attention keys, the cache),
        so a decoding step's scores are a plain matrix product q @ k_t: onnxruntime then
        multiplies one query row by each (row, head)'s keys with its matrix-vector kernel,
        about twice as fast as with a transposed operand, which it repacks first (43 vs
        92 us per layer at 32 rows and 32 cached positions; docs/BENCHMARKS.md, what we tried).
        """
        return self.split_heads(self.w_k(x)).transpose(-2, -1), self.split_heads(self.w_v(x))

    def forward(self, x: Tensor, k_t: Tensor, v: Tensor, mask: Tensor | None,
                cache: tuple[Tensor, Tensor, Tensor] | None = None, shared: bool = False) -> tuple[Tensor, Tensor]:
        """``shared``: k_t and v hold C memories (C divides B), each read by B / C consecutive
        rows of x (a beam-search job's beams share their source's). Each (row, head) still
        multiplies its own query by its memory's keys, so the values are those of a memory
        tiled per row; the runtime only reads each memory once per group instead of once per
        row (broadcast over the group axis, no copy)."""
        q = self.split_heads(self.w_q(x))  # (B, H, T, Dh)
        if shared:
            rows, sources = q.size(0), k_t.size(0)
            q = q.reshape(sources, -1, *q.shape[1:])  # (C, B / C, H, T, Dh)
            k_t, v = k_t.unsqueeze(1), v.unsqueeze(1)  # (C, 1, H, ...): broadcast over the group
            mask = None if mask is None else mask.reshape(sources, -1, *mask.shape[1:])
        out, weights = scaled_dot_product_attention(q, k_t, v, mask, self.dropout, cache)
        if shared:
            out, weights = out.reshape(rows, *out.shape[2:]), weights.reshape(rows, *weights.shape[2:])
        b, _, t, _ = out.shape
        out = out.transpose(1, 2).reshape(b, t, self.n_heads * self.d_head)  # (B, T, D)
        return self.w_o(out), weights


ACTIVATION_FUNCTIONS = {"relu": F.relu, "swish": F.silu, "gelu": F.gelu}  # the names of ModelConfig.activation


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 (the paper's ReLU; swish or GELU for imported models)."""

    def __init__(self, d_model: int, d_ff: int, activation_dropout: float, activation: str = "relu") -> None:
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(activation_dropout)
        self.activation = ACTIVATION_FUNCTIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.dropout(self.activation(self.w_1(x))))


class SublayerConnection(nn.Module):
    """Residual + LayerNorm: post-LN LayerNorm(x + Dropout(Sublayer(x))) as published,
    or pre-LN x + Dropout(Sublayer(LayerNorm(x)))."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.pre_norm = pre_norm

    def before(self, x: Tensor) -> Tensor:
        return self.norm(x) if self.pre_norm else x

    def after(self, x: Tensor, sublayer_out: Tensor) -> Tensor:
        y = x + self.dropout(sublayer_out)
        return y if self.pre_norm else self.norm(y)


def sinusoidal_table(max_positions: int, d_model: int) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d))."""
    position = torch.arange(max_positions, dtype=torch.float64).unsqueeze(1)
    div = torch.pow(10000.0, torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    table = torch.zeros(max_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position / div)
    table[:, 1::2] = torch.cos(position / div)
    return table.float()


class PositionalEncoding(nn.Module):
    """A fixed table looked up by explicit positions: the paper's sinusoids, computed, or
    (``stored``) a table kept with the weights, such as an imported model's own."""

    def __init__(self, max_positions: int, d_model: int, stored: bool = False) -> None:
        super().__init__()
        self.register_buffer("table", sinusoidal_table(max_positions, d_model), persistent=stored)

    def forward(self, positions: Tensor) -> Tensor:
        return self.table[positions]  # (B, T) -> (B, T, D)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.feed_forward = PositionwiseFeedForward(cfg.d_model, cfg.d_ff, cfg.activation_dropout, cfg.activation)
        self.sublayer = nn.ModuleList(SublayerConnection(cfg.d_model, cfg.dropout, cfg.pre_norm) for _ in range(2))

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        h = self.sublayer[0].before(x)
        k_t, v = self.self_attn.project_kv(h)
        x = self.sublayer[0].after(x, self.self_attn(h, k_t, v, mask)[0])
        h = self.sublayer[1].before(x)
        return self.sublayer[1].after(x, self.feed_forward(h))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.feed_forward = PositionwiseFeedForward(cfg.d_model, cfg.d_ff, cfg.activation_dropout, cfg.activation)
        self.sublayer = nn.ModuleList(SublayerConnection(cfg.d_model, cfg.dropout, cfg.pre_norm) for _ in range(3))

    def forward(
        self,
        x: Tensor,  # (B, T, D)
        causal_mask: Tensor,  # (1, 1, T, T) new token i sees new tokens j <= i
        past_k: Tensor,  # (B, H, Dh, P) keys transposed
        past_v: Tensor,  # (B, H, P, Dh)
        past_mask: Tensor,  # (B, 1, 1, P)
        cross_k: Tensor,  # (C, H, Dh, S): C sources, each read by B / C consecutive rows
        cross_v: Tensor,  # (C, H, S, Dh)
        src_mask: Tensor,  # (B, 1, 1, S): per row
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Returns the new states (B, T, D), the new tokens' keys (B, H, Dh, T) and values
        (B, H, T, Dh) (the caller appends them to its cache) and the cross-attention weights."""
        h = self.sublayer[0].before(x)
        new_k, new_v = self.self_attn.project_kv(h)
        attended = self.self_attn(h, new_k, new_v, causal_mask, cache=(past_k, past_v, past_mask))[0]
        x = self.sublayer[0].after(x, attended)
        h = self.sublayer[1].before(x)
        attended, cross_weights = self.cross_attn(h, cross_k, cross_v, src_mask, shared=True)
        x = self.sublayer[1].after(x, attended)
        h = self.sublayer[2].before(x)
        x = self.sublayer[2].after(x, self.feed_forward(h))
        return x, new_k, new_v, cross_weights


class DecoderOutput(NamedTuple):
    hidden: Tensor  # (B, T, D) final decoder states of the new tokens
    new_k: tuple[Tensor, ...]  # per layer (B, H, Dh, T): the new tokens' keys, to append to the cache
    new_v: tuple[Tensor, ...]  # per layer (B, H, T, Dh)
    cross_attention: Tensor  # (B, T, S) last layer's cross-attention, mean over heads


class Transformer(nn.Module):
    """Encoder-decoder with one embedding matrix shared by source, target and output."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.positional = PositionalEncoding(cfg.max_positions, cfg.d_model, stored=cfg.positions == "table")
        self.embed_dropout = nn.Dropout(cfg.dropout)
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_decoder_layers))
        # Pre-LN needs a final norm on each stack; post-LN already ends in one.
        self.encoder_norm = nn.LayerNorm(cfg.d_model) if cfg.pre_norm else nn.Identity()
        self.decoder_norm = nn.LayerNorm(cfg.d_model) if cfg.pre_norm else nn.Identity()
        # Logits = hidden @ embedding^T (+ this bias, for models that have one).
        self.output_bias = nn.Parameter(torch.zeros(cfg.vocab_size)) if cfg.output_bias else None
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.scale_embedding else 1.0
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for name, p in self.named_parameters():
            if p.dim() > 1 and name != "embedding.weight":
                nn.init.xavier_uniform_(p)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)
        # Shared input/output matrix: N(0, d^-1/2) keeps the scaled embeddings ~unit variance.
        nn.init.normal_(self.embedding.weight, mean=0.0, std=self.cfg.d_model**-0.5)
        with torch.no_grad():
            self.embedding.weight[self.cfg.pad_id].zero_()

    @property
    def n_heads(self) -> int:
        return self.cfg.n_heads

    @property
    def d_head(self) -> int:
        return self.cfg.d_model // self.cfg.n_heads

    def embed(self, ids: Tensor, positions: Tensor) -> Tensor:
        x = self.embedding(ids) * self.embed_scale + self.positional(positions)
        return self.embed_dropout(x)

    # ---------------------------------------------------------------- encoder
    def encode(self, src_ids: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """src_ids (B, S), right-padded -> memory (B, S, D)."""
        if src_mask is None:
            src_mask = src_ids.ne(self.cfg.pad_id)
        positions = torch.arange(src_ids.size(1), device=src_ids.device).unsqueeze(0).expand_as(src_ids)
        x = self.embed(src_ids, positions)
        attn_mask = src_mask[:, None, None, :]  # (B, 1, 1, S)
        for layer in self.encoder_layers:
            x = layer(x, attn_mask)
        return self.encoder_norm(x)

    def cross_kv(self, memory: Tensor) -> tuple[list[Tensor], list[Tensor]]:
        """Every decoder layer's cross-attention keys (B, H, Dh, S) and values (B, H, S, Dh)."""
        ks, vs = zip(*(layer.cross_attn.project_kv(memory) for layer in self.decoder_layers))
        return list(ks), list(vs)

    # ---------------------------------------------------------------- decoder
    def empty_cache(self, batch: int, device: torch.device | str = "cpu",
                    dtype: torch.dtype = torch.float32) -> tuple[list[Tensor], list[Tensor], Tensor]:
        """Past keys (B, H, Dh, 0) and values (B, H, 0, Dh) per layer, and the empty past mask."""
        keys = torch.zeros(batch, self.n_heads, self.d_head, 0, device=device, dtype=dtype)
        values = keys.transpose(-2, -1)
        layers = range(self.cfg.n_decoder_layers)
        return [keys for _ in layers], [values for _ in layers], torch.zeros(batch, 0, dtype=torch.bool, device=device)

    def decode_step(
        self,
        input_ids: Tensor,  # (B, T) new tokens
        positions: Tensor,  # (B, T) their positions in the target
        past_mask: Tensor,  # (B, P) True where a cached position is real
        src_mask: Tensor,  # (B, S)
        cross_k: Sequence[Tensor],  # per layer (C, H, Dh, S), keys transposed; C divides B: row r reads r // (B / C)
        cross_v: Sequence[Tensor],  # per layer (C, H, S, Dh)
        past_k: Sequence[Tensor],  # per layer (B, H, Dh, P)
        past_v: Sequence[Tensor],  # per layer (B, H, P, Dh)
    ) -> DecoderOutput:
        """New tokens attend to every real cached position and to new tokens j <= i. The
        cache is read, not extended: the new keys/values come back for the caller to keep."""
        t = input_ids.size(1)
        x = self.embed(input_ids, positions)
        causal = torch.ones(t, t, dtype=torch.bool, device=input_ids.device).tril()[None, None]  # (1, 1, T, T)
        past = past_mask[:, None, None, :]  # (B, 1, 1, P)
        src = src_mask[:, None, None, :]  # (B, 1, 1, S)
        new_k, new_v = [], []
        cross_weights = x.new_zeros(0)
        for i, layer in enumerate(self.decoder_layers):
            x, k, v, cross_weights = layer(x, causal, past_k[i], past_v[i], past, cross_k[i], cross_v[i], src)
            new_k.append(k)
            new_v.append(v)
        hidden = self.decoder_norm(x)
        return DecoderOutput(hidden, tuple(new_k), tuple(new_v), cross_weights.mean(dim=1))

    def project(self, hidden: Tensor) -> Tensor:
        """Output logits through the shared embedding matrix: (..., D) -> (..., V)."""
        return F.linear(hidden, self.embedding.weight, self.output_bias)

    def forward(self, src_ids: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced logits (B, T, V) for a right-padded target prefix (B, T)."""
        src_mask = src_ids.ne(self.cfg.pad_id)
        cross_k, cross_v = self.cross_kv(self.encode(src_ids, src_mask))
        b, t = tgt_in.shape
        positions = torch.arange(t, device=tgt_in.device).unsqueeze(0).expand(b, t)
        past_k, past_v, past_mask = self.empty_cache(b, tgt_in.device, cross_k[0].dtype)
        out = self.decode_step(tgt_in, positions, past_mask, src_mask, cross_k, cross_v, past_k, past_v)
        return self.project(out.hidden)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
