"""German-English example sentences and phrases from Ding's dictionary (Debian's ``trans-de-en``,
GPL-2+): the everyday language no other Debian source holds ("Guten Morgen!" / "Good morning!",
"Ich muss jetzt gehen." / "I've got to leave now.", "Mit freundlichen Grüßen" / "Best regards").

Each line of ``usr/share/trans/de-en`` is ``German :: English``; each side holds sub-entries
separated by `` | `` (aligned one to one: a headword, its inflections, its example sentences) and
each sub-entry alternatives separated by ``; ``. A sub-entry becomes a pair where both sides have
as many sub-entries: the first alternative of each, without the dictionary's annotations (``{m}``,
``[ugs.]``, ``[Br.]``, ``/ABBR/``, explanations in parentheses). Left out: templates with
placeholders (``jdm. etw. geben`` / ``to give sb. sth.``), slash alternatives that cannot be paired
(``I/he/she would``), and single words (a translation model is not a dictionary lookup; they would
outnumber the sentences five to one).

Two sources: ``debian-examples`` holds the sub-entries that end as a sentence does (``.``, ``!``,
``?``: example sentences, idioms, greetings; about 21k) and ``debian-phrases`` those of two or more
words that do not (noun and verb phrases; about 230k). The key is ``trans-de-en@version:line``;
the split is by dictionary entry. Only German has such a dictionary in Debian that is not reserved
for evaluation: French and Spanish yield no pairs here. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from corpus import clean, debian

PACKAGE = "trans-de-en"
FILE = "usr/share/trans/de-en"
LABEL = "dictionary"
KINDS = ("examples", "phrases")
_ANNOTATION = re.compile(r"\{[^{}]*\}|\[[^\[\]]*\]|/[A-Z][A-Z0-9.]*/|<[^<>]*>")
_PARENTHESES = re.compile(r"\s*\([^()]*\)")
# Placeholders of a template entry: English sth./sb., German etw./jdn./jdm./jds./jd., ellipses, tildes
_TEMPLATE = re.compile(r"\b(?:sth|sb|etw|jdn|jdm|jds|jd|jmd|jmdn|jmdm)\.|\b(?:sth|sb)\b|…|\.\.\.|~")
_SENTENCE_END = (".", "!", "?")


def unit(text: str) -> str:
    """One sub-entry's first alternative without annotations or explanations; "" when it cannot
    be used as it is (a template, or slash alternatives inside a phrase)."""
    if _TEMPLATE.search(text):
        return ""
    first = _ANNOTATION.sub("", text.split("; ")[0])
    first = _PARENTHESES.sub("", first)
    first = re.sub(r"\s+", " ", first).strip(" ,;:")
    if " / " in first:  # "Quite the contrary. / Quite the opposite.": the first of whole sentences
        head = first.split(" / ")[0].strip()
        first = head if head.endswith(_SENTENCE_END) else ""
    if "/" in first or "(" in first or ")" in first:
        return ""
    return first


def kind_of(en: str, de: str) -> str | None:
    """``examples``, ``phrases`` or None (a single word) for a pair of units."""
    if en.endswith(_SENTENCE_END) and de.endswith(_SENTENCE_END):
        return "examples"
    if len(en.split()) >= 2 and not en.endswith(_SENTENCE_END) and not de.endswith(_SENTENCE_END):
        return "phrases"
    return None


def entries(text: str) -> Iterator[tuple[int, str, str, str]]:
    """(line number, kind, English, German) of every usable sub-entry of the dictionary file."""
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("#") or " :: " not in line:
            continue
        german, english = line.split(" :: ", 1)
        de_units, en_units = german.split(" | "), english.split(" | ")
        if len(de_units) != len(en_units):
            continue
        for de_text, en_text in zip(de_units, en_units):
            de, en = clean.clean_text(unit(de_text)), clean.clean_text(unit(en_text))
            if not de or not en:
                continue
            kind = kind_of(en, de)
            if kind:
                yield number, kind, en, de


def _root(cache: Path | None) -> tuple[Path, str]:
    deb = debian.fetch_deb(PACKAGE, cache)
    return debian.extracted(PACKAGE, lambda path: path in (FILE, f"usr/share/doc/{PACKAGE}/copyright"),
                            LABEL, cache), debian.package_version(deb)


def packages(cache: Path | None = None) -> dict[str, tuple[str, str]]:
    """{package: (version, licence)} of the dictionary read."""
    root, version = _root(cache)
    return {PACKAGE: (version, debian.package_license(root, PACKAGE))}


def rows(kind: str, lang: str, cache: Path | None = None) -> Iterator[tuple[str, str, str, str]]:
    """(split, key, English, German) of one kind of sub-entry; nothing for French or Spanish."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {', '.join(KINDS)}")
    if lang != "de":
        return
    root, version = _root(cache)
    text = (root / FILE).read_text(encoding="utf-8", errors="replace")
    for number, found, en, de in entries(text):
        if found == kind:
            key = f"{PACKAGE}@{version}:{number}"
            yield clean.split_of(key), key, en, de
