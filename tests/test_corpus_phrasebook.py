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
