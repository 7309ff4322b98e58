"""The graphs of device-resident decoding (ResidentBatch in engine/decoding.py): ``step`` and ``rows``.

The plain decoder step (``decoder.onnx``) returns the new token's keys and values and the
whole (B, V) log-probabilities, and the numpy loop keeps the cache: right for the CPU, where
onnxruntime reads numpy arrays in place. On a GPU that design sends every cache to the
device and every log-probability back at every step. These two graphs let the cache and the
sources' keys and values stay where the graphs run, as onnxruntime values:

``step``: one decoder step that first reorders the cache rows (a beam that continues another
  beam's hypothesis takes its cache), then returns the cache with the new token's keys and
  values appended as one more slot, and, instead of log-probabilities, the ``k`` best
  candidates of each row: running score + log-probability, best first, ties to the lower
  token id (what the numpy search picks). ``k`` comes from the length of ``top_k`` (its
  values are not read), so one graph serves greedy (1) and any beam (2 x beam).
``rows``: rebuilds the buffers between steps when jobs join or leave: keeps and reorders
  rows, drops cache slots no live row uses, widens or narrows the source positions, and
  appends the newcomers' rows (the encoder's output, repeated per beam) with empty caches.

Both are exported from PyTorch code around ``Transformer.decode_step``, so they compute what
the reference computes; export checks them against the plain graphs' outputs.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from engine import contract
from engine.defaults import EOS_ID
from export.examples import example_inputs
from export.parity import Worst
from training.model import Transformer


class StepGraph(nn.Module):
    """See the module doc and engine/contract.py (STEP_INPUTS, step_outputs)."""

    def __init__(self, model: Transformer, eos_id: int) -> None:
        super().__init__()
        self.model = model
        self.eos_id = eos_id
        self.register_buffer("output_weight", model.embedding.weight.detach().t().contiguous(), persistent=False)

    def forward(self, input_ids: Tensor, positions: Tensor, past_mask: Tensor, src_mask: Tensor, reorder: Tensor,
                scores: Tensor, ban_eos: Tensor, top_k: Tensor, *caches: Tensor) -> tuple[Tensor, ...]:
        n = self.model.cfg.n_decoder_layers
        cross_k, cross_v, cache_k, cache_v = (caches[i * n:(i + 1) * n] for i in range(4))
        past_k = [c.index_select(0, reorder) for c in cache_k]  # (B, H, Dh, P)
        past_v = [c.index_select(0, reorder) for c in cache_v]  # (B, H, P, Dh)
        out = self.model.decode_step(input_ids, positions, past_mask, src_mask, cross_k, cross_v, past_k, past_v)
        logits = torch.matmul(out.hidden[:, -1], self.output_weight)  # (B, V)
        if self.model.output_bias is not None:
            logits = logits + self.model.output_bias
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        vocab = torch.arange(log_probs.size(1), device=log_probs.device)
        # eos where a row may not end yet; pad never (it is no token: training never asks for it)
        banned = (ban_eos[:, None] & (vocab == self.eos_id)[None, :]) | (vocab == self.model.cfg.pad_id)[None, :]
        log_probs = torch.where(banned, torch.full_like(log_probs, float("-inf")), log_probs)
        cand = scores[:, None] + log_probs
        values, ids = torch.topk(cand, top_k.size(0), dim=1, largest=True, sorted=True)
        present_k = [torch.cat([p, k], dim=3) for p, k in zip(past_k, out.new_k)]
        present_v = [torch.cat([p, v], dim=2) for p, v in zip(past_v, out.new_v)]
        return (values, ids, out.cross_attention[:, -1], *present_k, *present_v)


class RowsGraph(nn.Module):
    """Between steps: new buffers from the old ones and the newcomers' encoder output.

    Index inputs (all int64): ``cache_rows`` picks each new row's cache from the old rows,
    where the index ``old rows`` means an empty cache (a newcomer); ``cache_slots`` the slots
    kept; ``cross_rows`` each new row's source keys/values from the old rows followed by the
    newcomers' encoder rows; ``old_cols`` and ``new_cols`` the source positions of either,
    where the index ``old width`` (``new width``) means a zero column (padding).
    """

    def __init__(self, n_layers: int) -> None:
        super().__init__()
        self.n_layers = n_layers

    def forward(self, cache_rows: Tensor, cache_slots: Tensor, cross_rows: Tensor, old_cols: Tensor,
                new_cols: Tensor, *buffers: Tensor) -> tuple[Tensor, ...]:
        n = self.n_layers
        cross_k, cross_v, cache_k, cache_v, enc_k, enc_v = (buffers[i * n:(i + 1) * n] for i in range(6))
        out_cross_k = [_cross(old, new, 3, cross_rows, old_cols, new_cols) for old, new in zip(cross_k, enc_k)]
        out_cross_v = [_cross(old, new, 2, cross_rows, old_cols, new_cols) for old, new in zip(cross_v, enc_v)]
        out_cache_k = [_cache(c, 3, cache_rows, cache_slots) for c in cache_k]
        out_cache_v = [_cache(c, 2, cache_rows, cache_slots) for c in cache_v]
        return (*out_cross_k, *out_cross_v, *out_cache_k, *out_cache_v)


def _with_zero(x: Tensor, dim: int) -> Tensor:
    """``x`` with one more, all-zero, index along ``dim``."""
    shape = list(x.shape)
    shape[dim] = 1
    return torch.cat([x, x.new_zeros(shape)], dim=dim)


def _cross(old: Tensor, new: Tensor, axis: int, rows: Tensor, old_cols: Tensor, new_cols: Tensor) -> Tensor:
    old = _with_zero(old, axis).index_select(axis, old_cols)
    new = _with_zero(new, axis).index_select(axis, new_cols)
    return torch.cat([old, new], dim=0).index_select(0, rows)


def _cache(old: Tensor, axis: int, rows: Tensor, slots: Tensor) -> Tensor:
    return _with_zero(old, 0).index_select(0, rows).index_select(axis, slots)


def step_example(model: Transformer, b: int, s: int, p: int, k: int, seed: int = 0) -> dict[str, Tensor]:
    """Step inputs of the given sizes: the plain step's examples (export/examples.py), its
    cache as the step's, a reorder that swaps the first two rows, one banned row."""
    plain = example_inputs(model, b, s, p, seed)
    g = torch.Generator().manual_seed(seed + 1)
    reorder = torch.arange(b)
    if b > 1:
        reorder[0], reorder[1] = 1, 0
    extra = {contract.REORDER: reorder, contract.SCORES: -torch.rand(b, generator=g),
             contract.BAN_EOS: torch.arange(b) == 0, contract.TOP_K: torch.zeros(k, dtype=torch.bool)}
    n = model.cfg.n_decoder_layers
    renamed = {**dict(zip(contract.per_layer(contract.CACHE_K, n), contract.per_layer(contract.PAST_K, n))),
               **dict(zip(contract.per_layer(contract.CACHE_V, n), contract.per_layer(contract.PAST_V, n)))}
    return {name: extra[name] if name in extra else plain[renamed.get(name, name)]
            for name in contract.step_inputs(n)}


def rows_example(model: Transformer, b: int, s: int, p: int, j: int, w: int, seed: int = 0) -> dict[str, Tensor]:
    """Rows inputs: ``b`` old rows (``s`` source positions, ``p`` slots), ``j`` newcomers of
    width ``w``; the first old row leaves, the others are kept in reverse order, every
    newcomer takes two rows (a beam of 2), one slot is dropped."""
    cfg = model.cfg
    g = torch.Generator().manual_seed(seed)
    layers, heads, d_head = cfg.n_decoder_layers, cfg.n_heads, cfg.d_model // cfg.n_heads
    kept = torch.arange(1, max(b, 1)).flip(0)  # the first old row leaves, the others reversed
    width = max(s, w)
    inputs = {
        contract.CACHE_ROWS: torch.cat([kept, torch.full((2 * j,), b)]),
        contract.CACHE_SLOTS: torch.arange(1, p) if p > 1 else torch.arange(p),
        contract.CROSS_ROWS: torch.cat([kept, b + torch.arange(j).repeat_interleave(2)]),
        contract.OLD_COLS: torch.clamp(torch.arange(width), max=s),
        contract.NEW_COLS: torch.clamp(torch.arange(width), max=w),
    }
    sizes = ((contract.CROSS_K, b, s), (contract.CROSS_V, b, s), (contract.CACHE_K, b, p), (contract.CACHE_V, b, p),
             (contract.ENC_K, j, w), (contract.ENC_V, j, w))
    for name, rows, length in sizes:
        for layer_name in contract.per_layer(name, layers):
            inputs[layer_name] = torch.randn(contract.kv_shape(name, rows, heads, d_head, length), generator=g)
    return inputs


def export_resident_graphs(model: Transformer, eos_id: int, step_path, rows_path, opset: int) -> None:
    """Export ``step`` and ``rows`` with every size dynamic (traced at sizes that differ from
    each other and from 1, which the dynamo exporter would fix)."""
    n = model.cfg.n_decoder_layers
    batch, src, past, k = (torch.export.Dim(x) for x in ("batch", "src_len", "past_len", "top_k"))
    names = contract.graph_names(n)
    inputs = step_example(model, b=3, s=5, p=4, k=2)
    caches = (*[{0: batch, 3: src}] * n, *[{0: batch, 2: src}] * n, *[{0: batch, 3: past}] * n,
              *[{0: batch, 2: past}] * n)
    shapes = ({0: batch}, {0: batch}, {0: batch, 1: past}, {0: batch, 1: src}, {0: batch}, {0: batch}, {0: batch},
              {0: k}, caches)
    step_in, step_out = names[contract.STEP]
    torch.onnx.export(StepGraph(model, eos_id), tuple(inputs.values()), str(step_path), input_names=list(step_in),
                      output_names=list(step_out), opset_version=opset, dynamo=True, dynamic_shapes=shapes,
                      optimize=True, verbose=False)
    old_rows, new_rows, out_rows = (torch.export.Dim(x) for x in ("old_rows", "new_rows", "rows"))
    old_w, new_w, width, slots, kept = (torch.export.Dim(x) for x in ("old_width", "new_width", "width", "slots",
                                                                      "kept_slots"))
    inputs = rows_example(model, b=4, s=5, p=6, j=3, w=7)
    buffers = (*[{0: old_rows, 3: old_w}] * n, *[{0: old_rows, 2: old_w}] * n, *[{0: old_rows, 3: slots}] * n,
               *[{0: old_rows, 2: slots}] * n, *[{0: new_rows, 3: new_w}] * n, *[{0: new_rows, 2: new_w}] * n)
    shapes = ({0: out_rows}, {0: kept}, {0: out_rows}, {0: width}, {0: width}, buffers)
    rows_in, rows_out = names[contract.ROWS]
    torch.onnx.export(RowsGraph(n), tuple(inputs.values()), str(rows_path), input_names=list(rows_in),
                      output_names=list(rows_out), opset_version=opset, dynamo=True, dynamic_shapes=shapes,
                      optimize=True, verbose=False)


# (B, S, P, K) sizes other than the traced ones: batch 1, an empty past, greedy and wide beams.
STEP_CHECK_SIZES = ((1, 3, 0, 1), (4, 7, 6, 8), (2, 2, 0, 2), (1, 9, 3, 1))
# (old rows, old width, slots, newcomers, new width): first join, leave only, narrow and widen.
ROWS_CHECK_SIZES = ((0, 0, 0, 2, 4), (3, 6, 5, 0, 1), (5, 8, 2, 1, 3), (2, 2, 1, 2, 9))


def check_resident_graphs(model: Transformer, step_path, rows_path, eos_id: int = EOS_ID) -> Worst:
    """The largest difference between PyTorch and onnxruntime for both graphs at untraced sizes
    (absolute and over each output's scale, export/parity.py); top_ids and the rows graph (pure
    data movement) must match exactly."""
    import numpy as np
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    step = ort.InferenceSession(str(step_path), opts, providers=["CPUExecutionProvider"])
    rows = ort.InferenceSession(str(rows_path), opts, providers=["CPUExecutionProvider"])
    worst = Worst()
    graph = StepGraph(model, eos_id)
    with torch.no_grad():
        for b, s, p, k in STEP_CHECK_SIZES:
            inputs = step_example(model, b, s, p, min(k, model.cfg.vocab_size), seed=b * 100 + s)
            ref = graph(*inputs.values())
            got = step.run(None, {name: v.numpy() for name, v in inputs.items()})
            if not np.array_equal(got[1], ref[1].numpy()):
                raise RuntimeError(f"{step_path.name}: top_ids differ from PyTorch at B={b} S={s} P={p} K={k}")
            for g, r in zip(got, ref):
                worst.add(g, r.numpy())
        for b, s, p, j, w in ROWS_CHECK_SIZES:
            inputs = rows_example(model, b, s, p, j, w, seed=b + 7 * w)
            ref = RowsGraph(model.cfg.n_decoder_layers)(*inputs.values())
            got = rows.run(None, {name: v.numpy() for name, v in inputs.items()})
            for g, r in zip(got, ref):
                if g.shape != tuple(r.shape) or not np.array_equal(g, r.numpy()):
                    raise RuntimeError(f"{rows_path.name}: an output differs from PyTorch at rows {b} width {s} "
                                       f"slots {p} newcomers {j} width {w}")
    return worst
