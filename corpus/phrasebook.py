"""A phrasebook written for this project: everyday English with German, French and Spanish
translations (``corpus/data/phrasebook.tsv``: category, en, de, fr, es), training only.

Debian's human translations hold almost no conversation: "Good morning" occurs a handful of
times in a million pairs, "Best regards" twice, so the model copied or garbled the first thing
people type ("Hello!" -> "Hello!", "Best regards" -> "Bestache"). These entries are greetings,
farewells, thanks, apologies, requests, e-mail openings and closings, small talk, travel, shops,
restaurants, health, times and office and computer phrases, each written in the register a
native speaker would use (tu/du in casual lines, vous/Sie in formal ones).

Kept apart from the yardstick on purpose: no entry shares a near key (corpus.clean.near_key)
with any text of ``bench/data/everyday.tsv`` (tests/test_corpus_phrasebook.py checks it), and
``bench.modern_eval``'s ``everyday-unseen`` counts the phrasebook as seen text.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from cli import UsageError
from corpus.bible import Pair
from corpus.tsv import Row, directed_pairs

SOURCE = "phrasebook"
PATH = Path(__file__).parent / "data" / "phrasebook.tsv"
LANGUAGES = ("de", "fr", "es")
COLUMNS = ("category", "en", *LANGUAGES)


def entries(path: Path = PATH) -> list[dict[str, str]]:
    """The phrasebook's rows as {column: text}; a row with an empty or missing cell fails loudly."""
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise UsageError(f"{path}: the header must be {' '.join(COLUMNS)}, not {' '.join(reader.fieldnames or ())}")
        out = []
        for line, row in enumerate(reader, start=2):
            if any(not (row.get(c) or "").strip() for c in COLUMNS) or None in row:
                raise UsageError(f"{path}:{line}: every row needs exactly {len(COLUMNS)} non-empty cells")
            out.append({c: row[c].strip() for c in COLUMNS})
    return out


def read_rows(split: str, lang: str, path: Path = PATH) -> list[Row]:
    """(key, English, translation) rows: all of them for ``train``, none for dev or test (the
    everyday yardstick is ``bench/data/everyday.tsv``)."""
    if lang not in LANGUAGES:
        raise UsageError(f"phrasebook language {lang!r} is not one of {', '.join(LANGUAGES)}")
    if split != "train":
        return []
    return [(f"{SOURCE}:{e['category']}:{i}", e["en"], e[lang]) for i, e in enumerate(entries(path))]


def pairs(directions: Sequence[str], split: str, path: Path = PATH) -> list[Pair]:
    """Pairs of one split for every direction (en-xx or xx-en) the phrasebook covers."""
    return directed_pairs(lambda lang: read_rows(split, lang, path), directions, LANGUAGES)
