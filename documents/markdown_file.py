"""Markdown (.md), read with markdown-it-py (CommonMark, with GitHub's tables and strikethrough).

The text of every paragraph, heading and table cell is a segment, wherever it stands (lists,
block quotes); everything else comes back byte for byte: fenced and indented code, HTML
blocks, front matter, thematic breaks, the markers of headings, lists, quotes and table rows,
blank lines. A segment's inline syntax is made of marks placed on the translation by the
model's attention: emphasis, strong, strikethrough and links around the words they covered
(a link keeps its target and title), images, inline HTML and hard line breaks as points. A
code span goes to the server inside its backticks, which the server copies verbatim (its
placeholders, engine/placeholders.py), and is never escaped; a translation that lost one is
replaced by its source text, as the server replaces an unfaithful translation. The translated
text is escaped where Markdown would read it as syntax. A paragraph's lines are joined into
one (a soft line break is a space), which renders the same.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from markdown_it import MarkdownIt
from markdown_it.token import Token

from documents.document import SPACE, Document, DocumentError, Segment, decode, translatable
from documents.html_text import Mark, Placement, Unit, nested_spans, render_unit
from documents.translate import placed
from nmt.v1 import translator_pb2 as pb

_ESCAPED = frozenset("\\*_[]<`")  # characters of translated text that Markdown could read as syntax
_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")
_BLOCK_START = re.compile(r"^(?:[#>+=-]|\d+[.)])")  # what would start another block at a paragraph's start
_LINK_TARGET = re.compile(r"[\s()<>]")
_SPACES = re.compile(r"(?<=\S) {2,}(?=\S)")  # between words (not a hard break's, not an indent)


@dataclass
class _Inline:
    """One inline token's text: where it stands in the source, and its unit (text and marks)."""

    start: int  # offsets in the source text of the region its translation replaces
    end: int
    unit: Unit
    verbatim: list[str] = field(default_factory=list)  # its code spans as written, in order
    cell: bool = False  # a table cell: "|" is escaped
    paragraph: bool = False  # a paragraph's text starts a line: what would start a block is escaped


class MarkdownFile(Document):
    def __init__(self, data: bytes) -> None:
        self.source, self.encoding = decode(data, ".md")
        lines = self.source.splitlines(keepends=True)
        self.line_start = [0]
        for line in lines:
            self.line_start.append(self.line_start[-1] + len(line))
        self.lines = [line.rstrip("\r\n") for line in lines]
        md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
        try:
            tokens = md.parse(self.source)
        except Exception as e:  # the parser accepts any text; this would be its own bug
            raise DocumentError(f"the .md file cannot be parsed: {str(e)[:200]}") from None
        self.inline: list[_Inline] = []
        self.segments = []
        row: list[tuple[int, int]] = []  # the cells of the table row being read: (start, end) offsets
        cell: tuple[int, int] | None = None  # the cell being read
        for i, token in enumerate(tokens):
            if token.type == "tr_open" and token.map:
                row = self._cells(token.map[0])
            elif token.type in ("th_open", "td_open"):
                cell = row.pop(0) if row else None
            if token.type != "inline" or not translatable(token.content):
                continue
            if tokens[i - 1].type in ("th_open", "td_open"):
                if cell is None:
                    raise DocumentError(f"the .md file's table at line {token.map[0] + 1 if token.map else '?'} "
                                        f"has more cells than its row holds")
                inline = self._unit(token, *cell, [], cell=True)
            else:
                inline = self._block(token, tokens[i - 1])
            if translatable(inline.unit.text):
                self.inline.append(inline)
                line = self.source.count("\n", 0, inline.start) + 1
                self.segments.append(Segment(inline.unit.text.strip(SPACE), f"line {line}", bool(inline.unit.marks)))

    def _cells(self, line: int) -> list[tuple[int, int]]:
        """(start, end) offsets of each cell's text in a table row (split at pipes not escaped)."""
        text, base = self.lines[line], self.line_start[line]
        bars = [m.start() for m in re.finditer(r"(?<!\\)\|", text)]
        edges = [-1, *bars, len(text)]
        cells = []
        for a, b in itertools.pairwise(edges):
            piece = text[a + 1:b]
            if not piece.strip() and (a == -1 or b == len(text)):
                continue  # before a leading pipe or after a trailing one
            lead = len(piece) - len(piece.lstrip())
            cells.append((base + a + 1 + lead, base + a + 1 + len(piece.rstrip())))
        return cells

    def _block(self, token: Token, opener: Token) -> _Inline:
        """A paragraph's or a heading's text: its content located in its lines (content line k
        is on line first + k; a setext heading's underline and an ATX heading's #s are not in it)."""
        first = opener.map[0] if opener.map else 0
        content = token.content.split("\n")
        last = first + len(content) - 1
        at = self.lines[first].find(content[0]) if first < len(self.lines) else -1
        end_at = -1
        if at >= 0 and last < len(self.lines):
            end_at = self.lines[last].find(content[-1], at if last == first else 0)
        if at < 0 or end_at < 0:
            raise DocumentError(f"the .md file's line {first + 1} could not be read back as markdown-it-py parsed it")
        # The prefix of each continuation line (a quote's "> ", a list item's indent): what stands
        # before its content.
        prefixes = [self.lines[first + k][:max(self.lines[first + k].find(content[k]), 0)]
                    for k in range(1, len(content))]
        return self._unit(token, self.line_start[first] + at, self.line_start[last] + end_at + len(content[-1]),
                          prefixes, paragraph=opener.type == "paragraph_open")

    def _unit(self, token: Token, start: int, end: int, prefixes: list[str], cell: bool = False,
              paragraph: bool = False) -> _Inline:
        text: list[str] = []
        size = 0
        marks: list[Mark] = []
        open_marks: list[int] = []
        verbatim: list[str] = []
        autolink = False
        breaks = 0  # line breaks so far (each starts the next content line)

        def add(s: str) -> None:
            nonlocal size
            text.append(s)
            size += len(s)

        def point(literal: str) -> None:
            marks.append(Mark(size, size, literal, "", open_marks[-1] if open_marks else -1))

        for child in token.children or []:
            kind = child.type
            if autolink:  # an autolink is written whole, as a point (it has no words to translate)
                autolink = kind != "link_close"
                continue
            if kind == "text":
                add(child.content)
            elif kind == "softbreak":
                add(" ")
                breaks += 1
            elif kind == "hardbreak":
                prefix = prefixes[breaks] if breaks < len(prefixes) else ""
                point(("\\" if token.content.split("\n")[breaks].endswith("\\") else "  ") + "\n" + prefix)
                add(" ")
                breaks += 1
            elif kind == "code_inline":
                fence = child.markup
                pad = " " if child.content.startswith(("`", " ")) or child.content.endswith(("`", " ")) else ""
                literal = f"{fence}{pad}{child.content}{pad}{fence}"
                verbatim.append(literal)
                add(literal)
            elif kind in ("html_inline", "image"):
                point(child.content if kind == "html_inline" else _image(child))
            elif kind == "link_open" and child.markup == "autolink":
                autolink = True
                point(f"<{child.attrGet('href')}>")
            elif kind.endswith("_open"):
                close = _closing(child)
                marks.append(Mark(size, -1, _opening(child), close, open_marks[-1] if open_marks else -1))
                open_marks.append(len(marks) - 1)
            elif kind.endswith("_close") and open_marks:
                index = open_marks.pop()
                m = marks[index]
                marks[index] = Mark(m.start, size, m.open, m.close, m.parent)
        for index in open_marks:
            m = marks[index]
            marks[index] = Mark(m.start, size, m.open, m.close, m.parent)
        whole = "".join(text)
        # A point keeps the spaces it stood between in the source (the translation's words around
        # it may not have them where it lands; Markdown reads several spaces as one).
        for k, m in enumerate(marks):
            if not m.close and "\n" not in m.open:
                before = " " if m.start > 0 and whole[m.start - 1].isspace() else ""
                after = " " if m.start < len(whole) and whole[m.start].isspace() else ""
                marks[k] = Mark(m.start, m.end, before + m.open + after, "", m.parent)
        return _Inline(start, end, Unit(whole, marks), verbatim, cell, paragraph)

    def render(self, answers: Sequence[pb.Translation]) -> bytes:
        self.check(answers)
        out = self.source
        done = []
        for inline, segment, answer in zip(self.inline, self.segments, answers):
            translation, place = placed(segment.text, answer)
            done.append((inline, _render(inline, segment.text, translation, place)))
        for inline, text in reversed(done):  # from the end: the earlier offsets hold
            out = out[:inline.start] + text + out[inline.end:]
        return out.encode(self.encoding)


def _render(inline: _Inline, source: str, translation: str, place: Placement) -> str:
    protected = _find_all(translation, inline.verbatim)
    if protected is None:  # a code span was lost: the source is given back, as the server gives back
        translation, protected = source, _find_all(source, inline.verbatim) or []

    def keep_code_whole(unit: Unit, text: str) -> list[tuple[int, int]]:
        spans = place(unit, text)
        moved = [(_outside(a, protected), _outside(b, protected)) for a, b in spans]
        return nested_spans(unit.marks, moved)

    def escape(text: str, start: int, end: int) -> str:
        out = []
        for i in range(start, end):
            c = text[i]
            if c == "|" and inline.cell:  # a table splits cells at a pipe even inside a code span
                out.append("\\|")
            elif text is translation and any(a <= i < b for a, b in protected):
                out.append(c)
            elif c in _ESCAPED:
                out.append("\\" + c)
            elif c == "&" and _ENTITY.match(text, i):
                out.append("&amp;")
            else:
                out.append(c)
        return "".join(out)

    rendered = render_unit(inline.unit, translation, keep_code_whole, escape)
    # Spaces that a point brought along where the translation had one already: one is enough
    # (Markdown reads several as one), but inside code spans, which keep theirs.
    parts, at = [], 0
    for a, b in _find_all(rendered, inline.verbatim) or []:
        parts += [_SPACES.sub(" ", rendered[at:a]), rendered[a:b]]
        at = b
    rendered = "".join([*parts, _SPACES.sub(" ", rendered[at:])])
    if inline.paragraph and _BLOCK_START.match(rendered):
        rendered = "\\" + rendered
    return rendered


def _find_all(text: str, literals: list[str]) -> list[tuple[int, int]] | None:
    """Where each literal stands in ``text``, in order; None when one is missing."""
    out, at = [], 0
    for literal in literals:
        i = text.find(literal, at)
        if i < 0:
            i = text.find(literal)
            if i < 0:
                return None
        out.append((i, i + len(literal)))
        at = i + len(literal)
    return out


def _outside(x: int, ranges: list[tuple[int, int]]) -> int:
    """``x``, moved to the end of a range it falls inside."""
    for a, b in ranges:
        if a < x < b:
            return b
    return x


def _opening(token: Token) -> str:
    if token.type == "link_open":
        return "<" if token.markup == "autolink" else "["
    return token.markup


def _closing(token: Token) -> str:
    if token.type != "link_open":
        return token.markup
    if token.markup == "autolink":
        return ">"
    return f"]({_target(str(token.attrGet('href') or ''))}{_title(token.attrGet('title'))})"


def _image(token: Token) -> str:
    alt = token.content.replace("]", "\\]")
    return f"![{alt}]({_target(str(token.attrGet('src') or ''))}{_title(token.attrGet('title'))})"


def _target(url: str) -> str:
    return f"<{url}>" if _LINK_TARGET.search(url) else url


def _title(title: object) -> str:
    return f' "{str(title).replace(chr(34), chr(92) + chr(34))}"' if title else ""
