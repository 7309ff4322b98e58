"""Pivoting (server/pivot.py): routes planned from the models' pairs, the legs' attention
composed, and a real server with two tiny models (en<->de, en<->fr) translating de<->fr
through English."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from engine.defaults import BEAM_SIZE
from gateway.config import GatewayConfig
from nmt.v1 import translator_pb2 as pb
from server.pivot import Route, compose_attention, piece_spans, route, routes
from server.segment import join, split_sentences
from tests.gateway_harness import GatewayThread
from tests.sentence_reference import Alone
from tests.server_harness import ServerThread, code_and_details, request

PAIRS = {"a": ("en-de", "de-en"), "b": ("en-fr", "fr-en"), "c": ("de-es",)}


def test_route_prefers_the_named_then_the_default_model_then_any():
    assert route(PAIRS, "en", "de") == Route("en-de", "a")
    assert route(PAIRS, "en", "fr", default="a") == Route("en-fr", "b")
    assert route(PAIRS, "de", "es", default="a") == Route("de-es", "c")
    assert route(PAIRS, "en", "fr", named="a") is None  # a named model: only that model


def test_route_through_english_across_models_and_within_one():
    assert route(PAIRS, "de", "fr", default="a") == Route("de-fr", "b", "en", "a")
    assert route(PAIRS, "fr", "de", default="a") == Route("fr-de", "a", "en", "b")
    both = {"m": ("en-de", "de-en", "en-fr", "fr-en")}
    assert route(both, "de", "fr", named="m") == Route("de-fr", "m", "en", "m")
    assert route(PAIRS, "es", "de") is None  # nothing serves es -> en
    assert route(PAIRS, "de", "xx") is None


def test_routes_lists_every_pair_only_a_pivot_serves():
    assert [(r.pair, r.via, r.first, r.second) for r in routes(PAIRS, "a")] == [
        ("de-fr", "en", "a", "b"), ("fr-de", "en", "b", "a")]
    assert routes({"m": ("en-de", "de-en")}) == []


def test_piece_spans_count_word_markers_bytes_and_no_control_pieces():
    spans = piece_spans(["<2de>", "▁Hi", "<0xE2>", "!", "</s>"])
    assert spans == [(0.0, 0.0), (0.0, 0.6), (0.6, 0.8), (0.8, 1.0), (1.0, 1.0)]


def test_compose_attention_chains_the_legs_over_the_pivot_text():
    # Source pieces s0 s1; pivot "▁ab▁c" written as [▁ab, ▁c]; read back as [▁a, b, ▁c, </s>].
    first = np.array([[0.0, 1.0], [1.0, 0.0]], dtype=np.float32)  # ▁ab <- s1, ▁c <- s0
    second = np.array([[1.0, 0.0, 0.0, 0.0],  # t0 reads ▁a (inside ▁ab: s1)
                       [0.0, 0.0, 0.5, 0.5],  # t1 reads ▁c and </s> (no length): s0
                       [0.0, 0.0, 0.0, 1.0]], dtype=np.float32)  # t2 only </s>: nothing
    out = compose_attention(first, ["▁ab", "▁c"], second, ["▁a", "b", "▁c", "</s>"])
    assert out.dtype == np.float32
    assert out.tolist() == [[0.0, 1.0], [1.0, 0.0], [0.0, 0.0]]


@pytest.fixture(scope="module")
def server(tiny_package, tiny_fr_package):
    s = ServerThread(tiny_package, model=(f"tiny={tiny_package}", f"fr={tiny_fr_package}"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def stub(server):
    return server.stub()


def test_list_models_names_the_pivots(stub):
    pivots = stub.ListModels(pb.ListModelsRequest()).pivots
    assert [(p.pair, p.via, p.first_model, p.second_model) for p in pivots] == [
        ("de-fr", "en", "tiny", "fr"), ("fr-de", "en", "fr", "tiny")]


def test_de_fr_goes_through_english_sentence_by_sentence(stub, tiny_package, tiny_fr_package):
    text = "Und Jesus weinte. Das Wort war bei Gott."
    response = stub.Translate(request(text, src="de", tgt="fr"))
    assert (response.model, response.pivot_lang, response.pivot_model) == ("fr", "en", "tiny")
    de_en, en_fr = Alone(tiny_package), Alone(tiny_fr_package)
    spans = split_sentences(text, "de")
    expected = [en_fr.sentence(de_en.sentence(text[s:e], "en"), "fr") for s, e in spans]
    [translation] = response.translations
    assert [s.source for s in translation.segments] == [text[s:e] for s, e in spans]
    assert [s.hypotheses[0].text for s in translation.segments] == expected
    assert translation.hypotheses[0].text == join(text, spans, expected)


def test_a_direct_pair_is_not_marked(stub):
    response = stub.Translate(request("Jesus wept.", src="en", tgt="fr"))
    assert (response.model, response.pivot_lang, response.pivot_model) == ("fr", "", "")


def test_pivot_keeps_n_best_and_composes_attention(stub):
    response = stub.Translate(request("Jesus weinte.", src="de", tgt="fr", beam_size=2, num_hypotheses=2,
                                      return_attention=True, return_scores=True))
    hyps = response.translations[0].hypotheses
    assert len(hyps) == 2
    direct = stub.Translate(request("Jesus weinte.", src="de", tgt="en", return_attention=True))
    for h in hyps:
        assert list(h.source_pieces) == list(direct.translations[0].hypotheses[0].source_pieces)
        a = np.asarray(h.attention).reshape(len(h.target_pieces), len(h.source_pieces))
        sums = a.sum(axis=1)
        assert np.all((np.abs(sums - 1) < 1e-4) | (sums == 0)) and sums.max() > 0


def test_a_named_model_pivots_only_within_itself(stub):
    code, details = code_and_details(lambda: stub.Translate(pb.TranslateRequest(
        texts=["Jesus weinte."], source_lang="de", target_lang="fr", model="tiny")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details == "language pair 'de-fr' is not supported by model 'tiny'; supported: en-de, de-en"


def test_blank_and_letterless_texts_come_back_through_a_pivot(stub):
    response = stub.Translate(request("", "123 ...", src="de", tgt="fr"))
    assert [t.hypotheses[0].text for t in response.translations] == ["", "123 ..."]


def test_the_gateway_offers_and_translates_a_pivot_pair(server, stub):
    g = GatewayThread(GatewayConfig(grpc_address=server.address))
    try:
        languages = {x["code"]: x["targets"] for x in g.client.get("/languages").json()}
        assert languages == {"de": ["en", "fr"], "en": ["de", "fr"], "fr": ["de", "en"]}
        expected = stub.Translate(request("Jesus weinte.", src="de", tgt="fr", beam_size=BEAM_SIZE))
        r = g.client.post("/translate", json={"q": "Jesus weinte.", "source": "de", "target": "fr"})
        assert (r.status_code, r.json()) == (200, {"translatedText": expected.translations[0].hypotheses[0].text})
        r = g.client.post("/v1/translate", json={"q": ["Jesus weinte."], "source": "de", "target": "fr"})
        assert r.status_code == 200
        assert (r.json()["model"], r.json()["pivot"]) == ("fr", {"via": "en", "model": "tiny"})
    finally:
        g.stop()
