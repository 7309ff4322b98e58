"""Message catalogs from real .deb files built here: gettext .mo (plural forms, contexts,
translators' credits) and Qt .qm, keyed by package and catalog, held-out packages, versions
and licences."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus import catalogs, debian
from tests.test_corpus_libreoffice import make_deb, mo_file
from tests.test_corpus_qm import qm_file

HEADER = {"": "Content-Type: text/plain; charset=UTF-8\nPlural-Forms: nplurals=2; plural=(n != 1);\n"}


def test_mo_plurals_contexts_and_credits(tmp_path: Path) -> None:
    mo = tmp_path / "x.mo"
    mo.write_bytes(mo_file({**HEADER, "%d file\0%d files": "%d Datei\0%d Dateien",
                            "NAME OF TRANSLATORS\x04Your names": "Erika Mustermann",
                            "translator-credits": "Erika Mustermann", "_: Menu entry\nQuit": "Beenden",
                            "Stock label|Close": "Schließen", "timespan^$num years": "$num Jahre",
                            "Copy|Paste": "Kopieren|Einfügen", "Empty": ""}))
    assert sorted(catalogs.entries(mo)) == [
        ("$num years", "$num Jahre"), ("%d file", "%d Datei"), ("%d files", "%d Dateien"), ("Close", "Schließen"),
        ("Copy|Paste", "Kopieren|Einfügen"), ("Quit", "Beenden")]


def test_mo_in_another_charset(tmp_path: Path) -> None:
    mo = tmp_path / "x.mo"
    entries = {"": "Content-Type: text/plain; charset=ISO-8859-1\n", "Open": "Öffnen"}
    data = mo_file(entries).replace("Öffnen".encode(), "Öffnen".encode("latin-1") + b"\0")  # same length
    mo.write_bytes(data)
    assert list(catalogs.entries(mo)) == [("Open", "Öffnen")]


def test_catalog_languages_and_names() -> None:
    assert catalogs.catalog_language("usr/share/locale/de/LC_MESSAGES/foo.mo") == "de"
    assert catalogs.catalog_language("usr/share/locale/es_ES/LC_MESSAGES/foo.mo") == "es"
    assert catalogs.catalog_language("usr/share/locale/de_CH/LC_MESSAGES/foo.mo") is None
    assert catalogs.catalog_language("usr/share/locale/fr/foo.mo") is None
    assert catalogs.catalog_language("usr/share/lxqt/translations/lxqt-panel_fr.qm") == "fr"
    assert catalogs.catalog_language("usr/share/scribus/translations/scribus.de.qm") == "de"
    assert catalogs.catalog_language("usr/share/app/modes.qm") is None
    assert catalogs.catalog_name(Path("usr/share/lxqt/translations/lxqt-panel_fr.qm")) == "lxqt-panel"
    assert catalogs.catalog_name(Path("usr/share/app/translations/de.qm")) == "translations"


def test_rows_from_real_debs_with_versions_and_licences(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(debian.shutil, "which", lambda _: None)  # no downloads: "missing" is left out
    debs = tmp_path / "debs"
    debs.mkdir()
    make_deb(debs / "konsole_4%3a22.12.3-1_amd64.deb", {
        "usr/share/locale/de/LC_MESSAGES/konsole.mo": mo_file({**HEADER, "&Close Tab": "Unterfenster &schließen"}),
        "usr/share/locale/de_AT/LC_MESSAGES/konsole.mo": mo_file({**HEADER, "Close": "Zumachen"}),
        "usr/share/doc/konsole/copyright": b"Format: x\n\nFiles: *\nLicense: GPL-2+\n"})
    make_deb(debs / "lxqt-panel-l10n_1.2.1-1_all.deb", {
        "usr/share/lxqt/translations/lxqt-panel/lxqt-panel_de.qm": qm_file([
            ("ConfigPanelDialog", "Configure Panel", ["Leiste konfigurieren"]),
            ("LXQtTaskBar", "%n window(s)", ["%n Fenster", "%n Fenster (mehrere)"])]),
        "usr/share/lxqt/translations/lxqt-panel/lxqt-panel_fr.qm": qm_file([("X", "Panel", ["Tableau de bord"])])})
    rows = list(catalogs.rows("de", ("konsole", "lxqt-panel-l10n", "missing"), tmp_path))
    assert rows == [
        ("test", "konsole@4:22.12.3-1:konsole", "Close Tab", "Unterfenster schließen"),
        ("train", "lxqt-panel-l10n@1.2.1-1:lxqt-panel", "Configure Panel", "Leiste konfigurieren"),
        ("train", "lxqt-panel-l10n@1.2.1-1:lxqt-panel", "%n window(s)", "%n Fenster (mehrere)")]
    assert catalogs.packages(("konsole", "lxqt-panel-l10n"), tmp_path) == {
        "konsole": ("4:22.12.3-1", "GPL-2+"), "lxqt-panel-l10n": ("1.2.1-1", "")}


def test_package_list_holds_the_held_out_packages_and_not_libreoffice() -> None:
    held_out = {p for names in catalogs.HELD_OUT.values() for p in names}
    assert held_out <= set(catalogs.PACKAGES)
    assert len(set(catalogs.PACKAGES)) == len(catalogs.PACKAGES)
    assert not [p for p in catalogs.PACKAGES if p.startswith("libreoffice")]
