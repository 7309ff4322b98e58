"""Levers against the int8 gap on VNNI/AMX CPUs, each beside what the engine does now.

    python -m bench.studies.cpu_levers --package packages/default [--parts selection,nbits,threads,grouped]

- ``selection``: beam search's candidates, ``--jobs`` jobs x ``--beam`` rows over the vocabulary:
  LogSoftmax then ``best_candidates`` per job (engine/decoding.py, what the engine does) against
  LogSoftmax + TopK(2 x beam) per row in onnxruntime (selection inside the step graph).
- ``nbits``: one linear layer (d_model x d_model, d_model x vocabulary) on M rows: our int8 (a
  per-row activation scale, QuantizeLinear, MatMulIntegerToFloat, 8-bit weights: export/quantize.py)
  against onnxruntime's MatMulNBits with 8-bit weights (blocks of 32 along K, int8 compute), and
  whether each row's output is the same bits alone as in the batch (int8's batch invariance).
- ``threads``: the package's decoder step at 1 to 128 rows, per variant, and the products alone
  (MatMul fp32, MatMulIntegerToFloat), on 1 thread and on 2.
- ``grouped``: the cross-attention products of ``--jobs`` sources with ``--beam`` rows each: one
  one-row product per (row, head), the step graph's broadcast layout, against the rows of a
  source in one product; time, and whether the outputs are the same bits.

Random values; each figure is the best of ``--rounds`` alternating rounds (ms per call).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

PARTS = ("selection", "nbits", "threads", "grouped")
ROWS = (1, 4, 32, 128)
NBITS_BLOCK = 32  # MatMulNBits' block along K (a power of 2 that divides d_model)


def best_ms(runs: dict[str, Callable[[], Any]], rounds: int, repeats: int) -> dict[str, float]:
    """Milliseconds per call of each run, the best of ``rounds`` alternating rounds."""
    from bench.studies.step_cost import best_per_call

    return {name: 1000 * seconds for name, seconds in best_per_call(runs, rounds, repeats).items()}


def session(model: Any, threads: int, library: Path | None = None) -> Any:
    """A CPU session of an in-memory model; ``library``: a custom operator library it needs."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.log_severity_level = 3
    if library is not None:
        opts.register_custom_ops_library(str(library))
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def one_node_model(nodes: list, inputs: list, outputs: list, inits: list) -> Any:
    from onnx import helper

    from export.quantize import MS_DOMAIN, QUANT_OPSET

    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", QUANT_OPSET),
                                                   helper.make_opsetid(MS_DOMAIN, 1)])


def selection(vocab: int, jobs: int, beam: int, rounds: int) -> None:
    from onnx import TensorProto, helper, numpy_helper

    from engine.decoding import best_candidates

    rows, k = jobs * beam, 2 * beam
    logits = np.random.default_rng(0).standard_normal((rows, vocab), dtype=np.float32) * 3
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["R", vocab])
    soft = helper.make_node("LogSoftmax", ["x"], ["l"], axis=-1)
    plain = session(one_node_model([soft], [x], [helper.make_tensor_value_info("l", TensorProto.FLOAT, None)], []), 1)
    topk = session(one_node_model(
        [soft, helper.make_node("TopK", ["l", "k"], ["v", "i"], axis=-1, largest=1, sorted=1)], [x],
        [helper.make_tensor_value_info(n, t, None) for n, t in (("v", TensorProto.FLOAT), ("i", TensorProto.INT64))],
        [numpy_helper.from_array(np.array([k], np.int64), "k")]), 1)
    scores = np.zeros((jobs, beam), np.float32)

    def ours() -> None:
        logp = plain.run(None, {"x": logits})[0]
        for j in range(jobs):
            best_candidates((scores[j][:, None] + logp[j * beam:(j + 1) * beam]).reshape(-1), k)

    ms = best_ms({"logsoftmax": partial(plain.run, None, {"x": logits}), "ours": ours,
                  "topk": partial(topk.run, None, {"x": logits})}, rounds, 20)
    print(f"selection, {jobs} jobs x {beam} beams over {vocab}: LogSoftmax alone {ms['logsoftmax']:.3f} ms; "
          f"then best_candidates per job (the engine) {ms['ours']:.3f} ms; LogSoftmax + TopK({k}) in onnxruntime "
          f"{ms['topk']:.3f} ms ({ms['topk'] / ms['ours']:.2f}x the engine's)")


def int8_layer(w: np.ndarray, nbits: bool) -> Any:
    """One linear layer: as our int8w8 graphs compute it (export/quantize.py run on a float
    MatMul), or MatMulNBits with 8-bit blocks."""
    import tempfile

    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from export.quantize import MS_DOMAIN, SIGNED_ZERO_POINT, WEIGHT_MAX_EXACT, to_int8

    k, n = w.shape
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", k])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", n])
    if not nbits:
        fp32 = one_node_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [x], [y],
                              [numpy_helper.from_array(w, "w")])
        with tempfile.TemporaryDirectory() as tmp:
            onnx.save_model(fp32, f"{tmp}/fp32.onnx")
            return onnx.load(str(to_int8(Path(f"{tmp}/fp32.onnx"), Path(f"{tmp}/int8.onnx"), WEIGHT_MAX_EXACT)))
    blocks = w.T.reshape(n, k // NBITS_BLOCK, NBITS_BLOCK)
    amax = np.abs(blocks).max(axis=2)
    scale = np.where(amax > 0, amax / WEIGHT_MAX_EXACT, 1).astype(np.float32)
    q = np.clip(np.round(blocks / scale[:, :, None]), -WEIGHT_MAX_EXACT, WEIGHT_MAX_EXACT) + SIGNED_ZERO_POINT
    inits = [numpy_helper.from_array(q.astype(np.uint8), "w"), numpy_helper.from_array(scale.reshape(-1), "s")]
    node = helper.make_node("MatMulNBits", ["x", "w", "s"], ["y"], domain=MS_DOMAIN, K=k, N=n, bits=8,
                            block_size=NBITS_BLOCK, accuracy_level=4)
    return one_node_model([node], [x], [y], inits)


def nbits(d_model: int, vocab: int, rounds: int) -> None:
    rng = np.random.default_rng(0)
    print(f"nbits: one linear layer, our int8 (per-row scale, MatMulIntegerToFloat) vs MatMulNBits 8-bit "
          f"(blocks of {NBITS_BLOCK}, int8 compute), 1 thread")
    for n in (d_model, vocab):
        w = rng.standard_normal((d_model, n), dtype=np.float32) * 0.05
        sessions = {"ours": session(int8_layer(w, False), 1), "nbits": session(int8_layer(w, True), 1)}
        for m in ROWS:
            x = rng.standard_normal((m, d_model), dtype=np.float32)
            ms = best_ms({name: partial(s.run, None, {"x": x}) for name, s in sessions.items()}, rounds, 20)
            same = {}
            for name, s in sessions.items():  # each row alone, and the first rows, against the whole batch
                full = s.run(None, {"x": x})[0]
                alone = np.concatenate([s.run(None, {"x": x[i:i + 1]})[0] for i in range(m)])
                head = s.run(None, {"x": x[:max(1, m - 3)]})[0]
                same[name] = np.array_equal(full, alone) and np.array_equal(full[:len(head)], head)
            print(f"  {d_model} x {n}, {m:3d} rows: ours {ms['ours']:.3f} ms, MatMulNBits {ms['nbits']:.3f} ms "
                  f"({ms['nbits'] / ms['ours']:.2f}x ours); rows the same bits alone: ours {same['ours']}, "
                  f"MatMulNBits {same['nbits']}")


def threads(package: Any, rounds: int) -> None:
    from onnx import TensorProto, helper, numpy_helper

    from bench.studies.profile_decode import step_feeds
    from engine.cpu import int8_variant
    from engine.runtime import Runtime, RuntimeOptions
    from export.quantize import MS_DOMAIN, WEIGHT_MAX_EXACT, quantize_weight

    dims = package.dims
    print("threads: the decoder step (24 cached slots, source 25) and single products, 1 thread vs 2")
    for variant in ("fp32", int8_variant(package.variants) or "int8"):
        if variant not in package.variants:
            continue
        runtimes = {t: Runtime(package, RuntimeOptions(device="cpu", threads=t, variant=variant)) for t in (1, 2)}
        for rows in ROWS:
            feeds = step_feeds(dims, rows, 24, 25)
            ms = best_ms({t: partial(rt.decoder.run, None, feeds) for t, rt in runtimes.items()}, rounds, 10)
            print(f"  step {variant:<7} {rows:3d} rows: 1 thread {ms[1]:.3f} ms, 2 threads {ms[2]:.3f} ms "
                  f"({ms[1] / ms[2]:.2f}x)")
    rng = np.random.default_rng(0)
    for k, n in ((dims.d_model, dims.d_model), (dims.d_model, dims.vocab_size)):
        w = rng.standard_normal((k, n), dtype=np.float32) * 0.05
        w_q, w_scale = quantize_weight(w, WEIGHT_MAX_EXACT)
        fp32 = one_node_model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
        int8 = one_node_model(
            [helper.make_node("MatMulIntegerToFloat", ["q", "w", "s", "ws"], ["y"], domain=MS_DOMAIN)],
            [helper.make_tensor_value_info("q", TensorProto.UINT8, ["M", k]),
             helper.make_tensor_value_info("s", TensorProto.FLOAT, ["M", 1])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(w_q, "w"), numpy_helper.from_array(w_scale, "ws")])
        for name, model in (("MatMul fp32", fp32), ("MatMulIntegerToFloat", int8)):
            sessions = {t: session(model, t) for t in (1, 2)}
            for m in (1, 32):
                feeds = ({"x": rng.standard_normal((m, k), dtype=np.float32)} if name.startswith("MatMul ") else
                         {"q": rng.integers(0, 256, (m, k), dtype=np.uint8), "s": np.full((m, 1), 0.01, np.float32)})
                ms = best_ms({t: partial(s.run, None, feeds) for t, s in sessions.items()}, rounds, 20)
                print(f"  {name:<20} {k} x {n}, {m:2d} rows: 1 thread {ms[1]:.3f} ms, 2 threads {ms[2]:.3f} ms "
                      f"({ms[1] / ms[2]:.2f}x)")


def grouped(package: Any, jobs: int, beam: int, source: int, rounds: int) -> None:
    from onnx import TensorProto, helper

    heads, d_head = package.dims.n_heads, package.dims.d_head

    def matmul(a: list, b: list) -> Any:
        return session(one_node_model(
            [helper.make_node("MatMul", ["a", "b"], ["y"])],
            [helper.make_tensor_value_info("a", TensorProto.FLOAT, a),
             helper.make_tensor_value_info("b", TensorProto.FLOAT, b)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], []), 1)

    per_row = matmul(["C", "G", "H", "one", "K"], ["C", "one", "H", "K", "N"])  # the step graph's broadcast
    together = matmul(["C", "H", "G", "K"], ["C", "H", "K", "N"])
    rng = np.random.default_rng(0)
    print(f"grouped: cross-attention products, {jobs} sources x {beam} rows, source {source}, 1 thread")
    for name, (k, n) in (("scores (q k)", (d_head, source)), ("values (p v)", (source, d_head))):
        a = rng.standard_normal((jobs, beam, heads, 1, k), dtype=np.float32)
        b = rng.standard_normal((jobs, 1, heads, k, n), dtype=np.float32)
        a_g, b_g = np.ascontiguousarray(a[:, :, :, 0].transpose(0, 2, 1, 3)), np.ascontiguousarray(b[:, 0])
        ms = best_ms({"per_row": partial(per_row.run, None, {"a": a, "b": b}),
                      "together": partial(together.run, None, {"a": a_g, "b": b_g})}, rounds, 20)
        y = per_row.run(None, {"a": a, "b": b})[0][:, :, :, 0]
        y_g = together.run(None, {"a": a_g, "b": b_g})[0].transpose(0, 2, 1, 3)
        print(f"  {name}: a product per row {ms['per_row']:.3f} ms, a source's rows together {ms['together']:.3f} ms "
              f"({ms['per_row'] / ms['together']:.2f}x); same bits {np.array_equal(y, y_g)}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--package", type=Path, required=True)
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    p.add_argument("--jobs", type=int, default=32, help="beam search jobs (selection, grouped)")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--source", type=int, default=25, help="source positions (grouped)")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    parts = args.parts.split(",")
    unknown = [x for x in parts if x not in PARTS]
    if unknown:
        p.error(f"--parts {','.join(unknown)}: not one of {', '.join(PARTS)}")

    from engine.package import ModelPackage

    package = ModelPackage.load(args.package)
    dims = package.dims
    if "selection" in parts:
        selection(dims.vocab_size, args.jobs, args.beam, args.rounds)
    if "nbits" in parts:
        if dims.d_model % NBITS_BLOCK:
            p.error(f"d_model {dims.d_model} is not a multiple of MatMulNBits' block {NBITS_BLOCK}")
        nbits(dims.d_model, dims.vocab_size, args.rounds)
    if "threads" in parts:
        threads(package, args.rounds)
    if "grouped" in parts:
        grouped(package, args.jobs, args.beam, args.source, args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
