"""bench/modern_eval.py: scores, table and JSON on the tiny package with fake pairs; Apertium when installed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench import modern_eval
from bench.modern_eval import System, apertium_translate, evaluate, package_systems, table, timing_table
from cli import EXIT_USAGE
from corpus.bible import Pair

HAS_APERTIUM = shutil.which("apertium") is not None


def fake_sets() -> dict[tuple[str, str], list[Pair]]:
    return {("modern", "en-de"): [Pair("en", "de", "The house is red.", "The house is red.", "page.html#par_id1"),
                                  Pair("en", "de", "Click OK.", "Click OK.", "page.html#par_id2")],
            ("modern", "de-en"): [Pair("de", "en", "Das Haus ist rot.", "The house is red.", "page.html#par_id1")]}


def copy_system() -> System:
    """Returns the source: every en-de reference above is its source, so it scores 100 there."""
    return System("copy", lambda texts, src, tgt: list(texts), frozenset({"en-de"}))


def unk_system() -> System:
    return System("unk", lambda texts, src, tgt: ["x \u2047 y" if i == 0 else "<unk>" for i in range(len(texts))],
                  frozenset({"en-de", "de-en"}))


def test_scores_table_and_report_layout(tiny_package):
    systems = [*package_systems(tiny_package, ["int8", "fp32"], beam=1, threads=1), copy_system(), unk_system()]
    report = evaluate(fake_sets(), systems)
    names = ["ours-int8", "ours-fp32", "copy", "unk"]
    assert set(report) == {"systems", "sets", "timing"} and report["systems"] == names
    assert [(r["split"], r["direction"], r["lines"]) for r in report["sets"]] == [("modern", "en-de", 2),
                                                                                  ("modern", "de-en", 1)]
    en_de, de_en = report["sets"]
    assert list(en_de["scores"]) == names and list(de_en["scores"]) == ["ours-int8", "ours-fp32", "unk"]
    assert all(set(s) == {"bleu", "chrf", "unk", "seconds"} for r in report["sets"] for s in r["scores"].values())
    assert en_de["scores"]["copy"] | {"seconds": 0} == {"bleu": 100.0, "chrf": 100.0, "unk": 0, "seconds": 0}
    assert en_de["scores"]["unk"]["unk"] == 2 and de_en["scores"]["unk"]["unk"] == 1
    assert en_de["outputs"][0] == {"key": "page.html#par_id1", "source": "The house is red.",
                                   "reference": "The house is red.", "ours-int8": en_de["outputs"][0]["ours-int8"],
                                   "ours-fp32": en_de["outputs"][0]["ours-fp32"], "copy": "The house is red.",
                                   "unk": "x \u2047 y"}
    assert set(de_en["outputs"][0]) == {"key", "source", "reference", "ours-int8", "ours-fp32", "unk"}
    assert all(isinstance(o[n], str) for r in report["sets"] for o in r["outputs"] for n in r["scores"])
    assert {n: t["lines"] for n, t in report["timing"].items()} == {"ours-int8": 3, "ours-fp32": 3, "copy": 2,
                                                                     "unk": 3}

    lines = table(report).splitlines()
    assert lines[:2] == [
        "| split | direction | ours-int8 BLEU / chrF | ours-fp32 BLEU / chrF | copy BLEU / chrF | unk BLEU / chrF"
        " | lines | ours-int8 unk | ours-fp32 unk | copy unk | unk unk |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    assert len(lines) == 4
    row = [c.strip() for c in lines[2].strip("|").split("|")]
    s = en_de["scores"]
    assert row == ["modern", "en-de", f"{s['ours-int8']['bleu']:.2f} / {s['ours-int8']['chrf']:.2f}",
                   f"{s['ours-fp32']['bleu']:.2f} / {s['ours-fp32']['chrf']:.2f}", "100.00 / 100.00",
                   f"{s['unk']['bleu']:.2f} / {s['unk']['chrf']:.2f}", "2",
                   str(s["ours-int8"]["unk"]), str(s["ours-fp32"]["unk"]), "0", "2"]
    row = [c.strip() for c in lines[3].strip("|").split("|")]
    assert row[:2] == ["modern", "de-en"] and row[4] == "—" and row[6:] == ["1", row[7], row[8], "—", "1"]

    timing = timing_table(report).splitlines()
    assert timing[:2] == ["| system | lines | seconds | lines/s |", "| --- | --- | --- | --- |"]
    assert [line.split("|")[1].strip() for line in timing[2:]] == names


def test_the_command_without_apertium_writes_the_json(tiny_package, tmp_path, monkeypatch, capsys):
    asked = []
    monkeypatch.setattr(modern_eval, "load_sets", lambda *a: asked.append(a) or fake_sets())
    out = tmp_path / "modern.json"
    assert modern_eval.main(["--package", str(tiny_package), "--variants", "int8", "--beam", "2", "--no-apertium",
                             "--directions", "en-de,de-en,en-es", "--part", "dev", "--json", str(out)]) == 0
    assert asked == [(["modern"], ["en-de", "de-en", "en-es"], 0, "dev")]
    report = json.loads(out.read_text())
    assert list(report) == ["settings", "systems", "sets", "timing"]
    assert report["settings"] == {"package": str(tiny_package), "variants": ["int8"], "beam": 2, "threads": 1,
                                  "shortlist": "on", "splits": ["modern"], "part": "dev",
                                  "directions": ["en-de", "de-en", "en-es"], "limit": 0, "apertium": False}
    assert report["systems"] == ["ours-int8"] and [len(r["outputs"]) for r in report["sets"]] == [2, 1]
    stdout = capsys.readouterr().out
    assert stdout.startswith("| split | direction | ours-int8 BLEU / chrF | lines | ours-int8 unk |\n")
    assert "| ours-int8 | 3 |" in stdout


def test_shortlist_both_scores_the_same_graphs_with_and_without_it(tiny_package, tiny_checkpoint, tmp_path,
                                                                   monkeypatch, capsys):
    from engine.shortlist import learn
    from export.shortlist_graph import add_to_package, training_examples

    monkeypatch.setattr(modern_eval, "load_sets", lambda *a: fake_sets())
    args = ["--variants", "int8,fp32", "--no-apertium", "--directions", "en-de,de-en", "--shortlist", "both"]
    assert modern_eval.main(["--package", str(tiny_package), *args]) == EXIT_USAGE
    assert capsys.readouterr().err == (f"python -m bench.modern_eval: error: --shortlist both: {tiny_package} has no "
                                       "vocabulary shortlist for int8, fp32 (python -m export.shortlist_graph "
                                       "adds one)\n")

    pkg = tmp_path / "tiny"
    shutil.copytree(tiny_package, pkg)
    add_to_package(pkg, learn(*training_examples(tiny_checkpoint), frequent=16, per_source=4), {"frequent": 16})
    out = tmp_path / "modern.json"
    assert modern_eval.main(["--package", str(pkg), *args, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["systems"] == ["ours-int8", "ours-int8-shortlist", "ours-fp32", "ours-fp32-shortlist"]
    assert all(set(r["scores"]) == set(report["systems"]) for r in report["sets"])
    # Without the flag the package is scored as served: with its shortlist, under the variant's name.
    assert modern_eval.main(["--package", str(pkg), "--variants", "int8", "--no-apertium", "--directions", "en-de",
                             "--json", str(out)]) == 0
    served = json.loads(out.read_text())
    assert served["systems"] == ["ours-int8"]
    assert [o["ours-int8"] for o in served["sets"][0]["outputs"]] == [
        o["ours-int8-shortlist"] for o in report["sets"][0]["outputs"]]


def test_a_missing_apertium_is_one_clear_line(tiny_package, monkeypatch, capsys):
    monkeypatch.setattr(modern_eval.shutil, "which", lambda name: None)
    assert modern_eval.main(["--package", str(tiny_package), "--directions", "en-es"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err == ("python -m bench.modern_eval: error: apertium is not installed "
                   "(apt-get install -y apertium-eng-spa), or pass --no-apertium\n")


@pytest.mark.skipif(not HAS_APERTIUM, reason="apertium is not installed (apt-get install -y apertium-eng-spa)")
def test_apertium_translates_each_line_as_it_would_alone():
    got = apertium_translate(["The house is red."], "eng-spa")
    assert len(got) == 1 and got[0].strip()
    lines = ["Organizing Libraries", "Creating a New Library", "", "The house is red."]
    together = apertium_translate(lines, "eng-spa")
    assert together == [apertium_translate([line], "eng-spa")[0] if line else "" for line in lines]


def test_the_dev_part_is_mark_where_the_test_part_is_john():
    """--part dev scores the splits' dev lines (Mark for the Bible) to choose between models; the
    phrase list has one part."""
    dev = modern_eval.load_sets(["bible", "everyday"], ["en-de"], 2, "dev")
    test = modern_eval.load_sets(["bible", "everyday"], ["en-de"], 2)
    assert [p.key for p in dev["bible", "en-de"]] == [(41, 1, 1), (41, 1, 2)]
    assert [p.key for p in test["bible", "en-de"]] == [(43, 1, 1), (43, 1, 2)]
    assert dev["everyday", "en-de"] == test["everyday", "en-de"]


def test_the_everyday_phrase_list_covers_every_direction():
    sets = modern_eval.load_sets(["everyday"], list(modern_eval.DIRECTIONS))
    assert sorted(d for _, d in sets) == sorted(modern_eval.DIRECTIONS)
    en_de, de_en = sets["everyday", "en-de"], sets["everyday", "de-en"]
    assert len(en_de) >= 200 and len({p.src for p in en_de}) == len(en_de)  # no phrase twice
    assert (en_de[0].src, en_de[0].tgt, en_de[0].key) == ("Hello!", "Hallo!", "greeting:0")
    assert (de_en[0].src, de_en[0].tgt) == ("Hallo!", "Hello!")
    assert all(p.src and p.tgt and "\t" not in p.src + p.tgt for pairs in sets.values() for p in pairs)


def test_every_debian_source_is_a_test_split():
    """Each Debian source the corpus builds (corpus.debian_text.SOURCES) and each selection of
    them (corpus.selections.SOURCES) is scored by its own split name, and every such split name is
    one: a new source is in the yardstick at once."""
    from bench.modern_eval import DEBIAN_SPLITS, SELECTION_SPLITS, SPLITS
    from corpus import debian_text, selections

    assert sorted(DEBIAN_SPLITS.values()) == sorted(debian_text.SOURCES)
    assert sorted(SELECTION_SPLITS.values()) == sorted(selections.SOURCES)
    assert set(DEBIAN_SPLITS) | set(SELECTION_SPLITS) <= set(SPLITS)


def test_everyday_unseen_leaves_out_phrases_a_training_split_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A phrase any of whose four texts is in a training split (here "Hallo!" in the dictionary's
    examples, near-matched: case and punctuation aside) leaves every direction of the unseen split."""
    from corpus import debian_text, libreoffice
    from corpus.tsv import write_rows

    monkeypatch.setenv("NMT_CACHE", str(tmp_path))
    for lang in ("de", "fr", "es"):
        for source in debian_text.SOURCES:
            rows = [("trans-de-en@1:1", "Hi there", "HALLO")] if (source, lang) == ("debian-examples", "de") else []
            write_rows(debian_text.corpus_dir() / f"{source}.train.en-{lang}.tsv", rows)
        for source in libreoffice.SOURCES:
            rows = [("help:1", "Good morning!", "¡Buenos días!")] if lang == "es" else []
            write_rows(libreoffice.corpus_dir() / f"{source}.train.en-{lang}.tsv", rows)
    assert {"hallo", "good morning", "buenos dias", "hi there"} <= modern_eval.trained_texts()
    every = modern_eval.load_sets(["everyday"], ["en-de", "es-en"])
    unseen = modern_eval.load_sets(["everyday-unseen"], ["en-de", "es-en"])
    for direction in ("en-de", "es-en"):
        keys = [p.key for p in unseen["everyday-unseen", direction]]
        assert keys == [p.key for p in every["everyday", direction]
                        if p.key not in ("greeting:0", "greeting:2")]  # Hello! / Hallo!, Good morning!
