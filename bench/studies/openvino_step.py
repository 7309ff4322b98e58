"""OpenVINO as a backend? Our encoder and decoder-step graphs run by OpenVINO beside onnxruntime.

    pip install openvino
    python -m bench.studies.openvino_step --checkpoint models/default --package packages/default \
        --variant fp32 --beam-size 4 --batch-size 32

    pip uninstall onnxruntime && pip install onnxruntime-openvino     # the execution provider instead
    python -m bench.studies.openvino_step ... (the same)

Decodes batches of the test split (as ``nmt-bench`` makes them) with the server's decoding loop
on onnxruntime and records every encoder and decoder-step input it feeds; then runs those same
inputs through onnxruntime and through OpenVINO's CPU plugin (the ONNX files read directly, one
compiled model per graph, at each ``--precisions`` inference precision), alternating the two
engines for ``--rounds`` rounds and keeping each one's fastest; where onnxruntime is the
``onnxruntime-openvino`` build, also through its ``OpenVINOExecutionProvider`` (OpenVINO runs the
nodes it supports, onnxruntime's CPU provider the rest). Prints milliseconds per engine
and graph, the ratio, and the largest difference in log-probabilities of a decoder step from
onnxruntime's (bf16 inference changes the numbers; f32 should not). A graph OpenVINO cannot read
(our int8 graphs hold onnxruntime's own quantised operators) is reported in one line, not a crash.

OpenVINO is not a dependency of the project: install it (or onnxruntime-openvino, which replaces
the onnxruntime package) in the same environment to run this.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from engine import contract

Feed = dict[str, np.ndarray]


def record_feeds(rt: Any, batches: list[list[list[int]]], beam: int) -> tuple[list[Feed], list[Feed]]:
    """Decode ``batches`` with the server's loop; every encoder and decoder-step feed, copied."""
    from engine.decoding import DecodeOptions
    from export.verify import decode_ids

    encoder_feeds: list[Feed] = []
    decoder_feeds: list[Feed] = []
    run_encoder, run_decoder = rt.encoder.run, rt.decoder.run

    def recorder(run: Callable[..., Any], into: list[Feed]) -> Callable[..., Any]:
        def recording(names: Any, feed: Feed) -> Any:
            into.append({k: np.array(v, copy=True) for k, v in feed.items()})
            return run(names, feed)
        return recording

    rt.encoder.run, rt.decoder.run = recorder(run_encoder, encoder_feeds), recorder(run_decoder, decoder_feeds)
    try:
        for b in batches:
            decode_ids(rt, b, DecodeOptions(beam_size=beam))
    finally:
        rt.encoder.run, rt.decoder.run = run_encoder, run_decoder
    return encoder_feeds, decoder_feeds


def fastest(runs: dict[str, Callable[[], None]], rounds: int) -> dict[str, float]:
    """Seconds of each callable's fastest round; the callables alternate within each round, so
    a machine that slows down in the middle slows them all."""
    best = {name: float("inf") for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def compile_graph(core: Any, path: str, threads: int, precision: str) -> tuple[Any, str]:
    """An OpenVINO infer request for an ONNX file, or None and why it could not be compiled."""
    config = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": precision}
    try:
        return core.compile_model(path, "CPU", config).create_infer_request(), ""
    except RuntimeError as e:
        unsupported = [line.strip() for line in str(e).splitlines() if "Conversion is failed for" in line]
        return None, (unsupported or [str(e).splitlines()[0]])[0]


OPENVINO_EP = "OpenVINOExecutionProvider"


def ep_session(path: str, threads: int) -> tuple[Any, str]:
    """An onnxruntime session of an ONNX file on the OpenVINO execution provider (CPU, f32), with
    the CPU provider for what it does not take; or None and why it could not be made."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.log_severity_level = 3
    provider = (OPENVINO_EP, {"device_type": "CPU", "precision": "FP32", "num_of_threads": str(threads)})
    try:
        return ort.InferenceSession(path, opts, providers=[provider, "CPUExecutionProvider"]), ""
    except Exception as e:  # a graph the provider rejects: the node it names, and why
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        named = [f"{line} {after}" for line, after in zip(lines, [*lines[1:], ""]) if "validating ONNX node" in line]
        return None, (named or lines or [type(e).__name__])[0][:300]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="the checkpoint the package was exported from (its data)")
    p.add_argument("--package", required=True)
    p.add_argument("--pair", help="direction (default: the checkpoint's first)")
    p.add_argument("--sentences", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--beam-size", type=int, default=1)
    p.add_argument("--variant", default="fp32", choices=["fp32", "int8", "int8w8"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--precisions", default="f32,bf16", help="OpenVINO inference precisions, comma-separated")
    args = p.parse_args(argv)
    import onnxruntime as ort

    try:
        import openvino as ov
    except ImportError:
        ov = None
    has_ep = OPENVINO_EP in ort.get_available_providers()
    if ov is None and not has_ep:
        p.error("OpenVINO is not installed here: pip install openvino (or onnxruntime-openvino for its execution "
                "provider)")

    from bench.nmt_bench import checkpoint_batches
    from engine.package import ModelPackage
    from engine.runtime import Runtime, RuntimeOptions

    _, _, items, batches = checkpoint_batches(args.checkpoint, args.batch_size, args.sentences, args.pair)
    package = ModelPackage.load(args.package)
    rt = Runtime(package, RuntimeOptions(device="cpu", threads=args.threads, variant=args.variant))
    encoder_feeds, decoder_feeds = record_feeds(rt, batches, args.beam_size)
    rows = max(f[contract.INPUT_IDS].shape[0] for f in decoder_feeds)
    print(f"{len(items)} sentences, batch {args.batch_size}, beam {args.beam_size}, {args.variant} graphs, "
          f"{args.threads} thread(s): {len(encoder_feeds)} encoder runs, {len(decoder_feeds)} decoder steps "
          f"(up to {rows} rows); onnxruntime {ort.__version__}"
          + (f", OpenVINO {ov.__version__}" if ov else "") + (f", {OPENVINO_EP}" if has_ep else ""))

    graphs = {"encoder": (rt.encoder, encoder_feeds, contract.ENCODER),
              "decoder step": (rt.decoder, decoder_feeds, contract.DECODER)}
    if has_ep:
        for label, (session, feeds, graph) in graphs.items():
            ep, why = ep_session(str(package.graph_path(graph, args.variant)), args.threads)
            if ep is None:
                print(f"{label:<13} {OPENVINO_EP}: cannot run the {args.variant} graph: {why}")
                continue
            times = fastest({"onnxruntime": lambda s=session, fs=feeds: [s.run(None, f) for f in fs],
                             "ep": lambda s=ep, fs=feeds: [s.run(None, f) for f in fs]}, args.rounds)
            line = (f"{label:<13} onnxruntime {1000 * times['onnxruntime']:7.0f} ms   OpenVINO EP "
                    f"{1000 * times['ep']:7.0f} ms   onnxruntime is {times['ep'] / times['onnxruntime']:.2f}x as fast")
            if graph == contract.DECODER:
                probe = feeds[len(feeds) // 2]
                ours, theirs = (s.run([contract.LOG_PROBS], probe)[0] for s in (session, ep))
                line += f"   max |log-prob difference| {float(np.abs(ours - theirs).max()):.1e}"
            print(line)
    if ov is None:
        return 0
    core = ov.Core()
    for precision in args.precisions.split(","):
        for label, (session, feeds, graph) in graphs.items():
            request, why = compile_graph(core, str(package.graph_path(graph, args.variant)), args.threads, precision)
            if request is None:
                print(f"{label:<13} OpenVINO {precision}: cannot compile the {args.variant} graph: {why}")
                continue
            times = fastest({"onnxruntime": lambda s=session, fs=feeds: [s.run(None, f) for f in fs],
                             "openvino": lambda r=request, fs=feeds: [r.infer(f) for f in fs]}, args.rounds)
            ratio = times["openvino"] / times["onnxruntime"]
            line = (f"{label:<13} onnxruntime {1000 * times['onnxruntime']:7.0f} ms   OpenVINO {precision} "
                    f"{1000 * times['openvino']:7.0f} ms   onnxruntime is {ratio:.2f}x as fast")
            if graph == contract.DECODER:
                probe = feeds[len(feeds) // 2]
                ours = session.run([contract.LOG_PROBS], probe)[0]
                request.infer(probe)
                theirs = request.get_tensor(contract.LOG_PROBS).data
                line += f"   max |log-prob difference| {float(np.abs(ours - theirs).max()):.1e}"
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
