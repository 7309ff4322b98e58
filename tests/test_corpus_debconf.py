"""Debconf templates from real .deb control archives built here: candidates from apt's
Packages index, descriptions aligned unit by unit, choices item by item, split by source."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus import clean, ddtp, debconf, debian
from tests.test_corpus_libreoffice import make_deb

TEMPLATES = """Template: foo/mode
Type: select
Choices: local only, internet site\\, with SMTP, none
Choices-de.UTF-8: nur lokal, Internet-Server\\, mit SMTP, keine
Choices-fr.UTF-8: local, aucun
Description: Mail configuration type:
 Please select the mail configuration type.
 .
 A system with a dynamic IP address should use a smarthost.
Description-de.UTF-8: Art der E-Mail-Konfiguration:
 Bitte wählen Sie die Art der E-Mail-Konfiguration.
 .
 Ein System mit wechselnder IP-Adresse sollte eine Sendezentrale verwenden.
Description-fr.UTF-8: Type de configuration :
 Veuillez choisir le type de configuration.

Template: foo/restart
Type: boolean
Description: Restart ${service} now?
Description-de.UTF-8: ${service} jetzt neu starten?
"""

PACKAGES = """Package: foo
Source: foo-src
Version: 1.0-1
Section: mail
Depends: debconf (>= 0.5) | debconf-2.0, libc6
Size: 2000

Package: big
Version: 2.0
Section: net
Depends: debconf
Size: 99000000

Package: plain
Version: 1.0
Section: utils
Depends: libc6, debconf-utils
Size: 100

Package: desk
Version: 43.0-3
Section: x11
Depends: debconf (>= 0.5) | debconf-2.0
Size: 1000
"""


@pytest.fixture()
def cache(tmp_path: Path) -> Path:
    lists = ddtp.lists_dir(tmp_path)
    lists.mkdir(parents=True)
    (lists / "example_dists_stable_main_i18n_Translation-de").write_text("")
    (lists / "example_dists_stable_main_binary-amd64_Packages").write_text(PACKAGES)
    (tmp_path / "debs").mkdir()
    copyright_file = b"Format: x\n\nFiles: *\nLicense: MIT\n"
    make_deb(tmp_path / "debs" / "foo_1.0-1_all.deb", {"usr/share/doc/foo/copyright": copyright_file},
             control={"control": b"Package: foo\nSource: foo-src (1.0-1)\nVersion: 1.0-1\n",
                      "templates": TEMPLATES.encode()})
    return tmp_path


def test_candidates_depend_on_debconf_and_are_small(cache: Path) -> None:
    assert debconf.candidates(ddtp.lists_dir(cache)) == ["foo"]


def test_template_pairs() -> None:
    assert list(debconf.template_pairs(TEMPLATES, "de")) == [
        ("Mail configuration type:", "Art der E-Mail-Konfiguration:"),
        ("Please select the mail configuration type.", "Bitte wählen Sie die Art der E-Mail-Konfiguration."),
        ("A system with a dynamic IP address should use a smarthost.",
         "Ein System mit wechselnder IP-Adresse sollte eine Sendezentrale verwenden."),
        ("local only", "nur lokal"), ("internet site, with SMTP", "Internet-Server, mit SMTP"), ("none", "keine"),
        ("Restart ${service} now?", "${service} jetzt neu starten?")]
    # paragraphs that do not line up give the short lines alone; choices of another count none
    assert list(debconf.template_pairs(TEMPLATES, "fr")) == [("Mail configuration type:", "Type de configuration :")]


def test_rows_are_keyed_and_split_by_source_package(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(debian.shutil, "which", lambda _: None)
    rows = list(debconf.rows("de", cache))
    assert {(split, key) for split, key, _, _ in rows} == {(clean.split_of("foo-src"), "foo-src/foo@1.0-1")}
    assert len(rows) == 7
    assert debconf.packages(cache) == {"foo": ("1.0-1", "MIT")}
