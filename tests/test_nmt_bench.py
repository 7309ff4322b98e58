"""Smoke run of nmt-bench on the tiny model: every CPU engine (CTranslate2 and the gRPC server
included) runs, the JSON has positive numbers for each, and the decoders agree."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ctranslate2")

from bench.nmt_bench import main

ENGINES = ["pytorch", "pytorch-cache", "onnx-fp32", "onnx-int8", "ct2-fp32", "ct2-int8", "server"]


def test_nmt_bench_smoke(tiny_checkpoint, tiny_package, tmp_path, capsys):
    sources = tmp_path / "sources.tsv"
    sources.write_text("Jesus wept.\tJesus wept.\nIn the beginning was the Word.\tIn the beginning was the Word.\n"
                       "He said,\tHe said,\nPeace be with you.\tPeace be with you.\n")
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
    greedy = {(r["engine"], r["batch_size"]): r["texts"] for r in rows if r["mode"] == "greedy"}
    for bs in (1, 4):
        assert greedy[("onnx-fp32", bs)] == greedy[("pytorch-cache", bs)] == greedy[("ct2-fp32", bs)]
        assert greedy[("pytorch", bs)] == greedy[("pytorch-cache", bs)] == greedy[("server", bs)]
        assert any(greedy[("pytorch-cache", bs)])
    assert all(r["identical_to_reference"] == 1.0 for r in rows
               if r["mode"] == "greedy" and not r["engine"].endswith("int8"))
    assert result["machine"]["cores"] and result["machine"]["versions"]["ctranslate2"]
    assert chart.stat().st_size > 0 and out.with_suffix(".md").read_text().startswith("| engine |")
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
