"""Ding's German-English dictionary from a real .deb built here: sub-entries paired one to one,
annotations and explanations out, templates and single words left out, examples apart from
phrases, split by entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus import clean, debian, dictionary
from tests.test_corpus_libreoffice import make_deb

DING = """\
# Version :: devel 2023-01-30
# License :: GPL Version 2 or later; GNU General Public License
Guten Morgen!; Guten Tag! (Begrüßung am Morgen/Vormittag) :: Good morning!
Tisch {m} | den Tisch decken :: table | to set the table; to lay the table
Ich muss jetzt gehen. [ugs.] :: I've got to leave now. [coll.]
jdm. etw. geben | Gib es mir! :: to give sb. sth. | Give it to me!
Aachener {adj} | der Aachener Dom :: Aachen | the Aachen Cathedral
Europäische Union /EU/ {f} :: European Union /EU/
Bitte! | Danke! :: Please!
Mit freundlichen Grüßen :: Best regards
Ganz im Gegenteil. / Im Gegenteil. :: Quite the contrary. / Quite the opposite.
ich/er/sie würde :: I/he/she would
Hallo! :: Hello there
a line without the separator
"""

ENTRIES = [
    (3, "examples", "Good morning!", "Guten Morgen!"),
    (4, "phrases", "to set the table", "den Tisch decken"),  # "table" / "Tisch": a single word
    (5, "examples", "I've got to leave now.", "Ich muss jetzt gehen."),
    (6, "examples", "Give it to me!", "Gib es mir!"),  # the template beside it left out
    (7, "phrases", "the Aachen Cathedral", "der Aachener Dom"),
    (8, "phrases", "European Union", "Europäische Union"),
    (10, "phrases", "Best regards", "Mit freundlichen Grüßen"),
    (11, "examples", "Quite the contrary.", "Ganz im Gegenteil."),
]


@pytest.mark.parametrize(("text", "expected"), [
    ("Tisch {m}; Tafel {f}", "Tisch"),  # the first alternative, without its gender
    ("Guten Morgen! [ugs.]", "Guten Morgen!"),
    ("Europäische Union /EU/", "Europäische Union"),
    ("die Rechnung (im Restaurant) bezahlen", "die Rechnung bezahlen"),
    ("Guten Morgen!; Guten Tag! (Begrüßung am Morgen/Vormittag)", "Guten Morgen!"),
    ("jdm. etw. geben", ""),  # templates: placeholders, ellipses, tildes
    ("to give sb. sth.", ""),
    ("sb's fault", ""),
    ("to go on ...", ""),
    ("Quite the contrary. / Quite the opposite.", "Quite the contrary."),
    ("on the one hand / on the other", ""),  # phrases that cannot be paired
    ("I/he/she would", ""),
])
def test_unit(text: str, expected: str) -> None:
    assert dictionary.unit(text) == expected


@pytest.mark.parametrize(("en", "de", "kind"), [
    ("Good morning!", "Guten Morgen!", "examples"),
    ("Is that so?", "Ach ja?", "examples"),
    ("Best regards", "Mit freundlichen Grüßen", "phrases"),
    ("freshwater eels", "Flussaale", "phrases"),
    ("table", "Tisch", None),
    ("Hello there", "Hallo!", None),  # only one side a sentence
    ("Thanks.", "Danke", None),
])
def test_kind_of(en: str, de: str, kind: str | None) -> None:
    assert dictionary.kind_of(en, de) == kind


def test_entries_pair_sub_entries_one_to_one() -> None:
    assert list(dictionary.entries(DING)) == ENTRIES  # comments, uneven lines and templates left out


def test_rows_from_a_real_deb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(debian.shutil, "which", lambda _: None)  # nothing is downloaded in a test
    (tmp_path / "debs").mkdir()
    make_deb(tmp_path / "debs" / "trans-de-en_1.9-6_all.deb", {
        "usr/share/trans/de-en": DING.encode(),
        "usr/share/doc/trans-de-en/copyright": b"Format: https://www.debian.org/doc/packaging-manuals/"
                                               b"copyright-format/1.0/\nUpstream-Name: Ding\n\nFiles: *\n"
                                               b"Copyright: 1995-2023 Frank Richter\nLicense: GPL-2+\n\n"
                                               b"Files: debian/*\nLicense: GPL-2+\n",
        "usr/share/doc/trans-de-en/changelog.Debian.gz": b"not read"})
    for kind in dictionary.KINDS:
        expected = [(f"trans-de-en@1.9-6:{n}", en, de) for n, found, en, de in ENTRIES if found == kind]
        rows = list(dictionary.rows(kind, "de", tmp_path))
        assert rows == [(clean.split_of(key), key, en, de) for key, en, de in expected]
    assert list(dictionary.rows("examples", "fr", tmp_path)) == []
    assert list(dictionary.rows("phrases", "es", tmp_path)) == []
    assert dictionary.packages(tmp_path) == {"trans-de-en": ("1.9-6", "GPL-2+")}
    assert not list((tmp_path / "extracted").rglob("changelog.Debian.gz"))  # only the files read unpacked
    with pytest.raises(ValueError, match="'words' is not one of examples, phrases"):
        list(dictionary.rows("words", "de", tmp_path))
