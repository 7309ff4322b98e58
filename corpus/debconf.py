"""Debconf templates: the questions packages ask when they are installed or configured (admin
prose: what a setting means, what a choice does, warnings), translated by Debian's l10n teams.

A binary package's control archive holds them merged, one ``templates`` file: deb822 stanzas
whose ``Description`` (a short question, then paragraphs parted by `` .`` lines) and
``Choices`` (a comma-separated list, ``\\,`` for a literal comma) have translations in fields
such as ``Description-de.UTF-8`` and ``Choices-fr.UTF-8``. Descriptions are aligned as the
package descriptions are (corpus/ddtp.py: unit by unit where their paragraphs line up, else the
short lines alone); choices item by item where both lists are as long.

The packages are those of apt's indices (fetched by corpus/ddtp.py) that depend on debconf and
are at most ``MAX_SIZE`` bytes to download; a pair's key is ``source/package@version``, and the
split is by source package. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from corpus import clean, ddtp, debian

LANGUAGES = ("de", "fr", "es")
MAX_SIZE = 10_000_000  # bytes: a bigger package is not downloaded for its few questions
LABEL = "copyright"  # the cache folder of the copyright files extracted from each package
_DEBCONF = re.compile(r"(?:^|[\s,|])debconf(?:-2\.0)?(?:[\s,(|]|$)")
_CHOICE_SPLIT = re.compile(r"(?<!\\),\s*")
# apt sections whose packages ask installation questions of administrators; desktops' sections are
# not read (the data reserved for independent evaluation rides in desktop packages, DESIGN.md).
SECTIONS = frozenset({"admin", "comm", "database", "devel", "editors", "games", "graphics", "httpd", "interpreters",
                      "java", "kernel", "libs", "localization", "mail", "misc", "net", "news", "perl", "php",
                      "python", "science", "shells", "sound", "utils", "vcs", "video", "web"})


def candidates(lists: Path, max_size: int = MAX_SIZE) -> list[str]:
    """Packages of apt's indices in ``SECTIONS`` that depend on debconf (so may ship templates),
    smallest first."""
    found: dict[str, int] = {}
    for path in ddtp._index_files(lists, "*_binary-*_Packages*"):
        for st in ddtp.stanzas(ddtp._cat(path)):
            depends = st.get("Depends", "") + "," + st.get("Pre-Depends", "")
            size = int(st.get("Size", "0") or 0)
            name = st.get("Package", "")
            if st.get("Section", "").rpartition("/")[2] not in SECTIONS:
                continue
            if name and _DEBCONF.search(depends) and size <= max_size:
                found[name] = min(size, found.get(name, size))
    return sorted(found, key=lambda name: (found[name], name))


def field(stanza: dict[str, str], name: str, lang: str) -> str | None:
    """A template's field in ``lang`` (``Description-de.UTF-8``, ``-de``, ``-de_DE.UTF-8``)."""
    for suffix in (f"{lang}.UTF-8", lang, f"{lang}_{lang.upper()}.UTF-8", f"{lang}_{lang.upper()}"):
        if f"{name}-{suffix}" in stanza:
            return stanza[f"{name}-{suffix}"]
    return None


def choices(text: str) -> list[str]:
    return [c.replace("\\,", ",").strip() for c in _CHOICE_SPLIT.split(text.strip())]


def description(text: str) -> ddtp.Description:
    short, _, long_ = text.partition("\n")
    return ddtp.Description("", "", short.strip(), long_)


def template_pairs(templates: str, lang: str) -> Iterator[tuple[str, str]]:
    """(English, translation) of every translated description unit and choice of one file."""
    for stanza in ddtp.stanzas(templates):
        en, xx = stanza.get("Description"), field(stanza, "Description", lang)
        if en and xx:
            yield from ddtp.aligned(description(en), description(xx))
        en, xx = stanza.get("Choices"), field(stanza, "Choices", lang)
        if en and xx:
            en_items, xx_items = choices(en), choices(xx)
            if len(en_items) == len(xx_items):
                yield from zip(map(clean.clean_text, en_items), map(clean.clean_text, xx_items))


def source_of(control: str, package: str) -> str:
    st = next(ddtp.stanzas(control), {})
    return st.get("Source", package).split(" ")[0]


def packages(cache: Path | None = None) -> dict[str, tuple[str, str]]:
    """{package: (version, licence)} of every package whose templates were read."""
    out = {}
    for package, deb in debian.fetch_debs(candidates(ddtp.fetch_indices(cache)), cache).items():
        if debian.control_file(package, "templates", cache) is None:
            continue
        copyright_file = f"usr/share/doc/{package}/copyright"
        root = debian.extracted(package, copyright_file.__eq__, LABEL, cache)
        out[package] = (debian.package_version(deb), debian.package_license(root, package))
    return out


def rows(lang: str, cache: Path | None = None) -> Iterator[tuple[str, str, str, str]]:
    """(split, key, English, translation) of every package's templates, split by source package."""
    for package, deb in debian.fetch_debs(candidates(ddtp.fetch_indices(cache)), cache).items():
        templates = debian.control_file(package, "templates", cache)
        if templates is None:
            continue
        control = (debian.control_file(package, "control", cache) or b"").decode("utf-8", errors="replace")
        source = source_of(control, package)
        key = f"{source}/{package}@{debian.package_version(deb)}"
        for en, xx in template_pairs(templates.decode("utf-8", errors="replace"), lang):
            yield clean.split_of(source), key, en, xx
