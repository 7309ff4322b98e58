"""Example inputs of the decoder-step graph: what the exporter traces with and checks at other
sizes, and what the resident step's examples (export/resident.py) extend. Apart from both so
that neither imports the other.
"""

from __future__ import annotations

import torch
from torch import Tensor

from engine import contract
from training.model import Transformer


def example_inputs(model: Transformer, b: int, s: int, p: int, seed: int = 0, sources: int = 0) -> dict[str, Tensor]:
    """Decoder-step inputs of the given sizes, one new token per row (real-looking ids,
    masks with some padding). ``sources``: cross-attention rows, each shared by b / sources
    consecutive rows (engine/contract.py; 0: one per row)."""
    cfg = model.cfg
    g = torch.Generator().manual_seed(seed)
    layers, heads, d_head = cfg.n_decoder_layers, cfg.n_heads, cfg.d_model // cfg.n_heads
    src_mask = torch.ones(b, s, dtype=torch.bool)
    past_mask = torch.ones(b, p, dtype=torch.bool)
    if b > 1 and s > 1:
        src_mask[-1, -1] = False  # a padded source row
    if b > 1 and p > 1:
        past_mask[-1, 0] = False  # a row whose cache starts later
    inputs = {
        contract.INPUT_IDS: torch.randint(4, cfg.vocab_size, (b, 1), generator=g),
        contract.POSITIONS: torch.full((b, 1), p),
        contract.PAST_MASK: past_mask,
        contract.SRC_MASK: src_mask,
    }
    c = sources or b
    if b % c:
        raise ValueError(f"{b} rows cannot share {c} sources evenly")
    sizes = ((contract.CROSS_K, c, s), (contract.CROSS_V, c, s), (contract.PAST_K, b, p), (contract.PAST_V, b, p))
    for name, rows, length in sizes:
        for layer_name in contract.per_layer(name, layers):
            inputs[layer_name] = torch.randn(contract.kv_shape(name, rows, heads, d_head, length), generator=g)
    return inputs
