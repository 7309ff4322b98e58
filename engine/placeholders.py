"""Spans a translation must copy verbatim, protected by placeholders around decoding.

URLs, e-mail addresses, file paths, code in backticks, format placeholders (``$(ARG1)``,
``%1``, ``{0}``) and numbers are replaced by placeholder symbols (``<ph1>``, ``<ph2>`` ...,
numbered in source order) before tokenization; the model copies a placeholder as one token,
and ``restore`` puts the original text back. The symbols are user-defined pieces of the
tokenizer, so they are never split; a tokenizer without them (older packages) is served
without protection (``Protector.enabled`` is False).

Training applies the same rule to its pairs (``protect_pair``): a span found in the source
that also occurs in the target is replaced on both sides, so the model learns that every
placeholder in its input appears once in its output. At serving time every span is replaced;
a placeholder the model dropped is appended at the end of the output, so nothing the user
sent is lost. Only numpy-free standard library here: the engine, the server and training
share it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

MAX_PLACEHOLDERS = 12
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
    spans = []
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


def _replace(text: str, spans: Sequence[Span], symbols: Sequence[str]) -> str:
    out, pos = [], 0
    for span, symbol in zip(spans, symbols):
        out += [text[pos:span.start], symbol]
        pos = span.end
    out.append(text[pos:])
    return "".join(out)


@dataclass(frozen=True)
class Protected:
    text: str  # what the model sees
    originals: tuple[str, ...]  # originals[i] is what SYMBOLS[i] stands for


def protect(text: str) -> Protected:
    spans = find_spans(text)
    return Protected(_replace(text, spans, SYMBOLS), tuple(s.text for s in spans))


_SYMBOL = re.compile(r"<ph(\d+)>")


def restore(output: str, originals: Sequence[str]) -> str:
    """``output`` with each placeholder put back; the ones the model left out are appended."""
    if not originals:
        return output
    seen: set[int] = set()

    def put_back(m: re.Match[str]) -> str:
        i = int(m.group(1)) - 1
        if 0 <= i < len(originals):
            seen.add(i)
            return originals[i]
        return ""  # a placeholder the source did not have: the model made it up

    text = _SYMBOL.sub(put_back, output)
    missing = [originals[i] for i in range(len(originals)) if i not in seen]
    return " ".join([text.rstrip(), *missing]) if missing else text


def _find_whole(text: str, span: str) -> int:
    """Where ``span`` occurs in ``text`` as a whole (not inside a longer number or word), or -1."""
    before = r"(?<![\w.,])" if span[0].isalnum() else ""
    after = r"(?![\w])" if span[-1].isalnum() else ""
    m = re.search(before + re.escape(span) + after, text)
    return m.start() if m else -1


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
    return _replace(src, kept, SYMBOLS), tgt


class Protector:
    """Protection for one tokenizer: on only when its vocabulary has every symbol."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    @classmethod
    def for_pieces(cls, piece_to_id, unk_id: int) -> Protector:  # type: ignore[no-untyped-def]
        return cls(all(piece_to_id(s) != unk_id for s in SYMBOLS))

    def protect(self, text: str) -> Protected:
        return protect(text) if self.enabled else Protected(text, ())
