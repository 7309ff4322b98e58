"""Smoke run of the cache benchmark on the tiny model: every engine runs and the JSON is written."""

from __future__ import annotations

import json

from bench.cache_speedup import main


def test_cache_speedup_smoke(tiny_checkpoint, tiny_package, tmp_path, capsys):
    out = tmp_path / "bench.json"
    sources = tmp_path / "sources.txt"
    sources.write_text("Jesus wept.\nIn the beginning was the Word.\nHe said,\nAll things were made through him.\n")
    assert main(["--checkpoint", str(tiny_checkpoint), "--package", str(tiny_package), "--sentences", "4",
                 "--source-file", str(sources),
                 "--batch-sizes", "1,4", "--tokens", "8", "--repeats", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    engines = {r["engine"] for r in result["rows"]}
    assert engines == {"pytorch, no cache", "pytorch, KV cache", "onnxruntime fp32, KV cache",
                       "onnxruntime int8, KV cache"}
    assert len(result["rows"]) == 8 and all(r["sentences_per_s"] > 0 for r in result["rows"])
    assert "vs no cache" in capsys.readouterr().out


def test_server_throughput_smoke(tiny_package, tmp_path, capsys):
    from bench.server_throughput import main as server_main

    sources = tmp_path / "sources.txt"
    sources.write_text("Jesus wept.\nIn the beginning was the Word.\nHe said,\nPeace be with you.\n")
    out = tmp_path / "server.json"
    assert server_main(["--package", str(tiny_package), "--sentences", "16", "--source-file", str(sources),
                        "--levels", "1,4", "--threads", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert [r["clients"] for r in result["rows"]] == [1, 4]
    assert result["offline_sentences_per_s"] > 0 and all(r["sentences_per_s"] > 0 for r in result["rows"])
    assert "vs offline" in capsys.readouterr().out
