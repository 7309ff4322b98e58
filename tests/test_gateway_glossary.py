"""The gateway's glossary and do-not-translate parameters (gateway/terms.py) on /v1/translate and
LibreTranslate's /translate (our extension), and HTML's translate="no" and class="notranslate"
(documents/html_text.py), against a real server with the tiny model and a named glossary."""

from __future__ import annotations

import json
import re

import pytest

from documents.html_text import HtmlText, untranslated
from gateway.config import GatewayConfig
from gateway.terms import Terms, TermsInvalid, terms_of
from nmt.v1 import translator_pb2 as pb
from server.glossary import MAX_KEEP
from tests.gateway_harness import GatewayThread
from tests.server_harness import ServerThread


def count(text: str, term: str) -> int:
    return len(re.findall(rf"(?<!\w){re.escape(term)}(?!\w)", text))


# ------------------------------------------------------------------ the parameters' shapes

def test_terms_come_as_json_values_or_as_a_forms_json_text():
    assert terms_of({"keep": ["Acme", "C++"], "glossary": {"file": "Datei"}, "glossary_name": " acme "}) == \
        Terms(("Acme", "C++"), (("file", "Datei"),), "acme")
    assert terms_of({"keep": "Acme Cloud", "glossary": '[{"source": "file", "target": "Datei"}]'}) == \
        Terms(("Acme Cloud",), (("file", "Datei"),))
    assert terms_of({"keep": '["a", "b"]', "glossary": '{"x": "y"}'}) == Terms(("a", "b"), (("x", "y"),))
    request = pb.TranslateRequest()
    Terms(("a",), (("x", "y"),), "n").apply(request, ["b", "a"])
    assert (list(request.keep), [(e.source, e.target) for e in request.glossary], request.glossary_name) == \
        (["a", "b"], [("x", "y")], "n")


@pytest.mark.parametrize("p, message", [
    ({"keep": [1]}, "keep: expected a list of strings"),
    ({"keep": "[1,"}, "keep: not valid JSON (Expecting value at character 4)"),
    ({"glossary": ["file"]}, 'glossary: expected an object {"source term": "target term"} or a list of '
                             '{"source": ..., "target": ...} objects'),
    ({"glossary": {"file": 1}}, 'glossary: expected an object {"source term": "target term"} or a list of '
                                '{"source": ..., "target": ...} objects, with strings'),
    ({"glossary_name": 3}, "glossary_name: expected a glossary's name (a string)"),
])
def test_a_parameter_of_the_wrong_shape_is_named(p, message):
    with pytest.raises(TermsInvalid) as e:
        terms_of(p)
    assert str(e.value) == message


# ------------------------------------------------------------------ translate="no"

def test_elements_not_to_translate_are_found_by_attribute_or_class():
    assert untranslated('<span translate="no">') and untranslated("<div TRANSLATE=No>")
    assert untranslated("<code class='x notranslate y'>") and untranslated("<p class=notranslate>")
    assert not untranslated('<span translate="yes">') and not untranslated('<span class="notranslated">')
    assert not untranslated('<span title="translate=no">')


PAGE = ('<h1>Peace be with you.</h1>\n<p>Peace be <span translate="no">with &amp; <b>you</b></span> all.</p>\n'
        '<div class="notranslate"><p>Peace <b>be</b> with you.</p><div>nested</div></div>\n'
        '<p translate="no">Jesus wept.</p>\n<pre class="box notranslate">Peace\n  be</pre>')
KEPT_INLINE = '<span translate="no">with &amp; <b>you</b></span>'
KEPT_BLOCKS = ['<div class="notranslate"><p>Peace <b>be</b> with you.</p><div>nested</div></div>',
               '<p translate="no">Jesus wept.</p>', '<pre class="box notranslate">Peace\n  be</pre>']


def test_html_not_to_translate_is_not_sent_and_its_inline_text_is_kept():
    h = HtmlText(PAGE)
    assert h.texts == ["Peace be with you.", "Peace be with & you all."]
    assert h.kept == ["with & you"]
    out = h.render(["Friede sei mit euch.", "Friede sei with & you allen."])
    assert all(block in out for block in KEPT_BLOCKS)
    assert f"Friede sei {KEPT_INLINE} allen." in out
    # The kept text is not in the translation: the element is written where the placement puts it.
    out = h.render(["Friede sei mit euch.", "Friede sei mit euch allen."])
    assert out.count(KEPT_INLINE) == 1 and all(block in out for block in KEPT_BLOCKS)


# ------------------------------------------------------------------ a real gateway and server

@pytest.fixture(scope="module")
def gw(tiny_package, tmp_path_factory):
    terms = tmp_path_factory.mktemp("glossary") / "bible.tsv"
    terms.write_text("en\tde\npeace\tFriede\n")
    server = ServerThread(tiny_package, glossary=(f"bible={terms}",))
    g = GatewayThread(GatewayConfig(grpc_address=server.address))
    yield g
    g.stop()
    server.stop()


def test_v1_translate_keeps_and_forces_terms(gw):
    r = gw.client.post("/v1/translate", json={"q": ["Peace be with you.", "Jesus wept, Zorblax."], "source": "en",
                                              "target": "de", "keep": ["zorblax"], "glossary": {"peace": "Friede"}})
    assert r.status_code == 200, r.text
    first, second = (t["hypotheses"][0]["text"] for t in r.json()["translations"])
    assert count(first, "Friede") == 1 and count(second, "Zorblax") == 1, (first, second)
    r = gw.client.post("/v1/translate", json={"q": "Peace be with you.", "source": "en", "target": "de",
                                              "glossary_name": "bible"})
    assert r.status_code == 200 and count(r.json()["translations"][0]["hypotheses"][0]["text"], "Friede") == 1


def test_libretranslate_translate_takes_them_as_our_extension(gw):
    r = gw.client.post("/translate", json={"q": "Peace be with you.", "source": "en", "target": "de",
                                           "glossary": [{"source": "peace", "target": "Friede"}]})
    assert r.status_code == 200 and count(r.json()["translatedText"], "Friede") == 1, r.text
    # A form's values are strings: JSON text, or keep's one span. One span a sentence: with two in
    # four words the tiny model may drop one, depending on the CPU's kernels.
    r = gw.client.post("/translate", data={"q": "Peace be with you.", "source": "en", "target": "de",
                                           "glossary": json.dumps({"peace": "FRIEDE"})})
    assert r.status_code == 200 and count(r.json()["translatedText"], "FRIEDE") == 1, r.text
    r = gw.client.post("/translate", data={"q": "Jesus wept, Zorblax.", "source": "en", "target": "de",
                                           "keep": "Zorblax"})
    assert r.status_code == 200 and count(r.json()["translatedText"], "Zorblax") == 1, r.text
    r = gw.client.post("/translate", params={"q": "Peace.", "source": "en", "target": "de", "glossary_name": "bible"})
    assert r.status_code == 200 and count(r.json()["translatedText"], "Friede") == 1, r.text


def test_the_servers_refusals_and_bad_shapes_are_400_naming_them(gw):
    r = gw.client.post("/translate", json={"q": "Peace.", "source": "en", "target": "de",
                                           "keep": [f"k{i}" for i in range(MAX_KEEP + 1)]})
    assert (r.status_code, r.json()["error"]) == (400, f"keep: {MAX_KEEP + 1} spans; the limit is {MAX_KEEP}")
    r = gw.client.post("/translate", json={"q": "Peace.", "source": "en", "target": "de", "glossary": ["x"]})
    assert r.status_code == 400 and r.json()["error"].startswith("Invalid request: glossary: expected an object")
    r = gw.client.post("/v1/translate", json={"q": "Peace.", "source": "en", "target": "de", "glossary_name": "x"})
    assert (r.status_code, r.json()["error"]) == (400, "glossary_name 'x' is not a glossary of this server; "
                                                       "loaded: bible")


def test_html_not_to_translate_comes_back_byte_for_byte_in_place(gw):
    r = gw.client.post("/translate", json={"q": PAGE, "source": "en", "target": "de", "format": "html"})
    assert r.status_code == 200, r.text
    out = r.json()["translatedText"]
    for block in KEPT_BLOCKS:
        assert out.count(block) == 1, out
    assert out.count(KEPT_INLINE) == 1, out
    # In place: the blocks keep their order among the others, the inline element stays in its paragraph.
    assert [out.index(b) for b in KEPT_BLOCKS] == sorted(out.index(b) for b in KEPT_BLOCKS)
    paragraph = out.split("\n")[1]
    assert paragraph.startswith("<p>") and paragraph.endswith("</p>") and KEPT_INLINE in paragraph
    assert out.split("\n")[0].startswith("<h1>") and out.index(KEPT_INLINE) < out.index(KEPT_BLOCKS[0])
