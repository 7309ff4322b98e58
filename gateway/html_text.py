"""The text of an HTML fragment, to translate it and put the translations back (LibreTranslate's
``format: "html"``).

The standard library's ``html.parser`` finds the constructs; every character of the input
belongs to exactly one of them (a tag, a comment, a declaration, text), so everything but
translated text comes back byte for byte: tags with their attributes, comments, the
content of ``<script>`` and ``<style>``, and whitespace between tags. A run of text (text
and character references up to the next tag) is translated when it has a letter in it;
the whitespace around it is kept as written. In the translation, ``&``, ``<`` and ``>``
are escaped, and a character the source wrote as a reference (``&nbsp;``, ``&#8212;``) is
written with the same reference again.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from html.parser import HTMLParser

# Elements whose content is code, not text: never translated.
SKIPPED = frozenset({"script", "style"})
_REFERENCE = re.compile(r"&(?:#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);?")


@dataclass(frozen=True)
class _Run:
    raw: str  # the input's characters, as written
    text: str | None = None  # what to translate (None: keep raw as it is)
    lead: str = ""  # the whitespace around text, as written
    trail: str = ""


class HtmlText:
    """``HtmlText(source).texts``: the texts to translate, in order; ``render(translations)``:
    the source with each replaced by its translation."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.runs = _Scanner(source).runs()
        self.texts = [r.text for r in self.runs if r.text is not None]

    def render(self, translations: list[str]) -> str:
        if len(translations) != len(self.texts):
            raise ValueError(f"{len(translations)} translations for {len(self.texts)} texts")
        it = iter(translations)
        out = []
        for run in self.runs:
            if run.text is None:
                out.append(run.raw)
            else:
                out += [run.lead, _escape(next(it), _references(run.raw)), run.trail]
        return "".join(out)


def _references(raw: str) -> dict[str, str]:
    """Character -> the reference that wrote it in ``raw`` (but &, < and >: escaped anyway)."""
    out = {}
    for m in _REFERENCE.finditer(raw):
        char = html.unescape(m.group())
        if len(char) == 1 and char != m.group() and char not in "&<>":
            out[char] = m.group()
    return out


def _escape(text: str, references: dict[str, str]) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for char, reference in references.items():
        text = text.replace(char, reference)
    return text


class _Scanner(HTMLParser):
    """Records where each construct starts and whether it is text outside script and style."""

    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=False)  # references arrive as their own events, at their own offsets
        self.source = source
        self.line_starts = [0, *(i + 1 for i, c in enumerate(source) if c == "\n")]
        self.events: list[tuple[int, bool]] = []  # (offset, is translatable text)
        self.inside: str | None = None  # the skipped element we are in

    def runs(self) -> list[_Run]:
        self.feed(self.source)
        self.close()
        bounds = [offset for offset, _ in self.events] + [len(self.source)]
        runs: list[_Run] = []
        pending: list[str] = []  # consecutive text pieces, joined into one run
        for (start, is_text), end in zip(self.events, bounds[1:]):
            piece = self.source[start:end]
            if is_text:
                pending.append(piece)
                continue
            if pending:
                runs.append(_text_run("".join(pending)))
                pending = []
            runs.append(_Run(piece))
        if pending:
            runs.append(_text_run("".join(pending)))
        return runs

    def _at(self, is_text: bool) -> None:
        # getpos() is the start of the construct being handled: html.parser updates it after the handler.
        line, column = self.getpos()
        self.events.append((self.line_starts[line - 1] + column, is_text))

    def handle_starttag(self, tag, attrs):
        self._at(False)
        if tag in SKIPPED and self.inside is None:
            self.inside = tag

    def handle_startendtag(self, tag, attrs):
        self._at(False)

    def handle_endtag(self, tag):
        self._at(False)
        if tag == self.inside:
            self.inside = None

    def handle_data(self, data):
        self._at(self.inside is None)

    def handle_entityref(self, name):
        self._at(self.inside is None)

    def handle_charref(self, name):
        self._at(self.inside is None)

    def handle_comment(self, data):
        self._at(False)

    def handle_decl(self, decl):
        self._at(False)

    def handle_pi(self, data):
        self._at(False)

    def unknown_decl(self, data):
        self._at(False)


def _text_run(raw: str) -> _Run:
    """A run of text: translated when it has a letter, between its whitespace as written."""
    core = raw.strip(" \t\n\r\f")
    if not core:
        return _Run(raw)
    start = raw.index(core)
    text = html.unescape(core)
    if not any(c.isalpha() for c in text):
        return _Run(raw)
    return _Run(raw, text, raw[:start], raw[start + len(core):])
