"""Would compiled operators of our own pay? One int8w8 linear layer as one custom operator.

    python -m bench.studies.fused_linear --package packages/default [--threads 1] [--ort-include DIR]

Our int8w8 graphs compute a linear layer as a chain of onnxruntime operators (export/quantize.py):
Abs, ReduceMax, Mul, Max, QuantizeLinear (each row of the activations on its own scale), then
MatMulIntegerToFloat and the bias Add. This study compiles bench/studies/fused_ops.cc, the same
computation as one custom operator (AVX-512 VNNI; large products split over the session's threads),
loads it into the installed onnxruntime and times both, side by side in alternating rounds, for each
product shape of the package's decoder step (d_model x d_model, d_model x d_ff, d_ff x d_model,
d_model x vocabulary, as its fp32 graph has them; every one with a bias here) at 1, 4, 32 and 128
rows; it also checks that both agree and that each row of the fused output is the same bits alone as
in the batch (int8's batch invariance). Rows are quantized as signed throughout (the graphs quantize
Relu outputs as unsigned, at the same cost).

It needs a C++ compiler (``g++``), a CPU with AVX-512 VNNI, and onnxruntime's C/C++ headers,
which the PyPI wheel does not ship: Debian 13 packages them (``libonnxruntime-dev``, headers in
/usr/include/onnxruntime; on an older Debian ``apt-get download`` it from Debian 13 and unpack it
with ``dpkg-deb -x``). onnxruntime's C API is versioned, so a library built against the 1.21
headers loads into a newer runtime. Pass the directory that holds ``onnxruntime_c_api.h`` as
``--ort-include`` or ``ORT_INCLUDE``. Without one of the three it says which is missing and
exits 2.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

SOURCE = Path(__file__).with_name("fused_ops.cc")
DOMAIN = "nmt.study"
OP = "FusedLinearInt8"
HEADER = "onnxruntime_lite_custom_op.h"
DEFAULT_INCLUDES = (Path("/usr/include/onnxruntime"), Path("/usr/local/include/onnxruntime"))
ROWS = (1, 4, 32, 128)
BLOCK = 16  # the kernel's column block (and row quantization's vector width): K and N multiples of it
CXXFLAGS = ["-O3", "-std=c++17", "-shared", "-fPIC", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni"]


def find_include(explicit: Path | None) -> Path | None:
    """The directory holding onnxruntime's headers: ``explicit``, else ORT_INCLUDE, else Debian's place."""
    if explicit:
        candidates = [explicit]
    else:
        from_env = os.environ.get("ORT_INCLUDE")
        candidates = ([Path(from_env)] if from_env else []) + list(DEFAULT_INCLUDES)
    return next((c for c in candidates if (c / HEADER).is_file()), None)


def missing(include: Path | None, cpu_flags: set[str]) -> list[str]:
    """What this machine lacks to build and run the operator, in words (empty: nothing)."""
    why = []
    if shutil.which("g++") is None:
        why.append("no C++ compiler (g++)")
    if include is None:
        why.append(f"no onnxruntime headers ({HEADER}): pass --ort-include or set ORT_INCLUDE")
    if "avx512_vnni" not in cpu_flags:
        why.append("no AVX-512 VNNI on this CPU")
    return why


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


def buildable(p: argparse.ArgumentParser, study: str, sizes: set[int], explicit: Path | None) -> Path:
    """The headers' directory once the kernels can take these sizes and this machine can build and
    run them; otherwise ``p`` refuses the sizes, or exits 2 naming what is missing."""
    odd = sorted(s for s in sizes if s % BLOCK)
    if odd:
        p.error(f"the kernels need sizes that are multiples of {BLOCK}; this model has {odd}")
    include = find_include(explicit)
    why = missing(include, cpu_flags())
    if why:
        p.exit(2, f"{study}: cannot build the operators here: {'; '.join(why)}\n")
    assert include is not None  # missing() named it otherwise
    return include


def build(include: Path, out_dir: Path) -> Path:
    """Compile the operator library (bench/studies/fused_ops.cc) into ``out_dir``."""
    library = out_dir / "libfused_ops.so"
    subprocess.run(["g++", *CXXFLAGS, f"-I{include}", str(SOURCE), "-o", str(library)], check=True)
    return library


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
    """A model of these nodes, with the opsets our int8 graphs use (ONNX's and onnxruntime's own)."""
    from onnx import helper

    from export.quantize import MS_DOMAIN, QUANT_OPSET

    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", QUANT_OPSET),
                                                   helper.make_opsetid(MS_DOMAIN, 1)])


def pack(w_q: np.ndarray) -> np.ndarray:
    """(K, N) int8 -> the kernel's layout [N / 16][K / 4][16 columns][4 rows of K], flat: element
    (k, n) lands at ((n // 16) * (K // 4) + k // 4) * 64 + (n % 16) * 4 + k % 4."""
    k, n = w_q.shape
    return np.ascontiguousarray(w_q.reshape(k // 4, 4, n // BLOCK, BLOCK).transpose(2, 0, 3, 1)).reshape(-1)


def int8_product(weight: np.ndarray, bias: np.ndarray | None) -> list[np.ndarray]:
    """A (K, N) float weight as the operators take it: packed 8-bit weights, column scales, the
    signed rows' zero-point share (128 x column sums) and the bias (zeros when there is none)."""
    from export.quantize import SIGNED_ZERO_POINT, WEIGHT_MAX_EXACT, quantize_weight

    w_q, w_scale = quantize_weight(weight.astype(np.float32), WEIGHT_MAX_EXACT)
    colsum = (SIGNED_ZERO_POINT * w_q.astype(np.int32).sum(axis=0)).astype(np.int32)
    b = np.zeros(weight.shape[1], np.float32) if bias is None else bias.astype(np.float32)
    return [pack(w_q), w_scale, colsum, b]


def chain_model(w: np.ndarray, b: np.ndarray, weight_max: int) -> Any:
    """The layer y = x w + b as our int8 graphs compute it: export/quantize.py run on a float
    MatMul + Add, weights of ``weight_max`` (WEIGHT_MAX_EXACT: the int8w8 variant)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from export.quantize import to_int8

    k, n = w.shape
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", k])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", n])
    fp32 = one_node_model([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])],
                          [x], [y], [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    with tempfile.TemporaryDirectory() as tmp:
        onnx.save_model(fp32, f"{tmp}/fp32.onnx")
        return onnx.load(str(to_int8(Path(f"{tmp}/fp32.onnx"), Path(f"{tmp}/int8.onnx"), weight_max)))


def models(w: np.ndarray, b: np.ndarray) -> tuple[Any, Any]:
    """The layer y = x w + b as the int8w8 graphs compute it (``chain_model``) and as the one
    fused operator on the same 8-bit weights."""
    from onnx import TensorProto, helper, numpy_helper

    from export.quantize import QUANT_OPSET, WEIGHT_MAX_EXACT

    k, n = w.shape
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", k])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", n])
    names = ["w_packed", "w_scale", "w_colsum", "b"]
    inits = [numpy_helper.from_array(a, name) for a, name in zip(int8_product(w, b), names, strict=True)]
    node = helper.make_node(OP, ["x", *names], ["y"], domain=DOMAIN)
    fused = helper.make_model(helper.make_graph([node], "fused", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", QUANT_OPSET), helper.make_opsetid(DOMAIN, 1)])
    return chain_model(w, b, WEIGHT_MAX_EXACT), fused


def product_shapes(package: Any) -> list[tuple[int, int]]:
    """The distinct (K, N) of the decoder step's products with a constant weight, in graph order."""
    import onnx
    from onnx import TensorProto

    from engine import contract

    graph = onnx.load(str(package.graph_path(contract.DECODER, "fp32"))).graph
    weights = {i.name: tuple(i.dims) for i in graph.initializer
               if len(i.dims) == 2 and i.data_type == TensorProto.FLOAT}
    shapes = [weights[n.input[1]] for n in graph.node if n.op_type == "MatMul" and n.input[1] in weights]
    return list(dict.fromkeys(shapes))


def compare(library: Path, k: int, n: int, threads: int, rounds: int) -> list[str]:
    """One line per row count: both timings, their agreement, the fused rows' invariance."""
    from bench.studies.step_cost import best_per_call

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((k, n)) * 0.05).astype(np.float32)
    b = (rng.standard_normal(n) * 0.1).astype(np.float32)
    chain_model, fused_model = models(w, b)
    chain, fused = session(chain_model, threads), session(fused_model, threads, library)
    lines = []
    for m in ROWS:
        x = rng.standard_normal((m, k)).astype(np.float32)
        want, got = chain.run(None, {"x": x})[0], fused.run(None, {"x": x})[0]
        alone = all(np.array_equal(fused.run(None, {"x": x[r:r + 1]})[0][0], got[r]) for r in range(m))
        secs = best_per_call({"chain": partial(chain.run, None, {"x": x}), "fused": partial(fused.run, None, {"x": x})},
                             rounds, 20)
        lines.append(f"  {k} x {n}, {m:3d} rows: chain {1e6 * secs['chain']:8.1f} us, "
                     f"fused {1e6 * secs['fused']:8.1f} us = {secs['chain'] / secs['fused']:.2f}x; max |fused - chain| "
                     f"{float(np.abs(got - want).max()):.1e} (|y| up to {float(np.abs(want).max()):.1f}); "
                     f"fused rows the same bits alone: {alone}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--package", type=Path, required=True, help="its decoder's shapes are timed")
    p.add_argument("--threads", type=int, default=1, help="onnxruntime's intra-op threads (both use them)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--ort-include", type=Path, help=f"the directory holding onnxruntime's {HEADER}")
    args = p.parse_args(argv)

    from engine.package import ModelPackage

    shapes = product_shapes(ModelPackage.load(args.package))
    include = buildable(p, "fused_linear", {s for shape in shapes for s in shape}, args.ort_include)
    with tempfile.TemporaryDirectory() as tmp:
        library = build(include, Path(tmp))
        print(f"one int8w8 linear layer, {args.threads} thread(s): the graphs' chain (quantize rows, "
              f"MatMulIntegerToFloat, Add) against one fused operator (VNNI); best of {args.rounds} "
              f"alternating rounds, a run each")
        for k, n in shapes:
            for line in compare(library, k, n, args.threads, args.rounds):
                print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
