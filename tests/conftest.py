"""Shared fixtures: a small real SentencePiece model and a small parallel corpus on disk; tiny trained
models, their packages, and small Hugging Face models with their imports, each built once per test
session however many modules and pytest-xdist workers use it (tests/shared_builds.py)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from tests.shared_builds import built_once, small_marian
from training.data import clean, load_bible, split_of
from training.tokenizer import Tokenizer, train_tokenizer

# Tiny models gain nothing from intra-op threads, and OpenMP threads spinning against a
# concurrent process (a training run, a torchrun test) slow everything down by orders of magnitude.
torch.set_num_threads(1)


def bible_sentences(code: str, n: int, split: str = "train") -> list[str]:
    verses = [clean(t) for k, t in sorted(load_bible(code).items()) if split_of(k) == split]
    return [v for v in verses if v][:n]


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory) -> Tokenizer:
    out = tmp_path_factory.mktemp("tok") / "spm"
    sentences = bible_sentences("4", 3000) + bible_sentences("e", 3000)
    return train_tokenizer(sentences, out, vocab_size=800, languages=["en", "de"])


@pytest.fixture(scope="session")
def toy_corpus(tmp_path_factory) -> dict[str, Path]:
    """A tiny English->German corpus of short verses, as user files (train/dev TSV)."""
    d = tmp_path_factory.mktemp("corpus")
    en, de = bible_sentences("4", 3000), bible_sentences("e", 3000)
    pairs = [(a, b) for a, b in zip(en, de) if len(a) < 80 and len(b) < 80]
    random.Random(0).shuffle(pairs)
    assert len(pairs) >= 310
    (d / "dev.tsv").write_text("".join(f"{a}\t{b}\n" for a, b in pairs[:10]))
    (d / "train.tsv").write_text("".join(f"{a}\t{b}\n" for a, b in pairs[10:310]))
    # A copy task (each side is its own target): learnable in seconds, so the tiny model
    # downstream tests use gives real, varied outputs instead of empty strings.
    en_short = [s for s in en if len(s) < 100][:1500]
    de_short = [s for s in de if len(s) < 100][:1500]
    (d / "copy_en.tsv").write_text("".join(f"{s}\t{s}\n" for s in en_short))
    (d / "copy_de.tsv").write_text("".join(f"{s}\t{s}\n" for s in de_short))
    return {"train": d / "train.tsv", "dev": d / "dev.tsv", "copy_en": d / "copy_en.tsv", "copy_de": d / "copy_de.tsv"}


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, worker_id, toy_corpus) -> Path:
    """A small model (d_model 64, 2+2 layers) trained for 600 steps (about 20 s) on the copy
    task in both directions: it emits real, varied token sequences (and sometimes loops until
    the length limit), which parity and serving tests need. Built once per session
    (tests/shared_builds.py), as are the packages below: tests read them, never write them."""
    from training.config import DataConfig, ModelConfig, RunConfig, TrainConfig
    from training.train import train

    def build(out: Path) -> None:
        cfg = RunConfig(
            model=ModelConfig(d_model=64, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=128, dropout=0.0,
                              max_positions=256),
            # No byte fallback: 256 byte pieces would leave a 400-piece vocabulary few real ones (the
            # copy task then needs far more steps); the placeholder symbols are in (tests/test_placeholders.py).
            data=DataConfig(corpus="files", directions=("en-de", "de-en"), vocab_size=400, byte_fallback=False,
                            train_files={"en-de": str(toy_corpus["copy_en"]), "de-en": str(toy_corpus["copy_de"])}),
            train=TrainConfig(batch_tokens=2000, max_steps=600, warmup_steps=100, log_every=100, eval_every=0,
                              save_every=0, average_last=0, device="cpu", threads=1),
        )
        train(cfg, out)

    return built_once(tmp_path_factory, worker_id, "tiny_run", build) / "checkpoints" / "step_00000600.pt"


@pytest.fixture(scope="session")
def tiny_package(tmp_path_factory, worker_id, tiny_checkpoint) -> Path:
    from export.onnx_export import export_checkpoint

    def build(out: Path) -> None:
        export_checkpoint(tiny_checkpoint, out / "tiny", int8=True, fp16=True, log=lambda _: None)

    return built_once(tmp_path_factory, worker_id, "tiny_package", build) / "tiny"


@pytest.fixture(scope="session")
def tiny_fr_package(tmp_path_factory, worker_id) -> Path:
    """A second tiny model, English <-> French (the copy task of ``tiny_checkpoint``, its own
    tokenizer), exported int8: with ``tiny_package`` (English <-> German) a server holds two
    models and translates German <-> French only through English (server/pivot.py)."""
    from export.onnx_export import export_checkpoint
    from training.config import DataConfig, ModelConfig, RunConfig, TrainConfig
    from training.train import train

    def build(root: Path) -> None:
        d = root / "corpus"
        d.mkdir()
        en = [s for s in bible_sentences("4", 3000) if len(s) < 100][:1500]
        fr = [s for s in bible_sentences("l", 3000) if len(s) < 100][:1500]
        (d / "copy_en.tsv").write_text("".join(f"{s}\t{s}\n" for s in en))
        (d / "copy_fr.tsv").write_text("".join(f"{s}\t{s}\n" for s in fr))
        out = root / "run"
        cfg = RunConfig(
            model=ModelConfig(d_model=64, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=128, dropout=0.0,
                              max_positions=256),
            data=DataConfig(corpus="files", directions=("en-fr", "fr-en"), vocab_size=400, byte_fallback=False,
                            train_files={"en-fr": str(d / "copy_en.tsv"), "fr-en": str(d / "copy_fr.tsv")}),
            train=TrainConfig(batch_tokens=2000, max_steps=400, warmup_steps=100, log_every=100, eval_every=0,
                              save_every=0, average_last=0, device="cpu", threads=1),
        )
        train(cfg, out)
        export_checkpoint(out / "checkpoints" / "step_00000400.pt", root / "pkg" / "tiny-fr", int8=True,
                          log=lambda _: None)

    return built_once(tmp_path_factory, worker_id, "tiny_fr", build) / "pkg" / "tiny-fr"


# ---------------------------------------------------------------- Hugging Face models (nmt-import)
# Random weights (bench/peers/hf_models.py), as save_pretrained writes them, and their imports;
# shared by tests/test_hf_import.py, test_hf_hub.py and test_glossary.py, built once per session.

def imported_once(tmp_path_factory, worker_id, name: str, hf_dir: Path, **options):
    """``hf_dir`` imported by nmt-import once per session (``built_once``), as a ModelPackage."""
    from engine.package import ModelPackage
    from export.hf_import import import_model

    root = built_once(tmp_path_factory, worker_id, name,
                      lambda out: import_model(hf_dir, out / "package", log=lambda *_: None, **options))
    return ModelPackage.load(root / "package")


def hf_model_once(tmp_path_factory, worker_id, name: str, make) -> Path:
    """The Hugging Face directory ``name`` that ``make(path)`` writes, once per session (``built_once``)."""
    return built_once(tmp_path_factory, worker_id, name, lambda out: make(out / name)) / name


@pytest.fixture(scope="session")
def marian(tmp_path_factory, worker_id):
    """(an OPUS-MT-shaped en-de directory, bench/peers/hf_models.py's tiny Marian; its import with
    int8 graphs as a ModelPackage)."""
    from bench.peers.hf_models import make_marian

    marian_dir = hf_model_once(tmp_path_factory, worker_id, "opus-mt-en-de", make_marian)
    return marian_dir, imported_once(tmp_path_factory, worker_id, "marian_package", marian_dir, int8=True)


@pytest.fixture(scope="session")
def sharp_dir(tmp_path_factory, worker_id) -> Path:
    """The small Marian model (tests/shared_builds.py's small_marian): its outputs run into the hundreds."""
    return hf_model_once(tmp_path_factory, worker_id, "opus-mt-small", small_marian)


@pytest.fixture(scope="session")
def sharp(tmp_path_factory, worker_id, sharp_dir):
    """(``sharp_dir``, its import as a ModelPackage)."""
    return sharp_dir, imported_once(tmp_path_factory, worker_id, "sharp_package", sharp_dir)
