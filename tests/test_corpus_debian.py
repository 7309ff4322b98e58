"""Debian packages as a data source: batch fetching from the cache, selective extraction, the
control archive, versions and licences; on real .deb files built here."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from corpus import debian
from tests.test_corpus_libreoffice import make_deb

DEP5 = """Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: foo

Files: debian/*
License: GPL-2+

Files: *
Copyright: 2020 Someone
License: LGPL-2.1+
 The text of the licence.

License: GPL-2+
 The text of the licence.
"""

FREE_FORM = """This package was debianized by Someone.

It is distributed under the terms of the GNU General Public License, version 2, and its
manual under the Creative Commons Attribution licence.
"""


@pytest.fixture()
def cache(tmp_path: Path) -> Path:
    (tmp_path / "debs").mkdir()
    make_deb(tmp_path / "debs" / "foo_1%3a2.0-1_all.deb",
             {"usr/share/locale/de/LC_MESSAGES/foo.mo": b"catalog", "usr/share/foo/big.bin": b"x" * 1000,
              "usr/share/doc/foo/copyright": DEP5.encode()},
             control={"control": b"Package: foo\nSource: foo-src\nVersion: 1:2.0-1\n",
                      "templates": b"Template: foo/question\nType: boolean\nDescription: Really?\n"})
    return tmp_path


def test_version_comes_from_the_file_name(cache: Path) -> None:
    assert debian.package_version(cache / "debs" / "foo_1%3a2.0-1_all.deb") == "1:2.0-1"


def test_fetch_debs_finds_cached_packages_and_names_the_missing(cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(debian.shutil, "which", lambda _: None)  # nothing can be downloaded here
    found = debian.fetch_debs(["foo", "bar", "foo"], cache)
    assert found == {"foo": cache / "debs" / "foo_1%3a2.0-1_all.deb"}
    assert "Debian package bar could not be downloaded; left out" in capsys.readouterr().err


def test_extracted_unpacks_only_the_selected_files(cache: Path) -> None:
    root = debian.extracted("foo", lambda path: path.endswith(".mo"), "catalogs", cache)
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) == [
        ".complete", "usr/share/locale/de/LC_MESSAGES/foo.mo"]
    assert debian.extracted("foo", lambda path: False, "catalogs", cache) == root  # once per label
    other = debian.extracted("foo", lambda path: path.endswith("/copyright"), "copyright", cache)
    assert debian.package_license(other, "foo") == "LGPL-2.1+"
    assert debian.package_license(root, "foo") == ""  # no copyright file there


def test_control_file_reads_the_control_archive(cache: Path) -> None:
    templates = debian.control_file("foo", "templates", cache)
    assert templates == b"Template: foo/question\nType: boolean\nDescription: Really?\n"
    assert debian.control_file("foo", "config", cache) is None
    if shutil.which("dpkg-deb"):  # dpkg's own reader sees the same package
        deb = cache / "debs" / "foo_1%3a2.0-1_all.deb"
        shown = subprocess.run(["dpkg-deb", "--info", str(deb), "templates"], capture_output=True, check=True)
        assert shown.stdout == templates
        listed = subprocess.run(["dpkg-deb", "--contents", str(deb)], capture_output=True, text=True, check=True)
        assert "./usr/share/foo/big.bin" in listed.stdout


@pytest.mark.parametrize(("text", "licence"), [
    (DEP5, "LGPL-2.1+"),
    (DEP5.replace("Files: *\n", "Files: src/*\n"), "GPL-2+"),  # no Files: * stanza: the first licence named
    (FREE_FORM, "GPL (free-form copyright file)"),
    ("Copyright 2020 Someone. All rights reserved.", ""),
])
def test_license_of(text: str, licence: str) -> None:
    assert debian.license_of(text) == licence
