"""Debian's translated manuals: the Debian Reference (``debian-reference-en``, ``-de``, ``-fr``,
``-es``) and the Debian Administrator's Handbook (``debian-handbook``, every language in one
package). Both are built from one English source by po4a or Publican, so each language's HTML
page holds the same blocks (paragraphs, list items, table cells, titles) in the same order, a
paragraph left untranslated staying English.

A page is aligned block by block where both pages have the same sequence of block elements
(else it is left out), and each block cut into sentences where both sides hold as many
(corpus/clean.py); titles stay whole, their section numbers out. Screen output and program
listings (``<pre>``) are not prose and are left out. A pair's key is ``package@version:page``;
the split is by page. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from corpus import clean, debian

LANGUAGES = ("de", "fr", "es")
LABEL = "manuals"
BLOCKS = frozenset({"p", "h1", "h2", "h3", "h4", "h5", "h6", "li", "dt", "dd", "td", "th", "caption", "title"})
HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6", "title", "caption"})  # kept whole, numbers out
SKIPPED = frozenset({"pre", "script", "style"})
_NUMBER = re.compile(r"^[\dA-Z]{1,3}(?:\.\d+)*\.?\s+(?=\S)")  # "2.1. ", "A.3 "


@dataclass(frozen=True)
class Manual:
    name: str
    packages: dict[str, str]  # language -> package holding its pages
    folders: dict[str, str]  # language -> folder of its pages inside the package
    suffix: dict[str, str]  # language -> how its pages' file names end


MANUALS = (
    Manual("debian-reference",
           {lang: f"debian-reference-{lang}" for lang in ("en", *LANGUAGES)},
           {lang: "usr/share/debian-reference" for lang in ("en", *LANGUAGES)},
           {lang: f".{lang}.html" for lang in ("en", *LANGUAGES)}),
    Manual("debian-handbook",
           {lang: "debian-handbook" for lang in ("en", *LANGUAGES)},
           {lang: f"usr/share/doc/debian-handbook/html/{tag}" for lang, tag in
            (("en", "en-US"), ("de", "de-DE"), ("fr", "fr-FR"), ("es", "es-ES"))},
           {lang: ".html" for lang in ("en", *LANGUAGES)}),
)


class _Blocks(HTMLParser):
    """(tag, text) of each block element; text of a block inside another ends the outer's unit."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[tuple[str, str]] = []
        self.stack: list[str] = []
        self.text: list[str] = []
        self.skip = 0

    def _flush(self) -> None:
        text = clean.clean_text("".join(self.text))
        if self.stack and text:
            self.out.append((self.stack[-1], text))
        self.text = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in SKIPPED:
            self.skip += 1
        block = tag if tag in BLOCKS else "para" if tag == "div" and ("class", "para") in attrs else None
        if block:
            self._flush()
            self.stack.append(block)
        elif tag == "div":
            self.stack.append("")  # a plain div: keeps the stack in step with the end tags
        elif tag == "br":
            self.text.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in SKIPPED:
            self.skip = max(0, self.skip - 1)
        if tag in BLOCKS or tag == "div":
            self._flush()
            if self.stack:
                self.stack.pop()

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.text.append(data)


def blocks(html: str) -> list[tuple[str, str]]:
    """The page's blocks in document order, as (element, text without markup)."""
    parser = _Blocks()
    parser.feed(html)
    parser.close()
    return parser.out


def page_pairs(en_html: str, xx_html: str) -> list[tuple[str, str]]:
    """Block pairs of a page and its translation, sentence by sentence where they match;
    none when the pages' block structures differ."""
    en, xx = blocks(en_html), blocks(xx_html)
    if [tag for tag, _ in en] != [tag for tag, _ in xx]:
        return []
    out = []
    for (tag, a), (_, b) in zip(en, xx):
        if tag in HEADINGS:
            out.append((_NUMBER.sub("", a), _NUMBER.sub("", b)))
        else:
            out += clean.align_units([a], [b])
    return out


def pages(root: Path, manual: Manual, lang: str) -> dict[str, Path]:
    """{page name: file} of one language of a manual in its unpacked package."""
    folder, suffix = root / manual.folders[lang], manual.suffix[lang]
    if not folder.is_dir():
        return {}
    return {p.name.removesuffix(suffix): p for p in sorted(folder.glob(f"*{suffix}")) if p.is_file()}


def _selector(manual: Manual) -> Callable[[str], bool]:
    prefixes = tuple(manual.folders[lang] + "/" for lang in ("en", *LANGUAGES))
    return lambda path: (path.startswith(prefixes) and path.endswith(".html")) or path.endswith("/copyright")


def unpacked(manual: Manual, lang: str, cache: Path | None = None) -> tuple[Path, str]:
    """The root of the package of ``lang``'s pages (only its pages and copyright file) and its version."""
    package = manual.packages[lang]
    root = debian.extracted(package, _selector(manual), LABEL, cache)
    return root, debian.package_version(debian.fetch_deb(package, cache))


def packages(cache: Path | None = None, books: tuple[Manual, ...] | None = None) -> dict[str, tuple[str, str]]:
    """{package: (version, licence)} of every manual's packages (of ``books``: Debian's two by default)."""
    manual_of = {manual.packages[lang]: manual for manual in books or MANUALS for lang in ("en", *LANGUAGES)}
    out = {}
    for package, deb in debian.fetch_debs(manual_of, cache).items():
        root = debian.extracted(package, _selector(manual_of[package]), LABEL, cache)
        out[package] = (debian.package_version(deb), debian.package_license(root, package))
    return out


def rows(lang: str, cache: Path | None = None,
         books: tuple[Manual, ...] | None = None) -> Iterator[tuple[str, str, str, str]]:
    """(split, key, English, translation) of every manual's pages (of ``books``: Debian's two by
    default), split by page."""
    for manual in books or MANUALS:
        en_root, _ = unpacked(manual, "en", cache)
        xx_root, version = unpacked(manual, lang, cache)
        en_pages = pages(en_root, manual, "en")
        for name, path in pages(xx_root, manual, lang).items():
            if name not in en_pages:
                continue
            split = clean.split_of(f"{manual.name}:{name}")
            key = f"{manual.packages[lang]}@{version}:{name}"
            for en, xx in page_pairs(en_pages[name].read_text(encoding="utf-8", errors="replace"),
                                     path.read_text(encoding="utf-8", errors="replace")):
                yield split, key, en, xx
