"""The phrasebook: its file's shape, training-only rows, and its distance from the everyday
yardstick (no text of it shares a near key with any text of bench/data/everyday.tsv)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.modern_eval import everyday_rows
from cli import UsageError
from corpus import phrasebook
from corpus.clean import near_key


def test_every_entry_has_four_texts_and_a_known_category() -> None:
    entries = phrasebook.entries()
    assert len(entries) == 456
    assert {e["category"] for e in entries} == {"greeting", "farewell", "thanks", "apology", "request", "email",
                                                "smalltalk", "travel", "shopping", "restaurant", "health", "time",
                                                "work", "computer"}
    assert entries[0] == {"category": "greeting", "en": "Hello, Mr Weber.", "de": "Hallo, Herr Weber.",
                          "fr": "Bonjour, Monsieur Weber.", "es": "Hola, señor Weber."}


def test_no_text_is_near_a_yardstick_text() -> None:
    yardstick = set().union(*everyday_rows().values())
    near = [e[c] for e in phrasebook.entries() for c in ("en", "de", "fr", "es") if near_key(e[c]) in yardstick]
    assert near == []


def test_rows_are_training_only_and_keyed_by_category() -> None:
    train = phrasebook.read_rows("train", "fr")
    assert train[0] == ("phrasebook:greeting:0", "Hello, Mr Weber.", "Bonjour, Monsieur Weber.")
    assert phrasebook.read_rows("dev", "fr") == phrasebook.read_rows("test", "fr") == []
    got = phrasebook.pairs(["es-en", "de-fr"], "train")  # de-fr: not a phrasebook direction
    assert (got[0].src_lang, got[0].tgt_lang, got[0].src, got[0].tgt) == ("es", "en", "Hola, señor Weber.",
                                                                          "Hello, Mr Weber.")
    assert len(got) == 456


def test_a_broken_file_fails_loudly(tmp_path: Path) -> None:
    bad = tmp_path / "phrasebook.tsv"
    bad.write_text("category\ten\tde\tfr\tes\ngreeting\tHello\tHallo\t\tHola\n", encoding="utf-8")
    with pytest.raises(UsageError, match=r"phrasebook.tsv:2: every row needs exactly 5 non-empty cells"):
        phrasebook.entries(bad)
    bad.write_text("category\ten\tde\n", encoding="utf-8")
    with pytest.raises(UsageError, match="the header must be category en de fr es, not category en de"):
        phrasebook.entries(bad)
    with pytest.raises(UsageError, match="phrasebook language 'it' is not one of de, fr, es"):
        phrasebook.read_rows("train", "it")


def test_name_swaps_put_each_name_where_an_entry_holds_one(tmp_path: Path) -> None:
    book = tmp_path / "phrasebook.tsv"
    book.write_text("category\ten\tde\tfr\tes\n"
                    "email\tKind regards, Sophie\tFreundliche Grüße, Sophie\tCordialement, Sophie\tSaludos, Sophie\n"
                    "work\tThis is Emma's desk.\tDas ist Emmas Tisch.\tC'est le bureau d'Emma.\tEs la mesa de Emma.\n"
                    "email\tHi Emma!\tHallo Emma!\tSalut Emma !\t¡Hola, Emma!\n"
                    "greeting\tHello, Tom.\tHallo, Tom.\tBonjour, Tom.\tHola, Tom.\n",
                    encoding="utf-8")
    rows = phrasebook.name_rows("train", "de", book)
    consonants = [n for n in phrasebook.NAMES if n[0] not in "AEIOU"]
    consonant = [n for n in consonants if n != "Sophie"]
    vowel = [n for n in phrasebook.NAMES if n[0] in "AEIOU" and n != "Emma"]
    # "Emma's desk" / "Emmas Tisch": not a word in every text, so not swapped
    assert [r[1] for r in rows] == ([f"Kind regards, {n}" for n in consonant] + [f"Hi {n}!" for n in vowel]
                                    + [f"Hello, {n}." for n in consonants])
    assert rows[0] == ("phrasebook-names:email:0:Paul", "Kind regards, Paul", "Freundliche Grüße, Paul")
    assert ("phrasebook-names:email:2:Andrew", "Hi Andrew!", "Hallo Andrew!") in rows
    # a yardstick name is swapped out, never in
    assert not any("Tom" in text for _, en, de in rows for text in (en, de))
    assert phrasebook.name_rows("dev", "de", book) == phrasebook.name_rows("test", "de", book) == []
    with pytest.raises(UsageError, match="phrasebook language 'it' is not one of de, fr, es"):
        phrasebook.name_rows("train", "it", book)


def test_name_swaps_keep_french_elision_and_stay_off_the_yardstick() -> None:
    yardstick = set().union(*everyday_rows().values())
    texts = [t for lang in phrasebook.LANGUAGES for _, en, xx in phrasebook.name_rows("train", lang) for t in (en, xx)]
    assert len(texts) == 2 * 3 * 1670
    assert [t for t in texts if near_key(t) in yardstick] == []
    assert not any(f"d'{n}" in t or f"de {n}" in t for n in phrasebook.NAMES if n[0] in "AEIOU" for t in texts)


def test_name_swaps_are_a_source_of_their_own() -> None:
    got = phrasebook.pairs(["en-es"], "train", source=phrasebook.NAMES_SOURCE)
    assert len(got) == 1670 and got[0].src == "Hello, my name is Paul."
    with pytest.raises(UsageError, match="phrasebook source 'phrasebook-dates' is not one of phrasebook, "
                                         "phrasebook-names"):
        phrasebook.pairs(["en-es"], "train", source="phrasebook-dates")
