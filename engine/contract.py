"""The graph contract between the export and the server: every input and output name.

This module is the one place those names are written. It imports nothing heavy (no
torch, no onnx), so the server imports it too and never matches names by substring.
Keys and values are one tensor per decoder layer (``cross_k_0``, ``past_v_3``, ...), so
nothing is split or stacked per step. Keys are transposed, [B,H,Dh,positions], values
are not, [B,H,positions,Dh]: a step's scores and its weighted sum are then both plain
matrix products of one query row, which onnxruntime's CPU runs as matrix-vector products
without repacking the cache (training/model.py, ``MultiHeadAttention.project_kv``).

Encoder:  src_ids int64[B,S] (right-padded with the pad id)
          -> cross_k_i float[B,H,Dh,S], cross_v_i float[B,H,S,Dh] for every decoder
             layer i: the cross-attention keys and values, computed once per source.
Decoder step:
          input_ids int64[B,1] (one new token per row; a prefix is fed token by token)
          positions int64[B,1] (the new token's position in its target)
          past_mask bool[B,P]  (True where a cached slot is real)
          src_mask  bool[B,S]  (True where a source position is real)
          cross_k_i float[C,H,Dh,S], cross_v_i float[C,H,S,Dh]: C sources, C divides B, and row
                    r reads source r // (B / C) (a beam-search job's beams share one; C = B
                    when every row has its own)
          past_k_i  float[B,H,Dh,P], past_v_i  float[B,H,P,Dh] (P may be 0)
          -> log_probs float[B,V] (the next token's log-probabilities),
             new_k_i float[B,H,Dh,1], new_v_i float[B,H,1,Dh] (the new token's keys and values),
             cross_attention float[B,S] (last layer, mean over heads).
The cache is read, never extended, by the graph: the caller keeps it (a preallocated
buffer) and writes the new keys/values into slots of its choosing. To the graph, slots
are a set, not a sequence: positions are inputs, so a slot's column says nothing about its
position, and rows at different lengths (what continuous batching needs) share one step,
each masking the slots that are not its own. (``Batch`` in engine/decoding.py still puts
each row's token at position p into slot p, so that sums over slots run in the same order
in any batch.)

Device-resident decoding (ResidentBatch in engine/decoding.py; graphs made by export/resident.py) adds two
optional graphs, so the caches stay where the graphs run and only ids, positions, masks and
the search's candidates cross to and from the host:
Step:     input_ids, positions, past_mask, src_mask as above,
          reorder int64[B] (row i continues the cache of row reorder[i]),
          scores float32[B] (each row's running score; 0 for greedy rows),
          ban_eos bool[B] (rows that may not end yet), top_k bool[K] (only its length K is read),
          cross_k_i, cross_v_i (one per row: C = B), cache_k_i float[B,H,Dh,P], cache_v_i float[B,H,P,Dh]
          -> top_values float32[B,K] (score + log-probability, best first), top_ids int64[B,K],
             cross_attention float[B,S], next_cache_k_i [B,H,Dh,P+1], next_cache_v_i [B,H,P+1,Dh]
             (the reordered cache with the new token's keys/values as its last slot).
Rows:     cache_rows int64[R], cache_slots int64[P'], cross_rows int64[R], old_cols int64[W],
          new_cols int64[W], cross_k_i, cross_v_i, cache_k_i, cache_v_i (the old buffers),
          enc_k_i [J,H,Dh,S'], enc_v_i [J,H,S',Dh] (the newcomers' encoder output)
          -> next_cross_k_i [R,H,Dh,W], next_cross_v_i, next_cache_k_i [R,H,Dh,P'], next_cache_v_i
             (see export/resident.py, RowsGraph, for what the indices mean).

Shortlist (optional; export/shortlist_graph.py):
Table:    vocab_ids int64[V'] (the pieces a batch may produce, sorted) -> vocab_weight [D,V'] (the
          output projection's columns; int8 in the int8 graph), vocab_scale float[V'], vocab_bias
          float[V'], run when the batch's pieces change.
Step:     the decoder step's inputs, the table's outputs and vocab_mask bool[B,V'] (the pieces each
          row may produce) -> log_probs float[B,V'] (column j: piece vocab_ids[j], normalised over
          the row's own pieces), the rest as the decoder step.
"""

from __future__ import annotations

PACKAGE_FORMAT = "nmt-model-package"
# 2: one cache tensor per layer, the step returns only the new keys/values; 3: keys transposed;
# 4: the decoder step reads cross keys/values shared by groups of rows (C sources for B rows)
PACKAGE_VERSION = 4
MANIFEST = "model.json"
TOKENIZER = "tokenizer.model"  # the SentencePiece model of packages nmt-export writes
# An imported model's tokenizer (engine/tokenizer.py, kind "pieces"): SentencePiece models that cut the
# source and join the target, and the table from their pieces to the model's ids.
SOURCE_SPM, TARGET_SPM, VOCAB = "source.spm", "target.spm", "vocab.json"

ENCODER = "encoder"
DECODER = "decoder"

SRC_IDS = "src_ids"
ENCODER_INPUTS: tuple[str, ...] = (SRC_IDS,)
CROSS_K, CROSS_V = "cross_k", "cross_v"
INPUT_IDS, POSITIONS, PAST_MASK, SRC_MASK = "input_ids", "positions", "past_mask", "src_mask"
PAST_K, PAST_V = "past_k", "past_v"
LOG_PROBS, NEW_K, NEW_V, CROSS_ATTENTION = "log_probs", "new_k", "new_v", "cross_attention"

STEP = "step"  # device-resident decoder step (optional graph)
ROWS = "rows"  # device-resident buffer rebuild (optional graph)
SHORTLIST_TABLE = "shortlist_table"  # a shortlist's columns of the output projection (optional graph)
SHORTLIST = "shortlist"  # decoder step over a vocabulary shortlist (optional graph)
REQUIRED_GRAPHS = (ENCODER, DECODER)
RESIDENT_GRAPHS = (STEP, ROWS)
SHORTLIST_GRAPHS = (SHORTLIST_TABLE, SHORTLIST)
SHORTLIST_FILE = "shortlist.npz"  # what engine/shortlist.py learned, in a package with the shortlist graph
VOCAB_IDS, VOCAB_MASK = "vocab_ids", "vocab_mask"
VOCAB_WEIGHT, VOCAB_SCALE, VOCAB_BIAS = "vocab_weight", "vocab_scale", "vocab_bias"
SHORTLIST_TABLE_OUTPUTS = (VOCAB_WEIGHT, VOCAB_SCALE, VOCAB_BIAS)
REORDER, SCORES, BAN_EOS, TOP_K = "reorder", "scores", "ban_eos", "top_k"
CACHE_K, CACHE_V = "cache_k", "cache_v"
TOP_VALUES, TOP_IDS = "top_values", "top_ids"
NEXT_CACHE_K, NEXT_CACHE_V = "next_cache_k", "next_cache_v"
NEXT_CROSS_K, NEXT_CROSS_V = "next_cross_k", "next_cross_v"
CACHE_ROWS, CACHE_SLOTS, CROSS_ROWS, OLD_COLS, NEW_COLS = "cache_rows", "cache_slots", "cross_rows", "old_cols", \
    "new_cols"
ENC_K, ENC_V = "enc_k", "enc_v"
KEYS = (CROSS_K, PAST_K, NEW_K, CACHE_K, NEXT_CACHE_K, NEXT_CROSS_K, ENC_K)  # stored transposed


def kv_shape(name: str, rows: int, n_heads: int, d_head: int, length: int) -> tuple[int, int, int, int]:
    """The shape of one layer's key or value tensor (``name``: cross_k, past_v, new_k, ...)
    over ``length`` positions: keys [B,H,Dh,length], values [B,H,length,Dh]."""
    if name in KEYS:
        return rows, n_heads, d_head, length
    return rows, n_heads, length, d_head


def per_layer(name: str, n_layers: int) -> tuple[str, ...]:
    """cross_k -> (cross_k_0, cross_k_1, ...)."""
    return tuple(f"{name}_{i}" for i in range(n_layers))


def encoder_outputs(n_layers: int) -> tuple[str, ...]:
    return (*per_layer(CROSS_K, n_layers), *per_layer(CROSS_V, n_layers))


def decoder_inputs(n_layers: int) -> tuple[str, ...]:
    return (INPUT_IDS, POSITIONS, PAST_MASK, SRC_MASK, *per_layer(CROSS_K, n_layers), *per_layer(CROSS_V, n_layers),
            *per_layer(PAST_K, n_layers), *per_layer(PAST_V, n_layers))


def decoder_outputs(n_layers: int) -> tuple[str, ...]:
    return (LOG_PROBS, *per_layer(NEW_K, n_layers), *per_layer(NEW_V, n_layers), CROSS_ATTENTION)


def shortlist_inputs(n_layers: int) -> tuple[str, ...]:
    return (*decoder_inputs(n_layers), *SHORTLIST_TABLE_OUTPUTS, VOCAB_MASK)


def step_inputs(n_layers: int) -> tuple[str, ...]:
    return (INPUT_IDS, POSITIONS, PAST_MASK, SRC_MASK, REORDER, SCORES, BAN_EOS, TOP_K,
            *per_layer(CROSS_K, n_layers), *per_layer(CROSS_V, n_layers), *per_layer(CACHE_K, n_layers),
            *per_layer(CACHE_V, n_layers))


def step_outputs(n_layers: int) -> tuple[str, ...]:
    return (TOP_VALUES, TOP_IDS, CROSS_ATTENTION, *per_layer(NEXT_CACHE_K, n_layers),
            *per_layer(NEXT_CACHE_V, n_layers))


def rows_inputs(n_layers: int) -> tuple[str, ...]:
    return (CACHE_ROWS, CACHE_SLOTS, CROSS_ROWS, OLD_COLS, NEW_COLS,
            *(x for name in (CROSS_K, CROSS_V, CACHE_K, CACHE_V, ENC_K, ENC_V) for x in per_layer(name, n_layers)))


def rows_outputs(n_layers: int) -> tuple[str, ...]:
    return tuple(x for name in (NEXT_CROSS_K, NEXT_CROSS_V, NEXT_CACHE_K, NEXT_CACHE_V)
                 for x in per_layer(name, n_layers))


def graph_names(n_layers: int) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """graph -> (input names, output names), for a model with ``n_layers`` decoder layers:
    the required graphs, then the optional device-resident ones."""
    return {ENCODER: (ENCODER_INPUTS, encoder_outputs(n_layers)),
            DECODER: (decoder_inputs(n_layers), decoder_outputs(n_layers)),
            STEP: (step_inputs(n_layers), step_outputs(n_layers)),
            ROWS: (rows_inputs(n_layers), rows_outputs(n_layers)),
            SHORTLIST_TABLE: ((VOCAB_IDS,), SHORTLIST_TABLE_OUTPUTS),
            SHORTLIST: (shortlist_inputs(n_layers), decoder_outputs(n_layers))}


# Graph variants: file name suffix -> what it is for.
VARIANTS: dict[str, str] = {
    "fp32": "reference precision, any device",
    "int8": "dynamic int8 quantization of the matrix multiplications, for the CPU",
    "int8w8": "int8 with 8-bit weights, for CPUs whose int8 products cannot saturate (VNNI, AMX): engine/cpu.py",
    "fp16": "half precision, for CUDA",
}


def graph_file(graph: str, variant: str = "fp32") -> str:
    """encoder.onnx, decoder.int8.onnx, ..."""
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r} is not one of {', '.join(VARIANTS)}")
    return f"{graph}.onnx" if variant == "fp32" else f"{graph}.{variant}.onnx"
