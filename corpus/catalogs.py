"""Message catalogs that Debian's packages ship: game dialogue and narration (Wesnoth, Freeciv,
Widelands, Warzone 2100), desktop applications (KDE, Xfce, LXQt, Qt programs, GIMP, Inkscape,
VLC, ...) and command-line tools (GCC, git, PostgreSQL, coreutils, ...); the packages are
listed in corpus/catalog_packages.py. Two formats: gettext's ``.mo`` and Qt's ``.qm``
(corpus/qm.py), both read with the standard library.

The English side is the msgid (the programs' source language). Contexts (``ctxt\\x04``, KDE's
old ``_: ...\\n`` comments, GLib's ``context|`` and Wesnoth's ``context^`` prefixes the translation
does without) are not
text and go; plural entries give two pairs, singular and plural (German, French and Spanish have
two forms); a Qt plural message pairs its one source with the plural form. The header, the
translators' credits, and entries whose translation is empty or fuzzy (never compiled) give
nothing. Each package is one unit of splitting (a program's strings are in one split; a few
whole packages are held out) and each pair's key is ``package@version:catalog``;
``packages()`` gives each package's version and licence (from its copyright file).
Standard library only.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from pathlib import Path

from corpus import debian, qm
from corpus.catalog_packages import PACKAGES
from corpus.clean import clean_text, strip_accelerators

LANGUAGES = ("de", "fr", "es")
# Whole packages held out, one of each kind of text: dialogue, UI messages, an editor's strings,
# command-line messages.
HELD_OUT = {"test": ("wesnoth-1.16-tsg", "konsole", "mousepad", "findutils"),
            "dev": ("wesnoth-1.16-ttb", "ark", "parole", "diffutils")}
LABEL = "catalogs"  # the cache folder of the files extracted from each package
CREDITS = frozenset({"translator-credits", "Your names", "Your emails", "NAME OF TRANSLATORS",
                     "EMAIL OF TRANSLATORS", "translator_credits", "translator-names"})
_QM_NAME = re.compile(r"^(?:(?P<stem>.*)[_.-])?(?P<lang>de|fr|es)(?:_(?:DE|FR|ES))?\.qm$")
_KDE_COMMENT = re.compile(r"^_: [^\n]*\n")
_PREFIX_CONTEXT = re.compile(r"^[^|^\s][^|^]*[|^](?=.)")  # GLib's "context|text", Wesnoth's "context^text"
_CHARSET = re.compile(r"charset=([\w.-]+)", re.I)


def language_dir(name: str) -> str | None:
    """de, fr or es for a locale folder name (``de``, ``de_DE``), None for any other."""
    lang = name.split("_")[0]
    return lang if lang in LANGUAGES and name in (lang, f"{lang}_{lang.upper()}") else None


def catalog_language(path: str) -> str | None:
    """The language of a catalog inside a package (``.../de/LC_MESSAGES/x.mo``, ``.../x_de.qm``)."""
    parts = path.split("/")
    if path.endswith(".mo") and len(parts) >= 3 and parts[-2] == "LC_MESSAGES":
        return language_dir(parts[-3])
    m = _QM_NAME.match(parts[-1])
    return m.group("lang") if m else None


def wanted(path: str) -> bool:
    """A package's file to extract: a catalog in one of our languages, or its copyright file."""
    return catalog_language(path) is not None or (path.startswith("usr/share/doc/") and path.endswith("/copyright"))


def catalog_files(root: Path, lang: str) -> list[Path]:
    """Every ``.mo`` and ``.qm`` of ``lang`` in an unpacked package."""
    return sorted(p for p in root.rglob("*") if p.suffix in (".mo", ".qm")
                  and catalog_language(p.relative_to(root).as_posix()) == lang)


def catalog_name(path: Path) -> str:
    m = _QM_NAME.match(path.name)
    return (m.group("stem") or path.parent.name) if path.suffix == ".qm" and m else path.stem


def mo_messages(data: bytes) -> Iterator[tuple[str, str, str, list[str]]]:
    """(context, msgid, msgid_plural, translations) of every entry of a gettext .mo file."""
    magic = struct.unpack_from("<I", data)[0]
    order = "<" if magic == 0x950412DE else ">" if magic == 0xDE120495 else None
    if order is None:
        raise ValueError("not a gettext .mo file (wrong magic number)")
    _, count, originals, translations = struct.unpack_from(order + "4I", data, 4)
    raw = []
    for i in range(count):
        olen, opos = struct.unpack_from(order + "2I", data, originals + 8 * i)
        tlen, tpos = struct.unpack_from(order + "2I", data, translations + 8 * i)
        raw.append((data[opos:opos + olen], data[tpos:tpos + tlen]))
    header = next((t for o, t in raw if o == b""), b"").decode("ascii", errors="replace")
    m = _CHARSET.search(header)
    charset = m.group(1) if m and m.group(1).upper() != "CHARSET" else "utf-8"
    for original, translated in raw:
        if not original:
            continue
        text = original.decode(charset, errors="replace")
        context, _, text = text.rpartition("\x04")
        msgid, _, plural = text.partition("\x00")
        yield context, msgid, plural, translated.decode(charset, errors="replace").split("\x00")


def _without_context(en: str, xx: str) -> str:
    en = _KDE_COMMENT.sub("", en)
    for mark in "|^":
        if mark not in xx and en.count(mark) == 1:
            return _PREFIX_CONTEXT.sub("", en)
    return en


def entries(path: Path) -> Iterator[tuple[str, str]]:
    """(English, translation) of every translated entry of one catalog (.mo or .qm)."""
    data = path.read_bytes()
    if path.suffix == ".qm":
        for message in qm.messages(data):
            if message.source and message.translations and message.context not in CREDITS:
                yield _without_context(message.source, message.translations[-1]), message.translations[-1]
        return
    for context, msgid, plural, forms in mo_messages(data):
        if context in CREDITS or msgid in CREDITS:
            continue
        pairs = [(msgid, forms[0])] + ([(plural, forms[1])] if plural and len(forms) == 2 else [])
        for en, xx in pairs:
            if en and xx:
                yield _without_context(en, xx), xx


def split_of(package: str) -> str:
    return next((split for split, held in HELD_OUT.items() if package in held), "train")


def packages(names: tuple[str, ...] = PACKAGES, cache: Path | None = None) -> dict[str, tuple[str, str]]:
    """{package: (version, licence)} of every package read (licence "" where its copyright file
    is not machine-readable)."""
    return debian.provenance(names, wanted, LABEL, cache)


def rows(lang: str, names: tuple[str, ...] = PACKAGES,
         cache: Path | None = None) -> Iterator[tuple[str, str, str, str]]:
    """(split, key, English, translation) of every catalog entry of ``lang`` in ``names``."""
    for package, deb in debian.fetch_debs(names, cache).items():
        root = debian.extracted(package, wanted, LABEL, cache)
        version = debian.package_version(deb)
        for path in catalog_files(root, lang):
            key = f"{package}@{version}:{catalog_name(path)}"
            for en, xx in entries(path):
                yield split_of(package), key, clean_text(strip_accelerators(en)), clean_text(strip_accelerators(xx))
