"""Would onnxruntime's own fused operators make our decoder step faster? Node by node.

    python -m bench.studies.contrib_ops --package packages/default [--threads 1] [--rounds 5]

A decoder step of the default model is about 200 onnxruntime nodes (int8w8: 207), most of them tiny:
at one row the step's products are less than half its time. onnxruntime ships fused operators
(``com.microsoft``) that could stand in for groups of them. Each candidate is timed here against
the nodes it would replace, as our export writes them, in small graphs of their own, at 1, 4, 32
and 128 rows, side by side in alternating rounds (best of ``--rounds``), and checked for what we
must keep: the same values as today's nodes (or how far off), and each row the same bits alone as
in the batch (int8's batch invariance, tests/test_quantize.py).

- **product**: one int8 linear layer, today's chain (export/quantize.py: Abs, ReduceMax, Mul, Max,
  QuantizeLinear on each row, MatMulIntegerToFloat, the bias Add; this CPU's weight width) against
  ``MatMulNBits`` with 8-bit weights in blocks of 32 along K and ``accuracy_level`` 4 (activations
  quantized to int8 inside the operator, per row and block), the bias inside, one node for seven;
  for every product shape of the package's decoder step.
- **cross**: one cross-attention block after its query projection, today's (heads split, scaled,
  products with the transposed keys, the source mask, softmax, heads joined) against
  ``MultiHeadAttention`` on keys and values laid out (sources, heads, positions, head size) and
  the mask as ``key_padding_mask``; greedy (a source per row) and beam 4 (a source per four rows,
  which ``MultiHeadAttention`` takes as four query positions of one source).
- **step**: the whole decoder step of the package, today's graph against the same graph with every
  cross-attention block rewritten to ``MultiHeadAttention`` (cross keys laid out as values are,
  the last layer's attention weights from its ``qk`` output): what a package format with that
  layout would give, at greedy and beam-4 rows; with the log-probabilities' largest difference
  and whether a beam job's rows are the same bits alone as in the batch.
- **self**: one self-attention block over a cache of ``--past`` slots after its projections,
  today's (past and own scores apart, one softmax, past and own values apart) against
  ``MultiHeadAttention`` with ``past_key``/``past_value``, which returns the cache with the new
  token appended (``present``): a copy of the whole cache every step that today's contract avoids.

Needs only the installed onnxruntime. It changes nothing in the package; docs/BENCHMARKS.md
(what we tried) keeps the verdict.
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from bench.studies.fused_linear import ROWS, chain_model, one_node_model, product_shapes, session
from bench.studies.step_cost import best_per_call

NBITS_BLOCK = 32  # MatMulNBits' block along K (the smallest it takes; larger blocks were no faster)
NBITS_ZERO_POINT = 128  # its default zero point for 8-bit weights (no zero_points input)
SOURCE_LENGTH = 25  # source positions in the attention blocks (the help and Bible test sets' median)
MASKED = 20  # ... of which the first MASKED are real, the rest padding
BEAM = 4
NEG = -1.0e4  # today's masked score (training/model.py, MASK_VALUE as exported)


def float_input(name: str, shape: list[Any]) -> Any:
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def bool_input(name: str, shape: list[Any]) -> Any:
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.BOOL, shape)


# ------------------------------------------------------------------------------------- products
def nbits_model(w: np.ndarray, b: np.ndarray, block: int = NBITS_BLOCK) -> Any:
    """The same layer as one MatMulNBits: weights stored (N, K / block, block) as uint8 q + 128,
    one scale per column and block (symmetric, |q| <= 127), the bias as its sixth input."""
    from onnx import helper, numpy_helper

    from export.quantize import MS_DOMAIN, WEIGHT_MAX_EXACT

    k, n = w.shape
    if k % block:
        raise ValueError(f"K={k} is not a multiple of the block {block}")
    blocks = w.T.reshape(n, k // block, block)
    amax = np.abs(blocks).max(axis=2)
    scale = np.where(amax > 0, amax / WEIGHT_MAX_EXACT, 1.0).astype(np.float32)
    q = np.clip(np.round(blocks / scale[..., None]), -WEIGHT_MAX_EXACT, WEIGHT_MAX_EXACT) + NBITS_ZERO_POINT
    node = helper.make_node("MatMulNBits", ["x", "w_q", "w_scale", "", "", "b"], ["y"], domain=MS_DOMAIN,
                            K=k, N=n, bits=8, block_size=block, accuracy_level=4)
    inits = [numpy_helper.from_array(q.astype(np.uint8), "w_q"),
             numpy_helper.from_array(scale.reshape(-1), "w_scale"), numpy_helper.from_array(b, "b")]
    return one_node_model([node], [float_input("x", ["M", k])], [float_input("y", ["M", n])], inits)


def compare_product(k: int, n: int, weight_max: int, threads: int, rounds: int) -> list[str]:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((k, n)) * 0.05).astype(np.float32)
    b = (rng.standard_normal(n) * 0.1).astype(np.float32)
    chain, nbits = session(chain_model(w, b, weight_max), threads), session(nbits_model(w, b), threads)
    lines = []
    for m in ROWS:
        x = rng.standard_normal((m, k)).astype(np.float32)
        exact = x @ w + b
        ours, theirs = chain.run(None, {"x": x})[0], nbits.run(None, {"x": x})[0]
        alone = all(np.array_equal(nbits.run(None, {"x": x[r:r + 1]})[0][0], theirs[r]) for r in range(m))
        secs = best_per_call({"today": partial(chain.run, None, {"x": x}),
                              "nbits": partial(nbits.run, None, {"x": x})}, rounds, 20)
        lines.append(f"  product {k} x {n}, {m:3d} rows: today {1e6 * secs['today']:8.1f} us, MatMulNBits "
                     f"{1e6 * secs['nbits']:8.1f} us = {secs['today'] / secs['nbits']:.2f}x; mean |error| "
                     f"today {float(np.abs(ours - exact).mean()):.1e}, MatMulNBits "
                     f"{float(np.abs(theirs - exact).mean()):.1e}; its rows the same bits alone: {alone}")
    return lines


# ------------------------------------------------------------------------------ cross-attention
def grouped_queries(out: str) -> list:
    """Nodes reshaping the queries q (B, 1, D) to ``out`` (C, B / C, *group_shape): the B / C rows
    of each of the C sources (the keys' first axis) together."""
    from onnx import helper

    return [helper.make_node("Shape", ["k"], ["c"], start=0, end=1),
            helper.make_node("Concat", ["c", "group_shape"], ["qshape"], axis=0),
            helper.make_node("Reshape", ["q", "qshape"], [out])]


def cross_today(heads: int, d_head: int) -> Any:
    """Today's block: q (B, 1, D), keys (C, H, Dh, S) transposed, values (C, H, S, Dh), mask (C, S)
    -> (B, 1, D); row r reads source r // (B / C), as training/model.py exports it."""
    from onnx import helper, numpy_helper

    d = heads * d_head
    nodes = [
        *grouped_queries("q5"),  # (C, B / C, 1, H, Dh); (C, B / C, H, 1, Dh) transposed
        helper.make_node("Transpose", ["q5"], ["qt"], perm=[0, 1, 3, 2, 4]),
        helper.make_node("Div", ["qt", "sqrt_dh"], ["qs"]),
        helper.make_node("Unsqueeze", ["k", "ax1"], ["k5"]),
        helper.make_node("Unsqueeze", ["v", "ax1"], ["v5"]),
        helper.make_node("MatMul", ["qs", "k5"], ["scores"]),
        helper.make_node("Unsqueeze", ["mask", "mask_axes"], ["m5"]),
        helper.make_node("Not", ["m5"], ["pad"]),
        helper.make_node("Where", ["pad", "neg", "scores"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v5"], ["o5"]),
        helper.make_node("Transpose", ["o5"], ["ot"], perm=[0, 1, 3, 2, 4]),
        helper.make_node("Reshape", ["ot", "out_shape"], ["out"]),
    ]
    inits = [numpy_helper.from_array(np.array([-1, 1, heads, d_head], np.int64), "group_shape"),
             numpy_helper.from_array(np.array([-1, 1, d], np.int64), "out_shape"),
             numpy_helper.from_array(np.array(np.sqrt(d_head), np.float32), "sqrt_dh"),
             numpy_helper.from_array(np.array([1], np.int64), "ax1"),
             numpy_helper.from_array(np.array([1, 2, 3], np.int64), "mask_axes"),
             numpy_helper.from_array(np.array(NEG, np.float32), "neg")]
    return one_node_model(nodes, [float_input("q", ["B", 1, d]), float_input("k", ["C", heads, d_head, "S"]),
                                  float_input("v", ["C", heads, "S", d_head]), bool_input("mask", ["C", "S"])],
                          [float_input("out", ["B", 1, d])], inits)


def cross_mha(heads: int, d_head: int) -> Any:
    """The same as MultiHeadAttention: the B / C rows of a source are its query positions."""
    from onnx import TensorProto, helper, numpy_helper

    from export.quantize import MS_DOMAIN

    d = heads * d_head
    nodes = [
        *grouped_queries("qg"),  # (C, B / C, D)
        helper.make_node("Cast", ["mask"], ["mask_i"], to=TensorProto.INT32),
        helper.make_node("MultiHeadAttention", ["qg", "k", "v", "", "mask_i"], ["og"], domain=MS_DOMAIN,
                         num_heads=heads),
        helper.make_node("Reshape", ["og", "out_shape"], ["out"]),
    ]
    inits = [numpy_helper.from_array(np.array([-1, d], np.int64), "group_shape"),
             numpy_helper.from_array(np.array([-1, 1, d], np.int64), "out_shape")]
    return one_node_model(nodes, [float_input("q", ["B", 1, d]), float_input("k", ["C", heads, "S", d_head]),
                                  float_input("v", ["C", heads, "S", d_head]), bool_input("mask", ["C", "S"])],
                          [float_input("out", ["B", 1, d])], inits)


def compare_cross(heads: int, d_head: int, threads: int, rounds: int) -> list[str]:
    rng = np.random.default_rng(1)
    today, mha = session(cross_today(heads, d_head), threads), session(cross_mha(heads, d_head), threads)
    lines = []
    for beam in (1, BEAM):
        for m in ROWS:
            if m % beam:
                continue
            c = m // beam
            q = rng.standard_normal((m, 1, heads * d_head)).astype(np.float32)
            k = rng.standard_normal((c, heads, SOURCE_LENGTH, d_head)).astype(np.float32)
            v = rng.standard_normal((c, heads, SOURCE_LENGTH, d_head)).astype(np.float32)
            mask = np.arange(SOURCE_LENGTH)[None, :].repeat(c, 0) < MASKED
            a = {"q": q, "k": np.ascontiguousarray(k.transpose(0, 1, 3, 2)), "v": v, "mask": mask}
            b = {"q": q, "k": k, "v": v, "mask": mask}
            want, got = today.run(None, a)[0], mha.run(None, b)[0]
            secs = best_per_call({"today": partial(today.run, None, a), "mha": partial(mha.run, None, b)}, rounds, 50)
            lines.append(f"  cross-attention, {m:3d} rows, beam {beam}: today {1e6 * secs['today']:7.1f} us, "
                         f"MultiHeadAttention {1e6 * secs['mha']:7.1f} us = {secs['today'] / secs['mha']:.2f}x; "
                         f"max |difference| {float(np.abs(got - want).max()):.1e}")
    return lines


# ------------------------------------------------------------------------------- self-attention
def self_inputs(heads: int, d_head: int, keys_transposed: bool) -> list:
    """q, k, v (B, 1, D) from the projections, the cache's keys (B, H, Dh, P) when transposed as
    ours are, else (B, H, P, Dh), its values (B, H, P, Dh) and past_mask (B, P)."""
    d = heads * d_head
    keys = ["B", heads, d_head, "P"] if keys_transposed else ["B", heads, "P", d_head]
    return [float_input("q", ["B", 1, d]), float_input("k", ["B", 1, d]), float_input("v", ["B", 1, d]),
            float_input("past_k", keys), float_input("past_v", ["B", heads, "P", d_head]),
            bool_input("past_mask", ["B", "P"])]


def self_today(heads: int, d_head: int) -> Any:
    """Today's block for one new token: q, k, v (B, 1, D) from the projections, the cache's keys
    (B, H, Dh, P) transposed and values (B, H, P, Dh), past_mask (B, P) -> the attended (B, 1, D)
    and the new token's keys (B, H, Dh, 1) and values (B, H, 1, Dh) for the caller's cache."""
    from onnx import helper, numpy_helper

    d = heads * d_head
    nodes = [
        helper.make_node("Reshape", ["k", "head_shape"], ["k4"]),
        helper.make_node("Transpose", ["k4"], ["new_k"], perm=[0, 2, 3, 1]),  # (B, H, Dh, 1)
        helper.make_node("Reshape", ["v", "head_shape"], ["v4"]),
        helper.make_node("Transpose", ["v4"], ["new_v"], perm=[0, 2, 1, 3]),  # (B, H, 1, Dh)
        helper.make_node("Reshape", ["q", "head_shape"], ["q4"]),
        helper.make_node("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
        helper.make_node("Div", ["qt", "sqrt_dh"], ["qs"]),
        helper.make_node("Transpose", ["new_k"], ["own_k"], perm=[0, 1, 3, 2]),
        helper.make_node("Mul", ["qs", "own_k"], ["own_prod"]),
        helper.make_node("ReduceSum", ["own_prod", "last_axis"], ["own_score"]),
        helper.make_node("MatMul", ["qs", "past_k"], ["past_score"]),
        helper.make_node("Unsqueeze", ["past_mask", "mask_axes"], ["m4"]),
        helper.make_node("Not", ["m4"], ["pad"]),
        helper.make_node("Where", ["pad", "neg", "past_score"], ["past_masked"]),
        helper.make_node("Concat", ["past_masked", "own_score"], ["scores"], axis=-1),
        helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
        helper.make_node("Shape", ["past_k"], ["p_len"], start=3, end=4),
        helper.make_node("Slice", ["p", "zero", "p_len", "last_axis"], ["p_past"]),
        helper.make_node("Slice", ["p", "p_len", "big", "last_axis"], ["p_own"]),
        helper.make_node("MatMul", ["p_past", "past_v"], ["o_past"]),
        helper.make_node("Mul", ["p_own", "new_v"], ["o_own"]),
        helper.make_node("Add", ["o_past", "o_own"], ["o"]),
        helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ot", "out_shape"], ["out"]),
    ]
    inits = [numpy_helper.from_array(np.array([0, 1, heads, d_head], np.int64), "head_shape"),
             numpy_helper.from_array(np.array([0, 1, d], np.int64), "out_shape"),
             numpy_helper.from_array(np.array(np.sqrt(d_head), np.float32), "sqrt_dh"),
             numpy_helper.from_array(np.array([-1], np.int64), "last_axis"),
             numpy_helper.from_array(np.array([1, 2], np.int64), "mask_axes"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([2**62], np.int64), "big"),
             numpy_helper.from_array(np.array(NEG, np.float32), "neg")]
    outs = [float_input("out", ["B", 1, d]), float_input("new_k", ["B", heads, d_head, 1]),
            float_input("new_v", ["B", heads, 1, d_head])]
    return one_node_model(nodes, self_inputs(heads, d_head, keys_transposed=True), outs, inits)


def self_mha(heads: int, d_head: int) -> Any:
    """The same as MultiHeadAttention with the cache as past_key/past_value (B, H, P, Dh); the mask
    over the P + 1 slots as key_padding_mask; present_key/present_value (B, H, P + 1, Dh) out."""
    from onnx import TensorProto, helper, numpy_helper

    from export.quantize import MS_DOMAIN

    d = heads * d_head
    nodes = [
        helper.make_node("Shape", ["past_mask"], ["b"], start=0, end=1),
        helper.make_node("Concat", ["b", "one"], ["b_by_1"], axis=0),
        helper.make_node("Expand", ["true", "b_by_1"], ["own"]),
        helper.make_node("Concat", ["past_mask", "own"], ["all_mask"], axis=1),
        helper.make_node("Cast", ["all_mask"], ["mask_i"], to=TensorProto.INT32),
        helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "mask_i", "", "past_k", "past_v"],
                         ["out", "present_k", "present_v"], domain=MS_DOMAIN, num_heads=heads),
    ]
    inits = [numpy_helper.from_array(np.array([True]), "true"), numpy_helper.from_array(np.array([1], np.int64), "one")]
    outs = [float_input("out", ["B", 1, d]), float_input("present_k", ["B", heads, "T", d_head]),
            float_input("present_v", ["B", heads, "T", d_head])]
    return one_node_model(nodes, self_inputs(heads, d_head, keys_transposed=False), outs, inits)


def sorted_nodes(nodes: list, given: set[str]) -> list:
    """Nodes in an order where each comes after what it reads (ONNX requires it); ``given``: the
    names that need no node (the graph's inputs and initializers)."""
    done = set(given)
    order, left = [], list(nodes)
    while left:
        ready = [n for n in left if all(i in done for i in n.input)]
        if not ready:
            raise ValueError("the nodes form a cycle")
        for n in ready:
            order.append(n)
            done.update(n.output)
            left.remove(n)
    return order


def compare_self(heads: int, d_head: int, past: int, threads: int, rounds: int) -> list[str]:
    rng = np.random.default_rng(2)
    today, mha = session(self_today(heads, d_head), threads), session(self_mha(heads, d_head), threads)
    lines = []
    d = heads * d_head
    for m in ROWS:
        q, k, v = (rng.standard_normal((m, 1, d)).astype(np.float32) for _ in range(3))
        past_k = rng.standard_normal((m, heads, past, d_head)).astype(np.float32)
        past_v = rng.standard_normal((m, heads, past, d_head)).astype(np.float32)
        mask = np.ones((m, past), bool)
        mask[::2, past - 3:] = False  # rows of a batch at different lengths
        a = {"q": q, "k": k, "v": v, "past_k": np.ascontiguousarray(past_k.transpose(0, 1, 3, 2)), "past_v": past_v,
             "past_mask": mask}
        b = {"q": q, "k": k, "v": v, "past_k": past_k, "past_v": past_v, "past_mask": mask}
        want, got = today.run(None, a)[0], mha.run(None, b)[0]
        secs = best_per_call({"today": partial(today.run, None, a), "mha": partial(mha.run, None, b)}, rounds, 50)
        lines.append(f"  self-attention, {m:3d} rows, {past} cached slots: today {1e6 * secs['today']:7.1f} us, "
                     f"MultiHeadAttention {1e6 * secs['mha']:7.1f} us = {secs['today'] / secs['mha']:.2f}x; "
                     f"max |difference| {float(np.abs(got - want).max()):.1e}")
    return lines


# ------------------------------------------------------------------------------- the whole step
def mha_decoder(path: Path, layers: int, heads: int, d_head: int) -> Any:
    """The decoder-step graph at ``path`` with each layer's cross-attention (from its query
    projection's bias Add to the input of its output projection) as one MultiHeadAttention;
    its cross_k inputs take keys (C, H, S, Dh). Row r still reads source r // (B / C): the B / C
    rows of a source are its query positions. Nodes nothing reads any more are dropped."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from engine import contract
    from export.quantize import MS_DOMAIN

    model = onnx.load(str(path))
    graph = model.graph
    d = heads * d_head
    producer = {out: n for n in graph.node for out in n.output}

    def bias_add(name: str) -> Any:
        return next(n for n in graph.node if n.op_type == "Add" and name in n.input)

    def const(name: str, values: list[int]) -> Any:
        return numpy_helper.from_array(np.array(values, np.int64), f"mha.{name}")

    inits = [const("minus_one", [-1]), const("zero", [0]), const("one", [1]), const("d", [d]),
             const("out_shape", [-1, 1, d])]
    nodes = [  # once a step: the sources' mask (C, S), each group's first row, and the queries' shape
        helper.make_node("Shape", [f"{contract.CROSS_K}_0"], ["mha.c"], start=0, end=1),
        helper.make_node("Shape", [contract.SRC_MASK], ["mha.s"], start=1, end=2),
        helper.make_node("Concat", ["mha.c", "mha.minus_one", "mha.s"], ["mha.mask_shape"], axis=0),
        helper.make_node("Reshape", [contract.SRC_MASK, "mha.mask_shape"], ["mha.mask3"]),
        helper.make_node("Slice", ["mha.mask3", "mha.zero", "mha.one", "mha.one"], ["mha.mask_first"]),
        helper.make_node("Squeeze", ["mha.mask_first", "mha.one"], ["mha.mask2"]),
        helper.make_node("Cast", ["mha.mask2"], ["mha.mask"], to=TensorProto.INT32),
        helper.make_node("Concat", ["mha.c", "mha.minus_one", "mha.d"], ["mha.q_shape"], axis=0),
    ]
    renames = {}
    for i in range(layers):
        q = bias_add(f"model.decoder_layers.{i}.cross_attn.w_q.bias").output[0]
        out_add = bias_add(f"model.decoder_layers.{i}.cross_attn.w_o.bias")
        product = next(producer[x] for x in out_add.input
                       if x in producer and producer[x].op_type in ("MatMul", "MatMulIntegerToFloat"))
        a = product.input[0]
        attended = producer[a].input[0] if a in producer and producer[a].op_type == "QuantizeLinear" else a
        last = i == layers - 1
        outputs = [f"mha.o{i}", "", "", f"mha.qk{i}"] if last else [f"mha.o{i}"]
        nodes += [helper.make_node("Reshape", [q, "mha.q_shape"], [f"mha.q{i}"]),
                  helper.make_node("MultiHeadAttention", [f"mha.q{i}", f"{contract.CROSS_K}_{i}",
                                                          f"{contract.CROSS_V}_{i}", "", "mha.mask"],
                                   outputs, domain=MS_DOMAIN, num_heads=heads),
                  helper.make_node("Reshape", [f"mha.o{i}", "mha.out_shape"], [f"mha.x{i}"])]
        renames[attended] = f"mha.x{i}"
        if last:  # the scaled, masked scores (C, H, B / C, S) -> weights, mean over heads -> (B, S)
            producer[contract.CROSS_ATTENTION].output[0] = "mha.replaced_cross_attention"
            nodes += [helper.make_node("Softmax", [f"mha.qk{i}"], ["mha.p"], axis=-1),
                      helper.make_node("ReduceMean", ["mha.p", "mha.one"], ["mha.p_mean"], keepdims=0),
                      helper.make_node("Shape", [contract.SRC_MASK], ["mha.rows_by_s"]),
                      helper.make_node("Reshape", ["mha.p_mean", "mha.rows_by_s"], [contract.CROSS_ATTENTION])]
            graph.value_info.append(helper.make_tensor_value_info(f"mha.qk{i}", TensorProto.FLOAT, None))
    for n in graph.node:
        for j, name in enumerate(n.input):
            n.input[j] = renames.get(name, name)
    graph.initializer.extend(inits)
    kept = live_nodes([*graph.node, *nodes], {o.name for o in graph.output})
    ready = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    del graph.node[:]
    graph.node.extend(sorted_nodes(kept, ready))
    read = {i for n in graph.node for i in n.input}
    live_inits = [i for i in graph.initializer if i.name in read]
    del graph.initializer[:]
    graph.initializer.extend(live_inits)
    for value in graph.input:  # cross keys (C, H, Dh, S) -> (C, H, S, Dh)
        if value.name.startswith(f"{contract.CROSS_K}_"):
            dims = value.type.tensor_type.shape.dim
            dh, s = dims[2].SerializeToString(), dims[3].SerializeToString()
            dims[2].ParseFromString(s)
            dims[3].ParseFromString(dh)
    if not any(o.domain == MS_DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return model


def live_nodes(nodes: list, outputs: set[str]) -> list:
    """The nodes some graph output depends on."""
    while True:
        read = {i for n in nodes for i in n.input} | outputs
        kept = [n for n in nodes if any(o in read for o in n.output if o)]
        if len(kept) == len(nodes):
            return kept
        nodes = kept


def step_inputs(dims: Any, rows: int, beam: int, past: int, rng: Any) -> tuple[dict, dict]:
    """Random decoder-step inputs for today's graph and the rewritten one (cross keys transposed
    back), rows // beam sources of SOURCE_LENGTH positions (every other one padded after MASKED)."""
    from engine import contract

    sources = rows // beam
    src_mask = np.ones((sources, SOURCE_LENGTH), bool)
    src_mask[::2, MASKED:] = False
    today = {contract.INPUT_IDS: rng.integers(4, dims.vocab_size, (rows, 1)),
             contract.POSITIONS: np.full((rows, 1), past), contract.PAST_MASK: np.ones((rows, past), bool),
             contract.SRC_MASK: np.repeat(src_mask, beam, axis=0)}
    rewritten = dict(today)
    h, dh = dims.n_heads, dims.d_head
    for i in range(dims.n_decoder_layers):
        keys = rng.standard_normal((sources, h, SOURCE_LENGTH, dh)).astype(np.float32)
        today[f"{contract.CROSS_K}_{i}"] = np.ascontiguousarray(keys.transpose(0, 1, 3, 2))
        rewritten[f"{contract.CROSS_K}_{i}"] = keys
        for name, shape in ((contract.CROSS_V, (sources, h, SOURCE_LENGTH, dh)), (contract.PAST_K, (rows, h, dh, past)),
                            (contract.PAST_V, (rows, h, past, dh))):
            today[f"{name}_{i}"] = rewritten[f"{name}_{i}"] = rng.standard_normal(shape).astype(np.float32)
    return today, rewritten


def compare_step(package: Any, variant: str, past: int, threads: int, rounds: int) -> list[str]:
    import onnxruntime as ort

    from engine import contract
    from engine.runtime import CPU_DISABLED_FUSIONS

    dims = package.dims
    path = package.graph_path(contract.DECODER, variant)

    def open_session(source: Any) -> Any:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
        opts.log_severity_level = 3
        return ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"],
                                    disabled_optimizers=CPU_DISABLED_FUSIONS)

    rewritten_model = mha_decoder(path, dims.n_decoder_layers, dims.n_heads, dims.d_head)
    today, rewritten = open_session(str(path)), open_session(rewritten_model.SerializeToString())
    rng = np.random.default_rng(3)
    lines = [f"  the {variant} decoder step: {len(rewritten_model.graph.node)} nodes rewritten"]
    for beam in (1, BEAM):
        for rows in ROWS:
            if rows % beam:
                continue
            a, b = step_inputs(dims, rows, beam, past, rng)
            want, got = today.run(None, a)[0], rewritten.run(None, b)[0]
            first = {k: v[:beam] if v.shape[0] == rows else v[:1] for k, v in b.items()}
            alone = np.array_equal(rewritten.run(None, first)[0], got[:beam])
            secs = best_per_call({"today": partial(today.run, None, a), "mha": partial(rewritten.run, None, b)},
                                 rounds, 30 if rows < 32 else 10)
            lines.append(f"  {variant} step, {rows:3d} rows, beam {beam}: today {1e3 * secs['today']:7.3f} ms, "
                         f"rewritten {1e3 * secs['mha']:7.3f} ms = {secs['today'] / secs['mha']:.2f}x; max |log p "
                         f"difference| {float(np.abs(got - want).max()):.1e}; a job's rows the same bits alone: "
                         f"{alone}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.studies.contrib_ops", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--package", type=Path, required=True, help="its decoder's shapes are timed")
    p.add_argument("--threads", type=int, default=1, help="onnxruntime's intra-op threads")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--past", type=int, default=20, help="cached slots in the self-attention block")
    p.add_argument("--only", choices=["product", "cross", "step", "self"], help="one of the four comparisons")
    args = p.parse_args(argv)

    from engine.cpu import cpu_info, int8_variant
    from engine.package import ModelPackage
    from export.quantize import WEIGHT_MAX, WEIGHT_MAX_EXACT

    package = ModelPackage.load(args.package)
    dims = package.dims
    model, flags = cpu_info()
    width = int8_variant(["int8", "int8w8"], flags)
    weight_max = WEIGHT_MAX_EXACT if width == "int8w8" else WEIGHT_MAX
    print(f"{model}; {args.threads} thread(s); our int8 products here: {width}; best of {args.rounds} "
          f"alternating rounds")
    if args.only in (None, "product"):
        for k, n in product_shapes(package):
            for line in compare_product(k, n, weight_max, args.threads, args.rounds):
                print(line, flush=True)
    if args.only in (None, "cross"):
        for line in compare_cross(dims.n_heads, dims.d_head, args.threads, args.rounds):
            print(line, flush=True)
    if args.only in (None, "step"):
        for variant in (width, "fp32"):
            for line in compare_step(package, variant, args.past, args.threads, args.rounds):
                print(line, flush=True)
    if args.only in (None, "self"):
        for line in compare_self(dims.n_heads, dims.d_head, args.past, args.threads, args.rounds):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
