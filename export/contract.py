"""The graph contract between the export and the server: every input and output name.

This module is the one place those names are written. It imports nothing heavy (no
torch, no onnx), so the server imports it too and never matches names by substring.

Encoder:  src_ids int64[B,S] (right-padded with the pad id)
          -> cross_k, cross_v float[L,B,H,S,Dh]: every decoder layer's cross-attention
             keys and values, computed once per source.
Decoder step:
          input_ids int64[B,T] (T=1 per step; T>1 prefills a forced prefix)
          positions int64[B,T] (each new token's position in its target)
          past_mask bool[B,P]  (True where a cached position is real)
          src_mask  bool[B,S]  (True where a source position is real)
          cross_k, cross_v float[L,B,H,S,Dh]
          past_k, past_v   float[L,B,H,P,Dh] (P may be 0)
          -> logits float[B,V] (last new position), present_k, present_v float[L,B,H,P+T,Dh],
             cross_attention float[B,S] (last layer, mean over heads, last new position).
Positions and masks are inputs rather than derived from P, so rows at different
lengths can share one step (what continuous batching needs).
"""

from __future__ import annotations

PACKAGE_FORMAT = "nmt-model-package"
PACKAGE_VERSION = 1
MANIFEST = "model.json"
TOKENIZER = "tokenizer.model"

ENCODER = "encoder"
DECODER = "decoder"

SRC_IDS = "src_ids"
CROSS_K, CROSS_V = "cross_k", "cross_v"
ENCODER_INPUTS: tuple[str, ...] = (SRC_IDS,)
ENCODER_OUTPUTS: tuple[str, ...] = (CROSS_K, CROSS_V)

INPUT_IDS, POSITIONS, PAST_MASK, SRC_MASK = "input_ids", "positions", "past_mask", "src_mask"
PAST_K, PAST_V = "past_k", "past_v"
LOGITS, PRESENT_K, PRESENT_V, CROSS_ATTENTION = "logits", "present_k", "present_v", "cross_attention"
DECODER_INPUTS: tuple[str, ...] = (INPUT_IDS, POSITIONS, PAST_MASK, SRC_MASK, CROSS_K, CROSS_V, PAST_K, PAST_V)
DECODER_OUTPUTS: tuple[str, ...] = (LOGITS, PRESENT_K, PRESENT_V, CROSS_ATTENTION)

# Graph variants: file name suffix -> what it is for.
VARIANTS: dict[str, str] = {
    "fp32": "reference precision, any device",
    "int8": "dynamic int8 quantization of the matrix multiplications, for the CPU",
    "fp16": "half precision, for CUDA",
}


def graph_file(graph: str, variant: str = "fp32") -> str:
    """encoder.onnx, decoder.int8.onnx, ..."""
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r} is not one of {', '.join(VARIANTS)}")
    return f"{graph}.onnx" if variant == "fp32" else f"{graph}.{variant}.onnx"
