"""The text of an HTML fragment, to translate it and put the translations back (LibreTranslate's
``format: "html"``), the way browser translators do it: each block of running text is
translated whole, as the sentences it holds, and its inline markup (``<b>``, ``<a href>``,
``<em>``...) is put back around the words of the translation that the model's attention
aligns with the words it surrounded (gateway/alignment.py).

The standard library's ``html.parser`` finds the constructs; every character of the input
belongs to exactly one of them (a tag, a comment, a declaration, text), so everything but
translated text comes back byte for byte: tags with their attributes, comments, the content
of ``<script>`` and ``<style>``, and whitespace between blocks. A *unit* is the text between
two constructs that are not inline tags (block tags, ``<br>``, comments, script and style):
its text with the inline tags taken out is what is translated, when it has a letter in it,
and each inline element is a ``Mark`` over a span of that text. In the translation, ``&``,
``<`` and ``>`` are escaped, and a character the source wrote as a reference (``&nbsp;``,
``&#8212;``) is written with the same reference again, in one pass (a reference is never
substituted inside an escape just written).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser

# Elements whose content is code, not text: never translated.
SKIPPED = frozenset({"script", "style"})
# Elements that sit inside running text: a sentence goes on across them.
INLINE = frozenset({"a", "abbr", "b", "bdi", "bdo", "cite", "code", "data", "del", "dfn", "em", "font", "i", "ins",
                    "kbd", "mark", "q", "s", "samp", "small", "span", "strong", "sub", "sup", "time", "tt", "u",
                    "var", "img", "wbr"})
VOID = frozenset({"img", "wbr"})  # inline elements without an end tag
_REFERENCE = re.compile(r"&(?:#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);?")
_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_SPACE = " \t\n\r\f"


@dataclass(frozen=True)
class Mark:
    """An inline element of a unit: its tags as written, over ``text[start:end]`` of the unit's
    text (``start == end`` and no ``close`` for a void element, or a start tag never closed)."""

    start: int
    end: int
    open: str
    close: str = ""
    parent: int = -1  # index of the mark it sits in, in the unit's list (-1: none)


@dataclass
class Unit:
    """Running text between two block-level constructs."""

    text: str  # what is translated: the unit's characters, references decoded, inline tags out
    marks: list[Mark] = field(default_factory=list)
    references: dict[str, str] = field(default_factory=dict)  # character -> the reference that wrote it
    raw: str = ""  # the input's characters, as written (given back when nothing is translated)


Placement = Callable[[Unit, str], list[tuple[int, int]]]
"""(unit, its translation) -> each mark's span in the translation, nested as the marks are."""


class HtmlText:
    """``HtmlText(source).texts``: the texts to translate, in order; ``render(translations,
    places)``: the source with each unit's text replaced by its translation, its inline marks
    where the unit's placement puts them."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.items: list[str | Unit] = _Scanner(source).items()
        self.units = [u for u in self.items if isinstance(u, Unit) and _translatable(u.text)]
        self.texts = [u.text.strip(_SPACE) for u in self.units]

    def render(self, translations: Sequence[str], places: Sequence[Placement] | None = None) -> str:
        """``translations[k]`` and ``places[k]`` (default: ``proportional``) are those of ``texts[k]``."""
        if len(translations) != len(self.texts) or (places is not None and len(places) != len(self.texts)):
            raise ValueError(f"{len(translations)} translations for {len(self.texts)} texts")
        done = {id(u): k for k, u in enumerate(self.units)}
        out = []
        for item in self.items:
            if isinstance(item, str):
                out.append(item)
            elif id(item) not in done:
                out.append(item.raw)
            else:
                k = done[id(item)]
                out.append(_render_unit(item, translations[k], places[k] if places else proportional))
        return "".join(out)


def _translatable(text: str) -> bool:
    return any(c.isalpha() for c in text)


def _render_unit(unit: Unit, translation: str, place: Placement) -> str:
    """The unit's whitespace as written around its translation, with its marks placed."""
    core = unit.text.strip(_SPACE)
    lead = unit.text[:len(unit.text) - len(unit.text.lstrip(_SPACE))]
    trail = unit.text[len(unit.text.rstrip(_SPACE)):]
    # Marks in the core's coordinates (a mark in the surrounding whitespace moves to its edge).
    shift, size = len(lead), len(core)
    marks = [Mark(min(max(m.start - shift, 0), size), min(max(m.end - shift, 0), size), m.open, m.close, m.parent)
             for m in unit.marks]
    spans = place(Unit(core, marks, unit.references), translation) if marks else []
    return _escape(lead, unit.references) + _nest(translation, marks, spans, unit.references) + \
        _escape(trail, unit.references)


def _nest(text: str, marks: list[Mark], spans: list[tuple[int, int]], references: dict[str, str],
          parent: int = -1, a: int = 0, b: int | None = None) -> str:
    """``text[a:b]`` with the tags of ``parent``'s child marks around their spans, recursively;
    ``spans`` must nest as the marks do (``nested_spans`` makes them so)."""
    b = len(text) if b is None else b
    out, at = [], a
    for i, m in enumerate(marks):
        if m.parent != parent:
            continue
        start, end = spans[i]
        out += [_escape(text[at:start], references), m.open]
        if m.close:
            out += [_nest(text, marks, spans, references, i, start, end), m.close]
        at = end
    out.append(_escape(text[at:b], references))
    return "".join(out)


def nested_spans(marks: Sequence[Mark], spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` (one per mark, in the translation) clamped so that they nest as the marks do
    in the source: each inside its parent's, each after its previous sibling's. A mark whose
    span is squeezed to nothing stays, empty, where it would have begun: markup is never lost."""
    out: list[tuple[int, int]] = []
    last_end: dict[int, int] = {}  # parent index (-1: the unit) -> where its last placed child ends
    for m, (a, b) in zip(marks, spans):
        low, high = out[m.parent] if m.parent >= 0 else (0, 1 << 60)
        low = max(low, last_end.get(m.parent, low))
        a = min(max(a, low), high)
        b = min(max(b, a), high) if m.close else a
        out.append((a, b))
        last_end[m.parent] = b
    return out


def proportional(unit: Unit, translation: str) -> list[tuple[int, int]]:
    """Each mark at the same fraction of the translation as of the source, at word edges: the
    placement when no alignment is known."""
    if translation == unit.text:  # given back unchanged: every mark where it was
        return nested_spans(unit.marks, [(m.start, m.end) for m in unit.marks])
    size = max(len(unit.text), 1)

    def at(position: int, end: bool) -> int:
        x = round(position / size * len(translation))
        return _word_edge(translation, x, end)

    return nested_spans(unit.marks, [(at(m.start, False), at(m.end, True) if m.close else at(m.start, False))
                                     for m in unit.marks])


def _word_edge(text: str, x: int, end: bool) -> int:
    """The nearest word boundary to ``x``: a start of a word, or (``end``) an end of one."""
    x = min(max(x, 0), len(text))
    if end:
        while 0 < x < len(text) and not text[x].isspace() and not text[x - 1].isspace():
            x += 1
        while x > 0 and text[x - 1].isspace():
            x -= 1
    else:
        while 0 < x < len(text) and not text[x - 1].isspace():
            x -= 1
        while x < len(text) and text[x].isspace():
            x += 1
    return x


def _references(raw: str) -> dict[str, str]:
    """Character -> the reference that wrote it in ``raw`` (but &, < and >: escaped anyway)."""
    out = {}
    for m in _REFERENCE.finditer(raw):
        char = html.unescape(m.group())
        if len(char) == 1 and char != m.group() and char not in _ESCAPES:
            out[char] = m.group()
    return out


def _escape(text: str, references: dict[str, str]) -> str:
    """One pass: each character once, as an escape, as the reference the source used, or as itself."""
    return "".join(_ESCAPES.get(c) or references.get(c) or c for c in text)


class _Scanner(HTMLParser):
    """Cuts the source into raw constructs and units of running text."""

    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=False)  # references arrive as their own events, at their own offsets
        self.source = source
        self.line_starts = [0, *(i + 1 for i, c in enumerate(source) if c == "\n")]
        self.events: list[tuple[int, str, str]] = []  # (offset, kind, tag): kind text, inline, end, raw
        self.inside: str | None = None  # the skipped element we are in

    def items(self) -> list[str | Unit]:
        self.feed(self.source)
        self.close()
        bounds = [offset for offset, _, _ in self.events] + [len(self.source)]
        out: list[str | Unit] = []
        unit: _Building | None = None
        for (start, kind, tag), end in zip(self.events, bounds[1:]):
            piece = self.source[start:end]
            if kind == "raw":
                if unit:
                    out += unit.finish()
                    unit = None
                out.append(piece)
                continue
            unit = unit or _Building()
            unit.add(kind, tag, piece)
        if unit:
            out += unit.finish()
        return out

    def _at(self, kind: str, tag: str = "") -> None:
        # getpos() is the start of the construct being handled: html.parser updates it after the handler.
        line, column = self.getpos()
        self.events.append((self.line_starts[line - 1] + column, kind, tag))

    def handle_starttag(self, tag, attrs):
        self._at("inline" if tag in INLINE and self.inside is None else "raw", tag)
        if tag in SKIPPED and self.inside is None:
            self.inside = tag

    def handle_startendtag(self, tag, attrs):
        self._at("void" if tag in INLINE and self.inside is None else "raw", tag)

    def handle_endtag(self, tag):
        self._at("end" if tag in INLINE and self.inside is None else "raw", tag)
        if tag == self.inside:
            self.inside = None

    def handle_data(self, data):
        self._at("text" if self.inside is None else "raw")

    def handle_entityref(self, name):
        self._at("text" if self.inside is None else "raw")

    def handle_charref(self, name):
        self._at("text" if self.inside is None else "raw")

    def handle_comment(self, data):
        self._at("raw")

    def handle_decl(self, decl):
        self._at("raw")

    def handle_pi(self, data):
        self._at("raw")

    def unknown_decl(self, data):
        self._at("raw")


class _Building:
    """A unit as the scanner reads it: text, and inline tags open or closed."""

    def __init__(self) -> None:
        self.raw: list[str] = []
        self.text: list[str] = []
        self.size = 0
        self.open: list[tuple[str, str, int, int]] = []  # (tag, as written, start, index in marks)
        self.marks: list[Mark | None] = []  # in the order their start tags came (so by start)
        self.parents: list[int] = []

    def add(self, kind: str, tag: str, piece: str) -> None:
        self.raw.append(piece)
        parent = self.open[-1][3] if self.open else -1
        if kind == "text":
            text = html.unescape(piece)
            self.text.append(text)
            self.size += len(text)
        elif kind == "inline" and tag not in VOID:
            self.open.append((tag, piece, self.size, len(self.marks)))
            self.marks.append(None)
            self.parents.append(parent)
        elif kind == "end" and any(t == tag for t, _, _, _ in self.open):
            while self.open:  # closes the innermost element of that name (those left open inside: see finish)
                t, written, start, index = self.open.pop()
                if t == tag:
                    self.marks[index] = Mark(start, self.size, written, piece, self.parents[index])
                    break
                self._unclosed(index, written, start)
        else:  # a void element, or an end tag with no start tag: kept where it stands
            self.marks.append(Mark(self.size, self.size, piece, "", parent))
            self.parents.append(parent)

    def _unclosed(self, index: int, written: str, start: int) -> None:
        """A start tag never closed: kept where it stood, its children moved to its parent."""
        parent = self.parents[index]
        self.marks[index] = Mark(start, start, written, "", parent)
        for i, p in enumerate(self.parents):
            if p == index:
                self.parents[i] = parent
                if (m := self.marks[i]) is not None:
                    self.marks[i] = Mark(m.start, m.end, m.open, m.close, parent)

    def finish(self) -> list[str | Unit]:
        while self.open:
            _, written, start, index = self.open.pop()
            self._unclosed(index, written, start)
        marks = [m for m in self.marks if m is not None]
        assert len(marks) == len(self.marks)
        return [Unit("".join(self.text), marks, _references("".join(self.raw)), "".join(self.raw))]
