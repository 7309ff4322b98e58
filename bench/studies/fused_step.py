"""Would fused decoder layers of our own pay? The int8w8 decoder step with each layer as one operator.

    python -m bench.studies.fused_step --checkpoint models/default/model.pt --package packages/default \
        [--threads 1] [--past 32] [--source 25] [--ort-include DIR]

Builds the decoder step of the checkpoint's model from bench/studies/fused_ops.cc's operators: the
embedding and positions as onnxruntime nodes, each decoder layer as one ``FusedDecoderLayerInt8``
(norms, the layer's six int8 products, attention over the cache and over the source, residuals;
pre-norm or post-norm as the model), the final norm of a pre-norm model, the output projection as one
``FusedLinearInt8`` and LogSoftmax (the ReLU models we train; sinusoidal or stored positions, read
from the model's table): the same inputs and outputs as the package's step graph
(engine/contract.py), the same weights and the same int8 scheme (export/quantize.py: 8-bit weights,
each row of activations on its own scale). Then, on one set of random inputs per row count (1, 4, 32
and 128 rows, ``--past`` cached positions, ``--source`` source positions, one source per row), it
times the package's int8w8 step graph and the fused step side by side (best of ``--rounds``
alternating rounds) and compares their log-probabilities (the largest difference, and whether each
row's best token is the same), and whether each row of the fused step is the same bits alone as in
the batch.

With ``--decode``, it then decodes the checkpoint's test sentences (``--sentences``, in batches of
``--batch-size``, beam ``--beam-size``) as nmt-bench does, with the engine's loop (engine/decoding.py)
over the package's int8 step graph and over the fused step, and with CTranslate2 int8 on the
converted checkpoint: sentences/s of each, the ratios, and how many outputs are the same tokens.

The fused operators split large products and attention over many rows across the session's threads
(``--threads``), as the graph's operators do; small ones run on one.
Needs what bench/studies/fused_linear.py needs (g++, onnxruntime's headers, AVX-512 VNNI).
"""

from __future__ import annotations

import argparse
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from bench.studies.fused_linear import DOMAIN, build, buildable, int8_product, session

ROWS = (1, 4, 32, 128)
LAYER_OP = "FusedDecoderLayerInt8"
LINEAR_OP = "FusedLinearInt8"


def fused_step_model(model: Any) -> Any:
    """The checkpoint's decoder step with fused layers (see the module docstring)."""
    from onnx import TensorProto, helper, numpy_helper

    from engine import contract
    from export.quantize import QUANT_OPSET

    cfg = model.cfg
    d, heads, n = cfg.d_model, cfg.n_heads, cfg.n_decoder_layers
    dh = d // heads
    state = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    table = model.positional.table.detach().float().numpy()
    vi = helper.make_tensor_value_info
    f32, i64, boolean = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
    inputs = [vi(contract.INPUT_IDS, i64, ["B", 1]), vi(contract.POSITIONS, i64, ["B", 1]),
              vi(contract.PAST_MASK, boolean, ["B", "P"]), vi(contract.SRC_MASK, boolean, ["B", "S"])]
    inputs += [vi(f"{contract.CROSS_K}_{i}", f32, ["C", heads, dh, "S"]) for i in range(n)]
    inputs += [vi(f"{contract.CROSS_V}_{i}", f32, ["C", heads, "S", dh]) for i in range(n)]
    inputs += [vi(f"{contract.PAST_K}_{i}", f32, ["B", heads, dh, "P"]) for i in range(n)]
    inputs += [vi(f"{contract.PAST_V}_{i}", f32, ["B", heads, "P", dh]) for i in range(n)]
    inits = [numpy_helper.from_array(state["embedding.weight"], "embedding"),
             numpy_helper.from_array(table, "positions_table"),
             numpy_helper.from_array(np.array([-1, d], np.int64), "rows_by_d"),
             numpy_helper.from_array(np.array(model.embed_scale, np.float32), "embed_scale"),
             numpy_helper.from_array(np.array([not cfg.pre_norm]), "post_norm")]
    nodes = [helper.make_node("Gather", ["embedding", contract.INPUT_IDS], ["token3"]),
             helper.make_node("Reshape", ["token3", "rows_by_d"], ["token"]),
             helper.make_node("Mul", ["token", "embed_scale"], ["scaled"]),
             helper.make_node("Gather", ["positions_table", contract.POSITIONS], ["position3"]),
             helper.make_node("Reshape", ["position3", "rows_by_d"], ["position"]),
             helper.make_node("Add", ["scaled", "position"], ["x0"])]
    for i in range(n):
        p = f"decoder_layers.{i}."
        norms = np.stack([state[f"{p}sublayer.{s}.norm.{t}"] for s in range(3) for t in ("weight", "bias")])
        qkv = [np.concatenate([state[f"{p}self_attn.w_{x}.{t}"].T if t == "weight" else state[f"{p}self_attn.w_{x}.{t}"]
                               for x in "qkv"], axis=-1) for t in ("weight", "bias")]
        linears = [qkv, [state[f"{p}self_attn.w_o.weight"].T, state[f"{p}self_attn.w_o.bias"]],
                   [state[f"{p}cross_attn.w_q.weight"].T, state[f"{p}cross_attn.w_q.bias"]],
                   [state[f"{p}cross_attn.w_o.weight"].T, state[f"{p}cross_attn.w_o.bias"]],
                   [state[f"{p}feed_forward.w_1.weight"].T, state[f"{p}feed_forward.w_1.bias"]],
                   [state[f"{p}feed_forward.w_2.weight"].T, state[f"{p}feed_forward.w_2.bias"]]]
        parts = [int8_product(np.ascontiguousarray(w), b) for w, b in linears]
        names = [f"layer{i}.{x}" for x in ("norms", "w_packed", "w_scale", "w_colsum", "bias")]
        inits += [numpy_helper.from_array(norms.astype(np.float32), names[0])]
        inits += [numpy_helper.from_array(np.concatenate([part[j] for part in parts]), names[j + 1]) for j in range(4)]
        nodes.append(helper.make_node(
            LAYER_OP, [f"x{i}", f"{contract.PAST_K}_{i}", f"{contract.PAST_V}_{i}", contract.PAST_MASK,
                       f"{contract.CROSS_K}_{i}", f"{contract.CROSS_V}_{i}", contract.SRC_MASK, *names, "post_norm"],
            [f"x{i + 1}", f"{contract.NEW_K}_{i}", f"{contract.NEW_V}_{i}", f"cross_weights{i}"], domain=DOMAIN))
    bias = state.get("output_bias")
    out = int8_product(np.ascontiguousarray(state["embedding.weight"].T), bias)
    out_names = ["output.w_packed", "output.w_scale", "output.w_colsum", "output.bias"]
    inits += [numpy_helper.from_array(a, name) for a, name in zip(out, out_names, strict=True)]
    if cfg.pre_norm:  # pre-norm stacks end in a norm of their own; post-norm layers already end in one
        inits += [numpy_helper.from_array(state["decoder_norm.weight"], "final_norm.weight"),
                  numpy_helper.from_array(state["decoder_norm.bias"], "final_norm.bias")]
        nodes.append(helper.make_node("LayerNormalization", [f"x{n}", "final_norm.weight", "final_norm.bias"],
                                      ["hidden"], axis=-1, epsilon=1e-5))
    else:
        nodes.append(helper.make_node("Identity", [f"x{n}"], ["hidden"]))
    nodes += [helper.make_node(LINEAR_OP, ["hidden", *out_names], ["logits"], domain=DOMAIN),
              helper.make_node("LogSoftmax", ["logits"], [contract.LOG_PROBS], axis=-1),
              helper.make_node("Identity", [f"cross_weights{n - 1}"], [contract.CROSS_ATTENTION])]
    outputs = [vi(contract.LOG_PROBS, f32, ["B", cfg.vocab_size])]
    outputs += [vi(f"{contract.NEW_K}_{i}", f32, None) for i in range(n)]
    outputs += [vi(f"{contract.NEW_V}_{i}", f32, None) for i in range(n)]
    outputs.append(vi(contract.CROSS_ATTENTION, f32, None))
    graph = helper.make_graph(nodes, "fused_decoder_step", inputs, outputs, inits)
    opsets = [helper.make_opsetid("", QUANT_OPSET), helper.make_opsetid(DOMAIN, 1)]
    return helper.make_model(graph, opset_imports=opsets)


def random_feeds(package: Any, rows: int, past: int, source: int, seed: int = 0) -> dict[str, np.ndarray]:
    """profile_decode's step inputs with values of the scale a real step sees (unit normal keys and
    values), a few masked slots in each row, random tokens, and one source per row."""
    from bench.studies.profile_decode import step_feeds
    from engine import contract

    rng = np.random.default_rng(seed)
    feeds = step_feeds(package.dims, rows, past, source)
    for name, value in feeds.items():
        if value.dtype == np.float32:
            feeds[name] = rng.standard_normal(value.shape, dtype=np.float32)
        elif value.dtype == bool:
            feeds[name] = rng.random(value.shape) > 0.1
    feeds[contract.INPUT_IDS] = rng.integers(4, package.dims.vocab_size, (rows, 1)).astype(np.int64)
    return feeds


def compare(graph: Any, fused: Any, package: Any, past: int, source: int, rounds: int) -> list[str]:
    from bench.studies.step_cost import best_per_call
    from engine import contract

    lines = []
    for rows in ROWS:
        feeds = random_feeds(package, rows, past, source)
        want = graph.run([contract.LOG_PROBS], feeds)[0]
        got = fused.run([contract.LOG_PROBS], feeds)[0]
        same_best = int((want.argmax(axis=1) == got.argmax(axis=1)).sum())
        alone = all(np.array_equal(fused.run([contract.LOG_PROBS], {k: v[r:r + 1] for k, v in feeds.items()})[0][0],
                                   got[r]) for r in range(rows))
        secs = best_per_call({"graph": partial(graph.run, None, feeds), "fused": partial(fused.run, None, feeds)},
                             rounds, 20)
        lines.append(f"  {rows:3d} rows: step graph {1e3 * secs['graph']:7.3f} ms, fused layers "
                     f"{1e3 * secs['fused']:7.3f} ms = {secs['graph'] / secs['fused']:.2f}x; max |delta log p| "
                     f"{float(np.abs(got - want).max()):.1e}, best token the same in {same_best}/{rows} rows; "
                     f"fused rows the same bits alone: {alone}")
    return lines


def decode(graph: Any, fused_step: Any, args: argparse.Namespace) -> list[str]:
    """Whole decodes: the engine over the package's int8 step (``graph``, a Runtime), over the fused
    step (the same runtime's encoder, ``fused_step`` for its steps), and CTranslate2."""
    import copy
    import time

    from bench.nmt_bench import checkpoint_batches
    from bench.peers.ct2_convert import convert
    from bench.studies.profile_decode import profile_ct2
    from engine.decoding import DecodeOptions
    from export.verify import decode_ids

    ckpt_path, tok, items, batches = checkpoint_batches(args.checkpoint, args.batch_size, args.sentences, args.pair,
                                                        args.file)
    options = DecodeOptions(beam_size=args.beam_size)
    fused = copy.copy(graph)  # a Runtime keeps no decoding state: share its sessions, swap in the step
    fused.decoder = fused_step
    runtimes = {"graph": graph, "fused": fused}

    def run(rt: Any) -> tuple[float, list[list[int]]]:
        decode_ids(rt, batches[0], options)  # warm-up
        start = time.perf_counter()
        tokens = [hyps[0].tokens for b in batches for hyps in decode_ids(rt, b, options)]
        return time.perf_counter() - start, tokens

    best: dict[str, float] = {}
    tokens: dict[str, list[list[int]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        ct2_dir = str(args.ct2_model or convert(ckpt_path, Path(tmp) / "ct2"))
        for _ in range(args.rounds):  # alternating rounds, the best of each
            for name, rt in runtimes.items():
                seconds, tokens[name] = run(rt)
                best[name] = min(best.get(name, float("inf")), seconds)
            seconds = profile_ct2(ct2_dir, tok.sp, batches, "int8", args.threads, args.beam_size)
            best["ct2"] = min(best.get("ct2", float("inf")), seconds)
    n = len(items)
    same = sum(a == b for a, b in zip(tokens["graph"], tokens["fused"], strict=True))
    return [f"  {n} sentences, batch {args.batch_size}, beam {args.beam_size}: sentences/s step graph "
            f"{n / best['graph']:.1f}, fused layers {n / best['fused']:.1f}, CTranslate2 int8 {n / best['ct2']:.1f}; "
            f"against CTranslate2: step graph {best['ct2'] / best['graph']:.2f}x, fused layers "
            f"{best['ct2'] / best['fused']:.2f}x; the same tokens in {same}/{n} outputs"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="the model's weights")
    p.add_argument("--package", type=Path, required=True, help="its int8w8 step graph is the baseline")
    p.add_argument("--threads", type=int, default=1, help="onnxruntime's intra-op threads (both steps use them)")
    p.add_argument("--past", type=int, default=32, help="cached positions")
    p.add_argument("--source", type=int, default=25, help="source positions")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--ort-include", type=Path, help="the directory holding onnxruntime's headers")
    p.add_argument("--decode", action="store_true", help="also whole decodes beside CTranslate2 (see above)")
    p.add_argument("--sentences", type=int, default=192)
    p.add_argument("--file", type=Path, help="sentences: 'source' or 'source<TAB>reference' lines (as nmt-bench)")
    p.add_argument("--pair", help="direction of --file (default: the checkpoint's first); limits the test split")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--beam-size", type=int, default=1)
    p.add_argument("--ct2-model", type=Path, help="a converted model (default: convert into a temporary directory)")
    args = p.parse_args(argv)

    from bench.engines import variant_options
    from engine.package import ModelPackage
    from engine.runtime import Runtime, RuntimeOptions
    from training.checkpoint import load_model

    package = ModelPackage.load(args.package)
    if "int8w8" not in package.variants:
        p.error(f"{args.package} has no int8w8 variant; it has {', '.join(package.variants)}")
    model, _, _ = load_model(args.checkpoint)
    cfg = model.cfg
    if cfg.activation != "relu":
        p.error(f"the fused layer's feed-forward is ReLU; this model's is {cfg.activation}")
    include = buildable(p, "fused_step", {cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.d_model // cfg.n_heads},
                        args.ort_include)
    with tempfile.TemporaryDirectory() as tmp:
        library = build(include, Path(tmp))
        # The baseline is the step session a server runs: the engine's own options and int8 width.
        runtime = Runtime(package, RuntimeOptions(device="cpu", threads=args.threads, **variant_options("int8")))
        fused = session(fused_step_model(model), args.threads, library)
        print(f"the int8w8 decoder step, {args.threads} thread(s), {args.past} cached positions, source "
              f"{args.source}: the package's graph against fused layers; best of {args.rounds} "
              f"alternating rounds")
        for line in compare(runtime.decoder, fused, package, args.past, args.source, args.rounds):
            print(line)
        if args.decode:
            print(f"whole decodes, {args.threads} thread(s), int8: the engine over the step graph and over the "
                  f"fused step, and CTranslate2; best of {args.rounds} alternating rounds")
            for line in decode(runtime, fused, args):
                print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
