"""Graph variants: int8 for the CPU, fp16 for CUDA.

int8 is onnxruntime's dynamic quantization: weights of the matrix multiplications are
stored as int8 per output channel, activations are quantized on the fly. fp16 converts
weights and the float inputs/outputs (cross and self caches) to half precision (the
log-probabilities stay float32),
so the cache a CUDA server keeps on the device takes half the memory. The masks are
applied as -1e4, which is finite in fp16.
"""

from __future__ import annotations

from pathlib import Path

from export import contract


def _prepare_for_quantization(src: Path, dst: Path) -> Path:
    """A copy the quantizer handles correctly.

    - The exporter's intermediate shape annotations are dropped: some conflict with the
      shape inference the quantizer runs.
    - Initializers shared by several nodes are untied, one copy per consumer. The shared
      embedding feeds both the input Gather and the output projection's Transpose; the
      quantizer folds that Transpose into the initializer in place, which would silently
      transpose the Gather's table too.
    """
    import onnx

    model = onnx.load(str(src))
    del model.graph.value_info[:]
    inits = {i.name: i for i in model.graph.initializer}
    seen: set[str] = set()
    for node in model.graph.node:
        for k, name in enumerate(node.input):
            if name not in inits:
                continue
            if name in seen:
                copy = onnx.TensorProto()
                copy.CopyFrom(inits[name])
                copy.name = f"{name}__{node.name or k}"
                model.graph.initializer.append(copy)
                node.input[k] = copy.name
            seen.add(name)
    onnx.save_model(model, str(dst))
    return dst


def to_int8(src: Path, dst: Path) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    plain = _prepare_for_quantization(src, dst.with_suffix(".plain.onnx"))
    try:
        quantize_dynamic(str(plain), str(dst), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul", "Gemm"])
    finally:
        plain.unlink(missing_ok=True)
    return dst


def to_fp16(src: Path, dst: Path) -> Path:
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(src))
    del model.graph.value_info[:]
    # LogSoftmax and its output stay float32: the search adds log-probabilities up over many steps.
    keep = [o.name for o in model.graph.output if o.name == contract.LOG_PROBS]
    model = convert_float_to_float16(model, keep_io_types=keep, op_block_list=["LogSoftmax"])
    onnx.save_model(model, str(dst))
    return dst
