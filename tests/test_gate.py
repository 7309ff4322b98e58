"""bench/gate.py: the quality gate's sets and its table (the served scores: tests/test_default_model.py)."""

from __future__ import annotations

import pytest

from bench.gate import (
    CARD_SECTION,
    EVERYDAY_PHRASES,
    GATE_VERSES,
    HELP_PARAGRAPHS,
    SETS,
    card_table,
    floors,
    gate_sets,
    help_set,
    lowest,
    main,
    score,
    shipped_scores,
    table,
)


def test_the_three_sets_cover_the_six_directions_with_fixed_sizes():
    sets = gate_sets()
    directions = ["de-en", "en-de", "en-es", "en-fr", "es-en", "fr-en"]
    assert list(sets) == ["john", "help", "everyday"]
    for name, size in (("john", GATE_VERSES), ("help", HELP_PARAGRAPHS), ("everyday", EVERYDAY_PHRASES)):
        assert sorted(sets[name]) == directions
        assert {len(s) for s, _ in sets[name].values()} == {size}
        assert all(len(s) == len(r) and all(s) and all(r) for s, r in sets[name].values())
    en, de = sets["help"]["en-de"]
    assert sets["help"]["de-en"] == (de, en)  # each paragraph both ways


def test_john_is_scored_by_bleu_and_the_rest_by_chrf():
    assert score("john", ["In the beginning was the Word."], ["In the beginning was the Word."]) == pytest.approx(100)
    assert score("help", ["abc"], ["abc"]) == 100.0
    assert score("john", ["x y z w"], ["a b c d"]) == 0.0


def test_the_table_has_a_row_per_set_and_width():
    results = {"int8w8": {"john": {"en-de": 26.52, "de-en": 38.64}, "help": {"en-de": 59.25}},
               "int8": {"john": {"en-de": 26.04, "de-en": 37.67}}}
    assert table(results).splitlines() == [
        "| set | graphs | de-en | en-de |",
        "|---|---|---:|---:|",
        "| john (BLEU) | int8w8 | 38.64 | 26.52 |",
        "| john (BLEU) | int8 | 37.67 | 26.04 |",
        "| help (chrF) | int8w8 |  | 59.25 |",
    ]


def test_an_unknown_width_is_refused_before_any_work(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--int8-graphs", "int8,int4"])
    assert e.value.code == 2
    assert "--int8-graphs int4: choose int8 or int8w8" in capsys.readouterr().err


def test_floors_sit_two_points_under_rounded_down_to_a_tenth():
    # 48.10 - 2 is 46.099999... in floats: the floor must still be 46.1
    assert floors({"en-de": 27.17, "en-es": 48.10, "de-en": 39.01, "fr-en": 50.0}) == {
        "en-de": 25.1, "en-es": 46.1, "de-en": 37.0, "fr-en": 48.0}


def test_lowest_keeps_the_lower_width_per_set_and_direction():
    results = {"int8w8": {"john": {"de-en": 39.51, "en-de": 27.17}, "help": {"de-en": 62.09}},
               "int8": {"john": {"de-en": 39.01, "en-de": 27.58}, "help": {"de-en": 61.29}}}
    assert lowest(results) == {"john": {"de-en": 39.01, "en-de": 27.17}, "help": {"de-en": 61.29}}
    assert lowest({"int8": {"john": {"de-en": 39.01}}}) == {"john": {"de-en": 39.01}}


def test_the_card_table_round_trips_through_the_card(tmp_path):
    scores = {"john": {"en-de": 27.17, "de-en": 39.01}, "help": {"en-de": 64.15, "de-en": 61.29},
              "everyday": {"en-de": 50.41, "de-en": 50.94}}
    assert card_table(scores, ["en-de", "de-en"]) == (
        "| | en->de | de->en |\n|---|---:|---:|\n| Bible BLEU | 27.17 | 39.01 |\n"
        "| help chrF | 64.15 | 61.29 |\n| everyday chrF | 50.41 | 50.94 |")
    table_text = card_table(scores, ["de-en", "en-de"])  # the card's column order is its own
    card = tmp_path / "README.md"
    card.write_text(f"# A model\n\n{CARD_SECTION}\n\nThe scores:\n\n{table_text}\n\n| other | 1 |\n", encoding="utf-8")
    assert shipped_scores(card) == scores


def test_the_shipped_card_records_every_set_in_every_direction():
    shipped = shipped_scores()
    assert sorted(shipped) == sorted(SETS)
    assert all(sorted(by_dir) == sorted(help_set()) for by_dir in shipped.values())


def test_a_card_without_the_table_or_a_row_fails_naming_it(tmp_path):
    card = tmp_path / "README.md"
    card.write_text("# A model\n\nNo gate here.\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"README.md: no table under '{CARD_SECTION}'"):
        shipped_scores(card)
    card.write_text(f"{CARD_SECTION}\n\n| | en->de |\n|---|---:|\n| Bible BLEU | 27.17 |\n", encoding="utf-8")
    with pytest.raises(ValueError, match="table has no row help chrF, everyday chrF"):
        shipped_scores(card)
