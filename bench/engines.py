"""The offline engines of ``nmt-bench``, each measured in a fresh child process.

    python -m bench.engines < work.json > result.json     (what nmt-bench runs; not a user command)

A child gets one configuration (engine, beam size, batches of source ids, threads) as
JSON on stdin, imports only that engine's library, records its resident set size (RSS),
loads the model, decodes the first batch once untimed (warm-up), then times every batch
(``repeats`` passes, the fastest kept) and prints one JSON line: per-batch seconds,
output ids, and the peak RSS of the process (``ru_maxrss``) minus the RSS after imports,
before the model was loaded.

Engines (``CPU_ENGINES``): ``pytorch`` (reference decoder, no cache), ``pytorch-cache``,
``onnx-fp32`` / ``onnx-int8`` (the server's decoding loop over onnxruntime, offline),
``onnx-fp32-resident`` (the same fp32 loop on the device-resident path, ``ResidentBatch``:
what CUDA runs, forced on the CPU to measure its cost there), ``ct2-fp32`` / ``ct2-int8``
(CTranslate2 on the converted checkpoint; int8 is quantised from the fp32 weights when
loaded). On ``--device cuda`` (``CUDA_ENGINES``): ``pytorch-cache``, ``onnx-fp32``,
``onnx-fp16`` (device-resident automatically when the package has the step and rows
graphs) and ``ct2-fp16``. Only when named (``HF_CPU_ENGINES`` / ``HF_CUDA_ENGINES``, the ``hf``
extra): ``hf-fp32`` (CPU) / ``hf-fp16`` (CUDA), Transformers ``generate()`` on the checkpoint
converted in memory by bench/peers/hf_convert.py, and ``optimum-fp32`` (CPU), Optimum's
``ORTModelForSeq2SeqLM`` on that model's ONNX export. Only when named (``MARIAN_ENGINES``, the
``marian`` extra): ``marian-fp32`` / ``marian-int8``, Marian (pymarian) on the checkpoint
converted by bench/peers/marian_convert.py (int8: Marian's intgemm8 model); it is not the same
model (it starts from a zero vector and decodes pre-LN self-attention differently from how it
trains; bench/studies/marian_parity.py), so its BLEU and output lengths are its own.
The result says where each engine actually ran (``device``),
with which graphs (``variant``) and whether decoding was device-resident (``resident``), and
for CTranslate2 the kernels it chose on this CPU (``kernels``: its log's ISA, oneMKL or not, and
its float and int8 product backends);
an engine asked for CUDA that is not on it fails instead of reporting CPU numbers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from engine.defaults import SPIN, SPIN_ASKED, default_max_len

Decoder = Callable[[list[list[int]]], list[list[int]]]  # sources (tag + pieces + eos) -> output ids

CPU_ENGINES = ("pytorch", "pytorch-cache", "onnx-fp32", "onnx-int8", "onnx-fp32-resident", "ct2-fp32", "ct2-int8")
SHORTLIST_ENGINES = ("onnx-fp32-shortlist", "onnx-int8-shortlist")  # only when named: the package needs a shortlist
CUDA_ENGINES = ("pytorch-cache", "onnx-fp32", "onnx-fp16", "ct2-fp16")
HF_CPU_ENGINES = ("hf-fp32", "optimum-fp32")  # Transformers and Optimum (the hf extra): only when named
HF_CUDA_ENGINES = ("hf-fp16", "optimum-fp32")
MARIAN_ENGINES = ("marian-fp32", "marian-int8")  # Marian via pymarian (the marian extra): only when named
RESIDENT_SUFFIX = "-resident"  # an onnx engine with RuntimeOptions(resident="on")
SHORTLIST_SUFFIX = "-shortlist"  # an onnx engine on the package's vocabulary shortlist (the others: without)


def _status_mib(field: str) -> float | None:
    """A field of /proc/self/status (VmRSS, VmHWM) in MiB; None where there is none."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def rss_mib() -> float:
    """Current resident set size of this process (Linux /proc; peak RSS elsewhere)."""
    current = _status_mib("VmRSS")
    return peak_rss_mib() if current is None else current


def peak_rss_mib() -> float:
    """Peak resident set size of this process. Linux: VmHWM, which starts afresh at exec;
    ru_maxrss does not (it keeps the peak of the forked parent's copy, so a child started from
    a big process would report the parent's RSS as its own)."""
    peak = _status_mib("VmHWM")
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 if peak is None else peak  # KiB on Linux


def import_engine(engine: str) -> None:
    """Import the engine's library before the RSS baseline, so the delta is the model and decoding."""
    if engine.startswith("pytorch"):
        import torch  # noqa: F401
    elif engine.startswith("onnx"):
        import onnxruntime  # noqa: F401
    elif engine.startswith("ct2"):
        import ctranslate2  # noqa: F401
    elif engine.startswith("hf"):
        import transformers  # noqa: F401 (imports torch)
    elif engine.startswith("optimum"):
        import optimum.onnxruntime  # noqa: F401 (imports onnxruntime, torch and transformers)
    elif engine.startswith("marian"):
        import pymarian  # noqa: F401
    else:
        raise ValueError(f"unknown engine {engine!r}")


def pytorch_decoder(work: dict[str, Any]) -> tuple[Decoder, dict[str, Any]]:
    import torch

    from training import checkpoint as ckpt_io
    from training.data import pad
    from training.decode import beam_search, greedy_search

    torch.set_num_threads(work["threads"])
    device = work["device"]
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
    model, _, _ = ckpt_io.load_model(work["checkpoint"], device)
    use_cache, beam = work["engine"] == "pytorch-cache", work["beam_size"]

    def run(sources: list[list[int]]) -> list[list[int]]:
        src = pad(sources).to(device)
        if beam == 1:
            hyps = greedy_search(model, src, use_cache=use_cache)
        else:
            hyps = [nb[0] for nb in beam_search(model, src, beam_size=beam, alpha=work["alpha"], use_cache=use_cache)]
        if device == "cuda":
            torch.cuda.synchronize()
        return [h.tokens for h in hyps]

    ran_on = next(model.parameters()).device.type
    return run, {"device": ran_on, "variant": "fp32", "resident": None}


def variant_options(variant: str) -> dict[str, Any]:
    """RuntimeOptions fields for one of our variants as a server would run it: ``int8`` is the int8
    width this CPU runs exactly (int8w8 with VNNI/AMX, engine/cpu.py), any other name that graph."""
    return {"variant": "", "int8": True} if variant == "int8" else {"variant": variant}


def onnx_decoder(work: dict[str, Any]) -> tuple[Decoder, dict[str, Any]]:
    from engine.decoding import DecodeOptions
    from engine.package import ModelPackage
    from engine.runtime import Runtime, RuntimeOptions
    from export.verify import decode_ids

    engine = work["engine"]
    resident = "on" if engine.endswith(RESIDENT_SUFFIX) else "auto"  # auto: on CUDA, off on the CPU
    shortlist = engine.endswith(SHORTLIST_SUFFIX)
    variant = engine.removesuffix(RESIDENT_SUFFIX).removesuffix(SHORTLIST_SUFFIX).split("-")[1]
    # onnx-int8: the int8 width a server runs on this CPU (int8w8 with VNNI/AMX: engine/cpu.py); info names it.
    rt = Runtime(ModelPackage.load(work["package"]),
                 RuntimeOptions(device=work["device"], threads=work["threads"], **variant_options(variant),
                                resident=resident, shortlist=shortlist,
                                spin=SPIN_ASKED if work.get("spin_threads") else SPIN))
    if rt.device != work["device"]:
        raise RuntimeError(f"onnxruntime runs on {rt.device}, not {work['device']} (providers {rt.providers})")
    if shortlist and rt.shortlist is None:
        raise RuntimeError(f"{work['package']} has no {variant} shortlist graph (python -m export.shortlist_graph)")
    options = DecodeOptions(beam_size=work["beam_size"], alpha=work["alpha"])
    info = {"device": rt.device, "variant": rt.variant, "resident": bool(rt.resident)}
    prefix = work.get("prefix", [])  # an imported model's forced target code (NLLB)
    return (lambda sources: [nb[0].tokens for nb in decode_ids(rt, sources, options, prefix=prefix)]), info


CT2_COMPUTE_TYPES = {"fp32": "float32", "int8": "int8", "fp16": "float16"}  # our variant -> CTranslate2's


def ct2_translator(model_dir: str | Path, variant: str, device: str, threads: int) -> Any:
    """CTranslate2 on a converted model: ``variant``'s compute type, ``threads`` intra-op threads,
    one batch at a time (as every engine here is measured)."""
    import ctranslate2

    return ctranslate2.Translator(str(model_dir), device=device, compute_type=CT2_COMPUTE_TYPES[variant],
                                  intra_threads=threads, inter_threads=1)


def ct2_pieces(sp: Any, sources: list[list[int]], keep_eos: bool = False) -> list[list[str]]:
    """Sources (tag + pieces + eos ids) as the pieces CTranslate2 reads. It appends eos to our
    converted models' sources itself; a model converted from a Transformers directory (an
    imported one) takes it in the source (``keep_eos``), as its tokenizer gives it."""
    return [[sp.id_to_piece(i) for i in (s if keep_eos else s[:-1])] for s in sources]


# CTranslate2's start-up log (info level) names the kernels it chose on this CPU: the instruction
# set of its own kernels, whether oneMKL is used (by default only on Intel CPUs) and the library
# behind its float and int8 products (oneMKL or oneDNN). Recorded with every ct2 row, because the
# same wheel runs other kernels on another CPU (docs/BENCHMARKS.md: int8 on 2 threads, AMD).
CT2_KERNEL_LINES = {"Selected ISA": "isa", "Use Intel MKL": "mkl", "SGEMM backend": "sgemm",
                    "GEMM_S8 backend": "gemm_s8"}


def ct2_kernels(log: str) -> dict[str, str]:
    """The kernels CTranslate2's log names: {"isa", "mkl", "sgemm", "gemm_s8"}, those it printed."""
    found: dict[str, str] = {}
    for line in log.splitlines():
        for label, key in CT2_KERNEL_LINES.items():
            head = f"- {label}: "
            if head in line:
                found[key] = line.split(head, 1)[1].split(" (")[0].strip()
    return found


@contextlib.contextmanager
def stderr_captured() -> Iterator[list[str]]:
    """What the process writes to file descriptor 2 inside the block (C++ libraries' logs
    included), handed over as one string in the yielded list when the block ends."""
    got: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield got
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            got.append(tmp.read().decode("utf-8", "replace"))


@contextlib.contextmanager
def ct2_info_log() -> Iterator[list[str]]:
    """CTranslate2 logs at info level inside the block, its output caught as ``stderr_captured``
    gives it; then its level is restored and what was not info (warnings, errors) goes to stderr."""
    import ctranslate2

    level, log = ctranslate2.get_log_level(), []
    ctranslate2.set_log_level(logging.INFO)
    try:
        with stderr_captured() as log:
            yield log
    finally:
        ctranslate2.set_log_level(level)
        for line in "".join(log).splitlines():
            if "[info]" not in line:
                print(line, file=sys.stderr)


def ct2_decoder(work: dict[str, Any]) -> tuple[Decoder, dict[str, Any]]:
    from engine.package import ModelPackage

    sp = ModelPackage.load(work["package"]).load_tokenizer()  # ids <-> pieces, what CTranslate2 reads
    keep_eos = bool(work.get("hf_dir"))  # an imported model's source keeps its eos (ct2_pieces)
    forced = work.get("prefix", [])  # an imported model's forced target code (NLLB): CTranslate2's target_prefix
    with ct2_info_log() as log:  # the kernels it picks for this CPU, logged as the translator loads
        translator = ct2_translator(work["ct2_model"], work["engine"].split("-")[1], work["device"], work["threads"])
    cap = work["max_target_tokens"]

    def run(sources: list[list[int]]) -> list[list[int]]:
        # CT2 takes one length bound per call: the batch's largest per-sentence bound (our rule).
        limit = max(default_max_len(len(s), cap) for s in sources)
        tokens = ct2_pieces(sp, sources, keep_eos)
        prefix = [[sp.id_to_piece(i) for i in forced]] * len(tokens) if forced else None
        results = translator.translate_batch(tokens, target_prefix=prefix, beam_size=work["beam_size"],
                                             length_penalty=work["alpha"], max_decoding_length=limit + len(forced),
                                             max_batch_size=0)
        return [[sp.piece_to_id(p) for p in r.hypotheses[0][len(forced):]] for r in results]

    # CTranslate2 raises when it cannot use the device it was given: where it runs is what was asked
    return run, {"device": translator.device, "variant": work["engine"].split("-")[1], "resident": None,
                 "kernels": ct2_kernels("".join(log))}


def hf_decoder(work: dict[str, Any]) -> tuple[Decoder, dict[str, Any]]:
    """Transformers ``generate()`` on the checkpoint converted by bench/peers/hf_convert.py, or on the
    Transformers directory an imported package came from (fp32 CPU, fp16 CUDA)."""
    import torch

    from bench.peers.hf_convert import generate, load
    from bench.peers.hf_models import batch_generate, load_directory

    torch.set_num_threads(work["threads"])
    device, variant = work["device"], work["engine"].split("-")[1]
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
    imported = bool(work.get("hf_dir"))
    model = load_directory(work["hf_dir"]) if imported else load(work["checkpoint"])[0]
    model = model.to(device, dtype=torch.float16 if variant == "fp16" else torch.float32)
    cap = work["max_target_tokens"]

    def run(sources: list[list[int]]) -> list[list[int]]:
        # generate() takes one length bound per call: the batch's largest per-sentence bound (our rule)
        limit = max(default_max_len(len(s), cap) for s in sources)
        with torch.inference_mode():
            if imported:
                out = batch_generate(model, sources, limit, work["beam_size"], work["alpha"], work.get("prefix", []))
            else:
                out = generate(model, sources, limit, work["beam_size"], work["alpha"])
        if device == "cuda":
            torch.cuda.synchronize()
        return out

    return run, {"device": next(model.parameters()).device.type, "variant": variant, "resident": None}


def optimum_decoder(work: dict[str, Any]) -> tuple[Decoder, dict[str, Any]]:
    """Optimum's ORTModelForSeq2SeqLM on the ONNX export of the converted model (nmt-bench exports it)."""
    import onnxruntime as ort
    import torch
    from optimum.onnxruntime import ORTModelForSeq2SeqLM

    from bench.peers.hf_convert import generate

    torch.set_num_threads(work["threads"])  # generate()'s own tensor work (logits processing, beam bookkeeping)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = work["threads"], 1
    cuda = work["device"] == "cuda"
    if cuda:  # the fp32 export on the CUDA provider with Optimum's IO binding (its cache stays on the GPU)
        from engine.runtime import preload_cuda

        preload_cuda()
    model = ORTModelForSeq2SeqLM.from_pretrained(
        work["optimum_model"], session_options=options, use_io_binding=cuda,
        provider="CUDAExecutionProvider" if cuda else "CPUExecutionProvider")
    device = "cuda" if cuda and model.providers[0] == "CUDAExecutionProvider" else "cpu"
    cap = work["max_target_tokens"]

    def run(sources: list[list[int]]) -> list[list[int]]:
        limit = max(default_max_len(len(s), cap) for s in sources)
        return generate(model, sources, limit, work["beam_size"], work["alpha"])

    return run, {"device": device, "variant": "fp32", "resident": None}


def marian_decoder(work: dict[str, Any]) -> tuple[Decoder, dict[str, Any]]:
    """Marian on the converted checkpoint: whitespace-separated pieces in, pieces out."""
    from bench.peers.marian_convert import translator
    from engine.defaults import OUTPUT_SLOPE
    from engine.package import ModelPackage

    sp = ModelPackage.load(work["package"]).load_tokenizer()
    variant = work["engine"].split("-")[1]
    # Marian bounds outputs by a factor of the source length only (ours adds OUTPUT_MARGIN): the factor is ours.
    marian = translator(work["marian_model"], variant, work["threads"], work["beam_size"], OUTPUT_SLOPE,
                        work["alpha"], max(map(len, work["batches"])))

    def run(sources: list[list[int]]) -> list[list[int]]:
        lines = [" ".join(sp.id_to_piece(i) for i in s[:-1]) for s in sources]  # Marian appends eos itself
        return [[sp.piece_to_id(p) for p in out.split()] for out in marian.translate(lines)]

    return run, {"device": "cpu", "variant": variant, "resident": None}


def build(work: dict[str, Any]) -> tuple[Decoder, dict[str, Any]]:
    """The engine's decoder, and where it runs: {"device", "variant", "resident"}."""
    engine = work["engine"]
    if engine.startswith("pytorch"):
        return pytorch_decoder(work)
    if engine.startswith("onnx"):
        return onnx_decoder(work)
    if engine.startswith("hf"):
        return hf_decoder(work)
    if engine.startswith("optimum"):
        return optimum_decoder(work)
    if engine.startswith("marian"):
        return marian_decoder(work)
    return ct2_decoder(work)


def measure(work: dict[str, Any]) -> dict[str, Any]:
    import_engine(work["engine"])
    base = rss_mib()
    decoder, where = build(work)
    batches: list[list[list[int]]] = work["batches"]
    decoder(batches[0])  # warm-up, untimed
    repeats = work.get("repeats", 1)
    best: list[float] = []
    for r in range(repeats):  # the fastest pass is kept (decoding is deterministic: same outputs)
        seconds, outputs = [], []
        for i, batch in enumerate(batches):
            start = time.perf_counter()
            outputs.extend(decoder(batch))
            seconds.append(time.perf_counter() - start)
            if work.get("progress") and (i + 1) % max(1, len(batches) // 4) == 0:
                print(f"    {work['engine']}: pass {r + 1}/{repeats}, {i + 1}/{len(batches)} batches",
                      file=sys.stderr, flush=True)
        if not best or sum(seconds) < sum(best):
            best = seconds
    return {"batch_seconds": best, "outputs": outputs, "rss_base_mib": round(base, 1),
            "peak_rss_delta_mib": round(peak_rss_mib() - base, 1), **where}


def main() -> int:
    work = json.loads(sys.stdin.read())
    print(json.dumps(measure(work)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
