"""A phrasebook written for this project: everyday English with German, French and Spanish
translations (``corpus/data/phrasebook.tsv``: category, en, de, fr, es), training only.

Debian's human translations hold almost no conversation: "Good morning" occurs a handful of
times in a million pairs, "Best regards" twice, so the model copied or garbled the first thing
people type ("Hello!" -> "Hello!", "Best regards" -> "Bestache"). These entries are greetings,
farewells, thanks, apologies, requests, e-mail openings and closings, small talk, travel, shops,
restaurants, health, times and office and computer phrases, each written in the register a
native speaker would use (tu/du in casual lines, vous/Sie in formal ones).

``phrasebook-names`` (``name_rows``) repeats every entry that holds a given name, written alike
in all four languages ("Kind regards, Sophie" / "Freundliche Grüße, Sophie"), with each other
name of ``NAMES`` of its gender in its place. A model that learned the Bible turns the names people sign
with into the Bible's ("Paul will call you tomorrow." -> "Paulus wird dich morgen anrufen.",
"Peter and John" -> "Petrus und Johannes", "Pierre et Jean"); in a closing, a request or an
appointment a name is copied as it is, whichever name it is.

Kept apart from the yardstick on purpose: no entry shares a near key (corpus.clean.near_key)
with any text of ``bench/data/everyday.tsv`` (tests/test_corpus_phrasebook.py checks it), and
``bench.modern_eval``'s ``everyday-unseen`` counts the phrasebook as seen text.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from pathlib import Path

from cli import UsageError
from corpus.bible import Pair
from corpus.tsv import Row, directed_pairs

SOURCE = "phrasebook"
NAMES_SOURCE = "phrasebook-names"
SOURCES = (SOURCE, NAMES_SOURCE)
# Given names swapped into the entries that hold one: the ones the Bible translates (Paul ->
# Paulus, Pierre, Pablo; John -> Johannes, Jean, Juan) and everyday ones of the four languages,
# by grammatical gender, as "Dear Anna," is "Liebe Anna," / "Chère Anna," / "Querida Anna,":
# a name only takes the place of one of its own gender. The last ten of each list but Kwame (three
# times) occur nowhere in the Debian corpus: a name the model has never seen is still copied, where
# the game dialogue had taught it to write a unit's name instead ("Mebrin, please" -> "Please, scout").
MALE_NAMES = ("Paul", "John", "Mark", "Matthew", "Thomas", "James", "Simon", "Andrew", "Philip", "David", "Daniel",
              "Michael", "Stephen", "Luke", "Joseph", "Samuel", "Benjamin", "Jacob", "Ben", "Oliver", "Marco",
              "Carlos", "Jonas", "Sam", "Martin", "Hans", "Pierre", "Ahmed", "Aldric", "Corwin", "Evander", "Idris",
              "Kenji", "Luca", "Omar", "Leif", "Theo", "Kwame")
FEMALE_NAMES = ("Mary", "Martha", "Sarah", "Elizabeth", "Ruth", "Emma", "Julia", "Laura", "Lisa", "Sophie", "Lena",
                "Nina", "Mia", "Lucía", "Chloé", "Tamsin", "Elowen", "Rowena", "Brenna", "Aisha", "Ingrid", "Fatima",
                "Olga", "Greta", "Freya")
NAMES = (*MALE_NAMES, *FEMALE_NAMES)
# None of the yardstick's names (Anna, Peter, Tom) is swapped in: a swap must not write one of
# its texts. Entries that hold them are swapped out.
YARDSTICK_MALE, YARDSTICK_FEMALE = ("Peter", "Tom"), ("Anna",)
# A name after a title is a surname ("Mr Martin", "docteur Martin"): such entries are not swapped.
_TITLE = re.compile(r"(?<!\w)(Mr|Mrs|Ms|Dr|Dra|Herr|Frau|Monsieur|Madame|docteur|señor|señora|doctor|doctora)\.? $",
                    re.IGNORECASE)
# French elides before a vowel ("d'Emma", "qu'Oliver") and not before a consonant ("de Paul"):
# where a French text puts one of these words before the name, only a name beginning alike
# (vowel or not) takes its place.
_ELIDING = re.compile(r"(?<!\w)(d'|qu'|l'|j'|de |que |le |la |je )$", re.IGNORECASE)
PATH = Path(__file__).parent / "data" / "phrasebook.tsv"
LANGUAGES = ("de", "fr", "es")
COLUMNS = ("category", "en", *LANGUAGES)
_VOWELS = frozenset("AEIOU")


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


def _training_entries(split: str, lang: str, path: Path) -> list[dict[str, str]]:
    """The entries for ``split``: all of them for ``train``, none for dev or test (the everyday
    yardstick is ``bench/data/everyday.tsv``); UsageError for a language it does not hold."""
    if lang not in LANGUAGES:
        raise UsageError(f"phrasebook language {lang!r} is not one of {', '.join(LANGUAGES)}")
    return entries(path) if split == "train" else []


def read_rows(split: str, lang: str, path: Path = PATH) -> list[Row]:
    """(key, English, translation) rows: all of them for ``train``, none for dev or test."""
    rows = _training_entries(split, lang, path)
    return [(f"{SOURCE}:{e['category']}:{i}", e["en"], e[lang]) for i, e in enumerate(rows)]


# Each given name as a whole word, compiled once.
_WORDS = {n: re.compile(rf"(?<!\w){re.escape(n)}(?!\w)") for n in (*NAMES, *YARDSTICK_MALE, *YARDSTICK_FEMALE)}


def _name_in(entry: dict[str, str]) -> str | None:
    """The given name (``NAMES`` or the yardstick's) that all four texts of ``entry`` hold as a
    word and the English names first ("Laura" in "Best regards, Laura Martin"), or None; None
    too where a title stands before it (then it is a surname: "Mr Martin", "docteur Martin")."""
    texts = [entry[c] for c in ("en", *LANGUAGES)]
    held = []
    for name, word in _WORDS.items():
        found = [list(word.finditer(t)) for t in texts]
        if all(found):
            held.append((found[0][0].start(), name, found))
    if not held:
        return None
    _, name, found = min(held)
    titled = any(_TITLE.search(t[:m.start()]) for t, ms in zip(texts, found, strict=True) for m in ms)
    return None if titled else name


def _swaps(name: str, french: str) -> list[str]:
    """The names that may take ``name``'s place in an entry whose French text is ``french``: the
    others of its gender, and of those only the ones that begin alike (vowel or not) where the
    French elides or would elide before it."""
    male = name in MALE_NAMES or name in YARDSTICK_MALE
    same = [n for n in (MALE_NAMES if male else FEMALE_NAMES) if n != name]
    if any(_ELIDING.search(french[:m.start()]) for m in _WORDS[name].finditer(french)):
        same = [n for n in same if (n[0] in _VOWELS) == (name[0] in _VOWELS)]
    return same


def name_rows(split: str, lang: str, path: Path = PATH) -> list[Row]:
    """``phrasebook-names`` rows: each entry that holds a name of ``NAMES`` once per name that
    may take its place (``_swaps``), in both texts; training only, like the phrasebook."""
    out = []
    for i, e in enumerate(_training_entries(split, lang, path)):
        name = _name_in(e)
        if name is not None:
            word = _WORDS[name]
            out += [(f"{NAMES_SOURCE}:{e['category']}:{i}:{other}", word.sub(other, e["en"]), word.sub(other, e[lang]))
                    for other in _swaps(name, e["fr"])]
    return out


def pairs(directions: Sequence[str], split: str, path: Path = PATH, source: str = SOURCE) -> list[Pair]:
    """Pairs of one split for every direction (en-xx or xx-en) the phrasebook (``SOURCE``) or its
    name swaps (``NAMES_SOURCE``) cover."""
    read = {SOURCE: read_rows, NAMES_SOURCE: name_rows}.get(source)
    if read is None:
        raise UsageError(f"phrasebook source {source!r} is not one of {SOURCE}, {NAMES_SOURCE}")
    return directed_pairs(lambda lang: read(split, lang, path), directions, LANGUAGES)
