"""Spans a translation must copy verbatim, protected by placeholders around decoding.

URLs, e-mail addresses, file paths, file names (``report.pdf``), code in backticks, format
placeholders (``$(ARG1)``, ``%1``, ``{0}``) and numbers are replaced by placeholder symbols
(``<ph1>``, ``<ph2>`` ..., numbered in source order) before tokenization; the model copies a placeholder as one token,
and ``restore`` puts the original text back. The symbols are user-defined pieces of the
tokenizer, so they are never split; a tokenizer without them (older packages) is served
without protection (``Protector.enabled`` is False).

Training applies the same rule to its pairs (``protect_pair``): a span found in the source
that also occurs in the target is replaced on both sides, so the model learns that every
placeholder in its input appears once in its output. At serving time a sentence's spans are
all replaced when it has at most ``MAX_PROTECTED`` of them (what the shipped model copies
reliably: with 9 numbers it wrote one placeholder twice and left another out), and none
when it has more. Nothing here trusts the model: the server checks that every placeholder
came back exactly once (``restore_checked``) and that a translation holds no number its source
lacks and, where the model has the placeholders, every span of its source (``faithful``), and
otherwise translates the sentence again with its spans as text, or gives it back as it was
(server/service.py, docs/UNICODE.md).
Only the standard library here: the engine, the server and training share it.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

MAX_PLACEHOLDERS = 12  # the symbols a vocabulary with placeholders has: <ph1> .. <ph12>
# The most spans one sentence gets placeholders for when it is served (protect); a sentence with
# more is translated with all of its spans as text, and checked (faithful). Training pairs keep
# up to MAX_PLACEHOLDERS (protect_pair), but few have more than a handful.
MAX_PROTECTED = 8
SYMBOLS: tuple[str, ...] = tuple(f"<ph{i}>" for i in range(1, MAX_PLACEHOLDERS + 1))

# One alternation, tried left to right at each position: the longer kinds first.
_TRAILING = ".,;:!?)]}'\""
PATTERN = re.compile(
    r"(?P<url>(?:https?|ftp)://[^\s<>\"]+|www\.[\w-]+(?:\.[\w-]+)+[^\s<>\"]*)"
    r"|(?P<email>[\w.+-]+@[\w-]+(?:\.[\w-]+)+)"
    r"|(?P<code>`[^`\n]+`)"
    r"|(?P<path>(?<![\w/])(?:~|[A-Za-z]:)?[/\\][\w.-]+(?:[/\\][\w.-]+)+[/\\]?)"
    r"|(?P<format>\$\(\w+\)|%\d+\$?[sd]?|%[sd]\b|\{\w*\})"
    r"|(?P<symbol><ph\d+>)"  # the symbols themselves, when a user's text contains them literally
    # A name with an extension of 2-5 lower-case letters and digits, starting with a letter:
    # report.pdf, setup.tar.gz, Node.js, a bare example.org. Abbreviations (e.g., i.e., a.m., Dr.X)
    # have a one-letter or capital tail; versions (3.5, python3.11) a tail without a letter.
    r"|(?P<file>(?<![\w.@/\\-])[\w-]+(?:\.[\w-]+)*\.[a-z][a-z0-9]{1,4}(?![\w-]))"
    r"|(?P<number>(?<![\w.,])\d+(?:[.,:]\d+)*(?![\w]))"
)


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    text: str
    kind: str


def find_spans(text: str, limit: int = MAX_PLACEHOLDERS) -> list[Span]:
    """The protected spans of ``text``, left to right, at most ``limit``."""
    spans: list[Span] = []
    if limit <= 0:
        return spans
    for m in PATTERN.finditer(text):
        kind = m.lastgroup or ""
        start, end = m.span()
        if kind in ("url", "path"):  # a sentence's own punctuation is not part of a link
            while end > start + 1 and text[end - 1] in _TRAILING:
                end -= 1
        spans.append(Span(start, end, text[start:end], kind))
        if len(spans) == limit:
            break
    return spans


def _replace(text: str, spans: Sequence[Span], symbols: Sequence[str]) -> tuple[str, tuple[int, ...]]:
    """``text`` with each span replaced by its symbol, and where each symbol starts in it."""
    out, at, pos, length = [], [], 0, 0
    for span, symbol in zip(spans, symbols):
        out += [text[pos:span.start], symbol]
        length += span.start - pos
        at.append(length)
        length += len(symbol)
        pos = span.end
    out.append(text[pos:])
    return "".join(out), tuple(at)


@dataclass(frozen=True)
class Protected:
    text: str  # what the model sees
    originals: tuple[str, ...]  # originals[i] is what SYMBOLS[i] stands for
    # Where each placeholder starts in ``text`` (SYMBOLS[i] at at[i]): the only places where the
    # tokenizer reads a symbol; anywhere else, symbol-like text is text (engine/tokenizer.py).
    at: tuple[int, ...] = ()

    @property
    def symbols(self) -> tuple[tuple[int, int], ...]:
        """The placeholders' [start, end) in ``text``."""
        return tuple((a, a + len(SYMBOLS[i])) for i, a in enumerate(self.at))


def protect(text: str, limit: int = MAX_PROTECTED) -> Protected:
    """``text`` with every span replaced by its placeholder when it has at most ``limit`` spans;
    with more, nothing is replaced (the spans stay text, and the translation is checked)."""
    if not 0 <= limit <= MAX_PLACEHOLDERS:
        raise ValueError(f"limit {limit}: there are {MAX_PLACEHOLDERS} placeholder symbols")
    spans = find_spans(text, limit=limit + 1)
    if not spans or len(spans) > limit:
        return Protected(text, ())
    replaced, at = _replace(text, spans, SYMBOLS)
    return Protected(replaced, tuple(s.text for s in spans), at)


def protect_terms(text: str, terms: Sequence[Span], limit: int = MAX_PROTECTED) -> Protected:
    """``text`` with each of ``terms`` (glossary and do-not-translate matches, apart from one
    another and from the spans of ``find_spans`` but those they hold; ``Span.text``: what the
    placeholder stands for) replaced by a placeholder, and the spans of ``find_spans`` too when
    all fit in ``limit``; else the terms alone (the spans stay text, and are checked). More terms
    than ``limit``: nothing replaced (the caller places them another way)."""
    if not terms or len(terms) > limit:
        return Protected(text, ())
    spans = [s for s in find_spans(text, limit=len(text)) if not any(t.start <= s.start and s.end <= t.end
                                                                      for t in terms)]
    chosen = sorted([*terms, *(spans if len(terms) + len(spans) <= limit else ())], key=lambda s: s.start)
    replaced, at = _replace(text, chosen, SYMBOLS)
    return Protected(replaced, tuple(s.text for s in chosen), at)


_SYMBOL = re.compile(r"<ph(\d+)>")
_AFTER_GAP = " .,;:!?)]}'\"»”’…"  # what may follow a removed symbol for the space before it to go too


def remove(text: str, pattern: re.Pattern[str], keep: Callable[[re.Match[str]], str | None]) -> str:
    """``text`` with each match of ``pattern`` replaced by ``keep(match)``, or removed where that is
    None, with the space that would be left doubled or before punctuation ("ist <ph1>." -> "ist.")."""
    out: list[str] = []
    pos = 0
    for m in pattern.finditer(text):
        s, e = m.span()
        put = keep(m)
        if put is None:
            if s > pos and text[s - 1] == " " and (e == len(text) or text[e] in _AFTER_GAP):
                s -= 1  # "ist <ph1>." -> "ist."
            elif (s == 0 or text[s - 1] == "\n") and text[e:e + 1] == " ":
                e += 1  # "<ph1> speichern" -> "speichern"
            put = ""
        out += [text[pos:s], put]
        pos = e
    out.append(text[pos:])
    return "".join(out)


def restore(output: str, originals: Sequence[str]) -> str:
    """``output`` with each placeholder put back; a placeholder the source did not have (made up
    by the model) is removed; the ones the model left out are appended. (Offline tools; the server
    uses ``restore_checked``, which refuses such an output instead.)"""
    seen: set[int] = set()

    def put_back(m: re.Match[str]) -> str | None:
        i = int(m.group(1)) - 1
        if 0 <= i < len(originals):
            seen.add(i)
            return originals[i]
        return None

    text = remove(output, _SYMBOL, put_back)
    missing = [originals[i] for i in range(len(originals)) if i not in seen]
    return " ".join([text.rstrip(), *missing]) if missing else text


def restore_checked(output: str, originals: Sequence[str]) -> str | None:
    """``output`` with each placeholder put back when every one of ``originals`` is in it exactly
    once, else None (the sentence must be translated another way). A placeholder the source did
    not have is removed (the model made it up)."""
    counts = Counter(int(m.group(1)) - 1 for m in _SYMBOL.finditer(output))
    if any(counts[i] != 1 for i in range(len(originals))):
        return None
    return remove(output, _SYMBOL, lambda m: originals[i] if 0 <= (i := int(m.group(1)) - 1) < len(originals)
                  else None)


def _whole(span: str) -> re.Pattern[str]:
    """``span`` where it occurs as a whole: not inside a longer number or word."""
    before = r"(?<![\w.,])" if span[0].isalnum() else ""
    after = r"(?![\w])" if span[-1].isalnum() else ""
    return re.compile(before + re.escape(span) + after)


def _find_whole(text: str, span: str) -> int:
    """Where ``span`` occurs in ``text`` as a whole (not inside a longer number or word), or -1."""
    m = _whole(span).search(text)
    return m.start() if m else -1


_DIGITS = re.compile(r"\d+")


def numbers(text: str) -> Counter[str]:
    """The runs of digits in ``text`` (any script's digits, read as 0-9), counted."""
    return Counter("".join(str(unicodedata.digit(c)) for c in run) for run in _DIGITS.findall(text))


def faithful(output: str, source: str, spans: bool = True) -> bool:
    """Does ``output`` hold no number the source lacks and (with ``spans``) every span of
    ``source``, each as a whole, as often as the source has it? "013" for 8013 and a value
    written twice where the source has it once fail; with ``spans``, so do a URL the model
    rewrote and a number it left out."""
    if numbers(output) - numbers(source):
        return False
    wanted = Counter(s.text for s in find_spans(source, limit=len(source))) if spans else Counter()
    return all(len(_whole(span).findall(output)) >= n for span, n in wanted.items())


def protect_pair(src: str, tgt: str) -> tuple[str, str]:
    """A training pair with the spans of ``src`` that ``tgt`` copies replaced on both sides,
    numbered in source order (each span once on each side); the other spans stay text."""
    kept: list[Span] = []
    for span in find_spans(src):
        pos = _find_whole(tgt, span.text)
        if pos < 0:
            continue
        tgt = tgt[:pos] + SYMBOLS[len(kept)] + tgt[pos + len(span.text):]
        kept.append(span)
    return _replace(src, kept, SYMBOLS)[0], tgt


class Protector:
    """Protection for one tokenizer: on only when its vocabulary has every symbol."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    @classmethod
    def for_pieces(cls, piece_to_id, unk_id: int) -> Protector:  # type: ignore[no-untyped-def]
        return cls(all(piece_to_id(s) != unk_id for s in SYMBOLS))

    def protect(self, text: str) -> Protected:
        return protect(text) if self.enabled else Protected(text, ())
