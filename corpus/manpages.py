"""Translated manual pages: manpages-l10n's German, French and Spanish pages (``manpages-de``,
``manpages-de-dev``, ... ) against their English originals in the packages that ship them
(the Linux man-pages project's ``manpages`` and ``manpages-dev``, and the common tools listed
in ``ENGLISH``), and the pages of the packages that ship their own translations (``OWN``: dpkg,
apt, debhelper, devscripts, po4a ...) against the English pages beside them.

manpages-l10n translates with po4a, which keeps a page's structure macros (``.SH``, ``.SS``,
``.PP``, ``.TP``, ``.IP`` ...) and adds a translators' section at the end. A page is aligned
only where the translation's structure macros, up to the English page's count, are the
English page's own (a page of another version is left out); then block by block (the text
between two structure macros; headings and ``.TP``/``.IP`` tags are blocks of their own), each
cut into sentences where both sides hold as many. Synopses, examples, tables and other no-fill text
(``.nf``/``.EX``/``.TS`` ...) are code, not prose, and are left out. The key is
``package@version:page``; the split is by page. Standard library only.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from pathlib import Path

from corpus import clean, debian

LANGUAGES = ("de", "fr", "es")
LABEL = "manpages"
# Where the English originals are: the Linux man-pages project and the commonest tools
ENGLISH = ("manpages", "manpages-dev", "coreutils", "util-linux", "procps", "findutils", "grep", "sed", "tar",
           "gzip", "passwd", "login", "psmisc", "diffutils", "man-db", "less", "e2fsprogs", "bsdutils", "mount",
           "dpkg", "apt", "debianutils", "sysvinit-utils", "kmod", "iproute2", "cron", "xz-utils", "bzip2", "debconf")
# Packages that ship their pages translated (po4a) beside the English ones
OWN = ("man-db", "apt", "apt-utils", "apt-listchanges", "procps", "psmisc", "xz-utils", "dpkg", "dpkg-dev",
       "debconf-i18n", "debconf-utils", "debhelper", "debianutils", "devscripts", "adduser", "login", "passwd", "po4a")
STRUCTURE = {"SH": "SH", "SS": "SS", "PP": "PP", "P": "PP", "LP": "PP", "TP": "TP", "IP": "IP", "HP": "HP",
             "TQ": "TQ"}
NO_FILL = {"nf": "fi", "EX": "EE", "TS": "TE", "EQ": "EN", "de": "..", "ig": ".."}
INLINE = frozenset({"B", "I", "R", "SM", "SB", "BI", "BR", "IB", "IR", "RB", "RI", "UR", "MT", "OP"})
_ESCAPES = {r"\-": "-", r"\e": "\\", r"\ ": " ", r"\~": " ", r"\0": " ", r"\&": "", r"\:": "", r"\%": "",
            r"\/": "", r"\,": "", r"\|": "", r"\^": "", r"\c": ""}
_ESCAPE = re.compile("|".join(re.escape(k) for k in _ESCAPES))
# groff's named characters (\(aq, \[ti]); an unknown one is dropped
_NAMED = {"aq": "'", "dq": '"', "lq": "“", "rq": "”", "oq": "‘", "cq": "’", "Fo": "«", "Fc": "»", "em": "—",
          "en": "–", "bu": "•", "co": "©", "rg": "®", "ti": "~", "rs": "\\", "ha": "^", "at": "@", "sh": "#",
          "Do": "$", "lB": "[", "rB": "]", "lC": "{", "rC": "}", "ba": "|", "or": "|", "pl": "+", "mi": "-",
          "eq": "=", "sl": "/", "hy": "-", "mu": "×", "de": "°", "mc": "µ", "tm": "™", "+-": "±"}
_NAMED_CHAR = re.compile(r"\\(?:\((..)|\[([^\]]*)\])")
_FONT = re.compile(r"\\f(?:\[[^\]]*\]|\(..|.)|\\s[-+]?\d+|\\\*(?:\[[^\]]*\]|\(..|.)")
_ARGUMENT = re.compile(r'"((?:[^"]|"")*)"|(\S+)')


def text_of(line: str) -> str:
    """A roff text line without its escapes and font changes."""
    line = _NAMED_CHAR.sub(lambda m: _NAMED.get(m.group(1) or m.group(2), ""), _FONT.sub("", line))
    return _ESCAPE.sub(lambda m: _ESCAPES[m.group(0)], line)


def _arguments(rest: str, joined: bool) -> str:
    args = [a or b for a, b in _ARGUMENT.findall(rest)]
    return text_of(("" if joined else " ").join(args))


def blocks(roff: str) -> list[tuple[str, str]]:
    """(structure macro, text) of each block of a page, in order: a heading (``SH``, ``SS``) and
    a ``.TP`` or ``.IP`` tag (``TP-tag``, ``IP-tag``) are blocks of their own, the text after a
    heading a ``body`` block; the text before the first structure macro is left out, and so is
    no-fill text."""
    out: list[tuple[str, str]] = []
    macro, lines = "", []
    tag_next = ""  # what the next text line is, when it is a block of its own (a heading, a .TP tag)
    closing = None  # the request that ends the no-fill text we are in

    def flush() -> None:
        if macro:
            out.append((macro, clean.clean_text(" ".join(lines))))

    def add(text: str) -> None:
        nonlocal tag_next
        if tag_next:
            out.append((tag_next, clean.clean_text(text)))
            tag_next = ""
        else:
            lines.append(text)

    for raw in roff.splitlines():
        if closing:
            if raw.startswith(("." + closing, "'" + closing)):
                closing = None
            continue
        if not raw.startswith((".", "'")):
            add(text_of(raw))
            continue
        name, _, rest = raw[1:].strip().partition(" ")
        if name in NO_FILL:
            closing = NO_FILL[name]
        elif name in STRUCTURE:
            flush()
            macro, lines, tag_next = STRUCTURE[name], [], "TP-tag" if name == "TP" else ""
            if name in ("SH", "SS"):
                macro = "body"
                if rest.strip():
                    out.append((name, clean.clean_text(_arguments(rest, joined=False))))
                else:
                    tag_next = name
            elif name == "IP" and rest.strip():
                tag = _ARGUMENT.findall(rest)[0]
                out.append(("IP-tag", clean.clean_text(text_of(tag[0] or tag[1]))))
        elif name in INLINE:
            add(_arguments(rest, joined=len(name) == 2 and name not in ("SM", "SB", "UR", "MT", "OP")))
    flush()
    return out


def read_page(path: Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8", errors="replace")


def page_pairs(en_roff: str, xx_roff: str) -> list[tuple[str, str]]:
    """Block pairs of a page and its translation, sentence by sentence where they match; none
    when the translation's structure is not the English page's."""
    en, xx = blocks(en_roff), blocks(xx_roff)
    if [m for m, _ in en] != [m for m, _ in xx[:len(en)]]:
        return []
    out = []
    for (macro, a), (_, b) in zip(en, xx):
        if a and b:
            out += clean.align_units([a], [b]) if macro in ("PP", "TP", "IP", "HP", "TQ", "body") else [(a, b)]
    return out


def man_pages(root: Path, lang: str | None = None) -> dict[str, Path]:
    """{"man1/ls.1.gz": file} of a package's pages in ``lang`` (None: the English ones)."""
    folder = root / "usr/share/man" / (lang or "")
    if not folder.is_dir():
        return {}
    return {f"{p.parent.name}/{p.name}": p for p in sorted(folder.glob("man*/*")) if p.is_file()}


def _wanted(path: str) -> bool:
    return path.startswith("usr/share/man/") or path.endswith("/copyright")


def english_pages(cache: Path | None = None) -> dict[str, tuple[Path, str]]:
    """{page: (file, package)} of the English originals, the first package listed winning."""
    out: dict[str, tuple[Path, str]] = {}
    for package in debian.fetch_debs(ENGLISH, cache):
        root = debian.extracted(package, _wanted, LABEL, cache)
        for page, path in man_pages(root).items():
            out.setdefault(page, (path, package))
    return out


def translation_packages(lang: str) -> tuple[str, str]:
    return f"manpages-{lang}", f"manpages-{lang}-dev"


def packages(cache: Path | None = None) -> dict[str, tuple[str, str]]:
    """{package: (version, licence)} of the translations' and the originals' packages."""
    names = [*ENGLISH, *OWN, *(p for lang in LANGUAGES for p in translation_packages(lang))]
    return debian.provenance(names, _wanted, LABEL, cache)


def rows(lang: str, cache: Path | None = None) -> Iterator[tuple[str, str, str, str]]:
    """(split, key, English, translation) of every translated page with an English original."""
    english = english_pages(cache)
    for package, deb in debian.fetch_debs((*translation_packages(lang), *OWN), cache).items():
        root = debian.extracted(package, _wanted, LABEL, cache)
        version = debian.package_version(deb)
        beside = man_pages(root)  # English pages in the same package: the same version
        for page, path in man_pages(root, lang).items():
            original = beside.get(page) or english.get(page, (None, ""))[0]
            if original is None:
                continue
            key = f"{package}@{version}:{page.removesuffix('.gz')}"
            split = clean.split_of(f"manpage:{page}")
            for en, xx in page_pairs(read_page(original), read_page(path)):
                yield split, key, en, xx
