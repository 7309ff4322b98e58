"""The prepared GPU run (scripts/gpu_run.sh, bench/gpu_run.py) and the GPU training recipe
(scripts/gpu_train.sh), run end to end in their CPU mode on the tiny test model: the result files
exist with every key and sane numbers, so the run is known to work before a GPU is at hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import gpu_run

ROOT = Path(__file__).resolve().parents[1]


def script(*args: str, env: dict[str, str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHON": sys.executable, **(env or {})})


def test_dry_run_prints_the_plan_of_each_device(capsys, tmp_path):
    assert gpu_run.main(["--dry-run", "--out", str(tmp_path / "r")]) == 0
    plan = capsys.readouterr().out
    for words in ("--fp16", "879 verses of John", "fp16, fp32, fp16-host on cuda against fp32 on the CPU",
                  "--device cuda --engines pytorch-cache,onnx-fp32,onnx-fp16,ct2-fp16", "batches 32,128,256",
                  "--concurrency 64,256", "budget 480 s"):
        assert words in plan, words
    assert gpu_run.main(["--device", "cpu", "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert "int8, fp32 on cpu" in plan and "--concurrency 4 " in plan and "--int8" in plan
    assert not (tmp_path / "r").exists()  # a dry run writes nothing
    r = script("scripts/gpu_run.sh", "--dry-run", "--out", str(tmp_path / "r"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("plan (device cuda") and "take.sh" in r.stdout and "nmt_bench" in r.stdout
    assert gpu_run.main(["--device", "cpu", "--variants", "fp16"]) == 2  # a CUDA variant on the CPU
    assert gpu_run.main(["--batch-sizes", "1,1024"]) == 2  # more than --bench-sentences (512)
    assert "--variants" in capsys.readouterr().err


def test_the_cpu_mode_runs_every_phase(tiny_checkpoint, tiny_package, tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    r = script("scripts/gpu_run.sh", "--device", "cpu", "--out", str(out), "--work", str(work),
               "--checkpoint", str(tiny_checkpoint), "--package", str(tiny_package), "--verses", "8",
               "--engines", "onnx-fp32", "--batch-sizes", "1,4", "--bench-sentences", "8", "--budget-s", "300")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["gpu_run.log", "results.json", "results.md"]
    res = json.loads((out / "results.json").read_text())
    assert {k: v["status"] for k, v in res["phases"].items()} == {p: "ok" for p in gpu_run.PHASES}
    assert res["device"] == "cpu" and res["device_name"] and "CPUExecutionProvider" in res["host"]["providers"]
    assert res["export"]["exported"] is False  # the package had the CPU's variants
    # correctness: the CPU fp32 reference, and int8 (the server's pick on the CPU) and fp32 against it
    rows = res["correctness"]["rows"]
    assert {(r["variant"], r["mode"], r.get("reference", False)) for r in rows} == {
        (v, m, ref) for m in ("greedy", "beam") for v, ref in (("fp32", True), ("int8", False), ("fp32", False))}
    for row in rows:
        assert row["sentences"] == 16 and 0 <= row["same_text_pct"] <= 100 and row["bleu"] is not None, row
        assert set(row["bleu_by_direction"]) == {"en-de", "de-en"}
    assert all(r["same_text_pct"] == 100 for r in rows if r["variant"] == "fp32")  # the same graphs, the same CPU
    # speed: nmt-bench's rows, memory per row (no GPU here: the RSS)
    speed = res["speed"]["rows"]
    assert {(r["engine"], r["mode"], r["batch_size"]) for r in speed} == {
        ("onnx-fp32", m, b) for m in ("greedy", "beam") for b in (1, 4)}
    for row in speed:
        assert row["sentences_per_s"] > 0 and row["tokens_per_s"] > 0 and row["device"] == "cpu", row
        assert "gpu_mem_mib" in row and row["peak_rss_delta_mib"] > 0 and "texts" not in row
    # the profile of the server's variant: op types with their share of a step
    prof = res["profile"]
    assert prof["runs"] > 0 and prof["mean_run_ms"] > 0 and prof["variant"].startswith("int8")
    assert prof["top_ops"] and abs(sum(o["share"] for o in prof["top_ops"]) - 1) < 0.5
    # the server under load, against the offline engine
    server = res["server"]
    assert server["device"] == "cpu" and [r["clients"] for r in server["rows"]] == [4, 4]
    for row in server["rows"]:
        assert row["sentences_per_s"] > 0 and 0 < row["p50_ms"] <= row["p99_ms"] and not row["errors"], row
    md = (out / "results.md").read_text()
    for heading in ("# GPU run: cpu", "## Correctness", "## Speed", "## Profile", "## Server"):
        assert heading in md, heading
    assert "gpu_run.sh: exit 0" in (out / "gpu_run.log").read_text()


def test_profile_summary_keeps_the_timed_half(tmp_path):
    events = []
    for run in range(4):  # two warm-up runs, two timed ones; the warm-up's MatMul is slow
        t0 = run * 1000
        events.append({"cat": "Session", "name": "model_run", "ts": t0, "dur": 100})
        events.append({"cat": "Node", "name": "mm_kernel_time", "ts": t0 + 1, "dur": 500 if run < 2 else 60,
                       "args": {"op_name": "MatMul"}})
        events.append({"cat": "Node", "name": "add_kernel_time", "ts": t0 + 70, "dur": 20, "args": {"op_name": "Add"}})
    path = tmp_path / "p.json"
    path.write_text(json.dumps(events))
    got = gpu_run.profile_summary(path)
    assert got["runs"] == 2 and got["mean_run_ms"] == 0.1 and got["kernel_share_of_run"] == 0.8
    assert got["top_ops"] == [{"op": "MatMul", "ms_per_run": 0.06, "share": 0.75},
                              {"op": "Add", "ms_per_run": 0.02, "share": 0.25}]


def test_gpu_train_continues_a_model_and_brings_it_back_in_parts(tiny_checkpoint, tmp_path):
    run, out = tmp_path / "run", tmp_path / "back"
    env = {"DEVICE": "cpu", "INIT": str(tiny_checkpoint), "MAX_STEPS": "2", "BATCH_TOKENS": "1000",
           "FOREGROUND": "1", "RUN": str(run), "CORPUS": str(tmp_path / "none.tar.xz")}
    dry = script("scripts/gpu_train.sh", "start", "--dry-run", env={**env, "FOREGROUND": "0", "DEVICE": "cuda"})
    assert dry.returncode == 0 and "setsid nohup" in dry.stdout and "--batch-tokens 1000" in dry.stdout
    assert "--device cuda" in dry.stdout and "train.bf16=true" in dry.stdout and not run.exists()
    r = script("scripts/gpu_train.sh", "start", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "done: step 2" in (run / "train.log").read_text()
    r = script("scripts/gpu_train.sh", "collect", str(out), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    parts = sorted(out.glob("model.tar.part-*"))
    assert parts and all(p.stat().st_size <= 15 * 2**20 for p in parts)
    join = (out / "JOIN.txt").read_text().strip()
    assert join in r.stdout
    subprocess.run(join.replace(str(run), str(tmp_path / "joined")), shell=True, cwd=out, check=True)
    from training import checkpoint as ckpt_io

    shipped = ckpt_io.load(tmp_path / "joined" / "model" / "model.pt")
    assert shipped["step"] == 2 and shipped["dtype"] == "float16"


@pytest.mark.skipif(not os.environ.get("NMT_GPU_RUN"), reason="the GPU run itself: NMT_GPU_RUN=1 on a GPU host")
def test_the_gpu_run_on_a_gpu(tmp_path):  # pragma: no cover - needs a GPU
    r = script("scripts/gpu_run.sh", "--out", str(tmp_path / "out"), timeout=900)
    assert r.returncode == 0, r.stdout[-3000:]

