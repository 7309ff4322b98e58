"""KDE's handbooks from real .deb files built here: rendered pages cut at their headings, the pages'
header, navigation and footer left out, sections aligned where their block structure matches (a
translation that lags behind the English loses only the sections that changed), the title page
left out, split by application, the English handbook found in another package than its
translation."""

from __future__ import annotations

import bz2
from pathlib import Path

import pytest

from corpus import clean, debian, kdedocs
from tests.test_corpus_libreoffice import make_deb


def page(name: str, title: str, body: str, nav: str) -> str:
    """One page of an ``index.cache.bz2`` as kdoctools renders it."""
    return (f'<FILENAME filename="{name}"><html><head><title>{title}</title></head><body><div id="content">'
            f'<div id="header"><div id="header_content"><div id="header_left"><div id="header_right">{title}'
            f'</div></div></div></div><div class="navCenter"><table class="navigation"><tr><td class="prevCell">'
            f'<a href="index.html">{nav}</a></td></tr></table></div><div id="contentBody">{body}</div>'
            f'<div id="footer"><div class="navCenter"><table class="navigation"><tr><td>{nav}</td></tr></table>'
            f'</div><div id="footer_text">Send feedback to the KDE Docs Team</div></div></div></body></html>')


EN = (page("index.html", "The Kteatime Handbook",
           '<h1 class="title"><a name="kteatime"></a>The Kteatime Handbook</h1><p class="author">Jane Doe</p>',
           "Next")
      + page("intro.html", "Introduction",
             '<h1 class="title"><a name="intro"></a>Chapter 1. Introduction</h1>'
             "<p>Kteatime tells you when your tea is ready. It sits in the system tray.</p>"
             '<h2 class="title"><a name="using"></a>Using Kteatime</h2>'
             "<p>Click the icon to choose a tea.</p><p>A new paragraph the translation lacks.</p>"
             '<h2 class="title"><a name="settings"></a>Settings</h2>'
             '<dl><dt><span class="guimenu">Settings</span> → Configure Teas...</dt><dd><p>Opens the tea list.</p>'
             "</dd></dl><pre>kteatime --help</pre>", "Previous"))
DE = (page("index.html", "Das Handbuch zu Kteatime",
           '<h1 class="title"><a name="kteatime"></a>Das Handbuch zu Kteatime</h1><p class="author">Jane Doe</p>'
           "<p>Übersetzung: Max Mustermann</p>", "Weiter")
      + page("intro.html", "Einführung",
             '<h1 class="title"><a name="intro"></a>Kapitel 1. Einführung</h1>'
             "<p>Kteatime sagt Ihnen, wann Ihr Tee fertig ist. Es sitzt im Systemabschnitt der Kontrollleiste.</p>"
             '<h2 class="title"><a name="using"></a>Kteatime benutzen</h2>'
             "<p>Klicken Sie auf das Symbol, um einen Tee zu wählen.</p>"
             '<h2 class="title"><a name="settings"></a>Einstellungen</h2>'
             '<dl><dt><span class="guimenu">Einstellungen</span> → Tees einrichten ...</dt><dd><p>Öffnet die '
             "Teeliste.</p></dd></dl><pre>kteatime --help</pre>", "Zurück"))


def test_sections_are_cut_at_headings_without_the_pages_chrome() -> None:
    sections = kdedocs.sections(EN)
    assert list(sections) == ["kteatime", "intro", "using", "settings"]
    assert "Next" not in "".join(sections.values()) and "Docs Team" not in "".join(sections.values())


def test_sections_align_only_where_their_structure_matches() -> None:
    assert list(kdedocs.handbook_pairs(EN, DE, skip=frozenset({"kteatime"}))) == [
        ("intro", "Chapter 1. Introduction", "Kapitel 1. Einführung"),
        ("intro", "Kteatime tells you when your tea is ready.", "Kteatime sagt Ihnen, wann Ihr Tee fertig ist."),
        ("intro", "It sits in the system tray.", "Es sitzt im Systemabschnitt der Kontrollleiste."),
        ("settings", "Settings", "Einstellungen"),
        ("settings", "Settings → Configure Teas...", "Einstellungen → Tees einrichten ..."),
        ("settings", "Opens the tea list.", "Öffnet die Teeliste.")]  # not "using": a paragraph is new


def test_rows_from_real_debs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(debian.shutil, "which", lambda _: None)
    monkeypatch.setattr(kdedocs, "PACKAGES", ("kteatime", "kteatime-l10n"))
    (tmp_path / "debs").mkdir()
    copyright_ = b"Format: x\n\nFiles: *\nLicense: GPL-2+\n"
    make_deb(tmp_path / "debs" / "kteatime_4%3a22.12.3-1_amd64.deb",
             {"usr/share/doc/HTML/en/kteatime/index.cache.bz2": bz2.compress(EN.encode()),
              "usr/share/doc/HTML/en/kteatime/index.docbook": b"<book/>",
              "usr/share/doc/kteatime/copyright": copyright_})
    make_deb(tmp_path / "debs" / "kteatime-l10n_4%3a22.12.3-1_all.deb",
             {"usr/share/doc/HTML/de/kteatime/index.cache.bz2": bz2.compress(DE.encode()),
              "usr/share/doc/HTML/it/kteatime/index.cache.bz2": bz2.compress(DE.encode()),
              "usr/share/doc/kteatime-l10n/copyright": copyright_})
    rows = list(kdedocs.rows("de", tmp_path))
    split = clean.split_of("kde-docs:kteatime", kdedocs.DEV_BUCKETS, kdedocs.TEST_BUCKETS)
    assert [(s, k) for s, k, _, _ in rows] == [(split, "kteatime-l10n@4:22.12.3-1:kteatime#intro")] * 3 + [
        (split, "kteatime-l10n@4:22.12.3-1:kteatime#settings")] * 3
    assert list(kdedocs.rows("fr", tmp_path)) == []
    assert kdedocs.packages(tmp_path) == {"kteatime": ("4:22.12.3-1", "GPL-2+"),
                                          "kteatime-l10n": ("4:22.12.3-1", "GPL-2+")}
    extracted = {p.relative_to(tmp_path).parts[-5:] for p in (tmp_path / "extracted").rglob("*.bz2")}
    assert ("HTML", "it", "kteatime", "index.cache.bz2") not in {e[1:] for e in extracted}  # only en, de, fr, es


def test_held_out_handbooks_are_a_larger_share_than_packages() -> None:
    apps = [f"app{i}" for i in range(2000)]
    splits = [clean.split_of(f"kde-docs:{a}", kdedocs.DEV_BUCKETS, kdedocs.TEST_BUCKETS) for a in apps]
    assert 0.04 < splits.count("dev") / len(apps) < 0.06 and 0.06 < splits.count("test") / len(apps) < 0.08
    assert clean.split_of("kde-docs:konsole") == clean.split_of("kde-docs:konsole", clean.DEV_BUCKETS,
                                                                   clean.TEST_BUCKETS)
