"""Smoke run of nmt-bench on the tiny model: every CPU engine (CTranslate2 and the gRPC server
included) runs, the JSON has positive numbers for each, and the decoders agree. Then the GPU
benchmark's parts that do not need a GPU: the defaults of --device cuda, the server sweep
(--clients 1,2), the device-resident engine forced on the CPU, the refusal of a server that
is not on the device asked for, and the issue's targets from a synthetic result. The GPU run
itself is skipped without CUDA."""

from __future__ import annotations

import json

import pytest

from bench import bench_report
from bench.nmt_bench import DEFAULT_ENGINES, main, parse_args, server_placement
from cli import UsageError
from engine.cpu import int8_variant
from engine.package import ModelPackage

ENGINES = ["pytorch", "pytorch-cache", "onnx-fp32", "onnx-int8", "onnx-fp32-resident", "ct2-fp32", "ct2-int8",
           "server"]
SOURCES = ("Jesus wept.\tJesus wept.\nIn the beginning was the Word.\tIn the beginning was the Word.\n"
           "He said,\tHe said,\nPeace be with you.\tPeace be with you.\n")
REQUIRED = ["--checkpoint", "c", "--package", "p"]


def test_nmt_bench_smoke(tiny_checkpoint, tiny_package, tmp_path, capsys):
    pytest.importorskip("ctranslate2")
    sources = tmp_path / "sources.tsv"
    sources.write_text(SOURCES)
    out = tmp_path / "bench.json"
    chart = tmp_path / "chart.png"
    assert main(["--checkpoint", str(tiny_checkpoint), "--package", str(tiny_package), "--file", str(sources),
                 "--pair", "en-de", "--sentences", "4", "--batch-sizes", "1,4", "--beam-size", "2",
                 "--clients", "2", "--out", str(out), "--chart", str(chart)]) == 0
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert [r.get("error") for r in rows] == [None] * len(rows)
    assert {(r["engine"], r["mode"], r["batch_size"]) for r in rows} == {
        (e, m, b) for e in ENGINES for m in ("greedy", "beam") for b in (1, 4)}
    for r in rows:
        assert r["sentences"] == 4 and r["sentences_per_s"] > 0 and r["tokens_per_s"] > 0, r["engine"]
        assert r["latency_ms"]["mean"] > 0 and r["latency_ms"]["p90"] >= r["latency_ms"]["p50"] > 0
        assert r["peak_rss_delta_mib"] > 0 and r["bleu"] is not None
        assert r["device"] == "cpu"
    greedy = {(r["engine"], r["batch_size"]): r["texts"] for r in rows if r["mode"] == "greedy"}
    for bs in (1, 4):
        assert greedy[("onnx-fp32", bs)] == greedy[("pytorch-cache", bs)] == greedy[("ct2-fp32", bs)]
        assert greedy[("pytorch", bs)] == greedy[("pytorch-cache", bs)] == greedy[("server", bs)]
        assert greedy[("onnx-fp32-resident", bs)] == greedy[("onnx-fp32", bs)]
        assert any(greedy[("pytorch-cache", bs)])
    assert all(r["identical_to_reference"] == 1.0 for r in rows
               if r["mode"] == "greedy" and not r["engine"].endswith("int8"))
    assert [r["clients"] for r in rows if r["engine"] == "server"] == [2] * 4
    assert result["machine"]["cores"] and result["machine"]["versions"]["ctranslate2"]
    for r in rows:  # CTranslate2 names the kernels it chose on this CPU; no other engine reports any
        assert set(r.get("kernels", {})) == ({"isa", "mkl", "sgemm", "gemm_s8"} if r["engine"].startswith("ct2")
                                             else set()), r["engine"]
    assert result["spin_threads"] is False  # the defaults: engine/defaults.py SPIN and SERVER_SPIN
    md = out.with_suffix(".md").read_text()
    assert chart.stat().st_size > 0 and md.startswith("| engine | mode | batch | clients |")
    assert "\n- ct2-fp32 kernels: ISA " in md and "\n- ct2-int8 kernels: ISA " in md
    assert "by concurrent clients" not in md and "GPU targets" not in md  # one client count, a CPU run
    assert "sent/s" in capsys.readouterr().out


def test_cuda_is_skipped_without_a_gpu(tiny_checkpoint, tiny_package, tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    out = tmp_path / "cuda.json"
    assert main(["--checkpoint", str(tiny_checkpoint), "--package", str(tiny_package), "--device", "cuda",
                 "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["rows"] == [] and "no CUDA device" in result["skipped"]


def test_the_defaults_of_each_device_and_the_clients_list():
    cpu = parse_args(REQUIRED)
    assert cpu.engines == list(DEFAULT_ENGINES["cpu"]) and "onnx-fp32-resident" in cpu.engines
    assert (cpu.batch_sizes, cpu.sentences, cpu.clients, cpu.gpu_targets) == ([1, 32], 128, [8], False)
    cuda = parse_args([*REQUIRED, "--device", "cuda"])
    assert cuda.engines == ["pytorch-cache", "onnx-fp32", "onnx-fp16", "server"]  # ct2-fp16 only when named
    assert (cuda.batch_sizes, cuda.sentences, cuda.gpu_targets) == ([1, 32, 256], 3072, True)
    named = parse_args([*REQUIRED, "--device", "cuda", "--engines", "ct2-fp16,onnx-fp16", "--batch-sizes", "8",
                        "--sentences", "16"])
    assert (named.engines, named.batch_sizes, named.sentences) == (["ct2-fp16", "onnx-fp16"], [8], 16)
    assert parse_args([*REQUIRED, "--clients", "256, 1,32,64,128,32"]).clients == [1, 32, 64, 128, 256]
    assert parse_args([*REQUIRED, "--gpu-targets"]).gpu_targets
    for bad in ("0", "1,0", "a,b", ",", "1.5"):
        with pytest.raises(UsageError, match="--clients"):
            parse_args([*REQUIRED, "--clients", bad])
    with pytest.raises(UsageError, match="unknown engine"):
        parse_args([*REQUIRED, "--engines", "onnx-fp16"])  # not a CPU engine
    with pytest.raises(UsageError, match="unknown engine"):
        parse_args([*REQUIRED, "--device", "cuda", "--engines", "onnx-fp32-resident"])  # CUDA is resident anyway


def test_a_cpu_json_that_is_not_a_cpu_run_is_refused(tmp_path, capsys):
    gpu = tmp_path / "gpu.json"
    gpu.write_text(json.dumps({"device": "cuda", "rows": []}))
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{")
    for path, why in ((gpu, "is a cuda run"), (garbage, "cannot read"), (tmp_path / "none.json", "does not exist")):
        assert main([*REQUIRED, "--cpu-json", str(path), "--json", str(tmp_path / "out.json")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("nmt-bench: error: --cpu-json: ") and str(path) in err and why in err, err
        assert not (tmp_path / "out.json").exists()


def test_a_server_not_on_the_device_asked_for_is_refused():
    from nmt.v1 import translator_pb2 as pb

    on_cpu = pb.ModelInfo(name="default", device="cpu", variant="fp32")
    with pytest.raises(RuntimeError, match="came up on cpu"):
        server_placement(on_cpu, "cuda")
    assert server_placement(on_cpu, "cpu") == {"device": "cpu", "variant": "fp32", "resident": False}
    on_gpu = pb.ModelInfo(name="default", device="cuda", variant="fp16", device_resident=True)
    assert server_placement(on_gpu, "cuda") == {"device": "cuda", "variant": "fp16", "resident": True}


def test_an_engine_asked_for_cuda_without_it_fails(tiny_checkpoint, tiny_package):
    import onnxruntime
    import torch

    from bench.engines import build

    if torch.cuda.is_available() and "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("CUDA is usable here")
    work = {"device": "cuda", "threads": 1, "package": str(tiny_package), "checkpoint": str(tiny_checkpoint),
            "beam_size": 1, "alpha": 0.6}
    with pytest.raises(RuntimeError, match="--device cuda"):  # engine.runtime.DeviceError
        build({**work, "engine": "onnx-fp16"})
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="no CUDA device"):
            build({**work, "engine": "pytorch-cache"})


def test_server_sweep_and_the_resident_engine_on_the_cpu(tiny_checkpoint, tiny_package, tmp_path, capsys):
    sources = tmp_path / "sources.tsv"
    sources.write_text(SOURCES)
    out, chart = tmp_path / "sweep.json", tmp_path / "sweep.png"
    assert main(["--checkpoint", str(tiny_checkpoint), "--package", str(tiny_package), "--input", str(sources),
                 "--directions", "en-de", "--sentences", "4", "--batch-sizes", "2", "--beam", "2",
                 "--engines", "onnx-fp32,onnx-fp32-resident,server", "--clients", "2,1", "--gpu-targets",
                 "--spin-threads", "--json", str(out), "--png", str(chart)]) == 0
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert [r.get("error") for r in rows] == [None] * len(rows) and result["clients"] == [1, 2]
    assert result["spin_threads"] is True  # the onnx engines and the server (--spin-threads) spin
    assert [(r["engine"], r["mode"], r.get("clients")) for r in rows] == [
        (e, m, c) for m in ("greedy", "beam")
        for e, c in (("onnx-fp32", None), ("onnx-fp32-resident", None), ("server", 1), ("server", 2))]
    by = {(r["engine"], r["mode"], r.get("clients")): r for r in rows}
    for mode in ("greedy", "beam"):  # the device path gives the numpy path's texts, on the CPU
        resident, numpy_path = by[("onnx-fp32-resident", mode, None)], by[("onnx-fp32", mode, None)]
        assert resident["texts"] == numpy_path["texts"] and any(resident["texts"])
        assert (resident["resident"], numpy_path["resident"]) == (True, False)
        assert by[("server", mode, 1)]["texts"] == by[("server", mode, 2)]["texts"] == numpy_path["texts"]
    assert all(r["device"] == "cpu" and r["variant"] == "fp32" for r in rows)
    assert all(not r["resident"] for r in rows if r["engine"] == "server")  # auto: the numpy path on the CPU

    series = bench_report.sweep_series(rows)
    assert set(series) == {("greedy", 2), ("beam", 2)}
    for (mode, _), s in series.items():
        assert [c for c, _ in s["points"]] == [1, 2] and s["engine"] == "onnx-fp32"
        assert s["offline"] == by[("onnx-fp32", mode, None)]["sentences_per_s"]
    md = out.with_suffix(".md").read_text()
    assert md.startswith("| engine | mode | batch | clients |")
    assert "| mode | batch | 1 client | 2 clients | offline, same batch | best / offline |" in md
    assert "GPU targets" in md and "not measured" in md  # asked for on a CPU run: nothing to compare
    assert [t["met"] for t in result["targets"]] == [None] * 4
    assert chart.stat().st_size > 0
    printed = capsys.readouterr().out
    assert "server sentences/s by concurrent clients" in printed and "GPU targets: 0 of 4 met" in printed


def synthetic_gpu_result() -> dict:
    def row(engine: str, mode: str, bs: int, sps: float, device: str = "cuda", **extra) -> dict:
        return {"engine": engine, "mode": mode, "batch_size": bs, "sentences_per_s": sps, "tokens_per_s": 30 * sps,
                "latency_ms": {"mean": 10.0, "p50": 9.0, "p90": 12.0}, "peak_rss_delta_mib": 900.0, "bleu": 35.0,
                "device": device, "variant": engine.split("-")[-1] if engine.startswith("onnx") else "fp16", **extra}

    rows = [row("onnx-fp16", "greedy", 256, 6000.0), row("onnx-fp16", "greedy", 1, 300.0),
            row("onnx-fp32", "greedy", 256, 3000.0), row("onnx-fp16", "beam", 32, 300.0),
            row("onnx-fp16", "beam", 256, 900.0),
            {"engine": "onnx-fp16", "mode": "greedy", "batch_size": 32, "error": "RuntimeError: boom"},
            *[row("server", "greedy", 1, sps, clients=c, resident=True)
              for c, sps in ((1, 250.0), (32, 3000.0), (64, 4200.0), (128, 4800.0), (256, 5100.0))],
            row("server", "greedy", 32, 4000.0, clients=256), row("server", "beam", 1, 700.0, clients=256)]
    return {"device": "cuda", "threads": 1, "beam_size": 4, "rows": rows}


def test_gpu_targets_from_a_synthetic_result(tmp_path, capsys):
    result = synthetic_gpu_result()
    cpu = {"device": "cpu", "threads": 1, "rows": [
        {"engine": "onnx-fp32", "mode": "greedy", "batch_size": 256, "sentences_per_s": 250.0}]}  # an older run
    targets = bench_report.gpu_targets(result, cpu, "cpu.json")
    assert [t["value"] for t in targets] == [6000.0, 24.0, 0.85, 8.57]
    assert [t["met"] for t in targets] == [True, True, True, False]
    assert [t["status"] for t in targets] == ["met", "met", "met", "NOT met"]
    assert "CPU: cpu.json" in targets[1]["measured"] and "requests of 1 text" in targets[2]["measured"]

    alone = bench_report.gpu_targets(result)  # no CPU reference: that one is not measured, the rest are
    assert [t["met"] for t in alone] == [True, None, True, False] and "--cpu-json" in alone[1]["status"]
    two_threads = bench_report.gpu_targets(result, {**cpu, "threads": 2})
    assert two_threads[1]["met"] is None
    slow = {**result, "rows": [{**r, "sentences_per_s": r["sentences_per_s"] / 10} if r["engine"] == "onnx-fp16"
                               and r.get("batch_size") == 256 and r["mode"] == "greedy" else r
                               for r in result["rows"]]}
    assert [t["met"] for t in bench_report.gpu_targets(slow, cpu)] == [False, False, True, False]
    on_cpu = {**result, "rows": [{**r, "device": "cpu"} for r in result["rows"]]}  # never a target met on the CPU
    assert [t["met"] for t in bench_report.gpu_targets(on_cpu, cpu)] == [None] * 4
    beam2 = bench_report.gpu_targets({**result, "beam_size": 2}, cpu)
    assert beam2[3]["met"] is None

    md = bench_report.markdown({**result, "targets": targets})
    assert "| target | measured | goal | status |" in md and md.count("| met |") == 3 and "| NOT met |" in md
    assert ">= 5,000 sent/s" in md and ">= 20x" in md and ">= 0.8x" in md and ">= 10x" in md
    # the sweep: greedy requests of 1 at five client counts against offline onnx-fp16 batch 1
    assert "| greedy | 1 | 250.00 | 3000.00 | 4200.00 | 4800.00 | 5100.00 | 300.00 (onnx-fp16) | 17.00x |" in md
    assert "| beam | 1 | – | – | – | – | 700.00 | – (onnx-fp16) | – |" in md

    # python -m bench.bench_report: the targets again, from the files
    path, cpu_path = tmp_path / "cuda.json", tmp_path / "cpu.json"
    path.write_text(json.dumps(result))
    cpu_path.write_text(json.dumps(cpu))
    assert bench_report.main([str(path), "--cpu-json", str(cpu_path)]) == 0
    assert [t["met"] for t in json.loads(path.read_text())["targets"]] == [True, True, True, False]
    assert "GPU targets" in path.with_suffix(".md").read_text()
    assert "GPU targets: 3 of 4 met" in capsys.readouterr().out


def test_the_chart_draws_the_sweep(tmp_path):
    pytest.importorskip("matplotlib")
    bench_report.chart(synthetic_gpu_result()["rows"], tmp_path / "c.png", "synthetic")
    assert (tmp_path / "c.png").stat().st_size > 0


def test_a_finished_run_s_chart_is_drawn_again_from_its_json(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    result = {**synthetic_gpu_result(), "sentences": 3072, "machine": {"gpu": "NVIDIA H100", "cpu": "x", "cores": 16}}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(result))
    assert bench_report.main([str(path), "--chart", str(tmp_path / "again.png")]) == 0
    assert (tmp_path / "again.png").stat().st_size > 0
    assert capsys.readouterr().out == f"chart: {tmp_path / 'again.png'}\n"
    assert json.loads(path.read_text()) == result  # the JSON is left as it was: no targets computed
    assert bench_report.chart_title(result) == "3072 sentences, 1 thread(s), cuda: NVIDIA H100"
    cpu = {**result, "device": "cpu", "threads": 2, "machine": {"cpu": "AMD EPYC", "cores": 2}}
    assert bench_report.chart_title(cpu) == "3072 sentences, 2 thread(s), cpu: AMD EPYC (2 cores)"


def test_the_gpu_benchmark_runs_on_the_gpu(tiny_checkpoint, tiny_package, tmp_path):
    torch = pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")
    if not torch.cuda.is_available() or "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("needs a GPU and onnxruntime-gpu")
    sources = tmp_path / "sources.tsv"
    sources.write_text(SOURCES)
    out = tmp_path / "cuda.json"
    assert main(["--checkpoint", str(tiny_checkpoint), "--package", str(tiny_package), "--device", "cuda",
                 "--input", str(sources), "--directions", "en-de", "--sentences", "4", "--batch-sizes", "2",
                 "--clients", "1,2", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert [r.get("error") for r in rows] == [None] * len(rows)
    assert all(r["device"] == "cuda" for r in rows)
    assert all(r["resident"] for r in rows if r["engine"].startswith("onnx") or r["engine"] == "server")
    assert {r["variant"] for r in rows if r["engine"] == "server"} == {"fp16"}
    assert len(result["targets"]) == 4


def test_a_failing_client_count_keeps_the_others_and_a_cpu_server_is_no_gpu_row(monkeypatch):
    """run_server with the server and the load faked: the limits it starts the server with, one
    row per client count (a failed count is an error row), and a server that lists itself on
    the CPU refused when CUDA was asked for."""
    import argparse

    import bench.load.replay as replay
    import server.child as child
    from bench import nmt_bench
    from nmt.v1 import translator_pb2 as pb

    started: list[dict] = []

    class FakeServer:
        address, pid = "127.0.0.1:1", 1

        def __init__(self, package, threads, max_batch_rows=64, device="cpu", extra=()):
            started.append({"rows": max_batch_rows, "device": device, "extra": list(extra)})

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    def fake_load(address, requests, concurrency, beam, alpha):
        if concurrency == 2:
            raise RuntimeError("RESOURCE_EXHAUSTED")
        responses = [pb.TranslateResponse(translations=[pb.Translation(hypotheses=[pb.Hypothesis(
            text=t.upper(), num_tokens=3)]) for t in r.texts]) for r in requests]
        return replay.LoadResult(0.5, [0.1] * len(requests), responses)

    device = {"now": "cpu"}
    monkeypatch.setattr(child, "ServerProcess", FakeServer)
    monkeypatch.setattr(replay, "run_load", fake_load)
    monkeypatch.setattr(child, "process_rss_mib", lambda pid: 100.0)
    monkeypatch.setattr(nmt_bench, "server_model", lambda address: pb.ModelInfo(device=device["now"], variant="fp32"))
    items = [nmt_bench.Item(f"text {i}", "en", "de", None, [4, 10 + i, 3]) for i in range(6)]
    args = argparse.Namespace(package="p", threads=1, device="cpu", clients=[1, 2, 4], batch_sizes=[1, 2],
                              repeats=1, beam_size=4, spin_threads=False, server_int8=False)
    rows = nmt_bench.run_config(args, "server", "beam", 2, items, None, {}, 10.0)
    assert [(r["clients"], bool(r.get("error"))) for r in rows] == [(1, False), (2, True), (4, False)]
    assert rows[0]["texts"] == [f"TEXT {i}" for i in range(6)] and rows[0]["sentences_per_s"] == 12.0
    assert rows[0]["peak_rss_delta_mib"] == 90.0 and rows[0]["device"] == "cpu"
    assert "RESOURCE_EXHAUSTED" in rows[1]["error"]
    # beam 4 x min(4 clients x 2 texts, largest batch 2) = 8 rows, under the server's default 64
    assert started == [{"rows": 64, "device": "cpu", "extra": ["--max-texts", "64", "--max-queue", "1024",
                                                               "--max-tokens-in-flight", "65536", "--no-int8"]}]
    args.server_int8 = True  # nmt-bench --server-int8: nmt-serve's own default, the int8 graphs
    nmt_bench.run_config(args, "server", "beam", 2, items, None, {}, 10.0)
    assert "--no-int8" not in started[-1]["extra"]
    args.server_int8 = False
    args.device, args.batch_sizes, args.clients = "cuda", [1, 32, 256], [1, 256]
    with pytest.raises(RuntimeError, match="came up on cpu"):
        nmt_bench.run_config(args, "server", "beam", 2, items, None, {}, 10.0)
    assert started[-1]["rows"] == 1024 and started[-1]["device"] == "cuda"  # beam 4 x the largest batch, 256
    assert "262144" in started[-1]["extra"]


def test_a_batch_size_larger_than_a_direction_is_refused_and_the_default_fills_it(tiny_checkpoint, tiny_package,
                                                                                   tmp_path, capsys):
    """Rows say the batch size they measured: 128 sentences over 6 directions are 22 a direction,
    so "batch 32" would be batches of 22. Given --sentences, that is a usage error; left out, the
    sentences grow to fill the largest batch of every direction."""
    from bench.nmt_bench import Item, check_batches_fill

    items = [Item("x", src, tgt, None, [1], ()) for src, tgt in [("en", "de")] * 40 + [("de", "en")] * 22]
    check_batches_fill(items, [1, 22])
    with pytest.raises(UsageError) as e:
        check_batches_fill(items, [1, 32])
    assert str(e.value) == ("batch 32 is larger than the 22 sentences of de-en: its batches would hold 22; pass "
                            "--sentences 64 or more (they are split over 2 directions), fewer --directions, or "
                            "leave --sentences out")
    sources = tmp_path / "sources.tsv"
    sources.write_text(SOURCES)
    assert main(["--checkpoint", str(tiny_checkpoint), "--package", str(tiny_package), "--engines", "onnx-fp32",
                 "--modes", "greedy", "--input", str(sources), "--directions", "en-de", "--batch-sizes", "1,8",
                 "--json", str(tmp_path / "b.json")]) == 2
    assert "nmt-bench: error: batch 8 is larger than the 4 sentences of en-de" in capsys.readouterr().err


def test_peak_rss_is_the_child_s_own_not_its_parent_s():
    """A child started from a big process (as nmt-bench's engines are) reports its own peak
    (VmHWM starts afresh at exec; ru_maxrss keeps the forked parent's)."""
    import subprocess
    import sys

    import numpy as np

    ballast = np.ones(400 * 2**20 // 8)  # 400 MiB, touched
    code = "from bench.engines import peak_rss_mib; print(peak_rss_mib())"
    child = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert ballast.sum() > 0 and child < 300


def test_a_peer_whose_library_is_missing_is_a_usage_error(monkeypatch):
    import importlib.util

    from bench import nmt_bench

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pymarian" else real(name, *a))
    with pytest.raises(UsageError, match=r"^marian-int8 needs pymarian \(pip install -e '\.\[marian\]'\)$"):
        nmt_bench.parse_args(["--checkpoint", "x", "--package", "y", "--engines", "onnx-int8,marian-int8"])


# CTranslate2 4.8.5's start-up log on an AMD EPYC (Zen 4), as it prints it (less the time stamps).
CT2_LOG_AMD = """[ctranslate2] [thread 3662] [info] CPU: AuthenticAMD (SSE4.1=true, AVX=true, AVX2=true, AVX512=true)
[ctranslate2] [thread 3662] [info]  - Selected ISA: AVX2
[ctranslate2] [thread 3662] [info]  - Use Intel MKL: false
[ctranslate2] [thread 3662] [info]  - SGEMM backend: DNNL (packed: false)
[ctranslate2] [thread 3662] [info]  - GEMM_S16 backend: none (packed: false)
[ctranslate2] [thread 3662] [info]  - GEMM_S8 backend: DNNL (packed: false, u8s8 preferred: true)
[ctranslate2] [thread 3662] [info] Loaded model ct2 on device cpu:0
"""


def test_ct2_kernels_are_read_from_its_log():
    from bench.engines import ct2_kernels

    kernels = ct2_kernels(CT2_LOG_AMD)
    assert kernels == {"isa": "AVX2", "mkl": "false", "sgemm": "DNNL", "gemm_s8": "DNNL"}
    assert bench_report.kernels_text(kernels) == "ISA AVX2, oneMKL false, float products DNNL, int8 products DNNL"
    assert ct2_kernels("[info] Loaded model x on device cpu:0") == {}  # a log without them: nothing invented
    rows = [{"engine": "ct2-int8", "kernels": kernels}, {"engine": "onnx-int8"}, {"engine": "ct2-int8", "error": "x"}]
    assert bench_report.kernels_lines(rows) == [
        "ct2-int8 kernels: ISA AVX2, oneMKL false, float products DNNL, int8 products DNNL"]


def test_stderr_of_the_process_is_captured_and_given_back(capfd):
    import os

    from bench.engines import stderr_captured

    with stderr_captured() as got:
        os.write(2, b"from C++\n")  # what a library writes to the descriptor, below sys.stderr
    os.write(2, b"after\n")
    assert got == ["from C++\n"]
    assert capfd.readouterr().err == "after\n"


def test_the_server_serves_int8_with_server_int8(tiny_checkpoint, tiny_package, tmp_path):
    sources = tmp_path / "sources.tsv"
    sources.write_text(SOURCES)
    out = tmp_path / "int8.json"
    assert main(["--checkpoint", str(tiny_checkpoint), "--package", str(tiny_package), "--input", str(sources),
                 "--directions", "en-de", "--sentences", "4", "--batch-sizes", "2", "--modes", "greedy",
                 "--engines", "onnx-int8,server", "--server-int8", "--clients", "2", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    offline, server = rows
    # The int8 width this CPU runs exactly (int8w8 with VNNI or AMX, engine/cpu.py), offline and served alike
    width = int8_variant(ModelPackage.load(tiny_package).variants)
    assert (offline["engine"], server["engine"]) == ("onnx-int8", "server")
    assert offline["variant"] == server["variant"] == width
    assert server["texts"] == offline["texts"] and any(server["texts"])  # batch-invariant int8: the same texts
    assert bench_report.sweep_series(rows)[("greedy", 2)]["offline"] == offline["sentences_per_s"]


def test_a_server_row_is_compared_with_the_offline_row_of_its_own_graphs():
    """onnx-int8 runs the int8 width of the CPU (int8w8 with VNNI or AMX) and records it: a server that
    served int8w8 is compared with it, and with no other engine's rows."""
    offline = {"engine": "onnx-int8", "variant": "int8w8", "mode": "greedy", "batch_size": 2, "sentences_per_s": 9.0}
    other = {"engine": "onnx-fp32", "variant": "fp32", "mode": "greedy", "batch_size": 2, "sentences_per_s": 5.0}
    server = {"engine": "server", "variant": "int8w8", "mode": "greedy", "batch_size": 2, "clients": 2,
              "sentences_per_s": 12.0}
    assert [bench_report.same_graphs(r, "int8w8") for r in (offline, other, server)] == [True, False, False]
    assert not bench_report.same_graphs(offline, "int8") and bench_report.same_graphs(other, "fp32")
    assert bench_report.offline_reference([other, offline, server], server) is offline
    assert bench_report.sweep_series([other, offline, server])[("greedy", 2)]["offline"] == 9.0
