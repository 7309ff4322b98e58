"""documents/: every format read, translated by a stand-in server (tests/documents_helpers.py:
words in upper case, with the attention of a word-for-word alignment) and written again, with
files made by the format's own library (python-docx, odfpy) or written by hand (Markdown,
SubRip, WebVTT, HTML, text): the structure comes back identical (paragraphs, runs and their
formatting, cells, headings, cues and timings, code), every text translated, nothing lost.
The errors name the reason: an unsupported extension, a corrupt file, a zip bomb, not UTF-8."""

from __future__ import annotations

import asyncio
import io
import re
import zipfile

import docx
import pytest
from docx.shared import Pt
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from odf import teletype
from odf.opendocument import OpenDocumentText, load
from odf.style import Style, TextProperties
from odf.table import Table, TableCell, TableColumn, TableRow
from odf.text import A, H, LineBreak, List, ListItem, Note, NoteBody, NoteCitation, P, S, Span

from documents.document import DocumentError, Limits, Segment
from documents.formats import EXTENSIONS, media_type, read_document
from documents.html_text import proportional
from documents.inline import InlineText, Piece, anchor
from documents.translate import Batching, translate_segments
from nmt.v1 import translator_pb2 as pb
from tests.documents_helpers import shout, texts, translate


# ---------------------------------------------------------------- .docx
def _docx() -> bytes:
    d = docx.Document()
    d.add_heading("The Gospel of John", level=1)
    p = d.add_paragraph("In the beginning ")
    p.add_run("was the Word").bold = True
    p.add_run(", and the Word was ")
    r = p.add_run("with God")
    r.italic, r.font.size = True, Pt(14)
    p.add_run(".")
    p = d.add_paragraph("Before the tab")
    p.add_run().add_tab()
    p.add_run("after the tab")
    table = d.add_table(rows=2, cols=2)
    for i, cell in enumerate(c for row in table.rows for c in row.cells):
        cell.text = f"Cell number {('one', 'two', 'three', 'four')[i]}"
    d.add_paragraph("3.14 42")  # no letters: kept
    d.add_paragraph("Item of a list", style="List Bullet")
    d.sections[0].header.paragraphs[0].text = "The header line"
    d.sections[0].footer.paragraphs[0].text = "The footer line"
    out = io.BytesIO()
    d.save(out)
    return out.getvalue()


def _runs(d: docx.Document) -> list[list[tuple[str, bool | None, bool | None]]]:
    return [[(r.text, r.bold, r.italic) for r in p.runs] for p in d.paragraphs]


def test_docx_round_trip_keeps_every_run_and_its_formatting():
    source = _docx()
    document = read_document("report.docx", source)
    assert "In the beginning was the Word, and the Word was with God." in texts(document.segments)
    assert "3.14 42" not in texts(document.segments)
    out = translate(document)
    before, after = docx.Document(io.BytesIO(source)), docx.Document(io.BytesIO(out))
    assert len(after.paragraphs) == len(before.paragraphs)
    assert [p.style.name for p in after.paragraphs] == [p.style.name for p in before.paragraphs]
    # Every run is where it was, with its formatting; the attention put each word in its run (a
    # word as a whole: "Word," goes where "Word" was).
    old, new = _runs(before), _runs(after)
    assert [len(p) for p in new] == [len(p) for p in old]
    for p_old, p_new in zip(old, new):
        assert "".join(r[0] for r in p_new) == shout("".join(r[0] for r in p_old))
        for (text, bold, italic), (text2, bold2, italic2) in zip(p_old, p_new):
            assert shout(text).strip(" ,.") in text2 and (bold2, italic2) == (bold, italic)
    assert after.paragraphs[1].runs[3].font.size == Pt(14)
    assert after.paragraphs[2].runs[1]._r.xpath("./w:tab")  # the tab stays between its texts
    assert [c.text for row in after.tables[0].rows for c in row.cells] == \
        [shout(c.text) for row in before.tables[0].rows for c in row.cells]
    assert after.sections[0].header.paragraphs[0].text == "THE HEADER LINE"
    assert after.sections[0].footer.paragraphs[0].text == "THE FOOTER LINE"
    # Nothing else in the package changed: the same parts, in the same order.
    with zipfile.ZipFile(io.BytesIO(source)) as a, zipfile.ZipFile(io.BytesIO(out)) as b:
        assert sorted(a.namelist()) == sorted(b.namelist())
        assert a.read("word/styles.xml") == b.read("word/styles.xml")


def test_docx_runs_get_the_words_the_attention_gives_them():
    d = docx.Document()
    p = d.add_paragraph("Jesus ")
    p.add_run("wept").bold = True
    p.add_run(" and the people wondered.")
    buf = io.BytesIO()
    d.save(buf)
    document = read_document("x.docx", buf.getvalue())
    [segment] = document.segments
    assert segment.marked
    out = docx.Document(io.BytesIO(translate(document)))
    assert [(r.text, r.bold) for r in out.paragraphs[0].runs] == [("JESUS ", None), ("WEPT", True),
                                                                    (" AND THE PEOPLE WONDERED.", None)]


# ---------------------------------------------------------------- .odt
def _odt() -> bytes:
    doc = OpenDocumentText()
    bold = Style(name="Bold", family="text")
    bold.addElement(TextProperties(fontweight="bold"))
    doc.automaticstyles.addElement(bold)
    doc.text.addElement(H(outlinelevel=1, text="The Gospel of John"))
    p = P(text="In the beginning ")
    p.addElement(Span(stylename=bold, text="was the Word"))
    p.addText(", and the Word was with ")
    p.addElement(A(href="https://example.org/god", text="God"))
    p.addText(".")
    note = Note(id="n1", noteclass="footnote")
    note.addElement(NoteCitation(text="1"))
    body = NoteBody()
    body.addElement(P(text="A note about the verse."))
    note.addElement(body)
    p.addElement(note)
    doc.text.addElement(p)
    p = P(text="First line")
    p.addElement(LineBreak())
    p.addText("second line")
    p.addElement(S(c=3))
    p.addText("after spaces")
    doc.text.addElement(p)
    items = List()
    for text in ("First item", "Second item"):
        item = ListItem()
        item.addElement(P(text=text))
        items.addElement(item)
    doc.text.addElement(items)
    table = Table(name="T")
    table.addElement(TableColumn(numbercolumnsrepeated=2))
    for row_texts in (("Cell one", "Cell two"), ("Cell three", "12")):
        row = TableRow()
        for text in row_texts:
            cell = TableCell()
            cell.addElement(P(text=text))
            row.addElement(cell)
        table.addElement(row)
    doc.text.addElement(table)
    out = io.BytesIO()
    doc.write(out)
    return out.getvalue()


def _elements(doc) -> dict[str, int]:
    names = ("p", "h", "span", "a", "note", "line-break", "s", "list-item", "table-cell")
    counts: dict[str, int] = {}
    stack = [doc.text]
    while stack:
        node = stack.pop()
        for child in node.childNodes:
            if child.nodeType == child.ELEMENT_NODE:
                if child.qname[1] in names:
                    counts[child.qname[1]] = counts.get(child.qname[1], 0) + 1
                stack.append(child)
    return counts


def test_odt_round_trip_keeps_every_element():
    source = _odt()
    document = read_document("report.odt", source)
    assert "In the beginning was the Word, and the Word was with God." in texts(document.segments)
    assert {"A note about the verse.", "First line", "second line after spaces", "Cell three"} <= \
        set(texts(document.segments))
    out = translate(document)
    before, after = load(io.BytesIO(source)), load(io.BytesIO(out))
    assert _elements(after) == _elements(before)
    paragraphs = [teletype.extractText(p) for p in after.text.getElementsByType(P)]
    assert "IN THE BEGINNING WAS THE WORD, AND THE WORD WAS WITH GOD.1A NOTE ABOUT THE VERSE." in paragraphs
    assert teletype.extractText(after.text.getElementsByType(Span)[0]) == "WAS THE WORD,"  # whole words
    assert teletype.extractText(after.text.getElementsByType(A)[0]) == "GOD."
    assert after.text.getElementsByType(A)[0].getAttribute("href") == "https://example.org/god"
    assert "12" in paragraphs and "CELL THREE" in paragraphs
    assert "FIRST LINE\nSECOND LINE   AFTER SPACES" in paragraphs  # the break and the spaces where they were


# ---------------------------------------------------------------- .md
MARKDOWN = """# The Gospel *of* John

Jesus **wept** and the [people](https://example.org/people "Who") wondered.
Run `make all` to build it.

Setext heading
--------------

- First item
- Second item with ![a picture](pic.png)

> A quoted line

| Column one | Column two |
|------------|------------|
| Cell one   | 12         |

```python
print("code stays")
```

    indented code stays

<div>an HTML block stays</div>
"""


def _blocks(source: str) -> list[tuple[str, str]]:
    tokens = MarkdownIt("commonmark").enable(["table", "strikethrough"]).parse(source)
    return [(t.type, t.content if t.type in ("fence", "code_block", "html_block") else t.tag) for t in tokens
            if t.type != "inline"]


def test_markdown_round_trip_keeps_the_structure_and_the_code():
    document = read_document("README.md", MARKDOWN.encode())
    assert texts(document.segments) == [
        "The Gospel of John", "Jesus wept and the people wondered. Run `make all` to build it.", "Setext heading",
        "First item", "Second item with", "A quoted line", "Column one", "Column two", "Cell one"]
    out = translate(document).decode()
    assert _blocks(out) == _blocks(MARKDOWN)  # headings, lists, quote, table, code and HTML blocks: as they were
    assert out.startswith("# THE GOSPEL *OF* JOHN\n")
    assert "JESUS **WEPT** AND THE [PEOPLE](https://example.org/people \"Who\") WONDERED. RUN `make all` TO BUILD " \
           "IT." in out
    assert "SETEXT HEADING\n--------------" in out
    assert "- SECOND ITEM WITH ![a picture](pic.png)" in out
    assert "| CELL ONE   | 12         |" in out
    assert '```python\nprint("code stays")\n```' in out and "    indented code stays" in out


def test_markdown_escapes_what_would_be_syntax_and_gives_back_a_sentence_whose_code_was_lost():
    document = read_document("a.md", b"Keep `x = 1` here.\n")
    lost = pb.Translation(hypotheses=[pb.Hypothesis(text="Behalte x = 1 hier.")])
    assert document.render([lost]).decode() == "Keep `x = 1` here.\n"
    document = read_document("b.md", b"Stars and underscores\n")
    escaped = pb.Translation(hypotheses=[pb.Hypothesis(text="*Sterne* und _Striche_ [1]")])
    assert document.render([escaped]).decode() == "\\*Sterne\\* und \\_Striche\\_ \\[1\\]\n"
    assert _blocks(document.render([pb.Translation(hypotheses=[pb.Hypothesis(text="# nicht")])]).decode()) == \
        _blocks("Stars\n")


# ---------------------------------------------------------------- .srt and .vtt
SRT = ("1\r\n00:00:01,000 --> 00:00:04,000\r\nIn the beginning was the Word,\r\nand the <i>Word</i> was with God.\r\n"
       "\r\n2\r\n00:00:05,000 --> 00:00:06,500\r\n- Who are you?\r\n- A voice in the desert.\r\n\r\n"
       "3\r\n00:00:07,000 --> 00:00:08,000\r\n♪ 1, 2, 3 ♪\r\n")
VTT = ("WEBVTT - a test\n\nNOTE the notes stay\n\nintro\n00:01.000 --> 00:04.000 align:start line:10%\n"
       "<v Narrator>Tom &amp; Jerry <b>ran</b>\nacross the road.\n\n00:05.000 --> 00:06.000\nThe end.\n")


def _cues(text: str) -> list[tuple[str, int]]:
    """Each cue's timing line and its number of text lines."""
    blocks = [b.splitlines() for b in re.split(r"\r?\n\r?\n", text.strip())]
    return [(b[i], len(b) - i - 1) for b in blocks for i, line in enumerate(b) if "-->" in line]


@pytest.mark.parametrize("name, source", [("film.srt", SRT), ("film.vtt", VTT)])
def test_subtitles_keep_cues_timings_and_lines(name, source):
    document = read_document(name, source.encode())
    out = translate(document).decode()
    assert _cues(out) == _cues(source)
    assert out.count("\r\n") == source.count("\r\n")
    if name.endswith(".srt"):
        assert texts(document.segments) == ["In the beginning was the Word, and the Word was with God.",
                                            "- Who are you?", "- A voice in the desert."]
        assert "IN THE BEGINNING WAS THE WORD,\r\nAND THE <i>WORD</i> WAS WITH GOD.\r\n" in out
        assert out.endswith("♪ 1, 2, 3 ♪\r\n")
    else:
        assert texts(document.segments) == ["Tom & Jerry ran across the road.", "The end."]
        assert out.startswith("WEBVTT - a test\n\nNOTE the notes stay\n\nintro\n")
        assert "<v Narrator>TOM &amp; JERRY <b>RAN</b>\nACROSS THE ROAD.\n" in out


# ---------------------------------------------------------------- .html and .txt
def test_html_file_keeps_its_markup():
    source = ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>A page</title>'
              '<style>p { color: red }</style></head><body><p>Jesus <b>wept</b>.</p><script>var x = "text";</script>'
              '<p>The end &amp; more</p></body></html>')
    document = read_document("page.html", source.encode())
    assert texts(document.segments) == ["A page", "Jesus wept.", "The end & more"]
    out = translate(document).decode()
    assert re.findall(r"<[^>]*>", out) == re.findall(r"<[^>]*>", source)
    assert "<p>JESUS <b>WEPT.</b></p>" in out or "<p>JESUS <b>WEPT</b>.</p>" in out
    assert "THE END &amp; MORE" in out and 'var x = "text";' in out


def test_html_file_in_its_meta_charset():
    source = '<html><head><meta charset="iso-8859-1"></head><body><p>Café crème</p></body></html>'.encode("latin-1")
    document = read_document("page.htm", source)
    assert texts(document.segments) == ["Café crème"]
    assert "CAFÉ CRÈME".encode("latin-1") in translate(document)


def test_text_file_line_by_line():
    source = "\ufeffFirst line.\r\n\r\n  Indented line  \r\n1234\r\nLast line without an ending"
    document = read_document("notes.TXT", source.encode("utf-8"))
    assert texts(document.segments) == ["First line.", "Indented line", "Last line without an ending"]
    assert [s.where for s in document.segments] == ["line 1", "line 3", "line 5"]
    out = translate(document).decode("utf-8")
    assert out == "\ufeffFIRST LINE.\r\n\r\n  INDENTED LINE  \r\n1234\r\nLAST LINE WITHOUT AN ENDING"


# ---------------------------------------------------------------- errors and limits
def test_every_format_has_its_media_type():
    assert EXTENSIONS == (".txt", ".html", ".htm", ".md", ".srt", ".vtt", ".docx", ".odt")
    assert media_type("a.docx") == "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    assert media_type("a.odt") == "application/vnd.oasis.opendocument.text"
    assert media_type("a.bin") == "application/octet-stream"


@pytest.mark.parametrize("name, data, reason", [
    ("slides.pdf", b"%PDF-1.4", ".pdf is not a supported format; supported: .txt, .html"),
    ("noext", b"text", "a file without an extension is not a supported format"),
    ("broken.docx", b"PK\x03\x04 not really a zip", "the .docx file is corrupt: it is not a zip archive"),
    ("broken.odt", b"hello", "the .odt file is corrupt: it is not a zip archive"),
    ("latin.txt", "café".encode("latin-1"), "the .txt file is not UTF-8 text (byte 3"),
    ("latin.srt", "café".encode("latin-1"), "the .srt file is not UTF-8 text"),
])
def test_unreadable_files_say_why(name, data, reason):
    with pytest.raises(DocumentError, match=re.escape(reason)):
        read_document(name, data)


def test_a_zip_that_is_no_word_document_is_corrupt():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("hello.txt", "not a document")
    with pytest.raises(DocumentError, match=r"the \.docx file is corrupt or not a Word document"):
        read_document("x.docx", buf.getvalue())
    with pytest.raises(DocumentError, match=r"the \.odt file is corrupt or not an OpenDocument file"):
        read_document("x.odt", buf.getvalue())


def test_a_zip_bomb_is_refused_by_its_unpacked_size():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("word/document.xml", b"\0" * 3_000_000)
    assert len(buf.getvalue()) < 10_000
    with pytest.raises(DocumentError, match="unpacks to 3000000 bytes, more than the limit of 2000000 bytes"):
        read_document("bomb.docx", buf.getvalue(), Limits(max_unpacked_bytes=2_000_000))
    with pytest.raises(DocumentError, match="more than the limit of 1000 bytes"):
        read_document("big.txt", b"x" * 1001, Limits(max_bytes=1000))


# ---------------------------------------------------------------- documents/translate.py
def test_segments_are_batched_sent_once_and_answered_in_order():
    segments = [Segment(f"text {i % 5}", f"line {i}", marked=i % 2 == 1) for i in range(40)]
    calls: list[tuple[list[str], bool]] = []

    async def call(batch: list[Segment], attention: bool) -> list[pb.Translation]:
        calls.append(([s.text for s in batch], attention))
        return [pb.Translation(hypotheses=[pb.Hypothesis(text=shout(s.text))]) for s in batch]

    answers = asyncio.run(translate_segments(segments, call, Batching(texts_per_call=3, marked_per_call=2)))
    assert [a.hypotheses[0].text for a in answers] == [shout(s.text) for s in segments]
    sent = [(text, attention) for batch, attention in calls for text in batch]
    assert sorted(sent) == sorted({(s.text, s.marked) for s in segments})  # each distinct text once
    assert all(len(batch) <= (2 if attention else 3) for batch, attention in calls)


def test_a_failing_call_fails_the_document_and_cancels_the_others():
    segments = [Segment(f"text {i}", f"line {i}") for i in range(10)]
    cancelled = []

    async def call(batch: list[Segment], attention: bool) -> list[pb.Translation]:
        if batch[0].text == "text 0":
            raise ValueError(f"{batch[0].where}: too long")
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(batch[0].where)
            raise
        return []

    with pytest.raises(ValueError, match="line 0: too long"):
        asyncio.run(translate_segments(segments, call, Batching(texts_per_call=2, in_flight=3)))
    assert cancelled


# ---------------------------------------------------------------- documents/inline.py
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.text("ab ,", max_size=6), st.lists(st.sampled_from("xyz"), max_size=2),
                          st.booleans()), min_size=1, max_size=8),
       st.text("AB .", max_size=30))
def test_pieces_get_the_whole_translation_in_order(raw, translation):
    """Whatever the pieces, their containers, the anchors among them and the translation: the
    pieces' new texts, in order, are the translation with the whitespace around the source's."""
    pieces = [anchor((*path, n)) if is_anchor else Piece(text, tuple(path), n)
              for n, (text, path, is_anchor) in enumerate(raw)]
    inline = InlineText(pieces)
    if not any(not p.anchor for p in pieces):
        return
    out = inline.render(translation, proportional)
    assert len(out) == len(pieces)
    assert all(not text for text, p in zip(out, pieces) if p.anchor)
    assert "".join(out) == inline.lead + translation + inline.trail
