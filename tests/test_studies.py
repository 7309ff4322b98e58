"""The studies of bench/studies/ on the tiny model: each computes what it says and prints its table."""

from __future__ import annotations

import json


def test_attention_layout_forms_compute_the_same_products(capsys):
    """Every form bench/studies/attention_layout.py times computes the product it names, on its layout."""
    import numpy as np
    import onnxruntime as ort

    from bench.studies.attention_layout import FORMS, LAYERS, graph
    from bench.studies.attention_layout import main as layout_main

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


def test_shared_sources_times_both_layouts_and_finds_the_same_bits(tiny_package, capsys):
    """bench/studies/shared_sources.py on the tiny package: a row per variant and size, outputs the same bits."""
    import pytest

    from bench.studies.shared_sources import main as shared_main

    assert shared_main(["--package", str(tiny_package), "--rows", "2,6", "--group", "2", "--source", "5",
                        "--past", "3", "--rounds", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("decoder step, 2 rows per source, source 5, 3 cached slots, 1 thread(s), best of 1 "
                        "alternating rounds")
    rows = [line.split() for line in lines[2:]]
    assert [r[:2] for r in rows] == [["fp32", "2"], ["fp32", "6"], [rows[2][0], "2"], [rows[2][0], "6"]]
    assert rows[2][0] in ("int8", "int8w8") and all(r[4].endswith("x") and r[5] == "True" for r in rows)
    with pytest.raises(SystemExit):
        shared_main(["--package", str(tiny_package), "--rows", "3", "--group", "2"])
    assert "--rows 3 is not a multiple of --group 2" in capsys.readouterr().err


def test_cpu_levers_prints_every_part(tiny_package, capsys):
    """bench/studies/cpu_levers.py on the tiny package: every part's lines, our int8 rows the same
    bits alone as in a batch, and a wrong part refused by name."""
    import pytest

    from bench.studies.cpu_levers import main as levers_main

    assert levers_main(["--package", str(tiny_package), "--jobs", "2", "--beam", "2", "--source", "5",
                        "--rounds", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("selection, 2 jobs x 2 beams over ") and "TopK(4) in onnxruntime" in lines[0]
    nbits = [line for line in lines if line.startswith("  64 x ")]
    assert len(nbits) == 8 and all("rows the same bits alone: ours True" in line for line in nbits)
    steps = [line.split()[1:3] for line in lines if line.startswith("  step ")]
    assert [s[1] for s in steps] == ["1", "4", "32", "128"] * 2 and steps[0][0] == "fp32"
    assert sum(line.startswith(("  MatMul fp32", "  MatMulIntegerToFloat")) for line in lines) == 8
    grouped = [line for line in lines if line.startswith(("  scores (q k)", "  values (p v)"))]
    assert len(grouped) == 2 and all("same bits " in line for line in grouped)
    with pytest.raises(SystemExit):
        levers_main(["--package", str(tiny_package), "--parts", "selection,gpu"])
    assert "--parts gpu: not one of selection, nbits, threads, grouped" in capsys.readouterr().err


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


def test_out_of_domain_scores_every_direction_the_package_serves(tiny_package, tmp_path, capsys):
    from bench.studies.out_of_domain import load
    from bench.studies.out_of_domain import main as ood_main

    texts = load()
    assert set(texts) == {"en", "de", "fr", "es"} and all(len(v) == 30 for v in texts.values())
    out = tmp_path / "ood.json"
    assert ood_main(["--package", str(tiny_package), "--variant", "int8", "--beam", "2", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert [r["direction"] for r in result] == ["en-de", "de-en"]  # the tiny package's pairs
    assert all(len(r["outputs"]) == 30 and 0 <= r["chrf"] <= 100 for r in result)
    assert result[0]["outputs"][0]["reference"] == "Der Zug nach Berlin fährt um halb neun ab."
    assert "en-de  BLEU" in capsys.readouterr().out


def test_norm_stability_report_measures_how_much_the_source_is_worth(tmp_path, toy_corpus, capsys):
    from bench.studies.norm_stability import last_model, report, source_use
    from tests.test_train import tiny_run
    from training.train import train

    run = tmp_path / "post-ln"
    train(tiny_run(toy_corpus, max_steps=4, eval_every=4, save_every=4), run)
    own, other = source_use(*last_model(run))
    assert own > 0 and other > 0
    [row] = report(tmp_path, ["post-ln"])
    assert row["dev_bleu"].keys() == {4} and row["grad_norm_mean"] > 0
    assert (tmp_path / "norm_stability.png").stat().st_size > 0
    assert -1.0 <= row["encoder_cosine"] <= 1.0
    assert "the source is worth" in capsys.readouterr().out


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


def test_openvino_step_records_the_loops_own_feeds_and_alternates_engines(tiny_package):
    """bench/studies/openvino_step.py without OpenVINO (not a dependency): the feeds it replays are
    copies of what the decoding loop ran, step by step, and the timing alternates its engines."""
    import importlib.util

    import numpy as np
    import pytest

    from bench.studies.openvino_step import fastest, main, record_feeds
    from engine import contract
    from engine.defaults import BOS_ID
    from engine.package import ModelPackage
    from engine.runtime import Runtime, RuntimeOptions

    package = ModelPackage.load(tiny_package)
    rt = Runtime(package, RuntimeOptions(device="cpu", threads=1))
    tokenizer = package.load_tokenizer()
    sources = [package.source_ids(tokenizer.encode(text), "de") for text in ("Jesus wept.", "He said,")]
    encoder_feeds, decoder_feeds = record_feeds(rt, [sources], beam=2)
    assert len(encoder_feeds) == 1 and set(encoder_feeds[0]) == {contract.SRC_IDS}
    rows = encoder_feeds[0][contract.SRC_IDS].tolist()
    assert sorted(r[:len(s)] for r, s in zip(rows, sorted(sources, key=len))) == sorted(sources)  # right-padded
    first, second = decoder_feeds[0], decoder_feeds[1]
    assert first[contract.INPUT_IDS].tolist() == [[BOS_ID]] * 4  # 2 sources x 2 beams
    assert first[contract.POSITIONS].tolist() == [[0]] * 4 and not first[contract.PAST_MASK].any()
    assert second[contract.POSITIONS].tolist() == [[1]] * 4
    assert second[contract.PAST_MASK].sum(axis=1).tolist() == [1] * 4  # the first step's keys, nothing else
    log_probs = rt.decoder.run([contract.LOG_PROBS], first)[0]  # a recorded feed runs as it is
    assert log_probs.shape == (4, package.dims.vocab_size) and np.isfinite(log_probs[:, 3:]).all()
    order: list[str] = []
    best = fastest({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, rounds=3)
    assert order == ["a", "b"] * 3 and set(best) == {"a", "b"}
    if importlib.util.find_spec("openvino") is None:
        with pytest.raises(SystemExit) as e:
            main(["--checkpoint", "x", "--package", str(tiny_package)])
        assert e.value.code == 2


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

    from bench.studies.cpu_levers import session
    from bench.studies.fused_linear import build, cpu_flags, find_include, missing
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
