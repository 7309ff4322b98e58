"""The CTranslate2 conversion of a checkpoint decodes exactly as our PyTorch reference does."""

from __future__ import annotations

import pytest
import torch

ctranslate2 = pytest.importorskip("ctranslate2")

from bench.peers.ct2_convert import convert, source_tokens, target_ids, validate  # noqa: E402
from training import checkpoint as ckpt_io  # noqa: E402
from training.data import pad  # noqa: E402
from training.decode import greedy_search, max_output_length  # noqa: E402

SENTENCES = {
    "en-de": ["Jesus wept.", "In the beginning was the Word.", "He said, Peace be with you.",
              "All things were made through him. Without him was not anything made that has been made."],
    "de-en": ["Jesus weinte.", "Im Anfang war das Wort.", "Und er sprach zu ihnen: Friede euch!",
              "Alles ward durch dasselbe, und ohne dasselbe ward auch nicht eines, das geworden ist."],
}


@pytest.fixture(scope="module")
def converted(tiny_checkpoint, tmp_path_factory):
    model, _, ckpt = ckpt_io.load_model(tiny_checkpoint)
    out = convert(tiny_checkpoint, tmp_path_factory.mktemp("ct2") / "tiny")
    translator = ctranslate2.Translator(str(out), device="cpu", intra_threads=1, inter_threads=1)
    return model, ckpt_io.load_tokenizer(ckpt), translator, out


@pytest.mark.parametrize("direction", sorted(SENTENCES))
def test_greedy_tokens_identical_one_by_one(converted, direction):
    model, tok, translator, _ = converted
    target = direction.split("-")[1]
    for text in SENTENCES[direction]:
        ids = tok.encode_source(text, target)
        ref = greedy_search(model, torch.tensor([ids]))[0].tokens
        [res] = translator.translate_batch([source_tokens(tok, text, target)], beam_size=1,
                                           max_decoding_length=max_output_length(len(ids), model))
        assert target_ids(tok, res.hypotheses[0]) == ref, text
        assert ref, "the tiny model should emit tokens"


@pytest.mark.parametrize("direction", sorted(SENTENCES))
def test_greedy_tokens_identical_batched(converted, direction):
    model, tok, translator, _ = converted
    target = direction.split("-")[1]
    texts = SENTENCES[direction]
    src = pad([tok.encode_source(t, target) for t in texts])
    limit = max(max_output_length(int(n), model) for n in src.ne(0).sum(dim=1))
    ref = [h.tokens for h in greedy_search(model, src, max_len=limit)]
    results = translator.translate_batch([source_tokens(tok, t, target) for t in texts], beam_size=1,
                                         max_decoding_length=limit)
    assert [target_ids(tok, r.hypotheses[0]) for r in results] == ref


def test_empty_batch_and_config(converted):
    _, _, translator, out = converted
    assert translator.translate_batch([]) == []
    config = (out / "config.json").read_text()
    assert '"add_source_eos": true' in config and '"decoder_start_token": "<s>"' in config


def test_refuses_to_overwrite_without_force(tiny_checkpoint, converted):
    out = converted[3]
    with pytest.raises(RuntimeError, match="already exists"):
        convert(tiny_checkpoint, out)


def test_validate_names_every_problem(tiny_checkpoint, tokenizer):
    from training.config import RunConfig

    ckpt = ckpt_io.load(tiny_checkpoint)
    cfg = RunConfig.from_dict(ckpt["config"])
    weights = {k: v.numpy() for k, v in ckpt["model"].items() if not k.startswith("decoder_layers.1.")}
    problems = validate(cfg, weights, tokenizer)  # the 800-piece fixture tokenizer, not the model's 400
    assert any("tokenizer has 800 pieces" in p for p in problems)
    assert any("decoder layers" in p for p in problems)
