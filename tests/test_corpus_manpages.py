"""Manual pages from real .deb files built here: roff read into blocks, pages aligned where the
translation keeps the English structure, code left out, split by page."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from corpus import clean, debian, manpages
from tests.test_corpus_libreoffice import make_deb

EN = r""".\" Copyright and licence comments
.TH LS 1 2023 "GNU coreutils 9.1"
.SH NAME
ls \- list directory contents
.SH SYNOPSIS
.B ls
[\fI\,OPTION\/\fR]... [\fI\,FILE\/\fR]...
.SH DESCRIPTION
.PP
List information about the FILEs (the current directory by default).
Sort entries alphabetically.
.TP
\fB\-a\fR, \fB\-\-all\fR
do not ignore entries starting with .
.SS "Exit status:"
.nf
0  if OK,
2  if serious trouble.
.fi
.PP
Use
.BR dir (1)
for a \(lqlong\(rq listing.
"""

DE = r""".\" This file was generated with po4a. Translate the source file.
.TH LS 1 2023 "GNU coreutils 9.1"
.SH BEZEICHNUNG
ls \- Verzeichnisinhalte auflisten
.SH ÜBERSICHT
\fBls\fP [\fI\,OPTION\/\fP]… [\fI\,DATEI\/\fP]…
.SH BESCHREIBUNG
.PP
Informationen über die DATEIen auflisten (standardmäßig das aktuelle Verzeichnis).
Die Einträge alphabetisch sortieren.
.TP
\fB\-a\fP, \fB\-\-all\fP
Einträge, die mit . beginnen, nicht ignorieren
.SS Rückgabewert:
.nf
0  falls OK,
2  bei ernsthaften Schwierigkeiten.
.fi
.PP
Verwenden Sie \fBdir\fP(1) für eine \(lqlange\(rq Auflistung.
.SH ÜBERSETZUNG
Die deutsche Übersetzung dieser Handbuchseite wurde von Jemandem erstellt.
"""


def test_blocks_read_roff_and_leave_out_no_fill_text() -> None:
    assert manpages.blocks(EN) == [
        ("SH", "NAME"), ("body", "ls - list directory contents"),
        ("SH", "SYNOPSIS"), ("body", "ls [OPTION]... [FILE]..."), ("SH", "DESCRIPTION"), ("body", ""),
        ("PP", "List information about the FILEs (the current directory by default). Sort entries alphabetically."),
        ("TP-tag", "-a, --all"), ("TP", "do not ignore entries starting with ."), ("SS", "Exit status:"),
        ("body", ""), ("PP", "Use dir(1) for a “long” listing.")]


def test_pages_align_where_the_translation_keeps_the_structure() -> None:
    pairs = manpages.page_pairs(EN, DE)
    assert ("List information about the FILEs (the current directory by default).",
            "Informationen über die DATEIen auflisten (standardmäßig das aktuelle Verzeichnis).") in pairs
    assert ("do not ignore entries starting with .", "Einträge, die mit . beginnen, nicht ignorieren") in pairs
    assert ("Use dir(1) for a “long” listing.", "Verwenden Sie dir(1) für eine “lange” Auflistung.") in pairs
    assert not [en for en, _ in pairs if "OK" in en]  # the no-fill exit codes are not prose
    assert manpages.page_pairs(EN, DE.replace(".TP\n", ".PP\n")) == []  # another structure: left out


def test_rows_from_real_debs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(debian.shutil, "which", lambda _: None)
    monkeypatch.setattr(manpages, "ENGLISH", ("coreutils",))
    monkeypatch.setattr(manpages, "OWN", ("dpkg",))
    (tmp_path / "debs").mkdir()
    english = {"usr/share/man/man1/ls.1.gz": gzip.compress(EN.encode()),
               "usr/share/man/man1/dir.1.gz": gzip.compress(EN.encode())}
    make_deb(tmp_path / "debs" / "coreutils_9.1-1_amd64.deb", english)
    make_deb(tmp_path / "debs" / "manpages-de_4.18.1-1_all.deb", {
        "usr/share/man/de/man1/ls.1.gz": gzip.compress(DE.encode()),
        "usr/share/man/de/man1/cp.1.gz": gzip.compress(DE.encode()),  # no English original here
        "usr/share/doc/manpages-de/copyright": b"Format: x\n\nFiles: *\nLicense: GPL-3+\n"})
    make_deb(tmp_path / "debs" / "dpkg_1.21.23_amd64.deb", {  # its own translation beside the English page
        "usr/share/man/man1/dpkg.1.gz": gzip.compress(EN.encode()),
        "usr/share/man/de/man1/dpkg.1.gz": gzip.compress(DE.encode())})
    rows = list(manpages.rows("de", tmp_path))
    assert {(split, key) for split, key, _, _ in rows} == {
        (clean.split_of("manpage:man1/ls.1.gz"), "manpages-de@4.18.1-1:man1/ls.1"),
        (clean.split_of("manpage:man1/dpkg.1.gz"), "dpkg@1.21.23:man1/dpkg.1")}
    assert len(rows) == 2 * len(manpages.page_pairs(EN, DE))
    assert manpages.packages(tmp_path)["manpages-de"] == ("4.18.1-1", "GPL-3+")
