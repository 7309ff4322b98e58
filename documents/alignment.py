"""Where a source span's words went in the translation, from the model's cross-attention: the
placement of inline markup in ``format: html`` (documents/html_text.py).

The server returns, per sentence, the pieces the model read and wrote and the attention of
each written piece over the read ones. Pieces are grouped into words (a piece that starts
with SentencePiece's "▁" starts a word), words are matched to the whitespace-separated
words of the sentence and of its translation, and each target word is aligned to the source
word it attends to most (summed over the source word's pieces, averaged over its own). A
marked source span goes around the target words aligned to its words (the first to the last
of them); a span none of them aligns to goes around the target word that attends to it most.
Where pieces and words do not line up (a normalisation that changed the text), that sentence
falls back to placing by proportion.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from documents.html_text import Mark, Unit, nested_spans, proportional
from nmt.v1 import translator_pb2 as pb

WORD_START = "\u2581"  # SentencePiece's word-boundary mark
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class SentenceAlignment:
    """One sentence: its words' character spans in the unit's text and in the translation, and
    for each target word the source word it is aligned to (``None``: no alignment known)."""

    source_words: list[tuple[int, int]]
    target_words: list[tuple[int, int]]
    links: list[int] | None
    weights: np.ndarray | None  # [target word, source word]


def _words(text: str, offset: int) -> list[tuple[int, int]]:
    return [(m.start() + offset, m.end() + offset) for m in _WORD.finditer(text)]


def _piece_words(pieces: Sequence[str]) -> list[list[int]]:
    """Indices of the pieces that make up each word."""
    groups: list[list[int]] = []
    for i, piece in enumerate(pieces):
        if piece.startswith(WORD_START) or not groups:
            groups.append([])
        if piece != WORD_START or not groups[-1]:
            groups[-1].append(i)
    return [g for g in groups if g]


def sentence_alignment(source: str, source_at: int, translation: str, target_at: int,
                       hyp: pb.Hypothesis) -> SentenceAlignment:
    src_words, tgt_words = _words(source, source_at), _words(translation, target_at)
    n_src, n_tgt = len(hyp.source_pieces), len(hyp.target_pieces)
    if not n_src or not n_tgt or len(hyp.attention) != n_src * n_tgt:
        return SentenceAlignment(src_words, tgt_words, None, None)
    attention = np.asarray(hyp.attention, dtype=np.float32).reshape(n_tgt, n_src)
    # The source as the model read it: the language tag first and the end-of-sentence last.
    src_groups = _piece_words([p for p in hyp.source_pieces[1:-1]])
    tgt_groups = _piece_words(list(hyp.target_pieces))
    if len(src_groups) != len(src_words) or len(tgt_groups) != len(tgt_words):
        return SentenceAlignment(src_words, tgt_words, None, None)
    # weights[t, s]: the attention of target word t's pieces (averaged) over source word s's
    # pieces (summed), as two matrix products: one pass, not a loop over word pairs.
    source_words = np.zeros((n_src, len(src_groups)), dtype=np.float32)  # source piece -> its word
    for s, sg in enumerate(src_groups):
        source_words[[i + 1 for i in sg], s] = 1.0  # + 1: past the language tag
    target_words = np.zeros((len(tgt_groups), n_tgt), dtype=np.float32)  # target word -> its pieces' mean
    for t, tg in enumerate(tgt_groups):
        target_words[t, tg] = 1.0 / len(tg)
    weights = target_words @ attention @ source_words
    return SentenceAlignment(src_words, tgt_words, [int(x) for x in weights.argmax(axis=1)], weights)


def translation_alignments(unit_text: str, translation: pb.Translation) -> tuple[str, list[SentenceAlignment]]:
    """The best translation's text and an alignment per sentence of the unit's (stripped) text."""
    best = translation.hypotheses[0] if translation.hypotheses else pb.Hypothesis()
    text = best.text
    if not translation.segments or len(translation.segments) == 1:
        return text, [sentence_alignment(unit_text, 0, text, 0, best)]
    out, cursor = [], 0
    for seg in translation.segments:
        hyp = seg.hypotheses[0] if seg.hypotheses else pb.Hypothesis()
        at = text.find(hyp.text, cursor) if hyp.text else -1
        at = cursor if at < 0 else at
        out.append(sentence_alignment(seg.source, seg.start, hyp.text, at, hyp))
        cursor = at + len(hyp.text)
    return text, out


def aligned_placement(alignments: list[SentenceAlignment]):
    """A ``Placement`` for html_text.HtmlText.render from a unit's sentence alignments."""

    def place(unit: Unit, translation: str) -> list[tuple[int, int]]:
        fallback = proportional(unit, translation)
        if not any(a.links is not None for a in alignments):
            return fallback
        spans = [_span(m, alignments, fallback[i], translation) for i, m in enumerate(unit.marks)]
        return nested_spans(unit.marks, spans)

    return place


def _span(mark: Mark, alignments: list[SentenceAlignment], fallback: tuple[int, int],
          translation: str) -> tuple[int, int]:
    """Where ``mark`` goes in the translation (before nesting is enforced)."""
    if not mark.close or mark.start == mark.end:
        at = _point(mark.start, alignments, fallback[0])
        return at, at
    targets: list[tuple[int, int]] = []
    for a in alignments:
        if a.links is None:
            continue
        covered = [s for s, (b, e) in enumerate(a.source_words) if b < mark.end and e > mark.start]
        if not covered:
            continue
        hits = [a.target_words[t] for t, s in enumerate(a.links) if s in covered]
        if not hits and a.weights is not None and len(a.target_words):
            best = int(a.weights[:, covered].sum(axis=1).argmax())
            hits = [a.target_words[best]]
        targets += hits
    if not targets:
        return fallback
    return min(b for b, _ in targets), max(e for _, e in targets)


def _point(position: int, alignments: list[SentenceAlignment], fallback: int) -> int:
    """A void element (or one never closed) at ``position`` in the source: right after the
    translation of the source word before it; before the first word's, when none is before it."""
    words = [(span, a, s) for a in alignments if a.links is not None for s, span in enumerate(a.source_words)]
    before = [(a, s) for (_, end), a, s in words if end <= position]
    if before:
        a, s = before[-1]
        hits = [a.target_words[t][1] for t, linked in enumerate(a.links or []) if linked == s]
        return max(hits) if hits else fallback
    if words:
        _, a, s = words[0]
        hits = [a.target_words[t][0] for t, linked in enumerate(a.links or []) if linked == s]
        return min(hits) if hits else fallback
    return fallback
