"""The Marian conversion of a checkpoint holds our weights: Marian's teacher-forced scores are our
model's under Marian's conventions, and its decoding is what bench/peers/marian_convert.py says."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

pytest.importorskip("pymarian")

from bench.peers.marian_convert import (
    INT8_FILE,
    MODEL_FILE,
    VOCAB_FILE,
    convert,
    marian_config,
    sine_first,
    translator,
    validate,
)
from bench.studies.marian_parity import marian_runs, token_scores
from training import checkpoint as ckpt_io
from training.config import RunConfig
from training.model import Transformer

TEXTS = ["Jesus wept.", "In the beginning was the Word.", "He said, Peace be with you."]


@pytest.fixture(scope="module")
def pre_ln_checkpoint(tiny_checkpoint, tmp_path_factory):
    """The tiny checkpoint's tokenizer and data with a pre-LN model of random weights (the
    default model's layout; the tiny trained one is post-LN)."""
    ckpt = ckpt_io.load(tiny_checkpoint)
    cfg = RunConfig.from_dict(ckpt["config"])
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, pre_norm=True))
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("preln") / "model.pt"
    torch.save({**ckpt, "config": cfg.to_dict(), "model": Transformer(cfg.model).state_dict()}, path)
    return path


def run(checkpoint, out_dir, texts, target="de"):
    """Convert, score our greedy outputs with Marian and decode greedily with Marian: returns the
    model, the sources, our outputs, Marian's scores of them, Marian's outputs and their scores."""
    from training.decode import greedy_search

    model, _, ckpt = ckpt_io.load_model(checkpoint)
    tok = ckpt_io.load_tokenizer(ckpt)
    out = convert(checkpoint, out_dir)
    sources = [tok.encode_source(t, target) for t in texts]
    ours = [greedy_search(model, torch.tensor([s]))[0].tokens for s in sources]
    scored, marian, decoded = marian_runs(out, out_dir, tok, sources, ours)
    return model, sources, ours, scored, marian, decoded


@pytest.mark.parametrize("layout", ["post-LN trained", "pre-LN random"])
def test_marian_scores_are_our_model_under_its_conventions(layout, tiny_checkpoint, pre_ln_checkpoint, tmp_path):
    checkpoint = tiny_checkpoint if layout.startswith("post") else pre_ln_checkpoint
    model, sources, ours, scored, marian, decoded = run(checkpoint, tmp_path, TEXTS)
    for src, out, scores in zip(sources, ours, scored):
        assert len(scores) == len(out) + 1  # every token and eos
        np.testing.assert_allclose(token_scores(model, src, out, marian=True), scores, atol=2e-3)
        # Marian's zero start vector (no <s> embedding) changes the first step, so our model as it is differs
        assert abs(token_scores(model, src, out, marian=False)[0] - scores[0]) > 1e-3
    # Marian's decoding, scored as it decodes: post-LN as it trains; pre-LN with the raw keys of earlier steps
    for src, out, scores in zip(sources, marian, decoded):
        emulated = token_scores(model, src, out, marian=True, as_decoded=True)[: len(scores)]
        np.testing.assert_allclose(emulated, scores, atol=2e-3)
        if layout.startswith("pre") and len(out) > 2:
            assert np.abs(token_scores(model, src, out, marian=True)[: len(scores)] - scores).max() > 1e-2


def test_int8_model_decodes_pieces_of_the_vocabulary(tiny_checkpoint, tmp_path):
    out = convert(tiny_checkpoint, tmp_path / "m", int8=True)
    assert (out / INT8_FILE).stat().st_size > 0
    vocab = json.loads((out / VOCAB_FILE).read_text())
    tok = ckpt_io.load_tokenizer(ckpt_io.load(tiny_checkpoint))
    lines = [" ".join(tok.sp.id_to_piece(i) for i in tok.encode_source(t, "de")[:-1]) for t in TEXTS]
    for variant in ("fp32", "int8"):
        outputs = translator(out, variant, threads=1, beam_size=2, max_length_factor=3.0, alpha=0.6,
                             batch_size=len(lines)).translate(lines)
        assert len(outputs) == len(lines)
        assert all(p in vocab for o in outputs for p in o.split())
        assert any(o.split() for o in outputs)


def test_convert_refuses_a_full_directory_and_writes_the_architecture(tiny_checkpoint, tmp_path):
    out = convert(tiny_checkpoint, tmp_path / "m")
    with pytest.raises(FileExistsError, match="is not empty"):
        convert(tiny_checkpoint, out)
    arrays = np.load(out / MODEL_FILE)
    cfg = RunConfig.from_dict(ckpt_io.load(tiny_checkpoint)["config"]).model
    yml = bytes(arrays["special:model.yml"].view(np.uint8)).decode().rstrip("\0")
    assert "transformer-postprocess: dan" in yml and f"dim-emb: {cfg.d_model}" in yml
    assert marian_config(cfg)["transformer-preprocess"] == ""
    assert arrays["Wemb"].shape == (cfg.vocab_size, cfg.d_model)
    assert arrays["encoder_l1_self_Wq"].shape == (cfg.d_model, cfg.d_model)
    assert sorted(sine_first(6)) == list(range(6)) and list(sine_first(6)) == [0, 2, 4, 1, 3, 5]


def test_validate_names_what_does_not_fit(tiny_checkpoint):
    ckpt = ckpt_io.load(tiny_checkpoint)
    cfg = RunConfig.from_dict(ckpt["config"]).model
    weights = {k: v.numpy() for k, v in ckpt["model"].items()}
    tok = ckpt_io.load_tokenizer(ckpt)
    pieces = [tok.sp.id_to_piece(i) for i in range(tok.vocab_size)]
    assert validate(cfg, weights, pieces) == []
    bad = dataclasses.replace(cfg, positions="table", output_bias=True)
    assert validate(bad, weights, pieces) == [
        "positions 'table': Marian only adds its own sinusoids",
        "the output layer has a bias: Marian's tied output layer is written with zeros"]
    assert validate(cfg, weights, ["<pad>", "<unk>", "<s>", "eos", *pieces[4:]]) == [
        "the pieces of eos/unk are not Marian's '</s>', '<unk>'"]


def test_nmt_bench_runs_marian_only_when_named():
    from bench.nmt_bench import DEFAULT_ENGINES, parse_args

    assert not any(e.startswith("marian") for e in DEFAULT_ENGINES["cpu"])
    args = parse_args(["--checkpoint", "x", "--package", "y", "--engines", "onnx-int8,marian-fp32,marian-int8"])
    assert args.engines == ["onnx-int8", "marian-fp32", "marian-int8"]


def test_parity_study_prints_its_three_findings(tiny_checkpoint, tmp_path, capsys):
    from bench.studies.marian_parity import main

    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{t}\t{t}\n" for t in TEXTS))
    assert main(["--checkpoint", str(tiny_checkpoint), "--input", str(data), "--sentences", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "3 verses (en-de), greedy, 1 thread"
    forced = float(lines[1].split("max |d log p| ")[1].split()[0])
    emulated = float(lines[2].split("max |d log p| ")[1])
    assert forced < 2e-3 and emulated < 2e-3
    assert lines[3].startswith("3. Marian's greedy texts identical to ours: ")
