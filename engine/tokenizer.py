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

Text is text: a user's ``<2de>``, ``<ph1>`` or ``</s>`` is encoded as the characters it is
(SentencePiece would read the user-defined pieces among them, language tags and placeholders,
as the symbols), so no text selects the target language or stands for a span. The symbols are
produced only where the caller put them (``encode``'s ``symbols``: the placeholders of
engine/placeholders.py; the language tag is added as an id by engine/package.py). Decoding
drops every id that is not text but the placeholders, which the server puts back or refuses.
``normalize`` is what the server does to a sentence before anything else (docs/UNICODE.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as model_pb2

from engine.contract import SOURCE_SPM, TARGET_SPM, TOKENIZER, VOCAB
from engine.placeholders import SYMBOLS

SENTENCEPIECE, PIECES = "sentencepiece", "pieces"
TOKENIZER_KINDS = (SENTENCEPIECE, PIECES)
SPIECE_UNDERLINE = "\u2581"
UNK_SURFACE = "\u2047"  # what SentencePiece writes for the unknown id: " ⁇ "

# Removed before a sentence is encoded: Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties:
# soft hyphen, zero-width space/joiners, word joiner, bidi marks, embeddings, overrides and isolates,
# variation selectors, BOM, Hangul fillers, tags ...) and the control characters that are not
# whitespace (C0 and C1, DEL). None of them is visible, and each changed the pieces the model read.
_IGNORED = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f"
    "\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0000-\U000e0fff\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]")


def normalize(text: str) -> str:
    """``text`` as the model reads it: without default-ignorable code points and control
    characters (whitespace controls stay). The tokenizer's own normalisation (NFKC and
    whitespace folding) comes after, inside SentencePiece."""
    return _IGNORED.sub("", text)


def has_letter(text: str) -> bool:
    """Is there a letter (Unicode category L*) in ``text``? Text without one is not translated."""
    return any(c.isalpha() for c in text)


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
        self._literal, self._user_defined = _text_only(source)
        if vocab is None:  # SentencePiece's own decoding, as the server always had it
            self._pieces: list[str] = []
            self._unk = source.unk_id()
            self.special: frozenset[int] = frozenset()
            self._not_text_ids = frozenset(
                {*special, *self._user_defined, *(i for i in range(source.get_piece_size())
                                                  if source.is_control(i) or source.is_unknown(i))})
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
        self._reserved = frozenset(special - {self._unk})  # ids no text may stand for (>>fr<<: a tag)
        user = {source.id_to_piece(i) for i in self._user_defined}
        self._not_text_ids = frozenset(self.special | {i for piece, i in vocab.items() if piece in user})

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

    @property
    def not_text(self) -> frozenset[int]:
        """Ids that no text stands for: control and unknown pieces, user-defined ones (language
        tags, placeholders) and the package's special ids and language tags or codes."""
        return self._not_text_ids

    @property
    def placeholder_ids(self) -> tuple[int, ...]:
        """The ids of <ph1> .. <ph12> when the vocabulary has every one, else none."""
        ids = tuple(self.piece_to_id(s) for s in SYMBOLS)
        return () if self._unk in ids else ids

    def symbol_pattern(self) -> re.Pattern[str]:
        """The text of every piece in ``not_text`` (and SentencePiece's unknown mark), longest first:
        what an output must not show unless its source does."""
        texts = {self.id_to_piece(i) for i in self._not_text_ids if 0 <= i < self.get_piece_size()}
        texts = {t for t in texts if t} | {UNK_SURFACE}
        return re.compile("|".join(re.escape(t) for t in sorted(texts, key=lambda t: (-len(t), t))))

    def encode(self, text: str, symbols: Sequence[tuple[int, int]] = ()) -> list[int]:
        """The ids of ``text`` (no special ids added). User-defined pieces (language tags,
        placeholders) are produced only at ``symbols``, [start, end) character ranges where the
        caller put one; anywhere else the characters are encoded as text."""
        if not symbols or not self._user_defined:
            if self.vocab is None:
                return self._literal.encode(text)
            return self._vocab_ids(self._literal.encode(text, out_type=str))
        allowed = {(len(text[:s].encode()), len(text[:e].encode())) for s, e in symbols}
        pieces: list[str] = []
        ids: list[int] = []
        for p in self.source.encode(text, return_type="proto").pieces:
            if p.id in self._user_defined and (p.begin, p.end) not in allowed:
                spelled = self._spell(p.piece, after_space=bool(pieces) and pieces[-1] == SPIECE_UNDERLINE)
                if spelled and spelled[0].startswith(SPIECE_UNDERLINE) and pieces and pieces[-1] == SPIECE_UNDERLINE:
                    pieces.pop()  # "▁" "<2de>" -> "▁<" "2" "de" ">", as text is encoded
                    ids.pop()
                pieces += spelled
                ids += [self.source.piece_to_id(x) for x in spelled]
            else:
                pieces.append(p.piece)
                ids.append(p.id)
        if self.vocab is None:
            return ids
        return self._vocab_ids(pieces)

    def piece_spans(self, text: str) -> list[tuple[int, int]] | None:
        """Where each id of ``encode(text)`` comes from: its [start, end) in ``text``, in characters
        (a word's first piece takes the space before it); None where the ids are not one per piece
        (a piece spelled out character by character)."""
        pieces = self._literal.encode(text, return_type="proto").pieces
        if self.vocab is not None and len(self._vocab_ids([p.piece for p in pieces])) != len(pieces):
            return None
        at = {0: 0}  # byte offset -> character offset
        size = 0
        for i, c in enumerate(text, start=1):
            size += len(c.encode())
            at[size] = i
        return [(at.get(p.begin, 0), at.get(p.end, len(text))) for p in pieces]

    def _vocab_ids(self, pieces: list[str]) -> list[int]:
        """The vocabulary's ids of text pieces. A piece spelled like a reserved one (a SentencePiece
        model that learned ">>fr<<" as text, OPUS-MT's target tag) is text: spelled out character by
        character, never the tag."""
        vocab = self.vocab or {}
        ids = [vocab.get(p, self._unk) for p in pieces]
        if not self._reserved.intersection(ids):
            return ids
        out: list[int] = []
        for piece, i in zip(pieces, ids):
            if i not in self._reserved:
                out.append(i)
                continue
            spelled = (vocab.get(c, self._unk) for c in self._characters(piece))
            out += [self._unk if j in self._reserved else j for j in spelled]
        return out

    def _spell(self, symbol: str, after_space: bool) -> list[str]:
        """The pieces of a symbol's text read as text: SentencePiece's own, without the word start
        it adds in front unless a space stood there; characters no piece starts with as bytes."""
        pieces = self._literal.encode(symbol, out_type=str)
        if after_space or not pieces or not pieces[0].startswith(SPIECE_UNDERLINE):
            return pieces
        first = pieces[0][len(SPIECE_UNDERLINE):]
        if not first:
            return pieces[1:]
        if self._is_text_piece(first):
            return [first, *pieces[1:]]
        return [*self._characters(first), *pieces[1:]]

    def _is_text_piece(self, piece: str) -> bool:
        i = self.source.piece_to_id(piece)
        return self.source.id_to_piece(i) == piece and not (
            self.source.is_unknown(i) or self.source.is_control(i) or i in self._user_defined)

    def _characters(self, text: str) -> list[str]:
        """``text`` piece by piece: each character's own piece, else its UTF-8 bytes' pieces
        (byte fallback), else the character (unknown)."""
        out = []
        for c in text:
            if self._is_text_piece(c):
                out.append(c)
                continue
            byte_pieces = [f"<0x{b:02X}>" for b in c.encode()]
            if all(self.source.is_byte(self.source.piece_to_id(b)) for b in byte_pieces):
                out += byte_pieces
            else:
                out.append(c)
        return out

    def decode(self, ids: list[int]) -> str:
        """The text of output ids; every id that is not text is dropped, but the placeholders."""
        keep = set(self.placeholder_ids)
        if self.vocab is None:
            return self.target.decode([i for i in ids if i not in self._not_text_ids or i in keep])
        pieces = [self._pieces[i] for i in ids
                  if (i not in self._not_text_ids or i in keep) and 0 <= i < len(self._pieces)]
        return self.target.decode_pieces(pieces).replace(SPIECE_UNDERLINE, " ").strip()


def _text_only(sp: spm.SentencePieceProcessor) -> tuple[spm.SentencePieceProcessor, frozenset[int]]:
    """A processor over ``sp``'s vocabulary that reads every text as text (its user-defined
    pieces made unused, so that no text produces them; any other text is encoded exactly as
    ``sp`` encodes it), and the ids of those pieces."""
    proto = model_pb2.ModelProto()
    proto.ParseFromString(sp.serialized_model_proto())
    user = frozenset(i for i, p in enumerate(proto.pieces) if p.type == model_pb2.ModelProto.SentencePiece.USER_DEFINED)
    if not user:
        return sp, user
    for i in user:
        proto.pieces[i].type = model_pb2.ModelProto.SentencePiece.UNUSED
    return spm.SentencePieceProcessor(model_proto=proto.SerializeToString()), user


def _load_spm(path: Path) -> spm.SentencePieceProcessor:
    if not path.is_file():
        raise TokenizerError(f"{path.name} is missing")
    try:
        return spm.SentencePieceProcessor(model_file=str(path))
    except (OSError, RuntimeError) as e:
        raise TokenizerError(f"{path.name} does not load: {str(e).strip().splitlines()[0][:200]}") from None
