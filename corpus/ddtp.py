"""Debian's translated package descriptions (the Debian Description Translation Project).

apt's ``Translation-de``, ``-fr`` and ``-es`` indices hold the human translations of package
descriptions, each keyed by the ``Description-md5`` of its English original in
``Translation-en``. They are fetched with the machine's own apt sources into a private lists
folder (``apt-get update -o Dir::State::Lists=...``: nothing installed, the system's lists
untouched) and read with ``apt-helper cat-file``, which undoes any compression apt chose.

A description is its short line and its paragraphs (`` .`` lines part them); bullet items
are units of their own. Descriptions whose units line up one to one are aligned unit by unit,
and each unit is cut into sentences where both sides hold as many; otherwise only the short
descriptions are paired. Split by source package (all binaries of one source in one split).
Every pair's key is ``source/binary@version``: traceable to the package it came from; the
translations are DDTP's, under the terms of the package's own description.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cli import UsageError
from corpus import clean, debian

LANGUAGES = ("de", "fr", "es")
_BULLET = re.compile(r"^\s*(?:[*+-]|o|\d+[.)])\s+")


@dataclass(frozen=True)
class Description:
    package: str
    md5: str
    short: str
    long: str  # the continuation lines, each still starting with its space


def lists_dir(cache: Path | None = None) -> Path:
    return (cache or debian.cache_dir()) / "apt-lists"


def fetch_indices(cache: Path | None = None, force: bool = False) -> Path:
    """The private lists folder with Packages and Translation-{en,de,fr,es}, fetched once."""
    lists = lists_dir(cache)
    if not force and list(lists.glob("*_i18n_Translation-de*")):
        return lists
    if not shutil.which("apt-get"):
        raise UsageError("the translated package descriptions come from apt's indices and apt-get is not here")
    (lists / "partial").mkdir(parents=True, exist_ok=True)
    apt_cache = lists.parent / "apt-cache"
    (apt_cache / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    cmd = ["apt-get", "update", "-q", "-o", f"Dir::State::Lists={lists}", "-o", f"Dir::Cache={apt_cache}",
           "-o", "Acquire::Languages=en," + ",".join(LANGUAGES), "-o", "Debug::NoLocking=1"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode or not list(lists.glob("*_i18n_Translation-de*")):
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise UsageError(f"apt-get update into {lists} failed ({detail[-1] if detail else 'no output'})")
    return lists


def _cat(path: Path) -> str:
    helper = "/usr/lib/apt/apt-helper"
    if os.path.exists(helper):
        return subprocess.run([helper, "cat-file", str(path)], capture_output=True, check=True).stdout.decode(
            "utf-8", errors="replace")
    return path.read_text(encoding="utf-8", errors="replace")  # an uncompressed index


def stanzas(text: str) -> Iterator[dict[str, str]]:
    """deb822 paragraphs as {field: value}, continuation lines kept with their newline."""
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        name = None
        for line in block.split("\n"):
            if line.startswith((" ", "\t")) and name:
                fields[name] += "\n" + line
            elif ":" in line:
                name, value = line.split(":", 1)
                fields[name] = value.strip()
        if fields:
            yield fields


def _index_files(lists: Path, pattern: str) -> list[Path]:
    return sorted(p for p in lists.glob(pattern) if not p.name.endswith(".diff") and p.is_file())


@functools.lru_cache(maxsize=4)
def descriptions(lang: str, lists: Path) -> dict[str, Description]:
    """{Description-md5: Description} of one language's translation indices."""
    out = {}
    for path in _index_files(lists, f"*_i18n_Translation-{lang}*"):
        for st in stanzas(_cat(path)):
            body = st.get(f"Description-{lang}")
            if not body or "Description-md5" not in st:
                continue
            short, _, long_ = body.partition("\n")
            out[st["Description-md5"]] = Description(st.get("Package", ""), st["Description-md5"], short.strip(), long_)
    return out


@functools.lru_cache(maxsize=1)
def package_sources(lists: Path) -> dict[str, tuple[str, str]]:
    """{binary package: (source package, version)} from the Packages indices."""
    out = {}
    for path in _index_files(lists, "*_binary-*_Packages*"):
        for st in stanzas(_cat(path)):
            name = st.get("Package")
            if not name:
                continue
            source = st.get("Source", name).split(" ")[0]
            out[name] = (source, st.get("Version", ""))
    return out


def units(desc: Description) -> list[str]:
    """The short description, then each paragraph or bullet item of the long one, as text."""
    out = [desc.short]
    for para in re.split(r"\n \.\s*(?=\n|$)", desc.long):
        items: list[list[str]] = []
        for line in para.split("\n"):
            if not line.strip():
                continue
            if _BULLET.match(line) or not items:
                items.append([_BULLET.sub("", line).strip()])
            else:
                items[-1].append(line.strip())
        out += [" ".join(item) for item in items]
    return [u for u in out if u]


def aligned(english: Description, other: Description) -> list[tuple[str, str]]:
    """Unit pairs of one description, or the short descriptions alone when the units differ."""
    en, xx = [clean.clean_text(u) for u in units(english)], [clean.clean_text(u) for u in units(other)]
    if len(en) != len(xx):
        return [(en[0], xx[0])]
    return clean.align_units(en, xx)


def rows(lang: str, cache: Path | None = None) -> Iterator[tuple[str, str, str, str]]:
    """(split, key, English, translation) of every aligned unit, split by source package."""

    lists = fetch_indices(cache)
    english, other = descriptions("en", lists), descriptions(lang, lists)
    sources = package_sources(lists)
    for md5, theirs in sorted(other.items()):
        ours = english.get(md5)
        if ours is None:
            continue
        source, version = sources.get(ours.package, (ours.package, ""))
        key = f"{source}/{ours.package}@{version}" if version else f"{source}/{ours.package}"
        for en, xx in aligned(ours, theirs):
            yield clean.split_of(source), key, en, xx
