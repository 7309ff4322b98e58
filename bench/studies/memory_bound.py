"""Where a decoding step's time is bounded: the weights it streams, against the processor's cache.

    python -m bench.studies.memory_bound [--package packages/small-ende] [--rows 32] [--sizes 2,4,8,16,24,32,48]

A decoding step multiplies a few rows (the batch) by every weight matrix of the decoder
once. At 32 rows that is 16 floating-point operations per byte of fp32 weight, so the
products run at the processor's arithmetic speed only while the weights come from its
cache; once they do not fit, at the speed memory streams them.

Part 1 runs chains of fp32 products at a decoder's feed-forward shape (rows x d_model ->
d_ff -> d_model), each matrix its own, totalling 2 to 48 MiB of weights, in a loop as
decoding steps do, and prints the time per product, the GFLOPS and the weight bytes
read per second. Where the speed falls is how much of the cache a decoder gets here.

Part 2 (with ``--package``) sets the package's decoder graphs against that: their weight
bytes (the input embedding table excluded: a step reads only its rows), the cache one
step reads (rows x 32 cached slots and a 20-token source), and the measured step time, as
bytes per second.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

MIB = 1 << 20


def chain_graph(pairs: int, d_model: int, d_ff: int, seed: int = 0) -> bytes:
    """``pairs`` x (d_model -> d_ff -> d_model) fp32 products, one after the other, each with its own weights."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for i in range(pairs):
        for name, shape in ((f"up{i}", (d_model, d_ff)), (f"down{i}", (d_ff, d_model))):
            inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.05).astype(np.float32), name))
            nodes.append(helper.make_node("MatMul", [prev, name], [f"{name}_out"]))
            prev = f"{name}_out"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", d_model])
    y = helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["rows", d_model])
    graph = helper.make_graph(nodes, "chain", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model.SerializeToString()


def chain_speed(weights_mib: float, rows: int, d_model: int, d_ff: int, seconds: float = 0.3) -> dict[str, float]:
    """Time one product of a chain holding about ``weights_mib`` MiB of fp32 weights."""
    import onnxruntime as ort

    pair_bytes = 2 * d_model * d_ff * 4
    pairs = max(1, round(weights_mib * MIB / pair_bytes))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
    opts.log_severity_level = 3
    session = ort.InferenceSession(chain_graph(pairs, d_model, d_ff), opts, providers=["CPUExecutionProvider"])
    feeds = {"x": np.full((rows, d_model), 0.01, dtype=np.float32)}
    for _ in range(3):
        session.run(None, feeds)
    runs, start = 0, time.perf_counter()
    while runs < 3 or time.perf_counter() - start < seconds:
        session.run(None, feeds)
        runs += 1
    per_run = (time.perf_counter() - start) / runs
    products = 2 * pairs
    return {"weights_mib": pairs * pair_bytes / MIB, "us_per_product": per_run / products * 1e6,
            "gflops": 2 * rows * d_model * d_ff * products / per_run / 1e9,
            "weight_gb_s": pairs * pair_bytes / per_run / 1e9}


def streamed_weight_bytes(graph_path: Path) -> int:
    """Bytes of a graph's initializers that a step reads whole: all but tables only looked up by Gather."""
    import onnx

    model = onnx.load(str(graph_path))
    gathered = {n.input[0] for n in model.graph.node if n.op_type == "Gather"}
    used_elsewhere = {i for n in model.graph.node if n.op_type != "Gather" for i in n.input}
    total = 0
    for init in model.graph.initializer:
        if init.name in gathered and init.name not in used_elsewhere:
            continue
        total += onnx.numpy_helper.to_array(init).nbytes
    return total


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--package", type=Path, help="also set this package's decoder step against the sweep")
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--d-model", type=int, default=256, help="sweep shape (with --package: the package's)")
    p.add_argument("--d-ff", type=int, default=1024, help="sweep shape")
    p.add_argument("--sizes", default="2,4,8,16,24,32,48", help="MiB of weights per chain (comma-separated)")
    p.add_argument("--seconds", type=float, default=0.3, help="time spent on each measurement")
    args = p.parse_args(argv)

    package = None
    d_model, d_ff = args.d_model, args.d_ff
    if args.package:
        from engine.package import ModelPackage

        package = ModelPackage.load(args.package)
        d_model = package.dims.d_model

    print(f"fp32 products of {args.rows} rows, {d_model} -> {d_ff} -> {d_model}, 1 thread, weights read once per run")
    print(f"{'weights MiB':>12s} {'us/product':>11s} {'GFLOPS':>8s} {'weights GB/s':>13s}")
    for size in (float(s) for s in args.sizes.split(",")):
        r = chain_speed(size, args.rows, d_model, d_ff, args.seconds)
        print(f"{r['weights_mib']:12.1f} {r['us_per_product']:11.1f} {r['gflops']:8.0f} {r['weight_gb_s']:13.1f}")

    if package is not None:
        from bench.studies.profile_decode import step_cost
        from engine import contract
        from engine.runtime import Runtime, RuntimeOptions

        dims, past, src = package.dims, 32, 20
        print(f"\ndecoder step of {args.package}, {args.rows} rows, {past} cached slots, source {src}, 1 thread")
        print(f"{'variant':>8s} {'weights MiB':>12s} {'cache MiB':>10s} {'step ms':>8s} {'read GB/s':>10s}")
        cache = args.rows * dims.n_heads * dims.d_head * (past + src) * 2 * dims.n_decoder_layers * 4
        for variant in ("fp32", "int8"):
            if variant not in package.variants:
                continue
            weights = streamed_weight_bytes(package.graph_path(contract.DECODER, variant))
            rt = Runtime(package, RuntimeOptions(device="cpu", threads=1, variant=variant))
            ms = min(step_cost(rt, args.rows, past, src, repeats=30) for _ in range(3))
            print(f"{variant:>8s} {weights / MIB:12.1f} {cache / MIB:10.1f} {ms:8.2f} "
                  f"{(weights + cache) / ms / 1e6:10.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
