"""The HTTP gateway (nmt-http) against the real stack on localhost: uvicorn serving the gateway
on a free port (in a thread, or as the command), a real gRPC server with the tiny model
behind it, real HTTP requests (httpx, and a raw socket for a client that goes away)."""

from __future__ import annotations

import concurrent.futures
import html
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import httpx
import pytest
from grpc_health.v1 import health_pb2

from cli import EXIT_OK, EXIT_USAGE, free_port, options_without_help
from cli.version import VERSION_HEADER
from documents.alignment import aligned_placement, translation_alignments
from documents.html_text import HtmlText
from gateway.app import STATIC_DIR, join_wrapped_lines, libre_languages
from gateway.config import GatewayConfig, build_parser, parse_args
from nmt.v1 import translator_pb2 as pb
from tests.gateway_harness import GatewayThread
from tests.server_harness import TEXTS, ServerThread, request, wait_until

ROOT = Path(__file__).resolve().parents[1]
LONG = "All things were made through him. Without him was not anything made that has been made."
STOP = {pb.STOP_REASON_UNSPECIFIED: "UNSPECIFIED", pb.STOP_REASON_END_OF_SENTENCE: "END_OF_SENTENCE",
        pb.STOP_REASON_LENGTH_LIMIT: "LENGTH_LIMIT"}



def metric(server: ServerThread, name: str) -> float:
    body = urllib.request.urlopen(f"http://127.0.0.1:{server.running.metrics_port}/metrics", timeout=5).read()
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@pytest.fixture(scope="module")
def server(tiny_package):
    s = ServerThread(tiny_package, max_chars=500)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def gw(server):
    g = GatewayThread(GatewayConfig(grpc_address=server.address))
    yield g
    g.stop()


@pytest.fixture(scope="module")
def http(gw) -> httpx.Client:
    return gw.client


@pytest.fixture(scope="module")
def narrow(tiny_package):
    """A server decoding 8 rows at a time (one beam of 8), and its gateway: a request of many
    texts takes seconds there, which the deadline and disconnect tests need to be sure that the
    work was stopped, not finished."""
    s = ServerThread(tiny_package, max_batch_rows=8)
    g = GatewayThread(GatewayConfig(grpc_address=s.address))
    yield s, g
    g.stop()
    s.stop()


def grpc_translate(server: ServerThread, *texts: str, **options) -> pb.TranslateResponse:
    return server.stub().Translate(request(*texts, **options))


# ---------------------------------------------------------------- LibreTranslate's API
def test_translate_json_form_and_multipart_give_the_servers_translation(server, http):
    expected = grpc_translate(server, "Jesus wept.", beam_size=4).translations[0].hypotheses[0].text
    assert expected
    fields = {"q": "Jesus wept.", "source": "en", "target": "de"}
    answers = [http.post("/translate", json=fields),
               http.post("/translate", data=fields),  # application/x-www-form-urlencoded
               http.post("/translate", files={k: (None, v) for k, v in fields.items()})]  # multipart/form-data
    assert [r.headers["content-type"].split(";")[0] for r in answers[1:]] == ["application/json"] * 2
    for r in answers:
        assert (r.status_code, r.json()) == (200, {"translatedText": expected})
    # Upper-case and padded codes are the same languages; the query string is read as LibreTranslate reads it.
    r = http.post("/translate", params={"source": " EN "}, data={"q": "Jesus wept.", "target": "De"})
    assert (r.status_code, r.json()) == (200, {"translatedText": expected})


def test_the_same_text_gets_the_same_answer_in_json_form_and_multipart(http):
    """A form's q is the text as sent: its separators (U+2028, a form feed, CRLF) were rewritten
    to LF by str.splitlines, so the form's answer differed from the JSON one."""
    text = "Jesus wept.\u2028Peace be with you.\fAll things were made through him.\r\nIn the beginning was the Word."
    fields = {"q": text, "source": "en", "target": "de"}
    expected = http.post("/translate", json=fields)
    assert expected.status_code == 200
    for r in (http.post("/translate", data=fields),
              http.post("/translate", files={k: (None, v) for k, v in fields.items()}),
              http.post("/translate", data={**fields, "q": [text, "Jesus wept."]})):
        assert r.status_code == 200
        answer = r.json()["translatedText"]
        assert (answer if isinstance(answer, str) else answer[0]) == expected.json()["translatedText"]


def test_a_list_q_gives_a_list_in_order(server, http):
    expected = [t.hypotheses[0].text for t in grpc_translate(server, *TEXTS, beam_size=4).translations]
    r = http.post("/translate", json={"q": TEXTS, "source": "en", "target": "de"})
    assert (r.status_code, r.json()) == (200, {"translatedText": expected})
    # A form field given twice is a list too.
    r = http.post("/translate", data={"q": TEXTS[:2], "source": "en", "target": "de"})
    assert (r.status_code, r.json()) == (200, {"translatedText": expected[:2]})


def test_alternatives_are_the_other_hypotheses_without_repeats(server, http):
    [t] = grpc_translate(server, TEXTS[1], beam_size=4, num_hypotheses=3).translations
    best = t.hypotheses[0].text
    others = []
    for h in t.hypotheses[1:]:
        if h.text not in (best, "", *others):
            others.append(h.text)
    r = http.post("/translate", json={"q": TEXTS[1], "source": "en", "target": "de", "alternatives": 2})
    assert (r.status_code, r.json()) == (200, {"translatedText": best, "alternatives": others})
    # A list: a list of lists; the form's alternatives is a string.
    r = http.post("/translate", data={"q": [TEXTS[1], TEXTS[1]], "source": "en", "target": "de", "alternatives": "2"})
    assert (r.status_code, r.json()) == (200, {"translatedText": [best, best], "alternatives": [others, others]})
    # More alternatives than beam 4 holds: they come from a beam of alternatives + 1, and the
    # translation is still beam 4's: asking for alternatives never changes it.
    [wide] = grpc_translate(server, TEXTS[1], beam_size=6, num_hypotheses=6).translations
    r = http.post("/translate", json={"q": TEXTS[1], "source": "en", "target": "de", "alternatives": 5})
    assert r.status_code == 200 and r.json()["translatedText"] == best
    expected: list[str] = []
    for h in wide.hypotheses:
        if h.text not in (best, "", *expected):
            expected.append(h.text)
    assert r.json()["alternatives"] == expected[:5]
    for alternatives in (0, 1, 3, 7):
        r = http.post("/translate", json={"q": TEXTS[1], "source": "en", "target": "de", "alternatives": alternatives})
        assert r.json()["translatedText"] == best, alternatives
    r = http.post("/v1/translate", json={"q": TEXTS[1], "source": "en", "target": "de"})  # as the page asks
    assert r.json()["translations"][0]["hypotheses"][0]["text"] == best
    r = http.post("/v1/translate", json={"q": TEXTS[1], "source": "en", "target": "de", "num_hypotheses": 4})
    assert r.json()["translations"][0]["hypotheses"][0]["text"] == best  # the page's "Alternatives" ticked
    # The server's largest beam is 8: 7 alternatives at most; not a number: 400.
    r = http.post("/translate", json={"q": "Jesus wept.", "source": "en", "target": "de", "alternatives": 8})
    assert (r.status_code, r.json()) == (400, {"error": "Invalid request: alternatives parameter must be <= 7"})
    r = http.post("/translate", json={"q": "Jesus wept.", "source": "en", "target": "de", "alternatives": "many"})
    assert (r.status_code, r.json()) == (400, {"error": "Invalid request: alternatives parameter is not a number"})


def test_html_keeps_markup_and_translates_the_text_as_alone(http):
    def alone(text: str) -> str:
        r = http.post("/translate", json={"q": text, "source": "en", "target": "de"})
        assert r.status_code == 200
        return r.json()["translatedText"]

    page = ('<!DOCTYPE html><p class="verse" title="Jesus wept.">Jesus wept.</p>\n'
            '<script>var s = "Jesus wept.";</script><style>p { color: red }</style>'
            '<ul>\n  <li>Peace be with you.</li><li>He said, &amp; then&nbsp;more</li><!-- Jesus wept. --></ul><br/>')
    expected = ('<!DOCTYPE html><p class="verse" title="Jesus wept.">' + escape(alone("Jesus wept.")) + '</p>\n'
                '<script>var s = "Jesus wept.";</script><style>p { color: red }</style>'
                '<ul>\n  <li>' + escape(alone("Peace be with you.")) + '</li><li>'
                + escape(alone("He said, & then\xa0more")).replace("\xa0", "&nbsp;")
                + '</li><!-- Jesus wept. --></ul><br/>')
    r = http.post("/translate", json={"q": page, "source": "en", "target": "de", "format": "html"})
    assert (r.status_code, r.json()) == (200, {"translatedText": expected})
    # A list of documents; alternatives are not given for html (as LibreTranslate does).
    r = http.post("/translate", json={"q": [page, "<b>Jesus wept.</b>"], "source": "en", "target": "de",
                                      "format": "html", "alternatives": 2})
    assert (r.status_code, r.json()) == (200, {"translatedText": [expected, f"<b>{escape(alone('Jesus wept.'))}</b>"],
                                               "alternatives": [[], []]})


def test_html_text_scanner_gives_back_what_it_was_given():
    for source in ["", "plain", "<p>unclosed", '<a href="x?a=1&amp;b=2">A &lt;b&gt; &#8212; c</a>', "<br/>  \n ",
                   "<!-- only a comment -->", "<p>1 2 3</p>", "<div>&nbsp;</div>", "<p>Tom &amp; Jerry</p>",
                   "<p>A &amp; B &#59; C</p>", "<p>Jesus <b>wept</b>.</p>", "<p>a <b>b <i>c</i></p> d <img src=x> e",
                   '<div><a href="/x">Click <em>here</em> now</a> and <span>there</span></div>']:
        doc = HtmlText(source)
        assert doc.render(doc.texts) == source, source
    assert HtmlText("<p>1 2 3</p><div>&nbsp;</div>").texts == []  # nothing with a letter: nothing to translate
    doc = HtmlText('<a href="x">A &lt;b&gt; &#8212; c</a>')
    assert doc.texts == ["A <b> \u2014 c"]
    assert doc.render(["X <y> \u2014 & z"]) == '<a href="x">X &lt;y&gt; &#8212; &amp; z</a>'


def test_an_escape_is_never_rewritten_by_a_reference():
    doc = HtmlText("<p>A &#59; B</p>")  # ";" was written as a reference
    assert doc.render(["A & B; C"]) == "<p>A &amp; B&#59; C</p>"  # was "A &amp&#59; B..." ("A &; B" on screen)


def _tags(html_text: str) -> list[str]:
    return re.findall(r"<[^>]*>", html_text)


def test_html_translates_each_sentence_whole_and_keeps_inline_markup(http):
    def alone(text: str) -> str:
        r = http.post("/translate", json={"q": text, "source": "en", "target": "de"})
        return r.json()["translatedText"]

    cases = ['<p>Jesus <b>wept</b>.</p>',
             '<p>In the beginning was the <a href="/w?a=1&amp;b=2">Word</a>, and the <em>Word</em> was with God.</p>',
             '<div><span class="x">All things</span> were made through him. <i>Peace be with you.</i></div>']
    for page in cases:
        r = http.post("/translate", json={"q": page, "source": "en", "target": "de", "format": "html"})
        assert r.status_code == 200
        out = r.json()["translatedText"]
        assert _tags(out) == _tags(page), out  # every tag, as written, in its order: nesting kept
        text = re.sub(r"<[^>]*>", "", page)
        assert html.unescape(re.sub(r"<[^>]*>", "", out)) == alone(html.unescape(text)), out
        # Tags stand between words, never inside one (where they go depends on this tiny model's
        # attention, so which words they hold is not asserted: test_inline_markup_goes_to_the_aligned_words).
        for m in re.finditer(r"<[^>]*>", out):
            before, after = re.sub(r"<[^>]*>", "", out[:m.start()]), re.sub(r"<[^>]*>", "", out[m.end():])
            assert not (before[-1:].isalnum() and after[:1].isalnum()), out


def test_inline_markup_goes_to_the_aligned_words():
    """Placement from a real Translation message with the attention of a known alignment:
    "the red house" -> "das Haus rot" (a made-up word order): <b> around "red" goes around "rot".
    Siblings keep their source order: the image after "house" cannot go back before the <b>
    ahead of it, so it follows it."""
    source_pieces = ["<2de>", "\u2581the", "\u2581red", "\u2581ho", "use", "</s>"]
    target_pieces = ["\u2581das", "\u2581Ha", "us", "\u2581rot"]
    links = {0: 1, 1: 3, 2: 4, 3: 2}  # target piece -> source piece
    attention = [[0.9 if s == links[t] else 0.1 / 5 for s in range(6)] for t in range(4)]
    hyp = pb.Hypothesis(text="das Haus rot", source_pieces=source_pieces, target_pieces=target_pieces,
                        attention=[w for row in attention for w in row])
    translation = pb.Translation(hypotheses=[hyp])
    doc = HtmlText('<p>the <b class="c">red</b> house<img src="x.png"></p>')
    text, alignment = translation_alignments(doc.texts[0], translation)
    assert doc.render([text], [aligned_placement(alignment)]) == '<p>das Haus <b class="c">rot</b><img src="x.png"></p>'
    void = HtmlText('<p>the red<img src="x.png"> house</p>')  # an image after "red": after "rot"
    text, alignment = translation_alignments(void.texts[0], translation)
    assert void.render([text], [aligned_placement(alignment)]) == '<p>das Haus rot<img src="x.png"></p>'
    # Pieces that do not line up with the words: placed by proportion, markup kept.
    odd = pb.Translation(hypotheses=[pb.Hypothesis(text="das Haus rot", source_pieces=source_pieces[:3],
                                                   target_pieces=target_pieces, attention=[0.1] * 12)])
    text, alignment = translation_alignments(doc.texts[0], odd)
    placed = doc.render([text], [aligned_placement(alignment)])
    assert _tags(placed) == ['<p>', '<b class="c">', "</b>", '<img src="x.png">', "</p>"]


TAG_LIMIT = GatewayConfig().max_html_tags


def test_html_of_thousands_of_tags_is_translated_and_over_the_limit_is_400(http, server):
    """Unclosed and deeply nested inline tags: the scan and the placing of the markup are
    linear (were quadratic: 6,000 unclosed <b> held the gateway for seconds) and iterative
    (1,200 nested <b> were a RecursionError, answered 500); more tags than --max-html-tags
    in one request is a 400 naming it, found before anything is translated."""
    def alone(text: str) -> str:
        r = http.post("/translate", json={"q": text, "source": "en", "target": "de"})
        return r.json()["translatedText"]

    for page in ["<p>" + "<b>" * 3000 + "Click OK.",  # never closed
                 "<p>" + "<b>" * 1200 + "Click OK." + "</b>" * 1200 + "</p>",  # nested 1,200 deep
                 "<p>Click " + "<i></i>" * 1500 + "OK.</p>"]:  # siblings
        r = http.post("/translate", json={"q": page, "source": "en", "target": "de", "format": "html"})
        assert r.status_code == 200, r.text[:200]
        out = r.json()["translatedText"]
        assert _tags(out) == _tags(page)
        assert html.unescape(re.sub(r"<[^>]*>", "", out)) == alone(html.unescape(re.sub(r"<[^>]*>", "", page)))
    over = f"Invalid request: the html holds more than {TAG_LIMIT} tags, this gateway's limit per request " \
           f"(--max-html-tags)"
    for q in ["<p>" + "<b>" * TAG_LIMIT + "Click OK.",
              ["<p>" + "<b>" * (TAG_LIMIT // 2) + "Click OK.", "<p>" + "<i>" * (TAG_LIMIT // 2) + "Peace."]]:
        r = http.post("/translate", json={"q": q, "source": "en", "target": "de", "format": "html"})
        assert (r.status_code, r.json()) == (400, {"error": over})
    at_limit = "<p>" + "<b></b>" * (TAG_LIMIT // 2 - 1) + "Click OK.</p>"
    r = http.post("/translate", json={"q": at_limit, "source": "en", "target": "de", "format": "html"})
    assert r.status_code == 200 and _tags(r.json()["translatedText"]) == _tags(at_limit)
    g = GatewayThread(GatewayConfig(grpc_address=server.address, max_html_tags=4))
    try:
        r = g.client.post("/translate", json={"q": "<p><b>Jesus</b> wept.</p>", "source": "en", "target": "de",
                                              "format": "html"})
        assert r.status_code == 200
        r = g.client.post("/translate", json={"q": ["<p>Jesus wept.</p>", "<p><b>Jesus</b> wept.</p>"],
                                              "source": "en", "target": "de", "format": "html"})
        assert (r.status_code, r.json()) == (400, {"error": "Invalid request: the html holds more than 4 tags, this "
                                                            "gateway's limit per request (--max-html-tags)"})
    finally:
        g.stop()


@pytest.mark.parametrize("source, texts", [
    ("<p>Click OK.<!--" + "<!--" * 50_000, ["Click OK."]),  # comments never closed: one, to the end
    ("<p>Click OK.</p>" + "<a " * 50_000, ["Click OK."]),  # a tag never closed runs to the end
    ("<p>Click OK.</p><a href='" + "x' y='" * 30_000, ["Click OK."]),  # so does a quoted value
    ("<p>Click OK.</p>" + "<![CDATA[" * 30_000 + "<p>Peace.</p>", ["Click OK.", "Peace."]),
    ("<p>Click OK.</p>" + "<b" * 30_000, ["Click OK."]),
    ("<p>Click OK.</p>" + "</" * 50_000, ["Click OK."]),  # "</" before no name: a bogus comment, to ">"
    ("<p>a < b and 3<4 </p><p>x</p>", ["a < b and 3<4", "x"]),  # a "<" that starts no tag is text
    ('<p title="a > b" alt=it\'s>Click <b class=x>OK</b>.</p><script>if (a<b) s = "</b>";</script>',
     ["Click OK."]),
])
def test_the_html_scan_is_linear_and_gives_back_what_it_was_given(source, texts):
    """Inputs that html.parser takes quadratic time over (an unclosed comment, tag, quoted
    value or declaration, repeated: 70 s for 200 KB of "<!--"): the scan follows the HTML
    standard's tokenizer and reads each character a bounded number of times."""
    doc = HtmlText(source)
    assert doc.texts == texts
    expected = source
    for text in texts:  # a "<" of the text is escaped in the output
        expected = expected.replace(text, escape(text))
    assert doc.render(doc.texts) == expected


def test_html_nested_thousands_deep_renders_without_recursion():
    source = "<div>" + "<span>" * 5_000 + "Click OK." + "</span>" * 5_000 + "</div>"
    doc = HtmlText(source)
    assert doc.texts == ["Click OK."] and doc.render(doc.texts) == source
    assert doc.render(["Klicken Sie auf OK."]) == source.replace("Click OK.", "Klicken Sie auf OK.")


def test_health_answers_while_an_html_request_is_scanned(gw, monkeypatch):
    """The scan runs in a worker thread, not on the event loop: while one request's scan is
    held, /healthz answers (it waited for the whole scan: 9.3 s behind 6,000 unclosed tags)."""
    scanning, release = threading.Event(), threading.Event()
    real = HtmlText

    def held(source: str, max_tags: int | None = None) -> HtmlText:
        scanning.set()
        release.wait(20)
        return real(source, max_tags)

    monkeypatch.setattr("gateway.app.HtmlText", held)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(httpx.post, f"{gw.url}/translate", json={"q": "<p>Jesus <b>wept</b>.</p>", "source": "en",
                                                                      "target": "de", "format": "html"}, timeout=60)
        try:
            assert scanning.wait(20)
            r = httpx.get(f"{gw.url}/healthz", timeout=5)
            assert (r.status_code, r.json()) == (200, {"status": "ok"})
        finally:
            release.set()
        assert pending.result().status_code == 200


def test_an_html_error_names_the_paragraph_in_the_document(server, http):
    """A paragraph over the server's 500 characters is named by its place in the document (the
    server sees 16 paragraphs a call and said texts[1] of the 18th)."""
    long = ("Jesus wept. " * 50).strip()
    page = "<p>Jesus wept.</p>" * 17 + f"<p>{long}</p>" + "<p>Peace be with you.</p>" * 2
    r = http.post("/translate", json={"q": page, "source": "en", "target": "de", "format": "html"})
    assert (r.status_code, r.json()) == (400, {"error": f"q, paragraph 18: {len(long)} characters; the limit is 500"})
    r = http.post("/translate", json={"q": ["<p>Peace be with you.</p>", page], "source": "en", "target": "de",
                                      "format": "html"})
    assert (r.status_code, r.json()) == (400, {"error": f"q[1], paragraph 18: {len(long)} characters; the limit is "
                                                        f"500"})


def test_languages_lists_every_pair_of_every_model(http):
    r = http.get("/languages")
    assert (r.status_code, r.json()) == (200, [{"code": "de", "name": "German", "targets": ["en"]},
                                               {"code": "en", "name": "English", "targets": ["de"]}])


def test_split_sentences_follows_the_text(http):
    """DeepL's split_sentences: nonewlines reads a line break inside a sentence (hard-wrapped text,
    an HTML block) as a space; 0 translates each text whole; html splits that way by default."""
    base = {"source": "en", "target": "de"}
    wrapped = "In the beginning was the Word,\nand the Word was with God.\n\nJesus wept."
    joined = "In the beginning was the Word, and the Word was with God.\n\nJesus wept."

    def translate(**fields):
        r = http.post("/translate", json={**base, **fields})
        assert r.status_code == 200, r.text
        return r.json()["translatedText"]

    assert translate(q=wrapped, split_sentences="nonewlines") == translate(q=joined)
    assert translate(q=wrapped, split_sentences="1") == translate(q=wrapped)
    whole = http.post("/v1/translate", json={**base, "q": wrapped, "no_sentence_split": True}).json()
    assert translate(q=wrapped, split_sentences="0") == whole["translations"][0]["hypotheses"][0]["text"]
    page = "<p>In the beginning was the Word,\n   and the Word was with God.</p>"
    assert translate(q=page, format="html") == translate(q=page.replace(",\n", ", "), format="html")
    assert translate(q=page, format="html") == translate(q=page, format="html", split_sentences="nonewlines")
    r = http.post("/translate", json={**base, "q": wrapped, "split_sentences": "sometimes"})
    assert (r.status_code, r.json()) == (400, {"error": "Invalid request: split_sentences must be 1, 0 or nonewlines, "
                                                        "not 'sometimes'"})


def test_a_pre_keeps_its_lines_under_nonewlines(http):
    """A <pre>'s line breaks are its content: under html's default (nonewlines) each of its lines
    is still a sentence of its own, as split_sentences=1 translates plain text."""
    base = {"source": "en", "target": "de"}
    lines = "In the beginning was the Word,\nand the Word was with God."
    r = http.post("/translate", json={**base, "q": lines, "split_sentences": "1"})
    assert r.status_code == 200
    text = r.json()["translatedText"]
    assert text.count("\n") == 1
    r = http.post("/translate", json={**base, "q": f"<pre>{lines}</pre>", "format": "html"})
    assert (r.status_code, r.json()) == (200, {"translatedText": f"<pre>{html.escape(text, quote=False)}</pre>"})


def test_only_text_inside_pre_textarea_and_listing_is_preformatted():
    doc = HtmlText("<p>a\nb</p><pre>c\n<b>d</b></pre><p>e</p><textarea>f\ng</textarea><pre/><p>h</p>")
    assert list(zip(doc.texts, doc.preformatted)) == [
        ("a\nb", False), ("c\nd", True), ("e", False), ("f\ng", True), ("h", False)]


def test_wrapped_lines_are_joined_without_moving_an_offset():
    for text, joined in (("a long\nline.\nNext.\n\nNew\r\npara", "a long line.\nNext.\n\nNew  para"),
                         ("\nx\n", "\nx\n"), ("Hi!»\nThere", "Hi!»\nThere"), ("no break", "no break")):
        assert join_wrapped_lines(text) == joined and len(joined) == len(text)


def test_languages_include_the_target_only_ones():
    models = [pb.ModelInfo(name="a", pairs=["en-de", "en-fr"]), pb.ModelInfo(name="b", pairs=["de-en", "es-en"])]
    assert libre_languages(models) == [{"code": "de", "name": "German", "targets": ["en"]},
                                       {"code": "en", "name": "English", "targets": ["de", "fr"]},
                                       {"code": "es", "name": "Spanish", "targets": ["en"]},
                                       {"code": "fr", "name": "French", "targets": []}]


def test_languages_list_the_targets_a_pivot_serves():
    models = [pb.ModelInfo(name="a", pairs=["en-de", "de-en"]), pb.ModelInfo(name="b", pairs=["en-fr", "fr-en"])]
    pivots = [pb.PivotRoute(pair="de-fr", via="en", first_model="a", second_model="b"),
              pb.PivotRoute(pair="fr-de", via="en", first_model="b", second_model="a")]
    assert libre_languages(models, pivots) == [{"code": "de", "name": "German", "targets": ["en", "fr"]},
                                               {"code": "en", "name": "English", "targets": ["de", "fr"]},
                                               {"code": "fr", "name": "French", "targets": ["de", "en"]}]


def test_parameters_in_the_query_string_of_a_post(server, http):
    """deep-translator sends q, source, target (and api_key) in the URL of a POST with no body."""
    expected = http.post("/translate", json={"q": "Jesus wept.", "source": "en", "target": "de"}).json()
    r = http.post("/translate", params={"q": "Jesus wept.", "source": "en", "target": "de", "format": "text"})
    assert (r.status_code, r.json()) == (200, expected)
    # The body's fields win over the URL's; an empty JSON body is no body.
    r = http.post("/translate?source=de&q=x", json={"q": "Jesus wept.", "source": "en", "target": "de"})
    assert (r.status_code, r.json()) == (200, expected)
    r = http.post("/translate?q=Jesus%20wept.&source=en&target=de", headers={"content-type": "application/json"})
    assert (r.status_code, r.json()) == (200, expected)


def test_frontend_settings_and_health_as_libretranslate(server, http):
    r = http.get("/frontend/settings")
    assert (r.status_code, r.json()) == (200, {
        "charLimit": 500, "frontendTimeout": 500, "apiKeys": False, "keyRequired": False, "suggestions": False,
        "filesTranslation": True, "supportedFilesFormat": [".txt", ".html", ".htm", ".md", ".srt", ".vtt", ".docx",
                                                           ".odt"],
        "language": {"source": {"code": "auto", "name": "Auto Detect"},
                     "target": {"code": "de", "name": "German"}}})
    assert (http.get("/health").status_code, http.get("/health").json()) == (200, {"status": "ok"})


def test_source_auto_detects_each_texts_language(server, http):
    english = "In the beginning was the Word, and the Word was with God."
    german = "Im Anfang war das Wort, und das Wort war bei Gott."
    expected = http.post("/translate", json={"q": english, "source": "en", "target": "de"}).json()["translatedText"]
    r = http.post("/translate", json={"q": english, "source": "auto", "target": "de"})
    assert r.status_code == 200 and r.json()["translatedText"] == expected
    assert r.json()["detectedLanguage"]["language"] == "en" and 50 < r.json()["detectedLanguage"]["confidence"] <= 100
    # Per text in a list: each translated from its own language; one in the target, or with no
    # language to tell (numbers, emoji, no feature of any language), comes back as it was.
    q = [english, german, "12345", "😀🎉", "ok"]
    r = http.post("/translate", json={"q": q, "source": "auto", "target": "de", "alternatives": 1})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["translatedText"] == [expected, german, "12345", "😀🎉", "ok"]
    assert [d["language"] for d in out["detectedLanguage"]] == ["en", "de", "en", "en", "en"]
    assert [d["confidence"] for d in out["detectedLanguage"]][2:] == [0.0, 0.0, 0.0]
    assert len(out["alternatives"]) == 5 and out["alternatives"][1:] == [[], [], [], []]
    r = http.post("/translate", json={"q": german, "source": "auto", "target": "en"})
    assert r.json()["detectedLanguage"]["language"] == "de" and r.json()["translatedText"] != german
    r = http.post("/translate", json={"q": "<p>Im Anfang war das <b>Wort</b>.</p>", "source": "auto", "target": "en",
                                      "format": "html"})
    assert r.status_code == 200 and r.json()["detectedLanguage"]["language"] == "de"
    r = http.post("/translate", json={"q": english, "source": "auto", "target": "fr"})
    assert (r.status_code, r.json()) == (400, {"error": "fr is not supported"})


def test_detect_ranks_the_models_languages(http):
    r = http.post("/detect", data={"q": "In the beginning was the Word, and the Word was with God."})
    assert r.status_code == 200
    ranked = r.json()
    assert ranked[0]["language"] == "en" and ranked[0]["confidence"] > 90
    assert {d["language"] for d in ranked} <= {"en", "de"}
    assert [d["confidence"] for d in ranked] == sorted((d["confidence"] for d in ranked), reverse=True)
    r = http.post("/detect", json={"q": ["Im Anfang war das Wort.", "Und das Wort war bei Gott."]})
    assert r.json()[0]["language"] == "de"
    for nothing in ("12345", "😀", "ok"):
        assert http.post("/detect", json={"q": nothing}).json() == [{"confidence": 0.0, "language": "en"}]
    r = http.post("/detect", json={})
    assert (r.status_code, r.json()) == (400, {"error": "Invalid request: missing q parameter"})


def test_bad_requests_are_400_with_the_reason(server, http):
    base = {"q": "Jesus wept.", "source": "en", "target": "de"}
    cases = [
        ({k: v for k, v in base.items() if k != "q"}, "Invalid request: missing q parameter"),
        ({**base, "q": ""}, "Invalid request: missing q parameter"),
        ({**base, "q": []}, "Invalid request: missing q parameter"),
        ({**base, "q": ["a", 3]}, "Invalid request: q must be a string or a list of strings"),
        ({k: v for k, v in base.items() if k != "source"}, "Invalid request: missing source parameter"),
        ({**base, "target": ""}, "Invalid request: missing target parameter"),
        ({**base, "target": 7}, "Invalid request: target must be a language code such as en"),
        ({**base, "format": "xml"}, "xml format is not supported"),
        ({**base, "alternatives": "two"}, "Invalid request: alternatives parameter is not a number"),
    ]
    for body, message in cases:
        r = http.post("/translate", json=body)
        assert (r.status_code, r.json()) == (400, {"error": message}), body
    # LibreTranslate's words for what it checks itself: languages, pairs, the character limit.
    for body, message in (({**base, "target": "fr"}, "fr is not supported"),
                          ({**base, "source": "xx"}, "xx is not supported"),
                          ({**base, "target": "en"}, "English (en) is not available as a target language from "
                                                     "English (en)"),
                          ({**base, "q": "a" * 600}, "Invalid request: request (600) exceeds text limit (500)"),
                          ({**base, "q": ["Jesus wept.", "a" * 501]},
                           "Invalid request: request (501) exceeds text limit (500)")):
        r = http.post("/translate", json=body)
        assert (r.status_code, r.json()) == (400, {"error": message}), body
    # A negative number of alternatives is none, as LibreTranslate reads it.
    assert http.post("/translate", json={**base, "alternatives": -1}).json().keys() == {"translatedText"}
    # Otherwise the server's INVALID_ARGUMENT passes through (test_an_html_error_names_the_paragraph...).
    r = http.post("/translate", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"].startswith("Invalid JSON format: ")
    r = http.post("/translate", json=["a list"])
    assert (r.status_code, r.json()) == (400, {"error": "Invalid JSON format: the body must be a JSON object"})
    r = http.post("/translate", content=b"Jesus wept.", headers={"content-type": "text/plain"})
    assert (r.status_code, r.json()) == (400, {"error": "Invalid request: unsupported Content-Type 'text/plain'; send "
                                                        "application/json, application/x-www-form-urlencoded or "
                                                        "multipart/form-data"})
    r = http.post("/translate", files={"q": ("q.txt", b"Jesus wept."), "source": (None, "en"), "target": (None, "de")})
    assert (r.status_code, r.json()) == (400, {"error": "Invalid request: q must be a form field, not a file"})


# ---------------------------------------------------------------- our JSON API
def as_json(h: pb.Hypothesis, attention: bool) -> dict:
    """The contract of /v1/translate's hypotheses, written out independently of the gateway."""
    out = {"text": h.text, "score": h.score, "num_tokens": h.num_tokens, "stop_reason": STOP[h.stop_reason]}
    if attention:
        n = len(h.source_pieces)
        rows = [[round(w, 6) for w in h.attention[i * n:(i + 1) * n]] for i in range(len(h.target_pieces))]
        out |= {"source_pieces": list(h.source_pieces), "target_pieces": list(h.target_pieces),
                "attention": rows if n else []}
    return out


@pytest.mark.parametrize("attention", [False, True])
def test_v1_translate_gives_every_hypothesis_and_segment(server, http, attention):
    texts = ["Jesus wept.", "Jesus wept. Peace be with you.", ""]
    options = {"beam_size": 4, "num_hypotheses": 2, "return_scores": True, "return_attention": attention,
               "length_penalty": 1.0, "max_output_tokens": 40}
    response = grpc_translate(server, *texts, **options)
    expected = {"model": "tiny", "translations": [
        {"hypotheses": [as_json(h, attention) for h in t.hypotheses],
         "segments": [{"source": s.source, "start": s.start, "end": s.end,
                       "hypotheses": [as_json(h, attention) for h in s.hypotheses]} for s in t.segments]}
        for t in response.translations]}
    r = http.post("/v1/translate", json={"q": texts, "source": "en", "target": "de", **options})
    assert (r.status_code, r.json()) == (200, expected)
    body = r.json()
    assert [len(t["segments"]) for t in body["translations"]] == [1, 2, 0]
    assert body["translations"][2]["hypotheses"] == [{"text": "", "score": 0.0, "num_tokens": 0,
                                                      "stop_reason": "UNSPECIFIED",
                                                      **({"source_pieces": [], "target_pieces": [], "attention": []}
                                                         if attention else {})}]
    if attention:  # one sentence: the matrix is the text's, [target pieces x source pieces]
        h = body["translations"][0]["hypotheses"][0]
        assert len(h["attention"]) == len(h["target_pieces"]) > 0
        assert {len(row) for row in h["attention"]} == {len(h["source_pieces"])}
    # A string q is one translation; the model can be named.
    r = http.post("/v1/translate", json={"q": "Jesus wept.", "source": "en", "target": "de", "model": "tiny"})
    assert r.status_code == 200 and len(r.json()["translations"]) == 1


def test_v1_translate_refuses_what_it_does_not_know(http):
    base = {"q": "Jesus wept.", "source": "en", "target": "de"}
    cases = [
        ({**base, "beam": 4, "foo": 1}, "unknown keys: 'beam', 'foo'; known: q, source, target, model, beam_size, "
                                        "num_hypotheses, max_output_tokens, length_penalty, return_scores, "
                                        "return_attention, no_sentence_split, keep, glossary, glossary_name, "
                                        "api_key"),
        ({k: v for k, v in base.items() if k != "q"}, "missing q: give a string or a list of strings"),
        ({**base, "q": 5}, "q: expected a string or a list of strings"),
        ({**base, "source": ""}, "missing source: expected a language code such as en"),
        ({**base, "target": ["de"]}, "target: expected a language code such as en"),
        ({**base, "model": 1}, "model: expected a model's name (a string)"),
        ({**base, "beam_size": "4"}, 'beam_size: expected a whole number of 0 or more, got "4"'),
        ({**base, "num_hypotheses": -1}, "num_hypotheses: expected a whole number of 0 or more, got -1"),
        ({**base, "max_output_tokens": True}, "max_output_tokens: expected a whole number of 0 or more, got true"),
        ({**base, "length_penalty": "high"}, 'length_penalty: expected a number, got "high"'),
        ({**base, "return_scores": 1}, "return_scores: expected true or false, got 1"),
        # The server's own checks pass through.
        ({**base, "beam_size": 99}, "options.beam_size: 99; the limit is 8"),
        ({**base, "beam_size": 2, "num_hypotheses": 3}, "options.num_hypotheses: 3 is more than beam_size 2"),
        ({**base, "model": "nope"}, "unknown model 'nope'; loaded: tiny"),
    ]
    for body, message in cases:
        r = http.post("/v1/translate", json=body)
        assert (r.status_code, r.json()) == (400, {"error": message}), body


def test_v1_models_is_list_models(server, http):
    [m] = server.stub().ListModels(pb.ListModelsRequest()).models
    r = http.get("/v1/models")
    assert r.status_code == 200
    assert r.json() == {"models": [{
        "name": "tiny", "pairs": list(m.pairs), "device": "cpu", "variant": m.variant, "device_resident": False,
        "limits": {"max_texts_per_request": 64, "max_chars_per_text": 500, "max_tokens_per_text": m.max_tokens_per_text,
                   "max_beam_size": 8, "max_output_tokens": m.max_output_tokens,
                   "max_sentences_per_request": m.max_sentences_per_request,
                   "max_tokens_per_request": m.max_tokens_per_request}}], "pivots": []}
    assert sorted(m.pairs) == ["de-en", "en-de"]


# ---------------------------------------------------------------- health, page, HTTP errors
def test_health_and_readiness_follow_the_server(server, http):
    assert (http.get("/healthz").status_code, http.get("/healthz").json()) == (200, {"status": "ok"})
    r = http.get("/readyz")
    assert (r.status_code, r.json()) == (200, {"status": "SERVING"})
    server.call(server.running.health.set("", health_pb2.HealthCheckResponse.NOT_SERVING))
    try:
        r = http.get("/readyz")
        assert (r.status_code, r.json()) == (503, {"status": "NOT_SERVING"})
    finally:
        server.call(server.running.health.set("", health_pb2.HealthCheckResponse.SERVING))
    assert http.get("/readyz").status_code == 200


def test_no_server_is_503_and_not_ready(caplog):
    caplog.set_level(logging.INFO, logger="nmt.http")
    port = free_port()  # nothing listens there
    g = GatewayThread(GatewayConfig(grpc_address=f"127.0.0.1:{port}"))
    try:
        # It starts all the same, and says so once (it started silently).
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
            f"no gRPC server answers at 127.0.0.1:{port} yet; requests will get 503 until it does (UNAVAILABLE)"]
        assert g.client.get("/healthz").status_code == 200  # the gateway itself is up
        r = g.client.get("/readyz")
        assert r.status_code == 503 and r.json()["status"] == "UNREACHABLE"
        assert r.json()["error"].startswith("UNAVAILABLE: ")
        for r in (g.client.post("/translate", json={"q": "Jesus wept.", "source": "en", "target": "de"}),
                  g.client.post("/v1/translate", json={"q": "Jesus wept.", "source": "en", "target": "de"}),
                  g.client.get("/languages"), g.client.get("/v1/models"),
                  # auto and /detect ask the server which languages its models serve
                  g.client.post("/translate", json={"q": "Jesus wept.", "source": "auto", "target": "de"}),
                  g.client.post("/detect", json={"q": "Jesus wept."})):
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            assert r.json()["error"].startswith(f"the translation server at 127.0.0.1:{port} is unavailable: ")
            assert "Traceback" not in r.text
        # LibreTranslate's settings still answer, without a character limit to give
        assert g.client.get("/frontend/settings").json()["charLimit"] == -1
    finally:
        g.stop()


def test_an_unexpected_failure_is_500_without_a_traceback(http, monkeypatch):
    def broken(t):
        raise RuntimeError("a bug in the gateway")

    monkeypatch.setattr("gateway.app._best", broken)
    r = http.post("/translate", json={"q": "Jesus wept.", "source": "en", "target": "de"})
    assert (r.status_code, r.json()) == (500, {"error": "internal error in the gateway; its log has the details"})


def test_the_page_and_static_files(http):
    r = http.get("/")
    assert r.status_code == 200 and r.headers["content-type"] == "text/html; charset=utf-8"
    assert r.content == (STATIC_DIR / "index.html").read_bytes()
    for name in sorted(p.name for p in STATIC_DIR.iterdir() if p.is_file()):
        r = http.get(f"/static/{name}")
        assert (r.status_code, r.content) == (200, (STATIC_DIR / name).read_bytes())
    assert (http.get("/static/nothing.js").status_code, http.get("/static/nothing.js").json()) == \
        (404, {"error": "Not Found"})
    assert (http.get("/nothing").status_code, http.get("/nothing").json()) == (404, {"error": "Not Found"})
    r = http.get("/translate")
    assert (r.status_code, r.json()) == (405, {"error": "Method Not Allowed"})


# ---------------------------------------------------------------- API keys, the server's token
def test_api_keys_are_needed_when_configured(server, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# the gateway's users\nk-alice\n\n  k-bob  \n")
    cfg = parse_args(["--grpc-address", server.address, "--api-keys-file", str(keys)], {})
    g = GatewayThread(cfg, cfg.api_keys())
    try:
        body = {"q": "Jesus wept.", "source": "en", "target": "de"}
        r = g.client.post("/translate", json=body)
        assert (r.status_code, r.json()) == (400, {"error": "Please contact the server operator to get an API key"})
        for wrong in ("k-eve", "k-alic", "k-alice ", "# the gateway's users"):
            r = g.client.post("/translate", json={**body, "api_key": wrong})
            assert (r.status_code, r.json()) == (403, {"error": "Invalid API key"}), wrong
        assert g.client.post("/translate", json={**body, "api_key": "k-alice"}).status_code == 200
        assert g.client.post("/translate", data={**body, "api_key": "k-bob"}).status_code == 200
        assert g.client.post("/translate", files={k: (None, v) for k, v in {**body, "api_key": "k-bob"}.items()}
                             ).status_code == 200
        assert g.client.post("/v1/translate", json=body).status_code == 400
        assert g.client.post("/v1/translate", json={**body, "api_key": "k-bob"}).status_code == 200
        # Languages, models and health need no key (as LibreTranslate's /languages).
        assert [g.client.get(p).status_code for p in ("/languages", "/v1/models", "/readyz")] == [200, 200, 200]
    finally:
        g.stop()


def test_a_key_in_the_url_is_taken_and_never_logged_and_the_header_is_taken(server, tmp_path, caplog):
    """LibreTranslate reads api_key from the query string too, and clients send it there
    (deep-translator puts every parameter in a POST's URL): taken, and masked in every log line,
    a refusal by its limits too (a keys file with limits, on a clock that stands still)."""
    keys = tmp_path / "keys.toml"
    keys.write_text("[keys.alice]\nkey = 'k-alice'\nrequests_per_minute = 7\n")
    cfg = parse_args(["--grpc-address", server.address, "--api-keys-file", str(keys), "--metrics"], {})
    g = GatewayThread(cfg, cfg.api_keys(), clock=lambda: 0.0)
    body = {"q": "Jesus wept.", "source": "en", "target": "de"}
    caplog.set_level(logging.INFO)
    try:
        r = g.client.post("/translate?api_key=k-alice", json=body)
        assert r.status_code == 200 and r.json()["translatedText"]
        assert g.client.post("/translate", params={**body, "api_key": "k-alice"}).status_code == 200
        assert g.client.post("/v1/translate?API_KEY=k-alice&x=1", json=body).status_code == 400  # keys are api_key
        assert g.client.post("/v1/translate?api_key=k-alice&x=1", json=body).status_code == 200
        r = g.client.post("/translate", params={**body, "api_key": "k-eve"})
        assert (r.status_code, r.json()) == (403, {"error": "Invalid API key"})
        # The body's key is the one checked when both are given, as LibreTranslate's request.values.
        r = g.client.post("/translate?api_key=k-alice", data={**body, "api_key": "k-eve"})
        assert r.status_code == 403
        # The scheme is case-insensitive; a wrong key in the header is as wrong as in the body.
        for scheme in ("Bearer", "bearer", "BEARER"):
            r = g.client.post("/translate", json=body, headers={"authorization": f"{scheme} k-alice"})
            assert r.status_code == 200, scheme
        r = g.client.post("/translate", json=body, headers={"authorization": "Bearer k-eve"})
        assert (r.status_code, r.json()) == (403, {"error": "Invalid API key"})
        assert g.client.post("/v1/translate", json=body, headers={"authorization": "bearer k-alice"}).status_code == 200
        r = g.client.post("/translate?api_key=k-alice", json=body)  # the eighth of 7 a minute
        assert r.status_code == 429 and r.json()["error"].startswith("Slowdown:")
        assert "k-alice" not in r.text and "k-alice" not in g.client.get("/metrics").text
    finally:
        g.stop()
    access = [r.getMessage() for r in caplog.records if r.name == "uvicorn.access"]
    assert any("api_key=***" in line for line in access) and any("API_KEY=***&x=1" in line for line in access)
    assert any("api_key=***" in line and " 429" in line for line in access)
    gateway_lines = [r.getMessage() for r in caplog.records if r.name.startswith(("uvicorn", "nmt"))]
    assert not [line for line in gateway_lines if "k-alice" in line or "k-eve" in line]


def test_malformed_json_is_one_line_400_and_no_traceback(http, caplog):
    deep = b'{"q": ' + b"[" * 2000 + b"]" * 2000 + b', "source": "en", "target": "de"}'
    cases = [
        (deep, "Invalid JSON format: nested deeper than 32 levels"),
        (b'{"q": ' + b"[" * 40 + b'"a"' + b"]" * 40 + b"}", "Invalid JSON format: nested deeper than 32 levels"),
        (b'{"q": "\\ud800", "source": "en", "target": "de"}',
         "Invalid JSON format: a string holds a lone surrogate (such as \\ud800): text must be valid Unicode"),
        (b'{"\\udfff": 1, "q": "a", "source": "en", "target": "de"}',
         "Invalid JSON format: a string holds a lone surrogate (such as \\ud800): text must be valid Unicode"),
    ]
    caplog.set_level(logging.INFO)
    for path in ("/translate", "/v1/translate"):
        for content, message in cases:
            r = http.post(path, content=content, headers={"content-type": "application/json"})
            assert (r.status_code, r.json()) == (400, {"error": message}), (path, content[:30])
    assert "Traceback" not in caplog.text and not [r for r in caplog.records if r.levelno >= logging.ERROR]
    # An emoji (a surrogate pair in JSON's escapes) is a character, not a lone surrogate.
    r = http.post("/translate", content=b'{"q": "\\ud83d\\ude00", "source": "en", "target": "de"}',
                  headers={"content-type": "application/json"})
    assert r.status_code == 200


def test_cors_lets_browser_pages_elsewhere_read_answers(http):
    origin = {"origin": "https://app.example"}
    r = http.options("/translate", headers={**origin, "access-control-request-method": "POST",
                                            "access-control-request-headers": "content-type, authorization"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"
    assert "POST" in r.headers["access-control-allow-methods"]
    r = http.post("/translate", json={"q": "Jesus wept.", "source": "en", "target": "de"}, headers=origin)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"
    # A page elsewhere may read when to retry and which version answered.
    assert r.headers["access-control-expose-headers"] == f"Retry-After, {VERSION_HEADER}"


def test_a_gateway_on_localhost_answers_only_to_localhosts_names(server, gw):
    """DNS rebinding: a page on evil.example points its name at 127.0.0.1; the browser then sends
    Host: evil.example, which a gateway listening on this machine only refuses."""
    with httpx.Client(base_url=gw.url) as c:
        r = c.get("/languages", headers={"host": f"evil.example:{gw.port}"})
        assert (r.status_code, r.json()) == (400, {"error": f"Host 'evil.example:{gw.port}' is not a name of this "
                                                            f"gateway (--allowed-hosts): 127.0.0.1, ::1, localhost"})
        for host in (f"localhost:{gw.port}", f"127.0.0.1:{gw.port}", f"[::1]:{gw.port}", "LOCALHOST"):
            assert c.get("/healthz", headers={"host": host}).status_code == 200, host
    anywhere = GatewayThread(GatewayConfig(grpc_address=server.address, host="0.0.0.0"))  # in a container
    try:
        assert anywhere.client.get("/healthz", headers={"host": "translate.example"}).status_code == 200
    finally:
        anywhere.stop()
    named = GatewayThread(GatewayConfig(grpc_address=server.address, allowed_hosts="translate.example, localhost"))
    try:
        assert named.client.get("/healthz", headers={"host": "translate.example"}).status_code == 200
        assert named.client.get("/healthz", headers={"host": "127.0.0.1"}).status_code == 400
    finally:
        named.stop()


def test_the_servers_bearer_token_is_sent(tiny_package, tmp_path):
    s = ServerThread(tiny_package, auth_token="s3cret")
    (tmp_path / "token").write_text("s3cret\n")
    without = GatewayThread(GatewayConfig(grpc_address=s.address))
    cfg = GatewayConfig(grpc_address=s.address, grpc_token_file=str(tmp_path / "token"))
    with_token = GatewayThread(cfg, grpc_token=cfg.grpc_token())
    try:
        body = {"q": "Jesus wept.", "source": "en", "target": "de"}
        r = without.client.post("/translate", json=body)
        assert (r.status_code, r.json()) == (500, {"error": "the translation server refused the gateway "
                                                            "(UNAUTHENTICATED: missing or wrong bearer token); its "
                                                            "operator must check --grpc-token-file"})
        assert without.client.get("/readyz").status_code == 200  # health needs no token
        assert with_token.client.post("/translate", json=body).status_code == 200
        assert with_token.client.get("/languages").status_code == 200
    finally:
        without.stop()
        with_token.stop()
        s.stop()


# ---------------------------------------------------------------- load, size, time, disconnects
def test_a_saturated_server_is_429(tiny_package):
    s = ServerThread(tiny_package, max_queue=1, max_batch_rows=1, max_texts=1, max_beam=1)
    g = GatewayThread(GatewayConfig(grpc_address=s.address))
    try:
        body = {"q": LONG, "source": "en", "target": "de", "max_output_tokens": 100, "no_sentence_split": True}
        with httpx.Client(base_url=g.url, timeout=60, limits=httpx.Limits(max_connections=32)) as client, \
                concurrent.futures.ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda _: client.post("/v1/translate", json=body), range(16)))
        statuses = [r.status_code for r in answers]
        assert set(statuses) == {200, 429}, statuses
        for r in answers:
            if r.status_code == 429:
                assert r.json() == {"error": "server busy: the queue of model tiny is full (1 texts waiting); retry "
                                             "with backoff"}
                assert r.headers["retry-after"] == "1"
    finally:
        g.stop()
        s.stop()


def test_a_body_over_the_limit_is_413(server):
    g = GatewayThread(GatewayConfig(grpc_address=server.address, max_body_bytes=4096))
    try:
        error = {"error": "the request body is larger than this gateway's limit of 4096 bytes"}
        big = {"q": "Jesus wept. " * 400, "source": "en", "target": "de"}
        r = g.client.post("/translate", json=big)  # by its Content-Length
        assert (r.status_code, r.json()) == (413, error)
        r = g.client.post("/v1/translate", content=(json.dumps(big)[i:i + 1000].encode() for i in range(0, 5000, 1000)),
                          headers={"content-type": "application/json"})  # chunked: by the bytes read
        assert r.request.headers["transfer-encoding"] == "chunked"
        assert (r.status_code, r.json()) == (413, error)
        r = g.client.post("/translate", data=big)
        assert (r.status_code, r.json()) == (413, error)
        # Under the limit: fine.
        assert g.client.post("/translate", json={**big, "q": "Jesus wept."}).status_code == 200
    finally:
        g.stop()


def test_deadline_is_504_and_frees_the_servers_rows(narrow):
    server, gw = narrow
    heavy = {"q": [LONG] * 16, "source": "en", "target": "de", "beam_size": 8, "max_output_tokens": 200}
    r = gw.client.post("/v1/translate", json=heavy, headers={"X-Timeout-Seconds": "0.1"})
    assert (r.status_code, r.json()) == (504, {"error": "deadline exceeded: the translation server did not answer "
                                                        "within 0.1 s"})
    wait_until(lambda: server.scheduler.in_flight == 0 and server.scheduler.queued == 0, 5)
    for bad in ("soon", "0", "-1", "nan"):
        r = gw.client.post("/v1/translate", json=heavy, headers={"X-Timeout-Seconds": bad})
        assert (r.status_code, r.json()) == (400, {"error": f"X-Timeout-Seconds: {bad!r} is not a number of seconds "
                                                            f"above 0"})
    # The header can only lower --timeout.
    g = GatewayThread(GatewayConfig(grpc_address=server.address, timeout=0.1))
    try:
        r = g.client.post("/v1/translate", json=heavy, headers={"X-Timeout-Seconds": "100"})
        assert (r.status_code, r.json()) == (504, {"error": "deadline exceeded: the translation server did not "
                                                            "answer within 0.1 s"})
    finally:
        g.stop()
    wait_until(lambda: server.scheduler.in_flight == 0 and server.scheduler.queued == 0, 5)


def test_a_client_that_goes_away_cancels_its_grpc_call(narrow):
    server, gw = narrow
    cancelled = 'nmt_requests_total{code="CANCELLED",method="Translate"}'
    before = metric(server, cancelled)
    body = json.dumps({"q": [LONG] * 64, "source": "en", "target": "de", "beam_size": 8,
                       "max_output_tokens": 200}).encode()  # seconds of work, 8 rows at a time
    with socket.create_connection(("127.0.0.1", gw.port)) as sock:
        sock.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        wait_until(lambda: server.scheduler.in_flight > 0, 10)
    gone = time.monotonic()
    wait_until(lambda: server.scheduler.in_flight == 0 and server.scheduler.queued == 0, 2.0)
    assert time.monotonic() - gone < 2.0
    wait_until(lambda: metric(server, cancelled) == before + 1, 2.0)  # the call was cancelled, not finished


def test_a_client_gone_while_sending_its_body_is_let_go(http, gw, caplog):
    with socket.create_connection(("127.0.0.1", gw.port)) as sock:
        sock.sendall(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"q\": ")
        time.sleep(0.2)
    time.sleep(0.3)
    assert http.get("/healthz").status_code == 200
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


# ---------------------------------------------------------------- configuration and the command
@pytest.mark.parametrize("argv, environ, message", [
    (["--port", "70000"], {}, "--port is 70000; give a port from 1 to 65535, or 0 for a free one"),
    (["--timeout", "0"], {}, "--timeout is 0.0; it must be a number of seconds above 0"),
    (["--max-body-bytes", "10"], {}, "--max-body-bytes is 10; it must be at least 1024"),
    (["--beam", "0"], {}, "--beam is 0; it must be at least 1"),
    (["--log-level", "loud"], {}, "--log-level is 'loud'; it must be DEBUG, INFO, WARNING or ERROR"),
    (["--grpc-address", "localhost"], {}, "--grpc-address is 'localhost'; give HOST:PORT, such as 127.0.0.1:50051"),
    (["--host", " "], {}, "--host is empty; give an address such as 127.0.0.1"),
    ([], {"NMT_HTTP_TIMEOUT": "soon"}, "NMT_HTTP_TIMEOUT='soon': expected a number"),
    (["--api-keys-file", "/nonexistent/keys"], {}, "--api-keys-file: /nonexistent/keys does not exist"),
    ([], {"NMT_HTTP_GRPC_TOKEN_FILE": "/"}, "--grpc-token-file: / is a directory; give a file"),
])
def test_bad_configuration_is_one_line_and_exit_2(argv, environ, message, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(argv, environ)
    assert e.value.code == EXIT_USAGE
    assert capsys.readouterr().err == f"nmt-http: error: {message} (see nmt-http --help)\n"


def test_a_keys_file_without_keys_is_refused(tmp_path, capsys):
    (tmp_path / "keys").write_text("# none yet\n\n")
    with pytest.raises(SystemExit):
        parse_args(["--api-keys-file", str(tmp_path / "keys")], {})
    assert capsys.readouterr().err == (f"nmt-http: error: --api-keys-file: {tmp_path / 'keys'} holds no key; put one "
                                       f"key per line (or leave --api-keys-file out to need none) (see nmt-http "
                                       f"--help)\n")


def test_environment_sets_and_flags_win(tmp_path):
    (tmp_path / "keys").write_text("k1\n")
    cfg = parse_args(["--port", "8080"], {"NMT_HTTP_PORT": "9000", "NMT_HTTP_GRPC_ADDRESS": "srv:50051",
                                          "NMT_HTTP_API_KEYS_FILE": str(tmp_path / "keys"),
                                          "NMT_HTTP_TIMEOUT": "2.5"})
    assert cfg == GatewayConfig(grpc_address="srv:50051", port=8080, api_keys_file=str(tmp_path / "keys"), timeout=2.5)
    assert [k.secret for k in cfg.api_keys()] == ["k1"]
    assert parse_args([], {}) == GatewayConfig()
    assert GatewayConfig().grpc_address == "127.0.0.1:50051" and (GatewayConfig().host, GatewayConfig().port) == \
        ("127.0.0.1", 5000)
    parser = build_parser()
    assert parser.prog == "nmt-http" and options_without_help(parser) == []
    help_text = " ".join(parser.format_help().split())
    assert "exit status: 0 stopped by SIGTERM or Ctrl-C; 1 failed while running" in help_text


def test_the_command_serves_and_stops_on_sigterm(server):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NMT_HTTP_GRPC_ADDRESS": server.address}
    proc = subprocess.Popen([sys.executable, "-m", "gateway.main", "--port", str(port)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def ready() -> bool:
            assert proc.poll() is None, proc.communicate()
            try:
                return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(ready, 30)
        r = httpx.post(f"http://127.0.0.1:{port}/translate", json={"q": "Jesus wept.", "source": "en", "target": "de"})
        assert r.status_code == 200
        # A second gateway on the same port: one line, exit 2.
        busy = subprocess.run([sys.executable, "-m", "gateway.main", "--port", str(port)], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        assert busy.returncode == EXIT_USAGE
        assert busy.stderr.splitlines()[-1] == (f"nmt-http: error: cannot listen for HTTP on 127.0.0.1:{port}: the "
                                                f"port is already in use; stop that process or pass another --port "
                                                f"(0 picks a free one)")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == EXIT_OK
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in proc.stderr.read()


def test_a_target_of_several_replicas_gets_calls_to_every_one(tiny_package):
    """One gRPC target that resolves to several servers (a Kubernetes headless Service, compose
    replicas by name) spreads the gateway's calls over all of them (round_robin), instead of
    sending every call to the first address as gRPC's default policy does."""
    replicas = [ServerThread(tiny_package), ServerThread(tiny_package)]
    g = GatewayThread(GatewayConfig(grpc_address="ipv4:" + ",".join(s.address for s in replicas)))
    ok = 'nmt_requests_total{code="OK",method="Translate"}'
    try:
        before = [metric(s, ok) for s in replicas]
        for i in range(16):
            r = g.client.post("/translate", json={"q": f"{TEXTS[0]} {i}", "source": "en", "target": "de"})
            assert r.status_code == 200, r.text
        served = [metric(s, ok) - b for s, b in zip(replicas, before)]
        assert sum(served) == 16 and min(served) >= 1, served  # pick_first: [16, 0]
    finally:
        g.stop()
        for s in replicas:
            s.stop()
