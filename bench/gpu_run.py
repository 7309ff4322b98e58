"""``python -m bench.gpu_run``: one prepared run of the whole GPU question, phase by phase, with
every number in one JSON file and a summary in Markdown (what scripts/gpu_run.sh runs).

    python -m bench.gpu_run --device cuda --out OUT           # on the GPU host (~7 minutes)
    python -m bench.gpu_run --device cpu --out OUT            # small sizes, the same code, ~2 minutes here
    python -m bench.gpu_run --device cuda --dry-run           # the plan only

Phases (each one's failure is recorded and the next one still runs; each is skipped, with the
reason, when the time left in ``--budget-s``, 480 s on CUDA, is less than it needs):

- ``setup``: the device's name (nvidia-smi, else the CPU model), onnxruntime's providers after
  ``onnxruntime.preload_dlls()``, library versions, other processes on the GPU.
- ``export``: the package (fp32 + fp16 on CUDA, fp32 + int8 on the CPU) from the checkpoint with
  nmt-export, unless ``--package`` already has those variants.
- ``profile``: onnxruntime's profiler on a few decoder steps of the variant the server picks:
  where a step's time goes (op types by kernel time; on CUDA the times are what onnxruntime records
  on the host side of each kernel launch).
- ``correctness``: every variant the server would pick on the device (CUDA: fp16 and fp32 with
  device-resident caches, fp16 with the caches in host memory; CPU: int8 and fp32) against the CPU
  fp32 package on John (the Bible's test split, all directions of the model), greedy and beam 4:
  the share of identical texts and sacrebleu's BLEU of each. The CPU reference runs in parallel
  worker processes beside the device's decoding.
- ``speed``: nmt-bench on the device (greedy and beam 4, batch 1 on a small set, the larger
  batches on a larger one; our fp16/fp32, CTranslate2 when installed, PyTorch on identical
  weights): sentences/s, tokens/s, and GPU memory (peak of nvidia-smi's used memory over the idle
  GPU while each configuration ran).
- ``server``: nmt-serve on the device under ``--clients`` closed-loop clients of nmt-loadtest
  (one sentence a request), greedy and beam: sentences/s, p50/p99, against the offline engine of
  the same variant at the largest batch.

Outputs under ``--out`` (at most three files, so they fit what a GPU call brings back):
``results.json`` (every number, written again after each phase), ``results.md`` (the summary);
scripts/gpu_run.sh adds ``gpu_run.log``. Intermediate files (packages, nmt-bench and loadtest JSON,
profiles) go to ``--work``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, ArgumentParser, UsageError, exit_status_help, fail
from engine.defaults import LENGTH_PENALTY as ALPHA

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("setup", "export", "profile", "correctness", "speed", "server")
JOHN_VERSES = 879  # the test split (John) holds 879 verses per direction
# Per device: what runs when a flag is not given.
DEFAULTS: dict[str, dict[str, Any]] = {
    "cuda": {"verses": JOHN_VERSES, "variants": "fp16,fp32,fp16-host", "correctness_batch": 128,
             "batch_sizes": "1,32,128,256", "batch1_sentences": 32, "bench_sentences": 512,
             "clients": "64,256", "load_seconds": 10.0, "load_warmup": 2.0, "repeats": 1, "budget_s": 480.0,
             "engines": "pytorch-cache,onnx-fp32,onnx-fp16,ct2-fp16"},
    "cpu": {"verses": 8, "variants": "int8,fp32", "correctness_batch": 8,
            "batch_sizes": "1,8", "batch1_sentences": 8, "bench_sentences": 16,
            "clients": "4", "load_seconds": 3.0, "load_warmup": 1.0, "repeats": 1, "budget_s": 110.0,
            "engines": "onnx-fp32,onnx-int8,ct2-fp32"},
}
# What each phase needs at least (seconds), to skip it rather than start it too late.
MIN_SECONDS = {"cuda": {"export": 60, "profile": 15, "correctness": 45, "speed": 60, "server": 40},
               "cpu": {"export": 20, "profile": 3, "correctness": 5, "speed": 10, "server": 8}}
HOST = "-host"  # a variant with the caches in host memory (nmt-serve --device-resident off)


# ---------------------------------------------------------------------------------------------
# Arguments and the plan


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m bench.gpu_run", description=__doc__,
                       epilog=exit_status_help(EXIT_FAILED, EXIT_USAGE))
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="where the run decodes")
    p.add_argument("--out", type=Path, default=Path("runs/gpu-results"),
                   help="results.json and results.md go here")
    p.add_argument("--work", type=Path, help="intermediate files: packages, nmt-bench and loadtest JSON, profiles "
                   "(default: runs/gpu_run-DEVICE)")
    p.add_argument("--checkpoint", default="models/default", help="the model: a checkpoint, a shipped model's "
                   "directory or a run directory")
    p.add_argument("--package", type=Path, help="its model package; exported there when it lacks the device's "
                   "variants (default: WORK/package)")
    p.add_argument("--directions", help="test-split directions of the correctness phase (default: the model's)")
    p.add_argument("--verses", type=int, help="test verses per direction (default: cuda 879, all of John; cpu 8)")
    p.add_argument("--variants", help="variants checked against the CPU fp32 package; '-host' keeps the caches "
                   "in host memory (default: cuda fp16,fp32,fp16-host; cpu int8,fp32)")
    p.add_argument("--correctness-batch", type=int, help="texts per batch in the correctness phase "
                   "(default: cuda 128, cpu 8)")
    p.add_argument("--modes", default="greedy,beam", help="greedy and/or beam (beam: --beam)")
    p.add_argument("--beam", type=int, default=4, help="beam size of the beam mode")
    p.add_argument("--engines", help="nmt-bench engines (default: cuda pytorch-cache,onnx-fp32,onnx-fp16,ct2-fp16; "
                   "cpu onnx-fp32,onnx-int8,ct2-fp32; ct2 only where ctranslate2 is installed, "
                   "onnx-int8 only where the package has it)")
    p.add_argument("--batch-sizes", help="nmt-bench batch sizes (default: cuda 1,32,128,256; cpu 1,8)")
    p.add_argument("--bench-direction", help="the direction nmt-bench decodes (default: the model's first)")
    p.add_argument("--batch1-sentences", type=int, help="sentences of the batch-1 runs (default: cuda 32, cpu 8)")
    p.add_argument("--bench-sentences", type=int, help="sentences of the larger batches (default: cuda 512, cpu 16; "
                   "at least the largest batch)")
    p.add_argument("--repeats", type=int, help="nmt-bench timed passes, the fastest kept (default: 1)")
    p.add_argument("--clients", help="concurrent nmt-loadtest clients against nmt-serve (default: cuda 64,256; "
                   "cpu 4)")
    p.add_argument("--load-seconds", type=float, help="measured seconds per client count (default: cuda 10, cpu 3)")
    p.add_argument("--load-warmup", type=float, help="uncounted seconds before each (default: cuda 2, cpu 1)")
    p.add_argument("--threads", type=int, default=1, help="CPU intra-op threads of the device's engines and the "
                   "server")
    p.add_argument("--workers", type=int, default=0, help="CPU processes of the fp32 reference (0: cores - 2, at "
                   "least 1)")
    p.add_argument("--phases", default=",".join(PHASES), help="which phases run, in their fixed order")
    p.add_argument("--budget-s", type=float, help="seconds this run may take; a phase that would start with less "
                   "time left than it needs is skipped (default: cuda 480, cpu 110)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    return p


def int_list(text: str, flag: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{flag} takes comma-separated integers, not {text!r}") from None
    if not values or min(values) < 1:
        raise UsageError(f"{flag} takes comma-separated integers of at least 1, not {text!r}")
    return values


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    d = DEFAULTS[args.device]
    for name in ("verses", "variants", "correctness_batch", "batch1_sentences", "bench_sentences", "load_seconds",
                 "load_warmup", "repeats", "budget_s", "engines"):
        if getattr(args, name) is None:
            setattr(args, name, d[name])
    args.batch_sizes = int_list(args.batch_sizes or d["batch_sizes"], "--batch-sizes")
    args.clients = int_list(args.clients or d["clients"], "--clients")
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    args.phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    if set(args.modes) - {"greedy", "beam"} or not args.modes:
        raise UsageError("--modes takes greedy and/or beam")
    if set(args.phases) - set(PHASES):
        raise UsageError(f"--phases: choose from {', '.join(PHASES)}")
    for v in args.variants:
        if v.removesuffix(HOST) not in ("fp32", "fp16", "int8"):
            raise UsageError(f"--variants: {v} is not fp32, fp16 or int8 (with {HOST} for caches in host memory)")
    if args.device == "cpu" and any(v.startswith("fp16") or v.endswith(HOST) for v in args.variants):
        raise UsageError("--variants: fp16 and -host variants are CUDA's; on the CPU choose int8 and fp32")
    for name in ("verses", "correctness_batch", "batch1_sentences", "bench_sentences", "repeats", "beam", "threads"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if args.workers < 0 or args.budget_s <= 0 or args.load_seconds <= 0 or args.load_warmup < 0:
        raise UsageError("--workers, --budget-s, --load-seconds and --load-warmup must be positive")
    big = [b for b in args.batch_sizes if b > 1]
    if big and args.bench_sentences < max(big):
        raise UsageError(f"--bench-sentences {args.bench_sentences} is less than the largest batch {max(big)}")
    if args.verses > JOHN_VERSES:
        args.verses = JOHN_VERSES
    args.work = args.work or Path(f"runs/gpu_run-{args.device}")
    args.package = args.package or args.work / "package"
    return args


def needed_variants(device: str, variants: list[str]) -> set[str]:
    """The graph variants the package must have: what --variants names, fp32 (the reference)."""
    return {v.removesuffix(HOST) for v in variants} | {"fp32"}


def plan_lines(args: argparse.Namespace) -> list[str]:
    dev = args.device
    py = "python"
    need = needed_variants(dev, args.variants)
    flags = " ".join(f"--{v}" for v in sorted(need - {"fp32"}))
    big = [b for b in args.batch_sizes if b > 1]
    lines = [f"device {dev}; budget {args.budget_s:.0f} s; results in {args.out}/results.json and results.md; "
             f"intermediate files in {args.work}",
             "setup: name the device (nvidia-smi or the CPU model), onnxruntime.preload_dlls(), print the providers",
             f"export: {py} -m export.onnx_export {args.checkpoint} {args.package} {flags} --force   "
             f"(only when {args.package} lacks {', '.join(sorted(need))})",
             f"profile: onnxruntime profiler, one batch of {min(32, args.verses)} greedy, the server's "
             f"{dev} variant; top op types of a decoder step",
             f"correctness: {', '.join(args.variants)} on {dev} against fp32 on the CPU ({args.workers or 'cores - 2'} "
             f"worker processes), {args.verses} verses of John per direction, {' and '.join(args.modes)} "
             f"(beam {args.beam}), batch {args.correctness_batch}: same-text % and BLEU",
             f"speed: {py} -m bench.nmt_bench --device {dev} --engines {','.join(args.engines)} --modes "
             f"{','.join(args.modes)} --beam {args.beam} --repeats {args.repeats}: batch 1 on "
             f"{args.batch1_sentences} sentences" + (f", batches {','.join(map(str, big))} on "
                                                      f"{args.bench_sentences}" if big else "")
             + "; GPU memory from nvidia-smi while each configuration runs",
             f"server: nmt-serve --device {dev} (its default variant) under nmt-loadtest --concurrency "
             f"{','.join(map(str, args.clients))} --duration {args.load_seconds:g} --warmup {args.load_warmup:g}, "
             f"{' and '.join(args.modes)}; against the offline engine at batch {max(args.batch_sizes)}",
             f"phases that run: {', '.join(p for p in PHASES if p in args.phases)}"]
    return lines


# ---------------------------------------------------------------------------------------------
# Small helpers


def log(msg: str) -> None:
    print(f"[gpu_run {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def child_env() -> dict[str, str]:
    path = [str(ROOT), str(ROOT / "protos")]
    if os.environ.get("PYTHONPATH"):
        path.append(os.environ["PYTHONPATH"])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def nvidia_smi(*query: str) -> list[str]:
    """nvidia-smi's CSV answer lines ([] without a GPU or nvidia-smi)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", *query, "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [x.strip() for x in out.stdout.splitlines() if x.strip()] if out.returncode == 0 else []


def gpu_used_mib() -> float | None:
    lines = nvidia_smi("--query-gpu=memory.used", "-i", "0")
    try:
        return float(lines[0]) if lines else None
    except ValueError:
        return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


class GpuMemory:
    """Samples nvidia-smi's used memory in a thread; the peak above the idle GPU per label."""

    def __init__(self, interval: float = 0.25) -> None:
        self.interval, self.label = interval, ""
        self.base = gpu_used_mib()
        self.peaks: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True) if self.base is not None else None

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            used, label = gpu_used_mib(), self.label
            if used is not None and label:
                self.peaks[label] = max(self.peaks.get(label, 0.0), used - (self.base or 0.0))

    def __enter__(self) -> GpuMemory:
        if self._thread:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)


# ---------------------------------------------------------------------------------------------
# The decoding child: python -m bench.gpu_run --worker WORK.json


def worker_main(path: str) -> int:
    work = json.loads(Path(path).read_text())
    Path(path).unlink()
    print(json.dumps(decode_work(work)))
    return EXIT_OK


def open_runtime(work: dict[str, Any]) -> Any:
    from bench.engines import variant_options
    from engine.package import ModelPackage
    from engine.runtime import Runtime, RuntimeOptions

    variant = work["variant"]
    base = variant.removesuffix(HOST)
    resident = "off" if variant.endswith(HOST) else "auto"
    return Runtime(ModelPackage.load(work["package"]),
                   RuntimeOptions(device=work["device"], threads=work["threads"], resident=resident,
                                  **variant_options(base)))


def profiled_sessions(directory: Path) -> Any:
    """Patch engine.runtime's sessions to write onnxruntime profiles into ``directory`` (a child only)."""
    import onnxruntime as ort

    from engine import runtime

    original = runtime.Runtime._session
    real = ort.SessionOptions

    def session(self: Any, path: Any, providers: list[str], options: Any) -> Any:
        def make() -> Any:
            o = real()
            o.enable_profiling = True
            o.profile_file_prefix = str(directory / Path(path).stem)
            return o

        ort.SessionOptions = make
        try:
            return original(self, path, providers, options)
        finally:
            ort.SessionOptions = real

    runtime.Runtime._session = session


def decode_work(work: dict[str, Any]) -> dict[str, Any]:
    from engine.decoding import DecodeOptions
    from export.verify import decode_ids

    profile_dir = Path(work["profile_dir"]) if work.get("profile_dir") else None
    if profile_dir:
        profile_dir.mkdir(parents=True, exist_ok=True)
        profiled_sessions(profile_dir)
    rt = open_runtime(work)
    if rt.device != work["device"]:
        raise RuntimeError(f"onnxruntime runs on {rt.device}, not {work['device']} (providers {rt.providers})")
    options = DecodeOptions(beam_size=work["beam"], alpha=work["alpha"])
    batches: list[list[list[int]]] = work["batches"]
    outputs: list[list[int]] = []
    passes = 2 if profile_dir else 1  # profiled: the first pass warms up, the second is the one read
    start = time.perf_counter()
    for _ in range(passes):
        outputs = []
        start = time.perf_counter()
        for batch in batches:
            outputs += [nb[0].tokens for nb in decode_ids(rt, batch, options)]
    seconds = time.perf_counter() - start
    result: dict[str, Any] = {"outputs": outputs, "seconds": seconds, "device": rt.device, "variant": rt.variant,
                              "resident": bool(rt.resident)}
    if profile_dir:
        files = {}
        for name in ("encoder", "decoder", "step_session", "rows_session"):
            session = getattr(rt, name, None)
            if session is not None:
                files[name.removesuffix("_session")] = session.end_profiling()
        result["profile_files"] = files
        result["step_graph"] = "step" if rt.resident else "decoder"
    return result


def start_worker(work: dict[str, Any], threads: int) -> subprocess.Popen:
    """A decoding child on ``work`` (written to a file beside the run's other intermediate files)."""
    jobs = Path(work["jobs_dir"])
    jobs.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(suffix=".json", dir=jobs)
    with os.fdopen(fd, "w") as f:
        json.dump(work, f)
    env = {**child_env(), "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    return subprocess.Popen([sys.executable, "-m", "bench.gpu_run", "--worker", name], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def finish_worker(proc: subprocess.Popen, timeout: float) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=max(timeout, 1.0))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise RuntimeError(f"a decoding worker ran past {timeout:.0f} s and was stopped") from None
    if proc.returncode:
        lines = [x for x in err.strip().splitlines() if x.strip()]
        raise RuntimeError(lines[-1] if lines else f"a decoding worker exited with {proc.returncode}")
    return json.loads(out.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# The sentences: John, from the Bible corpus whatever the model was trained on


@dataclasses.dataclass
class Sentences:
    items: list[Any]  # bench.nmt_bench.Item
    tokenizer: Any
    checkpoint: Path
    directions: list[str]


def load_sentences(args: argparse.Namespace) -> Sentences:
    from bench.nmt_bench import Item
    from training import checkpoint as ckpt_io
    from training.config import RunConfig
    from training.data import bible_pairs

    path = ckpt_io.resolve(args.checkpoint)
    ckpt = ckpt_io.load(path)
    tokenizer = ckpt_io.load_tokenizer(ckpt)
    data = RunConfig.from_dict(ckpt["config"]).data
    directions = ([d.strip() for d in args.directions.split(",") if d.strip()] if args.directions
                  else list(data.directions))
    # the Bible's test split (John), whatever corpus the model was trained on: one version a language
    bible = dataclasses.replace(data, corpus="bible", directions=tuple(directions))
    by_dir: dict[str, list[Any]] = {d: [] for d in directions}
    for p in bible_pairs(bible, "test"):
        got = by_dir.get(p.direction)
        if got is not None and len(got) < args.verses:
            got.append(p)
    items = [Item(p.src, p.src_lang, p.tgt_lang, p.tgt, *tokenizer.encode_protected(p.src, p.tgt_lang))
             for d in directions for p in by_dir[d]]
    if not items:
        raise RuntimeError(f"no test sentences for {', '.join(directions)}")
    return Sentences(items, tokenizer, path, directions)


# ---------------------------------------------------------------------------------------------
# The run


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.started = time.monotonic()
        self.result: dict[str, Any] = {
            "device": args.device, "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": "python -m bench.gpu_run " + " ".join(sys.argv[1:]),
            "plan": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "dry_run"},
            "phases": {}}
        self._sentences: Sentences | None = None

    # -- bookkeeping
    def left(self) -> float:
        return self.args.budget_s - (time.monotonic() - self.started)

    def write(self) -> None:
        out = self.args.out
        out.mkdir(parents=True, exist_ok=True)
        self.result["elapsed_s"] = round(time.monotonic() - self.started, 1)
        (out / "results.json").write_text(json.dumps(self.result, indent=1, ensure_ascii=False) + "\n")
        (out / "results.md").write_text(markdown(self.result))

    def no_cuda(self, name: str) -> str:
        """Why phase ``name`` cannot run on CUDA here ('' when it can, or on the CPU)."""
        if self.args.device != "cuda" or name in ("setup", "export"):
            return ""
        host = self.result.get("host", {})
        ort_cuda = "CUDAExecutionProvider" in host.get("providers", [])
        if name == "speed":
            return "" if ort_cuda or host.get("torch_cuda") else "no CUDA here: neither onnxruntime nor torch sees one"
        return "" if ort_cuda else "onnxruntime has no CUDAExecutionProvider here (carry the .gpu/ chunks)"

    def phase(self, name: str, fn: Any) -> None:
        if name not in self.args.phases:
            return
        need = MIN_SECONDS[self.args.device].get(name, 0)
        why = self.no_cuda(name)
        if why or (name != "setup" and self.left() < need):
            why = why or f"{self.left():.0f} s left of the budget, the phase needs at least {need} s"
            self.result["phases"][name] = {"status": "skipped", "why": why}
            log(f"{name}: skipped ({why})")
            self.write()
            return
        log(f"{name} ...")
        start = time.monotonic()
        try:
            fn()
            status = {"status": "ok"}
        except Exception as e:  # one failing phase must not lose the others
            status = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
            log(f"{name}: failed: {status['error']}")
        status["seconds"] = round(time.monotonic() - start, 1)
        self.result["phases"][name] = status
        log(f"{name}: {status['status']} in {status['seconds']} s")
        self.write()

    @property
    def sentences(self) -> Sentences:
        if self._sentences is None:
            self._sentences = load_sentences(self.args)
        return self._sentences

    # -- phases
    def setup(self) -> None:
        args = self.args
        info: dict[str, Any] = {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version()}
        gpus = nvidia_smi("--query-gpu=name,memory.total,driver_version")
        if gpus:
            name, total, driver = (x.strip() for x in gpus[0].split(","))
            info["gpu"] = {"name": name, "memory_mib": float(total), "driver": driver, "count": len(gpus)}
            others = nvidia_smi("--query-compute-apps=pid,process_name,used_memory")
            info["gpu_processes_at_start"] = others  # a training run beside the benchmark skews its numbers
            if others:
                log(f"warning: the GPU is not idle: {others}; the speed numbers share it")
        self.result["device_name"] = info.get("gpu", {}).get("name") if args.device == "cuda" else info["cpu"]
        try:
            import onnxruntime as ort

            preload = getattr(ort, "preload_dlls", None)
            info["preload_dlls"] = "called" if preload else f"onnxruntime {ort.__version__} has none"
            if preload and args.device == "cuda":
                try:
                    preload(cuda=True, cudnn=True, msvc=False)
                except Exception as e:
                    info["preload_dlls"] = f"failed: {e}"
            info["onnxruntime"] = ort.__version__
            info["providers"] = ort.get_available_providers()
        except ImportError as e:
            info["providers"] = []
            info["onnxruntime"] = f"not importable: {e}"
        log(f"device: {self.result['device_name']}; onnxruntime {info.get('onnxruntime')} providers "
            f"{info['providers']}")
        versions = {}
        for lib in ("torch", "ctranslate2", "sacrebleu", "grpc", "numpy"):
            if importlib.util.find_spec(lib) is None:
                versions[lib] = None
                continue
            try:
                versions[lib] = __import__(lib).__version__
            except Exception as e:  # a library that cannot load here: say so
                versions[lib] = f"import failed: {e}"
        info["versions"] = versions
        if args.device == "cuda":
            if "CUDAExecutionProvider" not in info["providers"]:
                log("warning: onnxruntime has no CUDAExecutionProvider: carry the .gpu/ chunks (pack.sh) and "
                    "run their take.sh; onnxruntime engines will fail on cuda")
            if versions.get("torch"):
                import torch

                info["torch_cuda"] = torch.cuda.is_available()
        self.result["host"] = info

    def export(self) -> None:
        from engine.package import ModelPackage, PackageError

        args = self.args
        need = needed_variants(args.device, args.variants)
        have: set[str] = set()
        try:
            pkg = ModelPackage.load(args.package)
            have = set(pkg.variants) | {"fp32"}
            have |= {"int8"} if any(v.startswith("int8") for v in pkg.variants) else set()
        except (FileNotFoundError, PackageError, OSError):
            pass
        info: dict[str, Any] = {"package": str(args.package), "needed": sorted(need)}
        if need <= have:
            info["exported"] = False
            log(f"export: {args.package} has {', '.join(sorted(need))}; not exported again")
        else:
            flags = [f"--{v}" for v in sorted(need - {"fp32"})]
            cmd = [sys.executable, "-m", "export.onnx_export", str(args.checkpoint), str(args.package), *flags,
                   "--force"]
            log("export: " + " ".join(cmd[1:]))
            start = time.monotonic()
            proc = subprocess.run(cmd, cwd=ROOT, env=child_env(), capture_output=True, text=True,
                                  timeout=max(self.left(), 30))
            if proc.returncode:
                tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
                raise RuntimeError(f"nmt-export failed ({proc.returncode}): {tail}")
            info.update({"exported": True, "seconds": round(time.monotonic() - start, 1), "command": " ".join(cmd[1:])})
        pkg = ModelPackage.load(args.package)
        info["variants"] = sorted(pkg.variants)
        info["resident_variants"] = sorted(pkg.resident_variants)
        self.result["export"] = info

    def work_for(self, variant: str, batches: list[list[list[int]]], beam: int, device: str, threads: int,
                 profile_dir: Path | None = None) -> dict[str, Any]:
        return {"jobs_dir": str(self.args.work / "jobs"), "package": str(self.args.package), "device": device,
                "variant": variant, "threads": threads,
                "beam": beam, "alpha": ALPHA, "batches": batches,
                "profile_dir": str(profile_dir) if profile_dir else ""}

    def server_variant(self) -> str:
        """The variant nmt-serve picks on the device, by default."""
        from engine.package import ModelPackage

        variants = ModelPackage.load(self.args.package).variants
        if self.args.device == "cuda":
            return "fp16" if "fp16" in variants else "fp32"
        return "int8" if any(v.startswith("int8") for v in variants) else "fp32"

    def profile(self) -> None:
        s = self.sentences
        items = s.items[: min(32, self.args.verses)]  # the first direction's first verses
        batch = [[it.ids for it in items]]
        directory = self.args.work / "profile"
        shutil.rmtree(directory, ignore_errors=True)
        variant = self.server_variant()
        proc = start_worker(self.work_for(variant, batch, 1, self.args.device, self.args.threads, directory),
                            self.args.threads)
        got = finish_worker(proc, self.left())
        step = got["step_graph"]
        summary = profile_summary(Path(got["profile_files"][step]))
        summary.update({"variant": got["variant"], "resident": got["resident"], "device": got["device"],
                        "graph": step, "rows": len(batch[0]), "decode_seconds": round(got["seconds"], 4)})
        others = {}
        for name, path in got["profile_files"].items():
            if name != step:
                others[name] = profile_summary(Path(path), top=3)
        summary["other_graphs"] = others
        self.result["profile"] = summary
        if summary.get("top_ops"):
            log("profile: " + ", ".join(f"{o['op']} {o['share']:.0%}" for o in summary["top_ops"][:5]))

    def correctness(self) -> None:
        from bench.nmt_bench import make_batches

        args, s = self.args, self.sentences
        items = s.items
        ncpu = os.cpu_count() or 2
        workers = args.workers or max(1, ncpu - 2)
        beams = {"greedy": 1, "beam": args.beam}
        batches = make_batches(items, args.correctness_batch)
        order = [i for b in batches for i in b.rows]
        ids = [[items[i].ids for i in b.rows] for b in batches]

        def texts_of(outputs: list[list[int]]) -> list[str]:
            texts = [""] * len(items)
            for i, out in zip(order, outputs):
                texts[i] = s.tokenizer.decode_restored(out, items[i].originals)
            return texts

        # The reference: fp32 on the CPU, the batches dealt round-robin over the workers, all modes at once.
        ref_procs: dict[str, list[tuple[list[int], subprocess.Popen]]] = {}
        for mode in args.modes:
            ref_procs[mode] = []
            for w in range(min(workers, len(ids))):
                mine = list(range(w, len(ids), workers))
                proc = start_worker(self.work_for("fp32", [ids[k] for k in mine], beams[mode], "cpu", 1), 1)
                ref_procs[mode].append((mine, proc))
        log(f"correctness: CPU fp32 reference in {sum(len(v) for v in ref_procs.values())} processes, "
            f"{len(items)} sentences x {len(args.modes)} modes")
        try:
            self.compare(items, ids, order, beams, ref_procs, workers, texts_of)
        finally:  # a failure leaves no worker behind
            for procs in ref_procs.values():
                for _, proc in procs:
                    if proc.poll() is None:
                        proc.kill()
                        proc.communicate()

    def compare(self, items: list[Any], ids: list[list[list[int]]], order: list[int], beams: dict[str, int],
                ref_procs: dict[str, list[tuple[list[int], subprocess.Popen]]], workers: int, texts_of: Any) -> None:
        """The device's variants decoded while the reference runs, then compared with it."""
        from bench.nmt_bench import bleu

        args, s = self.args, self.sentences
        device_runs: dict[tuple[str, str], dict[str, Any]] = {}
        for variant in args.variants:
            for mode in args.modes:
                try:
                    got = finish_worker(start_worker(self.work_for(variant, ids, beams[mode], args.device,
                                                                   args.threads), args.threads), self.left())
                    device_runs[(variant, mode)] = got
                    log(f"correctness: {variant} {mode} on {got['device']} ({got['variant']}, resident "
                        f"{got['resident']}): {got['seconds']:.1f} s")
                except Exception as e:
                    device_runs[(variant, mode)] = {"error": f"{type(e).__name__}: {e}"}
                    log(f"correctness: {variant} {mode} failed: {e}")
        reference: dict[str, list[str]] = {}
        ref_seconds: dict[str, float] = {}
        for mode, procs in ref_procs.items():
            outputs: list[list[int]] = [[] for _ in ids]
            for mine, proc in procs:
                got = finish_worker(proc, self.left() + 60)
                per_batch = iter(got["outputs"])
                for k in mine:
                    outputs[k] = [next(per_batch) for _ in ids[k]]
                ref_seconds[mode] = round(max(ref_seconds.get(mode, 0.0), got["seconds"]), 1)  # the slowest worker
            reference[mode] = texts_of([o for batch in outputs for o in batch])
        refs = [it.ref for it in items]
        dirs = [f"{it.src_lang}-{it.tgt_lang}" for it in items]
        rows = []
        for mode in args.modes:
            rows.append({"variant": "fp32", "device": "cpu", "mode": mode, "reference": True,
                         "sentences": len(items), "same_text_pct": 100.0,
                         "bleu": bleu(reference[mode], refs), "bleu_by_direction": by_direction(
                             reference[mode], refs, dirs, lambda h, r, _: bleu(h, r))})
        for (variant, mode), got in device_runs.items():
            row: dict[str, Any] = {"variant": variant, "mode": mode, "sentences": len(items)}
            if "error" in got:
                rows.append({**row, "error": got["error"]})
                continue
            texts = texts_of(got["outputs"])
            same = [a == b for a, b in zip(texts, reference[mode])]
            row.update({"device": got["device"], "graphs": got["variant"], "resident": got["resident"],
                        "decode_seconds": round(got["seconds"], 2),
                        "same_text_pct": round(100.0 * sum(same) / len(same), 2),
                        "same_text_by_direction": by_direction(texts, reference[mode], dirs, same_pct),
                        "bleu": bleu(texts, refs),
                        "bleu_by_direction": by_direction(texts, refs, dirs, lambda h, r, _: bleu(h, r)),
                        "examples_that_differ": [
                            {"source": items[i].src, "cpu_fp32": reference[mode][i], variant: texts[i]}
                            for i in [k for k, ok in enumerate(same) if not ok][:3]]})
            rows.append(row)
        self.result["correctness"] = {"reference": "fp32 on the CPU", "reference_seconds": ref_seconds,
                                      "reference_workers": workers, "directions": s.directions,
                                      "verses_per_direction": args.verses, "batch": args.correctness_batch,
                                      "beam": args.beam, "rows": rows}

    def bench_engines(self) -> tuple[list[str], list[str]]:
        """The engines nmt-bench can run here, and notes on those it cannot."""
        from engine.package import ModelPackage

        variants = ModelPackage.load(self.args.package).variants
        engines, notes = [], []
        host = self.result.get("host", {})
        for e in self.args.engines:
            if self.args.device == "cuda" and e.startswith("onnx") and "CUDAExecutionProvider" not in host.get(
                    "providers", []):
                notes.append(f"{e}: not run, onnxruntime has no CUDAExecutionProvider here")
            elif self.args.device == "cuda" and e.startswith("pytorch") and not host.get("torch_cuda"):
                notes.append(f"{e}: not run, torch sees no CUDA device")
            elif e.startswith("ct2") and importlib.util.find_spec("ctranslate2") is None:
                notes.append(f"{e}: not run, ctranslate2 is not installed here (pip install ctranslate2)")
            elif e == "onnx-int8" and not any(v.startswith("int8") for v in variants):
                notes.append(f"{e}: not run, the package has no int8 graphs")
            elif e == "onnx-fp16" and "fp16" not in variants:
                notes.append(f"{e}: not run, the package has no fp16 graphs")
            else:
                engines.append(e)
        return engines, notes

    def speed(self) -> None:
        args, s = self.args, self.sentences
        direction = args.bench_direction or s.directions[0]
        pairs = bench_pairs(s.checkpoint, direction, max(args.bench_sentences, args.batch1_sentences))
        tsv = args.work / f"bench-{direction}.tsv"
        tsv.parent.mkdir(parents=True, exist_ok=True)
        tsv.write_text("".join(f"{a}\t{b}\n" for a, b in pairs), encoding="utf-8")
        engines, notes = self.bench_engines()
        if not engines:
            raise RuntimeError("no engine can run here: " + "; ".join(notes))
        runs = []  # the larger batches first: what a GPU is for, should the time run out
        big = [b for b in args.batch_sizes if b > 1]
        if big:
            runs.append((big, min(args.bench_sentences, len(pairs))))
        if 1 in args.batch_sizes:
            runs.append(([1], min(args.batch1_sentences, len(pairs))))
        rows: list[dict[str, Any]] = []
        meta: list[dict[str, Any]] = []
        for n, (sizes, sentences) in enumerate(runs):
            if self.left() < MIN_SECONDS[args.device]["speed"] / 2:
                notes.append(f"batches {sizes}: skipped, out of time")
                continue
            out = args.work / f"nmt_bench-{n}.json"
            cmd = [sys.executable, "-m", "bench.nmt_bench", "--checkpoint", str(s.checkpoint), "--package",
                   str(args.package), "--input", str(tsv), "--directions", direction, "--sentences", str(sentences),
                   "--device", args.device, "--engines", ",".join(engines), "--modes", ",".join(args.modes),
                   "--beam", str(args.beam), "--batch-sizes", ",".join(map(str, sizes)), "--repeats",
                   str(args.repeats), "--threads", str(args.threads), "--json", str(out)]
            log("speed: " + " ".join(cmd[1:]))
            peaks = run_watched(cmd, self.left())
            got = json.loads(out.read_text())
            meta.append({k: got.get(k) for k in ("command", "sentences", "mean_source_tokens", "skipped", "targets",
                                                 "same_text_reference")})
            for row in got.get("rows", []):
                row.pop("texts", None)
                key = f"{row['engine']} {row['mode']} {row['batch_size']}"
                row["gpu_mem_mib"] = round(peaks[key], 1) if key in peaks else None
                rows.append(row)
        self.result["speed"] = {"direction": direction, "engines": engines, "notes": notes, "runs": meta,
                                "rows": rows}

    def server(self) -> None:
        from server.child import ServerProcess, process_rss_mib

        args, s = self.args, self.sentences
        direction = args.bench_direction or s.directions[0]
        src, tgt = direction.split("-")
        sources = args.work / f"load-{direction}.txt"
        sources.parent.mkdir(parents=True, exist_ok=True)
        sources.write_text("".join(a + "\n" for a, _ in bench_pairs(s.checkpoint, direction, JOHN_VERSES)),
                           encoding="utf-8")
        beam = max(args.beam if "beam" in args.modes else 1, 1)
        rows_cap = max(64, max(args.clients) * beam)
        extra = ["--max-queue", str(max(1024, 4 * max(args.clients))), "--max-tokens-in-flight",
                 str(max(65536, rows_cap * 256))]
        beams = {"greedy": 1, "beam": args.beam}
        rows = []
        with GpuMemory() as mem, ServerProcess(args.package, args.threads, max_batch_rows=rows_cap,
                                               device=args.device, extra=extra,
                                               log=args.work / "server.log") as srv:
            from bench.nmt_bench import server_model

            model = server_model(srv.address)
            where = {"device": model.device, "variant": model.variant, "resident": bool(model.device_resident)}
            if model.device != args.device:
                raise RuntimeError(f"nmt-serve --device {args.device} came up on {model.device}")
            log(f"server: {where}, max batch rows {rows_cap}")
            for mode in args.modes:
                mem.label = mode
                out = args.work / f"load-{mode}.json"
                cmd = [sys.executable, "-m", "clients.loadtest", "--address", srv.address, "-s", src, "-t", tgt,
                       "-i", str(sources), "--concurrency", ",".join(map(str, args.clients)), "--duration",
                       str(args.load_seconds), "--warmup", str(args.load_warmup), "--beam", str(beams[mode]),
                       "--timeout", "120", "--json", str(out)]
                log("server: " + " ".join(cmd[1:]))
                proc = subprocess.run(cmd, cwd=ROOT, env=child_env(), capture_output=True, text=True,
                                      timeout=max(self.left() + 60, 30))
                if not out.exists():
                    tail = "\n".join(proc.stderr.strip().splitlines()[-3:])
                    rows.append({"mode": mode, "error": f"nmt-loadtest exited {proc.returncode}: {tail}"})
                    continue
                for level in json.loads(out.read_text())["levels"]:
                    rows.append({"mode": mode, "clients": int(level["level"]),
                                 "sentences_per_s": round(level["sentences_per_s"], 2),
                                 "requests_per_s": round(level["requests_per_s"], 2),
                                 "tokens_per_s": round(level["target_tokens_per_s"], 1),
                                 "p50_ms": round(level["latency_ms"]["p50"], 1),
                                 "p99_ms": round(level["latency_ms"]["p99"], 1),
                                 "requests": level["requests"], "errors": level["errors"]})
            peak_rss = process_rss_mib(srv.pid)
        offline = self.offline_reference(where["variant"])
        for row in rows:
            ref = offline.get(row["mode"])
            if ref and "sentences_per_s" in row:
                row["offline_sentences_per_s"] = ref["sentences_per_s"]
                row["offline_batch"] = ref["batch_size"]
                row["server_vs_offline"] = round(row["sentences_per_s"] / ref["sentences_per_s"], 3)
        self.result["server"] = {**where, "direction": direction, "max_batch_rows": rows_cap,
                                 "offline_engine": f"onnx-{where['variant'].split('w')[0]}",
                                 "peak_rss_mib": round(peak_rss, 1),
                                 "gpu_mem_mib": {k: round(v, 1) for k, v in mem.peaks.items()}, "rows": rows}

    def offline_reference(self, variant: str) -> dict[str, dict[str, Any]]:
        """Per mode, the offline engine of the server's variant at its largest batch (speed phase)."""
        engine = "onnx-int8" if variant.startswith("int8") else f"onnx-{variant}"
        found: dict[str, dict[str, Any]] = {}
        for row in self.result.get("speed", {}).get("rows", []):
            if row.get("engine") == engine and not row.get("error"):
                best = found.get(row["mode"])
                if best is None or row["batch_size"] > best["batch_size"]:
                    found[row["mode"]] = row
        return found

    def go(self) -> int:
        self.args.work.mkdir(parents=True, exist_ok=True)
        for name in PHASES:
            self.phase(name, getattr(self, name))
        self.result["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.write()
        log(f"results: {self.args.out / 'results.json'} and {self.args.out / 'results.md'}")
        failed = [n for n, p in self.result["phases"].items() if p["status"] == "failed"]
        return EXIT_FAILED if failed else EXIT_OK


def bench_pairs(checkpoint: Path, direction: str, n: int) -> list[tuple[str, str]]:
    """The first ``n`` test verses (John) of ``direction``: (source, reference)."""
    from training import checkpoint as ckpt_io
    from training.config import RunConfig
    from training.data import bible_pairs

    data = RunConfig.from_dict(ckpt_io.load(checkpoint)["config"]).data
    bible = dataclasses.replace(data, corpus="bible", directions=(direction,))
    return [(p.src, p.tgt) for p in bible_pairs(bible, "test") if p.direction == direction][:n]


def by_direction(hyps: list[str], refs: list[Any], dirs: list[str], score: Any) -> dict[str, Any]:
    out = {}
    for d in dict.fromkeys(dirs):
        sel = [i for i, x in enumerate(dirs) if x == d]
        out[d] = score([hyps[i] for i in sel], [refs[i] for i in sel], d)
    return out


def same_pct(a: list[str], b: list[str], _: str) -> float:
    return round(100.0 * sum(x == y for x, y in zip(a, b)) / max(len(a), 1), 2)


def run_watched(cmd: list[str], timeout: float) -> dict[str, float]:
    """Run nmt-bench, echo its output, and sample GPU memory per configuration it announces
    ("[n/N] engine mode batch B"): the peak above the idle GPU per "engine mode B"."""
    pattern = re.compile(r"^\[\d+/\d+\] (\S+) (greedy|beam) batch (\d+)")
    deadline = time.monotonic() + max(timeout, 30)
    with GpuMemory() as mem:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, bufsize=1)
        assert proc.stdout is not None
        killer = threading.Timer(max(timeout, 30), proc.kill)
        killer.start()
        try:
            for line in proc.stdout:
                print("    " + line.rstrip(), flush=True)
                m = pattern.match(line.strip())
                if m:
                    mem.label = f"{m.group(1)} {m.group(2)} {m.group(3)}"
            proc.wait()
        finally:
            killer.cancel()
        if time.monotonic() > deadline:
            raise RuntimeError(f"nmt-bench ran past {timeout:.0f} s and was stopped")
        if proc.returncode:
            raise RuntimeError(f"nmt-bench exited with {proc.returncode}")
    return mem.peaks


def profile_summary(path: Path, top: int = 10) -> dict[str, Any]:
    """An onnxruntime profile: the runs of the second (timed) half, their mean time, and kernel time
    by op type (share of all kernel time) and the slowest nodes."""
    events = json.loads(path.read_text())
    runs = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])
    if not runs:
        return {"runs": 0, "file": path.name}
    start = runs[len(runs) // 2]["ts"] if len(runs) > 1 else runs[0]["ts"]
    timed = [e for e in runs if e["ts"] >= start]
    by_op: dict[str, float] = {}
    by_node: dict[str, float] = {}
    for e in events:
        if e.get("cat") != "Node" or e["ts"] < start or not e.get("name", "").endswith("_kernel_time"):
            continue
        op = e.get("args", {}).get("op_name", "?")
        by_op[op] = by_op.get(op, 0.0) + e["dur"]
        node = e["name"].removesuffix("_kernel_time")
        by_node[node] = by_node.get(node, 0.0) + e["dur"]
    kernels = sum(by_op.values())
    run_us = sum(e["dur"] for e in timed)
    ops = sorted(by_op.items(), key=lambda kv: -kv[1])[:top]
    nodes = sorted(by_node.items(), key=lambda kv: -kv[1])[:top]
    return {"runs": len(timed), "mean_run_ms": round(run_us / len(timed) / 1000, 3),
            "kernel_share_of_run": round(kernels / run_us, 3) if run_us else None,
            "top_ops": [{"op": op, "ms_per_run": round(us / len(timed) / 1000, 4),
                         "share": round(us / kernels, 4) if kernels else 0.0} for op, us in ops],
            "top_nodes": [{"node": n, "ms_per_run": round(us / len(timed) / 1000, 4)} for n, us in nodes]}


# ---------------------------------------------------------------------------------------------
# The summary


def fmt(x: Any, digits: int = 1) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return str(x)


def markdown(r: dict[str, Any]) -> str:
    host = r.get("host", {})
    lines = [f"# GPU run: {r['device']}", "",
             f"- device: **{r.get('device_name') or 'unknown'}**; CPU {host.get('cpu', '?')} ({host.get('cores')} "
             f"cores); onnxruntime {host.get('onnxruntime', '?')}, providers {', '.join(host.get('providers', []))}",
             f"- started {r['started_at']}, {r.get('elapsed_s', 0):.0f} s; command `{r['command']}`"]
    if host.get("gpu_processes_at_start"):
        lines.append(f"- **the GPU was not idle at the start**: {host['gpu_processes_at_start']}")
    lines += ["", "| phase | status | seconds | note |", "|---|---|---:|---|"]
    for name, p in r["phases"].items():
        lines.append(f"| {name} | {p['status']} | {fmt(p.get('seconds'))} | {p.get('error') or p.get('why') or ''} |")
    c = r.get("correctness")
    if c:
        lines += ["", f"## Correctness: against {c['reference']}", "",
                  f"{c['verses_per_direction']} verses of John per direction ({', '.join(c['directions'])}), batch "
                  f"{c['batch']}, beam {c['beam']}.", "",
                  "| variant | device | resident | mode | same text % | BLEU | decode s |",
                  "|---|---|---|---|---:|---:|---:|"]
        for row in c["rows"]:
            if row.get("error"):
                lines.append(f"| {row['variant']} | | | {row['mode']} | failed: {row['error']} | | |")
                continue
            lines.append(f"| {row['variant']} | {row.get('device')} | {fmt(row.get('resident'))} | {row['mode']} | "
                         f"{fmt(row['same_text_pct'], 2)} | {fmt(row['bleu'], 2)} | {fmt(row.get('decode_seconds'))} |")
    sp = r.get("speed")
    if sp:
        lines += ["", f"## Speed: nmt-bench, {sp['direction']}", ""]
        lines += [f"- {n}" for n in sp["notes"]]
        lines += ["", "| engine | mode | batch | sent/s | tok/s | GPU MiB | RSS Δ MiB | BLEU | same text | where |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for row in sp["rows"]:
            if row.get("error"):
                lines.append(f"| {row['engine']} | {row['mode']} | {row['batch_size']} | failed: {row['error']} "
                             "| | | | | | |")
                continue
            where = f"{row.get('device')} {row.get('variant')}" + (" resident" if row.get("resident") else "")
            lines.append(f"| {row['engine']} | {row['mode']} | {row['batch_size']} | {fmt(row['sentences_per_s'])} | "
                         f"{fmt(row['tokens_per_s'], 0)} | {fmt(row.get('gpu_mem_mib'), 0)} | "
                         f"{fmt(row.get('peak_rss_delta_mib'), 0)} | {fmt(row.get('bleu'), 2)} | "
                         f"{fmt(row.get('identical_to_reference'), 3)} | {where} |")
    pr = r.get("profile")
    if pr and pr.get("top_ops"):
        lines += ["", f"## Profile: one {pr['graph']} step, {pr['variant']} on {pr['device']}, {pr['rows']} rows", "",
                  f"{pr['runs']} steps timed, {pr['mean_run_ms']} ms a step, kernels "
                  f"{fmt((pr.get('kernel_share_of_run') or 0) * 100, 0)} % of it (on CUDA: host-side launch times).",
                  "", "| op type | ms a step | share of kernel time |", "|---|---:|---:|"]
        lines += [f"| {o['op']} | {o['ms_per_run']:.3f} | {o['share'] * 100:.1f} % |" for o in pr["top_ops"]]
    sv = r.get("server")
    if sv:
        lines += ["", f"## Server: nmt-serve on {sv['device']} ({sv['variant']}, resident {sv['resident']}), "
                      f"{sv['direction']}, one sentence a request", "",
                  "| mode | clients | sent/s | p50 ms | p99 ms | errors | offline sent/s (batch) | server / offline |",
                  "|---|---:|---:|---:|---:|---|---:|---:|"]
        for row in sv["rows"]:
            if row.get("error"):
                lines.append(f"| {row['mode']} | | failed: {row['error']} | | | | | |")
                continue
            lines.append(f"| {row['mode']} | {row['clients']} | {fmt(row['sentences_per_s'])} | {fmt(row['p50_ms'])} | "
                         f"{fmt(row['p99_ms'])} | {row['errors'] or ''} | {fmt(row.get('offline_sentences_per_s'))} "
                         f"({row.get('offline_batch', '–')}) | {fmt(row.get('server_vs_offline'), 2)} |")
        lines.append(f"\nGPU memory above idle while loaded: {sv['gpu_mem_mib'] or '–'}; server peak RSS "
                     f"{sv['peak_rss_mib']} MiB.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker_main(argv[1])
    try:
        args = parse_args(argv)
    except UsageError as e:
        return fail("gpu_run", str(e), EXIT_USAGE)
    if args.dry_run:
        for line in plan_lines(args):
            print(line)
        return EXIT_OK
    return Run(args).go()


if __name__ == "__main__":
    raise SystemExit(main())
