"""nmt-import (export/hf_import.py): Transformers' own models, saved with save_pretrained, become
our packages and decode as Transformers' generate() does, through the real engine and server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import M2M100ForConditionalGeneration, MarianMTModel, MarianTokenizer, NllbTokenizer

from bench import nmt_bench
from bench.peers.hf_models import hf_generate, make_nllb, parallel_lines
from engine.decoding import DecodeOptions, Job, decode_all
from engine.defaults import default_max_len
from engine.package import ModelPackage
from engine.runtime import Runtime, RuntimeOptions
from export.hf_import import ImportRefused, import_model, main
from nmt.v1 import translator_pb2 as pb
from tests.server_harness import ServerThread, request
from tests.shared_builds import small_marian

LIMIT = 24  # output tokens per source in the parity checks
# marian and sharp, (a Hugging Face directory, its import), are tests/conftest.py's: other modules use them too.


@pytest.fixture(scope="module")
def nllb(tmp_path_factory):
    root = tmp_path_factory.mktemp("nllb")
    hf_dir = make_nllb(root / "nllb-200")
    package = import_model(hf_dir, root / "package", int8=True, languages=["en", "de", "fr=fra_Latn"],
                           log=lambda *_: None)
    return hf_dir, package


def engine_decode(package: ModelPackage, sources: list[list[int]], beam: int, variant: str = "fp32",
                  target: str = "de") -> list[list[int]]:
    rt = Runtime(package, RuntimeOptions(device="cpu", threads=1, variant=variant))
    ids = package.special_ids
    jobs = [Job(src, DecodeOptions(beam_size=beam, alpha=0.0), max_len=LIMIT, bos=ids["bos"], eos=ids["eos"],
                pad=ids["pad"], prefix=package.target_prefix(target)) for src in sources]
    return [hyps[0].tokens for hyps in decode_all(rt, jobs)]


def test_marian_package_describes_the_model(marian):
    hf_dir, package = marian
    config = json.loads((hf_dir / "config.json").read_text())
    vocab = json.loads((hf_dir / "vocab.json").read_text())
    assert package.pairs == ("en-de",) and package.language_tags == {}
    assert package.variants == ("fp32", "int8", "int8w8")
    assert package.special_ids == {"pad": vocab["<pad>"], "unk": 1, "eos": 0, "bos": vocab["<pad>"]}
    assert package.dims.vocab_size == config["vocab_size"] == len(vocab)
    assert package.provenance["architecture"].startswith("MarianMTModel")


def test_marian_tokenizer_round_trip_matches_marian_tokenizer(marian):
    hf_dir, package = marian
    theirs = MarianTokenizer.from_pretrained(str(hf_dir))
    ours = package.load_tokenizer()
    english, german = parallel_lines("de")
    for text in [*english, "", "unseen wörds ✓ 42 %"]:
        assert package.source_ids(ours.encode(text), "de") == theirs(text)["input_ids"]
    for text in german:
        ids = theirs(text_target=text)["input_ids"][:-1]
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("beam", [1, 4])
def test_marian_decodes_as_transformers_generate(marian, beam):
    hf_dir, package = marian
    model = MarianMTModel.from_pretrained(str(hf_dir)).eval()
    tokenizer = package.load_tokenizer()
    english, _ = parallel_lines("de")
    sources = [package.source_ids(tokenizer.encode(text), "de") for text in english[:32]]
    expected = hf_generate(model, sources, LIMIT, beam)
    assert engine_decode(package, sources, beam) == expected
    lengths = {len(tokens) for tokens in expected}
    if beam == 1:  # outputs end at varied lengths, some at the limit (beam search without a length
        assert len(lengths) >= 3 and LIMIT in lengths  # penalty prefers the short ones)
    assert len(lengths) >= 2
    int8 = engine_decode(package, sources, beam, "int8")
    assert sum(a == b for a, b in zip(int8, expected)) >= 16  # int8 is close, not identical, on random weights


def test_an_imported_model_is_served_like_ours(marian):
    hf_dir, package = marian
    model = MarianMTModel.from_pretrained(str(hf_dir)).eval()
    theirs = MarianTokenizer.from_pretrained(str(hf_dir))
    english, _ = parallel_lines("de")
    texts = [t for t in english if ". " not in t.rstrip(".")][:8]  # one sentence each: the server cuts at sentences
    server = ServerThread(package.path, model=(f"tiny={package.path}",))
    try:
        stub = server.stub()
        [m] = stub.ListModels(pb.ListModelsRequest()).models
        assert (m.name, list(m.pairs)) == ("tiny", ["en-de"])
        reply = stub.Translate(request(*texts, src="en", tgt="de"), timeout=60)
    finally:
        server.stop()
    expected = []
    for text in texts:
        src = theirs(text)["input_ids"]
        [ids] = hf_generate(model, [src], max_new_tokens=default_max_len(len(src), package.max_target_tokens))
        expected.append(theirs.decode(ids, skip_special_tokens=True))
    assert [r.hypotheses[0].text for r in reply.translations] == expected
    assert any(expected)


def _marian_copy(hf_dir, tmp_path, **changes):
    bad = tmp_path / "bad"
    shutil.copytree(hf_dir, bad)
    config = json.loads((bad / "config.json").read_text())
    config.update(changes)
    (bad / "config.json").write_text(json.dumps(config))
    return bad


@pytest.mark.parametrize("changes, message", [
    ({"model_type": "t5"}, "config.json: model_type is 't5'; nmt-import reads 'marian' (MarianMTModel (OPUS-MT)), "
                           "'m2m_100' (M2M100ForConditionalGeneration (NLLB-200, M2M100))"),
    ({"activation_function": "gelu_new"}, "config.json: activation_function is 'gelu_new'; supported: gelu, relu, "
                                          "silu, swish"),
    ({"share_encoder_decoder_embeddings": False}, "config.json: share_encoder_decoder_embeddings is False; only True "
                                                  "is supported (one embedding for source and target)"),
    ({"decoder_ffn_dim": 128}, "config.json: encoder_ffn_dim is 64 and decoder_ffn_dim 128; our model has one value "
                               "for both"),
])
def test_configs_it_cannot_honour_are_refused_naming_the_field(marian, tmp_path, changes, message):
    bad = _marian_copy(marian[0], tmp_path, **changes)
    with pytest.raises(ImportRefused) as err:
        import_model(bad, tmp_path / "out", log=lambda *_: None)
    assert str(err.value) == message
    assert not (tmp_path / "out").exists()


def test_target_language_tokens_make_one_pair_each(marian, tmp_path):
    """OPUS-MT's >>xx<< tokens (a model with several target languages): one pair per token from
    source_lang, each token the language's tag; --languages picks targets, --pair one direction."""
    from export.hf_import import marian_tokenizer

    multi = _marian_copy(marian[0], tmp_path)
    config = json.loads((multi / "config.json").read_text())
    vocab = json.loads((multi / "vocab.json").read_text())
    pieces = sorted(vocab, key=vocab.get)  # the last is <pad>
    renamed = {pieces[-4]: ">>zh-Hant<<", pieces[-3]: ">>fr_BE<<", pieces[-2]: ">>de<<"}
    (multi / "vocab.json").write_text(json.dumps({renamed.get(p, p): i for p, i in vocab.items()}))
    ids = {piece: vocab[old] for old, piece in renamed.items()}
    notes: list[str] = []
    _, special, pairs, tags = marian_tokenizer(multi, config, None, None, log=notes.append)
    assert pairs == ("en-fr_be", "en-de") and tags == {"fr_be": ids[">>fr_BE<<"], "de": ids[">>de<<"]}
    assert notes == ["target-language tokens left out (not a language code, or the same one in another case): "
                     ">>zh-Hant<<"]
    assert special["pad"] == vocab["<pad>"]
    german = (("en-de",), {"de": ids[">>de<<"]})
    assert marian_tokenizer(multi, config, None, ["en", "DE"], log=notes.append)[2:] == german
    assert marian_tokenizer(multi, config, "en-de", None, log=notes.append)[2:] == german
    for pair, languages, message in (
            (None, ["en", "it"], "--languages: it is not a target language of this model; its targets (its >>xx<< "
                                 "tokens): de, fr_be"),
            (None, ["en"], "--languages names no target language of this model; its targets: de, fr_be"),
            ("en-it", None, "--pair: it is not a target language of this model; its targets (its >>xx<< tokens): de, "
                            "fr_be"),
            ("en-de", ["de"], "give --pair (one direction) or --languages (several), not both")):
        with pytest.raises(ImportRefused) as err:
            marian_tokenizer(multi, config, pair, languages, log=notes.append)
        assert str(err.value) == message


def test_cli_exit_status_and_message(tmp_path, capsys):
    assert main([str(tmp_path / "missing"), str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip() == (f"nmt-import: error: {tmp_path / 'missing'} is not a directory "
                                               f"(give the directory save_pretrained wrote)")


def test_nllb_package_has_language_codes(nllb):
    hf_dir, package = nllb
    theirs = NllbTokenizer.from_pretrained(str(hf_dir))
    codes = {"en": theirs.convert_tokens_to_ids("eng_Latn"), "de": theirs.convert_tokens_to_ids("deu_Latn"),
             "fr": theirs.convert_tokens_to_ids("fra_Latn")}
    assert package.source_codes == package.target_codes == codes
    assert package.pairs == ("en-de", "en-fr", "de-en", "de-fr", "fr-en", "fr-de")
    assert package.special_ids == {"pad": 1, "unk": 3, "eos": 2, "bos": 2}
    assert package.target_prefix("fr") == (codes["fr"],)


def test_nllb_tokenizer_round_trip_matches_nllb_tokenizer(nllb):
    hf_dir, package = nllb
    ours = package.load_tokenizer()
    english, german = parallel_lines("de")
    theirs = NllbTokenizer.from_pretrained(str(hf_dir), src_lang="eng_Latn")
    for text in [*english, "", "unseen wörds ✓ 42 %"]:
        assert package.source_ids(ours.encode(text), "de", "en") == theirs(text)["input_ids"]
    theirs = NllbTokenizer.from_pretrained(str(hf_dir), src_lang="deu_Latn")
    for text in german:
        ids = theirs(text)["input_ids"]
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True)
    with pytest.raises(ValueError, match="this model needs the source language, one of de, en, fr"):
        package.source_ids([5], "de")


@pytest.mark.parametrize("beam", [1, 4])
def test_nllb_decodes_as_transformers_generate(nllb, beam):
    hf_dir, package = nllb
    model = M2M100ForConditionalGeneration.from_pretrained(str(hf_dir)).eval()
    tokenizer = package.load_tokenizer()
    english, _ = parallel_lines("de")
    for target in ("de", "fr"):
        sources = [package.source_ids(tokenizer.encode(text), target, "en") for text in english[:32]]
        # Transformers counts the forced language code as a new token; we do not.
        expected = hf_generate(model, sources, LIMIT + 1, beam, forced=list(package.target_prefix(target)))
        assert engine_decode(package, sources, beam, target=target) == expected
        if beam == 1:
            assert len({len(tokens) for tokens in expected}) >= 3


@pytest.mark.parametrize("architecture", ["marian", "nllb"])
def test_nmt_bench_measures_an_imported_model_against_its_peers(architecture, request, tmp_path):
    hf_dir, package = request.getfixturevalue(architecture)
    english, _ = parallel_lines("de")
    sentences = tmp_path / "en.txt"
    sentences.write_text("\n".join(english[:12]) + "\n")
    out = tmp_path / "bench.json"
    assert nmt_bench.main(["--hf-dir", str(hf_dir), "--package", str(package.path), "--input", str(sentences),
                           "--directions", "en-de", "--engines", "onnx-fp32,onnx-int8,ct2-fp32,hf-fp32",
                           "--batch-sizes", "1,4",
                           "--json", str(out), "--ct2-model", str(tmp_path / "ct2")]) == 0
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert [r.get("error") for r in rows] == [None] * 16
    assert (result["directions"], result["same_text_reference"]) == (["en-de"], "onnx-fp32")
    # Transformers on the directory and the imported package: the same greedy texts
    assert {r["identical_to_reference"] for r in rows if r["engine"] == "hf-fp32" and r["mode"] == "greedy"} == {1.0}


# ---------------------------------------------------------------- what an import must refuse, and must not
ROOT = Path(__file__).resolve().parents[1]


def _with_layers(source: Path, tmp_path: Path, encoder: int, decoder: int) -> Path:
    liar = tmp_path / f"liar-{encoder}-{decoder}"
    shutil.copytree(source, liar)
    config = json.loads((liar / "config.json").read_text())
    config.update(encoder_layers=encoder, decoder_layers=decoder)
    (liar / "config.json").write_text(json.dumps(config))
    return liar


def test_a_config_that_promises_more_layers_than_the_weights_hold_is_refused(tmp_path):
    """Transformers would fill the missing layers with random values and only warn."""
    liar = _with_layers(small_marian(tmp_path / "one-layer", layers=1), tmp_path, 3, 2)
    with pytest.raises(ImportRefused) as err:
        import_model(liar, tmp_path / "out", log=lambda *_: None)
    assert str(err.value) == (f"{liar}: the weights do not match config.json (3+2 layers): missing "
                              "model.decoder.layers.1.*, model.encoder.layers.1.*, model.encoder.layers.2.*")
    assert not (tmp_path / "out").exists()


def test_weights_the_config_has_no_place_for_are_refused(sharp_dir, tmp_path):
    liar = _with_layers(sharp_dir, tmp_path, 1, 2)  # sharp_dir: small_marian's 2 + 2 layers
    with pytest.raises(ImportRefused) as err:
        import_model(liar, tmp_path / "out", log=lambda *_: None)
    assert str(err.value) == (f"{liar}: the weights do not match config.json (1+2 layers): unexpected "
                              "model.encoder.layers.1.*")


def test_a_valid_model_with_large_outputs_imports_and_decodes_as_transformers(sharp):
    """Its graphs differ from PyTorch by more than 1e-4 in absolute terms (float32 rounding of
    values in the hundreds) and by far less of their scale: it computes the same function."""
    hf_dir, package = sharp
    assert package.dims.vocab_size == 38
    assert package.provenance["max_abs_diff_vs_torch"] > 1e-4  # refused before parity was judged on scale
    model = MarianMTModel.from_pretrained(str(hf_dir)).eval()
    tokenizer = package.load_tokenizer()
    sources = [package.source_ids(tokenizer.encode(text), "de") for text in
               ("the cat sat on the mat", "a dog can see the man", "no hat", "the mat sat on a dog cat")]
    expected = hf_generate(model, sources, LIMIT)
    assert engine_decode(package, sources, 1) == expected
    assert len({tuple(tokens) for tokens in expected}) >= 3  # outputs that differ: a comparison that means something


def _ours(hf_dir: Path):
    from export.hf_import import MARIAN, load_hf, model_config, read_config, to_ours

    return to_ours(load_hf(hf_dir, MARIAN), MARIAN, model_config(read_config(hf_dir)))


def test_graphs_that_compute_something_else_are_still_refused(sharp):
    """The imported graphs held against a PyTorch model that differs from them: a small change
    of the encoder's outputs (the same tokens) and an output bias that changes every choice."""
    from export.onnx_export import check_graphs

    hf_dir, package = sharp
    enc, dec = package.graph_path("encoder"), package.graph_path("decoder")
    assert check_graphs(_ours(hf_dir), enc, dec).relative <= 1e-4
    model = _ours(hf_dir)
    with torch.no_grad():
        model.state_dict()["encoder_layers.1.sublayer.1.norm.weight"].mul_(1.001)
    worst = check_graphs(model, enc, dec)
    assert worst.relative > 1e-4
    with pytest.raises(RuntimeError) as err:
        worst.refuse_if_apart()
    assert str(err.value) == (f"exported graphs differ from PyTorch by {worst.relative:.2e} of their outputs' scale "
                              f"(> 1e-04; max |diff| {worst.absolute:.2e})")
    model = _ours(hf_dir)
    with torch.no_grad():
        model.output_bias[5] += 1e4
    with pytest.raises(RuntimeError, match=r"^decoder\.onnx: the chosen tokens differ from PyTorch at "
                                           r"B=\d+ S=\d+ P=\d+ C=\d+$"):
        check_graphs(model, enc, dec)


def test_a_checkpoint_of_this_project_is_sent_to_nmt_export(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main(["models/default", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == ("nmt-import: error: models/default is a checkpoint of this project: export "
                                       "it with nmt-export\n")
    config_only = tmp_path / "copied"
    config_only.mkdir()
    shutil.copyfile(ROOT / "models" / "default" / "config.json", config_only / "config.json")
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    for path in (config_only, run_dir, ROOT / "models" / "default" / "model.pt"):
        with pytest.raises(ImportRefused) as err:
            import_model(path, tmp_path / "out", log=lambda *_: None)
        assert str(err.value) == f"{path} is a checkpoint of this project: export it with nmt-export"
    assert not (tmp_path / "out").exists()
