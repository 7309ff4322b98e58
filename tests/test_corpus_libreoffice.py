"""The modern corpus: .deb unpacking, help pages aligned by paragraph id, UI catalogs, clean-up
and splits that never leak; on real files built here (a real .deb, real .mo catalogs)."""

from __future__ import annotations

import io
import struct
import tarfile
from pathlib import Path

import pytest

from cli import UsageError
from corpus import debian, libreoffice


def ar_archive(members: dict[str, bytes]) -> bytes:
    out = [b"!<arch>\n"]
    for name, data in members.items():
        header = f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n".encode()
        out += [header, data, b"\n" if len(data) % 2 else b""]
    return b"".join(out)


def tar_xz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo("./" + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def make_deb(path: Path, files: dict[str, bytes], control: dict[str, bytes] | None = None) -> None:
    """A .deb as dpkg-deb lays it out: ``debian-binary``, the control archive (``control``,
    ``templates`` ...), then the data archive."""
    control = control or {"control": f"Package: {path.name.split('_')[0]}\n".encode()}
    path.write_bytes(ar_archive({"debian-binary": b"2.0\n", "control.tar.xz": tar_xz(control),
                                 "data.tar.xz": tar_xz(files)}))


def mo_file(entries: dict[str, str]) -> bytes:
    """A gettext catalog in the binary .mo format (what msgfmt writes)."""
    keys = sorted(entries)
    ids = [k.encode() for k in keys]
    strs = [entries[k].encode() for k in keys]
    n = len(keys)
    table_start = 28
    data_start = table_start + 16 * n
    offsets, data = [], b""
    for blob in ids + strs:
        offsets.append((len(blob), data_start + len(data)))
        data += blob + b"\0"
    header = struct.pack("<7I", 0x950412DE, 0, n, table_start, table_start + 8 * n, 0, 0)
    table = b"".join(struct.pack("<2I", *o) for o in offsets)
    return header + table + data


def page(lang: str, paragraphs: dict[str, str]) -> bytes:
    body = "".join(f'<p id="{k}" class="paragraph">{v}</p>\n' for k, v in paragraphs.items())
    return (f'<html lang="{lang}"><body><div id="DisplayArea"><h1 id="hd_id1">Title {lang}</h1>'
            f'<meta itemprop="keywords" content="x">{body}</div></body></html>').encode()


# Pages whose path hashes into each split (libreoffice.page_split is a stable hash).
def page_names() -> dict[str, str]:
    found: dict[str, str] = {}
    i = 0
    while len(found) < 3:
        name = f"text/shared/page{i}.html"
        found.setdefault(libreoffice.page_split(name), name)
        i += 1
    return found


@pytest.fixture()
def cache(tmp_path: Path) -> Path:
    names = page_names()
    en = {
        names["train"]: {"par_id1": "Opens the <span class=\"menuitem\">Find</span> dialog.",
                         "par_id2": "Click OK.", "par_id3": "Same text", "par_id4": "Shared sentence."},
        names["dev"]: {"par_id1": "Saves the document in $[officename]."},
        names["test"]: {"par_id1": "Shared sentence.", "par_id2": "Prints the file."},
    }
    de = {
        names["train"]: {"par_id1": "Öffnet den Dialog <span>Suchen</span>.", "par_id2": "Klicken Sie auf OK.",
                         "par_id3": "Same text", "par_id4": "Gemeinsamer Satz."},
        names["dev"]: {"par_id1": "Speichert das Dokument in $[officename]."},
        names["test"]: {"par_id1": "Gemeinsamer Satz.", "par_id2": "Druckt die Datei."},
    }
    debs = tmp_path / "debs"
    debs.mkdir()
    for lang, pages in (("en-US", en), ("de", de)):
        pkg = libreoffice.HELP_PACKAGE["en" if lang == "en-US" else lang]
        files = {f"usr/share/libreoffice/help/{lang}/{name}": page(lang, paras) for name, paras in pages.items()}
        make_deb(debs / f"{pkg}_1.0_all.deb", files)
    catalog = mo_file({"": "Content-Type: text/plain; charset=UTF-8\n", "ctx\x04~File": "~Datei",
                       "ctx2\x04_Options": "_Optionen", "ctx3\x04Prints the file.": "Druckt die Datei.",
                       "ctx4\x04Variable $(ARG1) not found.": "Variable $(ARG1) nicht gefunden."})
    make_deb(debs / "libreoffice-l10n-de_1.0_all.deb",
             {"usr/lib/libreoffice/program/resource/de/LC_MESSAGES/sb.mo": catalog})
    return tmp_path


def test_deb_unpacks_with_the_standard_library(tmp_path: Path) -> None:
    (tmp_path / "debs").mkdir()
    make_deb(tmp_path / "debs" / "pkg_2.0_all.deb", {"usr/share/x.txt": b"hello"})
    root = debian.unpacked("pkg", tmp_path)
    assert (root / "usr/share/x.txt").read_bytes() == b"hello"
    assert debian.unpacked("pkg", tmp_path) == root  # once: the second call finds it unpacked


def test_a_missing_package_names_where_to_put_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(debian.shutil, "which", lambda _: None)
    with pytest.raises(UsageError, match=r"put nope_\*\.deb into .*debs"):
        debian.fetch_deb("nope", tmp_path)


def test_help_paragraphs_align_by_id_and_split_by_page(cache: Path) -> None:
    libreoffice.build(["de"], cache)
    names = page_names()
    train = libreoffice.read_rows("libreoffice-help", "train", "de", cache)
    test = libreoffice.read_rows("libreoffice-help", "test", "de", cache)
    dev = libreoffice.read_rows("libreoffice-help", "dev", "de", cache)
    # markup gone, identical pairs dropped; "Shared sentence." and the title are in test: not trained on
    assert [(en, de) for _, en, de in train] == [("Opens the Find dialog.", "Öffnet den Dialog Suchen."),
                                                ("Click OK.", "Klicken Sie auf OK.")]
    assert next(k for k, _, _ in train) == f"{names['train']}#par_id1"
    assert [(en, de) for _, en, de in dev] == [("Saves the document in LibreOffice.",
                                               "Speichert das Dokument in LibreOffice.")]
    assert ("Shared sentence.", "Gemeinsamer Satz.") in [(en, de) for _, en, de in test]
    assert all(k.startswith(names["test"]) for k, _, _ in test)


def test_ui_strings_lose_accelerators_and_held_out_text(cache: Path) -> None:
    rows = libreoffice.read_rows("libreoffice-ui", "train", "de", cache)
    assert sorted((en, de) for _, en, de in rows) == [("File", "Datei"), ("Options", "Optionen"),
                                                     ("Variable $(ARG1) not found.",
                                                      "Variable $(ARG1) nicht gefunden.")]
    assert libreoffice.read_rows("libreoffice-ui", "test", "de", cache) == []


def test_pairs_go_both_ways(cache: Path) -> None:
    pairs = libreoffice.pairs("libreoffice-ui", ["en-de", "de-en", "fr-de"], "train", cache)
    assert sorted({p.direction for p in pairs}) == ["de-en", "en-de"]  # fr-de: this source pairs with English only
    back = [p for p in pairs if p.direction == "de-en"]
    assert ("Datei", "File") in [(p.src, p.tgt) for p in back]


def test_clean_up_rules() -> None:
    assert libreoffice.clean_ui("~Save As...") == "Save As..."
    assert libreoffice.clean_ui("Auto_matic") == "Automatic"
    assert libreoffice.clean_ui("file_name and dir_name") == "file_name and dir_name"
    assert libreoffice.clean_text("a \u00adb\n  c %PRODUCTNAME") == "a b c LibreOffice"
    assert not libreoffice.acceptable("Same", "Same")
    assert not libreoffice.acceptable("A short one.", "x" * 200)
    assert libreoffice.acceptable("Print", "Drucken")
