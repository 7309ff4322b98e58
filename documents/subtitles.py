"""Subtitles: SubRip (.srt) and WebVTT (.vtt).

A cue is a timing line (``00:00:01,000 --> 00:00:03,500``, WebVTT's cue settings after it)
and the text lines after it, up to a blank line. Everything but the text comes back as it
was: cue numbers and identifiers, timings and settings, WEBVTT's header, NOTE, STYLE and
REGION blocks, blank lines, line endings. The text of a cue is translated as one segment (a
sentence wrapped over two lines is one sentence), except where a line opens a line of
dialogue ("- Hi!"), and is wrapped again into as many lines as it had. Its tags (``<i>``,
``<b>``, ``<font color=...>``, WebVTT's ``<v Speaker>``, ``<c.class>``) are marks placed on
the translation by the attention (documents/inline.py); a tag without text (a timestamp
``<00:01.500>``, an ASS code ``{\\an8}``) stays where it is and ends a segment. WebVTT's
character references (``&amp;``, ``&lt;``) are read as characters and written again as
references; SubRip has none, so its ``&`` stays ``&``.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from documents.document import Document, Segment, decode
from documents.inline import BREAK, InlineText, Piece, units
from documents.translate import placed
from nmt.v1 import translator_pb2 as pb

_TIMING = re.compile(r"^\s*(?:\d+:)?\d{1,2}:\d{2}[,.]\d{1,3}\s*-->\s*(?:\d+:)?\d{1,2}:\d{2}[,.]\d{1,3}")
# A tag (its "/" and name), or an ASS override code; a timestamp tag has no name.
_TOKEN = re.compile(r"<(/?)([A-Za-z]*)[^<>]*>|\{\\[^{}]*\}")
_DIALOGUE = re.compile(r"^\s*[-‐‑–—]")
_VTT_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


@dataclass
class _Group:
    """Consecutive text lines of one cue translated together: the tags and texts of their
    lines joined by spaces, and the line count to wrap the translation into."""

    lines: int
    items: list[str]  # tags as written and texts (decoded), in order
    is_text: list[bool]
    inline: list[InlineText] = field(default_factory=list)


class SubtitleFile(Document):
    def __init__(self, data: bytes, kind: str) -> None:
        self.kind = kind  # ".srt" or ".vtt"
        text, self.encoding = decode(data, kind)
        self.lines = re.split(r"(?<=\n)", text)
        if self.lines and not self.lines[-1]:
            self.lines.pop()
        self.groups: list[tuple[int, _Group]] = []  # (first line, group)
        self.segments = []
        cue = 0
        i = 0
        while i < len(self.lines):
            if not _TIMING.match(self.lines[i]):
                i += 1
                continue
            cue += 1
            i += 1
            start = i
            while i < len(self.lines) and self.lines[i].strip():
                i += 1
            self._cue(start, i, cue)

    def _cue(self, start: int, end: int, cue: int) -> None:
        """The groups of the cue's text lines [start, end)."""
        group_start = start
        for k in range(start, end + 1):
            if k == end or (k > group_start and _DIALOGUE.match(self.lines[k])):
                group = self._group([self.lines[j].rstrip("\r\n") for j in range(group_start, k)])
                self.groups.append((group_start, group))
                self.segments += [Segment(t.text, f"cue {cue}", t.marked) for t in group.inline]
                group_start = k

    def _group(self, lines: list[str]) -> _Group:
        items: list[str] = []
        is_text: list[bool] = []
        pieces: list[Piece | None] = []
        open_tags: list[tuple[str, int]] = []  # (name, item index) of the tags not closed yet
        source = " ".join(lines)
        at = 0
        for m in [*_TOKEN.finditer(source), None]:
            stop = m.start() if m else len(source)
            if stop > at:
                raw = source[at:stop]
                text = html.unescape(raw) if self.kind == ".vtt" else raw
                pieces.append(Piece(text, tuple(index for _, index in open_tags), len(items)))
                items.append(text)
                is_text.append(True)
            if m is None:
                break
            closing, name = m.group(1), (m.group(2) or "").lower()
            names = [n for n, _ in open_tags]
            if name and not closing:
                open_tags.append((name, len(items)))
            elif name and name in names:
                del open_tags[len(names) - 1 - names[::-1].index(name):]
            else:  # a timestamp, an ASS code, or an end tag with no start: no text of its own
                pieces.append(BREAK)
            items.append(m.group())
            is_text.append(False)
            at = m.end()
        group = _Group(len(lines), items, is_text)
        group.inline = [t for t in map(InlineText, units(pieces)) if t.translatable]
        return group

    def render(self, answers: Sequence[pb.Translation]) -> bytes:
        self.check(answers)
        it = iter(answers)
        new_lines: list[tuple[int, int, list[str]]] = []  # (first line, lines, their replacement)
        for first, group in self.groups:
            if not group.inline:
                continue
            items = list(group.items)
            for t in group.inline:
                text, place = placed(t.text, next(it))
                for piece, new in zip(t.pieces, t.render(text, place)):
                    items[piece.ref] = new
            if self.kind == ".vtt":
                items = ["".join(_VTT_ESCAPES.get(c, c) for c in s) if text else s
                         for s, text in zip(items, group.is_text)]
            last = self.lines[first + group.lines - 1]
            ending = "\r\n" if self.lines[first].endswith("\r\n") else "\n"
            wrapped = _wrap(items, group.is_text, group.lines)
            new_lines.append((first, group.lines, [line + ending for line in wrapped[:-1]]
                              + [wrapped[-1] + last[len(last.rstrip("\r\n")):]]))
        lines = list(self.lines)
        for first, count, replacement in reversed(new_lines):  # from the end: earlier offsets hold
            lines[first:first + count] = replacement
        return "".join(lines).encode(self.encoding)


def _wrap(items: list[str], is_text: list[bool], count: int) -> list[str]:
    """The items joined, cut into ``count`` lines (or fewer, when the text has fewer spaces) at
    the spaces outside tags nearest to equal lengths of text."""
    whole = "".join(items)
    spaces: list[int] = []  # offsets in ``whole`` of the spaces in text
    visible: list[int] = []  # characters of text before each of them
    at = seen = 0
    for s, text in zip(items, is_text):
        if text:
            spaces += [at + i for i, c in enumerate(s) if c == " "]
            visible += [seen + i for i, c in enumerate(s) if c == " "]
            seen += len(s)
        at += len(s)
    cuts: list[int] = []
    for k in range(1, count):
        goal = seen * k / count
        free = [j for j in range(len(spaces)) if spaces[j] not in cuts and (not cuts or spaces[j] > cuts[-1])]
        if not free:
            break
        cuts.append(spaces[min(free, key=lambda j: abs(visible[j] - goal))])
    out, at = [], 0
    for cut in cuts:
        out.append(whole[at:cut])
        at = cut + 1
    out.append(whole[at:])
    return out
