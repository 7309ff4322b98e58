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


def test_attention_layout_forms_compute_the_same_products(capsys):
    """Every form bench/attention_layout.py times computes the product it names, on its layout."""
    import numpy as np
    import onnxruntime as ort

    from bench.attention_layout import FORMS, LAYERS, graph
    from bench.attention_layout import main as layout_main

    rows, heads, d_head, positions = 3, 2, 4, 5
    rng = np.random.default_rng(0)
    q, w = rng.random((rows, heads, 1, d_head), np.float32), rng.random((rows, heads, 1, positions), np.float32)
    k, v = rng.random((rows, heads, positions, d_head), np.float32), rng.random((rows, heads, positions, d_head),
                                                                               np.float32)
    for form, (op, attrs, keys_t) in FORMS.items():
        weights = form.startswith("weights")
        session = ort.InferenceSession(graph(op, attrs, rows, heads, d_head, positions, keys_t, weights),
                                       providers=["CPUExecutionProvider"])
        stored = v if weights else (k.swapaxes(2, 3).copy() if keys_t else k)
        feeds = {"a": w if weights else q, **{f"m{i}": stored for i in range(LAYERS)}}
        expected = w @ v if weights else (q @ k.swapaxes(2, 3)) * attrs.get("alpha", 1.0)
        for got in session.run(None, feeds):
            assert np.allclose(got, expected, atol=1e-5), form
    assert layout_main(["--rows", "2", "--heads", "2", "--d-head", "4", "--positions", "3", "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    assert all(form in out for form in FORMS) and "P=3" in out


def test_profile_decode_smoke(tiny_checkpoint, tiny_package, tmp_path, capsys):
    """bench/profile_decode.py on the tiny model: every timed part, CT2, step costs, operators."""
    from bench.profile_decode import main as profile_main

    sources = tmp_path / "sources.txt"
    sources.write_text("Jesus wept.\nIn the beginning was the Word.\nHe said,\nPeace be with you.\n")
    assert profile_main(["--checkpoint", str(tiny_checkpoint), "--package", str(tiny_package), "--file", str(sources),
                         "--pair", "en-de", "--sentences", "4", "--batch-size", "2", "--beam-size", "2",
                         "--variant", "int8", "--ort-ops"]) == 0
    out = capsys.readouterr().out
    for part in ("decoder.run", "encoder.run", "other python", "Job.advance", "Batch.add", "Batch.remove",
                 "Batch._free_slot", "ctranslate2 int8 total", "one decoder step, 4 rows",
                 "onnxruntime operators, one decoder step (4 rows"):
        assert part in out, part
