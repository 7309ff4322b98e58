"""Convert one of our checkpoints to a Marian model (``pymarian``), for benchmarks on identical weights.

    python -m bench.peers.marian_convert models/default bench/results/marian-default [--int8]

Marian (the engine of OPUS-MT, Bergamot and Firefox Translations) is a benchmark peer only
(the ``marian`` extra: ``pymarian``, a 600 MB wheel with the CPU engine); nothing in
training/, export/ or server/ imports it. What is written: ``model.npz`` (the weights and,
as Marian expects, the architecture as YAML under ``special:model.yml``), ``vocab.json``
(our SentencePiece pieces by id, so that ids match ours: Marian reads whitespace-separated
pieces and writes pieces back) and, with ``int8``, ``model.intgemm8.bin``: Marian's own
8-bit model (``marian convert --gemm-type intgemm8``, quantised from the fp32 weights).

The mapping, layer by layer:

- Marian's names: ``{encoder,decoder}_l{N}_{self,context,ffn}_...``; its products are
  ``x @ W + b`` with ``W`` as (in, out): ours (torch's ``nn.Linear``) are transposed. One
  embedding matrix ``Wemb`` for source, target and the output layer (``tied-embeddings-all``),
  no output bias (``decoder_ff_logit_out_b`` zeros), scaled by sqrt(d_model) as ours.
- Pre-LN: ``transformer-preprocess: n``, ``postprocess: da``, a final norm on each stack
  (``postprocess-top: n``); post-LN: ``postprocess: dan``.
- Positions: Marian adds its own sinusoids laid out as all sines then all cosines, ours
  interleave them. The model dimension is permuted (sine features first): a permutation of
  the residual stream applied to every weight that reads or writes it changes no output
  (LayerNorm is per-feature). Marian's frequencies are exp(-i ln(10^4) / (d/2 - 1)), ours
  exp(-i ln(10^4) / (d/2)): close, not equal, and there is no learned table to give it ours
  (``transformer-train-position-embeddings`` reads a different key, and the learned table
  aborts at translation time in 1.12: "Required option 'inference' has not been set").

What is not identical, so the peer is not the same model (``bench/studies/marian_parity.py``
measures each):

- Marian starts decoding from a zero vector, not from the embedding of a start token (our
  ``<s>``); only its position is added. Nothing in the weights can put ``<s>`` there: the
  first step sees a different input.
- Marian 1.12's incremental decoder gives pre-LN self-attention the *unnormalised* inputs of
  earlier steps as keys and values (its fix for pre-LN keys applies only when keys and
  queries are the same tensor: training, scoring, the first step), so a pre-LN model decodes
  differently from how Marian itself scores it. Post-LN models are not affected.
- LayerNorm epsilon: Marian's own (not a model option), ours 1e-5; too small to show below.

With those, ``marian score`` (teacher-forced, one pass) reproduces our model's
log-probabilities under Marian's conventions (zero start, its sinusoids) to about 1e-4 per
token, and ``marian decode``'s own scores are reproduced to the same by emulating its pre-LN
keys: the weights are ours; its translations are not (default model, 60 test verses: 0/60
greedy texts identical, BLEU 0.14 against our 35.10, outputs 3.3x as long).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from bench.peers import converter_parser, run_converter
from training import checkpoint as ckpt_io
from training.config import EOS_ID, PAD_ID, UNK_ID, ModelConfig, RunConfig

MODEL_FILE = "model.npz"
VOCAB_FILE = "vocab.json"
INT8_FILE = "model.intgemm8.bin"
INT8_GEMM = "intgemm8"  # Marian's 8-bit CPU products (intgemm), chosen for the CPU at run time
MARIAN_PIECES = {EOS_ID: "</s>", UNK_ID: "<unk>"}  # the pieces Marian's vocabulary must hold at these ids


def marian_config(m: ModelConfig) -> dict[str, Any]:
    """``special:model.yml``: the architecture, in Marian's option names (our activations,
    training/config.py ACTIVATIONS, are named as Marian names them)."""
    return {
        "type": "transformer", "dim-emb": m.d_model, "enc-depth": m.n_encoder_layers, "dec-depth": m.n_decoder_layers,
        "transformer-heads": m.n_heads, "transformer-dim-ffn": m.d_ff, "transformer-ffn-depth": 2,
        "transformer-ffn-activation": m.activation, "transformer-decoder-autoreg": "self-attention",
        "transformer-preprocess": "n" if m.pre_norm else "", "transformer-postprocess": "da" if m.pre_norm else "dan",
        "transformer-postprocess-emb": "", "transformer-postprocess-top": "n" if m.pre_norm else "",
        "transformer-train-position-embeddings": False, "transformer-no-projection": False,
        "transformer-tied-layers": [], "tied-embeddings": False, "tied-embeddings-all": True,
        "tied-embeddings-src": False, "output-omit-bias": False, "dim-vocabs": [m.vocab_size, m.vocab_size],
    }


def validate(m: ModelConfig, weights: dict[str, np.ndarray], pieces: list[str]) -> list[str]:
    """Every reason the checkpoint does not fit the mapping above (empty: it fits)."""
    problems = []
    if m.positions != "sinusoidal":
        problems.append(f"positions {m.positions!r}: Marian only adds its own sinusoids")
    if m.d_model % 2:
        problems.append(f"d_model {m.d_model} is odd: no sine/cosine halves")
    if m.output_bias:
        problems.append("the output layer has a bias: Marian's tied output layer is written with zeros")
    if weights.get("embedding.weight") is None or weights["embedding.weight"].shape != (m.vocab_size, m.d_model):
        problems.append(f"no embedding.weight of ({m.vocab_size}, {m.d_model})")
    if len(pieces) != m.vocab_size:
        problems.append(f"tokenizer has {len(pieces)} pieces, the model {m.vocab_size}")
    elif any(pieces[i] != p for i, p in MARIAN_PIECES.items()):
        problems.append("the pieces of eos/unk are not Marian's " + ", ".join(map(repr, MARIAN_PIECES.values())))
    if len(set(pieces)) != len(pieces) or any(not p or p != p.strip() or " " in p for p in pieces):
        problems.append("pieces are not unique non-blank words: Marian's whitespace-split input would not map back")
    if m.pad_id != PAD_ID:
        problems.append(f"pad id {m.pad_id}, expected {PAD_ID}")
    return problems


def sine_first(d_model: int) -> np.ndarray:
    """The permutation of the model dimension from our interleaved sinusoids to Marian's halves."""
    return np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])


def marian_weights(m: ModelConfig, w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Our state dict (float32 numpy) in Marian's names, shapes and feature order."""
    perm = sine_first(m.d_model)
    out: dict[str, np.ndarray] = {"Wemb": w["embedding.weight"][:, perm],
                                  "decoder_ff_logit_out_b": np.zeros((1, m.vocab_size), np.float32)}

    def linear(prefix: str, ours: str, weight: str, bias: str, reads: bool, writes: bool) -> None:
        matrix, vector = w[f"{ours}.weight"].T, w[f"{ours}.bias"][None]  # (in, out), (1, out)
        if reads:  # the input is the residual stream
            matrix = matrix[perm]
        if writes:  # the output is added to the residual stream
            matrix, vector = matrix[:, perm], vector[:, perm]
        out[f"{prefix}_{weight}"], out[f"{prefix}_{bias}"] = matrix, vector

    def norm(prefix: str, ours: str) -> None:
        suffix = "_pre" if m.pre_norm else ""
        out[f"{prefix}_ln_scale{suffix}"] = w[f"{ours}.weight"][None, perm]
        out[f"{prefix}_ln_bias{suffix}"] = w[f"{ours}.bias"][None, perm]

    for side, depth in (("encoder", m.n_encoder_layers), ("decoder", m.n_decoder_layers)):
        for i in range(depth):
            ours, prefix = f"{side}_layers.{i}", f"{side}_l{i + 1}"
            blocks = [("self", "self_attn")] + ([("context", "cross_attn")] if side == "decoder" else [])
            for j, (name, attn) in enumerate(blocks):
                for x in "qkv":
                    linear(f"{prefix}_{name}", f"{ours}.{attn}.w_{x}", f"W{x}", f"b{x}", reads=True, writes=False)
                linear(f"{prefix}_{name}", f"{ours}.{attn}.w_o", "Wo", "bo", reads=False, writes=True)
                norm(f"{prefix}_{name}_Wo", f"{ours}.sublayer.{j}.norm")
            linear(f"{prefix}_ffn", f"{ours}.feed_forward.w_1", "W1", "b1", reads=True, writes=False)
            linear(f"{prefix}_ffn", f"{ours}.feed_forward.w_2", "W2", "b2", reads=False, writes=True)
            norm(f"{prefix}_ffn_ffn", f"{ours}.sublayer.{len(blocks)}.norm")
        if m.pre_norm:
            out[f"{side}_top_ln_scale"] = w[f"{side}_norm.weight"][None, perm]
            out[f"{side}_top_ln_bias"] = w[f"{side}_norm.bias"][None, perm]
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def yaml_bytes(config: dict[str, Any]) -> np.ndarray:
    """Marian's ``special:model.yml`` entry: the YAML text, NUL-terminated, as int8."""
    import yaml

    return np.frombuffer((yaml.safe_dump(config, sort_keys=True) + "\0").encode(), dtype=np.int8)


def run_marian(args: list[str]) -> None:
    """One Marian command (``convert``, ``decode``, ``score``) in this process; raises when it fails."""
    import _pymarian

    status = _pymarian.main(args)
    if status:
        raise RuntimeError(f"marian {args[0]} exited {status}")


def convert(checkpoint: str | Path, out_dir: str | Path, int8: bool = False, force: bool = False) -> Path:
    """Write ``model.npz`` and ``vocab.json`` (and ``model.intgemm8.bin`` with ``int8``) into ``out_dir``."""
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()) and not force:
        raise FileExistsError(f"{out} is not empty (use --force to replace it)")
    ckpt = ckpt_io.load(ckpt_io.resolve(checkpoint))
    cfg = RunConfig.from_dict(ckpt["config"])
    weights = {k: v.float().numpy() for k, v in ckpt["model"].items()}
    tokenizer = ckpt_io.load_tokenizer(ckpt)
    pieces = [tokenizer.sp.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    problems = validate(cfg.model, weights, pieces)
    if problems:
        raise ValueError(f"{checkpoint} cannot be converted for Marian:\n  " + "\n  ".join(problems))
    out.mkdir(parents=True, exist_ok=True)
    arrays = marian_weights(cfg.model, weights)
    np.savez(out / MODEL_FILE, **arrays, **{"special:model.yml": yaml_bytes(marian_config(cfg.model))})
    (out / VOCAB_FILE).write_text(json.dumps({p: i for i, p in enumerate(pieces)}, ensure_ascii=False))
    if int8:
        run_marian(["convert", "--from", str(out / MODEL_FILE), "--to", str(out / INT8_FILE),
                    "--gemm-type", INT8_GEMM])
    return out


def translator(model_dir: str | Path, variant: str, threads: int, beam_size: int, max_length_factor: float,
               alpha: float, batch_size: int) -> Any:
    """A ``pymarian.Translator`` on a converted model: fp32 (``model.npz``) or int8
    (``model.intgemm8.bin``), ``threads`` CPU threads, whole batches of ``batch_size`` lines."""
    from pymarian import Translator

    model = Path(model_dir) / (INT8_FILE if variant == "int8" else MODEL_FILE)
    vocab = str(Path(model_dir) / VOCAB_FILE)
    return Translator(models=str(model), vocabs=[vocab, vocab], cpu_threads=threads, beam_size=beam_size,
                      normalize=alpha, mini_batch=batch_size, maxi_batch=1, max_length_factor=max_length_factor,
                      workspace=512, quiet=True)


def main(argv: list[str] | None = None) -> int:
    p = converter_parser(__doc__, f"where to write {MODEL_FILE} and {VOCAB_FILE}")
    p.add_argument("--int8", action="store_true", help=f"also write Marian's 8-bit model ({INT8_FILE})")
    args = p.parse_args(argv)
    return run_converter(lambda: convert(args.checkpoint, args.out_dir, int8=args.int8, force=args.force),
                         "Marian model")


if __name__ == "__main__":
    raise SystemExit(main())
