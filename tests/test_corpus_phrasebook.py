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
    assert len(entries) == 564
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
    assert len(got) == 564


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


def test_name_swaps_put_each_name_of_its_gender_where_an_entry_holds_one(tmp_path: Path) -> None:
    book = tmp_path / "phrasebook.tsv"
    book.write_text("category\ten\tde\tfr\tes\n"
                    "email\tDear Sophie,\tLiebe Sophie,\tChère Sophie,\tQuerida Sophie:\n"
                    "work\tThis is Emma's desk.\tDas ist Emmas Tisch.\tC'est le bureau d'Emma.\tEs la mesa de Emma.\n"
                    "work\tIt's Emma's turn.\tEmma ist dran.\tC'est au tour d'Emma.\tLe toca a Emma.\n"
                    "greeting\tHello, Tom.\tHallo, Tom.\tBonjour, Tom.\tHola, Tom.\n"
                    "greeting\tGood evening, Mr Martin.\tGuten Abend, Herr Martin.\tBonsoir, Monsieur Martin.\t"
                    "Buenas tardes, señor Martin.\n"
                    "email\tBest regards, Laura Martin\tViele Grüße, Laura Martin\tCordialement, Laura Martin\t"
                    "Saludos, Laura Martin\n",
                    encoding="utf-8")
    rows = phrasebook.name_rows("train", "de", book)
    women = [n for n in phrasebook.FEMALE_NAMES if n != "Sophie"]
    # "Emmas Tisch": not a word in every text, so not swapped; after "d'" only a vowel-initial
    # name of her gender; "Mr Martin" is a surname, "Laura Martin" swaps Laura
    vowel = [n for n in women if n[0] in "AEIOU" and n != "Emma"]
    assert vowel == ["Elizabeth", "Elowen", "Aisha", "Ingrid", "Olga"]
    assert [r[1] for r in rows] == ([f"Dear {n}," for n in women] + [f"It's {n}'s turn." for n in vowel]
                                    + [f"Hello, {n}." for n in phrasebook.MALE_NAMES]
                                    + [f"Best regards, {n} Martin" for n in phrasebook.FEMALE_NAMES if n != "Laura"])
    assert rows[0] == ("phrasebook-names:email:0:Mary", "Dear Mary,", "Liebe Mary,")
    assert ("phrasebook-names:work:2:Elizabeth", "It's Elizabeth's turn.", "Elizabeth ist dran.") in rows
    assert phrasebook.name_rows("train", "fr", book)[len(women)] == (
        "phrasebook-names:work:2:Elizabeth", "It's Elizabeth's turn.", "C'est au tour d'Elizabeth.")
    # a yardstick name is swapped out, never in
    assert not any("Tom" in text for _, en, de in rows for text in (en, de))
    assert phrasebook.name_rows("dev", "de", book) == phrasebook.name_rows("test", "de", book) == []
    with pytest.raises(UsageError, match="phrasebook language 'it' is not one of de, fr, es"):
        phrasebook.name_rows("train", "it", book)


def test_name_swaps_keep_french_elision_and_stay_off_the_yardstick() -> None:
    yardstick = set().union(*everyday_rows().values())
    texts = [t for lang in phrasebook.LANGUAGES for _, en, xx in phrasebook.name_rows("train", lang) for t in (en, xx)]
    assert len(texts) == 2 * 3 * 2915
    assert [t for t in texts if near_key(t) in yardstick] == []
    french = [fr for _, _, fr in phrasebook.name_rows("train", "fr")]
    vowel = [n for n in phrasebook.NAMES if n[0] in "AEIOU"]
    assert not any(f"de {n}" in t for n in vowel for t in french)  # "d'Andrew", never "de Andrew"
    assert not any(f"d'{n}" in t for n in phrasebook.NAMES if n not in vowel for t in french)
    assert "Tu as des nouvelles d'Oliver ?" in french


def test_name_swaps_are_a_source_of_their_own() -> None:
    got = phrasebook.pairs(["en-es"], "train", source=phrasebook.NAMES_SOURCE)
    assert len(got) == 2915 and got[0].src == "Hello, my name is Mary."
    with pytest.raises(UsageError, match="phrasebook source 'phrasebook-dates' is not one of phrasebook, "
                                         "phrasebook-names"):
        phrasebook.pairs(["en-es"], "train", source="phrasebook-dates")
