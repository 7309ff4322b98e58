"""Debian's human translations: the clean-up rules, package descriptions aligned from apt's
translation indices, message catalogs from real .deb and .mo files, splits by package and the
report of what was dropped and why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli import UsageError
from corpus import catalogs, clean, ddtp, debian, debian_text
from tests.test_corpus_libreoffice import make_deb, mo_file


# ------------------------------------------------------------------ clean-up rules
@pytest.mark.parametrize(("en", "xx", "lang", "reason"), [
    ("Open the file.", "Öffnen Sie die Datei.", "de", None),
    ("Open the file.", "Open the file.", "de", "untranslated"),
    ("Copied %d files to %s", "%d Dateien kopiert", "de", "format strings differ"),
    ("Copied %1$d files to %2$s", "%1$d Dateien nach %2$s kopiert", "de", None),
    ("Remove {0} from $(ARG1)", "{0} aus $(ARG1) entfernen", "de", None),
    ("Remove {0}", "Entfernen", "de", "format strings differ"),
    ("At most %(max)d digits", "Höchstens %(max)d Ziffern", "de", None),
    ("At most %(max)d digits", "Höchstens %(limit)d Ziffern", "de", "format strings differ"),
    ("OK", "Dies ist eine sehr lange Übersetzung, die mit dem Original nichts zu tun hat.", "de", "length ratio"),
    ("The file is not in the list and it can not be opened.",
     "The file is not in the list and it can not be opened, sorry.", "de", "translation in another language"),
    ("The file is not in the list.", "Le fichier est dans la liste et il ne peut pas être ouvert.", "de",
     "translation in another language"),
    ("...", "...", "de", "no letters"),
    ("Hello", "Привет", "de", "script"),
    ("Mail is sent by smarthost.", "El correo se envÃ­a mediante un Â«smarthostÂ».", "es", "encoding"),
    ("", "Datei", "de", "empty"),
])
def test_drop_reason(en: str, xx: str, lang: str, reason: str | None) -> None:
    assert clean.drop_reason(en, xx, lang) == reason


def test_guess_language_needs_function_words() -> None:
    assert clean.guess_language("This is the file that you can open.") == "en"
    assert clean.guess_language("Das ist die Datei, die Sie öffnen können.") == "de"
    assert clean.guess_language("C'est le fichier que vous pouvez ouvrir dans la fenêtre.") == "fr"
    assert clean.guess_language("Este es el archivo que usted puede abrir con la aplicación.") == "es"
    assert clean.guess_language("Inkscape") is None


@pytest.mark.parametrize(("text", "expected"), [
    ("_File", "File"), ("&Open...", "Open..."), ("Save ~As", "Save As"), ("Sa_ve", "Save"),
    ("snake_case_name", "snake_case_name"), ("Fish && Chips", "Fish && Chips"),
])
def test_strip_accelerators(text: str, expected: str) -> None:
    assert clean.strip_accelerators(text) == expected


def test_clean_text_drops_markup_and_invisible_characters() -> None:
    assert clean.clean_text("<b>Save</b> the\u00ad file &amp; exit\u200b  now") == "Save the file & exit now"


def test_sentences_are_not_cut_after_abbreviations() -> None:
    assert clean.sentences("It reads PNG, e.g. icons. Then it stops! Dr. Who said so.") == [
        "It reads PNG, e.g. icons.", "Then it stops!", "Dr. Who said so."]
    assert clean.align_units(["One. Two."], ["Eins. Zwei."]) == [("One.", "Eins."), ("Two.", "Zwei.")]
    assert clean.align_units(["One. Two."], ["Eins und zwei."]) == [("One. Two.", "Eins und zwei.")]


def test_dedup_caps_boilerplate_and_drops_near_duplicates_and_held_out() -> None:
    rows = [(f"p{i}", "This package contains the documentation.", f"Dieses Paket enthält die {word}.")
            for i, word in enumerate(["Doku", "Dokumentation", "Anleitung", "Hilfe", "Beschreibung"])]
    rows += [("a", "Open the file", "Datei öffnen"), ("b", "Open the file.", "Datei öffnen."),
             ("c", "Close the file", "Datei schließen")]
    kept, dropped = clean.dedup(rows, banned={"close the file"})
    assert [k for k, _, _ in kept] == ["p0", "p1", "p2", "a"]
    assert dropped == {"boilerplate": 2, "duplicate": 1, "in a held-out split": 1}


def test_split_of_is_a_stable_hash() -> None:
    splits = {clean.split_of(f"package{i}") for i in range(400)}
    assert splits == {"train", "dev", "test"}
    assert clean.split_of("coreutils") == clean.split_of("coreutils")


# ------------------------------------------------------------------ package descriptions
TRANSLATION_EN = """Package: foo
Description-md5: aaa
Description-en: tool to frobnicate files
 Foo frobnicates files. It is fast.
 .
 Features:
  * reads files
  * writes files

Package: foo-doc
Description-md5: bbb
Description-en: documentation for foo
 This package contains the documentation.

Package: bar
Description-md5: ccc
Description-en: another tool
 One paragraph here.
 .
 Another paragraph here.
"""

TRANSLATION_DE = """Package: foo
Description-md5: aaa
Description-de: Werkzeug zum Frobnizieren von Dateien
 Foo frobniziert Dateien. Es ist schnell.
 .
 Funktionen:
  * liest Dateien
  * schreibt Dateien

Package: foo-doc
Description-md5: bbb
Description-de: Dokumentation für foo
 Dieses Paket enthält die Dokumentation.

Package: bar
Description-md5: ccc
Description-de: ein anderes Werkzeug
 Ein einziger Absatz.
"""

PACKAGES = """Package: foo
Version: 1.2-1

Package: foo-doc
Source: foo (1.2-1)
Version: 1.2-1

Package: bar
Version: 0.9
"""


def lists_folder(cache: Path) -> Path:
    lists = ddtp.lists_dir(cache)
    lists.mkdir(parents=True)
    (lists / "example_dists_stable_main_i18n_Translation-en").write_text(TRANSLATION_EN)
    (lists / "example_dists_stable_main_i18n_Translation-de").write_text(TRANSLATION_DE)
    (lists / "example_dists_stable_main_binary-amd64_Packages").write_text(PACKAGES)
    return lists


def test_descriptions_align_unit_by_unit_or_short_lines_only(tmp_path: Path) -> None:
    lists_folder(tmp_path)
    ddtp.descriptions.cache_clear()
    ddtp.package_sources.cache_clear()
    rows = [(key, en, xx) for _, key, en, xx in ddtp.rows("de", tmp_path)]
    assert rows == [
        ("foo/foo@1.2-1", "tool to frobnicate files", "Werkzeug zum Frobnizieren von Dateien"),
        ("foo/foo@1.2-1", "Foo frobnicates files.", "Foo frobniziert Dateien."),
        ("foo/foo@1.2-1", "It is fast.", "Es ist schnell."),
        ("foo/foo@1.2-1", "Features:", "Funktionen:"),
        ("foo/foo@1.2-1", "reads files", "liest Dateien"),
        ("foo/foo@1.2-1", "writes files", "schreibt Dateien"),
        ("foo/foo-doc@1.2-1", "documentation for foo", "Dokumentation für foo"),
        ("foo/foo-doc@1.2-1", "This package contains the documentation.", "Dieses Paket enthält die Dokumentation."),
        ("bar/bar@0.9", "another tool", "ein anderes Werkzeug"),  # paragraphs differ: short line only
    ]
    splits = {split for split, *_ in ddtp.rows("de", tmp_path)}
    assert splits == {clean.split_of("foo"), clean.split_of("bar")}  # binaries of one source together


def test_build_writes_splits_and_a_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lists_folder(tmp_path)
    ddtp.descriptions.cache_clear()
    ddtp.package_sources.cache_clear()
    monkeypatch.setattr(clean, "split_of", lambda unit: "test" if unit == "bar" else "train")
    out = debian_text.build(["de"], ["debian-descriptions"], cache=tmp_path)
    report = json.loads((out / "report.json").read_text())
    assert report == {"debian-descriptions/en-de": {"kept": {"train": 8, "dev": 0, "test": 1}, "dropped": {}}}
    pairs = debian_text.pairs("debian-descriptions", ["de-en", "en-fr"], "test", cache=tmp_path)
    assert [(p.direction, p.src, p.tgt, p.key) for p in pairs] == [
        ("de-en", "ein anderes Werkzeug", "another tool", "bar/bar@0.9")]
    (out / "debian-descriptions.train.en-de.tsv").unlink()  # removed by hand: rebuilt on next use
    assert len(debian_text.pairs("debian-descriptions", ["en-de"], "train", cache=tmp_path)) == 8
    with pytest.raises(UsageError, match="'debian-ddtp' is not one of debian-descriptions, debian-catalogs, "
                                         "debian-debconf, debian-manuals, debian-manpages, debian-examples, "
                                         "debian-phrases"):
        debian_text.build(["de"], ["debian-ddtp"], cache=tmp_path)


# ------------------------------------------------------------------ message catalogs
def test_catalogs_from_a_real_deb(tmp_path: Path) -> None:
    debs = tmp_path / "debs"
    debs.mkdir()
    catalog = mo_file({"": "Content-Type: text/plain; charset=UTF-8\n", "_Open": "Ö_ffnen",
                       "menu\x04Save %s": "%s speichern", "Look there! Outlaws roam these woods.":
                       "Seht nur! Räuber streifen durch diese Wälder."})
    make_deb(debs / "wesnoth-1.16-tsg_1%3a1.16.8-1_all.deb",
             {"usr/share/games/wesnoth/translations/de/LC_MESSAGES/wesnoth-tsg.mo": catalog,
              "usr/share/games/wesnoth/translations/fr/LC_MESSAGES/wesnoth-tsg.mo": mo_file({"Yes": "Oui"})})
    rows = sorted(catalogs.rows("de", ("wesnoth-1.16-tsg",), cache=tmp_path))
    key = "wesnoth-1.16-tsg@1:1.16.8-1:wesnoth-tsg"
    assert rows == [("test", key, "Look there! Outlaws roam these woods.",
                     "Seht nur! Räuber streifen durch diese Wälder."),
                    ("test", key, "Open", "Öffnen"), ("test", key, "Save %s", "%s speichern")]
    assert [r[2:] for r in catalogs.rows("fr", ("wesnoth-1.16-tsg",), cache=tmp_path)] == [("Yes", "Oui")]


def test_pack_and_unpack_carry_the_pairs_to_another_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from corpus import build

    here, there = tmp_path / "here", tmp_path / "there"
    lists_folder(here)
    ddtp.descriptions.cache_clear()
    ddtp.package_sources.cache_clear()
    monkeypatch.setattr(debian.shutil, "which", lambda _: None)  # nothing is downloaded in a test
    for source in set(debian_text.SOURCES) - {"debian-descriptions"}:  # only the descriptions are here
        monkeypatch.setitem(debian_text.READERS, source, lambda lang, cache: iter(()))
        monkeypatch.setitem(debian_text.PROVENANCE, source, lambda cache: {})
    monkeypatch.setenv("NMT_CACHE", str(here))
    archive = tmp_path / "corpus.tar.xz"
    assert build.main(["--sources", "debian", "--languages", "de", "--pack", str(archive)]) == 0
    assert f"packed debian-v{debian_text.CACHE_VERSION} into {archive}" in capsys.readouterr().out
    monkeypatch.setenv("NMT_CACHE", str(there))
    assert build.main(["--unpack", str(archive)]) == 0
    assert debian_text.read_rows("debian-descriptions", "train", "de", cache=there) == \
        debian_text.read_rows("debian-descriptions", "train", "de", cache=here)
    assert build.main(["--unpack", str(tmp_path / "missing.tar.xz")]) == 2
    assert "--unpack" in capsys.readouterr().err
