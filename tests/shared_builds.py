"""What several test modules build and only read, built once per test session (tests/conftest.py's
session fixtures): the tiny trained models, their packages and the small Hugging Face models with
their imports. An export's cost is mostly torch.onnx's fixed cost per graph, the same for a tiny
model, so a build that every module, or every pytest-xdist worker, made again was much of the
suite's time."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import sentencepiece as spm
import torch
from filelock import FileLock  # with torch and huggingface_hub (both depend on it)

from bench.peers.hf_models import SEED, randomize, train_spm


def built_once(tmp_path_factory: pytest.TempPathFactory, worker_id: str, name: str,
               build: Callable[[Path], object]) -> Path:
    """The directory ``name`` that ``build`` fills, built once per test session. Under pytest-xdist
    it lies in the directory that holds every worker's temporary directory, and a file lock lets
    one worker build it while the others wait and then use what it built; in one process
    (``-n 0``, ``worker_id`` "master") it lies in the session's temporary directory. A build that
    failed (no ``.done`` beside it) is started over by the next worker that asks."""
    base = tmp_path_factory.getbasetemp()
    root = (base if worker_id == "master" else base.parent) / "built-once"
    root.mkdir(parents=True, exist_ok=True)
    out, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            if out.exists():
                shutil.rmtree(out)
            out.mkdir()
            build(out)
            done.touch()
    return out


def small_marian(out: Path, layers: int = 2, seed: int = SEED) -> Path:
    """An OPUS-MT-shaped Marian directory at the size people try first: d_model 64, ``layers`` +
    ``layers``, swish, a 38-piece vocabulary over a few short sentences, random weights."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer  # a second to import: only here

    work = out / ".spm"
    work.mkdir(parents=True)
    english = ["the cat sat on the mat", "a dog ate the hat", "the man can see a cat", "no one sat on a hat"] * 5
    german = ["die katze sass auf der matte", "ein hund ass den hut", "der mann sieht eine katze",
              "keiner sass auf dem hut"] * 5
    models = [train_spm(lines, work / name, 29, bos_id=-1, eos_id=0, unk_id=1, pad_id=-1, hard_vocab_limit=False)
              for name, lines in (("source", english), ("target", german))]
    vocab = {"</s>": 0, "<unk>": 1}
    for path in models:
        sp = spm.SentencePieceProcessor(model_file=str(path))
        for i in range(sp.get_piece_size()):
            vocab.setdefault(sp.id_to_piece(i), len(vocab))
    vocab["<pad>"] = pad = len(vocab)
    (work / "vocab.json").write_text(json.dumps(vocab))
    MarianTokenizer(str(models[0]), str(models[1]), str(work / "vocab.json"), source_lang="en",
                    target_lang="de").save_pretrained(str(out))
    config = MarianConfig(
        vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=64, encoder_layers=layers,
        decoder_layers=layers, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256,
        decoder_ffn_dim=256, activation_function="swish", max_position_embeddings=128, scale_embedding=True,
        share_encoder_decoder_embeddings=True, pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    model = MarianMTModel(config)
    randomize(model, seed, eos=0)
    with torch.no_grad():  # outputs in the hundreds, as a trained model's sharp logits are
        for norm in (model.model.encoder.layers[-1].final_layer_norm, model.model.decoder.layers[-1].final_layer_norm):
            norm.weight.mul_(40.0)
            norm.bias.mul_(40.0)
    model.save_pretrained(str(out))
    shutil.rmtree(work)
    return out
