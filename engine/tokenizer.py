"""A package's tokenizer: text <-> the model's ids, for the server and the clients' tools.

Two kinds, named by model.json's ``tokenizer`` (engine/package.py):

- ``sentencepiece`` (every model nmt-train makes): one SentencePiece model, ``tokenizer.model``,
  whose ids are the model's ids. Encoding and decoding are SentencePiece's own.
- ``pieces`` (imported models, export/hf_import.py): SentencePiece cuts the source text into
  pieces with ``source.spm`` and joins output pieces with ``target.spm`` (the same file when
  there is no ``target.spm``), and ``vocab.json`` maps pieces to the model's ids: OPUS-MT's
  two SentencePiece models over one shared vocabulary, or NLLB's single model whose ids are
  shifted by its own special tokens. A piece the vocabulary lacks is the unknown id, and
  decoding drops special ids (unknown included), as Transformers' tokenizers do.

Both offer the few calls the server makes of a SentencePiece processor, so it uses either
without knowing which.
"""

from __future__ import annotations

import json
from pathlib import Path

import sentencepiece as spm

from engine.contract import SOURCE_SPM, TARGET_SPM, TOKENIZER, VOCAB

SENTENCEPIECE, PIECES = "sentencepiece", "pieces"
TOKENIZER_KINDS = (SENTENCEPIECE, PIECES)
SPIECE_UNDERLINE = "\u2581"


class TokenizerError(ValueError):
    """Tokenizer files that do not load or do not agree with each other."""


class PackageTokenizer:
    """Text -> ids (no special ids added) and ids -> text (special ids dropped)."""

    def __init__(self, source: spm.SentencePieceProcessor, target: spm.SentencePieceProcessor | None = None,
                 vocab: dict[str, int] | None = None, unk: str = "<unk>", special: frozenset[int] = frozenset()
                 ) -> None:
        self.source = source
        self.target = target or source
        self.vocab = vocab
        if vocab is None:  # SentencePiece's own decoding, as the server always had it (unk shows as " ⁇ ")
            self._pieces: list[str] = []
            self._unk = source.unk_id()
            self.special: frozenset[int] = frozenset()
            return
        if unk not in vocab:
            raise TokenizerError(f"{VOCAB} has no {unk!r} piece")
        size = max(vocab.values()) + 1
        self._pieces = [""] * size
        for piece, i in vocab.items():
            self._pieces[i] = piece
        missing = [i for i, p in enumerate(self._pieces) if not p]
        if missing:
            raise TokenizerError(f"{VOCAB} gives no piece for id(s) {', '.join(map(str, missing[:5]))}"
                                 f"{' ...' if len(missing) > 5 else ''}: ids must run from 0 without gaps")
        self._unk = vocab[unk]
        # Dropped when decoding, as Transformers' tokenizers drop special tokens: the given ids, the
        # unknown id, and pieces no SentencePiece model produces as text (control symbols such as
        # <s> and </s>; <pad>, <mask> and the like, which neither model has).
        self.special = special | {self._unk} | {i for piece, i in vocab.items() if self._not_text(piece)}

    def _not_text(self, piece: str) -> bool:
        for sp in (self.source, self.target):
            i = sp.piece_to_id(piece)
            if sp.id_to_piece(i) == piece:  # a piece of this model
                return sp.is_control(i) or sp.is_unknown(i)
        return piece.startswith("<") and piece.endswith(">")

    @property
    def kind(self) -> str:
        return SENTENCEPIECE if self.vocab is None else PIECES

    @classmethod
    def load(cls, directory: Path, kind: str = SENTENCEPIECE, special: frozenset[int] = frozenset()
             ) -> PackageTokenizer:
        """The tokenizer files of a package directory; TokenizerError says what is wrong."""
        if kind == SENTENCEPIECE:
            return cls(_load_spm(directory / TOKENIZER), special=special)
        if kind != PIECES:
            raise TokenizerError(f"tokenizer kind {kind!r} is not one of {', '.join(TOKENIZER_KINDS)}")
        try:
            vocab = json.loads((directory / VOCAB).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise TokenizerError(f"{VOCAB} does not load: {e}") from None
        if not isinstance(vocab, dict) or not all(isinstance(k, str) and isinstance(v, int) and v >= 0
                                                  for k, v in vocab.items()):
            raise TokenizerError(f"{VOCAB} must map pieces to non-negative integer ids")
        target = directory / TARGET_SPM
        return cls(_load_spm(directory / SOURCE_SPM), _load_spm(target) if target.exists() else None, vocab,
                   special=special)

    def get_piece_size(self) -> int:
        return self.source.get_piece_size() if self.vocab is None else len(self._pieces)

    def unk_id(self) -> int:
        return self._unk

    def id_to_piece(self, i: int) -> str:
        return self.source.id_to_piece(i) if self.vocab is None else self._pieces[i]

    def piece_to_id(self, piece: str) -> int:
        if self.vocab is None:
            return self.source.piece_to_id(piece)
        return self.vocab.get(piece, self._unk)

    def encode(self, text: str) -> list[int]:
        if self.vocab is None:
            return self.source.encode(text)
        return [self.vocab.get(p, self._unk) for p in self.source.encode(text, out_type=str)]

    def decode(self, ids: list[int]) -> str:
        if self.vocab is None:
            return self.target.decode(ids)
        pieces = [self._pieces[i] for i in ids if i not in self.special and 0 <= i < len(self._pieces)]
        return self.target.decode_pieces(pieces).replace(SPIECE_UNDERLINE, " ").strip()


def _load_spm(path: Path) -> spm.SentencePieceProcessor:
    if not path.is_file():
        raise TokenizerError(f"{path.name} is missing")
    try:
        return spm.SentencePieceProcessor(model_file=str(path))
    except (OSError, RuntimeError) as e:
        raise TokenizerError(f"{path.name} does not load: {str(e).strip().splitlines()[0][:200]}") from None
