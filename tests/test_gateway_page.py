"""The gateway's web page (gateway/static/) in headless chromium against the real stack on
localhost: a gRPC server with the tiny model, the gateway (uvicorn, as nmt-http runs it) in
front of it, and the page doing what a person does: pick languages, type, translate, ask for
alternatives and attention maps, read the errors. What the page shows is compared with what
the gateway's JSON API answers to the same request.

Needs selenium, chromium and chromedriver (Debian: apt-get install chromium chromium-driver);
skipped, saying which is missing, without them."""

from __future__ import annotations

import importlib.util
import json
import shutil
import threading
import time
import urllib.error
import urllib.request

import pytest

from gateway.config import GatewayConfig
from gateway.main import listen
from gateway.main import server as gateway_server
from tests.server_harness import ServerThread

MAX_CHARS = 120
SENTENCE = "In the beginning was the Word."
TWO_SENTENCES = "Jesus wept. Peace be with you."
WAIT = 20  # seconds a page may take to show an answer (the tiny model answers in milliseconds)


def missing_parts() -> list[str]:
    missing = [] if importlib.util.find_spec("selenium") else ["selenium (pip install selenium)"]
    return missing + [name for name in ("chromium", "chromedriver") if not shutil.which(name)]


if missing_parts():  # checked before any fixture: the tiny model is not trained for nothing
    pytest.skip(f"the page's browser test needs {', '.join(missing_parts())} (Debian: apt-get install chromium "
                f"chromium-driver)", allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--disable-extensions", "--window-size=1200,1000"):
        options.add_argument(arg)
    b = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    yield b
    b.quit()


class Gateway:
    """The gateway as nmt-http runs it (uvicorn on a socket of gateway.main.listen), in a thread."""

    def __init__(self, grpc_address: str) -> None:
        self.sock = listen("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = gateway_server(GatewayConfig(grpc_address=grpc_address, port=0, log_level="WARNING"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        end = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < end, "the gateway did not start"
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()

    def api(self, path: str, body: dict | None = None) -> tuple[int, object]:
        """(status, JSON body) of a request to the gateway's API."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)


@pytest.fixture(scope="module")
def server(tiny_package):
    s = ServerThread(tiny_package, max_chars=MAX_CHARS)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def gateway(server):
    gw = Gateway(server.address)
    yield gw
    gw.stop()


@pytest.fixture
def page(browser, gateway):
    """The page freshly loaded, its pickers filled from /languages."""
    browser.get(gateway.url + "/")
    wait(browser, lambda: browser.find_element("id", "translate").is_enabled())
    return browser


def wait(browser, condition, timeout: float = WAIT):
    return WebDriverWait(browser, timeout, poll_frequency=0.02).until(lambda _: condition())


def by_id(browser, element_id: str):
    return browser.find_element("id", element_id)


def text_of(element) -> str:
    return element.get_attribute("textContent")


def choose(browser, source: str, target: str) -> None:
    Select(by_id(browser, "source")).select_by_value(source)
    Select(by_id(browser, "target")).select_by_value(target)


def enter(browser, text: str) -> None:
    box = by_id(browser, "text")
    box.clear()
    if text:
        box.send_keys(text)


def translate(browser) -> str:
    """Clicks Translate and waits for the answer: the translation shown, or the error."""
    browser.execute_script("document.getElementById('translation').textContent = '';")
    by_id(browser, "translate").click()
    wait(browser, lambda: text_of(by_id(browser, "translation")) or by_id(browser, "error").is_displayed())
    wait(browser, lambda: by_id(browser, "translate").is_enabled())
    return text_of(by_id(browser, "translation"))


def options(select) -> list[tuple[str, str]]:
    return [(o.get_attribute("value"), o.text) for o in select.find_elements("tag name", "option")]


def calls_to(browser, path: str) -> int:
    """How many requests the page has made to ``path`` since it was loaded."""
    return browser.execute_script(
        "return performance.getEntriesByType('resource').filter(e => new URL(e.name).pathname === arguments[0])"
        ".length;", path)


def test_pickers_follow_languages_and_swap(page, gateway):
    status, languages = gateway.api("/languages")
    assert status == 200 and {lang["code"] for lang in languages} == {"en", "de"}
    names = {lang["code"]: lang["name"] for lang in languages}
    assert options(by_id(page, "source")) == [("auto", "Detect language")] + [
        (lang["code"], f"{lang['name']} ({lang['code']})") for lang in languages]
    # Detection first and by default (LibreTranslate's); every target, English's first chosen.
    assert by_id(page, "source").get_attribute("value") == "auto"
    assert sorted(options(by_id(page, "target"))) == [("de", f"{names['de']} (de)"), ("en", f"{names['en']} (en)")]
    assert by_id(page, "target").get_attribute("value") == "de"
    assert not by_id(page, "swap").is_enabled()  # nothing detected yet: nothing to swap
    assert not by_id(page, "detected").is_displayed()
    choose(page, "en", "de")
    assert options(by_id(page, "target")) == [("de", f"{names['de']} (de)")]
    assert by_id(page, "swap").is_enabled()
    choose(page, "de", "en")
    assert options(by_id(page, "target")) == [("en", f"{names['en']} (en)")]
    # The swap button turns the pair around (both directions are served).
    by_id(page, "swap").click()
    assert by_id(page, "source").get_attribute("value") == "en"
    assert by_id(page, "target").get_attribute("value") == "de"
    # Accessible: every control has a label, the error element is an alert.
    for control in ("source", "target", "text", "alternatives", "attention"):
        assert page.execute_script("return document.getElementById(arguments[0]).labels.length", control) == 1
    assert by_id(page, "swap").get_attribute("aria-label") == "Swap languages"
    assert by_id(page, "error").get_attribute("role") == "alert"
    assert not by_id(page, "error").is_displayed() and not by_id(page, "result").is_displayed()
    assert text_of(by_id(page, "count")) == f"0 / {MAX_CHARS} characters"  # the limit from /v1/models


def test_translate_shows_the_translation(page, gateway):
    choose(page, "en", "de")
    enter(page, SENTENCE)
    # Records the button's and the result's state at every change of the button: the busy state.
    page.execute_script("""
        window.seen = [];
        const button = document.getElementById('translate'), result = document.getElementById('result');
        new MutationObserver(() => window.seen.push([button.disabled, button.textContent,
                                                     result.getAttribute('aria-busy')]))
            .observe(button, {attributes: true, childList: true, characterData: true, subtree: true});""")
    shown = translate(page)
    seen = page.execute_script("return window.seen;")
    assert [True, "Translating…", "true"] in seen and seen[-1] == [False, "Translate", "false"]
    status, answer = gateway.api("/v1/translate", {"q": SENTENCE, "source": "en", "target": "de",
                                                   "return_scores": False, "return_attention": False})
    assert status == 200
    assert shown and shown == answer["translations"][0]["hypotheses"][0]["text"]
    assert by_id(page, "result").is_displayed() and not by_id(page, "error").is_displayed()
    assert by_id(page, "translation").get_attribute("lang") == "de"
    assert not by_id(page, "hypotheses-section").is_displayed()
    assert not by_id(page, "attention-section").is_displayed()
    assert text_of(by_id(page, "status")).startswith("Translated in ")

    # Ctrl+Enter in the text box translates as well; German back to English.
    choose(page, "de", "en")
    enter(page, "Jesus weinte.")
    page.execute_script("document.getElementById('translation').textContent = '';")
    by_id(page, "text").send_keys(Keys.CONTROL, Keys.ENTER)
    wait(page, lambda: text_of(by_id(page, "translation")))
    _, answer = gateway.api("/v1/translate", {"q": "Jesus weinte.", "source": "de", "target": "en"})
    assert text_of(by_id(page, "translation")) == answer["translations"][0]["hypotheses"][0]["text"]
    assert by_id(page, "text").get_attribute("value") == "Jesus weinte."  # no newline typed


def test_alternatives_show_the_n_best_with_scores(page, gateway):
    choose(page, "en", "de")
    enter(page, SENTENCE)
    by_id(page, "alternatives").click()
    translate(page)
    status, answer = gateway.api("/v1/translate", {"q": SENTENCE, "source": "en", "target": "de", "beam_size": 4,
                                                   "num_hypotheses": 4, "return_scores": True,
                                                   "return_attention": False})
    assert status == 200
    hyps = answer["translations"][0]["hypotheses"]
    assert len(hyps) == 4
    items = page.find_elements("css selector", "#hypotheses li.hypothesis")
    assert [text_of(i.find_element("class name", "hyp-text")) for i in items] == [h["text"] for h in hyps]
    assert [text_of(i.find_element("class name", "score")) for i in items] == [f"{h['score']:.3f}" for h in hyps]
    assert text_of(by_id(page, "translation")) == hyps[0]["text"]

    # Several sentences: each sentence's own alternatives, under the sentence.
    enter(page, TWO_SENTENCES)
    translate(page)
    _, answer = gateway.api("/v1/translate", {"q": TWO_SENTENCES, "source": "en", "target": "de", "beam_size": 4,
                                              "num_hypotheses": 4, "return_scores": True})
    segments = answer["translations"][0]["segments"]
    assert len(segments) == 2
    groups = page.find_elements("css selector", "#hypotheses .segment")
    assert [text_of(g.find_element("tag name", "q")) for g in groups] == [s["source"] for s in segments]
    for group, segment in zip(groups, segments, strict=True):
        assert [text_of(i) for i in group.find_elements("class name", "hyp-text")] == \
            [h["text"] for h in segment["hypotheses"]]


def grid(browser, table) -> tuple[list[str], list[str], int]:
    """(column labels, row labels, cells) of an attention table, read in one script."""
    columns, labels, cells = browser.execute_script("""
        const t = arguments[0];
        const rows = [...t.querySelectorAll('tbody tr')];
        return [[...t.querySelectorAll('thead th.src')].map(th => th.textContent),
                rows.map(r => r.querySelector('th').textContent),
                rows.map(r => r.querySelectorAll('td').length)];""", table)
    assert cells == [len(columns)] * len(labels)
    return columns, labels, sum(cells)


def test_attention_map_is_a_grid_of_pieces(page, gateway):
    choose(page, "en", "de")
    enter(page, SENTENCE)
    by_id(page, "attention").click()
    translate(page)
    status, answer = gateway.api("/v1/translate", {"q": SENTENCE, "source": "en", "target": "de",
                                                   "return_attention": True})
    assert status == 200
    best = answer["translations"][0]["hypotheses"][0]
    assert best["attention"] and len(best["source_pieces"]) >= 3
    [table] = page.find_elements("css selector", "#attention-maps table.attention-grid")
    columns, rows, cells = grid(page, table)
    assert columns == best["source_pieces"]  # the columns: source pieces
    assert rows == best["target_pieces"]  # the rows: target pieces
    assert cells == len(best["target_pieces"]) * len(best["source_pieces"])
    # Each cell's shade and title carry its weight.
    first = table.find_element("css selector", "tbody tr td")
    assert first.get_attribute("title").endswith(f": {best['attention'][0][0]:.3f}")
    assert not by_id(page, "hypotheses-section").is_displayed()

    # Several sentences: one grid each, from the segments.
    enter(page, TWO_SENTENCES)
    translate(page)
    _, answer = gateway.api("/v1/translate", {"q": TWO_SENTENCES, "source": "en", "target": "de",
                                              "return_attention": True})
    segments = answer["translations"][0]["segments"]
    tables = page.find_elements("css selector", "#attention-maps table.attention-grid")
    assert len(tables) == len(segments) == 2
    for table, segment in zip(tables, segments, strict=True):
        h = segment["hypotheses"][0]
        columns, rows, _ = grid(page, table)
        assert (columns, rows) == (h["source_pieces"], h["target_pieces"])
        label = page.find_element("id", table.get_attribute("aria-labelledby"))
        assert text_of(label.find_element("tag name", "q")) == segment["source"]


def test_empty_text_is_refused_without_a_call(page):
    for blank in ("", "   "):
        enter(page, blank)
        by_id(page, "translate").click()
        error = by_id(page, "error")
        assert error.is_displayed() and text_of(error) == "Enter a text to translate."
        assert page.switch_to.active_element.get_attribute("id") == "text"  # back to the text box
        assert not by_id(page, "result").is_displayed()
    assert calls_to(page, "/v1/translate") == 0
    # The message goes once a translation succeeds.
    enter(page, SENTENCE)
    assert translate(page)
    assert not by_id(page, "error").is_displayed()


def test_over_long_text_shows_the_servers_message(page, gateway):
    text = ("In the beginning was the Word, and the Word was with God, and the Word was God. " * 2).strip()
    assert len(text) > MAX_CHARS
    choose(page, "en", "de")
    enter(page, SENTENCE)
    assert translate(page)  # a translation first: an error replaces it
    enter(page, text)
    count = by_id(page, "count")
    assert text_of(count) == f"{len(text)} / {MAX_CHARS} characters" and "over" in count.get_attribute("class")
    translate(page)
    status, answer = gateway.api("/v1/translate", {"q": text, "source": "en", "target": "de"})
    assert status == 400 and f"the limit is {MAX_CHARS}" in answer["error"]
    error = by_id(page, "error")
    assert error.is_displayed() and text_of(error) == answer["error"]
    assert not by_id(page, "result").is_displayed()
    assert calls_to(page, "/v1/translate") == 2


def test_unreachable_gateway_is_a_message(browser, server):
    """The page loaded, then its gateway gone: translating says it cannot reach the service."""
    own = Gateway(server.address)
    try:
        browser.get(own.url + "/")
        wait(browser, lambda: by_id(browser, "translate").is_enabled())
    finally:
        own.stop()
    enter(browser, SENTENCE)
    by_id(browser, "translate").click()
    wait(browser, lambda: by_id(browser, "error").is_displayed())
    assert text_of(by_id(browser, "error")).startswith("Could not reach the translation service (")
    assert not by_id(browser, "result").is_displayed()
    assert by_id(browser, "translate").is_enabled()


def test_detect_language_shows_the_detected_language_and_swaps_it(page, gateway):
    """The default "Detect language" translates with LibreTranslate's source "auto" and shows its
    detectedLanguage beside the source picker; the swap button, disabled until a language is
    detected, then swaps the detected language."""
    assert by_id(page, "source").get_attribute("value") == "auto"
    enter(page, SENTENCE)
    shown = translate(page)
    status, answer = gateway.api("/translate", {"q": SENTENCE, "source": "auto", "target": "de"})
    assert status == 200 and answer["detectedLanguage"]["language"] == "en"
    confidence = answer["detectedLanguage"]["confidence"]
    assert shown and shown == answer["translatedText"]
    detected = by_id(page, "detected")
    assert detected.is_displayed() and text_of(detected) == f"Detected: English ({int(confidence + 0.5)}%)"
    assert calls_to(page, "/translate") == 1 and calls_to(page, "/v1/translate") == 0
    assert not by_id(page, "error").is_displayed()

    # Alternatives with detection: the n-best of the detected language's /v1/translate.
    by_id(page, "alternatives").click()
    shown = translate(page)
    _, v1 = gateway.api("/v1/translate", {"q": SENTENCE, "source": "en", "target": "de", "num_hypotheses": 4,
                                          "return_scores": True})
    hyps = v1["translations"][0]["hypotheses"]
    assert shown == hyps[0]["text"] == answer["translatedText"]
    assert [text_of(i) for i in page.find_elements("css selector", "#hypotheses .hyp-text")] == \
        [h["text"] for h in hyps]
    assert text_of(detected).startswith("Detected: English (")

    # Swapping uses the detected language: German to English, the translation as the text.
    assert by_id(page, "swap").is_enabled()
    by_id(page, "swap").click()
    assert by_id(page, "source").get_attribute("value") == "de"
    assert by_id(page, "target").get_attribute("value") == "en"
    assert by_id(page, "text").get_attribute("value") == shown
    assert not detected.is_displayed()

    # Back to detection: the detected language is gone until the next translation.
    Select(by_id(page, "source")).select_by_value("auto")
    assert not detected.is_displayed() and not by_id(page, "swap").is_enabled()


def test_copy_button_puts_the_translation_on_the_clipboard(page, gateway):
    page.execute_cdp_cmd("Browser.grantPermissions", {
        "origin": gateway.url, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
    choose(page, "en", "de")
    enter(page, SENTENCE)
    shown = translate(page)
    assert shown
    copy = by_id(page, "copy")
    assert copy.is_displayed() and text_of(copy) == "Copy"
    page.execute_script("window.focus();")
    copy.click()
    wait(page, lambda: text_of(by_id(page, "copied")) == "Copied")
    clipboard = page.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "navigator.clipboard.readText().then(done, e => done('failed: ' + e));")
    assert clipboard == shown
    wait(page, lambda: text_of(by_id(page, "copied")) == "")  # "Copied" shows briefly

    # Without the asynchronous clipboard (refused): the translation is selected and copied.
    page.execute_script("navigator.clipboard.writeText = () => Promise.reject(new Error('refused'));")
    copy.click()
    wait(page, lambda: text_of(by_id(page, "copied")) != "")
    assert text_of(by_id(page, "copied")) in ("Copied", "Selected: press Ctrl+C to copy")
    assert page.execute_script("return window.getSelection().toString();") == shown


def test_a_file_translated_from_the_page(page, gateway, tmp_path):
    """The file section (shown once /frontend/settings lists the formats): a file chosen,
    translated by /translate_file with the languages above, and a link that downloads it under
    LibreTranslate's name; a format none reads shows the gateway's reason."""
    source = tmp_path / "verses.txt"
    source.write_text(f"{SENTENCE}\n\n{TWO_SENTENCES}\n")
    choose(page, "en", "de")
    wait(page, lambda: by_id(page, "file-form").is_displayed())
    assert by_id(page, "file").get_attribute("accept") == ".txt,.html,.htm,.md,.srt,.vtt,.docx,.odt"
    by_id(page, "file").send_keys(str(source))
    by_id(page, "translate-file").click()
    wait(page, lambda: by_id(page, "file-link").is_displayed() or by_id(page, "error").is_displayed())
    link = by_id(page, "file-link")
    assert (text_of(link), link.get_attribute("download")) == ("Download verses_de.txt", "verses_de.txt")
    with urllib.request.urlopen(link.get_attribute("href"), timeout=30) as r:
        assert r.headers["Content-Disposition"] == 'attachment; filename="verses_de.txt"'
        lines = r.read().decode().split("\n")
    _, first = gateway.api("/translate", {"q": SENTENCE, "source": "en", "target": "de"})
    _, second = gateway.api("/translate", {"q": TWO_SENTENCES, "source": "en", "target": "de"})
    assert lines == [first["translatedText"], "", second["translatedText"], ""]

    unsupported = tmp_path / "slides.pdf"
    unsupported.write_bytes(b"%PDF-1.4")
    by_id(page, "file").send_keys(str(unsupported))
    by_id(page, "translate-file").click()
    wait(page, lambda: by_id(page, "error").is_displayed())
    assert "file format not supported (.pdf" in text_of(by_id(page, "error"))
    assert not by_id(page, "file-link").is_displayed()
