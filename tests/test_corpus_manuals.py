"""Translated manuals from real .deb files built here: pages aligned block by block where their
structure matches, sentence by sentence inside a block, program output left out, split by page."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus import clean, debian, manuals
from tests.test_corpus_libreoffice import make_deb

EN = """<html><head><title>Chapter 2. Packages</title></head><body>
<h2 class="title">2.1. Installing packages</h2>
<div class="para">Use <code class="command">apt</code> to install a package. It fetches what it needs.</div>
<pre class="screen"><code>$ apt install foo</code></pre>
<ul><li><div class="para">Search with apt search.</div></li><li>Remove with apt remove.</li></ul>
<table><tr><td>apt</td><td>the package manager</td></tr></table>
</body></html>"""

DE = """<html><head><title>Kapitel 2. Pakete</title></head><body>
<h2 class="title">2.1. Pakete installieren</h2>
<div class="para">Pakete installiert man mit <code class="command">apt</code>. Es lädt, was es braucht.</div>
<pre class="screen"><code>$ apt install foo</code></pre>
<ul><li><div class="para">Suchen Sie mit apt search.</div></li><li>Entfernen mit apt remove.</li></ul>
<table><tr><td>apt</td><td>die Paketverwaltung</td></tr></table>
</body></html>"""

FR = """<html><head><title>Chapitre 2. Paquets</title></head><body>
<h2 class="title">2.1. Installer des paquets</h2>
<div class="para">Utilisez apt pour installer un paquet. Il télécharge ce dont il a besoin.</div>
</body></html>"""


def test_blocks_leave_out_program_output() -> None:
    assert manuals.blocks(EN) == [
        ("title", "Chapter 2. Packages"), ("h2", "2.1. Installing packages"),
        ("para", "Use apt to install a package. It fetches what it needs."), ("para", "Search with apt search."),
        ("li", "Remove with apt remove."), ("td", "apt"), ("td", "the package manager")]


def test_pages_align_block_by_block_only_where_the_structure_matches() -> None:
    pairs = manuals.page_pairs(EN, DE)
    assert pairs[:4] == [("Chapter 2. Packages", "Kapitel 2. Pakete"), ("Installing packages", "Pakete installieren"),
                         ("Use apt to install a package.", "Pakete installiert man mit apt."),
                         ("It fetches what it needs.", "Es lädt, was es braucht.")]
    assert ("the package manager", "die Paketverwaltung") in pairs
    assert manuals.page_pairs(EN, FR) == []


def test_rows_from_real_debs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(debian.shutil, "which", lambda _: None)
    reference = manuals.MANUALS[0]
    monkeypatch.setattr(manuals, "MANUALS", (reference,))
    (tmp_path / "debs").mkdir()
    for lang, page in (("en", EN), ("de", DE)):
        only_english = {f"usr/share/debian-reference/ch03.{lang}.html": EN.encode()} if lang == "en" else {}
        make_deb(tmp_path / "debs" / f"debian-reference-{lang}_2.100_all.deb",
                 {f"usr/share/debian-reference/ch02.{lang}.html": page.encode(), **only_english,
                  f"usr/share/doc/debian-reference-{lang}/copyright": b"Format: x\n\nFiles: *\nLicense: GPL-2+\n"})
    rows = list(manuals.rows("de", tmp_path))
    assert {(split, key) for split, key, _, _ in rows} == {
        (clean.split_of("debian-reference:ch02"), "debian-reference-de@2.100:ch02")}  # no German ch03
    assert len(rows) == 8
    assert manuals.packages(tmp_path)["debian-reference-de"] == ("2.100", "GPL-2+")
