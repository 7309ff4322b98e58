"""Why keys are stored transposed: one decoding step's attention products in onnxruntime.

    python -m bench.studies.attention_layout [--rows 32] [--heads 4] [--d-head 64] [--positions 8,32,64]

A decoding step multiplies one query row per (row, head) by that row's cached keys, then
the attention weights by its cached values. onnxruntime's CPU MatMul runs a batch of such
products one (row, head) at a time; with a single query row and a plain (not transposed)
right-hand side it uses a matrix-vector kernel that reads the cache in place, while a
transposed right-hand side (``FusedMatMul`` with ``transB``, what ``q @ k.T`` becomes) or
a scale folded into the product (``alpha``) takes the general path that repacks the keys
first. This prints microseconds per product for each form, over caches that do not stay
in the processor's cache between runs (as in a real step, where 8 such products and the
weights pass between two uses of the same keys).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

LAYERS = 8  # products per graph, each over its own keys: a 4-layer decoder's self and cross attention

# form -> (op, attributes, keys transposed in memory?)
FORMS: dict[str, tuple[str, dict[str, float | int], bool]] = {
    "q @ k_t, k_t stored (B,H,Dh,P)": ("MatMul", {}, True),
    "q @ k.T, k stored (B,H,P,Dh) [FusedMatMul transB, alpha]": ("FusedMatMul", {"transB": 1, "alpha": 0.125}, False),
    "q @ k.T, k stored (B,H,P,Dh) [FusedMatMul transB]": ("FusedMatMul", {"transB": 1, "alpha": 1.0}, False),
    "q @ k_t scaled [FusedMatMul alpha]": ("FusedMatMul", {"alpha": 0.125}, True),
    "weights @ v, v stored (B,H,P,Dh)": ("MatMul", {}, False),
}


def graph(op: str, attrs: dict[str, float | int], rows: int, heads: int, d_head: int, positions: int,
          keys_t: bool, weights: bool) -> bytes:
    from onnx import TensorProto, helper

    first = helper.make_tensor_value_info("a", TensorProto.FLOAT, [rows, heads, 1, positions if weights else d_head])
    shape = [rows, heads, d_head, positions] if keys_t else [rows, heads, positions, d_head]
    inputs, outputs, nodes = [first], [], []
    domain = "com.microsoft" if op == "FusedMatMul" else ""
    for i in range(LAYERS):
        inputs.append(helper.make_tensor_value_info(f"m{i}", TensorProto.FLOAT, shape))
        nodes.append(helper.make_node(op, ["a", f"m{i}"], [f"o{i}"], domain=domain, **attrs))
        outputs.append(helper.make_tensor_value_info(f"o{i}", TensorProto.FLOAT, None))
    model = helper.make_model(helper.make_graph(nodes, "products", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 9
    return model.SerializeToString()


def per_product_us(form: str, rows: int, heads: int, d_head: int, positions: int, repeats: int) -> float:
    import onnxruntime as ort

    op, attrs, keys_t = FORMS[form]
    weights = form.startswith("weights")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    session = ort.InferenceSession(graph(op, attrs, rows, heads, d_head, positions, keys_t, weights), opts,
                                   providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    shape = (rows, heads, d_head, positions) if keys_t else (rows, heads, positions, d_head)
    feeds = {"a": rng.random((rows, heads, 1, positions if weights else d_head), dtype=np.float32)}
    feeds.update({f"m{i}": rng.random(shape, dtype=np.float32) for i in range(LAYERS)})
    evict = np.ones(8 << 20, dtype=np.float32)  # 32 MiB touched between runs
    session.run(None, feeds)
    total = 0.0
    for _ in range(repeats):
        evict += 1
        start = time.perf_counter()
        session.run(None, feeds)
        total += time.perf_counter() - start
    return total / repeats / LAYERS * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-head", type=int, default=64)
    p.add_argument("--positions", default="8,32,64", help="cached positions (comma-separated)")
    p.add_argument("--repeats", type=int, default=200)
    args = p.parse_args(argv)
    print(f"one decoding step's attention products, {args.rows} rows x {args.heads} heads, d_head {args.d_head}, "
          "1 thread; microseconds per product (one layer)")
    sizes = [int(x) for x in args.positions.split(",")]
    print(f"{'form':60s}" + "".join(f"{f'P={n}':>9s}" for n in sizes))
    for form in FORMS:
        cells = [per_product_us(form, args.rows, args.heads, args.d_head, n, args.repeats) for n in sizes]
        print(f"{form:60s}" + "".join(f"{c:9.1f}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
