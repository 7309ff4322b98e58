"""Sentence splitting: a text of several sentences is translated sentence by sentence.

The models are trained on single sentences (Bible verses): given a paragraph they tend to
stop after the first sentence or two. The server therefore splits every text into
sentences, translates them as one batch and puts the translations back in the places of
their sources, so that the spacing and line breaks between them survive as they were.

The rules (our own; why not a library: ``pysbd`` 0.3.4, unchanged since 2021, split "Le
Dr. | Petit" and "El Sr. | García" and kept "« Bonjour. » Puis" together; ``sentencex``
1.0.32, now a compiled wheel, split "M. | Dupont" and kept "etc. ¿De verdad?" together):

- A line break always ends a sentence (the line structure of the text is kept).
- Otherwise a sentence ends at a run of ``. ! ? …`` (closing quotes and brackets after it
  belong to it, French ones after a space too: ``« Oui. »``) followed by whitespace and a
  new sentence's start: an upper-case letter, possibly after opening quotes or brackets,
  or Spanish ``¿`` / ``¡``. "etc. and", "3.5", "p.m. on" do not end one.
- A single ``.`` does not end a sentence after a known abbreviation of the language that
  stands before a name or a noun ("Dr.", "Mr.", "M.", "Sr.", "z.B.", "vgl."; see
  ``ABBREVIATIONS``, spaced ones like "d. h." too), after a single capital letter or before
  one ("J. R. R. Tolkien", "z. B."; English "I" ends a sentence, and so does a small letter:
  "3,5 h."), after a German ordinal number ("am 3. Oktober"), or after a number that opens
  the sentence ("1. Einleitung": a list item).
- A sentence never ends inside a span the translation must copy (engine/placeholders.py:
  URLs, e-mail addresses, paths, numbers, code in backticks, format placeholders), so that
  the span reaches the model whole: "Run `echo Done. Exit` now." is one sentence. (Of
  these only code can hold a space; "https://example.org/a.b. Next" and "3.5" never split
  inside anyway, and a URL's or path's final dot is the sentence's.)

Offsets are Unicode code points (Python ``str`` indices). What is not inside a span is
whitespace, and it is copied to the output as it is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from engine.placeholders import find_spans

Span = tuple[int, int]  # [start, end) of a sentence in its text, without surrounding whitespace


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Abbreviations (lower case, without the final dot) that stand before a name, a noun or a
# number, so that a capital letter after them does not start a new sentence. Those that
# often end a sentence ("etc.", "usw.", "Inc.", "Jr.") are deliberately not here.
ABBREVIATIONS: dict[str, frozenset[str]] = {
    "en": _words("""mr mrs ms mx dr prof st mt ft rev fr gen col maj capt lt sgt cpl adm gov sen rep
                    pres hon messrs vs cf viz e.g i.e approx ca"""),
    "de": _words("""hr hrn fr frl dr prof st z.b d.h u.a u.ä o.ä bzw vgl ggf evtl ca sog inkl exkl zzgl
                    ggü bspw bzgl u.u z.t i.d.r m.e o.g s.o s.u dipl dipl.-ing ing mag"""),
    "fr": _words("""m mm mme mmes mlle mlles dr pr me mgr st ste av bd cf env p.ex ex c.-à-d"""),
    "es": _words("""sr sra sres srs srta srtas dr dra dres dña ud uds vd vds lic ing arq prof sto sta
                    p.ej aprox av avda gral ee"""),
}

# A line break: always the end of a sentence.
_LINE_BREAK = re.compile(r"[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]")
# The end of a sentence candidate: terminal punctuation, what closes after it, whitespace.
_END = re.compile(r"(?P<punct>[.!?…‽]+)(?:[ \u00a0\u202f]?[»›]|[\"'”’“)\]])*(?P<space>\s+)")
_OPENERS = "\"'‘“„«‹([—–-"
_WORD_STRIP = "\"'‘“„«‹([¿¡"
_LETTER_DOT = re.compile(r"[^\W\d_]\.(?!\w)")  # "z." and "B." of "z. B."


def split_sentences(text: str, lang: str) -> list[Span]:
    """The sentences of ``text`` as spans, in order; none for a blank text."""
    spans: list[Span] = []
    start = 0
    for brk in [*_LINE_BREAK.finditer(text), None]:
        end = brk.start() if brk else len(text)
        spans += _split_line(text, start, end, lang)
        if brk:
            start = brk.end()
    return spans


def whole(text: str) -> list[Span]:
    """``text`` as one sentence (splitting off): its content without the surrounding whitespace."""
    stripped = text.strip()
    if not stripped:
        return []
    start = len(text) - len(text.lstrip())
    return [(start, start + len(stripped))]


def join(text: str, spans: Sequence[Span], outputs: Sequence[str]) -> str:
    """``text`` with every span replaced by its output; everything else (whitespace) kept."""
    parts, last = [], 0
    for (s, e), out in zip(spans, outputs, strict=True):
        parts += [text[last:s], out]
        last = e
    parts.append(text[last:])
    return "".join(parts)


def _split_line(text: str, start: int, end: int, lang: str) -> list[Span]:
    line = text[start:end]
    content = line.strip()
    if not content:
        return []
    offset = start + len(line) - len(line.lstrip())
    spans: list[Span] = []
    begin = 0  # of the current sentence, in ``content``
    kept: list[Span] | None = None  # the spans to copy whole, found at the first candidate end
    for m in _END.finditer(content):
        after = m.end()
        if after >= len(content) or not _starts_sentence(content, after):
            continue
        if m.group("punct") == "." and not _ends_with_dot(content, begin, m.start(), after, lang):
            continue
        stop = m.start("space")
        if kept is None:
            kept = [(x.start, x.end) for x in find_spans(content, limit=len(content))]
        if any(s < stop < e for s, e in kept):
            continue  # inside code: "`echo Done. Exit`"
        spans.append((offset + begin, offset + stop))
        begin = after
    spans.append((offset + begin, offset + len(content)))
    return spans


def _starts_sentence(content: str, i: int) -> bool:
    if content[i] in "¿¡":
        return True
    while i < len(content) and content[i] in _OPENERS:
        i += 1
    return i < len(content) and content[i].isupper()


def _ends_with_dot(content: str, begin: int, dot: int, after: int, lang: str) -> bool:
    """Does the single dot at ``dot`` end the sentence that began at ``begin`` (the next
    one would begin at ``after``)?"""
    tokens = content[begin:dot].split()
    if not tokens:
        return True
    if _LETTER_DOT.match(content, after):
        return False  # the next word is an initial, or the "B." of "z. B."
    word = tokens[-1].lstrip(_WORD_STRIP)
    if not word:
        return True
    # Spaced abbreviations are one: "z. B" -> "z.B", "d. h" -> "d.h", "i. d. R" -> "i.d.R".
    n = len(tokens) - 1
    while n > 0 and _LETTER_DOT.fullmatch(tokens[n - 1]):
        n -= 1
    spaced = "".join(tokens[n:-1]) + word
    known = ABBREVIATIONS.get(lang, frozenset())
    if word.lower() in known or spaced.lower() in known:
        return False
    if len(word) == 1 and word.isalpha():
        # An initial ("J. R. R.", "M. Dupont", the "B." of "z. B."), but not English "I"; a
        # single small letter is a unit or a word ("3,5 h.") and ends the sentence.
        return not word.isupper() or (lang == "en" and word == "I")
    if word.isdigit():
        if lang == "de" and len(word) <= 3:
            return False  # an ordinal: "am 3. Oktober", "im 19. Jahrhundert"
        if len(tokens) == 1:
            return False  # a list item's number: "1. Einleitung"
    return True
