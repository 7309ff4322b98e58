"""Graph variants: int8 for the CPU, fp16 for CUDA.

int8 computes every matrix product with a constant weight (the linear layers and the
output projection; the embedding Gather and the attention products stay float) in
integers:

- weights: int8, symmetric, one scale per output column, 7 bits (|q| <= 63);
- activations: quantized on the fly with one scale per row of the last axis, that is
  per token: scale = max|x| / 127, uint8 with zero point 128 (128 + round(x / scale));
  Relu outputs, never negative, use all of 0..255 with zero point 0;
- the product: onnxruntime's MatMulIntegerToFloat (the exact integer GEMM, times the
  weight scale per column, times the row scale), then the layer's bias Add as exported.

Per row, so that a text's output does not depend on what else is in its batch. The
previous scheme (onnxruntime's ``quantize_dynamic``) quantized activations with one scale
over the whole tensor, i.e. over the whole batch: of the default model's first 200 test
verses of en-de and de-en, 145 of 400 decoded differently alone than in batches of 64.
Now a row is quantized from its own values only, the integer product is exact and every
scaling is elementwise, so each row's outputs are the same bits in any batch
(tests/test_quantize.py holds the encoder and the decoder step to that). It is also
closer to fp32 (mean |delta log p| 0.042-0.044 against 0.059-0.062 before) and costs 4-9 %
of greedy throughput; docs/BENCHMARKS.md has the numbers.

Why 7-bit weights: onnxruntime's x86 AVX2 uint8 x int8 kernel (vpmaddubsw) adds pairs of
products into int16 with saturation: 255 * 63 * 2 = 32130 fits, 255 * 127 * 2 does not,
and rows quantized to their own maximum fill the uint8 range. With 8-bit weights the
saturated sums made the error larger than with 7 bits (mean |delta log p| 0.059 vs 0.043
on 96 verses). int8 x int8 products would not saturate, but onnxruntime runs them 7-40x
slower.

Why MatMulIntegerToFloat is written into the graph rather than the standard
MatMulInteger -> Cast -> Mul chain that onnxruntime fuses into it: that fusion also takes
in the following bias Add, and with a per-row scale the fused kernel multiplies the bias
by the row scale as well (onnxruntime 1.32), which is wrong.

fp16 converts weights and the float inputs/outputs (cross and self caches) to half
precision (the log-probabilities stay float32), so the cache a CUDA server keeps on the
device takes half the memory. The masks are applied as -1e4, which is finite in fp16.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from engine import contract

WEIGHT_MAX = 63  # 7-bit weights: no int16 saturation in the AVX2 uint8 x int8 kernel (see above)
WEIGHT_MAX_EXACT = 127  # 8-bit weights, the int8w8 variant: for VNNI/AMX kernels, which do not saturate
SIGNED_ZERO_POINT = 128  # activations of either sign: uint8 128 + round(x / scale), in 1..255
SIGNED_MAX = 127
UNSIGNED_MAX = 255  # Relu outputs: uint8 round(x / scale), in 0..255
TINY_SCALE = 1e-30  # the least row scale: an all-zero row divides by this, not by 0, and quantizes to 0
QUANT_OPSET = 21  # QuantizeLinear with block_size (one scale per row) needs opset 21
MS_DOMAIN = "com.microsoft"


def quantize_weight(w: np.ndarray, weight_max: int = WEIGHT_MAX) -> tuple[np.ndarray, np.ndarray]:
    """(K, N) float -> int8 (K, N) and one float32 scale per column (symmetric, |q| <= weight_max)."""
    amax = np.abs(w).max(axis=0)
    scale = np.where(amax > 0, amax / weight_max, 1.0).astype(np.float32)
    return np.clip(np.round(w / scale), -weight_max, weight_max).astype(np.int8), scale


def to_int8(src: Path, dst: Path, weight_max: int = WEIGHT_MAX) -> Path:
    """Quantize the graph at ``src`` (see the module docstring) and write it to ``dst``, weights
    of ``weight_max`` (WEIGHT_MAX: 7 bits, the ``int8`` variant; WEIGHT_MAX_EXACT: 8 bits, ``int8w8``)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(src))
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    uses: dict[str, int] = {}
    for n in graph.node:
        for name in n.input:
            uses[name] = uses.get(name, 0) + 1
    # Leading dimensions of every annotated tensor (a symbolic name is one size throughout
    # the graph): activations with the same leading dimensions share one zero-point tensor.
    leading: dict[str, tuple] = {}
    for info in onnx.shape_inference.infer_shapes(model).graph.value_info:
        dims = [d.dim_param or d.dim_value for d in info.type.tensor_type.shape.dim]
        if dims and all(dims[:-1]):
            leading[info.name] = tuple(dims[:-1])
    del graph.value_info[:]  # the exporter's annotations: most tensors below are new

    new_inits = [numpy_helper.from_array(np.array([-1], np.int64), "q.last_axis"),
                 numpy_helper.from_array(np.array(1 / SIGNED_MAX, np.float32), "q.inv_signed_max"),
                 numpy_helper.from_array(np.array(1 / UNSIGNED_MAX, np.float32), "q.inv_unsigned_max"),
                 numpy_helper.from_array(np.array(TINY_SCALE, np.float32), "q.tiny"),
                 numpy_helper.from_array(np.array(SIGNED_ZERO_POINT, np.uint8), "q.zero_point")]
    nodes: list = []
    zero_points: dict[tuple, str] = {}  # leading dims -> a uint8 128 tensor of the row scale's shape
    quantized: dict[str, tuple[str, str, str | None]] = {}

    def add(op: str, inputs: list[str], output: str, **attrs) -> None:
        nodes.append(helper.make_node(op, inputs, [output], **attrs))

    def quantize_rows(x: str, width: int) -> tuple[str, str, str | None]:
        """Quantize activation ``x`` (last axis ``width``) row by row, once however many
        products read it: the uint8 rows, the row scale, MatMulIntegerToFloat's zero point."""
        if x not in quantized:
            unsigned = x in producer and producer[x].op_type == "Relu"
            if unsigned:
                add("ReduceMax", [x, "q.last_axis"], f"{x}.q_amax", keepdims=1)
            else:
                add("Abs", [x], f"{x}.q_abs")
                add("ReduceMax", [f"{x}.q_abs", "q.last_axis"], f"{x}.q_amax", keepdims=1)
            add("Mul", [f"{x}.q_amax", "q.inv_unsigned_max" if unsigned else "q.inv_signed_max"], f"{x}.q_step")
            scale = f"{x}.q_scale"
            add("Max", [f"{x}.q_step", "q.tiny"], scale)
            if unsigned:
                add("QuantizeLinear", [x, scale], f"{x}.q", axis=-1, block_size=width)
                quantized[x] = (f"{x}.q", scale, None)
            else:
                # Blocked QuantizeLinear takes a zero point of the scale's shape, not a scalar:
                # one per leading shape (usually one per graph, as every row is a token).
                key = leading.get(x, (x,))
                if key not in zero_points:
                    zero_points[key] = f"{x}.q_zero_point"
                    add("Shape", [scale], f"{x}.q_scale_shape")
                    add("Expand", ["q.zero_point", f"{x}.q_scale_shape"], zero_points[key])
                add("QuantizeLinear", [x, scale, zero_points[key]], f"{x}.q", axis=-1, block_size=width)
                quantized[x] = (f"{x}.q", scale, "q.zero_point")
        return quantized[x]

    for n in graph.node:
        weight = inits.get(n.input[1]) if n.op_type == "MatMul" else None
        if weight is None or len(weight.dims) != 2 or weight.data_type != TensorProto.FLOAT:
            nodes.append(n)  # everything else, products of two activations (attention) included
            continue
        q, row_scale, zero_point = quantize_rows(n.input[0], weight.dims[0])
        w_q, w_scale = quantize_weight(numpy_helper.to_array(weight), weight_max)
        name = n.name or n.output[0]
        new_inits += [numpy_helper.from_array(w_q, f"{name}.w_q"), numpy_helper.from_array(w_scale, f"{name}.w_scale")]
        inputs = [q, f"{name}.w_q", row_scale, f"{name}.w_scale"] + ([zero_point] if zero_point else [])
        add("MatMulIntegerToFloat", inputs, n.output[0], name=name, domain=MS_DOMAIN)
        uses[n.input[1]] -= 1  # the float weight goes when nothing else reads it (the embedding Gather may)

    del graph.node[:]
    graph.node.extend(nodes)
    kept = [i for i in graph.initializer if uses.get(i.name, 0) > 0]
    del graph.initializer[:]
    graph.initializer.extend(kept + new_inits)
    # The exported graphs use no operator whose meaning changed between opset 18 and 21.
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = max(opset.version, QUANT_OPSET)
    if not any(opset.domain == MS_DOMAIN for opset in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    onnx.save_model(model, str(dst))
    return dst


def to_fp16(src: Path, dst: Path) -> Path:
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(src))
    del model.graph.value_info[:]
    # LogSoftmax and everything computed from it stay float32, and so do the running scores
    # the step graph adds to it: the search adds log-probabilities up over many steps.
    float32_io = (contract.LOG_PROBS, contract.TOP_VALUES, contract.SCORES)
    keep = [v.name for v in (*model.graph.input, *model.graph.output) if v.name in float32_io]
    model = convert_float_to_float16(model, keep_io_types=keep, op_block_list=["LogSoftmax"],
                                     node_block_list=_downstream(model.graph, "LogSoftmax"))
    single_assignment(model.graph)
    onnx.save_model(model, str(dst))
    # onnxruntime checks the graph as it loads it: here, rather than first on a CUDA host
    import onnxruntime as ort

    ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    return dst


def single_assignment(graph) -> None:
    """Leave one node per output tensor and one value_info per name, and give every node its own name.

    onnxruntime's float16 converter before 1.31 inserts a Cast in front of every float32-only
    consumer of a float16 tensor, each with the same name and the same output: two consumers of
    one tensor gave a graph onnxruntime refuses to load ("two nodes with same node name"). That is
    how the step graph exported on a host with onnxruntime 1.30 failed on CUDA. Identical copies
    are dropped; two different nodes writing one tensor are an error; duplicate names of distinct
    nodes get a numbered suffix."""
    producer: dict[str, Any] = {}
    kept = []
    for node in graph.node:
        twin = next((producer[o] for o in node.output if o and o in producer), None)
        if twin is None:
            kept.append(node)
            producer.update({o: node for o in node.output if o})
        elif twin.SerializeToString(deterministic=True) != node.SerializeToString(deterministic=True):
            both = sorted(set(twin.output) & set(node.output))
            raise ValueError(f"nodes {twin.name!r} and {node.name!r} both write {both}")
    if len(kept) != len(graph.node):
        del graph.node[:]
        graph.node.extend(kept)
    seen_info: set[str] = set()
    infos = [v for v in graph.value_info if not (v.name in seen_info or seen_info.add(v.name))]
    if len(infos) != len(graph.value_info):
        del graph.value_info[:]
        graph.value_info.extend(infos)
    names: set[str] = set()
    for i, node in enumerate(graph.node):
        if node.name and node.name in names:
            node.name = f"{node.name}_{i}"
        names.add(node.name)


def _downstream(graph, op_type: str) -> list[str]:
    """Names of the nodes computed, directly or not, from the outputs of ``op_type`` nodes."""
    tainted = {o for n in graph.node if n.op_type == op_type for o in n.output}
    names: list[str] = []
    for node in graph.node:  # ONNX nodes are stored in topological order
        if node.op_type != op_type and tainted.intersection(node.input):
            tainted.update(node.output)
            names.append(node.name)
    return names
