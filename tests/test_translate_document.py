"""nmt-translate -i FILE.docx -o OUT.docx (clients/translate_document.py) against a real server
with the tiny model: a document chosen by its extension comes back with its structure and
formatting, each paragraph what nmt-translate answers for its text; a .txt file stays line by
line; --resume and --nbest are refused for a document, and an unreadable document or a
paragraph over the server's limit is a usage error naming it, with nothing written."""

from __future__ import annotations

import io

import docx
import pytest

from clients.translate_document import DOCUMENT_EXTENSIONS, is_document
from clients.translate_file import main as translate_main
from tests.server_harness import ServerThread

SENTENCE = "In the beginning was the Word, and the Word was with God."


@pytest.fixture(scope="module")
def server(tiny_package):
    s = ServerThread(tiny_package, max_chars=300)
    yield s
    s.stop()


def run(server, *args: str) -> int:
    return translate_main(["-s", "en", "-t", "de", "--address", server.address, "-q", *args])


def translation(server, capsys, text: str) -> str:
    assert run(server, text) == 0
    return capsys.readouterr().out.rstrip("\n")


def test_a_docx_through_nmt_translate(server, tmp_path, capsys):
    d = docx.Document()
    d.add_heading("The Word", level=1)
    p = d.add_paragraph("In the beginning ")
    p.add_run("was the Word").bold = True
    p.add_run(", and the Word was with God.")
    source = tmp_path / "report.docx"
    d.save(source)
    out = tmp_path / "report.de.docx"
    assert run(server, "-i", str(source), "-o", str(out)) == 0
    assert not (tmp_path / "report.de.docx.partial").exists() and not (tmp_path / "report.de.docx.lock").exists()
    after = docx.Document(io.BytesIO(out.read_bytes()))
    assert [len(p.runs) for p in after.paragraphs] == [1, 3]
    assert [r.bold for r in after.paragraphs[1].runs] == [None, True, None]
    assert after.paragraphs[1].text == translation(server, capsys, SENTENCE)
    assert after.paragraphs[0].text == translation(server, capsys, "The Word")


def test_subtitles_to_standard_output(server, tmp_path, capsys):
    source = tmp_path / "film.srt"
    source.write_text(f"1\n00:00:01,000 --> 00:00:02,000\n{SENTENCE}\n")
    assert run(server, "-i", str(source)) == 0
    out = capsys.readouterr().out
    assert out == f"1\n00:00:01,000 --> 00:00:02,000\n{translation(server, capsys, SENTENCE)}\n"


def test_text_files_stay_line_by_line():
    assert ".txt" not in DOCUMENT_EXTENSIONS and not is_document("book.en") and not is_document("-")
    assert is_document("a.DOCX") and is_document("page.htm")


def test_document_refusals_name_the_reason(server, tmp_path, capsys):
    broken = tmp_path / "broken.docx"
    broken.write_bytes(b"not a zip")
    out = tmp_path / "out.docx"
    assert run(server, "-i", str(broken), "-o", str(out)) == 2
    assert "broken.docx: the .docx file is corrupt" in capsys.readouterr().err and not out.exists()
    page = tmp_path / "page.html"
    page.write_text(f"<p>{SENTENCE}</p><p>{'word ' * 70}</p>")
    assert run(server, "-i", str(page), "-o", str(tmp_path / "out.html")) == 2
    assert "page.html: paragraph 2: 349 characters; the server's limit is 300" in capsys.readouterr().err  # stripped
    assert run(server, "-i", str(page), "-o", str(tmp_path / "out.html"), "--resume") == 2
    assert "is a document, translated whole: run the command again without --resume" in capsys.readouterr().err
    assert not (tmp_path / "out.html").exists()
