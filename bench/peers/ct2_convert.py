"""Convert one of our checkpoints to a CTranslate2 model, for benchmarks on identical weights.

    python -m bench.peers.ct2_convert runs/small-ende bench/results/ct2-small-ende [--quantization int8] [--force]

CTranslate2 is a benchmark dependency only (the ``bench`` extra); nothing in training/,
export/ or server/ imports it. The mapping, layer by layer:

- embeddings: one matrix shared by the encoder, the decoder and the output projection
  (CT2 aliases identical arrays, so it is stored once), scaled by sqrt(d_model) as ours;
- positions: our sinusoidal table (sin/cos interleaved, position 0 = the first token)
  set explicitly, because CT2's built-in table is laid out differently (sin half, then
  cos half). CT2 looks the table up from row 0 for the first source token and for the
  decoder's start token, as we do, so the table is passed unshifted (fairseq's converter
  drops its padding rows to get the same "row 0 = first token");
- self-attention: Q, K, V fused into one linear (3D x D); cross-attention: Q alone, then
  K and V fused (2D x D); the sublayer's LayerNorm goes with the attention / FFN block it
  wraps (CT2 applies it before the block in pre-LN, after the residual sum in post-LN);
- post-LN (our default) has no final norm; pre-LN maps our encoder/decoder norms to CT2's
  final layer norms; LayerNorm epsilon 1e-5 (torch's default, CT2's is 1e-6);
- vocabulary: the SentencePiece pieces in id order, so ids match ours; unk/bos/eos are
  the pieces of ids 1/2/3, the decoder starts from bos as ``training/decode.py`` does,
  and CT2 appends eos to the source (``add_source_eos``): translate ``[tag, *pieces]``
  (``source_tokens`` below) to get what our model sees, ``[tag, *pieces, eos]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from ctranslate2.converters import Converter
from ctranslate2.converters.utils import fuse_linear
from ctranslate2.specs import common_spec, transformer_spec

from bench.peers import converter_parser, run_converter
from training import checkpoint as ckpt_io
from training.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID, RunConfig
from training.tokenizer import Tokenizer

LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's default, which training/model.py uses


class CheckpointConverter(Converter):
    """Our checkpoint (file or run directory) -> ``TransformerSpec``; ``convert(out_dir)`` saves it."""

    def __init__(self, checkpoint: str | Path) -> None:
        self.path = ckpt_io.resolve(checkpoint)

    def _load(self) -> transformer_spec.TransformerSpec:
        ckpt = ckpt_io.load(self.path)
        cfg = RunConfig.from_dict(ckpt["config"])
        weights = {k: v.float().numpy() for k, v in ckpt["model"].items()}
        tokenizer = ckpt_io.load_tokenizer(ckpt)
        problems = validate(cfg, weights, tokenizer)
        if problems:
            raise ValueError(f"{self.path} cannot be converted:\n  " + "\n  ".join(problems))
        return build_spec(cfg, weights, tokenizer)


def validate(cfg: RunConfig, weights: dict[str, np.ndarray], tokenizer: Tokenizer) -> list[str]:
    """Every reason the checkpoint does not fit the mapping above (empty: it fits)."""
    m = cfg.model
    problems = []
    emb = weights.get("embedding.weight")
    if emb is None:
        problems.append("no embedding.weight")
    elif emb.shape != (m.vocab_size, m.d_model):
        problems.append(f"embedding.weight is {emb.shape}, config says ({m.vocab_size}, {m.d_model})")
    if tokenizer.vocab_size != m.vocab_size:
        problems.append(f"tokenizer has {tokenizer.vocab_size} pieces, the model {m.vocab_size}")
    if m.pad_id != PAD_ID:
        problems.append(f"pad id {m.pad_id}, expected {PAD_ID}")
    pieces = [tokenizer.sp.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    if len(set(pieces)) != len(pieces):
        problems.append("the vocabulary has duplicate pieces: token strings would not map back to ids")
    for prefix, n in (("encoder_layers", m.n_encoder_layers), ("decoder_layers", m.n_decoder_layers)):
        if f"{prefix}.{n - 1}.self_attn.w_q.weight" not in weights or f"{prefix}.{n}.self_attn.w_q.weight" in weights:
            problems.append(f"config says {n} {prefix.replace('_', ' ')}, the weights disagree")
    if m.pre_norm and "encoder_norm.weight" not in weights:
        problems.append("pre-LN config but no encoder_norm weights")
    return problems


def build_spec(cfg: RunConfig, w: dict[str, np.ndarray], tokenizer: Tokenizer) -> transformer_spec.TransformerSpec:
    m = cfg.model
    spec = transformer_spec.TransformerSpec.from_config(
        (m.n_encoder_layers, m.n_decoder_layers), m.n_heads, pre_norm=m.pre_norm,
        activation=common_spec.Activation.RELU)
    embedding = w["embedding.weight"]
    table = sinusoidal_table(m.max_positions, m.d_model)
    for side in (spec.encoder, spec.decoder):
        side.scale_embeddings = True  # x sqrt(d_model)
        side.position_encodings.encodings = table
    spec.encoder.embeddings[0].weight = embedding
    spec.decoder.embeddings.weight = embedding
    spec.decoder.projection.weight = embedding  # tied output projection, no bias
    for i, layer in enumerate(spec.encoder.layer):
        p = f"encoder_layers.{i}"
        set_self_attention(layer.self_attention, w, f"{p}.self_attn")
        set_layer_norm(layer.self_attention.layer_norm, w, f"{p}.sublayer.0.norm")
        set_ffn(layer.ffn, w, f"{p}.feed_forward")
        set_layer_norm(layer.ffn.layer_norm, w, f"{p}.sublayer.1.norm")
    for i, layer in enumerate(spec.decoder.layer):
        p = f"decoder_layers.{i}"
        set_self_attention(layer.self_attention, w, f"{p}.self_attn")
        set_layer_norm(layer.self_attention.layer_norm, w, f"{p}.sublayer.0.norm")
        set_cross_attention(layer.attention, w, f"{p}.cross_attn")
        set_layer_norm(layer.attention.layer_norm, w, f"{p}.sublayer.1.norm")
        set_ffn(layer.ffn, w, f"{p}.feed_forward")
        set_layer_norm(layer.ffn.layer_norm, w, f"{p}.sublayer.2.norm")
    if m.pre_norm:
        set_layer_norm(spec.encoder.layer_norm, w, "encoder_norm")
        set_layer_norm(spec.decoder.layer_norm, w, "decoder_norm")
    pieces = [tokenizer.sp.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    spec.config.unk_token = pieces[UNK_ID]
    spec.config.bos_token = pieces[BOS_ID]
    spec.config.eos_token = pieces[EOS_ID]
    spec.config.decoder_start_token = pieces[BOS_ID]
    spec.config.add_source_bos = False
    spec.config.add_source_eos = True
    spec.config.layer_norm_epsilon = LAYER_NORM_EPSILON
    return spec


def sinusoidal_table(max_positions: int, d_model: int) -> np.ndarray:
    """training/model.py's table (float64 maths, stored as float32), without importing torch maths."""
    position = np.arange(max_positions, dtype=np.float64)[:, None]
    div = np.power(10000.0, np.arange(0, d_model, 2, dtype=np.float64) / d_model)
    table = np.zeros((max_positions, d_model), dtype=np.float64)
    table[:, 0::2] = np.sin(position / div)
    table[:, 1::2] = np.cos(position / div)
    return table.astype(np.float32)


def set_linear(spec: Any, w: dict[str, np.ndarray], name: str) -> None:
    spec.weight = w[f"{name}.weight"]
    spec.bias = w[f"{name}.bias"]


def set_layer_norm(spec: Any, w: dict[str, np.ndarray], name: str) -> None:
    spec.gamma = w[f"{name}.weight"]
    spec.beta = w[f"{name}.bias"]


def _linears(w: dict[str, np.ndarray], prefix: str, names: str) -> list[common_spec.LinearSpec]:
    out = []
    for n in names:
        lin = common_spec.LinearSpec()
        set_linear(lin, w, f"{prefix}.w_{n}")
        out.append(lin)
    return out


def set_self_attention(spec: Any, w: dict[str, np.ndarray], prefix: str) -> None:
    fuse_linear(spec.linear[0], _linears(w, prefix, "qkv"))  # (3D, D)
    set_linear(spec.linear[1], w, f"{prefix}.w_o")


def set_cross_attention(spec: Any, w: dict[str, np.ndarray], prefix: str) -> None:
    set_linear(spec.linear[0], w, f"{prefix}.w_q")
    fuse_linear(spec.linear[1], _linears(w, prefix, "kv"))  # (2D, D)
    set_linear(spec.linear[2], w, f"{prefix}.w_o")


def set_ffn(spec: Any, w: dict[str, np.ndarray], prefix: str) -> None:
    set_linear(spec.linear_0, w, f"{prefix}.w_1")
    set_linear(spec.linear_1, w, f"{prefix}.w_2")


def source_tokens(tokenizer: Tokenizer, text: str, target_lang: str) -> list[str]:
    """What to give CT2 for a text: the target tag and the pieces (CT2 adds eos itself)."""
    ids = tokenizer.encode_source(text, target_lang)
    if ids[-1] != EOS_ID:
        raise AssertionError("encode_source no longer ends with eos: update add_source_eos")
    return tokenizer.pieces(ids[:-1])


def target_ids(tokenizer: Tokenizer, tokens: list[str]) -> list[int]:
    """CT2's output pieces back to our ids."""
    return [tokenizer.sp.piece_to_id(t) for t in tokens]


def convert(checkpoint: str | Path, out_dir: str | Path, quantization: str | None = None,
            force: bool = False) -> Path:
    return Path(CheckpointConverter(checkpoint).convert(str(out_dir), quantization=quantization, force=force))


def main(argv: list[str] | None = None) -> int:
    p = converter_parser(__doc__, "where to write the CTranslate2 model")
    p.add_argument("--quantization", help="weights stored as int8, float16, ... (default: as trained, float32)")
    args = p.parse_args(argv)
    return run_converter(lambda: convert(args.checkpoint, args.out_dir, args.quantization, args.force),
                         "CTranslate2 model")


if __name__ == "__main__":
    raise SystemExit(main())
