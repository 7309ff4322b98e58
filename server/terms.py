"""A sentence's glossary and do-not-translate terms (server/glossary.py) into each of its
hypotheses, exactly as asked for: a kept span as the sentence has it, a glossary term as its
target.

Two ways, in this order (docs/translate.md, "Glossaries and do-not-translate"):

1. **Placeholders**, for models whose tokenizer has ``<ph1>`` .. ``<ph12>`` (engine/placeholders.py):
   each term becomes a placeholder, which the model copies as one token, and every hypothesis
   gets the term's replacement in its place; the server's checks apply (each placeholder back
   exactly once). When the sentence's terms and other spans (URLs, numbers ...) are more than
   MAX_PROTECTED, the terms alone get placeholders and the spans stay text; a sentence with more
   terms than MAX_PROTECTED gets none and goes the second way.
2. **Alignment**, for models without the symbols (imported ones), for a sentence whose
   placeholders did not come back (the server's fallback decode), and past MAX_PROTECTED terms:
   the sentence is translated with its terms as text and the cross-attention on. In each
   hypothesis a term whose replacement is already there (as a whole word, as often as needed)
   is left as it is; every other term replaces the target words aligned to it: each target word
   is aligned to the source word, or term, it attends to most (a term none is aligned to takes
   the word that attends to it most), and the last words aligned to the term, as many as it has
   (an article aligned to its noun stays), are replaced, signs at their edges kept. The rest of
   the hypothesis stays as the model wrote it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from engine.decoding import Hypothesis
from engine.placeholders import Protected, Span, find_spans, protect_terms
from engine.tokenizer import SPIECE_UNDERLINE, PackageTokenizer
from server.glossary import GLOSSARY, Term


def usable(text: str, terms: Sequence[Term]) -> list[Term]:
    """``terms`` but those that cut into a span the server copies anyway (a URL, a path, a
    number ...) without holding it whole: "acme" inside https://acme.example/ stays part of it."""
    spans = find_spans(text, limit=len(text))
    return [t for t in terms if not any(s.start < t.end and t.start < s.end and not (t.start <= s.start and
                                                                                     s.end <= t.end) for s in spans)]


def protect(text: str, terms: Sequence[Term], enabled: bool) -> Protected:
    """``text`` as the model reads it first: the terms as placeholders (with ``enabled``, the
    model's tokenizer having them), each standing for its replacement."""
    if not enabled:
        return Protected(text, ())
    return protect_terms(text, [Span(t.start, t.end, t.replacement, t.kind) for t in terms])


def expected(text: str, terms: Sequence[Term]) -> str:
    """``text`` with each glossary term's target in its place: what a hypothesis is checked
    against (its numbers and spans), since those targets are in it."""
    out, pos = [], 0
    for t in terms:
        if t.kind == GLOSSARY:
            out += [text[pos:t.start], t.replacement]
            pos = t.end
    return "".join(out) + text[pos:]


@dataclass(frozen=True)
class Aligned:
    """A sentence's terms for a job that reads them as text: ``units[j]`` is what the job's
    source position ``offset + j`` belongs to: a term (0 .. len(terms) - 1) or a word after them."""

    terms: tuple[Term, ...]
    offset: int  # where the sentence's pieces start in the job's source (after tags and codes)
    units: tuple[int, ...]
    words: tuple[int, ...]  # each term's words in the source


    @property
    def replacements(self) -> tuple[str, ...]:
        return tuple(t.replacement for t in self.terms)


def aligned(tok: PackageTokenizer, text: str, terms: Sequence[Term], src: Sequence[int]) -> Aligned | None:
    """The placement plan of ``terms`` for the job whose source ``src`` reads ``text`` as text;
    None where the tokenizer cannot say where its pieces come from."""
    spans = tok.piece_spans(text)
    if spans is None:
        return None
    pieces = [tok.id_to_piece(i) for i in tok.encode(text)]
    offset = len(src) - 1 - len(pieces)  # src: tags and codes, the pieces, eos
    if offset < 0 or list(src[offset:offset + len(pieces)]) != tok.encode(text):
        return None
    units, word, last = [], len(terms) - 1, -1
    for (start, end), piece in zip(spans, pieces):
        k = next((k for k, t in enumerate(terms) if start < t.end and t.start < end), -1)
        if k < 0:
            if piece.startswith(SPIECE_UNDERLINE) or last < len(terms):
                word += 1
            k = word
        units.append(k)
        last = k
    if any(k not in units for k in range(len(terms))):
        return None
    words = tuple(max(1, len(text[t.start:t.end].split())) for t in terms)
    return Aligned(tuple(terms), offset, tuple(units), words)


def _count(text: str, term: str) -> int:
    """How often ``term`` stands in ``text`` as a whole (not inside a longer word or number)."""
    before = r"(?<!\w)" if term[:1].isalnum() else ""
    after = r"(?!\w)" if term[-1:].isalnum() else ""
    return len(re.findall(before + re.escape(term) + after, text))


def place(tok: PackageTokenizer, plan: Aligned, hyp: Hypothesis, not_text: Collection[int]) -> str | None:
    """``hyp``'s text with every term of ``plan`` in it (see the module's doc); None when it
    cannot be done (no attention; more terms to place than the hypothesis has words). Each target
    word goes to one term: the surest term first, the next to the words left."""
    text = tok.decode(hyp.tokens)
    reps = plan.replacements
    todo = [k for k, rep in enumerate(reps) if _count(text, rep) < reps.count(rep)]
    if not todo:
        return text
    if hyp.attention is None:
        return None
    keep = [i for i, t in enumerate(hyp.tokens) if t not in not_text]  # what decode writes
    ids = [hyp.tokens[i] for i in keep]
    pieces = [tok.id_to_piece(t) for t in ids]
    words: list[list[int]] = []  # each target word's positions in ids
    for j, piece in enumerate(pieces):
        if piece.startswith(SPIECE_UNDERLINE) or not words:
            words.append([])
        words[-1].append(j)
    if not words:
        return None
    attention = np.asarray(hyp.attention, dtype=np.float32)[keep][:, plan.offset:plan.offset + len(plan.units)]
    units = np.zeros((len(ids), max(plan.units) + 1), dtype=np.float32)
    np.add.at(units.T, np.asarray(plan.units), attention.T)  # (target piece, unit): attention summed
    weights = np.stack([units[w].mean(axis=0) for w in words])  # (target word, unit)
    links = weights.argmax(axis=1)
    cuts: list[tuple[int, int, str, bool]] = []  # pieces [a, b), the term, a space before it
    claimed: set[int] = set()  # target words a term has taken: each word goes to one term
    for k in sorted(todo, key=lambda k: -float(weights[:, k].max())):  # the surest first
        free = [w for w in range(len(words)) if w not in claimed]
        if not free:
            return None  # more terms than words
        hits = [w for w in free if links[w] == k] or [max(free, key=lambda w: float(weights[w, k]))]
        # At most as many words as the term has, the last of those aligned to it: an article or
        # a preposition aligned to its noun stays (they come first in the languages served here).
        last = first = max(hits)
        while first - 1 >= min(hits) and last - first + 1 < plan.words[k] and first - 1 not in claimed:
            first -= 1
        claimed.update(range(first, last + 1))
        a, b = words[first][0], words[last][-1] + 1
        space = pieces[a].startswith(SPIECE_UNDERLINE)  # the word starts after a space
        while a < b and not any(c.isalnum() for c in pieces[a]):
            space = space and pieces[a] == SPIECE_UNDERLINE  # an opening sign stays, and the term follows it
            a += 1
        while b > a and not any(c.isalnum() for c in pieces[b - 1]):
            b -= 1  # so do a closing one and the sentence's punctuation
        cuts.append((a, b, reps[k], space))
    cuts.sort()
    parts: list[tuple[str, bool]] = []  # (text, a space before it)
    at = 0
    for a, b, rep, space in cuts:
        if a > at:
            parts.append((tok.decode(ids[at:a]).rstrip(), pieces[at].startswith(SPIECE_UNDERLINE)))
        parts.append((rep, space))
        at = b
    if at < len(ids):
        parts.append((tok.decode(ids[at:]), pieces[at].startswith(SPIECE_UNDERLINE)))
    out = ""
    for part, space in parts:
        if part:
            out += (" " if space and out else "") + part
    return out
