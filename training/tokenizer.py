"""A joint SentencePiece vocabulary over every language of a run.

Special ids are fixed (pad 0, unk 1, bos 2, eos 3, see ``training.config``) and the
target-language tags (``<2de>`` ...) are user-defined symbols, so they are never split
into pieces. The tokenizer is trained on the training split only.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from pathlib import Path

import sentencepiece as spm

from engine.placeholders import Protector, restore
from training.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID


def lang_tag(lang: str) -> str:
    return f"<2{lang}>"


class Tokenizer:
    """Thin wrapper over a SentencePiece model that knows our special ids and tags."""

    def __init__(self, model_path: str | Path | None = None, model_proto: bytes | None = None) -> None:
        if (model_path is None) == (model_proto is None):
            raise ValueError("give either a SentencePiece model file or its bytes")
        if model_proto is None:
            model_proto = Path(model_path).read_bytes()  # type: ignore[arg-type]
        self.name = str(model_path) if model_path is not None else "the checkpoint's tokenizer"
        self.model_proto = model_proto
        self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
        ids = (self.sp.pad_id(), self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id())
        if ids != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise ValueError(f"{self.name}: special ids (pad, unk, bos, eos) are {ids}, expected "
                             f"{(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}")
        # Placeholder protection when the vocabulary has the symbols (engine/placeholders.py).
        self.protector = Protector.for_pieces(self.sp.piece_to_id, UNK_ID)

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def languages(self) -> list[str]:
        """Languages that have a tag in this vocabulary."""
        out = []
        for i in range(self.vocab_size):
            piece = self.sp.id_to_piece(i)
            if self.sp.is_control(i) or self.sp.is_unknown(i):
                continue
            if piece.startswith("<2") and piece.endswith(">") and len(piece) > 3:
                out.append(piece[2:-1])
        return out

    def tag_id(self, lang: str) -> int:
        i = self.sp.piece_to_id(lang_tag(lang))
        if i == UNK_ID:
            raise KeyError(f"language {lang!r} has no tag in {self.name}; known: {', '.join(self.languages())}")
        return i

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text, out_type=int)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self.sp.encode(list(texts), out_type=int)

    def encode_source(self, text: str, target_lang: str) -> list[int]:
        """Source ids as the model sees them: target tag, pieces, eos."""
        return [self.tag_id(target_lang), *self.encode(text), EOS_ID]

    def encode_protected(self, text: str, target_lang: str) -> tuple[list[int], tuple[str, ...]]:
        """Source ids of ``text`` with its spans replaced by placeholders (when this vocabulary
        has them, as the server does), and what each placeholder stands for."""
        protected = self.protector.protect(text)
        return self.encode_source(protected.text, target_lang), protected.originals

    def decode_restored(self, ids: Iterable[int], originals: Sequence[str]) -> str:
        """Text of output ``ids`` with the placeholders of ``encode_protected`` put back."""
        return restore(self.decode(ids), originals)

    def pieces(self, ids: Iterable[int]) -> list[str]:
        return [self.sp.id_to_piece(int(i)) for i in ids]

    def decode(self, ids: Iterable[int]) -> str:
        return self.sp.decode([int(i) for i in ids if int(i) not in (PAD_ID, BOS_ID, EOS_ID)])


def train_tokenizer(
    sentences: Iterable[str],
    out_prefix: str | Path,
    vocab_size: int,
    languages: Sequence[str],
    sample: int = 300_000,
    seed: int = 1,
    byte_fallback: bool = False,
    symbols: Sequence[str] = (),
) -> Tokenizer:
    """Train a unigram SentencePiece model; writes ``out_prefix.model`` and ``.vocab``.

    ``byte_fallback`` spells characters outside the vocabulary as their UTF-8 bytes (256 pieces
    of the vocabulary) instead of ``<unk>``; ``symbols`` are extra user-defined pieces, never
    split (the placeholders of engine/placeholders.py)."""
    pool = [s for s in sentences if s]
    if len(pool) > sample:
        pool = random.Random(seed).sample(pool, sample)
    if not pool:
        raise ValueError("no sentences to train the tokenizer on")
    out_prefix = Path(out_prefix)
    out_prefix.parent.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(pool),
        model_prefix=str(out_prefix),
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        user_defined_symbols=[*(lang_tag(lang) for lang in languages), *symbols],
        byte_fallback=byte_fallback,
        input_sentence_size=len(pool),
        shuffle_input_sentence=True,
        num_threads=2,
        hard_vocab_limit=False,  # a tiny corpus may not support the requested size
        minloglevel=2,
    )
    return Tokenizer(out_prefix.with_suffix(".model"))

