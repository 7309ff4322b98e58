"""export/fuse.py: products over one input become one product, with the same values."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from export.fuse import fuse_shared_products
from export.quantize import to_int8

D = 8


def graph(biases: tuple[bool, ...], widths: tuple[int, ...], other_input: bool = False) -> onnx.ModelProto:
    """x (B, T, D) -> one output per product: x @ W_i (+ b_i), then Relu, so each product's
    result is read by a node after it. ``other_input``: one more product over another input."""
    rng = np.random.default_rng(0)
    nodes, inits, outputs = [], [], []
    for i, (bias, width) in enumerate(zip(biases, widths)):
        inits.append(numpy_helper.from_array(rng.normal(size=(D, width)).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", ["x", f"w{i}"], [f"p{i}"], name=f"proj{i}"))
        last = f"p{i}"
        if bias:
            inits.append(numpy_helper.from_array(rng.normal(size=width).astype(np.float32), f"b{i}"))
            nodes.append(helper.make_node("Add", [last, f"b{i}"], [f"s{i}"]))
            last = f"s{i}"
        nodes.append(helper.make_node("Relu", [last], [f"y{i}"]))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, ["B", "T", width]))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "T", D])]
    if other_input:
        inputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, ["B", "T", D]))
        inits.append(numpy_helper.from_array(rng.normal(size=(D, 3)).astype(np.float32), "wz"))
        nodes.append(helper.make_node("MatMul", ["z", "wz"], ["yz"]))
        outputs.append(helper.make_tensor_value_info("yz", TensorProto.FLOAT, ["B", "T", 3]))
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, initializer=inits),
                              opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def test_three_biased_products_become_one_product_add_and_split_with_the_same_values():
    model = graph((True, True, True), (5, 6, 7), other_input=True)
    x = np.random.default_rng(1).normal(size=(3, 4, D)).astype(np.float32)
    z = np.random.default_rng(2).normal(size=(3, 4, D)).astype(np.float32)
    before = run(model, {"x": x, "z": z})
    assert fuse_shared_products(model) == 1
    onnx.checker.check_model(model)
    assert ops(model) == ["MatMul", "Add", "Split", "Relu", "Relu", "Relu", "MatMul"]  # z's product alone: kept
    assert [i.name for i in model.graph.initializer if i.name.startswith("w") or i.name.startswith("b")] == ["wz"]
    after = run(model, {"x": x, "z": z})
    assert [a.shape for a in after] == [(3, 4, 5), (3, 4, 6), (3, 4, 7), (3, 4, 3)]
    for a, b in zip(after, before):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_products_without_bias_fuse_and_a_mix_or_a_lone_product_does_not():
    plain = graph((False, False), (4, 4))
    assert fuse_shared_products(plain) == 1 and ops(plain) == ["MatMul", "Split", "Relu", "Relu"]
    mixed = graph((True, False), (4, 4))
    assert fuse_shared_products(mixed) == 0 and ops(mixed) == ["MatMul", "Add", "Relu", "MatMul", "Relu"]
    alone = graph((True,), (4,))
    assert fuse_shared_products(alone) == 0 and ops(alone) == ["MatMul", "Add", "Relu"]


def test_int8_of_the_fused_graph_gives_the_same_bits_as_int8_of_the_separate_products(tmp_path):
    """quantize.py scales every weight column on its own: side by side, the columns keep their
    integers and scales, and the integer product is exact."""
    model = graph((True, True, True), (16, 16, 16))
    onnx.save_model(model, str(tmp_path / "separate.onnx"))
    fuse_shared_products(model)
    onnx.save_model(model, str(tmp_path / "fused.onnx"))
    for name in ("separate", "fused"):
        to_int8(tmp_path / f"{name}.onnx", tmp_path / f"{name}.int8.onnx")
    x = np.random.default_rng(3).normal(size=(5, 2, D)).astype(np.float32)
    separate = run(onnx.load(str(tmp_path / "separate.int8.onnx")), {"x": x})
    fused = onnx.load(str(tmp_path / "fused.int8.onnx"))
    assert ops(fused).count("MatMulIntegerToFloat") == 1
    for a, b in zip(run(fused, {"x": x}), separate):
        np.testing.assert_array_equal(a, b)


def test_exported_graphs_have_no_two_products_over_one_input(tiny_package):
    """nmt-export fuses every graph it writes: the encoder's query/key/value per layer and its
    cross-attention keys/values for all decoder layers, the decoder step's query/key/value."""
    from engine.package import ModelPackage

    package = ModelPackage.load(tiny_package)
    layers = package.dims.n_encoder_layers, package.dims.n_decoder_layers
    for name, splits in (("encoder.onnx", layers[0] + 1), ("decoder.onnx", layers[1]),
                         ("encoder.int8.onnx", layers[0] + 1), ("decoder.int8.onnx", layers[1])):
        model = onnx.load(str(tiny_package / name))
        inits = {i.name for i in model.graph.initializer}
        readers = [n.input[0] for n in model.graph.node
                   if n.op_type in ("MatMul", "MatMulIntegerToFloat") and n.input[1] in inits]
        assert len(readers) == len(set(readers)), name
        assert ops(model).count("Split") == splits, name
