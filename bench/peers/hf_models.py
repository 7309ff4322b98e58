"""Hugging Face model directories with random weights, shaped like the models people download
(OPUS-MT's MarianMTModel, NLLB's M2M100ForConditionalGeneration), for nmt-import's tests and
benchmarks: nothing here downloads anything.

    python -m bench.peers.hf_models marian OUT [--full-size]

writes OUT as ``save_pretrained`` leaves a downloaded model: config.json, model.safetensors,
generation_config.json and the tokenizer's own files (MarianTokenizer: source.spm, target.spm,
vocab.json; NllbTokenizer: sentencepiece.bpe.model), with SentencePiece models trained on the
fly on the LibreOffice help lines in tests/data. The weights are random but not tiny (a
freshly initialised model's 0.02 spread gives near-uniform outputs, the same token again and
again), and the end-of-sentence logit is raised so that outputs end at varied lengths.

Sizes: the default is tiny (d_model 32, 2+2 layers) for tests; ``--full-size`` is OPUS-MT
en-de's shape (d_model 512, 6+6 layers, 8 heads, FFN 2048, 58,101 pieces), the vocabulary
filled up with pieces no input produces (speed depends on its size, not on its content).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch

LINES = Path(__file__).resolve().parents[2] / "tests" / "data" / "libreoffice-gate.tsv"
TINY = {"d_model": 32, "layers": 2, "heads": 4, "ffn": 64, "max_positions": 512}
OPUS_MT = {"d_model": 512, "layers": 6, "heads": 8, "ffn": 2048, "max_positions": 512, "vocab": 58101}
EOS_BIAS = 4.0  # added to the end-of-sentence logit: ends at varied lengths
# With these weights (tiny, EOS_BIAS) greedy outputs of the sample's English lines end after 0
# to 3 tokens or run to a 24-token limit, and "Thank you." (the server's warm-up) ends.
SEED = 2


def parallel_lines(target: str = "de") -> tuple[list[str], list[str]]:
    """English and ``target`` lines of the LibreOffice help sample the tests carry."""
    rows = [line.rstrip("\n").split("\t") for line in LINES.read_text().splitlines()]
    pairs = [(r[2], r[3]) for r in rows if r[0] == target]
    return [e for e, _ in pairs], [t for _, t in pairs]


def bible_lines(language: str, split: str = "train", n: int = 20000) -> list[str]:
    """The first ``n`` verses of ``language``'s primary Bible of ``split`` (the bundled corpus)."""
    from corpus.bible import DEFAULT_VERSIONS, clean, load_bible, split_of

    verses = [clean(t) for k, t in sorted(load_bible(DEFAULT_VERSIONS[language][0]).items()) if split_of(k) == split]
    return [v for v in verses if v][:n]


def train_spm(lines: list[str], prefix: Path, vocab_size: int, model_type: str = "unigram",
              **ids: int) -> Path:
    """A SentencePiece model over ``lines`` (repeated: the sample is small); returns the .model path."""
    text = Path(f"{prefix}.txt")
    text.write_text("\n".join(lines * 3) + "\n")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(prefix), vocab_size=vocab_size,
                                   model_type=model_type, character_coverage=1.0, minloglevel=2, **ids)
    text.unlink()
    return Path(f"{prefix}.model")


def randomize(model: torch.nn.Module, seed: int, eos: int, eos_bias: float = EOS_BIAS) -> None:
    """Weights with a spread that gives varied outputs; a raised end-of-sentence logit."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" in name:
                continue
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=g) * 1.7 / math.sqrt(p.shape[-1]))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
        bias = getattr(model, "final_logits_bias", None)
        if bias is not None:
            bias.copy_(torch.randn(bias.shape, generator=g) * 0.5)
            bias[..., eos] += eos_bias
        else:  # no output bias: move the eos row of the shared embedding along the decoder's last bias,
            b = model.model.decoder.layer_norm.bias  # which every output state carries
            model.get_input_embeddings().weight[eos] += eos_bias * b / b.dot(b)


def _save(model: Any, out: Path, work: Path, seed: int, eos_bias: float) -> Path:
    """Random weights (``randomize``), saved as save_pretrained does; the SentencePiece work files removed."""
    randomize(model, seed, eos=model.config.eos_token_id, eos_bias=eos_bias)
    model.save_pretrained(str(out))
    for f in work.iterdir():
        f.unlink()
    work.rmdir()
    return out


def make_marian(out: Path, size: dict[str, int] = TINY, target: str = "de", pieces: int = 200, seed: int = SEED,
                eos_bias: float = EOS_BIAS, targets: tuple[str, ...] = ()) -> Path:
    """An OPUS-MT-shaped en-``target`` directory: MarianMTModel + MarianTokenizer files. With
    ``targets``, a model with several target languages (as en-ROMANCE): a ``>>xx<<`` token per
    target after </s> and <unk>, a target SentencePiece model over every target's text, and
    tokenizer_config.json's target_lang "mul"."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    out.mkdir(parents=True, exist_ok=True)
    work = out / ".spm"
    work.mkdir(exist_ok=True)
    # A full-size vocabulary needs more text than the tests' sample: the Bible's
    languages = targets or (target,)
    lines = [bible_lines(lang) if pieces > 1000 else parallel_lines(lang)[1] for lang in languages]
    source_lines = bible_lines("en") if pieces > 1000 else parallel_lines(languages[0])[0]
    target_lines = [line for group in lines for line in group]
    models = [train_spm(lines, work / name, pieces, bos_id=-1, eos_id=0, unk_id=1, pad_id=-1)
              for name, lines in (("source", source_lines), ("target", target_lines))]
    vocab: dict[str, int] = {"</s>": 0, "<unk>": 1, **{f">>{lang}<<": 2 + i for i, lang in enumerate(targets)}}
    for path in models:  # Marian's vocabulary: the union of both models' pieces
        sp = spm.SentencePieceProcessor(model_file=str(path))
        for i in range(sp.get_piece_size()):
            vocab.setdefault(sp.id_to_piece(i), len(vocab))
    filler = 0
    while len(vocab) < size.get("vocab", 0) - 1:  # pieces no input produces, up to the full size
        vocab.setdefault(f"\u2581unused{filler}", len(vocab))
        filler += 1
    vocab["<pad>"] = len(vocab)
    (work / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    MarianTokenizer(str(models[0]), str(models[1]), str(work / "vocab.json"), source_lang="en",
                    target_lang="mul" if targets else target).save_pretrained(str(out))
    pad = vocab["<pad>"]
    config = MarianConfig(
        vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=size["d_model"],
        encoder_layers=size["layers"], decoder_layers=size["layers"], encoder_attention_heads=size["heads"],
        decoder_attention_heads=size["heads"], encoder_ffn_dim=size["ffn"], decoder_ffn_dim=size["ffn"],
        activation_function="swish", max_position_embeddings=size["max_positions"], scale_embedding=True,
        share_encoder_decoder_embeddings=True, pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad,
        # as OPUS-MT's own configs say
        bad_words_ids=[[pad]], forced_eos_token_id=0, num_beams=4, max_length=512,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    return _save(MarianMTModel(config), out, work, seed, eos_bias)


def make_nllb(out: Path, size: dict[str, int] = TINY, pieces: int = 200, seed: int = SEED,
              eos_bias: float = EOS_BIAS) -> Path:
    """An NLLB-shaped directory (M2M100ForConditionalGeneration + NllbTokenizer files) over
    English, German, French and Spanish text."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer

    out.mkdir(parents=True, exist_ok=True)
    work = out / ".spm"
    work.mkdir(exist_ok=True)
    if pieces > 1000:  # a full-size vocabulary needs more text than the tests' sample
        lines = [v for lang in ("en", "de", "fr", "es") for v in bible_lines(lang, n=10000)]
    else:
        lines = parallel_lines("de")[0] + [t for lang in ("de", "fr", "es") for t in parallel_lines(lang)[1]]
    # fairseq's layout: <unk> 0, <s> 1, </s> 2 (the tokenizer shifts every id by one for its <pad>)
    model_file = train_spm(lines, work / "sentencepiece.bpe", pieces, model_type="bpe", unk_id=0, bos_id=1, eos_id=2,
                           pad_id=-1)
    tokenizer = NllbTokenizer(str(model_file), src_lang="eng_Latn", tgt_lang="deu_Latn")
    tokenizer.save_pretrained(str(out))
    config = M2M100Config(
        vocab_size=len(tokenizer), d_model=size["d_model"], encoder_layers=size["layers"],
        decoder_layers=size["layers"], encoder_attention_heads=size["heads"], decoder_attention_heads=size["heads"],
        encoder_ffn_dim=size["ffn"], decoder_ffn_dim=size["ffn"], activation_function="relu",
        max_position_embeddings=size["max_positions"], scale_embedding=True, pad_token_id=1, bos_token_id=0,
        eos_token_id=2, decoder_start_token_id=2, max_length=200, tokenizer_class="NllbTokenizer",
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    return _save(M2M100ForConditionalGeneration(config), out, work, seed, eos_bias)


def hf_generate(model: Any, sources: list[list[int]], max_new_tokens: int, beam_size: int = 1,
                forced: list[int] | None = None) -> list[list[int]]:
    """Transformers' ``generate`` one source at a time (each with its own length bound, as our
    engine bounds each), searching as ours does with ``alpha`` 0: no length normalisation, a
    source done at ``beam_size`` finished hypotheses. Returns the generated ids without the
    decoder's start, the forced ``forced`` prefix and what follows the first eos."""
    eos = model.generation_config.eos_token_id
    out = []
    for src in sources:
        kwargs: dict[str, Any] = {"forced_bos_token_id": forced[0]} if forced else {}
        with torch.no_grad():
            ids = model.generate(torch.tensor([src]), num_beams=beam_size, max_new_tokens=max_new_tokens,
                                 length_penalty=0.0, early_stopping=True, do_sample=False, forced_eos_token_id=None,
                                 **kwargs)[0].tolist()
        ids = ids[1 + len(forced or []):]
        out.append(ids[: ids.index(eos)] if eos in ids else ids)
    return out


def load_directory(directory: str | Path) -> Any:
    """The Transformers model of an OPUS-MT or NLLB directory, eval mode, float32, offline."""
    from transformers import M2M100ForConditionalGeneration, MarianMTModel

    kind = json.loads((Path(directory) / "config.json").read_text())["model_type"]
    cls = MarianMTModel if kind == "marian" else M2M100ForConditionalGeneration
    return cls.from_pretrained(str(directory), local_files_only=True).eval()


def batch_generate(model: Any, sources: list[list[int]], max_new_tokens: int, beam_size: int, alpha: float,
                   forced: list[int] | None = None) -> list[list[int]]:
    """``generate()`` on a batch of sources (their ids, unpadded) with the model's own special
    ids, as nmt-bench's Transformers engine runs it: our search settings (the length penalty
    as Transformers defines it, a source done at beam_size finished hypotheses, pad never an
    output, no eos forced at the length limit); returns the generated ids without the
    decoder's start, the ``forced`` target code (NLLB) and what follows eos. The settings go
    to ``generate()`` as arguments: a GenerationConfig's values that equal the library's
    defaults (num_beams=1) are replaced by the model's own (OPUS-MT's num_beams=4)."""
    config = model.config
    pad, eos = config.pad_token_id, config.eos_token_id
    width = max(len(s) for s in sources)
    ids = torch.tensor([s + [pad] * (width - len(s)) for s in sources], dtype=torch.long)
    beam = {"length_penalty": alpha, "early_stopping": True} if beam_size > 1 else {}
    if forced:
        beam["forced_bos_token_id"] = forced[0]
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=ids.ne(pad).long(),
                             max_new_tokens=max_new_tokens + len(forced or []),
                             num_beams=beam_size, do_sample=False, bad_words_ids=[[pad]], forced_eos_token_id=None,
                             use_cache=True, **beam)
    results = []
    for row in out.tolist():
        row = row[1 + len(forced or []):]
        results.append(row[: row.index(eos)] if eos in row else row)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.peers.hf_models", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=["marian", "nllb"])
    p.add_argument("out", type=Path)
    p.add_argument("--full-size", action="store_true", help="OPUS-MT en-de's shape instead of a tiny one")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--sentences", type=Path, help="also write 128 English test sentences (John) here, one a line: "
                                                  "nmt-bench --input")
    args = p.parse_args(argv)
    size = OPUS_MT if args.full_size else TINY
    make = make_marian if args.kind == "marian" else make_nllb
    make(args.out, size, pieces=8000 if args.full_size else 200, seed=args.seed)
    print(f"wrote {args.out}")
    if args.sentences:
        args.sentences.write_text("\n".join(bible_lines("en", "test", 128)) + "\n")
        print(f"wrote {args.sentences}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
