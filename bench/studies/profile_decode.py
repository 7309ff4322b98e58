"""Where the offline decoding time goes: onnxruntime vs our Python loop, beside CTranslate2.

    python -m bench.studies.profile_decode --checkpoint runs/small-ende --package packages/small-ende \
        --sentences 64 --batch-size 32 --variant fp32

Decodes the same batches as nmt-bench (test split, per direction, sorted by length) with
the server's decoding loop, timing ``encoder.run`` and ``decoder.run`` (the sessions'
own time, inputs and outputs included) apart from everything else (the Python of
``engine/decoding.py``: feeding the step, search bookkeeping, cache
reordering and compaction), then the same batches with CTranslate2 on the converted
checkpoint. Also times one decoder step at 8, 32 and 64 cached slots, and with
``--ort-ops`` prints onnxruntime's own per-operator profile of one step.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from engine.defaults import default_max_len


class Timers:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start
                self.calls[name] += 1
        return timed


class TimedSession:
    """An InferenceSession whose ``run`` is timed."""

    def __init__(self, session: Any, timers: Timers, name: str) -> None:
        self._session = session
        self.run = timers.wrap(name, session.run)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


def profile_ours(package: Any, batches: list[list[list[int]]], variant: str, threads: int,
                 beam: int) -> dict[str, Any]:
    import engine.decoding as decoding
    from bench.engines import variant_options
    from engine.runtime import Runtime, RuntimeOptions
    from export.verify import decode_ids

    rt = Runtime(package, RuntimeOptions(device="cpu", threads=threads, **variant_options(variant)))
    options = decoding.DecodeOptions(beam_size=beam)
    decode_ids(rt, batches[0], options)  # warm-up
    timers = Timers()
    rt.encoder = TimedSession(rt.encoder, timers, "encoder.run")
    rt.decoder = TimedSession(rt.decoder, timers, "decoder.run")
    # Python parts timed apart (none calls another): beam search's step, newcomers joining,
    # leavers' rows refilled (and narrowing), growing the cache.
    timed = [(decoding.Job, "advance"), (decoding.Batch, "add"), (decoding.Batch, "remove"),
             (decoding.Batch, "_fit_slots")]
    originals = {(cls, name): getattr(cls, name) for cls, name in timed}
    for (cls, name), fn in originals.items():
        setattr(cls, name, timers.wrap(f"{cls.__name__}.{name}", fn))
    try:
        start = time.perf_counter()
        for b in batches:
            decode_ids(rt, b, options)
        total = time.perf_counter() - start
    finally:
        for (cls, name), fn in originals.items():
            setattr(cls, name, fn)
    parts = dict(timers.seconds)
    parts["other python"] = total - sum(parts.values())
    return {"total": total, "parts": parts, "steps": timers.calls["decoder.run"], "runtime": rt}


def step_feeds(dims: Any, rows: int, past: int, src: int) -> dict[str, np.ndarray]:
    """Decoder-step inputs of the given sizes (constant values: the cost does not depend on them)."""
    from engine import contract

    n = dims.n_decoder_layers
    feeds = {contract.INPUT_IDS: np.full((rows, 1), 5, dtype=np.int64),
             contract.POSITIONS: np.full((rows, 1), past, dtype=np.int64),
             contract.PAST_MASK: np.ones((rows, past), dtype=bool), contract.SRC_MASK: np.ones((rows, src), dtype=bool)}
    for name, length in ((contract.CROSS_K, src), (contract.CROSS_V, src), (contract.PAST_K, past),
                         (contract.PAST_V, past)):
        shape = contract.kv_shape(name, rows, dims.n_heads, dims.d_head, length)
        for layer_name in contract.per_layer(name, n):
            feeds[layer_name] = np.full(shape, 0.01, dtype=np.float32)
    return feeds


def step_cost(rt: Any, rows: int, past: int, src: int, repeats: int = 50) -> float:
    """Milliseconds of one decoder step at (rows, cached slots, source length)."""
    feeds = step_feeds(rt.package.dims, rows, past, src)
    rt.decoder.run(None, feeds)
    start = time.perf_counter()
    for _ in range(repeats):
        rt.decoder.run(None, feeds)
    return 1000 * (time.perf_counter() - start) / repeats


def ort_op_profile(package: Any, variant: str, threads: int, rows: int, past: int, src: int,
                   steps: int = 30) -> list[tuple[str, float, int]]:
    """onnxruntime's own profile of the decoder step: (op type, ms per step, nodes), slowest first."""
    import json
    import os
    import tempfile

    import onnxruntime as ort

    from engine import contract
    from engine.runtime import CPU_DISABLED_FUSIONS

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.enable_profiling = True
    opts.profile_file_prefix = os.path.join(tempfile.gettempdir(), "nmt_decoder_profile")
    session = ort.InferenceSession(str(package.graph_path(contract.DECODER, variant)), opts,
                                   providers=["CPUExecutionProvider"], disabled_optimizers=CPU_DISABLED_FUSIONS)
    feeds = step_feeds(package.dims, rows, past, src)
    for _ in range(steps):
        session.run(None, feeds)
    path = session.end_profiling()
    try:
        events = json.loads(Path(path).read_text())
    finally:
        Path(path).unlink(missing_ok=True)
    micros: dict[str, float] = defaultdict(float)
    nodes: dict[str, set[str]] = defaultdict(set)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            op = e["args"]["op_name"]
            micros[op] += e["dur"]
            nodes[op].add(e["name"])
    return sorted(((op, us / steps / 1000, len(nodes[op])) for op, us in micros.items()), key=lambda x: -x[1])


def profile_ct2(ct2_dir: str, sp: Any, batches: list[list[list[int]]], variant: str, threads: int,
                beam: int) -> float:
    from bench.engines import ct2_pieces, ct2_translator

    tr = ct2_translator(ct2_dir, variant, "cpu", threads)

    def run(b: list[list[int]]) -> None:
        tr.translate_batch(ct2_pieces(sp, b), beam_size=beam,
                           max_decoding_length=max(default_max_len(len(s), 10**6) for s in b),
                           max_batch_size=0)

    run(batches[0])
    start = time.perf_counter()
    for b in batches:
        run(b)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--package", required=True)
    p.add_argument("--file", type=Path, help="sentences: 'source' or 'source<TAB>reference' lines (as nmt-bench)")
    p.add_argument("--pair", help="direction of --file (default: the checkpoint's first); limits the test split")
    p.add_argument("--sentences", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--beam-size", type=int, default=1)
    p.add_argument("--variant", default="fp32", choices=["fp32", "int8"],
                   help="int8: the width a server runs on this CPU (int8w8 with VNNI/AMX), as nmt-bench")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--ort-ops", action="store_true", help="also onnxruntime's per-operator profile of one step "
                                                           "(batch x beam rows, 32 cached positions)")
    p.add_argument("--ct2-model", type=Path, help="a converted model (default: convert into a temporary directory)")
    args = p.parse_args(argv)

    import tempfile

    from bench.engines import CT2_COMPUTE_TYPES
    from bench.nmt_bench import checkpoint_batches
    from bench.peers.ct2_convert import convert
    from engine.package import ModelPackage

    ckpt_path, tok, items, batches = checkpoint_batches(args.checkpoint, args.batch_size, args.sentences, args.pair,
                                                        args.file)
    package = ModelPackage.load(args.package)

    ours = profile_ours(package, batches, args.variant, args.threads, args.beam_size)
    with tempfile.TemporaryDirectory() as tmp:
        ct2_dir = str(args.ct2_model or convert(ckpt_path, Path(tmp) / "ct2"))
        ct2 = profile_ct2(ct2_dir, tok.sp, batches, args.variant, args.threads, args.beam_size)
    total = ours["total"]
    print(f"{len(items)} sentences, batch {args.batch_size}, beam {args.beam_size}, {args.variant}, "
          f"{args.threads} thread(s); {ours['steps']} decoder steps")
    print(f"ours (onnxruntime {ours['runtime'].variant}) total {total:.2f}s")
    for name, sec in sorted(ours["parts"].items(), key=lambda kv: -kv[1]):
        print(f"  {name:<16} {sec:7.2f}s  {100 * sec / total:5.1f}%")
    graphs = ours["parts"]["decoder.run"] + ours["parts"]["encoder.run"]
    print(f"  the loop's Python (all but the two graphs' runs) {100 * (total - graphs) / total:.1f}%")
    print(f"ctranslate2 {CT2_COMPUTE_TYPES[args.variant]} total {ct2:.2f}s   (ours / ct2 = {total / ct2:.2f}x; "
          f"decoder.run alone / ct2 = {ours['parts']['decoder.run'] / ct2:.2f}x)")
    # The most any work on the loop could give: our two graphs' runs with no Python between them.
    print(f"speed vs ctranslate2: now {ct2 / total:.2f}x; with a free loop (the graphs' runs alone) "
          f"at most {ct2 / graphs:.2f}x")
    src = int(np.mean([len(s) for s in batches[0]]))
    rows = args.batch_size * args.beam_size
    costs = {past: step_cost(ours["runtime"], rows, past, src) for past in (8, 32, 64)}
    print(f"  one decoder step, {rows} rows, source {src}: "
          + ", ".join(f"{past} cached slots {ms:.2f} ms" for past, ms in costs.items()))
    if args.ort_ops:
        ops = ort_op_profile(package, ours["runtime"].variant, args.threads, args.batch_size * args.beam_size, 32, src)
        total_ms = sum(ms for _, ms, _ in ops)
        print(f"onnxruntime operators, one decoder step ({args.batch_size * args.beam_size} rows, past 32, "
              f"source {src}): {total_ms:.2f} ms of kernel time")
        for op, ms, n in ops[:10]:
            print(f"  {op:<24} {ms:6.2f} ms  {100 * ms / total_ms:5.1f}%  ({n} nodes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
