"""Hugging Face model ids, fetched from a hub served by this process (tests/test_hf_hub.py's Hub):
``nmt-import ID`` and ``nmt-serve --model ID`` (converted once into the cache by a child process,
export/model_cache.py, then served by a real server) for an OPUS-MT model with one target, one
with several (``>>de<<`` and ``>>fr<<`` tokens, as en-ROMANCE has) and an M2M100 (NLLB-shaped)
model, each built with Transformers' own classes, random weights and SentencePiece models
trained here."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as model_pb2
from transformers import M2M100ForConditionalGeneration, MarianMTModel, MarianTokenizer, NllbTokenizer

from bench.peers.hf_models import TINY, hf_generate, make_marian, make_nllb, parallel_lines
from engine.package import ModelPackage, PackageError, write_manifest
from engine.tokenizer import PackageTokenizer
from export import model_cache
from export.hf_import import main
from export.model_cache import cached_package
from nmt.v1 import translator_pb2 as pb
from server.model_source import ModelSourceError, default_name, is_hugging_face, package_directory
from tests.server_harness import ServerThread, submitted
from tests.test_hf_hub import SHA, Hub
from tests.test_hf_import import LIMIT, engine_decode

ROOT = Path(__file__).resolve().parents[1]
ONE, MULTI, M2M = "tiny-org/opus-mt-en-de", "tiny-org/opus-mt-en-mul", "tiny-org/m2m100-tiny"
SMALL = {**TINY, "layers": 1}  # one layer each side: the conversions are most of this file's time
LANGUAGES = "en,de,fr"
TEXT = "Click the button to open the dialog."


@pytest.fixture(scope="module")
def directories(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf")
    return {ONE: make_marian(root / "one", SMALL), MULTI: make_marian(root / "multi", SMALL, targets=("de", "fr")),
            M2M: make_nllb(root / "m2m", SMALL)}


@pytest.fixture(scope="module")
def hub(directories, tmp_path_factory) -> Iterator[Hub]:
    repos = {repo: {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()} for repo, d in directories.items()}
    server = Hub(repos)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HF_ENDPOINT", server.url)
        env.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf-home")))
        env.delenv("HF_HUB_CACHE", raising=False)
        env.delenv("HF_HUB_OFFLINE", raising=False)
        env.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        yield server
    server.close()


def _imported(tmp_path_factory, *argv: str) -> ModelPackage:
    out = tmp_path_factory.mktemp("import") / "package"
    assert main([argv[0], str(out), *argv[1:]]) == 0
    return ModelPackage.load(out)


@pytest.fixture(scope="module")
def multi(hub, tmp_path_factory) -> ModelPackage:
    return _imported(tmp_path_factory, MULTI)


@pytest.fixture(scope="module")
def m2m(hub, tmp_path_factory) -> ModelPackage:
    return _imported(tmp_path_factory, M2M, "--languages", LANGUAGES)


# ---------------------------------------------------------------- nmt-import ID
def test_an_opus_mt_model_with_several_targets_imports_by_id(multi, directories):
    package, directory = multi, directories[MULTI]
    vocab = json.loads((directory / "vocab.json").read_text())
    assert package.pairs == ("en-de", "en-fr")
    assert package.language_tags == {"de": vocab[">>de<<"], "fr": vocab[">>fr<<"]}
    assert (package.provenance["hub_model_id"], package.provenance["hub_revision"]) == (MULTI, SHA)
    theirs = MarianTokenizer.from_pretrained(str(directory))
    ours = package.load_tokenizer()
    model = MarianMTModel.from_pretrained(str(directory)).eval()
    english = parallel_lines("fr")[0][:16]
    outputs = {}
    for target in ("de", "fr"):
        # The target's token is the first source piece, as MarianTokenizer puts it.
        sources = [package.source_ids(ours.encode(text), target) for text in english]
        assert sources == [theirs(f">>{target}<< {text}")["input_ids"] for text in english]
        outputs[target] = engine_decode(package, sources, 1)
        assert outputs[target] == hf_generate(model, sources, LIMIT)
    assert outputs["de"] != outputs["fr"]  # the token chooses the language
    # Sources of both targets in one batch decode as each alone.
    mixed = [package.source_ids(ours.encode(text), target) for text in english[:6] for target in ("de", "fr")]
    assert engine_decode(package, mixed, 1) == [engine_decode(package, [src], 1)[0] for src in mixed]


def test_a_users_target_token_is_text(multi):
    package = multi
    ours = package.load_tokenizer()
    tags = set(package.language_tags.values())
    assert not tags & set(ours.encode(">>fr<< the button >>de<<"))
    assert tags <= ours.not_text  # never an output: the server bans not_text (service.py, banned)
    assert ours.decode([package.language_tags["fr"], *ours.encode("the button")]) == ours.decode(
        ours.encode("the button"))
    # A SentencePiece model that learned ">>fr<<" as text: the piece is spelled out, never the tag.
    proto = model_pb2.ModelProto()
    proto.ParseFromString((package.path / "source.spm").read_bytes())
    piece = proto.pieces.add()
    piece.piece, piece.score, piece.type = ">>fr<<", 0.0, model_pb2.ModelProto.SentencePiece.NORMAL
    source = spm.SentencePieceProcessor(model_proto=proto.SerializeToString())
    assert ">>fr<<" in source.encode("the>>fr<<", out_type=str)
    vocab = {**ours.vocab, ">>fr<<": package.language_tags["fr"]}
    tokenizer = PackageTokenizer(source, ours.target, vocab, special=frozenset(tags))
    assert not tags & set(tokenizer.encode("the>>fr<<")) and tokenizer.encode("the>>fr<<")


def test_a_language_tag_that_is_not_its_token_is_refused(multi, tmp_path):
    edited = tmp_path / "edited"
    shutil.copytree(multi.path, edited)
    swapped = {"de": multi.language_tags["fr"], "fr": multi.language_tags["de"]}
    write_manifest(edited, dataclasses.replace(multi.manifest, language_tags=swapped))
    with pytest.raises(PackageError) as err:
        ModelPackage.load(edited)
    assert err.value.problems == [f"language_tags.de is {swapped['de']}, the piece '>>fr<<', not >>de<<",
                                  f"language_tags.fr is {swapped['fr']}, the piece '>>de<<', not >>fr<<"]


def test_an_m2m100_model_imports_by_id(m2m, directories):
    package, directory = m2m, directories[M2M]
    theirs = NllbTokenizer.from_pretrained(str(directory))
    codes = {lang: theirs.convert_tokens_to_ids(code) for lang, code in
             (("en", "eng_Latn"), ("de", "deu_Latn"), ("fr", "fra_Latn"))}
    assert package.source_codes == package.target_codes == codes and package.language_tags == {}
    assert package.pairs == ("en-de", "en-fr", "de-en", "de-fr", "fr-en", "fr-de")
    assert package.provenance["hub_model_id"] == M2M
    ours = package.load_tokenizer()
    model = M2M100ForConditionalGeneration.from_pretrained(str(directory)).eval()
    sources = [package.source_ids(ours.encode(text), "fr", "en") for text in parallel_lines("fr")[0][:8]]
    expected = hf_generate(model, sources, LIMIT + 1, forced=[codes["fr"]])
    assert engine_decode(package, sources, 1, target="fr") == expected


# ---------------------------------------------------------------- nmt-serve --model ID
def jobs_submitted(scheduler) -> AbstractContextManager[list]:
    """The jobs ``scheduler`` is given while the block runs, one list per request."""
    return submitted(scheduler, lambda jobs, options: list(jobs))


@pytest.fixture(scope="module")
def served(hub, tmp_path_factory) -> Iterator[tuple[ServerThread, Path]]:
    cache = tmp_path_factory.mktemp("nmt-cache")
    server = ServerThread(ROOT, start_timeout=1500, model=(f"one={ONE}", f"multi={MULTI}", f"m2m={M2M}"),
                          model_cache=str(cache), import_languages=LANGUAGES)
    yield server, cache
    server.stop()


def test_nmt_serve_converts_a_model_id_and_serves_every_target(served):
    server, cache = served
    stub = server.stub()
    listed = {m.name: list(m.pairs) for m in stub.ListModels(pb.ListModelsRequest()).models}
    assert listed == {"one": ["en-de"], "multi": ["en-de", "en-fr"],
                      "m2m": ["en-de", "en-fr", "de-en", "de-fr", "fr-en", "fr-de"]}
    for name, pairs in listed.items():
        model = server.running.models[name]
        package, tokenizer = model.package, model.tokenizer
        assert package.path.parent.parent == cache / "hub" and package.path.name.startswith(SHA)
        assert {"int8", "fp16"} <= set(package.variants)  # what nmt-serve serves on the CPU and on CUDA
        pieces = tokenizer.encode(TEXT)
        eos = package.special_ids["eos"]
        for pair in pairs:
            source, target = pair.split("-")
            with jobs_submitted(model.scheduler) as requests:
                reply = stub.Translate(pb.TranslateRequest(texts=[TEXT], source_lang=source, target_lang=target,
                                                           model=name), timeout=120)
            assert len(reply.translations) == 1 and reply.translations[0].hypotheses
            [[job]] = requests
            if name == "multi":  # the target's >>xx<< token first, then the text
                assert job.src == [package.language_tags[target], *pieces, eos] and job.prefix == ()
            elif name == "m2m":  # the source's code first; the target's forced as the first output
                assert job.src == [package.source_codes[source], *pieces, eos]
                assert job.prefix == (package.target_codes[target],)
            else:
                assert job.src == [*pieces, eos] and job.prefix == ()
            assert set(package.language_tags.values()) <= set(job.banned)


def test_a_second_start_converts_nothing(served, caplog):
    server, cache = served
    packages = {name: server.running.models[name].package.path for name in ("one", "multi", "m2m")}
    stamps = {name: (path / "model.json").stat().st_mtime_ns for name, path in packages.items()}
    with caplog.at_level(logging.INFO, logger="nmt.server"):
        again = ServerThread(ROOT, model=(f"multi={MULTI}",), model_cache=str(cache), import_languages=LANGUAGES)
        try:
            assert again.running.models["multi"].package.path == packages["multi"]
        finally:
            again.stop()
        for name, spec in ((("one", ONE), ("m2m", M2M))):
            assert package_directory(spec, str(cache), LANGUAGES, name) == str(packages[name])
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("model ")]
    assert not [line for line in lines if "converting" in line]
    assert len([line for line in lines if "converted before" in line]) == 3
    assert stamps == {name: (path / "model.json").stat().st_mtime_ns for name, path in packages.items()}


def test_a_new_revision_a_changed_directory_or_other_languages_convert_again(hub, multi, directories, tmp_path,
                                                                              monkeypatch):
    monkeypatch.setattr(model_cache, "VARIANTS", ())  # the stand-in conversion copies an fp32 package
    converted = []

    def convert(directory, entry, **options):
        converted.append(Path(directory).name)
        shutil.copytree(multi.path, entry)

    def package(source, languages=None):
        return cached_package(source, tmp_path / "cache", languages, log=lambda *_: None, convert=convert)

    first = tmp_path / "cache" / "hub" / "tiny-org--opus-mt-en-mul" / SHA
    assert package(MULTI) == (first, True) and package(MULTI) == (first, False)
    hub.sha = "f" * 40  # the model's main branch moves on
    try:
        assert package(MULTI) == (first.parent / hub.sha, True)
    finally:
        hub.sha = SHA
    assert package(f"{MULTI}@{SHA}") == (first, False)
    by_language, done = package(MULTI, ["fr"])
    assert done and by_language.parent == first.parent and by_language != first
    local = tmp_path / "downloaded"
    shutil.copytree(directories[MULTI], local)
    entry, done = package(str(local))
    assert done and entry.parent == tmp_path / "cache" / "local" and package(str(local)) == (entry, False)
    stat = (local / "config.json").stat()
    os.utime(local / "config.json", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    changed, done = package(str(local))
    assert done and changed != entry
    assert converted == [SHA, "f" * 40, SHA, "downloaded", "downloaded"]


def test_an_id_that_cannot_be_fetched_is_one_line(hub, tmp_path, monkeypatch):
    cache = str(tmp_path / "cache")
    with pytest.raises(ModelSourceError) as err:
        package_directory("tiny-org/missing", cache)
    assert str(err.value) == (
        "cannot fetch the model tiny-org/missing: not found on the hub (no such model, or a private one: log in with "
        "`hf auth login` or HF_TOKEN); download it where the hub can be reached (e.g. `hf download tiny-org/missing "
        "--local-dir DIR`) and give nmt-serve --model that directory")
    monkeypatch.chdir(ROOT)  # tests/ exists: a mistyped package directory is named as one
    with pytest.raises(ModelSourceError, match=r"^--model tests/no-such-package: no such directory \(tests/ exists: "
                                               r"a typo\?\); as a model id: cannot fetch the model"):
        package_directory("tests/no-such-package", cache)


def test_offline_nmt_serve_says_in_one_line_that_the_id_cannot_be_fetched(hub, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "empty-hf-home")}
    asked = len(hub.requests)
    run = subprocess.run([sys.executable, "-m", "server.main", "--model", MULTI, "--model-cache", str(tmp_path / "c"),
                          "--port", "0", "--metrics-port", "-1", "--device", "cpu"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    [line] = run.stderr.strip().splitlines()
    assert line.endswith(
        f" ERROR nmt.server: cannot start: cannot fetch the model {MULTI}: offline (HF_HUB_OFFLINE is set) and it is "
        f"not in the hub's cache; download it where the hub can be reached (e.g. `hf download {MULTI} --local-dir "
        f"DIR`) and give nmt-serve --model that directory")
    assert len(hub.requests) == asked  # offline: the hub is never asked


def test_what_model_names(directories, multi, tmp_path):
    assert is_hugging_face(MULTI) and is_hugging_face(f"hf:{MULTI}") and is_hugging_face(f"{MULTI}@v1.0")
    assert is_hugging_face(str(directories[MULTI]))  # a downloaded directory: converted too
    assert not is_hugging_face(str(multi.path))  # a package: served as it is
    assert not is_hugging_face(str(ROOT / "models" / "default"))  # a checkpoint: nmt-serve says to export it
    assert not is_hugging_face(str(tmp_path / "nowhere")) and not is_hugging_face("no-slash")
    assert default_name(f"{MULTI}@main") == default_name(f"hf:{MULTI}") == "opus-mt-en-mul"
    assert default_name(str(multi.path)) == "package"


def test_without_torch_the_conversion_says_what_to_install(monkeypatch):
    """A server install (the server image) has no torch: converting is refused in one line."""
    monkeypatch.delitem(sys.modules, "export.hf_import", raising=False)
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(model_cache.ImportRefused) as err:
        model_cache._importer()
    assert str(err.value) == ("converting a Hugging Face model needs torch and Transformers (torch is not installed): "
                              "pip install '.[export,hf]', or convert it where they are with nmt-import and serve that "
                              "package directory")
