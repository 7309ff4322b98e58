"""LibreTranslate's /translate_file and /download_file on the real gateway in front of the real
gRPC server with the tiny model (free localhost ports), driven by libretranslate-aio (a
LibreTranslate client from PyPI with a file method) and by plain multipart requests: every
format comes back with its structure, its text is what /translate answers for the same text
(so it was sent, and translated as a text is), and the refusals say why: an unsupported
extension, a corrupt file, a file or a paragraph over a limit, a missing or wrong key, a name
that is not a stored file's (path traversal included), an expired file."""

from __future__ import annotations

import io
import re
import time
import urllib.parse

import docx
import httpx
import pytest
from libretranslate_aio import LibreTranslate
from libretranslate_aio.exceptions import BadRequestError
from odf import teletype
from odf.opendocument import OpenDocumentText, load
from odf.text import P, Span

from gateway.config import GatewayConfig, parse_args
from tests.gateway_harness import GatewayThread
from tests.server_harness import ServerThread

SENTENCE = "In the beginning was the Word, and the Word was with God."
OTHER = "Jesus wept."
MAX_CHARS = 500


@pytest.fixture(scope="module")
def server(tiny_package):
    s = ServerThread(tiny_package, max_chars=MAX_CHARS)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def gw(server):
    g = GatewayThread(GatewayConfig(grpc_address=server.address, max_file_bytes=200_000, max_file_chars=5_000))
    yield g
    g.stop()


def translated(gw: GatewayThread, text: str) -> str:
    r = gw.client.post("/translate", json={"q": text, "source": "en", "target": "de", "api_key": "k-alice"})
    assert r.status_code == 200, r.text
    return r.json()["translatedText"]


def send(gw: GatewayThread, name: str, data: bytes, **fields: str) -> httpx.Response:
    return gw.client.post("/translate_file", data={"source": "en", "target": "de", **fields},
                          files={"file": (name, data)})


def fetch(gw: GatewayThread, response: httpx.Response) -> httpx.Response:
    assert response.status_code == 200, response.text
    url = response.json()["translatedFileUrl"]
    assert url.startswith(gw.url + "/download_file/")
    return gw.client.get(url)


def _docx() -> bytes:
    d = docx.Document()
    d.add_heading("The Word", level=1)
    p = d.add_paragraph("In the beginning ")
    p.add_run("was the Word").bold = True
    p.add_run(", and the Word was with God.")
    d.add_table(rows=1, cols=2).cell(0, 1).text = OTHER
    out = io.BytesIO()
    d.save(out)
    return out.getvalue()


def test_libretranslate_aio_translates_a_docx(gw):
    source = _docx()
    with LibreTranslate(gw.url) as lt:
        settings = lt.frontend_settings()
        assert settings.supported_files_format == [".txt", ".html", ".htm", ".md", ".srt", ".vtt", ".docx", ".odt"]
        result = lt.translate_file(_named(source, "report.docx"), "en", "de")
    url = result.translated_file_url
    assert re.fullmatch(re.escape(gw.url) + r"/download_file/[0-9a-f]{32}\.report_de\.docx", url)
    r = gw.client.get(url)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    assert r.headers["content-disposition"] == 'attachment; filename="report_de.docx"'
    before, after = docx.Document(io.BytesIO(source)), docx.Document(io.BytesIO(r.content))
    assert [len(p.runs) for p in after.paragraphs] == [len(p.runs) for p in before.paragraphs]
    assert [r.bold for r in after.paragraphs[1].runs] == [None, True, None]
    assert after.paragraphs[0].text == translated(gw, "The Word")
    assert after.paragraphs[1].text == translated(gw, SENTENCE)
    assert after.tables[0].cell(0, 1).text == translated(gw, OTHER)


def _named(data: bytes, name: str) -> io.BytesIO:
    f = io.BytesIO(data)
    f.name = name
    return f


def test_every_text_format_through_the_gateway(gw):
    cases = {
        "notes.txt": (f"{SENTENCE}\n\n{OTHER}\n", "text/plain; charset=utf-8"),
        "page.html": (f"<html><body><p>{SENTENCE}</p><p><b>{OTHER}</b></p></body></html>", "text/html; charset=utf-8"),
        "README.md": (f"# {OTHER}\n\n{SENTENCE}\n\n```\nkeep this code\n```\n", "text/markdown; charset=utf-8"),
        "film.srt": (f"1\n00:00:01,000 --> 00:00:02,000\n{SENTENCE}\n\n2\n00:00:03,000 --> 00:00:04,000\n{OTHER}\n",
                     "application/x-subrip; charset=utf-8"),
        "film.vtt": (f"WEBVTT\n\n00:01.000 --> 00:02.000 align:start\n{SENTENCE}\n", "text/vtt; charset=utf-8"),
    }
    for name, (text, media) in cases.items():
        r = fetch(gw, send(gw, name, text.encode()))
        assert r.status_code == 200 and r.headers["content-type"] == media, name
        out = r.content.decode()
        assert translated(gw, SENTENCE) in out, name
        assert out.count("\n") == text.count("\n"), name
    out = fetch(gw, send(gw, "film.srt", cases["film.srt"][0].encode())).text
    assert re.findall(r".* --> .*", out) == re.findall(r".* --> .*", cases["film.srt"][0])
    assert "```\nkeep this code\n```" in fetch(gw, send(gw, "README.md", cases["README.md"][0].encode())).text


def test_an_odt_keeps_its_spans(gw):
    doc = OpenDocumentText()
    p = P(text="In the beginning ")
    p.addElement(Span(text="was the Word"))
    p.addText(", and the Word was with God.")
    doc.text.addElement(p)
    buf = io.BytesIO()
    doc.write(buf)
    r = fetch(gw, send(gw, "book.odt", buf.getvalue()))
    assert r.headers["content-disposition"] == 'attachment; filename="book_de.odt"'
    after = load(io.BytesIO(r.content))
    assert len(after.text.getElementsByType(Span)) == 1
    assert teletype.extractText(after.text.getElementsByType(P)[0]) == translated(gw, SENTENCE)


def test_source_auto_tells_the_language_of_the_document(gw):
    german = "Im Anfang war das Wort, und das Wort war bei Gott. Und Gott sprach: Es werde Licht."
    r = fetch(gw, send(gw, "brief.txt", (german + "\n").encode(), source="auto", target="en"))
    expected = gw.client.post("/translate", json={"q": german, "source": "de", "target": "en"}).json()
    assert r.text == expected["translatedText"] + "\n"
    # Told to be in the target language already: given back as it is.
    r = fetch(gw, send(gw, "brief.txt", (german + "\n").encode(), source="auto", target="de"))
    assert r.text == german + "\n"


@pytest.mark.parametrize("name, data, status, message", [
    ("slides.pdf", b"%PDF", 400, "Invalid request: file format not supported (.pdf; supported: .txt,"),
    ("broken.docx", b"PK\x03\x04 not a zip", 400, "Invalid request: the .docx file is corrupt"),
    ("latin.txt", "café".encode("latin-1"), 400, "Invalid request: the .txt file is not UTF-8 text"),
    ("big.txt", b"word " * 50_000, 400, "Invalid request: the file is larger than this gateway's limit of 200000 "
                                        "bytes (--max-file-bytes)"),
    ("long.txt", ("x" * 600 + "\n").encode(), 400, "Invalid request: line 1: request (600) exceeds text limit (500)"),
    ("many.txt", ("word " * 90 + "\n").encode() * 12, 400, "exceeds text limit (5000): the file holds more "
                                                           "characters to translate than this gateway's"),
])
def test_files_refused_with_the_reason(gw, name, data, status, message):
    r = send(gw, name, data)
    assert r.status_code == status and message in r.json()["error"], r.text
    with LibreTranslate(gw.url) as lt, pytest.raises(BadRequestError, match=re.escape(message[:40])):
        lt.translate_file(_named(data, name), "en", "de")


def test_missing_fields_as_libretranslate_words_them(gw):
    r = gw.client.post("/translate_file", data={"source": "en", "target": "de"})
    assert (r.status_code, r.json()) == (400, {"error": "Invalid request: missing file parameter"})
    r = gw.client.post("/translate_file", data={"target": "de"}, files={"file": ("a.txt", b"Hello")})
    assert (r.status_code, r.json()) == (400, {"error": "Invalid request: missing source parameter"})
    r = send(gw, "a.txt", b"Hello", target="xx")
    assert (r.status_code, r.json()) == (400, {"error": "xx is not supported"})


@pytest.mark.parametrize("name", ["..%2f..%2fetc%2fpasswd", "%2e%2e", "0123456789abcdef0123456789abcdef.x.txt",
                                  "0123456789abcdef0123456789abcdef.%2e%2e%2fgateway.py", "x" * 40, ".hidden"])
def test_names_that_are_no_stored_file_are_404(gw, name):
    r = gw.client.get(f"/download_file/{name}")
    assert r.status_code == 404, r.text
    assert "error" in r.json()


def test_a_file_expires(server):
    g = GatewayThread(GatewayConfig(grpc_address=server.address, files_ttl=1.0))
    try:
        r = send(g, "a.txt", f"{OTHER}\n".encode())
        path = urllib.parse.urlparse(r.json()["translatedFileUrl"]).path
        assert g.client.get(path).status_code == 200
        time.sleep(1.5)
        assert g.client.get(path).status_code == 404
        stored = g.server.config.app.state.gateway.store.path
        assert list(stored.iterdir()) == []  # swept, not only hidden
    finally:
        g.stop()
    assert not stored.exists()  # the gateway's own folder goes with it


def test_api_keys_as_for_translate(server, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("k-alice\n")
    cfg = parse_args(["--grpc-address", server.address, "--api-keys-file", str(keys)], {})
    g = GatewayThread(cfg, cfg.api_keys())
    try:
        with LibreTranslate(g.url) as lt, pytest.raises(BadRequestError, match="API key"):
            lt.translate_file(_named(b"Hello there.\n", "a.txt"), "en", "de")
        assert send(g, "a.txt", b"Hello there.\n", api_key="k-eve").status_code == 403
        with LibreTranslate(g.url, api_key="k-alice") as lt:
            url = lt.translate_file(_named(f"{OTHER}\n".encode(), "a.txt"), "en", "de").translated_file_url
        assert g.client.get(url).text == translated(g, OTHER) + "\n"
        assert g.client.get("/frontend/settings").json()["filesTranslation"] is True
    finally:
        g.stop()
