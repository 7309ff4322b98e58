"""int8 quantization: the per-row scheme exactly, and a text's output independent of its batch."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.decoding import DecodeOptions, Job, decode_all, whole_vectors
from engine.defaults import default_max_len
from engine.package import ModelPackage
from engine.runtime import CPU_DISABLED_FUSIONS, Runtime, RuntimeOptions
from export.quantize import SIGNED_MAX, TINY_SCALE, UNSIGNED_MAX, quantize_weight, single_assignment, to_fp16, to_int8
from training import checkpoint as ckpt_io
from training.data import clean, load_bible, split_of

K, F = 16, 24  # the little graph's width and hidden width


def ffn_graph(path: Path, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """x -> MatMul W1 + b1 -> Relu -> MatMul W2 + b2 (the shape of a Transformer FFN), opset
    18 as exported; its weights by name."""
    w = {"w1": rng.standard_normal((K, F)), "b1": rng.standard_normal(F), "w2": rng.standard_normal((F, K)),
         "b2": rng.standard_normal(K)}
    w = {k: v.astype(np.float32) for k, v in w.items()}
    w["w1"][:, 0] = 1.0  # a column quantized to the largest weight everywhere: the worst case for int16 sums
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["o"], name="fc2"), helper.make_node("Add", ["o", "b2"], ["y"])]
    graph = helper.make_graph(nodes, "ffn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "T", K])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "T", K])],
                              [numpy_helper.from_array(v, k) for k, v in w.items()])
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return w


def session(path: Path) -> ort.InferenceSession:
    """Optimised as the server's runtime does (fusions included: they must keep the scheme)."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"],
                                disabled_optimizers=CPU_DISABLED_FUSIONS)


def reference_linear(x: np.ndarray, w: np.ndarray, b: np.ndarray, unsigned: bool) -> np.ndarray:
    """The scheme in numpy: one scale per row, the integer product exact (no int16 saturation)."""
    top = np.float32(1 / UNSIGNED_MAX if unsigned else 1 / SIGNED_MAX)
    scale = np.maximum(np.abs(x).max(axis=-1, keepdims=True) * top, np.float32(TINY_SCALE))
    q = np.round(x / scale)  # half to even, as QuantizeLinear
    w_q, w_scale = quantize_weight(w)
    acc = q.astype(np.int64) @ w_q.astype(np.int64)
    return (acc * w_scale.astype(np.float64) * scale + b).astype(np.float32)


def test_int8_products_are_the_per_row_scheme_in_any_batch(tmp_path):
    rng = np.random.default_rng(0)
    w = ffn_graph(tmp_path / "ffn.onnx", rng)
    to_int8(tmp_path / "ffn.onnx", tmp_path / "ffn.int8.onnx")
    ops = [n.op_type for n in onnx.load(str(tmp_path / "ffn.int8.onnx")).graph.node]
    assert ops.count("MatMulIntegerToFloat") == 2 and "MatMul" not in ops
    x = rng.standard_normal((4, 3, K)).astype(np.float32) * np.array([0.01, 1, 30, 1000], np.float32)[:, None, None]
    x[1, 0] = 0.0  # an all-zero row: its products are exactly the bias
    x[2, 1] = 7.0  # every element at the row's maximum: uint8 255 against weights of 63 (no saturation)
    y = session(tmp_path / "ffn.int8.onnx").run(None, {"x": x})[0]
    hidden = np.maximum(reference_linear(x, w["w1"], w["b1"], unsigned=False), 0)
    want = reference_linear(hidden, w["w2"], w["b2"], unsigned=True)
    assert np.isfinite(y).all() and np.abs(y - want).max() <= 1e-5 * np.abs(want).max()
    # Each row alone gives the bits it gives in the batch.
    sess = session(tmp_path / "ffn.int8.onnx")
    alone = np.stack([np.stack([sess.run(None, {"x": x[i:i + 1, t:t + 1]})[0][0, 0] for t in range(3)])
                      for i in range(4)])
    assert np.array_equal(alone, y)


def _texts() -> list[tuple[str, str]]:
    """(text, target language): verses of both languages of very different lengths, and text
    far from the training data (digits, capitals, one repeated word), whose activations
    differ most from the rest of a batch."""
    verses = {code: [clean(t) for k, t in sorted(load_bible(code).items()) if split_of(k) == "dev"]
              for code in ("4", "e")}
    texts = [(verses["4"][i], "de") for i in (0, 3, 7, 12, 20, 33)]
    texts += [(verses["e"][i], "en") for i in (1, 4, 9, 15, 27)]
    texts += [("Jesus wept.", "de"), ("Amen.", "en"), ("1 2 3 4 5 6 7 8 9 10 11 12", "de"),
              ("AND THE WORD WAS GOD", "de"), ("und und und und und und und und", "en"),
              ("He said,", "de"), ("Qqqq xxzz !!! ??? ;;; ---", "en")]
    return texts


def _decode(rt: Runtime, sources: list[list[int]]) -> list[list[int]]:
    """Greedy tokens of the sources decoded together in one batch, by the server's loop."""
    ids = rt.package.special_ids
    jobs = [Job(s, DecodeOptions(), max_len=default_max_len(len(s), rt.package.max_target_tokens),
                bos=ids["bos"], eos=ids["eos"], pad=ids["pad"]) for s in sources]
    return [nbest[0].tokens for nbest in decode_all(rt, jobs)]


@pytest.mark.parametrize("variant", ["int8", "int8w8"])  # 7- and 8-bit weights, on whatever CPU runs this
def test_int8_output_does_not_depend_on_the_rest_of_the_batch(tiny_package, tiny_checkpoint, variant):
    """A text decoded inside random mixes of other texts gives exactly the tokens it gets
    alone (the per-tensor activation scale of the old quantizer broke this)."""
    tok = ckpt_io.load_tokenizer(ckpt_io.load(tiny_checkpoint))
    sources = [tok.encode_source(text, target) for text, target in _texts()]
    rt = Runtime(ModelPackage.load(tiny_package), RuntimeOptions("cpu", 1, variant=variant))
    assert rt.variant == variant
    alone = [_decode(rt, [s])[0] for s in sources]
    changed = []
    for seed in range(6):
        rng = random.Random(seed)
        mix = rng.sample(range(len(sources)), rng.randint(2, len(sources)))
        for i, tokens in zip(mix, _decode(rt, [sources[i] for i in mix])):
            if tokens != alone[i]:
                changed.append((seed, i))
    assert not changed, f"(seed, text) decoded differently inside a batch than alone: {changed}"


def whole_sources(mask: np.ndarray, keys: list[np.ndarray], values: list[np.ndarray]
                  ) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """A step's source mask (B, S) and cross keys (B, H, Dh, S) / values (B, H, S, Dh), widened
    with zeros (masked) to a whole number of vectors, as Batch lays them out."""
    pad = whole_vectors(mask.shape[1]) - mask.shape[1]
    return (np.pad(mask, ((0, 0), (0, pad))), [np.pad(k, ((0, 0), (0, 0), (0, 0), (0, pad))) for k in keys],
            [np.pad(v, ((0, 0), (0, 0), (0, pad), (0, 0))) for v in values])


@pytest.mark.parametrize("variant", ["int8", "int8w8"])
def test_int8_encoder_and_decoder_rows_are_bit_identical_in_any_batch(tiny_package, tiny_checkpoint, variant):
    """Each row's encoder outputs (alone and unpadded vs padded in a batch) and decoder-step
    outputs are the same bits. The step reads the sources over whole vectors of columns, zeros
    and masked past each source, as the running batch lays them out (engine/decoding.py,
    VECTOR_COLUMNS): over a ragged width the attention's last partial vector takes other
    instructions, and on an Intel Xeon with AMX a row's log-probabilities then moved in the last
    bit. (fp32 is not held to this: its float products of one row and of many rows take
    different kernels, which differ in the last bits of the decoder step.)"""
    tok = ckpt_io.load_tokenizer(ckpt_io.load(tiny_checkpoint))
    sources = [tok.encode_source(text, target) for text, target in _texts()]
    rt = Runtime(ModelPackage.load(tiny_package), RuntimeOptions("cpu", 1, variant=variant))
    width = max(map(len, sources))
    src = np.zeros((len(sources), width), np.int64)  # right-padded with the pad id 0
    for i, s in enumerate(sources):
        src[i, :len(s)] = s
    cross_k, cross_v = rt.encode(src)
    layers = range(rt.n_layers)
    rows = len(sources)
    tokens = np.arange(10, 10 + rows, dtype=np.int64)[:, None]  # a different input token per row
    log_probs, new_k, new_v, _ = rt.step(tokens, np.zeros((rows, 1), np.int64), np.zeros((rows, 0), bool),
                                         *whole_sources(src != 0, cross_k, cross_v),
                                         [rt.cache(rows, 0, keys=True) for _ in layers],
                                         [rt.cache(rows, 0) for _ in layers])
    for i, s in enumerate(sources):
        one = np.array([s], np.int64)  # alone and unpadded
        k1, v1 = rt.encode(one)
        n = len(s)
        assert all(np.array_equal(a[0], b[i, ..., :n]) for a, b in zip(k1, cross_k))  # keys (H, Dh, S)
        assert all(np.array_equal(a[0], b[i, :, :n]) for a, b in zip(v1, cross_v))  # values (H, S, Dh)
        empty_k, empty_v = [rt.cache(1, 0, keys=True) for _ in layers], [rt.cache(1, 0) for _ in layers]
        lp1, nk1, nv1, _ = rt.step(tokens[i:i + 1], np.zeros((1, 1), np.int64), np.zeros((1, 0), bool),
                                   *whole_sources(one != 0, k1, v1), empty_k, empty_v)
        assert np.array_equal(lp1[0], log_probs[i])
        assert all(np.array_equal(a[0], b[i]) for a, b in zip(nk1 + nv1, new_k + new_v))


@pytest.mark.parametrize("variant", ["fp32", "int8", "int8w8"])
def test_rows_sharing_a_source_get_the_bits_of_their_own_copy(tiny_package, tiny_checkpoint, variant):
    """A beam-search job's rows read one copy of their source's cross keys/values (C sources for
    B rows, engine/contract.py). Each row still multiplies its own query by the keys, with the same
    kernel, so its outputs are the bits it gets from a copy of its own, the layout of a batch
    that mixes beam sizes: a text's tokens do not depend on its neighbours' beam sizes."""
    tok = ckpt_io.load_tokenizer(ckpt_io.load(tiny_checkpoint))
    sources = [tok.encode_source(text, target) for text, target in _texts()[:3]]
    rt = Runtime(ModelPackage.load(tiny_package), RuntimeOptions("cpu", 1, variant=variant))
    src = np.zeros((len(sources), max(map(len, sources))), np.int64)
    for i, s in enumerate(sources):
        src[i, :len(s)] = s
    mask, cross_k, cross_v = whole_sources(src != 0, *rt.encode(src))
    group, rows = 4, 4 * len(sources)
    rng = np.random.default_rng(0)
    slots = whole_vectors(3)
    past_k = [rng.standard_normal(rt.cache(rows, slots, keys=True).shape).astype(np.float32) for _ in cross_k]
    past_v = [rng.standard_normal(rt.cache(rows, slots).shape).astype(np.float32) for _ in cross_v]
    past_mask = np.tile(np.arange(slots) < 3, (rows, 1))  # 3 cached tokens per row
    step = (np.arange(10, 10 + rows, dtype=np.int64)[:, None], np.full((rows, 1), 3, np.int64), past_mask,
            np.repeat(mask, group, axis=0))
    shared = rt.step(*step, cross_k, cross_v, past_k, past_v)
    tiled = rt.step(*step, *([np.repeat(c, group, axis=0) for c in kv] for kv in (cross_k, cross_v)), past_k, past_v)
    assert shared[0].shape == (rows, rt.package.dims.vocab_size)
    assert np.array_equal(shared[0], tiled[0]) and np.array_equal(shared[3], tiled[3])
    assert all(np.array_equal(a, b) for a, b in zip(shared[1] + shared[2], tiled[1] + tiled[2]))


def _cast_twice_graph() -> onnx.ModelProto:
    """What onnxruntime's float16 converter before 1.31 made of a float16 tensor read by two float32-only
    nodes: one Cast per reader, both with the same name, output and value_info."""
    cast = dict(inputs=["x"], outputs=["x_cast_to_fp32"], to=TensorProto.FLOAT, name="x_cast_to_fp32_node")
    nodes = [helper.make_node("Cast", **cast),
             helper.make_node("LogSoftmax", ["x_cast_to_fp32"], ["a"], axis=-1, name="first"),
             helper.make_node("Cast", **cast),
             helper.make_node("Exp", ["x_cast_to_fp32"], ["b"], name="second")]
    info = helper.make_tensor_value_info("x_cast_to_fp32", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 3])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("a", "b")],
                              value_info=[info, info])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_a_cast_inserted_once_per_reader_becomes_one_node_onnxruntime_loads(tmp_path):
    model = _cast_twice_graph()
    with pytest.raises(Exception, match="same node name"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    single_assignment(model.graph)
    assert [n.name for n in model.graph.node] == ["x_cast_to_fp32_node", "first", "second"]
    assert [v.name for v in model.graph.value_info] == ["x_cast_to_fp32"]
    x = np.array([[0.0, 1.0, 2.0], [3.0, -1.0, 0.5]], dtype=np.float16)
    a, b = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    x32 = x.astype(np.float32)
    np.testing.assert_allclose(b, np.exp(x32), rtol=1e-6)
    np.testing.assert_allclose(a, x32 - np.log(np.exp(x32).sum(-1, keepdims=True)), atol=1e-6)


def test_two_different_nodes_writing_one_tensor_are_refused_and_twin_names_renamed():
    model = _cast_twice_graph()
    model.graph.node[2].op_type = "Identity"
    del model.graph.node[2].attribute[:]
    with pytest.raises(ValueError, match=r"nodes 'x_cast_to_fp32_node' and 'x_cast_to_fp32_node' both write "
                                         r"\['x_cast_to_fp32'\]"):
        single_assignment(model.graph)
    model = _cast_twice_graph()
    model.graph.node[3].name = "first"
    single_assignment(model.graph)
    assert [n.name for n in model.graph.node] == ["x_cast_to_fp32_node", "first", "first_2"]


def test_fp16_graph_of_a_tensor_read_twice_after_log_softmax_loads_and_keeps_float32_outputs(tmp_path):
    """The step graph's shape: a float16 tensor read by LogSoftmax and by a node computed from it."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["logits"], name="proj"),
             helper.make_node("LogSoftmax", ["logits"], ["log_softmax"], axis=-1, name="log_softmax"),
             helper.make_node("ReduceMax", ["logits"], ["peak"], keepdims=0, name="peak_of_logits"),
             helper.make_node("Add", ["log_softmax", "scores"], ["log_probs"], name="add_scores")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                                           helper.make_tensor_value_info("scores", TensorProto.FLOAT, [2, 1])],
                              [helper.make_tensor_value_info("log_probs", TensorProto.FLOAT, [2, 4]),
                               helper.make_tensor_value_info("peak", TensorProto.FLOAT, [2])], initializer=[w])
    src, dst = tmp_path / "g.onnx", tmp_path / "g.fp16.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(src))
    to_fp16(src, dst)
    half = onnx.load(str(dst))
    names = [n.name for n in half.graph.node]
    assert len(names) == len(set(names))
    outputs = [o for n in half.graph.node for o in n.output]
    assert len(outputs) == len(set(outputs))
    x = np.array([[0.5, -1.0, 2.0], [1.0, 0.0, -0.5]], dtype=np.float16)
    scores = np.array([[0.0], [-1.0]], dtype=np.float32)  # the running scores stay float32
    session = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    assert {o.name: o.type for o in session.get_outputs()}["log_probs"] == "tensor(float)"
    got = session.run(["log_probs"], {"x": x, "scores": scores})
    logits = x.astype(np.float32) @ numpy_helper.to_array(w)
    want = logits - np.log(np.exp(logits).sum(-1, keepdims=True)) + scores
    np.testing.assert_allclose(got[0], want, atol=2e-2)
