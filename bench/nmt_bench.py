"""``nmt-bench``: our decoders against PyTorch and CTranslate2 on identical weights.

    nmt-bench --checkpoint runs/small-ende --package packages/small-ende --sentences 128 --threads 1

Sentences: the first ``--sentences`` of the checkpoint's test split (split evenly over its
directions; the bundled Bible by default; left out, at least the largest batch size per
direction, so that every batch holds what its row says: a batch size larger than a direction's
sentences is a usage error), or ``--input`` (one source a line, or
``source<TAB>reference``, in the one direction ``--directions`` names). Each direction's sentences are
sorted by length and cut into batches; every engine decodes exactly those batches, greedy
and beam (``--beam``, GNMT length penalty alpha 0.6; CTranslate2's length penalty
is length ** alpha, so its beam outputs may differ slightly).

Engines (``--engines``, CPU): pytorch (training/decode.py without the KV cache),
pytorch-cache, onnx-fp32 / onnx-int8 (the server's decoding loop, offline),
onnx-fp32-resident (the same loop on the device-resident path CUDA uses, forced on the
CPU: its cost there beside the numpy path), onnx-fp32-shortlist / onnx-int8-shortlist when named
(the same loop scoring only the package's vocabulary shortlist, engine/shortlist.py; the plain onnx
engines score every piece), ct2-fp32 / ct2-int8 (the checkpoint converted
by bench/peers/ct2_convert.py), hf-fp32 / optimum-fp32 when named (Transformers generate() and
Optimum's ORTModelForSeq2SeqLM on the checkpoint converted by bench/peers/hf_convert.py; the ``hf``
extra; hf-fp16 on --device cuda), and server: ``nmt-serve`` in a subprocess on 127.0.0.1, fed by
``--clients`` closed-loop gRPC clients sending requests of batch-size texts; a list of
client counts (``--clients 1,32,64,128,256``) is a sweep: one server started per mode and
batch size, loaded at each count in turn, one row per count (its peak RSS is the server's
peak so far).

``--device cuda`` (skipped, with a note in the JSON, when there is no GPU): pytorch-cache,
onnx-fp32, onnx-fp16 and the server (``nmt-serve --device cuda``, fp16 when the package
has it, device-resident decoding) by default, ct2-fp16 when named (its wheels need CUDA
12); batch sizes 1, 32 and 256 and 3,072 sentences unless given. Every row records where
it ran (``device``), its graphs (``variant``) and whether decoding was device-resident
(``resident``); an engine or a server that is not on the GPU fails instead of reporting
CPU numbers. With ``--device cuda`` (or ``--gpu-targets``) the run ends with the GPU
targets of the issue, met or not (bench/bench_report.py ``gpu_targets``); the one-CPU-
thread reference comes from this run's rows or from ``--cpu-json``, an earlier CPU run.

Every offline configuration runs in a fresh child process (bench/engines.py): warm-up on
the first batch, then every batch timed (``--repeats`` passes, the fastest kept; the
server: the whole load repeated). Reported: sentences/s and target tokens/s (wall
time over all batches), latency per batch (server: per request), peak RSS delta (child's
VmHWM minus its RSS after importing the engine, before loading the model; server:
its VmHWM minus the RSS of a process that imported the server's modules), BLEU against
the references (sacrebleu, all directions pooled), and the share of texts identical to
pytorch-cache's (the reference decoder; onnx-fp32's if pytorch-cache is not run) in the
same configuration. The same thread count
for every engine (CTranslate2: intra_threads = --threads, inter_threads = 1).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench import bench_report
from bench.engines import (
    CPU_ENGINES,
    CUDA_ENGINES,
    HF_CPU_ENGINES,
    HF_CUDA_ENGINES,
    MARIAN_ENGINES,
    RESIDENT_SUFFIX,
    SHORTLIST_ENGINES,
)
from cli import (
    EXIT_FAILED,
    EXIT_USAGE,
    ArgumentParser,
    UsageError,
    check_input_file,
    check_output_file,
    deprecated_alias,
    exit_status_help,
    fail,
)
from engine.defaults import LENGTH_PENALTY, default_max_len

ROOT = Path(__file__).resolve().parents[1]
SERVER = "server"
# The peers' libraries and the extras that install them (checked before any work).
PEER_LIBRARIES = {"ct2": ("ctranslate2", "bench"), "hf": ("transformers", "hf"), "optimum": ("optimum", "hf"),
                  "marian": ("pymarian", "marian")}
REFERENCE_ENGINES = ("pytorch-cache", "onnx-fp32")  # the first one run is what "same text" compares with
ALPHA = LENGTH_PENALTY
# Per device: what runs when --engines, --batch-sizes and --sentences are not given.
DEFAULT_ENGINES = {"cpu": (*CPU_ENGINES, SERVER), "cuda": ("pytorch-cache", "onnx-fp32", "onnx-fp16", SERVER)}
DEFAULT_BATCH_SIZES = {"cpu": "1,32", "cuda": "1,32,256"}
DEFAULT_SENTENCES = {"cpu": 128, "cuda": 3072}
# What runs on an imported model (--hf-dir): no checkpoint of ours for the PyTorch engines.
IMPORTED_ENGINES = ("onnx-fp32", "onnx-int8", "ct2-fp32", "ct2-int8", "hf-fp32")


class ImportedTexts:
    """An imported package's text <-> ids, as nmt-bench's items need them (no placeholders)."""

    def __init__(self, package: Any, source: str) -> None:
        self.package, self.source, self.tokenizer = package, source, package.load_tokenizer()

    def encode_protected(self, text: str, target: str) -> tuple[list[int], tuple[str, ...]]:
        return self.package.source_ids(self.tokenizer.encode(text), target, self.source), ()

    def decode_restored(self, ids: list[int], originals: tuple[str, ...]) -> str:
        return self.tokenizer.decode(ids)  # cuda: 512 per direction of the default model, full batches of 256


@dataclass(frozen=True)
class Item:
    src: str
    src_lang: str
    tgt_lang: str
    ref: str | None
    ids: list[int]  # tag + pieces + eos (of the text with its spans protected, when the tokenizer has placeholders)
    originals: tuple[str, ...] = ()  # what the placeholders of ``ids`` stand for (engine/placeholders.py)


@dataclass(frozen=True)
class BenchBatch:
    rows: list[int]  # indices into the items
    src_lang: str
    tgt_lang: str


def load_items(args: argparse.Namespace, data_cfg: Any, tokenizer: Any) -> list[Item]:
    from cli import parse_direction
    from training.data import load_pairs

    raw: list[tuple[str, str, str, str | None]] = []
    if args.file:
        src_lang, tgt_lang = parse_direction((args.directions or data_cfg.directions)[0])
        for line in Path(args.file).read_text(encoding="utf-8").splitlines():
            if line.strip():
                src, _, ref = line.partition("\t")
                raw.append((src.strip(), src_lang, tgt_lang, ref.strip() or None))
        raw = raw[: args.sentences if args.sentences_given else max(args.sentences, *args.batch_sizes)]
    else:
        directions = list(args.directions or data_cfg.directions)
        per_direction = -(-args.sentences // len(directions))
        if not args.sentences_given:
            per_direction = max(per_direction, *args.batch_sizes)
        by_dir: dict[str, list[tuple[str, str, str, str | None]]] = {d: [] for d in directions}
        for p in load_pairs(data_cfg, "test"):
            got = by_dir.get(p.direction)
            if got is not None and len(got) < per_direction:
                got.append((p.src, p.src_lang, p.tgt_lang, p.tgt))
        raw = [x for d in directions for x in by_dir[d]]
    if not raw:
        raise UsageError("no sentences: the checkpoint's data has no test split here; pass --input")
    return [Item(s, sl, tl, r, *tokenizer.encode_protected(s, tl)) for s, sl, tl, r in raw]


def make_batches(items: list[Item], batch_size: int) -> list[BenchBatch]:
    """Per direction, sorted by source length (stable), cut into batches."""
    batches = []
    for direction in dict.fromkeys((it.src_lang, it.tgt_lang) for it in items):
        rows = sorted((i for i, it in enumerate(items) if (it.src_lang, it.tgt_lang) == direction),
                      key=lambda i: len(items[i].ids))
        batches += [BenchBatch(rows[i:i + batch_size], *direction) for i in range(0, len(rows), batch_size)]
    return batches


def checkpoint_batches(checkpoint: str | Path, batch_size: int, sentences: int, pair: str | None = None,
                       file: Path | None = None, one_direction: bool = False
                       ) -> tuple[Path, Any, list[Item], list[list[list[int]]]]:
    """What the studies (bench/studies/) decode: the first ``sentences`` of a checkpoint's test
    split (``pair`` only, if given; with ``one_direction``, the checkpoint's first direction
    when no pair is) or of ``file``, cut into batches as nmt-bench cuts them.
    Returns the checkpoint's path, its tokenizer, the items and each batch's source ids."""
    from training import checkpoint as ckpt_io
    from training.config import RunConfig

    ckpt_path = ckpt_io.resolve(checkpoint)
    ckpt = ckpt_io.load(ckpt_path)
    tokenizer = ckpt_io.load_tokenizer(ckpt)
    data = RunConfig.from_dict(ckpt["config"]).data
    directions = [pair] if pair else [data.directions[0]] if one_direction else None
    ns = argparse.Namespace(file=file, directions=directions, sentences=sentences, sentences_given=True)
    items = load_items(ns, data, tokenizer)
    return ckpt_path, tokenizer, items, [[items[i].ids for i in b.rows] for b in make_batches(items, batch_size)]


def run_child(work: dict[str, Any], threads: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    proc = subprocess.run([sys.executable, "-m", "bench.engines"], input=json.dumps(work), capture_output=True,
                          text=True, env=env, cwd=ROOT)
    if proc.returncode:
        lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
        raise RuntimeError(lines[-1] if lines else f"exit code {proc.returncode}")
    for line in proc.stderr.splitlines():
        print(line, file=sys.stderr, flush=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def server_baseline_mib() -> float:
    """RSS of a fresh process that imported the server's modules (no model loaded)."""
    code = "import server.main\nfrom bench.engines import rss_mib\nprint(rss_mib())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def server_limits(args: argparse.Namespace, n_items: int, bs: int, beam: int) -> tuple[int, list[str]]:
    """nmt-serve's --max-batch-rows and the other limits that let the load through: it may decode
    as many rows together as the largest offline batch (texts x beams; at least its request and
    the server's default 64), and no request of the run is refused for the queue or tokens."""
    rows = max(64, bs * beam, beam * min(max(args.clients) * bs, max(args.batch_sizes)))
    extra = ["--max-texts", str(max(64, bs)), "--max-queue", str(max(1024, n_items, bs)),
             "--max-tokens-in-flight", str(max(65536, rows * 256))]
    return rows, extra


def server_model(address: str) -> Any:
    """The first model the server lists (nmt.v1.ModelInfo): where it runs and how."""
    import grpc

    from nmt.v1 import translator_pb2 as pb
    from nmt.v1 import translator_pb2_grpc as pb_grpc

    with grpc.insecure_channel(address) as channel:
        models = pb_grpc.TranslatorStub(channel).ListModels(pb.ListModelsRequest(), timeout=30).models
    if not models:
        raise RuntimeError("nmt-serve lists no model")
    return models[0]


def server_placement(model: Any, device: str) -> dict[str, Any]:
    """Where the server decodes, from its ModelInfo; RuntimeError when that is not ``device``
    (a GPU benchmark must not report a server that came up on the CPU)."""
    if model.device != device:
        raise RuntimeError(f"nmt-serve --device {device} came up on {model.device or 'an unknown device'} "
                           f"({model.variant}); refusing to report it as {device}")
    return {"device": model.device, "variant": model.variant, "resident": bool(model.device_resident)}


@dataclass(frozen=True)
class ServerRun:
    clients: int
    seconds: float
    latencies: list[float]
    texts: list[str]
    tokens: list[int]
    rss: float  # the server's peak RSS so far minus the baseline
    error: str = ""  # this client count failed (the others keep their numbers)


def run_server(args: argparse.Namespace, items: list[Item], batches: list[BenchBatch], beam: int,
               baseline: float) -> tuple[list[ServerRun], dict[str, Any]]:
    """One server for this mode and batch size, loaded by each of ``args.clients`` in turn;
    the runs, and where the server decoded ({"device", "variant", "resident"})."""
    from bench.load.replay import Request, run_load
    from server.child import ServerProcess, process_rss_mib

    bs = max(len(b.rows) for b in batches)
    requests = [Request([items[i].src for i in b.rows], b.src_lang, b.tgt_lang) for b in batches]
    rows, extra = server_limits(args, len(items), bs, beam)
    if not args.server_int8:  # fp32 on the CPU (nmt-serve's default is int8): the fp32 engines' tokens
        extra = [*extra, "--no-int8"]
    if args.spin_threads:
        extra = [*extra, "--spin-threads"]
    runs = []
    with ServerProcess(args.package, args.threads, max_batch_rows=rows, device=args.device, extra=extra) as srv:
        where = server_placement(server_model(srv.address), args.device)
        for clients in args.clients:
            try:
                result = min((run_load(srv.address, requests, clients, beam, ALPHA) for _ in range(args.repeats)),
                             key=lambda r: r.seconds)
            except Exception as e:  # a sweep keeps the counts that worked
                runs.append(ServerRun(clients, 0.0, [], [], [], 0.0, f"{type(e).__name__}: {e}"))
                continue
            peak = process_rss_mib(srv.pid)
            texts, tokens = [""] * len(items), [0] * len(items)
            for b, response in zip(batches, result.responses):
                for i, tr in zip(b.rows, response.translations):
                    texts[i], tokens[i] = tr.hypotheses[0].text, tr.hypotheses[0].num_tokens
            runs.append(ServerRun(clients, result.seconds, result.latencies, texts, tokens,
                                  peak - baseline if peak else 0.0))
    return runs, where


def bleu(hyps: list[str], refs: list[str | None]) -> float | None:
    if not refs or any(r is None for r in refs):
        return None
    import sacrebleu

    return round(sacrebleu.corpus_bleu(hyps, [list(refs)]).score, 2)  # type: ignore[arg-type]


def summarise(engine: str, mode: str, bs: int, batches: list[BenchBatch], total: float, latencies: list[float],
              texts: list[str], tokens: list[int], items: list[Item], rss: float) -> dict[str, Any]:
    """``total``: wall seconds of all batches (offline: their sum; server: the whole load)."""
    lat = np.array(latencies) * 1000
    by_dir = {}
    for d in dict.fromkeys(f"{it.src_lang}-{it.tgt_lang}" for it in items):
        sel = [i for i, it in enumerate(items) if f"{it.src_lang}-{it.tgt_lang}" == d]
        by_dir[d] = bleu([texts[i] for i in sel], [items[i].ref for i in sel])
    return {"engine": engine, "mode": mode, "batch_size": bs, "batches": len(batches), "sentences": len(items),
            "mean_batch": round(len(items) / len(batches), 1),
            "seconds": round(total, 3), "sentences_per_s": round(len(items) / total, 2),
            "tokens_per_s": round(sum(tokens) / total, 1), "target_tokens": int(sum(tokens)),
            "latency_ms": {"mean": round(float(lat.mean()), 1), "p50": round(float(np.percentile(lat, 50)), 1),
                           "p90": round(float(np.percentile(lat, 90)), 1)},
            "peak_rss_delta_mib": round(rss, 1), "bleu": bleu(texts, [it.ref for it in items]),
            "bleu_by_direction": by_dir, "texts": texts}


def check_batches_fill(items: list[Item], batch_sizes: list[int]) -> None:
    """UsageError when a batch size is larger than a direction's sentences: its rows would
    measure smaller batches than they say (a direction's batches never mix directions)."""
    counts = Counter(f"{it.src_lang}-{it.tgt_lang}" for it in items)
    direction, fewest = min(counts.items(), key=lambda kv: kv[1])
    bs = max(batch_sizes)
    if bs > fewest:
        raise UsageError(f"batch {bs} is larger than the {fewest} sentences of {direction}: its batches would hold "
                         f"{fewest}; pass --sentences {bs * len(counts)} or more (they are split over "
                         f"{len(counts)} directions), fewer --directions, or leave --sentences out")


def run_config(args: argparse.Namespace, engine: str, mode: str, bs: int, items: list[Item], tokenizer: Any,
               paths: dict[str, Any], server_base: float) -> list[dict[str, Any]]:
    """The rows of one engine, mode and batch size: one, or one per client count (server)."""
    beam = 1 if mode == "greedy" else args.beam_size
    batches = make_batches(items, bs)
    if engine == SERVER:
        runs, where = run_server(args, items, batches, beam, server_base)
        return [{"engine": engine, "mode": mode, "batch_size": bs, "clients": r.clients, "error": r.error} if r.error
                else {**summarise(engine, mode, bs, batches, r.seconds, r.latencies, r.texts, r.tokens, items, r.rss),
                      "clients": r.clients, **where} for r in runs]
    work = {"engine": engine, "beam_size": beam, "alpha": ALPHA, "threads": args.threads, "device": args.device,
            "spin_threads": args.spin_threads,
            "batches": [[items[i].ids for i in b.rows] for b in batches], "progress": True,
            "repeats": args.repeats, **paths}
    result = run_child(work, args.threads)
    if result.get("device") != args.device:  # the child checks this too: never report CPU numbers as GPU ones
        raise RuntimeError(f"{engine} ran on {result.get('device')}, not {args.device}")
    latencies = result["batch_seconds"]
    cap = int(paths["max_target_tokens"])
    rows = [i for b in batches for i in b.rows]
    texts, tokens = [""] * len(items), [0] * len(items)
    for i, ids in zip(rows, result["outputs"]):
        if engine.startswith(("ct2", "hf", "optimum")) and beam == 1:  # one bound per call: cut rows at their own
            ids = ids[: default_max_len(len(items[i].ids), cap)]
        texts[i], tokens[i] = tokenizer.decode_restored(ids, items[i].originals), len(ids)
    row = summarise(engine, mode, bs, batches, sum(latencies), latencies, texts, tokens, items,
                    result["peak_rss_delta_mib"])
    kernels = {"kernels": result["kernels"]} if result.get("kernels") else {}  # CTranslate2's, as its log names them
    return [{**row, "device": result["device"], "variant": result["variant"], "resident": result["resident"],
             **kernels}]


def add_agreement(rows: list[dict[str, Any]]) -> str | None:
    """Share of texts identical to the reference engine's in the same configuration; returns its name."""
    ran = {r["engine"] for r in rows if not r.get("error")}
    reference = next((e for e in REFERENCE_ENGINES if e in ran), None)
    for row in rows:
        if row.get("error"):
            continue
        ref = next((r for r in rows if r["engine"] == reference and r["mode"] == row["mode"]
                    and r["batch_size"] == row["batch_size"] and not r.get("error")), None)
        if ref is None:
            row["identical_to_reference"] = None
            continue
        same = sum(a == b for a, b in zip(row["texts"], ref["texts"]))
        row["identical_to_reference"] = round(same / len(ref["texts"]), 4)
    return reference


def cuda_available() -> str:
    """Empty if some engine can use a GPU here, else why not."""
    import torch

    if torch.cuda.is_available():
        return ""
    return "no CUDA device (torch.cuda.is_available() is False)"


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="nmt-bench", description=__doc__, epilog=exit_status_help(EXIT_FAILED, EXIT_USAGE))
    p.add_argument("--checkpoint", help="checkpoint file or run directory (default: none; this or --hf-dir)")
    p.add_argument("--hf-dir", type=Path, help="instead of --checkpoint: the Transformers directory (OPUS-MT, NLLB) "
                   f"--package was imported from with nmt-import; engines {','.join(IMPORTED_ENGINES)}, --input "
                   "needed (default: none)")
    p.add_argument("--package", required=True, help="the model package exported from that checkpoint")
    p.add_argument("--input", dest="file", type=Path, help="sentences: 'source' or 'source<TAB>reference' lines, "
                   "in the one direction of --directions (default: the checkpoint's test split)")
    p.add_argument("--directions", help="comma-separated language pairs: the direction of --input, or the "
                   "directions of the test split to use (default: the checkpoint's, its first for --input)")
    p.add_argument("--sentences", type=int, help="subset size (split over directions) (default: "
                   f"{DEFAULT_SENTENCES['cpu']}; {DEFAULT_SENTENCES['cuda']} with --device cuda)")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads of every engine")
    p.add_argument("--engines", help=f"comma-separated (CPU: {','.join((*CPU_ENGINES, SERVER))}; "
                                     f"CUDA: {','.join((*CUDA_ENGINES, SERVER))}) (default: CPU: all of them; "
                                     f"CUDA: {','.join(DEFAULT_ENGINES['cuda'])}; ct2-fp16 only when named: its "
                                     f"wheels need CUDA 12; {','.join(HF_CPU_ENGINES)} (CPU) and "
                                     f"{','.join(HF_CUDA_ENGINES)} (CUDA) only when named: the hf extra; "
                                     f"{','.join(MARIAN_ENGINES)} only when named: the marian extra)")
    p.add_argument("--modes", default="greedy,beam", help="greedy and/or beam")
    p.add_argument("--batch-sizes", help="texts per batch (offline) or per request (server) (default: "
                   f"{DEFAULT_BATCH_SIZES['cpu']}; {DEFAULT_BATCH_SIZES['cuda']} with --device cuda)")
    p.add_argument("--beam", dest="beam_size", type=int, default=4, help="beam size of the beam mode")
    p.add_argument("--repeats", type=int, default=1, help="timed passes per configuration; the fastest is kept")
    p.add_argument("--clients", default="8", help="concurrent gRPC clients of the server engine; a comma-separated "
                   "list (1,32,64,128,256) is a sweep: one server row per count")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where the engines run")
    p.add_argument("--server-int8", action="store_true", help="the server engine serves the int8 graphs (nmt-serve's "
                   "own default on the CPU), compared with onnx-int8 offline (default: fp32, like onnx-fp32)")
    p.add_argument("--spin-threads", action="store_true", help="let onnxruntime's intra-op threads spin for work "
                   "between runs too, in the onnx engines and the server (nmt-serve --spin-threads) (default: "
                   "offline engines spin within runs only, the server never: engine/defaults.py)")
    p.add_argument("--ct2-model", type=Path, help="where to convert the checkpoint for CTranslate2 "
                                                  "(default: beside --json; replaced every run)")
    p.add_argument("--optimum-model", type=Path, help="where to export the converted checkpoint for optimum-fp32 "
                                                      "(default: beside --json; replaced every run)")
    p.add_argument("--marian-model", type=Path, help="where to convert the checkpoint for marian-fp32/marian-int8 "
                                                     "(default: beside --json; replaced every run)")
    p.add_argument("--json", dest="out", type=Path, help="JSON results; a Markdown table is written beside it "
                                                         "(default: bench/results/nmt_bench-DEVICE.json)")
    p.add_argument("--png", dest="chart", type=Path, help="also draw sentences/s as a PNG here, and the server "
                   "sweep (default: none)")
    p.add_argument("--gpu-targets", action="store_true", help="end with the issue's GPU targets computed from the "
                   "rows, met or not (always on with --device cuda)")
    p.add_argument("--cpu-json", type=Path, help="an earlier nmt-bench JSON of a one-thread CPU run with onnx-fp32 "
                   "greedy at batch 256: the CPU reference of the GPU targets (default: this run's rows)")
    for old, new in (("--file", "--input"), ("--pair", "--directions"), ("--beam-size", "--beam"),
                     ("--out", "--json"), ("--chart", "--png")):
        deprecated_alias(p, old, new)
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The flags, checked; UsageError names the first that is wrong."""
    args = build_parser().parse_args(argv)
    if args.out:
        check_output_file(args.out, "--json")
    args.out = args.out or Path(f"bench/results/nmt_bench-{args.device}.json")
    if args.chart:
        check_output_file(args.chart, "--png")
    if args.file:
        check_input_file(args.file, "--input", "a UTF-8 text file, one sentence a line")
    if args.cpu_json:
        check_input_file(args.cpu_json, "--cpu-json", "the JSON nmt-bench wrote on the CPU")
    args.gpu_targets = args.gpu_targets or args.device == "cuda"
    # Not given: the device's default, raised so that every direction fills its largest batch.
    args.sentences_given = args.sentences is not None
    args.sentences = DEFAULT_SENTENCES[args.device] if args.sentences is None else args.sentences
    args.directions = [d.strip() for d in args.directions.split(",") if d.strip()] if args.directions else None
    if args.file and args.directions and len(args.directions) != 1:
        raise UsageError(f"--input holds one direction; --directions gives {len(args.directions)}")
    if bool(args.checkpoint) == bool(args.hf_dir):
        raise UsageError("give --checkpoint (a model of ours) or --hf-dir (an imported one), not both")
    if args.hf_dir and not args.file:
        raise UsageError("--hf-dir needs --input: an imported model has no test split of ours")
    defaults = IMPORTED_ENGINES if args.hf_dir else DEFAULT_ENGINES[args.device]
    args.engines = [e.strip() for e in args.engines.split(",")] if args.engines else list(defaults)
    allowed = (set(CPU_ENGINES) | set(HF_CPU_ENGINES) | set(SHORTLIST_ENGINES) | set(MARIAN_ENGINES)
               if args.device == "cpu"
               else set(CUDA_ENGINES) | set(HF_CUDA_ENGINES)) | {SERVER}
    if args.hf_dir:
        allowed &= set(IMPORTED_ENGINES)
    unknown = [e for e in args.engines if e not in allowed]
    if unknown:
        raise UsageError(f"unknown engine(s) for {args.device}: {', '.join(unknown)}; choose from "
                         f"{', '.join(sorted(allowed))}")
    missing = {f"{e} needs {lib} (pip install -e '.[{extra}]')" for e in args.engines
               for family, (lib, extra) in PEER_LIBRARIES.items()
               if e.split("-")[0] == family and importlib.util.find_spec(lib) is None}
    if missing:
        raise UsageError("; ".join(sorted(missing)))
    args.modes = [m.strip() for m in args.modes.split(",")]
    if set(args.modes) - {"greedy", "beam"}:
        raise UsageError("--modes takes greedy and/or beam")
    args.batch_sizes = int_list(args.batch_sizes or DEFAULT_BATCH_SIZES[args.device], "--batch-sizes")
    args.clients = sorted(set(int_list(args.clients, "--clients")))
    for name in ("sentences", "threads", "beam_size", "repeats"):
        if getattr(args, name) < 1 or any(b < 1 for b in args.batch_sizes) or any(c < 1 for c in args.clients):
            raise UsageError("--sentences, --threads, --beam, --repeats, --clients and --batch-sizes must be at "
                             "least 1")
    return args


def int_list(text: str, flag: str) -> list[int]:
    """'1,32, 256' -> [1, 32, 256]; UsageError names the flag."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{flag} takes comma-separated integers, not {text!r}") from None
    if not values:
        raise UsageError(f"{flag} takes comma-separated integers, not {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    try:
        return run(argv)
    except UsageError as e:  # what the user gave, refused before any work
        return fail("nmt-bench", str(e), EXIT_USAGE)


def load_cpu_json(path: Path | None) -> dict[str, Any] | None:
    """The earlier CPU run of --cpu-json; UsageError when it is not one."""
    if path is None:
        return None
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"--cpu-json: cannot read {path} as JSON: {e}") from None
    if not isinstance(result, dict) or not isinstance(result.get("rows"), list):
        raise UsageError(f"--cpu-json: {path} is not a JSON file nmt-bench wrote (no rows)")
    if result.get("device", "cpu") != "cpu":
        raise UsageError(f"--cpu-json: {path} is a {result['device']} run; give a CPU one")
    return result


def gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""


def run(argv: list[str] | None) -> int:
    args = parse_args(argv)
    load_cpu_json(args.cpu_json)  # checked before any work
    info = {"command": "nmt-bench " + " ".join(sys.argv[1:] if argv is None else argv),
            "device": args.device, "threads": args.threads, "spin_threads": args.spin_threads,
            "machine": bench_report.machine(),
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.device == "cuda" and (why := cuda_available()):
        print(f"CUDA benchmark skipped: {why}", flush=True)
        args.out.write_text(json.dumps({**info, "skipped": why, "rows": []}, indent=1))
        return 0
    if args.device == "cuda":
        info["machine"]["gpu"] = gpu_name()

    from engine.package import ModelPackage, PackageError
    from training import checkpoint as ckpt_io
    from training.config import RunConfig

    if args.hf_dir:
        return run_imported(args, info)
    try:
        ckpt_path = ckpt_io.resolve(args.checkpoint)
        ckpt = ckpt_io.load(ckpt_path)
        package = ModelPackage.load(args.package)
    except (FileNotFoundError, PackageError) as e:
        raise UsageError(str(e)) from None
    cfg = RunConfig.from_dict(ckpt["config"])
    tokenizer = ckpt_io.load_tokenizer(ckpt)
    if package.tokenizer_path.read_bytes() != tokenizer.model_proto:
        raise UsageError(f"{args.package} was not exported from {ckpt_path}: their tokenizers differ; give the "
                         "package nmt-export wrote from this checkpoint")
    if any(e.endswith(RESIDENT_SUFFIX) for e in args.engines) and "fp32" not in package.resident_variants:
        raise UsageError(f"{args.package} has no fp32 step and rows graphs for the resident engine; export it "
                         "again with nmt-export")
    if "onnx-fp16" in args.engines and "fp16" not in package.variants:
        raise UsageError(f"{args.package} has no fp16 graphs for onnx-fp16; export it with nmt-export --fp16")
    if args.device == "cuda":
        for variant in ({e.split("-")[1] for e in args.engines if e.startswith("onnx")}
                        | ({"fp16" if "fp16" in package.variants else "fp32"} if SERVER in args.engines else set())):
            if variant not in package.resident_variants:
                print(f"note: {args.package} has no {variant} step and rows graphs: {variant} decoding on CUDA will "
                      "not be device-resident (export it again with nmt-export)", flush=True)
    items = load_items(args, cfg.data, tokenizer)
    paths = {"checkpoint": str(ckpt_path), "package": str(args.package), "tokenizer": str(package.tokenizer_path),
             "max_target_tokens": package.max_target_tokens, "ct2_model": "", "optimum_model": "",
             "marian_model": ""}
    if any(e.startswith("ct2") for e in args.engines):
        from bench.peers.ct2_convert import convert

        ct2_dir = args.ct2_model or args.out.parent / f"ct2-{ckpt_path.parent.name}-{ckpt_path.stem}"
        paths["ct2_model"] = str(convert(ckpt_path, ct2_dir, force=True))
    if any(e.startswith("optimum") for e in args.engines):
        from bench.peers import hf_convert

        optimum_dir = args.optimum_model or args.out.parent / f"optimum-{ckpt_path.parent.name}-{ckpt_path.stem}"
        paths["optimum_model"] = str(hf_convert.export_optimum(hf_convert.load(ckpt_path)[0], optimum_dir, force=True))
    if any(e.startswith("marian") for e in args.engines):
        from bench.peers import marian_convert

        marian_dir = args.marian_model or args.out.parent / f"marian-{ckpt_path.parent.name}-{ckpt_path.stem}"
        paths["marian_model"] = str(marian_convert.convert(ckpt_path, marian_dir, int8="marian-int8" in args.engines,
                                                           force=True))
    server_base = server_baseline_mib() if SERVER in args.engines else 0.0
    info.update({"checkpoint": str(ckpt_path), "package": str(args.package), "sentences": len(items),
                 "directions": sorted({f"{i.src_lang}-{i.tgt_lang}" for i in items}),
                 "mean_source_tokens": round(float(np.mean([len(i.ids) for i in items])), 1),
                 "beam_size": args.beam_size, "alpha": ALPHA, "clients": args.clients, "engines": args.engines,
                 "batch_sizes": args.batch_sizes, "repeats": args.repeats,
                 "decoder_onnx_mib": round(package.graph_path("decoder").stat().st_size / 2**20, 1)})
    return run_configs(args, info, items, tokenizer, paths, server_base)


def run_imported(args: argparse.Namespace, info: dict[str, Any]) -> int:
    """nmt-bench on an imported package and the Transformers directory it came from (--hf-dir)."""
    from types import SimpleNamespace

    from cli import parse_direction
    from engine.package import ModelPackage, PackageError

    try:
        package = ModelPackage.load(args.package)
    except PackageError as e:
        raise UsageError(str(e)) from None
    if package.provenance.get("imported_from") is None:
        raise UsageError(f"{args.package} was not made by nmt-import; give --checkpoint for a model of ours")
    direction = (args.directions or list(package.pairs))[0]
    texts = ImportedTexts(package, parse_direction(direction)[0])
    items = load_items(args, SimpleNamespace(directions=[direction]), texts)
    paths = {"checkpoint": "", "hf_dir": str(args.hf_dir), "package": str(args.package),
             "max_target_tokens": package.max_target_tokens, "ct2_model": "", "optimum_model": "",
             "prefix": list(package.target_prefix(parse_direction(direction)[1]))}
    if any(e.startswith("ct2") for e in args.engines):
        import ctranslate2

        ct2_dir = args.ct2_model or args.out.parent / f"ct2-{args.hf_dir.name}"
        ctranslate2.converters.TransformersConverter(str(args.hf_dir)).convert(str(ct2_dir), force=True)
        paths["ct2_model"] = str(ct2_dir)
    info.update({"hf_dir": str(args.hf_dir), "package": str(args.package), "sentences": len(items),
                 "directions": [direction], "beam_size": args.beam_size, "alpha": ALPHA,
                 "mean_source_tokens": round(float(np.mean([len(i.ids) for i in items])), 1),
                 "engines": args.engines, "batch_sizes": args.batch_sizes, "repeats": args.repeats,
                 "architecture": package.provenance.get("architecture"),
                 "decoder_onnx_mib": round(package.graph_path("decoder").stat().st_size / 2**20, 1)})
    return run_configs(args, info, items, texts, paths, 0.0)


def run_configs(args: argparse.Namespace, info: dict[str, Any], items: list[Item], tokenizer: Any,
                paths: dict[str, Any], server_base: float) -> int:
    """Every configuration of ``args``, then the JSON, the tables and the chart."""
    configs = [(m, bs, e) for m in args.modes for bs in args.batch_sizes for e in args.engines]
    print(f"{len(items)} sentences ({', '.join(info['directions'])}), {args.threads} thread(s), {args.device}; "
          f"{len(configs)} configurations", flush=True)
    check_batches_fill(items, args.batch_sizes)
    rows: list[dict[str, Any]] = []
    for n, (mode, bs, engine) in enumerate(configs, 1):
        sweep = f", clients {','.join(map(str, args.clients))}" if engine == SERVER else ""
        print(f"[{n}/{len(configs)}] {engine} {mode} batch {bs}{sweep} ...", flush=True)
        start = time.monotonic()
        try:
            got = run_config(args, engine, mode, bs, items, tokenizer, paths, server_base)
            for row in got:
                if row.get("error"):
                    print(f"    {row['clients']} clients: failed: {row['error']}", flush=True)
                    continue
                where = f"{row['device']}, {row['variant']}" + (", resident" if row["resident"] else "")
                if row.get("kernels"):
                    where += "; " + bench_report.kernels_text(row["kernels"])
                clients = f"{row['clients']} clients: " if "clients" in row else ""
                print(f"    {clients}{row['sentences_per_s']:.2f} sent/s, {row['tokens_per_s']:.0f} tok/s, "
                      f"BLEU {bench_report.fmt(row['bleu'], 2)} ({where}; {time.monotonic() - start:.0f}s)",
                      flush=True)
        except Exception as e:  # one failing engine must not lose the others' numbers
            got = [{"engine": engine, "mode": mode, "batch_size": bs, "error": f"{type(e).__name__}: {e}"}]
            print(f"    failed: {got[0]['error']}", flush=True)
        rows += got
    reference = add_agreement(rows)
    result = {**info, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "same_text_reference": reference, "rows": rows}
    if args.gpu_targets:
        result["targets"] = bench_report.gpu_targets(result, load_cpu_json(args.cpu_json), str(args.cpu_json or ""))
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False))
    args.out.with_suffix(".md").write_text(bench_report.markdown(result))
    print()
    print(bench_report.text_table(rows))
    for line in bench_report.kernels_lines(rows):
        print(line)
    if any("clients" in r for r in rows) and len(args.clients) > 1:
        print()
        print(bench_report.text_sweep(rows))
    if "targets" in result:
        print()
        print(bench_report.text_targets(result["targets"]))
    if args.chart:
        bench_report.chart(rows, args.chart, bench_report.chart_title(result))
    print(f"\nresults: {args.out} (table: {args.out.with_suffix('.md')})"
          + (f", chart: {args.chart}" if args.chart else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
