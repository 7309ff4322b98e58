"""The text of an HTML fragment, to translate it and put the translations back (LibreTranslate's
``format: "html"``), the way browser translators do it: each block of running text is
translated whole, as the sentences it holds, and its inline markup (``<b>``, ``<a href>``,
``<em>``...) is put back around the words of the translation that the model's attention
aligns with the words it surrounded (documents/alignment.py).

A scanner that follows the HTML standard's tokenizer finds the constructs, in time linear in
the input; every character of the input belongs to exactly one of them (a tag, a comment, a
declaration, text), so everything but
translated text comes back byte for byte: tags with their attributes, comments, the content
of ``<script>`` and ``<style>``, and whitespace between blocks. A *unit* is the text between
two constructs that are not inline tags (block tags, ``<br>``, comments, script and style):
its text with the inline tags taken out is what is translated, when it has a letter in it,
and each inline element is a ``Mark`` over a span of that text. An element marked not to be
translated (``translate="no"``, or ``class="notranslate"`` as Google's and Microsoft's
translators read it) comes back as it was, in place: a block one is copied whole; an inline one
stays part of its sentence's text, its text is a span the server must keep (``HtmlText.kept``,
sent as the request's ``keep``), and the element is written as it was over that span of the
translation (the span not found: at the place the attention gives it). In the translation, ``&``,
``<`` and ``>`` are escaped, and a character the source wrote as a reference (``&nbsp;``,
``&#8212;``) is written with the same reference again, in one pass (a reference is never
substituted inside an escape just written).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# Elements whose content is code, not text: never translated.
SKIPPED = frozenset({"script", "style"})
PREFORMATTED = frozenset({"pre", "textarea", "listing"})  # elements whose line breaks are content
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
    # An element not to translate (translate="no"): ``open`` is the whole element as written, and
    # it replaces the translation's copy of its text (``text[start:end]``, kept by the server).
    kept: bool = False


@dataclass
class Unit:
    """Running text between two block-level constructs."""

    text: str  # what is translated: the unit's characters, references decoded, inline tags out
    marks: list[Mark] = field(default_factory=list)
    references: dict[str, str] = field(default_factory=dict)  # character -> the reference that wrote it
    raw: str = ""  # the input's characters, as written (given back when nothing is translated)
    # Inside <pre>, <textarea> or <listing>: its line breaks are content, not layout.
    preformatted: bool = False


Placement = Callable[[Unit, str], list[tuple[int, int]]]
"""(unit, its translation) -> each mark's span in the translation, nested as the marks are."""


class TooManyTags(ValueError):
    """The source holds more tags than the caller allows (scanning stops at the first one over)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} tags")
        self.limit = limit


class HtmlText:
    """``HtmlText(source).texts``: the texts to translate, in order; ``render(translations,
    places)``: the source with each unit's text replaced by its translation, its inline marks
    where the unit's placement puts them. The scan is linear in the source's size, and so is
    the rendering's own work (the placement's aside). ``max_tags``: TooManyTags when the source
    holds more start, end and self-closing tags."""

    def __init__(self, source: str, max_tags: int | None = None) -> None:
        self.source = source
        scanner = _Scanner(source, max_tags)
        self.items: list[str | Unit] = scanner.items()
        self.tags = scanner.tags  # start, end and self-closing tags in the source
        self.units = [u for u in self.items if isinstance(u, Unit) and _translatable(_outside_kept(u))]
        self.texts = [u.text.strip(_SPACE) for u in self.units]
        self.preformatted = [u.preformatted for u in self.units]  # of each text: its line breaks are content
        # The text of every element not to translate inside the units (translate="no" inline): the
        # spans the server must give back as they are (TranslateRequest.keep), each once.
        self.kept = list(dict.fromkeys(t for u in self.units for m in u.marks if m.kept
                                       if _translatable(t := u.text[m.start:m.end].strip(_SPACE))))

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


def _outside_kept(unit: Unit) -> str:
    """The unit's text but that of its elements not to translate."""
    out, at = [], 0
    for m in unit.marks:
        if m.kept and m.start >= at:
            out.append(unit.text[at:m.start])
            at = m.end
    return "".join(out) + unit.text[at:]


def _render_unit(unit: Unit, translation: str, place: Placement) -> str:
    def escape(text: str, start: int, end: int) -> str:
        return _escape(text[start:end], unit.references)

    return render_unit(unit, translation, place, escape)


Escape = Callable[[str, int, int], str]
"""(text, start, end) -> ``text[start:end]`` as the file's format writes it (HTML escapes &, <
and >; Markdown escapes its own syntax): the whole text is given so that a format can leave
spans of it alone."""


def render_unit(unit: Unit, translation: str, place: Placement, escape: Escape) -> str:
    """The unit's whitespace as written around its translation, with its marks placed (each
    mark's ``open`` and ``close`` written as they are, the text between them through ``escape``)."""
    core = unit.text.strip(_SPACE)
    lead = unit.text[:len(unit.text) - len(unit.text.lstrip(_SPACE))]
    trail = unit.text[len(unit.text.rstrip(_SPACE)):]
    # Marks in the core's coordinates (a mark in the surrounding whitespace moves to its edge).
    shift, size = len(lead), len(core)
    marks = [Mark(min(max(m.start - shift, 0), size), min(max(m.end - shift, 0), size), m.open, m.close, m.parent,
                  m.kept) for m in unit.marks]
    spans = place(Unit(core, marks, unit.references), translation) if marks else []
    if any(m.kept for m in marks):
        spans = kept_in_place(core, marks, spans, translation)
    return escape(lead, 0, len(lead)) + _nest(translation, marks, spans, escape) + escape(trail, 0, len(trail))


def _nest(text: str, marks: list[Mark], spans: list[tuple[int, int]], escape: Escape) -> str:
    """``text`` with each mark's tags around its span, children inside their parents; ``spans``
    must nest as the marks do (``nested_spans`` makes them so). Iterative, and each mark and
    character visited once: markup nested thousands deep is neither a RecursionError nor slow."""
    children: list[list[int]] = [[] for _ in range(len(marks) + 1)]  # children[p + 1]: the marks in mark p
    for i, m in enumerate(marks):
        children[m.parent + 1].append(i)
    out: list[str] = []
    # One frame per open mark, outermost first: [mark (-1: the unit), its next child, text written up to, its end].
    stack = [[-1, 0, 0, len(text)]]
    while stack:
        frame = stack[-1]
        parent, k, at, end = frame
        kids = children[parent + 1]
        if k == len(kids):  # every child written: the rest of its text, and its end tag
            out.append(escape(text, at, end))
            stack.pop()
            if parent >= 0:
                out.append(marks[parent].close)
            continue
        i = kids[k]
        start, stop = spans[i]
        out += [escape(text, at, start), marks[i].open]
        frame[1], frame[2] = k + 1, stop
        if marks[i].close:
            stack.append([i, 0, start, stop])
    return "".join(out)


def kept_in_place(text: str, marks: Sequence[Mark], spans: Sequence[tuple[int, int]], translation: str
                  ) -> list[tuple[int, int]]:
    """``spans`` with each kept mark's over its text in the translation (the occurrence nearest
    where the placement put it, after the kept marks before it); where that text is not in the
    translation, or the nesting cannot hold it, an empty span where the placement put it (the
    element is written there, and nothing of the translation is taken out)."""
    out = list(spans)
    after = 0
    for i, m in enumerate(marks):
        if not m.kept:
            continue
        kept = text[m.start:m.end].strip(_SPACE)
        found = [x.start() for x in re.finditer(re.escape(kept), translation)] if kept else []
        found = [x for x in found if x >= after]
        if found:
            at = min(found, key=lambda x: abs(x - spans[i][0]))
            out[i] = (at, at + len(kept))
            after = at + len(kept)
        else:
            out[i] = (spans[i][0], spans[i][0])
    nested = nested_spans(marks, out)
    return [n if not m.kept or n == o else (n[0], n[0]) for m, n, o in zip(marks, nested, out)]


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
        b = min(max(b, a), high) if m.close or m.kept else a
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


class _Scanner:
    """Cuts the source into raw constructs and units of running text.

    The constructs are found as a browser's tokenizer finds them (the HTML standard's
    tokenization, without its error recovery inside text): a tag runs to the ``>`` outside
    its quoted attribute values, a comment to ``-->``, ``<!...>`` and ``<?...>`` to ``>``,
    the content of ``<script>`` and ``<style>`` to their end tag; a ``<`` that starts none
    of them is text. A construct never closed runs to the end of the source (a browser drops
    it; here it is given back as written). Each character is looked at a bounded number of
    times, so the scan is linear in the source, whatever it holds (``html.parser`` is
    quadratic on unclosed comments and tags, and on many attributes without a ``>``)."""

    def __init__(self, source: str, max_tags: int | None = None) -> None:
        self.source = source
        self.max_tags = max_tags
        self.tags = 0
        self.events: list[tuple[int, str, str]] = []  # (offset, kind, tag): kind text, inline, void, end, raw

    def items(self) -> list[str | Unit]:
        self._scan()
        bounds = [offset for offset, _, _ in self.events] + [len(self.source)]
        out: list[str | Unit] = []
        unit: _Building | None = None
        pre = 0  # preformatted elements open around the text here
        for (start, kind, tag), end in zip(self.events, bounds[1:]):
            piece = self.source[start:end]
            if kind == "raw":
                if unit:
                    out += unit.finish(pre > 0)
                    unit = None
                out.append(piece)
                if tag in PREFORMATTED and not piece.endswith("/>"):
                    pre = max(0, pre - 1) if piece.startswith("</") else pre + 1
                continue
            unit = unit or _Building()
            unit.add(kind, tag, piece)
        if unit:
            out += unit.finish(pre > 0)
        return out

    def _scan(self) -> None:
        s, n = self.source, len(self.source)
        i = 0  # where the next construct starts
        text = -1  # where the text running up to i starts (-1: none)
        while i < n:
            lt = s.find("<", i)
            if lt < 0:
                break
            end, kind, tag = self._construct(lt)
            if end < 0:  # a "<" that starts nothing: text
                text = i if text < 0 else text
                i = lt + 1
                continue
            if lt > i and text < 0:
                text = i
            if text >= 0:
                self.events.append((text, "text", ""))
                text = -1
            if kind in ("raw", "inline") and tag and tag not in VOID and not s.startswith("/", lt + 1) \
                    and not s.startswith("/>", end - 2) and untranslated(s[lt:end]):
                # Not to translate: the element whole, a block one as raw text, an inline one kept.
                kind, end = ("kept" if kind == "inline" else "raw"), self._element_end(tag, end)
                tag = tag if kind == "kept" else ""
            self.events.append((lt, kind, tag))
            i = end
            if kind == "raw" and tag in SKIPPED and not s.startswith("/", lt + 1) and not s.startswith("/>", end - 2):
                # The element's content, up to its end tag, is code: one raw piece.
                close = re.compile(rf"</{tag}(?=[\t\n\f\r />]|$)", re.IGNORECASE).search(s, i)
                stop = close.start() if close else n
                if stop > i:
                    self.events.append((i, "raw", ""))
                i = stop
        if i < n and text < 0:
            text = i
        if text >= 0:
            self.events.append((text, "text", ""))

    def _element_end(self, tag: str, i: int) -> int:
        """Just after the end tag that closes the element ``tag`` whose start tag ends at ``i``
        (elements of the same name nest); the end of the source when none does."""
        s, depth = self.source, 1
        while (lt := s.find("<", i)) >= 0:
            end, kind, name = self._construct(lt)
            if end < 0:
                i = lt + 1
                continue
            if name == tag and s.startswith("</", lt):
                depth -= 1
                if depth == 0:
                    return end
            elif name == tag and not s.startswith("/>", end - 2):
                depth += 1
            elif kind == "raw" and name in SKIPPED and not s.startswith("/", lt + 1):
                close = re.compile(rf"</{name}(?=[\t\n\f\r />]|$)", re.IGNORECASE).search(s, end)
                end = close.start() if close else len(s)
            i = end
        return len(s)

    def _construct(self, i: int) -> tuple[int, str, str]:
        """The construct that the "<" at ``i`` starts: (its end, its kind, its tag's name); end
        -1 when it starts none."""
        s, n = self.source, len(self.source)
        if s.startswith("<!--", i):
            if s.startswith(">", i + 4) or s.startswith("->", i + 4):  # <!--> and <!---> are whole comments
                return s.index(">", i + 4) + 1, "raw", ""
            m = _COMMENT_END.search(s, i + 4)
            return (m.end() if m else n), "raw", ""
        if s.startswith(("<!", "<?"), i):  # a declaration, CDATA or a processing instruction: up to ">"
            return _up_to(s, ">", i + 2), "raw", ""
        end_tag = s.startswith("</", i)
        name = _TAG_NAME.match(s, i + 2 if end_tag else i + 1)
        if name is None:
            if not end_tag or i + 2 >= n:
                return -1, "", ""  # "<" or "</" before something that is no name (or nothing): text
            return _up_to(s, ">", i + 2), "raw", ""  # "</>" or "</ ...>": dropped by browsers, kept as it is
        tag = name.group().lower()
        end = _tag_end(s, name.end())
        self.tags += 1
        if self.max_tags is not None and self.tags > self.max_tags:
            raise TooManyTags(self.max_tags)
        if not (tag in INLINE and end > 0):
            return (end if end > 0 else n), "raw", tag
        if end_tag:
            return end, "end", tag
        return end, ("void" if s.startswith("/>", end - 2) else "inline"), tag


_COMMENT_END = re.compile(r"--!?>")
_TAG_NAME = re.compile(r"[A-Za-z][^\t\n\f\r />]*+")
_SPACES = re.compile(r"[\t\n\f\r ]*+")
_BETWEEN_ATTRIBUTES = re.compile(r"[\t\n\f\r /]*+")
_ATTRIBUTE_NAME = re.compile(r"[^\t\n\f\r />][^\t\n\f\r />=]*+")
_BARE_VALUE = re.compile(r"[^\t\n\f\r >]*+")


_ATTRIBUTE = re.compile(r"""([^\t\n\f\r />=]+)(?:[\t\n\f\r ]*=[\t\n\f\r ]*(?:"([^"]*)"|'([^']*)'|([^\t\n\f\r >]*)))?""")


def untranslated(start_tag: str) -> bool:
    """Does the start tag mark its element not to translate: ``translate="no"`` (any case), or
    ``notranslate`` among its classes?"""
    name = _TAG_NAME.match(start_tag, 1)
    if name is None:
        return False
    for m in _ATTRIBUTE.finditer(start_tag, name.end(), len(start_tag) - 1):
        key, value = m.group(1).lower(), html.unescape(next((v for v in m.groups()[1:] if v is not None), ""))
        if (key == "translate" and value.strip().lower() == "no") or \
                (key == "class" and "notranslate" in value.lower().split()):
            return True
    return False


def _element_text(element: str) -> str:
    """The text of an element as written (start tag, content, end tag): its content's, tags out."""
    name = _TAG_NAME.match(element, 1)
    start = _tag_end(element, name.end()) if name else -1
    if name is None or start < 0:
        return ""
    close = element.rfind("</")
    closed = close >= start and element[close + 2:].lower().startswith(name.group().lower())
    inner = element[start:close] if closed else element[start:]
    return "".join(u.text for u in _Scanner(inner).items() if isinstance(u, Unit))


def _up_to(s: str, char: str, i: int) -> int:
    """Just after the first ``char`` at or after ``i``; the end of ``s`` when there is none."""
    at = s.find(char, i)
    return at + 1 if at >= 0 else len(s)


def _tag_end(s: str, i: int) -> int:
    """Just after the ``>`` that ends the tag whose name ends at ``i``, past its attributes and
    their quoted values; -1 when the source ends first (an unclosed tag or quote)."""
    n = len(s)
    while True:
        i = _BETWEEN_ATTRIBUTES.match(s, i).end()
        if i >= n:
            return -1
        if s[i] == ">":
            return i + 1
        i = _SPACES.match(s, _ATTRIBUTE_NAME.match(s, i).end()).end()
        if i >= n:
            return -1
        if s[i] != "=":
            continue  # "/", ">" or the next attribute's name
        i = _SPACES.match(s, i + 1).end()
        if i >= n:
            return -1
        if s[i] in "\"'":
            close = s.find(s[i], i + 1)
            if close < 0:
                return -1
            i = close + 1
        elif s[i] != ">":
            i = _BARE_VALUE.match(s, i).end()


class _Building:
    """A unit as the scanner reads it: text, and inline tags open or closed. Linear in its
    tags: an end tag finds its start tag by a count of the open ones by name, and a start tag
    never closed hands its children to its parent at ``finish``, once for all."""

    def __init__(self) -> None:
        self.raw: list[str] = []
        self.text: list[str] = []
        self.size = 0
        self.open: list[tuple[str, str, int, int]] = []  # (tag, as written, start, index in marks)
        self.open_names: dict[str, int] = {}  # tag -> how many of self.open have it
        self.marks: list[Mark | None] = []  # in the order their start tags came (so by start)
        self.parents: list[int] = []  # each mark's parent as written (an unclosed one's children move at finish)

    def add(self, kind: str, tag: str, piece: str) -> None:
        self.raw.append(piece)
        parent = self.open[-1][3] if self.open else -1
        if kind == "text":
            text = html.unescape(piece)
            self.text.append(text)
            self.size += len(text)
        elif kind == "kept":  # an element not to translate: its text is the unit's, the element kept whole
            text = _element_text(piece)
            self.marks.append(Mark(self.size, self.size + len(text), piece, "", parent, kept=True))
            self.parents.append(parent)
            self.text.append(text)
            self.size += len(text)
        elif kind == "inline" and tag not in VOID:
            self.open.append((tag, piece, self.size, len(self.marks)))
            self.open_names[tag] = self.open_names.get(tag, 0) + 1
            self.marks.append(None)
            self.parents.append(parent)
        elif kind == "end" and self.open_names.get(tag):
            while self.open:  # closes the innermost element of that name (those left open inside: see finish)
                t, written, start, index = self.open.pop()
                self.open_names[t] -= 1
                if t == tag:
                    self.marks[index] = Mark(start, self.size, written, piece, self.parents[index])
                    break
                self.marks[index] = Mark(start, start, written, "", self.parents[index])  # never closed
        else:  # a void element, or an end tag with no start tag: kept where it stands
            self.marks.append(Mark(self.size, self.size, piece, "", parent))
            self.parents.append(parent)

    def finish(self, preformatted: bool = False) -> list[str | Unit]:
        while self.open:
            _, written, start, index = self.open.pop()
            self.marks[index] = Mark(start, start, written, "", self.parents[index])
        # A start tag never closed is kept where it stood, empty, and the marks inside it belong to
        # its parent: each mark's parent is its nearest ancestor that was closed (parents come first).
        marks: list[Mark] = []
        for m in self.marks:
            assert m is not None
            parent = m.parent
            if parent >= 0 and not marks[parent].close:
                parent = marks[parent].parent  # already resolved: a closed mark, or -1
            marks.append(m if parent == m.parent else Mark(m.start, m.end, m.open, m.close, parent))
        return [Unit("".join(self.text), marks, _references("".join(self.raw)), "".join(self.raw),
                     preformatted)]
