"""Convert one of our checkpoints to a Hugging Face Transformers model that computes the same function,
and export that model with Optimum to ONNX, for benchmarks on identical weights.

    python -m bench.peers.hf_convert runs/small-ende bench/results/optimum-small-ende [--force]

writes the Optimum ONNX export (``ORTModelForSeq2SeqLM.from_pretrained(out_dir)`` loads it).
Transformers and Optimum are benchmark dependencies only (the ``hf`` extra); nothing in
training/, export/, engine/ or server/ imports them.

The conversion is done in memory (``to_transformers``): Transformers' own ``save_pretrained``
would not keep our positional table (M2M100 keeps its table in a non-persistent buffer and
rebuilds it on load; Marian leaves its table out of saved files and re-initialises it), so
a saved-and-reloaded model would no longer be ours. The ONNX export traces the in-memory
model, which bakes our table into the graphs as a constant.

Mapping (checked against transformers 4.57):

- pre-LN (``pre_norm=True``, the shipped default) -> ``M2M100ForConditionalGeneration``:
  pre-LN layers, final encoder and decoder layer norms (``encoder.layer_norm`` /
  ``decoder.layer_norm`` = our ``encoder_norm`` / ``decoder_norm``), relu, no layer norm on
  the embeddings. Post-LN -> ``MarianMTModel``: post-LN layers (norm after each residual
  sum), no final norms, relu (Marian's default is swish), ``final_logits_bias`` zero.
- embeddings: one matrix (``shared``) for the encoder input, the decoder input and the
  tied ``lm_head`` (no bias), scaled by sqrt(d_model) (``scale_embedding=True``).
- positions: our table (sin/cos interleaved, position 0 = the first token) written over
  Transformers' own, which is laid out [sin half | cos half] and, for M2M100, has other
  frequencies (10000^(-i/(d/2-1)) instead of 10000^(-2i/d)), so a permutation of the
  weights could not make up for it. M2M100 computes position ids from the token ids as
  ``padding_idx + 1 + p`` (pad 0: row p + 1 holds our position p); its buffer has
  ``max_positions + 2`` rows, enough that forward never rebuilds it for the lengths our
  model allows. Marian looks positions up from row 0, as we do.
- q/k/v/out projections with bias, scaled by head_dim^-0.5 (ours divides q by sqrt(Dh):
  the same up to rounding); FFN fc1/fc2 with bias; LayerNorm eps 1e-5 in both (torch's
  default, as ours); dropout and layer drop 0 (and the model in eval mode).
- masks: Transformers fills masked scores with the dtype's minimum, we with -1e4; both
  give exactly 0 weight after the softmax.
- generation (``generation_config``): decoder_start = bos = 2, eos 3, pad 0, no forced bos
  or eos (Marian's config defaults to ``forced_eos_token_id=0``: cleared), no repetition
  penalty or n-gram blocking, no sampling; the source is fed as ours, ``<2xx>`` tag + pieces + eos.

Where Transformers does not compute our function exactly:

- M2M100 derives decoder positions from the token ids: a *generated pad token* (id 0) gets
  the padding row (zeros) instead of its position. Our model can emit id 0 only if pad
  wins the argmax, which a trained model does not do; Marian (post-LN) has no such case.
- beam search: Transformers' length penalty divides the summed log-probability by
  len^alpha, ours (GNMT) by ((5 + len) / 6)^alpha (len counts the generated tokens and eos
  in both); no generation option gives GNMT's. Both take the top 2K continuations of the K
  beams and stop a source at K finished hypotheses (``early_stopping=True``), but
  Transformers finishes an eos continuation only when it ranks among the top K, ours
  whenever it comes before the K-th live one. Transformers bounds a batch by one
  ``max_new_tokens`` (the batch's largest per-sentence bound), ours every sentence by its
  own. Beam outputs may therefore differ: nmt-bench reports agreement. Greedy decoding is
  the same function (nmt-bench cuts greedy rows at their own bound afterwards).
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import torch
from transformers import GenerationConfig, M2M100Config, M2M100ForConditionalGeneration, MarianConfig, MarianMTModel
from transformers.modeling_utils import PreTrainedModel

from bench.peers import converter_parser, run_converter
from export.hf_import import layer_map
from training import checkpoint as ckpt_io
from training.config import BOS_ID, EOS_ID, PAD_ID, ModelConfig, RunConfig
from training.model import sinusoidal_table

M2M100_POSITION_OFFSET = PAD_ID + 1  # M2M100: position id of our position p is padding_idx + 1 + p


def _common_config(m: ModelConfig) -> dict[str, Any]:
    return {
        "vocab_size": m.vocab_size, "d_model": m.d_model, "max_position_embeddings": m.max_positions,
        "encoder_layers": m.n_encoder_layers, "decoder_layers": m.n_decoder_layers,
        "encoder_attention_heads": m.n_heads, "decoder_attention_heads": m.n_heads,
        "encoder_ffn_dim": m.d_ff, "decoder_ffn_dim": m.d_ff, "activation_function": "relu",
        "dropout": 0.0, "attention_dropout": 0.0, "activation_dropout": 0.0,
        "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0, "scale_embedding": True, "use_cache": True,
        "pad_token_id": PAD_ID, "bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "decoder_start_token_id": BOS_ID,
        "forced_eos_token_id": None, "tie_word_embeddings": True,
    }


def hf_config(m: ModelConfig) -> M2M100Config | MarianConfig:
    """The Transformers configuration of our architecture: M2M100 for pre-LN, Marian for post-LN."""
    if m.pad_id != PAD_ID:
        raise ValueError(f"pad id {m.pad_id}, expected {PAD_ID}")
    if m.pre_norm:
        return M2M100Config(**_common_config(m))
    return MarianConfig(**_common_config(m), decoder_vocab_size=m.vocab_size, share_encoder_decoder_embeddings=True)


def generation_config(max_new_tokens: int = 256, beam_size: int = 1, alpha: float = 0.6) -> GenerationConfig:
    """Greedy (beam_size 1) or beam search as our decoders run it (see the module docstring for beam)."""
    # early_stopping=True: a source is done once it has beam_size finished hypotheses, as in ours
    beam = {"length_penalty": alpha, "early_stopping": True} if beam_size > 1 else {}
    return GenerationConfig(
        max_new_tokens=max_new_tokens, min_length=0, num_beams=beam_size, num_return_sequences=1, do_sample=False,
        decoder_start_token_id=BOS_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
        forced_bos_token_id=None, forced_eos_token_id=None, repetition_penalty=1.0, no_repeat_ngram_size=0,
        use_cache=True, **beam)


def to_transformers(m: ModelConfig, state: dict[str, torch.Tensor]) -> PreTrainedModel:
    """Our weights (``Transformer.state_dict()``) -> a Transformers model in eval mode, float32, on the CPU."""
    config = hf_config(m)
    model: PreTrainedModel = (M2M100ForConditionalGeneration if m.pre_norm else MarianMTModel)(config)
    model.generation_config = generation_config()
    params = dict(model.named_parameters(remove_duplicate=False))
    buffers = dict(model.named_buffers())
    mapping = layer_map(m)  # the importer's mapping, read the other way
    expected = set(mapping.values()) | {"embedding.weight"}
    missing, unused = expected - set(state), set(state) - expected
    if missing or unused:
        raise ValueError(f"checkpoint weights do not fit the mapping: missing {sorted(missing)}, "
                         f"not mapped {sorted(unused)}")
    table = sinusoidal_table(m.max_positions, m.d_model)
    with torch.no_grad():
        for hf, ours in mapping.items():
            if params[hf].shape != state[ours].shape:
                raise ValueError(f"{ours} is {tuple(state[ours].shape)}, {hf} {tuple(params[hf].shape)}")
            params[hf].copy_(state[ours].float())
        params["model.shared.weight"].copy_(state["embedding.weight"].float())
        for side in ("encoder", "decoder"):
            if m.pre_norm:
                weights = buffers[f"model.{side}.embed_positions.weights"]
                if weights.size(0) < M2M100_POSITION_OFFSET + m.max_positions + 1:
                    raise AssertionError("M2M100's positional buffer is too small: forward would rebuild it")
                weights.zero_()
                weights[M2M100_POSITION_OFFSET:M2M100_POSITION_OFFSET + m.max_positions] = table
            else:
                params[f"model.{side}.embed_positions.weight"].copy_(table)
        if not m.pre_norm:
            buffers["final_logits_bias"].zero_()
    shared = params["model.shared.weight"]
    for tied in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"):
        if params[tied].data_ptr() != shared.data_ptr():
            raise AssertionError(f"{tied} is not tied to the shared embedding")
    if model.lm_head.bias is not None:
        raise AssertionError("lm_head has a bias")
    for side in (model.model.encoder, model.model.decoder):
        if not math.isclose(side.embed_scale if hasattr(side, "embed_scale") else side.embed_tokens.embed_scale,
                            math.sqrt(m.d_model)):
            raise AssertionError("embeddings are not scaled by sqrt(d_model)")
    for module in model.modules():
        if isinstance(module, torch.nn.LayerNorm) and module.eps != 1e-5:
            raise AssertionError(f"LayerNorm eps {module.eps}, ours is 1e-5")
    return model.eval()


def load(checkpoint: str | Path) -> tuple[PreTrainedModel, RunConfig]:
    """A checkpoint file or run directory -> the Transformers model computing the same function."""
    ckpt = ckpt_io.load(ckpt_io.resolve(checkpoint))
    cfg = RunConfig.from_dict(ckpt["config"])
    return to_transformers(cfg.model, ckpt["model"]), cfg


def generate(model: Any, sources: list[list[int]], max_new_tokens: int, beam_size: int = 1,
             alpha: float = 0.6) -> list[list[int]]:
    """Decode sources (tag + pieces + eos, unpadded) with ``model.generate`` (Transformers or Optimum's
    ORTModelForSeq2SeqLM): output ids without bos and eos, like training/decode.py's hypotheses."""
    width = max(len(s) for s in sources)
    device = getattr(model, "device", torch.device("cpu"))
    ids = torch.tensor([s + [PAD_ID] * (width - len(s)) for s in sources], dtype=torch.long, device=device)
    out = model.generate(input_ids=ids, attention_mask=ids.ne(PAD_ID).long(),
                         generation_config=generation_config(max_new_tokens, beam_size, alpha))
    results = []
    for row in out.tolist():
        row = row[1:]  # the decoder start (bos)
        results.append(row[: row.index(EOS_ID)] if EOS_ID in row else row)
    return results


def export_optimum(model: PreTrainedModel, out_dir: str | Path, force: bool = False) -> Path:
    """Export the converted model with Optimum (encoder, decoder with and without past) to ``out_dir``."""
    from optimum.exporters.onnx import onnx_export_from_model

    out = Path(out_dir)
    if out.exists():
        if not force:
            raise FileExistsError(f"{out} exists (use --force to replace it)")
        shutil.rmtree(out)
    onnx_export_from_model(model, out, task="text2text-generation-with-past", do_validation=False)
    return out


def main(argv: list[str] | None = None) -> int:
    args = converter_parser(__doc__, "where to write the Optimum ONNX export").parse_args(argv)
    return run_converter(lambda: export_optimum(load(args.checkpoint)[0], args.out_dir, args.force),
                         "Optimum ONNX export")


if __name__ == "__main__":
    raise SystemExit(main())
