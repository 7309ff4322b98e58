"""The Transformers conversion of a checkpoint (bench/peers/hf_convert.py) computes our model's function: the
same logits up to rounding and token-identical greedy outputs to training/decode.py, for post-LN
(the tiny trained checkpoint -> Marian) and pre-LN (a random model -> M2M100); the Optimum ONNX
export of it too; and nmt-bench runs the hf-fp32 and optimum-fp32 engines."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")

from bench.peers.hf_convert import export_optimum, generate, load, to_transformers
from training import checkpoint as ckpt_io
from training.config import ModelConfig
from training.data import pad
from training.decode import greedy_search, max_output_length
from training.model import Transformer

SENTENCES = {
    "en-de": ["Jesus wept.", "In the beginning was the Word.", "He said, Peace be with you.",
              "All things were made through him. Without him was not anything made that has been made."],
    "de-en": ["Jesus weinte.", "Im Anfang war das Wort.", "Und er sprach zu ihnen: Friede euch!",
              "Alles ward durch dasselbe, und ohne dasselbe ward auch nicht eines, das geworden ist."],
}
LOGIT_TOLERANCE = 1e-4


def max_logit_diff(ours: Transformer, hf: torch.nn.Module, src: torch.Tensor, tgt: torch.Tensor) -> float:
    with torch.no_grad():
        a = ours(src, tgt)
        b = hf(input_ids=src, attention_mask=src.ne(0).long(), decoder_input_ids=tgt).logits
    return float((a - b).abs().max())


def assert_greedy_identical(ours: Transformer, hf: torch.nn.Module, sources: list[list[int]]) -> None:
    for ids in sources:  # one by one, each at its own bound
        ref = greedy_search(ours, torch.tensor([ids]))[0].tokens
        assert generate(hf, [ids], max_output_length(len(ids), ours)) == [ref], ids
    src = pad(sources)  # batched (right-padded), one bound for the batch as generate() takes
    limit = max(max_output_length(len(s), ours) for s in sources)
    assert generate(hf, sources, limit) == [h.tokens for h in greedy_search(ours, src, max_len=limit)]


@pytest.fixture(scope="module")
def post_ln(tiny_checkpoint):
    ours, cfg, ckpt = ckpt_io.load_model(tiny_checkpoint)
    assert not cfg.model.pre_norm, "the tiny fixture is post-LN; the pre-LN case is the random model below"
    hf, _ = load(tiny_checkpoint)
    tok = ckpt_io.load_tokenizer(ckpt)
    sources = [tok.encode_source(t, d.split("-")[1]) for d in sorted(SENTENCES) for t in SENTENCES[d]]
    return ours, hf, sources


@pytest.fixture(scope="module")
def pre_ln():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=120, d_model=48, n_heads=4, n_encoder_layers=3, n_decoder_layers=2, d_ff=96,
                      dropout=0.0, pre_norm=True, max_positions=128)
    ours = Transformer(cfg).eval()
    hf = to_transformers(cfg, ours.state_dict())
    gen = torch.Generator().manual_seed(1)
    sources = [[*torch.randint(4, cfg.vocab_size, (n,), generator=gen).tolist(), 3] for n in (3, 9, 5, 14)]
    return ours, hf, sources


def test_architectures():
    from transformers import M2M100ForConditionalGeneration, MarianMTModel

    for pre_norm, cls in ((True, M2M100ForConditionalGeneration), (False, MarianMTModel)):
        cfg = ModelConfig(vocab_size=20, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=32,
                          pre_norm=pre_norm, max_positions=32)
        hf = to_transformers(cfg, Transformer(cfg).state_dict())
        assert isinstance(hf, cls) and not hf.training
        assert hf.generation_config.decoder_start_token_id == 2 and hf.generation_config.eos_token_id == 3
        assert hf.generation_config.forced_eos_token_id is None and hf.generation_config.pad_token_id == 0


def test_post_ln_logits_and_greedy(post_ln):
    ours, hf, sources = post_ln
    src = pad(sources)
    tgt = torch.tensor([[2, 40, 41, 42, 43, 44]] * src.size(0))
    assert max_logit_diff(ours, hf, src, tgt) < LOGIT_TOLERANCE
    assert_greedy_identical(ours, hf, sources)
    assert any(greedy_search(ours, torch.tensor([s]))[0].tokens for s in sources), "the tiny model emits tokens"


def test_pre_ln_logits_and_greedy(pre_ln):
    ours, hf, sources = pre_ln
    src = pad(sources)
    tgt = torch.randint(4, ours.cfg.vocab_size, (src.size(0), 11), generator=torch.Generator().manual_seed(2))
    tgt[:, 0] = 2
    assert max_logit_diff(ours, hf, src, tgt) < LOGIT_TOLERANCE
    assert_greedy_identical(ours, hf, sources)


def test_the_weights_are_checked():
    cfg = ModelConfig(vocab_size=20, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=32,
                      pre_norm=True, max_positions=32)
    state = Transformer(cfg).state_dict()
    del state["encoder_norm.weight"]
    with pytest.raises(ValueError, match=r"encoder_norm\.weight"):
        to_transformers(cfg, state)


@pytest.mark.parametrize("case", ["post_ln", "pre_ln"])
def test_optimum_export_greedy(case, request, tmp_path):
    pytest.importorskip("optimum.onnxruntime")
    from optimum.onnxruntime import ORTModelForSeq2SeqLM

    ours, hf, sources = request.getfixturevalue(case)
    out = export_optimum(hf, tmp_path / "optimum")
    with pytest.raises(FileExistsError):
        export_optimum(hf, out)
    assert_greedy_identical(ours, ORTModelForSeq2SeqLM.from_pretrained(out), sources)


def test_nmt_bench_hf_engines(tiny_checkpoint, tiny_package, tmp_path):
    pytest.importorskip("optimum.onnxruntime")
    from bench.nmt_bench import main

    sources = tmp_path / "sources.tsv"
    sources.write_text("".join(f"{t}\t{t}\n" for t in SENTENCES["en-de"]))
    out = tmp_path / "bench.json"
    assert main(["--checkpoint", str(tiny_checkpoint), "--package", str(tiny_package), "--input", str(sources),
                 "--directions", "en-de", "--sentences", "4", "--batch-sizes", "4", "--beam", "2",
                 "--engines", "onnx-fp32,hf-fp32,optimum-fp32", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {(r["engine"], r["mode"]) for r in rows} == {
        (e, m) for e in ("onnx-fp32", "hf-fp32", "optimum-fp32") for m in ("greedy", "beam")}
    for r in rows:
        assert not r.get("error") and r["device"] == "cpu" and r["sentences_per_s"] > 0, r
        if r["mode"] == "greedy":
            assert r["identical_to_reference"] == 1.0, r["engine"]
        else:  # GNMT vs len^alpha length penalty: agreement is reported, not required
            assert 0.0 <= r["identical_to_reference"] <= 1.0


def test_engine_names_and_hf_fp16_without_cuda(tiny_checkpoint):
    from bench.engines import build
    from bench.nmt_bench import DEFAULT_ENGINES, parse_args

    assert parse_args(["--checkpoint", "c", "--package", "p", "--engines", "hf-fp32,optimum-fp32"]).engines == [
        "hf-fp32", "optimum-fp32"]
    assert parse_args(["--checkpoint", "c", "--package", "p", "--device", "cuda", "--engines", "hf-fp16"]).engines
    assert not {"hf-fp32", "optimum-fp32", "hf-fp16"} & {*DEFAULT_ENGINES["cpu"], *DEFAULT_ENGINES["cuda"]}
    if torch.cuda.is_available():
        pytest.skip("CUDA is usable here")
    with pytest.raises(RuntimeError, match="no CUDA device"):
        build({"engine": "hf-fp16", "device": "cuda", "threads": 1, "checkpoint": str(tiny_checkpoint),
               "beam_size": 1, "alpha": 0.6, "max_target_tokens": 255})
