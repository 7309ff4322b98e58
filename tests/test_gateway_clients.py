"""The gateway as a drop-in for LibreTranslate, driven by three of LibreTranslate's client
libraries from PyPI (the `dev` extra pins them): libretranslatepy (form bodies, urllib),
deep-translator's LibreTranslator (every parameter in the URL of a POST, requests) and
libretranslate-aio (form bodies, httpx; it also reads /frontend/settings and /health), against
the real gateway and gRPC server with the tiny model, with and without API keys."""

from __future__ import annotations

import urllib.error

import pytest
from deep_translator import LibreTranslator
from deep_translator.exceptions import AuthorizationException, ServerException
from libretranslate_aio import LibreTranslate
from libretranslate_aio.exceptions import BadRequestError, ForbiddenError
from libretranslatepy import LibreTranslateAPI

from gateway.config import GatewayConfig, parse_args
from tests.gateway_harness import GatewayThread
from tests.server_harness import ServerThread

ENGLISH = "In the beginning was the Word, and the Word was with God."
GERMAN = "Im Anfang war das Wort, und das Wort war bei Gott."


@pytest.fixture(scope="module")
def server(tiny_package):
    s = ServerThread(tiny_package, max_chars=500)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def open_gw(server):
    g = GatewayThread(GatewayConfig(grpc_address=server.address))
    yield g
    g.stop()


@pytest.fixture(scope="module")
def keyed_gw(server, tmp_path_factory):
    keys = tmp_path_factory.mktemp("keys") / "keys"
    keys.write_text("k-alice\n")
    cfg = parse_args(["--grpc-address", server.address, "--api-keys-file", str(keys)], {})
    g = GatewayThread(cfg, cfg.api_keys())
    yield g
    g.stop()


def expected(gw: GatewayThread, text: str, source: str = "en", target: str = "de") -> str:
    r = gw.client.post("/translate", json={"q": text, "source": source, "target": target, "api_key": "k-alice"})
    assert r.status_code == 200, r.text
    return r.json()["translatedText"]


@pytest.mark.parametrize("key", [None, "k-alice"])
def test_libretranslatepy(request, key):
    gw = request.getfixturevalue("keyed_gw" if key else "open_gw")
    lt = LibreTranslateAPI(gw.url, api_key=key)
    assert lt.translate(ENGLISH, "en", "de") == expected(gw, ENGLISH)
    assert lt.translate(ENGLISH, "auto", "de") == expected(gw, ENGLISH)
    assert lt.detect(GERMAN)[0]["language"] == "de"
    assert {lang["code"]: lang["targets"] for lang in lt.languages()} == {"de": ["en"], "en": ["de"]}


def test_libretranslatepy_without_or_with_a_wrong_key(keyed_gw):
    with pytest.raises(urllib.error.HTTPError) as e:
        LibreTranslateAPI(keyed_gw.url).translate(ENGLISH, "en", "de")
    assert e.value.code == 400
    with pytest.raises(urllib.error.HTTPError) as e:
        LibreTranslateAPI(keyed_gw.url, api_key="k-eve").detect(ENGLISH)
    assert e.value.code == 403


@pytest.mark.parametrize("keyed", [False, True])
def test_deep_translator(request, keyed):
    gw = request.getfixturevalue("keyed_gw" if keyed else "open_gw")
    # deep-translator always sends a key (an open gateway ignores it), in the URL of a POST.
    t = LibreTranslator(source="en", target="de", api_key="k-alice", custom_url=gw.url + "/")
    assert t.translate(ENGLISH) == expected(gw, ENGLISH)
    assert t.translate_batch([ENGLISH, "Jesus wept."]) == [expected(gw, ENGLISH), expected(gw, "Jesus wept.")]
    auto = LibreTranslator(source="auto", target="en", api_key="k-alice", custom_url=gw.url + "/")
    assert auto.translate(GERMAN) == expected(gw, GERMAN, "de", "en")
    if keyed:
        with pytest.raises(AuthorizationException):
            LibreTranslator(source="en", target="de", api_key="k-eve", custom_url=gw.url + "/").translate(ENGLISH)
    with pytest.raises(ServerException):  # a pair no model serves is LibreTranslate's 400
        LibreTranslator(source="en", target="fr", api_key="k-alice", custom_url=gw.url + "/").translate(ENGLISH)


@pytest.mark.parametrize("key", [None, "k-alice"])
def test_libretranslate_aio(request, key):
    gw = request.getfixturevalue("keyed_gw" if key else "open_gw")
    with LibreTranslate(gw.url, api_key=key) as lt:
        assert lt.health()
        settings = lt.frontend_settings()
        assert (settings.char_limit, settings.key_required, settings.api_keys) == (500, bool(key), bool(key))
        assert settings.language.source.code == "auto" and ".docx" in settings.supported_files_format
        assert {lang.code: lang.targets for lang in lt.languages()} == {"de": ["en"], "en": ["de"]}
        t = lt.translate(ENGLISH, "en", "de")
        assert t.translated_text == expected(gw, ENGLISH) and t.detected_language is None
        t = lt.translate([ENGLISH, GERMAN, "12345"], "auto", "de")
        assert t.translated_text == [expected(gw, ENGLISH), GERMAN, "12345"]
        assert [d.language for d in t.detected_language] == ["en", "de", "en"]
        assert t.detected_language[2].confidence == 0.0
        t = lt.translate(GERMAN, "auto", "en", alternatives=2)
        assert t.detected_language.language == "de" and t.translated_text == expected(gw, GERMAN, "de", "en")
        assert isinstance(t.alternatives, list)
        ranked = lt.detect(ENGLISH)
        assert ranked[0].language == "en" and ranked[0].confidence > 50
        with pytest.raises(BadRequestError, match="fr is not supported"):
            lt.translate(ENGLISH, "en", "fr")
    if key:
        with LibreTranslate(gw.url) as lt, pytest.raises(BadRequestError, match="API key"):
            lt.translate(ENGLISH, "en", "de")
        with LibreTranslate(gw.url, api_key="k-eve") as lt, pytest.raises(ForbiddenError, match="Invalid API key"):
            lt.detect(ENGLISH)
