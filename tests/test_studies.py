"""The studies of bench/studies/ on the tiny model: each computes what it says and prints its table."""

from __future__ import annotations

import json
import re

import pytest


def test_profile_decode_smoke(tiny_checkpoint, tiny_package, tmp_path, capsys):
    """bench/studies/profile_decode.py on the tiny model: every timed part, CT2, step costs, operators."""
    from bench.studies.profile_decode import main as profile_main

    sources = tmp_path / "sources.txt"
    sources.write_text("Jesus wept.\nIn the beginning was the Word.\nHe said,\nPeace be with you.\n")
    assert profile_main(["--checkpoint", str(tiny_checkpoint), "--package", str(tiny_package), "--file", str(sources),
                         "--pair", "en-de", "--sentences", "4", "--batch-size", "2", "--beam-size", "2",
                         "--variant", "int8", "--ort-ops"]) == 0
    out = capsys.readouterr().out
    from engine.cpu import int8_variant
    from engine.package import ModelPackage

    # int8: the width a server runs on this CPU (int8w8 with VNNI/AMX), as nmt-bench measures it
    assert f"ours (onnxruntime {int8_variant(ModelPackage.load(tiny_package).variants)}) total" in out
    for part in ("decoder.run", "encoder.run", "other python", "Job.advance", "Batch.add", "Batch.remove",
                 "Batch._fit_slots", "ctranslate2 int8 total", "one decoder step, 4 rows",
                 "onnxruntime operators, one decoder step (4 rows",
                 "the loop's Python (all but the two graphs' runs) ",
                 "speed vs ctranslate2: now ", "with a free loop (the graphs' runs alone) at most "):
        assert part in out, part


def test_step_cost_times_both_engines_at_every_size(tiny_checkpoint, tiny_package, tmp_path, capsys):
    """bench/studies/step_cost.py on the tiny model: one row per batch and beam size, both engines."""
    from bench.studies.step_cost import main as step_main

    sources = tmp_path / "sources.txt"
    sources.write_text("Jesus wept.\nIn the beginning was the Word.\n")
    assert step_main(["--checkpoint", str(tiny_checkpoint), "--package", str(tiny_package), "--file", str(sources),
                      "--pair", "en-de", "--batch-sizes", "1,2",
                      "--beam-sizes", "1,2", "--short", "2", "--long", "4", "--rounds", "1", "--repeats", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("int8, 1 thread(s), en-de: output length forced to 2 and 4 tokens")
    rows = [line.split() for line in lines[2:]]
    assert [(r[0], r[1], r[2]) for r in rows] == [("1", "1", "1"), ("1", "2", "2"), ("2", "1", "2"), ("2", "2", "4")]
    assert all(r[6].endswith("x") for r in rows)


def test_step_cost_refuses_lengths_out_of_order(tiny_checkpoint, tiny_package, capsys):
    import pytest

    from bench.studies.step_cost import main as step_main

    with pytest.raises(SystemExit):
        step_main(["--checkpoint", str(tiny_checkpoint), "--package", str(tiny_package), "--short", "8", "--long", "8"])
    assert "--short 8 and --long 8: need 0 < short < long" in capsys.readouterr().err


def test_memory_bound_chain_and_weight_bytes(tiny_package, tmp_path, capsys):
    """bench/studies/memory_bound.py: its chain computes the products it times, a table only looked up
    by Gather is not counted as streamed, and a run over the tiny package prints both variants."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from bench.studies.memory_bound import chain_graph, streamed_weight_bytes
    from bench.studies.memory_bound import main as memory_main

    model_bytes = chain_graph(pairs=2, d_model=4, d_ff=6)
    weights = {i.name: numpy_helper.to_array(i) for i in onnx.load_from_string(model_bytes).graph.initializer}
    x = np.random.default_rng(0).random((3, 4), np.float32)
    expected = x
    for i in range(2):
        expected = expected @ weights[f"up{i}"] @ weights[f"down{i}"]
    got = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.allclose(got, expected, rtol=1e-5)

    table, w = np.zeros((10, 4), np.float32), np.zeros((4, 3), np.float32)  # 160 bytes looked up, 48 streamed
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"]), helper.make_node("MatMul", ["e", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(table, "table"), numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph), str(tmp_path / "g.onnx"))
    assert streamed_weight_bytes(tmp_path / "g.onnx") == 48

    assert memory_main(["--package", str(tiny_package), "--rows", "2", "--d-ff", "8", "--sizes", "0.01,0.02",
                        "--seconds", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "fp32 products of 2 rows" in out and "decoder step of" in out
    step_rows = out.split("decoder step of")[1].splitlines()[2:]
    assert [row.split()[0] for row in step_rows] == ["fp32", "int8"] and all(len(r.split()) == 5 for r in step_rows)


def test_variant_ab_smoke(tiny_checkpoint, tiny_package, tmp_path, capsys):
    """bench.studies.variant_ab on the tiny package: quality, invariance and speed rows for each variant."""
    from bench.studies.variant_ab import main as ab_main

    out, tsv = tmp_path / "ab.json", tmp_path / "test.tsv"
    tsv.write_text("Jesus wept.\tJesus weinte.\nIn the beginning was the Word.\tIm Anfang war das Wort.\n"
                   "He said,\tEr sprach:\nAll things were made through him.\tAlle Dinge wurden durch dasselbe.\n"
                   "Peace be with you.\tFriede euch!\nAmen.\tAmen.\n")
    assert ab_main(["--checkpoint", str(tiny_checkpoint), "--directions", "en-de", "--input", str(tsv),
                    "--sentences", "6", "--speed-sentences", "4", "--batch-sizes", "1,4", "--rounds", "1",
                    "--json", str(out), f"fp32={tiny_package}:fp32", f"int8={tiny_package}:int8"]) == 0
    result = json.loads(out.read_text())
    assert [(q["variant"], q["texts"]) for q in result["quality"]] == [("fp32", 6), ("int8", 6)]
    # int8's output does not depend on its batch, static or continuous
    assert [(q["differ_alone"], q["differ_continuous"]) for q in result["quality"]] == [(0, 0), (0, 0)]
    assert [(r["batch_size"], r["variant"]) for r in result["speed"]] == [(1, "fp32"), (1, "int8"), (4, "fp32"),
                                                                         (4, "int8")]
    assert "greedy batch" in capsys.readouterr().out


def test_fused_linear_pack_puts_each_weight_where_the_kernel_reads_it():
    """bench/studies/fused_linear.py's layout for vpdpbusd: (k, n) at ((n // 16) * (K // 4) + k // 4) * 64
    + (n % 16) * 4 + k % 4."""
    import numpy as np

    from bench.studies.fused_linear import pack

    k, n = 8, 32
    w = (np.arange(k * n) % 251 - 125).astype(np.int8).reshape(k, n)
    flat = pack(w)
    assert flat.shape == (k * n,) and flat.dtype == np.int8
    for kk in range(k):
        for nn in range(n):
            assert flat[((nn // 16) * (k // 4) + kk // 4) * 64 + (nn % 16) * 4 + kk % 4] == w[kk, nn]


def test_fused_linear_says_what_is_missing(tiny_package, tmp_path, capsys):
    import pytest

    from bench.studies.fused_linear import main as fused_main

    with pytest.raises(SystemExit) as exit_info:
        fused_main(["--package", str(tiny_package), "--ort-include", str(tmp_path)])
    assert exit_info.value.code == 2
    assert ("no onnxruntime headers (onnxruntime_lite_custom_op.h): pass --ort-include or set ORT_INCLUDE"
            in capsys.readouterr().err)


def test_fused_linear_builds_and_matches_the_graphs_chain(tiny_package, capsys):
    """The compiled operator on the tiny package's shapes: every shape and row count, outputs within
    float rounding of the int8w8 chain, each row the same bits alone as in the batch. Needs g++,
    onnxruntime's headers (ORT_INCLUDE; CI fetches them with scripts/ort_headers.sh) and VNNI."""
    import re

    import pytest

    from bench.studies.fused_linear import cpu_flags, find_include, missing
    from bench.studies.fused_linear import main as fused_main

    why = missing(find_include(None), cpu_flags())
    if why:
        pytest.skip("; ".join(why))
    assert fused_main(["--package", str(tiny_package), "--rounds", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    shapes = [tuple(line.split(",")[0].split()) for line in rows]
    assert shapes == [("64", "x", "64")] * 4 + [("64", "x", "128")] * 4 + [("128", "x", "64")] * 4 \
        + [("64", "x", "400")] * 4
    assert [int(line.split(",")[1].split()[0]) for line in rows] == [1, 4, 32, 128] * 4
    for line in rows:
        assert line.endswith("fused rows the same bits alone: True"), line
        assert float(re.search(r"max \|fused - chain\| (\S+) ", line).group(1)) < 1e-4, line


def test_fused_step_computes_the_package_step(tiny_checkpoint, tiny_package, tmp_path, capsys):
    """bench/studies/fused_step.py on the tiny model: the fused layers give the int8w8 step graph's
    log-probabilities (to float rounding: the same int8 scheme and weights), the same best token in
    every row, each row the same bits alone as in the batch. Needs what the fused_linear test needs."""
    import re

    import pytest

    from bench.studies.fused_linear import cpu_flags, find_include, missing
    from bench.studies.fused_step import main as step_main

    why = missing(find_include(None), cpu_flags())
    if why:
        pytest.skip("; ".join(why))
    sources = tmp_path / "sources.txt"
    sources.write_text("Jesus wept.\nIn the beginning was the Word.\nHe said,\nPeace be with you.\n")
    assert step_main(["--checkpoint", str(tiny_checkpoint), "--package", str(tiny_package), "--past", "5",
                      "--source", "7", "--rounds", "1", "--decode", "--file", str(sources), "--pair", "en-de",
                      "--sentences", "4", "--batch-size", "2", "--beam-size", "2"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    rows, decodes = lines[:4], lines[4:]
    assert [int(line.split()[0]) for line in rows] == [1, 4, 32, 128]
    # Whole decodes: both of ours and CTranslate2, and how many outputs the two of ours share.
    assert len(decodes) == 1 and decodes[0].startswith("  4 sentences, batch 2, beam 2: sentences/s step graph ")
    assert "CTranslate2 int8" in decodes[0] and re.search(r"the same tokens in [0-4]/4 outputs$", decodes[0])
    for line in rows:
        n = line.split()[0]
        assert f"best token the same in {n}/{n} rows; fused rows the same bits alone: True" in line, line
        # A row quantized on the other side of a rounding boundary moves its log-probs by ~1e-2.
        assert float(re.search(r"max \|delta log p\| (\S+),", line).group(1)) < 0.1, line


def test_fused_step_says_what_is_missing(tiny_checkpoint, tiny_package, tmp_path, capsys):
    import pytest

    from bench.studies.fused_step import main as step_main

    with pytest.raises(SystemExit) as exit_info:
        step_main(["--checkpoint", str(tiny_checkpoint), "--package", str(tiny_package),
                   "--ort-include", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "fused_step: cannot build the operators here: no onnxruntime headers" in capsys.readouterr().err


def test_fused_step_refuses_a_cache_of_the_wrong_shape(tiny_checkpoint, tiny_package, tmp_path):
    """A fused layer given a cache whose values do not match its keys says so, not a crash."""
    import onnxruntime as ort
    import pytest

    from bench.studies.fused_linear import build, cpu_flags, find_include, missing, session
    from bench.studies.fused_step import fused_step_model, random_feeds
    from engine.package import ModelPackage
    from training.checkpoint import load_model

    why = missing(find_include(None), cpu_flags())
    if why:
        pytest.skip("; ".join(why))
    model, _, _ = load_model(tiny_checkpoint)
    fused = session(fused_step_model(model), 1, build(find_include(None), tmp_path))
    feeds = random_feeds(ModelPackage.load(tiny_package), rows=2, past=5, source=7)
    feeds["past_v_0"] = feeds["past_v_0"][:, :, :4]  # 4 cached values for 5 cached keys
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.RuntimeException,
                       match="FusedDecoderLayerInt8: shapes do not fit the layer"):
        fused.run(None, feeds)


def test_glossary_terms_measures_every_way_on_a_package(tiny_package, capsys):
    """bench/studies/glossary_terms.py on the tiny package: a row per mode and way, rates in percent."""
    from bench.studies.glossary_terms import METHODS
    from bench.studies.glossary_terms import main as glossary_main

    assert glossary_main(["--package", str(tiny_package), "--sentences", "8", "--threads", "1", "--fp32"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{tiny_package} en-de, 8 lines, ") and lines[1].split()[:3] == ["mode", "way", "cases"]
    rows = lines[2:]
    assert [(r[:9].strip(), r[10:23].strip()) for r in rows] == [(m, w) for m in ("glossary", "keep") for w in METHODS]
    assert all(r.split()[-1].endswith("%") for r in rows)


def test_resident_rows_counts_both_ways_with_the_same_tokens(tiny_package, capsys):
    """bench/studies/resident_rows.py on the tiny model: fewer rows runs with dead rows kept, same tokens."""
    from bench.studies.resident_rows import main as rows_main

    assert rows_main(["--package", str(tiny_package), "--sentences", "24"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "24 phrases, greedy, one batch | step runs | rows runs"
    kept, every = (line.split(" | ") for line in out[1:3])
    assert kept[0] == "dead rows kept (COMPACT_AT 0.5)" and every[0] == "a rebuild at every leave"
    assert kept[1] == every[1] and int(kept[2]) < int(every[2])
    assert out[3] == "same tokens: True"


def _attention_reference(q, keys, values, mask, heads):
    """Multi-head attention of one query row per row in numpy: q (B, 1, D), keys and values
    (C, H, S, Dh) read by B / C consecutive rows each, mask (C, S) -> (B, 1, D)."""
    import numpy as np

    from bench.studies.contrib_ops import NEG

    b, c = q.shape[0], keys.shape[0]
    qh = q.reshape(b, heads, -1) / np.sqrt(keys.shape[-1])  # (B, H, Dh)
    src = np.arange(b) // (b // c)
    scores = np.einsum("bhd,bhsd->bhs", qh, keys[src])
    scores = np.where(mask[src][:, None, :], scores, NEG)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhs,bhsd->bhd", p, values[src]).reshape(b, 1, -1)


def test_contrib_ops_blocks_compute_attention_both_ways():
    """The study's two cross-attention blocks (today's nodes, MultiHeadAttention) and its two
    self-attention blocks compute multi-head attention, for a source per row and per four rows."""
    import numpy as np

    from bench.studies.contrib_ops import cross_mha, cross_today, self_mha, self_today
    from bench.studies.fused_linear import session

    heads, d_head, s, past = 4, 16, 7, 5
    rng = np.random.default_rng(0)
    today, mha = session(cross_today(heads, d_head), 1), session(cross_mha(heads, d_head), 1)
    for rows, beam in ((3, 1), (8, 4)):
        q = rng.standard_normal((rows, 1, heads * d_head)).astype(np.float32)
        keys, values = (rng.standard_normal((rows // beam, heads, s, d_head)).astype(np.float32) for _ in range(2))
        mask = np.ones((rows // beam, s), bool)
        mask[0, 4:] = False
        want = _attention_reference(q, keys, values, mask, heads)
        got_today = today.run(None, {"q": q, "k": np.ascontiguousarray(keys.transpose(0, 1, 3, 2)), "v": values,
                                     "mask": mask})[0]
        got_mha = mha.run(None, {"q": q, "k": keys, "v": values, "mask": mask})[0]
        np.testing.assert_allclose(got_today, want, atol=1e-5)
        np.testing.assert_allclose(got_mha, want, atol=1e-5)

    today, mha = session(self_today(heads, d_head), 1), session(self_mha(heads, d_head), 1)
    rows = 3
    q, k, v = (rng.standard_normal((rows, 1, heads * d_head)).astype(np.float32) for _ in range(3))
    past_k, past_v = (rng.standard_normal((rows, heads, past, d_head)).astype(np.float32) for _ in range(2))
    past_mask = np.ones((rows, past), bool)
    past_mask[1, 3:] = False
    # the new token attends to the real cached slots and to itself
    all_k = np.concatenate([past_k, k.reshape(rows, 1, heads, d_head).transpose(0, 2, 1, 3)], axis=2)
    all_v = np.concatenate([past_v, v.reshape(rows, 1, heads, d_head).transpose(0, 2, 1, 3)], axis=2)
    want = _attention_reference(q, all_k, all_v, np.concatenate([past_mask, np.ones((rows, 1), bool)], axis=1), heads)
    out_today, new_k, new_v = today.run(None, {"q": q, "k": k, "v": v, "past_mask": past_mask, "past_v": past_v,
                                               "past_k": np.ascontiguousarray(past_k.transpose(0, 1, 3, 2))})
    out_mha, present_k, _ = mha.run(None, {"q": q, "k": k, "v": v, "past_k": past_k, "past_v": past_v,
                                           "past_mask": past_mask})
    np.testing.assert_allclose(out_today, want, atol=1e-5)
    np.testing.assert_allclose(out_mha, want, atol=1e-5)
    assert new_k.shape == (rows, heads, d_head, 1) and new_v.shape == (rows, heads, 1, d_head)
    np.testing.assert_array_equal(new_k[..., 0], all_k[:, :, past])
    np.testing.assert_array_equal(present_k, all_k)  # MultiHeadAttention hands back the whole cache


def test_contrib_ops_nbits_product_is_the_layer_on_block_weights():
    """MatMulNBits as the study builds it: x w + b on 8-bit weights in blocks of 32 (within the
    int8 activations' rounding), each row the same bits alone as in the batch."""
    import numpy as np

    from bench.studies.contrib_ops import nbits_model
    from bench.studies.fused_linear import session

    rng = np.random.default_rng(1)
    w = (rng.standard_normal((64, 48)) * 0.05).astype(np.float32)
    b = rng.standard_normal(48).astype(np.float32)
    x = rng.standard_normal((5, 64)).astype(np.float32)
    nbits = session(nbits_model(w, b), 1)
    got = nbits.run(None, {"x": x})[0]
    exact = x @ w + b
    assert float(np.abs(got - exact).max()) < 0.02 * float(np.abs(exact).max())
    for r in range(5):
        np.testing.assert_array_equal(nbits.run(None, {"x": x[r:r + 1]})[0][0], got[r])


def test_contrib_ops_rewritten_step_is_the_package_step(tiny_package):
    """Every cross-attention block of the tiny package's decoder rewritten to MultiHeadAttention:
    fewer nodes, the same log-probabilities and cross-attention weights (float rounding) for a source
    per row and per two rows, and a job's rows the same bits alone as in the batch."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    from bench.studies.contrib_ops import mha_decoder, step_inputs
    from engine import contract
    from engine.package import ModelPackage

    package = ModelPackage.load(tiny_package)
    dims = package.dims
    rng = np.random.default_rng(2)
    for variant in ("fp32", "int8"):
        path = package.graph_path(contract.DECODER, variant)
        model = mha_decoder(path, dims.n_decoder_layers, dims.n_heads, dims.d_head)
        ops = [n.op_type for n in model.graph.node]
        assert ops.count("MultiHeadAttention") == dims.n_decoder_layers
        assert len(ops) < len(onnx.load(str(path)).graph.node)
        today = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        rewritten = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        for rows, beam in ((3, 1), (6, 2)):
            a, b = step_inputs(dims, rows, beam, 4, rng)
            want = dict(zip([o.name for o in today.get_outputs()], today.run(None, a), strict=True))
            got = dict(zip([o.name for o in rewritten.get_outputs()], rewritten.run(None, b), strict=True))
            np.testing.assert_allclose(got[contract.LOG_PROBS], want[contract.LOG_PROBS], atol=1e-4)
            np.testing.assert_allclose(got[contract.CROSS_ATTENTION], want[contract.CROSS_ATTENTION], atol=1e-6)
            first = {k: v[:beam] if v.shape[0] == rows else v[:1] for k, v in b.items()}
            np.testing.assert_array_equal(rewritten.run(None, first)[0], got[contract.LOG_PROBS][:beam])


def test_contrib_ops_prints_every_comparison(tiny_package, capsys):
    from bench.studies.contrib_ops import main as contrib_main

    assert contrib_main(["--package", str(tiny_package), "--rounds", "1", "--past", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "thread(s); our int8 products here: int8" in lines[0]
    products = [line for line in lines if line.startswith("  product ")]
    assert len(products) == 4 * 4 and all(line.endswith("its rows the same bits alone: True") for line in products)
    cross = [line for line in lines if line.startswith("  cross-attention, ")]
    assert [line.split(",")[1].strip() for line in cross] == ["1 rows", "4 rows", "32 rows", "128 rows", "4 rows",
                                                              "32 rows", "128 rows"]
    steps = [line for line in lines if " step, " in line]
    assert len(steps) == 2 * 7 and all(line.endswith("a job's rows the same bits alone: True") for line in steps)
    assert len([line for line in lines if line.startswith("  self-attention, ")]) == 4


def test_capacity_variants_are_named_settings():
    import pytest

    from bench.studies.capacity import Variant, parse_variant
    from cli import UsageError

    assert parse_variant("today:") == Variant("today", ())
    assert parse_variant("wide:model.d_model=512,model.n_heads=8") == Variant(
        "wide", ("model.d_model=512", "model.n_heads=8"))
    with pytest.raises(UsageError, match=r"variant 'Wide': write NAME:SECTION.KEY=VALUE"):
        parse_variant("Wide")
    with pytest.raises(UsageError, match=r"variant wide: 'd_model=512' is not SECTION.KEY=VALUE"):
        parse_variant("wide:d_model=512")


def test_capacity_frontier_keeps_what_nothing_beats_on_both():
    from bench.studies.capacity import frontier

    rows = [{"variant": name, "chrf": chrf, "sentences_per_s": rate}
            for name, chrf, rate in (("a", 40.0, 10.0), ("b", 42.0, 8.0), ("c", 39.0, 9.0), ("d", 45.0, 5.0))]
    assert frontier(rows) == ["a", "b", "d"]  # c: a is faster and better


def test_capacity_study_trains_resumes_scores_and_times_every_variant(tmp_path, capsys):
    """Two tiny shapes of their own vocabularies on a slice of the Bible: a call cut short leaves
    the first run unfinished (exit 75); the same command finishes both, ships, exports, scores
    the dev sets and times them; a third call trains nothing again."""
    from bench.studies.capacity import main as capacity_main
    from training.config import MODEL_PRESETS, replace
    from training.model import Transformer

    out = tmp_path / "study"
    argv = ["--out", str(out), "--sources", '{"bible": 0.01}', "--preset", "tiny", "--minutes", "5",
            "--max-steps", "4", "--batch-tokens", "1500", "--warmup", "2", "--save-every", "2", "--average", "2",
            "--threads", "1", "--directions", "en-de,de-en", "--splits", "bible,everyday", "--limit", "3",
            "--speed-lines", "2", "--rounds", "1",
            "--set", "data.tokenizer_sample=3000", "--set", "train.eval_every=0", "--set", "train.log_every=2",
            # the study scores on its own; nmt-train's closing dev BLEU of 2 lines a direction, not 200,
            # keeps an untrained model's full-length decodes out of the test's time
            "--set", "train.eval_sentences=2",
            "v400:data.vocab_size=400", "v500:data.vocab_size=500,model.n_decoder_layers=1"]
    assert capacity_main([*argv, "--chunk-minutes", "0.0001"]) == 75
    assert "v400 is saved and not finished: run the same command again to continue" in capsys.readouterr().out
    assert not (out / "v500").exists()
    assert capacity_main(argv) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / "capacity.json").read_text())
    rows = {r["variant"]: r for r in report["rows"]}
    assert sorted(rows) == ["v400", "v500"]
    assert (rows["v400"]["vocab_size"], rows["v500"]["vocab_size"]) == (400, 500)
    shape = replace(MODEL_PRESETS["tiny"], vocab_size=500, n_decoder_layers=1)
    assert rows["v500"]["parameters"] == sum(p.numel() for p in Transformer(shape).parameters())
    for r in rows.values():
        assert sorted(r["splits"]) == ["bible", "everyday"]
        assert sorted((s["split"], s["direction"], s["lines"]) for s in r["sets"]) == [
            ("bible", "de-en", 3), ("bible", "en-de", 3), ("everyday", "de-en", 3), ("everyday", "en-de", 3)]
        assert r["sentences_per_s"] > 0
    assert set(report["frontier"]) <= {"v400", "v500"} and report["frontier"]
    assert (out / "capacity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| variant | parameters | vocabulary | bible | everyday | mean chrF | sentences/s |" in printed
    weights = (out / "v400" / "model" / "model.pt").stat().st_mtime_ns
    assert capacity_main(argv) == 0
    assert (out / "v400" / "model" / "model.pt").stat().st_mtime_ns == weights  # nothing trained or shipped again


def test_train_speed_times_two_arms_side_by_side_and_refuses_any_other_pair(capsys):
    """The training-speed study times the two arms it is given on the same batches, round by
    round, and says which pairs it takes when given another."""
    from bench.studies.train_speed import main as train_speed_main

    argv = ["--preset", "tiny", "--batch-tokens", "300", "--steps", "1", "--rounds", "1", "--threads", "1"]
    assert train_speed_main([*argv, "--arms", "fp32,bf16"]) == 0
    printed = capsys.readouterr().out
    assert "preset tiny, 300 tokens a batch, 1 threads" in printed
    assert re.search(r"^round 1: fp32 [\d,]+ tok/s \| bf16 [\d,]+ tok/s \| [\d.]+x$", printed, re.M)
    assert "median bf16 / fp32: " in printed
    for arms in ("fp32,fp32", "fp32", "fp32,fp16"):
        with pytest.raises(SystemExit) as stop:
            train_speed_main([*argv, "--arms", arms])
        assert stop.value.code == 2
        assert f"--arms takes two different arms of fp32, bf16, compiled, got '{arms}'" in capsys.readouterr().err


def test_decode_pass_translates_every_line_and_says_how_many(tiny_package, tmp_path, capsys):
    from bench.studies.decode_pass import main

    texts = tmp_path / "texts.txt"
    texts.write_text("hello world\nthe house\ngood morning\n", encoding="utf-8")
    assert main([str(tiny_package), "--file", str(texts), "--target", "de", "--batch", "2"]) == 0
    assert capsys.readouterr().out == "translated 3 sentences\n"
    assert main([str(tiny_package), "--file", str(texts)]) == 2
    assert capsys.readouterr().err == "python -m bench.studies.decode_pass: error: --file and --target go together\n"
    assert main([str(tiny_package), "--batch", "0"]) == 2
    assert "--batch and --lines must be at least 1" in capsys.readouterr().err
